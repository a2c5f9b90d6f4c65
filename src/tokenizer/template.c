// tokenizer/template: a Jinja2 subset — lexer (with trim_blocks/lstrip_blocks exactly as Jinja
// applies them), recursive-descent parser to an AST, and a tree-walking evaluator whose memory
// comes from one arena per render. Errors unwind with longjmp to the API boundary.
#include "tokenizer/template.h"

#include "base/base.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <wctype.h>

#define MAX_SRC (1u << 20)      // template source bytes
#define MAX_PARSE_DEPTH 200     // nesting of expressions and blocks while parsing
#define MAX_EVAL_DEPTH 3000     // nesting of evaluation (bounds the C stack)
#define MAX_VALUE_DEPTH 256     // nesting of lists/dicts walked by repr, tojson, compare
#define MAX_RANGE 100000        // as Jinja's sandbox
#define COMPILE_MEMORY (64u << 20)

// ---- arena and error unwinding -----------------------------------------------------------

typedef struct chunk {
	struct chunk *next;
	size_t cap, used;
	_Alignas(16) unsigned char data[];
} chunk;

typedef struct {
	chunk *head;
	size_t total, limit;
} arena;

static void arena_free(arena *a) {
	for (chunk *c = a->head, *n; c; c = n) {
		n = c->next;
		free(c);
	}
	a->head = NULL;
	a->total = 0;
}

typedef struct {
	const char *p;
	size_t n;
} str_t;

typedef struct R R;
struct R {
	jmp_buf jb;
	arena a;
	int code;
	char *err;
	size_t errlen;
	int line; // line of the node being evaluated, for messages
	int64_t steps, max_steps, max_output;
	int depth, calls, max_calls;
	struct tm date;
	// parser state
	struct token *tok;
	size_t ntok, pos;
	int pdepth;
	bool uses_varargs, uses_kwargs;
};

static _Noreturn void fail(R *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static _Noreturn void fail(R *r, int code, const char *fmt, ...) {
	r->code = code;
	if (r->err && r->errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(r->err, r->errlen, fmt, ap);
		va_end(ap);
	}
	longjmp(r->jb, 1);
}

#define FAIL(r, ...) fail((r), LANES_EINVAL, __VA_ARGS__)

static void *alloc(R *r, size_t n) {
	n = (n + 15) & ~(size_t)15;
	if (n == 0) n = 16;
	chunk *c = r->a.head;
	if (!c || c->cap - c->used < n) {
		size_t cap = n > 65536 - sizeof(chunk) ? n : 65536 - sizeof(chunk);
		if (r->a.total + cap + sizeof(chunk) > r->a.limit)
			fail(r, LANES_ELIMIT, "template used more than %zu bytes of memory", r->a.limit);
		c = malloc(sizeof(chunk) + cap);
		if (!c) fail(r, LANES_ENOMEM, "out of memory rendering template");
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

static void *allocz(R *r, size_t n) { return memset(alloc(r, n), 0, n); }

static void *alloc_arr(R *r, size_t n, size_t sz) {
	uint64_t t;
	if (!ck_mul(n, sz, &t) || t > SIZE_MAX / 2) fail(r, LANES_ELIMIT, "template value too large");
	return alloc(r, (size_t)t);
}

static void step(R *r, int64_t n) {
	r->steps += n;
	if (r->steps > r->max_steps)
		fail(r, LANES_ELIMIT, "template exceeded its limit of %lld evaluation steps", (long long)r->max_steps);
}

static char *sdup(R *r, const char *p, size_t n) {
	char *d = alloc(r, n + 1);
	if (n) memcpy(d, p, n);
	d[n] = 0;
	return d;
}

static bool str_eq(str_t a, const char *b) { return strlen(b) == a.n && !memcmp(a.p, b, a.n); }
static bool str_eqs(str_t a, str_t b) { return a.n == b.n && (a.n == 0 || !memcmp(a.p, b.p, a.n)); }

// ---- growable byte buffer in the arena ---------------------------------------------------

typedef struct {
	char *p;
	size_t n, cap;
} buf;

static void buf_grow(R *r, buf *b, size_t add) {
	if ((int64_t)(b->n + add) > r->max_output)
		fail(r, LANES_ELIMIT, "template output exceeded %lld bytes", (long long)r->max_output);
	if (b->n + add <= b->cap) return;
	size_t cap = b->cap ? b->cap * 2 : 64;
	while (cap < b->n + add) cap *= 2;
	char *p = alloc(r, cap);
	if (b->n) memcpy(p, b->p, b->n);
	b->p = p;
	b->cap = cap;
}

static void buf_put(R *r, buf *b, const char *s, size_t n) {
	if (!n) return;
	buf_grow(r, b, n);
	memcpy(b->p + b->n, s, n);
	b->n += n;
	step(r, (int64_t)(n >> 8));
}

static void buf_puts(R *r, buf *b, const char *s) { buf_put(r, b, s, strlen(s)); }
static void buf_putc(R *r, buf *b, char c) { buf_put(r, b, &c, 1); }

static void buf_printf(R *r, buf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void buf_printf(R *r, buf *b, const char *fmt, ...) {
	char tmp[128];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (n > 0) buf_put(r, b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

// ---- UTF-8 -------------------------------------------------------------------------------

// Decodes one code point at p (< end); invalid bytes decode as themselves (one byte).
static uint32_t utf8_dec(const char *p, const char *end, int *len) {
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

static int utf8_enc(uint32_t c, char *o) {
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
static bool py_space(uint32_t c) {
	return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
	       c == 0x3000;
}

// Length in bytes of the Python whitespace character at p, 0 if none.
static int ws_at(const char *p, const char *end) {
	if (p >= end) return 0;
	int l;
	uint32_t c = utf8_dec(p, end, &l);
	return py_space(c) ? l : 0;
}

static size_t utf8_count(const char *p, size_t n) {
	size_t k = 0;
	for (size_t i = 0; i < n; i++) k += ((unsigned char)p[i] & 0xc0) != 0x80;
	return k;
}

static bool is_ascii(const char *p, size_t n) {
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)p[i] >= 0x80) return false;
	return true;
}

static pthread_once_t loc_once = PTHREAD_ONCE_INIT;
static locale_t utf8_loc;
static void loc_init(void) { utf8_loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0); }

static uint32_t cp_upper(uint32_t c) {
	if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
	pthread_once(&loc_once, loc_init);
	return utf8_loc ? (uint32_t)towupper_l((wint_t)c, utf8_loc) : c;
}
static uint32_t cp_lower(uint32_t c) {
	if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
	pthread_once(&loc_once, loc_init);
	return utf8_loc ? (uint32_t)towlower_l((wint_t)c, utf8_loc) : c;
}
static bool cp_alpha(uint32_t c) {
	if (c < 0x80) return (c | 32) >= 'a' && (c | 32) <= 'z';
	pthread_once(&loc_once, loc_init);
	return utf8_loc ? iswalpha_l((wint_t)c, utf8_loc) != 0 : false;
}
static bool cp_digit(uint32_t c) { return c >= '0' && c <= '9'; }
static bool cp_cased(uint32_t c) { return cp_upper(c) != c || cp_lower(c) != c; }

// ---- values ------------------------------------------------------------------------------

enum vtype { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS, V_FUNC, V_LOOP };

typedef struct value value;
typedef struct list list;
typedef struct dict dict;
typedef struct func func;
typedef struct loopst loopst;

struct value {
	uint8_t t;
	uint8_t safe; // str: came from a macro or |safe (printed the same; kept for |escape)
	union {
		bool b;
		int64_t i;
		double f;
		str_t s;            // V_STR
		const char *hint;   // V_UNDEF: the error it raises when used (NULL: generic)
		list *l;
		dict *d;            // V_DICT, V_NS (mutable)
		func *fn;
		loopst *loop;
	};
};

// Lists also stand for the iterators Jinja filters return (map, select, items, ...): those
// are single-use, always true, have no len() and are not JSON; dict views have a len().
enum listkind { LK_PLAIN, LK_GEN, LK_REVIT, LK_ITEMS, LK_KEYS, LK_VALUES };
struct list {
	size_t n, cap;
	value *v;
	bool tuple;
	uint8_t kind;  // enum listkind
	bool consumed; // LK_GEN / LK_REVIT: already iterated once
};

struct dict {
	size_t n, cap;
	value *k, *v;
};

static const value UNDEF = {.t = V_UNDEF};
static const value NONE = {.t = V_NONE};

static value v_bool(bool b) { return (value){.t = V_BOOL, .b = b}; }
static value v_int(int64_t i) { return (value){.t = V_INT, .i = i}; }
static value v_float(double f) { return (value){.t = V_FLOAT, .f = f}; }
static value v_str(const char *p, size_t n) { return (value){.t = V_STR, .s = {p, n}}; }
static value v_cstr(const char *p) { return v_str(p, strlen(p)); }
static value v_undef(const char *hint) { return (value){.t = V_UNDEF, .hint = hint}; }

static list *list_new(R *r, size_t cap) {
	list *l = allocz(r, sizeof *l);
	if (cap) {
		l->v = alloc_arr(r, cap, sizeof(value));
		l->cap = cap;
	}
	return l;
}

static void list_push(R *r, list *l, value v) {
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 4;
		value *nv = alloc_arr(r, cap, sizeof(value));
		if (l->n) memcpy(nv, l->v, l->n * sizeof(value));
		l->v = nv;
		l->cap = cap;
	}
	l->v[l->n++] = v;
}

static value v_list(list *l) { return (value){.t = V_LIST, .l = l}; }
static value v_dict(dict *d) { return (value){.t = V_DICT, .d = d}; }

static value tuple2(R *r, value a, value b) {
	list *l = list_new(r, 2);
	l->tuple = true;
	list_push(r, l, a);
	list_push(r, l, b);
	return v_list(l);
}

static dict *dict_new(R *r) { return allocz(r, sizeof(dict)); }

static bool v_eq(R *r, value a, value b, int depth);

static value *dict_find(R *r, const dict *d, value k) {
	step(r, (int64_t)(d->n >> 4));
	for (size_t i = 0; i < d->n; i++)
		if (v_eq(r, d->k[i], k, 0)) return &d->v[i];
	return NULL;
}

static value *dict_find_s(const dict *d, const char *k, size_t n) {
	for (size_t i = 0; i < d->n; i++)
		if (d->k[i].t == V_STR && d->k[i].s.n == n && !memcmp(d->k[i].s.p, k, n)) return &d->v[i];
	return NULL;
}

static void dict_set(R *r, dict *d, value k, value v) {
	value *slot = dict_find(r, d, k);
	if (slot) {
		*slot = v;
		return;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 4;
		value *nk = alloc_arr(r, cap, sizeof(value)), *nv = alloc_arr(r, cap, sizeof(value));
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

// Filters that run a str method keep markupsafe's Markup type.
static value keep_safe(value from, value v) {
	if (from.t == V_STR && from.safe && v.t == V_STR) v.safe = 1;
	return v;
}

static bool is_iter(value v) { return v.t == V_LIST && (v.l->kind == LK_GEN || v.l->kind == LK_REVIT); }
static bool is_seq(value v) { return v.t == V_LIST && v.l->kind == LK_PLAIN; }

static bool truthy(value v) {
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

static const char *type_name(value v) {
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
static _Noreturn void undef_fail(R *r, value u) {
	fail(r, LANES_EINVAL, "%s", u.hint ? u.hint : "value is undefined");
}

static bool is_num(value v) { return v.t == V_INT || v.t == V_FLOAT || v.t == V_BOOL; }
static double num_f(value v) { return v.t == V_FLOAT ? v.f : v.t == V_INT ? (double)v.i : v.b; }
static bool is_intlike(value v) { return v.t == V_INT || v.t == V_BOOL; }
static int64_t num_i(value v) { return v.t == V_INT ? v.i : v.b; }

// ---- Python-compatible text forms ------------------------------------------------------------

// repr(float) as Python writes it: the shortest digits that read back the same.
static void fmt_float(R *r, buf *b, double d) {
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
	buf_put(r, b, o, (size_t)k);
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
		uint32_t c = utf8_dec(p, end, &l);
		if (c == (uint32_t)quote || c == '\\') {
			buf_putc(r, b, '\\');
			buf_putc(r, b, (char)c);
		} else if (c == '\n') buf_puts(r, b, "\\n");
		else if (c == '\r') buf_puts(r, b, "\\r");
		else if (c == '\t') buf_puts(r, b, "\\t");
		else if (!py_printable(c)) {
			if (c < 0x100) buf_printf(r, b, "\\x%02x", c);
			else if (c < 0x10000) buf_printf(r, b, "\\u%04x", c);
			else buf_printf(r, b, "\\U%08x", c);
		} else buf_put(r, b, p, (size_t)l);
		p += l;
	}
	buf_putc(r, b, quote);
}

static void to_buf(R *r, buf *b, value v, bool repr, int depth);

static void repr_items(R *r, buf *b, value v, int depth) {
	if (depth > MAX_VALUE_DEPTH) FAIL(r, "value nested too deeply");
	if (is_iter(v)) {
		buf_printf(r, b, "<%s object>", type_name(v));
		return;
	}
	if (v.t == V_LIST && v.l->kind != LK_PLAIN) { // dict_items([...])
		buf_puts(r, b, type_name(v));
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
			to_buf(r, b, v.l->v[i], true, depth + 1);
		}
		if (v.l->tuple && v.l->n == 1) buf_putc(r, b, ',');
		buf_putc(r, b, v.l->tuple ? ')' : ']');
	} else {
		buf_putc(r, b, '{');
		for (size_t i = 0; i < v.d->n; i++) {
			if (i) buf_puts(r, b, ", ");
			to_buf(r, b, v.d->k[i], true, depth + 1);
			buf_puts(r, b, ": ");
			to_buf(r, b, v.d->v[i], true, depth + 1);
		}
		buf_putc(r, b, '}');
	}
}

// str(v) (repr=false) or repr(v) (repr=true) as Python prints them.
static void to_buf(R *r, buf *b, value v, bool repr, int depth) {
	switch (v.t) {
	case V_UNDEF: if (repr) buf_puts(r, b, "Undefined"); break;
	case V_NONE: buf_puts(r, b, "None"); break;
	case V_BOOL: buf_puts(r, b, v.b ? "True" : "False"); break;
	case V_INT: buf_printf(r, b, "%lld", (long long)v.i); break;
	case V_FLOAT: fmt_float(r, b, v.f); break;
	case V_STR:
		if (repr) repr_str(r, b, v.s);
		else buf_put(r, b, v.s.p, v.s.n);
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
static str_t to_str(R *r, value v) {
	if (v.t == V_STR) return v.s;
	buf b = {0};
	to_buf(r, &b, v, false, 0);
	return (str_t){b.p ? b.p : "", b.n};
}

// ---- lexer -------------------------------------------------------------------------------------

enum tokt { T_EOF, T_TEXT, T_VBEG, T_VEND, T_BBEG, T_BEND, T_NAME, T_STR, T_INT, T_FLOAT, T_OP };
enum op {
	OP_NONE, OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_TILDE,
	OP_LBRACKET, OP_RBRACKET, OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE,
	OP_EQ, OP_NE, OP_GT, OP_GE, OP_LT, OP_LE, OP_ASSIGN, OP_DOT, OP_COLON, OP_PIPE, OP_COMMA,
	OP_SEMI, OP_IN, OP_NOTIN, OP_COUNT
};

static const struct {
	const char *s;
	uint8_t op;
} op_table[] = {
	{"//", OP_FLOORDIV}, {"**", OP_POW}, {"==", OP_EQ}, {"!=", OP_NE}, {">=", OP_GE}, {"<=", OP_LE},
	{"+", OP_ADD}, {"-", OP_SUB}, {"*", OP_MUL}, {"/", OP_DIV}, {"%", OP_MOD}, {"~", OP_TILDE},
	{"[", OP_LBRACKET}, {"]", OP_RBRACKET}, {"(", OP_LPAREN}, {")", OP_RPAREN}, {"{", OP_LBRACE},
	{"}", OP_RBRACE}, {">", OP_GT}, {"<", OP_LT}, {"=", OP_ASSIGN}, {".", OP_DOT}, {":", OP_COLON},
	{"|", OP_PIPE}, {",", OP_COMMA}, {";", OP_SEMI},
};

typedef struct token {
	uint8_t t, op;
	int line;
	str_t s;   // text, name, decoded string
	int64_t i;
	double f;
} token;

typedef struct {
	R *r;
	token *v;
	size_t n, cap;
	const char *src;
	size_t len;
	int line;
} lexer;

static token *lex_push(lexer *L, uint8_t t) {
	if (L->n == L->cap) {
		size_t cap = L->cap ? L->cap * 2 : 256;
		token *nv = alloc_arr(L->r, cap, sizeof(token));
		if (L->n) memcpy(nv, L->v, L->n * sizeof(token));
		L->v = nv;
		L->cap = cap;
	}
	token *k = &L->v[L->n++];
	memset(k, 0, sizeof *k);
	k->t = t;
	k->line = L->line;
	return k;
}

static int count_nl(const char *p, size_t n) {
	int k = 0;
	for (size_t i = 0; i < n; i++) k += p[i] == '\n';
	return k;
}

static _Noreturn void lex_fail(lexer *L, const char *msg) {
	fail(L->r, LANES_EFORMAT, "line %d: %s", L->line, msg);
}

// Applies `-` (strip all trailing whitespace) or lstrip_blocks to text before a tag.
static size_t strip_before(const char *text, size_t n, char sign, bool lstrip_ok, bool line_starting) {
	if (sign == '-') {
		size_t keep = 0, i = 0;
		while (i < n) {
			int w = ws_at(text + i, text + n);
			if (w) i += (size_t)w;
			else {
				int l;
				utf8_dec(text + i, text + n, &l);
				i += (size_t)l;
				keep = i;
			}
		}
		return keep;
	}
	if (sign == '+' || !lstrip_ok) return n;
	size_t lpos = 0;
	for (size_t i = n; i > 0; i--)
		if (text[i - 1] == '\n') { lpos = i; break; }
	if (lpos == 0 && !line_starting) return n;
	if (lpos == n) return n;
	for (size_t i = lpos; i < n;) {
		int w = ws_at(text + i, text + n);
		if (!w) return n;
		i += (size_t)w;
	}
	return lpos;
}

static void emit_text(lexer *L, const char *p, size_t n) {
	if (!n) return;
	token *k = lex_push(L, T_TEXT);
	k->s = (str_t){p, n};
}

static size_t skip_ws(const char *s, size_t i, size_t len) {
	for (int w; (w = ws_at(s + i, s + len)); ) i += (size_t)w;
	return i;
}

// Matches `raw` or `endraw` after `{%`/`{%-`/`{%+` at i; returns the end of the closing `%}`
// (with its stripping) or 0. *sign gets the opener's sign, *trimmed whether `-%}` was used.
static size_t match_rawtag(const char *s, size_t i, size_t len, const char *word, bool trim_nl, char *sign) {
	if (i + 2 > len || s[i] != '{' || s[i + 1] != '%') return 0;
	size_t j = i + 2;
	*sign = 0;
	if (j < len && (s[j] == '-' || s[j] == '+')) *sign = s[j++];
	j = skip_ws(s, j, len);
	size_t wl = strlen(word);
	if (j + wl > len || memcmp(s + j, word, wl)) return 0;
	j = skip_ws(s, j + wl, len);
	if (j + 3 <= len && s[j] == '+' && s[j + 1] == '%' && s[j + 2] == '}' && trim_nl) return j + 3;
	if (j + 3 <= len && s[j] == '-' && s[j + 1] == '%' && s[j + 2] == '}') return skip_ws(s, j + 3, len);
	if (j + 2 <= len && s[j] == '%' && s[j + 1] == '}') {
		j += 2;
		if (trim_nl && j < len && s[j] == '\n') j++;
		return j;
	}
	return 0;
}

static char unhex(char c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }
static bool ishex(char c) { return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'f'); }

// Decodes a string literal body as Python's unicode-escape codec does.
static str_t unescape(lexer *L, const char *p, size_t n) {
	char *o = alloc(L->r, n + 1);
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		if (p[i] != '\\' || i + 1 >= n) { o[k++] = p[i++]; continue; }
		char c = p[i + 1];
		i += 2;
		switch (c) {
		case '\n': break;
		case '\\': o[k++] = '\\'; break;
		case '\'': o[k++] = '\''; break;
		case '"': o[k++] = '"'; break;
		case 'a': o[k++] = 7; break;
		case 'b': o[k++] = 8; break;
		case 'f': o[k++] = 12; break;
		case 'n': o[k++] = '\n'; break;
		case 'r': o[k++] = '\r'; break;
		case 't': o[k++] = '\t'; break;
		case 'v': o[k++] = 11; break;
		case 'x': case 'u': case 'U': {
			int nd = c == 'x' ? 2 : c == 'u' ? 4 : 8;
			if (i + (size_t)nd > n) lex_fail(L, "truncated escape in string");
			uint32_t v = 0;
			for (int d = 0; d < nd; d++) {
				if (!ishex(p[i + (size_t)d])) lex_fail(L, "truncated escape in string");
				v = v * 16 + (uint32_t)unhex(p[i + (size_t)d]);
			}
			i += (size_t)nd;
			if (v > 0x10ffff) lex_fail(L, "illegal Unicode character in string");
			k += (size_t)utf8_enc(v, o + k);
			break;
		}
		default:
			if (c >= '0' && c <= '7') {
				uint32_t v = (uint32_t)(c - '0');
				for (int d = 0; d < 2 && i < n && p[i] >= '0' && p[i] <= '7'; d++) v = v * 8 + (uint32_t)(p[i++] - '0');
				k += (size_t)utf8_enc(v, o + k);
			} else {
				o[k++] = '\\';
				o[k++] = c;
			}
		}
	}
	return (str_t){o, k};
}

// Lexes the inside of a {{ }} or {% %} tag from i; returns the position after its end.
static size_t lex_tag(lexer *L, size_t i, bool block, bool *line_starting) {
	const char *s = L->src;
	size_t len = L->len;
	int balance = 0;
	for (;;) {
		if (i >= len) lex_fail(L, block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
		char end = block ? '%' : '}';
		if (balance == 0) {
			if (block && s[i] == '+' && i + 2 < len && s[i + 1] == '%' && s[i + 2] == '}') {
				lex_push(L, T_BEND);
				*line_starting = false;
				return i + 3;
			}
			if (s[i] == '-' && i + 2 < len && s[i + 1] == end && s[i + 2] == '}') {
				token *k = lex_push(L, block ? T_BEND : T_VEND);
				(void)k;
				size_t j = skip_ws(s, i + 3, len);
				*line_starting = j > i + 3 ? s[j - 1] == '\n' : false;
				L->line += count_nl(s + i, j - i);
				return j;
			}
			if (s[i] == end && i + 1 < len && s[i + 1] == '}') {
				lex_push(L, block ? T_BEND : T_VEND);
				size_t j = i + 2;
				*line_starting = false;
				if (block && j < len && s[j] == '\n') {
					j++;
					L->line++;
					*line_starting = true;
				}
				return j;
			}
		}
		int w = ws_at(s + i, s + len);
		if (w) {
			if (s[i] == '\n') L->line++;
			i += (size_t)w;
			continue;
		}
		char c = s[i];
		if (c >= '0' && c <= '9') {
			size_t j = i;
			while (j < len && ((s[j] >= '0' && s[j] <= '9') || s[j] == '_')) j++;
			bool isf = false;
			if (j + 1 < len && s[j] == '.' && s[j + 1] >= '0' && s[j + 1] <= '9') {
				isf = true;
				j++;
				while (j < len && ((s[j] >= '0' && s[j] <= '9') || s[j] == '_')) j++;
			}
			if (j < len && (s[j] | 32) == 'e') {
				size_t e = j + 1;
				if (e < len && (s[e] == '+' || s[e] == '-')) e++;
				if (e < len && s[e] >= '0' && s[e] <= '9') {
					isf = true;
					j = e;
					while (j < len && ((s[j] >= '0' && s[j] <= '9') || s[j] == '_')) j++;
				}
			}
			char tmp[64];
			size_t k = 0;
			for (size_t q = i; q < j && k < sizeof tmp - 1; q++)
				if (s[q] != '_') tmp[k++] = s[q];
			tmp[k] = 0;
			if (isf) {
				token *t = lex_push(L, T_FLOAT);
				t->f = strtod(tmp, NULL);
			} else {
				token *t = lex_push(L, T_INT);
				int base = 10;
				const char *num = tmp;
				if (tmp[0] == '0' && (tmp[1] | 32) == 'x') base = 16, num = tmp + 2, j = i + 2;
				else if (tmp[0] == '0' && (tmp[1] | 32) == 'o') base = 8, num = tmp + 2, j = i + 2;
				else if (tmp[0] == '0' && (tmp[1] | 32) == 'b') base = 2, num = tmp + 2, j = i + 2;
				if (base != 10) {
					while (j < len && (ishex(s[j]) || s[j] == '_')) j++;
					k = 0;
					for (size_t q = i + 2; q < j && k < sizeof tmp - 1; q++)
						if (s[q] != '_') tmp[k++] = s[q];
					tmp[k] = 0;
					num = tmp;
				}
				char *ep;
				errno = 0;
				unsigned long long v = strtoull(num, &ep, base);
				if (errno || *ep || v > INT64_MAX) lex_fail(L, "integer literal out of range");
				t->i = (int64_t)v;
			}
			i = j;
			continue;
		}
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
			size_t j = i + 1;
			while (j < len && ((s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z') ||
					   (s[j] >= '0' && s[j] <= '9') || s[j] == '_'))
				j++;
			token *t = lex_push(L, T_NAME);
			t->s = (str_t){s + i, j - i};
			i = j;
			continue;
		}
		if (c == '\'' || c == '"') {
			size_t j = i + 1;
			while (j < len && s[j] != c) j += s[j] == '\\' ? 2 : 1;
			if (j >= len) lex_fail(L, "unterminated string");
			token *t = lex_push(L, T_STR);
			t->s = unescape(L, s + i + 1, j - i - 1);
			L->line += count_nl(s + i, j - i);
			i = j + 1;
			continue;
		}
		size_t k;
		for (k = 0; k < sizeof op_table / sizeof op_table[0]; k++) {
			size_t ol = strlen(op_table[k].s);
			if (i + ol <= len && !memcmp(s + i, op_table[k].s, ol)) break;
		}
		if (k == sizeof op_table / sizeof op_table[0]) lex_fail(L, "unexpected character in tag");
		uint8_t op = op_table[k].op;
		if (op == OP_LBRACE || op == OP_LBRACKET || op == OP_LPAREN) balance++;
		if (op == OP_RBRACE || op == OP_RBRACKET || op == OP_RPAREN) {
			if (!balance) lex_fail(L, "unexpected closing bracket");
			balance--;
		}
		token *t = lex_push(L, T_OP);
		t->op = op;
		i += strlen(op_table[k].s);
	}
}

static void lex(lexer *L) {
	const char *s = L->src;
	size_t len = L->len, pos = 0;
	bool line_starting = true;
	L->line = 1;
	while (pos < len) {
		size_t i = pos;
		const char *hit = NULL;
		while (i + 1 < len) {
			hit = memchr(s + i, '{', len - i - 1);
			if (!hit) break;
			i = (size_t)(hit - s);
			if (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#') break;
			i++;
			hit = NULL;
		}
		if (!hit) {
			emit_text(L, s + pos, len - pos);
			break;
		}
		char kind = s[i + 1];
		char sign = i + 2 < len && (s[i + 2] == '-' || s[i + 2] == '+') ? s[i + 2] : 0;
		char rs;
		size_t raw_end = kind == '%' ? match_rawtag(s, i, len, "raw", false, &rs) : 0;
		size_t keep = strip_before(s + pos, i - pos, sign, kind != '{', line_starting);
		emit_text(L, s + pos, keep);
		L->line += count_nl(s + pos, i - pos);
		if (raw_end) {
			bool ls = s[raw_end - 1] == '\n';
			L->line += count_nl(s + i, raw_end - i);
			size_t j = raw_end, close = 0;
			char sign2 = 0;
			for (; j + 1 < len; j++)
				if (s[j] == '{' && s[j + 1] == '%' && (close = match_rawtag(s, j, len, "endraw", true, &sign2))) break;
			if (!close) lex_fail(L, "missing end of raw directive");
			size_t k = strip_before(s + raw_end, j - raw_end, sign2, true, ls);
			emit_text(L, s + raw_end, k);
			L->line += count_nl(s + raw_end, close - raw_end);
			line_starting = s[close - 1] == '\n';
			pos = close;
			continue;
		}
		size_t j = i + 2 + (sign ? 1 : 0);
		if (kind == '#') {
			size_t e = 0;
			for (; j + 1 < len; j++) {
				if ((s[j] == '+' || s[j] == '-') && j + 2 < len && s[j + 1] == '#' && s[j + 2] == '}') {
					e = s[j] == '-' ? skip_ws(s, j + 3, len) : j + 3;
					break;
				}
				if (s[j] == '#' && s[j + 1] == '}') {
					e = j + 2;
					if (e < len && s[e] == '\n') e++;
					break;
				}
			}
			if (!e) lex_fail(L, "missing end of comment tag");
			L->line += count_nl(s + i, e - i);
			line_starting = s[e - 1] == '\n';
			pos = e;
			continue;
		}
		lex_push(L, kind == '{' ? T_VBEG : T_BBEG);
		pos = lex_tag(L, j, kind == '%', &line_starting);
	}
	lex_push(L, T_EOF);
}

// ---- AST ---------------------------------------------------------------------------------------

enum nk {
	// expressions
	E_CONST, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_BIN, E_NEG, E_POS,
	E_AND, E_OR, E_NOT, E_COND, E_CMP, E_LIST, E_TUPLE, E_DICT,
	// statements
	S_BODY, S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_CALLBLOCK, S_FILTERBLOCK,
	S_WITH, S_BREAK, S_CONTINUE,
};

typedef struct filter_def filter_def;
typedef struct test_def test_def;

typedef struct node node;
struct node {
	uint8_t k;
	uint8_t op;       // E_BIN operator; E_TEST negated; S_SET target kind; S_FOR tuple target
	int line;
	node *a, *b, *c, *d;
	node **v;         // children: args, items, statements, defaults, filters
	str_t *names;     // keyword names of args (p NULL: positional), params, targets
	uint8_t *ops;     // E_CMP operators
	int n;            // entries in v / names / ops
	int npos;         // E_CALL/E_FILTER/E_TEST: positional args first
	str_t s;          // name, text
	value cst;        // E_CONST
	const filter_def *filter;
	const test_def *test;
	bool varargs, kwargs; // S_MACRO: body reads varargs / kwargs
};

typedef struct args {
	int n, npos;
	value *v;
	str_t *kn;
} args_t;

typedef value (*filter_fn)(R *r, value x, args_t *a);
typedef bool (*test_fn)(R *r, value x, args_t *a);
struct filter_def {
	const char *name;
	filter_fn fn;
};
struct test_def {
	const char *name;
	test_fn fn;
};
static const filter_def *find_filter(str_t name);
static const test_def *find_test(str_t name);

// ---- parser ------------------------------------------------------------------------------------

static token *cur(R *r) { return &r->tok[r->pos]; }
static token *peek(R *r, size_t k) { return &r->tok[r->pos + k < r->ntok ? r->pos + k : r->ntok - 1]; }
static void adv(R *r) {
	if (r->pos + 1 < r->ntok) r->pos++;
}

static _Noreturn void perr(R *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static _Noreturn void perr(R *r, const char *fmt, ...) {
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fail(r, LANES_EFORMAT, "line %d: %s", cur(r)->line, msg);
}

static const char *tok_desc(token *t) {
	static const char *const names[] = {
		[T_EOF] = "end of template", [T_TEXT] = "text", [T_VBEG] = "'{{'", [T_VEND] = "'}}'",
		[T_BBEG] = "'{%'", [T_BEND] = "'%}'", [T_NAME] = "name", [T_STR] = "string",
		[T_INT] = "integer", [T_FLOAT] = "float", [T_OP] = "operator",
	};
	return names[t->t];
}

static bool is_op(R *r, uint8_t op) { return cur(r)->t == T_OP && cur(r)->op == op; }
static bool is_name(R *r, const char *nm) { return cur(r)->t == T_NAME && str_eq(cur(r)->s, nm); }
static bool accept_op(R *r, uint8_t op) {
	if (!is_op(r, op)) return false;
	adv(r);
	return true;
}
static void expect_op(R *r, uint8_t op, const char *what) {
	if (!accept_op(r, op)) perr(r, "expected '%s', got %s", what, tok_desc(cur(r)));
}
static str_t expect_name(R *r) {
	if (cur(r)->t != T_NAME) perr(r, "expected a name, got %s", tok_desc(cur(r)));
	str_t s = cur(r)->s;
	adv(r);
	return s;
}
static void expect_bend(R *r) {
	if (cur(r)->t != T_BEND) perr(r, "expected end of statement block, got %s", tok_desc(cur(r)));
	adv(r);
}

static node *mk(R *r, uint8_t k) {
	node *n = allocz(r, sizeof *n);
	n->k = k;
	n->line = cur(r)->line;
	return n;
}

// A growable vector of node pointers (and parallel names) while parsing.
typedef struct {
	node **v;
	str_t *names;
	int n, cap;
} nvec;

static void nv_push(R *r, nvec *nv, node *x, str_t name) {
	if (nv->n == nv->cap) {
		int cap = nv->cap ? nv->cap * 2 : 4;
		node **v = alloc_arr(r, (size_t)cap, sizeof *v);
		str_t *nm = alloc_arr(r, (size_t)cap, sizeof *nm);
		if (nv->n) {
			memcpy(v, nv->v, (size_t)nv->n * sizeof *v);
			memcpy(nm, nv->names, (size_t)nv->n * sizeof *nm);
		}
		nv->v = v;
		nv->names = nm;
		nv->cap = cap;
	}
	nv->v[nv->n] = x;
	nv->names[nv->n++] = name;
}

static void enter(R *r) {
	if (++r->pdepth > MAX_PARSE_DEPTH) fail(r, LANES_ELIMIT, "line %d: template nested too deeply", cur(r)->line);
}
static void leave(R *r) { r->pdepth--; }

static node *parse_expr(R *r, bool with_cond);
static node *parse_unary(R *r, bool with_filter);
static node *parse_primary(R *r);
static node *parse_subscript_or_call(R *r, node *x);

// Call arguments after '(' up to ')': positional first, then name=value.
static void parse_args(R *r, node *n) {
	nvec nv = {0};
	int npos = 0;
	while (!is_op(r, OP_RPAREN)) {
		if (nv.n) {
			expect_op(r, OP_COMMA, ",");
			if (is_op(r, OP_RPAREN)) break;
		}
		if (cur(r)->t == T_NAME && peek(r, 1)->t == T_OP && peek(r, 1)->op == OP_ASSIGN) {
			str_t nm = cur(r)->s;
			adv(r);
			adv(r);
			nv_push(r, &nv, parse_expr(r, true), nm);
		} else {
			if (npos != nv.n) perr(r, "positional argument after keyword argument");
			nv_push(r, &nv, parse_expr(r, true), (str_t){0});
			npos++;
		}
	}
	adv(r);
	n->v = nv.v;
	n->names = nv.names;
	n->n = nv.n;
	n->npos = npos;
}

static node *parse_tuple(R *r, bool with_cond, bool explicit_parens) {
	node *first = NULL;
	nvec nv = {0};
	bool is_tuple = false;
	for (;;) {
		if (nv.n) {
			if (!accept_op(r, OP_COMMA)) break;
			is_tuple = true;
		}
		// a tuple ends before a closing token or the end of the tag
		token *t = cur(r);
		if (t->t == T_VEND || t->t == T_BEND || t->t == T_EOF || (t->t == T_OP && t->op == OP_RPAREN) ||
		    (t->t == T_NAME && (str_eq(t->s, "in") || str_eq(t->s, "recursive") || str_eq(t->s, "if")) && nv.n) ||
		    (t->t == T_OP && t->op == OP_ASSIGN))
			break;
		node *e = parse_expr(r, with_cond);
		if (!first) first = e;
		nv_push(r, &nv, e, (str_t){0});
	}
	if (!is_tuple) {
		if (first) return first;
		if (!explicit_parens) perr(r, "expected an expression, got %s", tok_desc(cur(r)));
	}
	node *n = mk(r, E_TUPLE);
	n->v = nv.v;
	n->n = nv.n;
	return n;
}

static node *parse_filter(R *r, node *x) {
	// after '|'
	str_t name = expect_name(r);
	while (is_op(r, OP_DOT)) { // dotted filter names are not supported, report clearly
		perr(r, "no filter named '%.*s.'", (int)name.n, name.p);
	}
	node *f = mk(r, E_FILTER);
	f->a = x;
	f->s = name;
	f->filter = find_filter(name);
	if (!f->filter) perr(r, "no filter named '%.*s'", (int)name.n, name.p);
	if (accept_op(r, OP_LPAREN)) parse_args(r, f);
	return f;
}

static node *parse_test(R *r, node *x) {
	// after 'is'
	node *t = mk(r, E_TEST);
	t->a = x;
	if (is_name(r, "not")) {
		adv(r);
		t->op = 1;
	}
	str_t name;
	if (cur(r)->t == T_NAME) name = expect_name(r);
	else if (cur(r)->t == T_OP && (cur(r)->op == OP_EQ || cur(r)->op == OP_NE || cur(r)->op == OP_LT ||
				       cur(r)->op == OP_LE || cur(r)->op == OP_GT || cur(r)->op == OP_GE))
		perr(r, "expected a test name, got operator");
	else
		perr(r, "expected a test name, got %s", tok_desc(cur(r)));
	t->s = name;
	t->test = find_test(name);
	if (!t->test) perr(r, "no test named '%.*s'", (int)name.n, name.p);
	token *c = cur(r);
	if (accept_op(r, OP_LPAREN)) parse_args(r, t);
	else if ((c->t == T_NAME || c->t == T_STR || c->t == T_INT || c->t == T_FLOAT ||
		  (c->t == T_OP && (c->op == OP_LPAREN || c->op == OP_LBRACKET || c->op == OP_LBRACE))) &&
		 !(c->t == T_NAME && (str_eq(c->s, "else") || str_eq(c->s, "or") || str_eq(c->s, "and")))) {
		if (c->t == T_NAME && str_eq(c->s, "is")) perr(r, "you cannot chain multiple tests with is");
		enter(r);
		node *arg = parse_subscript_or_call(r, parse_primary(r));
		leave(r);
		// postfix of the argument
		nvec nv = {0};
		nv_push(r, &nv, arg, (str_t){0});
		t->v = nv.v;
		t->names = nv.names;
		t->n = t->npos = 1;
	}
	return t;
}

static node *parse_subscript_or_call(R *r, node *x) {
	for (;;) {
		if (accept_op(r, OP_DOT)) {
			token *t = cur(r);
			if (t->t == T_NAME) {
				node *n = mk(r, E_ATTR);
				n->a = x;
				n->s = t->s;
				adv(r);
				x = n;
			} else if (t->t == T_INT) {
				node *n = mk(r, E_ITEM);
				n->a = x;
				n->b = mk(r, E_CONST);
				n->b->cst = v_int(t->i);
				adv(r);
				x = n;
			} else
				perr(r, "expected name or number after '.'");
		} else if (accept_op(r, OP_LBRACKET)) {
			// subscript: expr, or slice a:b:c
			node *parts[3] = {0};
			int k = 0;
			bool slice = false;
			enter(r);
			for (;;) {
				if (is_op(r, OP_COLON)) {
					adv(r);
					slice = true;
					if (++k > 2) perr(r, "invalid slice");
					continue;
				}
				if (is_op(r, OP_RBRACKET)) break;
				if (parts[k]) perr(r, "expected ']'");
				parts[k] = parse_expr(r, true);
				if (!slice && is_op(r, OP_COMMA)) perr(r, "tuple subscripts are not supported");
			}
			leave(r);
			adv(r);
			if (slice) {
				node *n = mk(r, E_SLICE);
				n->a = x;
				n->b = parts[0];
				n->c = parts[1];
				n->d = parts[2];
				x = n;
			} else {
				if (!parts[0]) perr(r, "expected an expression in '[]'");
				node *n = mk(r, E_ITEM);
				n->a = x;
				n->b = parts[0];
				x = n;
			}
		} else if (accept_op(r, OP_LPAREN)) {
			node *n = mk(r, E_CALL);
			n->a = x;
			enter(r);
			parse_args(r, n);
			leave(r);
			x = n;
		} else
			return x;
	}
}

static node *parse_primary(R *r) {
	token *t = cur(r);
	node *n;
	switch (t->t) {
	case T_NAME:
		n = mk(r, E_CONST);
		if (str_eq(t->s, "true") || str_eq(t->s, "True")) n->cst = v_bool(true);
		else if (str_eq(t->s, "false") || str_eq(t->s, "False")) n->cst = v_bool(false);
		else if (str_eq(t->s, "none") || str_eq(t->s, "None")) n->cst = NONE;
		else {
			n->k = E_NAME;
			n->s = t->s;
			if (str_eq(t->s, "varargs")) r->uses_varargs = true;
			if (str_eq(t->s, "kwargs")) r->uses_kwargs = true;
		}
		adv(r);
		return n;
	case T_STR: {
		n = mk(r, E_CONST);
		str_t s = t->s;
		adv(r);
		if (cur(r)->t == T_STR) { // adjacent literals concatenate
			buf b = {0};
			buf_put(r, &b, s.p, s.n);
			while (cur(r)->t == T_STR) {
				buf_put(r, &b, cur(r)->s.p, cur(r)->s.n);
				adv(r);
			}
			s = (str_t){b.p, b.n};
		}
		n->cst = v_str(s.p, s.n);
		return n;
	}
	case T_INT:
		n = mk(r, E_CONST);
		n->cst = v_int(t->i);
		adv(r);
		return n;
	case T_FLOAT:
		n = mk(r, E_CONST);
		n->cst = v_float(t->f);
		adv(r);
		return n;
	case T_OP:
		if (t->op == OP_LPAREN) {
			adv(r);
			n = parse_tuple(r, true, true);
			expect_op(r, OP_RPAREN, ")");
			return n;
		}
		if (t->op == OP_LBRACKET) {
			adv(r);
			n = mk(r, E_LIST);
			nvec nv = {0};
			while (!is_op(r, OP_RBRACKET)) {
				if (nv.n) {
					expect_op(r, OP_COMMA, ",");
					if (is_op(r, OP_RBRACKET)) break;
				}
				nv_push(r, &nv, parse_expr(r, true), (str_t){0});
			}
			adv(r);
			n->v = nv.v;
			n->n = nv.n;
			return n;
		}
		if (t->op == OP_LBRACE) {
			adv(r);
			n = mk(r, E_DICT);
			nvec keys = {0}, vals = {0};
			while (!is_op(r, OP_RBRACE)) {
				if (keys.n) {
					expect_op(r, OP_COMMA, ",");
					if (is_op(r, OP_RBRACE)) break;
				}
				nv_push(r, &keys, parse_expr(r, true), (str_t){0});
				expect_op(r, OP_COLON, ":");
				nv_push(r, &vals, parse_expr(r, true), (str_t){0});
			}
			adv(r);
			n->v = keys.v;
			n->n = keys.n;
			n->a = allocz(r, sizeof(node));
			n->a->v = vals.v;
			return n;
		}
		break;
	default: break;
	}
	perr(r, "unexpected %s", tok_desc(t));
}

static node *parse_filter_expr(R *r, node *x) {
	for (;;) {
		if (accept_op(r, OP_PIPE)) x = parse_filter(r, x);
		else if (is_name(r, "is")) {
			adv(r);
			x = parse_test(r, x);
		} else if (accept_op(r, OP_LPAREN)) {
			node *n = mk(r, E_CALL);
			n->a = x;
			parse_args(r, n);
			x = n;
		} else
			return x;
	}
}

static node *parse_unary(R *r, bool with_filter) {
	enter(r);
	node *n;
	if (is_op(r, OP_SUB) || is_op(r, OP_ADD)) {
		n = mk(r, is_op(r, OP_SUB) ? E_NEG : E_POS);
		adv(r);
		n->a = parse_unary(r, false);
	} else
		n = parse_primary(r);
	n = parse_subscript_or_call(r, n);
	if (with_filter) n = parse_filter_expr(r, n);
	leave(r);
	return n;
}

static node *bin(R *r, uint8_t op, node *a, node *b) {
	node *n = mk(r, E_BIN);
	n->op = op;
	n->a = a;
	n->b = b;
	return n;
}

static node *parse_pow(R *r) {
	node *x = parse_unary(r, true);
	while (accept_op(r, OP_POW)) x = bin(r, OP_POW, x, parse_unary(r, true));
	return x;
}

static node *parse_math2(R *r) {
	node *x = parse_pow(r);
	for (;;) {
		token *t = cur(r);
		if (t->t == T_OP && (t->op == OP_MUL || t->op == OP_DIV || t->op == OP_FLOORDIV || t->op == OP_MOD)) {
			uint8_t op = t->op;
			adv(r);
			x = bin(r, op, x, parse_pow(r));
		} else
			return x;
	}
}

static node *parse_concat(R *r) {
	node *x = parse_math2(r);
	while (accept_op(r, OP_TILDE)) x = bin(r, OP_TILDE, x, parse_math2(r));
	return x;
}

static node *parse_math1(R *r) {
	node *x = parse_concat(r);
	for (;;) {
		if (is_op(r, OP_ADD) || is_op(r, OP_SUB)) {
			uint8_t op = cur(r)->op;
			adv(r);
			x = bin(r, op, x, parse_concat(r));
		} else
			return x;
	}
}

static node *parse_compare(R *r) {
	node *x = parse_math1(r);
	nvec nv = {0};
	uint8_t ops[64];
	for (;;) {
		token *t = cur(r);
		uint8_t op = 0;
		if (t->t == T_OP && (t->op == OP_EQ || t->op == OP_NE || t->op == OP_LT || t->op == OP_LE ||
				     t->op == OP_GT || t->op == OP_GE)) {
			op = t->op;
			adv(r);
		} else if (is_name(r, "in")) {
			op = OP_IN;
			adv(r);
		} else if (is_name(r, "not") && peek(r, 1)->t == T_NAME && str_eq(peek(r, 1)->s, "in")) {
			op = OP_NOTIN;
			adv(r);
			adv(r);
		} else
			break;
		if (nv.n >= 64) perr(r, "comparison chain too long");
		ops[nv.n] = op;
		nv_push(r, &nv, parse_math1(r), (str_t){0});
	}
	if (!nv.n) return x;
	node *n = mk(r, E_CMP);
	n->a = x;
	n->v = nv.v;
	n->n = nv.n;
	n->ops = alloc(r, (size_t)nv.n);
	memcpy(n->ops, ops, (size_t)nv.n);
	return n;
}

static node *parse_not(R *r) {
	if (is_name(r, "not")) {
		adv(r);
		enter(r);
		node *n = mk(r, E_NOT);
		n->a = parse_not(r);
		leave(r);
		return n;
	}
	return parse_compare(r);
}

static node *parse_and(R *r) {
	node *x = parse_not(r);
	while (is_name(r, "and")) {
		adv(r);
		node *n = mk(r, E_AND);
		n->a = x;
		n->b = parse_not(r);
		x = n;
	}
	return x;
}

static node *parse_or(R *r) {
	node *x = parse_and(r);
	while (is_name(r, "or")) {
		adv(r);
		node *n = mk(r, E_OR);
		n->a = x;
		n->b = parse_and(r);
		x = n;
	}
	return x;
}

static node *parse_expr(R *r, bool with_cond) {
	enter(r);
	node *x = parse_or(r);
	if (with_cond) {
		while (is_name(r, "if")) {
			adv(r);
			node *n = mk(r, E_COND);
			n->a = x;
			n->b = parse_or(r);
			if (is_name(r, "else")) {
				adv(r);
				n->c = parse_expr(r, true);
			}
			x = n;
		}
	}
	leave(r);
	return x;
}

// Assignment targets: name, (name, name), or ns.attr when allowed.
static void parse_target(R *r, node *st, bool allow_ns) {
	if (allow_ns && cur(r)->t == T_NAME && peek(r, 1)->t == T_OP && peek(r, 1)->op == OP_DOT) {
		st->s = expect_name(r);
		adv(r);
		st->names = allocz(r, sizeof(str_t));
		st->names[0] = expect_name(r);
		st->n = 1;
		st->op = 2;
		return;
	}
	bool paren = accept_op(r, OP_LPAREN);
	nvec nv = {0};
	for (;;) {
		nv_push(r, &nv, NULL, expect_name(r));
		if (!accept_op(r, OP_COMMA)) break;
		if (cur(r)->t != T_NAME) break;
	}
	if (paren) expect_op(r, OP_RPAREN, ")");
	st->names = nv.names;
	st->n = nv.n;
	st->op = (nv.n > 1 || paren) ? 1 : 0;
	st->s = nv.names[0];
}

static node *parse_body(R *r, const char *const *ends, int nends, int *which);

// Macro/caller parameters after '(' : name [= default], ...
static void parse_params(R *r, node *m) {
	nvec nv = {0};
	while (!is_op(r, OP_RPAREN)) {
		if (nv.n) expect_op(r, OP_COMMA, ",");
		str_t nm = expect_name(r);
		node *dflt = NULL;
		if (accept_op(r, OP_ASSIGN)) dflt = parse_expr(r, true);
		else if (nv.n && nv.v[nv.n - 1]) perr(r, "non-default argument follows default argument");
		nv_push(r, &nv, dflt, nm);
	}
	adv(r);
	m->v = nv.v;
	m->names = nv.names;
	m->n = nv.n;
}

static node *parse_filter_chain(R *r, node *st) {
	// `name(args) | name ...` for {% filter %} and {% set x | f %}
	nvec nv = {0};
	do {
		node *f = parse_filter(r, NULL);
		nv_push(r, &nv, f, (str_t){0});
	} while (accept_op(r, OP_PIPE));
	st->v = nv.v;
	st->npos = nv.n; // filter count: n/names hold the assignment target
	return st;
}

static node *parse_statement(R *r) {
	// at the keyword after {%
	token *t = cur(r);
	if (t->t != T_NAME) perr(r, "expected a tag name, got %s", tok_desc(t));
	str_t kw = t->s;
	int which;
	enter(r);
	node *n = NULL;
	if (str_eq(kw, "if") || str_eq(kw, "elif")) {
		adv(r);
		n = mk(r, S_IF);
		n->a = parse_tuple(r, true, false);
		expect_bend(r);
		static const char *const ends[] = {"elif", "else", "endif"};
		n->b = parse_body(r, ends, 3, &which);
		if (which == 0) n->c = parse_statement(r);
		else {
			adv(r);
			expect_bend(r);
			if (which == 1) {
				static const char *const e2[] = {"endif"};
				n->c = parse_body(r, e2, 1, &which);
				adv(r);
				expect_bend(r);
			}
		}
	} else if (str_eq(kw, "for")) {
		adv(r);
		n = mk(r, S_FOR);
		parse_target(r, n, false);
		if (!is_name(r, "in")) perr(r, "expected 'in' in for loop");
		adv(r);
		n->a = parse_tuple(r, false, false);
		if (is_name(r, "if")) {
			adv(r);
			n->d = parse_expr(r, true);
		}
		if (is_name(r, "recursive")) perr(r, "recursive loops are not supported");
		expect_bend(r);
		static const char *const ends[] = {"endfor", "else"};
		n->b = parse_body(r, ends, 2, &which);
		adv(r);
		expect_bend(r);
		if (which == 1) {
			static const char *const e2[] = {"endfor"};
			n->c = parse_body(r, e2, 1, &which);
			adv(r);
			expect_bend(r);
		}
	} else if (str_eq(kw, "set")) {
		adv(r);
		n = mk(r, S_SET);
		parse_target(r, n, true);
		if (accept_op(r, OP_ASSIGN)) {
			n->a = parse_tuple(r, true, false);
			expect_bend(r);
		} else {
			if (n->op == 1) perr(r, "a block set takes one name");
			n->k = S_SETBLOCK;
			if (accept_op(r, OP_PIPE)) parse_filter_chain(r, n);
			expect_bend(r);
			static const char *const ends[] = {"endset"};
			n->b = parse_body(r, ends, 1, &which);
			adv(r);
			expect_bend(r);
		}
	} else if (str_eq(kw, "macro")) {
		adv(r);
		n = mk(r, S_MACRO);
		n->s = expect_name(r);
		expect_op(r, OP_LPAREN, "(");
		bool ova = r->uses_varargs, okw = r->uses_kwargs;
		r->uses_varargs = r->uses_kwargs = false;
		parse_params(r, n);
		expect_bend(r);
		static const char *const ends[] = {"endmacro"};
		n->b = parse_body(r, ends, 1, &which);
		adv(r);
		if (cur(r)->t == T_NAME) adv(r);
		expect_bend(r);
		n->varargs = r->uses_varargs;
		n->kwargs = r->uses_kwargs;
		r->uses_varargs = ova || n->varargs;
		r->uses_kwargs = okw || n->kwargs;
	} else if (str_eq(kw, "call")) {
		adv(r);
		n = mk(r, S_CALLBLOCK);
		node *caller = mk(r, S_MACRO);
		caller->s = (str_t){"caller", 6};
		if (accept_op(r, OP_LPAREN)) parse_params(r, caller);
		n->a = parse_expr(r, true);
		if (n->a->k != E_CALL) perr(r, "expected a call in {%% call %%}");
		expect_bend(r);
		static const char *const ends[] = {"endcall"};
		caller->b = parse_body(r, ends, 1, &which);
		adv(r);
		expect_bend(r);
		n->b = caller;
	} else if (str_eq(kw, "filter")) {
		adv(r);
		n = mk(r, S_FILTERBLOCK);
		parse_filter_chain(r, n);
		expect_bend(r);
		static const char *const ends[] = {"endfilter"};
		n->b = parse_body(r, ends, 1, &which);
		adv(r);
		expect_bend(r);
	} else if (str_eq(kw, "with")) {
		adv(r);
		n = mk(r, S_WITH);
		nvec nv = {0};
		while (cur(r)->t != T_BEND) {
			if (nv.n) expect_op(r, OP_COMMA, ",");
			str_t nm = expect_name(r);
			expect_op(r, OP_ASSIGN, "=");
			nv_push(r, &nv, parse_expr(r, true), nm);
		}
		expect_bend(r);
		n->v = nv.v;
		n->names = nv.names;
		n->n = nv.n;
		static const char *const ends[] = {"endwith"};
		n->b = parse_body(r, ends, 1, &which);
		adv(r);
		expect_bend(r);
	} else if (str_eq(kw, "generation") || str_eq(kw, "block")) {
		// HF's assistant-mask tag and plain blocks render their body in place
		bool block = str_eq(kw, "block");
		adv(r);
		if (block) expect_name(r);
		expect_bend(r);
		static const char *const e1[] = {"endgeneration"}, *const e2[] = {"endblock"};
		n = parse_body(r, block ? e2 : e1, 1, &which);
		adv(r);
		if (block && cur(r)->t == T_NAME) adv(r);
		expect_bend(r);
	} else if (str_eq(kw, "break") || str_eq(kw, "continue")) {
		n = mk(r, str_eq(kw, "break") ? S_BREAK : S_CONTINUE);
		adv(r);
		expect_bend(r);
	} else
		perr(r, "encountered unknown tag '%.*s'", (int)kw.n, kw.p);
	leave(r);
	return n;
}

// Statements up to a {% NAME %} with NAME in ends (left at NAME; *which is its index) or EOF
// when nends == 0.
static node *parse_body(R *r, const char *const *ends, int nends, int *which) {
	nvec nv = {0};
	node *body = mk(r, S_BODY);
	for (;;) {
		token *t = cur(r);
		if (t->t == T_EOF) {
			if (nends) perr(r, "unexpected end of template, expected '%s'", ends[nends - 1]);
			break;
		}
		if (t->t == T_TEXT) {
			node *n = mk(r, S_TEXT);
			n->s = t->s;
			adv(r);
			nv_push(r, &nv, n, (str_t){0});
		} else if (t->t == T_VBEG) {
			adv(r);
			node *n = mk(r, S_OUT);
			n->a = parse_tuple(r, true, false);
			if (cur(r)->t != T_VEND) perr(r, "expected '}}', got %s", tok_desc(cur(r)));
			adv(r);
			nv_push(r, &nv, n, (str_t){0});
		} else if (t->t == T_BBEG) {
			adv(r);
			token *k = cur(r);
			if (k->t == T_NAME) {
				for (int i = 0; i < nends; i++)
					if (str_eq(k->s, ends[i])) {
						*which = i;
						goto done;
					}
				static const char *const enders[] = {"endif", "endfor", "endset", "endmacro", "endcall",
								     "endfilter", "endwith", "endblock", "endgeneration",
								     "elif", "else", "endraw"};
				for (size_t i = 0; i < sizeof enders / sizeof enders[0]; i++)
					if (str_eq(k->s, enders[i])) perr(r, "unexpected '%s'", enders[i]);
			}
			nv_push(r, &nv, parse_statement(r), (str_t){0});
		} else
			perr(r, "unexpected %s", tok_desc(t));
	}
done:
	body->v = nv.v;
	body->n = nv.n;
	return body;
}

// ---- evaluation ----------------------------------------------------------------------------------

typedef struct scope scope;
struct scope {
	scope *parent;
	bool captured; // a macro closes over it: loops must not reuse it
	int n, cap;
	str_t *names;
	value *vals;
};

typedef value (*builtin_fn)(R *r, value self, args_t *a);

enum fnkind { FN_BUILTIN, FN_MACRO };
struct func {
	uint8_t kind;
	const char *name;
	builtin_fn fn;   // FN_BUILTIN
	value self;      // bound receiver for methods
	const node *def; // FN_MACRO: the S_MACRO node
	scope *closure;  // FN_MACRO: where it was defined
	value caller;    // FN_MACRO: the {% call %} body passed as `caller`
};

struct loopst {
	list *items;
	size_t i;
	int depth;
	value changed_last;
	bool changed_seen;
};

// Control flow out of a statement list.
enum flow { FLOW_NEXT, FLOW_BREAK, FLOW_CONTINUE };

static value eval(R *r, const node *e, scope *s);
static int exec(R *r, const node *st, scope *s, buf *out);
static value call_value(R *r, value f, args_t *a);

static scope *scope_new(R *r, scope *parent) {
	scope *s = allocz(r, sizeof *s);
	s->parent = parent;
	return s;
}

static void scope_set(R *r, scope *s, str_t name, value v) {
	for (int i = 0; i < s->n; i++)
		if (str_eqs(s->names[i], name)) {
			s->vals[i] = v;
			return;
		}
	if (s->n == s->cap) {
		int cap = s->cap ? s->cap * 2 : 8;
		str_t *nn = alloc_arr(r, (size_t)cap, sizeof *nn);
		value *nv = alloc_arr(r, (size_t)cap, sizeof *nv);
		if (s->n) {
			memcpy(nn, s->names, (size_t)s->n * sizeof *nn);
			memcpy(nv, s->vals, (size_t)s->n * sizeof *nv);
		}
		s->names = nn;
		s->vals = nv;
		s->cap = cap;
	}
	s->names[s->n] = name;
	s->vals[s->n++] = v;
}

static value builtin_global(R *r, str_t name);

static value lookup(R *r, scope *s, str_t name) {
	for (; s; s = s->parent) {
		for (int i = s->n - 1; i >= 0; i--)
			if (str_eqs(s->names[i], name)) return s->vals[i];
	}
	value g = builtin_global(r, name);
	if (g.t != V_UNDEF) return g;
	buf b = {0};
	buf_printf(r, &b, "'%.*s' is undefined", (int)(name.n > 100 ? 100 : name.n), name.p);
	buf_putc(r, &b, 0);
	return v_undef(b.p);
}

static value mk_func(R *r, const char *name, builtin_fn fn, value self) {
	func *f = allocz(r, sizeof *f);
	f->kind = FN_BUILTIN;
	f->name = name;
	f->fn = fn;
	f->self = self;
	return (value){.t = V_FUNC, .fn = f};
}

static const char *obj_desc(value v) {
	switch (v.t) {
	case V_NONE: return "None";
	case V_UNDEF: return "Undefined";
	case V_BOOL: return "bool object";
	case V_INT: return "int object";
	case V_FLOAT: return "float object";
	case V_STR: return "str object";
	case V_LIST: return v.l->tuple ? "tuple object" : "list object";
	case V_DICT: return "dict object";
	case V_NS: return "Namespace object";
	case V_LOOP: return "LoopContext object";
	default: return "function object";
	}
}

static value undef_attr(R *r, value obj, str_t name) {
	buf b = {0};
	buf_printf(r, &b, "'%s' has no attribute '%.*s'", obj_desc(obj), (int)(name.n > 100 ? 100 : name.n), name.p);
	buf_putc(r, &b, 0);
	return v_undef(b.p);
}

// Arguments: the positional at pos or the keyword name; *has tells whether it was given.
static value arg(args_t *a, int pos, const char *name, value dflt) {
	if (name)
		for (int i = a->npos; i < a->n; i++)
			if (str_eq(a->kn[i], name)) return a->v[i];
	if (pos >= 0 && pos < a->npos) return a->v[pos];
	return dflt;
}

static bool has_arg(args_t *a, int pos, const char *name) {
	if (name)
		for (int i = a->npos; i < a->n; i++)
			if (str_eq(a->kn[i], name)) return true;
	return pos >= 0 && pos < a->npos;
}

static str_t want_str(R *r, value v, const char *what) {
	if (v.t != V_STR) FAIL(r, "%s must be a string, not %s", what, type_name(v));
	return v.s;
}

static int64_t want_int(R *r, value v, const char *what) {
	if (!is_intlike(v)) FAIL(r, "%s must be an integer, not %s", what, type_name(v));
	return num_i(v);
}

// Materializes anything Jinja can iterate into a list: strings give characters, dicts keys.
static list *iter_list(R *r, value v) {
	switch (v.t) {
	case V_UNDEF: return list_new(r, 0);
	case V_LIST:
		if (is_iter(v)) { // single use, as Python's iterators
			if (v.l->consumed) return list_new(r, 0);
			v.l->consumed = true;
		}
		return v.l;
	case V_DICT: {
		list *l = list_new(r, v.d->n);
		for (size_t i = 0; i < v.d->n; i++) list_push(r, l, v.d->k[i]);
		return l;
	}
	case V_STR: {
		list *l = list_new(r, v.s.n);
		const char *p = v.s.p, *end = p + v.s.n;
		while (p < end) {
			int n;
			utf8_dec(p, end, &n);
			list_push(r, l, v_str(p, (size_t)n));
			p += n;
		}
		step(r, (int64_t)(v.s.n >> 4));
		return l;
	}
	default: FAIL(r, "'%s' object is not iterable", type_name(v));
	}
}

// ---- equality and ordering (Python semantics) -----------------------------------------------

static bool v_eq(R *r, value a, value b, int depth) {
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
			if (!v_eq(r, a.l->v[i], b.l->v[i], depth + 1)) return false;
		return true;
	case V_DICT:
		if (a.d->n != b.d->n) return false;
		for (size_t i = 0; i < a.d->n; i++) {
			value *o = dict_find(r, b.d, a.d->k[i]);
			if (!o || !v_eq(r, a.d->v[i], *o, depth + 1)) return false;
		}
		return true;
	case V_NS: return a.d == b.d;
	case V_FUNC: return a.fn == b.fn;
	case V_LOOP: return a.loop == b.loop;
	default: return false;
	}
}

static int v_cmp(R *r, value a, value b, const char *op, int depth) {
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
			if (v_eq(r, a.l->v[i], b.l->v[i], depth + 1)) continue;
			return v_cmp(r, a.l->v[i], b.l->v[i], op, depth + 1);
		}
		return a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
	}
	if (a.t == V_UNDEF) undef_fail(r, a);
	if (b.t == V_UNDEF) undef_fail(r, b);
	FAIL(r, "'%s' not supported between instances of '%s' and '%s'", op, type_name(a), type_name(b));
}

static bool v_in(R *r, value x, value c) {
	switch (c.t) {
	case V_STR: {
		if (x.t != V_STR) FAIL(r, "'in <string>' requires string as left operand, not %s", type_name(x));
		if (!x.s.n) return true;
		step(r, (int64_t)(c.s.n >> 6));
		return memmem(c.s.p, c.s.n, x.s.p, x.s.n) != NULL;
	}
	case V_LIST:
		step(r, (int64_t)(c.l->n >> 4));
		for (size_t i = 0; i < c.l->n; i++)
			if (v_eq(r, x, c.l->v[i], 0)) return true;
		return false;
	case V_DICT: return dict_find(r, c.d, x) != NULL;
	case V_UNDEF: return false;
	default: FAIL(r, "argument of type '%s' is not iterable", type_name(c));
	}
}

// ---- arithmetic ---------------------------------------------------------------------------------

static value concat_str(R *r, str_t a, str_t b) {
	uint64_t n;
	if (!ck_add(a.n, b.n, &n) || (int64_t)n > r->max_output)
		fail(r, LANES_ELIMIT, "template string longer than %lld bytes", (long long)r->max_output);
	char *p = alloc(r, (size_t)n + 1);
	if (a.n) memcpy(p, a.p, a.n);
	if (b.n) memcpy(p + a.n, b.p, b.n);
	p[n] = 0;
	step(r, (int64_t)(n >> 8));
	return v_str(p, (size_t)n);
}

static value repeat(R *r, value x, int64_t k) {
	if (k < 0) k = 0;
	if (x.t == V_STR) {
		uint64_t n;
		if (!ck_mul(x.s.n, (uint64_t)k, &n) || (int64_t)n > r->max_output)
			fail(r, LANES_ELIMIT, "template string longer than %lld bytes", (long long)r->max_output);
		char *p = alloc(r, (size_t)n + 1);
		for (int64_t i = 0; i < k; i++) memcpy(p + (size_t)i * x.s.n, x.s.p, x.s.n);
		p[n] = 0;
		step(r, (int64_t)(n >> 8));
		value v = v_str(p, (size_t)n);
		v.safe = x.safe;
		return v;
	}
	uint64_t n;
	if (!ck_mul(x.l->n, (uint64_t)k, &n) || n > (uint64_t)r->max_output) fail(r, LANES_ELIMIT, "template list too long");
	list *l = list_new(r, (size_t)n);
	l->tuple = x.l->tuple;
	for (int64_t i = 0; i < k; i++)
		for (size_t j = 0; j < x.l->n; j++) list_push(r, l, x.l->v[j]);
	step(r, (int64_t)n);
	return v_list(l);
}

static const char *op_sym(uint8_t op) {
	static const char *const syms[OP_COUNT] = {
		[OP_ADD] = "+", [OP_SUB] = "-", [OP_MUL] = "*", [OP_DIV] = "/", [OP_FLOORDIV] = "//",
		[OP_MOD] = "%", [OP_POW] = "**", [OP_TILDE] = "~", [OP_EQ] = "==", [OP_NE] = "!=",
		[OP_LT] = "<", [OP_LE] = "<=", [OP_GT] = ">", [OP_GE] = ">=",
	};
	return syms[op] ? syms[op] : "?";
}

static value str_format_percent(R *r, str_t fmt, value args);
static value html_escape(R *r, value x);

static double py_fmod(double a, double b) {
	double m = fmod(a, b);
	if (m != 0 && ((m < 0) != (b < 0))) m += b;
	return m;
}

static value arith(R *r, uint8_t op, value a, value b) {
	if (a.t == V_UNDEF) undef_fail(r, a);
	if (b.t == V_UNDEF) undef_fail(r, b);
	if (is_intlike(a) && is_intlike(b) && op != OP_DIV) {
		int64_t x = num_i(a), y = num_i(b), z;
		switch (op) {
		case OP_ADD: if (__builtin_add_overflow(x, y, &z)) goto ovf; return v_int(z);
		case OP_SUB: if (__builtin_sub_overflow(x, y, &z)) goto ovf; return v_int(z);
		case OP_MUL: if (__builtin_mul_overflow(x, y, &z)) goto ovf; return v_int(z);
		case OP_FLOORDIV:
		case OP_MOD: {
			if (y == 0) FAIL(r, op == OP_MOD ? "integer modulo by zero" : "integer division or modulo by zero");
			if (x == INT64_MIN && y == -1) goto ovf;
			int64_t q = x / y, m = x % y;
			if (m != 0 && ((m < 0) != (y < 0))) {
				q--;
				m += y;
			}
			return v_int(op == OP_MOD ? m : q);
		}
		case OP_POW: {
			if (y < 0) return v_float(pow((double)x, (double)y));
			int64_t acc = 1, base = x;
			for (int64_t e = y; e; e >>= 1) {
				if (e & 1 && __builtin_mul_overflow(acc, base, &acc)) goto ovf;
				if (e > 1 && __builtin_mul_overflow(base, base, &base)) goto ovf;
			}
			return v_int(acc);
		}
		default: break;
		}
	}
	if (is_num(a) && is_num(b)) {
		double x = num_f(a), y = num_f(b);
		switch (op) {
		case OP_ADD: return v_float(x + y);
		case OP_SUB: return v_float(x - y);
		case OP_MUL: return v_float(x * y);
		case OP_DIV:
			if (y == 0) FAIL(r, "division by zero");
			return v_float(x / y);
		case OP_FLOORDIV:
			if (y == 0) FAIL(r, "float floor division by zero");
			return v_float(floor(x / y));
		case OP_MOD:
			if (y == 0) FAIL(r, "float modulo");
			return v_float(py_fmod(x, y));
		case OP_POW: return v_float(pow(x, y));
		default: break;
		}
	}
	if (op == OP_ADD && a.t == V_STR && b.t == V_STR) {
		if (!a.safe && !b.safe) return concat_str(r, a.s, b.s);
		// Markup + str escapes the plain operand (markupsafe's __add__/__radd__)
		value x = a.safe ? a : html_escape(r, a), y = b.safe ? b : html_escape(r, b);
		value v = concat_str(r, x.s, y.s);
		v.safe = 1;
		return v;
	}
	if (op == OP_ADD && is_seq(a) && is_seq(b) && a.l->tuple == b.l->tuple) {
		list *l = list_new(r, a.l->n + b.l->n);
		l->tuple = a.l->tuple;
		for (size_t i = 0; i < a.l->n; i++) list_push(r, l, a.l->v[i]);
		for (size_t i = 0; i < b.l->n; i++) list_push(r, l, b.l->v[i]);
		step(r, (int64_t)(l->n >> 2));
		return v_list(l);
	}
	if (op == OP_MUL && (a.t == V_STR || is_seq(a)) && is_intlike(b)) return repeat(r, a, num_i(b));
	if (op == OP_MUL && (b.t == V_STR || is_seq(b)) && is_intlike(a)) return repeat(r, b, num_i(a));
	if (op == OP_MOD && a.t == V_STR) {
		if (!a.safe) return str_format_percent(r, a.s, b);
		list *args = list_new(r, 1);
		args->tuple = true;
		list *src = b.t == V_LIST && b.l->tuple ? b.l : NULL;
		if (src)
			for (size_t i = 0; i < src->n; i++) list_push(r, args, src->v[i].t == V_STR ? html_escape(r, src->v[i]) : src->v[i]);
		else
			list_push(r, args, b.t == V_STR ? html_escape(r, b) : b);
		value v = str_format_percent(r, a.s, v_list(args));
		v.safe = 1;
		return v;
	}
	if (op == OP_ADD && a.t == V_STR)
		FAIL(r, "can only concatenate str (not \"%s\") to str", type_name(b));
	if (op == OP_ADD && is_seq(a))
		FAIL(r, "can only concatenate list (not \"%s\") to list", type_name(b));
	FAIL(r, "unsupported operand type(s) for %s: '%s' and '%s'", op_sym(op), type_name(a), type_name(b));
ovf:
	FAIL(r, "integer overflow in '%s'", op_sym(op));
}

// ---- attribute and item access ----------------------------------------------------------------

typedef struct {
	uint8_t type;
	const char *name;
	builtin_fn fn;
} method_def;
static const method_def *find_method(uint8_t type, str_t name);
static bool unsafe_method(uint8_t type, str_t name);

static value loop_attr(R *r, loopst *L, str_t name);

// Python index (negative from the end) into n items; -1 when out of range.
static int64_t norm_index(int64_t i, size_t n) {
	if (i < 0) i += (int64_t)n;
	return i < 0 || i >= (int64_t)n ? -1 : i;
}

static value str_char_at(R *r, str_t s, int64_t i) {
	if (is_ascii(s.p, s.n)) {
		int64_t k = norm_index(i, s.n);
		return k < 0 ? UNDEF : v_str(s.p + k, 1);
	}
	size_t n = utf8_count(s.p, s.n);
	int64_t k = norm_index(i, n);
	if (k < 0) return UNDEF;
	list *l = iter_list(r, v_str(s.p, s.n));
	return l->v[k];
}

static value get_item(R *r, value obj, value key) {
	switch (obj.t) {
	case V_DICT: case V_NS: {
		value *v = dict_find(r, obj.d, key);
		if (v) return *v;
		break;
	}
	case V_LIST:
		if (is_intlike(key) && is_seq(obj)) {
			int64_t k = norm_index(num_i(key), obj.l->n);
			if (k >= 0) return obj.l->v[k];
		}
		break;
	case V_STR:
		if (is_intlike(key)) {
			value c = str_char_at(r, obj.s, num_i(key));
			if (c.t != V_UNDEF) return c;
		}
		break;
	case V_LOOP:
		if (key.t == V_STR) return loop_attr(r, obj.loop, key.s);
		break;
	case V_UNDEF: undef_fail(r, obj);
	default: break;
	}
	if (key.t == V_STR && obj.t != V_DICT && obj.t != V_NS) {
		const method_def *m = find_method(obj.t, key.s);
		if (m) return mk_func(r, m->name, m->fn, obj);
	}
	buf b = {0};
	if (key.t == V_STR) buf_printf(r, &b, "'%s' has no attribute '%.*s'", obj_desc(obj), (int)(key.s.n > 100 ? 100 : key.s.n), key.s.p);
	else {
		buf_printf(r, &b, "%s has no element ", obj_desc(obj));
		to_buf(r, &b, key, true, MAX_VALUE_DEPTH - 2);
	}
	buf_putc(r, &b, 0);
	return v_undef(b.p);
}

static value get_attr(R *r, value obj, str_t name) {
	if (obj.t == V_UNDEF) undef_fail(r, obj);
	if (name.n && name.p[0] == '_') return undef_attr(r, obj, name);
	if (obj.t == V_LOOP) return loop_attr(r, obj.loop, name);
	if (obj.t != V_NS) {
		const method_def *m = find_method(obj.t, name);
		if (m) return mk_func(r, m->name, m->fn, obj);
		if (unsafe_method(obj.t, name)) {
			buf b = {0};
			buf_printf(r, &b, "access to attribute '%.*s' of '%s' object is unsafe.", (int)name.n, name.p, type_name(obj));
			buf_putc(r, &b, 0);
			return v_undef(b.p);
		}
	}
	if (obj.t == V_DICT || obj.t == V_NS) {
		value *v = dict_find_s(obj.d, name.p, name.n);
		if (v) return *v;
	}
	return undef_attr(r, obj, name);
}

static value slice(R *r, value obj, value a, value b, value c) {
	if (obj.t == V_UNDEF) undef_fail(r, obj);
	int64_t step_ = c.t == V_NONE || c.t == V_UNDEF ? 1 : want_int(r, c, "slice step");
	if (step_ == 0) FAIL(r, "slice step cannot be zero");
	list *items;
	bool ascii = obj.t == V_STR && is_ascii(obj.s.p, obj.s.n);
	size_t n;
	if (is_seq(obj)) items = obj.l, n = items->n;
	else if (obj.t == V_LIST) {
		buf m = {0};
		buf_printf(r, &m, "'%s' object is not subscriptable", type_name(obj));
		buf_putc(r, &m, 0);
		return v_undef(m.p);
	} else if (obj.t == V_STR) {
		items = ascii ? NULL : iter_list(r, obj);
		n = ascii ? obj.s.n : items->n;
	} else
		FAIL(r, "'%s' object is not subscriptable", type_name(obj));
	int64_t N = (int64_t)n, lo, hi;
	bool has_a = a.t != V_NONE && a.t != V_UNDEF, has_b = b.t != V_NONE && b.t != V_UNDEF;
	int64_t ia = has_a ? want_int(r, a, "slice index") : 0, ib = has_b ? want_int(r, b, "slice index") : 0;
	if (step_ > 0) {
		lo = !has_a ? 0 : ia < 0 ? (ia + N < 0 ? 0 : ia + N) : (ia > N ? N : ia);
		hi = !has_b ? N : ib < 0 ? (ib + N < 0 ? 0 : ib + N) : (ib > N ? N : ib);
	} else {
		lo = !has_a ? N - 1 : ia < 0 ? (ia + N < 0 ? -1 : ia + N) : (ia >= N ? N - 1 : ia);
		hi = !has_b ? -1 : ib < 0 ? (ib + N < 0 ? -1 : ib + N) : (ib >= N ? N - 1 : ib);
	}
	if (obj.t == V_STR && ascii && step_ == 1) return v_str(obj.s.p + lo, hi > lo ? (size_t)(hi - lo) : 0);
	buf sb = {0};
	list *out = obj.t == V_LIST ? list_new(r, 0) : NULL;
	if (out) out->tuple = obj.l->tuple;
	for (int64_t i = lo; step_ > 0 ? i < hi : i > hi; i += step_) {
		step(r, 1);
		if (out) list_push(r, out, items->v[i]);
		else if (ascii) buf_putc(r, &sb, obj.s.p[i]);
		else buf_put(r, &sb, items->v[i].s.p, items->v[i].s.n);
	}
	if (out) return v_list(out);
	return v_str(sb.p ? sb.p : "", sb.n);
}

// ---- loop object ------------------------------------------------------------------------------

static value loop_cycle(R *r, value self, args_t *a) {
	if (a->npos == 0) FAIL(r, "no items for cycling given");
	return a->v[self.loop->i % (size_t)a->npos];
}

static value loop_changed(R *r, value self, args_t *a) {
	loopst *L = self.loop;
	list *l = list_new(r, (size_t)a->npos);
	for (int i = 0; i < a->npos; i++) list_push(r, l, a->v[i]);
	value v = v_list(l);
	if (L->changed_seen && v_eq(r, v, L->changed_last, 0)) return v_bool(false);
	L->changed_seen = true;
	L->changed_last = v;
	return v_bool(true);
}

static value loop_attr(R *r, loopst *L, str_t name) {
	size_t n = L->items->n, i = L->i;
	if (str_eq(name, "index")) return v_int((int64_t)i + 1);
	if (str_eq(name, "index0")) return v_int((int64_t)i);
	if (str_eq(name, "revindex")) return v_int((int64_t)(n - i));
	if (str_eq(name, "revindex0")) return v_int((int64_t)(n - i - 1));
	if (str_eq(name, "first")) return v_bool(i == 0);
	if (str_eq(name, "last")) return v_bool(i + 1 == n);
	if (str_eq(name, "length")) return v_int((int64_t)n);
	if (str_eq(name, "depth")) return v_int(L->depth);
	if (str_eq(name, "depth0")) return v_int(L->depth - 1);
	if (str_eq(name, "previtem")) return i > 0 ? L->items->v[i - 1] : v_undef("there is no previous item");
	if (str_eq(name, "nextitem")) return i + 1 < n ? L->items->v[i + 1] : v_undef("there is no next item");
	value self = {.t = V_LOOP, .loop = L};
	if (str_eq(name, "cycle")) return mk_func(r, "cycle", loop_cycle, self);
	if (str_eq(name, "changed")) return mk_func(r, "changed", loop_changed, self);
	return undef_attr(r, self, name);
}

// ---- calls --------------------------------------------------------------------------------------

static value call_macro(R *r, func *f, args_t *a) {
	const node *m = f->def;
	if (++r->calls > r->max_calls)
		fail(r, LANES_ELIMIT, "template macro calls nested deeper than %d", r->max_calls);
	scope *s = scope_new(r, f->closure);
	int np = m->n;
	list *varargs = list_new(r, 0);
	varargs->tuple = true;
	dict *kwargs = dict_new(r);
	for (int i = 0; i < a->npos; i++) {
		if (i < np) scope_set(r, s, m->names[i], a->v[i]);
		else if (m->varargs) list_push(r, varargs, a->v[i]);
		else FAIL(r, "macro '%.*s' takes not more than %d argument(s)", (int)m->s.n, m->s.p, np);
	}
	for (int i = a->npos; i < a->n; i++) {
		int k;
		for (k = 0; k < np; k++)
			if (str_eqs(m->names[k], a->kn[i])) break;
		if (k < np) {
			if (k < a->npos) FAIL(r, "macro '%.*s' got multiple values for argument '%.*s'", (int)m->s.n, m->s.p, (int)a->kn[i].n, a->kn[i].p);
			scope_set(r, s, m->names[k], a->v[i]);
		} else if (str_eq(a->kn[i], "caller") && f->caller.t == V_UNDEF) {
			scope_set(r, s, a->kn[i], a->v[i]);
		} else if (m->kwargs)
			dict_set(r, kwargs, v_str(a->kn[i].p, a->kn[i].n), a->v[i]);
		else
			FAIL(r, "macro '%.*s' takes no keyword argument '%.*s'", (int)m->s.n, m->s.p, (int)a->kn[i].n, a->kn[i].p);
	}
	for (int k = a->npos; k < np; k++) {
		bool given = false;
		for (int i = a->npos; i < a->n; i++)
			if (str_eqs(m->names[k], a->kn[i])) given = true;
		if (given) continue;
		// defaults are evaluated at call time, seeing the earlier parameters
		scope_set(r, s, m->names[k], m->v[k] ? eval(r, m->v[k], s) : v_undef(NULL));
		if (!m->v[k]) {
			buf b = {0};
			buf_printf(r, &b, "parameter '%.*s' was not provided", (int)m->names[k].n, m->names[k].p);
			buf_putc(r, &b, 0);
			scope_set(r, s, m->names[k], v_undef(b.p));
		}
	}
	scope_set(r, s, (str_t){"varargs", 7}, v_list(varargs));
	scope_set(r, s, (str_t){"kwargs", 6}, v_dict(kwargs));
	if (f->caller.t != V_UNDEF) scope_set(r, s, (str_t){"caller", 6}, f->caller);
	buf out = {0};
	exec(r, m->b, s, &out);
	r->calls--;
	return v_str(out.p ? out.p : "", out.n); // without autoescape a macro returns a plain str
}

static bool markup_escapes_args(const char *name) {
	static const char *const names[] = {"capitalize", "title", "lower", "upper", "replace", "lstrip", "rstrip",
					    "center", "strip", "swapcase", "zfill", "format", "casefold"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (!strcmp(name, names[i])) return true;
	return false;
}

static value html_escape(R *r, value x);

static value call_value(R *r, value f, args_t *a) {
	if (f.t == V_UNDEF) undef_fail(r, f);
	if (f.t != V_FUNC) FAIL(r, "'%s' object is not callable", type_name(f));
	if (f.fn->kind == FN_MACRO) return call_macro(r, f.fn, a);
	value self = f.fn->self;
	if (self.t != V_STR || !self.safe) return f.fn->fn(r, self, a);
	// a method of a Markup string: markupsafe escapes arguments and keeps the Markup type
	bool esc = markup_escapes_args(f.fn->name);
	if (esc)
		for (int i = 0; i < a->n; i++)
			if (a->v[i].t == V_STR) a->v[i] = html_escape(r, a->v[i]);
	value v = f.fn->fn(r, self, a);
	if (v.t == V_STR && (esc || !strcmp(f.fn->name, "join"))) v.safe = 1;
	if (v.t == V_LIST && strstr(f.fn->name, "split"))
		for (size_t i = 0; i < v.l->n; i++) v.l->v[i].safe = 1;
	return v;
}

static void eval_args(R *r, const node *e, scope *s, args_t *a, value *first) {
	int extra = first ? 1 : 0;
	a->n = e->n + extra;
	a->npos = e->npos + extra;
	a->v = alloc_arr(r, (size_t)a->n + 1, sizeof(value));
	a->kn = alloc_arr(r, (size_t)a->n + 1, sizeof(str_t));
	if (first) {
		a->v[0] = *first;
		a->kn[0] = (str_t){0};
	}
	for (int i = 0; i < e->n; i++) {
		a->v[i + extra] = eval(r, e->v[i], s);
		a->kn[i + extra] = e->names[i];
	}
}

// ---- expression evaluation --------------------------------------------------------------------

static value eval(R *r, const node *e, scope *s) {
	step(r, 1);
	if (++r->depth > MAX_EVAL_DEPTH) fail(r, LANES_ELIMIT, "template evaluation nested too deeply");
	int saved_line = r->line;
	r->line = e->line;
	value v;
	switch (e->k) {
	case E_CONST: v = e->cst; break;
	case E_NAME: v = lookup(r, s, e->s); break;
	case E_ATTR: v = get_attr(r, eval(r, e->a, s), e->s); break;
	case E_ITEM: {
		value o = eval(r, e->a, s);
		v = keep_safe(o, get_item(r, o, eval(r, e->b, s)));
		break;
	}
	case E_SLICE: {
		value o = eval(r, e->a, s);
		value a = e->b ? eval(r, e->b, s) : NONE, b = e->c ? eval(r, e->c, s) : NONE, c = e->d ? eval(r, e->d, s) : NONE;
		v = keep_safe(o, slice(r, o, a, b, c));
		break;
	}
	case E_CALL: {
		value f = eval(r, e->a, s);
		args_t a;
		eval_args(r, e, s, &a, NULL);
		v = call_value(r, f, &a);
		break;
	}
	case E_FILTER: {
		value x = eval(r, e->a, s);
		args_t a;
		eval_args(r, e, s, &a, NULL);
		v = e->filter->fn(r, x, &a);
		break;
	}
	case E_TEST: {
		value x = eval(r, e->a, s);
		args_t a;
		eval_args(r, e, s, &a, NULL);
		bool t = e->test->fn(r, x, &a);
		v = v_bool(e->op ? !t : t);
		break;
	}
	case E_BIN: {
		value a = eval(r, e->a, s), b = eval(r, e->b, s);
		if (e->op == OP_TILDE) {
			str_t x = to_str(r, a), y = to_str(r, b);
			v = concat_str(r, x, y);
		} else
			v = arith(r, e->op, a, b);
		break;
	}
	case E_NEG: case E_POS: {
		value a = eval(r, e->a, s);
		if (a.t == V_UNDEF) undef_fail(r, a);
		if (!is_num(a)) FAIL(r, "bad operand type for unary %s: '%s'", e->k == E_NEG ? "-" : "+", type_name(a));
		if (e->k == E_POS) v = a.t == V_BOOL ? v_int(a.b) : a;
		else if (a.t == V_FLOAT) v = v_float(-a.f);
		else if (num_i(a) == INT64_MIN) FAIL(r, "integer overflow in '-'");
		else v = v_int(-num_i(a));
		break;
	}
	case E_AND: {
		value a = eval(r, e->a, s);
		v = truthy(a) ? eval(r, e->b, s) : a;
		break;
	}
	case E_OR: {
		value a = eval(r, e->a, s);
		v = truthy(a) ? a : eval(r, e->b, s);
		break;
	}
	case E_NOT: v = v_bool(!truthy(eval(r, e->a, s))); break;
	case E_COND:
		if (truthy(eval(r, e->b, s))) v = eval(r, e->a, s);
		else v = e->c ? eval(r, e->c, s) : v_undef("the inline if-expression evaluated to false and no else section was defined.");
		break;
	case E_CMP: {
		value a = eval(r, e->a, s);
		v = v_bool(true);
		for (int i = 0; i < e->n; i++) {
			value b = eval(r, e->v[i], s);
			bool ok;
			switch (e->ops[i]) {
			case OP_EQ: ok = v_eq(r, a, b, 0); break;
			case OP_NE: ok = !v_eq(r, a, b, 0); break;
			case OP_LT: ok = v_cmp(r, a, b, "<", 0) < 0; break;
			case OP_LE: ok = v_cmp(r, a, b, "<=", 0) <= 0; break;
			case OP_GT: ok = v_cmp(r, a, b, ">", 0) > 0; break;
			case OP_GE: ok = v_cmp(r, a, b, ">=", 0) >= 0; break;
			case OP_IN: ok = v_in(r, a, b); break;
			default: ok = !v_in(r, a, b); break;
			}
			if (!ok) {
				v = v_bool(false);
				break;
			}
			a = b;
		}
		break;
	}
	case E_LIST: case E_TUPLE: {
		list *l = list_new(r, (size_t)e->n);
		l->tuple = e->k == E_TUPLE;
		for (int i = 0; i < e->n; i++) list_push(r, l, eval(r, e->v[i], s));
		v = v_list(l);
		break;
	}
	case E_DICT: {
		dict *d = dict_new(r);
		for (int i = 0; i < e->n; i++) {
			value k = eval(r, e->v[i], s);
			if (k.t == V_LIST && !k.l->tuple) FAIL(r, "unhashable type: 'list'");
			if (k.t == V_DICT || k.t == V_NS) FAIL(r, "unhashable type: 'dict'");
			dict_set(r, d, k, eval(r, e->a->v[i], s));
		}
		v = v_dict(d);
		break;
	}
	default: FAIL(r, "internal: bad expression node");
	}
	r->line = saved_line;
	r->depth--;
	return v;
}

// ---- statements ---------------------------------------------------------------------------------

static void assign_targets(R *r, const node *st, scope *s, value v) {
	if (st->op != 1) {
		scope_set(r, s, st->s, v);
		return;
	}
	if (v.t != V_LIST && v.t != V_STR && v.t != V_DICT) FAIL(r, "cannot unpack non-iterable %s object", type_name(v));
	list *l = iter_list(r, v);
	if (l->n != (size_t)st->n)
		FAIL(r, l->n < (size_t)st->n ? "not enough values to unpack (expected %d, got %zu)" : "too many values to unpack (expected %d, got %zu)", st->n, l->n);
	for (int i = 0; i < st->n; i++) scope_set(r, s, st->names[i], l->v[i]);
}

static value apply_filters(R *r, const node *st, scope *s, value x) {
	for (int i = 0; i < st->npos; i++) {
		const node *f = st->v[i];
		args_t a;
		eval_args(r, f, s, &a, NULL);
		x = f->filter->fn(r, x, &a);
	}
	return x;
}

static void output(R *r, buf *out, value v) {
	if (v.t == V_STR) buf_put(r, out, v.s.p, v.s.n);
	else to_buf(r, out, v, false, 0);
}

// An empty child scope of parent, reusing prev's storage when nothing captured it.
static scope *scope_fresh(R *r, scope *prev, scope *parent) {
	if (!prev || prev->captured) return scope_new(r, parent);
	prev->n = 0;
	return prev;
}

static int exec_for(R *r, const node *st, scope *s, buf *out) {
	value it = eval(r, st->a, s);
	list *items = iter_list(r, it);
	if (st->d) { // `for x in xs if cond`: filter first so loop.length counts what runs
		list *kept = list_new(r, 0);
		scope *fs = NULL;
		for (size_t i = 0; i < items->n; i++) {
			fs = scope_fresh(r, fs, s);
			assign_targets(r, st, fs, items->v[i]);
			if (truthy(eval(r, st->d, fs))) list_push(r, kept, items->v[i]);
		}
		items = kept;
	}
	loopst *L = allocz(r, sizeof *L);
	L->items = items;
	L->depth = 1; // only recursive loops (not supported) go deeper
	scope *is = NULL;
	for (size_t i = 0; i < items->n; i++) {
		L->i = i;
		is = scope_fresh(r, is, s); // each iteration starts from an empty scope
		scope_set(r, is, (str_t){"loop", 4}, (value){.t = V_LOOP, .loop = L});
		assign_targets(r, st, is, items->v[i]);
		int fl = exec(r, st->b, is, out);
		if (fl == FLOW_BREAK) break;
	}
	if (!items->n && st->c) return exec(r, st->c, s, out);
	return FLOW_NEXT;
}

static value make_macro(R *r, const node *def, scope *s) {
	func *f = allocz(r, sizeof *f);
	f->kind = FN_MACRO;
	f->name = "macro";
	f->def = def;
	f->closure = s;
	s->captured = true;
	f->caller = UNDEF;
	return (value){.t = V_FUNC, .fn = f};
}

static int exec(R *r, const node *st, scope *s, buf *out) {
	step(r, 1);
	if (++r->depth > MAX_EVAL_DEPTH) fail(r, LANES_ELIMIT, "template evaluation nested too deeply");
	r->line = st->line;
	int fl = FLOW_NEXT;
	switch (st->k) {
	case S_BODY:
		for (int i = 0; i < st->n && fl == FLOW_NEXT; i++) fl = exec(r, st->v[i], s, out);
		break;
	case S_TEXT: buf_put(r, out, st->s.p, st->s.n); break;
	case S_OUT: output(r, out, eval(r, st->a, s)); break;
	case S_IF:
		if (truthy(eval(r, st->a, s))) fl = exec(r, st->b, s, out);
		else if (st->c) fl = exec(r, st->c, s, out);
		break;
	case S_FOR: fl = exec_for(r, st, s, out); break;
	case S_SET: {
		value v = eval(r, st->a, s);
		if (st->op == 2) {
			value ns = lookup(r, s, st->s);
			if (ns.t != V_NS) FAIL(r, "cannot assign attribute on non-namespace object");
			dict_set(r, ns.d, v_str(st->names[0].p, st->names[0].n), v);
		} else
			assign_targets(r, st, s, v);
		break;
	}
	case S_SETBLOCK: {
		buf b = {0};
		exec(r, st->b, s, &b);
		value v = v_str(b.p ? b.p : "", b.n);
		v = apply_filters(r, st, s, v);
		if (st->op == 2) {
			value ns = lookup(r, s, st->s);
			if (ns.t != V_NS) FAIL(r, "cannot assign attribute on non-namespace object");
			dict_set(r, ns.d, v_str(st->names[0].p, st->names[0].n), v);
		} else
			scope_set(r, s, st->s, v);
		break;
	}
	case S_MACRO: scope_set(r, s, st->s, make_macro(r, st, s)); break;
	case S_CALLBLOCK: {
		const node *ce = st->a;
		value f = eval(r, ce->a, s);
		args_t a;
		eval_args(r, ce, s, &a, NULL);
		if (f.t == V_FUNC && f.fn->kind == FN_MACRO) {
			func *g = alloc(r, sizeof *g);
			*g = *f.fn;
			g->caller = make_macro(r, st->b, s);
			f.fn = g;
		}
		output(r, out, call_value(r, f, &a));
		break;
	}
	case S_FILTERBLOCK: {
		buf b = {0};
		exec(r, st->b, s, &b);
		output(r, out, apply_filters(r, st, s, v_str(b.p ? b.p : "", b.n)));
		break;
	}
	case S_WITH: {
		scope *ws = scope_new(r, s);
		for (int i = 0; i < st->n; i++) scope_set(r, ws, st->names[i], eval(r, st->v[i], s));
		fl = exec(r, st->b, ws, out);
		break;
	}
	case S_BREAK: fl = FLOW_BREAK; break;
	case S_CONTINUE: fl = FLOW_CONTINUE; break;
	default: FAIL(r, "internal: bad statement node");
	}
	r->depth--;
	return fl;
}

// ---- string helpers ------------------------------------------------------------------------------

static bool in_chars(uint32_t c, str_t chars) {
	const char *p = chars.p, *end = p + chars.n;
	while (p < end) {
		int l;
		if (utf8_dec(p, end, &l) == c) return true;
		p += l;
	}
	return false;
}

// Python str.strip/lstrip/rstrip; chars NULL strips whitespace.
static str_t py_strip(str_t s, const str_t *chars, bool left, bool right) {
	const char *p = s.p, *end = s.p + s.n;
	if (left)
		while (p < end) {
			int l;
			uint32_t c = utf8_dec(p, end, &l);
			if (chars ? !in_chars(c, *chars) : !py_space(c)) break;
			p += l;
		}
	if (right) {
		const char *keep = p, *q = p;
		while (q < end) {
			int l;
			uint32_t c = utf8_dec(q, end, &l);
			q += l;
			if (chars ? !in_chars(c, *chars) : !py_space(c)) keep = q;
		}
		end = keep;
	}
	return (str_t){p, (size_t)(end - p)};
}

enum casemode { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_TITLE_PY, CASE_TITLE_JINJA, CASE_SWAP };

static bool jinja_word_sep(uint32_t c) {
	return py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
}

static value map_case(R *r, str_t s, int mode) {
	char *o = alloc(r, s.n * 2 + 8);
	size_t k = 0, cap = s.n * 2 + 8;
	const char *p = s.p, *end = s.p + s.n;
	bool first = true, prev_cased = false, prev_sep = true;
	while (p < end) {
		int l;
		uint32_t c = utf8_dec(p, end, &l), m = c;
		switch (mode) {
		case CASE_UPPER: m = cp_upper(c); break;
		case CASE_LOWER: m = cp_lower(c); break;
		case CASE_CAPITALIZE: m = first ? cp_upper(c) : cp_lower(c); break;
		case CASE_TITLE_PY: m = prev_cased ? cp_lower(c) : cp_upper(c); break;
		case CASE_TITLE_JINJA: m = jinja_word_sep(c) ? c : prev_sep ? cp_upper(c) : cp_lower(c); break;
		case CASE_SWAP: m = cp_upper(c) != c ? cp_upper(c) : cp_lower(c); break;
		}
		if (mode == CASE_TITLE_PY) prev_cased = cp_cased(c);
		prev_sep = jinja_word_sep(c);
		bool was_first = first;
		first = false;
		if (k + 4 >= cap) break;
		if (c == 0xdf && (mode == CASE_UPPER || (mode == CASE_CAPITALIZE && was_first) || mode == CASE_SWAP)) {
			o[k++] = 'S'; // Python upper-cases sharp s to two letters
			o[k++] = mode == CASE_CAPITALIZE ? 's' : 'S';
		} else if (m == c) {
			memcpy(o + k, p, (size_t)l);
			k += (size_t)l;
		} else
			k += (size_t)utf8_enc(m, o + k);
		p += l;
	}
	o[k] = 0;
	step(r, (int64_t)(s.n >> 6));
	return v_str(o, k);
}

static value str_replace(R *r, str_t s, str_t old, str_t nw, int64_t count) {
	buf b = {0};
	if (count < 0) count = INT64_MAX;
	if (!old.n) { // inserts nw around every character
		const char *p = s.p, *end = s.p + s.n;
		int64_t done = 0;
		if (done < count) buf_put(r, &b, nw.p, nw.n), done++;
		while (p < end) {
			int l;
			utf8_dec(p, end, &l);
			buf_put(r, &b, p, (size_t)l);
			p += l;
			if (done < count) buf_put(r, &b, nw.p, nw.n), done++;
		}
		return v_str(b.p ? b.p : "", b.n);
	}
	const char *p = s.p, *end = s.p + s.n;
	int64_t done = 0;
	while (p < end && done < count) {
		const char *h = memmem(p, (size_t)(end - p), old.p, old.n);
		if (!h) break;
		buf_put(r, &b, p, (size_t)(h - p));
		buf_put(r, &b, nw.p, nw.n);
		p = h + old.n;
		done++;
	}
	if (!done) return v_str(s.p, s.n);
	buf_put(r, &b, p, (size_t)(end - p));
	return v_str(b.p ? b.p : "", b.n);
}

// str.split / rsplit (sep NULL: runs of whitespace).
static value str_split(R *r, str_t s, const str_t *sep, int64_t maxsplit, bool from_right) {
	list *l = list_new(r, 0);
	const char *p = s.p, *end = s.p + s.n;
	if (maxsplit < 0) maxsplit = INT64_MAX;
	if (sep && !sep->n) FAIL(r, "empty separator");
	if (!from_right) {
		if (!sep) {
			int64_t done = 0;
			for (;;) {
				int w;
				while ((w = ws_at(p, end))) p += w;
				if (p >= end) break;
				if (done == maxsplit) {
					str_t rest = py_strip((str_t){p, (size_t)(end - p)}, NULL, false, true);
					list_push(r, l, v_str(rest.p, rest.n));
					break;
				}
				const char *q = p;
				while (q < end && !ws_at(q, end)) {
					int k;
					utf8_dec(q, end, &k);
					q += k;
				}
				list_push(r, l, v_str(p, (size_t)(q - p)));
				done++;
				p = q;
			}
		} else {
			int64_t done = 0;
			for (;;) {
				const char *h = done < maxsplit ? memmem(p, (size_t)(end - p), sep->p, sep->n) : NULL;
				if (!h) {
					list_push(r, l, v_str(p, (size_t)(end - p)));
					break;
				}
				list_push(r, l, v_str(p, (size_t)(h - p)));
				p = h + sep->n;
				done++;
			}
		}
		step(r, (int64_t)l->n);
		return v_list(l);
	}
	// rsplit: collect from the right, then reverse
	list *rev = list_new(r, 0);
	int64_t done = 0;
	if (!sep) {
		for (;;) {
			while (end > p && py_space((unsigned char)end[-1])) end--;
			if (end <= p) break;
			if (done == maxsplit) {
				list_push(r, rev, v_str(p, (size_t)(end - p)));
				break;
			}
			const char *q = end;
			while (q > p && !py_space((unsigned char)q[-1])) q--;
			list_push(r, rev, v_str(q, (size_t)(end - q)));
			done++;
			end = q;
		}
	} else {
		for (;;) {
			const char *h = NULL;
			if (done < maxsplit && (size_t)(end - p) >= sep->n)
				for (const char *q = end - sep->n; q >= p; q--)
					if (!memcmp(q, sep->p, sep->n)) { h = q; break; }
			if (!h) {
				list_push(r, rev, v_str(p, (size_t)(end - p)));
				break;
			}
			list_push(r, rev, v_str(h + sep->n, (size_t)(end - h - sep->n)));
			end = h;
			done++;
		}
	}
	for (size_t i = rev->n; i > 0; i--) list_push(r, l, rev->v[i - 1]);
	step(r, (int64_t)l->n);
	return v_list(l);
}

// Python str.splitlines(): the line breaks Python knows.
static list *splitlines(R *r, str_t s, bool keepends) {
	list *l = list_new(r, 0);
	const char *p = s.p, *end = s.p + s.n, *start = p;
	while (p < end) {
		int n;
		uint32_t c = utf8_dec(p, end, &n);
		bool br = c == '\n' || c == '\r' || c == 11 || c == 12 || (c >= 0x1c && c <= 0x1e) || c == 0x85 ||
			  c == 0x2028 || c == 0x2029;
		if (!br) {
			p += n;
			continue;
		}
		const char *le = p + n;
		if (c == '\r' && le < end && *le == '\n') le++;
		list_push(r, l, v_str(start, (size_t)((keepends ? le : p) - start)));
		p = start = le;
	}
	if (start < end) list_push(r, l, v_str(start, (size_t)(end - start)));
	return l;
}

// printf-style `fmt % args` for %s %r %d %i %f %x %%.
static value str_format_percent(R *r, str_t fmt, value args) {
	list *al;
	if (args.t == V_LIST && args.l->tuple) al = args.l;
	else {
		al = list_new(r, 1);
		list_push(r, al, args);
	}
	buf b = {0};
	size_t ai = 0;
	for (size_t i = 0; i < fmt.n; i++) {
		if (fmt.p[i] != '%') {
			buf_putc(r, &b, fmt.p[i]);
			continue;
		}
		if (++i >= fmt.n) FAIL(r, "incomplete format");
		char spec[32] = "%";
		size_t k = 1;
		while (i < fmt.n && strchr("-+ #0123456789.", fmt.p[i]) && k < sizeof spec - 4) spec[k++] = fmt.p[i++];
		if (i >= fmt.n) FAIL(r, "incomplete format");
		char c = fmt.p[i];
		if (c == '%') {
			buf_putc(r, &b, '%');
			continue;
		}
		if (ai >= al->n) FAIL(r, "not enough arguments for format string");
		value v = al->v[ai++];
		if (c == 's' || c == 'r' || c == 'a') {
			buf t = {0};
			to_buf(r, &t, v, c != 's', 0);
			spec[k++] = '.';
			spec[k++] = '*';
			spec[k++] = 's';
			spec[k] = 0;
			if (k == 4) buf_put(r, &b, t.p ? t.p : "", t.n);
			else {
				spec[k - 3] = 's';
				spec[k - 2] = 0;
				char *z = sdup(r, t.p ? t.p : "", t.n);
				buf_printf(r, &b, spec, z);
			}
		} else if (c == 'd' || c == 'i' || c == 'x' || c == 'X' || c == 'o') {
			if (!is_num(v)) FAIL(r, "%%%c format: a real number is required, not %s", c, type_name(v));
			spec[k++] = 'l';
			spec[k++] = 'l';
			spec[k++] = c == 'i' ? 'd' : c;
			spec[k] = 0;
			buf_printf(r, &b, spec, (long long)(v.t == V_FLOAT ? (int64_t)v.f : num_i(v)));
		} else if (c == 'f' || c == 'F' || c == 'e' || c == 'E' || c == 'g' || c == 'G') {
			if (!is_num(v)) FAIL(r, "must be real number, not %s", type_name(v));
			spec[k++] = c;
			spec[k] = 0;
			buf_printf(r, &b, spec, num_f(v));
		} else
			FAIL(r, "unsupported format character '%c'", c);
	}
	if (ai < al->n) FAIL(r, "not all arguments converted during string formatting");
	return v_str(b.p ? b.p : "", b.n);
}

// str.format with {} / {0} / {name} fields (no format specs beyond plain conversion).
static value str_format_braces(R *r, str_t fmt, args_t *a) {
	buf b = {0};
	int auto_i = 0;
	for (size_t i = 0; i < fmt.n; i++) {
		char c = fmt.p[i];
		if (c == '{' && i + 1 < fmt.n && fmt.p[i + 1] == '{') { buf_putc(r, &b, '{'); i++; continue; }
		if (c == '}' && i + 1 < fmt.n && fmt.p[i + 1] == '}') { buf_putc(r, &b, '}'); i++; continue; }
		if (c != '{') { buf_putc(r, &b, c); continue; }
		size_t j = i + 1;
		while (j < fmt.n && fmt.p[j] != '}') j++;
		if (j >= fmt.n) FAIL(r, "Single '{' encountered in format string");
		str_t field = {fmt.p + i + 1, j - i - 1};
		const char *colon = memchr(field.p, ':', field.n);
		if (colon) field.n = (size_t)(colon - field.p);
		value v;
		if (!field.n) {
			if (auto_i >= a->npos) FAIL(r, "Replacement index %d out of range for positional args tuple", auto_i);
			v = a->v[auto_i++];
		} else if (field.p[0] >= '0' && field.p[0] <= '9') {
			int k = atoi(sdup(r, field.p, field.n));
			if (k >= a->npos) FAIL(r, "Replacement index %d out of range for positional args tuple", k);
			v = a->v[k];
		} else {
			bool found = false;
			for (int k = a->npos; k < a->n; k++)
				if (str_eqs(a->kn[k], field)) v = a->v[k], found = true;
			if (!found) FAIL(r, "'%.*s'", (int)field.n, field.p);
		}
		output(r, &b, v);
		i = j;
	}
	return v_str(b.p ? b.p : "", b.n);
}

static int64_t cp_len(str_t s) { return (int64_t)utf8_count(s.p, s.n); }

// Byte offset → code point offset.
static int64_t cp_index(str_t s, const char *at) { return (int64_t)utf8_count(s.p, (size_t)(at - s.p)); }

// ---- JSON (Python json.dumps as HF's tojson calls it) -----------------------------------------

typedef struct {
	const char *indent; // NULL: single line
	str_t item_sep, key_sep;
	bool ascii, sort_keys;
} json_opts;

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
			uint32_t cp = utf8_dec(p, end, &l);
			if (cp >= 0x10000) {
				cp -= 0x10000;
				snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
			} else
				snprintf(tmp, sizeof tmp, "\\u%04x", cp);
			esc = tmp;
		}
		if (esc) {
			buf_put(r, b, run, (size_t)(p - run));
			buf_puts(r, b, esc);
			p += l;
			run = p;
		} else
			p++;
	}
	buf_put(r, b, run, (size_t)(p - run));
	buf_putc(r, b, '"');
}

static void json_nl(R *r, buf *b, const json_opts *o, int level) {
	buf_putc(r, b, '\n');
	for (int i = 0; i < level; i++) buf_puts(r, b, o->indent);
}

static void json_val(R *r, buf *b, value v, const json_opts *o, int level);

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
	case V_INT: case V_FLOAT: return to_str(r, k);
	default: FAIL(r, "keys must be str, int, float, bool or None, not %s", type_name(k));
	}
}

static void json_val(R *r, buf *b, value v, const json_opts *o, int level) {
	if (level > MAX_VALUE_DEPTH) FAIL(r, "value nested too deeply for tojson");
	switch (v.t) {
	case V_NONE: buf_puts(r, b, "null"); return;
	case V_BOOL: buf_puts(r, b, v.b ? "true" : "false"); return;
	case V_INT: buf_printf(r, b, "%lld", (long long)v.i); return;
	case V_FLOAT:
		if (isnan(v.f)) buf_puts(r, b, "NaN");
		else if (isinf(v.f)) buf_puts(r, b, v.f < 0 ? "-Infinity" : "Infinity");
		else fmt_float(r, b, v.f);
		return;
	case V_STR: json_str(r, b, v.s, o->ascii); return;
	case V_LIST:
		if (!is_seq(v)) FAIL(r, "Object of type %s is not JSON serializable", type_name(v));
		if (!v.l->n) { buf_puts(r, b, "[]"); return; }
		buf_putc(r, b, '[');
		for (size_t i = 0; i < v.l->n; i++) {
			if (i) buf_put(r, b, o->item_sep.p, o->item_sep.n);
			if (o->indent) json_nl(r, b, o, level + 1);
			json_val(r, b, v.l->v[i], o, level + 1);
		}
		if (o->indent) json_nl(r, b, o, level);
		buf_putc(r, b, ']');
		return;
	case V_DICT: {
		if (!v.d->n) { buf_puts(r, b, "{}"); return; }
		size_t n = v.d->n;
		str_t *keys = alloc_arr(r, n, sizeof(str_t) + sizeof(size_t));
		size_t *order = (size_t *)(keys + n);
		for (size_t i = 0; i < n; i++) keys[i] = json_key(r, v.d->k[i]);
		for (size_t i = 0; i < n; i++) order[i] = i;
		if (o->sort_keys) { // insertion sort over indices keeps it simple and stable
			step(r, (int64_t)(n * n / 16));
			for (size_t i = 1; i < n; i++)
				for (size_t j = i; j > 0 && key_cmp(&keys[order[j - 1]], &keys[order[j]]) > 0; j--) {
					size_t t = order[j];
					order[j] = order[j - 1];
					order[j - 1] = t;
				}
		}
		buf_putc(r, b, '{');
		for (size_t i = 0; i < n; i++) {
			if (i) buf_put(r, b, o->item_sep.p, o->item_sep.n);
			if (o->indent) json_nl(r, b, o, level + 1);
			json_str(r, b, keys[order[i]], o->ascii);
			buf_put(r, b, o->key_sep.p, o->key_sep.n);
			json_val(r, b, v.d->v[order[i]], o, level + 1);
		}
		if (o->indent) json_nl(r, b, o, level);
		buf_putc(r, b, '}');
		return;
	}
	default: FAIL(r, "Object of type %s is not JSON serializable", type_name(v));
	}
}

// ---- attribute paths for filters (attribute="a.b.0") ------------------------------------------

static value attr_path(R *r, value x, str_t path) {
	const char *p = path.p, *end = path.p + path.n;
	while (p <= end) {
		const char *dot = memchr(p, '.', (size_t)(end - p));
		if (!dot) dot = end;
		str_t part = {p, (size_t)(dot - p)};
		bool digits = part.n > 0;
		for (size_t i = 0; i < part.n; i++) digits &= part.p[i] >= '0' && part.p[i] <= '9';
		if (x.t == V_UNDEF) return x;
		if (digits && part.n < 18) x = get_item(r, x, v_int(atoll(sdup(r, part.p, part.n))));
		else x = get_item(r, x, v_str(part.p, part.n));
		p = dot + 1;
	}
	return x;
}

static value attr_arg(R *r, value x, value attribute) {
	if (is_intlike(attribute)) return get_item(r, x, attribute);
	return attr_path(r, x, want_str(r, attribute, "attribute"));
}

// ---- filters -------------------------------------------------------------------------------------

static value f_safe(R *r, value x, args_t *a) {
	(void)a;
	value v = x.t == V_STR ? x : v_str(to_str(r, x).p, to_str(r, x).n);
	v.safe = 1;
	return v;
}

static value f_string(R *r, value x, args_t *a) {
	(void)a;
	if (x.t == V_STR) return x;
	str_t s = to_str(r, x);
	return v_str(s.p, s.n);
}

static value f_trim(R *r, value x, args_t *a) {
	value c = arg(a, 0, "chars", NONE);
	str_t s = to_str(r, x);
	if (c.t == V_STR) return keep_safe(x, (value){.t = V_STR, .s = py_strip(s, &c.s, true, true)});
	return keep_safe(x, (value){.t = V_STR, .s = py_strip(s, NULL, true, true)});
}

static value f_upper(R *r, value x, args_t *a) { (void)a; return keep_safe(x, map_case(r, to_str(r, x), CASE_UPPER)); }
static value f_lower(R *r, value x, args_t *a) { (void)a; return keep_safe(x, map_case(r, to_str(r, x), CASE_LOWER)); }
static value f_capitalize(R *r, value x, args_t *a) { (void)a; return keep_safe(x, map_case(r, to_str(r, x), CASE_CAPITALIZE)); }
static value f_title(R *r, value x, args_t *a) { (void)a; return map_case(r, to_str(r, x), CASE_TITLE_JINJA); }

static value f_length(R *r, value x, args_t *a) {
	(void)a;
	switch (x.t) {
	case V_UNDEF: return v_int(0);
	case V_STR: return v_int(cp_len(x.s));
	case V_LIST:
		if (is_iter(x)) FAIL(r, "object of type '%s' has no len()", type_name(x));
		return v_int((int64_t)x.l->n);
	case V_DICT: return v_int((int64_t)x.d->n);
	case V_LOOP: return v_int((int64_t)x.loop->items->n);
	default: FAIL(r, "object of type '%s' has no len()", type_name(x));
	}
}

static value f_tojson(R *r, value x, args_t *a) {
	json_opts o = {0};
	o.ascii = truthy(arg(a, 0, "ensure_ascii", v_bool(false)));
	value ind = arg(a, 1, "indent", NONE);
	value seps = arg(a, 2, "separators", NONE);
	o.sort_keys = truthy(arg(a, 3, "sort_keys", v_bool(false)));
	if (ind.t == V_INT || ind.t == V_BOOL) {
		int64_t n = num_i(ind);
		if (n > 64) n = 64;
		char *s = alloc(r, (size_t)(n > 0 ? n : 0) + 1);
		for (int64_t i = 0; i < n; i++) s[i] = ' ';
		s[n > 0 ? n : 0] = 0;
		o.indent = s;
	} else if (ind.t == V_STR) o.indent = sdup(r, ind.s.p, ind.s.n);
	else if (ind.t != V_NONE && ind.t != V_UNDEF) FAIL(r, "tojson indent must be an integer or string");
	o.item_sep = o.indent ? (str_t){",", 1} : (str_t){", ", 2};
	o.key_sep = (str_t){": ", 2};
	if (seps.t == V_LIST && seps.l->n == 2 && seps.l->v[0].t == V_STR && seps.l->v[1].t == V_STR) {
		o.item_sep = seps.l->v[0].s;
		o.key_sep = seps.l->v[1].s;
	} else if (seps.t != V_NONE && seps.t != V_UNDEF)
		FAIL(r, "tojson separators must be a pair of strings");
	buf b = {0};
	json_val(r, &b, x, &o, 0);
	return v_str(b.p, b.n);
}

static value f_default(R *r, value x, args_t *a) {
	(void)r;
	value d = arg(a, 0, "default_value", v_str("", 0));
	bool boolean = truthy(arg(a, 1, "boolean", v_bool(false)));
	if (x.t == V_UNDEF || (boolean && !truthy(x))) return d;
	return x;
}

static value f_list(R *r, value x, args_t *a) {
	(void)a;
	list *src = iter_list(r, x);
	list *l = list_new(r, src->n);
	for (size_t i = 0; i < src->n; i++) list_push(r, l, src->v[i]);
	return v_list(l);
}

static value f_items(R *r, value x, args_t *a) {
	(void)a;
	if (x.t == V_UNDEF) return v_list(list_new(r, 0));
	if (x.t != V_DICT) FAIL(r, "Can only get item pairs from a mapping.");
	list *l = list_new(r, x.d->n);
	for (size_t i = 0; i < x.d->n; i++) list_push(r, l, tuple2(r, x.d->k[i], x.d->v[i]));
	l->kind = LK_GEN;
	return v_list(l);
}

static value f_join(R *r, value x, args_t *a) {
	value sep = arg(a, 0, "d", v_str("", 0));
	value attribute = arg(a, 1, "attribute", NONE);
	str_t d = to_str(r, sep);
	list *l = iter_list(r, x);
	buf b = {0};
	for (size_t i = 0; i < l->n; i++) {
		if (i) buf_put(r, &b, d.p, d.n);
		value v = attribute.t != V_NONE ? attr_arg(r, l->v[i], attribute) : l->v[i];
		output(r, &b, v);
	}
	return v_str(b.p ? b.p : "", b.n);
}

static value f_first(R *r, value x, args_t *a) {
	(void)a;
	list *l = iter_list(r, x);
	return l->n ? l->v[0] : v_undef("No first item, sequence was empty.");
}

static value f_last(R *r, value x, args_t *a) {
	(void)a;
	if (x.t == V_LIST && x.l->kind == LK_GEN) FAIL(r, "'generator' object is not reversible");
	list *l = iter_list(r, x);
	return l->n ? l->v[l->n - 1] : v_undef("No last item, sequence was empty.");
}

static value f_replace(R *r, value x, args_t *a) {
	str_t s = to_str(r, x);
	str_t old = to_str(r, arg(a, 0, "old", v_str("", 0)));
	str_t nw = to_str(r, arg(a, 1, "new", v_str("", 0)));
	value c = arg(a, 2, "count", NONE);
	return str_replace(r, s, old, nw, c.t == V_NONE ? -1 : want_int(r, c, "count"));
}

// Python int() of a string: optional sign, digits with underscores, surrounding whitespace.
static bool parse_int_str(str_t s, int base, int64_t *out) {
	s = py_strip(s, NULL, true, true);
	char tmp[80];
	size_t k = 0;
	for (size_t i = 0; i < s.n && k < sizeof tmp - 1; i++)
		if (s.p[i] != '_') tmp[k++] = s.p[i];
	if (!k || k >= sizeof tmp - 1) return false;
	tmp[k] = 0;
	char *end;
	errno = 0;
	long long v = strtoll(tmp, &end, base);
	if (errno || *end) return false;
	*out = v;
	return true;
}

static bool parse_float_str(str_t s, double *out) {
	s = py_strip(s, NULL, true, true);
	char tmp[128];
	if (!s.n || s.n >= sizeof tmp) return false;
	memcpy(tmp, s.p, s.n);
	tmp[s.n] = 0;
	char *end;
	double d = strtod(tmp, &end);
	if (*end || end == tmp) return false;
	*out = d;
	return true;
}

static value f_int(R *r, value x, args_t *a) {
	value d = arg(a, 0, "default", v_int(0));
	int base = (int)want_int(r, arg(a, 1, "base", v_int(10)), "base");
	if (base < 2 || base > 36) base = 10;
	switch (x.t) {
	case V_INT: return x;
	case V_BOOL: return v_int(x.b);
	case V_FLOAT:
		if (isnan(x.f) || isinf(x.f) || fabs(x.f) >= 9.2e18) return d;
		return v_int((int64_t)x.f);
	case V_STR: {
		int64_t i;
		if (parse_int_str(x.s, base, &i)) return v_int(i);
		double f;
		if (parse_float_str(x.s, &f) && !isnan(f) && fabs(f) < 9.2e18) return v_int((int64_t)f);
		return d;
	}
	default: return d;
	}
}

static value f_float(R *r, value x, args_t *a) {
	value d = arg(a, 0, "default", v_float(0));
	(void)r;
	switch (x.t) {
	case V_INT: case V_BOOL: return v_float(num_f(x));
	case V_FLOAT: return x;
	case V_STR: {
		double f;
		return parse_float_str(x.s, &f) ? v_float(f) : d;
	}
	default: return d;
	}
}

static value f_abs(R *r, value x, args_t *a) {
	(void)a;
	if (x.t == V_FLOAT) return v_float(fabs(x.f));
	if (is_intlike(x)) {
		if (num_i(x) == INT64_MIN) FAIL(r, "integer overflow in abs");
		return v_int(num_i(x) < 0 ? -num_i(x) : num_i(x));
	}
	if (x.t == V_UNDEF) undef_fail(r, x);
	FAIL(r, "bad operand type for abs(): '%s'", type_name(x));
}

static value f_round(R *r, value x, args_t *a) {
	int64_t prec = want_int(r, arg(a, 0, "precision", v_int(0)), "precision");
	str_t method = want_str(r, arg(a, 1, "method", v_cstr("common")), "method");
	if (x.t == V_UNDEF) undef_fail(r, x);
	if (!is_num(x)) FAIL(r, "type %s doesn't define __round__ method", type_name(x));
	if (prec > 300) prec = 300;
	if (prec < -300) prec = -300;
	if (str_eq(method, "common")) {
		if (is_intlike(x) && prec >= 0) return v_int(num_i(x));
		if (is_intlike(x)) { // round(int, -n) stays an int, ties to even
			if (prec < -18) return v_int(0);
			int64_t m = 1, v = num_i(x);
			for (int64_t i = 0; i < -prec; i++) m *= 10;
			int64_t q = v / m, rem = v % m;
			if (rem < 0) q--, rem += m;
			if (rem * 2 > m || (rem * 2 == m && (q & 1))) q++;
			int64_t res;
			if (__builtin_mul_overflow(q, m, &res)) FAIL(r, "integer overflow in round");
			return v_int(res);
		}
		double d = num_f(x);
		if (prec >= 0) {
			char tmp[400];
			snprintf(tmp, sizeof tmp, "%.*f", (int)prec, d);
			return v_float(strtod(tmp, NULL));
		}
		double m = pow(10, (double)-prec);
		return v_float(nearbyint(d / m) * m);
	}
	double m = pow(10, (double)prec), d = num_f(x) * m;
	if (str_eq(method, "floor")) return v_float(floor(d) / m);
	if (str_eq(method, "ceil")) return v_float(ceil(d) / m);
	FAIL(r, "method must be 'common', 'ceil' or 'floor'");
}

static value f_reverse(R *r, value x, args_t *a) {
	(void)a;
	if (x.t == V_STR) {
		list *l = iter_list(r, x);
		buf b = {0};
		for (size_t i = l->n; i > 0; i--) buf_put(r, &b, l->v[i - 1].s.p, l->v[i - 1].s.n);
		return v_str(b.p ? b.p : "", b.n);
	}
	bool iter = is_iter(x);
	list *src = iter_list(r, x);
	list *l = list_new(r, src->n);
	for (size_t i = src->n; i > 0; i--) list_push(r, l, src->v[i - 1]);
	if (!iter && x.t == V_LIST) l->kind = LK_REVIT; // reversed() of a sequence is an iterator
	return v_list(l);
}

// Sort key: attribute (if any), lowercased when case-insensitive.
static value sort_key(R *r, value v, value attribute, bool case_sensitive) {
	if (attribute.t != V_NONE && attribute.t != V_UNDEF) v = attr_arg(r, v, attribute);
	if (!case_sensitive && v.t == V_STR) v = map_case(r, v.s, CASE_LOWER);
	return v;
}

// Stable merge sort of items by keys (Python's sorted is stable).
static void msort(R *r, value *items, value *keys, value *ti, value *tk, size_t n) {
	if (n < 2) return;
	size_t h = n / 2;
	msort(r, items, keys, ti, tk, h);
	msort(r, items + h, keys + h, ti, tk, n - h);
	size_t i = 0, j = h, k = 0;
	while (i < h && j < n) {
		step(r, 1);
		if (v_cmp(r, keys[j], keys[i], "<", 0) < 0) ti[k] = items[j], tk[k++] = keys[j++];
		else ti[k] = items[i], tk[k++] = keys[i++];
	}
	while (i < h) ti[k] = items[i], tk[k++] = keys[i++];
	while (j < n) ti[k] = items[j], tk[k++] = keys[j++];
	memcpy(items, ti, n * sizeof(value));
	memcpy(keys, tk, n * sizeof(value));
}

static list *sorted(R *r, list *src, value attribute, bool cs, bool reverse, int key_index) {
	size_t n = src->n;
	list *l = list_new(r, n);
	value *keys = alloc_arr(r, n + 1, sizeof(value)), *ti = alloc_arr(r, n + 1, sizeof(value)),
	      *tk = alloc_arr(r, n + 1, sizeof(value));
	for (size_t i = 0; i < n; i++) {
		l->v[i] = src->v[reverse ? n - 1 - i : i];
		keys[i] = sort_key(r, key_index >= 0 ? l->v[i].l->v[key_index] : l->v[i], attribute, cs);
	}
	l->n = n;
	msort(r, l->v, keys, ti, tk, n);
	if (reverse) // reversed input + stable sort, reversed again, equals Python's reverse=True
		for (size_t i = 0; i < n / 2; i++) {
			value t = l->v[i];
			l->v[i] = l->v[n - 1 - i];
			l->v[n - 1 - i] = t;
		}
	return l;
}

static value f_sort(R *r, value x, args_t *a) {
	bool reverse = truthy(arg(a, 0, "reverse", v_bool(false)));
	bool cs = truthy(arg(a, 1, "case_sensitive", v_bool(false)));
	value attribute = arg(a, 2, "attribute", NONE);
	return v_list(sorted(r, iter_list(r, x), attribute, cs, reverse, -1));
}

static value f_dictsort(R *r, value x, args_t *a) {
	bool cs = truthy(arg(a, 0, "case_sensitive", v_bool(false)));
	str_t by = want_str(r, arg(a, 1, "by", v_cstr("key")), "by");
	bool reverse = truthy(arg(a, 2, "reverse", v_bool(false)));
	int ki = str_eq(by, "key") ? 0 : str_eq(by, "value") ? 1 : -1;
	if (ki < 0) FAIL(r, "You can only sort by either \"key\" or \"value\"");
	value items = f_items(r, x, a);
	return v_list(sorted(r, items.l, NONE, cs, reverse, ki));
}

static value f_unique(R *r, value x, args_t *a) {
	bool cs = truthy(arg(a, 0, "case_sensitive", v_bool(false)));
	value attribute = arg(a, 1, "attribute", NONE);
	list *src = iter_list(r, x), *out = list_new(r, 0), *seen = list_new(r, 0);
	for (size_t i = 0; i < src->n; i++) {
		value k = sort_key(r, src->v[i], attribute, cs);
		if (v_in(r, k, v_list(seen))) continue;
		list_push(r, seen, k);
		list_push(r, out, src->v[i]);
	}
	out->kind = LK_GEN;
	return v_list(out);
}

static value f_indent(R *r, value x, args_t *a) {
	value w = arg(a, 0, "width", v_int(4));
	bool first = truthy(arg(a, 1, "first", v_bool(false)));
	bool blank = truthy(arg(a, 2, "blank", v_bool(false)));
	str_t ind;
	if (w.t == V_STR) ind = w.s;
	else {
		int64_t n = want_int(r, w, "width");
		if (n < 0) n = 0;
		if (n > 1024) n = 1024;
		value sp = repeat(r, v_str(" ", 1), n);
		ind = sp.s;
	}
	str_t s = to_str(r, x);
	value withnl = concat_str(r, s, (str_t){"\n", 1});
	list *lines = splitlines(r, withnl.s, false);
	buf b = {0};
	if (first) buf_put(r, &b, ind.p, ind.n);
	for (size_t i = 0; i < lines->n; i++) {
		str_t ln = lines->v[i].s;
		if (i) {
			buf_putc(r, &b, '\n');
			if (blank || ln.n) buf_put(r, &b, ind.p, ind.n);
		}
		buf_put(r, &b, ln.p, ln.n);
	}
	return keep_safe(x, v_str(b.p ? b.p : "", b.n));
}

static value f_wordcount(R *r, value x, args_t *a) {
	(void)a;
	str_t s = to_str(r, x);
	int64_t n = 0;
	bool in = false;
	const char *p = s.p, *end = s.p + s.n;
	while (p < end) {
		int l;
		uint32_t c = utf8_dec(p, end, &l);
		bool w = c == '_' || cp_digit(c) || cp_alpha(c) || (c >= 0x80 && !py_space(c) && c != 0x85);
		if (w && !in) n++;
		in = w;
		p += l;
	}
	return v_int(n);
}

static value f_batch(R *r, value x, args_t *a) {
	int64_t n = want_int(r, arg(a, 0, "linecount", v_int(1)), "linecount");
	value fill = arg(a, 1, "fill_with", NONE);
	bool has_fill = has_arg(a, 1, "fill_with");
	if (n <= 0) FAIL(r, "batch size must be positive");
	list *src = iter_list(r, x), *out = list_new(r, 0), *cur_ = NULL;
	for (size_t i = 0; i < src->n; i++) {
		if (!cur_ || (int64_t)cur_->n == n) {
			cur_ = list_new(r, 0);
			list_push(r, out, v_list(cur_));
		}
		list_push(r, cur_, src->v[i]);
	}
	if (cur_ && has_fill)
		while ((int64_t)cur_->n < n) list_push(r, cur_, fill);
	out->kind = LK_GEN;
	return v_list(out);
}

static value f_center(R *r, value x, args_t *a) {
	int64_t w = want_int(r, arg(a, 0, "width", v_int(80)), "width");
	str_t s = to_str(r, x);
	int64_t len = cp_len(s);
	if (w <= len) return v_str(s.p, s.n);
	if (w > r->max_output) fail(r, LANES_ELIMIT, "center width too large");
	int64_t total = w - len, left = total / 2 + (total & w & 1);
	buf b = {0};
	for (int64_t i = 0; i < left; i++) buf_putc(r, &b, ' ');
	buf_put(r, &b, s.p, s.n);
	for (int64_t i = 0; i < total - left; i++) buf_putc(r, &b, ' ');
	return keep_safe(x, v_str(b.p, b.n));
}

static value f_sum(R *r, value x, args_t *a) {
	value attribute = arg(a, 0, "attribute", NONE);
	value acc = arg(a, 1, "start", v_int(0));
	list *l = iter_list(r, x);
	for (size_t i = 0; i < l->n; i++) {
		value v = attribute.t != V_NONE ? attr_arg(r, l->v[i], attribute) : l->v[i];
		acc = arith(r, OP_ADD, acc, v);
	}
	return acc;
}

static value minmax(R *r, value x, args_t *a, int sign) {
	bool cs = truthy(arg(a, 0, "case_sensitive", v_bool(false)));
	value attribute = arg(a, 1, "attribute", NONE);
	list *l = iter_list(r, x);
	if (!l->n) return v_undef(sign < 0 ? "No aggregated item, sequence was empty." : "No aggregated item, sequence was empty.");
	size_t best = 0;
	value bk = sort_key(r, l->v[0], attribute, cs);
	for (size_t i = 1; i < l->n; i++) {
		value k = sort_key(r, l->v[i], attribute, cs);
		if (v_cmp(r, k, bk, "<", 0) * sign > 0) best = i, bk = k;
	}
	return l->v[best];
}
static value f_min(R *r, value x, args_t *a) { return minmax(r, x, a, -1); }
static value f_max(R *r, value x, args_t *a) { return minmax(r, x, a, 1); }

static value f_format(R *r, value x, args_t *a) {
	list *l = list_new(r, (size_t)a->npos);
	l->tuple = true;
	for (int i = 0; i < a->npos; i++) list_push(r, l, a->v[i]);
	if (x.t != V_STR) x = v_str(to_str(r, x).p, to_str(r, x).n);
	return arith(r, OP_MOD, x, v_list(l));
}

static value f_attr(R *r, value x, args_t *a) {
	str_t name = want_str(r, arg(a, 0, "name", v_str("", 0)), "attribute name");
	return get_attr(r, x, name);
}

static value f_escape(R *r, value x, args_t *a) {
	(void)a;
	return html_escape(r, x);
}

static value f_forceescape(R *r, value x, args_t *a) {
	(void)a;
	if (x.t == V_STR) x.safe = 0;
	return html_escape(r, x);
}

// markupsafe.escape: Markup passes through, anything else is stringified and escaped.
static value html_escape(R *r, value x) {
	if (x.t == V_STR && x.safe) return x;
	str_t s = to_str(r, x);
	buf b = {0};
	for (size_t i = 0; i < s.n; i++) {
		switch (s.p[i]) {
		case '&': buf_puts(r, &b, "&amp;"); break;
		case '<': buf_puts(r, &b, "&lt;"); break;
		case '>': buf_puts(r, &b, "&gt;"); break;
		case '"': buf_puts(r, &b, "&#34;"); break;
		case '\'': buf_puts(r, &b, "&#39;"); break;
		default: buf_putc(r, &b, s.p[i]);
		}
	}
	value v = v_str(b.p ? b.p : "", b.n);
	v.safe = 1;
	return v;
}

static value f_truncate(R *r, value x, args_t *a) {
	str_t s = to_str(r, x);
	int64_t length = want_int(r, arg(a, 0, "length", v_int(255)), "length");
	bool killwords = truthy(arg(a, 1, "killwords", v_bool(false)));
	str_t end = to_str(r, arg(a, 2, "end", v_cstr("...")));
	value lw = arg(a, 3, "leeway", NONE);
	int64_t leeway = lw.t == V_NONE ? 5 : want_int(r, lw, "leeway");
	list *cs = iter_list(r, v_str(s.p, s.n));
	if ((int64_t)cs->n <= length + leeway) return v_str(s.p, s.n);
	int64_t keep = length - cp_len(end);
	if (keep < 0) keep = 0;
	value head = slice(r, v_str(s.p, s.n), NONE, v_int(keep), NONE);
	if (!killwords) {
		value parts = str_split(r, head.s, &(str_t){" ", 1}, 1, true);
		head = parts.l->v[0];
	}
	return concat_str(r, head.s, end);
}

// map / select / reject and their attribute forms.
static value call_filter_by_name(R *r, str_t name, value x, args_t *rest) {
	const filter_def *f = find_filter(name);
	if (!f) FAIL(r, "no filter named '%.*s'", (int)name.n, name.p);
	return f->fn(r, x, rest);
}

static bool call_test_by_name(R *r, str_t name, value x, args_t *rest) {
	const test_def *t = find_test(name);
	if (!t) FAIL(r, "no test named '%.*s'", (int)name.n, name.p);
	return t->fn(r, x, rest);
}

static args_t args_from(args_t *a, int skip) {
	args_t b = *a;
	if (skip > b.npos) skip = b.npos;
	b.v += skip;
	b.kn += skip;
	b.n -= skip;
	b.npos -= skip;
	return b;
}

static value f_map(R *r, value x, args_t *a) {
	list *src = truthy(x) ? iter_list(r, x) : list_new(r, 0), *out = list_new(r, src->n);
	if (has_arg(a, -1, "attribute")) {
		value attribute = arg(a, -1, "attribute", NONE);
		bool has_d = has_arg(a, -1, "default");
		value d = arg(a, -1, "default", NONE);
		for (size_t i = 0; i < src->n; i++) {
			value v = attr_arg(r, src->v[i], attribute);
			list_push(r, out, v.t == V_UNDEF && has_d ? d : v);
		}
		out->kind = LK_GEN;
		return v_list(out);
	}
	if (a->npos < 1) FAIL(r, "map requires a filter argument");
	str_t name = want_str(r, a->v[0], "filter name");
	args_t rest = args_from(a, 1);
	for (size_t i = 0; i < src->n; i++) list_push(r, out, call_filter_by_name(r, name, src->v[i], &rest));
	out->kind = LK_GEN;
	return v_list(out);
}

static value select_impl(R *r, value x, args_t *a, bool attr, bool want) {
	list *src = truthy(x) ? iter_list(r, x) : list_new(r, 0), *out = list_new(r, 0);
	int k = 0;
	value attribute = NONE;
	if (attr) {
		if (a->npos < 1) FAIL(r, "selectattr requires an attribute");
		attribute = a->v[k++];
	}
	bool has_test = a->npos > k;
	str_t test = has_test ? want_str(r, a->v[k], "test name") : (str_t){0};
	args_t rest = args_from(a, k + 1);
	for (size_t i = 0; i < src->n; i++) {
		value v = attr ? attr_arg(r, src->v[i], attribute) : src->v[i];
		bool t = has_test ? call_test_by_name(r, test, v, &rest) : truthy(v);
		if (t == want) list_push(r, out, src->v[i]);
	}
	out->kind = LK_GEN;
	return v_list(out);
}
static value f_select(R *r, value x, args_t *a) { return select_impl(r, x, a, false, true); }
static value f_reject(R *r, value x, args_t *a) { return select_impl(r, x, a, false, false); }
static value f_selectattr(R *r, value x, args_t *a) { return select_impl(r, x, a, true, true); }
static value f_rejectattr(R *r, value x, args_t *a) { return select_impl(r, x, a, true, false); }

static const filter_def filters[] = {
	{"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize},
	{"center", f_center}, {"count", f_length}, {"d", f_default}, {"default", f_default},
	{"dictsort", f_dictsort}, {"e", f_escape}, {"escape", f_escape}, {"first", f_first},
	{"float", f_float}, {"forceescape", f_forceescape}, {"format", f_format}, {"indent", f_indent},
	{"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last}, {"length", f_length},
	{"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min},
	{"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace},
	{"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe}, {"select", f_select},
	{"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string}, {"sum", f_sum},
	{"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"truncate", f_truncate},
	{"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount},
};

static const filter_def *find_filter(str_t name) {
	for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
		if (str_eq(name, filters[i].name)) return &filters[i];
	return NULL;
}

// ---- tests ---------------------------------------------------------------------------------------

static value targ(R *r, args_t *a) {
	if (a->n < 1) FAIL(r, "test requires an argument");
	return a->v[0];
}

static bool t_defined(R *r, value x, args_t *a) { (void)r, (void)a; return x.t != V_UNDEF; }
static bool t_undefined(R *r, value x, args_t *a) { (void)r, (void)a; return x.t == V_UNDEF; }
static bool t_none(R *r, value x, args_t *a) { (void)r, (void)a; return x.t == V_NONE; }
static bool t_boolean(R *r, value x, args_t *a) { (void)r, (void)a; return x.t == V_BOOL; }
static bool t_true(R *r, value x, args_t *a) { (void)r, (void)a; return x.t == V_BOOL && x.b; }
static bool t_false(R *r, value x, args_t *a) { (void)r, (void)a; return x.t == V_BOOL && !x.b; }
static bool t_integer(R *r, value x, args_t *a) { (void)r, (void)a; return x.t == V_INT; }
static bool t_float(R *r, value x, args_t *a) { (void)r, (void)a; return x.t == V_FLOAT; }
static bool t_number(R *r, value x, args_t *a) { (void)r, (void)a; return is_num(x); }
static bool t_string(R *r, value x, args_t *a) { (void)r, (void)a; return x.t == V_STR; }
static bool t_mapping(R *r, value x, args_t *a) { (void)r, (void)a; return x.t == V_DICT; }
static bool t_iterable(R *r, value x, args_t *a) {
	(void)r, (void)a;
	return x.t == V_STR || x.t == V_LIST || x.t == V_DICT || x.t == V_UNDEF;
}
static bool t_sequence(R *r, value x, args_t *a) {
	(void)r, (void)a;
	return x.t == V_STR || is_seq(x) || x.t == V_DICT || x.t == V_UNDEF;
}
static bool t_callable(R *r, value x, args_t *a) { (void)r, (void)a; return x.t == V_FUNC; }
static bool t_escaped(R *r, value x, args_t *a) { (void)r, (void)a; return x.t == V_STR && x.safe; }
static bool t_odd(R *r, value x, args_t *a) { (void)a; return (want_int(r, x, "value") & 1) != 0; }
static bool t_even(R *r, value x, args_t *a) { (void)a; return (want_int(r, x, "value") & 1) == 0; }
static bool t_divisibleby(R *r, value x, args_t *a) {
	value d = targ(r, a);
	if (is_intlike(x) && is_intlike(d)) {
		if (num_i(d) == 0) FAIL(r, "integer division or modulo by zero");
		if (num_i(d) == -1) return true;
		return num_i(x) % num_i(d) == 0;
	}
	return truthy(v_bool(num_f(arith(r, OP_MOD, x, d)) == 0));
}
static bool t_eq(R *r, value x, args_t *a) { return v_eq(r, x, targ(r, a), 0); }
static bool t_ne(R *r, value x, args_t *a) { return !v_eq(r, x, targ(r, a), 0); }
static bool t_lt(R *r, value x, args_t *a) { return v_cmp(r, x, targ(r, a), "<", 0) < 0; }
static bool t_le(R *r, value x, args_t *a) { return v_cmp(r, x, targ(r, a), "<=", 0) <= 0; }
static bool t_gt(R *r, value x, args_t *a) { return v_cmp(r, x, targ(r, a), ">", 0) > 0; }
static bool t_ge(R *r, value x, args_t *a) { return v_cmp(r, x, targ(r, a), ">=", 0) >= 0; }
static bool t_in(R *r, value x, args_t *a) { return v_in(r, x, targ(r, a)); }
static bool t_sameas(R *r, value x, args_t *a) {
	value y = targ(r, a);
	if (x.t != y.t) return false;
	if (x.t == V_LIST) return x.l == y.l;
	if (x.t == V_DICT || x.t == V_NS) return x.d == y.d;
	return v_eq(r, x, y, 0);
}
static bool t_lower(R *r, value x, args_t *a) {
	(void)a;
	if (x.t != V_STR) return false;
	value l = map_case(r, x.s, CASE_LOWER), u = map_case(r, x.s, CASE_UPPER);
	return str_eqs(l.s, x.s) && !str_eqs(u.s, x.s);
}
static bool t_upper(R *r, value x, args_t *a) {
	(void)a;
	if (x.t != V_STR) return false;
	value l = map_case(r, x.s, CASE_LOWER), u = map_case(r, x.s, CASE_UPPER);
	return str_eqs(u.s, x.s) && !str_eqs(l.s, x.s);
}
static bool t_filter(R *r, value x, args_t *a) { (void)r, (void)a; return x.t == V_STR && find_filter(x.s); }
static bool t_test(R *r, value x, args_t *a) { (void)r, (void)a; return x.t == V_STR && find_test(x.s); }

static const test_def tests[] = {
	{"!=", t_ne}, {"<", t_lt}, {"<=", t_le}, {"==", t_eq}, {">", t_gt}, {">=", t_ge},
	{"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined},
	{"divisibleby", t_divisibleby}, {"eq", t_eq}, {"equalto", t_eq}, {"escaped", t_escaped},
	{"even", t_even}, {"false", t_false}, {"filter", t_filter}, {"float", t_float}, {"ge", t_ge},
	{"greaterthan", t_gt}, {"gt", t_gt}, {"in", t_in}, {"integer", t_integer},
	{"iterable", t_iterable}, {"le", t_le}, {"lessthan", t_lt}, {"lower", t_lower}, {"lt", t_lt},
	{"mapping", t_mapping}, {"ne", t_ne}, {"none", t_none}, {"number", t_number}, {"odd", t_odd},
	{"sameas", t_sameas}, {"sequence", t_sequence}, {"string", t_string}, {"test", t_test},
	{"true", t_true}, {"undefined", t_undefined}, {"upper", t_upper},
};

static const test_def *find_test(str_t name) {
	for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
		if (str_eq(name, tests[i].name)) return &tests[i];
	return NULL;
}

// ---- methods of str, list and dict -----------------------------------------------------------

static value m_strip_any(R *r, value self, args_t *a, bool l, bool rt) {
	value c = arg(a, 0, "chars", NONE);
	if (c.t == V_STR) return (value){.t = V_STR, .s = py_strip(self.s, &c.s, l, rt)};
	if (c.t != V_NONE) FAIL(r, "strip arg must be None or str");
	return (value){.t = V_STR, .s = py_strip(self.s, NULL, l, rt)};
}
static value m_strip(R *r, value self, args_t *a) { return m_strip_any(r, self, a, true, true); }
static value m_lstrip(R *r, value self, args_t *a) { return m_strip_any(r, self, a, true, false); }
static value m_rstrip(R *r, value self, args_t *a) { return m_strip_any(r, self, a, false, true); }

static value m_split_any(R *r, value self, args_t *a, bool right) {
	value sep = arg(a, 0, "sep", NONE);
	int64_t maxsplit = want_int(r, arg(a, 1, "maxsplit", v_int(-1)), "maxsplit");
	if (sep.t == V_NONE) return str_split(r, self.s, NULL, maxsplit, right);
	str_t s = want_str(r, sep, "separator");
	return str_split(r, self.s, &s, maxsplit, right);
}
static value m_split(R *r, value self, args_t *a) { return m_split_any(r, self, a, false); }
static value m_rsplit(R *r, value self, args_t *a) { return m_split_any(r, self, a, true); }
static value m_splitlines(R *r, value self, args_t *a) {
	return v_list(splitlines(r, self.s, truthy(arg(a, 0, "keepends", v_bool(false)))));
}

static bool affix(str_t s, str_t x, bool end) {
	if (x.n > s.n) return false;
	return !memcmp(end ? s.p + s.n - x.n : s.p, x.p, x.n);
}

// The [start, end) code-point window for startswith/endswith/find/count.
static str_t window(R *r, str_t s, args_t *a, int pos) {
	value st = arg(a, pos, "start", NONE), en = arg(a, pos + 1, "end", NONE);
	if (st.t == V_NONE && en.t == V_NONE) return s;
	value w = slice(r, v_str(s.p, s.n), st, en, NONE);
	return w.s;
}

static value m_affix(R *r, value self, args_t *a, bool end) {
	value x = arg(a, 0, end ? "suffix" : "prefix", NONE);
	str_t s = window(r, self.s, a, 1);
	if (x.t == V_LIST && x.l->tuple) {
		for (size_t i = 0; i < x.l->n; i++)
			if (affix(s, want_str(r, x.l->v[i], "affix"), end)) return v_bool(true);
		return v_bool(false);
	}
	if (x.t != V_STR) FAIL(r, "%s first arg must be str or a tuple of str, not %s", end ? "endswith" : "startswith", type_name(x));
	return v_bool(affix(s, x.s, end));
}
static value m_startswith(R *r, value self, args_t *a) { return m_affix(r, self, a, false); }
static value m_endswith(R *r, value self, args_t *a) { return m_affix(r, self, a, true); }

static value m_upper(R *r, value self, args_t *a) { (void)a; return map_case(r, self.s, CASE_UPPER); }
static value m_lower(R *r, value self, args_t *a) { (void)a; return map_case(r, self.s, CASE_LOWER); }
static value m_title(R *r, value self, args_t *a) { (void)a; return map_case(r, self.s, CASE_TITLE_PY); }
static value m_capitalize(R *r, value self, args_t *a) { (void)a; return map_case(r, self.s, CASE_CAPITALIZE); }
static value m_swapcase(R *r, value self, args_t *a) { (void)a; return map_case(r, self.s, CASE_SWAP); }

static value m_replace(R *r, value self, args_t *a) {
	str_t old = want_str(r, arg(a, 0, "old", NONE), "replace() argument 1");
	str_t nw = want_str(r, arg(a, 1, "new", NONE), "replace() argument 2");
	return str_replace(r, self.s, old, nw, want_int(r, arg(a, 2, "count", v_int(-1)), "count"));
}

static int64_t find_impl(R *r, value self, args_t *a, bool from_right) {
	str_t sub = want_str(r, arg(a, 0, "sub", NONE), "substring");
	value st = arg(a, 1, "start", NONE);
	int64_t base = 0;
	str_t s = self.s;
	if (st.t != V_NONE || arg(a, 2, "end", NONE).t != V_NONE) {
		s = window(r, self.s, a, 1);
		if (st.t != V_NONE) {
			int64_t i = want_int(r, st, "start"), n = cp_len(self.s);
			base = i < 0 ? (i + n < 0 ? 0 : i + n) : (i > n ? n : i);
		}
	}
	step(r, (int64_t)(s.n >> 6));
	const char *h = NULL;
	if (!from_right) h = sub.n ? memmem(s.p, s.n, sub.p, sub.n) : s.p;
	else if (sub.n <= s.n)
		for (const char *q = s.p + s.n - sub.n; q >= s.p; q--)
			if (!memcmp(q, sub.p, sub.n)) { h = q; break; }
	return h ? base + cp_index(s, h) : -1;
}
static value m_find(R *r, value self, args_t *a) { return v_int(find_impl(r, self, a, false)); }
static value m_rfind(R *r, value self, args_t *a) { return v_int(find_impl(r, self, a, true)); }
static value m_index(R *r, value self, args_t *a) {
	int64_t i = find_impl(r, self, a, false);
	if (i < 0) FAIL(r, "substring not found");
	return v_int(i);
}
static value m_rindex(R *r, value self, args_t *a) {
	int64_t i = find_impl(r, self, a, true);
	if (i < 0) FAIL(r, "substring not found");
	return v_int(i);
}

static value m_count(R *r, value self, args_t *a) {
	str_t sub = want_str(r, arg(a, 0, "sub", NONE), "substring");
	str_t s = window(r, self.s, a, 1);
	if (!sub.n) return v_int(cp_len(s) + 1);
	int64_t n = 0;
	const char *p = s.p, *end = s.p + s.n, *h;
	while ((h = memmem(p, (size_t)(end - p), sub.p, sub.n))) n++, p = h + sub.n;
	step(r, (int64_t)(s.n >> 6));
	return v_int(n);
}

static value m_format(R *r, value self, args_t *a) { return str_format_braces(r, self.s, a); }

static value m_join(R *r, value self, args_t *a) {
	list *l = iter_list(r, arg(a, 0, "iterable", NONE));
	buf b = {0};
	for (size_t i = 0; i < l->n; i++) {
		value it = l->v[i];
		if (self.safe) it = html_escape(r, it); // Markup.join escapes the items
		if (it.t != V_STR) FAIL(r, "sequence item %zu: expected str instance, %s found", i, type_name(it));
		if (i) buf_put(r, &b, self.s.p, self.s.n);
		buf_put(r, &b, it.s.p, it.s.n);
	}
	return v_str(b.p ? b.p : "", b.n);
}

static value m_is(R *r, value self, int kind) {
	(void)r;
	const char *p = self.s.p, *end = p + self.s.n;
	if (p == end) return v_bool(false);
	bool cased = false, anyl = false, anyu = false;
	while (p < end) {
		int l;
		uint32_t c = utf8_dec(p, end, &l);
		p += l;
		bool ok;
		switch (kind) {
		case 0: ok = cp_digit(c); break;
		case 1: ok = cp_alpha(c); break;
		case 2: ok = cp_alpha(c) || cp_digit(c); break;
		case 3: ok = py_space(c); break;
		default:
			ok = true;
			if (cp_cased(c)) {
				cased = true;
				if (cp_lower(c) == c && cp_upper(c) != c) anyl = true;
				else anyu = true;
			}
		}
		if (!ok) return v_bool(false);
	}
	if (kind == 4) return v_bool(cased && !anyu);
	if (kind == 5) return v_bool(cased && !anyl);
	return v_bool(true);
}
static value m_isdigit(R *r, value self, args_t *a) { (void)a; return m_is(r, self, 0); }
static value m_isalpha(R *r, value self, args_t *a) { (void)a; return m_is(r, self, 1); }
static value m_isalnum(R *r, value self, args_t *a) { (void)a; return m_is(r, self, 2); }
static value m_isspace(R *r, value self, args_t *a) { (void)a; return m_is(r, self, 3); }
static value m_islower(R *r, value self, args_t *a) { (void)a; return m_is(r, self, 4); }
static value m_isupper(R *r, value self, args_t *a) { (void)a; return m_is(r, self, 5); }

static value m_removeprefix(R *r, value self, args_t *a) {
	str_t x = want_str(r, arg(a, 0, "prefix", NONE), "prefix");
	return affix(self.s, x, false) ? v_str(self.s.p + x.n, self.s.n - x.n) : self;
}
static value m_removesuffix(R *r, value self, args_t *a) {
	str_t x = want_str(r, arg(a, 0, "suffix", NONE), "suffix");
	return affix(self.s, x, true) ? v_str(self.s.p, self.s.n - x.n) : self;
}

static value m_partition_any(R *r, value self, args_t *a, bool right) {
	str_t sep = want_str(r, arg(a, 0, "sep", NONE), "separator");
	if (!sep.n) FAIL(r, "empty separator");
	value parts = str_split(r, self.s, &sep, 1, right);
	list *l = list_new(r, 3);
	l->tuple = true;
	if (parts.l->n == 2) {
		list_push(r, l, parts.l->v[0]);
		list_push(r, l, v_str(sep.p, sep.n));
		list_push(r, l, parts.l->v[1]);
	} else if (right) {
		list_push(r, l, v_str("", 0));
		list_push(r, l, v_str("", 0));
		list_push(r, l, self);
	} else {
		list_push(r, l, self);
		list_push(r, l, v_str("", 0));
		list_push(r, l, v_str("", 0));
	}
	return v_list(l);
}
static value m_partition(R *r, value self, args_t *a) { return m_partition_any(r, self, a, false); }
static value m_rpartition(R *r, value self, args_t *a) { return m_partition_any(r, self, a, true); }

static value m_center(R *r, value self, args_t *a) { return f_center(r, self, a); }

static value m_zfill(R *r, value self, args_t *a) {
	int64_t w = want_int(r, arg(a, 0, "width", v_int(0)), "width");
	int64_t n = cp_len(self.s);
	if (w <= n) return self;
	if (w > r->max_output) fail(r, LANES_ELIMIT, "zfill width too large");
	buf b = {0};
	size_t signlen = self.s.n && (self.s.p[0] == '-' || self.s.p[0] == '+');
	buf_put(r, &b, self.s.p, signlen);
	for (int64_t i = 0; i < w - n; i++) buf_putc(r, &b, '0');
	buf_put(r, &b, self.s.p + signlen, self.s.n - signlen);
	return v_str(b.p, b.n);
}

static value m_list_index(R *r, value self, args_t *a) {
	value x = arg(a, 0, "value", NONE);
	for (size_t i = 0; i < self.l->n; i++)
		if (v_eq(r, self.l->v[i], x, 0)) return v_int((int64_t)i);
	FAIL(r, "value is not in list");
}
static value m_list_count(R *r, value self, args_t *a) {
	value x = arg(a, 0, "value", NONE);
	int64_t n = 0;
	for (size_t i = 0; i < self.l->n; i++) n += v_eq(r, self.l->v[i], x, 0);
	return v_int(n);
}

static value m_items(R *r, value self, args_t *a) {
	value v = f_items(r, self, a);
	v.l->kind = LK_ITEMS;
	return v;
}
static value m_keys(R *r, value self, args_t *a) {
	(void)a;
	list *l = list_new(r, self.d->n);
	for (size_t i = 0; i < self.d->n; i++) list_push(r, l, self.d->k[i]);
	l->kind = LK_KEYS;
	return v_list(l);
}
static value m_values(R *r, value self, args_t *a) {
	(void)a;
	list *l = list_new(r, self.d->n);
	for (size_t i = 0; i < self.d->n; i++) list_push(r, l, self.d->v[i]);
	l->kind = LK_VALUES;
	return v_list(l);
}
static value m_get(R *r, value self, args_t *a) {
	if (a->n < 1) FAIL(r, "get expected at least 1 argument, got 0");
	value *v = dict_find(r, self.d, a->v[0]);
	return v ? *v : arg(a, 1, "default", NONE);
}
static value m_copy(R *r, value self, args_t *a) {
	(void)a;
	dict *d = dict_new(r);
	for (size_t i = 0; i < self.d->n; i++) dict_set(r, d, self.d->k[i], self.d->v[i]);
	return v_dict(d);
}

static const method_def methods[] = {
	{V_STR, "strip", m_strip}, {V_STR, "lstrip", m_lstrip}, {V_STR, "rstrip", m_rstrip},
	{V_STR, "split", m_split}, {V_STR, "rsplit", m_rsplit}, {V_STR, "splitlines", m_splitlines},
	{V_STR, "startswith", m_startswith}, {V_STR, "endswith", m_endswith},
	{V_STR, "upper", m_upper}, {V_STR, "lower", m_lower}, {V_STR, "casefold", m_lower},
	{V_STR, "title", m_title}, {V_STR, "capitalize", m_capitalize}, {V_STR, "swapcase", m_swapcase},
	{V_STR, "replace", m_replace}, {V_STR, "find", m_find}, {V_STR, "rfind", m_rfind},
	{V_STR, "index", m_index}, {V_STR, "rindex", m_rindex}, {V_STR, "count", m_count},
	{V_STR, "format", m_format}, {V_STR, "join", m_join}, {V_STR, "isdigit", m_isdigit},
	{V_STR, "isnumeric", m_isdigit}, {V_STR, "isdecimal", m_isdigit},
	{V_STR, "isalpha", m_isalpha}, {V_STR, "isalnum", m_isalnum}, {V_STR, "isspace", m_isspace},
	{V_STR, "islower", m_islower}, {V_STR, "isupper", m_isupper},
	{V_STR, "removeprefix", m_removeprefix}, {V_STR, "removesuffix", m_removesuffix},
	{V_STR, "partition", m_partition}, {V_STR, "rpartition", m_rpartition},
	{V_STR, "center", m_center}, {V_STR, "zfill", m_zfill},
	{V_LIST, "index", m_list_index}, {V_LIST, "count", m_list_count},
	{V_DICT, "items", m_items}, {V_DICT, "keys", m_keys}, {V_DICT, "values", m_values},
	{V_DICT, "get", m_get}, {V_DICT, "copy", m_copy},
};

static const method_def *find_method(uint8_t type, str_t name) {
	for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
		if (methods[i].type == type && str_eq(name, methods[i].name)) return &methods[i];
	return NULL;
}

// Methods that mutate: Jinja's immutable sandbox refuses them.
static bool unsafe_method(uint8_t type, str_t name) {
	static const char *const list_m[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
	static const char *const dict_m[] = {"update", "pop", "popitem", "setdefault", "clear"};
	if (type == V_LIST)
		for (size_t i = 0; i < sizeof list_m / sizeof list_m[0]; i++)
			if (str_eq(name, list_m[i])) return true;
	if (type == V_DICT)
		for (size_t i = 0; i < sizeof dict_m / sizeof dict_m[0]; i++)
			if (str_eq(name, dict_m[i])) return true;
	return false;
}

// ---- globals -------------------------------------------------------------------------------------

static value g_range(R *r, value self, args_t *a) {
	(void)self;
	int64_t start = 0, stop, st = 1;
	if (a->npos == 1) stop = want_int(r, a->v[0], "range() argument");
	else if (a->npos == 2 || a->npos == 3) {
		start = want_int(r, a->v[0], "range() argument");
		stop = want_int(r, a->v[1], "range() argument");
		if (a->npos == 3) st = want_int(r, a->v[2], "range() argument");
	} else
		FAIL(r, "range expected 1 to 3 arguments, got %d", a->npos);
	if (st == 0) FAIL(r, "range() arg 3 must not be zero");
	double cnt = ceil(((double)stop - (double)start) / (double)st);
	if (cnt > MAX_RANGE) FAIL(r, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
	list *l = list_new(r, cnt > 0 ? (size_t)cnt : 0);
	for (int64_t i = start; st > 0 ? i < stop : i > stop; i += st) list_push(r, l, v_int(i));
	step(r, (int64_t)l->n);
	return v_list(l);
}

static value g_namespace(R *r, value self, args_t *a) {
	(void)self;
	dict *d = dict_new(r);
	for (int i = 0; i < a->npos; i++) {
		if (a->v[i].t != V_DICT) FAIL(r, "namespace() positional argument must be a mapping");
		for (size_t k = 0; k < a->v[i].d->n; k++) dict_set(r, d, a->v[i].d->k[k], a->v[i].d->v[k]);
	}
	for (int i = a->npos; i < a->n; i++) dict_set(r, d, v_str(a->kn[i].p, a->kn[i].n), a->v[i]);
	return (value){.t = V_NS, .d = d};
}

static value g_dict(R *r, value self, args_t *a) {
	value ns = g_namespace(r, self, a);
	return v_dict(ns.d);
}

static value g_raise(R *r, value self, args_t *a) {
	(void)self;
	str_t m = a->n ? to_str(r, a->v[0]) : (str_t){"", 0};
	fail(r, LANES_EINVAL, "%.*s", (int)m.n, m.p);
}

static pthread_once_t cloc_once = PTHREAD_ONCE_INIT;
static locale_t c_loc;
static void cloc_init(void) { c_loc = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

static value g_strftime(R *r, value self, args_t *a) {
	(void)self;
	str_t fmt = want_str(r, arg(a, 0, "format", NONE), "strftime format");
	pthread_once(&cloc_once, cloc_init);
	char *f = sdup(r, fmt.p, fmt.n);
	size_t cap = fmt.n * 16 + 64;
	char *o = alloc(r, cap);
	size_t n = c_loc ? strftime_l(o, cap, f, &r->date, c_loc) : strftime(o, cap, f, &r->date);
	return v_str(o, n);
}

static const struct {
	const char *name;
	builtin_fn fn;
} global_fns[] = {
	{"range", g_range}, {"namespace", g_namespace}, {"dict", g_dict},
	{"raise_exception", g_raise}, {"strftime_now", g_strftime},
};

static value builtin_global(R *r, str_t name) {
	for (size_t i = 0; i < sizeof global_fns / sizeof global_fns[0]; i++)
		if (str_eq(name, global_fns[i].name)) return mk_func(r, global_fns[i].name, global_fns[i].fn, UNDEF);
	return UNDEF;
}

// ---- context: JSON → values ------------------------------------------------------------------

static value from_json(R *r, const json_t *j, int depth) {
	if (depth > MAX_VALUE_DEPTH) fail(r, LANES_ELIMIT, "template context nested too deeply");
	step(r, 1);
	switch (json_typeof(j)) {
	case JSON_NULL: return NONE;
	case JSON_TRUE: return v_bool(true);
	case JSON_FALSE: return v_bool(false);
	case JSON_INTEGER: return v_int((int64_t)json_integer_value(j));
	case JSON_REAL: return v_float(json_real_value(j));
	case JSON_STRING: return v_str(json_string_value(j), json_string_length(j));
	case JSON_ARRAY: {
		size_t n = json_array_size(j);
		list *l = list_new(r, n);
		for (size_t i = 0; i < n; i++) list_push(r, l, from_json(r, json_array_get(j, i), depth + 1));
		return v_list(l);
	}
	case JSON_OBJECT: {
		dict *d = dict_new(r);
		const char *k;
		json_t *v;
		// jansson keeps insertion order; keys are unique so append without searching
		size_t n = json_object_size(j);
		d->k = alloc_arr(r, n + 1, sizeof(value));
		d->v = alloc_arr(r, n + 1, sizeof(value));
		d->cap = n + 1;
		json_object_foreach((json_t *)j, k, v) {
			if (d->n == d->cap) break;
			d->k[d->n] = v_cstr(k);
			d->v[d->n++] = from_json(r, v, depth + 1);
		}
		return v_dict(d);
	}
	}
	return NONE;
}

// ---- API -----------------------------------------------------------------------------------------

struct tmpl {
	arena a;
	node *root;
	tmpl_limits lim;
};

void tmpl_default_limits(tmpl_limits *l) {
	l->max_steps = 10 * 1000 * 1000;
	l->max_output = 16 << 20;
	l->max_memory = 128 << 20;
	l->max_calls = 100;
}

int tmpl_compile(tmpl **out, const char *src, size_t len, char *err, size_t errlen) {
	*out = NULL;
	if (!src && len) return lanes_seterr(err, errlen, LANES_EINVAL, "template source is NULL");
	if (len > MAX_SRC) return lanes_seterr(err, errlen, LANES_ELIMIT, "template is larger than %u bytes", MAX_SRC);
	tmpl *t = calloc(1, sizeof *t);
	R *r = calloc(1, sizeof *r);
	if (!t || !r) {
		free(t);
		free(r);
		return lanes_seterr(err, errlen, LANES_ENOMEM, "out of memory compiling template");
	}
	r->err = err;
	r->errlen = errlen;
	r->a.limit = COMPILE_MEMORY;
	r->max_steps = INT64_MAX;
	r->max_output = INT64_MAX / 4;
	if (setjmp(r->jb)) {
		int code = r->code;
		arena_free(&r->a);
		free(r);
		free(t);
		return code;
	}
	// newlines normalize to \n and one trailing newline is dropped, as Jinja's lexer does
	char *s = alloc(r, len + 1);
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r') {
			s[n++] = '\n';
			if (i + 1 < len && src[i + 1] == '\n') i++;
		} else
			s[n++] = src[i];
	}
	if (n && s[n - 1] == '\n') n--;
	s[n] = 0;
	lexer L = {.r = r, .src = s, .len = n};
	lex(&L);
	r->tok = L.v;
	r->ntok = L.n;
	r->pos = 0;
	int which;
	t->root = parse_body(r, NULL, 0, &which);
	t->a = r->a;
	tmpl_default_limits(&t->lim);
	free(r);
	*out = t;
	return LANES_OK;
}

void tmpl_free(tmpl *t) {
	if (!t) return;
	arena_free(&t->a);
	free(t);
}

void tmpl_set_limits(tmpl *t, const tmpl_limits *l) { t->lim = *l; }

static bool parse_date(const char *s, struct tm *tm) {
	int y, m, d;
	char tail;
	if (sscanf(s, "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3) return false;
	if (y < 1 || y > 9999 || m < 1 || m > 12 || d < 1 || d > 31) return false;
	memset(tm, 0, sizeof *tm);
	tm->tm_year = y - 1900;
	tm->tm_mon = m - 1;
	tm->tm_mday = d;
	time_t tt = timegm(tm);
	struct tm back;
	if (!gmtime_r(&tt, &back) || back.tm_mday != d) return false;
	*tm = back;
	return true;
}

int tmpl_render(const tmpl *t, const json_t *context, const char *date_ymd, char **out, size_t *out_len,
		char *err, size_t errlen) {
	*out = NULL;
	if (out_len) *out_len = 0;
	if (!t) return lanes_seterr(err, errlen, LANES_EINVAL, "no template");
	if (context && !json_is_object(context)) return lanes_seterr(err, errlen, LANES_EINVAL, "template context must be a JSON object");
	struct tm date;
	if (date_ymd) {
		if (!parse_date(date_ymd, &date)) return lanes_seterr(err, errlen, LANES_EINVAL, "bad date '%s' (want YYYY-MM-DD)", date_ymd);
	} else {
		time_t now = time(NULL);
		localtime_r(&now, &date);
	}
	R *r = calloc(1, sizeof *r);
	if (!r) return lanes_seterr(err, errlen, LANES_ENOMEM, "out of memory rendering template");
	r->err = err;
	r->errlen = errlen;
	r->a.limit = (size_t)t->lim.max_memory;
	r->max_steps = t->lim.max_steps;
	r->max_output = t->lim.max_output;
	r->max_calls = t->lim.max_calls;
	r->date = date;
	if (setjmp(r->jb)) {
		int code = r->code;
		arena_free(&r->a);
		free(r);
		return code;
	}
	scope *globals = scope_new(r, NULL);
	if (context) {
		const char *k;
		json_t *v;
		json_object_foreach((json_t *)context, k, v) scope_set(r, globals, (str_t){k, strlen(k)}, from_json(r, v, 0));
	}
	scope *top = scope_new(r, globals);
	buf b = {0};
	exec(r, t->root, top, &b);
	char *res = malloc(b.n + 1);
	if (!res) fail(r, LANES_ENOMEM, "out of memory rendering template");
	if (b.n) memcpy(res, b.p, b.n);
	res[b.n] = 0;
	*out = res;
	if (out_len) *out_len = b.n;
	arena_free(&r->a);
	free(r);
	return LANES_OK;
}

int tmpl_render_chat(const char *src, const json_t *messages, const char *bos, const char *eos,
		     bool add_generation_prompt, const char *date_ymd, char **out, size_t *out_len, char *err,
		     size_t errlen) {
	*out = NULL;
	tmpl *t;
	int rc = tmpl_compile(&t, src, src ? strlen(src) : 0, err, errlen);
	if (rc) return rc;
	json_t *ctx = json_object();
	if (!ctx) {
		tmpl_free(t);
		return lanes_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	}
	json_object_set_new(ctx, "messages", messages ? json_incref((json_t *)messages) : json_array());
	json_object_set_new(ctx, "bos_token", json_string(bos ? bos : ""));
	json_object_set_new(ctx, "eos_token", json_string(eos ? eos : ""));
	json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_generation_prompt));
	rc = tmpl_render(t, ctx, date_ymd, out, out_len, err, errlen);
	json_decref(ctx);
	tmpl_free(t);
	return rc;
}

const char *tmpl_chatml(void) {
	return "{%- for message in messages -%}"
	       "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
	       "{%- endfor -%}"
	       "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";
}
