// tensor/ref/quant_legacy: reference quantize and dequantize of the 32-element block
// formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1). Dequantization uses plain float
// arithmetic in the natural order so it is bit-exact with files made by llama.cpp.
#include "tensor/ref/quants.h"

#include <math.h>
#include <string.h>

#define F16(x) tensor_f16_to_f32(x)
#define TO_F16(x) tensor_f32_to_f16(x)

// The element of largest magnitude (first one on ties), with its sign.
static float signed_absmax(const float *x, int n) {
	float amax = 0.0f, max = 0.0f;
	for (int j = 0; j < n; j++) {
		if (amax < fabsf(x[j])) {
			amax = fabsf(x[j]);
			max = x[j];
		}
	}
	return max;
}

static void min_max(const float *x, int n, float *mn, float *mx) {
	float lo = INFINITY, hi = -INFINITY;
	for (int j = 0; j < n; j++) {
		if (x[j] < lo) lo = x[j];
		if (x[j] > hi) hi = x[j];
	}
	*mn = lo, *mx = hi;
}

static inline int imin(int a, int b) { return a < b ? a : b; }

// ---- Q4_0: x = d * (q - 8) ---------------------------------------------------------------
void tensor_ref_dequant_q4_0(const void *src, float *y, int64_t n) {
	const block_q4_0 *b = src;
	for (int64_t i = 0; i < n / QK4_0; i++, y += QK4_0) {
		const float d = F16(b[i].d);
		for (int j = 0; j < QK4_0 / 2; j++) {
			const int x0 = (b[i].qs[j] & 0x0f) - 8;
			const int x1 = (b[i].qs[j] >> 4) - 8;
			y[j] = x0 * d;
			y[j + QK4_0 / 2] = x1 * d;
		}
	}
}

void tensor_ref_quant_q4_0(const float *x, void *dst, int64_t n) {
	block_q4_0 *b = dst;
	for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
		// The extreme element maps to -8 exactly, so the full range [-8, 7] is used.
		const float d = signed_absmax(x, QK4_0) / -8;
		const float id = d ? 1.0f / d : 0.0f;
		b[i].d = TO_F16(d);
		for (int j = 0; j < QK4_0 / 2; j++) {
			const int q0 = imin(15, (int)(int8_t)(x[j] * id + 8.5f));
			const int q1 = imin(15, (int)(int8_t)(x[j + QK4_0 / 2] * id + 8.5f));
			b[i].qs[j] = (uint8_t)(q0 | q1 << 4);
		}
	}
}

// ---- Q4_1: x = d * q + m -----------------------------------------------------------------
void tensor_ref_dequant_q4_1(const void *src, float *y, int64_t n) {
	const block_q4_1 *b = src;
	for (int64_t i = 0; i < n / QK4_1; i++, y += QK4_1) {
		const float d = F16(b[i].d), m = F16(b[i].m);
		for (int j = 0; j < QK4_1 / 2; j++) {
			const int x0 = b[i].qs[j] & 0x0f;
			const int x1 = b[i].qs[j] >> 4;
			y[j] = x0 * d + m;
			y[j + QK4_1 / 2] = x1 * d + m;
		}
	}
}

void tensor_ref_quant_q4_1(const float *x, void *dst, int64_t n) {
	block_q4_1 *b = dst;
	for (int64_t i = 0; i < n / QK4_1; i++, x += QK4_1) {
		float mn, mx;
		min_max(x, QK4_1, &mn, &mx);
		const float d = (mx - mn) / 15;
		const float id = d ? 1.0f / d : 0.0f;
		b[i].d = TO_F16(d);
		b[i].m = TO_F16(mn);
		for (int j = 0; j < QK4_1 / 2; j++) {
			const int q0 = imin(15, (int)(int8_t)((x[j] - mn) * id + 0.5f));
			const int q1 = imin(15, (int)(int8_t)((x[j + QK4_1 / 2] - mn) * id + 0.5f));
			b[i].qs[j] = (uint8_t)(q0 | q1 << 4);
		}
	}
}

// ---- Q5_0: x = d * (q - 16), the 5th bit of element j in bit j of qh ----------------------
void tensor_ref_dequant_q5_0(const void *src, float *y, int64_t n) {
	const block_q5_0 *b = src;
	for (int64_t i = 0; i < n / QK5_0; i++, y += QK5_0) {
		const float d = F16(b[i].d);
		const uint32_t qh = tensor_rd_u32(b[i].qh);
		for (int j = 0; j < QK5_0 / 2; j++) {
			const int h0 = (int)((qh >> j) & 1) << 4;
			const int h1 = (int)((qh >> (j + 16)) & 1) << 4;
			const int x0 = ((b[i].qs[j] & 0x0f) | h0) - 16;
			const int x1 = ((b[i].qs[j] >> 4) | h1) - 16;
			y[j] = x0 * d;
			y[j + QK5_0 / 2] = x1 * d;
		}
	}
}

void tensor_ref_quant_q5_0(const float *x, void *dst, int64_t n) {
	block_q5_0 *b = dst;
	for (int64_t i = 0; i < n / QK5_0; i++, x += QK5_0) {
		const float d = signed_absmax(x, QK5_0) / -16;
		const float id = d ? 1.0f / d : 0.0f;
		b[i].d = TO_F16(d);
		uint32_t qh = 0;
		for (int j = 0; j < QK5_0 / 2; j++) {
			const int q0 = imin(31, (int)(int8_t)(x[j] * id + 16.5f));
			const int q1 = imin(31, (int)(int8_t)(x[j + QK5_0 / 2] * id + 16.5f));
			b[i].qs[j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
			qh |= (uint32_t)((q0 >> 4) & 1) << j;
			qh |= (uint32_t)((q1 >> 4) & 1) << (j + 16);
		}
		tensor_wr_u32(b[i].qh, qh);
	}
}

// ---- Q5_1: x = d * q + m -----------------------------------------------------------------
void tensor_ref_dequant_q5_1(const void *src, float *y, int64_t n) {
	const block_q5_1 *b = src;
	for (int64_t i = 0; i < n / QK5_1; i++, y += QK5_1) {
		const float d = F16(b[i].d), m = F16(b[i].m);
		const uint32_t qh = tensor_rd_u32(b[i].qh);
		for (int j = 0; j < QK5_1 / 2; j++) {
			const int h0 = (int)((qh >> j) & 1) << 4;
			const int h1 = (int)((qh >> (j + 16)) & 1) << 4;
			const int x0 = (b[i].qs[j] & 0x0f) | h0;
			const int x1 = (b[i].qs[j] >> 4) | h1;
			y[j] = x0 * d + m;
			y[j + QK5_1 / 2] = x1 * d + m;
		}
	}
}

void tensor_ref_quant_q5_1(const float *x, void *dst, int64_t n) {
	block_q5_1 *b = dst;
	for (int64_t i = 0; i < n / QK5_1; i++, x += QK5_1) {
		float mn, mx;
		min_max(x, QK5_1, &mn, &mx);
		const float d = (mx - mn) / 31;
		const float id = d ? 1.0f / d : 0.0f;
		b[i].d = TO_F16(d);
		b[i].m = TO_F16(mn);
		uint32_t qh = 0;
		for (int j = 0; j < QK5_1 / 2; j++) {
			const int q0 = imin(31, (int)(int8_t)((x[j] - mn) * id + 0.5f));
			const int q1 = imin(31, (int)(int8_t)((x[j + QK5_1 / 2] - mn) * id + 0.5f));
			b[i].qs[j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
			qh |= (uint32_t)((q0 >> 4) & 1) << j;
			qh |= (uint32_t)((q1 >> 4) & 1) << (j + 16);
		}
		tensor_wr_u32(b[i].qh, qh);
	}
}

// ---- Q8_0: x = d * q ---------------------------------------------------------------------
void tensor_ref_dequant_q8_0(const void *src, float *y, int64_t n) {
	const block_q8_0 *b = src;
	for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
		const float d = F16(b[i].d);
		for (int j = 0; j < QK8_0; j++) y[j] = b[i].qs[j] * d;
	}
}

static float absmax(const float *x, int n) {
	float amax = 0.0f;
	for (int j = 0; j < n; j++) amax = fmaxf(amax, fabsf(x[j]));
	return amax;
}

void tensor_ref_quant_q8_0(const float *x, void *dst, int64_t n) {
	block_q8_0 *b = dst;
	for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
		const float d = absmax(x, QK8_0) / 127;
		const float id = d ? 1.0f / d : 0.0f;
		b[i].d = TO_F16(d);
		for (int j = 0; j < QK8_0; j++) b[i].qs[j] = (int8_t)roundf(x[j] * id);
	}
}

// ---- Q8_1: x = d * q, with s = d * sum(q) for the Q4_1/Q5_1 dot products ------------------
void tensor_ref_dequant_q8_1(const void *src, float *y, int64_t n) {
	const block_q8_1 *b = src;
	for (int64_t i = 0; i < n / QK8_1; i++, y += QK8_1) {
		const float d = F16(b[i].d);
		for (int j = 0; j < QK8_1; j++) y[j] = b[i].qs[j] * d;
	}
}

void tensor_ref_quant_q8_1(const float *x, void *dst, int64_t n) {
	block_q8_1 *b = dst;
	for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
		const float d = absmax(x, QK8_1) / 127;
		const float id = d ? 1.0f / d : 0.0f;
		int sum = 0;
		for (int j = 0; j < QK8_1; j++) {
			b[i].qs[j] = (int8_t)roundf(x[j] * id);
			sum += b[i].qs[j];
		}
		b[i].d = TO_F16(d);
		b[i].s = TO_F16(sum * d);
	}
}
