// tests: a tiny harness. CHECK records a failure with file and line and goes on;
// T_DONE prints "NAME: N passed, M failed" (the runner sums these) and sets the exit code.
#ifndef LANES_T_H
#define LANES_T_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_passed, t_failed;

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (cond) t_passed++;                                            \
		else {                                                           \
			t_failed++;                                              \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
		}                                                                \
	} while (0)

#define CHECKF(cond, ...)                                                        \
	do {                                                                     \
		if (cond) t_passed++;                                            \
		else {                                                           \
			t_failed++;                                              \
			fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                            \
			fputc('\n', stderr);                                     \
		}                                                                \
	} while (0)

#define T_DONE(name)                                                             \
	do {                                                                     \
		printf("%s: %d passed, %d failed\n", (name), t_passed, t_failed); \
		return t_failed ? 1 : 0;                                         \
	} while (0)

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

#endif
