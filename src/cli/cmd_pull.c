// cli: the model cache — `lanes pull REF` downloads a GGUF (src/pull: retried with backoff,
// resumed, size and the hub's SHA-256 checked, validated as GGUF before it takes its name),
// `lanes ls` lists the cache (partial downloads marked), `lanes rm NAME` deletes by any name ls
// prints, -m NAME finds a cached model, and `lanes serve -m hf:...` pulls first.
#include "base/base.h"
#include "cli/cli.h"
#include "pull/pull.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

void cli_pull_config(const cli_settings *s, pull_config *c) {
	*c = (pull_config){.dir = s->models_dir, .endpoint = s->hf_endpoint, .token = s->hf_token, .stall_s = s->pull_stall_s,
			   .max_bytes = s->pull_max_bytes, .tries = (int)s->pull_tries, .retry_ms = s->pull_retry_ms,
			   .retry_max_ms = s->pull_retry_max_ms, .urls = true};
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

int cli_model_lookup(cli_settings *s) {
	static char path[4096];
	struct stat st;
	if (!s->model || !stat(s->model, &st)) return 0; // a file of that name wins
	pull_config c;
	cli_pull_config(s, &c);
	char rel[1024], err[1024], dir[2048];
	const int rc = pull_cache_find(&c, s->model, rel, sizeof rel, err, sizeof err);
	const bool serve = s->cmd->id == CMD_SERVE;
	if (!rc) {
		pull_cache_dir(&c, dir, sizeof dir);
		snprintf(path, sizeof path, "%s/%s", dir, rel);
		s->model = path;
		return 0;
	}
	if (serve && pull_is_ref(s->model)) return 0; // serve pulls it, resuming a partial download
	if (rc == LANES_EBUSY) {
		cli_err("%s", err);
		return 1;
	}
	if (!serve && pull_is_ref(s->model)) {
		cli_err("'%s' is neither a file nor in the model cache: `lanes pull %s` first", s->model, s->model);
		return 1;
	}
	return 0; // the command says the file is missing
}

// ---- ls and rm -----------------------------------------------------------------------------

typedef struct {
	char name[1024];
	int64_t bytes;
	bool partial;
} ls_entry;

static ls_entry *ls_list;
static size_t ls_n, ls_cap, ls_root;

static int ls_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
	(void)ftw;
	const char *rel = p + ls_root + 1;
	const bool part = ends_with(rel, ".gguf.part");
	if (flag != FTW_F || (!part && !ends_with(rel, ".gguf")) || strstr(rel, "/.") || rel[0] == '.') return 0;
	if (ls_n == ls_cap) {
		ls_entry *n = realloc(ls_list, (ls_cap = ls_cap ? 2 * ls_cap : 64) * sizeof *n);
		if (!n) return -1;
		ls_list = n;
	}
	ls_entry *e = &ls_list[ls_n++];
	snprintf(e->name, sizeof e->name, "%.*s", (int)(strlen(rel) - (part ? 5 : 0)), rel);
	e->bytes = st->st_size;
	e->partial = part;
	return 0;
}

static int by_name(const void *a, const void *b) {
	const ls_entry *x = a, *y = b;
	const int c = strcmp(x->name, y->name);
	return c ? c : (int)x->partial - (int)y->partial;
}

int cmd_ls(const cli_settings *s) {
	char dir[2048];
	pull_config c;
	cli_pull_config(s, &c);
	pull_cache_dir(&c, dir, sizeof dir);
	ls_root = strlen(dir);
	struct stat st;
	if (stat(dir, &st)) return 0; // nothing pulled yet
	if (nftw(dir, ls_one, 16, FTW_PHYS)) {
		cli_err("%s: cannot list the cache", dir);
		free(ls_list);
		return 1;
	}
	qsort(ls_list, ls_n, sizeof *ls_list, by_name);
	for (size_t i = 0; i < ls_n; i++) {
		const ls_entry *e = &ls_list[i];
		if (e->partial && i > 0 && !strcmp(ls_list[i - 1].name, e->name)) continue; // a stale one beside the whole file
		printf("%10.1f MiB  %s", (double)e->bytes / 1048576.0, e->name);
		if (e->partial && strncmp(e->name, "url/", 4))
			printf("  (incomplete: `lanes pull hf:%s` resumes it, `lanes rm %s` deletes it)", e->name, e->name);
		else if (e->partial) printf("  (incomplete: pulling its URL again resumes it, `lanes rm %s` deletes it)", e->name);
		printf("\n");
	}
	free(ls_list);
	return 0;
}

int cmd_rm(const cli_settings *s) {
	pull_config c;
	cli_pull_config(s, &c);
	char rel[1024], err[1024];
	int rc = pull_cache_find(&c, s->pos[0], rel, sizeof rel, err, sizeof err);
	if (rc == LANES_EINVAL) {
		cli_err("'%s' is not a cached model: give a name as `lanes ls` prints it", s->pos[0]);
		return 2;
	}
	if (rc == LANES_ENOTFOUND) {
		cli_err("%s is not in the cache (`lanes ls` lists what is)", s->pos[0]);
		return 1;
	}
	// LANES_EBUSY: only a partial download is there, and it goes
	if ((rc = pull_cache_remove(&c, rel, err, sizeof err))) {
		cli_err("%s", err);
		return 1;
	}
	printf("removed %s\n", rel);
	return 0;
}
