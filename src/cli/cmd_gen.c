// cli: `lanes gen --shape NAME --type TYPE --vocab VOCAB.gguf -o OUT.gguf [--seed S]` —
// a llama-family (or gemma2, gemma3, phi3, gpt-oss, qwen3next) model with random weights (and a real vocabulary) for tests and
// benchmarks, or a BERT cross-encoder with a small WordPiece vocabulary of its own (no --vocab);
// `lanes gen --lora RANK -m BASE -o OUT.gguf` a random LoRA adapter for BASE.
#include "base/base.h"
#include "cli/cli.h"
#include "cli/ftype.h"
#include "gguf/gguf.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	const char *name, *arch;
	int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
	float rope_base, rms_eps;
	bool qkv_bias;    // q/k/v biases (qwen2)
	bool tied;        // no output.weight: token_embd is the output matrix too
	bool rope_llama3; // rope_freqs.weight from Llama 3's rope scaling
	int64_t n_expert, n_expert_used, n_ff_shexp; // MoE layers (n_ff per expert); a shared expert (qwen2moe)
	int64_t head_dim; // values per head (0: n_embd / n_head)
	int64_t n_swa;    // gemma: the local layers' window
	float attn_cap, final_cap; // gemma2: the soft caps
	bool qk_norm;     // per-head q and k norms (gemma3)
	float rope_linear; // linear rope scaling factor (gemma3: its global layers'; 0: none)
	int64_t n_rot;    // dimensions rotated per head (0: all)
	int64_t n_ctx_orig; // phi3: LongRoPE's original context, its factors and attention factor (0: none)
	uint32_t pooling; // the pooling_type key when set (4: rank, a reranker)
	float rope_yarn;  // YaRN scaling by this factor over an original context of n_ctx / rope_yarn (gpt-oss; 0: none)
	// qwen3next: Gated DeltaNet layers (every full_attn-th layer is gated full attention)
	int64_t full_attn, ssm_conv, ssm_dk, ssm_k_heads, ssm_v_heads, ssm_dv;
	int64_t n_nextn;  // MTP layers after the n_layer trunk blocks (their own eh_proj, norms and shared head norm)
	bool xlmr;        // bert: XLM-RoBERTa's layout (a Unigram vocabulary, "t5"; one token type)
} gen_shape;

static const gen_shape shapes[] = {
	{.name = "test", .arch = "llama", .n_embd = 64, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
	 .n_ff = 192, .n_ctx = 256, .rope_base = 10000.0f, .rms_eps = 1e-5f},
	// the test shape with an MTP layer (nextn_predict_layers 1): the trunk's 2 blocks, then the head's
	{.name = "mtp-test", .arch = "llama", .n_embd = 64, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
	 .n_ff = 192, .n_ctx = 256, .rope_base = 10000.0f, .rms_eps = 1e-5f, .n_nextn = 1},
	// the test shape's size with a long window: agents' prompts of tens of thousands of tokens
	{.name = "agent", .arch = "llama", .n_embd = 64, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
	 .n_ff = 192, .n_ctx = 131072, .rope_base = 1000000.0f, .rms_eps = 1e-5f},
	{.name = "tinyllama-1.1b", .arch = "llama", .n_embd = 2048, .n_layer = 22, .n_head = 32,
	 .n_head_kv = 4, .n_ff = 5632, .n_ctx = 2048, .rope_base = 10000.0f, .rms_eps = 1e-5f},
	{.name = "qwen2.5-0.5b", .arch = "qwen2", .n_embd = 896, .n_layer = 24, .n_head = 14,
	 .n_head_kv = 2, .n_ff = 4864, .n_ctx = 32768, .rope_base = 1000000.0f, .rms_eps = 1e-6f,
	 .qkv_bias = true, .tied = true},
	{.name = "llama-3.2-1b", .arch = "llama", .n_embd = 2048, .n_layer = 16, .n_head = 32,
	 .n_head_kv = 8, .n_ff = 8192, .n_ctx = 131072, .rope_base = 500000.0f, .rms_eps = 1e-5f,
	 .tied = true, .rope_llama3 = true},
	// Mixtral's routing (8 experts, top 2, renormalized) at a small size, and a tiny qwen2moe
	{.name = "mixtral-mini", .arch = "llama", .n_embd = 1024, .n_layer = 8, .n_head = 16, .n_head_kv = 4,
	 .n_ff = 3584, .n_ctx = 32768, .rope_base = 1000000.0f, .rms_eps = 1e-5f, .n_expert = 8, .n_expert_used = 2},
	{.name = "moe-mid", .arch = "llama", .n_embd = 512, .n_layer = 4, .n_head = 8, .n_head_kv = 2,
	 .n_ff = 1536, .n_ctx = 8192, .rope_base = 10000.0f, .rms_eps = 1e-5f, .n_expert = 8, .n_expert_used = 2},
	{.name = "qwen2moe-test", .arch = "qwen2moe", .n_embd = 64, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
	 .n_ff = 32, .n_ctx = 4096, .rope_base = 1000000.0f, .rms_eps = 1e-6f, .qkv_bias = true, .n_expert = 16,
	 .n_expert_used = 4, .n_ff_shexp = 128},
	// a Qwen3-Reranker-shaped decoder at the test size: its output head scores "yes" against "no"
	{.name = "reranker-test", .arch = "qwen2", .n_embd = 64, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
	 .n_ff = 192, .n_ctx = 1024, .rope_base = 1000000.0f, .rms_eps = 1e-6f, .qkv_bias = true, .pooling = 4},
	{.name = "reranker-0.5b", .arch = "qwen2", .n_embd = 896, .n_layer = 24, .n_head = 14, .n_head_kv = 2,
	 .n_ff = 4864, .n_ctx = 32768, .rope_base = 1000000.0f, .rms_eps = 1e-6f, .qkv_bias = true, .tied = true, .pooling = 4},
	// Gemma 2's block at the test size: heads wider than n_embd / n_head, a window of 16 on
	// the even layers, the published soft caps; and the 2B's published shape
	{.name = "gemma2-test", .arch = "gemma2", .n_embd = 64, .n_layer = 4, .n_head = 4, .n_head_kv = 2,
	 .n_ff = 192, .n_ctx = 256, .rope_base = 10000.0f, .rms_eps = 1e-6f, .tied = true, .head_dim = 32,
	 .n_swa = 16, .attn_cap = 50.0f, .final_cap = 30.0f},
	{.name = "gemma2-2b", .arch = "gemma2", .n_embd = 2304, .n_layer = 26, .n_head = 8, .n_head_kv = 4,
	 .n_ff = 9216, .n_ctx = 8192, .rope_base = 10000.0f, .rms_eps = 1e-6f, .tied = true, .head_dim = 256,
	 .n_swa = 4096, .attn_cap = 50.0f, .final_cap = 30.0f},
	// Gemma 3's block at the test size: five local layers (a window of 16) then a global one,
	// the global rope at base 1e6 scaled by 8 as the 4B's; and the 1B's published shape
	{.name = "gemma3-test", .arch = "gemma3", .n_embd = 64, .n_layer = 6, .n_head = 4, .n_head_kv = 2,
	 .n_ff = 192, .n_ctx = 256, .rope_base = 1000000.0f, .rms_eps = 1e-6f, .tied = true, .head_dim = 32,
	 .n_swa = 16, .qk_norm = true, .rope_linear = 8.0f},
	{.name = "gemma3-1b", .arch = "gemma3", .n_embd = 1152, .n_layer = 26, .n_head = 4, .n_head_kv = 1,
	 .n_ff = 6912, .n_ctx = 32768, .rope_base = 1000000.0f, .rms_eps = 1e-6f, .tied = true, .head_dim = 256,
	 .n_swa = 512, .qk_norm = true},
	// Phi 3's block at the test size: fused qkv and gate-up matrices, three quarters of each head
	// rotated (as Phi-4-mini), LongRoPE from an original context of 64, a window of 16 on every
	// layer (as Phi-3-mini); and Phi-3.5-mini's and Phi-4-mini's published shapes
	{.name = "phi3-test", .arch = "phi3", .n_embd = 128, .n_layer = 3, .n_head = 4, .n_head_kv = 2,
	 .n_ff = 192, .n_ctx = 256, .rope_base = 10000.0f, .rms_eps = 1e-5f, .n_swa = 16, .n_rot = 24,
	 .n_ctx_orig = 64},
	{.name = "phi3.5-mini", .arch = "phi3", .n_embd = 3072, .n_layer = 32, .n_head = 32, .n_head_kv = 32,
	 .n_ff = 8192, .n_ctx = 131072, .rope_base = 10000.0f, .rms_eps = 1e-5f, .n_swa = 262144, .n_ctx_orig = 4096},
	{.name = "phi4-mini", .arch = "phi3", .n_embd = 3072, .n_layer = 32, .n_head = 24, .n_head_kv = 8,
	 .n_ff = 8192, .n_ctx = 131072, .rope_base = 10000.0f, .rms_eps = 1e-5f, .tied = true, .n_swa = 262144,
	 .n_rot = 96, .n_ctx_orig = 4096},
	// gpt-oss's block at the test size: heads wider than n_embd / n_head, attention sinks, biases
	// on q/k/v/o, the router and the experts, 4 of 8 experts, a window of 16 on the even layers,
	// YaRN from an original context of 64
	{.name = "gpt-oss-test", .arch = "gpt-oss", .n_embd = 64, .n_layer = 4, .n_head = 4, .n_head_kv = 2,
	 .n_ff = 32, .n_ctx = 256, .rope_base = 150000.0f, .rms_eps = 1e-5f, .qkv_bias = true, .n_expert = 8,
	 .n_expert_used = 4, .head_dim = 32, .n_swa = 16, .rope_yarn = 4.0f},
	// Qwen3-Next's block at the test size: three Gated DeltaNet layers then gated full attention,
	// two value heads per key head, a quarter of each attention head rotated, 2 of 8 experts and
	// a shared one; and a mini with its published layer pattern and head shapes, 8 layers and
	// small experts
	{.name = "qwen3-next-test", .arch = "qwen3next", .n_embd = 64, .n_layer = 4, .n_head = 4, .n_head_kv = 2,
	 .n_ff = 32, .n_ctx = 4096, .rope_base = 10000000.0f, .rms_eps = 1e-6f, .n_expert = 8, .n_expert_used = 2,
	 .n_ff_shexp = 64, .head_dim = 32, .n_rot = 8, .qk_norm = true, .full_attn = 4, .ssm_conv = 4, .ssm_dk = 16,
	 .ssm_k_heads = 2, .ssm_v_heads = 4, .ssm_dv = 16},
	{.name = "qwen3-next-mini", .arch = "qwen3next", .n_embd = 2048, .n_layer = 8, .n_head = 16, .n_head_kv = 2,
	 .n_ff = 128, .n_ctx = 262144, .rope_base = 10000000.0f, .rms_eps = 1e-6f, .n_expert = 32, .n_expert_used = 10,
	 .n_ff_shexp = 512, .head_dim = 256, .n_rot = 64, .qk_norm = true, .full_attn = 4, .ssm_conv = 4, .ssm_dk = 128,
	 .ssm_k_heads = 16, .ssm_v_heads = 32, .ssm_dv = 128},
	// a BERT cross-encoder at the test size (bge-reranker's and ms-marco-MiniLM's layout): two
	// token types, the classifier's dense layer and its one-row output, pooling rank
	{.name = "bert-rerank-test", .arch = "bert", .n_embd = 64, .n_layer = 2, .n_head = 4, .n_head_kv = 4,
	 .n_ff = 128, .n_ctx = 512, .rms_eps = 1e-12f, .pooling = 4},
	// the test size with XLM-RoBERTa's vocabulary kind and one token type (bge-reranker's layout)
	{.name = "xlmr-rerank-test", .arch = "bert", .n_embd = 64, .n_layer = 2, .n_head = 4, .n_head_kv = 4,
	 .n_ff = 128, .n_ctx = 512, .rms_eps = 1e-5f, .pooling = 4, .xlmr = true},
	// bge-reranker-base's trunk (XLM-RoBERTa base's widths) over the same small vocabulary
	{.name = "bert-rerank-base", .arch = "bert", .n_embd = 768, .n_layer = 12, .n_head = 12, .n_head_kv = 12,
	 .n_ff = 3072, .n_ctx = 512, .rms_eps = 1e-5f, .pooling = 4},
	{.name = "gpt-oss-20b", .arch = "gpt-oss", .n_embd = 2880, .n_layer = 24, .n_head = 64, .n_head_kv = 8,
	 .n_ff = 2880, .n_ctx = 131072, .rope_base = 150000.0f, .rms_eps = 1e-5f, .qkv_bias = true, .n_expert = 32,
	 .n_expert_used = 4, .head_dim = 64, .n_swa = 128, .rope_yarn = 32.0f},
};

static bool is_gemma2(const gen_shape *s) { return !strcmp(s->arch, "gemma2"); }
static bool is_gemma(const gen_shape *s) { return is_gemma2(s) || !strcmp(s->arch, "gemma3"); }
static bool is_phi3(const gen_shape *s) { return !strcmp(s->arch, "phi3"); }
static bool is_oai(const gen_shape *s) { return !strcmp(s->arch, "gpt-oss"); }
static bool is_next(const gen_shape *s) { return !strcmp(s->arch, "qwen3next"); }
static bool is_bert(const gen_shape *s) { return !strcmp(s->arch, "bert"); }
static bool recurrent(const gen_shape *s, int64_t l) { return s->full_attn > 0 && (l + 1) % s->full_attn != 0; }
static int64_t head_dim(const gen_shape *s) { return s->head_dim ? s->head_dim : s->n_embd / s->n_head; }
static int64_t n_rot(const gen_shape *s) { return s->n_rot ? s->n_rot : head_dim(s); }

// How a tensor's values are drawn: Gaussian-like with std `scale` around `mean`, or the
// Llama 3 rope factors.
enum fill_kind { FILL_NOISE, FILL_ROPE_FREQS };

typedef struct {
	char name[64];
	uint32_t n_dims;
	int64_t ne[3];
	enum fill_kind fill;
	float mean, scale;
} gen_tensor;

// ---- random values: counter-based, so any thread split gives the same numbers ----------
typedef struct {
	float *dst;       // values i0 .. i0+n-1 of the tensor
	int64_t i0, n;
	uint64_t key;
	float mean, scale;
} fill_job;

// Four 16-bit uniforms summed (Irwin-Hall): close to a Gaussian, one splitmix64 per value.
static inline float noise(uint64_t key, int64_t i) {
	uint64_t r = splitmix64(key + (uint64_t)i * 0x9e3779b97f4a7c15ull);
	uint32_t s = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
		     (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
	// s/65536 has mean 2 and variance 4/12; scale to unit variance.
	return ((float)s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

static void fill_slice(void *arg, int ith, int nth) {
	const fill_job *j = arg;
	int64_t i0 = j->n * ith / nth, i1 = j->n * (ith + 1) / nth;
	for (int64_t i = i0; i < i1; i++) j->dst[i] = j->mean + j->scale * noise(j->key, j->i0 + i);
}

// Llama 3 rope scaling (factor 32, low/high frequency factors 1 and 4, 8192 original
// context) as per-dimension divisors of the rotation frequencies.
static void rope_llama3_factors(float *dst, int64_t n_rot, float base) {
	const double factor = 32.0, lo = 1.0, hi = 4.0, old_ctx = 8192.0;
	const double lo_wavelen = old_ctx / lo, hi_wavelen = old_ctx / hi;
	for (int64_t i = 0; i < n_rot / 2; i++) {
		double freq = 1.0 / pow(base, (double)(2 * i) / (double)n_rot);
		double wavelen = 2 * M_PI / freq;
		if (wavelen < hi_wavelen) dst[i] = 1.0f;
		else if (wavelen > lo_wavelen) dst[i] = (float)factor;
		else {
			double smooth = (old_ctx / wavelen - lo) / (hi - lo);
			dst[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
		}
	}
}

// ---- the end token ------------------------------------------------------------------------
// Residual dimension `dim` is 1 in every embedding and no layer writes it, so after the final
// norm it is about 1 at every position; only the end token's output row reads it, with weight
// `logit`: a random model then ends its turns, as a trained one does.
typedef struct {
	int32_t id;   // the end token; -1: off
	int64_t dim;
	float logit;
} gen_end;

// The chat turn's end: a ChatML or Llama 3 marker where the vocabulary has one, else its eot or eos.
static int32_t end_token(const gguf *v) {
	const gguf_value *toks = gguf_get_arr(v, "tokenizer.ggml.tokens");
	static const char *const marks[] = {"<|im_end|>", "<|eot_id|>", "<|end|>"};
	for (size_t k = 0; k < sizeof marks / sizeof marks[0]; k++)
		for (uint64_t i = 0; toks && i < toks->arr.n; i++) {
			const gguf_str t = gguf_arr_str(toks, i);
			if (t.len == strlen(marks[k]) && !memcmp(t.ptr, marks[k], t.len)) return (int32_t)i;
		}
	uint32_t id;
	if (!gguf_get_u32(v, "tokenizer.ggml.eot_token_id", &id) || !gguf_get_u32(v, "tokenizer.ggml.eos_token_id", &id)) return (int32_t)id;
	return -1;
}

static void end_edit(const gen_end *e, const char *name, float *f, int64_t r0, int64_t nr, int64_t cols) {
	if (e->id < 0) return;
	const bool embd = !strcmp(name, "token_embd.weight"), out = !strcmp(name, "output.weight");
	// the writers of the residual stream: their output row `dim` stays 0
	const char *leaf = strchr(name, '.') ? strchr(strchr(name, '.') + 1, '.') : NULL;
	const bool writer = leaf && (!strcmp(leaf, ".attn_output.weight") || !strcmp(leaf, ".ffn_down.weight"));
	for (int64_t r = r0; r < r0 + nr; r++) {
		float *row = f + (r - r0) * cols;
		if (embd) row[e->dim] = 1.0f;
		else if (writer && r == e->dim) memset(row, 0, (size_t)cols * sizeof *row);
		else if (out && r == e->id) {
			memset(row, 0, (size_t)cols * sizeof *row);
			row[e->dim] = e->logit;
		} else if (out) row[e->dim] = 0.0f;
	}
}

// ---- the tensor list -------------------------------------------------------------------
static void add_t(gen_tensor *ts, int *n, const char *name, uint32_t n_dims, int64_t ne0,
		  int64_t ne1, enum fill_kind fill, float mean, float scale) {
	gen_tensor *t = &ts[(*n)++];
	*t = (gen_tensor){.n_dims = n_dims, .ne = {ne0, ne1, 1}, .fill = fill, .mean = mean, .scale = scale};
	snprintf(t->name, sizeof t->name, "%s", name);
}

// Scales: the final RMSNorm gives the output matmul inputs of RMS 1, so output logits have
// std = out_scale * sqrt(n_embd); out_scale = 5/sqrt(n_embd) gives logit std about 5 and a
// peaked softmax over the vocabulary, like a trained model's. Layer matrices use
// 1/sqrt(fan_in) (smaller for the residual writers) so the residual stream stays bounded.
static int build_list(const gen_shape *s, int64_t n_vocab, gen_tensor **out) {
	int cap = 8 + 30 * (int)(s->n_layer + s->n_nextn), n = 0;
	gen_tensor *ts = calloc((size_t)cap, sizeof *ts);
	if (!ts) return -1;
	const int64_t d = s->n_embd, hd = head_dim(s), dq = hd * s->n_head, dkv = hd * s->n_head_kv;
	const float out_scale = 5.0f / sqrtf((float)d);
	const float in_scale = 1.0f / sqrtf((float)d), ff_scale = 1.0f / sqrtf((float)s->n_ff);
	const float resid = 1.0f / sqrtf(2.0f * (float)s->n_layer);
	add_t(ts, &n, "token_embd.weight", 2, d, n_vocab, FILL_NOISE, 0, s->tied ? out_scale : 1.0f);
	if (s->rope_llama3) add_t(ts, &n, "rope_freqs.weight", 1, hd / 2, 1, FILL_ROPE_FREQS, 0, 0);
	if (s->n_ctx_orig) {
		// positive divisors: the long ones stretch the low frequencies much further
		add_t(ts, &n, "rope_factors_long.weight", 1, n_rot(s) / 2, 1, FILL_NOISE, 6.0f, 1.0f);
		add_t(ts, &n, "rope_factors_short.weight", 1, n_rot(s) / 2, 1, FILL_NOISE, 1.5f, 0.3f);
	}
	for (int64_t l = 0; l < s->n_layer + s->n_nextn; l++) {
		char nm[64];
#define T(suffix, nd, a, b, mean, scale)                                   \
	do {                                                                \
		snprintf(nm, sizeof nm, "blk.%lld." suffix, (long long)l);   \
		add_t(ts, &n, nm, nd, a, b, FILL_NOISE, mean, scale);        \
	} while (0)
		T("attn_norm.weight", 1, d, 1, 1.0f, 0.05f);
		if (is_next(s) && recurrent(s, l)) {
			// queries, keys, values; the output gate; per key head its value heads' beta and alpha
			const int64_t C = 2 * s->ssm_k_heads * s->ssm_dk + s->ssm_v_heads * s->ssm_dv, VD = s->ssm_v_heads * s->ssm_dv;
			T("attn_qkv.weight", 2, d, C, 0, in_scale);
			T("attn_gate.weight", 2, d, VD, 0, in_scale);
			T("ssm_ba.weight", 2, d, 2 * s->ssm_v_heads, 0, in_scale);
			T("ssm_conv1d.weight", 2, s->ssm_conv, C, 0, 0.5f);
			T("ssm_dt.bias", 1, s->ssm_v_heads, 1, 0, 0.5f);
			// -exp(A_log): negative, so every step decays the state
			T("ssm_a", 1, s->ssm_v_heads, 1, -0.5f, 0.1f);
			T("ssm_norm.weight", 1, s->ssm_dv, 1, 1.0f, 0.05f);
			T("ssm_out.weight", 2, VD, d, 0, 1.0f / sqrtf((float)VD) * resid);
			T("post_attention_norm.weight", 1, d, 1, 1.0f, 0.05f);
			goto ffn;
		}
		if (is_next(s)) T("attn_q.weight", 2, d, 2 * dq, 0, in_scale); // each head's query, then its gate
		else if (is_phi3(s)) T("attn_qkv.weight", 2, d, dq + 2 * dkv, 0, in_scale);
		else T("attn_q.weight", 2, d, dq, 0, in_scale);
		if (s->qkv_bias) T("attn_q.bias", 1, dq, 1, 0, 0.1f);
		if (!is_phi3(s)) T("attn_k.weight", 2, d, dkv, 0, in_scale);
		if (s->qkv_bias) T("attn_k.bias", 1, dkv, 1, 0, 0.1f);
		if (!is_phi3(s)) T("attn_v.weight", 2, d, dkv, 0, in_scale);
		if (s->qkv_bias) T("attn_v.bias", 1, dkv, 1, 0, 0.1f);
		if (s->qk_norm) {
			// away from 1, so the norms' weights move the scores
			T("attn_q_norm.weight", 1, hd, 1, 1.5f, 0.3f);
			T("attn_k_norm.weight", 1, hd, 1, 1.5f, 0.3f);
		}
		T("attn_output.weight", 2, dq, d, 0, 1.0f / sqrtf((float)dq) * resid);
		if (is_next(s)) {
			T("post_attention_norm.weight", 1, d, 1, 1.0f, 0.05f);
		} else if (is_oai(s)) {
			T("attn_output.bias", 1, d, 1, 0, 0.1f * resid);
			// sinks about as large as the scores, so they take a share of every softmax
			T("attn_sinks.weight", 1, s->n_head, 1, 1.0f, 1.0f);
			// the FFN's input norm, under the name llama.cpp gives it
			T("post_attention_norm.weight", 1, d, 1, 1.0f, 0.05f);
		} else {
			T("ffn_norm.weight", 1, d, 1, 1.0f, 0.05f);
		}
		if (is_gemma(s)) {
			// the blocks' outputs are normed before the residual adds, so resid scales them
			T("post_attention_norm.weight", 1, d, 1, resid, 0.05f * resid);
			T("post_ffw_norm.weight", 1, d, 1, resid, 0.05f * resid);
		}
	ffn:
		if (s->n_expert) {
			// the router a little sharper than the FFN inputs, so a row's experts are distinct
			// gpt-oss: gate and up wide enough that the clamp at 7 bites
			const float gu_scale = is_oai(s) ? 4 * in_scale : in_scale, dn_scale = is_oai(s) ? ff_scale * resid / 8 : ff_scale * resid;
			T("ffn_gate_inp.weight", 2, d, s->n_expert, 0, 2 * in_scale);
			T("ffn_gate_exps.weight", 3, d, s->n_ff, 0, gu_scale);
			ts[n - 1].ne[2] = s->n_expert;
			T("ffn_up_exps.weight", 3, d, s->n_ff, 0, gu_scale);
			ts[n - 1].ne[2] = s->n_expert;
			T("ffn_down_exps.weight", 3, s->n_ff, d, 0, dn_scale);
			ts[n - 1].ne[2] = s->n_expert;
			if (is_oai(s)) {
				T("ffn_gate_inp.bias", 1, s->n_expert, 1, 0, 0.5f);
				T("ffn_gate_exps.bias", 2, s->n_ff, s->n_expert, 0, 0.5f);
				T("ffn_up_exps.bias", 2, s->n_ff, s->n_expert, 0, 0.5f);
				T("ffn_down_exps.bias", 2, d, s->n_expert, 0, 0.1f * resid);
			}
			if (s->n_ff_shexp) {
				const float sh_scale = 1.0f / sqrtf((float)s->n_ff_shexp);
				T("ffn_gate_inp_shexp.weight", 2, d, 1, 0, in_scale);
				T("ffn_gate_shexp.weight", 2, d, s->n_ff_shexp, 0, in_scale);
				T("ffn_up_shexp.weight", 2, d, s->n_ff_shexp, 0, in_scale);
				T("ffn_down_shexp.weight", 2, s->n_ff_shexp, d, 0, sh_scale * resid);
			}
		} else if (is_phi3(s)) {
			// the gate's rows, then the up's, in one matrix
			T("ffn_up.weight", 2, d, 2 * s->n_ff, 0, in_scale);
			T("ffn_down.weight", 2, s->n_ff, d, 0, ff_scale * resid);
		} else {
			T("ffn_gate.weight", 2, d, s->n_ff, 0, in_scale);
			T("ffn_up.weight", 2, d, s->n_ff, 0, in_scale);
			T("ffn_down.weight", 2, s->n_ff, d, 0, ff_scale * resid);
		}
		if (l >= s->n_layer) {
			// the MTP layer's input: the normed embedding and hidden state side by side, into n_embd
			T("nextn.eh_proj.weight", 2, 2 * d, d, 0, 1.0f / sqrtf(2.0f * (float)d));
			T("nextn.enorm.weight", 1, d, 1, 1.0f, 0.05f);
			T("nextn.hnorm.weight", 1, d, 1, 1.0f, 0.05f);
			T("nextn.shared_head_norm.weight", 1, d, 1, 1.0f, 0.05f);
		}
#undef T
	}
	add_t(ts, &n, "output_norm.weight", 1, d, 1, FILL_NOISE, 1.0f, 0.05f);
	if (!s->tied) add_t(ts, &n, "output.weight", 2, d, n_vocab, FILL_NOISE, 0, out_scale);
	*out = ts;
	return n;
}

// BERT's tensors under llama.cpp's names: embeddings (token, position, two types) and their
// LayerNorm, post-LayerNorm blocks with biases everywhere, the classifier's dense layer and its
// one-row output, scaled so scores spread around 0.
static int build_bert_list(const gen_shape *s, int64_t n_vocab, gen_tensor **out) {
	int n = 0;
	gen_tensor *ts = calloc((size_t)(16 + 16 * s->n_layer), sizeof *ts);
	if (!ts) return -1;
	const int64_t d = s->n_embd, f = s->n_ff;
	const float in_scale = 1.0f / sqrtf((float)d), ff_scale = 1.0f / sqrtf((float)f);
	add_t(ts, &n, "token_embd.weight", 2, d, n_vocab, FILL_NOISE, 0, 1.0f);
	add_t(ts, &n, "position_embd.weight", 2, d, s->n_ctx, FILL_NOISE, 0, 0.5f);
	add_t(ts, &n, "token_types.weight", 2, d, s->xlmr ? 1 : 2, FILL_NOISE, 0, 0.5f);
	add_t(ts, &n, "token_embd_norm.weight", 1, d, 1, FILL_NOISE, 1.0f, 0.05f);
	add_t(ts, &n, "token_embd_norm.bias", 1, d, 1, FILL_NOISE, 0, 0.05f);
	// each layer's tensors: name, inputs (0: a vector), outputs, mean, scale
	const struct {
		const char *name;
		int64_t k, rows;
		float mean, scale;
	} per[] = {
		{"attn_q.weight", d, d, 0, in_scale},  {"attn_q.bias", 0, d, 0, 0.1f},         {"attn_k.weight", d, d, 0, in_scale},
		{"attn_k.bias", 0, d, 0, 0.1f},        {"attn_v.weight", d, d, 0, in_scale},   {"attn_v.bias", 0, d, 0, 0.1f},
		{"attn_output.weight", d, d, 0, in_scale}, {"attn_output.bias", 0, d, 0, 0.1f},
		{"attn_output_norm.weight", 0, d, 1.0f, 0.05f}, {"attn_output_norm.bias", 0, d, 0, 0.05f},
		{"ffn_up.weight", d, f, 0, in_scale},  {"ffn_up.bias", 0, f, 0, 0.1f},         {"ffn_down.weight", f, d, 0, ff_scale},
		{"ffn_down.bias", 0, d, 0, 0.1f},      {"layer_output_norm.weight", 0, d, 1.0f, 0.05f},
		{"layer_output_norm.bias", 0, d, 0, 0.05f},
	};
	for (int64_t l = 0; l < s->n_layer; l++)
		for (size_t i = 0; i < sizeof per / sizeof per[0]; i++) {
			char nm[64];
			snprintf(nm, sizeof nm, "blk.%lld.%s", (long long)l, per[i].name);
			if (per[i].k) add_t(ts, &n, nm, 2, per[i].k, per[i].rows, FILL_NOISE, per[i].mean, per[i].scale);
			else add_t(ts, &n, nm, 1, per[i].rows, 1, FILL_NOISE, per[i].mean, per[i].scale);
		}
	add_t(ts, &n, "cls.weight", 2, d, d, FILL_NOISE, 0, in_scale);
	add_t(ts, &n, "cls.bias", 1, d, 1, FILL_NOISE, 0, 0.1f);
	add_t(ts, &n, "cls.output.weight", 2, d, 1, FILL_NOISE, 0, 3.0f * in_scale);
	add_t(ts, &n, "cls.output.bias", 1, 1, 1, FILL_NOISE, 0, 0.1f);
	*out = ts;
	return n;
}

// The generated encoders' words ("##": a continuation, as BERT's vocabularies mark one).
static const char *const bert_words[] = {
	"the", "a", "an", "is", "are", "was", "of", "and", "to", "in", "on", "at", "it", "for", "with", "that", "this", "be",
	"by", "not", "or", "as", "what", "which", "who", "how", "why", "when", "where", "cat", "dog", "bird", "fish", "animal",
	"kitten", "say", "meow", "bark", "sky", "blue", "clear", "day", "mail", "man", "small", "loud", "document", "query",
	"search", "web", "answer", "passage", "relevant", "text", "red", "green", "sun", "moon", "water", "tree", "house", "car",
	"run", "jump", "eat", "sleep", "play", "good", "bad", "big", "little", "new", "old", "one", "two", "three", "cafe",
	"paris", "france", "capital", "city", "un", "river", "stone", "light", "market", "song", "##s", "##es", "##ed", "##ing", "##er", "##est", "##ly", "##ness",
	"##able", "##ful", "##y", "##ion", "##al",
};

// A small vocabulary as llama.cpp's converter writes BERT's (xlmr false: WordPiece, [PAD] [UNK]
// [CLS] [SEP] [MASK], then each word's first pieces with a leading U+2581 and continuations bare)
// or XLM-RoBERTa's (Unigram, "t5": <s> <pad> </s> <unk>, then pieces scored so that longer
// ones win, spaces merged).
static int bert_vocab(gguf_writer *w, bool xlmr, int64_t *n_vocab) {
	enum { MAX = 512 };
	char *toks[MAX];
	int32_t types[MAX];
	float scores[MAX];
	int n = 0, rc = 0;
	static const char *const bert_specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
	static const char *const xlmr_specials[] = {"<s>", "<pad>", "</s>", "<unk>"};
	const char *const *specials = xlmr ? xlmr_specials : bert_specials;
	const int n_specials = xlmr ? 4 : 5, unk = xlmr ? 3 : 1;
	char buf[64];
	for (int i = 0; i < n_specials; i++) scores[n] = 0, toks[n] = strdup(specials[i]), types[n++] = i == unk ? 2 : 3;
	// every printable ASCII character as a word and (letters, digits) as a continuation
	for (int c = 33; c < 127; c++) {
		snprintf(buf, sizeof buf, "\xE2\x96\x81%c", c);
		scores[n] = -8.0f, toks[n] = strdup(buf), types[n++] = 1;
		if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (xlmr && c >= 'A' && c <= 'Z'))
			snprintf(buf, sizeof buf, "%c", c), scores[n] = -9.0f, toks[n] = strdup(buf), types[n++] = 1;
	}
	for (size_t i = 0; i < sizeof bert_words / sizeof bert_words[0]; i++) {
		const char *wd = bert_words[i];
		if (!strncmp(wd, "##", 2)) snprintf(buf, sizeof buf, "%s", wd + 2);
		else snprintf(buf, sizeof buf, "\xE2\x96\x81%s", wd);
		bool dup = false;
		for (int k = 0; k < n && !dup; k++) dup = toks[k] && !strcmp(toks[k], buf);
		if (!dup) scores[n] = -(float)(10 - (strlen(buf) < 9 ? strlen(buf) : 9)) / 2, toks[n] = strdup(buf), types[n++] = 1;
	}
	for (int k = 0; k < n; k++)
		if (!toks[k]) rc = LANES_ENOMEM;
	rc = rc ? rc : gguf_writer_set_str(w, "tokenizer.ggml.model", xlmr ? "t5" : "bert");
	rc = rc ? rc : gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, (uint64_t)n);
	rc = rc ? rc : gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, types, (uint64_t)n);
	if (xlmr) {
		rc = rc ? rc : gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_F32, scores, (uint64_t)n);
		rc = rc ? rc : gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", true);
		rc = rc ? rc : gguf_writer_set_bool(w, "tokenizer.ggml.remove_extra_whitespaces", true);
		rc = rc ? rc : gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
		rc = rc ? rc : gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", true);
	}
	const uint32_t ids[][2] = {{0, 1}, {1, 3}, {2, 0}, {3, 2}}; // pad, unk, cls (and bos), sep (and eos): BERT's, XLM-R's
	static const char *const keys[] = {"tokenizer.ggml.padding_token_id", "tokenizer.ggml.unknown_token_id",
					   "tokenizer.ggml.cls_token_id", "tokenizer.ggml.seperator_token_id"};
	for (int k = 0; k < 4; k++) rc = rc ? rc : gguf_writer_set_u32(w, keys[k], ids[k][xlmr]);
	if (xlmr) {
		rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0);
		rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
	} else {
		rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.mask_token_id", 4);
	}
	for (int k = 0; k < n; k++) free(toks[k]);
	*n_vocab = n;
	return rc;
}

// ---- metadata --------------------------------------------------------------------------
static int copy_vocab(gguf_writer *w, const gguf *v, int64_t *n_vocab) {
	const gguf_value *toks = gguf_get_arr(v, "tokenizer.ggml.tokens");
	if (!toks || toks->arr.type != GGUF_STRING || toks->arr.n == 0) return LANES_ENOTFOUND;
	*n_vocab = (int64_t)toks->arr.n;
	for (int64_t i = 0; i < gguf_n_kv(v); i++) {
		const gguf_kv *kv = gguf_kv_at(v, i);
		if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10)) continue;
		char *key = gguf_str_dup(kv->key);
		if (!key) return LANES_ENOMEM;
		int rc = gguf_writer_set(w, key, &kv->val);
		free(key);
		if (rc) return rc;
	}
	return 0;
}

static int write_meta(gguf_writer *w, const gen_shape *s, const ftype_info *ft, int64_t n_vocab) {
	char k[128], name[96];
	const char *a = s->arch;
	snprintf(name, sizeof name, "lanes-gen %s %s", s->name, ft->name);
	int rc = 0;
#define KEY(suffix) (snprintf(k, sizeof k, "%s." suffix, a), k)
	rc = rc ? rc : gguf_writer_set_str(w, "general.architecture", a);
	rc = rc ? rc : gguf_writer_set_str(w, "general.name", name);
	rc = rc ? rc : gguf_writer_set_u32(w, "general.alignment", 32);
	rc = rc ? rc : gguf_writer_set_u32(w, "general.quantization_version", 2);
	rc = rc ? rc : gguf_writer_set_u32(w, "general.file_type", ft->id);
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)n_vocab);
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)s->n_ctx);
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)s->n_embd);
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)(s->n_layer + s->n_nextn));
	if (s->n_nextn) rc = rc ? rc : gguf_writer_set_u32(w, KEY("nextn_predict_layers"), (uint32_t)s->n_nextn);
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)s->n_ff);
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)s->n_head);
	if (is_bert(s)) {
		rc = rc ? rc : gguf_writer_set_f32(w, KEY("attention.layer_norm_epsilon"), s->rms_eps);
		rc = rc ? rc : gguf_writer_set_bool(w, KEY("attention.causal"), false);
		rc = rc ? rc : gguf_writer_set_u32(w, KEY("pooling_type"), s->pooling);
		return rc;
	}
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->n_head_kv);
	rc = rc ? rc : gguf_writer_set_f32(w, KEY("rope.freq_base"), s->rope_base);
	rc = rc ? rc : gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), s->rms_eps);
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)n_rot(s));
	if (s->head_dim) {
		rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)s->head_dim);
		rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)s->head_dim);
	}
	if (s->rope_yarn > 0) {
		rc = rc ? rc : gguf_writer_set_str(w, KEY("rope.scaling.type"), "yarn");
		rc = rc ? rc : gguf_writer_set_f32(w, KEY("rope.scaling.factor"), s->rope_yarn);
		rc = rc ? rc : gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)(s->n_ctx / s->rope_yarn));
	}
	if (s->rope_linear > 0) {
		rc = rc ? rc : gguf_writer_set_str(w, KEY("rope.scaling.type"), "linear");
		rc = rc ? rc : gguf_writer_set_f32(w, KEY("rope.scaling.factor"), s->rope_linear);
	}
	if (is_gemma(s) || is_phi3(s) || is_oai(s))
		rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)s->n_swa);
	if (s->n_ctx_orig) {
		// as the converter writes LongRoPE's: sqrt(1 + ln(s) / ln(original)), s the context's growth
		const double g = (double)s->n_ctx / (double)s->n_ctx_orig;
		rc = rc ? rc : gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)s->n_ctx_orig);
		rc = rc ? rc : gguf_writer_set_f32(w, KEY("rope.scaling.attn_factor"), (float)sqrt(1.0 + log(g) / log((double)s->n_ctx_orig)));
	}
	if (is_gemma2(s)) {
		rc = rc ? rc : gguf_writer_set_f32(w, KEY("attn_logit_softcapping"), s->attn_cap);
		rc = rc ? rc : gguf_writer_set_f32(w, KEY("final_logit_softcapping"), s->final_cap);
	}
	if (s->n_expert) {
		rc = rc ? rc : gguf_writer_set_u32(w, KEY("expert_count"), (uint32_t)s->n_expert);
		rc = rc ? rc : gguf_writer_set_u32(w, KEY("expert_used_count"), (uint32_t)s->n_expert_used);
		rc = rc ? rc : gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)s->n_ff);
	}
	if (s->n_ff_shexp) rc = rc ? rc : gguf_writer_set_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)s->n_ff_shexp);
	if (s->pooling) rc = rc ? rc : gguf_writer_set_u32(w, KEY("pooling_type"), s->pooling);
	if (s->full_attn) {
		rc = rc ? rc : gguf_writer_set_u32(w, KEY("full_attention_interval"), (uint32_t)s->full_attn);
		rc = rc ? rc : gguf_writer_set_u32(w, KEY("ssm.conv_kernel"), (uint32_t)s->ssm_conv);
		rc = rc ? rc : gguf_writer_set_u32(w, KEY("ssm.state_size"), (uint32_t)s->ssm_dk);
		rc = rc ? rc : gguf_writer_set_u32(w, KEY("ssm.group_count"), (uint32_t)s->ssm_k_heads);
		rc = rc ? rc : gguf_writer_set_u32(w, KEY("ssm.time_step_rank"), (uint32_t)s->ssm_v_heads);
		rc = rc ? rc : gguf_writer_set_u32(w, KEY("ssm.inner_size"), (uint32_t)(s->ssm_v_heads * s->ssm_dv));
	}
#undef KEY
	return rc;
}

// ---- a random LoRA adapter ----------------------------------------------------------------
// The weights an adapter may target, as llama.cpp names them.
static bool lora_target(const gguf *g, const gguf_tensor *t) {
	static const char *const kinds[] = {"attn_q",   "attn_k",    "attn_v", "attn_output", "ffn_gate", "ffn_up",
					    "ffn_down", "ssm_in",    "ssm_ba", "ssm_out",     "attn_qkv", "attn_gate"};
	if (t->n_dims != 2) return false;
	if (!strcmp(t->name, "output.weight")) return true;
	int l, used = 0;
	if (sscanf(t->name, "blk.%d.%n", &l, &used) != 1 || !used) return false;
	char gate[64], ba[64];
	snprintf(gate, sizeof gate, "blk.%d.ffn_gate.weight", l);
	snprintf(ba, sizeof ba, "blk.%d.ssm_ba.weight", l);
	// an ffn_up without its ffn_gate holds both (phi3's fused gate-up), which lanes does not adapt
	if (!strcmp(t->name + used, "ffn_up.weight") && !gguf_find_tensor(g, gate)) return false;
	// attn_qkv and attn_gate are a recurrent layer's; elsewhere (phi3) a fused matrix lanes does not adapt
	if ((!strcmp(t->name + used, "attn_qkv.weight") || !strcmp(t->name + used, "attn_gate.weight")) && !gguf_find_tensor(g, ba))
		return false;
	for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
		const size_t n = strlen(kinds[k]);
		if (!strncmp(t->name + used, kinds[k], n) && !strcmp(t->name + used + n, ".weight")) return true;
	}
	return false;
}

// Fills n values of the tensor called name with noise of std scale (0: zeros) and converts them.
static int lora_fill(base_pool *pool, const char *name, uint64_t seed, float scale, uint32_t type, int64_t rows,
		     int64_t cols, float *f, void *q) {
	uint64_t key = base_hash64(name, strlen(name), seed);
	fill_job j = {.dst = f, .i0 = 0, .n = rows * cols, .key = key, .mean = 0, .scale = scale};
	if (scale != 0) base_pool_run(pool, fill_slice, &j);
	else memset(f, 0, (size_t)(rows * cols) * sizeof *f);
	return tensor_quantize_rows(type, f, q, rows, cols, pool);
}

// `lanes gen --lora RANK -m BASE -o OUT.gguf`: every attention, dense FFN and recurrent-layer matrix of BASE
// (and output.weight when it has one) gets A (std 1/sqrt(n_in)) and B (std 0.2/sqrt(r), or 0),
// alpha = r: a term about a fifth of the base matmul's size.
static int gen_lora(const cli_settings *set) {
	if (!set->model) return cli_usage_error(set, "--lora RANK needs -m BASE");
	const int64_t r = set->lora_rank, threads = set->threads > 0 ? set->threads : base_cpu_count();
	const int ti = gguf_ttype_by_name(set->type);
	if (ti != GGUF_T_F32 && ti != GGUF_T_F16 && ti != GGUF_T_BF16 && ti != GGUF_T_Q8_0) {
		cli_err("an adapter's --type is F32, F16, BF16 or Q8_0, not '%s'", set->type);
		return 2;
	}
	const uint32_t type = (uint32_t)ti;
	if (type == GGUF_T_Q8_0 && r % 32) {
		cli_err("Q8_0 rows hold blocks of 32: --lora %lld is not a multiple of 32", (long long)r);
		return 2;
	}
	char err[512] = "";
	int rc = 0, nt = 0;
	gguf *g = NULL;
	gguf_writer *w = NULL;
	base_pool *pool = NULL;
	float *f = NULL;
	void *q = NULL;
	gguf_str arch;
	if ((rc = gguf_open(&g, set->model, err, sizeof err))) goto done;
	if (gguf_get_str(g, "general.architecture", &arch)) {
		rc = LANES_EFORMAT;
		snprintf(err, sizeof err, "%s: no general.architecture", set->model);
		goto done;
	}
	char arch_s[64], name[160];
	snprintf(arch_s, sizeof arch_s, "%.*s", (int)(arch.len < 63 ? arch.len : 63), arch.ptr);
	snprintf(name, sizeof name, "lanes-gen lora r%lld %s", (long long)r, set->lora_zero_b ? "zero-B" : "random");
	if (!(w = gguf_writer_new()) || (rc = base_pool_new(&pool, (int)threads)) ||
	    (rc = gguf_writer_set_str(w, "general.architecture", arch_s)) || (rc = gguf_writer_set_str(w, "general.type", "adapter")) ||
	    (rc = gguf_writer_set_str(w, "general.name", name)) || (rc = gguf_writer_set_str(w, "adapter.type", "lora")) ||
	    (rc = gguf_writer_set_f32(w, "adapter.lora.alpha", (float)r))) {
		rc = rc ? rc : LANES_ENOMEM;
		snprintf(err, sizeof err, "%s", base_strerror(rc));
		goto done;
	}
	uint64_t total = 0;
	for (int64_t i = 0; i < gguf_n_tensors(g) && !rc; i++) {
		const gguf_tensor *t = gguf_tensor_at(g, i);
		if (!lora_target(g, t)) continue;
		const int64_t n_in = t->ne[0], n_out = t->ne[1];
		if (r > n_in) {
			rc = LANES_EINVAL;
			snprintf(err, sizeof err, "%s: rank %lld is larger than its %lld inputs", t->name, (long long)r, (long long)n_in);
			goto done;
		}
		const int64_t most = (n_in > n_out ? n_in : n_out) * r;
		float *nf = realloc(f, (size_t)most * sizeof *f);
		void *nq = nf ? realloc(q, (size_t)most * sizeof *f) : NULL;
		if (nf) f = nf;
		if (nq) q = nq;
		if (!nf || !nq) {
			rc = LANES_ENOMEM;
			snprintf(err, sizeof err, "out of memory");
			goto done;
		}
		char nm[2][160];
		snprintf(nm[0], sizeof nm[0], "%s.lora_a", t->name);
		snprintf(nm[1], sizeof nm[1], "%s.lora_b", t->name);
		const int64_t ne_a[2] = {n_in, r}, ne_b[2] = {r, n_out};
		const float sa = 1.0f / sqrtf((float)n_in), sb = set->lora_zero_b ? 0.0f : 0.2f / sqrtf((float)r);
		for (int h = 0; h < 2 && !rc; h++) {
			const int64_t *ne = h ? ne_b : ne_a;
			const uint64_t nb = (uint64_t)ne[1] * tensor_row_bytes(type, ne[0]);
			rc = lora_fill(pool, nm[h], (uint64_t)set->seed, h ? sb : sa, type, ne[1], ne[0], f, q);
			if (!rc) rc = gguf_writer_add_tensor(w, nm[h], type, 2, ne, q, nb);
			if (rc) snprintf(err, sizeof err, "%s: %s", nm[h], base_strerror(rc));
			total += nb;
		}
		nt++;
	}
	if (rc) goto done;
	if (!nt) {
		rc = LANES_EINVAL;
		snprintf(err, sizeof err, "%s: no attention or FFN matrix to adapt", set->model);
		goto done;
	}
	if ((rc = gguf_writer_write(w, set->output, err, sizeof err))) goto done;
	printf("%s: LoRA rank %lld for %s (%s), %d targets, %s, %.2f MiB\n", set->output, (long long)r, set->model, arch_s, nt,
	       tensor_traits_of(type)->name, total / 1048576.0);
done:
	if (rc) cli_err("%s", err);
	free(f);
	free(q);
	base_pool_free(pool);
	gguf_writer_free(w);
	gguf_free(g);
	return rc ? 1 : 0;
}

int cmd_gen(const cli_settings *set) {
	if (set->lora_rank) return gen_lora(set);
	if (set->lora_zero_b) return cli_usage_error(set, "--lora-zero-b goes with --lora RANK");
	if (!set->shape) return cli_usage_error(set, "give --shape NAME and --vocab VOCAB.gguf (or --lora RANK -m BASE)");
	if (set->model) return cli_usage_error(set, "-m BASE goes with --lora RANK");
	const char *shape_name = set->shape, *type_name = set->type, *vocab_path = set->vocab, *out_path = set->output;
	const int64_t seed = set->seed, threads = set->threads > 0 ? set->threads : base_cpu_count();
	const gen_shape *s = NULL;
	char names[512] = "";
	for (size_t i = 0, k = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
		if (!strcmp(shapes[i].name, shape_name)) s = &shapes[i];
		k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", i ? ", " : "", shapes[i].name);
	}
	if (!s) {
		cli_err("unknown shape '%s' (one of: %s)", shape_name, names);
		return 2;
	}
	if (!vocab_path != is_bert(s))
		return cli_usage_error(set, is_bert(s) ? "a bert shape writes its own WordPiece vocabulary: leave out --vocab"
						       : "give --shape NAME and --vocab VOCAB.gguf (or --lora RANK -m BASE)");
	const ftype_info *ft = ftype_by_name(type_name);
	if (!ft) {
		cli_err("unknown type '%s' (one of: %s)", type_name, ftype_names());
		return 2;
	}

	char err[512] = "";
	int rc = 0;
	gguf *v = NULL;
	gguf_writer *w = NULL;
	base_pool *pool = NULL;
	gen_tensor *ts = NULL;
	float *f = NULL;
	void *q = NULL;
	int64_t n_vocab = 0;
	if (vocab_path && (rc = gguf_open(&v, vocab_path, err, sizeof err))) goto done;
	if (!(w = gguf_writer_new()) || (rc = base_pool_new(&pool, (int)threads))) {
		rc = rc ? rc : LANES_ENOMEM;
		snprintf(err, sizeof err, "%s", base_strerror(rc));
		goto done;
	}
	if ((rc = v ? copy_vocab(w, v, &n_vocab) : bert_vocab(w, s->xlmr, &n_vocab)) == 0) rc = write_meta(w, s, ft, n_vocab);
	if (rc) {
		snprintf(err, sizeof err, "%s: %s", rc == LANES_ENOTFOUND ? vocab_path : "metadata",
			 rc == LANES_ENOTFOUND ? "no tokenizer.ggml.tokens array" : base_strerror(rc));
		goto done;
	}
	int nt = is_bert(s) ? build_bert_list(s, n_vocab, &ts) : build_list(s, n_vocab, &ts);
	if (nt < 0) {
		rc = LANES_ENOMEM;
		snprintf(err, sizeof err, "out of memory");
		goto done;
	}
	gen_end end = {.id = -1, .dim = s->n_embd - 1, .logit = (float)set->end_logit};
	if (set->end_logit > 0) {
		// the chat turn's end where the vocabulary has one (<|im_end|>, <|eot_id|>), else its eos
		end.id = v ? end_token(v) : -1;
		if (s->tied || s->n_expert || is_gemma(s) || is_phi3(s) || end.id < 0 || end.id >= n_vocab) {
			rc = LANES_EINVAL;
			snprintf(err, sizeof err, "--end-logit: %s", end.id < 0 || end.id >= n_vocab ? "the vocabulary names no end token"
								    : "only for untied llama-family shapes without experts");
			goto done;
		}
	}
	ftype_model m = {.ft = ft, .llama_arch = !strcmp(s->arch, "llama"), .n_layer = s->n_layer + s->n_nextn,
			 .n_head = s->n_head, .n_head_kv = s->n_head_kv, .n_expert = s->n_expert, .n_attn_v = s->n_layer + s->n_nextn,
			 .tied = s->tied};
	// Values are drawn and converted a slab of rows at a time; only the converted tensor
	// is held whole (the writer copies it).
	uint64_t max_bytes = 0, all_bytes = 0;
	int64_t slab = 1 << 20; // elements per slab, at least one row
	for (int i = 0; i < nt; i++) {
		if (ts[i].ne[0] > slab) slab = ts[i].ne[0];
		uint32_t type = ftype_pick(&m, ts[i].name, ts[i].n_dims, ts[i].ne, GGUF_T_F32, NULL, 0);
		uint64_t b = (uint64_t)(ts[i].ne[1] * ts[i].ne[2]) * tensor_row_bytes(type, ts[i].ne[0]);
		if (b > max_bytes) max_bytes = b;
		all_bytes += b;
	}
	f = malloc((size_t)slab * 4);
	q = malloc(max_bytes);
	if (!f || !q) {
		rc = LANES_ENOMEM;
		snprintf(err, sizeof err, "out of memory for a tensor of %llu bytes", (unsigned long long)max_bytes);
		goto done;
	}
	uint64_t total = 0, t0 = base_now_us();
	cli_progress bar;
	cli_progress_start(&bar, "gen", true, true);
	for (int i = 0; i < nt && !rc; i++) {
		const gen_tensor *t = &ts[i];
		char note[256];
		uint32_t type = ftype_pick(&m, t->name, t->n_dims, t->ne, GGUF_T_F32, note, sizeof note);
		if (note[0]) {
			cli_progress_clear(&bar);
			cli_err("%s", note);
		}
		const int64_t cols = t->ne[0], rows = t->ne[1] * t->ne[2];
		const size_t rb = tensor_row_bytes(type, cols);
		const int64_t slab_rows = slab / cols > 0 ? slab / cols : 1;
		uint64_t key = base_hash64(t->name, strlen(t->name), (uint64_t)seed);
		for (int64_t r0 = 0; r0 < rows && !rc; r0 += slab_rows) {
			const int64_t nr = rows - r0 < slab_rows ? rows - r0 : slab_rows;
			if (t->fill == FILL_ROPE_FREQS) {
				rope_llama3_factors(f, 2 * cols, s->rope_base);
			} else {
				fill_job j = {.dst = f, .i0 = r0 * cols, .n = nr * cols, .key = key,
					      .mean = t->mean, .scale = t->scale};
				base_pool_run(pool, fill_slice, &j);
				end_edit(&end, t->name, f, r0, nr, cols);
			}
			rc = tensor_quantize_rows(type, f, (uint8_t *)q + r0 * rb, nr, cols, pool);
			cli_progress_update(&bar, (int64_t)(total + (uint64_t)(r0 + nr) * rb), (int64_t)all_bytes, t->name);
		}
		uint64_t nb = (uint64_t)rows * rb;
		if (!rc) rc = gguf_writer_add_tensor(w, t->name, type, t->n_dims, t->ne, q, nb);
		if (rc) {
			cli_progress_end(&bar);
			snprintf(err, sizeof err, "%s: %s", t->name, base_strerror(rc));
			goto done;
		}
		total += nb;
	}
	cli_progress_end(&bar);
	if ((rc = gguf_writer_write(w, out_path, err, sizeof err))) goto done;
	printf("%s: %s %s, %d tensors, vocab %lld, %.2f MiB, %.1f s\n", out_path, s->name, ft->name, nt,
	       (long long)n_vocab, total / 1048576.0, (base_now_us() - t0) / 1e6);
done:
	if (rc) cli_err("%s", err);
	free(f);
	free(q);
	free(ts);
	base_pool_free(pool);
	gguf_writer_free(w);
	gguf_free(v);
	return rc ? 1 : 0;
}
