// tensor/ref/quant_tq: reference quantize and dequantize of the ternary types TQ1_0 (trits
// packed 5 per byte in base 3, 1.6875 bits per weight) and TQ2_0 (2 bits per trit), each a
// super-block of 256 under one fp16 scale: element = d * (t - 1).
#include "tensor/ref/quants.h"

#include <math.h>
#include <string.h>

#define F16(x) tensor_f16_to_f32(x)
#define TO_F16(x) tensor_f32_to_f16(x)

// The trits of 256 elements (t = x / d rounded, in {0, 1, 2} after the +1) and the block's
// scale: the largest magnitude, so ternary weights stored at their own scale come back exactly.
static uint16_t tq_trits(const float *x, uint8_t t[QK_K]) {
	float amax = 0.0f;
	for (int j = 0; j < QK_K; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
	const uint16_t dh = TO_F16(amax);
	const float d = F16(dh), id = d != 0.0f ? 1.0f / d : 0.0f;
	for (int j = 0; j < QK_K; j++) {
		const float v = rintf(x[j] * id);
		t[j] = (uint8_t)((v < -1.0f ? -1.0f : v > 1.0f ? 1.0f : v) + 1.0f);
	}
	return dh;
}

// n trits (first most significant), padded with zeros to 5, as one byte: ceil(256 v / 243).
static uint8_t tq1_byte(const uint8_t *t, int n, int stride) {
	int v = 0;
	for (int i = 0; i < 5; i++) v = 3 * v + (i < n ? t[i * stride] : 0);
	return (uint8_t)((v * 256 + 242) / 243);
}

// ---- TQ1_0 ---------------------------------------------------------------------------------
void tensor_ref_dequant_tq1_0(const void *src, float *y, int64_t n) {
	const block_tq1_0 *b = src;
	for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
		const float d = F16(b[i].d);
		for (int e = 0; e < QK_K; e++) y[e] = (float)(tensor_tq1_get(&b[i], e) - 1) * d;
	}
}

void tensor_ref_quant_tq1_0(const float *x, void *dst, int64_t n) {
	block_tq1_0 *b = dst;
	uint8_t t[QK_K];
	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		b[i].d = tq_trits(x, t);
		// elements 0..159: byte m holds 32n + m; 160..239: byte 32 + m holds 160 + 16n + m;
		// 240..255: qh byte m holds 240 + 4n + m
		for (int m = 0; m < 32; m++) b[i].qs[m] = tq1_byte(t + m, 5, 32);
		for (int m = 0; m < 16; m++) b[i].qs[32 + m] = tq1_byte(t + 160 + m, 5, 16);
		for (int m = 0; m < 4; m++) b[i].qh[m] = tq1_byte(t + 240 + m, 4, 4);
	}
}

// ---- TQ2_0 ---------------------------------------------------------------------------------
void tensor_ref_dequant_tq2_0(const void *src, float *y, int64_t n) {
	const block_tq2_0 *b = src;
	for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
		const float d = F16(b[i].d);
		for (int e = 0; e < QK_K; e++) y[e] = (float)(((b[i].qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3) - 1) * d;
	}
}

void tensor_ref_quant_tq2_0(const float *x, void *dst, int64_t n) {
	block_tq2_0 *b = dst;
	uint8_t t[QK_K];
	for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
		b[i].d = tq_trits(x, t);
		memset(b[i].qs, 0, sizeof b[i].qs);
		for (int e = 0; e < QK_K; e++) b[i].qs[32 * (e / 128) + e % 32] |= (uint8_t)(t[e] << (2 * (e % 128 / 32)));
	}
}
