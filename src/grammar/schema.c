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
#define SG_NFA_STATES 8192        // states of one automaton of a string's pattern, format and lengths
#define SG_NFA_WORK (1 << 21)     // steps all such automata of one schema may take together

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
	bool relax;        // what cannot be checked is relaxed and named, not refused (tool schemas)
	const char *why;   // the keyword the error is about when relaxing the node would serve; NULL: refuse
	char *relaxed;     // the keywords relaxed, comma separated (NULL: not kept)
	size_t relaxedlen;
	int64_t nfa_work;  // against SG_NFA_WORK
	char *fmt_rule[16]; // the rule of each format used, by index in sg_formats
} sg;

// ---- helper rules: '@' stands for the root name ------------------------------------------
enum { H_WS, H_HEX, H_CHAR, H_KC, H_STRING, H_INT, H_NUM, H_BOOL, H_NULL, H_VALUE, H_OBJECT, H_ARRAY, H_COUNT };

static const struct {
	const char *name, *body;
	uint32_t deps;
} sg_helpers[H_COUNT] = {
	// bounded whitespace: a model cannot loop on it, and pretty-printing still fits
	[H_WS] = {"ws", "( \" \" | \"\\n\" [ \\t]{0,20} )?", 0},
	[H_HEX] = {"hex", "[0-9a-fA-F]", 0},
	// scalar values only: raw, a surrogate is not UTF-8; escaped, it comes as a high-low pair
	[H_CHAR] = {"char",
		    "[^\"\\\\\\x00-\\x1F\\x7F\\uD800-\\uDFFF] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-CefEF] @-hex{3} | [dD] [0-7] "
		    "@-hex{2} | [dD] [89abAB] @-hex{2} \"\\\\u\" [dD] [c-fC-F] @-hex{2} ) )",
		    1u << H_HEX},
	// characters of a key that must differ from the declared ones: no escapes, so no aliasing
	[H_KC] = {"kc", "[^\"\\\\\\x00-\\x1F\\x7F\\uD800-\\uDFFF]", 0},
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
	g->why = NULL;
	if (g->ptrlen) base_seterr(g->err, g->errlen, code, "%s at %s", msg, g->ptr);
	else base_seterr(g->err, g->errlen, code, "%s at the root", msg);
	return code;
}

// Fails with LANES_EINVAL for what this compiler cannot check at the current node: about
// keyword kw, which relaxed mode then relaxes (the node to its type) instead of refusing.
__attribute__((format(printf, 3, 4))) static int unsupported(sg *g, const char *kw, const char *fmt, ...) {
	if (g->rc) return g->rc;
	char msg[384];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fail(g, LANES_EINVAL, "%s", msg);
	g->why = kw;
	return g->rc;
}

// Forgets the error a relaxation answers.
static void recover(sg *g) {
	g->rc = 0, g->why = NULL;
	if (g->err && g->errlen) g->err[0] = 0;
}

// Adds keyword kw to the relaxed names (once; reduced to characters a header may carry).
static void note(sg *g, const char *kw) {
	if (!g->relaxed || !g->relaxedlen) return;
	char name[SG_MAX_NAME + 1];
	size_t n = 0;
	for (const char *c = kw; *c && n < SG_MAX_NAME; c++) {
		bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || strchr("$_-.", *c);
		name[n++] = ok ? *c : '?';
	}
	name[n] = 0;
	size_t have = strlen(g->relaxed);
	for (const char *p = g->relaxed; *p;) {
		const char *e = strchr(p, ',');
		size_t k = e ? (size_t)(e - p) : strlen(p);
		if (k == n && !memcmp(p, name, n)) return;
		p += k + (e != NULL);
		while (*p == ' ') p++;
	}
	// a list that would overflow keeps the names it has
	if (have + n + 3 > g->relaxedlen) return;
	snprintf(g->relaxed + have, g->relaxedlen - have, "%s%s", have ? ", " : "", name);
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
	if (json_is_real(v)) {
		// the shortest text that reads back as the same double: 1.0 is written 1, 0.1 is 0.1
		char t[40];
		double x = json_real_value(v);
		if (x == floor(x) && fabs(x) < 1e15) snprintf(t, sizeof t, "%.0f", x);
		else
			for (int p = 1; p <= 17; p++)
				if (snprintf(t, sizeof t, "%.*g", p, x), strtod(t, NULL) == x) break;
		literal(g, b, t, strlen(t));
	} else {
		char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
		if (!s) return fail(g, LANES_ENOMEM, "out of memory");
		literal(g, b, s, strlen(s));
		free(s);
	}
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
// K_DROP: assertions not checked here whose absence only widens what a node takes, so relaxed
// mode drops them alone (as it does keywords no draft defines: annotations to a validator).
enum { K_ANNOT = 1, K_CORE = 2, K_OBJ = 4, K_ARR = 8, K_STR = 16, K_NUM = 32, K_DROP = 64 };

static const struct {
	const char *key;
	int kind;
} sg_keys[] = {
	{"title", K_ANNOT}, {"description", K_ANNOT}, {"examples", K_ANNOT}, {"default", K_ANNOT},
	{"$schema", K_ANNOT}, {"$id", K_ANNOT}, {"$comment", K_ANNOT}, {"readOnly", K_ANNOT},
	{"writeOnly", K_ANNOT}, {"deprecated", K_ANNOT}, {"$defs", K_ANNOT}, {"definitions", K_ANNOT},
	{"type", K_CORE}, {"enum", K_CORE}, {"const", K_CORE}, {"anyOf", K_CORE}, {"oneOf", K_CORE},
	{"allOf", K_CORE}, {"$ref", K_CORE}, {"nullable", K_CORE},
	{"properties", K_OBJ}, {"required", K_OBJ}, {"additionalProperties", K_OBJ}, {"propertyNames", K_OBJ},
	{"minProperties", K_OBJ}, {"maxProperties", K_OBJ}, {"dependentRequired", K_OBJ},
	{"items", K_ARR}, {"prefixItems", K_ARR}, {"additionalItems", K_ARR}, {"minItems", K_ARR}, {"maxItems", K_ARR},
	{"minLength", K_STR}, {"maxLength", K_STR}, {"pattern", K_STR}, {"format", K_STR},
	{"minimum", K_NUM}, {"maximum", K_NUM}, {"exclusiveMinimum", K_NUM}, {"exclusiveMaximum", K_NUM},
	{"multipleOf", K_NUM},
	{"not", K_DROP}, {"if", K_DROP}, {"then", K_DROP}, {"else", K_DROP}, {"uniqueItems", K_DROP},
	{"contains", K_DROP}, {"minContains", K_DROP}, {"maxContains", K_DROP}, {"dependentSchemas", K_DROP},
	{"dependencies", K_DROP}, {"patternProperties", K_DROP}, {"unevaluatedProperties", K_DROP},
	{"unevaluatedItems", K_DROP}, {"$dynamicRef", K_DROP}, {"$recursiveRef", K_DROP},
};

static int key_kind(const char *key) {
	for (size_t i = 0; i < sizeof sg_keys / sizeof sg_keys[0]; i++)
		if (!strcmp(sg_keys[i].key, key)) return sg_keys[i].kind;
	return 0;
}

// Whether relaxed mode drops key at any node (noting it): unchecked assertions, unknown words.
static bool droppable(const sg *g, const char *key) {
	int k = key_kind(key);
	return g->relax && (!k || k == K_DROP);
}

// Refuses every key of s outside the kinds allowed (annotations and nullable, which gen()
// wraps around any node, always pass); relaxed mode drops and notes them instead.
static int only_keys(sg *g, const json_t *s, int allowed, const char *beside) {
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)s, key, v) {
		int k = key_kind(key);
		if (k & (allowed | K_ANNOT) || (beside && !strcmp(key, beside)) || !strcmp(key, "nullable")) continue;
		if (g->relax) {
			note(g, key);
			continue;
		}
		if (!k || k == K_DROP || !beside) return unsupported(g, key, "unsupported keyword '%s'", key);
		return unsupported(g, key, "unsupported keyword '%s' beside '%s'", key, beside);
	}
	return 0;
}

// Whether every key of s but key is an annotation (or one relaxed mode drops).
static bool alone(const sg *g, const json_t *s, const char *key) {
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)s, k, v) if (strcmp(k, key) && key_kind(k) != K_ANNOT && !droppable(g, k)) return false;
	return true;
}

// Reads s[key] as a whole non-negative count into *v (absent: *v unchanged, returns 0). max < 0:
// an upper bound, which past -max (or the repeat bound when -1) reads as none (*v -1).
static int count_of(sg *g, const json_t *s, const char *key, int64_t max, int64_t *v) {
	const json_t *x = json_object_get(s, key);
	if (!x) return 0;
	double d = json_number_value(x);
	if (!json_is_number(x) || d < 0 || d != floor(d)) return fail(g, LANES_EINVAL, "'%s' must be a non-negative integer", key);
	if (max < 0 && d > (double)(max == -1 ? SG_MAX_LENGTH : -max)) return *v = -1, 0;
	if (max >= 0 && d > (double)max) return fail(g, LANES_ELIMIT, "'%s' of %.0f exceeds %lld", key, d, (long long)max);
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

static int mult_part(sg *g, uint64_t lo, uint64_t hi, uint64_t p, const char *sign, bool *first, const char *hint, sb *out);

// multipleOf as the step the integers taken must be multiples of: *p 1 when every integer is
// one, 0 when it is not expressible here (a step past 15 digits, or finer than 1e-9).
static int int_step(sg *g, const json_t *s, uint64_t *p) {
	const json_t *mo = json_object_get(s, "multipleOf");
	*p = 1;
	if (!mo) return 0;
	double k = json_number_value(mo);
	if (!json_is_number(mo) || !(k > 0) || !isfinite(k)) return fail(g, LANES_EINVAL, "'multipleOf' must be a number above 0");
	// k = P / 10^d; the integers among its multiples are those of P / gcd(P, 10^d)
	uint64_t ten = 1;
	for (int d = 0; d <= 9; d++, ten *= 10) {
		double v = k * (double)ten, r = nearbyint(v);
		if (r < 1 || r > 1e15 || fabs(v - r) > 1e-9 * r) continue;
		uint64_t a = (uint64_t)r, b = ten;
		while (b) a %= b, a ^= b, b ^= a, a ^= b; // gcd(P, 10^d) in a
		*p = (uint64_t)r / a;
		return 0;
	}
	*p = 0;
	return 0;
}

static int gen_int(sg *g, const json_t *s, const char *hint, sb *out) {
	double lo = 0, hi = 0;
	bool has_lo, has_hi;
	uint64_t p;
	if (bound(g, s, "minimum", "exclusiveMinimum", false, &lo, &has_lo) ||
	    bound(g, s, "maximum", "exclusiveMaximum", true, &hi, &has_hi) || int_step(g, s, &p))
		return g->rc;
	if (!p) {
		if (!g->relax) return unsupported(g, "multipleOf", "unsupported keyword 'multipleOf': a step past 15 digits or finer than 1e-9");
		note(g, "multipleOf"), p = 1;
	}
	if (!has_lo && !has_hi && p == 1) return helper(g, out, H_INT);
	const int64_t big = 999999999999999999, dflt = p > 1 ? 999999999999999 : 9999999999999999;
	// relaxed: a bound past 18 digits is dropped
	if (g->relax && has_lo && fabs(lo) > 1e18) has_lo = false, note(g, "minimum");
	if (g->relax && has_hi && fabs(hi) > 1e18) has_hi = false, note(g, "maximum");
	if (!has_lo && !has_hi && p == 1) return helper(g, out, H_INT);
	if ((has_lo && fabs(lo) > 1e18) || (has_hi && fabs(hi) > 1e18))
		return fail(g, LANES_ELIMIT, "integer bounds beyond 18 digits are unsupported");
	int64_t a = has_lo ? (int64_t)ceil(lo) : -dflt, b = has_hi ? (int64_t)floor(hi) : a > dflt ? big : dflt;
	if (!has_lo && b < -dflt) a = -big;
	if (a < -big || b > big) return fail(g, LANES_ELIMIT, "integer bounds beyond 18 digits are unsupported");
	if (a > b) return fail(g, LANES_EINVAL, "no integer lies between minimum and maximum");
	bool first = true;
	sb body = {0};
	if (p == 1) {
		if (a < 0) naturals(g, &body, b < 0 ? (uint64_t)-b : 1, (uint64_t)-a, "\"-\" ", &first);
		if (b >= 0) naturals(g, &body, a > 0 ? (uint64_t)a : 0, (uint64_t)b, "", &first);
	} else {
		int rc = 0;
		if (a < 0 && a == -b) {
			// symmetric bounds: one rule for the magnitudes, with and without the sign
			sb mag = {0}, name = {0};
			bool f = true;
			rc = mult_part(g, 1, (uint64_t)b, p, "", &f, hint, &mag);
			if (!rc && !f) rule_ref(g, NULL, hint, &mag, &name);
			else sb_free(g, &mag);
			if (!rc && !f && !g->rc) sb_fmt(g, &body, "\"-\" %s | \"0\" | %s", name.p, name.p), first = false;
			sb_free(g, &name);
		} else {
			if (a < 0) rc = mult_part(g, b < 0 ? (uint64_t)-b : 1, (uint64_t)-a, p, "\"-\" ", &first, hint, &body);
			if (!rc && a <= 0 && b >= 0) alt_sep(g, &body, "\"0\"", &first);
			if (!rc && b > 0) rc = mult_part(g, a > 0 ? (uint64_t)a : 1, (uint64_t)b, p, "", &first, hint, &body);
		}
		if (rc && !g->rc) {
			sb_free(g, &body);
			if (!g->relax) return unsupported(g, "multipleOf", "unsupported keyword 'multipleOf': too many multiples of %llu between the bounds to write out", (unsigned long long)p);
			note(g, "multipleOf");
			p = 1, first = true;
			if (a < 0) naturals(g, &body, b < 0 ? (uint64_t)-b : 1, (uint64_t)-a, "\"-\" ", &first);
			if (b >= 0) naturals(g, &body, a > 0 ? (uint64_t)a : 0, (uint64_t)b, "", &first);
		}
		if (first && !g->rc) fail(g, LANES_EINVAL, "no multiple of %llu lies between minimum and maximum", (unsigned long long)p);
	}
	if (g->rc) return sb_free(g, &body), g->rc;
	sb_put(g, out, "( ");
	sb_add(g, out, body.p, body.n);
	sb_free(g, &body);
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
	if (*set && (*v != floor(*v) || fabs(*v) > 1e15)) {
		const char *kw = *ex ? exkey : key;
		if (!g->relax)
			return unsupported(g, kw, "unsupported keyword '%s' for a number: only whole bounds up to 1e15 are supported", kw);
		// relaxed: the whole number past it, inclusive, or no bound past 1e15
		note(g, kw);
		*ex = false;
		if (fabs(*v) > 1e15) *set = false;
		else *v = upper ? ceil(*v) : floor(*v);
	}
	return 0;
}

// Appends alternatives for magnitudes in [lo, hi] (excluded ends as said; has_hi false: no
// upper end) written with sign, a fraction, and no exponent.
// The fractions a number may have: any (or, with a multipleOf, those it allows), any that is
// not zero, a zero one (all optional but nonzero).
typedef struct {
	const char *any, *nonzero, *zero;
} fracs;

static void magnitudes(sg *g, sb *out, int64_t lo, bool lo_ex, bool has_hi, int64_t hi, bool hi_ex, const char *sign, bool *first,
		       const fracs *fr) {
	const char *any = fr->any, *zero = fr->zero, *nonzero = fr->nonzero;
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

static int gen_num(sg *g, const json_t *s, const char *hint, sb *out) {
	double lo = 0, hi = 0;
	bool has_lo, has_hi, lo_ex, hi_ex;
	fracs fr = {"( \".\" [0-9]{1,16} )?", "\".\" \"0\"{0,15} [1-9] [0-9]{0,15}", "( \".\" \"0\"{1,16} )?"};
	sb nz = {0}, opt = {0}; // the fractions a multipleOf allows: all of them nonzero, and optional
	const json_t *mo = json_object_get(s, "multipleOf");
	if (mo) {
		// a whole step: the integers that are its multiples; P / 10^d with P dividing 10^d: the
		// fractions of d digits that are multiples of P (10^-d: any of at most d digits)
		double k = json_number_value(mo), ten = 1;
		if (!json_is_number(mo) || !(k > 0) || !isfinite(k)) return fail(g, LANES_EINVAL, "'multipleOf' must be a number above 0");
		if (k == floor(k)) return gen_int(g, s, hint, out);
		int d = 0;
		uint64_t P = 0, tens = 1;
		while (d < 9 && !P) {
			d++, tens *= 10;
			double v = k * (ten *= 10), r = nearbyint(v);
			if (r >= 1 && fabs(v - r) <= 1e-9 * r) P = (uint64_t)r;
		}
		if (P == 1) {
			sb_fmt(g, &nz, "\".\" [0-9]{0,%d} [1-9]", d - 1);
			sb_fmt(g, &opt, "( \".\" [0-9]{1,%d} )?", d);
		} else if (P && tens % P == 0 && tens / P <= 100) {
			// each multiple of P below 10^d as d digits, its trailing zeros left out
			sb_put(g, &nz, "\".\" ( ");
			for (uint64_t v = P; v < tens && !g->rc; v += P) {
				char t[24];
				int n = snprintf(t, sizeof t, "%0*llu", d, (unsigned long long)v);
				while (n > 1 && t[n - 1] == '0') t[--n] = 0;
				sb_fmt(g, &nz, "%s\"%s\"", v > P ? " | " : "", t);
			}
			sb_put(g, &nz, " )");
			sb_put(g, &opt, "( "), sb_add(g, &opt, nz.p, nz.n), sb_put(g, &opt, " )?");
		} else if (!g->relax)
			return unsupported(g, "multipleOf", "unsupported keyword 'multipleOf' for a number: only whole steps and P/10^n with P dividing 10^n");
		else note(g, "multipleOf");
		if (nz.n && !g->rc) fr = (fracs){opt.p, nz.p, "( \".\" \"0\" )?"};
	}
	if (num_bound(g, s, "minimum", "exclusiveMinimum", false, &lo, &has_lo, &lo_ex) ||
	    num_bound(g, s, "maximum", "exclusiveMaximum", true, &hi, &has_hi, &hi_ex))
		return sb_free(g, &nz), sb_free(g, &opt), g->rc;
	if (!has_lo && !has_hi && !nz.n) return helper(g, out, H_NUM);
	if (!has_lo && !has_hi) {
		sb_put(g, out, "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ");
		sb_add(g, out, opt.p, opt.n);
		sb_free(g, &nz), sb_free(g, &opt);
		sb_put(g, out, " ");
		return helper(g, out, H_WS);
	}
	if (has_lo && has_hi && (lo > hi || (lo == hi && (lo_ex || hi_ex)))) {
		sb_free(g, &nz), sb_free(g, &opt);
		return fail(g, LANES_EINVAL, "no number lies between minimum and maximum");
	}
	// an absent bound is not read (num_bound keeps present ones whole and within 1e15)
	int64_t l = has_lo ? (int64_t)lo : 0, h = has_hi ? (int64_t)hi : 0;
	bool first = true;
	sb_put(g, out, "( ");
	// at least zero: the integral part against the bounds; below zero: the magnitude
	if (!has_hi || h >= 0) {
		bool from0 = !has_lo || l < 0;
		magnitudes(g, out, from0 ? 0 : l, from0 ? false : lo_ex, has_hi, h, hi_ex, "", &first, &fr);
	}
	if (!has_lo || l < 0) {
		bool below = has_hi && h < 0;
		magnitudes(g, out, below ? -h : 0, below ? hi_ex : true, has_lo, -l, lo_ex, "\"-\" ", &first, &fr);
	}
	sb_free(g, &nz), sb_free(g, &opt);
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

// The text between a pattern's anchors as GBNF (no quotes): a side without its anchor takes
// any characters there, as a regular expression searches.
static int pattern_body(sg *g, const char *p, size_t n, sb *out) {
	size_t bs = 0;
	while (bs + 1 < n && p[n - 2 - bs] == '\\') bs++;
	bool head = n && p[0] == '^', tail = n > head && p[n - 1] == '$' && bs % 2 == 0;
	rx r = {p + head, p + n - tail, 0};
	sb body = {0};
	bool wrapped, nullable;
	rx_alt(g, &r, &body, &wrapped, &nullable);
	if (!g->rc && r.p < r.end) fail(g, LANES_EINVAL, "pattern has an unmatched ')'");
	if (!g->rc && !head) helper(g, out, H_CHAR), sb_put(g, out, "* ");
	if (!g->rc && body.n) sb_add(g, out, body.p, body.n), sb_put(g, out, " ");
	if (!g->rc && !tail) helper(g, out, H_CHAR), sb_put(g, out, "* ");
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

// ---- automata: a pattern, a format and lengths that must all hold ---------------------------
// Each becomes a nondeterministic automaton over code points; their product is written as one
// rule per state (right recursion, which the matcher follows without growing its stacks).
typedef struct {
	int32_t from, to;
	uint32_t lo, hi; // lo > hi: an empty move
} nedge;

typedef struct {
	int32_t ns, cap_s, ne, cap_e, start;
	uint8_t *acc;    // (ns) accepting
	nedge *e;        // (ne) sorted by from once sealed
	int32_t *first;  // (ns + 1) sealed: the edges of state s are e[first[s] .. first[s + 1])
} nfa;

enum { NFA_OK, NFA_BIG, NFA_EMPTY }; // what building or intersecting gave

static void nfa_free(nfa *a) {
	free(a->acc), free(a->e), free(a->first);
	*a = (nfa){0};
}

// A new state, or -1 past the bounds (work is charged against the schema's budget).
static int32_t nfa_state(sg *g, nfa *a) {
	if (a->ns >= SG_NFA_STATES || ++g->nfa_work > SG_NFA_WORK) return -1;
	if (a->ns == a->cap_s) {
		int32_t cap = a->cap_s ? a->cap_s * 2 : 64;
		uint8_t *acc = realloc(a->acc, (size_t)cap);
		if (!acc) return fail(g, LANES_ENOMEM, "out of memory"), -1;
		a->acc = acc, a->cap_s = cap;
	}
	a->acc[a->ns] = 0;
	return a->ns++;
}

static bool nfa_edge(sg *g, nfa *a, int32_t from, int32_t to, uint32_t lo, uint32_t hi) {
	if (++g->nfa_work > SG_NFA_WORK) return false;
	if (a->ne == a->cap_e) {
		int32_t cap = a->cap_e ? a->cap_e * 2 : 128;
		nedge *e = realloc(a->e, (size_t)cap * sizeof *e);
		if (!e) return fail(g, LANES_ENOMEM, "out of memory"), false;
		a->e = e, a->cap_e = cap;
	}
	a->e[a->ne++] = (nedge){from, to, lo, hi};
	return true;
}

#define EPS(g, a, x, y) nfa_edge(g, a, x, y, 1, 0)

// Edges from x to y for the code points of c (normalized), surrogates left out as JSON text
// cannot carry them alone.
static bool nfa_class(sg *g, nfa *a, int32_t x, int32_t y, const cset *c) {
	for (size_t i = 0; i < c->n; i++) {
		uint32_t lo = c->v[i].lo, hi = c->v[i].hi;
		if (lo < 0xD800 && !nfa_edge(g, a, x, y, lo, hi < 0xD800 ? hi : 0xD7FF)) return false;
		if (hi > 0xDFFF && !nfa_edge(g, a, x, y, lo > 0xDFFF ? lo : 0xE000, hi)) return false;
	}
	return true;
}

static int nx_alt(sg *g, rx *r, nfa *a, int32_t *s, int32_t *e);

static span any_span[] = {{0, 0x10FFFF}};
static const cset any_cp = {any_span, 1, 1}; // every code point

// One atom into fragment s..e; as rx_atom reads it, so both give the same strings.
static int nx_atom(sg *g, rx *r, nfa *a, int32_t *s, int32_t *e) {
	char c = *r->p;
	if (c == '(') {
		r->p++;
		if (r->p < r->end && *r->p == '?') {
			r->p++;
			if (r->p < r->end && *r->p == ':') r->p++;
			else {
				while (r->p < r->end && *r->p != '>') r->p++;
				r->p++;
			}
		}
		if (++r->depth > SG_MAX_DEPTH) return NFA_BIG;
		int rc = nx_alt(g, r, a, s, e);
		r->depth--;
		r->p++; // ')'
		return rc;
	}
	cset cs = {0};
	bool neg = false;
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
	// a negation takes no control character, as rx_atom writes it
	if (neg && !g->rc) cs_add(g, &cs, 0, 0x1F), cs_add(g, &cs, 0x7F, 0x7F), cs_norm(&cs), cs_invert(g, &cs);
	int rc = NFA_BIG;
	if (!g->rc && (*s = nfa_state(g, a)) >= 0 && (*e = nfa_state(g, a)) >= 0 && nfa_class(g, a, *s, *e, &cs)) rc = NFA_OK;
	free(cs.v);
	return g->rc ? g->rc : rc;
}

// An atom and its quantifier: copies of the atom, read again from its text for each.
static int nx_piece(sg *g, rx *r, nfa *a, int32_t *s, int32_t *e) {
	const char *at = r->p;
	int32_t s1, e1;
	int rc = nx_atom(g, r, a, &s1, &e1);
	if (rc) return rc;
	const char *after = r->p;
	int64_t m = 1, n = 1;
	if (r->p < r->end) {
		char c = *r->p;
		if (c == '?') m = 0, n = 1, r->p++;
		else if (c == '*') m = 0, n = -1, r->p++;
		else if (c == '+') m = 1, n = -1, r->p++;
		else if (c == '{') {
			char *q;
			m = n = strtoll(r->p + 1, &q, 10);
			if (*q == ',') n = q[1] == '}' ? -1 : strtoll(q + 1, &q, 10), q += n < 0;
			r->p = q + 1;
		}
		if (r->p < r->end && *r->p == '?' && r->p != after) r->p++;
	}
	if (m == 1 && n == 1) return *s = s1, *e = e1, NFA_OK;
	const char *end = r->p;
	int64_t k = n < 0 ? (m > 1 ? m : 1) : n;
	int32_t first = nfa_state(g, a), last = nfa_state(g, a), prev = first, si = s1;
	if (first < 0 || last < 0) return NFA_BIG;
	// m copies, then n - m that may stop early, or a last one that repeats (n < 0)
	for (int64_t i = 1; i <= k; i++) {
		int32_t ei = e1;
		if (i > 1) {
			r->p = at;
			if ((rc = nx_atom(g, r, a, &si, &ei))) return rc;
		}
		if (!EPS(g, a, prev, si) || (i > m && !EPS(g, a, prev, last))) return NFA_BIG;
		prev = ei;
	}
	if (!EPS(g, a, prev, last) || (n < 0 && k && !EPS(g, a, prev, si))) return NFA_BIG;
	r->p = end;
	*s = first, *e = last;
	return NFA_OK;
}

// Alternatives into fragment s..e.
static int nx_alt(sg *g, rx *r, nfa *a, int32_t *s, int32_t *e) {
	if ((*s = nfa_state(g, a)) < 0 || (*e = nfa_state(g, a)) < 0) return NFA_BIG;
	for (;;) {
		int32_t cur = nfa_state(g, a);
		if (cur < 0 || !EPS(g, a, *s, cur)) return NFA_BIG;
		while (r->p < r->end && *r->p != '|' && *r->p != ')') {
			int32_t ps, pe;
			int rc = nx_piece(g, r, a, &ps, &pe);
			if (rc) return rc;
			if (!EPS(g, a, cur, ps)) return NFA_BIG;
			cur = pe;
		}
		if (!EPS(g, a, cur, *e)) return NFA_BIG;
		if (r->p >= r->end || *r->p != '|') return NFA_OK;
		r->p++;
	}
}

// The strings regular expression p (n bytes, already read by pattern_body) matches, with any
// characters where an anchor is missing.
static int nfa_of_pattern(sg *g, const char *p, size_t n, nfa *a) {
	size_t bs = 0;
	while (bs + 1 < n && p[n - 2 - bs] == '\\') bs++;
	bool head = n && p[0] == '^', tail = n > head && p[n - 1] == '$' && bs % 2 == 0;
	rx r = {p + head, p + n - tail, 0};
	int32_t s, e;
	int rc = nx_alt(g, &r, a, &s, &e);
	if (rc) return rc;
	int32_t s0 = s, e0 = e;
	// a missing anchor: a state that loops on every character first (or last)
	if (!head && ((s0 = nfa_state(g, a)) < 0 || !nfa_class(g, a, s0, s0, &any_cp) || !EPS(g, a, s0, s))) return NFA_BIG;
	if (!tail && ((e0 = nfa_state(g, a)) < 0 || !nfa_class(g, a, e0, e0, &any_cp) || !EPS(g, a, e, e0))) return NFA_BIG;
	a->start = s0;
	a->acc[e0] = 1;
	return NFA_OK;
}

static int edge_cmp(const void *x, const void *y) {
	const nedge *a = x, *b = y;
	return a->from != b->from ? (a->from > b->from) - (a->from < b->from) : (a->to > b->to) - (a->to < b->to);
}

// Sorts the edges by state and indexes them.
static int nfa_seal(sg *g, nfa *a) {
	qsort(a->e, (size_t)a->ne, sizeof *a->e, edge_cmp);
	free(a->first);
	if (!(a->first = calloc((size_t)a->ns + 1, sizeof *a->first))) return fail(g, LANES_ENOMEM, "out of memory");
	for (int32_t i = 0; i < a->ne; i++) a->first[a->e[i].from + 1]++;
	for (int32_t i = 0; i < a->ns; i++) a->first[i + 1] += a->first[i];
	return 0;
}

// a without empty moves: a state takes the edges and acceptance of those its empty moves reach.
static int nfa_direct(sg *g, nfa *a, nfa *out) {
	if (nfa_seal(g, a)) return g->rc;
	int32_t *stack = malloc((size_t)a->ns * sizeof *stack), *seen = malloc((size_t)a->ns * sizeof *seen);
	int rc = stack && seen ? NFA_OK : fail(g, LANES_ENOMEM, "out of memory");
	for (int32_t i = 0; i < a->ns && !rc; i++) seen[i] = -1;
	for (int32_t i = 0; i < a->ns && !rc; i++)
		if (nfa_state(g, out) < 0) rc = NFA_BIG;
	for (int32_t p = 0; p < a->ns && !rc; p++) {
		int32_t n = 0;
		stack[n++] = p, seen[p] = p;
		while (n && !rc) {
			int32_t q = stack[--n];
			out->acc[p] |= a->acc[q];
			for (int32_t k = a->first[q]; k < a->first[q + 1] && !rc; k++) {
				const nedge *x = &a->e[k];
				if (x->lo > x->hi) {
					if (seen[x->to] != p) seen[x->to] = p, stack[n++] = x->to;
				} else if (!nfa_edge(g, out, p, x->to, x->lo, x->hi)) rc = NFA_BIG;
			}
		}
	}
	out->start = a->start;
	free(stack), free(seen);
	if (!rc) nfa_seal(g, out);
	return g->rc ? g->rc : rc;
}

// The pairs of states a product has made: an open-addressed table, and the queue to visit.
typedef struct {
	int64_t *keys; // (cap) x * (ns of b + 1) + y, -1 empty
	int32_t *ids;  // (cap) the product's state
	size_t cap;
	int32_t *qa, *qb; // (n) the pairs in the order made
	int32_t n, qcap;
} ptab;

static int ptab_grow(sg *g, ptab *t) {
	size_t nc = t->cap ? t->cap * 2 : 1024;
	int64_t *nk = malloc(nc * sizeof *nk);
	int32_t *ni = malloc(nc * sizeof *ni);
	if (!nk || !ni) return free(nk), free(ni), fail(g, LANES_ENOMEM, "out of memory");
	for (size_t i = 0; i < nc; i++) nk[i] = -1;
	for (size_t i = 0; i < t->cap; i++) {
		if (t->keys[i] < 0) continue;
		size_t h = (size_t)base_hash64(&t->keys[i], sizeof t->keys[i], 0) & (nc - 1);
		while (nk[h] >= 0) h = (h + 1) & (nc - 1);
		nk[h] = t->keys[i], ni[h] = t->ids[i];
	}
	free(t->keys), free(t->ids);
	t->keys = nk, t->ids = ni, t->cap = nc;
	return 0;
}

// The product's state for pair (x, y), made and queued when new; -1 past the bounds.
static int32_t ptab_pair(sg *g, ptab *t, nfa *out, const nfa *a, const nfa *b, int32_t x, int32_t y) {
	if (((size_t)t->n + 1) * 2 >= t->cap && ptab_grow(g, t)) return -1;
	int64_t key = (int64_t)x * (b->ns + 1) + y;
	size_t h = (size_t)base_hash64(&key, sizeof key, 0) & (t->cap - 1);
	while (t->keys[h] >= 0 && t->keys[h] != key) h = (h + 1) & (t->cap - 1);
	if (t->keys[h] == key) return t->ids[h];
	if (t->n == t->qcap) {
		int32_t cap = t->qcap ? t->qcap * 2 : 256;
		int32_t *na = realloc(t->qa, (size_t)cap * sizeof *na);
		if (na) t->qa = na;
		int32_t *nb = na ? realloc(t->qb, (size_t)cap * sizeof *nb) : NULL;
		if (nb) t->qb = nb;
		if (!na || !nb) return fail(g, LANES_ENOMEM, "out of memory"), -1;
		t->qcap = cap;
	}
	int32_t id = nfa_state(g, out);
	if (id < 0) return -1;
	t->keys[h] = key, t->ids[h] = id;
	out->acc[id] = a->acc[x] && b->acc[y];
	t->qa[t->n] = x, t->qb[t->n] = y, t->n++;
	return id;
}

// The product of a and b (both without empty moves): the strings both take, from their starts.
static int nfa_product(sg *g, const nfa *a, const nfa *b, nfa *out) {
	ptab t = {0};
	int rc = ptab_pair(g, &t, out, a, b, a->start, b->start) < 0 ? NFA_BIG : NFA_OK;
	out->start = 0;
	// the queue's order is the states' order: pair k is state k
	for (int32_t at = 0; at < t.n && !rc; at++) {
		int32_t x = t.qa[at], y = t.qb[at];
		for (int32_t i = a->first[x]; i < a->first[x + 1] && !rc; i++)
			for (int32_t j = b->first[y]; j < b->first[y + 1] && !rc; j++) {
				const nedge *p = &a->e[i], *q = &b->e[j];
				uint32_t lo = p->lo > q->lo ? p->lo : q->lo, hi = p->hi < q->hi ? p->hi : q->hi;
				if (++g->nfa_work > SG_NFA_WORK) rc = NFA_BIG;
				if (rc || lo > hi) continue;
				int32_t id = ptab_pair(g, &t, out, a, b, p->to, q->to);
				if (id < 0 || !nfa_edge(g, out, at, id, lo, hi)) rc = NFA_BIG;
			}
	}
	free(t.keys), free(t.ids), free(t.qa), free(t.qb);
	if (!rc && !g->rc) nfa_seal(g, out);
	return g->rc ? g->rc : rc;
}

// Marks in live the states reachable from the start that reach an accepting one.
static int nfa_live(sg *g, const nfa *a, uint8_t *live) {
	int32_t *stack = malloc(((size_t)a->ns + 1) * sizeof *stack), *rfirst = calloc((size_t)a->ns + 2, sizeof *rfirst);
	int32_t *rfrom = malloc(((size_t)a->ne + 1) * sizeof *rfrom);
	uint8_t *from = calloc((size_t)a->ns + 1, 1);
	if (!stack || !rfirst || !rfrom || !from) {
		free(stack), free(rfirst), free(rfrom), free(from);
		return fail(g, LANES_ENOMEM, "out of memory");
	}
	int32_t n = 0;
	stack[n++] = a->start, from[a->start] = 1;
	while (n) {
		int32_t s = stack[--n];
		for (int32_t k = a->first[s]; k < a->first[s + 1]; k++)
			if (!from[a->e[k].to]) from[a->e[k].to] = 1, stack[n++] = a->e[k].to;
	}
	// the edges by target, then backwards from the accepting states
	for (int32_t k = 0; k < a->ne; k++) rfirst[a->e[k].to + 2]++;
	for (int32_t s = 0; s < a->ns; s++) rfirst[s + 2] += rfirst[s + 1];
	for (int32_t k = 0; k < a->ne; k++) rfrom[rfirst[a->e[k].to + 1]++] = a->e[k].from;
	for (int32_t s = 0; s < a->ns; s++)
		if (from[s] && a->acc[s]) live[s] = 1, stack[n++] = s;
	while (n) {
		int32_t s = stack[--n];
		for (int32_t k = rfirst[s]; k < rfirst[s + 1]; k++)
			if (from[rfrom[k]] && !live[rfrom[k]]) live[rfrom[k]] = 1, stack[n++] = rfrom[k];
	}
	free(stack), free(rfirst), free(rfrom), free(from);
	return 0;
}

// The shortest and longest strings a takes (*hi -1: no bound), over its live states.
static int nfa_lengths(sg *g, const nfa *a, const uint8_t *live, int64_t *lo, int64_t *hi) {
	int64_t *d = malloc((size_t)a->ns * sizeof *d), *far = malloc((size_t)a->ns * sizeof *far);
	int32_t *q = malloc((size_t)a->ns * sizeof *q), *in = calloc((size_t)a->ns, sizeof *in);
	*lo = 0, *hi = -1;
	if (!d || !far || !q || !in) {
		free(d), free(far), free(q), free(in);
		return fail(g, LANES_ENOMEM, "out of memory");
	}
	// shortest: breadth first from the start
	for (int32_t s = 0; s < a->ns; s++) d[s] = -1, far[s] = -1;
	int32_t h = 0, t = 0;
	d[a->start] = 0, q[t++] = a->start;
	while (h < t) {
		int32_t s = q[h++];
		for (int32_t k = a->first[s]; k < a->first[s + 1]; k++)
			if (live[a->e[k].to] && d[a->e[k].to] < 0) d[a->e[k].to] = d[s] + 1, q[t++] = a->e[k].to;
	}
	int64_t best = -1;
	for (int32_t s = 0; s < a->ns; s++)
		if (live[s] && a->acc[s] && d[s] >= 0 && (best < 0 || d[s] < best)) best = d[s];
	*lo = best < 0 ? 0 : best;
	// longest: in topological order of the live states; a cycle leaves some unordered
	int32_t nl = 0;
	for (int32_t s = 0; s < a->ns; s++) nl += live[s];
	for (int32_t k = 0; k < a->ne; k++)
		if (live[a->e[k].from] && live[a->e[k].to]) in[a->e[k].to]++;
	h = t = 0;
	for (int32_t s = 0; s < a->ns; s++)
		if (live[s] && !in[s]) q[t++] = s;
	far[a->start] = 0;
	while (h < t) {
		int32_t s = q[h++];
		for (int32_t k = a->first[s]; k < a->first[s + 1]; k++) {
			int32_t x = a->e[k].to;
			if (!live[x]) continue;
			if (far[s] >= 0 && far[s] + 1 > far[x]) far[x] = far[s] + 1;
			if (!--in[x]) q[t++] = x;
		}
	}
	if (t == nl) {
		best = -1;
		for (int32_t s = 0; s < a->ns; s++)
			if (live[s] && a->acc[s] && far[s] > best) best = far[s];
		*hi = best;
	}
	g->nfa_work += a->ns + a->ne;
	free(d), free(far), free(q), free(in);
	return 0;
}

// Strings of m to n (n < 0: any number of) characters.
static int nfa_counter(sg *g, int64_t m, int64_t n, nfa *a) {
	int64_t last = n < 0 ? m : n;
	for (int64_t i = 0; i <= last; i++) {
		int32_t s = nfa_state(g, a);
		if (s < 0) return NFA_BIG;
		a->acc[s] = i >= m;
		if (i && !nfa_class(g, a, s - 1, s, &any_cp)) return NFA_BIG;
	}
	if (n < 0 && !nfa_class(g, a, (int32_t)last, (int32_t)last, &any_cp)) return NFA_BIG;
	a->start = 0;
	return nfa_seal(g, a) ? g->rc : NFA_OK;
}

static int sig_cmp(const void *x, const void *y) {
	const int32_t *a = x, *b = y;
	for (int i = 0; i < 3; i++)
		if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
	return 0;
}

// a with the states no string can tell apart merged (the coarsest bisimulation of its live
// states, refined from accepting or not until no class splits): the same strings, fewer rules.
static int nfa_reduce(sg *g, const nfa *a, nfa *out) {
	uint8_t *live = calloc((size_t)a->ns + 1, 1);
	int32_t *cls = malloc(((size_t)a->ns + 1) * sizeof *cls), *next = malloc(((size_t)a->ns + 1) * sizeof *next);
	int32_t *sig = malloc(((size_t)a->ne * 3 + 2) * sizeof *sig), *pool = NULL, *off = NULL, *len = NULL, *ht = NULL;
	int rc = live && cls && next && sig ? NFA_OK : fail(g, LANES_ENOMEM, "out of memory");
	if (!rc) nfa_live(g, a, live);
	int32_t n = 0, prev = -1;
	for (int32_t s = 0; s < a->ns && !rc; s++) cls[s] = live[s] ? a->acc[s] : -1;
	// per round: each live state's signature (its class, then per class of target the spans to
	// it, merged), interned; the classes are the distinct signatures
	while (!rc && !g->rc) {
		size_t cap = 64, used = 0;
		while (cap < (size_t)a->ns * 2) cap *= 2;
		free(pool), free(off), free(len), free(ht);
		pool = malloc(((size_t)a->ne * 3 + (size_t)a->ns + 1) * sizeof *pool);
		off = malloc(((size_t)a->ns + 1) * sizeof *off), len = malloc(((size_t)a->ns + 1) * sizeof *len);
		ht = malloc(cap * sizeof *ht);
		if (!pool || !off || !len || !ht) {
			rc = fail(g, LANES_ENOMEM, "out of memory");
			break;
		}
		for (size_t i = 0; i < cap; i++) ht[i] = -1;
		n = 0;
		for (int32_t s = 0; s < a->ns; s++) {
			if (!live[s]) continue;
			int32_t k = 0;
			for (int32_t e = a->first[s]; e < a->first[s + 1]; e++)
				if (live[a->e[e].to]) sig[3 * k] = cls[a->e[e].to], sig[3 * k + 1] = (int32_t)a->e[e].lo, sig[3 * k + 2] = (int32_t)a->e[e].hi, k++;
			qsort(sig, (size_t)k, 3 * sizeof *sig, sig_cmp);
			int32_t m = 0;
			for (int32_t i = 0; i < k; i++) {
				// spans to one class that touch or overlap become one
				if (m && sig[3 * (m - 1)] == sig[3 * i] && sig[3 * i + 1] <= sig[3 * (m - 1) + 2] + 1) {
					if (sig[3 * i + 2] > sig[3 * (m - 1) + 2]) sig[3 * (m - 1) + 2] = sig[3 * i + 2];
				} else memmove(&sig[3 * m], &sig[3 * i], 3 * sizeof *sig), m++;
			}
			int32_t *at = pool + used;
			at[0] = cls[s];
			memcpy(at + 1, sig, (size_t)m * 3 * sizeof *sig);
			int32_t sl = 1 + 3 * m;
			uint64_t h = base_hash64(at, (size_t)sl * sizeof *at, 0);
			size_t j = h & (cap - 1);
			for (; ht[j] >= 0; j = (j + 1) & (cap - 1))
				if (len[ht[j]] == sl && !memcmp(pool + off[ht[j]], at, (size_t)sl * sizeof *at)) break;
			if (ht[j] < 0) ht[j] = n, off[n] = (int32_t)used, len[n] = sl, used += (size_t)sl, n++;
			next[s] = ht[j];
			g->nfa_work += 1 + k;
		}
		if (g->nfa_work > SG_NFA_WORK) rc = NFA_BIG;
		for (int32_t s = 0; s < a->ns; s++) cls[s] = live[s] ? next[s] : -1;
		if (n == prev) break;
		prev = n;
	}
	// the quotient: a state per class, its edges from the signature
	for (int32_t c = 0; c < n && !rc && !g->rc; c++)
		if (nfa_state(g, out) < 0) rc = NFA_BIG;
	for (int32_t s = 0; s < a->ns && !rc && !g->rc; s++)
		if (live[s]) out->acc[cls[s]] = a->acc[s];
	for (int32_t c = 0; c < n && !rc && !g->rc; c++)
		for (int32_t i = 1; i < len[c] && !rc; i += 3)
			if (!nfa_edge(g, out, c, pool[off[c] + i], (uint32_t)pool[off[c] + i + 1], (uint32_t)pool[off[c] + i + 2])) rc = NFA_BIG;
	out->start = live[a->start] ? cls[a->start] : 0;
	if (!rc && !g->rc && !live[a->start]) rc = NFA_EMPTY;
	free(live), free(cls), free(next), free(sig), free(pool), free(off), free(len), free(ht);
	if (!rc && !g->rc) nfa_seal(g, out);
	return g->rc ? g->rc : rc;
}

// Appends the JSON text of a's strings (no quotes): a rule per state reached past the first.
static int nfa_emit(sg *g, const nfa *orig, const char *hint, sb *out) {
	nfa small = {0};
	int red = nfa_reduce(g, orig, &small);
	if (g->rc) return nfa_free(&small), g->rc;
	if (red == NFA_EMPTY) return nfa_free(&small), NFA_EMPTY;
	const nfa *a = red ? orig : &small;
	uint8_t *live = calloc((size_t)a->ns + 1, 1);
	char **names = calloc((size_t)a->ns + 1, sizeof *names);
	sb *bodies = calloc((size_t)a->ns + 1, sizeof *bodies);
	if (!live || !names || !bodies) {
		free(live), free(names), free(bodies);
		return fail(g, LANES_ENOMEM, "out of memory");
	}
	nfa_live(g, a, live);
	int rc = live[a->start] ? NFA_OK : NFA_EMPTY;
	char *base = rc || g->rc ? NULL : name_new(g, hint);
	// bit 2: the state has an edge to a live one (it gets a rule when another leads to it)
	for (int32_t k = 0; k < a->ne; k++)
		if (live[a->e[k].from] && live[a->e[k].to]) live[a->e[k].from] |= 2;
	// a state's body: per target, the class that leads there, then the target's rule
	for (int32_t s = 0; s < a->ns && !rc && !g->rc; s++) {
		if (!live[s]) continue;
		sb *b = &bodies[s];
		int alts = 0;
		for (int32_t k = a->first[s]; k < a->first[s + 1] && !g->rc;) {
			int32_t to = a->e[k].to;
			cset c = {0};
			for (; k < a->first[s + 1] && a->e[k].to == to; k++) cs_add(g, &c, a->e[k].lo, a->e[k].hi);
			if (!live[to]) {
				free(c.v);
				continue;
			}
			cs_norm(&c);
			if (alts++) sb_put(g, b, " | ");
			cs_emit(g, &c, true, true, b);
			free(c.v);
			if (!(live[to] & 2) || g->rc) continue;
			if (!names[to]) {
				char nm[SG_MAX_NAME + 96];
				snprintf(nm, sizeof nm, "%s-%d", base, (int)to);
				if ((int)g->nnames >= SG_MAX_RULES + H_COUNT)
					fail(g, LANES_ELIMIT, "the grammar would need more than %d rules", SG_MAX_RULES);
				else names[to] = name_take(g, nm) ? strdup(nm) : g->rc ? NULL : name_new(g, nm);
				if (!names[to] && !g->rc) fail(g, LANES_ENOMEM, "out of memory");
			}
			if (names[to]) sb_put(g, b, " "), sb_put(g, b, names[to]);
		}
		// optional when accepting; grouped when the start's alternatives go inline
		if ((alts && a->acc[s]) || (alts > 1 && s == a->start)) {
			sb w = {0};
			sb_put(g, &w, "( "), sb_add(g, &w, b->p, b->n), sb_put(g, &w, a->acc[s] ? " )?" : " )");
			sb_free(g, b);
			*b = w;
		}
	}
	// the start inline; every other state referred to gets its rule
	if (!rc && !g->rc) sb_add(g, out, bodies[a->start].p ? bodies[a->start].p : "", bodies[a->start].n);
	for (int32_t s = 0; s < a->ns; s++) {
		if (names[s] && !g->rc && !rc) rule_emit(g, names[s], &bodies[s]);
		sb_free(g, &bodies[s]);
		free(names[s]);
	}
	free(base), free(live), free(names), free(bodies);
	nfa_free(&small);
	return g->rc ? g->rc : rc;
}

// ---- multiples ----------------------------------------------------------------------------
// Appends "sign literal" alternatives for the multiples of p in [lo, hi]; false when more than
// the enum bound.
static bool mult_list(sg *g, uint64_t lo, uint64_t hi, uint64_t p, const char *sign, bool *first, sb *out) {
	uint64_t m0 = (lo + p - 1) / p, m1 = hi / p;
	if (lo > hi || m0 > m1) return true;
	if (m1 - m0 >= SG_MAX_ENUM) return false;
	for (uint64_t m = m0; m <= m1 && !g->rc; m++) {
		char d[32];
		snprintf(d, sizeof d, "\"%llu\"", (unsigned long long)(m * p));
		alt_sep(g, out, sign, first);
		sb_put(g, out, d);
	}
	return true;
}

// Appends alternatives (sign before each) for the multiples of p (>= 2) in [lo, hi], lo >= 1:
// written out when few; else those with more digits than lo, up to the most digits below hi,
// by their last digits (p divides a power of ten) or by the remainder of their digits so far
// (small p), and those with lo's digits written out when few. NFA_BIG when nothing fits.
static int mult_part(sg *g, uint64_t lo, uint64_t hi, uint64_t p, const char *sign, bool *first, const char *hint, sb *out) {
	if (mult_list(g, lo, hi, p, sign, first, out)) return g->rc;
	int d0 = 0, digits = 0; // lo's digits; the most digits every number below hi may have
	uint64_t ten = 1, top = 1;
	for (uint64_t x = lo; x; x /= 10) d0++;
	while (digits < 15 && top * 10 - 1 <= hi) top *= 10, digits++;
	int t = 0;
	uint64_t tt = 1;
	while (t < 3 && tt % p) tt *= 10, t++;
	bool tail = tt % p == 0 && tt / p <= 200;
	int from = tail && t > d0 ? t : d0; // the longer ones have from + 1 digits or more
	if (digits <= from) return NFA_BIG;
	for (int i = 0; i < from; i++) ten *= 10;
	// the shorter ones, when they are few (else they are left out)
	mult_list(g, lo, ten - 1 < hi ? ten - 1 : hi, p, sign, first, out);
	char h[SG_MAX_NAME + 8];
	if (tail) {
		// a first digit, then any digits, then the last t digits
		sb end = {0}, name = {0};
		for (uint64_t v = 0; v < tt && !g->rc; v += p) sb_fmt(g, &end, "%s\"%0*llu\"", v ? " | " : "", t, (unsigned long long)v);
		snprintf(h, sizeof h, "%.*s-tail", SG_MAX_NAME, hint);
		rule_ref(g, NULL, h, &end, &name);
		alt_sep(g, out, sign, first);
		sb_put(g, out, "[1-9] ");
		if (digits - t > 1) sb_put(g, out, "[0-9]"), repeat(g, out, from - t, digits - t - 1), sb_put(g, out, " ");
		sb_add(g, out, name.p ? name.p : "", name.n);
		sb_free(g, &name);
		return g->rc;
	}
	// the digits read so far and their remainder: the rules grow with both
	if ((uint64_t)digits * p > 256) digits = (int)(256 / p);
	if (digits <= from) return NFA_BIG;
	nfa a = {0};
	int32_t *id = malloc(((size_t)digits + 1) * p * sizeof *id);
	int rc = id ? NFA_OK : fail(g, LANES_ENOMEM, "out of memory");
	for (size_t i = 0; !rc && i < ((size_t)digits + 1) * p; i++) id[i] = -1;
	if (!rc && (a.start = nfa_state(g, &a)) < 0) rc = NFA_BIG;
	// state (len, r): len digits read, their value r modulo p; level by level from the start
	for (int len = 0; len < digits && !rc; len++)
		for (uint64_t r = 0; r < p && !rc; r++) {
			int32_t at = len ? id[(size_t)len * p + r] : a.start;
			if (at < 0 || (!len && r)) continue;
			for (uint32_t dg = len ? 0 : 1; dg <= 9 && !rc; dg++) {
				uint64_t nr = (r * 10 + dg) % p;
				size_t k = (size_t)(len + 1) * p + nr;
				if (id[k] < 0 && (id[k] = nfa_state(g, &a)) >= 0) a.acc[id[k]] = !nr && len + 1 > from;
				if (id[k] < 0 || !nfa_edge(g, &a, at, id[k], '0' + dg, '0' + dg)) rc = NFA_BIG;
			}
		}
	free(id);
	sb body = {0};
	snprintf(h, sizeof h, "%.*s-mul", SG_MAX_NAME, hint);
	if (!rc && !nfa_seal(g, &a)) rc = nfa_emit(g, &a, h, &body);
	nfa_free(&a);
	if (!rc && !g->rc) alt_sep(g, out, sign, first), sb_add(g, out, body.p, body.n);
	sb_free(g, &body);
	return g->rc ? g->rc : rc;
}

// ---- strings ------------------------------------------------------------------------------
// Formats as regular expressions in the subset patterns use. Exact: date (leap years told),
// time and date-time (RFC 3339: an offset, seconds, at most 6 fraction digits), uuid, ipv4
// (dotted decimal, no leading zeros), duration (RFC 3339 appendix A). Approximated by a subset
// that validators take: ipv6 (the eight-group and '::' forms, no embedded IPv4 or zone),
// hostname (up to 4 labels of up to 62 characters), email (a dot-atom of letters, digits and
// _+- ; a domain ending in a letters-only label), uri and url (http or https, such a host, an
// optional port of 2 to 5 digits, then a path with query and fragment of URI characters).
#define RX_DATE                                                                                               \
	"([0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))" \
	"|([0-9]{2}(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)"
#define RX_TIME "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[-+]([01][0-9]|2[0-3]):[0-5][0-9])"
#define RX_H16 "[0-9a-fA-F]{1,4}"
#define RX_LABEL "[A-Za-z0-9]([A-Za-z0-9-]{0,60}[A-Za-z0-9])?"
#define RX_ULABEL "[A-Za-z0-9]+(-[A-Za-z0-9]+)*"
#define RX_PCHAR "([A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})"
#define RX_URL                                                                                                \
	"^https?://" RX_ULABEL "(\\." RX_ULABEL ")*\\.[A-Za-z]{2,63}(:[0-9]{2,5})?(/(" RX_PCHAR "|/)*(\\?(" RX_PCHAR \
	"|[/?])*)?(#(" RX_PCHAR "|[/?])*)?)?$"
#define RX_N "[0-9]{1,9}"
#define RX_DUR_TIME "T(" RX_N "H(" RX_N "M(" RX_N "S)?)?|" RX_N "M(" RX_N "S)?|" RX_N "S)"
static const struct {
	const char *name, *rx;
} sg_formats[] = {
	{"date", "^" RX_DATE "$"},
	{"time", "^" RX_TIME "$"},
	{"date-time", "^" RX_DATE "T" RX_TIME "$"},
	{"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
	{"ipv4", "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$"},
	{"ipv6", "^(" RX_H16 "(:" RX_H16 "){7}|(" RX_H16 ":){1,7}:|(" RX_H16 ":){1,6}:" RX_H16 "|(" RX_H16 ":){1,5}(:" RX_H16
		 "){1,2}|(" RX_H16 ":){1,4}(:" RX_H16 "){1,3}|(" RX_H16 ":){1,3}(:" RX_H16 "){1,4}|(" RX_H16 ":){1,2}(:" RX_H16
		 "){1,5}|" RX_H16 ":(:" RX_H16 "){1,6}|:(:" RX_H16 "){1,7}|::)$"},
	{"hostname", "^" RX_LABEL "(\\." RX_LABEL "){0,3}$"},
	{"email", "^[A-Za-z0-9_+-]+(\\.[A-Za-z0-9_+-]+)*@" RX_LABEL "(\\." RX_LABEL ")*\\.[A-Za-z]{2,63}$"},
	{"uri", RX_URL},
	{"url", RX_URL},
	{"duration", "^P((" RX_N "D|" RX_N "M(" RX_N "D)?|" RX_N "Y(" RX_N "M(" RX_N "D)?)?)(" RX_DUR_TIME ")?|" RX_DUR_TIME
		     "|" RX_N "W)$"},
};
#define N_FORMATS (sizeof sg_formats / sizeof sg_formats[0])
_Static_assert(N_FORMATS <= sizeof ((sg *)0)->fmt_rule / sizeof(char *), "a rule name per format");

// Appends the rule of format f (written once per grammar).
static int format_ref(sg *g, int f, sb *out) {
	if (!g->fmt_rule[f]) {
		sb body = {0};
		const char *rxs = sg_formats[f].rx;
		if (pattern_body(g, rxs, strlen(rxs), &body)) return sb_free(g, &body), g->rc;
		sb name = {0};
		if (rule_ref(g, NULL, sg_formats[f].name, &body, &name)) return sb_free(g, &name), g->rc;
		g->fmt_rule[f] = name.p;
		g->used -= name.n; // held until the end, as the names are
	}
	return sb_put(g, out, g->fmt_rule[f]);
}

// The automaton of the strings every part takes: pattern (p, n bytes; NULL none), format f
// (-1 none), lengths m..len_hi (len_hi < 0: no upper bound).
static int str_nfa(sg *g, const char *p, size_t pn, int f, int64_t m, int64_t len_hi, nfa *res) {
	nfa parts[2] = {{0}}, raw = {0};
	int np = 0, rc = NFA_OK;
	if (p) rc = nfa_of_pattern(g, p, pn, &raw), rc = rc ? rc : nfa_direct(g, &raw, &parts[np++]), nfa_free(&raw);
	if (!rc && f >= 0) {
		rc = nfa_of_pattern(g, sg_formats[f].rx, strlen(sg_formats[f].rx), &raw);
		rc = rc ? rc : nfa_direct(g, &raw, &parts[np++]);
		nfa_free(&raw);
	}
	if (!rc && np == 2) rc = nfa_product(g, &parts[0], &parts[1], res);
	else if (!rc && np == 1) *res = parts[0], parts[0] = (nfa){0};
	else if (!rc) return nfa_counter(g, m, len_hi, res); // lengths alone
	for (int i = 0; i < 2; i++) nfa_free(&parts[i]);
	if (rc || (m == 0 && len_hi < 0)) return rc;
	// lengths: nothing to add when the strings already keep within them
	uint8_t *live = calloc((size_t)res->ns + 1, 1);
	if (!live) return fail(g, LANES_ENOMEM, "out of memory");
	int64_t lo = 0, hi = -1;
	if (!nfa_live(g, res, live)) nfa_lengths(g, res, live, &lo, &hi);
	free(live);
	if (g->rc) return g->rc;
	if (lo >= m && (len_hi < 0 || (hi >= 0 && hi <= len_hi))) return NFA_OK;
	nfa cnt = {0}, both = {0};
	rc = nfa_counter(g, m, len_hi, &cnt);
	if (!rc) rc = nfa_product(g, res, &cnt, &both);
	nfa_free(&cnt);
	nfa_free(res);
	*res = both;
	return rc;
}

// What a string schema asks for: a pattern, a format, lengths.
typedef struct {
	const char *p; // the pattern (NULL: none, or relaxed away)
	size_t pn;     // its bytes
	sb pg;         // its GBNF (no quotes)
	int f;         // the format's index in sg_formats, -1 none
	int64_t m, n;  // minLength, maxLength (n < 0: none)
} strspec;

// Reads s's string keywords into x; what cannot be read is refused, or relaxed away and named.
static int str_spec(sg *g, const json_t *s, strspec *x) {
	const json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
	*x = (strspec){.f = -1, .n = -1};
	if (count_of(g, s, "minLength", SG_MAX_LENGTH, &x->m) || count_of(g, s, "maxLength", -1, &x->n)) return g->rc;
	if (x->n >= 0 && x->m > x->n) return fail(g, LANES_EINVAL, "minLength exceeds maxLength");
	if (fmt && !json_is_string(fmt)) return fail(g, LANES_EINVAL, "'format' must be a string");
	for (size_t i = 0; fmt && i < N_FORMATS; i++)
		if (!strcmp(sg_formats[i].name, json_string_value(fmt))) x->f = (int)i;
	if (fmt && x->f < 0) {
		if (!g->relax) return unsupported(g, "format", "unsupported format '%.100s'", json_string_value(fmt));
		note(g, "format");
	}
	if (pat && !json_is_string(pat)) return fail(g, LANES_EINVAL, "'pattern' must be a string");
	if (!pat) return 0;
	// the pattern alone first: one this compiler cannot read is refused, or relaxed to the rest
	x->p = json_string_value(pat), x->pn = json_string_length(pat);
	if (!pattern_body(g, x->p, x->pn, &x->pg)) return 0;
	sb_free(g, &x->pg);
	x->p = NULL;
	if (!g->relax || g->rc != LANES_EINVAL) {
		if (g->rc == LANES_EINVAL) g->why = "pattern";
		return g->rc;
	}
	recover(g);
	note(g, "pattern");
	return 0;
}

// The automaton of x's strings in *a (parts: how many of pattern, format, lengths it holds;
// none: any string, a left empty). Relaxed, parts that are together too large are dropped and
// named down to the pattern or the format alone.
static int str_auto(sg *g, strspec *x, nfa *a, int *parts) {
	bool lens = x->m > 0 || x->n >= 0;
	*parts = (x->p != NULL) + (x->f >= 0) + lens;
	if (!*parts) return NFA_OK;
	int rc = str_nfa(g, x->p, x->pn, x->f, x->m, x->n, a);
	if (rc == NFA_OK || g->rc || !g->relax || *parts == 1) return g->rc ? g->rc : rc;
	nfa_free(a);
	if (lens) note(g, x->m ? "minLength" : "maxLength"), x->m = 0, x->n = -1;
	if (x->p && x->f >= 0) note(g, "format"), x->f = -1;
	*parts = 1;
	rc = str_nfa(g, x->p, x->pn, x->f, 0, -1, a);
	return g->rc ? g->rc : rc;
}

static int gen_str(sg *g, const json_t *s, const char *hint, sb *out) {
	strspec x;
	if (str_spec(g, s, &x)) return g->rc;
	bool lens = x.m > 0 || x.n >= 0;
	int parts = (x.p != NULL) + (x.f >= 0) + lens;
	if (parts > 1) {
		// all must hold: their automata's product, else (relaxed) the pattern or the format alone
		nfa a = {0};
		int rc = str_nfa(g, x.p, x.pn, x.f, x.m, x.n, &a);
		sb body = {0};
		if (!rc) {
			char h[SG_MAX_NAME + 8];
			snprintf(h, sizeof h, "%.*s-text", SG_MAX_NAME, hint);
			rc = nfa_emit(g, &a, h, &body);
		}
		nfa_free(&a);
		if (!rc) {
			sb_free(g, &x.pg);
			sb_put(g, out, Q " ");
			if (body.n) sb_add(g, out, body.p, body.n), sb_put(g, out, " ");
			sb_free(g, &body);
			sb_put(g, out, Q " ");
			return helper(g, out, H_WS);
		}
		sb_free(g, &body);
		if (g->rc) return sb_free(g, &x.pg), g->rc;
		const char *what = x.p && x.f >= 0 ? "'pattern' and 'format'"
			: x.p				 ? "'pattern' and 'minLength'/'maxLength'"
							 : "'format' and 'minLength'/'maxLength'";
		if (!g->relax) {
			sb_free(g, &x.pg);
			if (rc == NFA_EMPTY) return fail(g, LANES_EINVAL, "no string satisfies both %s", what);
			if (g->nfa_work > SG_NFA_WORK)
				return unsupported(g, x.p ? "pattern" : "format", "%s: the schema's patterns, formats and lengths together are too large to check", what);
			return unsupported(g, x.p ? "pattern" : "format", "%s together are too large to check at once", what);
		}
		if (lens) note(g, x.m ? "minLength" : "maxLength"), lens = false;
		if (x.p && x.f >= 0) note(g, "format"), x.f = -1;
	}
	if (x.p) {
		sb_put(g, out, Q " ");
		sb_add(g, out, x.pg.p ? x.pg.p : "", x.pg.n);
		sb_free(g, &x.pg);
	} else if (x.f >= 0) {
		sb_put(g, out, Q " ");
		format_ref(g, x.f, out);
		sb_put(g, out, " ");
	} else if (!lens) return helper(g, out, H_STRING);
	else {
		sb_put(g, out, Q " ");
		if (x.n != 0) lengths(g, x.m, x.n, out);
	}
	sb_put(g, out, Q " ");
	return helper(g, out, H_WS);
}

// ---- $ref ---------------------------------------------------------------------------------
// The schema a local $ref names; NULL with the error set otherwise.
static const json_t *resolve(sg *g, const char *ref) {
	if (!strcmp(ref, "#")) return g->top;
	if (strncmp(ref, "#/$defs/", 8) && strncmp(ref, "#/definitions/", 14))
		return unsupported(g, "$ref", "unsupported $ref '%.200s' (only #, #/$defs/... and #/definitions/...)", ref), NULL;
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
			return unsupported(g, "$ref", "$ref '%.200s' recurses before any text is matched (left recursion)", ref);
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
	if (only_keys(g, s, K_CORE, e ? "enum" : "const")) return g->rc;
	// relaxed, the values alone: a node takes all of its keywords, so one alone is wider
	static const char *const others[] = {"anyOf", "oneOf", "allOf", "$ref"};
	for (int i = 0; i < 4; i++) {
		if (!json_object_get(s, others[i])) continue;
		if (!g->relax) return unsupported(g, others[i], "unsupported keyword '%s' beside '%s'", others[i], e ? "enum" : "const");
		note(g, others[i]);
	}
	int types = json_object_get(s, "type") ? types_of(g, s) : T_ALL;
	if (g->rc) return g->rc;
	if (e && (!json_is_array(e) || !json_array_size(e))) return fail(g, LANES_EINVAL, "'enum' must be a non-empty array");
	if (e && json_array_size(e) > SG_MAX_ENUM) return fail(g, LANES_ELIMIT, "'enum' has more than %d values", SG_MAX_ENUM);
	size_t n = e ? json_array_size(e) : 1, kept = 0;
	sb body = {0};
	for (size_t i = 0; i < n && !g->rc; i++) {
		const json_t *v = e ? json_array_get(e, i) : c;
		// both given: the values of enum equal to const
		if (!value_fits(v, types) || (e && c && !json_equal((json_t *)v, (json_t *)c))) continue;
		if (kept++) sb_put(g, &body, " | ");
		json_literal(g, &body, v, 0);
	}
	if (!g->rc && !kept) fail(g, LANES_EINVAL, "no value of '%s' has the schema's type%s", e ? "enum" : "const", e && c ? " and equals 'const'" : "");
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
				unsupported(g, "oneOf", "unsupported keyword 'oneOf': alternatives %zu and %zu may both match (anyOf would fit)", i, j);
		}
	free(k);
	return g->rc;
}

static int gen_union(sg *g, const json_t *s, const char *hint, const char *name, sb *out) {
	const char *kw = json_object_get(s, "anyOf") ? "anyOf" : "oneOf";
	const json_t *a = json_object_get(s, kw);
	// relaxed, the other keywords are dropped (a node takes all of them: any one alone is wider)
	if (json_object_get(s, "anyOf") && json_object_get(s, "oneOf") && !g->relax)
		return unsupported(g, "oneOf", "unsupported keyword 'oneOf' beside 'anyOf'");
	if (only_keys(g, s, 0, kw)) return g->rc;
	if (!json_is_array(a) || !json_array_size(a)) return fail(g, LANES_EINVAL, "'%s' must be a non-empty array", kw);
	if (json_array_size(a) > SG_MAX_ENUM) return fail(g, LANES_ELIMIT, "'%s' has more than %d schemas", kw, SG_MAX_ENUM);
	if (!strcmp(kw, "oneOf") && one_of_apart(g, a)) {
		// relaxed: alternatives that may overlap are taken as anyOf, which is wider
		if (!g->relax || g->rc != LANES_EINVAL || !g->why) return g->rc;
		note(g, g->why);
		recover(g);
	}
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

// Adds the properties of object schema o to ps.
static int collect(sg *g, const json_t *o, props *ps) {
	const json_t *p = json_object_get(o, "properties");
	if (p && !json_is_object(p)) return fail(g, LANES_EINVAL, "'properties' must be an object");
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
	return 0;
}

// Marks the names o requires in ps, once every source of properties is in. A name no properties
// declare is declared with extra's schema (any value without one), as the spec reads.
static int collect_required(sg *g, const json_t *o, const json_t *extra, props *ps) {
	const json_t *req = json_object_get(o, "required");
	if (req && !json_is_array(req)) return fail(g, LANES_EINVAL, "'required' must be an array of strings");
	size_t i;
	json_t *v;
	json_array_foreach(req, i, v) {
		if (!json_is_string(v)) return fail(g, LANES_EINVAL, "'required' must be an array of strings");
		size_t k = 0;
		while (k < ps->n && strcmp(ps->v[k].key, json_string_value(v))) k++;
		// a name no properties declare takes additionalProperties' schema, as the spec reads (zod 4's
		// enum-keyed records); only where extra keys are barred can it not be had
		const bool open = !extra || json_is_object(extra) || json_is_true(extra);
		if (k == ps->n && !g->relax && !open)
			return unsupported(g, "required", "required property '%.100s' is not in properties, and additionalProperties bars it", json_string_value(v));
		if (k == ps->n) {
			if (ps->n >= SG_MAX_PROPS) return fail(g, LANES_ELIMIT, "an object has more than %d properties", SG_MAX_PROPS);
			// additionalProperties false leaves no value it may take: the key is let in anyway
			if (!open) note(g, "required");
			prop *x = &ps->v[ps->n++];
			*x = (prop){.key = json_string_value(v), .schema = json_is_object(extra) ? extra : json_true()};
			size_t old = ptr_push(g, "required");
			ptr_index(g, i);
			memcpy(x->where, g->ptr, sizeof x->where);
			ptr_pop(g, old);
		}
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

// The trie of ps's keys, a node per character (malloc'd, *nt nodes); NULL with g failed.
static tnode *key_trie(sg *g, const props *ps, int *nt) {
	size_t total = 1;
	for (size_t i = 0; i < ps->n; i++) {
		// the trie's rules nest one level per character
		if (strlen(ps->v[i].key) > 256)
			return fail(g, LANES_ELIMIT, "a property name longer than 256 bytes beside additionalProperties"), NULL;
		total += strlen(ps->v[i].key);
	}
	tnode *t = malloc(total * sizeof *t);
	if (!t) return fail(g, LANES_ENOMEM, "out of memory"), NULL;
	*nt = 1;
	t[0] = (tnode){0, -1, -1, false};
	for (size_t i = 0; i < ps->n; i++) {
		rx r = {ps->v[i].key, ps->v[i].key + strlen(ps->v[i].key), 0};
		int at = 0;
		while (r.p < r.end) {
			uint32_t cp = rx_cp(&r);
			int c = t[at].child;
			while (c >= 0 && t[c].cp != cp) c = t[c].next;
			if (c < 0) {
				c = (*nt)++;
				t[c] = (tnode){cp, -1, t[at].child, false};
				t[at].child = c;
			}
			at = c;
		}
		t[at].term = true;
	}
	return t;
}

static int other_key(sg *g, const props *ps, const char *hint, sb *out) {
	if (!ps->n) return helper(g, out, H_STRING), sb_put(g, out, " \":\" "), helper(g, out, H_WS);
	int nt = 0;
	tnode *t = key_trie(g, ps, &nt);
	if (!t) return g->rc;
	char h[SG_MAX_NAME + 8];
	snprintf(h, sizeof h, "%.*s-key", SG_MAX_NAME, hint);
	sb_put(g, out, Q " ");
	trie_rule(g, t, 0, h, out);
	sb_put(g, out, " " Q " \":\" ");
	helper(g, out, H_WS);
	free(t);
	return g->rc;
}

// ---- propertyNames -----------------------------------------------------------------------
// The names an object's keys may have.
typedef struct {
	bool any;           // no constraint
	bool none;          // no name at all (propertyNames false, or a type without string)
	json_t *vals;       // enum/const: the strings allowed (owned), else NULL
	const json_t *text; // pattern/format/lengths: the schema the names follow
	strspec x;          // its string keywords
	nfa a;              // their automaton (a.ns 0: not built yet)
	int parts;
} keyset;

static void keyset_free(sg *g, keyset *k) {
	json_decref(k->vals);
	sb_free(g, &k->x.pg);
	nfa_free(&k->a);
}

// Reads propertyNames (pn, NULL absent) into k.
static int key_rules(sg *g, const json_t *pn, keyset *k) {
	*k = (keyset){.any = !pn || json_is_true(pn), .none = json_is_false(pn)};
	if (k->any || k->none) return 0;
	if (!json_is_object(pn)) return fail(g, LANES_EINVAL, "'propertyNames' must be a schema");
	size_t old = ptr_push(g, "propertyNames");
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)pn, key, v) {
		int kk = key_kind(key);
		if (kk == K_ANNOT || kk == K_STR || !strcmp(key, "type") || !strcmp(key, "enum") || !strcmp(key, "const")) continue;
		// relaxed: a keyword dropped from the names' schema only lets more names in
		if (g->relax) note(g, key);
		else unsupported(g, "propertyNames", "unsupported keyword '%s' in propertyNames", key);
	}
	int types = json_object_get(pn, "type") && !g->rc ? types_of(g, pn) : T_STR;
	const json_t *e = json_object_get(pn, "enum"), *c = json_object_get(pn, "const");
	if (!g->rc && e && !json_is_array(e)) fail(g, LANES_EINVAL, "'enum' must be a non-empty array");
	if (!g->rc && !(types & T_STR)) k->none = true;
	else if (!g->rc && (e || c)) {
		// the strings among the values (and equal to const when both are given)
		if (!(k->vals = json_array())) fail(g, LANES_ENOMEM, "out of memory");
		size_t n = e ? json_array_size(e) : 1;
		for (size_t i = 0; i < n && !g->rc; i++) {
			const json_t *x = e ? json_array_get(e, i) : c;
			if (json_is_string(x) && (!e || !c || json_equal((json_t *)x, (json_t *)c))) json_array_append((json_t *)k->vals, (json_t *)x);
		}
		k->none = !json_array_size(k->vals);
	} else if (!g->rc && !str_spec(g, pn, &k->x)) {
		k->any = !k->x.p && k->x.f < 0 && !k->x.m && k->x.n < 0;
		k->text = pn;
	}
	ptr_pop(g, old);
	return g->rc;
}

// Whether the automaton (built, without empty moves) takes text.
static bool nfa_takes(sg *g, const nfa *a, const char *text) {
	uint8_t *cur = calloc((size_t)a->ns, 1), *next = calloc((size_t)a->ns, 1);
	bool alive = cur && next;
	if (alive) cur[a->start] = 1;
	rx r = {text, text + strlen(text), 0};
	while (alive && r.p < r.end) {
		uint32_t c = rx_cp(&r);
		memset(next, 0, (size_t)a->ns);
		alive = false;
		for (int32_t s = 0; s < a->ns; s++) {
			if (!cur[s]) continue;
			g->nfa_work += a->first[s + 1] - a->first[s];
			for (int32_t k = a->first[s]; k < a->first[s + 1]; k++)
				if (c >= a->e[k].lo && c <= a->e[k].hi) next[a->e[k].to] = 1, alive = true;
		}
		uint8_t *t = cur;
		cur = next, next = t;
	}
	bool ok = false;
	for (int32_t s = 0; alive && s < a->ns && !ok; s++) ok = cur[s] && a->acc[s];
	free(cur), free(next);
	return ok;
}

// Whether k lets key in: 1 yes, 0 no, NFA_BIG when its automaton is too large to tell.
static int key_ok(sg *g, keyset *k, const char *key) {
	if (k->any) return 1;
	if (k->none) return 0;
	if (k->vals) {
		size_t i;
		json_t *v;
		json_array_foreach(k->vals, i, v) if (!strcmp(json_string_value(v), key)) return 1;
		return 0;
	}
	if (!k->a.ns) {
		int rc = str_auto(g, &k->x, &k->a, &k->parts);
		if (rc) return rc;
	}
	return nfa_takes(g, &k->a, key);
}

// The automaton of the names no declared property has (none of ps's keys), for extra keys.
static int other_names(sg *g, const props *ps, nfa *a) {
	int nt = 0;
	tnode *t = key_trie(g, ps, &nt);
	if (!t) return g->rc;
	// trie node i is state i; a character no child takes leaves for the sink, which takes all
	int rc = NFA_OK;
	for (int i = 0; i <= nt && !rc; i++)
		if (nfa_state(g, a) < 0) rc = NFA_BIG;
	for (int i = 0; i < nt && !rc; i++) {
		a->acc[i] = !t[i].term;
		cset kids = {0};
		for (int c = t[i].child; c >= 0 && !rc; c = t[c].next) {
			cs_add(g, &kids, t[c].cp, t[c].cp);
			if (!nfa_edge(g, a, i, c, t[c].cp, t[c].cp)) rc = NFA_BIG;
		}
		cs_norm(&kids);
		cs_invert(g, &kids);
		if (!rc && !g->rc && !nfa_class(g, a, i, nt, &kids)) rc = NFA_BIG;
		free(kids.v);
	}
	if (!rc && !g->rc) a->acc[nt] = 1, rc = nfa_class(g, a, nt, nt, &any_cp) ? NFA_OK : NFA_BIG;
	a->start = 0;
	free(t);
	if (!rc && !g->rc) nfa_seal(g, a);
	return g->rc ? g->rc : rc;
}

// Appends the text of an extra key and its colon when k constrains the names.
static int key_text(sg *g, keyset *k, const props *ps, const char *hint, sb *out) {
	if (k->vals) {
		// the allowed names no declared property has
		int n = 0;
		sb alts = {0};
		size_t i;
		json_t *v;
		json_array_foreach(k->vals, i, v) {
			bool taken = false;
			for (size_t j = 0; j < ps->n && !taken; j++) taken = !strcmp(ps->v[j].key, json_string_value(v));
			if (taken) continue;
			if (n++) sb_put(g, &alts, " | ");
			json_literal(g, &alts, v, 0);
		}
		if (n > 1) sb_put(g, out, "( ");
		sb_add(g, out, alts.p ? alts.p : "", alts.n);
		if (n > 1) sb_put(g, out, " )");
		sb_free(g, &alts);
		if (!n) return NFA_EMPTY;
	} else if (!ps->n) {
		gen_str(g, k->text, hint, out);
	} else {
		// the names' automaton against the declared names
		nfa other = {0}, both = {0};
		int rc = key_ok(g, k, "") < 0 ? NFA_BIG : NFA_OK;
		if (!rc) rc = other_names(g, ps, &other);
		if (!rc) rc = nfa_product(g, &k->a, &other, &both);
		sb body = {0};
		char h[SG_MAX_NAME + 8];
		snprintf(h, sizeof h, "%.*s-key", SG_MAX_NAME, hint);
		if (!rc) rc = nfa_emit(g, &both, h, &body);
		nfa_free(&other), nfa_free(&both);
		if (!rc) sb_put(g, out, Q " "), sb_add(g, out, body.p ? body.p : "", body.n), sb_put(g, out, " " Q " "), helper(g, out, H_WS);
		sb_free(g, &body);
		if (rc && !g->rc) return rc;
	}
	sb_put(g, out, " \":\" ");
	return helper(g, out, H_WS);
}

// dependentRequired: a dependent of a property that may appear becomes required (so every
// document is valid, a few fewer of them); a dependent the object cannot have takes the
// property out. Until nothing changes, as dependents have dependents.
static int dependent_required(sg *g, const json_t *s, props *ps, const json_t *extra, keyset *ks) {
	const json_t *dr = json_object_get(s, "dependentRequired");
	if (!dr) return 0;
	if (!json_is_object(dr)) return fail(g, LANES_EINVAL, "'dependentRequired' must be an object of arrays of names");
	bool changed = true;
	for (size_t pass = 0; changed && pass <= ps->n + 1 && !g->rc; pass++) {
		changed = false;
		const char *a;
		json_t *list;
		json_object_foreach((json_t *)dr, a, list) {
			if (!json_is_array(list)) return fail(g, LANES_EINVAL, "'dependentRequired' must be an object of arrays of names");
			size_t ia = 0;
			while (ia < ps->n && strcmp(ps->v[ia].key, a)) ia++;
			if (ia < ps->n && json_is_false(ps->v[ia].schema)) continue;
			if (ia == ps->n) {
				// a name only extra keys may have: declared, with their schema, to be told apart
				if (!extra || !json_array_size(list) || key_ok(g, ks, a) != 1) continue;
				if (ps->n >= SG_MAX_PROPS) return fail(g, LANES_ELIMIT, "an object has more than %d properties", SG_MAX_PROPS);
				prop *x = &ps->v[ps->n++];
				*x = (prop){.key = a, .schema = json_is_object(extra) ? extra : json_true()};
				memcpy(x->where, g->ptr, sizeof x->where);
				changed = true;
			}
			size_t k;
			json_t *b;
			json_array_foreach(list, k, b) {
				if (!json_is_string(b)) return fail(g, LANES_EINVAL, "'dependentRequired' must be an object of arrays of names");
				const char *bn = json_string_value(b);
				size_t ib = 0;
				while (ib < ps->n && strcmp(ps->v[ib].key, bn)) ib++;
				if (ib < ps->n && !json_is_false(ps->v[ib].schema)) {
					changed |= !ps->v[ib].required;
					ps->v[ib].required = true;
					continue;
				}
				if (ib == ps->n && extra && key_ok(g, ks, bn) == 1) {
					// a name extra keys may have: declared, with their schema
					if (ps->n >= SG_MAX_PROPS) return fail(g, LANES_ELIMIT, "an object has more than %d properties", SG_MAX_PROPS);
					prop *x = &ps->v[ps->n++];
					*x = (prop){.key = bn, .schema = json_is_object(extra) ? extra : json_true(), .required = true};
					memcpy(x->where, g->ptr, sizeof x->where);
					changed = true;
					continue;
				}
				if (ps->v[ia].required)
					return fail(g, LANES_EINVAL, "required property '%.100s' needs '%.100s', which the object cannot have", a, bn);
				ps->v[ia].schema = json_false();
				changed = true;
				break;
			}
		}
	}
	return g->rc;
}

static int gen_obj(sg *g, const json_t *s, const char *hint, const char *name, sb *out) {
	const json_t *all = json_object_get(s, "allOf"), *ap = json_object_get(s, "additionalProperties");
	props ps = {calloc(SG_MAX_PROPS, sizeof(prop)), 0};
	if (!ps.v) return fail(g, LANES_ENOMEM, "out of memory");
	// the schemas whose properties merge: s, then its allOf members
	size_t nsrc = 1;
	const json_t **src = calloc(1 + (json_is_array(all) ? json_array_size(all) : 0), sizeof *src);
	if (!src) return free(ps.v), fail(g, LANES_ENOMEM, "out of memory");
	src[0] = s;
	collect(g, s, &ps);
	if (all && !g->rc) {
		if (!json_is_array(all) || !json_array_size(all)) fail(g, LANES_EINVAL, "'allOf' must be a non-empty array");
		else if (json_array_size(all) > SG_MAX_ENUM) fail(g, LANES_ELIMIT, "'allOf' has more than %d schemas", SG_MAX_ENUM);
		// the spec applies it to s's own properties alone; relaxed, to the merged ones, as meant
		if (ap && !g->relax) unsupported(g, "additionalProperties", "unsupported keyword 'additionalProperties' beside 'allOf'");
		else if (ap) note(g, "additionalProperties");
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
				unsupported(g, "allOf", "unsupported allOf member: only object schemas merge");
			else {
				const char *key;
				json_t *v;
				json_object_foreach((json_t *)x, key, v) {
					int kk = key_kind(key);
					if (kk != K_ANNOT && strcmp(key, "type") && strcmp(key, "properties") && strcmp(key, "required")) {
						// relaxed: the member's other keywords are dropped, which only widens it
						if (g->relax) {
							note(g, key);
							continue;
						}
						unsupported(g, key, "unsupported keyword '%s' in an allOf member", key);
						break;
					}
				}
				collect(g, x, &ps);
				src[nsrc++] = x;
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
	for (size_t i = 0; i < nsrc && !g->rc; i++) collect_required(g, src[i], ap ? ap : extra, &ps);
	free(src);
	keyset ks = {0};
	int64_t minp = 0, maxp = -1;
	if (!g->rc) key_rules(g, json_object_get(s, "propertyNames"), &ks);
	if (!g->rc) count_of(g, s, "minProperties", SG_MAX_REPEAT, &minp), count_of(g, s, "maxProperties", -1, &maxp);
	// names propertyNames refuses: an optional property is left out, a required one leaves no object
	for (size_t i = 0; i < ps.n && !g->rc; i++) {
		if (json_is_false(ps.v[i].schema)) continue;
		int ok = key_ok(g, &ks, ps.v[i].key);
		if (ok < 0 && !g->rc) {
			if (!g->relax) {
				unsupported(g, "propertyNames", "'propertyNames' is too large to check the property names against");
				break;
			}
			note(g, "propertyNames");
			keyset_free(g, &ks);
			ks = (keyset){.any = true};
		} else if (!ok && ps.v[i].required) fail(g, LANES_EINVAL, "required property '%.100s' is not a name 'propertyNames' allows", ps.v[i].key);
		else if (!ok) ps.v[i].schema = json_false();
	}
	if (ks.none) extra = NULL;
	// a few names allowed (an enum-keyed record): each an optional property with extra's schema,
	// so no key repeats and the object ends
	size_t nvals = extra && ks.vals ? json_array_size(ks.vals) : 0;
	if (nvals && nvals <= 64 && ps.n + nvals <= SG_MAX_PROPS && !g->rc) {
		size_t old = ptr_push(g, "propertyNames");
		for (size_t i = 0; i < nvals; i++) {
			const char *k = json_string_value(json_array_get(ks.vals, i));
			size_t j = 0;
			while (j < ps.n && strcmp(ps.v[j].key, k)) j++;
			if (j < ps.n) continue;
			prop *x = &ps.v[ps.n++];
			*x = (prop){.key = k, .schema = json_is_object(extra) ? extra : json_true()};
			memcpy(x->where, g->ptr, sizeof x->where);
		}
		ptr_pop(g, old);
		extra = NULL;
	}
	if (!g->rc) dependent_required(g, s, &ps, extra, &ks);
	bool counted = minp > 0 || maxp >= 0;
	if (!g->rc && !ps.n && json_is_true(extra) && ks.any && !counted) return keyset_free(g, &ks), free(ps.v), helper(g, out, H_OBJECT);
	// the extra keys' names first: there may be none left
	sb ktext = {0};
	if (extra && !g->rc && !ks.any) {
		int krc = key_text(g, &ks, &ps, hint, &ktext);
		if (krc == NFA_EMPTY) extra = NULL;
		else if (krc == NFA_BIG && !g->relax) unsupported(g, "propertyNames", "'propertyNames' is too large to check beside the declared properties");
		else if (krc == NFA_BIG) note(g, "propertyNames"), sb_free(g, &ktext), other_key(g, &ps, hint, &ktext);
	} else if (extra && !g->rc) other_key(g, &ps, hint, &ktext);
	keyset_free(g, &ks);
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
		json_t *kj = json_string(ps.v[i].key);
		char *key = kj ? json_dumps(kj, JSON_ENCODE_ANY) : NULL;
		json_decref(kj);
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
	// how many keys: the extra ones counted (all declared ones required), or an object not empty
	size_t nreq = 0;
	for (size_t i = 0; i < nk; i++) nreq += req[i];
	int64_t xlo = 0, xhi = -1, most = extra ? -1 : (int64_t)nk;
	bool nonempty = false;
	if (counted && !g->rc && !(minp <= (int64_t)nreq && (maxp < 0 || (most >= 0 && maxp >= most)))) {
		const char *kw = minp > (int64_t)nreq ? "minProperties" : "maxProperties";
		if (nreq == nk && extra) {
			xlo = minp > (int64_t)nreq ? minp - (int64_t)nreq : 0, xhi = maxp < 0 ? -1 : maxp - (int64_t)nreq;
			if (xhi > SG_MAX_REPEAT) xhi = -1; // past the grammar's bound: as good as none
			if (xhi >= 0 && xhi < xlo) fail(g, LANES_EINVAL, "no object has between minProperties and maxProperties properties");
		} else if (nreq == nk) fail(g, LANES_EINVAL, "no object has between minProperties and maxProperties properties");
		else if (!nreq && minp == 1 && (maxp < 0 || (most >= 0 && maxp >= most))) nonempty = true;
		else if (!g->relax)
			unsupported(g, kw, "unsupported keyword '%s' beside optional properties (only counts of additional ones, or an object not empty)", kw);
		else note(g, kw);
	}
	if (xhi == 0) extra = NULL;
	if (extra && !g->rc) {
		sb *b = &kv[nk];
		*b = (sb){0};
		req[nk] = false;
		sb_add(g, b, ktext.p ? ktext.p : "", ktext.n);
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
			sb_put(g, &t, " )");
			repeat(g, &t, xlo, xhi);
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
		if (xhi != 1) {
			sb_put(g, &start, " ( \",\" ");
			helper(g, &start, H_WS);
			sb_put(g, &start, " ");
			sb_add(g, &start, kv[nk].p, kv[nk].n);
			sb_put(g, &start, " )");
			repeat(g, &start, xlo ? xlo - 1 : 0, xhi < 0 ? -1 : xhi - 1);
		}
	}
	if (nstart && !g->rc) {
		bool opt = r >= nk && !xlo && !nonempty;
		sb_put(g, &body, opt || nstart > 1 ? " ( " : " ");
		sb_add(g, &body, start.p, start.n);
		sb_put(g, &body, opt ? " )?" : nstart > 1 ? " )" : "");
	}
	sb_put(g, &body, " \"}\" ");
	helper(g, &body, H_WS);
	sb_free(g, &start);
	for (size_t i = 0; kv && i < nk + (extra != NULL); i++) sb_free(g, &kv[i]);
	sb_free(g, &ktext);
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
	const char *pre_kw = "prefixItems", *items_kw = "items";
	int64_t m = 0, n = -1;
	if (count_of(g, s, "minItems", SG_MAX_REPEAT, &m) || count_of(g, s, "maxItems", SG_MAX_REPEAT, &n)) return g->rc;
	if (n >= 0 && m > n) return fail(g, LANES_EINVAL, "minItems exceeds maxItems");
	// drafts before 2020-12: items as an array is the prefix, additionalItems the rest
	if (json_is_array(items)) {
		if (pre) return fail(g, LANES_EINVAL, "'items' as an array beside 'prefixItems'");
		pre = items, pre_kw = "items", items = json_object_get(s, "additionalItems"), items_kw = "additionalItems";
	} else if (pre && !items && json_object_get(s, "additionalItems"))
		items = json_object_get(s, "additionalItems"), items_kw = "additionalItems";
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
		size_t old = ptr_push(g, pre_kw);
		ptr_index(g, j);
		sb_put(g, &body, (int64_t)j >= m ? " ( " : " ");
		if ((int64_t)j >= m) open++;
		if (j) sb_put(g, &body, "\",\" "), helper(g, &body, H_WS), sb_put(g, &body, " ");
		gen(g, json_array_get(pre, j), ih, NULL, &body);
		ptr_pop(g, old);
	}
	if (rest && (n < 0 || n > (int64_t)k) && !g->rc) {
		size_t old = ptr_push(g, items_kw);
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
	case T_INT: return gen_int(g, s, hint, out);
	case T_NUM: return gen_num(g, s, hint, out);
	case T_STR: return gen_str(g, s, hint, out);
	case T_OBJ: return gen_obj(g, s, hint, name, out);
	default: return gen_arr(g, s, hint, name, out);
	}
}

static int gen_node(sg *g, const json_t *s, const char *hint, const char *name, sb *out) {
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
		else if (json_array_size(json_object_get(s, "allOf")) == 1 && alone(g, s, "allOf")) {
			// one member alone (as generators wrap a $ref to give it a default): that member
			size_t old = ptr_push(g, "allOf");
			ptr_push(g, "0");
			gen(g, json_array_get(json_object_get(s, "allOf"), 0), hint, nm, dst);
			ptr_pop(g, old);
		} else if (json_object_get(s, "allOf")) {
			types = json_object_get(s, "type") ? types_of(g, s) : T_OBJ;
			if (!g->rc && types != T_OBJ) unsupported(g, "allOf", "unsupported keyword 'allOf' beside a type other than object");
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

// What relaxed mode leaves of node s: its type (the type names it gives, and null when it is
// nullable), or any JSON value when it names none.
static int relaxed_node(sg *g, const json_t *s, sb *out) {
	const json_t *t = json_object_get(s, "type");
	int bits = json_is_string(t) ? type_bit(json_string_value(t)) : 0;
	size_t i;
	json_t *x;
	if (json_is_array(t)) json_array_foreach(t, i, x) bits |= json_is_string(x) ? type_bit(json_string_value(x)) : 0;
	if (bits && json_is_true(json_object_get(s, "nullable"))) bits |= T_NULL;
	if (bits & T_NUM) bits &= ~T_INT;
	if (!bits || bits == (T_ALL & ~T_INT)) return helper(g, out, H_VALUE);
	static const int hs[] = {H_NULL, H_BOOL, H_OBJECT, H_ARRAY, H_NUM, H_STRING, H_INT};
	int n = 0;
	for (int k = 0; k < 7; k++) n += (bits >> k) & 1;
	if (n > 1) sb_put(g, out, "( ");
	for (int k = 0, m = 0; k < 7; k++)
		if (bits >> k & 1) sb_put(g, out, m++ ? " | " : ""), helper(g, out, hs[k]);
	if (n > 1) sb_put(g, out, " )");
	return g->rc;
}

// One node. Relaxed, a node this compiler cannot check becomes relaxed_node, its keyword noted:
// the failure is caught at the innermost node, so every $ref target opened inside is finished.
static int gen(sg *g, const json_t *s, const char *hint, const char *name, sb *out) {
	if (g->rc || !g->relax) return gen_node(g, s, hint, name, out);
	sb mine = {0};
	char saved[sizeof g->ptr];
	size_t savedlen = g->ptrlen;
	memcpy(saved, g->ptr, sizeof saved);
	gen_node(g, s, hint, name, &mine);
	if (g->rc == LANES_EINVAL && g->why) {
		const char *why = g->why;
		recover(g);
		memcpy(g->ptr, saved, sizeof saved), g->ptrlen = savedlen;
		sb_free(g, &mine);
		note(g, why);
		relaxed_node(g, s, &mine);
	}
	if (!g->rc) sb_add(g, out, mine.p ? mine.p : "", mine.n);
	sb_free(g, &mine);
	return g->rc;
}

static void sg_free(sg *g) {
	free(g->out.p);
	for (int i = 0; i < 16; i++) free(g->fmt_rule[i]);
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

static int schema_gbnf(const json_t *schema, const char *root, char **out, bool relax, char *relaxed, size_t relaxedlen,
		       char *err, size_t errlen) {
	if (relaxed && relaxedlen) relaxed[0] = 0;
	if (!out) return base_seterr(err, errlen, LANES_EINVAL, "no output pointer");
	*out = NULL;
	if (!schema) return base_seterr(err, errlen, LANES_EINVAL, "no schema");
	size_t rn = root ? strlen(root) : 0;
	bool ok = rn > 0 && rn <= 64;
	for (size_t i = 0; i < rn; i++)
		ok &= (root[i] >= 'a' && root[i] <= 'z') || (root[i] >= 'A' && root[i] <= 'Z') || (root[i] >= '0' && root[i] <= '9') || root[i] == '-';
	if (!ok) return base_seterr(err, errlen, LANES_EINVAL, "root rule name must be 1 to 64 letters, digits or '-'");
	sg g = {.top = schema, .root = root, .err = err, .errlen = errlen, .ptr = "", .relax = relax, .relaxed = relaxed,
		.relaxedlen = relaxedlen};
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
		if (relaxed && relaxedlen) relaxed[0] = 0;
		return rc;
	}
	*out = g.out.p;
	g.out.p = NULL;
	sg_free(&g);
	return 0;
}

int grammar_schema_gbnf(const json_t *schema, const char *root, char **out, char *err, size_t errlen) {
	return schema_gbnf(schema, root, out, false, NULL, 0, err, errlen);
}

int grammar_schema_gbnf_relaxed(const json_t *schema, const char *root, char **out, char *relaxed, size_t relaxedlen,
				char *err, size_t errlen) {
	return schema_gbnf(schema, root, out, true, relaxed, relaxedlen, err, errlen);
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
