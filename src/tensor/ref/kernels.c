// tensor/ref/kernels: the plain C kernels of the forward pass — matmul for every block
// type, RMSNorm, softmax, SwiGLU, RoPE, paged f16 attention and MoE routing. Each defines
// the fixed reduction order that faster kernels must keep.
#include "tensor/kern.h"

#include <math.h>
#include <string.h>

// Elements of k dequantized at a time: a multiple of every block size (1, 32, 256).
#define MM_CHUNK 256
// Outputs per tile: the accumulators of one x row sit side by side, one lane per output.
#define MM_OT 8
// Rows per tile kept in registers, and rows per accumulator block.
#define MM_RT 4
#define MM_RB 128

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// acc[r][i] += sum over j in order of wt[j][i] * x[r][j]: one lane per output, each lane
// the plain sequence acc = acc + w*x, exactly vec_dot_f32's order.
static void mm_rows4(const float (*wt)[MM_OT], int64_t nk, const float *x0, const float *x1,
		     const float *x2, const float *x3, float (*acc)[MM_OT]) {
	float a0[MM_OT], a1[MM_OT], a2[MM_OT], a3[MM_OT];
	memcpy(a0, acc[0], sizeof a0);
	memcpy(a1, acc[1], sizeof a1);
	memcpy(a2, acc[2], sizeof a2);
	memcpy(a3, acc[3], sizeof a3);
	for (int64_t j = 0; j < nk; j++) {
		const float *w = wt[j];
		const float v0 = x0[j], v1 = x1[j], v2 = x2[j], v3 = x3[j];
		// Unrolled so the accumulators live in registers.
#pragma GCC unroll 8
		for (int i = 0; i < MM_OT; i++) {
			a0[i] = a0[i] + w[i] * v0;
			a1[i] = a1[i] + w[i] * v1;
			a2[i] = a2[i] + w[i] * v2;
			a3[i] = a3[i] + w[i] * v3;
		}
	}
	memcpy(acc[0], a0, sizeof a0);
	memcpy(acc[1], a1, sizeof a1);
	memcpy(acc[2], a2, sizeof a2);
	memcpy(acc[3], a3, sizeof a3);
}

static void mm_rows1(const float (*wt)[MM_OT], int64_t nk, const float *x0, float *acc) {
	float a0[MM_OT];
	memcpy(a0, acc, sizeof a0);
	for (int64_t j = 0; j < nk; j++)
#pragma GCC unroll 8
		for (int i = 0; i < MM_OT; i++) a0[i] = a0[i] + wt[j][i] * x0[j];
	memcpy(acc, a0, sizeof a0);
}

// tensor_ref_matmul; with add, y = y + the dot.
static void ref_matmul(uint32_t type, const void *w, size_t wstride, int64_t k, const float *x, int64_t ldx, int64_t n,
		       float *y, int64_t ldy, int64_t o0, int64_t o1, bool add) {
	const tensor_traits *tt = tensor_traits_of(type);
	LANES_ASSERT(tt && k % tt->block == 0);
	const size_t chunk_bytes = (size_t)(MM_CHUNK / tt->block) * tt->bytes;
	float wt[MM_CHUNK][MM_OT]; // a dequantized chunk of MM_OT weight rows, transposed
	float buf[MM_OT][MM_CHUNK];
	float acc[MM_RB][MM_OT];
	for (int64_t ob = o0; ob < o1; ob += MM_OT) {
		const int no = (int)min64(MM_OT, o1 - ob);
		for (int64_t rb = 0; rb < n; rb += MM_RB) {
			const int64_t nr = min64(MM_RB, n - rb);
			memset(acc, 0, sizeof acc);
			for (int64_t kc = 0; kc < k; kc += MM_CHUNK) {
				const int64_t nk = min64(MM_CHUNK, k - kc);
				const size_t off = (size_t)(kc / MM_CHUNK) * chunk_bytes;
				for (int i = 0; i < MM_OT; i++) {
					if (i < no) tt->to_f32((const uint8_t *)w + (size_t)(ob + i) * wstride + off, buf[i], nk);
					else memset(buf[i], 0, sizeof buf[i]);
				}
				for (int64_t j = 0; j < nk; j++)
#pragma GCC unroll 8
					for (int i = 0; i < MM_OT; i++) wt[j][i] = buf[i][j];
				const float *xr = x + rb * ldx + kc;
				int64_t r = 0;
				for (; r + MM_RT <= nr; r += MM_RT)
					mm_rows4((const float(*)[MM_OT])wt, nk, xr + r * ldx, xr + (r + 1) * ldx,
						 xr + (r + 2) * ldx, xr + (r + 3) * ldx, &acc[r]);
				for (; r < nr; r++) mm_rows1((const float(*)[MM_OT])wt, nk, xr + r * ldx, acc[r]);
			}
			for (int64_t r = 0; r < nr; r++)
				for (int i = 0; i < no; i++) {
					float *yo = &y[(rb + r) * ldy + ob + i];
					*yo = add ? *yo + acc[r][i] : acc[r][i];
				}
		}
	}
}

void tensor_ref_matmul(uint32_t type, const void *w, size_t wstride, int64_t k, const float *x,
		       int64_t ldx, int64_t n, float *y, int64_t ldy, int64_t o0, int64_t o1) {
	ref_matmul(type, w, wstride, k, x, ldx, n, y, ldy, o0, o1, false);
}

typedef struct {
	uint32_t type;
	const void *w;
	size_t wstride;
	int64_t n_out, k, n;
	const float *x;
	float *y;
	void (*fn)(uint32_t, const void *, size_t, int64_t, const float *, int64_t, int64_t, float *,
		   int64_t, int64_t, int64_t);
} mm_job;

static void mm_task(void *arg, int ith, int nth) {
	const mm_job *j = arg;
	// Tiles of MM_OT outputs dealt out in contiguous runs; the split never touches k.
	int64_t tiles = (j->n_out + MM_OT - 1) / MM_OT;
	int64_t per = (tiles + nth - 1) / nth;
	int64_t o0 = min64((int64_t)ith * per * MM_OT, j->n_out);
	int64_t o1 = min64(o0 + per * MM_OT, j->n_out);
	if (o0 < o1) j->fn(j->type, j->w, j->wstride, j->k, j->x, j->k, j->n, j->y, j->n_out, o0, o1);
}

void tensor_matmul(base_pool *pool, uint32_t type, const void *w, size_t wstride, int64_t n_out,
		   int64_t k, const float *x, int64_t n, float *y) {
	const tensor_traits *tt = tensor_traits_of(type);
	LANES_ASSERT(tt);
	mm_job j = {type, w, wstride, n_out, k, n, x, y, tensor_ref_matmul};
	if (n <= 0 || n_out <= 0) return;
	if (!pool || n_out <= MM_OT) mm_task(&j, 0, 1);
	else base_pool_run(pool, mm_task, &j);
}

void tensor_rmsnorm(const float *x, const float *w, int64_t n, float eps, float *y) {
	double ss = 0.0;
	for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
	const double scale = 1.0 / sqrt(ss / (double)n + (double)eps);
	for (int64_t i = 0; i < n; i++) y[i] = (float)(w ? x[i] * scale * w[i] : x[i] * scale);
}

void tensor_softmax(float *x, int64_t n) {
	if (n <= 0) return;
	float mx = x[0];
	for (int64_t i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
	double sum = 0.0;
	for (int64_t i = 0; i < n; i++) sum += exp((double)x[i] - mx);
	for (int64_t i = 0; i < n; i++) x[i] = (float)(exp((double)x[i] - mx) / sum);
}

void tensor_swiglu(const float *g, const float *u, float *out, int64_t n) {
	for (int64_t i = 0; i < n; i++) {
		const double gv = g[i];
		out[i] = (float)(gv / (1.0 + exp(-gv)) * u[i]);
	}
}

// GELU's tanh form; Gemma's FFN gate as its checkpoints were trained (not the erf form).
void tensor_geglu(const float *g, const float *u, float *out, int64_t n) {
	for (int64_t i = 0; i < n; i++) {
		const double x = g[i];
		const double t = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
		out[i] = (float)(0.5 * x * (1.0 + t) * u[i]);
	}
}

void tensor_swiglu_oai(const float *g, const float *u, float *out, int64_t n) {
	for (int64_t i = 0; i < n; i++) {
		const double x = g[i] < TENSOR_OAI_LIMIT ? g[i] : TENSOR_OAI_LIMIT;
		const double y = u[i] < -TENSOR_OAI_LIMIT ? -TENSOR_OAI_LIMIT : u[i] > TENSOR_OAI_LIMIT ? TENSOR_OAI_LIMIT : u[i];
		out[i] = (float)(x / (1.0 + exp(-TENSOR_OAI_ALPHA * x)) * (y + 1.0));
	}
}

float tensor_softcap(float x, float cap) { return (float)(cap * tanh((double)x / cap)); }

static void ref_softcap_rows(float *x, int64_t n, float cap) {
	for (int64_t i = 0; i < n; i++) x[i] = tensor_softcap(x[i], cap);
}

// ---- RoPE ---------------------------------------------------------------------------------
// YaRN: the pair index at which a dimension turns n_rot_beta times over the training context.
static double yarn_corr_dim(int32_t n_dims, int32_t n_ctx_orig, double beta, double base) {
	return n_dims * log(n_ctx_orig / (beta * 2.0 * M_PI)) / (2.0 * log(base));
}

void tensor_rope_table(const tensor_rope *rp, int32_t pos, double *cs) {
	const int32_t half = rp->n_rot / 2;
	double lo = 0.0, hi = 0.0, mscale = rp->attn_factor;
	if (rp->ext_factor != 0.0) {
		lo = floor(yarn_corr_dim(rp->n_rot, rp->n_ctx_orig, rp->beta_fast, rp->freq_base));
		hi = ceil(yarn_corr_dim(rp->n_rot, rp->n_ctx_orig, rp->beta_slow, rp->freq_base));
		lo = lo < 0.0 ? 0.0 : lo;
		hi = hi > rp->n_rot - 1 ? rp->n_rot - 1 : hi;
		mscale *= 1.0 + 0.1 * log(1.0 / rp->freq_scale);
	}
	for (int32_t i = 0; i < half; i++) {
		double extrap = pos * pow(rp->freq_base, -2.0 * i / rp->n_rot);
		if (rp->freq_factors) extrap /= rp->freq_factors[i];
		double theta = rp->freq_scale * extrap;
		if (rp->ext_factor != 0.0) {
			double y = (i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
			double ramp = (1.0 - (y < 0.0 ? 0.0 : y > 1.0 ? 1.0 : y)) * rp->ext_factor;
			theta = theta * (1.0 - ramp) + extrap * ramp;
		}
		cs[2 * i] = cos(theta) * mscale;
		cs[2 * i + 1] = sin(theta) * mscale;
	}
}

void tensor_rope_apply(const tensor_rope *rp, const double *cs, float *x, int32_t n_heads,
		       int32_t head_dim) {
	const int32_t half = rp->n_rot / 2;
	for (int32_t h = 0; h < n_heads; h++) {
		float *v = x + (size_t)h * head_dim;
		for (int32_t i = 0; i < half; i++) {
			const int32_t a = rp->neox ? i : 2 * i, b = rp->neox ? i + half : 2 * i + 1;
			const double x0 = v[a], x1 = v[b], c = cs[2 * i], s = cs[2 * i + 1];
			v[a] = (float)(x0 * c - x1 * s);
			v[b] = (float)(x0 * s + x1 * c);
		}
	}
}

// ---- scaled f16 ------------------------------------------------------------------------------

// Byte b = 16 * octave + j: scale 2^(octave - 8) * 2^(j/16), every byte's value precomputed
// (a power-of-two factor is exact, so the table equals the formula bit for bit).
#define F16S_POW2(e) ((e) >= 0 ? (float)(1 << (e)) : 1.0f / (float)(1 << -(e)))
#define F16S_OCT(o)                                                                                    \
	1.000000000e+00f * F16S_POW2(o - 8), 1.044273782e+00f * F16S_POW2(o - 8),                       \
	1.090507733e+00f * F16S_POW2(o - 8), 1.138788635e+00f * F16S_POW2(o - 8),                       \
	1.189207115e+00f * F16S_POW2(o - 8), 1.241857812e+00f * F16S_POW2(o - 8),                       \
	1.296839555e+00f * F16S_POW2(o - 8), 1.354255547e+00f * F16S_POW2(o - 8),                       \
	1.414213562e+00f * F16S_POW2(o - 8), 1.476826146e+00f * F16S_POW2(o - 8),                       \
	1.542210825e+00f * F16S_POW2(o - 8), 1.610490332e+00f * F16S_POW2(o - 8),                       \
	1.681792831e+00f * F16S_POW2(o - 8), 1.756252160e+00f * F16S_POW2(o - 8),                       \
	1.834008086e+00f * F16S_POW2(o - 8), 1.915206561e+00f * F16S_POW2(o - 8)
const float kern_f16s_scales[256] = {F16S_OCT(0),  F16S_OCT(1),  F16S_OCT(2),  F16S_OCT(3),
				     F16S_OCT(4),  F16S_OCT(5),  F16S_OCT(6),  F16S_OCT(7),
				     F16S_OCT(8),  F16S_OCT(9),  F16S_OCT(10), F16S_OCT(11),
				     F16S_OCT(12), F16S_OCT(13), F16S_OCT(14), F16S_OCT(15)};

float tensor_f16s_scale(uint8_t b) { return kern_f16s_scales[b]; }

uint8_t tensor_f16s_encode(const float *x, int32_t n, uint16_t *h) {
	float m = 0.0f;
	for (int32_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
	// The octave keeps the largest value well inside f16's normal range.
	int oct = 8;
	while (oct < 15 && m >= ldexpf(16384.0f, oct - 8)) oct++;
	while (oct > 0 && m < ldexpf(0x1p-6f, oct - 8)) oct--;
	int best = 0;
	double best_err = INFINITY;
	for (int j = 0; j < 16; j++) {
		const double sc = tensor_f16s_scale((uint8_t)(oct * 16 + j));
		double err = 0.0;
		for (int32_t i = 0; i < n; i++) {
			const double d = tensor_f16_to_f32(tensor_f32_to_f16((float)(x[i] / sc))) * sc - x[i];
			err += d * d;
		}
		if (err < best_err) best_err = err, best = j;
	}
	const uint8_t b = (uint8_t)(oct * 16 + best);
	const double sc = tensor_f16s_scale(b);
	for (int32_t i = 0; i < n; i++) h[i] = tensor_f32_to_f16((float)(x[i] / sc));
	return b;
}

// ---- attention over the paged store ------------------------------------------------------------
float tensor_kv_row(const tensor_kv_view *kvv, bool v, int32_t j, int32_t head_dim, float *dst) {
	const int32_t pt = kvv->page_tokens;
	const size_t page = (size_t)kvv->pages[j / pt], slot = (size_t)(j % pt);
	const uint8_t *base = v ? kvv->v : kvv->k;
	if (kvv->enc == TENSOR_KV_F16) {
		const uint16_t *r = (const uint16_t *)base + page * kvv->page_stride + slot * kvv->row_stride;
		for (int32_t e = 0; e < head_dim; e++) dst[e] = tensor_f16_to_f32(r[e]);
		const uint8_t *sb = v ? kvv->vs : kvv->ks;
		return sb ? tensor_f16s_scale(sb[page * kvv->s_page_stride + slot * kvv->s_row_stride]) : 1.0f;
	}
	const uint8_t *r = base + page * kvv->page_stride + slot * kvv->row_stride;
	for (int32_t e = 0; e < head_dim; e++) {
		const int32_t i = kvv->off + e, b = i / 32, w = i % 32;
		if (kvv->enc == TENSOR_KV_Q8_0) {
			const block_q8_0 *blk = (const block_q8_0 *)r + b;
			dst[e] = tensor_f16_to_f32(blk->d) * (float)blk->qs[w];
		} else {
			const block_q4_0 *blk = (const block_q4_0 *)r + b;
			const int q = w < 16 ? blk->qs[w] & 15 : blk->qs[w - 16] >> 4;
			dst[e] = tensor_f16_to_f32(blk->d) * (float)(q - 8);
		}
	}
	return 1.0f;
}

#define KV_ROW_MAX 1024 // head_dim the reference reads through a stack row at most

void tensor_attn_f16(const float *q, int32_t head_dim, float scale, const tensor_kv_view *kvv,
		     int32_t n_pos, float *scores, float *out) {
	float row[KV_ROW_MAX];
	float mx = kvv->sinks ? kvv->sinks[0] : -INFINITY; // a sink is a score whose value row is 0
	const int32_t lo = tensor_attn_first(kvv, n_pos);
	for (int32_t j = lo; j < n_pos; j++) {
		const float ksc = tensor_kv_row(kvv, false, j, head_dim, row);
		float s = 0.0f;
		for (int32_t e = 0; e < head_dim; e++) s = s + q[e] * row[e];
		if (kvv->ks) s = s * ksc;
		s = s * scale;
		if (kvv->softcap != 0.0f) s = tensor_softcap(s, kvv->softcap);
		scores[j] = s;
		mx = s > mx ? s : mx;
	}
	double sum = kvv->sinks ? (float)exp((double)kvv->sinks[0] - mx) : 0.0;
	for (int32_t j = lo; j < n_pos; j++) {
		const float p = (float)exp((double)scores[j] - mx);
		scores[j] = p;
		sum += p;
	}
	for (int32_t e = 0; e < head_dim; e++) out[e] = 0.0f;
	for (int32_t j = lo; j < n_pos; j++) {
		const float vsc = tensor_kv_row(kvv, true, j, head_dim, row);
		float p = scores[j];
		if (kvv->vs) p = p * vsc;
		for (int32_t e = 0; e < head_dim; e++) out[e] = out[e] + p * row[e];
	}
	const double inv = 1.0 / sum;
	for (int32_t e = 0; e < head_dim; e++) out[e] = (float)(out[e] * inv);
}

int32_t tensor_attn_block_rows(int32_t nq) { return nq >= TENSOR_ATT_QUERIES ? 1 : TENSOR_ATT_QUERIES / nq; }

size_t tensor_attn_scratch(int32_t nq, int32_t head_dim) {
	// a block's lanes, padded to whole vectors of 16: queries transposed, a tile of scores per
	// lane, one tile of K or V rows, the running output per query and 5 figures per lane
	const size_t lanes = ((size_t)(nq > TENSOR_ATT_QUERIES ? nq : TENSOR_ATT_QUERIES) + 15) & ~(size_t)15;
	const size_t d = (size_t)head_dim;
	return lanes * (d + TENSOR_ATT_TILE + d + 5) + (size_t)TENSOR_ATT_TILE * (d + 2) + 64;
}

void tensor_attn(const float *q, int32_t head_dim, float scale, const tensor_kv_view *kvv, int32_t n_pos,
		 float *scratch, float *out) {
	float *row = scratch, *sc = scratch + head_dim;
	// a sink starts the online softmax as a score seen before position 0, whose value row is 0
	float mx = kvv->sinks ? kvv->sinks[0] : -INFINITY;
	double sum = kvv->sinks ? 1.0 : 0.0;
	const int32_t lo = tensor_attn_first(kvv, n_pos);
	for (int32_t e = 0; e < head_dim; e++) out[e] = 0.0f;
	// tiles stay fixed by absolute position; those wholly before the window are not read
	for (int32_t t0 = lo / TENSOR_ATT_TILE * TENSOR_ATT_TILE; t0 < n_pos; t0 += TENSOR_ATT_TILE) {
		const int32_t nt = n_pos - t0 < TENSOR_ATT_TILE ? n_pos - t0 : TENSOR_ATT_TILE;
		float tmx = -INFINITY;
		for (int32_t j = 0; j < nt; j++) {
			if (t0 + j < lo) continue;
			const float ksc = tensor_kv_row(kvv, false, t0 + j, head_dim, row);
			float s = 0.0f;
			for (int32_t e = 0; e < head_dim; e++) s = s + q[e] * row[e];
			s = s * ksc * scale;
			if (kvv->softcap != 0.0f) s = tensor_softcap(s, kvv->softcap);
			sc[j] = s;
			tmx = s > tmx ? s : tmx;
		}
		// a larger maximum rescales what the earlier tiles summed
		if (tmx > mx) {
			const float a = (float)exp((double)mx - tmx);
			sum *= a;
			for (int32_t e = 0; e < head_dim; e++) out[e] = out[e] * a;
			mx = tmx;
		}
		for (int32_t j = t0 < lo ? lo - t0 : 0; j < nt; j++) {
			const float p = (float)exp((double)sc[j] - mx);
			sum += p;
			const float w = p * tensor_kv_row(kvv, true, t0 + j, head_dim, row);
			for (int32_t e = 0; e < head_dim; e++) out[e] = out[e] + w * row[e];
		}
	}
	const double inv = 1.0 / sum;
	for (int32_t e = 0; e < head_dim; e++) out[e] = (float)(out[e] * inv);
}

// ---- MoE ------------------------------------------------------------------------------------
void tensor_moe_route(const float *logits, int32_t n_exp, int32_t n_used, bool norm, int32_t *ids,
		      float *w) {
	double mx = logits[0], sum = 0.0, sel = 0.0;
	for (int32_t e = 1; e < n_exp; e++) mx = logits[e] > mx ? logits[e] : mx;
	for (int32_t e = 0; e < n_exp; e++) sum += exp(logits[e] - mx);
	for (int32_t k = 0; k < n_used; k++) {
		int32_t best = -1;
		for (int32_t e = 0; e < n_exp; e++) {
			bool taken = false;
			for (int32_t t = 0; t < k; t++) taken |= ids[t] == e;
			if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
		}
		ids[k] = best;
		sel += exp(logits[best] - mx) / sum;
	}
	for (int32_t k = 0; k < n_used; k++) {
		const double p = exp(logits[ids[k]] - mx) / sum;
		w[k] = (float)(norm ? p / sel : p);
	}
}

void tensor_gather_rows(const float *src, int64_t ld, const int32_t *idx, int64_t n_idx, int64_t n,
			float *dst) {
	for (int64_t i = 0; i < n_idx; i++) memcpy(dst + i * n, src + idx[i] * ld, (size_t)n * sizeof *dst);
}

// ---- 8-bit activations: the specification of width q8 ------------------------------------------
// A row's block of 32: d = amax / 127, q = x / d rounded to nearest even (x * (1 / d), as the
// vector quantizers compute it), so |x - d q| <= d / 2.
static void ref_act_q8(const float *x, int64_t k, kern_q8 *dst) {
	for (int64_t b = 0; b < k / 32; b++, x += 32) {
		float amax = 0.0f;
		for (int i = 0; i < 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
		const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
		kern_q8 *o = (kern_q8 *)((uint8_t *)dst + (size_t)b * KERN_Q8_BYTES);
		int32_t s[2] = {0, 0};
		for (int i = 0; i < 32; i++) {
			float t = rintf(x[i] * id);
			t = t > 127.0f ? 127.0f : t < -127.0f ? -127.0f : t;
			o->qh[i] = (int8_t)t;
			s[i / 16] += o->qh[i];
		}
		o->d = d;
		o->sum = s[0] + s[1];
		o->s16[0] = s[0], o->s16[1] = s[1];
		o->ds = d * (float)o->sum;
		o->n8 = -8 * o->sum;
		o->n32[0] = -32 * s[0], o->n32[1] = -32 * s[1];
	}
}

// Piece t (elements 32t..32t+31) of a decoded block as signed codes c with w = a[h] c + m[h]
// for the elements of half h (kern_codes says what each type's codes mean).
static void ref_piece(uint32_t type, const kern_codes *dc, int t, int8_t c[32], float a[2], float m[2]) {
	const float d = tensor_f16_to_f32(dc->d), dm = tensor_f16_to_f32(dc->m);
	const uint8_t *u = dc->u + 32 * t;
	int off = 0;
	a[0] = a[1] = d;
	m[0] = m[1] = 0.0f;
	type = kern_codes_as(type);
	const kern_iq_codebook *cb = kern_iq_codebook_of(type);
	if (cb) {
		for (int h = 0; h < 2; h++) a[h] = d * (float)dc->sc[2 * t + h] * cb->mul;
		for (int i = 0; i < 32; i++) c[i] = cb->v[u[i]];
		return;
	}
	switch (type) {
	case GGUF_T_Q4_0: off = 8; break;
	case GGUF_T_Q5_0: off = 16; break;
	case GGUF_T_Q4_1:
	case GGUF_T_Q5_1: m[0] = m[1] = dm; break;
	case GGUF_T_Q8_0: off = 0; break;
	case GGUF_T_IQ4_NL: break;
	case GGUF_T_IQ4_XS: a[0] = a[1] = d * (float)(int8_t)dc->sc[t]; break;
	case GGUF_T_MXFP4: a[0] = a[1] = tensor_e8m0_half(dc->sc[0]); break;
	case GGUF_T_Q2_K:
		for (int h = 0; h < 2; h++) {
			a[h] = d * (float)(dc->sc[2 * t + h] & 15);
			m[h] = -(dm * (float)(dc->sc[2 * t + h] >> 4));
		}
		break;
	case GGUF_T_Q3_K:
	case GGUF_T_Q6_K:
		off = type == GGUF_T_Q3_K ? 4 : 32;
		for (int h = 0; h < 2; h++) a[h] = d * (float)(int8_t)dc->sc[2 * t + h];
		break;
	default: // Q4_K, Q5_K
		a[0] = a[1] = d * (float)dc->sc[t];
		m[0] = m[1] = -(dm * (float)dc->mn[t]);
	}
	const bool iq4 = type == GGUF_T_IQ4_NL || type == GGUF_T_IQ4_XS;
	const int8_t *book = iq4 ? tensor_iq4nl_values : type == GGUF_T_MXFP4 ? tensor_mxfp4_values : NULL;
	for (int i = 0; i < 32; i++) c[i] = type == GGUF_T_Q8_0 ? (int8_t)u[i] : book ? book[u[i]] : (int8_t)(u[i] - off);
}

// Outputs [o0, o1) of n rows of kern_q8 blocks: per output, blocks in k order, each piece of
// 32 one exact integer dot per half, acc = acc + d_x * (a0 s0 + a1 s1 + m0 t0 + m1 t1).
static void ref_mm_q8(const tensor_mat *w, const void *mat, const void *xa, size_t xa_stride, int64_t n, float *y,
		      int64_t ldy, int64_t o0, int64_t o1, bool add) {
	const tensor_traits *tt = tensor_traits_of(w->type);
	const int64_t nb = w->k / tt->block, np = tt->block / 32;
	float acc[MM_RB];
	kern_codes dc;
	int8_t c[32];
	float a[2], m[2];
	for (int64_t o = o0; o < o1; o++) {
		const uint8_t *row = (const uint8_t *)mat + (size_t)o * w->row_bytes;
		for (int64_t rb = 0; rb < n; rb += MM_RB) {
			const int64_t nr = min64(MM_RB, n - rb);
			for (int64_t r = 0; r < nr; r++) acc[r] = 0.0f;
			for (int64_t b = 0; b < nb; b++) {
				kern_decode(w->type, row + (size_t)b * tt->bytes, &dc, false);
				for (int t = 0; t < np; t++) {
					ref_piece(w->type, &dc, t, c, a, m);
					for (int64_t r = 0; r < nr; r++) {
						const kern_q8 *x = (const kern_q8 *)((const uint8_t *)xa + (size_t)(rb + r) * xa_stride +
										     (size_t)(b * np + t) * KERN_Q8_BYTES);
						int32_t s0 = 0, s1 = 0;
						for (int i = 0; i < 16; i++) s0 += c[i] * x->qh[i], s1 += c[16 + i] * x->qh[16 + i];
						const float blk = (a[0] * (float)s0 + a[1] * (float)s1) +
								  (m[0] * (float)x->s16[0] + m[1] * (float)x->s16[1]);
						acc[r] = acc[r] + x->d * blk;
					}
				}
			}
			for (int64_t r = 0; r < nr; r++) y[(rb + r) * ldy + o] = add ? y[(rb + r) * ldy + o] + acc[r] : acc[r];
		}
	}
}

static enum kern_act ref_act_kind_q8(uint32_t type) { return kern_has_codes(type) ? KERN_ACT_Q8 : KERN_ACT_F32; }

// ---- the reference kernel set: weights in place, float activations ---------------------------
static enum kern_act ref_act_kind(uint32_t type) { return KERN_ACT_F32; }

static void ref_mm(const tensor_mat *w, const void *mat, const void *xa, size_t xa_stride, int64_t n, float *y,
		   int64_t ldy, int64_t o0, int64_t o1, bool add) {
	ref_matmul(w->type, mat, w->row_bytes, w->k, xa, (int64_t)(xa_stride / sizeof(float)), n, y, ldy, o0, o1, add);
}

static void ref_attn(const float *q, size_t q_stride, const int32_t *ridx, int32_t nr, int32_t nq, int32_t head_dim,
		     float scale, const tensor_kv_view *kvv, const int32_t *n_pos, float *scratch, float *out, size_t o_stride) {
	for (int32_t i = 0; i < nr; i++) {
		const size_t r = (size_t)(ridx ? ridx[i] : i);
		for (int32_t h = 0; h < nq; h++) {
			const tensor_kv_view kh = tensor_kv_head(kvv, h);
			tensor_attn(q + r * q_stride + (size_t)h * head_dim, head_dim, scale, &kh, n_pos[i], scratch,
				    out + r * o_stride + (size_t)h * head_dim);
		}
	}
}

static void ref_attn_unfused(const float *q, int32_t nq, int32_t head_dim, float scale, const tensor_kv_view *kvv,
			     int32_t n_pos, float *scores, float *out) {
	for (int32_t h = 0; h < nq; h++) {
		const tensor_kv_view kh = tensor_kv_head(kvv, h);
		tensor_attn_f16(q + (size_t)h * head_dim, head_dim, scale, &kh, n_pos, scores + (size_t)h * n_pos,
				out + (size_t)h * head_dim);
	}
}

// ---- the training products: plain multiply then add, inputs in order ----------------------------
static void ref_f32_rows(uint32_t type, const void *src, float *dst, int64_t n) { tensor_traits_of(type)->to_f32(src, dst, n); }

static void ref_f32_t16(const float *w, int64_t ldw, int64_t kn, float *wt) {
	for (int r = 0; r < 16; r++)
		for (int64_t c = 0; c < kn; c++) wt[c * 16 + r] = w[r * ldw + c];
}

static void ref_f32_fwd(const float *wt, int64_t kn, const float *x, int64_t ldx, int64_t n, float *y) {
	for (int64_t i = 0; i < n; i++) {
		float acc[16];
		memcpy(acc, y + i * 16, sizeof acc);
		for (int64_t c = 0; c < kn; c++)
			for (int o = 0; o < 16; o++) acc[o] += x[i * ldx + c] * wt[c * 16 + o];
		memcpy(y + i * 16, acc, sizeof acc);
	}
}

static void ref_f32_bwd(const float *w, int64_t ldw, int64_t nr, int64_t kn, const float *dy, int64_t ldy, int64_t n,
			float *dx, int64_t ldx) {
	for (int64_t i = 0; i < n; i++)
		for (int64_t r = 0; r < nr; r++) {
			const float d = dy[i * ldy + r];
			for (int64_t c = 0; c < kn; c++) dx[i * ldx + c] += d * w[r * ldw + c];
		}
}

static bool ref_cpu_ok(void) { return true; }

// Width q8: float weight types keep ref_mm.
static void ref_mm_any(const tensor_mat *w, const void *mat, const void *xa, size_t xa_stride, int64_t n, float *y,
		       int64_t ldy, int64_t o0, int64_t o1, bool add) {
	if (kern_has_codes(w->type)) ref_mm_q8(w, mat, xa, xa_stride, n, y, ldy, o0, o1, add);
	else ref_mm(w, mat, xa, xa_stride, n, y, ldy, o0, o1, add);
}

#define REF_SET(ACT, TWIN, ACT_KIND, ACT_Q8, MATMUL)                                                               \
	{.name = "ref", .act = ACT, .twin = &TWIN, .act_bytes = ACT == TENSOR_ACT_Q8 ? KERN_Q8_BYTES : sizeof(kern_q8), .tile = MM_OT, .act_kind = ACT_KIND, .act_q8 = ACT_Q8,             \
	 .matmul = MATMUL, .attn = ref_attn, .attn_unfused = ref_attn_unfused, .rmsnorm = tensor_rmsnorm,            \
	 .swiglu = tensor_swiglu, .geglu = tensor_geglu, .swiglu_oai = tensor_swiglu_oai, .softcap_rows = ref_softcap_rows, .f16s_encode = tensor_f16s_encode, .f32_rows = ref_f32_rows, .f32_t16 = ref_f32_t16, \
	 .f32_fwd = ref_f32_fwd, .f32_bwd = ref_f32_bwd, .cpu_ok = ref_cpu_ok}
const tensor_kernels tensor_kernels_ref = REF_SET(TENSOR_ACT_Q16, tensor_kernels_ref_q8, ref_act_kind, NULL, ref_mm);
const tensor_kernels tensor_kernels_ref_q8 = REF_SET(TENSOR_ACT_Q8, tensor_kernels_ref, ref_act_kind_q8, ref_act_q8, ref_mm_any);
