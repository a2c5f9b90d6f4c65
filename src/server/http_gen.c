// server: the generation call every API shares — submits one lane request per choice,
// then waits for events on an eventfd the engine's notify callback writes (never blocking
// the engine) together with the client's socket (a client that goes away cancels at once),
// and either builds the reply or feeds SSE to libmicrohttpd.
#include "server/http_int.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SRV_TIMEOUT_S 60 // idle connections (headers, bodies) time out; generations do not

void srv_gen_init(srv_gen *g) {
	memset(g, 0, sizeof *g);
	g->lr.sampling.temperature = 1.0f;
	g->lr.sampling.top_p = 1.0f;
	g->lr.sampling.repeat_penalty = 1.0f;
	g->lr.draft = true; // "draft": false turns it off; --draft off for every request
	g->n = 1;
	g->max_field = "max_tokens";
	g->prompt_field = "messages";
}

// The fields every API reads alike: top_k, min_p, seed, stream and the draft and
// ignore_eos extensions. 0, or -1 with e naming the field.
int srv_gen_common(json_t *j, srv_gen *g, srv_err *e) {
	int64_t x;
	double d;
	bool b;
	int rc;
	if ((rc = srv_get_int(j, "top_k", 0, INT32_MAX, &x, e)) < 0) return -1;
	if (rc) g->lr.sampling.top_k = (int32_t)x;
	if ((rc = srv_get_num(j, "min_p", 0, 1, &d, e)) < 0) return -1;
	if (rc) g->lr.sampling.min_p = (float)d;
	if ((rc = srv_get_int(j, "seed", INT64_MIN, INT64_MAX, &x, e)) < 0) return -1;
	if (rc) g->has_seed = true, g->seed = (uint64_t)x;
	if (srv_get_bool(j, "stream", &g->stream, e) < 0) return -1;
	if ((rc = srv_get_bool(j, "draft", &b, e)) < 0) return -1;
	if (rc) g->lr.draft = b;
	if ((rc = srv_get_bool(j, "ignore_eos", &b, e)) < 0) return -1;
	if (rc) g->lr.ignore_eos = b;
	return 0;
}

json_t *srv_real(double v) {
	if (!isfinite(v)) v = v < 0 ? -9999.0 : 9999.0;
	return json_real(v);
}

// Length of the valid UTF-8 sequence at s (n bytes left), or 0 when it is not one.
static size_t utf8_len(const unsigned char *s, size_t n) {
	unsigned c = s[0];
	size_t len;
	unsigned cp;
	if (c < 0x80) return 1;
	if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
	else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
	else return 0;
	if (n < len) return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80) return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

char *srv_token_text(http_server *s, int32_t id, json_t **bytes) {
	size_t n = 0;
	const char *p = tok_piece(s->vocab, id, TOK_DECODE_SPECIAL, &n);
	if (!p) n = 0;
	if (bytes) {
		*bytes = json_array();
		for (size_t i = 0; i < n && *bytes; i++) json_array_append_new(*bytes, json_integer((unsigned char)p[i]));
	}
	srv_buf b = {0};
	for (size_t i = 0; i < n;) {
		size_t l = utf8_len((const unsigned char *)p + i, n - i);
		if (l) srv_buf_add(&b, p + i, l), i += l;
		else srv_buf_adds(&b, "\xef\xbf\xbd"), i++;
	}
	if (!b.p) srv_buf_add(&b, "", 1), b.len = 0;
	return b.p;
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
			uint64_t now = lanes_now_us();
			if (ev.kind == LANE_EV_TOKEN) {
				if (ch->n_tokens == 0) srv_hist_observe(&s->ttft, (double)(now - c->conn->t0_us) / 1e6, 1);
				else srv_hist_observe(&s->itl, (double)(now - ch->t_last_us) / 1e6, 1);
				ch->t_last_us = now;
				ch->n_tokens++;
				srv_buf_add(&ch->text, ev.text, ev.text_len);
				c->api->text(c, i, ev.text, ev.text_len, &ev);
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
	free(c->g.prompt);
	free(c->g.bias);
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
	int rc = 0;
	conn->n_prompt = g->n_prompt;
	int64_t want = g->lr.max_tokens > 0 ? g->lr.max_tokens : 1;
	if (g->n_prompt < 1) {
		rc = srv_fail(&e, SRV_E_BAD_REQUEST, g->prompt_field, "%s encodes to no tokens", g->prompt_field);
	} else if ((int64_t)g->n_prompt + want > s->max_ctx) {
		if (g->lr.max_tokens > 0 && s->cfg.lanes.window_max > 0)
			rc = srv_fail(&e, SRV_E_BAD_REQUEST, g->max_field,
				      "the prompt (%d tokens) plus %s (%d) exceeds the largest window the memory budget allows (%d tokens)",
				      g->n_prompt, g->max_field, g->lr.max_tokens, s->max_ctx);
		else if (g->lr.max_tokens > 0)
			rc = srv_fail(&e, SRV_E_BAD_REQUEST, g->max_field,
				      "the prompt (%d tokens) plus %s (%d) exceeds the context of %d tokens a request may use",
				      g->n_prompt, g->max_field, g->lr.max_tokens, s->max_ctx);
		else
			rc = srv_fail(&e, SRV_E_BAD_REQUEST, g->prompt_field,
				      "the prompt (%d tokens) is too long for the context of %d tokens a request may use",
				      g->n_prompt, s->max_ctx);
		snprintf(e.code, sizeof e.code, "context_length_exceeded");
	}
	srv_call *c = rc ? NULL : calloc(1, sizeof *c);
	if (!rc && !c) rc = srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
	if (rc) {
		if (api->free_state) api->free_state(st);
		free(g->prompt);
		free(g->bias);
		return srv_reply_error(conn, &e);
	}
	c->s = s;
	c->conn = conn;
	c->api = api;
	c->st = st;
	c->g = *g;
	c->n = g->n;
	c->slot = -1;
	c->created = (int64_t)time(NULL);
	srv_new_id(s, id_prefix, c->id, sizeof c->id);
	atomic_fetch_add(&s->calls_open, 1);
	conn->call = c;
	if (!c->g.has_seed) {
		c->g.seed = srv_draw_seed(s);
		c->g.has_seed = true;
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
	lr.prompt = c->g.prompt;
	lr.n_prompt = c->g.n_prompt;
	lr.stop_strs = c->g.stops;
	lr.n_stop_strs = c->g.n_stops;
	lr.sampling.bias = c->g.bias;
	lr.sampling.n_bias = c->g.n_bias;
	lr.sampling.seed = c->g.seed;
	lr.sampling.has_seed = true;
	for (int i = 0; i < c->n; i++) {
		lr.sampling.choice = i;
		char err[256];
		rc = lane_submit(s->host, &lr, &c->req[i], err, sizeof err);
		if (rc) {
			// the choices already queued are cancelled when the call is freed
			srv_fail(&e, submit_kind(rc), rc == LANES_ELIMIT ? c->g.max_field : NULL, "%s", err);
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
		srv_fail(&e, SRV_E_INTERNAL, NULL, "%s", c->fail_reason);
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
