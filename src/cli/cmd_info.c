// cli: `lanes info MODEL.gguf [--json]` — a GGUF file's version, architecture,
// metadata, tensors and the tensor types it mixes, as text or as one JSON object.
#include "base/base.h"
#include "cli/cli.h"
#include "gguf/gguf.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#define ARRAY_HEAD 16

static json_t *value_json(const gguf_value *v);

static json_t *elem_json(const gguf_value *a, uint64_t i) {
	switch (a->arr.type) {
	case GGUF_STRING: { gguf_str s = gguf_arr_str(a, i); return json_stringn_nocheck(s.ptr, s.len); }
	case GGUF_ARRAY: return value_json(&a->arr.vals[i]);
	case GGUF_BOOL: return json_boolean(gguf_arr_i64(a, i));
	case GGUF_F32: case GGUF_F64: return json_real(gguf_arr_f64(a, i));
	case GGUF_U64: { uint64_t x; memcpy(&x, (const uint8_t *)a->arr.raw + 8 * i, 8);
		return x > (uint64_t)INT64_MAX ? json_real((double)x) : json_integer((json_int_t)x); }
	default: return json_integer(gguf_arr_i64(a, i));
	}
}

static json_t *value_json(const gguf_value *v) {
	switch (v->type) {
	case GGUF_STRING: return json_stringn_nocheck(v->s.ptr, v->s.len);
	case GGUF_BOOL: return json_boolean(v->u);
	case GGUF_F32: case GGUF_F64: return json_real(v->f);
	case GGUF_U64: return v->u > (uint64_t)INT64_MAX ? json_real((double)v->u) : json_integer((json_int_t)v->u);
	case GGUF_ARRAY: {
		uint64_t n = v->arr.n, shown = n > ARRAY_HEAD ? ARRAY_HEAD : n;
		json_t *arr = json_array();
		for (uint64_t i = 0; i < shown; i++) json_array_append_new(arr, elem_json(v, i));
		if (n <= ARRAY_HEAD) return arr;
		return json_pack("{s:s, s:I, s:o}", "array", gguf_vtype_name(v->arr.type), "length", (json_int_t)n, "head", arr);
	}
	default: {
		int64_t i = 0;
		gguf_value_i64(v, &i);
		return json_integer(i);
	}
	}
}

// Text form of a value: JSON for scalars and short arrays, a summary for long arrays.
static void print_value(const gguf_value *v) {
	json_t *j = value_json(v);
	char *s = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
	if (v->type == GGUF_STRING && v->s.len > 200) printf("\"%.120s…\" (%llu bytes)", s + 1, (unsigned long long)v->s.len);
	else fputs(s ? s : "?", stdout);
	free(s);
	json_decref(j);
}

static void shape_text(const gguf_tensor *t, char *buf, size_t n) {
	size_t k = 0;
	buf[0] = 0;
	for (uint32_t d = 0; d < t->n_dims && k < n; d++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? " x " : "", (long long)t->ne[d]);
}

// Tensors and bytes of each type in g, indexed by enum gguf_ttype (the reader knows every type).
typedef struct {
	int64_t n[GGUF_T_COUNT];
	uint64_t bytes[GGUF_T_COUNT];
} type_use;

static void count_types(const gguf *g, type_use *u) {
	memset(u, 0, sizeof *u);
	for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
		const gguf_tensor *t = gguf_tensor_at(g, i);
		u->n[t->type]++;
		u->bytes[t->type] += t->nbytes;
	}
}

int cmd_info(const cli_settings *s) {
	const char *const *pos = s->pos;
	const bool json = s->json;
	char err[512];
	gguf *g;
	if (gguf_open(&g, pos[0], err, sizeof err)) {
		cli_err("%s", err);
		return 1;
	}
	gguf_str arch = {"", 0};
	gguf_get_str(g, "general.architecture", &arch);
	type_use use;
	count_types(g, &use);
	if (json) {
		json_t *meta = json_object(), *tensors = json_array(), *types = json_array();
		for (int64_t i = 0; i < gguf_n_kv(g); i++) {
			const gguf_kv *kv = gguf_kv_at(g, i);
			char *key = gguf_str_dup(kv->key);
			if (key) json_object_set_new_nocheck(meta, key, value_json(&kv->val));
			free(key);
		}
		for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
			const gguf_tensor *t = gguf_tensor_at(g, i);
			json_t *shape = json_array();
			for (uint32_t d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer(t->ne[d]));
			json_array_append_new(tensors, json_pack("{s:s, s:s, s:o}", "name", t->name, "type",
								 gguf_ttype_get(t->type)->name, "shape", shape));
		}
		for (uint32_t t = 0; t < GGUF_T_COUNT; t++)
			if (use.n[t])
				json_array_append_new(types, json_pack("{s:s, s:I, s:I}", "type", gguf_ttype_get(t)->name, "tensors",
								       (json_int_t)use.n[t], "bytes", (json_int_t)use.bytes[t]));
		json_t *root = json_pack("{s:i, s:s%, s:o, s:o, s:o}", "version", (int)gguf_version(g), "architecture",
					 arch.ptr, (size_t)arch.len, "metadata", meta, "tensors", tensors, "types", types);
		char *text = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII);
		if (text) puts(text);
		free(text);
		json_decref(root);
	} else {
		printf("file: %s\nversion: %u\narchitecture: %.*s\nalignment: %u\n", pos[0], gguf_version(g),
		       (int)arch.len, arch.ptr, gguf_alignment(g));
		printf("metadata: %lld keys\n", (long long)gguf_n_kv(g));
		for (int64_t i = 0; i < gguf_n_kv(g); i++) {
			const gguf_kv *kv = gguf_kv_at(g, i);
			printf("  %.*s [%s] = ", (int)kv->key.len, kv->key.ptr, gguf_vtype_name(kv->val.type));
			print_value(&kv->val);
			putchar('\n');
		}
		uint64_t total = 0;
		for (int64_t i = 0; i < gguf_n_tensors(g); i++) total += gguf_tensor_at(g, i)->nbytes;
		printf("tensors: %lld (%.2f MiB)\n", (long long)gguf_n_tensors(g), total / 1048576.0);
		for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
			const gguf_tensor *t = gguf_tensor_at(g, i);
			char shape[128];
			shape_text(t, shape, sizeof shape);
			printf("  %-32s %-6s %s\n", t->name, gguf_ttype_get(t->type)->name, shape);
		}
		printf("types:\n");
		for (uint32_t t = 0; t < GGUF_T_COUNT; t++)
			if (use.n[t])
				printf("  %-6s %5lld tensors %10.2f MiB\n", gguf_ttype_get(t)->name, (long long)use.n[t],
				       use.bytes[t] / 1048576.0);
	}
	gguf_free(g);
	return 0;
}
