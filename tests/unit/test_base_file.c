// tests: files named inside a folder and written whole — a name never leaves its folder (no
// path, no symlink, no special file), a save replaces its file atomically (a symlink at the
// final name is replaced, not followed), a writer killed mid-write leaves the old file, and
// the sweep at start removes its temporary file but never one a live writer holds.
#include "t.h"
#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[512];
static char err[512];

static void put(const char *name, const char *text) {
	char p[1024];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	if (f) fputs(text, f), fclose(f);
}

static char *get(const char *name) {
	char p[1024];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	return t_read_file(p, NULL);
}

static bool holds(const char *name, const char *text) {
	char *t = get(name);
	const bool ok = t && !strcmp(t, text);
	free(t);
	return ok;
}

// Temporary files left in the folder.
static int temps(void) {
	char cmd[1100];
	snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -c '^\\.lanes-tmp-'", dir);
	FILE *p = popen(cmd, "r");
	int n = -1;
	if (p && fscanf(p, "%d", &n) != 1) n = -1;
	if (p) pclose(p);
	return n;
}

static void test_names(void) {
	const char *good[] = {"a", "x.gguf", "A-b_c.9", "..x"};
	const char *bad[] = {"", ".hidden", "..", "../x", "/etc/passwd", "a/b", "a b", "caf\xc3\xa9", "a\nb", "-x\x01"};
	for (size_t i = 0; i < sizeof good / sizeof *good; i++) CHECKF(base_name_ok(good[i]) == (good[i][0] != '.'), "%s", good[i]);
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECKF(!base_name_ok(bad[i]), "'%s' taken", bad[i]);
	char longest[BASE_NAME_MAX + 2];
	memset(longest, 'a', sizeof longest);
	longest[BASE_NAME_MAX] = 0;
	CHECK(base_name_ok(longest));
	longest[BASE_NAME_MAX] = 'a', longest[BASE_NAME_MAX + 1] = 0;
	CHECK(!base_name_ok(longest));
	CHECK(!base_name_ok(NULL));
}

static void test_open(int dfd) {
	int fd = -1;
	put("plain.gguf", "plain");
	CHECK(base_file_open_in(dfd, "plain.gguf", &fd, err, sizeof err) == 0 && fd >= 0);
	if (fd >= 0) close(fd);
	CHECK(base_file_open_in(dfd, "none.gguf", &fd, err, sizeof err) == LANES_ENOTFOUND && fd < 0);
	CHECK(base_file_open_in(dfd, "../plain.gguf", &fd, err, sizeof err) == LANES_EINVAL);
	CHECK(base_file_open_in(dfd, "/etc/hostname", &fd, err, sizeof err) == LANES_EINVAL);
	// a symlink is not followed, whether it points out of the folder or within it
	char p[1024];
	snprintf(p, sizeof p, "%s/out.gguf", dir);
	CHECK(symlink("/etc/hostname", p) == 0);
	CHECKF(base_file_open_in(dfd, "out.gguf", &fd, err, sizeof err) == LANES_EINVAL && strstr(err, "symlink"), "%s", err);
	snprintf(p, sizeof p, "%s/in.gguf", dir);
	CHECK(symlink("plain.gguf", p) == 0);
	CHECK(base_file_open_in(dfd, "in.gguf", &fd, err, sizeof err) == LANES_EINVAL);
	// a FIFO is refused at once (no writer: a blocking open would wait forever), and so is a folder
	snprintf(p, sizeof p, "%s/fifo.gguf", dir);
	CHECK(mkfifo(p, 0600) == 0);
	CHECKF(base_file_open_in(dfd, "fifo.gguf", &fd, err, sizeof err) == LANES_EINVAL && strstr(err, "regular"), "%s", err);
	snprintf(p, sizeof p, "%s/sub", dir);
	CHECK(mkdir(p, 0700) == 0);
	CHECK(base_file_open_in(dfd, "sub", &fd, err, sizeof err) == LANES_EINVAL);
}

static int write_file(int dfd, const char *name, const char *text) {
	base_wfile w;
	int rc = base_wfile_begin(&w, dfd, name, err, sizeof err);
	if (rc) return rc;
	if (write(w.fd, text, strlen(text)) != (ssize_t)strlen(text)) {
		base_wfile_abort(&w);
		return LANES_EIO;
	}
	return base_wfile_commit(&w, err, sizeof err);
}

static void test_write(int dfd) {
	CHECK(write_file(dfd, "a.gguf", "one") == 0 && holds("a.gguf", "one"));
	CHECK(write_file(dfd, "a.gguf", "two") == 0 && holds("a.gguf", "two"));
	CHECK(write_file(dfd, "../a.gguf", "x") == LANES_EINVAL);
	CHECK(write_file(dfd, "sub", "x") == LANES_EINVAL && strstr(err, "folder"));
	// a symlink planted at the final name is replaced by the file, its target untouched
	put("victim", "victim");
	char p[1024];
	snprintf(p, sizeof p, "%s/link.gguf", dir);
	CHECK(symlink("victim", p) == 0);
	CHECK(write_file(dfd, "link.gguf", "new") == 0);
	struct stat st;
	CHECK(lstat(p, &st) == 0 && S_ISREG(st.st_mode) && holds("link.gguf", "new") && holds("victim", "victim"));
	// temporary names are fresh each time, and none is left behind
	base_wfile w1, w2;
	CHECK(base_wfile_begin(&w1, dfd, "b.gguf", err, sizeof err) == 0 && base_wfile_begin(&w2, dfd, "b.gguf", err, sizeof err) == 0);
	CHECK(strcmp(w1.tmp, w2.tmp) != 0 && !strncmp(w1.tmp, ".lanes-tmp-", 11));
	base_wfile_abort(&w1);
	base_wfile_abort(&w2);
	base_wfile_abort(&w2); // twice is harmless
	CHECK(temps() == 0);
	// the operator's path: any folder
	snprintf(p, sizeof p, "%s/sub/by path.gguf", dir);
	base_wfile w;
	CHECK(base_wfile_begin(&w, -1, p, err, sizeof err) == 0 && write(w.fd, "p", 1) == 1 && base_wfile_commit(&w, err, sizeof err) == 0);
	CHECK(holds("sub/by path.gguf", "p"));
	snprintf(p, sizeof p, "%s/missing/x.gguf", dir);
	CHECK(base_wfile_begin(&w, -1, p, err, sizeof err) != 0);
}

// A writer killed at any point of its write leaves the old file whole; its temporary file is
// swept at the next start, while one a live writer holds is not.
static void test_crash(int dfd) {
	put("c.gguf", "old");
	for (int k = 0; k < 4; k++) {
		const pid_t pid = fork();
		if (pid == 0) {
			base_wfile w;
			if (base_wfile_begin(&w, dfd, "c.gguf", err, sizeof err)) _exit(1);
			for (int i = 0; i < k; i++)
				if (write(w.fd, "partial", 7) != 7) _exit(1);
			if (k == 3) fsync(w.fd);
			raise(SIGKILL);
			_exit(2);
		}
		int st = 0;
		waitpid(pid, &st, 0);
		CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
		CHECK(holds("c.gguf", "old"));
	}
	CHECK(temps() == 4);
	base_wfile live;
	CHECK(base_wfile_begin(&live, dfd, "d.gguf", err, sizeof err) == 0);
	CHECK(base_dir_sweep(dfd) == 4);
	CHECK(temps() == 1);
	CHECK(write(live.fd, "d", 1) == 1 && base_wfile_commit(&live, err, sizeof err) == 0 && holds("d.gguf", "d"));
	CHECK(temps() == 0);
}

int main(void) {
	snprintf(dir, sizeof dir, "%s/base-file-XXXXXX", t_tmp());
	CHECK(mkdtemp(dir) != NULL);
	int dfd = -1;
	CHECK(base_dir_open(dir, false, &dfd, err, sizeof err) == 0);
	char sub[600];
	snprintf(sub, sizeof sub, "%s/made/deep", dir);
	int d2 = -1;
	CHECK(base_dir_open(sub, false, &d2, err, sizeof err) == LANES_ENOTFOUND);
	CHECK(base_dir_open(sub, true, &d2, err, sizeof err) == 0 && d2 >= 0);
	if (d2 >= 0) close(d2);
	test_names();
	if (dfd >= 0) {
		test_open(dfd);
		test_write(dfd);
		test_crash(dfd);
		close(dfd);
	}
	char cmd[700];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
	T_DONE("base_file");
}
