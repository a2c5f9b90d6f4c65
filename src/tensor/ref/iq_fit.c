// tensor/ref/iq_fit: the search the grid quantizers (IQ3, IQ2, IQ1) share — the nearest grid
// point by exhaustive search, a sub-block's scale by trying scales around its largest element
// and refitting each by least squares, and the stored scale index nearest the fitted scale.
#include "tensor/ref/quants.h"

#include <math.h>
#include <string.h>

// Points go IQ_PW at a time: element j of points PW q..PW q + PW-1 side by side, so the search
// takes that many points per step of vector arithmetic.
#define IQ_PW 16
static inline float iq_pt(const iq_grid *gr, int i, int j) { return gr->pts[gr->g * IQ_PW * (i / IQ_PW) + IQ_PW * j + i % IQ_PW]; }

void iq_expand(iq_grid *gr, float *pts) {
	for (int i = 0; i < gr->n; i++)
		for (int j = 0; j < gr->g; j++) {
			const uint64_t e = gr->w == 8 ? ((const uint64_t *)gr->tab)[i] : ((const uint32_t *)gr->tab)[i];
			const uint8_t b = (uint8_t)(e >> 8 * j);
			pts[gr->g * IQ_PW * (i / IQ_PW) + IQ_PW * j + i % IQ_PW] = gr->is_signed ? (float)(int8_t)b : (float)b;
		}
	gr->pts = pts;
}

typedef float vpf __attribute__((vector_size(4 * IQ_PW)));
typedef int32_t vpi __attribute__((vector_size(4 * IQ_PW)));

// Every lane's arithmetic is fixed (no contraction, the same operations in any vector width), so
// each instruction set's build of the search finds the same point; the one that runs follows
// the kernel set in use, so a test can run each and compare.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define IQ_ISAS 1
#define IQ_AVX512 __attribute__((target("avx512f")))
#define IQ_AVX2 __attribute__((target("avx2")))
#endif

// Each lane keeps its least error and the first step that reached it; the least over lanes,
// at the lowest index on ties, is then the first point a scan in order would keep.
#define NEAR_G(NAME, G, ATTR)                                                                                     \
	ATTR static int NAME(const float *pts, int n, const float *t, const float *wt, float s, float *err) {   \
		const vpf sv = s - (vpf){0};                                                                      \
		vpf tv[G], wv[G], m = INFINITY - (vpf){0};                                                        \
		vpi at = {0};                                                                                     \
		for (int j = 0; j < G; j++) tv[j] = t[j] - (vpf){0}, wv[j] = wt[j] - (vpf){0};                   \
		for (int q = 0; q < n / IQ_PW; q++) {                                                             \
			const float *p = pts + IQ_PW * G * q;                                                     \
			vpf e = {0};                                                                              \
			_Pragma("GCC unroll 8") for (int j = 0; j < G; j++) {                                     \
				vpf pj;                                                                           \
				memcpy(&pj, p + IQ_PW * j, sizeof pj);                                            \
				const vpf r = tv[j] - sv * pj;                                                    \
				e += wv[j] * r * r;                                                               \
			}                                                                                         \
			const vpi lt = e < m;                                                                     \
			m = (vpf)(((vpi)e & lt) | ((vpi)m & ~lt));                                                \
			at = (q & lt) | (at & ~lt);                                                               \
		}                                                                                                 \
		int best = 0;                                                                                     \
		float be = INFINITY;                                                                              \
		for (int l = 0; l < IQ_PW; l++) {                                                                 \
			const int i = IQ_PW * at[l] + l;                                                          \
			if (m[l] < be || (m[l] == be && i < best)) be = m[l], best = i;                           \
		}                                                                                                 \
		*err = be;                                                                                        \
		return best;                                                                                      \
	}
NEAR_G(near_4, 4, )
NEAR_G(near_8, 8, )
#if IQ_ISAS
NEAR_G(near_4_avx2, 4, IQ_AVX2)
NEAR_G(near_8_avx2, 8, IQ_AVX2)
NEAR_G(near_4_avx512, 4, IQ_AVX512)
NEAR_G(near_8_avx512, 8, IQ_AVX512)
#endif

typedef int near_fn(const float *pts, int n, const float *t, const float *wt, float s, float *err);

enum search_build { BUILD_PORTABLE, BUILD_AVX2, BUILD_AVX512 };
static const char *const build_names[] = {"portable", "avx2", "avx512"};

static enum search_build search_build(void) {
#if IQ_ISAS
	const char *set = tensor_kernels_name(tensor_kernels_default());
	if (!strcmp(set, "avx512")) return BUILD_AVX512;
	if (!strcmp(set, "avx2")) return BUILD_AVX2;
#endif
	return BUILD_PORTABLE;
}

const char *iq_search_build(void) { return build_names[search_build()]; }

// The search for groups of g built for the kernel set in use (ref: the portable build).
static near_fn *near_for(int g) {
	switch (search_build()) {
#if IQ_ISAS
	case BUILD_AVX512: return g == 4 ? near_4_avx512 : near_8_avx512;
	case BUILD_AVX2: return g == 4 ? near_4_avx2 : near_8_avx2;
#endif
	default: return g == 4 ? near_4 : near_8;
	}
}

static const float ones8[8] = {1, 1, 1, 1, 1, 1, 1, 1};

int iq_nearest(const iq_grid *gr, const float *a, const float *wt, float s, float delta, float *err) {
	float t[8], e;
	for (int j = 0; j < gr->g; j++) t[j] = a[j] - s * delta;
	if (!wt) wt = ones8;
	const int i = near_for(gr->g)(gr->pts, gr->n, t, wt, s, &e);
	if (err) *err = e;
	return i;
}

float iq_codes(const iq_grid *gr, const float *a, const float *wt, int ng, const float *delta, float s, int *idx, float *lsq,
	       float *gain) {
	float err = 0.0f, aq = 0.0f, qq = 0.0f;
	for (int k = 0; k < ng; k++) {
		float dk = delta ? delta[k] : 0.0f, e;
		const float *ak = a + gr->g * k, *wk = wt ? wt + gr->g * k : ones8;
		int i = iq_nearest(gr, ak, wk, s, gr->pick != 0.0f ? gr->pick : dk, &e);
		if (gr->pick != 0.0f) { // the group's own offset: +pick, or -pick where that is nearer
			float e2;
			const int i2 = iq_nearest(gr, ak, wk, s, -gr->pick, &e2);
			dk = e2 < e ? -gr->pick : gr->pick;
			if (e2 < e) i = i2, e = e2;
		}
		err += e;
		for (int j = 0; j < gr->g; j++) {
			const float q = iq_pt(gr, i, j) + dk;
			aq += wk[j] * ak[j] * q;
			qq += wk[j] * q * q;
		}
		if (idx) idx[k] = i | (dk < 0.0f && gr->pick != 0.0f ? IQ_NEG_PICK : 0);
	}
	if (lsq) *lsq = qq > 0.0f ? aq / qq : 0.0f;
	if (gain) *gain = qq > 0.0f ? aq * aq / qq : 0.0f;
	return err;
}

// Scales tried besides those that put the largest target at each grid level: fractions of
// the one that puts it at the top level.
static const float iq_tries[] = {0.7f, 0.85f, 1.1f};

float iq_fit(const iq_grid *gr, const float *a, const float *wt, int ng, const float *delta, float *gain) {
	float amax = 0.0f;
	for (int j = 0; j < gr->g * ng; j++) amax = fabsf(a[j]) > amax ? fabsf(a[j]) : amax;
	*gain = 0.0f;
	if (amax == 0.0f) return 0.0f;
	const int nt = (int)(sizeof iq_tries / sizeof iq_tries[0]);
	float best = -1.0f, best_s = 0.0f, g, lsq;
	for (int t = 0; t < gr->nlev + nt; t++) {
		const float s = t < gr->nlev ? amax / gr->lev[t] : iq_tries[t - gr->nlev] * amax / gr->lev[gr->nlev - 1];
		iq_codes(gr, a, wt, ng, delta, s, NULL, &lsq, &g);
		if (g > best && lsq > 0.0f) best = g, best_s = lsq;
	}
	// the best one's codes taken again at its refitted scale, while that helps
	for (int it = 0; it < 1 && best_s > 0.0f; it++) {
		iq_codes(gr, a, wt, ng, delta, best_s, NULL, &lsq, &g);
		if (!(g > best) || !(lsq > 0.0f)) break;
		best = g, best_s = lsq;
	}
	*gain = best > 0.0f ? best : 0.0f;
	return best_s;
}

int iq_pick_ls(const iq_grid *gr, const float *a, const float *wt, int ng, const float *delta, float s, float d, float mul, int nl,
	       int *idx) {
	if (d == 0.0f) {
		iq_codes(gr, a, wt, ng, delta, 0.0f, idx, NULL, NULL);
		return 0;
	}
	// element scale d (2 ls + 1) mul: the ls nearest s, then its neighbours
	int l0 = (int)lrintf((s / (d * mul) - 1.0f) * 0.5f);
	l0 = l0 < 0 ? 0 : l0 > nl - 1 ? nl - 1 : l0;
	int best = l0, tmp[QK_K / 4];
	float be = INFINITY;
	for (int l = l0 - 1; l <= l0 + 1; l++) {
		if (l < 0 || l > nl - 1) continue;
		const float e = iq_codes(gr, a, wt, ng, delta, d * (float)(2 * l + 1) * mul, tmp, NULL, NULL);
		if (e < be) {
			be = e, best = l;
			memcpy(idx, tmp, (size_t)ng * sizeof *idx);
		}
	}
	return best;
}

uint8_t iq_signs8(const float *x, const float *wt, bool even, float *a) {
	uint8_t s = 0;
	int small = 0;
	if (!wt) wt = ones8;
	for (int j = 0; j < 8; j++) {
		if (x[j] < 0.0f) s |= (uint8_t)(1u << j);
		if (wt[j] * x[j] * x[j] < wt[small] * x[small] * x[small]) small = j;
	}
	// an odd count of negatives cannot be stored: the smallest element takes the other sign
	if (even && __builtin_popcount(s) & 1) s ^= (uint8_t)(1u << small);
	for (int j = 0; j < 8; j++) a[j] = s >> j & 1 ? -x[j] : x[j];
	return s;
}

const float *quant_weights(const float *x, const float *imp, int n, float *wt) {
	double ss = 0.0;
	for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
	const float sigma2 = (float)(2.0 * ss / n);
	for (int i = 0; i < n; i++) wt[i] = imp[i] * sqrtf(sigma2 + x[i] * x[i]);
	return wt;
}

const float *iq_weights(const float *x, const float *imp, float wt[QK_K]) { return imp ? quant_weights(x, imp, QK_K, wt) : NULL; }
