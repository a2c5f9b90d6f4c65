// tensor/ref/iq_fit: the search the grid quantizers (IQ3, IQ2, IQ1) share — the nearest grid
// point by exhaustive search, a sub-block's scale by trying scales around its largest element
// and refitting each by least squares, and the stored scale index nearest the fitted scale.
#include "tensor/ref/quants.h"

#include <math.h>

static inline float iq_elem(const iq_grid *gr, int i, int j) {
	const uint64_t e = gr->w == 8 ? ((const uint64_t *)gr->tab)[i] : ((const uint32_t *)gr->tab)[i];
	const uint8_t b = (uint8_t)(e >> 8 * j);
	return gr->is_signed ? (float)(int8_t)b : (float)b;
}

// The search over points of 4 or 8 bytes, unrolled: targets less s * delta, then each point's
// squared distance summed in pairs.
#define IQ_PAIRS4(r) (((r)[0] * (r)[0] + (r)[1] * (r)[1]) + ((r)[2] * (r)[2] + (r)[3] * (r)[3]))

static inline int near4(const uint32_t *tab, int n, const float *t, float s, float *err) {
	int best = 0;
	float be = INFINITY;
	for (int i = 0; i < n; i++) {
		float r[4];
		_Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) r[j] = t[j] - s * (float)(tab[i] >> 8 * j & 0xff);
		const float e = IQ_PAIRS4(r);
		if (e < be) be = e, best = i;
	}
	*err = be;
	return best;
}

static inline int near8(const uint64_t *tab, int n, const float *t, float s, bool sgn, float *err) {
	int best = 0;
	float be = INFINITY;
	for (int i = 0; i < n; i++) {
		float r[8];
		_Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {
			const uint8_t b = (uint8_t)(tab[i] >> 8 * j);
			r[j] = t[j] - s * (sgn ? (float)(int8_t)b : (float)b);
		}
		const float e = IQ_PAIRS4(r) + IQ_PAIRS4(r + 4);
		if (e < be) be = e, best = i;
	}
	*err = be;
	return best;
}

int iq_nearest(const iq_grid *gr, const float *a, float s, float delta, float *err) {
	float t[8], e;
	for (int j = 0; j < gr->g; j++) t[j] = a[j] - s * delta;
	const int i = gr->g == 4 ? near4(gr->tab, gr->n, t, s, &e)
		    : gr->is_signed ? near8(gr->tab, gr->n, t, s, true, &e) : near8(gr->tab, gr->n, t, s, false, &e);
	if (err) *err = e;
	return i;
}

float iq_codes(const iq_grid *gr, const float *a, int ng, const float *delta, float s, int *idx, float *lsq,
	       float *gain) {
	float err = 0.0f, aq = 0.0f, qq = 0.0f;
	for (int k = 0; k < ng; k++) {
		const float dk = delta ? delta[k] : 0.0f;
		const float *ak = a + gr->g * k;
		float e;
		const int i = iq_nearest(gr, ak, s, dk, &e);
		err += e;
		for (int j = 0; j < gr->g; j++) {
			const float q = iq_elem(gr, i, j) + dk;
			aq += ak[j] * q;
			qq += q * q;
		}
		if (idx) idx[k] = i;
	}
	if (lsq) *lsq = qq > 0.0f ? aq / qq : 0.0f;
	if (gain) *gain = qq > 0.0f ? aq * aq / qq : 0.0f;
	return err;
}

// Scales tried besides those that put the largest target at each grid level: fractions of
// the one that puts it at the top level.
static const float iq_tries[] = {0.6f, 0.75f, 0.85f, 0.95f, 1.1f};

float iq_fit(const iq_grid *gr, const float *a, int ng, const float *delta, float *gain) {
	float amax = 0.0f;
	for (int j = 0; j < gr->g * ng; j++) amax = fabsf(a[j]) > amax ? fabsf(a[j]) : amax;
	*gain = 0.0f;
	if (amax == 0.0f) return 0.0f;
	const int nt = (int)(sizeof iq_tries / sizeof iq_tries[0]);
	float best = -1.0f, best_s = 0.0f, g, lsq;
	for (int t = 0; t < gr->nlev + nt; t++) {
		const float s = t < gr->nlev ? amax / gr->lev[t] : iq_tries[t - gr->nlev] * amax / gr->lev[gr->nlev - 1];
		iq_codes(gr, a, ng, delta, s, NULL, &lsq, &g);
		if (g > best && lsq > 0.0f) best = g, best_s = lsq;
	}
	// the best one's codes taken again at its refitted scale, while that helps
	for (int it = 0; it < 2 && best_s > 0.0f; it++) {
		iq_codes(gr, a, ng, delta, best_s, NULL, &lsq, &g);
		if (!(g > best) || !(lsq > 0.0f)) break;
		best = g, best_s = lsq;
	}
	*gain = best > 0.0f ? best : 0.0f;
	return best_s;
}

int iq_pick_ls(const iq_grid *gr, const float *a, int ng, const float *delta, float s, float d, float mul, int nl,
	       int *idx) {
	if (d == 0.0f) {
		iq_codes(gr, a, ng, delta, 0.0f, idx, NULL, NULL);
		return 0;
	}
	// element scale d (2 ls + 1) mul: the ls nearest s, then its neighbours
	int l0 = (int)lrintf((s / (d * mul) - 1.0f) * 0.5f);
	l0 = l0 < 0 ? 0 : l0 > nl - 1 ? nl - 1 : l0;
	int best = l0;
	float be = INFINITY;
	for (int l = l0 - 1; l <= l0 + 1; l++) {
		if (l < 0 || l > nl - 1) continue;
		const float e = iq_codes(gr, a, ng, delta, d * (float)(2 * l + 1) * mul, NULL, NULL, NULL);
		if (e < be) be = e, best = l;
	}
	iq_codes(gr, a, ng, delta, d * (float)(2 * best + 1) * mul, idx, NULL, NULL);
	return best;
}

uint8_t iq_signs8(const float *x, bool even, float *a) {
	uint8_t s = 0;
	int small = 0;
	for (int j = 0; j < 8; j++) {
		if (x[j] < 0.0f) s |= (uint8_t)(1u << j);
		if (fabsf(x[j]) < fabsf(x[small])) small = j;
	}
	// an odd count of negatives cannot be stored: the smallest element takes the other sign
	if (even && __builtin_popcount(s) & 1) s ^= (uint8_t)(1u << small);
	for (int j = 0; j < 8; j++) a[j] = s >> j & 1 ? -x[j] : x[j];
	return s;
}
