// learn/adapter: trainable adapters — f32 A and B for each adapted weight in one flat array
// (the AdamW moments beside it in the same layout), made fresh, read from a GGUF LoRA file,
// turned into an inference adapter, and written as llama.cpp writes LoRA files.
#include "learn/learn_int.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// ---- the allocation gate ---------------------------------------------------------------------
static atomic_llong fail_after = -1;

void learn_test_fail_alloc(int64_t after) { atomic_store(&fail_after, after < 0 ? -1 : after); }

bool learn_alloc_fails(void) {
	long long cur = atomic_load(&fail_after);
	while (cur >= 0) {
		if (atomic_compare_exchange_weak(&fail_after, &cur, cur - 1)) return cur == 0;
	}
	return false;
}

void *learn_malloc(size_t n) { return learn_alloc_fails() ? NULL : malloc(n ? n : 1); }

void *learn_calloc(size_t n, size_t size) { return learn_alloc_fails() ? NULL : calloc(n ? n : 1, size ? size : 1); }

// ---- making one ------------------------------------------------------------------------------
// An adapter with these pairs (shapes and order), its arrays zero.
static int adapter_alloc(learn_adapter **out, const model *m, float alpha, const lpair *want, int32_t n, bool moments, char *err,
			 size_t errlen) {
	*out = NULL;
	const int32_t L = model_hparams_of(m)->n_layers;
	const size_t slots = (size_t)L * MODEL_LORA_OUTPUT + 1;
	learn_adapter *a = learn_calloc(1, sizeof *a);
	if (!a) return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
	a->m = m;
	a->alpha = alpha;
	a->pairs = learn_calloc((size_t)n, sizeof *a->pairs);
	a->slot = learn_malloc(slots * sizeof *a->slot);
	if (!a->pairs || !a->slot) goto oom;
	for (size_t s = 0; s < slots; s++) a->slot[s] = -1;
	uint64_t total = 0;
	for (int32_t i = 0; i < n; i++) {
		lpair *p = &a->pairs[i];
		*p = want[i];
		p->a_off = (int64_t)total;
		total += (uint64_t)p->r * (uint64_t)p->n_in;
		p->b_off = (int64_t)total;
		total += (uint64_t)p->n_out * (uint64_t)p->r;
		const size_t at = p->kind == MODEL_LORA_OUTPUT ? slots - 1 : (size_t)p->layer * MODEL_LORA_OUTPUT + (size_t)p->kind;
		a->slot[at] = i;
		if (p->r > a->rank) a->rank = p->r;
	}
	a->n_pairs = n;
	a->n_params = (int64_t)total;
	if (total > SIZE_MAX / 16) goto oom;
	a->w = learn_calloc((size_t)total, sizeof(float));
	if (moments) {
		a->m1 = learn_calloc((size_t)total, sizeof(float));
		a->m2 = learn_calloc((size_t)total, sizeof(float));
	}
	if (!a->w || (moments && (!a->m1 || !a->m2))) goto oom;
	*out = a;
	return LANES_OK;
oom:
	learn_adapter_free(a);
	return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory for an adapter");
}

int learn_adapter_new(learn_adapter **out, const model *m, const learn_adapter_opts *o, char *err, size_t errlen) {
	*out = NULL;
	const model_hparams *hp = model_hparams_of(m);
	const unsigned targets = o->targets ? o->targets : LEARN_TARGETS_DEFAULT;
	if (o->rank < 1 || o->rank > (1 << 16) || !isfinite(o->alpha) || o->alpha < 0 || targets >> MODEL_LORA_KINDS)
		return base_seterr(err, errlen, LANES_EINVAL, "learn: rank %d (1..65536), alpha %g (0 or more) or targets 0x%x", o->rank,
				    (double)o->alpha, targets);
	lpair *want = learn_calloc((size_t)hp->n_layers * MODEL_LORA_OUTPUT + 1, sizeof *want);
	if (!want) return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
	int32_t n = 0;
	for (int32_t l = 0; l <= hp->n_layers; l++)
		for (int32_t k = 0; k < MODEL_LORA_KINDS; k++) {
			const bool head = l == hp->n_layers;
			int64_t n_in, n_out;
			if (head != (k == MODEL_LORA_OUTPUT) || !(targets >> k & 1) || !model_lora_target(m, l, k, &n_in, &n_out)) continue;
			want[n++] = (lpair){.layer = head ? -1 : l, .kind = k, .r = o->rank < n_in ? o->rank : (int32_t)n_in,
					    .n_in = (int32_t)n_in, .n_out = (int32_t)n_out};
		}
	int rc = n ? adapter_alloc(out, m, o->alpha != 0 ? o->alpha : (float)o->rank, want, n, true, err, errlen)
		   : base_seterr(err, errlen, LANES_EINVAL, "learn: the model has none of the weights asked for to adapt");
	free(want);
	if (rc) return rc;
	// A uniform in +-1/sqrt(n_in), a counter-based draw per (seed, pair, element); B stays 0
	learn_adapter *a = *out;
	for (int32_t i = 0; i < a->n_pairs; i++) {
		const lpair *p = &a->pairs[i];
		const double bound = 1.0 / sqrt((double)p->n_in);
		const uint64_t key = splitmix64(o->seed ^ splitmix64((uint64_t)i + 1));
		float *w = a->w + p->a_off;
		for (int64_t e = 0; e < (int64_t)p->r * p->n_in; e++) {
			const double u = (double)(splitmix64(key + (uint64_t)e) >> 11) * (1.0 / 9007199254740992.0);
			w[e] = (float)((2.0 * u - 1.0) * bound);
		}
	}
	return LANES_OK;
}

int learn_adapter_load(learn_adapter **out, const model *m, const char *path, char *err, size_t errlen) {
	*out = NULL;
	model_lora *check;
	int rc = model_lora_load(&check, m, path, err, errlen); // every name, shape and type checked
	if (rc) return rc;
	model_lora_info info;
	model_lora_info_of(check, &info);
	model_lora_free(check);
	gguf *g;
	if ((rc = gguf_open(&g, path, err, errlen))) return rc;
	const int32_t L = model_hparams_of(m)->n_layers;
	lpair *want = learn_calloc((size_t)L * MODEL_LORA_OUTPUT + 1, sizeof *want);
	const gguf_tensor **ta = learn_calloc((size_t)L * MODEL_LORA_OUTPUT + 1, sizeof *ta);
	const gguf_tensor **tb = learn_calloc((size_t)L * MODEL_LORA_OUTPUT + 1, sizeof *tb);
	int32_t n = 0;
	if (!want || !ta || !tb) {
		rc = base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
		goto done;
	}
	for (int32_t l = 0; l <= L; l++)
		for (int32_t k = 0; k < MODEL_LORA_KINDS; k++) {
			const bool head = l == L;
			if (head != (k == MODEL_LORA_OUTPUT)) continue;
			char name[160];
			int used = head ? snprintf(name, sizeof name, "output.weight") : snprintf(name, sizeof name, "blk.%d.%s.weight", l, model_lora_kind_name(k));
			snprintf(name + used, sizeof name - (size_t)used, ".lora_a");
			const gguf_tensor *a_t = gguf_find_tensor(g, name);
			snprintf(name + used, sizeof name - (size_t)used, ".lora_b");
			const gguf_tensor *b_t = gguf_find_tensor(g, name);
			if (!a_t || !b_t) continue;
			ta[n] = a_t, tb[n] = b_t;
			want[n++] = (lpair){.layer = head ? -1 : l, .kind = k, .r = (int32_t)a_t->ne[1], .n_in = (int32_t)a_t->ne[0],
					    .n_out = (int32_t)b_t->ne[1]};
		}
	// a file without alpha scales its terms by the user's scale alone: alpha = r keeps that
	if ((rc = adapter_alloc(out, m, info.alpha != 0 ? info.alpha : (float)info.rank, want, n, true, err, errlen))) goto done;
	if (info.alpha == 0)
		for (int32_t i = 0; i < n; i++)
			if (want[i].r != info.rank) {
				rc = base_seterr(err, errlen, LANES_EUNSUPPORTED, "%s: pairs of different ranks and no adapter.lora.alpha", path);
				goto done;
			}
	for (int32_t i = 0; i < n; i++) {
		const lpair *p = &(*out)->pairs[i];
		if (tensor_dequantize_rows(ta[i]->type, ta[i]->data, (*out)->w + p->a_off, p->r, p->n_in, NULL) ||
		    tensor_dequantize_rows(tb[i]->type, tb[i]->data, (*out)->w + p->b_off, p->n_out, p->r, NULL)) {
			rc = base_seterr(err, errlen, LANES_EFORMAT, "%s: cannot read %s", path, ta[i]->name);
			goto done;
		}
	}
done:
	if (rc) {
		learn_adapter_free(*out);
		*out = NULL;
	}
	free(want);
	free(ta);
	free(tb);
	gguf_free(g);
	return rc;
}

int learn_adapter_copy(learn_adapter **out, const learn_adapter *a, char *err, size_t errlen) {
	int rc = adapter_alloc(out, a->m, a->alpha, a->pairs, a->n_pairs, false, err, errlen);
	if (rc) return rc;
	memcpy((*out)->w, a->w, (size_t)a->n_params * sizeof *a->w);
	(*out)->version = a->version;
	(*out)->busy = true; // a copy is to be read: no job trains it
	return LANES_OK;
}

void learn_adapter_free(learn_adapter *a) {
	if (!a) return;
	free(a->pairs);
	free(a->slot);
	free(a->w);
	free(a->m1);
	free(a->m2);
	free(a);
}

void learn_adapter_info_of(const learn_adapter *a, learn_adapter_info *out) {
	*out = (learn_adapter_info){.rank = a->rank, .alpha = a->alpha, .n_pairs = a->n_pairs, .params = a->n_params,
				    .param_bytes = (uint64_t)a->n_params * 4, .optimizer_bytes = a->m1 ? (uint64_t)a->n_params * 8 : 0,
				    .version = a->version};
	unsigned kinds = 0;
	for (int32_t i = 0; i < a->n_pairs; i++) kinds |= 1u << a->pairs[i].kind;
	size_t k = 0;
	for (int32_t i = 0; i < MODEL_LORA_KINDS; i++)
		if (kinds >> i & 1)
			k += (size_t)snprintf(out->targets + k, sizeof out->targets - k, "%s%s", k ? "," : "", model_lora_kind_name(i));
}

int32_t learn_adapter_n_pairs(const learn_adapter *a) { return a->n_pairs; }

void learn_adapter_pair(learn_adapter *a, int32_t i, learn_pair *out) {
	LANES_ASSERT(i >= 0 && i < a->n_pairs);
	const lpair *p = &a->pairs[i];
	*out = (learn_pair){.layer = p->layer, .kind = p->kind, .r = p->r, .n_in = p->n_in, .n_out = p->n_out,
			    .a = a->w + p->a_off, .b = a->w + p->b_off};
}

// ---- into inference and onto disk ---------------------------------------------------------
// An empty inference adapter of a's shapes (its allocation happens here alone).
static int lora_shell(const learn_adapter *a, model_lora **out, char *err, size_t errlen) {
	*out = NULL;
	model_lora_shape *sh = learn_malloc((size_t)a->n_pairs * sizeof *sh);
	if (!sh || learn_alloc_fails()) {
		free(sh);
		return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory for an adapter version");
	}
	for (int32_t i = 0; i < a->n_pairs; i++) sh[i] = (model_lora_shape){a->pairs[i].layer, a->pairs[i].kind, a->pairs[i].r};
	int rc = model_lora_new(out, a->m, a->alpha, sh, a->n_pairs, err, errlen);
	free(sh);
	return rc;
}

static void lora_fill_all(const learn_adapter *a, model_lora *l) {
	for (int32_t i = 0; i < a->n_pairs; i++) model_lora_fill(l, i, a->w + a->pairs[i].a_off, a->w + a->pairs[i].b_off);
}

int learn_adapter_lora(const learn_adapter *a, model_lora **out, char *err, size_t errlen) {
	int rc = lora_shell(a, out, err, errlen);
	if (!rc) lora_fill_all(a, *out);
	return rc;
}

int learn_lora_shell(const learn_adapter *a, model_lora **out, char *err, size_t errlen) { return lora_shell(a, out, err, errlen); }
void learn_lora_fill(const learn_adapter *a, model_lora *l) { lora_fill_all(a, l); }

// dfd -1: path is the operator's path; else a checked name in folder dfd.
static int save(const learn_adapter *a, int dfd, const char *path, uint32_t type, char *err, size_t errlen) {
	if (type != GGUF_T_F32 && type != GGUF_T_F16 && type != GGUF_T_BF16 && type != GGUF_T_Q8_0)
		return base_seterr(err, errlen, LANES_EINVAL, "learn: an adapter is saved as F32, F16, BF16 or Q8_0");
	for (int32_t i = 0; i < a->n_pairs; i++)
		if (!tensor_row_bytes(type, a->pairs[i].n_in) || !tensor_row_bytes(type, a->pairs[i].r))
			return base_seterr(err, errlen, LANES_EINVAL, "learn: rows of %d and %d elements do not fit type %s", a->pairs[i].n_in,
					    a->pairs[i].r, tensor_traits_of(type)->name);
	char arch[sizeof model_hparams_of(a->m)->arch + 1], name[200];
	snprintf(arch, sizeof arch, "%s", model_hparams_of(a->m)->arch);
	gguf_writer *w = learn_alloc_fails() ? NULL : gguf_writer_new();
	void *buf = NULL;
	int rc = LANES_OK;
	if (!w) {
		rc = base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
		goto done;
	}
	if ((rc = gguf_writer_set_str(w, "general.architecture", arch)) || (rc = gguf_writer_set_str(w, "general.type", "adapter")) ||
	    (rc = gguf_writer_set_str(w, "general.name", "lanes learn")) || (rc = gguf_writer_set_str(w, "adapter.type", "lora")) ||
	    (rc = gguf_writer_set_f32(w, "adapter.lora.alpha", a->alpha))) {
		rc = base_seterr(err, errlen, rc, "learn: %s", base_strerror(rc));
		goto done;
	}
	for (int32_t i = 0; i < a->n_pairs && !rc; i++) {
		const lpair *p = &a->pairs[i];
		for (int h = 0; h < 2 && !rc; h++) {
			const int64_t cols = h ? p->r : p->n_in, rows = h ? p->n_out : p->r, ne[2] = {cols, rows};
			const size_t bytes = tensor_row_bytes(type, cols) * (size_t)rows;
			void *nb = learn_alloc_fails() ? NULL : realloc(buf, bytes);
			if (!nb) {
				rc = base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
				break;
			}
			buf = nb;
			if (p->kind == MODEL_LORA_OUTPUT) snprintf(name, sizeof name, "output.weight.lora_%c", h ? 'b' : 'a');
			else snprintf(name, sizeof name, "blk.%d.%s.weight.lora_%c", p->layer, model_lora_kind_name(p->kind), h ? 'b' : 'a');
			rc = tensor_quantize_rows(type, a->w + (h ? p->b_off : p->a_off), buf, rows, cols, NULL);
			if (!rc) rc = gguf_writer_add_tensor(w, name, type, 2, ne, buf, bytes);
			if (rc) rc = base_seterr(err, errlen, rc, "learn: %s: %s", name, base_strerror(rc));
		}
	}
	if (!rc) rc = dfd < 0 ? gguf_writer_write(w, path, err, errlen) : gguf_writer_write_at(w, dfd, path, err, errlen);
done:
	free(buf);
	gguf_writer_free(w);
	return rc;
}

int learn_adapter_save(const learn_adapter *a, const char *path, uint32_t type, char *err, size_t errlen) {
	return save(a, -1, path, type, err, errlen);
}

int learn_adapter_save_at(const learn_adapter *a, int dfd, const char *name, uint32_t type, char *err, size_t errlen) {
	return save(a, dfd, name, type, err, errlen);
}
