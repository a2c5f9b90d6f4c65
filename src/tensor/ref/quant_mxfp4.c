// tensor/ref/quant_mxfp4: reference quantize and dequantize of MXFP4 — blocks of 32 E2M1
// codes under one E8M0 exponent, an element being 2^(e-128) * value[code] with the codebook
// tensor_mxfp4_values (the E2M1 values doubled).
#include "tensor/ref/quants.h"

#include <math.h>

// The E2M1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, doubled; ggml publishes
// the same table as kvalues_mxfp4.
const int8_t tensor_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// The largest exponent a quantizer writes: 255 is E8M0's NaN.
#define E8M0_MAX 254

// The code whose value times d is nearest x, the first of equals (so +0 over -0).
static int mxfp4_nearest(float x, float d) {
	int best = 0;
	float be = fabsf((float)tensor_mxfp4_values[0] * d - x);
	for (int i = 1; i < 16; i++) {
		const float e = fabsf((float)tensor_mxfp4_values[i] * d - x);
		if (e < be) be = e, best = i;
	}
	return best;
}

// Squared error of 32 elements stored under exponent e, summed in element order.
static float mxfp4_err(const float *x, int e) {
	const float d = tensor_e8m0_half((uint8_t)e);
	float s = 0.0f;
	for (int j = 0; j < QK_MXFP4; j++) {
		const float r = x[j] - d * (float)tensor_mxfp4_values[mxfp4_nearest(x[j], d)];
		s += r * r;
	}
	return s;
}

void tensor_ref_dequant_mxfp4(const void *src, float *y, int64_t n) {
	const block_mxfp4 *b = src;
	for (int64_t i = 0; i < n / QK_MXFP4; i++, y += QK_MXFP4) {
		const float d = tensor_e8m0_half(b[i].e);
		for (int j = 0; j < QK_MXFP4 / 2; j++) {
			y[j] = d * (float)tensor_mxfp4_values[b[i].qs[j] & 0x0f];
			y[j + QK_MXFP4 / 2] = d * (float)tensor_mxfp4_values[b[i].qs[j] >> 4];
		}
	}
}

// The exponent as ggml picks it, floor(log2 amax) - 2 (so amax lands in [4, 8) units, the top
// codes 4 and 6), or one above it where that stores the block with less squared error (the
// elements above 6 units no longer clipped). 0 for an all-zero block.
void tensor_ref_quant_mxfp4(const float *x, void *dst, int64_t n) {
	block_mxfp4 *b = dst;
	for (int64_t i = 0; i < n / QK_MXFP4; i++, x += QK_MXFP4) {
		float amax = 0.0f;
		for (int j = 0; j < QK_MXFP4; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
		int e = 0;
		if (amax > 0.0f) {
			int ex;
			frexpf(amax, &ex); // amax = m 2^ex, m in [0.5, 1): floor(log2 amax) = ex - 1, exactly
			e = ex - 1 - 2 + 127;
			e = e < 0 ? 0 : e > E8M0_MAX ? E8M0_MAX : e;
			if (e < E8M0_MAX && mxfp4_err(x, e + 1) < mxfp4_err(x, e)) e++;
		}
		b[i].e = (uint8_t)e;
		const float d = tensor_e8m0_half(b[i].e);
		for (int j = 0; j < QK_MXFP4 / 2; j++)
			b[i].qs[j] = (uint8_t)(mxfp4_nearest(x[j], d) | mxfp4_nearest(x[j + QK_MXFP4 / 2], d) << 4);
	}
}
