// tensor/ref/quant_k: reference quantize and dequantize of the K-quant super-block formats
// (Q2_K..Q6_K, Q8_K). Dequantization is bit-exact with ggml's; quantization follows the
// same scale searches (same arithmetic order), so files match llama.cpp's byte for byte.
#include "tensor/ref/quants.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#define F16(x) tensor_f16_to_f32(x)
#define TO_F16(x) tensor_f32_to_f16(x)

// Below this magnitude a group counts as all zeros.
#define GROUP_EPS 1e-15f

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }
static inline int iclamp(int v, int lo, int hi) { return imax(lo, imin(hi, v)); }

// Round to nearest, ties to even, through the float adder; inputs beyond +-2^22 (and NaN)
// are clamped first so no value reaches undefined behaviour.
static inline int nearest_int(float v) {
	if (!(fabsf(v) <= 4194303.0f)) v = v > 0 ? 4194303.0f : -4194303.0f;
	float t = v + 12582912.0f;
	int32_t i;
	memcpy(&i, &t, 4);
	return (i & 0x007fffff) - 0x00400000;
}

// ---- shared scale searches ---------------------------------------------------------------

// ---- four groups side by side ------------------------------------------------------------
// The scale searches run 4 groups of a super-block at once in GCC/Clang vectors (one SSE
// register on x86-64's baseline). Every lane
// does exactly the scalar IEEE operations of the one-group search (no FMA, no reordering of
// a lane's sums), so the bytes equal those of a group-at-a-time implementation.
#define VL 4
typedef float vf __attribute__((vector_size(VL * 4)));
typedef int32_t vi __attribute__((vector_size(VL * 4)));

static inline vf vsplat(float a) { return (vf){a, a, a, a}; }
static inline vi vsplati(int32_t a) { return (vi){a, a, a, a}; }
static inline vf vsel(vi m, vf a, vf b) { return (vf)((m & (vi)a) | (~m & (vi)b)); }
static inline vi vseli(vi m, vi a, vi b) { return (m & a) | (~m & b); }
static inline vf vabs(vf a) { return (vf)((vi)a & vsplati(0x7fffffff)); }
static inline vf vcvt(vi a) { return __builtin_convertvector(a, vf); }

// nearest_int on each lane, clamped to [lo, hi].
static inline vi vnearest(vf v, int lo, int hi) {
	const vf big = vsplat(4194303.0f);
	vi out = ~((v <= big) & (v >= -big));
	v = vsel(out, vsel(v > 0, big, -big), v);
	vi i = (vi)(v + 12582912.0f);
	i = (i & 0x007fffff) - 0x00400000;
	i = vseli(i < lo, vsplati(lo), i);
	return vseli(i > hi, vsplati(hi), i);
}

// Lane g of t[i] = x[g*n + i]: the groups' i-th elements side by side.
static void transpose_in(int n, const float *x, vf *t) {
	for (int i = 0; i < n; i++)
		for (int g = 0; g < VL; g++) t[i][g] = x[g * n + i];
}

// Symmetric quants L in [0, 2*nmax) for x ~ scale * (L - nmax), weighted by x^2 (or by wq,
// an importance matrix's weights): tries 18 scales around the one that maps the extreme
// element to -nmax and keeps the best least-squares fit. Four groups of n <= 32 elements
// (x + g*n); scale[g] per group.
static void fit_symmetric4(int n, int nmax, const float *x, const float *wq, int8_t *L, float *scale_out) {
	vf xt[32], wt[32];
	vi lbest[32], lt[32];
	transpose_in(n, x, xt);
	if (wq) transpose_in(n, wq, wt);
	else
		for (int i = 0; i < n; i++) wt[i] = xt[i] * xt[i];
	vf amax = vsplat(0.0f), max = vsplat(0.0f);
	for (int i = 0; i < n; i++) {
		const vi m = vabs(xt[i]) > amax;
		amax = vsel(m, vabs(xt[i]), amax);
		max = vsel(m, xt[i], max);
	}
	const vi zero = amax < GROUP_EPS; // such a group keeps L = 0, scale 0
	max = vsel(zero, vsplat(1.0f), max);
	vf iscale = (float)-nmax / max;
	vf sumlx = vsplat(0.0f), suml2 = vsplat(0.0f);
	for (int i = 0; i < n; i++) {
		const vi l = vnearest(iscale * xt[i], -nmax, nmax - 1);
		lbest[i] = l + nmax;
		const vf fl = vcvt(l), w = wt[i];
		sumlx += w * xt[i] * fl;
		suml2 += w * fl * fl;
	}
	vf scale = vsel(suml2 != 0, sumlx / suml2, vsplat(0.0f));
	vf best = scale * sumlx;
	for (int is = -9; is <= 9; is++) {
		if (is == 0) continue;
		iscale = -(nmax + 0.1f * is) / max;
		sumlx = suml2 = vsplat(0.0f);
		for (int i = 0; i < n; i++) {
			const vi l = vnearest(iscale * xt[i], -nmax, nmax - 1);
			lt[i] = l + nmax;
			const vf fl = vcvt(l), w = wt[i];
			sumlx += w * xt[i] * fl;
			suml2 += w * fl * fl;
		}
		const vi take = (suml2 > 0) & (sumlx * sumlx > best * suml2);
		const vf ns = sumlx / suml2;
		for (int i = 0; i < n; i++) lbest[i] = vseli(take, lt[i], lbest[i]);
		scale = vsel(take, ns, scale);
		best = vsel(take, ns * sumlx, best);
	}
	scale = vsel(zero, vsplat(0.0f), scale);
	for (int g = 0; g < VL; g++) {
		scale_out[g] = scale[g];
		for (int i = 0; i < n; i++) L[g * n + i] = (int8_t)(zero[g] ? 0 : lbest[i][g]);
	}
}

// Symmetric 3-bit quants: starts from the extreme-element scale, then moves single
// elements to the level that improves the weighted (x^2, or wq's) least-squares fit.
static float fit_q3(int n, int nmax, const float *x, const float *wq, int8_t *L) {
	float amax = 0.0f, max = 0.0f;
	for (int i = 0; i < n; i++) {
		if (fabsf(x[i]) > amax) {
			amax = fabsf(x[i]);
			max = x[i];
		}
	}
	if (amax < GROUP_EPS) {
		memset(L, 0, (size_t)n);
		return 0.0f;
	}
	float iscale = -nmax / max;
	float sumlx = 0.0f, suml2 = 0.0f;
	for (int i = 0; i < n; i++) {
		int l = iclamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
		L[i] = (int8_t)l;
		float w = wq ? wq[i] : x[i] * x[i];
		sumlx += w * x[i] * l;
		suml2 += w * l * l;
	}
	for (int pass = 0; pass < 5; pass++) {
		int changed = 0;
		for (int i = 0; i < n; i++) {
			float w = wq ? wq[i] : x[i] * x[i];
			float slx = sumlx - w * x[i] * L[i];
			if (slx <= 0) continue;
			float sl2 = suml2 - w * L[i] * L[i];
			int nl = iclamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
			if (nl == L[i]) continue;
			slx += w * x[i] * nl;
			sl2 += w * nl * nl;
			if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
				L[i] = (int8_t)nl;
				sumlx = slx;
				suml2 = sl2;
				changed++;
			}
		}
		if (!changed) break;
	}
	for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
	return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Asymmetric quants L in [0, nmax] for x ~ scale * L - min (min >= 0 returned in the_min).
// Tries nstep+1 scales from (nmax + rmin) to (nmax + rmin + nstep*rdelta) over the range,
// solving weighted least squares for scale and min each time; keeps the smallest weighted
// error (absolute with use_mad, else squared). Four groups of n <= 32 elements.
static void fit_affine4(int n, int nmax, const float *x, const float *w, uint8_t *L,
			float *scale_out, float *min_out, float rmin, float rdelta, int nstep,
			bool use_mad) {
	vf xt[32], wt[32];
	vi lbest[32], lt[32];
	transpose_in(n, x, xt);
	transpose_in(n, w, wt);
	vf mn = xt[0], mx = xt[0], sum_w = wt[0], sum_x = sum_w * xt[0];
	for (int i = 1; i < n; i++) {
		mn = vsel(xt[i] < mn, xt[i], mn);
		mx = vsel(xt[i] > mx, xt[i], mx);
		sum_w += wt[i];
		sum_x += wt[i] * xt[i];
	}
	mn = vsel(mn > 0, vsplat(0.0f), mn);
	const vi flat = mx == mn; // such a group gets L = 0, scale 0, min -mn
	const vf flat_min = mn;
	mx = vsel(flat, mn + 1.0f, mx);
	vf iscale = (float)nmax / (mx - mn);
	vf scale = 1.0f / iscale, best = vsplat(0.0f);
	for (int i = 0; i < n; i++) {
		lbest[i] = vnearest(iscale * (xt[i] - mn), 0, nmax);
		vf diff = scale * vcvt(lbest[i]) + mn - xt[i];
		diff = use_mad ? vabs(diff) : diff * diff;
		best += wt[i] * diff;
	}
	for (int is = 0; nstep >= 1 && is <= nstep; is++) {
		iscale = (rmin + rdelta * is + nmax) / (mx - mn);
		vf sum_l = vsplat(0.0f), sum_l2 = vsplat(0.0f), sum_xl = vsplat(0.0f);
		for (int i = 0; i < n; i++) {
			lt[i] = vnearest(iscale * (xt[i] - mn), 0, nmax);
			const vf fl = vcvt(lt[i]);
			sum_l += wt[i] * fl;
			sum_l2 += wt[i] * fl * fl;
			sum_xl += wt[i] * fl * xt[i];
		}
		const vf D = sum_w * sum_l2 - sum_l * sum_l;
		vf this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
		vf this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
		const vi pos = this_min > 0;
		this_min = vsel(pos, vsplat(0.0f), this_min);
		this_scale = vsel(pos, sum_xl / sum_l2, this_scale);
		vf err = vsplat(0.0f);
		for (int i = 0; i < n; i++) {
			vf diff = this_scale * vcvt(lt[i]) + this_min - xt[i];
			diff = use_mad ? vabs(diff) : diff * diff;
			err += wt[i] * diff;
		}
		const vi take = (D > 0) & (err < best);
		for (int i = 0; i < n; i++) lbest[i] = vseli(take, lt[i], lbest[i]);
		best = vsel(take, err, best);
		scale = vsel(take, this_scale, scale);
		mn = vsel(take, this_min, mn);
	}
	scale = vsel(flat, vsplat(0.0f), scale);
	mn = vsel(flat, flat_min, mn);
	for (int g = 0; g < VL; g++) {
		scale_out[g] = scale[g];
		min_out[g] = -mn[g];
		for (int i = 0; i < n; i++) L[g * n + i] = (uint8_t)(flat[g] ? 0 : lbest[i][g]);
	}
}

// Q4_K/Q5_K: 8 pairs of 6-bit (scale, min) packed into 12 bytes.
static inline void k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
		*m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

static void k4_pack_scale_min(uint8_t *q, int j, uint8_t ls, uint8_t lm) {
	if (j < 4) {
		q[j] = ls;
		q[j + 4] = lm;
	} else {
		q[j + 4] = (uint8_t)((ls & 0x0f) | ((lm & 0x0f) << 4));
		q[j - 4] |= (uint8_t)((ls >> 4) << 6);
		q[j] |= (uint8_t)((lm >> 4) << 6);
	}
}

// Q3_K: 16 6-bit scales; low nibbles in bytes 0..7, high 2 bits in bytes 8..11.
static inline int k3_scale(const uint8_t *s, int j) {
	int lo = j < 8 ? s[j] & 0x0f : s[j - 8] >> 4;
	int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
	return lo | hi << 4;
}

// 2-bit codes of 128 elements packed as ggml does: byte l of a 32-byte group holds
// elements l, l+32, l+64, l+96 at bit offsets 0, 2, 4, 6.
static void pack_2bit(uint8_t *qs, const uint8_t *L) {
	for (int j = 0; j < QK_K; j += 128)
		for (int l = 0; l < 32; l++)
			qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 |
						  L[j + l + 96] << 6);
}

// ---- Q2_K: x = d*sc*q - dmin*m, 16 groups of 16 -----------------------------------------
void tensor_ref_dequant_q2_K(const void *src, float *y, int64_t n) {
	const block_q2_K *b = src;
	for (int64_t i = 0; i < n / QK_K; i++) {
		const float d = F16(b[i].d), dmin = F16(b[i].dmin);
		const uint8_t *q = b[i].qs;
		int is = 0;
		for (int half = 0; half < QK_K; half += 128, q += 32) {
			for (int shift = 0; shift < 8; shift += 2) {
				for (int g = 0; g < 2; g++) {
					const uint8_t sc = b[i].scales[is++];
					const float dl = d * (sc & 0x0f), ml = dmin * (sc >> 4);
					for (int l = 0; l < 16; l++)
						*y++ = dl * ((q[16 * g + l] >> shift) & 3) - ml;
				}
			}
		}
	}
}

void tensor_ref_quant_q2_K(const float *x, void *dst, int64_t n) { tensor_ref_quant_imp_q2_K(x, dst, n, NULL); }

void tensor_ref_quant_imp_q2_K(const float *x, void *dst, int64_t n, const float *imp) {
	block_q2_K *b = dst;
	uint8_t L[QK_K];
	float w[QK_K], mins[QK_K / 16], scales[QK_K / 16];
	const float q4scale = 15.0f;
	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		if (imp) quant_weights(x, imp + i * QK_K, QK_K, w);
		else
			for (int l = 0; l < QK_K; l++) w[l] = fabsf(x[l]);
		for (int h = 0; h < QK_K / 16; h += VL)
			fit_affine4(16, 3, x + 16 * h, w + 16 * h, L + 16 * h, scales + h, mins + h, -0.5f,
				    0.1f, 15, true);
		float max_scale = 0.0f, max_min = 0.0f;
		for (int j = 0; j < QK_K / 16; j++) {
			if (scales[j] > max_scale) max_scale = scales[j];
			if (mins[j] > max_min) max_min = mins[j];
		}
		if (max_scale > 0) {
			const float iscale = q4scale / max_scale;
			for (int j = 0; j < QK_K / 16; j++)
				b[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
			b[i].d = TO_F16(max_scale / q4scale);
		} else {
			memset(b[i].scales, 0, sizeof b[i].scales);
			b[i].d = TO_F16(0.0f);
		}
		if (max_min > 0) {
			const float iscale = q4scale / max_min;
			for (int j = 0; j < QK_K / 16; j++)
				b[i].scales[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
			b[i].dmin = TO_F16(max_min / q4scale);
		} else {
			b[i].dmin = TO_F16(0.0f);
		}
		// Requantize against the scales as stored.
		for (int j = 0; j < QK_K / 16; j++) {
			const float d = F16(b[i].d) * (b[i].scales[j] & 0x0f);
			if (!d) continue;
			const float dm = F16(b[i].dmin) * (b[i].scales[j] >> 4);
			for (int l = 0; l < 16; l++)
				L[16 * j + l] = (uint8_t)iclamp(nearest_int((x[16 * j + l] + dm) / d), 0, 3);
		}
		pack_2bit(b[i].qs, L);
	}
}

// ---- Q3_K: x = d*(sc-32)*(q-4), high bit of q in hmask ------------------------------------
void tensor_ref_dequant_q3_K(const void *src, float *y, int64_t n) {
	const block_q3_K *b = src;
	for (int64_t i = 0; i < n / QK_K; i++) {
		const float d_all = F16(b[i].d);
		const uint8_t *q = b[i].qs, *hm = b[i].hmask;
		uint8_t m = 1;
		int is = 0;
		for (int half = 0; half < QK_K; half += 128, q += 32) {
			for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
				for (int g = 0; g < 2; g++) {
					const float dl = d_all * (k3_scale(b[i].scales, is++) - 32);
					for (int l = 0; l < 16; l++) {
						const int k = 16 * g + l;
						*y++ = dl * (((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4));
					}
				}
			}
		}
	}
}

void tensor_ref_quant_q3_K(const float *x, void *dst, int64_t n) { tensor_ref_quant_imp_q3_K(x, dst, n, NULL); }

void tensor_ref_quant_imp_q3_K(const float *x, void *dst, int64_t n, const float *imp) {
	block_q3_K *b = dst;
	int8_t L[QK_K];
	float scales[QK_K / 16], wb[QK_K];
	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		float max_scale = 0.0f, amax = 0.0f;
		const float *wt = imp ? quant_weights(x, imp + i * QK_K, QK_K, wb) : NULL;
		for (int j = 0; j < QK_K / 16; j++) {
			scales[j] = fit_q3(16, 4, x + 16 * j, wt ? wt + 16 * j : NULL, L + 16 * j);
			if (fabsf(scales[j]) > amax) {
				amax = fabsf(scales[j]);
				max_scale = scales[j];
			}
		}
		memset(b[i].scales, 0, sizeof b[i].scales);
		if (max_scale) {
			const float iscale = -32.0f / max_scale;
			for (int j = 0; j < QK_K / 16; j++) {
				int l = iclamp((int8_t)nearest_int(iscale * scales[j]), -32, 31) + 32;
				if (j < 8) b[i].scales[j] = (uint8_t)(l & 0x0f);
				else b[i].scales[j - 8] |= (uint8_t)((l & 0x0f) << 4);
				b[i].scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
			}
			b[i].d = TO_F16(1 / iscale);
		} else {
			b[i].d = TO_F16(0.0f);
		}
		for (int j = 0; j < QK_K / 16; j++) {
			const float d = F16(b[i].d) * (k3_scale(b[i].scales, j) - 32);
			if (!d) continue;
			for (int l = 0; l < 16; l++)
				L[16 * j + l] = (int8_t)(iclamp(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
		}
		// High bits: element j goes to hmask[j % 32], bit j / 32.
		memset(b[i].hmask, 0, sizeof b[i].hmask);
		uint8_t low[QK_K];
		for (int j = 0; j < QK_K; j++) {
			int l = L[j];
			if (l > 3) {
				b[i].hmask[j % 32] |= (uint8_t)(1u << (j / 32));
				l -= 4;
			}
			low[j] = (uint8_t)l;
		}
		pack_2bit(b[i].qs, low);
	}
}

// ---- Q4_K: x = d*sc*q - dmin*m, 8 groups of 32 ---------------------------------------------
void tensor_ref_dequant_q4_K(const void *src, float *y, int64_t n) {
	const block_q4_K *b = src;
	for (int64_t i = 0; i < n / QK_K; i++) {
		const float d = F16(b[i].d), dmin = F16(b[i].dmin);
		const uint8_t *q = b[i].qs;
		for (int is = 0; is < QK_K / 32; is += 2, q += 32) {
			uint8_t sc, m;
			k4_scale_min(is, b[i].scales, &sc, &m);
			const float d1 = d * sc, m1 = dmin * m;
			k4_scale_min(is + 1, b[i].scales, &sc, &m);
			const float d2 = d * sc, m2 = dmin * m;
			for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0x0f) - m1;
			for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
		}
	}
}

// Q4_K and Q5_K share the search for 8 (scale, min) pairs and their 6-bit packing; the
// final codes L (0..nmax) are computed against the stored scales.
static void quant_k_affine(const float *x, const float *imp, uint16_t *d_out, uint16_t *dmin_out, uint8_t *packed,
			   uint8_t *L, int nmax, float rmin, float rdelta, int nstep) {
	float w[QK_K], mins[QK_K / 32], scales[QK_K / 32];
	if (imp) quant_weights(x, imp, QK_K, w);
	for (int j = 0; !imp && j < QK_K / 32; j++) {
		float sum_x2 = 0.0f;
		for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
		const float av_x = sqrtf(sum_x2 / 32);
		for (int l = 0; l < 32; l++) w[32 * j + l] = av_x + fabsf(x[32 * j + l]);
	}
	for (int h = 0; h < QK_K / 32; h += VL)
		fit_affine4(32, nmax, x + 32 * h, w + 32 * h, L + 32 * h, scales + h, mins + h, rmin,
			    rdelta, nstep, false);
	float max_scale = 0.0f, max_min = 0.0f;
	for (int j = 0; j < QK_K / 32; j++) {
		if (scales[j] > max_scale) max_scale = scales[j];
		if (mins[j] > max_min) max_min = mins[j];
	}
	const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
	const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
	for (int j = 0; j < QK_K / 32; j++) {
		uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
		uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
		k4_pack_scale_min(packed, j, ls < 63 ? ls : 63, lm < 63 ? lm : 63);
	}
	*d_out = TO_F16(max_scale / 63.0f);
	*dmin_out = TO_F16(max_min / 63.0f);
	for (int j = 0; j < QK_K / 32; j++) {
		uint8_t sc, m;
		k4_scale_min(j, packed, &sc, &m);
		const float d = F16(*d_out) * sc;
		if (!d) continue;
		const float dm = F16(*dmin_out) * m;
		for (int l = 0; l < 32; l++)
			L[32 * j + l] = (uint8_t)iclamp(nearest_int((x[32 * j + l] + dm) / d), 0, nmax);
	}
}

void tensor_ref_quant_q4_K(const float *x, void *dst, int64_t n) { tensor_ref_quant_imp_q4_K(x, dst, n, NULL); }

void tensor_ref_quant_imp_q4_K(const float *x, void *dst, int64_t n, const float *imp) {
	block_q4_K *b = dst;
	uint8_t L[QK_K];
	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		memset(b[i].scales, 0, sizeof b[i].scales);
		quant_k_affine(x, imp ? imp + i * QK_K : NULL, &b[i].d, &b[i].dmin, b[i].scales, L, 15, -1.0f, 0.1f, 20);
		uint8_t *q = b[i].qs;
		for (int j = 0; j < QK_K; j += 64, q += 32)
			for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
	}
}

// ---- Q5_K: as Q4_K with a 5th bit per element in qh ---------------------------------------
void tensor_ref_dequant_q5_K(const void *src, float *y, int64_t n) {
	const block_q5_K *b = src;
	for (int64_t i = 0; i < n / QK_K; i++) {
		const float d = F16(b[i].d), dmin = F16(b[i].dmin);
		const uint8_t *ql = b[i].qs, *qh = b[i].qh;
		uint8_t u1 = 1, u2 = 2;
		for (int is = 0; is < QK_K / 32; is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
			uint8_t sc, m;
			k4_scale_min(is, b[i].scales, &sc, &m);
			const float d1 = d * sc, m1 = dmin * m;
			k4_scale_min(is + 1, b[i].scales, &sc, &m);
			const float d2 = d * sc, m2 = dmin * m;
			for (int l = 0; l < 32; l++) *y++ = d1 * ((ql[l] & 0x0f) + (qh[l] & u1 ? 16 : 0)) - m1;
			for (int l = 0; l < 32; l++) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
		}
	}
}

void tensor_ref_quant_q5_K(const float *x, void *dst, int64_t n) { tensor_ref_quant_imp_q5_K(x, dst, n, NULL); }

void tensor_ref_quant_imp_q5_K(const float *x, void *dst, int64_t n, const float *imp) {
	block_q5_K *b = dst;
	uint8_t L[QK_K];
	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		memset(b[i].scales, 0, sizeof b[i].scales);
		quant_k_affine(x, imp ? imp + i * QK_K : NULL, &b[i].d, &b[i].dmin, b[i].scales, L, 31, -0.5f, 0.1f, 15);
		memset(b[i].qh, 0, sizeof b[i].qh);
		uint8_t *ql = b[i].qs;
		uint8_t m1 = 1, m2 = 2;
		for (int j = 0; j < QK_K; j += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
			for (int l = 0; l < 32; l++) {
				int l1 = L[j + l], l2 = L[j + l + 32];
				if (l1 > 15) l1 -= 16, b[i].qh[l] |= m1;
				if (l2 > 15) l2 -= 16, b[i].qh[l] |= m2;
				ql[l] = (uint8_t)(l1 | l2 << 4);
			}
		}
	}
}

// ---- Q6_K: x = d*sc*(q-32), 16 groups of 16 with int8 scales -------------------------------
void tensor_ref_dequant_q6_K(const void *src, float *y, int64_t n) {
	const block_q6_K *b = src;
	for (int64_t i = 0; i < n / QK_K; i++) {
		const float d = F16(b[i].d);
		const uint8_t *ql = b[i].ql, *qh = b[i].qh;
		const int8_t *sc = b[i].scales;
		for (int half = 0; half < QK_K; half += 128, y += 128, ql += 64, qh += 32, sc += 8) {
			for (int l = 0; l < 32; l++) {
				const int is = l / 16;
				const int q1 = ((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
				const int q2 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
				const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
				const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
				y[l] = d * sc[is] * q1;
				y[l + 32] = d * sc[is + 2] * q2;
				y[l + 64] = d * sc[is + 4] * q3;
				y[l + 96] = d * sc[is + 6] * q4;
			}
		}
	}
}

void tensor_ref_quant_q6_K(const float *x, void *dst, int64_t n) { tensor_ref_quant_imp_q6_K(x, dst, n, NULL); }

void tensor_ref_quant_imp_q6_K(const float *x, void *dst, int64_t n, const float *imp) {
	block_q6_K *b = dst;
	int8_t L[QK_K];
	float scales[QK_K / 16], wb[QK_K];
	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		const float *wt = imp ? quant_weights(x, imp + i * QK_K, QK_K, wb) : NULL;
		for (int h = 0; h < QK_K / 16; h += VL)
			fit_symmetric4(16, 32, x + 16 * h, wt ? wt + 16 * h : NULL, L + 16 * h, scales + h);
		float max_scale = 0.0f, amax = 0.0f;
		for (int j = 0; j < QK_K / 16; j++) {
			if (fabsf(scales[j]) > amax) {
				amax = fabsf(scales[j]);
				max_scale = scales[j];
			}
		}
		if (amax < GROUP_EPS) {
			memset(&b[i], 0, sizeof b[i]);
			continue;
		}
		const float iscale = -128.0f / max_scale;
		b[i].d = TO_F16(1 / iscale);
		for (int j = 0; j < QK_K / 16; j++)
			b[i].scales[j] = (int8_t)imin(127, nearest_int(iscale * scales[j]));
		for (int j = 0; j < QK_K / 16; j++) {
			const float d = F16(b[i].d) * b[i].scales[j];
			if (!d) continue;
			for (int l = 0; l < 16; l++)
				L[16 * j + l] = (int8_t)(iclamp(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
		}
		uint8_t *ql = b[i].ql, *qh = b[i].qh;
		for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
			for (int l = 0; l < 32; l++) {
				const int a = L[j + l], c = L[j + l + 32], e = L[j + l + 64], f = L[j + l + 96];
				ql[l] = (uint8_t)((a & 0x0f) | (e & 0x0f) << 4);
				ql[l + 32] = (uint8_t)((c & 0x0f) | (f & 0x0f) << 4);
				qh[l] = (uint8_t)((a >> 4) | (c >> 4) << 2 | (e >> 4) << 4 | (f >> 4) << 6);
			}
		}
	}
}

// ---- Q8_K: x = d*q, float scale, sums per 16 for the K-quant dot products ----------------
void tensor_ref_dequant_q8_K(const void *src, float *y, int64_t n) {
	const block_q8_K *b = src;
	for (int64_t i = 0; i < n / QK_K; i++, y += QK_K)
		for (int j = 0; j < QK_K; j++) y[j] = b[i].d * b[i].qs[j];
}

void tensor_ref_quant_q8_K(const float *x, void *dst, int64_t n) {
	block_q8_K *b = dst;
	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		float amax = 0.0f, max = 0.0f;
		for (int j = 0; j < QK_K; j++) {
			if (fabsf(x[j]) > amax) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		}
		if (!amax) {
			memset(&b[i], 0, sizeof b[i]);
			continue;
		}
		// -127 (not -128) keeps every code in [-127, 127].
		const float iscale = -127.0f / max;
		for (int j = 0; j < QK_K; j++) b[i].qs[j] = (int8_t)imin(127, nearest_int(iscale * x[j]));
		for (int j = 0; j < QK_K / 16; j++) {
			int sum = 0;
			for (int l = 0; l < 16; l++) sum += b[i].qs[16 * j + l];
			b[i].bsums[j] = (int16_t)sum;
		}
		b[i].d = 1 / iscale;
	}
}
