// grammar: the GBNF compiler (text → rules of byte-set and rule-reference elements, UTF-8
// classes split into byte sequences, reachable states explored for ambiguity) and the matcher:
// a lazily built DFA over interned stacks, a walk of the vocabulary trie per state for masks,
// and lazy trigger matching.
#include "grammar/grammar.h"

#include "base/base.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- compiled grammar ---------------------------------------------------------------------
// An element is kind | arg << 2: END closes an alternative, TERM matches one byte of set arg,
// REF expands rule arg.
enum { EL_END = 0, EL_TERM = 1, EL_REF = 2 };
#define EL_KIND(e) ((e) & 3u)
#define EL_ARG(e) ((int32_t)((e) >> 2))
#define EL(k, a) ((uint32_t)(k) | ((uint32_t)(a) << 2))

struct grammar {
	atomic_int refs;
	uint32_t *elem;     // (n_elem) every rule's alternatives, each closed by END
	int32_t n_elem;
	int32_t *alt_first; // (n_rules + 1) rule r's alternatives are alt_start[alt_first[r]..alt_first[r+1])
	int32_t *alt_start; // (n_alts) position of an alternative's first element
	int32_t n_rules, n_alts;
	uint64_t (*sets)[4]; // (n_sets) 256-bit byte sets
	int32_t n_sets;
	int32_t root;
	grammar_limits lim;
};

void grammar_default_limits(grammar_limits *l) {
	l->max_text = 1u << 20;
	l->max_rules = 65536;
	l->max_elements = 4 << 20;
	l->max_depth = 64;
	l->max_repeat = 1000;
	l->max_stacks = 4096;
	l->max_explore = 1 << 20;
}

// ---- parser -------------------------------------------------------------------------------
typedef struct {
	uint32_t *v;
	int32_t n, cap;
} ivec;

typedef struct {
	const char *name; // NULL for rules groups and repetitions expand into
	size_t name_len;
	int32_t owner;    // the user rule this one was written in (for messages)
	bool defined;
	size_t ref_at, def_at; // text offsets of the first reference and of the definition
	ivec body;
} prule;

typedef struct {
	const char *s;
	size_t n, p;
	grammar_limits lim;
	prule *rules;
	int32_t n_rules, cap_rules;
	int64_t n_elem;
	int32_t *ht; // name → rule, open addressing, -1 empty
	uint32_t ht_cap;
	uint64_t (*sets)[4];
	int32_t n_sets, cap_sets;
	int32_t *set_ht;
	uint32_t set_ht_cap;
	int32_t owner, depth, any_rule;
	int rc;
	char *err;
	size_t errlen;
} parser;

static void pos_of(const char *s, size_t at, int *line, int *col) {
	int l = 1, c = 1;
	for (size_t i = 0; i < at; i++) {
		if (s[i] == '\n') l++, c = 1;
		else c++;
	}
	*line = l, *col = c;
}

__attribute__((format(printf, 4, 5))) static bool perr(parser *P, int rc, size_t at, const char *fmt, ...) {
	if (P->rc) return false;
	P->rc = rc;
	int line, col;
	pos_of(P->s, at < P->n ? at : P->n, &line, &col);
	int k = snprintf(P->err, P->errlen, "line %d, column %d: ", line, col);
	if (k < 0) k = 0;
	if ((size_t)k < P->errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(P->err + k, P->errlen - (size_t)k, fmt, ap);
		va_end(ap);
	}
	return false;
}

static bool oom(parser *P) {
	if (!P->rc) {
		P->rc = LANES_ENOMEM;
		snprintf(P->err, P->errlen, "out of memory compiling the grammar");
	}
	return false;
}

static bool push(parser *P, ivec *v, uint32_t e) {
	if (++P->n_elem > P->lim.max_elements)
		return perr(P, LANES_ELIMIT, P->p, "the grammar expands to more than %lld elements",
			    (long long)P->lim.max_elements);
	if (v->n == v->cap) {
		int32_t cap = v->cap ? v->cap * 2 : 8;
		uint32_t *nv = realloc(v->v, (size_t)cap * sizeof *nv);
		if (!nv) return oom(P);
		v->v = nv, v->cap = cap;
	}
	v->v[v->n++] = e;
	return true;
}

static int32_t new_rule(parser *P, const char *name, size_t len) {
	if (P->n_rules >= P->lim.max_rules) {
		perr(P, LANES_ELIMIT, P->p, "the grammar expands to more than %d rules", (int)P->lim.max_rules);
		return -1;
	}
	if (P->n_rules == P->cap_rules) {
		int32_t cap = P->cap_rules ? P->cap_rules * 2 : 64;
		prule *nr = realloc(P->rules, (size_t)cap * sizeof *nr);
		if (!nr) return oom(P), -1;
		P->rules = nr, P->cap_rules = cap;
	}
	prule *r = &P->rules[P->n_rules];
	memset(r, 0, sizeof *r);
	r->name = name, r->name_len = len, r->owner = name ? P->n_rules : P->owner;
	return P->n_rules++;
}

static inline uint64_t mix64(uint64_t x) {
	x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static uint32_t hash_bytes(const void *p, size_t n) {
	const unsigned char *s = p;
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
	return h;
}

// Grows an open-addressing table of ids (-1 empty) to keep it under half full; hash gives an
// id's hash. false on OOM (the table is unchanged then).
typedef uint32_t (*id_hash_fn)(const void *ctx, int32_t id);
static bool idtab_reserve(int32_t **tab, uint32_t *cap, int32_t count, id_hash_fn hash, const void *ctx, uint32_t init) {
	if ((uint32_t)count * 2 < *cap) return true;
	uint32_t nc = *cap ? *cap * 2 : init;
	int32_t *nh = malloc(nc * sizeof *nh);
	if (!nh) return false;
	memset(nh, 0xff, nc * sizeof *nh);
	for (uint32_t i = 0; i < *cap; i++) {
		int32_t id = (*tab)[i];
		if (id < 0) continue;
		uint32_t h = hash(ctx, id) & (nc - 1);
		while (nh[h] >= 0) h = (h + 1) & (nc - 1);
		nh[h] = id;
	}
	free(*tab);
	*tab = nh, *cap = nc;
	return true;
}

static uint32_t hash_rule(const void *ctx, int32_t id) {
	const parser *P = ctx;
	return hash_bytes(P->rules[id].name, P->rules[id].name_len);
}

static uint32_t hash_bits(const uint64_t b[4]) { return (uint32_t)mix64(b[0] ^ mix64(b[1] ^ mix64(b[2] ^ mix64(b[3])))); }

static uint32_t hash_set(const void *ctx, int32_t id) { return hash_bits(((const parser *)ctx)->sets[id]); }

// The rule named s[0..len), created (undefined) on first sight; -1 on error.
static int32_t rule_named(parser *P, const char *s, size_t len) {
	if (!idtab_reserve(&P->ht, &P->ht_cap, P->n_rules, hash_rule, P, 256)) return oom(P), -1;
	uint32_t h = hash_bytes(s, len) & (P->ht_cap - 1);
	for (; P->ht[h] >= 0; h = (h + 1) & (P->ht_cap - 1)) {
		prule *r = &P->rules[P->ht[h]];
		if (r->name_len == len && !memcmp(r->name, s, len)) return P->ht[h];
	}
	int32_t r = new_rule(P, s, len);
	if (r >= 0) P->ht[h] = r;
	return r;
}

static int32_t set_id(parser *P, const uint64_t b[4]) {
	if (!idtab_reserve(&P->set_ht, &P->set_ht_cap, P->n_sets, hash_set, P, 256)) return oom(P), -1;
	uint32_t h = hash_bits(b) & (P->set_ht_cap - 1);
	for (; P->set_ht[h] >= 0; h = (h + 1) & (P->set_ht_cap - 1))
		if (!memcmp(P->sets[P->set_ht[h]], b, 32)) return P->set_ht[h];
	if (P->n_sets == P->cap_sets) {
		int32_t cap = P->cap_sets ? P->cap_sets * 2 : 64;
		void *ns = realloc(P->sets, (size_t)cap * sizeof *P->sets);
		if (!ns) return oom(P), -1;
		P->sets = ns, P->cap_sets = cap;
	}
	memcpy(P->sets[P->n_sets], b, 32);
	P->set_ht[h] = P->n_sets;
	return P->n_sets++;
}

static bool push_range(parser *P, ivec *v, unsigned lo, unsigned hi) {
	uint64_t b[4] = {0};
	for (unsigned w = 0; w < 4; w++) {
		unsigned a = lo > w * 64 ? lo : w * 64, z = hi < w * 64 + 63 ? hi : w * 64 + 63;
		if (a <= z) b[w] = (z - a == 63 ? ~0ull : (1ull << (z - a + 1)) - 1) << (a - w * 64);
	}
	int32_t id = set_id(P, b);
	return id >= 0 && push(P, v, EL(EL_TERM, id));
}

static int u8_encode(uint32_t c, unsigned char *o) {
	if (c < 0x80) return o[0] = (unsigned char)c, 1;
	if (c < 0x800) return o[0] = (unsigned char)(0xC0 | c >> 6), o[1] = (unsigned char)(0x80 | (c & 63)), 2;
	if (c < 0x10000) {
		o[0] = (unsigned char)(0xE0 | c >> 12), o[1] = (unsigned char)(0x80 | (c >> 6 & 63));
		o[2] = (unsigned char)(0x80 | (c & 63));
		return 3;
	}
	o[0] = (unsigned char)(0xF0 | c >> 18), o[1] = (unsigned char)(0x80 | (c >> 12 & 63));
	o[2] = (unsigned char)(0x80 | (c >> 6 & 63)), o[3] = (unsigned char)(0x80 | (c & 63));
	return 4;
}

// Appends alternatives (each closed by END) matching code points lo..hi, all of UTF-8 length n:
// split until every byte position ranges independently.
static bool u8_split(parser *P, ivec *body, uint32_t lo, uint32_t hi, int n) {
	for (int i = 1; i < n; i++) {
		uint32_t m = (1u << (6 * i)) - 1;
		if ((lo & ~m) != (hi & ~m)) {
			if (lo & m) return u8_split(P, body, lo, lo | m, n) && u8_split(P, body, (lo | m) + 1, hi, n);
			if ((hi & m) != m) return u8_split(P, body, lo, (hi & ~m) - 1, n) && u8_split(P, body, hi & ~m, hi, n);
		}
	}
	unsigned char a[4], b[4];
	u8_encode(lo, a), u8_encode(hi, b);
	for (int k = 0; k < n; k++)
		if (!push_range(P, body, a[k], b[k])) return false;
	return push(P, body, EL(EL_END, 0));
}

typedef struct {
	uint32_t lo, hi;
} cprange;

static int cmp_range(const void *a, const void *b) {
	const cprange *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

// Appends to seq the element for code point ranges r[0..n) (sorted and merged here).
static bool push_class(parser *P, ivec *seq, cprange *r, int32_t n, bool neg) {
	qsort(r, (size_t)n, sizeof *r, cmp_range);
	int32_t k = 0;
	for (int32_t i = 0; i < n; i++) {
		if (k && r[i].lo <= r[k - 1].hi + 1) {
			if (r[i].hi > r[k - 1].hi) r[k - 1].hi = r[i].hi;
		} else r[k++] = r[i];
	}
	n = k;
	if (neg) { // complement in place: at most n + 1 ranges, and r holds n + 1
		uint32_t next = 0;
		int32_t m = 0;
		for (int32_t i = 0; i < n; i++) {
			cprange c = r[i];
			if (c.lo > next) r[m++] = (cprange){next, c.lo - 1};
			next = c.hi + 1;
		}
		if (next <= 0x10FFFF) r[m++] = (cprange){next, 0x10FFFF};
		n = m;
	}
	uint64_t ascii[4] = {0};
	bool any_ascii = false, multi = false;
	for (int32_t i = 0; i < n; i++) {
		for (uint32_t c = r[i].lo; c <= r[i].hi && c < 0x80; c++) ascii[c >> 6] |= 1ull << (c & 63), any_ascii = true;
		if (r[i].hi >= 0x80) multi = true;
	}
	if (!multi && any_ascii) {
		int32_t id = set_id(P, ascii);
		return id >= 0 && push(P, seq, EL(EL_TERM, id));
	}
	int32_t g = new_rule(P, NULL, 0);
	if (g < 0) return false;
	ivec body = {0};
	bool ok = true;
	if (any_ascii) {
		int32_t id = set_id(P, ascii);
		ok = id >= 0 && push(P, &body, EL(EL_TERM, id)) && push(P, &body, EL(EL_END, 0));
	}
	static const uint32_t top[4] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
	for (int32_t i = 0; ok && i < n; i++)
		for (int len = 2; ok && len <= 4; len++) {
			uint32_t lo = r[i].lo > top[len - 2] + 1 ? r[i].lo : top[len - 2] + 1;
			uint32_t hi = r[i].hi < top[len - 1] ? r[i].hi : top[len - 1];
			if (lo <= hi) ok = u8_split(P, &body, lo, hi, len);
		}
	if (!ok) return free(body.v), false;
	P->rules[g].body = body; // no alternatives at all: a class that matches nothing
	return push(P, seq, EL(EL_REF, g));
}

static bool is_word(char c) {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

static size_t skip_all(const parser *P, size_t q) {
	while (q < P->n) {
		char c = P->s[q];
		if (c == ' ' || c == '\t' || c == '\r' || c == '\n') q++;
		else if (c == '#') while (q < P->n && P->s[q] != '\n') q++;
		else break;
	}
	return q;
}

static bool starts_rule(const parser *P, size_t q) {
	size_t q0 = q;
	while (q < P->n && is_word(P->s[q])) q++;
	if (q == q0) return false;
	while (q < P->n && (P->s[q] == ' ' || P->s[q] == '\t')) q++;
	return q + 3 <= P->n && !memcmp(P->s + q, "::=", 3);
}

// Outside groups a newline ends the rule when the next line starts a new `name ::=` (or the
// text ends); otherwise the rule goes on there.
static void space(parser *P, bool nested) {
	while (P->p < P->n) {
		char c = P->s[P->p];
		if (c == ' ' || c == '\t' || c == '\r') P->p++;
		else if (c == '#') while (P->p < P->n && P->s[P->p] != '\n') P->p++;
		else if (c == '\n') {
			if (nested) { P->p++; continue; }
			size_t q = skip_all(P, P->p);
			if (q >= P->n || starts_rule(P, q)) return;
			P->p = q;
		} else return;
	}
}

static int hexval(char c) {
	if (c >= '0' && c <= '9') return c - '0';
	if (c >= 'a' && c <= 'f') return c - 'a' + 10;
	if (c >= 'A' && c <= 'F') return c - 'A' + 10;
	return -1;
}

// One character of a literal or class at P->p (escape or UTF-8); -1 on error.
static int32_t read_char(parser *P) {
	size_t at = P->p;
	unsigned char c = (unsigned char)P->s[P->p++];
	if (c == '\\') {
		if (P->p >= P->n) return perr(P, LANES_EFORMAT, at, "unfinished escape"), -1;
		char e = P->s[P->p++];
		int nd = 0;
		switch (e) {
		case 'n': return '\n';
		case 't': return '\t';
		case 'r': return '\r';
		case '\\': case '"': case '[': case ']': case '-': case '^': return e;
		case 'x': nd = 2; break;
		case 'u': nd = 4; break;
		case 'U': nd = 8; break;
		default: return perr(P, LANES_EFORMAT, at, "unknown escape \\%c", e), -1;
		}
		uint32_t v = 0;
		for (int i = 0; i < nd; i++) {
			int h = P->p < P->n ? hexval(P->s[P->p]) : -1;
			if (h < 0) return perr(P, LANES_EFORMAT, at, "\\%c needs %d hex digits", e, nd), -1;
			v = v << 4 | (uint32_t)h, P->p++;
		}
		if (v > 0x10FFFF) return perr(P, LANES_EFORMAT, at, "code point U+%X is past U+10FFFF", v), -1;
		return (int32_t)v;
	}
	if (c < 0x80) return c;
	int n = c >= 0xF0 && c < 0xF8 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
	if (n < 0 || c >= 0xF8) return perr(P, LANES_EFORMAT, at, "invalid UTF-8"), -1;
	uint32_t v = c & (0x3F >> n);
	for (int i = 0; i < n; i++) {
		if (P->p >= P->n || ((unsigned char)P->s[P->p] & 0xC0) != 0x80)
			return perr(P, LANES_EFORMAT, at, "invalid UTF-8"), -1;
		v = v << 6 | ((unsigned char)P->s[P->p++] & 63);
	}
	if (v > 0x10FFFF) return perr(P, LANES_EFORMAT, at, "invalid UTF-8"), -1;
	return (int32_t)v;
}

static bool parse_literal(parser *P, ivec *seq) {
	size_t at = P->p++;
	while (P->p < P->n && P->s[P->p] != '"') {
		if (P->s[P->p] != '\\') { // raw bytes are their own UTF-8
			unsigned char c = (unsigned char)P->s[P->p++];
			if (!push_range(P, seq, c, c)) return false;
			continue;
		}
		int32_t c = read_char(P);
		if (c < 0) return false;
		unsigned char u[4];
		int k = u8_encode((uint32_t)c, u);
		for (int i = 0; i < k; i++)
			if (!push_range(P, seq, u[i], u[i])) return false;
	}
	if (P->p >= P->n) return perr(P, LANES_EFORMAT, at, "unterminated string");
	P->p++;
	return true;
}

static bool parse_class(parser *P, ivec *seq) {
	size_t at = P->p++;
	bool neg = P->p < P->n && P->s[P->p] == '^';
	if (neg) P->p++;
	cprange *r = NULL;
	int32_t n = 0, cap = 0;
	bool ok = true;
	while (ok) {
		if (P->p >= P->n) { ok = perr(P, LANES_EFORMAT, at, "unterminated character class"); break; }
		if (P->s[P->p] == ']') { P->p++; break; }
		size_t cat = P->p;
		int32_t lo = read_char(P), hi = lo;
		if (lo < 0) { ok = false; break; }
		if (P->p + 1 < P->n && P->s[P->p] == '-' && P->s[P->p + 1] != ']') {
			P->p++;
			hi = read_char(P);
			if (hi < 0) { ok = false; break; }
			if (hi < lo) { ok = perr(P, LANES_EFORMAT, cat, "range is reversed (U+%X > U+%X)", lo, hi); break; }
		}
		if (n + 1 >= cap) {
			cap = cap ? cap * 2 : 16;
			cprange *nr = realloc(r, (size_t)cap * sizeof *r);
			if (!nr) { ok = oom(P); break; }
			r = nr;
		}
		r[n++] = (cprange){(uint32_t)lo, (uint32_t)hi};
	}
	if (ok && !n) ok = perr(P, LANES_EFORMAT, at, "empty character class");
	if (ok) ok = push_class(P, seq, r, n, neg);
	free(r);
	return ok;
}

// Replaces seq[last..) (one element after wrapping) with x repeated min..max times (max -1: unbounded).
static bool repeat(parser *P, ivec *seq, int32_t last, int32_t min, int32_t max) {
	if (seq->n == last) return true; // nothing to repeat: an empty literal or {0}
	if (seq->n - last > 1) {
		int32_t g = new_rule(P, NULL, 0);
		if (g < 0) return false;
		ivec body = {0};
		for (int32_t i = last; i < seq->n; i++)
			if (!push(P, &body, seq->v[i])) return free(body.v), false;
		if (!push(P, &body, EL(EL_END, 0))) return free(body.v), false;
		P->rules[g].body = body;
		seq->n = last;
		if (!push(P, seq, EL(EL_REF, g))) return false;
	}
	uint32_t x = seq->v[last];
	seq->n = last;
	for (int32_t i = 0; i < min; i++)
		if (!push(P, seq, x)) return false;
	int32_t k = max < 0 ? 1 : max - min, prev = -1;
	for (int32_t i = 0; i < k; i++) { // innermost first: O ::= x O' | ""
		int32_t g = new_rule(P, NULL, 0);
		if (g < 0) return false;
		ivec body = {0};
		bool ok = push(P, &body, x);
		if (ok && max < 0) ok = push(P, &body, EL(EL_REF, g));
		else if (ok && prev >= 0) ok = push(P, &body, EL(EL_REF, prev));
		ok = ok && push(P, &body, EL(EL_END, 0)) && push(P, &body, EL(EL_END, 0));
		if (!ok) return free(body.v), false;
		P->rules[g].body = body;
		prev = g;
	}
	return prev < 0 || push(P, seq, EL(EL_REF, prev));
}

static bool read_int(parser *P, int32_t *v) {
	size_t at = P->p;
	int64_t x = 0;
	if (P->p >= P->n || P->s[P->p] < '0' || P->s[P->p] > '9') return perr(P, LANES_EFORMAT, at, "expected a number");
	while (P->p < P->n && P->s[P->p] >= '0' && P->s[P->p] <= '9') {
		x = x * 10 + (P->s[P->p++] - '0');
		if (x > P->lim.max_repeat)
			return perr(P, LANES_ELIMIT, at, "repetition count past the limit of %d", (int)P->lim.max_repeat);
	}
	*v = (int32_t)x;
	return true;
}

static bool parse_alternates(parser *P, int32_t rule, bool nested);

static bool parse_sequence(parser *P, ivec *seq, bool nested) {
	int32_t last = -1;
	while (P->p < P->n) {
		char c = P->s[P->p];
		size_t at = P->p;
		if (c == '"') {
			last = seq->n;
			if (!parse_literal(P, seq)) return false;
		} else if (c == '[') {
			last = seq->n;
			if (!parse_class(P, seq)) return false;
		} else if (c == '.') {
			P->p++, last = seq->n;
			if (P->any_rule < 0) {
				cprange all = {0, 0x10FFFF};
				if (!push_class(P, seq, &all, 1, false)) return false;
				P->any_rule = EL_ARG(seq->v[seq->n - 1]);
			} else if (!push(P, seq, EL(EL_REF, P->any_rule))) return false;
		} else if (is_word(c)) {
			while (P->p < P->n && is_word(P->s[P->p])) P->p++;
			int32_t r = rule_named(P, P->s + at, P->p - at);
			if (r < 0) return false;
			if (!P->rules[r].defined && !P->rules[r].ref_at) P->rules[r].ref_at = at + 1;
			last = seq->n;
			if (!push(P, seq, EL(EL_REF, r))) return false;
		} else if (c == '(') {
			if (++P->depth > P->lim.max_depth)
				return perr(P, LANES_ELIMIT, at, "groups nest deeper than %d", (int)P->lim.max_depth);
			P->p++;
			space(P, true);
			int32_t g = new_rule(P, NULL, 0);
			if (g < 0 || !parse_alternates(P, g, true)) return false;
			if (P->p >= P->n || P->s[P->p] != ')') return perr(P, LANES_EFORMAT, P->p, "expected ')' to close the group");
			P->p++, P->depth--;
			last = seq->n;
			if (!push(P, seq, EL(EL_REF, g))) return false;
		} else if (c == '*' || c == '+' || c == '?' || c == '{') {
			if (last < 0) return perr(P, LANES_EFORMAT, at, "'%c' must follow an item", c);
			P->p++;
			int32_t min = c == '+', max = c == '?' ? 1 : -1;
			if (c == '{') {
				space(P, true);
				if (!read_int(P, &min)) return false;
				space(P, true);
				max = min;
				if (P->p < P->n && P->s[P->p] == ',') {
					P->p++;
					space(P, true);
					max = -1;
					if (P->p < P->n && P->s[P->p] != '}' && !read_int(P, &max)) return false;
					space(P, true);
				}
				if (P->p >= P->n || P->s[P->p] != '}') return perr(P, LANES_EFORMAT, P->p, "expected '}'");
				P->p++;
				if (max >= 0 && max < min) return perr(P, LANES_EFORMAT, at, "{%d,%d}: the maximum is below the minimum", min, max);
			}
			if (!repeat(P, seq, last, min, max)) return false;
		} else break;
		space(P, nested);
	}
	return true;
}

static bool parse_alternates(parser *P, int32_t rule, bool nested) {
	for (;;) {
		ivec seq = {0};
		bool ok = parse_sequence(P, &seq, nested) && push(P, &seq, EL(EL_END, 0));
		ivec *b = &P->rules[rule].body;
		if (ok && b->n + seq.n > b->cap) { // already counted against max_elements
			int32_t cap = (b->n + seq.n) * 2;
			uint32_t *nv = realloc(b->v, (size_t)cap * sizeof *nv);
			if (nv) b->v = nv, b->cap = cap;
			else ok = oom(P);
		}
		if (ok) memcpy(b->v + b->n, seq.v, (size_t)seq.n * sizeof *seq.v), b->n += seq.n;
		free(seq.v);
		if (!ok) return false;
		if (P->p >= P->n || P->s[P->p] != '|') return true;
		P->p++;
		space(P, true);
	}
}

static bool parse_grammar(parser *P) {
	P->p = skip_all(P, 0);
	while (P->p < P->n) {
		size_t at = P->p;
		while (P->p < P->n && is_word(P->s[P->p])) P->p++;
		if (P->p == at) return perr(P, LANES_EFORMAT, at, "expected a rule name");
		size_t end = P->p;
		while (P->p < P->n && (P->s[P->p] == ' ' || P->s[P->p] == '\t')) P->p++;
		if (P->p + 3 > P->n || memcmp(P->s + P->p, "::=", 3))
			return perr(P, LANES_EFORMAT, P->p, "expected '::=' after the rule name");
		P->p += 3;
		space(P, true);
		int32_t r = rule_named(P, P->s + at, end - at);
		if (r < 0) return false;
		if (P->rules[r].defined) return perr(P, LANES_EFORMAT, at, "rule '%.*s' is defined twice", (int)(end - at), P->s + at);
		P->rules[r].defined = true, P->rules[r].def_at = at;
		P->owner = r;
		if (!parse_alternates(P, r, false)) return false;
		if (P->p < P->n && P->s[P->p] != '\n') return perr(P, LANES_EFORMAT, P->p, "unexpected '%c'", P->s[P->p]);
		P->p = skip_all(P, P->p);
	}
	return true;
}

// Rules that derive the empty string, by a worklist over references.
static bool *nullable_rules(const grammar *g, int32_t *alt_rule) {
	int32_t n = g->n_rules, na = g->n_alts;
	bool *nul = calloc((size_t)n + 1, 1);
	int32_t *pend = calloc((size_t)na + 1, sizeof *pend), *cnt = calloc((size_t)n + 1, sizeof *cnt);
	int32_t *occ = NULL, *q = malloc(((size_t)n + 1) * sizeof *q);
	bool *term = calloc((size_t)na + 1, 1);
	int32_t nref = 0;
	if (!nul || !pend || !cnt || !q || !term) goto fail;
	for (int32_t a = 0; a < na; a++)
		for (int32_t p = g->alt_start[a]; EL_KIND(g->elem[p]) != EL_END; p++) {
			if (EL_KIND(g->elem[p]) == EL_TERM) term[a] = true;
			else pend[a]++, cnt[EL_ARG(g->elem[p])]++, nref++;
		}
	occ = malloc(((size_t)nref + 1) * sizeof *occ);
	int32_t *off = calloc((size_t)n + 1, sizeof *off);
	if (!occ || !off) { free(off); goto fail; }
	for (int32_t r = 1; r <= n; r++) off[r] = off[r - 1] + cnt[r - 1];
	for (int32_t a = 0; a < na; a++)
		for (int32_t p = g->alt_start[a]; EL_KIND(g->elem[p]) != EL_END; p++)
			if (EL_KIND(g->elem[p]) == EL_REF) occ[off[EL_ARG(g->elem[p])] + --cnt[EL_ARG(g->elem[p])]] = a;
	int32_t qn = 0;
	for (int32_t a = 0; a < na; a++)
		if (!term[a] && !pend[a] && !nul[alt_rule[a]]) nul[alt_rule[a]] = true, q[qn++] = alt_rule[a];
	while (qn) {
		int32_t r = q[--qn];
		int32_t e = r + 1 < n ? off[r + 1] : nref;
		for (int32_t i = off[r]; i < e; i++) {
			int32_t a = occ[i];
			if (--pend[a] == 0 && !term[a] && !nul[alt_rule[a]]) nul[alt_rule[a]] = true, q[qn++] = alt_rule[a];
		}
	}
	free(off), free(occ), free(pend), free(cnt), free(q), free(term);
	return nul;
fail:
	free(nul), free(pend), free(cnt), free(q), free(term), free(occ);
	return NULL;
}

// The first rule found on a cycle of references that consume nothing first; -1 when none, -2 OOM.
static int32_t left_recursive(const grammar *g, const bool *nul, const int32_t *alt_rule) {
	int32_t n = g->n_rules;
	int32_t *off = calloc((size_t)n + 2, sizeof *off), *to = NULL, *fill = NULL;
	unsigned char *color = calloc((size_t)n + 1, 1);
	int32_t *st = malloc(((size_t)n + 1) * sizeof *st), *ei = malloc(((size_t)n + 1) * sizeof *ei);
	int32_t found = -2, ne = 0;
	if (!off || !color || !st || !ei) goto done;
	for (int pass = 0; pass < 2; pass++) {
		for (int32_t a = 0; a < g->n_alts; a++)
			for (int32_t p = g->alt_start[a]; EL_KIND(g->elem[p]) == EL_REF; p++) {
				int32_t r = alt_rule[a];
				if (pass == 0) off[r + 1]++, ne++;
				else to[fill[r]++] = EL_ARG(g->elem[p]);
				if (!nul[EL_ARG(g->elem[p])]) break;
			}
		if (pass == 0) {
			for (int32_t r = 0; r < n; r++) off[r + 1] += off[r];
			to = malloc(((size_t)ne + 1) * sizeof *to), fill = malloc(((size_t)n + 1) * sizeof *fill);
			if (!to || !fill) goto done;
			memcpy(fill, off, (size_t)n * sizeof *fill);
		}
	}
	found = -1;
	for (int32_t s = 0; s < n && found < 0; s++) {
		if (color[s]) continue;
		int32_t sp = 0;
		st[sp] = s, ei[sp] = off[s], color[s] = 1, sp++;
		while (sp && found < 0) {
			int32_t r = st[sp - 1];
			if (ei[sp - 1] == off[r + 1]) { color[r] = 2, sp--; continue; }
			int32_t t = to[ei[sp - 1]++];
			if (color[t] == 1) found = t;
			else if (!color[t]) st[sp] = t, ei[sp] = off[t], color[t] = 1, sp++;
		}
	}
done:
	free(off), free(to), free(fill), free(color), free(st), free(ei);
	return found;
}

// Refuses g (P->rc) when a state reachable within the exploration budget is past max_stacks.
static void explore(parser *P, grammar *g, const int32_t *alt_rule);

static void grammar_free(grammar *g) {
	if (!g) return;
	free(g->elem), free(g->alt_first), free(g->alt_start), free(g->sets), free(g);
}

static int finish(parser *P, grammar **out) {
	for (int32_t r = 0; r < P->n_rules; r++)
		if (P->rules[r].name && !P->rules[r].defined)
			return perr(P, LANES_EFORMAT, P->rules[r].ref_at - 1, "undefined rule '%.*s'", (int)P->rules[r].name_len,
				    P->rules[r].name),
			       P->rc;
	int32_t root = -1;
	for (int32_t r = 0; r < P->n_rules; r++)
		if (P->rules[r].name && P->rules[r].name_len == 4 && !memcmp(P->rules[r].name, "root", 4)) root = r;
	if (root < 0) return perr(P, LANES_EFORMAT, P->n, "no rule named 'root'"), P->rc;
	grammar *g = calloc(1, sizeof *g);
	if (!g) return oom(P), P->rc;
	atomic_init(&g->refs, 1);
	g->lim = P->lim, g->root = root, g->n_rules = P->n_rules;
	int64_t ne = 0, na = 0;
	for (int32_t r = 0; r < P->n_rules; r++) {
		ne += P->rules[r].body.n;
		for (int32_t i = 0; i < P->rules[r].body.n; i++) na += P->rules[r].body.v[i] == EL(EL_END, 0);
	}
	g->elem = malloc(((size_t)ne + 1) * sizeof *g->elem);
	g->alt_first = malloc(((size_t)P->n_rules + 1) * sizeof *g->alt_first);
	g->alt_start = malloc(((size_t)na + 1) * sizeof *g->alt_start);
	int32_t *alt_rule = malloc(((size_t)na + 1) * sizeof *alt_rule);
	if (!g->elem || !g->alt_first || !g->alt_start || !alt_rule) return free(alt_rule), grammar_free(g), oom(P), P->rc;
	int32_t p = 0, a = 0;
	for (int32_t r = 0; r < P->n_rules; r++) {
		g->alt_first[r] = a;
		ivec *b = &P->rules[r].body;
		for (int32_t i = 0; i < b->n; i++) {
			if (i == 0 || b->v[i - 1] == EL(EL_END, 0)) alt_rule[a] = r, g->alt_start[a++] = p;
			g->elem[p++] = b->v[i];
		}
	}
	g->alt_first[P->n_rules] = a;
	g->n_elem = p, g->n_alts = a;
	g->sets = P->sets, g->n_sets = P->n_sets, P->sets = NULL;
	bool *nul = nullable_rules(g, alt_rule);
	int32_t lr = nul ? left_recursive(g, nul, alt_rule) : -2;
	free(nul);
	if (lr == -2) return free(alt_rule), grammar_free(g), oom(P), P->rc;
	if (lr >= 0) {
		prule *u = &P->rules[P->rules[lr].owner];
		perr(P, LANES_EFORMAT, u->def_at, "rule '%.*s' is left-recursive%s", (int)u->name_len, u->name,
		     P->rules[lr].name ? "" : " (through a group or repetition in it)");
		return free(alt_rule), grammar_free(g), P->rc;
	}
	explore(P, g, alt_rule);
	free(alt_rule);
	if (P->rc) return grammar_free(g), P->rc;
	*out = g;
	return 0;
}

int grammar_compile(grammar **out, const char *text, size_t len, const grammar_limits *lim, char *err, size_t errlen) {
	*out = NULL;
	if (errlen) err[0] = 0;
	parser P = {.s = text, .n = len, .err = err, .errlen = errlen, .owner = -1, .any_rule = -1};
	grammar_default_limits(&P.lim);
	if (lim) { // a field left at 0 keeps its default
		if (lim->max_text) P.lim.max_text = lim->max_text;
		if (lim->max_rules > 0) P.lim.max_rules = lim->max_rules;
		if (lim->max_elements > 0) P.lim.max_elements = lim->max_elements;
		if (lim->max_depth > 0) P.lim.max_depth = lim->max_depth;
		if (lim->max_repeat > 0) P.lim.max_repeat = lim->max_repeat;
		if (lim->max_stacks > 0) P.lim.max_stacks = lim->max_stacks;
		if (lim->max_explore > 0) P.lim.max_explore = lim->max_explore;
	}
	if (len > P.lim.max_text) {
		snprintf(err, errlen, "the grammar is %zu bytes, past the limit of %zu", len, P.lim.max_text);
		return LANES_ELIMIT;
	}
	if (!text && len) {
		snprintf(err, errlen, "no grammar text");
		return LANES_EINVAL;
	}
	if (parse_grammar(&P)) finish(&P, out);
	for (int32_t r = 0; r < P.n_rules; r++) free(P.rules[r].body.v);
	free(P.rules), free(P.ht), free(P.sets), free(P.set_ht);
	return P.rc;
}

grammar *grammar_ref(grammar *g) {
	if (g) atomic_fetch_add(&g->refs, 1);
	return g;
}

void grammar_unref(grammar *g) {
	if (g && atomic_fetch_sub(&g->refs, 1) == 1) grammar_free(g);
}

// ---- vocabulary trie ----------------------------------------------------------------------
// Nodes in preorder (the order of the sorted token bytes); a node's subtree ends at skip.
typedef struct {
	int32_t skip;        // index just past this node's subtree
	uint32_t depth_byte; // depth << 8 | the byte on the edge into the node
} tnode;

struct grammar_vocab {
	int32_t n;
	char *bytes;        // every token's bytes, concatenated
	int64_t *off;       // (n + 1) token i is bytes[off[i]..off[i+1])
	bool *usable, *eog; // (n)
	int32_t *eog_ids;
	size_t n_eog;
	tnode *node;       // (n_nodes)
	int32_t *tok_at;   // (n_nodes + 1) tokens ending at node i are toks[tok_at[i]..tok_at[i+1])
	int32_t *toks;     // usable token ids in byte order
	int32_t n_nodes, n_toks;
	uint32_t max_len;
};

static int cmp_tok(const void *a, const void *b, void *ctx) {
	const grammar_vocab *v = ctx;
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	int64_t lx = v->off[x + 1] - v->off[x], ly = v->off[y + 1] - v->off[y];
	int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], (size_t)(lx < ly ? lx : ly));
	if (c) return c;
	return lx < ly ? -1 : lx > ly ? 1 : (x > y) - (x < y);
}

void grammar_vocab_free(grammar_vocab *v) {
	if (!v) return;
	free(v->bytes), free(v->off), free(v->usable), free(v->eog), free(v->eog_ids);
	free(v->node), free(v->tok_at), free(v->toks), free(v);
}

int32_t grammar_vocab_size(const grammar_vocab *v) { return v->n; }

int grammar_vocab_new(grammar_vocab **out, int32_t n, const char *const *piece, const uint32_t *len,
		      const bool *usable, const int32_t *eog, size_t n_eog) {
	*out = NULL;
	if (n < 0) return LANES_EINVAL;
	grammar_vocab *v = calloc(1, sizeof *v);
	if (!v) return LANES_ENOMEM;
	v->n = n;
	v->off = malloc(((size_t)n + 1) * sizeof *v->off);
	v->usable = calloc((size_t)n + 1, 1), v->eog = calloc((size_t)n + 1, 1);
	v->eog_ids = malloc((n_eog + 1) * sizeof *v->eog_ids);
	v->toks = malloc(((size_t)n + 1) * sizeof *v->toks);
	if (!v->off || !v->usable || !v->eog || !v->eog_ids || !v->toks) goto oom;
	int64_t total = 0;
	v->off[0] = 0;
	for (int32_t i = 0; i < n; i++) v->usable[i] = usable[i] && len[i] > 0 && piece[i];
	for (size_t i = 0; i < n_eog; i++)
		if (eog[i] >= 0 && eog[i] < n && !v->eog[eog[i]]) v->eog[eog[i]] = true, v->eog_ids[v->n_eog++] = eog[i];
	for (int32_t i = 0; i < n; i++) {
		v->usable[i] = v->usable[i] && !v->eog[i]; // eog follows acceptance alone
		total += v->usable[i] ? len[i] : 0;
		v->off[i + 1] = total;
	}
	v->bytes = malloc((size_t)total + 1);
	if (!v->bytes) goto oom;
	for (int32_t i = 0; i < n; i++) {
		if (!v->usable[i]) continue;
		memcpy(v->bytes + v->off[i], piece[i], len[i]);
		v->toks[v->n_toks++] = i;
		if (len[i] > v->max_len) v->max_len = len[i];
	}
	qsort_r(v->toks, (size_t)v->n_toks, sizeof *v->toks, cmp_tok, v);
	// at most one node per byte; the trie shares prefixes so usually far fewer
	int64_t cap = total + 1;
	v->node = malloc((size_t)cap * sizeof *v->node);
	v->tok_at = malloc(((size_t)cap + 1) * sizeof *v->tok_at);
	int32_t *open = malloc(((size_t)v->max_len + 1) * sizeof *open);
	if (!v->node || !v->tok_at || !open) { free(open); goto oom; }
	uint32_t depth = 0;
	const char *prev = NULL;
	uint32_t prev_len = 0;
	for (int32_t k = 0; k < v->n_toks; k++) {
		int32_t t = v->toks[k];
		const char *w = v->bytes + v->off[t];
		uint32_t l = (uint32_t)(v->off[t + 1] - v->off[t]), lcp = 0;
		while (prev && lcp < l && lcp < prev_len && w[lcp] == prev[lcp]) lcp++;
		for (; depth > lcp; depth--) v->node[open[depth]].skip = v->n_nodes;
		for (; depth < l; depth++) {
			int32_t id = v->n_nodes++;
			v->node[id].depth_byte = (depth + 1) << 8 | (unsigned char)w[depth];
			v->tok_at[id] = k;
			open[depth + 1] = id;
		}
		prev = w, prev_len = l;
	}
	for (; depth > 0; depth--) v->node[open[depth]].skip = v->n_nodes;
	v->tok_at[v->n_nodes] = v->n_toks;
	free(open);
	tnode *nn = realloc(v->node, ((size_t)v->n_nodes + 1) * sizeof *nn); // shared prefixes leave most unused
	int32_t *nt = realloc(v->tok_at, ((size_t)v->n_nodes + 1) * sizeof *nt);
	if (nn) v->node = nn;
	if (nt) v->tok_at = nt;
	*out = v;
	return 0;
oom:
	grammar_vocab_free(v);
	return LANES_ENOMEM;
}

// ---- matcher: interned stacks and a lazy DFA over sets of them -----------------------------
// A stack is a node (pos, parent): pos the element it is at (a TERM for a top, a return
// position below), parent the rest; node 0 is the empty stack. Nodes are hash-consed, so a
// state, a sorted list of top nodes, compares by its ids.
typedef struct {
	int32_t pos, parent;
} gnode;

typedef struct {
	int64_t off;     // into stk
	int32_t n;       // stacks
	uint32_t hash;
	int32_t *trans;  // (256) next state, ST_DEAD, or ST_UNKNOWN; NULL until first needed
	uint64_t *mask;  // cached mask or NULL
	bool acc;        // holds the empty stack
} gstate;

enum { ST_DEAD = -1, ST_UNKNOWN = -2, ST_OOM = -3 };
#define MAX_TRIGGER_BYTES 4096
// Caches are flushed between calls past these bounds; a walk itself is bounded by the trie.
#define TRANS_BUDGET (16u << 20)
#define MASK_BUDGET (32u << 20)
#define MAX_NODES (1 << 20)
#define MAX_STATES (1 << 18)

struct grammar_matcher {
	grammar *g;
	const grammar_vocab *v;
	size_t words; // of a mask
	gnode *nodes;
	int32_t n_nodes, cap_nodes;
	int32_t *node_ht;
	uint32_t node_ht_cap;
	gstate *st;
	int32_t n_st, cap_st;
	int32_t *st_ht;
	uint32_t st_ht_cap;
	int32_t *stk;
	int64_t n_stk, cap_stk;
	size_t trans_bytes, mask_bytes;
	// scratch of one transition
	int64_t *work;
	int64_t n_work, cap_work;
	int32_t *outv;
	int32_t n_out, cap_out;
	uint64_t *vis; // visited (pos, parent) keys, stamped by generation
	uint32_t *vis_gen;
	uint32_t vis_cap, vis_max, gen; // vis_max: expansions one transition may take
	uint64_t expanded; // expansions over the matcher's life
	bool over;         // the last transition died past max_stacks, not for want of a stack
	int32_t *sd;  // (max_len + 1) states along a trie walk
	int32_t *acd; // (max_len + 1) trigger states along a walk
	uint64_t *empty; // an all-zero mask
	int32_t start, cur;
	bool ended, triggered;
	// lazy triggers: an Aho-Corasick automaton
	int n_trig;
	char **trig;
	size_t *trig_len;
	int32_t *trig_state; // (n_trig) grammar state after the trigger from the start, or ST_UNKNOWN
	int32_t n_ac;
	int32_t *ac_go;  // (n_ac * 256)
	int32_t *ac_out; // (n_ac) longest trigger ending here, -1 none
	uint64_t **ac_mask;
	int32_t ac_cur;
};

static uint32_t hash_pair(int32_t pos, int32_t parent) {
	return (uint32_t)mix64((uint64_t)(uint32_t)pos << 32 | (uint32_t)parent);
}

static uint32_t hash_node(const void *ctx, int32_t id) {
	const gnode *x = &((const grammar_matcher *)ctx)->nodes[id];
	return hash_pair(x->pos, x->parent);
}

static uint32_t hash_state(const void *ctx, int32_t id) { return ((const grammar_matcher *)ctx)->st[id].hash; }

static int32_t node_intern(grammar_matcher *m, int32_t pos, int32_t parent) {
	if (!idtab_reserve(&m->node_ht, &m->node_ht_cap, m->n_nodes, hash_node, m, 1024)) return ST_OOM;
	uint32_t h = hash_pair(pos, parent) & (m->node_ht_cap - 1);
	for (; m->node_ht[h] >= 0; h = (h + 1) & (m->node_ht_cap - 1)) {
		gnode *x = &m->nodes[m->node_ht[h]];
		if (x->pos == pos && x->parent == parent) return m->node_ht[h];
	}
	if (m->n_nodes == m->cap_nodes) {
		int32_t cap = m->cap_nodes * 2;
		gnode *nn = realloc(m->nodes, (size_t)cap * sizeof *nn);
		if (!nn) return ST_OOM;
		m->nodes = nn, m->cap_nodes = cap;
	}
	m->nodes[m->n_nodes] = (gnode){pos, parent};
	m->node_ht[h] = m->n_nodes;
	return m->n_nodes++;
}

static uint32_t stacks_hash(const int32_t *s, int32_t n) {
	uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
	for (int32_t i = 0; i < n; i++) h = mix64(h ^ (uint32_t)s[i]);
	return (uint32_t)h;
}

// The state holding stacks s[0..n) (sorted, distinct); ST_OOM.
static int32_t state_intern(grammar_matcher *m, const int32_t *s, int32_t n) {
	uint32_t hash = stacks_hash(s, n);
	if (!idtab_reserve(&m->st_ht, &m->st_ht_cap, m->n_st, hash_state, m, 256)) return ST_OOM;
	uint32_t h = hash & (m->st_ht_cap - 1);
	for (; m->st_ht[h] >= 0; h = (h + 1) & (m->st_ht_cap - 1)) {
		gstate *x = &m->st[m->st_ht[h]];
		if (x->hash == hash && x->n == n && !memcmp(m->stk + x->off, s, (size_t)n * sizeof *s)) return m->st_ht[h];
	}
	if (m->n_st == m->cap_st) {
		int32_t cap = m->cap_st ? m->cap_st * 2 : 256;
		gstate *ns = realloc(m->st, (size_t)cap * sizeof *ns);
		if (!ns) return ST_OOM;
		m->st = ns, m->cap_st = cap;
	}
	if (m->n_stk + n > m->cap_stk) {
		int64_t cap = (m->n_stk + n) * 2 + 1024;
		int32_t *nk = realloc(m->stk, (size_t)cap * sizeof *nk);
		if (!nk) return ST_OOM;
		m->stk = nk, m->cap_stk = cap;
	}
	memcpy(m->stk + m->n_stk, s, (size_t)n * sizeof *s);
	m->st[m->n_st] = (gstate){.off = m->n_stk, .n = n, .hash = hash, .acc = n && s[0] == 0};
	m->n_stk += n;
	m->st_ht[h] = m->n_st;
	return m->n_st++;
}

static bool work_push(grammar_matcher *m, int32_t pos, int32_t parent) {
	if (m->n_work == m->cap_work) {
		int64_t cap = m->cap_work ? m->cap_work * 2 : 256;
		int64_t *nw = realloc(m->work, (size_t)cap * sizeof *nw);
		if (!nw) return false;
		m->work = nw, m->cap_work = cap;
	}
	m->work[m->n_work++] = (int64_t)((uint64_t)(uint32_t)pos << 32 | (uint32_t)parent);
	return true;
}

static int cmp_i32(const void *a, const void *b) {
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return (x > y) - (x < y);
}

// Doubles the visited table, keeping the keys of this generation.
static bool grow_visited(grammar_matcher *m) {
	uint32_t cap = m->vis_cap * 2;
	uint64_t *nv = malloc(cap * sizeof *nv);
	uint32_t *ng = calloc(cap, sizeof *ng);
	if (!nv || !ng) return free(nv), free(ng), false;
	for (uint32_t i = 0; i < m->vis_cap; i++) {
		if (m->vis_gen[i] != m->gen) continue;
		uint32_t h = (uint32_t)mix64(m->vis[i]) & (cap - 1);
		while (ng[h] == m->gen) h = (h + 1) & (cap - 1);
		nv[h] = m->vis[i], ng[h] = m->gen;
	}
	free(m->vis), free(m->vis_gen);
	m->vis = nv, m->vis_gen = ng, m->vis_cap = cap;
	return true;
}

// Expands the pending work items until every stack's top is a byte set (or the stack is
// empty) and interns the resulting state: ST_DEAD when none survives or past max_stacks.
static int32_t close_state(grammar_matcher *m) {
	const grammar *g = m->g;
	m->n_out = 0;
	if (++m->gen == 0) memset(m->vis_gen, 0, m->vis_cap * sizeof *m->vis_gen), m->gen = 1;
	uint32_t budget = m->vis_max, used = 0;
	int32_t max_out = g->lim.max_stacks;
	m->over = false;
	while (m->n_work) {
		if (used * 2 >= m->vis_cap && !grow_visited(m)) return m->n_work = 0, ST_OOM;
		uint64_t key = (uint64_t)m->work[--m->n_work];
		uint32_t h = (uint32_t)mix64(key) & (m->vis_cap - 1);
		bool seen = false;
		for (; m->vis_gen[h] == m->gen; h = (h + 1) & (m->vis_cap - 1))
			if (m->vis[h] == key) { seen = true; break; }
		if (seen) continue;
		if (used++ >= budget) return m->n_work = 0, m->over = true, ST_DEAD;
		m->expanded++;
		m->vis[h] = key, m->vis_gen[h] = m->gen;
		int32_t pos = (int32_t)(key >> 32), parent = (int32_t)(uint32_t)key;
		uint32_t e = g->elem[pos];
		int32_t top = -1;
		if (EL_KIND(e) == EL_TERM) {
			top = node_intern(m, pos, parent);
			if (top < 0) return m->n_work = 0, ST_OOM;
		} else if (EL_KIND(e) == EL_END) {
			if (!parent) top = 0;
			else if (!work_push(m, m->nodes[parent].pos, m->nodes[parent].parent)) return m->n_work = 0, ST_OOM;
		} else {
			// a reference last in its alternative returns straight to parent: no stack growth
			int32_t ret = EL_KIND(g->elem[pos + 1]) == EL_END ? parent : node_intern(m, pos + 1, parent);
			if (ret < 0) return m->n_work = 0, ST_OOM;
			int32_t r = EL_ARG(e);
			for (int32_t a = g->alt_first[r]; a < g->alt_first[r + 1]; a++)
				if (!work_push(m, g->alt_start[a], ret)) return m->n_work = 0, ST_OOM;
		}
		if (top >= 0) {
			if (m->n_out >= max_out) return m->n_work = 0, m->over = true, ST_DEAD;
			if (m->n_out == m->cap_out) {
				int32_t cap = m->cap_out ? m->cap_out * 2 : 64;
				int32_t *no = realloc(m->outv, (size_t)cap * sizeof *no);
				if (!no) return m->n_work = 0, ST_OOM;
				m->outv = no, m->cap_out = cap;
			}
			m->outv[m->n_out++] = top;
		}
	}
	if (!m->n_out) return ST_DEAD;
	qsort(m->outv, (size_t)m->n_out, sizeof *m->outv, cmp_i32);
	int32_t k = 0;
	for (int32_t i = 0; i < m->n_out; i++)
		if (!k || m->outv[i] != m->outv[k - 1]) m->outv[k++] = m->outv[i];
	return state_intern(m, m->outv, k);
}

static int32_t compute_step(grammar_matcher *m, int32_t s, unsigned char b) {
	const grammar *g = m->g;
	m->n_work = 0;
	m->over = false;
	for (int32_t i = 0; i < m->st[s].n; i++) {
		int32_t id = m->stk[m->st[s].off + i];
		if (!id) continue;
		gnode x = m->nodes[id];
		const uint64_t *set = g->sets[EL_ARG(g->elem[x.pos])];
		if (set[b >> 6] >> (b & 63) & 1)
			if (!work_push(m, x.pos + 1, x.parent)) return ST_OOM;
	}
	if (!m->n_work) return ST_DEAD;
	return close_state(m);
}

// The state after byte b from s, through the transition cache.
static inline int32_t step(grammar_matcher *m, int32_t s, unsigned char b) {
	int32_t *t = m->st[s].trans;
	if (t && t[b] != ST_UNKNOWN) return t[b];
	int32_t r = compute_step(m, s, b);
	if (r == ST_OOM) return r;
	if (!m->st[s].trans && m->trans_bytes < TRANS_BUDGET) {
		t = malloc(256 * sizeof *t);
		if (t) {
			for (int i = 0; i < 256; i++) t[i] = ST_UNKNOWN;
			m->st[s].trans = t, m->trans_bytes += 256 * sizeof *t;
		}
	}
	if (m->st[s].trans) m->st[s].trans[b] = r;
	return r;
}

static int32_t start_state(grammar_matcher *m) {
	const grammar *g = m->g;
	m->n_work = 0;
	for (int32_t a = g->alt_first[g->root]; a < g->alt_first[g->root + 1]; a++)
		if (!work_push(m, g->alt_start[a], 0)) return ST_OOM;
	return close_state(m);
}

static void drop_masks(grammar_matcher *m) {
	for (int32_t i = 0; i < m->n_st; i++) free(m->st[i].mask), m->st[i].mask = NULL;
	for (int32_t i = 0; m->ac_mask && i < m->n_ac; i++) free(m->ac_mask[i]), m->ac_mask[i] = NULL;
	m->mask_bytes = 0;
}

static void reset_tables(grammar_matcher *m) {
	drop_masks(m);
	for (int32_t i = 0; i < m->n_st; i++) free(m->st[i].trans);
	m->n_st = 0, m->n_stk = 0, m->trans_bytes = 0;
	if (m->st_ht) memset(m->st_ht, 0xff, m->st_ht_cap * sizeof *m->st_ht);
	m->n_nodes = 1;
	if (m->node_ht) memset(m->node_ht, 0xff, m->node_ht_cap * sizeof *m->node_ht);
	for (int i = 0; i < m->n_trig; i++) m->trig_state[i] = ST_UNKNOWN;
}

// Past the cache bounds, starts the tables afresh keeping the current state (re-interned
// from its stacks written out as position chains, which the new tables give the same meaning).
static int maybe_flush(grammar_matcher *m) {
	if (m->n_nodes < MAX_NODES && m->n_st < MAX_STATES && m->n_stk < (int64_t)MAX_NODES * 4) return 0;
	int64_t len = 0;
	const gstate *c = &m->st[m->cur];
	for (int32_t i = 0; i < c->n; i++)
		for (int32_t id = m->stk[c->off + i]; ; id = m->nodes[id].parent) {
			len++;
			if (!id) break;
		}
	int32_t *chain = malloc(((size_t)len + 1) * sizeof *chain);
	if (!chain) return LANES_ENOMEM;
	int64_t k = 0;
	for (int32_t i = 0; i < c->n; i++) {
		for (int32_t id = m->stk[c->off + i]; id; id = m->nodes[id].parent) chain[k++] = m->nodes[id].pos;
		chain[k++] = -1;
	}
	reset_tables(m);
	int rc = 0;
	m->n_work = 0;
	int32_t *tops = malloc(((size_t)c->n + 1) * sizeof *tops), nt = 0;
	if (!tops) rc = LANES_ENOMEM;
	for (int64_t e = 0, b = 0; !rc && e < k; e++) {
		if (chain[e] != -1) continue;
		int32_t id = 0;
		for (int64_t j = e - 1; j >= b && id >= 0; j--) id = node_intern(m, chain[j], id);
		if (id < 0) rc = LANES_ENOMEM;
		else tops[nt++] = id;
		b = e + 1;
	}
	if (!rc) {
		qsort(tops, (size_t)nt, sizeof *tops, cmp_i32);
		m->start = start_state(m);
		m->cur = state_intern(m, tops, nt);
		if (m->start < 0 || m->cur < 0) rc = LANES_ENOMEM;
	}
	free(chain), free(tops);
	return rc;
}

static uint64_t *new_mask(grammar_matcher *m) {
	size_t bytes = m->words * sizeof(uint64_t);
	if (m->mask_bytes + bytes > MASK_BUDGET) drop_masks(m);
	uint64_t *mk = calloc(m->words ? m->words : 1, sizeof *mk);
	if (mk) m->mask_bytes += bytes;
	return mk;
}

static inline void set_tokens(const grammar_vocab *v, uint64_t *mk, int32_t i) {
	for (int32_t k = v->tok_at[i]; k < v->tok_at[i + 1]; k++) mk[v->toks[k] >> 6] |= 1ull << (v->toks[k] & 63);
}

// The state after trigger k's bytes from the start: its sentences' prefix.
static int32_t trigger_state(grammar_matcher *m, int k) {
	if (m->trig_state[k] != ST_UNKNOWN) return m->trig_state[k];
	int32_t s = m->start;
	for (size_t i = 0; i < m->trig_len[k] && s >= 0; i++) s = step(m, s, (unsigned char)m->trig[k][i]);
	if (s != ST_OOM) m->trig_state[k] = s;
	return s;
}

// Walks the trie from grammar state s, setting the tokens that survive: the hot loop of masks.
static int walk_grammar(grammar_matcher *m, uint64_t *mk, int32_t s) {
	const grammar_vocab *v = m->v;
	const tnode *node = v->node;
	int32_t *sd = m->sd;
	sd[0] = s;
	for (int32_t i = 0; i < v->n_nodes;) {
		uint32_t db = node[i].depth_byte, d = db >> 8;
		int32_t p = sd[d - 1], *tr = m->st[p].trans, t;
		t = tr && tr[db & 255] != ST_UNKNOWN ? tr[db & 255] : step(m, p, (unsigned char)db);
		if (t == ST_OOM) return LANES_ENOMEM;
		if (t < 0) { i = node[i].skip; continue; }
		sd[d] = t;
		set_tokens(v, mk, i);
		i++;
	}
	return 0;
}

// Walks the trie from grammar state s (ac < 0) or trigger state ac, setting the tokens that survive.
static int walk(grammar_matcher *m, uint64_t *mk, int32_t s, int32_t ac) {
	if (ac < 0) return walk_grammar(m, mk, s);
	const grammar_vocab *v = m->v;
	m->sd[0] = s, m->acd[0] = ac;
	for (int32_t i = 0; i < v->n_nodes;) {
		uint32_t d = v->node[i].depth_byte >> 8;
		unsigned char b = (unsigned char)v->node[i].depth_byte;
		int32_t a = m->acd[d - 1], t;
		if (a >= 0) {
			a = m->ac_go[a * 256 + b];
			if (m->ac_out[a] >= 0) t = trigger_state(m, m->ac_out[a]), a = -1;
			else t = 0;
		} else t = step(m, m->sd[d - 1], b);
		if (t == ST_OOM) return LANES_ENOMEM;
		if (t < 0) { i = v->node[i].skip; continue; }
		m->sd[d] = t, m->acd[d] = a;
		set_tokens(v, mk, i);
		i++;
	}
	return 0;
}

int grammar_matcher_mask(grammar_matcher *m, const uint64_t **mask) {
	if (m->ended) return *mask = m->empty, 0;
	int rc = maybe_flush(m);
	if (rc) return rc;
	uint64_t **slot = m->triggered ? &m->st[m->cur].mask : &m->ac_mask[m->ac_cur];
	if (*slot) return *mask = *slot, 0;
	uint64_t *mk = new_mask(m);
	if (!mk) return LANES_ENOMEM;
	rc = m->triggered ? walk(m, mk, m->cur, -1) : walk(m, mk, 0, m->ac_cur);
	if (rc) return free(mk), rc;
	if (grammar_matcher_accepting(m))
		for (size_t i = 0; i < m->v->n_eog; i++) mk[m->v->eog_ids[i] >> 6] |= 1ull << (m->v->eog_ids[i] & 63);
	slot = m->triggered ? &m->st[m->cur].mask : &m->ac_mask[m->ac_cur]; // the walk may have moved st
	*slot = mk;
	*mask = mk;
	return 0;
}

int grammar_matcher_accept_bytes(grammar_matcher *m, const char *s, size_t n) {
	if (m->ended) return LANES_EINVAL;
	int rc = maybe_flush(m);
	if (rc) return rc;
	size_t i = 0;
	int32_t cur = m->cur;
	if (!m->triggered) {
		int32_t a = m->ac_cur;
		for (; i < n; i++) {
			a = m->ac_go[a * 256 + (unsigned char)s[i]];
			if (m->ac_out[a] >= 0) break;
		}
		if (i == n) return m->ac_cur = a, 0;
		cur = trigger_state(m, m->ac_out[a]);
		i++;
	}
	for (; i < n && cur >= 0; i++) cur = step(m, cur, (unsigned char)s[i]);
	if (cur == ST_OOM) return LANES_ENOMEM;
	if (cur < 0) return LANES_EINVAL;
	m->cur = cur, m->triggered = true;
	return 0;
}

int grammar_matcher_accept(grammar_matcher *m, int32_t id) {
	const grammar_vocab *v = m->v;
	if (m->ended || id < 0 || id >= v->n) return LANES_EINVAL;
	if (v->eog[id]) {
		if (!grammar_matcher_accepting(m)) return LANES_EINVAL;
		m->ended = true;
		return 0;
	}
	if (!v->usable[id]) return LANES_EINVAL;
	return grammar_matcher_accept_bytes(m, v->bytes + v->off[id], (size_t)(v->off[id + 1] - v->off[id]));
}

bool grammar_matcher_accepting(const grammar_matcher *m) {
	return m->ended || !m->triggered || m->st[m->cur].acc;
}

bool grammar_matcher_finished(const grammar_matcher *m) {
	if (m->ended) return true;
	if (!m->triggered) return false;
	const gstate *c = &m->st[m->cur];
	return c->n == 1 && c->acc; // every other top is a non-empty byte set
}

bool grammar_matcher_triggered(const grammar_matcher *m) { return m->triggered; }

void grammar_matcher_free(grammar_matcher *m) {
	if (!m) return;
	if (m->st) reset_tables(m);
	free(m->nodes), free(m->node_ht), free(m->st), free(m->st_ht), free(m->stk);
	free(m->work), free(m->outv), free(m->vis), free(m->vis_gen), free(m->sd), free(m->acd), free(m->empty);
	for (int i = 0; m->trig && i < m->n_trig; i++) free(m->trig[i]);
	free(m->trig), free(m->trig_len), free(m->trig_state), free(m->ac_go), free(m->ac_out), free(m->ac_mask);
	grammar_unref(m->g);
	free(m);
}

// Aho-Corasick over the triggers as a full DFA: ac_go[s * 256 + b], ac_out[s] the longest
// trigger that ends at s (a trigger is seen at its first complete occurrence).
static int build_ac(grammar_matcher *m) {
	size_t total = 0;
	for (int i = 0; i < m->n_trig; i++) total += m->trig_len[i];
	int32_t cap = (int32_t)total + 1;
	int32_t *go = malloc((size_t)cap * 256 * sizeof *go), *out = malloc((size_t)cap * sizeof *out);
	int32_t *fail = malloc((size_t)cap * sizeof *fail), *depth = malloc((size_t)cap * sizeof *depth);
	int32_t *q = malloc((size_t)cap * sizeof *q);
	if (!go || !out || !fail || !depth || !q) return free(go), free(out), free(fail), free(depth), free(q), LANES_ENOMEM;
	memset(go, 0xff, (size_t)cap * 256 * sizeof *go);
	int32_t n = 1;
	out[0] = -1, depth[0] = 0;
	for (int k = 0; k < m->n_trig; k++) {
		int32_t s = 0;
		for (size_t i = 0; i < m->trig_len[k]; i++) {
			unsigned char b = (unsigned char)m->trig[k][i];
			if (go[s * 256 + b] < 0) go[s * 256 + b] = n, out[n] = -1, depth[n] = depth[s] + 1, n++;
			s = go[s * 256 + b];
		}
		if (out[s] < 0) out[s] = k;
	}
	int32_t qh = 0, qt = 0;
	fail[0] = 0;
	for (int b = 0; b < 256; b++) {
		if (go[b] < 0) go[b] = 0;
		else fail[go[b]] = 0, q[qt++] = go[b];
	}
	while (qh < qt) {
		int32_t s = q[qh++];
		if (out[s] < 0) out[s] = out[fail[s]];
		for (int b = 0; b < 256; b++) {
			int32_t t = go[s * 256 + b];
			if (t < 0) go[s * 256 + b] = go[fail[s] * 256 + b];
			else fail[t] = go[fail[s] * 256 + b], q[qt++] = t;
		}
	}
	free(fail), free(depth), free(q);
	m->ac_go = go, m->ac_out = out, m->n_ac = n;
	m->ac_mask = calloc((size_t)n, sizeof *m->ac_mask);
	return m->ac_mask ? 0 : LANES_ENOMEM;
}

// A matcher over g and v at no state yet, with room for n_triggers triggers; NULL on OOM.
static grammar_matcher *matcher_alloc(grammar *g, const grammar_vocab *v, int n_triggers) {
	grammar_matcher *m = calloc(1, sizeof *m);
	if (!m) return NULL;
	m->g = grammar_ref(g), m->v = v;
	m->words = ((size_t)v->n + 63) / 64;
	m->cap_nodes = 1024;
	m->nodes = malloc((size_t)m->cap_nodes * sizeof *m->nodes);
	m->vis_cap = 1024;
	m->vis_max = (uint32_t)g->lim.max_stacks * 16u;
	m->vis = malloc(m->vis_cap * sizeof *m->vis), m->vis_gen = calloc(m->vis_cap, sizeof *m->vis_gen);
	m->sd = malloc(((size_t)v->max_len + 1) * sizeof *m->sd), m->acd = malloc(((size_t)v->max_len + 1) * sizeof *m->acd);
	m->empty = calloc(m->words + 1, sizeof *m->empty);
	m->n_trig = n_triggers;
	m->trig = calloc((size_t)n_triggers + 1, sizeof *m->trig);
	m->trig_len = calloc((size_t)n_triggers + 1, sizeof *m->trig_len);
	m->trig_state = calloc((size_t)n_triggers + 1, sizeof *m->trig_state);
	if (!m->nodes || !m->vis || !m->vis_gen || !m->sd || !m->acd || !m->empty || !m->trig || !m->trig_len || !m->trig_state)
		return grammar_matcher_free(m), NULL;
	m->nodes[0] = (gnode){-1, -1};
	m->n_nodes = 1;
	return m;
}

int grammar_matcher_new(grammar_matcher **out, grammar *g, const grammar_vocab *v, const char *const *triggers,
			int n_triggers, char *err, size_t errlen) {
	*out = NULL;
	if (errlen) err[0] = 0;
	if (!g || !v) {
		snprintf(err, errlen, "no grammar or no vocabulary");
		return LANES_EINVAL;
	}
	if (n_triggers < 0 || (n_triggers && !triggers)) {
		snprintf(err, errlen, "bad trigger list");
		return LANES_EINVAL;
	}
	size_t total = 0;
	for (int i = 0; i < n_triggers; i++) {
		if (!triggers[i] || !triggers[i][0]) {
			snprintf(err, errlen, "trigger %d is empty", i);
			return LANES_EINVAL;
		}
		total += strlen(triggers[i]);
	}
	if (total > MAX_TRIGGER_BYTES) {
		snprintf(err, errlen, "the triggers hold %zu bytes, past the limit of %d", total, MAX_TRIGGER_BYTES);
		return LANES_EINVAL;
	}
	grammar_matcher *m = matcher_alloc(g, v, n_triggers);
	if (!m) return LANES_ENOMEM;
	for (int i = 0; i < n_triggers; i++) {
		m->trig_len[i] = strlen(triggers[i]);
		if (!(m->trig[i] = strdup(triggers[i]))) goto oom;
		m->trig_state[i] = ST_UNKNOWN;
	}
	if (n_triggers && build_ac(m)) goto oom;
	m->start = start_state(m);
	if (m->start == ST_OOM) goto oom;
	if (m->start == ST_DEAD) {
		snprintf(err, errlen, "the grammar's start expands past %d alternatives (max_stacks)", (int)g->lim.max_stacks);
		grammar_matcher_free(m);
		return LANES_EINVAL;
	}
	m->cur = m->start;
	m->triggered = n_triggers == 0;
	*out = m;
	return 0;
oom:
	grammar_matcher_free(m);
	return LANES_ENOMEM;
}

// ---- compile-time exploration ---------------------------------------------------------------
// The states reachable from the start, one step per class of bytes no top of a state tells
// apart. States whose stacks reach an element no earlier state did go first, breadth first,
// so the budget covers the whole grammar; then the others, those whose ambiguity grew most
// for the text it took first (a doubling of the stacks is worth EXPLORE_DOUBLING bytes).
#define EXPLORE_PER_STACK 32 // work any grammar may take (steps, stacks stepped, expansions) per max_stacks
#define EXPLORE_PER_ELEM 8   // and per element, up to max_explore
#define EXPLORE_DOUBLING 8
#define EXPLORE_TEXT 48         // bytes of the text shown in a refusal (its end)

static const grammar_vocab no_vocab; // exploration steps over bytes, never tokens

typedef struct {
	int32_t *from;       // (n_st) the state each was first reached from, -1 for the start
	unsigned char *via;  // (n_st) the byte it was reached by
	int32_t *depth;      // (n_st) bytes of that text
	int64_t *key;        // (n_st) the heap's order: larger first, then older
	int32_t cap;
	int32_t *fifo, fifo_head, fifo_n, fifo_cap; // states that reached a new element
	int32_t *heap, heap_n, heap_cap;            // the others
	bool *seen;          // (n_elem) elements some state's stacks stand at
	int32_t *set_mark;   // (n_sets) the last state whose classes the set split
	uint64_t cls[256][4]; // one state's byte classes
} explorer;

static bool heap_before(const explorer *X, int32_t a, int32_t b) { return X->key[a] > X->key[b] || (X->key[a] == X->key[b] && a < b); }

static void heap_push(explorer *X, int32_t t) {
	int32_t i = X->heap_n++;
	for (; i && heap_before(X, t, X->heap[(i - 1) / 2]); i = (i - 1) / 2) X->heap[i] = X->heap[(i - 1) / 2];
	X->heap[i] = t;
}

static int32_t heap_pop(explorer *X) {
	int32_t top = X->heap[0], last = X->heap[--X->heap_n], i = 0;
	for (;;) {
		int32_t c = 2 * i + 1;
		if (c >= X->heap_n) break;
		if (c + 1 < X->heap_n && heap_before(X, X->heap[c + 1], X->heap[c])) c++;
		if (!heap_before(X, X->heap[c], last)) break;
		X->heap[i] = X->heap[c], i = c;
	}
	if (X->heap_n) X->heap[i] = last;
	return top;
}

static bool grow32(int32_t **v, int32_t *cap, int32_t need) {
	if (need <= *cap) return true;
	int32_t c = *cap ? *cap * 2 : 256;
	while (c < need) c *= 2;
	int32_t *nv = realloc(*v, (size_t)c * sizeof *nv);
	if (!nv) return false;
	*v = nv, *cap = c;
	return true;
}

// Records state t, first reached from s (-1: none) by byte b, and queues it. false on OOM.
static bool explore_add(explorer *X, const grammar_matcher *m, int32_t t, int32_t s, unsigned char b) {
	if (t >= X->cap) {
		int32_t cap = X->cap ? X->cap * 2 : 256;
		while (cap <= t) cap *= 2;
		int32_t *f = realloc(X->from, (size_t)cap * sizeof *f), *d = f ? realloc(X->depth, (size_t)cap * sizeof *d) : NULL;
		if (f) X->from = f;
		if (d) X->depth = d;
		unsigned char *v = d ? realloc(X->via, (size_t)cap) : NULL;
		if (v) X->via = v;
		int64_t *k = v ? realloc(X->key, (size_t)cap * sizeof *k) : NULL;
		if (!k) return false;
		X->key = k, X->cap = cap;
	}
	const gstate *st = &m->st[t];
	X->from[t] = s, X->via[t] = b, X->depth[t] = s < 0 ? 0 : X->depth[s] + 1;
	X->key[t] = (int64_t)(31 - __builtin_clz((unsigned)st->n | 1)) * EXPLORE_DOUBLING - X->depth[t];
	bool novel = false;
	for (int32_t i = 0; i < st->n; i++) {
		int32_t id = m->stk[st->off + i];
		if (id && !X->seen[m->nodes[id].pos]) X->seen[m->nodes[id].pos] = true, novel = true;
	}
	if (novel) {
		if (!grow32(&X->fifo, &X->fifo_cap, X->fifo_n + 1)) return false;
		X->fifo[X->fifo_n++] = t;
	} else {
		if (!grow32(&X->heap, &X->heap_cap, X->heap_n + 1)) return false;
		heap_push(X, t);
	}
	return true;
}

// The classes of bytes no top of state s tells apart, among those some top takes, refined set
// by set: one representative byte of each in rep; returns how many, *work the sets' cost.
static int byte_classes(explorer *X, const grammar_matcher *m, int32_t s, unsigned char rep[256], int64_t *work) {
	const grammar *g = m->g;
	const gstate *st = &m->st[s];
	uint64_t seen[4] = {0};
	int n = 0;
	for (int32_t i = 0; i < st->n; i++) {
		int32_t id = m->stk[st->off + i];
		if (!id) continue;
		int32_t set = EL_ARG(g->elem[m->nodes[id].pos]);
		if (X->set_mark[set] == s) continue;
		X->set_mark[set] = s;
		const uint64_t *b = g->sets[set];
		const int n0 = n;
		*work += n0 + 1;
		for (int c = 0; c < n0; c++) {
			uint64_t in[4], out[4], any_in = 0, any_out = 0;
			for (int w = 0; w < 4; w++) in[w] = X->cls[c][w] & b[w], out[w] = X->cls[c][w] & ~b[w], any_in |= in[w], any_out |= out[w];
			if (any_in && any_out) memcpy(X->cls[c], in, sizeof in), memcpy(X->cls[n++], out, sizeof out);
		}
		uint64_t fresh[4], any = 0;
		for (int w = 0; w < 4; w++) fresh[w] = b[w] & ~seen[w], seen[w] |= b[w], any |= fresh[w];
		if (any) memcpy(X->cls[n++], fresh, sizeof fresh);
	}
	for (int c = 0; c < n; c++) {
		int w = 0;
		while (!X->cls[c][w]) w++;
		rep[c] = (unsigned char)(w * 64 + __builtin_ctzll(X->cls[c][w]));
	}
	return n;
}

// The user rule whose alternative holds element pos.
static int32_t pos_owner(const parser *P, const grammar *g, const int32_t *alt_rule, int32_t pos) {
	int32_t lo = 0, hi = g->n_alts - 1;
	while (lo < hi) { // the last alternative starting at or before pos
		int32_t mid = (lo + hi + 1) / 2;
		if (g->alt_start[mid] <= pos) lo = mid;
		else hi = mid - 1;
	}
	return P->rules[alt_rule[lo]].owner;
}

// The user rule met most often down one stack the failed step built (exponential ambiguity
// recurs through the ambiguous rule), the one nearer the top on a tie.
static int32_t explore_blame(const parser *P, const grammar_matcher *m, const int32_t *alt_rule) {
	const grammar *g = m->g;
	int32_t *count = calloc((size_t)g->n_rules + 1, sizeof *count), best = g->root;
	if (!count) return best;
	int32_t most = 0;
	for (int32_t id = m->n_nodes - 1; id > 0; id = m->nodes[id].parent) {
		int32_t r = pos_owner(P, g, alt_rule, m->nodes[id].pos);
		if (++count[r] > most) most = count[r], best = r;
	}
	free(count);
	return best;
}

// Writes the end of the text that leads to state s and then byte b (b < 0: none), quoted.
static void explore_text(const explorer *X, int32_t s, int b, char *out, size_t n) {
	unsigned char tail[EXPLORE_TEXT];
	size_t k = 0, len = 0;
	if (b >= 0) tail[k++] = (unsigned char)b, len++;
	for (int32_t t = s; t >= 0 && X->from[t] >= 0; t = X->from[t], len++)
		if (k < EXPLORE_TEXT) tail[k++] = X->via[t];
	size_t o = (size_t)snprintf(out, n, "%s", len > k ? "\"..." : "\"");
	while (k-- && o + 5 < n) {
		unsigned char c = tail[k];
		if (c == '"' || c == '\\') o += (size_t)snprintf(out + o, n - o, "\\%c", c);
		else if (c >= 0x20 && c < 0x7F) out[o++] = (char)c, out[o] = 0;
		else o += (size_t)snprintf(out + o, n - o, "\\x%02X", c);
	}
	if (o + 1 < n) snprintf(out + o, n - o, "\"");
}

static void explore(parser *P, grammar *g, const int32_t *alt_rule) {
	explorer *X = calloc(1, sizeof *X);
	grammar_matcher *m = matcher_alloc(g, &no_vocab, 0);
	bool ok = X && m;
	if (ok) {
		X->seen = calloc((size_t)g->n_elem + 1, sizeof *X->seen);
		X->set_mark = malloc(((size_t)g->n_sets + 1) * sizeof *X->set_mark);
		ok = X->seen && X->set_mark;
	}
	int64_t budget = (int64_t)EXPLORE_PER_STACK * g->lim.max_stacks + (int64_t)EXPLORE_PER_ELEM * g->n_elem, work = 0;
	if (budget > g->lim.max_explore) budget = g->lim.max_explore;
	int32_t s = -1;
	int b = -1;
	bool over = false;
	if (ok) {
		memset(X->set_mark, 0xff, ((size_t)g->n_sets + 1) * sizeof *X->set_mark);
		m->start = start_state(m);
		over = m->over;
		ok = m->start != ST_OOM && (m->start < 0 || explore_add(X, m, m->start, -1, 0));
	}
	while (ok && !over && work + (int64_t)m->expanded < budget && (X->fifo_head < X->fifo_n || X->heap_n)) {
		s = X->fifo_head < X->fifo_n ? X->fifo[X->fifo_head++] : heap_pop(X);
		unsigned char rep[256];
		int nc = byte_classes(X, m, s, rep, &work);
		for (int c = 0; ok && !over && c < nc; c++) {
			int32_t n_st = m->n_st;
			work += 1 + m->st[s].n;
			int32_t t = compute_step(m, s, rep[c]);
			if (t == ST_OOM) ok = false;
			else if (m->over) over = true, b = rep[c];
			else if (t == n_st) ok = explore_add(X, m, t, s, rep[c]);
		}
	}
	if (!ok) oom(P);
	else if (over) {
		prule *u = &P->rules[explore_blame(P, m, alt_rule)];
		char text[EXPLORE_TEXT * 4 + 16] = "";
		if (s >= 0) explore_text(X, s, b, text, sizeof text);
		perr(P, LANES_ELIMIT, u->def_at, "rule '%.*s' is too ambiguous: %s%s a match would follow more than %d parses at once (max_stacks)",
		     (int)u->name_len, u->name, s >= 0 ? "after " : "at the start", text, (int)g->lim.max_stacks);
	}
	grammar_matcher_free(m);
	if (X) free(X->from), free(X->via), free(X->depth), free(X->key), free(X->fifo), free(X->heap), free(X->seen), free(X->set_mark);
	free(X);
}
