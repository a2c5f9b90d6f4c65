// tensor/ref/quant_iq2: reference quantize and dequantize of the 2-bit grid types, whose
// groups of 8 elements name points of grids of magnitudes 8, 25 and 43 under a scale
// d (2 ls + 1) / 8 — IQ2_XXS (256 points, 7 signs per 8 with the 8th from parity, ls per 32:
// 2.06 bits per weight), IQ2_XS (512 points, the same signs, ls per 16: 2.31) and IQ2_S
// (1024 points, every sign stored, ls per 16: 2.56).
#include "tensor/ref/quants.h"

#include <string.h>

#define F16(x) tensor_f16_to_f32(x)
#define TO_F16(x) tensor_f32_to_f16(x)

// Element j of an 8-element grid point, with the sign bit j of sg.
static inline float g8(const uint64_t *grid, int idx, int j, uint8_t sg) {
	const int g = (int)(grid[idx] >> 8 * j & 0xff);
	return (float)(sg >> j & 1 ? -g : g);
}

static const iq_grid grid_iq2xxs_tab = {tensor_iq2xxs_grid, 256, 8, 8, false, 3, {8, 25, 43}, 0.0f, NULL};
static const iq_grid grid_iq2xs_tab = {tensor_iq2xs_grid, 512, 8, 8, false, 3, {8, 25, 43}, 0.0f, NULL};
static const iq_grid grid_iq2s_tab = {tensor_iq2s_grid, 1024, 8, 8, false, 3, {8, 25, 43}, 0.0f, NULL};

// One block's signs (sg, a byte per 8; the count made even with parity) and targets a, its
// sub-blocks of `sub` elements fitted, and d (fp16): the largest sub-block scale at the top of
// the 4-bit range, 31 / 8. Each sub-block's ls into ls[], its points into idx (one per 8).
static uint16_t iq2_block(const iq_grid *tab, const float *x, const float *imp, int sub, bool parity, uint8_t sg[QK_K / 8], int ls[16],
			  int idx[QK_K / 8]) {
	iq_grid g = *tab;
	float pts[1024 * 8], a[QK_K], s[16], smax = 0.0f, gain, wb[QK_K];
	const iq_grid *gr = &g;
	iq_expand(&g, pts);
	const float *wt = iq_weights(x, imp, wb);
	const int ns = QK_K / sub, ng = sub / 8;
	for (int k = 0; k < QK_K / 8; k++) sg[k] = iq_signs8(x + 8 * k, wt ? wt + 8 * k : NULL, parity, a + 8 * k);
	for (int b = 0; b < ns; b++) {
		s[b] = iq_fit(gr, a + sub * b, wt ? wt + sub * b : NULL, ng, NULL, &gain);
		smax = s[b] > smax ? s[b] : smax;
	}
	const uint16_t dh = TO_F16(smax / (31.0f * 0.125f));
	for (int b = 0; b < ns; b++) ls[b] = iq_pick_ls(gr, a + sub * b, wt ? wt + sub * b : NULL, ng, NULL, s[b], F16(dh), 0.125f, 16, idx + ng * b);
	return dh;
}

// ---- IQ2_XXS ---------------------------------------------------------------------------------
void tensor_ref_dequant_iq2_xxs(const void *src, float *y, int64_t n) {
	const block_iq2_xxs *b = src;
	for (int64_t i = 0; i < n / QK_K; i++) {
		const float d = F16(b[i].d);
		for (int ib = 0; ib < QK_K / 32; ib++) {
			const uint32_t aux = tensor_rd_u32(b[i].qs + 8 * ib + 4);
			const float dl = d * (float)(2 * (aux >> 28) + 1) * 0.125f;
			for (int l = 0; l < 4; l++, y += 8) {
				const uint8_t sg = tensor_iq_signs(aux >> 7 * l);
				for (int j = 0; j < 8; j++) y[j] = dl * g8(tensor_iq2xxs_grid, b[i].qs[8 * ib + l], j, sg);
			}
		}
	}
}

void tensor_ref_quant_iq2_xxs(const float *x, void *dst, int64_t n) { tensor_ref_quant_imp_iq2_xxs(x, dst, n, NULL); }

void tensor_ref_quant_imp_iq2_xxs(const float *x, void *dst, int64_t n, const float *imp) {
	block_iq2_xxs *b = dst;
	uint8_t sg[QK_K / 8];
	int ls[16], idx[QK_K / 8];
	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		b[i].d = iq2_block(&grid_iq2xxs_tab, x, imp ? imp + i * QK_K : NULL, 32, true, sg, ls, idx);
		for (int ib = 0; ib < QK_K / 32; ib++) {
			uint32_t aux = (uint32_t)ls[ib] << 28;
			for (int l = 0; l < 4; l++) {
				b[i].qs[8 * ib + l] = (uint8_t)idx[4 * ib + l];
				aux |= (uint32_t)(sg[4 * ib + l] & 127) << 7 * l;
			}
			for (int k = 0; k < 4; k++) b[i].qs[8 * ib + 4 + k] = (uint8_t)(aux >> 8 * k);
		}
	}
}

// ---- IQ2_XS ----------------------------------------------------------------------------------
// The 4-bit scale of sub-block h (0, 1) of 32-block ib.
static inline int ls16(const uint8_t *scales, int ib, int h) { return scales[ib] >> 4 * h & 15; }

void tensor_ref_dequant_iq2_xs(const void *src, float *y, int64_t n) {
	const block_iq2_xs *b = src;
	for (int64_t i = 0; i < n / QK_K; i++) {
		const float d = F16(b[i].d);
		for (int k = 0; k < QK_K / 8; k++, y += 8) {
			const int v = b[i].qs[2 * k] | b[i].qs[2 * k + 1] << 8;
			const float dl = d * (float)(2 * ls16(b[i].scales, k / 4, k % 4 / 2) + 1) * 0.125f;
			for (int j = 0; j < 8; j++) y[j] = dl * g8(tensor_iq2xs_grid, v & 511, j, tensor_iq_signs((uint32_t)v >> 9));
		}
	}
}

void tensor_ref_quant_iq2_xs(const float *x, void *dst, int64_t n) { tensor_ref_quant_imp_iq2_xs(x, dst, n, NULL); }

void tensor_ref_quant_imp_iq2_xs(const float *x, void *dst, int64_t n, const float *imp) {
	block_iq2_xs *b = dst;
	uint8_t sg[QK_K / 8];
	int ls[16], idx[QK_K / 8];
	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		b[i].d = iq2_block(&grid_iq2xs_tab, x, imp ? imp + i * QK_K : NULL, 16, true, sg, ls, idx);
		for (int ib = 0; ib < QK_K / 32; ib++) b[i].scales[ib] = (uint8_t)(ls[2 * ib] | ls[2 * ib + 1] << 4);
		for (int k = 0; k < QK_K / 8; k++) {
			const int v = idx[k] | (sg[k] & 127) << 9;
			b[i].qs[2 * k] = (uint8_t)v, b[i].qs[2 * k + 1] = (uint8_t)(v >> 8);
		}
	}
}

// ---- IQ2_S -----------------------------------------------------------------------------------
void tensor_ref_dequant_iq2_s(const void *src, float *y, int64_t n) {
	const block_iq2_s *b = src;
	for (int64_t i = 0; i < n / QK_K; i++) {
		const float d = F16(b[i].d);
		for (int k = 0; k < QK_K / 8; k++, y += 8) {
			const int ib = k / 4, idx = b[i].qs[k] | (b[i].qh[ib] >> 2 * (k % 4) & 3) << 8;
			const float dl = d * (float)(2 * ls16(b[i].scales, ib, k % 4 / 2) + 1) * 0.125f;
			for (int j = 0; j < 8; j++) y[j] = dl * g8(tensor_iq2s_grid, idx, j, b[i].qs[QK_K / 8 + k]);
		}
	}
}

void tensor_ref_quant_iq2_s(const float *x, void *dst, int64_t n) { tensor_ref_quant_imp_iq2_s(x, dst, n, NULL); }

void tensor_ref_quant_imp_iq2_s(const float *x, void *dst, int64_t n, const float *imp) {
	block_iq2_s *b = dst;
	int ls[16], idx[QK_K / 8];
	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		b[i].d = iq2_block(&grid_iq2s_tab, x, imp ? imp + i * QK_K : NULL, 16, false, b[i].qs + QK_K / 8, ls, idx);
		memset(b[i].qh, 0, sizeof b[i].qh);
		for (int ib = 0; ib < QK_K / 32; ib++) b[i].scales[ib] = (uint8_t)(ls[2 * ib] | ls[2 * ib + 1] << 4);
		for (int k = 0; k < QK_K / 8; k++) {
			b[i].qs[k] = (uint8_t)idx[k];
			b[i].qh[k / 4] |= (uint8_t)((idx[k] >> 8) << 2 * (k % 4));
		}
	}
}
