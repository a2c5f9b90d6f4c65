// template/parse: the recursive-descent parser from tokens to the AST — expressions with
// Jinja's precedence, filters and tests bound to their tables, and the statements.
#include "template/template_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAX_PARSE_DEPTH 200     // nesting of expressions and blocks while parsing

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
	tmpl__fail(r, LANES_EFORMAT, "line %d: %s", cur(r)->line, msg);
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
		node **v = tmpl__alloc_arr(r, (size_t)cap, sizeof *v);
		str_t *nm = tmpl__alloc_arr(r, (size_t)cap, sizeof *nm);
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
	if (++r->pdepth > MAX_PARSE_DEPTH) tmpl__fail(r, LANES_ELIMIT, "line %d: template nested too deeply", cur(r)->line);
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
	f->filter = tmpl__find_filter(name);
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
	t->test = tmpl__find_test(name);
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
			tmpl__buf_put(r, &b, s.p, s.n);
			while (cur(r)->t == T_STR) {
				tmpl__buf_put(r, &b, cur(r)->s.p, cur(r)->s.n);
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
	n->ops = tmpl__alloc(r, (size_t)nv.n);
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

node *tmpl__parse_body(R *r, const char *const *ends, int nends, int *which);

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
		n->b = tmpl__parse_body(r, ends, 3, &which);
		if (which == 0) n->c = parse_statement(r);
		else {
			adv(r);
			expect_bend(r);
			if (which == 1) {
				static const char *const e2[] = {"endif"};
				n->c = tmpl__parse_body(r, e2, 1, &which);
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
		n->b = tmpl__parse_body(r, ends, 2, &which);
		adv(r);
		expect_bend(r);
		if (which == 1) {
			static const char *const e2[] = {"endfor"};
			n->c = tmpl__parse_body(r, e2, 1, &which);
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
			n->b = tmpl__parse_body(r, ends, 1, &which);
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
		n->b = tmpl__parse_body(r, ends, 1, &which);
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
		caller->b = tmpl__parse_body(r, ends, 1, &which);
		adv(r);
		expect_bend(r);
		n->b = caller;
	} else if (str_eq(kw, "filter")) {
		adv(r);
		n = mk(r, S_FILTERBLOCK);
		parse_filter_chain(r, n);
		expect_bend(r);
		static const char *const ends[] = {"endfilter"};
		n->b = tmpl__parse_body(r, ends, 1, &which);
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
		n->b = tmpl__parse_body(r, ends, 1, &which);
		adv(r);
		expect_bend(r);
	} else if (str_eq(kw, "generation") || str_eq(kw, "block")) {
		// HF's assistant-mask tag and plain blocks render their body in place
		bool block = str_eq(kw, "block");
		adv(r);
		if (block) expect_name(r);
		expect_bend(r);
		static const char *const e1[] = {"endgeneration"}, *const e2[] = {"endblock"};
		n = tmpl__parse_body(r, block ? e2 : e1, 1, &which);
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
node *tmpl__parse_body(R *r, const char *const *ends, int nends, int *which) {
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
