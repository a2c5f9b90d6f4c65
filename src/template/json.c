// template/json: the bridge to JSON — jansson values into template values (the render context)
// and template values out as JSON text, as Python's json.dumps writes it for HF's tojson.
#include "template/template_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

// ---- JSON (Python json.dumps as HF's tojson calls it) -----------------------------------------

static void json_str(R *r, buf *b, str_t s, bool ascii) {
	buf_putc(r, b, '"');
	const char *p = s.p, *end = s.p + s.n, *run = p;
	while (p < end) {
		unsigned char c = (unsigned char)*p;
		const char *esc = NULL;
		char tmp[16];
		int l = 1;
		if (c == '"') esc = "\\\"";
		else if (c == '\\') esc = "\\\\";
		else if (c == '\n') esc = "\\n";
		else if (c == '\r') esc = "\\r";
		else if (c == '\t') esc = "\\t";
		else if (c == 8) esc = "\\b";
		else if (c == 12) esc = "\\f";
		else if (c < 0x20) {
			snprintf(tmp, sizeof tmp, "\\u%04x", c);
			esc = tmp;
		} else if (c >= 0x80 && ascii) {
			uint32_t cp = tmpl__utf8_dec(p, end, &l);
			if (cp >= 0x10000) {
				cp -= 0x10000;
				snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
			} else
				snprintf(tmp, sizeof tmp, "\\u%04x", cp);
			esc = tmp;
		}
		if (esc) {
			tmpl__buf_put(r, b, run, (size_t)(p - run));
			buf_puts(r, b, esc);
			p += l;
			run = p;
		} else
			p++;
	}
	tmpl__buf_put(r, b, run, (size_t)(p - run));
	buf_putc(r, b, '"');
}

static void json_nl(R *r, buf *b, const json_opts *o, int level) {
	buf_putc(r, b, '\n');
	for (int i = 0; i < level; i++) buf_puts(r, b, o->indent);
}

static int key_cmp(const void *x, const void *y) {
	const str_t *a = x, *b = y;
	size_t n = a->n < b->n ? a->n : b->n;
	int c = n ? memcmp(a->p, b->p, n) : 0;
	return c ? c : (a->n > b->n) - (a->n < b->n);
}

static str_t json_key(R *r, value k) {
	switch (k.t) {
	case V_STR: return k.s;
	case V_BOOL: return k.b ? (str_t){"true", 4} : (str_t){"false", 5};
	case V_NONE: return (str_t){"null", 4};
	case V_INT: case V_FLOAT: return tmpl__to_str(r, k);
	default: FAIL(r, "keys must be str, int, float, bool or None, not %s", tmpl__type_name(k));
	}
}

void tmpl__json_val(R *r, buf *b, value v, const json_opts *o, int level) {
	if (level > MAX_VALUE_DEPTH) FAIL(r, "value nested too deeply for tojson");
	switch (v.t) {
	case V_NONE: buf_puts(r, b, "null"); return;
	case V_BOOL: buf_puts(r, b, v.b ? "true" : "false"); return;
	case V_INT: tmpl__buf_printf(r, b, "%lld", (long long)v.i); return;
	case V_FLOAT:
		if (isnan(v.f)) buf_puts(r, b, "NaN");
		else if (isinf(v.f)) buf_puts(r, b, v.f < 0 ? "-Infinity" : "Infinity");
		else tmpl__fmt_float(r, b, v.f);
		return;
	case V_STR: json_str(r, b, v.s, o->ascii); return;
	case V_LIST:
		if (!is_seq(v)) FAIL(r, "Object of type %s is not JSON serializable", tmpl__type_name(v));
		if (!v.l->n) { buf_puts(r, b, "[]"); return; }
		buf_putc(r, b, '[');
		for (size_t i = 0; i < v.l->n; i++) {
			if (i) tmpl__buf_put(r, b, o->item_sep.p, o->item_sep.n);
			if (o->indent) json_nl(r, b, o, level + 1);
			tmpl__json_val(r, b, v.l->v[i], o, level + 1);
		}
		if (o->indent) json_nl(r, b, o, level);
		buf_putc(r, b, ']');
		return;
	case V_DICT: {
		if (!v.d->n) { buf_puts(r, b, "{}"); return; }
		size_t n = v.d->n;
		str_t *keys = tmpl__alloc_arr(r, n, sizeof(str_t) + sizeof(size_t));
		size_t *order = (size_t *)(keys + n);
		for (size_t i = 0; i < n; i++) keys[i] = json_key(r, v.d->k[i]);
		for (size_t i = 0; i < n; i++) order[i] = i;
		if (o->sort_keys) { // insertion sort over indices keeps it simple and stable
			tmpl__step(r, (int64_t)(n * n / 16));
			for (size_t i = 1; i < n; i++)
				for (size_t j = i; j > 0 && key_cmp(&keys[order[j - 1]], &keys[order[j]]) > 0; j--) {
					size_t t = order[j];
					order[j] = order[j - 1];
					order[j - 1] = t;
				}
		}
		buf_putc(r, b, '{');
		for (size_t i = 0; i < n; i++) {
			if (i) tmpl__buf_put(r, b, o->item_sep.p, o->item_sep.n);
			if (o->indent) json_nl(r, b, o, level + 1);
			json_str(r, b, keys[order[i]], o->ascii);
			tmpl__buf_put(r, b, o->key_sep.p, o->key_sep.n);
			tmpl__json_val(r, b, v.d->v[order[i]], o, level + 1);
		}
		if (o->indent) json_nl(r, b, o, level);
		buf_putc(r, b, '}');
		return;
	}
	default: FAIL(r, "Object of type %s is not JSON serializable", tmpl__type_name(v));
	}
}

// ---- context: JSON → values ------------------------------------------------------------------

value tmpl__from_json(R *r, const json_t *j, int depth) {
	if (depth > MAX_VALUE_DEPTH) tmpl__fail(r, LANES_ELIMIT, "template context nested too deeply");
	tmpl__step(r, 1);
	switch (json_typeof(j)) {
	case JSON_NULL: return NONE;
	case JSON_TRUE: return v_bool(true);
	case JSON_FALSE: return v_bool(false);
	case JSON_INTEGER: return v_int((int64_t)json_integer_value(j));
	case JSON_REAL: return v_float(json_real_value(j));
	case JSON_STRING: return v_str(json_string_value(j), json_string_length(j));
	case JSON_ARRAY: {
		size_t n = json_array_size(j);
		list *l = tmpl__list_new(r, n);
		for (size_t i = 0; i < n; i++) tmpl__list_push(r, l, tmpl__from_json(r, json_array_get(j, i), depth + 1));
		return v_list(l);
	}
	case JSON_OBJECT: {
		dict *d = dict_new(r);
		const char *k;
		json_t *v;
		// jansson keeps insertion order; keys are unique so append without searching
		size_t n = json_object_size(j);
		d->k = tmpl__alloc_arr(r, n + 1, sizeof(value));
		d->v = tmpl__alloc_arr(r, n + 1, sizeof(value));
		d->cap = n + 1;
		json_object_foreach((json_t *)j, k, v) {
			if (d->n == d->cap) break;
			d->k[d->n] = v_cstr(k);
			d->v[d->n++] = tmpl__from_json(r, v, depth + 1);
		}
		return v_dict(d);
	}
	}
	return NONE;
}
