// base: error messages, logging, clocks, panics and hashing.
#include "base/base.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *base_strerror(int code) {
	switch (code) {
#define LANES__ERR_MSG(name, c, msg) \
	case (c): return (msg);
		LANES_ERRORS(LANES__ERR_MSG)
#undef LANES__ERR_MSG
	}
	return "unknown error";
}

int base_seterr(char *err, size_t errlen, int code, const char *fmt, ...) {
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

int base_log_level = LOG_LEVEL_INFO;

void base_log(int level, const char *module, const char *fmt, ...) {
	static const char tag[] = "EWID";
	char line[2048];
	int n = snprintf(line, sizeof line, "%c %s: ", tag[level & 3], module);
	va_list ap;
	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
	va_end(ap);
	// one fputs per line so concurrent threads do not interleave inside a line
	size_t len = strlen(line);
	if (len + 1 < sizeof line) { line[len] = '\n'; line[len + 1] = 0; }
	fputs(line, stderr);
}

_Noreturn void base_panic(const char *file, int line, const char *what) {
	fprintf(stderr, "lanes: invariant broken at %s:%d: %s\n", file, line, what);
	abort();
}

uint64_t base_now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t base_now_us(void) { return base_now_ns() / 1000; }

uint64_t base_hash64(const void *data, size_t n, uint64_t seed) {
	const uint8_t *p = data;
	uint64_t h = 0xcbf29ce484222325ull ^ splitmix64(seed);
	for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
	return splitmix64(h);
}
