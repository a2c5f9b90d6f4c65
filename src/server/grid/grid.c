// server/grid/grid: the grid's lessor side — the residency beacon (what this server holds and
// what it could take now), capacity leases over HTTP, and the gauges a gateway's endpoint
// picker reads, under vLLM's names. Every answer comes from the lane host's snapshot.
#include "server/grid/grid.h"
#include "model/loras.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

json_t *srv_grid_adapters(http_server *s) {
	json_t *names = json_array();
	struct model_loras *l = srv_loras_of(s->mdl);
	model_loras_entry *all = NULL;
	const int n = l ? model_loras_list(l, &all) : 0;
	for (int i = 0; names && i < n; i++)
		if (all[i].state == MODEL_LORAS_READY) json_array_append_new(names, json_string(all[i].name));
	free(all);
	return names;
}

// ---- the beacon ---------------------------------------------------------------------------------

void srv_residency(srv_conn *c) {
	http_server *s = c->s;
	const int st = atomic_load(&s->state);
	lane_snapshot *sn = calloc(1, sizeof *sn);
	if (!sn) return;
	if (srv_primary_host(s)) lane_host_snapshot(s->mdl->host, sn);
	char host[256] = "", node[300];
	if (gethostname(host, sizeof host - 1)) snprintf(host, sizeof host, "%s", s->host_addr);
	snprintf(node, sizeof node, "%s:%d", host, s->port);
	json_t *models = json_array();
	// a model that is loading, failed or halted is not held: peers stop sending it work at once
	if (models && (st == HTTP_READY || st == HTTP_DRAINING) && srv_has_primary(s))
		json_array_append_new(models, json_pack("{s:s, s:o, s:i, s:i, s:i, s:I, s:i}", "id", s->mdl->model_id, "adapters",
							srv_grid_adapters(s), "window", sn->window_max ? sn->window : s->mdl->max_ctx,
							"lanes_total", (int)s->cfg.lanes.lanes, "lanes_free", sn->lanes_free,
							"kv_free_bytes", (json_int_t)sn->kv_free_bytes, "queue_depth",
							sn->queue_depth + srv_grid_pending(s)));
	// the folder's models loaded now, so a gateway routes a model to the server that holds it
	srv_model *v[SRV_MODELS_MAX];
	const int n = models && st == HTTP_READY ? srv_models_each(s, true, v, SRV_MODELS_MAX) : 0;
	lane_snapshot *other = n ? calloc(1, sizeof *other) : NULL;
	for (int i = 0; other && i < n; i++) {
		if (v[i] == s->mdl) continue;
		lane_host_snapshot(v[i]->host, other);
		json_array_append_new(models, json_pack("{s:s, s:[], s:i, s:i, s:i, s:I, s:i}", "id", v[i]->model_id, "adapters", "window",
							other->window_max ? other->window : v[i]->max_ctx, "lanes_total",
							(int)v[i]->lanes.lanes, "lanes_free", other->lanes_free, "kv_free_bytes",
							(json_int_t)other->kv_free_bytes, "queue_depth", other->queue_depth));
	}
	free(other);
	srv_models_put(s, v, n);
	json_t *body = json_pack("{s:s, s:I, s:I, s:o, s:b}", "node", node, "sequence", (json_int_t)sn->sequence, "clock_us",
				 (json_int_t)sn->clock_us, "models", models ? models : json_array(), "draining",
				 st == HTTP_DRAINING || st == HTTP_HALTED);
	free(sn);
	srv_reply_json(c, 200, body, 0);
}

// ---- leases ---------------------------------------------------------------------------------------

typedef struct {
	const char *model;
	json_t *want, *spike, *ttl;
} lease_req;

static const srv_field lease_fields[] = {
	SRV_ROW(lease_req, model, SRV_K_STR),
	{"want_concurrency", SRV_K_JSON, .off = offsetof(lease_req, want)},
	{"spike_bytes", SRV_K_JSON, .off = offsetof(lease_req, spike)},
	{"ttl_ms", SRV_K_JSON, .off = offsetof(lease_req, ttl)},
	{0},
};

// An integer field in lo..hi (dflt when absent).
static int int_field(json_t *v, const char *name, json_int_t lo, json_int_t hi, json_int_t dflt, json_int_t *out, srv_err *e) {
	*out = dflt;
	if (!v) return 0;
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s must be an integer in %lld..%lld", name, (long long)lo, (long long)hi);
	*out = json_integer_value(v);
	return 0;
}

static uint64_t unix_ms(void) {
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

void srv_lease_new(srv_conn *c) {
	http_server *s = c->s;
	srv_err e;
	json_t *body = NULL;
	lease_req r = {0};
	json_int_t want, spike, ttl;
	if (srv_parse_body(c, &body, &e) || srv_fields_known(body, lease_fields, NULL, &e) ||
	    srv_fields_read(body, lease_fields, &r, NULL, NULL, NULL, &e) ||
	    int_field(r.want, "want_concurrency", 1, LANE_SNAP_MAX_LANES, 1, &want, &e) ||
	    int_field(r.spike, "spike_bytes", 0, (json_int_t)1 << 50, 0, &spike, &e) ||
	    int_field(r.ttl, "ttl_ms", 1, (json_int_t)(LANE_LEASE_MAX_TTL_US / 1000), 10000, &ttl, &e)) {
		json_decref(body);
		srv_reply_error(c, &e);
		return;
	}
	int rc = !r.model ? srv_fail(&e, SRV_E_BAD_REQUEST, "model", "model is required: the model the lease is for")
			  : srv_model_lookup(s, r.model, &e);
	json_decref(body);
	if (rc) { srv_reply_error(c, &e); return; }
	if (atomic_load(&s->state) != HTTP_READY) {
		srv_fail(&e, SRV_E_UNAVAILABLE, NULL, "the server is draining: it grants no leases");
		srv_reply_error(c, &e);
		return;
	}
	lane_lease l;
	char err[256];
	rc = lane_lease_new(s->mdl->host, (int32_t)want, (uint64_t)spike, (uint64_t)ttl * 1000, &l, err, sizeof err);
	if (rc == LANES_ECANCELLED) {
		srv_fail(&e, SRV_E_UNAVAILABLE, NULL, "the server is draining: it grants no leases");
		srv_reply_error(c, &e);
		return;
	}
	if (rc == LANES_EBUSY) {
		atomic_fetch_add(&s->leases_refused, 1);
		lane_snapshot *sn = malloc(sizeof *sn);
		if (!sn) return;
		lane_host_snapshot(s->mdl->host, sn);
		json_t *o = json_pack("{s:{s:s, s:s, s:n, s:s}, s:i, s:I, s:i}", "error", "message", err, "type", "conflict_error",
				      "param", "code", "no_capacity", "lanes_free", sn->lanes_free, "kv_free_bytes",
				      (json_int_t)sn->kv_free_bytes, "queue_depth", sn->queue_depth);
		free(sn);
		c->outcome = "refused";
		srv_reply_json(c, 409, o, 0);
		return;
	}
	if (rc) {
		srv_fail(&e, srv_kind_of(rc, SRV_BLAME_STATE), NULL, "%s", err);
		srv_reply_error(c, &e);
		return;
	}
	atomic_fetch_add(&s->leases_granted, 1);
	char id[32];
	srv_lease_name(l.id, id, sizeof id);
	const uint64_t now = base_now_us();
	const uint64_t left_ms = l.expires_us > now ? (l.expires_us - now) / 1000 : 0;
	c->outcome = "granted";
	srv_reply_json(c, 201,
		       json_pack("{s:s, s:i, s:I, s:I, s:I}", "id", id, "granted", l.granted, "expires_at",
				 (json_int_t)(unix_ms() + left_ms), "ttl_ms", (json_int_t)ttl, "kv_bytes",
				 (json_int_t)l.kv_bytes),
		       0);
}

void srv_lease_release(srv_conn *c) {
	http_server *s = c->s;
	const char *name = c->path + strlen("/v1/leases/");
	const uint64_t id = srv_lease_parse(name);
	srv_err e;
	if (!id || lane_lease_release(s->mdl->host, id)) {
		srv_fail(&e, SRV_E_NOT_FOUND, NULL, "no lease '%.64s' is held: it was used, released or it lapsed", name);
		srv_reply_error(c, &e);
		return;
	}
	c->outcome = "released";
	srv_reply_json(c, 200, json_pack("{s:s, s:b}", "id", name, "released", 1), 0);
}

// ---- metrics ------------------------------------------------------------------------------------

// v as a Prometheus label value: backslash, quote and newline escaped.
static void label(srv_buf *b, const char *v) {
	for (; *v; v++) {
		if (*v == '\\' || *v == '"') srv_buf_add(b, "\\", 1);
		if (*v == '\n') srv_buf_adds(b, "\\n");
		else srv_buf_add(b, v, 1);
	}
}

// The gateway's per-model figures of one lane host.
typedef struct {
	const char *name;
	double v[6];
} model_figs;

static void figures(http_server *s, const char *name, const lane_snapshot *sn, bool pending, model_figs *f) {
	int32_t running = 0;
	for (int32_t i = 0; i < sn->n_lanes; i++) running += sn->lanes[i].phase != LANE_IDLE;
	// pages held by requests over those the lanes may use; pages only the prefix cache keeps are free
	const int32_t in_use = sn->kv_pages_used - sn->kv_pages_cached;
	const double kv = sn->kv_pages_limit > 0 && in_use > 0 ? (double)in_use / sn->kv_pages_limit : 0.0;
	// those waiting to overflow (the -m model's) wait here too
	*f = (model_figs){name, {running, sn->queue_depth + (pending ? srv_grid_pending(s) : 0), kv, kv, (double)sn->prefix_query_tokens,
				 (double)sn->prefix_hit_tokens}};
}

void srv_grid_metrics(http_server *s, const lane_snapshot *sn, srv_buf *b) {
	// the gateway API inference extension's model-server protocol, with vLLM's names and
	// meanings: a sample per loaded model, labelled with its name
	static const struct {
		const char *name, *type, *help;
	} rows[] = {
		{"vllm:num_requests_running", "gauge", "Requests holding a lane (prompt or decoding)."},
		{"vllm:num_requests_waiting", "gauge", "Requests waiting for a lane (here or a peer's)."},
		{"vllm:kv_cache_usage_perc", "gauge", "KV-cache usage: 1 is every page in use."},
		{"vllm:gpu_cache_usage_perc", "gauge", "KV-cache usage: 1 is every page in use (vLLM's older name)."},
		{"vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache."},
		{"vllm:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache."},
	};
	srv_model *v[SRV_MODELS_MAX];
	const int n = srv_models_each(s, true, v, SRV_MODELS_MAX);
	model_figs *f = calloc((size_t)n + 1, sizeof *f);
	lane_snapshot *other = f ? calloc(1, sizeof *other) : NULL;
	int k = 0;
	if (f && srv_has_primary(s)) figures(s, s->mdl->model_id, sn, true, &f[k++]);
	for (int i = 0; other && i < n; i++) {
		if (v[i] == s->mdl) continue;
		lane_host_snapshot(v[i]->host, other);
		figures(s, v[i]->model_id, other, false, &f[k++]);
	}
	srv_models_put(s, v, n);
	for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
		char line[512];
		snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n", rows[r].name, rows[r].help, rows[r].name, rows[r].type);
		srv_buf_adds(b, line);
		for (int i = 0; i < k; i++) {
			srv_buf_adds(b, rows[r].name);
			srv_buf_adds(b, "{model_name=\"");
			label(b, f[i].name);
			snprintf(line, sizeof line, "\"} %.*f\n", r == 2 || r == 3 ? 6 : 0, f[i].v[r]);
			srv_buf_adds(b, line);
		}
	}
	free(other);
	free(f);
	char line[512];
	snprintf(line, sizeof line,
		 "# HELP vllm:cache_config_info Information of the KV cache: block_size tokens a page, num_gpu_blocks pages.\n"
		 "# TYPE vllm:cache_config_info gauge\n"
		 "vllm:cache_config_info{block_size=\"%d\",num_gpu_blocks=\"%d\",cache_dtype=\"%s\",enable_prefix_caching=\"%s\"} 1\n",
		 (int)s->cfg.lanes.page_tokens, sn->kv_pages_limit, kv_type_name(s->cfg.lanes.kv_type),
		 s->cfg.lanes.prefix_cache ? "True" : "False");
	srv_buf_adds(b, line);
	// leases this server holds for peers, and those it granted or refused
	snprintf(line, sizeof line,
		 "# HELP lanes_leases_open Capacity leases held for peers.\n# TYPE lanes_leases_open gauge\nlanes_leases_open %d\n"
		 "# HELP lanes_leased_lanes Lanes held for leases (by the leases or their queued requests).\n"
		 "# TYPE lanes_leased_lanes gauge\nlanes_leased_lanes %d\n"
		 "# HELP lanes_leases_total Lease requests by outcome.\n# TYPE lanes_leases_total counter\n"
		 "lanes_leases_total{outcome=\"granted\"} %llu\nlanes_leases_total{outcome=\"refused\"} %llu\n",
		 sn->leases, sn->leased_lanes, (unsigned long long)atomic_load(&s->leases_granted),
		 (unsigned long long)atomic_load(&s->leases_refused));
	srv_buf_adds(b, line);
	srv_grid_peer_metrics(s, b);
}
