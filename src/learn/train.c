// learn/train: the training pass of the llama family, gemma, phi3 and gpt-oss in f32 — a
// layer's forward over a chunk of the step's tokens (each example attends within itself, from
// position 0), the output head with the loss over the learned tokens, and a layer's backward
// (its forward recomputed from the stored layer input and keys/values) that carries the
// gradient down and adds the adapters' A and B gradients. The base weights only pass gradients
// through.
#include "learn/learn_int.h"

#include "tensor/tensor.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#define KS model_kernels(j->m)

// Learned rows whose logits the head holds at once (a vocabulary's worth of floats each).
#define HEAD_ROWS 64

// ---- layout -------------------------------------------------------------------------------------
typedef struct {
	uint64_t off;
	bool bad;
} bump;

static void *take(bump *b, char *mem, uint64_t count, uint64_t elem) {
	uint64_t n, at = b->off;
	if (!ck_mul(count, elem, &n) || !ck_add(n, 63, &n) || !ck_add(b->off, n & ~(uint64_t)63, &b->off)) b->bad = true;
	return mem && !b->bad ? mem + at : NULL;
}

uint64_t learn_buf_layout(const learn_job *j, int64_t T, int64_t Tmax, void *mem, learn_buf *b) {
	const model_hparams *hp = model_hparams_of(j->m);
	const uint64_t E = (uint64_t)hp->n_embd, L = (uint64_t)hp->n_layers, D = (uint64_t)hp->head_dim,
		       qd = (uint64_t)hp->n_heads * D, kvd = (uint64_t)hp->n_kv_heads * D, V = (uint64_t)hp->n_vocab,
		       X = (uint64_t)hp->n_experts, K = hp->n_experts ? (uint64_t)hp->n_experts_used : 1,
		       F = hp->n_experts ? (uint64_t)hp->n_ff_exp : (uint64_t)hp->n_ff, S = (uint64_t)hp->n_ff_shexp,
		       P = (uint64_t)(j->o.piece < T ? j->o.piece : T), ut = (uint64_t)T;
	uint64_t r = (uint64_t)j->a->rank;
	bump bb = {0};
	bump *B = &bb;
	char *m = mem;
	learn_buf z;
	if (!b) b = &z;
	*b = (learn_buf){0};
	b->tok = take(B, m, ut, 4), b->start = take(B, m, ut, 4), b->tgt = take(B, m, ut, 4);
	b->cs = take(B, m, ut * (uint64_t)learn_rope_stride(hp), 8);
	b->xs = take(B, m, (L + 1) * ut, E * 4);
	b->kc = take(B, m, L * ut, kvd * 4), b->vc = take(B, m, L * ut, kvd * 4);
	b->dx = take(B, m, ut, E * 4), b->dk = take(B, m, ut, kvd * 4), b->dv = take(B, m, ut, kvd * 4);
	b->sc = take(B, m, LEARN_ATT_THREADS, (uint64_t)Tmax * 4);
	b->h = take(B, m, P, E * 4), b->q = take(B, m, P, qd * 4), b->qraw = take(B, m, P, qd * 4);
	b->k = take(B, m, P, kvd * 4), b->kraw = take(B, m, P, kvd * 4), b->v = take(B, m, P, kvd * 4);
	b->att = take(B, m, P, qd * 4), b->lse = take(B, m, P, (uint64_t)hp->n_heads * 4);
	b->xm = take(B, m, P, E * 4), b->h2 = take(B, m, P, E * 4), b->t = take(B, m, P, E * 4);
	if (hp->post_norms) b->ao = take(B, m, P, E * 4);
	b->g = take(B, m, P * K, F * 4), b->u = take(B, m, P * K, F * 4), b->act = take(B, m, P * K, F * 4);
	for (int k = 0; k < MODEL_LORA_KINDS; k++) b->lu[k] = take(B, m, P, r * 4);
	b->ldu = take(B, m, P, r * 4);
	b->dh = take(B, m, P, E * 4), b->dh2 = take(B, m, P, E * 4), b->dxm = take(B, m, P, E * 4);
	b->datt = take(B, m, P, qd * 4), b->dq = take(B, m, P, qd * 4), b->dkr = take(B, m, P, kvd * 4), b->dvr = take(B, m, P, kvd * 4);
	const uint64_t FS = F > S ? F : S;
	b->dg = take(B, m, P, FS * 4), b->du = take(B, m, P, FS * 4), b->da = take(B, m, P, FS * 4);
	if (X) {
		b->rl = take(B, m, P, X * 4), b->rw = take(B, m, P, K * 4), b->ys = take(B, m, P * K, E * 4);
		b->xg = take(B, m, P, E * 4), b->eg = take(B, m, P, F * 4), b->eu = take(B, m, P, F * 4), b->ea = take(B, m, P, F * 4);
		b->ey = take(B, m, P, E * 4), b->dyg = take(B, m, P, E * 4), b->dxg = take(B, m, P, E * 4), b->drl = take(B, m, P, X * 4);
		b->ids = take(B, m, P, K * 4), b->sel = take(B, m, P * K, 4), b->slot = take(B, m, P * K, 4);
		if (S) {
			b->sg = take(B, m, P, 4), b->dsg = take(B, m, P, 4), b->sgg = take(B, m, P, S * 4), b->sgu = take(B, m, P, S * 4);
			b->sga = take(B, m, P, S * 4), b->ysh = take(B, m, P, E * 4), b->dysh = take(B, m, P, E * 4);
		}
	}
	b->hn = take(B, m, P, E * 4), b->lg = take(B, m, P < HEAD_ROWS ? P : HEAD_ROWS, V * 4), b->dhn = take(B, m, P, E * 4);
	b->hrow = take(B, m, P, 4);
	return bb.bad || bb.off > SIZE_MAX / 2 ? 0 : bb.off;
}

// ---- the step's inputs --------------------------------------------------------------------------
void learn_step_fill(learn_job *j) {
	const model_hparams *hp = model_hparams_of(j->m);
	const int64_t E = hp->n_embd;
	const tensor_traits *et = tensor_traits_of(j->io.tok_embd.type);
	learn_buf *b = &j->b;
	int64_t i = 0;
	for (int32_t e = 0; e < j->n_ex; e++) {
		const learn_example *x = j->ex[e];
		for (int64_t p = 0; p < x->n; p++, i++) {
			b->tok[i] = x->ids[p];
			b->start[i] = (int32_t)(i - p);
			b->tgt[i] = p + 1 < x->n && x->learn[p + 1] ? x->ids[p + 1] : -1;
			double *cs = b->cs + i * learn_rope_stride(hp);
			tensor_rope_table(&hp->rope, (int32_t)p, cs);
			if (hp->rope_swa.n_rot) tensor_rope_table(&hp->rope_swa, (int32_t)p, cs + hp->rope.n_rot);
			float *xe = b->xs + i * E;
			et->to_f32((const uint8_t *)j->io.tok_embd.data + (size_t)x->ids[p] * j->io.tok_embd.row_bytes, xe, E);
			for (int64_t c = 0; hp->embd_scale != 1.0f && c < E; c++) xe[c] *= hp->embd_scale;
		}
	}
}

// ---- pieces of math ----------------------------------------------------------------------------
// Layer l's rope: a local layer's own where the model gives local layers another (gemma3).
static const tensor_rope *layer_rope(const model_hparams *hp, int32_t l) {
	return hp->rope_swa.n_rot && model_layer_window(hp, l) ? &hp->rope_swa : &hp->rope;
}

static void add_bias(float *y, const float *bias, int64_t n, int64_t width) {
	if (!bias) return;
	for (int64_t r = 0; r < n; r++)
		for (int64_t i = 0; i < width; i++) y[r * width + i] += bias[i];
}

// ---- the adapters' terms -------------------------------------------------------------------------
// y[n][n_out] += f * B (A x), keeping u = A x [n][r]; nothing when the weight is not adapted.
static void lora_fwd(const learn_job *j, base_pool *pool, const lpair *p, const float *x, int64_t n, float *u, float *y) {
	if (!p) return;
	const learn_adapter *a = j->a;
	const model_matrix A = lk_f32(a->w + p->a_off, p->r, p->n_in), Bm = lk_f32(a->w + p->b_off, p->n_out, p->r);
	lk_mat_fwd(pool, KS, &A, 0, x, p->n_in, n, u, p->r, 1.0f, false);
	lk_mat_fwd(pool, KS, &Bm, 0, u, p->r, n, y, p->n_out, learn_pair_scale(a, p), true);
}

// The term's backward: B's and A's gradients, and dx += its share of the input's gradient.
static void lora_bwd(learn_job *j, base_pool *pool, const lpair *p, const float *x, const float *u, const float *dy,
		     int64_t n, float *dx) {
	if (!p) return;
	const learn_adapter *a = j->a;
	const float f = learn_pair_scale(a, p);
	const model_matrix A = lk_f32(a->w + p->a_off, p->r, p->n_in), Bm = lk_f32(a->w + p->b_off, p->n_out, p->r);
	float *du = j->b.ldu;
	lk_outer(pool, p->n_out, p->r, n, dy, p->n_out, u, p->r, f, j->grad + p->b_off);
	memset(du, 0, (size_t)(n * p->r) * sizeof *du);
	lk_mat_bwd(pool, KS, &Bm, 0, dy, p->n_out, n, du, p->r);
	for (int64_t i = 0; i < n * p->r; i++) du[i] *= f;
	lk_outer(pool, p->r, p->n_in, n, du, p->r, x, p->n_in, 1.0f, j->grad + p->a_off);
	lk_mat_bwd(pool, KS, &A, 0, du, p->r, n, dx, p->n_in);
}

// ---- the FFN ------------------------------------------------------------------------------------
typedef struct {
	const model_matrix *gate, *up, *down;
	int64_t mat;
	const lpair *pg, *pu, *pd; // the dense FFN's adapters (NULL for experts)
	const float *bg, *bu;      // gate and up biases before the activation (gpt-oss's experts), or NULL
} ffn_w;

// out = down(silu(gate x) * up x) over n rows, keeping g, u and act.
static void ffn_fwd(learn_job *j, base_pool *pool, const ffn_w *w, const float *x, int64_t n, float *g, float *u,
		    float *act, float *out) {
	const int64_t F = w->gate->rows, E = w->gate->k;
	float **lu = j->b.lu;
	lk_mat_fwd(pool, KS, w->gate, w->mat, x, E, n, g, F, 1.0f, false);
	lora_fwd(j, pool, w->pg, x, n, lu[MODEL_LORA_GATE], g);
	lk_mat_fwd(pool, KS, w->up, w->mat, x, E, n, u, F, 1.0f, false);
	lora_fwd(j, pool, w->pu, x, n, lu[MODEL_LORA_UP], u);
	add_bias(g, w->bg, n, F);
	add_bias(u, w->bu, n, F);
	const model_hparams *hp = model_hparams_of(j->m);
	if (hp->oai) tensor_swiglu_oai(g, u, act, n * F);
	else if (hp->geglu) tensor_geglu(g, u, act, n * F);
	else tensor_swiglu(g, u, act, n * F);
	lk_mat_fwd(pool, KS, w->down, w->mat, act, F, n, out, E, 1.0f, false);
	lora_fwd(j, pool, w->pd, act, n, lu[MODEL_LORA_DOWN], out);
}

// dx += the FFN's input gradient for output gradient dy.
static void ffn_bwd(learn_job *j, base_pool *pool, const ffn_w *w, const float *x, const float *g, const float *u,
		    const float *act, const float *dy, int64_t n, float *dx) {
	const int64_t F = w->gate->rows, E = w->gate->k;
	learn_buf *b = &j->b;
	memset(b->da, 0, (size_t)(n * F) * sizeof(float));
	lk_mat_bwd(pool, KS, w->down, w->mat, dy, E, n, b->da, F);
	lora_bwd(j, pool, w->pd, act, b->lu[MODEL_LORA_DOWN], dy, n, b->da);
	const model_hparams *hp = model_hparams_of(j->m);
	if (hp->oai) lk_swiglu_oai_bwd(g, u, b->da, b->dg, b->du, n * F);
	else if (hp->geglu) lk_geglu_bwd(g, u, b->da, b->dg, b->du, n * F);
	else lk_swiglu_bwd(g, u, b->da, b->dg, b->du, n * F);
	lk_mat_bwd(pool, KS, w->gate, w->mat, b->dg, F, n, dx, E);
	lora_bwd(j, pool, w->pg, x, b->lu[MODEL_LORA_GATE], b->dg, n, dx);
	lk_mat_bwd(pool, KS, w->up, w->mat, b->du, F, n, dx, E);
	lora_bwd(j, pool, w->pu, x, b->lu[MODEL_LORA_UP], b->du, n, dx);
}

// Expert e's FFN (its biases where the model has them).
static ffn_w expert_w(const model_layer_weights *lw, int64_t e, int64_t F) {
	return (ffn_w){&lw->gate_exps, &lw->up_exps, &lw->down_exps, e, NULL, NULL, NULL,
		       lw->gate_exps_b ? lw->gate_exps_b + e * F : NULL, lw->up_exps_b ? lw->up_exps_b + e * F : NULL};
}

// The rows of the chunk that chose expert e, with their slots; returns the count.
static int64_t expert_rows(const learn_buf *b, int64_t n, int64_t K, int64_t e) {
	int64_t cnt = 0;
	for (int64_t r = 0; r < n; r++)
		for (int64_t k = 0; k < K; k++)
			if (b->ids[r * K + k] == e) b->sel[cnt] = (int32_t)r, b->slot[cnt++] = (int32_t)k;
	return cnt;
}

// MoE: routing, the chosen experts (their activations kept per row and slot), the shared expert.
static void moe_fwd(learn_job *j, base_pool *pool, const model_layer_weights *lw, int64_t n) {
	const model_hparams *hp = model_hparams_of(j->m);
	learn_buf *b = &j->b;
	const int64_t E = hp->n_embd, X = hp->n_experts, K = hp->n_experts_used, F = hp->n_ff_exp;
	lk_mat_fwd(pool, KS, &lw->router, 0, b->h2, E, n, b->rl, X, 1.0f, false);
	add_bias(b->rl, lw->router_b, n, X);
	for (int64_t r = 0; r < n; r++) tensor_moe_route(b->rl + r * X, (int32_t)X, (int32_t)K, hp->moe_norm, b->ids + r * K, b->rw + r * K);
	for (int64_t e = 0; e < X; e++) {
		const int64_t cnt = expert_rows(b, n, K, e);
		if (!cnt) continue;
		tensor_gather_rows(b->h2, E, b->sel, cnt, E, b->xg);
		const ffn_w w = expert_w(lw, e, F);
		ffn_fwd(j, pool, &w, b->xg, cnt, b->eg, b->eu, b->ea, b->ey);
		add_bias(b->ey, lw->down_exps_b ? lw->down_exps_b + e * E : NULL, cnt, E);
		for (int64_t c = 0; c < cnt; c++) {
			const size_t at = (size_t)b->sel[c] * (size_t)K + (size_t)b->slot[c];
			memcpy(b->g + at * F, b->eg + c * F, (size_t)F * 4);
			memcpy(b->u + at * F, b->eu + c * F, (size_t)F * 4);
			memcpy(b->act + at * F, b->ea + c * F, (size_t)F * 4);
			memcpy(b->ys + at * E, b->ey + c * E, (size_t)E * 4);
		}
	}
	for (int64_t r = 0; r < n; r++) {
		float *o = b->t + r * E;
		for (int64_t i = 0; i < E; i++) o[i] = 0.0f;
		for (int64_t k = 0; k < K; k++) {
			const float w = b->rw[r * K + k], *y = b->ys + (r * K + k) * E;
			for (int64_t i = 0; i < E; i++) o[i] = o[i] + w * y[i];
		}
	}
	if (!hp->n_ff_shexp) return;
	lk_mat_fwd(pool, KS, &lw->router_shexp, 0, b->h2, E, n, b->sg, 1, 1.0f, false);
	const ffn_w w = {&lw->gate_shexp, &lw->up_shexp, &lw->down_shexp, 0, NULL, NULL, NULL, NULL, NULL};
	ffn_fwd(j, pool, &w, b->h2, n, b->sgg, b->sgu, b->sga, b->ysh);
	for (int64_t r = 0; r < n; r++) {
		const float gate = (float)(1.0 / (1.0 + exp(-(double)b->sg[r])));
		for (int64_t i = 0; i < E; i++) b->t[r * E + i] += gate * b->ysh[r * E + i];
	}
}

// dh2 += the MoE block's input gradient for output gradient dy; the routing's choice of
// experts is held (it is piecewise constant), the weights of the chosen ones are differentiated.
static void moe_bwd(learn_job *j, base_pool *pool, const model_layer_weights *lw, const float *dy, int64_t n) {
	const model_hparams *hp = model_hparams_of(j->m);
	learn_buf *b = &j->b;
	const int64_t E = hp->n_embd, X = hp->n_experts, K = hp->n_experts_used, F = hp->n_ff_exp;
	if (hp->n_ff_shexp) {
		for (int64_t r = 0; r < n; r++) {
			const double gate = 1.0 / (1.0 + exp(-(double)b->sg[r]));
			double dot = 0.0;
			for (int64_t i = 0; i < E; i++) {
				dot += (double)dy[r * E + i] * b->ysh[r * E + i];
				b->dysh[r * E + i] = (float)gate * dy[r * E + i];
			}
			b->dsg[r] = (float)(gate * (1.0 - gate) * dot);
		}
		const ffn_w w = {&lw->gate_shexp, &lw->up_shexp, &lw->down_shexp, 0, NULL, NULL, NULL, NULL, NULL};
		ffn_bwd(j, pool, &w, b->h2, b->sgg, b->sgu, b->sga, b->dysh, n, b->dh2);
		lk_mat_bwd(pool, KS, &lw->router_shexp, 0, b->dsg, 1, n, b->dh2, E);
	}
	// the router: d loss / d weight of each chosen expert, through the (renormalized) softmax
	for (int64_t r = 0; r < n; r++) {
		const float *rl = b->rl + r * X;
		const int32_t *ids = b->ids + r * K;
		double mx = rl[0], sum = 0.0, sel = 0.0, dw[64], dp[256], pdp = 0.0, wdw = 0.0;
		for (int64_t e = 1; e < X; e++) mx = rl[e] > mx ? rl[e] : mx;
		for (int64_t e = 0; e < X; e++) sum += exp(rl[e] - mx), dp[e] = 0.0;
		for (int64_t k = 0; k < K; k++) {
			double d = 0.0;
			const float *y = b->ys + (r * K + k) * E;
			for (int64_t i = 0; i < E; i++) d += (double)dy[r * E + i] * y[i];
			dw[k] = d;
			sel += exp(rl[ids[k]] - mx) / sum;
		}
		for (int64_t k = 0; k < K; k++) wdw += dw[k] * (exp(rl[ids[k]] - mx) / sum / sel);
		for (int64_t k = 0; k < K; k++) dp[ids[k]] = hp->moe_norm ? (dw[k] - wdw) / sel : dw[k];
		for (int64_t e = 0; e < X; e++) pdp += exp(rl[e] - mx) / sum * dp[e];
		for (int64_t e = 0; e < X; e++) b->drl[r * X + e] = (float)(exp(rl[e] - mx) / sum * (dp[e] - pdp));
	}
	lk_mat_bwd(pool, KS, &lw->router, 0, b->drl, X, n, b->dh2, E);
	for (int64_t e = 0; e < X; e++) {
		const int64_t cnt = expert_rows(b, n, K, e);
		if (!cnt) continue;
		tensor_gather_rows(b->h2, E, b->sel, cnt, E, b->xg);
		for (int64_t c = 0; c < cnt; c++) {
			const size_t at = (size_t)b->sel[c] * (size_t)K + (size_t)b->slot[c];
			memcpy(b->eg + c * F, b->g + at * F, (size_t)F * 4);
			memcpy(b->eu + c * F, b->u + at * F, (size_t)F * 4);
			memcpy(b->ea + c * F, b->act + at * F, (size_t)F * 4);
			const float w = b->rw[at];
			for (int64_t i = 0; i < E; i++) b->dyg[c * E + i] = w * dy[(size_t)b->sel[c] * E + i];
		}
		memset(b->dxg, 0, (size_t)(cnt * E) * 4);
		const ffn_w w = expert_w(lw, e, F);
		ffn_bwd(j, pool, &w, b->xg, b->eg, b->eu, b->ea, b->dyg, cnt, b->dxg);
		for (int64_t c = 0; c < cnt; c++)
			for (int64_t i = 0; i < E; i++) b->dh2[(size_t)b->sel[c] * E + i] += b->dxg[c * E + i];
	}
}

// ---- attention ------------------------------------------------------------------------------------
typedef struct {
	const learn_job *j;
	int32_t l;
	int64_t i0, n;
	atomic_llong next;
} attn_job;

// The shapes an attention task works with, and layer l's stored keys and values.
#define ATTN_DIMS(aj)                                                                                                \
	const model_hparams *hp = model_hparams_of((aj)->j->m);                                                      \
	const int64_t H = hp->n_heads, KH = hp->n_kv_heads, D = hp->head_dim, grp = H / KH, qd = H * D, kvd = KH * D; \
	const float scale = hp->attn_scale, cap = hp->attn_softcap;                                                  \
	const int64_t win = model_layer_window(hp, (aj)->l);                                                         \
	const float *sinks = (aj)->j->lw[(aj)->l].sinks;                                                             \
	const float *kc = (aj)->j->b.kc + (size_t)(aj)->l * (aj)->j->T * kvd, *vc = (aj)->j->b.vc + (size_t)(aj)->l * (aj)->j->T * kvd

// The first row a query at row i attends: its example's first, or its window's.
static int64_t attn_first(const learn_buf *b, int64_t i, int64_t win) {
	const int64_t st = b->start[i];
	return win > 0 && i - win + 1 > st ? i - win + 1 : st;
}

// Queries of the chunk over their example's keys up to themselves (within a local layer's
// window; an attention sink adds its logit to the denominator): items are (row, KV head).
static void attn_fwd_task(void *arg, int ith, int nth) {
	attn_job *aj = arg;
	if (ith >= LEARN_ATT_THREADS) return;
	const learn_job *j = aj->j;
	const learn_buf *b = &j->b;
	ATTN_DIMS(aj);
	float *sc = b->sc + (size_t)ith * j->Tmax;
	for (;;) {
		const int64_t it = atomic_fetch_add(&aj->next, 1);
		if (it >= aj->n * KH) break;
		const int64_t r = it / KH, g = it % KH, i = aj->i0 + r, st = attn_first(b, i, win), np = i - st + 1;
		for (int64_t hh = 0; hh < grp; hh++) {
			const int64_t h = g * grp + hh;
			const float *q = b->q + r * qd + h * D;
			float *o = b->att + r * qd + h * D, mx = sinks ? sinks[h] : -INFINITY;
			for (int64_t p = 0; p < np; p++) {
				sc[p] = scale * lk_dot(q, kc + (st + p) * kvd + g * D, D);
				if (cap != 0.0f) sc[p] = tensor_softcap(sc[p], cap);
				mx = sc[p] > mx ? sc[p] : mx;
			}
			double sum = sinks ? exp((double)sinks[h] - mx) : 0.0;
			for (int64_t p = 0; p < np; p++) sc[p] = expf(sc[p] - mx), sum += sc[p];
			const float inv = (float)(1.0 / sum);
			for (int64_t d = 0; d < D; d++) o[d] = 0.0f;
			for (int64_t p = 0; p < np; p++) {
				const float w = sc[p] * inv, *v = vc + (st + p) * kvd + g * D;
				for (int64_t d = 0; d < D; d++) o[d] += w * v[d];
			}
			b->lse[r * H + h] = (float)(mx + log(sum));
		}
	}
}

// The chunk's queries' backward: items are KV heads, so each thread owns the key and value
// gradients it adds to.
static void attn_bwd_task(void *arg, int ith, int nth) {
	attn_job *aj = arg;
	const learn_job *j = aj->j;
	const learn_buf *b = &j->b;
	ATTN_DIMS(aj);
	for (;;) {
		const int64_t g = atomic_fetch_add(&aj->next, 1);
		if (g >= KH) break;
		for (int64_t r = 0; r < aj->n; r++) {
			const int64_t i = aj->i0 + r, st = attn_first(b, i, win), np = i - st + 1;
			for (int64_t hh = 0; hh < grp; hh++) {
				const int64_t h = g * grp + hh;
				const float *q = b->q + r * qd + h * D, *o = b->att + r * qd + h * D, *dO = b->datt + r * qd + h * D;
				const float lse = b->lse[r * H + h], di = lk_dot(dO, o, D);
				float *dq = b->dq + r * qd + h * D;
				for (int64_t p = 0; p < np; p++) {
					const float *k = kc + (st + p) * kvd + g * D, *v = vc + (st + p) * kvd + g * D;
					float *dk = b->dk + (st + p) * kvd + g * D, *dv = b->dv + (st + p) * kvd + g * D;
					float s = scale * lk_dot(q, k, D), dcap = 1.0f;
					if (cap != 0.0f) s = tensor_softcap(s, cap), dcap = 1.0f - (s / cap) * (s / cap);
					const float pr = expf(s - lse);
					const float ds = pr * (lk_dot(dO, v, D) - di) * dcap * scale;
					for (int64_t d = 0; d < D; d++) {
						dq[d] += ds * k[d];
						dk[d] += ds * q[d];
						dv[d] += pr * dO[d];
					}
				}
			}
		}
	}
	(void)ith, (void)nth, (void)sinks;
}

// Attention over fewer multiply-adds than this runs on the caller alone.
#define ATTN_POOL_MIN (1 << 17)

static void attn_run(const learn_job *j, base_pool *pool, int32_t l, int64_t i0, int64_t n, base_task_fn fn, int64_t items) {
	const model_hparams *hp = model_hparams_of(j->m);
	attn_job aj = {.j = j, .l = l, .i0 = i0, .n = n};
	atomic_init(&aj.next, 0);
	double ctx = 0.0;
	for (int64_t i = i0; i < i0 + n; i++) ctx += (double)(i - attn_first(&j->b, i, model_layer_window(hp, l)) + 1);
	if (pool && items > 1 && base_pool_threads(pool) > 1 && 2.0 * ctx * hp->n_heads * hp->head_dim >= ATTN_POOL_MIN)
		base_pool_run(pool, fn, &aj);
	else fn(&aj, 0, 1);
}

// ---- a layer over a chunk ------------------------------------------------------------------------
// Rows i0..i0+n-1 of layer l: keys and values into the step's store, the layer's output into
// xs[l + 1]; the chunk's activations stay in the scratch for a backward.
static void layer_fwd(learn_job *j, base_pool *pool, int32_t l, int64_t i0, int64_t n) {
	const model_hparams *hp = model_hparams_of(j->m);
	const model_layer_weights *lw = &j->lw[l];
	learn_buf *b = &j->b;
	const learn_adapter *a = j->a;
	const int64_t E = hp->n_embd, D = hp->head_dim, qd = hp->n_heads * D, kvd = (int64_t)hp->n_kv_heads * D, T = j->T;
	const float *x = b->xs + ((size_t)l * T + i0) * E;
	for (int64_t r = 0; r < n; r++) tensor_rmsnorm(x + r * E, lw->attn_norm, E, hp->rms_eps, b->h + r * E);
	lk_mat_fwd(pool, KS, &lw->wq, 0, b->h, E, n, b->q, qd, 1.0f, false);
	lora_fwd(j, pool, learn_pair_of(a, l, MODEL_LORA_Q), b->h, n, b->lu[MODEL_LORA_Q], b->q);
	add_bias(b->q, lw->bq, n, qd);
	lk_mat_fwd(pool, KS, &lw->wk, 0, b->h, E, n, b->k, kvd, 1.0f, false);
	lora_fwd(j, pool, learn_pair_of(a, l, MODEL_LORA_K), b->h, n, b->lu[MODEL_LORA_K], b->k);
	add_bias(b->k, lw->bk, n, kvd);
	lk_mat_fwd(pool, KS, &lw->wv, 0, b->h, E, n, b->v, kvd, 1.0f, false);
	lora_fwd(j, pool, learn_pair_of(a, l, MODEL_LORA_V), b->h, n, b->lu[MODEL_LORA_V], b->v);
	add_bias(b->v, lw->bv, n, kvd);
	for (int64_t r = 0; r < n; r++) {
		float *q = b->q + r * qd, *k = b->k + r * kvd;
		const tensor_rope *rp = layer_rope(hp, l);
		const double *cs = b->cs + (i0 + r) * learn_rope_stride(hp) + (rp == &hp->rope ? 0 : hp->rope.n_rot);
		if (lw->q_norm) {
			memcpy(b->qraw + r * qd, q, (size_t)qd * 4);
			memcpy(b->kraw + r * kvd, k, (size_t)kvd * 4);
			for (int32_t h = 0; h < hp->n_heads; h++) tensor_rmsnorm(q + h * D, lw->q_norm, D, hp->rms_eps, q + h * D);
			for (int32_t h = 0; h < hp->n_kv_heads; h++) tensor_rmsnorm(k + h * D, lw->k_norm, D, hp->rms_eps, k + h * D);
		}
		tensor_rope_apply(rp, cs, q, hp->n_heads, (int32_t)D);
		tensor_rope_apply(rp, cs, k, hp->n_kv_heads, (int32_t)D);
		memcpy(b->kc + ((size_t)l * T + i0 + r) * kvd, k, (size_t)kvd * 4);
		memcpy(b->vc + ((size_t)l * T + i0 + r) * kvd, b->v + r * kvd, (size_t)kvd * 4);
	}
	attn_run(j, pool, l, i0, n, attn_fwd_task, n * hp->n_kv_heads);
	float *ao = lw->attn_post_norm ? b->ao : b->t;
	lk_mat_fwd(pool, KS, &lw->wo, 0, b->att, qd, n, ao, E, 1.0f, false);
	lora_fwd(j, pool, learn_pair_of(a, l, MODEL_LORA_O), b->att, n, b->lu[MODEL_LORA_O], ao);
	add_bias(ao, lw->bo, n, E);
	for (int64_t r = 0; lw->attn_post_norm && r < n; r++) tensor_rmsnorm(ao + r * E, lw->attn_post_norm, E, hp->rms_eps, b->t + r * E);
	for (int64_t i = 0; i < n * E; i++) b->xm[i] = x[i] + b->t[i];
	for (int64_t r = 0; r < n; r++) tensor_rmsnorm(b->xm + r * E, lw->ffn_norm, E, hp->rms_eps, b->h2 + r * E);
	if (hp->n_experts) {
		moe_fwd(j, pool, lw, n);
	} else {
		const ffn_w w = {&lw->ffn_gate, &lw->ffn_up, &lw->ffn_down, 0, learn_pair_of(a, l, MODEL_LORA_GATE),
				 learn_pair_of(a, l, MODEL_LORA_UP), learn_pair_of(a, l, MODEL_LORA_DOWN), NULL, NULL};
		ffn_fwd(j, pool, &w, b->h2, n, b->g, b->u, b->act, b->t);
	}
	float *y = b->xs + ((size_t)(l + 1) * T + i0) * E;
	if (lw->ffn_post_norm) {
		for (int64_t r = 0; r < n; r++) tensor_rmsnorm(b->t + r * E, lw->ffn_post_norm, E, hp->rms_eps, y + r * E);
		for (int64_t i = 0; i < n * E; i++) y[i] += b->xm[i];
	} else {
		for (int64_t i = 0; i < n * E; i++) y[i] = b->xm[i] + b->t[i];
	}
}

// The backward of layer l over rows i0..i0+n-1: dx holds the gradient at the layer's output
// and gets the gradient at its input; the chunk's queries add to dk and dv of the keys they read.
static void layer_bwd(learn_job *j, base_pool *pool, int32_t l, int64_t i0, int64_t n) {
	layer_fwd(j, pool, l, i0, n); // the same inputs give the same activations
	const model_hparams *hp = model_hparams_of(j->m);
	const model_layer_weights *lw = &j->lw[l];
	learn_buf *b = &j->b;
	const learn_adapter *a = j->a;
	const int64_t E = hp->n_embd, D = hp->head_dim, qd = hp->n_heads * D, kvd = (int64_t)hp->n_kv_heads * D, T = j->T;
	const float *x = b->xs + ((size_t)l * T + i0) * E;
	float *dy = b->dx + i0 * E;
	memcpy(b->dxm, dy, (size_t)(n * E) * 4);
	memset(b->dh2, 0, (size_t)(n * E) * 4);
	const float *dffn = dy; // the gradient at the FFN's output
	if (lw->ffn_post_norm) {
		memset(b->dh, 0, (size_t)(n * E) * 4);
		for (int64_t r = 0; r < n; r++) lk_rms_bwd(b->t + r * E, lw->ffn_post_norm, E, hp->rms_eps, dy + r * E, b->dh + r * E);
		dffn = b->dh;
	}
	if (hp->n_experts) {
		moe_bwd(j, pool, lw, dffn, n);
	} else {
		const ffn_w w = {&lw->ffn_gate, &lw->ffn_up, &lw->ffn_down, 0, learn_pair_of(a, l, MODEL_LORA_GATE),
				 learn_pair_of(a, l, MODEL_LORA_UP), learn_pair_of(a, l, MODEL_LORA_DOWN), NULL, NULL};
		ffn_bwd(j, pool, &w, b->h2, b->g, b->u, b->act, dffn, n, b->dh2);
	}
	for (int64_t r = 0; r < n; r++) lk_rms_bwd(b->xm + r * E, lw->ffn_norm, E, hp->rms_eps, b->dh2 + r * E, b->dxm + r * E);
	const float *dao = b->dxm; // the gradient at the attention's output projection
	if (lw->attn_post_norm) {
		memset(b->dh2, 0, (size_t)(n * E) * 4);
		for (int64_t r = 0; r < n; r++) lk_rms_bwd(b->ao + r * E, lw->attn_post_norm, E, hp->rms_eps, b->dxm + r * E, b->dh2 + r * E);
		dao = b->dh2;
	}
	memset(b->datt, 0, (size_t)(n * qd) * 4);
	lk_mat_bwd(pool, KS, &lw->wo, 0, dao, E, n, b->datt, qd);
	lora_bwd(j, pool, learn_pair_of(a, l, MODEL_LORA_O), b->att, b->lu[MODEL_LORA_O], dao, n, b->datt);
	memset(b->dq, 0, (size_t)(n * qd) * 4);
	attn_run(j, pool, l, i0, n, attn_bwd_task, hp->n_kv_heads);
	// this chunk's keys and values have every query's share now: later chunks ran first
	memcpy(b->dkr, b->dk + i0 * kvd, (size_t)(n * kvd) * 4);
	memcpy(b->dvr, b->dv + i0 * kvd, (size_t)(n * kvd) * 4);
	for (int64_t r = 0; r < n; r++) {
		const tensor_rope *rp = layer_rope(hp, l);
		const double *cs = b->cs + (i0 + r) * learn_rope_stride(hp) + (rp == &hp->rope ? 0 : hp->rope.n_rot);
		float *dq = b->dq + r * qd, *dk = b->dkr + r * kvd;
		lk_rope_t(rp, cs, dq, hp->n_heads, (int32_t)D);
		lk_rope_t(rp, cs, dk, hp->n_kv_heads, (int32_t)D);
		if (lw->q_norm) {
			float tmp[1024];
			for (int32_t h = 0; h < hp->n_heads; h++) {
				memset(tmp, 0, (size_t)D * 4);
				lk_rms_bwd(b->qraw + r * qd + h * D, lw->q_norm, D, hp->rms_eps, dq + h * D, tmp);
				memcpy(dq + h * D, tmp, (size_t)D * 4);
			}
			for (int32_t h = 0; h < hp->n_kv_heads; h++) {
				memset(tmp, 0, (size_t)D * 4);
				lk_rms_bwd(b->kraw + r * kvd + h * D, lw->k_norm, D, hp->rms_eps, dk + h * D, tmp);
				memcpy(dk + h * D, tmp, (size_t)D * 4);
			}
		}
	}
	memset(b->dh, 0, (size_t)(n * E) * 4);
	lk_mat_bwd(pool, KS, &lw->wq, 0, b->dq, qd, n, b->dh, E);
	lora_bwd(j, pool, learn_pair_of(a, l, MODEL_LORA_Q), b->h, b->lu[MODEL_LORA_Q], b->dq, n, b->dh);
	lk_mat_bwd(pool, KS, &lw->wk, 0, b->dkr, kvd, n, b->dh, E);
	lora_bwd(j, pool, learn_pair_of(a, l, MODEL_LORA_K), b->h, b->lu[MODEL_LORA_K], b->dkr, n, b->dh);
	lk_mat_bwd(pool, KS, &lw->wv, 0, b->dvr, kvd, n, b->dh, E);
	lora_bwd(j, pool, learn_pair_of(a, l, MODEL_LORA_V), b->h, b->lu[MODEL_LORA_V], b->dvr, n, b->dh);
	memcpy(dy, b->dxm, (size_t)(n * E) * 4);
	for (int64_t r = 0; r < n; r++) lk_rms_bwd(x + r * E, lw->attn_norm, E, hp->rms_eps, b->dh + r * E, dy + r * E);
}

// The output head and the loss over the chunk's learned rows; their gradient into dx.
static void head(learn_job *j, base_pool *pool, int64_t i0, int64_t n) {
	const model_hparams *hp = model_hparams_of(j->m);
	learn_buf *b = &j->b;
	const int64_t E = hp->n_embd, V = hp->n_vocab;
	const float cap = hp->final_softcap;
	const float *xl = b->xs + (size_t)hp->n_layers * j->T * E;
	int64_t nr = 0;
	for (int64_t i = i0; i < i0 + n; i++)
		if (b->tgt[i] >= 0) {
			b->hrow[nr] = (int32_t)i;
			tensor_rmsnorm(xl + i * E, j->io.output_norm, E, hp->rms_eps, b->hn + nr++ * E);
		}
	if (!nr) return;
	const lpair *po = learn_pair_of(j->a, -1, MODEL_LORA_OUTPUT);
	const double inv = 1.0 / (double)j->n_learned;
	memset(b->dhn, 0, (size_t)(nr * E) * 4);
	for (int64_t k0 = 0; k0 < nr; k0 += HEAD_ROWS) {
		const int64_t nk = nr - k0 < HEAD_ROWS ? nr - k0 : HEAD_ROWS;
		float *hn = b->hn + k0 * E, *dhn = b->dhn + k0 * E;
		lk_mat_fwd(pool, KS, &j->io.output, 0, hn, E, nk, b->lg, V, 1.0f, false);
		lora_fwd(j, pool, po, hn, nk, b->lu[MODEL_LORA_OUTPUT], b->lg);
		for (int64_t k = 0; k < nk; k++) {
			float *lg = b->lg + k * V;
			const int32_t tgt = b->tgt[b->hrow[k0 + k]];
			for (int64_t v = 0; cap != 0.0f && v < V; v++) lg[v] = tensor_softcap(lg[v], cap);
			float mx = lg[0];
			for (int64_t v = 1; v < V; v++) mx = lg[v] > mx ? lg[v] : mx;
			double sum = 0.0;
			for (int64_t v = 0; v < V; v++) sum += exp((double)lg[v] - mx);
			const double lse = mx + log(sum);
			j->loss_sum += lse - lg[tgt];
			for (int64_t v = 0; v < V; v++) {
				const double dcap = cap != 0.0f ? 1.0 - ((double)lg[v] / cap) * ((double)lg[v] / cap) : 1.0;
				lg[v] = (float)((exp((double)lg[v] - lse) - (v == tgt ? 1.0 : 0.0)) * inv * dcap);
			}
		}
		lk_mat_bwd(pool, KS, &j->io.output, 0, b->lg, V, nk, dhn, E);
		lora_bwd(j, pool, po, hn, b->lu[MODEL_LORA_OUTPUT], b->lg, nk, dhn);
	}
	for (int64_t k = 0; k < nr; k++)
		lk_rms_bwd(xl + (size_t)b->hrow[k] * E, j->io.output_norm, E, hp->rms_eps, b->dhn + k * E, b->dx + (size_t)b->hrow[k] * E);
}

// ---- the cursor ----------------------------------------------------------------------------------
static int64_t chunk_rows(const learn_job *j, int32_t c, int64_t *i0) {
	*i0 = (int64_t)c * j->P;
	return j->T - *i0 < j->P ? j->T - *i0 : j->P;
}

static int64_t chunk_learned(const learn_job *j, int32_t c) {
	int64_t i0, n = chunk_rows(j, c, &i0), cnt = 0;
	for (int64_t i = i0; i < i0 + n; i++) cnt += j->b.tgt[i] >= 0;
	return cnt;
}

// Moves the cursor past the current piece, skipping head pieces without learned rows.
static void advance(learn_job *j) {
	const int32_t L = model_hparams_of(j->m)->n_layers, C = j->n_chunks;
	switch (j->phase) {
	case PH_FWD:
		if (++j->chunk < C) return;
		j->chunk = 0;
		if (++j->layer < L) return;
		j->phase = PH_HEAD, j->chunk = -1;
		// fall through
	case PH_HEAD:
		while (++j->chunk < C)
			if (chunk_learned(j, j->chunk)) return;
		j->phase = PH_BWD, j->layer = L - 1, j->chunk = C - 1;
		return;
	case PH_BWD:
		if (--j->chunk >= 0) return;
		j->chunk = C - 1;
		if (--j->layer >= 0) return;
		j->phase = PH_DONE;
		return;
	}
}

double learn_piece_macs(const learn_job *j) {
	if (j->state != LEARN_RUNNING || j->phase == PH_DONE) return 0.0;
	const model_hparams *hp = model_hparams_of(j->m);
	int64_t i0;
	const int64_t n = chunk_rows(j, j->chunk, &i0);
	if (j->phase == PH_HEAD) return 2.0 * j->head_macs * (double)chunk_learned(j, j->chunk);
	double ctx = 0.0; // positions attended: each costs q.k and p.v over every head
	for (int64_t i = i0; i < i0 + n; i++) ctx += (double)(i - attn_first(&j->b, i, model_layer_window(hp, j->layer)) + 1);
	const double attn = 2.0 * ctx * (double)hp->n_heads * hp->head_dim, lay = j->lmacs[j->layer] * (double)n;
	return j->phase == PH_FWD ? lay + attn : 2.0 * lay + 3.0 * attn;
}

void learn_piece_run(learn_job *j, base_pool *pool) {
	const model_hparams *hp = model_hparams_of(j->m);
	int64_t i0;
	const int64_t n = chunk_rows(j, j->chunk, &i0), kvd = (int64_t)hp->n_kv_heads * hp->head_dim;
	switch (j->phase) {
	case PH_FWD: layer_fwd(j, pool, j->layer, i0, n); break;
	case PH_HEAD: head(j, pool, i0, n); break;
	case PH_BWD:
		if (j->chunk == j->n_chunks - 1) {
			memset(j->b.dk, 0, (size_t)(j->T * kvd) * 4);
			memset(j->b.dv, 0, (size_t)(j->T * kvd) * 4);
		}
		layer_bwd(j, pool, j->layer, i0, n);
		break;
	default: return;
	}
	advance(j);
}
