// model (internal): the loaded model's structure shared by load.c and forward.c.
#ifndef LANES_MODEL_INT_H
#define LANES_MODEL_INT_H

#include "model/model.h"

#include <stdatomic.h>

// A weight matrix (or a stack of them, one per expert) in the mapping.
typedef struct {
	const void *data;   // first byte, in the mapping; NULL when the tensor is absent
	uint32_t type;      // enum gguf_ttype
	int64_t k;          // elements per row (ne[0])
	int64_t rows;       // rows per matrix (ne[1]): the outputs
	int64_t n_mat;      // matrices (ne[2]: experts); 1 for a plain matrix
	size_t row_bytes;
	size_t mat_bytes;   // rows * row_bytes
	tensor_mat tm;      // as the model's kernel set reads it (packed copy or in place)
} mweight;

typedef struct {
	const float *attn_norm;                 // [n_embd]
	mweight wq, wk, wv, wo;                 // [n_embd -> n_heads*head_dim] ... [q_dim -> n_embd]; q, k, v may be row blocks of one fused matrix (phi3)
	const float *bq, *bk, *bv, *bo;         // optional biases of the four
	const float *q_norm, *k_norm;           // [head_dim] per-head RMS norm (qwen3, gemma3)
	const float *ffn_norm;                  // [n_embd]
	const float *attn_post_norm, *ffn_post_norm; // [n_embd] norms of the blocks' outputs (gemma)
	mweight ffn_gate, ffn_up, ffn_down;     // dense: [n_embd -> n_ff], [n_ff -> n_embd]; gate and up may be one matrix's halves (phi3)
	mweight gate_inp;                       // router [n_embd -> n_experts]
	mweight gate_exps, up_exps, down_exps;  // [n_experts][n_embd -> n_ff_exp], down back
	mweight gate_shexp, up_shexp, down_shexp; // shared expert (qwen2moe)
	mweight gate_inp_shexp;                 // [n_embd -> 1] shared expert's sigmoid gate
	const float *sinks;                     // [n_heads] attention sink logits (gpt-oss), or NULL
	const float *gate_inp_b;                // [n_experts] router bias (gpt-oss), or NULL
	const float *gate_exps_b, *up_exps_b;   // [n_experts][n_ff_exp] expert biases (gpt-oss), or NULL
	const float *down_exps_b;               // [n_experts][n_embd]
	// a recurrent (Gated DeltaNet) layer, qwen3next; C = model_ssm_conv_dim, VD = ssm_v_heads * ssm_dv
	mweight ssm_qkv;                        // [n_embd -> C]: queries, keys, values (attn_qkv)
	mweight ssm_z;                          // [n_embd -> VD]: the output gate (attn_gate)
	mweight ssm_in;                         // or both in one matrix as older files store it, per key head: q, k, v, z (ssm_in)
	mweight ssm_ba;                         // [n_embd -> 2 * ssm_v_heads]: per key head, its value heads' beta then alpha
	mweight ssm_out;                        // [VD -> n_embd]
	const float *ssm_conv1d;                // [C][ssm_conv] the causal convolution, oldest input first
	const float *ssm_dt;                    // [ssm_v_heads] bias of alpha before the softplus
	const float *ssm_a;                     // [ssm_v_heads] -exp(A_log): the decay's rate
	const float *ssm_norm;                  // [ssm_dv] the gated RMSNorm's weights
	// bert: attn_norm and ffn_norm are the LayerNorms after the attention's and the FFN's residual adds
	const float *attn_norm_b, *ffn_norm_b;  // [n_embd] their biases
	const float *b_up, *b_down;             // [n_ff], [n_embd] the FFN's biases
} mlayer;

// An MTP layer's own tensors (blk.N.nextn.*); its block is layers[n_layers + i].
typedef struct {
	mweight eh_proj;              // [2 n_embd -> n_embd]: the embedding's half first, then the hidden state's
	const float *enorm, *hnorm;   // [n_embd]
	mweight own_embed, own_head;  // embed_tokens [n_embd] x n_vocab and shared_head_head [n_embd -> n_vocab], when stored
	const mweight *embed, *head;  // the layer's own, or the model's token_embd and output
	const float *head_norm;       // shared_head_norm, or the model's output norm
} mnextn;

struct model {
	gguf *g;
	gguf *hg;                 // a separate MTP head's file (--draft-head), or NULL
	model_hparams hp;
	bool has_bias, qk_norm, shexp;
	mweight tok_embd;         // [n_embd] x n_vocab rows
	mweight output;           // [n_embd -> n_vocab]; token_embd when tied
	const float *output_norm; // [n_embd]
	mlayer *layers;           // n_layers, then the n_nextn MTP layers' blocks
	mnextn *nextn;            // n_nextn
	float **owned;            // vectors converted to f32 (copies)
	int n_owned, cap_owned;
	uint64_t weight_bytes, copied_bytes;
	const tensor_kernels *ks; // the kernel set, chosen at load
	void *packed;             // matrices repacked for ks (one mapping), or NULL
	size_t packed_bytes;
	bool compact;             // grid-type matrices read in place (model_select_compact)
	double pack_ms;           // time spent repacking at load
	const float *rope_long, *rope_short; // [n_rot/2] Phi 3's LongRoPE divisors (NULL: none); hp.rope has one
	// bert
	const float *pos_embd;    // [n_ctx_train][n_embd] learned position embeddings
	const float *type_embd;   // [n_types][n_embd] token type embeddings, or NULL
	const float *embd_norm, *embd_norm_b; // [n_embd] the embeddings' LayerNorm
	mweight cls;              // [n_embd -> n_embd] the classifier's dense layer (cls.weight), or absent
	const float *cls_b;       // [n_embd]
};

// bert's forward (bert.c): model_forward_hidden for an encoder.
int model_bert_forward(const model *m, kv_cache *kv, base_pool *pool, const model_row *rows, int64_t n, const bool *want,
		       float *hidden, char *err, size_t errlen);

// The weights an adapter may target, per layer, then the output head.
enum lora_kind {
	LK_Q, LK_K, LK_V, LK_O, LK_GATE, LK_UP, LK_DOWN, LK_SSM_IN, LK_SSM_QKV, LK_SSM_Z, LK_SSM_BA, LK_SSM_OUT, LK_LAYER,
	LK_OUTPUT = LK_LAYER, LK_COUNT
};
_Static_assert((int)LK_Q == (int)MODEL_LORA_Q && (int)LK_DOWN == (int)MODEL_LORA_DOWN && (int)LK_SSM_IN == (int)MODEL_LORA_SSM_IN &&
		       (int)LK_SSM_OUT == (int)MODEL_LORA_SSM_OUT && (int)LK_OUTPUT == (int)MODEL_LORA_OUTPUT &&
		       (int)LK_COUNT == (int)MODEL_LORA_KINDS, "the public adapter kinds are the internal ones");

// One adapted weight: A [r rows of n_in], B [n_out rows of r], as the model's kernel set reads them.
typedef struct {
	int32_t r, n_in, n_out;
	tensor_mat a, b;
} lora_pair;

struct model_lora {
	const model *m;
	atomic_int refs;        // model_lora_ref / model_lora_free; freed at zero
	uint64_t id;            // unique in the process: never reused, even after a free
	uint64_t madds;         // multiply-adds one row's terms take (sum of r * (n_in + n_out))
	double share;           // madds over the base model's per row
	void (*on_free)(void *arg, const struct model_lora *a); // model_lora_on_free
	void *on_free_arg;
	float alpha;            // adapter.lora.alpha; 0: the scale is the user's alone
	int32_t rank;           // the largest r
	int32_t n_pairs;
	lora_pair *pairs;
	lora_pair **by;         // [n_layers * LK_LAYER + 1]: layer l's kind k at l * LK_LAYER + k, the output last
	unsigned kinds;         // bit k: some pair of kind k
	void *mem;              // the matrices' bytes (packed or as stored)
	uint64_t bytes;
};

// The pair of a for layer l's kind k (l < 0: the output head), or NULL.
static inline const lora_pair *lora_pair_of(const model_lora *a, int l, int k) {
	return a->by[l < 0 ? (size_t)a->m->hp.n_layers * LK_LAYER : (size_t)l * LK_LAYER + (size_t)k];
}

// The pass keeps layer l's choices of its n rows (experts.c).
void model_routes_put(model_routes *r, int32_t l, const int32_t *ids, const float *w, int64_t n);

#endif
