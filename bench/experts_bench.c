// bench: the expert observer's cost in the forward pass — passes of 1, 4 and 512 rows with the
// routers' choices kept and counted (as the lane host does after each pass) and without,
// interleaved, the fastest of each compared; and, apart from the machine's noise, the work the
// observer adds alone (copying each layer's choices, adding them up) timed over many repetitions.
// usage: experts_bench MODEL [THREADS] [REPS]
#include "base/base.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_u64(const void *a, const void *b) {
	const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv) {
	if (argc < 2) {
		fprintf(stderr, "usage: experts_bench MODEL [THREADS] [REPS]\n");
		return 2;
	}
	const int nth = argc > 2 ? atoi(argv[2]) : 2, reps = argc > 3 ? atoi(argv[3]) : 15;
	char err[512];
	model *m = NULL;
	if (model_load(&m, argv[1], err, sizeof err)) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	const model_hparams *hp = model_hparams_of(m);
	if (!hp->n_experts) {
		fprintf(stderr, "%s has no experts\n", argv[1]);
		return 1;
	}
	enum { MAXR = 512, CTX = 64 };
	base_pool *pool = NULL;
	kv_cache *kv = NULL;
	model_ws *ws = NULL;
	model_routes *routes = NULL;
	model_experts *ex = NULL;
	kv_config kc = model_kv_config(m, KV_F16S, 4, CTX + MAXR + 1, 16);
	if (base_pool_new(&pool, nth) || kv_new(&kv, &kc, err, sizeof err) || model_ws_new(&ws, m, MAXR, nth, 0, err, sizeof err) ||
	    model_routes_new(&routes, hp, MAXR, err, sizeof err) || model_experts_new(&ex, hp, 20, err, sizeof err)) {
		fprintf(stderr, "setup: %s\n", err);
		return 1;
	}
	float *lg = malloc(sizeof(float) * MAXR * (size_t)hp->n_vocab);
	model_row *rows = malloc(sizeof *rows * MAXR);
	int32_t *grp = calloc(MAXR, sizeof *grp);
	uint64_t *t[2] = {malloc(sizeof(uint64_t) * (size_t)reps), malloc(sizeof(uint64_t) * (size_t)reps)};
	// four sequences with a context of CTX tokens each: decode rows read some KV
	for (int s = 0; s < 4; s++) {
		for (int i = 0; i < CTX; i++) rows[i] = (model_row){(int32_t)((i * 7 + s * 13 + 3) % hp->n_vocab), i, s, false, NULL};
		if (model_forward_ws(m, kv, pool, ws, rows, CTX, lg, err, sizeof err)) {
			fprintf(stderr, "%s\n", err);
			return 1;
		}
	}
	printf("| rows | kept and counted: fastest ms | not: fastest ms | overhead | medians on / off ms | the observer's work alone |\n"
	       "|---|---|---|---|---|---|\n");
	const int sizes[] = {1, 4, MAXR};
	for (int si = 0; si < 3; si++) {
		const int n = sizes[si];
		for (int r = 0; r < reps; r++)
			for (int on = 1; on >= 0; on--) {
				// n rows: one decode row per sequence, or a prompt of n rows on sequence 0
				for (int i = 0; i < n; i++)
					rows[i] = n <= 4 ? (model_row){(int32_t)((i * 31 + r) % hp->n_vocab), CTX, i, true, NULL}
							 : (model_row){(int32_t)((i * 31 + r) % hp->n_vocab), CTX + i, 0, i == n - 1, NULL};
				model_ws_set_routes(ws, on ? routes : NULL);
				const uint64_t t0 = base_now_ns();
				if (model_forward_ws(m, kv, pool, ws, rows, n, lg, err, sizeof err)) {
					fprintf(stderr, "%s\n", err);
					return 1;
				}
				if (on) model_experts_add(ex, routes, grp);
				t[on][r] = base_now_ns() - t0;
				for (int s = 0; s < 4; s++) kv_seq_truncate(kv, s, CTX);
			}
		qsort(t[0], (size_t)reps, sizeof *t[0], cmp_u64);
		qsort(t[1], (size_t)reps, sizeof *t[1], cmp_u64);
		// what the pass adds: a copy of each layer's ids and weights, then the counting
		const size_t bytes = (size_t)n * (size_t)hp->n_experts_used * sizeof(int32_t);
		int32_t *src = calloc((size_t)n * (size_t)hp->n_experts_used, sizeof *src), *dst = malloc(bytes);
		uint64_t work = UINT64_MAX;
		for (int k = 0; k < 1000 && src && dst; k++) {
			const uint64_t t0 = base_now_ns();
			for (int l = 0; l < hp->n_layers; l++) {
				memcpy(dst, src, bytes);
				memcpy(src, dst, bytes);
			}
			model_experts_add(ex, routes, grp);
			const uint64_t dt = base_now_ns() - t0;
			if (dt < work) work = dt;
		}
		free(src), free(dst);
		printf("| %d | %.3f | %.3f | %+.2f%% | %.3f / %.3f | %.1f us = %.3f%% |\n", n, t[1][0] / 1e6, t[0][0] / 1e6,
		       100.0 * ((double)t[1][0] - (double)t[0][0]) / (double)t[0][0], t[1][reps / 2] / 1e6, t[0][reps / 2] / 1e6,
		       work / 1e3, 100.0 * (double)work / (double)t[0][0]);
	}
	free(t[0]), free(t[1]), free(lg), free(rows), free(grp);
	model_experts_free(ex);
	model_routes_free(routes);
	model_ws_free(ws);
	kv_free(kv);
	base_pool_free(pool);
	model_free(m);
	return 0;
}
