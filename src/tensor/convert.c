// tensor/convert: whole-tensor conversion between f32 and a block type, rows split across
// a thread pool; used by the quantizer and the model generator.
#include "tensor/tensor.h"

#include <stdbool.h>

typedef struct {
	const tensor_traits *tt;
	bool to_f32;
	const void *src;
	void *dst;
	const float *imp; // importances of a row's elements, or NULL
	int64_t nrows, n;
	size_t row_bytes;
} conv_job;

// Thread ith takes a contiguous slice of rows; rows are independent, so any split gives
// the same bytes.
static void conv_slice(void *arg, int ith, int nth) {
	const conv_job *j = arg;
	int64_t r0 = j->nrows * ith / nth, r1 = j->nrows * (ith + 1) / nth;
	for (int64_t r = r0; r < r1; r++) {
		if (j->to_f32)
			j->tt->to_f32((const uint8_t *)j->src + r * j->row_bytes, (float *)j->dst + r * j->n, j->n);
		else if (j->imp && j->tt->from_f32_imp)
			j->tt->from_f32_imp((const float *)j->src + r * j->n, (uint8_t *)j->dst + r * j->row_bytes, j->n, j->imp);
		else
			j->tt->from_f32((const float *)j->src + r * j->n, (uint8_t *)j->dst + r * j->row_bytes, j->n);
	}
}

static int convert(uint32_t type, bool to_f32, const void *src, void *dst, int64_t nrows, int64_t n, const float *imp,
		   base_pool *pool) {
	const tensor_traits *tt = tensor_traits_of(type);
	size_t rb = tensor_row_bytes(type, n);
	if (!tt || nrows < 0 || (n > 0 && !rb)) return LANES_EINVAL;
	conv_job j = {.tt = tt, .to_f32 = to_f32, .src = src, .dst = dst, .imp = imp, .nrows = nrows, .n = n,
		      .row_bytes = rb};
	if (!nrows || !n) return 0;
	if (pool && nrows > 1) base_pool_run(pool, conv_slice, &j);
	else conv_slice(&j, 0, 1);
	return 0;
}

int tensor_quantize_rows(uint32_t type, const float *src, void *dst, int64_t nrows, int64_t n,
			 base_pool *pool) {
	return convert(type, false, src, dst, nrows, n, NULL, pool);
}

int tensor_quantize_rows_imp(uint32_t type, const float *src, void *dst, int64_t nrows, int64_t n, const float *imp,
			     base_pool *pool) {
	return convert(type, false, src, dst, nrows, n, imp, pool);
}

int tensor_dequantize_rows(uint32_t type, const void *src, float *dst, int64_t nrows, int64_t n,
			   base_pool *pool) {
	return convert(type, true, src, dst, nrows, n, NULL, pool);
}
