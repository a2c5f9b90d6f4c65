// base: error messages, logging, clocks, panics and hashing.
#include "base/base.h"

#include <math.h>

#include <errno.h>

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
bool base_log_json = false;

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

// The line as JSON: the time in UTC to the millisecond, the level's name, the module, the text
// with quotes, backslashes and control characters escaped (invalid UTF-8 is U+FFFD already).
static size_t log_json(char *out, size_t cap, int level, const char *module, const char *msg) {
	static const char *const names[] = {"error", "warn", "info", "debug"};
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	size_t o = (size_t)snprintf(out, cap, "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\",\"level\":\"%s\",\"module\":\"%s\",\"msg\":\"",
				    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
				    ts.tv_nsec / 1000000, names[level & 3], module);
	for (const unsigned char *c = (const unsigned char *)msg; *c && o + 8 < cap; c++) {
		if (*c == '"' || *c == '\\') out[o++] = '\\', out[o++] = (char)*c;
		else if (*c < 0x20 || *c == 0x7f) o += (size_t)snprintf(out + o, 7, "\\u%04x", *c);
		else out[o++] = (char)*c;
	}
	o += (size_t)snprintf(out + o, cap - o, "\"}");
	return o;
}

void base_log(int level, const char *module, const char *fmt, ...) {
	static const char tag[] = "EWID";
	char line[2048], out[2048 * 4 + 128];
	int n = base_log_json ? 0 : snprintf(line, sizeof line, "%c %s: ", tag[level & 3], module);
	va_list ap;
	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
	va_end(ap);
	size_t o = 0;
	if (base_log_json) {
		char text[sizeof line * 3];
		base_utf8_copy(text, sizeof text, line, strlen(line));
		o = log_json(out, sizeof out - 2, level, module, text);
	} else {
		size_t len = strlen(line);
		for (size_t i = 0; i < len;) {
			const unsigned char *c = (const unsigned char *)line + i;
			size_t l = *c < 0x20 || *c == 0x7f ? 0 : base_utf8_len(c, len - i);
			if (l) memcpy(out + o, c, l), o += l, i += l;
			else o += (size_t)snprintf(out + o, 5, "\\x%02x", *c), i++;
		}
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

bool base_parse_duration(const char *p, double *seconds) {
	if (!p || !*p) return false;
	double total = 0;
	while (*p) {
		char *end;
		errno = 0;
		const double x = strtod(p, &end);
		if (end == p || errno || !isfinite(x) || *p == ' ') return false;
		p = end;
		double unit = 1;
		if (!strncmp(p, "ms", 2)) unit = 1e-3, p += 2;
		else if (*p == 'h') unit = 3600, p++;
		else if (*p == 'm') unit = 60, p++;
		else if (*p == 's') p++;
		else if (*p) return false;
		total += x * unit;
	}
	// past a century is for good: nothing is timed that far
	*seconds = !(total >= 0 && total <= 3.2e9) ? -1 : total; // NaN (inf - inf) too
	return true;
}

uint64_t base_hash64(const void *data, size_t n, uint64_t seed) {
	const uint8_t *p = data;
	uint64_t h = 0xcbf29ce484222325ull ^ splitmix64(seed);
	for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
	return splitmix64(h);
}
