// template/eval: the tree-walking evaluator — scopes, arithmetic, attribute and item access,
// the loop object, macro and builtin calls, expressions and statements.
#include "template/template_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_EVAL_DEPTH 3000     // nesting of evaluation (bounds the C stack)

// ---- evaluation ----------------------------------------------------------------------------------

// Control flow out of a statement list.
enum flow { FLOW_NEXT, FLOW_BREAK, FLOW_CONTINUE };

static value eval(R *r, const node *e, scope *s);

scope *tmpl__scope_new(R *r, scope *parent) {
	scope *s = allocz(r, sizeof *s);
	s->parent = parent;
	return s;
}

void tmpl__scope_set(R *r, scope *s, str_t name, value v) {
	for (int i = 0; i < s->n; i++)
		if (str_eqs(s->names[i], name)) {
			s->vals[i] = v;
			return;
		}
	if (s->n == s->cap) {
		int cap = s->cap ? s->cap * 2 : 8;
		str_t *nn = tmpl__alloc_arr(r, (size_t)cap, sizeof *nn);
		value *nv = tmpl__alloc_arr(r, (size_t)cap, sizeof *nv);
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

static value lookup(R *r, scope *s, str_t name) {
	for (; s; s = s->parent) {
		for (int i = s->n - 1; i >= 0; i--)
			if (str_eqs(s->names[i], name)) return s->vals[i];
	}
	value g = tmpl__builtin_global(r, name);
	if (g.t != V_UNDEF) return g;
	buf b = {0};
	tmpl__buf_printf(r, &b, "'%.*s' is undefined", (int)(name.n > 100 ? 100 : name.n), name.p);
	buf_putc(r, &b, 0);
	return v_undef(b.p);
}

value tmpl__mk_func(R *r, const char *name, builtin_fn fn, value self) {
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
	tmpl__buf_printf(r, &b, "'%s' has no attribute '%.*s'", obj_desc(obj), (int)(name.n > 100 ? 100 : name.n), name.p);
	buf_putc(r, &b, 0);
	return v_undef(b.p);
}

// Arguments: the positional at pos or the keyword name; *has tells whether it was given.
value tmpl__arg(args_t *a, int pos, const char *name, value dflt) {
	if (name)
		for (int i = a->npos; i < a->n; i++)
			if (str_eq(a->kn[i], name)) return a->v[i];
	if (pos >= 0 && pos < a->npos) return a->v[pos];
	return dflt;
}

bool tmpl__has_arg(args_t *a, int pos, const char *name) {
	if (name)
		for (int i = a->npos; i < a->n; i++)
			if (str_eq(a->kn[i], name)) return true;
	return pos >= 0 && pos < a->npos;
}

str_t tmpl__want_str(R *r, value v, const char *what) {
	if (v.t != V_STR) FAIL(r, "%s must be a string, not %s", what, tmpl__type_name(v));
	return v.s;
}

int64_t tmpl__want_int(R *r, value v, const char *what) {
	if (!is_intlike(v)) FAIL(r, "%s must be an integer, not %s", what, tmpl__type_name(v));
	return num_i(v);
}

// Materializes anything Jinja can iterate into a list: strings give characters, dicts keys.
list *tmpl__iter_list(R *r, value v) {
	switch (v.t) {
	case V_UNDEF: return tmpl__list_new(r, 0);
	case V_LIST:
		if (is_iter(v)) { // single use, as Python's iterators
			if (v.l->consumed) return tmpl__list_new(r, 0);
			v.l->consumed = true;
		}
		return v.l;
	case V_DICT: {
		list *l = tmpl__list_new(r, v.d->n);
		for (size_t i = 0; i < v.d->n; i++) tmpl__list_push(r, l, v.d->k[i]);
		return l;
	}
	case V_STR: {
		list *l = tmpl__list_new(r, v.s.n);
		const char *p = v.s.p, *end = p + v.s.n;
		while (p < end) {
			int n;
			tmpl__utf8_dec(p, end, &n);
			tmpl__list_push(r, l, v_str(p, (size_t)n));
			p += n;
		}
		tmpl__step(r, (int64_t)(v.s.n >> 4));
		return l;
	}
	default: FAIL(r, "'%s' object is not iterable", tmpl__type_name(v));
	}
}

// ---- arithmetic ---------------------------------------------------------------------------------

value tmpl__concat_str(R *r, str_t a, str_t b) {
	uint64_t n;
	if (!ck_add(a.n, b.n, &n) || (int64_t)n > r->max_output)
		tmpl__fail(r, LANES_ELIMIT, "template string longer than %lld bytes", (long long)r->max_output);
	char *p = tmpl__alloc(r, (size_t)n + 1);
	if (a.n) memcpy(p, a.p, a.n);
	if (b.n) memcpy(p + a.n, b.p, b.n);
	p[n] = 0;
	tmpl__step(r, (int64_t)(n >> 8));
	return v_str(p, (size_t)n);
}

value tmpl__repeat(R *r, value x, int64_t k) {
	if (k < 0) k = 0;
	if (x.t == V_STR) {
		uint64_t n;
		if (!ck_mul(x.s.n, (uint64_t)k, &n) || (int64_t)n > r->max_output)
			tmpl__fail(r, LANES_ELIMIT, "template string longer than %lld bytes", (long long)r->max_output);
		char *p = tmpl__alloc(r, (size_t)n + 1);
		for (int64_t i = 0; i < k; i++) memcpy(p + (size_t)i * x.s.n, x.s.p, x.s.n);
		p[n] = 0;
		tmpl__step(r, (int64_t)(n >> 8));
		value v = v_str(p, (size_t)n);
		v.safe = x.safe;
		return v;
	}
	uint64_t n;
	if (!ck_mul(x.l->n, (uint64_t)k, &n) || n > (uint64_t)r->max_output) tmpl__fail(r, LANES_ELIMIT, "template list too long");
	list *l = tmpl__list_new(r, (size_t)n);
	l->tuple = x.l->tuple;
	for (int64_t i = 0; i < k; i++)
		for (size_t j = 0; j < x.l->n; j++) tmpl__list_push(r, l, x.l->v[j]);
	tmpl__step(r, (int64_t)n);
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

static double py_fmod(double a, double b) {
	double m = fmod(a, b);
	if (m != 0 && ((m < 0) != (b < 0))) m += b;
	return m;
}

value tmpl__arith(R *r, uint8_t op, value a, value b) {
	if (a.t == V_UNDEF) tmpl__undef_fail(r, a);
	if (b.t == V_UNDEF) tmpl__undef_fail(r, b);
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
		if (!a.safe && !b.safe) return tmpl__concat_str(r, a.s, b.s);
		// Markup + str escapes the plain operand (markupsafe's __add__/__radd__)
		value x = a.safe ? a : tmpl__html_escape(r, a), y = b.safe ? b : tmpl__html_escape(r, b);
		value v = tmpl__concat_str(r, x.s, y.s);
		v.safe = 1;
		return v;
	}
	if (op == OP_ADD && is_seq(a) && is_seq(b) && a.l->tuple == b.l->tuple) {
		list *l = tmpl__list_new(r, a.l->n + b.l->n);
		l->tuple = a.l->tuple;
		for (size_t i = 0; i < a.l->n; i++) tmpl__list_push(r, l, a.l->v[i]);
		for (size_t i = 0; i < b.l->n; i++) tmpl__list_push(r, l, b.l->v[i]);
		tmpl__step(r, (int64_t)(l->n >> 2));
		return v_list(l);
	}
	if (op == OP_MUL && (a.t == V_STR || is_seq(a)) && is_intlike(b)) return tmpl__repeat(r, a, num_i(b));
	if (op == OP_MUL && (b.t == V_STR || is_seq(b)) && is_intlike(a)) return tmpl__repeat(r, b, num_i(a));
	if (op == OP_MOD && a.t == V_STR) {
		if (!a.safe) return tmpl__str_format_percent(r, a.s, b);
		list *args = tmpl__list_new(r, 1);
		args->tuple = true;
		list *src = b.t == V_LIST && b.l->tuple ? b.l : NULL;
		if (src)
			for (size_t i = 0; i < src->n; i++) tmpl__list_push(r, args, src->v[i].t == V_STR ? tmpl__html_escape(r, src->v[i]) : src->v[i]);
		else
			tmpl__list_push(r, args, b.t == V_STR ? tmpl__html_escape(r, b) : b);
		value v = tmpl__str_format_percent(r, a.s, v_list(args));
		v.safe = 1;
		return v;
	}
	if (op == OP_ADD && a.t == V_STR)
		FAIL(r, "can only concatenate str (not \"%s\") to str", tmpl__type_name(b));
	if (op == OP_ADD && is_seq(a))
		FAIL(r, "can only concatenate list (not \"%s\") to list", tmpl__type_name(b));
	FAIL(r, "unsupported operand type(s) for %s: '%s' and '%s'", op_sym(op), tmpl__type_name(a), tmpl__type_name(b));
ovf:
	FAIL(r, "integer overflow in '%s'", op_sym(op));
}

// ---- attribute and item access ----------------------------------------------------------------

static value loop_attr(R *r, loopst *L, str_t name);

// Python index (negative from the end) into n items; -1 when out of range.
static int64_t norm_index(int64_t i, size_t n) {
	if (i < 0) i += (int64_t)n;
	return i < 0 || i >= (int64_t)n ? -1 : i;
}

static value str_char_at(R *r, str_t s, int64_t i) {
	if (tmpl__is_ascii(s.p, s.n)) {
		int64_t k = norm_index(i, s.n);
		return k < 0 ? UNDEF : v_str(s.p + k, 1);
	}
	size_t n = tmpl__utf8_count(s.p, s.n);
	int64_t k = norm_index(i, n);
	if (k < 0) return UNDEF;
	list *l = tmpl__iter_list(r, v_str(s.p, s.n));
	return l->v[k];
}

value tmpl__get_item(R *r, value obj, value key) {
	switch (obj.t) {
	case V_DICT: case V_NS: {
		value *v = tmpl__dict_find(r, obj.d, key);
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
	case V_UNDEF: tmpl__undef_fail(r, obj);
	default: break;
	}
	if (key.t == V_STR && obj.t != V_DICT && obj.t != V_NS) {
		const method_def *m = tmpl__find_method(obj.t, key.s);
		if (m) return tmpl__mk_func(r, m->name, m->fn, obj);
	}
	buf b = {0};
	if (key.t == V_STR) tmpl__buf_printf(r, &b, "'%s' has no attribute '%.*s'", obj_desc(obj), (int)(key.s.n > 100 ? 100 : key.s.n), key.s.p);
	else {
		tmpl__buf_printf(r, &b, "%s has no element ", obj_desc(obj));
		tmpl__to_buf(r, &b, key, true, MAX_VALUE_DEPTH - 2);
	}
	buf_putc(r, &b, 0);
	return v_undef(b.p);
}

value tmpl__get_attr(R *r, value obj, str_t name) {
	if (obj.t == V_UNDEF) tmpl__undef_fail(r, obj);
	if (name.n && name.p[0] == '_') return undef_attr(r, obj, name);
	if (obj.t == V_LOOP) return loop_attr(r, obj.loop, name);
	if (obj.t != V_NS) {
		const method_def *m = tmpl__find_method(obj.t, name);
		if (m) return tmpl__mk_func(r, m->name, m->fn, obj);
		if (tmpl__unsafe_method(obj.t, name)) {
			buf b = {0};
			tmpl__buf_printf(r, &b, "access to attribute '%.*s' of '%s' object is unsafe.", (int)name.n, name.p, tmpl__type_name(obj));
			buf_putc(r, &b, 0);
			return v_undef(b.p);
		}
	}
	if (obj.t == V_DICT || obj.t == V_NS) {
		value *v = tmpl__dict_find_s(obj.d, name.p, name.n);
		if (v) return *v;
	}
	return undef_attr(r, obj, name);
}

value tmpl__slice(R *r, value obj, value a, value b, value c) {
	if (obj.t == V_UNDEF) tmpl__undef_fail(r, obj);
	int64_t step_ = c.t == V_NONE || c.t == V_UNDEF ? 1 : tmpl__want_int(r, c, "slice step");
	if (step_ == 0) FAIL(r, "slice step cannot be zero");
	list *items;
	bool ascii = obj.t == V_STR && tmpl__is_ascii(obj.s.p, obj.s.n);
	size_t n;
	if (is_seq(obj)) items = obj.l, n = items->n;
	else if (obj.t == V_LIST) {
		buf m = {0};
		tmpl__buf_printf(r, &m, "'%s' object is not subscriptable", tmpl__type_name(obj));
		buf_putc(r, &m, 0);
		return v_undef(m.p);
	} else if (obj.t == V_STR) {
		items = ascii ? NULL : tmpl__iter_list(r, obj);
		n = ascii ? obj.s.n : items->n;
	} else
		FAIL(r, "'%s' object is not subscriptable", tmpl__type_name(obj));
	int64_t N = (int64_t)n, lo, hi;
	bool has_a = a.t != V_NONE && a.t != V_UNDEF, has_b = b.t != V_NONE && b.t != V_UNDEF;
	int64_t ia = has_a ? tmpl__want_int(r, a, "slice index") : 0, ib = has_b ? tmpl__want_int(r, b, "slice index") : 0;
	if (step_ > 0) {
		lo = !has_a ? 0 : ia < 0 ? (ia + N < 0 ? 0 : ia + N) : (ia > N ? N : ia);
		hi = !has_b ? N : ib < 0 ? (ib + N < 0 ? 0 : ib + N) : (ib > N ? N : ib);
	} else {
		lo = !has_a ? N - 1 : ia < 0 ? (ia + N < 0 ? -1 : ia + N) : (ia >= N ? N - 1 : ia);
		hi = !has_b ? -1 : ib < 0 ? (ib + N < 0 ? -1 : ib + N) : (ib >= N ? N - 1 : ib);
	}
	if (obj.t == V_STR && ascii && step_ == 1) return v_str(obj.s.p + lo, hi > lo ? (size_t)(hi - lo) : 0);
	buf sb = {0};
	list *out = obj.t == V_LIST ? tmpl__list_new(r, 0) : NULL;
	if (out) out->tuple = obj.l->tuple;
	for (int64_t i = lo; step_ > 0 ? i < hi : i > hi; i += step_) {
		tmpl__step(r, 1);
		if (out) tmpl__list_push(r, out, items->v[i]);
		else if (ascii) buf_putc(r, &sb, obj.s.p[i]);
		else tmpl__buf_put(r, &sb, items->v[i].s.p, items->v[i].s.n);
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
	list *l = tmpl__list_new(r, (size_t)a->npos);
	for (int i = 0; i < a->npos; i++) tmpl__list_push(r, l, a->v[i]);
	value v = v_list(l);
	if (L->changed_seen && tmpl__v_eq(r, v, L->changed_last, 0)) return v_bool(false);
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
	if (str_eq(name, "cycle")) return tmpl__mk_func(r, "cycle", loop_cycle, self);
	if (str_eq(name, "changed")) return tmpl__mk_func(r, "changed", loop_changed, self);
	return undef_attr(r, self, name);
}

// ---- calls --------------------------------------------------------------------------------------

static value call_macro(R *r, func *f, args_t *a) {
	const node *m = f->def;
	if (++r->calls > r->max_calls)
		tmpl__fail(r, LANES_ELIMIT, "template macro calls nested deeper than %d", r->max_calls);
	scope *s = tmpl__scope_new(r, f->closure);
	int np = m->n;
	list *varargs = tmpl__list_new(r, 0);
	varargs->tuple = true;
	dict *kwargs = dict_new(r);
	for (int i = 0; i < a->npos; i++) {
		if (i < np) tmpl__scope_set(r, s, m->names[i], a->v[i]);
		else if (m->varargs) tmpl__list_push(r, varargs, a->v[i]);
		else FAIL(r, "macro '%.*s' takes not more than %d argument(s)", (int)m->s.n, m->s.p, np);
	}
	for (int i = a->npos; i < a->n; i++) {
		int k;
		for (k = 0; k < np; k++)
			if (str_eqs(m->names[k], a->kn[i])) break;
		if (k < np) {
			if (k < a->npos) FAIL(r, "macro '%.*s' got multiple values for argument '%.*s'", (int)m->s.n, m->s.p, (int)a->kn[i].n, a->kn[i].p);
			tmpl__scope_set(r, s, m->names[k], a->v[i]);
		} else if (str_eq(a->kn[i], "caller") && f->caller.t == V_UNDEF) {
			tmpl__scope_set(r, s, a->kn[i], a->v[i]);
		} else if (m->kwargs)
			tmpl__dict_set(r, kwargs, v_str(a->kn[i].p, a->kn[i].n), a->v[i]);
		else
			FAIL(r, "macro '%.*s' takes no keyword argument '%.*s'", (int)m->s.n, m->s.p, (int)a->kn[i].n, a->kn[i].p);
	}
	for (int k = a->npos; k < np; k++) {
		bool given = false;
		for (int i = a->npos; i < a->n; i++)
			if (str_eqs(m->names[k], a->kn[i])) given = true;
		if (given) continue;
		// defaults are evaluated at call time, seeing the earlier parameters
		tmpl__scope_set(r, s, m->names[k], m->v[k] ? eval(r, m->v[k], s) : v_undef(NULL));
		if (!m->v[k]) {
			buf b = {0};
			tmpl__buf_printf(r, &b, "parameter '%.*s' was not provided", (int)m->names[k].n, m->names[k].p);
			buf_putc(r, &b, 0);
			tmpl__scope_set(r, s, m->names[k], v_undef(b.p));
		}
	}
	tmpl__scope_set(r, s, (str_t){"varargs", 7}, v_list(varargs));
	tmpl__scope_set(r, s, (str_t){"kwargs", 6}, v_dict(kwargs));
	if (f->caller.t != V_UNDEF) tmpl__scope_set(r, s, (str_t){"caller", 6}, f->caller);
	buf out = {0};
	tmpl__exec(r, m->b, s, &out);
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

static value call_value(R *r, value f, args_t *a) {
	if (f.t == V_UNDEF) tmpl__undef_fail(r, f);
	if (f.t != V_FUNC) FAIL(r, "'%s' object is not callable", tmpl__type_name(f));
	if (f.fn->kind == FN_MACRO) return call_macro(r, f.fn, a);
	value self = f.fn->self;
	if (self.t != V_STR || !self.safe) return f.fn->fn(r, self, a);
	// a method of a Markup string: markupsafe escapes arguments and keeps the Markup type
	bool esc = markup_escapes_args(f.fn->name);
	if (esc)
		for (int i = 0; i < a->n; i++)
			if (a->v[i].t == V_STR) a->v[i] = tmpl__html_escape(r, a->v[i]);
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
	a->v = tmpl__alloc_arr(r, (size_t)a->n + 1, sizeof(value));
	a->kn = tmpl__alloc_arr(r, (size_t)a->n + 1, sizeof(str_t));
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
	tmpl__step(r, 1);
	if (++r->depth > MAX_EVAL_DEPTH) tmpl__fail(r, LANES_ELIMIT, "template evaluation nested too deeply");
	int saved_line = r->line;
	r->line = e->line;
	value v;
	switch (e->k) {
	case E_CONST: v = e->cst; break;
	case E_NAME: v = lookup(r, s, e->s); break;
	case E_ATTR: v = tmpl__get_attr(r, eval(r, e->a, s), e->s); break;
	case E_ITEM: {
		value o = eval(r, e->a, s);
		v = keep_safe(o, tmpl__get_item(r, o, eval(r, e->b, s)));
		break;
	}
	case E_SLICE: {
		value o = eval(r, e->a, s);
		value a = e->b ? eval(r, e->b, s) : NONE, b = e->c ? eval(r, e->c, s) : NONE, c = e->d ? eval(r, e->d, s) : NONE;
		v = keep_safe(o, tmpl__slice(r, o, a, b, c));
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
			str_t x = tmpl__to_str(r, a), y = tmpl__to_str(r, b);
			v = tmpl__concat_str(r, x, y);
		} else
			v = tmpl__arith(r, e->op, a, b);
		break;
	}
	case E_NEG: case E_POS: {
		value a = eval(r, e->a, s);
		if (a.t == V_UNDEF) tmpl__undef_fail(r, a);
		if (!is_num(a)) FAIL(r, "bad operand type for unary %s: '%s'", e->k == E_NEG ? "-" : "+", tmpl__type_name(a));
		if (e->k == E_POS) v = a.t == V_BOOL ? v_int(a.b) : a;
		else if (a.t == V_FLOAT) v = v_float(-a.f);
		else if (num_i(a) == INT64_MIN) FAIL(r, "integer overflow in '-'");
		else v = v_int(-num_i(a));
		break;
	}
	case E_AND: {
		value a = eval(r, e->a, s);
		v = tmpl__truthy(a) ? eval(r, e->b, s) : a;
		break;
	}
	case E_OR: {
		value a = eval(r, e->a, s);
		v = tmpl__truthy(a) ? a : eval(r, e->b, s);
		break;
	}
	case E_NOT: v = v_bool(!tmpl__truthy(eval(r, e->a, s))); break;
	case E_COND:
		if (tmpl__truthy(eval(r, e->b, s))) v = eval(r, e->a, s);
		else v = e->c ? eval(r, e->c, s) : v_undef("the inline if-expression evaluated to false and no else section was defined.");
		break;
	case E_CMP: {
		value a = eval(r, e->a, s);
		v = v_bool(true);
		for (int i = 0; i < e->n; i++) {
			value b = eval(r, e->v[i], s);
			bool ok;
			switch (e->ops[i]) {
			case OP_EQ: ok = tmpl__v_eq(r, a, b, 0); break;
			case OP_NE: ok = !tmpl__v_eq(r, a, b, 0); break;
			case OP_LT: ok = tmpl__v_cmp(r, a, b, "<", 0) < 0; break;
			case OP_LE: ok = tmpl__v_cmp(r, a, b, "<=", 0) <= 0; break;
			case OP_GT: ok = tmpl__v_cmp(r, a, b, ">", 0) > 0; break;
			case OP_GE: ok = tmpl__v_cmp(r, a, b, ">=", 0) >= 0; break;
			case OP_IN: ok = tmpl__v_in(r, a, b); break;
			default: ok = !tmpl__v_in(r, a, b); break;
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
		list *l = tmpl__list_new(r, (size_t)e->n);
		l->tuple = e->k == E_TUPLE;
		for (int i = 0; i < e->n; i++) tmpl__list_push(r, l, eval(r, e->v[i], s));
		v = v_list(l);
		break;
	}
	case E_DICT: {
		dict *d = dict_new(r);
		for (int i = 0; i < e->n; i++) {
			value k = eval(r, e->v[i], s);
			if (k.t == V_LIST && !k.l->tuple) FAIL(r, "unhashable type: 'list'");
			if (k.t == V_DICT || k.t == V_NS) FAIL(r, "unhashable type: 'dict'");
			tmpl__dict_set(r, d, k, eval(r, e->a->v[i], s));
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
		tmpl__scope_set(r, s, st->s, v);
		return;
	}
	if (v.t != V_LIST && v.t != V_STR && v.t != V_DICT) FAIL(r, "cannot unpack non-iterable %s object", tmpl__type_name(v));
	list *l = tmpl__iter_list(r, v);
	if (l->n != (size_t)st->n)
		FAIL(r, l->n < (size_t)st->n ? "not enough values to unpack (expected %d, got %zu)" : "too many values to unpack (expected %d, got %zu)", st->n, l->n);
	for (int i = 0; i < st->n; i++) tmpl__scope_set(r, s, st->names[i], l->v[i]);
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

void tmpl__output(R *r, buf *out, value v) {
	if (v.t == V_STR) tmpl__buf_put(r, out, v.s.p, v.s.n);
	else tmpl__to_buf(r, out, v, false, 0);
}

// An empty child scope of parent, reusing prev's storage when nothing captured it.
static scope *scope_fresh(R *r, scope *prev, scope *parent) {
	if (!prev || prev->captured) return tmpl__scope_new(r, parent);
	prev->n = 0;
	return prev;
}

static int exec_for(R *r, const node *st, scope *s, buf *out) {
	value it = eval(r, st->a, s);
	list *items = tmpl__iter_list(r, it);
	if (st->d) { // `for x in xs if cond`: filter first so loop.length counts what runs
		list *kept = tmpl__list_new(r, 0);
		scope *fs = NULL;
		for (size_t i = 0; i < items->n; i++) {
			fs = scope_fresh(r, fs, s);
			assign_targets(r, st, fs, items->v[i]);
			if (tmpl__truthy(eval(r, st->d, fs))) tmpl__list_push(r, kept, items->v[i]);
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
		tmpl__scope_set(r, is, (str_t){"loop", 4}, (value){.t = V_LOOP, .loop = L});
		assign_targets(r, st, is, items->v[i]);
		int fl = tmpl__exec(r, st->b, is, out);
		if (fl == FLOW_BREAK) break;
	}
	if (!items->n && st->c) return tmpl__exec(r, st->c, s, out);
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

int tmpl__exec(R *r, const node *st, scope *s, buf *out) {
	tmpl__step(r, 1);
	if (++r->depth > MAX_EVAL_DEPTH) tmpl__fail(r, LANES_ELIMIT, "template evaluation nested too deeply");
	r->line = st->line;
	int fl = FLOW_NEXT;
	switch (st->k) {
	case S_BODY:
		for (int i = 0; i < st->n && fl == FLOW_NEXT; i++) fl = tmpl__exec(r, st->v[i], s, out);
		break;
	case S_TEXT: tmpl__buf_put(r, out, st->s.p, st->s.n); break;
	case S_OUT: tmpl__output(r, out, eval(r, st->a, s)); break;
	case S_IF:
		if (tmpl__truthy(eval(r, st->a, s))) fl = tmpl__exec(r, st->b, s, out);
		else if (st->c) fl = tmpl__exec(r, st->c, s, out);
		break;
	case S_FOR: fl = exec_for(r, st, s, out); break;
	case S_SET: {
		value v = eval(r, st->a, s);
		if (st->op == 2) {
			value ns = lookup(r, s, st->s);
			if (ns.t != V_NS) FAIL(r, "cannot assign attribute on non-namespace object");
			tmpl__dict_set(r, ns.d, v_str(st->names[0].p, st->names[0].n), v);
		} else
			assign_targets(r, st, s, v);
		break;
	}
	case S_SETBLOCK: {
		buf b = {0};
		tmpl__exec(r, st->b, s, &b);
		value v = v_str(b.p ? b.p : "", b.n);
		v = apply_filters(r, st, s, v);
		if (st->op == 2) {
			value ns = lookup(r, s, st->s);
			if (ns.t != V_NS) FAIL(r, "cannot assign attribute on non-namespace object");
			tmpl__dict_set(r, ns.d, v_str(st->names[0].p, st->names[0].n), v);
		} else
			tmpl__scope_set(r, s, st->s, v);
		break;
	}
	case S_MACRO: tmpl__scope_set(r, s, st->s, make_macro(r, st, s)); break;
	case S_CALLBLOCK: {
		const node *ce = st->a;
		value f = eval(r, ce->a, s);
		args_t a;
		eval_args(r, ce, s, &a, NULL);
		if (f.t == V_FUNC && f.fn->kind == FN_MACRO) {
			func *g = tmpl__alloc(r, sizeof *g);
			*g = *f.fn;
			g->caller = make_macro(r, st->b, s);
			f.fn = g;
		}
		tmpl__output(r, out, call_value(r, f, &a));
		break;
	}
	case S_FILTERBLOCK: {
		buf b = {0};
		tmpl__exec(r, st->b, s, &b);
		tmpl__output(r, out, apply_filters(r, st, s, v_str(b.p ? b.p : "", b.n)));
		break;
	}
	case S_WITH: {
		scope *ws = tmpl__scope_new(r, s);
		for (int i = 0; i < st->n; i++) tmpl__scope_set(r, ws, st->names[i], eval(r, st->v[i], s));
		fl = tmpl__exec(r, st->b, ws, out);
		break;
	}
	case S_BREAK: fl = FLOW_BREAK; break;
	case S_CONTINUE: fl = FLOW_CONTINUE; break;
	default: FAIL(r, "internal: bad statement node");
	}
	r->depth--;
	return fl;
}
