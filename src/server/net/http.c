// server/net/http: libmicrohttpd's callbacks. Each step of a request — its head, each piece of
// its body, its last call, each resumption after a wait — ends with what the step left: a reply
// queued or the connection parked goes on, anything else closes the connection.
#include "server/net/http.h"
#include "server/net/mhd.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context, enum MHD_ConnectionNotificationCode code) {
	srv_sock_notify(cls, mc, socket_context, code);
}

struct cl_scan {
	const char *first;
	bool differ;
};

static enum MHD_Result cl_each(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
	struct cl_scan *sc = cls;
	(void)kind;
	if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) || !value) return MHD_YES;
	if (!sc->first) sc->first = value;
	else if (strcmp(sc->first, value)) sc->differ = true;
	return MHD_YES;
}

// The framing of the request: what libmicrohttpd would accept and then wait on or misread.
static int head_check(srv_conn *c, const char *version, srv_err *e) {
	if (c->http11 && !srv_header(c, MHD_HTTP_HEADER_HOST))
		return srv_fail(e, SRV_E_BAD_REQUEST, NULL, "an %s request needs a Host header", version);
	struct cl_scan sc = {0};
	MHD_get_connection_values(c->mc, MHD_HEADER_KIND, cl_each, &sc);
	if (sc.differ) return srv_fail(e, SRV_E_BAD_REQUEST, NULL, "two different Content-Length headers");
	const char *te = srv_header(c, MHD_HTTP_HEADER_TRANSFER_ENCODING);
	if (te && strcasecmp(te, "chunked"))
		return srv_fail(e, SRV_E_BAD_REQUEST, NULL,
				"Transfer-Encoding '%.64s' is not supported: send the body with Content-Length or chunked", te);
	if (te && sc.first) return srv_fail(e, SRV_E_BAD_REQUEST, NULL, "both Transfer-Encoding and Content-Length were sent");
	return 0;
}

// What libmicrohttpd is told once a step of c returns.
static enum MHD_Result step_end(srv_conn *c) {
	return c->parked || (c->replied && !c->broken && !c->closed_after_reply) ? MHD_YES : MHD_NO;
}

// A step of c: handler(c), then what it left.
static enum MHD_Result step(srv_conn *c, srv_handler *handler) {
	c->parked = false;
	handler(c);
	return step_end(c);
}

static void refuse(srv_conn *c) {
	srv_err e;
	srv_fail(&e, SRV_E_TOO_LARGE, NULL, "the request body is larger than the limit of %zu bytes", c->s->cfg.max_body);
	srv_reply_error(c, &e);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
				  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
	http_server *s = cls;
	srv_conn *c = *con_cls;
	if (!c) {
		c = calloc(1, sizeof *c);
		if (!c) return MHD_NO;
		c->s = s;
		c->mdl = s->mdl;
		c->mc = mc;
		c->t0_us = base_now_us();
		snprintf(c->method, sizeof c->method, "%s", method);
		snprintf(c->path, sizeof c->path, "%s", url);
		const size_t pl = strlen(c->path);
		if (pl > 1 && c->path[pl - 1] == '/') c->path[pl - 1] = 0; // as the routes read it
		c->http11 = strcmp(version, MHD_HTTP_VERSION_1_0) && strcmp(version, "");
		*con_cls = c;
		srv_sock_begin(c);
		srv_err e;
		if (s->hooks->head(c, url, method, &e) || head_check(c, version, &e)) {
			srv_sock_received(c, true);
			srv_reply_error(c, &e);
			return step_end(c);
		}
		return MHD_YES;
	}
	// resumed: it goes on from the wait that ended
	const enum srv_wait woke = srv_woke(c);
	if (woke == SRV_WAIT_WORK) return MHD_NO; // its route ran on a work thread and gave no reply: the connection closes
	if (woke && !c->replied) return c->resume ? step(c, c->resume) : MHD_NO;
	if (c->replied) {
		*upload_size = 0; // a reply went out early: the rest of the body is dropped
		return MHD_YES;
	}
	if (*upload_size) {
		// a chunked body (no Content-Length) over the limit is read and dropped: libmicrohttpd
		// cannot reply in the middle of a body, so the 413 goes out at its end
		if (c->body_over || c->body.len + *upload_size > s->cfg.max_body) {
			c->body_over = true;
			srv_buf_free(&c->body);
			*upload_size = 0;
			return MHD_YES;
		}
		srv_buf_add(&c->body, upload, *upload_size);
		*upload_size = 0;
		if (c->body.oom) {
			srv_err e;
			srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
			srv_reply_error(c, &e);
			return step_end(c);
		}
		return MHD_YES;
	}
	srv_sock_received(c, false);
	return step(c, c->body_over ? refuse : s->hooks->body);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe) {
	srv_conn *c = *con_cls;
	if (!c) return;
	*con_cls = NULL;
	bool whole = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK;
	if (c->closed_after_reply) whole = true;
	else if (whole) srv_sock_answered(c);
	c->s->hooks->ended(c, whole);
	json_decref(c->json);
	srv_buf_free(&c->body);
	free(c);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
	char msg[512];
	vsnprintf(msg, sizeof msg, fmt, ap);
	size_t n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
	LOG_DEBUG(SRV_MOD, "libmicrohttpd: %s", msg);
}

int srv_http_start(http_server *s, const srv_http_hooks *h, char *err, size_t errlen) {
	const http_config *cfg = &s->cfg;
	s->hooks = h;
	// NO_LISTEN_SOCKET: the gate accepts and judges each head first (net/sock.c); TURBO: closing
	// does not shut the socket for writing first, so a last word can still be written
	const unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO |
			       MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG;
	// the gate enforces --max-connections and the per-address limit; libmicrohttpd's own limit,
	// counted per thread, is set past anything the gate lets through
	const unsigned limit = (unsigned)cfg->max_connections * (unsigned)cfg->http_threads + 64;
	s->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
				  MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_CONNECTION_LIMIT, limit,
				  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SRV_MHD_POOL,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->idle_timeout_s,
				  MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->http_threads,
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_END);
	return s->mhd ? 0 : base_seterr(err, errlen, LANES_EIO, "cannot start the HTTP daemon");
}

void srv_http_stop(http_server *s) {
	if (s->mhd) MHD_stop_daemon(s->mhd);
	s->mhd = NULL;
}
