// tests: the type tables — every KV type's traits (its name parses back, the pool allocates
// the bytes per token it states, what kv_put encodes the attention view decodes), and every
// tensor type's block facts against the block structs and the reader's table.
#include "kv/kv.h"
#include "tensor/tensor.h"
#include "t.h"

#include <math.h>

#define KV_DIM 64    // two heads of 32: a whole block of every block type
#define HEAD 32
#define LAYERS 2
#define PAGE 4

static void kv_type_entries(void) {
	for (int t = 0; t < KV_TYPE_COUNT; t++) {
		const kv_type_traits *kt = kv_type_get((enum kv_type)t);
		CHECKF(kt && kt->name && kt->encode, "kv type %d has traits", t);
		if (!kt || !kt->name) continue;
		CHECKF(kv_type_parse(kt->name) == t, "%s parses back", kt->name);
		CHECK(kv_type_name((enum kv_type)t) == kt->name);
		CHECKF(tensor_traits_of(kt->ttype) != NULL, "%s: its row type converts", kt->name);
		CHECKF(kt->f16 == (kt->enc == TENSOR_KV_F16) && kt->f16 == (kt->ttype == GGUF_T_F16),
		       "%s: f16 rows, f16 encoding and f16 values go together", kt->name);
		CHECKF(!kt->scaled || kt->f16, "%s: scale bytes sit beside f16 rows only", kt->name);
	}
	CHECK(kv_type_get(KV_TYPE_COUNT) == NULL && kv_type_name(KV_TYPE_COUNT) == NULL);
	CHECK(kv_type_parse("f32") < 0 && kv_type_parse("") < 0 && kv_type_parse(NULL) < 0);
}

// The K and V of a token at position pos, distinct per layer and position, some large.
static void token_values(int32_t layer, int32_t pos, float *k, float *v) {
	for (int i = 0; i < KV_DIM; i++) {
		k[i] = (float)sin(0.37 * i + pos + 3.0 * layer) * (i % 7 == 0 ? 40.0f : 1.5f);
		v[i] = (float)cos(0.21 * i - pos + layer) * (i % 5 == 0 ? 0.01f : 2.0f);
	}
}

// Worst |decoded - x| over the values of one position, through the attention view of each head.
static float decode_error(kv_cache *kv, int32_t layer, int32_t pos, bool v, const float *x) {
	float worst = 0.0f, row[HEAD];
	for (int32_t h = 0; h < KV_DIM / HEAD; h++) {
		const tensor_kv_view kvv = kv_view(kv, layer, 0, h * HEAD);
		const float sc = tensor_kv_row(&kvv, v, pos, HEAD, row);
		for (int e = 0; e < HEAD; e++) {
			const float d = fabsf(row[e] * sc - x[h * HEAD + e]);
			worst = d > worst ? d : worst;
		}
	}
	return worst;
}

static void kv_type_pools(void) {
	// bounds on |error| / max |x| of a group: f16 rounding, int8 and 4-bit codes
	static const float bound[KV_TYPE_COUNT] = {[KV_F16] = 1e-3f, [KV_F16S] = 1e-3f, [KV_Q8_0] = 1.0f / 127,
						   [KV_Q4_0] = 1.0f / 7};
	const tensor_kernels *ks = tensor_kernels_default();
	for (int t = 0; t < KV_TYPE_COUNT; t++) {
		const kv_type_traits *kt = kv_type_get((enum kv_type)t);
		const kv_config c = {.type = (enum kv_type)t, .n_layers = LAYERS, .kv_dim = KV_DIM, .group = HEAD,
				     .page_tokens = PAGE, .n_pages = 3, .n_seqs = 1};
		const uint64_t per = kv_bytes_per_token(c.type, LAYERS, KV_DIM, HEAD);
		const size_t row = tensor_row_bytes(kt->ttype, KV_DIM);
		CHECKF(per == (row + (kt->scaled ? KV_DIM / HEAD : 0)) * 2 * LAYERS, "%s: %llu bytes per token", kt->name,
		       (unsigned long long)per);
		// a row that is not whole blocks of its type is refused, by the sizing and by the pool
		const int64_t blk = tensor_traits_of(kt->ttype)->block;
		if (blk > 1) {
			kv_config bad = c;
			bad.kv_dim = KV_DIM + (int32_t)blk / 2, bad.group = bad.kv_dim;
			kv_cache *no = NULL;
			char e[256];
			CHECKF(kv_bytes_per_token(bad.type, LAYERS, bad.kv_dim, bad.group) == 0 &&
				       kv_new(&no, &bad, e, sizeof e) == LANES_EINVAL && !no,
			       "%s: rows of %d values refused", kt->name, bad.kv_dim);
		}
		kv_cache *kv = NULL;
		char err[256];
		CHECKF(kv_new(&kv, &c, err, sizeof err) == 0, "%s: %s", kt->name, err);
		if (!kv) continue;
		CHECKF(kv_page_bytes(kv) == per * PAGE && kv_row_bytes(kv) == row, "%s: the pool holds %llu bytes a page",
		       kt->name, (unsigned long long)kv_page_bytes(kv));
		const int32_t n = 2 * PAGE + 1;
		CHECK(kv_seq_grow(kv, 0, n) == 0);
		CHECK(kv_k_at(kv, 0, 0, 1) - kv_k_at(kv, 0, 0, 0) == (ptrdiff_t)row);
		CHECK((kv_k_row(kv, 0, 0, 0) != NULL) == kt->f16 && (kv_ks_row(kv, 0, 0, 0) != NULL) == kt->scaled);
		float k[KV_DIM], v[KV_DIM];
		for (int32_t l = 0; l < LAYERS; l++)
			for (int32_t p = 0; p < n; p++) token_values(l, p, k, v), kv_put(kv, ks, l, 0, p, k, v);
		for (int32_t l = 0; l < LAYERS; l++)
			for (int32_t p = 0; p < n; p++) {
				token_values(l, p, k, v);
				float km = 0.0f, vm = 0.0f;
				for (int i = 0; i < KV_DIM; i++) km = fmaxf(km, fabsf(k[i])), vm = fmaxf(vm, fabsf(v[i]));
				const float ek = decode_error(kv, l, p, false, k), ev = decode_error(kv, l, p, true, v);
				CHECKF(ek <= bound[t] * km && ev <= bound[t] * vm, "%s layer %d pos %d: decoded off by %g, %g",
				       kt->name, l, p, ek, ev);
				// the row holds exactly what the type's encoder writes for these values
				uint8_t want[KV_DIM * 4], sc[KV_DIM / HEAD] = {0};
				kt->encode(ks, k, KV_DIM, HEAD, want, sc);
				CHECKF(!memcmp(want, kv_k_at(kv, l, 0, p), row) &&
					       (!kt->scaled || !memcmp(sc, kv_ks_row(kv, l, 0, p), sizeof sc)),
				       "%s layer %d pos %d: the stored row is the encoder's", kt->name, l, p);
			}
		kv_free(kv);
	}
}

// Every tensor type lanes computes with: block and bytes as the block structs have them, and
// as the GGUF reader states them.
static void tensor_type_entries(void) {
	static const struct {
		uint32_t type;
		int64_t block;
		size_t bytes;
	} want[] = {
		{GGUF_T_F32, 1, sizeof(float)},         {GGUF_T_F16, 1, sizeof(uint16_t)},
		{GGUF_T_BF16, 1, sizeof(uint16_t)},     {GGUF_T_Q4_0, QK4_0, sizeof(block_q4_0)},
		{GGUF_T_Q4_1, QK4_1, sizeof(block_q4_1)}, {GGUF_T_Q5_0, QK5_0, sizeof(block_q5_0)},
		{GGUF_T_Q5_1, QK5_1, sizeof(block_q5_1)}, {GGUF_T_Q8_0, QK8_0, sizeof(block_q8_0)},
		{GGUF_T_Q8_1, QK8_1, sizeof(block_q8_1)}, {GGUF_T_Q2_K, QK_K, sizeof(block_q2_K)},
		{GGUF_T_Q3_K, QK_K, sizeof(block_q3_K)}, {GGUF_T_Q4_K, QK_K, sizeof(block_q4_K)},
		{GGUF_T_Q5_K, QK_K, sizeof(block_q5_K)}, {GGUF_T_Q6_K, QK_K, sizeof(block_q6_K)},
		{GGUF_T_Q8_K, QK_K, sizeof(block_q8_K)}, {GGUF_T_IQ4_NL, QK4_NL, sizeof(block_iq4_nl)},
		{GGUF_T_IQ4_XS, QK_K, sizeof(block_iq4_xs)}, {GGUF_T_TQ1_0, QK_K, sizeof(block_tq1_0)},
		{GGUF_T_TQ2_0, QK_K, sizeof(block_tq2_0)}, {GGUF_T_IQ3_XXS, QK_K, sizeof(block_iq3_xxs)},
		{GGUF_T_IQ3_S, QK_K, sizeof(block_iq3_s)}, {GGUF_T_IQ2_XXS, QK_K, sizeof(block_iq2_xxs)},
		{GGUF_T_IQ2_XS, QK_K, sizeof(block_iq2_xs)}, {GGUF_T_IQ2_S, QK_K, sizeof(block_iq2_s)},
		{GGUF_T_IQ1_S, QK_K, sizeof(block_iq1_s)}, {GGUF_T_IQ1_M, QK_K, sizeof(block_iq1_m)},
		{GGUF_T_MXFP4, QK_MXFP4, sizeof(block_mxfp4)},
	};
	const int nw = (int)(sizeof want / sizeof want[0]);
	int convertible = 0;
	for (uint32_t t = 0; t < GGUF_T_COUNT; t++) {
		const tensor_traits *tt = tensor_traits_of(t);
		const gguf_ttype_info *gi = gguf_ttype_get(t);
		if (gi) CHECKF(gguf_ttype_by_name(gi->name) == (int)t, "%s parses back", gi->name);
		if (!tt) continue;
		convertible++;
		CHECKF(gi && !strcmp(tt->name, gi->name) && tt->block == (int64_t)gi->block && tt->bytes == gi->bytes,
		       "type %u: tensor and gguf agree", t);
		int w = 0;
		while (w < nw && want[w].type != t) w++;
		CHECKF(w < nw, "%s: a block struct is listed for it", tt->name);
		if (w == nw) continue;
		CHECKF(tt->block == want[w].block && tt->bytes == want[w].bytes, "%s: %lld values in %zu bytes, not %lld in %zu",
		       tt->name, (long long)tt->block, tt->bytes, (long long)want[w].block, want[w].bytes);
		CHECK(tensor_row_bytes(t, 2 * tt->block) == 2 * tt->bytes);
		CHECK(tt->block == 1 || tensor_row_bytes(t, tt->block + 1) == 0);
	}
	CHECKF(convertible == nw, "%d convertible types", convertible);
}

int main(void) {
	kv_type_entries();
	kv_type_pools();
	tensor_type_entries();
	T_DONE("type_tables");
}
