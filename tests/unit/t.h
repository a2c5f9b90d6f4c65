// tests: a tiny harness. CHECK records a failure with file and line and goes on. A test is
// a function that runs checks: it passes when all of its checks pass. T_DONE prints
// "NAME: N passed, M failed" over tests (the runner sums these; their number does not vary
// with how many checks a loop ran) after a line with the checks, and sets the exit code.
#ifndef LANES_T_H
#define LANES_T_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T_MAX_TESTS 4096
#define T_MAX_CASES 512

static int t_passed, t_failed; // checks
static struct {
	const char *fn;
	int kase;
	int failed;
} t_tests[T_MAX_TESTS];
static int t_ntests;
static char t_cases[T_MAX_CASES][96]; // case labels; 0 is ""
static int t_ncases = 1, t_kase;
static pthread_mutex_t t_mu = PTHREAD_MUTEX_INITIALIZER;

// Names the case the following checks belong to (a model, a kernel set, a seed): a test
// function run for several cases counts once per case.
__attribute__((format(printf, 1, 2), unused)) static void t_case(const char *fmt, ...) {
	char buf[96];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&t_mu);
	int i = 0;
	while (i < t_ncases && strcmp(t_cases[i], buf)) i++;
	if (i == t_ncases && i < T_MAX_CASES) memcpy(t_cases[t_ncases++], buf, sizeof buf);
	t_kase = i < T_MAX_CASES ? i : 0;
	pthread_mutex_unlock(&t_mu);
}

// Counts one check of test fn (its __func__: one static string per function) in the current case.
static inline void t_note(const char *fn, int ok) {
	pthread_mutex_lock(&t_mu);
	if (ok) t_passed++;
	else t_failed++;
	int i = 0;
	while (i < t_ntests && (t_tests[i].fn != fn || t_tests[i].kase != t_kase)) i++;
	if (i == t_ntests && i < T_MAX_TESTS) t_tests[t_ntests++].fn = fn, t_tests[i].kase = t_kase;
	if (i < T_MAX_TESTS && !ok) t_tests[i].failed = 1;
	pthread_mutex_unlock(&t_mu);
}

#define CHECK(cond)                                                              \
	do {                                                                     \
		int t_ok_ = (cond) ? 1 : 0;                                      \
		t_note(__func__, t_ok_);                               \
		if (!t_ok_) fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
	} while (0)

#define CHECKF(cond, ...)                                                        \
	do {                                                                     \
		int t_ok_ = (cond) ? 1 : 0;                                      \
		t_note(__func__, t_ok_);                               \
		if (!t_ok_) {                                                    \
			fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                            \
			fputc('\n', stderr);                                     \
		}                                                                \
	} while (0)

static inline int t_done(const char *name) {
	int tp = 0, tf = 0;
	for (int i = 0; i < t_ntests; i++) {
		if (t_tests[i].failed) fprintf(stderr, "%s: test %s %s failed\n", name, t_tests[i].fn, t_cases[t_tests[i].kase]);
		tf += t_tests[i].failed;
		tp += !t_tests[i].failed;
	}
	// a check that failed past the table still fails the suite
	if (t_failed && !tf) tf = 1;
	printf("%s: %d checks, %d failed\n", name, t_passed + t_failed, t_failed);
	printf("%s: %d passed, %d failed\n", name, tp, tf);
	return t_failed ? 1 : 0;
}

#define T_DONE(name) return t_done(name)

// The read-only data folder (LANES_SHARED, default ../shared).
static inline const char *t_shared(void) {
	const char *s = getenv("LANES_SHARED");
	return s && *s ? s : "../shared";
}

// A scratch folder for files the test writes (LANES_TMP, default /tmp).
static inline const char *t_tmp(void) {
	const char *s = getenv("LANES_TMP");
	return s && *s ? s : "/tmp";
}

// Reads a whole file into a malloc'd buffer (NUL-terminated); NULL on failure.
static inline char *t_read_file(const char *path, size_t *len) {
	FILE *f = fopen(path, "rb");
	if (!f) return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
	fclose(f);
	if (buf) { buf[n] = 0; if (len) *len = (size_t)n; }
	return buf;
}

// ../shared's model src as `lanes quantize` (LANES_BIN, default build/lanes) makes it in file
// type ft, written to the scratch folder as TAG-SRC-FT.gguf (its path into path).
static inline bool t_quantize(const char *tag, const char *src, const char *ft, char *path, size_t n) {
	const char *bin = getenv("LANES_BIN");
	char cmd[2048];
	snprintf(path, n, "%s/%s-%s-%s.gguf", t_tmp(), tag, src, ft);
	snprintf(cmd, sizeof cmd, "%s quantize %s/models/%s.gguf %s %s >/dev/null 2>&1", bin && *bin ? bin : "build/lanes",
		 t_shared(), src, path, ft);
	return system(cmd) == 0;
}

// t_quantize of ref-llama-F32.
static inline bool t_quantize_ref(const char *tag, const char *ft, char *path, size_t n) {
	return t_quantize(tag, "ref-llama-F32", ft, path, n);
}

#endif
