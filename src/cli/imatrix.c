// cli/imatrix: importance matrices (imatrix.h). In the `.dat` form an entry is its name, the
// calls it saw and its sums scaled by them; in the GGUF form a weight's squared activations
// summed per expert (in_sum2) and the rows each expert saw (counts). Either becomes the mean.
#include "cli/imatrix.h"

#include "base/base.h"
#include "gguf/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IM_MAX_ENTRIES (1 << 20)
#define IM_MAX_NAME 1024

typedef struct {
	char *name;
	float *v;
	int64_t n;
} im_entry;

struct cli_imatrix {
	im_entry *e;
	int32_t n, cap;
	int64_t chunks;
};

void imatrix_free(cli_imatrix *im) {
	if (!im) return;
	for (int32_t i = 0; i < im->n; i++) free(im->e[i].name), free(im->e[i].v);
	free(im->e);
	free(im);
}

const float *imatrix_find(const cli_imatrix *im, const char *name, int64_t *n) {
	for (int32_t i = 0; im && i < im->n; i++)
		if (!strcmp(im->e[i].name, name)) {
			*n = im->e[i].n;
			return im->e[i].v;
		}
	*n = 0;
	return NULL;
}

int32_t imatrix_entries(const cli_imatrix *im) { return im ? im->n : 0; }
int64_t imatrix_chunks(const cli_imatrix *im) { return im ? im->chunks : 0; }

// Takes name (len bytes) and n values for the next entry (*v: the caller fills them).
static int add_entry(cli_imatrix *im, const char *path, const char *name, size_t len, int64_t n, float **v, char *err,
		     size_t errlen) {
	if (im->n == IM_MAX_ENTRIES) return base_seterr(err, errlen, LANES_EFORMAT, "%s: more than %d entries", path, IM_MAX_ENTRIES);
	if (im->n == im->cap) {
		const int32_t cap = im->cap ? 2 * im->cap : 64;
		im_entry *e = realloc(im->e, (size_t)cap * sizeof *e);
		if (!e) return base_seterr(err, errlen, LANES_ENOMEM, "%s: out of memory", path);
		im->e = e, im->cap = cap;
	}
	for (int32_t i = 0; i < im->n; i++)
		if (strlen(im->e[i].name) == len && !memcmp(im->e[i].name, name, len))
			return base_seterr(err, errlen, LANES_EFORMAT, "%s: entry %.*s appears twice", path, (int)len, name);
	im_entry *e = &im->e[im->n];
	e->name = malloc(len + 1), e->v = malloc((size_t)n * sizeof *e->v), e->n = n;
	if (!e->name || !e->v) {
		free(e->name), free(e->v);
		return base_seterr(err, errlen, LANES_ENOMEM, "%s: out of memory", path);
	}
	memcpy(e->name, name, len);
	e->name[len] = 0;
	im->n++;
	*v = e->v;
	return 0;
}

// Every value finite and not negative (they are means of squares).
static int check_values(const float *v, int64_t n, const char *path, const char *name, char *err, size_t errlen) {
	for (int64_t i = 0; i < n; i++)
		if (!isfinite(v[i]) || v[i] < 0.0f)
			return base_seterr(err, errlen, LANES_EFORMAT, "%s: entry %s: value %lld is %g (importances are means of squares)", path,
					    name, (long long)i, (double)v[i]);
	return 0;
}

typedef struct {
	const uint8_t *p;
	size_t len, at;
} reader;

static bool rd_i32(reader *r, int32_t *v) {
	if (r->len - r->at < 4) return false;
	memcpy(v, r->p + r->at, 4);
	r->at += 4;
	return true;
}

static int load_dat(cli_imatrix *im, const char *path, const uint8_t *p, size_t len, char *err, size_t errlen) {
	reader r = {p, len, 0};
	int32_t n_entries;
	if (!rd_i32(&r, &n_entries) || n_entries < 1 || n_entries > IM_MAX_ENTRIES)
		return base_seterr(err, errlen, LANES_EFORMAT, "%s: not an importance matrix (%s entries)", path,
				    len < 4 ? "no count of" : "a bad count of");
	for (int32_t k = 0; k < n_entries; k++) {
		int32_t nl = 0, ncall = 0, nval = 0;
		if (!rd_i32(&r, &nl) || nl < 1 || nl > IM_MAX_NAME || len - r.at < (size_t)nl)
			return base_seterr(err, errlen, LANES_EFORMAT, "%s: entry %d of %d: its name is cut short or %d bytes long", path, k + 1,
					    n_entries, nl);
		const char *name = (const char *)p + r.at;
		r.at += (size_t)nl;
		if (memchr(name, 0, (size_t)nl)) return base_seterr(err, errlen, LANES_EFORMAT, "%s: entry %d: a NUL in its name", path, k + 1);
		if (!rd_i32(&r, &ncall) || !rd_i32(&r, &nval))
			return base_seterr(err, errlen, LANES_EFORMAT, "%s: entry %.*s: cut short", path, nl, name);
		if (nval < 1 || (size_t)nval > (len - r.at) / 4)
			return base_seterr(err, errlen, LANES_EFORMAT, "%s: entry %.*s: %d values, more than the file holds (or none)", path, nl,
					    name, nval);
		float *v;
		const int rc = add_entry(im, path, name, (size_t)nl, nval, &v, err, errlen);
		if (rc) return rc;
		memcpy(v, p + r.at, (size_t)nval * 4);
		r.at += (size_t)nval * 4;
		// the sums were scaled by the calls: the mean per call
		for (int32_t i = 0; ncall > 0 && i < nval; i++) v[i] /= (float)ncall;
		if (check_values(v, nval, path, im->e[im->n - 1].name, err, errlen)) return LANES_EFORMAT;
	}
	int32_t last_call;
	if (rd_i32(&r, &last_call)) im->chunks = last_call > 0 ? last_call : 0;
	return 0;
}

static bool ends_with(const char *s, const char *suf, size_t *stem) {
	const size_t n = strlen(s), k = strlen(suf);
	if (n <= k || strcmp(s + n - k, suf)) return false;
	*stem = n - k;
	return true;
}

static int load_gguf(cli_imatrix *im, const char *path, char *err, size_t errlen) {
	gguf *g = NULL;
	int rc = gguf_open(&g, path, err, errlen);
	if (rc) return rc;
	gguf_str ty;
	if (gguf_get_str(g, "general.type", &ty) == 0 && !gguf_str_eq(ty, "imatrix")) {
		rc = base_seterr(err, errlen, LANES_EFORMAT, "%s: a GGUF of general.type '%.*s', not an importance matrix", path,
				 (int)(ty.len < 64 ? ty.len : 64), ty.ptr);
		goto out;
	}
	int64_t chunks;
	if (gguf_get_i64(g, "imatrix.chunk_count", &chunks) == 0 && chunks > 0) im->chunks = chunks;
	for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
		const gguf_tensor *s = gguf_tensor_at(g, i);
		size_t stem;
		if (!ends_with(s->name, ".in_sum2", &stem)) continue;
		char cname[IM_MAX_NAME + 16];
		if (stem > IM_MAX_NAME) {
			rc = base_seterr(err, errlen, LANES_EFORMAT, "%s: tensor %.64s...: its name is too long", path, s->name);
			goto out;
		}
		snprintf(cname, sizeof cname, "%.*s.counts", (int)stem, s->name);
		const gguf_tensor *c = gguf_find_tensor(g, cname);
		const int64_t ne0 = s->ne[0], nmat = gguf_tensor_nelem(s) / (ne0 > 0 ? ne0 : 1);
		if (!c || s->type != GGUF_T_F32 || c->type != GGUF_T_F32 || ne0 < 1 || gguf_tensor_nelem(c) != nmat || !s->data || !c->data) {
			rc = base_seterr(err, errlen, LANES_EFORMAT, "%s: %.*s: %s", path, (int)stem, s->name,
					 !c ? "in_sum2 without its counts" : "in_sum2 and counts are not F32 of matching shapes");
			goto out;
		}
		float *v;
		if ((rc = add_entry(im, path, s->name, stem, gguf_tensor_nelem(s), &v, err, errlen))) goto out;
		const float *sums = s->data, *counts = c->data;
		for (int64_t j = 0; j < nmat; j++) {
			const float cnt = counts[j];
			if (!isfinite(cnt) || cnt < 0.0f) {
				rc = base_seterr(err, errlen, LANES_EFORMAT, "%s: %s: count %lld is %g", path, cname, (long long)j, (double)cnt);
				goto out;
			}
			// an expert that saw no rows in the calibration weighs every column alike
			for (int64_t k = 0; k < ne0; k++) v[j * ne0 + k] = cnt > 0.0f ? sums[j * ne0 + k] / cnt : 1.0f;
		}
		if ((rc = check_values(v, gguf_tensor_nelem(s), path, im->e[im->n - 1].name, err, errlen))) goto out;
	}
	if (!im->n) rc = base_seterr(err, errlen, LANES_EFORMAT, "%s: a GGUF without importance entries (no *.in_sum2 tensors)", path);
out:
	gguf_free(g);
	return rc;
}

// The whole file into *buf: the got bytes read already, then the rest.
static int read_rest(FILE *f, const uint8_t *head, size_t got, uint8_t **buf, size_t *len) {
	size_t cap = 1 << 16, n = got;
	uint8_t *b = malloc(cap);
	if (!b) return -1;
	memcpy(b, head, got);
	for (;;) {
		if (n == cap) {
			uint8_t *nb = cap < SIZE_MAX / 2 ? realloc(b, cap * 2) : NULL;
			if (!nb) return free(b), -1;
			b = nb, cap *= 2;
		}
		const size_t r = fread(b + n, 1, cap - n, f);
		n += r;
		if (r == 0) break;
	}
	if (ferror(f)) return free(b), -1;
	*buf = b, *len = n;
	return 0;
}

int imatrix_load(cli_imatrix **out, const char *path, char *err, size_t errlen) {
	*out = NULL;
	cli_imatrix *im = calloc(1, sizeof *im);
	if (!im) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	FILE *f = fopen(path, "rb");
	uint8_t magic[4] = {0};
	if (!f) {
		free(im);
		return base_seterr(err, errlen, LANES_EIO, "%s: cannot open it", path);
	}
	const size_t got = fread(magic, 1, 4, f);
	int rc;
	if (got == 4 && !memcmp(magic, "GGUF", 4)) {
		fclose(f);
		rc = load_gguf(im, path, err, errlen);
	} else {
		uint8_t *buf = NULL;
		size_t len = 0;
		rc = read_rest(f, magic, got, &buf, &len) ? base_seterr(err, errlen, LANES_EIO, "%s: cannot read it", path) : 0;
		fclose(f);
		if (!rc) rc = load_dat(im, path, buf, len, err, errlen);
		free(buf);
	}
	if (rc) {
		imatrix_free(im);
		return rc;
	}
	*out = im;
	return 0;
}
