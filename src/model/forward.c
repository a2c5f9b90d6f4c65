// model/forward: forward(batch) — embeddings, attention over the paged KV cache, dense or
// MoE SwiGLU FFN (GELU for Gemma, with its post norms, soft caps and local layers), output
// head — in a workspace sized once for the most rows a caller runs.
// Rows are independent: every kernel reduces per output in one fixed order, and the K/V a
// query reads are the cache's stored values wherever they came from.
#include "model/model_int.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	float *x;      // [n][E] residual stream
	float *h;      // [n][E] normed input of a block
	float *t;      // [n][E] block output
	float *q;      // [n][qd]
	float *k, *v;  // [n][kvd]
	float *att;    // [n][qd]
	float *g, *u;  // [n][F] FFN gate and up (dense, expert or shared)
	float *rl;     // [n][n_exp] router logits
	float *rw;     // [n][n_used] routing weights
	float *xg;     // [n][E] rows gathered for one expert
	float *ec;     // [n][2E] the MTP head's input: the normed embedding, then the normed hidden state
	float *ys;     // [n][n_used][E] expert outputs per slot
	float *sg;     // [n] shared expert gate
	float *scores; // [nth][attention scratch]
	int32_t *ids;  // [n][n_used] chosen experts
	int32_t *sel;  // [n] rows of one expert
	int32_t *slot; // [n] their slots
	int32_t *aord; // [n] the rows by sequence and position: the attention's blocks in turn
	int32_t *anpos; // [n] positions each of them sees, in that order
	int32_t *ablk; // [n + 1] first entry of aord of each block
	int64_t nblk;  // attention blocks
	int32_t *sspan; // [n + 1] first entry of aord of each sequence's run (recurrent layers)
	int64_t nspan; // sequences in the pass
	float *qg;     // [n][2 qd] gated attention: each head's query, then its gate
	float *ag;     // [n][qd] the gates
	float *lin;    // [n][C + VD] a recurrent layer's ssm_in (older files), before it is split
	float *lq;     // [n][C] its queries, keys and values before the convolution
	float *lz;     // [n][VD] its output gate
	float *lba;    // [n][2 Hv] beta and alpha
	float *lo;     // [n][VD] its output, normed and gated
	float *lsc;    // [nth][2 Dk + VD / Hk] each thread's convolved q, k and v of one key head
	double *cs;    // [n][tables][n_rot] rope tables (a second for gemma3's local layers)
	void *mmx;     // the matmuls' prepared activations
	size_t mmx_bytes;
	struct lora_pass *lp; // the rows' adapters; NULL when no row has one
	model_routes *routes; // where the routers' choices are kept (NULL: nowhere)
} scratch;

// Carves a zero-initialized block into fields; all sizes overflow-checked.
typedef struct {
	uint64_t off;
	bool bad;
} layout;

static uint64_t take(layout *L, uint64_t count, uint64_t elem) {
	uint64_t b, at = L->off;
	if (!ck_mul(count, elem, &b) || !ck_add(b, 63, &b) || !ck_add(L->off, b & ~(uint64_t)63, &L->off)) L->bad = true;
	return at;
}

// ---- adapters: each row's low-rank terms on top of the shared base matmul ----------------
// The rows of one adapter form a group. The terms of the matrices that share an input (q, k
// and v; gate and up) go together: first x . A^T for each matrix, group and piece of
// LORA_CHUNK rows, scaled per row, then t . B^T added to the rows' outputs. When each row has
// one adapter at most they ride on the base matmul's pool job: x . A^T once its input rows are
// made, and t . B^T over the outputs a thread has just written, while they are in its cache;
// else they take a job of their own after it, in pieces of LORA_OUT outputs. Each weight is
// read once per pass. The kernels reduce each row and each output on its own, so a row's terms
// do not depend on which rows share its group, its piece or its thread.
#define LORA_CHUNK 32
#define LORA_KINDS 3
#define LORA_OUT 256

typedef struct lora_pass {
	base_pool *pool;
	int nth;
	const model_row *rows;
	int64_t n;
	int32_t slots;   // the most adapters one row has
	size_t per_th;   // floats of scratch per thread
	float *f;        // [nth][per_th]: rows gathered for one piece, t . B^T, a quantized input
	float *t;        // [LORA_KINDS][n][rank]: x . A^T of each matrix, rows in the order of sel
	int64_t wide, rank, out_w; // the scratch's widest input, largest rank and widest output
	int32_t *sel;    // [n] rows grouped by adapter
	int32_t *ridx;   // [n] the row of each output-head input
	int32_t *group;  // [n + 1] first entry of sel of each group
	const model_lora **group_lora; // [n] the adapter of each group
	uint8_t *done;   // [n]
} lora_pass;

typedef struct {
	lora_pass *lp;
	int l, slot, nk;
	int kind[LORA_KINDS];
	float *y[LORA_KINDS];
	int64_t n_out[LORA_KINDS];
	const float *x;
	int64_t n_in, ng;
	const int32_t *ridx;
	int64_t chunks;            // pieces of LORA_CHUNK rows over all groups
	int64_t na, nb;            // items of the two phases
	int64_t b_first[LORA_KINDS + 1]; // first B item of each matrix
	atomic_llong next_a, done_a, next_b;
} lora_job;

// Piece c of all groups: its group, first entry of sel and row count.
static void lora_piece(const lora_job *j, int64_t c, int64_t *g, int64_t *c0, int64_t *cnt) {
	const int32_t *gs = j->lp->group;
	for (int64_t k = 0; k < j->ng; k++) {
		const int64_t pieces = (gs[k + 1] - gs[k] + LORA_CHUNK - 1) / LORA_CHUNK;
		if (c < pieces) {
			*g = k;
			*c0 = gs[k] + c * LORA_CHUNK;
			*cnt = gs[k + 1] - *c0 < LORA_CHUNK ? gs[k + 1] - *c0 : LORA_CHUNK;
			return;
		}
		c -= pieces;
	}
	LANES_ASSERT(0);
}

// The step between the rows of entries [c0, c0 + c) of sel when it is the same throughout (then
// they are read and written in place, as a matrix of that row stride), else 0.
static int64_t lora_step(const lora_pass *lp, int64_t c0, int64_t c) {
	const int64_t step = c > 1 ? lp->sel[c0 + 1] - lp->sel[c0] : 1;
	for (int64_t q = 2; q < c && step > 0; q++)
		if (lp->sel[c0 + q] != lp->sel[c0] + q * step) return 0;
	return step > 0 ? step : 0;
}

// The thread's scratch: rows gathered, t . B^T of rows apart in y, a quantized input.
static float *lora_scratch(const lora_pass *lp, int ith, float **u, void **act) {
	float *xg = lp->f + (size_t)ith * lp->per_th;
	*u = xg + (size_t)LORA_CHUNK * lp->wide;
	*act = *u + (size_t)LORA_CHUNK * lp->out_w;
	return xg;
}

// x . A^T of every matrix and piece of rows, scaled per row, on each thread until all are
// done (it waits for the others' too). Rows evenly spaced in x are read where they are.
static void lora_a(void *arg, int ith) {
	lora_job *j = arg;
	lora_pass *lp = j->lp;
	float *u;
	void *act;
	float *xg = lora_scratch(lp, ith, &u, &act);
	for (int64_t it; (it = atomic_fetch_add(&j->next_a, 1)) < j->na;) {
		const int k = (int)(it / j->chunks);
		int64_t g, c0, c;
		lora_piece(j, it % j->chunks, &g, &c0, &c);
		const model_lora *a = lp->group_lora[g];
		const lora_pair *p = lora_pair_of(a, j->l, j->kind[k]);
		if (p) {
			const float *xin = j->x + (size_t)lp->sel[c0] * (size_t)j->n_in;
			const int64_t step = lora_step(lp, c0, c);
			if (!step) {
				for (int64_t q = 0; q < c; q++)
					memcpy(xg + q * j->n_in, j->x + (size_t)lp->sel[c0 + q] * (size_t)j->n_in, (size_t)j->n_in * sizeof(float));
				xin = xg;
			}
			float *t = lp->t + ((size_t)k * (size_t)lp->n + (size_t)c0) * (size_t)lp->rank;
			tensor_matmul_part(&p->a, 0, xin, (step ? step : 1) * j->n_in, c, t, lp->rank, 0, p->a.rows, act, false);
			// each row's scale goes on its x . A^T: then B's products add straight into y
			for (int64_t q = 0; q < c; q++) {
				const int64_t r = lp->sel[c0 + q];
				const model_lora_set *o = lp->rows[j->ridx ? j->ridx[r] : r].lora;
				// llama.cpp's scale: the user's times alpha / r, or the user's alone without alpha
				const float us = o->use[j->slot].scale, sc = a->alpha != 0.0f ? us * a->alpha / (float)p->r : us;
				for (int64_t e = 0; e < p->r; e++) t[q * lp->rank + e] *= sc;
			}
		}
		atomic_fetch_add(&j->done_a, 1);
	}
	base_pool_wait(&j->done_a, j->na);
}

// y[e] = y[e] + u[e], four at a time (the same one add each).
static void add_into(float *y, const float *u, int64_t n) {
	typedef float v4 __attribute__((vector_size(16)));
	int64_t e = 0;
	for (; e + 4 <= n; e += 4) {
		v4 a, b;
		memcpy(&a, y + e, sizeof a);
		memcpy(&b, u + e, sizeof b);
		a = a + b;
		memcpy(y + e, &a, sizeof a);
	}
	for (; e < n; e++) y[e] = y[e] + u[e];
}

// t . B^T of piece c of matrix k over outputs [o0, o1), added to its rows' outputs: written
// into y where the rows are evenly spaced, else made apart and then added (the same one add).
static void lora_b(const lora_job *j, int ith, int k, int64_t c, int64_t o0, int64_t o1) {
	lora_pass *lp = j->lp;
	int64_t g, c0, cnt;
	lora_piece(j, c, &g, &c0, &cnt);
	const lora_pair *p = lora_pair_of(lp->group_lora[g], j->l, j->kind[k]);
	if (!p) return;
	float *u;
	void *act;
	lora_scratch(lp, ith, &u, &act);
	const int64_t n_out = j->n_out[k];
	const float *t = lp->t + ((size_t)k * (size_t)lp->n + (size_t)c0) * (size_t)lp->rank;
	const int64_t step = lora_step(lp, c0, cnt);
	if (step) {
		tensor_matmul_part(&p->b, 0, t, lp->rank, cnt, j->y[k] + (size_t)lp->sel[c0] * (size_t)n_out, step * n_out, o0, o1, act,
				   true);
		return;
	}
	tensor_matmul_part(&p->b, 0, t, lp->rank, cnt, u, n_out, o0, o1, act, false);
	for (int64_t q = 0; q < cnt; q++)
		add_into(j->y[k] + (size_t)lp->sel[c0 + q] * (size_t)n_out + o0, u + q * n_out + o0, o1 - o0);
}

// The terms alone, in a pass of their own: x . A^T, then t . B^T in pieces of LORA_OUT outputs.
static void lora_task(void *arg, int ith, int nth) {
	lora_job *j = arg;
	lora_a(j, ith);
	for (int64_t it; (it = atomic_fetch_add(&j->next_b, 1)) < j->nb;) {
		int k = 0;
		while (it >= j->b_first[k + 1]) k++;
		const int64_t n_out = j->n_out[k], outs = (n_out + LORA_OUT - 1) / LORA_OUT, rel = it - j->b_first[k];
		const int64_t o0 = rel % outs * LORA_OUT, o1 = o0 + LORA_OUT < n_out ? o0 + LORA_OUT : n_out;
		lora_b(j, ith, k, rel / outs, o0, o1);
	}
	(void)nth;
}

// The terms riding on the base matmul's pass: after its outputs [o0, o1) of matrix w are written.
static void lora_post(void *arg, int ith, int w, int64_t o0, int64_t o1) {
	const lora_job *j = arg;
	for (int64_t c = 0; c < j->chunks; c++) lora_b(j, ith, w, c, o0, o1);
}

// Slot s's groups for the nk matrices (kinds[i], all reading x of n_in floats a row; ys[i]
// n_outs[i] floats a row) into j: rows in order of their adapter's first row. False when no
// row has a term for them.
static bool lora_plan(lora_pass *lp, int l, int32_t s, int nk, const int *kinds, const float *x, int64_t n_in, int64_t n,
		      const int32_t *ridx, float *const *ys, const int64_t *n_outs, lora_job *j) {
	LANES_ASSERT(nk >= 1 && nk <= LORA_KINDS);
	memset(lp->done, 0, (size_t)n);
	int64_t ns = 0, ng = 0, chunks = 0;
	for (int64_t i = 0; i < n; i++) {
		const model_lora_set *set = lp->rows[ridx ? ridx[i] : i].lora;
		if (lp->done[i] || !set || s >= set->n) continue;
		const model_lora *a = set->use[s].lora;
		const int64_t g0 = ns;
		for (int64_t k = i; k < n; k++) {
			const model_lora_set *o = lp->rows[ridx ? ridx[k] : k].lora;
			if (!lp->done[k] && o && s < o->n && o->use[s].lora == a) lp->sel[ns++] = (int32_t)k, lp->done[k] = 1;
		}
		bool any = false;
		for (int k = 0; k < nk; k++) any |= lora_pair_of(a, l, kinds[k]) != NULL;
		if (!any) {
			ns = g0; // this adapter leaves these weights alone
			continue;
		}
		lp->group_lora[ng] = a;
		lp->group[ng++] = (int32_t)g0;
		chunks += (ns - g0 + LORA_CHUNK - 1) / LORA_CHUNK;
	}
	if (!ng) return false;
	lp->group[ng] = (int32_t)ns;
	*j = (lora_job){.lp = lp, .l = l, .slot = s, .nk = nk, .x = x, .n_in = n_in, .ng = ng, .ridx = ridx, .chunks = chunks,
			.na = nk * chunks};
	for (int k = 0; k < nk; k++) {
		j->kind[k] = kinds[k];
		j->y[k] = ys[k];
		j->n_out[k] = n_outs[k];
		j->b_first[k + 1] = j->b_first[k] + chunks * ((n_outs[k] + LORA_OUT - 1) / LORA_OUT);
	}
	j->nb = j->b_first[nk];
	atomic_init(&j->next_a, 0);
	atomic_init(&j->done_a, 0);
	atomic_init(&j->next_b, 0);
	return true;
}

// For each of the nk matrices: ys[i] (i < n) += scale * B (A x[i]) for each row's adapters in
// its order, in passes of their own; row i of x and y is rows[ridx ? ridx[i] : i]. l < 0: the
// output head.
static void lora_add_kinds(lora_pass *lp, int l, int nk, const int *kinds, const float *x, int64_t n_in, int64_t n,
			   const int32_t *ridx, float *const *ys, const int64_t *n_outs) {
	if (!lp) return;
	for (int32_t s = 0; s < lp->slots; s++) {
		lora_job j;
		if (!lora_plan(lp, l, s, nk, kinds, x, n_in, n, ridx, ys, n_outs, &j)) continue;
		if (lp->pool && lp->nth > 1) base_pool_run(lp->pool, lora_task, &j);
		else lora_task(&j, 0, 1);
	}
}

static void lora_add(lora_pass *lp, int l, int kind, const float *x, int64_t n_in, int64_t n, const int32_t *ridx,
		     float *y, int64_t n_out) {
	lora_add_kinds(lp, l, 1, &kind, x, n_in, n, ridx, &y, &n_out);
}

// The terms of a base matmul over the rows' own input (kinds[i] for its matrix i), planned to
// ride on its pass (*j, true) when each row has one adapter at most; else lora_add_kinds after
// it (false). The base outputs come first either way, then the terms.
static bool lora_fuse(lora_pass *lp, int l, int nk, const int *kinds, const float *x, int64_t n_in, int64_t n,
		      float *const *ys, const int64_t *n_outs, lora_job *j) {
	return lp && lp->slots == 1 && lora_plan(lp, l, 0, nk, kinds, x, n_in, n, NULL, ys, n_outs, j);
}

typedef struct {
	const model *m;
	kv_cache *kv;
	const model_row *rows;
	int64_t n;
	int layer;
	int kvl;           // the layer's place in kv (the MTP head's KV holds its block alone)
	scratch *s;
	size_t att_floats; // scratch floats per thread
	bool fused;
	atomic_llong put_next, put_done; // rows claimed for their norms, RoPE and K/V, and done
	atomic_llong next; // next item to claim
} attn_job;

// Rope tables per row: the local layers' own where their rope differs.
static int64_t rope_tables(const model_hparams *hp) { return hp->rope_swa.n_rot ? 2 : 1; }

// A row's q/k norms (qwen3, gemma3), RoPE, and its K and V into the cache: every row's own values,
// so any thread may do any row.
static void put_row(const attn_job *j, int64_t r) {
	const model *m = j->m;
	const model_hparams *hp = &m->hp;
	const mlayer *ly = &m->layers[j->layer];
	const int64_t D = hp->head_dim, qd = (int64_t)hp->n_heads * D, kvd = (int64_t)hp->n_kv_heads * D;
	float *q = j->s->q + r * qd, *k = j->s->k + r * kvd;
	if (ly->q_norm) {
		for (int32_t h = 0; h < hp->n_heads; h++) tensor_k_rmsnorm(m->ks, q + h * D, ly->q_norm, D, hp->rms_eps, q + h * D);
		for (int32_t h = 0; h < hp->n_kv_heads; h++) tensor_k_rmsnorm(m->ks, k + h * D, ly->k_norm, D, hp->rms_eps, k + h * D);
	}
	const int local = hp->rope_swa.n_rot && model_layer_window(hp, j->layer) ? 1 : 0;
	const tensor_rope *rp = local ? &hp->rope_swa : &hp->rope;
	const double *cs = j->s->cs + (r * rope_tables(hp) + local) * hp->rope.n_rot;
	tensor_rope_apply(rp, cs, q, hp->n_heads, (int32_t)D);
	tensor_rope_apply(rp, cs, k, hp->n_kv_heads, (int32_t)D);
	kv_put(j->kv, m->ks, j->kvl, j->rows[r].seq, j->rows[r].pos, k, j->s->v + r * kvd);
}

// First every row's put_row (claimed a row at a time; a query may read any row of its
// sequence, so all are written before any is read), then the attention items: a block of
// rows of one sequence (fused) or one row (unfused), with the group of query heads that
// share a KV head. Threads claim items one at a time, the late blocks of a prompt (which cost
// more) first, and an item's result does not depend on which thread computes it.
static void attn_task(void *arg, int ith, int nth) {
	attn_job *j = arg;
	for (int64_t r; (r = atomic_fetch_add(&j->put_next, 1)) < j->n;) {
		put_row(j, r);
		atomic_fetch_add(&j->put_done, 1);
	}
	base_pool_wait(&j->put_done, j->n);
	const model_hparams *hp = &j->m->hp;
	const int32_t H = hp->n_heads, KH = hp->n_kv_heads, D = hp->head_dim, grp = H / KH;
	const scratch *s = j->s;
	const int64_t items = (j->fused ? s->nblk : j->n) * KH;
	const float scale = hp->attn_scale;
	const int32_t window = model_layer_window(hp, j->layer);
	const float *sinks = j->m->layers[j->layer].sinks;
	float *scores = s->scores + (size_t)ith * j->att_floats;
	const size_t qd = (size_t)H * D;
	for (;;) {
		const int64_t i = atomic_fetch_add(&j->next, 1);
		if (i >= items) break;
		const int32_t g = (int32_t)(i % KH);
		if (j->fused) {
			const int64_t b = s->nblk - 1 - i / KH, e0 = s->ablk[b];
			tensor_kv_view kvv = kv_view(j->kv, j->kvl, j->rows[s->aord[e0]].seq, g * D);
			kvv.window = window, kvv.softcap = hp->attn_softcap, kvv.sinks = sinks ? sinks + g * grp : NULL;
			tensor_k_attn_rows(j->m->ks, s->q + (size_t)g * grp * D, qd, s->aord + e0, (int32_t)(s->ablk[b + 1] - e0), grp, D,
					   scale, &kvv, s->anpos + e0, scores, s->att + (size_t)g * grp * D, qd);
			continue;
		}
		const int64_t r = i / KH;
		const model_row *row = &j->rows[r];
		tensor_kv_view kvv = kv_view(j->kv, j->kvl, row->seq, g * D);
		kvv.window = window, kvv.softcap = hp->attn_softcap, kvv.sinks = sinks ? sinks + g * grp : NULL;
		tensor_k_attn_unfused(j->m->ks, s->q + r * qd + (size_t)g * grp * D, grp, D, scale, &kvv, row->pos + 1, scores,
				      s->att + r * qd + (size_t)g * grp * D);
	}
	(void)nth;
}

static void add_bias(float *y, const float *b, int64_t n, int64_t width) {
	if (!b) return;
	for (int64_t r = 0; r < n; r++)
		for (int64_t i = 0; i < width; i++) y[r * width + i] += b[i];
}

// Row r of a matmul's input made as it is prepared, on the pool's threads: the RMSNorm of row
// ridx[r] (or r) of x into h, or SwiGLU of g and u into g. Each row is computed exactly as
// the whole-batch loops computed it, so this only moves where the work runs.
typedef struct {
	const model *m;
	const float *x, *w; // rows of width, and the norm's weights
	float *h;
	const int32_t *ridx;
	float *u;           // SwiGLU's up rows (g is h)
	const float *bg, *bu; // biases of the gate and up rows, added before the GLU (gpt-oss's experts), or NULL
	int64_t width;
} row_maker;

static void norm_row(void *arg, int64_t r) {
	const row_maker *a = arg;
	const int64_t src = a->ridx ? a->ridx[r] : r;
	tensor_k_rmsnorm(a->m->ks, a->x + src * a->width, a->w, a->width, a->m->hp.rms_eps, a->h + r * a->width);
}

static void glu_row(void *arg, int64_t r) {
	const row_maker *a = arg;
	float *g = a->h + r * a->width, *u = a->u + r * a->width;
	if (a->bg) add_bias(g, a->bg, 1, a->width);
	if (a->bu) add_bias(u, a->bu, 1, a->width);
	if (a->m->hp.oai) tensor_k_swiglu_oai(a->m->ks, g, u, g, a->width);
	else if (a->m->hp.geglu) tensor_k_geglu(a->m->ks, g, u, g, a->width);
	else tensor_k_swiglu(a->m->ks, g, u, g, a->width);
}

// Gemma 2: x += RMSNorm(t) with a block's post norm, row by row.
static void post_norm_add(const model *m, const float *w, const float *t, float *x, float *h, int64_t n) {
	const int64_t E = m->hp.n_embd;
	for (int64_t r = 0; r < n; r++) {
		tensor_k_rmsnorm(m->ks, t + r * E, w, E, m->hp.rms_eps, h);
		for (int64_t i = 0; i < E; i++) x[r * E + i] += h[i];
	}
}

// y = x . W^T of matrix `mat` (add: y += it), its input's rows made by mk (NULL: x is ready).
// lj: adapter terms that ride on the pass (NULL: none).
static void mm(base_pool *pool, scratch *s, const mweight *w, int64_t mat, const float *x, int64_t n, float *y,
	       void (*make)(void *, int64_t), const row_maker *mk, bool add, lora_job *lj) {
	const tensor_mat *tm = &w->tm;
	const tensor_mm_opts o = {.make_row = make, .arg = (void *)mk, .add = add, .scratch = s->mmx, .scratch_bytes = s->mmx_bytes,
				  .pre = lj ? lora_a : NULL, .post = lj ? lora_post : NULL, .hook_arg = lj};
	tensor_matmuls_opts(pool, 1, &tm, &mat, x, n, &y, &o);
}

// Several matrices over the same input in one pass (the input is made and prepared once).
static void mm_multi(base_pool *pool, scratch *s, int nw, const mweight *const *w, int64_t mat, const float *x, int64_t n,
		     float *const *y, void (*make)(void *, int64_t), const row_maker *mk, lora_job *lj) {
	const tensor_mat *tm[4];
	const int64_t mats[4] = {mat, mat, mat, mat};
	for (int i = 0; i < nw; i++) tm[i] = &w[i]->tm;
	const tensor_mm_opts o = {.make_row = make, .arg = (void *)mk, .scratch = s->mmx, .scratch_bytes = s->mmx_bytes,
				  .pre = lj ? lora_a : NULL, .post = lj ? lora_post : NULL, .hook_arg = lj};
	tensor_matmuls_opts(pool, nw, tm, mats, x, n, y, &o);
}

// SwiGLU FFN of n rows x (width E) through gate/up/down matrix `mat` of the three stacks,
// into y (add: y += the FFN's output, the residual add done as the outputs are written).
// norm: x's rows are made by it as gate/up read them. lp: the dense FFN of layer l takes the
// rows' adapters (NULL for experts). bg, bu: biases of the gate's and up's outputs (NULL: none).
static void ffn(const model *m, base_pool *pool, scratch *s, const mweight *gate, const mweight *up, const mweight *down,
		int64_t mat, const float *x, int64_t n, float *g, float *u, float *y, bool add, const row_maker *norm,
		lora_pass *lp, int l, const float *bg, const float *bu) {
	const mweight *gu[2] = {gate, up};
	float *const out[2] = {g, u};
	const int gu_kinds[2] = {LK_GATE, LK_UP}, down_kind = LK_DOWN;
	const int64_t gu_w[2] = {gate->rows, up->rows};
	lora_job lj;
	bool fuse = lora_fuse(lp, l, 2, gu_kinds, x, gate->k, n, out, gu_w, &lj);
	mm_multi(pool, s, 2, gu, mat, x, n, out, norm ? norm_row : NULL, norm, fuse ? &lj : NULL);
	if (!fuse) lora_add_kinds(lp, l, 2, gu_kinds, x, gate->k, n, NULL, out, gu_w);
	const row_maker glu = {.m = m, .h = g, .u = u, .bg = bg, .bu = bu, .width = gate->rows};
	fuse = lora_fuse(lp, l, 1, &down_kind, g, down->k, n, &y, &down->rows, &lj);
	mm(pool, s, down, mat, g, n, y, glu_row, &glu, add, fuse ? &lj : NULL);
	if (!fuse) lora_add(lp, l, LK_DOWN, g, down->k, n, NULL, y, down->rows);
}

static void moe(const model *m, const mlayer *ly, base_pool *pool, int64_t n, scratch *s) {
	const model_hparams *hp = &m->hp;
	const int64_t E = hp->n_embd, X = hp->n_experts, K = hp->n_experts_used;
	mm(pool, s, &ly->gate_inp, 0, s->h, n, s->rl, NULL, NULL, false, NULL);
	add_bias(s->rl, ly->gate_inp_b, n, X);
	for (int64_t r = 0; r < n; r++)
		tensor_moe_route(s->rl + r * X, (int32_t)X, (int32_t)K, hp->moe_norm, s->ids + r * K, s->rw + r * K);
	if (s->routes) model_routes_put(s->routes, (int32_t)(ly - m->layers), s->ids, s->rw, n);
	for (int64_t e = 0; e < X; e++) {
		int64_t cnt = 0;
		for (int64_t r = 0; r < n; r++)
			for (int64_t k = 0; k < K; k++)
				if (s->ids[r * K + k] == e) {
					s->sel[cnt] = (int32_t)r;
					s->slot[cnt++] = (int32_t)k;
				}
		if (!cnt) continue;
		tensor_gather_rows(s->h, E, s->sel, cnt, E, s->xg);
		const int64_t F = hp->n_ff_exp;
		ffn(m, pool, s, &ly->gate_exps, &ly->up_exps, &ly->down_exps, e, s->xg, cnt, s->g, s->u, s->t, false, NULL, NULL, 0,
		    ly->gate_exps_b ? ly->gate_exps_b + e * F : NULL, ly->up_exps_b ? ly->up_exps_b + e * F : NULL);
		add_bias(s->t, ly->down_exps_b ? ly->down_exps_b + e * E : NULL, cnt, E);
		for (int64_t i = 0; i < cnt; i++)
			memcpy(s->ys + ((size_t)s->sel[i] * K + s->slot[i]) * E, s->t + i * E, (size_t)E * sizeof(float));
	}
	// Each row's experts are summed in slot order (largest weight first).
	for (int64_t r = 0; r < n; r++) {
		float *o = s->t + r * E;
		for (int64_t i = 0; i < E; i++) o[i] = 0.0f;
		for (int64_t k = 0; k < K; k++) {
			const float w = s->rw[r * K + k], *y = s->ys + ((size_t)r * K + k) * E;
			for (int64_t i = 0; i < E; i++) o[i] = o[i] + w * y[i];
		}
	}
	if (!m->shexp) return;
	mm(pool, s, &ly->gate_inp_shexp, 0, s->h, n, s->sg, NULL, NULL, false, NULL);
	ffn(m, pool, s, &ly->gate_shexp, &ly->up_shexp, &ly->down_shexp, 0, s->h, n, s->g, s->u, s->xg, false, NULL, NULL, 0, NULL,
	    NULL);
	for (int64_t r = 0; r < n; r++) {
		const float gate = (float)(1.0 / (1.0 + exp(-(double)s->sg[r])));
		for (int64_t i = 0; i < E; i++) s->t[r * E + i] += gate * s->xg[r * E + i];
	}
}

// ---- a recurrent (Gated DeltaNet) layer -------------------------------------------------------
// Each sequence's rows run through the recurrence one token at a time in position order, from
// the state its earlier tokens left: the convolution over the last ssm_conv inputs, then per
// value head the decay, the delta rule's update of the [Dv][Dk] state and the read by the
// query. A row's result is then a function of its sequence's tokens alone, however the rows
// came in pieces, batches or threads. Items are a sequence and one key head (its queries,
// keys and the value heads that share them), which touch disjoint parts of the state.
typedef struct {
	const model *m;
	kv_cache *kv;
	const model_row *rows;
	int layer;
	int64_t slot;      // the layer's state within a sequence's
	scratch *s;
	size_t lsc_floats; // scratch floats per thread
	atomic_llong next;
} ssm_job;

static float silu_f(float x) { return x / (1.0f + expf(-x)); }

// ln(1 + e^x) in double; x itself past 20, where the two agree in float
static float softplus_f(float x) { return x > 20.0f ? x : (float)log1p(exp((double)x)); }

// x /= max(|x|, eps), the squares summed in double in order
static void l2norm(float *x, int64_t n, float eps, float scale) {
	double ss = 0;
	for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
	const float inv = 1.0f / fmaxf(sqrtf((float)ss), eps);
	for (int64_t i = 0; i < n; i++) x[i] = x[i] * inv * scale;
}

// The convolution of channels [c0, c0 + cnt) for input row x (SiLU after) into out, and the
// row appended to the window of last inputs (oldest first).
static void ssm_conv(const float *w, int32_t K, int64_t C, float *win, const float *x, int64_t c0, int64_t cnt, float *out) {
	for (int64_t c = c0; c < c0 + cnt; c++) {
		const float *wc = w + c * K;
		float acc = 0.0f;
		for (int32_t t = 0; t < K - 1; t++) acc += wc[t] * win[t * C + c];
		acc += wc[K - 1] * x[c];
		for (int32_t t = 0; t + 1 < K - 1; t++) win[t * C + c] = win[(t + 1) * C + c];
		if (K > 1) win[(K - 2) * C + c] = x[c];
		out[c - c0] = silu_f(acc);
	}
}

// row = row * a + b * x, then its dot product with y: eight running sums (lane i % 8) added in
// one fixed tree, the tail after them; the same operations for every row of every pass.
static float scale_dot(float *row, float a, float b, const float *x, const float *y, int64_t n) {
	typedef float v4 __attribute__((vector_size(16)));
	v4 s0 = {0, 0, 0, 0}, s1 = s0;
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		v4 r0, r1, x0, x1, y0, y1;
		memcpy(&r0, row + i, 16), memcpy(&r1, row + i + 4, 16);
		memcpy(&x0, x + i, 16), memcpy(&x1, x + i + 4, 16);
		memcpy(&y0, y + i, 16), memcpy(&y1, y + i + 4, 16);
		r0 = r0 * a + x0 * b, r1 = r1 * a + x1 * b;
		memcpy(row + i, &r0, 16), memcpy(row + i + 4, &r1, 16);
		s0 = s0 + r0 * y0, s1 = s1 + r1 * y1;
	}
	const v4 s = s0 + s1;
	float t = (s[0] + s[1]) + (s[2] + s[3]);
	for (; i < n; i++) {
		row[i] = row[i] * a + x[i] * b;
		t += row[i] * y[i];
	}
	return t;
}

// Key head g's part of one layer's state (its channels of the convolution's window, its value
// heads' matrices) from st to dst.
static void ssm_copy_part(const model_hparams *hp, const float *st, float *dst, int64_t g) {
	const int64_t Dk = hp->ssm_dk, Dv = hp->ssm_dv, Hk = hp->ssm_k_heads, R = hp->ssm_v_heads / Hk, C = model_ssm_conv_dim(hp);
	const int64_t first[3] = {g * Dk, Hk * Dk + g * Dk, 2 * Hk * Dk + g * R * Dv}, cnt[3] = {Dk, Dk, R * Dv};
	for (int64_t t = 0; t < hp->ssm_conv - 1; t++)
		for (int c = 0; c < 3; c++) memcpy(dst + t * C + first[c], st + t * C + first[c], (size_t)cnt[c] * sizeof(float));
	const int64_t s0 = (int64_t)(hp->ssm_conv - 1) * C + g * R * Dv * Dk;
	memcpy(dst + s0, st + s0, (size_t)(R * Dv * Dk) * sizeof(float));
}

// Sequence run sp's rows, in position order, through key head g's part of the layer.
static void ssm_item(const ssm_job *j, int64_t sp, int32_t g, float *tmp) {
	const model *m = j->m;
	const model_hparams *hp = &m->hp;
	const mlayer *ly = &m->layers[j->layer];
	const scratch *s = j->s;
	const int64_t Dk = hp->ssm_dk, Dv = hp->ssm_dv, Hk = hp->ssm_k_heads, Hv = hp->ssm_v_heads, R = Hv / Hk,
		      C = model_ssm_conv_dim(hp), VD = Hv * Dv;
	const int32_t K = hp->ssm_conv, seq = j->rows[s->aord[s->sspan[sp]]].seq, mark = kv_seq_mark_pos(j->kv, seq);
	int32_t cap[KV_CAPTURES];
	for (int c = 0; c < KV_CAPTURES; c++) cap[c] = kv_seq_capture_pos(j->kv, seq, c);
	float *st = kv_seq_state(j->kv, seq) + j->slot;
	float *win = st, *S = st + (int64_t)(K - 1) * C;
	float *q = tmp, *k = tmp + Dk, *v = tmp + 2 * Dk;
	const float qscale = 1.0f / sqrtf((float)Dk);
	for (int64_t e = s->sspan[sp]; e < s->sspan[sp + 1]; e++) {
		const int64_t r = s->aord[e];
		const float *x = s->lq + r * C, *ba = s->lba + r * 2 * Hv + g * 2 * R;
		ssm_conv(ly->ssm_conv1d, K, C, win, x, g * Dk, Dk, q);
		ssm_conv(ly->ssm_conv1d, K, C, win, x, Hk * Dk + g * Dk, Dk, k);
		ssm_conv(ly->ssm_conv1d, K, C, win, x, 2 * Hk * Dk + g * R * Dv, R * Dv, v);
		l2norm(q, Dk, hp->rms_eps, qscale);
		l2norm(k, Dk, hp->rms_eps, 1.0f);
		for (int64_t hh = 0; hh < R; hh++) {
			const int64_t h = g * R + hh;
			const float beta = 1.0f / (1.0f + expf(-ba[hh])), decay = expf(ly->ssm_a[h] * softplus_f(ba[R + hh] + ly->ssm_dt[h]));
			const float *vh = v + hh * Dv;
			float *Sh = S + h * Dv * Dk, *o = s->lo + r * VD + h * Dv;
			for (int64_t jv = 0; jv < Dv; jv++) {
				float *row = Sh + jv * Dk;
				const float sk = scale_dot(row, decay, 0.0f, k, k, Dk), d = (vh[jv] - sk) * beta;
				o[jv] = scale_dot(row, 1.0f, d, k, q, Dk);
			}
			const float *z = s->lz + r * VD + h * Dv;
			tensor_k_rmsnorm(m->ks, o, ly->ssm_norm, Dv, hp->rms_eps, o);
			for (int64_t jv = 0; jv < Dv; jv++) o[jv] = o[jv] * silu_f(z[jv]);
		}
		// the state after the position the prefix cache asked for, kept as it is now
		for (int c = 0; c < KV_CAPTURES; c++)
			if (j->rows[r].pos + 1 == cap[c]) ssm_copy_part(hp, st, kv_seq_capture_state(j->kv, seq, c) + j->slot, g);
		// the state before a lane's drafts, where a rejection rewinds to
		if (j->rows[r].pos + 1 == mark) ssm_copy_part(hp, st, kv_seq_mark_state(j->kv, seq) + j->slot, g);
	}
}

static void ssm_task(void *arg, int ith, int nth) {
	ssm_job *j = arg;
	const int64_t Hk = j->m->hp.ssm_k_heads, items = j->s->nspan * Hk;
	float *tmp = j->s->lsc + (size_t)ith * j->lsc_floats;
	for (int64_t i; (i = atomic_fetch_add(&j->next, 1)) < items;) ssm_item(j, i / Hk, (int32_t)(i % Hk), tmp);
	(void)nth;
}

static void ssm_block(const model *m, int l, kv_cache *kv, base_pool *pool, const model_row *rows, int64_t n, scratch *s) {
	const model_hparams *hp = &m->hp;
	const mlayer *ly = &m->layers[l];
	const int64_t E = hp->n_embd, Dk = hp->ssm_dk, Dv = hp->ssm_dv, Hk = hp->ssm_k_heads, Hv = hp->ssm_v_heads,
		      R = Hv / Hk, C = model_ssm_conv_dim(hp), VD = Hv * Dv;
	const row_maker an = {.m = m, .x = s->x, .w = ly->attn_norm, .h = s->h, .width = E};
	lora_job lj;
	if (ly->ssm_in.data) {
		const mweight *w[2] = {&ly->ssm_in, &ly->ssm_ba};
		float *const y[2] = {s->lin, s->lba};
		const int kinds[2] = {LK_SSM_IN, LK_SSM_BA};
		const int64_t widths[2] = {C + VD, 2 * Hv};
		const bool fuse = lora_fuse(s->lp, l, 2, kinds, s->h, E, n, y, widths, &lj);
		mm_multi(pool, s, 2, w, 0, s->h, n, y, norm_row, &an, fuse ? &lj : NULL);
		if (!fuse) lora_add_kinds(s->lp, l, 2, kinds, s->h, E, n, NULL, y, widths);
		// per key head q, k, its value heads' v and z: into the flat order the convolution reads
		const int64_t per = 2 * Dk + 2 * R * Dv;
		for (int64_t r = 0; r < n; r++)
			for (int64_t g = 0; g < Hk; g++) {
				const float *src = s->lin + r * (C + VD) + g * per;
				float *lq = s->lq + r * C;
				memcpy(lq + g * Dk, src, (size_t)Dk * sizeof(float));
				memcpy(lq + Hk * Dk + g * Dk, src + Dk, (size_t)Dk * sizeof(float));
				memcpy(lq + 2 * Hk * Dk + g * R * Dv, src + 2 * Dk, (size_t)(R * Dv) * sizeof(float));
				memcpy(s->lz + r * VD + g * R * Dv, src + 2 * Dk + R * Dv, (size_t)(R * Dv) * sizeof(float));
			}
	} else {
		const mweight *w[3] = {&ly->ssm_qkv, &ly->ssm_z, &ly->ssm_ba};
		float *const y[3] = {s->lq, s->lz, s->lba};
		const int kinds[3] = {LK_SSM_QKV, LK_SSM_Z, LK_SSM_BA};
		const int64_t widths[3] = {C, VD, 2 * Hv};
		const bool fuse = lora_fuse(s->lp, l, 3, kinds, s->h, E, n, y, widths, &lj);
		mm_multi(pool, s, 3, w, 0, s->h, n, y, norm_row, &an, fuse ? &lj : NULL);
		if (!fuse) lora_add_kinds(s->lp, l, 3, kinds, s->h, E, n, NULL, y, widths);
	}
	ssm_job j = {.m = m, .kv = kv, .rows = rows, .layer = l, .s = s, .lsc_floats = (size_t)(2 * Dk + R * Dv),
		     .slot = (int64_t)(l - l / hp->full_attn_interval) * model_ssm_layer_floats(hp)};
	atomic_init(&j.next, 0);
	if (pool && s->nspan * Hk > 1) base_pool_run(pool, ssm_task, &j);
	else ssm_task(&j, 0, 1);
	// x += the output as it is written; the adapters' terms follow it
	const int o_kind = LK_SSM_OUT;
	float *const xo = s->x;
	const bool fuse = lora_fuse(s->lp, l, 1, &o_kind, s->lo, VD, n, &xo, &E, &lj);
	mm(pool, s, &ly->ssm_out, 0, s->lo, n, s->x, NULL, NULL, true, fuse ? &lj : NULL);
	if (!fuse) lora_add(s->lp, l, LK_SSM_OUT, s->lo, VD, n, NULL, s->x, E);
}

// One block: every matmul makes its input's rows (RMSNorm, SwiGLU) as it prepares them, the
// residual adds happen as the outputs are written, and RoPE and the K/V writes run in the
// attention's pool job, so no per-row work waits on one thread between hand-offs. Adapter
// terms are added after the residual; an output bias comes first, so its residual waits.
static void layer(const model *m, int l, int kvl, kv_cache *kv, base_pool *pool, const model_row *rows, int64_t n,
		  scratch *s, size_t att_floats, bool fused) {
	const model_hparams *hp = &m->hp;
	const mlayer *ly = &m->layers[l];
	const int64_t E = hp->n_embd, D = hp->head_dim, qd = (int64_t)hp->n_heads * D,
		      kvd = (int64_t)hp->n_kv_heads * D;
	if (model_layer_recurrent(hp, l)) {
		ssm_block(m, l, kv, pool, rows, n, s);
		goto ffn;
	}

	const row_maker attn_norm = {.m = m, .x = s->x, .w = ly->attn_norm, .h = s->h, .width = E};
	const mweight *qkv[3] = {&ly->wq, &ly->wk, &ly->wv};
	// a gated query's rows go apart first, then each head's query and gate are split out
	float *const qkv_out[3] = {hp->attn_gate ? s->qg : s->q, s->k, s->v};
	const int qkv_kinds[3] = {LK_Q, LK_K, LK_V}, o_kind = LK_O;
	const int64_t qkv_w[3] = {hp->attn_gate ? 2 * qd : qd, kvd, kvd};
	lora_job lj;
	bool fuse = lora_fuse(s->lp, l, 3, qkv_kinds, s->h, E, n, qkv_out, qkv_w, &lj);
	mm_multi(pool, s, 3, qkv, 0, s->h, n, qkv_out, norm_row, &attn_norm, fuse ? &lj : NULL);
	if (!fuse) lora_add_kinds(s->lp, l, 3, qkv_kinds, s->h, E, n, NULL, qkv_out, qkv_w);
	for (int64_t r = 0; hp->attn_gate && r < n; r++)
		for (int32_t h = 0; h < hp->n_heads; h++) {
			memcpy(s->q + r * qd + h * D, s->qg + r * 2 * qd + 2 * h * D, (size_t)D * sizeof(float));
			memcpy(s->ag + r * qd + h * D, s->qg + r * 2 * qd + 2 * h * D + D, (size_t)D * sizeof(float));
		}
	add_bias(s->q, ly->bq, n, qd);
	add_bias(s->k, ly->bk, n, kvd);
	add_bias(s->v, ly->bv, n, kvd);
	attn_job aj = {.m = m, .kv = kv, .rows = rows, .n = n, .layer = l, .kvl = kvl, .s = s, .att_floats = att_floats, .fused = fused};
	atomic_init(&aj.put_next, 0);
	atomic_init(&aj.put_done, 0);
	atomic_init(&aj.next, 0);
	if (pool && n * hp->n_kv_heads > 1) base_pool_run(pool, attn_task, &aj);
	else attn_task(&aj, 0, 1);
	for (int64_t i = 0; hp->attn_gate && i < n * qd; i++) s->att[i] = s->att[i] * (1.0f / (1.0f + expf(-s->ag[i])));
	const bool fold = !ly->bo && !ly->attn_post_norm; // x += the output as it is written; the adapters' terms follow it
	float *const o_out = fold ? s->x : s->t;
	fuse = lora_fuse(s->lp, l, 1, &o_kind, s->att, qd, n, &o_out, &E, &lj);
	mm(pool, s, &ly->wo, 0, s->att, n, o_out, NULL, NULL, fold, fuse ? &lj : NULL);
	if (!fuse) lora_add(s->lp, l, LK_O, s->att, qd, n, NULL, o_out, E);
	if (ly->attn_post_norm) {
		add_bias(s->t, ly->bo, n, E);
		post_norm_add(m, ly->attn_post_norm, s->t, s->x, s->h, n);
	} else if (!fold) {
		add_bias(s->t, ly->bo, n, E);
		for (int64_t i = 0; i < n * E; i++) s->x[i] += s->t[i];
	}

ffn:;
	const row_maker ffn_norm = {.m = m, .x = s->x, .w = ly->ffn_norm, .h = s->h, .width = E};
	if (hp->n_experts) {
		for (int64_t r = 0; r < n; r++) norm_row((void *)&ffn_norm, r);
		moe(m, ly, pool, n, s);
		for (int64_t i = 0; i < n * E; i++) s->x[i] += s->t[i];
	} else if (ly->ffn_post_norm) {
		ffn(m, pool, s, &ly->ffn_gate, &ly->ffn_up, &ly->ffn_down, 0, s->h, n, s->g, s->u, s->t, false, &ffn_norm, s->lp, l, NULL,
		    NULL);
		post_norm_add(m, ly->ffn_post_norm, s->t, s->x, s->h, n);
	} else {
		ffn(m, pool, s, &ly->ffn_gate, &ly->ffn_up, &ly->ffn_down, 0, s->h, n, s->g, s->u, s->x, true, &ffn_norm, s->lp, l, NULL,
		    NULL);
	}
}

typedef struct {
	int32_t seq, pos;
} seqpos;

static int cmp_seqpos(const void *a, const void *b) {
	const seqpos *x = a, *y = b;
	if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
	return (x->pos > y->pos) - (x->pos < y->pos);
}

// Checks the rows against the model and kv, then (grow) grows every sequence they extend,
// all or none.
static int check_rows(const model *m, kv_cache *kv, int32_t kv_layers, const model_row *rows, int64_t n, bool grow,
		      int32_t *max_pos, char *err, size_t errlen) {
	const kv_config *c = kv_config_of(kv);
	const model_hparams *hp = &m->hp;
	if (c->n_layers != kv_layers || c->state_floats != model_state_floats(hp) || c->kv_dim != hp->n_kv_heads * hp->head_dim ||
	    (kv_type_get(c->type)->scaled && c->group != hp->head_dim) || kv_row_bytes(kv) == 0)
		return base_seterr(err, errlen, LANES_EINVAL, "forward: the kv cache does not fit this model");
	seqpos *sp = malloc((size_t)n * sizeof *sp);
	if (!sp) return base_seterr(err, errlen, LANES_ENOMEM, "forward: out of memory");
	int rc = LANES_OK;
	*max_pos = 0;
	for (int64_t i = 0; i < n && !rc; i++) {
		const model_row *r = &rows[i];
		if (r->token < 0 || r->token >= hp->n_vocab)
			rc = base_seterr(err, errlen, LANES_EINVAL, "forward: row %lld: token %d is outside the vocabulary (%d)",
					  (long long)i, r->token, hp->n_vocab);
		else if (r->seq < 0 || r->seq >= c->n_seqs)
			rc = base_seterr(err, errlen, LANES_EINVAL, "forward: row %lld: sequence %d is not a kv slot", (long long)i, r->seq);
		else if (r->pos < 0 || r->pos == INT32_MAX)
			rc = base_seterr(err, errlen, LANES_EINVAL, "forward: row %lld: bad position %d", (long long)i, r->pos);
		else if (!kv_seq_state_valid(kv, r->seq))
			rc = base_seterr(err, errlen, LANES_EINVAL,
					 "forward: sequence %d was cut back past its recurrent state: clear it and feed it again", r->seq);
		else if (r->lora && (r->lora->n < 0 || r->lora->n > MODEL_LORA_MAX))
			rc = base_seterr(err, errlen, LANES_EINVAL, "forward: row %lld: %d adapters (at most %d)", (long long)i, r->lora->n,
					  MODEL_LORA_MAX);
		for (int32_t k = 0; !rc && r->lora && k < r->lora->n; k++)
			if (!r->lora->use[k].lora || r->lora->use[k].lora->m != m || !isfinite(r->lora->use[k].scale))
				rc = base_seterr(err, errlen, LANES_EINVAL, "forward: row %lld: adapter %d is %s", (long long)i, k,
						  !r->lora->use[k].lora ? "missing" : r->lora->use[k].lora->m != m ? "loaded for another model"
						  : "given a scale that is not finite");
		sp[i] = (seqpos){r->seq, r->pos};
		if (r->pos + 1 > *max_pos) *max_pos = r->pos + 1;
	}
	if (rc) goto out;
	qsort(sp, (size_t)n, sizeof *sp, cmp_seqpos);
	// Every sequence's rows continue it: len, len+1, ... with no gap or repeat.
	for (int64_t i = 0; i < n; i++) {
		int32_t want = (i > 0 && sp[i - 1].seq == sp[i].seq) ? sp[i - 1].pos + 1 : kv_seq_len(kv, sp[i].seq);
		if (sp[i].pos != want) {
			rc = base_seterr(err, errlen, LANES_EINVAL, "forward: sequence %d: position %d given where %d comes next",
					  sp[i].seq, sp[i].pos, want);
			goto out;
		}
	}
	int64_t need = 0;
	for (int64_t i = 0; i < n; i++)
		if (i + 1 == n || sp[i + 1].seq != sp[i].seq)
			need += kv_pages_for(kv, (int64_t)sp[i].pos + 1) - kv_pages_for(kv, kv_seq_len(kv, sp[i].seq));
	if (!grow) goto out;
	// Pages only the prefix cache holds count as free: growing takes them back.
	if (need > (int64_t)kv_pages_free(kv) + kv_pages_cached(kv)) {
		rc = base_seterr(err, errlen, LANES_ELIMIT, "forward: the kv cache needs %lld more pages, %d are free",
				  (long long)need, kv_pages_free(kv) + kv_pages_cached(kv));
		goto out;
	}
	for (int64_t i = 0; i < n; i++) {
		if (i + 1 < n && sp[i + 1].seq == sp[i].seq) continue;
		if ((rc = kv_seq_grow(kv, sp[i].seq, (int64_t)sp[i].pos + 1))) {
			// Only an allocation failure of a block table gets here: undo what grew.
			for (int64_t j = 0; j < i; j++)
				if (sp[j + 1].seq != sp[j].seq) {
					int64_t first = j;
					while (first > 0 && sp[first - 1].seq == sp[j].seq) first--;
					kv_seq_ungrow(kv, sp[j].seq, sp[first].pos);
				}
			rc = base_seterr(err, errlen, rc, "forward: cannot grow sequence %d", sp[i].seq);
			goto out;
		}
	}
out:
	free(sp);
	return rc;
}

// The fused attention's blocks: the rows in order of sequence and position (insertion: a
// batch comes nearly in that order), cut where the sequence changes or rb rows are reached.
// Which rows share a block changes no row's values, only how often the KV rows are read.
static void attn_blocks(const model_row *rows, int64_t n, int32_t rb, scratch *s) {
	for (int64_t i = 0; i < n; i++) {
		int64_t k = i;
		const model_row *r = &rows[i];
		for (; k > 0; k--) {
			const model_row *p = &rows[s->aord[k - 1]];
			if (p->seq < r->seq || (p->seq == r->seq && p->pos < r->pos)) break;
			s->aord[k] = s->aord[k - 1];
		}
		s->aord[k] = (int32_t)i;
	}
	s->nblk = 0;
	for (int64_t i = 0; i < n; i++) {
		s->anpos[i] = rows[s->aord[i]].pos + 1;
		if (!i || rows[s->aord[i - 1]].seq != rows[s->aord[i]].seq || i - s->ablk[s->nblk - 1] == rb) s->ablk[s->nblk++] = (int32_t)i;
	}
	s->ablk[s->nblk] = (int32_t)n;
	s->nspan = 0;
	for (int64_t i = 0; i < n; i++)
		if (!i || rows[s->aord[i - 1]].seq != rows[s->aord[i]].seq) s->sspan[s->nspan++] = (int32_t)i;
	s->sspan[s->nspan] = (int32_t)n;
}

static atomic_bool attn_unfused; // the caller's choice, model_attn_set_fused

bool model_attn_fused(void) { return !atomic_load(&attn_unfused); }

void model_attn_set_fused(bool fused) { atomic_store(&attn_unfused, !fused); }

// Where the workspace's parts go for n rows on nth threads with att floats of attention
// scratch per thread: three blocks (floats, ints, doubles), all sizes overflow-checked.
typedef struct {
	uint64_t x, h, t, q, k, v, att, g, u, rl, rw, xg, ec, ys, sg, sc, mx, mx_bytes, ids, sel, slot, aord, anpos, ablk, cs;
	uint64_t qg, ag, lin, lq, lz, lba, lo, lsc, sspan;
	layout f, i, d;
} ws_plan;

static bool plan_ws(const model_hparams *hp, uint64_t un, int nth, uint64_t att, ws_plan *p) {
	const uint64_t E = hp->n_embd, D = hp->head_dim, qd = (uint64_t)hp->n_heads * D,
		       kvd = (uint64_t)hp->n_kv_heads * D, X = hp->n_experts, K = hp->n_experts_used;
	uint64_t F = hp->n_ff;
	if (hp->n_ff_exp > (int32_t)F) F = hp->n_ff_exp;
	if (hp->n_ff_shexp > (int32_t)F) F = hp->n_ff_shexp;
	*p = (ws_plan){0};
	layout *L = &p->f;
	p->x = take(L, un, E * 4), p->h = take(L, un, E * 4), p->t = take(L, un, E * 4);
	p->q = take(L, un, qd * 4), p->k = take(L, un, kvd * 4), p->v = take(L, un, kvd * 4);
	p->att = take(L, un, qd * 4), p->g = take(L, un, F * 4), p->u = take(L, un, F * 4);
	p->rl = take(L, un, X * 4), p->rw = take(L, un, K * 4), p->xg = take(L, X ? un : 0, E * 4);
	p->ys = take(L, X ? un * K : 0, E * 4), p->sg = take(L, un, 4), p->sc = take(L, (uint64_t)nth, att * 4);
	const bool rec = hp->full_attn_interval > 0;
	const uint64_t C = rec ? (uint64_t)model_ssm_conv_dim(hp) : 0, VD = rec ? (uint64_t)hp->ssm_v_heads * hp->ssm_dv : 0,
		       HV = rec ? (uint64_t)hp->ssm_v_heads : 0, HK = rec ? (uint64_t)hp->ssm_k_heads : 1;
	p->qg = take(L, hp->attn_gate ? un : 0, 2 * qd * 4), p->ag = take(L, hp->attn_gate ? un : 0, qd * 4);
	p->lin = take(L, un, (C + VD) * 4), p->lq = take(L, un, C * 4), p->lz = take(L, un, VD * 4);
	p->lba = take(L, un, 2 * HV * 4), p->lo = take(L, un, VD * 4);
	p->lsc = take(L, rec ? (uint64_t)nth : 0, (2 * (uint64_t)hp->ssm_dk + VD / HK) * 4);
	p->ec = take(L, hp->n_nextn ? un : 0, 2 * E * 4);
	// the matmuls' prepared activations: the widest input, in blocks of 32 of at most 96 bytes
	uint64_t wide = E > qd ? E : qd;
	if (hp->n_nextn && 2 * E > wide) wide = 2 * E;
	wide = F > wide ? F : wide;
	wide = VD > wide ? VD : wide;
	p->mx_bytes = 0;
	if (!ck_mul(un, (wide + 31) / 32 * 96, &p->mx_bytes) || !ck_add(p->mx_bytes, 64, &p->mx_bytes)) L->bad = true;
	p->mx = take(L, p->mx_bytes, 1);
	p->ids = take(&p->i, un, K * 4), p->sel = take(&p->i, un, 4), p->slot = take(&p->i, un, 4);
	p->aord = take(&p->i, un, 4), p->anpos = take(&p->i, un, 4), p->ablk = take(&p->i, un + 1, 4);
	p->sspan = take(&p->i, un + 1, 4);
	p->cs = take(&p->d, un, (uint64_t)(hp->rope.n_rot * rope_tables(hp)) * 8);
	uint64_t total;
	return !p->f.bad && !p->i.bad && !p->d.bad && ck_add(p->f.off, p->i.off, &total) && ck_add(total, p->d.off, &total) &&
	       total < SIZE_MAX / 2;
}

// Attention scratch floats per thread: the fused tiles, or (unfused) scores over max_pos.
static uint64_t att_floats(const model_hparams *hp, bool fused, int32_t max_pos) {
	const int32_t grp = hp->n_heads / hp->n_kv_heads;
	const uint64_t tiles = (uint64_t)tensor_attn_scratch(grp, hp->head_dim), scores = (uint64_t)grp * (uint64_t)max_pos;
	// an unfused workspace also serves the block types, which always run fused
	return fused || tiles > scores ? tiles : scores;
}

struct model_ws {
	int64_t max_rows;
	int nth;
	int32_t max_pos;  // unfused attention: the longest sequence the scratch holds
	bool fused;
	uint64_t bytes;
	char *fb, *ib, *db;
	void *lora_buf;   // the adapters' scratch, grown at the first pass that has adapters
	size_t lora_bytes;
	model_routes *routes; // the caller's: where passes keep the routers' choices
};

uint64_t model_ws_bytes(const model_hparams *hp, int64_t max_rows, int nth, int32_t max_pos) {
	ws_plan p;
	if (max_rows < 1 || nth < 1 || !plan_ws(hp, (uint64_t)max_rows, nth, att_floats(hp, max_pos <= 0, max_pos), &p))
		return 0;
	return p.f.off + p.i.off + p.d.off;
}

int model_ws_new(model_ws **out, const model *m, int64_t max_rows, int nth, int32_t max_pos, char *err, size_t errlen) {
	*out = NULL;
	const bool fused = model_attn_fused() || max_pos <= 0;
	ws_plan p;
	if (max_rows < 1 || nth < 1 || !plan_ws(&m->hp, (uint64_t)max_rows, nth, att_floats(&m->hp, fused, max_pos), &p))
		return base_seterr(err, errlen, LANES_EINVAL, "forward: a workspace of %lld rows is too large", (long long)max_rows);
	model_ws *w = calloc(1, sizeof *w);
	if (!w) return base_seterr(err, errlen, LANES_ENOMEM, "forward: out of memory");
	*w = (model_ws){.max_rows = max_rows, .nth = nth, .max_pos = fused ? 0 : max_pos, .fused = fused,
			.bytes = p.f.off + p.i.off + p.d.off};
	w->fb = malloc((size_t)p.f.off + 64);
	w->ib = malloc((size_t)p.i.off + 64);
	w->db = malloc((size_t)p.d.off + 64);
	if (!w->fb || !w->ib || !w->db) {
		model_ws_free(w);
		return base_seterr(err, errlen, LANES_ENOMEM, "forward: out of memory for a workspace of %lld rows",
				    (long long)max_rows);
	}
	*out = w;
	return LANES_OK;
}

// hp as an MTP pass lays its workspace out: with a head.
static model_hparams head_hp(const model_hparams *hp) {
	model_hparams h = *hp;
	if (!h.n_nextn) h.n_nextn = 1;
	return h;
}

uint64_t model_ws_bytes_head(const model_hparams *hp, int64_t max_rows, int nth, int32_t max_pos) {
	const model_hparams h = head_hp(hp);
	return model_ws_bytes(&h, max_rows, nth, max_pos);
}

int model_ws_new_head(model_ws **out, const model *m, int64_t max_rows, int nth, int32_t max_pos, char *err, size_t errlen) {
	if (m->hp.n_nextn) return model_ws_new(out, m, max_rows, nth, max_pos, err, errlen);
	model shadow = *m; // only its hparams are read
	shadow.hp = head_hp(&m->hp);
	return model_ws_new(out, &shadow, max_rows, nth, max_pos, err, errlen);
}

void model_ws_free(model_ws *w) {
	if (!w) return;
	free(w->fb), free(w->ib), free(w->db), free(w->lora_buf);
	free(w);
}

uint64_t model_ws_size(const model_ws *w) { return w->bytes; }

void model_ws_set_routes(model_ws *w, model_routes *r) { w->routes = r; }

// The adapters' part of a pass: *out stays NULL when no row has an adapter (the pass is then
// the base model's, bit for bit); else lp gets scratch from w, grown to what these rows need.
static int lora_setup(const model *m, base_pool *pool, model_ws *w, const model_row *rows, int64_t n, lora_pass *lp,
		      lora_pass **out, char *err, size_t errlen) {
	*out = NULL;
	const model_hparams *hp = &m->hp;
	int32_t slots = 0, rank = 0;
	bool output = false;
	for (int64_t i = 0; i < n; i++) {
		const model_lora_set *set = rows[i].lora;
		if (!set) continue;
		if (set->n > slots) slots = set->n;
		for (int32_t k = 0; k < set->n; k++) {
			if (set->use[k].lora->rank > rank) rank = set->use[k].lora->rank;
			output |= set->use[k].lora->kinds >> LK_OUTPUT & 1;
		}
	}
	if (!slots) return LANES_OK;
	int64_t wide = hp->n_embd, qd = (int64_t)hp->n_heads * hp->head_dim;
	if (qd > wide) wide = qd;
	if (hp->attn_gate && 2 * qd > wide) wide = 2 * qd; // a gated query's rows: each head's query, then its gate
	if (hp->n_ff > wide) wide = hp->n_ff;
	// a recurrent layer's input projection: q, k, v and z together
	if (hp->ssm_v_heads && model_ssm_conv_dim(hp) + (int64_t)hp->ssm_v_heads * hp->ssm_dv > wide)
		wide = model_ssm_conv_dim(hp) + (int64_t)hp->ssm_v_heads * hp->ssm_dv;
	const int64_t out_w = output && hp->n_vocab > wide ? hp->n_vocab : wide;
	const int nth = base_pool_threads(pool);
	// a quantized adapter's input, prepared: the widest input or the largest rank, per piece
	const tensor_kernels *k16 = tensor_kernels_with_act(m->ks, TENSOR_ACT_Q16), *k8 = tensor_kernels_with_act(m->ks, TENSOR_ACT_Q8);
	const int64_t kmax = wide > rank ? wide : rank;
	const size_t a16 = tensor_matmul_scratch(k16, LORA_CHUNK, kmax), a8 = tensor_matmul_scratch(k8, LORA_CHUNK, kmax);
	const size_t act = (a16 > a8 ? a16 : a8) + 64;
	const size_t per_th = ((size_t)LORA_CHUNK * ((size_t)wide + (size_t)out_w) + (act + 3) / 4 + 15) & ~(size_t)15;
	const size_t fl = per_th * (size_t)nth, tl = ((size_t)LORA_KINDS * (size_t)n * (size_t)rank + 15) & ~(size_t)15;
	const size_t need = (fl + tl) * sizeof(float) + (size_t)n * sizeof(void *) + (size_t)(3 * n + 1) * sizeof(int32_t) + (size_t)n;
	if (need > w->lora_bytes) {
		void *p = realloc(w->lora_buf, need);
		if (!p) return base_seterr(err, errlen, LANES_ENOMEM, "forward: out of memory for the adapters' scratch");
		w->lora_buf = p;
		w->lora_bytes = need;
	}
	float *f = w->lora_buf;
	*lp = (lora_pass){.pool = pool, .nth = nth, .rows = rows, .n = n, .slots = slots, .per_th = per_th, .f = f,
			  .t = f + fl, .wide = wide, .rank = rank, .out_w = out_w};
	lp->group_lora = (const model_lora **)(f + fl + tl);
	lp->sel = (int32_t *)(lp->group_lora + n);
	lp->ridx = lp->sel + n;
	lp->group = lp->ridx + n;
	lp->done = (uint8_t *)(lp->group + n + 1);
	*out = lp;
	return LANES_OK;
}

int model_forward_ws(const model *m, kv_cache *kv, base_pool *pool, model_ws *w, const model_row *rows, int64_t n,
		     float *logits, char *err, size_t errlen) {
	return model_forward_hidden(m, kv, pool, w, rows, n, logits, NULL, NULL, err, errlen);
}

// A pass's start, the trunk's or the head's: the rows checked against the model, kv (of
// kv_layers layers) and w, the scratch laid out for n rows, the adapters set up, the
// sequences grown and the attention's blocks and rope tables made.
static int pass_begin(const model *m, kv_cache *kv, int32_t kv_layers, base_pool *pool, model_ws *w, const model_row *rows,
		      int64_t n, scratch *s, lora_pass *lp, uint64_t *af, bool *fused, char *err, size_t errlen) {
	const model_hparams *hp = &m->hp;
	const int nth = base_pool_threads(pool);
	int32_t max_pos = 0;
	int rc = check_rows(m, kv, kv_layers, rows, n, false, &max_pos, err, errlen);
	if (rc) return rc;
	// the unfused attention reads f16 rows only
	*fused = w->fused || !kv_type_get(kv_config_of(kv)->type)->f16;
	if (n > w->max_rows || nth > w->nth || (!*fused && max_pos > w->max_pos))
		return base_seterr(err, errlen, LANES_EINVAL,
				    "forward: %lld rows (positions to %d) on %d threads exceed the workspace (%lld rows, %d, %d)",
				    (long long)n, max_pos, nth, (long long)w->max_rows, w->max_pos, w->nth);
	// The parts are laid out for this n inside the buffers sized for max_rows.
	ws_plan p;
	*af = att_floats(hp, *fused, *fused ? 0 : w->max_pos);
	plan_ws(hp, (uint64_t)n, nth, *af, &p);
	char *fb = w->fb, *ib = w->ib, *db = w->db;
	*s = (scratch){
		.x = (float *)(fb + p.x), .h = (float *)(fb + p.h), .t = (float *)(fb + p.t), .q = (float *)(fb + p.q),
		.k = (float *)(fb + p.k), .v = (float *)(fb + p.v), .att = (float *)(fb + p.att), .g = (float *)(fb + p.g),
		.u = (float *)(fb + p.u), .rl = (float *)(fb + p.rl), .rw = (float *)(fb + p.rw), .xg = (float *)(fb + p.xg),
		.ec = (float *)(fb + p.ec), .ys = (float *)(fb + p.ys), .sg = (float *)(fb + p.sg), .scores = (float *)(fb + p.sc),
		.ids = (int32_t *)(ib + p.ids), .sel = (int32_t *)(ib + p.sel), .slot = (int32_t *)(ib + p.slot),
		.aord = (int32_t *)(ib + p.aord), .anpos = (int32_t *)(ib + p.anpos), .ablk = (int32_t *)(ib + p.ablk),
		.cs = (double *)(db + p.cs), .mmx = fb + p.mx, .mmx_bytes = (size_t)p.mx_bytes,
		.sspan = (int32_t *)(ib + p.sspan), .qg = (float *)(fb + p.qg), .ag = (float *)(fb + p.ag),
		.lin = (float *)(fb + p.lin), .lq = (float *)(fb + p.lq), .lz = (float *)(fb + p.lz), .lba = (float *)(fb + p.lba),
		.lo = (float *)(fb + p.lo), .lsc = (float *)(fb + p.lsc),
		.routes = hp->n_experts ? w->routes : NULL,
	};
	if ((rc = lora_setup(m, pool, w, rows, n, lp, &s->lp, err, errlen))) return rc;
	if ((rc = check_rows(m, kv, kv_layers, rows, n, true, &max_pos, err, errlen))) return rc;
	attn_blocks(rows, n, tensor_attn_block_rows(hp->n_heads / hp->n_kv_heads), s);
	for (int64_t r = 0; r < n; r++) {
		double *cs = s->cs + r * rope_tables(hp) * hp->rope.n_rot;
		tensor_rope_table(&hp->rope, rows[r].pos, cs);
		if (hp->rope_swa.n_rot) tensor_rope_table(&hp->rope_swa, rows[r].pos, cs + hp->rope.n_rot);
	}
	return LANES_OK;
}

// The output head over the rows that asked, gathered in batch order and normed (by norm) as it
// reads them; the rows of want (all those with logits when want_logits) get that normed state
// in hidden. lora: the output head takes the rows' adapters.
static void pass_end(const model *m, base_pool *pool, scratch *s, const model_row *rows, int64_t n, const float *norm,
		     const mweight *head, float *logits, const bool *want, bool want_logits, float *hidden) {
	const model_hparams *hp = &m->hp;
	const uint64_t E = hp->n_embd;
	int64_t nl = 0;
	for (int64_t r = 0; r < n; r++)
		if (rows[r].logits) s->sel[nl++] = (int32_t)r;
	if (s->lp) memcpy(s->lp->ridx, s->sel, (size_t)nl * sizeof *s->sel);
	const row_maker out_norm = {.m = m, .x = s->x, .w = norm, .h = s->h, .ridx = s->sel, .width = (int64_t)E};
	if (nl) mm(pool, s, head, 0, s->h, nl, logits, norm_row, &out_norm, false, NULL);
	if (nl) lora_add(s->lp, -1, LK_OUTPUT, s->h, (int64_t)E, nl, s->lp ? s->lp->ridx : NULL, logits, hp->n_vocab);
	if (hp->final_softcap != 0.0f) tensor_k_softcap_rows(m->ks, logits, nl * hp->n_vocab, hp->final_softcap);
	int64_t nh = 0;
	for (int64_t r = 0; r < n && hidden; r++)
		if (want_logits ? rows[r].logits : want && want[r])
			tensor_k_rmsnorm(m->ks, s->x + r * E, norm, (int64_t)E, hp->rms_eps, hidden + nh++ * E);
}

int model_forward_hidden(const model *m, kv_cache *kv, base_pool *pool, model_ws *w, const model_row *rows,
			 int64_t n, float *logits, const bool *want, float *hidden, char *err, size_t errlen) {
	if (n <= 0) return LANES_OK;
	if (m->hp.encoder) return model_bert_forward(m, kv, pool, rows, n, want, hidden, err, errlen);
	const model_hparams *hp = &m->hp;
	scratch s;
	lora_pass lp;
	uint64_t af;
	bool fused;
	int rc = pass_begin(m, kv, model_kv_layers(hp), pool, w, rows, n, &s, &lp, &af, &fused, err, errlen);
	if (rc) return rc;
	const uint64_t E = hp->n_embd;
	const tensor_traits *et = tensor_traits_of(m->tok_embd.type);
	for (int64_t r = 0; r < n; r++) {
		et->to_f32((const uint8_t *)m->tok_embd.data + (size_t)rows[r].token * m->tok_embd.row_bytes, s.x + r * E,
			   (int64_t)E);
		if (hp->embd_scale != 1.0f)
			for (uint64_t i = 0; i < E; i++) s.x[r * E + i] *= hp->embd_scale;
	}
	for (int l = 0; l < hp->n_layers; l++) layer(m, l, model_kv_layer(hp, l), kv, pool, rows, n, &s, (size_t)af, fused);
	pass_end(m, pool, &s, rows, n, m->output_norm, &m->output, logits, want, false, want ? hidden : NULL);
	return LANES_OK;
}

int model_mtp_forward(const model *m, kv_cache *kv, base_pool *pool, model_ws *w, const model_row *rows, int64_t n,
		      const float *hin, float *logits, float *hout, char *err, size_t errlen) {
	const model_hparams *hp = &m->hp;
	if (!hp->n_nextn) return base_seterr(err, errlen, LANES_EINVAL, "forward: the model has no MTP layer");
	if (n <= 0) return LANES_OK;
	for (int64_t r = 0; r < n; r++)
		if (rows[r].lora) return base_seterr(err, errlen, LANES_EINVAL, "forward: the MTP head takes no adapters");
	scratch s;
	lora_pass lp;
	uint64_t af;
	bool fused;
	int rc = pass_begin(m, kv, 1, pool, w, rows, n, &s, &lp, &af, &fused, err, errlen);
	if (rc) return rc;
	s.routes = NULL; // the observer counts the trunk's layers only
	const mnextn *x = &m->nextn[0];
	const int64_t E = hp->n_embd;
	const tensor_traits *et = tensor_traits_of(x->embed->type);
	for (int64_t r = 0; r < n; r++) {
		float *ec = s.ec + r * 2 * E;
		et->to_f32((const uint8_t *)x->embed->data + (size_t)rows[r].token * x->embed->row_bytes, s.h, E);
		tensor_k_rmsnorm(m->ks, s.h, x->enorm, E, hp->rms_eps, ec);
		tensor_k_rmsnorm(m->ks, hin + r * E, x->hnorm, E, hp->rms_eps, ec + E);
	}
	mm(pool, &s, &x->eh_proj, 0, s.ec, n, s.x, NULL, NULL, false, NULL);
	layer(m, hp->n_layers, 0, kv, pool, rows, n, &s, (size_t)af, fused);
	pass_end(m, pool, &s, rows, n, x->head_norm, x->head, logits, NULL, true, hout);
	return LANES_OK;
}

int model_forward(const model *m, kv_cache *kv, base_pool *pool, const model_row *rows, int64_t n,
		  float *logits, char *err, size_t errlen) {
	if (n <= 0) return LANES_OK;
	if (m->hp.encoder) return model_bert_forward(m, kv, pool, rows, n, NULL, NULL, err, errlen);
	// The positions bound the unfused attention scratch: check them before sizing anything.
	int32_t max_pos = 0;
	int rc = check_rows(m, kv, model_kv_layers(&m->hp), rows, n, false, &max_pos, err, errlen);
	if (rc) return rc;
	model_ws *w;
	if ((rc = model_ws_new(&w, m, n, base_pool_threads(pool), max_pos, err, errlen))) return rc;
	rc = model_forward_ws(m, kv, pool, w, rows, n, logits, err, errlen);
	model_ws_free(w);
	return rc;
}
