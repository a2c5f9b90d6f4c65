// tests: JSON Schema to GBNF. Every unsupported keyword is refused with its pointer (relaxed
// mode relaxes it and names it); limits end hostile schemas; each keyword's grammar takes valid
// documents and refuses invalid ones, byte by byte, as for each schema of tests/corpus/schema.
#include "base/base.h"
#include "grammar/grammar.h"
#include "grammar/schema.h"
#include "t.h"

#include <dirent.h>
#include <jansson.h>

static grammar_vocab *vocab; // one byte-sized piece: accept_bytes needs a vocabulary only

static int gbnf_of(const char *schema_text, char **out, char *err, size_t errlen) {
	json_error_t je;
	json_t *s = json_loads(schema_text, JSON_DECODE_ANY, &je);
	if (!s) return snprintf(err, errlen, "bad test JSON: %s", je.text), -100;
	int rc = grammar_schema_gbnf(s, "root", out, err, errlen);
	json_decref(s);
	return rc;
}

// Whether text is a whole sentence of g, taken byte by byte.
static bool takes(grammar *g, const char *text) {
	grammar_matcher *m = NULL;
	char err[128];
	if (grammar_matcher_new(&m, g, vocab, NULL, 0, err, sizeof err)) return false;
	bool ok = true;
	for (size_t i = 0; text[i] && ok; i++) ok = grammar_matcher_accept_bytes(m, text + i, 1) == 0;
	ok = ok && grammar_matcher_accepting(m);
	grammar_matcher_free(m);
	return ok;
}

static grammar *compile(const char *gbnf) {
	grammar *g = NULL;
	char err[256];
	if (grammar_compile(&g, gbnf, strlen(gbnf), NULL, err, sizeof err)) fprintf(stderr, "compile: %s\n%s", err, gbnf);
	return g;
}

// Checks, for one schema, the documents (raw JSON text) its grammar takes and refuses.
typedef struct {
	const char *schema;
	const char *valid[8], *invalid[8];
} doc_case;

static void check_docs(const doc_case *c, bool relaxed, const char *want_relaxed) {
	json_t *s = json_loads(c->schema, JSON_DECODE_ANY, NULL);
	char *gbnf = NULL, err[512] = "", rel[256] = "?";
	int rc = !s ? -100 : relaxed ? grammar_schema_gbnf_relaxed(s, "root", &gbnf, rel, sizeof rel, err, sizeof err)
				      : grammar_schema_gbnf(s, "root", &gbnf, err, sizeof err);
	json_decref(s);
	CHECKF(rc == 0, "%s: rc %d %s", c->schema, rc, err);
	if (want_relaxed) CHECKF(!strcmp(rel, want_relaxed), "%s: relaxed [%s], want [%s]", c->schema, rel, want_relaxed);
	grammar *g = rc ? NULL : compile(gbnf);
	CHECKF(g != NULL, "%s compiles", c->schema);
	for (int i = 0; i < 8 && c->valid[i]; i++) CHECKF(g && takes(g, c->valid[i]), "%s: refuses %s", c->schema, c->valid[i]);
	for (int i = 0; i < 8 && c->invalid[i]; i++) CHECKF(g && !takes(g, c->invalid[i]), "%s: takes %s", c->schema, c->invalid[i]);
	grammar_unref(g);
	free(gbnf);
}

static grammar *schema_grammar(const char *schema_text) {
	char *gbnf = NULL, err[256];
	int rc = gbnf_of(schema_text, &gbnf, err, sizeof err);
	CHECKF(rc == 0, "%s: %s", schema_text, err);
	grammar *g = rc ? NULL : compile(gbnf);
	free(gbnf);
	return g;
}

static void test_refusals(void) {
	static const struct {
		const char *schema;
		int code;
		const char *msg;
	} cases[] = {
		{"{\"not\": {}}", LANES_EINVAL, "unsupported keyword 'not' at the root"},
		{"{\"type\": \"object\", \"properties\": {\"a\": {\"if\": {}, \"then\": {}}}}", LANES_EINVAL, "unsupported keyword 'if' at /properties/a"},
		{"{\"type\": \"object\", \"patternProperties\": {\"^x\": {}}}", LANES_EINVAL, "unsupported keyword 'patternProperties' at the root"},
		{"{\"type\": \"object\", \"properties\": {\"a/b\": {\"dependentSchemas\": {}}}}", LANES_EINVAL, "unsupported keyword 'dependentSchemas' at /properties/a~1b"},
		{"{\"type\": \"array\", \"items\": {\"type\": \"array\", \"uniqueItems\": true}}", LANES_EINVAL, "unsupported keyword 'uniqueItems' at /items"},
		{"{\"type\": \"number\", \"multipleOf\": 0.3}", LANES_EINVAL, "unsupported keyword 'multipleOf'"},
		{"{\"type\": \"integer\", \"minimum\": 1000000, \"maximum\": 9999999, \"multipleOf\": 7}", LANES_EINVAL, "too many multiples of 7"},
		{"{\"type\": \"string\", \"x-custom\": 1}", LANES_EINVAL, "unsupported keyword 'x-custom'"},
		{"{\"type\": \"string\", \"format\": \"binary\"}", LANES_EINVAL, "unsupported format 'binary' at the root"},
		{"{\"$ref\": \"https://example.com/s.json\"}", LANES_EINVAL, "unsupported $ref"},
		{"{\"$ref\": \"#/$defs/missing\", \"$defs\": {}}", LANES_EINVAL, "does not resolve"},
		{"{\"$ref\": \"#\"}", LANES_EINVAL, "left recursion"},
		{"{\"$ref\": \"#/$defs/a\", \"type\": \"string\", \"$defs\": {\"a\": {}}}", LANES_EINVAL, "unsupported keyword 'type' beside '$ref'"},
		{"{\"anyOf\": [{\"$ref\": \"#\"}, {\"type\": \"null\"}]}", LANES_EINVAL, "left recursion"},
		{"{\"type\": \"string\", \"pattern\": \"^\\\\p{L}$\"}", LANES_EINVAL, "Unicode property"},
		{"{\"type\": \"string\", \"pattern\": \"^(a)\\\\1$\"}", LANES_EINVAL, "backreference"},
		{"{\"type\": \"string\", \"pattern\": \"^(?=a)a$\"}", LANES_EINVAL, "lookaround"},
		{"{\"type\": \"string\", \"pattern\": \"^a\\\\bb$\"}", LANES_EINVAL, "word boundary"},
		{"{\"type\": \"string\", \"pattern\": \"^a(b$\"}", LANES_EINVAL, "unclosed '('"},
		{"{\"type\": \"string\", \"pattern\": \"^a^b$\"}", LANES_EINVAL, "'^' inside the pattern"},
		{"{\"type\": \"string\", \"pattern\": \"^x(ab|)*$\"}", LANES_EINVAL, "'*' repeats a group that can match the empty string"},
		{"{\"type\": \"string\", \"pattern\": \"^((a|)b?){2,}$\"}", LANES_EINVAL, "'{' repeats a group that can match the empty string"},
		{"{\"type\": \"string\", \"format\": \"time\", \"pattern\": \"^[0-9]{2}:[0-9]{2}$\"}", LANES_EINVAL, "no string satisfies both 'pattern' and 'format'"},
		{"{\"type\": \"string\", \"pattern\": \"^[a-z]{1000}$\", \"maxLength\": 2000, \"minLength\": 1001}", LANES_EINVAL, "no string satisfies"},
		{"{\"type\": \"number\", \"maximum\": 1.5}", LANES_EINVAL, "unsupported keyword 'maximum' for a number"},
		{"{\"type\": \"number\", \"minimum\": 1, \"exclusiveMaximum\": 1}", LANES_EINVAL, "no number lies"},
		{"{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}", LANES_EINVAL, "no integer"},
		{"{\"type\": \"string\", \"minLength\": 5, \"maxLength\": 4}", LANES_EINVAL, "minLength exceeds maxLength"},
		{"{\"type\": \"string\", \"minLength\": 200000}", LANES_ELIMIT, "exceeds 100000"},
		{"{\"type\": \"array\", \"maxItems\": 5000}", LANES_ELIMIT, "exceeds 1000"},
		{"{\"type\": \"object\", \"properties\": {}, \"required\": [\"a\"], \"additionalProperties\": false}", LANES_EINVAL, "required property 'a' is not in properties"},
		{"{\"type\": \"array\", \"items\": [{}], \"prefixItems\": [{}]}", LANES_EINVAL, "beside 'prefixItems'"},
		{"{\"type\": \"strings\"}", LANES_EINVAL, "unknown type 'strings'"},
		{"{\"enum\": []}", LANES_EINVAL, "'enum' must be a non-empty array"},
		{"{\"type\": \"string\", \"enum\": [1, 2]}", LANES_EINVAL, "no value of 'enum'"},
		{"false", LANES_EINVAL, "schema false"},
		{"[1]", LANES_EINVAL, "a schema must be an object or a boolean"},
		{"{\"allOf\": [{\"type\": \"string\"}, {\"maxLength\": 3}]}", LANES_EINVAL, "only object schemas merge"},
		{"{\"oneOf\": [{\"type\": \"number\"}, {\"type\": \"integer\"}]}", LANES_EINVAL, "alternatives 0 and 1 may both match"},
		{"{\"oneOf\": [{\"type\": \"object\"}, {\"type\": \"object\", \"required\": [\"a\"], \"properties\": {\"a\": {}}}]}",
		 LANES_EINVAL, "unsupported keyword 'oneOf'"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char *out = NULL, err[512] = "";
		int rc = gbnf_of(cases[i].schema, &out, err, sizeof err);
		CHECKF(rc == cases[i].code && strstr(err, cases[i].msg) && !out, "%s: rc %d, '%s' (want '%s')", cases[i].schema, rc,
		       err, cases[i].msg);
		free(out);
	}
	char *out = NULL, err[256];
	json_t *s = json_pack("{s:s}", "type", "string");
	CHECK(grammar_schema_gbnf(s, "bad name", &out, err, sizeof err) == LANES_EINVAL && strstr(err, "root rule name"));
	CHECK(grammar_schema_gbnf(s, "", &out, err, sizeof err) == LANES_EINVAL);
	json_decref(s);
}

static void test_annotations_ignored(void) {
	grammar *g = schema_grammar("{\"$schema\": \"https://json-schema.org/draft/2020-12/schema\", \"$id\": \"x\", \"title\": \"t\","
				    " \"description\": \"d\", \"examples\": [1], \"default\": 2, \"$comment\": \"c\", \"readOnly\": true,"
				    " \"writeOnly\": false, \"deprecated\": false, \"type\": \"integer\"}");
	CHECK(g && takes(g, "12") && !takes(g, "\"12\""));
	grammar_unref(g);
	// allOf of one member, as generators wrap a $ref to give it a default: that member
	g = schema_grammar("{\"$defs\": {\"c\": {\"enum\": [\"red\", \"blue\"]}}, \"allOf\": [{\"$ref\": \"#/$defs/c\"}], \"default\": \"red\"}");
	CHECK(g && takes(g, "\"blue\"") && !takes(g, "\"green\""));
	grammar_unref(g);
}

// The keywords zod 4, Pydantic and the agent SDKs write: each one's grammar takes what the
// keyword allows and refuses what it does not.
static void test_keywords(void) {
	static const doc_case cases[] = {
		// zod's record: propertyNames constrains every key
		{"{\"type\": \"object\", \"propertyNames\": {\"type\": \"string\", \"pattern\": \"^[a-z]+$\"}, \"additionalProperties\": {\"type\": \"integer\"}}",
		 {"{}", "{\"ab\": 1, \"c\": 2}"}, {"{\"Ab\": 1}", "{\"a1\": 1}", "{\"ab\": \"x\"}", "{\"\": 1}"}},
		// an enum-keyed record: each name once, in the enum's order, so the object ends
		{"{\"type\": \"object\", \"propertyNames\": {\"enum\": [\"x\", \"y\", 3]}, \"additionalProperties\": {\"type\": \"string\"}}",
		 {"{\"x\": \"1\"}", "{\"x\": \"b\", \"y\": \"a\"}", "{}"}, {"{\"z\": \"1\"}", "{\"3\": \"1\"}", "{\"x\": \"1\", \"x\": \"2\"}", "{\"x\": 1}"}},
		// declared names it refuses are left out; extra keys must differ from the declared ones
		{"{\"type\": \"object\", \"properties\": {\"id\": {\"type\": \"integer\"}, \"toolong\": {\"type\": \"integer\"}},"
		 " \"required\": [\"id\"], \"propertyNames\": {\"maxLength\": 3}, \"additionalProperties\": {\"type\": \"boolean\"}}",
		 {"{\"id\": 1}", "{\"id\": 1, \"ok\": true, \"i\": false}"},
		 {"{\"id\": 1, \"toolong\": 1}", "{\"id\": 1, \"long\": true}", "{\"id\": 1, \"id\": true}", "{\"ok\": true}"}},
		{"{\"type\": \"object\", \"properties\": {\"a\": {}}, \"propertyNames\": false}", {"{}"}, {"{\"a\": 1}"}},
		// zod 4's enum-keyed record: every name required, none in properties; additionalProperties gives their values
		{"{\"type\": \"object\", \"propertyNames\": {\"enum\": [\"red\", \"blue\"]}, \"required\": [\"red\", \"blue\"], \"additionalProperties\": {\"type\": \"integer\"}}",
		 {"{\"red\": 1, \"blue\": 2}"}, {"{\"red\": 1}", "{}", "{\"red\": \"x\", \"blue\": 2}", "{\"red\": 1, \"blue\": 2, \"green\": 3}"}},
		// formats: exact for uuid, ipv4, date, time, date-time, duration; subsets validators take for the rest
		{"{\"type\": \"string\", \"format\": \"uuid\"}", {"\"123e4567-e89b-12d3-a456-426614174000\""},
		 {"\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400g\""}},
		{"{\"type\": \"string\", \"format\": \"ipv4\"}", {"\"192.168.0.1\"", "\"0.0.0.0\"", "\"255.255.255.255\""},
		 {"\"256.1.1.1\"", "\"01.2.3.4\"", "\"1.2.3\"", "\"1.2.3.4.5\""}},
		{"{\"type\": \"string\", \"format\": \"ipv6\"}", {"\"::1\"", "\"2001:db8::8a2e:370:7334\"", "\"fe80::\"", "\"1:2:3:4:5:6:7:8\"", "\"::\""},
		 {"\"1:2:3:4:5:6:7:8:9\"", "\":::\"", "\"12345::\"", "\"1::2::3\""}},
		{"{\"type\": \"string\", \"format\": \"date\"}", {"\"2024-02-29\"", "\"2000-02-29\"", "\"1999-12-31\""},
		 {"\"2023-02-29\"", "\"1900-02-29\"", "\"2024-02-30\"", "\"2024-04-31\""}},
		{"{\"type\": \"string\", \"format\": \"time\"}", {"\"23:59:59Z\"", "\"08:30:00.25+05:30\""},
		 {"\"24:00:00Z\"", "\"12:00:00\"", "\"12:00Z\"", "\"12:00:00+24:00\""}},
		{"{\"type\": \"string\", \"format\": \"date-time\"}", {"\"2024-02-29T10:00:00Z\""}, {"\"2024-02-29 10:00:00Z\"", "\"2023-02-29T10:00:00Z\""}},
		{"{\"type\": \"string\", \"format\": \"duration\"}", {"\"P1Y2M3DT4H5M6S\"", "\"PT0S\"", "\"P3W\"", "\"P1D\""},
		 {"\"P\"", "\"PT\"", "\"P1H\"", "\"1D\""}},
		{"{\"type\": \"string\", \"format\": \"hostname\"}", {"\"api.example.com\"", "\"localhost\""}, {"\"-a.com\"", "\"a_b.com\"", "\"a..b\""}},
		{"{\"type\": \"string\", \"format\": \"email\"}", {"\"a.b+c@example.co.uk\""}, {"\"a@b\"", "\"a..b@x.com\"", "\"@x.com\"", "\"a b@x.com\""}},
		{"{\"type\": \"string\", \"format\": \"uri\"}", {"\"https://example.com/a/b?x=1#f\"", "\"http://a.io:8080/\""},
		 {"\"example.com\"", "\"https://\"", "\"http://exa mple.com\"", "\"https://a.com/%zz\""}},
		// a pattern beside a format: both hold (zod's uuid and date-time)
		{"{\"type\": \"string\", \"format\": \"uuid\", \"pattern\": \"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-000000000000)$\"}",
		 {"\"123e4567-e89b-42d3-a456-426614174000\"", "\"00000000-0000-0000-0000-000000000000\""}, {"\"123e4567-e89b-92d3-a456-426614174000\""}},
		{"{\"type\": \"string\", \"format\": \"date-time\", \"pattern\": \"^\\\\d{4}-\\\\d\\\\d-\\\\d\\\\dT\\\\d\\\\d:\\\\d\\\\d(:\\\\d\\\\d)?Z$\"}",
		 {"\"2024-02-29T10:00:00Z\""}, {"\"2024-02-29T10:00Z\"", "\"2024-02-29T10:00:00+01:00\"", "\"2023-02-29T10:00:00Z\""}},
		// a pattern beside lengths, a format beside lengths
		{"{\"type\": \"string\", \"pattern\": \"^[a-z]+$\", \"minLength\": 2, \"maxLength\": 4}", {"\"ab\"", "\"abcd\""}, {"\"a\"", "\"abcde\"", "\"ab1\""}},
		{"{\"type\": \"string\", \"format\": \"email\", \"maxLength\": 8}", {"\"a@bc.de\""}, {"\"ab@cd.efg\""}},
		{"{\"type\": \"string\", \"maxLength\": 1e12}", {"\"abc\""}, {"1"}},
		// unanchored patterns search
		{"{\"type\": \"string\", \"pattern\": \"ab\"}", {"\"xxabyy\"", "\"ab\""}, {"\"ba\"", "\"a\""}},
		{"{\"type\": \"string\", \"pattern\": \"^ab\"}", {"\"abz\""}, {"\"zab\""}},
		// multipleOf: by remainder, by last digits, written out, steps of 10^-n
		{"{\"type\": \"integer\", \"multipleOf\": 7}", {"0", "14", "-21", "700000000000007"}, {"15", "-8", "1"}},
		{"{\"type\": \"integer\", \"minimum\": -9007199254740991, \"maximum\": 9007199254740991, \"multipleOf\": 5}", {"0", "-5", "1234567890"}, {"7", "-12"}},
		{"{\"type\": \"integer\", \"multipleOf\": 20}", {"20", "40", "1000", "-60"}, {"30", "1010", "10"}},
		{"{\"type\": \"integer\", \"minimum\": 0, \"maximum\": 100, \"multipleOf\": 25}", {"0", "25", "100"}, {"125", "30", "-25"}},
		{"{\"type\": \"number\", \"multipleOf\": 0.01}", {"1.25", "3", "-0.5"}, {"1.255", "1e-2"}},
		{"{\"type\": \"number\", \"minimum\": 0, \"maximum\": 10, \"multipleOf\": 0.5}", {"0", "9.5", "10"}, {"10.5", "0.25", "-1"}},
		{"{\"type\": \"number\", \"multipleOf\": 3}", {"9", "-3"}, {"9.5", "10"}},
		// tuples: items as an array with additionalItems, prefixItems with items false
		{"{\"type\": \"array\", \"items\": [{\"type\": \"string\"}, {\"type\": \"integer\"}], \"additionalItems\": {\"type\": \"boolean\"}}",
		 {"[\"a\", 1]", "[\"a\", 1, true, false]", "[]"}, {"[\"a\", 1, \"x\"]", "[1]"}},
		{"{\"type\": \"array\", \"prefixItems\": [{\"type\": \"string\"}, {\"type\": \"number\"}], \"items\": false, \"minItems\": 2}",
		 {"[\"a\", 1.5]"}, {"[\"a\"]", "[\"a\", 1, 2]"}},
		// counts of properties
		{"{\"type\": \"object\", \"additionalProperties\": {\"type\": \"integer\"}, \"minProperties\": 1, \"maxProperties\": 2}",
		 {"{\"a\": 1}", "{\"a\": 1, \"b\": 2}"}, {"{}", "{\"a\": 1, \"b\": 2, \"c\": 3}"}},
		{"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, \"required\": [\"a\"], \"additionalProperties\": true, \"maxProperties\": 2}",
		 {"{\"a\": 1}", "{\"a\": 1, \"b\": null}"}, {"{\"a\": 1, \"b\": 2, \"c\": 3}"}},
		{"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"integer\"}}, \"additionalProperties\": false, \"minProperties\": 1}",
		 {"{\"a\": 1}", "{\"b\": 2}"}, {"{}"}},
		// const and enum of any JSON type, numbers in their shortest form
		{"{\"enum\": [{\"a\": [1, null]}, [true], null, 1.5, 0.1, 2.0]}", {"{\"a\": [1, null]}", "[true]", "null", "1.5", "0.1", "2"},
		 {"{\"a\": [1]}", "[false]", "3"}},
		{"{\"const\": \"b\", \"enum\": [\"a\", \"b\"]}", {"\"b\""}, {"\"a\""}},
		// dependentRequired: what depends on a property that may appear is required
		{"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"integer\"}}, \"additionalProperties\": false,"
		 " \"dependentRequired\": {\"a\": [\"b\"]}}", {"{\"a\": 1, \"b\": 2}", "{\"b\": 2}"}, {"{\"a\": 1}"}},
		{"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, \"additionalProperties\": false, \"dependentRequired\": {\"a\": [\"c\"]}}",
		 {"{}"}, {"{\"a\": 1}", "{\"c\": 1}"}},
		// annotations
		{"{\"type\": \"string\", \"deprecated\": true, \"readOnly\": true, \"writeOnly\": false, \"examples\": [\"x\"], \"$comment\": \"c\", \"default\": \"d\"}",
		 {"\"x\""}, {"1"}},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_docs(&cases[i], false, NULL);
	// the strict compiler refuses these, the relaxed one never names a keyword for them
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_docs(&cases[i], true, "");
}

// Relaxed mode: what cannot be checked is relaxed (a node to its type, or a keyword dropped)
// and named once; a malformed schema and the limits are still refused.
static void test_relaxed(void) {
	static const struct {
		doc_case c;
		const char *names;
	} cases[] = {
		{{"{\"type\": \"object\", \"patternProperties\": {\"^x\": {}}, \"properties\": {\"a\": {\"type\": \"string\", \"if\": {}, \"then\": {}},"
		  " \"b\": {\"not\": {\"type\": \"null\"}}, \"c\": {\"type\": \"integer\", \"x-order\": 1, \"if\": {}}}, \"required\": [\"a\", \"b\", \"c\"],"
		  " \"additionalProperties\": false}",
		  {"{\"a\": \"s\", \"b\": null, \"c\": 2}"}, {"{\"a\": 1, \"b\": 1, \"c\": 2}", "{\"a\": \"s\", \"b\": 1, \"c\": \"2\"}"}},
		 "patternProperties, if, then, not, x-order"},
		// a $ref lanes cannot follow: any value; oneOf that may overlap: anyOf
		{{"{\"type\": \"object\", \"properties\": {\"u\": {\"$ref\": \"https://example.com/u.json\"}, \"v\": {\"oneOf\": [{\"type\": \"number\"}, {\"type\": \"integer\"}]}},"
		  " \"required\": [\"u\", \"v\"]}", {"{\"u\": [1, {}], \"v\": 2.5}"}, {"{\"u\": 1, \"v\": \"x\"}"}},
		 "$ref, oneOf"},
		// a pattern it cannot read keeps the format; a pattern no string of the format matches keeps the pattern
		{{"{\"type\": \"string\", \"format\": \"email\", \"pattern\": \"^(?!\\\\.)[a-z.]+@[a-z]+\\\\.[a-z]{2,}$\"}", {"\"a@b.co\""}, {"\"a@b\""}}, "pattern"},
		{{"{\"type\": \"string\", \"format\": \"time\", \"pattern\": \"^(?:[01]\\\\d|2[0-3]):[0-5]\\\\d$\"}", {"\"10:00\""}, {"\"10:00:00Z\""}}, "format"},
		// bounds that are not whole widen to the whole numbers past them
		{{"{\"type\": \"number\", \"minimum\": 0.5, \"exclusiveMaximum\": 2.5}", {"0", "3", "1.5"}, {"4", "-1"}}, "minimum, exclusiveMaximum"},
		// allOf of other than objects: its type alone (none here: any value)
		{{"{\"allOf\": [{\"type\": \"string\"}, {\"maxLength\": 3}]}", {"\"abcdef\"", "7"}, {"\"a"}}, "allOf"},
		{{"{\"type\": \"integer\", \"multipleOf\": 1e20}", {"5"}, {"5.5"}}, "multipleOf"},
		{{"{\"type\": \"string\", \"format\": \"binary\", \"maxLength\": 2}", {"\"ab\""}, {"\"abc\""}}, "format"},
		// required names no properties declare are declared, with additionalProperties' schema
		{{"{\"type\": \"object\", \"properties\": {}, \"required\": [\"a\"], \"additionalProperties\": {\"type\": \"integer\"}}",
		  {"{\"a\": 1}"}, {"{}", "{\"a\": \"x\"}"}}, ""},
		// beside enum, $ref and anyOf, the other keywords are dropped
		{{"{\"type\": \"string\", \"enum\": [\"a\", \"bb\"], \"maxLength\": 1}", {"\"a\"", "\"bb\""}, {"\"c\""}}, "maxLength"},
		{{"{\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}], \"oneOf\": [{\"type\": \"string\"}], \"minLength\": 2}",
		  {"\"a\"", "null"}, {"1"}}, "oneOf, minLength"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		check_docs(&cases[i].c, true, cases[i].names);
		// and the exact compiler refuses each of them
		json_t *s = json_loads(cases[i].c.schema, 0, NULL);
		char *out = NULL, err[512] = "";
		int rc = grammar_schema_gbnf(s, "root", &out, err, sizeof err);
		CHECKF((rc == LANES_EINVAL && !out) || !cases[i].names[0], "%s: strict rc %d", cases[i].c.schema, rc);
		free(out);
		json_decref(s);
	}
	// malformed and unsatisfiable schemas, and the limits, are refused in relaxed mode too
	static const char *const refused[] = {"{\"type\": \"strings\"}", "{\"type\": \"string\", \"minLength\": 5, \"maxLength\": 4}",
		"{\"enum\": []}", "{\"$ref\": \"#/$defs/missing\"}", "{\"type\": \"array\", \"maxItems\": 5000}"};
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		json_t *s = json_loads(refused[i], 0, NULL);
		char *out = NULL, err[256] = "", rel[64] = "x";
		int rc = grammar_schema_gbnf_relaxed(s, "root", &out, rel, sizeof rel, err, sizeof err);
		CHECKF(rc != 0 && !out && err[0] && !rel[0], "%s: rc %d", refused[i], rc);
		json_decref(s);
	}
	json_t *s = json_pack("{s:s}", "type", "integer");
	for (int i = 0; i < 5000 && s; i++) s = json_pack("{s:s,s:o,s:i}", "type", "array", "items", s, "x-depth", i);
	char *out = NULL, err[256] = "", rel[16];
	CHECK(s && grammar_schema_gbnf_relaxed(s, "root", &out, rel, sizeof rel, err, sizeof err) == LANES_ELIMIT && !out);
	json_decref(s);
	// names are kept to what a header may carry, and a short list keeps the names that fit
	s = json_loads("{\"type\": \"object\", \"x\\r\\ny\": 1, \"uniqueItems\": true, \"not\": {}}", 0, NULL);
	CHECK(grammar_schema_gbnf_relaxed(s, "root", &out, rel, sizeof rel, err, sizeof err) == 0);
	CHECKF(!strcmp(rel, "x??y, not"), "%s", rel);
	free(out);
	json_decref(s);
}

// A schema nested past the depth bound, and schemas whose grammar would pass 1 MiB, end with
// LANES_ELIMIT in bounded time.
static void test_limits(void) {
	json_t *s = json_pack("{s:s}", "type", "integer");
	for (int i = 0; i < 5000 && s; i++) s = json_pack("{s:s,s:o}", "type", "array", "items", s);
	char *out = NULL, err[256] = "";
	CHECKF(s && grammar_schema_gbnf(s, "root", &out, err, sizeof err) == LANES_ELIMIT && strstr(err, "deeper than 64"), "%s", err);
	json_decref(s);
	// 1,000 enum values of 1,500 bytes: a 1.5 MB schema
	char *big = malloc(1501);
	memset(big, 'x', 1500), big[1500] = 0;
	json_t *e = json_array();
	for (int i = 0; i < 1000; i++) big[0] = (char)('a' + i % 26), big[1] = (char)('a' + i / 26), json_array_append_new(e, json_string(big));
	s = json_pack("{s:o}", "enum", e);
	CHECKF(grammar_schema_gbnf(s, "root", &out, err, sizeof err) == LANES_ELIMIT && strstr(err, "exceed"), "%s", err);
	json_decref(s);
	free(big);
	e = json_array();
	for (int i = 0; i < 5000; i++) json_array_append_new(e, json_integer(i));
	s = json_pack("{s:o}", "enum", e);
	CHECKF(grammar_schema_gbnf(s, "root", &out, err, sizeof err) == LANES_ELIMIT && strstr(err, "more than"), "%s", err);
	json_decref(s);
	json_t *p = json_object();
	for (int i = 0; i < 2000; i++) {
		char k[16];
		snprintf(k, sizeof k, "p%d", i);
		json_object_set_new(p, k, json_pack("{s:s}", "type", "integer"));
	}
	s = json_pack("{s:s,s:o}", "type", "object", "properties", p);
	CHECKF(grammar_schema_gbnf(s, "root", &out, err, sizeof err) == LANES_ELIMIT && strstr(err, "properties"), "%s", err);
	json_decref(s);
	// extra keys are told from a declared one character by character: its length is bounded
	char *key = malloc(100001);
	memset(key, 'k', 100000), key[100000] = 0;
	s = json_pack("{s:s,s:{s:{}},s:b}", "type", "object", "properties", key, "additionalProperties", 1);
	CHECKF(s && grammar_schema_gbnf(s, "root", &out, err, sizeof err) == LANES_ELIMIT && strstr(err, "longer than"), "%s", err);
	json_decref(s);
	free(key);
	// $ref cycles that match no text end too: one through allOf, one of plain $refs
	CHECK(gbnf_of("{\"$defs\": {\"a\": {\"$ref\": \"#/$defs/a\"}}, \"allOf\": [{\"$ref\": \"#/$defs/a\"}, {}]}", &out, err,
		      sizeof err) == LANES_ELIMIT);
	CHECK(gbnf_of("{\"$defs\": {\"a\": {\"$ref\": \"#/$defs/b\"}, \"b\": {\"$ref\": \"#/$defs/a\"}}, \"$ref\": \"#/$defs/a\"}",
		      &out, err, sizeof err) == LANES_EINVAL && strstr(err, "left recursion"));
	CHECK(!out);
}

static void test_corpus(void) {
	DIR *d = opendir("tests/corpus/schema");
	CHECK(d != NULL);
	int files = 0;
	for (struct dirent *de; d && (de = readdir(d));) {
		size_t n = strlen(de->d_name);
		if (n < 6 || strcmp(de->d_name + n - 5, ".json")) continue;
		char path[512];
		snprintf(path, sizeof path, "tests/corpus/schema/%s", de->d_name);
		t_case("%s", de->d_name);
		json_error_t je;
		json_t *f = json_load_file(path, 0, &je);
		CHECKF(f != NULL, "%s: %s", path, je.text);
		char *gbnf = NULL, err[512] = "";
		int rc = f ? grammar_schema_gbnf(json_object_get(f, "schema"), "root", &gbnf, err, sizeof err) : -1;
		CHECKF(rc == 0, "%s: %s", path, err);
		grammar *g = rc ? NULL : compile(gbnf);
		CHECKF(g != NULL, "%s compiles", path);
		files++;
		size_t i;
		json_t *doc;
		json_array_foreach(json_object_get(f, "valid"), i, doc) {
			// compact and pretty-printed: both shapes a model writes
			char *a = json_dumps(doc, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
			char *b = json_dumps(doc, JSON_INDENT(2) | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
			CHECKF(g && takes(g, a), "%s: valid document refused: %s", path, a);
			CHECKF(g && takes(g, b), "%s: valid document refused: %s", path, b);
			free(a), free(b);
		}
		json_array_foreach(json_object_get(f, "invalid"), i, doc) {
			char *a = json_dumps(doc, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
			CHECKF(g && !takes(g, a), "%s: invalid document taken: %s", path, a);
			free(a);
		}
		grammar_unref(g);
		free(gbnf);
		json_decref(f);
	}
	if (d) closedir(d);
	t_case("%s", "");
	CHECKF(files >= 11, "%d corpus files", files);
}

// Collects the containers of v (objects and arrays) into *all, at most cap of them.
static void containers(json_t *v, json_t **all, size_t *n, size_t cap) {
	if ((!json_is_object(v) && !json_is_array(v)) || *n >= cap) return;
	all[(*n)++] = v;
	const char *k;
	json_t *x;
	size_t i;
	if (json_is_object(v)) json_object_foreach(v, k, x) containers(x, all, n, cap);
	else json_array_foreach(v, i, x) containers(x, all, n, cap);
}

// Corpus schemas with one part replaced at random: each ends with a message, or with GBNF
// the grammar engine compiles, never with a crash or a grammar it refuses.
static void test_mutations(void) {
	static const char *const parts[] = {"{}", "true", "false", "5", "-1", "1e300", "\"x\"", "[]", "[{}]", "null",
		"{\"type\": \"string\"}", "{\"$ref\": \"#\"}", "{\"minimum\": 3}", "{\"pattern\": \"^a*(b|c)?$\"}",
		"{\"enum\": [1, \"a\", null]}", "{\"type\": [\"integer\", \"null\"], \"maximum\": 7}", "{\"anyOf\": [{}, {\"type\": \"null\"}]}",
		"{\"type\": \"object\", \"additionalProperties\": true}", "{\"items\": {\"$ref\": \"#\"}}", "\"^[\""};
	DIR *d = opendir("tests/corpus/schema");
	uint64_t seed = 0x9E3779B97F4A7C15u;
	int accepted = 0, refused = 0, relaxed_ok = 0;
	for (struct dirent *de; d && (de = readdir(d));) {
		if (!strstr(de->d_name, ".json")) continue;
		char path[512];
		snprintf(path, sizeof path, "tests/corpus/schema/%s", de->d_name);
		json_t *f = json_load_file(path, 0, NULL);
		for (int it = 0; f && it < 60; it++) {
			json_t *s = json_deep_copy(json_object_get(f, "schema")), *all[256];
			size_t n = 0;
			containers(s, all, &n, 256);
			seed = seed * 6364136223846793005u + 1442695040888963407u;
			json_t *at = all[(seed >> 33) % n], *part = json_loads(parts[(seed >> 13) % 20], JSON_DECODE_ANY, NULL);
			if (json_is_object(at) && json_object_size(at)) {
				void *iter = json_object_iter(at);
				for (size_t k = (seed >> 7) % json_object_size(at); k--;) iter = json_object_iter_next(at, iter);
				json_object_iter_set_new(at, iter, part);
			} else if (json_is_array(at) && json_array_size(at)) json_array_set_new(at, (seed >> 7) % json_array_size(at), part);
			else json_decref(part);
			char *gbnf = NULL, err[512] = "";
			int rc = grammar_schema_gbnf(s, "root", &gbnf, err, sizeof err);
			if (rc == 0) {
				grammar *g = compile(gbnf);
				CHECKF(g != NULL, "%s, mutation %d", path, it);
				grammar_unref(g);
				accepted++;
			} else {
				CHECKF(err[0] && !gbnf, "%s, mutation %d: rc %d without a message", path, it, rc);
				refused++;
			}
			free(gbnf);
			// relaxed: compiles too, or is refused with a message (malformed, past a limit)
			char rel[256];
			gbnf = NULL;
			rc = grammar_schema_gbnf_relaxed(s, "root", &gbnf, rel, sizeof rel, err, sizeof err);
			grammar *g = rc ? NULL : compile(gbnf);
			CHECKF(rc ? err[0] && !gbnf && !rel[0] : g != NULL, "%s, mutation %d relaxed: rc %d", path, it, rc);
			grammar_unref(g);
			relaxed_ok += !rc;
			free(gbnf);
			json_decref(s);
		}
		json_decref(f);
	}
	if (d) closedir(d);
	CHECKF(accepted > 50 && refused > 50 && relaxed_ok > accepted, "%d accepted, %d refused, %d relaxed", accepted, refused, relaxed_ok);
}

// What the corpus cannot say as parsed JSON: raw text a model might write.
static void test_raw_text(void) {
	grammar *g = schema_grammar("{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}}, \"required\": [\"name\"],"
				    " \"additionalProperties\": {\"type\": \"integer\"}}");
	CHECK(g && takes(g, "{\"name\":\"x\",\"nam\":1,\"names\":2}"));
	CHECK(g && !takes(g, "{\"name\":\"x\",\"name\":1}")); // an extra key never repeats a declared one
	CHECK(g && !takes(g, "{\"name\":\"x\",\"n\\u0061me\":1}")); // nor spells one with escapes
	grammar_unref(g);
	g = schema_grammar("{\"type\": \"string\"}");
	CHECK(g && takes(g, "\"\\ud83d\\ude00 \\n\\\"\""));
	CHECK(g && !takes(g, "\"\\ud83d\"")); // a lone surrogate is no character
	CHECK(g && !takes(g, "\"a\nb\""));    // raw control characters are not JSON
	grammar_unref(g);
	// whitespace is bounded: a model cannot spin on it
	g = schema_grammar("{\"type\": \"array\", \"items\": {\"type\": \"integer\"}}");
	char text[64];
	snprintf(text, sizeof text, "[\n%20s1]", "");
	CHECK(g && takes(g, text));
	snprintf(text, sizeof text, "[\n%21s1]", "");
	CHECK(g && !takes(g, text));
	grammar_unref(g);
	g = schema_grammar("{\"type\": \"integer\", \"minimum\": -12, \"maximum\": 1234}");
	CHECK(g && takes(g, "-12") && takes(g, "0") && takes(g, "1234") && takes(g, "999"));
	CHECK(g && !takes(g, "-13") && !takes(g, "1235") && !takes(g, "01") && !takes(g, "-0") && !takes(g, "12345"));
	grammar_unref(g);
	g = schema_grammar("{\"type\": \"string\", \"pattern\": \"^a.c[^x-z\\\"]?$\"}");
	CHECK(g && takes(g, "\"abc\"") && takes(g, "\"a\\\"cq\"") && takes(g, "\"a\\\\c\""));
	CHECK(g && !takes(g, "\"a\\nc\"") && !takes(g, "\"abcy\"") && !takes(g, "\"abc\\\"\""));
	grammar_unref(g);
}

// Lengths past the grammar's repeat bound are still exact.
static void test_long_strings(void) {
	grammar *g = schema_grammar("{\"type\": \"string\", \"minLength\": 1500, \"maxLength\": 2500}");
	char *text = malloc(2600);
	for (int n = 1498; n <= 2502; n++) {
		if (n > 1502 && n < 2498 && n % 250) continue;
		text[0] = '"', memset(text + 1, 'a', (size_t)n), text[n + 1] = '"', text[n + 2] = 0;
		CHECKF(g && takes(g, text) == (n >= 1500 && n <= 2500), "a string of %d characters", n);
	}
	free(text);
	grammar_unref(g);
}

static void test_json_object(void) {
	const char *text = grammar_json_object_gbnf();
	CHECK(text == grammar_json_object_gbnf());
	grammar *g = compile(text);
	CHECK(g && takes(g, "{\"a\": [1, -2.5e3, {\"b\": null}], \"c\": \"x\", \"d\": true}"));
	CHECK(g && takes(g, "{}") && takes(g, "{\n  \"a\": {}\n}"));
	CHECK(g && !takes(g, "[1]") && !takes(g, "{\"a\":1,}") && !takes(g, "\"x\"") && !takes(g, "{a:1}"));
	grammar_unref(g);
}

// Alternatives that overlap under recursion: the schema has GBNF, and the grammar engine
// refuses it at compile time (a 400 for the client), before a generation could get there.
static void test_late_ambiguity(void) {
	const char *amb = "{\"type\": \"object\", \"properties\": {\"answer\": {\"$ref\": \"#/$defs/v\"}}, \"required\": [\"answer\"],"
			  " \"$defs\": {\"v\": {\"anyOf\": [{\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/v\"}},"
			  " {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/v\"}}, {\"type\": \"integer\"}]}}}";
	char *gbnf = NULL, err[512] = "";
	CHECKF(gbnf_of(amb, &gbnf, err, sizeof err) == 0, "%s", err);
	grammar *g = NULL;
	int rc = gbnf ? grammar_compile(&g, gbnf, strlen(gbnf), NULL, err, sizeof err) : -1;
	CHECKF(rc == LANES_ELIMIT && !g && strstr(err, "rule 'root-v") && strstr(err, "after \"{\\\"answer\\\":[[[[") &&
		       strstr(err, "max_stacks"), "rc %d: %s", rc, err);
	free(gbnf);
}

int main(void) {
	char piece[] = "x";
	const char *pieces[] = {piece};
	uint32_t len[] = {1};
	bool usable[] = {true, false};
	const char *p2[] = {piece, ""};
	uint32_t l2[] = {1, 0};
	int32_t eog = 1;
	(void)pieces, (void)len;
	grammar_vocab_new(&vocab, 2, p2, l2, usable, &eog, 1);
	test_refusals();
	test_annotations_ignored();
	test_keywords();
	test_relaxed();
	test_limits();
	test_corpus();
	test_mutations();
	test_raw_text();
	test_long_strings();
	test_json_object();
	test_late_ambiguity();
	grammar_vocab_free(vocab);
	T_DONE("test_schema");
}
