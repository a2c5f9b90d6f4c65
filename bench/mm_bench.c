// bench: the matmul kernels alone — G multiply-adds/s of one weight matrix (2048 x 5632, a
// tinyllama FFN's shape) against 1, 4, 16 and 64 activation rows, per type and activation
// width, on one thread and on T. The best of several passes counts (a busy machine only slows
// a pass); weights stay in cache from pass to pass at 16 rows and more, as a batch sees them.
// usage: mm_bench [THREADS] [TYPES...]   (default: 2; Q4_0 Q8_0 Q4_K Q6_K)
#include "base/base.h"
#include "cli/settings.h"
#include "tensor/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float frand(uint64_t *s) {
	*s = splitmix64(*s);
	return (float)((double)(*s >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static uint32_t type_named(const char *n) {
	for (uint32_t t = 0; t < GGUF_T_COUNT; t++)
		if (tensor_traits_of(t) && !strcmp(tensor_traits_of(t)->name, n)) return t;
	return GGUF_T_COUNT;
}

// Best G multiply-adds/s of passes of rows activation rows through m.
static double rate(base_pool *pool, const tensor_mat *m, const float *x, int64_t rows, float *y) {
	const int64_t mat = 0;
	const double macs = (double)m->rows * (double)m->k * (double)rows;
	const int passes = rows >= 16 ? 6 : 20;
	double best = 0;
	for (int p = 0; p < passes; p++) {
		const uint64_t t0 = base_now_ns();
		tensor_matmuls(pool, 1, &m, &mat, x, rows, &y);
		const double g = macs / (double)(base_now_ns() - t0);
		best = g > best ? g : best;
	}
	return best;
}

int main(int argc, char **argv) {
	if (cli_env_apply()) return 2;
	const int nth = argc > 1 ? atoi(argv[1]) : 2;
	const char *def[] = {"Q4_0", "Q8_0", "Q4_K", "Q6_K"};
	const char *const *names = argc > 2 ? (const char *const *)argv + 2 : def;
	const int ntypes = argc > 2 ? argc - 2 : 4;
	const int64_t K = 2048, N = 5632, R = 64;
	uint64_t seed = 7;
	float *wf = malloc(sizeof(float) * (size_t)(K * N)), *x = malloc(sizeof(float) * (size_t)(K * R));
	float *y = malloc(sizeof(float) * (size_t)(N * R));
	base_pool *pool = NULL, *one = NULL;
	if (!wf || !x || !y || nth < 1 || base_pool_new(&pool, nth) || base_pool_new(&one, 1)) {
		fprintf(stderr, "mm_bench: cannot run\n");
		return 1;
	}
	for (int64_t i = 0; i < K * N; i++) wf[i] = frand(&seed);
	for (int64_t i = 0; i < K * R; i++) x[i] = frand(&seed) * 3.0f;
	const tensor_kernels *ks = tensor_kernels_default();
	printf("kernels %s, %lld x %lld; G multiply-adds/s, best pass; rows 1 / 4 / 16 / 64\n", tensor_kernels_name(ks),
	       (long long)N, (long long)K);
	for (int t = 0; t < ntypes; t++) {
		const uint32_t type = type_named(names[t]);
		const tensor_traits *tt = type < GGUF_T_COUNT ? tensor_traits_of(type) : NULL;
		if (!tt || !tt->from_f32) {
			fprintf(stderr, "mm_bench: no type %s\n", names[t]);
			continue;
		}
		const size_t rb = tensor_row_bytes(type, K);
		uint8_t *w = malloc(rb * (size_t)N);
		tensor_quantize_rows(type, wf, w, N, K, pool);
		const size_t pb = tensor_pack_bytes(ks, type, N, K, 1);
		void *packed = pb ? malloc(pb) : NULL;
		for (int a = 0; a < TENSOR_ACT_COUNT; a++) {
			tensor_mat m;
			tensor_mat_init(&m, tensor_kernels_with_act(ks, (enum tensor_act)a), type, N, K, 1, w, packed, pool);
			printf("%-5s %-3s", tt->name, tensor_act_name((enum tensor_act)a));
			for (int th = 0; th < 2; th++) {
				printf("  %d thread%s:", th ? nth : 1, th && nth > 1 ? "s" : "");
				const int64_t rows[] = {1, 4, 16, 64};
				for (int r = 0; r < 4; r++) printf(" %6.1f", rate(th ? pool : one, &m, x, rows[r], y));
			}
			printf("\n");
			fflush(stdout);
		}
		free(packed);
		free(w);
	}
	base_pool_free(pool);
	base_pool_free(one);
	free(wf), free(x), free(y);
	return 0;
}
