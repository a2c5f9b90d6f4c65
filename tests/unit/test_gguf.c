// tests: the GGUF reader and writer — every shared file opens, `lanes info --json` names
// the architecture and every tensor, the writer round-trips, hostile files fail clearly.
#include "base/base.h"
#include "gguf/gguf.h"
#include "t.h"

#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <unistd.h>

static const struct {
	const char *file, *arch;
} known[] = {
	{"models/stories260K.gguf", "llama"},          {"models/ref-llama-F32.gguf", "llama"},
	{"models/ref-llama-Q4_K_M.gguf", "llama"},     {"models/ref-qwen2-F16.gguf", "qwen2"},
	{"models/ref-qwen2-Q8_0.gguf", "qwen2"},       {"models/ref-moe-Q8_0.gguf", "llama"},
	{"models/ref-tied-Q8_0.gguf", "llama"},        {"models/ref-spm-Q4_0.gguf", "llama"},
	{"vocab/ggml-vocab-gpt-2.gguf", "gpt2"},       {"vocab/ggml-vocab-falcon.gguf", "falcon"},
	{"vocab/ggml-vocab-qwen2.gguf", "qwen2"},      {"vocab/ggml-vocab-phi-3.gguf", "phi3"},
	{"vocab/ggml-vocab-mpt.gguf", "mpt"},          {"vocab/ggml-vocab-starcoder.gguf", "starcoder2"},
	{"vocab/ggml-vocab-refact.gguf", "refact"},    {"vocab/ggml-vocab-llama-spm.gguf", "llama"},
};

// The tensor names a llama-family file must hold, from its own hyper-parameters.
static int expected_tensors(const gguf *g, char names[][64], int cap) {
	gguf_str arch;
	if (gguf_get_str(g, "general.architecture", &arch)) return -1;
	char key[128];
	int64_t nl = 0, ne = 0;
	snprintf(key, sizeof key, "%.*s.block_count", (int)arch.len, arch.ptr);
	if (gguf_get_i64(g, key, &nl)) return 0;
	snprintf(key, sizeof key, "%.*s.expert_count", (int)arch.len, arch.ptr);
	gguf_get_i64(g, key, &ne);
	bool qwen2 = gguf_str_eq(arch, "qwen2");
	int n = 0;
#define ADD(...) do { if (n < cap) snprintf(names[n++], 64, __VA_ARGS__); } while (0)
	ADD("token_embd.weight");
	ADD("output_norm.weight");
	if (gguf_find_tensor(g, "output.weight")) ADD("output.weight");
	for (int64_t i = 0; i < nl; i++) {
		const char *per[] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm"};
		for (int k = 0; k < 6; k++) ADD("blk.%lld.%s.weight", (long long)i, per[k]);
		if (qwen2) {
			ADD("blk.%lld.attn_q.bias", (long long)i);
			ADD("blk.%lld.attn_k.bias", (long long)i);
			ADD("blk.%lld.attn_v.bias", (long long)i);
		}
		const char *ffn[] = {"ffn_gate", "ffn_up", "ffn_down"};
		for (int k = 0; k < 3; k++) ADD(ne ? "blk.%lld.%s_exps.weight" : "blk.%lld.%s.weight", (long long)i, ffn[k]);
		if (ne) ADD("blk.%lld.ffn_gate_inp.weight", (long long)i);
	}
#undef ADD
	return n;
}

static json_t *run_info_json(const char *path) {
	const char *bin = getenv("LANES_BIN");
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "%s info --json '%s'", bin ? bin : "build/lanes", path);
	FILE *p = popen(cmd, "r");
	if (!p) return NULL;
	json_error_t e;
	json_t *j = json_loadf(p, 0, &e);
	if (pclose(p) != 0) { json_decref(j); return NULL; }
	return j;
}

static void check_file(const char *dir, const char *name) {
	char path[1024], err[512];
	snprintf(path, sizeof path, "%s/%s/%s", t_shared(), dir, name);
	gguf *g = NULL;
	int rc = gguf_open(&g, path, err, sizeof err);
	CHECKF(rc == 0, "%s: %s", path, err);
	if (rc) return;
	// the tensors tile the data section: nothing overlaps, nothing runs past the end
	uint64_t end = 0;
	for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
		const gguf_tensor *t = gguf_tensor_at(g, i);
		uint64_t e = t->offset + t->nbytes;
		if (e > end) end = e;
	}
	if (gguf_n_tensors(g)) {
		CHECKF(gguf_data_offset(g) + end <= gguf_file_size(g), "%s: data fits the file", name);
		CHECKF(gguf_file_size(g) - (gguf_data_offset(g) + end) < gguf_alignment(g), "%s: no unexplained bytes at the end", name);
	}

	json_t *j = run_info_json(path);
	CHECKF(j != NULL, "%s: lanes info --json runs and prints JSON", name);
	if (!j) { gguf_free(g); return; }
	char rel[256];
	snprintf(rel, sizeof rel, "%s/%s", dir, name);
	for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
		if (!strcmp(rel, known[k].file))
			CHECKF(!strcmp(json_string_value(json_object_get(j, "architecture")), known[k].arch),
			       "%s: architecture %s", name, known[k].arch);
	CHECK(json_integer_value(json_object_get(j, "version")) == gguf_version(g));
	json_t *tensors = json_object_get(j, "tensors");
	CHECKF((int64_t)json_array_size(tensors) == gguf_n_tensors(g), "%s: every tensor listed", name);
	static char want[4096][64];
	int nw = gguf_n_tensors(g) ? expected_tensors(g, want, 4096) : 0;
	if (nw > 0) {
		CHECKF((int64_t)nw == gguf_n_tensors(g), "%s: %d tensors expected, %lld present", name, nw, (long long)gguf_n_tensors(g));
		for (int i = 0; i < nw; i++) {
			bool found = false;
			for (size_t k = 0; k < json_array_size(tensors) && !found; k++)
				found = !strcmp(json_string_value(json_object_get(json_array_get(tensors, k), "name")), want[i]);
			CHECKF(found, "%s: tensor %s listed", name, want[i]);
		}
	}
	// shapes and type names agree with the reader
	for (size_t k = 0; k < json_array_size(tensors); k++) {
		json_t *t = json_array_get(tensors, k);
		const gguf_tensor *gt = gguf_find_tensor(g, json_string_value(json_object_get(t, "name")));
		CHECK(gt != NULL);
		if (!gt) continue;
		CHECK(!strcmp(json_string_value(json_object_get(t, "type")), gguf_ttype_get(gt->type)->name));
		json_t *shape = json_object_get(t, "shape");
		bool same = json_array_size(shape) == gt->n_dims;
		for (uint32_t d = 0; d < gt->n_dims && same; d++)
			same = json_integer_value(json_array_get(shape, d)) == gt->ne[d];
		CHECKF(same, "%s: shape of %s", name, gt->name);
	}
	json_decref(j);
	gguf_free(g);
}

static void test_shared_files(void) {
	const char *dirs[] = {"models", "vocab"};
	int seen = 0;
	for (int d = 0; d < 2; d++) {
		char path[1024];
		snprintf(path, sizeof path, "%s/%s", t_shared(), dirs[d]);
		DIR *dir = opendir(path);
		CHECKF(dir != NULL, "opendir %s", path);
		if (!dir) continue;
		struct dirent *e;
		while ((e = readdir(dir))) {
			size_t n = strlen(e->d_name);
			if (n > 5 && !strcmp(e->d_name + n - 5, ".gguf")) { check_file(dirs[d], e->d_name); seen++; }
		}
		closedir(dir);
	}
	CHECKF(seen >= 30, "saw %d shared GGUF files", seen);
}

// ---- writer round trip ---------------------------------------------------------------

static bool value_eq(const gguf_value *a, const gguf_value *b) {
	if (a->type != b->type) return false;
	switch (a->type) {
	case GGUF_STRING: return a->s.len == b->s.len && !memcmp(a->s.ptr, b->s.ptr, a->s.len);
	case GGUF_F32: case GGUF_F64: return !memcmp(&a->f, &b->f, sizeof a->f);
	case GGUF_I8: case GGUF_I16: case GGUF_I32: case GGUF_I64: return a->i == b->i;
	case GGUF_ARRAY:
		if (a->arr.type != b->arr.type || a->arr.n != b->arr.n) return false;
		for (uint64_t i = 0; i < a->arr.n; i++) {
			if (a->arr.type == GGUF_STRING) {
				gguf_str x = a->arr.strs[i], y = b->arr.strs[i];
				if (x.len != y.len || memcmp(x.ptr, y.ptr, x.len)) return false;
			} else if (a->arr.type == GGUF_ARRAY) {
				if (!value_eq(&a->arr.vals[i], &b->arr.vals[i])) return false;
			}
		}
		if (a->arr.type != GGUF_STRING && a->arr.type != GGUF_ARRAY)
			return !memcmp(a->arr.raw, b->arr.raw, a->arr.n * gguf_vtype_size(a->arr.type));
		return true;
	default: return a->u == b->u;
	}
}

static bool same_file(const gguf *a, const gguf *b) {
	if (gguf_n_kv(a) != gguf_n_kv(b) || gguf_n_tensors(a) != gguf_n_tensors(b)) return false;
	for (int64_t i = 0; i < gguf_n_kv(a); i++) {
		const gguf_kv *x = gguf_kv_at(a, i), *y = gguf_kv_at(b, i);
		if (x->key.len != y->key.len || memcmp(x->key.ptr, y->key.ptr, x->key.len)) return false;
		if (!value_eq(&x->val, &y->val)) return false;
	}
	for (int64_t i = 0; i < gguf_n_tensors(a); i++) {
		const gguf_tensor *x = gguf_tensor_at(a, i), *y = gguf_tensor_at(b, i);
		if (strcmp(x->name, y->name) || x->type != y->type || x->n_dims != y->n_dims || x->nbytes != y->nbytes)
			return false;
		if (memcmp(x->ne, y->ne, sizeof x->ne) || memcmp(x->data, y->data, x->nbytes)) return false;
	}
	return true;
}

static void test_writer_every_type(void) {
	gguf_writer *w = gguf_writer_new();
	uint8_t u8s[3] = {1, 2, 255};
	int16_t i16s[2] = {-5, 300};
	double f64s[2] = {1.5, -2.25e300};
	const char *strs[3] = {"a", "", "with spaces ▁ and unicode"};
	CHECK(gguf_writer_set_str(w, "general.architecture", "llama") == 0);
	CHECK(gguf_writer_set_u32(w, "general.alignment", 64) == 0);
	CHECK(gguf_writer_set(w, "k.u8", &(gguf_value){.type = GGUF_U8, .u = 200}) == 0);
	CHECK(gguf_writer_set(w, "k.i8", &(gguf_value){.type = GGUF_I8, .i = -100}) == 0);
	CHECK(gguf_writer_set(w, "k.u16", &(gguf_value){.type = GGUF_U16, .u = 65000}) == 0);
	CHECK(gguf_writer_set(w, "k.i16", &(gguf_value){.type = GGUF_I16, .i = -32000}) == 0);
	CHECK(gguf_writer_set_i32(w, "k.i32", -7) == 0);
	CHECK(gguf_writer_set_f32(w, "k.f32", 0.1f) == 0);
	CHECK(gguf_writer_set_bool(w, "k.bool", true) == 0);
	CHECK(gguf_writer_set(w, "k.u64", &(gguf_value){.type = GGUF_U64, .u = UINT64_MAX}) == 0);
	CHECK(gguf_writer_set(w, "k.i64", &(gguf_value){.type = GGUF_I64, .i = INT64_MIN}) == 0);
	CHECK(gguf_writer_set(w, "k.f64", &(gguf_value){.type = GGUF_F64, .f = 1e-300}) == 0);
	CHECK(gguf_writer_set_arr(w, "a.u8", GGUF_U8, u8s, 3) == 0);
	CHECK(gguf_writer_set_arr(w, "a.i16", GGUF_I16, i16s, 2) == 0);
	CHECK(gguf_writer_set_arr(w, "a.f64", GGUF_F64, f64s, 2) == 0);
	CHECK(gguf_writer_set_arr(w, "a.empty", GGUF_U32, NULL, 0) == 0);
	CHECK(gguf_writer_set_arr_str(w, "a.str", strs, 3) == 0);
	// a nested array: [[1,2,3], ["a","","..."]]
	gguf_value inner[2] = {{.type = GGUF_ARRAY}, {.type = GGUF_ARRAY}};
	inner[0].arr.type = GGUF_U8; inner[0].arr.n = 3; inner[0].arr.raw = u8s;
	gguf_str ss[3] = {{strs[0], 1}, {strs[1], 0}, {strs[2], strlen(strs[2])}};
	inner[1].arr.type = GGUF_STRING; inner[1].arr.n = 3; inner[1].arr.strs = ss;
	gguf_value outer = {.type = GGUF_ARRAY};
	outer.arr.type = GGUF_ARRAY; outer.arr.n = 2; outer.arr.vals = inner;
	CHECK(gguf_writer_set(w, "a.nested", &outer) == 0);
	CHECK(gguf_writer_set_u32(w, "k.replaced", 1) == 0);
	CHECK(gguf_writer_set_u32(w, "k.replaced", 2) == 0);
	float f[64];
	for (int i = 0; i < 64; i++) f[i] = (float)i * 0.5f - 3;
	uint8_t q8[2 * 34] = {0};
	for (int i = 0; i < 68; i++) q8[i] = (uint8_t)(i * 7);
	CHECK(gguf_writer_add_tensor(w, "t.f32", GGUF_T_F32, 2, (int64_t[]){16, 4}, f, sizeof f) == 0);
	CHECK(gguf_writer_add_tensor(w, "t.q8", GGUF_T_Q8_0, 1, (int64_t[]){64}, q8, sizeof q8) == 0);
	CHECK(gguf_writer_add_tensor(w, "t.bad", GGUF_T_Q8_0, 1, (int64_t[]){48}, q8, sizeof q8) != 0);
	CHECK(gguf_writer_add_tensor(w, "t.f32", GGUF_T_F32, 1, (int64_t[]){1}, f, 4) != 0);
	char path[512], err[512];
	snprintf(path, sizeof path, "%s/lanes-test-writer-%d.gguf", t_tmp(), (int)getpid());
	CHECK(gguf_writer_write(w, path, err, sizeof err) == 0);
	gguf_writer_free(w);
	gguf *g = NULL;
	CHECKF(gguf_open(&g, path, err, sizeof err) == 0, "%s", err);
	if (g) {
		int64_t v;
		uint32_t u;
		float fl;
		bool b;
		CHECK(gguf_version(g) == 3 && gguf_alignment(g) == 64 && gguf_data_offset(g) % 64 == 0);
		CHECK(gguf_get_i64(g, "k.i64", &v) == 0 && v == INT64_MIN);
		CHECK(gguf_get_i64(g, "k.u64", &v) == LANES_EFORMAT);
		CHECK(gguf_get_u32(g, "k.replaced", &u) == 0 && u == 2);
		CHECK(gguf_get_u32(g, "k.i32", &u) == LANES_EFORMAT);
		CHECK(gguf_get_f32(g, "k.f32", &fl) == 0 && fl == 0.1f);
		CHECK(gguf_get_bool(g, "k.bool", &b) == 0 && b);
		CHECK(gguf_get_i64(g, "missing", &v) == LANES_ENOTFOUND);
		const gguf_value *a = gguf_get_arr(g, "a.i16");
		CHECK(a && a->arr.n == 2 && gguf_arr_i64(a, 0) == -5 && gguf_arr_i64(a, 1) == 300);
		a = gguf_get_arr(g, "a.f64");
		CHECK(a && gguf_arr_f64(a, 1) == -2.25e300);
		a = gguf_get_arr(g, "a.nested");
		CHECK(a && a->arr.type == GGUF_ARRAY && a->arr.n == 2 && value_eq(&a->arr.vals[0], &inner[0]));
		CHECK(a && a->arr.vals[1].arr.n == 3 && gguf_str_eq(gguf_arr_str(&a->arr.vals[1], 2), strs[2]));
		const gguf_tensor *t = gguf_find_tensor(g, "t.f32");
		CHECK(t && t->ne[0] == 16 && t->ne[1] == 4 && !memcmp(t->data, f, sizeof f));
		t = gguf_find_tensor(g, "t.q8");
		CHECK(t && t->nbytes == sizeof q8 && !memcmp(t->data, q8, sizeof q8) && (uintptr_t)t->data % 64 == 0);
		gguf_free(g);
	}
	unlink(path);
}

// A real model copied through the writer reads back identically.
static void test_writer_copy_model(const char *name) {
	char src[1024], dst[512], err[512];
	snprintf(src, sizeof src, "%s/models/%s", t_shared(), name);
	snprintf(dst, sizeof dst, "%s/lanes-test-copy-%d.gguf", t_tmp(), (int)getpid());
	gguf *a = NULL, *b = NULL;
	CHECKF(gguf_open(&a, src, err, sizeof err) == 0, "%s", err);
	if (!a) return;
	gguf_writer *w = gguf_writer_new();
	CHECK(gguf_writer_copy_kv(w, a, NULL) == 0);
	for (int64_t i = 0; i < gguf_n_tensors(a); i++) {
		const gguf_tensor *t = gguf_tensor_at(a, i);
		CHECK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes) == 0);
	}
	CHECK(gguf_writer_write(w, dst, err, sizeof err) == 0);
	gguf_writer_free(w);
	CHECKF(gguf_open(&b, dst, err, sizeof err) == 0, "%s", err);
	if (b) CHECKF(same_file(a, b), "%s: copy reads back identically", name);
	gguf_free(a);
	gguf_free(b);
	unlink(dst);
}

// ---- hostile input ------------------------------------------------------------------------

// Opens n bytes from an exactly-sized heap copy, so ASan sees any read past the end,
// and walks everything a caller could touch.
static int open_and_walk(const uint8_t *bytes, size_t n, char *err, size_t errlen) {
	uint8_t *copy = malloc(n ? n : 1);
	memcpy(copy, bytes, n);
	gguf *g = NULL;
	int rc = gguf_open_mem(&g, copy, n, err, errlen);
	if (rc == 0) {
		volatile uint64_t sink = 0;
		for (int64_t i = 0; i < gguf_n_kv(g); i++) {
			const gguf_kv *kv = gguf_kv_at(g, i);
			sink += kv->key.len ? (uint8_t)kv->key.ptr[kv->key.len - 1] : 0;
			if (kv->val.type == GGUF_ARRAY && kv->val.arr.n) {
				const gguf_value *a = &kv->val;
				uint64_t last = a->arr.n - 1;
				if (a->arr.type == GGUF_STRING) sink += gguf_arr_str(a, last).len;
				else if (a->arr.type != GGUF_ARRAY) sink += (uint64_t)gguf_arr_i64(a, last);
			}
		}
		for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
			const gguf_tensor *t = gguf_tensor_at(g, i);
			if (t->nbytes) sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
		}
		(void)sink;
		gguf_free(g);
	}
	free(copy);
	return rc;
}

static void test_hostile(void) {
	char path[1024], err[512];
	snprintf(path, sizeof path, "%s/models/stories260K.gguf", t_shared());
	size_t n = 0;
	uint8_t *orig = (uint8_t *)t_read_file(path, &n);
	CHECK(orig && n > 4096);
	if (!orig) return;
	gguf *g = NULL;
	CHECK(gguf_open_mem(&g, orig, n, err, sizeof err) == 0);
	uint64_t meta_end = g ? gguf_data_offset(g) : 4096;
	gguf_free(g);

	uint64_t rng = 12345;
	int errors = 0, valid = 0, with_offset = 0;
	uint8_t *buf = malloc(n);
	uint64_t t0 = base_now_us();
	for (int i = 0; i < 1000; i++) {
		memcpy(buf, orig, n);
		size_t len = n;
		rng = splitmix64(rng);
		switch (i % 4) {
		case 0: len = (size_t)(rng % n); break; // truncated anywhere
		case 1: // bit flips inside the header and metadata
			for (int k = 0; k < 1 + (int)(rng % 8); k++) {
				rng = splitmix64(rng);
				size_t at = (size_t)(rng % meta_end);
				buf[at] ^= (uint8_t)(1u << (rng >> 60 & 7));
			}
			break;
		case 2: { // a hostile 64-bit count or length at a random 8-byte position in the metadata
			size_t at = (size_t)(rng % (meta_end - 8));
			uint64_t vals[] = {UINT64_MAX, UINT64_MAX / 2, 1ull << 40, 0x7fffffff, n, n - at, 0};
			uint64_t v = vals[(rng >> 32) % 7];
			memcpy(buf + at, &v, 8);
			break;
		}
		case 3: { // a hostile 32-bit type, dimension count or alignment
			size_t at = (size_t)(rng % (meta_end - 4));
			uint32_t vals[] = {UINT32_MAX, 13, 9, 100, 5, 0, 3};
			uint32_t v = vals[(rng >> 32) % 7];
			memcpy(buf + at, &v, 4);
			break;
		}
		}
		err[0] = 0;
		int rc = open_and_walk(buf, len, err, sizeof err);
		if (rc) {
			errors++;
			if (strstr(err, "offset ")) with_offset++;
			else fprintf(stderr, "variant %d: message without an offset: %s\n", i, err);
		} else valid++;
	}
	uint64_t dt = base_now_us() - t0;
	free(buf);
	free(orig);
	CHECKF(errors + valid == 1000, "every variant answered");
	CHECKF(errors > 500, "most variants rejected (%d)", errors);
	CHECKF(with_offset == errors, "every error names an offset (%d of %d)", with_offset, errors);
	fprintf(stderr, "hostile: %d rejected, %d parsed, %.1f ms\n", errors, valid, dt / 1000.0);
}

// Crafted files: each must fail with a message naming the problem.
static void expect_error(const uint8_t *b, size_t n, const char *want) {
	char err[512] = "";
	int rc = open_and_walk(b, n, err, sizeof err);
	CHECKF(rc != 0 && strstr(err, want) && strstr(err, "offset"), "want '%s', got rc %d '%s'", want, rc, err);
}

typedef struct {
	uint8_t b[512];
	size_t n;
} mk;
static void mk_u32(mk *m, uint32_t v) { memcpy(m->b + m->n, &v, 4); m->n += 4; }
static void mk_u64(mk *m, uint64_t v) { memcpy(m->b + m->n, &v, 8); m->n += 8; }
static void mk_str(mk *m, const char *s) { mk_u64(m, strlen(s)); memcpy(m->b + m->n, s, strlen(s)); m->n += strlen(s); }
static void mk_pad(mk *m, size_t n) { memset(m->b + m->n, 0, n); m->n += n; }
static void mk_head(mk *m, uint32_t ver, uint64_t nt, uint64_t nkv) {
	m->n = 0;
	memcpy(m->b, "GGUF", 4);
	m->n = 4;
	mk_u32(m, ver); mk_u64(m, nt); mk_u64(m, nkv);
}

static void test_crafted(void) {
	mk m;
	expect_error((const uint8_t *)"GGUX\3\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 24, "bad magic");
	mk_head(&m, 1, 0, 0); expect_error(m.b, m.n, "version 1");
	mk_head(&m, 7, 0, 0); expect_error(m.b, m.n, "unsupported GGUF version 7");
	mk_head(&m, 0x03000000, 0, 0); expect_error(m.b, m.n, "big-endian");
	mk_head(&m, 3, 0, UINT64_MAX); expect_error(m.b, m.n, "metadata count");
	mk_head(&m, 3, 1ull << 60, 0); expect_error(m.b, m.n, "tensor count");
	mk_head(&m, 3, 0, 1); mk_u64(&m, 1ull << 62); mk_pad(&m, 32); expect_error(m.b, m.n, "key length");
	mk_head(&m, 3, 0, 1); mk_str(&m, "k"); mk_u32(&m, 99); expect_error(m.b, m.n, "unknown value type 99");
	mk_head(&m, 3, 0, 1); mk_str(&m, "k"); mk_u32(&m, GGUF_STRING); mk_u64(&m, 1000); expect_error(m.b, m.n, "string value length");
	mk_head(&m, 3, 0, 1); mk_str(&m, "k"); mk_u32(&m, GGUF_ARRAY); mk_u32(&m, GGUF_U64); mk_u64(&m, 1ull << 61);
	expect_error(m.b, m.n, "array of");
	mk_head(&m, 3, 0, 1); mk_str(&m, "k"); mk_u32(&m, GGUF_BOOL); m.b[m.n++] = 7; expect_error(m.b, m.n, "bool value");
	mk_head(&m, 3, 0, 1); mk_str(&m, "k");
	mk_u32(&m, GGUF_ARRAY);
	for (int d = 0; d < 12; d++) { mk_u32(&m, GGUF_ARRAY); mk_u64(&m, 1); }
	mk_pad(&m, 64);
	expect_error(m.b, m.n, "nested deeper");
	mk_head(&m, 3, 0, 2); mk_str(&m, "k"); mk_u32(&m, GGUF_U32); mk_u32(&m, 1); mk_str(&m, "k"); mk_u32(&m, GGUF_U32); mk_u32(&m, 1);
	expect_error(m.b, m.n, "duplicate metadata key");
	mk_head(&m, 3, 0, 1); mk_str(&m, "general.alignment"); mk_u32(&m, GGUF_U32); mk_u32(&m, 48); expect_error(m.b, m.n, "power of two");
	// tensor infos
	mk_head(&m, 3, 1, 0); mk_str(&m, "t"); mk_u32(&m, 5); mk_pad(&m, 32); expect_error(m.b, m.n, "5 dimensions");
	mk_head(&m, 3, 1, 0); mk_str(&m, "t"); mk_u32(&m, 2); mk_u64(&m, 1ull << 40); mk_u64(&m, 1ull << 40); mk_u32(&m, 0); mk_u64(&m, 0);
	expect_error(m.b, m.n, "element count overflows");
	mk_head(&m, 3, 1, 0); mk_str(&m, "t"); mk_u32(&m, 1); mk_u64(&m, 32); mk_u32(&m, 77); mk_u64(&m, 0); expect_error(m.b, m.n, "unknown tensor type 77");
	mk_head(&m, 3, 1, 0); mk_str(&m, "t"); mk_u32(&m, 1); mk_u64(&m, 33); mk_u32(&m, GGUF_T_Q4_0); mk_u64(&m, 0); expect_error(m.b, m.n, "not a multiple");
	mk_head(&m, 3, 1, 0); mk_str(&m, "t"); mk_u32(&m, 1); mk_u64(&m, 8); mk_u32(&m, GGUF_T_F32); mk_u64(&m, 3); expect_error(m.b, m.n, "alignment");
	mk_head(&m, 3, 1, 0); mk_str(&m, "t"); mk_u32(&m, 1); mk_u64(&m, 8); mk_u32(&m, GGUF_T_F32); mk_u64(&m, 0);
	while (m.n % 32) m.b[m.n++] = 0;
	memset(m.b + m.n, 0, 16); m.n += 16; // 16 of the 32 data bytes
	expect_error(m.b, m.n, "run past the end");
	mk_head(&m, 3, 2, 0);
	for (int k = 0; k < 2; k++) { mk_str(&m, "t"); mk_u32(&m, 1); mk_u64(&m, 8); mk_u32(&m, GGUF_T_F32); mk_u64(&m, 0); }
	expect_error(m.b, m.n, "duplicate tensor name");
	// and a minimal valid file parses
	mk_head(&m, 2, 1, 1); mk_str(&m, "general.architecture"); mk_u32(&m, GGUF_STRING); mk_str(&m, "llama");
	mk_str(&m, "t"); mk_u32(&m, 1); mk_u64(&m, 8); mk_u32(&m, GGUF_T_F32); mk_u64(&m, 0);
	while (m.n % 32) m.b[m.n++] = 0;
	memset(m.b + m.n, 0, 32); m.n += 32;
	char err[256];
	CHECK(open_and_walk(m.b, m.n, err, sizeof err) == 0);
	gguf *g = NULL;
	CHECK(gguf_open(&g, "/nonexistent/x.gguf", err, sizeof err) == LANES_EIO && strstr(err, "No such file"));
	CHECK(gguf_open(&g, "/", err, sizeof err) == LANES_EIO && strstr(err, "not a regular file"));
}

int main(void) {
	test_crafted();
	test_writer_every_type();
	test_writer_copy_model("stories260K.gguf");
	test_writer_copy_model("ref-moe-Q4_K_M.gguf");
	test_hostile();
	test_shared_files();
	T_DONE("gguf");
}
