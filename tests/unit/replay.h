// tests: replays fuzz corpora through a fuzz target's entry point, so every input the
// fuzzer ever kept runs again in `make test`.
#ifndef LANES_REPLAY_H
#define LANES_REPLAY_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// Runs every regular file in dir; returns how many ran, -1 when dir cannot be read.
static inline int replay_dir(const char *dir) {
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
		LLVMFuzzerTestOneInput(buf, got);
		free(buf);
		n++;
	}
	closedir(d);
	return n;
}

#endif
