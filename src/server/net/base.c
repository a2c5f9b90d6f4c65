// server/net/base: the HTTP plumbing — buffers, errors and their shapes per API family,
// replies, headers, ids, histograms, and the field tables that read a request's JSON. It
// calls no other server file.
#include "server/net/base.h"
#include "model/loras.h"

#include <microhttpd.h>

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

// ---- buffers ------------------------------------------------------------------------------------

void srv_buf_add(srv_buf *b, const void *s, size_t n) {
	if (b->oom || n == 0) return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n + 1) cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

void srv_buf_adds(srv_buf *b, const char *s) { srv_buf_add(b, s, strlen(s)); }

void srv_buf_free(srv_buf *b) {
	free(b->p);
	memset(b, 0, sizeof *b);
}

// ---- errors and replies -------------------------------------------------------------------------

// Status and type of each error kind in each family; OpenAI's code when it has one.
static const struct {
	int status;
	const char *openai_type, *openai_code;
	int anthropic_status;
	const char *anthropic_type;
	int retry_after;
} ekinds[SRV_E__COUNT] = {
	[SRV_E_BAD_REQUEST] = {400, "invalid_request_error", NULL, 400, "invalid_request_error", 0},
	[SRV_E_AUTH] = {401, "invalid_request_error", "invalid_api_key", 401, "authentication_error", 0},
	[SRV_E_FORBIDDEN] = {403, "invalid_request_error", "forbidden", 403, "permission_error", 0},
	[SRV_E_NOT_FOUND] = {404, "invalid_request_error", NULL, 404, "not_found_error", 0},
	[SRV_E_METHOD] = {405, "invalid_request_error", NULL, 405, "invalid_request_error", 0},
	[SRV_E_CONFLICT] = {409, "invalid_request_error", "conflict", 409, "invalid_request_error", 0},
	[SRV_E_TOO_LARGE] = {413, "invalid_request_error", "request_too_large", 413, "request_too_large", 0},
	[SRV_E_MEDIA_TYPE] = {415, "invalid_request_error", "unsupported_media_type", 415, "invalid_request_error", 0},
	[SRV_E_BUSY] = {429, "rate_limit_error", "rate_limit_exceeded", 529, "overloaded_error", 1},
	[SRV_E_UNAVAILABLE] = {503, "server_error", "unavailable", 503, "overloaded_error", 2},
	[SRV_E_INTERNAL] = {500, "server_error", NULL, 500, "api_error", 0},
	[SRV_E_NO_MEMORY] = {507, "server_error", "insufficient_memory", 500, "api_error", 0},
	[SRV_E_UNSUPPORTED] = {501, "not_supported_error", "not_supported", 501, "api_error", 0},
};

int srv_fail(srv_err *e, enum srv_ekind kind, const char *param, const char *fmt, ...) {
	// client text (keys, values, jansson's "near" excerpt) may be invalid UTF-8 or be cut
	// inside a character: both would make the JSON body unbuildable
	char text[sizeof e->msg * 2];
	e->kind = kind;
	base_utf8_copy(e->param, sizeof e->param, param ? param : "", param ? strlen(param) : 0);
	e->code[0] = 0;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	base_utf8_copy(e->msg, sizeof e->msg, text, n < 0 ? 0 : strlen(text));
	return -1;
}

int srv_retry_after(enum srv_ekind kind) { return ekinds[kind].retry_after; }

// Codes not listed are the server's fault (500). A request's own faults — a file it names that
// cannot be read included — are 400s; a resource that is busy or full is a 409, its disk a 500;
// the lane host busy is a full queue, retried later (429).
static const struct {
	int rc;
	enum srv_ekind kind[3];
} blames[] = {
	{LANES_EIO, {SRV_E_BAD_REQUEST, SRV_E_INTERNAL, SRV_E_BAD_REQUEST}},
	{LANES_EFORMAT, {SRV_E_BAD_REQUEST, SRV_E_INTERNAL, SRV_E_BAD_REQUEST}},
	{LANES_EINVAL, {SRV_E_BAD_REQUEST, SRV_E_BAD_REQUEST, SRV_E_BAD_REQUEST}},
	{LANES_ERANGE, {SRV_E_BAD_REQUEST, SRV_E_INTERNAL, SRV_E_BAD_REQUEST}},
	{LANES_EUNSUPPORTED, {SRV_E_BAD_REQUEST, SRV_E_INTERNAL, SRV_E_BAD_REQUEST}},
	{LANES_ENOTFOUND, {SRV_E_NOT_FOUND, SRV_E_NOT_FOUND, SRV_E_BAD_REQUEST}},
	{LANES_ELIMIT, {SRV_E_BAD_REQUEST, SRV_E_CONFLICT, SRV_E_BAD_REQUEST}},
	{LANES_ECANCELLED, {SRV_E_UNAVAILABLE, SRV_E_UNAVAILABLE, SRV_E_UNAVAILABLE}},
	{LANES_EBUSY, {SRV_E_CONFLICT, SRV_E_CONFLICT, SRV_E_BUSY}},
};

enum srv_ekind srv_kind_of(int rc, enum srv_blame b) {
	for (size_t i = 0; i < sizeof blames / sizeof blames[0]; i++)
		if (blames[i].rc == rc) return blames[i].kind[b];
	return SRV_E_INTERNAL;
}

const srv_family_info srv_families[SRV_FAMILY__COUNT] = {
	[SRV_OPENAI] = {"openai", "", false, {"data: [DONE]\n", "data: {\"error\"", NULL}},
	[SRV_ANTHROPIC] = {"anthropic", "/v1/messages", false, {"event: message_stop\n", "event: error\n", NULL}},
	[SRV_RESPONSES] = {"responses", "/v1/responses", false,
			   {"event: response.completed\n", "event: response.failed\n", "event: response.incomplete\n", "event: error\n", NULL}},
	[SRV_OLLAMA] = {"ollama", "/api/", true, {NULL}},
	// llama-server's streams send no [DONE]: the last event is the one that says stop (written first)
	[SRV_LLAMA] = {"llama", "/infill", false, {"data: {\"stop\":true", "data: {\"error\"", NULL}},
};

enum srv_family srv_family_of(const char *path, size_t n) {
	for (int f = 0; f < SRV_FAMILY__COUNT; f++) {
		const size_t k = strlen(srv_families[f].prefix);
		if (k && n >= k && !memcmp(path, srv_families[f].prefix, k)) return (enum srv_family)f;
	}
	return SRV_OPENAI;
}

void srv_stream_event(enum srv_family f, srv_buf *out, const char *name, json_t *data) {
	char *txt = data ? srv_json_text(data) : NULL;
	json_decref(data);
	if (!txt) {
		out->oom = true;
		return;
	}
	if (srv_families[f].ndjson) {
		srv_buf_adds(out, txt);
		srv_buf_adds(out, "\n");
	} else {
		if (name) srv_buf_adds(out, "event: "), srv_buf_adds(out, name), srv_buf_adds(out, "\n");
		srv_buf_adds(out, "data: ");
		srv_buf_adds(out, txt);
		srv_buf_adds(out, "\n\n");
	}
	free(txt);
}

void srv_stream_error(enum srv_family f, srv_buf *out, srv_stream_seen *seen, const char *msg) {
	switch (f) {
	case SRV_ANTHROPIC:
		srv_stream_event(f, out, "error", json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", "api_error", "message", msg));
		return;
	case SRV_RESPONSES: {
		// the response as response.created showed it, failed; a copy, since the stream may go on being read
		json_t *r = seen->response ? json_deep_copy(seen->response) : json_object();
		if (r) {
			json_object_set_new(r, "status", json_string("failed"));
			json_object_set_new(r, "error", json_pack("{s:s, s:s}", "code", "server_error", "message", msg));
		}
		json_t *d = r ? json_pack("{s:o, s:s, s:I}", "response", r, "type", "response.failed", "sequence_number", (json_int_t)seen->seq) : NULL;
		if (seen->seq < INT64_MAX) seen->seq++;
		srv_stream_event(f, out, "response.failed", d);
		return;
	}
	case SRV_OLLAMA: srv_stream_event(f, out, NULL, json_pack("{s:s}", "error", msg)); return;
	default: srv_stream_event(f, out, NULL, json_pack("{s:{s:s, s:s}}", "error", "message", msg, "type", "server_error")); return;
	}
}

void srv_stream_note(enum srv_family f, srv_stream_seen *seen, const char *ev, size_t n) {
	if (f != SRV_RESPONSES) return;
	const char *q = memmem(ev, n, "\"sequence_number\":", 18);
	if (q) {
		const long long v = strtoll(q + 18, NULL, 10);
		seen->seq = v < INT64_MAX ? v + 1 : v;
	}
	static const char created[] = "event: response.created\n";
	if (n < sizeof created - 1 || memcmp(ev, created, sizeof created - 1)) return;
	const char *d = memmem(ev, n, "\ndata: ", 7);
	json_t *o = d ? json_loadb(d + 7, n - (size_t)(d + 7 - ev), 0, NULL) : NULL;
	json_t *r = json_object_get(o, "response");
	if (json_is_object(r)) {
		json_decref(seen->response);
		seen->response = json_incref(r);
	}
	json_decref(o);
}

bool srv_stream_ends(enum srv_family f, const char *ev, size_t n) {
	// a JSON line is read as the object it is; an SSE event's lines are matched from their start
	// (a JSON string never holds a newline, so text that quotes an end cannot pass for one)
	if (srv_families[f].ndjson) {
		json_t *o = json_loadb(ev, n, 0, NULL);
		const bool end = json_is_true(json_object_get(o, "done")) || json_object_get(o, "error");
		json_decref(o);
		return end;
	}
	for (const char *l = ev; l < ev + n;) {
		const char *nl = memchr(l, '\n', (size_t)(ev + n - l));
		const size_t len = nl ? (size_t)(nl - l) + 1 : (size_t)(ev + n - l);
		for (int i = 0; srv_families[f].ends[i]; i++) {
			const size_t k = strlen(srv_families[f].ends[i]);
			if (len >= k && !memcmp(l, srv_families[f].ends[i], k)) return true;
		}
		l += len;
	}
	return false;
}

json_t *srv_error_body(enum srv_family f, const srv_err *e, int *status) {
	if (f == SRV_ANTHROPIC) {
		*status = ekinds[e->kind].anthropic_status;
		return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", ekinds[e->kind].anthropic_type,
				 "message", e->msg);
	}
	*status = ekinds[e->kind].status;
	if (f == SRV_OLLAMA) return json_pack("{s:s}", "error", e->msg);
	json_t *err = json_pack("{s:s, s:s}", "message", e->msg, "type", ekinds[e->kind].openai_type);
	// a failed generation is exactly {message, type}; request errors name their field
	if (err && e->kind != SRV_E_INTERNAL) {
		json_object_set_new(err, "param", e->param[0] ? json_string(e->param) : json_null());
		const char *code = e->code[0] ? e->code : ekinds[e->kind].openai_code;
		json_object_set_new(err, "code", code ? json_string(code) : json_null());
	}
	return err ? json_pack("{s:o}", "error", err) : NULL;
}

static void common_headers(srv_conn *c, struct MHD_Response *r, int status) {
	if (c->cors) {
		MHD_add_response_header(r, "Access-Control-Allow-Origin", c->cors);
		if (strcmp(c->cors, "*")) MHD_add_response_header(r, MHD_HTTP_HEADER_VARY, "Origin");
	}
	if (status == 405 && c->allow[0]) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, c->allow);
	if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	if (status / 100 == 2 && c->ignored.len) {
		MHD_add_response_header(r, SRV_IGNORED_HEADER, c->ignored.names);
		// a page's script reads a custom header only when the server says it may
		if (c->cors) MHD_add_response_header(r, "Access-Control-Expose-Headers", SRV_IGNORED_HEADER);
	}
}

// ---- what a request sent that lanes did not honour -----------------------------------------------

void srv_ignored_add(srv_conn *c, const char *name) {
	if (!c || !name || !*name || c->ignored.cut) return;
	srv_ignored *l = &c->ignored;
	char clean[96];
	size_t n = 0;
	for (; name[n] && n < sizeof clean - 1; n++)
		clean[n] = name[n] > 0x20 && name[n] < 0x7f && name[n] != ',' ? name[n] : '_';
	clean[n] = 0;
	for (const char *p = l->names; l->len && p;) { // named already?
		const char *end = strchr(p, ',');
		const size_t k = end ? (size_t)(end - p) : strlen(p);
		if (k == n && !memcmp(p, clean, n)) return;
		p = end ? end + 1 : NULL;
	}
	const char *sep = l->len ? "," : "";
	// room is kept for the mark that says the list was cut
	if (l->len + strlen(sep) + n + sizeof ",..." > sizeof l->names) {
		l->len += (size_t)snprintf(l->names + l->len, sizeof l->names - l->len, "%s...", sep);
		l->cut = true;
		return;
	}
	l->len += (size_t)snprintf(l->names + l->len, sizeof l->names - l->len, "%s%s", sep, clean);
}

int srv_ignored_refuse(srv_conn *c, srv_err *e) {
	if (!c || !c->ignored.len || !c->s->cfg.strict_params) return 0;
	char first[96];
	const char *comma = strchr(c->ignored.names, ',');
	snprintf(first, sizeof first, "%.*s", comma ? (int)(comma - c->ignored.names) : (int)c->ignored.len, c->ignored.names);
	return srv_fail(e, SRV_E_BAD_REQUEST, first, "unsupported parameter%s (%s refuses what lanes accepts and ignores): %s",
			comma ? "s" : "", HTTP_SETTING(&c->s->cfg, strict_params), c->ignored.names);
}

// r (destroyed here) queued with the common headers; without r, or when libmicrohttpd takes
// none, the connection closes.
static void queue(srv_conn *c, int status, struct MHD_Response *r) {
	if (!r) {
		c->broken = true;
		return;
	}
	common_headers(c, r, status);
	c->status = status;
	c->replied = true;
	if (MHD_queue_response(c->mc, (unsigned)status, r) != MHD_YES) c->broken = true;
	MHD_destroy_response(r);
}

static void add_headers(struct MHD_Response *r, const char *const *hdrs) {
	for (size_t i = 0; r && hdrs && hdrs[i]; i += 2) MHD_add_response_header(r, hdrs[i], hdrs[i + 1]);
}

void srv_reply_body(srv_conn *c, int status, const void *data, size_t len, enum srv_mem mem, const char *const *hdrs) {
	static const enum MHD_ResponseMemoryMode mode[] = {
		[SRV_MEM_KEEP] = MHD_RESPMEM_PERSISTENT, [SRV_MEM_COPY] = MHD_RESPMEM_MUST_COPY, [SRV_MEM_FREE] = MHD_RESPMEM_MUST_FREE};
	struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)data, mode[mem]);
	if (!r && mem == SRV_MEM_FREE) free((void *)data);
	add_headers(r, hdrs);
	queue(c, status, r);
}

_Static_assert(SRV_STREAM_END == MHD_CONTENT_READER_END_OF_STREAM && SRV_STREAM_FAIL == MHD_CONTENT_READER_END_WITH_ERROR,
	       "a stream's ends are libmicrohttpd's");

void srv_reply_stream(srv_conn *c, int status, srv_reader *fn, void *arg, const char *const *hdrs) {
	struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, fn, arg, NULL);
	add_headers(r, hdrs);
	c->unsized = true;
	queue(c, status, r);
}

void srv_reply_text(srv_conn *c, int status, const char *ctype, const char *text, size_t len) {
	srv_reply_body(c, status, text, len, SRV_MEM_COPY, (const char *const[]){"Content-Type", ctype, NULL});
}

const char *srv_header(srv_conn *c, const char *name) { return MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, name); }

const char *srv_query(srv_conn *c, const char *name) { return MHD_lookup_connection_value(c->mc, MHD_GET_ARGUMENT_KIND, name); }

void srv_conn_timeout(srv_conn *c, unsigned seconds) { MHD_set_connection_option(c->mc, MHD_CONNECTION_OPTION_TIMEOUT, seconds); }

// The error body of kind with a fixed message: for a reply whose own body could not be
// built, so that every request still gets a status line and JSON in its family's shape.
static void fixed_body(enum srv_family f, enum srv_ekind kind, char *out, size_t n) {
	static const char msg[] = "the reply could not be encoded";
	const char *code = ekinds[kind].openai_code;
	if (f == SRV_ANTHROPIC)
		snprintf(out, n, "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":\"%s\"}}", ekinds[kind].anthropic_type, msg);
	else if (kind == SRV_E_INTERNAL)
		snprintf(out, n, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\"}}", msg, ekinds[kind].openai_type);
	else
		snprintf(out, n, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":%s%s%s}}", msg,
			 ekinds[kind].openai_type, code ? "\"" : "", code ? code : "null", code ? "\"" : "");
}

const char *srv_reason(int status) {
	switch (status) {
	case 400: return "Bad Request";
	case 408: return "Request Timeout";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 505: return "HTTP Version Not Supported";
	case 529: return "Overloaded";
	default: return "Error";
	}
}

int srv_raw_reply(int fd, int status, const char *extra, const char *body, bool head_only) {
	char date[64];
	const time_t now = time(NULL);
	struct tm tm;
	strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&now, &tm));
	const size_t cap = strlen(body) + strlen(extra) + sizeof date + 256;
	char *msg = malloc(cap);
	int n = !msg ? -1 : snprintf(msg, cap,
			 "HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n%s"
			 "Connection: close\r\n\r\n%s", status, srv_reason(status), date, strlen(body), extra, head_only ? "" : body);
	int rc = -1;
	if (fd >= 0 && n > 0 && (size_t)n < cap) rc = send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) == n ? 0 : -1;
	free(msg);
	return rc;
}

// A JSON reply written on the socket, and the connection closed: libmicrohttpd names only the
// statuses it knows, and a client shown "529 Unknown" cannot tell Anthropic's overload apart.
static void reply_raw(srv_conn *c, int status, const char *body, int retry_after) {
	const int fd = srv_sock_fd(c);
	char extra[600] = "";
	int k = retry_after > 0 ? snprintf(extra, sizeof extra, "Retry-After: %d\r\n", retry_after) : 0;
	if (c->cors)
		snprintf(extra + k, sizeof extra - (size_t)k, "Access-Control-Allow-Origin: %.500s\r\n%s", c->cors,
			 strcmp(c->cors, "*") ? "Vary: Origin\r\n" : "");
	c->status = status;
	c->replied = true;
	c->closed_after_reply = true;
	srv_raw_reply(fd, status, extra, body, false);
	if (fd >= 0) shutdown(fd, SHUT_WR); // libmicrohttpd closes the connection without a word of its own
}

// body, or when it cannot be encoded the fixed body of kind (with kind's status).
static void reply_json_h(srv_conn *c, int status, json_t *body, int retry_after, enum srv_ekind kind) {
	char *txt = body ? srv_json_text(body) : NULL;
	json_decref(body);
	char fixed[256];
	if (!txt) {
		fixed_body(c->family, kind, fixed, sizeof fixed);
		status = c->family == SRV_ANTHROPIC ? ekinds[kind].anthropic_status : ekinds[kind].status;
	}
	if (status == 529) {
		reply_raw(c, status, txt ? txt : fixed, retry_after);
		free(txt);
		return;
	}
	char ra[16];
	snprintf(ra, sizeof ra, "%d", retry_after);
	const char *const hdrs[] = {"Content-Type", "application/json", retry_after > 0 ? "Retry-After" : NULL, ra, NULL};
	if (txt) srv_reply_body(c, status, txt, strlen(txt), SRV_MEM_FREE, hdrs);
	else srv_reply_body(c, status, fixed, strlen(fixed), SRV_MEM_COPY, hdrs);
}

void srv_reply_json(srv_conn *c, int status, json_t *body, int retry_after) { reply_json_h(c, status, body, retry_after, SRV_E_INTERNAL); }

void srv_reply_error(srv_conn *c, const srv_err *e) {
	int status;
	json_t *body = srv_error_body(c->family, e, &status);
	if (c->gen && e->kind != SRV_E_INTERNAL && !c->host_counted)
		atomic_fetch_add(&c->s->rejected, 1);
	if (!c->outcome) c->outcome = "rejected";
	reply_json_h(c, status, body, srv_retry_after(e->kind), e->kind);
}

int srv_sock_fd(srv_conn *c) {
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c->mc, MHD_CONNECTION_INFO_CONNECTION_FD);
	return ci ? ci->connect_fd : -1;
}

int srv_parse_body(srv_conn *c, json_t **out, srv_err *e) {
	*out = NULL;
	if (c->json) {
		*out = json_incref(c->json);
		return 0;
	}
	if (!c->body.len) return srv_fail(e, SRV_E_BAD_REQUEST, NULL, "the request body is empty: send a JSON object");
	json_error_t je;
	json_t *j = json_loadb(c->body.p, c->body.len, 0, &je);
	if (!j) return srv_fail(e, SRV_E_BAD_REQUEST, NULL, "malformed JSON at line %d column %d: %s", je.line, je.column, je.text);
	if (!json_is_object(j)) {
		json_decref(j);
		return srv_fail(e, SRV_E_BAD_REQUEST, NULL, "the request body must be a JSON object");
	}
	c->json = j;
	*out = json_incref(j);
	return 0;
}

void srv_new_id(http_server *s, const char *prefix, char *out, size_t n) {
	uint64_t a = splitmix64(atomic_fetch_add(&s->id_state, 0x9e3779b97f4a7c15ull));
	uint64_t b = splitmix64(a ^ base_now_ns());
	snprintf(out, n, "%s%016llx%08llx", prefix, (unsigned long long)a, (unsigned long long)(b & 0xffffffffu));
}

void srv_lease_name(uint64_t id, char *out, size_t n) { snprintf(out, n, "lease-%016" PRIx64, id); }

uint64_t srv_lease_parse(const char *v) {
	if (!v || strncmp(v, "lease-", 6) || strlen(v + 6) != 16 || strspn(v + 6, "0123456789abcdef") != 16) return 0;
	return strtoull(v + 6, NULL, 16);
}

uint64_t srv_lease_of(srv_conn *c) {
	return srv_lease_parse(srv_header(c, SRV_LEASE_HEADER));
}

struct model_loras *srv_loras_of(srv_model *M) {
	if (M == M->s->mdl) return srv_primary_host(M->s) ? M->loras : NULL;
	return atomic_load(&M->mstate) == SRV_M_READY ? M->loras : NULL;
}

int srv_check_model(http_server *s, const char *id, srv_err *e) {
	if (!id || !strcmp(id, s->mdl->model_id)) return 0;
	if (s->n_models > 1) return srv_model_lookup(s, id, e); // several: a name is one of them
	// one model and no adapters: any name means it, as llama-server takes it (--strict-model: 404).
	// Once an adapter has been loaded a name never falls back to the base: it names an adapter or nothing.
	struct model_loras *l = srv_loras_of(s->mdl);
	if (!s->cfg.strict_model && !(l && model_loras_ever(l))) return 0;
	return srv_model_lookup(s, id, e);
}

int srv_model_lookup(http_server *s, const char *id, srv_err *e) {
	struct model_loras *l = srv_loras_of(s->mdl);
	if (!strcmp(id, s->mdl->model_id) || (l && model_loras_has(l, id))) return 0;
	if (s->n_models > 1) {
		srv_model *A = srv_models_find(s, id) ? NULL : srv_models_adapter(s, id); // another model's adapter
		if (A) srv_models_put(s, &A, 1);
		return srv_models_find(s, id) || A ? 0 : srv_models_named(s, id, e);
	}
	if (l && model_loras_ever(l))
		srv_fail(e, SRV_E_NOT_FOUND, "model", "the model '%s' does not exist: this server serves '%s' and the adapters GET /v1/adapters lists",
			 id, s->mdl->model_id);
	else
		srv_fail(e, SRV_E_NOT_FOUND, "model", "the model '%s' does not exist: this server serves '%s'", id, s->mdl->model_id);
	snprintf(e->code, sizeof e->code, "model_not_found");
	return -1;
}

// ---- histograms ---------------------------------------------------------------------------------

void srv_hist_init(srv_hist *h, const char *name, const char *help, const double *le, int n) {
	h->name = name;
	h->help = help;
	h->n = n < SRV_HIST_MAX ? n : SRV_HIST_MAX;
	for (int i = 0; i < h->n; i++) h->le[i] = le[i];
}

void srv_hist_observe(srv_hist *h, double seconds, uint64_t weight) {
	if (!(seconds >= 0)) seconds = 0;
	int b = 0;
	while (b < h->n && seconds > h->le[b]) b++;
	atomic_fetch_add(&h->bucket[b], weight);
	atomic_fetch_add(&h->count, weight);
	atomic_fetch_add(&h->sum_ns, (uint64_t)llround(seconds * 1e9 * (double)weight));
}

void srv_hist_print(const srv_hist *h, srv_buf *out) {
	char line[256];
	snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name);
	srv_buf_adds(out, line);
	uint64_t cum = 0;
	for (int b = 0; b <= h->n; b++) {
		cum += atomic_load(&h->bucket[b]);
		if (b < h->n) snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->le[b], (unsigned long long)cum);
		else snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n", h->name, (unsigned long long)cum);
		srv_buf_adds(out, line);
	}
	snprintf(line, sizeof line, "%s_sum %.9f\n%s_count %llu\n", h->name, (double)atomic_load(&h->sum_ns) / 1e9, h->name,
		 (unsigned long long)atomic_load(&h->count));
	srv_buf_adds(out, line);
}

// ---- JSON values --------------------------------------------------------------------------------

static const char *type_name(const json_t *v) {
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a number";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	default: return "null";
	}
}

json_t *srv_real(double v) {
	if (!isfinite(v)) v = v < 0 ? -9999.0 : 9999.0;
	return json_real(v);
}

// The number jansson wrote at t (len bytes, 17 significant digits) in its shortest form, at most
// len bytes, into out; 0 when it is already shortest. Up to 15 digits a decimal names one double
// (DBL_DIG), so only 16 and 17 need the search, which is monotonic in the digits kept.
static size_t shortest_real(const char *t, size_t len, char *out, size_t cap) {
	int digits = 0, lead = 1;
	bool expo = false;
	for (size_t i = 0; i < len && !expo; i++) {
		if (t[i] == 'e' || t[i] == 'E') expo = true;
		else if (t[i] >= '1' && t[i] <= '9') lead = 0, digits++;
		else if (t[i] == '0' && !lead) digits++;
	}
	if (digits <= 15 || len + 1 > cap) return 0;
	char num[40];
	memcpy(num, t, len < sizeof num ? len : sizeof num - 1);
	num[len < sizeof num ? len : sizeof num - 1] = 0;
	const double x = strtod(num, NULL);
	int lo = 1, hi = 17;
	while (lo < hi) {
		const int mid = (lo + hi) / 2;
		char b[40];
		snprintf(b, sizeof b, "%.*e", mid - 1, x);
		if (strtod(b, NULL) == x) hi = mid;
		else lo = mid + 1;
	}
	char b[48];
	if (expo) {
		// jansson's exponent: no '+', no leading zeros (1e-5, 3e20)
		snprintf(b, sizeof b, "%.*g", lo, x);
		char *e = strpbrk(b, "eE");
		if (e) {
			const int e10 = atoi(e + 1);
			snprintf(e, sizeof b - (size_t)(e - b), "e%d", e10);
		}
	} else {
		// as jansson wrote it, without an exponent: the digits after the point that lo needs
		snprintf(b, sizeof b, "%.*e", lo - 1, x);
		const int e10 = atoi(strchr(b, 'e') + 1);
		snprintf(b, sizeof b, "%.*f", lo - 1 - e10 > 0 ? lo - 1 - e10 : 0, x);
	}
	if (!strpbrk(b, ".eE")) strcat(b, ".0");
	const size_t n = strlen(b);
	if (n > len || strtod(b, NULL) != x) return 0;
	memcpy(out, b, n);
	return n;
}

char *srv_json_text(const json_t *v) {
	char *t = json_dumps(v, JSON_COMPACT);
	if (!t) return NULL;
	// rewritten in place: a number's shortest form is never longer than jansson's
	size_t w = 0;
	for (size_t r = 0; t[r];) {
		if (t[r] == '"') {
			t[w++] = t[r++];
			while (t[r] && t[r] != '"') {
				if (t[r] == '\\' && t[r + 1]) t[w++] = t[r++];
				t[w++] = t[r++];
			}
			if (t[r]) t[w++] = t[r++];
			continue;
		}
		if (t[r] == '-' || (t[r] >= '0' && t[r] <= '9')) {
			size_t e = r;
			bool real = false;
			while (t[e] && strchr("0123456789+-.eE", t[e])) real |= t[e] == '.' || t[e] == 'e' || t[e] == 'E', e++;
			char b[48];
			const size_t n = real ? shortest_real(t + r, e - r, b, sizeof b) : 0;
			if (n) memmove(t + w, b, n), w += n;
			else memmove(t + w, t + r, e - r), w += e - r;
			r = e;
			continue;
		}
		t[w++] = t[r++];
	}
	t[w] = 0;
	return t;
}

char *srv_token_text(const srv_model *M, int32_t id, json_t **bytes) {
	size_t n = 0;
	const char *p = tok_piece(M->vocab, id, TOK_DECODE_SPECIAL, &n);
	if (!p) n = 0;
	if (bytes) {
		*bytes = json_array();
		for (size_t i = 0; i < n && *bytes; i++) json_array_append_new(*bytes, json_integer((unsigned char)p[i]));
	}
	srv_buf b = {0};
	for (size_t i = 0; i < n;) {
		size_t l = base_utf8_len((const unsigned char *)p + i, n - i);
		if (l) srv_buf_add(&b, p + i, l), i += l;
		else srv_buf_adds(&b, "\xef\xbf\xbd"), i++;
	}
	if (!b.p) srv_buf_add(&b, "", 1), b.len = 0;
	return b.p;
}

// Parts this model cannot read, and what it reads in their place.
static const struct {
	const char *type, *text;
} unread_parts[] = {
	{"image", "[image omitted: this model cannot see images]"},
	{"image_url", "[image omitted: this model cannot see images]"},
	{"input_image", "[image omitted: this model cannot see images]"},
	{"document", "[document omitted: this model cannot read documents]"},
	{"file", "[file omitted: this model cannot read files]"},
	{"input_file", "[file omitted: this model cannot read files]"},
	{"input_audio", "[audio omitted: this model cannot hear audio]"},
};

// An Anthropic document of plain text ({"source": {"type": "text", "data"}}): its text.
static const char *document_text(const json_t *part, size_t *len) {
	const json_t *src = json_object_get(part, "source"), *data = json_object_get(src, "data");
	const char *st = json_string_value(json_object_get(src, "type"));
	if (!st || strcmp(st, "text") || !json_is_string(data)) return NULL;
	*len = json_string_length(data);
	return json_string_value(data);
}

int srv_content_text(json_t *content, const char *param, const char *const *types, srv_conn *c, char **out, srv_err *e) {
	*out = NULL;
	if (!content || json_is_null(content)) {
		*out = strdup("");
		return *out ? 0 : srv_fail(e, SRV_E_INTERNAL, param, "out of memory");
	}
	if (json_is_string(content)) {
		*out = strdup(json_string_value(content));
		return *out ? 0 : srv_fail(e, SRV_E_INTERNAL, param, "out of memory");
	}
	if (!json_is_array(content))
		return srv_fail(e, SRV_E_BAD_REQUEST, param, "%s must be a string or an array of text parts, got %s", param,
				type_name(content));
	srv_buf b = {0};
	size_t i;
	json_t *part;
	json_array_foreach(content, i, part) {
		char p[128];
		snprintf(p, sizeof p, "%s[%zu]", param, i);
		const char *ty = json_is_object(part) ? json_string_value(json_object_get(part, "type")) : NULL;
		if (!ty) {
			srv_buf_free(&b);
			return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s must be an object with a \"type\"", p);
		}
		bool ok = false;
		for (const char *const *t = types; *t && !ok; t++) ok = !strcmp(*t, ty);
		size_t u = 0, dlen = 0;
		while (!ok && u < sizeof unread_parts / sizeof unread_parts[0] && strcmp(unread_parts[u].type, ty)) u++;
		if (!ok && u < sizeof unread_parts / sizeof unread_parts[0]) {
			const char *doc = !strcmp(ty, "document") ? document_text(part, &dlen) : NULL;
			if (doc) {
				srv_buf_add(&b, doc, dlen);
			} else {
				srv_buf_adds(&b, unread_parts[u].text);
				srv_ignored_add(c, ty);
			}
			continue;
		}
		if (!ok) {
			srv_buf_free(&b);
			return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.type '%s' is not supported: only text (%s) is", p, ty, types[0]);
		}
		json_t *tx = json_object_get(part, "text");
		if (!json_is_string(tx)) {
			srv_buf_free(&b);
			return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.text must be a string", p);
		}
		srv_buf_add(&b, json_string_value(tx), json_string_length(tx));
	}
	if (!b.p) srv_buf_add(&b, "", 1), b.len = 0;
	if (b.oom || !b.p) {
		srv_buf_free(&b);
		return srv_fail(e, SRV_E_INTERNAL, param, "out of memory");
	}
	*out = b.p;
	return 0;
}


// ---- field tables -------------------------------------------------------------------------------

static bool row_named(const srv_field *t, const char *key) {
	for (; t->kind != SRV_K_END; t++)
		if (t->kind == SRV_K_INCLUDE ? row_named(t->sub, key) : !strcmp(t->name, key)) return true;
	return false;
}

int srv_fields_known(json_t *o, const srv_field *t, const char *where, srv_err *e) {
	srv_buf names = {0};
	const char *first = NULL, *key;
	json_t *v;
	int n = 0;
	json_object_foreach(o, key, v) {
		if (row_named(t, key)) continue;
		if (!first) first = key;
		if (n++) srv_buf_adds(&names, ", ");
		srv_buf_adds(&names, key);
	}
	if (!n) return 0;
	char param[96];
	snprintf(param, sizeof param, "%s%s%s", where ? where : "", where ? "." : "", first);
	srv_fail(e, SRV_E_BAD_REQUEST, param, "unsupported parameter%s%s%s: %s", n > 1 ? "s" : "", where ? " in " : "",
		 where ? where : "", names.p ? names.p : "");
	srv_buf_free(&names);
	return -1;
}

// The request contract's bounds for row r's value x; at the top level the API's name of the
// field becomes the key, so that errors name what the client sent.
static int bounded(const srv_field *r, const char *name, double x, lane_api *api, bool top, srv_err *e) {
	char err[256];
	if (api && top) api->name[r->field] = r->name;
	if (!lane_check_value(api, r->field, x, err, sizeof err)) return 0;
	return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s", err);
}

// An integer, or a number with no fraction that a double holds exactly; -0.0 is no integer.
static bool integer_of(const json_t *v, int64_t *x) {
	if (json_is_integer(v)) {
		*x = json_integer_value(v);
		return true;
	}
	double d = json_is_real(v) ? json_real_value(v) : 0.5;
	if (d != floor(d) || fabs(d) >= 9e15 || (d == 0 && signbit(d))) return false;
	*x = (int64_t)d;
	return true;
}

static int read_stops(const srv_field *r, json_t *v, srv_stops *st, const char *name, lane_api *api, bool top, srv_err *e) {
	if (json_is_string(v) && r->kind == SRV_K_STOPS) {
		st->s[0] = json_string_value(v);
		st->n = 1;
		if (api && top) api->name[r->field] = r->name;
		return 0;
	}
	if (!json_is_array(v))
		return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s must be %san array of strings", name,
				r->kind == SRV_K_STOPS ? "a string or " : "");
	if (bounded(r, name, (double)json_array_size(v), api, top, e)) return -1;
	if (json_array_size(v) > LANE_MAX_STOPS) // the host's bound is the storage's
		return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s: at most %d stop sequences", name, LANE_MAX_STOPS);
	size_t i;
	json_t *x;
	json_array_foreach(v, i, x) {
		if (!json_is_string(x)) return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s[%zu] must be a string, got %s", name, i, type_name(x));
		st->s[st->n++] = json_string_value(x);
	}
	return 0;
}

static int read_bias(const srv_field *r, json_t *v, srv_biases *b, const char *name, lane_api *api, bool top, srv_err *e) {
	if (!json_is_object(v)) return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s must be an object of token id → bias", name);
	size_t n = json_object_size(v);
	free(b->p);
	b->n = 0;
	b->p = calloc(n ? n : 1, sizeof *b->p);
	if (!b->p) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	const lane_range *range = api ? &api->range[r->field] : NULL;
	const char *key;
	json_t *x;
	json_object_foreach(v, key, x) {
		char *end;
		long long id = strtoll(key, &end, 10);
		if (end == key || *end || id < INT32_MIN || id > INT32_MAX)
			return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s key '%s' is not a token id", name, key);
		if (!json_is_number(x))
			return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s for token %lld must be a number, got %s", name, id, type_name(x));
		double bv = json_number_value(x);
		if (bounded(r, name, bv, api, top, e)) return -1;
		// the API's lowest bias bans the token (OpenAI: -100)
		b->p[b->n++] = (lane_bias){(int32_t)id, range && range->set && bv <= range->lo ? -INFINITY : (float)bv};
	}
	return 0;
}

// One present, non-null value of row r into dst; name is the key as errors show it.
static int read_one(const srv_field *r, json_t *v, char *dst, const char *name, lane_api *api, bool top, srv_conn *c, srv_err *e) {
	int64_t x = 0;
	switch (r->kind) {
	case SRV_K_NUM:
	case SRV_K_REAL: {
		if (!json_is_number(v)) return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s must be a number, got %s", name, type_name(v));
		double d = json_number_value(v);
		if (bounded(r, name, d, api, top, e)) return -1;
		if (r->kind == SRV_K_NUM) *(float *)dst = (float)d;
		else *(double *)dst = d;
		return 0;
	}
	case SRV_K_INT:
	case SRV_K_CHOICES:
	case SRV_K_SEED:
		if (!integer_of(v, &x)) return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s must be an integer, got %s", name, type_name(v));
		if (r->kind == SRV_K_SEED) {
			lane_sampling *sp = (lane_sampling *)dst;
			sp->seed = (uint64_t)x;
			sp->has_seed = true;
		} else if (r->kind == SRV_K_CHOICES) {
			if (x < 1 || x > SRV_MAX_N)
				return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s must be between 1 and %d, got %lld", name, SRV_MAX_N, (long long)x);
			*(int *)dst = (int)x;
		} else {
			if (bounded(r, name, (double)x, api, top, e)) return -1;
			if (x < INT32_MIN || x > INT32_MAX) return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s is out of range", name);
			*(int32_t *)dst = (int32_t)x;
		}
		return 0;
	case SRV_K_BOOL:
		if (!json_is_boolean(v)) return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s must be a boolean, got %s", name, type_name(v));
		*(bool *)dst = json_is_true(v);
		return 0;
	case SRV_K_STR:
		if (!json_is_string(v)) return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s must be a string, got %s", name, type_name(v));
		*(const char **)dst = json_string_value(v);
		return 0;
	case SRV_K_JSON: *(json_t **)dst = v; return 0;
	case SRV_K_STOPS:
	case SRV_K_STOP_ARRAY: return read_stops(r, v, (srv_stops *)dst, name, api, top, e);
	case SRV_K_BIAS: return read_bias(r, v, (srv_biases *)dst, name, api, top, e);
	case SRV_K_OBJECT:
		if (!json_is_object(v)) return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s must be an object", name);
		if (srv_fields_known(v, r->sub, name, e)) return -1;
		return srv_fields_read(v, r->sub, dst, name, api, c, e);
	default: return 0;
	}
}

// An ignored field's value checked against its row's type (SRV_K_IGNORE: any).
static int ignored_type(const srv_field *r, json_t *v, const char *name, srv_err *e) {
	int64_t x;
	static const char *const what[] = {[SRV_K_IGNORE_STR] = "a string", [SRV_K_IGNORE_BOOL] = "a boolean",
					   [SRV_K_IGNORE_OBJECT] = "an object", [SRV_K_IGNORE_ARRAY] = "an array",
					   [SRV_K_IGNORE_INT] = "an integer"};
	bool ok;
	switch (r->kind) {
	case SRV_K_IGNORE_STR: ok = json_is_string(v); break;
	case SRV_K_IGNORE_BOOL: ok = json_is_boolean(v); break;
	case SRV_K_IGNORE_OBJECT: ok = json_is_object(v); break;
	case SRV_K_IGNORE_ARRAY: ok = json_is_array(v); break;
	case SRV_K_IGNORE_INT: ok = integer_of(v, &x); break;
	default: return 0;
	}
	return ok ? 0 : srv_fail(e, SRV_E_BAD_REQUEST, name, "%s must be %s, got %s", name, what[r->kind], type_name(v));
}

int srv_fields_read(json_t *o, const srv_field *t, void *base, const char *where, lane_api *api, srv_conn *c, srv_err *e) {
	for (const srv_field *r = t; r->kind != SRV_K_END; r++) {
		char *dst = (char *)base + r->off;
		if (r->kind == SRV_K_INCLUDE) {
			if (srv_fields_read(o, r->sub, dst, where, api, c, e)) return -1;
			continue;
		}
		json_t *v = json_object_get(o, r->name);
		if (!v || json_is_null(v)) continue;
		char name[96];
		snprintf(name, sizeof name, "%s%s%s", where ? where : "", where ? "." : "", r->name);
		const bool ign = r->kind >= SRV_K_IGNORE;
		if (ign ? ignored_type(r, v, name, e) : read_one(r, v, dst, name, api, !where, c, e)) return -1;
		if (ign && r->named) srv_ignored_add(c, name);
	}
	return 0;
}

int srv_body_read(srv_conn *c, const srv_field *t, void *base, json_t **j, srv_err *e) {
	return srv_parse_body(c, j, e) || srv_fields_known(*j, t, NULL, e) || srv_fields_read(*j, t, base, NULL, NULL, c, e) ? -1 : 0;
}
