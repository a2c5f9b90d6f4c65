// learn (internal): the adapter's and the example's layout, the allocation gate, and the f32
// kernels the training pass is built from (kern.c), shared by the files of src/learn.
#ifndef LANES_LEARN_INT_H
#define LANES_LEARN_INT_H

#include "learn/learn.h"

// One adapted weight: offsets into the adapter's flat arrays (parameters, moments, gradients
// share one layout, so the optimizer runs over flat arrays).
typedef struct {
	int32_t layer, kind, r, n_in, n_out;
	int64_t a_off, b_off; // A [r][n_in], B [n_out][r]
} lpair;

struct learn_adapter {
	const model *m;
	float alpha;       // as saved; the term's factor is alpha / r
	int32_t rank;
	int32_t n_pairs;
	lpair *pairs;
	int32_t *slot;     // [n_layers * MODEL_LORA_OUTPUT + 1]: pair index of layer l's kind k, or -1; the output last
	int64_t n_params;
	float *w;          // [n_params] A and B
	float *m1, *m2;    // [n_params] AdamW first and second moments
	int64_t version;
	int64_t adam_t;    // updates applied (bias correction)
	bool busy;         // a job holds it
};

// The pair of layer l's kind k (l < 0 or k == MODEL_LORA_OUTPUT: the head), or NULL.
static inline const lpair *learn_pair_of(const learn_adapter *a, int32_t l, int32_t k) {
	const int32_t L = model_hparams_of(a->m)->n_layers;
	const int32_t at = k == MODEL_LORA_OUTPUT || l < 0 ? L * MODEL_LORA_OUTPUT : l * MODEL_LORA_OUTPUT + k;
	return a->slot[at] < 0 ? NULL : &a->pairs[a->slot[at]];
}

// The factor of a pair's term: alpha / r (1 without alpha), as model_forward applies it.
static inline float learn_pair_scale(const learn_adapter *a, const lpair *p) {
	return a->alpha != 0.0f ? a->alpha / (float)p->r : 1.0f;
}

struct learn_example {
	int64_t n;         // tokens
	int64_t n_learned;
	int32_t *ids;      // [n]
	uint8_t *learn;    // [n]: 1 when token i is learned (i >= 1)
};

// ---- a job and its step (job.c, train.c) ------------------------------------------------------
// The pieces of a step, in order: every layer's forward over every chunk (layer by layer),
// the output head and loss over each chunk with learned tokens, then every layer's backward
// over every chunk (last layer, last chunk first).
enum { PH_FWD, PH_HEAD, PH_BWD, PH_DONE };

// A step's memory: the whole step's activations, then one chunk's scratch.
typedef struct {
	int32_t *tok, *start, *tgt;  // [T] token, its example's first index, the next token when learned (else -1)
	double *cs;                  // [T][learn_rope_stride] rope tables: the model's, then the local layers' where they differ
	float *xs;                   // [L+1][T][E] each layer's input; [L]: the final residual
	float *kc, *vc;              // [L][T][kvd] keys (after rope) and values
	float *dx;                   // [T][E] the gradient at the current layer's output
	float *dk, *dv;              // [T][kvd] the current layer's key and value gradients
	float *sc;                   // [LEARN_ATT_THREADS][Tmax] attention scores
	float *h, *q, *qraw, *k, *kraw, *v, *att, *lse, *xm, *h2, *t; // chunk activations
	float *ao;                   // [P][E] the attention's output before its post norm (gemma), or NULL
	float *g, *u, *act;          // [P * used][F] FFN gate, up, and their SwiGLU
	float *lu[MODEL_LORA_KINDS]; // [P][r] A x of each adapted weight
	float *ldu;                  // [P][r]
	float *dh, *dh2, *dxm, *datt, *dq, *dkr, *dvr, *dg, *du, *da;
	float *rl, *rw, *ys, *xg, *eg, *eu, *ea, *ey, *dyg, *dxg, *drl, *sg, *dsg, *sgg, *sgu, *sga, *ysh, *dysh;
	int32_t *ids, *sel, *slot;   // MoE routing: [P][used], and one expert's rows and their slots
	float *hn, *lg, *dhn;        // the head: [P][E], [P][V], [P][E]
	int32_t *hrow;               // [P] the learned rows of a chunk
} learn_buf;

// Doubles of rope table per position: one table, or two where local layers rotate otherwise.
static inline int64_t learn_rope_stride(const model_hparams *hp) { return (int64_t)hp->rope.n_rot * (hp->rope_swa.n_rot ? 2 : 1); }

#define LEARN_ATT_THREADS 64 // threads that share attention work; more wait

struct learn_job {
	learn_adapter *a;
	const model *m;
	learn_opts o;
	model_layer_weights *lw;   // [L]
	model_io_weights io;
	double *lmacs;             // [L] multiply-adds of one token through layer l (attention at position 0 aside)
	double head_macs, tok_macs; // the head's, and one token through the whole model: the price unit
	float *grad;               // [n_params]
	learn_example **q;         // queue: q[q_head .. q_n)
	int64_t q_head, q_n, q_cap;
	uint64_t q_bytes;
	// the step
	enum learn_state state;
	int64_t committed;
	learn_example **ex;
	int32_t n_ex;
	int64_t T, Tmax, n_learned, P;
	int32_t n_chunks;
	void *mem;                 // the step's memory, kept between steps
	uint64_t mem_bytes;        // its size
	learn_buf b;
	int32_t phase, layer, chunk; // the next piece
	double loss_sum, grad_norm;
};

// train.c: the step's memory for T tokens (longest example Tmax): bytes, and (mem not NULL)
// the buffers laid out in mem. 0 when too large.
uint64_t learn_buf_layout(const learn_job *j, int64_t T, int64_t Tmax, void *mem, learn_buf *b);
// Fills the step's tokens, rope tables and embeddings from its examples.
void learn_step_fill(learn_job *j);
// The price of the piece at the cursor in multiply-adds (0 past the end), and running it
// (the cursor then moves to the next piece with work; PH_DONE after the last).
double learn_piece_macs(const learn_job *j);
void learn_piece_run(learn_job *j, base_pool *pool);

// learn_commit's two halves of a new version: the empty adapter (which may fail), then its
// values once the update is done (which cannot).
int learn_lora_shell(const learn_adapter *a, model_lora **out, char *err, size_t errlen);
void learn_lora_fill(const learn_adapter *a, model_lora *l);

// Every allocation of learn goes through these: the test hook makes one fail on demand.
bool learn_alloc_fails(void);
void *learn_malloc(size_t n);
void *learn_calloc(size_t n, size_t size);

// ---- f32 kernels (kern.c) -----------------------------------------------------------------
// Each output reduces over its inputs in one fixed order; threads split outputs (or, for
// the transposed product, input columns), so results never depend on the thread count.

// y[i*ldy + o] = (acc ? y : 0) + alpha * sum_k x[i*ldx + k] * W[o][k] for i < n, o < rows of
// matrix mat of w (rows dequantized as stored, a tile at a time), by the kernel set ks.
void lk_mat_fwd(base_pool *pool, const tensor_kernels *ks, const model_matrix *w, int64_t mat, const float *x, int64_t ldx, int64_t n, float *y,
		int64_t ldy, float alpha, bool acc);
// dx[i*ldx + k] += sum_o dy[i*ldy + o] * W[o][k] for i < n, k < w->k.
void lk_mat_bwd(base_pool *pool, const tensor_kernels *ks, const model_matrix *w, int64_t mat, const float *dy, int64_t ldy, int64_t n, float *dx,
		int64_t ldx);
// g[r][c] += alpha * sum_i p[i*ldp + r] * q[i*ldq + c] for r < rows, c < cols, i < n.
void lk_outer(base_pool *pool, int64_t rows, int64_t cols, int64_t n, const float *p, int64_t ldp, const float *q,
	      int64_t ldq, float alpha, float *g);
// dx += the transposed Jacobian of y = x / rms(x) * w applied to dy (w NULL: no weight).
void lk_rms_bwd(const float *x, const float *w, int64_t n, float eps, const float *dy, float *dx);
// The transpose of tensor_rope_apply (cs: tensor_rope_table's) on n_heads heads of x.
void lk_rope_t(const tensor_rope *rp, const double *cs, float *x, int32_t n_heads, int32_t head_dim);
// dg, du from da through act = silu(g) * u.
void lk_swiglu_bwd(const float *g, const float *u, const float *da, float *dg, float *du, int64_t n);
// The same for tensor_geglu (Gemma) and tensor_swiglu_oai (gpt-oss: no gradient past a clamp).
void lk_geglu_bwd(const float *g, const float *u, const float *da, float *dg, float *du, int64_t n);
void lk_swiglu_oai_bwd(const float *g, const float *u, const float *da, float *dg, float *du, int64_t n);
// sum a[i] b[i] in eight running sums folded in a fixed order.
float lk_dot(const float *a, const float *b, int64_t n);
// A dense f32 matrix of rows x k as a model_matrix.
static inline model_matrix lk_f32(const float *w, int64_t rows, int64_t k) {
	return (model_matrix){.data = w, .type = GGUF_T_F32, .k = k, .rows = rows, .n_mat = 1, .row_bytes = (size_t)k * 4,
			      .mat_bytes = (size_t)(k * rows) * 4};
}

#endif
