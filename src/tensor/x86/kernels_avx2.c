// tensor/x86/kernels_avx2: the "avx2" kernel set — impl.h over 8-lane vectors (a 16-row
// tile in two halves); int8 dot products by vpmaddubsw + vpmaddwd, exact for the codes'
// ranges (Q8_0 takes the sign trick, so no 16-bit sum can saturate).
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

typedef __m256i vi;
typedef __m256 vf;
typedef __m256d vd;
#define VL 8
#define NH 2
#define VB 32
#define RMAX 4
#define KX_ROWS_2CH 4
#define KX_Q8_UNSIGNED 0
#define KX_DP16 1
#define KX_GROUP 0
#define KX_ATT_ACC 8

#define V static inline __attribute__((always_inline))
// ---- vocabulary ----
V vi v_load(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
V vi v_and(vi a, vi b) { return _mm256_and_si256(a, b); }
V vi v_or(vi a, vi b) { return _mm256_or_si256(a, b); }
V vi v_or_and(vi a, vi b, vi m) { return _mm256_or_si256(a, _mm256_and_si256(b, m)); }
V vi v_slli16(vi a, int s) { return _mm256_slli_epi16(a, s); }
V vi v_srli16(vi a, int s) { return _mm256_srli_epi16(a, s); }
V vi v_srli32(vi a, int s) { return _mm256_srli_epi32(a, s); }
V vi v_slli32(vi a, int s) { return _mm256_slli_epi32(a, s); }
V vi v_addi(vi a, vi b) { return _mm256_add_epi32(a, b); }
V vi v_set1_8(char c) { return _mm256_set1_epi8(c); }
V vi v_set1_32(int v) { return _mm256_set1_epi32(v); }
V vi v_zeroi(void) { return _mm256_setzero_si256(); }
V vi v_zero_chain(void) { return _mm256_setzero_si256(); }
// u8 x s8 pairs to int16 (no pair of codes here can reach 2^15), then pairs to int32.
V vi v_dp(vi acc, vi u, vi s) {
	return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}
V vi v_mul8(vi u, vi s) { return _mm256_maddubs_epi16(u, s); }
V vi v_add16(vi a, vi b) { return _mm256_add_epi16(a, b); }
V vi v_widen16(vi a) { return _mm256_madd_epi16(a, _mm256_set1_epi16(1)); }
V vi v_abs8(vi a) { return _mm256_abs_epi8(a); }
V vi v_sign8(vi a, vi b) { return _mm256_sign_epi8(a, b); }
V vi v_xor(vi a, vi b) { return _mm256_xor_si256(a, b); }
V vi v_add8(vi a, vi b) { return _mm256_add_epi8(a, b); }
V vi v_sub8(vi a, vi b) { return _mm256_sub_epi8(a, b); }
V vi v_cmpeq8(vi a, vi b) { return _mm256_cmpeq_epi8(a, b); } // 0xff where equal
// The 8 u64 at p: their first 4 bytes in *lo, the next 4 in *hi.
V void v_load64(const uint64_t *p, vi *lo, vi *hi) {
	const __m256i split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
	const __m256i as = _mm256_permutevar8x32_epi32(v_load(p), split), bs = _mm256_permutevar8x32_epi32(v_load(p + 4), split);
	*lo = _mm256_permute2x128_si256(as, bs, 0x20);
	*hi = _mm256_permute2x128_si256(as, bs, 0x31);
}
// 16 bytes at p in each 128-bit lane, and byte i of each lane looked up in its lane's 16 (i < 16).
V vi v_lut16(const void *p) { return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p)); }
V vi v_shuf8(vi t, vi i) { return _mm256_shuffle_epi8(t, i); }
V vi v_ldu8(const void *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }
V vi v_ldu16(const void *p) { return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)); }
V vi v_ldi8(const void *p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)); }
V vf v_cvt(vi a) { return _mm256_cvtepi32_ps(a); }
V vi v_cvtr(vf a) { return _mm256_cvtps_epi32(a); }
V void v_storei(int32_t *p, vi a) { _mm256_storeu_si256((__m256i *)p, a); }
// Stores the low byte of each lane (values that fit int8).
V void v_store8(int8_t *p, vi a) {
	const __m256i lo = _mm256_shuffle_epi8(a, _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
								   0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
	const __m128i v = _mm_unpacklo_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1));
	_mm_storel_epi64((__m128i *)p, v);
}
V int32_t v_hsumi(vi a) {
	__m128i q = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
	q = _mm_add_epi32(q, _mm_shuffle_epi32(q, 0x4e));
	q = _mm_add_epi32(q, _mm_shuffle_epi32(q, 0xb1));
	return _mm_cvtsi128_si32(q);
}
V vf v_zerof(void) { return _mm256_setzero_ps(); }
V vf v_set1f(float f) { return _mm256_set1_ps(f); }
V vf v_loadf(const float *p) { return _mm256_loadu_ps(p); }
V void v_storef(float *p, vf a) { _mm256_storeu_ps(p, a); }
V vf v_ldh(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
// The fp16 value in each lane's low 16 bits (the high 16 bits zero), as a float.
V vf v_h2f(vi a) {
	return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(a, a), 0x08)));
}
V vf v_ldbf(const void *p) {
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
V void v_storeh(uint16_t *p, vf a) { _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT)); }
V vf v_f16round(vf a) { return _mm256_cvtph_ps(_mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT)); }
V vf v_add(vf a, vf b) { return _mm256_add_ps(a, b); }
V vf v_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
V vf v_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
V vf v_div(vf a, vf b) { return _mm256_div_ps(a, b); }
V vf v_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
V vf v_fnma(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
V vf v_max(vf a, vf b) { return _mm256_max_ps(a, b); }
V vf v_min(vf a, vf b) { return _mm256_min_ps(a, b); }
V vf v_absf(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
// Lanes where x < y take a, the others b.
V vf v_sel_lt(vf x, vf y, vf a, vf b) { return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, y, _CMP_LT_OQ)); }
V vf v_round(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// roundf: halves away from zero (the truncated value, plus the sign where the rest is >= 1/2).
V vf v_roundaway(vf t) {
	const vf r = _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
	const vf m = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(t, r)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
	const vf one = _mm256_or_ps(_mm256_and_ps(t, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(1.0f));
	return _mm256_add_ps(r, _mm256_and_ps(m, one));
}
V vi v_cvtt(vf a) { return _mm256_cvttps_epi32(a); }
V vi v_mini(vi a, vi b) { return _mm256_min_epi32(a, b); }
V vf v_pow2i(vf n) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23)); }
// Reductions in one fixed order: halves folded pairwise.
V float v_hsum(vf a) {
	__m128 q = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	q = _mm_add_ps(q, _mm_movehl_ps(q, q));
	q = _mm_add_ss(q, _mm_movehdup_ps(q));
	return _mm_cvtss_f32(q);
}
V float v_hmax(vf a) {
	__m128 q = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	q = _mm_max_ps(q, _mm_movehl_ps(q, q));
	q = _mm_max_ss(q, _mm_movehdup_ps(q));
	return _mm_cvtss_f32(q);
}
// Lane l of the result is the sum of a[l]'s lanes: pairwise horizontal adds, one fixed tree.
V vf v_hsum_lanes(const vf a[8]) {
	const vf t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
	const vf t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
	const vf u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
	return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
V vd v_zerod(void) { return _mm256_setzero_pd(); }
V vd v_lo_pd(vf a) { return _mm256_cvtps_pd(_mm256_castps256_ps128(a)); }
V vd v_hi_pd(vf a) { return _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)); }
V vd v_fmad(vd a, vd b, vd c) { return _mm256_fmadd_pd(a, b, c); }
V vd v_addd(vd a, vd b) { return _mm256_add_pd(a, b); }
V double v_hsumd(vd a) {
	__m128d q = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
	return _mm_cvtsd_f64(_mm_add_sd(q, _mm_unpackhi_pd(q, q)));
}
#undef V

#include "tensor/x86/impl.h"
#include "tensor/x86/attn.h"
#include "tensor/x86/train.h"

KX_SETS("avx2", tensor_kernels_avx2, tensor_kernels_avx2_q8, kern_cpu_avx2)
