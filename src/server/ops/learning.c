// server/ops/learning: learning while serving over HTTP — POST /learn/grants (open a grant, making
// its adapter when the name is new), DELETE /learn/grants/ID (revoke), POST /learn/examples
// (queue an example), GET /learn/grants (the ledger, read off the engine's last publication:
// it never waits for a round), POST /v1/adapters/NAME/save (the committed weights written by
// the learn thread while the connection waits suspended), and the lanes_learn_* metrics.
#include "server/net/base.h"
#include "server/routes.h"
#include "learn/live.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>

int srv_learning_start(http_server *s, char *err, size_t errlen) {
	if (!(s->cfg.learn_share > 0)) return 0;
	int rc = learn_live_new(&s->mdl->learn, s->mdl->m, 0, err, errlen);
	if (!rc) s->mdl->lanes.background = learn_live_background(s->mdl->learn, s->cfg.learn_share);
	return rc;
}

// The learner once the model is in (NULL before, and when learning is off).
static learn_live *learner(http_server *s) {
	const int st = atomic_load(&s->state);
	return st == HTTP_READY || st == HTTP_DRAINING || st == HTTP_HALTED ? s->mdl->learn : NULL;
}

// 404 when learning is off on this server; else the learner.
static learn_live *learner_or_fail(http_server *s, srv_err *e) {
	learn_live *l = learner(s);
	if (!l) srv_fail(e, SRV_E_NOT_FOUND, NULL, "learning is off on this server: start it with %s above 0", HTTP_SETTING(&s->cfg, learn_share));
	return l;
}

// A learning call's code as the API's error kind.
static void grant_name(uint64_t id, char *out, size_t n) { snprintf(out, n, "grant-%" PRIu64, id); }

// "grant-N" (or the number N) as the grant's id; 0: not one.
static uint64_t grant_parse(const json_t *v) {
	if (json_is_integer(v)) return json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
	const char *p = json_string_value(v);
	if (!p || strncmp(p, "grant-", 6) || p[6] < '1' || p[6] > '9') return 0;
	char *end;
	errno = 0;
	const unsigned long long id = strtoull(p + 6, &end, 10);
	return *end || errno ? 0 : (uint64_t)id;
}

static json_t *grant_object(const learn_grant_info *g) {
	char id[32];
	grant_name(g->id, id, sizeof id);
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:o, s:o, s:I, s:I}", "id", id, "kind", learn_kind_name[g->kind], "adapter", g->adapter, "state",
			      learn_grant_state_name[g->state], "steps_done", (json_int_t)g->steps_done, "steps_max", (json_int_t)g->steps_max,
			      "tokens_used", (json_int_t)g->tokens_used, "tokens_max", (json_int_t)g->tokens_max, "last_loss",
			      isfinite(g->last_loss) ? json_real(g->last_loss) : json_null(), "expires_at",
			      g->expires_at ? json_integer(g->expires_at) : json_null(), "version", (json_int_t)g->version, "queued",
			      (json_int_t)g->queued);
	if (o && g->reason[0]) json_object_set_new(o, "reason", json_string(g->reason));
	return o;
}

// A number field of body between lo and hi (whole when integer); absent: left as it is.
static int number(json_t *body, const char *name, double lo, double hi, bool integer, double *out, srv_err *e) {
	json_t *v = json_object_get(body, name);
	if (!v || json_is_null(v)) return 0;
	const double x = json_is_number(v) ? json_number_value(v) : NAN;
	if (!(x >= lo && x <= hi) || (integer && !json_is_integer(v)))
		return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s must be %s between %g and %g", name, integer ? "an integer" : "a number", lo, hi);
	*out = x;
	return 0;
}

// ---- GET /learn/grants ------------------------------------------------------------------------

void srv_learn_grants(srv_conn *c) {
	http_server *s = c->s;
	srv_err e;
	learn_live *l = learner(s);
	// while the model loads nothing is published yet: sequence 0
	if (!l && atomic_load(&s->state) != HTTP_LOADING && !learner_or_fail(s, &e)) { srv_reply_error(c, &e); return; }
	learn_ledger *lg = calloc(1, sizeof *lg);
	if (!lg) return;
	if (l) learn_live_ledger_of(l, lg);
	json_t *grants = json_array();
	for (int i = 0; grants && i < lg->n_grants; i++) json_array_append_new(grants, grant_object(&lg->grants[i]));
	json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:i}", "model", s->mdl->model_id, "sequence", (json_int_t)lg->sequence,
			      "clock_us", (json_int_t)lg->clock_us, "revision", (json_int_t)lg->revision, "grants",
			      grants ? grants : json_array(), "committed_steps", (json_int_t)lg->committed_steps, "aborted_steps",
			      (json_int_t)lg->aborted_steps, "tokens_trained", (json_int_t)lg->tokens_trained, "examples",
			      (json_int_t)lg->examples, "optimizer_bytes", (json_int_t)lg->optimizer_bytes, "job_bytes",
			      (json_int_t)lg->job_bytes, "train_seconds", srv_real(lg->train_seconds), "adapters", (int)lg->adapters);
	free(lg);
	srv_reply_json(c, 200, o, 0);
}

// ---- POST /learn/grants ---------------------------------------------------------------------

static const srv_field grant_fields[] = {
	{"adapter", SRV_K_STR, .off = offsetof(learn_grant_req, adapter)},
	SRV_IGNORED("kind"), SRV_IGNORED("max_steps"), SRV_IGNORED("max_tokens"), SRV_IGNORED("lr"), SRV_IGNORED("rank"),
	SRV_IGNORED("batch"), SRV_IGNORED("expires_s"),
	{0},
};

void srv_learn_grant_new(srv_conn *c) {
	http_server *s = c->s;
	srv_err e;
	json_t *j = NULL;
	learn_live *l = learner_or_fail(s, &e);
	learn_grant_req r = {0};
	double steps = 0, tokens = 0, lr = 0, rank = 0, batch = 0, expires = 0;
	if (!l || srv_parse_body(c, &j, &e) || srv_fields_known(j, grant_fields, NULL, &e) ||
	    srv_fields_read(j, grant_fields, &r, NULL, NULL, NULL, &e) || number(j, "max_steps", 1, 1e9, true, &steps, &e) ||
	    number(j, "max_tokens", 2, (double)((int64_t)1 << 40), true, &tokens, &e) || number(j, "lr", 0, 1, false, &lr, &e) ||
	    number(j, "rank", 1, LEARN_LIVE_MAX_RANK, true, &rank, &e) || number(j, "batch", 1, LEARN_LIVE_MAX_BATCH, true, &batch, &e) ||
	    number(j, "expires_s", 0, LEARN_LIVE_MAX_EXPIRY_S, false, &expires, &e))
		goto fail;
	const json_t *kind = json_object_get(j, "kind");
	if (kind && !json_is_null(kind)) {
		const char *k = json_string_value(kind);
		if (!k || (strcmp(k, "lora") && strcmp(k, "mtp"))) {
			srv_fail(&e, SRV_E_BAD_REQUEST, "kind", "kind must be \"lora\" (an adapter) or \"mtp\" (the MTP head the server drafts with)");
			goto fail;
		}
		r.kind = strcmp(k, "mtp") ? LEARN_KIND_LORA : LEARN_KIND_MTP;
	}
	if (r.kind == LEARN_KIND_MTP && !r.adapter) r.adapter = LEARN_LIVE_HEAD;
	if (!r.adapter || !steps || !tokens) {
		const char *miss = !r.adapter ? "adapter" : !steps ? "max_steps" : "max_tokens";
		srv_fail(&e, SRV_E_BAD_REQUEST, miss, "%s is required: {\"adapter\", \"max_steps\", \"max_tokens\", \"lr\"?, \"rank\"?, \"expires_s\"?}",
			 miss);
		goto fail;
	}
	if (!strcmp(r.adapter, s->mdl->model_id)) {
		srv_fail(&e, SRV_E_CONFLICT, "adapter", "'%s' is the base model's name", r.adapter);
		goto fail;
	}
	r.max_steps = (int64_t)steps;
	r.max_tokens = (int64_t)tokens;
	r.lr = (float)lr;
	r.rank = (int32_t)rank;
	r.batch = (int32_t)batch;
	r.expires_s = expires;
	learn_grant_info g;
	bool created = false;
	char err[512];
	const int rc = learn_live_grant(l, &r, &g, &created, err, sizeof err);
	if (rc) {
		const bool head = r.kind == LEARN_KIND_MTP, field = rc == LANES_EINVAL || (rc == LANES_EUNSUPPORTED && head);
		// the checks' order: the name, then the head's rank, then whether a head can learn here
		const char *param = !field ? NULL : rc == LANES_EUNSUPPORTED ? "kind" : head != !strcmp(r.adapter, LEARN_LIVE_HEAD) ? "adapter"
				    : head && r.rank ? "rank" : "adapter";
		srv_fail(&e, field ? SRV_E_BAD_REQUEST : srv_kind_of(rc, SRV_BLAME_STATE), param, "%s", err);
		goto fail;
	}
	json_decref(j);
	json_t *o = grant_object(&g);
	if (o) {
		json_object_set_new(o, "object", json_string("learn.grant"));
		json_object_set_new(o, "created", json_boolean(created));
		json_object_set_new(o, "lr", srv_real(g.lr));
	}
	srv_reply_json(c, 200, o, 0);
	return;
fail:
	json_decref(j);
	srv_reply_error(c, &e);
}

// ---- DELETE /learn/grants/ID --------------------------------------------------------------

void srv_learn_grant_revoke(srv_conn *c) {
	srv_err e;
	learn_live *l = learner_or_fail(c->s, &e);
	if (!l) { srv_reply_error(c, &e); return; }
	const char *name = c->path + strlen("/learn/grants/");
	json_t *v = json_string(name);
	const uint64_t id = grant_parse(v);
	json_decref(v);
	if (!id) {
		srv_fail(&e, SRV_E_NOT_FOUND, NULL, "'%.64s' is not a grant's id (grant-N)", name);
		srv_reply_error(c, &e);
		return;
	}
	learn_grant_info g;
	char err[512];
	const int rc = learn_live_revoke(l, id, &g, err, sizeof err);
	if (rc) {
		srv_fail(&e, srv_kind_of(rc, SRV_BLAME_STATE), NULL, "%s", err);
		srv_reply_error(c, &e);
		return;
	}
	// the step in progress is dropped at the next round boundary: the ledger says so then
	srv_reply_json(c, 202, grant_object(&g), 0);
}

// ---- POST /learn/examples -------------------------------------------------------------------

typedef struct {
	json_t *grant, *messages;
	const char *prompt, *completion;
} example_req;

static const srv_field example_fields[] = {
	SRV_ROW(example_req, grant, SRV_K_JSON),
	SRV_ROW(example_req, messages, SRV_K_JSON),
	SRV_ROW(example_req, prompt, SRV_K_STR),
	SRV_ROW(example_req, completion, SRV_K_STR),
	{0},
};

void srv_learn_examples(srv_conn *c) {
	http_server *s = c->s;
	srv_err e;
	json_t *j = NULL;
	learn_example *ex = NULL;
	example_req r = {0};
	learn_live *l = learner_or_fail(s, &e);
	if (!l || srv_parse_body(c, &j, &e) || srv_fields_known(j, example_fields, NULL, &e) ||
	    srv_fields_read(j, example_fields, &r, NULL, NULL, NULL, &e))
		goto fail;
	const uint64_t id = grant_parse(r.grant);
	if (!id) {
		srv_fail(&e, SRV_E_BAD_REQUEST, "grant", "grant is required: the id POST /learn/grants gave (\"grant-N\")");
		goto fail;
	}
	if (!r.messages == !(r.prompt || r.completion)) {
		srv_fail(&e, SRV_E_BAD_REQUEST, r.messages ? "prompt" : "messages",
			 "an example is {\"grant\", \"messages\"} or {\"grant\", \"prompt\", \"completion\"}: one of the two");
		goto fail;
	}
	if (!r.messages && (!r.prompt || !r.completion || !*r.completion)) {
		srv_fail(&e, SRV_E_BAD_REQUEST, r.prompt ? "completion" : "prompt", "prompt and completion are both required, the completion not empty");
		goto fail;
	}
	if (r.messages && (!json_is_array(r.messages) || !json_array_size(r.messages))) {
		srv_fail(&e, SRV_E_BAD_REQUEST, "messages", "messages must be a non-empty array of {\"role\", \"content\"}");
		goto fail;
	}
	char err[512];
	int rc = r.messages ? learn_example_chat(&ex, &s->mdl->chat, r.messages, LEARN_LIVE_MAX_EXAMPLE, err, sizeof err)
			    : learn_example_text(&ex, s->mdl->vocab, r.prompt, r.completion, LEARN_LIVE_MAX_EXAMPLE, err, sizeof err);
	if (rc) {
		srv_fail(&e, srv_kind_of(rc, SRV_BLAME_STATE), r.messages ? "messages" : "completion", "%s", err);
		goto fail;
	}
	const int64_t n = learn_example_tokens(ex), learned = learn_example_learned(ex);
	learn_grant_info g;
	int64_t left = 0;
	rc = learn_live_example(l, id, ex, &g, &left, err, sizeof err);
	if (rc) {
		srv_fail(&e, srv_kind_of(rc, SRV_BLAME_STATE), rc == LANES_EINVAL ? (r.messages ? "messages" : "completion") : "grant", "%s", err);
		if (rc == LANES_ELIMIT) snprintf(e.code, sizeof e.code, "grant_tokens_exceeded");
		goto fail;
	}
	json_decref(j);
	char name[32];
	grant_name(id, name, sizeof name);
	srv_reply_json(c, 202,
		       json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I}", "object", "learn.example", "grant", name, "adapter", g.adapter,
				 "tokens", (json_int_t)n, "learned_tokens", (json_int_t)learned, "queued", (json_int_t)g.queued,
				 "tokens_left", (json_int_t)left),
		       0);
	return;
fail:
	learn_example_free(ex);
	json_decref(j);
	srv_reply_error(c, &e);
}

// ---- POST /v1/adapters/NAME/save --------------------------------------------------------------

// The outcome the learn thread writes before it wakes the connection.
typedef struct {
	srv_conn *conn;
	int rc;
	int64_t version;
	char name[MODEL_LORA_NAME_MAX + 1];
	char file[BASE_NAME_MAX + 1];
	int dfd;
	char msg[512];
} save_job;

static void on_saved(void *arg, int rc, const char *msg, int64_t version) {
	save_job *j = arg;
	j->rc = rc;
	j->version = version;
	snprintf(j->msg, sizeof j->msg, "%s", msg);
	srv_wake(j->conn, SRV_WAIT_SAVE);
}

static void save_done(srv_conn *c) {
	free(c->job);
	c->job = NULL;
}

static void save_resume(srv_conn *c) {
	save_job *j = c->job;
	srv_err e;
	if (j->rc) {
		srv_fail(&e, srv_kind_of(j->rc, SRV_BLAME_STATE), "file", "%s", j->msg);
		srv_reply_error(c, &e);
		return;
	}
	struct stat st;
	const json_int_t bytes = fstatat(j->dfd, j->file, &st, AT_SYMLINK_NOFOLLOW) ? 0 : (json_int_t)st.st_size;
	srv_reply_json(c, 200,
		       json_pack("{s:s, s:s, s:I, s:s, s:I, s:s}", "name", j->name, "status", "saved", "version", (json_int_t)j->version,
				 "file", j->file, "bytes", bytes, "type", "F32"),
		       0);
}

typedef struct {
	const char *file, *path;
} save_req;

static const srv_field save_fields[] = {
	SRV_ROW(save_req, file, SRV_K_STR),
	SRV_ROW(save_req, path, SRV_K_STR),
	{0},
};

void srv_adapters_save(srv_conn *c) {
	http_server *s = c->s;
	srv_err e;
	json_t *j = NULL;
	const char *rest = c->path + strlen("/v1/adapters/"), *slash = strchr(rest, '/');
	if (!slash || strcmp(slash, "/save") || slash == rest || (size_t)(slash - rest) > MODEL_LORA_NAME_MAX) {
		srv_fail(&e, SRV_E_NOT_FOUND, NULL, "no such path: POST /v1/adapters/NAME/save {\"file\"?} saves an adapter");
		srv_reply_error(c, &e);
		return;
	}
	learn_live *l = learner_or_fail(s, &e);
	save_req r = {0};
	char name[MODEL_LORA_NAME_MAX + 1], file[BASE_NAME_MAX + 1];
	snprintf(name, sizeof name, "%.*s", (int)(slash - rest), rest);
	if (!l || (c->body.len && (srv_parse_body(c, &j, &e) || srv_fields_known(j, save_fields, NULL, &e) ||
				   srv_fields_read(j, save_fields, &r, NULL, NULL, NULL, &e))) ||
	    srv_adapter_file(s, r.path, r.file, name, file, &e))
		goto fail;
	save_job *job = calloc(1, sizeof *job);
	if (!job) {
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		goto fail;
	}
	snprintf(job->name, sizeof job->name, "%s", name);
	snprintf(job->file, sizeof job->file, "%s", file);
	job->dfd = s->adapters_dfd;
	job->conn = c;
	char err[512];
	c->job = job;
	const int rc = learn_live_save(l, job->name, job->dfd, job->file, on_saved, job, err, sizeof err);
	json_decref(j);
	if (!rc) {
		c->resume = save_resume;
		c->done = save_done;
		// a save that ended before this park is answered at once
		if (!srv_park(c, SRV_WAIT_SAVE)) save_resume(c);
		return;
	}
	c->job = NULL;
	free(job);
	srv_fail(&e, srv_kind_of(rc, SRV_BLAME_STATE), rc == LANES_EINVAL ? "file" : NULL, "%s", err);
	srv_reply_error(c, &e);
	return;
fail:
	json_decref(j);
	srv_reply_error(c, &e);
}

// ---- /metrics ---------------------------------------------------------------------------------

void srv_learning_metrics(http_server *s, srv_buf *out) {
	learn_live *l = learner(s);
	if (!l) return;
	learn_ledger *lg = malloc(sizeof *lg);
	if (!lg) return;
	learn_live_ledger_of(l, lg);
	int64_t by[LEARN_GRANT__COUNT] = {0};
	for (int i = 0; i < lg->n_grants; i++) by[lg->grants[i].state]++;
	char line[512];
	srv_buf_adds(out, "# HELP lanes_learn_grants Grants listed by GET /learn/grants, by state.\n# TYPE lanes_learn_grants gauge\n");
	for (int k = 0; k < LEARN_GRANT__COUNT; k++) {
		snprintf(line, sizeof line, "lanes_learn_grants{state=\"%s\"} %lld\n", learn_grant_state_name[k], (long long)by[k]);
		srv_buf_adds(out, line);
	}
	snprintf(line, sizeof line,
		 "# HELP lanes_learn_steps_total Training steps, committed or dropped before their commit.\n# TYPE lanes_learn_steps_total counter\n"
		 "lanes_learn_steps_total{outcome=\"committed\"} %lld\nlanes_learn_steps_total{outcome=\"aborted\"} %lld\n",
		 (long long)lg->committed_steps, (long long)lg->aborted_steps);
	srv_buf_adds(out, line);
	const struct {
		const char *name, *type, *help;
		double v;
	} rows[] = {
		{"lanes_learn_tokens_total", "counter", "Tokens the committed training steps ran through the model.", (double)lg->tokens_trained},
		{"lanes_learn_examples_total", "counter", "Training examples accepted.", (double)lg->examples},
		{"lanes_learn_seconds_total", "counter", "Time the engine spent in training pieces.", lg->train_seconds},
		{"lanes_learn_optimizer_bytes", "gauge", "AdamW moments of the adapters that learn here.", (double)lg->optimizer_bytes},
		{"lanes_learn_job_bytes", "gauge", "Gradients, queued examples and step memory of the training jobs.", (double)lg->job_bytes},
		{"lanes_learn_adapters", "gauge", "Adapters that learn here.", (double)lg->adapters},
		{"lanes_learn_ledger_sequence", "counter", "Publications of the learning ledger.", (double)lg->sequence},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %.9g\n", rows[i].name, rows[i].help, rows[i].name, rows[i].type,
			 rows[i].name, rows[i].v);
		srv_buf_adds(out, line);
	}
	free(lg);
}
