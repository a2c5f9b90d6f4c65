// tests: the kernel contract — every kernel set this CPU runs, every weight type: the fast
// matmul against the reference within a stated tolerance, bit-identical outputs whatever
// the batch, slice, fusion or thread count; attention, RMSNorm, SwiGLU and the f16s encoder
// against theirs; and the dispatch (names, LANES_KERNELS choices).
//
// Tolerances, with A = sum_i |w_i x_i| over a dot product (w the dequantized weights):
//  - activations on the int8 grid of every 32-block (x = m * 2^-6, |m| <= 127, one |m| = 127),
//    where quantizing them loses nothing: |fast - ref| <= 2^-12 A. Only float rounding is
//    left (a few roundings per block of 32, k/32 blocks), far below this bar, while one
//    misplaced code costs about A/k = 2^-9 A at k = 512, so a layout error cannot hide.
//  - random activations: the same plus what the activation width can cost, each x moved at
//    most amax_b / (127 * 256) (q16: two int8 halves) or amax_b / (127 * 2) (q8: half a step
//    of one int8) in its block b: the sum over blocks of that times sum_{i in b} |w_i|. Float
//    types (F32, F16, BF16) keep float activations, so their bound is 2^-12 A alone.
// Every set runs in both widths (enum tensor_act), the reference's q8 included. MXFP4 in width q8
// is the reference's bit for bit: its power-of-two scale leaves no float step rounding apart.
//  - attention: 1e-5 * max|v| (float exp and dot products against the double-precision
//    softmax of the reference); RMSNorm 1e-6 relative; SwiGLU 2e-6 relative for |g| <= 20;
//    f16s: the scale the fast encoder picks has at most 1.001 x the reference's squared error;
//    the KV block quantizers (Q8_0, Q4_0): the reference's bytes.
#include "t.h"

#include "cli/settings.h"
#include "tensor/tensor.h"

#include <math.h>

static float frand(uint64_t *s) {
	*s = splitmix64(*s);
	return (float)((double)(*s >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static const uint32_t all_types[] = {GGUF_T_F32,  GGUF_T_F16,  GGUF_T_BF16, GGUF_T_Q4_0, GGUF_T_Q4_1,
				     GGUF_T_Q5_0, GGUF_T_Q5_1, GGUF_T_Q8_0, GGUF_T_Q2_K, GGUF_T_Q3_K,
				     GGUF_T_Q4_K, GGUF_T_Q5_K, GGUF_T_Q6_K, GGUF_T_IQ4_NL, GGUF_T_IQ4_XS,
				     GGUF_T_TQ1_0, GGUF_T_TQ2_0, GGUF_T_IQ3_XXS, GGUF_T_IQ3_S,
				     GGUF_T_IQ2_XXS, GGUF_T_IQ2_XS, GGUF_T_IQ2_S, GGUF_T_IQ1_S, GGUF_T_IQ1_M, GGUF_T_MXFP4,
				     GGUF_T_Q8_1}; // Q8_1: no x86 kernel, read in place as the reference reads it
#define N_TYPES (int)(sizeof all_types / sizeof all_types[0])

static bool is_float(uint32_t t) { return t == GGUF_T_F32 || t == GGUF_T_F16 || t == GGUF_T_BF16; }
static bool is_grid(uint32_t t) {
	return t == GGUF_T_IQ3_XXS || t == GGUF_T_IQ3_S || t == GGUF_T_IQ2_XXS || t == GGUF_T_IQ2_XS || t == GGUF_T_IQ2_S ||
	       t == GGUF_T_IQ1_S || t == GGUF_T_IQ1_M;
}

// Activations of n rows: on the int8 grid of every block of 32, or plain random.
static void make_x(float *x, int64_t n, int64_t k, bool grid, uint64_t *seed) {
	for (int64_t r = 0; r < n; r++)
		for (int64_t i = 0; i < k; i++) {
			float *v = &x[r * k + i];
			if (grid) {
				int m = (int)lrintf(frand(seed) * 127.0f);
				if (i % 32 == (r * 7 + i / 32) % 32) m = m < 0 ? -127 : 127;
				*v = (float)m * 0x1p-6f;
			} else {
				*v = frand(seed) * 2.5f;
			}
		}
}

// The activation-quantization term of the bound for one dot product: steps of 1/256 (q16)
// or 1/2 (q8) of amax / 127.
static double act_bound(const float *w, const float *x, int64_t k, double step) {
	double b = 0;
	for (int64_t i0 = 0; i0 < k; i0 += 32) {
		double amax = 0, sw = 0;
		for (int64_t i = i0; i < i0 + 32 && i < k; i++) {
			amax = fabs(x[i]) > amax ? fabs(x[i]) : amax;
			sw += fabs(w[i]);
		}
		b += amax / 127.0 * step * sw;
	}
	return b;
}

static void matmul_type(const tensor_kernels *ks, uint32_t type, int64_t K, base_pool *pool) {
	const tensor_traits *tt = tensor_traits_of(type);
	const int64_t NO = 37, NR = 70;
	uint64_t seed = 1000 + type;
	const size_t rb = tensor_row_bytes(type, K);
	float *wf = malloc(sizeof(float) * K * NO), *wd = malloc(sizeof(float) * K * NO);
	float *x = malloc(sizeof(float) * K * NR);
	float *yr = malloc(sizeof(float) * NR * NO), *y1 = malloc(sizeof(float) * NR * NO);
	float *y2 = malloc(sizeof(float) * NR * NO), *y3 = malloc(sizeof(float) * NR * NO);
	uint8_t *w = malloc(rb * NO * 2);
	for (int64_t i = 0; i < K * NO; i++) wf[i] = frand(&seed) * (1.0f + (float)(i % 7));
	// Two matrices back to back (a stack of 2): the second is the first scaled by -0.5.
	for (int64_t o = 0; o < NO; o++) tt->from_f32(wf + o * K, w + o * rb, K);
	for (int64_t i = 0; i < K * NO; i++) wd[i] = -0.5f * wf[i];
	for (int64_t o = 0; o < NO; o++) tt->from_f32(wd + o * K, w + (NO + o) * rb, K);
	for (int64_t o = 0; o < NO; o++) tt->to_f32(w + o * rb, wd + o * K, K);

	const size_t pb = tensor_pack_bytes(ks, type, NO, K, 2);
	void *packed = pb ? malloc(pb) : NULL;
	tensor_mat m;
	tensor_mat_init(&m, ks, type, NO, K, 2, w, packed, pool);
	for (int grid = 1; grid >= 0; grid--) {
		make_x(x, NR, K, grid, &seed);
		tensor_ref_matmul(type, w, rb, K, x, K, NR, yr, NO, 0, NO);
		// All rows at once, fused with the second matrix, on the pool.
		const tensor_mat *ws[2] = {&m, &m};
		const int64_t mats[2] = {0, 1};
		float *ys[2] = {y1, y3};
		tensor_matmuls(pool, 2, ws, mats, x, NR, ys);
		// Each row alone, on the caller's thread.
		const tensor_mat *w0 = &m;
		const int64_t mat0 = 0;
		for (int64_t r = 0; r < NR; r++) {
			float *yy = y2 + r * NO;
			tensor_matmuls(NULL, 1, &w0, &mat0, x + r * K, 1, &yy);
		}
		int worse = 0, differ = memcmp(y1, y2, sizeof(float) * NR * NO) != 0;
		double worst = 0;
		for (int64_t r = 0; r < NR; r++)
			for (int64_t o = 0; o < NO; o++) {
				const float *wr = wd + o * K, *xr = x + r * K;
				double A = 0;
				for (int64_t i = 0; i < K; i++) A += fabs((double)wr[i] * xr[i]);
				double tol = A * 0x1p-12 + 1e-30;
				if (!grid && !is_float(type))
					tol += act_bound(wr, xr, K, tensor_kernels_act(ks) == TENSOR_ACT_Q8 ? 0.5 : 1.0 / 256.0);
				const double e = fabs((double)y1[r * NO + o] - yr[r * NO + o]);
				worst = e / tol > worst ? e / tol : worst;
				worse += !(e <= tol);
			}
		CHECKF(worse == 0, "%s %s %s k=%lld %s activations: %d outputs outside the tolerance (worst %.3g x it)",
		       tensor_kernels_name(ks), tensor_act_name(tensor_kernels_act(ks)), tt->name, (long long)K,
		       grid ? "grid" : "random", worse, worst);
		CHECKF(!differ, "%s %s %s: a row alone differs from the row in a batch of %lld on threads", tensor_kernels_name(ks),
		       tensor_act_name(tensor_kernels_act(ks)), tt->name, (long long)NR);
		// Compact (grid types at the file's size, regrouped by tile): the packed matrix's bits,
		// in a batch on the pool and row by row.
		if (tensor_compact_ok(ks, type)) {
			tensor_mat mc;
			const size_t cb = tensor_compact_bytes(ks, type, NO, K, 2);
			CHECKF(cb >= 2 * (size_t)NO * tensor_row_bytes(type, K) && cb <= 2 * (size_t)(NO + 15) * tensor_row_bytes(type, K),
			       "%s %s: a compact copy of %zu bytes", tensor_kernels_name(ks), tt->name, cb);
			uint8_t *cp = aligned_alloc(64, (cb + 63) & ~(size_t)63);
			tensor_mat_init_compact(&mc, ks, type, NO, K, 2, w, cp, pool);
			float *c1 = malloc(sizeof(float) * NR * NO), *c3 = malloc(sizeof(float) * NR * NO);
			const tensor_mat *wc[2] = {&mc, &mc};
			float *yc[2] = {c1, c3};
			tensor_matmuls(pool, 2, wc, mats, x, NR, yc);
			int same = !memcmp(c1, y1, sizeof(float) * NR * NO) && !memcmp(c3, y3, sizeof(float) * NR * NO);
			for (int64_t r = 0; r < NR; r++) {
				float *yy = c1 + r * NO;
				tensor_matmuls(NULL, 1, wc, &mat0, x + r * K, 1, &yy);
			}
			same = same && !memcmp(c1, y2, sizeof(float) * NR * NO);
			CHECKF(same, "%s %s %s k=%lld: compact, not the packed matrix's bits", tensor_kernels_name(ks),
			       tensor_act_name(tensor_kernels_act(ks)), tt->name, (long long)K);
			free(c1), free(c3), free(cp);
		} else if (pb) {
			CHECKF(!is_grid(type), "%s %s: a grid type the set cannot read in place", tensor_kernels_name(ks), tt->name);
		}
		// MXFP4 in width q8: the reference's bits (a power-of-two scale leaves no step rounding apart)
		if (type == GGUF_T_MXFP4 && tensor_kernels_act(ks) == TENSOR_ACT_Q8) {
			const tensor_kernels *rq = tensor_kernels_with_act(tensor_kernels_find("ref"), TENSOR_ACT_Q8);
			tensor_mat mr;
			tensor_mat_init(&mr, rq, type, NO, K, 2, w, NULL, pool);
			const tensor_mat *wr = &mr;
			const int64_t first = 0;
			float *yq = y2;
			tensor_matmuls(pool, 1, &wr, &first, x, NR, &yq);
			CHECKF(!memcmp(yq, y1, sizeof(float) * NR * NO), "%s q8 MXFP4 k=%lld %s activations: not the reference's bits",
			       tensor_kernels_name(ks), (long long)K, grid ? "grid" : "random");
		}
		// A slice of rows through the second matrix of the stack: the fused pass's outputs.
		float *y4 = y2;
		const tensor_mat *w1 = &m;
		const int64_t mat1 = 1;
		tensor_matmuls(NULL, 1, &w1, &mat1, x + 3 * K, 9, &y4);
		CHECKF(memcmp(y4, y3 + 3 * NO, sizeof(float) * 9 * NO) == 0, "%s %s: matrix 1 of the stack differs when fused",
		       tensor_kernels_name(ks), tt->name);
	}
	free(packed);
	free(w), free(wf), free(wd), free(x), free(yr), free(y1), free(y2), free(y3);
}

// The largest codes against the largest activations, where a 16-bit partial sum would
// overflow first: every block's first weight -1 (so the rest, +1, take the top code) and
// every activation 1.0 (int8 127 exactly).
static void extremes(const tensor_kernels *ks, uint32_t type) {
	const tensor_traits *tt = tensor_traits_of(type);
	const int64_t K = 512, NO = 16;
	const size_t rb = tensor_row_bytes(type, K);
	float *wf = malloc(sizeof(float) * K * NO), *x = malloc(sizeof(float) * K * 2), y[2 * 16], yr[2 * 16];
	uint8_t *w = malloc(rb * NO);
	for (int64_t i = 0; i < K * NO; i++) wf[i] = i % 32 == 0 ? -1.0f : 1.0f;
	for (int64_t i = 0; i < K * 2; i++) x[i] = i < K ? 1.0f : -1.0f;
	for (int64_t o = 0; o < NO; o++) tt->from_f32(wf + o * K, w + o * rb, K);
	const size_t pb = tensor_pack_bytes(ks, type, NO, K, 1);
	void *packed = pb ? malloc(pb) : NULL;
	tensor_mat m;
	tensor_mat_init(&m, ks, type, NO, K, 1, w, packed, NULL);
	const tensor_mat *ws = &m;
	const int64_t mat = 0;
	float *yy = y;
	tensor_matmuls(NULL, 1, &ws, &mat, x, 2, &yy);
	tensor_ref_matmul(type, w, rb, K, x, K, 2, yr, NO, 0, NO);
	int bad = 0;
	for (int i = 0; i < 2 * 16; i++) bad += !(fabsf(y[i] - yr[i]) <= 0x1p-12f * (float)K * 2.0f);
	CHECKF(bad == 0, "%s %s: top codes x top activations off the reference (%g vs %g)", tensor_kernels_name(ks), tt->name,
	       y[0], yr[0]);
	free(packed), free(w), free(wf), free(x);
}

// A paged store of n_pos positions with two KV heads per row (the view reads the second),
// pages in shuffled order; enc 0 f16, 1 f16s, 2 q8_0, 3 q4_0. vmax: the largest |V| stored.
typedef struct {
	uint8_t *k, *v, *ksb, *vsb;
	int32_t pages[64];
	tensor_kv_view kvv;
	float vmax;
} att_store;

static void store_new(att_store *S, int32_t D, int32_t n_pos, int enc, uint64_t *seed) {
	const int32_t pt = 16, npg = (n_pos + pt - 1) / pt + 1, RD = 2 * D;
	const size_t bsz = enc == 2 ? sizeof(block_q8_0) : sizeof(block_q4_0), brow = (size_t)RD / 32 * bsz;
	const size_t rowb = enc < 2 ? (size_t)RD * 2 : brow;
	uint8_t *k = calloc((size_t)npg * pt, rowb), *v = calloc((size_t)npg * pt, rowb);
	uint8_t *ksb = calloc((size_t)npg * pt * 2, 1), *vsb = calloc((size_t)npg * pt * 2, 1);
	for (int32_t p = 0; p < npg; p++) S->pages[p] = (p * 5 + 3) % npg;
	float *kv = malloc(sizeof(float) * RD), *st = malloc(sizeof(float) * RD), vmax = 0;
	for (int32_t j = 0; j < n_pos; j++) {
		const size_t slot = (size_t)S->pages[j / pt] * pt + (size_t)(j % pt);
		for (int kind = 0; kind < 2; kind++) {
			for (int32_t e = 0; e < RD; e++) kv[e] = frand(seed) * (kind ? 1.5f : 3.0f);
			uint8_t *row = (kind ? v : k) + slot * rowb;
			if (enc == 1) {
				for (int hd = 0; hd < 2; hd++) {
					const uint8_t b = tensor_f16s_encode(kv + hd * D, D, (uint16_t *)row + hd * D);
					(kind ? vsb : ksb)[slot * 2 + hd] = b;
					for (int32_t e = 0; e < D; e++) st[hd * D + e] = tensor_f16_to_f32(((uint16_t *)row)[hd * D + e]) * tensor_f16s_scale(b);
				}
			} else if (enc == 0) {
				for (int32_t e = 0; e < RD; e++) ((uint16_t *)row)[e] = tensor_f32_to_f16(kv[e]);
				for (int32_t e = 0; e < RD; e++) st[e] = tensor_f16_to_f32(((uint16_t *)row)[e]);
			} else {
				const tensor_traits *tt = tensor_traits_of(enc == 2 ? GGUF_T_Q8_0 : GGUF_T_Q4_0);
				tt->from_f32(kv, row, RD);
				tt->to_f32(row, st, RD);
			}
			if (kind)
				for (int32_t e = D; e < RD; e++) vmax = fabsf(st[e]) > vmax ? fabsf(st[e]) : vmax;
		}
	}
	if (enc < 2)
		S->kvv = (tensor_kv_view){.k = (uint16_t *)k + D, .v = (uint16_t *)v + D, .ks = enc ? ksb + 1 : NULL,
					  .vs = enc ? vsb + 1 : NULL, .pages = S->pages, .page_stride = (size_t)pt * RD,
					  .row_stride = (size_t)RD, .s_page_stride = (size_t)pt * 2, .s_row_stride = 2, .page_tokens = pt};
	else
		S->kvv = (tensor_kv_view){.enc = enc == 2 ? TENSOR_KV_Q8_0 : TENSOR_KV_Q4_0, .k = k, .v = v, .pages = S->pages,
					  .page_stride = (size_t)pt * brow, .row_stride = brow, .page_tokens = pt, .off = D};
	S->k = k, S->v = v, S->ksb = ksb, S->vsb = vsb, S->vmax = vmax;
	free(kv), free(st);
}

static void store_free(att_store *S) { free(S->k), free(S->v), free(S->ksb), free(S->vsb); }

// window, cap: the view's sliding window and soft cap (0: none).
// sink: each head a random sink logit (gpt-oss), compared the same way.
static void attention(const tensor_kernels *ks, int32_t D, int32_t nq, int32_t n_pos, int enc, int32_t window, float cap,
		      bool sink) {
	static const char *const names[4] = {"f16", "f16s", "q8_0", "q4_0"};
	if (enc >= 2 && D % 32) return;
	uint64_t seed = (uint64_t)(D * 1000 + nq * 10 + n_pos + enc);
	att_store S;
	store_new(&S, D, n_pos, enc, &seed);
	S.kvv.window = window, S.kvv.softcap = cap;
	float sinks[64];
	for (int32_t h = 0; h < nq; h++) sinks[h] = frand(&seed) * 4.0f;
	if (sink) S.kvv.sinks = sinks;
	const tensor_kv_view kvv = S.kvv;
	const float vmax = S.vmax;
	const size_t scn = tensor_attn_scratch(nq, D) > (size_t)nq * n_pos ? tensor_attn_scratch(nq, D) : (size_t)nq * n_pos;
	float *q = malloc(sizeof(float) * nq * D), *sc = malloc(sizeof(float) * scn);
	float *o = malloc(sizeof(float) * nq * D), *o1 = malloc(sizeof(float) * D), *ref = malloc(sizeof(float) * D);
	float *u = malloc(sizeof(float) * nq * D);
	for (int32_t i = 0; i < nq * D; i++) q[i] = frand(&seed) * 2.0f;
	const float scale = 1.0f / sqrtf((float)D);
	tensor_k_attn(ks, q, nq, D, scale, &kvv, n_pos, sc, o);
	if (enc < 2) tensor_k_attn_unfused(ks, q, nq, D, scale, &kvv, n_pos, sc, u);
	int bad = 0, bad_u = 0, differ = 0;
	for (int32_t h = 0; h < nq; h++) {
		const tensor_kv_view kh = tensor_kv_head(&kvv, h);
		tensor_attn_f16(q + h * D, D, scale, &kh, n_pos, sc, ref);
		tensor_k_attn(ks, q + h * D, 1, D, scale, &kh, n_pos, sc, o1);
		for (int32_t e = 0; e < D; e++) {
			bad += !(fabsf(o[h * D + e] - ref[e]) <= 1e-5f * vmax);
			if (enc < 2) bad_u += !(fabsf(u[h * D + e] - ref[e]) <= 1e-5f * vmax);
		}
		differ += memcmp(o1, o + h * D, sizeof(float) * D) != 0;
	}
	CHECKF(bad == 0, "%s fused attention D=%d nq=%d n_pos=%d %s window %d cap %g: %d values off the reference",
	       tensor_kernels_name(ks), D, nq, n_pos, names[enc], window, cap, bad);
	CHECKF(bad_u == 0, "%s unfused attention D=%d nq=%d n_pos=%d %s window %d cap %g: %d values off the reference",
	       tensor_kernels_name(ks), D, nq, n_pos, names[enc], window, cap, bad_u);
	CHECKF(differ == 0, "%s attention D=%d %s: a head alone differs from it among %d", tensor_kernels_name(ks), D,
	       names[enc], nq);
	free(q), free(sc), free(o), free(o1), free(ref), free(u);
	store_free(&S);
}

// The x86 fused attention's arithmetic for one query, written out in scalar C (attn.h says
// it in words): the specification its vector lanes must match bit for bit.
static float twin_exp(float x) {
	x = x < 88.0f ? x : 88.0f;
	x = x > -87.3f ? x : -87.3f;
	const float n = nearbyintf(x * 1.44269504088896341f);
	float r = fmaf(n, -0.693359375f, x);
	r = fmaf(n, 2.12194440e-4f, r);
	float p = 1.9875691500e-4f;
	p = fmaf(p, r, 1.3981999507e-3f);
	p = fmaf(p, r, 8.3334519073e-3f);
	p = fmaf(p, r, 4.1665795894e-2f);
	p = fmaf(p, r, 1.6666665459e-1f);
	p = fmaf(p, r, 5.0000001201e-1f);
	p = fmaf(p, r * r, r + 1.0f);
	const int32_t bits = ((int32_t)n + 127) * (1 << 23);
	float two;
	memcpy(&two, &bits, 4);
	return p * two;
}

// nq heads, each on its own; the tile's K and V rows are read once for all of them. Positions
// before the view's window are never read: every tile from position 0 is walked, and those
// positions score -inf and weigh +0.
static void twin_attn(const float *q, int32_t nq, int32_t D, float scale, const tensor_kv_view *kvv, int32_t n_pos,
		      float *out) {
	enum { TT = TENSOR_ATT_TILE };
	float *k = calloc((size_t)TT * D, sizeof(float)), *v = calloc((size_t)TT * D, sizeof(float)), ks[TT], vs[TT];
	float *acc = calloc((size_t)nq * D, sizeof(float)), *mx = malloc(sizeof(float) * nq), *sum = calloc(nq, sizeof(float));
	const int32_t lo = kvv->window > 0 && n_pos > kvv->window ? n_pos - kvv->window : 0;
	// a sink: a score seen before position 0 whose value row is 0
	for (int32_t h = 0; h < nq; h++) mx[h] = kvv->sinks ? kvv->sinks[h] : -INFINITY, sum[h] = kvv->sinks ? 1.0f : 0.0f;
	for (int32_t t0 = 0; t0 < n_pos; t0 += TT) {
		const int nt = n_pos - t0 < TT ? n_pos - t0 : TT;
		for (int j = 0; j < nt; j++) {
			ks[j] = vs[j] = 0.0f;
			if (t0 + j < lo) continue;
			ks[j] = tensor_kv_row(kvv, false, t0 + j, D, k + j * D) * scale;
			vs[j] = tensor_kv_row(kvv, true, t0 + j, D, v + j * D);
		}
		for (int32_t h = 0; h < nq; h++) {
			const float *qh = q + h * D;
			float s[TT], p[TT] = {0}, t[16], tmx = -INFINITY, alpha = 1.0f, *a = acc + h * D;
			for (int j = 0; j < nt; j++) {
				float d = qh[0] * k[j * D];
				for (int32_t e = 1; e < D; e++) d = fmaf(qh[e], k[j * D + e], d);
				s[j] = d * ks[j];
				if (kvv->softcap != 0.0f) s[j] = tensor_softcap(s[j], kvv->softcap);
				if (t0 + j < lo) s[j] = -INFINITY;
				tmx = s[j] > tmx ? s[j] : tmx;
			}
			if (tmx > mx[h]) {
				alpha = (float)exp((double)mx[h] - tmx);
				mx[h] = tmx;
			}
			for (int j = 0; j < nt; j++) p[j] = t0 + j < lo ? 0.0f : twin_exp(s[j] - mx[h]);
			for (int l = 0; l < 16; l++) t[l] = ((p[l] + p[l + 16]) + p[l + 32]) + p[l + 48];
			for (int w = 8; w >= 1; w /= 2)
				for (int l = 0; l < w; l++) t[l] = t[l] + t[l + w];
			sum[h] = sum[h] * alpha + t[0];
			for (int32_t e = 0; e < D; e++) a[e] = a[e] * alpha;
			for (int j = 0; j < nt; j++) {
				const float w = p[j] * vs[j];
				for (int32_t e = 0; e < D; e++) a[e] = fmaf(w, v[j * D + e], a[e]);
			}
		}
	}
	for (int32_t h = 0; h < nq; h++)
		for (int32_t e = 0; e < D; e++) out[h * D + e] = acc[h * D + e] * (1.0f / sum[h]);
	free(k), free(v), free(acc), free(mx), free(sum);
}

// Rows of one sequence in one call (blocks cut wherever the kernel cuts them, rows in a
// scrambled order through ridx, strides wider than the rows): each row's values are the twin's
// bit for bit, so equal to the row alone, to any other block, and to the other x86 set.
static void attention_rows(const tensor_kernels *ks, int32_t D, int32_t nq, int enc, int32_t window, float cap, bool sink) {
	static const char *const names[4] = {"f16", "f16s", "q8_0", "q4_0"};
	if (enc >= 2 && D % 32) return;
	enum { NR = 48, NP = 300 };
	uint64_t seed = (uint64_t)(D * 77 + nq * 5 + enc);
	att_store S;
	store_new(&S, D, NP, enc, &seed);
	S.kvv.window = window, S.kvv.softcap = cap;
	float *sinks = malloc(sizeof(float) * nq);
	for (int32_t h = 0; h < nq; h++) sinks[h] = frand(&seed) * 4.0f;
	if (sink) S.kvv.sinks = sinks;
	int32_t n_pos[NR], ridx[NR];
	// a prompt piece across a tile boundary, then rows anywhere (a tile's first and last position too)
	for (int i = 0; i < 30; i++) n_pos[i] = 50 + i;
	const int32_t odd[NR - 30] = {1, 2, 63, 64, 65, 128, 129, NP, 17, 200, 255, 256, 257, 3, 99, 191, 192, 193};
	for (int i = 30; i < NR; i++) n_pos[i] = odd[i - 30];
	for (int i = 0; i < NR; i++) ridx[i] = (i * 19 + 7) % NR;
	const size_t qs = (size_t)nq * D + 3, os = (size_t)nq * D + 5;
	float *q = malloc(sizeof(float) * NR * qs), *o = calloc(NR * os, sizeof(float)), *o1 = malloc(sizeof(float) * nq * D);
	float *sc = malloc(sizeof(float) * tensor_attn_scratch(nq, D)), *tw = malloc(sizeof(float) * nq * D);
	for (size_t i = 0; i < NR * qs; i++) q[i] = frand(&seed) * 2.0f;
	const float scale = 1.0f / sqrtf((float)D);
	tensor_k_attn_rows(ks, q, qs, ridx, NR, nq, D, scale, &S.kvv, n_pos, sc, o, os);
	int alone = 0, twin = 0, off = 0;
	for (int i = 0; i < NR; i++) {
		const float *qr = q + (size_t)ridx[i] * qs, *or = o + (size_t)ridx[i] * os;
		tensor_k_attn(ks, qr, nq, D, scale, &S.kvv, n_pos[i], sc, o1);
		alone += memcmp(o1, or, sizeof(float) * nq * D) != 0;
		twin_attn(qr, nq, D, scale, &S.kvv, n_pos[i], tw);
		twin += memcmp(tw, or, sizeof(float) * nq * D) != 0;
		for (int32_t h = 0; h < nq; h++) {
			if (i % 4 || h > 3) continue; // the reference on a sample
			const tensor_kv_view kh = tensor_kv_head(&S.kvv, h);
			tensor_attn_f16(qr + h * D, D, scale, &kh, n_pos[i], sc, o1);
			for (int32_t e = 0; e < D; e++) off += !(fabsf(or[h * D + e] - o1[e]) <= 1e-5f * S.vmax);
		}
	}
	CHECKF(alone == 0, "%s attention rows D=%d nq=%d %s window %d cap %g: %d rows differ from themselves alone",
	       tensor_kernels_name(ks), D, nq, names[enc], window, cap, alone);
	CHECKF(twin == 0, "%s attention rows D=%d nq=%d %s window %d cap %g: %d rows differ from the scalar twin",
	       tensor_kernels_name(ks), D, nq, names[enc], window, cap, twin);
	CHECKF(off == 0, "%s attention rows D=%d nq=%d %s window %d cap %g: %d values off the reference", tensor_kernels_name(ks),
	       D, nq, names[enc], window, cap, off);
	free(q), free(o), free(o1), free(sc), free(tw), free(sinks);
	store_free(&S);
}

// A gate of the set against its reference: within the rounding of the set's exp (where the
// gate is nearly shut that rounding shows relative to the tiny result, so the bound is relative
// to the ungated product too), and the same bits in pieces of 7 as in one call.
static void glu_check(const tensor_kernels *ks, const char *name, void (*ref)(const float *, const float *, float *, int64_t),
		      void (*set)(const tensor_kernels *, const float *, const float *, float *, int64_t), const float *g, const float *u,
		      int64_t n) {
	float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
	int bad = 0;
	ref(g, u, a, n);
	set(ks, g, u, b, n);
	for (int64_t i = 0; i < n; i++) bad += !(fabsf(a[i] - b[i]) <= 4e-6f * fabsf(a[i]) + 1e-7f * fabsf(g[i] * u[i]) + 1e-30f);
	CHECKF(bad == 0, "%s %s: %d values off", tensor_kernels_name(ks), name, bad);
	for (int64_t i0 = 0; i0 < n; i0 += 7) set(ks, g + i0, u + i0, a + i0, n - i0 < 7 ? n - i0 : 7);
	CHECKF(memcmp(a, b, sizeof(float) * n) == 0, "%s %s: pieces of 7 differ from one call", tensor_kernels_name(ks), name);
	free(a), free(b);
}

static void pointwise(const tensor_kernels *ks) {
	uint64_t seed = 99;
	const int64_t n = 2048 + 40;
	float *x = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n), *a = malloc(sizeof(float) * n),
	      *b = malloc(sizeof(float) * n), *y2 = malloc(sizeof(float) * n);
	for (int64_t i = 0; i < n; i++) x[i] = frand(&seed) * 20.0f, w[i] = frand(&seed) * 2.0f;
	const int64_t sizes[] = {2048, 64, 8, 2088};
	int bad = 0;
	for (int s = 0; s < 4; s++) {
		tensor_rmsnorm(x, w, sizes[s], 1e-5f, a);
		tensor_k_rmsnorm(ks, x, w, sizes[s], 1e-5f, b);
		for (int64_t i = 0; i < sizes[s]; i++) bad += !(fabsf(a[i] - b[i]) <= 1e-6f * fabsf(a[i]) + 1e-30f);
		tensor_k_rmsnorm(ks, x, NULL, sizes[s], 1e-5f, b);
		tensor_rmsnorm(x, NULL, sizes[s], 1e-5f, a);
		for (int64_t i = 0; i < sizes[s]; i++) bad += !(fabsf(a[i] - b[i]) <= 1e-6f * fabsf(a[i]) + 1e-30f);
	}
	CHECKF(bad == 0, "%s rmsnorm: %d values off", tensor_kernels_name(ks), bad);
	bad = 0;
	tensor_swiglu(x, w, a, n);
	tensor_k_swiglu(ks, x, w, b, n);
	for (int64_t i = 0; i < n; i++) bad += !(fabsf(a[i] - b[i]) <= 2e-6f * fabsf(a[i]) + 1e-30f);
	CHECKF(bad == 0, "%s swiglu: %d values off", tensor_kernels_name(ks), bad);
	// An element's result does not depend on where the call's range starts or ends.
	for (int64_t i0 = 0; i0 < n; i0 += 7) tensor_k_swiglu(ks, x + i0, w + i0, a + i0, n - i0 < 7 ? n - i0 : 7);
	CHECKF(memcmp(a, b, sizeof(float) * n) == 0, "%s swiglu: pieces of 7 differ from one call", tensor_kernels_name(ks));
	// GELU (tanh form) gate and gpt-oss's clamped SwiGLU (both clamps reached: x spans +-10, u
	// +-5): within the rounding of the set's exp of the reference; an element's result is the
	// same wherever the call's range starts or ends
	for (int64_t i = 0; i < n; i++) y2[i] = w[i] * 5.0f;
	glu_check(ks, "geglu", tensor_geglu, tensor_k_geglu, x, w, n);
	glu_check(ks, "swiglu_oai", tensor_swiglu_oai, tensor_k_swiglu_oai, x, y2, n);
	// the output logits' soft cap: within the set's exp of the reference (relative to the cap
	// near 0, where tanh's formula through exp cancels), the same bits in pieces of 7
	for (int64_t i = 0; i < n; i++) a[i] = b[i] = x[i] * 8.0f;
	for (int64_t i = 0; i < n; i++) a[i] = tensor_softcap(a[i], 30.0f);
	tensor_k_softcap_rows(ks, b, n, 30.0f);
	bad = 0;
	for (int64_t i = 0; i < n; i++) bad += !(fabsf(a[i] - b[i]) <= 4e-6f * fabsf(a[i]) + 4e-6f * 30.0f);
	CHECKF(bad == 0, "%s softcap_rows: %d values off", tensor_kernels_name(ks), bad);
	for (int64_t i = 0; i < n; i++) y2[i] = x[i] * 8.0f;
	for (int64_t i0 = 0; i0 < n; i0 += 7) tensor_k_softcap_rows(ks, y2 + i0, n - i0 < 7 ? n - i0 : 7, 30.0f);
	CHECKF(memcmp(y2, b, sizeof(float) * n) == 0, "%s softcap_rows: pieces of 7 differ from one call", tensor_kernels_name(ks));
	// known values of gelu
	const float gx[4] = {1.0f, -1.0f, 3.0f, 0.0f}, gu[4] = {1.0f, 1.0f, 2.0f, 5.0f};
	float gy[4];
	tensor_k_geglu(ks, gx, gu, gy, 4);
	CHECKF(fabsf(gy[0] - 0.841192f) < 1e-6f && fabsf(gy[1] + 0.158808f) < 1e-6f && fabsf(gy[2] - 2.0f * 2.996363f) < 1e-5f &&
		       gy[3] == 0.0f, "%s geglu: %g %g %g %g", tensor_kernels_name(ks), gy[0], gy[1], gy[2], gy[3]);
	// The scale table: 2^(j/16) within an octave, octaves exact powers of two apart.
	bad = 0;
	for (int sb = 0; sb < 256; sb++) {
		const float base = tensor_f16s_scale((uint8_t)(128 + (sb & 15)));
		bad += tensor_f16s_scale((uint8_t)sb) != ldexpf(base, (sb >> 4) - 8);
		bad += fabs(base - pow(2.0, (sb & 15) / 16.0)) > 1e-7;
	}
	CHECKF(bad == 0, "f16s scale table: %d entries off", bad);
	// f16s: a scale as good as the reference's (within 0.1%), and the encoding deterministic.
	bad = 0;
	uint16_t h1[128], h2[128], h3[128];
	for (int t = 0; t < 200; t++) {
		// 8 and 24: heads the AVX-512 set hands to the AVX2 set's encoder
		const int32_t D = t % 4 == 0 ? 128 : t % 4 == 1 ? 64 : t % 4 == 2 ? 8 : 24;
		float mag = ldexpf(1.0f, t % 40 - 20);
		for (int32_t i = 0; i < D; i++) x[i] = frand(&seed) * mag * (i % 5 == 0 ? 8.0f : 1.0f);
		const uint8_t br = tensor_f16s_encode(x, D, h1), bf = tensor_k_f16s_encode(ks, x, D, h2);
		const uint8_t bf2 = tensor_k_f16s_encode(ks, x, D, h3);
		double er = 0, ef = 0;
		for (int32_t i = 0; i < D; i++) {
			const double dr = tensor_f16_to_f32(h1[i]) * (double)tensor_f16s_scale(br) - x[i];
			const double df = tensor_f16_to_f32(h2[i]) * (double)tensor_f16s_scale(bf) - x[i];
			er += dr * dr, ef += df * df;
		}
		bad += !(ef <= er * 1.001 + 1e-45) || bf != bf2 || memcmp(h2, h3, sizeof(uint16_t) * D);
	}
	CHECKF(bad == 0, "%s f16s encode: %d groups worse than the reference or not repeatable", tensor_kernels_name(ks), bad);
	free(x), free(w), free(a), free(b), free(y2);
}

// The KV block quantizers: the reference's bytes exactly, for random rows and the edges —
// zero blocks, ties of magnitude with both signs (the first decides Q4_0's sign), values
// that land on halves of a step (roundf goes away from zero) and Q4_0's top code.
static void kv_quant(const tensor_kernels *ks) {
	const uint32_t types[2] = {GGUF_T_Q8_0, GGUF_T_Q4_0};
	uint64_t seed = 4242;
	float x[256];
	uint8_t a[512], b[512];
	int bad = 0;
	for (int t = 0; t < 2; t++)
		for (int rep = 0; rep < 300; rep++) {
			for (int i = 0; i < 256; i++) x[i] = frand(&seed) * ldexpf(1.0f, rep % 20 - 10);
			const int kind = rep % 6;
			if (kind == 1) memset(x + 32, 0, 32 * sizeof(float));
			if (kind == 2) // the largest magnitude twice, signs both ways round
				x[5] = -4.0f, x[9] = 4.0f, x[32 + 2] = 4.0f, x[32 + 30] = -4.0f;
			if (kind == 3) // a step of 1 (amax 127 for Q8_0, -8 for Q4_0) and values on halves
				for (int b0 = 0; b0 < 256; b0 += 32)
					for (int i = 0; i < 32; i++)
						x[b0 + i] = i == 0 ? (t ? -8.0f : 127.0f)
							    : (float)((int)(frand(&seed) * (t ? 7 : 126))) + (frand(&seed) < 0 ? -0.5f : 0.5f);
			if (kind == 4)
				for (int i = 0; i < 32; i++) x[i] = (float)(i % 17 - 8), x[32 + i] = -(float)(i % 16);
			const tensor_traits *tt = tensor_traits_of(types[t]);
			tt->from_f32(x, a, 256);
			tensor_k_quantize_row(ks, types[t], x, b, 256);
			bad += memcmp(a, b, tensor_row_bytes(types[t], 256)) != 0;
		}
	CHECKF(bad == 0, "%s KV quantizers: %d rows differ from the reference's bytes", tensor_kernels_name(ks), bad);
}

static void dispatch(void) {
	const char *names[8];
	const int n = tensor_kernels_available(names, 8);
	CHECK(n >= 1 && !strcmp(names[0], "ref"));
	CHECK(tensor_kernels_find("ref") != NULL);
	CHECK(tensor_kernels_find("nope") == NULL);
	CHECK(tensor_kernels_select("nope") == LANES_EINVAL);
	const tensor_kernels *def = tensor_kernels_default();
	CHECK(def != NULL);
	// The default is the best the CPU runs unless LANES_KERNELS names another.
	const char *env = getenv("LANES_KERNELS");
	if (!env || !*env) CHECKF(!strcmp(tensor_kernels_name(def), names[n - 1]), "default %s, best %s", tensor_kernels_name(def), names[n - 1]);
	else if (tensor_kernels_find(env)) CHECK(!strcmp(tensor_kernels_name(def), env));
	for (int i = 0; i < n; i++) {
		CHECK(tensor_kernels_select(names[i]) == 0);
		CHECK(tensor_kernels_default() == tensor_kernels_find(names[i]));
	}
	CHECK(tensor_kernels_select(tensor_kernels_name(def)) == 0);
	printf("kernel sets on this CPU:");
	for (int i = 0; i < n; i++) printf(" %s", names[i]);
	printf("\n");
}

int main(void) {
	if (cli_env_apply()) return 2; // LANES_KERNELS forces the default, as in the CLI
	dispatch();
	const char *names[8];
	const int n = tensor_kernels_available(names, 8);
	base_pool *pool;
	CHECK(base_pool_new(&pool, 3) == 0);
	for (int s = 0; s < n; s++) {
		const tensor_kernels *ks = tensor_kernels_find(names[s]);
		for (int a = 0; a < TENSOR_ACT_COUNT; a++) {
			const tensor_kernels *ka = tensor_kernels_with_act(ks, (enum tensor_act)a);
			CHECK(tensor_kernels_act(ka) == (enum tensor_act)a && !strcmp(tensor_kernels_name(ka), names[s]));
			for (int t = 0; t < N_TYPES; t++) {
				t_case("%s %s type %u", names[s], tensor_act_name((enum tensor_act)a), all_types[t]);
				matmul_type(ka, all_types[t], 512, pool);
				if (is_float(all_types[t])) matmul_type(ka, all_types[t], 100, pool);
				// compact, activations in more than one of the packed driver's row blocks
				if (is_grid(all_types[t])) matmul_type(ka, all_types[t], 4096, pool);
				extremes(ka, all_types[t]);
			}
		}
		const int32_t dims[] = {64, 128, 48, 8, 24};
		for (int d = 0; d < 5; d++)
			for (int enc = 0; enc < 4; enc++) {
				t_case("%s attention D=%d kv %d", names[s], dims[d], enc);
				attention(ks, dims[d], 1, 1, enc, 0, 0, false);
				attention(ks, dims[d], 4, 37, enc, 0, 0, false);
				attention(ks, dims[d], 6, 100, enc, 0, 0, false);
				// Gemma 2's soft cap, and windows inside a tile and across tiles
				attention(ks, dims[d], 4, 37, enc, 16, 50.0f, false);
				attention(ks, dims[d], 6, 100, enc, 70, 0, false);
				// gpt-oss's sinks, with and without a window
				attention(ks, dims[d], 4, 37, enc, 0, 0, true);
				attention(ks, dims[d], 6, 100, enc, 70, 0, true);
			}
		for (int enc = 0; enc < 4; enc++) {
			t_case("%s attention 8x300 kv %d", names[s], enc);
			attention(ks, 64, 8, 300, enc, 0, 0, false);
			attention(ks, 64, 8, 300, enc, 130, 2.0f, false);
		}
		// heads per KV head: GQA's 4 and 7, MHA's 1, and more than a block's lanes (the
		// reference's own arithmetic has no twin)
		const int32_t rdims[] = {64, 128, 48, 16}, rnq[] = {4, 7, 1, 70};
		for (int d = 0; d < 4 && strcmp(names[s], "ref"); d++)
			for (int g = 0; g < 4; g++)
				for (int enc = 0; enc < 4 && (g < 3 || d == 0); enc++) {
					t_case("%s attention rows D=%d nq=%d kv %d", names[s], rdims[d], rnq[g], enc);
					attention_rows(ks, rdims[d], rnq[g], enc, 0, 0, false);
					if (g < 2) attention_rows(ks, rdims[d], rnq[g], enc, 70, 1.5f, false);
					if (g < 2) attention_rows(ks, rdims[d], rnq[g], enc, 70, 0, true); // gpt-oss's sinks
				}
		t_case("%s pointwise", names[s]);
		pointwise(ks);
		kv_quant(ks);
	}
	base_pool_free(pool);
	T_DONE("kernels_x86");
}
