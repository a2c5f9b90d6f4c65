// tests: the reference kernels of the forward pass (tensor/ref/kernels.c), the kv cache's
// page accounting and the samplers — each against a plain double-precision formula or an
// invariant that a wrong implementation breaks.
#include "t.h"

#include "kv/kv.h"
#include "sample/sample.h"
#include "tensor/tensor.h"

#include <math.h>
#include <unistd.h>

static float frand(uint64_t *s) {
	*s = splitmix64(*s);
	return (float)((double)(*s >> 11) * 0x1p-53 * 2.0 - 1.0);
}

// Every block type: the matmul equals vec_dot_f32 bit for bit, for any rows, slice and threads.
static void matmul_all_types(void) {
	const uint32_t types[] = {GGUF_T_F32, GGUF_T_F16, GGUF_T_BF16, GGUF_T_Q4_0, GGUF_T_Q4_1, GGUF_T_Q5_0,
				  GGUF_T_Q5_1, GGUF_T_Q8_0, GGUF_T_Q2_K, GGUF_T_Q3_K, GGUF_T_Q4_K, GGUF_T_Q5_K,
				  GGUF_T_Q6_K};
	const int64_t K = 768, NO = 21, NR = 70;
	uint64_t seed = 1;
	float *wf = malloc(sizeof(float) * K * NO), *x = malloc(sizeof(float) * K * NR);
	float *y = malloc(sizeof(float) * NR * NO), *y2 = malloc(sizeof(float) * NR * NO);
	for (int64_t i = 0; i < K * NO; i++) wf[i] = frand(&seed);
	for (int64_t i = 0; i < K * NR; i++) x[i] = frand(&seed) * 3.0f;
	base_pool *pool;
	CHECK(base_pool_new(&pool, 3) == 0);
	for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
		const tensor_traits *tt = tensor_traits_of(types[t]);
		CHECKF(tt != NULL, "type %u has no traits", types[t]);
		if (!tt) continue;
		const size_t rb = tensor_row_bytes(types[t], K);
		uint8_t *w = malloc(rb * NO);
		for (int64_t o = 0; o < NO; o++) tt->from_f32(wf + o * K, w + o * rb, K);
		int bad = 0;
		const int64_t rows[] = {1, 5, NR};
		for (int ri = 0; ri < 3; ri++) {
			const int64_t n = rows[ri];
			tensor_matmul(ri == 2 ? pool : NULL, types[t], w, rb, NO, K, x, n, y);
			for (int64_t r = 0; r < n; r++)
				for (int64_t o = 0; o < NO; o++) {
					float d = tt->vec_dot_f32(w + o * rb, x + r * K, K);
					bad += memcmp(&d, &y[r * NO + o], 4) != 0;
				}
		}
		// A slice of outputs and rows written through the slice kernel.
		memset(y2, 0, sizeof(float) * NR * NO);
		tensor_ref_matmul(types[t], w, rb, K, x + 3 * K, K, 9, y2, NO, 5, 14);
		for (int64_t r = 0; r < 9; r++)
			for (int64_t o = 5; o < 14; o++) bad += memcmp(&y2[r * NO + o], &y[(r + 3) * NO + o], 4) != 0;
		CHECKF(bad == 0, "%s: %d outputs differ from vec_dot_f32", tt->name, bad);
		// And the result is close to the float64 dot of the dequantized row.
		float *deq = malloc(sizeof(float) * K);
		double worst = 0;
		for (int64_t o = 0; o < NO; o++) {
			tt->to_f32(w + o * rb, deq, K);
			double d = 0;
			for (int64_t k = 0; k < K; k++) d += (double)deq[k] * x[k];
			worst = fmax(worst, fabs(d - y[o]));
		}
		CHECKF(worst < 1e-3, "%s: matmul off the float64 dot by %g", tt->name, worst);
		free(deq);
		free(w);
	}
	base_pool_free(pool);
	free(wf), free(x), free(y), free(y2);
}

static void norms_and_activations(void) {
	uint64_t s = 7;
	float x[300], w[300], y[300];
	for (int i = 0; i < 300; i++) x[i] = frand(&s) * 4, w[i] = 1 + frand(&s);
	tensor_rmsnorm(x, w, 300, 1e-5f, y);
	double ss = 0;
	for (int i = 0; i < 300; i++) ss += (double)x[i] * x[i];
	double worst = 0;
	for (int i = 0; i < 300; i++) worst = fmax(worst, fabs(y[i] - x[i] / sqrt(ss / 300 + 1e-5) * w[i]));
	CHECK(worst < 1e-6);
	float p[5] = {1, 2, 3, 4, 1000};
	tensor_softmax(p, 5);
	CHECK(p[4] > 0.999f && p[0] >= 0 && fabsf(p[0] + p[1] + p[2] + p[3] + p[4] - 1) < 1e-6f);
	float g[3] = {-20, 0, 3}, u[3] = {2, 5, 7}, o[3];
	tensor_swiglu(g, u, o, 3);
	CHECK(fabsf(o[0] - (float)(-20.0 / (1 + exp(20.0)) * 2)) < 1e-9f && o[1] == 0.0f);
	CHECK(fabsf(o[2] - (float)(3.0 / (1 + exp(-3.0)) * 7)) < 1e-5f);
}

static void rope(void) {
	tensor_rope rp = {.n_rot = 8, .freq_base = 10000, .freq_scale = 1, .attn_factor = 1};
	double cs[8], cs2[8];
	float x[16], x0[16];
	uint64_t s = 3;
	for (int i = 0; i < 16; i++) x0[i] = x[i] = frand(&s);
	tensor_rope_table(&rp, 0, cs);
	tensor_rope_apply(&rp, cs, x, 2, 8);
	CHECK(memcmp(x, x0, sizeof x) == 0); // position 0 turns nothing
	tensor_rope_table(&rp, 5, cs);
	for (int mode = 0; mode < 2; mode++) {
		rp.neox = mode;
		memcpy(x, x0, sizeof x);
		tensor_rope_apply(&rp, cs, x, 2, 8);
		// Each rotated pair keeps its length; pair 0 turns by exactly 5 radians.
		const int a = 0, b = mode ? 4 : 1;
		CHECK(fabs(hypot(x[a], x[b]) - hypot(x0[a], x0[b])) < 1e-6);
		CHECK(fabs(atan2(x[b], x[a]) - remainder(atan2(x0[b], x0[a]) + 5.0, 2 * M_PI)) < 1e-5 ||
		      fabs(fabs(atan2(x[b], x[a]) - remainder(atan2(x0[b], x0[a]) + 5.0, 2 * M_PI)) - 2 * M_PI) < 1e-5);
		// Pair i turns by 5 * base^(-2i/n_rot).
		const int i = 3, c = mode ? 3 : 6, d = mode ? 7 : 7;
		double want = 5.0 * pow(10000.0, -6.0 / 8);
		double got = atan2(x[d], x[c]) - atan2(x0[d], x0[c]);
		CHECK(fabs(remainder(got - want, 2 * M_PI)) < 1e-5);
		(void)i;
	}
	// Linear scaling by 1/4 at position 20 equals position 5; freq factors 4 do the same.
	rp.freq_scale = 0.25;
	tensor_rope_table(&rp, 20, cs2);
	bool eq = true;
	for (int i = 0; i < 8; i++) eq &= fabs(cs2[i] - cs[i]) < 1e-12;
	CHECK(eq);
	float ff[4] = {4, 4, 4, 4};
	rp.freq_scale = 1;
	rp.freq_factors = ff;
	tensor_rope_table(&rp, 20, cs2);
	eq = true;
	for (int i = 0; i < 8; i++) eq &= fabs(cs2[i] - cs[i]) < 1e-12;
	CHECK(eq);
	// YaRN: magnitude scaled by 1 + 0.1 ln(factor); the fastest pair is extrapolated (unscaled).
	tensor_rope yr = {.n_rot = 64, .freq_base = 10000, .freq_scale = 0.25, .ext_factor = 1, .attn_factor = 1,
			  .beta_fast = 32, .beta_slow = 1, .n_ctx_orig = 4096};
	double ys[64];
	tensor_rope_table(&yr, 3, ys);
	const double ms = 1 + 0.1 * log(4.0);
	CHECK(fabs(hypot(ys[0], ys[1]) - ms) < 1e-12);
	CHECK(fabs(atan2(ys[1], ys[0]) - 3.0) < 1e-9);
	CHECK(fabs(remainder(atan2(ys[63], ys[62]) - 3.0 * 0.25 * pow(10000.0, -62.0 / 64), 2 * M_PI)) < 1e-9);
}

static void f16s(void) {
	uint64_t s = 11;
	float x[64];
	uint16_t h[64], hp[64];
	int better = 0, worse = 0;
	for (int trial = 0; trial < 200; trial++) {
		for (int i = 0; i < 64; i++) x[i] = frand(&s) * (float)(1 + trial);
		uint8_t b = tensor_f16s_encode(x, 64, h);
		const float sc = tensor_f16s_scale(b);
		double e1 = 0, e2 = 0;
		for (int i = 0; i < 64; i++) {
			hp[i] = tensor_f32_to_f16(x[i]);
			double d1 = (double)tensor_f16_to_f32(h[i]) * sc - x[i], d2 = (double)tensor_f16_to_f32(hp[i]) - x[i];
			e1 += d1 * d1, e2 += d2 * d2;
		}
		better += e1 < e2;
		worse += e1 > e2;
	}
	CHECKF(worse == 0 && better > 150, "f16s beat plain f16 %d times, lost %d", better, worse);
	// Values beyond f16's range stay finite; tiny ones keep their relative precision.
	for (int i = 0; i < 64; i++) x[i] = (i + 1) * 1e5f;
	uint8_t b = tensor_f16s_encode(x, 64, h);
	double worst = 0;
	for (int i = 0; i < 64; i++) worst = fmax(worst, fabs(tensor_f16_to_f32(h[i]) * tensor_f16s_scale(b) / x[i] - 1));
	CHECKF(worst < 1e-3, "large values: relative error %g", worst);
	for (int i = 0; i < 64; i++) x[i] = (i + 1) * 1e-7f;
	b = tensor_f16s_encode(x, 64, h);
	worst = 0;
	for (int i = 0; i < 64; i++) worst = fmax(worst, fabs(tensor_f16_to_f32(h[i]) * tensor_f16s_scale(b) / x[i] - 1));
	CHECKF(worst < 1e-2, "tiny values: relative error %g", worst);
}

// Attention over scattered pages against a float64 softmax-weighted sum of the values as
// stored, for every row encoding, fused and unfused, over several tiles of positions.
static void attention(void) {
	enum { D = 32, NP = 150, PT = 4, NPAGES = 40 };
	static uint16_t k[NPAGES * PT * D * 2], v[NPAGES * PT * D * 2];
	static uint8_t kb[NPAGES * PT * 2 * 34], vb[NPAGES * PT * 2 * 34];
	static uint8_t ks[NPAGES * PT * 2], vs[NPAGES * PT * 2];
	static float kf[NP][D], vf[NP][D], kst[NP][D], vst[NP][D];
	int32_t pages[NPAGES];
	for (int i = 0; i < NPAGES; i++) pages[i] = (i * 7 + 3) % NPAGES;
	float q[D], out[D], out2[D], scores[NP], scratch[16384];
	CHECK(tensor_attn_scratch(1, D) <= 16384);
	uint64_t s = 5;
	for (int i = 0; i < D; i++) q[i] = frand(&s) * 2;
	const char *names[4] = {"f16", "f16s", "q8_0", "q4_0"};
	for (int enc = 0; enc < 4; enc++) {
		const size_t bsz = enc == 2 ? sizeof(block_q8_0) : sizeof(block_q4_0), brow = 2 * D / 32 * bsz;
		for (int j = 0; j < NP; j++) {
			// Each position's head sits at offset D (the second of two heads) of its row.
			const size_t row = (size_t)pages[j / PT] * PT + j % PT;
			float kr[2 * D], vr[2 * D];
			for (int e = 0; e < 2 * D; e++) kr[e] = frand(&s) * 3, vr[e] = frand(&s);
			memcpy(kf[j], kr + D, sizeof kf[j]), memcpy(vf[j], vr + D, sizeof vf[j]);
			if (enc == 1) {
				ks[row * 2 + 1] = tensor_f16s_encode(kr + D, D, k + row * 2 * D + D);
				vs[row * 2 + 1] = tensor_f16s_encode(vr + D, D, v + row * 2 * D + D);
				for (int e = 0; e < D; e++) {
					kst[j][e] = tensor_f16_to_f32(k[row * 2 * D + D + e]) * tensor_f16s_scale(ks[row * 2 + 1]);
					vst[j][e] = tensor_f16_to_f32(v[row * 2 * D + D + e]) * tensor_f16s_scale(vs[row * 2 + 1]);
				}
			} else if (enc == 0) {
				for (int e = 0; e < D; e++) {
					k[row * 2 * D + D + e] = tensor_f32_to_f16(kr[D + e]);
					v[row * 2 * D + D + e] = tensor_f32_to_f16(vr[D + e]);
					kst[j][e] = tensor_f16_to_f32(k[row * 2 * D + D + e]);
					vst[j][e] = tensor_f16_to_f32(v[row * 2 * D + D + e]);
				}
			} else {
				const tensor_traits *tt = tensor_traits_of(enc == 2 ? GGUF_T_Q8_0 : GGUF_T_Q4_0);
				tt->from_f32(kr, kb + row * brow, 2 * D);
				tt->from_f32(vr, vb + row * brow, 2 * D);
				float t[2 * D];
				tt->to_f32(kb + row * brow, t, 2 * D);
				memcpy(kst[j], t + D, sizeof kst[j]);
				tt->to_f32(vb + row * brow, t, 2 * D);
				memcpy(vst[j], t + D, sizeof vst[j]);
			}
		}
		tensor_kv_view kvv;
		if (enc < 2)
			kvv = (tensor_kv_view){.k = k + D, .v = v + D, .ks = enc ? ks + 1 : NULL, .vs = enc ? vs + 1 : NULL,
					       .pages = pages, .page_stride = PT * 2 * D, .row_stride = 2 * D,
					       .s_page_stride = PT * 2, .s_row_stride = 2, .page_tokens = PT};
		else
			kvv = (tensor_kv_view){.enc = enc == 2 ? TENSOR_KV_Q8_0 : TENSOR_KV_Q4_0, .k = kb, .v = vb, .pages = pages,
					       .page_stride = PT * brow, .row_stride = brow, .page_tokens = PT, .off = D};
		for (int n_pos = 1; n_pos <= NP; n_pos += NP - 1) {
			double sc[NP], mx = -1e300, sum = 0, worst = 0, worst2 = 0, worst_q = 0;
			for (int j = 0; j < n_pos; j++) {
				sc[j] = 0;
				for (int e = 0; e < D; e++) sc[j] += (double)q[e] * kst[j][e];
				sc[j] *= 0.25;
				mx = fmax(mx, sc[j]);
			}
			for (int j = 0; j < n_pos; j++) sum += sc[j] = exp(sc[j] - mx);
			tensor_attn_f16(q, D, 0.25f, &kvv, n_pos, scores, out);
			tensor_attn(q, D, 0.25f, &kvv, n_pos, scratch, out2);
			for (int e = 0; e < D; e++) {
				double o = 0, oq = 0;
				for (int j = 0; j < n_pos; j++) o += sc[j] / sum * vst[j][e];
				worst = fmax(worst, fabs(o - out[e]));
				worst2 = fmax(worst2, fabs(o - out2[e]));
				// and the values before rounding: what the encoding costs
				double sc2[NP], mx2 = -1e300, sum2 = 0;
				for (int j = 0; j < n_pos; j++) {
					sc2[j] = 0;
					for (int ee = 0; ee < D; ee++) sc2[j] += (double)q[ee] * kf[j][ee];
					mx2 = fmax(mx2, sc2[j] *= 0.25);
				}
				for (int j = 0; j < n_pos; j++) sum2 += sc2[j] = exp(sc2[j] - mx2);
				for (int j = 0; j < n_pos; j++) oq += sc2[j] / sum2 * vf[j][e];
				worst_q = fmax(worst_q, fabs(oq - out2[e]));
			}
			CHECKF(worst < 2e-6, "attention unfused (%s, %d positions) off the stored values by %g", names[enc], n_pos, worst);
			CHECKF(worst2 < 2e-6, "attention fused (%s, %d positions) off the stored values by %g", names[enc], n_pos, worst2);
			CHECKF(worst_q < (enc == 3 ? 0.2 : enc == 2 ? 0.02 : 3e-3), "attention (%s) off the unrounded values by %g",
			       names[enc], worst_q);
		}
		// A sliding window (inside the last tile, then across tiles) and a soft cap small
		// enough to change the weights: both kernels against float64 over the stored values.
		const int32_t windows[2] = {20, 150};
		for (int wi = 0; wi < 2; wi++) {
			tensor_kv_view wv = kvv;
			wv.window = windows[wi], wv.softcap = 2.0f;
			const int n_pos = NP, lo = NP - windows[wi];
			double sc[NP], mx = -1e300, sum = 0, worst = 0, worst2 = 0, moved = 0;
			for (int j = lo; j < n_pos; j++) {
				sc[j] = 0;
				for (int e = 0; e < D; e++) sc[j] += (double)q[e] * kst[j][e];
				sc[j] = 2.0 * tanh(sc[j] * 0.25 / 2.0);
				mx = fmax(mx, sc[j]);
			}
			for (int j = lo; j < n_pos; j++) sum += sc[j] = exp(sc[j] - mx);
			tensor_attn_f16(q, D, 0.25f, &wv, n_pos, scores, out);
			tensor_attn(q, D, 0.25f, &wv, n_pos, scratch, out2);
			float plain[D];
			tensor_attn(q, D, 0.25f, &kvv, n_pos, scratch, plain);
			for (int e = 0; e < D; e++) {
				double o = 0;
				for (int j = lo; j < n_pos; j++) o += sc[j] / sum * vst[j][e];
				worst = fmax(worst, fabs(o - out[e]));
				worst2 = fmax(worst2, fabs(o - out2[e]));
				moved = fmax(moved, fabs(o - plain[e]));
			}
			CHECKF(worst < 2e-6 && worst2 < 2e-6, "attention (%s, window %d, cap 2) off the stored values by %g, %g", names[enc],
			       windows[wi], worst, worst2);
			CHECKF(moved > 1e-3, "attention (%s): the window and cap changed nothing (%g)", names[enc], moved);
		}
	}
}

static void moe_route(void) {
	const float lg[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.5f, 0.0f};
	int32_t ids[3];
	float w[3];
	tensor_moe_route(lg, 6, 3, true, ids, w);
	CHECK(ids[0] == 1 && ids[1] == 3 && ids[2] == 4); // ties go to the lower id
	CHECK(fabsf(w[0] + w[1] + w[2] - 1) < 1e-6f && w[0] == w[1] && w[2] < w[0]);
	tensor_moe_route(lg, 6, 2, false, ids, w);
	double sum = 0;
	for (int e = 0; e < 6; e++) sum += exp(lg[e] - 2.0);
	CHECK(fabs(w[0] - 1.0 / sum) < 1e-6);
	float src[3][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}}, dst[2][4];
	const int32_t idx[2] = {2, 0};
	tensor_gather_rows(&src[0][0], 4, idx, 2, 4, &dst[0][0]);
	CHECK(dst[0][0] == 9 && dst[1][3] == 4);
}

static void kv_pages(void) {
	char err[256];
	kv_config c = {.type = KV_F16S, .n_layers = 2, .kv_dim = 8, .group = 4, .page_tokens = 4, .n_pages = 6, .n_seqs = 3};
	kv_cache *kv;
	CHECK(kv_new(&kv, &c, err, sizeof err) == 0);
	CHECK(kv_pages_free(kv) == 6 && kv_seq_len(kv, 0) == 0 && kv_seq_len(kv, 3) == -1);
	CHECK(kv_seq_grow(kv, 0, 9) == 0 && kv_pages_free(kv) == 3);
	CHECK(kv_seq_grow(kv, 1, 13) == LANES_ELIMIT && kv_seq_len(kv, 1) == 0 && kv_pages_free(kv) == 3);
	CHECK(kv_seq_grow(kv, 1, 12) == 0 && kv_pages_free(kv) == 0);
	CHECK(kv_seq_grow(kv, 0, 5) == LANES_EINVAL); // shrinking is truncate's job
	int32_t n;
	const int32_t *pg = kv_seq_pages(kv, 0, &n);
	CHECK(n == 3);
	// Rows of different positions never overlap; a row's scale bytes are its own.
	CHECK(kv_k_row(kv, 1, 0, 8) == kv_k_base(kv, 1) + pg[2] * kv_page_stride(kv));
	CHECK(kv_ks_row(kv, 1, 0, 5) == kv_ks_base(kv, 1) + pg[1] * kv_scale_page_stride(kv) + 1 * 2);
	CHECK(kv_k_row(kv, 0, 1, 0) != kv_k_row(kv, 0, 0, 0));
	kv_seq_truncate(kv, 0, 4);
	CHECK(kv_seq_len(kv, 0) == 4 && kv_pages_free(kv) == 2);
	kv_seq_truncate(kv, 0, 100); // longer: no change
	CHECK(kv_seq_len(kv, 0) == 4);
	kv_seq_clear(kv, 1);
	CHECK(kv_pages_free(kv) == 5);
	kv_free(kv);
	kv_config bad = c;
	bad.group = 3;
	CHECK(kv_new(&kv, &bad, err, sizeof err) == LANES_EINVAL && kv == NULL);
	bad = c;
	bad.n_pages = 0;
	CHECK(kv_new(&kv, &bad, err, sizeof err) == LANES_EINVAL);
	bad = c;
	bad.kv_dim = INT32_MAX, bad.n_pages = INT32_MAX, bad.page_tokens = INT32_MAX;
	CHECK(kv_new(&kv, &bad, err, sizeof err) != 0);
	kv_free(NULL);
}

// Sizes per type, and the page limit: pages above it are not handed out, cache-only ones are
// dropped at once, held ones go (and their memory with them) when let go.
static void kv_types_and_limit(void) {
	char err[256];
	const uint64_t f16 = kv_bytes_per_token(KV_F16, 22, 256, 64), q8 = kv_bytes_per_token(KV_Q8_0, 22, 256, 64),
		       q4 = kv_bytes_per_token(KV_Q4_0, 22, 256, 64), f16s = kv_bytes_per_token(KV_F16S, 22, 256, 64);
	CHECKF(f16 == 22u * 2 * 256 * 2 && f16s == f16 + 22u * 2 * 4, "f16 %llu f16s %llu", (unsigned long long)f16,
	       (unsigned long long)f16s);
	CHECKF(q8 == 22u * 2 * 8 * 34 && q8 * 100 <= f16 * 55, "q8_0 %llu bytes per token, %.1f%% of f16", (unsigned long long)q8,
	       100.0 * q8 / f16);
	CHECKF(q4 == 22u * 2 * 8 * 18, "q4_0 %llu bytes per token", (unsigned long long)q4);
	CHECK(kv_bytes_per_token(KV_Q8_0, 2, 40, 8) == 0 && kv_type_parse("q4_0") == KV_Q4_0 && kv_type_parse("q5") < 0);
	kv_config c = {.type = KV_Q8_0, .n_layers = 2, .kv_dim = 40, .group = 8, .page_tokens = 4, .n_pages = 8, .n_seqs = 2};
	kv_cache *kv;
	CHECK(kv_new(&kv, &c, err, sizeof err) == LANES_EINVAL && strstr(err, "multiple of 32"));
	c.kv_dim = 64;
	CHECK(kv_new(&kv, &c, err, sizeof err) == 0);
	if (!kv) return;
	CHECK(kv_row_bytes(kv) == 68 && kv_page_bytes(kv) == 2u * 2 * 4 * 68 && kv_reserved_bytes(kv) == 8 * kv_page_bytes(kv));
	CHECK(kv_k_base(kv, 0) == NULL && kv_k_row(kv, 0, 0, 0) == NULL); // block rows are bytes only
	int32_t tok[16];
	for (int i = 0; i < 16; i++) tok[i] = i + 1;
	CHECK(kv_seq_grow(kv, 0, 16) == 0); // pages 0..3
	memset(kv_k_at(kv, 1, 0, 15), 7, kv_row_bytes(kv));
	kv_prefix_publish(kv, 0, 0, tok, 16);
	CHECK(kv_seq_grow(kv, 1, 12) == 0); // pages 4..6
	kv_set_limit(kv, 3);
	CHECK(kv_pages_limit(kv) == 3 && kv_pages_free(kv) == 0 && kv_pages_over_limit(kv) == 4);
	kv_seq_clear(kv, 1);
	CHECK(kv_pages_over_limit(kv) == 1 && kv_pages_free(kv) == 0);
	// seq 0's last page (3) is above the limit: when let go the cache does not keep it
	kv_seq_truncate(kv, 0, 12);
	CHECK(kv_pages_over_limit(kv) == 0 && kv_pages_cached(kv) == 0);
	CHECK(kv_seq_grow(kv, 1, 4) == LANES_ELIMIT); // 3 pages below the limit, all held
	kv_seq_clear(kv, 0);
	CHECK(kv_pages_cached(kv) == 3 && kv_pages_free(kv) == 0);
	CHECK(kv_seq_grow(kv, 1, 8) == 0 && kv_pages_cached(kv) == 1); // a grow takes cached pages back
	int32_t n;
	const int32_t *pg = kv_seq_pages(kv, 1, &n);
	CHECK(n == 2 && pg[0] < 3 && pg[1] < 3);
	kv_set_limit(kv, 8);
	CHECK(kv_pages_free(kv) == 5 && kv_pages_over_limit(kv) == 0);
	CHECK(kv_seq_grow(kv, 0, 24) == 0 && kv_pages_free(kv) == 0); // 5 free + 1 cached
	kv_seq_clear(kv, 0);
	kv_seq_clear(kv, 1);
	CHECK(kv_pages_free(kv) + kv_pages_cached(kv) == 8);
	kv_free(kv);
}

static double rss_mib(void) {
	long pages = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f && fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
	if (f) fclose(f);
	return res * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

// The memory of pages above a lowered limit goes back to the system.
static void kv_limit_memory(void) {
	char err[256];
	kv_config c = {.type = KV_F16, .n_layers = 1, .kv_dim = 1024, .group = 1024, .page_tokens = 16, .n_pages = 2048, .n_seqs = 1};
	kv_cache *kv;
	CHECK(kv_new(&kv, &c, err, sizeof err) == 0);
	if (!kv) return;
	const double r0 = rss_mib();
	CHECK(kv_seq_grow(kv, 0, 2048 * 16) == 0);
	for (int32_t p = 0; p < 2048 * 16; p += 16) {
		memset(kv_k_at(kv, 0, 0, p), 1, kv_row_bytes(kv) * 16);
		memset(kv_v_at(kv, 0, 0, p), 1, kv_row_bytes(kv) * 16);
	}
	const double r1 = rss_mib();
	kv_seq_clear(kv, 0);
	kv_set_limit(kv, 64);
	const double r2 = rss_mib();
	CHECKF(r1 - r0 > 100 && r1 - r2 > 100, "128 MiB of pages in use then handed back: RSS %.0f -> %.0f -> %.0f MiB", r0, r1, r2);
	kv_free(kv);
}

static void sampling(void) {
	char err[128];
	sample_params p = sample_defaults();
	CHECK(p.temp == 0.8f && p.top_k == 40 && p.top_p == 0.95f && sample_check(&p, err, sizeof err) == 0);
	sample_params bad = p;
	bad.temp = -1;
	CHECK(sample_check(&bad, err, sizeof err) == LANES_EINVAL && strstr(err, "temperature"));
	bad = p, bad.top_p = 0;
	CHECK(sample_check(&bad, err, sizeof err) == LANES_EINVAL);
	bad = p, bad.min_p = 1.5f;
	CHECK(sample_check(&bad, err, sizeof err) == LANES_EINVAL);
	bad = p, bad.temp = NAN;
	CHECK(sample_check(&bad, err, sizeof err) == LANES_EINVAL);

	enum { V = 1000 };
	float lg[V];
	uint64_t s = 9;
	for (int i = 0; i < V; i++) lg[i] = frand(&s) * 5;
	lg[17] = lg[400] = 9.0f; // a tie at the top
	sampler *sm;
	CHECK(sampler_new(&sm, V) == 0);
	CHECK(sample_argmax(lg, V) == 17);
	p.temp = 0;
	CHECK(sampler_pick(sm, &p, lg, 0, 5) == 17);
	p.temp = 1, p.top_k = 1, p.top_p = 1;
	CHECK(sampler_pick(sm, &p, lg, 0, 5) == 17);
	// The draw is a function of (seed, choice, pos): repeatable, and it varies with each.
	p.top_k = 0;
	int32_t a = sampler_pick(sm, &p, lg, 0, 123);
	CHECK(a == sampler_pick(sm, &p, lg, 0, 123));
	CHECK(sample_uniform(1, 0, 5) == sample_uniform(1, 0, 5));
	CHECK(sample_uniform(1, 0, 5) != sample_uniform(1, 0, 6) && sample_uniform(1, 0, 5) != sample_uniform(1, 1, 5) &&
	      sample_uniform(1, 0, 5) != sample_uniform(2, 0, 5));
	// Top-k keeps the k best: every pick is among them.
	float sorted[V];
	memcpy(sorted, lg, sizeof lg);
	for (int i = 0; i < V; i++)
		for (int j = i + 1; j < V; j++)
			if (sorted[j] > sorted[i]) { float t = sorted[i]; sorted[i] = sorted[j]; sorted[j] = t; }
	p.top_k = 25, p.temp = 5;
	bool in_top = true;
	for (int pos = 0; pos < 2000; pos++) in_top &= lg[sampler_pick(sm, &p, lg, 0, pos)] >= sorted[24];
	CHECK(in_top);
	// Frequencies follow softmax(logits / temp).
	float three[3] = {1.0f, 0.0f, -1.0f};
	sampler *s3;
	CHECK(sampler_new(&s3, 3) == 0);
	sample_params q = {.temp = 1, .top_k = 0, .top_p = 1, .min_p = 0, .seed = 42};
	int cnt[3] = {0};
	for (int pos = 0; pos < 30000; pos++) cnt[sampler_pick(s3, &q, three, 0, pos)]++;
	const double z = exp(1.0) + 1 + exp(-1.0);
	CHECKF(fabs(cnt[0] / 30000.0 - exp(1.0) / z) < 0.015 && fabs(cnt[2] / 30000.0 - exp(-1.0) / z) < 0.015,
	       "frequencies %d %d %d", cnt[0], cnt[1], cnt[2]);
	// Top-p 0.6 keeps tokens 0 and 1 (0.665 reaches 0.6 alone... only token 0).
	q.top_p = 0.6f;
	memset(cnt, 0, sizeof cnt);
	for (int pos = 0; pos < 3000; pos++) cnt[sampler_pick(s3, &q, three, 0, pos)]++;
	CHECK(cnt[0] == 3000);
	q.top_p = 0.9f;
	memset(cnt, 0, sizeof cnt);
	for (int pos = 0; pos < 3000; pos++) cnt[sampler_pick(s3, &q, three, 0, pos)]++;
	CHECK(cnt[0] > 0 && cnt[1] > 0 && cnt[2] == 0);
	// Min-p 0.3: token 2 (e^-2 = 0.135 of the top) is dropped, token 1 (0.37) kept.
	q.top_p = 1, q.min_p = 0.3f;
	memset(cnt, 0, sizeof cnt);
	for (int pos = 0; pos < 3000; pos++) cnt[sampler_pick(s3, &q, three, 0, pos)]++;
	CHECK(cnt[1] > 0 && cnt[2] == 0);
	// Typical 0.9 on {1, 0, -1}: scores |-log q - H| order tokens 0, 1, 2; 0.665 + 0.245 reach it.
	q.min_p = 0, q.typical = 0.9f;
	memset(cnt, 0, sizeof cnt);
	for (int pos = 0; pos < 3000; pos++) cnt[sampler_pick(s3, &q, three, 0, pos)]++;
	CHECK(cnt[0] > 0 && cnt[1] > 0 && cnt[2] == 0);
	// A most likely token that is atypical (q 0.4 beside four of 0.15, entropy 1.5): typical 0.5
	// keeps the four and drops it, which no top-p or min-p would.
	float five[5] = {0.0f, -0.981f, -0.981f, -0.981f, -0.981f};
	sampler *s5;
	CHECK(sampler_new(&s5, 5) == 0);
	sample_params t5 = {.temp = 1, .top_p = 1, .seed = 7, .typical = 0.5f};
	int c5[5] = {0};
	for (int pos = 0; pos < 4000; pos++) c5[sampler_pick(s5, &t5, five, 0, pos)]++;
	CHECKF(c5[0] == 0 && c5[1] > 0 && c5[2] > 0 && c5[3] > 0 && c5[4] > 0, "typical picks %d %d %d %d %d", c5[0], c5[1], c5[2],
	       c5[3], c5[4]);
	// repeatable, and off at 1 (and at 0, unset)
	CHECK(sampler_pick(s5, &t5, five, 0, 99) == sampler_pick(s5, &t5, five, 0, 99));
	t5.typical = 1;
	int on = 0;
	for (int pos = 0; pos < 200; pos++) on += sampler_pick(s5, &t5, five, 0, pos) == 0;
	CHECK(on > 0);
	bad = p, bad.typical = 1.5f;
	CHECK(sample_check(&bad, err, sizeof err) == LANES_EINVAL && strstr(err, "typical_p"));
	sampler_free(s5);
	q.typical = 0;
	// A whole vocabulary is sorted by radix, a top-k by comparison: one order, so the same
	// picks, over ties, signed zeros, tiny and huge values, -inf and NaN. The top-k sampler
	// sees one more candidate (-inf, the last id), which its k leaves out.
	enum { W = 3000 };
	static float wl[W + 1];
	sampler *sw, *sk;
	CHECK(sampler_new(&sw, W) == 0 && sampler_new(&sk, W + 1) == 0);
	static const float special[] = {0.0f, -0.0f, -INFINITY, NAN, 1e-40f, -1e-40f, 30.0f, -30.0f, 1e30f, -1e30f};
	int same = 0, picks = 0;
	for (int rep = 0; rep < 13; rep++) {
		for (int i = 0; i < W; i++) {
			float v = frand(&s) * (rep % 3 ? 6.0f : 0.5f);
			if (rep % 2) v = roundf(v * 4) / 4; // many ties
			wl[i] = i % 13 == 0 && rep > 1 ? special[(i / 13 + rep) % (rep > 5 ? 10 : 8)] : v;
			if (rep == 12) wl[i] = i % 7 == 0 ? 1.0f : i % 2 ? -0.0f : 0.0f; // -0 ties +0
		}
		wl[W] = -INFINITY;
		sample_params w = {.temp = 0.5f + 0.25f * (float)(rep % 4), .top_p = rep % 3 == 2 ? 0.9f : 1, .min_p = rep % 5 == 4 ? 0.01f : 0,
				   .seed = 100 + (uint64_t)rep};
		sample_params k = w;
		k.top_k = W;
		for (int pos = 0; pos < 40; pos++, picks++) same += sampler_pick(sw, &w, wl, 0, pos) == sampler_pick(sk, &k, wl, 0, pos);
	}
	CHECKF(same == picks, "radix and comparison sorts pick alike (%d of %d)", same, picks);
	sampler_free(sw);
	sampler_free(sk);
	// NaN logits never win.
	float nan3[3] = {NAN, 0.5f, NAN};
	CHECK(sample_argmax(nan3, 3) == 1);
	q.min_p = 0;
	CHECK(sampler_pick(s3, &q, nan3, 0, 1) == 1);
	sampler_free(s3);
	sampler_free(sm);
	sampler_free(NULL);
}

int main(void) {
	matmul_all_types();
	norms_and_activations();
	rope();
	f16s();
	attention();
	moe_route();
	kv_pages();
	kv_types_and_limit();
	kv_limit_memory();
	sampling();
	T_DONE("fwd_kernels");
}
