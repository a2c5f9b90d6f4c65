// tests: replays fuzz corpora through a fuzz target's entry point, so every input the
// fuzzer ever kept runs again in `make test`.
#ifndef LANES_REPLAY_H
#define LANES_REPLAY_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static inline uint64_t replay_now_us(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

// Runs data through the target; returns how long it took in microseconds.
static inline uint64_t replay_one(const uint8_t *data, size_t size) {
	const uint64_t t0 = replay_now_us();
	LLVMFuzzerTestOneInput(data, size);
	return replay_now_us() - t0;
}

// Runs every regular file in dir; returns how many ran, -1 when dir cannot be read. *slowest_us
// (when not NULL) keeps the longest run it saw.
static inline int replay_dir_timed(const char *dir, uint64_t *slowest_us) {
	DIR *d = opendir(dir);
	if (!d) return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.') continue;
		char path[2048];
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		FILE *f = fopen(path, "rb");
		if (!f) continue;
		fseek(f, 0, SEEK_END);
		long len = ftell(f);
		fseek(f, 0, SEEK_SET);
		uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
		size_t got = buf && len > 0 ? fread(buf, 1, (size_t)len, f) : 0;
		fclose(f);
		if (!buf) continue;
		const uint64_t dt = replay_one(buf, got);
		if (slowest_us && dt > *slowest_us) *slowest_us = dt;
		free(buf);
		n++;
	}
	closedir(d);
	return n;
}

static inline int replay_dir(const char *dir) { return replay_dir_timed(dir, NULL); }

#endif
