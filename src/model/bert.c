// model/bert: the encoder's pass. Every sequence of a batch is whole in it and attends to
// all its own rows (no causal mask): token, position and type embeddings through a LayerNorm,
// then post-LayerNorm blocks (attention, GELU FFN), and the classifier's dense layer with tanh
// on a sequence's first row when the file has one. Each value reduces in one fixed order over
// its own sequence's rows only, so a row's state is the same alone or among any others.
#include "model/model_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	int32_t seq, pos, row;
} bert_ent;

static int cmp_ent(const void *a, const void *b) {
	const bert_ent *x = a, *y = b;
	if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
	return (x->pos > y->pos) - (x->pos < y->pos);
}

// LayerNorm of n values: mean and variance in double, in index order.
static void layer_norm(const float *x, const float *w, const float *b, int64_t n, float eps, float *y) {
	double mean = 0, var = 0;
	for (int64_t i = 0; i < n; i++) mean += x[i];
	mean /= (double)n;
	for (int64_t i = 0; i < n; i++) var += ((double)x[i] - mean) * ((double)x[i] - mean);
	const double inv = 1.0 / sqrt(var / (double)n + (double)eps);
	for (int64_t i = 0; i < n; i++) y[i] = (float)(((double)x[i] - mean) * inv * w[i] + b[i]);
}

// GELU in its erf form, as BERT was trained with.
static float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2)); }

// a . b over n values in 16 running sums (value c into sum c % 16), then a fixed tree: one
// order for every call, and lanes a compiler can keep in vectors.
static float dot16(const float *restrict a, const float *restrict b, int64_t n) {
	float acc[16] = {0};
	int64_t c = 0;
	for (; c + 16 <= n; c += 16)
		for (int l = 0; l < 16; l++) acc[l] += a[c + l] * b[c + l];
	for (; c < n; c++) acc[c & 15] += a[c] * b[c];
	for (int w = 8; w; w >>= 1)
		for (int l = 0; l < w; l++) acc[l] += acc[l + w];
	return acc[0];
}

// o += w * v over n values.
static void axpy(float *restrict o, float w, const float *restrict v, int64_t n) {
	for (int64_t c = 0; c < n; c++) o[c] += w * v[c];
}

// y = x . W^T + b over n rows (add: y += it first; the bias is added after the product).
static void linear(base_pool *pool, const mweight *w, const float *x, int64_t n, float *y, const float *b) {
	const tensor_mat *tm = &w->tm;
	const int64_t mat = 0;
	tensor_matmuls_opts(pool, 1, &tm, &mat, x, n, &y, NULL);
	for (int64_t r = 0; b && r < n; r++)
		for (int64_t i = 0; i < w->rows; i++) y[r * w->rows + i] += b[i];
}

typedef struct {
	const float *q, *k, *v; // [n][E]
	float *att;             // [n][E]
	const bert_ent *ord;    // rows by sequence, then position
	const int32_t *first;   // [n] entry of ord where each entry's sequence begins
	const int32_t *len;     // [n] its sequence's rows
	int64_t n, E, D, H;
	float scale;
	float *scores;          // [nth][longest sequence]
	int64_t per_th;
} attn_job;

// Item (entry i, head h): softmax over the sequence's rows in position order, then the
// weighted sum of V in that order. Items are split across threads whole.
static void attn_task(void *arg, int ith, int nth) {
	const attn_job *j = arg;
	float *sc = j->scores + (size_t)ith * (size_t)j->per_th;
	for (int64_t it = ith; it < j->n * j->H; it += nth) {
		const int64_t i = it / j->H, h = it % j->H, D = j->D;
		const int64_t r = j->ord[i].row, f = j->first[i], L = j->len[i];
		const float *qr = j->q + r * j->E + h * D;
		float mx = -INFINITY;
		for (int64_t p = 0; p < L; p++) {
			sc[p] = dot16(qr, j->k + (int64_t)j->ord[f + p].row * j->E + h * D, D) * j->scale;
			if (sc[p] > mx) mx = sc[p];
		}
		double sum = 0;
		for (int64_t p = 0; p < L; p++) {
			sc[p] = expf(sc[p] - mx);
			sum += sc[p];
		}
		float *o = j->att + r * j->E + h * D;
		memset(o, 0, (size_t)D * sizeof *o);
		for (int64_t p = 0; p < L; p++) {
			axpy(o, (float)(sc[p] / sum), j->v + (int64_t)j->ord[f + p].row * j->E + h * D, D);
		}
	}
}

// The rows checked: whole sequences, each empty in kv before the call, positions 0..len-1,
// within the learned positions; no logits, no adapters. ord gets them by sequence and position.
static int check(const model *m, kv_cache *kv, const model_row *rows, int64_t n, bert_ent *ord, char *err, size_t errlen) {
	const model_hparams *hp = &m->hp;
	const kv_config *c = kv_config_of(kv);
	if (c->n_layers != model_kv_layers(hp) || c->kv_dim != hp->n_embd)
		return base_seterr(err, errlen, LANES_EINVAL, "forward: the kv cache does not fit this model");
	for (int64_t i = 0; i < n; i++) {
		const model_row *r = &rows[i];
		if (r->token < 0 || r->token >= hp->n_vocab)
			return base_seterr(err, errlen, LANES_EINVAL, "forward: row %lld: token %d is outside the vocabulary (%d)",
					   (long long)i, r->token, hp->n_vocab);
		if (r->seq < 0 || r->seq >= c->n_seqs)
			return base_seterr(err, errlen, LANES_EINVAL, "forward: row %lld: sequence %d is not a kv slot", (long long)i, r->seq);
		if (r->pos < 0 || r->pos >= hp->n_ctx_train)
			return base_seterr(err, errlen, LANES_EINVAL, "forward: row %lld: position %d is past the encoder's %d positions",
					   (long long)i, r->pos, hp->n_ctx_train);
		if (r->logits || (r->lora && r->lora->n))
			return base_seterr(err, errlen, LANES_EINVAL, "forward: row %lld: an encoder gives hidden states only: no logits, no adapters",
					   (long long)i);
		if (kv_seq_len(kv, r->seq))
			return base_seterr(err, errlen, LANES_EINVAL, "forward: sequence %d: an encoder's sequence runs whole in one pass", r->seq);
		ord[i] = (bert_ent){r->seq, r->pos, (int32_t)i};
	}
	qsort(ord, (size_t)n, sizeof *ord, cmp_ent);
	for (int64_t i = 0; i < n; i++) {
		const int32_t want = i > 0 && ord[i - 1].seq == ord[i].seq ? ord[i - 1].pos + 1 : 0;
		if (ord[i].pos != want)
			return base_seterr(err, errlen, LANES_EINVAL, "forward: sequence %d: position %d given where %d comes next", ord[i].seq,
					   ord[i].pos, want);
	}
	return LANES_OK;
}

// Every sequence grown to its rows' count, all or none.
static int grow(kv_cache *kv, const bert_ent *ord, const int32_t *len, int64_t n, char *err, size_t errlen) {
	int64_t need = 0;
	for (int64_t i = 0; i < n; i++)
		if (ord[i].pos == 0) need += kv_pages_for(kv, len[i]);
	if (need > (int64_t)kv_pages_free(kv) + kv_pages_cached(kv))
		return base_seterr(err, errlen, LANES_ELIMIT, "forward: the kv cache needs %lld more pages, %d are free", (long long)need,
				   kv_pages_free(kv) + kv_pages_cached(kv));
	for (int64_t i = 0; i < n; i++) {
		if (ord[i].pos || !kv_seq_grow(kv, ord[i].seq, len[i])) continue;
		for (int64_t k = 0; k < i; k++)
			if (ord[k].pos == 0) kv_seq_clear(kv, ord[k].seq);
		return base_seterr(err, errlen, LANES_ENOMEM, "forward: cannot grow sequence %d", ord[i].seq);
	}
	return LANES_OK;
}

int model_bert_forward(const model *m, kv_cache *kv, base_pool *pool, const model_row *rows, int64_t n, const bool *want,
		       float *hidden, char *err, size_t errlen) {
	const model_hparams *hp = &m->hp;
	const int64_t E = hp->n_embd, F = hp->n_ff, D = hp->head_dim, H = hp->n_heads;
	const int nth = base_pool_threads(pool);
	bert_ent *ord = malloc((size_t)n * sizeof *ord);
	int32_t *first = malloc((size_t)n * 2 * sizeof *first), *len = first ? first + n : NULL;
	int rc = ord && first ? check(m, kv, rows, n, ord, err, errlen) : base_seterr(err, errlen, LANES_ENOMEM, "forward: out of memory");
	int64_t longest = 0;
	for (int64_t i = 0; !rc && i < n; i++) {
		first[i] = ord[i].pos == 0 ? (int32_t)i : first[i - 1];
		if (i + 1 == n || ord[i + 1].seq != ord[i].seq) {
			for (int64_t k = first[i]; k <= i; k++) len[k] = (int32_t)(i - first[i] + 1);
			if (i - first[i] + 1 > longest) longest = i - first[i] + 1;
		}
	}
	// x, h, t, q, k, v, att: [n][E] each; u: [n][F]; scores: [nth][longest]
	float *buf = NULL;
	uint64_t fl = 0;
	if (!rc && (!ck_mul((uint64_t)n, (uint64_t)(7 * E + F), &fl) || !ck_add(fl, (uint64_t)nth * (uint64_t)longest, &fl) ||
		    fl > SIZE_MAX / sizeof(float) || !(buf = malloc((size_t)fl * sizeof *buf))))
		rc = base_seterr(err, errlen, LANES_ENOMEM, "forward: out of memory for %lld encoder rows", (long long)n);
	if (!rc) rc = grow(kv, ord, len, n, err, errlen);
	if (rc) {
		free(ord), free(first), free(buf);
		return rc;
	}
	float *x = buf, *h = x + n * E, *t = h + n * E, *q = t + n * E, *k = q + n * E, *v = k + n * E, *att = v + n * E;
	float *u = att + n * E, *scores = u + n * F;
	const tensor_traits *et = tensor_traits_of(m->tok_embd.type);
	// token type 1 from the row after the sequence's first separator, where the file has two types
	for (int64_t i = 0, sep_at = INT32_MAX; i < n; i++) {
		const model_row *r = &rows[ord[i].row];
		if (ord[i].pos == 0) sep_at = INT32_MAX;
		const int type = m->type_embd && hp->n_types > 1 && r->pos > sep_at ? 1 : 0;
		if (r->token == hp->type_sep && sep_at == INT32_MAX) sep_at = r->pos;
		float *e = h + (int64_t)ord[i].row * E;
		et->to_f32((const uint8_t *)m->tok_embd.data + (size_t)r->token * m->tok_embd.row_bytes, e, E);
		for (int64_t c = 0; c < E; c++) {
			e[c] += m->pos_embd[(int64_t)r->pos * E + c];
			if (m->type_embd) e[c] += m->type_embd[type * E + c];
		}
	}
	for (int64_t r = 0; r < n; r++) layer_norm(h + r * E, m->embd_norm, m->embd_norm_b, E, hp->norm_eps, x + r * E);
	for (int l = 0; l < hp->n_layers; l++) {
		const mlayer *y = &m->layers[l];
		const tensor_mat *tm[3] = {&y->wq.tm, &y->wk.tm, &y->wv.tm};
		const int64_t mats[3] = {0, 0, 0};
		float *const ys[3] = {q, k, v};
		tensor_matmuls_opts(pool, 3, tm, mats, x, n, ys, NULL);
		for (int64_t r = 0; r < n; r++)
			for (int64_t c = 0; c < E; c++) {
				q[r * E + c] += y->bq[c];
				k[r * E + c] += y->bk[c];
				v[r * E + c] += y->bv[c];
			}
		attn_job aj = {.q = q, .k = k, .v = v, .att = att, .ord = ord, .first = first, .len = len, .n = n, .E = E, .D = D,
			       .H = H, .scale = hp->attn_scale, .scores = scores, .per_th = longest};
		base_pool_run(pool, attn_task, &aj);
		linear(pool, &y->wo, att, n, t, y->bo);
		for (int64_t r = 0; r < n; r++) {
			for (int64_t c = 0; c < E; c++) t[r * E + c] += x[r * E + c];
			layer_norm(t + r * E, y->attn_norm, y->attn_norm_b, E, hp->norm_eps, x + r * E);
		}
		linear(pool, &y->ffn_up, x, n, u, y->b_up);
		for (int64_t i = 0; i < n * F; i++) u[i] = gelu_erf(u[i]);
		linear(pool, &y->ffn_down, u, n, t, y->b_down);
		for (int64_t r = 0; r < n; r++) {
			for (int64_t c = 0; c < E; c++) t[r * E + c] += x[r * E + c];
			layer_norm(t + r * E, y->ffn_norm, y->ffn_norm_b, E, hp->norm_eps, x + r * E);
		}
	}
	// the classifier's input for the first rows that are wanted, gathered in batch order
	int64_t nc = 0;
	for (int64_t r = 0; r < n && hidden && want; r++)
		if (want[r] && hp->cls_head && rows[r].pos == 0) memcpy(h + nc++ * E, x + r * E, (size_t)E * sizeof *h);
	if (nc) {
		linear(pool, &m->cls, h, nc, t, m->cls_b);
		for (int64_t i = 0; i < nc * E; i++) t[i] = tanhf(t[i]);
	}
	for (int64_t r = 0, o = 0, ci = 0; r < n && hidden; r++) {
		if (!want || !want[r]) continue;
		const float *src = hp->cls_head && rows[r].pos == 0 ? t + ci++ * E : x + r * E;
		memcpy(hidden + o++ * E, src, (size_t)E * sizeof *hidden);
	}
	free(ord), free(first), free(buf);
	return LANES_OK;
}
