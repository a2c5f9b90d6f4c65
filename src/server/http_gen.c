// server, layer 1: the generation call every API shares — the request as read, checked
// against the request contract (lane_check_params, lane_check_prompt), the chat prompt;
// then one lane request per choice, events through an eventfd the engine's notify
// callback writes (never blocking the engine) polled together with the client's socket
// (a client that goes away cancels at once), and the reply or the SSE stream.
#include "server/http_gen.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SRV_TIMEOUT_S 60 // idle connections (headers, bodies) time out; generations do not

// ---- the request as read --------------------------------------------------------------------

const srv_field srv_gen_fields[] = {
	SRV_ROW(srv_gen, model, SRV_K_STR),
	{"top_k", SRV_K_INT, LANE_F_TOP_K, offsetof(srv_gen, lr.sampling.top_k), NULL},
	{"min_p", SRV_K_NUM, LANE_F_MIN_P, offsetof(srv_gen, lr.sampling.min_p), NULL},
	{"seed", SRV_K_SEED, .off = offsetof(srv_gen, lr.sampling)},
	SRV_ROW(srv_gen, stream, SRV_K_BOOL),
	{"draft", SRV_K_BOOL, .off = offsetof(srv_gen, lr.draft)},
	{"ignore_eos", SRV_K_BOOL, .off = offsetof(srv_gen, lr.ignore_eos)},
	{0},
};

void srv_gen_init(srv_gen *g, const lane_api *api) {
	memset(g, 0, sizeof *g);
	lane_request_init(&g->lr); // "draft": false turns drafting off; --draft off for every request
	g->api = *api;
	g->n = 1;
}

void srv_gen_free(srv_gen *g) {
	free(g->prompt);
	free(g->bias.p);
	g->prompt = NULL;
	g->bias.p = NULL;
}

// Points g's request at g's own storage: again whenever g has been copied.
static void gen_wire(srv_gen *g) {
	g->lr.api = &g->api;
	g->lr.prompt = g->prompt;
	g->lr.stop_strs = g->stops.s;
	g->lr.n_stop_strs = g->stops.n;
	g->lr.sampling.bias = g->bias.p;
	g->lr.sampling.n_bias = g->bias.n;
}

int srv_gen_check(http_server *s, srv_gen *g, srv_err *e) {
	if (srv_check_model(s, g->model, e)) return -1;
	gen_wire(g);
	char err[256];
	enum lane_field bad = LANE_F_COUNT;
	if (lane_check_params(&g->lr, &g->api, s->n_vocab, err, sizeof err, &bad))
		return srv_fail(e, SRV_E_BAD_REQUEST, bad < LANE_F_COUNT ? lane_api_name(&g->api, bad) : NULL, "%s", err);
	const int64_t entries = g->stream ? 0 : lane_output_entries(&g->lr, g->n, s->max_ctx);
	if (entries > (int64_t)(s->cfg.max_output_bytes / SRV_LOGPROB_BYTES))
		return srv_fail(e, SRV_E_BAD_REQUEST, lane_api_name(&g->api, LANE_F_MAX_TOKENS),
				"n (%d) x %s (%d) x (1 + top_logprobs %d) log-probability entries could take %lld bytes, more than "
				"a reply may hold (%zu, --max-output-bytes): lower one of them, or stream",
				g->n, lane_api_name(&g->api, LANE_F_MAX_TOKENS), g->lr.max_tokens > 0 ? g->lr.max_tokens : s->max_ctx,
				g->lr.top_logprobs, (long long)entries * SRV_LOGPROB_BYTES, s->cfg.max_output_bytes);
	return 0;
}

// ---- chat prompts ---------------------------------------------------------------------------

// One OpenAI chat message as read.
typedef struct {
	json_t *role, *content, *tool_calls;
} oai_msg;

static const srv_field oai_msg_fields[] = {
	SRV_ROW(oai_msg, role, SRV_K_JSON),
	SRV_ROW(oai_msg, content, SRV_K_JSON),
	SRV_IGNORED("name"),
	SRV_IGNORED("refusal"),
	SRV_ROW(oai_msg, tool_calls, SRV_K_JSON),
	{0},
};

int srv_openai_messages(json_t *msgs, json_t **out, srv_err *e) {
	static const char *const part_types[] = {"text", NULL};
	*out = NULL;
	if (!json_is_array(msgs) || !json_array_size(msgs))
		return srv_fail(e, SRV_E_BAD_REQUEST, "messages", "messages must be a non-empty array");
	json_t *flat = json_array();
	if (!flat) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	size_t i;
	json_t *m;
	json_array_foreach(msgs, i, m) {
		char p[64];
		snprintf(p, sizeof p, "messages[%zu]", i);
		if (!json_is_object(m)) {
			json_decref(flat);
			return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s must be an object", p);
		}
		oai_msg r = {0};
		if (srv_fields_known(m, oai_msg_fields, p, e) || srv_fields_read(m, oai_msg_fields, &r, p, NULL, e)) goto fail;
		if (r.tool_calls && !(json_is_array(r.tool_calls) && !json_array_size(r.tool_calls))) {
			srv_fail(e, SRV_E_BAD_REQUEST, p, "unsupported parameter: %s.tool_calls (tool calls are not supported)", p);
			goto fail;
		}
		const char *role = json_string_value(r.role);
		if (!role) {
			srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.role must be a string", p);
			goto fail;
		}
		if (!strcmp(role, "developer")) role = "system";
		if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant")) {
			srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.role '%s' is not supported: system, developer, user or assistant", p, role);
			goto fail;
		}
		char pc[80], *text = NULL;
		snprintf(pc, sizeof pc, "%s.content", p);
		if (!r.content && strcmp(role, "assistant")) {
			srv_fail(e, SRV_E_BAD_REQUEST, pc, "%s is required", pc);
			goto fail;
		}
		if (srv_content_text(r.content, pc, part_types, &text, e)) goto fail;
		json_t *o = json_pack("{s:s, s:s}", "role", role, "content", text);
		free(text);
		if (!o || json_array_append_new(flat, o)) {
			srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
			goto fail;
		}
	}
	*out = flat;
	return 0;
fail:
	json_decref(flat);
	return -1;
}

// A prompt refused before it was tokenized: it cannot fit the context.
static int too_long(srv_err *e, const char *param, const char *msg) {
	srv_fail(e, SRV_E_BAD_REQUEST, param, "%s", msg);
	snprintf(e->code, sizeof e->code, "context_length_exceeded");
	return -1;
}

int srv_check_parts(http_server *s, json_t *parts, const char *param, srv_err *e) {
	const lane_api api = {.name = {[LANE_F_PROMPT] = param}};
	char err[256];
	if (!json_is_array(parts) || !lane_check_prompt_size(s->host, json_array_size(parts), 0, &api, err, sizeof err, NULL)) return 0;
	return too_long(e, param, err);
}

int srv_chat_prompt(http_server *s, json_t *messages, const char *prefill, int32_t **ids, int32_t *n, srv_err *e) {
	*ids = NULL;
	*n = 0;
	char err[512];
	if (srv_check_parts(s, messages, "messages", e)) return -1;
	json_t *ctx = json_pack("{s:O, s:s, s:s, s:b}", "messages", messages, "bos_token", s->bos_text, "eos_token",
				s->eos_text, "add_generation_prompt", 1);
	if (!ctx) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	char *text = NULL;
	size_t len = 0;
	int rc = tmpl_render(s->tmpl, ctx, NULL, &text, &len, err, sizeof err);
	json_decref(ctx);
	if (rc == LANES_ENOMEM) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	if (rc) return srv_fail(e, SRV_E_BAD_REQUEST, "messages", "the chat template failed: %s", err);
	static const lane_api msgs = {.name = {[LANE_F_PROMPT] = "the rendered messages"}};
	if (lane_check_prompt_size(s->host, 0, len + (prefill ? strlen(prefill) : 0), &msgs, err, sizeof err, NULL)) {
		free(text);
		return too_long(e, "messages", err);
	}
	if (prefill && *prefill) {
		size_t pl = strlen(prefill);
		char *t = realloc(text, len + pl + 1);
		if (!t) {
			free(text);
			return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
		}
		memcpy(t + len, prefill, pl + 1);
		text = t;
		len += pl;
	}
	int32_t *v = NULL;
	size_t cnt = 0;
	rc = tok_encode_chat(s->vocab, text, len, &v, &cnt, err, sizeof err);
	free(text);
	if (rc) return srv_fail(e, rc == LANES_ENOMEM ? SRV_E_INTERNAL : SRV_E_BAD_REQUEST, "messages", "%s", err);
	if (cnt > (size_t)INT32_MAX / 2) {
		free(v);
		return srv_fail(e, SRV_E_BAD_REQUEST, "messages", "the prompt is too long");
	}
	*ids = v;
	*n = (int32_t)cnt;
	return 0;
}

// ---- wake-up slots --------------------------------------------------------------------------

static void slot_notify(void *arg) {
	srv_slot *sl = arg;
	uint64_t one = 1;
	ssize_t w = write(sl->fd, &one, sizeof one);
	(void)w; // a full counter already means "wake up"
}

static int slot_get(http_server *s) {
	int got = -1;
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->n_slots && got < 0; i++)
		if (!s->slots[i].used) {
			s->slots[i].used = true;
			got = i;
		}
	pthread_mutex_unlock(&s->mu);
	if (got >= 0) {
		uint64_t v;
		ssize_t r = read(s->slots[got].fd, &v, sizeof v); // drop a stale wake-up
		(void)r;
	}
	return got;
}

static void slot_put(http_server *s, int i) {
	if (i < 0) return;
	pthread_mutex_lock(&s->mu);
	s->slots[i].used = false;
	pthread_mutex_unlock(&s->mu);
}

// ---- SSE output ---------------------------------------------------------------------------------

void srv_sse_raw(srv_call *c, const char *s) { srv_buf_adds(&c->out, s); }

void srv_sse(srv_call *c, const char *name, json_t *data) {
	char *txt = data ? json_dumps(data, JSON_COMPACT) : NULL;
	json_decref(data);
	if (!txt) {
		c->out.oom = true;
		return;
	}
	if (name) {
		srv_buf_adds(&c->out, "event: ");
		srv_buf_adds(&c->out, name);
		srv_buf_adds(&c->out, "\n");
	}
	srv_buf_adds(&c->out, "data: ");
	srv_buf_adds(&c->out, txt);
	srv_buf_adds(&c->out, "\n\n");
	free(txt);
}

int32_t srv_call_generated(const srv_call *c) {
	int32_t n = 0;
	for (int i = 0; i < c->n; i++) n += c->ch[i].n_generated;
	return n;
}

// ---- events -------------------------------------------------------------------------------------

static void call_cancel(srv_call *c) {
	for (int i = 0; i < c->n; i++)
		if (c->req[i] && !c->ch[i].ended) lane_cancel(c->req[i]);
}

// Takes every event that has arrived; ends the call when all choices finished or one failed.
static void pump(srv_call *c) {
	if (c->over) return;
	http_server *s = c->s;
	lane_event ev;
	for (int i = 0; i < c->n && !c->failed; i++) {
		srv_choice *ch = &c->ch[i];
		while (!ch->ended && !c->failed && lane_next(c->req[i], &ev, 0)) {
			uint64_t now = base_now_us();
			if (ev.kind == LANE_EV_TOKEN) {
				if (ch->n_tokens == 0) srv_hist_observe(&s->ttft, (double)(now - c->conn->t0_us) / 1e6, 1);
				else srv_hist_observe(&s->itl, (double)(now - ch->t_last_us) / 1e6, 1);
				ch->t_last_us = now;
				ch->n_tokens++;
				srv_buf_add(&ch->text, ev.text, ev.text_len);
				c->api->text(c, i, ev.text, ev.text_len, &ev);
				c->out_bytes += ev.text_len + (c->g.lr.logprobs ? (size_t)(1 + ev.n_top) * SRV_LOGPROB_BYTES : 0);
				if (!c->g.stream && c->out_bytes > s->cfg.max_output_bytes) {
					c->failed = c->too_big = true;
					snprintf(c->fail_reason, sizeof c->fail_reason,
						 "the reply passed the %zu bytes it may hold (--max-output-bytes): lower %s or n, or stream",
						 s->cfg.max_output_bytes, lane_api_name(&c->g.api, LANE_F_MAX_TOKENS));
				}
				continue;
			}
			ch->ended = true;
			ch->kind = ev.kind;
			ch->finish = ev.finish;
			ch->stop_index = ev.stop_index;
			ch->n_generated = ev.n_generated;
			ch->n_cached = ev.n_cached;
			memcpy(ch->token_sha, ev.token_sha, sizeof ch->token_sha);
			if (ev.kind == LANE_EV_FINISHED) {
				if (ev.text_len) {
					srv_buf_add(&ch->text, ev.text, ev.text_len);
					c->api->text(c, i, ev.text, ev.text_len, NULL);
				}
				if (c->api->choice_end && c->g.stream) c->api->choice_end(c, i);
			} else {
				c->failed = true;
				snprintf(c->fail_reason, sizeof c->fail_reason, "%s",
					 ev.kind == LANE_EV_FAILED && ev.reason ? ev.reason : "the request was cancelled");
			}
		}
	}
	bool all = true;
	for (int i = 0; i < c->n; i++) all &= c->ch[i].ended;
	if (c->failed) {
		call_cancel(c);
		if (c->g.stream) c->api->fail(c);
		c->over = true;
		c->conn->outcome = "failed";
	} else if (all) {
		if (c->g.stream) c->api->done(c);
		c->over = true;
		c->conn->outcome = "finished";
	}
	c->conn->n_gen = srv_call_generated(c);
}

// 1: woken (events may be waiting), 0: timed out, -1: the client went away.
static int call_wait(srv_call *c, int timeout_ms) {
	struct pollfd p[2] = {{c->s->slots[c->slot].fd, POLLIN, 0}, {c->sock, POLLRDHUP, 0}};
	int np = c->sock >= 0 ? 2 : 1;
	int r = poll(p, (nfds_t)np, timeout_ms);
	if (r < 0) return errno == EINTR ? 1 : -1;
	if (np == 2 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) return -1;
	if (p[0].revents & POLLIN) {
		uint64_t v;
		ssize_t n = read(p[0].fd, &v, sizeof v);
		(void)n;
		return 1;
	}
	return r > 0 ? 1 : 0;
}

static void set_timeout(srv_call *c, unsigned seconds) {
	MHD_set_connection_option(c->conn->mc, MHD_CONNECTION_OPTION_TIMEOUT, seconds);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
	srv_call *c = cls;
	(void)pos;
	for (;;) {
		if (c->out.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
		if (c->out_off < c->out.len) {
			size_t n = c->out.len - c->out_off;
			if (n > max) n = max;
			memcpy(buf, c->out.p + c->out_off, n);
			c->out_off += n;
			if (c->out_off == c->out.len) c->out_off = c->out.len = 0;
			return (ssize_t)n;
		}
		if (c->over) {
			set_timeout(c, SRV_TIMEOUT_S);
			return MHD_CONTENT_READER_END_OF_STREAM;
		}
		pump(c);
		if (c->out.len || c->over) continue;
		int w = call_wait(c, 15000);
		if (w < 0) {
			call_cancel(c);
			c->conn->outcome = "cancelled";
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		if (w == 0) srv_sse_raw(c, ": keep-alive\n\n");
	}
}

// ---- the call -----------------------------------------------------------------------------------

void srv_call_free(srv_call *c) {
	if (!c) return;
	for (int i = 0; i < c->n; i++) {
		if (!c->req[i]) continue;
		lane_req_set_notify(c->req[i], NULL, NULL);
		lane_req_free(c->req[i]);
	}
	if (c->conn) {
		c->conn->n_gen = srv_call_generated(c);
		c->conn->call = NULL;
	}
	if (c->api && c->api->free_state) c->api->free_state(c->st);
	for (int i = 0; c->ch && i < c->n; i++) srv_buf_free(&c->ch[i].text);
	free(c->ch);
	free(c->req);
	srv_gen_free(&c->g);
	srv_buf_free(&c->out);
	slot_put(c->s, c->slot);
	atomic_fetch_sub(&c->s->calls_open, 1);
	free(c);
}

static enum srv_ekind submit_kind(int rc) {
	switch (rc) {
	case LANES_EBUSY: return SRV_E_BUSY;
	case LANES_ECANCELLED: return SRV_E_UNAVAILABLE;
	case LANES_ENOMEM: return SRV_E_INTERNAL;
	default: return SRV_E_BAD_REQUEST;
	}
}

enum MHD_Result srv_gen_run(srv_conn *conn, const srv_api *api, void *st, srv_gen *g, const char *id_prefix) {
	http_server *s = conn->s;
	srv_err e;
	conn->n_prompt = g->lr.n_prompt;
	gen_wire(g);
	char err[256];
	enum lane_field bad = LANE_F_PROMPT;
	int rc = lane_check_prompt(s->host, &g->lr, &g->api, err, sizeof err, &bad);
	if (rc) {
		srv_fail(&e, SRV_E_BAD_REQUEST, lane_api_name(&g->api, bad), "%s", err);
		if (rc == LANES_ELIMIT) snprintf(e.code, sizeof e.code, "context_length_exceeded");
	}
	srv_call *c = rc ? NULL : calloc(1, sizeof *c);
	if (!rc && !c) rc = srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
	if (rc) {
		if (api->free_state) api->free_state(st);
		srv_gen_free(g);
		return srv_reply_error(conn, &e);
	}
	c->s = s;
	c->conn = conn;
	c->api = api;
	c->st = st;
	c->g = *g;
	memset(g, 0, sizeof *g); // the call owns the storage now
	gen_wire(&c->g);
	c->n = c->g.n;
	c->slot = -1;
	c->created = (int64_t)time(NULL);
	srv_new_id(s, id_prefix, c->id, sizeof c->id);
	atomic_fetch_add(&s->calls_open, 1);
	conn->call = c;
	// drawn here, not by the host, so that every choice shares it and the reply can name it
	if (!c->g.lr.sampling.has_seed) {
		c->g.lr.sampling.seed = lane_draw_seed(s->host);
		c->g.lr.sampling.has_seed = true;
	}
	c->ch = calloc((size_t)c->n, sizeof *c->ch);
	c->req = calloc((size_t)c->n, sizeof *c->req);
	c->slot = slot_get(s);
	c->sock = srv_sock_fd(conn);
	if (!c->ch || !c->req) {
		c->n = 0;
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		return srv_reply_error(conn, &e);
	}
	if (c->slot < 0) {
		srv_fail(&e, SRV_E_UNAVAILABLE, NULL, "too many connections: retry shortly");
		return srv_reply_error(conn, &e);
	}
	lane_request lr = c->g.lr;
	for (int i = 0; i < c->n; i++) {
		lr.sampling.choice = i;
		rc = lane_submit(s->host, &lr, &c->req[i], err, sizeof err);
		if (rc) {
			// the choices already queued are cancelled when the call is freed
			srv_fail(&e, submit_kind(rc), rc == LANES_ELIMIT ? lane_api_name(&c->g.api, LANE_F_MAX_TOKENS) : NULL, "%s", err);
			if (rc == LANES_ECANCELLED && atomic_load(&s->state) == HTTP_DRAINING)
				snprintf(e.msg, sizeof e.msg, "the server is draining: retry shortly");
			conn->host_counted = true;
			return srv_reply_error(conn, &e);
		}
		lane_req_set_notify(c->req[i], slot_notify, &s->slots[c->slot]);
	}
	set_timeout(c, 0);
	if (c->g.stream) {
		api->begin(c);
		struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, c, NULL);
		if (!r) return MHD_NO;
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
		MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
		MHD_add_response_header(r, "X-Accel-Buffering", "no");
		srv_reply_headers(conn, r, 200);
		conn->status = 200;
		conn->replied = true;
		enum MHD_Result ok = MHD_queue_response(conn->mc, MHD_HTTP_OK, r);
		MHD_destroy_response(r);
		return ok;
	}
	for (;;) {
		pump(c);
		if (c->over) break;
		if (call_wait(c, 1000) < 0) {
			call_cancel(c);
			conn->outcome = "cancelled";
			return MHD_NO;
		}
	}
	set_timeout(c, SRV_TIMEOUT_S);
	if (c->failed) {
		conn->host_counted = c->too_big; // the host counted its cancel
		srv_fail(&e, c->too_big ? SRV_E_BAD_REQUEST : SRV_E_INTERNAL, c->too_big ? lane_api_name(&c->g.api, LANE_F_MAX_TOKENS) : NULL,
			 "%s", c->fail_reason);
		enum MHD_Result ok = srv_reply_error(conn, &e);
		conn->outcome = "failed";
		return ok;
	}
	json_t *body = api->reply(c);
	if (!body) {
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		return srv_reply_error(conn, &e);
	}
	return srv_reply_json(conn, 200, body, 0);
}
