// tensor/types: fp16 and bf16 conversion, the plain types' converters, the reference
// row dot products, and the traits table indexed by enum gguf_ttype.
#include "tensor/tensor.h"
#include "tensor/ref/quants.h"
#include "base/base.h"

#include <string.h>

static inline uint32_t f32_bits(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float bits_f32(uint32_t u) {
	float f;
	memcpy(&f, &u, 4);
	return f;
}

// ---- half precision ---------------------------------------------------------------------
float tensor_f16_to_f32(uint16_t h) {
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t a = (uint32_t)(h & 0x7fff) << 13;
	if ((h & 0x7c00) == 0x7c00) return bits_f32(sign | 0x7f800000 | a); // inf, NaN
	// Rebiasing by a multiply by 2^112 is exact, and normalizes fp16 subnormals too.
	return bits_f32(sign | f32_bits(bits_f32(a) * 0x1p112f));
}

uint16_t tensor_f32_to_f16(float f) {
	uint32_t x = f32_bits(f);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
	uint32_t ax = x & 0x7fffffff;
	if (ax > 0x7f800000) return sign | 0x7e00 | (uint16_t)((ax >> 13) & 0x3ff); // NaN, quiet
	if (ax >= 0x477ff000) return sign | 0x7c00; // >= 65520 rounds to inf
	if (ax >= 0x38800000) {                     // normal fp16 (>= 2^-14)
		uint32_t r = ax - ((uint32_t)(127 - 15) << 23);
		r += 0xfff + ((r >> 13) & 1);
		return sign | (uint16_t)(r >> 13);
	}
	if (ax < 0x33000000) return sign; // below 2^-25 (or the tie at it): zero
	// Subnormal fp16: count units of 2^-24, rounding to nearest even.
	uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
	uint32_t shift = 126 - e; // 14..24
	uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
	if (rem > half || (rem == half && (q & 1))) q++;
	return sign | (uint16_t)q;
}

float tensor_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t tensor_f32_to_bf16(float f) {
	uint32_t u = f32_bits(f);
	if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 64); // NaN: force quiet
	return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

// ---- plain types ------------------------------------------------------------------------
static void f32_to_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static void f32_from_f32(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

static void f16_to_f32(const void *src, float *dst, int64_t n) {
	const uint8_t *p = src;
	for (int64_t i = 0; i < n; i++) {
		uint16_t h;
		memcpy(&h, p + 2 * i, 2);
		dst[i] = tensor_f16_to_f32(h);
	}
}

static void f16_from_f32(const float *src, void *dst, int64_t n) {
	uint8_t *p = dst;
	for (int64_t i = 0; i < n; i++) {
		uint16_t h = tensor_f32_to_f16(src[i]);
		memcpy(p + 2 * i, &h, 2);
	}
}

static void bf16_to_f32(const void *src, float *dst, int64_t n) {
	const uint8_t *p = src;
	for (int64_t i = 0; i < n; i++) {
		uint16_t h;
		memcpy(&h, p + 2 * i, 2);
		dst[i] = tensor_bf16_to_f32(h);
	}
}

static void bf16_from_f32(const float *src, void *dst, int64_t n) {
	uint8_t *p = dst;
	for (int64_t i = 0; i < n; i++) {
		uint16_t h = tensor_f32_to_bf16(src[i]);
		memcpy(p + 2 * i, &h, 2);
	}
}

// ---- reference row dot products: dequantize a chunk, accumulate in natural order --------
static float dot_f32(const void *w, const float *x, int64_t n) {
	const uint8_t *p = w;
	float sum = 0.0f;
	for (int64_t i = 0; i < n; i++) {
		float v;
		memcpy(&v, p + 4 * i, 4);
		sum += v * x[i];
	}
	return sum;
}

// A chunk of 32 plain 16-bit elements is dequantized at a time; the order stays natural.
#define DOT_HALF(fname, conv)                                                     \
	static float fname(const void *w, const float *x, int64_t n) {           \
		const uint8_t *p = w;                                             \
		float buf[32], sum = 0.0f;                                        \
		for (int64_t i = 0; i < n; i += 32) {                             \
			int64_t m = n - i < 32 ? n - i : 32;                      \
			conv(p + 2 * i, buf, m);                                  \
			for (int64_t j = 0; j < m; j++) sum += buf[j] * x[i + j]; \
		}                                                                 \
		return sum;                                                       \
	}
DOT_HALF(dot_f16, f16_to_f32)
DOT_HALF(dot_bf16, bf16_to_f32)

#define DOT_BLOCK(t, QK, BLK)                                                       \
	static float dot_##t(const void *w, const float *x, int64_t n) {           \
		const uint8_t *p = w;                                               \
		float buf[QK], sum = 0.0f;                                          \
		for (int64_t i = 0; i < n; i += QK, p += sizeof(BLK)) {             \
			tensor_ref_dequant_##t(p, buf, QK);                         \
			for (int j = 0; j < QK; j++) sum += buf[j] * x[i + j];      \
		}                                                                   \
		return sum;                                                         \
	}
DOT_BLOCK(q4_0, QK4_0, block_q4_0)
DOT_BLOCK(q4_1, QK4_1, block_q4_1)
DOT_BLOCK(q5_0, QK5_0, block_q5_0)
DOT_BLOCK(q5_1, QK5_1, block_q5_1)
DOT_BLOCK(q8_0, QK8_0, block_q8_0)
DOT_BLOCK(q8_1, QK8_1, block_q8_1)
DOT_BLOCK(q2_K, QK_K, block_q2_K)
DOT_BLOCK(q3_K, QK_K, block_q3_K)
DOT_BLOCK(q4_K, QK_K, block_q4_K)
DOT_BLOCK(q5_K, QK_K, block_q5_K)
DOT_BLOCK(q6_K, QK_K, block_q6_K)
DOT_BLOCK(q8_K, QK_K, block_q8_K)
DOT_BLOCK(iq4_nl, QK4_NL, block_iq4_nl)
DOT_BLOCK(iq4_xs, QK_K, block_iq4_xs)
DOT_BLOCK(mxfp4, QK_MXFP4, block_mxfp4)
DOT_BLOCK(tq1_0, QK_K, block_tq1_0)
DOT_BLOCK(tq2_0, QK_K, block_tq2_0)
DOT_BLOCK(iq3_xxs, QK_K, block_iq3_xxs)
DOT_BLOCK(iq3_s, QK_K, block_iq3_s)
DOT_BLOCK(iq2_xxs, QK_K, block_iq2_xxs)
DOT_BLOCK(iq2_xs, QK_K, block_iq2_xs)
DOT_BLOCK(iq2_s, QK_K, block_iq2_s)
DOT_BLOCK(iq1_s, QK_K, block_iq1_s)
DOT_BLOCK(iq1_m, QK_K, block_iq1_m)

// ---- the table --------------------------------------------------------------------------
// name, block and bytes come from the GGUF list (gguf.h); only the functions are stated here
#define FACTS(T) .name = #T, .block = GGUF_BLOCK_##T, .bytes = GGUF_BYTES_##T
#define QTYPE(t, T) {FACTS(T), .to_f32 = tensor_ref_dequant_##t, .from_f32 = tensor_ref_quant_##t, .vec_dot_f32 = dot_##t}
#define QTYPE_IMP(t, T)                                                                                                        \
	{FACTS(T), .to_f32 = tensor_ref_dequant_##t, .from_f32 = tensor_ref_quant_##t, .from_f32_imp = tensor_ref_quant_imp_##t, \
	 .vec_dot_f32 = dot_##t}

static const tensor_traits traits[GGUF_T_COUNT] = {
	[GGUF_T_F32] = {FACTS(F32), .to_f32 = f32_to_f32, .from_f32 = f32_from_f32, .vec_dot_f32 = dot_f32},
	[GGUF_T_F16] = {FACTS(F16), .to_f32 = f16_to_f32, .from_f32 = f16_from_f32, .vec_dot_f32 = dot_f16},
	[GGUF_T_BF16] = {FACTS(BF16), .to_f32 = bf16_to_f32, .from_f32 = bf16_from_f32, .vec_dot_f32 = dot_bf16},
	[GGUF_T_Q4_0] = QTYPE(q4_0, Q4_0), [GGUF_T_Q4_1] = QTYPE(q4_1, Q4_1), [GGUF_T_Q5_0] = QTYPE(q5_0, Q5_0),
	[GGUF_T_Q5_1] = QTYPE(q5_1, Q5_1), [GGUF_T_Q8_0] = QTYPE(q8_0, Q8_0), [GGUF_T_Q8_1] = QTYPE(q8_1, Q8_1),
	[GGUF_T_Q2_K] = QTYPE_IMP(q2_K, Q2_K), [GGUF_T_Q3_K] = QTYPE_IMP(q3_K, Q3_K), [GGUF_T_Q4_K] = QTYPE_IMP(q4_K, Q4_K),
	[GGUF_T_Q5_K] = QTYPE_IMP(q5_K, Q5_K), [GGUF_T_Q6_K] = QTYPE_IMP(q6_K, Q6_K), [GGUF_T_Q8_K] = QTYPE(q8_K, Q8_K),
	[GGUF_T_IQ4_NL] = QTYPE_IMP(iq4_nl, IQ4_NL), [GGUF_T_IQ4_XS] = QTYPE_IMP(iq4_xs, IQ4_XS),
	[GGUF_T_MXFP4] = QTYPE(mxfp4, MXFP4),
	[GGUF_T_TQ1_0] = QTYPE(tq1_0, TQ1_0), [GGUF_T_TQ2_0] = QTYPE(tq2_0, TQ2_0),
	[GGUF_T_IQ3_XXS] = QTYPE_IMP(iq3_xxs, IQ3_XXS), [GGUF_T_IQ3_S] = QTYPE_IMP(iq3_s, IQ3_S),
	[GGUF_T_IQ2_XXS] = QTYPE_IMP(iq2_xxs, IQ2_XXS), [GGUF_T_IQ2_XS] = QTYPE_IMP(iq2_xs, IQ2_XS),
	[GGUF_T_IQ2_S] = QTYPE_IMP(iq2_s, IQ2_S), [GGUF_T_IQ1_S] = QTYPE_IMP(iq1_s, IQ1_S), [GGUF_T_IQ1_M] = QTYPE_IMP(iq1_m, IQ1_M),
};
#undef QTYPE
#undef FACTS

const tensor_traits *tensor_traits_of(uint32_t type) {
	if (type >= GGUF_T_COUNT || !traits[type].to_f32) return NULL;
	return &traits[type];
}

size_t tensor_row_bytes(uint32_t type, int64_t n) {
	const tensor_traits *tt = tensor_traits_of(type);
	if (!tt || n < 0 || n % tt->block) return 0;
	uint64_t b;
	if (!ck_mul((uint64_t)(n / tt->block), tt->bytes, &b) || b > SIZE_MAX) return 0;
	return (size_t)b;
}
