// template/filters: the builtins — Python's str methods and their helpers, Jinja's filters
// and tests, the methods of str, list and dict, and the globals (range, namespace, ...).
#include "template/template_int.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <wctype.h>

#define MAX_RANGE 100000        // as Jinja's sandbox

// ---- code point classes ------------------------------------------------------------------

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

// ---- string helpers ------------------------------------------------------------------------------

static bool in_chars(uint32_t c, str_t chars) {
	const char *p = chars.p, *end = p + chars.n;
	while (p < end) {
		int l;
		if (tmpl__utf8_dec(p, end, &l) == c) return true;
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
			uint32_t c = tmpl__utf8_dec(p, end, &l);
			if (chars ? !in_chars(c, *chars) : !tmpl__py_space(c)) break;
			p += l;
		}
	if (right) {
		const char *keep = p, *q = p;
		while (q < end) {
			int l;
			uint32_t c = tmpl__utf8_dec(q, end, &l);
			q += l;
			if (chars ? !in_chars(c, *chars) : !tmpl__py_space(c)) keep = q;
		}
		end = keep;
	}
	return (str_t){p, (size_t)(end - p)};
}

enum casemode { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_TITLE_PY, CASE_TITLE_JINJA, CASE_SWAP };

static bool jinja_word_sep(uint32_t c) {
	return tmpl__py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
}

static value map_case(R *r, str_t s, int mode) {
	char *o = tmpl__alloc(r, s.n * 2 + 8);
	size_t k = 0, cap = s.n * 2 + 8;
	const char *p = s.p, *end = s.p + s.n;
	bool first = true, prev_cased = false, prev_sep = true;
	while (p < end) {
		int l;
		uint32_t c = tmpl__utf8_dec(p, end, &l), m = c;
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
			k += (size_t)tmpl__utf8_enc(m, o + k);
		p += l;
	}
	o[k] = 0;
	tmpl__step(r, (int64_t)(s.n >> 6));
	return v_str(o, k);
}

static value str_replace(R *r, str_t s, str_t old, str_t nw, int64_t count) {
	buf b = {0};
	if (count < 0) count = INT64_MAX;
	if (!old.n) { // inserts nw around every character
		const char *p = s.p, *end = s.p + s.n;
		int64_t done = 0;
		if (done < count) tmpl__buf_put(r, &b, nw.p, nw.n), done++;
		while (p < end) {
			int l;
			tmpl__utf8_dec(p, end, &l);
			tmpl__buf_put(r, &b, p, (size_t)l);
			p += l;
			if (done < count) tmpl__buf_put(r, &b, nw.p, nw.n), done++;
		}
		return v_str(b.p ? b.p : "", b.n);
	}
	const char *p = s.p, *end = s.p + s.n;
	int64_t done = 0;
	while (p < end && done < count) {
		const char *h = memmem(p, (size_t)(end - p), old.p, old.n);
		if (!h) break;
		tmpl__buf_put(r, &b, p, (size_t)(h - p));
		tmpl__buf_put(r, &b, nw.p, nw.n);
		p = h + old.n;
		done++;
	}
	if (!done) return v_str(s.p, s.n);
	tmpl__buf_put(r, &b, p, (size_t)(end - p));
	return v_str(b.p ? b.p : "", b.n);
}

// str.split / rsplit (sep NULL: runs of whitespace).
static value str_split(R *r, str_t s, const str_t *sep, int64_t maxsplit, bool from_right) {
	list *l = tmpl__list_new(r, 0);
	const char *p = s.p, *end = s.p + s.n;
	if (maxsplit < 0) maxsplit = INT64_MAX;
	if (sep && !sep->n) FAIL(r, "empty separator");
	if (!from_right) {
		if (!sep) {
			int64_t done = 0;
			for (;;) {
				int w;
				while ((w = tmpl__ws_at(p, end))) p += w;
				if (p >= end) break;
				if (done == maxsplit) {
					str_t rest = py_strip((str_t){p, (size_t)(end - p)}, NULL, false, true);
					tmpl__list_push(r, l, v_str(rest.p, rest.n));
					break;
				}
				const char *q = p;
				while (q < end && !tmpl__ws_at(q, end)) {
					int k;
					tmpl__utf8_dec(q, end, &k);
					q += k;
				}
				tmpl__list_push(r, l, v_str(p, (size_t)(q - p)));
				done++;
				p = q;
			}
		} else {
			int64_t done = 0;
			for (;;) {
				const char *h = done < maxsplit ? memmem(p, (size_t)(end - p), sep->p, sep->n) : NULL;
				if (!h) {
					tmpl__list_push(r, l, v_str(p, (size_t)(end - p)));
					break;
				}
				tmpl__list_push(r, l, v_str(p, (size_t)(h - p)));
				p = h + sep->n;
				done++;
			}
		}
		tmpl__step(r, (int64_t)l->n);
		return v_list(l);
	}
	// rsplit: collect from the right, then reverse
	list *rev = tmpl__list_new(r, 0);
	int64_t done = 0;
	if (!sep) {
		for (;;) {
			while (end > p && tmpl__py_space((unsigned char)end[-1])) end--;
			if (end <= p) break;
			if (done == maxsplit) {
				tmpl__list_push(r, rev, v_str(p, (size_t)(end - p)));
				break;
			}
			const char *q = end;
			while (q > p && !tmpl__py_space((unsigned char)q[-1])) q--;
			tmpl__list_push(r, rev, v_str(q, (size_t)(end - q)));
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
				tmpl__list_push(r, rev, v_str(p, (size_t)(end - p)));
				break;
			}
			tmpl__list_push(r, rev, v_str(h + sep->n, (size_t)(end - h - sep->n)));
			end = h;
			done++;
		}
	}
	for (size_t i = rev->n; i > 0; i--) tmpl__list_push(r, l, rev->v[i - 1]);
	tmpl__step(r, (int64_t)l->n);
	return v_list(l);
}

// Python str.splitlines(): the line breaks Python knows.
static list *splitlines(R *r, str_t s, bool keepends) {
	list *l = tmpl__list_new(r, 0);
	const char *p = s.p, *end = s.p + s.n, *start = p;
	while (p < end) {
		int n;
		uint32_t c = tmpl__utf8_dec(p, end, &n);
		bool br = c == '\n' || c == '\r' || c == 11 || c == 12 || (c >= 0x1c && c <= 0x1e) || c == 0x85 ||
			  c == 0x2028 || c == 0x2029;
		if (!br) {
			p += n;
			continue;
		}
		const char *le = p + n;
		if (c == '\r' && le < end && *le == '\n') le++;
		tmpl__list_push(r, l, v_str(start, (size_t)((keepends ? le : p) - start)));
		p = start = le;
	}
	if (start < end) tmpl__list_push(r, l, v_str(start, (size_t)(end - start)));
	return l;
}

// printf-style `fmt % args` for %s %r %d %i %f %x %%.
value tmpl__str_format_percent(R *r, str_t fmt, value args) {
	list *al;
	if (args.t == V_LIST && args.l->tuple) al = args.l;
	else {
		al = tmpl__list_new(r, 1);
		tmpl__list_push(r, al, args);
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
			tmpl__to_buf(r, &t, v, c != 's', 0);
			spec[k++] = '.';
			spec[k++] = '*';
			spec[k++] = 's';
			spec[k] = 0;
			if (k == 4) tmpl__buf_put(r, &b, t.p ? t.p : "", t.n);
			else {
				spec[k - 3] = 's';
				spec[k - 2] = 0;
				char *z = tmpl__sdup(r, t.p ? t.p : "", t.n);
				tmpl__buf_printf(r, &b, spec, z);
			}
		} else if (c == 'd' || c == 'i' || c == 'x' || c == 'X' || c == 'o') {
			if (!is_num(v)) FAIL(r, "%%%c format: a real number is required, not %s", c, tmpl__type_name(v));
			spec[k++] = 'l';
			spec[k++] = 'l';
			spec[k++] = c == 'i' ? 'd' : c;
			spec[k] = 0;
			tmpl__buf_printf(r, &b, spec, (long long)(v.t == V_FLOAT ? (int64_t)v.f : num_i(v)));
		} else if (c == 'f' || c == 'F' || c == 'e' || c == 'E' || c == 'g' || c == 'G') {
			if (!is_num(v)) FAIL(r, "must be real number, not %s", tmpl__type_name(v));
			spec[k++] = c;
			spec[k] = 0;
			tmpl__buf_printf(r, &b, spec, num_f(v));
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
			int k = atoi(tmpl__sdup(r, field.p, field.n));
			if (k >= a->npos) FAIL(r, "Replacement index %d out of range for positional args tuple", k);
			v = a->v[k];
		} else {
			bool found = false;
			for (int k = a->npos; k < a->n; k++)
				if (str_eqs(a->kn[k], field)) v = a->v[k], found = true;
			if (!found) FAIL(r, "'%.*s'", (int)field.n, field.p);
		}
		tmpl__output(r, &b, v);
		i = j;
	}
	return v_str(b.p ? b.p : "", b.n);
}

static int64_t cp_len(str_t s) { return (int64_t)tmpl__utf8_count(s.p, s.n); }

// Byte offset → code point offset.
static int64_t cp_index(str_t s, const char *at) { return (int64_t)tmpl__utf8_count(s.p, (size_t)(at - s.p)); }

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
		if (digits && part.n < 18) x = tmpl__get_item(r, x, v_int(atoll(tmpl__sdup(r, part.p, part.n))));
		else x = tmpl__get_item(r, x, v_str(part.p, part.n));
		p = dot + 1;
	}
	return x;
}

static value attr_arg(R *r, value x, value attribute) {
	if (is_intlike(attribute)) return tmpl__get_item(r, x, attribute);
	return attr_path(r, x, tmpl__want_str(r, attribute, "attribute"));
}

// ---- filters -------------------------------------------------------------------------------------

static value f_safe(R *r, value x, args_t *a) {
	(void)a;
	value v = x.t == V_STR ? x : v_str(tmpl__to_str(r, x).p, tmpl__to_str(r, x).n);
	v.safe = 1;
	return v;
}

static value f_string(R *r, value x, args_t *a) {
	(void)a;
	if (x.t == V_STR) return x;
	str_t s = tmpl__to_str(r, x);
	return v_str(s.p, s.n);
}

static value f_trim(R *r, value x, args_t *a) {
	value c = tmpl__arg(a, 0, "chars", NONE);
	str_t s = tmpl__to_str(r, x);
	if (c.t == V_STR) return keep_safe(x, (value){.t = V_STR, .s = py_strip(s, &c.s, true, true)});
	return keep_safe(x, (value){.t = V_STR, .s = py_strip(s, NULL, true, true)});
}

static value f_upper(R *r, value x, args_t *a) { (void)a; return keep_safe(x, map_case(r, tmpl__to_str(r, x), CASE_UPPER)); }
static value f_lower(R *r, value x, args_t *a) { (void)a; return keep_safe(x, map_case(r, tmpl__to_str(r, x), CASE_LOWER)); }
static value f_capitalize(R *r, value x, args_t *a) { (void)a; return keep_safe(x, map_case(r, tmpl__to_str(r, x), CASE_CAPITALIZE)); }
static value f_title(R *r, value x, args_t *a) { (void)a; return map_case(r, tmpl__to_str(r, x), CASE_TITLE_JINJA); }

static value f_length(R *r, value x, args_t *a) {
	(void)a;
	switch (x.t) {
	case V_UNDEF: return v_int(0);
	case V_STR: return v_int(cp_len(x.s));
	case V_LIST:
		if (is_iter(x)) FAIL(r, "object of type '%s' has no len()", tmpl__type_name(x));
		return v_int((int64_t)x.l->n);
	case V_DICT: return v_int((int64_t)x.d->n);
	case V_LOOP: return v_int((int64_t)x.loop->items->n);
	default: FAIL(r, "object of type '%s' has no len()", tmpl__type_name(x));
	}
}

static value f_tojson(R *r, value x, args_t *a) {
	json_opts o = {0};
	o.ascii = tmpl__truthy(tmpl__arg(a, 0, "ensure_ascii", v_bool(false)));
	value ind = tmpl__arg(a, 1, "indent", NONE);
	value seps = tmpl__arg(a, 2, "separators", NONE);
	o.sort_keys = tmpl__truthy(tmpl__arg(a, 3, "sort_keys", v_bool(false)));
	if (ind.t == V_INT || ind.t == V_BOOL) {
		int64_t n = num_i(ind);
		if (n > 64) n = 64;
		char *s = tmpl__alloc(r, (size_t)(n > 0 ? n : 0) + 1);
		for (int64_t i = 0; i < n; i++) s[i] = ' ';
		s[n > 0 ? n : 0] = 0;
		o.indent = s;
	} else if (ind.t == V_STR) o.indent = tmpl__sdup(r, ind.s.p, ind.s.n);
	else if (ind.t != V_NONE && ind.t != V_UNDEF) FAIL(r, "tojson indent must be an integer or string");
	o.item_sep = o.indent ? (str_t){",", 1} : (str_t){", ", 2};
	o.key_sep = (str_t){": ", 2};
	if (seps.t == V_LIST && seps.l->n == 2 && seps.l->v[0].t == V_STR && seps.l->v[1].t == V_STR) {
		o.item_sep = seps.l->v[0].s;
		o.key_sep = seps.l->v[1].s;
	} else if (seps.t != V_NONE && seps.t != V_UNDEF)
		FAIL(r, "tojson separators must be a pair of strings");
	buf b = {0};
	tmpl__json_val(r, &b, x, &o, 0);
	return v_str(b.p, b.n);
}

static value f_default(R *r, value x, args_t *a) {
	(void)r;
	value d = tmpl__arg(a, 0, "default_value", v_str("", 0));
	bool boolean = tmpl__truthy(tmpl__arg(a, 1, "boolean", v_bool(false)));
	if (x.t == V_UNDEF || (boolean && !tmpl__truthy(x))) return d;
	return x;
}

static value f_list(R *r, value x, args_t *a) {
	(void)a;
	list *src = tmpl__iter_list(r, x);
	list *l = tmpl__list_new(r, src->n);
	for (size_t i = 0; i < src->n; i++) tmpl__list_push(r, l, src->v[i]);
	return v_list(l);
}

static value f_items(R *r, value x, args_t *a) {
	(void)a;
	if (x.t == V_UNDEF) return v_list(tmpl__list_new(r, 0));
	if (x.t != V_DICT) FAIL(r, "Can only get item pairs from a mapping.");
	list *l = tmpl__list_new(r, x.d->n);
	for (size_t i = 0; i < x.d->n; i++) tmpl__list_push(r, l, tmpl__tuple2(r, x.d->k[i], x.d->v[i]));
	l->kind = LK_GEN;
	return v_list(l);
}

static value f_join(R *r, value x, args_t *a) {
	value sep = tmpl__arg(a, 0, "d", v_str("", 0));
	value attribute = tmpl__arg(a, 1, "attribute", NONE);
	str_t d = tmpl__to_str(r, sep);
	list *l = tmpl__iter_list(r, x);
	buf b = {0};
	for (size_t i = 0; i < l->n; i++) {
		if (i) tmpl__buf_put(r, &b, d.p, d.n);
		value v = attribute.t != V_NONE ? attr_arg(r, l->v[i], attribute) : l->v[i];
		tmpl__output(r, &b, v);
	}
	return v_str(b.p ? b.p : "", b.n);
}

static value f_first(R *r, value x, args_t *a) {
	(void)a;
	list *l = tmpl__iter_list(r, x);
	return l->n ? l->v[0] : v_undef("No first item, sequence was empty.");
}

static value f_last(R *r, value x, args_t *a) {
	(void)a;
	if (x.t == V_LIST && x.l->kind == LK_GEN) FAIL(r, "'generator' object is not reversible");
	list *l = tmpl__iter_list(r, x);
	return l->n ? l->v[l->n - 1] : v_undef("No last item, sequence was empty.");
}

static value f_replace(R *r, value x, args_t *a) {
	str_t s = tmpl__to_str(r, x);
	str_t old = tmpl__to_str(r, tmpl__arg(a, 0, "old", v_str("", 0)));
	str_t nw = tmpl__to_str(r, tmpl__arg(a, 1, "new", v_str("", 0)));
	value c = tmpl__arg(a, 2, "count", NONE);
	return str_replace(r, s, old, nw, c.t == V_NONE ? -1 : tmpl__want_int(r, c, "count"));
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
	value d = tmpl__arg(a, 0, "default", v_int(0));
	int base = (int)tmpl__want_int(r, tmpl__arg(a, 1, "base", v_int(10)), "base");
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
	value d = tmpl__arg(a, 0, "default", v_float(0));
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
	if (x.t == V_UNDEF) tmpl__undef_fail(r, x);
	FAIL(r, "bad operand type for abs(): '%s'", tmpl__type_name(x));
}

static value f_round(R *r, value x, args_t *a) {
	int64_t prec = tmpl__want_int(r, tmpl__arg(a, 0, "precision", v_int(0)), "precision");
	str_t method = tmpl__want_str(r, tmpl__arg(a, 1, "method", v_cstr("common")), "method");
	if (x.t == V_UNDEF) tmpl__undef_fail(r, x);
	if (!is_num(x)) FAIL(r, "type %s doesn't define __round__ method", tmpl__type_name(x));
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
		list *l = tmpl__iter_list(r, x);
		buf b = {0};
		for (size_t i = l->n; i > 0; i--) tmpl__buf_put(r, &b, l->v[i - 1].s.p, l->v[i - 1].s.n);
		return v_str(b.p ? b.p : "", b.n);
	}
	bool iter = is_iter(x);
	list *src = tmpl__iter_list(r, x);
	list *l = tmpl__list_new(r, src->n);
	for (size_t i = src->n; i > 0; i--) tmpl__list_push(r, l, src->v[i - 1]);
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
		tmpl__step(r, 1);
		if (tmpl__v_cmp(r, keys[j], keys[i], "<", 0) < 0) ti[k] = items[j], tk[k++] = keys[j++];
		else ti[k] = items[i], tk[k++] = keys[i++];
	}
	while (i < h) ti[k] = items[i], tk[k++] = keys[i++];
	while (j < n) ti[k] = items[j], tk[k++] = keys[j++];
	memcpy(items, ti, n * sizeof(value));
	memcpy(keys, tk, n * sizeof(value));
}

static list *sorted(R *r, list *src, value attribute, bool cs, bool reverse, int key_index) {
	size_t n = src->n;
	list *l = tmpl__list_new(r, n);
	value *keys = tmpl__alloc_arr(r, n + 1, sizeof(value)), *ti = tmpl__alloc_arr(r, n + 1, sizeof(value)),
	      *tk = tmpl__alloc_arr(r, n + 1, sizeof(value));
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
	bool reverse = tmpl__truthy(tmpl__arg(a, 0, "reverse", v_bool(false)));
	bool cs = tmpl__truthy(tmpl__arg(a, 1, "case_sensitive", v_bool(false)));
	value attribute = tmpl__arg(a, 2, "attribute", NONE);
	return v_list(sorted(r, tmpl__iter_list(r, x), attribute, cs, reverse, -1));
}

static value f_dictsort(R *r, value x, args_t *a) {
	bool cs = tmpl__truthy(tmpl__arg(a, 0, "case_sensitive", v_bool(false)));
	str_t by = tmpl__want_str(r, tmpl__arg(a, 1, "by", v_cstr("key")), "by");
	bool reverse = tmpl__truthy(tmpl__arg(a, 2, "reverse", v_bool(false)));
	int ki = str_eq(by, "key") ? 0 : str_eq(by, "value") ? 1 : -1;
	if (ki < 0) FAIL(r, "You can only sort by either \"key\" or \"value\"");
	value items = f_items(r, x, a);
	return v_list(sorted(r, items.l, NONE, cs, reverse, ki));
}

static value f_unique(R *r, value x, args_t *a) {
	bool cs = tmpl__truthy(tmpl__arg(a, 0, "case_sensitive", v_bool(false)));
	value attribute = tmpl__arg(a, 1, "attribute", NONE);
	list *src = tmpl__iter_list(r, x), *out = tmpl__list_new(r, 0), *seen = tmpl__list_new(r, 0);
	for (size_t i = 0; i < src->n; i++) {
		value k = sort_key(r, src->v[i], attribute, cs);
		if (tmpl__v_in(r, k, v_list(seen))) continue;
		tmpl__list_push(r, seen, k);
		tmpl__list_push(r, out, src->v[i]);
	}
	out->kind = LK_GEN;
	return v_list(out);
}

static value f_indent(R *r, value x, args_t *a) {
	value w = tmpl__arg(a, 0, "width", v_int(4));
	bool first = tmpl__truthy(tmpl__arg(a, 1, "first", v_bool(false)));
	bool blank = tmpl__truthy(tmpl__arg(a, 2, "blank", v_bool(false)));
	str_t ind;
	if (w.t == V_STR) ind = w.s;
	else {
		int64_t n = tmpl__want_int(r, w, "width");
		if (n < 0) n = 0;
		if (n > 1024) n = 1024;
		value sp = tmpl__repeat(r, v_str(" ", 1), n);
		ind = sp.s;
	}
	str_t s = tmpl__to_str(r, x);
	value withnl = tmpl__concat_str(r, s, (str_t){"\n", 1});
	list *lines = splitlines(r, withnl.s, false);
	buf b = {0};
	if (first) tmpl__buf_put(r, &b, ind.p, ind.n);
	for (size_t i = 0; i < lines->n; i++) {
		str_t ln = lines->v[i].s;
		if (i) {
			buf_putc(r, &b, '\n');
			if (blank || ln.n) tmpl__buf_put(r, &b, ind.p, ind.n);
		}
		tmpl__buf_put(r, &b, ln.p, ln.n);
	}
	return keep_safe(x, v_str(b.p ? b.p : "", b.n));
}

static value f_wordcount(R *r, value x, args_t *a) {
	(void)a;
	str_t s = tmpl__to_str(r, x);
	int64_t n = 0;
	bool in = false;
	const char *p = s.p, *end = s.p + s.n;
	while (p < end) {
		int l;
		uint32_t c = tmpl__utf8_dec(p, end, &l);
		bool w = c == '_' || cp_digit(c) || cp_alpha(c) || (c >= 0x80 && !tmpl__py_space(c) && c != 0x85);
		if (w && !in) n++;
		in = w;
		p += l;
	}
	return v_int(n);
}

static value f_batch(R *r, value x, args_t *a) {
	int64_t n = tmpl__want_int(r, tmpl__arg(a, 0, "linecount", v_int(1)), "linecount");
	value fill = tmpl__arg(a, 1, "fill_with", NONE);
	bool has_fill = tmpl__has_arg(a, 1, "fill_with");
	if (n <= 0) FAIL(r, "batch size must be positive");
	list *src = tmpl__iter_list(r, x), *out = tmpl__list_new(r, 0), *cur_ = NULL;
	for (size_t i = 0; i < src->n; i++) {
		if (!cur_ || (int64_t)cur_->n == n) {
			cur_ = tmpl__list_new(r, 0);
			tmpl__list_push(r, out, v_list(cur_));
		}
		tmpl__list_push(r, cur_, src->v[i]);
	}
	if (cur_ && has_fill)
		while ((int64_t)cur_->n < n) tmpl__list_push(r, cur_, fill);
	out->kind = LK_GEN;
	return v_list(out);
}

static value f_center(R *r, value x, args_t *a) {
	int64_t w = tmpl__want_int(r, tmpl__arg(a, 0, "width", v_int(80)), "width");
	str_t s = tmpl__to_str(r, x);
	int64_t len = cp_len(s);
	if (w <= len) return v_str(s.p, s.n);
	if (w > r->max_output) tmpl__fail(r, LANES_ELIMIT, "center width too large");
	int64_t total = w - len, left = total / 2 + (total & w & 1);
	buf b = {0};
	for (int64_t i = 0; i < left; i++) buf_putc(r, &b, ' ');
	tmpl__buf_put(r, &b, s.p, s.n);
	for (int64_t i = 0; i < total - left; i++) buf_putc(r, &b, ' ');
	return keep_safe(x, v_str(b.p, b.n));
}

static value f_sum(R *r, value x, args_t *a) {
	value attribute = tmpl__arg(a, 0, "attribute", NONE);
	value acc = tmpl__arg(a, 1, "start", v_int(0));
	list *l = tmpl__iter_list(r, x);
	for (size_t i = 0; i < l->n; i++) {
		value v = attribute.t != V_NONE ? attr_arg(r, l->v[i], attribute) : l->v[i];
		acc = tmpl__arith(r, OP_ADD, acc, v);
	}
	return acc;
}

static value minmax(R *r, value x, args_t *a, int sign) {
	bool cs = tmpl__truthy(tmpl__arg(a, 0, "case_sensitive", v_bool(false)));
	value attribute = tmpl__arg(a, 1, "attribute", NONE);
	list *l = tmpl__iter_list(r, x);
	if (!l->n) return v_undef(sign < 0 ? "No aggregated item, sequence was empty." : "No aggregated item, sequence was empty.");
	size_t best = 0;
	value bk = sort_key(r, l->v[0], attribute, cs);
	for (size_t i = 1; i < l->n; i++) {
		value k = sort_key(r, l->v[i], attribute, cs);
		if (tmpl__v_cmp(r, k, bk, "<", 0) * sign > 0) best = i, bk = k;
	}
	return l->v[best];
}
static value f_min(R *r, value x, args_t *a) { return minmax(r, x, a, -1); }
static value f_max(R *r, value x, args_t *a) { return minmax(r, x, a, 1); }

static value f_format(R *r, value x, args_t *a) {
	list *l = tmpl__list_new(r, (size_t)a->npos);
	l->tuple = true;
	for (int i = 0; i < a->npos; i++) tmpl__list_push(r, l, a->v[i]);
	if (x.t != V_STR) x = v_str(tmpl__to_str(r, x).p, tmpl__to_str(r, x).n);
	return tmpl__arith(r, OP_MOD, x, v_list(l));
}

static value f_attr(R *r, value x, args_t *a) {
	str_t name = tmpl__want_str(r, tmpl__arg(a, 0, "name", v_str("", 0)), "attribute name");
	return tmpl__get_attr(r, x, name);
}

static value f_escape(R *r, value x, args_t *a) {
	(void)a;
	return tmpl__html_escape(r, x);
}

static value f_forceescape(R *r, value x, args_t *a) {
	(void)a;
	if (x.t == V_STR) x.safe = 0;
	return tmpl__html_escape(r, x);
}

// markupsafe.escape: Markup passes through, anything else is stringified and escaped.
value tmpl__html_escape(R *r, value x) {
	if (x.t == V_STR && x.safe) return x;
	str_t s = tmpl__to_str(r, x);
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
	str_t s = tmpl__to_str(r, x);
	int64_t length = tmpl__want_int(r, tmpl__arg(a, 0, "length", v_int(255)), "length");
	bool killwords = tmpl__truthy(tmpl__arg(a, 1, "killwords", v_bool(false)));
	str_t end = tmpl__to_str(r, tmpl__arg(a, 2, "end", v_cstr("...")));
	value lw = tmpl__arg(a, 3, "leeway", NONE);
	int64_t leeway = lw.t == V_NONE ? 5 : tmpl__want_int(r, lw, "leeway");
	list *cs = tmpl__iter_list(r, v_str(s.p, s.n));
	if ((int64_t)cs->n <= length + leeway) return v_str(s.p, s.n);
	int64_t keep = length - cp_len(end);
	if (keep < 0) keep = 0;
	value head = tmpl__slice(r, v_str(s.p, s.n), NONE, v_int(keep), NONE);
	if (!killwords) {
		value parts = str_split(r, head.s, &(str_t){" ", 1}, 1, true);
		head = parts.l->v[0];
	}
	return tmpl__concat_str(r, head.s, end);
}

// map / select / reject and their attribute forms.
static value call_filter_by_name(R *r, str_t name, value x, args_t *rest) {
	const filter_def *f = tmpl__find_filter(name);
	if (!f) FAIL(r, "no filter named '%.*s'", (int)name.n, name.p);
	return f->fn(r, x, rest);
}

static bool call_test_by_name(R *r, str_t name, value x, args_t *rest) {
	const test_def *t = tmpl__find_test(name);
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
	list *src = tmpl__truthy(x) ? tmpl__iter_list(r, x) : tmpl__list_new(r, 0), *out = tmpl__list_new(r, src->n);
	if (tmpl__has_arg(a, -1, "attribute")) {
		value attribute = tmpl__arg(a, -1, "attribute", NONE);
		bool has_d = tmpl__has_arg(a, -1, "default");
		value d = tmpl__arg(a, -1, "default", NONE);
		for (size_t i = 0; i < src->n; i++) {
			value v = attr_arg(r, src->v[i], attribute);
			tmpl__list_push(r, out, v.t == V_UNDEF && has_d ? d : v);
		}
		out->kind = LK_GEN;
		return v_list(out);
	}
	if (a->npos < 1) FAIL(r, "map requires a filter argument");
	str_t name = tmpl__want_str(r, a->v[0], "filter name");
	args_t rest = args_from(a, 1);
	for (size_t i = 0; i < src->n; i++) tmpl__list_push(r, out, call_filter_by_name(r, name, src->v[i], &rest));
	out->kind = LK_GEN;
	return v_list(out);
}

static value select_impl(R *r, value x, args_t *a, bool attr, bool want) {
	list *src = tmpl__truthy(x) ? tmpl__iter_list(r, x) : tmpl__list_new(r, 0), *out = tmpl__list_new(r, 0);
	int k = 0;
	value attribute = NONE;
	if (attr) {
		if (a->npos < 1) FAIL(r, "selectattr requires an attribute");
		attribute = a->v[k++];
	}
	bool has_test = a->npos > k;
	str_t test = has_test ? tmpl__want_str(r, a->v[k], "test name") : (str_t){0};
	args_t rest = args_from(a, k + 1);
	for (size_t i = 0; i < src->n; i++) {
		value v = attr ? attr_arg(r, src->v[i], attribute) : src->v[i];
		bool t = has_test ? call_test_by_name(r, test, v, &rest) : tmpl__truthy(v);
		if (t == want) tmpl__list_push(r, out, src->v[i]);
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

const filter_def *tmpl__find_filter(str_t name) {
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
static bool t_odd(R *r, value x, args_t *a) { (void)a; return (tmpl__want_int(r, x, "value") & 1) != 0; }
static bool t_even(R *r, value x, args_t *a) { (void)a; return (tmpl__want_int(r, x, "value") & 1) == 0; }
static bool t_divisibleby(R *r, value x, args_t *a) {
	value d = targ(r, a);
	if (is_intlike(x) && is_intlike(d)) {
		if (num_i(d) == 0) FAIL(r, "integer division or modulo by zero");
		if (num_i(d) == -1) return true;
		return num_i(x) % num_i(d) == 0;
	}
	return tmpl__truthy(v_bool(num_f(tmpl__arith(r, OP_MOD, x, d)) == 0));
}
static bool t_eq(R *r, value x, args_t *a) { return tmpl__v_eq(r, x, targ(r, a), 0); }
static bool t_ne(R *r, value x, args_t *a) { return !tmpl__v_eq(r, x, targ(r, a), 0); }
static bool t_lt(R *r, value x, args_t *a) { return tmpl__v_cmp(r, x, targ(r, a), "<", 0) < 0; }
static bool t_le(R *r, value x, args_t *a) { return tmpl__v_cmp(r, x, targ(r, a), "<=", 0) <= 0; }
static bool t_gt(R *r, value x, args_t *a) { return tmpl__v_cmp(r, x, targ(r, a), ">", 0) > 0; }
static bool t_ge(R *r, value x, args_t *a) { return tmpl__v_cmp(r, x, targ(r, a), ">=", 0) >= 0; }
static bool t_in(R *r, value x, args_t *a) { return tmpl__v_in(r, x, targ(r, a)); }
static bool t_sameas(R *r, value x, args_t *a) {
	value y = targ(r, a);
	if (x.t != y.t) return false;
	if (x.t == V_LIST) return x.l == y.l;
	if (x.t == V_DICT || x.t == V_NS) return x.d == y.d;
	return tmpl__v_eq(r, x, y, 0);
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
static bool t_filter(R *r, value x, args_t *a) { (void)r, (void)a; return x.t == V_STR && tmpl__find_filter(x.s); }
static bool t_test(R *r, value x, args_t *a) { (void)r, (void)a; return x.t == V_STR && tmpl__find_test(x.s); }

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

const test_def *tmpl__find_test(str_t name) {
	for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
		if (str_eq(name, tests[i].name)) return &tests[i];
	return NULL;
}

// ---- methods of str, list and dict -----------------------------------------------------------

static value m_strip_any(R *r, value self, args_t *a, bool l, bool rt) {
	value c = tmpl__arg(a, 0, "chars", NONE);
	if (c.t == V_STR) return (value){.t = V_STR, .s = py_strip(self.s, &c.s, l, rt)};
	if (c.t != V_NONE) FAIL(r, "strip arg must be None or str");
	return (value){.t = V_STR, .s = py_strip(self.s, NULL, l, rt)};
}
static value m_strip(R *r, value self, args_t *a) { return m_strip_any(r, self, a, true, true); }
static value m_lstrip(R *r, value self, args_t *a) { return m_strip_any(r, self, a, true, false); }
static value m_rstrip(R *r, value self, args_t *a) { return m_strip_any(r, self, a, false, true); }

static value m_split_any(R *r, value self, args_t *a, bool right) {
	value sep = tmpl__arg(a, 0, "sep", NONE);
	int64_t maxsplit = tmpl__want_int(r, tmpl__arg(a, 1, "maxsplit", v_int(-1)), "maxsplit");
	if (sep.t == V_NONE) return str_split(r, self.s, NULL, maxsplit, right);
	str_t s = tmpl__want_str(r, sep, "separator");
	return str_split(r, self.s, &s, maxsplit, right);
}
static value m_split(R *r, value self, args_t *a) { return m_split_any(r, self, a, false); }
static value m_rsplit(R *r, value self, args_t *a) { return m_split_any(r, self, a, true); }
static value m_splitlines(R *r, value self, args_t *a) {
	return v_list(splitlines(r, self.s, tmpl__truthy(tmpl__arg(a, 0, "keepends", v_bool(false)))));
}

static bool affix(str_t s, str_t x, bool end) {
	if (x.n > s.n) return false;
	return !memcmp(end ? s.p + s.n - x.n : s.p, x.p, x.n);
}

// The [start, end) code-point window for startswith/endswith/find/count.
static str_t window(R *r, str_t s, args_t *a, int pos) {
	value st = tmpl__arg(a, pos, "start", NONE), en = tmpl__arg(a, pos + 1, "end", NONE);
	if (st.t == V_NONE && en.t == V_NONE) return s;
	value w = tmpl__slice(r, v_str(s.p, s.n), st, en, NONE);
	return w.s;
}

static value m_affix(R *r, value self, args_t *a, bool end) {
	value x = tmpl__arg(a, 0, end ? "suffix" : "prefix", NONE);
	str_t s = window(r, self.s, a, 1);
	if (x.t == V_LIST && x.l->tuple) {
		for (size_t i = 0; i < x.l->n; i++)
			if (affix(s, tmpl__want_str(r, x.l->v[i], "affix"), end)) return v_bool(true);
		return v_bool(false);
	}
	if (x.t != V_STR) FAIL(r, "%s first arg must be str or a tuple of str, not %s", end ? "endswith" : "startswith", tmpl__type_name(x));
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
	str_t old = tmpl__want_str(r, tmpl__arg(a, 0, "old", NONE), "replace() argument 1");
	str_t nw = tmpl__want_str(r, tmpl__arg(a, 1, "new", NONE), "replace() argument 2");
	return str_replace(r, self.s, old, nw, tmpl__want_int(r, tmpl__arg(a, 2, "count", v_int(-1)), "count"));
}

static int64_t find_impl(R *r, value self, args_t *a, bool from_right) {
	str_t sub = tmpl__want_str(r, tmpl__arg(a, 0, "sub", NONE), "substring");
	value st = tmpl__arg(a, 1, "start", NONE);
	int64_t base = 0;
	str_t s = self.s;
	if (st.t != V_NONE || tmpl__arg(a, 2, "end", NONE).t != V_NONE) {
		s = window(r, self.s, a, 1);
		if (st.t != V_NONE) {
			int64_t i = tmpl__want_int(r, st, "start"), n = cp_len(self.s);
			base = i < 0 ? (i + n < 0 ? 0 : i + n) : (i > n ? n : i);
		}
	}
	tmpl__step(r, (int64_t)(s.n >> 6));
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
	str_t sub = tmpl__want_str(r, tmpl__arg(a, 0, "sub", NONE), "substring");
	str_t s = window(r, self.s, a, 1);
	if (!sub.n) return v_int(cp_len(s) + 1);
	int64_t n = 0;
	const char *p = s.p, *end = s.p + s.n, *h;
	while ((h = memmem(p, (size_t)(end - p), sub.p, sub.n))) n++, p = h + sub.n;
	tmpl__step(r, (int64_t)(s.n >> 6));
	return v_int(n);
}

static value m_format(R *r, value self, args_t *a) { return str_format_braces(r, self.s, a); }

static value m_join(R *r, value self, args_t *a) {
	list *l = tmpl__iter_list(r, tmpl__arg(a, 0, "iterable", NONE));
	buf b = {0};
	for (size_t i = 0; i < l->n; i++) {
		value it = l->v[i];
		if (self.safe) it = tmpl__html_escape(r, it); // Markup.join escapes the items
		if (it.t != V_STR) FAIL(r, "sequence item %zu: expected str instance, %s found", i, tmpl__type_name(it));
		if (i) tmpl__buf_put(r, &b, self.s.p, self.s.n);
		tmpl__buf_put(r, &b, it.s.p, it.s.n);
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
		uint32_t c = tmpl__utf8_dec(p, end, &l);
		p += l;
		bool ok;
		switch (kind) {
		case 0: ok = cp_digit(c); break;
		case 1: ok = cp_alpha(c); break;
		case 2: ok = cp_alpha(c) || cp_digit(c); break;
		case 3: ok = tmpl__py_space(c); break;
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
	str_t x = tmpl__want_str(r, tmpl__arg(a, 0, "prefix", NONE), "prefix");
	return affix(self.s, x, false) ? v_str(self.s.p + x.n, self.s.n - x.n) : self;
}
static value m_removesuffix(R *r, value self, args_t *a) {
	str_t x = tmpl__want_str(r, tmpl__arg(a, 0, "suffix", NONE), "suffix");
	return affix(self.s, x, true) ? v_str(self.s.p, self.s.n - x.n) : self;
}

static value m_partition_any(R *r, value self, args_t *a, bool right) {
	str_t sep = tmpl__want_str(r, tmpl__arg(a, 0, "sep", NONE), "separator");
	if (!sep.n) FAIL(r, "empty separator");
	value parts = str_split(r, self.s, &sep, 1, right);
	list *l = tmpl__list_new(r, 3);
	l->tuple = true;
	if (parts.l->n == 2) {
		tmpl__list_push(r, l, parts.l->v[0]);
		tmpl__list_push(r, l, v_str(sep.p, sep.n));
		tmpl__list_push(r, l, parts.l->v[1]);
	} else if (right) {
		tmpl__list_push(r, l, v_str("", 0));
		tmpl__list_push(r, l, v_str("", 0));
		tmpl__list_push(r, l, self);
	} else {
		tmpl__list_push(r, l, self);
		tmpl__list_push(r, l, v_str("", 0));
		tmpl__list_push(r, l, v_str("", 0));
	}
	return v_list(l);
}
static value m_partition(R *r, value self, args_t *a) { return m_partition_any(r, self, a, false); }
static value m_rpartition(R *r, value self, args_t *a) { return m_partition_any(r, self, a, true); }

static value m_center(R *r, value self, args_t *a) { return f_center(r, self, a); }

static value m_zfill(R *r, value self, args_t *a) {
	int64_t w = tmpl__want_int(r, tmpl__arg(a, 0, "width", v_int(0)), "width");
	int64_t n = cp_len(self.s);
	if (w <= n) return self;
	if (w > r->max_output) tmpl__fail(r, LANES_ELIMIT, "zfill width too large");
	buf b = {0};
	size_t signlen = self.s.n && (self.s.p[0] == '-' || self.s.p[0] == '+');
	tmpl__buf_put(r, &b, self.s.p, signlen);
	for (int64_t i = 0; i < w - n; i++) buf_putc(r, &b, '0');
	tmpl__buf_put(r, &b, self.s.p + signlen, self.s.n - signlen);
	return v_str(b.p, b.n);
}

static value m_list_index(R *r, value self, args_t *a) {
	value x = tmpl__arg(a, 0, "value", NONE);
	for (size_t i = 0; i < self.l->n; i++)
		if (tmpl__v_eq(r, self.l->v[i], x, 0)) return v_int((int64_t)i);
	FAIL(r, "value is not in list");
}
static value m_list_count(R *r, value self, args_t *a) {
	value x = tmpl__arg(a, 0, "value", NONE);
	int64_t n = 0;
	for (size_t i = 0; i < self.l->n; i++) n += tmpl__v_eq(r, self.l->v[i], x, 0);
	return v_int(n);
}

static value m_items(R *r, value self, args_t *a) {
	value v = f_items(r, self, a);
	v.l->kind = LK_ITEMS;
	return v;
}
static value m_keys(R *r, value self, args_t *a) {
	(void)a;
	list *l = tmpl__list_new(r, self.d->n);
	for (size_t i = 0; i < self.d->n; i++) tmpl__list_push(r, l, self.d->k[i]);
	l->kind = LK_KEYS;
	return v_list(l);
}
static value m_values(R *r, value self, args_t *a) {
	(void)a;
	list *l = tmpl__list_new(r, self.d->n);
	for (size_t i = 0; i < self.d->n; i++) tmpl__list_push(r, l, self.d->v[i]);
	l->kind = LK_VALUES;
	return v_list(l);
}
static value m_get(R *r, value self, args_t *a) {
	if (a->n < 1) FAIL(r, "get expected at least 1 argument, got 0");
	value *v = tmpl__dict_find(r, self.d, a->v[0]);
	return v ? *v : tmpl__arg(a, 1, "default", NONE);
}
static value m_copy(R *r, value self, args_t *a) {
	(void)a;
	dict *d = dict_new(r);
	for (size_t i = 0; i < self.d->n; i++) tmpl__dict_set(r, d, self.d->k[i], self.d->v[i]);
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

const method_def *tmpl__find_method(uint8_t type, str_t name) {
	for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
		if (methods[i].type == type && str_eq(name, methods[i].name)) return &methods[i];
	return NULL;
}

// Methods that mutate: Jinja's immutable sandbox refuses them.
bool tmpl__unsafe_method(uint8_t type, str_t name) {
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
	if (a->npos == 1) stop = tmpl__want_int(r, a->v[0], "range() argument");
	else if (a->npos == 2 || a->npos == 3) {
		start = tmpl__want_int(r, a->v[0], "range() argument");
		stop = tmpl__want_int(r, a->v[1], "range() argument");
		if (a->npos == 3) st = tmpl__want_int(r, a->v[2], "range() argument");
	} else
		FAIL(r, "range expected 1 to 3 arguments, got %d", a->npos);
	if (st == 0) FAIL(r, "range() arg 3 must not be zero");
	double cnt = ceil(((double)stop - (double)start) / (double)st);
	if (cnt > MAX_RANGE) FAIL(r, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
	list *l = tmpl__list_new(r, cnt > 0 ? (size_t)cnt : 0);
	for (int64_t i = start; st > 0 ? i < stop : i > stop; i += st) tmpl__list_push(r, l, v_int(i));
	tmpl__step(r, (int64_t)l->n);
	return v_list(l);
}

static value g_namespace(R *r, value self, args_t *a) {
	(void)self;
	dict *d = dict_new(r);
	for (int i = 0; i < a->npos; i++) {
		if (a->v[i].t != V_DICT) FAIL(r, "namespace() positional argument must be a mapping");
		for (size_t k = 0; k < a->v[i].d->n; k++) tmpl__dict_set(r, d, a->v[i].d->k[k], a->v[i].d->v[k]);
	}
	for (int i = a->npos; i < a->n; i++) tmpl__dict_set(r, d, v_str(a->kn[i].p, a->kn[i].n), a->v[i]);
	return (value){.t = V_NS, .d = d};
}

static value g_dict(R *r, value self, args_t *a) {
	value ns = g_namespace(r, self, a);
	return v_dict(ns.d);
}

static value g_raise(R *r, value self, args_t *a) {
	(void)self;
	str_t m = a->n ? tmpl__to_str(r, a->v[0]) : (str_t){"", 0};
	tmpl__fail(r, LANES_EINVAL, "%.*s", (int)m.n, m.p);
}

static pthread_once_t cloc_once = PTHREAD_ONCE_INIT;
static locale_t c_loc;
static void cloc_init(void) { c_loc = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

static value g_strftime(R *r, value self, args_t *a) {
	(void)self;
	str_t fmt = tmpl__want_str(r, tmpl__arg(a, 0, "format", NONE), "strftime format");
	pthread_once(&cloc_once, cloc_init);
	char *f = tmpl__sdup(r, fmt.p, fmt.n);
	size_t cap = fmt.n * 16 + 64;
	char *o = tmpl__alloc(r, cap);
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

value tmpl__builtin_global(R *r, str_t name) {
	for (size_t i = 0; i < sizeof global_fns / sizeof global_fns[0]; i++)
		if (str_eq(name, global_fns[i].name)) return tmpl__mk_func(r, global_fns[i].name, global_fns[i].fn, UNDEF);
	return UNDEF;
}
