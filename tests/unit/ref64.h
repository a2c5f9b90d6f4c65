// tests: a plain float64 forward pass of the llama family (dense, MoE, shared expert), Gemma 2's and 3's blocks, Phi 3's, gpt-oss's and Qwen3-Next's,
// and of a BERT encoder with its classifier, written
// from a file's weights, dequantized — the oracle the model and expert tests compare against.
#ifndef LANES_REF64_H
#define LANES_REF64_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "model/model.h"

typedef struct {
	const char *arch;           // "llama" rotates pairs (2i, 2i+1); the others NEOX halves
	int E, L, H, HKV, D, V;     // embedding, layers, heads, kv heads, head width, vocabulary
	int F;                      // dense FFN width
	int X, K, FX, FS;           // experts, used per row, expert FFN, shared expert FFN (0: none)
	bool moe_norm, tied;        // renormalize the chosen weights; output is token_embd
	double rope_base, rope_scale; // rope_scale: positions are multiplied by it (1: none)
	double rms_eps;
	double attn_scale;          // scores' scale (0: 1/sqrt(D))
	// Gemma 2 (zeros for the llama family): embeddings times embd_scale (0: 1), RMSNorm of each
	// block's output (post_attention_norm, post_ffw_norm), GELU-tanh gate, soft caps (0: none),
	// a window of swa positions on layers l % swa_pattern < swa_pattern - 1 (every layer when
	// swa_pattern is 0)
	double embd_scale;
	bool post_norms, geglu;
	double attn_softcap, final_softcap;
	int swa, swa_pattern;
	double rope_base_swa, rope_scale_swa; // Gemma 3: the local layers' rope (0: the global one's)
	bool no_qk_norm;            // leave out the file's q/k norms (a check that they matter)
	// Phi 3: dimensions rotated per head (0: D), the tensor of frequency divisors (NULL:
	// rope_freqs.weight), the cos/sin magnitude (0: 1); fused attn_qkv and gate-up ffn_up are
	// split as stored (swap_gate_up: the up half first, a check that the order matters)
	int n_rot;
	const char *rope_factors;
	double rope_mscale;
	bool swap_gate_up;
	// gpt-oss: attention sinks (no_sinks: left out), biased router and experts (no_biases: left
	// out), the experts' clamped SwiGLU (plain_glu: silu(g) u instead), post_attention_norm as
	// the FFN's input norm
	bool oai, no_sinks, no_biases, plain_glu;
	// YaRN (yarn_ext 0: none): the pairs from yarn_lo to yarn_hi ramp from extrapolated (the
	// position's own frequency) to interpolated (times rope_scale), cos and sin times
	// 1 + 0.1 ln(1 / rope_scale); lo and hi where a pair turns beta_fast and beta_slow times over
	// yarn_orig positions
	double yarn_ext, yarn_beta_fast, yarn_beta_slow;
	int yarn_orig;
	// Qwen3-Next (full_attn 0: none): layer l is a Gated DeltaNet layer when (l + 1) % full_attn
	// != 0, else full attention whose attn_q holds each head's query then a sigmoid gate on its
	// output; post_attention_norm is the FFN's input norm. chunk > 0: the delta rule in its
	// chunked form, chunks of that many positions from position 0 (else token by token). The
	// no_* switches leave a part out (a check that it matters).
	int full_attn, ssm_conv, ssm_dk, ssm_hk, ssm_hv, ssm_dv, chunk;
	bool no_attn_gate, no_conv, no_decay, no_out_gate;
} ref64_shape;

// The shape of a loaded model (linear rope scaling at most; the rope factors it chose are read from g).
void ref64_shape_of(const model *m, ref64_shape *s);

// Each MoE layer's choices for each position: ids [L][P][K] (largest first; ties: the lower id),
// their weights w [L][P][K] as the FFN uses them, the best expert left out alt [L][P] (-1: none)
// and margin [L][P]: the router logit of the K-th choice minus alt's (how far the choice is
// from a tie; +inf when every expert is used).
typedef struct {
	int32_t *ids;
	double *w;
	int32_t *alt;
	double *margin;
} ref64_routes;

// Runs ids[0..P) from position 0; logits [P][V] (NULL: skip the output head) and, when rt is not
// NULL, the MoE layers' choices (caller-sized).
void ref64_forward(const gguf *g, const ref64_shape *s, const int32_t *ids, int P, double *logits, ref64_routes *rt);
// The same, and each position's state after the output norm into hidden [P][E] (NULL: none).
void ref64_forward_hidden(const gguf *g, const ref64_shape *s, const int32_t *ids, int P, double *logits, ref64_routes *rt,
			  double *hidden);
// The MTP head (MTP layer 0, block s->L of the file) over P positions from 0: row p reads token
// tok[p] and hidden state hin[p]; logits [P][V] and the states its head read, hout [P][E] (NULL: none).
void ref64_mtp(const gguf *g, const ref64_shape *s, const int32_t *tok, const double *hin, int P, double *logits, double *hout);

// BERT (an encoder) over ids[0..P) as one whole sequence, shape and epsilon read from g: rows
// after the first separator (tokenizer.ggml.seperator_token_id) take token type 1 where the file
// has two types. pooled [E]: the classifier's input at position 0, tanh(cls.weight x0 +
// cls.bias) (x0 itself without cls.weight); *score: cls.output's row on it plus its bias
// (NULL: none). The switches leave a part out (a check that it matters).
typedef struct {
	bool causal;   // each position sees only those before it
	bool no_types; // every row takes token type 0
} ref64_bert_opts;
void ref64_bert(const gguf *g, const int32_t *ids, int P, const ref64_bert_opts *o, double *pooled, double *score);

#endif
