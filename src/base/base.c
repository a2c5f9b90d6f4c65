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

size_t base_utf8_len(const unsigned char *s, size_t n) {
	unsigned c = s[0];
	size_t len;
	unsigned cp;
	if (c < 0x80) return 1;
	if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
	else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
	else return 0;
	if (n < len) return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80) return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

size_t base_utf8_copy(char *dst, size_t cap, const char *src, size_t n) {
	size_t o = 0;
	for (size_t i = 0; i < n && src[i];) {
		size_t l = base_utf8_len((const unsigned char *)src + i, n - i);
		const char *p = l ? src + i : "\xef\xbf\xbd";
		size_t pl = l ? l : 3;
		if (o + pl >= cap) break;
		memcpy(dst + o, p, pl);
		o += pl;
		i += l ? l : 1;
	}
	dst[o] = 0;
	return o;
}

static bool log_bar; // under stderr's lock

void base_log(int level, const char *module, const char *fmt, ...) {
	static const char tag[] = "EWID";
	char line[2048], out[2048 * 4 + 2];
	int n = snprintf(line, sizeof line, "%c %s: ", tag[level & 3], module);
	va_list ap;
	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
	va_end(ap);
	size_t len = strlen(line), o = 0;
	for (size_t i = 0; i < len;) {
		const unsigned char *c = (const unsigned char *)line + i;
		size_t l = *c < 0x20 || *c == 0x7f ? 0 : base_utf8_len(c, len - i);
		if (l) memcpy(out + o, c, l), o += l, i += l;
		else o += (size_t)snprintf(out + o, 5, "\\x%02x", *c), i++;
	}
	// one fputs per line so concurrent threads do not interleave inside a line
	out[o++] = '\n';
	out[o] = 0;
	flockfile(stderr);
	if (log_bar) fputs("\r\033[K", stderr);
	log_bar = false;
	fputs(out, stderr);
	funlockfile(stderr);
}

bool base_log_bar(bool drawn) {
	const bool was = log_bar;
	log_bar = drawn;
	return was;
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
