// learn: LoRA training for the llama family — trainable adapters (f32 A and B with their AdamW
// moments), examples (token ids and the tokens whose prediction is learned), and training
// steps cut into priced pieces that a scheduler runs between other work. A step ends in a
// commit, which updates the adapter and makes a new inference adapter (a model_lora version),
// or in nothing: a step never half-commits. The base weights stay frozen and are read as
// stored (rows dequantized on the fly); all training math is f32.
//
// How a server drives it (every call on one thread, the engine's, between rounds):
//   learn_adapter_new / learn_adapter_load      the adapter a grant trains (version 0)
//   learn_adapter_lora                          version 0 as a model_lora, to serve at once
//   learn_job_new(adapter, opts)                one job per adapter being trained
//   learn_job_add(job, example)                 examples queue (learn_example_chat / _text)
//   per round: cost = learn_step_next_cost(job); if it fits what the round has left,
//              learn_step_run(job, pool, budget, &spent)   runs whole pieces within budget
//   when learn_step_state(job) == LEARN_READY:
//              learn_commit(job, &version, &info)  at a round boundary; the new model_lora
//              is the caller's (requests admitted later use it; running ones keep theirs)
//   revoke, expiry, halt: learn_step_abort(job) at a piece boundary: nothing commits
//   save: learn_adapter_save(adapter, path, GGUF_T_F32)
// Nothing here is thread-safe unless it says so: a job, its adapter and its examples belong
// to one thread at a time. The model is only read.
#ifndef LANES_LEARN_H
#define LANES_LEARN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "chat/chat.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

// ---- trainable adapters ------------------------------------------------------------------
typedef struct learn_adapter learn_adapter;

typedef struct {
	int32_t rank;     // r of every pair (a weight with fewer inputs gets its input count)
	float alpha;      // adapter.lora.alpha; 0: alpha = rank, so the term's factor alpha/r is 1
	unsigned targets; // bit k: the weights of enum model_lora_kind k; 0: LEARN_TARGETS_DEFAULT
	uint64_t seed;    // A's random start (uniform in +-1/sqrt(n_in)); B starts at 0
} learn_adapter_opts;

// Attention (q, k, v, output) and dense FFN (gate, up, down) projections: not the output head.
#define LEARN_TARGETS_DEFAULT ((1u << MODEL_LORA_SSM_IN) - 1u)

// A new adapter for m: one pair per targeted weight that m has (an MoE model's FFN and a
// tied output head have none). LANES_EINVAL (bad options, or nothing to target),
// LANES_ENOMEM; a message in err. The adapter must not outlive m.
int learn_adapter_new(learn_adapter **out, const model *m, const learn_adapter_opts *o, char *err, size_t errlen);
// An adapter to go on training from a GGUF LoRA file for m (checked as model_lora_load
// checks it; its matrices dequantized to f32, the AdamW moments zero). Codes as model_lora_load.
int learn_adapter_load(learn_adapter **out, const model *m, const char *path, char *err, size_t errlen);
void learn_adapter_free(learn_adapter *a); // accepts NULL; no job may still use it
// A copy of a's committed weights and version, without the AdamW moments, that no job may
// train: made on a's thread, it may then be saved (learn_adapter_save) or read on any other
// while a trains on. LANES_ENOMEM.
int learn_adapter_copy(learn_adapter **out, const learn_adapter *a, char *err, size_t errlen);

typedef struct {
	int32_t rank;             // the largest r
	float alpha;              // as saved in adapter.lora.alpha
	int32_t n_pairs;          // weights adapted
	int64_t params;           // floats in all A and B
	uint64_t param_bytes;     // A and B in f32
	uint64_t optimizer_bytes; // the AdamW moments (two floats a parameter)
	int64_t version;          // commits so far (0: as made or loaded)
	char targets[128];        // the kinds adapted, "attn_q,attn_k,..."
} learn_adapter_info;
void learn_adapter_info_of(const learn_adapter *a, learn_adapter_info *out);

// One pair's f32 matrices, writable (tests set them) except while a step runs.
typedef struct {
	int32_t layer, kind;  // enum model_lora_kind; layer -1 for the output head
	int32_t r, n_in, n_out;
	float *a;             // [r][n_in]
	float *b;             // [n_out][r]
} learn_pair;
int32_t learn_adapter_n_pairs(const learn_adapter *a);
void learn_adapter_pair(learn_adapter *a, int32_t i, learn_pair *out); // i < learn_adapter_n_pairs

// The adapter's committed weights (a step in progress is not in them, until its commit) as an
// inference adapter (F32 pairs) for model_forward; the caller owns it (model_lora_free).
// LANES_ENOMEM.
int learn_adapter_lora(const learn_adapter *a, model_lora **out, char *err, size_t errlen);
// Writes the adapter's committed weights as llama.cpp's convert_lora_to_gguf.py does
// (general.type adapter, adapter.type lora, adapter.lora.alpha, `<base tensor>.lora_a`
// [n_in, r] and `.lora_b` [r, n_out]) with its matrices in type (GGUF_T_F32, F16, BF16, or
// Q8_0 when every row's length is a multiple of 32) through base_wfile, so path holds the old
// file or the whole new one. LANES_EINVAL, LANES_EIO, LANES_ENOMEM.
int learn_adapter_save(const learn_adapter *a, const char *path, uint32_t type, char *err, size_t errlen);
// The same as name (base_name_ok) in folder dfd, never through a symlink.
int learn_adapter_save_at(const learn_adapter *a, int dfd, const char *name, uint32_t type, char *err, size_t errlen);

// ---- examples ----------------------------------------------------------------------------
// Token ids and, for each, whether it is learned: the loss sums -log p(ids[i] | ids[<i]) over
// the learned tokens i >= 1. Immutable once made; any thread may read it. The functions below
// only read the vocabulary and template, so any thread may make examples (an HTTP thread, say,
// before handing them to the engine's job).
typedef struct learn_example learn_example;

// From ids (n >= 2) and learn (n flags; learn[0] is ignored). LANES_EINVAL when no token is
// learned; LANES_ENOMEM.
int learn_example_ids(learn_example **out, const int32_t *ids, const bool *learn, int64_t n, char *err, size_t errlen);
// A completion: prompt and completion tokenized as one text the way /v1/completions
// tokenizes a prompt (BOS as the vocab says, special tokens parsed), EOS appended when the
// vocab has one; the completion's tokens and the EOS are learned. Where a token spans the
// seam, learning starts at the first token that differs from the prompt's own tokens. With
// max_tokens > 0, text that cannot fit in max_tokens tokens is refused before it is
// tokenized, and one that tokenizes to more is refused too (LANES_EINVAL).
int learn_example_text(learn_example **out, const tok_vocab *v, const char *prompt, const char *completion,
		       int64_t max_tokens, char *err, size_t errlen);
// A conversation: messages (a JSON array of {role, content, ...}) rendered by c as the
// server renders a chat (chat_prompt: its template, tool-call family, bos and eos texts); the
// assistant turns
// are learned, each from its first token to the end of its rendering (end-of-turn marker
// included). With max_tokens > 0 its cost is bounded before the work: more than max_tokens
// messages, or text that cannot fit in max_tokens tokens, is refused before any rendering,
// and a conversation that renders to more than max_tokens tokens, or whose turns would take
// more than LEARN_RENDER_BUDGET bytes of rendering, before its turns are rendered apart
// (LANES_EINVAL, as when the template fails or no assistant turn has a token).
#define LEARN_RENDER_BUDGET ((size_t)32 << 20)
int learn_example_chat(learn_example **out, const chat_tmpl *c, const json_t *messages, int64_t max_tokens, char *err, size_t errlen);
void learn_example_free(learn_example *e); // accepts NULL
int64_t learn_example_tokens(const learn_example *e);
int64_t learn_example_learned(const learn_example *e);
const int32_t *learn_example_ids_of(const learn_example *e); // learn_example_tokens of them
bool learn_example_is_learned(const learn_example *e, int64_t i);

// ---- training jobs: steps in priced pieces -----------------------------------------------
typedef struct {
	float lr;           // AdamW learning rate
	float beta1, beta2; // moment decays
	float eps;
	float weight_decay; // decoupled: each step multiplies the weights by 1 - lr * weight_decay
	float clip;         // the gradient's global L2 norm is scaled down to at most this (0: off)
	int32_t batch;      // examples per step (fewer when fewer are queued)
	int32_t piece;      // tokens per piece: the grain a scheduler cuts a step into
	int64_t max_tokens; // the longest example learn_job_add accepts
} learn_opts;
// lr 1e-3, betas 0.9 / 0.999, eps 1e-8, weight decay 0.01, clip 1, batch 4, piece 64,
// max_tokens 4096.
void learn_opts_default(learn_opts *o);

typedef struct learn_job learn_job;

// A job trains a (one job per adapter at a time). LANES_EINVAL for options out of range,
// LANES_EBUSY when another job holds a, LANES_ENOMEM. The gradient buffer (one float a
// parameter) is allocated here.
int learn_job_new(learn_job **out, learn_adapter *a, const learn_opts *o, char *err, size_t errlen);
void learn_job_free(learn_job *j); // accepts NULL; drops a step in progress (nothing commits)
// Queues a copy of e for a coming step (first in, first out). LANES_EINVAL when a token is
// outside the model's vocabulary or e is longer than max_tokens; LANES_ENOMEM.
int learn_job_add(learn_job *j, const learn_example *e, char *err, size_t errlen);
int64_t learn_job_queued(const learn_job *j); // examples waiting for a step
// Bytes the job holds now: gradients, queued examples, and the activations of the largest
// step so far (kept for the next step).
uint64_t learn_job_bytes(const learn_job *j);

enum learn_state {
	LEARN_IDLE,    // no step: the next learn_step_run starts one from the queue
	LEARN_RUNNING, // a step has pieces left
	LEARN_READY,   // a step's gradient is whole: learn_commit applies it
};
enum learn_state learn_step_state(const learn_job *j);

// The price of the next piece, in prompt-token equivalents (what a forward pass over that
// many tokens at position 0 costs: the multiply-adds of the piece over those of one token
// through the whole model); 0 when nothing is left to run (ready, or idle with an empty queue).
// Pieces are a layer's forward over `piece` tokens, the output head and loss over a piece's
// learned tokens, and a layer's backward (its forward recomputed) over `piece` tokens; a
// piece's price counts its attention context.
double learn_step_next_cost(const learn_job *j);
// Runs pieces in order while the next one's price fits in what is left of budget (none when
// the first does not fit; budget INFINITY: to the end of the step), starting a step from the
// queue when idle (allocating its activations: on LANES_ENOMEM the queue and state are as they
// were). *spent (may be NULL) gets the prices of the pieces run. A step's result is the same
// bits however it is cut into calls and whatever the pool's thread count; its loss is the same
// bits for any piece size too (the gradient's sums over tokens group by piece). pool may be NULL.
int learn_step_run(learn_job *j, base_pool *pool, double budget, double *spent, char *err, size_t errlen);
// Drops the step in progress (its examples with it) at a piece boundary; the adapter and
// its version are untouched. No-op when idle.
void learn_step_abort(learn_job *j);

typedef struct {
	int64_t step;      // steps committed by this job, this one included
	int32_t examples;  // in the step
	int64_t tokens;    // tokens run through the model
	int64_t learned;   // tokens the loss is over
	double loss;       // mean -log p over the learned tokens, before the update
	double grad_norm;  // the gradient's global L2 norm, before clipping
	int64_t version;   // the adapter's version after the commit
} learn_step_info;
// The step in progress or ready (loss and grad_norm final once ready). LANES_ENOTFOUND when idle.
int learn_step_info_of(const learn_job *j, learn_step_info *out);
// The gradient of the ready step's mean loss for pair i (the adapter's order): ga [r][n_in],
// gb [n_out][r], valid until the next call on j. LANES_EBUSY unless ready.
int learn_step_grad(const learn_job *j, int32_t i, const float **ga, const float **gb);
// Applies a ready step: clips the gradient, one AdamW update, the version advances, and when
// version is not NULL a new inference adapter of the updated weights goes there (the
// caller's). All or nothing: LANES_EBUSY unless ready, LANES_ENOMEM when the new version
// cannot be allocated — then the weights, moments and version are as they were and the step
// stays ready (commit again, or abort).
int learn_commit(learn_job *j, model_lora **version, learn_step_info *info, char *err, size_t errlen);

// ---- evaluation through the inference path ---------------------------------------------
// Sums -log p of every learned token of the n examples through model_forward (f16s KV cache,
// lora NULL: the base model): *nll and *count (learned tokens). pool may be NULL. Thread-safe
// on a model_lora nobody writes.
int learn_eval(const model *m, const model_lora *lora, base_pool *pool, const learn_example *const *ex, int64_t n,
	       double *nll, int64_t *count, char *err, size_t errlen);

// For tests: the after-th allocation learn makes from now on fails as if memory ran out
// (0: the next one; negative: none). Process-wide.
void learn_test_fail_alloc(int64_t after);

// ---- MTP heads (mtp.c) ---------------------------------------------------------------------
// A model's multi-token-prediction head trained with the trunk frozen, by self-distillation:
// head row p reads the trunk's state at p (after its output norm) and the token at p + 1, and
// learns the trunk's greedy choice after p + 1 — what the model will say, so what a draft of
// it is accepted for. Every head weight trains in f32 (eh_proj, enorm, hnorm, the block's
// norms and matrices, shared_head_norm); biases and per-head q/k norms stay as they start; the
// embedding and output head are the model's, read as stored.
typedef struct learn_mtp learn_mtp;
// From the model's own first MTP layer when it has one, else a new head: its block the trunk's
// last layer, eh_proj adding the two normed halves, its norm the output norm. llama, qwen2 and
// qwen3 with dense layers (else LANES_EUNSUPPORTED); LANES_ENOMEM. It must not outlive m.
int learn_mtp_new(learn_mtp **out, const model *m, char *err, size_t errlen);
void learn_mtp_free(learn_mtp *h); // accepts NULL
int64_t learn_mtp_params(const learn_mtp *h); // floats trained
// The head's parameters, flat (learn_mtp_params of them), writable between steps; and the
// gradient of the last step's mean loss before clipping, in the same order.
float *learn_mtp_weights(learn_mtp *h);
const float *learn_mtp_grad(const learn_mtp *h);
// Tensor i of the flat parameters (i < LEARN_MTP_TENSORS): its name in the head's file after
// "blk.N.", its first parameter and its count.
#define LEARN_MTP_TENSORS 13
const char *learn_mtp_tensor(const learn_mtp *h, int i, int64_t *off, int64_t *n);

// A training sequence: tokens, and the trunk's state and greedy choice at each.
typedef struct learn_mtp_seq learn_mtp_seq;
// count sequences: prompt i (n_prompts[i] >= 1 tokens) and the model's continuation of gen
// tokens (greedy, or drawn at temp > 0 from seed and i; the head learns the greedy choice at
// every position either way), cut to max_tokens (3 at least), run through m several at once
// (no adapters, an f16 KV cache) into out[i]. LANES_EINVAL, LANES_ENOMEM, or the forward's
// codes, with nothing left in out.
int learn_mtp_seqs_new(learn_mtp_seq **out, const model *m, base_pool *pool, const int32_t *const *prompts, const int64_t *n_prompts,
		       int64_t count, int64_t gen, int64_t max_tokens, float temp, uint64_t seed, char *err, size_t errlen);
// With gen > 0 the prompts are windows of an example's text, one every LEARN_MTP_STRIDE
// tokens: its first token (the BOS), then up to LEARN_MTP_WINDOW tokens before the cut.
#define LEARN_MTP_STRIDE 16
#define LEARN_MTP_WINDOW 16
// The sequences of n examples: each example's own tokens (gen 0: the head learns the model's
// choices along the text), or its windows continued by gen tokens of the model's (varied
// starts teach the head more of the model than one continuation would), as
// learn_mtp_seqs_new makes them. *out (an array of *count, the caller's to free with
// learn_mtp_seq_free each) on success; codes as learn_mtp_seqs_new.
int learn_mtp_seqs_of(learn_mtp_seq ***out, int64_t *count, const model *m, base_pool *pool, const learn_example *const *ex, int64_t n,
		      int64_t gen, int64_t max_tokens, float temp, uint64_t seed, char *err, size_t errlen);
void learn_mtp_seq_free(learn_mtp_seq *s); // accepts NULL
int64_t learn_mtp_seq_tokens(const learn_mtp_seq *s);
// One AdamW step (o: lr, betas, eps, weight_decay on the matrices, clip) on the head's loss
// over the n sequences: the mean over first drafts (row p reads the trunk's state at p and the
// token at p + 1) plus the mean over second drafts chained as the served head chains them (row
// p reads the first's state at p and the token at p + 2, at position p + 1, attending over the
// first drafts' rows up to p and itself). info: step, examples, tokens, learned (first-draft
// rows), loss and grad_norm before the update. The same bits for any pool's thread count.
// LANES_EINVAL (no sequence of 3 tokens), LANES_ENOMEM.
int learn_mtp_step(learn_mtp *h, base_pool *pool, const learn_mtp_seq *const *seqs, int32_t n, const learn_opts *o,
		   learn_step_info *info, char *err, size_t errlen);
// The share of head rows whose argmax is the trunk's choice — accept[0] for first drafts (the
// trunk's state given), accept[1] for the second, chained on the first's state — and the
// loss a step lowers (the two sets' mean losses added), by the training pass in f32.
// LANES_ENOMEM.
int learn_mtp_eval(learn_mtp *h, base_pool *pool, const learn_mtp_seq *const *seqs, int32_t n, double accept[2], double *loss,
		   char *err, size_t errlen);
// Writes the head as a GGUF of general.type "mtp": general.architecture, <arch>.block_count
// (the trunk's layers and the head's), <arch>.nextn_predict_layers 1, <arch>.embedding_length,
// and the tensors of layer n_layers in the standard names (blk.N.attn_q.weight ...,
// blk.N.nextn.eh_proj.weight, nextn.enorm, nextn.hnorm, nextn.shared_head_norm), in f32,
// whole or not at all (base_wfile). model_load_head loads it beside its model.
int learn_mtp_save(const learn_mtp *h, const char *path, char *err, size_t errlen);


// ---- MTP heads learned while serving: steps in priced pieces ---------------------------------
// The head served as versions: h's committed weights as a model_head (the same bits as h saved
// by learn_mtp_save and loaded by model_load_head). LANES_ENOMEM.
int learn_mtp_head(const learn_mtp *h, model_head **out, char *err, size_t errlen);
uint64_t learn_mtp_bytes(const learn_mtp *h); // the weights, their AdamW moments and the gradient
// A copy of h's weights that trains no more: made on h's thread, it may be saved on another
// while h trains on. LANES_ENOMEM.
int learn_mtp_copy(learn_mtp **out, const learn_mtp *h, char *err, size_t errlen);
// learn_mtp_save as file name (base_name_ok) in folder dfd, never through a symlink.
int learn_mtp_save_at(const learn_mtp *h, int dfd, const char *name, char *err, size_t errlen);

// A job trains h (one job at a time) on examples' own tokens (their learn flags unread): a step
// runs the trunk over its batch's examples piece by piece (o->piece tokens: each position's
// state and likeliest tokens kept), then the head's forward and backward over views of
// o->piece + 2 tokens of each (first and chained drafts as learn_mtp_step runs them, attention
// within the view), the gradient summed in a fixed order; the commit applies AdamW (o->lr,
// clip, weight decay) and makes the next version. A step is the same bits however its pieces
// are spread over calls and whatever the pool's thread count. Called on one thread at a time.
typedef struct learn_mtp_job learn_mtp_job;
// LANES_EINVAL (options out of range), LANES_ENOMEM.
int learn_mtp_job_new(learn_mtp_job **out, learn_mtp *h, const learn_opts *o, char *err, size_t errlen);
void learn_mtp_job_free(learn_mtp_job *j); // accepts NULL; drops a step in progress (nothing commits)
// Queues e's tokens: LANES_EINVAL for fewer than 3 or more than o->max_tokens, or a token
// outside the vocabulary; LANES_ENOMEM.
int learn_mtp_job_add(learn_mtp_job *j, const learn_example *e, char *err, size_t errlen);
int64_t learn_mtp_job_queued(const learn_mtp_job *j);
uint64_t learn_mtp_job_bytes(const learn_mtp_job *j); // queued tokens, the step's states and scratch
enum learn_state learn_mtp_job_state(const learn_mtp_job *j);
// As learn_step_next_cost: the next piece's price in tokens through the model (0: nothing to run).
double learn_mtp_job_next_cost(const learn_mtp_job *j);
// As learn_step_run. On an error the step is dropped (nothing commits).
int learn_mtp_job_run(learn_mtp_job *j, base_pool *pool, double budget, double *spent, char *err, size_t errlen);
void learn_mtp_job_abort(learn_mtp_job *j); // drops the step in progress
// Applies a whole step (LANES_EBUSY when none is ready); *version (NULL: none made) gets the new
// weights as a head version, the caller's. info as learn_commit's (version: the head's steps).
// LANES_ENOMEM leaves the head as it was.
int learn_mtp_job_commit(learn_mtp_job *j, model_head **version, learn_step_info *info, char *err, size_t errlen);

#endif
