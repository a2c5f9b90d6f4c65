// tests: replays the request-head fuzz corpus (tests/corpus/http_head) through the fuzz target,
// then every prefix of each input, as a head arrives in pieces. Every input returns, each
// within bounded time.
#include "../fuzz/fuzz_http_head.c"
#include "replay.h"
#include "t.h"

// a sanitizer build is slow; a scan that looped would take far longer
#define SLOW_US (1000u * 1000)

int main(void) {
	uint64_t slowest = 0;
	int n = replay_dir_timed("tests/corpus/http_head", &slowest);
	CHECKF(n >= 10, "corpus replayed (%d files)", n);
	static const char *const heads[] = {"get", "post_length", "chunked", "chunked_lf", "blank_lines"};
	int cuts = 0;
	for (size_t k = 0; k < sizeof heads / sizeof *heads; k++) {
		char path[1024];
		snprintf(path, sizeof path, "tests/corpus/http_head/%s", heads[k]);
		size_t len = 0;
		uint8_t *b = (uint8_t *)t_read_file(path, &len);
		CHECKF(b != NULL, "%s", path);
		for (size_t cut = 0; b && cut <= len; cut++, cuts++) {
			const uint64_t dt = replay_one(b, cut);
			if (dt > slowest) slowest = dt;
		}
		free(b);
	}
	CHECKF(cuts > 100, "prefixes replayed (%d)", cuts);
	CHECKF(slowest < SLOW_US, "slowest input %llu us", (unsigned long long)slowest);
	T_DONE("fuzz_http_head");
}
