// tensor: block formats of the GGUF tensor types (layouts as ggml's, sizes pinned by
// static_assert), fp16/bf16 conversion, reference quantize/dequantize, and one traits
// table indexed by enum gguf_ttype that maps a type to its converters and kernels.
#ifndef LANES_TENSOR_H
#define LANES_TENSOR_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "gguf/gguf.h"

// ---- half precision ---------------------------------------------------------------------
// fp16 <-> f32: exact widening; narrowing rounds to nearest even, handles subnormals,
// overflows to inf, keeps NaN a (quiet) NaN.
float tensor_f16_to_f32(uint16_t h);
uint16_t tensor_f32_to_f16(float f);
// bf16 <-> f32 as ggml: narrowing rounds to nearest even; a NaN stays NaN with the quiet bit set.
float tensor_bf16_to_f32(uint16_t h);
uint16_t tensor_f32_to_bf16(float f);

// ---- block layouts (little-endian, packed as ggml writes them) --------------------------
#define QK4_0 GGUF_BLOCK_Q4_0
#define QK4_1 GGUF_BLOCK_Q4_1
#define QK5_0 GGUF_BLOCK_Q5_0
#define QK5_1 GGUF_BLOCK_Q5_1
#define QK8_0 GGUF_BLOCK_Q8_0
#define QK8_1 GGUF_BLOCK_Q8_1
#define QK_K GGUF_BLOCK_Q2_K // the K types share one super-block; each asserts it below
#define K_SCALE_SIZE 12

typedef struct {
	uint16_t d;             // fp16 scale
	uint8_t qs[QK4_0 / 2];  // nibbles: low = element j, high = element j+16
} block_q4_0;
static_assert(sizeof(block_q4_0) == 2 + QK4_0 / 2, "block_q4_0 size");
static_assert(sizeof(block_q4_0) == GGUF_BYTES_Q4_0 && QK4_0 == GGUF_BLOCK_Q4_0, "block_q4_0: the GGUF list");

typedef struct {
	uint16_t d;             // fp16 scale
	uint16_t m;             // fp16 minimum
	uint8_t qs[QK4_1 / 2];
} block_q4_1;
static_assert(sizeof(block_q4_1) == 4 + QK4_1 / 2, "block_q4_1 size");
static_assert(sizeof(block_q4_1) == GGUF_BYTES_Q4_1 && QK4_1 == GGUF_BLOCK_Q4_1, "block_q4_1: the GGUF list");

typedef struct {
	uint16_t d;             // fp16 scale
	uint8_t qh[4];          // 5th bits, little-endian u32: bit j = element j
	uint8_t qs[QK5_0 / 2];
} block_q5_0;
static_assert(sizeof(block_q5_0) == 2 + 4 + QK5_0 / 2, "block_q5_0 size");
static_assert(sizeof(block_q5_0) == GGUF_BYTES_Q5_0 && QK5_0 == GGUF_BLOCK_Q5_0, "block_q5_0: the GGUF list");

typedef struct {
	uint16_t d;             // fp16 scale
	uint16_t m;             // fp16 minimum
	uint8_t qh[4];
	uint8_t qs[QK5_1 / 2];
} block_q5_1;
static_assert(sizeof(block_q5_1) == 4 + 4 + QK5_1 / 2, "block_q5_1 size");
static_assert(sizeof(block_q5_1) == GGUF_BYTES_Q5_1 && QK5_1 == GGUF_BLOCK_Q5_1, "block_q5_1: the GGUF list");

typedef struct {
	uint16_t d;             // fp16 scale
	int8_t qs[QK8_0];
} block_q8_0;
static_assert(sizeof(block_q8_0) == 2 + QK8_0, "block_q8_0 size");
static_assert(sizeof(block_q8_0) == GGUF_BYTES_Q8_0 && QK8_0 == GGUF_BLOCK_Q8_0, "block_q8_0: the GGUF list");

typedef struct {
	uint16_t d;             // fp16 scale
	uint16_t s;             // fp16 of d * sum(qs)
	int8_t qs[QK8_1];
} block_q8_1;
static_assert(sizeof(block_q8_1) == 4 + QK8_1, "block_q8_1 size");
static_assert(sizeof(block_q8_1) == GGUF_BYTES_Q8_1 && QK8_1 == GGUF_BLOCK_Q8_1, "block_q8_1: the GGUF list");

// K-quants: super-blocks of QK_K = 256 elements.
typedef struct {
	uint8_t scales[QK_K / 16]; // per 16 elements: low nibble scale, high nibble min
	uint8_t qs[QK_K / 4];      // 2-bit quants
	uint16_t d;                // fp16 super-block scale for scales
	uint16_t dmin;             // fp16 super-block scale for mins
} block_q2_K;
static_assert(sizeof(block_q2_K) == 2 * 2 + QK_K / 16 + QK_K / 4, "block_q2_K size");
static_assert(sizeof(block_q2_K) == GGUF_BYTES_Q2_K && QK_K == GGUF_BLOCK_Q2_K, "block_q2_K: the GGUF list");

typedef struct {
	uint8_t hmask[QK_K / 8];   // high bit of each 3-bit quant
	uint8_t qs[QK_K / 4];      // low 2 bits
	uint8_t scales[12];        // 16 6-bit scales
	uint16_t d;                // fp16 super-block scale
} block_q3_K;
static_assert(sizeof(block_q3_K) == 2 + QK_K / 4 + QK_K / 8 + 12, "block_q3_K size");
static_assert(sizeof(block_q3_K) == GGUF_BYTES_Q3_K && QK_K == GGUF_BLOCK_Q3_K, "block_q3_K: the GGUF list");

typedef struct {
	uint16_t d;                     // fp16 super-block scale for scales
	uint16_t dmin;                  // fp16 super-block scale for mins
	uint8_t scales[K_SCALE_SIZE];   // 8 scales and 8 mins, 6 bits each
	uint8_t qs[QK_K / 2];           // 4-bit quants
} block_q4_K;
static_assert(sizeof(block_q4_K) == 2 * 2 + K_SCALE_SIZE + QK_K / 2, "block_q4_K size");
static_assert(sizeof(block_q4_K) == GGUF_BYTES_Q4_K && QK_K == GGUF_BLOCK_Q4_K, "block_q4_K: the GGUF list");

typedef struct {
	uint16_t d;
	uint16_t dmin;
	uint8_t scales[K_SCALE_SIZE];
	uint8_t qh[QK_K / 8];           // 5th bits
	uint8_t qs[QK_K / 2];           // low 4 bits
} block_q5_K;
static_assert(sizeof(block_q5_K) == 2 * 2 + K_SCALE_SIZE + QK_K / 2 + QK_K / 8, "block_q5_K size");
static_assert(sizeof(block_q5_K) == GGUF_BYTES_Q5_K && QK_K == GGUF_BLOCK_Q5_K, "block_q5_K: the GGUF list");

typedef struct {
	uint8_t ql[QK_K / 2];      // low 4 bits
	uint8_t qh[QK_K / 4];      // high 2 bits
	int8_t scales[QK_K / 16];  // 8-bit scales
	uint16_t d;                // fp16 super-block scale
} block_q6_K;
static_assert(sizeof(block_q6_K) == 2 + QK_K / 16 + 3 * QK_K / 4, "block_q6_K size");
static_assert(sizeof(block_q6_K) == GGUF_BYTES_Q6_K && QK_K == GGUF_BLOCK_Q6_K, "block_q6_K: the GGUF list");

// Non-linear 4-bit types: each code indexes the codebook tensor_iq4nl_values.
#define QK4_NL GGUF_BLOCK_IQ4_NL

typedef struct {
	uint16_t d;              // fp16 scale
	uint8_t qs[QK4_NL / 2];  // indices: low nibble = element j, high = element j+16
} block_iq4_nl;
static_assert(sizeof(block_iq4_nl) == 2 + QK4_NL / 2, "block_iq4_nl size");
static_assert(sizeof(block_iq4_nl) == GGUF_BYTES_IQ4_NL && QK4_NL == GGUF_BLOCK_IQ4_NL, "block_iq4_nl: the GGUF list");

typedef struct {
	uint16_t d;                // fp16 super-block scale
	uint16_t scales_h;         // high 2 bits of the 8 sub-block scales, 2 per sub-block
	uint8_t scales_l[QK_K / 64]; // low 4 bits of the sub-block scales, 2 per byte
	uint8_t qs[QK_K / 2];      // indices: per 32, low nibbles = elements 0..15, high = 16..31
} block_iq4_xs;
static_assert(sizeof(block_iq4_xs) == 2 + 2 + QK_K / 64 + QK_K / 2, "block_iq4_xs size");
static_assert(sizeof(block_iq4_xs) == GGUF_BYTES_IQ4_XS && QK_K == GGUF_BLOCK_IQ4_XS, "block_iq4_xs: the GGUF list");

// The 16 values of the IQ4_NL / IQ4_XS codebook, ascending: an element is scale * value[code].
extern const int8_t tensor_iq4nl_values[16];
// IQ4_XS: the 6-bit scale of sub-block ib (0..7), stored biased by 32.
static inline int tensor_iq4xs_scale(const block_iq4_xs *b, int ib) {
	return ((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | ((b->scales_h >> 2 * ib) & 3) << 4;
}

// MXFP4 (OCP microscaling FP4): 32 E2M1 codes under one E8M0 exponent, ggml's layout.
#define QK_MXFP4 GGUF_BLOCK_MXFP4

typedef struct {
	uint8_t e;                 // E8M0 shared exponent: the block's scale is 2^(e - 127)
	uint8_t qs[QK_MXFP4 / 2];  // E2M1 codes: low nibble = element j, high = element j+16
} block_mxfp4;
static_assert(sizeof(block_mxfp4) == 1 + QK_MXFP4 / 2, "block_mxfp4 size");
static_assert(sizeof(block_mxfp4) == GGUF_BYTES_MXFP4 && QK_MXFP4 == GGUF_BLOCK_MXFP4, "block_mxfp4: the GGUF list");

// The 16 E2M1 values doubled (integers, so they dot as int8 codes): an element is
// tensor_e8m0_half(e) * value[code]. Code bit 3 is the sign, bits 2..1 the exponent, bit 0 the mantissa.
extern const int8_t tensor_mxfp4_values[16];
// 2^(e - 128), half the E8M0 scale (the codebook is doubled); exact for every e, 0 and 1 subnormal.
static inline float tensor_e8m0_half(uint8_t e) {
	union { uint32_t u; float f; } v = {.u = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23};
	return v.f;
}

// Ternary types (BitNet b1.58, TriLMs): element = d * (t - 1), t in {0, 1, 2} a trit.
typedef struct {
	uint8_t qs[(QK_K - 4 * QK_K / 64) / 5]; // 240 trits, 5 per byte (see tensor_tq1_trit)
	uint8_t qh[QK_K / 64];                  // the last 16 trits, 4 per byte
	uint16_t d;                             // fp16 scale
} block_tq1_0;
static_assert(sizeof(block_tq1_0) == (QK_K - 4 * QK_K / 64) / 5 + QK_K / 64 + 2, "block_tq1_0 size");
static_assert(sizeof(block_tq1_0) == GGUF_BYTES_TQ1_0 && QK_K == GGUF_BLOCK_TQ1_0, "block_tq1_0: the GGUF list");

typedef struct {
	uint8_t qs[QK_K / 4]; // 2-bit trits: bits 2l of byte 32c + m = element 128c + 32l + m
	uint16_t d;           // fp16 scale
} block_tq2_0;
static_assert(sizeof(block_tq2_0) == QK_K / 4 + 2, "block_tq2_0 size");
static_assert(sizeof(block_tq2_0) == GGUF_BYTES_TQ2_0 && QK_K == GGUF_BLOCK_TQ2_0, "block_tq2_0: the GGUF list");

// TQ1_0: a byte q holds the trits t_0..t_4 as q = ceil(256 v / 243), v = sum t_n 3^(4-n);
// trit n comes back as the top of (q 3^n mod 256) * 3 (qh's bytes hold 4 trits and a 0).
static inline int tensor_tq1_trit(uint8_t q, int n) {
	static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
	return ((uint8_t)(q * pow3[n]) * 3) >> 8;
}
// TQ1_0: trit e (0..255) of a block, in element order.
static inline int tensor_tq1_get(const block_tq1_0 *b, int e) {
	if (e < 160) return tensor_tq1_trit(b->qs[e % 32], e / 32);
	if (e < 240) return tensor_tq1_trit(b->qs[32 + (e - 160) % 16], (e - 160) / 16);
	return tensor_tq1_trit(b->qh[(e - 240) % 4], (e - 240) / 4);
}

// A little-endian u32 in a block's bytes (the grid types' packed words, the legacy types' qh).
static inline uint32_t tensor_rd_u32(const uint8_t *p) {
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void tensor_wr_u32(uint8_t *p, uint32_t v) {
	p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

// ---- grid types (IQ3, IQ2, IQ1): groups of elements name points of a published grid -----
// The grids, as ggml publishes them: point i's element j is byte j (little-endian) of entry i.
// IQ2 magnitudes are 0x08, 0x19, 0x2b; IQ3_XXS 4..52 step 8 and 62; IQ3_S 1..15 odd; IQ1 -1, 0, 1.
extern const uint64_t tensor_iq2xxs_grid[256], tensor_iq2xs_grid[512], tensor_iq2s_grid[1024];
extern const uint32_t tensor_iq3xxs_grid[256], tensor_iq3s_grid[512];
extern const uint64_t tensor_iq1s_grid[2048];
// The 8 signs of a group from its 7 stored bits: the 8th makes the count of negatives even
// (bit j set: element j negative).
static inline uint8_t tensor_iq_signs(uint32_t s7) {
	s7 &= 127;
	return (uint8_t)(s7 | (uint32_t)(__builtin_popcount(s7) & 1) << 7);
}

typedef struct {
	uint16_t d;                // fp16 scale
	uint8_t qs[3 * QK_K / 8];  // 64 grid indices (one per 4 elements, 8 per 32), then a u32 per
				   // 32: 4 x 7 sign bits (a group of 8 each), the 4-bit scale ls on top
} block_iq3_xxs;
static_assert(sizeof(block_iq3_xxs) == 2 + 3 * QK_K / 8, "block_iq3_xxs size");
static_assert(sizeof(block_iq3_xxs) == GGUF_BYTES_IQ3_XXS && QK_K == GGUF_BLOCK_IQ3_XXS, "block_iq3_xxs: the GGUF list");

typedef struct {
	uint16_t d;                  // fp16 scale
	uint8_t qs[QK_K / 4];        // low 8 bits of the 9-bit grid indices, one per 4 elements
	uint8_t qh[QK_K / 32];       // bit k of byte ib: the 9th bit of sub-block ib's index k
	uint8_t signs[QK_K / 8];     // a bit per element, set: negative
	uint8_t scales[QK_K / 64];   // 4-bit scales ls, two per byte (low nibble: even sub-block)
} block_iq3_s;
static_assert(sizeof(block_iq3_s) == 2 + 13 * (QK_K / 32) + QK_K / 64, "block_iq3_s size");
static_assert(sizeof(block_iq3_s) == GGUF_BYTES_IQ3_S && QK_K == GGUF_BLOCK_IQ3_S, "block_iq3_s: the GGUF list");

typedef struct {
	uint16_t d;            // fp16 scale
	uint8_t qs[QK_K / 4];  // per 32, two little-endian u32: 4 grid indices (a byte per 8
			       // elements), then 4 x 7 sign bits and the 4-bit scale ls on top
} block_iq2_xxs;
static_assert(sizeof(block_iq2_xxs) == 2 + QK_K / 4, "block_iq2_xxs size");
static_assert(sizeof(block_iq2_xxs) == GGUF_BYTES_IQ2_XXS && QK_K == GGUF_BLOCK_IQ2_XXS, "block_iq2_xxs: the GGUF list");

typedef struct {
	uint16_t d;                // fp16 scale
	uint8_t qs[QK_K / 4];      // a little-endian u16 per 8 elements: 9-bit grid index, 7 sign bits on top
	uint8_t scales[QK_K / 32]; // 4-bit scales per 16, two per byte (low nibble: the first 16 of a 32)
} block_iq2_xs;
static_assert(sizeof(block_iq2_xs) == 2 + QK_K / 4 + QK_K / 32, "block_iq2_xs size");
static_assert(sizeof(block_iq2_xs) == GGUF_BYTES_IQ2_XS && QK_K == GGUF_BLOCK_IQ2_XS, "block_iq2_xs: the GGUF list");

typedef struct {
	uint16_t d;                // fp16 scale
	uint8_t qs[QK_K / 4];      // low 8 bits of the 10-bit grid indices (one per 8 elements), then a sign byte per 8
	uint8_t qh[QK_K / 32];     // bits 2k, 2k+1 of byte ib: the top bits of sub-block ib's index k
	uint8_t scales[QK_K / 32]; // 4-bit scales per 16, as IQ2_XS's
} block_iq2_s;
static_assert(sizeof(block_iq2_s) == 2 + QK_K / 4 + QK_K / 16, "block_iq2_s size");
static_assert(sizeof(block_iq2_s) == GGUF_BYTES_IQ2_S && QK_K == GGUF_BLOCK_IQ2_S, "block_iq2_s: the GGUF list");

// IQ1: element = d (2 ls + 1) (grid + delta), grid in {-1, 0, 1}, delta +-1/8.
typedef struct {
	uint16_t d;            // fp16 scale
	uint8_t qs[QK_K / 8];  // low 8 bits of the 11-bit grid indices, one per 8 elements
	uint8_t qh[QK_K / 16]; // a little-endian u16 per 32: bits 3l.. the top 3 bits of index l,
			       // bits 12..14 the 3-bit scale ls, bit 15 set: delta -1/8
} block_iq1_s;
static_assert(sizeof(block_iq1_s) == 2 + QK_K / 8 + QK_K / 16, "block_iq1_s size");
static_assert(sizeof(block_iq1_s) == GGUF_BYTES_IQ1_S && QK_K == GGUF_BLOCK_IQ1_S, "block_iq1_s: the GGUF list");

typedef struct {
	uint8_t qs[QK_K / 8];      // low 8 bits of the 11-bit grid indices, one per 8 elements
	uint8_t qh[QK_K / 16];     // a nibble per 8 elements: the index's top 3 bits, bit 3 set: delta -1/8
	uint8_t scales[QK_K / 32]; // 4 little-endian u16: per 32 two 3-bit scales (6 bits per 32, from
				   // bit 0), the fp16 d in the 4 top nibbles (u16 0 holds d's lowest)
} block_iq1_m;
static_assert(sizeof(block_iq1_m) == QK_K / 8 + QK_K / 16 + QK_K / 32, "block_iq1_m size");
static_assert(sizeof(block_iq1_m) == GGUF_BYTES_IQ1_M && QK_K == GGUF_BLOCK_IQ1_M, "block_iq1_m: the GGUF list");
// IQ1_M: the 4 u16 of scales, and the fp16 d they hold.
static inline void tensor_iq1m_scales(const block_iq1_m *b, uint16_t sc[4]) {
	for (int k = 0; k < 4; k++) sc[k] = (uint16_t)(b->scales[2 * k] | b->scales[2 * k + 1] << 8);
}
static inline uint16_t tensor_iq1m_d(const uint16_t sc[4]) {
	return (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

// Activations for K-quant dot products: float scale, int8 quants, sums per 16.
typedef struct {
	float d;
	int8_t qs[QK_K];
	int16_t bsums[QK_K / 16];
} block_q8_K;
static_assert(sizeof(block_q8_K) == 4 + QK_K + QK_K / 16 * 2, "block_q8_K size");
static_assert(sizeof(block_q8_K) == GGUF_BYTES_Q8_K && QK_K == GGUF_BLOCK_Q8_K, "block_q8_K: the GGUF list");

// ---- traits: one table indexed by enum gguf_ttype ---------------------------------------
// n is an element count, a multiple of block. Rows are independent: every converter
// handles one or more whole rows laid out back to back.
typedef struct {
	const char *name;  // "Q4_K"
	int64_t block;     // elements per block
	size_t bytes;      // bytes per block
	void (*to_f32)(const void *src, float *dst, int64_t n);   // dequantize
	void (*from_f32)(const float *src, void *dst, int64_t n); // reference quantize
	// The same under importances (an importance matrix: one per element of src), or NULL where
	// the type's quantizer takes none (then from_f32 serves).
	void (*from_f32_imp)(const float *src, void *dst, int64_t n, const float *imp);
	// Dot product of one weight row (n elements) with x, as float. The sum order is fixed:
	// blocks in order, elements in order within a block, sum = sum + w*x (no FMA), so a
	// faster kernel that wants to match it bit for bit knows exactly what to reproduce.
	float (*vec_dot_f32)(const void *wrow, const float *x, int64_t n);
} tensor_traits;

// The traits of type (enum gguf_ttype); NULL for a type lanes cannot convert.
const tensor_traits *tensor_traits_of(uint32_t type);
// Bytes of a row of n elements of type; 0 when the type is unsupported, n < 0, n is not a
// multiple of the block, or the size overflows.
size_t tensor_row_bytes(uint32_t type, int64_t n);

// Converts nrows rows of n elements between f32 and type with the reference converters,
// rows split across pool's threads (pool may be NULL). Rows are converted independently,
// so the bytes never depend on the thread count. LANES_EINVAL for an unsupported type or
// an n that is not a multiple of its block.
int tensor_quantize_rows(uint32_t type, const float *src, void *dst, int64_t nrows, int64_t n,
			 base_pool *pool);
// The same with imp, the n importances of a row's elements (an importance matrix's entry for
// the tensor; the same for every row), where the type's quantizer takes them (from_f32_imp);
// imp NULL, or a type without, quantizes as tensor_quantize_rows.
int tensor_quantize_rows_imp(uint32_t type, const float *src, void *dst, int64_t nrows, int64_t n, const float *imp,
			     base_pool *pool);
int tensor_dequantize_rows(uint32_t type, const void *src, float *dst, int64_t nrows, int64_t n,
			   base_pool *pool);

// ==== kernels (tensor/ref/kernels.c) ======================================================
// Plain C reference kernels of the forward pass. Every reduction has one fixed order that
// does not depend on batch size, slicing or thread count (the exactness contract).
#include <stdbool.h>
#include "base/base.h"

// The reference matmul slice: y[r*ldy + o] for rows r < n and outputs o in [o0, o1) is the
// dot of weight row o (k elements of type; rows wstride bytes apart) with x row r (ldx floats
// apart), each reduced exactly as vec_dot_f32 reduces it, so every slicing of rows or
// outputs gives the same bits.
void tensor_ref_matmul(uint32_t type, const void *w, size_t wstride, int64_t k, const float *x,
		       int64_t ldx, int64_t n, float *y, int64_t ldy, int64_t o0, int64_t o1);
// y[n][n_out] = x[n][k] . W^T with W = n_out rows of k elements of type, wstride bytes
// apart, by the reference kernel; threads of pool (NULL: the caller alone) split the
// outputs, never k. (The forward pass uses a kernel set's tensor_matmuls instead.)
void tensor_matmul(base_pool *pool, uint32_t type, const void *w, size_t wstride, int64_t n_out,
		   int64_t k, const float *x, int64_t n, float *y);

// y = x / rms(x) * w over n elements (w may be NULL: no weight); y may be x.
void tensor_rmsnorm(const float *x, const float *w, int64_t n, float eps, float *y);
// In-place softmax over n elements.
void tensor_softmax(float *x, int64_t n);
// out[i] = silu(g[i]) * u[i]; out may alias g or u.
void tensor_swiglu(const float *g, const float *u, float *out, int64_t n);
// out[i] = gelu(g[i]) * u[i], GELU's tanh form (Gemma's FFN), in double; out may alias g or u.
void tensor_geglu(const float *g, const float *u, float *out, int64_t n);
// gpt-oss's experts: x = min(g, limit), y = clamp(u, -limit, limit), out = x sigmoid(alpha x) (y + 1),
// in double (alpha 1.702, limit 7); out may alias g or u.
#define TENSOR_OAI_ALPHA 1.702
#define TENSOR_OAI_LIMIT 7.0
void tensor_swiglu_oai(const float *g, const float *u, float *out, int64_t n);
// cap * tanh(x / cap) in double, rounded once: the one soft cap every kernel set applies.
float tensor_softcap(float x, float cap);

// Rotary position embedding.
typedef struct {
	int32_t n_rot;              // dimensions rotated per head (even; the rest pass through)
	bool neox;                  // pairs (i, i + n_rot/2) instead of (2i, 2i + 1)
	double freq_base;           // theta_i = pos * freq_base^(-2i/n_rot)
	double freq_scale;          // linear scaling: theta *= freq_scale (1 = none)
	const float *freq_factors;  // n_rot/2 divisors of theta_i (llama3 rope_freqs), or NULL
	double ext_factor;          // YaRN ramp mix (0 = no YaRN)
	double attn_factor;         // YaRN magnitude scale (1 = none)
	double beta_fast, beta_slow; // YaRN correction range
	int32_t n_ctx_orig;         // YaRN: training context
} tensor_rope;
// The cos/sin table of position pos: cs[2i] = cos, cs[2i+1] = sin of pair i (n_rot values).
void tensor_rope_table(const tensor_rope *rp, int32_t pos, double *cs);
// Rotates each of n_heads heads (head_dim apart in x) by the table cs.
void tensor_rope_apply(const tensor_rope *rp, const double *cs, float *x, int32_t n_heads,
		       int32_t head_dim);

// Scaled f16 ("F16S"): a group of values x ~= h * tensor_f16s_scale(b), h f16 and one scale
// byte b per group. Of the 16 scales per octave 2^(j/16) the encoder keeps the one whose
// rounding leaves the smallest squared error, and raises the octave so the group never
// overflows f16: about 20-40% less rounding error than plain f16 for 1 byte per group.
float tensor_f16s_scale(uint8_t b);
// Encodes n values into h and returns the scale byte; deterministic in x alone.
uint8_t tensor_f16s_encode(const float *x, int32_t n, uint16_t *h);

// A paged key/value store, described by strides (the layout kv/ hands out): the row of
// position j starts at base + pages[j / page_tokens] * page_stride + (j % page_tokens) * row_stride.
// Rows are f16 values (counted in values), or q8_0 / q4_0 blocks of 32 (counted in bytes;
// the head's values are off..off+head_dim-1 of the row). With scale bytes (ks/vs not NULL,
// f16 only), position j's byte sits at the same place in the scale arrays, counted with
// s_page_stride and s_row_stride.
enum tensor_kv_enc { TENSOR_KV_F16, TENSOR_KV_Q8_0, TENSOR_KV_Q4_0 };
typedef struct {
	int enc;                  // enum tensor_kv_enc
	const void *k, *v;        // f16: bases offset to the head's first value; blocks: the rows' bases
	const uint8_t *ks, *vs;   // scale bytes, offset to the head's; NULL: none
	const int32_t *pages;     // block table
	size_t page_stride;       // between pages (f16 values, or bytes for blocks)
	size_t row_stride;        // between positions within a page (the same unit)
	size_t s_page_stride;     // scale bytes between pages
	size_t s_row_stride;      // scale bytes between positions within a page
	int32_t page_tokens;
	int32_t off;              // blocks: the head's first value within a row
	int32_t window;           // a query at position p sees p-window+1..p only (0: every position)
	float softcap;            // each score s becomes tensor_softcap(s, softcap) (0: none)
	const float *sinks;       // query head h of a call: a logit sinks[h] in its softmax's denominator alone (NULL: none)
} tensor_kv_view;
// The view of query head h alone (a single-head kernel reads sinks[0]).
static inline tensor_kv_view tensor_kv_head(const tensor_kv_view *kvv, int32_t h) {
	tensor_kv_view v = *kvv;
	if (v.sinks) v.sinks += h;
	return v;
}
// Position j's K (or V) values of one head as floats; returns its scale byte's value (1
// without scale bytes), which the caller applies. Block values d * q are exact in float.
float tensor_kv_row(const tensor_kv_view *kvv, bool v, int32_t j, int32_t head_dim, float *dst);
// The first position a query that sees n_pos positions reads through kvv (its window's start).
static inline int32_t tensor_attn_first(const tensor_kv_view *kvv, int32_t n_pos) {
	return kvv->window > 0 && n_pos > kvv->window ? n_pos - kvv->window : 0;
}
// Attention of one query head q (head_dim values) over positions 0..n_pos-1 (the view's
// window, when it has one, leaves out those before n_pos-window), unfused: scores in position
// order (q.k_j in element order, times k_j's scale, times `scale`, then the view's soft cap),
// softmax, then the weighted sum of V in position order. scores: n_pos floats of scratch.
void tensor_attn_f16(const float *q, int32_t head_dim, float scale, const tensor_kv_view *kvv,
		     int32_t n_pos, float *scores, float *out);
// Fused attention: positions in tiles of TENSOR_ATT_TILE fixed by absolute position, an
// online softmax carried from tile to tile in order (running max, rescaled sum and
// output), so no buffer grows with n_pos and a result depends on nothing but q and the
// rows it reads. scratch: tensor_attn_scratch(1, head_dim) floats.
#define TENSOR_ATT_TILE 64
void tensor_attn(const float *q, int32_t head_dim, float scale, const tensor_kv_view *kvv, int32_t n_pos,
		 float *scratch, float *out);
// Floats of scratch the fused attention of nq heads of head_dim values needs, for one row
// (tensor_attn) or a block of rows (tensor_k_attn_rows).
size_t tensor_attn_scratch(int32_t nq, int32_t head_dim);
// Queries (rows x heads) a block of the x86 fused attention holds in its lanes: rows of one
// sequence go in blocks of tensor_attn_block_rows(nq), which read each K and V row once.
#define TENSOR_ATT_QUERIES 64
int32_t tensor_attn_block_rows(int32_t nq);

// MoE routing of one row: softmax over n_exp router logits, the n_used largest (ties: lower
// id first) into ids[] in descending order, their probabilities into w[] (renormalized to
// sum 1 when norm).
void tensor_moe_route(const float *logits, int32_t n_exp, int32_t n_used, bool norm, int32_t *ids,
		      float *w);
// dst[i] = src row idx[i] (n floats each; src rows ld floats apart) for i < n_idx.
void tensor_gather_rows(const float *src, int64_t ld, const int32_t *idx, int64_t n_idx, int64_t n,
			float *dst);


// ==== kernel sets (tensor/kernels.c; tensor/ref, tensor/x86) ==============================
// A kernel set is one instruction set's matmul, attention and activation kernels, with the
// weight layout its matmul reads: "ref" (portable C, weights read in place), "avx2" and
// "avx512" (weights repacked in tiles of 16 rows, activations quantized per row to int8 in
// blocks of 32 for the quantized types), each in both activation widths (enum tensor_act). Each set keeps the exactness contract on its own:
// every output reduces over k in one fixed order, whatever the batch, slicing or threads.
// Sets differ from each other (and from the reference) by rounding only.
typedef struct tensor_kernels tensor_kernels;

// The activation width of a set's quantized matmuls, one for a whole model so that every row
// is computed the same way whatever else runs. q16 (the default): the x86 sets keep about 16
// bits of each activation (two int8 halves per block of 32, two int8 dot products per block)
// and "ref" keeps float activations. q8: each block of 32 activations of a row becomes int8
// codes with one float scale (amax / 127, codes rounded to nearest even), one int8 dot
// product per weight block (half q16's), a logit error like llama.cpp's.
// Float weight types (F32, F16, BF16) keep float activations in both.
enum tensor_act { TENSOR_ACT_Q16, TENSOR_ACT_Q8, TENSOR_ACT_COUNT };
// "q16" / "q8"; tensor_act_parse: LANES_EINVAL for another name.
const char *tensor_act_name(enum tensor_act act);
int tensor_act_parse(const char *name, enum tensor_act *out);

// The default set: the best one CPUID allows, or the one tensor_kernels_force named, with
// the activation width tensor_kernels_select_act chose (q16 unless it was called).
// Chosen and logged once.
const tensor_kernels *tensor_kernels_default(void);
// Before the first use: makes name the default, logged as forced by `by` (the CLI passes
// "LANES_KERNELS"). LANES_EINVAL for an unknown name, LANES_EUNSUPPORTED when the CPU lacks it.
int tensor_kernels_force(const char *name, const char *by);
// The set called name (width q16) if this CPU runs it, else NULL.
const tensor_kernels *tensor_kernels_find(const char *name);
// Makes the set called name the default for what is set up from now on (models loaded
// after it), in the width tensor_kernels_select_act chose. LANES_EINVAL for an unknown
// name, LANES_EUNSUPPORTED when the CPU lacks it.
int tensor_kernels_select(const char *name);
// Makes act the activation width of the default set for what is set up from now on (models
// loaded after it). LANES_EINVAL for an unknown width.
int tensor_kernels_select_act(enum tensor_act act);
// ks with activation width act: the same instructions and weight layout, so a matrix packed
// for one serves the other.
const tensor_kernels *tensor_kernels_with_act(const tensor_kernels *ks, enum tensor_act act);
enum tensor_act tensor_kernels_act(const tensor_kernels *ks);
const char *tensor_kernels_name(const tensor_kernels *ks);
// The names of the sets this CPU runs, portable first: fills up to cap, returns the count.
int tensor_kernels_available(const char **names, int cap);

// A weight matrix, or a stack of n_mat of them (MoE experts), as one kernel set reads it.
typedef struct {
	const tensor_kernels *ks; // the set it is laid out for
	uint32_t type;            // enum gguf_ttype
	int64_t rows, k, n_mat;   // outputs, elements per row, matrices
	const void *data;         // packed by ks, or the first row in place
	size_t row_bytes;         // in place: bytes between rows
	size_t mat_bytes;         // bytes between the matrices of a stack
	bool packed;              // data is ks's packed copy
	bool compact;             // data is a compact copy (tensor_compact_bytes), which ks reads
} tensor_mat;

// Bytes that ks needs to repack a stack of n_mat matrices of rows x k of type; 0 when ks
// reads such rows in place, or the size overflows.
size_t tensor_pack_bytes(const tensor_kernels *ks, uint32_t type, int64_t rows, int64_t k, int64_t n_mat);
// Whether ks also multiplies by rows of type read in place with its own kernels, expanding a
// tile at a time, with the packed matrix's bits: the grid types (IQ3, IQ2, IQ1), whose packed
// tiles take about 4.5 bits a weight against 1.6 to 3.4 in the file (a slower decode).
bool tensor_compact_ok(const tensor_kernels *ks, uint32_t type);
// Bytes of a compact copy of a stack (0 where ks reads no compact rows of type): the file's
// blocks regrouped per tile of ks->tile rows (the last tile padded with zero rows), each
// block's 2-byte units of the tile's rows side by side, so a kernel loads a field of all the
// tile's rows at once.
size_t tensor_compact_bytes(const tensor_kernels *ks, uint32_t type, int64_t rows, int64_t k, int64_t n_mat);
// tensor_mat_init into a compact copy at dst (tensor_compact_bytes of it).
void tensor_mat_init_compact(tensor_mat *m, const tensor_kernels *ks, uint32_t type, int64_t rows, int64_t k,
			     int64_t n_mat, const void *src, void *dst, base_pool *pool);
// Describes a stack whose rows lie back to back at src. dst: NULL when ks reads it in place,
// else tensor_pack_bytes of memory that receives the packed copy (the work split across
// pool's threads); the tensor_mat then points at dst.
void tensor_mat_init(tensor_mat *m, const tensor_kernels *ks, uint32_t type, int64_t rows, int64_t k,
		     int64_t n_mat, const void *src, void *dst, base_pool *pool);

// For i < nw: ys[i][n][ws[i]->rows] = x[n][k] . (matrix mats[i] of ws[i])^T. All matrices
// share ws[0]'s set and k; x is prepared once (quantized per row where the set wants it)
// and the threads of pool split the outputs of all of them, never k.
void tensor_matmuls(base_pool *pool, int nw, const tensor_mat *const *ws, const int64_t *mats, const float *x,
		    int64_t n, float *const *ys);
// What a matmul call also does on the pool's threads, so that per-row work before it and the
// residual add after it cost no hand-off of their own.
typedef struct {
	// Makes row r of x before anything reads it: every row once, in any order, on any thread;
	// NULL: x is ready. All matrices of the call must then prepare their input alike.
	void (*make_row)(void *arg, int64_t r);
	void *arg;
	bool add;             // ys[i][r][o] = ys[i][r][o] + the dot (one float add), not = the dot
	void *scratch;        // prepared activations go here when it holds tensor_matmul_scratch
	size_t scratch_bytes; // bytes; too small or NULL: the call allocates its own
	// Work that rides on the pass (the adapters' terms): pre runs once on each of its threads
	// when the input rows are made (it waits for its own work itself), post after a thread has
	// written outputs [o0, o1) of matrix w for every row, on that thread. NULL: none.
	void (*pre)(void *arg, int ith);
	void (*post)(void *arg, int ith, int w, int64_t o0, int64_t o1);
	void *hook_arg;
} tensor_mm_opts;
// tensor_matmuls with o (NULL: as tensor_matmuls). Each output is the same dot product
// either way: make_row and add change where the work runs, not its arithmetic.
void tensor_matmuls_opts(base_pool *pool, int nw, const tensor_mat *const *ws, const int64_t *mats, const float *x,
			 int64_t n, float *const *ys, const tensor_mm_opts *o);
// Outputs [o0, o1) of matrix mat of w for n rows of x (ldx floats apart), on this thread:
// y[r * ldy + o] for o in the range (add: y + it), each the same dot product tensor_matmuls
// makes. o0 is a multiple of w's tile; scratch holds tensor_matmul_scratch(w's set, n, k)
// bytes (quantized sets prepare x there; unused for float weights).
void tensor_matmul_part(const tensor_mat *w, int64_t mat, const float *x, int64_t ldx, int64_t n, float *y,
			int64_t ldy, int64_t o0, int64_t o1, void *scratch, bool add);
// Bytes of scratch a call of n rows of k inputs with a matrix of ks needs at most.
size_t tensor_matmul_scratch(const tensor_kernels *ks, int64_t n, int64_t k);

// The forward pass's other kernels, as the set ks has them (same contracts as the
// reference functions above; results differ from them by rounding only).
void tensor_k_rmsnorm(const tensor_kernels *ks, const float *x, const float *w, int64_t n, float eps, float *y);
void tensor_k_swiglu(const tensor_kernels *ks, const float *g, const float *u, float *out, int64_t n);
void tensor_k_geglu(const tensor_kernels *ks, const float *g, const float *u, float *out, int64_t n);
// x[i] = tensor_softcap(x[i], cap) with ks's arithmetic (the output logits' cap, Gemma 2).
void tensor_k_softcap_rows(const tensor_kernels *ks, float *x, int64_t n, float cap);
// gpt-oss's clamped SwiGLU (tensor_swiglu_oai) with ks's arithmetic.
void tensor_k_swiglu_oai(const tensor_kernels *ks, const float *g, const float *u, float *out, int64_t n);
uint8_t tensor_k_f16s_encode(const tensor_kernels *ks, const float *x, int32_t n, uint16_t *h);
// The f32 products of training (src/learn), 16 weight rows at a time, each output summed over
// its inputs in order (a set may fuse each multiply-add): the forward
//   y[i*16 + o] += sum_{c < kn} x[i*ldx + c] * wt[c*16 + o]   for i < n, o < 16
// over a tile transposed to [kn][16], and the backward
//   dx[i*ldx + c] += sum_{r < nr} dy[i*ldy + r] * w[r*ldw + c]   for i < n, c < kn
// over a tile of nr <= 16 rows ldw floats apart. A row's results never depend on n.
// n elements (whole blocks) of type at src as f32, bit for bit what the type's to_f32 gives.
void tensor_k_f32_rows(const tensor_kernels *ks, uint32_t type, const void *src, float *dst, int64_t n);
// wt[c*16 + r] = w[r*ldw + c] for r < 16, c < kn: a tile of 16 rows transposed for the forward.
void tensor_k_f32_t16(const tensor_kernels *ks, const float *w, int64_t ldw, int64_t kn, float *wt);
void tensor_k_f32_fwd(const tensor_kernels *ks, const float *wt, int64_t kn, const float *x, int64_t ldx, int64_t n,
		      float *y);
void tensor_k_f32_bwd(const tensor_kernels *ks, const float *w, int64_t ldw, int64_t nr, int64_t kn, const float *dy,
		      int64_t ldy, int64_t n, float *dx, int64_t ldx);
// One row of n floats quantized to type (n a multiple of its block): the reference
// quantizer's bytes exactly, vectorized for Q8_0 and Q4_0 (the KV block types).
void tensor_k_quantize_row(const tensor_kernels *ks, uint32_t type, const float *x, void *dst, int64_t n);
// Attention of nq query heads that share one KV head (GQA): q[nq][head_dim] -> out[nq][head_dim],
// fused (as tensor_attn; scratch: tensor_attn_scratch(nq, head_dim) floats), or unfused (as
// tensor_attn_f16, f16 rows only; scratch: nq * n_pos floats).
void tensor_k_attn(const tensor_kernels *ks, const float *q, int32_t nq, int32_t head_dim, float scale,
		   const tensor_kv_view *kvv, int32_t n_pos, float *scratch, float *out);
// The fused attention of nr rows of one sequence (row i: nq heads at q + ridx[i] * q_stride
// over positions 0..n_pos[i]-1, into out + ridx[i] * o_stride; ridx NULL: i) with the KV head
// they share. Each row's values are those it gets alone, whatever rows share its call.
void tensor_k_attn_rows(const tensor_kernels *ks, const float *q, size_t q_stride, const int32_t *ridx, int32_t nr,
			int32_t nq, int32_t head_dim, float scale, const tensor_kv_view *kvv, const int32_t *n_pos,
			float *scratch, float *out, size_t o_stride);
void tensor_k_attn_unfused(const tensor_kernels *ks, const float *q, int32_t nq, int32_t head_dim, float scale,
			   const tensor_kv_view *kvv, int32_t n_pos, float *scores, float *out);

#endif
