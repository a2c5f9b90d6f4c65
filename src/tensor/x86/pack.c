// tensor/x86/pack: repacks GGUF rows into the x86 sets' tiles of 16 rows (layout in
// tensor/kern.h): each block's codes as unsigned bytes in 4-byte lanes per row, so one
// vector holds the same block of 16 neighbouring rows. Plain C; runs at load, and per tile for
// grid matrices held compact (a thread's scratch receives it).
#include "tensor/kern.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

// ---- codes of 16 rows -> planes -------------------------------------------------------------
// u[r] points at the 32 codes of one block of row r.
static void planes4(uint8_t *dst, const uint8_t *const u[16]) {
	for (int g = 0; g < 4; g++)
		for (int r = 0; r < 16; r++)
			for (int b = 0; b < 4; b++)
				dst[64 * g + 4 * r + b] = (uint8_t)((u[r][4 * g + b] & 15) | (u[r][16 + 4 * g + b] & 15) << 4);
}

static void planes8(uint8_t *dst, const uint8_t *const u[16]) {
	for (int g = 0; g < 8; g++)
		for (int r = 0; r < 16; r++)
			for (int b = 0; b < 4; b++) dst[64 * g + 4 * r + b] = u[r][4 * g + b];
}

static void hb1(uint8_t *dst, const uint8_t *const u[16], int bit) {
	for (int r = 0; r < 16; r++)
		for (int b = 0; b < 4; b++) {
			uint8_t v = 0;
			for (int g = 0; g < 4; g++)
				v |= (uint8_t)(((u[r][4 * g + b] >> bit) & 1) << g | ((u[r][16 + 4 * g + b] >> bit) & 1) << (4 + g));
			dst[4 * r + b] = v;
		}
}

static void planes2(uint8_t *dst, const uint8_t *const u[16], int shift) {
	for (int h = 0; h < 2; h++)
		for (int r = 0; r < 16; r++)
			for (int b = 0; b < 4; b++) {
				uint8_t v = 0;
				for (int t = 0; t < 2; t++) {
					const int g = 2 * h + t;
					v |= (uint8_t)(((u[r][4 * g + b] >> shift) & 3) << (4 * t) |
						       ((u[r][16 + 4 * g + b] >> shift) & 3) << (4 * t + 2));
				}
				dst[64 * h + 4 * r + b] = v;
			}
}

// ---- per type: block layout -----------------------------------------------------------------
typedef struct {
	int64_t elems;      // elements per block (32, 256; 1 for float types)
	size_t bytes;       // packed bytes of one tile-block
	bool codes;         // decoded by kern_decode (quantized types)
} packer;

static const packer packers[GGUF_T_COUNT] = {
	[GGUF_T_F32] = {GGUF_BLOCK_F32, 64, false},
	[GGUF_T_F16] = {GGUF_BLOCK_F16, 32, false},
	[GGUF_T_BF16] = {GGUF_BLOCK_BF16, 32, false},
	[GGUF_T_Q4_0] = {GGUF_BLOCK_Q4_0, 256 + 32, true},
	[GGUF_T_Q4_1] = {GGUF_BLOCK_Q4_1, 256 + 64, true},
	[GGUF_T_Q5_0] = {GGUF_BLOCK_Q5_0, 256 + 64 + 32, true},
	[GGUF_T_Q5_1] = {GGUF_BLOCK_Q5_1, 256 + 64 + 64, true},
	[GGUF_T_Q8_0] = {GGUF_BLOCK_Q8_0, 512 + 32, true},
	[GGUF_T_Q2_K] = {GGUF_BLOCK_Q2_K, 8 * 128 + 256 + 64, true},
	[GGUF_T_Q3_K] = {GGUF_BLOCK_Q3_K, 8 * 192 + 256 + 32, true},
	[GGUF_T_Q4_K] = {GGUF_BLOCK_Q4_K, 8 * 256 + 256 + 64, true},
	[GGUF_T_Q5_K] = {GGUF_BLOCK_Q5_K, 8 * 320 + 256 + 64, true},
	[GGUF_T_Q6_K] = {GGUF_BLOCK_Q6_K, 8 * 384 + 256 + 32, true},
	[GGUF_T_IQ4_NL] = {GGUF_BLOCK_IQ4_NL, 256 + 32, true},
	[GGUF_T_IQ4_XS] = {GGUF_BLOCK_IQ4_XS, 8 * 256 + 128 + 32, true},
	[GGUF_T_MXFP4] = {GGUF_BLOCK_MXFP4, 256 + 64, true},
	[GGUF_T_TQ1_0] = {GGUF_BLOCK_TQ1_0, 8 * 128 + 256 + 64, true}, // as Q2_K (kern_codes_as)
	[GGUF_T_TQ2_0] = {GGUF_BLOCK_TQ2_0, 8 * 128 + 256 + 64, true},
	[GGUF_T_IQ3_XXS] = {GGUF_BLOCK_IQ3_XXS, 8 * 256 + 256 + 32, true},
	[GGUF_T_IQ3_S] = {GGUF_BLOCK_IQ3_S, 8 * 256 + 256 + 32, true},
	[GGUF_T_IQ2_XXS] = {GGUF_BLOCK_IQ2_XXS, 8 * 256 + 256 + 32, true},
	[GGUF_T_IQ2_XS] = {GGUF_BLOCK_IQ2_XS, 8 * 256 + 256 + 32, true},
	[GGUF_T_IQ2_S] = {GGUF_BLOCK_IQ2_S, 8 * 256 + 256 + 32, true},
	[GGUF_T_IQ1_S] = {GGUF_BLOCK_IQ1_S, 8 * 256 + 256 + 32, true},
	[GGUF_T_IQ1_M] = {GGUF_BLOCK_IQ1_M, 8 * 256 + 256 + 32, true},
};

size_t kern_x86_block_bytes(uint32_t type) { return type < GGUF_T_COUNT ? packers[type].bytes : 0; }

enum kern_act kern_x86_act_kind(uint32_t type) {
	return type < GGUF_T_COUNT && packers[type].elems > 1 ? KERN_ACT_Q8 : KERN_ACT_F32;
}

size_t kern_x86_pack_bytes(uint32_t type, int64_t rows, int64_t k) {
	if (type >= GGUF_T_COUNT || !packers[type].bytes || k % packers[type].elems) return 0;
	uint64_t tiles = (uint64_t)(rows + KERN_TILE - 1) / KERN_TILE, b;
	if (!ck_mul(tiles, (uint64_t)(k / packers[type].elems), &b) || !ck_mul(b, packers[type].bytes, &b) || b > SIZE_MAX / 2)
		return 0;
	return (size_t)b;
}

static void put16(uint8_t *dst, uint16_t v) { dst[0] = (uint8_t)v, dst[1] = (uint8_t)(v >> 8); }

// MXFP4's scale as the float the kernels multiply by.
static void put_e8m0(uint8_t *dst, uint8_t e) {
	const float d = tensor_e8m0_half(e);
	memcpy(dst, &d, 4);
}

// One tile of a float type: for each k, the 16 rows' values side by side.
static void pack_float_tile(uint32_t type, const uint8_t *src, size_t row_bytes, int64_t nr, int64_t k, uint8_t *dst) {
	const size_t es = type == GGUF_T_F32 ? 4 : 2;
	for (int64_t e = 0; e < k; e++)
		for (int r = 0; r < 16; r++) {
			uint8_t *o = dst + ((size_t)e * 16 + (size_t)r) * es;
			if (r < nr) memcpy(o, src + (size_t)r * row_bytes + (size_t)e * es, es);
			else memset(o, 0, es);
		}
}

static void pack_block(uint32_t type, const kern_codes *dc, uint8_t *o) {
	const uint8_t *u[16];
	type = kern_codes_as(type);
	switch (packers[type].elems) {
	case 32:
		for (int r = 0; r < 16; r++) u[r] = dc[r].u;
		if (type == GGUF_T_Q8_0) planes8(o, u), o += 512;
		else planes4(o, u), o += 256;
		if (type == GGUF_T_Q5_0 || type == GGUF_T_Q5_1) hb1(o, u, 4), o += 64;
		if (type == GGUF_T_MXFP4) { // float scales: 2^(e - 128) is beyond fp16's range
			for (int r = 0; r < 16; r++) put_e8m0(o + 4 * r, dc[r].sc[0]);
			return;
		}
		for (int r = 0; r < 16; r++) put16(o + 2 * r, dc[r].d);
		o += 32;
		if (type == GGUF_T_Q4_1 || type == GGUF_T_Q5_1)
			for (int r = 0; r < 16; r++) put16(o + 2 * r, dc[r].m);
		return;
	default: // K-quants: 8 sub-blocks of 32, then scales
		for (int j = 0; j < 8; j++) {
			for (int r = 0; r < 16; r++) u[r] = dc[r].u + 32 * j;
			switch (type) {
			case GGUF_T_Q4_K:
			case GGUF_T_IQ4_XS: planes4(o, u), o += 256; break;
			case GGUF_T_Q5_K: planes4(o, u), hb1(o + 256, u, 4), o += 320; break;
			case GGUF_T_Q6_K: planes4(o, u), planes2(o + 256, u, 4), o += 384; break;
			case GGUF_T_Q3_K: planes2(o, u, 0), hb1(o + 128, u, 2), o += 192; break;
			case GGUF_T_Q2_K: planes2(o, u, 0), o += 128; break;
			}
		}
		if (type == GGUF_T_IQ4_XS) { // a scale per 32, no mins
			for (int j = 0; j < 8; j++)
				for (int r = 0; r < 16; r++) o[16 * j + r] = dc[r].sc[j];
			for (int r = 0; r < 16; r++) put16(o + 128 + 2 * r, dc[r].d);
			return;
		}
		if (type == GGUF_T_Q4_K || type == GGUF_T_Q5_K) {
			for (int j = 0; j < 8; j++)
				for (int r = 0; r < 16; r++) o[16 * j + r] = dc[r].sc[j], o[128 + 16 * j + r] = dc[r].mn[j];
		} else {
			for (int j = 0; j < 16; j++)
				for (int r = 0; r < 16; r++) o[16 * j + r] = dc[r].sc[j];
		}
		o += 256;
		for (int r = 0; r < 16; r++) put16(o + 2 * r, dc[r].d);
		if (type == GGUF_T_Q4_K || type == GGUF_T_Q5_K || type == GGUF_T_Q2_K)
			for (int r = 0; r < 16; r++) put16(o + 32 + 2 * r, dc[r].m);
	}
}

// ---- fast paths: nibble and byte codes moved four at a time --------------------------------
static uint32_t rd32(const uint8_t *p) {
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

// Q4_0, Q4_1, IQ4_NL, MXFP4, Q8_0, Q4_K and IQ4_XS, whose codes need no decoding: one
// tile-block from 16 rows.
static bool pack_fast(uint32_t type, const uint8_t *const row[16], int64_t b, uint8_t *o, bool q8u) {
	switch (type) {
	case GGUF_T_Q4_0:
	case GGUF_T_IQ4_NL: // the same layout as Q4_0, indices for codes
	case GGUF_T_Q4_1: {
		const size_t bs = type == GGUF_T_Q4_1 ? sizeof(block_q4_1) : type == GGUF_T_Q4_0 ? sizeof(block_q4_0) : sizeof(block_iq4_nl);
		const size_t qs = type == GGUF_T_Q4_1 ? 4 : 2;
		for (int r = 0; r < 16; r++) {
			const uint8_t *x = row[r] + (size_t)b * bs;
			for (int g = 0; g < 4; g++) wr32(o + 64 * g + 4 * r, rd32(x + qs + 4 * g));
			memcpy(o + 256 + 2 * r, x, 2);
			if (type == GGUF_T_Q4_1) memcpy(o + 288 + 2 * r, x + 2, 2);
		}
		return true;
	}
	case GGUF_T_MXFP4: // Q4_0's code layout after a one-byte exponent
		for (int r = 0; r < 16; r++) {
			const block_mxfp4 *x = (const block_mxfp4 *)(row[r] + (size_t)b * sizeof(block_mxfp4));
			for (int g = 0; g < 4; g++) wr32(o + 64 * g + 4 * r, rd32(x->qs + 4 * g));
			put_e8m0(o + 256 + 4 * r, x->e);
		}
		return true;
	case GGUF_T_Q8_0:
		for (int r = 0; r < 16; r++) {
			const uint8_t *x = row[r] + (size_t)b * sizeof(block_q8_0);
			for (int g = 0; g < 8; g++) wr32(o + 64 * g + 4 * r, rd32(x + 2 + 4 * g) ^ (q8u ? 0x80808080u : 0));
			memcpy(o + 512 + 2 * r, x, 2);
		}
		return true;
	case GGUF_T_Q4_K:
		for (int r = 0; r < 16; r++) {
			const block_q4_K *x = (const block_q4_K *)(row[r] + (size_t)b * sizeof(block_q4_K));
			for (int j = 0; j < 8; j++) {
				const uint8_t *q = x->qs + 32 * (j / 2);
				for (int g = 0; g < 4; g++) {
					const uint32_t w1 = rd32(q + 4 * g), w2 = rd32(q + 16 + 4 * g);
					const uint32_t v = j & 1 ? ((w1 >> 4) & 0x0f0f0f0fu) | (w2 & 0xf0f0f0f0u)
								 : (w1 & 0x0f0f0f0fu) | (w2 & 0x0f0f0f0fu) << 4;
					wr32(o + 256 * j + 64 * g + 4 * r, v);
				}
				kern_k4_scale_min(j, x->scales, &o[2048 + 16 * j + r], &o[2048 + 128 + 16 * j + r]);
			}
			memcpy(o + 2048 + 256 + 2 * r, &x->d, 2);
			memcpy(o + 2048 + 288 + 2 * r, &x->dmin, 2);
		}
		return true;
	case GGUF_T_IQ4_XS:
		for (int r = 0; r < 16; r++) {
			const block_iq4_xs *x = (const block_iq4_xs *)(row[r] + (size_t)b * sizeof(block_iq4_xs));
			for (int j = 0; j < 8; j++) {
				for (int g = 0; g < 4; g++) wr32(o + 256 * j + 64 * g + 4 * r, rd32(x->qs + 16 * j + 4 * g));
				o[2048 + 16 * j + r] = (uint8_t)(int8_t)(tensor_iq4xs_scale(x, j) - 32);
			}
			memcpy(o + 2048 + 128 + 2 * r, &x->d, 2);
		}
		return true;
	default:
		return false;
	}
}

// ---- grid types: codes per grid point, looked up ---------------------------------------------
// The code of value v in cb (the grid values and their signed sums are all in it).
static uint8_t code_of(const kern_iq_codebook *cb, int v) {
	for (int j = 0; j < 16; j++)
		if (cb->v[j] == v) return (uint8_t)j;
	return 0;
}

static struct {
	uint64_t iq2xxs[256][2], iq2xs[512][2], iq2s[1024][2]; // IQ2: positive codes, and them ^ negative codes
	uint32_t iq3xxs[256], iq3s[512]; // IQ3: positive codes (negative: ^ 15 each)
	uint64_t iq1[2048];              // IQ1: codes with delta -1/8 (+1/8: one more each)
	uint64_t sm[256], sm7[128];      // 0xff in byte j where sign bit j is set (sm7: of tensor_iq_signs)
} G;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void iq2_point(uint64_t point, uint64_t out[2]) {
	const kern_iq_codebook *cb = kern_iq_codebook_of(GGUF_T_IQ2_XXS);
	out[0] = out[1] = 0;
	for (int j = 0; j < 8; j++) {
		const int g = (int)(point >> 8 * j & 0xff);
		out[0] |= (uint64_t)code_of(cb, g) << 8 * j;
		out[1] |= (uint64_t)(code_of(cb, g) ^ code_of(cb, -g)) << 8 * j;
	}
}

static uint32_t iq3_point(uint32_t point, const kern_iq_codebook *cb) {
	uint32_t c = 0;
	for (int j = 0; j < 4; j++) c |= (uint32_t)code_of(cb, (int)(point >> 8 * j & 0xff)) << 8 * j;
	return c;
}

static void grid_init(void) {
	for (int i = 0; i < 256; i++) iq2_point(tensor_iq2xxs_grid[i], G.iq2xxs[i]);
	for (int i = 0; i < 512; i++) iq2_point(tensor_iq2xs_grid[i], G.iq2xs[i]);
	for (int i = 0; i < 1024; i++) iq2_point(tensor_iq2s_grid[i], G.iq2s[i]);
	for (int i = 0; i < 256; i++) G.iq3xxs[i] = iq3_point(tensor_iq3xxs_grid[i], kern_iq_codebook_of(GGUF_T_IQ3_XXS));
	for (int i = 0; i < 512; i++) G.iq3s[i] = iq3_point(tensor_iq3s_grid[i], kern_iq_codebook_of(GGUF_T_IQ3_S));
	const kern_iq_codebook *c1 = kern_iq_codebook_of(GGUF_T_IQ1_S);
	for (int i = 0; i < 2048; i++) {
		G.iq1[i] = 0;
		for (int j = 0; j < 8; j++) G.iq1[i] |= (uint64_t)code_of(c1, 8 * (int8_t)(tensor_iq1s_grid[i] >> 8 * j) - 1) << 8 * j;
	}
	for (int s = 0; s < 256; s++) {
		G.sm[s] = 0;
		for (int j = 0; j < 8; j++) G.sm[s] |= (uint64_t)(s >> j & 1 ? 0xff : 0) << 8 * j;
	}
	for (int s = 0; s < 128; s++) G.sm7[s] = G.sm[tensor_iq_signs((uint32_t)s)];
}

// Codes of one IQ2 group: the point's positive codes, negative where its signs say.
static inline uint64_t iq2_group(const uint64_t pt[2], uint64_t sm) { return pt[0] ^ (pt[1] & sm); }
static inline uint64_t iq3_group(uint32_t a, uint32_t b, uint64_t sm) {
	return ((uint64_t)a | (uint64_t)b << 32) ^ (sm & 0x0f0f0f0f0f0f0f0full);
}
#define IQ1_PLUS 0x0101010101010101ull

// Row r's 32 codes of sub-block j of a grid tile-block o, groups of 8 g0..g3 (codes < 16, so
// a group shifted by 4 stays in its bytes): planes4's byte 4r+b of plane q.
static inline void put_sub(uint8_t *o, int j, int r, uint64_t g0, uint64_t g1, uint64_t g2, uint64_t g3) {
	const uint64_t lo = g0 | g2 << 4, hi = g1 | g3 << 4;
	uint8_t *p = o + 256 * j + 4 * r;
	wr32(p, (uint32_t)lo), wr32(p + 64, (uint32_t)(lo >> 32)), wr32(p + 128, (uint32_t)hi), wr32(p + 192, (uint32_t)(hi >> 32));
}

// Row r's scales and d of a grid block x into hd, as a packed tile-block holds them after its
// codes: the scale of the 16 elements h of sub-block j at 32 j + 16 h + r, the fp16 d at 256 + 2 r.
static void grid_head(uint32_t type, const uint8_t *x, uint8_t *hd, int r) {
	uint8_t sc[16];
	uint16_t d = (uint16_t)(x[0] | x[1] << 8); // the first field of all but IQ1_M
	switch (type) {
	case GGUF_T_IQ2_XXS:
	case GGUF_T_IQ3_XXS: {
		const uint8_t *aux = type == GGUF_T_IQ2_XXS ? x + 2 + 4 : x + 2 + QK_K / 4;
		const int step = type == GGUF_T_IQ2_XXS ? 8 : 4;
		for (int j = 0; j < 8; j++) sc[2 * j] = sc[2 * j + 1] = (uint8_t)(2 * (aux[step * j + 3] >> 4) + 1);
		break;
	}
	case GGUF_T_IQ2_XS:
	case GGUF_T_IQ2_S: {
		const uint8_t *scales = type == GGUF_T_IQ2_XS ? ((const block_iq2_xs *)x)->scales : ((const block_iq2_s *)x)->scales;
		for (int j = 0; j < 16; j++) sc[j] = (uint8_t)(2 * (scales[j / 2] >> 4 * (j % 2) & 15) + 1);
		break;
	}
	case GGUF_T_IQ3_S: {
		const block_iq3_s *b = (const block_iq3_s *)x;
		for (int j = 0; j < 8; j++) sc[2 * j] = sc[2 * j + 1] = (uint8_t)(2 * (b->scales[j / 2] >> 4 * (j % 2) & 15) + 1);
		break;
	}
	case GGUF_T_IQ1_S: {
		const block_iq1_s *b = (const block_iq1_s *)x;
		for (int j = 0; j < 8; j++) sc[2 * j] = sc[2 * j + 1] = (uint8_t)(2 * (b->qh[2 * j + 1] >> 4 & 7) + 1);
		break;
	}
	case GGUF_T_IQ1_M: {
		uint16_t s4[4];
		tensor_iq1m_scales((const block_iq1_m *)x, s4);
		for (int h = 0; h < 16; h++) sc[h] = (uint8_t)(2 * (s4[h / 4] >> 3 * (h % 4) & 7) + 1);
		d = tensor_iq1m_d(s4);
		break;
	}
	default:
		return;
	}
	for (int h = 0; h < 16; h++) hd[16 * h + r] = sc[h];
	put16(hd + 256 + 2 * r, d);
}

// Row r of a grid tile-block o from its block x: planes4 of kern_decode's codes, their scales and d.
static void grid_row(uint32_t type, const uint8_t *x, uint8_t *o, int r) {
	uint64_t g[4];
	grid_head(type, x, o + 2048, r);
	switch (type) {
	case GGUF_T_IQ2_XXS: {
		const block_iq2_xxs *b = (const block_iq2_xxs *)x;
		for (int j = 0; j < 8; j++) {
			const uint32_t a0 = rd32(b->qs + 8 * j), a1 = rd32(b->qs + 8 * j + 4);
			for (int l = 0; l < 4; l++) g[l] = iq2_group(G.iq2xxs[a0 >> 8 * l & 255], G.sm7[a1 >> 7 * l & 127]);
			put_sub(o, j, r, g[0], g[1], g[2], g[3]);
		}
		return;
	}
	case GGUF_T_IQ2_XS:
	case GGUF_T_IQ2_S:
		for (int j = 0; j < 8; j++) {
			for (int l = 0; l < 4; l++) {
				const int k = 4 * j + l;
				if (type == GGUF_T_IQ2_XS) {
					const block_iq2_xs *b = (const block_iq2_xs *)x;
					const uint32_t v = (uint32_t)b->qs[2 * k] | (uint32_t)b->qs[2 * k + 1] << 8;
					g[l] = iq2_group(G.iq2xs[v & 511], G.sm7[v >> 9]);
				} else {
					const block_iq2_s *b = (const block_iq2_s *)x;
					g[l] = iq2_group(G.iq2s[b->qs[k] | (b->qh[j] >> 2 * l & 3) << 8], G.sm[b->qs[QK_K / 8 + k]]);
				}
			}
			put_sub(o, j, r, g[0], g[1], g[2], g[3]);
		}
		return;
	case GGUF_T_IQ3_XXS: {
		const block_iq3_xxs *b = (const block_iq3_xxs *)x;
		for (int j = 0; j < 8; j++) {
			const uint32_t a = rd32(b->qs + QK_K / 4 + 4 * j);
			const uint8_t *q = b->qs + 8 * j;
			for (int l = 0; l < 4; l++) g[l] = iq3_group(G.iq3xxs[q[2 * l]], G.iq3xxs[q[2 * l + 1]], G.sm7[a >> 7 * l & 127]);
			put_sub(o, j, r, g[0], g[1], g[2], g[3]);
		}
		return;
	}
	case GGUF_T_IQ3_S: {
		const block_iq3_s *b = (const block_iq3_s *)x;
		for (int j = 0; j < 8; j++) {
			const uint8_t *q = b->qs + 8 * j;
			for (int l = 0; l < 4; l++) {
				const int k = 2 * l;
				g[l] = iq3_group(G.iq3s[q[k] | (b->qh[j] >> k & 1) << 8], G.iq3s[q[k + 1] | (b->qh[j] >> (k + 1) & 1) << 8],
						 G.sm[b->signs[4 * j + l]]);
			}
			put_sub(o, j, r, g[0], g[1], g[2], g[3]);
		}
		return;
	}
	case GGUF_T_IQ1_S: {
		const block_iq1_s *b = (const block_iq1_s *)x;
		for (int j = 0; j < 8; j++) {
			const uint32_t qh = (uint32_t)b->qh[2 * j] | (uint32_t)b->qh[2 * j + 1] << 8;
			const uint64_t plus = qh & 0x8000 ? 0 : IQ1_PLUS;
			for (int l = 0; l < 4; l++) g[l] = G.iq1[b->qs[4 * j + l] | (qh >> 3 * l & 7) << 8] + plus;
			put_sub(o, j, r, g[0], g[1], g[2], g[3]);
		}
		return;
	}
	case GGUF_T_IQ1_M: {
		const block_iq1_m *b = (const block_iq1_m *)x;
		for (int j = 0; j < 8; j++) {
			for (int l = 0; l < 4; l++) {
				const int k = 4 * j + l, q = b->qh[k / 2] >> 4 * (k % 2);
				g[l] = G.iq1[b->qs[k] | (q & 7) << 8] + (q & 8 ? 0 : IQ1_PLUS);
			}
			put_sub(o, j, r, g[0], g[1], g[2], g[3]);
		}
		return;
	}
	}
}

static bool is_grid(uint32_t type) { return kern_iq_codebook_of(type) != NULL; }

// One tile of nr rows at s into o.
static void pack_tile(uint32_t type, const uint8_t *s, size_t row_bytes, int64_t nr, int64_t k, uint8_t *o, bool q8u) {
	const packer *p = &packers[type];
	const int64_t nb = k / p->elems;
	const size_t nat = tensor_traits_of(type)->bytes;
	if (!p->codes) {
		pack_float_tile(type, s, row_bytes, nr, k, o);
		return;
	}
	if (is_grid(type)) { // rows past nr: zero codes, scales and d
		pthread_once(&g_once, grid_init);
		if (nr < KERN_TILE) memset(o, 0, (size_t)nb * p->bytes);
		for (int64_t b = 0; b < nb; b++)
			for (int r = 0; r < nr; r++) grid_row(type, s + (size_t)r * row_bytes + (size_t)b * nat, o + (size_t)b * p->bytes, r);
		return;
	}
	if (nr == KERN_TILE) {
		const uint8_t *row[16];
		for (int r = 0; r < 16; r++) row[r] = s + (size_t)r * row_bytes;
		if (pack_fast(type, row, 0, o, q8u)) {
			for (int64_t b = 1; b < nb; b++) pack_fast(type, row, b, o + (size_t)b * p->bytes, q8u);
			return;
		}
	}
	kern_codes dc[16];
	for (int64_t b = 0; b < nb; b++) {
		for (int r = 0; r < 16; r++) {
			if (r < nr) kern_decode(type, s + (size_t)r * row_bytes + (size_t)b * nat, &dc[r], q8u);
			else memset(&dc[r], 0, sizeof dc[r]);
		}
		pack_block(type, dc, o + (size_t)b * p->bytes);
	}
}

void kern_x86_pack(uint32_t type, const void *src, size_t row_bytes, int64_t rows, int64_t k, void *dst, int64_t t0,
		   int64_t t1, bool q8u) {
	const size_t tile_bytes = (size_t)(k / packers[type].elems) * packers[type].bytes;
	for (int64_t t = t0; t < t1; t++) {
		const int64_t nr = rows - t * KERN_TILE < KERN_TILE ? rows - t * KERN_TILE : KERN_TILE;
		pack_tile(type, (const uint8_t *)src + (size_t)(t * KERN_TILE) * row_bytes, row_bytes, nr, k,
			  (uint8_t *)dst + (size_t)t * tile_bytes, q8u);
	}
}

void kern_x86_pack_tile(uint32_t type, const void *src, size_t row_bytes, int64_t nr, int64_t k, void *dst, bool q8u) {
	pack_tile(type, src, row_bytes, nr, k, dst, q8u);
}

// ---- a thread's scratch ----------------------------------------------------------------------
typedef struct {
	void *p;
	size_t cap;
} scratch;
static pthread_key_t s_key;
static pthread_once_t s_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *v) {
	scratch *s = v;
	free(s->p);
	free(s);
}

static void scratch_init(void) {
	if (pthread_key_create(&s_key, scratch_free)) abort();
}

void *kern_x86_scratch(size_t bytes) {
	pthread_once(&s_once, scratch_init);
	scratch *s = pthread_getspecific(s_key);
	if (!s) {
		if (!(s = calloc(1, sizeof *s))) return NULL;
		if (pthread_setspecific(s_key, s)) {
			free(s);
			return NULL;
		}
	}
	if (s->cap < bytes) {
		void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
		if (!p) return NULL;
		free(s->p);
		s->p = p, s->cap = bytes;
	}
	return s->p;
}
