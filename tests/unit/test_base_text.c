// tests: text from outside as base handles it — base_utf8_copy keeps whole characters and
// replaces bytes that are not UTF-8 with U+FFFD, and base_log escapes control characters and
// invalid bytes so a logged value can never start a line of its own, in text and in JSON;
// base_parse_duration reads keep-alives as Ollama and Go write them.
#include "t.h"
#include "base/base.h"

#include <unistd.h>

int main(void) {
	char out[16];
	// "é" is 2 bytes: a buffer of 4 holds one of them and the NUL, never half of the second
	CHECK(base_utf8_copy(out, 4, "\xc3\xa9\xc3\xa9", 4) == 2 && !strcmp(out, "\xc3\xa9"));
	CHECK(base_utf8_copy(out, 5, "x\xc3\xa9\xc3\xa9", 5) == 3 && !strcmp(out, "x\xc3\xa9"));
	// a lone lead byte, a stray continuation byte and an overlong form each become U+FFFD
	CHECK(base_utf8_copy(out, sizeof out, "a\xc3" "b\x80\xc0\xaf", 6) == 14);
	CHECK(!strcmp(out, "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"));
	// a source cut inside a character ends in U+FFFD (one per byte), not in half a character
	CHECK(base_utf8_copy(out, sizeof out, "\xe2\x82", 2) == 6 && !strcmp(out, "\xef\xbf\xbd\xef\xbf\xbd"));
	CHECK(base_utf8_copy(out, 1, "abc", 3) == 0 && !out[0]);

	// the log line of a value with CR, LF, ESC and an invalid byte stays one line
	char path[256];
	snprintf(path, sizeof path, "%s/base-log-XXXXXX", t_tmp());
	int fd = mkstemp(path), saved = dup(2);
	CHECK(fd >= 0 && saved >= 0);
	fflush(stderr);
	dup2(fd, 2);
	base_log(LOG_LEVEL_INFO, "t", "GET /a\r\nI http: forged\x1b[31m\xff \xc3\xa9");
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	size_t len = 0;
	char *got = t_read_file(path, &len);
	CHECKF(got && !strcmp(got, "I t: GET /a\\x0d\\x0aI http: forged\\x1b[31m\\xff \xc3\xa9\n"), "%s", got ? got : "(none)");
	free(got);
	close(fd);
	unlink(path);

	// --log-format json: the same value is one object on one line, its text a JSON string
	// (quotes, backslashes and control characters escaped, invalid bytes U+FFFD)
	snprintf(path, sizeof path, "%s/base-log-XXXXXX", t_tmp());
	fd = mkstemp(path), saved = dup(2);
	CHECK(fd >= 0 && saved >= 0);
	fflush(stderr);
	dup2(fd, 2);
	base_log_json = true;
	base_log(LOG_LEVEL_WARN, "t", "GET /a\r\n\"q\" \\ \x1b\xff \xc3\xa9");
	base_log_json = false;
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	got = t_read_file(path, &len);
	const char *body = got ? strstr(got, "Z\",\"level\"") : NULL;
	CHECKF(got && !strncmp(got, "{\"time\":\"", 9) && strlen(got) == 23 + 9 + strlen(body) && got[len - 1] == '\n' && !strchr(got, '\r') &&
		       strchr(got, '\n') == got + len - 1,
	       "%s", got ? got : "(none)");
	CHECKF(body && !strcmp(body, "Z\",\"level\":\"warn\",\"module\":\"t\",\"msg\":\"GET /a\\u000d\\u000a\\\"q\\\" \\\\ \\u001b\xef\xbf\xbd \xc3\xa9\"}\n"),
	       "%s", got ? got : "(none)");
	free(got);
	close(fd);
	unlink(path);

	// durations: units add up, a bare number is seconds, negative or past a century is for good
	const struct {
		const char *in;
		bool ok;
		double s;
	} durs[] = {{"5m", true, 300}, {"1h30m", true, 5400}, {"250ms", true, 0.25}, {"30", true, 30}, {"0", true, 0},
		    {"-1", true, -1}, {"1.5s", true, 1.5}, {"-5m", true, -1}, {"1e12", true, -1}, {"", false, 0},
		    {"1e308h-1e308h", true, -1}, {"5x", false, 0}, {"m", false, 0}, {"5 m", false, 0}, {"nan", false, 0}, {"1e999", false, 0}};
	for (size_t i = 0; i < sizeof durs / sizeof durs[0]; i++) {
		double v = 12345;
		const bool ok = base_parse_duration(durs[i].in, &v);
		CHECKF(ok == durs[i].ok && (!ok || v == durs[i].s), "'%s': %d %g", durs[i].in, ok, v);
	}
	T_DONE("base_text");
}
