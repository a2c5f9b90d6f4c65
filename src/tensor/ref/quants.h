// tensor/ref: reference (scalar) quantize and dequantize of every block format; the
// specification the fast kernels are tested against. Internal to src/tensor.
#ifndef LANES_TENSOR_REF_QUANTS_H
#define LANES_TENSOR_REF_QUANTS_H

#include "tensor/tensor.h"

// One pair per block type: n is a multiple of the type's block.
#define TENSOR_REF_DECL(t)                                                        \
	void tensor_ref_dequant_##t(const void *src, float *dst, int64_t n);      \
	void tensor_ref_quant_##t(const float *src, void *dst, int64_t n);

TENSOR_REF_DECL(q4_0)
TENSOR_REF_DECL(q4_1)
TENSOR_REF_DECL(q5_0)
TENSOR_REF_DECL(q5_1)
TENSOR_REF_DECL(q8_0)
TENSOR_REF_DECL(q8_1)
TENSOR_REF_DECL(q2_K)
TENSOR_REF_DECL(q3_K)
TENSOR_REF_DECL(q4_K)
TENSOR_REF_DECL(q5_K)
TENSOR_REF_DECL(q6_K)
TENSOR_REF_DECL(q8_K)
TENSOR_REF_DECL(iq4_nl)
TENSOR_REF_DECL(iq4_xs)
TENSOR_REF_DECL(tq1_0)
TENSOR_REF_DECL(tq2_0)

#undef TENSOR_REF_DECL

#endif
