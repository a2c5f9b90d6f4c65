// tests: the grammar engine — GBNF parse errors with their positions, a JSON grammar fed
// byte by byte, repetitions, UTF-8 classes split across tokens, left recursion, hostile
// grammars, and masks against brute force on synthetic and real vocabularies, lazy too.
#include "t.h"
#include "base/base.h"
#include "cli/settings.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

static const char *json_gbnf =
	"# JSON, compact or spaced\n"
	"root   ::= value\n"
	"value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
	"object ::=\n"
	"  \"{\" ws (\n"
	"            string \":\" ws value\n"
	"    (\",\" ws string \":\" ws value)*\n"
	"  )? \"}\" ws\n"
	"array  ::=\n"
	"  \"[\" ws (\n"
	"            value\n"
	"    (\",\" ws value)*\n"
	"  )? \"]\" ws\n"
	"string ::=\n"
	"  \"\\\"\" (\n"
	"    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
	"    \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
	"  )* \"\\\"\" ws\n"
	"number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
	"ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static grammar *compile(const char *text) {
	char err[256];
	grammar *g = NULL;
	int rc = grammar_compile(&g, text, strlen(text), NULL, err, sizeof err);
	if (rc) fprintf(stderr, "compile: %s\n", err);
	return g;
}

// A vocabulary of the given NUL-terminated pieces plus one eog token (the last id).
static grammar_vocab *small_vocab(const char *const *pieces, int32_t n) {
	const char **p = calloc((size_t)n + 1, sizeof *p);
	uint32_t *len = calloc((size_t)n + 1, sizeof *len);
	bool *usable = calloc((size_t)n + 1, 1);
	for (int32_t i = 0; i < n; i++) p[i] = pieces[i], len[i] = (uint32_t)strlen(pieces[i]), usable[i] = true;
	int32_t eog = n;
	p[n] = "", usable[n] = false;
	grammar_vocab *v = NULL;
	grammar_vocab_new(&v, n + 1, p, len, usable, &eog, 1);
	free(p), free(len), free(usable);
	return v;
}

// Index of the first byte of s the grammar refuses (strlen(s) when all pass), and whether
// the whole text is a sentence.
static size_t first_bad(grammar *g, const grammar_vocab *v, const char *s, bool *accepting) {
	grammar_matcher *m;
	char err[128];
	if (grammar_matcher_new(&m, g, v, NULL, 0, err, sizeof err)) return (size_t)-1;
	size_t i = 0, n = strlen(s);
	while (i < n && grammar_matcher_accept_bytes(m, s + i, 1) == 0) i++;
	*accepting = grammar_matcher_accepting(m);
	grammar_matcher_free(m);
	return i;
}

// Whether text fails to compile with code want_rc and a message holding want.
static bool refused_as(const char *text, int want_rc, const char *want) {
	char err[256] = "";
	grammar *g = NULL;
	int rc = grammar_compile(&g, text, strlen(text), NULL, err, sizeof err);
	if (rc == want_rc && !g && strstr(err, want)) return true;
	fprintf(stderr, "'%s': rc %d '%s', want '%s'\n", text, rc, err, want);
	grammar_unref(g);
	return false;
}

static bool refused(const char *text, const char *want) { return refused_as(text, LANES_EFORMAT, want); }

static void test_parse_errors(void) {
	static const struct {
		const char *text, *want;
	} cases[] = {
		{"root ::= \"a\" foo\n", "line 1, column 14: undefined rule 'foo'"},
		{"a ::= \"x\"\n", "no rule named 'root'"},
		{"root ::= \"abc\n", "line 1, column 10: unterminated string"},
		{"root ::= [abc\n", "line 1, column 10: unterminated character class"},
		{"\n\nroot ::= (\"a\" | \"b\"\n", "line 4, column 1: expected ')'"},
		{"root ::= \"a\"\nroot ::= \"b\"\n", "line 2, column 1: rule 'root' is defined twice"},
		{"root ::= * \"a\"\n", "line 1, column 10: '*' must follow an item"},
		{"root ::= \"a\"{3,2}\n", "line 1, column 13: {3,2}: the maximum is below the minimum"},
		{"root ::= [z-a]\n", "line 1, column 11: range is reversed"},
		{"root ::= \"\\q\"\n", "line 1, column 11: unknown escape \\q"},
		{"root ::= \"\\x4\"\n", "line 1, column 11: \\x needs 2 hex digits"},
		{"root = \"a\"\n", "line 1, column 6: expected '::=' after the rule name"},
		{"root ::= \"a\" )\n", "line 1, column 14: unexpected ')'"},
		{"root ::= []\n", "line 1, column 10: empty character class"},
		{"root ::= \"\\U00110000\"\n", "past U+10FFFF"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) CHECKF(refused(cases[i].text, cases[i].want), "case %zu", i);
	// a rule goes on over lines that do not start a new one; comments anywhere
	grammar *g = compile("root ::= \"a\" # first\n   \"b\"\n  | \"c\"\nother ::= \"z\"\n");
	CHECK(g != NULL);
	grammar_vocab *v = small_vocab((const char *[]){"a"}, 1);
	bool acc;
	CHECK(first_bad(g, v, "ab", &acc) == 2 && acc);
	CHECK(first_bad(g, v, "c", &acc) == 1 && acc);
	CHECK(first_bad(g, v, "a", &acc) == 1 && !acc);
	grammar_unref(g);
	grammar_vocab_free(v);
}

// Layouts GBNF files use: a rule opened on one line and continued on the next, `|` ending a
// line, groups spanning lines, right-recursive whitespace, comments after items.
static void test_layouts(void) {
	grammar_vocab *v = small_vocab((const char *[]){"a"}, 1);
	static const struct {
		const char *gbnf, *good, *bad;
		size_t bad_at;
	} cases[] = {
		{"root  ::= (expr \"=\" ws term \"\\n\")+\n"
		 "expr  ::= term ([-+*/] term)*\n"
		 "term  ::= ident | num | \"(\" ws expr \")\" ws\n"
		 "ident ::= [a-z] [a-z0-9_]* ws\n"
		 "num   ::= [0-9]+ ws\n"
		 "ws    ::= [ \\t\\n]*\n",
		 "x1 = (a+2*b)\ny=3\n", "x = = 1\n", 4},
		{"root ::= (decl)*\n\n"
		 "decl ::= type name \"(\" \")\" \"{\" stmt* \"}\"\n"
		 "type ::= \"int\" ws | \"char\" ws\n"
		 "name ::= [a-zA-Z_] [a-zA-Z_0-9]*\n"
		 "stmt ::=\n"
		 "    ( type name ws \"=\" ws [0-9]+ \";\" ) |\n"
		 "    ( \"return\" ws [0-9]+ \";\" ) |\n"
		 "    ( \"//\" [^\\n]* \"\\n\" )   # a comment line\n"
		 "ws ::= ([ \\t\\n] ws)?\n",
		 "int main(){int x = 1;// hi\nreturn 0;}", "int main(){return x;}", 18},
		{"root ::= item+\n\n# line breaks are not item text\nitem ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n",
		 "- one\n- tw\xC3\xB6\n", "- a\xE2\x80\xA8\n", 5},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		grammar *g = compile(cases[i].gbnf);
		CHECKF(g != NULL, "case %zu does not compile", i);
		if (!g) continue;
		bool acc;
		size_t at = first_bad(g, v, cases[i].good, &acc);
		CHECKF(at == strlen(cases[i].good) && acc, "case %zu: good text stops at %zu", i, at);
		at = first_bad(g, v, cases[i].bad, &acc);
		CHECKF(at == cases[i].bad_at, "case %zu: bad text stops at %zu, want %zu", i, at, cases[i].bad_at);
		grammar_unref(g);
	}
	grammar_vocab_free(v);
}

static void test_json(void) {
	grammar *g = compile(json_gbnf);
	CHECK(g != NULL);
	if (!g) return;
	grammar_vocab *v = small_vocab((const char *[]){"a"}, 1);
	static const char *good[] = {
		"{}", "[]", "0", "-12.5e+3", "\"\"", "\"a\\n\\u00e9\\\"\"", "true", "null",
		"{\"a\": 1, \"b\": [true, false, null, {\"c\": \"d\"}]}", "[1,2,[3,[4,[5]]]]",
		"{\"k\":\n  \"v\"}", "\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"",
	};
	for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
		bool acc;
		size_t at = first_bad(g, v, good[i], &acc);
		CHECKF(at == strlen(good[i]) && acc, "'%s': stops at %zu, accepting %d", good[i], at, acc);
	}
	static const struct {
		const char *text;
		size_t at;
	} bad[] = {
		{"{,}", 1}, {"[1,]", 3}, {"01", 1}, {"{\"a\" 1}", 5}, {"\"a\x01\"", 2}, {"tru", 3},
		{"{\"a\":1}}", 7}, {"[1 2]", 3}, {"\"\\x\"", 2}, {"-", 1}, {"{'a':1}", 1},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		bool acc;
		size_t at = first_bad(g, v, bad[i].text, &acc);
		size_t n = strlen(bad[i].text);
		// the first refused byte, or (a prefix: "tru", "-") all taken but not a sentence
		CHECKF(at == bad[i].at && (at < n || !acc), "'%s': stops at %zu, want %zu", bad[i].text, at, bad[i].at);
	}
	grammar_unref(g);
	grammar_vocab_free(v);
}

static void test_repeat(void) {
	grammar_vocab *v = small_vocab((const char *[]){"a"}, 1);
	static const struct {
		const char *gbnf;
		int min, max; // max -1: unbounded (checked to 50)
	} cases[] = {
		{"root ::= \"a\"{2,4}", 2, 4}, {"root ::= \"a\"{3}", 3, 3}, {"root ::= \"a\"{2,}", 2, -1},
		{"root ::= (\"a\"){0,1}", 0, 1}, {"root ::= \"a\"+", 1, -1}, {"root ::= \"a\"*", 0, -1},
		{"root ::= \"a\"?", 0, 1}, {"root ::= (\"a\"{2}){2}", 4, 4}, {"root ::= \"a\"{ 1 , 3 }", 1, 3},
	};
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		grammar *g = compile(cases[c].gbnf);
		CHECK(g != NULL);
		if (!g) continue;
		char s[64];
		for (int k = 0; k <= 50; k++) {
			memset(s, 'a', (size_t)k), s[k] = 0;
			bool acc;
			size_t at = first_bad(g, v, s, &acc);
			bool in = k >= cases[c].min && (cases[c].max < 0 || k <= cases[c].max);
			bool prefix = cases[c].max < 0 || k <= cases[c].max;
			CHECKF((at == (size_t)k) == prefix && (!prefix || acc == in), "%s with %d a: at %zu acc %d", cases[c].gbnf, k, at,
			       acc);
		}
		grammar_unref(g);
	}
	grammar_vocab_free(v);
}

static void test_utf8(void) {
	// byte-fallback pieces: € is E2 82 AC, split over three tokens
	grammar_vocab *v = small_vocab((const char *[]){"\xE2", "\x82", "\xAC", "a", "\xCE\xB2", "\xCE"}, 6);
	grammar *g = compile("root ::= [^a-z\"]+");
	grammar_matcher *m;
	char err[128];
	CHECK(g && grammar_matcher_new(&m, g, v, NULL, 0, err, sizeof err) == 0);
	if (!g) return;
	CHECK(grammar_matcher_accept(m, 0) == 0 && !grammar_matcher_accepting(m));
	CHECK(grammar_matcher_accept(m, 3) == LANES_EINVAL); // 'a' mid-character
	CHECK(grammar_matcher_accept(m, 1) == 0 && grammar_matcher_accept(m, 2) == 0 && grammar_matcher_accepting(m));
	CHECK(grammar_matcher_accept(m, 3) == LANES_EINVAL); // 'a' is in a-z
	CHECK(grammar_matcher_accept(m, 4) == 0);
	CHECK(grammar_matcher_accept_bytes(m, "\xF0\x9F\x98\x80", 4) == 0 && grammar_matcher_accepting(m));
	CHECK(grammar_matcher_accept_bytes(m, "\x82", 1) == LANES_EINVAL); // a lone continuation byte
	grammar_matcher_free(m);
	grammar_unref(g);
	// a range of Greek letters: β passes, the capital Α (CE 91) does not, nor does €
	g = compile("root ::= [\\u03B1-\\u03C9]");
	bool acc;
	CHECK(g && first_bad(g, v, "\xCE\xB2", &acc) == 2 && acc);
	CHECK(g && first_bad(g, v, "\xCE\x91", &acc) == 1);
	CHECK(g && first_bad(g, v, "\xE2\x82\xAC", &acc) == 0);
	grammar_unref(g);
	g = compile("root ::= [\xCE\xB1-\xCF\x89]+ \"\xE2\x82\xAC\""); // the same range written raw, then a raw literal
	CHECK(g && first_bad(g, v, "\xCE\xB2\xCF\x89\xE2\x82\xAC", &acc) == 7 && acc);
	CHECK(g && first_bad(g, v, "\xCE\xB2\xE2\x82\xAD", &acc) == 4);
	grammar_unref(g);
	g = compile("root ::= . \"!\"");
	CHECK(g && first_bad(g, v, "\xF0\x9F\x98\x80!", &acc) == 5 && acc);
	CHECK(g && first_bad(g, v, "\xFF", &acc) == 0);
	grammar_unref(g);
	grammar_vocab_free(v);
}

static void test_left_recursion(void) {
	static const struct {
		const char *text, *want;
	} cases[] = {
		{"root ::= root \"a\" | \"a\"", "rule 'root' is left-recursive"},
		{"root ::= a\na ::= b \"x\"\nb ::= \"y\" | a", "left-recursive"},
		{"root ::= x\nx ::= y? x \"a\" | \"b\"\ny ::= \"c\"", "rule 'x' is left-recursive"},
		{"root ::= (\"a\"?)*", "rule 'root' is left-recursive"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) CHECKF(refused(cases[i].text, cases[i].want), "case %zu", i);
	grammar *g = compile("root ::= \"(\" root \")\" | \"x\""); // right and middle recursion are fine
	grammar_vocab *v = small_vocab((const char *[]){"a"}, 1);
	bool acc;
	CHECK(g && first_bad(g, v, "(((x)))", &acc) == 7 && acc);
	grammar_unref(g);
	grammar_vocab_free(v);
}

static char *repeat_text(const char *head, const char *unit, size_t n, const char *tail) {
	size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail);
	char *s = malloc(hl + ul * n + tl + 1);
	memcpy(s, head, hl);
	for (size_t i = 0; i < n; i++) memcpy(s + hl + i * ul, unit, ul);
	memcpy(s + hl + ul * n, tail, tl + 1);
	return s;
}

static void test_hostile(void) {
	char err[256];
	grammar *g = NULL;
	char *s = repeat_text("root ::= ", "(", 100000, "\"a\"");
	CHECK(grammar_compile(&g, s, strlen(s), NULL, err, sizeof err) == LANES_ELIMIT && strstr(err, "deeper than 64"));
	free(s);
	s = repeat_text("root ::= \"a\"", "{0,1000}", 80, "");
	CHECK(grammar_compile(&g, s, strlen(s), NULL, err, sizeof err) == LANES_ELIMIT && strstr(err, "rules"));
	free(s);
	s = repeat_text("root ::= \"a\"", "{1000}{1000}", 1, "{1001}");
	CHECK(grammar_compile(&g, s, strlen(s), NULL, err, sizeof err) == LANES_ELIMIT && strstr(err, "repetition"));
	free(s);
	s = repeat_text("root ::= ", "\"a\" | ", 200000, "\"b\"");
	CHECK(grammar_compile(&g, s, strlen(s), NULL, err, sizeof err) == LANES_ELIMIT && strstr(err, "bytes"));
	free(s);
	grammar_limits lim;
	grammar_default_limits(&lim);
	lim.max_elements = 1000;
	s = repeat_text("root ::= \"a\"", "{100}", 12, "");
	CHECK(grammar_compile(&g, s, strlen(s), &lim, err, sizeof err) == LANES_ELIMIT && strstr(err, "elements"));
	free(s);
	// a wide alternation: its start is past max_stacks, refused at compile
	grammar_vocab *v = small_vocab((const char *[]){"a", "b"}, 2);
	s = repeat_text("root ::= ", "\"a\" | ", 20000, "\"b\"");
	CHECKF(grammar_compile(&g, s, strlen(s), NULL, err, sizeof err) == LANES_ELIMIT && !g && strstr(err, "rule 'root'") &&
		       strstr(err, "at the start") && strstr(err, "max_stacks"), "%s", err);
	free(s);
	// ambiguity past max_stacks after a byte: refused at compile, naming the text; past the
	// exploration budget it compiles, and the byte that would need a third stack is refused
	grammar_matcher *m = NULL;
	lim.max_elements = 0, lim.max_stacks = 2;
	const char *amb = "root ::= \"x\" (\"ab\" | \"ac\" | \"ad\") | \"y\" (\"a\" | \"b\")";
	CHECKF(grammar_compile(&g, amb, strlen(amb), &lim, err, sizeof err) == LANES_ELIMIT && strstr(err, "line 1, column 1: rule 'root'") &&
		       strstr(err, "after \"x\" a match would follow more than 2 parses"), "%s", err);
	lim.max_explore = 1;
	CHECK(grammar_compile(&g, amb, strlen(amb), &lim, err, sizeof err) == 0);
	CHECK(g && grammar_matcher_new(&m, g, v, NULL, 0, err, sizeof err) == 0);
	CHECK(m && grammar_matcher_accept_bytes(m, "x", 1) == LANES_EINVAL && grammar_matcher_accept_bytes(m, "ya", 2) == 0);
	grammar_matcher_free(m);
	grammar_unref(g);
	bool acc;
	// nested nullable repetitions: expansion is shared, not exponential
	g = compile("root ::= x{0,1000} x{0,1000} x{0,1000} \"b\"\nx ::= \"a\"?");
	CHECK(g && first_bad(g, v, "aab", &acc) == 3 && acc);
	grammar_unref(g);
	g = compile("root ::= (\"a\"{1000}){1000}");
	CHECK(g && first_bad(g, v, "aaaaab", &acc) == 5 && !acc);
	grammar_unref(g);
	grammar_vocab_free(v);
}

// Ambiguity that grows only after some text is refused at compile time, with the rule and a
// text that leads there; ambiguity that stays bounded compiles. Past the exploration budget
// a grammar compiles, and where every way on is past max_stacks its mask holds no token.
static void test_late_ambiguity(void) {
	static const struct {
		const char *text, *want;
	} late[] = {
		{"root ::= \"Answer: \" a\na ::= \"x\" a \"y\" | \"x\" a \"y\" | \"\"\n", "line 2, column 1: rule 'a' is too ambiguous: after \"Answer: xxxxxxxxxx"},
		{"root ::= \"{\" ws \"\\\"k\\\":\" ws v ws \"}\"\nv ::= \"[\" v \"]\" | \"[\" v \"]\" | \"0\"\nws ::= \" \"?\n", "rule 'v' is too ambiguous: after \"{\\\"k\\\":[[[[[[[[["},
	};
	for (size_t i = 0; i < sizeof late / sizeof *late; i++) {
		CHECKF(refused_as(late[i].text, LANES_ELIMIT, late[i].want), "late %zu", i);
		CHECKF(refused_as(late[i].text, LANES_ELIMIT, "more than 4096 parses at once (max_stacks)"), "late %zu", i);
	}
	char err[256];
	// bounded ambiguity: alternatives that meet again, a nesting that is deep but not ambiguous
	grammar_vocab *v = small_vocab((const char *[]){"a", "x", "y", "(", ")"}, 5);
	bool acc;
	grammar *g = compile("root ::= \"Answer: \" (\"a\" | \"a\" | \"a\" \"a\")*\n");
	char *s = repeat_text("Answer: ", "a", 5000, "");
	CHECK(g && first_bad(g, v, s, &acc) == strlen(s) && acc);
	grammar_unref(g);
	free(s);
	g = compile("root ::= \"(\" root \")\" | \"x\"");
	s = repeat_text("", "(", 3000, "x");
	CHECK(g && first_bad(g, v, s, &acc) == strlen(s) && !acc);
	grammar_unref(g);
	free(s);
	// past the budget: the text leads on until every way is past max_stacks, then no token fits
	grammar_limits lim;
	grammar_default_limits(&lim);
	lim.max_explore = 50;
	g = NULL;
	CHECK(grammar_compile(&g, late[0].text, strlen(late[0].text), &lim, err, sizeof err) == 0);
	// after ten x: 1024 frames, each with two x tops and a y top; the eleventh x needs 6144
	CHECK(g && first_bad(g, v, "Answer: xxxxxxxxxxyyyyy", &acc) == strlen("Answer: xxxxxxxxxxyyyyy"));
	CHECK(g && first_bad(g, v, "Answer: xxxxxxxxxxx", &acc) == strlen("Answer: xxxxxxxxxx"));
	grammar_unref(g);
	lim.max_stacks = 2, lim.max_explore = 1;
	const char *dead = "root ::= \"ax\" (\"yy\" | \"yx\" | \"ya\")";
	g = NULL;
	CHECK(grammar_compile(&g, dead, strlen(dead), &lim, err, sizeof err) == 0);
	grammar_matcher *m = NULL;
	const uint64_t *mask;
	CHECK(g && grammar_matcher_new(&m, g, v, NULL, 0, err, sizeof err) == 0);
	CHECK(m && grammar_matcher_mask(m, &mask) == 0 && mask[0] == 1); // "a"
	CHECK(m && grammar_matcher_accept(m, 0) == 0 && grammar_matcher_mask(m, &mask) == 0 && mask[0] == 0);
	CHECK(m && !grammar_matcher_accepting(m) && !grammar_matcher_finished(m));
	grammar_matcher_free(m);
	grammar_unref(g);
	lim.max_explore = 0;
	CHECKF(grammar_compile(&g, dead, strlen(dead), &lim, err, sizeof err) == LANES_ELIMIT && strstr(err, "after \"ax\""), "%s", err);
	grammar_vocab_free(v);
}

// Whether token ids 0..n-1 (pieces) pass after path: a fresh matcher replays path and tries it.
static bool brute_allows(grammar *g, const grammar_vocab *v, const char *const *trig, int nt, const int32_t *path,
			 size_t np, int32_t id) {
	grammar_matcher *b;
	char err[128];
	if (grammar_matcher_new(&b, g, v, trig, nt, err, sizeof err)) return false;
	for (size_t i = 0; i < np; i++) grammar_matcher_accept(b, path[i]);
	bool ok = grammar_matcher_accept(b, id) == 0;
	grammar_matcher_free(b);
	return ok;
}

// Compares the mask after each step of path with brute force for every token.
static void masks_vs_brute(grammar *g, const grammar_vocab *v, const char *const *trig, int nt, const int32_t *path,
			   size_t np, const char *what) {
	grammar_matcher *m;
	char err[128];
	CHECK(grammar_matcher_new(&m, g, v, trig, nt, err, sizeof err) == 0);
	int32_t n = grammar_vocab_size(v);
	for (size_t k = 0; k <= np; k++) {
		const uint64_t *mask;
		CHECK(grammar_matcher_mask(m, &mask) == 0);
		int bad = 0;
		for (int32_t id = 0; id < n; id++) {
			bool bit = mask[id / 64] >> (id % 64) & 1;
			if (bit != brute_allows(g, v, trig, nt, path, k, id) && bad++ < 3)
				fprintf(stderr, "%s step %zu: token %d mask %d\n", what, k, id, bit);
		}
		CHECKF(!bad, "%s: step %zu: %d tokens differ", what, k, bad);
		if (k < np) CHECKF(grammar_matcher_accept(m, path[k]) == 0, "%s: step %zu refused", what, k);
	}
	grammar_matcher_free(m);
}

static const char *syn[] = {
	"{", "}", "[", "]", "\"", ":", ",", " ", "\n", "a", "b", "1", "0", "-", ".", "e", "true", "false", "null",
	"{\"", "\":", "\": ", "\",", "\"}", "}}", "]}", "[{", "ab", "abc", "\\", "\\n", "\\u", "00e9", "\xE2", "\x82",
	"\xAC", "\xE2\x82\xAC", "\xC3\xA9", "12", "1.5", "e+", "  ", "x", "<to", "ol>", "<tool>", "x<tool>{",
	"ol>{\"", "ol>x", "<tool>[1]", "tru", "e}", "\"a\":1}",
};
#define NSYN ((int32_t)(sizeof syn / sizeof *syn))

static int32_t syn_id(const char *s) {
	for (int32_t i = 0; i < NSYN; i++)
		if (!strcmp(syn[i], s)) return i;
	return -1;
}

static void test_masks_synthetic(void) {
	grammar *g = compile(json_gbnf);
	grammar_vocab *v = small_vocab(syn, NSYN);
	if (!g || !v) return;
	const char *doc[] = {"{\"", "a", "\": ", "[", "1.5", ",", "\"", "\xE2", "\x82", "\xAC", "\"", "]", ",", "\"", "b",
			     "\":", "true", "}"};
	int32_t path[32];
	size_t np = sizeof doc / sizeof *doc;
	for (size_t i = 0; i < np; i++) path[i] = syn_id(doc[i]);
	masks_vs_brute(g, v, NULL, 0, path, np, "json");
	// lazy: free text until <tool>, then a JSON value
	grammar *gt = compile("root ::= \"<tool>\" value\nvalue ::= \"{\" [\"a-z:1]* \"}\" | \"[1]\"");
	const char *trig[] = {"<tool>"};
	const char *ldoc[] = {"ab", " ", "<to", "ol>{\"", "a", "\":", "1", "}"};
	np = sizeof ldoc / sizeof *ldoc;
	for (size_t i = 0; i < np; i++) path[i] = syn_id(ldoc[i]);
	masks_vs_brute(gt, v, trig, 1, path, np, "lazy");
	grammar_matcher *m;
	char err[128];
	CHECK(grammar_matcher_new(&m, gt, v, trig, 1, err, sizeof err) == 0);
	CHECK(!grammar_matcher_triggered(m) && grammar_matcher_accepting(m));
	CHECK(grammar_matcher_accept(m, syn_id("x<tool>{")) == 0 && grammar_matcher_triggered(m));
	CHECK(!grammar_matcher_accepting(m) && grammar_matcher_accept(m, NSYN) == LANES_EINVAL);
	CHECK(grammar_matcher_accept(m, syn_id("}")) == 0 && grammar_matcher_finished(m));
	CHECK(grammar_matcher_accept(m, NSYN) == 0);
	grammar_matcher_free(m);
	CHECK(grammar_matcher_new(&m, gt, v, (const char *[]){""}, 1, err, sizeof err) == LANES_EINVAL);
	grammar_unref(gt);
	grammar_unref(g);
	grammar_vocab_free(v);
}

// The mask after text s fed as bytes (a copy of the mask in *out).
static bool mask_after(grammar *g, const grammar_vocab *v, const char *s, uint64_t **out) {
	grammar_matcher *m;
	char err[128];
	if (grammar_matcher_new(&m, g, v, NULL, 0, err, sizeof err)) return false;
	const uint64_t *mask;
	bool ok = grammar_matcher_accept_bytes(m, s, strlen(s)) == 0 && grammar_matcher_mask(m, &mask) == 0;
	size_t words = ((size_t)grammar_vocab_size(v) + 63) / 64;
	*out = ok ? malloc(words * 8) : NULL;
	if (*out) memcpy(*out, mask, words * 8);
	grammar_matcher_free(m);
	return *out != NULL;
}

static void test_real_vocab(const char *name) {
	char path[1024], err[512];
	t_case("%s", name);
	snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", t_shared(), name);
	gguf *gf;
	if (gguf_open(&gf, path, err, sizeof err)) { CHECKF(0, "%s: %s", path, err); return; }
	tok_vocab *tv = NULL;
	int rc = tok_vocab_load(&tv, gf, err, sizeof err);
	gguf_free(gf);
	CHECK(rc == 0);
	if (rc) return;
	int32_t n = tok_n_tokens(tv);
	const char **pc = malloc((size_t)n * sizeof *pc);
	uint32_t *len = malloc((size_t)n * sizeof *len);
	bool *usable = malloc((size_t)n);
	for (int32_t i = 0; i < n; i++) {
		size_t l = 0;
		pc[i] = tok_piece(tv, i, 0, &l);
		len[i] = (uint32_t)l;
		usable[i] = pc[i] && l && !tok_is_control(tv, i);
	}
	size_t neog;
	const int32_t *eog = tok_eog_ids(tv, &neog);
	grammar_vocab *v;
	CHECK(grammar_vocab_new(&v, n, pc, len, usable, eog, neog) == 0);
	grammar *g = compile(json_gbnf);
	// a few structural states, each mask against brute force over the whole vocabulary
	static const char *states[] = {"", "{\"a\": 1", "[1, ", "{\"a\": [true, {\"b\": nul"};
	for (size_t s = 0; s < sizeof states / sizeof *states; s++) {
		grammar_matcher *m;
		CHECK(grammar_matcher_new(&m, g, v, NULL, 0, err, sizeof err) == 0);
		CHECK(grammar_matcher_accept_bytes(m, states[s], strlen(states[s])) == 0);
		const uint64_t *mask;
		CHECK(grammar_matcher_mask(m, &mask) == 0);
		int bad = 0, allowed = 0;
		grammar_matcher *b = NULL;
		for (int32_t id = 0; id < n; id++) {
			if (!b && (grammar_matcher_new(&b, g, v, NULL, 0, err, sizeof err) ||
				   grammar_matcher_accept_bytes(b, states[s], strlen(states[s]))))
				break;
			bool ok = grammar_matcher_accept(b, id) == 0;
			if (ok) grammar_matcher_free(b), b = NULL, allowed++; // it moved: start afresh
			bool bit = mask[id / 64] >> (id % 64) & 1;
			if (bit != ok && bad++ < 3) fprintf(stderr, "state '%s': token %d mask %d\n", states[s], id, bit);
		}
		grammar_matcher_free(b);
		CHECKF(!bad && allowed > 0, "state '%s': %d differ, %d allowed", states[s], bad, allowed);
		grammar_matcher_free(m);
	}
	// the same state reached by different paths gives the same mask
	uint64_t *a = NULL, *b = NULL, *c = NULL, *b2 = NULL;
	CHECK(mask_after(g, v, "{\"a\": 1, \"b\": ", &a) && mask_after(g, v, "{\"ccc\": [1, {\"d\": \"e\"}], \"b\": ", &b));
	CHECK(mask_after(g, v, "[1", &c) && mask_after(g, v, "{\"a\": 1", &b2));
	size_t words = ((size_t)n + 63) / 64;
	CHECK(a && b && !memcmp(a, b, words * 8));
	CHECK(c && b2 && memcmp(b2, c, words * 8)); // different states: ']' against '}'
	free(a), free(b), free(c), free(b2);
	grammar_unref(g);
	grammar_vocab_free(v);
	free(pc), free(len), free(usable);
	tok_vocab_free(tv);
}

// A nesting deeper than the matcher's table bounds: its caches start afresh between calls
// and the position survives (every ')' must still be matched).
static void test_deep_flush(void) {
	grammar *g = compile("root ::= \"(\" root \")\" | \"x\"");
	grammar_vocab *v = small_vocab((const char *[]){"(", ")", "x"}, 3);
	grammar_matcher *m;
	char err[128];
	CHECK(g && grammar_matcher_new(&m, g, v, NULL, 0, err, sizeof err) == 0);
	if (!g) return;
	enum { DEPTH = 300000, CHUNK = 1000 };
	char buf[CHUNK];
	bool ok = true;
	memset(buf, '(', CHUNK);
	for (int i = 0; i < DEPTH / CHUNK && ok; i++) ok = grammar_matcher_accept_bytes(m, buf, CHUNK) == 0;
	CHECK(ok);
	const uint64_t *mask;
	CHECK(grammar_matcher_mask(m, &mask) == 0 && mask[0] == 5); // '(' and 'x'
	CHECK(grammar_matcher_accept(m, 2) == 0 && grammar_matcher_mask(m, &mask) == 0 && mask[0] == 2);
	memset(buf, ')', CHUNK);
	for (int i = 0; i < DEPTH / CHUNK - 1 && ok; i++) ok = grammar_matcher_accept_bytes(m, buf, CHUNK) == 0;
	CHECK(ok && !grammar_matcher_accepting(m));
	CHECK(grammar_matcher_accept_bytes(m, buf, CHUNK - 1) == 0 && !grammar_matcher_accepting(m));
	CHECK(grammar_matcher_accept(m, 1) == 0 && grammar_matcher_finished(m));
	CHECK(grammar_matcher_mask(m, &mask) == 0 && mask[0] == 8); // only the eog id
	grammar_matcher_free(m);
	grammar_unref(g);
	grammar_vocab_free(v);
}

// Random token soup: every text compiles or fails with a message; for those that compile,
// masks along a random walk match brute force over the synthetic vocabulary.
static void test_random_grammars(void) {
	static const char *parts[] = {"root ::= ", "a ::= ", "b ::= ", "a", "b", "root", "\"x\"", "\"{\"", "\"ab\"", "[a-z]",
				      "[^\"]", ".", "(", ")", "|", "*", "+", "?", "{1,2}", "{0,}", "\n", " ", "#c\n", "\"\\u00e9\"",
				      "[\\xE2-\\xE3]", "\"\"", "{3}"};
	grammar_vocab *v = small_vocab(syn, NSYN);
	uint64_t seed = 42;
	int compiled = 0;
	for (int it = 0; it < 3000; it++) {
		char text[512];
		size_t n = 0;
		int k = 1 + (int)((seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 60);
		n += (size_t)snprintf(text, sizeof text, "root ::= ");
		for (int i = 0; i < k * 2 && n < 400; i++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			n += (size_t)snprintf(text + n, sizeof text - n, "%s", parts[(seed >> 33) % (sizeof parts / sizeof *parts)]);
		}
		char err[256] = "";
		grammar *g = NULL;
		int rc = grammar_compile(&g, text, n, NULL, err, sizeof err);
		CHECKF((rc == 0) == (g != NULL) && (rc == 0 || (err[0] && (rc == LANES_EFORMAT || rc == LANES_ELIMIT))),
		       "'%s': rc %d '%s'", text, rc, err);
		if (!g) continue;
		grammar_matcher *m;
		if (grammar_matcher_new(&m, g, v, NULL, 0, err, sizeof err)) { grammar_unref(g); continue; }
		if (compiled++ < 150) { // brute force is quadratic in the path: a sample is enough
			int32_t path[8];
			size_t np = 0;
			for (; np < 8; np++) {
				const uint64_t *mask;
				if (grammar_matcher_mask(m, &mask)) break;
				int32_t cand[NSYN + 1], nc = 0;
				for (int32_t id = 0; id < NSYN; id++)
					if (mask[id / 64] >> (id % 64) & 1) cand[nc++] = id;
				if (!nc) break;
				seed = seed * 6364136223846793005ull + 1442695040888963407ull;
				path[np] = cand[(seed >> 33) % (uint64_t)nc];
				if (grammar_matcher_accept(m, path[np])) { CHECKF(0, "'%s': a masked token is refused", text); break; }
			}
			masks_vs_brute(g, v, NULL, 0, path, np, text);
		}
		grammar_matcher_free(m);
		grammar_unref(g);
	}
	CHECKF(compiled > 100, "only %d random grammars compiled", compiled);
	grammar_vocab_free(v);
}

int main(void) {
	if (cli_env_apply()) return 2; // LANES_LOG and the other knobs, as the CLI reads them
	test_parse_errors();
	test_layouts();
	test_json();
	test_repeat();
	test_utf8();
	test_left_recursion();
	test_hostile();
	test_late_ambiguity();
	test_masks_synthetic();
	test_random_grammars();
	test_deep_flush();
	test_real_vocab("qwen2");
	test_real_vocab("llama-spm");
	T_DONE("grammar");
}
