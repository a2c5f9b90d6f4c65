// tensor/codes: one block of a quantized row decoded to unsigned codes and its scale data —
// what the x86 sets repack and what the reference's 8-bit activation width multiplies, so
// both read every format the same way. Plain C.
#include "tensor/kern.h"

#include <string.h>

static void dec_q4_0(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_q4_0 *x = (const block_q4_0 *)b;
	for (int e = 0; e < 16; e++) o->u[e] = x->qs[e] & 15, o->u[e + 16] = x->qs[e] >> 4;
	o->d = x->d;
}

static void dec_q4_1(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_q4_1 *x = (const block_q4_1 *)b;
	for (int e = 0; e < 16; e++) o->u[e] = x->qs[e] & 15, o->u[e + 16] = x->qs[e] >> 4;
	o->d = x->d, o->m = x->m;
}

static void dec_q5_0(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_q5_0 *x = (const block_q5_0 *)b;
	const uint32_t qh = (uint32_t)x->qh[0] | (uint32_t)x->qh[1] << 8 | (uint32_t)x->qh[2] << 16 | (uint32_t)x->qh[3] << 24;
	for (int e = 0; e < 16; e++) o->u[e] = x->qs[e] & 15, o->u[e + 16] = x->qs[e] >> 4;
	for (int e = 0; e < 32; e++) o->u[e] |= (uint8_t)(((qh >> e) & 1) << 4);
	o->d = x->d;
}

static void dec_q5_1(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_q5_1 *x = (const block_q5_1 *)b;
	const uint32_t qh = (uint32_t)x->qh[0] | (uint32_t)x->qh[1] << 8 | (uint32_t)x->qh[2] << 16 | (uint32_t)x->qh[3] << 24;
	for (int e = 0; e < 16; e++) o->u[e] = x->qs[e] & 15, o->u[e + 16] = x->qs[e] >> 4;
	for (int e = 0; e < 32; e++) o->u[e] |= (uint8_t)(((qh >> e) & 1) << 4);
	o->d = x->d, o->m = x->m;
}

static void dec_q8_0(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_q8_0 *x = (const block_q8_0 *)b;
	for (int e = 0; e < 32; e++) o->u[e] = (uint8_t)x->qs[e] ^ (q8u ? 0x80 : 0);
	o->d = x->d;
}

void kern_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
		*m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

static void dec_q4_K(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_q4_K *x = (const block_q4_K *)b;
	for (int j = 0; j < 8; j++) {
		kern_k4_scale_min(j, x->scales, &o->sc[j], &o->mn[j]);
		for (int e = 0; e < 32; e++) {
			const uint8_t q = x->qs[32 * (j / 2) + e];
			o->u[32 * j + e] = j & 1 ? q >> 4 : q & 15;
		}
	}
	o->d = x->d, o->m = x->dmin;
}

static void dec_q5_K(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_q5_K *x = (const block_q5_K *)b;
	for (int j = 0; j < 8; j++) {
		kern_k4_scale_min(j, x->scales, &o->sc[j], &o->mn[j]);
		for (int e = 0; e < 32; e++) {
			const uint8_t q = x->qs[32 * (j / 2) + e];
			o->u[32 * j + e] = (uint8_t)((j & 1 ? q >> 4 : q & 15) | ((x->qh[e] >> j) & 1) << 4);
		}
	}
	o->d = x->d, o->m = x->dmin;
}

static void dec_q6_K(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_q6_K *x = (const block_q6_K *)b;
	for (int hh = 0; hh < 2; hh++) {
		const uint8_t *ql = x->ql + 64 * hh, *qh = x->qh + 32 * hh;
		uint8_t *u = o->u + 128 * hh;
		for (int l = 0; l < 32; l++) {
			u[l] = (uint8_t)((ql[l] & 15) | (qh[l] & 3) << 4);
			u[l + 32] = (uint8_t)((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4);
			u[l + 64] = (uint8_t)((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
			u[l + 96] = (uint8_t)((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4);
		}
	}
	memcpy(o->sc, x->scales, 16);
	o->d = x->d;
}

static int k3_scale(const uint8_t *s, int j) {
	int lo = j < 8 ? s[j] & 0x0f : s[j - 8] >> 4;
	int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
	return lo | hi << 4;
}

static void dec_q3_K(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_q3_K *x = (const block_q3_K *)b;
	for (int e = 0; e < QK_K; e++) {
		const int hh = e / 128, j = e % 128, k = j % 32;
		const int q = (x->qs[32 * hh + k] >> (2 * (j / 32))) & 3;
		const int hb = (x->hmask[k] >> (4 * hh + j / 32)) & 1;
		o->u[e] = (uint8_t)(q | hb << 2);
	}
	for (int j = 0; j < 16; j++) o->sc[j] = (uint8_t)(int8_t)(k3_scale(x->scales, j) - 32);
	o->d = x->d;
}

static void dec_q2_K(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_q2_K *x = (const block_q2_K *)b;
	for (int e = 0; e < QK_K; e++) {
		const int hh = e / 128, j = e % 128;
		o->u[e] = (x->qs[32 * hh + j % 32] >> (2 * (j / 32))) & 3;
	}
	memcpy(o->sc, x->scales, 16);
	o->d = x->d, o->m = x->dmin;
}

// IQ4_NL and IQ4_XS: codes are indices into tensor_iq4nl_values, laid out per 32 as Q4_0's
// (an IQ4_NL block is a Q4_0 block to the decoder).
static_assert(sizeof(block_iq4_nl) == sizeof(block_q4_0) && offsetof(block_iq4_nl, qs) == offsetof(block_q4_0, qs),
	      "IQ4_NL decodes as Q4_0");

static void dec_iq4_xs(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_iq4_xs *x = (const block_iq4_xs *)b;
	for (int j = 0; j < 8; j++) {
		for (int e = 0; e < 16; e++) o->u[32 * j + e] = x->qs[16 * j + e] & 15, o->u[32 * j + e + 16] = x->qs[16 * j + e] >> 4;
		o->sc[j] = (uint8_t)(int8_t)(tensor_iq4xs_scale(x, j) - 32);
	}
	o->d = x->d;
}

// MXFP4: codes are indices into tensor_mxfp4_values; the exponent rides in sc[0].
static void dec_mxfp4(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_mxfp4 *x = (const block_mxfp4 *)b;
	for (int e = 0; e < 16; e++) o->u[e] = x->qs[e] & 15, o->u[e + 16] = x->qs[e] >> 4;
	o->sc[0] = x->e;
}

// TQ1_0 and TQ2_0: the trits as Q2_K's codes under scale 1 and min 1 (sc = 0x11), with
// d = dmin = the block's scale, so d * 1 * t - d * 1 = d (t - 1).
static void tq_scales(uint16_t d, kern_codes *o) {
	memset(o->sc, 0x11, sizeof o->sc);
	o->d = o->m = d;
}

static void dec_tq1_0(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_tq1_0 *x = (const block_tq1_0 *)b;
	for (int e = 0; e < QK_K; e++) o->u[e] = (uint8_t)tensor_tq1_get(x, e);
	tq_scales(x->d, o);
}

static void dec_tq2_0(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_tq2_0 *x = (const block_tq2_0 *)b;
	for (int e = 0; e < QK_K; e++) o->u[e] = (x->qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
	tq_scales(x->d, o);
}

// ---- grid types: a signed grid element as an index into the type's 16 values -------------
// Magnitudes ranked m = 0..7 sit at 8 + m, their negatives at 7 - m.
static const kern_iq_codebook cb_iq3xxs = {{-62, -52, -44, -36, -28, -20, -12, -4, 4, 12, 20, 28, 36, 44, 52, 62}, 0.25f};
static const kern_iq_codebook cb_iq3s = {{-15, -13, -11, -9, -7, -5, -3, -1, 1, 3, 5, 7, 9, 11, 13, 15}, 1.0f};

// IQ2's magnitudes 8, 25, 43 ranked m = 0..2 sit at 3 + m, their negatives at 2 - m.
static const kern_iq_codebook cb_iq2 = {{-43, -25, -8, 8, 25, 43}, 0.125f};

static inline uint8_t iq_code8(int m, bool neg) { return (uint8_t)(neg ? 7 - m : 8 + m); }

// The 8 codes of an IQ2 grid point with signs sg.
static void iq2_codes(uint64_t point, uint8_t sg, uint8_t *u) {
	for (int j = 0; j < 8; j++) {
		const int g = (int)(point >> 8 * j & 0xff), m = (g > 8) + (g > 25);
		u[j] = (uint8_t)(sg >> j & 1 ? 2 - m : 3 + m);
	}
}

static void dec_iq3_xxs(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_iq3_xxs *x = (const block_iq3_xxs *)b;
	for (int ib = 0; ib < 8; ib++) {
		const uint32_t aux = tensor_rd_u32(x->qs + QK_K / 4 + 4 * ib);
		o->sc[2 * ib] = o->sc[2 * ib + 1] = (uint8_t)(2 * (aux >> 28) + 1);
		for (int l = 0; l < 4; l++) {
			const uint8_t sg = tensor_iq_signs(aux >> 7 * l);
			for (int j = 0; j < 8; j++) {
				const int g = (int)(tensor_iq3xxs_grid[x->qs[8 * ib + 2 * l + j / 4]] >> 8 * (j % 4) & 0xff);
				o->u[32 * ib + 8 * l + j] = iq_code8(g >> 3, sg >> j & 1); // 4, 12, ..., 52, 62
			}
		}
	}
	o->d = x->d;
}

static void dec_iq3_s(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_iq3_s *x = (const block_iq3_s *)b;
	for (int ib = 0; ib < 8; ib++) {
		o->sc[2 * ib] = o->sc[2 * ib + 1] = (uint8_t)(2 * (x->scales[ib / 2] >> 4 * (ib % 2) & 15) + 1);
		for (int j = 0; j < 32; j++) {
			const int k = j / 4, idx = x->qs[8 * ib + k] | (x->qh[ib] >> k & 1) << 8;
			const int g = (int)(tensor_iq3s_grid[idx] >> 8 * (j % 4) & 0xff);
			o->u[32 * ib + j] = iq_code8(g >> 1, x->signs[4 * ib + j / 8] >> (j % 8) & 1); // 1, 3, ..., 15
		}
	}
	o->d = x->d;
}

static void dec_iq2_xxs(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_iq2_xxs *x = (const block_iq2_xxs *)b;
	for (int ib = 0; ib < 8; ib++) {
		const uint32_t aux = tensor_rd_u32(x->qs + 8 * ib + 4);
		o->sc[2 * ib] = o->sc[2 * ib + 1] = (uint8_t)(2 * (aux >> 28) + 1);
		for (int l = 0; l < 4; l++)
			iq2_codes(tensor_iq2xxs_grid[x->qs[8 * ib + l]], tensor_iq_signs(aux >> 7 * l), o->u + 32 * ib + 8 * l);
	}
	o->d = x->d;
}

// IQ2_XS and IQ2_S: the 4-bit scales per 16.
static void iq2_scales16(const uint8_t *scales, kern_codes *o) {
	for (int j = 0; j < 16; j++) o->sc[j] = (uint8_t)(2 * (scales[j / 2] >> 4 * (j % 2) & 15) + 1);
}

static void dec_iq2_xs(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_iq2_xs *x = (const block_iq2_xs *)b;
	for (int k = 0; k < QK_K / 8; k++) {
		const uint32_t v = (uint32_t)x->qs[2 * k] | (uint32_t)x->qs[2 * k + 1] << 8;
		iq2_codes(tensor_iq2xs_grid[v & 511], tensor_iq_signs(v >> 9), o->u + 8 * k);
	}
	iq2_scales16(x->scales, o);
	o->d = x->d;
}

static void dec_iq2_s(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_iq2_s *x = (const block_iq2_s *)b;
	for (int k = 0; k < QK_K / 8; k++)
		iq2_codes(tensor_iq2s_grid[x->qs[k] | (x->qh[k / 4] >> 2 * (k % 4) & 3) << 8], x->qs[QK_K / 8 + k], o->u + 8 * k);
	iq2_scales16(x->scales, o);
	o->d = x->d;
}

// IQ1: 8 (grid + delta), grid -1, 0, 1 and delta -+1/8, at 2 (grid + 1) + (delta > 0).
static const kern_iq_codebook cb_iq1 = {{-9, -7, -1, 1, 7, 9}, 0.125f};

// The 8 codes of an IQ1 grid point shifted by delta (neg: -1/8).
static void iq1_codes(int idx, bool neg, uint8_t *u) {
	for (int j = 0; j < 8; j++) u[j] = (uint8_t)(2 * ((int8_t)(tensor_iq1s_grid[idx] >> 8 * j) + 1) + !neg);
}

static void dec_iq1_s(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_iq1_s *x = (const block_iq1_s *)b;
	for (int ib = 0; ib < 8; ib++) {
		const int qh = x->qh[2 * ib] | x->qh[2 * ib + 1] << 8;
		o->sc[2 * ib] = o->sc[2 * ib + 1] = (uint8_t)(2 * (qh >> 12 & 7) + 1);
		for (int l = 0; l < 4; l++) iq1_codes(x->qs[4 * ib + l] | (qh >> 3 * l & 7) << 8, qh & 0x8000, o->u + 32 * ib + 8 * l);
	}
	o->d = x->d;
}

static void dec_iq1_m(const uint8_t *b, kern_codes *o, bool q8u) {
	const block_iq1_m *x = (const block_iq1_m *)b;
	uint16_t sc[4];
	tensor_iq1m_scales(x, sc);
	for (int h = 0; h < 16; h++) o->sc[h] = (uint8_t)(2 * (sc[h / 4] >> 3 * (h % 4) & 7) + 1);
	for (int k = 0; k < QK_K / 8; k++) {
		const int q = x->qh[k / 2] >> 4 * (k % 2);
		iq1_codes(x->qs[k] | (q & 7) << 8, q & 8, o->u + 8 * k);
	}
	o->d = tensor_iq1m_d(sc);
}

const kern_iq_codebook *kern_iq_codebook_of(uint32_t type) {
	switch (type) {
	case GGUF_T_IQ3_XXS: return &cb_iq3xxs;
	case GGUF_T_IQ3_S: return &cb_iq3s;
	case GGUF_T_IQ2_XXS:
	case GGUF_T_IQ2_XS:
	case GGUF_T_IQ2_S: return &cb_iq2;
	case GGUF_T_IQ1_S:
	case GGUF_T_IQ1_M: return &cb_iq1;
	default: return NULL;
	}
}

typedef void (*dec_fn)(const uint8_t *b, kern_codes *o, bool q8u);
static const dec_fn decoders[GGUF_T_COUNT] = {
	[GGUF_T_Q4_0] = dec_q4_0, [GGUF_T_Q4_1] = dec_q4_1, [GGUF_T_Q5_0] = dec_q5_0, [GGUF_T_Q5_1] = dec_q5_1,
	[GGUF_T_Q8_0] = dec_q8_0, [GGUF_T_Q2_K] = dec_q2_K, [GGUF_T_Q3_K] = dec_q3_K, [GGUF_T_Q4_K] = dec_q4_K,
	[GGUF_T_Q5_K] = dec_q5_K, [GGUF_T_Q6_K] = dec_q6_K, [GGUF_T_IQ4_NL] = dec_q4_0, [GGUF_T_IQ4_XS] = dec_iq4_xs,
	[GGUF_T_MXFP4] = dec_mxfp4,
	[GGUF_T_TQ1_0] = dec_tq1_0, [GGUF_T_TQ2_0] = dec_tq2_0, [GGUF_T_IQ3_XXS] = dec_iq3_xxs, [GGUF_T_IQ3_S] = dec_iq3_s,
	[GGUF_T_IQ2_XXS] = dec_iq2_xxs, [GGUF_T_IQ2_XS] = dec_iq2_xs, [GGUF_T_IQ2_S] = dec_iq2_s,
	[GGUF_T_IQ1_S] = dec_iq1_s, [GGUF_T_IQ1_M] = dec_iq1_m,
};

bool kern_has_codes(uint32_t type) { return type < GGUF_T_COUNT && decoders[type]; }

void kern_decode(uint32_t type, const uint8_t *b, kern_codes *o, bool q8u) { decoders[type](b, o, q8u); }

uint32_t kern_codes_as(uint32_t type) { return type == GGUF_T_TQ1_0 || type == GGUF_T_TQ2_0 ? GGUF_T_Q2_K : type; }
