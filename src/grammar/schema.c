// grammar, schemas: JSON Schema to GBNF. A schema node becomes an expression over shared
// helper rules (strings, numbers, whitespace); objects, arrays, unions and $ref targets get
// rules of their own, so recursive schemas recurse through rule names, never on the left.
#include "grammar/schema.h"

#include "base/base.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SG_MAX_DEPTH 64           // schema nesting, $ref hops included
#define SG_MAX_OUT (1u << 20)     // bytes of GBNF, all rules together
#define SG_MAX_PROPS 512          // properties of one object, items of one prefixItems
#define SG_MAX_ENUM 1024          // values of one enum, alternatives of one anyOf
#define SG_MAX_RULES 16384        // named rules
#define SG_MAX_REPEAT 1000        // m and n of {m,n}: the grammar engine's default bound
#define SG_MAX_LENGTH 100000     // minLength, maxLength: past the repeat bound through chained rules
#define SG_MAX_NAME 48            // bytes of a rule name taken from the schema
#define SG_PTR 256                // bytes of the JSON pointer shown in messages
#define SG_INT_DIGITS 16          // digits of an integer with no bound on that side

#define Q "\"\\\"\"" // the GBNF literal of one double quote

typedef struct {
	char *p;
	size_t n, cap;
} sb;

typedef struct {
	char *ref;  // the $ref text
	char *name; // its rule
	bool done;  // its rule is written
} sg_ref;

typedef struct {
	const json_t *top;
	const char *root;
	sb out;            // finished rules
	size_t used;       // bytes held by every buffer, out included
	uint32_t helpers;  // helper rules referenced (bit per entry of sg_helpers)
	int rc;            // first error; every step stops once set
	char *err;
	size_t errlen;
	int depth;
	char ptr[SG_PTR + 4]; // JSON pointer of the node being read
	size_t ptrlen;
	sg_ref *refs;
	int nrefs, refcap;
	int lead;          // refs at or past this index are open with no input consumed since
	int64_t work;      // pairs compared to prove oneOf alternatives apart
	char **names;      // open-addressed set of rule names taken
	size_t nnames, namecap;
} sg;

// ---- helper rules: '@' stands for the root name ------------------------------------------
enum { H_WS, H_HEX, H_CHAR, H_KC, H_STRING, H_INT, H_NUM, H_BOOL, H_NULL, H_VALUE, H_OBJECT, H_ARRAY,
       H_DAY, H_CLOCK, H_DATE, H_TIME, H_DATETIME, H_UUID, H_COUNT };

static const struct {
	const char *name, *body;
	uint32_t deps;
} sg_helpers[H_COUNT] = {
	// bounded whitespace: a model cannot loop on it, and pretty-printing still fits
	[H_WS] = {"ws", "( \" \" | \"\\n\" [ \\t]{0,20} )?", 0},
	[H_HEX] = {"hex", "[0-9a-fA-F]", 0},
	// \u escapes name scalar values only: a surrogate comes as a high-low pair
	[H_CHAR] = {"char",
		    "[^\"\\\\\\x00-\\x1F\\x7F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-CefEF] @-hex{3} | [dD] [0-7] "
		    "@-hex{2} | [dD] [89abAB] @-hex{2} \"\\\\u\" [dD] [c-fC-F] @-hex{2} ) )",
		    1u << H_HEX},
	// characters of a key that must differ from the declared ones: no escapes, so no aliasing
	[H_KC] = {"kc", "[^\"\\\\\\x00-\\x1F\\x7F]", 0},
	[H_STRING] = {"string", Q " @-char* " Q " @-ws", 1u << H_CHAR | 1u << H_WS},
	[H_INT] = {"integer", "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) @-ws", 1u << H_WS},
	[H_NUM] = {"number", "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )? @-ws",
		   1u << H_WS},
	[H_BOOL] = {"boolean", "( \"true\" | \"false\" ) @-ws", 1u << H_WS},
	[H_NULL] = {"null", "\"null\" @-ws", 1u << H_WS},
	[H_VALUE] = {"value", "@-object | @-array | @-string | @-number | @-boolean | @-null",
		     1u << H_OBJECT | 1u << H_ARRAY | 1u << H_STRING | 1u << H_NUM | 1u << H_BOOL | 1u << H_NULL},
	[H_OBJECT] = {"object",
		      "\"{\" @-ws ( @-string \":\" @-ws @-value ( \",\" @-ws @-string \":\" @-ws @-value )* )? \"}\" @-ws",
		      1u << H_STRING | 1u << H_VALUE | 1u << H_WS},
	[H_ARRAY] = {"array", "\"[\" @-ws ( @-value ( \",\" @-ws @-value )* )? \"]\" @-ws", 1u << H_VALUE | 1u << H_WS},
	// the days each month has (February: 28, as a leap year cannot be told here)
	[H_DAY] = {"day",
		   "[0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) | ( \"0\" "
		   "[469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" "
		   "[0-8] ) )",
		   0},
	[H_CLOCK] = {"clock",
		     "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? ( \"Z\" | [-+] ( "
		     "[01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )",
		     0},
	[H_DATE] = {"date", Q " @-day " Q " @-ws", 1u << H_DAY | 1u << H_WS},
	[H_TIME] = {"time", Q " @-clock " Q " @-ws", 1u << H_CLOCK | 1u << H_WS},
	[H_DATETIME] = {"date-time", Q " @-day \"T\" @-clock " Q " @-ws", 1u << H_DAY | 1u << H_CLOCK | 1u << H_WS},
	[H_UUID] = {"uuid",
		    Q " @-hex{8} \"-\" @-hex{4} \"-\" @-hex{4} \"-\" @-hex{4} \"-\" @-hex{12} " Q " @-ws",
		    1u << H_HEX | 1u << H_WS},
};

// ---- errors, buffers, pointers ------------------------------------------------------------
__attribute__((format(printf, 3, 4))) static int fail(sg *g, int code, const char *fmt, ...) {
	if (g->rc) return g->rc;
	char msg[384];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	g->rc = code;
	if (g->ptrlen) base_seterr(g->err, g->errlen, code, "%s at %s", msg, g->ptr);
	else base_seterr(g->err, g->errlen, code, "%s at the root", msg);
	return code;
}

static int sb_add(sg *g, sb *b, const char *s, size_t n) {
	if (g->rc) return g->rc;
	if (g->used + n > SG_MAX_OUT) return fail(g, LANES_ELIMIT, "the grammar would exceed %u bytes", SG_MAX_OUT);
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n + 1) cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) return fail(g, LANES_ENOMEM, "out of memory");
		b->p = p, b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
	g->used += n;
	return 0;
}

static int sb_put(sg *g, sb *b, const char *s) { return sb_add(g, b, s, strlen(s)); }

__attribute__((format(printf, 3, 4))) static int sb_fmt(sg *g, sb *b, const char *fmt, ...) {
	char tmp[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	return sb_add(g, b, tmp, n < (int)sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void sb_free(sg *g, sb *b) {
	g->used -= b->n;
	free(b->p);
	*b = (sb){0};
}

// Appends a reference to helper h (the root's name, '-', the helper's).
static int helper(sg *g, sb *b, int h) {
	g->helpers |= 1u << h;
	sb_put(g, b, g->root);
	sb_put(g, b, "-");
	return sb_put(g, b, sg_helpers[h].name);
}

// Enters child seg of the current node in the pointer; returns the length to restore.
static size_t ptr_push(sg *g, const char *seg) {
	size_t old = g->ptrlen, n = g->ptrlen;
	if (n < SG_PTR) g->ptr[n++] = '/';
	for (const char *c = seg; *c && n < SG_PTR; c++) {
		if (*c == '~' || *c == '/') {
			g->ptr[n++] = '~';
			if (n < SG_PTR) g->ptr[n++] = *c == '~' ? '0' : '1';
		} else g->ptr[n++] = *c;
	}
	if (n >= SG_PTR) memcpy(g->ptr + SG_PTR, "...", 3), n = SG_PTR + 3;
	g->ptr[n] = 0;
	g->ptrlen = n;
	return old;
}

static void ptr_pop(sg *g, size_t old) {
	g->ptrlen = old;
	g->ptr[old] = 0;
}

static size_t ptr_index(sg *g, size_t i) {
	char seg[24];
	snprintf(seg, sizeof seg, "%zu", i);
	return ptr_push(g, seg);
}

// ---- rule names ---------------------------------------------------------------------------
// Takes name into the set; false when it was already taken.
static bool name_take(sg *g, const char *name) {
	if (g->nnames * 2 >= g->namecap) {
		size_t cap = g->namecap ? g->namecap * 2 : 256;
		char **t = calloc(cap, sizeof *t);
		if (!t) return fail(g, LANES_ENOMEM, "out of memory"), false;
		for (size_t i = 0; i < g->namecap; i++) {
			if (!g->names[i]) continue;
			size_t j = base_hash64(g->names[i], strlen(g->names[i]), 0) & (cap - 1);
			while (t[j]) j = (j + 1) & (cap - 1);
			t[j] = g->names[i];
		}
		free(g->names);
		g->names = t, g->namecap = cap;
	}
	size_t j = base_hash64(name, strlen(name), 0) & (g->namecap - 1);
	for (; g->names[j]; j = (j + 1) & (g->namecap - 1))
		if (!strcmp(g->names[j], name)) return false;
	if (!(g->names[j] = strdup(name))) return fail(g, LANES_ENOMEM, "out of memory"), false;
	g->nnames++;
	return true;
}

// A fresh rule name root-<hint>, hint reduced to letters, digits and '-'; NULL on error.
static char *name_new(sg *g, const char *hint) {
	if ((int)g->nnames >= SG_MAX_RULES + H_COUNT)
		return fail(g, LANES_ELIMIT, "the grammar would need more than %d rules", SG_MAX_RULES), NULL;
	char base[SG_MAX_NAME + 1];
	size_t n = 0;
	for (const char *c = hint; *c && n < SG_MAX_NAME; c++) {
		bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9');
		if (ok) base[n++] = *c;
		else if (n && base[n - 1] != '-') base[n++] = '-';
	}
	while (n && base[n - 1] == '-') n--;
	if (!n) base[n++] = 'r';
	base[n] = 0;
	size_t cap = strlen(g->root) + n + 24;
	char *name = malloc(cap);
	if (!name) return fail(g, LANES_ENOMEM, "out of memory"), NULL;
	snprintf(name, cap, "%s-%s", g->root, base);
	for (int k = 2; !g->rc && !name_take(g, name); k++) snprintf(name, cap, "%s-%s-%d", g->root, base, k);
	if (g->rc) free(name), name = NULL;
	return name;
}

// Writes the rule name ::= body into the output; the body's bytes move there.
static int rule_emit(sg *g, const char *name, sb *body) {
	g->used -= body->n; // counted once the rule text holds it
	sb_put(g, &g->out, name);
	sb_put(g, &g->out, " ::= ");
	sb_add(g, &g->out, body->p ? body->p : "", body->n);
	sb_put(g, &g->out, "\n");
	free(body->p);
	*body = (sb){0};
	return g->rc;
}

// Emits body as a rule named name (or a fresh one from hint) and appends that name to out.
static int rule_ref(sg *g, const char *name, const char *hint, sb *body, sb *out) {
	char *fresh = name ? NULL : name_new(g, hint);
	if (g->rc) return sb_free(g, body), g->rc;
	const char *n = name ? name : fresh;
	rule_emit(g, n, body);
	sb_put(g, out, n);
	free(fresh);
	return g->rc;
}

// Writes code point c (<= 0x10FFFF) as UTF-8 into u; returns its length.
static size_t utf8_put(char *u, uint32_t c) {
	if (c < 0x80) return u[0] = (char)c, 1;
	if (c < 0x800) return u[0] = (char)(0xC0 | c >> 6), u[1] = (char)(0x80 | (c & 0x3F)), 2;
	if (c < 0x10000)
		return u[0] = (char)(0xE0 | c >> 12), u[1] = (char)(0x80 | (c >> 6 & 0x3F)), u[2] = (char)(0x80 | (c & 0x3F)), 3;
	u[0] = (char)(0xF0 | c >> 18), u[1] = (char)(0x80 | (c >> 12 & 0x3F));
	u[2] = (char)(0x80 | (c >> 6 & 0x3F)), u[3] = (char)(0x80 | (c & 0x3F));
	return 4;
}

// ---- literals -----------------------------------------------------------------------------
// Appends s (n bytes, UTF-8) as a GBNF string literal.
static int literal(sg *g, sb *b, const char *s, size_t n) {
	sb_put(g, b, "\"");
	for (size_t i = 0; i < n && !g->rc; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') sb_fmt(g, b, "\\%c", c);
		else if (c == '\n') sb_put(g, b, "\\n");
		else if (c == '\t') sb_put(g, b, "\\t");
		else if (c == '\r') sb_put(g, b, "\\r");
		else if (c < 0x20 || c == 0x7F) sb_fmt(g, b, "\\x%02X", c);
		else sb_add(g, b, (const char *)&c, 1);
	}
	return sb_put(g, b, "\"");
}

// Appends a JSON value as literals of its compact text, whitespace allowed between tokens.
static int json_literal(sg *g, sb *b, const json_t *v, int depth) {
	if (depth > SG_MAX_DEPTH) return fail(g, LANES_ELIMIT, "a value nested deeper than %d levels", SG_MAX_DEPTH);
	bool obj = json_is_object(v);
	if (obj || json_is_array(v)) {
		sb_put(g, b, obj ? "\"{\" " : "\"[\" ");
		helper(g, b, H_WS);
		size_t n = obj ? json_object_size(v) : json_array_size(v), i = 0;
		const char *key;
		json_t *x;
		void *it = obj ? json_object_iter((json_t *)v) : NULL;
		for (; i < n && !g->rc; i++) {
			sb_put(g, b, i ? " \",\" " : " ");
			if (i) helper(g, b, H_WS), sb_put(g, b, " ");
			if (obj) {
				key = json_object_iter_key(it), x = json_object_iter_value(it);
				it = json_object_iter_next((json_t *)v, it);
				json_t *k = json_string(key);
				json_literal(g, b, k, depth + 1);
				json_decref(k);
				sb_put(g, b, " \":\" ");
				helper(g, b, H_WS);
				sb_put(g, b, " ");
			} else x = json_array_get(v, i);
			json_literal(g, b, x, depth + 1);
		}
		sb_put(g, b, obj ? " \"}\" " : " \"]\" ");
		return helper(g, b, H_WS);
	}
	char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!s) return fail(g, LANES_ENOMEM, "out of memory");
	literal(g, b, s, strlen(s));
	free(s);
	sb_put(g, b, " ");
	return helper(g, b, H_WS);
}

// Appends code point c as it may appear inside a GBNF character class.
static int class_char(sg *g, sb *b, uint32_t c) {
	if (c >= 0x10000) return sb_fmt(g, b, "\\U%08X", c);
	if (c >= 0x7F || c < 0x20 || c == ']' || c == '\\' || c == '^' || c == '-' || c == '[') return sb_fmt(g, b, "\\u%04X", c);
	char ch = (char)c;
	return sb_add(g, b, &ch, 1);
}

// Appends {m,n} (n < 0: unbounded) in its shortest form; nothing for {1}.
static int repeat(sg *g, sb *b, int64_t m, int64_t n) {
	if (n > SG_MAX_REPEAT || m > SG_MAX_REPEAT)
		return fail(g, LANES_ELIMIT, "a repetition of %lld exceeds %d", (long long)(n > m ? n : m), SG_MAX_REPEAT);
	if (m == n) return m == 1 ? 0 : sb_fmt(g, b, "{%lld}", (long long)m);
	if (n < 0) return m == 0 ? sb_put(g, b, "*") : m == 1 ? sb_put(g, b, "+") : sb_fmt(g, b, "{%lld,}", (long long)m);
	if (m == 0 && n == 1) return sb_put(g, b, "?");
	return sb_fmt(g, b, "{%lld,%lld}", (long long)m, (long long)n);
}

// ---- keywords -----------------------------------------------------------------------------
enum { K_ANNOT = 1, K_CORE = 2, K_OBJ = 4, K_ARR = 8, K_STR = 16, K_NUM = 32 };

static const struct {
	const char *key;
	int kind;
} sg_keys[] = {
	{"title", K_ANNOT}, {"description", K_ANNOT}, {"examples", K_ANNOT}, {"default", K_ANNOT},
	{"$schema", K_ANNOT}, {"$id", K_ANNOT}, {"$comment", K_ANNOT}, {"readOnly", K_ANNOT},
	{"writeOnly", K_ANNOT}, {"deprecated", K_ANNOT}, {"$defs", K_ANNOT}, {"definitions", K_ANNOT},
	{"type", K_CORE}, {"enum", K_CORE}, {"const", K_CORE}, {"anyOf", K_CORE}, {"oneOf", K_CORE},
	{"allOf", K_CORE}, {"$ref", K_CORE}, {"nullable", K_CORE},
	{"properties", K_OBJ}, {"required", K_OBJ}, {"additionalProperties", K_OBJ},
	{"items", K_ARR}, {"prefixItems", K_ARR}, {"minItems", K_ARR}, {"maxItems", K_ARR},
	{"minLength", K_STR}, {"maxLength", K_STR}, {"pattern", K_STR}, {"format", K_STR},
	{"minimum", K_NUM}, {"maximum", K_NUM}, {"exclusiveMinimum", K_NUM}, {"exclusiveMaximum", K_NUM},
};

static int key_kind(const char *key) {
	for (size_t i = 0; i < sizeof sg_keys / sizeof sg_keys[0]; i++)
		if (!strcmp(sg_keys[i].key, key)) return sg_keys[i].kind;
	return 0;
}

// Refuses every key of s outside the kinds allowed (annotations always pass).
static int only_keys(sg *g, const json_t *s, int allowed, const char *beside) {
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)s, key, v) {
		int k = key_kind(key);
		if (!k) return fail(g, LANES_EINVAL, "unsupported keyword '%s'", key);
		if (k & (allowed | K_ANNOT) || (beside && !strcmp(key, beside))) continue;
		if (beside) return fail(g, LANES_EINVAL, "unsupported keyword '%s' beside '%s'", key, beside);
		return fail(g, LANES_EINVAL, "unsupported keyword '%s'", key);
	}
	return 0;
}

// Whether every key of s but key is an annotation.
static bool alone(const json_t *s, const char *key) {
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)s, k, v) if (strcmp(k, key) && key_kind(k) != K_ANNOT) return false;
	return true;
}

// Reads s[key] as a whole non-negative count into *v (absent: *v unchanged, returns 0).
static int count_of(sg *g, const json_t *s, const char *key, int64_t max, int64_t *v) {
	const json_t *x = json_object_get(s, key);
	if (!x) return 0;
	double d = json_number_value(x);
	if (!json_is_number(x) || d < 0 || d != floor(d)) return fail(g, LANES_EINVAL, "'%s' must be a non-negative integer", key);
	if (d > (double)max) return fail(g, LANES_ELIMIT, "'%s' of %.0f exceeds %lld", key, d, (long long)max);
	*v = (int64_t)d;
	return 0;
}

enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_NUM = 16, T_STR = 32, T_INT = 64, T_ALL = 127 };
static const char *const sg_types[] = {"null", "boolean", "object", "array", "number", "string", "integer"};

static int type_bit(const char *name) {
	for (int i = 0; i < 7; i++)
		if (!strcmp(name, sg_types[i])) return 1 << i;
	return 0;
}

// The set of types s allows: its "type", else what its keywords imply, else all.
static int types_of(sg *g, const json_t *s) {
	const json_t *t = json_object_get(s, "type");
	if (json_is_string(t)) {
		int b = type_bit(json_string_value(t));
		return b ? b : fail(g, LANES_EINVAL, "unknown type '%s'", json_string_value(t)), b;
	}
	if (json_is_array(t)) {
		int bits = 0;
		size_t i;
		json_t *x;
		json_array_foreach(t, i, x) {
			int b = json_is_string(x) ? type_bit(json_string_value(x)) : 0;
			if (!b || (bits & b)) return fail(g, LANES_EINVAL, "'type' must list distinct type names"), 0;
			bits |= b;
		}
		return bits ? bits : (fail(g, LANES_EINVAL, "'type' must not be empty"), 0);
	}
	if (t) return fail(g, LANES_EINVAL, "'type' must be a string or an array of strings"), 0;
	int bits = 0;
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)s, key, v) {
		int k = key_kind(key);
		bits |= k == K_OBJ ? T_OBJ : k == K_ARR ? T_ARR : k == K_STR ? T_STR : k == K_NUM ? T_NUM : 0;
	}
	return bits ? bits : T_ALL;
}

static int gen(sg *g, const json_t *s, const char *hint, const char *name, sb *out);

// ---- integers -----------------------------------------------------------------------------
static bool all_of(const char *s, char c) {
	for (; *s; s++)
		if (*s != c) return false;
	return true;
}

// Appends a sequence matching the decimals from x to y, both of n digits (x <= y).
static void digits(sg *g, sb *b, const char *x, const char *y, int n) {
	if (!strcmp(x, y)) {
		literal(g, b, x, (size_t)n);
		return;
	}
	char xf = x[0], yf = y[0];
	if (xf == yf) {
		sb_fmt(g, b, "\"%c\" ", xf);
		digits(g, b, x + 1, y + 1, n - 1);
		return;
	}
	char nines[24], zeros[24];
	memset(nines, '9', (size_t)n - 1), nines[n - 1] = 0;
	memset(zeros, '0', (size_t)n - 1), zeros[n - 1] = 0;
	bool xz = all_of(x + 1, '0'), y9 = all_of(y + 1, '9');
	char lo = (char)(xf + !xz), hi = (char)(yf - !y9);
	int alts = !xz + (lo <= hi) + !y9;
	if (alts > 1) sb_put(g, b, "( ");
	if (!xz) {
		sb_fmt(g, b, "\"%c\" ", xf);
		digits(g, b, x + 1, nines, n - 1);
	}
	if (lo <= hi) {
		if (!xz) sb_put(g, b, " | ");
		if (lo == hi) sb_fmt(g, b, "\"%c\"", lo);
		else sb_fmt(g, b, "[%c-%c]", lo, hi);
		if (n > 1) sb_put(g, b, " [0-9]"), repeat(g, b, n - 1, n - 1);
	}
	if (!y9) {
		if (alts > 1) sb_put(g, b, " | ");
		sb_fmt(g, b, "\"%c\" ", yf);
		digits(g, b, zeros, y + 1, n - 1);
	}
	if (alts > 1) sb_put(g, b, " )");
}

static void alt_sep(sg *g, sb *out, const char *sign, bool *first) {
	if (!*first) sb_put(g, out, " | ");
	*first = false;
	sb_put(g, out, sign);
}

// Appends alternatives (" | " between, *first tracking the first) for the decimals in
// [a, b], a <= b <= 10^19 - 1; runs of whole digit counts share one alternative.
static void naturals(sg *g, sb *out, uint64_t a, uint64_t b, const char *sign, bool *first) {
	uint64_t p = 1; // 10^(d-1)
	int run = 0;    // digits of the first whole block of the run pending, 0: none
	for (int d = 1; d <= 19; d++, p *= 10) {
		uint64_t floor_d = d == 1 ? 0 : p, top = p * 10 - 1;
		uint64_t lo = a > floor_d ? a : floor_d, hi = b < top ? b : top;
		bool empty = lo > hi, whole = !empty && d > 1 && lo == p && hi == top;
		if (whole && !run) run = d;
		if (run && (!whole || hi == b)) {
			int last = whole ? d : d - 1;
			alt_sep(g, out, sign, first);
			sb_put(g, out, "[1-9] [0-9]");
			repeat(g, out, run - 1, last - 1);
			run = 0;
		}
		if (!empty && !whole) {
			char x[24], y[24];
			snprintf(x, sizeof x, "%llu", (unsigned long long)lo);
			snprintf(y, sizeof y, "%llu", (unsigned long long)hi);
			alt_sep(g, out, sign, first);
			digits(g, out, x, y, d);
		}
		if (hi >= b) break;
	}
}

// Reads a bound of s; *set false when absent. Exclusive ones are moved onto the integers.
static int bound(sg *g, const json_t *s, const char *key, const char *ex, bool upper, double *v, bool *set) {
	const json_t *x = json_object_get(s, key), *e = json_object_get(s, ex);
	*set = false;
	if (x && !json_is_number(x)) return fail(g, LANES_EINVAL, "'%s' must be a number", key);
	if (e && !json_is_number(e) && !json_is_boolean(e)) return fail(g, LANES_EINVAL, "'%s' must be a number", ex);
	if (json_is_boolean(e) && !x && json_is_true(e)) return fail(g, LANES_EINVAL, "'%s' needs '%s'", ex, key);
	if (x) *v = json_number_value(x), *set = true;
	bool strict = json_is_true(e);
	if (json_is_number(e)) {
		double w = json_number_value(e);
		if (!*set || (upper ? w <= *v : w >= *v)) *v = w, strict = true, *set = true;
	}
	if (*set && !isfinite(*v)) return fail(g, LANES_EINVAL, "'%s' must be finite", key);
	if (*set && strict && *v == floor(*v)) *v += upper ? -1 : 1;
	return 0;
}

static int gen_int(sg *g, const json_t *s, sb *out) {
	double lo = 0, hi = 0;
	bool has_lo, has_hi;
	if (bound(g, s, "minimum", "exclusiveMinimum", false, &lo, &has_lo) ||
	    bound(g, s, "maximum", "exclusiveMaximum", true, &hi, &has_hi))
		return g->rc;
	if (!has_lo && !has_hi) return helper(g, out, H_INT);
	const int64_t big = 999999999999999999, dflt = 9999999999999999;
	if ((has_lo && fabs(lo) > 1e18) || (has_hi && fabs(hi) > 1e18))
		return fail(g, LANES_ELIMIT, "integer bounds beyond 18 digits are unsupported");
	int64_t a = has_lo ? (int64_t)ceil(lo) : -dflt, b = has_hi ? (int64_t)floor(hi) : a > dflt ? big : dflt;
	if (!has_lo && b < -dflt) a = -big;
	if (a < -big || b > big) return fail(g, LANES_ELIMIT, "integer bounds beyond 18 digits are unsupported");
	if (a > b) return fail(g, LANES_EINVAL, "no integer lies between minimum and maximum");
	bool first = true;
	sb_put(g, out, "( ");
	if (a < 0) naturals(g, out, b < 0 ? (uint64_t)-b : 1, (uint64_t)-a, "\"-\" ", &first);
	if (b >= 0) naturals(g, out, a > 0 ? (uint64_t)a : 0, (uint64_t)b, "", &first);
	sb_put(g, out, " ) ");
	return helper(g, out, H_WS);
}

// Reads a number's bound: *set when given (a whole number), *ex when exclusive.
static int num_bound(sg *g, const json_t *s, const char *key, const char *exkey, bool upper, double *v, bool *set, bool *ex) {
	const json_t *x = json_object_get(s, key), *e = json_object_get(s, exkey);
	*set = *ex = false;
	if (x && !json_is_number(x)) return fail(g, LANES_EINVAL, "'%s' must be a number", key);
	if (e && !json_is_number(e) && !json_is_boolean(e)) return fail(g, LANES_EINVAL, "'%s' must be a number", exkey);
	if (x) *v = json_number_value(x), *set = true, *ex = json_is_true(e);
	if (json_is_number(e) && (!*set || (upper ? json_number_value(e) <= *v : json_number_value(e) >= *v)))
		*v = json_number_value(e), *set = *ex = true;
	// a whole bound splits the text at its integral part; another one is not expressible here
	if (*set && (*v != floor(*v) || fabs(*v) > 1e15))
		return fail(g, LANES_EINVAL, "unsupported keyword '%s' for a number: only whole bounds up to 1e15 are supported", *ex ? exkey : key);
	return 0;
}

// Appends alternatives for magnitudes in [lo, hi] (excluded ends as said; has_hi false: no
// upper end) written with sign, a fraction, and no exponent.
static void magnitudes(sg *g, sb *out, int64_t lo, bool lo_ex, bool has_hi, int64_t hi, bool hi_ex, const char *sign, bool *first) {
	static const char *const any = "( \".\" [0-9]{1,16} )?", *const zero = "( \".\" \"0\"{1,16} )?",
			  *const nonzero = "\".\" \"0\"{0,15} [1-9] [0-9]{0,15}";
	int64_t a = lo_ex ? lo + 1 : lo, b = has_hi ? hi - 1 : 9999999999999999;
	char d[24];
	if (a <= b) {
		sb in = {0};
		bool f = true;
		naturals(g, &in, (uint64_t)a, (uint64_t)b, "", &f);
		alt_sep(g, out, sign, first);
		sb_put(g, out, "( "), sb_add(g, out, in.p, in.n), sb_put(g, out, " ) "), sb_put(g, out, any);
		sb_free(g, &in);
	}
	if (lo_ex && (!has_hi || lo < hi)) {
		snprintf(d, sizeof d, "\"%lld\" ", (long long)lo);
		alt_sep(g, out, sign, first);
		sb_put(g, out, d), sb_put(g, out, nonzero);
	}
	if (has_hi && !hi_ex && (lo_ex ? hi > lo : hi >= lo)) {
		snprintf(d, sizeof d, "\"%lld\" ", (long long)hi);
		alt_sep(g, out, sign, first);
		sb_put(g, out, d), sb_put(g, out, zero);
	}
}

static int gen_num(sg *g, const json_t *s, sb *out) {
	double lo = 0, hi = 0;
	bool has_lo, has_hi, lo_ex, hi_ex;
	if (num_bound(g, s, "minimum", "exclusiveMinimum", false, &lo, &has_lo, &lo_ex) ||
	    num_bound(g, s, "maximum", "exclusiveMaximum", true, &hi, &has_hi, &hi_ex))
		return g->rc;
	if (!has_lo && !has_hi) return helper(g, out, H_NUM);
	if (has_lo && has_hi && (lo > hi || (lo == hi && (lo_ex || hi_ex))))
		return fail(g, LANES_EINVAL, "no number lies between minimum and maximum");
	int64_t l = (int64_t)lo, h = (int64_t)hi;
	bool first = true;
	sb_put(g, out, "( ");
	// at least zero: the integral part against the bounds; below zero: the magnitude
	if (!has_hi || h >= 0) {
		bool from0 = !has_lo || l < 0;
		magnitudes(g, out, from0 ? 0 : l, from0 ? false : lo_ex, has_hi, h, hi_ex, "", &first);
	}
	if (!has_lo || l < 0) {
		bool below = has_hi && h < 0;
		magnitudes(g, out, below ? -h : 0, below ? hi_ex : true, has_lo, -l, lo_ex, "\"-\" ", &first);
	}
	if (first) return fail(g, LANES_EINVAL, "no number lies between minimum and maximum");
	sb_put(g, out, " ) ");
	return helper(g, out, H_WS);
}

// ---- patterns -----------------------------------------------------------------------------
typedef struct {
	uint32_t lo, hi;
} span;

typedef struct {
	span *v;
	size_t n, cap;
} cset;

typedef struct {
	const char *p, *end;
	int depth;
} rx;

static int cs_add(sg *g, cset *c, uint32_t lo, uint32_t hi) {
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;
		span *v = realloc(c->v, cap * sizeof *v);
		if (!v) return fail(g, LANES_ENOMEM, "out of memory");
		c->v = v, c->cap = cap;
	}
	c->v[c->n++] = (span){lo, hi};
	return 0;
}

static int span_cmp(const void *a, const void *b) {
	const span *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void cs_norm(cset *c) {
	if (!c->n) return;
	qsort(c->v, c->n, sizeof *c->v, span_cmp);
	size_t k = 0;
	for (size_t i = 1; i < c->n; i++) {
		if (c->v[i].lo <= c->v[k].hi + 1) {
			if (c->v[i].hi > c->v[k].hi) c->v[k].hi = c->v[i].hi;
		} else c->v[++k] = c->v[i];
	}
	c->n = k + 1;
}

// The code points not in c (c normalized), surrogates and line breaks left out.
static int cs_invert(sg *g, cset *c) {
	cset r = {0};
	uint32_t at = 0;
	for (size_t i = 0; i < c->n && !g->rc; i++) {
		if (c->v[i].lo > at) cs_add(g, &r, at, c->v[i].lo - 1);
		at = c->v[i].hi + 1;
	}
	if (at <= 0x10FFFF) cs_add(g, &r, at, 0x10FFFF);
	free(c->v);
	*c = r;
	return g->rc;
}

// Appends the JSON text of the characters in c (normalized): raw where JSON allows, escaped
// for '"' and '\\' (when esc); control characters only with ctl, as a negation never yields
// them. What is appended is one element, a group when needed.
static int cs_emit(sg *g, const cset *c, bool ctl, bool esc, sb *out) {
	sb cls = {0}, alt = {0};
	int alts = 0;
	uint32_t one = 0, ncp = 0; // code points in the class part, the first of them
	static const uint32_t cut[][2] = {{0, 0x1F}, {0x22, 0x22}, {0x5C, 0x5C}, {0x7F, 0x7F}, {0xD800, 0xDFFF}};
	for (size_t i = 0; i < c->n && !g->rc; i++) {
		uint32_t lo = c->v[i].lo, hi = c->v[i].hi;
		while (lo <= hi && !g->rc) {
			// the next piece of [lo, hi] up to a code point JSON cannot carry raw
			uint32_t end = hi;
			int k = -1;
			for (int j = 0; j < 5; j++) {
				if (lo >= cut[j][0] && lo <= cut[j][1]) { k = j; break; }
				if (cut[j][0] > lo && cut[j][0] - 1 < end) end = cut[j][0] - 1;
			}
			if (k >= 0) {
				uint32_t stop = cut[k][1] < hi ? cut[k][1] : hi;
				for (uint32_t x = lo; x <= stop && k != 4 && !g->rc; x++) {
					if (((k == 0 || k == 3) && !ctl) || ((k == 1 || k == 2) && !esc)) continue;
					if (alts++) sb_put(g, &alt, " | ");
					static const char named[] = "btn\0fr";
					if (x == 0x22) sb_put(g, &alt, "\"\\\\\\\"\"");
					else if (x == 0x5C) sb_put(g, &alt, "\"\\\\\\\\\"");
					else if (x >= 8 && x <= 13 && named[x - 8]) sb_fmt(g, &alt, "\"\\\\%c\"", named[x - 8]);
					else sb_fmt(g, &alt, "\"\\\\u%04x\"", x);
				}
				if (stop == 0x10FFFF) break;
				lo = stop + 1;
				continue;
			}
			class_char(g, &cls, lo);
			if (end > lo) sb_put(g, &cls, "-"), class_char(g, &cls, end);
			if (!ncp) one = lo;
			ncp += end > lo ? 2 : 1;
			if (end == 0x10FFFF) break;
			lo = end + 1;
		}
	}
	if (cls.n) alts++;
	if (!alts && !g->rc) fail(g, LANES_EINVAL, "pattern has a class that matches no character");
	if (alts > 1) sb_put(g, out, "( ");
	if (ncp == 1) {
		char u[5];
		literal(g, out, u, utf8_put(u, one));
	} else if (cls.n) {
		sb_put(g, out, "[");
		sb_add(g, out, cls.p, cls.n);
		sb_put(g, out, "]");
	}
	if (cls.n && alt.n) sb_put(g, out, " | ");
	if (alt.n) sb_add(g, out, alt.p, alt.n);
	if (alts > 1) sb_put(g, out, " )");
	sb_free(g, &cls);
	sb_free(g, &alt);
	return g->rc;
}

// One code point of the pattern as UTF-8 (jansson guarantees it is valid).
static uint32_t rx_cp(rx *r) {
	const unsigned char *s = (const unsigned char *)r->p;
	size_t n = base_utf8_len(s, (size_t)(r->end - r->p));
	if (n == 0) n = 1;
	uint32_t c = n == 1 ? s[0] : n == 2 ? s[0] & 0x1F : n == 3 ? s[0] & 0x0F : s[0] & 0x07;
	for (size_t i = 1; i < n; i++) c = c << 6 | (s[i] & 0x3F);
	r->p += n;
	return c;
}

static int rx_hex(sg *g, rx *r, int n, uint32_t *c) {
	*c = 0;
	for (int i = 0; i < n; i++, r->p++) {
		char h = r->p < r->end ? *r->p : 0;
		int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
		if (v < 0) return fail(g, LANES_EINVAL, "pattern has a bad hexadecimal escape");
		*c = *c << 4 | (uint32_t)v;
	}
	return 0;
}

// Reads the escape after '\' into c (a class: *cls set, c.lo..hi spans added) or one code point.
static int rx_escape(sg *g, rx *r, cset *c, bool in_class, bool *neg) {
	if (r->p >= r->end) return fail(g, LANES_EINVAL, "pattern ends with '\\'");
	char e = *r->p++;
	uint32_t x;
	*neg = false;
	switch (e) {
	case 'D': case 'W': case 'S':
		if (in_class) return fail(g, LANES_EINVAL, "unsupported pattern escape '\\%c' in a class", e);
		*neg = true;
		e = (char)(e + 32);
		/* fallthrough */
	case 'd': case 'w': case 's':
		if (e == 'd') return cs_add(g, c, '0', '9');
		if (e == 's') return cs_add(g, c, ' ', ' '), cs_add(g, c, 9, 13);
		cs_add(g, c, '0', '9'), cs_add(g, c, 'A', 'Z'), cs_add(g, c, 'a', 'z');
		return cs_add(g, c, '_', '_');
	case 'n': return cs_add(g, c, 10, 10);
	case 't': return cs_add(g, c, 9, 9);
	case 'r': return cs_add(g, c, 13, 13);
	case 'f': return cs_add(g, c, 12, 12);
	case 'v': return cs_add(g, c, 11, 11);
	case '0': return cs_add(g, c, 0, 0);
	case 'x': return rx_hex(g, r, 2, &x) ? g->rc : cs_add(g, c, x, x);
	case 'u': return rx_hex(g, r, 4, &x) ? g->rc : cs_add(g, c, x, x);
	case 'b': case 'B': return fail(g, LANES_EINVAL, "unsupported pattern feature: word boundary '\\%c'", e);
	case 'k': return fail(g, LANES_EINVAL, "unsupported pattern feature: backreference '\\k'");
	case 'p': case 'P': return fail(g, LANES_EINVAL, "unsupported pattern feature: Unicode property '\\%c'", e);
	default:
		if (e >= '1' && e <= '9') return fail(g, LANES_EINVAL, "unsupported pattern feature: backreference '\\%c'", e);
		if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) return fail(g, LANES_EINVAL, "unsupported pattern escape '\\%c'", e);
		r->p--;
		x = rx_cp(r);
		return cs_add(g, c, x, x);
	}
}

// Reads a [class] (after its '[') into c; *neg when it starts with '^'.
static int rx_class(sg *g, rx *r, cset *c, bool *neg) {
	*neg = r->p < r->end && *r->p == '^';
	if (*neg) r->p++;
	bool any = false;
	while (!g->rc) {
		if (r->p >= r->end) return fail(g, LANES_EINVAL, "pattern has an unclosed '['");
		if (*r->p == ']' && any) break;
		if (*r->p == ']') return fail(g, LANES_EINVAL, "pattern has an empty class");
		any = true;
		cset one = {0};
		bool n;
		uint32_t lo;
		if (*r->p == '\\') {
			r->p++;
			if (rx_escape(g, r, &one, true, &n)) break;
		} else if (*r->p == '[') return fail(g, LANES_EINVAL, "unsupported pattern feature: nested class");
		else lo = rx_cp(r), cs_add(g, &one, lo, lo);
		// a range a-b between two single characters
		if (!g->rc && one.n == 1 && one.v[0].lo == one.v[0].hi && r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
			r->p++;
			cset two = {0};
			if (*r->p == '\\') r->p++, rx_escape(g, r, &two, true, &n);
			else lo = rx_cp(r), cs_add(g, &two, lo, lo);
			if (!g->rc && (two.n != 1 || two.v[0].lo != two.v[0].hi || two.v[0].lo < one.v[0].lo))
				fail(g, LANES_EINVAL, "pattern has a bad class range");
			if (!g->rc) one.v[0].hi = two.v[0].lo;
			free(two.v);
		}
		for (size_t i = 0; i < one.n && !g->rc; i++) cs_add(g, c, one.v[i].lo, one.v[i].hi);
		free(one.v);
	}
	r->p++;
	return g->rc;
}

static int rx_alt(sg *g, rx *r, sb *out, bool *wrapped, bool *nullable);

// Reads one atom of the pattern into out; *empty when it matches only "", *nullable when it
// may match "".
static int rx_atom(sg *g, rx *r, sb *out, bool *empty, bool *nullable) {
	char c = *r->p;
	cset cs = {0};
	bool neg = false, ctl = true;
	*empty = *nullable = false;
	if (c == '(') {
		r->p++;
		if (r->p < r->end && *r->p == '?') {
			r->p++;
			if (r->p < r->end && *r->p == ':') r->p++;
			else if (r->p < r->end && *r->p == '<' && r->p + 1 < r->end && r->p[1] != '=' && r->p[1] != '!') {
				while (r->p < r->end && *r->p != '>') r->p++;
				r->p++;
			} else return fail(g, LANES_EINVAL, "unsupported pattern feature: lookaround or group flag '(?'");
		}
		if (++r->depth > SG_MAX_DEPTH) return fail(g, LANES_ELIMIT, "pattern nests groups deeper than %d", SG_MAX_DEPTH);
		sb in = {0};
		bool wrapped = false;
		rx_alt(g, r, &in, &wrapped, nullable);
		r->depth--;
		if (!g->rc && (r->p >= r->end || *r->p != ')')) fail(g, LANES_EINVAL, "pattern has an unclosed '('");
		r->p++;
		if (!g->rc && !in.n) *empty = true;
		else if (!g->rc && wrapped) sb_add(g, out, in.p, in.n);
		else if (!g->rc) sb_put(g, out, "( "), sb_add(g, out, in.p, in.n), sb_put(g, out, " )");
		sb_free(g, &in);
		return g->rc;
	}
	if (c == '^' || c == '$') return fail(g, LANES_EINVAL, "unsupported pattern feature: '%c' inside the pattern", c);
	if (c == '*' || c == '+' || c == '?' || c == '{') return fail(g, LANES_EINVAL, "pattern has nothing to repeat before '%c'", c);
	if (c == ')' || c == ']' || c == '}') return fail(g, LANES_EINVAL, "pattern has an unmatched '%c'", c);
	if (c == '.') {
		r->p++;
		cs_add(g, &cs, 10, 10), cs_add(g, &cs, 13, 13), cs_add(g, &cs, 0x2028, 0x2029);
		neg = true;
	} else if (c == '[') {
		r->p++;
		rx_class(g, r, &cs, &neg);
	} else if (c == '\\') {
		r->p++;
		rx_escape(g, r, &cs, false, &neg);
	} else {
		uint32_t x = rx_cp(r);
		cs_add(g, &cs, x, x);
	}
	cs_norm(&cs);
	if (neg && !g->rc) cs_invert(g, &cs), ctl = false;
	if (!g->rc) cs_emit(g, &cs, ctl, true, out);
	free(cs.v);
	return g->rc;
}

// Reads a quantifier after an atom, if any, into out; *nullable (in: the atom's) when the
// result may match "".
static int rx_quant(sg *g, rx *r, sb *out, bool *nullable) {
	if (r->p >= r->end) return 0;
	char c = *r->p;
	int64_t m = 1, n = 1;
	if (c == '?') m = 0, n = 1, r->p++;
	else if (c == '*') m = 0, n = -1, r->p++;
	else if (c == '+') m = 1, n = -1, r->p++;
	else if (c == '{') {
		const char *q = r->p + 1;
		char *e;
		if (q >= r->end || *q < '0' || *q > '9') return fail(g, LANES_EINVAL, "pattern has a bad '{' quantifier");
		m = strtoll(q, &e, 10), n = m;
		if (*e == ',') {
			q = e + 1;
			n = *q == '}' ? -1 : strtoll(q, &e, 10);
			if (n >= 0 && (*q < '0' || *q > '9')) return fail(g, LANES_EINVAL, "pattern has a bad '{' quantifier");
			if (n < 0) e = (char *)q;
		}
		if (e >= r->end || *e != '}' || (n >= 0 && n < m)) return fail(g, LANES_EINVAL, "pattern has a bad '{' quantifier");
		r->p = e + 1;
	} else return 0;
	if (r->p < r->end && *r->p == '?') r->p++; // lazy: the same language when the whole text must match
	if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?' || *r->p == '{'))
		return fail(g, LANES_EINVAL, "pattern repeats a repetition");
	// GBNF refuses an unbounded repetition of what may be empty as left recursion
	if (n < 0 && *nullable)
		return fail(g, LANES_EINVAL, "unsupported pattern feature: '%c' repeats a group that can match the empty string "
			    "(write (ab)* for (ab|)*)", c);
	*nullable = *nullable || m == 0;
	return repeat(g, out, m, n);
}

// Reads alternatives into out; *wrapped when out is one group, *nullable when it may match "".
static int rx_alt(sg *g, rx *r, sb *out, bool *wrapped, bool *nullable) {
	sb alts = {0};
	int nalt = 0;
	bool empty_alt = false;
	*nullable = false;
	while (!g->rc) {
		sb seq = {0};
		bool seq_nullable = true;
		while (!g->rc && r->p < r->end && *r->p != '|' && *r->p != ')') {
			sb atom = {0};
			bool empty, nul;
			rx_atom(g, r, &atom, &empty, &nul);
			if (!g->rc && !empty) {
				if (seq.n) sb_put(g, &seq, " ");
				sb_add(g, &seq, atom.p, atom.n);
				if (r->p < r->end && (*r->p == '?' || *r->p == '*' || *r->p == '+' || *r->p == '{')) {
					// quantifiers apply to one element: wrap alternations and sequences
					rx_quant(g, r, &seq, &nul);
				}
				seq_nullable = seq_nullable && nul;
			} else if (!g->rc) {
				nul = false; // a quantifier on nothing matches nothing
				rx_quant(g, r, &atom, &nul);
			}
			sb_free(g, &atom);
		}
		*nullable = *nullable || seq_nullable;
		if (!seq.n) empty_alt = true;
		else {
			if (nalt++) sb_put(g, &alts, " | ");
			sb_add(g, &alts, seq.p, seq.n);
		}
		sb_free(g, &seq);
		if (g->rc || r->p >= r->end || *r->p != '|') break;
		r->p++;
	}
	if (!g->rc && nalt) {
		bool wrap = empty_alt || nalt > 1;
		if (wrap) sb_put(g, out, "( ");
		sb_add(g, out, alts.p, alts.n);
		if (wrap) sb_put(g, out, empty_alt ? " )?" : " )");
		*wrapped = wrap && !empty_alt;
	}
	sb_free(g, &alts);
	return g->rc;
}

// A pattern anchored by ^ and $ as the JSON text of the strings it matches.
static int gen_pattern(sg *g, const json_t *pat, sb *out) {
	if (!json_is_string(pat)) return fail(g, LANES_EINVAL, "'pattern' must be a string");
	const char *p = json_string_value(pat);
	size_t n = json_string_length(pat), bs = 0;
	while (bs + 1 < n && p[n - 2 - bs] == '\\') bs++;
	if (n < 2 || p[0] != '^' || p[n - 1] != '$' || bs % 2)
		return fail(g, LANES_EINVAL, "unsupported pattern: it must be anchored, starting with '^' and ending with '$'");
	rx r = {p + 1, p + n - 1, 0};
	sb body = {0};
	bool wrapped, nullable;
	rx_alt(g, &r, &body, &wrapped, &nullable);
	if (!g->rc && r.p < r.end) fail(g, LANES_EINVAL, "pattern has an unmatched ')'");
	if (!g->rc) {
		sb_put(g, out, Q " ");
		if (body.n) sb_add(g, out, body.p, body.n), sb_put(g, out, " ");
		sb_put(g, out, Q " ");
		helper(g, out, H_WS);
	}
	sb_free(g, &body);
	return g->rc;
}

// Appends m to n (n < 0: any number of) string characters, each count within the repeat
// bound: whole blocks of the bound first, then a chain of rules R(q) ::= c{0,B-1} | c{B} R(q-1).
static int lengths(sg *g, int64_t m, int64_t n, sb *out) {
	const int64_t B = SG_MAX_REPEAT;
	char c[80];
	snprintf(c, sizeof c, "%s-%s", g->root, sg_helpers[H_CHAR].name);
	g->helpers |= 1u << H_CHAR;
	if (m > B) sb_fmt(g, out, "( %s{%lld} ){%lld} ", c, (long long)B, (long long)(m / B));
	if (m % B || (m > 0 && m <= B)) sb_fmt(g, out, "%s{%lld} ", c, (long long)(m > B ? m % B : m));
	if (n < 0) return sb_fmt(g, out, "%s* ", c);
	int64_t k = n - m;
	if (k == 0) return g->rc;
	if (k <= B) return sb_fmt(g, out, "%s{0,%lld} ", c, (long long)k);
	sb r = {0};
	sb_fmt(g, &r, "%s{0,%lld}", c, (long long)(k % B)); // R(0)
	for (int64_t q = 1; q <= k / B && !g->rc; q++) {
		sb body = {0};
		sb_fmt(g, &body, "%s{0,%lld} | %s{%lld}", c, (long long)(B - 1), c, (long long)B);
		if (k % B || q > 1) sb_put(g, &body, " "), sb_add(g, &body, r.p, r.n);
		sb_free(g, &r);
		if (rule_ref(g, NULL, "len", &body, &r)) break;
	}
	sb_add(g, out, r.p, r.n);
	sb_put(g, out, " ");
	sb_free(g, &r);
	return g->rc;
}

// ---- strings ------------------------------------------------------------------------------
static int gen_str(sg *g, const json_t *s, sb *out) {
	const json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
	bool lens = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
	if (fmt) {
		static const struct {
			const char *name;
			int h;
		} fmts[] = {{"date", H_DATE}, {"time", H_TIME}, {"date-time", H_DATETIME}, {"uuid", H_UUID}};
		if (!json_is_string(fmt)) return fail(g, LANES_EINVAL, "'format' must be a string");
		if (pat || lens) return fail(g, LANES_EINVAL, "unsupported keyword '%s' beside 'format'", pat ? "pattern" : "minLength/maxLength");
		for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++)
			if (!strcmp(fmts[i].name, json_string_value(fmt))) return helper(g, out, fmts[i].h);
		return fail(g, LANES_EINVAL, "unsupported format '%s'", json_string_value(fmt));
	}
	if (pat && lens) return fail(g, LANES_EINVAL, "unsupported keyword 'minLength/maxLength' beside 'pattern'");
	if (pat) return gen_pattern(g, pat, out);
	int64_t m = 0, n = -1;
	if (count_of(g, s, "minLength", SG_MAX_LENGTH, &m) || count_of(g, s, "maxLength", SG_MAX_LENGTH, &n)) return g->rc;
	if (n >= 0 && m > n) return fail(g, LANES_EINVAL, "minLength exceeds maxLength");
	if (m == 0 && n < 0) return helper(g, out, H_STRING);
	sb_put(g, out, Q " ");
	if (n != 0) lengths(g, m, n, out);
	sb_put(g, out, Q " ");
	return helper(g, out, H_WS);
}

// ---- $ref ---------------------------------------------------------------------------------
// The schema a local $ref names; NULL with the error set otherwise.
static const json_t *resolve(sg *g, const char *ref) {
	if (!strcmp(ref, "#")) return g->top;
	if (strncmp(ref, "#/$defs/", 8) && strncmp(ref, "#/definitions/", 14))
		return fail(g, LANES_EINVAL, "unsupported $ref '%.200s' (only #, #/$defs/... and #/definitions/...)", ref), NULL;
	const json_t *at = g->top;
	const char *p = ref + 2;
	while (at && *p) {
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		char *seg = malloc(n + 1);
		if (!seg) return fail(g, LANES_ENOMEM, "out of memory"), NULL;
		size_t k = 0;
		for (size_t i = 0; i < n; i++) {
			if (p[i] == '~' && i + 1 < n && (p[i + 1] == '0' || p[i + 1] == '1')) seg[k++] = p[++i] == '0' ? '~' : '/';
			else seg[k++] = p[i];
		}
		seg[k] = 0;
		at = json_is_object(at) ? json_object_get(at, seg) : NULL;
		free(seg);
		p += n + (e != NULL);
	}
	if (!at) fail(g, LANES_EINVAL, "$ref '%.200s' does not resolve", ref);
	return at;
}

static int gen_ref(sg *g, const json_t *s, const char *name, sb *out) {
	const json_t *r = json_object_get(s, "$ref");
	if (!json_is_string(r)) return fail(g, LANES_EINVAL, "'$ref' must be a string");
	if (only_keys(g, s, 0, "$ref")) return g->rc;
	const char *ref = json_string_value(r);
	for (int i = 0; i < g->nrefs; i++) {
		if (strcmp(g->refs[i].ref, ref)) continue;
		if (!g->refs[i].done && i >= g->lead)
			return fail(g, LANES_EINVAL, "$ref '%.200s' recurses before any text is matched (left recursion)", ref);
		if (name) { // a rule of its own that names the target
			sb body = {0};
			sb_put(g, &body, g->refs[i].name);
			return rule_ref(g, name, NULL, &body, out);
		}
		return sb_put(g, out, g->refs[i].name);
	}
	const json_t *t = resolve(g, ref);
	if (!t) return g->rc;
	if (g->nrefs >= 1024) return fail(g, LANES_ELIMIT, "more than 1024 distinct $ref targets");
	if (g->nrefs == g->refcap) {
		int cap = g->refcap ? g->refcap * 2 : 16;
		sg_ref *v = realloc(g->refs, (size_t)cap * sizeof *v);
		if (!v) return fail(g, LANES_ENOMEM, "out of memory");
		g->refs = v, g->refcap = cap;
	}
	const char *last = strrchr(ref, '/');
	if (!last) last = ref; // "#": the root's helpers are named root-<what> alone
	char *rname = name ? strdup(name) : name_new(g, last ? last + 1 : "ref");
	char *rcopy = strdup(ref);
	int me = g->nrefs;
	if (!rname || !rcopy) {
		free(rname), free(rcopy);
		return fail(g, LANES_ENOMEM, "out of memory");
	}
	g->refs[g->nrefs++] = (sg_ref){rcopy, rname, false};
	// errors inside the target point at it
	char saved[sizeof g->ptr];
	size_t savedlen = g->ptrlen;
	memcpy(saved, g->ptr, sizeof saved);
	g->ptrlen = 0, g->ptr[0] = 0;
	if (strcmp(ref, "#")) {
		size_t n = strlen(ref + 1) < SG_PTR ? strlen(ref + 1) : SG_PTR;
		memcpy(g->ptr, ref + 1, n), g->ptr[n] = 0, g->ptrlen = n;
	}
	sb body = {0};
	gen(g, t, last ? last + 1 : "ref", g->refs[me].name, &body);
	memcpy(g->ptr, saved, sizeof saved), g->ptrlen = savedlen;
	if (g->rc) return sb_free(g, &body), g->rc;
	// a compound target wrote its rule under the name already
	if (strcmp(body.p ? body.p : "", g->refs[me].name)) rule_emit(g, g->refs[me].name, &body);
	else sb_free(g, &body);
	g->refs[me].done = true;
	return sb_put(g, out, g->refs[me].name);
}

// ---- enum, const, unions ------------------------------------------------------------------
static bool value_fits(const json_t *v, int types) {
	switch (json_typeof(v)) {
	case JSON_NULL: return types & T_NULL;
	case JSON_TRUE: case JSON_FALSE: return types & T_BOOL;
	case JSON_OBJECT: return types & T_OBJ;
	case JSON_ARRAY: return types & T_ARR;
	case JSON_STRING: return types & T_STR;
	case JSON_INTEGER: return types & (T_NUM | T_INT);
	case JSON_REAL:
		return (types & T_NUM) || ((types & T_INT) && json_real_value(v) == floor(json_real_value(v)));
	}
	return false;
}

static int gen_enum(sg *g, const json_t *s, sb *out) {
	const json_t *e = json_object_get(s, "enum"), *c = json_object_get(s, "const");
	if (e && c) return fail(g, LANES_EINVAL, "unsupported keyword 'const' beside 'enum'");
	if (only_keys(g, s, K_CORE, e ? "enum" : "const")) return g->rc;
	static const char *const others[] = {"anyOf", "oneOf", "allOf"};
	for (int i = 0; i < 3; i++)
		if (json_object_get(s, others[i])) return fail(g, LANES_EINVAL, "unsupported keyword '%s' beside '%s'", others[i], e ? "enum" : "const");
	int types = json_object_get(s, "type") ? types_of(g, s) : T_ALL;
	if (g->rc) return g->rc;
	if (e && (!json_is_array(e) || !json_array_size(e))) return fail(g, LANES_EINVAL, "'enum' must be a non-empty array");
	if (e && json_array_size(e) > SG_MAX_ENUM) return fail(g, LANES_ELIMIT, "'enum' has more than %d values", SG_MAX_ENUM);
	size_t n = e ? json_array_size(e) : 1, kept = 0;
	sb body = {0};
	for (size_t i = 0; i < n && !g->rc; i++) {
		const json_t *v = e ? json_array_get(e, i) : c;
		if (!value_fits(v, types)) continue;
		if (kept++) sb_put(g, &body, " | ");
		json_literal(g, &body, v, 0);
	}
	if (!g->rc && !kept) fail(g, LANES_EINVAL, "no value of '%s' has the schema's type", e ? "enum" : "const");
	if (g->rc) return sb_free(g, &body), g->rc;
	if (kept > 1) sb_put(g, out, "( ");
	sb_add(g, out, body.p, body.n);
	if (kept > 1) sb_put(g, out, " )");
	sb_free(g, &body);
	return g->rc;
}

// s with its $ref chain followed (NULL: not an object, or an error set).
static const json_t *deref(sg *g, const json_t *s) {
	for (int hops = 0; json_is_object(s) && json_is_string(json_object_get(s, "$ref")) && !g->rc; hops++) {
		if (hops >= SG_MAX_DEPTH) return fail(g, LANES_ELIMIT, "$ref chain longer than %d", SG_MAX_DEPTH), NULL;
		s = resolve(g, json_string_value(json_object_get(s, "$ref")));
	}
	return json_is_object(s) && !g->rc ? s : NULL;
}

static int value_kind(const json_t *v) {
	int k = 0;
	for (int t = 1; t <= T_INT; t <<= 1) k |= value_fits(v, t) ? t : 0;
	return k;
}

// The types a schema's documents may have (integers and numbers count as one), following $ref.
static int kinds(sg *g, const json_t *s, int depth) {
	if (json_is_false(s)) return 0;
	if (depth > SG_MAX_DEPTH || !(s = deref(g, s))) return T_ALL;
	int k = 0;
	const json_t *e = json_object_get(s, "enum"), *c = json_object_get(s, "const"), *a = json_object_get(s, "anyOf");
	size_t i;
	json_t *x;
	if (!a) a = json_object_get(s, "oneOf");
	if (c) k = value_kind(c);
	else if (json_is_array(e)) json_array_foreach(e, i, x) k |= value_kind(x);
	else if (json_is_array(a)) json_array_foreach(a, i, x) k |= kinds(g, x, depth + 1);
	else if (json_object_get(s, "allOf")) k = T_OBJ;
	else k = types_of(g, s);
	if (json_is_true(json_object_get(s, "nullable"))) k |= T_NULL;
	return k & (T_INT | T_NUM) ? k | T_INT | T_NUM : k;
}

// The values a property may take when it is a const or an enum; NULL otherwise.
static const json_t *fixed_values(sg *g, const json_t *s, json_t **own) {
	*own = NULL;
	if (!(s = deref(g, s))) return NULL;
	const json_t *c = json_object_get(s, "const");
	if (c) return *own = json_pack("[O]", c);
	const json_t *e = json_object_get(s, "enum");
	return json_is_array(e) ? e : NULL;
}

// Two object schemas no document satisfies both of: a property both require takes values
// from disjoint const/enum sets (a tagged union).
static bool tagged_apart(sg *g, const json_t *a, const json_t *b) {
	a = deref(g, a), b = deref(g, b);
	const json_t *ra = json_object_get(a, "required"), *rb = json_object_get(b, "required");
	size_t i, j;
	json_t *x, *y;
	json_array_foreach(ra, i, x) {
		const char *key = json_string_value(x);
		bool both = false;
		json_array_foreach(rb, j, y) both |= key && json_is_string(y) && !strcmp(key, json_string_value(y));
		g->work += (int64_t)json_array_size(rb);
		if (!both) continue;
		json_t *oa, *ob;
		const json_t *va = fixed_values(g, json_object_get(json_object_get(a, "properties"), key), &oa);
		const json_t *vb = fixed_values(g, json_object_get(json_object_get(b, "properties"), key), &ob);
		bool apart = va && vb;
		g->work += 1 + (int64_t)(va ? json_array_size(va) : 0) * (int64_t)(vb ? json_array_size(vb) : 0);
		if (g->work > (1 << 22)) apart = false, fail(g, LANES_ELIMIT, "'oneOf' is too large to prove its alternatives apart");
		for (size_t p = 0; apart && p < json_array_size(va); p++)
			for (size_t q = 0; apart && q < json_array_size(vb); q++) apart = !json_equal(json_array_get(va, p), json_array_get(vb, q));
		json_decref(oa), json_decref(ob);
		if (apart) return true;
	}
	return false;
}

// oneOf becomes a union only when no document can match two alternatives (else anyOf's
// union would take documents oneOf refuses).
static int one_of_apart(sg *g, const json_t *a) {
	size_t n = json_array_size(a);
	int *k = malloc(n * sizeof *k);
	if (!k) return fail(g, LANES_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) k[i] = kinds(g, json_array_get(a, i), 0);
	for (size_t i = 0; i < n && !g->rc; i++)
		for (size_t j = i + 1; j < n && !g->rc; j++) {
			int both = k[i] & k[j];
			if (both && !(both == T_OBJ && tagged_apart(g, json_array_get(a, i), json_array_get(a, j))) && !g->rc)
				fail(g, LANES_EINVAL, "unsupported keyword 'oneOf': alternatives %zu and %zu may both match (anyOf would fit)", i, j);
		}
	free(k);
	return g->rc;
}

static int gen_union(sg *g, const json_t *s, const char *hint, const char *name, sb *out) {
	const char *kw = json_object_get(s, "anyOf") ? "anyOf" : "oneOf";
	const json_t *a = json_object_get(s, kw);
	if (json_object_get(s, "anyOf") && json_object_get(s, "oneOf")) return fail(g, LANES_EINVAL, "unsupported keyword 'oneOf' beside 'anyOf'");
	if (only_keys(g, s, 0, kw)) return g->rc;
	if (!json_is_array(a) || !json_array_size(a)) return fail(g, LANES_EINVAL, "'%s' must be a non-empty array", kw);
	if (json_array_size(a) > SG_MAX_ENUM) return fail(g, LANES_ELIMIT, "'%s' has more than %d schemas", kw, SG_MAX_ENUM);
	if (!strcmp(kw, "oneOf") && one_of_apart(g, a)) return g->rc;
	sb body = {0};
	size_t old = ptr_push(g, kw);
	for (size_t i = 0; i < json_array_size(a) && !g->rc; i++) {
		size_t o = ptr_index(g, i);
		if (i) sb_put(g, &body, " | ");
		gen(g, json_array_get(a, i), hint, NULL, &body);
		ptr_pop(g, o);
	}
	ptr_pop(g, old);
	if (g->rc) return sb_free(g, &body), g->rc;
	return rule_ref(g, name, hint, &body, out);
}

// ---- objects ------------------------------------------------------------------------------
typedef struct {
	const char *key;
	const json_t *schema;
	bool required;
	size_t ptr; // length of the pointer to the object holding it
	char where[SG_PTR + 4];
} prop;

typedef struct {
	prop *v;
	size_t n;
} props;

// Adds the properties and required names of object schema o to ps.
static int collect(sg *g, const json_t *o, props *ps) {
	const json_t *p = json_object_get(o, "properties"), *req = json_object_get(o, "required");
	if (p && !json_is_object(p)) return fail(g, LANES_EINVAL, "'properties' must be an object");
	if (req && !json_is_array(req)) return fail(g, LANES_EINVAL, "'required' must be an array of strings");
	if ((p ? json_object_size(p) : 0) + ps->n > SG_MAX_PROPS) return fail(g, LANES_ELIMIT, "an object has more than %d properties", SG_MAX_PROPS);
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)p, key, v) {
		for (size_t i = 0; i < ps->n; i++)
			if (!strcmp(ps->v[i].key, key)) return fail(g, LANES_EINVAL, "property '%.100s' is defined twice in allOf", key);
		prop *x = &ps->v[ps->n++];
		*x = (prop){.key = key, .schema = v};
		size_t old = ptr_push(g, "properties");
		ptr_push(g, key);
		memcpy(x->where, g->ptr, sizeof x->where);
		ptr_pop(g, old);
	}
	size_t i;
	json_array_foreach(req, i, v) {
		if (!json_is_string(v)) return fail(g, LANES_EINVAL, "'required' must be an array of strings");
		size_t k = 0;
		while (k < ps->n && strcmp(ps->v[k].key, json_string_value(v))) k++;
		if (k == ps->n) return fail(g, LANES_EINVAL, "required property '%.100s' is not in properties", json_string_value(v));
		ps->v[k].required = true;
	}
	return 0;
}

// Appends a rule matching a key not among ps, built on the trie of their characters.
typedef struct {
	uint32_t cp;
	int child, next;
	bool term;
} tnode;

static int trie_rule(sg *g, tnode *t, int at, const char *hint, sb *out) {
	sb body = {0};
	int alts = 0;
	cset kids = {0};
	for (int c = t[at].child; c >= 0 && !g->rc; c = t[c].next) {
		cs_add(g, &kids, t[c].cp, t[c].cp);
		if (alts++) sb_put(g, &body, " | ");
		char ch[5];
		size_t n = utf8_put(ch, t[c].cp);
		literal(g, &body, ch, n);
		sb_put(g, &body, " ");
		if (t[c].child >= 0) trie_rule(g, t, c, hint, &body);
		else helper(g, &body, H_KC), sb_put(g, &body, "+");
	}
	// any other first character, then anything
	cs_norm(&kids);
	cs_invert(g, &kids);
	if (alts++) sb_put(g, &body, " | ");
	cs_emit(g, &kids, false, false, &body);
	sb_put(g, &body, " ");
	helper(g, &body, H_KC);
	sb_put(g, &body, "*");
	free(kids.v);
	if (g->rc) return sb_free(g, &body), g->rc;
	if (!t[at].term) {
		sb wrap = {0};
		sb_put(g, &wrap, "( "), sb_add(g, &wrap, body.p, body.n), sb_put(g, &wrap, " )?");
		sb_free(g, &body);
		body = wrap;
	}
	return rule_ref(g, NULL, hint, &body, out);
}

static int other_key(sg *g, const props *ps, const char *hint, sb *out) {
	if (!ps->n) return helper(g, out, H_STRING), sb_put(g, out, " \":\" "), helper(g, out, H_WS);
	size_t total = 1;
	for (size_t i = 0; i < ps->n; i++) {
		// the trie's rules nest one level per character
		if (strlen(ps->v[i].key) > 256)
			return fail(g, LANES_ELIMIT, "a property name longer than 256 bytes beside additionalProperties");
		total += strlen(ps->v[i].key);
	}
	tnode *t = malloc(total * sizeof *t);
	if (!t) return fail(g, LANES_ENOMEM, "out of memory");
	int nt = 1;
	t[0] = (tnode){0, -1, -1, false};
	for (size_t i = 0; i < ps->n; i++) {
		rx r = {ps->v[i].key, ps->v[i].key + strlen(ps->v[i].key), 0};
		int at = 0;
		while (r.p < r.end) {
			uint32_t cp = rx_cp(&r);
			int c = t[at].child;
			while (c >= 0 && t[c].cp != cp) c = t[c].next;
			if (c < 0) {
				c = nt++;
				t[c] = (tnode){cp, -1, t[at].child, false};
				t[at].child = c;
			}
			at = c;
		}
		t[at].term = true;
	}
	char h[SG_MAX_NAME + 8];
	snprintf(h, sizeof h, "%.*s-key", SG_MAX_NAME, hint);
	sb_put(g, out, Q " ");
	trie_rule(g, t, 0, h, out);
	sb_put(g, out, " " Q " \":\" ");
	helper(g, out, H_WS);
	free(t);
	return g->rc;
}

static int gen_obj(sg *g, const json_t *s, const char *hint, const char *name, sb *out) {
	const json_t *all = json_object_get(s, "allOf"), *ap = json_object_get(s, "additionalProperties");
	props ps = {calloc(SG_MAX_PROPS, sizeof(prop)), 0};
	if (!ps.v) return fail(g, LANES_ENOMEM, "out of memory");
	collect(g, s, &ps);
	if (all && !g->rc) {
		if (!json_is_array(all) || !json_array_size(all)) fail(g, LANES_EINVAL, "'allOf' must be a non-empty array");
		if (ap) fail(g, LANES_EINVAL, "unsupported keyword 'additionalProperties' beside 'allOf'");
		size_t old = ptr_push(g, "allOf");
		for (size_t i = 0; i < json_array_size(all) && !g->rc; i++) {
			size_t o = ptr_index(g, i);
			const json_t *x = json_array_get(all, i);
			for (int hops = 0; json_is_object(x) && json_object_get(x, "$ref") && !g->rc; hops++) {
				if (hops >= SG_MAX_DEPTH) fail(g, LANES_ELIMIT, "$ref chain longer than %d", SG_MAX_DEPTH);
				else if (!json_is_string(json_object_get(x, "$ref"))) fail(g, LANES_EINVAL, "'$ref' must be a string");
				else if (!only_keys(g, x, 0, "$ref")) x = resolve(g, json_string_value(json_object_get(x, "$ref")));
			}
			if (g->rc) break;
			const json_t *t = json_object_get(x, "type");
			// only objects merge: their properties and required names join the parent's
			if (!json_is_object(x) || (t && !(json_is_string(t) && !strcmp(json_string_value(t), "object"))))
				fail(g, LANES_EINVAL, "unsupported allOf member: only object schemas merge");
			else {
				const char *key;
				json_t *v;
				json_object_foreach((json_t *)x, key, v) {
					int kk = key_kind(key);
					if (kk != K_ANNOT && strcmp(key, "type") && strcmp(key, "properties") && strcmp(key, "required")) {
						fail(g, LANES_EINVAL, "unsupported keyword '%s' in an allOf member", key);
						break;
					}
				}
				collect(g, x, &ps);
			}
			ptr_pop(g, o);
		}
		ptr_pop(g, old);
	}
	// extra keys: with additionalProperties true or a schema; an object naming neither
	// properties nor additionalProperties takes any keys, as nothing else would make sense
	const json_t *extra = NULL;
	if (ap && !json_is_boolean(ap) && !json_is_object(ap)) fail(g, LANES_EINVAL, "'additionalProperties' must be a boolean or a schema");
	else if (json_is_object(ap) || json_is_true(ap)) extra = ap;
	else if (!ap && !json_object_get(s, "properties") && !all) extra = json_true();
	if (!g->rc && !ps.n && json_is_true(extra)) return free(ps.v), helper(g, out, H_OBJECT);
	// one text per property kept, and one for extra keys: on the heap, as objects nest
	sb *kv = calloc(SG_MAX_PROPS + 1, sizeof *kv);
	bool *req = calloc(SG_MAX_PROPS + 1, sizeof *req);
	size_t nk = 0;
	if (!kv || !req) fail(g, LANES_ENOMEM, "out of memory");
	for (size_t i = 0; i < ps.n && !g->rc; i++) {
		if (json_is_false(ps.v[i].schema)) {
			if (ps.v[i].required) fail(g, LANES_EINVAL, "required property '%.100s' has schema false", ps.v[i].key);
			continue;
		}
		char saved[sizeof g->ptr];
		size_t savedlen = g->ptrlen;
		memcpy(saved, g->ptr, sizeof saved);
		memcpy(g->ptr, ps.v[i].where, sizeof g->ptr), g->ptrlen = strlen(g->ptr);
		sb *b = &kv[nk];
		*b = (sb){0};
		req[nk++] = ps.v[i].required;
		json_t *ks = json_string(ps.v[i].key);
		char *key = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
		json_decref(ks);
		if (!key) fail(g, LANES_ENOMEM, "out of memory");
		else {
			size_t kn = strlen(key);
			char *kc = malloc(kn + 2);
			if (!kc) fail(g, LANES_ENOMEM, "out of memory");
			else {
				memcpy(kc, key, kn), kc[kn] = ':', kc[kn + 1] = 0;
				literal(g, b, kc, kn + 1);
				sb_put(g, b, " ");
				helper(g, b, H_WS);
				sb_put(g, b, " ");
				gen(g, ps.v[i].schema, ps.v[i].key, NULL, b);
			}
			free(kc);
		}
		free(key);
		memcpy(g->ptr, saved, sizeof saved), g->ptrlen = savedlen;
	}
	if (extra && !g->rc) {
		sb *b = &kv[nk];
		*b = (sb){0};
		req[nk] = false;
		other_key(g, &ps, hint, b);
		sb_put(g, b, " ");
		size_t old = ptr_push(g, "additionalProperties");
		gen(g, extra, hint, NULL, b);
		ptr_pop(g, old);
	}
	// the keys in declared order, optional ones skippable, extra keys after them: a start
	// alternative per property up to the first required one, each followed by its tail
	sb body = {0};
	size_t r = 0;
	while (r < nk && !req[r]) r++;
	sb_put(g, &body, "\"{\" ");
	helper(g, &body, H_WS);
	char **tails = calloc(nk + 2, sizeof *tails); // tails[j]: what may follow property j - 1
	if (!tails) fail(g, LANES_ENOMEM, "out of memory");
	for (size_t j = nk + 1; j-- > 1 && tails && !g->rc;) {
		if (j > r + 1) continue;
		sb t = {0};
		for (size_t i = j; i < nk && !g->rc; i++) {
			if (t.n) sb_put(g, &t, " ");
			sb_put(g, &t, req[i] ? "\",\" " : "( \",\" ");
			helper(g, &t, H_WS);
			sb_put(g, &t, " ");
			sb_add(g, &t, kv[i].p, kv[i].n);
			if (!req[i]) sb_put(g, &t, " )?");
			if (j < r) break; // the rest is tails[j + 1]
		}
		if (j < r && tails[j + 1] && tails[j + 1][0]) sb_put(g, &t, " "), sb_put(g, &t, tails[j + 1]);
		else if (j >= r && extra) {
			if (t.n) sb_put(g, &t, " ");
			sb_put(g, &t, "( \",\" ");
			helper(g, &t, H_WS);
			sb_put(g, &t, " ");
			sb_add(g, &t, kv[nk].p, kv[nk].n);
			sb_put(g, &t, " )*");
		}
		if (j < r && !g->rc) {
			// reached from two places: a rule of its own
			sb ref = {0};
			char h[SG_MAX_NAME + 8];
			snprintf(h, sizeof h, "%.*s-tail", SG_MAX_NAME, hint);
			rule_ref(g, NULL, h, &t, &ref);
			tails[j] = strdup(ref.p ? ref.p : "");
			sb_free(g, &ref);
		} else tails[j] = strdup(t.p ? t.p : "");
		sb_free(g, &t);
		if (!tails[j]) fail(g, LANES_ENOMEM, "out of memory");
	}
	size_t nstart = 0;
	sb start = {0};
	for (size_t i = 0; i < nk && i <= r && !g->rc; i++) {
		if (nstart++) sb_put(g, &start, " | ");
		sb_add(g, &start, kv[i].p, kv[i].n);
		if (tails[i + 1][0]) sb_put(g, &start, " "), sb_put(g, &start, tails[i + 1]);
	}
	if (extra && r >= nk && !g->rc) {
		if (nstart++) sb_put(g, &start, " | ");
		sb_add(g, &start, kv[nk].p, kv[nk].n);
		sb_put(g, &start, " ( \",\" ");
		helper(g, &start, H_WS);
		sb_put(g, &start, " ");
		sb_add(g, &start, kv[nk].p, kv[nk].n);
		sb_put(g, &start, " )*");
	}
	if (nstart && !g->rc) {
		bool opt = r >= nk;
		sb_put(g, &body, opt || nstart > 1 ? " ( " : " ");
		sb_add(g, &body, start.p, start.n);
		sb_put(g, &body, opt ? " )?" : nstart > 1 ? " )" : "");
	}
	sb_put(g, &body, " \"}\" ");
	helper(g, &body, H_WS);
	sb_free(g, &start);
	for (size_t i = 0; kv && i < nk + (extra != NULL); i++) sb_free(g, &kv[i]);
	for (size_t i = 0; tails && i < nk + 2; i++) free(tails[i]);
	free(tails);
	free(kv), free(req);
	free(ps.v);
	if (g->rc) return sb_free(g, &body), g->rc;
	return rule_ref(g, name, hint, &body, out);
}

// ---- arrays -------------------------------------------------------------------------------
static int gen_arr(sg *g, const json_t *s, const char *hint, const char *name, sb *out) {
	const json_t *items = json_object_get(s, "items"), *pre = json_object_get(s, "prefixItems");
	int64_t m = 0, n = -1;
	if (count_of(g, s, "minItems", SG_MAX_REPEAT, &m) || count_of(g, s, "maxItems", SG_MAX_REPEAT, &n)) return g->rc;
	if (n >= 0 && m > n) return fail(g, LANES_EINVAL, "minItems exceeds maxItems");
	if (json_is_array(items)) return fail(g, LANES_EINVAL, "unsupported keyword 'items' as an array (use prefixItems)");
	if (pre && !json_is_array(pre)) return fail(g, LANES_EINVAL, "'prefixItems' must be an array of schemas");
	size_t k = pre ? json_array_size(pre) : 0;
	if (k > SG_MAX_PROPS) return fail(g, LANES_ELIMIT, "'prefixItems' has more than %d schemas", SG_MAX_PROPS);
	// items absent after prefixItems: no more items (absent alone: any items)
	bool rest = !json_is_false(items) && (items || !pre);
	if (!rest && (int64_t)k < m) return fail(g, LANES_EINVAL, "minItems exceeds the items prefixItems allows");
	if (!rest && (n < 0 || n > (int64_t)k)) n = (int64_t)k;
	sb body = {0}, item = {0};
	char ih[SG_MAX_NAME + 8];
	snprintf(ih, sizeof ih, "%.*s-item", SG_MAX_NAME, hint);
	sb_put(g, &body, "\"[\" ");
	helper(g, &body, H_WS);
	int open = 0;
	for (size_t j = 0; j < k && (n < 0 || (int64_t)j < n) && !g->rc; j++) {
		size_t old = ptr_push(g, "prefixItems");
		ptr_index(g, j);
		sb_put(g, &body, (int64_t)j >= m ? " ( " : " ");
		if ((int64_t)j >= m) open++;
		if (j) sb_put(g, &body, "\",\" "), helper(g, &body, H_WS), sb_put(g, &body, " ");
		gen(g, json_array_get(pre, j), ih, NULL, &body);
		ptr_pop(g, old);
	}
	if (rest && (n < 0 || n > (int64_t)k) && !g->rc) {
		size_t old = ptr_push(g, "items");
		if (items) gen(g, items, ih, NULL, &item);
		else helper(g, &item, H_VALUE);
		ptr_pop(g, old);
		int64_t lo = m > (int64_t)k ? m - (int64_t)k : 0, hi = n < 0 ? -1 : n - (int64_t)k;
		if (!k) {
			// the first item has no comma before it
			sb_put(g, &body, m ? " " : " ( ");
			sb_add(g, &body, item.p, item.n);
			lo = lo ? lo - 1 : 0, hi = hi < 0 ? -1 : hi - 1;
		}
		if (hi != 0) {
			sb_put(g, &body, " ( \",\" ");
			helper(g, &body, H_WS);
			sb_put(g, &body, " ");
			sb_add(g, &body, item.p, item.n);
			sb_put(g, &body, " )");
			repeat(g, &body, lo, hi);
		}
		if (!k && !m) sb_put(g, &body, " )?");
	}
	while (open--) sb_put(g, &body, " )?");
	sb_put(g, &body, " \"]\" ");
	helper(g, &body, H_WS);
	sb_free(g, &item);
	if (g->rc) return sb_free(g, &body), g->rc;
	return rule_ref(g, name, hint, &body, out);
}

// ---- one schema ---------------------------------------------------------------------------
static int gen_type(sg *g, const json_t *s, int t, const char *hint, const char *name, sb *out) {
	switch (t) {
	case T_NULL: return helper(g, out, H_NULL);
	case T_BOOL: return helper(g, out, H_BOOL);
	case T_INT: return gen_int(g, s, out);
	case T_NUM: return gen_num(g, s, out);
	case T_STR: return gen_str(g, s, out);
	case T_OBJ: return gen_obj(g, s, hint, name, out);
	default: return gen_arr(g, s, hint, name, out);
	}
}

static int gen(sg *g, const json_t *s, const char *hint, const char *name, sb *out) {
	if (g->rc) return g->rc;
	if (++g->depth > SG_MAX_DEPTH) {
		g->depth--;
		return fail(g, LANES_ELIMIT, "schema nested deeper than %d levels", SG_MAX_DEPTH);
	}
	int saved_lead = g->lead;
	if (json_is_true(s)) helper(g, out, H_VALUE);
	else if (json_is_false(s)) fail(g, LANES_EINVAL, "unsupported schema false (it matches nothing)");
	else if (!json_is_object(s)) fail(g, LANES_EINVAL, "a schema must be an object or a boolean");
	else if (!only_keys(g, s, K_CORE | K_OBJ | K_ARR | K_STR | K_NUM, NULL)) {
		const json_t *nl = json_object_get(s, "nullable");
		bool nullable = json_is_true(nl);
		sb in = {0};
		sb *dst = nullable ? &in : out;
		const char *nm = nullable ? NULL : name;
		int types = 0;
		if (nl && !json_is_boolean(nl)) fail(g, LANES_EINVAL, "'nullable' must be a boolean");
		else if (json_object_get(s, "$ref")) gen_ref(g, s, nm, dst);
		else if (json_object_get(s, "enum") || json_object_get(s, "const")) gen_enum(g, s, dst);
		else if (json_object_get(s, "anyOf") || json_object_get(s, "oneOf")) gen_union(g, s, hint, nm, dst);
		else if (json_array_size(json_object_get(s, "allOf")) == 1 && alone(s, "allOf")) {
			// one member alone (as generators wrap a $ref to give it a default): that member
			size_t old = ptr_push(g, "allOf");
			ptr_push(g, "0");
			gen(g, json_array_get(json_object_get(s, "allOf"), 0), hint, nm, dst);
			ptr_pop(g, old);
		} else if (json_object_get(s, "allOf")) {
			types = json_object_get(s, "type") ? types_of(g, s) : T_OBJ;
			if (!g->rc && types != T_OBJ) fail(g, LANES_EINVAL, "unsupported keyword 'allOf' beside a type other than object");
			if (!g->rc) g->lead = g->nrefs, gen_obj(g, s, hint, nm, dst);
		} else if ((types = types_of(g, s)) == T_ALL && !json_object_get(s, "type")) helper(g, dst, H_VALUE);
		else if (!g->rc) {
			// every type's branch starts with a character, so refs opened so far are not leading
			int nt = 0;
			g->lead = g->nrefs;
			for (int t = 1; t <= T_INT; t <<= 1) nt += (types & t) != 0;
			if (types & T_INT && types & T_NUM) types &= ~T_INT, nt--; // integers are numbers
			sb alts = {0};
			for (int t = 1, k = 0; t <= T_INT && !g->rc; t <<= 1) {
				if (!(types & t)) continue;
				if (nt == 1) gen_type(g, s, t, hint, nm, dst);
				else {
					if (k++) sb_put(g, &alts, " | ");
					gen_type(g, s, t, hint, NULL, &alts);
				}
			}
			if (nt > 1 && !g->rc) rule_ref(g, nm, hint, &alts, dst);
			else sb_free(g, &alts);
		}
		if (nullable && !g->rc) {
			sb_put(g, &in, " | ");
			helper(g, &in, H_NULL);
			rule_ref(g, name, hint, &in, out);
		} else sb_free(g, &in);
	}
	g->lead = saved_lead;
	g->depth--;
	return g->rc;
}

static void sg_free(sg *g) {
	free(g->out.p);
	for (int i = 0; i < g->nrefs; i++) free(g->refs[i].ref), free(g->refs[i].name);
	free(g->refs);
	for (size_t i = 0; i < g->namecap; i++) free(g->names[i]);
	free(g->names);
}

// Appends every helper rule used, and the ones they use.
static int helpers_emit(sg *g) {
	uint32_t h = g->helpers, prev;
	do {
		prev = h;
		for (int i = 0; i < H_COUNT; i++)
			if (h & 1u << i) h |= sg_helpers[i].deps;
	} while (h != prev);
	for (int i = 0; i < H_COUNT && !g->rc; i++) {
		if (!(h & 1u << i)) continue;
		sb_fmt(g, &g->out, "%s-%s ::= ", g->root, sg_helpers[i].name);
		for (const char *c = sg_helpers[i].body; *c && !g->rc; c++) {
			if (*c == '@') sb_put(g, &g->out, g->root);
			else sb_add(g, &g->out, c, 1);
		}
		sb_put(g, &g->out, "\n");
	}
	return g->rc;
}

int grammar_schema_gbnf(const json_t *schema, const char *root, char **out, char *err, size_t errlen) {
	if (!out) return base_seterr(err, errlen, LANES_EINVAL, "no output pointer");
	*out = NULL;
	if (!schema) return base_seterr(err, errlen, LANES_EINVAL, "no schema");
	size_t rn = root ? strlen(root) : 0;
	bool ok = rn > 0 && rn <= 64;
	for (size_t i = 0; i < rn; i++)
		ok &= (root[i] >= 'a' && root[i] <= 'z') || (root[i] >= 'A' && root[i] <= 'Z') || (root[i] >= '0' && root[i] <= '9') || root[i] == '-';
	if (!ok) return base_seterr(err, errlen, LANES_EINVAL, "root rule name must be 1 to 64 letters, digits or '-'");
	sg g = {.top = schema, .root = root, .err = err, .errlen = errlen, .ptr = ""};
	name_take(&g, root);
	for (int i = 0; i < H_COUNT && !g.rc; i++) {
		char n[96];
		snprintf(n, sizeof n, "%s-%s", root, sg_helpers[i].name);
		name_take(&g, n);
	}
	// the root is the target of "#", so a schema may recurse into itself
	if (!g.rc) {
		json_t *r = json_pack("{s:s}", "$ref", "#");
		sb top = {0};
		if (!r) fail(&g, LANES_ENOMEM, "out of memory");
		else gen_ref(&g, r, root, &top);
		json_decref(r);
		sb_free(&g, &top);
	}
	if (!g.rc) helpers_emit(&g);
	if (g.rc) {
		int rc = g.rc;
		sg_free(&g);
		return rc;
	}
	*out = g.out.p;
	g.out.p = NULL;
	sg_free(&g);
	return 0;
}

static char *sg_object_text;
static pthread_once_t sg_object_once = PTHREAD_ONCE_INIT;

static void object_init(void) {
	json_t *s = json_pack("{s:s}", "type", "object");
	char err[128];
	if (s) grammar_schema_gbnf(s, "root", &sg_object_text, err, sizeof err);
	json_decref(s);
}

const char *grammar_json_object_gbnf(void) {
	pthread_once(&sg_object_once, object_init);
	// out of memory at the first call: the empty object, still a valid one
	return sg_object_text ? sg_object_text : "root ::= \"{\" \"}\"";
}
