// model/load: architecture table, hyper-parameters from `<arch>.*` metadata, and binding of
// every tensor in place with its shape checked against them. Vectors that are not aligned
// f32 are converted to owned f32 copies; matrices are repacked for the kernel set or read in
// place. A metadata-only mode does the same checks and accounting without touching tensor data.
#include "model/model_int.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

enum moe_mode { MOE_NO, MOE_OPTIONAL, MOE_REQUIRED };

typedef struct {
	const char *name;
	bool neox;             // NEOX rope order
	bool bias;             // q/k/v biases required (else optional)
	bool qk_norm;          // per-head q/k RMS norm
	enum moe_mode moe;     // MoE layers: when expert_count > 0, or always
	bool shexp;            // shared expert with a sigmoid gate
	bool moe_norm;         // default: renormalize the chosen experts' weights
	int gemma;             // Gemma's block (2, 3; 0: none): scaled embeddings, post norms, GELU, local layers
	bool phi3;             // fused qkv and gate-up matrices, LongRoPE, a window on every layer
	bool oai;              // gpt-oss: sinks, biased router and experts, clamped SwiGLU, even layers local
	bool next;             // qwen3next: Gated DeltaNet layers between gated full-attention ones
	bool nextn;            // MTP layers (nextn_predict_layers) may follow the trunk's blocks
	bool bert;             // an encoder: learned positions, post-LayerNorm blocks, a GELU FFN, a classifier head
} arch_desc;

static const arch_desc archs[] = {
	{.name = "llama", .moe = MOE_OPTIONAL, .moe_norm = true, .nextn = true},
	{.name = "qwen2", .neox = true, .bias = true, .nextn = true},
	{.name = "qwen3", .neox = true, .qk_norm = true, .nextn = true},
	{.name = "qwen2moe", .neox = true, .bias = true, .moe = MOE_REQUIRED, .shexp = true, .nextn = true},
	{.name = "qwen3moe", .neox = true, .qk_norm = true, .moe = MOE_REQUIRED, .moe_norm = true, .nextn = true},
	{.name = "gemma2", .neox = true, .gemma = 2},
	{.name = "gemma3", .neox = true, .qk_norm = true, .gemma = 3},
	{.name = "phi3", .neox = true, .phi3 = true},
	{.name = "gpt-oss", .neox = true, .bias = true, .moe = MOE_REQUIRED, .moe_norm = true, .oai = true},
	{.name = "qwen3next", .neox = true, .qk_norm = true, .moe = MOE_REQUIRED, .shexp = true, .moe_norm = true, .next = true},
	{.name = "bert", .bias = true, .bert = true},
};

typedef struct {
	model *m;
	const char *arch;
	gguf *src;             // where the tensors being bound are: NULL for the model's file
	bool meta;             // metadata only: count what binding would copy, read no tensor data
	char *err;
	size_t errlen;
} loader;

// ---- metadata ---------------------------------------------------------------------------
// Reads integer `<arch>.key` into out, within [lo, hi]; def when absent and def_ok.
static int meta_int(loader *L, const char *key, bool def_ok, int64_t def, int64_t lo, int64_t hi,
		    int32_t *out) {
	char full[128];
	snprintf(full, sizeof full, "%s.%s", L->arch, key);
	int64_t v;
	int rc = gguf_get_i64(L->m->g, full, &v);
	if (rc == LANES_ENOTFOUND) {
		if (!def_ok) return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: missing metadata key %s", full);
		v = def;
	} else if (rc) {
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: metadata key %s is not an integer", full);
	}
	if (v < lo || v > hi)
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: metadata key %s = %lld is out of range [%lld, %lld]",
				    full, (long long)v, (long long)lo, (long long)hi);
	*out = (int32_t)v;
	return LANES_OK;
}

static int meta_float(loader *L, const char *key, double def, double lo, double hi, double *out) {
	char full[128];
	snprintf(full, sizeof full, "%s.%s", L->arch, key);
	float v;
	int rc = gguf_get_f32(L->m->g, full, &v);
	if (rc == LANES_ENOTFOUND) {
		*out = def;
		return LANES_OK;
	}
	if (rc || !(v >= lo && v <= hi))
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: metadata key %s must be a number in [%g, %g]",
				    full, lo, hi);
	*out = v;
	return LANES_OK;
}

// ---- tensors ----------------------------------------------------------------------------
static int own_floats(model *m, int64_t n, float **out) {
	if (m->n_owned == m->cap_owned) {
		int cap = m->cap_owned ? m->cap_owned * 2 : 16;
		float **p = realloc(m->owned, (size_t)cap * sizeof *p);
		if (!p) return LANES_ENOMEM;
		m->owned = p;
		m->cap_owned = cap;
	}
	float *f = malloc((size_t)n * sizeof *f);
	if (!f) return LANES_ENOMEM;
	m->owned[m->n_owned++] = f;
	m->copied_bytes += (uint64_t)n * sizeof *f;
	*out = f;
	return LANES_OK;
}

// Finds name and checks its shape is exactly ne (dims past the tensor's count are 1).
static int find_shaped(loader *L, const char *name, bool required, const int64_t ne[GGUF_MAX_DIMS],
		       const gguf_tensor **out) {
	*out = NULL;
	const gguf_tensor *t = gguf_find_tensor(L->src ? L->src : L->m->g, name);
	if (!t) {
		if (!required) return LANES_OK;
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: missing tensor %s (architecture %s)", name, L->arch);
	}
	for (int d = 0; d < GGUF_MAX_DIMS; d++) {
		if (t->ne[d] != ne[d])
			return base_seterr(L->err, L->errlen, LANES_EFORMAT,
					    "model: tensor %s has shape [%lld, %lld, %lld], expected [%lld, %lld, %lld]", name,
					    (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
					    (long long)ne[0], (long long)ne[1], (long long)ne[2]);
	}
	const tensor_traits *tt = tensor_traits_of(t->type);
	const gguf_ttype_info *ti = gguf_ttype_get(t->type);
	if (!tt)
		return base_seterr(L->err, L->errlen, LANES_EUNSUPPORTED, "model: tensor %s has type %s, which lanes cannot compute with",
				    name, ti && ti->name ? ti->name : "unknown");
	size_t rb = tensor_row_bytes(t->type, ne[0]);
	uint64_t total;
	if (!rb || !ck_mul(rb, (uint64_t)(ne[1] * ne[2] * ne[3]), &total) || total != t->nbytes || !t->data)
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: tensor %s: %lld elements per row do not fit type %s",
				    name, (long long)ne[0], tt->name);
	*out = t;
	return LANES_OK;
}

// Binds a matrix stack [n_mat][rows][k].
static int bind_mat(loader *L, const char *name, bool required, int64_t k, int64_t rows, int64_t n_mat,
		    mweight *w) {
	memset(w, 0, sizeof *w);
	const gguf_tensor *t;
	const int64_t ne[GGUF_MAX_DIMS] = {k, rows, n_mat, 1};
	int rc = find_shaped(L, name, required, ne, &t);
	if (rc || !t) return rc;
	w->data = t->data;
	w->type = t->type;
	w->k = k;
	w->rows = rows;
	w->n_mat = n_mat;
	w->row_bytes = tensor_row_bytes(t->type, k);
	w->mat_bytes = w->row_bytes * (size_t)rows;
	L->m->weight_bytes += t->nbytes;
	return LANES_OK;
}

// Binds the row blocks of one stored matrix [sum of rows][k] as n matrices (ws[i]: rows[i] of
// them, in order), each in place where the next begins: a fused matrix used as stored.
static int bind_split(loader *L, const char *name, int64_t k, int n, const int64_t *rows, mweight *const *ws) {
	int64_t all = 0;
	for (int i = 0; i < n; i++) all += rows[i];
	mweight whole;
	int rc = bind_mat(L, name, true, k, all, 1, &whole);
	if (rc) return rc;
	const uint8_t *at = whole.data;
	for (int i = 0; i < n; i++) {
		*ws[i] = whole;
		ws[i]->data = at;
		ws[i]->rows = rows[i];
		ws[i]->mat_bytes = whole.row_bytes * (size_t)rows[i];
		at += ws[i]->mat_bytes;
	}
	return LANES_OK;
}

// ---- repacking for the kernel set ------------------------------------------------------------
// Every matrix the forward pass multiplies by (token_embd only when it is the output too).
static int model_mats(model *m, mweight **out, int cap) {
	int n = 0;
#define ADD(w) \
	if ((w).data && n < cap) out[n++] = &(w)
	ADD(m->output);
	ADD(m->cls);
	for (int i = 0; i < m->hp.n_nextn; i++) {
		ADD(m->nextn[i].eh_proj); ADD(m->nextn[i].own_head);
	}
	for (int l = 0; l < m->hp.n_layers + m->hp.n_nextn; l++) {
		mlayer *y = &m->layers[l];
		ADD(y->wq); ADD(y->wk); ADD(y->wv); ADD(y->wo);
		ADD(y->ffn_gate); ADD(y->ffn_up); ADD(y->ffn_down);
		ADD(y->gate_inp); ADD(y->gate_exps); ADD(y->up_exps); ADD(y->down_exps);
		ADD(y->gate_shexp); ADD(y->up_shexp); ADD(y->down_shexp); ADD(y->gate_inp_shexp);
		ADD(y->ssm_qkv); ADD(y->ssm_z); ADD(y->ssm_in); ADD(y->ssm_ba); ADD(y->ssm_out);
	}
#undef ADD
	return n;
}

static _Atomic int compact_mode = MODEL_COMPACT_AUTO;
static _Atomic uint64_t compact_budget; // 0: the memory available at the load

void model_select_compact(enum model_compact c) { atomic_store(&compact_mode, (int)c); }
void model_select_compact_budget(uint64_t bytes) { atomic_store(&compact_budget, bytes); }

// Whether w is held as a compact copy.
static bool mat_compact(const model *m, const mweight *w) { return m->compact && tensor_compact_ok(m->ks, w->type); }

// Bytes of w's packed (or compact) copy; 0: read in place (a type the set does not pack).
static size_t mat_pack_bytes(const model *m, const mweight *w) {
	if (mat_compact(m, w)) return tensor_compact_bytes(m->ks, w->type, w->rows, w->k, w->n_mat);
	return tensor_pack_bytes(m->ks, w->type, w->rows, w->k, w->n_mat);
}

// Whether the grid types' matrices are held compact: as chosen, or (auto) when packing every
// matrix would take more than 3/4 of the budget, or of the memory available now.
static bool choose_compact(const model *m, mweight *const *ws, int n) {
	const int mode = atomic_load(&compact_mode);
	if (mode != MODEL_COMPACT_AUTO) return mode == MODEL_COMPACT_ON;
	uint64_t total = 0;
	bool grid = false;
	for (int i = 0; i < n; i++) {
		total += tensor_pack_bytes(m->ks, ws[i]->type, ws[i]->rows, ws[i]->k, ws[i]->n_mat);
		grid = grid || tensor_compact_ok(m->ks, ws[i]->type);
	}
	const uint64_t budget = atomic_load(&compact_budget), avail = budget ? budget : base_available_memory();
	return grid && avail && total > avail / 4 * 3;
}

// Places each packed matrix at a page-aligned offset of one mapping, a compact one at a cache
// line's (its size is the file's), off[i] = SIZE_MAX: read in place; returns the mapping's
// size (UINT64_MAX on overflow).
static uint64_t pack_layout(const model *m, mweight *const *ws, int n, size_t *off) {
	uint64_t total = 0;
	bool ok = true;
	for (int i = 0; i < n; i++) {
		const size_t b = mat_pack_bytes(m, ws[i]), a = mat_compact(m, ws[i]) ? 63 : 4095;
		if (b) {
			ok = ok && ck_add(total, a, &total);
			total &= ~(uint64_t)a;
		}
		if (off) off[i] = b ? (size_t)total : SIZE_MAX;
		if (b) ok = ok && ck_add(total, b, &total);
	}
	ok = ok && ck_add(total, 4095, &total);
	return ok ? total & ~(uint64_t)4095 : UINT64_MAX;
}

// Room for every matrix model_mats may list.
static int mats_cap(const model *m) { return 24 * (m->hp.n_layers + m->hp.n_nextn) + 2 * m->hp.n_nextn + 2; }

// Metadata only: the size pack_weights would map, nothing mapped or packed.
static int pack_size(model *m, char *err, size_t errlen) {
	const int cap = mats_cap(m);
	mweight **ws = malloc((size_t)cap * sizeof *ws);
	if (!ws) return base_seterr(err, errlen, LANES_ENOMEM, "model: out of memory");
	const int n = model_mats(m, ws, cap);
	m->compact = choose_compact(m, ws, n);
	const uint64_t total = pack_layout(m, ws, n, NULL);
	free(ws);
	if (total > SIZE_MAX / 2) return base_seterr(err, errlen, LANES_ENOMEM, "model: repacked weights would not fit in memory");
	m->packed_bytes = (size_t)total;
	return LANES_OK;
}

// Describes every matrix for the model's kernel set; where the set repacks, copies them
// into one anonymous mapping (huge pages where the kernel gives them), threads splitting tiles.
// From a mapped file, a repacked matrix's pages then leave this process (the mapping is
// private and never written: a later touch reads the file again), so the peak stays near
// one copy of the weights. fn (may be NULL) hears of each matrix once it is done.
static int pack_weights(model *m, bool mapped, model_progress_fn fn, void *ud, char *err, size_t errlen) {
	const int cap = mats_cap(m);
	mweight **ws = malloc((size_t)cap * sizeof *ws);
	if (!ws) return base_seterr(err, errlen, LANES_ENOMEM, "model: out of memory");
	const int n = model_mats(m, ws, cap);
	size_t *off = malloc((size_t)(n ? n : 1) * sizeof *off);
	if (!off) {
		free(ws);
		return base_seterr(err, errlen, LANES_ENOMEM, "model: out of memory");
	}
	m->compact = choose_compact(m, ws, n);
	const uint64_t total = pack_layout(m, ws, n, off);
	int rc = LANES_OK;
	if (total > SIZE_MAX / 2) {
		rc = base_seterr(err, errlen, LANES_ENOMEM, "model: repacked weights would not fit in memory");
		goto out;
	}
	if (total) {
		void *p = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) {
			rc = base_seterr(err, errlen, LANES_ENOMEM, "model: cannot map %.1f MiB for repacked weights",
					  (double)total / 1048576.0);
			goto out;
		}
#ifdef MADV_HUGEPAGE
		madvise(p, (size_t)total, MADV_HUGEPAGE);
#endif
		m->packed = p;
		m->packed_bytes = (size_t)total;
	}
	const uint64_t t0 = base_now_us();
	base_pool *pool = NULL;
	if (total && base_pool_new(&pool, base_cpu_count())) pool = NULL;
	uint64_t done = 0, all = 0; // bytes of matrices as stored: the progress reported to fn
	for (int i = 0; i < n; i++) all += (uint64_t)ws[i]->mat_bytes * (uint64_t)ws[i]->n_mat;
	if (fn) fn(ud, 0, all);
	// Width q8 keeps the first layer's activations at 16 bits: an error there is carried through
	// every later layer (on the goldens it is about half of all the q8 error), for 1/n_layers
	// of the arithmetic at the q16 rate.
	const mlayer *first = m->layers;
	const tensor_kernels *ks_first = tensor_kernels_with_act(m->ks, TENSOR_ACT_Q16);
	for (int i = 0; i < n; i++) {
		mweight *w = ws[i];
		void *dst = off[i] == SIZE_MAX ? NULL : (uint8_t *)m->packed + off[i];
		const bool in_first = (const void *)w >= (const void *)first && (const void *)w < (const void *)(first + 1);
		const tensor_kernels *ks = in_first ? ks_first : m->ks;
		if (dst && mat_compact(m, w)) tensor_mat_init_compact(&w->tm, ks, w->type, w->rows, w->k, w->n_mat, w->data, dst, pool);
		else tensor_mat_init(&w->tm, ks, w->type, w->rows, w->k, w->n_mat, w->data, dst, pool);
		if (mapped && dst && w->data != m->tok_embd.data) {
			const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
			const uintptr_t a = ((uintptr_t)w->data + pg - 1) & ~(pg - 1);
			const uintptr_t b = ((uintptr_t)w->data + w->mat_bytes * (size_t)w->n_mat) & ~(pg - 1);
			if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
		}
		done += (uint64_t)w->mat_bytes * (uint64_t)w->n_mat;
		if (fn) fn(ud, done, all);
	}
	base_pool_free(pool);
	m->pack_ms = (double)(base_now_us() - t0) / 1000.0;
	if (total) mprotect(m->packed, m->packed_bytes, PROT_READ);
out:
	free(off);
	free(ws);
	return rc;
}

// Binds cnt vectors of n values each ([cnt][n]) as f32: in place when aligned f32, else converted.
static int bind_vecs(loader *L, const char *name, bool required, int64_t n, int64_t cnt, const float **out) {
	*out = NULL;
	const gguf_tensor *t;
	const int64_t ne[GGUF_MAX_DIMS] = {n, cnt, 1, 1};
	int rc = find_shaped(L, name, required, ne, &t);
	if (rc || !t) return rc;
	n *= cnt;
	L->m->weight_bytes += t->nbytes;
	if (t->type == GGUF_T_F32 && (uintptr_t)t->data % sizeof(float) == 0) {
		*out = t->data;
		return LANES_OK;
	}
	if (L->meta) { // counted as the copy a load makes; left NULL
		L->m->copied_bytes += (uint64_t)n * sizeof(float);
		return LANES_OK;
	}
	float *f;
	if (own_floats(L->m, n, &f)) return base_seterr(L->err, L->errlen, LANES_ENOMEM, "model: out of memory");
	tensor_traits_of(t->type)->to_f32(t->data, f, n);
	*out = f;
	return LANES_OK;
}

static int bind_vec(loader *L, const char *name, bool required, int64_t n, const float **out) {
	return bind_vecs(L, name, required, n, 1, out);
}

static const char *lname(char *buf, size_t n, int l, const char *what) {
	snprintf(buf, n, "blk.%d.%s", l, what);
	return buf;
}

// qwen3next's mixer of layer l: gated full attention (attn_q holds each head's query, then its
// gate) or a Gated DeltaNet layer (its q, k, v either as attn_qkv + attn_gate or as the older
// ssm_in, whose rows interleave q, k, v and z per key head).
static int bind_next_mixer(loader *L, int l) {
	model *m = L->m;
	const model_hparams *hp = &m->hp;
	mlayer *y = &m->layers[l];
	const int64_t E = hp->n_embd, D = hp->head_dim, qd = (int64_t)hp->n_heads * D, kvd = (int64_t)hp->n_kv_heads * D;
	char b[96];
	int rc;
#define TRY(x) \
	if ((rc = (x))) return rc
	if (!model_layer_recurrent(hp, l)) {
		TRY(bind_mat(L, lname(b, sizeof b, l, "attn_q.weight"), true, E, 2 * qd, 1, &y->wq));
		TRY(bind_mat(L, lname(b, sizeof b, l, "attn_k.weight"), true, E, kvd, 1, &y->wk));
		TRY(bind_mat(L, lname(b, sizeof b, l, "attn_v.weight"), true, E, kvd, 1, &y->wv));
		TRY(bind_mat(L, lname(b, sizeof b, l, "attn_output.weight"), true, qd, E, 1, &y->wo));
		TRY(bind_vec(L, lname(b, sizeof b, l, "attn_q_norm.weight"), true, D, &y->q_norm));
		TRY(bind_vec(L, lname(b, sizeof b, l, "attn_k_norm.weight"), true, D, &y->k_norm));
		return LANES_OK;
	}
	const int64_t C = model_ssm_conv_dim(hp), VD = (int64_t)hp->ssm_v_heads * hp->ssm_dv;
	if (gguf_find_tensor(m->g, lname(b, sizeof b, l, "ssm_in.weight"))) {
		TRY(bind_mat(L, b, true, E, C + VD, 1, &y->ssm_in));
	} else {
		TRY(bind_mat(L, lname(b, sizeof b, l, "attn_qkv.weight"), true, E, C, 1, &y->ssm_qkv));
		TRY(bind_mat(L, lname(b, sizeof b, l, "attn_gate.weight"), true, E, VD, 1, &y->ssm_z));
	}
	TRY(bind_mat(L, lname(b, sizeof b, l, "ssm_ba.weight"), true, E, 2 * (int64_t)hp->ssm_v_heads, 1, &y->ssm_ba));
	TRY(bind_mat(L, lname(b, sizeof b, l, "ssm_out.weight"), true, VD, E, 1, &y->ssm_out));
	TRY(bind_vecs(L, lname(b, sizeof b, l, "ssm_conv1d.weight"), true, hp->ssm_conv, C, &y->ssm_conv1d));
	TRY(bind_vec(L, lname(b, sizeof b, l, "ssm_dt.bias"), true, hp->ssm_v_heads, &y->ssm_dt));
	TRY(bind_vec(L, lname(b, sizeof b, l, "ssm_a"), true, hp->ssm_v_heads, &y->ssm_a));
	TRY(bind_vec(L, lname(b, sizeof b, l, "ssm_norm.weight"), true, hp->ssm_dv, &y->ssm_norm));
	return LANES_OK;
#undef TRY
}

static int bind_layer(loader *L, const arch_desc *a, int l) {
	model *m = L->m;
	const model_hparams *hp = &m->hp;
	mlayer *y = &m->layers[l];
	const int64_t E = hp->n_embd, qd = (int64_t)hp->n_heads * hp->head_dim,
		      kvd = (int64_t)hp->n_kv_heads * hp->head_dim, D = hp->head_dim;
	char b[96];
	int rc;
#define TRY(x) \
	if ((rc = (x))) return rc
	TRY(bind_vec(L, lname(b, sizeof b, l, "attn_norm.weight"), true, E, &y->attn_norm));
	if (a->next) {
		TRY(bind_next_mixer(L, l));
		TRY(bind_vec(L, lname(b, sizeof b, l, "post_attention_norm.weight"), true, E, &y->ffn_norm));
		goto ffn;
	}
	if (a->phi3 && gguf_find_tensor(m->g, lname(b, sizeof b, l, "attn_qkv.weight"))) {
		// q's rows, then k's, then v's
		const int64_t rows[3] = {qd, kvd, kvd};
		mweight *const ws[3] = {&y->wq, &y->wk, &y->wv};
		TRY(bind_split(L, b, E, 3, rows, ws));
	} else {
		TRY(bind_mat(L, lname(b, sizeof b, l, "attn_q.weight"), true, E, qd, 1, &y->wq));
		TRY(bind_mat(L, lname(b, sizeof b, l, "attn_k.weight"), true, E, kvd, 1, &y->wk));
		TRY(bind_mat(L, lname(b, sizeof b, l, "attn_v.weight"), true, E, kvd, 1, &y->wv));
	}
	TRY(bind_mat(L, lname(b, sizeof b, l, "attn_output.weight"), true, qd, E, 1, &y->wo));
	TRY(bind_vec(L, lname(b, sizeof b, l, "attn_q.bias"), a->bias, qd, &y->bq));
	TRY(bind_vec(L, lname(b, sizeof b, l, "attn_k.bias"), a->bias, kvd, &y->bk));
	TRY(bind_vec(L, lname(b, sizeof b, l, "attn_v.bias"), a->bias, kvd, &y->bv));
	TRY(bind_vec(L, lname(b, sizeof b, l, "attn_output.bias"), false, E, &y->bo));
	if (a->qk_norm) {
		TRY(bind_vec(L, lname(b, sizeof b, l, "attn_q_norm.weight"), true, D, &y->q_norm));
		TRY(bind_vec(L, lname(b, sizeof b, l, "attn_k_norm.weight"), true, D, &y->k_norm));
	}
	if (a->oai) { // its post_attention_norm is the FFN's input norm
		TRY(bind_vec(L, lname(b, sizeof b, l, "post_attention_norm.weight"), true, E, &y->ffn_norm));
		TRY(bind_vec(L, lname(b, sizeof b, l, "attn_sinks.weight"), true, hp->n_heads, &y->sinks));
	} else {
		TRY(bind_vec(L, lname(b, sizeof b, l, "ffn_norm.weight"), true, E, &y->ffn_norm));
	}
	if (hp->post_norms) {
		TRY(bind_vec(L, lname(b, sizeof b, l, "post_attention_norm.weight"), true, E, &y->attn_post_norm));
		TRY(bind_vec(L, lname(b, sizeof b, l, "post_ffw_norm.weight"), true, E, &y->ffn_post_norm));
	}
ffn:
	if (a->phi3 && !gguf_find_tensor(m->g, lname(b, sizeof b, l, "ffn_gate.weight"))) {
		// ffn_up holds the gate's rows, then the up's
		const int64_t rows[2] = {hp->n_ff, hp->n_ff};
		mweight *const ws[2] = {&y->ffn_gate, &y->ffn_up};
		TRY(bind_split(L, lname(b, sizeof b, l, "ffn_up.weight"), E, 2, rows, ws));
		TRY(bind_mat(L, lname(b, sizeof b, l, "ffn_down.weight"), true, hp->n_ff, E, 1, &y->ffn_down));
		return LANES_OK;
	}
	if (hp->n_experts == 0) {
		TRY(bind_mat(L, lname(b, sizeof b, l, "ffn_gate.weight"), true, E, hp->n_ff, 1, &y->ffn_gate));
		TRY(bind_mat(L, lname(b, sizeof b, l, "ffn_up.weight"), true, E, hp->n_ff, 1, &y->ffn_up));
		TRY(bind_mat(L, lname(b, sizeof b, l, "ffn_down.weight"), true, hp->n_ff, E, 1, &y->ffn_down));
		return LANES_OK;
	}
	const int64_t X = hp->n_experts, F = hp->n_ff_exp;
	TRY(bind_mat(L, lname(b, sizeof b, l, "ffn_gate_inp.weight"), true, E, X, 1, &y->gate_inp));
	TRY(bind_mat(L, lname(b, sizeof b, l, "ffn_gate_exps.weight"), true, E, F, X, &y->gate_exps));
	TRY(bind_mat(L, lname(b, sizeof b, l, "ffn_up_exps.weight"), true, E, F, X, &y->up_exps));
	TRY(bind_mat(L, lname(b, sizeof b, l, "ffn_down_exps.weight"), true, F, E, X, &y->down_exps));
	if (a->oai) {
		TRY(bind_vec(L, lname(b, sizeof b, l, "ffn_gate_inp.bias"), true, X, &y->gate_inp_b));
		TRY(bind_vecs(L, lname(b, sizeof b, l, "ffn_gate_exps.bias"), true, F, X, &y->gate_exps_b));
		TRY(bind_vecs(L, lname(b, sizeof b, l, "ffn_up_exps.bias"), true, F, X, &y->up_exps_b));
		TRY(bind_vecs(L, lname(b, sizeof b, l, "ffn_down_exps.bias"), true, E, X, &y->down_exps_b));
	}
	if (a->shexp) {
		const int64_t S = hp->n_ff_shexp;
		TRY(bind_mat(L, lname(b, sizeof b, l, "ffn_gate_inp_shexp.weight"), true, E, 1, 1, &y->gate_inp_shexp));
		TRY(bind_mat(L, lname(b, sizeof b, l, "ffn_gate_shexp.weight"), true, E, S, 1, &y->gate_shexp));
		TRY(bind_mat(L, lname(b, sizeof b, l, "ffn_up_shexp.weight"), true, E, S, 1, &y->up_shexp));
		TRY(bind_mat(L, lname(b, sizeof b, l, "ffn_down_shexp.weight"), true, S, E, 1, &y->down_shexp));
	}
	return LANES_OK;
#undef TRY
}

// bert's tensors as llama.cpp's converter names them: embeddings (token, position, type) and
// their LayerNorm, per layer biased q/k/v/output, the LayerNorms after the attention and the
// FFN, a biased up/down FFN; the classifier's dense layer when present.
static int bind_bert(loader *L) {
	model *m = L->m;
	model_hparams *hp = &m->hp;
	const int64_t E = hp->n_embd, F = hp->n_ff;
	int rc;
	char b[96];
#define TRY(x) \
	if ((rc = (x))) return rc
	TRY(bind_vecs(L, "position_embd.weight", true, E, hp->n_ctx_train, &m->pos_embd));
	const gguf_tensor *tt = gguf_find_tensor(m->g, "token_types.weight");
	if (tt && (tt->n_dims != 2 || tt->ne[1] < 1 || tt->ne[1] > 16))
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: token_types.weight must have 1 to 16 rows");
	hp->n_types = tt ? (int32_t)tt->ne[1] : 0;
	if (tt) TRY(bind_vecs(L, "token_types.weight", true, E, hp->n_types, &m->type_embd));
	TRY(bind_vec(L, "token_embd_norm.weight", true, E, &m->embd_norm));
	TRY(bind_vec(L, "token_embd_norm.bias", true, E, &m->embd_norm_b));
	// the classifier's dense layer serves a reranker (rank pooling, or its output row) alone: an
	// embedding model's [CLS] state is its last layer's, as llama.cpp pools it
	const bool ranks = hp->pooling == 4 || gguf_find_tensor(m->g, "cls.output.weight");
	if (ranks) TRY(bind_mat(L, "cls.weight", false, E, E, 1, &m->cls));
	if (m->cls.data) TRY(bind_vec(L, "cls.bias", true, E, &m->cls_b));
	hp->cls_head = m->cls.data != NULL;
	for (int l = 0; l < hp->n_layers; l++) {
		mlayer *y = &m->layers[l];
		TRY(bind_mat(L, lname(b, sizeof b, l, "attn_q.weight"), true, E, E, 1, &y->wq));
		TRY(bind_mat(L, lname(b, sizeof b, l, "attn_k.weight"), true, E, E, 1, &y->wk));
		TRY(bind_mat(L, lname(b, sizeof b, l, "attn_v.weight"), true, E, E, 1, &y->wv));
		TRY(bind_mat(L, lname(b, sizeof b, l, "attn_output.weight"), true, E, E, 1, &y->wo));
		TRY(bind_vec(L, lname(b, sizeof b, l, "attn_q.bias"), true, E, &y->bq));
		TRY(bind_vec(L, lname(b, sizeof b, l, "attn_k.bias"), true, E, &y->bk));
		TRY(bind_vec(L, lname(b, sizeof b, l, "attn_v.bias"), true, E, &y->bv));
		TRY(bind_vec(L, lname(b, sizeof b, l, "attn_output.bias"), true, E, &y->bo));
		TRY(bind_vec(L, lname(b, sizeof b, l, "attn_output_norm.weight"), true, E, &y->attn_norm));
		TRY(bind_vec(L, lname(b, sizeof b, l, "attn_output_norm.bias"), true, E, &y->attn_norm_b));
		TRY(bind_mat(L, lname(b, sizeof b, l, "ffn_up.weight"), true, E, F, 1, &y->ffn_up));
		TRY(bind_vec(L, lname(b, sizeof b, l, "ffn_up.bias"), true, F, &y->b_up));
		TRY(bind_mat(L, lname(b, sizeof b, l, "ffn_down.weight"), true, F, E, 1, &y->ffn_down));
		TRY(bind_vec(L, lname(b, sizeof b, l, "ffn_down.bias"), true, E, &y->b_down));
		TRY(bind_vec(L, lname(b, sizeof b, l, "layer_output_norm.weight"), true, E, &y->ffn_norm));
		TRY(bind_vec(L, lname(b, sizeof b, l, "layer_output_norm.bias"), true, E, &y->ffn_norm_b));
	}
	return LANES_OK;
#undef TRY
}

// MTP layer i's own tensors (its block is bound as layer n_layers + i); the token embedding,
// the head's norm and the head itself fall back to the model's where the layer has none.
static int bind_nextn(loader *L, int i) {
	model *m = L->m;
	const int64_t E = m->hp.n_embd, V = m->hp.n_vocab;
	const int l = m->hp.n_layers + i;
	mnextn *x = &m->nextn[i];
	char b[96];
	int rc;
	if ((rc = bind_mat(L, lname(b, sizeof b, l, "nextn.eh_proj.weight"), true, 2 * E, E, 1, &x->eh_proj)) ||
	    (rc = bind_vec(L, lname(b, sizeof b, l, "nextn.enorm.weight"), true, E, &x->enorm)) ||
	    (rc = bind_vec(L, lname(b, sizeof b, l, "nextn.hnorm.weight"), true, E, &x->hnorm)) ||
	    (rc = bind_mat(L, lname(b, sizeof b, l, "nextn.embed_tokens.weight"), false, E, V, 1, &x->own_embed)) ||
	    (rc = bind_vec(L, lname(b, sizeof b, l, "nextn.shared_head_norm.weight"), false, E, &x->head_norm)) ||
	    (rc = bind_mat(L, lname(b, sizeof b, l, "nextn.shared_head_head.weight"), false, E, V, 1, &x->own_head)))
		return rc;
	x->embed = x->own_embed.data ? &x->own_embed : &m->tok_embd;
	x->head = x->own_head.data ? &x->own_head : &m->output;
	if (!x->head_norm && !L->meta) x->head_norm = m->output_norm;
	return LANES_OK;
}

// Llama 3 frequency divisors, for files that name the scaling but carry no rope_freqs tensor.
static int llama3_factors(loader *L, tensor_rope *rp, double factor) {
	double lo_f, hi_f, orig;
	int rc;
	if ((rc = meta_float(L, "rope.scaling.low_freq_factor", 1.0, 1e-6, 1e6, &lo_f)) ||
	    (rc = meta_float(L, "rope.scaling.high_freq_factor", 4.0, 1e-6, 1e6, &hi_f)))
		return rc;
	int32_t oc;
	if ((rc = meta_int(L, "rope.scaling.original_context_length", true, 8192, 1, INT32_MAX, &oc))) return rc;
	orig = oc;
	float *f;
	if (own_floats(L->m, rp->n_rot / 2, &f)) return base_seterr(L->err, L->errlen, LANES_ENOMEM, "model: out of memory");
	const double lo_wl = orig / lo_f, hi_wl = orig / hi_f;
	for (int32_t i = 0; i < rp->n_rot / 2; i++) {
		const double wl = 2.0 * M_PI * pow(rp->freq_base, 2.0 * i / rp->n_rot);
		if (wl < hi_wl) f[i] = 1.0f;
		else if (wl > lo_wl || hi_f == lo_f) f[i] = (float)factor;
		else {
			const double smooth = (orig / wl - lo_f) / (hi_f - lo_f);
			f[i] = (float)(1.0 / ((1.0 - smooth) / factor + smooth));
		}
	}
	rp->freq_factors = f;
	return LANES_OK;
}

static int read_rope(loader *L) {
	model_hparams *hp = &L->m->hp;
	tensor_rope *rp = &hp->rope;
	int rc;
	memset(rp, 0, sizeof *rp);
	rp->neox = false;
	rp->freq_scale = 1.0;
	rp->attn_factor = 1.0;
	if ((rc = meta_int(L, "rope.dimension_count", true, hp->head_dim, 2, hp->head_dim, &rp->n_rot))) return rc;
	if (rp->n_rot % 2)
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: %s.rope.dimension_count = %d must be even", L->arch, rp->n_rot);
	if ((rc = meta_float(L, "rope.freq_base", 10000.0, 1.0001, 1e12, &rp->freq_base))) return rc;
	double factor = 0.0, linear = 0.0;
	if ((rc = meta_float(L, "rope.scaling.factor", 0.0, 0.0, 1e6, &factor)) ||
	    (rc = meta_float(L, "rope.scale_linear", 0.0, 0.0, 1e6, &linear)))
		return rc;
	char key[128];
	snprintf(key, sizeof key, "%s.rope.scaling.type", L->arch);
	gguf_str type = {"none", 4};
	if (gguf_get(L->m->g, key) && gguf_get_str(L->m->g, key, &type))
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: metadata key %s is not a string", key);
	if (gguf_str_eq(type, "none")) {
		if (linear > 0.0) rp->freq_scale = 1.0 / linear;
	} else if (gguf_str_eq(type, "linear")) {
		if (factor > 0.0) rp->freq_scale = 1.0 / factor;
		else if (linear > 0.0) rp->freq_scale = 1.0 / linear;
	} else if (gguf_str_eq(type, "yarn")) {
		if (factor > 0.0) rp->freq_scale = 1.0 / factor;
		rp->ext_factor = 1.0;
		if ((rc = meta_float(L, "rope.scaling.attn_factor", 1.0, 0.0, 1e6, &rp->attn_factor)) ||
		    (rc = meta_float(L, "rope.scaling.yarn_ext_factor", 1.0, 0.0, 1e6, &rp->ext_factor)) ||
		    (rc = meta_float(L, "rope.scaling.yarn_beta_fast", 32.0, 1e-6, 1e6, &rp->beta_fast)) ||
		    (rc = meta_float(L, "rope.scaling.yarn_beta_slow", 1.0, 1e-6, 1e6, &rp->beta_slow)) ||
		    (rc = meta_int(L, "rope.scaling.original_context_length", true, hp->n_ctx_train, 1, INT32_MAX,
				   &rp->n_ctx_orig)))
			return rc;
	} else if (gguf_str_eq(type, "llama3")) {
		if (!gguf_find_tensor(L->m->g, "rope_freqs.weight") && factor > 0.0 && (rc = llama3_factors(L, rp, factor)))
			return rc;
	} else {
		char *t = gguf_str_dup(type);
		rc = base_seterr(L->err, L->errlen, LANES_EUNSUPPORTED, "model: rope scaling type '%s' is not supported",
				  t ? t : "?");
		free(t);
		return rc;
	}
	if (gguf_find_tensor(L->m->g, "rope_freqs.weight"))
		return bind_vec(L, "rope_freqs.weight", true, rp->n_rot / 2, &rp->freq_factors);
	return LANES_OK;
}

// attention.sliding_window_pattern: a period (layer l local when l % p < p - 1), or one bool per
// layer (true: local) that must repeat such a period; def when absent.
static int swa_pattern(loader *L, int32_t def) {
	model_hparams *hp = &L->m->hp;
	char key[128];
	snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", L->arch);
	const gguf_value *a = gguf_get_arr(L->m->g, key);
	if (!a) return meta_int(L, "attention.sliding_window_pattern", true, def, 1, 4096, &hp->swa_pattern);
	if (a->arr.type != GGUF_BOOL || a->arr.n != (uint64_t)hp->n_layers)
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: %s must be an integer or one bool per layer", key);
	const uint8_t *local = a->arr.raw;
	int32_t p = 1;
	while (p <= hp->n_layers && local[p - 1]) p++;
	for (int32_t l = 0; l < hp->n_layers; l++)
		if (!local[l] != (p <= hp->n_layers && l % p == p - 1))
			return base_seterr(L->err, L->errlen, LANES_EUNSUPPORTED, "model: %s is not a repeating pattern of local layers then one global",
					    key);
	hp->swa_pattern = p <= hp->n_layers ? p : 0;
	return LANES_OK;
}

// Gemma 2 and 3 as their GGUF files describe them. Their norm weights (q and k norms too)
// already hold the 1 that Gemma's RMSNorm adds (the converter folds it in), so every norm is
// the plain one.
static int read_gemma(loader *L, int gen) {
	model_hparams *hp = &L->m->hp;
	double attn_cap = 0.0, final_cap = 0.0;
	int rc;
	if (gen == 2 && ((rc = meta_float(L, "attn_logit_softcapping", 50.0, 0.0, 1e6, &attn_cap)) ||
			 (rc = meta_float(L, "final_logit_softcapping", 30.0, 0.0, 1e6, &final_cap))))
		return rc;
	// a window of 0 would make the local layers global, rotated at the global base too
	if ((rc = meta_int(L, "attention.sliding_window", true, gen == 2 ? 4096 : 1024, 1, INT32_MAX, &hp->n_swa))) return rc;
	hp->attn_softcap = (float)attn_cap;
	hp->final_softcap = (float)final_cap;
	// Gemma 2: even layers local, odd global; Gemma 3: five local, then one global
	if ((rc = swa_pattern(L, gen == 2 ? 2 : 6))) return rc;
	hp->post_norms = hp->geglu = true;
	hp->embd_scale = (float)sqrt((double)hp->n_embd);
	// query_pre_attn_scalar, which the files do not carry: n_embd / n_heads for the 27Bs (46
	// and 62 layers), the head size for the others
	if (hp->n_layers == (gen == 2 ? 46 : 62)) hp->attn_scale = (float)(1.0 / sqrt((double)(hp->n_embd / hp->n_heads)));
	if (gen == 3) {
		// the local layers rotate at base 10000, unscaled; the file's base and scaling are the global layers'
		hp->rope_swa = hp->rope;
		hp->rope_swa.freq_base = 10000.0;
		hp->rope_swa.freq_scale = 1.0;
		hp->rope_swa.freq_factors = NULL; // a file's rope_freqs scale the global layers alone
	}
	return LANES_OK;
}

// Phi 3 as its GGUF files describe it: LongRoPE's two sets of frequency divisors (bound in
// read_phi3_factors), the attention factor that comes with them, and a window on every layer
// where the file sets one (Phi-3-mini's; 0 for Phi-4).
static int read_phi3(loader *L) {
	model_hparams *hp = &L->m->hp;
	int32_t orig;
	double attn;
	int rc;
	if ((rc = meta_int(L, "rope.scaling.original_context_length", true, hp->n_ctx_train, 1, INT32_MAX, &orig)) ||
	    (rc = meta_float(L, "rope.scaling.attn_factor", 0.0, 0.0, 1e6, &attn)) ||
	    (rc = meta_int(L, "attention.sliding_window", true, 0, 0, INT32_MAX, &hp->n_swa)))
		return rc;
	hp->rope.n_ctx_orig = orig;
	hp->swa_pattern = 0;
	// the published factor where the file has none: sqrt(1 + ln(s) / ln(original)), s the context's growth
	const double s = (double)hp->n_ctx_train / orig;
	if (attn == 0.0) attn = s > 1.0 && orig > 1 ? sqrt(1.0 + log(s) / log((double)orig)) : 1.0;
	hp->rope.attn_factor = attn;
	return LANES_OK;
}

// qwen3next as its GGUF files describe it: the Gated DeltaNet's sizes (ssm.*) and the period of
// its full-attention layers. Its norms are plain RMSNorms: the converter folds in the 1 that
// the zero-centred ones add (all but the gated norm, which has none).
static int read_next(loader *L) {
	model_hparams *hp = &L->m->hp;
	int32_t inner;
	int rc;
	if ((rc = meta_int(L, "full_attention_interval", true, 4, 1, 4096, &hp->full_attn_interval)) ||
	    (rc = meta_int(L, "ssm.conv_kernel", false, 0, 1, 64, &hp->ssm_conv)) ||
	    (rc = meta_int(L, "ssm.state_size", false, 0, 1, 4096, &hp->ssm_dk)) ||
	    (rc = meta_int(L, "ssm.group_count", false, 0, 1, 4096, &hp->ssm_k_heads)) ||
	    (rc = meta_int(L, "ssm.time_step_rank", false, 0, 1, 4096, &hp->ssm_v_heads)) ||
	    (rc = meta_int(L, "ssm.inner_size", false, 0, 1, 1 << 20, &inner)))
		return rc;
	if (hp->ssm_v_heads % hp->ssm_k_heads || inner % hp->ssm_v_heads)
		return base_seterr(L->err, L->errlen, LANES_EFORMAT,
				   "model: qwen3next.ssm.time_step_rank = %d must be a multiple of ssm.group_count = %d and divide ssm.inner_size = %d",
				   hp->ssm_v_heads, hp->ssm_k_heads, inner);
	if (gguf_get(L->m->g, "qwen3next.attention.recurrent_layers"))
		return base_seterr(L->err, L->errlen, LANES_EUNSUPPORTED,
				   "model: qwen3next.attention.recurrent_layers is not supported (only full_attention_interval)");
	hp->ssm_dv = inner / hp->ssm_v_heads;
	hp->attn_gate = true;
	if (hp->full_attn_interval > hp->n_layers)
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: qwen3next.full_attention_interval = %d leaves no full-attention layer in %d",
				   hp->full_attn_interval, hp->n_layers);
	// an interval of 1 has no recurrent layer: the plain path then holds no state
	if (hp->full_attn_interval == 1) hp->full_attn_interval = 0;
	return LANES_OK;
}

// rope_factors_long and rope_factors_short, both or neither; the short ones rotate until
// model_set_context says a sequence may be longer than the original context.
static int read_phi3_factors(loader *L) {
	model *m = L->m;
	const int32_t half = m->hp.rope.n_rot / 2;
	const bool lg = gguf_find_tensor(m->g, "rope_factors_long.weight"), sh = gguf_find_tensor(m->g, "rope_factors_short.weight");
	if (lg != sh)
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: missing tensor %s (architecture phi3)",
				    lg ? "rope_factors_short.weight" : "rope_factors_long.weight");
	int rc;
	if (!lg) {
		m->hp.rope.attn_factor = 1.0; // no LongRoPE: nothing to scale for
		return LANES_OK;
	}
	if ((rc = bind_vec(L, "rope_factors_long.weight", true, half, &m->rope_long)) ||
	    (rc = bind_vec(L, "rope_factors_short.weight", true, half, &m->rope_short)))
		return rc;
	// each is a divisor of a frequency: 0, negative or not finite would turn the tables to NaN
	for (int32_t i = 0; m->rope_long && m->rope_short && i < half; i++) // metadata alone may leave them unread
		if (!(isfinite(m->rope_long[i]) && m->rope_long[i] > 0 && isfinite(m->rope_short[i]) && m->rope_short[i] > 0))
			return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: rope_factors_%s.weight[%d] = %g is not a positive number",
					   isfinite(m->rope_long[i]) && m->rope_long[i] > 0 ? "short" : "long", (int)i,
					   (double)(isfinite(m->rope_long[i]) && m->rope_long[i] > 0 ? m->rope_short[i] : m->rope_long[i]));
	m->hp.rope.freq_factors = m->rope_short;
	return LANES_OK;
}

// bert: no rope (positions are learned), LayerNorm's epsilon, the separator that starts
// token type 1 where the file has two types.
static int read_bert(loader *L) {
	model_hparams *hp = &L->m->hp;
	double eps;
	int rc = meta_float(L, "attention.layer_norm_epsilon", 1e-12, 0.0, 1.0, &eps);
	if (rc) return rc;
	if (hp->n_kv_heads != hp->n_heads || hp->head_dim * hp->n_heads != hp->n_embd)
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: bert needs heads of n_embd / head_count with no grouped keys");
	if (hp->n_ctx_train > (1 << 20))
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: bert.context_length %d is past the %d positions lanes binds",
				   hp->n_ctx_train, 1 << 20);
	hp->encoder = true;
	hp->norm_eps = (float)eps;
	hp->attn_scale = (float)(1.0 / sqrt((double)hp->head_dim));
	hp->embd_scale = 1.0f;
	uint32_t sep;
	hp->type_sep = gguf_get_u32(L->m->g, "tokenizer.ggml.seperator_token_id", &sep) || sep > INT32_MAX ? -1 : (int32_t)sep;
	return LANES_OK;
}

// A separate head file's MTP layers take the place of any the model's file has: its
// architecture, width and trunk depth must be the model's (its blocks are named after them).
static int read_head(loader *L, const arch_desc *a) {
	model_hparams *hp = &L->m->hp;
	const gguf *h = L->m->hg;
	char key[96];
	gguf_str s;
	int64_t n = 0, blocks = 0, E = 0;
	if (gguf_get_str(h, "general.type", &s) || !gguf_str_eq(s, "mtp"))
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: the draft head is not an MTP head file (general.type \"mtp\")");
	if (gguf_get_str(h, "general.architecture", &s) || !gguf_str_eq(s, a->name))
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: the draft head is not for architecture %s", a->name);
	if (!a->nextn)
		return base_seterr(L->err, L->errlen, LANES_EUNSUPPORTED, "model: MTP heads with architecture %s are not supported", a->name);
	snprintf(key, sizeof key, "%s.nextn_predict_layers", a->name);
	if (gguf_get_i64(h, key, &n) || n < 1 || n > 16)
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: the draft head's %s is missing or out of range", key);
	snprintf(key, sizeof key, "%s.block_count", a->name);
	if (gguf_get_i64(h, key, &blocks) || blocks != (int64_t)hp->n_layers + n)
		return base_seterr(L->err, L->errlen, LANES_EFORMAT,
				   "model: the draft head follows a trunk of %lld layers, the model's has %d", (long long)(blocks - n), hp->n_layers);
	snprintf(key, sizeof key, "%s.embedding_length", a->name);
	if (gguf_get_i64(h, key, &E) || E != hp->n_embd)
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: the draft head's width is not the model's %d", hp->n_embd);
	hp->n_nextn = (int32_t)n;
	return LANES_OK;
}

static int read_hparams(loader *L, const arch_desc *a) {
	model *m = L->m;
	model_hparams *hp = &m->hp;
	int rc;
	const int32_t big = 1 << 20;
	snprintf(hp->arch, sizeof hp->arch, "%s", a->name);
	if ((rc = meta_int(L, "context_length", true, 4096, 1, INT32_MAX, &hp->n_ctx_train)) ||
	    (rc = meta_int(L, "embedding_length", false, 0, 1, big, &hp->n_embd)) ||
	    (rc = meta_int(L, "block_count", false, 0, 1, 4096, &hp->n_layers)) ||
	    (rc = meta_int(L, "attention.head_count", false, 0, 1, 4096, &hp->n_heads)) ||
	    (rc = meta_int(L, "attention.head_count_kv", true, hp->n_heads, 1, hp->n_heads, &hp->n_kv_heads)))
		return rc;
	if ((rc = meta_int(L, "pooling_type", true, -1, -1, 4, &hp->pooling))) return rc;
	// block_count counts the MTP layers too: they are the last blocks, and the trunk never runs them
	if ((rc = meta_int(L, "nextn_predict_layers", true, 0, 0, INT32_MAX, &hp->n_nextn))) return rc;
	if (hp->n_nextn && !a->nextn)
		return base_seterr(L->err, L->errlen, LANES_EUNSUPPORTED, "model: MTP layers (%s.nextn_predict_layers) with architecture %s are not supported",
				   a->name, a->name);
	if (hp->n_nextn >= hp->n_layers)
		return base_seterr(L->err, L->errlen, LANES_EFORMAT,
				   "model: %s.nextn_predict_layers = %d leaves no trunk: block_count is %d, MTP layers included", a->name,
				   hp->n_nextn, hp->n_layers);
	hp->n_layers -= hp->n_nextn;
	if (m->hg && (rc = read_head(L, a))) return rc;
	if (hp->n_heads % hp->n_kv_heads)
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: %d heads are not a multiple of %d kv heads",
				    hp->n_heads, hp->n_kv_heads);
	int32_t vdim;
	const int32_t def_d = hp->n_embd % hp->n_heads ? 0 : hp->n_embd / hp->n_heads;
	if ((rc = meta_int(L, "attention.key_length", def_d > 0, def_d, 2, 65536, &hp->head_dim)) ||
	    (rc = meta_int(L, "attention.value_length", true, hp->head_dim, 1, 65536, &vdim)))
		return rc;
	if (vdim != hp->head_dim)
		return base_seterr(L->err, L->errlen, LANES_EUNSUPPORTED, "model: key length %d != value length %d is not supported",
				    hp->head_dim, vdim);
	double eps;
	if ((rc = meta_float(L, "attention.layer_norm_rms_epsilon", 1e-5, 0.0, 1.0, &eps))) return rc;
	hp->rms_eps = (float)eps;
	if ((rc = meta_int(L, "expert_count", true, 0, 0, 4096, &hp->n_experts))) return rc;
	if (a->moe == MOE_NO && hp->n_experts > 0)
		return base_seterr(L->err, L->errlen, LANES_EUNSUPPORTED, "model: architecture %s with experts is not supported", a->name);
	if (a->moe == MOE_REQUIRED && hp->n_experts == 0)
		return base_seterr(L->err, L->errlen, LANES_EFORMAT, "model: missing metadata key %s.expert_count", a->name);
	if (hp->n_experts > 0) {
		int32_t norm = a->moe_norm;
		if ((rc = meta_int(L, "expert_used_count", false, 0, 1, hp->n_experts, &hp->n_experts_used)) ||
		    (rc = meta_int(L, "feed_forward_length", true, 0, 0, big, &hp->n_ff)) ||
		    (rc = meta_int(L, "expert_feed_forward_length", hp->n_ff > 0, hp->n_ff, 1, big, &hp->n_ff_exp)) ||
		    (rc = meta_int(L, "expert_weights_norm", true, norm, 0, 1, &norm)))
			return rc;
		hp->moe_norm = norm;
		hp->n_ff = 0;
		if (a->shexp && (rc = meta_int(L, "expert_shared_feed_forward_length", false, 0, 1, big, &hp->n_ff_shexp)))
			return rc;
	} else if ((rc = meta_int(L, "feed_forward_length", false, 0, 1, big, &hp->n_ff))) {
		return rc;
	}
	if (a->bert) return read_bert(L);
	if ((rc = read_rope(L))) return rc;
	hp->rope.neox = a->neox;
	hp->attn_scale = (float)(1.0 / sqrt((double)hp->head_dim));
	hp->embd_scale = 1.0f;
	if (a->phi3) return read_phi3(L);
	if (a->next) return read_next(L);
	if (a->oai) {
		// the even layers local (a window of attention.sliding_window), the odd ones global
		hp->oai = true;
		hp->swa_pattern = 2;
		return meta_int(L, "attention.sliding_window", true, 128, 1, INT32_MAX, &hp->n_swa);
	}
	return a->gemma ? read_gemma(L, a->gemma) : LANES_OK;
}

static void main_type(model *m) {
	uint64_t per[GGUF_T_COUNT] = {0};
	for (int64_t i = 0; i < gguf_n_tensors(m->g); i++) {
		const gguf_tensor *t = gguf_tensor_at(m->g, i);
		if (t->n_dims >= 2 && t->type < GGUF_T_COUNT) per[t->type] += (uint64_t)gguf_tensor_nelem(t);
	}
	uint32_t best = GGUF_T_F32;
	for (uint32_t t = 0; t < GGUF_T_COUNT; t++)
		if (per[t] > per[best]) best = t;
	m->hp.main_type = best;
}

enum open_mode { OPEN_MEM, OPEN_MAPPED, OPEN_META };
static int model_open(model **out, gguf *g, gguf *hg, enum open_mode mode, model_progress_fn fn, void *ud, char *err, size_t errlen);
int model_from_gguf(model **out, gguf *g, char *err, size_t errlen) { return model_open(out, g, NULL, OPEN_MEM, NULL, NULL, err, errlen); }

// OPEN_MAPPED: g maps a file, so the pages of matrices once repacked may leave this process.
// OPEN_META: binds and checks, but neither converts nor packs (vectors needing a copy stay
// NULL), and g stays the caller's, also on failure. fn: pack_weights' progress reports.
static int model_open(model **out, gguf *g, gguf *hg, enum open_mode mode, model_progress_fn fn, void *ud, char *err, size_t errlen) {
	*out = NULL;
	model *m = calloc(1, sizeof *m);
	if (!m) {
		if (mode != OPEN_META) gguf_free(g), gguf_free(hg);
		return base_seterr(err, errlen, LANES_ENOMEM, "model: out of memory");
	}
	m->g = g;
	m->hg = hg;
	loader L = {.m = m, .meta = mode == OPEN_META, .err = err, .errlen = errlen};
	int rc;
	gguf_str arch, type;
	// a LoRA file has the base's architecture but none of its shape: name what it is instead
	if (!gguf_get_str(g, "general.type", &type) && gguf_str_eq(type, "adapter")) {
		rc = base_seterr(err, errlen, LANES_EFORMAT,
				 "model: this file is a LoRA adapter, not a model: give the base model with -m and this file with --lora");
		goto fail;
	}
	if (gguf_get_str(g, "general.architecture", &arch)) {
		rc = base_seterr(err, errlen, LANES_EFORMAT, "model: missing metadata key general.architecture");
		goto fail;
	}
	const arch_desc *a = NULL;
	for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
		if (gguf_str_eq(arch, archs[i].name)) a = &archs[i];
	if (!a) {
		char *s = gguf_str_dup(arch);
		rc = base_seterr(err, errlen, LANES_EUNSUPPORTED,
				 "model: unsupported architecture '%s' (supported: llama, qwen2, qwen3, qwen2moe, qwen3moe, gemma2, gemma3, phi3, gpt-oss, qwen3next, bert)",
				  s ? s : "?");
		free(s);
		goto fail;
	}
	L.arch = a->name;
	m->has_bias = a->bias;
	m->qk_norm = a->qk_norm;
	m->shexp = a->shexp;
	if ((rc = read_hparams(&L, a))) goto fail;
	model_hparams *hp = &m->hp;

	const gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
	if (!te) {
		rc = base_seterr(err, errlen, LANES_EFORMAT, "model: missing tensor token_embd.weight");
		goto fail;
	}
	const gguf_value *toks = gguf_get_arr(g, "tokenizer.ggml.tokens");
	int64_t nv = toks ? (int64_t)toks->arr.n : te->ne[1];
	if (nv < 1 || nv > (1 << 24)) {
		rc = base_seterr(err, errlen, LANES_EFORMAT, "model: vocabulary size %lld is out of range", (long long)nv);
		goto fail;
	}
	hp->n_vocab = (int32_t)nv;
	if (a->bert) {
		m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
		if (!m->layers) {
			rc = base_seterr(err, errlen, LANES_ENOMEM, "model: out of memory");
			goto fail;
		}
		if ((rc = bind_mat(&L, "token_embd.weight", true, hp->n_embd, nv, 1, &m->tok_embd)) || (rc = bind_bert(&L))) goto fail;
		goto bound;
	}
	if ((rc = bind_mat(&L, "token_embd.weight", true, hp->n_embd, nv, 1, &m->tok_embd)) ||
	    (rc = bind_vec(&L, "output_norm.weight", true, hp->n_embd, &m->output_norm)) ||
	    (rc = bind_mat(&L, "output.weight", false, hp->n_embd, nv, 1, &m->output)))
		goto fail;
	if (!m->output.data) m->output = m->tok_embd; // tied embeddings
	if (a->phi3 && (rc = read_phi3_factors(&L))) goto fail;
	m->layers = calloc((size_t)(hp->n_layers + hp->n_nextn), sizeof *m->layers);
	m->nextn = hp->n_nextn ? calloc((size_t)hp->n_nextn, sizeof *m->nextn) : NULL;
	if (!m->layers || (hp->n_nextn && !m->nextn)) {
		rc = base_seterr(err, errlen, LANES_ENOMEM, "model: out of memory");
		goto fail;
	}
	for (int l = 0; l < hp->n_layers + hp->n_nextn; l++) {
		L.src = l >= hp->n_layers ? m->hg : NULL;
		if ((rc = bind_layer(&L, a, l)) || (l >= hp->n_layers && (rc = bind_nextn(&L, l - hp->n_layers)))) goto fail;
	}
	L.src = NULL;
bound:
	main_type(m);
	m->ks = tensor_kernels_default();
	rc = mode == OPEN_META ? pack_size(m, err, errlen) : pack_weights(m, mode == OPEN_MAPPED, fn, ud, err, errlen);
	if (rc) goto fail;
	*out = m;
	return LANES_OK;
fail:
	if (mode == OPEN_META) m->g = NULL, m->hg = NULL;
	model_free(m);
	return rc;
}

int model_load_progress(model **out, const char *path, model_progress_fn fn, void *ud, char *err, size_t errlen) {
	return model_load_head(out, path, NULL, fn, ud, err, errlen);
}

int model_load_head(model **out, const char *path, const char *head, model_progress_fn fn, void *ud, char *err, size_t errlen) {
	*out = NULL;
	gguf *g, *hg = NULL;
	int rc = gguf_open(&g, path, err, errlen);
	if (rc) return rc;
	if (head && (rc = gguf_open(&hg, head, err, errlen))) {
		gguf_free(g);
		return rc;
	}
	return model_open(out, g, hg, OPEN_MAPPED, fn, ud, err, errlen);
}

int model_load(model **out, const char *path, char *err, size_t errlen) {
	return model_load_progress(out, path, NULL, NULL, err, errlen);
}

void model_free(model *m) {
	if (!m) return;
	for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
	free(m->owned);
	free(m->layers);
	free(m->nextn);
	if (m->packed) munmap(m->packed, m->packed_bytes);
	gguf_free(m->g);
	gguf_free(m->hg);
	free(m);
}

void model_set_context(model *m, int32_t n_ctx) {
	if (m->rope_long) m->hp.rope.freq_factors = n_ctx > m->hp.rope.n_ctx_orig ? m->rope_long : m->rope_short;
}

const model_hparams *model_hparams_of(const model *m) { return &m->hp; }
const gguf *model_gguf(const model *m) { return m->g; }
uint64_t model_weight_bytes(const model *m) { return m->weight_bytes; }
uint64_t model_copied_bytes(const model *m) { return m->copied_bytes; }
const tensor_kernels *model_kernels(const model *m) { return m->ks; }
uint64_t model_packed_bytes(const model *m) { return m->packed_bytes; }
bool model_compact(const model *m) { return m->compact; }
double model_pack_ms(const model *m) { return m->pack_ms; }

kv_config model_mtp_kv_config(const model *m, enum kv_type type, int32_t n_seqs, int32_t n_ctx, int32_t page_tokens) {
	kv_config c = model_kv_config(m, type, n_seqs, n_ctx, page_tokens);
	c.n_layers = 1;
	return c;
}

kv_config model_kv_config(const model *m, enum kv_type type, int32_t n_seqs, int32_t n_ctx,
			  int32_t page_tokens) {
	kv_config c = {.type = type, .n_layers = model_kv_layers(&m->hp), .kv_dim = m->hp.n_kv_heads * m->hp.head_dim,
		       .group = m->hp.head_dim, .page_tokens = page_tokens, .n_seqs = n_seqs,
		       .state_floats = model_state_floats(&m->hp), .state_ckpts = model_state_floats(&m->hp) ? 2 * n_seqs : 0};
	// the cache's layers are the model's when none is recurrent
	if (m->hp.n_swa > 0 && !m->hp.full_attn_interval && !m->hp.encoder) c.window = m->hp.n_swa, c.swa_pattern = m->hp.swa_pattern;
	int64_t per = page_tokens > 0 ? ((int64_t)n_ctx + page_tokens - 1) / page_tokens : 0;
	int64_t pages = per * (n_seqs > 0 ? n_seqs : 0);
	c.n_pages = pages > INT32_MAX ? INT32_MAX : (int32_t)pages;
	return c;
}

// ---- memory accounting ---------------------------------------------------------------------
static bool owned(const model *m, const float *p) {
	for (int i = 0; i < m->n_owned; i++)
		if (m->owned[i] == p) return true;
	return false;
}

// Bytes of an f32 vector of n values read in place (not a copy, not absent).
static uint64_t vec_in_place(const model *m, const float *p, int64_t n) {
	return p && !owned(m, p) ? (uint64_t)n * sizeof(float) : 0;
}

// Bytes of a matrix stack the kernel set reads from the mapping (it does not repack it).
static uint64_t mat_in_place(const model *m, const mweight *w) {
	if (!w->data || w->data == m->tok_embd.data) return 0; // token_embd is counted once, apart
	if (mat_pack_bytes(m, w)) return 0;
	return (uint64_t)w->mat_bytes * (uint64_t)w->n_mat;
}

static void memory_of(const model *m, model_memory *out) {
	const model_hparams *hp = &m->hp;
	const int64_t E = hp->n_embd, qd = (int64_t)hp->n_heads * hp->head_dim,
		      kvd = (int64_t)hp->n_kv_heads * hp->head_dim, D = hp->head_dim;
	// token_embd rows are looked up in place even when the output's packed copy shares it
	uint64_t in = (uint64_t)m->tok_embd.mat_bytes + mat_in_place(m, &m->output) +
		      vec_in_place(m, m->output_norm, E) +
		      (m->rope_long ? vec_in_place(m, m->rope_long, hp->rope.n_rot / 2) + vec_in_place(m, m->rope_short, hp->rope.n_rot / 2)
				    : vec_in_place(m, hp->rope.freq_factors, hp->rope.n_rot / 2));
	for (int i = 0; i < hp->n_nextn; i++) {
		const mnextn *x = &m->nextn[i];
		in += vec_in_place(m, x->enorm, E) + vec_in_place(m, x->hnorm, E) + mat_in_place(m, &x->eh_proj) +
		      mat_in_place(m, &x->own_head) + (uint64_t)x->own_embed.mat_bytes +
		      (x->head_norm != m->output_norm ? vec_in_place(m, x->head_norm, E) : 0);
	}
	for (int l = 0; l < hp->n_layers + hp->n_nextn; l++) {
		const mlayer *y = &m->layers[l];
		in += vec_in_place(m, y->attn_norm, E) + vec_in_place(m, y->ffn_norm, E) + vec_in_place(m, y->attn_post_norm, E) +
		      vec_in_place(m, y->ffn_post_norm, E) + vec_in_place(m, y->bq, qd) +
		      vec_in_place(m, y->bk, kvd) + vec_in_place(m, y->bv, kvd) + vec_in_place(m, y->bo, E) +
		      vec_in_place(m, y->q_norm, D) + vec_in_place(m, y->k_norm, D) +
		      vec_in_place(m, y->ssm_conv1d, model_ssm_conv_dim(hp) * hp->ssm_conv) + vec_in_place(m, y->ssm_dt, hp->ssm_v_heads) +
		      vec_in_place(m, y->ssm_a, hp->ssm_v_heads) + vec_in_place(m, y->ssm_norm, hp->ssm_dv);
		const mweight *ws[] = {&y->wq, &y->wk, &y->wv, &y->wo, &y->ffn_gate, &y->ffn_up, &y->ffn_down,
				       &y->gate_inp, &y->gate_exps, &y->up_exps, &y->down_exps, &y->gate_shexp,
				       &y->up_shexp, &y->down_shexp, &y->gate_inp_shexp, &y->ssm_qkv, &y->ssm_z,
				       &y->ssm_in, &y->ssm_ba, &y->ssm_out};
		for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) in += mat_in_place(m, ws[i]);
	}
	*out = (model_memory){.packed_bytes = m->packed_bytes, .in_place_bytes = in, .copied_bytes = m->copied_bytes,
			      .file_bytes = m->weight_bytes, .kernels = tensor_kernels_name(m->ks)};
	out->total_bytes = out->packed_bytes + out->in_place_bytes + out->copied_bytes;
}

void model_memory_of(const model *m, model_memory *out) { memory_of(m, out); }

int model_meta_from_gguf(const gguf *g, model_hparams *hp, model_memory *mem, char *err, size_t errlen) {
	return model_meta_head(g, NULL, hp, mem, err, errlen);
}

int model_meta_head(const gguf *g, const gguf *hg, model_hparams *hp, model_memory *mem, char *err, size_t errlen) {
	model *m;
	int rc = model_open(&m, (gguf *)g, (gguf *)hg, OPEN_META, NULL, NULL, err, errlen); // read only: never written
	if (rc) return rc;
	if (hp) {
		*hp = m->hp;
		hp->rope.freq_factors = NULL;
	}
	if (mem) memory_of(m, mem);
	m->g = NULL, m->hg = NULL;
	model_free(m);
	return LANES_OK;
}

int model_load_meta(const char *path, model_hparams *hp, model_memory *mem, char *err, size_t errlen) {
	gguf *g;
	int rc = gguf_open(&g, path, err, errlen);
	if (rc) return rc;
	rc = model_meta_from_gguf(g, hp, mem, err, errlen);
	gguf_free(g);
	return rc;
}

// ---- the weights as stored -------------------------------------------------------------------
static model_matrix matrix_of(const mweight *w) {
	return (model_matrix){.data = w->data, .type = w->type, .k = w->k, .rows = w->rows, .n_mat = w->n_mat,
			      .row_bytes = w->row_bytes, .mat_bytes = w->mat_bytes};
}

void model_layer_weights_of(const model *m, int32_t l, model_layer_weights *out) {
	const mlayer *y = &m->layers[l];
	*out = (model_layer_weights){
		.attn_norm = y->attn_norm, .ffn_norm = y->ffn_norm, .q_norm = y->q_norm, .k_norm = y->k_norm,
		.bq = y->bq, .bk = y->bk, .bv = y->bv, .bo = y->bo,
		.wq = matrix_of(&y->wq), .wk = matrix_of(&y->wk), .wv = matrix_of(&y->wv), .wo = matrix_of(&y->wo),
		.ffn_gate = matrix_of(&y->ffn_gate), .ffn_up = matrix_of(&y->ffn_up), .ffn_down = matrix_of(&y->ffn_down),
		.router = matrix_of(&y->gate_inp), .gate_exps = matrix_of(&y->gate_exps), .up_exps = matrix_of(&y->up_exps),
		.down_exps = matrix_of(&y->down_exps), .gate_shexp = matrix_of(&y->gate_shexp), .up_shexp = matrix_of(&y->up_shexp),
		.down_shexp = matrix_of(&y->down_shexp), .router_shexp = matrix_of(&y->gate_inp_shexp),
		.attn_post_norm = y->attn_post_norm, .ffn_post_norm = y->ffn_post_norm, .sinks = y->sinks, .router_b = y->gate_inp_b,
		.gate_exps_b = y->gate_exps_b, .up_exps_b = y->up_exps_b, .down_exps_b = y->down_exps_b,
	};
}

void model_io_weights_of(const model *m, model_io_weights *out) {
	*out = (model_io_weights){.tok_embd = matrix_of(&m->tok_embd), .output = matrix_of(&m->output),
				  .output_norm = m->output_norm, .tied = m->output.data == m->tok_embd.data};
}

int model_mtp_weights_of(const model *m, int32_t i, model_mtp_weights *out) {
	if (i < 0 || i >= m->hp.n_nextn) return LANES_EINVAL;
	const mnextn *x = &m->nextn[i];
	*out = (model_mtp_weights){.eh_proj = matrix_of(&x->eh_proj), .enorm = x->enorm, .hnorm = x->hnorm,
				   .head_norm = x->head_norm, .embed = matrix_of(x->embed), .head = matrix_of(x->head)};
	return LANES_OK;
}
