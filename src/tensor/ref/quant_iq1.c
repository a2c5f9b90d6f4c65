// tensor/ref/quant_iq1: reference quantize and dequantize of the 1-bit grid types, whose groups
// of 8 elements name points of a grid of 2048 with elements -1, 0, 1, shifted by +-1/8 —
// IQ1_S (a 3-bit scale and the shift per 32: 1.56 bits per weight) and IQ1_M (3-bit scales per
// 16, the shift per 8, d spread over the scales' top nibbles: 1.75).
#include "tensor/ref/quants.h"

#include <string.h>

#define F16(x) tensor_f16_to_f32(x)
#define TO_F16(x) tensor_f32_to_f16(x)

#define IQ1_DELTA 0.125f

// Element j of grid point idx.
static inline float g1(int idx, int j) { return (float)(int8_t)(tensor_iq1s_grid[idx] >> 8 * j); }

// The distinct magnitudes of grid + shift.
static const iq_grid grid_iq1_tab = {tensor_iq1s_grid, 2048, 8, 8, true, 3, {0.125f, 0.875f, 1.125f}, 0.0f, NULL};

// Fitted scales of sub-blocks of `sub` elements (the shift per sub-block, ds[b], when the grid
// does not pick one per group) and d: the largest at the top of the 3-bit range, 15.
static float iq1_fit(const iq_grid *gr, const float *x, const float *wt, int sub, float s[16], float ds[16]) {
	float smax = 0.0f;
	for (int b = 0; b < QK_K / sub; b++) {
		float gp, gm, dp[4], dm[4];
		for (int k = 0; k < sub / 8; k++) dp[k] = IQ1_DELTA, dm[k] = -IQ1_DELTA;
		const float *w = wt ? wt + sub * b : NULL;
		const float sp = iq_fit(gr, x + sub * b, w, sub / 8, dp, &gp);
		const float sm = gr->pick != 0.0f ? 0.0f : iq_fit(gr, x + sub * b, w, sub / 8, dm, &gm);
		const bool neg = gr->pick == 0.0f && gm > gp;
		s[b] = neg ? sm : sp, ds[b] = neg ? -IQ1_DELTA : IQ1_DELTA;
		smax = s[b] > smax ? s[b] : smax;
	}
	return smax / 15.0f;
}

// ---- IQ1_S -----------------------------------------------------------------------------------
void tensor_ref_dequant_iq1_s(const void *src, float *y, int64_t n) {
	const block_iq1_s *b = src;
	for (int64_t i = 0; i < n / QK_K; i++) {
		const float d = F16(b[i].d);
		for (int ib = 0; ib < QK_K / 32; ib++) {
			const int qh = b[i].qh[2 * ib] | b[i].qh[2 * ib + 1] << 8;
			const float dl = d * (float)(2 * (qh >> 12 & 7) + 1), delta = qh & 0x8000 ? -IQ1_DELTA : IQ1_DELTA;
			for (int l = 0; l < 4; l++, y += 8) {
				const int idx = b[i].qs[4 * ib + l] | (qh >> 3 * l & 7) << 8;
				for (int j = 0; j < 8; j++) y[j] = dl * (g1(idx, j) + delta);
			}
		}
	}
}

void tensor_ref_quant_iq1_s(const float *x, void *dst, int64_t n) { tensor_ref_quant_imp_iq1_s(x, dst, n, NULL); }

void tensor_ref_quant_imp_iq1_s(const float *x, void *dst, int64_t n, const float *imp) {
	block_iq1_s *b = dst;
	iq_grid gr = grid_iq1_tab;
	float pts[2048 * 8], s[16], ds[16], wb[QK_K];
	int idx[4];
	iq_expand(&gr, pts);
	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		const float *wt = iq_weights(x, imp ? imp + i * QK_K : NULL, wb);
		b[i].d = TO_F16(iq1_fit(&gr, x, wt, 32, s, ds));
		const float d = F16(b[i].d);
		for (int ib = 0; ib < QK_K / 32; ib++) {
			const float dl[4] = {ds[ib], ds[ib], ds[ib], ds[ib]};
			const int ls = iq_pick_ls(&gr, x + 32 * ib, wt ? wt + 32 * ib : NULL, 4, dl, s[ib], d, 1.0f, 8, idx);
			int qh = ls << 12 | (ds[ib] < 0.0f) << 15;
			for (int l = 0; l < 4; l++) b[i].qs[4 * ib + l] = (uint8_t)idx[l], qh |= (idx[l] >> 8) << 3 * l;
			b[i].qh[2 * ib] = (uint8_t)qh, b[i].qh[2 * ib + 1] = (uint8_t)(qh >> 8);
		}
	}
}

// ---- IQ1_M -----------------------------------------------------------------------------------
void tensor_ref_dequant_iq1_m(const void *src, float *y, int64_t n) {
	const block_iq1_m *b = src;
	for (int64_t i = 0; i < n / QK_K; i++) {
		uint16_t sc[4];
		tensor_iq1m_scales(&b[i], sc);
		const float d = F16(tensor_iq1m_d(sc));
		for (int k = 0; k < QK_K / 8; k++, y += 8) {
			const int ib = k / 4, q = b[i].qh[k / 2] >> 4 * (k % 2), idx = b[i].qs[k] | (q & 7) << 8;
			const int ls = sc[ib / 2] >> (6 * (ib % 2) + 3 * (k % 4 / 2)) & 7;
			const float dl = d * (float)(2 * ls + 1), delta = q & 8 ? -IQ1_DELTA : IQ1_DELTA;
			for (int j = 0; j < 8; j++) y[j] = dl * (g1(idx, j) + delta);
		}
	}
}

void tensor_ref_quant_iq1_m(const float *x, void *dst, int64_t n) { tensor_ref_quant_imp_iq1_m(x, dst, n, NULL); }

void tensor_ref_quant_imp_iq1_m(const float *x, void *dst, int64_t n, const float *imp) {
	block_iq1_m *b = dst;
	iq_grid gr = grid_iq1_tab;
	float pts[2048 * 8], s[16], ds[16], wb[QK_K];
	int idx[2];
	gr.pick = IQ1_DELTA;
	iq_expand(&gr, pts);
	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		const float *wt = iq_weights(x, imp ? imp + i * QK_K : NULL, wb);
		const uint16_t dh = TO_F16(iq1_fit(&gr, x, wt, 16, s, ds));
		const float d = F16(dh);
		uint16_t sc[4] = {0, 0, 0, 0};
		memset(b[i].qh, 0, sizeof b[i].qh);
		for (int h = 0; h < 16; h++) {
			const int ls = iq_pick_ls(&gr, x + 16 * h, wt ? wt + 16 * h : NULL, 2, NULL, s[h], d, 1.0f, 8, idx);
			sc[h / 4] |= (uint16_t)(ls << 3 * (h % 4));
			for (int l = 0; l < 2; l++) {
				const int k = 2 * h + l, q = (idx[l] >> 8 & 7) | (idx[l] & IQ_NEG_PICK ? 8 : 0);
				b[i].qs[k] = (uint8_t)idx[l];
				b[i].qh[k / 2] |= (uint8_t)(q << 4 * (k % 2));
			}
		}
		// d's nibbles on top of the four u16
		for (int k = 0; k < 4; k++) {
			sc[k] |= (uint16_t)((dh >> 4 * k & 15) << 12);
			b[i].scales[2 * k] = (uint8_t)sc[k], b[i].scales[2 * k + 1] = (uint8_t)(sc[k] >> 8);
		}
	}
}
