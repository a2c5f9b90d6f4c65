// template: what the interpreter's files share — the render state (one arena per compile or
// render; errors longjmp back to the API call), values, tokens, the AST, the builtin tables,
// and the helpers each file offers the others (tmpl__). Other modules include template.h only.
#ifndef LANES_TEMPLATE_INT_H
#define LANES_TEMPLATE_INT_H

#include "base/base.h"
#include "template/template.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define MAX_VALUE_DEPTH 256     // nesting of lists/dicts walked by repr, tojson, compare

// ---- arena and error unwinding (value.c) --------------------------------------------------

typedef struct chunk {
	struct chunk *next;
	size_t cap, used;
	_Alignas(16) unsigned char data[];
} chunk;

typedef struct {
	chunk *head;
	size_t total, limit;
} arena;

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

void tmpl__arena_free(arena *a);
// Stores code and the message in r and unwinds to the API call's setjmp.
_Noreturn void tmpl__fail(R *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define FAIL(r, ...) tmpl__fail((r), LANES_EINVAL, __VA_ARGS__)
void *tmpl__alloc(R *r, size_t n);
static inline void *allocz(R *r, size_t n) { return memset(tmpl__alloc(r, n), 0, n); }
void *tmpl__alloc_arr(R *r, size_t n, size_t sz);
// Counts n evaluation steps against the render's limit.
void tmpl__step(R *r, int64_t n);
char *tmpl__sdup(R *r, const char *p, size_t n);

static inline bool str_eq(str_t a, const char *b) { return strlen(b) == a.n && !memcmp(a.p, b, a.n); }
static inline bool str_eqs(str_t a, str_t b) { return a.n == b.n && (a.n == 0 || !memcmp(a.p, b.p, a.n)); }

// ---- growable byte buffer in the arena (value.c) ------------------------------------------

typedef struct {
	char *p;
	size_t n, cap;
} buf;

void tmpl__buf_put(R *r, buf *b, const char *s, size_t n);
static inline void buf_puts(R *r, buf *b, const char *s) { tmpl__buf_put(r, b, s, strlen(s)); }
static inline void buf_putc(R *r, buf *b, char c) { tmpl__buf_put(r, b, &c, 1); }
void tmpl__buf_printf(R *r, buf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// ---- UTF-8 (value.c) ----------------------------------------------------------------------

// Decodes one code point at p (< end); invalid bytes decode as themselves (one byte).
uint32_t tmpl__utf8_dec(const char *p, const char *end, int *len);
int tmpl__utf8_enc(uint32_t c, char *o);
// Python's str.isspace.
bool tmpl__py_space(uint32_t c);
// Length in bytes of the Python whitespace character at p, 0 if none.
int tmpl__ws_at(const char *p, const char *end);
size_t tmpl__utf8_count(const char *p, size_t n);
bool tmpl__is_ascii(const char *p, size_t n);

// ---- values (value.c) ---------------------------------------------------------------------

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

static inline value v_bool(bool b) { return (value){.t = V_BOOL, .b = b}; }
static inline value v_int(int64_t i) { return (value){.t = V_INT, .i = i}; }
static inline value v_float(double f) { return (value){.t = V_FLOAT, .f = f}; }
static inline value v_str(const char *p, size_t n) { return (value){.t = V_STR, .s = {p, n}}; }
static inline value v_cstr(const char *p) { return v_str(p, strlen(p)); }
static inline value v_undef(const char *hint) { return (value){.t = V_UNDEF, .hint = hint}; }
static inline value v_list(list *l) { return (value){.t = V_LIST, .l = l}; }
static inline value v_dict(dict *d) { return (value){.t = V_DICT, .d = d}; }
static inline dict *dict_new(R *r) { return allocz(r, sizeof(dict)); }

list *tmpl__list_new(R *r, size_t cap);
void tmpl__list_push(R *r, list *l, value v);
value tmpl__tuple2(R *r, value a, value b);
value *tmpl__dict_find(R *r, const dict *d, value k);
value *tmpl__dict_find_s(const dict *d, const char *k, size_t n);
void tmpl__dict_set(R *r, dict *d, value k, value v);

// Filters that run a str method keep markupsafe's Markup type.
static inline value keep_safe(value from, value v) {
	if (from.t == V_STR && from.safe && v.t == V_STR) v.safe = 1;
	return v;
}

static inline bool is_iter(value v) { return v.t == V_LIST && (v.l->kind == LK_GEN || v.l->kind == LK_REVIT); }
static inline bool is_seq(value v) { return v.t == V_LIST && v.l->kind == LK_PLAIN; }

bool tmpl__truthy(value v);
const char *tmpl__type_name(value v);
// Raises the error an undefined value carries.
_Noreturn void tmpl__undef_fail(R *r, value u);

static inline bool is_num(value v) { return v.t == V_INT || v.t == V_FLOAT || v.t == V_BOOL; }
static inline double num_f(value v) { return v.t == V_FLOAT ? v.f : v.t == V_INT ? (double)v.i : v.b; }
static inline bool is_intlike(value v) { return v.t == V_INT || v.t == V_BOOL; }
static inline int64_t num_i(value v) { return v.t == V_INT ? v.i : v.b; }

// repr(float) as Python writes it: the shortest digits that read back the same.
void tmpl__fmt_float(R *r, buf *b, double d);
// str(v) (repr=false) or repr(v) (repr=true) as Python prints them.
void tmpl__to_buf(R *r, buf *b, value v, bool repr, int depth);
// str(v) as a string value (no copy for strings).
str_t tmpl__to_str(R *r, value v);
// Equality, ordering and `in` with Python's semantics.
bool tmpl__v_eq(R *r, value a, value b, int depth);
int tmpl__v_cmp(R *r, value a, value b, const char *op, int depth);
bool tmpl__v_in(R *r, value x, value c);

// ---- tokens (lex.c) -----------------------------------------------------------------------

enum tokt { T_EOF, T_TEXT, T_VBEG, T_VEND, T_BBEG, T_BEND, T_NAME, T_STR, T_INT, T_FLOAT, T_OP };
enum op {
	OP_NONE, OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_TILDE,
	OP_LBRACKET, OP_RBRACKET, OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE,
	OP_EQ, OP_NE, OP_GT, OP_GE, OP_LT, OP_LE, OP_ASSIGN, OP_DOT, OP_COLON, OP_PIPE, OP_COMMA,
	OP_SEMI, OP_IN, OP_NOTIN, OP_COUNT
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

// Splits L->src into L->v (L->n tokens), applying trim_blocks and lstrip_blocks.
void tmpl__lex(lexer *L);

// ---- AST (parse.c) ------------------------------------------------------------------------

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

// Statements up to a {% NAME %} with NAME in ends (left at NAME; *which is its index) or EOF
// when nends == 0.
node *tmpl__parse_body(R *r, const char *const *ends, int nends, int *which);

// ---- evaluation (eval.c) ------------------------------------------------------------------

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

typedef struct {
	uint8_t type;
	const char *name;
	builtin_fn fn;
} method_def;

scope *tmpl__scope_new(R *r, scope *parent);
void tmpl__scope_set(R *r, scope *s, str_t name, value v);
value tmpl__mk_func(R *r, const char *name, builtin_fn fn, value self);
// Arguments: the positional at pos or the keyword name.
value tmpl__arg(args_t *a, int pos, const char *name, value dflt);
bool tmpl__has_arg(args_t *a, int pos, const char *name);
str_t tmpl__want_str(R *r, value v, const char *what);
int64_t tmpl__want_int(R *r, value v, const char *what);
// Materializes anything Jinja can iterate into a list: strings give characters, dicts keys.
list *tmpl__iter_list(R *r, value v);
value tmpl__concat_str(R *r, str_t a, str_t b);
value tmpl__repeat(R *r, value x, int64_t k);
value tmpl__arith(R *r, uint8_t op, value a, value b);
value tmpl__get_item(R *r, value obj, value key);
value tmpl__get_attr(R *r, value obj, str_t name);
value tmpl__slice(R *r, value obj, value a, value b, value c);
void tmpl__output(R *r, buf *out, value v);
// Runs statement st in scope s, writing its text to out; returns how control leaves it.
int tmpl__exec(R *r, const node *st, scope *s, buf *out);

// ---- builtins: filters, tests, methods, globals (filters.c) -------------------------------

// printf-style `fmt % args` for %s %r %d %i %f %x %%.
value tmpl__str_format_percent(R *r, str_t fmt, value args);
// markupsafe.escape: Markup passes through, anything else is stringified and escaped.
value tmpl__html_escape(R *r, value x);
const filter_def *tmpl__find_filter(str_t name);
const test_def *tmpl__find_test(str_t name);
const method_def *tmpl__find_method(uint8_t type, str_t name);
// Methods that mutate: Jinja's immutable sandbox refuses them.
bool tmpl__unsafe_method(uint8_t type, str_t name);
value tmpl__builtin_global(R *r, str_t name);

// ---- JSON (json.c) ------------------------------------------------------------------------

typedef struct {
	const char *indent; // NULL: single line
	str_t item_sep, key_sep;
	bool ascii, sort_keys;
} json_opts;

// v as Python's json.dumps writes it with options o, at nesting level.
void tmpl__json_val(R *r, buf *b, value v, const json_opts *o, int level);
// The template value of a JSON value (the render context).
value tmpl__from_json(R *r, const json_t *j, int depth);

#endif
