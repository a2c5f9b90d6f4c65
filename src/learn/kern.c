// learn/kern: the f32 products the training pass is made of — a weight matrix (rows
// dequantized from their stored blocks, a tile at a time) times activation rows, its
// transpose times gradient rows, and sums of outer products for the adapters' gradients.
// Portable C on the compiler's vector extension; each output's sum runs in one fixed order.
#include "learn/learn_int.h"

#include "tensor/tensor.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#define TILE 16 // weight rows per tile: one vector of outputs
#define KB 256  // inputs per dequantized span: a multiple of every block size
#define NG 256  // activation rows per group

typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4))); // unaligned loads and stores

// Work below this many multiply-adds costs less alone than a handoff to the pool's threads.
#define POOL_MIN (1 << 18)

static void run(base_pool *pool, int64_t items, double macs, base_task_fn fn, void *arg) {
	if (pool && items > 1 && macs >= POOL_MIN && base_pool_threads(pool) > 1) base_pool_run(pool, fn, arg);
	else fn(arg, 0, 1);
}

// Rows o0..o0+nr-1, inputs k0..k0+kn-1 of a matrix as f32 into tile (rows KB apart); the rows
// past nr and the inputs from kn to the next multiple of TILE are zero.
static void dequant_tile(const tensor_kernels *ks, const model_matrix *w, const uint8_t *mat, int64_t o0, int64_t nr,
			 int64_t k0, int64_t kn, float *tile) {
	const gguf_ttype_info *ti = gguf_ttype_get(w->type);
	const size_t off = (size_t)(k0 / ti->block) * ti->bytes;
	const int64_t knp = (kn + TILE - 1) / TILE * TILE;
	for (int64_t r = 0; r < TILE; r++) {
		float *d = tile + r * KB;
		if (r < nr) tensor_k_f32_rows(ks, w->type, mat + (size_t)(o0 + r) * w->row_bytes + off, d, kn);
		else memset(d, 0, (size_t)kn * sizeof *d);
		for (int64_t c = kn; c < knp; c++) d[c] = 0.0f;
	}
}

typedef struct {
	const tensor_kernels *ks;
	const model_matrix *w;
	const uint8_t *mat;
	const float *x;
	int64_t ldx, n;
	float *y;
	int64_t ldy;
	float alpha;
	bool acc;
	int64_t tiles;
	atomic_llong next;
} fwd_job;

static void fwd_task(void *arg, int ith, int nth) {
	fwd_job *j = arg;
	const int64_t K = j->w->k;
	v16 tile_v[TILE * KB / 16], wt_v[KB], yb_v[NG];
	float *tile = (float *)tile_v, *wt = (float *)wt_v, *yb = (float *)yb_v;
	for (;;) {
		const int64_t t = atomic_fetch_add(&j->next, 1);
		if (t >= j->tiles) break;
		const int64_t o0 = t * TILE, nr = j->w->rows - o0 < TILE ? j->w->rows - o0 : TILE;
		for (int64_t g0 = 0; g0 < j->n; g0 += NG) {
			const int64_t ng = j->n - g0 < NG ? j->n - g0 : NG;
			memset(yb, 0, (size_t)(ng * TILE) * sizeof *yb);
			for (int64_t k0 = 0; k0 < K; k0 += KB) {
				const int64_t kn = K - k0 < KB ? K - k0 : KB;
				dequant_tile(j->ks, j->w, j->mat, o0, nr, k0, kn, tile);
				tensor_k_f32_t16(j->ks, tile, KB, kn, wt);
				tensor_k_f32_fwd(j->ks, wt, kn, j->x + g0 * j->ldx + k0, j->ldx, ng, yb);
			}
			for (int64_t i = 0; i < ng; i++) {
				float *y = j->y + (g0 + i) * j->ldy + o0;
				for (int64_t r = 0; r < nr; r++) y[r] = j->acc ? y[r] + j->alpha * yb[i * TILE + r] : j->alpha * yb[i * TILE + r];
			}
		}
	}
	(void)ith, (void)nth;
}

void lk_mat_fwd(base_pool *pool, const tensor_kernels *ks, const model_matrix *w, int64_t mat, const float *x, int64_t ldx, int64_t n, float *y,
		int64_t ldy, float alpha, bool acc) {
	if (n <= 0) return;
	fwd_job j = {.ks = ks, .w = w, .mat = (const uint8_t *)w->data + (size_t)mat * w->mat_bytes, .x = x, .ldx = ldx, .n = n, .y = y,
		     .ldy = ldy, .alpha = alpha, .acc = acc, .tiles = (w->rows + TILE - 1) / TILE};
	atomic_init(&j.next, 0);
	run(pool, j.tiles, (double)n * (double)w->rows * (double)w->k, fwd_task, &j);
}

typedef struct {
	const tensor_kernels *ks;
	const model_matrix *w;
	const uint8_t *mat;
	const float *dy;
	int64_t ldy, n;
	float *dx;
	int64_t ldx;
	int64_t spans;
	atomic_llong next;
} bwd_job;

// A thread owns a span of KB inputs and sums every weight row into it, rows in order.
static void bwd_task(void *arg, int ith, int nth) {
	bwd_job *j = arg;
	const int64_t K = j->w->k, rows = j->w->rows;
	v16 tile_v[TILE * KB / 16];
	float *tile = (float *)tile_v;
	for (;;) {
		const int64_t s = atomic_fetch_add(&j->next, 1);
		if (s >= j->spans) break;
		const int64_t k0 = s * KB, kn = K - k0 < KB ? K - k0 : KB;
		for (int64_t o0 = 0; o0 < rows; o0 += TILE) {
			const int64_t nr = rows - o0 < TILE ? rows - o0 : TILE;
			dequant_tile(j->ks, j->w, j->mat, o0, nr, k0, kn, tile);
			tensor_k_f32_bwd(j->ks, tile, KB, nr, kn, j->dy + o0, j->ldy, j->n, j->dx + k0, j->ldx);
		}
	}
	(void)ith, (void)nth;
}

void lk_mat_bwd(base_pool *pool, const tensor_kernels *ks, const model_matrix *w, int64_t mat, const float *dy, int64_t ldy, int64_t n, float *dx,
		int64_t ldx) {
	if (n <= 0) return;
	bwd_job j = {.ks = ks, .w = w, .mat = (const uint8_t *)w->data + (size_t)mat * w->mat_bytes, .dy = dy, .ldy = ldy, .n = n,
		     .dx = dx, .ldx = ldx, .spans = (w->k + KB - 1) / KB};
	atomic_init(&j.next, 0);
	run(pool, j.spans, (double)n * (double)w->rows * (double)w->k, bwd_task, &j);
}

typedef struct {
	int64_t rows, cols, n;
	const float *p, *q;
	int64_t ldp, ldq;
	float alpha;
	float *g;
	int64_t spans, items;
	atomic_llong next;
} outer_job;

static void outer_task(void *arg, int ith, int nth) {
	outer_job *j = arg;
	v16 acc[KB / 16];
	for (;;) {
		const int64_t it = atomic_fetch_add(&j->next, 1);
		if (it >= j->items) break;
		const int64_t r = it / j->spans, c0 = it % j->spans * KB, cn = j->cols - c0 < KB ? j->cols - c0 : KB;
		const int64_t nv = cn / 16;
		for (int64_t v = 0; v <= nv && v < KB / 16; v++) acc[v] = (v16){0};
		for (int64_t i = 0; i < j->n; i++) {
			const float pr = j->p[i * j->ldp + r];
			const float *q = j->q + i * j->ldq + c0;
			for (int64_t v = 0; v < nv; v++) acc[v] += pr * *(const v16u *)(q + 16 * v);
			for (int64_t c = nv * 16; c < cn; c++) acc[nv][c - nv * 16] += pr * q[c];
		}
		float *g = j->g + r * j->cols + c0;
		for (int64_t c = 0; c < cn; c++) g[c] += j->alpha * acc[c / 16][c % 16];
	}
	(void)ith, (void)nth;
}

void lk_outer(base_pool *pool, int64_t rows, int64_t cols, int64_t n, const float *p, int64_t ldp, const float *q,
	      int64_t ldq, float alpha, float *g) {
	if (n <= 0 || rows <= 0 || cols <= 0) return;
	outer_job j = {.rows = rows, .cols = cols, .n = n, .p = p, .q = q, .ldp = ldp, .ldq = ldq, .alpha = alpha, .g = g,
		       .spans = (cols + KB - 1) / KB};
	j.items = rows * j.spans;
	atomic_init(&j.next, 0);
	run(pool, j.items, (double)n * (double)rows * (double)cols, outer_task, &j);
}

// dx += the transposed Jacobian of y = x / rms(x) * w applied to dy (w NULL: no weight).
void lk_rms_bwd(const float *x, const float *w, int64_t n, float eps, const float *dy, float *dx) {
	double ss = 0.0, dot = 0.0;
	for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
	const double r = 1.0 / sqrt(ss / (double)n + (double)eps);
	for (int64_t i = 0; i < n; i++) dot += (double)x[i] * (w ? w[i] : 1.0f) * dy[i];
	const double c = r * r * r * dot / (double)n;
	for (int64_t i = 0; i < n; i++) dx[i] += (float)(r * (w ? w[i] : 1.0f) * dy[i] - x[i] * c);
}

// The transpose of tensor_rope_apply: each pair turned back by its angle (magnitude kept).
void lk_rope_t(const tensor_rope *rp, const double *cs, float *x, int32_t n_heads, int32_t head_dim) {
	const int32_t half = rp->n_rot / 2;
	for (int32_t h = 0; h < n_heads; h++) {
		float *v = x + (size_t)h * head_dim;
		for (int32_t i = 0; i < half; i++) {
			const int32_t a = rp->neox ? i : 2 * i, b = rp->neox ? i + half : 2 * i + 1;
			const double x0 = v[a], x1 = v[b], c = cs[2 * i], s = cs[2 * i + 1];
			v[a] = (float)(x0 * c + x1 * s);
			v[b] = (float)(x1 * c - x0 * s);
		}
	}
}

// dg, du from da through act = silu(g) * u.
void lk_swiglu_bwd(const float *g, const float *u, const float *da, float *dg, float *du, int64_t n) {
	for (int64_t i = 0; i < n; i++) {
		const double gv = g[i], sig = 1.0 / (1.0 + exp(-gv));
		dg[i] = (float)(da[i] * u[i] * sig * (1.0 + gv * (1.0 - sig)));
		du[i] = (float)(da[i] * gv * sig);
	}
}

void lk_geglu_bwd(const float *g, const float *u, const float *da, float *dg, float *du, int64_t n) {
	const double c = 0.7978845608028654;
	for (int64_t i = 0; i < n; i++) {
		const double x = g[i], t = tanh(c * (x + 0.044715 * x * x * x));
		const double dgelu = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
		dg[i] = (float)(da[i] * u[i] * dgelu);
		du[i] = (float)(da[i] * 0.5 * x * (1.0 + t));
	}
}

void lk_swiglu_oai_bwd(const float *g, const float *u, const float *da, float *dg, float *du, int64_t n) {
	const double A = TENSOR_OAI_ALPHA, lim = TENSOR_OAI_LIMIT;
	for (int64_t i = 0; i < n; i++) {
		const double x = g[i] < lim ? g[i] : lim, y = u[i] < -lim ? -lim : u[i] > lim ? lim : u[i];
		const double sig = 1.0 / (1.0 + exp(-A * x));
		dg[i] = g[i] < lim ? (float)(da[i] * (y + 1.0) * sig * (1.0 + A * x * (1.0 - sig))) : 0.0f;
		du[i] = u[i] > -lim && u[i] < lim ? (float)(da[i] * x * sig) : 0.0f;
	}
}

// Eight running sums (a vector's worth), folded in a fixed order.
float lk_dot(const float *a, const float *b, int64_t n) {
	float acc[8] = {0};
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
	for (; i < n; i++) acc[0] += a[i] * b[i];
	return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}
