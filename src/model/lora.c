// model/lora: LoRA adapters in GGUF as llama.cpp writes them — metadata and every pair of
// `.lora_a` / `.lora_b` tensors checked against the model they are loaded for, then copied
// (repacked where the model's kernel set repacks) so the file need not stay open.
#include "model/model_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[LK_COUNT] = {
	[LK_Q] = "attn_q", [LK_K] = "attn_k", [LK_V] = "attn_v", [LK_O] = "attn_output",
	[LK_GATE] = "ffn_gate", [LK_UP] = "ffn_up", [LK_DOWN] = "ffn_down", [LK_SSM_IN] = "ssm_in",
	[LK_SSM_QKV] = "attn_qkv", [LK_SSM_Z] = "attn_gate", [LK_SSM_BA] = "ssm_ba", [LK_SSM_OUT] = "ssm_out",
	[LK_OUTPUT] = "output",
};

static const mweight *layer_weight(const mlayer *y, int k) {
	const mweight *w[LK_LAYER] = {&y->wq,	   &y->wk,	&y->wv,	   &y->wo,    &y->ffn_gate, &y->ffn_up,
				      &y->ffn_down, &y->ssm_in, &y->ssm_qkv, &y->ssm_z, &y->ssm_ba,   &y->ssm_out};
	return w[k];
}

// The base weight a tensor name (without .lora_a / .lora_b) adapts: its layer (-1: the
// output head) and kind. False when lanes adapts no such weight.
static bool parse_target(const char *base, int n_layers, int *layer, int *kind) {
	if (!strcmp(base, "output.weight")) {
		*layer = -1, *kind = LK_OUTPUT;
		return true;
	}
	int l, used = 0;
	if (sscanf(base, "blk.%d.%n", &l, &used) != 1 || used == 0 || l < 0 || l >= n_layers) return false;
	char want[64];
	for (int k = 0; k < LK_LAYER; k++) {
		snprintf(want, sizeof want, "%s.weight", kind_names[k]);
		if (!strcmp(base + used, want)) {
			*layer = l, *kind = k;
			return true;
		}
	}
	return false;
}

// Ids of adapters loaded in this process: never reused, so a cache keyed on one never
// mistakes a later adapter at a freed one's address for it.
static atomic_uint_least64_t lora_ids;

// Multiply-adds a row of the base model takes in its matrices (the experts a token uses).
static uint64_t base_madds(const model *m) {
	const model_hparams *hp = &m->hp;
	uint64_t n = m->output.data ? (uint64_t)m->output.k * (uint64_t)m->output.rows : 0;
	for (int32_t l = 0; l < hp->n_layers; l++) {
		const mlayer *y = &m->layers[l];
		const mweight *one[] = {&y->wq, &y->wk, &y->wv, &y->wo, &y->ffn_gate, &y->ffn_up, &y->ffn_down, &y->gate_inp,
					&y->gate_shexp, &y->up_shexp, &y->down_shexp};
		const mweight *exps[] = {&y->gate_exps, &y->up_exps, &y->down_exps};
		for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
			if (one[i]->data) n += (uint64_t)one[i]->k * (uint64_t)one[i]->rows;
		for (size_t i = 0; i < sizeof exps / sizeof exps[0]; i++)
			if (exps[i]->data) n += (uint64_t)exps[i]->k * (uint64_t)exps[i]->rows * (uint64_t)hp->n_experts_used;
	}
	return n ? n : 1;
}

static bool ends_with(const char *s, const char *suffix) {
	const size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !strcmp(s + n - k, suffix);
}

static bool meta_str_is(const gguf *g, const char *key, const char *want, char *got, size_t n) {
	gguf_str s;
	got[0] = 0;
	if (gguf_get_str(g, key, &s)) return false;
	snprintf(got, n, "%.*s", (int)(s.len < 64 ? s.len : 64), s.ptr);
	return gguf_str_eq(s, want);
}

// Checks one tensor of a pair: a matrix of type F32, F16, BF16 or Q8_0 with ne = [k, rows].
static int check_half(const gguf_tensor *t, int64_t k, int64_t rows, char *err, size_t errlen) {
	const uint32_t ok_types[] = {GGUF_T_F32, GGUF_T_F16, GGUF_T_BF16, GGUF_T_Q8_0};
	bool ok = false;
	for (size_t i = 0; i < sizeof ok_types / sizeof ok_types[0]; i++) ok |= t->type == ok_types[i];
	const gguf_ttype_info *ti = gguf_ttype_get(t->type);
	if (!ok)
		return base_seterr(err, errlen, LANES_EUNSUPPORTED, "lora: tensor %s has type %s (adapters are F32, F16, BF16 or Q8_0)",
				    t->name, ti && ti->name ? ti->name : "unknown");
	if (t->ne[0] != k || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1)
		return base_seterr(err, errlen, LANES_EFORMAT,
				    "lora: tensor %s has shape [%lld, %lld, %lld], expected [%lld, %lld] for this base model", t->name,
				    (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)k, (long long)rows);
	const size_t rb = tensor_row_bytes(t->type, k);
	uint64_t total;
	if (!rb || !ck_mul(rb, (uint64_t)rows, &total) || total != t->nbytes || !t->data)
		return base_seterr(err, errlen, LANES_EFORMAT, "lora: tensor %s: rows of %lld elements do not fit type %s", t->name,
				    (long long)k, ti->name);
	return LANES_OK;
}

// Bytes one matrix of rows x k of type takes in the adapter's memory: packed for ks, or as stored.
static size_t mat_bytes_of(const tensor_kernels *ks, uint32_t type, int64_t rows, int64_t k) {
	const size_t packed = tensor_pack_bytes(ks, type, rows, k, 1);
	return ((packed ? packed : tensor_row_bytes(type, k) * (size_t)rows) + 63) & ~(size_t)63;
}

static size_t mat_bytes(const tensor_kernels *ks, const gguf_tensor *t) { return mat_bytes_of(ks, t->type, t->ne[1], t->ne[0]); }

// Copies rows x k of type from src into dst (packed where ks packs) and describes it in tm.
static void place_rows(const tensor_kernels *ks, uint32_t type, int64_t rows, int64_t k, const void *src, uint8_t *dst,
		       tensor_mat *tm) {
	if (tensor_pack_bytes(ks, type, rows, k, 1)) {
		tensor_mat_init(tm, ks, type, rows, k, 1, src, dst, NULL);
		return;
	}
	memcpy(dst, src, tensor_row_bytes(type, k) * (size_t)rows);
	tensor_mat_init(tm, ks, type, rows, k, 1, dst, NULL, NULL);
}

static void place(const tensor_kernels *ks, const gguf_tensor *t, uint8_t *dst, tensor_mat *tm) {
	place_rows(ks, t->type, t->ne[1], t->ne[0], t->data, dst, tm);
}

static void lora_destroy(model_lora *a) {
	free(a->mem);
	free(a->pairs);
	free(a->by);
	free(a);
}

int model_lora_from_gguf(model_lora **out, const model *m, const gguf *g, char *err, size_t errlen) {
	*out = NULL;
	const model_hparams *hp = &m->hp;
	char got[80];
	if (!meta_str_is(g, "general.type", "adapter", got, sizeof got))
		return base_seterr(err, errlen, LANES_EFORMAT, "lora: general.type is '%s', expected 'adapter'", got);
	if (!meta_str_is(g, "adapter.type", "lora", got, sizeof got))
		return base_seterr(err, errlen, LANES_EUNSUPPORTED, "lora: adapter.type is '%s', expected 'lora'", got);
	if (!meta_str_is(g, "general.architecture", hp->arch, got, sizeof got))
		return base_seterr(err, errlen, LANES_EFORMAT, "lora: general.architecture is '%s', the base model's is '%s'", got,
				    hp->arch);
	float alpha = 0;
	const int arc = gguf_get_f32(g, "adapter.lora.alpha", &alpha);
	if ((arc && arc != LANES_ENOTFOUND) || !isfinite(alpha))
		return base_seterr(err, errlen, LANES_EFORMAT, "lora: adapter.lora.alpha must be a finite number");

	const size_t slots = (size_t)hp->n_layers * LK_LAYER + 1;
	const int64_t nt = gguf_n_tensors(g);
	model_lora *a = calloc(1, sizeof *a);
	const gguf_tensor **ta = calloc(slots, sizeof *ta), **tb = calloc(slots, sizeof *tb);
	int rc = LANES_OK;
	if (!a || !ta || !tb) {
		rc = base_seterr(err, errlen, LANES_ENOMEM, "lora: out of memory");
		goto fail;
	}
	a->m = m;
	atomic_init(&a->refs, 1);
	a->alpha = arc ? 0.0f : alpha;
	// Pair the tensors by the weight they name.
	for (int64_t i = 0; i < nt; i++) {
		const gguf_tensor *t = gguf_tensor_at(g, i);
		const bool is_a = ends_with(t->name, ".lora_a"), is_b = ends_with(t->name, ".lora_b");
		if (!is_a && !is_b) {
			// norm vectors of an adapter are left out, as llama.cpp does
			if (ends_with(t->name, "_norm.weight")) {
				LOG_WARN("lora", "tensor %s is not applied (norm vectors are left out)", t->name);
				continue;
			}
			rc = base_seterr(err, errlen, LANES_EFORMAT, "lora: tensor %s is neither a .lora_a nor a .lora_b", t->name);
			goto fail;
		}
		char base[256];
		snprintf(base, sizeof base, "%.*s", (int)(strlen(t->name) - 7), t->name);
		int l, k;
		if (!parse_target(base, hp->n_layers, &l, &k)) {
			rc = base_seterr(err, errlen, LANES_EUNSUPPORTED, "lora: tensor %s adapts %s, which lanes does not adapt (or the base model lacks)",
					  t->name, base);
			goto fail;
		}
		const mweight *w = l < 0 ? (m->output.data == m->tok_embd.data ? NULL : &m->output) : layer_weight(&m->layers[l], k);
		if (!w || !w->data) {
			rc = base_seterr(err, errlen, LANES_EFORMAT, "lora: tensor %s adapts %s, which the base model does not have", t->name, base);
			goto fail;
		}
		const size_t at = l < 0 ? slots - 1 : (size_t)l * LK_LAYER + (size_t)k;
		if (is_a) ta[at] = t;
		else tb[at] = t;
	}
	// Check every pair against its weight and size the memory.
	uint64_t total = 0;
	for (size_t at = 0; at < slots; at++) {
		if (!ta[at] && !tb[at]) continue;
		if (!ta[at] || !tb[at]) {
			const char *have = ta[at] ? ta[at]->name : tb[at]->name;
			rc = base_seterr(err, errlen, LANES_EFORMAT, "lora: tensor %s has no %s partner", have, ta[at] ? ".lora_b" : ".lora_a");
			goto fail;
		}
		const int l = at == slots - 1 ? -1 : (int)(at / LK_LAYER), k = l < 0 ? LK_OUTPUT : (int)(at % LK_LAYER);
		const mweight *w = l < 0 ? &m->output : layer_weight(&m->layers[l], k);
		const int64_t r = ta[at]->ne[1];
		if (r < 1 || r > w->k || r > (1 << 16)) {
			rc = base_seterr(err, errlen, LANES_EFORMAT, "lora: tensor %s has rank %lld, outside 1..%lld", ta[at]->name, (long long)r,
					  (long long)w->k);
			goto fail;
		}
		if ((rc = check_half(ta[at], w->k, r, err, errlen)) || (rc = check_half(tb[at], r, w->rows, err, errlen))) goto fail;
		if (!ck_add(total, mat_bytes(m->ks, ta[at]), &total) || !ck_add(total, mat_bytes(m->ks, tb[at]), &total) ||
		    total > SIZE_MAX / 2) {
			rc = base_seterr(err, errlen, LANES_ENOMEM, "lora: the adapter would not fit in memory");
			goto fail;
		}
		a->n_pairs++;
	}
	if (!a->n_pairs) {
		rc = base_seterr(err, errlen, LANES_EFORMAT, "lora: the file holds no .lora_a / .lora_b pair");
		goto fail;
	}
	a->pairs = calloc((size_t)a->n_pairs, sizeof *a->pairs);
	a->by = calloc(slots, sizeof *a->by);
	if (!a->pairs || !a->by || posix_memalign(&a->mem, 64, (size_t)total)) {
		a->mem = NULL;
		rc = base_seterr(err, errlen, LANES_ENOMEM, "lora: out of memory for %.1f MiB of adapter", (double)total / 1048576.0);
		goto fail;
	}
	a->bytes = total;
	uint8_t *p = a->mem;
	int32_t np = 0;
	for (size_t at = 0; at < slots; at++) {
		if (!ta[at]) continue;
		lora_pair *pr = &a->pairs[np++];
		pr->r = (int32_t)ta[at]->ne[1];
		pr->n_in = (int32_t)ta[at]->ne[0];
		pr->n_out = (int32_t)tb[at]->ne[1];
		place(m->ks, ta[at], p, &pr->a);
		p += mat_bytes(m->ks, ta[at]);
		place(m->ks, tb[at], p, &pr->b);
		p += mat_bytes(m->ks, tb[at]);
		a->by[at] = pr;
		a->kinds |= 1u << (at == slots - 1 ? LK_OUTPUT : at % LK_LAYER);
		if (pr->r > a->rank) a->rank = pr->r;
		a->madds += (uint64_t)pr->r * (uint64_t)(pr->n_in + pr->n_out);
	}
	a->share = (double)a->madds / (double)base_madds(m);
	a->id = atomic_fetch_add(&lora_ids, 1) + 1;
	free(ta);
	free(tb);
	*out = a;
	return LANES_OK;
fail:
	free(ta);
	free(tb);
	if (a) lora_destroy(a);
	return rc;
}

// Reads an adapter of m from g (freed here); messages name the file.
static int load_from(model_lora **out, const model *m, gguf *g, const char *name, char *err, size_t errlen) {
	char msg[512];
	int rc = model_lora_from_gguf(out, m, g, msg, sizeof msg);
	gguf_free(g);
	if (rc) base_seterr(err, errlen, rc, "%s: %s", name, msg);
	return rc;
}

int model_lora_load(model_lora **out, const model *m, const char *path, char *err, size_t errlen) {
	*out = NULL;
	gguf *g;
	int rc = gguf_open(&g, path, err, errlen); // its message names the file
	return rc ? rc : load_from(out, m, g, path, err, errlen);
}

int model_lora_load_fd(model_lora **out, const model *m, int fd, const char *name, char *err, size_t errlen) {
	*out = NULL;
	gguf *g;
	int rc = gguf_open_fd(&g, fd, name, err, errlen);
	return rc ? rc : load_from(out, m, g, name, err, errlen);
}

// The count is the one field a shared adapter changes: a const reader may hold a reference.
const model_lora *model_lora_ref(const model_lora *a) {
	atomic_fetch_add(&((model_lora *)a)->refs, 1);
	return a;
}

void model_lora_on_free(model_lora *a, void (*fn)(void *arg, const model_lora *a), void *arg) {
	a->on_free = fn;
	a->on_free_arg = arg;
}

uint64_t model_lora_id(const model_lora *a) { return a->id; }

void model_lora_free(const model_lora *ca) {
	model_lora *a = (model_lora *)ca;
	if (!a || atomic_fetch_sub(&a->refs, 1) != 1) return;
	if (a->on_free) a->on_free(a->on_free_arg, a);
	lora_destroy(a);
}

const model *model_lora_base(const model_lora *a) { return a->m; }

void model_lora_info_of(const model_lora *a, model_lora_info *out) {
	*out = (model_lora_info){.rank = a->rank, .alpha = a->alpha, .n_targets = a->n_pairs, .bytes = a->bytes,
				 .madds = a->madds, .share = a->share};
	size_t k = 0;
	for (int i = 0; i < LK_COUNT; i++)
		if (a->kinds >> i & 1)
			k += (size_t)snprintf(out->targets + k, sizeof out->targets - k, "%s%s", k ? "," : "", kind_names[i]);
}

const char *model_lora_kind_name(int32_t kind) { return kind >= 0 && kind < LK_COUNT ? kind_names[kind] : NULL; }

// The weight layer l's kind k adapts, or NULL when an adapter cannot target it.
static const mweight *target_of(const model *m, int32_t l, int32_t kind) {
	if (m->hp.encoder) return NULL; // an encoder's pass takes no adapters
	if (kind == LK_OUTPUT) return m->output.data == m->tok_embd.data ? NULL : &m->output;
	if (kind < 0 || kind >= LK_LAYER || l < 0 || l >= m->hp.n_layers) return NULL;
	const mweight *w = layer_weight(&m->layers[l], kind);
	return w->data ? w : NULL;
}

bool model_lora_target(const model *m, int32_t l, int32_t kind, int64_t *n_in, int64_t *n_out) {
	const mweight *w = target_of(m, l, kind);
	if (w) *n_in = w->k, *n_out = w->rows;
	return w != NULL;
}

int model_lora_new(model_lora **out, const model *m, float alpha, const model_lora_shape *shapes, int32_t n, char *err,
		   size_t errlen) {
	*out = NULL;
	const size_t slots = (size_t)m->hp.n_layers * LK_LAYER + 1;
	if (n < 1 || (size_t)n > slots || !isfinite(alpha))
		return base_seterr(err, errlen, LANES_EINVAL, "lora: %d pairs (1..%zu) with alpha %g", n, slots, (double)alpha);
	model_lora *a = calloc(1, sizeof *a);
	if (a) atomic_init(&a->refs, 1); // the caller's: the fail path's free must free it
	float *zero = NULL;
	int rc = LANES_OK;
	if (!a || !(a->pairs = calloc((size_t)n, sizeof *a->pairs)) || !(a->by = calloc(slots, sizeof *a->by))) {
		rc = base_seterr(err, errlen, LANES_ENOMEM, "lora: out of memory");
		goto fail;
	}
	a->m = m;
	a->alpha = alpha;
	uint64_t total = 0, widest = 0;
	for (int32_t i = 0; i < n; i++) {
		const model_lora_shape *sh = &shapes[i];
		const mweight *w = target_of(m, sh->layer, sh->kind);
		const char *kn = model_lora_kind_name(sh->kind);
		if (!w) {
			rc = base_seterr(err, errlen, LANES_EINVAL, "lora: pair %d: layer %d's %s is not a weight an adapter can target", i,
					  sh->layer, kn ? kn : "(unknown kind)");
			goto fail;
		}
		const size_t at = sh->kind == LK_OUTPUT ? slots - 1 : (size_t)sh->layer * LK_LAYER + (size_t)sh->kind;
		if (a->by[at] || sh->r < 1 || sh->r > w->k || sh->r > (1 << 16)) {
			rc = base_seterr(err, errlen, LANES_EINVAL, "lora: pair %d (layer %d's %s): %s", i, sh->layer, kn,
					  a->by[at] ? "given twice" : "rank outside 1..n_in");
			goto fail;
		}
		lora_pair *pr = &a->pairs[i];
		pr->r = sh->r, pr->n_in = (int32_t)w->k, pr->n_out = (int32_t)w->rows;
		a->by[at] = pr;
		a->kinds |= 1u << sh->kind;
		if (pr->r > a->rank) a->rank = pr->r;
		a->madds += (uint64_t)pr->r * (uint64_t)(pr->n_in + pr->n_out);
		const uint64_t wa = (uint64_t)pr->r * (uint64_t)pr->n_in, wb = (uint64_t)pr->n_out * (uint64_t)pr->r;
		widest = wa > widest ? wa : widest;
		widest = wb > widest ? wb : widest;
		if (!ck_add(total, mat_bytes_of(m->ks, GGUF_T_F32, pr->r, pr->n_in), &total) ||
		    !ck_add(total, mat_bytes_of(m->ks, GGUF_T_F32, pr->n_out, pr->r), &total) || total > SIZE_MAX / 2) {
			rc = base_seterr(err, errlen, LANES_ENOMEM, "lora: the adapter would not fit in memory");
			goto fail;
		}
	}
	a->n_pairs = n;
	if (posix_memalign(&a->mem, 64, (size_t)total) || !(zero = calloc((size_t)widest, sizeof *zero))) {
		a->mem = NULL;
		rc = base_seterr(err, errlen, LANES_ENOMEM, "lora: out of memory for %.1f MiB of adapter", (double)total / 1048576.0);
		goto fail;
	}
	a->bytes = total;
	uint8_t *p = a->mem;
	for (int32_t i = 0; i < n; i++) {
		lora_pair *pr = &a->pairs[i];
		place_rows(m->ks, GGUF_T_F32, pr->r, pr->n_in, zero, p, &pr->a);
		p += mat_bytes_of(m->ks, GGUF_T_F32, pr->r, pr->n_in);
		place_rows(m->ks, GGUF_T_F32, pr->n_out, pr->r, zero, p, &pr->b);
		p += mat_bytes_of(m->ks, GGUF_T_F32, pr->n_out, pr->r);
	}
	free(zero);
	a->share = (double)a->madds / (double)base_madds(m);
	a->id = atomic_fetch_add(&lora_ids, 1) + 1; // a version of its own for the prefix cache
	*out = a;
	return LANES_OK;
fail:
	free(zero);
	model_lora_free(a);
	return rc;
}

void model_lora_fill(model_lora *a, int32_t i, const float *a_rows, const float *b_rows) {
	LANES_ASSERT(i >= 0 && i < a->n_pairs);
	lora_pair *pr = &a->pairs[i];
	const tensor_kernels *ks = a->m->ks;
	// the matrices keep their place in the adapter's memory: only their values change
	place_rows(ks, GGUF_T_F32, pr->r, pr->n_in, a_rows, (uint8_t *)pr->a.data, &pr->a);
	place_rows(ks, GGUF_T_F32, pr->n_out, pr->r, b_rows, (uint8_t *)pr->b.data, &pr->b);
}
