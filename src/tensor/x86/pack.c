// tensor/x86/pack: repacks GGUF rows into the x86 sets' tiles of 16 rows (layout in
// tensor/kern.h): each block's codes as unsigned bytes in 4-byte lanes per row, so one
// vector holds the same block of 16 neighbouring rows. Plain C; runs once at load.
#include "tensor/kern.h"

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
	if (kern_iq_codebook_of(type)) { // grid types: indices per 32, a scale byte per 16, d
		for (int j = 0; j < 8; j++, o += 256) {
			for (int r = 0; r < 16; r++) u[r] = dc[r].u + 32 * j;
			planes4(o, u);
		}
		for (int j = 0; j < 16; j++)
			for (int r = 0; r < 16; r++) o[16 * j + r] = dc[r].sc[j];
		for (int r = 0; r < 16; r++) put16(o + 256 + 2 * r, dc[r].d);
		return;
	}
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

void kern_x86_pack(uint32_t type, const void *src, size_t row_bytes, int64_t rows, int64_t k, void *dst, int64_t t0,
		   int64_t t1, bool q8u) {
	const packer *p = &packers[type];
	const int64_t nb = k / p->elems;
	const size_t tile_bytes = (size_t)nb * p->bytes;
	const size_t nat = tensor_traits_of(type)->bytes;
	kern_codes dc[16];
	for (int64_t t = t0; t < t1; t++) {
		const uint8_t *s = (const uint8_t *)src + (size_t)(t * KERN_TILE) * row_bytes;
		uint8_t *o = (uint8_t *)dst + (size_t)t * tile_bytes;
		const int64_t nr = rows - t * KERN_TILE < KERN_TILE ? rows - t * KERN_TILE : KERN_TILE;
		if (!p->codes) {
			pack_float_tile(type, s, row_bytes, nr, k, o);
			continue;
		}
		if (nr == KERN_TILE) {
			const uint8_t *row[16];
			for (int r = 0; r < 16; r++) row[r] = s + (size_t)r * row_bytes;
			if (pack_fast(type, row, 0, o, q8u)) {
				for (int64_t b = 1; b < nb; b++) pack_fast(type, row, b, o + (size_t)b * p->bytes, q8u);
				continue;
			}
		}
		for (int64_t b = 0; b < nb; b++) {
			for (int r = 0; r < 16; r++) {
				if (r < nr) kern_decode(type, s + (size_t)r * row_bytes + (size_t)b * nat, &dc[r], q8u);
				else memset(&dc[r], 0, sizeof dc[r]);
			}
			pack_block(type, dc, o + (size_t)b * p->bytes);
		}
	}
}
