// tensor/ref: reference (scalar) quantize and dequantize of every block format; the
// specification the fast kernels are tested against. Internal to src/tensor.
#ifndef LANES_TENSOR_REF_QUANTS_H
#define LANES_TENSOR_REF_QUANTS_H

#include "tensor/tensor.h"

#include <stdbool.h>

// One pair per block type: n is a multiple of the type's block.
#define TENSOR_REF_DECL(t)                                                        \
	void tensor_ref_dequant_##t(const void *src, float *dst, int64_t n);      \
	void tensor_ref_quant_##t(const float *src, void *dst, int64_t n);
// The grid types also quantize under importances (imp: one per element of src; NULL: none).
#define TENSOR_REF_DECL_IMP(t)                                                    \
	TENSOR_REF_DECL(t)                                                        \
	void tensor_ref_quant_imp_##t(const float *src, void *dst, int64_t n, const float *imp);

TENSOR_REF_DECL(q4_0)
TENSOR_REF_DECL(q4_1)
TENSOR_REF_DECL(q5_0)
TENSOR_REF_DECL(q5_1)
TENSOR_REF_DECL(q8_0)
TENSOR_REF_DECL(q8_1)
TENSOR_REF_DECL_IMP(q2_K)
TENSOR_REF_DECL_IMP(q3_K)
TENSOR_REF_DECL_IMP(q4_K)
TENSOR_REF_DECL_IMP(q5_K)
TENSOR_REF_DECL_IMP(q6_K)
TENSOR_REF_DECL(q8_K)
TENSOR_REF_DECL_IMP(iq4_nl)
TENSOR_REF_DECL_IMP(iq4_xs)
TENSOR_REF_DECL(mxfp4)
TENSOR_REF_DECL(tq1_0)
TENSOR_REF_DECL(tq2_0)
TENSOR_REF_DECL_IMP(iq3_xxs)
TENSOR_REF_DECL_IMP(iq3_s)
TENSOR_REF_DECL_IMP(iq2_xxs)
TENSOR_REF_DECL_IMP(iq2_xs)
TENSOR_REF_DECL_IMP(iq2_s)
TENSOR_REF_DECL_IMP(iq1_s)
TENSOR_REF_DECL_IMP(iq1_m)

#undef TENSOR_REF_DECL
#undef TENSOR_REF_DECL_IMP

// ---- the grid quantizers' search (tensor/ref/iq_fit.c) ---------------------------------------
// A grid as the search reads it: n points of g elements, element j of point i byte j of
// entry i of tab (w bytes per entry), magnitudes or (is_signed) int8 values; its distinct
// magnitudes ascending in lev; pick (not 0): each group takes the offset +pick or -pick
// that stores it better (delta unused); pts, the points as floats (iq_expand).
typedef struct {
	const void *tab;
	int n, g, w;
	bool is_signed;
	int nlev;
	float lev[8];
	float pick;
	const float *pts;
} iq_grid;
// Set in an index from iq_codes where the group took the offset -pick.
#define IQ_NEG_PICK 0x8000
// Fills pts (n * g floats, n a multiple of 16) with gr's points and points gr at them: the
// search's form.
void iq_expand(iq_grid *gr, float *pts);
// Every search below takes weights wt beside its targets a (the importance of each element;
// NULL: all 1) and minimizes the weighted squared error.
// The point nearest the g targets a at scale s (g = 4 or 8): the least sum over j in order of
// wt_j ((a_j - s delta) - s p_j)^2 (the first on ties); that error in *err (may be NULL).
int iq_nearest(const iq_grid *gr, const float *a, const float *wt, float s, float delta, float *err);
// The build of that search the kernel set in use runs: "avx512", "avx2" or "portable".
const char *iq_search_build(void);
// ng groups of g targets at scale s (group k offset by delta[k]; NULL: none): each group's
// nearest point into idx (may be NULL); returns the squared error, and for those points the
// least-squares scale in *lsq and how much it lowers the error below sum a^2 in *gain (either
// may be NULL).
float iq_codes(const iq_grid *gr, const float *a, const float *wt, int ng, const float *delta, float s, int *idx, float *lsq,
	       float *gain);
// The scale of ng groups with the least error found, its gain in *gain; 0 for all-zero targets.
float iq_fit(const iq_grid *gr, const float *a, const float *wt, int ng, const float *delta, float *gain);
// The stored index ls in [0, nl) for a sub-block fitted at scale s, the element scale being
// d (2 ls + 1) mul: the rounded one or a neighbour, whichever stores the targets with less
// error; their points at that scale into idx.
int iq_pick_ls(const iq_grid *gr, const float *a, const float *wt, int ng, const float *delta, float s, float d, float mul, int nl,
	       int *idx);
// Signs of 8 elements (bit j: element j negative), the count made even when `even` by giving
// the element that costs least (smallest wt x^2) the other sign; a_j = x_j with its stored sign taken off.
uint8_t iq_signs8(const float *x, const float *wt, bool even, float *a);
// The weights of a block of n elements x under importances imp: imp_i sqrt(sigma2 + x_i^2),
// sigma2 twice the block's mean square; into wt, returned.
const float *quant_weights(const float *x, const float *imp, int n, float *wt);
// The same for a block of QK_K (imp NULL: none, and NULL returned).
const float *iq_weights(const float *x, const float *imp, float wt[QK_K]);

#endif
