// kv: the prefix cache on disk — a page file per cached page of the base model, named by its
// chain hash, in a folder named by everything its rows depend on. A file holds its chain,
// tokens, rows and a checksum; one that is foreign, damaged or of another layout is refused
// and deleted, never read into the cache. Files are written when a page leaves memory and at
// drain, and the folder keeps at most max_bytes of them, oldest written out first.
#include "kv/kv_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MOD "kv"
#define MAGIC "lanesKV1"
#define SUFFIX ".kvpage"

typedef struct {
	char magic[8];
	uint8_t ident[32];   // the folder's: the model file, kernel set and the cache's layout
	uint64_t key, parent; // the page's chain hash and the one before it
	uint32_t type, n_layers, kv_dim, group, page_tokens, pad;
	uint64_t row_bytes, s_stride;
} page_head;

typedef struct {
	uint64_t key;
	int64_t mtime;
} file_age;

struct kv_disk {
	int dfd;
	uint8_t ident[32];
	uint64_t max_bytes, file_bytes, held; // the cap, one file's size, files' bytes now
	uint64_t *fifo;      // keys of the files in the order written, oldest at head
	size_t head, n, cap;
	uint8_t *buf;        // one file
	kv_disk_stats st;
};

static void name_of(uint64_t key, char out[32]) { snprintf(out, 32, "%016llx" SUFFIX, (unsigned long long)key); }

void kv__page_copy(kv_cache *kv, int32_t pg, uint8_t *file, bool to_file) {
	const int32_t L = kv->cfg.n_layers, np = kv->cfg.n_pages;
	uint8_t *o = file;
	for (int32_t l = 0; l < L; l++) {
		uint8_t *parts[4] = {kv->k + ((size_t)l * np + pg) * kv->page_bytes, kv->v + ((size_t)l * np + pg) * kv->page_bytes,
				     kv->ks ? kv->ks + ((size_t)l * np + pg) * kv->s_stride : NULL,
				     kv->vs ? kv->vs + ((size_t)l * np + pg) * kv->s_stride : NULL};
		for (int i = 0; i < 4; i++) {
			const size_t n = i < 2 ? kv->page_bytes : parts[i] ? kv->s_stride : 0;
			if (!n) continue;
			if (to_file) memcpy(o, parts[i], n);
			else memcpy(parts[i], o, n);
			o += n;
		}
	}
}

static void head_of(const kv_cache *kv, const uint8_t ident[32], page_head *h, uint64_t key, uint64_t parent) {
	memset(h, 0, sizeof *h);
	memcpy(h->magic, MAGIC, 8);
	memcpy(h->ident, ident, 32);
	h->key = key;
	h->parent = parent;
	h->type = (uint32_t)kv->cfg.type;
	h->n_layers = (uint32_t)kv->cfg.n_layers;
	h->kv_dim = (uint32_t)kv->cfg.kv_dim;
	h->group = (uint32_t)kv->cfg.group;
	h->page_tokens = (uint32_t)kv->cfg.page_tokens;
	h->row_bytes = kv->row_bytes;
	h->s_stride = kv->s_stride;
}

static void fifo_push(kv_disk *d, uint64_t key) {
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 64;
		uint64_t *f = malloc(cap * sizeof *f);
		if (!f) return;
		for (size_t i = 0; i < d->n; i++) f[i] = d->fifo[(d->head + i) % d->cap];
		free(d->fifo);
		d->fifo = f;
		d->cap = cap;
		d->head = 0;
	}
	d->fifo[(d->head + d->n++) % d->cap] = key;
	d->held += d->file_bytes;
}

// Deletes the oldest files until one more fits under the cap.
static void make_room(kv_disk *d) {
	while (d->n && d->held + d->file_bytes > d->max_bytes) {
		char name[32];
		name_of(d->fifo[d->head], name);
		d->head = (d->head + 1) % d->cap;
		d->n--;
		d->held -= d->file_bytes;
		if (!unlinkat(d->dfd, name, 0)) d->st.dropped++;
	}
}

static void refuse(kv_disk *d, const char *name, const char *why) {
	unlinkat(d->dfd, name, 0);
	d->st.refused++;
	LOG_WARN(MOD, "page file %s refused (%s) and deleted", name, why);
}

static int by_age(const void *a, const void *b) {
	const file_age *x = a, *y = b;
	return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

// The folder's page files, oldest first; anything else in it is left alone.
static void scan(kv_disk *d) {
	int fd = dup(d->dfd);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
	if (!dir) {
		if (fd >= 0) close(fd);
		return;
	}
	rewinddir(dir);
	file_age *ages = NULL;
	size_t n = 0, cap = 0;
	for (struct dirent *de; (de = readdir(dir));) {
		char *end;
		errno = 0;
		const unsigned long long key = strtoull(de->d_name, &end, 16);
		if (errno || end != de->d_name + 16 || strcmp(end, SUFFIX)) continue;
		struct stat st;
		if (fstatat(d->dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode)) continue;
		if ((uint64_t)st.st_size != d->file_bytes) {
			refuse(d, de->d_name, "not this layout's size");
			continue;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			file_age *a = realloc(ages, cap * sizeof *a);
			if (!a) break;
			ages = a;
		}
		ages[n++] = (file_age){key, (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec};
	}
	closedir(dir);
	if (n) qsort(ages, n, sizeof *ages, by_age);
	for (size_t i = 0; i < n; i++) fifo_push(d, ages[i].key);
	free(ages);
}

int kv_disk_open(kv_cache *kv, const char *dir, const uint8_t ident[32], uint64_t max_bytes, char *err, size_t errlen) {
	if (kv->disk) return base_seterr(err, errlen, LANES_EINVAL, "kv: a disk cache is attached already");
	// the folder's name covers the layout too: another page size or type starts afresh
	page_head h;
	head_of(kv, ident, &h, 0, 0);
	uint8_t id[32];
	sha256_ctx c;
	sha256_init(&c);
	sha256_update(&c, &h, sizeof h);
	sha256_final(&c, id);
	char path[4096], hex[65];
	sha256_hex(id, sizeof id, hex);
	hex[32] = 0;
	if (snprintf(path, sizeof path, "%s/%s", dir, hex) >= (int)sizeof path)
		return base_seterr(err, errlen, LANES_EINVAL, "kv: the cache folder's path is too long");
	int dfd;
	if (base_dir_open(path, true, &dfd, err, errlen)) return LANES_EIO;
	const size_t bytes = sizeof h + (size_t)kv->cfg.page_tokens * sizeof(int32_t) + kv__page_rows_bytes(kv) + sizeof(uint64_t);
	kv_disk *d = calloc(1, sizeof *d);
	uint8_t *buf = malloc(bytes);
	if (!d || !buf) {
		free(d);
		free(buf);
		close(dfd);
		return base_seterr(err, errlen, LANES_ENOMEM, "kv: out of memory");
	}
	d->dfd = dfd;
	d->buf = buf;
	d->file_bytes = bytes;
	memcpy(d->ident, id, 32);
	d->max_bytes = max_bytes;
	base_dir_sweep(dfd);
	kv->disk = d;
	scan(d);
	make_room(d);
	LOG_INFO(MOD, "prefix cache on disk: %s, %zu pages (%.1f MiB) kept, at most %.1f MiB", path, d->n,
		 d->held / 1048576.0, max_bytes / 1048576.0);
	return 0;
}

void kv_disk_close(kv_cache *kv) {
	kv_disk *d = kv->disk;
	if (!d) return;
	close(d->dfd);
	free(d->fifo);
	free(d->buf);
	free(d);
	kv->disk = NULL;
}

size_t kv__page_rows_bytes(const kv_cache *kv) {
	return (size_t)kv->cfg.n_layers * (2 * kv->page_bytes + kv->s_stride * (kv->ks ? 2 : 0));
}

const uint8_t *kv__disk_ident(const kv_cache *kv) { return kv->disk ? kv->disk->ident : NULL; }

bool kv__disk_forget(kv_cache *kv, uint64_t key) {
	char name[32];
	name_of(key, name);
	// its place in the written order stays: the count of bytes held errs high until it is passed
	return kv->disk && !unlinkat(kv->disk->dfd, name, 0);
}

kv_disk_stats kv_disk_stats_of(const kv_cache *kv) {
	kv_disk_stats z = {0};
	return kv->disk ? kv->disk->st : z;
}

bool kv__disk_write(kv_cache *kv, int32_t pg, uint64_t key, uint64_t parent, const int32_t *tokens) {
	kv_disk *d = kv->disk;
	if (kv__page_freed(kv, pg)) return false; // its local rows are gone: a file would not hold the page
	char name[32], err[256];
	name_of(key, name);
	// a file there already (one a prompt never reached, perhaps damaged) is written over whole
	// and keeps its place in the order
	const bool existed = !faccessat(d->dfd, name, F_OK, AT_SYMLINK_NOFOLLOW);
	if (d->file_bytes > d->max_bytes) return false;
	page_head h;
	head_of(kv, d->ident, &h, key, parent);
	uint8_t *o = d->buf;
	memcpy(o, &h, sizeof h);
	o += sizeof h;
	memcpy(o, tokens, (size_t)kv->cfg.page_tokens * sizeof *tokens);
	o += (size_t)kv->cfg.page_tokens * sizeof *tokens;
	kv__page_copy(kv, pg, o, true);
	const uint64_t sum = base_hash64(d->buf, d->file_bytes - sizeof sum, key);
	memcpy(d->buf + d->file_bytes - sizeof sum, &sum, sizeof sum);
	if (!existed) make_room(d);
	base_wfile w;
	bool ok = !base_wfile_begin(&w, d->dfd, name, err, sizeof err);
	if (ok) {
		w.no_sync = true;
		size_t done = 0;
		while (done < d->file_bytes) {
			const ssize_t r = write(w.fd, d->buf + done, d->file_bytes - done);
			if (r <= 0 && errno == EINTR) continue;
			if (r <= 0) break;
			done += (size_t)r;
		}
		if (done == d->file_bytes) ok = !base_wfile_commit(&w, err, sizeof err);
		else {
			snprintf(err, sizeof err, "%s: %s", name, strerror(errno));
			base_wfile_abort(&w);
			ok = false;
		}
	}
	if (!ok) {
		// a full or failing disk costs the cache its copy, never a request
		if (!d->st.failed++) LOG_WARN(MOD, "cannot keep a prefix page on disk: %s", err);
		return false;
	}
	if (!existed) fifo_push(d, key);
	d->st.written++;
	return true;
}

bool kv__disk_read(kv_cache *kv, int32_t pg, uint64_t key, uint64_t parent, const int32_t *tokens) {
	kv_disk *d = kv->disk;
	char name[32], err[256];
	name_of(key, name);
	int fd;
	if (base_file_open_in(d->dfd, name, &fd, err, sizeof err)) return false;
	struct stat st;
	size_t got = 0;
	if (!fstat(fd, &st) && (uint64_t)st.st_size == d->file_bytes)
		while (got < d->file_bytes) {
			const ssize_t r = read(fd, d->buf + got, d->file_bytes - got);
			if (r <= 0 && errno == EINTR) continue;
			if (r <= 0) break;
			got += (size_t)r;
		}
	close(fd);
	if (got != d->file_bytes) {
		refuse(d, name, "not this layout's size");
		return false;
	}
	uint64_t sum;
	memcpy(&sum, d->buf + d->file_bytes - sizeof sum, sizeof sum);
	page_head want, h;
	head_of(kv, d->ident, &want, key, parent);
	memcpy(&h, d->buf, sizeof h);
	if (sum != base_hash64(d->buf, d->file_bytes - sizeof sum, key)) {
		refuse(d, name, "checksum");
		return false;
	}
	if (memcmp(h.magic, want.magic, 8) || memcmp(h.ident, want.ident, 32) || h.key != key || h.type != want.type ||
	    h.n_layers != want.n_layers || h.kv_dim != want.kv_dim || h.group != want.group || h.page_tokens != want.page_tokens ||
	    h.row_bytes != want.row_bytes || h.s_stride != want.s_stride) {
		refuse(d, name, "another model, kernel set or layout");
		return false;
	}
	const uint8_t *tok = d->buf + sizeof h;
	// the same hash for another prefix: a miss, and the file stays for the prefix it holds
	if (h.parent != parent || memcmp(tok, tokens, (size_t)kv->cfg.page_tokens * sizeof *tokens)) return false;
	kv__page_copy(kv, pg, d->buf + sizeof h + (size_t)kv->cfg.page_tokens * sizeof *tokens, false);
	d->st.read++;
	return true;
}
