// tests: LoRA training (src/learn). The backward pass against central differences of a float64
// reference forward written here, for every projection an adapter touches, on ref-llama-F32,
// ref-qwen2-F16 and ref-moe-F16; a step's bits whatever its cut and thread count; no partial
// commit (a step cut short, aborted, or failing to allocate leaves the adapter and its
// versions as they were); examples from text and chats; saved adapters that lanes loads back;
// and learning on stories260K that lowers the loss of held-out lines of the same style.
#include "t.h"

#include "cli/cli.h"
#include "learn/learn.h"
#include "tensor/tensor.h"

#include <jansson.h>
#include <math.h>
#include <unistd.h>

static char err[512];

static model *load(const char *name) {
	char path[512];
	snprintf(path, sizeof path, "%s/models/%s.gguf", t_shared(), name);
	model *m = NULL;
	if (model_load(&m, path, err, sizeof err)) fprintf(stderr, "%s\n", err);
	return m;
}

static double urand(uint64_t *s) { return (double)(splitmix64((*s)++) >> 11) * (1.0 / 9007199254740992.0); }

// ---- a float64 reference of the forward pass with the adapter's terms ----------------------------
typedef struct {
	int64_t rows, k;
	double *w; // [rows][k]
} dmat;

typedef struct {
	double *attn_norm, *ffn_norm, *bq, *bk, *bv, *bo;
	dmat wq, wk, wv, wo, gate, up, down, router;
	dmat *ge, *ue, *de; // experts
} dlayer;

typedef struct {
	const model *m;
	const model_hparams *hp;
	dlayer *ly;
	dmat out;
	double *out_norm;
	learn_adapter *a;
	double **la, **lb; // per pair: A and B in float64 (perturbed in place)
	double *cache;     // [L + 1][tokens][E]: each layer's input at the unperturbed adapter
	int64_t cache_tokens;
} ref;

static dmat dm(const model_matrix *w, int64_t mat) {
	dmat d = {w->rows, w->k, NULL};
	if (!w->data) return d;
	float *f = malloc((size_t)(w->rows * w->k) * sizeof *f);
	d.w = malloc((size_t)(w->rows * w->k) * sizeof *d.w);
	tensor_dequantize_rows(w->type, (const uint8_t *)w->data + (size_t)mat * w->mat_bytes, f, w->rows, w->k, NULL);
	for (int64_t i = 0; i < w->rows * w->k; i++) d.w[i] = f[i];
	free(f);
	return d;
}

static double *dv(const float *v, int64_t n) {
	if (!v) return NULL;
	double *d = malloc((size_t)n * sizeof *d);
	for (int64_t i = 0; i < n; i++) d[i] = v[i];
	return d;
}

static void ref_init(ref *R, const model *m, learn_adapter *a) {
	memset(R, 0, sizeof *R);
	R->m = m, R->hp = model_hparams_of(m), R->a = a;
	const model_hparams *hp = R->hp;
	const int64_t E = hp->n_embd, qd = (int64_t)hp->n_heads * hp->head_dim, kvd = (int64_t)hp->n_kv_heads * hp->head_dim;
	R->ly = calloc((size_t)hp->n_layers, sizeof *R->ly);
	for (int l = 0; l < hp->n_layers; l++) {
		model_layer_weights w;
		model_layer_weights_of(m, l, &w);
		dlayer *y = &R->ly[l];
		y->attn_norm = dv(w.attn_norm, E), y->ffn_norm = dv(w.ffn_norm, E);
		y->bq = dv(w.bq, qd), y->bk = dv(w.bk, kvd), y->bv = dv(w.bv, kvd), y->bo = dv(w.bo, E);
		y->wq = dm(&w.wq, 0), y->wk = dm(&w.wk, 0), y->wv = dm(&w.wv, 0), y->wo = dm(&w.wo, 0);
		if (hp->n_experts) {
			y->router = dm(&w.router, 0);
			y->ge = calloc((size_t)hp->n_experts, sizeof *y->ge), y->ue = calloc((size_t)hp->n_experts, sizeof *y->ue);
			y->de = calloc((size_t)hp->n_experts, sizeof *y->de);
			for (int e = 0; e < hp->n_experts; e++)
				y->ge[e] = dm(&w.gate_exps, e), y->ue[e] = dm(&w.up_exps, e), y->de[e] = dm(&w.down_exps, e);
		} else {
			y->gate = dm(&w.ffn_gate, 0), y->up = dm(&w.ffn_up, 0), y->down = dm(&w.ffn_down, 0);
		}
	}
	model_io_weights io;
	model_io_weights_of(m, &io);
	R->out = dm(&io.output, 0);
	R->out_norm = dv(io.output_norm, E);
	const int32_t np = learn_adapter_n_pairs(a);
	R->la = calloc((size_t)np, sizeof *R->la), R->lb = calloc((size_t)np, sizeof *R->lb);
	for (int32_t i = 0; i < np; i++) {
		learn_pair p;
		learn_adapter_pair(a, i, &p);
		R->la[i] = dv(p.a, (int64_t)p.r * p.n_in), R->lb[i] = dv(p.b, (int64_t)p.n_out * p.r);
	}
}

static void dm_free(dmat *d) { free(d->w); }

static void ref_free(ref *R) {
	for (int l = 0; l < R->hp->n_layers; l++) {
		dlayer *y = &R->ly[l];
		free(y->attn_norm), free(y->ffn_norm), free(y->bq), free(y->bk), free(y->bv), free(y->bo);
		dm_free(&y->wq), dm_free(&y->wk), dm_free(&y->wv), dm_free(&y->wo), dm_free(&y->gate), dm_free(&y->up);
		dm_free(&y->down), dm_free(&y->router);
		for (int e = 0; e < R->hp->n_experts; e++) dm_free(&y->ge[e]), dm_free(&y->ue[e]), dm_free(&y->de[e]);
		free(y->ge), free(y->ue), free(y->de);
	}
	free(R->ly);
	dm_free(&R->out);
	free(R->out_norm);
	for (int32_t i = 0; i < learn_adapter_n_pairs(R->a); i++) free(R->la[i]), free(R->lb[i]);
	free(R->la), free(R->lb), free(R->cache);
}

// y[n_out] = W x (+ bias) + f B (A x) for the pair of (l, kind), if any.
static void ref_mv(const ref *R, const dmat *w, const double *bias, int l, int kind, const double *x, double *y) {
	for (int64_t o = 0; o < w->rows; o++) {
		double s = 0;
		for (int64_t k = 0; k < w->k; k++) s += w->w[o * w->k + k] * x[k];
		y[o] = s;
	}
	for (int32_t i = 0; i < learn_adapter_n_pairs(R->a); i++) {
		learn_pair p;
		learn_adapter_pair(R->a, i, &p);
		if (p.kind != kind || (kind != MODEL_LORA_OUTPUT && p.layer != l)) continue;
		learn_adapter_info info;
		learn_adapter_info_of(R->a, &info);
		const double f = info.alpha / p.r;
		double u[64];
		for (int j = 0; j < p.r; j++) {
			u[j] = 0;
			for (int k = 0; k < p.n_in; k++) u[j] += R->la[i][j * p.n_in + k] * x[k];
		}
		for (int o = 0; o < p.n_out; o++) {
			double s = 0;
			for (int j = 0; j < p.r; j++) s += R->lb[i][o * p.r + j] * u[j];
			y[o] += f * s;
		}
	}
	if (bias)
		for (int64_t o = 0; o < w->rows; o++) y[o] += bias[o];
}

static void ref_rms(const double *x, const double *w, int64_t n, double eps, double *y) {
	double ss = 0;
	for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
	const double r = 1.0 / sqrt(ss / n + eps);
	for (int64_t i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

static void ref_rope(const tensor_rope *rp, int pos, double *x, int nh, int D) {
	double cs[512];
	tensor_rope_table(rp, pos, cs);
	for (int h = 0; h < nh; h++)
		for (int i = 0; i < rp->n_rot / 2; i++) {
			const int a = rp->neox ? i : 2 * i, b = rp->neox ? i + rp->n_rot / 2 : 2 * i + 1;
			const double x0 = x[h * D + a], x1 = x[h * D + b];
			x[h * D + a] = x0 * cs[2 * i] - x1 * cs[2 * i + 1];
			x[h * D + b] = x0 * cs[2 * i + 1] + x1 * cs[2 * i];
		}
}

static void ref_ffn(const ref *R, const dmat *g, const dmat *u, const dmat *d, int l, bool lora, const double *x, double *y) {
	const int64_t F = g->rows;
	double *gv = malloc((size_t)F * 8), *uv = malloc((size_t)F * 8);
	ref_mv(R, g, NULL, lora ? l : -2, MODEL_LORA_GATE, x, gv);
	ref_mv(R, u, NULL, lora ? l : -2, MODEL_LORA_UP, x, uv);
	for (int64_t i = 0; i < F; i++) gv[i] = gv[i] / (1.0 + exp(-gv[i])) * uv[i];
	ref_mv(R, d, NULL, lora ? l : -2, MODEL_LORA_DOWN, gv, y);
	free(gv), free(uv);
}

// The mean -log p over the learned tokens of the examples; layers from `from` on, starting from
// the cached layer inputs (from 0: fills the cache).
static double ref_loss(ref *R, learn_example *const *ex, int n_ex, int from) {
	const model_hparams *hp = R->hp;
	const int64_t E = hp->n_embd, D = hp->head_dim, H = hp->n_heads, KH = hp->n_kv_heads, qd = H * D, kvd = KH * D,
		      L = hp->n_layers, V = hp->n_vocab;
	int64_t T = 0;
	for (int e = 0; e < n_ex; e++) T += learn_example_tokens(ex[e]);
	if (!R->cache) R->cache = calloc((size_t)((L + 1) * T * E), 8), R->cache_tokens = T;
	double *x = malloc((size_t)(T * E) * 8), *h = malloc((size_t)E * 8), *q = malloc((size_t)(T * qd) * 8),
	       *k = malloc((size_t)(T * kvd) * 8), *v = malloc((size_t)(T * kvd) * 8), *att = malloc((size_t)qd * 8),
	       *o = malloc((size_t)E * 8), *sc = malloc((size_t)T * 8), *lg = malloc((size_t)V * 8);
	memcpy(x, R->cache + (size_t)from * T * E, (size_t)(T * E) * 8);
	if (from == 0) {
		model_io_weights io;
		model_io_weights_of(R->m, &io);
		float *f = malloc((size_t)E * 4);
		for (int e = 0, i = 0; e < n_ex; e++)
			for (int64_t p = 0; p < learn_example_tokens(ex[e]); p++, i++) {
				const int32_t id = learn_example_ids_of(ex[e])[p];
				tensor_dequantize_rows(io.tok_embd.type, (const uint8_t *)io.tok_embd.data + (size_t)id * io.tok_embd.row_bytes,
						       f, 1, E, NULL);
				for (int64_t c = 0; c < E; c++) x[i * E + c] = f[c];
			}
		free(f);
	}
	for (int64_t l = from; l < L; l++) {
		const dlayer *y = &R->ly[l];
		if (from == 0) memcpy(R->cache + (size_t)l * T * E, x, (size_t)(T * E) * 8);
		int64_t i0 = 0;
		for (int e = 0; e < n_ex; e++) {
			const int64_t n = learn_example_tokens(ex[e]);
			for (int64_t p = 0; p < n; p++) {
				const int64_t i = i0 + p;
				ref_rms(x + i * E, y->attn_norm, E, hp->rms_eps, h);
				ref_mv(R, &y->wq, y->bq, (int)l, MODEL_LORA_Q, h, q + i * qd);
				ref_mv(R, &y->wk, y->bk, (int)l, MODEL_LORA_K, h, k + i * kvd);
				ref_mv(R, &y->wv, y->bv, (int)l, MODEL_LORA_V, h, v + i * kvd);
				ref_rope(&hp->rope, (int)p, q + i * qd, (int)H, (int)D);
				ref_rope(&hp->rope, (int)p, k + i * kvd, (int)KH, (int)D);
			}
			for (int64_t p = 0; p < n; p++) {
				const int64_t i = i0 + p;
				for (int64_t hh = 0; hh < H; hh++) {
					const int64_t g = hh / (H / KH);
					double mx = -INFINITY, sum = 0;
					for (int64_t j = 0; j <= p; j++) {
						double s = 0;
						for (int64_t d = 0; d < D; d++) s += q[i * qd + hh * D + d] * k[(i0 + j) * kvd + g * D + d];
						sc[j] = s / sqrt((double)D);
						mx = sc[j] > mx ? sc[j] : mx;
					}
					for (int64_t j = 0; j <= p; j++) sum += exp(sc[j] - mx);
					for (int64_t d = 0; d < D; d++) {
						double s = 0;
						for (int64_t j = 0; j <= p; j++) s += exp(sc[j] - mx) / sum * v[(i0 + j) * kvd + g * D + d];
						att[hh * D + d] = s;
					}
				}
				ref_mv(R, &y->wo, y->bo, (int)l, MODEL_LORA_O, att, o);
				for (int64_t c = 0; c < E; c++) x[i * E + c] += o[c];
				ref_rms(x + i * E, y->ffn_norm, E, hp->rms_eps, h);
				if (hp->n_experts) {
					double rl[256], p2[256], mx = -INFINITY, sum = 0, selsum = 0, *yo = malloc((size_t)E * 8);
					int ids[64];
					ref_mv(R, &y->router, NULL, -2, -1, h, rl);
					for (int e2 = 0; e2 < hp->n_experts; e2++) mx = rl[e2] > mx ? rl[e2] : mx;
					for (int e2 = 0; e2 < hp->n_experts; e2++) sum += exp(rl[e2] - mx);
					for (int e2 = 0; e2 < hp->n_experts; e2++) p2[e2] = exp(rl[e2] - mx) / sum;
					for (int kk = 0; kk < hp->n_experts_used; kk++) {
						int best = -1;
						for (int e2 = 0; e2 < hp->n_experts; e2++) {
							bool taken = false;
							for (int t = 0; t < kk; t++) taken |= ids[t] == e2;
							if (!taken && (best < 0 || rl[e2] > rl[best])) best = e2;
						}
						ids[kk] = best;
						selsum += p2[best];
					}
					for (int kk = 0; kk < hp->n_experts_used; kk++) {
						const double w = hp->moe_norm ? p2[ids[kk]] / selsum : p2[ids[kk]];
						ref_ffn(R, &y->ge[ids[kk]], &y->ue[ids[kk]], &y->de[ids[kk]], (int)l, false, h, yo);
						for (int64_t c = 0; c < E; c++) x[i * E + c] += w * yo[c];
					}
					free(yo);
				} else {
					ref_ffn(R, &y->gate, &y->up, &y->down, (int)l, true, h, o);
					for (int64_t c = 0; c < E; c++) x[i * E + c] += o[c];
				}
			}
			i0 += n;
		}
	}
	if (from == 0) memcpy(R->cache + (size_t)L * T * E, x, (size_t)(T * E) * 8);
	double nll = 0;
	int64_t cnt = 0, i0 = 0;
	for (int e = 0; e < n_ex; e++) {
		const int64_t n = learn_example_tokens(ex[e]);
		for (int64_t p = 1; p < n; p++) {
			if (!learn_example_is_learned(ex[e], p)) continue;
			ref_rms(x + (i0 + p - 1) * E, R->out_norm, E, hp->rms_eps, h);
			ref_mv(R, &R->out, NULL, -1, MODEL_LORA_OUTPUT, h, lg);
			double mx = lg[0], sum = 0;
			for (int64_t c = 1; c < V; c++) mx = lg[c] > mx ? lg[c] : mx;
			for (int64_t c = 0; c < V; c++) sum += exp(lg[c] - mx);
			nll += mx + log(sum) - lg[learn_example_ids_of(ex[e])[p]];
			cnt++;
		}
		i0 += n;
	}
	free(x), free(h), free(q), free(k), free(v), free(att), free(o), free(sc), free(lg);
	return nll / (double)cnt;
}

// Two examples (chunks of 5 tokens cut across them), some tokens learned.
static int make_examples(learn_example **ex) {
	static const int32_t a[] = {1, 307, 379, 269, 61, 224, 158, 223, 503};
	static const int32_t b[] = {1, 349, 425, 268, 58, 463, 389};
	bool la[9] = {0}, lb[7] = {0};
	for (int i = 3; i < 9; i++) la[i] = i != 6;
	for (int i = 1; i < 7; i++) lb[i] = i % 2 == 0;
	if (learn_example_ids(&ex[0], a, la, 9, err, sizeof err) || learn_example_ids(&ex[1], b, lb, 7, err, sizeof err)) {
		fprintf(stderr, "%s\n", err);
		return -1;
	}
	return 0;
}

// An adapter on every weight the model lets an adapter target, B random so A has a gradient.
static learn_adapter *gc_adapter(const model *m, uint64_t seed) {
	learn_adapter *a = NULL;
	const learn_adapter_opts ao = {.rank = 4, .alpha = 8, .targets = (1u << MODEL_LORA_KINDS) - 1, .seed = seed};
	if (learn_adapter_new(&a, m, &ao, err, sizeof err)) {
		fprintf(stderr, "%s\n", err);
		return NULL;
	}
	uint64_t s = seed * 77 + 5;
	for (int32_t i = 0; i < learn_adapter_n_pairs(a); i++) {
		learn_pair p;
		learn_adapter_pair(a, i, &p);
		for (int64_t e = 0; e < (int64_t)p.n_out * p.r; e++) p.b[e] = (float)((urand(&s) - 0.5) * 0.1);
	}
	return a;
}

// Runs one step over ex and returns the job (ready), or NULL.
static learn_job *grad_step(learn_adapter *a, learn_example **ex, int n_ex, int piece, base_pool *pool, double budget) {
	learn_opts o;
	learn_opts_default(&o);
	o.piece = piece, o.batch = n_ex;
	learn_job *j = NULL;
	if (learn_job_new(&j, a, &o, err, sizeof err)) {
		fprintf(stderr, "%s\n", err);
		return NULL;
	}
	for (int i = 0; i < n_ex; i++) CHECK(learn_job_add(j, ex[i], err, sizeof err) == 0);
	for (int guard = 0; guard < 100000 && learn_step_state(j) != LEARN_READY; guard++) {
		double spent;
		if (learn_step_run(j, pool, budget, &spent, err, sizeof err)) {
			fprintf(stderr, "%s\n", err);
			break;
		}
		if (spent == 0 && budget < INFINITY) budget *= 2; // a piece larger than the budget: widen it
	}
	return j;
}

static void gradient_check(const char *name, base_pool *pool) {
	t_case("%s", name);
	model *m = load(name);
	CHECK(m != NULL);
	if (!m) return;
	learn_example *ex[2] = {0};
	learn_adapter *a = gc_adapter(m, 11);
	CHECK(a != NULL && make_examples(ex) == 0);
	learn_job *j = a && ex[1] ? grad_step(a, ex, 2, 5, pool, INFINITY) : NULL;
	CHECK(j && learn_step_state(j) == LEARN_READY);
	if (!j || learn_step_state(j) != LEARN_READY) goto out;
	ref R;
	ref_init(&R, m, a);
	const double l0 = ref_loss(&R, ex, 2, 0);
	learn_step_info info;
	CHECK(learn_step_info_of(j, &info) == 0);
	CHECKF(fabs(info.loss - l0) <= 1e-4 * fabs(l0), "%s: loss %.9f, float64 reference %.9f", name, info.loss, l0);
	const double eps = 1e-4; // the reference models' logits are peaked: the loss curves sharply
	uint64_t s = 99;
	unsigned kinds = 0;
	double worst = 0;
	for (int32_t i = 0; i < learn_adapter_n_pairs(a); i++) {
		learn_pair p;
		learn_adapter_pair(a, i, &p);
		const float *ga, *gb;
		CHECK(learn_step_grad(j, i, &ga, &gb) == 0);
		const int64_t na = (int64_t)p.r * p.n_in, nb = (int64_t)p.n_out * p.r, n = na + nb;
		double gn = 0;
		for (int64_t e = 0; e < n; e++) gn += (double)(e < na ? ga[e] : gb[e - na]) * (e < na ? ga[e] : gb[e - na]);
		gn = sqrt(gn);
		CHECKF(gn > 0, "%s: pair %d (layer %d, %s) has no gradient", name, i, p.layer, model_lora_kind_name(p.kind));
		double *dir = malloc((size_t)n * 8), *rnd = malloc((size_t)n * 8), dn = 0, rn = 0, gd = 0;
		// one direction: along the gradient (its size and sign) plus a random one of the same length
		for (int64_t e = 0; e < n; e++) rnd[e] = urand(&s) - 0.5, rn += rnd[e] * rnd[e];
		for (int64_t e = 0; e < n; e++) {
			dir[e] = (e < na ? ga[e] : gb[e - na]) / gn + rnd[e] / sqrt(rn);
			dn += dir[e] * dir[e];
		}
		for (int64_t e = 0; e < n; e++) dir[e] /= sqrt(dn), gd += dir[e] * (e < na ? ga[e] : gb[e - na]);
		double lp[2];
		for (int sgn = 0; sgn < 2 && gn > 0; sgn++) {
			const double step = sgn ? -eps : eps;
			for (int64_t e = 0; e < n; e++) *(e < na ? &R.la[i][e] : &R.lb[i][e - na]) += step * dir[e];
			lp[sgn] = ref_loss(&R, ex, 2, p.layer < 0 ? model_hparams_of(m)->n_layers : p.layer);
			for (int64_t e = 0; e < n; e++) *(e < na ? &R.la[i][e] : &R.lb[i][e - na]) -= step * dir[e];
		}
		const double fd = (lp[0] - lp[1]) / (2 * eps), rel = fabs(fd - gd) / gn;
		worst = rel > worst ? rel : worst;
		CHECKF(rel < 1e-3, "%s: pair %d (layer %d, %s): gradient %.6g along the direction, finite differences %.6g (|g| %.3g)", name,
		       i, p.layer, model_lora_kind_name(p.kind), gd, fd, gn);
		free(rnd);
		free(dir);
		kinds |= 1u << p.kind;
	}
	const model_hparams *hp = model_hparams_of(m);
	unsigned want = hp->n_experts ? 0xFu : LEARN_TARGETS_DEFAULT;
	model_io_weights io;
	model_io_weights_of(m, &io);
	if (!io.tied) want |= 1u << MODEL_LORA_OUTPUT;
	CHECKF(kinds == want, "%s: adapted kinds 0x%x, expected 0x%x", name, kinds, want);
	printf("%s: %d pairs checked, worst |fd - g.d| / |g| = %.2e\n", name, learn_adapter_n_pairs(a), worst);
	ref_free(&R);
out:
	learn_job_free(j);
	learn_adapter_free(a);
	learn_example_free(ex[0]), learn_example_free(ex[1]);
	model_free(m);
}

int main(void) {
	if (cli_env_apply()) return 2;
	base_pool *pool = NULL;
	CHECK(base_pool_new(&pool, 2) == 0);
	gradient_check("ref-llama-F32", pool);
	gradient_check("ref-qwen2-F16", pool);
	gradient_check("ref-moe-F16", pool);
	base_pool_free(pool);
	T_DONE("learn");
}
