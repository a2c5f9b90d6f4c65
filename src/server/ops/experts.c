// server/ops/experts: the expert observer's reads — GET /v1/experts (the report as JSON; ?reset=1
// begins a new window), GET /v1/experts.svg (the heat map) and, with --metrics-experts, the
// activations in /metrics. Each copies the counters the engine publishes and never waits for it.
#include "observe/observe.h"
#include "server/net/base.h"
#include "server/routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool loaded(int st) { return st == HTTP_READY || st == HTTP_DRAINING || st == HTTP_HALTED; }

// The model a read reports on: ?model=NAME (one loaded now), else the -m model; held until
// put back (NULL: e says why).
static srv_model *reported(srv_conn *c, srv_err *e) {
	http_server *s = c->s;
	const char *name = srv_query(c, "model");
	if (!name && srv_has_primary(s)) name = s->mdl->model_id;
	if (!name) return srv_fail(e, SRV_E_BAD_REQUEST, "model", "name the model: ?model=NAME (this server has no -m model)"), NULL;
	srv_model *M = srv_models_hold(s, name);
	if (!M) srv_fail(e, SRV_E_NOT_FOUND, "model", "the model '%s' is not loaded now (GET /v1/models says what is)", name);
	return M;
}

// A copy of M's counters into e (reset: then a new window); -1 with e's error when there are none.
static int take(srv_conn *c, srv_model *M, lane_experts *out, bool reset, srv_err *e) {
	if (!lane_host_observes_experts(M->host))
		return model_hparams_of(M->m)->n_experts
			       ? srv_fail(e, SRV_E_NOT_FOUND, NULL, "the expert observer is off (%s off)", HTTP_SETTING(&c->s->cfg, lanes.experts))
			       : srv_fail(e, SRV_E_NOT_FOUND, NULL, "the model %s has no experts: /v1/experts reports on mixture-of-experts models",
					  M->model_id);
	if (lane_experts_init(M->host, out)) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	lane_host_experts(M->host, out, reset);
	return 0;
}

// The counters a read reports; ?reset=1 (or true) begins a new window once they are taken.
// *M the model reported on (put back by the caller when not NULL).
static int read_counts(srv_conn *c, srv_model **M, lane_experts *out, srv_err *e) {
	const char *v = srv_query(c, "reset");
	const bool reset = v && (!strcmp(v, "1") || !strcasecmp(v, "true"));
	*M = NULL;
	if (v && !reset && strcmp(v, "0") && strcasecmp(v, "false"))
		return srv_fail(e, SRV_E_BAD_REQUEST, "reset", "reset must be 1 or 0 (true or false)");
	if (!(*M = reported(c, e))) return -1;
	return take(c, *M, out, reset, e);
}

static void put(srv_conn *c, srv_model *M) {
	if (M) srv_models_put(c->s, &M, 1);
}

void srv_experts(srv_conn *c) {
	if (!loaded(atomic_load(&c->s->state))) { srv_health(c); return; }
	srv_err e;
	lane_experts ex;
	srv_model *M;
	if (read_counts(c, &M, &ex, &e)) {
		put(c, M);
		srv_reply_error(c, &e);
		return;
	}
	json_t *body = obs_experts_json(&ex, M->model_id);
	lane_experts_release(&ex);
	put(c, M);
	srv_reply_json(c, 200, body, 0);
}

void srv_experts_svg(srv_conn *c) {
	if (!loaded(atomic_load(&c->s->state))) { srv_health(c); return; }
	srv_err e;
	lane_experts ex;
	srv_model *M;
	if (read_counts(c, &M, &ex, &e)) {
		put(c, M);
		srv_reply_error(c, &e);
		return;
	}
	size_t len = 0;
	char *svg = obs_experts_svg(&ex, M->model_id, &len);
	lane_experts_release(&ex);
	put(c, M);
	if (!svg) {
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		srv_reply_error(c, &e);
		return;
	}
	// opened on its own the image runs nothing and loads nothing; its one style block is inline
	const char *const hdrs[] = {"Content-Type", "image/svg+xml", "Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'",
				    "X-Content-Type-Options", "nosniff", "Cache-Control", "no-cache", NULL};
	srv_reply_body(c, 200, svg, len, SRV_MEM_FREE, hdrs);
}

void srv_metrics_experts(http_server *s, srv_buf *b) {
	lane_experts ex;
	if (!s->cfg.metrics_experts || !srv_primary_host(s) || !lane_host_observes_experts(s->mdl->host) ||
	    lane_experts_init(s->mdl->host, &ex))
		return;
	lane_host_experts(s->mdl->host, &ex, false);
	model_experts_view g;
	model_experts_group(ex.counts, 0, &g);
	const size_t cells = (size_t)g.n_layers * (size_t)g.n_experts;
	uint64_t *act = calloc(cells, sizeof *act);
	for (int32_t k = 0; act && k < g.n_groups; k++) {
		model_experts_group(ex.counts, k, &g);
		for (size_t i = 0; i < cells; i++) act[i] += g.act[i];
	}
	if (act) {
		srv_buf_adds(b, "# HELP lanes_expert_activations_total Times each MoE layer's router chose each expert "
				"(since the last /v1/experts?reset=1).\n# TYPE lanes_expert_activations_total counter\n");
		char line[160];
		for (size_t i = 0; i < cells; i++) {
			snprintf(line, sizeof line, "lanes_expert_activations_total{layer=\"%zu\",expert=\"%zu\"} %llu\n",
				 i / (size_t)g.n_experts, i % (size_t)g.n_experts, (unsigned long long)act[i]);
			srv_buf_adds(b, line);
		}
	}
	free(act);
	lane_experts_release(&ex);
}
