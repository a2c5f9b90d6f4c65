// bench: model load time without and with a progress callback — loads one model REPS times
// each way, alternating, and prints the median and best of each and the reports made.
// usage: load_bench MODEL.gguf [REPS]   (default 5)
#include "base/base.h"
#include "cli/settings.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>

static void count(void *ud, uint64_t done, uint64_t total) {
	uint64_t *n = ud;
	*n += 1 + (done > total); // the comparison keeps the arguments live
}

static int cmp(const void *a, const void *b) {
	const double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv) {
	if (cli_env_apply()) return 2;
	if (argc < 2) {
		fprintf(stderr, "usage: load_bench MODEL.gguf [REPS]\n");
		return 2;
	}
	const int reps = argc > 2 ? atoi(argv[2]) : 5;
	if (reps < 1 || reps > 100) {
		fprintf(stderr, "load_bench: REPS must be 1..100\n");
		return 2;
	}
	double ms[2][100];
	uint64_t reports = 0;
	char err[512];
	for (int r = 0; r < reps; r++) {
		for (int with = 0; with < 2; with++) {
			model *m;
			const uint64_t t0 = base_now_us();
			if (model_load_progress(&m, argv[1], with ? count : NULL, &reports, err, sizeof err)) {
				fprintf(stderr, "load_bench: %s\n", err);
				return 1;
			}
			ms[with][r] = (double)(base_now_us() - t0) / 1000.0;
			model_free(m);
		}
	}
	for (int with = 0; with < 2; with++) qsort(ms[with], (size_t)reps, sizeof ms[0][0], cmp);
	printf("model load (%d each, alternating): no callback median %.1f ms (best %.1f); with a callback median %.1f ms (best %.1f), %llu reports per load\n",
	       reps, ms[0][reps / 2], ms[0][0], ms[1][reps / 2], ms[1][0], (unsigned long long)(reports / (uint64_t)reps));
	return 0;
}
