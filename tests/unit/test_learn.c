// tests: LoRA training (src/learn). The backward pass against central differences of a float64
// reference forward written here, for every projection an adapter touches, on ref-llama-F32,
// ref-qwen2-F16 and ref-moe-F16; a step's bits whatever its cut and thread count; no partial
// commit (a step cut short, aborted, or failing to allocate leaves the adapter and its
// versions as they were); examples from text and chats; saved adapters that lanes loads back;
// and learning on stories260K that lowers the loss of held-out lines of the same style.
#include "gen.h"
#include "t.h"
#include "stories.h"

#include "cli/cli.h"
#include "learn/learn.h"
#include "template/template.h"
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

static void tmp_path(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/lanes-learn-%d-%s", t_tmp(), (int)getpid(), name); }

static double urand(uint64_t *s) { return (double)(splitmix64((*s)++) >> 11) * (1.0 / 9007199254740992.0); }

// ---- a float64 reference of the forward pass with the adapter's terms ----------------------------
typedef struct {
	int64_t rows, k;
	double *w; // [rows][k]
} dmat;

typedef struct {
	double *attn_norm, *ffn_norm, *bq, *bk, *bv, *bo, *q_norm, *k_norm;
	double *attn_post_norm, *ffn_post_norm, *sinks, *router_b, *ge_b, *ue_b, *de_b; // gemma's post norms, gpt-oss's sinks and biases
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
		y->q_norm = dv(w.q_norm, hp->head_dim), y->k_norm = dv(w.k_norm, hp->head_dim);
		y->attn_post_norm = dv(w.attn_post_norm, E), y->ffn_post_norm = dv(w.ffn_post_norm, E), y->sinks = dv(w.sinks, hp->n_heads);
		y->router_b = dv(w.router_b, hp->n_experts), y->ge_b = dv(w.gate_exps_b, (int64_t)hp->n_experts * hp->n_ff_exp);
		y->ue_b = dv(w.up_exps_b, (int64_t)hp->n_experts * hp->n_ff_exp), y->de_b = dv(w.down_exps_b, (int64_t)hp->n_experts * E);
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
		free(y->attn_norm), free(y->ffn_norm), free(y->bq), free(y->bk), free(y->bv), free(y->bo), free(y->q_norm), free(y->k_norm);
		free(y->attn_post_norm), free(y->ffn_post_norm), free(y->sinks), free(y->router_b), free(y->ge_b), free(y->ue_b), free(y->de_b);
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

// y[n_out] = W x (+ bias) + f B (A x) for the pair of (l, kind), if any. The reference's inner
// loop over its own arrays goes unchecked by the sanitizers: the code under test is checked.
__attribute__((no_sanitize("address", "undefined"))) static void ref_mv(const ref *R, const dmat *w, const double *bias, int l, int kind, const double *x, double *y) {
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

// The FFN's gate activation times up: SiLU, Gemma's GELU (tanh form) or gpt-oss's clamped SwiGLU.
static double ref_glu(const model_hparams *hp, double g, double u) {
	if (hp->oai) {
		const double x = g < 7.0 ? g : 7.0, y = u < -7.0 ? -7.0 : u > 7.0 ? 7.0 : u;
		return x / (1.0 + exp(-1.702 * x)) * (y + 1.0);
	}
	if (hp->geglu) return 0.5 * g * (1.0 + tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))) * u;
	return g / (1.0 + exp(-g)) * u;
}

static void ref_ffn(const ref *R, const dmat *g, const dmat *u, const dmat *d, const double *bg, const double *bu, const double *bd,
		    int l, bool lora, const double *x, double *y) {
	const int64_t F = g->rows;
	double *gv = malloc((size_t)F * 8), *uv = malloc((size_t)F * 8);
	ref_mv(R, g, bg, lora ? l : -2, MODEL_LORA_GATE, x, gv);
	ref_mv(R, u, bu, lora ? l : -2, MODEL_LORA_UP, x, uv);
	for (int64_t i = 0; i < F; i++) gv[i] = ref_glu(R->hp, gv[i], uv[i]);
	ref_mv(R, d, bd, lora ? l : -2, MODEL_LORA_DOWN, gv, y);
	free(gv), free(uv);
}

static double ref_cap(double x, double cap) { return cap != 0.0 ? cap * tanh(x / cap) : x; }

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
				for (int64_t c = 0; c < E; c++) x[i * E + c] = (double)f[c] * hp->embd_scale;
			}
		free(f);
	}
	for (int64_t l = from; l < L; l++) {
		const dlayer *y = &R->ly[l];
		const int64_t win = model_layer_window(hp, (int32_t)l);
		const tensor_rope *rp = hp->rope_swa.n_rot && win ? &hp->rope_swa : &hp->rope;
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
				for (int64_t hh = 0; y->q_norm && hh < H; hh++) ref_rms(q + i * qd + hh * D, y->q_norm, D, hp->rms_eps, q + i * qd + hh * D);
				for (int64_t hh = 0; y->k_norm && hh < KH; hh++) ref_rms(k + i * kvd + hh * D, y->k_norm, D, hp->rms_eps, k + i * kvd + hh * D);
				ref_rope(rp, (int)p, q + i * qd, (int)H, (int)D);
				ref_rope(rp, (int)p, k + i * kvd, (int)KH, (int)D);
			}
			for (int64_t p = 0; p < n; p++) {
				const int64_t i = i0 + p;
				for (int64_t hh = 0; hh < H; hh++) {
					const int64_t g = hh / (H / KH), j0 = win && p - win + 1 > 0 ? p - win + 1 : 0;
					double mx = y->sinks ? y->sinks[hh] : -INFINITY, sum = 0;
					for (int64_t j = j0; j <= p; j++) {
						double s = 0;
						for (int64_t d = 0; d < D; d++) s += q[i * qd + hh * D + d] * k[(i0 + j) * kvd + g * D + d];
						sc[j] = ref_cap(s * hp->attn_scale, hp->attn_softcap);
						mx = sc[j] > mx ? sc[j] : mx;
					}
					if (y->sinks) sum = exp(y->sinks[hh] - mx);
					for (int64_t j = j0; j <= p; j++) sum += exp(sc[j] - mx);
					for (int64_t d = 0; d < D; d++) {
						double s = 0;
						for (int64_t j = j0; j <= p; j++) s += exp(sc[j] - mx) / sum * v[(i0 + j) * kvd + g * D + d];
						att[hh * D + d] = s;
					}
				}
				ref_mv(R, &y->wo, y->bo, (int)l, MODEL_LORA_O, att, o);
				if (y->attn_post_norm) ref_rms(o, y->attn_post_norm, E, hp->rms_eps, o);
				for (int64_t c = 0; c < E; c++) x[i * E + c] += o[c];
				ref_rms(x + i * E, y->ffn_norm, E, hp->rms_eps, h);
				if (hp->n_experts) {
					double rl[256], p2[256], mx = -INFINITY, sum = 0, selsum = 0, *yo = malloc((size_t)E * 8);
					int ids[64];
					ref_mv(R, &y->router, y->router_b, -2, -1, h, rl);
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
						const int64_t F = hp->n_ff_exp, xe = ids[kk];
						ref_ffn(R, &y->ge[xe], &y->ue[xe], &y->de[xe], y->ge_b ? y->ge_b + xe * F : NULL, y->ue_b ? y->ue_b + xe * F : NULL,
							y->de_b ? y->de_b + xe * E : NULL, (int)l, false, h, yo);
						for (int64_t c = 0; c < E; c++) x[i * E + c] += w * yo[c];
					}
					free(yo);
				} else {
					ref_ffn(R, &y->gate, &y->up, &y->down, NULL, NULL, NULL, (int)l, true, h, o);
					if (y->ffn_post_norm) ref_rms(o, y->ffn_post_norm, E, hp->rms_eps, o);
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
			for (int64_t c = 0; c < V; c++) lg[c] = ref_cap(lg[c], hp->final_softcap);
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

// Two examples longer than the test shapes' window of 16, learned past it.
static int make_long_examples(learn_example **ex) {
	int32_t a[26], b[21];
	bool la[26] = {0}, lb[21] = {0};
	for (int i = 0; i < 26; i++) a[i] = i ? 3 + (i * 149) % 500 : 1, la[i] = i >= 2 && i % 3 != 1;
	for (int i = 0; i < 21; i++) b[i] = i ? 5 + (i * 211) % 500 : 1, lb[i] = i >= 12;
	if (learn_example_ids(&ex[0], a, la, 26, err, sizeof err) || learn_example_ids(&ex[1], b, lb, 21, err, sizeof err)) {
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

static double eval_loss(const model *m, const model_lora *l, base_pool *pool, learn_example **ex, int n, double *nll) {
	int64_t cnt = 0;
	if (learn_eval(m, l, pool, (const learn_example *const *)ex, n, nll, &cnt, err, sizeof err)) {
		fprintf(stderr, "%s\n", err);
		return -1;
	}
	return cnt ? *nll / (double)cnt : -1;
}

// Every pair of the model's adapter (all_layers), or those of its first and last layers and the head.
static void gradient_check(const char *name, const char *path, base_pool *pool, bool all_layers) {
	t_case("%s", name);
	model *m = NULL;
	if (path && model_load(&m, path, err, sizeof err)) fprintf(stderr, "%s\n", err);
	if (!path) m = load(name);
	CHECK(m != NULL);
	if (!m) return;
	learn_example *ex[2] = {0};
	learn_adapter *a = gc_adapter(m, 11);
	CHECK(a != NULL && (model_hparams_of(m)->n_swa ? make_long_examples(ex) : make_examples(ex)) == 0);
	learn_job *j = a && ex[1] ? grad_step(a, ex, 2, 5, pool, INFINITY) : NULL;
	CHECK(j && learn_step_state(j) == LEARN_READY);
	if (!j || learn_step_state(j) != LEARN_READY) goto out;
	ref R;
	ref_init(&R, m, a);
	const double l0 = ref_loss(&R, ex, 2, 0);
	learn_step_info info;
	CHECK(learn_step_info_of(j, &info) == 0);
	CHECKF(fabs(info.loss - l0) <= 1e-4 * fabs(l0), "%s: loss %.9f, float64 reference %.9f", name, info.loss, l0);
	// what training computes is what serving computes: the adapter served gives the same loss
	model_lora *lv = NULL;
	double nll = 0;
	CHECK(learn_adapter_lora(a, &lv, err, sizeof err) == 0);
	const double ls = lv ? eval_loss(m, lv, NULL, ex, 2, &nll) : -1;
	CHECKF(fabs(ls - info.loss) <= 2e-3 * fabs(info.loss), "%s: trained loss %.6f, served %.6f", name, info.loss, ls);
	printf("%s: loss %.6f trained, %.6f served\n", name, info.loss, ls);
	model_lora_free(lv);
	// and from its file, in the names lanes loads (phi3: its fused matrices' row blocks)
	char file[512];
	tmp_path(file, sizeof file, "gc-adapter.gguf");
	lv = NULL;
	CHECKF(learn_adapter_save(a, file, GGUF_T_F32, err, sizeof err) == 0 && model_lora_load(&lv, m, file, err, sizeof err) == 0, "%s: %s",
	       name, err);
	const double lf = lv ? eval_loss(m, lv, NULL, ex, 2, &nll) : -1;
	CHECKF(lf == ls, "%s: served from the file %.6f, from memory %.6f", name, lf, ls);
	model_lora_free(lv);
	unlink(file);
	const double eps = 1e-4; // the reference models' logits are peaked: the loss curves sharply
	uint64_t s = 99;
	unsigned kinds = 0;
	int checked = 0;
	double worst = 0;
	for (int32_t i = 0; i < learn_adapter_n_pairs(a); i++) {
		learn_pair p;
		learn_adapter_pair(a, i, &p);
		if (!all_layers && p.layer > 0 && p.layer < model_hparams_of(m)->n_layers - 1) continue;
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
		checked++;
	}
	const model_hparams *hp = model_hparams_of(m);
	unsigned want = hp->n_experts ? 0xFu : LEARN_TARGETS_DEFAULT;
	model_io_weights io;
	model_io_weights_of(m, &io);
	if (!io.tied) want |= 1u << MODEL_LORA_OUTPUT;
	CHECKF(kinds == want, "%s: adapted kinds 0x%x, expected 0x%x", name, kinds, want);
	printf("%s: %d pairs checked, worst |fd - g.d| / |g| = %.2e\n", name, checked, worst);
	ref_free(&R);
out:
	learn_job_free(j);
	learn_adapter_free(a);
	learn_example_free(ex[0]), learn_example_free(ex[1]);
	model_free(m);
}

// ---- the kernel sets' training products against plain float64 ------------------------------------
static void kernel_sets(void) {
	const char *names[8];
	const int ns = tensor_kernels_available(names, 8);
	uint64_t s = 1;
	for (int k = 0; k < ns; k++) {
		const tensor_kernels *ks = tensor_kernels_find(names[k]);
		t_case("kernels %s", names[k]);
		// rows: the same bits as the type's reference converter
		const uint32_t types[] = {GGUF_T_F32, GGUF_T_F16, GGUF_T_BF16, GGUF_T_Q4_0, GGUF_T_Q4_1, GGUF_T_Q5_0,
					  GGUF_T_Q5_1, GGUF_T_Q8_0, GGUF_T_Q2_K, GGUF_T_Q3_K, GGUF_T_Q4_K, GGUF_T_Q5_K, GGUF_T_Q6_K,
					  GGUF_T_IQ4_NL, GGUF_T_IQ4_XS, GGUF_T_TQ1_0, GGUF_T_TQ2_0, GGUF_T_IQ3_XXS, GGUF_T_IQ3_S,
					  GGUF_T_IQ2_XXS, GGUF_T_IQ2_XS, GGUF_T_IQ2_S, GGUF_T_IQ1_S, GGUF_T_IQ1_M, GGUF_T_MXFP4};
		float src[512], a[512], b[512];
		uint8_t q[4096];
		for (int i = 0; i < 512; i++) src[i] = (float)(urand(&s) * 4 - 2);
		for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
			const tensor_traits *tt = tensor_traits_of(types[t]);
			tt->from_f32(src, q, 512);
			tt->to_f32(q, a, 512);
			tensor_k_f32_rows(ks, types[t], q, b, 512);
			CHECKF(!memcmp(a, b, sizeof a), "%s: %s rows differ from the reference converter", names[k], tt->name);
		}
		// the products: within float rounding of float64, and a row's bits whatever the rows beside it
		enum { N = 11, KN = 37, LD = 40 };
		float wt[KN * 16], x[N * LD], y[N * 16], y1[16], w[16 * LD], dy[N * 16], dx[N * LD], dx1[LD];
		for (int i = 0; i < KN * 16; i++) wt[i] = (float)(urand(&s) - 0.5);
		for (int i = 0; i < N * LD; i++) x[i] = (float)(urand(&s) - 0.5), dx[i] = (float)(urand(&s) - 0.5);
		for (int i = 0; i < N * 16; i++) y[i] = (float)(urand(&s) - 0.5), dy[i] = (float)(urand(&s) - 0.5);
		for (int i = 0; i < 16 * LD; i++) w[i] = (float)(urand(&s) - 0.5);
		float y0[N * 16], dx0[N * LD];
		memcpy(y0, y, sizeof y), memcpy(dx0, dx, sizeof dx);
		tensor_k_f32_fwd(ks, wt, KN, x, LD, N, y);
		tensor_k_f32_bwd(ks, w, LD, 13, KN, dy, 16, N, dx, LD);
		double worst = 0;
		bool rows_alone = true;
		for (int i = 0; i < N; i++) {
			for (int o = 0; o < 16; o++) {
				double r = y0[i * 16 + o];
				for (int c = 0; c < KN; c++) r += (double)x[i * LD + c] * wt[c * 16 + o];
				worst = fmax(worst, fabs(r - y[i * 16 + o]));
			}
			for (int c = 0; c < KN; c++) {
				double r = dx0[i * LD + c];
				for (int o = 0; o < 13; o++) r += (double)dy[i * 16 + o] * w[o * LD + c];
				worst = fmax(worst, fabs(r - dx[i * LD + c]));
			}
			memcpy(y1, y0 + i * 16, sizeof y1);
			memcpy(dx1, dx0 + i * LD, sizeof dx1);
			tensor_k_f32_fwd(ks, wt, KN, x + i * LD, LD, 1, y1);
			tensor_k_f32_bwd(ks, w, LD, 13, KN, dy + i * 16, 16, 1, dx1, LD);
			rows_alone &= !memcmp(y1, y + i * 16, sizeof y1) && !memcmp(dx1, dx + i * LD, KN * sizeof(float));
		}
		CHECKF(worst < 1e-5, "%s: the training products are %g off float64", names[k], worst);
		float tr[LD * 16];
		tensor_k_f32_t16(ks, w, LD, 37, tr);
		bool transposed = true;
		for (int r = 0; r < 16; r++)
			for (int c = 0; c < 37; c++) transposed &= tr[c * 16 + r] == w[r * LD + c];
		CHECKF(transposed, "%s: a tile transposed wrongly", names[k]);
		CHECKF(rows_alone, "%s: a row's products depend on the rows beside it", names[k]);
	}
}

// A qwen3 model (per-head q and k norms) made from ref-llama-F32: its metadata under qwen3's
// names, norms of random scale added.
static int make_qwen3(const char *path) {
	char src[512];
	snprintf(src, sizeof src, "%s/models/ref-llama-F32.gguf", t_shared());
	gguf *g = NULL;
	gguf_writer *w = gguf_writer_new();
	int rc = gguf_open(&g, src, err, sizeof err);
	for (int64_t i = 0; !rc && i < gguf_n_kv(g); i++) {
		const gguf_kv *kv = gguf_kv_at(g, i);
		char key[256];
		snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
		if (!strncmp(key, "llama.", 6)) {
			char k2[260];
			snprintf(k2, sizeof k2, "qwen3.%s", key + 6);
			rc = gguf_writer_set(w, k2, &kv->val);
		} else {
			rc = gguf_writer_set(w, key, &kv->val);
		}
	}
	if (!rc) rc = gguf_writer_set_str(w, "general.architecture", "qwen3");
	uint64_t s = 17;
	float norm[64];
	for (int64_t i = 0; !rc && i < gguf_n_tensors(g); i++) {
		const gguf_tensor *t = gguf_tensor_at(g, i);
		rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
		int l, used = 0;
		if (!rc && sscanf(t->name, "blk.%d.attn_norm.weight%n", &l, &used) == 1 && used && !t->name[used])
			for (int h = 0; h < 2 && !rc; h++) {
				char name[64];
				snprintf(name, sizeof name, "blk.%d.attn_%c_norm.weight", l, h ? 'k' : 'q');
				for (int d = 0; d < 64; d++) norm[d] = (float)(0.7 + 0.6 * urand(&s));
				const int64_t ne[1] = {64};
				rc = gguf_writer_add_tensor(w, name, GGUF_T_F32, 1, ne, norm, sizeof norm);
			}
	}
	if (!rc) rc = gguf_writer_write(w, path, err, sizeof err);
	gguf_writer_free(w);
	gguf_free(g);
	return rc;
}

// ---- a step's bits: however it is cut into calls, whatever the thread count --------------------
static void cut_and_threads(const model *m, base_pool *pool) {
	learn_example *ex[2] = {0};
	learn_adapter *a1 = gc_adapter(m, 3), *a2 = gc_adapter(m, 3);
	CHECK(a1 && a2 && make_examples(ex) == 0);
	if (!a1 || !a2 || !ex[1]) goto out;
	learn_job *j1 = grad_step(a1, ex, 2, 5, NULL, INFINITY), *j2 = NULL;
	// one piece per call on two threads: the budget is exactly the next piece's price
	learn_opts o;
	learn_opts_default(&o);
	o.piece = 5, o.batch = 2;
	CHECK(learn_job_new(&j2, a2, &o, err, sizeof err) == 0);
	for (int i = 0; j2 && i < 2; i++) CHECK(learn_job_add(j2, ex[i], err, sizeof err) == 0);
	int pieces = 0, bad = 0;
	while (j2 && learn_step_state(j2) != LEARN_READY && pieces < 1000) {
		const double c = learn_step_next_cost(j2);
		double spent = -1;
		bad += c <= 0 || learn_step_run(j2, pool, c, &spent, err, sizeof err) != 0 || spent != c;
		pieces++;
	}
	const model_hparams *hp = model_hparams_of(m);
	// 16 tokens in chunks of 5: 4 chunks forward and backward per layer, a head for the 3 with learned tokens
	CHECKF(pieces == 2 * 4 * hp->n_layers + 3 && !bad, "%d pieces (%d refused), expected %d", pieces, bad, 2 * 4 * hp->n_layers + 3);
	CHECK(j1 && learn_step_state(j1) == LEARN_READY && j2 && learn_step_state(j2) == LEARN_READY);
	if (j1 && j2 && learn_step_state(j2) == LEARN_READY) {
		learn_step_info i1, i2;
		learn_step_info_of(j1, &i1), learn_step_info_of(j2, &i2);
		CHECK(i1.loss == i2.loss && i1.grad_norm == i2.grad_norm && i1.tokens == 16 && i1.learned == 8);
		bool same = true;
		for (int32_t i = 0; i < learn_adapter_n_pairs(a1); i++) {
			const float *ga1, *gb1, *ga2, *gb2;
			learn_pair p;
			learn_adapter_pair(a1, i, &p);
			learn_step_grad(j1, i, &ga1, &gb1), learn_step_grad(j2, i, &ga2, &gb2);
			same &= !memcmp(ga1, ga2, (size_t)p.r * p.n_in * 4) && !memcmp(gb1, gb2, (size_t)p.n_out * p.r * 4);
		}
		CHECKF(same, "the gradient depends on how the step was cut or on the threads");
	}
	learn_job_free(j1);
	learn_job_free(j2);
	// pieces of 5 tokens and of 200: the forward (and so the loss) is the same bits, the gradient
	// (summed over other groupings of tokens) agrees to rounding; 148 learned rows make the head
	// take its rows in groups
	learn_example *lx[2] = {0};
	int32_t ids[100];
	bool fl[100];
	uint64_t s = 5;
	for (int e = 0; e < 2; e++) {
		for (int i = 0; i < 100; i++) ids[i] = 3 + (int32_t)(urand(&s) * 500), fl[i] = i % 4 != 1;
		CHECK(learn_example_ids(&lx[e], ids, fl, 100, err, sizeof err) == 0);
	}
	learn_job *k1 = lx[1] ? grad_step(a1, lx, 2, 5, pool, INFINITY) : NULL;
	learn_job *k2 = lx[1] ? grad_step(a2, lx, 2, 200, pool, INFINITY) : NULL;
	if (k1 && k2 && learn_step_state(k1) == LEARN_READY && learn_step_state(k2) == LEARN_READY) {
		learn_step_info i1, i2;
		learn_step_info_of(k1, &i1), learn_step_info_of(k2, &i2);
		CHECKF(i1.loss == i2.loss && i1.learned == 148, "loss %.9f in pieces of 5, %.9f in pieces of 200", i1.loss, i2.loss);
		CHECKF(fabs(i1.grad_norm - i2.grad_norm) < 1e-5 * i1.grad_norm, "gradient norm %.9g and %.9g", i1.grad_norm, i2.grad_norm);
	} else {
		CHECK(!"a step of long examples did not complete");
	}
	learn_job_free(k1);
	learn_job_free(k2);
	learn_example_free(lx[0]), learn_example_free(lx[1]);
out:
	learn_adapter_free(a1);
	learn_adapter_free(a2);
	learn_example_free(ex[0]), learn_example_free(ex[1]);
}

// ---- no partial commit ----------------------------------------------------------------------------
// All of a's parameters.
static float *params_of(learn_adapter *a, int64_t *n) {
	learn_adapter_info info;
	learn_adapter_info_of(a, &info);
	float *w = malloc((size_t)info.params * 4);
	int64_t k = 0;
	for (int32_t i = 0; i < learn_adapter_n_pairs(a); i++) {
		learn_pair p;
		learn_adapter_pair(a, i, &p);
		memcpy(w + k, p.a, (size_t)p.r * p.n_in * 4), k += (int64_t)p.r * p.n_in;
		memcpy(w + k, p.b, (size_t)p.n_out * p.r * 4), k += (int64_t)p.n_out * p.r;
	}
	*n = k;
	return w;
}

static bool params_are(learn_adapter *a, const float *w) {
	int64_t n;
	float *now = params_of(a, &n);
	const bool same = !memcmp(now, w, (size_t)n * 4);
	free(now);
	return same;
}

// The logits of ids through model_forward with adapter l (NULL: the base).
static float *logits_of(const model *m, const model_lora *l, const int32_t *ids, int n) {
	const int64_t V = model_hparams_of(m)->n_vocab;
	kv_config c = model_kv_config(m, KV_F16S, 1, n, 16);
	kv_cache *kv = NULL;
	float *lg = malloc((size_t)(n * V) * 4);
	model_row rows[64];
	model_lora_set set = {.n = l ? 1 : 0, .use = {{l, 1.0f}}};
	for (int i = 0; i < n; i++) rows[i] = (model_row){ids[i], i, 0, true, &set};
	if (kv_new(&kv, &c, err, sizeof err) || model_forward(m, kv, NULL, rows, n, lg, err, sizeof err)) {
		fprintf(stderr, "%s\n", err);
		free(lg);
		lg = NULL;
	}
	kv_free(kv);
	return lg;
}

static void no_partial_commit(const model *m, base_pool *pool) {
	learn_example *ex[2] = {0};
	learn_adapter *a = gc_adapter(m, 5);
	learn_job *j = NULL;
	model_lora *v0 = NULL, *v1 = NULL;
	CHECK(a && make_examples(ex) == 0);
	if (!a || !ex[1]) goto out;
	learn_opts o;
	learn_opts_default(&o);
	o.piece = 4, o.batch = 2, o.lr = 0.01f;
	CHECK(learn_job_new(&j, a, &o, err, sizeof err) == 0);
	learn_job *j2 = NULL;
	CHECK(learn_job_new(&j2, a, &o, err, sizeof err) == LANES_EBUSY); // one job per adapter
	CHECK(learn_adapter_lora(a, &v0, err, sizeof err) == 0);
	int64_t n;
	float *w0 = params_of(a, &n);
	const int32_t ids[6] = {1, 307, 379, 269, 61, 224};
	float *l0 = logits_of(m, v0, ids, 6);
	const size_t lb = (size_t)(6 * model_hparams_of(m)->n_vocab) * 4;
	model_lora *tmp = NULL;

	// a step cut short: no commit, nothing changed
	for (int i = 0; i < 2; i++) CHECK(learn_job_add(j, ex[i], err, sizeof err) == 0);
	for (int p = 0; p < 9; p++) CHECK(learn_step_run(j, pool, learn_step_next_cost(j), NULL, err, sizeof err) == 0);
	CHECK(learn_step_state(j) == LEARN_RUNNING);
	CHECK(learn_commit(j, &tmp, NULL, err, sizeof err) == LANES_EBUSY && tmp == NULL);
	CHECK(params_are(a, w0));
	// aborted (a revoked or expired grant, a halt): the examples go, the adapter stays
	learn_step_abort(j);
	CHECK(learn_step_state(j) == LEARN_IDLE && learn_job_queued(j) == 0 && params_are(a, w0));
	learn_adapter_info info;
	learn_adapter_info_of(a, &info);
	CHECK(info.version == 0);

	// every allocation of a whole step and its commit failing in turn: all or nothing each time
	int committed = 0, failures = 0;
	for (int k = 0; k < 40 && !committed; k++) {
		float *before = params_of(a, &n);
		learn_adapter_info_of(a, &info);
		const int64_t ver = info.version;
		learn_test_fail_alloc(k);
		int rc = 0;
		for (int i = 0; i < 2 && !rc; i++) rc = learn_job_add(j, ex[i], err, sizeof err);
		if (!rc) rc = learn_step_run(j, pool, INFINITY, NULL, err, sizeof err);
		if (!rc) rc = learn_commit(j, &v1, NULL, err, sizeof err);
		learn_test_fail_alloc(-1);
		learn_adapter_info_of(a, &info);
		if (rc) {
			failures++;
			CHECKF(rc == LANES_ENOMEM, "allocation %d: code %d", k, rc);
			CHECKF(params_are(a, before) && info.version == ver && v1 == NULL, "allocation %d failed and something changed", k);
			learn_step_abort(j);
			while (learn_job_queued(j)) { // drop what was queued: run it and throw the step away
				learn_step_run(j, pool, INFINITY, NULL, err, sizeof err);
				learn_step_abort(j);
			}
		} else {
			committed = 1;
			CHECK(info.version == ver + 1 && v1 != NULL && !params_are(a, before));
		}
		free(before);
	}
	CHECKF(committed && failures >= 3, "a step committed after %d failing allocations", failures);
	// the commit failing once more with the step ready: it stays ready, then commits
	for (int i = 0; i < 2; i++) learn_job_add(j, ex[i], err, sizeof err);
	learn_step_run(j, pool, INFINITY, NULL, err, sizeof err);
	float *w1 = params_of(a, &n);
	learn_test_fail_alloc(0);
	CHECK(learn_commit(j, &tmp, NULL, err, sizeof err) == LANES_ENOMEM && tmp == NULL);
	learn_test_fail_alloc(-1);
	CHECK(learn_step_state(j) == LEARN_READY && params_are(a, w1));
	CHECK(learn_commit(j, &tmp, NULL, err, sizeof err) == 0 && tmp && !params_are(a, w1));
	learn_adapter_info_of(a, &info);
	CHECK(info.version == 2);
	// the versions handed out are untouched by later commits: version 0 still gives its logits
	float *l0b = logits_of(m, v0, ids, 6), *l1 = logits_of(m, v1, ids, 6), *l2 = logits_of(m, tmp, ids, 6);
	CHECK(l0 && l0b && l1 && l2 && !memcmp(l0, l0b, lb) && memcmp(l0, l1, lb) && memcmp(l1, l2, lb));
	free(l0b), free(l1), free(l2), free(w1);
	model_lora_free(tmp);
	free(w0), free(l0);
out:
	model_lora_free(v0);
	model_lora_free(v1);
	learn_job_free(j);
	learn_adapter_free(a);
	learn_example_free(ex[0]), learn_example_free(ex[1]);
}

// ---- saving -----------------------------------------------------------------------------------------
static void saving(const model *m) {
	learn_adapter *a = gc_adapter(m, 21), *back = NULL;
	model_lora *mine = NULL, *loaded = NULL;
	char path[512], dir[512];
	tmp_path(path, sizeof path, "a.gguf");
	CHECK(a != NULL);
	if (!a) return;
	CHECK(learn_adapter_save(a, path, GGUF_T_F32, err, sizeof err) == 0);
	// the file as llama.cpp's converter writes one
	gguf *g = NULL;
	CHECK(gguf_open(&g, path, err, sizeof err) == 0);
	if (g) {
		gguf_str sv;
		float alpha = 0;
		CHECK(gguf_get_str(g, "general.type", &sv) == 0 && gguf_str_eq(sv, "adapter"));
		CHECK(gguf_get_str(g, "adapter.type", &sv) == 0 && gguf_str_eq(sv, "lora"));
		CHECK(gguf_get_str(g, "general.architecture", &sv) == 0 && gguf_str_eq(sv, "llama"));
		CHECK(gguf_get_f32(g, "adapter.lora.alpha", &alpha) == 0 && alpha == 8);
		const gguf_tensor *ta = gguf_find_tensor(g, "blk.2.ffn_down.weight.lora_a"), *tb = gguf_find_tensor(g, "blk.2.ffn_down.weight.lora_b");
		CHECK(ta && tb && ta->type == GGUF_T_F32 && ta->ne[0] == 768 && ta->ne[1] == 4 && tb->ne[0] == 4 && tb->ne[1] == 256);
		CHECK(gguf_find_tensor(g, "output.weight.lora_a") != NULL);
		CHECK(gguf_n_tensors(g) == 2 * learn_adapter_n_pairs(a));
	}
	gguf_free(g);
	// lanes loads it back: the same logits as the adapter in memory, the same parameters
	CHECK(learn_adapter_lora(a, &mine, err, sizeof err) == 0);
	CHECK(model_lora_load(&loaded, m, path, err, sizeof err) == 0);
	const int32_t ids[5] = {1, 400, 401, 300, 301};
	float *l1 = mine ? logits_of(m, mine, ids, 5) : NULL, *l2 = loaded ? logits_of(m, loaded, ids, 5) : NULL;
	CHECK(l1 && l2 && !memcmp(l1, l2, (size_t)(5 * model_hparams_of(m)->n_vocab) * 4));
	free(l1), free(l2);
	int64_t n;
	float *w = params_of(a, &n);
	CHECK(learn_adapter_load(&back, m, path, err, sizeof err) == 0 && back && params_are(back, w));
	learn_adapter_free(back);
	back = NULL;
	// F16: within its rounding; types that cannot hold the rows are refused
	CHECK(learn_adapter_save(a, path, GGUF_T_F16, err, sizeof err) == 0);
	CHECK(learn_adapter_load(&back, m, path, err, sizeof err) == 0);
	if (back) {
		float *w16 = params_of(back, &n), worst = 0;
		for (int64_t i = 0; i < n; i++) worst = fmaxf(worst, fabsf(w16[i] - w[i]) / fmaxf(fabsf(w[i]), 1e-4f));
		CHECKF(worst < 1e-3, "F16 round trip: relative error %g", worst);
		free(w16);
	}
	CHECK(learn_adapter_save(a, path, GGUF_T_Q8_0, err, sizeof err) == LANES_EINVAL && strstr(err, "Q8_0"));
	CHECK(learn_adapter_save(a, path, GGUF_T_Q4_0, err, sizeof err) == LANES_EINVAL);
	snprintf(dir, sizeof dir, "%s/no-such-dir/a.gguf", t_tmp());
	CHECK(learn_adapter_save(a, dir, GGUF_T_F32, err, sizeof err) != 0);
	// the file written last is whole and no temporary is left beside it
	char tmpname[600];
	snprintf(tmpname, sizeof tmpname, "%s.tmp%d", path, (int)getpid());
	CHECK(access(tmpname, F_OK) != 0);
	free(w);
	learn_adapter_free(back);
	model_lora_free(mine);
	model_lora_free(loaded);
	learn_adapter_free(a);
	unlink(path);
}

// ---- adapters made in memory ----------------------------------------------------------------------
static void lora_new(const model *m) {
	// a new trainable adapter has B = 0: the base model's logits bit for bit
	learn_adapter *a = NULL;
	model_lora *l = NULL;
	const learn_adapter_opts ao = {.rank = 4, .seed = 9};
	CHECK(learn_adapter_new(&a, m, &ao, err, sizeof err) == 0 && learn_adapter_lora(a, &l, err, sizeof err) == 0);
	const int32_t ids[4] = {1, 300, 301, 302};
	float *base = logits_of(m, NULL, ids, 4), *with = l ? logits_of(m, l, ids, 4) : NULL;
	CHECK(base && with && !memcmp(base, with, (size_t)(4 * model_hparams_of(m)->n_vocab) * 4));
	model_lora_info info;
	if (l) {
		model_lora_info_of(l, &info);
		CHECK(info.rank == 4 && info.alpha == 4 && info.n_targets == 7 * model_hparams_of(m)->n_layers &&
		      !strcmp(info.targets, "attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down"));
	}
	learn_adapter_info ai;
	if (a) {
		learn_adapter_info_of(a, &ai);
		CHECK(ai.optimizer_bytes == 2 * ai.param_bytes && ai.param_bytes == (uint64_t)ai.params * 4 && ai.version == 0);
	}
	free(base), free(with);
	model_lora_free(l);
	learn_adapter_free(a);
	// shapes it cannot take, named
	model_lora *bad = NULL;
	const model_lora_shape out_of_range[1] = {{99, MODEL_LORA_Q, 4}}, twice[2] = {{0, MODEL_LORA_V, 4}, {0, MODEL_LORA_V, 4}},
			       rank0[1] = {{1, MODEL_LORA_DOWN, 0}}, wide[1] = {{1, MODEL_LORA_K, 257}};
	CHECK(model_lora_new(&bad, m, 0, out_of_range, 1, err, sizeof err) == LANES_EINVAL && strstr(err, "layer 99's attn_q"));
	CHECK(model_lora_new(&bad, m, 0, twice, 2, err, sizeof err) == LANES_EINVAL && strstr(err, "given twice"));
	CHECK(model_lora_new(&bad, m, 0, rank0, 1, err, sizeof err) == LANES_EINVAL && strstr(err, "ffn_down"));
	CHECK(model_lora_new(&bad, m, 0, wide, 1, err, sizeof err) == LANES_EINVAL && strstr(err, "rank"));
	CHECK(bad == NULL);
	// an MoE layer's FFN and a tied head are not targets
	model *moe = load("ref-moe-F16"), *tied = load("ref-tied-Q8_0");
	const model_lora_shape gate[1] = {{0, MODEL_LORA_GATE, 4}}, head[1] = {{-1, MODEL_LORA_OUTPUT, 4}};
	CHECK(moe && model_lora_new(&bad, moe, 0, gate, 1, err, sizeof err) == LANES_EINVAL && strstr(err, "ffn_gate"));
	CHECK(tied && model_lora_new(&bad, tied, 0, head, 1, err, sizeof err) == LANES_EINVAL && strstr(err, "output"));
	model_free(moe);
	model_free(tied);
}

// ---- examples -------------------------------------------------------------------------------------
// The text of the learned runs of e, joined by '|'.
static void learned_text(const tok_vocab *v, const learn_example *e, char *buf, size_t n) {
	size_t k = 0;
	buf[0] = 0;
	const int32_t *ids = learn_example_ids_of(e);
	for (int64_t i = 1; i < learn_example_tokens(e);) {
		if (!learn_example_is_learned(e, i)) {
			i++;
			continue;
		}
		int64_t j = i;
		while (j < learn_example_tokens(e) && learn_example_is_learned(e, j)) j++;
		char *t = NULL;
		size_t len = 0;
		if (!tok_detokenize(v, ids + i, (size_t)(j - i), 0, &t, &len, err, sizeof err))
			k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s%s", k ? "|" : "", t);
		free(t);
		i = j;
	}
}

static void examples(const model *m) {
	tok_vocab *v = NULL;
	CHECK(tok_vocab_load(&v, model_gguf(m), err, sizeof err) == 0);
	if (!v) return;
	char text[1024];
	learn_example *e = NULL;
	CHECK(learn_example_text(&e, v, "Once upon a time", " there was a dog.", 0, err, sizeof err) == 0);
	if (e) {
		const int64_t n = learn_example_tokens(e);
		CHECK(learn_example_ids_of(e)[0] == tok_bos(v) && learn_example_ids_of(e)[n - 1] == tok_eos(v));
		learned_text(v, e, text, sizeof text);
		CHECKF(!strcmp(text, " there was a dog."), "learned '%s'", text);
		CHECK(learn_example_is_learned(e, n - 1) && !learn_example_is_learned(e, 1));
	}
	learn_example_free(e);
	chat_tmpl ct = {0};
	CHECK(chat_load_src(&ct, v, tmpl_chatml(), strlen(tmpl_chatml()), err, sizeof err) == 0);
	const chat_tmpl *t = ct.t ? &ct : NULL;
	json_t *msgs = json_loads("[{\"role\":\"system\",\"content\":\"Be kind.\"},{\"role\":\"user\",\"content\":\"Hi\"},"
				  "{\"role\":\"assistant\",\"content\":\"Hello there.\"},{\"role\":\"user\",\"content\":\"Bye\"},"
				  "{\"role\":\"assistant\",\"content\":\"Good bye.\"}]",
				  0, NULL);
	e = NULL;
	CHECK(t && msgs && learn_example_chat(&e, t, msgs, 0, err, sizeof err) == 0);
	if (e) {
		learned_text(v, e, text, sizeof text);
		CHECKF(!strcmp(text, "Hello there.<|im_end|>\n|Good bye.<|im_end|>\n"), "learned '%s'", text);
	}
	learn_example_free(e);
	json_t *none = json_loads("[{\"role\":\"user\",\"content\":\"Hi\"}]", 0, NULL), *obj = json_object();
	CHECK(learn_example_chat(&e, t, none, 0, err, sizeof err) == LANES_EINVAL && strstr(err, "assistant"));
	CHECK(learn_example_chat(&e, t, obj, 0, err, sizeof err) == LANES_EINVAL);
	const int32_t one[1] = {1};
	const bool fl[1] = {true};
	CHECK(learn_example_ids(&e, one, fl, 1, err, sizeof err) == LANES_EINVAL);
	json_decref(none), json_decref(obj), json_decref(msgs);
	chat_free(&ct);
	tok_vocab_free(v);
}

// ---- learning works -------------------------------------------------------------------------------


static void learning(base_pool *pool) {
	t_case("stories260K");
	model *m = load("stories260K"), *fresh = NULL;
	tok_vocab *v = NULL;
	CHECK(m && tok_vocab_load(&v, model_gguf(m), err, sizeof err) == 0);
	if (!m || !v) goto out0;
	enum { NT = 24, NH = 8, STEPS = 16, CUT = 64 };
	learn_example *tr[NT] = {0}, *he[NH] = {0};
	const int nt = t_read_stories(v, "tests/data/learn/stories-train.jsonl", NT, CUT, tr);
	const int nh = t_read_stories(v, "tests/data/learn/stories-held.jsonl", NH, CUT, he);
	CHECKF(nt == NT && nh == NH, "read %d and %d stories", nt, nh);
	learn_adapter *a = NULL;
	learn_job *j = NULL;
	model_lora *ver = NULL, *loaded = NULL;
	const learn_adapter_opts ao = {.rank = 4, .seed = 1};
	learn_opts o;
	learn_opts_default(&o);
	o.lr = 0.02f, o.batch = 4;
	CHECK(learn_adapter_new(&a, m, &ao, err, sizeof err) == 0 && learn_job_new(&j, a, &o, err, sizeof err) == 0);
	if (!j || nt != NT || nh != NH) goto out;
	double nll0, nll1, nll2;
	const double before = eval_loss(m, NULL, pool, he, nh, &nll0);
	double first = 0, last = 0;
	for (int s = 0, k = 0; s < STEPS; s++) {
		for (int b = 0; b < o.batch; b++) learn_job_add(j, tr[k++ % nt], err, sizeof err);
		learn_step_info info;
		model_lora_free(ver);
		ver = NULL;
		CHECK(learn_step_run(j, pool, INFINITY, NULL, err, sizeof err) == 0 && learn_commit(j, &ver, &info, err, sizeof err) == 0);
		if (s == 0) first = info.loss;
		last = info.loss;
	}
	const double after = eval_loss(m, ver, pool, he, nh, &nll1);
	printf("stories260K: %d steps of %d examples (rank %d): training loss %.3f -> %.3f, held-out loss %.3f -> %.3f (%.0f%% lower)\n",
	       STEPS, o.batch, ao.rank, first, last, before, after, 100 * (before - after) / before);
	CHECKF(before > 0 && after > 0 && after < 0.8 * before, "held-out loss %.4f -> %.4f", before, after);
	// saved and loaded into a fresh model: the same held-out loss, bit for bit
	char path[512];
	tmp_path(path, sizeof path, "stories.gguf");
	CHECK(learn_adapter_save(a, path, GGUF_T_F32, err, sizeof err) == 0);
	fresh = load("stories260K");
	CHECK(fresh && model_lora_load(&loaded, fresh, path, err, sizeof err) == 0);
	if (loaded) {
		eval_loss(fresh, loaded, pool, he, nh, &nll2);
		CHECKF(nll2 == nll1, "held-out -log p %.9f in memory, %.9f loaded from the file", nll1, nll2);
	}
	unlink(path);
out:
	model_lora_free(ver);
	model_lora_free(loaded);
	learn_job_free(j);
	learn_adapter_free(a);
	for (int i = 0; i < NT; i++) learn_example_free(tr[i]);
	for (int i = 0; i < NH; i++) learn_example_free(he[i]);
out0:
	tok_vocab_free(v);
	model_free(fresh);
	model_free(m);
}

// A qwen3 whose queries are wider than twice its embedding (n_heads * head_dim > 2 n_embd): the
// shapes where the head's scratch must follow the heads, not the width. Random f32 weights.
static int wide_put(gguf_writer *w, const char *name, int nd, int64_t a, int64_t b, float base, uint64_t *st) {
	const int64_t ne[2] = {a, b}, n = a * (nd > 1 ? b : 1);
	float *d = malloc((size_t)n * 4);
	for (int64_t i = 0; i < n; i++) d[i] = base != 0 ? base + 0.1f * (float)(urand(st) - 0.5) : 0.5f * (float)(urand(st) - 0.5);
	const int rc = gguf_writer_add_tensor(w, name, GGUF_T_F32, (uint32_t)nd, ne, d, (uint64_t)n * 4);
	free(d);
	return rc;
}

static int make_wide_qwen3(const char *path) {
	const int64_t E = 16, H = 4, KH = 2, D = 16, F = 32, L = 2;
	char src[512], n[96];
	snprintf(src, sizeof src, "%s/models/ref-llama-F32.gguf", t_shared());
	gguf *g = NULL;
	gguf_writer *w = gguf_writer_new();
	int rc = gguf_open(&g, src, err, sizeof err) || !w;
	if (!rc) rc = gguf_writer_copy_kv(w, g, "llama.");
	const int64_t V = rc ? 0 : (int64_t)gguf_get_arr(g, "tokenizer.ggml.tokens")->arr.n;
	rc = rc || gguf_writer_set_str(w, "general.architecture", "qwen3") || gguf_writer_set_u32(w, "qwen3.block_count", L) ||
	     gguf_writer_set_u32(w, "qwen3.embedding_length", E) || gguf_writer_set_u32(w, "qwen3.attention.head_count", H) ||
	     gguf_writer_set_u32(w, "qwen3.attention.head_count_kv", KH) || gguf_writer_set_u32(w, "qwen3.attention.key_length", D) ||
	     gguf_writer_set_u32(w, "qwen3.attention.value_length", D) || gguf_writer_set_u32(w, "qwen3.feed_forward_length", F) ||
	     gguf_writer_set_u32(w, "qwen3.rope.dimension_count", D) ||
	     gguf_writer_set_f32(w, "qwen3.attention.layer_norm_rms_epsilon", 1e-5f);
	uint64_t st = 5;
	rc = rc || wide_put(w, "token_embd.weight", 2, E, V, 0, &st) || wide_put(w, "output_norm.weight", 1, E, 1, 1, &st) ||
	     wide_put(w, "output.weight", 2, E, V, 0, &st);
	for (int l = 0; l < L && !rc; l++) {
#define WT(s, nd, a, b, base) (snprintf(n, sizeof n, "blk.%d." s, l), wide_put(w, n, nd, a, b, base, &st))
		rc = WT("attn_norm.weight", 1, E, 1, 1) || WT("attn_q.weight", 2, E, H * D, 0) || WT("attn_k.weight", 2, E, KH * D, 0) ||
		     WT("attn_v.weight", 2, E, KH * D, 0) || WT("attn_output.weight", 2, H * D, E, 0) || WT("attn_q_norm.weight", 1, D, 1, 1) ||
		     WT("attn_k_norm.weight", 1, D, 1, 1) || WT("ffn_norm.weight", 1, E, 1, 1) || WT("ffn_gate.weight", 2, E, F, 0) ||
		     WT("ffn_up.weight", 2, E, F, 0) || WT("ffn_down.weight", 2, F, E, 0);
#undef WT
	}
	if (!rc) rc = gguf_writer_write(w, path, err, sizeof err);
	gguf_writer_free(w);
	gguf_free(g);
	return rc;
}

// ---- MTP heads ------------------------------------------------------------------------------------
// The head's backward against central differences of its own loss (every kind of weight it
// trains: the largest gradients and some at random), on a llama, a qwen2 (biases) and a qwen3
// (per-head norms); the gradient the same bits on 1 and 2 threads.
static void mtp_gradient(const char *name, const char *path, base_pool *pool) {
	t_case(name);
	model *m = NULL;
	char buf[512];
	if (!path) snprintf(buf, sizeof buf, "%s/models/%s.gguf", t_shared(), name), path = buf;
	CHECKF(model_load(&m, path, err, sizeof err) == 0, "%s", err);
	if (!m) return;
	const int32_t V = model_hparams_of(m)->n_vocab;
	int32_t ids[2][14];
	uint64_t r = 11;
	for (int q = 0; q < 2; q++)
		for (int i = 0; i < 14; i++) ids[q][i] = 3 + (int32_t)(urand(&r) * (V - 3));
	const int32_t *pr[2] = {ids[0], ids[1]};
	const int64_t np[2] = {14, 1}; // the second of 4 tokens: 3 head rows
	learn_mtp_seq *seqs[2] = {0};
	learn_mtp *h = NULL, *h1 = NULL;
	CHECK(learn_mtp_seqs_new(seqs, m, pool, pr, np, 2, 3, 64, 0.0f, 0, err, sizeof err) == 0);
	CHECK(learn_mtp_new(&h, m, err, sizeof err) == 0 && learn_mtp_new(&h1, m, err, sizeof err) == 0);
	if (!h || !h1 || !seqs[1]) goto out;
	learn_opts o;
	learn_opts_default(&o);
	o.lr = 0.0f, o.clip = 0.0f; // the step only measures: the weights stay
	learn_step_info info;
	CHECK(learn_mtp_step(h, pool, (const learn_mtp_seq *const *)seqs, 2, &o, &info, err, sizeof err) == 0);
	CHECK(learn_mtp_step(h1, NULL, (const learn_mtp_seq *const *)seqs, 2, &o, &info, err, sizeof err) == 0);
	const int64_t P = learn_mtp_params(h);
	CHECKF(!memcmp(learn_mtp_grad(h), learn_mtp_grad(h1), (size_t)P * 4), "the head's gradient depends on the threads");
	const float *g = learn_mtp_grad(h);
	float *w = learn_mtp_weights(h);
	double gmax = 0;
	for (int64_t i = 0; i < P; i++) gmax = fabs(g[i]) > gmax ? fabs(g[i]) : gmax;
	// in every tensor, its two largest gradients and one at random
	int64_t idx[3 * LEARN_MTP_TENSORS];
	int n = 0;
	for (int t = 0; t < LEARN_MTP_TENSORS; t++) {
		int64_t off, cnt, b1 = -1, b2 = -1;
		learn_mtp_tensor(h, t, &off, &cnt);
		for (int64_t i = off; i < off + cnt; i++) {
			if (b1 < 0 || fabs(g[i]) > fabs(g[b1])) b2 = b1, b1 = i;
			else if (b2 < 0 || fabs(g[i]) > fabs(g[b2])) b2 = i;
		}
		idx[n++] = b1, idx[n++] = b2, idx[n++] = off + (int64_t)(urand(&r) * (double)cnt);
	}
	int bad = 0;
	double worst = 0;
	for (int k = 0; k < n; k++) {
		const int64_t i = idx[k];
		const float w0 = w[i], eps = 1e-2f * (fabsf(w0) > 1.0f ? fabsf(w0) : 1.0f);
		double lp, lm, acc[2];
		w[i] = w0 + eps;
		learn_mtp_eval(h, NULL, (const learn_mtp_seq *const *)seqs, 2, acc, &lp, err, sizeof err);
		w[i] = w0 - eps;
		learn_mtp_eval(h, NULL, (const learn_mtp_seq *const *)seqs, 2, acc, &lm, err, sizeof err);
		w[i] = w0;
		const double fd = (lp - lm) / (2.0 * (double)eps), e = fabs(fd - g[i]) / (fabs(g[i]) + 1e-2 * gmax);
		worst = e > worst ? e : worst;
		bad += e > 0.05;
	}
	CHECKF(!bad, "%s: %d of %d head gradients off their central differences (worst relative error %.3g)", name, bad, n, worst);
	printf("%s MTP head: %d gradients checked, worst |fd - g| / (|g| + gmax/100) = %.3g\n", name, n, worst);
out:
	learn_mtp_free(h);
	learn_mtp_free(h1);
	learn_mtp_seq_free(seqs[0]), learn_mtp_seq_free(seqs[1]);
	model_free(m);
}

// The head learned while serving: a job's step with pieces as long as its examples is
// learn_mtp_step's on the same examples, bit for bit; cut into short pieces it is the same bits
// one piece per call and all at once, on 1 and 2 threads; an abort leaves the head untouched;
// a committed version drafts the same logits as its saved file loaded beside the model.
static void mtp_job(const char *name, base_pool *pool) {
	t_case(name);
	model *m = load(name);
	CHECK(m != NULL);
	if (!m) return;
	const model_hparams *hp = model_hparams_of(m);
	const int32_t V = hp->n_vocab;
	const int64_t E = hp->n_embd, lens[3] = {40, 23, 9};
	learn_example *ex[3] = {0};
	uint64_t r = 5;
	for (int e = 0; e < 3; e++) {
		int32_t ids[40];
		bool fl[40];
		for (int i = 0; i < lens[e]; i++) ids[i] = 3 + (int32_t)(urand(&r) * (V - 3)), fl[i] = true;
		CHECK(learn_example_ids(&ex[e], ids, fl, lens[e], err, sizeof err) == 0);
	}
	learn_mtp *ha = NULL, *hb = NULL, *hc = NULL, *hd = NULL;
	learn_mtp_job *jb = NULL, *jc = NULL, *jd = NULL;
	learn_mtp_seq **seqs = NULL;
	int64_t ns = 0;
	model_head *ver = NULL;
	learn_opts o;
	learn_opts_default(&o);
	o.lr = 1e-2f, o.batch = 3, o.piece = 64, o.max_tokens = 64;
	CHECK(learn_mtp_new(&ha, m, err, sizeof err) == 0 && learn_mtp_new(&hb, m, err, sizeof err) == 0);
	CHECK(learn_mtp_new(&hc, m, err, sizeof err) == 0 && learn_mtp_new(&hd, m, err, sizeof err) == 0);
	if (!ha || !hb || !hc || !hd) goto out;
	const int64_t P = learn_mtp_params(ha);
	float *w0 = malloc((size_t)P * 4);
	memcpy(w0, learn_mtp_weights(ha), (size_t)P * 4);
	// whole sequences: the job is learn_mtp_step
	learn_step_info ia, ib;
	CHECK(learn_mtp_seqs_of(&seqs, &ns, m, pool, (const learn_example *const *)ex, 3, 0, 64, 0.0f, 0, err, sizeof err) == 0);
	CHECK(learn_mtp_step(ha, pool, (const learn_mtp_seq *const *)seqs, (int32_t)ns, &o, &ia, err, sizeof err) == 0);
	CHECK(learn_mtp_job_new(&jb, hb, &o, err, sizeof err) == 0);
	for (int e = 0; jb && e < 3; e++) CHECK(learn_mtp_job_add(jb, ex[e], err, sizeof err) == 0);
	double spent = 0;
	CHECK(jb && learn_mtp_job_run(jb, pool, INFINITY, &spent, err, sizeof err) == 0 && learn_mtp_job_state(jb) == LEARN_READY && spent > 0);
	CHECK(learn_mtp_job_commit(jb, &ver, &ib, err, sizeof err) == 0 && ver);
	CHECKF(!memcmp(learn_mtp_weights(ha), learn_mtp_weights(hb), (size_t)P * 4) && ia.loss == ib.loss && ia.tokens == ib.tokens,
	       "a job's step is learn_mtp_step's (loss %.9g vs %.9g)", ib.loss, ia.loss);
	CHECK(memcmp(learn_mtp_weights(hb), w0, (size_t)P * 4) != 0);
	// short pieces: one per call on 1 thread = all at once on 2
	o.piece = 8;
	CHECK(learn_mtp_job_new(&jc, hc, &o, err, sizeof err) == 0 && learn_mtp_job_new(&jd, hd, &o, err, sizeof err) == 0);
	for (int e = 0; jc && jd && e < 3; e++) CHECK(learn_mtp_job_add(jc, ex[e], err, sizeof err) == 0 && learn_mtp_job_add(jd, ex[e], err, sizeof err) == 0);
	if (!jc || !jd) goto out;
	int calls = 0;
	while (learn_mtp_job_state(jc) != LEARN_READY && calls < 1000) {
		const double c = learn_mtp_job_next_cost(jc);
		CHECK(c > 0 && learn_mtp_job_run(jc, NULL, c, &spent, err, sizeof err) == 0 && spent == c);
		calls++;
	}
	CHECK(learn_mtp_job_run(jd, pool, INFINITY, &spent, err, sizeof err) == 0);
	CHECK(learn_mtp_job_commit(jc, NULL, &ia, err, sizeof err) == 0 && learn_mtp_job_commit(jd, NULL, &ib, err, sizeof err) == 0);
	CHECKF(calls > 10 && !memcmp(learn_mtp_weights(hc), learn_mtp_weights(hd), (size_t)P * 4) && ia.loss == ib.loss,
	       "a step cut into %d calls on 1 thread differs from one call on 2", calls);
	// an abort: nothing of the step reaches the head
	for (int e = 0; e < 3; e++) CHECK(learn_mtp_job_add(jc, ex[e], err, sizeof err) == 0);
	memcpy(w0, learn_mtp_weights(hc), (size_t)P * 4);
	CHECK(learn_mtp_job_run(jc, NULL, 2 * learn_mtp_job_next_cost(jc), &spent, err, sizeof err) == 0 && learn_mtp_job_state(jc) == LEARN_RUNNING);
	learn_mtp_job_abort(jc);
	CHECK(learn_mtp_job_state(jc) == LEARN_IDLE && learn_mtp_job_commit(jc, NULL, &ia, err, sizeof err) == LANES_EBUSY);
	CHECKF(!memcmp(learn_mtp_weights(hc), w0, (size_t)P * 4), "an aborted step changed the head");
	// examples the head cannot learn from
	int32_t two[2] = {1, 2}, oov[3] = {1, 2, V};
	bool fl[3] = {true, true, true};
	learn_example *bad = NULL;
	CHECK(learn_example_ids(&bad, two, fl, 2, err, sizeof err) == 0);
	CHECK(bad && learn_mtp_job_add(jc, bad, err, sizeof err) == LANES_EINVAL);
	learn_example_free(bad), bad = NULL;
	if (learn_example_ids(&bad, oov, fl, 3, err, sizeof err) == 0) CHECK(learn_mtp_job_add(jc, bad, err, sizeof err) == LANES_EINVAL);
	learn_example_free(bad);
	// the version drafts as its saved file does, loaded beside the model
	char head[512], src[512];
	tmp_path(head, sizeof head, "job-head.gguf");
	snprintf(src, sizeof src, "%s/models/%s.gguf", t_shared(), name);
	CHECK(learn_mtp_save(hb, head, err, sizeof err) == 0);
	model *mh = NULL;
	CHECKF(model_load_head(&mh, src, head, NULL, NULL, err, sizeof err) == 0, "%s", err);
	if (mh && ver) {
		enum { N = 6 };
		model_row rows[N];
		float *hin = malloc((size_t)(2 * N * E) * 4), *lg[2] = {malloc((size_t)N * V * 4), malloc((size_t)N * V * 4)};
		for (int i = 0; i < N; i++) rows[i] = (model_row){3 + i, i, 0, true, NULL};
		for (int64_t i = 0; i < N * E; i++) hin[i] = (float)(urand(&r) * 2.0 - 1.0);
		const model *ms[2] = {model_head_model(ver), mh};
		for (int k = 0; k < 2; k++) {
			kv_config c = model_mtp_kv_config(ms[k], KV_F16, 1, 64, 16);
			kv_cache *kv = NULL;
			model_ws *ws = NULL;
			memcpy(hin + N * E, hin, (size_t)(N * E) * 4);
			CHECK(kv_new(&kv, &c, err, sizeof err) == 0 && model_ws_new_head(&ws, ms[k], N, 2, 0, err, sizeof err) == 0);
			CHECKF(kv && ws && model_mtp_forward(ms[k], kv, pool, ws, rows, N, hin + N * E, lg[k], NULL, err, sizeof err) == 0, "%s", err);
			kv_free(kv);
			model_ws_free(ws);
		}
		CHECKF(!memcmp(lg[0], lg[1], (size_t)N * V * 4), "a served version drafts other logits than its saved file");
		free(hin), free(lg[0]), free(lg[1]);
	}
	model_free(mh);
	unlink(head);
	free(w0);
out:
	model_head_free(ver);
	learn_mtp_job_free(jb), learn_mtp_job_free(jc), learn_mtp_job_free(jd);
	for (int64_t i = 0; i < ns; i++) learn_mtp_seq_free(seqs[i]);
	free(seqs);
	learn_mtp_free(ha), learn_mtp_free(hb), learn_mtp_free(hc), learn_mtp_free(hd);
	for (int e = 0; e < 3; e++) learn_example_free(ex[e]);
	model_free(m);
}

int main(void) {
	if (cli_env_apply()) return 2;
	base_pool *pool = NULL;
	CHECK(base_pool_new(&pool, 2) == 0);
	kernel_sets();
	// one thread: the float64 reference runs alone between the steps
	gradient_check("ref-llama-F32", NULL, NULL, true);
	gradient_check("ref-qwen2-F16", NULL, NULL, true);
	gradient_check("ref-moe-F16", NULL, NULL, false);
	gradient_check("ref-tied-Q8_0", NULL, NULL, false);
	char q3[512];
	tmp_path(q3, sizeof q3, "qwen3.gguf");
	CHECKF(make_qwen3(q3) == 0, "qwen3: %s", err);
	gradient_check("qwen3 (from ref-llama-F32)", q3, NULL, false);
	// the families with their own operations: soft caps, GELU, post norms, windows and a local
	// rope (gemma2, gemma3), fused matrices, LongRoPE and partial rotary (phi3), sinks, biased
	// experts and the clamped SwiGLU (gpt-oss); examples past the window
	static const char *const fams[] = {"gemma2-test", "gemma3-test", "phi3-test", "gpt-oss-test"};
	for (int f = 0; f < 4; f++) {
		char fam[512], vocab[512];
		tmp_path(fam, sizeof fam, fams[f]);
		snprintf(vocab, sizeof vocab, "%s/models/stories260K.gguf", t_shared());
		CHECKF(t_gen_model(fams[f], "F32", vocab, fam) == 0, "lanes gen %s", fams[f]);
		gradient_check(fams[f], fam, NULL, true);
		unlink(fam);
	}
	mtp_gradient("ref-llama-F32", NULL, pool);
	mtp_gradient("ref-qwen2-F16", NULL, pool);
	mtp_gradient("qwen3 (from ref-llama-F32)", q3, pool);
	unlink(q3);
	CHECKF(make_wide_qwen3(q3) == 0, "wide qwen3: %s", err);
	mtp_gradient("qwen3 with queries wider than twice its embedding", q3, pool);
	unlink(q3);
	mtp_job("ref-llama-F32", pool);
	mtp_job("ref-qwen2-F16", pool);
	model *m = load("ref-llama-F32");
	CHECK(m != NULL);
	if (m) {
		t_case("ref-llama-F32");
		cut_and_threads(m, pool);
		no_partial_commit(m, pool);
		saving(m);
		lora_new(m);
		examples(m);
	}
	model_free(m);
	learning(NULL);
	base_pool_free(pool);
	T_DONE("learn");
}
