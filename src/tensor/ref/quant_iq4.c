// tensor/ref/quant_iq4: reference quantize and dequantize of the non-linear 4-bit types —
// IQ4_NL (blocks of 32, one fp16 scale) and IQ4_XS (super-blocks of 256: one fp16 scale and
// a 6-bit scale per 32) — whose codes index the codebook tensor_iq4nl_values.
#include "tensor/ref/quants.h"

#include <math.h>
#include <string.h>

#define F16(x) tensor_f16_to_f32(x)
#define TO_F16(x) tensor_f32_to_f16(x)

// Published as kvalues_iq4nl in ggml's ggml-common.h.
const int8_t tensor_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

#define KV(i) ((float)tensor_iq4nl_values[i])

// Scales tried per end of the codebook: the largest element mapped IQ4_TRIES units either side of it.
#define IQ4_TRIES 5

static inline int iclamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

// A group of 32 goes four elements at a time (lane l holds elements 4k + l), each lane with its
// own sums, combined in lane order at the end: a fixed order, so the bytes are deterministic.
typedef float vf __attribute__((vector_size(16)));
typedef int32_t vi __attribute__((vector_size(16)));

static inline vf vsplat(float a) { return (vf){a, a, a, a}; }

// The codes nearest v (the lower on a tie; midpoints of integers are exact) in *c, and their
// values: the midpoints below v counted, the value stepped up at each.
static inline vf iq4_nearest4(vf v, vi *c) {
	vi n = {0, 0, 0, 0};
	vf q = vsplat(KV(0));
	for (int i = 0; i < 15; i++) {
		const vi up = v > vsplat(0.5f * (KV(i) + KV(i + 1)));
		n -= up;
		q += (vf)(up & (vi)vsplat(KV(i + 1) - KV(i)));
	}
	*c = n;
	return q;
}

static inline float hsum4(vf a) { return ((a[0] + a[1]) + a[2]) + a[3]; }

static const float ones32[32] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
				 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

// Codes of 32 elements x for the inverse scale id (into L unless NULL); returns the
// least-squares scale for those codes and in *gain how much it lowers the squared error
// below sum x^2: (sum v x)^2 / sum v^2 — each element's term weighted by w (all 1 without
// an importance matrix).
static float iq4_codes(const float *x, const float *w, float id, uint8_t *L, float *gain) {
	vf sqx = vsplat(0.0f), sqq = vsplat(0.0f);
	for (int k = 0; k < 8; k++) {
		vf xv, wv;
		vi c;
		memcpy(&xv, x + 4 * k, sizeof xv);
		memcpy(&wv, w + 4 * k, sizeof wv);
		const vf q = iq4_nearest4(xv * id, &c);
		sqx += wv * q * xv;
		sqq += wv * q * q;
		if (L)
			for (int l = 0; l < 4; l++) L[4 * k + l] = (uint8_t)c[l];
	}
	const float a = hsum4(sqx), b = hsum4(sqq);
	*gain = b > 0.0f ? a * a / b : 0.0f;
	return b > 0.0f ? a / b : 0.0f;
}

// The scale of a group of 32 with the least squared error found: the largest element put
// near either end of the codebook, each candidate's codes refitted by least squares, then the
// best one's codes taken again while that helps. 0 for an all-zero group.
static float iq4_fit(const float *x, const float *w) {
	float amax = 0.0f, max = 0.0f;
	for (int j = 0; j < 32; j++)
		if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
	if (amax == 0.0f) return 0.0f;
	float best = -1.0f, best_d = 0.0f, gain;
	for (int end = 0; end < 2; end++)
		for (int t = -IQ4_TRIES; t <= IQ4_TRIES; t++) {
			const float d = iq4_codes(x, w, ((end ? KV(15) : KV(0)) + (float)t) / max, NULL, &gain);
			if (gain > best) best = gain, best_d = d;
		}
	for (int it = 0; it < 2 && best_d != 0.0f; it++) {
		const float d = iq4_codes(x, w, 1.0f / best_d, NULL, &gain);
		if (!(gain > best)) break;
		best = gain, best_d = d;
	}
	return best_d;
}

// Stores the codes of 32 elements for the scale d: element j in byte j's low nibble, j+16 in its high.
static void iq4_pack(const float *x, float d, uint8_t *qs) {
	uint8_t L[32];
	float gain;
	iq4_codes(x, ones32, d != 0.0f ? 1.0f / d : 0.0f, L, &gain);
	for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | L[j + 16] << 4);
}

// Squared error of 32 elements stored with scale dl (as the dequantizer computes dl * value), weighted by w.
static float iq4_err(const float *x, const float *w, float dl) {
	const vf id = vsplat(dl != 0.0f ? 1.0f / dl : 0.0f);
	vf e = vsplat(0.0f);
	for (int k = 0; k < 8; k++) {
		vf xv, wv;
		vi c;
		memcpy(&xv, x + 4 * k, sizeof xv);
		memcpy(&wv, w + 4 * k, sizeof wv);
		const vf r = xv - vsplat(dl) * iq4_nearest4(xv * id, &c);
		e += wv * r * r;
	}
	return hsum4(e);
}

// ---- IQ4_NL: x = d * value[q] ------------------------------------------------------------
void tensor_ref_dequant_iq4_nl(const void *src, float *y, int64_t n) {
	const block_iq4_nl *b = src;
	for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) {
		const float d = F16(b[i].d);
		for (int j = 0; j < QK4_NL / 2; j++) {
			y[j] = d * KV(b[i].qs[j] & 0x0f);
			y[j + QK4_NL / 2] = d * KV(b[i].qs[j] >> 4);
		}
	}
}

void tensor_ref_quant_iq4_nl(const float *x, void *dst, int64_t n) { tensor_ref_quant_imp_iq4_nl(x, dst, n, NULL); }

void tensor_ref_quant_imp_iq4_nl(const float *x, void *dst, int64_t n, const float *imp) {
	block_iq4_nl *b = dst;
	float wb[QK4_NL];
	for (int64_t i = 0; i < n / QK4_NL; i++, x += QK4_NL) {
		const float *w = imp ? quant_weights(x, imp + i * QK4_NL, QK4_NL, wb) : ones32;
		b[i].d = TO_F16(iq4_fit(x, w));
		// codes for the scale as stored, not as fitted
		iq4_pack(x, F16(b[i].d), b[i].qs);
	}
}

// ---- IQ4_XS: x = d * (ls - 32) * value[q], ls the 6-bit scale of each 32 -----------------
void tensor_ref_dequant_iq4_xs(const void *src, float *y, int64_t n) {
	const block_iq4_xs *b = src;
	for (int64_t i = 0; i < n / QK_K; i++) {
		const float d = F16(b[i].d);
		for (int ib = 0; ib < QK_K / 32; ib++, y += 32) {
			const float dl = d * (float)(tensor_iq4xs_scale(&b[i], ib) - 32);
			const uint8_t *qs = b[i].qs + 16 * ib;
			for (int j = 0; j < 16; j++) {
				y[j] = dl * KV(qs[j] & 0x0f);
				y[j + 16] = dl * KV(qs[j] >> 4);
			}
		}
	}
}

void tensor_ref_quant_iq4_xs(const float *x, void *dst, int64_t n) { tensor_ref_quant_imp_iq4_xs(x, dst, n, NULL); }

void tensor_ref_quant_imp_iq4_xs(const float *x, void *dst, int64_t n, const float *imp) {
	block_iq4_xs *b = dst;
	float wb[QK_K];
	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		float s[QK_K / 32], smax = 0.0f;
		const float *wt = imp ? quant_weights(x, imp + i * QK_K, QK_K, wb) : NULL;
		for (int ib = 0; ib < QK_K / 32; ib++) {
			s[ib] = iq4_fit(x + 32 * ib, wt ? wt + 32 * ib : ones32);
			if (fabsf(s[ib]) > fabsf(smax)) smax = s[ib];
		}
		// The largest sub-block scale maps to -32, the end of the 6-bit range that reaches furthest.
		b[i].d = TO_F16(smax / -32.0f);
		const float d = F16(b[i].d);
		b[i].scales_h = 0;
		memset(b[i].scales_l, 0, sizeof b[i].scales_l);
		for (int ib = 0; ib < QK_K / 32; ib++) {
			const float *xb = x + 32 * ib, *wl = wt ? wt + 32 * ib : ones32;
			int l = 0;
			if (d != 0.0f) {
				// the rounded scale, or a neighbour of it where that stores the sub-block better
				const int l0 = iclamp((int)lrintf(s[ib] / d), -32, 31);
				float be = iq4_err(xb, wl, d * (float)l0);
				l = l0;
				for (int step = -1; step <= 1; step += 2) {
					const int c = l0 + step;
					if (c < -32 || c > 31) continue;
					const float e = iq4_err(xb, wl, d * (float)c);
					if (e < be) be = e, l = c;
				}
			}
			const int ls = l + 32;
			b[i].scales_l[ib / 2] |= (uint8_t)((ls & 0xf) << 4 * (ib % 2));
			b[i].scales_h |= (uint16_t)((ls >> 4) << 2 * ib);
			iq4_pack(xb, d * (float)l, b[i].qs + 16 * ib);
		}
	}
}
