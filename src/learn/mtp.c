// learn/mtp: trains a model's MTP head with the trunk frozen, by self-distillation: the head
// reads the trunk's hidden state at p and the token at p + 1 and learns the trunk's own choice
// at p + 2 (its greedy continuations of the data's prompts). Every head weight is trained in
// f32 (the block, eh_proj and the norms; biases and per-head norms stay as they start); the
// embedding and the output head are the model's, read as stored. The head is written as a
// GGUF of general.type "mtp" whose tensors have the standard nextn names.
#include "learn/learn_int.h"

#include "gguf/gguf.h"
#include "kv/kv.h"
#include "sample/sample.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// The trained tensors, in the order of the flat parameter array.
enum { W_EH, W_ENORM, W_HNORM, W_ANORM, W_Q, W_K, W_V, W_O, W_FNORM, W_GATE, W_UP, W_DOWN, W_HEADNORM, W_COUNT };
_Static_assert(W_COUNT == LEARN_MTP_TENSORS, "the head's tensors");

static const char *const wname[W_COUNT] = {"nextn.eh_proj", "nextn.enorm", "nextn.hnorm", "attn_norm", "attn_q", "attn_k", "attn_v",
					   "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "nextn.shared_head_norm"};

struct learn_mtp {
	const model *m;
	model_mtp_weights io;         // the embedding and output head the head reads (the model's, or its own head's)
	int64_t rows[W_COUNT], cols[W_COUNT]; // cols 1: a vector
	int64_t off[W_COUNT + 1];
	float *w, *m1, *m2, *g;       // parameters, AdamW moments, the step's gradient
	float *bias[4];               // q, k, v, o biases as the block starts (NULL: none), frozen
	float *qk_norm[2];            // per-head q and k norms (NULL: none), frozen
	int64_t adam_t;
	// one sequence's activations, grown to the longest
	int64_t cap;
	void *mem;
};

struct learn_mtp_seq {
	int64_t n;
	int32_t *ids;   // [n]
	float *hid;     // [n][E] the trunk's state after its output norm
	int32_t *next;  // [n] the trunk's choice after position p
	int32_t *top;   // [n][MTP_TOP] its likeliest tokens there, most likely first
	float *topp;    // [n][MTP_TOP] their probabilities
};

// The trunk's distribution the head learns, cut to its likeliest tokens: far more to learn
// from a row than its choice alone.
#define MTP_TOP 8

#define W(h, i) ((h)->w + (h)->off[i])
#define G(h, i) ((h)->g + (h)->off[i])

static const model_hparams *HP(const learn_mtp *h) { return model_hparams_of(h->m); }

// Copies n_rows rows of a stored matrix into f32 dst.
static void mat_f32(const model_matrix *x, float *dst) {
	const tensor_traits *t = tensor_traits_of(x->type);
	for (int64_t r = 0; r < x->rows; r++) t->to_f32((const uint8_t *)x->data + (size_t)r * x->row_bytes, dst + r * x->k, x->k);
}

static float *dup_vec(const float *v, int64_t n) {
	if (!v) return NULL;
	float *d = learn_malloc((size_t)n * sizeof *d);
	if (d) memcpy(d, v, (size_t)n * sizeof *d);
	return d;
}

int learn_mtp_new(learn_mtp **out, const model *m, char *err, size_t errlen) {
	*out = NULL;
	const model_hparams *hp = model_hparams_of(m);
	if (strcmp(hp->arch, "llama") && strcmp(hp->arch, "qwen2") && strcmp(hp->arch, "qwen3"))
		return base_seterr(err, errlen, LANES_EUNSUPPORTED, "learn: MTP heads are trained for llama, qwen2 and qwen3 models, not %s", hp->arch);
	if (hp->n_experts)
		return base_seterr(err, errlen, LANES_EUNSUPPORTED, "learn: MTP heads are trained for dense models (this one routes experts)");
	learn_mtp *h = calloc(1, sizeof *h);
	if (!h) return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
	h->m = m;
	const int64_t E = hp->n_embd, qd = (int64_t)hp->n_heads * hp->head_dim, kvd = (int64_t)hp->n_kv_heads * hp->head_dim, F = hp->n_ff;
	const int64_t shape[W_COUNT][2] = {{E, 2 * E}, {E, 1}, {E, 1}, {E, 1}, {qd, E}, {kvd, E}, {kvd, E}, {E, qd},
					   {E, 1}, {F, E}, {F, E}, {E, F}, {E, 1}};
	for (int i = 0; i < W_COUNT; i++) h->rows[i] = shape[i][0], h->cols[i] = shape[i][1], h->off[i + 1] = h->off[i] + shape[i][0] * shape[i][1];
	const size_t n = (size_t)h->off[W_COUNT];
	h->w = learn_calloc(n, 4), h->m1 = learn_calloc(n, 4), h->m2 = learn_calloc(n, 4), h->g = learn_calloc(n, 4);
	if (!h->w || !h->m1 || !h->m2 || !h->g) goto oom;
	// the model's own head when it has one; else the trunk's last block, eh_proj passing both halves on
	model_layer_weights lw;
	model_io_weights io;
	model_io_weights_of(m, &io);
	if (!model_mtp_weights_of(m, 0, &h->io)) {
		model_layer_weights_of(m, hp->n_layers, &lw);
		mat_f32(&h->io.eh_proj, W(h, W_EH));
		memcpy(W(h, W_ENORM), h->io.enorm, (size_t)E * 4);
		memcpy(W(h, W_HNORM), h->io.hnorm, (size_t)E * 4);
		memcpy(W(h, W_HEADNORM), h->io.head_norm, (size_t)E * 4);
	} else {
		h->io = (model_mtp_weights){.embed = io.tok_embd, .head = io.output, .head_norm = io.output_norm};
		model_layer_weights_of(m, hp->n_layers - 1, &lw);
		for (int64_t i = 0; i < E; i++) {
			W(h, W_EH)[i * 2 * E + i] = 1.0f;
			W(h, W_EH)[i * 2 * E + E + i] = 1.0f;
			W(h, W_ENORM)[i] = W(h, W_HNORM)[i] = 1.0f;
		}
		memcpy(W(h, W_HEADNORM), io.output_norm, (size_t)E * 4);
	}
	if (!lw.ffn_gate.data)
		return learn_mtp_free(h), base_seterr(err, errlen, LANES_EUNSUPPORTED, "learn: the head's block has no dense FFN");
	memcpy(W(h, W_ANORM), lw.attn_norm, (size_t)E * 4);
	memcpy(W(h, W_FNORM), lw.ffn_norm, (size_t)E * 4);
	const model_matrix *mats[] = {[W_Q] = &lw.wq, [W_K] = &lw.wk, [W_V] = &lw.wv, [W_O] = &lw.wo,
				      [W_GATE] = &lw.ffn_gate, [W_UP] = &lw.ffn_up, [W_DOWN] = &lw.ffn_down};
	for (int i = W_Q; i <= W_DOWN; i++)
		if (mats[i]) mat_f32(mats[i], W(h, i));
	const float *bs[4] = {lw.bq, lw.bk, lw.bv, lw.bo};
	const int64_t bn[4] = {qd, kvd, kvd, E};
	for (int i = 0; i < 4; i++)
		if (bs[i] && !(h->bias[i] = dup_vec(bs[i], bn[i]))) goto oom;
	if (lw.q_norm && (!(h->qk_norm[0] = dup_vec(lw.q_norm, hp->head_dim)) || !(h->qk_norm[1] = dup_vec(lw.k_norm, hp->head_dim)))) goto oom;
	*out = h;
	return LANES_OK;
oom:
	learn_mtp_free(h);
	return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
}

void learn_mtp_free(learn_mtp *h) {
	if (!h) return;
	free(h->w), free(h->m1), free(h->m2), free(h->g), free(h->mem);
	for (int i = 0; i < 4; i++) free(h->bias[i]);
	free(h->qk_norm[0]), free(h->qk_norm[1]);
	free(h);
}

int64_t learn_mtp_params(const learn_mtp *h) { return h->off[W_COUNT]; }
float *learn_mtp_weights(learn_mtp *h) { return h->w; }
const char *learn_mtp_tensor(const learn_mtp *h, int i, int64_t *off, int64_t *n) {
	*off = h->off[i], *n = h->off[i + 1] - h->off[i];
	return wname[i];
}
const float *learn_mtp_grad(const learn_mtp *h) { return h->g; }

// ---- sequences: the trunk's states and choices ------------------------------------------------
void learn_mtp_seq_free(learn_mtp_seq *s) {
	if (!s) return;
	free(s->ids), free(s->hid), free(s->next), free(s->top), free(s->topp);
	free(s);
}

int64_t learn_mtp_seq_tokens(const learn_mtp_seq *s) { return s->n; }

// A draw from softmax(l / temp) by u in [0, 1).
static int32_t draw(const float *l, int64_t V, float temp, double u) {
	float mx = l[0];
	for (int64_t v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
	double sum = 0.0;
	for (int64_t v = 0; v < V; v++) sum += exp(((double)l[v] - mx) / temp);
	double acc = 0.0, at = u * sum;
	for (int64_t v = 0; v < V; v++)
		if ((acc += exp(((double)l[v] - mx) / temp)) > at) return (int32_t)v;
	return (int32_t)(V - 1);
}

// The MTP_TOP likeliest tokens of logits l and their probabilities (ties: the lower id first).
static void top_of(const float *l, int64_t V, int32_t *id, float *p) {
	float mx = l[0];
	for (int64_t v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
	double sum = 0.0;
	for (int64_t v = 0; v < V; v++) sum += exp((double)l[v] - mx);
	int n = 0;
	for (int64_t v = 0; v < V; v++) {
		if (n == MTP_TOP && l[v] <= l[id[n - 1]]) continue;
		int at = n < MTP_TOP ? n++ : n - 1;
		while (at > 0 && l[v] > l[id[at - 1]]) id[at] = id[at - 1], at--;
		id[at] = (int32_t)v;
	}
	for (int k = 0; k < MTP_TOP; k++) p[k] = k < n ? (float)(exp((double)l[id[k]] - mx) / sum) : 0.0f;
	for (int k = n; k < MTP_TOP; k++) id[k] = id[0];
}

// Sequences generated together: one KV sequence each, a row each per decode pass.
#define GEN_SEQS 32
#define GEN_ROWS 64

// One sequence's memory for n tokens. NULL when out of memory.
static learn_mtp_seq *seq_alloc(int64_t n, int64_t E) {
	learn_mtp_seq *s = calloc(1, sizeof *s);
	if (!s) return NULL;
	s->n = n;
	s->ids = learn_malloc((size_t)n * 4), s->hid = learn_malloc((size_t)(n * E) * 4), s->next = learn_malloc((size_t)n * 4);
	s->top = learn_malloc((size_t)(n * MTP_TOP) * 4), s->topp = learn_malloc((size_t)(n * MTP_TOP) * 4);
	if (s->ids && s->hid && s->next && s->top && s->topp) return s;
	learn_mtp_seq_free(s);
	return NULL;
}

// Row r's results into sequence s at position p: its state, choice and likeliest tokens; the
// token after it when p + 1 is past the prompt.
static void seq_take(learn_mtp_seq *s, int64_t p, int64_t n_prompt, const float *lg, const float *hid, int64_t V, int64_t E, float temp,
		     uint64_t seed) {
	memcpy(s->hid + p * E, hid, (size_t)E * 4);
	s->next[p] = sample_argmax(lg, (int32_t)V);
	top_of(lg, V, s->top + p * MTP_TOP, s->topp + p * MTP_TOP);
	if (p + 1 >= n_prompt && p + 1 < s->n)
		s->ids[p + 1] = temp > 0.0f ? draw(lg, V, temp, (double)(splitmix64(seed + (uint64_t)p) >> 11) * 0x1p-53) : s->next[p];
}

// The generation's state: the sequences of a group, and the rows of its next pass.
typedef struct {
	const model *m;
	base_pool *pool;
	kv_cache *kv;
	model_ws *ws;
	learn_mtp_seq **seq;       // the group's
	const int64_t *n_prompts;  // the group's
	model_row rows[GEN_ROWS];
	int64_t owner[GEN_ROWS], at[GEN_ROWS], k;
	float *lg, *hid;
	float temp;
	uint64_t seed;             // the group's first sequence's
} gen_state;

// Runs the rows gathered and takes each row's results into its sequence.
static int gen_pass(gen_state *g, char *err, size_t errlen) {
	const model_hparams *hp = model_hparams_of(g->m);
	const int64_t E = hp->n_embd, V = hp->n_vocab;
	bool want[GEN_ROWS];
	memset(want, 1, sizeof want);
	int rc = model_forward_hidden(g->m, g->kv, g->pool, g->ws, g->rows, g->k, g->lg, want, g->hid, err, errlen);
	for (int64_t r = 0; r < g->k && !rc; r++)
		seq_take(g->seq[g->owner[r]], g->at[r], g->n_prompts[g->owner[r]], g->lg + r * V, g->hid + r * E, V, E, g->temp,
			 splitmix64(g->seed + (uint64_t)g->owner[r]));
	g->k = 0;
	return rc;
}

static void gen_row(gen_state *g, int64_t b, int64_t p) {
	g->owner[g->k] = b, g->at[g->k] = p;
	g->rows[g->k++] = (model_row){g->seq[b]->ids[p], (int32_t)p, (int32_t)b, true, NULL};
}

int learn_mtp_seqs_new(learn_mtp_seq **out, const model *m, base_pool *pool, const int32_t *const *prompts, const int64_t *n_prompts,
		       int64_t count, int64_t gen, int64_t max_tokens, float temp, uint64_t seed, char *err, size_t errlen) {
	const model_hparams *hp = model_hparams_of(m);
	const int64_t E = hp->n_embd, V = hp->n_vocab;
	memset(out, 0, (size_t)count * sizeof *out);
	if (gen < 0 || max_tokens < 3) return base_seterr(err, errlen, LANES_EINVAL, "learn: an MTP sequence needs 3 tokens or more");
	for (int64_t i = 0; i < count; i++) {
		if (n_prompts[i] < 1 || (n_prompts[i] + gen < max_tokens ? n_prompts[i] + gen : max_tokens) < 3)
			return base_seterr(err, errlen, LANES_EINVAL, "learn: MTP sequence %lld has fewer than 3 tokens", (long long)i + 1);
		for (int64_t k = 0; k < n_prompts[i]; k++)
			if (prompts[i][k] < 0 || prompts[i][k] >= V)
				return base_seterr(err, errlen, LANES_EINVAL, "learn: token %d is outside the vocabulary", prompts[i][k]);
	}
	gen_state *g = calloc(1, sizeof *g);
	int rc = g ? LANES_OK : base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
	if (!rc) {
		*g = (gen_state){.m = m, .pool = pool, .temp = temp};
		g->lg = learn_malloc((size_t)(GEN_ROWS * V) * sizeof *g->lg), g->hid = learn_malloc((size_t)(GEN_ROWS * E) * sizeof *g->hid);
		if (!g->lg || !g->hid) rc = base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
	}
	int64_t longest = 3;
	for (int64_t i = 0; i < count && !rc; i++) {
		const int64_t n = n_prompts[i] + gen < max_tokens ? n_prompts[i] + gen : max_tokens;
		longest = n > longest ? n : longest;
		if (!(out[i] = seq_alloc(n, E))) rc = base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
		else memcpy(out[i]->ids, prompts[i], (size_t)(n < n_prompts[i] ? n : n_prompts[i]) * 4);
	}
	kv_config c = model_kv_config(m, KV_F16S, GEN_SEQS, (int32_t)longest, 16);
	if (!rc) rc = kv_new(&g->kv, &c, err, errlen);
	if (!rc) rc = model_ws_new(&g->ws, m, GEN_ROWS, base_pool_threads(pool), 0, err, errlen);
	// GEN_SEQS at a time: their prompts, rows of several to a pass, then a row each per pass until all are whole
	for (int64_t g0 = 0; !rc && g0 < count; g0 += GEN_SEQS) {
		const int64_t nb = count - g0 < GEN_SEQS ? count - g0 : GEN_SEQS;
		int64_t len[GEN_SEQS];
		g->seq = out + g0, g->n_prompts = n_prompts + g0, g->seed = seed + (uint64_t)g0;
		for (int64_t b = 0; b < nb && !rc; b++) {
			kv_seq_clear(g->kv, (int32_t)b);
			len[b] = n_prompts[g0 + b] < out[g0 + b]->n ? n_prompts[g0 + b] : out[g0 + b]->n;
			for (int64_t p = 0; p < len[b] && !rc; p++) {
				gen_row(g, b, p);
				if (g->k == GEN_ROWS) rc = gen_pass(g, err, errlen);
			}
		}
		if (!rc && g->k) rc = gen_pass(g, err, errlen);
		for (bool more = true; more && !rc;) {
			more = false;
			for (int64_t b = 0; b < nb; b++)
				if (len[b] < out[g0 + b]->n) gen_row(g, b, len[b]++), more = true;
			if (more) rc = gen_pass(g, err, errlen);
		}
	}
	if (g) {
		model_ws_free(g->ws);
		kv_free(g->kv);
		free(g->lg), free(g->hid);
		free(g);
	}
	if (rc)
		for (int64_t i = 0; i < count; i++) learn_mtp_seq_free(out[i]), out[i] = NULL;
	return rc;
}

int learn_mtp_seqs_of(learn_mtp_seq ***out, int64_t *count, const model *m, base_pool *pool, const learn_example *const *ex, int64_t n,
		      int64_t gen, int64_t max_tokens, float temp, uint64_t seed, char *err, size_t errlen) {
	*out = NULL, *count = 0;
	int64_t total = 0;
	for (int64_t i = 0; i < n; i++) total += gen ? (ex[i]->n + LEARN_MTP_STRIDE - 1) / LEARN_MTP_STRIDE : 1;
	const size_t t = (size_t)(total ? total : 1);
	learn_mtp_seq **seqs = calloc(t, sizeof *seqs);
	const int32_t **pr = calloc(t, sizeof *pr);
	int64_t *np = calloc(t, sizeof *np);
	int32_t *win = malloc(t * (LEARN_MTP_WINDOW + 1) * sizeof *win);
	int rc = !seqs || !pr || !np || !win ? base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory") : LANES_OK;
	for (int64_t i = 0, k = 0; i < n && !rc; i++) {
		const int32_t *ids = ex[i]->ids;
		if (!gen) {
			pr[k] = ids, np[k++] = ex[i]->n;
			continue;
		}
		for (int64_t at = LEARN_MTP_STRIDE; at - LEARN_MTP_STRIDE < ex[i]->n; at += LEARN_MTP_STRIDE, k++) {
			const int64_t cut = at < ex[i]->n ? at : ex[i]->n, from = cut - LEARN_MTP_WINDOW > 1 ? cut - LEARN_MTP_WINDOW : 1;
			int32_t *w = win + k * (LEARN_MTP_WINDOW + 1);
			w[0] = ids[0];
			memcpy(w + 1, ids + from, (size_t)(cut - from) * sizeof *w);
			pr[k] = w, np[k] = 1 + cut - from;
		}
	}
	if (!rc) rc = learn_mtp_seqs_new(seqs, m, pool, pr, np, total, gen, max_tokens, temp, seed, err, errlen);
	free(pr), free(np), free(win);
	if (rc) {
		free(seqs);
		return rc;
	}
	*out = seqs, *count = total;
	return LANES_OK;
}

// ---- the head's pass in f32 -----------------------------------------------------------------
// A set of head rows and their activations and gradients: the first drafts (row r reads the
// trunk's state at r and the token at r + 1), or the chained ones (row r reads the first
// draft row r's state and the token at r + 2, at position r + 1, attending over the first
// rows 0..r and itself, as the served head's KV holds them when it chains).
typedef struct {
	int64_t n;
	double *cs;
	float *e, *cat, *z, *xn, *q, *k, *v, *qraw, *kraw, *att, *lse, *h1, *hn2, *gt, *up, *act, *out, *fn;
	float *dfn, *dout, *dact, *dg, *du, *dhn2, *dh1, *datt, *dq, *dk, *dv, *dxn, *dz, *dcat;
} rowset;

typedef struct {
	rowset m, c;    // first drafts, chained drafts
	float *lg, *sc, *tmp;
} acts;

#define HEAD_ROWS 32

static int acts_of(learn_mtp *h, int64_t R, acts *a, char *err, size_t errlen) {
	const model_hparams *hp = HP(h);
	const int64_t E = hp->n_embd, qd = (int64_t)hp->n_heads * hp->head_dim, kvd = (int64_t)hp->n_kv_heads * hp->head_dim,
		      F = hp->n_ff, V = hp->n_vocab, H = hp->n_heads;
	const int64_t per[] = {R * hp->rope.n_rot * 2, R * E, R * 2 * E, R * E, R * E, R * qd, R * kvd, R * kvd, R * qd, R * kvd, R * qd, R * H,
			       R * E, R * E, R * F, R * F, R * F, R * E, R * E,
			       R * E, R * E, R * F, R * F, R * F, R * E, R * E, R * qd, R * qd, R * kvd, R * kvd, R * E, R * E, R * 2 * E};
	const int cnt = (int)(sizeof per / sizeof per[0]);
	const int64_t shared[] = {HEAD_ROWS * V, R + 1, qd > kvd ? qd : kvd};
	int64_t total = 0;
	for (int i = 0; i < cnt; i++) total += 2 * ((per[i] + 15) & ~(int64_t)15);
	for (int i = 0; i < 3; i++) total += (shared[i] + 15) & ~(int64_t)15;
	if (R > h->cap) {
		void *mem = learn_malloc((size_t)total * 4);
		if (!mem) return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory for a sequence of %lld tokens", (long long)R + 1);
		free(h->mem);
		h->mem = mem, h->cap = R;
	}
	float *p = h->mem;
	for (int set = 0; set < 2; set++) {
		rowset *x = set ? &a->c : &a->m;
		float **ptrs[] = {(float **)&x->cs, &x->e, &x->cat, &x->z, &x->xn, &x->q, &x->k, &x->v, &x->qraw, &x->kraw, &x->att, &x->lse,
				  &x->h1, &x->hn2, &x->gt, &x->up, &x->act, &x->out, &x->fn,
				  &x->dfn, &x->dout, &x->dact, &x->dg, &x->du, &x->dhn2, &x->dh1, &x->datt, &x->dq, &x->dk, &x->dv, &x->dxn, &x->dz, &x->dcat};
		_Static_assert(sizeof ptrs / sizeof ptrs[0] == sizeof per / sizeof per[0], "a size for every buffer");
		for (int i = 0; i < cnt; i++) *ptrs[i] = p, p += (per[i] + 15) & ~(int64_t)15;
	}
	float **sh[] = {&a->lg, &a->sc, &a->tmp};
	for (int i = 0; i < 3; i++) *sh[i] = p, p += (shared[i] + 15) & ~(int64_t)15;
	return LANES_OK;
}

static void rmsnorm_rows(const float *x, const float *w, int64_t n, int64_t width, float eps, float *y) {
	for (int64_t r = 0; r < n; r++) tensor_rmsnorm(x + r * width, w, width, eps, y + r * width);
}

// dw += dy * x / rms(x), row by row.
static void rms_wgrad(const float *x, int64_t n, int64_t width, float eps, const float *dy, float *dw) {
	for (int64_t r = 0; r < n; r++) {
		const float *xr = x + r * width, *d = dy + r * width;
		double ss = 0.0;
		for (int64_t i = 0; i < width; i++) ss += (double)xr[i] * xr[i];
		const double rr = 1.0 / sqrt(ss / (double)width + (double)eps);
		for (int64_t i = 0; i < width; i++) dw[i] += (float)(d[i] * xr[i] * rr);
	}
}

static void add_bias(float *y, const float *b, int64_t n, int64_t width) {
	if (!b) return;
	for (int64_t r = 0; r < n; r++)
		for (int64_t i = 0; i < width; i++) y[r * width + i] += b[i];
}

static model_matrix WM(const learn_mtp *h, int i) { return lk_f32(h->w + h->off[i], h->rows[i], h->cols[i]); }

// The keys row r of set x attends to: the first drafts' rows 0..r (pre NULL: x's own), then,
// for a chained set, its own row r: the body sees K_, Vv_ and their gradients dK_, dV_.
#define ATT_KEYS(x, pre, r, ...)                                                                         \
	for (int64_t kk_ = 0, nk_ = (r) + 1 + ((pre) != NULL); kk_ < nk_; kk_++) {                     \
		const rowset *ks_ = (pre) && kk_ <= (r) ? (pre) : (x);                                        \
		const int64_t kr_ = (pre) && kk_ > (r) ? (r) : kk_;                                           \
		const float *K_ = ks_->k + kr_ * kvd + g * D, *Vv_ = ks_->v + kr_ * kvd + g * D;              \
		float *dK_ = ks_->dk + kr_ * kvd + g * D, *dV_ = ks_->dv + kr_ * kvd + g * D;                 \
		__VA_ARGS__                                                                                   \
	}

// The shapes a set's pass works with, and the head's weights as matrices.
#define SET_DIMS(h, x)                                                                                                  \
	const model_hparams *hp = HP(h);                                                                                \
	const tensor_kernels *ks = model_kernels((h)->m);                                                               \
	const int64_t R = (x)->n, E = hp->n_embd, D = hp->head_dim, H = hp->n_heads, KH = hp->n_kv_heads, grp = H / KH, \
		      qd = H * D, kvd = KH * D, F = hp->n_ff, nr = hp->rope.n_rot;                                      \
	const float eps = hp->rms_eps, scale = (float)(1.0 / sqrt((double)D));                                          \
	model_matrix M[W_COUNT];                                                                                        \
	for (int i = 0; i < W_COUNT; i++) M[i] = WM(h, i)

// The block over set x's inputs (cat, cs): attention over its keys (ATT_KEYS), then the FFN and
// the head norm into fn.
static void set_fwd(learn_mtp *h, base_pool *pool, rowset *x, const rowset *pre, acts *a) {
	SET_DIMS(h, x);
	lk_mat_fwd(pool, ks, &M[W_EH], 0, x->cat, 2 * E, R, x->z, E, 1.0f, false);
	rmsnorm_rows(x->z, W(h, W_ANORM), R, E, eps, x->xn);
	lk_mat_fwd(pool, ks, &M[W_Q], 0, x->xn, E, R, x->q, qd, 1.0f, false);
	lk_mat_fwd(pool, ks, &M[W_K], 0, x->xn, E, R, x->k, kvd, 1.0f, false);
	lk_mat_fwd(pool, ks, &M[W_V], 0, x->xn, E, R, x->v, kvd, 1.0f, false);
	add_bias(x->q, h->bias[0], R, qd), add_bias(x->k, h->bias[1], R, kvd), add_bias(x->v, h->bias[2], R, kvd);
	for (int64_t r = 0; r < R; r++) {
		float *q = x->q + r * qd, *k = x->k + r * kvd;
		if (h->qk_norm[0]) {
			memcpy(x->qraw + r * qd, q, (size_t)qd * 4), memcpy(x->kraw + r * kvd, k, (size_t)kvd * 4);
			for (int64_t hh = 0; hh < H; hh++) tensor_rmsnorm(q + hh * D, h->qk_norm[0], D, eps, q + hh * D);
			for (int64_t hh = 0; hh < KH; hh++) tensor_rmsnorm(k + hh * D, h->qk_norm[1], D, eps, k + hh * D);
		}
		tensor_rope_apply(&hp->rope, x->cs + r * nr, q, (int32_t)H, (int32_t)D);
		tensor_rope_apply(&hp->rope, x->cs + r * nr, k, (int32_t)KH, (int32_t)D);
	}
	for (int64_t r = 0; r < R; r++)
		for (int64_t hh = 0; hh < H; hh++) {
			const int64_t g = hh / grp;
			const float *q = x->q + r * qd + hh * D;
			float *o = x->att + r * qd + hh * D, mx = -INFINITY;
			int64_t i = 0;
			ATT_KEYS(x, pre, r, {
				a->sc[i] = scale * lk_dot(q, K_, D);
				mx = a->sc[i] > mx ? a->sc[i] : mx;
				i++;
				(void)Vv_, (void)dK_, (void)dV_;
			})
			double sum = 0.0;
			for (int64_t p = 0; p < i; p++) a->sc[p] = expf(a->sc[p] - mx), sum += a->sc[p];
			memset(o, 0, (size_t)D * 4);
			i = 0;
			ATT_KEYS(x, pre, r, {
				const float w = (float)(a->sc[i++] / sum);
				for (int64_t d = 0; d < D; d++) o[d] += w * Vv_[d];
				(void)K_, (void)dK_, (void)dV_;
			})
			x->lse[r * H + hh] = (float)(mx + log(sum));
		}
	lk_mat_fwd(pool, ks, &M[W_O], 0, x->att, qd, R, x->h1, E, 1.0f, false);
	add_bias(x->h1, h->bias[3], R, E);
	for (int64_t i = 0; i < R * E; i++) x->h1[i] += x->z[i];
	rmsnorm_rows(x->h1, W(h, W_FNORM), R, E, eps, x->hn2);
	lk_mat_fwd(pool, ks, &M[W_GATE], 0, x->hn2, E, R, x->gt, F, 1.0f, false);
	lk_mat_fwd(pool, ks, &M[W_UP], 0, x->hn2, E, R, x->up, F, 1.0f, false);
	for (int64_t i = 0; i < R * F; i++) x->act[i] = (float)((double)x->gt[i] / (1.0 + exp(-(double)x->gt[i]))) * x->up[i];
	memcpy(x->out, x->h1, (size_t)(R * E) * 4);
	lk_mat_fwd(pool, ks, &M[W_DOWN], 0, x->act, F, R, x->out, E, 1.0f, true);
	rmsnorm_rows(x->out, W(h, W_HEADNORM), R, E, eps, x->fn);
}

// The output head and the loss of set x: row r learns the trunk's distribution at r + toff.
// With scale > 0, dfn gets the loss's gradient (times scale). hits: argmax == the trunk's choice.
static void set_loss(learn_mtp *h, base_pool *pool, rowset *x, const learn_mtp_seq *s, int64_t toff, acts *a, double scale,
		     double *loss_sum, int64_t *hits) {
	const model_hparams *hp = HP(h);
	const tensor_kernels *ks = model_kernels(h->m);
	const int64_t R = x->n, E = hp->n_embd, V = hp->n_vocab;
	if (scale > 0.0) memset(x->dfn, 0, (size_t)(R * E) * 4);
	for (int64_t r0 = 0; r0 < R; r0 += HEAD_ROWS) {
		const int64_t nh = R - r0 < HEAD_ROWS ? R - r0 : HEAD_ROWS;
		lk_mat_fwd(pool, ks, &h->io.head, 0, x->fn + r0 * E, E, nh, a->lg, V, 1.0f, false);
		for (int64_t r = 0; r < nh; r++) {
			float *l = a->lg + r * V;
			const int64_t at = r0 + r + toff;
			const int32_t t = s->next[at], *tid = s->top + at * MTP_TOP;
			const float *tp = s->topp + at * MTP_TOP;
			float mx = l[0];
			for (int64_t v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
			double sum = 0.0, mass = 0.0;
			for (int64_t v = 0; v < V; v++) sum += exp((double)l[v] - mx);
			// the cross-entropy to the trunk's likeliest tokens: -sum p_k log q_k
			for (int k = 0; k < MTP_TOP; k++) *loss_sum += tp[k] * (mx + log(sum) - l[tid[k]]), mass += tp[k];
			*hits += sample_argmax(l, (int32_t)V) == t;
			if (scale <= 0.0) continue;
			for (int64_t v = 0; v < V; v++) l[v] = (float)(scale * mass * exp((double)l[v] - mx) / sum);
			for (int k = 0; k < MTP_TOP; k++) l[tid[k]] -= (float)(scale * tp[k]);
		}
		if (scale > 0.0) lk_mat_bwd(pool, ks, &h->io.head, 0, a->lg, V, nh, x->dfn + r0 * E, E);
	}
}

// The backward of set x from its dfn: the gradients of every head weight added to h->g, its
// keys' and values' gradients added to dk and dv (the first drafts' too, for a chained set),
// and the gradient at its hidden input hin added to dhin (NULL: the trunk's, not learned).
static void set_bwd(learn_mtp *h, base_pool *pool, rowset *x, rowset *pre, const float *hin, float *dhin, acts *a) {
	SET_DIMS(h, x);
	memset(x->dout, 0, (size_t)(R * E) * 4);
	for (int64_t r = 0; r < R; r++) lk_rms_bwd(x->out + r * E, W(h, W_HEADNORM), E, eps, x->dfn + r * E, x->dout + r * E);
	rms_wgrad(x->out, R, E, eps, x->dfn, G(h, W_HEADNORM));
	lk_outer(pool, E, F, R, x->dout, E, x->act, F, 1.0f, G(h, W_DOWN));
	memset(x->dact, 0, (size_t)(R * F) * 4);
	lk_mat_bwd(pool, ks, &M[W_DOWN], 0, x->dout, E, R, x->dact, F);
	lk_swiglu_bwd(x->gt, x->up, x->dact, x->dg, x->du, R * F);
	lk_outer(pool, F, E, R, x->dg, F, x->hn2, E, 1.0f, G(h, W_GATE));
	lk_outer(pool, F, E, R, x->du, F, x->hn2, E, 1.0f, G(h, W_UP));
	memset(x->dhn2, 0, (size_t)(R * E) * 4);
	lk_mat_bwd(pool, ks, &M[W_GATE], 0, x->dg, F, R, x->dhn2, E);
	lk_mat_bwd(pool, ks, &M[W_UP], 0, x->du, F, R, x->dhn2, E);
	memcpy(x->dh1, x->dout, (size_t)(R * E) * 4);
	for (int64_t r = 0; r < R; r++) lk_rms_bwd(x->h1 + r * E, W(h, W_FNORM), E, eps, x->dhn2 + r * E, x->dh1 + r * E);
	rms_wgrad(x->h1, R, E, eps, x->dhn2, G(h, W_FNORM));
	lk_outer(pool, E, qd, R, x->dh1, E, x->att, qd, 1.0f, G(h, W_O));
	memset(x->datt, 0, (size_t)(R * qd) * 4);
	lk_mat_bwd(pool, ks, &M[W_O], 0, x->dh1, E, R, x->datt, qd);
	memset(x->dq, 0, (size_t)(R * qd) * 4);
	for (int64_t r = 0; r < R; r++)
		for (int64_t hh = 0; hh < H; hh++) {
			const int64_t g = hh / grp;
			const float *q = x->q + r * qd + hh * D, *o = x->att + r * qd + hh * D, *dO = x->datt + r * qd + hh * D;
			const float lse = x->lse[r * H + hh], di = lk_dot(dO, o, D);
			float *dq = x->dq + r * qd + hh * D;
			ATT_KEYS(x, pre, r, {
				const float pr = expf(scale * lk_dot(q, K_, D) - lse), ds = pr * (lk_dot(dO, Vv_, D) - di) * scale;
				for (int64_t d = 0; d < D; d++) dq[d] += ds * K_[d], dK_[d] += ds * q[d], dV_[d] += pr * dO[d];
			})
		}
	(void)pre;
	for (int64_t r = 0; r < R; r++) {
		lk_rope_t(&hp->rope, x->cs + r * nr, x->dq + r * qd, (int32_t)H, (int32_t)D);
		lk_rope_t(&hp->rope, x->cs + r * nr, x->dk + r * kvd, (int32_t)KH, (int32_t)D);
		if (!h->qk_norm[0]) continue;
		// through the per-head norms (their weights stay)
		memcpy(a->tmp, x->dq + r * qd, (size_t)qd * 4);
		memset(x->dq + r * qd, 0, (size_t)qd * 4);
		for (int64_t hh = 0; hh < H; hh++)
			lk_rms_bwd(x->qraw + r * qd + hh * D, h->qk_norm[0], D, eps, a->tmp + hh * D, x->dq + r * qd + hh * D);
		memcpy(a->tmp, x->dk + r * kvd, (size_t)kvd * 4);
		memset(x->dk + r * kvd, 0, (size_t)kvd * 4);
		for (int64_t hh = 0; hh < KH; hh++)
			lk_rms_bwd(x->kraw + r * kvd + hh * D, h->qk_norm[1], D, eps, a->tmp + hh * D, x->dk + r * kvd + hh * D);
	}
	lk_outer(pool, qd, E, R, x->dq, qd, x->xn, E, 1.0f, G(h, W_Q));
	lk_outer(pool, kvd, E, R, x->dk, kvd, x->xn, E, 1.0f, G(h, W_K));
	lk_outer(pool, kvd, E, R, x->dv, kvd, x->xn, E, 1.0f, G(h, W_V));
	memset(x->dxn, 0, (size_t)(R * E) * 4);
	lk_mat_bwd(pool, ks, &M[W_Q], 0, x->dq, qd, R, x->dxn, E);
	lk_mat_bwd(pool, ks, &M[W_K], 0, x->dk, kvd, R, x->dxn, E);
	lk_mat_bwd(pool, ks, &M[W_V], 0, x->dv, kvd, R, x->dxn, E);
	memcpy(x->dz, x->dh1, (size_t)(R * E) * 4);
	for (int64_t r = 0; r < R; r++) lk_rms_bwd(x->z + r * E, W(h, W_ANORM), E, eps, x->dxn + r * E, x->dz + r * E);
	rms_wgrad(x->z, R, E, eps, x->dxn, G(h, W_ANORM));
	lk_outer(pool, E, 2 * E, R, x->dz, E, x->cat, 2 * E, 1.0f, G(h, W_EH));
	memset(x->dcat, 0, (size_t)(R * 2 * E) * 4);
	lk_mat_bwd(pool, ks, &M[W_EH], 0, x->dz, E, R, x->dcat, 2 * E);
	for (int64_t r = 0; r < R; r++) {
		rms_wgrad(x->e + r * E, 1, E, eps, x->dcat + r * 2 * E, G(h, W_ENORM));
		rms_wgrad(hin + r * E, 1, E, eps, x->dcat + r * 2 * E + E, G(h, W_HNORM));
		if (dhin) lk_rms_bwd(hin + r * E, W(h, W_HNORM), E, eps, x->dcat + r * 2 * E + E, dhin + r * E);
	}
}

// Set x's inputs: row r reads token ids[r + toff] and the state hin row r, at position r + poff.
static void set_inputs(learn_mtp *h, rowset *x, const learn_mtp_seq *s, int64_t toff, const float *hin, int64_t poff) {
	const model_hparams *hp = HP(h);
	const int64_t E = hp->n_embd, nr = hp->rope.n_rot;
	const tensor_traits *et = tensor_traits_of(h->io.embed.type);
	for (int64_t r = 0; r < x->n; r++) {
		et->to_f32((const uint8_t *)h->io.embed.data + (size_t)s->ids[r + toff] * h->io.embed.row_bytes, x->e + r * E, E);
		tensor_rmsnorm(x->e + r * E, W(h, W_ENORM), E, hp->rms_eps, x->cat + r * 2 * E);
		tensor_rmsnorm(hin + r * E, W(h, W_HNORM), E, hp->rms_eps, x->cat + r * 2 * E + E);
		tensor_rope_table(&hp->rope, (int32_t)(r + poff), x->cs + r * nr);
	}
}

// Sequence s's n - 1 first-draft rows and n - 2 chained rows, forward; with scale[0] > 0 the
// backward too, the gradient added to h->g (each set's loss times its scale). loss[2], hits[2]:
// each set's summed loss and argmax hits.
static void pass(learn_mtp *h, base_pool *pool, const learn_mtp_seq *s, acts *a, const double scale[2], double loss[2], int64_t hits[2]) {
	const model_hparams *hp = HP(h);
	const int64_t E = hp->n_embd, kvd = (int64_t)hp->n_kv_heads * hp->head_dim;
	rowset *m = &a->m, *c = &a->c;
	m->n = s->n - 1, c->n = s->n - 2;
	set_inputs(h, m, s, 1, s->hid, 0);
	set_fwd(h, pool, m, NULL, a);
	set_loss(h, pool, m, s, 1, a, scale[0], &loss[0], &hits[0]);
	set_inputs(h, c, s, 2, m->fn, 1);
	set_fwd(h, pool, c, m, a);
	set_loss(h, pool, c, s, 2, a, scale[1], &loss[1], &hits[1]);
	if (scale[0] <= 0.0) return;
	memset(m->dk, 0, (size_t)(m->n * kvd) * 4), memset(m->dv, 0, (size_t)(m->n * kvd) * 4);
	memset(c->dk, 0, (size_t)(c->n * kvd) * 4), memset(c->dv, 0, (size_t)(c->n * kvd) * 4);
	set_bwd(h, pool, c, m, m->fn, m->dfn, a);
	(void)E;
	set_bwd(h, pool, m, NULL, s->hid, NULL, a);
}

// The gradient's L2 norm, and one AdamW update of every weight by it (clipped to o->clip).
static double adam_update(learn_mtp *h, const learn_opts *o) {
	const int64_t P = h->off[W_COUNT];
	double norm = 0.0;
	for (int64_t i = 0; i < P; i++) norm += (double)h->g[i] * h->g[i];
	norm = sqrt(norm);
	const float clip = o->clip > 0.0f && norm > o->clip ? (float)(o->clip / norm) : 1.0f;
	h->adam_t++;
	const double bc1 = 1.0 - pow(o->beta1, (double)h->adam_t), bc2 = 1.0 - pow(o->beta2, (double)h->adam_t);
	for (int k = 0; k < W_COUNT; k++) {
		// weight decay on the matrices, not the norms' gains
		const float decay = h->cols[k] > 1 ? 1.0f - o->lr * o->weight_decay : 1.0f;
		for (int64_t i = h->off[k]; i < h->off[k + 1]; i++) {
			const float g = h->g[i] * clip;
			h->m1[i] = o->beta1 * h->m1[i] + (1.0f - o->beta1) * g;
			h->m2[i] = o->beta2 * h->m2[i] + (1.0f - o->beta2) * g * g;
			h->w[i] = h->w[i] * decay - o->lr * (float)((h->m1[i] / bc1) / (sqrt(h->m2[i] / bc2) + o->eps));
		}
	}
	return norm;
}

int learn_mtp_step(learn_mtp *h, base_pool *pool, const learn_mtp_seq *const *seqs, int32_t n, const learn_opts *o, learn_step_info *info,
		   char *err, size_t errlen) {
	memset(info, 0, sizeof *info);
	int64_t rows[2] = {0, 0}, longest = 0, hits[2] = {0, 0};
	for (int32_t i = 0; i < n; i++) rows[0] += seqs[i]->n - 1, rows[1] += seqs[i]->n - 2, longest = seqs[i]->n - 1 > longest ? seqs[i]->n - 1 : longest;
	if (!rows[1]) return base_seterr(err, errlen, LANES_EINVAL, "learn: no sequence to learn from");
	acts a;
	int rc = acts_of(h, longest, &a, err, errlen);
	if (rc) return rc;
	memset(h->g, 0, (size_t)h->off[W_COUNT] * 4);
	double loss[2] = {0.0, 0.0};
	const double scale[2] = {1.0 / (double)rows[0], 1.0 / (double)rows[1]};
	for (int32_t i = 0; i < n; i++) pass(h, pool, seqs[i], &a, scale, loss, hits);
	const double norm = adam_update(h, o);
	info->step = h->adam_t, info->examples = n, info->learned = rows[0];
	info->loss = loss[0] / (double)rows[0] + loss[1] / (double)rows[1], info->grad_norm = norm;
	for (int32_t i = 0; i < n; i++) info->tokens += seqs[i]->n;
	return LANES_OK;
}

int learn_mtp_eval(learn_mtp *h, base_pool *pool, const learn_mtp_seq *const *seqs, int32_t n, double accept[2], double *loss, char *err,
		   size_t errlen) {
	int64_t rows[2] = {0, 0}, longest = 0, hits[2] = {0, 0};
	for (int32_t i = 0; i < n; i++) rows[0] += seqs[i]->n - 1, rows[1] += seqs[i]->n - 2, longest = seqs[i]->n - 1 > longest ? seqs[i]->n - 1 : longest;
	accept[0] = accept[1] = *loss = 0.0;
	if (!rows[1]) return LANES_OK;
	acts a;
	int rc = acts_of(h, longest, &a, err, errlen);
	if (rc) return rc;
	double sum[2] = {0.0, 0.0};
	const double none[2] = {0.0, 0.0};
	for (int32_t i = 0; i < n; i++) pass(h, pool, seqs[i], &a, none, sum, hits);
	accept[0] = (double)hits[0] / (double)rows[0], accept[1] = (double)hits[1] / (double)rows[1];
	*loss = sum[0] / (double)rows[0] + sum[1] / (double)rows[1];
	return LANES_OK;
}

// ---- the head's file ----------------------------------------------------------------------------
static int save(const learn_mtp *h, int dfd, const char *path, char *err, size_t errlen) {
	const model_hparams *hp = HP(h);
	const int l = hp->n_layers;
	gguf_writer *w = gguf_writer_new();
	if (!w) return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
	char key[96], name[128];
	int rc = gguf_writer_set_str(w, "general.type", "mtp") || gguf_writer_set_str(w, "general.architecture", hp->arch);
	snprintf(key, sizeof key, "%s.block_count", hp->arch);
	rc = rc || gguf_writer_set_u32(w, key, (uint32_t)l + 1);
	snprintf(key, sizeof key, "%s.nextn_predict_layers", hp->arch);
	rc = rc || gguf_writer_set_u32(w, key, 1);
	snprintf(key, sizeof key, "%s.embedding_length", hp->arch);
	rc = rc || gguf_writer_set_u32(w, key, (uint32_t)hp->n_embd);
	for (int i = 0; i < W_COUNT && !rc; i++) {
		snprintf(name, sizeof name, "blk.%d.%s.weight", l, wname[i]);
		const int64_t ne[2] = {h->cols[i] > 1 ? h->cols[i] : h->rows[i], h->cols[i] > 1 ? h->rows[i] : 1};
		rc = gguf_writer_add_tensor(w, name, GGUF_T_F32, h->cols[i] > 1 ? 2 : 1, ne, W(h, i), (uint64_t)(h->off[i + 1] - h->off[i]) * 4);
	}
	static const char *const bname[4] = {"attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias"};
	const int64_t bn[4] = {h->rows[W_Q], h->rows[W_K], h->rows[W_V], hp->n_embd};
	for (int i = 0; i < 4 && !rc; i++) {
		if (!h->bias[i]) continue;
		snprintf(name, sizeof name, "blk.%d.%s", l, bname[i]);
		rc = gguf_writer_add_tensor(w, name, GGUF_T_F32, 1, &bn[i], h->bias[i], (uint64_t)bn[i] * 4);
	}
	// the embedding and output head the head learned with, where they are its own and not the model's
	model_io_weights io;
	model_io_weights_of(h->m, &io);
	const model_matrix *own[2] = {h->io.embed.data != io.tok_embd.data ? &h->io.embed : NULL,
				      h->io.head.data != io.output.data ? &h->io.head : NULL};
	for (int i = 0; i < 2 && !rc; i++) {
		if (!own[i]) continue;
		snprintf(name, sizeof name, "blk.%d.nextn.%s.weight", l, i ? "shared_head_head" : "embed_tokens");
		const int64_t ne[2] = {own[i]->k, own[i]->rows};
		rc = gguf_writer_add_tensor(w, name, own[i]->type, 2, ne, own[i]->data, (uint64_t)own[i]->row_bytes * (uint64_t)own[i]->rows);
	}
	const int64_t D = hp->head_dim;
	for (int i = 0; i < 2 && !rc && h->qk_norm[0]; i++) {
		snprintf(name, sizeof name, "blk.%d.%s", l, i ? "attn_k_norm.weight" : "attn_q_norm.weight");
		rc = gguf_writer_add_tensor(w, name, GGUF_T_F32, 1, &D, h->qk_norm[i], (uint64_t)D * 4);
	}
	if (rc) rc = base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
	else rc = dfd < 0 ? gguf_writer_write(w, path, err, errlen) : gguf_writer_write_at(w, dfd, path, err, errlen);
	gguf_writer_free(w);
	return rc;
}

int learn_mtp_save(const learn_mtp *h, const char *path, char *err, size_t errlen) { return save(h, -1, path, err, errlen); }

int learn_mtp_save_at(const learn_mtp *h, int dfd, const char *name, char *err, size_t errlen) { return save(h, dfd, name, err, errlen); }

int learn_mtp_copy(learn_mtp **out, const learn_mtp *h, char *err, size_t errlen) {
	*out = NULL;
	learn_mtp *c = calloc(1, sizeof *c);
	if (!c) return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
	*c = *h;
	c->m1 = c->m2 = c->g = NULL, c->mem = NULL, c->cap = 0;
	c->bias[0] = c->bias[1] = c->bias[2] = c->bias[3] = c->qk_norm[0] = c->qk_norm[1] = NULL;
	const int64_t bn[4] = {h->rows[W_Q], h->rows[W_K], h->rows[W_V], HP(h)->n_embd};
	bool ok = (c->w = dup_vec(h->w, h->off[W_COUNT])) != NULL;
	for (int i = 0; i < 4; i++) ok = ok && (!h->bias[i] || (c->bias[i] = dup_vec(h->bias[i], bn[i])));
	for (int i = 0; i < 2; i++) ok = ok && (!h->qk_norm[i] || (c->qk_norm[i] = dup_vec(h->qk_norm[i], HP(h)->head_dim)));
	if (!ok) {
		learn_mtp_free(c);
		return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory for a copy of the head");
	}
	*out = c;
	return LANES_OK;
}

// ---- the head as a served version ---------------------------------------------------------------
static model_head_f32 head_f32(const learn_mtp *h) {
	return (model_head_f32){
		.eh_proj = W(h, W_EH), .enorm = W(h, W_ENORM), .hnorm = W(h, W_HNORM), .attn_norm = W(h, W_ANORM),
		.ffn_norm = W(h, W_FNORM), .head_norm = W(h, W_HEADNORM), .wq = W(h, W_Q), .wk = W(h, W_K), .wv = W(h, W_V),
		.wo = W(h, W_O), .bq = h->bias[0], .bk = h->bias[1], .bv = h->bias[2], .bo = h->bias[3], .q_norm = h->qk_norm[0],
		.k_norm = h->qk_norm[1], .ffn_gate = W(h, W_GATE), .ffn_up = W(h, W_UP), .ffn_down = W(h, W_DOWN),
	};
}

int learn_mtp_head(const learn_mtp *h, model_head **out, char *err, size_t errlen) {
	const model_head_f32 w = head_f32(h);
	return model_head_new(out, h->m, &w, err, errlen);
}

uint64_t learn_mtp_bytes(const learn_mtp *h) { return (uint64_t)h->off[W_COUNT] * 4 * 4; }

// ---- a head learned in priced pieces (learning while serving) -------------------------------------
// A step: the trunk runs over its examples piece by piece (each position's state and likeliest
// tokens kept), then the head's forward and backward run over views of piece + 2 tokens of each
// (attention within a view, as a view's rows are the served head's after a fresh start), the
// gradient summed in a fixed order; the commit applies AdamW and makes a new version.
struct learn_mtp_job {
	learn_mtp *h;
	learn_opts o;
	double tok_macs, head_macs;  // one token through the trunk; one head row forward (eh_proj, block, output head)
	int32_t **q;                 // queued examples' tokens (q_n[i] each)
	int64_t *q_n, q_len, q_head, q_cap, q_tokens;
	enum learn_state state;
	learn_mtp_seq **seqs;        // the step's
	int32_t n_seq;
	int32_t seq_at;              // the trunk phase: sequence seq_at at position pos_at
	int64_t pos_at;
	bool head;                   // the head phase: sequence seq_at's view from pos_at
	double rows[2], loss[2];
	int64_t hits[2], tokens;
	kv_cache *kv;
	model_ws *ws;                // made for ws_threads at the first piece
	int ws_threads;
	model_row *rw;
	float *lg, *hid;
	bool *want;
	int64_t committed;
};

int learn_mtp_job_new(learn_mtp_job **out, learn_mtp *h, const learn_opts *o, char *err, size_t errlen) {
	*out = NULL;
	if (o->batch < 1 || o->batch > 65536 || o->piece < 1 || o->piece > 4096 || o->max_tokens < 3 || o->max_tokens > (1 << 20) ||
	    !(o->lr >= 0.0f && o->lr <= 10.0f))
		return base_seterr(err, errlen, LANES_EINVAL, "learn: an option is out of range (lr, batch, piece, max tokens)");
	const model_hparams *hp = HP(h);
	learn_mtp_job *j = calloc(1, sizeof *j);
	if (!j) return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
	j->h = h, j->o = *o;
	const double E = hp->n_embd, qd = (double)hp->n_heads * hp->head_dim, kvd = (double)hp->n_kv_heads * hp->head_dim;
	const double lay = 2.0 * E * qd + 2.0 * E * kvd + 3.0 * E * hp->n_ff;
	j->tok_macs = E * hp->n_vocab + hp->n_layers * lay;
	j->head_macs = 2.0 * E * E + lay + E * hp->n_vocab;
	const int64_t P = o->piece, V = hp->n_vocab;
	kv_config c = model_kv_config(h->m, KV_F16S, 1, (int32_t)o->max_tokens, 16);
	j->rw = malloc((size_t)P * sizeof *j->rw), j->want = malloc((size_t)P * sizeof *j->want);
	j->lg = learn_malloc((size_t)(P * V) * 4), j->hid = learn_malloc((size_t)(P * hp->n_embd) * 4);
	int rc = !j->rw || !j->want || !j->lg || !j->hid ? base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory") : LANES_OK;
	if (!rc) rc = kv_new(&j->kv, &c, err, errlen);
	if (rc) {
		learn_mtp_job_free(j);
		return rc;
	}
	memset(j->want, 1, (size_t)P * sizeof *j->want);
	*out = j;
	return LANES_OK;
}

static void step_clear(learn_mtp_job *j) {
	for (int32_t i = 0; i < j->n_seq; i++) learn_mtp_seq_free(j->seqs[i]);
	free(j->seqs);
	j->seqs = NULL, j->n_seq = 0;
	j->state = LEARN_IDLE;
}

void learn_mtp_job_free(learn_mtp_job *j) {
	if (!j) return;
	step_clear(j);
	for (int64_t i = j->q_head; i < j->q_len; i++) free(j->q[i]);
	free(j->q), free(j->q_n);
	kv_free(j->kv);
	model_ws_free(j->ws);
	free(j->rw), free(j->want), free(j->lg), free(j->hid);
	free(j);
}

int learn_mtp_job_add(learn_mtp_job *j, const learn_example *e, char *err, size_t errlen) {
	const int64_t V = HP(j->h)->n_vocab;
	if (e->n < 3 || e->n > j->o.max_tokens)
		return base_seterr(err, errlen, LANES_EINVAL, "learn: an MTP example has 3 to %lld tokens, not %lld", (long long)j->o.max_tokens,
				   (long long)e->n);
	for (int64_t i = 0; i < e->n; i++)
		if (e->ids[i] < 0 || e->ids[i] >= V) return base_seterr(err, errlen, LANES_EINVAL, "learn: token %d is outside the vocabulary", e->ids[i]);
	if (j->q_len == j->q_cap) {
		if (j->q_head) { // the taken front goes first
			memmove(j->q, j->q + j->q_head, (size_t)(j->q_len - j->q_head) * sizeof *j->q);
			memmove(j->q_n, j->q_n + j->q_head, (size_t)(j->q_len - j->q_head) * sizeof *j->q_n);
			j->q_len -= j->q_head, j->q_head = 0;
		}
		if (j->q_len == j->q_cap) {
			const int64_t cap = j->q_cap ? 2 * j->q_cap : 8;
			int32_t **q = realloc(j->q, (size_t)cap * sizeof *q);
			if (q) j->q = q;
			int64_t *qn = q ? realloc(j->q_n, (size_t)cap * sizeof *qn) : NULL;
			if (!qn) return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
			j->q_n = qn, j->q_cap = cap;
		}
	}
	int32_t *ids = malloc((size_t)e->n * sizeof *ids);
	if (!ids) return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
	memcpy(ids, e->ids, (size_t)e->n * sizeof *ids);
	j->q[j->q_len] = ids, j->q_n[j->q_len++] = e->n;
	j->q_tokens += e->n;
	return LANES_OK;
}

int64_t learn_mtp_job_queued(const learn_mtp_job *j) { return j->q_len - j->q_head; }
enum learn_state learn_mtp_job_state(const learn_mtp_job *j) { return j->state; }

uint64_t learn_mtp_job_bytes(const learn_mtp_job *j) {
	const model_hparams *hp = HP(j->h);
	uint64_t b = (uint64_t)j->q_tokens * 4 + (j->ws ? model_ws_size(j->ws) : 0) + (uint64_t)j->o.piece * ((uint64_t)hp->n_vocab + hp->n_embd) * 4;
	for (int32_t i = 0; i < j->n_seq; i++) b += (uint64_t)j->seqs[i]->n * ((uint64_t)hp->n_embd + 2 + 2 * MTP_TOP) * 4;
	return b;
}

// The view of sequence s that the head piece at p covers.
static learn_mtp_seq view_of(const learn_mtp_job *j, const learn_mtp_seq *s, int64_t p) {
	const int64_t E = HP(j->h)->n_embd, n = s->n - p < j->o.piece + 2 ? s->n - p : j->o.piece + 2;
	return (learn_mtp_seq){.n = n, .ids = s->ids + p, .hid = s->hid + p * E, .next = s->next + p, .top = s->top + p * MTP_TOP,
			       .topp = s->topp + p * MTP_TOP};
}

// The price of the piece at (seq_at, pos_at) in tokens through the trunk.
static double piece_cost(const learn_mtp_job *j) {
	const model_hparams *hp = HP(j->h);
	const double qd = (double)hp->n_heads * hp->head_dim;
	if (j->state == LEARN_READY) return 0.0;
	if (j->state == LEARN_IDLE) {
		if (!learn_mtp_job_queued(j)) return 0.0;
		const double n = (double)(j->q_n[j->q_head] < j->o.piece ? j->q_n[j->q_head] : j->o.piece);
		return (n * j->tok_macs + n * (n + 1) * qd * hp->n_layers) / j->tok_macs;
	}
	const learn_mtp_seq *s = j->seqs[j->seq_at];
	if (!j->head) {
		const double n = (double)(s->n - j->pos_at < j->o.piece ? s->n - j->pos_at : j->o.piece), p0 = (double)j->pos_at;
		return (n * j->tok_macs + n * (2.0 * p0 + n + 1) * qd * hp->n_layers) / j->tok_macs;
	}
	const double n = (double)view_of(j, s, j->pos_at).n;
	// two sets of rows, forward and backward (about twice the forward)
	return 3.0 * (2.0 * n * j->head_macs + 2.0 * n * n * qd) / j->tok_macs;
}

double learn_mtp_job_next_cost(const learn_mtp_job *j) { return piece_cost(j); }

// Takes the next batch from the queue into sequences (their trunk states to come).
static int step_begin(learn_mtp_job *j, char *err, size_t errlen) {
	const int64_t E = HP(j->h)->n_embd;
	const int64_t nb = learn_mtp_job_queued(j) < j->o.batch ? learn_mtp_job_queued(j) : j->o.batch;
	j->seqs = calloc((size_t)nb, sizeof *j->seqs);
	if (!j->seqs) return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
	for (int64_t i = 0; i < nb; i++) {
		const int64_t n = j->q_n[j->q_head + i];
		if (!(j->seqs[i] = seq_alloc(n, E))) {
			j->n_seq = (int32_t)i;
			step_clear(j);
			return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory for a step's states");
		}
		memcpy(j->seqs[i]->ids, j->q[j->q_head + i], (size_t)n * 4);
	}
	for (int64_t i = 0; i < nb; i++) j->q_tokens -= j->q_n[j->q_head], free(j->q[j->q_head++]);
	j->n_seq = (int32_t)nb;
	j->seq_at = 0, j->pos_at = 0, j->head = false;
	j->rows[0] = j->rows[1] = j->loss[0] = j->loss[1] = 0.0;
	j->hits[0] = j->hits[1] = 0, j->tokens = 0;
	for (int32_t i = 0; i < j->n_seq; i++) {
		j->tokens += j->seqs[i]->n;
		for (int64_t p = 0; p + 2 < j->seqs[i]->n; p += j->o.piece) {
			const learn_mtp_seq v = view_of(j, j->seqs[i], p);
			j->rows[0] += (double)(v.n - 1), j->rows[1] += (double)(v.n - 2);
		}
	}
	memset(j->h->g, 0, (size_t)j->h->off[W_COUNT] * 4);
	j->state = LEARN_RUNNING;
	return LANES_OK;
}

// Runs the piece at (seq_at, pos_at) and moves on.
static int piece_run(learn_mtp_job *j, base_pool *pool, char *err, size_t errlen) {
	const model_hparams *hp = HP(j->h);
	const int64_t E = hp->n_embd, V = hp->n_vocab;
	learn_mtp_seq *s = j->seqs[j->seq_at];
	if (!j->head) {
		if (!j->pos_at) kv_seq_clear(j->kv, 0);
		const int nth = base_pool_threads(pool);
		if (!j->ws || j->ws_threads < nth) {
			model_ws_free(j->ws);
			j->ws = NULL;
			const int rc = model_ws_new(&j->ws, j->h->m, j->o.piece, nth, 0, err, errlen);
			if (rc) return rc;
			j->ws_threads = nth;
		}
		const int64_t n = s->n - j->pos_at < j->o.piece ? s->n - j->pos_at : j->o.piece;
		for (int64_t r = 0; r < n; r++) j->rw[r] = (model_row){s->ids[j->pos_at + r], (int32_t)(j->pos_at + r), 0, true, NULL};
		const int rc = model_forward_hidden(j->h->m, j->kv, pool, j->ws, j->rw, n, j->lg, j->want, j->hid, err, errlen);
		if (rc) return rc;
		for (int64_t r = 0; r < n; r++) seq_take(s, j->pos_at + r, s->n, j->lg + r * V, j->hid + r * E, V, E, 0.0f, 0);
		j->pos_at += n;
		if (j->pos_at == s->n) j->pos_at = 0, j->seq_at++;
		if (j->seq_at == j->n_seq) j->seq_at = 0, j->head = true;
		return LANES_OK;
	}
	const learn_mtp_seq v = view_of(j, s, j->pos_at);
	acts a;
	const int rc = acts_of(j->h, j->o.piece + 1, &a, err, errlen);
	if (rc) return rc;
	const double scale[2] = {1.0 / j->rows[0], 1.0 / j->rows[1]};
	pass(j->h, pool, &v, &a, scale, j->loss, j->hits);
	j->pos_at += j->o.piece;
	if (j->pos_at + 2 >= s->n) j->pos_at = 0, j->seq_at++;
	if (j->seq_at == j->n_seq) j->state = LEARN_READY;
	return LANES_OK;
}

int learn_mtp_job_run(learn_mtp_job *j, base_pool *pool, double budget, double *spent, char *err, size_t errlen) {
	double used = 0.0;
	if (spent) *spent = 0.0;
	if (j->state == LEARN_READY) return LANES_OK;
	if (j->state == LEARN_IDLE) {
		if (!learn_mtp_job_queued(j) || piece_cost(j) > budget) return LANES_OK;
		const int rc = step_begin(j, err, errlen);
		if (rc) return rc;
	}
	while (j->state == LEARN_RUNNING) {
		const double c = piece_cost(j);
		if (used + c > budget) break;
		const int rc = piece_run(j, pool, err, errlen);
		if (rc) {
			step_clear(j);
			return rc;
		}
		used += c;
	}
	if (spent) *spent = used;
	return LANES_OK;
}

void learn_mtp_job_abort(learn_mtp_job *j) { step_clear(j); }

int learn_mtp_job_commit(learn_mtp_job *j, model_head **version, learn_step_info *info, char *err, size_t errlen) {
	if (version) *version = NULL;
	if (j->state != LEARN_READY) return base_seterr(err, errlen, LANES_EBUSY, "learn: no whole step to commit");
	// the only allocation comes first: past it nothing can fail
	learn_mtp *h = j->h;
	model_head *v = NULL;
	int rc = version ? learn_mtp_head(h, &v, err, errlen) : LANES_OK;
	if (rc) return rc;
	const double norm = adam_update(h, &j->o);
	if (v) {
		const model_head_f32 w = head_f32(h);
		model_head_set(v, &w);
		*version = v;
	}
	j->committed++;
	if (info)
		*info = (learn_step_info){.step = j->committed, .examples = j->n_seq, .tokens = j->tokens, .learned = (int64_t)j->rows[0],
					  .loss = j->loss[0] / j->rows[0] + j->loss[1] / j->rows[1], .grad_norm = norm, .version = h->adam_t};
	step_clear(j);
	return LANES_OK;
}
