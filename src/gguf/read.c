// gguf: the reader. Maps the file and walks header, metadata and tensor infos with a
// cursor that checks every length against the bytes left before it is used.
#include "gguf/gguf.h"

#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "lanes reads GGUF on little-endian hosts");

#define GGUF_MAX_NEST 8          // nested array depth
#define GGUF_MAX_NAME 256        // tensor name bytes
#define GGUF_DEFAULT_ALIGN 32

#define TTYPE_ROW(T, N, B, S) [GGUF_T_##T] = {#T, B, S},
static const gguf_ttype_info ttypes[GGUF_T_COUNT] = {GGUF_TTYPES(TTYPE_ROW)};
#undef TTYPE_ROW

const gguf_ttype_info *gguf_ttype_get(uint32_t t) {
	return t < GGUF_T_COUNT && ttypes[t].name ? &ttypes[t] : NULL;
}

int gguf_ttype_by_name(const char *name) {
	for (int t = 0; t < GGUF_T_COUNT; t++)
		if (ttypes[t].name && !strcasecmp(ttypes[t].name, name)) return t;
	return -1;
}

static const uint8_t vsize[GGUF_VTYPE_COUNT] = {
	[GGUF_U8] = 1, [GGUF_I8] = 1, [GGUF_U16] = 2, [GGUF_I16] = 2, [GGUF_U32] = 4, [GGUF_I32] = 4,
	[GGUF_F32] = 4, [GGUF_BOOL] = 1, [GGUF_U64] = 8, [GGUF_I64] = 8, [GGUF_F64] = 8,
};

const char *gguf_vtype_name(uint32_t t) {
	static const char *names[GGUF_VTYPE_COUNT] = {
		"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
	};
	return t < GGUF_VTYPE_COUNT ? names[t] : "unknown";
}

struct gguf {
	const uint8_t *base;  // the mapping (or caller's bytes)
	uint64_t size;
	bool mapped;
	uint32_t version;
	uint32_t alignment;
	uint64_t data_off;
	int64_t n_kv;
	gguf_kv *kv;
	int64_t n_tensors;
	gguf_tensor *tensors;
};

typedef struct {
	const uint8_t *p;
	uint64_t off, size;
	const char *src;  // file name for messages
	char *err;
	size_t errlen;
} cursor;

static int fail(cursor *c, uint64_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(cursor *c, uint64_t off, const char *fmt, ...) {
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return base_seterr(c->err, c->errlen, LANES_EFORMAT, "%s: offset %llu: %s", c->src,
			    (unsigned long long)off, msg);
}

static uint64_t left(const cursor *c) { return c->size - c->off; }

static int take(cursor *c, void *dst, uint64_t n, const char *what) {
	if (left(c) < n)
		return fail(c, c->off, "truncated: %s needs %llu bytes, %llu left", what,
			    (unsigned long long)n, (unsigned long long)left(c));
	memcpy(dst, c->p + c->off, n);
	c->off += n;
	return 0;
}

static int take_u32(cursor *c, uint32_t *v, const char *what) { return take(c, v, 4, what); }
static int take_u64(cursor *c, uint64_t *v, const char *what) { return take(c, v, 8, what); }

static int take_str(cursor *c, gguf_str *s, const char *what) {
	uint64_t at = c->off, n = 0;
	int rc = take_u64(c, &n, what);
	if (rc) return rc;
	if (n > left(c))
		return fail(c, at, "%s length %llu exceeds the %llu bytes left", what,
			    (unsigned long long)n, (unsigned long long)left(c));
	s->ptr = (const char *)c->p + c->off;
	s->len = n;
	c->off += n;
	return 0;
}

static void free_value(gguf_value *v);

static int read_value(cursor *c, gguf_value *v, uint32_t type, int depth, const char *key);

static int read_array(cursor *c, gguf_value *v, int depth, const char *key) {
	uint64_t at = c->off;
	uint32_t et = 0;
	uint64_t n = 0;
	int rc;
	if ((rc = take_u32(c, &et, "array element type")) || (rc = take_u64(c, &n, "array length"))) return rc;
	if (et >= GGUF_VTYPE_COUNT) return fail(c, at, "key '%s': unknown array element type %u", key, et);
	if (depth >= GGUF_MAX_NEST) return fail(c, at, "key '%s': arrays nested deeper than %d", key, GGUF_MAX_NEST);
	v->arr.type = et;
	v->arr.n = n;
	// every element needs at least this many bytes, so n is bounded by the bytes left
	uint64_t min = et == GGUF_STRING ? 8 : et == GGUF_ARRAY ? 12 : vsize[et];
	uint64_t need;
	if (!ck_mul(n, min, &need) || need > left(c))
		return fail(c, at, "key '%s': array of %llu %s elements exceeds the %llu bytes left", key,
			    (unsigned long long)n, gguf_vtype_name(et), (unsigned long long)left(c));
	if (et == GGUF_STRING) {
		v->arr.strs = n ? calloc(n, sizeof *v->arr.strs) : NULL;
		if (n && !v->arr.strs) return base_seterr(c->err, c->errlen, LANES_ENOMEM, "%s: out of memory", c->src);
		for (uint64_t i = 0; i < n; i++)
			if ((rc = take_str(c, &v->arr.strs[i], "array string"))) return rc;
	} else if (et == GGUF_ARRAY) {
		v->arr.vals = n ? calloc(n, sizeof *v->arr.vals) : NULL;
		if (n && !v->arr.vals) return base_seterr(c->err, c->errlen, LANES_ENOMEM, "%s: out of memory", c->src);
		for (uint64_t i = 0; i < n; i++) {
			v->arr.vals[i].type = GGUF_ARRAY;
			if ((rc = read_array(c, &v->arr.vals[i], depth + 1, key))) return rc;
		}
	} else {
		v->arr.raw = c->p + c->off;
		if (et == GGUF_BOOL)
			for (uint64_t i = 0; i < n; i++)
				if (c->p[c->off + i] > 1)
					return fail(c, c->off + i, "key '%s': bool array element is %u", key, c->p[c->off + i]);
		c->off += need;
	}
	return 0;
}

static int read_value(cursor *c, gguf_value *v, uint32_t type, int depth, const char *key) {
	uint64_t at = c->off;
	if (type >= GGUF_VTYPE_COUNT) return fail(c, at, "key '%s': unknown value type %u", key, type);
	v->type = type;
	if (type == GGUF_STRING) return take_str(c, &v->s, "string value");
	if (type == GGUF_ARRAY) return read_array(c, v, depth, key);
	uint8_t b[8] = {0};
	int rc = take(c, b, vsize[type], "value");
	if (rc) return rc;
	switch (type) {
	case GGUF_U8: v->u = b[0]; break;
	case GGUF_I8: v->i = (int8_t)b[0]; break;
	case GGUF_U16: { uint16_t x; memcpy(&x, b, 2); v->u = x; break; }
	case GGUF_I16: { int16_t x; memcpy(&x, b, 2); v->i = x; break; }
	case GGUF_U32: { uint32_t x; memcpy(&x, b, 4); v->u = x; break; }
	case GGUF_I32: { int32_t x; memcpy(&x, b, 4); v->i = x; break; }
	case GGUF_U64: memcpy(&v->u, b, 8); break;
	case GGUF_I64: memcpy(&v->i, b, 8); break;
	case GGUF_F32: { float x; memcpy(&x, b, 4); v->f = x; break; }
	case GGUF_F64: memcpy(&v->f, b, 8); break;
	case GGUF_BOOL:
		if (b[0] > 1) return fail(c, at, "key '%s': bool value is %u", key, b[0]);
		v->u = b[0];
		break;
	}
	return 0;
}

static void free_value(gguf_value *v) {
	if (v->type != GGUF_ARRAY) return;
	if (v->arr.vals)
		for (uint64_t i = 0; i < v->arr.n; i++) free_value(&v->arr.vals[i]);
	free(v->arr.vals);
	free(v->arr.strs);
	v->arr.vals = NULL;
	v->arr.strs = NULL;
}

void gguf_free(gguf *g) {
	if (!g) return;
	for (int64_t i = 0; i < g->n_kv; i++) free_value(&g->kv[i].val);
	free(g->kv);
	for (int64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
	free(g->tensors);
	if (g->mapped) munmap((void *)g->base, g->size);
	free(g);
}

static bool str_eq(gguf_str a, gguf_str b) { return a.len == b.len && !memcmp(a.ptr, b.ptr, a.len); }

bool gguf_str_eq(gguf_str s, const char *c) {
	size_t n = strlen(c);
	return s.len == n && !memcmp(s.ptr, c, n);
}

char *gguf_str_dup(gguf_str s) {
	if (s.len >= SIZE_MAX) return NULL;
	char *d = malloc((size_t)s.len + 1);
	if (!d) return NULL;
	memcpy(d, s.ptr, (size_t)s.len);
	d[s.len] = 0;
	return d;
}

static int parse(gguf *g, cursor *c) {
	int rc;
	char magic[4];
	if ((rc = take(c, magic, 4, "magic"))) return rc;
	if (memcmp(magic, "GGUF", 4)) return fail(c, 0, "not a GGUF file (bad magic)");
	if ((rc = take_u32(c, &g->version, "version"))) return rc;
	if (g->version == 1) return fail(c, 4, "GGUF version 1 is not supported (only 2 and 3)");
	if ((g->version & 0xffff) == 0 && g->version) return fail(c, 4, "big-endian GGUF is not supported");
	if (g->version != 2 && g->version != 3) return fail(c, 4, "unsupported GGUF version %u", g->version);
	uint64_t nt = 0, nkv = 0;
	if ((rc = take_u64(c, &nt, "tensor count")) || (rc = take_u64(c, &nkv, "metadata count"))) return rc;
	// each metadata entry takes at least 13 bytes and each tensor info at least 24
	if (nkv > left(c) / 13) return fail(c, 16, "metadata count %llu exceeds what %llu bytes can hold", (unsigned long long)nkv, (unsigned long long)left(c));
	if (nt > left(c) / 24) return fail(c, 8, "tensor count %llu exceeds what %llu bytes can hold", (unsigned long long)nt, (unsigned long long)left(c));

	g->kv = nkv ? calloc(nkv, sizeof *g->kv) : NULL;
	if (nkv && !g->kv) return base_seterr(c->err, c->errlen, LANES_ENOMEM, "%s: out of memory", c->src);
	g->alignment = GGUF_DEFAULT_ALIGN;
	for (uint64_t i = 0; i < nkv; i++) {
		gguf_kv *kv = &g->kv[i];
		uint64_t at = c->off;
		if ((rc = take_str(c, &kv->key, "key"))) return rc;
		g->n_kv = (int64_t)i + 1;
		char key[96];
		snprintf(key, sizeof key, "%.*s", (int)(kv->key.len < 80 ? kv->key.len : 80), kv->key.ptr);
		if (kv->key.len == 0) return fail(c, at, "empty metadata key");
		for (uint64_t j = 0; j < i; j++)
			if (str_eq(g->kv[j].key, kv->key)) return fail(c, at, "duplicate metadata key '%s'", key);
		uint32_t type = 0;
		uint64_t tat = c->off;
		if ((rc = take_u32(c, &type, "value type"))) return rc;
		if (type >= GGUF_VTYPE_COUNT) return fail(c, tat, "key '%s': unknown value type %u", key, type);
		if ((rc = read_value(c, &kv->val, type, 0, key))) return rc;
		if (gguf_str_eq(kv->key, "general.alignment")) {
			if (type != GGUF_U32) return fail(c, tat, "general.alignment must be u32, is %s", gguf_vtype_name(type));
			uint64_t a = kv->val.u;
			if (a == 0 || (a & (a - 1)) || a > (1u << 20))
				return fail(c, tat, "general.alignment %llu is not a power of two up to 1 MiB", (unsigned long long)a);
			g->alignment = (uint32_t)a;
		}
	}

	g->tensors = nt ? calloc(nt, sizeof *g->tensors) : NULL;
	if (nt && !g->tensors) return base_seterr(c->err, c->errlen, LANES_ENOMEM, "%s: out of memory", c->src);
	for (uint64_t i = 0; i < nt; i++) {
		gguf_tensor *t = &g->tensors[i];
		uint64_t at = c->off;
		gguf_str name;
		if ((rc = take_str(c, &name, "tensor name"))) return rc;
		if (name.len == 0 || name.len > GGUF_MAX_NAME)
			return fail(c, at, "tensor %llu: name length %llu not in 1..%d", (unsigned long long)i, (unsigned long long)name.len, GGUF_MAX_NAME);
		if (memchr(name.ptr, 0, name.len)) return fail(c, at, "tensor %llu: name contains a NUL byte", (unsigned long long)i);
		if (!(t->name = gguf_str_dup(name))) return base_seterr(c->err, c->errlen, LANES_ENOMEM, "%s: out of memory", c->src);
		g->n_tensors = (int64_t)i + 1;
		for (uint64_t j = 0; j < i; j++)
			if (!strcmp(g->tensors[j].name, t->name)) return fail(c, at, "duplicate tensor name '%s'", t->name);
		uint64_t dat = c->off;
		if ((rc = take_u32(c, &t->n_dims, "tensor dims"))) return rc;
		if (t->n_dims > GGUF_MAX_DIMS) return fail(c, dat, "tensor '%s': %u dimensions (at most %d)", t->name, t->n_dims, GGUF_MAX_DIMS);
		uint64_t nel = 1;
		for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
		for (uint32_t d = 0; d < t->n_dims; d++) {
			uint64_t ne = 0, nat = c->off;
			if ((rc = take_u64(c, &ne, "tensor dim"))) return rc;
			if (ne > (uint64_t)INT64_MAX) return fail(c, nat, "tensor '%s': dimension %u is negative", t->name, d);
			if (!ck_mul(nel, ne, &nel) || nel > (uint64_t)INT64_MAX)
				return fail(c, nat, "tensor '%s': element count overflows", t->name);
			t->ne[d] = (int64_t)ne;
		}
		uint64_t tyat = c->off;
		if ((rc = take_u32(c, &t->type, "tensor type"))) return rc;
		const gguf_ttype_info *ti = gguf_ttype_get(t->type);
		if (!ti) return fail(c, tyat, "tensor '%s': unknown tensor type %u", t->name, t->type);
		if (t->ne[0] % ti->block)
			return fail(c, dat, "tensor '%s': row of %lld elements is not a multiple of %s's block of %u",
				    t->name, (long long)t->ne[0], ti->name, ti->block);
		if (!ck_mul(nel / ti->block, ti->bytes, &t->nbytes))
			return fail(c, dat, "tensor '%s': byte size overflows", t->name);
		uint64_t oat = c->off;
		if ((rc = take_u64(c, &t->offset, "tensor offset"))) return rc;
		if (t->offset % g->alignment)
			return fail(c, oat, "tensor '%s': offset %llu is not a multiple of the alignment %u", t->name,
				    (unsigned long long)t->offset, g->alignment);
	}

	uint64_t data = c->off + (g->alignment - c->off % g->alignment) % g->alignment;
	if (data > c->size && nt) return fail(c, c->off, "truncated: tensor data section missing");
	g->data_off = data;
	uint64_t avail = c->size > data ? c->size - data : 0;
	for (int64_t i = 0; i < g->n_tensors; i++) {
		gguf_tensor *t = &g->tensors[i];
		uint64_t end;
		if (!ck_add(t->offset, t->nbytes, &end) || end > avail)
			return fail(c, data + (t->offset < avail ? t->offset : avail),
				    "tensor '%s': %llu bytes at data offset %llu run past the end of the file (%llu bytes of data)",
				    t->name, (unsigned long long)t->nbytes, (unsigned long long)t->offset, (unsigned long long)avail);
		t->data = g->base + data + t->offset;
	}
	return 0;
}

static int open_bytes(gguf **out, const void *data, size_t size, bool mapped, const char *src, char *err, size_t errlen) {
	*out = NULL;
	gguf *g = calloc(1, sizeof *g);
	if (!g) {
		if (mapped) munmap((void *)data, size);
		return base_seterr(err, errlen, LANES_ENOMEM, "%s: out of memory", src);
	}
	g->base = data;
	g->size = size;
	g->mapped = mapped;
	cursor c = {.p = data, .off = 0, .size = size, .src = src, .err = err, .errlen = errlen};
	int rc = parse(g, &c);
	if (rc) {
		gguf_free(g);
		return rc;
	}
	*out = g;
	return LANES_OK;
}

int gguf_open_mem(gguf **out, const void *data, size_t size, char *err, size_t errlen) {
	return open_bytes(out, data, size, false, "<memory>", err, errlen);
}

int gguf_open_fd(gguf **out, int fd, const char *path, char *err, size_t errlen) {
	*out = NULL;
	struct stat st;
	if (fstat(fd, &st)) return base_seterr(err, errlen, LANES_EIO, "%s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode)) return base_seterr(err, errlen, LANES_EIO, "%s: not a regular file", path);
	if (st.st_size < 24)
		return base_seterr(err, errlen, LANES_EFORMAT, "%s: offset 0: truncated: %lld bytes is too short for a GGUF header",
				    path, (long long)st.st_size);
	void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (m == MAP_FAILED) return base_seterr(err, errlen, LANES_EIO, "%s: mmap: %s", path, strerror(errno));
	return open_bytes(out, m, (size_t)st.st_size, true, path, err, errlen);
}

int gguf_open(gguf **out, const char *path, char *err, size_t errlen) {
	*out = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) return base_seterr(err, errlen, LANES_EIO, "%s: %s", path, strerror(errno));
	const int rc = gguf_open_fd(out, fd, path, err, errlen);
	close(fd);
	return rc;
}

uint32_t gguf_version(const gguf *g) { return g->version; }
uint32_t gguf_alignment(const gguf *g) { return g->alignment; }
uint64_t gguf_data_offset(const gguf *g) { return g->data_off; }
uint64_t gguf_file_size(const gguf *g) { return g->size; }
int64_t gguf_n_kv(const gguf *g) { return g->n_kv; }
const gguf_kv *gguf_kv_at(const gguf *g, int64_t i) { return i >= 0 && i < g->n_kv ? &g->kv[i] : NULL; }
int64_t gguf_n_tensors(const gguf *g) { return g->n_tensors; }
const gguf_tensor *gguf_tensor_at(const gguf *g, int64_t i) { return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL; }

const gguf_value *gguf_get(const gguf *g, const char *key) {
	for (int64_t i = 0; i < g->n_kv; i++)
		if (gguf_str_eq(g->kv[i].key, key)) return &g->kv[i].val;
	return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf *g, const char *name) {
	for (int64_t i = 0; i < g->n_tensors; i++)
		if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
	return NULL;
}

int64_t gguf_tensor_nelem(const gguf_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }

bool gguf_value_i64(const gguf_value *v, int64_t *out) {
	switch (v->type) {
	case GGUF_U8: case GGUF_U16: case GGUF_U32: case GGUF_BOOL: *out = (int64_t)v->u; return true;
	case GGUF_U64: if (v->u > (uint64_t)INT64_MAX) return false; *out = (int64_t)v->u; return true;
	case GGUF_I8: case GGUF_I16: case GGUF_I32: case GGUF_I64: *out = v->i; return true;
	default: return false;
	}
}

bool gguf_value_f64(const gguf_value *v, double *out) {
	if (v->type == GGUF_F32 || v->type == GGUF_F64) { *out = v->f; return true; }
	int64_t i;
	if (!gguf_value_i64(v, &i)) return false;
	*out = (double)i;
	return true;
}

int gguf_get_i64(const gguf *g, const char *key, int64_t *out) {
	const gguf_value *v = gguf_get(g, key);
	if (!v) return LANES_ENOTFOUND;
	if (v->type == GGUF_BOOL || !gguf_value_i64(v, out)) return LANES_EFORMAT;
	return 0;
}

int gguf_get_u32(const gguf *g, const char *key, uint32_t *out) {
	int64_t v;
	int rc = gguf_get_i64(g, key, &v);
	if (rc) return rc;
	if (v < 0 || v > UINT32_MAX) return LANES_EFORMAT;
	*out = (uint32_t)v;
	return 0;
}

int gguf_get_f32(const gguf *g, const char *key, float *out) {
	const gguf_value *v = gguf_get(g, key);
	double d;
	if (!v) return LANES_ENOTFOUND;
	if (v->type == GGUF_BOOL || !gguf_value_f64(v, &d)) return LANES_EFORMAT;
	*out = (float)d;
	return 0;
}

int gguf_get_bool(const gguf *g, const char *key, bool *out) {
	const gguf_value *v = gguf_get(g, key);
	if (!v) return LANES_ENOTFOUND;
	if (v->type != GGUF_BOOL) return LANES_EFORMAT;
	*out = v->u != 0;
	return 0;
}

int gguf_get_str(const gguf *g, const char *key, gguf_str *out) {
	const gguf_value *v = gguf_get(g, key);
	if (!v) return LANES_ENOTFOUND;
	if (v->type != GGUF_STRING) return LANES_EFORMAT;
	*out = v->s;
	return 0;
}

const gguf_value *gguf_get_arr(const gguf *g, const char *key) {
	const gguf_value *v = gguf_get(g, key);
	return v && v->type == GGUF_ARRAY ? v : NULL;
}

int64_t gguf_arr_i64(const gguf_value *a, uint64_t i) {
	const uint8_t *p = (const uint8_t *)a->arr.raw + i * vsize[a->arr.type];
	switch (a->arr.type) {
	case GGUF_U8: case GGUF_BOOL: return p[0];
	case GGUF_I8: return (int8_t)p[0];
	case GGUF_U16: { uint16_t x; memcpy(&x, p, 2); return x; }
	case GGUF_I16: { int16_t x; memcpy(&x, p, 2); return x; }
	case GGUF_U32: { uint32_t x; memcpy(&x, p, 4); return x; }
	case GGUF_I32: { int32_t x; memcpy(&x, p, 4); return x; }
	case GGUF_U64: { uint64_t x; memcpy(&x, p, 8); return (int64_t)x; }
	case GGUF_I64: { int64_t x; memcpy(&x, p, 8); return x; }
	case GGUF_F32: { float x; memcpy(&x, p, 4); return (int64_t)x; }
	case GGUF_F64: { double x; memcpy(&x, p, 8); return (int64_t)x; }
	default: return 0;
	}
}

double gguf_arr_f64(const gguf_value *a, uint64_t i) {
	const uint8_t *p = (const uint8_t *)a->arr.raw + i * vsize[a->arr.type];
	if (a->arr.type == GGUF_F32) { float x; memcpy(&x, p, 4); return x; }
	if (a->arr.type == GGUF_F64) { double x; memcpy(&x, p, 8); return x; }
	return (double)gguf_arr_i64(a, i);
}

gguf_str gguf_arr_str(const gguf_value *a, uint64_t i) {
	if (a->arr.type != GGUF_STRING || i >= a->arr.n) return (gguf_str){"", 0};
	return a->arr.strs[i];
}

size_t gguf_vtype_size(uint32_t t) { return t < GGUF_VTYPE_COUNT ? vsize[t] : 0; }
