// server/grid/peer: overflow to peers — one thread polls each --peer's residency beacon and,
// when this server's queue is deeper than --overflow-queue (or it is draining), asks an
// eligible peer (it holds the model, is not draining, answered its last poll; fewest queued
// first) for a lease and forwards the request there with the lease and a hop mark, relaying
// the peer's reply: streams event by event, unchanged, and exactly one terminal event — the
// peer's, or the API's error event naming the peer when the transfer breaks. Every transfer
// goes through libcurl's multi interface on that thread; a connection waits suspended and the
// thread resumes it, so no HTTP thread waits on a peer.
#include "server/grid/grid.h"
#include "server/net/work.h"

#include <curl/curl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define LEASE_TTL_MS 10000          // a lease the forward does not use in time goes back to the peer
#define MAX_BEACON (1u << 20)       // largest beacon read
#define MAX_LIMIT_MS 600000
#define WAIT_LOCAL_US 5000          // how often requests waiting for a lane here look for one
#define PEER_KEEPALIVE_MS 15000     // a lanes stream with nothing to say sends a comment this often (gen/gen.c)
#define MAX_PEER_LANES 64           // the most lanes a server runs (--lanes): a beacon claiming more is believed this far

// The API a forwarded path belongs to: how its stream ends and how it reports an error.

typedef struct {
	char url[256];                 // base URL, no trailing slash
	// the view from its latest beacon, replaced whole at each poll (under g->mu)
	json_t *models;                // NULL: unreachable, or no beacon yet
	bool draining;
	bool full;                     // it refused a lease (or failed one) since it last had a lane free
	// the poller's (grid thread)
	CURL *poll;
	srv_buf body;
	uint64_t next_us;
	atomic_uint_least64_t forwarded, failed;
} grid_peer;

typedef struct srv_grid srv_grid;
typedef struct srv_fwd srv_fwd;

struct srv_grid {
	http_server *s;
	grid_peer peers[SRV_GRID_MAX_PEERS];
	int n;
	pthread_mutex_t mu;            // the peers' views, the lists below, every forward's shared part
	CURLM *multi;
	pthread_t thread;
	bool started;
	atomic_bool quit;
	srv_fwd *pending, *pending_tail; // requests waiting for a peer's lease or a lane here (by next)
	int n_pending;
	int local_inflight;            // sent back to run here, not yet submitted
	atomic_int routing;            // routed here on arrival, not yet submitted: the snapshot lags them
	pthread_mutex_t route_mu;      // one arrival routed at a time: each sees those routed before it
	srv_fwd *leasing;              // the one whose lease request is in flight (grid thread)
	bool halted;                   // the server's halt reached the forwards (grid thread)
	lane_snapshot *snap;           // the grid thread's copy of this server's snapshot
	srv_fwd *cancelled;            // forwards whose connection ended (by cnext; each holds a reference)
	srv_fwd *held;                 // forwards the thread holds (by hprev/hnext)
	srv_fwd *live;                 // forwards whose connection is open (by lprev/lnext)
	char auth[320];                // Authorization for beacons and leases ("": none)
};

// A request being forwarded: shared by its connection and the grid thread.
struct srv_fwd {
	srv_grid *g;
	int refs;                      // its connection's, the thread's, the cancel list's (under g->mu)
	srv_fwd *next, *cnext, *hprev, *hnext, *lprev, *lnext;
	bool held;                     // the thread holds it (under g->mu)
	bool queued;                   // on the pending list (under g->mu)
	// fixed at creation
	srv_conn *conn;                // NULL once the connection ended (under g->mu)
	char path[192];
	char *body;
	size_t body_len;
	char model[256];               // what the peer must hold
	uint64_t spike_bytes;
	enum srv_family api;
	bool want_stream;              // the client asked for a stream: the peer's head comes at once
	char auth[2][320];             // the client's key headers, or --peer-key's ("" none)
	struct curl_slist *hdrs;       // the forward's headers
	// the thread's
	CURL *easy;                    // the lease request or the forward in flight
	bool forwarding;               // easy is the forward (else the lease request)
	uint64_t last_us;              // the forward began, or the peer's last byte came
	int peer;
	srv_buf lease;                 // the lease request's reply
	struct curl_slist *ctl;        // the lease request's headers
	// shared (under g->mu)
	bool local;                    // no peer took it: it runs here
	bool head;                     // the peer's status and headers are in
	bool stream;                   // the reply is a stream, relayed event by event
	bool done;                     // the transfer ended
	bool terminal;                 // the peer's terminal event went through
	long status;
	char ctype[128], retry_after[16];
	srv_buf in;                    // a stream: the event not yet whole; else the whole reply
	srv_buf out;                   // a stream: bytes for the client
	size_t out_off;
	char err[320];                 // the transfer's failure, naming the peer ("" none)
	srv_stream_seen seen;          // what the relayed stream said that its error event repeats
};

// ---- references and wake-ups (under g->mu) ----------------------------------------------------

static void fwd_free(srv_fwd *f) {
	curl_slist_free_all(f->hdrs);
	curl_slist_free_all(f->ctl);
	free(f->body);
	json_decref(f->seen.response);
	srv_buf_free(&f->lease);
	srv_buf_free(&f->in);
	srv_buf_free(&f->out);
	free(f);
}

// Drops one reference; true when f must be freed (after the lock).
static bool unref(srv_fwd *f) { return --f->refs == 0; }

static void hold_drop(srv_grid *g, srv_fwd *f) {
	if (!f->held) return;
	f->held = false;
	if (f->hprev) f->hprev->hnext = f->hnext;
	else g->held = f->hnext;
	if (f->hnext) f->hnext->hprev = f->hprev;
}

// Ends f's connection's wait for the peer, or keeps the wake for its next one.
static void wake(srv_fwd *f) {
	if (f->conn) srv_wake(f->conn, SRV_WAIT_PEER);
}

// From the thread that runs the connection: parks it until the grid's thread wakes it (true),
// or false at once when a wake came first or the server is stopping.
static bool fwd_suspend(srv_fwd *f) {
	srv_grid *g = f->g;
	pthread_mutex_lock(&g->mu); // the release sets quit under it
	const bool ok = !atomic_load(&g->quit) && srv_park(f->conn, SRV_WAIT_PEER);
	pthread_mutex_unlock(&g->mu);
	return ok;
}

// The thread lets go of f (its transfer ended, or it runs here).
static void thread_release(srv_grid *g, srv_fwd *f) {
	if (f->easy) {
		curl_multi_remove_handle(g->multi, f->easy);
		curl_easy_cleanup(f->easy);
		f->easy = NULL;
	}
	pthread_mutex_lock(&g->mu);
	const bool was = f->held, last = was && unref(f);
	hold_drop(g, f);
	pthread_mutex_unlock(&g->mu);
	if (last) fwd_free(f);
}

// ---- the pending list (under g->mu) ----------------------------------------------------------

static void pending_push(srv_grid *g, srv_fwd *f, bool front) {
	f->queued = true;
	g->n_pending++;
	if (front) {
		f->next = g->pending;
		g->pending = f;
		if (!g->pending_tail) g->pending_tail = f;
		return;
	}
	f->next = NULL;
	if (g->pending_tail) g->pending_tail->next = f;
	else g->pending = f;
	g->pending_tail = f;
}

static void pending_remove(srv_grid *g, srv_fwd *f) {
	if (!f->queued) return;
	srv_fwd **pp = &g->pending, *prev = NULL;
	while (*pp && *pp != f) prev = *pp, pp = &(*pp)->next;
	if (!*pp) return;
	*pp = f->next;
	if (g->pending_tail == f) g->pending_tail = prev;
	f->next = NULL;
	f->queued = false;
	g->n_pending--;
}

int srv_grid_pending(http_server *s) {
	srv_grid *g = s->grid;
	if (!g) return 0;
	pthread_mutex_lock(&g->mu);
	const int n = g->n_pending;
	pthread_mutex_unlock(&g->mu);
	return n;
}

// ---- peers: who may take a request ------------------------------------------------------------

// The entry of peer p's view that holds want (the model, or an adapter in its list), or NULL.
static json_t *holding(const grid_peer *p, const char *want) {
	size_t i, k;
	json_t *m, *a;
	json_array_foreach(p->models, i, m) {
		const char *id = json_string_value(json_object_get(m, "id"));
		if (id && !strcmp(id, want)) return m;
		json_array_foreach(json_object_get(m, "adapters"), k, a)
			if (json_is_string(a) && !strcmp(json_string_value(a), want)) return m;
	}
	return NULL;
}

// Under g->mu: of the peers that hold want, answered their last poll, are not draining and did
// not refuse a lease since, the one with the fewest queued (then the most lanes free), or -1.
static int pick(srv_grid *g, const char *want) {
	int best = -1;
	json_int_t bq = 0, bf = 0;
	for (int i = 0; i < g->n; i++) {
		const grid_peer *p = &g->peers[i];
		json_t *m = !p->models || p->draining || p->full ? NULL : holding(p, want);
		if (!m) continue;
		const json_int_t q = json_integer_value(json_object_get(m, "queue_depth"));
		const json_int_t fr = json_integer_value(json_object_get(m, "lanes_free"));
		if (best < 0 || q < bq || (q == bq && fr > bf)) best = i, bq = q, bf = fr;
	}
	return best;
}

bool srv_grid_may_forward(http_server *s) {
	srv_grid *g = s->grid;
	if (!g) return false;
	bool any = false;
	pthread_mutex_lock(&g->mu);
	for (int i = 0; i < g->n && !any; i++) any = g->peers[i].models && !g->peers[i].draining;
	pthread_mutex_unlock(&g->mu);
	return any;
}

// ---- transfers ----------------------------------------------------------------------------------

static size_t to_buf(char *p, size_t sz, size_t n, void *arg) {
	srv_buf *b = arg;
	if (b->len + sz * n > MAX_BEACON) return 0;
	srv_buf_add(b, p, sz * n);
	return b->oom ? 0 : sz * n;
}

static CURL *easy_new(srv_grid *g, const char *url, const char *path, long timeout_ms) {
	CURL *e = curl_easy_init();
	if (!e) return NULL;
	char full[512];
	snprintf(full, sizeof full, "%s%s", url, path);
	curl_easy_setopt(e, CURLOPT_URL, full);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)g->s->cfg.peer_timeout_ms);
	if (timeout_ms) curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
	return e;
}

// The headers of a beacon read or a lease request (NULL on out of memory: sent without them).
static struct curl_slist *control_headers(srv_grid *g, bool json) {
	struct curl_slist *h = NULL;
	if (g->auth[0]) h = curl_slist_append(h, g->auth);
	if (json) h = curl_slist_append(h, "Content-Type: application/json");
	return h;
}

static void poll_start(srv_grid *g, int i) {
	grid_peer *p = &g->peers[i];
	srv_buf_free(&p->body);
	p->poll = easy_new(g, p->url, "/v1/residency", g->s->cfg.peer_timeout_ms);
	if (!p->poll) return;
	struct curl_slist *h = control_headers(g, false);
	curl_easy_setopt(p->poll, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(p->poll, CURLOPT_PRIVATE, h); // freed with the transfer
	curl_easy_setopt(p->poll, CURLOPT_WRITEFUNCTION, to_buf);
	curl_easy_setopt(p->poll, CURLOPT_WRITEDATA, &p->body);
	curl_multi_add_handle(g->multi, p->poll);
}

// A beacon arrived (or did not): the peer's view is replaced whole, never merged, so a model
// that left it, or a peer that went away, stops being eligible at once.
static void poll_done(srv_grid *g, int i, CURLcode rc) {
	grid_peer *p = &g->peers[i];
	long code = 0;
	struct curl_slist *h = NULL;
	curl_easy_getinfo(p->poll, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_getinfo(p->poll, CURLINFO_PRIVATE, (char **)&h);
	curl_multi_remove_handle(g->multi, p->poll);
	curl_easy_cleanup(p->poll);
	curl_slist_free_all(h);
	p->poll = NULL;
	json_t *b = rc == CURLE_OK && code == 200 && p->body.len ? json_loadb(p->body.p, p->body.len, 0, NULL) : NULL;
	json_t *models = json_object_get(b, "models");
	const bool ok = json_is_array(models) && json_is_boolean(json_object_get(b, "draining"));
	pthread_mutex_lock(&g->mu);
	const bool was = p->models != NULL;
	json_decref(p->models);
	p->models = ok ? json_incref(models) : NULL;
	p->draining = ok && json_is_true(json_object_get(b, "draining"));
	p->full = true;
	size_t k;
	json_t *m;
	json_array_foreach(models, k, m) p->full &= json_integer_value(json_object_get(m, "lanes_free")) <= 0;
	pthread_mutex_unlock(&g->mu);
	if (ok != was)
		LOG_INFO(SRV_MOD, "peer %s is %s%s", p->url, ok ? "up" : "down: ",
			 ok ? "" : rc != CURLE_OK ? curl_easy_strerror(rc) : code != 200 ? "no beacon" : "a malformed beacon");
	json_decref(b);
	srv_buf_free(&p->body);
	p->next_us = base_now_us() + (uint64_t)g->s->cfg.peer_poll_ms * 1000;
}

static void requeue(srv_grid *g, srv_fwd *f, bool peer_full);

static void lease_start(srv_grid *g, srv_fwd *f) {
	grid_peer *p = &g->peers[f->peer];
	srv_buf_free(&f->lease);
	json_t *o = json_pack("{s:s, s:i, s:I, s:i}", "model", f->model, "want_concurrency", 1, "spike_bytes",
			      (json_int_t)f->spike_bytes, "ttl_ms", LEASE_TTL_MS);
	char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	f->easy = body ? easy_new(g, p->url, "/v1/leases", g->s->cfg.peer_timeout_ms) : NULL;
	if (!f->easy) {
		free(body);
		return requeue(g, f, true);
	}
	f->forwarding = false;
	curl_slist_free_all(f->ctl);
	f->ctl = control_headers(g, true);
	curl_easy_setopt(f->easy, CURLOPT_HTTPHEADER, f->ctl);
	curl_easy_setopt(f->easy, CURLOPT_COPYPOSTFIELDS, body);
	curl_easy_setopt(f->easy, CURLOPT_WRITEFUNCTION, to_buf);
	curl_easy_setopt(f->easy, CURLOPT_WRITEDATA, &f->lease);
	curl_easy_setopt(f->easy, CURLOPT_PRIVATE, f);
	free(body);
	curl_multi_add_handle(g->multi, f->easy);
}

// The peer's status line and headers: the type and Retry-After are kept; at their end a
// stream's connection is resumed so its reply can start.
static size_t on_header(char *p, size_t sz, size_t n, void *arg) {
	srv_fwd *f = arg;
	const size_t len = sz * n;
	f->last_us = base_now_us();
	if (f->head) return len;
	if (len >= 5 && !strncmp(p, "HTTP/", 5)) {
		f->ctype[0] = f->retry_after[0] = 0; // a new response (after an interim 1xx)
	} else if (len > 13 && !strncasecmp(p, "Content-Type:", 13)) {
		size_t k = 13;
		while (k < len && p[k] == ' ') k++;
		size_t m = len - k;
		while (m && (p[k + m - 1] == '\r' || p[k + m - 1] == '\n')) m--;
		snprintf(f->ctype, sizeof f->ctype, "%.*s", (int)m, p + k);
	} else if (len > 12 && !strncasecmp(p, "Retry-After:", 12)) {
		snprintf(f->retry_after, sizeof f->retry_after, "%ld", strtol(p + 12, NULL, 10));
	} else if (len <= 2) {
		long code = 0;
		curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, &code);
		if (code < 200) return len;
		srv_grid *g = f->g;
		pthread_mutex_lock(&g->mu);
		f->status = code;
		f->stream = code == 200 && (!strncasecmp(f->ctype, "text/event-stream", 17) || !strncasecmp(f->ctype, "application/x-ndjson", 20));
		f->head = true;
		if (f->stream) wake(f);
		pthread_mutex_unlock(&g->mu);
	}
	return len;
}

// Under g->mu: moves the whole events at the head of f->in to f->out, noting the terminal one
// and Responses' sequence numbers; a partial event waits for the rest.
static void relay_events(srv_fwd *f) {
	const char *sep = srv_families[f->api].ndjson ? "\n" : "\n\n";
	const size_t sl = strlen(sep);
	size_t off = 0;
	for (;;) {
		const char *e = memmem(f->in.p + off, f->in.len - off, sep, sl);
		if (!e) break;
		const size_t n = (size_t)(e - (f->in.p + off)) + sl;
		const char *ev = f->in.p + off;
		if (srv_stream_ends(f->api, ev, n)) f->terminal = true;
		srv_stream_note(f->api, &f->seen, ev, n);
		srv_buf_add(&f->out, ev, n);
		off += n;
		if (f->terminal) { // the client's stream ends here: what the peer sends after is dropped
			off = f->in.len;
			break;
		}
	}
	if (off) {
		memmove(f->in.p, f->in.p + off, f->in.len - off);
		f->in.len -= off;
	}
}

static size_t on_body(char *p, size_t sz, size_t n, void *arg) {
	srv_fwd *f = arg;
	srv_grid *g = f->g;
	const size_t len = sz * n, cap = g->s->cfg.max_output_bytes + MAX_BEACON;
	f->last_us = base_now_us();
	pthread_mutex_lock(&g->mu);
	// the client left: the transfer stops (and the peer cancels its request)
	bool ok = f->conn != NULL;
	if (ok && f->in.len + len > cap) {
		snprintf(f->err, sizeof f->err, "the peer %s sent %s of more than %zu bytes", g->peers[f->peer].url,
			 f->stream ? "an event" : "a reply", cap);
		ok = false;
	} else if (ok && f->stream && f->out.len - f->out_off > cap) { // what the client has not read yet is bounded too
		snprintf(f->err, sizeof f->err, "the peer %s sent more than %zu bytes the client had not read", g->peers[f->peer].url, cap);
		ok = false;
	}
	if (ok) srv_buf_add(&f->in, p, len);
	if (ok && f->stream) {
		relay_events(f);
		if (f->out.len) wake(f);
	}
	// the peer's terminal event is relayed: the transfer ends, whatever else the peer would send
	ok = ok && !f->in.oom && !f->out.oom && !f->terminal;
	pthread_mutex_unlock(&g->mu);
	return ok ? len : 0;
}

static void forward_start(srv_grid *g, srv_fwd *f, const char *lease) {
	grid_peer *p = &g->peers[f->peer];
	char h[96];
	snprintf(h, sizeof h, "%s: %.60s", SRV_LEASE_HEADER, lease);
	// the body as the client sent it, its key, the hop mark (never forwarded again) and the lease
	curl_slist_free_all(f->hdrs);
	f->hdrs = NULL;
	const char *lines[] = {"Content-Type: application/json", f->auth[0], f->auth[1], SRV_GRID_HOP ": 1", h, "Expect:"};
	bool ok = true;
	for (size_t i = 0; ok && i < sizeof lines / sizeof lines[0]; i++) {
		if (!lines[i][0]) continue;
		struct curl_slist *n = curl_slist_append(f->hdrs, lines[i]);
		if ((ok = n != NULL)) f->hdrs = n;
	}
	f->easy = ok ? easy_new(g, p->url, f->path, 0) : NULL;
	if (!f->easy) return requeue(g, f, true);
	f->forwarding = true;
	f->last_us = base_now_us();
	curl_easy_setopt(f->easy, CURLOPT_HTTPHEADER, f->hdrs);
	curl_easy_setopt(f->easy, CURLOPT_POSTFIELDS, f->body);
	curl_easy_setopt(f->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)f->body_len);
	curl_easy_setopt(f->easy, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(f->easy, CURLOPT_HEADERDATA, f);
	curl_easy_setopt(f->easy, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(f->easy, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(f->easy, CURLOPT_PRIVATE, f);
	curl_multi_add_handle(g->multi, f->easy);
}

// Whether a request waiting here may run here now: a lane is free for it, or the queue is
// shallower than --overflow-queue even with it. Draining: never (only peers take it); halted
// or stopping: always (it ends with the server's own error).
static bool room_here(srv_grid *g) {
	http_server *s = g->s;
	const int st = atomic_load(&s->state);
	if (st == HTTP_HALTED || atomic_load(&g->quit)) return true;
	if (st != HTTP_READY) return false;
	lane_host_snapshot(s->mdl->host, g->snap);
	const int in = g->local_inflight + atomic_load(&g->routing);
	return g->snap->lanes_free > in || g->snap->queue_depth + in < s->cfg.overflow_queue;
}

// Hands the waiting requests out in order: to run here when there is room, else to the best
// peer for a lease (one lease request at a time); the rest wait for a lane here or a peer's.
static void dispatch(srv_grid *g) {
	while (!g->leasing) {
		pthread_mutex_lock(&g->mu);
		srv_fwd *f = g->pending;
		int i = -1;
		bool here = false;
		if (f) {
			here = !f->conn || room_here(g);
			if (!here) i = pick(g, f->model);
		}
		if (f && (here || i >= 0)) pending_remove(g, f);
		if (f && here && f->conn) {
			f->local = true;
			g->local_inflight++;
			wake(f);
		}
		pthread_mutex_unlock(&g->mu);
		if (!f || (!here && i < 0)) return;
		if (here) {
			thread_release(g, f);
			continue;
		}
		g->leasing = f;
		f->peer = i;
		lease_start(g, f);
	}
}

// f got no lane from its peer (refused, unreachable): back to the head of the list; the peer
// is not asked again until it has a lane free (its next beacon says so, or a forward to it ends).
static void requeue(srv_grid *g, srv_fwd *f, bool peer_full) {
	if (f->easy) {
		curl_multi_remove_handle(g->multi, f->easy);
		curl_easy_cleanup(f->easy);
		f->easy = NULL;
	}
	if (g->leasing == f) g->leasing = NULL;
	pthread_mutex_lock(&g->mu);
	if (peer_full) g->peers[f->peer].full = true;
	pending_push(g, f, true);
	pthread_mutex_unlock(&g->mu);
}

// The API's own error event for a stream the peer did not end, naming the peer: the bytes a
// failure of the same stream made here would send.
static void error_event(srv_fwd *f) { srv_stream_error(f->api, &f->out, &f->seen, f->err); }

static void lease_done(srv_grid *g, srv_fwd *f, CURLcode rc) {
	long code = 0;
	curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, &code);
	json_t *b = rc == CURLE_OK && code == 201 && f->lease.len ? json_loadb(f->lease.p, f->lease.len, 0, NULL) : NULL;
	const char *id = json_string_value(json_object_get(b, "id"));
	// it goes into a header line: a token, never a second header
	if (id && (!*id || strlen(id) > 60 || id[strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")]))
		id = NULL;
	if (!id) {
		LOG_DEBUG(SRV_MOD, "peer %s leased nothing (%s, HTTP %ld)", g->peers[f->peer].url, curl_easy_strerror(rc), code);
		json_decref(b);
		return requeue(g, f, true);
	}
	char lease[64];
	snprintf(lease, sizeof lease, "%s", id);
	json_decref(b);
	curl_multi_remove_handle(g->multi, f->easy);
	curl_easy_cleanup(f->easy);
	f->easy = NULL;
	g->leasing = NULL;
	forward_start(g, f, lease);
}

static void forward_done(srv_grid *g, srv_fwd *f, CURLcode rc) {
	grid_peer *p = &g->peers[f->peer];
	pthread_mutex_lock(&g->mu);
	const bool never = !f->head && (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST);
	if (!never) {
		atomic_fetch_add(&p->forwarded, 1);
		// the peer's own end went through (what followed was dropped); else a limit or deadline
		// here may have ended it, and said why
		if (f->stream && f->terminal) f->err[0] = 0;
		else if (!f->err[0] && rc != CURLE_OK) snprintf(f->err, sizeof f->err, "the peer %s broke off: %s", p->url, curl_easy_strerror(rc));
		else if (!f->err[0] && f->stream) snprintf(f->err, sizeof f->err, "the peer %s ended the stream without its end", p->url);
		if (f->err[0]) atomic_fetch_add(&p->failed, 1);
		// a stream gets exactly one terminal event: the peer's, or this one (the partial event dropped)
		if (f->stream && !f->terminal) error_event(f);
		f->done = true;
		wake(f);
		p->full = false; // its lane is free again
	}
	pthread_mutex_unlock(&g->mu);
	// it never reached the peer: it waits again, for another peer or a lane here
	if (never) return requeue(g, f, true);
	thread_release(g, f);
}

static void transfer_done(srv_grid *g, CURL *e, CURLcode rc) {
	for (int i = 0; i < g->n; i++)
		if (g->peers[i].poll == e) return poll_done(g, i, rc);
	srv_fwd *f = NULL;
	curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&f);
	if (f && f->forwarding) forward_done(g, f, rc);
	else if (f) lease_done(g, f, rc);
}

// ---- the thread ---------------------------------------------------------------------------------

// The server halted: a forward still under way ends as a request here does, failed with the
// halt's reason (the API's error event, or a 500); one waiting for a lease ends here likewise.
static void halt_forwards(srv_grid *g) {
	http_server *s = g->s;
	if (g->halted || atomic_load(&s->state) != HTTP_HALTED) return;
	g->halted = true;
	for (;;) {
		pthread_mutex_lock(&g->mu);
		srv_fwd *f = g->held;
		while (f && !(f->easy && f->forwarding)) f = f->hnext;
		if (f) {
			pthread_mutex_lock(&s->mu);
			snprintf(f->err, sizeof f->err, "%s", s->halt_reason);
			pthread_mutex_unlock(&s->mu);
			if (f->stream && !f->terminal) error_event(f);
			f->done = true;
			wake(f);
		}
		pthread_mutex_unlock(&g->mu);
		if (!f) break;
		thread_release(g, f);
	}
	if (g->leasing) requeue(g, g->leasing, false);
}

// A streamed forward whose peer went quiet past what a lanes peer allows ends as a broken
// transfer: its head is due within --peer-timeout-ms, then a byte (a keep-alive comment at
// least) within PEER_KEEPALIVE_MS more. A reply not streamed takes as long as it runs. Returns
// when the next such deadline falls (UINT64_MAX: none).
static uint64_t end_stalled(srv_grid *g) {
	const uint64_t now = base_now_us(), head_us = (uint64_t)g->s->cfg.peer_timeout_ms * 1000;
	const uint64_t quiet_us = head_us + PEER_KEEPALIVE_MS * 1000ull;
	uint64_t next = UINT64_MAX;
	for (;;) {
		pthread_mutex_lock(&g->mu);
		srv_fwd *f = g->held;
		for (; f; f = f->hnext) {
			if (!f->easy || !f->forwarding || !f->want_stream) continue;
			const uint64_t due = f->last_us + (f->head ? quiet_us : head_us);
			if (now < due) {
				if (due < next) next = due;
				continue;
			}
			if (f->head) snprintf(f->err, sizeof f->err, "the peer %s sent nothing for %llu ms", g->peers[f->peer].url,
					      (unsigned long long)(quiet_us / 1000));
			else snprintf(f->err, sizeof f->err, "the peer %s sent no reply in %d ms", g->peers[f->peer].url, g->s->cfg.peer_timeout_ms);
			break;
		}
		pthread_mutex_unlock(&g->mu);
		if (!f) return next;
		forward_done(g, f, CURLE_OPERATION_TIMEDOUT);
	}
}

static void *grid_main(void *arg) {
	srv_grid *g = arg;
	while (!atomic_load(&g->quit)) {
		pthread_mutex_lock(&g->mu);
		srv_fwd *cancel = g->cancelled;
		g->cancelled = NULL;
		pthread_mutex_unlock(&g->mu);
		while (cancel) {
			srv_fwd *next = cancel->cnext;
			pthread_mutex_lock(&g->mu);
			pending_remove(g, cancel);
			const bool held = cancel->held;
			pthread_mutex_unlock(&g->mu);
			if (g->leasing == cancel) g->leasing = NULL;
			if (held) thread_release(g, cancel);
			pthread_mutex_lock(&g->mu);
			const bool last = unref(cancel);
			pthread_mutex_unlock(&g->mu);
			if (last) fwd_free(cancel);
			cancel = next;
		}
		const uint64_t now = base_now_us();
		uint64_t wait_us = 1000000;
		for (int i = 0; i < g->n; i++) {
			grid_peer *p = &g->peers[i];
			if (!p->poll && now >= p->next_us) poll_start(g, i);
			if (!p->poll && p->next_us - now < wait_us) wait_us = p->next_us - now;
		}
		halt_forwards(g);
		const uint64_t due = end_stalled(g), at = base_now_us();
		if (due != UINT64_MAX) wait_us = due <= at ? 0 : due - at < wait_us ? due - at : wait_us;
		dispatch(g);
		int running = 0;
		curl_multi_perform(g->multi, &running);
		CURLMsg *m;
		int left = 0;
		bool again = false;
		while ((m = curl_multi_info_read(g->multi, &left)))
			if (m->msg == CURLMSG_DONE) transfer_done(g, m->easy_handle, m->data.result), again = true;
		// requests waiting for a lane here look again soon: lanes free up without a word to this thread
		pthread_mutex_lock(&g->mu);
		if (g->pending && !g->leasing && wait_us > WAIT_LOCAL_US) wait_us = WAIT_LOCAL_US;
		pthread_mutex_unlock(&g->mu);
		if (!again) curl_multi_poll(g->multi, NULL, 0, (int)(wait_us / 1000) + 1, NULL);
	}
	return NULL;
}

// ---- the connection's side ----------------------------------------------------------------------

// What a peer must hold for the request: an adapter of this server's that it names, else the
// model (any other name means the model here, unless --strict-model). false: it runs here.
// *stream: the client asked for a stream (Ollama's paths stream unless told not to). The body
// parsed here is the one the route reads when the request stays.
static bool wanted(http_server *s, srv_conn *c, char *want, size_t n, bool *stream) {
	json_t *b = NULL;
	srv_err pe;
	srv_parse_body(c, &b, &pe);
	const json_t *st = json_object_get(b, "stream");
	*stream = srv_families[srv_family_of(c->path, strlen(c->path))].ndjson ? !json_is_false(st) : json_is_true(st);
	const char *name = json_string_value(json_object_get(b, "model"));
	// the -m model's adapters are its beacon's; another model is asked for by its own name
	const bool primary = c->mdl == s->mdl;
	json_t *ad = primary ? srv_grid_adapters(s) : NULL;
	bool adapter = false;
	size_t i;
	json_t *a;
	json_array_foreach(ad, i, a) adapter |= name && json_is_string(a) && !strcmp(json_string_value(a), name);
	json_decref(ad);
	srv_err e = {0};
	// adapters named in "lora" may be this server's alone: such a request runs here
	const json_t *lora = json_object_get(b, "lora");
	const bool ok = json_is_object(b) && !(json_is_array(lora) && json_array_size(lora)) &&
			(primary ? adapter || !name || !srv_check_model(s, name, &e) : name && srv_models_find(s, name) == c->mdl);
	snprintf(want, n, "%s", adapter ? name : c->mdl->model_id);
	json_decref(b);
	return ok;
}

void srv_grid_submitted(srv_conn *c) {
	if (!c->routed_here) return;
	c->routed_here = false;
	atomic_fetch_sub(&c->s->grid->routing, 1);
}

static void grid_resume(srv_conn *c);

static bool route(srv_conn *c, bool full) {
	http_server *s = c->s;
	srv_grid *g = s->grid;
	const bool draining = atomic_load(&s->state) == HTTP_DRAINING;
	const srv_model *M = c->mdl; // held and in: the request's own model
	lane_snapshot *sn = malloc(sizeof *sn);
	if (!sn) return false;
	lane_host_snapshot(M->host, sn);
	// those that arrived together see one snapshot: the live count finds the ones ahead of this
	const int32_t live = lane_host_open(M->host) + atomic_load(&g->routing) - M->lanes.lanes;
	const int32_t depth = live > sn->queue_depth ? live : sn->queue_depth;
	// the prompt's KV on the peer, from its text: about four bytes a token
	const uint64_t spike = (uint64_t)c->body.len / 4 * (sn->kv_page_bytes / (uint64_t)M->lanes.page_tokens);
	free(sn);
	char want[256];
	bool stream = false;
	full = full || lane_host_open(M->host) >= M->lanes.lanes + M->lanes.queue;
	pthread_mutex_lock(&g->mu);
	const int waiting = g->n_pending;
	pthread_mutex_unlock(&g->mu);
	// while some wait for a peer, newcomers wait behind them: the order of arrival holds
	if ((!draining && !full && !waiting && depth <= s->cfg.overflow_queue) || !wanted(s, c, want, sizeof want, &stream)) return false;
	// a peer holds the model (busy or not), and the list of those waiting has room: --queue, or
	// as many as those peers run at once when that is more
	json_int_t cap = M->lanes.queue > 0 ? M->lanes.queue : 1, lanes = 0;
	int holders = 0;
	pthread_mutex_lock(&g->mu);
	for (int i = 0; i < g->n; i++) {
		json_t *m = g->peers[i].models && !g->peers[i].draining ? holding(&g->peers[i], want) : NULL;
		holders += m != NULL;
		const json_int_t n = json_integer_value(json_object_get(m, "lanes_total"));
		if (m) lanes += n < 0 ? 0 : n > MAX_PEER_LANES ? MAX_PEER_LANES : n;
	}
	const bool any = holders && g->n_pending < (lanes > cap ? lanes : cap);
	pthread_mutex_unlock(&g->mu);
	srv_fwd *f = any ? calloc(1, sizeof *f) : NULL;
	if (f) f->body = malloc(c->body.len + 1);
	if (!f || !f->body) {
		free(f);
		return false; // no peer holds it (or no memory): here; a draining server refuses it there
	}
	memcpy(f->body, c->body.p, c->body.len);
	f->body_len = c->body.len;
	f->g = g;
	f->conn = c;
	f->refs = 2; // the connection's and the thread's
	f->held = true;
	f->api = srv_family_of(c->path, strlen(c->path));
	f->want_stream = stream;
	f->spike_bytes = spike;
	snprintf(f->path, sizeof f->path, "%s", c->path);
	snprintf(f->model, sizeof f->model, "%s", want);
	if (s->cfg.peer_key && *s->cfg.peer_key) {
		snprintf(f->auth[0], sizeof f->auth[0], "Authorization: Bearer %s", s->cfg.peer_key);
	} else {
		const char *a = srv_header(c, "Authorization"), *x = srv_header(c, "x-api-key");
		if (a) snprintf(f->auth[0], sizeof f->auth[0], "Authorization: %s", a);
		if (x) snprintf(f->auth[1], sizeof f->auth[1], "x-api-key: %s", x);
	}
	c->fwd = f;
	atomic_fetch_add(&s->calls_open, 1);
	srv_conn_timeout(c, 0);
	c->resume = grid_resume;
	pthread_mutex_lock(&g->mu);
	pending_push(g, f, false);
	f->hnext = g->held;
	if (g->held) g->held->hprev = f;
	g->held = f;
	f->lnext = g->live;
	if (g->live) g->live->lprev = f;
	g->live = f;
	srv_park(c, SRV_WAIT_PEER); // on a work thread, it is parked when the route returns
	pthread_mutex_unlock(&g->mu);
	curl_multi_wakeup(g->multi);
	return true;
}

bool srv_grid_route(srv_conn *c, bool full) {
	srv_grid *g = c->s->grid;
	// each model overflows to the peers whose beacons hold it
	if (!g || srv_header(c, SRV_GRID_HOP)) return false;
	srv_grid_submitted(c);
	pthread_mutex_lock(&g->route_mu);
	const bool fwd = route(c, full);
	// counted until its lane request is in, so the next arrivals see it ahead of them
	if (!fwd && !full) {
		c->routed_here = true;
		atomic_fetch_add(&g->routing, 1);
	}
	pthread_mutex_unlock(&g->route_mu);
	return fwd;
}

static void set_idle(srv_conn *c) {
	srv_conn_timeout(c, (unsigned)c->s->cfg.idle_timeout_s);
}

// Under g->mu: f's connection is done with it (ended, or the request runs here).
static bool detach(srv_grid *g, srv_fwd *f) {
	srv_conn *c = f->conn;
	if (!c) return false;
	f->conn = NULL;
	c->fwd = NULL;
	if (f->local) g->local_inflight--; // it runs here now, or its client left
	if (f->lprev) f->lprev->lnext = f->lnext;
	else g->live = f->lnext;
	if (f->lnext) f->lnext->lprev = f->lprev;
	atomic_fetch_sub(&c->s->calls_open, 1);
	// a transfer still running is cancelled by the thread, which needs its own reference
	if (f->held) {
		f->refs++;
		f->cnext = g->cancelled;
		g->cancelled = f;
	}
	return unref(f);
}

static ssize_t fwd_reader(void *cls, uint64_t pos, char *buf, size_t max) {
	srv_fwd *f = cls;
	srv_grid *g = f->g;
	(void)pos;
	for (;;) {
		pthread_mutex_lock(&g->mu);
		if (f->out.oom || atomic_load(&g->quit)) {
			pthread_mutex_unlock(&g->mu);
			return SRV_STREAM_FAIL;
		}
		if (f->out_off < f->out.len) {
			size_t n = f->out.len - f->out_off;
			if (n > max) n = max;
			memcpy(buf, f->out.p + f->out_off, n);
			f->out_off += n;
			if (f->out_off == f->out.len) f->out_off = f->out.len = 0;
			pthread_mutex_unlock(&g->mu);
			return (ssize_t)n;
		}
		const bool done = f->done;
		if (done && f->err[0] && f->conn) f->conn->outcome = "failed";
		pthread_mutex_unlock(&g->mu);
		if (done) {
			set_idle(f->conn);
			return SRV_STREAM_END;
		}
		if (fwd_suspend(f)) return 0; // resumed when the peer sends more
	}
}

// The peer's stream, relayed as it comes.
static void reply_stream(srv_conn *c, srv_fwd *f) {
	const char *const hdrs[] = {"Content-Type", f->ctype, "Cache-Control", "no-cache", "X-Accel-Buffering", "no", "x-lanes-peer", c->via, NULL};
	srv_reply_stream(c, 200, fwd_reader, f, hdrs);
}

// The peer's whole reply (status, type and body as it sent them), or the API's error naming it.
static void reply_whole(srv_conn *c, srv_fwd *f) {
	set_idle(c);
	if (f->err[0] || !f->head) {
		srv_err e;
		srv_fail(&e, SRV_E_INTERNAL, NULL, "%s", f->err[0] ? f->err : "the peer did not answer");
		c->outcome = "failed";
		srv_reply_error(c, &e);
		return;
	}
	// relayed only when it is a reply: a JSON object with a success or an error status
	json_t *body = f->in.len ? json_loadb(f->in.p, f->in.len, 0, NULL) : NULL;
	const bool object = json_is_object(body);
	json_decref(body);
	if (!object || f->status < 200 || (f->status >= 300 && f->status < 400) || f->status > 599) {
		srv_err e;
		srv_fail(&e, SRV_E_INTERNAL, NULL, "the peer %s answered HTTP %ld %s", c->via, f->status,
			 object ? "(not a reply)" : "with a body that is not a JSON object");
		atomic_fetch_add(&f->g->peers[f->peer].failed, 1);
		c->outcome = "failed";
		srv_reply_error(c, &e);
		return;
	}
	const int ra = atoi(f->retry_after);
	if (f->status == 529) { // Anthropic's overload: its status line is written as the server writes its own
		json_t *j = json_loadb(f->in.p ? f->in.p : "", f->in.len, 0, NULL);
		if (j) { srv_reply_json(c, 529, j, ra); return; }
	}
	const char *hdrs[7], **h = hdrs;
	*h++ = "x-lanes-peer", *h++ = c->via;
	if (f->ctype[0]) *h++ = "Content-Type", *h++ = f->ctype;
	if (f->retry_after[0]) *h++ = "Retry-After", *h++ = f->retry_after;
	*h = NULL;
	srv_reply_body(c, (int)f->status, f->in.p ? f->in.p : "", f->in.len, SRV_MEM_COPY, hdrs);
}

// The forward's wait ended: the peer's reply (or stream) goes out, or no peer took it and it
// runs here.
static void grid_resume(srv_conn *c) {
	srv_fwd *f = c->fwd;
	srv_grid *g = f->g;
	for (;;) {
		pthread_mutex_lock(&g->mu);
		if (f->local) {
			const bool last = detach(g, f);
			pthread_mutex_unlock(&g->mu);
			if (last) fwd_free(f);
			curl_multi_wakeup(g->multi);
			set_idle(c);
			srv_route_run(c); // no peer took it
			return;
		}
		const bool quit = atomic_load(&g->quit), stream = f->head && f->stream, done = f->done;
		if (stream || done) {
			c->via = g->peers[f->peer].url;
			c->outcome = "forwarded";
		}
		pthread_mutex_unlock(&g->mu);
		if (quit) return;
		if (stream) { reply_stream(c, f); return; }
		if (done) { reply_whole(c, f); return; }
		if (fwd_suspend(f)) return;
	}
}

void srv_grid_done(srv_conn *c) {
	srv_fwd *f = c->fwd;
	if (!f) return;
	srv_grid *g = f->g;
	pthread_mutex_lock(&g->mu);
	const bool last = detach(g, f);
	pthread_mutex_unlock(&g->mu);
	if (last) fwd_free(f);
	curl_multi_wakeup(g->multi);
}

// ---- start and stop -----------------------------------------------------------------------------

int srv_grid_start(http_server *s, char *err, size_t errlen) {
	const http_config *cfg = &s->cfg;
	if (cfg->n_peers < 0 || cfg->n_peers > SRV_GRID_MAX_PEERS)
		return base_seterr(err, errlen, LANES_EINVAL, "at most %d %s", SRV_GRID_MAX_PEERS, HTTP_SETTING(cfg, peers));
	if (cfg->overflow_queue < 0)
		return base_seterr(err, errlen, LANES_EINVAL, "%s must be at least 0", HTTP_SETTING(cfg, overflow_queue));
	if (cfg->peer_poll_ms < 10 || cfg->peer_poll_ms > MAX_LIMIT_MS || cfg->peer_timeout_ms < 10 || cfg->peer_timeout_ms > MAX_LIMIT_MS)
		return base_seterr(err, errlen, LANES_EINVAL, "%s and %s must be 10..%d", HTTP_SETTING(cfg, peer_poll_ms),
				   HTTP_SETTING(cfg, peer_timeout_ms), MAX_LIMIT_MS);
	for (int i = 0; i < cfg->n_peers; i++) {
		const char *u = cfg->peers[i];
		const size_t n = strlen(u);
		if ((strncmp(u, "http://", 7) && strncmp(u, "https://", 8)) || n > 200 || strpbrk(u, " \r\n\t?#\"\\"))
			return base_seterr(err, errlen, LANES_EINVAL, "%s '%.200s': give a base URL, http://HOST:PORT", HTTP_SETTING(cfg, peers), u);
	}
	if (!cfg->n_peers) return 0;
	if (curl_global_init(CURL_GLOBAL_DEFAULT)) return base_seterr(err, errlen, LANES_EIO, "cannot start libcurl");
	srv_grid *g = calloc(1, sizeof *g);
	if (!g) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	g->s = s;
	pthread_mutex_init(&g->mu, NULL);
	pthread_mutex_init(&g->route_mu, NULL);
	s->grid = g;
	for (int i = 0; i < cfg->n_peers; i++) {
		size_t n = strlen(cfg->peers[i]);
		while (n > 8 && cfg->peers[i][n - 1] == '/') n--;
		snprintf(g->peers[i].url, sizeof g->peers[i].url, "%.*s", (int)n, cfg->peers[i]);
	}
	g->n = cfg->n_peers;
	const char *key = cfg->peer_key && *cfg->peer_key ? cfg->peer_key : s->api_key;
	if (key) snprintf(g->auth, sizeof g->auth, "Authorization: Bearer %.280s", key);
	g->multi = curl_multi_init();
	g->snap = malloc(sizeof *g->snap);
	if (!g->multi || !g->snap) return base_seterr(err, errlen, LANES_ENOMEM, "cannot start libcurl's multi interface");
	if (pthread_create(&g->thread, NULL, grid_main, g)) return base_seterr(err, errlen, LANES_ENOMEM, "cannot start the peers' thread");
	g->started = true;
	LOG_INFO(SRV_MOD, "%d peers: overflow when more than %d requests wait; beacons every %d ms", g->n, cfg->overflow_queue,
		 cfg->peer_poll_ms);
	return 0;
}

void srv_grid_release(http_server *s) {
	srv_grid *g = s->grid;
	if (!g) return;
	pthread_mutex_lock(&g->mu);
	atomic_store(&g->quit, true);
	for (srv_fwd *f = g->live; f; f = f->lnext) wake(f);
	pthread_mutex_unlock(&g->mu);
}

void srv_grid_stop(http_server *s) {
	srv_grid *g = s->grid;
	if (!g) return;
	atomic_store(&g->quit, true);
	if (g->started) {
		curl_multi_wakeup(g->multi);
		pthread_join(g->thread, NULL);
	}
	// every connection has ended: what the thread still holds goes
	while (g->cancelled) {
		srv_fwd *f = g->cancelled;
		g->cancelled = f->cnext;
		if (unref(f)) fwd_free(f);
	}
	while (g->held) {
		srv_fwd *f = g->held;
		if (f->easy) curl_multi_remove_handle(g->multi, f->easy), curl_easy_cleanup(f->easy), f->easy = NULL;
		hold_drop(g, f);
		if (unref(f)) fwd_free(f);
	}
	for (int i = 0; i < g->n; i++) {
		grid_peer *p = &g->peers[i];
		if (p->poll) {
			struct curl_slist *h = NULL;
			curl_easy_getinfo(p->poll, CURLINFO_PRIVATE, (char **)&h);
			curl_multi_remove_handle(g->multi, p->poll);
			curl_easy_cleanup(p->poll);
			curl_slist_free_all(h);
		}
		json_decref(p->models);
		srv_buf_free(&p->body);
	}
	if (g->multi) curl_multi_cleanup(g->multi);
	free(g->snap);
	pthread_mutex_destroy(&g->mu);
	pthread_mutex_destroy(&g->route_mu);
	free(g);
	s->grid = NULL;
}

void srv_grid_peer_metrics(http_server *s, srv_buf *b) {
	srv_grid *g = s->grid;
	if (!g) return;
	char line[512];
	pthread_mutex_lock(&g->mu);
	snprintf(line, sizeof line,
		 "# HELP lanes_overflow_waiting Requests waiting for a peer's lease or a lane here.\n"
		 "# TYPE lanes_overflow_waiting gauge\nlanes_overflow_waiting %d\n"
		 "# HELP lanes_peer_up Whether the peer's last beacon arrived.\n# TYPE lanes_peer_up gauge\n", g->n_pending);
	srv_buf_adds(b, line);
	for (int i = 0; i < g->n; i++) {
		snprintf(line, sizeof line, "lanes_peer_up{peer=\"%s\"} %d\n", g->peers[i].url, g->peers[i].models != NULL);
		srv_buf_adds(b, line);
	}
	pthread_mutex_unlock(&g->mu);
	srv_buf_adds(b, "# HELP lanes_overflow_requests_total Requests forwarded to a peer, and those whose transfer failed.\n"
			"# TYPE lanes_overflow_requests_total counter\n");
	for (int i = 0; i < g->n; i++) {
		snprintf(line, sizeof line,
			 "lanes_overflow_requests_total{peer=\"%s\",outcome=\"forwarded\"} %llu\n"
			 "lanes_overflow_requests_total{peer=\"%s\",outcome=\"failed\"} %llu\n",
			 g->peers[i].url, (unsigned long long)atomic_load(&g->peers[i].forwarded), g->peers[i].url,
			 (unsigned long long)atomic_load(&g->peers[i].failed));
		srv_buf_adds(b, line);
	}
}
