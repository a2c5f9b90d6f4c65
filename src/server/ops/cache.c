// server/ops/cache: Ollama's model-cache endpoints over src/pull — POST /api/pull (the download
// runs on a thread of its own while its connection waits suspended; its progress streams as
// Ollama's NDJSON), POST /api/copy and DELETE /api/delete, confined to the cache folder `lanes
// pull` writes to. The file this server serves is never deleted nor replaced.
#include "pull/pull.h"
#include "server/net/base.h"
#include "server/net/work.h"
#include "server/routes.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PULL_OUT_MAX (64u << 10)    // progress a slow reader may leave unread: more lines are dropped, never the last
#define PULL_EVERY_US 250000        // a download's progress line at most this often

typedef struct pull_job {
	struct pull_job *next;
	http_server *s;
	srv_conn *conn;                // the request (NULL once it ended)
	int refs;                      // the thread's and the request's
	bool stream;
	// under the pulls' lock
	bool done;                     // the pull ended: rc, err and out's last line are written
	bool cancel;                   // the request ended or the server stops
	bool shown;                    // a download line went out
	int retry_said;                // the last failed try a line said it retries after
	srv_buf out;                   // NDJSON not yet read
	size_t out_off;
	uint64_t last_us;              // when the last download line went out
	int rc;
	char err[1024];
	char ref[512];
} pull_job;

struct srv_pulls {
	pthread_mutex_t mu;
	pthread_cond_t cv;             // a pull thread ended
	pull_job *jobs;
	int running;
	bool stopping;
};

int srv_pulls_start(http_server *s) {
	struct srv_pulls *P = calloc(1, sizeof *P);
	if (!P) return LANES_ENOMEM;
	pthread_mutex_init(&P->mu, NULL);
	pthread_cond_init(&P->cv, NULL);
	s->pulls = P;
	return 0;
}

// Under the lock: the connection reads again (a line came, or the pull ended).
static void wake(pull_job *j) {
	if (j->conn) srv_wake(j->conn, SRV_WAIT_PULL);
}

// Under the lock: drops one holder; the last frees the job.
static void release(struct srv_pulls *P, pull_job *j) {
	if (--j->refs) return;
	for (pull_job **p = &P->jobs; *p; p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			break;
		}
	srv_buf_free(&j->out);
	free(j);
}

void srv_pulls_stop(http_server *s) {
	struct srv_pulls *P = s->pulls;
	if (!P) return;
	pthread_mutex_lock(&P->mu);
	P->stopping = true;
	for (pull_job *j = P->jobs; j; j = j->next) {
		j->cancel = true;
		wake(j); // the connection ends at once; the thread at its transfer's next progress call
	}
	while (P->running) pthread_cond_wait(&P->cv, &P->mu);
	pthread_mutex_unlock(&P->mu);
}

void srv_pulls_free(http_server *s) {
	struct srv_pulls *P = s->pulls;
	if (!P) return;
	while (P->jobs) {
		pull_job *j = P->jobs;
		P->jobs = j->next;
		srv_buf_free(&j->out);
		free(j);
	}
	pthread_mutex_destroy(&P->mu);
	pthread_cond_destroy(&P->cv);
	free(P);
	s->pulls = NULL;
}

// Under the lock: one NDJSON line (o stolen); a download line is dropped while the reader lags.
static void line(pull_job *j, json_t *o, bool droppable) {
	if (droppable && j->out.len - j->out_off > PULL_OUT_MAX) return json_decref(o);
	srv_stream_event(SRV_OLLAMA, &j->out, NULL, o);
	wake(j);
}

// Ollama's line for a layer: "pulling" and the digest's first 12 hex digits (the file's name
// when the hub publishes no checksum), the digest, and the bytes.
static json_t *download_line(const pull_progress *p) {
	char status[300], digest[80] = "";
	const char *base = strrchr(p->rel, '/');
	if (p->sha[0]) snprintf(status, sizeof status, "pulling %.12s", p->sha), snprintf(digest, sizeof digest, "sha256:%s", p->sha);
	else snprintf(status, sizeof status, "pulling %s", base ? base + 1 : p->rel);
	json_t *o = json_pack("{s:s}", "status", status);
	if (o && digest[0]) json_object_set_new(o, "digest", json_string(digest));
	if (o && p->total > 0) json_object_set_new(o, "total", json_integer(p->total));
	if (o) json_object_set_new(o, "completed", json_integer(p->done));
	return o;
}

static int on_progress(void *ud, const pull_progress *p) {
	pull_job *j = ud;
	struct srv_pulls *P = j->s->pulls;
	pthread_mutex_lock(&P->mu);
	const bool cancel = j->cancel;
	const uint64_t now = base_now_us();
	if (!cancel && j->stream) switch (p->stage) {
		case PULL_RESOLVE:
			line(j, json_pack("{s:s}", "status", "pulling manifest"), false);
			break;
		case PULL_DOWNLOAD:
			if (j->shown && now - j->last_us < PULL_EVERY_US) break;
			line(j, download_line(p), j->shown);
			j->shown = true, j->last_us = now;
			break;
		case PULL_VERIFY:
			line(j, download_line(p), false); // the layer whole
			line(j, json_pack("{s:s}", "status", "verifying sha256 digest"), false);
			break;
		case PULL_COMMIT:
			if (!j->shown) line(j, download_line(p), false); // in the cache already
			j->shown = true;
			line(j, json_pack("{s:s}", "status", "writing manifest"), false);
			break;
		case PULL_RETRY: // once per wait: the wait is heard every tenth of a second
			if (j->retry_said == p->attempt) break;
			j->retry_said = p->attempt;
			char status[96];
			snprintf(status, sizeof status, "try %d failed: retrying in %g s", p->attempt, (double)p->wait_ms / 1000);
			line(j, json_pack("{s:s}", "status", status), false);
			break;
		}
	pthread_mutex_unlock(&P->mu);
	return cancel;
}

// The pull's job on a pull thread (net/work.c).
static void pull_main(void *arg, bool stopping) {
	pull_job *j = arg;
	http_server *s = j->s;
	struct srv_pulls *P = s->pulls;
	char path[4096], rel[1024] = "";
	const int rc = stopping ? base_seterr(j->err, sizeof j->err, LANES_ECANCELLED, "the server is stopping")
				: pull_model(&s->cfg.cache, j->ref, on_progress, j, path, sizeof path, rel, sizeof rel, j->err, sizeof j->err);
	if (rc) LOG_WARN(SRV_MOD, "pull %s: %s", j->ref, j->err);
	else LOG_INFO(SRV_MOD, "pull %s: %s in the cache", j->ref, rel);
	if (!rc) srv_models_rescan(s);
	pthread_mutex_lock(&P->mu);
	j->rc = rc;
	if (j->stream) line(j, rc ? json_pack("{s:s}", "error", j->err) : json_pack("{s:s}", "status", "success"), false);
	j->done = true;
	wake(j);
	P->running--;
	pthread_cond_broadcast(&P->cv);
	release(P, j);
	pthread_mutex_unlock(&P->mu);
}

// A stream's bytes as the pull writes them; the connection waits suspended for more.
static ssize_t pull_reader(void *cls, uint64_t pos, char *buf, size_t max) {
	pull_job *j = cls;
	struct srv_pulls *P = j->s->pulls;
	ssize_t n = 0;
	(void)pos;
	pthread_mutex_lock(&P->mu);
	for (;;) {
		if (j->out.oom) {
			n = SRV_STREAM_FAIL;
		} else if (j->out_off < j->out.len) {
			n = (ssize_t)(j->out.len - j->out_off < max ? j->out.len - j->out_off : max);
			memcpy(buf, j->out.p + j->out_off, (size_t)n);
			j->out_off += (size_t)n;
			if (j->out_off == j->out.len) j->out_off = j->out.len = 0;
		} else if (j->done) {
			n = SRV_STREAM_END;
		} else if (P->stopping) {
			n = SRV_STREAM_FAIL;
		} else if (!srv_park(j->conn, SRV_WAIT_PULL)) {
			continue; // a line came meanwhile
		}
		break;
	}
	pthread_mutex_unlock(&P->mu);
	return n;
}

// The request ended: a pull still running for it is cancelled (its .part file stays, resumable).
static void pull_done(srv_conn *c) {
	pull_job *j = c->job;
	struct srv_pulls *P = c->s->pulls;
	if (!j) return;
	pthread_mutex_lock(&P->mu);
	j->conn = NULL;
	j->cancel |= !j->done;
	release(P, j);
	pthread_mutex_unlock(&P->mu);
	c->job = NULL;
}

// stream: false — the pull's end is the reply.
static void pull_resume(srv_conn *c) {
	pull_job *j = c->job;
	struct srv_pulls *P = c->s->pulls;
	srv_err e;
	pthread_mutex_lock(&P->mu);
	bool done, stopping;
	while (!(done = j->done) && !(stopping = P->stopping) && !srv_park(c, SRV_WAIT_PULL)) {}
	const int rc = j->rc;
	if (done && rc) srv_fail(&e, srv_kind_of(rc, SRV_BLAME_STATE), "model", "%s", j->err);
	pthread_mutex_unlock(&P->mu);
	if (!done && !stopping) return;
	if (!done) srv_fail(&e, SRV_E_UNAVAILABLE, NULL, "the server is stopping");
	if (!done || rc) { srv_reply_error(c, &e); return; }
	srv_reply_json(c, 200, json_pack("{s:s}", "status", "success"), 0);
}

typedef struct {
	const char *model, *name, *source, *destination;
	bool insecure, stream;
} cache_req;

static const srv_field pull_fields[] = {
	SRV_ROW(cache_req, model, SRV_K_STR),
	SRV_ROW(cache_req, name, SRV_K_STR),
	SRV_ROW(cache_req, insecure, SRV_K_BOOL),
	SRV_ROW(cache_req, stream, SRV_K_BOOL),
	{0},
};

void srv_ollama_pull(srv_conn *c) {
	http_server *s = c->s;
	struct srv_pulls *P = s->pulls;
	srv_err e;
	json_t *body = NULL;
	cache_req r = {.stream = true}; // Ollama streams unless told not to
	if (srv_parse_body(c, &body, &e) || srv_fields_known(body, pull_fields, NULL, &e) ||
	    srv_fields_read(body, pull_fields, &r, NULL, NULL, c, &e)) {
		json_decref(body);
		srv_reply_error(c, &e);
		return;
	}
	const char *ref = r.model ? r.model : r.name;
	if (!ref || !*ref || strlen(ref) >= sizeof ((pull_job *)0)->ref) {
		json_decref(body);
		srv_fail(&e, SRV_E_BAD_REQUEST, "model", "model is required: a hub reference, hf.co/ORG/REPO:QUANT or hf:ORG/REPO/FILE.gguf");
		srv_reply_error(c, &e);
		return;
	}
	char err[1024];
	if (pull_ref_check(&s->cfg.cache, ref, err, sizeof err)) {
		json_decref(body);
		srv_fail(&e, SRV_E_BAD_REQUEST, "model", "%s", err);
		srv_reply_error(c, &e);
		return;
	}
	pull_job *j = calloc(1, sizeof *j);
	if (!j) {
		json_decref(body);
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		srv_reply_error(c, &e);
		return;
	}
	snprintf(j->ref, sizeof j->ref, "%s", ref);
	json_decref(body);
	j->s = s;
	j->conn = c;
	j->refs = 2;
	j->stream = r.stream;
	pthread_mutex_lock(&P->mu);
	int rc = P->stopping ? srv_fail(&e, SRV_E_UNAVAILABLE, NULL, "the server is stopping")
	       : P->running >= SRV_WORK_PULLS ? srv_fail(&e, SRV_E_BUSY, NULL, "%d pulls are running: retry when one has ended", SRV_WORK_PULLS)
					      : 0;
	// under the lock: the pull's first wake finds the job listed
	if (!rc && srv_work_post(s, SRV_WORK_PULL, pull_main, j)) rc = srv_fail(&e, SRV_E_UNAVAILABLE, NULL, "the server is stopping");
	if (rc) {
		pthread_mutex_unlock(&P->mu);
		free(j);
		srv_reply_error(c, &e);
		return;
	}
	j->next = P->jobs;
	P->jobs = j;
	P->running++;
	c->job = j;
	c->done = pull_done;
	// a stall may last LANES_PULL_STALL_S: the idle deadline waits for the pull instead
	srv_conn_timeout(c, 0);
	if (!j->stream) {
		c->resume = pull_resume;
		const bool parked = srv_park(c, SRV_WAIT_PULL); // under the lock: the pull's end can only follow it
		pthread_mutex_unlock(&P->mu);
		if (!parked) pull_resume(c);
		return;
	}
	pthread_mutex_unlock(&P->mu);
	srv_reply_stream(c, 200, pull_reader, j, (const char *const[]){"Content-Type", "application/x-ndjson", "Cache-Control", "no-cache", NULL});
}

// ---- copy and delete -------------------------------------------------------------------------

// Whether the cached file rel is a file this server serves (the model or its draft).
static bool served(http_server *s, const char *rel) {
	char dir[2048], p[4096], a[PATH_MAX], b[PATH_MAX];
	pull_cache_dir(&s->cfg.cache, dir, sizeof dir);
	snprintf(p, sizeof p, "%s/%s", dir, rel);
	if (!realpath(p, a)) return false;
	const char *mine[] = {s->mdl->model_path, s->cfg.draft_model};
	for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
		if (mine[i] && realpath(mine[i], b) && !strcmp(a, b)) return true;
	return false;
}

static const srv_field copy_fields[] = {
	SRV_ROW(cache_req, source, SRV_K_STR),
	SRV_ROW(cache_req, destination, SRV_K_STR),
	{0},
};

void srv_ollama_copy(srv_conn *c) {
	http_server *s = c->s;
	srv_err e;
	json_t *body = NULL;
	cache_req r = {0};
	char src[1024], dst[1024], err[512];
	int rc = 0;
	if (srv_parse_body(c, &body, &e) || srv_fields_known(body, copy_fields, NULL, &e) ||
	    srv_fields_read(body, copy_fields, &r, NULL, NULL, c, &e))
		goto fail;
	if (!r.source || !r.destination) {
		srv_fail(&e, SRV_E_BAD_REQUEST, r.source ? "destination" : "source", "source and destination are required");
		goto fail;
	}
	if ((rc = pull_cache_find(&s->cfg.cache, r.source, src, sizeof src, err, sizeof err))) {
		srv_fail(&e, srv_kind_of(rc, SRV_BLAME_STATE), "source", "%s", err);
		goto fail;
	}
	if ((rc = pull_cache_new_name(r.destination, dst, sizeof dst, err, sizeof err))) {
		srv_fail(&e, srv_kind_of(rc, SRV_BLAME_STATE), "destination", "%s", err);
		goto fail;
	}
	if (served(s, dst)) {
		srv_fail(&e, SRV_E_CONFLICT, "destination", "'%s' is the model this server serves: it cannot be replaced", r.destination);
		goto fail;
	}
	if ((rc = pull_cache_copy(&s->cfg.cache, src, dst, err, sizeof err))) {
		srv_fail(&e, srv_kind_of(rc, SRV_BLAME_STATE), NULL, "%s", err);
		goto fail;
	}
	LOG_INFO(SRV_MOD, "copied %s to %s in the model cache", src, dst);
	srv_models_rescan(s);
	json_decref(body);
	srv_reply_json(c, 200, json_pack("{s:s}", "status", "success"), 0);
	return;
fail:
	json_decref(body);
	srv_reply_error(c, &e);
}

static const srv_field delete_fields[] = {
	SRV_ROW(cache_req, model, SRV_K_STR),
	SRV_ROW(cache_req, name, SRV_K_STR),
	{0},
};

void srv_ollama_delete(srv_conn *c) {
	http_server *s = c->s;
	srv_err e;
	json_t *body = NULL;
	cache_req r = {0};
	char rel[1024], err[512];
	int rc = 0;
	if (srv_parse_body(c, &body, &e) || srv_fields_known(body, delete_fields, NULL, &e) ||
	    srv_fields_read(body, delete_fields, &r, NULL, NULL, c, &e))
		goto fail;
	const char *name = r.model ? r.model : r.name;
	if (!name) {
		srv_fail(&e, SRV_E_BAD_REQUEST, "model", "model is required");
		goto fail;
	}
	// a partial download alone is deleted too: it is what a failed pull left
	if ((rc = pull_cache_find(&s->cfg.cache, name, rel, sizeof rel, err, sizeof err)) && rc != LANES_EBUSY) {
		srv_fail(&e, srv_kind_of(rc, SRV_BLAME_STATE), "model", "%s", err);
		goto fail;
	}
	if (served(s, rel)) {
		srv_fail(&e, SRV_E_CONFLICT, "model", "'%s' is the model this server serves: it cannot be deleted", name);
		goto fail;
	}
	if ((rc = pull_cache_remove(&s->cfg.cache, rel, err, sizeof err))) {
		srv_fail(&e, srv_kind_of(rc, SRV_BLAME_STATE), "model", "%s", err);
		goto fail;
	}
	LOG_INFO(SRV_MOD, "deleted %s from the model cache", rel);
	srv_models_rescan(s);
	json_decref(body);
	srv_reply_json(c, 200, json_pack("{s:s}", "status", "success"), 0);
	return;
fail:
	json_decref(body);
	srv_reply_error(c, &e);
}
