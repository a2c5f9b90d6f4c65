// tests: block formats — sizes, golden dequantization (bit for bit against ../shared),
// agreement of our quantizers with llama.cpp's files, round-trip error bounds, fp16/bf16.
#include "base/base.h"
#include "gguf/gguf.h"
#include "tensor/kern.h"
#include "tensor/ref/quants.h"
#include "tensor/tensor.h"
#include "t.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>

static const uint32_t all_types[] = {
	GGUF_T_F32, GGUF_T_F16, GGUF_T_BF16, GGUF_T_Q4_0, GGUF_T_Q4_1, GGUF_T_Q5_0, GGUF_T_Q5_1,
	GGUF_T_Q8_0, GGUF_T_Q8_1, GGUF_T_Q2_K, GGUF_T_Q3_K, GGUF_T_Q4_K, GGUF_T_Q5_K, GGUF_T_Q6_K,
	GGUF_T_Q8_K, GGUF_T_IQ4_NL, GGUF_T_IQ4_XS, GGUF_T_TQ1_0, GGUF_T_TQ2_0,
	GGUF_T_IQ3_XXS, GGUF_T_IQ3_S, GGUF_T_IQ2_XXS, GGUF_T_IQ2_XS, GGUF_T_IQ2_S, GGUF_T_IQ1_S, GGUF_T_IQ1_M, GGUF_T_MXFP4,
};
#define N_TYPES (sizeof all_types / sizeof all_types[0])

static float bits_f(uint32_t u) {
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint32_t f_bits(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

// ---- sizes and the table -----------------------------------------------------------------
static void test_sizes(void) {
	CHECK(sizeof(block_q4_0) == 18);
	CHECK(sizeof(block_q4_1) == 20);
	CHECK(sizeof(block_q5_0) == 22);
	CHECK(sizeof(block_q5_1) == 24);
	CHECK(sizeof(block_q8_0) == 34);
	CHECK(sizeof(block_q8_1) == 36);
	CHECK(sizeof(block_q2_K) == 84);
	CHECK(sizeof(block_q3_K) == 110);
	CHECK(sizeof(block_q4_K) == 144);
	CHECK(sizeof(block_q5_K) == 176);
	CHECK(sizeof(block_q6_K) == 210);
	CHECK(sizeof(block_q8_K) == 292);
	CHECK(sizeof(block_iq4_nl) == 18);
	CHECK(sizeof(block_iq4_xs) == 136);
	CHECK(sizeof(block_mxfp4) == 17);
	CHECK(sizeof(block_tq1_0) == 54);
	CHECK(sizeof(block_tq2_0) == 66);
	CHECK(sizeof(block_iq3_xxs) == 98);
	CHECK(sizeof(block_iq3_s) == 110);
	CHECK(sizeof(block_iq2_xxs) == 66);
	CHECK(sizeof(block_iq2_xs) == 74);
	CHECK(sizeof(block_iq2_s) == 82);
	CHECK(sizeof(block_iq1_s) == 50);
	CHECK(sizeof(block_iq1_m) == 56);
	for (size_t i = 0; i < N_TYPES; i++) {
		const tensor_traits *tt = tensor_traits_of(all_types[i]);
		const gguf_ttype_info *gi = gguf_ttype_get(all_types[i]);
		CHECKF(tt && gi, "type %u", all_types[i]);
		if (!tt || !gi) continue;
		CHECKF(!strcmp(tt->name, gi->name), "%s vs %s", tt->name, gi->name);
		CHECKF(tt->block == (int64_t)gi->block && tt->bytes == gi->bytes, "%s size", tt->name);
		CHECK(tt->to_f32 && tt->from_f32 && tt->vec_dot_f32);
	}
	CHECK(tensor_traits_of(GGUF_T_I32) == NULL);
	CHECK(tensor_traits_of(4) == NULL);
	CHECK(tensor_traits_of(1000) == NULL);
	CHECK(tensor_row_bytes(GGUF_T_Q4_K, 512) == 288);
	CHECK(tensor_row_bytes(GGUF_T_Q4_K, 100) == 0);
	CHECK(tensor_row_bytes(GGUF_T_Q8_0, 64) == 68);
	CHECK(tensor_row_bytes(GGUF_T_IQ4_NL, 64) == 36);
	CHECK(tensor_row_bytes(GGUF_T_IQ4_XS, 512) == 272);
	CHECK(tensor_row_bytes(GGUF_T_IQ4_XS, 96) == 0);
	CHECK(tensor_row_bytes(GGUF_T_MXFP4, 64) == 34);
	CHECK(tensor_row_bytes(GGUF_T_MXFP4, 48) == 0);
	CHECK(tensor_row_bytes(GGUF_T_F16, 3) == 6);
	CHECK(tensor_row_bytes(GGUF_T_F32, -1) == 0);
	CHECK(tensor_row_bytes(GGUF_T_I32, 4) == 0);
	CHECK(tensor_row_bytes(GGUF_T_F32, INT64_MAX) == 0); // overflows
	CHECK(tensor_row_bytes(GGUF_T_Q8_0, (INT64_C(1) << 40)) == (size_t)34 << 35);
}

// ---- the IQ4 codebook and layouts, from their definitions ---------------------------------
static void test_iq4(void) {
	// kvalues_iq4nl as llama.cpp publishes it (ggml-common.h)
	static const int published[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
	for (int i = 0; i < 16; i++) CHECKF(tensor_iq4nl_values[i] == published[i], "codebook value %d", i);
	// IQ4_NL: d = 0.5, byte j = code j (low nibble, element j) and code 15 - j (high, j + 16)
	block_iq4_nl nl = {.d = tensor_f32_to_f16(0.5f)};
	for (int j = 0; j < 16; j++) nl.qs[j] = (uint8_t)(j | (15 - j) << 4);
	float y[256];
	tensor_traits_of(GGUF_T_IQ4_NL)->to_f32(&nl, y, 32);
	int bad = 0;
	for (int j = 0; j < 16; j++) bad += y[j] != 0.5f * published[j] || y[j + 16] != 0.5f * published[15 - j];
	CHECKF(bad == 0, "IQ4_NL: %d elements off their definition", bad);
	// IQ4_XS: sub-block ib's 6-bit scale ls = 5 * ib + 3 (low 4 bits in scales_l, high 2 in scales_h), element
	// e of it = d * (ls - 32) * value[code]; code (e + ib) % 16 for e < 16, and 15 - that for e + 16
	block_iq4_xs xs = {.d = tensor_f32_to_f16(0.25f)};
	for (int ib = 0; ib < 8; ib++) {
		const int ls = 5 * ib + 3;
		xs.scales_l[ib / 2] |= (uint8_t)((ls & 15) << 4 * (ib % 2));
		xs.scales_h |= (uint16_t)((ls >> 4) << 2 * ib);
		for (int j = 0; j < 16; j++) xs.qs[16 * ib + j] = (uint8_t)((j + ib) % 16 | (15 - (j + ib) % 16) << 4);
	}
	tensor_traits_of(GGUF_T_IQ4_XS)->to_f32(&xs, y, 256);
	bad = 0;
	for (int ib = 0; ib < 8; ib++) {
		const float dl = 0.25f * (float)(5 * ib + 3 - 32);
		for (int j = 0; j < 16; j++) {
			const int c = (j + ib) % 16;
			bad += y[32 * ib + j] != dl * published[c] || y[32 * ib + 16 + j] != dl * published[15 - c];
		}
	}
	CHECKF(bad == 0, "IQ4_XS: %d elements off their definition", bad);
	// the quantizers pick a code at least as near as any other for the scale they store
	float x[256];
	uint64_t s = 99;
	for (int i = 0; i < 256; i++) x[i] = (float)((int64_t)(splitmix64(s++) >> 40) - (1 << 23)) / (1 << 23);
	tensor_traits_of(GGUF_T_IQ4_NL)->from_f32(x, &nl, 32);
	tensor_traits_of(GGUF_T_IQ4_NL)->to_f32(&nl, y, 32);
	const float d = tensor_f16_to_f32(nl.d);
	bad = 0;
	for (int j = 0; j < 32; j++)
		for (int c = 0; c < 16; c++) bad += fabsf(x[j] - d * published[c]) < fabsf(x[j] - y[j]);
	CHECKF(bad == 0 && d != 0.0f, "IQ4_NL: %d elements not at their nearest code", bad);
}

// ---- MXFP4: the E2M1 codebook, the E8M0 scale and the layout, from their definitions -------
// E2M1: bit 3 the sign, bits 2..1 the exponent (bias 1), bit 0 the mantissa; exponent 0 is
// subnormal (0 or 0.5).
static double e2m1(int c) {
	const int ex = (c >> 1) & 3, m = c & 1;
	const double v = ex ? ldexp(1.0 + 0.5 * m, ex - 1) : 0.5 * m;
	return c & 8 ? -v : v;
}

static void test_mxfp4(void) {
	int bad = 0;
	for (int c = 0; c < 16; c++) CHECKF(tensor_mxfp4_values[c] == 2.0 * e2m1(c), "MXFP4 codebook value %d", c);
	for (int e = 0; e < 256; e++) bad += tensor_e8m0_half((uint8_t)e) != (float)ldexp(1.0, e - 128);
	CHECKF(bad == 0, "E8M0: %d exponents whose half-scale is not 2^(e-128)", bad);
	// blocks at the subnormal scales, a middle one and the largest: byte j = code j (element j)
	// and code 15 - j (element j + 16); element = 2^(e-127) * E2M1(code)
	static const uint8_t es[] = {0, 1, 127, 131, 254};
	float y[64];
	for (size_t k = 0; k < sizeof es; k++) {
		block_mxfp4 b = {.e = es[k]};
		for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | (15 - j) << 4);
		tensor_traits_of(GGUF_T_MXFP4)->to_f32(&b, y, 32);
		bad = 0;
		for (int j = 0; j < 16; j++)
			bad += y[j] != (float)ldexp(e2m1(j), es[k] - 127) || y[j + 16] != (float)ldexp(e2m1(15 - j), es[k] - 127);
		CHECKF(bad == 0, "MXFP4 e=%d: %d elements off their definition", es[k], bad);
	}
	// the quantizer: ggml's exponent floor(log2 amax) - 2 or one above, every code a nearest one
	float x[64];
	uint64_t s = 41;
	for (int i = 0; i < 64; i++) x[i] = (float)((int64_t)(splitmix64(s++) >> 40) - (1 << 23)) / (1 << 20);
	// block 0: elements within 0.25 and one at 7.9, which ggml's exponent (127, scale 1) clips
	// to 6; one above (scale 2) stores it as 8 at little cost to the small ones
	for (int i = 0; i < 32; i++) x[i] *= 1.0f / 32.0f;
	x[5] = 7.9f;
	block_mxfp4 q[2];
	tensor_traits_of(GGUF_T_MXFP4)->from_f32(x, q, 64);
	tensor_traits_of(GGUF_T_MXFP4)->to_f32(q, y, 64);
	for (int k = 0; k < 2; k++) {
		float amax = 0.0f;
		for (int j = 0; j < 32; j++) amax = fabsf(x[32 * k + j]) > amax ? fabsf(x[32 * k + j]) : amax;
		const int eg = (int)floor(log2(amax)) - 2 + 127;
		CHECKF(q[k].e == eg || q[k].e == eg + 1, "MXFP4 block %d: exponent %d for amax %g", k, q[k].e, amax);
		const float d = tensor_e8m0_half(q[k].e);
		bad = 0;
		for (int j = 0; j < 32; j++)
			for (int c = 0; c < 16; c++) bad += fabsf(x[32 * k + j] - d * tensor_mxfp4_values[c]) < fabsf(x[32 * k + j] - y[32 * k + j]);
		CHECKF(bad == 0, "MXFP4 block %d: %d elements not at their nearest code", k, bad);
	}
	CHECKF(q[0].e == 128 && y[5] == 8.0f, "MXFP4: 7.9 stored as %g (exponent %d), not 8", y[5], q[0].e);
	// tiny and zero blocks: the exponent floors at 0, zeros stay +0
	for (int i = 0; i < 32; i++) x[i] = i == 3 ? 1e-44f : 0.0f;
	tensor_traits_of(GGUF_T_MXFP4)->from_f32(x, q, 32);
	CHECKF(q[0].e == 0 && q[0].qs[0] == 0, "MXFP4: a subnormal block (e %d)", q[0].e);
}

// ---- the ternary types, from their definitions -------------------------------------------
// Trit e of the test blocks, and the block scale.
static int tq_trit(int e) { return (e * 7 + e / 5) % 3; }

static void test_tq(void) {
	// TQ1_0's byte for 5 trits is ceil(256 v / 243), v their base-3 number (first trit most
	// significant); each of the 243 comes back whole
	int bad = 0;
	for (int v = 0; v < 243; v++) {
		const uint8_t q = (uint8_t)((v * 256 + 242) / 243);
		for (int n = 0, p = 81; n < 5; n++, p /= 3) bad += tensor_tq1_trit(q, n) != v / p % 3;
	}
	CHECKF(bad == 0, "TQ1_0: %d trits do not decode", bad);
	// TQ1_0 by hand: element 32n + m is trit n of qs[m] (n < 5), 160 + 16n + m trit n of qs[32 + m],
	// 240 + 4n + m trit n of qh[m] (4 trits and a 0)
	block_tq1_0 t1 = {.d = tensor_f32_to_f16(0.5f)};
	for (int m = 0; m < 52; m++) {
		int v = 0;
		for (int n = 0; n < 5; n++) {
			const int e = m < 32 ? 32 * n + m : m < 48 ? 160 + 16 * n + (m - 32) : 240 + 4 * n + (m - 48);
			v = 3 * v + (m >= 48 && n == 4 ? 0 : tq_trit(e));
		}
		const uint8_t q = (uint8_t)((v * 256 + 242) / 243);
		if (m < 48) t1.qs[m] = q;
		else t1.qh[m - 48] = q;
	}
	float y[256], x[256];
	tensor_traits_of(GGUF_T_TQ1_0)->to_f32(&t1, y, 256);
	bad = 0;
	for (int e = 0; e < 256; e++) bad += y[e] != 0.5f * (float)(tq_trit(e) - 1);
	CHECKF(bad == 0, "TQ1_0: %d elements off their definition", bad);
	// TQ2_0 by hand: element 128c + 32l + m = bits 2l..2l+1 of qs[32c + m], minus 1, times d
	block_tq2_0 t2 = {.d = tensor_f32_to_f16(-0.25f)};
	for (int e = 0; e < 256; e++) t2.qs[32 * (e / 128) + e % 32] |= (uint8_t)(tq_trit(e) << (2 * (e % 128 / 32)));
	tensor_traits_of(GGUF_T_TQ2_0)->to_f32(&t2, y, 256);
	bad = 0;
	for (int e = 0; e < 256; e++) bad += y[e] != -0.25f * (float)(tq_trit(e) - 1);
	CHECKF(bad == 0, "TQ2_0: %d elements off their definition", bad);
	// ternary weights at any scale come back exactly (the scale is the block's largest magnitude)
	for (int k = 0; k < 2; k++) {
		const tensor_traits *tt = tensor_traits_of(k ? GGUF_T_TQ2_0 : GGUF_T_TQ1_0);
		uint8_t q[66];
		for (int e = 0; e < 256; e++) x[e] = 0.375f * (float)(tq_trit(e + 11 * k) - 1);
		tt->from_f32(x, q, 256);
		tt->to_f32(q, y, 256);
		CHECKF(!memcmp(x, y, sizeof x), "%s: ternary weights do not round trip", tt->name);
	}
}

// ---- the grid types' tables and layouts, from their definitions --------------------------
// Byte j of entry i of a grid (little-endian, as ggml reads it).
static int grid_byte(const void *tab, int w, int i, int j) {
	const uint64_t e = w == 8 ? ((const uint64_t *)tab)[i] : ((const uint32_t *)tab)[i];
	return (int)(e >> 8 * j & 0xff);
}

static void test_grids(void) {
	static const struct {
		const char *name;
		const void *tab;
		int n, w;
		int bytes[8]; // the published element values, -1 ending the list
		bool sorted;
		const char *sha256; // the published table's digest, its entries as little-endian bytes
	} grids[] = {
		{"iq2xxs", tensor_iq2xxs_grid, 256, 8, {0x08, 0x19, 0x2b, -1}, true,
		 "05826b5d3e472a3a78f196be62ac78acf81df0f909626e12ab9fa2a5d490dd54"},
		{"iq2xs", tensor_iq2xs_grid, 512, 8, {0x08, 0x19, 0x2b, -1}, true,
		 "06e47aaca60b4dc1d9b5a3f34540437058a6b142b4d7a59d5ded769b4d1bf1de"},
		{"iq2s", tensor_iq2s_grid, 1024, 8, {0x08, 0x19, 0x2b, -1}, true,
		 "e1aa1473412b0552c2174c30ef22ab4073f6a181b85a17056e8249bd2932fd88"},
		{"iq3xxs", tensor_iq3xxs_grid, 256, 4, {4, 12, 20, 28, 36, 44, 52, 62}, true,
		 "46e35f5a997efdee6c99ce57854c8a0d4f0ff8ca57e5e8a60c0793ea580acf5d"},
		{"iq3s", tensor_iq3s_grid, 512, 4, {1, 3, 5, 7, 9, 11, 13, 15}, true,
		 "bd1af4945a1717c65610b0284e4628b9a1ba3b306fae3a06f6e5f597356e349f"},
		{"iq1s", tensor_iq1s_grid, 2048, 8, {0xff, 0x00, 0x01, -1}, false, // int8 -1, 0, 1
		 "07540ffc1aeaf6ad4d97e96b0fcc765aae39671d4ae4a27bbd0e796fde167c6a"},
	};
	for (size_t t = 0; t < sizeof grids / sizeof grids[0]; t++) {
		const int n = grids[t].n, w = grids[t].w;
		int off = 0, order = 0, dup = 0;
		uint8_t *le = malloc((size_t)n * (size_t)w);
		for (int i = 0; i < n; i++)
			for (int j = 0; j < w; j++) {
				const int b = grid_byte(grids[t].tab, w, i, j);
				le[w * i + j] = (uint8_t)b;
				int k = 0;
				while (k < 8 && grids[t].bytes[k] >= 0 && grids[t].bytes[k] != b) k++;
				off += k == 8 || grids[t].bytes[k] < 0;
			}
		for (int i = 1; i < n; i++) {
			const uint64_t a = w == 8 ? ((const uint64_t *)grids[t].tab)[i - 1] : ((const uint32_t *)grids[t].tab)[i - 1];
			const uint64_t b = w == 8 ? ((const uint64_t *)grids[t].tab)[i] : ((const uint32_t *)grids[t].tab)[i];
			order += !(a < b);
			for (int k = 0; k < i && !grids[t].sorted; k++)
				dup += (w == 8 ? ((const uint64_t *)grids[t].tab)[k] : ((const uint32_t *)grids[t].tab)[k]) == b;
		}
		CHECKF(off == 0, "%s grid: %d elements outside the published values", grids[t].name, off);
		CHECKF(grids[t].sorted ? order == 0 : dup == 0, "%s grid: entries not ascending and unique", grids[t].name);
		char hex[65];
		sha256_hex(le, (size_t)n * (size_t)w, hex);
		CHECKF(!strcmp(hex, grids[t].sha256), "%s grid: sha256 %s", grids[t].name, hex);
		free(le);
	}
	// the sign rule: 7 bits kept, the 8th the parity (ksigns_iq2xs: 1 -> 129, 3 -> 3, 127 -> 255)
	CHECK(tensor_iq_signs(1) == 129 && tensor_iq_signs(3) == 3 && tensor_iq_signs(127) == 255 && tensor_iq_signs(0) == 0);
	int odd = 0;
	for (uint32_t s7 = 0; s7 < 128; s7++) odd += (__builtin_popcount(tensor_iq_signs(s7)) & 1) || (tensor_iq_signs(s7) & 127) != s7;
	CHECKF(odd == 0, "%d sign bytes break the parity rule", odd);
}

// Test blocks' fields: sub-block ib's scale, group k's index and signs.
static int tb_ls(int ib) { return (5 * ib + 15) % 16; } // 15 first: d is the largest's
static int tb_idx(int ib, int k, int n) { return (97 * ib + 41 * k + 13) % n; }
static int tb_s7(int ib, int l) { return (37 * ib + 23 * l + 5) & 127; }

// The quantizer stores a block the format holds (any grid points and signs, one scale 15) as it is.
static void held_round_trip(uint32_t type, const void *blk) {
	const tensor_traits *tt = tensor_traits_of(type);
	float x[256], z[256];
	uint8_t q[256];
	tt->to_f32(blk, x, 256);
	tt->from_f32(x, q, 256);
	tt->to_f32(q, z, 256);
	int bad = 0;
	for (int e = 0; e < 256; e++) bad += fabsf(z[e] - x[e]) > 1e-3f * fabsf(x[e]);
	CHECKF(bad == 0, "%s: %d elements of a block the format holds change in a round trip", tt->name, bad);
}

static void test_iq3(void) {
	float y[256];
	// IQ3_XXS: element 8l + j of sub-block ib = d (2 ls + 1) / 4 * byte (j % 4) of point
	// qs[8 ib + 2l + j / 4], negative where bit j of the group's signs is set
	block_iq3_xxs b3 = {.d = tensor_f32_to_f16(0.5f)};
	for (int ib = 0; ib < 8; ib++) {
		uint32_t aux = (uint32_t)tb_ls(ib) << 28;
		for (int k = 0; k < 8; k++) b3.qs[8 * ib + k] = (uint8_t)tb_idx(ib, k, 256);
		for (int l = 0; l < 4; l++) aux |= (uint32_t)tb_s7(ib, l) << 7 * l;
		for (int k = 0; k < 4; k++) b3.qs[64 + 4 * ib + k] = (uint8_t)(aux >> 8 * k);
	}
	tensor_traits_of(GGUF_T_IQ3_XXS)->to_f32(&b3, y, 256);
	int bad = 0;
	for (int ib = 0; ib < 8; ib++)
		for (int e = 0; e < 32; e++) {
			const int l = e / 8, j = e % 8, s8 = tb_s7(ib, l) | (__builtin_popcount(tb_s7(ib, l)) & 1) << 7;
			const int g = grid_byte(tensor_iq3xxs_grid, 4, tb_idx(ib, 2 * l + j / 4, 256), j % 4);
			bad += y[32 * ib + e] != 0.5f * (float)(2 * tb_ls(ib) + 1) / 4 * (float)(s8 >> j & 1 ? -g : g);
		}
	CHECKF(bad == 0, "IQ3_XXS: %d elements off their definition", bad);
	// IQ3_S: element j of sub-block ib = d (2 ls + 1) * byte (j % 4) of point qs[8 ib + j / 4] |
	// bit j / 4 of qh[ib] << 8, negative where bit j % 8 of signs[4 ib + j / 8] is set
	block_iq3_s bs = {.d = tensor_f32_to_f16(0.25f)};
	for (int ib = 0; ib < 8; ib++) {
		bs.scales[ib / 2] |= (uint8_t)(tb_ls(ib) << 4 * (ib % 2));
		for (int k = 0; k < 8; k++) {
			bs.qs[8 * ib + k] = (uint8_t)tb_idx(ib, k, 512);
			bs.qh[ib] |= (uint8_t)((tb_idx(ib, k, 512) >> 8) << k);
		}
		for (int l = 0; l < 4; l++) bs.signs[4 * ib + l] = (uint8_t)(tb_s7(ib, l) * 2 + 1);
	}
	tensor_traits_of(GGUF_T_IQ3_S)->to_f32(&bs, y, 256);
	bad = 0;
	for (int ib = 0; ib < 8; ib++)
		for (int e = 0; e < 32; e++) {
			const int g = grid_byte(tensor_iq3s_grid, 4, tb_idx(ib, e / 4, 512), e % 4);
			const int neg = (tb_s7(ib, e / 8) * 2 + 1) >> (e % 8) & 1;
			bad += y[32 * ib + e] != 0.25f * (float)(2 * tb_ls(ib) + 1) * (float)(neg ? -g : g);
		}
	CHECKF(bad == 0, "IQ3_S: %d elements off their definition", bad);
	held_round_trip(GGUF_T_IQ3_XXS, &b3);
	held_round_trip(GGUF_T_IQ3_S, &bs);
}

static void test_iq2(void) {
	float y[256];
	// IQ2_XXS: group l of sub-block ib = d (2 ls + 1) / 8 * point qs[8 ib + l] of the grid, with
	// the signs of bits 7l.. of the u32 at qs[8 ib + 4] (the 8th by parity), ls its top 4 bits
	block_iq2_xxs bx = {.d = tensor_f32_to_f16(0.5f)};
	for (int ib = 0; ib < 8; ib++) {
		uint32_t aux = (uint32_t)tb_ls(ib) << 28;
		for (int l = 0; l < 4; l++) bx.qs[8 * ib + l] = (uint8_t)tb_idx(ib, l, 256), aux |= (uint32_t)tb_s7(ib, l) << 7 * l;
		for (int k = 0; k < 4; k++) bx.qs[8 * ib + 4 + k] = (uint8_t)(aux >> 8 * k);
	}
	tensor_traits_of(GGUF_T_IQ2_XXS)->to_f32(&bx, y, 256);
	int bad = 0;
	for (int e = 0; e < 256; e++) {
		const int ib = e / 32, l = e % 32 / 8, j = e % 8, s8 = tb_s7(ib, l) | (__builtin_popcount(tb_s7(ib, l)) & 1) << 7;
		const int g = grid_byte(tensor_iq2xxs_grid, 8, tb_idx(ib, l, 256), j);
		bad += y[e] != 0.5f * (float)(2 * tb_ls(ib) + 1) / 8 * (float)(s8 >> j & 1 ? -g : g);
	}
	CHECKF(bad == 0, "IQ2_XXS: %d elements off their definition", bad);
	// IQ2_XS: group k (8 elements) = d (2 ls + 1) / 8 * point (u16 k & 511), signs u16 k >> 9 (the
	// 8th by parity); ls per 16: scales[k / 4], low nibble for k % 4 < 2
	block_iq2_xs bxs = {.d = tensor_f32_to_f16(0.25f)};
	for (int k = 0; k < 32; k++) {
		const int v = tb_idx(k / 4, k % 4, 512) | tb_s7(k / 4, k % 4) << 9;
		bxs.qs[2 * k] = (uint8_t)v, bxs.qs[2 * k + 1] = (uint8_t)(v >> 8);
	}
	for (int ib = 0; ib < 8; ib++) bxs.scales[ib] = (uint8_t)(tb_ls(ib) | tb_ls(ib + 3) << 4);
	tensor_traits_of(GGUF_T_IQ2_XS)->to_f32(&bxs, y, 256);
	bad = 0;
	for (int e = 0; e < 256; e++) {
		const int k = e / 8, j = e % 8, ib = k / 4, s7 = tb_s7(ib, k % 4), s8 = s7 | (__builtin_popcount(s7) & 1) << 7;
		const int ls = k % 4 < 2 ? tb_ls(ib) : tb_ls(ib + 3), g = grid_byte(tensor_iq2xs_grid, 8, tb_idx(ib, k % 4, 512), j);
		bad += y[e] != 0.25f * (float)(2 * ls + 1) / 8 * (float)(s8 >> j & 1 ? -g : g);
	}
	CHECKF(bad == 0, "IQ2_XS: %d elements off their definition", bad);
	// IQ2_S: group k = d (2 ls + 1) / 8 * point qs[k] | (bits 2(k % 4).. of qh[k / 4]) << 8, signs
	// qs[32 + k]; ls as IQ2_XS's
	block_iq2_s b2s = {.d = tensor_f32_to_f16(0.125f)};
	for (int k = 0; k < 32; k++) {
		const int idx = tb_idx(k / 4, k % 4, 1024);
		b2s.qs[k] = (uint8_t)idx, b2s.qh[k / 4] |= (uint8_t)((idx >> 8) << 2 * (k % 4));
		b2s.qs[32 + k] = (uint8_t)(tb_s7(k / 4, k % 4) * 2 + 1);
	}
	memcpy(b2s.scales, bxs.scales, sizeof b2s.scales);
	tensor_traits_of(GGUF_T_IQ2_S)->to_f32(&b2s, y, 256);
	bad = 0;
	for (int e = 0; e < 256; e++) {
		const int k = e / 8, j = e % 8, ib = k / 4, neg = (tb_s7(ib, k % 4) * 2 + 1) >> j & 1;
		const int ls = k % 4 < 2 ? tb_ls(ib) : tb_ls(ib + 3), g = grid_byte(tensor_iq2s_grid, 8, tb_idx(ib, k % 4, 1024), j);
		bad += y[e] != 0.125f * (float)(2 * ls + 1) / 8 * (float)(neg ? -g : g);
	}
	CHECKF(bad == 0, "IQ2_S: %d elements off their definition", bad);
	held_round_trip(GGUF_T_IQ2_XXS, &bx);
	held_round_trip(GGUF_T_IQ2_XS, &bxs);
	held_round_trip(GGUF_T_IQ2_S, &b2s);
}

static void test_iq1(void) {
	float y[256];
	// IQ1_S: group l of sub-block ib = d (2 ls + 1) (point (qs[4 ib + l] | bits 3l.. of qh << 8) +
	// delta), qh the u16 of sub-block ib: ls its bits 12..14, delta -1/8 where bit 15 is set
	block_iq1_s b1 = {.d = tensor_f32_to_f16(0.5f)};
	for (int ib = 0; ib < 8; ib++) {
		int qh = (tb_ls(ib) % 8) << 12 | (ib % 3 == 1) << 15;
		for (int l = 0; l < 4; l++) b1.qs[4 * ib + l] = (uint8_t)tb_idx(ib, l, 2048), qh |= (tb_idx(ib, l, 2048) >> 8) << 3 * l;
		b1.qh[2 * ib] = (uint8_t)qh, b1.qh[2 * ib + 1] = (uint8_t)(qh >> 8);
	}
	tensor_traits_of(GGUF_T_IQ1_S)->to_f32(&b1, y, 256);
	int bad = 0;
	for (int e = 0; e < 256; e++) {
		const int ib = e / 32, g = (int8_t)grid_byte(tensor_iq1s_grid, 8, tb_idx(ib, e % 32 / 8, 2048), e % 8);
		bad += y[e] != 0.5f * (float)(2 * (tb_ls(ib) % 8) + 1) * ((float)g + (ib % 3 == 1 ? -0.125f : 0.125f));
	}
	CHECKF(bad == 0, "IQ1_S: %d elements off their definition", bad);
	// IQ1_M: group k = d (2 ls + 1) (point (qs[k] | (nibble k of qh & 7) << 8) + delta), delta -1/8
	// where the nibble's bit 3 is set; ls of 16 h: bits 3 (h % 4).. of u16 h / 4 of scales, d the
	// four u16's top nibbles (the first's the lowest)
	block_iq1_m bm;
	memset(&bm, 0, sizeof bm);
	const uint16_t dh = tensor_f32_to_f16(0.25f);
	uint16_t sc[4] = {0};
	for (int h = 0; h < 16; h++) sc[h / 4] |= (uint16_t)((tb_ls(h) % 8) << 3 * (h % 4));
	for (int k = 0; k < 4; k++) {
		sc[k] |= (uint16_t)((dh >> 4 * k & 15) << 12);
		bm.scales[2 * k] = (uint8_t)sc[k], bm.scales[2 * k + 1] = (uint8_t)(sc[k] >> 8);
	}
	for (int k = 0; k < 32; k++) {
		const int idx = tb_idx(k / 4, k % 4, 2048);
		bm.qs[k] = (uint8_t)idx;
		bm.qh[k / 2] |= (uint8_t)((idx >> 8 | (k % 3 == 2) << 3) << 4 * (k % 2));
	}
	tensor_traits_of(GGUF_T_IQ1_M)->to_f32(&bm, y, 256);
	bad = 0;
	for (int e = 0; e < 256; e++) {
		const int k = e / 8, g = (int8_t)grid_byte(tensor_iq1s_grid, 8, tb_idx(k / 4, k % 4, 2048), e % 8);
		bad += y[e] != 0.25f * (float)(2 * (tb_ls(e / 16) % 8) + 1) * ((float)g + (k % 3 == 2 ? -0.125f : 0.125f));
	}
	CHECKF(bad == 0, "IQ1_M: %d elements off their definition", bad);
	held_round_trip(GGUF_T_IQ1_S, &b1);
	held_round_trip(GGUF_T_IQ1_M, &bm);
}

// ---- the codes every kernel set reads, against the reference dequantization -------------
// Random blocks of each new type decoded to codes (kern_decode, what the x86 sets pack and the
// reference's 8-bit width multiplies) give the reference's values bit for bit: d sc_j mul v(u)
// for the grid types, Q2_K's d sc u - dmin mn for the ternary ones.
static void test_codes(void) {
	static const uint32_t types[] = {GGUF_T_TQ1_0, GGUF_T_TQ2_0, GGUF_T_IQ3_XXS, GGUF_T_IQ3_S, GGUF_T_IQ2_XXS,
					 GGUF_T_IQ2_XS, GGUF_T_IQ2_S, GGUF_T_IQ1_S, GGUF_T_IQ1_M};
	uint64_t s = 5;
	for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
		const tensor_traits *tt = tensor_traits_of(types[t]);
		const kern_iq_codebook *cb = kern_iq_codebook_of(types[t]);
		CHECKF(kern_has_codes(types[t]) && (cb != NULL) == (kern_codes_as(types[t]) == types[t]), "%s: codes", tt->name);
		int bad = 0;
		for (int rep = 0; rep < 64; rep++) {
			uint8_t blk[128];
			float y[256];
			for (size_t i = 0; i < tt->bytes; i++) blk[i] = (uint8_t)(splitmix64(s++) >> 24);
			// a finite d of moderate size (IQ1_M keeps d's nibbles in its scales' top bits)
			const uint16_t dh = tensor_f32_to_f16((float)(rep + 1) / 64.0f);
			if (types[t] == GGUF_T_IQ1_M)
				for (int k = 0; k < 4; k++) blk[2 * k + 1 + 48] = (uint8_t)((blk[2 * k + 1 + 48] & 15) | (dh >> 4 * k & 15) << 4);
			else if (types[t] == GGUF_T_TQ1_0 || types[t] == GGUF_T_TQ2_0) memcpy(blk + tt->bytes - 2, &dh, 2);
			else memcpy(blk, &dh, 2);
			tt->to_f32(blk, y, 256);
			kern_codes dc;
			kern_decode(types[t], blk, &dc, false);
			const float d = tensor_f16_to_f32(dc.d), m = tensor_f16_to_f32(dc.m);
			for (int e = 0; e < 256; e++) {
				const float v = cb ? d * (float)dc.sc[e / 16] * cb->mul * (float)cb->v[dc.u[e]]
						   : d * (float)(dc.sc[e / 16] & 15) * (float)dc.u[e] - m * (float)(dc.sc[e / 16] >> 4);
				bad += f_bits(v) != f_bits(y[e]);
			}
		}
		CHECKF(bad == 0, "%s: %d elements of random blocks whose codes differ from the reference", tt->name, bad);
	}
}

// ---- golden tensors ----------------------------------------------------------------------
static float dot_natural(const float *w, const float *x, int64_t n) {
	float s = 0.0f;
	for (int64_t i = 0; i < n; i++) s += w[i] * x[i];
	return s;
}

static void test_golden(void) {
	char path[1024], err[256];
	snprintf(path, sizeof path, "%s/golden/tensors/index.json", t_shared());
	json_error_t jerr;
	json_t *idx = json_load_file(path, 0, &jerr);
	CHECKF(idx != NULL, "%s: %s", path, jerr.text);
	if (!idx) return;
	const char *fname;
	json_t *ent;
	int n_checked = 0;
	json_object_foreach(idx, fname, ent) {
		const char *model = json_string_value(json_object_get(ent, "model"));
		const char *tname = json_string_value(json_object_get(ent, "tensor"));
		const char *type = json_string_value(json_object_get(ent, "type"));
		json_t *ne = json_object_get(ent, "shape_ne");
		CHECK(model && tname && type && json_array_size(ne) == 2);
		if (!model || !tname || !type || json_array_size(ne) != 2) continue;
		int64_t cols = json_integer_value(json_array_get(ne, 0));
		int64_t rows = json_integer_value(json_array_get(ne, 1));

		snprintf(path, sizeof path, "%s/models/%s", t_shared(), model);
		gguf *g = NULL;
		int rc = gguf_open(&g, path, err, sizeof err);
		CHECKF(rc == 0, "%s: %s", path, err);
		if (rc) continue;
		const gguf_tensor *t = gguf_find_tensor(g, tname);
		CHECKF(t != NULL, "%s in %s", tname, model);
		const tensor_traits *tt = t ? tensor_traits_of(t->type) : NULL;
		CHECKF(tt && !strcmp(tt->name, type), "%s %s: type", model, tname);
		if (!t || !tt) goto next;
		CHECK(t->ne[0] == cols && t->ne[1] == rows);

		size_t gold_len = 0;
		snprintf(path, sizeof path, "%s/golden/tensors/%s", t_shared(), fname);
		float *gold = (float *)t_read_file(path, &gold_len);
		CHECKF(gold && gold_len == (size_t)(rows * cols) * 4, "%s", path);
		float *ours = malloc((size_t)(rows * cols) * 4);
		size_t rb = tensor_row_bytes(t->type, cols);
		CHECK(rb * (size_t)rows == t->nbytes);
		if (gold && ours && gold_len == (size_t)(rows * cols) * 4) {
			for (int64_t r = 0; r < rows; r++)
				tt->to_f32((const uint8_t *)t->data + r * rb, ours + r * cols, cols);
			CHECKF(!memcmp(ours, gold, gold_len), "%s: dequantization differs", fname);
			// The whole tensor in one call equals row by row.
			float *whole = malloc(gold_len);
			tt->to_f32(t->data, whole, rows * cols);
			CHECK(!memcmp(whole, gold, gold_len));
			free(whole);
			// vec_dot_f32 is the natural-order sum over the dequantized row, bit for bit.
			float *x = malloc((size_t)cols * 4);
			uint64_t s = 42;
			for (int64_t i = 0; i < cols; i++)
				x[i] = (float)((int64_t)(splitmix64(s++) >> 40) - (1 << 23)) / (1 << 23);
			int bad = 0;
			for (int64_t r = 0; r < rows; r += 7) {
				float a = tt->vec_dot_f32((const uint8_t *)t->data + r * rb, x, cols);
				float b = dot_natural(gold + r * cols, x, cols);
				if (f_bits(a) != f_bits(b)) bad++;
			}
			CHECKF(bad == 0, "%s: vec_dot_f32 differs on %d rows", fname, bad);
			free(x);
			n_checked++;
		}
		free(gold);
		free(ours);
	next:
		gguf_free(g);
	}
	CHECKF(n_checked >= 39, "checked %d golden tensors", n_checked);
	json_decref(idx);
}

// ---- our quantizers reproduce llama.cpp's files from the F32 model ------------------------
static void test_quantize_matches_llamacpp(void) {
	static const char *models[] = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K",
				       "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"};
	char path[1024], err[256];
	gguf *src = NULL;
	snprintf(path, sizeof path, "%s/models/ref-llama-F32.gguf", t_shared());
	int rc = gguf_open(&src, path, err, sizeof err);
	CHECKF(rc == 0, "%s", err);
	if (rc) return;
	int seen[GGUF_T_COUNT] = {0};
	for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
		gguf *q = NULL;
		snprintf(path, sizeof path, "%s/models/ref-llama-%s.gguf", t_shared(), models[m]);
		rc = gguf_open(&q, path, err, sizeof err);
		CHECKF(rc == 0, "%s", err);
		if (rc) continue;
		for (int64_t i = 0; i < gguf_n_tensors(q); i++) {
			const gguf_tensor *tq = gguf_tensor_at(q, i);
			const gguf_tensor *tf = gguf_find_tensor(src, tq->name);
			const tensor_traits *tt = tensor_traits_of(tq->type);
			if (!tf || tf->type != GGUF_T_F32 || !tt || tq->type == GGUF_T_F32) continue;
			int64_t n = gguf_tensor_nelem(tq);
			void *buf = malloc(tq->nbytes);
			tt->from_f32(tf->data, buf, n);
			CHECKF(!memcmp(buf, tq->data, tq->nbytes), "%s %s (%s): quantized bytes differ",
			       models[m], tq->name, tt->name);
			seen[tq->type]++;
			free(buf);
		}
		gguf_free(q);
	}
	static const uint32_t want[] = {GGUF_T_Q8_0, GGUF_T_Q4_0, GGUF_T_Q4_1, GGUF_T_Q5_0,
					GGUF_T_Q5_1, GGUF_T_Q2_K, GGUF_T_Q3_K, GGUF_T_Q4_K,
					GGUF_T_Q5_K, GGUF_T_Q6_K};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
		CHECKF(seen[want[i]] > 0, "no %s tensor compared", tensor_traits_of(want[i])->name);
	gguf_free(src);
}

// ---- round trips on random data ----------------------------------------------------------
static double gauss(uint64_t *s) {
	double u1 = ((splitmix64((*s)++) >> 11) + 1.0) / 9007199254740993.0;
	double u2 = (splitmix64((*s)++) >> 11) / 9007199254740992.0;
	return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

static void test_round_trip(void) {
	// Relative RMS error bounds for Gaussian data (expected: about half of each bound).
	static const struct { uint32_t type; double bound; } cases[] = {
		{GGUF_T_F32, 0.0},      {GGUF_T_F16, 0.0005},  {GGUF_T_BF16, 0.004},
		{GGUF_T_Q8_0, 0.008},   {GGUF_T_Q8_1, 0.008},  {GGUF_T_Q8_K, 0.009},
		{GGUF_T_Q6_K, 0.025},   {GGUF_T_Q5_0, 0.06},   {GGUF_T_Q5_1, 0.05},
		{GGUF_T_Q5_K, 0.045},   {GGUF_T_Q4_0, 0.12},   {GGUF_T_Q4_1, 0.10},
		{GGUF_T_Q4_K, 0.09},    {GGUF_T_Q3_K, 0.20},   {GGUF_T_Q2_K, 0.40},
		{GGUF_T_IQ4_NL, 0.09},  {GGUF_T_IQ4_XS, 0.09},
		// ternary at the block's largest magnitude: most Gaussian values round to 0
		{GGUF_T_TQ1_0, 0.85},   {GGUF_T_TQ2_0, 0.85},
		// the grid types: about a tenth above what lanes's quantizer gives, so a worse search fails
		{GGUF_T_IQ3_XXS, 0.20}, {GGUF_T_IQ3_S, 0.15},
		{GGUF_T_IQ2_XXS, 0.36}, {GGUF_T_IQ2_XS, 0.32}, {GGUF_T_IQ2_S, 0.27},
		{GGUF_T_IQ1_S, 0.49},   {GGUF_T_IQ1_M, 0.45},
		{GGUF_T_MXFP4, 0.2},
	};
	const int64_t n = 256 * 64;
	float *x = malloc(n * 4), *y = malloc(n * 4);
	void *q = malloc(n * 4 + 64);
	uint64_t s = 7;
	for (int64_t i = 0; i < n; i++) x[i] = (float)(gauss(&s) * 0.02);
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		const tensor_traits *tt = tensor_traits_of(cases[c].type);
		tt->from_f32(x, q, n);
		tt->to_f32(q, y, n);
		double se = 0, sx = 0;
		for (int64_t i = 0; i < n; i++) {
			se += (double)(y[i] - x[i]) * (y[i] - x[i]);
			sx += (double)x[i] * x[i];
		}
		double rel = sqrt(se / sx);
		CHECKF(rel <= cases[c].bound, "%s: relative RMS error %.5f > %.5f", tt->name, rel,
		       cases[c].bound);
		// Quantizing is deterministic and a second round trip changes little.
		void *q2 = malloc(n * 4 + 64);
		tt->from_f32(x, q2, n);
		CHECKF(!memcmp(q, q2, tensor_row_bytes(cases[c].type, n)), "%s not deterministic", tt->name);
		free(q2);
		// All-zero input gives all-zero output.
		memset(x, 0, 256 * 4);
		tt->from_f32(x, q, 256);
		tt->to_f32(q, y, 256);
		int nz = 0;
		for (int i = 0; i < 256; i++) nz += y[i] != 0.0f;
		CHECKF(nz == 0, "%s: zeros do not round trip", tt->name);
		s = 7;
		for (int64_t i = 0; i < 256; i++) x[i] = (float)(gauss(&s) * 0.02);
	}
	// Wide dynamic range inside one row: large outliers must not break small blocks.
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		const tensor_traits *tt = tensor_traits_of(cases[c].type);
		for (int64_t i = 0; i < 1024; i++) x[i] = (float)(gauss(&s) * (i < 512 ? 1e-3 : 50.0));
		tt->from_f32(x, q, 1024);
		tt->to_f32(q, y, 1024);
		int ok = 1;
		for (int64_t i = 0; i < 1024; i++) ok &= isfinite(y[i]) && fabsf(y[i]) < 1000.0f;
		CHECKF(ok, "%s: non-finite or huge values", tt->name);
	}
	free(x);
	free(y);
	free(q);
}

// ---- fp16 / bf16 -------------------------------------------------------------------------
static uint16_t nearest_f16_brute(float f) {
	// Among all finite fp16 values of the same sign choose the nearest (ties: even mantissa).
	double v = fabs((double)f);
	uint16_t sign = (f_bits(f) >> 16) & 0x8000;
	if (v >= 65520.0) return sign | 0x7c00;
	uint16_t lo = 0, hi = 0x7bff;
	while (lo < hi) { // largest h with value(h) <= v
		uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
		if ((double)tensor_f16_to_f32(mid) <= v) lo = mid;
		else hi = mid - 1;
	}
	uint16_t h = lo;
	if (h < 0x7bff) {
		double a = tensor_f16_to_f32(h), b = tensor_f16_to_f32(h + 1);
		if (v - a > b - v || (v - a == b - v && (h & 1))) h++;
	} else if (v > 65504.0) {
		h = 0x7bff;
	}
	return sign | h;
}

static void test_half(void) {
	// Exhaustive: every non-NaN fp16 survives f16 -> f32 -> f16; NaNs stay NaN.
	int bad = 0, badnan = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		float f = tensor_f16_to_f32((uint16_t)h);
		bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
		if (is_nan) badnan += !isnan(f) || (tensor_f32_to_f16(f) & 0x7fff) <= 0x7c00;
		else bad += tensor_f32_to_f16(f) != h;
	}
	CHECKF(bad == 0, "%d fp16 values do not round trip", bad);
	CHECK(badnan == 0);
	CHECK(tensor_f16_to_f32(0x3c00) == 1.0f);
	CHECK(tensor_f16_to_f32(0xc000) == -2.0f);
	CHECK(tensor_f16_to_f32(0x7bff) == 65504.0f);
	CHECK(tensor_f16_to_f32(0x0001) == 0x1p-24f);
	CHECK(tensor_f16_to_f32(0x0400) == 0x1p-14f);
	CHECK(tensor_f16_to_f32(0x03ff) == 0x3ffp-24f);
	CHECK(isinf(tensor_f16_to_f32(0x7c00)) && tensor_f16_to_f32(0xfc00) < 0);
	CHECK(f_bits(tensor_f16_to_f32(0x8000)) == 0x80000000u);
	// Narrowing edges.
	CHECK(tensor_f32_to_f16(65504.0f) == 0x7bff);
	CHECK(tensor_f32_to_f16(65519.0f) == 0x7bff);
	CHECK(tensor_f32_to_f16(65520.0f) == 0x7c00);
	CHECK(tensor_f32_to_f16(1e10f) == 0x7c00);
	CHECK(tensor_f32_to_f16(-INFINITY) == 0xfc00);
	CHECK(tensor_f32_to_f16(0x1p-25f) == 0x0000);                // tie to even: zero
	CHECK(tensor_f32_to_f16(bits_f(f_bits(0x1p-25f) + 1)) == 1); // just above: smallest subnormal
	CHECK(tensor_f32_to_f16(0x3p-25f) == 0x0002);                // 1.5 units: tie to even 2
	CHECK(tensor_f32_to_f16(0x5p-25f) == 0x0002);                // 2.5 units: tie to even 2
	CHECK(tensor_f32_to_f16(-0x1p-30f) == 0x8000);
	CHECK(tensor_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00);         // tie: even
	CHECK(tensor_f32_to_f16(1.0f + 0x3p-11f) == 0x3c02);         // tie: even (up)
	CHECK(tensor_f32_to_f16(0x7ffp-25f) == 0x0400);              // rounds up into the normals
	uint16_t hn = tensor_f32_to_f16(NAN);
	CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) && (hn & 0x200));
	uint16_t hs = tensor_f32_to_f16(bits_f(0x7f800001u)); // signalling NaN becomes quiet NaN
	CHECK((hs & 0x7c00) == 0x7c00 && (hs & 0x200));
	// Random floats across the whole fp16 range against a brute-force nearest search.
	uint64_t s = 99;
	bad = 0;
	for (int i = 0; i < 200000; i++) {
		uint64_t r = splitmix64(s++);
		int e = (int)(r % 45) - 28; // 2^-28 .. 2^16
		float f = ldexpf(1.0f + (float)((r >> 8) & 0xffffff) / 16777216.0f, e);
		if (r & (1ull << 62)) f = -f;
		if (tensor_f32_to_f16(f) != nearest_f16_brute(f)) bad++;
	}
	CHECKF(bad == 0, "%d random floats round wrongly to fp16", bad);
	// Every midpoint between neighbouring fp16 values rounds to the even one.
	bad = 0;
	for (uint32_t h = 0; h < 0x7bff; h++) {
		double mid = ((double)tensor_f16_to_f32((uint16_t)h) + tensor_f16_to_f32((uint16_t)(h + 1))) / 2;
		uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
		if (tensor_f32_to_f16((float)mid) != want) bad++;
	}
	CHECKF(bad == 0, "%d fp16 midpoints round wrongly", bad);

	// bf16: exhaustive round trip, ties to even, NaN quiet.
	bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		float f = tensor_bf16_to_f32((uint16_t)h);
		if (isnan(f)) continue;
		bad += tensor_f32_to_bf16(f) != h;
	}
	CHECKF(bad == 0, "%d bf16 values do not round trip", bad);
	CHECK(tensor_f32_to_bf16(1.0f) == 0x3f80);
	CHECK(tensor_f32_to_bf16(bits_f(0x3f808000u)) == 0x3f80); // tie: even
	CHECK(tensor_f32_to_bf16(bits_f(0x3f818000u)) == 0x3f82); // tie: even (up)
	CHECK(tensor_f32_to_bf16(bits_f(0x3f808001u)) == 0x3f81);
	CHECK(tensor_f32_to_bf16(bits_f(0x7f7fffffu)) == 0x7f80); // FLT_MAX rounds to inf
	CHECK(tensor_f32_to_bf16(bits_f(0x00000001u)) == 0x0000); // subnormals round, not flush
	CHECK(tensor_f32_to_bf16(bits_f(0x00008000u)) == 0x0000);
	CHECK(tensor_f32_to_bf16(bits_f(0x00018000u)) == 0x0002);
	CHECK(tensor_f32_to_bf16(bits_f(0x7f800001u)) == 0x7fc0); // sNaN: quiet, stays NaN
	CHECK(tensor_f32_to_bf16(bits_f(0xffc00000u)) == 0xffc0);
	CHECK(tensor_bf16_to_f32(0xc040) == -3.0f);
}


// ---- importance: the types that take an importance matrix fit to the weighted error -------------
static void test_importance(void) {
	static const uint32_t takes[] = {GGUF_T_Q2_K,	 GGUF_T_Q3_K,	GGUF_T_Q4_K,   GGUF_T_Q5_K,   GGUF_T_Q6_K,
					 GGUF_T_IQ4_NL,	 GGUF_T_IQ4_XS, GGUF_T_IQ3_XXS, GGUF_T_IQ3_S,  GGUF_T_IQ2_XXS,
					 GGUF_T_IQ2_XS, GGUF_T_IQ2_S,	GGUF_T_IQ1_S,  GGUF_T_IQ1_M};
	enum { COLS = 1024, ROWS = 8 };
	float *x = malloc(COLS * ROWS * 4), *y = malloc(COLS * ROWS * 4), imp[COLS];
	void *q = malloc(COLS * ROWS * 4);
	uint64_t s = 99;
	for (int i = 0; i < COLS * ROWS; i++) x[i] = (float)(gauss(&s) * 0.02);
	// one column in eight carries large activations, as an importance matrix finds
	for (int c = 0; c < COLS; c++) imp[c] = c % 8 == 3 ? 50.0f : 0.05f;
	int n_takes = 0;
	for (size_t t = 0; t < N_TYPES; t++) {
		const tensor_traits *tt = tensor_traits_of(all_types[t]);
		bool listed = false;
		for (size_t k = 0; k < sizeof takes / sizeof takes[0]; k++) listed |= takes[k] == all_types[t];
		CHECKF(!!tt->from_f32_imp == listed, "%s: takes an importance matrix: %d", tt->name, !!tt->from_f32_imp);
		if (!tt->from_f32_imp) continue;
		n_takes++;
		const size_t rb = tensor_row_bytes(all_types[t], COLS);
		double e[2];
		for (int with = 0; with < 2; with++) {
			for (int r = 0; r < ROWS; r++) {
				if (with) tt->from_f32_imp(x + r * COLS, (uint8_t *)q + r * rb, COLS, imp);
				else tt->from_f32(x + r * COLS, (uint8_t *)q + r * rb, COLS);
			}
			tt->to_f32(q, y, COLS * ROWS);
			e[with] = 0;
			for (int i = 0; i < COLS * ROWS; i++) e[with] += imp[i % COLS] * (double)(x[i] - y[i]) * (x[i] - y[i]);
		}
		printf("importance %s: weighted error %.4g without, %.4g with (%.0f%% lower)\n", tt->name, e[0], e[1], 100 * (1 - e[1] / e[0]));
		CHECKF(e[1] < 0.9 * e[0], "%s: importance-weighted error %.4g with the importances, %.4g without", tt->name, e[1], e[0]);
		// no importances: the plain quantizer's bytes
		tt->from_f32(x, y, COLS);
		tt->from_f32_imp(x, q, COLS, NULL);
		CHECKF(!memcmp(y, q, rb), "%s: from_f32_imp without importances differs from from_f32", tt->name);
	}
	CHECK(n_takes == (int)(sizeof takes / sizeof takes[0]));
	free(x), free(y), free(q);
}

// ---- the grid quantizers' search: every instruction set's build finds the same points ----------
static void test_search_builds(void) {
	static const uint32_t grid_types[] = {GGUF_T_IQ3_XXS, GGUF_T_IQ3_S, GGUF_T_IQ2_XXS, GGUF_T_IQ2_XS,
					      GGUF_T_IQ2_S,   GGUF_T_IQ1_S, GGUF_T_IQ1_M};
	enum { COLS = 512, ROWS = 2 };
	const char *sets[8];
	const int nsets = tensor_kernels_available(sets, 8);
	const char *best = tensor_kernels_name(tensor_kernels_default());
	float *x = malloc(COLS * ROWS * 4), imp[COLS];
	uint8_t *q[8];
	uint64_t s = 7;
	for (int i = 0; i < COLS * ROWS; i++) x[i] = (float)(gauss(&s) * 0.02);
	for (int c = 0; c < COLS; c++) imp[c] = c % 5 == 1 ? 20.0f : 0.5f;
	int builds = 0;
	for (size_t t = 0; t < sizeof grid_types / sizeof grid_types[0]; t++) {
		const tensor_traits *tt = tensor_traits_of(grid_types[t]);
		const size_t rb = tensor_row_bytes(grid_types[t], COLS);
		for (int k = 0; k < nsets; k++) {
			q[k] = malloc(2 * ROWS * rb);
			CHECK(tensor_kernels_select(sets[k]) == LANES_OK);
			const char *b = iq_search_build(), *want = "portable";
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
			if (!strcmp(sets[k], "avx512") || !strcmp(sets[k], "avx2")) want = sets[k];
#endif
			CHECKF(!strcmp(b, want), "set %s runs the %s search, not the %s one", sets[k], b, want);
			builds += t == 0 && strcmp(b, "portable");
			for (int r = 0; r < ROWS; r++) {
				tt->from_f32(x + r * COLS, q[k] + r * rb, COLS);
				tt->from_f32_imp(x + r * COLS, q[k] + (ROWS + r) * rb, COLS, imp);
			}
			CHECKF(k == 0 || !memcmp(q[0], q[k], 2 * ROWS * rb), "%s: the %s search's bytes differ from the %s one's",
			       tt->name, sets[k], sets[0]);
		}
		for (int k = 0; k < nsets; k++) free(q[k]);
	}
	printf("grid search: %d kernel sets, %d with their own build of the search\n", nsets, builds);
	CHECK(tensor_kernels_select(best) == LANES_OK);
	free(x);
}

int main(void) {
	test_sizes();
	test_iq4();
	test_mxfp4();
	test_tq();
	test_grids();
	test_iq3();
	test_iq2();
	test_iq1();
	test_codes();
	test_half();
	test_round_trip();
	test_golden();
	test_quantize_matches_llamacpp();
	test_importance();
	test_search_builds();
	T_DONE("tensor_formats");
}
