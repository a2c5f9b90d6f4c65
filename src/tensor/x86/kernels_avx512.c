// tensor/x86/kernels_avx512: the "avx512" kernel set — impl.h over 16-lane vectors, with
// VNNI's vpdpbusd for the int8 dot products (u8 weight codes x s8 activations).
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

typedef __m512i vi;
typedef __m512 vf;
typedef __m512d vd;
#define VL 16
#define NH 1
#define VB 64
#define RMAX 16
#define KX_ROWS_2CH 8
#define KX_Q8_UNSIGNED 1
#define KX_DP16 0
#define KX_GROUP 4
#define KX_IQ_GROUP 2
#define KX_ATT_ACC 16
// Heads of 8, 24, 40... values (not a multiple of 16) go to the AVX2 set's attention and f16s encoder.
#define KX_NARROW tensor_kernels_avx2
#define KX_NARROW_VL 8

#define V static inline __attribute__((always_inline))
// ---- vocabulary ----
V vi v_load(const void *p) { return _mm512_loadu_si512(p); }
V vi v_and(vi a, vi b) { return _mm512_and_si512(a, b); }
V vi v_or(vi a, vi b) { return _mm512_or_si512(a, b); }
V vi v_or_and(vi a, vi b, vi m) { return _mm512_ternarylogic_epi32(a, b, m, 0xF8); } // a | (b & m)
V vi v_slli16(vi a, int s) { return _mm512_slli_epi16(a, (unsigned)s); }
V vi v_srli16(vi a, int s) { return _mm512_srli_epi16(a, (unsigned)s); }
V vi v_srli32(vi a, int s) { return _mm512_srli_epi32(a, (unsigned)s); }
V vi v_slli32(vi a, int s) { return _mm512_slli_epi32(a, (unsigned)s); }
V vi v_addi(vi a, vi b) { return _mm512_add_epi32(a, b); }
V vi v_set1_8(char c) { return _mm512_set1_epi8(c); }
V vi v_set1_32(int v) { return _mm512_set1_epi32(v); }
V vi v_zeroi(void) { return _mm512_setzero_si512(); }
// A zero that starts a chain of dot products: its own zeroing idiom, which takes no execution
// port, where GCC would copy a shared zero register.
V vi v_zero_chain(void) {
	vi z;
	__asm__ volatile("vpxord %x0, %x0, %x0" : "=v"(z));
	return z;
}
V vi v_dp(vi acc, vi u, vi s) { return _mm512_dpbusd_epi32(acc, u, s); }
// v_dp with the four signed bytes at p broadcast from memory, in one instruction (GCC does
// not fold the broadcast into vpdpbusd's operand by itself).
V vi v_dpb(vi acc, vi u, const int8_t *p) {
	__asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const int32_t *)p));
	return acc;
}
V vi v_abs8(vi a) { return _mm512_abs_epi8(a); }
V vi v_xor(vi a, vi b) { return _mm512_xor_si512(a, b); }
V vi v_add8(vi a, vi b) { return _mm512_add_epi8(a, b); }
V vi v_sub8(vi a, vi b) { return _mm512_sub_epi8(a, b); }
V vi v_cmpeq8(vi a, vi b) { return _mm512_movm_epi8(_mm512_cmpeq_epi8_mask(a, b)); } // 0xff where equal
// The 16 u64 at p: their first 4 bytes in *lo, the next 4 in *hi.
V void v_load64(const uint64_t *p, vi *lo, vi *hi) {
	const __m512i a = v_load(p), b = v_load(p + 8);
	const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	*lo = _mm512_permutex2var_epi32(a, even, b);
	*hi = _mm512_permutex2var_epi32(a, _mm512_add_epi32(even, _mm512_set1_epi32(1)), b);
}
// 16 bytes at p in each 128-bit lane, and byte i of each lane looked up in its lane's 16 (i < 16).
V vi v_lut16(const void *p) { return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p)); }
V vi v_shuf8(vi t, vi i) { return _mm512_shuffle_epi8(t, i); }
V vi v_ldu8(const void *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }
V vi v_ldu16(const void *p) { return _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)); }
V vi v_ldi8(const void *p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)); }
V vf v_cvt(vi a) { return _mm512_cvtepi32_ps(a); }
V vi v_cvtr(vf a) { return _mm512_cvtps_epi32(a); }
V void v_storei(int32_t *p, vi a) { _mm512_storeu_si512(p, a); }
// Stores the low byte of each lane (values that fit int8).
V void v_store8(int8_t *p, vi a) { _mm_storeu_si128((__m128i *)p, _mm512_cvtepi32_epi8(a)); }
V int32_t v_hsumi(vi a) { return _mm512_reduce_add_epi32(a); }
V vf v_zerof(void) { return _mm512_setzero_ps(); }
V vf v_set1f(float f) { return _mm512_set1_ps(f); }
V vf v_loadf(const float *p) { return _mm512_loadu_ps(p); }
V void v_storef(float *p, vf a) { _mm512_storeu_ps(p, a); }
V vf v_ldh(const void *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
// The fp16 value in each lane's low 16 bits (the high 16 bits zero), as a float.
V vf v_h2f(vi a) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(a)); }
V vf v_ldbf(const void *p) {
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
V void v_storeh(uint16_t *p, vf a) { _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT)); }
V vf v_f16round(vf a) { return _mm512_cvtph_ps(_mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT)); }
V vf v_add(vf a, vf b) { return _mm512_add_ps(a, b); }
V vf v_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
V vf v_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
V vf v_div(vf a, vf b) { return _mm512_div_ps(a, b); }
V vf v_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
V vf v_fnma(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
V vf v_max(vf a, vf b) { return _mm512_max_ps(a, b); }
V vf v_min(vf a, vf b) { return _mm512_min_ps(a, b); }
V vf v_absf(vf a) { return _mm512_abs_ps(a); }
// Lanes where x < y take a, the others b.
V vf v_sel_lt(vf x, vf y, vf a, vf b) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, y, _CMP_LT_OQ), b, a); }
V vf v_round(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// roundf: halves away from zero (the truncated value, plus the sign where the rest is >= 1/2).
V vf v_roundaway(vf t) {
	const vf r = _mm512_roundscale_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
	const __mmask16 m = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(t, r)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
	const vf one = _mm512_or_ps(_mm512_and_ps(t, _mm512_set1_ps(-0.0f)), _mm512_set1_ps(1.0f));
	return _mm512_mask_add_ps(r, m, r, one);
}
V vi v_cvtt(vf a) { return _mm512_cvttps_epi32(a); }
V vi v_mini(vi a, vi b) { return _mm512_min_epi32(a, b); }
V vf v_pow2i(vf n) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23)); }
// Reductions in one fixed order: halves folded pairwise.
V float v_hsum(vf a) {
	__m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
	__m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
	q = _mm_add_ps(q, _mm_movehl_ps(q, q));
	q = _mm_add_ss(q, _mm_movehdup_ps(q));
	return _mm_cvtss_f32(q);
}
V float v_hmax(vf a) { return _mm512_reduce_max_ps(a); }
// Lane l of the result is the sum of a[l]'s lanes: pairs of vectors folded in halves side by
// side (groups of S partial sums become groups of S/2, x's groups then y's), four levels, one
// fixed tree per lane.
static const int32_t fold_lo[4][16] = {
	{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
	{0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27},
	{0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29},
	{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30},
};
static const int32_t fold_half[4] = {8, 4, 2, 1};
V vf v_hsum_lanes(const vf a[16]) {
	vf b[8];
	int n = 16;
	for (int lv = 0; lv < 4; lv++, n /= 2) {
		const __m512i lo = _mm512_loadu_si512(fold_lo[lv]);
		const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(fold_half[lv]));
		const vf *src = lv == 0 ? a : b;
		for (int i = 0; i < n / 2; i++) {
			const vf x = src[2 * i], y = src[2 * i + 1];
			b[i] = _mm512_add_ps(_mm512_permutex2var_ps(x, lo, y), _mm512_permutex2var_ps(x, hi, y));
		}
	}
	return b[0];
}
V vd v_zerod(void) { return _mm512_setzero_pd(); }
V vd v_lo_pd(vf a) { return _mm512_cvtps_pd(_mm512_castps512_ps256(a)); }
V vd v_hi_pd(vf a) { return _mm512_cvtps_pd(_mm512_extractf32x8_ps(a, 1)); }
V vd v_fmad(vd a, vd b, vd c) { return _mm512_fmadd_pd(a, b, c); }
V vd v_addd(vd a, vd b) { return _mm512_add_pd(a, b); }
V double v_hsumd(vd a) {
	__m256d h = _mm256_add_pd(_mm512_castpd512_pd256(a), _mm512_extractf64x4_pd(a, 1));
	__m128d q = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
	return _mm_cvtsd_f64(_mm_add_sd(q, _mm_unpackhi_pd(q, q)));
}
#undef V

#include "tensor/x86/impl.h"
#include "tensor/x86/attn.h"
#include "tensor/x86/train.h"

KX_SETS("avx512", tensor_kernels_avx512, tensor_kernels_avx512_q8, kern_cpu_avx512)
