// base/file: files named inside a folder the operator chose, opened without following a
// symlink out of it, and files written through a locked temporary beside their final name,
// flushed and renamed, so that a reader or a crash sees the old file or the new one whole.
#include "base/base.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TMP_PREFIX ".lanes-tmp-"

bool base_name_ok(const char *name) {
	size_t n = 0;
	if (!name || name[0] == '.') return false;
	for (; name[n]; n++) {
		const char c = name[n];
		if (n >= BASE_NAME_MAX || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
					    c == '_' || c == '-'))
			return false;
	}
	return n > 0;
}

// mkdir -p with mode 0700 for the folders it makes.
static int make_dirs(const char *path) {
	char buf[4096];
	if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return ENAMETOOLONG;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/') continue;
		*p = 0;
		if (mkdir(buf, 0700) && errno != EEXIST) return errno;
		*p = '/';
	}
	return mkdir(buf, 0700) && errno != EEXIST ? errno : 0;
}

int base_dir_open(const char *path, bool create, int *dfd, char *err, size_t errlen) {
	*dfd = -1;
	if (!path || !*path) return base_seterr(err, errlen, LANES_EINVAL, "no folder given");
	int e = create ? make_dirs(path) : 0;
	if (e) return base_seterr(err, errlen, LANES_EIO, "cannot make the folder %s: %s", path, strerror(e));
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return base_seterr(err, errlen, errno == ENOENT ? LANES_ENOTFOUND : LANES_EIO, "cannot open the folder %s: %s", path,
				   strerror(errno));
	*dfd = fd;
	return 0;
}

// openat2 keeps the walk beneath dfd and refuses every symlink; kernels before 5.6 lack it,
// and then a single checked name opened O_NOFOLLOW cannot leave the folder either.
static int open_beneath(int dfd, const char *name, int flags, mode_t mode) {
	struct open_how how = {.flags = (uint64_t)flags, .mode = (flags & O_CREAT) ? mode : 0,
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
	long fd = syscall(SYS_openat2, dfd, name, &how, sizeof how);
	if (fd >= 0 || (errno != ENOSYS && errno != EPERM)) return (int)fd;
	return openat(dfd, name, flags | O_NOFOLLOW, mode);
}

int base_file_open_in(int dfd, const char *name, int *fd, char *err, size_t errlen) {
	*fd = -1;
	if (!base_name_ok(name))
		return base_seterr(err, errlen, LANES_EINVAL, "'%.64s' is not a file name: 1 to %d of A-Z a-z 0-9 . _ -, not starting with '.'",
				   name ? name : "", BASE_NAME_MAX);
	// O_NONBLOCK: a FIFO planted in the folder must not hold the open
	int f = open_beneath(dfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0);
	if (f < 0) {
		const int e = errno;
		if (e == ENOENT) return base_seterr(err, errlen, LANES_ENOTFOUND, "%s: no such file", name);
		if (e == ELOOP || e == EXDEV) return base_seterr(err, errlen, LANES_EINVAL, "%s: a symlink is not followed", name);
		return base_seterr(err, errlen, LANES_EIO, "%s: %s", name, strerror(e));
	}
	struct stat st;
	if (fstat(f, &st) || !S_ISREG(st.st_mode)) {
		close(f);
		return base_seterr(err, errlen, LANES_EINVAL, "%s: not a regular file", name);
	}
	fcntl(f, F_SETFL, fcntl(f, F_GETFL) & ~O_NONBLOCK);
	*fd = f;
	return 0;
}

int base_wfile_begin(base_wfile *w, int dfd, const char *name, char *err, size_t errlen) {
	memset(w, 0, sizeof *w);
	w->dfd = w->fd = -1;
	w->shown = name;
	const char *leaf = name;
	if (dfd < 0) { // a path: its folder, and the name in it
		const char *slash = strrchr(name, '/');
		leaf = slash ? slash + 1 : name;
		char dir[4096];
		if (slash && (size_t)(slash - name) >= sizeof dir) return base_seterr(err, errlen, LANES_EINVAL, "%s: the path is too long", name);
		snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash == name ? 1 : slash - name) : 1, slash ? name : ".");
		if (!*leaf || !strcmp(leaf, ".") || !strcmp(leaf, ".."))
			return base_seterr(err, errlen, LANES_EINVAL, "%s: not a file's path", name);
		if (base_dir_open(dir, false, &w->dfd, err, errlen)) return base_seterr(err, errlen, LANES_EIO, "cannot write %s: its folder %s cannot be opened", name, dir);
		w->own_dfd = true;
	} else {
		if (!base_name_ok(name)) return base_seterr(err, errlen, LANES_EINVAL, "'%.64s' is not a file name", name);
		w->dfd = dfd;
	}
	if (strlen(leaf) >= sizeof w->name) {
		base_wfile_abort(w);
		return base_seterr(err, errlen, LANES_EINVAL, "%s: the name is too long", name);
	}
	snprintf(w->name, sizeof w->name, "%s", leaf);
	struct stat st;
	if (!fstatat(w->dfd, w->name, &st, AT_SYMLINK_NOFOLLOW) && S_ISDIR(st.st_mode)) {
		base_wfile_abort(w);
		return base_seterr(err, errlen, LANES_EINVAL, "cannot write %s: it is a folder", name);
	}
	for (int tries = 0; tries < 8; tries++) {
		uint64_t r;
		if (getrandom(&r, sizeof r, 0) != sizeof r) r = splitmix64(base_now_ns() ^ (uint64_t)getpid() << 32);
		snprintf(w->tmp, sizeof w->tmp, TMP_PREFIX "%016llx", (unsigned long long)r);
		w->fd = open_beneath(w->dfd, w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (w->fd >= 0 || errno != EEXIST) break;
	}
	if (w->fd < 0) {
		const int e = errno;
		base_wfile_abort(w);
		return base_seterr(err, errlen, LANES_EIO, "cannot write %s: %s", name, strerror(e));
	}
	// held until the rename: a sweep at start skips a file some writer still holds
	flock(w->fd, LOCK_EX);
	w->live = true;
	return 0;
}

int base_wfile_commit(base_wfile *w, char *err, size_t errlen) {
	if (!w->live) return base_seterr(err, errlen, LANES_EINVAL, "no file is being written");
	const char *what = NULL;
	int e = 0;
	if (!w->no_sync && fsync(w->fd)) what = "flush", e = errno;
	else if (renameat(w->dfd, w->tmp, w->dfd, w->name)) what = "rename", e = errno;
	if (what) {
		base_wfile_abort(w);
		return base_seterr(err, errlen, LANES_EIO, "cannot write %s (%s): %s", w->shown, what, strerror(e));
	}
	w->tmp[0] = 0;
	// the rename is durable once the folder is
	const int de = !w->no_sync && fsync(w->dfd) ? errno : 0;
	base_wfile_abort(w);
	if (de && de != EINVAL) return base_seterr(err, errlen, LANES_EIO, "cannot write %s (flush of its folder): %s", w->shown, strerror(de));
	return 0;
}

void base_wfile_abort(base_wfile *w) {
	if (w->fd >= 0 && w->live) close(w->fd);
	if (w->tmp[0] && w->dfd >= 0 && w->live) unlinkat(w->dfd, w->tmp, 0);
	if (w->own_dfd && w->dfd >= 0) close(w->dfd);
	w->live = false;
	w->own_dfd = false;
	w->fd = w->dfd = -1;
	w->tmp[0] = 0;
}

int base_dir_sweep(int dfd) {
	int d = dup(dfd), n = 0;
	DIR *dir = d >= 0 ? fdopendir(d) : NULL;
	if (!dir) {
		if (d >= 0) close(d);
		return 0;
	}
	rewinddir(dir);
	for (struct dirent *de; (de = readdir(dir));) {
		if (strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX))) continue;
		const int f = openat(dfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
		if (f < 0) continue;
		struct stat st;
		if (!fstat(f, &st) && S_ISREG(st.st_mode) && !flock(f, LOCK_EX | LOCK_NB) && !unlinkat(dfd, de->d_name, 0)) n++;
		close(f);
	}
	closedir(dir);
	return n;
}

int base_file_ident(const char *path, uint8_t out[32], char *err, size_t errlen) {
	char real[4096];
	struct stat st;
	if (!realpath(path, real) || stat(real, &st)) return base_seterr(err, errlen, LANES_EIO, "%s: %s", path, strerror(errno));
	const uint64_t f[5] = {(uint64_t)st.st_dev, (uint64_t)st.st_ino, (uint64_t)st.st_size, (uint64_t)st.st_mtim.tv_sec,
			       (uint64_t)st.st_mtim.tv_nsec};
	sha256_ctx c;
	sha256_init(&c);
	sha256_update(&c, real, strlen(real) + 1);
	sha256_update(&c, f, sizeof f);
	sha256_final(&c, out);
	return 0;
}
