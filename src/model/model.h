// model: the llama family (llama/mistral, qwen2, qwen3, Mixtral-style MoE, qwen2moe,
// qwen3moe), gemma2, gemma3, phi3, gpt-oss, qwen3next (Gated DeltaNet layers beside gated attention)
// and bert (an encoder: cross-encoder rerankers) — hyper-parameters from GGUF metadata, weights bound in place from the
// mapping and checked against them, and forward(batch) over the paged KV cache.
#ifndef LANES_MODEL_H
#define LANES_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "gguf/gguf.h"
#include "kv/kv.h"
#include "tensor/tensor.h"

typedef struct {
	char arch[16];          // general.architecture: "llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "gemma2", "gemma3", "phi3", "gpt-oss"
	int32_t n_vocab;        // logits per row
	int32_t n_embd;         // residual width
	int32_t n_layers;       // the trunk's blocks (block_count less the MTP layers)
	int32_t n_nextn;        // MTP layers (<arch>.nextn_predict_layers), stored as blocks n_layers .. n_layers + n_nextn - 1
	int32_t n_heads;        // query heads
	int32_t n_kv_heads;     // key/value heads (GQA: divides n_heads; MQA: 1)
	int32_t head_dim;       // values per head (qwen3: attention.key_length)
	int32_t n_ff;           // dense FFN width (0 for MoE layers)
	int32_t n_experts;      // 0 for a dense model
	int32_t n_experts_used; // experts per token
	int32_t n_ff_exp;       // width of one expert's FFN
	int32_t n_ff_shexp;     // width of the shared expert (qwen2moe), else 0
	bool moe_norm;          // renormalize the chosen experts' weights to sum 1
	int32_t n_ctx_train;    // context_length (informational: longer contexts are allowed)
	float rms_eps;
	tensor_rope rope;       // freq_factors points into the model
	uint32_t main_type;     // the weight type holding most matrix elements (enum gguf_ttype)
	int32_t pooling;        // pooling_type as written (0 none, 1 mean, 2 cls, 3 last); -1 when absent
	float attn_scale;       // queries' scores are multiplied by it (1/sqrt(head_dim) but for Gemma 2 and 3 27B)
	// Gemma's block (all off for the llama family):
	float embd_scale;       // embeddings multiplied by it after the lookup (sqrt(n_embd)), else 1
	bool post_norms;        // RMSNorm of each block's output before its residual add
	bool geglu;             // FFN gate GELU (tanh form) instead of SiLU
	float attn_softcap;     // attention scores s -> cap * tanh(s / cap) (0: none)
	float final_softcap;    // the same on the output logits (0: none)
	int32_t n_swa;          // sliding window of the local layers, in positions (0: none)
	int32_t swa_pattern;    // layer l is local when l % swa_pattern < swa_pattern - 1 (0: every layer is)
	tensor_rope rope_swa;   // the local layers' rope where it differs (gemma3); n_rot 0: they use rope
	bool oai;               // gpt-oss: attention sinks, a router bias, biased experts with the clamped SwiGLU
	// qwen3next (all 0 elsewhere): Gated DeltaNet layers between the full-attention ones
	bool attn_gate;         // attn_q's rows per head: D of the query, then D of a sigmoid gate on its output
	int32_t full_attn_interval; // layer l is full attention when (l + 1) % it == 0, else recurrent (0: no recurrent layers)
	int32_t ssm_conv;       // the short causal convolution's width (ssm.conv_kernel)
	int32_t ssm_dk;         // a key head's width (ssm.state_size)
	int32_t ssm_k_heads;    // key (and query) heads (ssm.group_count)
	int32_t ssm_v_heads;    // value heads (ssm.time_step_rank); a multiple of ssm_k_heads
	int32_t ssm_dv;         // a value head's width (ssm.inner_size / ssm_v_heads)
	// bert (all 0 elsewhere): an encoder, its attention bidirectional over a whole sequence
	bool encoder;           // no output head: a pass runs every sequence whole and gives hidden states only
	float norm_eps;         // LayerNorm's epsilon (attention.layer_norm_epsilon)
	int32_t n_types;        // rows of token_types (0: none)
	int32_t type_sep;       // a sequence's rows after its first token of this id take token type 1 (-1: all type 0)
	bool cls_head;          // cls.weight in a reranker: a position-0 row's hidden state is the classifier's input tanh(W h + b)
} model_hparams;

// Whether layer l is a recurrent (Gated DeltaNet) layer.
static inline bool model_layer_recurrent(const model_hparams *hp, int32_t l) {
	return hp->full_attn_interval > 0 && (l + 1) % hp->full_attn_interval != 0;
}

// Layers that keep K and V in the cache (the others keep a recurrent state per sequence). An
// encoder keeps none: its pass holds them, and one layer's pages only count its sequences.
static inline int32_t model_kv_layers(const model_hparams *hp) {
	if (hp->encoder) return 1;
	return hp->full_attn_interval > 0 ? hp->n_layers / hp->full_attn_interval : hp->n_layers;
}

// The cache layer of full-attention layer l.
static inline int32_t model_kv_layer(const model_hparams *hp, int32_t l) {
	return hp->full_attn_interval > 0 ? l / hp->full_attn_interval : l;
}

// Channels the convolution runs over in a recurrent layer: queries, keys, then values.
static inline int64_t model_ssm_conv_dim(const model_hparams *hp) {
	return 2 * (int64_t)hp->ssm_k_heads * hp->ssm_dk + (int64_t)hp->ssm_v_heads * hp->ssm_dv;
}

// Floats one recurrent layer keeps per sequence: the convolution's last ssm_conv - 1 inputs,
// then a [ssm_dv][ssm_dk] matrix per value head.
static inline int64_t model_ssm_layer_floats(const model_hparams *hp) {
	if (!hp->full_attn_interval) return 0;
	return (int64_t)(hp->ssm_conv - 1) * model_ssm_conv_dim(hp) + (int64_t)hp->ssm_v_heads * hp->ssm_dv * hp->ssm_dk;
}

// Floats of recurrent state per sequence, every recurrent layer's (0: none).
static inline int64_t model_state_floats(const model_hparams *hp) {
	return (int64_t)(hp->n_layers - model_kv_layers(hp)) * model_ssm_layer_floats(hp);
}

// The window layer l's queries see (0: every position before them).
static inline int32_t model_layer_window(const model_hparams *hp, int32_t l) {
	if (hp->n_swa <= 0) return 0;
	return hp->swa_pattern == 0 || l % hp->swa_pattern < hp->swa_pattern - 1 ? hp->n_swa : 0;
}

typedef struct model model;

// Opens path, reads the hyper-parameters, binds and checks every tensor. Returns 0, or a
// negative code with a message naming the architecture, key or tensor at fault.
int model_load(model **out, const char *path, char *err, size_t errlen); // thread-safe
// Load progress: done of total bytes of weight matrices read from the file and laid out for
// the kernel set (repacked, or bound in place), reported once before the first and after each
// matrix. done never falls; a load that succeeds reports done == total last.
typedef void (*model_progress_fn)(void *ud, uint64_t done, uint64_t total);
// model_load that reports to fn (NULL: none), on the calling thread only, never two at once.
// Thread-safe as model_load, fn and ud being the caller's.
int model_load_progress(model **out, const char *path, model_progress_fn fn, void *ud, char *err, size_t errlen);
// model_load_progress with the MTP layers of a separate head file (general.type "mtp", its
// blocks named after the trunk's depth, as lanes learn --mtp writes them) in place of any the
// model's file has; head NULL: none. LANES_EFORMAT naming what does not match the model.
int model_load_head(model **out, const char *path, const char *head, model_progress_fn fn, void *ud, char *err, size_t errlen);
// The same over an open gguf, which the model then owns (freed by model_free, also on failure).
// Thread-safe on distinct ggufs.
int model_from_gguf(model **out, gguf *g, char *err, size_t errlen);
// Accepts NULL. Not thread-safe: nothing else may use m during or after it.
void model_free(model *m);
// What depends on the context a sequence may hold, n_ctx positions: Phi 3's LongRoPE rotates by
// its long factors past the original context, else by its short ones (the choice at load).
// Chosen once per loaded model, before its first pass, so every request gets the same factors
// (and no K in a cache was rotated by the others). A no-op for the other models. Not
// thread-safe: call it before the model is shared.
void model_set_context(model *m, int32_t n_ctx);
// Thread-safe: a loaded model is read-only, so every reader below may run on any thread.
const model_hparams *model_hparams_of(const model *m);
const gguf *model_gguf(const model *m); // metadata (e.g. for the tokenizer)
// Bytes of weights read from the mapping, and bytes the model copied (converted vectors).
uint64_t model_weight_bytes(const model *m);
uint64_t model_copied_bytes(const model *m);
// The kernel set the model runs with (tensor_kernels_default() when it was loaded), the
// bytes of weights repacked for it (anonymous memory beside the mapping; 0 for "ref"), and
// the milliseconds that repacking took.
const tensor_kernels *model_kernels(const model *m);
uint64_t model_packed_bytes(const model *m);
double model_pack_ms(const model *m);

// How the matrices of the grid types (IQ3, IQ2, IQ1) are held by models loaded from now on:
// expanded into the kernel set's tiles (about 4.5 bits a weight, the fastest), compact at the
// file's size (1.6 to 3.4 bits a weight, its blocks regrouped per tile, each tile read as it is
// or expanded as a matmul reaches it: the same bits, a slower decode), or auto: compact when
// packing every matrix would take more than 3/4 of the memory available at the load (or of the
// budget below). Thread-safe.
enum model_compact { MODEL_COMPACT_AUTO, MODEL_COMPACT_ON, MODEL_COMPACT_OFF };
void model_select_compact(enum model_compact c);
// The memory auto measures against for loads from now on (a server's --memory); 0: the memory
// available at each load. Thread-safe.
void model_select_compact_budget(uint64_t bytes);
// Whether m holds its grid-type matrices compact.
bool model_compact(const model *m);

// The memory a model's weights take in this process, by kind.
typedef struct {
	uint64_t packed_bytes;   // matrices repacked for the kernel set (model_packed_bytes)
	uint64_t in_place_bytes; // tensors read from the file as stored: token_embd, aligned f32
				 // vectors, and matrices the kernel set does not repack
	uint64_t copied_bytes;   // vectors converted to f32 copies (model_copied_bytes)
	uint64_t file_bytes;     // every tensor the model binds, as stored (model_weight_bytes)
	uint64_t total_bytes;    // packed + in place + copied: what the process holds for weights
	const char *kernels;     // name of the kernel set the figures are for
} model_memory;

// The figures of a loaded model. Thread-safe.
void model_memory_of(const model *m, model_memory *out);
// Metadata only: reads the hyper-parameters, binds and checks every tensor exactly as
// model_load does, and fills the figures a model_load with tensor_kernels_default() would
// have — without reading, converting or packing any tensor data. hp->rope.freq_factors is
// NULL. hp or mem may be NULL. Returns 0, or model_load's codes and messages.
int model_load_meta(const char *path, model_hparams *hp, model_memory *mem, char *err, size_t errlen);
// The same over an open gguf, which stays the caller's. Both are thread-safe.
int model_meta_from_gguf(const gguf *g, model_hparams *hp, model_memory *mem, char *err, size_t errlen);
// The same with the MTP layers of head file hg (NULL: none), as model_load_head binds them.
int model_meta_head(const gguf *g, const gguf *hg, model_hparams *hp, model_memory *mem, char *err, size_t errlen);

// A kv_config that fits this model: type, page_tokens per page, scale groups of one head,
// and enough pages for n_seqs sequences of n_ctx tokens each. Thread-safe.
kv_config model_kv_config(const model *m, enum kv_type type, int32_t n_seqs, int32_t n_ctx,
			  int32_t page_tokens);

// ---- LoRA adapters (lora.c) ---------------------------------------------------------------
// A GGUF LoRA adapter as llama.cpp's convert_lora_to_gguf.py writes it (general.type adapter,
// adapter.type lora, adapter.lora.alpha; pairs `<base tensor>.lora_a` [n_in -> r] and
// `.lora_b` [r -> n_out] in F32, F16, BF16 or Q8_0), checked against one loaded model and laid
// out for its kernel set. Targets: attn_q/k/v/output, ffn_gate/up/down of dense layers, output.
typedef struct model_lora model_lora;

// Reads and checks path against m (architecture, names, shapes, types); copies what it needs,
// so the file is closed on return. Returns 0, or LANES_EFORMAT / LANES_EUNSUPPORTED /
// LANES_EIO / LANES_ENOMEM with a message naming the file and the key or tensor at fault.
// Thread-safe: m is only read. The adapter must not outlive m. It comes with one reference,
// the caller's.
int model_lora_load(model_lora **out, const model *m, const char *path, char *err, size_t errlen);
// The same from an open file (fd stays the caller's; name is how messages call it).
int model_lora_load_fd(model_lora **out, const model *m, int fd, const char *name, char *err, size_t errlen);
// The same over an open gguf, which stays the caller's.
int model_lora_from_gguf(model_lora **out, const model *m, const gguf *g, char *err, size_t errlen);
// References: whoever may still run a pass with the adapter holds one. model_lora_ref adds one
// and returns a; model_lora_free drops one (accepts NULL) and frees the adapter with the last.
// Both thread-safe; exact under any interleaving.
const model_lora *model_lora_ref(const model_lora *a);
void model_lora_free(const model_lora *a);
// Called once, on the thread that drops the last reference, just before the adapter is
// freed (fn must not take a reference). Set it before sharing the adapter. Not thread-safe.
void model_lora_on_free(model_lora *a, void (*fn)(void *arg, const model_lora *a), void *arg);
// A number no other adapter loaded in this process has or will have (a freed adapter's
// address may be reused; its id is not). Thread-safe.
uint64_t model_lora_id(const model_lora *a);

typedef struct {
	int32_t rank;       // the largest r of its pairs
	float alpha;        // adapter.lora.alpha (0: absent, the scale is the user's alone)
	int32_t n_targets;  // weight matrices it adapts
	uint64_t bytes;     // memory it holds (its matrices as the kernel set reads them)
	uint64_t madds;     // multiply-adds one row's terms take: sum over pairs of r * (n_in + n_out)
	double share;       // madds over the multiply-adds of the base model's own row
	char targets[128];  // the kinds it adapts, "attn_q,attn_k,...,output"
} model_lora_info;
void model_lora_info_of(const model_lora *a, model_lora_info *out); // thread-safe
const model *model_lora_base(const model_lora *a);                  // the model it was loaded for

// The weights an adapter may target; llama.cpp's names (model_lora_kind_name) with `blk.L.`
// before and `.weight` after: "attn_q" ... "ffn_down" per layer, a recurrent (Gated DeltaNet)
// layer's projections "ssm_in" ... "ssm_out", then the output head.
enum model_lora_kind {
	MODEL_LORA_Q, MODEL_LORA_K, MODEL_LORA_V, MODEL_LORA_O, MODEL_LORA_GATE, MODEL_LORA_UP, MODEL_LORA_DOWN,
	MODEL_LORA_SSM_IN, MODEL_LORA_SSM_QKV, MODEL_LORA_SSM_Z, MODEL_LORA_SSM_BA, MODEL_LORA_SSM_OUT,
	MODEL_LORA_OUTPUT, MODEL_LORA_KINDS
};
const char *model_lora_kind_name(int32_t kind); // "attn_q"; NULL outside the list
// The inputs and outputs of layer l's weight of that kind (l ignored for the output head).
// False when an adapter cannot target it: no such layer or kind, an MoE layer's FFN, a tied
// output head. Thread-safe.
bool model_lora_target(const model *m, int32_t l, int32_t kind, int64_t *n_in, int64_t *n_out);

// An adapter made in memory (training): one pair per shape, in the order given.
typedef struct {
	int32_t layer; // ignored for MODEL_LORA_OUTPUT
	int32_t kind;  // enum model_lora_kind
	int32_t r;     // rank, 1..n_in
} model_lora_shape;
// A new adapter for m with alpha (0: absent) and n pairs, its matrices F32 and zero (B = 0:
// the base's logits bit for bit until it is filled). LANES_EINVAL with a message naming the
// pair for a weight it cannot target (model_lora_target), a rank outside 1..n_in or a weight
// given twice; LANES_ENOMEM. Thread-safe; the adapter must not outlive m.
int model_lora_new(model_lora **out, const model *m, float alpha, const model_lora_shape *shapes, int32_t n,
		   char *err, size_t errlen);
// Writes pair i (the i-th shape given to model_lora_new) from a [r][n_in] and b [n_out][r]
// floats. Never allocates or fails. Only while no pass uses a: an adapter in use is immutable.
void model_lora_fill(model_lora *a, int32_t i, const float *a_rows, const float *b_rows);

// The adapters one row adds, in order: each targeted weight W gives y = W x + sum_i
// scale_i * (alpha/r) * B_i (A_i x) (alpha/r as llama.cpp: 1 when alpha is 0), each term in
// f32, added in this order. Many rows may point at one set.
#define MODEL_LORA_MAX 8
typedef struct {
	int32_t n;
	struct {
		const model_lora *lora; // loaded for the model that runs the row
		float scale;            // the user's scale
	} use[MODEL_LORA_MAX];
} model_lora_set;

// One row of a batch.
typedef struct {
	int32_t token;  // vocabulary id
	int32_t pos;    // absolute position in its sequence
	int32_t seq;    // KV sequence slot
	bool logits;    // write this row's logits
	const model_lora_set *lora; // adapters this row adds (NULL or n = 0: the base model alone)
} model_row;

// Runs n rows through the model. Rows may come from many sequences, prompt rows and decode
// rows mixed; the rows of one sequence must be positions len..len+m-1 (len = its
// kv_seq_len before the call), each once, in any order. Writes their K/V into kv, grows
// the sequences, and writes n_vocab logits for each row with `logits` set into logits
// (flagged rows in batch order). A row's logits depend only on its token, position and its
// sequence's KV (and its own adapters) — never on the other rows, the thread count or how a
// prompt was cut.
// pool: threads to use (NULL: the caller alone). On error kv is unchanged: LANES_EINVAL
// (bad rows or a kv that does not fit the model), LANES_ELIMIT (not enough free pages),
// LANES_ENOMEM. Thread-safe on distinct kv caches (m is only read); one call per kv at a time.
int model_forward(const model *m, kv_cache *kv, base_pool *pool, const model_row *rows, int64_t n,
		  float *logits, char *err, size_t errlen);

// A forward pass's workspace, allocated once for up to max_rows rows on up to nth threads;
// model_forward allocates one per call. Attention is fused (tiles with an online softmax,
// nothing sized by positions) unless model_attn_set_fused(false) (the CLI's LANES_ATTN=unfused),
// which keeps scores for max_pos positions per thread (f16 caches only; block types run fused).
typedef struct model_ws model_ws;
bool model_attn_fused(void); // thread-safe
// Fused by default. Not thread-safe: set it once, before the first pass.
void model_attn_set_fused(bool fused);
// Bytes model_ws_new allocates for those bounds (max_pos <= 0: fused); 0 when too large. Thread-safe.
uint64_t model_ws_bytes(const model_hparams *hp, int64_t max_rows, int nth, int32_t max_pos);
int model_ws_new(model_ws **out, const model *m, int64_t max_rows, int nth, int32_t max_pos, char *err,
		 size_t errlen);
// model_ws_new is thread-safe; a workspace serves one pass at a time, and model_ws_free
// (accepts NULL) must not overlap one.
void model_ws_free(model_ws *w);
uint64_t model_ws_size(const model_ws *w); // bytes it holds; thread-safe
// model_forward in w. LANES_EINVAL when the rows, threads or positions exceed its bounds.
// Thread-safe as model_forward, with one call per w at a time.
int model_forward_ws(const model *m, kv_cache *kv, base_pool *pool, model_ws *w, const model_row *rows, int64_t n,
		     float *logits, char *err, size_t errlen);
// model_forward_ws that also writes n_embd floats into hidden for each row i with want[i]
// (flagged rows in batch order): the state the output head reads (after the output norm),
// as embeddings pool it. Like the logits, a row's hidden state depends only on its token,
// position and its sequence's KV. want NULL: none.
// An encoder (hp.encoder) takes every sequence whole: its rows are positions 0..len-1 of a
// sequence empty before the call, none with logits, no adapters (else LANES_EINVAL); its
// hidden state is the last layer's output (with cls_head, a position-0 row's is the
// classifier's input), a function of its own sequence's tokens alone.
int model_forward_hidden(const model *m, kv_cache *kv, base_pool *pool, model_ws *w, const model_row *rows,
			 int64_t n, float *logits, const bool *want, float *hidden, char *err, size_t errlen);

// ---- the MTP head (multi-token prediction: the nextn layers) -------------------------------
// A model with n_nextn > 0 carries a head that proposes the token after next. Row p of the head
// reads the token at p + 1 and a hidden state for position p (the trunk's, as
// model_forward_hidden gives it, or the head's own from its previous row):
//   x = eh_proj . concat(enorm(embed(token)), hnorm(hidden))
// then one transformer block (MTP layer 0, over its own KV at position p), then
// shared_head_norm and shared_head_head (the model's output norm and head where the layer has
// none) give the logits for position p + 2. The trunk never runs these blocks.

// A kv_config for the head's KV: one layer, like model_kv_config otherwise. Thread-safe.
kv_config model_mtp_kv_config(const model *m, enum kv_type type, int32_t n_seqs, int32_t n_ctx, int32_t page_tokens);
// Runs n head rows (lora must be NULL; logits as model_forward's) with hin [n][n_embd] their
// hidden states, over kv made by model_mtp_kv_config, in a workspace of the model's. For
// each row with logits it writes n_vocab logits and, into hout (NULL: none), the n_embd state
// its logits were read from (after the head's norm), flagged rows in batch order: the next
// row's hidden state when the head chains. LANES_EINVAL when the model has no MTP layer, or
// as model_forward_ws. Thread-safe as model_forward_ws.
int model_mtp_forward(const model *m, kv_cache *kv, base_pool *pool, model_ws *w, const model_row *rows, int64_t n,
		      const float *hin, float *logits, float *hout, char *err, size_t errlen);

// ---- head versions (head.c): an MTP head made while the process runs ----------------------
// A head learned while serving is served as versions: each a copy of its weights in f32 bound
// to the model like a loaded head's (the same bits as that head saved and loaded with
// model_load_head), read by model_mtp_forward through model_head_model. Refcounted: a version
// lives while anyone holds it; the model must outlive every version.
typedef struct model_head model_head;
// The head's trained weights, f32, row-major [rows][cols]; q, k, v: rows of n_heads (or
// n_kv_heads) * head_dim; biases and q/k norms NULL where the head has none.
typedef struct {
	const float *eh_proj;                  // [n_embd][2 n_embd]: the embedding's half first
	const float *enorm, *hnorm, *attn_norm, *ffn_norm, *head_norm; // [n_embd]
	const float *wq, *wk, *wv, *wo;        // [qd][n_embd], [kvd][n_embd] twice, [n_embd][qd]
	const float *bq, *bk, *bv, *bo;        // [qd], [kvd], [kvd], [n_embd]
	const float *q_norm, *k_norm;          // [head_dim]
	const float *ffn_gate, *ffn_up, *ffn_down; // [n_ff][n_embd] twice, [n_embd][n_ff]
} model_head_f32;
// A version of w (copied) for m, reading the embedding and output head m's own head reads (its
// first MTP layer's), else m's token_embd and output. LANES_EINVAL for a recurrent, MoE or
// encoder model; LANES_ENOMEM. Thread-safe.
int model_head_new(model_head **out, const model *m, const model_head_f32 *w, char *err, size_t errlen);
// Writes w over v's weights: only while nothing else holds v (before it is handed out).
void model_head_set(model_head *v, const model_head_f32 *w);
model_head *model_head_ref(model_head *v);
void model_head_free(model_head *v); // drops a reference; accepts NULL
// The model with v as its MTP layer 0 (n_nextn 1), for model_mtp_forward and model_ws_new_head;
// it lives as long as v.
const model *model_head_model(const model_head *v);
uint64_t model_head_bytes(const model_head *v); // the weights it holds
// A workspace for MTP passes of m or of any head version of m (model_ws_new's codes).
int model_ws_new_head(model_ws **out, const model *m, int64_t max_rows, int nth, int32_t max_pos, char *err, size_t errlen);
// model_ws_bytes of such a workspace.
uint64_t model_ws_bytes_head(const model_hparams *hp, int64_t max_rows, int nth, int32_t max_pos);

// ---- the MoE observer's side of the pass (experts.c) --------------------------------------
// A pass can keep what every MoE layer's router chose for each row (its top-k experts and
// their weights, exactly as the pass used them), and counters add them up per group of rows.
// Keeping them only copies the router's results: a row's logits are the same with or without.
typedef struct model_routes model_routes;

// Room for the choices of passes of up to max_rows rows of a MoE model. 0; LANES_EINVAL for a
// dense model or max_rows < 1; LANES_ENOMEM. Thread-safe.
int model_routes_new(model_routes **out, const model_hparams *hp, int64_t max_rows, char *err, size_t errlen);
void model_routes_free(model_routes *r); // accepts NULL; no pass may be writing it
// Passes in w write their choices into r from now on (NULL: stop). r must hold w's rows and fit
// the model w runs. Not thread-safe against a pass in w.
void model_ws_set_routes(model_ws *w, model_routes *r);
// The last pass's rows, and layer l's choices of them: [rows][n_experts_used] expert ids
// (largest weight first) and their weights. Valid until the next pass.
int64_t model_routes_rows(const model_routes *r);
const int32_t *model_routes_ids(const model_routes *r, int32_t l);
const float *model_routes_weights(const model_routes *r, int32_t l);

// Counters over the kept choices, in n_groups groups (a caller's split of rows: by domain and
// phase, say). For every MoE layer: how often each expert was among a row's top k, the router
// weight it got summed, and how often each pair of experts was chosen by the same row.
typedef struct model_experts model_experts;

// Index of the pair i < j among the n*(n-1)/2 pairs of n experts.
static inline int64_t model_expert_pair(int32_t n, int32_t i, int32_t j) {
	return (int64_t)i * (2 * (int64_t)n - i - 1) / 2 + (j - i - 1);
}

// Zeroed counters. 0; LANES_EINVAL (a dense model, n_groups < 1); LANES_ENOMEM. Thread-safe.
int model_experts_new(model_experts **out, const model_hparams *hp, int32_t n_groups, char *err, size_t errlen);
void model_experts_free(model_experts *c); // accepts NULL
void model_experts_clear(model_experts *c);
// Adds r's last pass: row i into group[i] (outside 0..n_groups-1: not counted). Allocates nothing.
void model_experts_add(model_experts *c, const model_routes *r, const int32_t *group);
// dst = src; both made for the same model and groups (else LANES_EINVAL).
int model_experts_copy(model_experts *dst, const model_experts *src);

// One group's counters, read in place (valid while c is unchanged).
typedef struct {
	int32_t n_layers, n_experts, n_used; // n_used: experts per row
	int64_t n_pairs;                     // n_experts * (n_experts - 1) / 2
	int32_t n_groups;
	uint64_t rows;                       // rows counted (each passes every layer)
	const uint64_t *act;                 // [n_layers][n_experts]: times among a row's top k
	const double *mass;                  // [n_layers][n_experts]: the router weights it got
	const uint64_t *pairs;               // [n_layers][n_pairs]: rows that chose both (model_expert_pair)
} model_experts_view;
// Group g's counters (0 <= g < n_groups).
void model_experts_group(const model_experts *c, int32_t g, model_experts_view *out);

// ---- the weights as stored, for passes other than forward (training) ---------------------
// A matrix (or a stack of n_mat, one per expert) as the file stores it, read-only: rows of k
// elements of type, row_bytes apart; tensor_traits_of(type)->to_f32 reads whole blocks.
typedef struct {
	const void *data;       // the first row; NULL when the model has no such matrix
	uint32_t type;          // enum gguf_ttype
	int64_t k, rows, n_mat; // inputs, outputs per matrix, matrices
	size_t row_bytes, mat_bytes;
} model_matrix;

typedef struct {
	const float *attn_norm, *ffn_norm;        // [n_embd]
	const float *q_norm, *k_norm;             // [head_dim] per-head norms (qwen3), or NULL
	const float *bq, *bk, *bv, *bo;           // biases, or NULL
	model_matrix wq, wk, wv, wo;              // [n_embd -> q_dim], [n_embd -> kv_dim] x2, [q_dim -> n_embd]
	model_matrix ffn_gate, ffn_up, ffn_down;  // dense FFN (absent in MoE layers)
	model_matrix router;                      // [n_embd -> n_experts]
	model_matrix gate_exps, up_exps, down_exps;              // n_experts stacks
	model_matrix gate_shexp, up_shexp, down_shexp;           // shared expert (qwen2moe)
	model_matrix router_shexp;                // [n_embd -> 1] the shared expert's sigmoid gate
	const float *attn_post_norm, *ffn_post_norm; // [n_embd] norms of the blocks' outputs (gemma), or NULL
	const float *sinks;                       // [n_heads] attention sink logits (gpt-oss), or NULL
	const float *router_b;                    // [n_experts] router bias (gpt-oss), or NULL
	const float *gate_exps_b, *up_exps_b;     // [n_experts][n_ff_exp] expert biases (gpt-oss), or NULL
	const float *down_exps_b;                 // [n_experts][n_embd]
} model_layer_weights;

typedef struct {
	model_matrix tok_embd;    // n_vocab rows of n_embd
	model_matrix output;      // [n_embd -> n_vocab]; token_embd's rows when tied
	const float *output_norm; // [n_embd]
	bool tied;                // the output head is token_embd
} model_io_weights;

// MTP layer i's own weights; its block is layer n_layers + i of model_layer_weights_of.
typedef struct {
	model_matrix eh_proj;            // [2 n_embd -> n_embd]: the embedding's half first
	const float *enorm, *hnorm;      // [n_embd]
	const float *head_norm;          // shared_head_norm, or the model's output norm
	model_matrix embed, head;        // the layer's own, or the model's token_embd and output
} model_mtp_weights;

// Thread-safe: the views point into the loaded model and live as long as it.
void model_layer_weights_of(const model *m, int32_t l, model_layer_weights *out);
void model_io_weights_of(const model *m, model_io_weights *out);
// LANES_EINVAL unless i < n_nextn.
int model_mtp_weights_of(const model *m, int32_t i, model_mtp_weights *out);

#endif
