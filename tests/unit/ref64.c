// tests: the float64 reference forward pass (ref64.h) — every tensor dequantized to doubles,
// every sum in double, attention over the whole prefix with an exact softmax.
#include "ref64.h"

#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ref64_shape_of(const model *m, ref64_shape *s) {
	const model_hparams *hp = model_hparams_of(m);
	*s = (ref64_shape){.arch = hp->arch, .E = hp->n_embd, .L = hp->n_layers, .H = hp->n_heads, .HKV = hp->n_kv_heads,
			   .D = hp->head_dim, .V = hp->n_vocab, .F = hp->n_ff, .X = hp->n_experts, .K = hp->n_experts_used,
			   .FX = hp->n_ff_exp, .FS = hp->n_ff_shexp, .moe_norm = hp->moe_norm,
			   .tied = !gguf_find_tensor(model_gguf(m), "output.weight"), .rope_base = hp->rope.freq_base,
			   .rope_scale = hp->rope.freq_scale, .rms_eps = hp->rms_eps, .attn_scale = hp->attn_scale,
			   .embd_scale = hp->embd_scale, .post_norms = hp->post_norms, .geglu = hp->geglu,
			   .attn_softcap = hp->attn_softcap, .final_softcap = hp->final_softcap, .swa = hp->n_swa,
			   .swa_pattern = hp->swa_pattern, .rope_base_swa = hp->rope_swa.n_rot ? hp->rope_swa.freq_base : 0,
			   .rope_scale_swa = hp->rope_swa.n_rot ? hp->rope_swa.freq_scale : 0, .n_rot = hp->rope.n_rot,
			   .rope_mscale = hp->rope.attn_factor, .oai = hp->oai, .yarn_ext = hp->rope.ext_factor,
			   .yarn_beta_fast = hp->rope.beta_fast, .yarn_beta_slow = hp->rope.beta_slow, .yarn_orig = hp->rope.n_ctx_orig,
			   .full_attn = hp->full_attn_interval, .ssm_conv = hp->ssm_conv, .ssm_dk = hp->ssm_dk, .ssm_hk = hp->ssm_k_heads,
			   .ssm_hv = hp->ssm_v_heads, .ssm_dv = hp->ssm_dv};
	// which factors the model rotates by: the tensor its divisors were read from
	static const char *const fs[] = {"rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"};
	for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) {
		const gguf_tensor *t = gguf_find_tensor(model_gguf(m), fs[i]);
		if (t && (const void *)hp->rope.freq_factors == t->data) s->rope_factors = fs[i];
	}
}

// A tensor of the file dequantized to doubles; NULL when absent.
static double *W(const gguf *g, const char *name) {
	const gguf_tensor *t = gguf_find_tensor(g, name);
	if (!t) return NULL;
	int64_t n = gguf_tensor_nelem(t);
	float *f = malloc((size_t)n * sizeof *f);
	tensor_traits_of(t->type)->to_f32(t->data, f, n);
	double *d = malloc((size_t)n * sizeof *d);
	for (int64_t i = 0; i < n; i++) d[i] = f[i];
	free(f);
	return d;
}

static double *WL(const gguf *g, int l, const char *what) {
	char nm[96];
	snprintf(nm, sizeof nm, "blk.%d.%s", l, what);
	return W(g, nm);
}

// y[o] = sum_e w[o][e] x[e] (+ b[o])
static void mv(const double *w, const double *b, const double *x, int in, int out, double *y) {
	for (int o = 0; o < out; o++) {
		double s = b ? b[o] : 0;
		for (int e = 0; e < in; e++) s += w[(size_t)o * in + e] * x[e];
		y[o] = s;
	}
}

static void rms(const double *x, const double *w, int n, double eps, double *y) {
	double ss = 0;
	for (int i = 0; i < n; i++) ss += x[i] * x[i];
	double sc = 1 / sqrt(ss / n + eps);
	for (int i = 0; i < n; i++) y[i] = x[i] * sc * w[i];
}

static double silu(double g) { return g / (1 + exp(-g)); }

static double gelu(double g) { return 0.5 * g * (1 + tanh(sqrt(2 / M_PI) * (g + 0.044715 * g * g * g))); }

// gpt-oss's experts: x = min(g, 7), y = clamp(u, -7, 7), x sigmoid(1.702 x) (y + 1).
static double glu_oai(double g, double u) {
	const double x = fmin(g, 7.0), y = fmax(-7.0, fmin(u, 7.0));
	return x / (1 + exp(-1.702 * x)) * (y + 1);
}

enum glu { GLU_SILU, GLU_GELU, GLU_OAI };

// The gate is SiLU, GELU-tanh (Gemma 2) or gpt-oss's; b: the biases of gate, up and down (NULL: none).
static void ffn_ref(const double *g, const double *u, const double *d, const double *const *b, const double *h, int E, int F,
		    enum glu act, double *y) {
	double *a = malloc(sizeof(double) * F), *c = malloc(sizeof(double) * F);
	mv(g, b ? b[0] : NULL, h, E, F, a);
	mv(u, b ? b[1] : NULL, h, E, F, c);
	for (int i = 0; i < F; i++)
		a[i] = act == GLU_OAI ? glu_oai(a[i], c[i]) : (act == GLU_GELU ? gelu(a[i]) : silu(a[i])) * c[i];
	mv(d, b ? b[2] : NULL, a, F, E, y);
	free(a), free(c);
}

// The MoE FFN of one position's normed input h into y; its choices into ids/margin when set.
static void moe_ref(const gguf *g, const ref64_shape *s, int l, const double *const *wt, const double *h, double *y,
		    int32_t *ids, double *w, int32_t *alt, double *margin) {
	const int E = s->E, X = s->X, K = s->K;
	double *r = malloc(sizeof(double) * X), *pr = malloc(sizeof(double) * X), *ye = malloc(sizeof(double) * E);
	int *chosen = malloc(sizeof(int) * K);
	double mx = -1e300, sum = 0, sel = 0;
	double *rb = s->oai && !s->no_biases ? WL(g, l, "ffn_gate_inp.bias") : NULL;
	mv(wt[0], rb, h, E, X, r);
	free(rb);
	for (int e = 0; e < X; e++) mx = fmax(mx, r[e]);
	for (int e = 0; e < X; e++) sum += pr[e] = exp(r[e] - mx);
	for (int e = 0; e < X; e++) pr[e] /= sum;
	for (int kk = 0; kk < K; kk++) {
		int best = -1;
		for (int e = 0; e < X; e++) {
			bool used = false;
			for (int t = 0; t < kk; t++) used |= chosen[t] == e;
			if (!used && (best < 0 || pr[e] > pr[best])) best = e;
		}
		chosen[kk] = best;
		sel += pr[best];
		if (ids) ids[kk] = best;
	}
	if (margin) {
		int out = -1;
		for (int e = 0; e < X; e++) {
			bool used = false;
			for (int t = 0; t < K; t++) used |= chosen[t] == e;
			if (!used && (out < 0 || r[e] > r[out])) out = e;
		}
		*alt = out;
		*margin = out < 0 ? INFINITY : r[chosen[K - 1]] - r[out];
	}
	for (int e = 0; e < E; e++) y[e] = 0;
	double *eb[3] = {NULL};
	if (s->oai && !s->no_biases)
		eb[0] = WL(g, l, "ffn_gate_exps.bias"), eb[1] = WL(g, l, "ffn_up_exps.bias"), eb[2] = WL(g, l, "ffn_down_exps.bias");
	for (int kk = 0; kk < K; kk++) {
		const size_t ex = (size_t)chosen[kk];
		const double *b[3] = {eb[0] ? eb[0] + ex * s->FX : NULL, eb[1] ? eb[1] + ex * s->FX : NULL, eb[2] ? eb[2] + ex * E : NULL};
		ffn_ref(wt[1] + ex * s->FX * E, wt[2] + ex * s->FX * E, wt[3] + ex * E * s->FX, eb[0] ? b : NULL, h, E, s->FX,
			s->oai && !s->plain_glu ? GLU_OAI : GLU_SILU, ye);
		const double wgt = s->moe_norm ? pr[ex] / sel : pr[ex];
		if (w) w[kk] = wgt;
		for (int e = 0; e < E; e++) y[e] += wgt * ye[e];
	}
	for (int i = 0; i < 3; i++) free(eb[i]);
	if (s->FS) {
		double *gi = WL(g, l, "ffn_gate_inp_shexp.weight"), *sg = WL(g, l, "ffn_gate_shexp.weight"),
		       *su = WL(g, l, "ffn_up_shexp.weight"), *sd = WL(g, l, "ffn_down_shexp.weight"), gate;
		mv(gi, NULL, h, E, 1, &gate);
		ffn_ref(sg, su, sd, NULL, h, E, s->FS, GLU_SILU, ye);
		for (int e = 0; e < E; e++) y[e] += ye[e] / (1 + exp(-gate));
		free(gi), free(sg), free(su), free(sd);
	}
	free(r), free(pr), free(ye), free(chosen);
}

static double sigm(double x) { return 1 / (1 + exp(-x)); }

// The delta rule of one value head over positions 0..P-1 from a zero state S [dv][dk]: q, k
// [P][dk] (normed, q scaled), v [P][dv], beta and the log-decay g [P]; outputs o [P][dv].
// Token by token: S = e^g S; d = beta (v - S k); S += d k^T; o = S q.
static void delta_steps(const double *q, const double *k, const double *v, const double *beta, const double *g, int P, int dk,
			int dv, double *S, double *o) {
	for (int t = 0; t < P; t++)
		for (int j = 0; j < dv; j++) {
			double *row = S + (size_t)j * dk, sk = 0, oo = 0;
			for (int i = 0; i < dk; i++) sk += (row[i] *= exp(g[t])) * k[(size_t)t * dk + i];
			const double d = beta[t] * (v[(size_t)t * dv + j] - sk);
			for (int i = 0; i < dk; i++) oo += (row[i] += d * k[(size_t)t * dk + i]) * q[(size_t)t * dk + i];
			o[(size_t)t * dv + j] = oo;
		}
}

// The same in chunks of c positions: with G the decays' running sum inside a chunk and S0 the
// state before it, d_t = beta_t (v_t - e^G_t S0 k_t - sum_{s<t} e^(G_t - G_s) (k_s . k_t) d_s)
// (a triangular solve), o_t = e^G_t S0 q_t + sum_{s<=t} e^(G_t - G_s) (k_s . q_t) d_s, and
// the state after it e^G_last S0 + sum_s e^(G_last - G_s) d_s k_s^T.
static void delta_chunks(const double *q, const double *k, const double *v, const double *beta, const double *g, int P, int dk,
			 int dv, int c, double *S, double *o) {
	double *G = malloc(sizeof(double) * c), *d = malloc(sizeof(double) * c * dv), *S0 = malloc(sizeof(double) * dv * dk);
	for (int c0 = 0; c0 < P; c0 += c) {
		const int n = P - c0 < c ? P - c0 : c;
		memcpy(S0, S, sizeof(double) * dv * dk);
		for (int t = 0; t < n; t++) G[t] = (t ? G[t - 1] : 0) + g[c0 + t];
		for (int t = 0; t < n; t++) {
			const double *kt = k + (size_t)(c0 + t) * dk, *qt = q + (size_t)(c0 + t) * dk;
			for (int j = 0; j < dv; j++) {
				double s0k = 0, s0q = 0, acc = 0;
				for (int i = 0; i < dk; i++) s0k += S0[(size_t)j * dk + i] * kt[i], s0q += S0[(size_t)j * dk + i] * qt[i];
				for (int u = 0; u < t; u++) {
					double kk = 0;
					for (int i = 0; i < dk; i++) kk += k[(size_t)(c0 + u) * dk + i] * kt[i];
					acc += exp(G[t] - G[u]) * kk * d[(size_t)u * dv + j];
				}
				d[(size_t)t * dv + j] = beta[c0 + t] * (v[(size_t)(c0 + t) * dv + j] - exp(G[t]) * s0k - acc);
				double oo = exp(G[t]) * s0q;
				for (int u = 0; u <= t; u++) {
					double kq = 0;
					for (int i = 0; i < dk; i++) kq += k[(size_t)(c0 + u) * dk + i] * qt[i];
					oo += exp(G[t] - G[u]) * kq * d[(size_t)u * dv + j];
				}
				o[(size_t)(c0 + t) * dv + j] = oo;
			}
		}
		for (int j = 0; j < dv; j++)
			for (int i = 0; i < dk; i++) {
				double st = exp(G[n - 1]) * S0[(size_t)j * dk + i];
				for (int u = 0; u < n; u++) st += exp(G[n - 1] - G[u]) * d[(size_t)u * dv + j] * k[(size_t)(c0 + u) * dk + i];
				S[(size_t)j * dk + i] = st;
			}
	}
	free(G), free(d), free(S0);
}

// A Gated DeltaNet layer over every position: x[p] += its output.
static void deltanet_ref(const gguf *g, const ref64_shape *s, int l, double *x, int P) {
	const int E = s->E, Dk = s->ssm_dk, Dv = s->ssm_dv, Hk = s->ssm_hk, Hv = s->ssm_hv, R = Hv / Hk, K = s->ssm_conv;
	const int C = 2 * Hk * Dk + Hv * Dv, VD = Hv * Dv;
	double *an = WL(g, l, "attn_norm.weight"), *wqkv = WL(g, l, "attn_qkv.weight"), *wz = WL(g, l, "attn_gate.weight"),
	       *win = WL(g, l, "ssm_in.weight"), *wba = WL(g, l, "ssm_ba.weight"), *cw = WL(g, l, "ssm_conv1d.weight"),
	       *dt = WL(g, l, "ssm_dt.bias"), *A = WL(g, l, "ssm_a"), *nw = WL(g, l, "ssm_norm.weight"), *wo = WL(g, l, "ssm_out.weight");
	double *h = malloc(sizeof(double) * E), *raw = calloc((size_t)P * C, sizeof(double)), *z = malloc(sizeof(double) * P * VD);
	double *ba = malloc(sizeof(double) * P * 2 * Hv), *cv = malloc(sizeof(double) * P * C), *o = malloc(sizeof(double) * P * VD);
	double *tmp = malloc(sizeof(double) * (C + VD));
	for (int p = 0; p < P; p++) {
		rms(x + (size_t)p * E, an, E, s->rms_eps, h);
		if (win) {
			// per key head: q, k, its value heads' v, then their z
			mv(win, NULL, h, E, C + VD, tmp);
			const int per = 2 * Dk + 2 * R * Dv;
			for (int kh = 0; kh < Hk; kh++)
				for (int i = 0; i < per; i++) {
					const double val = tmp[kh * per + i];
					if (i < Dk) raw[(size_t)p * C + kh * Dk + i] = val;
					else if (i < 2 * Dk) raw[(size_t)p * C + Hk * Dk + kh * Dk + i - Dk] = val;
					else if (i < 2 * Dk + R * Dv) raw[(size_t)p * C + 2 * Hk * Dk + kh * R * Dv + i - 2 * Dk] = val;
					else z[(size_t)p * VD + kh * R * Dv + i - 2 * Dk - R * Dv] = val;
				}
		} else {
			mv(wqkv, NULL, h, E, C, raw + (size_t)p * C);
			mv(wz, NULL, h, E, VD, z + (size_t)p * VD);
		}
		mv(wba, NULL, h, E, 2 * Hv, ba + (size_t)p * 2 * Hv);
	}
	// the causal convolution (inputs before position 0 are zero), then SiLU
	for (int p = 0; p < P; p++)
		for (int c = 0; c < C; c++) {
			double acc = 0;
			for (int t = 0; t < K; t++) {
				const int src = p - (K - 1) + t;
				if (src >= 0) acc += cw[(size_t)c * K + t] * raw[(size_t)src * C + c];
			}
			if (s->no_conv) acc = raw[(size_t)p * C + c];
			cv[(size_t)p * C + c] = silu(acc);
		}
	double *q = malloc(sizeof(double) * P * Dk), *k = malloc(sizeof(double) * P * Dk), *v = malloc(sizeof(double) * P * Dv);
	double *bt = malloc(sizeof(double) * P), *gd = malloc(sizeof(double) * P), *S = malloc(sizeof(double) * Dv * Dk);
	double *oh = malloc(sizeof(double) * P * Dv);
	for (int hv = 0; hv < Hv; hv++) {
		const int kh = hv / R, j = hv % R;
		for (int p = 0; p < P; p++) {
			double nq = 0, nk = 0;
			for (int i = 0; i < Dk; i++) {
				q[(size_t)p * Dk + i] = cv[(size_t)p * C + kh * Dk + i];
				k[(size_t)p * Dk + i] = cv[(size_t)p * C + Hk * Dk + kh * Dk + i];
				nq += q[(size_t)p * Dk + i] * q[(size_t)p * Dk + i], nk += k[(size_t)p * Dk + i] * k[(size_t)p * Dk + i];
			}
			// L2 norms (|x| at least eps), the query scaled by 1/sqrt(dk)
			nq = 1 / fmax(sqrt(nq), s->rms_eps) / sqrt((double)Dk), nk = 1 / fmax(sqrt(nk), s->rms_eps);
			for (int i = 0; i < Dk; i++) q[(size_t)p * Dk + i] *= nq, k[(size_t)p * Dk + i] *= nk;
			for (int i = 0; i < Dv; i++) v[(size_t)p * Dv + i] = cv[(size_t)p * C + 2 * Hk * Dk + hv * Dv + i];
			const double b = ba[(size_t)p * 2 * Hv + kh * 2 * R + j], a = ba[(size_t)p * 2 * Hv + kh * 2 * R + R + j] + dt[hv];
			bt[p] = sigm(b);
			gd[p] = s->no_decay ? 0 : A[hv] * (a > 20 ? a : log1p(exp(a)));
		}
		memset(S, 0, sizeof(double) * Dv * Dk);
		if (s->chunk > 0) delta_chunks(q, k, v, bt, gd, P, Dk, Dv, s->chunk, S, oh);
		else delta_steps(q, k, v, bt, gd, P, Dk, Dv, S, oh);
		// the gated norm: RMSNorm of the head's output times SiLU of its z
		for (int p = 0; p < P; p++) {
			double *op = o + (size_t)p * VD + hv * Dv;
			rms(oh + (size_t)p * Dv, nw, Dv, s->rms_eps, op);
			for (int i = 0; i < Dv && !s->no_out_gate; i++) op[i] *= silu(z[(size_t)p * VD + hv * Dv + i]);
		}
	}
	for (int p = 0; p < P; p++) {
		mv(wo, NULL, o + (size_t)p * VD, VD, E, h);
		for (int e = 0; e < E; e++) x[(size_t)p * E + e] += h[e];
	}
	free(an), free(wqkv), free(wz), free(win), free(wba), free(cw), free(dt), free(A), free(nw), free(wo);
	free(h), free(raw), free(z), free(ba), free(cv), free(o), free(tmp), free(q), free(k), free(v), free(bt), free(gd), free(S), free(oh);
}

// Block l of the file (its attention and FFN) over the P positions' residual rows x, in place.
static void block_ref(const gguf *g, const ref64_shape *s, int l, double *x, int P, ref64_routes *rt) {
	const bool next = s->full_attn > 0, recurrent = next && (l + 1) % s->full_attn != 0;
	if (recurrent) deltanet_ref(g, s, l, x, P);
	const int E = s->E, H = s->H, HKV = s->HKV, D = s->D ? s->D : E / H, qd = H * D, kvd = HKV * D;
	double *h = malloc(sizeof(double) * E), *y = malloc(sizeof(double) * E);
	double *q = malloc(sizeof(double) * P * qd), *k = malloc(sizeof(double) * P * kvd), *v = malloc(sizeof(double) * P * kvd);
	double *att = malloc(sizeof(double) * qd), *sc = malloc(sizeof(double) * P), *gt = malloc(sizeof(double) * P * qd);
	double *ff = W(g, s->rope_factors ? s->rope_factors : "rope_freqs.weight");
	const int R = s->n_rot ? s->n_rot : D;
	const gguf_tensor *fft = gguf_find_tensor(g, s->rope_factors ? s->rope_factors : "rope_freqs.weight");
	const int64_t nff = fft ? gguf_tensor_nelem(fft) : 0; // pairs past the divisors the file has are not divided
	double ms = s->rope_mscale ? s->rope_mscale : 1.0, ylo = 0, yhi = 0;
	if (s->yarn_ext) {
		// the pair index turning beta times over the original context, whole pairs, within the head
		ylo = fmax(0, floor(R * log(s->yarn_orig / (s->yarn_beta_fast * 2 * M_PI)) / (2 * log(s->rope_base))));
		yhi = fmin(R - 1, ceil(R * log(s->yarn_orig / (s->yarn_beta_slow * 2 * M_PI)) / (2 * log(s->rope_base))));
		ms *= 1 + 0.1 * log(1 / s->rope_scale);
	}
	const bool neox = strcmp(s->arch, "llama") != 0;
	const double scale = s->attn_scale ? s->attn_scale : 1 / sqrt((double)D);
	double *an = WL(g, l, "attn_norm.weight"), *wqkv = WL(g, l, "attn_qkv.weight"), *wq = WL(g, l, "attn_q.weight"),
	       *wk = WL(g, l, "attn_k.weight"), *wv = WL(g, l, "attn_v.weight"), *wo = WL(g, l, "attn_output.weight"), *bq = WL(g, l, "attn_q.bias"),
	       *bk = WL(g, l, "attn_k.bias"), *bv = WL(g, l, "attn_v.bias"), *qn = WL(g, l, "attn_q_norm.weight"),
	       *kn = WL(g, l, "attn_k_norm.weight"), *fn = WL(g, l, s->oai || next ? "post_attention_norm.weight" : "ffn_norm.weight"),
	       *bo = WL(g, l, "attn_output.bias"), *sk = s->oai && !s->no_sinks ? WL(g, l, "attn_sinks.weight") : NULL,
	       *pa = s->post_norms ? WL(g, l, "post_attention_norm.weight") : NULL,
	       *pf = s->post_norms ? WL(g, l, "post_ffw_norm.weight") : NULL;
	const int win = s->swa > 0 && (s->swa_pattern == 0 || l % s->swa_pattern < s->swa_pattern - 1) ? s->swa : 0;
	const double base = win && s->rope_base_swa ? s->rope_base_swa : s->rope_base,
		     rscale = win && s->rope_scale_swa ? s->rope_scale_swa : s->rope_scale;
	const double *lq = wqkv ? wqkv : wq, *lk = wqkv ? wqkv + (size_t)qd * E : wk,
		     *lv = wqkv ? wqkv + (size_t)(qd + kvd) * E : wv;
	for (int p = 0; p < P && !recurrent; p++) {
		rms(x + (size_t)p * E, an, E, s->rms_eps, h);
		if (next) {
			// each head's query, then its gate
			double *qg = malloc(sizeof(double) * 2 * qd);
			mv(lq, NULL, h, E, 2 * qd, qg);
			for (int hh = 0; hh < H; hh++)
				for (int e = 0; e < D; e++)
					q[(size_t)p * qd + hh * D + e] = qg[2 * hh * D + e], gt[(size_t)p * qd + hh * D + e] = qg[2 * hh * D + D + e];
			free(qg);
		} else {
			mv(lq, bq, h, E, qd, q + (size_t)p * qd);
		}
		mv(lk, bk, h, E, kvd, k + (size_t)p * kvd);
		mv(lv, bv, h, E, kvd, v + (size_t)p * kvd);
		for (int hh = 0; hh < H + HKV; hh++) {
			double *vec = hh < H ? q + (size_t)p * qd + hh * D : k + (size_t)p * kvd + (hh - H) * D;
			if (qn && !s->no_qk_norm) rms(vec, hh < H ? qn : kn, D, s->rms_eps, vec);
			for (int i = 0; i < R / 2; i++) {
				const int a = neox ? i : 2 * i, b = neox ? i + R / 2 : 2 * i + 1;
				double th = p * pow(base, -2.0 * i / R) * rscale / (ff && i < nff ? ff[i] : 1.0);
				if (s->yarn_ext) {
					const double ex = th / rscale, ramp = (1 - fmin(1, fmax(0, (i - ylo) / fmax(0.001, yhi - ylo)))) * s->yarn_ext;
					th = th * (1 - ramp) + ex * ramp;
				}
				double x0 = vec[a], x1 = vec[b];
				vec[a] = (x0 * cos(th) - x1 * sin(th)) * ms;
				vec[b] = (x0 * sin(th) + x1 * cos(th)) * ms;
			}
		}
	}
	double *wt[4] = {NULL};
	if (s->X) {
		wt[0] = WL(g, l, "ffn_gate_inp.weight"), wt[1] = WL(g, l, "ffn_gate_exps.weight");
		wt[2] = WL(g, l, "ffn_up_exps.weight"), wt[3] = WL(g, l, "ffn_down_exps.weight");
	} else {
		wt[1] = WL(g, l, "ffn_gate.weight"), wt[2] = WL(g, l, "ffn_up.weight"), wt[3] = WL(g, l, "ffn_down.weight");
	}
	// a fused gate-up (no ffn_gate): the gate's rows first, then the up's
	const size_t half = (size_t)s->F * E;
	const double *gate = wt[1] ? wt[1] : wt[2] + (s->swap_gate_up ? half : 0),
		     *up = wt[1] ? wt[2] : wt[2] + (s->swap_gate_up ? 0 : half);
	for (int p = 0; p < P; p++) {
		for (int hh = 0; hh < H && !recurrent; hh++) {
			const int gk = hh / (H / HKV);
			// a sink: a score in the softmax's denominator alone
			double mx = sk ? sk[hh] : -1e300, sum = 0;
			const int t0 = win && p >= win ? p - win + 1 : 0;
			for (int t = t0; t <= p; t++) {
				double d = 0;
				for (int e = 0; e < D; e++) d += q[(size_t)p * qd + hh * D + e] * k[(size_t)t * kvd + gk * D + e];
				sc[t] = d * scale;
				if (s->attn_softcap) sc[t] = s->attn_softcap * tanh(sc[t] / s->attn_softcap);
				mx = fmax(mx, sc[t]);
			}
			if (sk) sum = exp(sk[hh] - mx);
			for (int t = t0; t <= p; t++) sum += sc[t] = exp(sc[t] - mx);
			for (int e = 0; e < D; e++) {
				double o = 0;
				for (int t = t0; t <= p; t++) o += sc[t] / sum * v[(size_t)t * kvd + gk * D + e];
				att[hh * D + e] = o;
			}
		}
		for (int i = 0; next && !recurrent && !s->no_attn_gate && i < qd; i++) att[i] *= sigm(gt[(size_t)p * qd + i]);
		if (!recurrent) {
			mv(wo, bo, att, qd, E, y);
			if (pa) rms(y, pa, E, s->rms_eps, y);
			for (int e = 0; e < E; e++) x[(size_t)p * E + e] += y[e];
		}
		rms(x + (size_t)p * E, fn, E, s->rms_eps, h);
		if (!s->X)
			ffn_ref(gate, up, wt[3], NULL, h, E, s->F, s->geglu ? GLU_GELU : GLU_SILU, y);
		else
			moe_ref(g, s, l, (const double *const *)wt, h, y, rt ? rt->ids + ((size_t)l * P + p) * s->K : NULL,
				rt ? rt->w + ((size_t)l * P + p) * s->K : NULL, rt ? rt->alt + (size_t)l * P + p : NULL,
				rt ? rt->margin + (size_t)l * P + p : NULL);
		if (pf) rms(y, pf, E, s->rms_eps, y);
		for (int e = 0; e < E; e++) x[(size_t)p * E + e] += y[e];
	}
	for (int i = 0; i < 4; i++) free(wt[i]);
	free(an), free(wqkv), free(wq), free(wk), free(wv), free(wo), free(bq), free(bk), free(bv), free(qn), free(kn), free(fn);
	free(pa), free(pf), free(bo), free(sk);
	free(ff), free(h), free(y), free(q), free(k), free(v), free(att), free(sc), free(gt);
}

void ref64_forward(const gguf *g, const ref64_shape *s, const int32_t *ids, int P, double *logits, ref64_routes *rt) {
	ref64_forward_hidden(g, s, ids, P, logits, rt, NULL);
}

// The output norm of each row of x into hidden (NULL: none), and the head's logits (NULL: none).
static void head_ref(const double *x, int P, const ref64_shape *s, const double *norm, const double *out, double *logits,
		     double *hidden) {
	const int E = s->E, V = s->V;
	double *h = malloc(sizeof(double) * E);
	for (int p = 0; p < P; p++) {
		rms(x + (size_t)p * E, norm, E, s->rms_eps, h);
		if (hidden) memcpy(hidden + (size_t)p * E, h, sizeof(double) * E);
		if (!logits) continue;
		mv(out, NULL, h, E, V, logits + (size_t)p * V);
		for (int i = 0; s->final_softcap && i < V; i++)
			logits[(size_t)p * V + i] = s->final_softcap * tanh(logits[(size_t)p * V + i] / s->final_softcap);
	}
	free(h);
}

void ref64_forward_hidden(const gguf *g, const ref64_shape *s, const int32_t *ids, int P, double *logits, ref64_routes *rt,
			  double *hidden) {
	const int E = s->E;
	double *x = calloc((size_t)P * E, sizeof *x), *emb = W(g, "token_embd.weight");
	for (int p = 0; p < P; p++)
		for (int e = 0; e < E; e++) x[(size_t)p * E + e] = emb[(size_t)ids[p] * E + e] * (s->embd_scale ? s->embd_scale : 1.0);
	for (int l = 0; l < s->L; l++) block_ref(g, s, l, x, P, rt);
	double *on = W(g, "output_norm.weight"), *out = s->tied ? NULL : W(g, "output.weight");
	head_ref(x, P, s, on, out ? out : emb, logits, hidden);
	free(on), free(out), free(emb), free(x);
}

void ref64_mtp(const gguf *g, const ref64_shape *s, const int32_t *tok, const double *hin, int P, double *logits, double *hout) {
	const int E = s->E, l = s->L;
	double *eh = WL(g, l, "nextn.eh_proj.weight"), *en = WL(g, l, "nextn.enorm.weight"), *hn = WL(g, l, "nextn.hnorm.weight"),
	       *emb = WL(g, l, "nextn.embed_tokens.weight"), *sn = WL(g, l, "nextn.shared_head_norm.weight"),
	       *sh = WL(g, l, "nextn.shared_head_head.weight");
	if (!emb) emb = W(g, "token_embd.weight");
	if (!sn) sn = W(g, "output_norm.weight");
	if (!sh) sh = W(g, s->tied ? "token_embd.weight" : "output.weight");
	double *x = malloc(sizeof(double) * P * E), *c = malloc(sizeof(double) * 2 * E);
	for (int p = 0; p < P; p++) {
		rms(emb + (size_t)tok[p] * E, en, E, s->rms_eps, c);
		rms(hin + (size_t)p * E, hn, E, s->rms_eps, c + E);
		mv(eh, NULL, c, 2 * E, E, x + (size_t)p * E);
	}
	block_ref(g, s, l, x, P, NULL);
	head_ref(x, P, s, sn, sh, logits, hout);
	free(eh), free(en), free(hn), free(emb), free(sn), free(sh), free(x), free(c);
}

// ---- BERT ---------------------------------------------------------------------------------
static int64_t meta_i(const gguf *g, const char *key) {
	int64_t v = 0;
	gguf_get_i64(g, key, &v);
	return v;
}

static void layer_norm64(const double *x, const double *w, const double *b, int n, double eps, double *y) {
	double mean = 0, var = 0;
	for (int i = 0; i < n; i++) mean += x[i];
	mean /= n;
	for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
	const double inv = 1 / sqrt(var / n + eps);
	for (int i = 0; i < n; i++) y[i] = (x[i] - mean) * inv * w[i] + b[i];
}

void ref64_bert(const gguf *g, const int32_t *ids, int P, const ref64_bert_opts *o, double *pooled, double *score) {
	const int E = (int)meta_i(g, "bert.embedding_length"), L = (int)meta_i(g, "bert.block_count"),
		  H = (int)meta_i(g, "bert.attention.head_count"), F = (int)meta_i(g, "bert.feed_forward_length"), D = E / H;
	float epsf = 1e-12f;
	gguf_get_f32(g, "bert.attention.layer_norm_epsilon", &epsf);
	const double eps = epsf;
	uint32_t sep = UINT32_MAX;
	gguf_get_u32(g, "tokenizer.ggml.seperator_token_id", &sep);
	const gguf_tensor *tt = gguf_find_tensor(g, "token_types.weight");
	double *tok = W(g, "token_embd.weight"), *pos = W(g, "position_embd.weight"), *typ = W(g, "token_types.weight");
	double *nw = W(g, "token_embd_norm.weight"), *nb = W(g, "token_embd_norm.bias");
	double *x = calloc((size_t)P * E, sizeof *x), *t = calloc((size_t)P * E, sizeof *t), *q = calloc((size_t)P * E, sizeof *q),
	       *k = calloc((size_t)P * E, sizeof *k), *v = calloc((size_t)P * E, sizeof *v), *a = calloc((size_t)P * E, sizeof *a),
	       *u = calloc((size_t)F, sizeof *u), *sc = calloc((size_t)P, sizeof *sc);
	// embeddings: token + position + type (1 after the first separator), then LayerNorm
	int sep_at = P;
	for (int p = 0; p < P; p++) {
		const int type = !o->no_types && typ && tt->ne[1] > 1 && p > sep_at ? 1 : 0;
		if ((uint32_t)ids[p] == sep && sep_at == P) sep_at = p;
		for (int e = 0; e < E; e++)
			t[(size_t)p * E + e] = tok[(size_t)ids[p] * E + e] + pos[(size_t)p * E + e] + (typ ? typ[(size_t)type * E + e] : 0);
		layer_norm64(t + (size_t)p * E, nw, nb, E, eps, x + (size_t)p * E);
	}
	for (int l = 0; l < L; l++) {
		double *wq = WL(g, l, "attn_q.weight"), *bq = WL(g, l, "attn_q.bias"), *wk = WL(g, l, "attn_k.weight"),
		       *bk = WL(g, l, "attn_k.bias"), *wv = WL(g, l, "attn_v.weight"), *bv = WL(g, l, "attn_v.bias"),
		       *wo = WL(g, l, "attn_output.weight"), *bo = WL(g, l, "attn_output.bias"),
		       *n1w = WL(g, l, "attn_output_norm.weight"), *n1b = WL(g, l, "attn_output_norm.bias"),
		       *wu = WL(g, l, "ffn_up.weight"), *bu = WL(g, l, "ffn_up.bias"), *wd = WL(g, l, "ffn_down.weight"),
		       *bd = WL(g, l, "ffn_down.bias"), *n2w = WL(g, l, "layer_output_norm.weight"),
		       *n2b = WL(g, l, "layer_output_norm.bias");
		for (int p = 0; p < P; p++) {
			mv(wq, bq, x + (size_t)p * E, E, E, q + (size_t)p * E);
			mv(wk, bk, x + (size_t)p * E, E, E, k + (size_t)p * E);
			mv(wv, bv, x + (size_t)p * E, E, E, v + (size_t)p * E);
		}
		// every position attends to the whole sequence (causal: to those up to it)
		for (int p = 0; p < P; p++)
			for (int h = 0; h < H; h++) {
				const int n = o->causal ? p + 1 : P;
				double mx = -INFINITY, sum = 0;
				for (int j = 0; j < n; j++) {
					double d = 0;
					for (int c = 0; c < D; c++) d += q[(size_t)p * E + h * D + c] * k[(size_t)j * E + h * D + c];
					sc[j] = d / sqrt((double)D);
					mx = fmax(mx, sc[j]);
				}
				for (int j = 0; j < n; j++) sum += sc[j] = exp(sc[j] - mx);
				for (int c = 0; c < D; c++) {
					double s = 0;
					for (int j = 0; j < n; j++) s += sc[j] / sum * v[(size_t)j * E + h * D + c];
					a[(size_t)p * E + h * D + c] = s;
				}
			}
		for (int p = 0; p < P; p++) {
			double *xp = x + (size_t)p * E, *tp = t + (size_t)p * E;
			mv(wo, bo, a + (size_t)p * E, E, E, tp);
			for (int e = 0; e < E; e++) tp[e] += xp[e];
			layer_norm64(tp, n1w, n1b, E, eps, xp);
			mv(wu, bu, xp, E, F, u);
			for (int i = 0; i < F; i++) u[i] = 0.5 * u[i] * (1 + erf(u[i] / sqrt(2.0)));
			mv(wd, bd, u, F, E, tp);
			for (int e = 0; e < E; e++) tp[e] += xp[e];
			layer_norm64(tp, n2w, n2b, E, eps, xp);
		}
		free(wq), free(bq), free(wk), free(bk), free(wv), free(bv), free(wo), free(bo), free(n1w), free(n1b);
		free(wu), free(bu), free(wd), free(bd), free(n2w), free(n2b);
	}
	double *cw = W(g, "cls.weight"), *cb = W(g, "cls.bias"), *ow = W(g, "cls.output.weight"), *ob = W(g, "cls.output.bias");
	if (cw) {
		mv(cw, cb, x, E, E, pooled);
		for (int e = 0; e < E; e++) pooled[e] = tanh(pooled[e]);
	} else {
		memcpy(pooled, x, (size_t)E * sizeof *pooled);
	}
	if (score) mv(ow, ob, pooled, E, 1, score);
	free(cw), free(cb), free(ow), free(ob);
	free(tok), free(pos), free(typ), free(nw), free(nb);
	free(x), free(t), free(q), free(k), free(v), free(a), free(u), free(sc);
}
