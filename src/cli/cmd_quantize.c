// cli: `lanes quantize IN.gguf OUT.gguf TYPE [--imatrix FILE]` — rewrites a model's weights in a
// file type (Q8_0, Q4_K_M, ...) with the per-tensor mix llama.cpp makes; metadata is copied.
#include "base/base.h"
#include "cli/cli.h"
#include "cli/ftype.h"
#include "cli/imatrix.h"
#include "gguf/gguf.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t meta_i64(const gguf *g, const char *arch, const char *key, int64_t dflt) {
	char k[256];
	snprintf(k, sizeof k, "%s.%s", arch, key);
	int64_t v;
	return gguf_get_i64(g, k, &v) == 0 ? v : dflt;
}

static void describe_model(const gguf *g, const ftype_info *ft, ftype_model *m) {
	gguf_str a = {0};
	char arch[64] = "llama";
	if (gguf_get_str(g, "general.architecture", &a) == 0 && a.len < sizeof arch) {
		memcpy(arch, a.ptr, a.len);
		arch[a.len] = 0;
	}
	*m = (ftype_model){.ft = ft, .llama_arch = !strcmp(arch, "llama"), .tied = true};
	m->n_layer = meta_i64(g, arch, "block_count", 0);
	m->n_head = meta_i64(g, arch, "attention.head_count", 0);
	m->n_head_kv = meta_i64(g, arch, "attention.head_count_kv", m->n_head);
	m->n_expert = meta_i64(g, arch, "expert_count", 0);
	for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
		const char *name = gguf_tensor_at(g, i)->name;
		if (!strcmp(name, "output.weight")) m->tied = false;
		if (strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight") ||
		    strstr(name, "attn_kv_b.weight"))
			m->n_attn_v++;
	}
}

// Converts one tensor to type dst into a malloc'd buffer (*out, *outlen), each matrix of a
// stack under its part of imp (NULL: none).
static int convert_tensor(const gguf_tensor *t, uint32_t dst, const float *imp, base_pool *pool, void **out,
			  uint64_t *outlen, char *err, size_t errlen) {
	*out = NULL;
	if (t->type == dst) { // same type: the bytes are copied unchanged
		*out = malloc(t->nbytes ? t->nbytes : 1);
		if (!*out) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
		memcpy(*out, t->data, t->nbytes);
		*outlen = t->nbytes;
		return 0;
	}
	const tensor_traits *src_tt = tensor_traits_of(t->type);
	if (!src_tt)
		return base_seterr(err, errlen, LANES_EUNSUPPORTED, "%s: cannot convert from type %u",
				    t->name, t->type);
	int64_t n = t->ne[0], nel = gguf_tensor_nelem(t), nrows = n ? nel / n : 0;
	size_t rb = tensor_row_bytes(dst, n);
	uint64_t nbytes;
	if (!rb || !ck_mul((uint64_t)nrows, rb, &nbytes) || (uint64_t)nel > SIZE_MAX / 4)
		return base_seterr(err, errlen, LANES_EINVAL, "%s: cannot hold %lld elements as type %u",
				    t->name, (long long)nel, dst);
	float *f = malloc((size_t)nel * 4 + 1);
	void *q = malloc(nbytes + 1);
	int rc = 0;
	if (!f || !q) {
		rc = base_seterr(err, errlen, LANES_ENOMEM, "%s: out of memory", t->name);
		goto fail;
	}
	rc = tensor_dequantize_rows(t->type, t->data, f, nrows, n, pool);
	if (rc) {
		rc = base_seterr(err, errlen, rc, "%s: cannot dequantize", t->name);
		goto fail;
	}
	for (int64_t i = 0; i < nel; i++)
		if (!isfinite(f[i])) {
			rc = base_seterr(err, errlen, LANES_EFORMAT, "%s: element %lld is not finite",
					  t->name, (long long)i);
			goto fail;
		}
	// the matrices of a stack (experts) one by one, each with its own importances
	const int64_t nmat = t->n_dims >= 3 && t->ne[1] > 0 ? nrows / t->ne[1] : 1, mrows = nrows / nmat;
	for (int64_t e = 0; e < nmat && !rc; e++)
		rc = tensor_quantize_rows_imp(dst, f + e * mrows * n, (uint8_t *)q + (size_t)(e * mrows) * rb, mrows, n, imp ? imp + e * n : NULL,
					      pool);
	if (rc) {
		rc = base_seterr(err, errlen, rc, "%s: cannot quantize", t->name);
		goto fail;
	}
	free(f);
	*out = q;
	*outlen = nbytes;
	return 0;
fail:
	free(f);
	free(q);
	return rc;
}

// The importances of tensor t from im where its type dst takes them: NULL when none are
// (*missing set where dst would have used them); an entry of the wrong size is an error.
static int importance_of(const cli_imatrix *im, const gguf_tensor *t, uint32_t dst, const float **imp, bool *missing, char *err,
			 size_t errlen) {
	*imp = NULL, *missing = false;
	const tensor_traits *tt = tensor_traits_of(dst);
	if (!im || !tt || !tt->from_f32_imp || t->type == dst) return 0;
	int64_t n;
	const float *v = imatrix_find(im, t->name, &n);
	const int64_t want = t->ne[0] * (t->n_dims >= 3 ? t->ne[2] : 1);
	if (!v) {
		*missing = true;
		return 0;
	}
	if (n != want)
		return base_seterr(err, errlen, LANES_EINVAL, "%s: the importance matrix has %lld values for it, which takes %lld (made for another model?)",
				    t->name, (long long)n, (long long)want);
	*imp = v;
	return 0;
}

static int quantize_file(const char *in, const char *out, const ftype_info *ft, const char *impath, int threads) {
	char err[512];
	gguf *g = NULL;
	gguf_writer *w = NULL;
	base_pool *pool = NULL;
	cli_imatrix *im = NULL;
	int n_imp = 0, n_missing = 0;
	int rc = gguf_open(&g, in, err, sizeof err);
	if (rc) goto done;
	if (impath) {
		if ((rc = imatrix_load(&im, impath, err, sizeof err))) goto done;
		cli_err("importance matrix %s: %d entries, %lld chunks", impath, imatrix_entries(im), (long long)imatrix_chunks(im));
	}
	w = gguf_writer_new();
	rc = w ? base_pool_new(&pool, threads) : LANES_ENOMEM;
	if (rc) {
		snprintf(err, sizeof err, "%s", base_strerror(rc));
		goto done;
	}
	if ((rc = gguf_writer_copy_kv(w, g, "split.")) ||
	    (rc = gguf_writer_set_u32(w, "general.quantization_version", 2)) ||
	    (rc = gguf_writer_set_u32(w, "general.file_type", ft->id))) {
		snprintf(err, sizeof err, "metadata: %s", base_strerror(rc));
		goto done;
	}
	ftype_model m;
	describe_model(g, ft, &m);
	if (!im && ftype_imatrix_note(ft)) cli_err("%s", ftype_imatrix_note(ft));
	uint64_t size_in = 0, size_out = 0, all_in = 0;
	int n_fallback = 0, n_requant = 0;
	int64_t nt = gguf_n_tensors(g);
	for (int64_t i = 0; i < nt; i++) all_in += gguf_tensor_at(g, i)->nbytes;
	// a bar on a terminal; otherwise the line per tensor below
	cli_progress bar;
	cli_progress_start(&bar, "quantize", true, false);
	for (int64_t i = 0; i < nt; i++) {
		const gguf_tensor *t = gguf_tensor_at(g, i);
		char note[256];
		uint32_t dst = ftype_pick(&m, t->name, t->n_dims, t->ne, t->type, note, sizeof note);
		if (note[0]) {
			cli_progress_clear(&bar);
			cli_err("%s", note);
			n_fallback++;
		}
		const tensor_traits *st = tensor_traits_of(t->type);
		if (dst != t->type && st && st->block > 1) n_requant++;
		void *data = NULL;
		uint64_t len = 0;
		const float *imp;
		bool missing;
		if ((rc = importance_of(im, t, dst, &imp, &missing, err, sizeof err))) {
			cli_progress_end(&bar);
			goto done;
		}
		if (missing) {
			cli_progress_clear(&bar);
			cli_err("note: the importance matrix has nothing for %s: it is fitted without", t->name);
		}
		n_imp += imp != NULL, n_missing += missing;
		rc = convert_tensor(t, dst, imp, pool, &data, &len, err, sizeof err);
		if (!rc && (rc = gguf_writer_add_tensor(w, t->name, dst, t->n_dims, t->ne, data, len)))
			snprintf(err, sizeof err, "%s: %s", t->name, base_strerror(rc));
		free(data);
		if (rc) {
			cli_progress_end(&bar);
			goto done;
		}
		size_in += t->nbytes;
		size_out += len;
		if (!bar.tty)
			fprintf(stderr, "[%3lld/%3lld] %-32s %-5s -> %-5s\n", (long long)i + 1, (long long)nt,
				t->name, gguf_ttype_get(t->type)->name, gguf_ttype_get(dst)->name);
		cli_progress_update(&bar, (int64_t)size_in, (int64_t)all_in, t->name);
	}
	cli_progress_end(&bar);
	if (n_requant)
		cli_err("warning: %d tensors were already quantized; requantizing loses precision", n_requant);
	if (im) cli_err("importance used for %d tensors (%d of the types that take it had none)", n_imp, n_missing);
	rc = gguf_writer_write(w, out, err, sizeof err);
	if (rc) goto done;
	printf("%s: %s, %lld tensors, %.2f MiB -> %.2f MiB%s\n", out, ft->name, (long long)nt,
	       size_in / 1048576.0, size_out / 1048576.0, n_fallback ? " (some tensors fell back)" : "");
done:
	if (rc) cli_err("%s", err);
	base_pool_free(pool);
	gguf_writer_free(w);
	gguf_free(g);
	imatrix_free(im);
	return rc ? 1 : 0;
}

int cmd_quantize(const cli_settings *s) {
	const ftype_info *ft = ftype_by_name(s->pos[2]);
	if (!ft) return cli_usage_error(s, "unknown type '%s' (one of: %s)", s->pos[2], ftype_names());
	return quantize_file(s->pos[0], s->pos[1], ft, s->imatrix, (int)(s->threads > 0 ? s->threads : base_cpu_count()));
}
