// cli: the model cache — `lanes pull REF` downloads a GGUF (src/pull: resumed, size and the
// hub's SHA-256 checked, validated as GGUF before it takes its name), `lanes ls` lists the cache
// and `lanes rm NAME` deletes; `lanes serve -m hf:...` pulls first.
#include "base/base.h"
#include "cli/cli.h"
#include "pull/pull.h"

#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

void cli_pull_config(const cli_settings *s, pull_config *c) {
	*c = (pull_config){.dir = s->models_dir, .endpoint = s->hf_endpoint, .token = s->hf_token, .stall_s = s->pull_stall_s,
			   .max_bytes = s->pull_max_bytes, .urls = true};
}

static bool ends_with(const char *s, const char *suf) {
	const size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcasecmp(s + a - b, suf);
}

// The bar follows the download; it ends when the file is whole.
static int on_progress(void *ud, const pull_progress *p) {
	cli_progress *bar = ud;
	if (p->stage == PULL_DOWNLOAD) cli_progress_update(bar, p->done, p->total, NULL);
	else if (p->stage == PULL_VERIFY) cli_progress_end(bar);
	return 0;
}

int cli_pull(const cli_settings *s, const char *ref, char *path, size_t n) {
	pull_config c;
	cli_pull_config(s, &c);
	cli_progress bar;
	cli_progress_start(&bar, "pull", true, true);
	char err[1024];
	const int rc = pull_model(&c, ref, on_progress, &bar, path, n, NULL, 0, err, sizeof err);
	cli_progress_end(&bar);
	if (rc) cli_err("%s", err);
	return rc ? -1 : 0;
}

bool cli_is_pull_ref(const char *m) { return pull_is_ref(m); }

int cmd_pull(const cli_settings *s) {
	char path[4096];
	if (cli_pull(s, s->pos[0], path, sizeof path)) return 1;
	printf("%s\n", path);
	return 0;
}

// ---- ls and rm -----------------------------------------------------------------------------

static size_t ls_root;
static int ls_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
	if (flag == FTW_F && ends_with(p, ".gguf")) printf("%10.1f MiB  %s\n", (double)st->st_size / 1048576.0, p + ls_root + 1);
	if (flag == FTW_F && ends_with(p, ".gguf.part")) printf("%10.1f MiB  %s (partial)\n", (double)st->st_size / 1048576.0, p + ls_root + 1);
	return 0;
}

int cmd_ls(const cli_settings *s) {
	char dir[2048];
	pull_config c;
	cli_pull_config(s, &c);
	pull_cache_dir(&c, dir, sizeof dir);
	ls_root = strlen(dir);
	struct stat st;
	if (stat(dir, &st)) return 0; // nothing pulled yet
	return nftw(dir, ls_one, 16, FTW_PHYS) ? 1 : 0;
}

int cmd_rm(const cli_settings *s) {
	char dir[2048], path[4096], part[4200];
	pull_config c;
	cli_pull_config(s, &c);
	pull_cache_dir(&c, dir, sizeof dir);
	const char *name = s->pos[0];
	if (!strncmp(name, "hf:", 3)) name += 3;
	if (!pull_safe_path(name, true) || !ends_with(name, ".gguf")) {
		cli_err("'%s' is not a cached model: give a name as `lanes ls` prints it", s->pos[0]);
		return 2;
	}
	snprintf(path, sizeof path, "%s/%s", dir, name);
	snprintf(part, sizeof part, "%s.part", path);
	const bool a = !unlink(path), b = !unlink(part);
	if (!a && !b) {
		cli_err("%s is not in the cache", name);
		return 1;
	}
	printf("removed %s\n", name);
	return 0;
}
