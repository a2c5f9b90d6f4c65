// tensor/ref/quant_iq3: reference quantize and dequantize of the 3-bit grid types — IQ3_XXS
// (an 8-bit index per 4 elements into a grid of 256, 7 signs per 8 with the 8th from parity,
// a 4-bit scale per 32: 3.06 bits per weight) and IQ3_S (9-bit indices into a grid of 512,
// every sign stored, a 4-bit scale per 32: 3.44 bits per weight).
#include "tensor/ref/quants.h"

#include <string.h>

#define F16(x) tensor_f16_to_f32(x)
#define TO_F16(x) tensor_f32_to_f16(x)

// Element j of a 4-element grid point.
static inline int g4(const uint32_t *grid, int idx, int j) { return (int)(grid[idx] >> 8 * j & 0xff); }

// The largest sub-block scale over 8 sub-blocks.
static float smax8(const float s[8]) {
	float m = 0.0f;
	for (int ib = 0; ib < 8; ib++) m = s[ib] > m ? s[ib] : m;
	return m;
}

// ---- IQ3_XXS: x = d * (2 ls + 1) / 4 * grid * sign -------------------------------------------
static const iq_grid grid_iq3xxs_tab = {tensor_iq3xxs_grid, 256, 4, 4, false, 8, {4, 12, 20, 28, 36, 44, 52, 62}, 0.0f, NULL};

void tensor_ref_dequant_iq3_xxs(const void *src, float *y, int64_t n) {
	const block_iq3_xxs *b = src;
	for (int64_t i = 0; i < n / QK_K; i++) {
		const float d = F16(b[i].d);
		for (int ib = 0; ib < QK_K / 32; ib++, y += 32) {
			const uint32_t aux = tensor_rd_u32(b[i].qs + QK_K / 4 + 4 * ib);
			const float dl = d * (float)(2 * (aux >> 28) + 1) * 0.25f;
			for (int l = 0; l < 4; l++) {
				const uint8_t sg = tensor_iq_signs(aux >> 7 * l);
				for (int j = 0; j < 8; j++) {
					const int g = g4(tensor_iq3xxs_grid, b[i].qs[8 * ib + 2 * l + j / 4], j % 4);
					y[8 * l + j] = dl * (float)(sg >> j & 1 ? -g : g);
				}
			}
		}
	}
}

void tensor_ref_quant_iq3_xxs(const float *x, void *dst, int64_t n) { tensor_ref_quant_imp_iq3_xxs(x, dst, n, NULL); }

void tensor_ref_quant_imp_iq3_xxs(const float *x, void *dst, int64_t n, const float *imp) {
	iq_grid gr = grid_iq3xxs_tab;
	float pts[256 * 4];
	iq_expand(&gr, pts);
	block_iq3_xxs *b = dst;
	float a[QK_K], s[8], gain, wb[QK_K];
	uint8_t sg[QK_K / 8];
	int idx[8];
	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		const float *wt = iq_weights(x, imp ? imp + i * QK_K : NULL, wb);
		for (int k = 0; k < QK_K / 8; k++) sg[k] = iq_signs8(x + 8 * k, wt ? wt + 8 * k : NULL, true, a + 8 * k);
		for (int ib = 0; ib < 8; ib++) s[ib] = iq_fit(&gr, a + 32 * ib, wt ? wt + 32 * ib : NULL, 8, NULL, &gain);
		// the largest sub-block scale at the top of the 4-bit range, 31 / 4
		b[i].d = TO_F16(smax8(s) / (31.0f * 0.25f));
		const float d = F16(b[i].d);
		for (int ib = 0; ib < 8; ib++) {
			const int ls = iq_pick_ls(&gr, a + 32 * ib, wt ? wt + 32 * ib : NULL, 8, NULL, s[ib], d, 0.25f, 16, idx);
			uint32_t aux = (uint32_t)ls << 28;
			for (int k = 0; k < 8; k++) b[i].qs[8 * ib + k] = (uint8_t)idx[k];
			for (int l = 0; l < 4; l++) aux |= (uint32_t)(sg[4 * ib + l] & 127) << 7 * l;
			tensor_wr_u32(b[i].qs + QK_K / 4 + 4 * ib, aux);
		}
	}
}

// ---- IQ3_S: x = d * (2 ls + 1) * grid * sign -------------------------------------------------
static const iq_grid grid_iq3s_tab = {tensor_iq3s_grid, 512, 4, 4, false, 8, {1, 3, 5, 7, 9, 11, 13, 15}, 0.0f, NULL};

void tensor_ref_dequant_iq3_s(const void *src, float *y, int64_t n) {
	const block_iq3_s *b = src;
	for (int64_t i = 0; i < n / QK_K; i++) {
		const float d = F16(b[i].d);
		for (int ib = 0; ib < QK_K / 32; ib++, y += 32) {
			const float dl = d * (float)(2 * (b[i].scales[ib / 2] >> 4 * (ib % 2) & 15) + 1);
			for (int j = 0; j < 32; j++) {
				const int k = j / 4, idx = b[i].qs[8 * ib + k] | (b[i].qh[ib] >> k & 1) << 8;
				const int g = g4(tensor_iq3s_grid, idx, j % 4);
				y[j] = dl * (float)(b[i].signs[4 * ib + j / 8] >> (j % 8) & 1 ? -g : g);
			}
		}
	}
}

void tensor_ref_quant_iq3_s(const float *x, void *dst, int64_t n) { tensor_ref_quant_imp_iq3_s(x, dst, n, NULL); }

void tensor_ref_quant_imp_iq3_s(const float *x, void *dst, int64_t n, const float *imp) {
	iq_grid gr = grid_iq3s_tab;
	float pts[512 * 4];
	iq_expand(&gr, pts);
	block_iq3_s *b = dst;
	float a[QK_K], s[8], gain, wb[QK_K];
	int idx[8];
	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		const float *wt = iq_weights(x, imp ? imp + i * QK_K : NULL, wb);
		memset(b[i].qh, 0, sizeof b[i].qh);
		memset(b[i].scales, 0, sizeof b[i].scales);
		for (int k = 0; k < QK_K / 8; k++) b[i].signs[k] = iq_signs8(x + 8 * k, NULL, false, a + 8 * k);
		for (int ib = 0; ib < 8; ib++) s[ib] = iq_fit(&gr, a + 32 * ib, wt ? wt + 32 * ib : NULL, 8, NULL, &gain);
		b[i].d = TO_F16(smax8(s) / 31.0f);
		const float d = F16(b[i].d);
		for (int ib = 0; ib < 8; ib++) {
			const int ls = iq_pick_ls(&gr, a + 32 * ib, wt ? wt + 32 * ib : NULL, 8, NULL, s[ib], d, 1.0f, 16, idx);
			b[i].scales[ib / 2] |= (uint8_t)(ls << 4 * (ib % 2));
			for (int k = 0; k < 8; k++) {
				b[i].qs[8 * ib + k] = (uint8_t)idx[k];
				b[i].qh[ib] |= (uint8_t)((idx[k] >> 8) << k);
			}
		}
	}
}
