// gguf: the writer. Holds deep copies of metadata and tensor bytes, then writes a
// version-3 file whose tensors sit at aligned offsets; the reader gets back what went in.
#include "gguf/gguf.h"

#include "base/base.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
	char *key;
	gguf_value val; // owns its strings and arrays
} wkv;

typedef struct {
	char *name;
	uint32_t type, n_dims;
	int64_t ne[GGUF_MAX_DIMS];
	void *data;
	const void *borrowed; // the caller's data, read at the write (data NULL)
	uint64_t nbytes;
} wtensor;

struct gguf_writer {
	wkv *kv;
	size_t n_kv, cap_kv;
	wtensor *t;
	size_t n_t, cap_t;
};

gguf_writer *gguf_writer_new(void) { return calloc(1, sizeof(gguf_writer)); }

static void drop_value(gguf_value *v) {
	if (v->type == GGUF_STRING) free((void *)v->s.ptr);
	if (v->type != GGUF_ARRAY) return;
	if (v->arr.strs)
		for (uint64_t i = 0; i < v->arr.n; i++) free((void *)v->arr.strs[i].ptr);
	if (v->arr.vals)
		for (uint64_t i = 0; i < v->arr.n; i++) drop_value(&v->arr.vals[i]);
	free(v->arr.strs);
	free(v->arr.vals);
	free((void *)v->arr.raw);
}

void gguf_writer_free(gguf_writer *w) {
	if (!w) return;
	for (size_t i = 0; i < w->n_kv; i++) {
		free(w->kv[i].key);
		drop_value(&w->kv[i].val);
	}
	for (size_t i = 0; i < w->n_t; i++) {
		free(w->t[i].name);
		free(w->t[i].data);
	}
	free(w->kv);
	free(w->t);
	free(w);
}

static int copy_str(gguf_str *dst, gguf_str src) {
	char *p = malloc(src.len + 1);
	if (!p) return LANES_ENOMEM;
	memcpy(p, src.ptr, src.len);
	p[src.len] = 0;
	dst->ptr = p;
	dst->len = src.len;
	return 0;
}

static int copy_value(gguf_value *dst, const gguf_value *src) {
	memset(dst, 0, sizeof *dst);
	dst->type = src->type;
	if (src->type == GGUF_STRING) return copy_str(&dst->s, src->s);
	if (src->type != GGUF_ARRAY) {
		*dst = *src;
		return 0;
	}
	uint64_t n = src->arr.n;
	dst->arr.type = src->arr.type;
	dst->arr.n = n;
	if (src->arr.type == GGUF_STRING) {
		if (n && !(dst->arr.strs = calloc(n, sizeof *dst->arr.strs))) return LANES_ENOMEM;
		for (uint64_t i = 0; i < n; i++)
			if (copy_str(&dst->arr.strs[i], src->arr.strs[i])) return LANES_ENOMEM;
	} else if (src->arr.type == GGUF_ARRAY) {
		if (n && !(dst->arr.vals = calloc(n, sizeof *dst->arr.vals))) return LANES_ENOMEM;
		for (uint64_t i = 0; i < n; i++)
			if (copy_value(&dst->arr.vals[i], &src->arr.vals[i])) return LANES_ENOMEM;
	} else {
		size_t sz = gguf_vtype_size(src->arr.type);
		if (!sz) return LANES_EINVAL;
		uint64_t bytes;
		if (!ck_mul(n, sz, &bytes)) return LANES_ERANGE;
		void *raw = malloc(bytes ? bytes : 1);
		if (!raw) return LANES_ENOMEM;
		if (bytes) memcpy(raw, src->arr.raw, bytes);
		dst->arr.raw = raw;
	}
	return 0;
}

int gguf_writer_set(gguf_writer *w, const char *key, const gguf_value *v) {
	if (!key || !*key || v->type >= GGUF_VTYPE_COUNT) return LANES_EINVAL;
	gguf_value nv;
	int rc = copy_value(&nv, v);
	if (rc) {
		drop_value(&nv);
		return rc;
	}
	for (size_t i = 0; i < w->n_kv; i++)
		if (!strcmp(w->kv[i].key, key)) {
			drop_value(&w->kv[i].val);
			w->kv[i].val = nv;
			return 0;
		}
	if (w->n_kv == w->cap_kv) {
		size_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
		wkv *k = realloc(w->kv, cap * sizeof *k);
		if (!k) { drop_value(&nv); return LANES_ENOMEM; }
		w->kv = k;
		w->cap_kv = cap;
	}
	char *kc = strdup(key);
	if (!kc) { drop_value(&nv); return LANES_ENOMEM; }
	w->kv[w->n_kv++] = (wkv){kc, nv};
	return 0;
}

int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) {
	return gguf_writer_set(w, key, &(gguf_value){.type = GGUF_U32, .u = v});
}
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) {
	return gguf_writer_set(w, key, &(gguf_value){.type = GGUF_I32, .i = v});
}
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v) {
	return gguf_writer_set(w, key, &(gguf_value){.type = GGUF_F32, .f = v});
}
int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
	return gguf_writer_set(w, key, &(gguf_value){.type = GGUF_BOOL, .u = v});
}
int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v) {
	return gguf_writer_set(w, key, &(gguf_value){.type = GGUF_STRING, .s = {v, strlen(v)}});
}
int gguf_writer_set_arr(gguf_writer *w, const char *key, enum gguf_vtype t, const void *raw, uint64_t n) {
	if (!gguf_vtype_size(t)) return LANES_EINVAL;
	gguf_value v = {.type = GGUF_ARRAY};
	v.arr.type = t;
	v.arr.n = n;
	v.arr.raw = raw;
	return gguf_writer_set(w, key, &v);
}
int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
	gguf_str *s = n ? calloc(n, sizeof *s) : NULL;
	if (n && !s) return LANES_ENOMEM;
	for (uint64_t i = 0; i < n; i++) s[i] = (gguf_str){strs[i], strlen(strs[i])};
	gguf_value v = {.type = GGUF_ARRAY};
	v.arr.type = GGUF_STRING;
	v.arr.n = n;
	v.arr.strs = s;
	int rc = gguf_writer_set(w, key, &v);
	free(s);
	return rc;
}

int gguf_writer_remove(gguf_writer *w, const char *key) {
	for (size_t i = 0; i < w->n_kv; i++)
		if (!strcmp(w->kv[i].key, key)) {
			free(w->kv[i].key);
			drop_value(&w->kv[i].val);
			memmove(&w->kv[i], &w->kv[i + 1], (w->n_kv - i - 1) * sizeof *w->kv);
			w->n_kv--;
			return 0;
		}
	return LANES_ENOTFOUND;
}

int gguf_writer_copy_kv(gguf_writer *w, const gguf *g, const char *skip_prefix) {
	size_t sp = skip_prefix ? strlen(skip_prefix) : 0;
	for (int64_t i = 0; i < gguf_n_kv(g); i++) {
		const gguf_kv *kv = gguf_kv_at(g, i);
		if (sp && kv->key.len >= sp && !memcmp(kv->key.ptr, skip_prefix, sp)) continue;
		char *key = gguf_str_dup(kv->key);
		if (!key) return LANES_ENOMEM;
		int rc = gguf_writer_set(w, key, &kv->val);
		free(key);
		if (rc) return rc;
	}
	return 0;
}

static int add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne, const void *data,
		      uint64_t nbytes, bool borrow) {
	const gguf_ttype_info *ti = gguf_ttype_get(type);
	if (!ti || !name || !*name || n_dims > GGUF_MAX_DIMS) return LANES_EINVAL;
	uint64_t nel = 1;
	for (uint32_t d = 0; d < n_dims; d++) {
		if (ne[d] < 0 || !ck_mul(nel, (uint64_t)ne[d], &nel)) return LANES_ERANGE;
	}
	if (n_dims && ne[0] % ti->block) return LANES_EINVAL;
	uint64_t want;
	if (!ck_mul(nel / ti->block, ti->bytes, &want) || want != nbytes) return LANES_EINVAL;
	for (size_t i = 0; i < w->n_t; i++)
		if (!strcmp(w->t[i].name, name)) return LANES_EINVAL;
	if (w->n_t == w->cap_t) {
		size_t cap = w->cap_t ? 2 * w->cap_t : 64;
		wtensor *t = realloc(w->t, cap * sizeof *t);
		if (!t) return LANES_ENOMEM;
		w->t = t;
		w->cap_t = cap;
	}
	wtensor t = {.type = type, .n_dims = n_dims, .nbytes = nbytes};
	for (int d = 0; d < GGUF_MAX_DIMS; d++) t.ne[d] = d < (int)n_dims ? ne[d] : 1;
	t.name = strdup(name);
	if (borrow) t.borrowed = data;
	else t.data = malloc(nbytes ? nbytes : 1);
	if (!t.name || (!borrow && !t.data)) {
		free(t.name);
		free(t.data);
		return LANES_ENOMEM;
	}
	if (nbytes && !borrow) memcpy(t.data, data, nbytes);
	w->t[w->n_t++] = t;
	return 0;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne, const void *data,
			   uint64_t nbytes) {
	return add_tensor(w, name, type, n_dims, ne, data, nbytes, false);
}

int gguf_writer_add_tensor_ref(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne, const void *data,
			       uint64_t nbytes) {
	return add_tensor(w, name, type, n_dims, ne, data, nbytes, true);
}

typedef struct {
	FILE *f;
	uint64_t pos;
	bool bad;
} out;

static void put(out *o, const void *p, size_t n) {
	if (!o->bad && n && fwrite(p, 1, n, o->f) != n) o->bad = true;
	o->pos += n;
}
static void put_u32(out *o, uint32_t v) { put(o, &v, 4); }
static void put_u64(out *o, uint64_t v) { put(o, &v, 8); }
static void put_str(out *o, gguf_str s) { put_u64(o, s.len); put(o, s.ptr, s.len); }

static void put_value(out *o, const gguf_value *v, bool with_type) {
	if (with_type) put_u32(o, v->type);
	uint8_t b[8];
	switch (v->type) {
	case GGUF_U8: case GGUF_BOOL: b[0] = (uint8_t)v->u; put(o, b, 1); break;
	case GGUF_I8: b[0] = (uint8_t)(int8_t)v->i; put(o, b, 1); break;
	case GGUF_U16: { uint16_t x = (uint16_t)v->u; put(o, &x, 2); break; }
	case GGUF_I16: { int16_t x = (int16_t)v->i; put(o, &x, 2); break; }
	case GGUF_U32: put_u32(o, (uint32_t)v->u); break;
	case GGUF_I32: { int32_t x = (int32_t)v->i; put(o, &x, 4); break; }
	case GGUF_U64: put_u64(o, v->u); break;
	case GGUF_I64: put(o, &v->i, 8); break;
	case GGUF_F32: { float x = (float)v->f; put(o, &x, 4); break; }
	case GGUF_F64: put(o, &v->f, 8); break;
	case GGUF_STRING: put_str(o, v->s); break;
	case GGUF_ARRAY:
		put_u32(o, v->arr.type);
		put_u64(o, v->arr.n);
		if (v->arr.type == GGUF_STRING)
			for (uint64_t i = 0; i < v->arr.n; i++) put_str(o, v->arr.strs[i]);
		else if (v->arr.type == GGUF_ARRAY)
			for (uint64_t i = 0; i < v->arr.n; i++) put_value(o, &v->arr.vals[i], false);
		else
			put(o, v->arr.raw, v->arr.n * gguf_vtype_size(v->arr.type));
		break;
	default: o->bad = true;
	}
}

static void pad_to(out *o, uint32_t align) {
	static const uint8_t zeros[64];
	uint64_t n = (align - o->pos % align) % align;
	while (n) {
		size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
		put(o, zeros, k);
		n -= k;
	}
}

// Writes the file into w's temporary and commits it.
static int write_into(gguf_writer *gw, base_wfile *w, char *err, size_t errlen) {
	const char *path = w->shown;
	uint32_t align = 32;
	for (size_t i = 0; i < gw->n_kv; i++)
		if (!strcmp(gw->kv[i].key, "general.alignment") && gw->kv[i].val.type == GGUF_U32) {
			uint64_t a = gw->kv[i].val.u;
			if (a == 0 || (a & (a - 1)) || a > (1u << 20)) {
				base_wfile_abort(w);
				return base_seterr(err, errlen, LANES_EINVAL, "%s: general.alignment %llu is not a power of two", path, (unsigned long long)a);
			}
			align = (uint32_t)a;
		}
	const int fd = dup(w->fd);
	FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
	if (!f) {
		const int e = errno;
		if (fd >= 0) close(fd);
		base_wfile_abort(w);
		return base_seterr(err, errlen, LANES_EIO, "%s: %s", path, strerror(e));
	}
	out o = {.f = f};
	put(&o, "GGUF", 4);
	put_u32(&o, 3);
	put_u64(&o, gw->n_t);
	put_u64(&o, gw->n_kv);
	for (size_t i = 0; i < gw->n_kv; i++) {
		put_str(&o, (gguf_str){gw->kv[i].key, strlen(gw->kv[i].key)});
		put_value(&o, &gw->kv[i].val, true);
	}
	uint64_t off = 0;
	for (size_t i = 0; i < gw->n_t; i++) {
		const wtensor *t = &gw->t[i];
		put_str(&o, (gguf_str){t->name, strlen(t->name)});
		put_u32(&o, t->n_dims);
		for (uint32_t d = 0; d < t->n_dims; d++) put_u64(&o, (uint64_t)t->ne[d]);
		put_u32(&o, t->type);
		put_u64(&o, off);
		off += t->nbytes;
		off += (align - off % align) % align;
	}
	pad_to(&o, align);
	for (size_t i = 0; i < gw->n_t; i++) {
		put(&o, gw->t[i].data ? gw->t[i].data : gw->t[i].borrowed, gw->t[i].nbytes);
		pad_to(&o, align);
	}
	bool bad = o.bad;
	if (fclose(f)) bad = true;
	if (bad) {
		const int e = errno;
		base_wfile_abort(w);
		return base_seterr(err, errlen, LANES_EIO, "%s: write failed: %s", path, strerror(e));
	}
	return base_wfile_commit(w, err, errlen);
}

int gguf_writer_write(gguf_writer *gw, const char *path, char *err, size_t errlen) {
	base_wfile w;
	int rc = base_wfile_begin(&w, -1, path, err, errlen);
	return rc ? rc : write_into(gw, &w, err, errlen);
}

int gguf_writer_write_at(gguf_writer *gw, int dfd, const char *name, char *err, size_t errlen) {
	base_wfile w;
	int rc = base_wfile_begin(&w, dfd, name, err, errlen);
	return rc ? rc : write_into(gw, &w, err, errlen);
}
