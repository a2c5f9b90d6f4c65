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

// y = x . W^T + b over n rows (b NULL: none), the bias added after the product.
static void linear(base_pool *pool, const mweight *w, const float *x, int64_t n, float *y, const float *b) {
	const tensor_mat *tm = &w->tm;
	const int64_t mat = 0;
	tensor_matmuls_opts(pool, 1, &tm, &mat, x, n, &y, NULL);
	for (int64_t r = 0; b && r < n; r++)
		for (int64_t i = 0; i < w->rows; i++) y[r * w->rows + i] += b[i];
}

typedef struct {
	const model *m;
	const float *q, *k, *v; // [n][E]
	float *att;             // [n][E]
	const bert_ent *ord;    // rows by sequence, then position
	const int32_t *span;    // [n_spans + 1] entry of ord where each sequence begins
	int64_t n_spans, E, D, H;
	float scale;
	uint8_t *scratch;       // [nth][per_th]
	size_t per_th;
	size_t kpack, vpack;    // bytes the kernel set packs a head's K and V^T into (0: read in place)
} attn_job;

static uint8_t *align64(void *p) { return (uint8_t *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

// One item (sequence, head) on one thread: S = Q K^T and O = softmax(S) V as two matmuls of
// the model's kernel set over the sequence's own rows (each output one dot product in one
// order), the softmax of each row in position order between them.
static void attn_item(const attn_job *j, int64_t item, uint8_t *scr) {
	const int64_t D = j->D, E = j->E, sp = item / j->H, h = item % j->H;
	const int64_t f = j->span[sp], L = j->span[sp + 1] - f;
	float *qh = (float *)scr, *kh = qh + L * D, *vt = kh + L * D, *sc = vt + L * D, *oh = sc + L * L;
	uint8_t *kp = align64(oh + L * D), *vp = align64(kp + j->kpack), *mm = align64(vp + j->vpack);
	for (int64_t p = 0; p < L; p++) {
		const int64_t r = j->ord[f + p].row;
		memcpy(qh + p * D, j->q + r * E + h * D, (size_t)D * sizeof *qh);
		memcpy(kh + p * D, j->k + r * E + h * D, (size_t)D * sizeof *kh);
		for (int64_t c = 0; c < D; c++) vt[c * L + p] = j->v[r * E + h * D + c];
	}
	const tensor_kernels *ks = j->m->ks;
	tensor_mat km, vm;
	tensor_mat_init(&km, ks, GGUF_T_F32, L, D, 1, kh, j->kpack ? kp : NULL, NULL);
	tensor_matmul_part(&km, 0, qh, D, L, sc, L, 0, L, mm, false);
	for (int64_t i = 0; i < L; i++) {
		float *row = sc + i * L, mx = -INFINITY;
		for (int64_t p = 0; p < L; p++) mx = fmaxf(mx, row[p] *= j->scale);
		double sum = 0;
		for (int64_t p = 0; p < L; p++) sum += row[p] = expf(row[p] - mx);
		for (int64_t p = 0; p < L; p++) row[p] = (float)(row[p] / sum);
	}
	tensor_mat_init(&vm, ks, GGUF_T_F32, D, L, 1, vt, j->vpack ? vp : NULL, NULL);
	tensor_matmul_part(&vm, 0, sc, L, L, oh, D, 0, D, mm, false);
	for (int64_t p = 0; p < L; p++) memcpy(j->att + j->ord[f + p].row * E + h * D, oh + p * D, (size_t)D * sizeof *oh);
}

// Items are split across threads whole.
static void attn_task(void *arg, int ith, int nth) {
	const attn_job *j = arg;
	for (int64_t it = ith; it < j->n_spans * j->H; it += nth) attn_item(j, it, j->scratch + (size_t)ith * j->per_th);
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
	// first[i], len[i]: where entry i's sequence begins in ord and its rows; span: each sequence's first entry
	int32_t *first = malloc((size_t)n * 3 * sizeof *first + sizeof *first), *len = first ? first + n : NULL, *span = len ? len + n : NULL;
	int rc = ord && first ? check(m, kv, rows, n, ord, err, errlen) : base_seterr(err, errlen, LANES_ENOMEM, "forward: out of memory");
	int64_t longest = 0, n_spans = 0;
	for (int64_t i = 0; !rc && i < n; i++) {
		first[i] = ord[i].pos == 0 ? (int32_t)i : first[i - 1];
		if (ord[i].pos == 0) span[n_spans++] = (int32_t)i;
		if (i + 1 == n || ord[i + 1].seq != ord[i].seq) {
			for (int64_t k = first[i]; k <= i; k++) len[k] = (int32_t)(i - first[i] + 1);
			if (i - first[i] + 1 > longest) longest = i - first[i] + 1;
		}
	}
	if (!rc) span[n_spans] = (int32_t)n;
	// x, h, t, q, k, v, att: [n][E] each; u: [n][F]; each thread's attention scratch for the
	// longest sequence: its Q, K, V^T, scores and output, K and V^T packed, the matmuls' own
	const size_t kpack = tensor_pack_bytes(m->ks, GGUF_T_F32, longest, D, 1), vpack = tensor_pack_bytes(m->ks, GGUF_T_F32, D, longest, 1);
	const size_t per_th = ((size_t)(4 * longest * D + longest * longest) * sizeof(float) + kpack + vpack +
			       tensor_matmul_scratch(m->ks, longest, longest > D ? longest : D) + 4 * 64 + 63) & ~(size_t)63;
	float *buf = NULL;
	uint8_t *scr = NULL;
	uint64_t fl = 0;
	if (!rc && (!ck_mul((uint64_t)n, (uint64_t)(7 * E + F), &fl) || fl > SIZE_MAX / sizeof(float) || per_th > SIZE_MAX / (size_t)nth ||
		    !(buf = malloc((size_t)fl * sizeof *buf)) || !(scr = aligned_alloc(64, per_th * (size_t)nth))))
		rc = base_seterr(err, errlen, LANES_ENOMEM, "forward: out of memory for %lld encoder rows", (long long)n);
	if (!rc) rc = grow(kv, ord, len, n, err, errlen);
	if (rc) {
		free(ord), free(first), free(buf), free(scr);
		return rc;
	}
	float *x = buf, *h = x + n * E, *t = h + n * E, *q = t + n * E, *k = q + n * E, *v = k + n * E, *att = v + n * E;
	float *u = att + n * E;
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
		attn_job aj = {.m = m, .q = q, .k = k, .v = v, .att = att, .ord = ord, .span = span, .n_spans = n_spans, .E = E, .D = D,
			       .H = H, .scale = hp->attn_scale, .scratch = scr, .per_th = per_th, .kpack = kpack, .vpack = vpack};
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
	free(ord), free(first), free(buf), free(scr);
	return LANES_OK;
}
