// bench: memory read bandwidth from 1 and from T threads — the ceiling single-stream decode
// can approach (bytes of weights read per token / bandwidth).
#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	const uint64_t *buf;
	size_t n;          // words
	uint64_t sum[64];  // per thread, kept so the reads are not optimized away
} bw_job;

typedef uint64_t v4 __attribute__((vector_size(32), aligned(8)));

// Wide loads, four independent sums: the loop is bound by memory, not by adds.
__attribute__((target_clones("avx2", "default"))) static void reader(void *arg, int ith, int nth) {
	bw_job *j = arg;
	size_t a = j->n * (size_t)ith / (size_t)nth, b = j->n * (size_t)(ith + 1) / (size_t)nth;
	a &= ~(size_t)15;
	v4 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
	for (size_t i = a; i + 16 <= b; i += 16) {
		const v4 *p = (const v4 *)(j->buf + i);
		s0 ^= p[0];
		s1 ^= p[1];
		s2 ^= p[2];
		s3 ^= p[3];
	}
	v4 s = s0 ^ s1 ^ s2 ^ s3;
	j->sum[ith] = s[0] ^ s[1] ^ s[2] ^ s[3];
}

// Best GB/s of reps passes over size bytes with nth threads.
static double measure(const uint64_t *buf, size_t size, int nth, int reps) {
	base_pool *pool = NULL;
	if (base_pool_new(&pool, nth)) return 0;
	bw_job j = {.buf = buf, .n = size / 8};
	double best = 0;
	for (int r = 0; r < reps; r++) {
		uint64_t t0 = base_now_ns();
		base_pool_run(pool, reader, &j);
		double gbs = (double)size / (double)(base_now_ns() - t0);
		if (gbs > best) best = gbs;
	}
	base_pool_free(pool);
	return best;
}

int main(int argc, char **argv) {
	int threads = argc > 1 ? atoi(argv[1]) : base_cpu_count();
	size_t size = (size_t)1 << 30;
	uint64_t *buf = malloc(size);
	if (!buf || threads < 1 || threads > 64) {
		fprintf(stderr, "bw: cannot run\n");
		return 1;
	}
	memset(buf, 1, size);
	double one = measure(buf, size, 1, 5), all = measure(buf, size, threads, 5);
	printf("{\"bw1_gbs\": %.2f, \"bwN_gbs\": %.2f, \"threads\": %d}\n", one, all, threads);
	free(buf);
	return 0;
}
