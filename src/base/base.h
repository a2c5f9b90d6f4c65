// base: error codes, logging, clocks, checked arithmetic, hashing, the thread pool, and files
// confined to a folder and written whole or not at all, that every other module builds on.
// Knows nothing of models or requests.
#ifndef LANES_BASE_H
#define LANES_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// ---- errors: one list gives the codes and their messages ----------------------------
#define LANES_ERRORS(X)                                            \
	X(OK, 0, "ok")                                             \
	X(EIO, -1, "i/o error")                                    \
	X(EFORMAT, -2, "malformed input")                          \
	X(ENOMEM, -3, "out of memory")                             \
	X(EINVAL, -4, "invalid argument")                          \
	X(ERANGE, -5, "value out of range")                        \
	X(EUNSUPPORTED, -6, "unsupported")                         \
	X(ENOTFOUND, -7, "not found")                              \
	X(ELIMIT, -8, "limit exceeded")                            \
	X(ECANCELLED, -9, "cancelled")                             \
	X(EBUSY, -10, "busy")

enum base_err {
#define LANES__ERR_ENUM(name, code, msg) LANES_##name = (code),
	LANES_ERRORS(LANES__ERR_ENUM)
#undef LANES__ERR_ENUM
};

const char *base_strerror(int code);

// Formats a message into err (size errlen, may be NULL) and returns code.
int base_seterr(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

// ---- UTF-8 ----------------------------------------------------------------------------
// Length of the valid UTF-8 sequence at s (n > 0 bytes left), or 0 when it is not one.
size_t base_utf8_len(const unsigned char *s, size_t n);
// Copies n bytes of src into dst (cap > 0 bytes) as valid UTF-8, NUL-terminated: each byte
// that starts no valid sequence becomes U+FFFD, and only whole characters are copied.
// Returns the length written.
size_t base_utf8_copy(char *dst, size_t cap, const char *src, size_t n);

// ---- logging: one level-gated macro, prefixed by module; always to stderr -----------
// Control characters and invalid UTF-8 in a line are written as \xNN, so that text from
// clients can neither forge lines nor reach the terminal raw.
enum base_log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };
extern int base_log_level; // the callers' choice (the CLI sets it from LANES_LOG)
// One JSON object a line instead of "I module: text": {"time", "level", "module", "msg"}.
extern bool base_log_json;
void base_log(int level, const char *module, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
// Whether a progress bar holds stderr's current line: a log line wipes it first. Set and
// drawn with stderr locked (flockfile), as base_log writes. Returns what it was.
bool base_log_bar(bool drawn);
#define LOG(level, module, ...)                                                   \
	do {                                                                      \
		if ((level) <= base_log_level) base_log((level), (module), __VA_ARGS__); \
	} while (0)
#define LOG_ERROR(m, ...) LOG(LOG_LEVEL_ERROR, m, __VA_ARGS__)
#define LOG_WARN(m, ...) LOG(LOG_LEVEL_WARN, m, __VA_ARGS__)
#define LOG_INFO(m, ...) LOG(LOG_LEVEL_INFO, m, __VA_ARGS__)
#define LOG_DEBUG(m, ...) LOG(LOG_LEVEL_DEBUG, m, __VA_ARGS__)

// Broken invariants (never input from outside) abort loudly with file and line.
// The bounds of a range said as a macro "MIN, MAX" (a library's settings; the CLI reads them).
#define BASE_RANGE_LO(r) BASE_RANGE_LO_(r)
#define BASE_RANGE_HI(r) BASE_RANGE_HI_(r)
#define BASE_RANGE_LO_(lo, hi) (lo)
#define BASE_RANGE_HI_(lo, hi) (hi)

#define LANES_ASSERT(cond)                                                  \
	do {                                                                \
		if (!(cond)) base_panic(__FILE__, __LINE__, #cond);        \
	} while (0)
_Noreturn void base_panic(const char *file, int line, const char *what);

// ---- clock -------------------------------------------------------------------------
uint64_t base_now_us(void); // monotonic microseconds
uint64_t base_now_ns(void); // monotonic nanoseconds
// A duration as Ollama and Go write it ("30s", "5m", "1h30m", "250ms"; a bare number is
// seconds) into *seconds; a negative one, or one past a century, is -1 (for good). false:
// not a duration.
bool base_parse_duration(const char *s, double *seconds);

// ---- checked arithmetic: false on overflow -------------------------------------------
static inline bool ck_mul(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool ck_add(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_add_overflow(a, b, out); }

// ---- SHA-256 ---------------------------------------------------------------------------
typedef struct {
	uint32_t h[8];
	uint64_t len;     // bytes hashed so far
	uint8_t buf[64];  // pending partial block
} sha256_ctx;
void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
void sha256_final(sha256_ctx *c, uint8_t out[32]);
void sha256_hex(const void *data, size_t n, char out[65]);
// HMAC-SHA256 (RFC 2104) of msg under key.
void hmac_sha256(const void *key, size_t key_len, const void *msg, size_t n, uint8_t out[32]);

// ---- 64-bit hashing and a counter-based random source ---------------------------------
uint64_t base_hash64(const void *data, size_t n, uint64_t seed); // FNV-1a folded by splitmix
static inline uint64_t splitmix64(uint64_t x) {
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

// ---- thread pool: workers take (ith, nth); the caller is worker 0 --------------------
typedef struct base_pool base_pool;
typedef void (*base_task_fn)(void *arg, int ith, int nth);
int base_pool_new(base_pool **out, int n_threads); // n_threads >= 1 includes the caller
void base_pool_free(base_pool *p);                 // accepts NULL
int base_pool_threads(const base_pool *p);
// Before its first job: several threads may post jobs to p, each run whole before the next.
void base_pool_share(base_pool *p);
// Runs fn(arg, ith, nth) on every thread and returns when all are done.
void base_pool_run(base_pool *p, base_task_fn fn, void *arg);
// Within one job: waits until *done reaches target, spinning briefly, then yielding. For work
// the job's threads claim and count as they finish it; a thread waits only for claims already
// taken, so one that has not started yet holds nobody up.
void base_pool_wait(const _Atomic long long *done, long long target);
int base_cpu_count(void);
// MemAvailable of /proc/meminfo in bytes; 0 when unknown.
uint64_t base_available_memory(void);

// ---- files: names confined to a folder; writes that land whole or not at all ----------------
#define BASE_NAME_MAX 128 // bytes of a file name in a confined folder

// Whether name may name a file in a confined folder: 1..BASE_NAME_MAX bytes of
// [A-Za-z0-9._-], not starting with '.' (no path, no hidden or temporary file).
bool base_name_ok(const char *name);
// Opens the folder at path for the calls below (*dfd; close it), made with its parents
// (mode 0700) when create is set and it is missing. LANES_EIO/LANES_ENOTFOUND with why.
int base_dir_open(const char *path, bool create, int *dfd, char *err, size_t errlen);
// Opens name (base_name_ok) in folder dfd for reading: never through a symlink nor out of the
// folder, and only a regular file. *fd, or LANES_EINVAL (a bad name, not a regular file),
// LANES_ENOTFOUND, LANES_EIO, with why (the name, never the folder's path).
int base_file_open_in(int dfd, const char *name, int *fd, char *err, size_t errlen);

// A file being written: a fresh temporary file beside its final name until committed.
typedef struct {
	int dfd, fd;              // the folder (owned when own_dfd) and the temporary file
	bool own_dfd, live;       // live: begun and not yet committed or aborted
	bool no_sync;             // a cache's file: renamed unflushed, as a checksum catches a torn one
	char tmp[48];             // the temporary file's name in the folder
	char name[256];           // the final name in the folder
	const char *shown;        // how messages name the file
} base_wfile;
// Starts writing name in folder dfd, or the path name when dfd is -1 (the operator's: any
// folder, any name): a temporary file with a random name beside it, created O_EXCL, never
// through a symlink, locked while written. fd is w->fd. LANES_EIO/LANES_EINVAL with why.
int base_wfile_begin(base_wfile *w, int dfd, const char *name, char *err, size_t errlen);
// Flushes the file to disk, renames it over the final name and flushes the folder, so a crash
// leaves the old file or the new one, never a torn one (no_sync: renames alone). Ends w
// whatever happens (else aborted).
int base_wfile_commit(base_wfile *w, char *err, size_t errlen);
// Drops the temporary file. Accepts an ended or zeroed w.
void base_wfile_abort(base_wfile *w);
// Removes the temporary files in folder dfd that no writer holds (a crash's leftovers); the count.
int base_dir_sweep(int dfd);
// What names the file at path as it is now: a hash of its real path, device, inode, size and
// modification time (a file rewritten in place has a new one). LANES_EIO with why.
int base_file_ident(const char *path, uint8_t out[32], char *err, size_t errlen);

// ---- build: "lanes VERSION (commit C)" and the compiler and flags it was built with ------
const char *base_version_string(void);
const char *base_build_flags(void);

#endif
