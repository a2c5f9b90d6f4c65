// tests: the request head as the gate judges it (srv_head_scan) — a sound head needs every
// byte up to its empty line and then passes, whatever follows it; a bad one is refused at its
// first bad byte, with no wait for a line end; the size and count limits sit exactly where
// they are documented; a refusal takes the shape of the API its path belongs to.
#include "t.h"
#include "server/net/sock.h"

static int scan(const char *p, size_t n, bool eof, srv_head *h) { return srv_head_scan((const unsigned char *)p, n, eof, h); }

static void test_sound_heads(void) {
	static const char *const heads[] = {
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /health HTTP/1.0\r\n\r\n",
		"GET /health HTTP/1.1\nHost: a\n\n", // bare LF, as libmicrohttpd takes it
		"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", // blank lines before the request line
		"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n",
		"POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n",
		"GET http://127.0.0.1/health?x=1&y HTTP/1.1\r\nHost: a\r\nX-Tab:\tv\t w \r\nX-Empty:\r\n\r\n",
		"GET /v1/models/\xc3\xa9 HTTP/1.1\r\nHost: a\r\nX-Obs: \xff\r\n\r\n",
		"get * HTTP/1.9\r\n\r\n",
	};
	for (size_t k = 0; k < sizeof heads / sizeof *heads; k++) {
		const char *p = heads[k];
		const size_t n = strlen(p);
		srv_head h;
		CHECKF(scan(p, n, false, &h) == 1 && h.len == n, "head %zu: %s", k, h.msg);
		for (size_t i = 0; i < n; i++) {
			CHECKF(scan(p, i, false, &h) == 0, "head %zu, %zu bytes: %s", k, i, h.msg);
			// a head cut short by the client's close is a 400
			if (i > 0) CHECKF(scan(p, i, true, &h) == -1 && h.status == 400, "head %zu cut at %zu", k, i);
		}
		char both[512];
		snprintf(both, sizeof both, "%s{\"body\": 1}\r\n\x16", p);
		CHECK(scan(both, strlen(both), false, &h) == 1 && h.len == n);
	}
	srv_head h;
	CHECK(scan(heads[4], strlen(heads[4]), false, &h) == 1 && h.has_length && h.length == 12 && !h.chunked);
	CHECK(scan(heads[5], strlen(heads[5]), false, &h) == 1 && h.chunked && !h.has_length);
	CHECK(scan("", 0, true, &h) == -1); // nothing at all, then the close
}

// Each bad head is refused at its byte `at` (the prefix before it still needs more): the first
// bad byte, or for a Content-Length the end of its line.
static void test_refused_at_once(void) {
	static const struct {
		const char *p;
		size_t at;
		int status;
		const char *msg;
	} bad[] = {
		{"\x16\x03\x01\x02\x00", 0, 400, "byte 0x16 at offset 0"},
		{"GE(T / HTTP/1.1\r\n\r\n", 2, 400, "malformed request line"},
		{" GET / HTTP/1.1\r\n\r\n", 0, 400, "malformed request line"},
		{"GET  / HTTP/1.1\r\n\r\n", 4, 400, "malformed request line"},
		{"GET /a\x01 HTTP/1.1\r\n\r\n", 6, 400, "byte 0x01"},
		{"GET /a b HTTP/1.1\r\n\r\n", 7, 400, "%20"},
		{"GET / HTTQ/1.1\r\n\r\n", 9, 400, "malformed request line"},
		{"GET / HTTP/1.x\r\n\r\n", 13, 400, "the version is"},
		{"GET / HTTP/1.1 \r\n\r\n", 14, 400, "malformed request line"},
		{"GET / HTTP/2.0\r\n\r\n", 15, 505, "HTTP/2.0 is not supported"},
		{"GET / HTTP/0.9\n\n", 14, 505, "HTTP/0.9 is not supported"},
		{"GET / HTTP/1.1\rX", 15, 400, "malformed request line (byte 0x58 at offset 15)"},
		{"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 23, 400, "Name: value"},
		{"GET / HTTP/1.1\r\nX-A : v\r\n\r\n", 19, 400, "no space before the colon"},
		{"GET / HTTP/1.1\r\nX-A: v\r\n folded\r\n\r\n", 24, 400, "folded"},
		{"GET / HTTP/1.1\r\nX-A: a\x00" "b\r\n\r\n", 22, 400, "control byte 0x00"},
		{"GET / HTTP/1.1\r\nX-A: a\x7f\r\n\r\n", 22, 400, "control byte 0x7f"},
		{"GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n", 23, 400, "control byte 0x0d"},
		{"GET / HTTP/1.1\r\n\rX", 17, 400, "CR not followed by LF"},
		{"POST / HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n", 37, 400, "Content-Length '1e3'"},
		{"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 36, 400, "Content-Length '-1'"},
		{"POST / HTTP/1.1\r\nContent-Length: 12 \r\n\r\n", 37, 400, "Content-Length '12 '"},
		{"POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", 33, 400, "Content-Length is empty"},
		{"POST / HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n", 54, 413, "larger than any"},
	};
	for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
		const char *p = bad[k].p;
		srv_head h;
		for (size_t i = 0; i < bad[k].at; i++) CHECKF(scan(p, i, false, &h) == 0, "bad %zu judged at %zu: %s", k, i, h.msg);
		const int v = scan(p, bad[k].at + 1, false, &h);
		CHECKF(v == -1 && h.status == bad[k].status && strstr(h.msg, bad[k].msg), "bad %zu: %d %d %s", k, v, h.status, h.msg);
	}
	// the largest Content-Length that fits passes: the body limit is the route's to apply
	srv_head h;
	const char *top = "POST / HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\n";
	CHECK(scan(top, strlen(top), false, &h) == 1 && h.length == UINT64_MAX);
}

// A head of n bytes: the request line for target, header lines of fields, padding to n.
static char *head_of(const char *target, int fields, size_t n) {
	char *p = malloc(n + 1);
	int k = snprintf(p, n + 1, "GET %s HTTP/1.1\r\n", target);
	for (int i = 0; i + 1 < fields; i++) k += snprintf(p + k, n + 1 - (size_t)k, "X-H%d: v\r\n", i);
	k += snprintf(p + k, n + 1 - (size_t)k, "X-Pad: ");
	while ((size_t)k < n - 4) p[k++] = 'p';
	memcpy(p + k, "\r\n\r\n", 5);
	return p;
}

static void test_limits(void) {
	srv_head h;
	char *p = head_of("/", 1, SRV_HEAD_MAX);
	CHECKF(scan(p, SRV_HEAD_MAX, false, &h) == 1, "%s", h.msg);
	free(p);
	p = head_of("/", 1, SRV_HEAD_MAX + 1);
	CHECK(scan(p, SRV_HEAD_MAX + 1, false, &h) == -1 && h.status == 431);
	free(p);
	p = head_of("/", SRV_FIELDS_MAX, 4096);
	CHECKF(scan(p, 4096, false, &h) == 1, "%s", h.msg);
	free(p);
	p = head_of("/", SRV_FIELDS_MAX + 1, 4096);
	CHECK(scan(p, 4096, false, &h) == -1 && h.status == 431 && strstr(h.msg, "header lines"));
	free(p);
	// the request-target: refused at its first byte past the limit, in its API's shape
	static const struct {
		const char *prefix;
		enum srv_family f;
	} fam[] = {{"/v1/models/", SRV_OPENAI}, {"/v1/messages/", SRV_ANTHROPIC}, {"/api/tags/", SRV_OLLAMA}};
	for (size_t k = 0; k < 3; k++) {
		char t[SRV_TARGET_MAX + 2];
		snprintf(t, sizeof t, "%s", fam[k].prefix);
		memset(t + strlen(fam[k].prefix), 'a', sizeof t - 1 - strlen(fam[k].prefix));
		t[SRV_TARGET_MAX] = 0;
		p = head_of(t, 1, SRV_TARGET_MAX + 64);
		CHECKF(scan(p, SRV_TARGET_MAX + 64, false, &h) == 1, "%s", h.msg);
		free(p);
		char line[SRV_TARGET_MAX + 8];
		t[SRV_TARGET_MAX] = 'a';
		t[SRV_TARGET_MAX + 1] = 0;
		const int n = snprintf(line, sizeof line, "GET %s", t);
		CHECK(scan(line, (size_t)n - 1, false, &h) == 0);
		CHECK(scan(line, (size_t)n, false, &h) == -1 && h.status == 414 && h.family == fam[k].f);
	}
	// query arguments and cookies count with the header lines: libmicrohttpd keeps a record of each
	char q[2048] = "/?a";
	for (int i = 1; i < SRV_PIECES_MAX; i++) strcat(q, "&b");
	p = head_of(q, 1, 4096); // 256 arguments and one header line
	CHECK(scan(p, 4096, false, &h) == -1 && h.status == 431 && strstr(h.msg, "query arguments"));
	free(p);
	q[strlen(q) - 2] = 0;
	p = head_of(q, 1, 4096);
	CHECKF(scan(p, 4096, false, &h) == 1, "%s", h.msg);
	free(p);
	// a refused HEAD request says so: its reply carries no body
	CHECK(scan("HEAD / HTTP/2.0\r\n", 17, false, &h) == -1 && h.status == 505 && h.head_method);
}

static int chunks(const char *p, size_t n, bool eof, uint64_t max, srv_head *h, uint64_t *wire) {
	return srv_chunks_scan((const unsigned char *)p, n, eof, max, h, wire);
}

// A sound chunked body needs every byte up to the empty line after its last chunk, and passes
// whatever follows; cut short by a close it is a 400.
static void test_sound_chunks(void) {
	static const char *const bodies[] = {
		"0\r\n\r\n",
		"5\r\nhello\r\n0\r\n\r\n",
		"5\r\nhe\r\n\r\n6\r\n world\r\n0\r\n\r\n", // CR LF inside a chunk's data
		"A;name=v;x\r\n0123456789\r\n00 ; last\r\nX-Trailer: 1\r\nY:\r\n\r\n",
		"5\nhello\n0\n\n", // bare LF, as libmicrohttpd takes it
		"000000000000000000000003\r\nabc\r\n0\r\n\r\n", // leading zeros are not a large size
	};
	for (size_t k = 0; k < sizeof bodies / sizeof *bodies; k++) {
		const char *p = bodies[k];
		const size_t n = strlen(p);
		srv_head h;
		uint64_t wire = 0;
		CHECKF(chunks(p, n, false, 1 << 20, &h, &wire) == 1 && wire == n, "body %zu: %s", k, h.msg);
		for (size_t i = 0; i < n; i++) {
			CHECKF(chunks(p, i, false, 1 << 20, &h, &wire) == 0, "body %zu, %zu bytes: %s", k, i, h.msg);
			CHECKF(chunks(p, i, true, 1 << 20, &h, &wire) == -1 && h.status == 400, "body %zu cut at %zu", k, i);
		}
		char both[256];
		snprintf(both, sizeof both, "%sGET / HTTP/1.1\r\n\r\n", p);
		CHECK(chunks(both, strlen(both), false, 1 << 20, &h, &wire) == 1 && wire == n);
	}
}

// Each malformed body is refused with its status and a message that names the fault.
static void test_bad_chunks(void) {
	static const struct {
		const char *p;
		int status;
		const char *msg;
	} bad[] = {
		{"zz\r\n", 400, "hex digits"},
		{"-1\r\n", 400, "hex digits"},
		{"\r\n", 400, "hex digits"},
		{"5 x\r\nhello\r\n", 400, "chunk size line"},
		{"5\x01\r\n", 400, "byte 0x01"},
		{"3\r\nabcdef\r\n0\r\n\r\n", 400, "longer than its size"},
		{"0\r\nNoColon\r\n\r\n", 400, "Name: value"},
		{"0\r\nX: a\x01\r\n\r\n", 400, "control byte"},
		{"0\r\n\rx", 400, "CR not followed by LF"},
		{"ffffffffffffffffff\r\n", 413, "larger than the limit of 1024 bytes"},
		{"401\r\n", 413, "limit of 1024"},
		{"200\r\n", 0, NULL}, // 512 of 1024: more is needed
	};
	for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
		srv_head h;
		uint64_t wire = 0;
		const int v = chunks(bad[k].p, strlen(bad[k].p), false, 1024, &h, &wire);
		if (!bad[k].status) {
			CHECKF(v == 0, "body %zu: %d %s", k, v, h.msg);
			continue;
		}
		CHECKF(v == -1 && h.status == bad[k].status && strstr(h.msg, bad[k].msg), "body %zu: %d %d %s", k, v, h.status, h.msg);
	}
	// the whole body counts against the limit, chunk by chunk
	char two[2200];
	snprintf(two, sizeof two, "200\r\n%0512d\r\n201\r\n", 0);
	srv_head h;
	uint64_t wire;
	CHECK(chunks(two, strlen(two), false, 1024, &h, &wire) == -1 && h.status == 413);
	// a chunk-size or trailer line that never ends is refused past its limit, not waited on
	char longline[1100];
	memset(longline, '0', sizeof longline - 1);
	longline[sizeof longline - 1] = 0;
	CHECK(chunks(longline, strlen(longline), false, 1024, &h, &wire) == -1 && h.status == 400 && strstr(h.msg, "longer than"));
	CHECK(chunks(longline, 1000, false, 1024, &h, &wire) == 0);
}

int main(void) {
	test_sound_heads();
	test_refused_at_once();
	test_limits();
	test_sound_chunks();
	test_bad_chunks();
	T_DONE("http_head");
}
