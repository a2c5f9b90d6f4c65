// tests: the chat template interpreter — every render in ../shared/chat-templates/expected.json
// byte for byte, targeted Jinja features against Jinja2's own output, and hostile templates
// that must stop quickly with a clear error.
#include "base/base.h"
#include "template/template.h"

#include "t.h"

#include <jansson.h>

static const char *DATE = "2026-12-02";

// Renders src with messages (JSON text) and returns the output (malloc'd) or NULL with err.
static char *render(const char *src, const char *messages_json, bool gen, char *err, size_t errlen, int *rc) {
	json_error_t je;
	json_t *msgs = json_loads(messages_json ? messages_json : "[{\"role\":\"user\",\"content\":\"Hello\"}]", 0, &je);
	if (!msgs) {
		snprintf(err, errlen, "bad test json: %s", je.text);
		*rc = -100;
		return NULL;
	}
	char *out = NULL;
	size_t n = 0;
	*rc = tmpl_render_chat(src, msgs, "<s>", "</s>", gen, DATE, &out, &n, err, errlen);
	json_decref(msgs);
	if (*rc == 0 && strlen(out) != n) {
		snprintf(err, errlen, "length mismatch");
		*rc = -101;
	}
	return *rc == 0 ? out : NULL;
}

// Checks that src renders exactly want.
#define EXPECT(src, want) expect_ok(__LINE__, (src), NULL, (want))
#define EXPECT_MSGS(src, msgs, want) expect_ok(__LINE__, (src), (msgs), (want))
static void expect_ok(int line, const char *src, const char *msgs, const char *want) {
	char err[512] = "";
	int rc;
	char *out = render(src, msgs, false, err, sizeof err, &rc);
	CHECKF(out && !strcmp(out, want), "line %d: template %s\n  want [%s]\n  got  [%s] (rc %d: %s)", line, src, want,
	       out ? out : "(null)", rc, err);
	free(out);
}

// Checks that src fails with a message containing want_msg, and with code (0: any negative).
#define EXPECT_ERR(src, code, msg) expect_err(__LINE__, (src), (code), (msg))
static void expect_err(int line, const char *src, int code, const char *want_msg) {
	char err[512] = "";
	int rc;
	uint64_t t0 = base_now_us();
	char *out = render(src, NULL, false, err, sizeof err, &rc);
	uint64_t dt = base_now_us() - t0;
	CHECKF(!out && rc < 0 && (code == 0 || rc == code) && strstr(err, want_msg),
	       "line %d: template %s\n  want error %d containing [%s]\n  got rc %d err [%s] out [%s]", line, src, code,
	       want_msg, rc, err, out ? out : "");
	CHECKF(dt < 5 * 1000 * 1000, "line %d: error took %llu us", line, (unsigned long long)dt);
	free(out);
}

static void test_expected(void) {
	char path[4096];
	snprintf(path, sizeof path, "%s/chat-templates/expected.json", t_shared());
	json_error_t je;
	json_t *exp = json_load_file(path, 0, &je);
	CHECKF(exp != NULL, "cannot load %s: %s", path, je.text);
	if (!exp) return;
	json_t *convs = json_object_get(exp, "conversations"), *renders = json_object_get(exp, "renders");
	const char *bos = json_string_value(json_object_get(exp, "bos_token"));
	const char *eos = json_string_value(json_object_get(exp, "eos_token"));
	const char *date = json_string_value(json_object_get(exp, "date"));
	CHECK(convs && renders && bos && eos && date);
	if (!convs || !renders || !bos || !eos || !date) {
		json_decref(exp);
		return;
	}
	const char *name;
	json_t *cases;
	int n_ok = 0, n_err = 0, n_total = 0;
	json_object_foreach(renders, name, cases) {
		snprintf(path, sizeof path, "%s/chat-templates/%s", t_shared(), name);
		char *src = t_read_file(path, NULL);
		CHECKF(src != NULL, "cannot read %s", path);
		if (!src) continue;
		tmpl *t = NULL;
		char err[1024] = "";
		int rc = tmpl_compile(&t, src, strlen(src), err, sizeof err);
		CHECKF(rc == 0, "%s: compile failed: %s", name, err);
		const char *key;
		json_t *want;
		json_object_foreach(cases, key, want) {
			char conv[128];
			snprintf(conv, sizeof conv, "%s", key);
			char *plus = strstr(conv, "+gen");
			bool gen = plus != NULL;
			if (plus) *plus = 0;
			json_t *msgs = json_object_get(convs, conv);
			CHECKF(msgs != NULL, "%s: no conversation %s", name, conv);
			if (!t || !msgs) continue;
			json_t *ctx = json_pack("{sO ss ss sb}", "messages", msgs, "bos_token", bos, "eos_token", eos,
						"add_generation_prompt", gen);
			char *out = NULL;
			size_t len = 0;
			err[0] = 0;
			rc = tmpl_render(t, ctx, date, &out, &len, err, sizeof err);
			json_decref(ctx);
			n_total++;
			const char *ok = json_string_value(json_object_get(want, "ok"));
			const char *werr = json_string_value(json_object_get(want, "error"));
			if (ok) {
				bool same = rc == 0 && len == strlen(ok) && !memcmp(out, ok, len);
				CHECKF(same, "%s [%s]: render differs (rc %d: %s)\n--- want\n%s\n--- got\n%s\n---", name, key, rc, err,
				       ok, out ? out : "(null)");
				n_ok += same;
			} else {
				CHECKF(rc < 0 && werr && !strcmp(err, werr), "%s [%s]: want error [%s], got rc %d [%s]", name, key,
				       werr ? werr : "?", rc, err);
				n_err += rc < 0;
			}
			free(out);
		}
		tmpl_free(t);
		free(src);
	}
	fprintf(stderr, "expected.json: %d renders, %d ok matched, %d errors matched\n", n_total, n_ok, n_err);
	CHECK(n_total >= 100);
	json_decref(exp);
}

// gpt-oss's template (tests/data/templates) over contexts with tools, tool turns, reasoning_effort,
// builtin_tools and model_identity, against Jinja2's renders of it (render_jinja2.py there).
static void test_gpt_oss(void) {
	const char *dir = "tests/data/templates";
	char path[4096];
	snprintf(path, sizeof path, "%s/gpt-oss-expected.json", dir);
	json_error_t je;
	json_t *exp = json_load_file(path, 0, &je);
	CHECKF(exp != NULL, "cannot load %s: %s", path, je.text);
	if (!exp) return;
	const char *date = json_string_value(json_object_get(exp, "date"));
	snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(exp, "template")));
	char *src = t_read_file(path, NULL);
	CHECKF(src && date, "cannot read %s", path);
	tmpl *t = NULL;
	char err[1024] = "";
	if (src && date) CHECKF(tmpl_compile(&t, src, strlen(src), err, sizeof err) == 0, "gpt-oss: compile failed: %s", err);
	const char *key;
	json_t *want;
	int n = 0, same = 0;
	json_object_foreach(json_object_get(exp, "renders"), key, want) {
		if (!t) break;
		char *out = NULL;
		size_t len = 0;
		err[0] = 0;
		const int rc = tmpl_render(t, json_object_get(want, "context"), date, &out, &len, err, sizeof err);
		const char *ok = json_string_value(json_object_get(want, "ok"));
		const char *werr = json_string_value(json_object_get(want, "error"));
		const bool got = ok ? rc == 0 && len == strlen(ok) && !memcmp(out, ok, len) : rc < 0 && werr && !strcmp(err, werr);
		CHECKF(got, "gpt-oss [%s]: rc %d [%s]\n--- want\n%s\n--- got\n%s\n---", key, rc, err, ok ? ok : werr,
		       out ? out : "(null)");
		n++, same += got;
		free(out);
	}
	fprintf(stderr, "gpt-oss: %d renders, %d matched\n", n, same);
	CHECK(n >= 30);
	tmpl_free(t);
	free(src);
	json_decref(exp);
}

// Expected strings below were produced by Jinja2 3.1 with HF's settings.
static void test_whitespace(void) {
	EXPECT("a\n{% if true %}\nb\n{% endif %}\nc", "a\nb\nc");
	EXPECT("a\n    {% if true %}\n  b\n    {% endif %}\nc", "a\n  b\nc");
	EXPECT("x  {%- if true -%}  y  {%- endif %}", "xy");
	EXPECT("a {{- 'b' -}} c", "abc");
	EXPECT("a\n  {{ 'b' }}\n", "a\n  b");
	EXPECT("a\n  {# c #}\nb", "a\nb");
	EXPECT("a\n  {%+ if true %}x{% endif %}", "a\n  x");
	EXPECT("{% raw %}{{ x }}{% endraw %}", "{{ x }}");
	EXPECT("a\r\nb\r\n", "a\nb");
	EXPECT("{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}", "  1\n  2\n");
	EXPECT("{% if true %}x{% endif %}\n\n", "x");
	EXPECT("{% if true %}x{% endif %}\n\n\n", "x\n");
}

static void test_expressions(void) {
	EXPECT("{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % -3 }}|{{ 2 ** 10 }}|{{ 7 / 2 }}|{{ 1 / 3 }}",
	       "7|3|-4|-2|1024|3.5|0.3333333333333333");
	EXPECT("{{ 1.0 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 123456789012345678.0 }} {{ -0.0 }}",
	       "1.0 1e+20 0.30000000000000004 1e-05 1.2345678901234568e+17 -0.0");
	EXPECT("{{ none }}{{ None }}{{ True }}{{ [1, 'a', none, {'b': 2.5}] }}{{ ('x',) }}{{ (1, 2) }}",
	       "NoneNoneTrue[1, 'a', None, {'b': 2.5}]('x',)(1, 2)");
	EXPECT("{{ \"it's\" }}|{{ [\"it's\", 'a\"b', 'q\\n'] }}", "it's|[\"it's\", 'a\"b', 'q\\n']");
	EXPECT("{{ 'a' ~ 1 ~ none }}|{{ 'ab' * 3 }}|{{ [1] * 2 }}|{{ [1] + [2] }}", "a1None|ababab|[1, 1]|[1, 2]");
	EXPECT("{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}",
	       "TrueTrueTrueTrueTrueFalse");
	EXPECT("{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 3 not in [1] }}{{ not 1 in [1] }}",
	       "TrueTrueTrueTrueFalse");
	EXPECT("{{ 'x' if false }}|{{ 'y' if 0 else 'z' }}|{{ 0 or 'd' }}|{{ 1 and 'e' }}|{{ none or [] }}", "|z|d|e|[]");
	EXPECT("{{ 'abc'[1:] }}{{ 'abc'[::-1] }}{{ [1, 2, 3][-1] }}{{ [1, 2, 3, 4][1:3] }}{{ 'héllo'[1:3] }}{{ 'héllo'[-1] }}",
	       "bccba3[2, 3]élo");
	EXPECT("{{ \"%s-%d\" % ('a', 3) }}|{{ '%5.2f' % 3.14159 }}|{{ '{}+{}'.format(1, 2) }}|{{ '%s' % [1] }}",
	       "a-3| 3.14|1+2|[1]");
	EXPECT("{{ 'a' 'b' }}{{ \"\\u00e9\\t\\x41\" }}", "ab\xc3\xa9\tA");
	EXPECT("{{ {'a': 1}['a'] }}{{ {'a': 1}.a }}{{ [[1, 2]][0][1] }}{{ [1, 2].0 }}", "1121");
	EXPECT("{{ -3|abs }}|{{ (-3)|abs }}|{{ - 2 ** 2 }}", "3|3|4");
}

static void test_statements(void) {
	EXPECT("{% set x = 5 %}{% for i in [1, 2] %}[{{ x }}]{% set x = i %}{% endfor %}|{{ x }}", "[5][5]|5");
	EXPECT("{% for i in [1, 2] %}{% if i == 2 %}{{ x }}{% endif %}{% set x = i %}{% endfor %}|", "|");
	EXPECT("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", "6");
	EXPECT("{% for k, v in {'a': 1, 'b': 2}|items %}{{ k }}={{ v }};{% endfor %}", "a=1;b=2;");
	EXPECT("{% for x in 'ab' %}{{ loop.index }}{{ x }}{{ loop.revindex }}{{ loop.cycle('o', 'e') }}{{ loop.first }}{{ loop.last }}{{ loop.length }},{% endfor %}",
	       "1a2oTrueFalse2,2b1eFalseTrue2,");
	EXPECT("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}", "-2,1-3,2-,");
	EXPECT("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.index }}{{ loop.length }},{% endfor %}", "212,422,");
	EXPECT("{% for x in [] %}a{% else %}empty{% endfor %}", "empty");
	EXPECT("{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}", "13");
	EXPECT("{% for x in [1, 2, 3] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}", "1");
	EXPECT("{% for x in [[1, 2]] %}{% for y in x %}{{ loop.depth }}{{ y }}{% endfor %}{% endfor %}", "1112");
	EXPECT("{% if 0 %}a{% elif 1 %}b{% else %}c{% endif %}", "b");
	EXPECT("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}", "12(1, 2)");
	EXPECT("{% set x %}  in {{ 1 }} {% endset %}[{{ x }}]{% set y | trim | upper %} hi {% endset %}[{{ y }}]",
	       "[  in 1 ][HI]");
	EXPECT("{% filter upper %}ab{{ 'c' }}{% endfilter %}", "ABC");
	EXPECT("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}", "3");
	EXPECT("{% macro m(a, b=2) %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(1, 3) }}{{ m(b=4, a=5) }}", "[12][13][54]");
	EXPECT("{% macro m(a) %}[{{ a }}{{ varargs }}{{ kwargs }}]{% endmacro %}{{ m(1, 2, x=3) }}", "[1(2,){'x': 3}]");
	EXPECT("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", "321");
	EXPECT("{% macro w(x) %}<{{ caller(x) }}>{% endmacro %}{% call(y) w(2) %}[{{ y }}]{% endcall %}", "<[2]>");
	EXPECT("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}body{% endcall %}", "<body>");
	EXPECT("{% set top = 't' %}{% macro m() %}{{ top }}{% endmacro %}{% set top = 'u' %}{{ m() }}", "u");
	EXPECT("{% generation %}gen{% endgeneration %}", "gen");
	EXPECT("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%A %B %-d %j') }}", "02 Dec 2026|Wednesday December 2 336");
}

static void test_filters(void) {
	EXPECT("{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'hello world-foo(bar'|title }}|{{ 'hELLo wOrld'|capitalize }}",
	       "a b|a|Hello World-Foo(Bar|Hello world");
	EXPECT("{{ 'Grüße'|upper }}|{{ 'ÀB'|lower }}|{{ 'abc'|length }}|{{ 'héllo'|length }}|{{ [1, 2]|count }}|{{ x|length }}",
	       "GRÜSSE|àb|3|5|2|0");
	EXPECT("{{ [3, 1, 2]|sort }}{{ ['b', 'A', 'a']|sort }}{{ [3, 1, 2]|sort(reverse=true) }}{{ {'b': 1, 'a': 2}|dictsort }}",
	       "[1, 2, 3]['A', 'a', 'b'][3, 2, 1][('a', 2), ('b', 1)]");
	EXPECT("{{ [{'n': 2}, {'n': 1}]|sort(attribute='n')|map(attribute='n')|list }}|{{ [1, 2, 1, 'A', 'a']|unique|list }}",
	       "[1, 2]|[1, 2, 'A']");
	EXPECT("{{ 'abc'|list }}{{ [1, 2, 3]|batch(2)|list }}{{ [1, 2, 3]|batch(2, 0)|list }}{{ [1, 2, 3]|reverse|list }}{{ 'abc'|reverse }}",
	       "['a', 'b', 'c'][[1, 2], [3]][[1, 2], [3, 0]][3, 2, 1]cba");
	EXPECT("{{ 'x'|indent(2) }}|{{ 'a\nb\n\nc'|indent(2, true) }}|{{ 'a\nb'|indent('--', first=true, blank=true) }}",
	       "x|  a\n  b\n\n  c|--a\n--b");
	EXPECT("{{ {'a': [1, 2.0, 'é\\n'], 'b': none, 'c': true}|tojson }}", "{\"a\": [1, 2.0, \"é\\n\"], \"b\": null, \"c\": true}");
	EXPECT("{{ {'a': [1, {}], 'c': []}|tojson(indent=2) }}", "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"c\": []\n}");
	EXPECT("{{ 'é<\"\\\\\x01'|tojson }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}",
	       "\"é<\\\"\\\\\\u0001\"|\"\\u00e9\"|{\"a\": 2, \"b\": 1}");
	EXPECT("{{ x|default('d') }}{{ ''|default('e', true) }}{{ none|d('f') }}{{ 0|default('g', boolean=true) }}", "deNoneg");
	EXPECT("{{ [1, 2, 3]|select('odd')|list }}{{ [1, 2, 3]|reject('odd')|list }}{{ [1, 2, 3]|select('>', 1)|list }}{{ [0, 1]|select|list }}",
	       "[1, 3][2][2, 3][1]");
	EXPECT_MSGS("{{ messages|map(attribute='role')|join(',') }}|{{ messages|selectattr('role', 'equalto', 'user')|list|length }}|{{ messages|rejectattr('role', 'equalto', 'user')|map(attribute='content')|first }}",
		    "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U\"}]", "system,user|1|S");
	EXPECT("{{ [{'a': 1}, {}]|selectattr('a', 'defined')|list }}|{{ ['a', 'b']|map('upper')|join }}|{{ [1, 2]|join(', ') }}",
	       "[{'a': 1}]|AB|1, 2");
	EXPECT("{{ 2.5|round }}{{ 3.5|round }}{{ 3|round }}{{ 2.675|round(2) }}{{ 2.1|round(0, 'ceil') }}{{ '3.7'|int }}{{ 'x'|int }}{{ 5|float }}{{ '4'|float }}",
	       "2.04.032.673.0305.04.0");
	EXPECT("{{ 'abcabc'|replace('b', 'x') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'one two  three'|wordcount }}|{{ 'ab'|center(6) }}|",
	       "axcaxc|bba|3|  ab  |");
	EXPECT("{{ [1, 2, 3]|sum }}{{ [1, 5, 3]|max }}{{ [4, 2]|min }}{{ [1, 2]|first }}{{ [1, 2]|last }}{{ '%s=%s'|format('a', 1) }}",
	       "65212a=1");
	EXPECT("{{ '<a&b>'|e }}|{{ 'long text here'|truncate(9, leeway=0) }}|{{ 5|string ~ 'x' }}|{{ {'a': 1}|items|list }}",
	       "&lt;a&amp;b&gt;|long...|5x|[('a', 1)]");
}

// Jinja's filters return generators and |safe returns markupsafe.Markup; templates see both.
static void test_iterators_and_markup(void) {
	EXPECT("{{ [1, 2]|map('string')|list }}|{% set g = [1, 2, 3]|select('odd') %}{{ g|list }}{{ g|list }}|{% if [1]|select('even') %}T{% endif %}",
	       "['1', '2']|[1, 3][]|T");
	EXPECT("{{ {'a': 1}.items()|length }}{{ {'a': 1}.keys()|list }}{{ [3, 1]|reverse|list }}{{ {'a': 1}.items() }}",
	       "1['a'][1, 3]dict_items([('a', 1)])");
	EXPECT("{{ ('<'|safe) + '<' }}|{{ '<' + ('>'|safe) }}|{{ ('a%s'|safe) % '<' }}|{{ '<'|e }}{{ ('<'|e)|e }}|{{ ('<'|safe) ~ '<' }}",
	       "<&lt;|&lt;>|a&lt;|&lt;&lt;|<<");
	EXPECT("{% macro m() %}<{% endmacro %}{{ m() + '<' }}|{{ ('x'|safe).replace('x', '<') }}|{{ ('<'|safe|upper) + '&' }}|{{ '<'|forceescape }}",
	       "<<|&lt;|<&amp;|&lt;");
	EXPECT("{{ \"'\"|safe + {'a': 'x'}|tojson }}", "'{&#34;a&#34;: &#34;x&#34;}");
	EXPECT_ERR("{{ [1, 2]|select('odd')|tojson }}", LANES_EINVAL, "Object of type generator is not JSON serializable");
	EXPECT_ERR("{{ [1, 2]|map('string')|length }}", LANES_EINVAL, "object of type 'generator' has no len()");
	EXPECT_ERR("{{ {'a': 1}|items|last }}", LANES_EINVAL, "'generator' object is not reversible");
}

static void test_tests_and_methods(void) {
	EXPECT("{{ 3 is divisibleby 3 }}{{ none is none }}{{ 1 is number }}{{ true is number }}{{ true is integer }}{{ 1.5 is float }}",
	       "TrueTrueTrueTrueFalseTrue");
	EXPECT("{{ x is defined }}{{ x is undefined }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is sequence }}{{ 'a' is iterable }}{{ 1 is iterable }}",
	       "FalseTrueTrueTrueTrueTrueFalse");
	EXPECT("{{ 3 is odd }}{{ 3 is even }}{{ 1 is not none }}{{ 'a' is in 'abc' }}{{ 2 is gt 1 }}{{ 'ab' is lower }}{{ true is true }}{{ 0 is false }}",
	       "TrueFalseTrueTrueTrueTrueTrueFalse");
	EXPECT("{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}{{ 'a.b.c'.rsplit('.', 1) }}{{ 'abc'.startswith(('x', 'a')) }}",
	       "['a', 'b', '', 'c']['a', 'b']['a', 'b c']['a.b', 'c']True");
	EXPECT("{{ '  x  '.strip() }}|{{ 'xxhixx'.lstrip('x') }}|{{ 'hi!!'.rstrip('!') }}|{{ 'hello world'.title() }}|{{ 'abc'.upper() }}|{{ 'aXb'.lower() }}",
	       "x|hixx|hi|Hello World|ABC|axb");
	EXPECT("{{ 'abcb'.find('b') }}{{ 'abcb'.rfind('b') }}{{ 'abc'.find('z') }}{{ 'abab'.count('ab') }}{{ 'a.txt'.endswith('.txt') }}{{ 'a-b'.replace('-', '+') }}",
	       "13-12Truea+b");
	EXPECT("{{ {'a': 1}.get('a') }}{{ {'a': 1}.get('b') }}{{ {'a': 1}.get('b', 2) }}{{ {'a': 1, 'b': 2}.keys()|list }}{{ {'a': 1}.values()|list }}{{ {'a': 1}.items()|list }}",
	       "1None2['a', 'b'][1][('a', 1)]");
	EXPECT("{{ ', '.join(['a', 'b']) }}{{ '12'.isdigit() }}{{ 'x</think>y'.split('</think>')[-1] }}{{ 'ab'.capitalize() }}",
	       "a, bTrueyAb");
}

static void test_errors(void) {
	EXPECT_ERR("{{ raise_exception('Bad role: ' + 'x') }}", LANES_EINVAL, "Bad role: x");
	EXPECT_ERR("{{ 'a' + functions }}", LANES_EINVAL, "'functions' is undefined");
	EXPECT_ERR("{{ foo.bar }}", LANES_EINVAL, "'foo' is undefined");
	EXPECT_ERR("{{ messages[0].nope.x }}", LANES_EINVAL, "'dict object' has no attribute 'nope'");
	EXPECT_ERR("{{ 'a' + 1 }}", LANES_EINVAL, "can only concatenate str (not \"int\") to str");
	EXPECT_ERR("{{ [1].append(2) }}", LANES_EINVAL, "access to attribute 'append' of 'list' object is unsafe.");
	EXPECT_ERR("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", LANES_EINVAL, "takes not more than 1 argument");
	EXPECT_ERR("{{ 1 // 0 }}", LANES_EINVAL, "division");
	EXPECT_ERR("{% set x = 1 %}{% set x.a = 2 %}", LANES_EINVAL, "non-namespace");
	EXPECT_ERR("{{ range(1000000) }}", LANES_EINVAL, "Range too big");
	EXPECT_ERR("{% for a, b in [1] %}{% endfor %}", LANES_EINVAL, "cannot unpack non-iterable int object");
	EXPECT_ERR("{{ x|nosuchfilter }}", LANES_EFORMAT, "no filter named 'nosuchfilter'");
	EXPECT_ERR("{% if x %}", LANES_EFORMAT, "expected 'endif'");
	EXPECT_ERR("{{ 1 + }}", LANES_EFORMAT, "line 1");
	EXPECT_ERR("a\n{% endfor %}", LANES_EFORMAT, "line 2: unexpected 'endfor'");
	EXPECT_ERR("{% foo %}", LANES_EFORMAT, "unknown tag 'foo'");
	EXPECT_ERR("{{ 'abc", LANES_EFORMAT, "unterminated string");
	EXPECT_ERR("{# never closed", LANES_EFORMAT, "comment");
	EXPECT_ERR("{{ none.x.y }}", LANES_EINVAL, "'None' has no attribute 'x'");
	EXPECT_ERR("{{ {'a': 1}|tojson(indent=x.y) }}", LANES_EINVAL, "'x' is undefined");
	EXPECT_ERR("{% for m in none %}{% endfor %}", LANES_EINVAL, "'NoneType' object is not iterable");
}

static void test_limits(void) {
	// every one of these must stop quickly with a clear error, never crash
	EXPECT_ERR("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", LANES_ELIMIT, "macro calls nested deeper");
	EXPECT_ERR("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", LANES_ELIMIT, "");
	EXPECT_ERR("{% for i in range(100000) %}{{ 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 }}{% endfor %}",
		   LANES_ELIMIT, "steps");
	EXPECT_ERR("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
		   LANES_ELIMIT, "");
	EXPECT_ERR("{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}", LANES_ELIMIT, "output");
	EXPECT_ERR("{{ 'x' * 10000000000 }}", LANES_ELIMIT, "longer than");
	EXPECT_ERR("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l|tojson }}",
		   0, "nested too deeply");
	EXPECT_ERR("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}",
		   0, "nested too deeply");
	EXPECT_ERR("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l == ns.l }}",
		   0, "nested too deeply");
	EXPECT_ERR("{{ 9223372036854775807 + 1 }}", LANES_EINVAL, "overflow");
	EXPECT_ERR("{% set ns = namespace() %}{% set ns.x = ns %}{{ ns }}", 0, "nested too deeply");

	// deep nesting in the source is refused by the parser, not by the C stack
	size_t n = 100000;
	char *deep = malloc(n * 2 + 16);
	strcpy(deep, "{{ ");
	for (size_t i = 0; i < n; i++) deep[3 + i] = '(';
	deep[3 + n] = '1';
	for (size_t i = 0; i < n; i++) deep[4 + n + i] = ')';
	strcpy(deep + 4 + 2 * n, " }}");
	EXPECT_ERR(deep, LANES_ELIMIT, "nested too deeply");
	strcpy(deep, "");
	for (size_t i = 0; i < 5000; i++) strcat(deep, "{% if 1 %}");
	EXPECT_ERR(deep, LANES_ELIMIT, "nested too deeply");
	size_t k = 0;
	for (size_t i = 0; i < 30000; i++) k += (size_t)sprintf(deep + k, "-");
	sprintf(deep + k, "1");
	char *wrapped = malloc(k + 16);
	sprintf(wrapped, "{{ %s }}", deep);
	EXPECT_ERR(wrapped, LANES_ELIMIT, "nested too deeply");
	free(wrapped);
	free(deep);

	// a custom limit applies
	tmpl *t;
	char err[256];
	const char *thousand = "{% for i in range(1000) %}x{% endfor %}";
	CHECK(tmpl_compile(&t, thousand, strlen(thousand), err, sizeof err) == 0);
	tmpl_limits lim;
	tmpl_default_limits(&lim);
	lim.max_output = 100;
	tmpl_set_limits(t, &lim);
	char *out = NULL;
	size_t len;
	CHECK(tmpl_render(t, NULL, DATE, &out, &len, err, sizeof err) == LANES_ELIMIT && !out);
	lim.max_output = 1000;
	tmpl_set_limits(t, &lim);
	CHECK(tmpl_render(t, NULL, DATE, &out, &len, err, sizeof err) == 0 && len == 1000);
	free(out);
	tmpl_free(t);
	tmpl_free(NULL);
}

static void test_api(void) {
	// ChatML fallback
	char err[256] = "";
	int rc;
	char *out = render(tmpl_chatml(), "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"Hi\"}]", true,
			   err, sizeof err, &rc);
	CHECKF(out && !strcmp(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
	       "chatml: %s", out ? out : err);
	free(out);
	// the date argument reaches strftime_now; a bad one is refused
	json_t *msgs = json_array();
	CHECK(tmpl_render_chat("{{ strftime_now('%Y-%m-%d') }}", msgs, NULL, NULL, false, "2024-02-29", &out, NULL, err,
			       sizeof err) == 0 &&
	      !strcmp(out, "2024-02-29"));
	free(out);
	CHECK(tmpl_render_chat("x", msgs, NULL, NULL, false, "2023-02-29", &out, NULL, err, sizeof err) == LANES_EINVAL);
	CHECK(tmpl_render_chat("{{ strftime_now('%Y') }}", msgs, NULL, NULL, false, NULL, &out, NULL, err, sizeof err) == 0 &&
	      strlen(out) == 4);
	free(out);
	// a context that is not an object is refused
	tmpl *t;
	CHECK(tmpl_compile(&t, "x", 1, err, sizeof err) == 0);
	CHECK(tmpl_render(t, msgs, NULL, &out, NULL, err, sizeof err) == LANES_EINVAL);
	tmpl_free(t);
	json_decref(msgs);
	// embedded NUL bytes in content pass through
	json_t *ctx = json_pack("{s:s%}", "x", "a\0b", (size_t)3);
	CHECK(tmpl_compile(&t, "[{{ x }}]", 9, err, sizeof err) == 0);
	size_t len = 0;
	CHECK(tmpl_render(t, ctx, NULL, &out, &len, err, sizeof err) == 0 && len == 5 && !memcmp(out, "[a\0b]", 5));
	free(out);
	tmpl_free(t);
	json_decref(ctx);
	// one compiled template renders many times with different contexts
	CHECK(tmpl_compile(&t, "{{ messages|length }}", 21, err, sizeof err) == 0);
	for (int i = 0; i < 3; i++) {
		json_t *m = json_array();
		for (int k = 0; k < i; k++) json_array_append_new(m, json_object());
		json_t *c = json_pack("{so}", "messages", m);
		CHECK(tmpl_render(t, c, NULL, &out, NULL, err, sizeof err) == 0 && out[0] == '0' + i);
		free(out);
		json_decref(c);
	}
	tmpl_free(t);
}

int main(void) {
	test_expected();
	test_gpt_oss();
	test_whitespace();
	test_expressions();
	test_statements();
	test_filters();
	test_tests_and_methods();
	test_iterators_and_markup();
	test_errors();
	test_limits();
	test_api();
	T_DONE("template");
}
