// tests: the compatibility policy's pieces in server/net/base — the list of what a request sent
// and lanes did not honour (each name once, in order, header-safe, bounded with a mark), the
// field tables' named rows (nested names, types still checked), --strict-params's refusal, and
// the placeholders for content a model cannot read, replies' numbers in their shortest form, and
// library error codes as HTTP kinds.
#include "t.h"
#include <math.h>
#include "server/net/base.h"

static http_server srv; // only cfg is read
static srv_conn conn;

static srv_conn *fresh(bool strict) {
	memset(&conn, 0, sizeof conn);
	srv.cfg.strict_params = strict;
	conn.s = &srv;
	return &conn;
}

static void test_list(void) {
	srv_conn *c = fresh(false);
	srv_ignored_add(c, "store");
	srv_ignored_add(c, "text.verbosity");
	srv_ignored_add(c, "store"); // once
	srv_ignored_add(c, "");
	srv_ignored_add(NULL, "x");
	CHECK(!strcmp(c->ignored.names, "store,text.verbosity") && c->ignored.len == strlen(c->ignored.names));
	srv_ignored_add(c, "a,b c\r\n\x01\xc3\xa9"); // nothing that could split the header or the list
	CHECKF(!strcmp(c->ignored.names, "store,text.verbosity,a_b_c_____"), "%s", c->ignored.names);
	srv_ignored_add(c, "stor"); // a prefix of a name is another name
	CHECK(strstr(c->ignored.names, ",stor") && !c->ignored.cut);
	// bounded: names past the room end the list with a mark, and nothing comes after it
	c = fresh(false);
	char name[64];
	for (int i = 0; i < 200; i++) {
		snprintf(name, sizeof name, "field_number_%03d", i);
		srv_ignored_add(c, name);
		CHECK(c->ignored.len < SRV_IGNORED_MAX && c->ignored.len == strlen(c->ignored.names));
	}
	CHECK(c->ignored.cut);
	const size_t n = strlen(c->ignored.names);
	CHECKF(n >= 4 && !strcmp(c->ignored.names + n - 4, ",..."), "%s", c->ignored.names + (n > 40 ? n - 40 : 0));
	srv_ignored_add(c, "z");
	CHECK(strlen(c->ignored.names) == n);
}

static void test_refuse(void) {
	srv_err e;
	srv_conn *c = fresh(false);
	srv_ignored_add(c, "context_management");
	CHECK(srv_ignored_refuse(c, &e) == 0); // named, not refused
	c = fresh(true);
	CHECK(srv_ignored_refuse(c, &e) == 0); // strict, nothing named
	srv_ignored_add(c, "context_management");
	srv_ignored_add(c, "output_config.effort");
	CHECK(srv_ignored_refuse(c, &e) == -1 && e.kind == SRV_E_BAD_REQUEST);
	CHECKF(!strcmp(e.param, "context_management"), "%s", e.param);
	CHECKF(strstr(e.msg, "unsupported parameters") && strstr(e.msg, "(strict_params refuses") &&
		       strstr(e.msg, "context_management,output_config.effort"), "%s", e.msg);
}

typedef struct {
	const char *kept;
} row_dst;

static const srv_field sub_rows[] = {
	SRV_NAMED_AS("effort", STR),
	SRV_IGNORED_AS("quiet", BOOL),
	{0},
};

static const srv_field rows[] = {
	SRV_ROW(row_dst, kept, SRV_K_STR),
	SRV_NAMED_AS("hosted", OBJECT),
	SRV_NAMED_AS("count", INT),
	SRV_NAMED("anything"),
	SRV_IGNORED("user"),
	{"config", SRV_K_OBJECT, .sub = sub_rows},
	{0},
};

// text read with rows into d; d's strings live until the next call (text NULL: frees them).
static int read_rows(srv_conn *c, const char *text, row_dst *d, srv_err *e) {
	static json_t *o;
	json_decref(o);
	o = text ? json_loads(text, 0, NULL) : NULL;
	memset(d, 0, sizeof *d);
	if (!o) return 0;
	return srv_fields_known(o, rows, NULL, e) || srv_fields_read(o, rows, d, NULL, NULL, c, e) ? -1 : 0;
}

static void test_rows(void) {
	srv_err e;
	row_dst d;
	srv_conn *c = fresh(false);
	CHECK(read_rows(c, "{\"kept\":\"k\",\"hosted\":{},\"count\":3,\"anything\":[1],\"user\":5,\"config\":{\"effort\":\"high\",\"quiet\":true}}", &d, &e) == 0);
	CHECK(d.kept && !strcmp(d.kept, "k"));
	CHECKF(!strcmp(c->ignored.names, "hosted,count,anything,config.effort"), "%s", c->ignored.names);
	c = fresh(false);
	CHECK(read_rows(c, "{\"hosted\":null,\"count\":null}", &d, &e) == 0 && c->ignored.len == 0); // null: not sent
	c = fresh(false);
	CHECK(read_rows(c, "{\"hosted\":\"no\"}", &d, &e) == -1 && !strcmp(e.param, "hosted") && strstr(e.msg, "an object"));
	CHECK(read_rows(c, "{\"count\":2.5}", &d, &e) == -1 && !strcmp(e.param, "count") && strstr(e.msg, "an integer"));
	CHECK(read_rows(c, "{\"config\":{\"effort\":1}}", &d, &e) == -1 && !strcmp(e.param, "config.effort"));
	CHECK(read_rows(c, "{\"config\":{\"frob\":1}}", &d, &e) == -1 && !strcmp(e.param, "config.frob"));
	CHECK(read_rows(c, "{\"frob\":1}", &d, &e) == -1 && !strcmp(e.param, "frob") && strstr(e.msg, "unsupported parameter: frob"));
	CHECK(c->ignored.len == 0);
	read_rows(c, NULL, &d, &e);
}

static void test_placeholders(void) {
	static const char *const text[] = {"text", NULL};
	srv_err e;
	char *out = NULL;
	srv_conn *c = fresh(false);
	json_t *parts = json_loads("[{\"type\":\"text\",\"text\":\"Look: \"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}},"
				   "{\"type\":\"image_url\",\"image_url\":{\"url\":\"y\"}},{\"type\":\"input_audio\"}]", 0, NULL);
	CHECK(srv_content_text(parts, "content", text, c, &out, &e) == 0);
	CHECKF(out && !strcmp(out, "Look: [image omitted: this model cannot see images][image omitted: this model cannot see images]"
				   "[audio omitted: this model cannot hear audio]"), "%s", out ? out : "(null)");
	CHECK(!strcmp(c->ignored.names, "image_url,input_audio"));
	free(out);
	json_decref(parts);
	// a text document is its text; another is a placeholder
	c = fresh(false);
	parts = json_loads("[{\"type\":\"document\",\"source\":{\"type\":\"text\",\"data\":\"A cat.\"}},"
			   "{\"type\":\"document\",\"source\":{\"type\":\"base64\",\"data\":\"JVBE\"}}]", 0, NULL);
	CHECK(srv_content_text(parts, "content", text, c, &out, &e) == 0);
	CHECKF(out && !strcmp(out, "A cat.[document omitted: this model cannot read documents]"), "%s", out ? out : "(null)");
	CHECK(!strcmp(c->ignored.names, "document"));
	free(out);
	json_decref(parts);
	// a type no API has is still refused, naming the part
	parts = json_loads("[{\"type\":\"hologram\"}]", 0, NULL);
	CHECK(srv_content_text(parts, "messages[0].content", text, NULL, &out, &e) == -1 && !strcmp(e.param, "messages[0].content[0]"));
	json_decref(parts);
}

// One mapping: a code means what its blame says — busy is a full queue (429) only for the engine,
// a resource's limit a conflict (409) but a request's a 400, a disk failure the client's only
// when the file is one the request named.
static void test_kinds(void) {
	CHECK(srv_kind_of(LANES_EBUSY, SRV_BLAME_ENGINE) == SRV_E_BUSY);
	CHECK(srv_kind_of(LANES_EBUSY, SRV_BLAME_STATE) == SRV_E_CONFLICT && srv_kind_of(LANES_EBUSY, SRV_BLAME_REQUEST) == SRV_E_CONFLICT);
	CHECK(srv_kind_of(LANES_ELIMIT, SRV_BLAME_STATE) == SRV_E_CONFLICT && srv_kind_of(LANES_ELIMIT, SRV_BLAME_REQUEST) == SRV_E_BAD_REQUEST);
	CHECK(srv_kind_of(LANES_EIO, SRV_BLAME_REQUEST) == SRV_E_BAD_REQUEST && srv_kind_of(LANES_EIO, SRV_BLAME_STATE) == SRV_E_INTERNAL);
	CHECK(srv_kind_of(LANES_ENOTFOUND, SRV_BLAME_STATE) == SRV_E_NOT_FOUND);
	for (int b = SRV_BLAME_REQUEST; b <= SRV_BLAME_ENGINE; b++) {
		CHECK(srv_kind_of(LANES_ENOMEM, b) == SRV_E_INTERNAL && srv_kind_of(-1000, b) == SRV_E_INTERNAL);
		CHECK(srv_kind_of(LANES_ECANCELLED, b) == SRV_E_UNAVAILABLE && srv_kind_of(LANES_EINVAL, b) == SRV_E_BAD_REQUEST);
	}
}

// Reals come back as the client wrote them (0.8, not 0.80000000000000004), each still the same
// double, integers and strings untouched, and any double read back exactly.
static void test_shortest(void) {
	json_t *v = json_loads("{\"t\":0.8,\"p\":0.1,\"one\":1.0,\"n\":-0.3,\"e\":1e-05,\"big\":1e+300,\"int\":12345678901234567,"
			       "\"s\":\"0.80000000000000004 \\\" 0.1\",\"a\":[3.0e20,0.30000000000000004,123456.789,5e-324]}",
			       0, NULL);
	CHECK(v != NULL);
	char *t = srv_json_text(v);
	CHECKF(t && !strcmp(t, "{\"t\":0.8,\"p\":0.1,\"one\":1.0,\"n\":-0.3,\"e\":1e-5,\"big\":1e300,\"int\":12345678901234567,"
			       "\"s\":\"0.80000000000000004 \\\" 0.1\",\"a\":[3e20,0.30000000000000004,123456.789,5e-324]}"),
	       "%s", t ? t : "(null)");
	free(t);
	json_decref(v);
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < 20000; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		double d;
		memcpy(&d, &x, sizeof d);
		if (!isfinite(d)) continue;
		if (i % 2) d = (double)(x % 100000) / 1000.0; // values a client writes
		json_t *a = json_pack("[f]", d);
		char *s = srv_json_text(a), *plain = json_dumps(a, JSON_COMPACT);
		json_t *back = s ? json_loads(s, 0, NULL) : NULL;
		CHECKF(back && json_real_value(json_array_get(back, 0)) == d && strlen(s) <= strlen(plain), "%.17g -> %s", d, s);
		json_decref(back);
		json_decref(a);
		free(s);
		free(plain);
	}
}

int main(void) {
	test_shortest();
	test_list();
	test_kinds();
	test_refuse();
	test_rows();
	test_placeholders();
	T_DONE("http_fields");
}
