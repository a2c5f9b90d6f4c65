// server/ops/control: control reads — /health, /slots, /metrics, /v1/models. They copy the
// lane host's last snapshot on the HTTP thread and never wait for the engine.
#include "server/net/base.h"
#include "server/grid/grid.h"
#include "server/routes.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void srv_metrics_init(http_server *s) {
	static const double lat[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
	static const double step[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
	const int nl = sizeof lat / sizeof lat[0], ns = sizeof step / sizeof step[0];
	srv_hist_init(&s->ttft, "lanes_time_to_first_token_seconds", "Time from a request's arrival to its first token.", lat, nl);
	srv_hist_init(&s->itl, "lanes_inter_token_seconds", "Time between consecutive tokens of one choice.", step, ns);
}

// A lane host histogram (exact: the engine observes every round) in Prometheus form.
static void lane_hist_print(const lane_hist *h, const char *name, const char *help, srv_buf *out) {
	char line[256];
	snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	srv_buf_adds(out, line);
	for (int i = 0; i < LANE_HIST_BUCKETS; i++) {
		if (isinf(lane_hist_bounds[i])) snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->n);
		else snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", name, lane_hist_bounds[i], (unsigned long long)h->count[i]);
		srv_buf_adds(out, line);
	}
	snprintf(line, sizeof line, "%s_sum %.9f\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->n);
	srv_buf_adds(out, line);
}

// ---- control reads ------------------------------------------------------------------------------

static bool loaded(int st) { return st == HTTP_READY || st == HTTP_DRAINING || st == HTTP_HALTED; }

void srv_health(srv_conn *c) {
	http_server *s = c->s;
	int st = atomic_load(&s->state);
	static const char *const bare[] = {[HTTP_LOADING] = "loading", [HTTP_READY] = "ok", [HTTP_FAILED] = "error",
					   [HTTP_DRAINING] = "draining", [HTTP_HALTED] = "draining"};
	json_t *body;
	char err[512];
	if (c->bare) {
		body = json_pack("{s:s}", "status", bare[st]);
	} else if (st == HTTP_LOADING) {
		body = json_pack("{s:s, s:f, s:s}", "status", "loading", "progress", atomic_load(&s->mdl->progress_ppm) / 1e6, "stage",
				 srv_load_stage_name[atomic_load(&s->mdl->load_stage)]);
	} else if (st == HTTP_FAILED) {
		pthread_mutex_lock(&s->mu);
		snprintf(err, sizeof err, "%s", s->mdl->load_err);
		pthread_mutex_unlock(&s->mu);
		body = json_pack("{s:s, s:s}", "status", "error", "message", err);
	} else {
		body = json_pack("{s:s}", "status", st == HTTP_READY ? "ok" : "draining");
	}
	srv_reply_json(c, st == HTTP_READY ? 200 : 503, body, 0);
}

static const char *phase_name[] = {[LANE_IDLE] = "idle", [LANE_FILLING] = "filling", [LANE_LIVE] = "live"};

// The activation width the model runs with (before it is in: the one it will load with).
static const char *activations(http_server *s) {
	const tensor_kernels *ks = srv_primary_host(s) ? model_kernels(s->mdl->m) : tensor_kernels_default();
	return tensor_act_name(tensor_kernels_act(ks));
}

void srv_slots(srv_conn *c) {
	http_server *s = c->s;
	if (!loaded(atomic_load(&s->state))) { srv_health(c); return; }
	lane_snapshot *sn = calloc(1, sizeof *sn);
	if (!sn) return;
	if (srv_primary_host(s)) lane_host_snapshot(s->mdl->host, sn); // none: no lanes of its own
	json_t *lanes = json_array();
	for (int32_t i = 0; lanes && i < sn->n_lanes; i++) {
		const lane_snap_lane *l = &sn->lanes[i];
		json_t *at = json_array();
		for (int32_t j = 0; at && j < l->n_draft_at; j++) json_array_append_new(at, json_real(l->draft_acceptance_at[j]));
		json_array_append_new(lanes, json_pack("{s:i, s:s, s:i, s:i, s:i, s:f, s:o*, s:i}", "id", l->id, "phase",
						       phase_name[l->phase <= LANE_LIVE ? l->phase : 0], "prompt_tokens",
						       l->prompt_tokens, "filled_tokens", l->filled, "generated_tokens",
						       l->generated_tokens, "draft_acceptance", (double)l->draft_acceptance,
						       "draft_acceptance_by_position", at, "draft_k", l->draft_k));
	}
	json_t *body = json_pack("{s:I, s:I, s:i, s:s, s:o}", "sequence", (json_int_t)sn->sequence, "clock_us",
				 (json_int_t)sn->clock_us, "queue_depth", sn->queue_depth, "activations", activations(s), "lanes",
				 lanes);
	// the window (elastic: it follows demand; fixed: null) and the memory the host accounts for
	json_t *win = sn->window_max ? json_pack("{s:i, s:i, s:i, s:i}", "tokens", sn->window, "demand_tokens",
						 sn->window_demand, "floor_tokens", sn->window_floor, "max_tokens",
						 sn->window_max)
				     : json_null();
	json_t *mem = json_pack("{s:I, s:I, s:I, s:I}", "kv_bytes", (json_int_t)sn->kv_bytes, "kv_used_bytes",
				(json_int_t)sn->kv_used_bytes, "kv_reserved_bytes", (json_int_t)sn->kv_reserved_bytes,
				"compute_bytes", (json_int_t)sn->compute_bytes);
	if (body) json_object_set_new(body, "window", win ? win : json_null());
	else json_decref(win);
	if (body && mem) json_object_set_new(body, "memory", mem);
	else json_decref(mem);
	free(sn);
	srv_reply_json(c, 200, body, 0);
}

static void metric(srv_buf *b, const char *name, const char *type, const char *help, uint64_t v) {
	char line[384];
	snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, (unsigned long long)v);
	srv_buf_adds(b, line);
}

void srv_metrics(srv_conn *c) {
	http_server *s = c->s;
	lane_snapshot *sn = calloc(1, sizeof *sn);
	if (!sn) return;
	if (srv_primary_host(s)) lane_host_snapshot(s->mdl->host, sn);
	srv_buf b = {0};
	char line[256];
	srv_buf_adds(&b, "# HELP lanes_requests_total Requests by how they ended (rejected: refused before running).\n"
			 "# TYPE lanes_requests_total counter\n");
	const struct {
		const char *name;
		uint64_t v;
	} outcomes[] = {{"finished", sn->finished},
			{"cancelled", sn->cancelled},
			{"failed", sn->failed},
			{"rejected", sn->rejected + atomic_load(&s->rejected)}};
	for (size_t i = 0; i < sizeof outcomes / sizeof outcomes[0]; i++) {
		snprintf(line, sizeof line, "lanes_requests_total{outcome=\"%s\"} %llu\n", outcomes[i].name,
			 (unsigned long long)outcomes[i].v);
		srv_buf_adds(&b, line);
	}
	int32_t busy = 0;
	for (int32_t i = 0; i < sn->n_lanes; i++) busy += sn->lanes[i].phase != LANE_IDLE;
	metric(&b, "lanes_prompt_tokens_total", "counter", "Prompt tokens processed.", sn->prompt_tokens);
	metric(&b, "lanes_generated_tokens_total", "counter", "Tokens generated.", sn->generated_tokens);
	metric(&b, "lanes_queue_depth", "gauge", "Requests waiting for a lane.", (uint64_t)sn->queue_depth);
	metric(&b, "lanes_lanes_busy", "gauge", "Lanes holding a request.", (uint64_t)busy);
	metric(&b, "lanes_kv_pages_used", "gauge", "KV cache pages in use.", (uint64_t)sn->kv_pages_used);
	metric(&b, "lanes_kv_pages_free", "gauge", "KV cache pages free.", (uint64_t)sn->kv_pages_free);
	if (sn->kv_local_page_bytes) { // a sliding-window model: its local layers keep only their window
		metric(&b, "lanes_kv_local_pages_held", "gauge", "KV pages whose sliding-window layers' rows are in memory.",
		       (uint64_t)sn->kv_local_held);
		metric(&b, "lanes_kv_local_pages_freed_total", "counter", "Times a KV page's sliding-window layers' rows were freed.",
		       sn->kv_local_freed);
	}
	metric(&b, "lanes_prefix_cache_hit_tokens_total", "counter", "Prompt tokens taken from the prefix cache.",
	       sn->prefix_hit_tokens);
	if (s->cfg.lanes.cache_dir) {
		const kv_disk_stats *d = &sn->prefix_disk;
		char dl[512];
		snprintf(dl, sizeof dl,
			 "# HELP lanes_prefix_cache_disk_pages_total The prefix cache's page files (--cache-dir): read back, written, "
			 "refused as damaged or foreign, deleted for room, failed writes.\n"
			 "# TYPE lanes_prefix_cache_disk_pages_total counter\n"
			 "lanes_prefix_cache_disk_pages_total{op=\"read\"} %llu\nlanes_prefix_cache_disk_pages_total{op=\"written\"} %llu\n"
			 "lanes_prefix_cache_disk_pages_total{op=\"refused\"} %llu\nlanes_prefix_cache_disk_pages_total{op=\"dropped\"} %llu\n"
			 "lanes_prefix_cache_disk_pages_total{op=\"failed\"} %llu\n",
			 (unsigned long long)d->read, (unsigned long long)d->written, (unsigned long long)d->refused,
			 (unsigned long long)d->dropped, (unsigned long long)d->failed);
		srv_buf_adds(&b, dl);
	}
	if (sn->window_max) {
		metric(&b, "lanes_window_tokens", "gauge", "Tokens a request may use now (the elastic window).",
		       (uint64_t)sn->window);
		metric(&b, "lanes_window_demand_tokens", "gauge", "95th percentile of recent requests' sizes.",
		       (uint64_t)sn->window_demand);
		metric(&b, "lanes_window_max_tokens", "gauge", "The largest window the memory budget allows.",
		       (uint64_t)sn->window_max);
	}
	srv_buf_adds(&b, "# HELP lanes_memory_bytes Memory the server accounts for, by part.\n"
			 "# TYPE lanes_memory_bytes gauge\n");
	const struct {
		const char *part;
		uint64_t v;
	} parts[] = {{"kv", sn->kv_bytes}, {"kv_used", sn->kv_used_bytes}, {"kv_reserved", sn->kv_reserved_bytes},
		     {"compute", sn->compute_bytes}};
	for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
		snprintf(line, sizeof line, "lanes_memory_bytes{part=\"%s\"} %llu\n", parts[i].part,
			 (unsigned long long)parts[i].v);
		srv_buf_adds(&b, line);
	}
	static const char *prop[LANE_PROP_COUNT] = {[LANE_PROP_NGRAM] = "ngram", [LANE_PROP_MODEL] = "model", [LANE_PROP_MTP] = "mtp"};
	srv_buf_adds(&b, "# HELP lanes_draft_tokens_total Draft tokens proposed for verification.\n"
			 "# TYPE lanes_draft_tokens_total counter\n");
	for (int p = 0; p < LANE_PROP_COUNT; p++) {
		snprintf(line, sizeof line, "lanes_draft_tokens_total{proposer=\"%s\"} %llu\n", prop[p],
			 (unsigned long long)sn->draft_tokens[p]);
		srv_buf_adds(&b, line);
	}
	srv_buf_adds(&b, "# HELP lanes_draft_accepted_tokens_total Draft tokens the model confirmed.\n"
			 "# TYPE lanes_draft_accepted_tokens_total counter\n");
	for (int p = 0; p < LANE_PROP_COUNT; p++) {
		snprintf(line, sizeof line, "lanes_draft_accepted_tokens_total{proposer=\"%s\"} %llu\n", prop[p],
			 (unsigned long long)sn->draft_accepted[p]);
		srv_buf_adds(&b, line);
	}
	// by place in the proposal (1: the first draft), where drafts reached it
	static const char *const at_names[2][2] = {{"lanes_draft_position_tokens_total", "Draft tokens proposed, by their place in the proposal."},
						   {"lanes_draft_position_accepted_total", "Draft tokens confirmed, by their place in the proposal."}};
	for (int k = 0; k < 2; k++) {
		snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s counter\n", at_names[k][0], at_names[k][1], at_names[k][0]);
		srv_buf_adds(&b, line);
		for (int p = 0; p < LANE_PROP_COUNT; p++)
			for (int j = 0; j < LANE_MAX_DRAFT && sn->draft_at[p][j]; j++) {
				snprintf(line, sizeof line, "%s{proposer=\"%s\",position=\"%d\"} %llu\n", at_names[k][0], prop[p], j + 1,
					 (unsigned long long)(k ? sn->draft_accepted_at[p][j] : sn->draft_at[p][j]));
				srv_buf_adds(&b, line);
			}
	}
	srv_buf_adds(&b, "# HELP lanes_draft_replayed_tokens_total Accepted draft tokens fed again after a recurrent state "
			 "rewound past them.\n# TYPE lanes_draft_replayed_tokens_total counter\n");
	snprintf(line, sizeof line, "lanes_draft_replayed_tokens_total %llu\n", (unsigned long long)sn->draft_replayed);
	srv_buf_adds(&b, line);
	// the one wait: what suspended requests wait for, and every park matched by its wake
	static const char *const waits[][3] = {
		{"lanes_http_parked", "gauge", "Requests suspended now, by what they wait for."},
		{"lanes_http_parks_total", "counter", "Suspensions of requests, by what they waited for."},
		{"lanes_http_wakes_total", "counter", "Resumptions of requests, by the wait that ended."},
	};
	for (int i = 0; i < 3; i++) {
		snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n", waits[i][0], waits[i][2], waits[i][0], waits[i][1]);
		srv_buf_adds(&b, line);
		for (int k = SRV_WAIT_WORK; k < SRV_WAIT__COUNT; k++) {
			const uint64_t v = i == 0 ? (uint64_t)atomic_load(&s->parked[k]) : i == 1 ? atomic_load(&s->parks[k]) : atomic_load(&s->wakes[k]);
			snprintf(line, sizeof line, "%s{wait=\"%s\"} %llu\n", waits[i][0], srv_wait_name[k], (unsigned long long)v);
			srv_buf_adds(&b, line);
		}
	}
	srv_adapters_metrics(s, sn, &b);
	srv_learning_metrics(s, &b);
	lane_hist_print(&sn->round_seconds, "lanes_round_seconds", "Duration of engine rounds.", &b);
	lane_hist_print(&sn->forward_seconds, "lanes_forward_seconds", "Duration of forward passes.", &b);
	srv_hist_print(&s->ttft, &b);
	srv_hist_print(&s->itl, &b);
	srv_metrics_experts(s, &b);
	if (loaded(atomic_load(&s->state))) srv_grid_metrics(s, sn, &b);
	free(sn);
	if (b.oom || !b.p) {
		srv_buf_free(&b);
		return;
	}
	srv_reply_text(c, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.len);
	srv_buf_free(&b);
}

static json_t *model_object(srv_model *M) {
	http_server *s = M->s;
	json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", M->model_id, "object", "model", "created", (json_int_t)0,
			      "owned_by", "lanes", "activations", activations(s));
	srv_model_facts f;
	srv_models_facts(M, &f); // read under the models' lock: a model may unload meanwhile
	if (m && f.in) json_object_set_new(m, "context_length", json_integer(f.max_ctx));
	if (m && s->n_models > 1) {
		// what a picker shows beside the name: the family and the file's size, before it loads too
		json_object_set_new(m, "status", srv_model_status(M));
		if (f.family[0]) json_object_set_new(m, "family", json_string(f.family));
		if (f.size >= 0) json_object_set_new(m, "size_bytes", json_integer((json_int_t)f.size));
	}
	return m;
}

// The base model, then each adapter with its parent (the base) and root (its file), as vLLM
// lists them; then --models-dir's models, each with its status as llama-server's router says it.
void srv_models(srv_conn *c) {
	http_server *s = c->s;
	srv_models_refresh(s); // what was put in the folder, or taken out, since
	json_t *data = json_array();
	if (data && srv_has_primary(s)) json_array_append_new(data, model_object(s->mdl));
	if (data) srv_adapters_models(s, data, NULL);
	for (int i = 1; data && i < s->n_models; i++)
		if (!atomic_load(&s->models[i]->gone)) json_array_append_new(data, model_object(s->models[i]));
	srv_reply_json(c, 200, data ? json_pack("{s:s, s:o}", "object", "list", "data", data) : NULL, 0);
}

// What this server is: the build (as `lanes --version`), the kernel set and the model.
void srv_props(srv_conn *c) {
	const http_server *s = c->s;
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:s}", "version", base_version_string(), "build_flags",
			      base_build_flags(), "kernels", tensor_kernels_name(tensor_kernels_default()), "activations",
			      activations((http_server *)s), "model", s->mdl->model_id,
			      "model_path", s->mdl->model_path ? s->mdl->model_path : "", "total_slots", (int)s->cfg.lanes.lanes, "build_info", base_version_string());
	// the fields llama-server's web UIs read, once the model is in
	const int st = atomic_load(&((http_server *)s)->state);
	if (o && st != HTTP_LOADING && st != HTTP_FAILED && srv_has_primary(s)) {
		json_object_set_new(o, "chat_template", json_string(s->mdl->chat.src ? s->mdl->chat.src : ""));
		// which template that is: "the model's", "--chat-template", or the fallback ("ChatML", "plain text")
		json_object_set_new(o, "chat_template_origin", json_string(s->mdl->chat.origin));
		json_object_set_new(o, "default_generation_settings", json_pack("{s:i}", "n_ctx", s->mdl->max_ctx));
		json_object_set_new(o, "modalities", json_pack("{s:b, s:b}", "vision", 0, "audio", 0));
	}
	srv_reply_json(c, 200, o, 0);
}

void srv_model_one(srv_conn *c) {
	srv_err e;
	const char *id = c->path + strlen("/v1/models/");
	if (srv_model_lookup(c->s, id, &e)) { srv_reply_error(c, &e); return; }
	srv_model *M = srv_models_find(c->s, id);
	if (M) { srv_reply_json(c, 200, model_object(M), 0); return; }
	json_t *data = json_array();
	if (data) srv_adapters_models(c->s, data, id);
	json_t *one = json_array_get(data, 0);
	json_incref(one);
	json_decref(data);
	if (!one) { // unloaded since the lookup
		srv_model_lookup(c->s, id, &e);
		srv_reply_error(c, &e);
		return;
	}
	srv_reply_json(c, 200, one, 0);
}
