// template/value: the render state's arena and error unwinding, the growable buffer, UTF-8,
// template values (lists, dicts), their Python text forms (str, repr) and Python's equality
// and ordering between them.
#include "template/template_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- arena and error unwinding -----------------------------------------------------------

void tmpl__arena_free(arena *a) {
	for (chunk *c = a->head, *n; c; c = n) {
		n = c->next;
		free(c);
	}
	a->head = NULL;
	a->total = 0;
}

_Noreturn void tmpl__fail(R *r, int code, const char *fmt, ...) {
	r->code = code;
	if (r->err && r->errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(r->err, r->errlen, fmt, ap);
		va_end(ap);
	}
	longjmp(r->jb, 1);
}

void *tmpl__alloc(R *r, size_t n) {
	n = (n + 15) & ~(size_t)15;
	if (n == 0) n = 16;
	chunk *c = r->a.head;
	if (!c || c->cap - c->used < n) {
		size_t cap = n > 65536 - sizeof(chunk) ? n : 65536 - sizeof(chunk);
		if (r->a.total + cap + sizeof(chunk) > r->a.limit)
			tmpl__fail(r, LANES_ELIMIT, "template used more than %zu bytes of memory", r->a.limit);
		c = malloc(sizeof(chunk) + cap);
		if (!c) tmpl__fail(r, LANES_ENOMEM, "out of memory rendering template");
		c->cap = cap;
		c->used = 0;
		r->a.total += cap + sizeof(chunk);
		if (r->a.head && n > 65536 / 2) { // big block: keep the current chunk in front
			c->next = r->a.head->next;
			r->a.head->next = c;
		} else {
			c->next = r->a.head;
			r->a.head = c;
		}
	}
	void *p = c->data + c->used;
	c->used += n;
	return p;
}

void *tmpl__alloc_arr(R *r, size_t n, size_t sz) {
	uint64_t t;
	if (!ck_mul(n, sz, &t) || t > SIZE_MAX / 2) tmpl__fail(r, LANES_ELIMIT, "template value too large");
	return tmpl__alloc(r, (size_t)t);
}

void tmpl__step(R *r, int64_t n) {
	r->steps += n;
	if (r->steps > r->max_steps)
		tmpl__fail(r, LANES_ELIMIT, "template exceeded its limit of %lld evaluation steps", (long long)r->max_steps);
}

char *tmpl__sdup(R *r, const char *p, size_t n) {
	char *d = tmpl__alloc(r, n + 1);
	if (n) memcpy(d, p, n);
	d[n] = 0;
	return d;
}

// ---- growable byte buffer in the arena ---------------------------------------------------

static void buf_grow(R *r, buf *b, size_t add) {
	if ((int64_t)(b->n + add) > r->max_output)
		tmpl__fail(r, LANES_ELIMIT, "template output exceeded %lld bytes", (long long)r->max_output);
	if (b->n + add <= b->cap) return;
	size_t cap = b->cap ? b->cap * 2 : 64;
	while (cap < b->n + add) cap *= 2;
	char *p = tmpl__alloc(r, cap);
	if (b->n) memcpy(p, b->p, b->n);
	b->p = p;
	b->cap = cap;
}

void tmpl__buf_put(R *r, buf *b, const char *s, size_t n) {
	if (!n) return;
	buf_grow(r, b, n);
	memcpy(b->p + b->n, s, n);
	b->n += n;
	tmpl__step(r, (int64_t)(n >> 8));
}

void tmpl__buf_printf(R *r, buf *b, const char *fmt, ...) {
	char tmp[128];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (n > 0) tmpl__buf_put(r, b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

// ---- UTF-8 -------------------------------------------------------------------------------

// Decodes one code point at p (< end); invalid bytes decode as themselves (one byte).
uint32_t tmpl__utf8_dec(const char *p, const char *end, int *len) {
	const unsigned char *s = (const unsigned char *)p;
	size_t left = (size_t)(end - p);
	uint32_t c = s[0];
	int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
	if (n <= 1 || (size_t)n > left) {
		*len = 1;
		return c;
	}
	uint32_t v = c & (0x7f >> n);
	for (int i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80) {
			*len = 1;
			return c;
		}
		v = (v << 6) | (s[i] & 0x3f);
	}
	*len = n;
	return v;
}

int tmpl__utf8_enc(uint32_t c, char *o) {
	if (c >= 0xd800 && c < 0xe000) c = 0xfffd;
	if (c < 0x80) { o[0] = (char)c; return 1; }
	if (c < 0x800) { o[0] = (char)(0xc0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3f)); return 2; }
	if (c < 0x10000) {
		o[0] = (char)(0xe0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 0x3f));
		o[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	if (c > 0x10ffff) c = 0xfffd;
	o[0] = (char)(0xf0 | (c >> 18)); o[1] = (char)(0x80 | ((c >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((c >> 6) & 0x3f)); o[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

// Python's str.isspace.
bool tmpl__py_space(uint32_t c) {
	return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
	       c == 0x3000;
}

// Length in bytes of the Python whitespace character at p, 0 if none.
int tmpl__ws_at(const char *p, const char *end) {
	if (p >= end) return 0;
	int l;
	uint32_t c = tmpl__utf8_dec(p, end, &l);
	return tmpl__py_space(c) ? l : 0;
}

size_t tmpl__utf8_count(const char *p, size_t n) {
	size_t k = 0;
	for (size_t i = 0; i < n; i++) k += ((unsigned char)p[i] & 0xc0) != 0x80;
	return k;
}

bool tmpl__is_ascii(const char *p, size_t n) {
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)p[i] >= 0x80) return false;
	return true;
}

// ---- values ------------------------------------------------------------------------------

list *tmpl__list_new(R *r, size_t cap) {
	list *l = allocz(r, sizeof *l);
	if (cap) {
		l->v = tmpl__alloc_arr(r, cap, sizeof(value));
		l->cap = cap;
	}
	return l;
}

void tmpl__list_push(R *r, list *l, value v) {
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 4;
		value *nv = tmpl__alloc_arr(r, cap, sizeof(value));
		if (l->n) memcpy(nv, l->v, l->n * sizeof(value));
		l->v = nv;
		l->cap = cap;
	}
	l->v[l->n++] = v;
}

value tmpl__tuple2(R *r, value a, value b) {
	list *l = tmpl__list_new(r, 2);
	l->tuple = true;
	tmpl__list_push(r, l, a);
	tmpl__list_push(r, l, b);
	return v_list(l);
}

value *tmpl__dict_find(R *r, const dict *d, value k) {
	tmpl__step(r, (int64_t)(d->n >> 4));
	for (size_t i = 0; i < d->n; i++)
		if (tmpl__v_eq(r, d->k[i], k, 0)) return &d->v[i];
	return NULL;
}

value *tmpl__dict_find_s(const dict *d, const char *k, size_t n) {
	for (size_t i = 0; i < d->n; i++)
		if (d->k[i].t == V_STR && d->k[i].s.n == n && !memcmp(d->k[i].s.p, k, n)) return &d->v[i];
	return NULL;
}

void tmpl__dict_set(R *r, dict *d, value k, value v) {
	value *slot = tmpl__dict_find(r, d, k);
	if (slot) {
		*slot = v;
		return;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 4;
		value *nk = tmpl__alloc_arr(r, cap, sizeof(value)), *nv = tmpl__alloc_arr(r, cap, sizeof(value));
		if (d->n) {
			memcpy(nk, d->k, d->n * sizeof(value));
			memcpy(nv, d->v, d->n * sizeof(value));
		}
		d->k = nk;
		d->v = nv;
		d->cap = cap;
	}
	d->k[d->n] = k;
	d->v[d->n++] = v;
}

bool tmpl__truthy(value v) {
	if (is_iter(v)) return true;
	switch (v.t) {
	case V_UNDEF: case V_NONE: return false;
	case V_BOOL: return v.b;
	case V_INT: return v.i != 0;
	case V_FLOAT: return v.f != 0;
	case V_STR: return v.s.n != 0;
	case V_LIST: return v.l->n != 0;
	case V_DICT: return v.d->n != 0;
	default: return true;
	}
}

const char *tmpl__type_name(value v) {
	static const char *const names[] = {
		[V_UNDEF] = "Undefined", [V_NONE] = "NoneType", [V_BOOL] = "bool", [V_INT] = "int",
		[V_FLOAT] = "float", [V_STR] = "str", [V_LIST] = "list", [V_DICT] = "dict",
		[V_NS] = "Namespace", [V_FUNC] = "function", [V_LOOP] = "LoopContext",
	};
	if (v.t == V_LIST) {
		static const char *const kinds[] = {"list", "generator", "list_reverseiterator", "dict_items", "dict_keys", "dict_values"};
		return v.l->tuple && v.l->kind == LK_PLAIN ? "tuple" : kinds[v.l->kind];
	}
	return names[v.t];
}

// Raises the error an undefined value carries.
_Noreturn void tmpl__undef_fail(R *r, value u) {
	tmpl__fail(r, LANES_EINVAL, "%s", u.hint ? u.hint : "value is undefined");
}

// ---- Python-compatible text forms ------------------------------------------------------------

// repr(float) as Python writes it: the shortest digits that read back the same.
void tmpl__fmt_float(R *r, buf *b, double d) {
	if (isnan(d)) { buf_puts(r, b, "nan"); return; }
	if (isinf(d)) { buf_puts(r, b, d < 0 ? "-inf" : "inf"); return; }
	char tmp[40];
	int p;
	for (p = 1; p <= 17; p++) {
		snprintf(tmp, sizeof tmp, "%.*e", p - 1, d);
		if (strtod(tmp, NULL) == d) break;
	}
	char digits[24];
	int nd = 0;
	const char *q = tmp;
	bool neg = false;
	if (*q == '-') { neg = true; q++; }
	for (; *q && *q != 'e'; q++)
		if (*q >= '0' && *q <= '9') digits[nd++] = *q;
	int e = atoi(q + 1);
	while (nd > 1 && digits[nd - 1] == '0') nd--;
	char o[64];
	int k = 0;
	if (neg) o[k++] = '-';
	if (e >= -5 + 1 && e < 16) {
		if (e >= 0) {
			for (int i = 0; i <= e; i++) o[k++] = i < nd ? digits[i] : '0';
			o[k++] = '.';
			if (nd > e + 1)
				for (int i = e + 1; i < nd; i++) o[k++] = digits[i];
			else
				o[k++] = '0';
		} else {
			o[k++] = '0';
			o[k++] = '.';
			for (int i = 0; i < -e - 1; i++) o[k++] = '0';
			for (int i = 0; i < nd; i++) o[k++] = digits[i];
		}
	} else {
		o[k++] = digits[0];
		if (nd > 1) {
			o[k++] = '.';
			for (int i = 1; i < nd; i++) o[k++] = digits[i];
		}
		k += snprintf(o + k, sizeof o - (size_t)k, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
	}
	tmpl__buf_put(r, b, o, (size_t)k);
}

static bool py_printable(uint32_t c) {
	if (c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0xa0) || c == 0xad) return false;
	if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f)) return false;
	if ((c >= 0x205f && c <= 0x206f) || c == 0x3000 || c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb)) return false;
	if ((c >= 0xd800 && c <= 0xf8ff) || (c >= 0xf0000)) return false;
	return true;
}

static void repr_str(R *r, buf *b, str_t s) {
	bool sq = memchr(s.p, '\'', s.n) != NULL, dq = memchr(s.p, '"', s.n) != NULL;
	char quote = sq && !dq ? '"' : '\'';
	buf_putc(r, b, quote);
	const char *p = s.p, *end = s.p + s.n;
	while (p < end) {
		int l;
		uint32_t c = tmpl__utf8_dec(p, end, &l);
		if (c == (uint32_t)quote || c == '\\') {
			buf_putc(r, b, '\\');
			buf_putc(r, b, (char)c);
		} else if (c == '\n') buf_puts(r, b, "\\n");
		else if (c == '\r') buf_puts(r, b, "\\r");
		else if (c == '\t') buf_puts(r, b, "\\t");
		else if (!py_printable(c)) {
			if (c < 0x100) tmpl__buf_printf(r, b, "\\x%02x", c);
			else if (c < 0x10000) tmpl__buf_printf(r, b, "\\u%04x", c);
			else tmpl__buf_printf(r, b, "\\U%08x", c);
		} else tmpl__buf_put(r, b, p, (size_t)l);
		p += l;
	}
	buf_putc(r, b, quote);
}

static void repr_items(R *r, buf *b, value v, int depth) {
	if (depth > MAX_VALUE_DEPTH) FAIL(r, "value nested too deeply");
	if (is_iter(v)) {
		tmpl__buf_printf(r, b, "<%s object>", tmpl__type_name(v));
		return;
	}
	if (v.t == V_LIST && v.l->kind != LK_PLAIN) { // dict_items([...])
		buf_puts(r, b, tmpl__type_name(v));
		buf_putc(r, b, '(');
		list plain = *v.l;
		plain.kind = LK_PLAIN;
		plain.tuple = false;
		repr_items(r, b, v_list(&plain), depth + 1);
		buf_putc(r, b, ')');
		return;
	}
	if (v.t == V_LIST) {
		buf_putc(r, b, v.l->tuple ? '(' : '[');
		for (size_t i = 0; i < v.l->n; i++) {
			if (i) buf_puts(r, b, ", ");
			tmpl__to_buf(r, b, v.l->v[i], true, depth + 1);
		}
		if (v.l->tuple && v.l->n == 1) buf_putc(r, b, ',');
		buf_putc(r, b, v.l->tuple ? ')' : ']');
	} else {
		buf_putc(r, b, '{');
		for (size_t i = 0; i < v.d->n; i++) {
			if (i) buf_puts(r, b, ", ");
			tmpl__to_buf(r, b, v.d->k[i], true, depth + 1);
			buf_puts(r, b, ": ");
			tmpl__to_buf(r, b, v.d->v[i], true, depth + 1);
		}
		buf_putc(r, b, '}');
	}
}

// str(v) (repr=false) or repr(v) (repr=true) as Python prints them.
void tmpl__to_buf(R *r, buf *b, value v, bool repr, int depth) {
	switch (v.t) {
	case V_UNDEF: if (repr) buf_puts(r, b, "Undefined"); break;
	case V_NONE: buf_puts(r, b, "None"); break;
	case V_BOOL: buf_puts(r, b, v.b ? "True" : "False"); break;
	case V_INT: tmpl__buf_printf(r, b, "%lld", (long long)v.i); break;
	case V_FLOAT: tmpl__fmt_float(r, b, v.f); break;
	case V_STR:
		if (repr) repr_str(r, b, v.s);
		else tmpl__buf_put(r, b, v.s.p, v.s.n);
		break;
	case V_LIST: case V_DICT: repr_items(r, b, v, depth); break;
	case V_NS:
		buf_puts(r, b, "<Namespace ");
		repr_items(r, b, v_dict(v.d), depth);
		buf_putc(r, b, '>');
		break;
	case V_FUNC: buf_puts(r, b, "<function>"); break;
	case V_LOOP: buf_puts(r, b, "<LoopContext>"); break;
	}
}

// str(v) as a string value (no copy for strings).
str_t tmpl__to_str(R *r, value v) {
	if (v.t == V_STR) return v.s;
	buf b = {0};
	tmpl__to_buf(r, &b, v, false, 0);
	return (str_t){b.p ? b.p : "", b.n};
}

// ---- equality and ordering (Python semantics) -----------------------------------------------

bool tmpl__v_eq(R *r, value a, value b, int depth) {
	if (depth > MAX_VALUE_DEPTH) FAIL(r, "value nested too deeply");
	if (is_num(a) && is_num(b)) {
		if (is_intlike(a) && is_intlike(b)) return num_i(a) == num_i(b);
		return num_f(a) == num_f(b);
	}
	if (a.t != b.t) return false;
	switch (a.t) {
	case V_UNDEF: case V_NONE: return true;
	case V_STR: return str_eqs(a.s, b.s);
	case V_LIST:
		if (is_iter(a) || is_iter(b)) return a.l == b.l;
		if (a.l->n != b.l->n || a.l->tuple != b.l->tuple || a.l->kind != b.l->kind) return false;
		for (size_t i = 0; i < a.l->n; i++)
			if (!tmpl__v_eq(r, a.l->v[i], b.l->v[i], depth + 1)) return false;
		return true;
	case V_DICT:
		if (a.d->n != b.d->n) return false;
		for (size_t i = 0; i < a.d->n; i++) {
			value *o = tmpl__dict_find(r, b.d, a.d->k[i]);
			if (!o || !tmpl__v_eq(r, a.d->v[i], *o, depth + 1)) return false;
		}
		return true;
	case V_NS: return a.d == b.d;
	case V_FUNC: return a.fn == b.fn;
	case V_LOOP: return a.loop == b.loop;
	default: return false;
	}
}

int tmpl__v_cmp(R *r, value a, value b, const char *op, int depth) {
	if (depth > MAX_VALUE_DEPTH) FAIL(r, "value nested too deeply");
	if (is_num(a) && is_num(b)) {
		if (is_intlike(a) && is_intlike(b)) return num_i(a) < num_i(b) ? -1 : num_i(a) > num_i(b);
		double x = num_f(a), y = num_f(b);
		return x < y ? -1 : x > y;
	}
	if (a.t == V_STR && b.t == V_STR) {
		size_t n = a.s.n < b.s.n ? a.s.n : b.s.n;
		int c = n ? memcmp(a.s.p, b.s.p, n) : 0;
		if (c) return c < 0 ? -1 : 1;
		return a.s.n < b.s.n ? -1 : a.s.n > b.s.n;
	}
	if (is_seq(a) && is_seq(b) && a.l->tuple == b.l->tuple) {
		for (size_t i = 0; i < a.l->n && i < b.l->n; i++) {
			if (tmpl__v_eq(r, a.l->v[i], b.l->v[i], depth + 1)) continue;
			return tmpl__v_cmp(r, a.l->v[i], b.l->v[i], op, depth + 1);
		}
		return a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
	}
	if (a.t == V_UNDEF) tmpl__undef_fail(r, a);
	if (b.t == V_UNDEF) tmpl__undef_fail(r, b);
	FAIL(r, "'%s' not supported between instances of '%s' and '%s'", op, tmpl__type_name(a), tmpl__type_name(b));
}

bool tmpl__v_in(R *r, value x, value c) {
	switch (c.t) {
	case V_STR: {
		if (x.t != V_STR) FAIL(r, "'in <string>' requires string as left operand, not %s", tmpl__type_name(x));
		if (!x.s.n) return true;
		tmpl__step(r, (int64_t)(c.s.n >> 6));
		return memmem(c.s.p, c.s.n, x.s.p, x.s.n) != NULL;
	}
	case V_LIST:
		tmpl__step(r, (int64_t)(c.l->n >> 4));
		for (size_t i = 0; i < c.l->n; i++)
			if (tmpl__v_eq(r, x, c.l->v[i], 0)) return true;
		return false;
	case V_DICT: return tmpl__dict_find(r, c.d, x) != NULL;
	case V_UNDEF: return false;
	default: FAIL(r, "argument of type '%s' is not iterable", tmpl__type_name(c));
	}
}
