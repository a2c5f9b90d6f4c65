// server/server: the daemon — the route table and what every request passes before its
// route runs (its key, its size, the server's state), the access log, the background model
// load, the drain/halt states, and the order things start and stop in. net/ carries the bytes.
#include "model/loras.h"
#include "server/api/store.h"
#include "learn/live.h"
#include "server/gen/gen.h"
#include "server/grid/grid.h"
#include "server/net/guard.h"
#include "server/routes.h"
#include "server/net/http.h"
#include "server/net/sock.h"
#include "server/net/work.h"
#include "chat/chat.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <unistd.h>

void http_config_default(http_config *c) {
	memset(c, 0, sizeof *c);
	c->host = HTTP_DEFAULT_HOST;
	c->port = HTTP_DEFAULT_PORT;
	c->max_body = HTTP_DEFAULT_MAX_BODY;
	c->responses_store = HTTP_DEFAULT_RESPONSES_STORE;
	c->max_connections = 0;
	c->max_per_ip = HTTP_DEFAULT_MAX_PER_IP;
	c->header_timeout_s = HTTP_DEFAULT_HEADER_TIMEOUT_S;
	c->idle_timeout_s = HTTP_DEFAULT_IDLE_TIMEOUT_S;
	c->http_threads = HTTP_DEFAULT_THREADS;
	c->max_output_bytes = HTTP_DEFAULT_MAX_OUTPUT_BYTES;
	c->max_tokenize_bytes = HTTP_DEFAULT_MAX_TOKENIZE_BYTES;
	c->stream_flush_us = HTTP_DEFAULT_STREAM_FLUSH_MS * 1000;
	c->peer_poll_ms = HTTP_DEFAULT_PEER_POLL_MS;
	c->peer_timeout_ms = HTTP_DEFAULT_PEER_TIMEOUT_MS;
	c->max_lora = HTTP_DEFAULT_MAX_LORA;
	c->learn_share = HTTP_DEFAULT_LEARN_SHARE;
	c->keep_alive_s = HTTP_DEFAULT_KEEP_ALIVE_S;
	c->max_models = HTTP_DEFAULT_MAX_MODELS;
	c->cache.stall_s = 30;
	c->cache.max_bytes = (int64_t)1 << 40;
	lane_config_default(&c->lanes);
	lane_request q;
	lane_request_init(&q);
	c->sampling = q.sampling;
}

// The samplers' settings, as http_setting_name names them (sampling.FIELD).
static const struct {
	enum lane_field f;
	const char *name;
} sampling_settings[] = {
	{LANE_F_DRY_MULTIPLIER, "sampling.dry_multiplier"}, {LANE_F_DRY_BASE, "sampling.dry_base"},
	{LANE_F_DRY_ALLOWED_LENGTH, "sampling.dry_allowed_length"}, {LANE_F_DRY_PENALTY_LAST_N, "sampling.dry_penalty_last_n"},
	{LANE_F_DRY_SEQUENCE_BREAKERS, "sampling.dry_breakers"}, {LANE_F_XTC_PROBABILITY, "sampling.xtc_probability"},
	{LANE_F_XTC_THRESHOLD, "sampling.xtc_threshold"}, {LANE_F_TOP_N_SIGMA, "sampling.top_n_sigma"},
	{LANE_F_DYNATEMP_RANGE, "sampling.dynatemp_range"}, {LANE_F_DYNATEMP_EXPONENT, "sampling.dynatemp_exponent"},
	{LANE_F_MIROSTAT, "sampling.mirostat"}, {LANE_F_MIROSTAT_TAU, "sampling.mirostat_tau"},
	{LANE_F_MIROSTAT_ETA, "sampling.mirostat_eta"}, {LANE_F_SAMPLERS, "sampling.samplers"},
};

// cfg's sampling against the request contract, its fields named as settings.
static int sampling_check(const http_config *cfg, char *err, size_t errlen) {
	lane_api api = {0};
	for (size_t i = 0; i < sizeof sampling_settings / sizeof sampling_settings[0]; i++)
		api.name[sampling_settings[i].f] = http_setting_name(cfg, sampling_settings[i].name);
	lane_request q;
	lane_request_init(&q);
	q.sampling = cfg->sampling;
	return lane_check_params(&q, &api, INT32_MAX, err, errlen, NULL);
}

// ---- routes ---------------------------------------------------------------------------------


static const srv_route routes[] = {
	{"GET", "/health", 0, SRV_OPENAI, srv_health},
	{"GET", "/slots", 0, SRV_OPENAI, srv_slots},
	// slot files are written and read on the utilities' work thread, the KV taken at a round boundary
	{"POST", "/slots/", SRV_R_AUTH | SRV_R_PREFIX | SRV_R_MUTATE | SRV_R_WORK | SRV_R_UTIL, SRV_OPENAI, srv_slot_action},
	{"GET", "/metrics", 0, SRV_OPENAI, srv_metrics},
	{"GET", "/v1/models", 0, SRV_OPENAI, srv_models},
	{"GET", "/props", 0, SRV_OPENAI, srv_props},
	{"GET", "/v1/models/", SRV_R_PREFIX, SRV_OPENAI, srv_model_one},
	{"GET", "/v1/experts", 0, SRV_OPENAI, srv_experts},
	{"GET", "/v1/experts.svg", 0, SRV_OPENAI, srv_experts_svg},
	{"POST", "/v1/chat/completions", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK | SRV_R_GEN, SRV_OPENAI, srv_chat_completions},
	{"POST", "/v1/completions", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK | SRV_R_GEN, SRV_OPENAI, srv_completions},
	{"POST", "/v1/messages", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK | SRV_R_GEN, SRV_ANTHROPIC, srv_messages},
	{"POST", "/v1/messages/count_tokens", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK, SRV_ANTHROPIC, srv_count_tokens},
	{"POST", "/v1/responses", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK | SRV_R_GEN, SRV_RESPONSES, srv_responses},
	// the kept responses: read and deleted under the key, as the responses themselves were made
	{"GET", "/v1/responses/", SRV_R_AUTH | SRV_R_PREFIX, SRV_RESPONSES, srv_responses_get},
	{"DELETE", "/v1/responses/", SRV_R_AUTH | SRV_R_PREFIX, SRV_RESPONSES, srv_responses_delete},
	{"POST", "/infill", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK | SRV_R_GEN, SRV_LLAMA, srv_infill},
	{"POST", "/v1/embeddings", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK, SRV_OPENAI, srv_embeddings},
	{"POST", "/v1/rerank", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK, SRV_OPENAI, srv_rerank},
	{"POST", "/rerank", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK, SRV_OPENAI, srv_rerank},
	{"POST", "/v1/score", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK, SRV_OPENAI, srv_score},
	{"POST", "/score", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK, SRV_OPENAI, srv_score},
	{"POST", "/tokenize", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK | SRV_R_UTIL, SRV_OPENAI, srv_tokenize},
	{"GET", "/api/version", 0, SRV_OLLAMA, srv_ollama_version},
	{"GET", "/api/tags", SRV_R_AUTH, SRV_OLLAMA, srv_ollama_tags},
	{"GET", "/api/ps", SRV_R_AUTH | SRV_R_MODEL, SRV_OLLAMA, srv_ollama_ps},
	{"POST", "/api/show", SRV_R_AUTH | SRV_R_MODEL | SRV_R_DESCRIBE | SRV_R_WORK | SRV_R_UTIL, SRV_OLLAMA, srv_ollama_show},
	{"POST", "/api/generate", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK | SRV_R_GEN, SRV_OLLAMA, srv_ollama_generate},
	{"POST", "/api/chat", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK | SRV_R_GEN, SRV_OLLAMA, srv_ollama_chat},
	{"POST", "/api/embed", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK, SRV_OLLAMA, srv_ollama_embed},
	{"POST", "/api/embeddings", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK, SRV_OLLAMA, srv_ollama_embeddings},
	// the model cache `lanes pull` writes to: a pull runs on a thread of its own, a copy may copy bytes
	{"POST", "/api/pull", SRV_R_AUTH | SRV_R_MUTATE, SRV_OLLAMA, srv_ollama_pull},
	{"POST", "/api/copy", SRV_R_AUTH | SRV_R_MUTATE | SRV_R_WORK | SRV_R_UTIL, SRV_OLLAMA, srv_ollama_copy},
	{"DELETE", "/api/delete", SRV_R_AUTH | SRV_R_MUTATE, SRV_OLLAMA, srv_ollama_delete},
	{"POST", "/detokenize", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK | SRV_R_UTIL, SRV_OPENAI, srv_detokenize},
	// the grid: what this server holds, and capacity held for peers (docs/deploy.md)
	{"GET", "/v1/residency", 0, SRV_OPENAI, srv_residency},
	{"POST", "/v1/leases", SRV_R_AUTH | SRV_R_MODEL, SRV_OPENAI, srv_lease_new},
	{"DELETE", "/v1/leases/", SRV_R_AUTH | SRV_R_MODEL | SRV_R_PREFIX, SRV_OPENAI, srv_lease_release},
	{"GET", "/v1/adapters", 0, SRV_OPENAI, srv_adapters_list},
	{"POST", "/v1/adapters", SRV_R_AUTH | SRV_R_MODEL | SRV_R_MUTATE | SRV_R_BASE, SRV_OPENAI, srv_adapters_load},
	{"DELETE", "/v1/adapters/", SRV_R_AUTH | SRV_R_MODEL | SRV_R_PREFIX | SRV_R_MUTATE, SRV_OPENAI, srv_adapters_unload},
	{"POST", "/v1/adapters/", SRV_R_AUTH | SRV_R_MODEL | SRV_R_PREFIX | SRV_R_MUTATE, SRV_OPENAI, srv_adapters_save},
	// learning while serving: the ledger is read off the engine's last publication
	{"GET", "/learn/grants", 0, SRV_OPENAI, srv_learn_grants},
	{"POST", "/learn/grants", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK | SRV_R_MUTATE | SRV_R_UTIL, SRV_OPENAI, srv_learn_grant_new},
	{"DELETE", "/learn/grants/", SRV_R_AUTH | SRV_R_MODEL | SRV_R_PREFIX | SRV_R_MUTATE, SRV_OPENAI, srv_learn_grant_revoke},
	{"POST", "/learn/examples", SRV_R_AUTH | SRV_R_MODEL | SRV_R_WORK | SRV_R_MUTATE | SRV_R_UTIL, SRV_OPENAI, srv_learn_examples},
	// the web page: its files are open, the APIs it calls need the key (the page asks for it)
	{"GET", "/", 0, SRV_OPENAI, srv_webui},
	{"GET", "/ui/app.js", 0, SRV_OPENAI, srv_webui},
	{"GET", "/ui/app.css", 0, SRV_OPENAI, srv_webui},
	{"GET", "/ui/favicon.svg", 0, SRV_OPENAI, srv_webui},
	{"GET", "/favicon.ico", 0, SRV_OPENAI, srv_webui},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])

// url's first n bytes against the route's path (n drops one trailing slash: /v1/models/ is /v1/models).
static bool path_matches(const srv_route *r, const char *url, size_t n) {
	const size_t len = strlen(r->path);
	if (r->flags & SRV_R_PREFIX) return n > len && !strncmp(url, r->path, len);
	return n == len && !strncmp(url, r->path, n);
}

// OPTIONS on any known path: the CORS preflight, or the path's Allow list.
static const srv_route preflight_route = {"OPTIONS", "", 0, SRV_OPENAI, srv_preflight};

// The route for (method, url); allow gets the path's methods ("" for an unknown path). HEAD
// is answered wherever GET is (libmicrohttpd sends the head alone).
static const srv_route *route_find(const char *method, const char *url, char *allow, size_t n) {
	const srv_route *r = NULL;
	size_t k = 0, len = strlen(url);
	if (len > 1 && url[len - 1] == '/') len--;
	const char *want = strcmp(method, "HEAD") ? method : "GET";
	allow[0] = 0;
	for (size_t i = 0; i < N_ROUTES; i++) {
		if (!path_matches(&routes[i], url, len)) continue;
		if (k < n) k += (size_t)snprintf(allow + k, n - k, "%s, %s", routes[i].method, strcmp(routes[i].method, "GET") ? "" : "HEAD, ");
		if (!strcmp(routes[i].method, want)) r = &routes[i];
	}
	if (k && k < n) snprintf(allow + k, n - k, "OPTIONS");
	return r || !k || strcmp(method, "OPTIONS") ? r : &preflight_route;
}

// ---- the request handler ----------------------------------------------------------------------

// Errors that need no body: unknown path, method, key, size, state.
static int early_check(srv_conn *c, const char *url, const char *method, srv_err *e) {
	http_server *s = c->s;
	c->rt = route_find(method, url, c->allow, sizeof c->allow);
	if (c->rt) c->family = c->rt->family, c->gen = c->rt->flags & SRV_R_GEN;
	// an unknown path under an API's prefix is answered in that API's shape
	else c->family = srv_family_of(url, strlen(url));
	if (srv_guard(c, url, method, e)) return -1;
	if (!c->rt) {
		if (c->allow[0]) return srv_fail(e, SRV_E_METHOD, NULL, "method %s is not allowed on %s", method, url);
		return srv_fail(e, SRV_E_NOT_FOUND, NULL, "no such endpoint: %s %s", method, url);
	}
	unsigned fl = c->rt->flags;
	if ((fl & SRV_R_AUTH) && !srv_authorized(c))
		return srv_fail(e, SRV_E_AUTH, NULL,
				c->rt->family == SRV_ANTHROPIC ? "invalid x-api-key" : "invalid API key: send Authorization: Bearer KEY");
	if ((fl & SRV_R_MUTATE) && s->mutations_closed)
		return srv_fail(e, SRV_E_FORBIDDEN, NULL,
				"adapter, learning and model-cache changes are refused on a server open to the network without a key: start it with "
				"%s KEY (or %s)", HTTP_SETTING(&s->cfg, api_key), HTTP_SETTING(&s->cfg, allow_unauth_mutations));
	const char *cl = srv_header(c, "Content-Length");
	if (cl) {
		char *end;
		errno = 0;
		unsigned long long n = strtoull(cl, &end, 10);
		if (!errno && end != cl && n > s->cfg.max_body)
			return srv_fail(e, SRV_E_TOO_LARGE, NULL, "the request body (%llu bytes) is larger than the limit of %zu bytes", n,
					s->cfg.max_body);
	}
	int st = atomic_load(&s->state);
	if ((fl & SRV_R_MODEL) && (st == HTTP_LOADING || st == HTTP_FAILED))
		return srv_fail(e, SRV_E_UNAVAILABLE, NULL, "the model is loading: retry shortly");
	if ((fl & SRV_R_GEN) && s->cfg.embeddings_only)
		return srv_fail(e, SRV_E_BAD_REQUEST, NULL, "this server serves embeddings only (%s): use /v1/embeddings",
				HTTP_SETTING(&s->cfg, embeddings_only));
	// a draining server with peers still takes generation requests, to forward them
	if ((fl & SRV_R_GEN) && st == HTTP_DRAINING && !srv_grid_may_forward(s))
		return srv_fail(e, SRV_E_UNAVAILABLE, NULL, "the server is draining: retry shortly");
	if ((fl & SRV_R_GEN) && st == HTTP_HALTED) {
		pthread_mutex_lock(&s->mu);
		srv_fail(e, SRV_E_UNAVAILABLE, NULL, "%s", s->halt_reason);
		pthread_mutex_unlock(&s->mu);
		return -1;
	}
	return 0;
}

// The body is in: a generation request may go to a peer, the rest runs its route here.
static void on_body(srv_conn *c) {
	// the routes that serve a model pick it by name, an adapter's load by its base; learning and
	// leases are the -m model's, an adapter's unload finds its model
	const unsigned fl = c->rt->flags;
	const bool picks = ((fl & SRV_R_MODEL) && !(fl & SRV_R_MUTATE) && strncmp(c->path, "/v1/leases", 10)) || (fl & SRV_R_BASE);
	const bool unload = c->rt->fn == srv_adapters_unload;
	if ((fl & SRV_R_MODEL) && !picks && !unload && !srv_has_primary(c->s)) {
		srv_err e;
		srv_fail(&e, SRV_E_NOT_FOUND, NULL, "learning, saving adapters and leases need a model given with %s: this server serves models by name alone",
			 HTTP_SETTING(&c->s->cfg, model_path));
		srv_reply_error(c, &e);
		return;
	}
	if (!picks || !srv_models_pick(c)) srv_models_go(c);
}

void srv_models_go(srv_conn *c) {
	if (!c->gen || !srv_grid_route(c, false)) srv_route_run(c);
}

// The request ended: what it holds is freed, and it is logged.
static void on_ended(srv_conn *c, bool whole) {
	if (c->call) {
		if (!whole && !c->call->over) c->outcome = "cancelled";
		srv_call_free(c->call);
	}
	if (c->fwd) {
		if (!whole) c->outcome = "cancelled";
		srv_grid_done(c);
	}
	srv_grid_submitted(c);
	if (c->done) c->done(c);
	srv_models_release(c);
	double ms = (double)(base_now_us() - c->t0_us) / 1000.0;
	const char *why = whole ? "" : " (connection closed early)";
	// a request that ends with nothing sent is logged 499, as nginx logs a client that left
	const int status = c->status ? c->status : 499;
	const char *ign = c->ignored.len ? " ignored=" : "", *names = c->ignored.len ? c->ignored.names : "";
	if (c->via) // forwarded: the peer's own log has the tokens
		LOG_INFO(SRV_MOD, "%s %s %d %s via=%s %.1f ms%s%s%s", c->method, c->path, status, c->outcome ? c->outcome : "", c->via, ms,
			 ign, names, why);
	else if (c->n_prompt || c->n_gen || c->outcome)
		LOG_INFO(SRV_MOD, "%s %s %d %s prompt=%d generated=%d %.1f ms%s%s%s", c->method, c->path, status,
			 c->outcome ? c->outcome : "", c->n_prompt, c->n_gen, ms, ign, names, why);
	else
		LOG_INFO(SRV_MOD, "%s %s %d %.1f ms%s%s%s", c->method, c->path, status, ms, ign, names, why);
}

static const srv_http_hooks hooks = {.head = early_check, .body = on_body, .ended = on_ended};

// ---- loading ----------------------------------------------------------------------------------

// The "try" lines, runnable as printed once the key (shown as "…" and its last 4 characters,
// never whole in a log) is put back; for a model with no chat template of its own, a plain
// completion first (what such a model was trained to write).
static void print_try(const http_server *s) {
	char auth[64] = "";
	if (s->api_key) {
		const size_t n = strlen(s->api_key);
		snprintf(auth, sizeof auth, " -H 'Authorization: Bearer \u2026%s'", n >= 8 ? s->api_key + n - 4 : "");
	}
	const bool own_template = s->mdl->chat.own;
	if (!own_template)
		LOG_INFO(SRV_MOD,
			 "try: curl http://%s:%d/v1/completions -H 'Content-Type: application/json'%s -d "
			 "'{\"prompt\":\"Once upon a time\",\"max_tokens\":64}'",
			 s->host_addr, s->port, auth);
	LOG_INFO(SRV_MOD,
		 "%s: curl http://%s:%d/v1/chat/completions -H 'Content-Type: application/json'%s -d "
		 "'{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],\"max_tokens\":64}'",
		 own_template ? "try" : "or chat", s->host_addr, s->port, auth);
}

const char *const srv_load_stage_name[] = {
	[SRV_LOAD_OPEN] = "opening the model file",      [SRV_LOAD_WEIGHTS] = "reading and repacking weights",
	[SRV_LOAD_VOCAB] = "reading the vocabulary",     [SRV_LOAD_TEMPLATE] = "compiling the chat template",
	[SRV_LOAD_DRAFT] = "loading the draft model",    [SRV_LOAD_ENGINE] = "starting the engine",
	[SRV_LOAD_ADAPTERS] = "loading the LoRA adapters",
};

// Where each stage starts on /health's 0..1 scale (parts per million); the weights take most.
static const int stage_ppm[] = {[SRV_LOAD_OPEN] = 0,           [SRV_LOAD_WEIGHTS] = 20000,
				[SRV_LOAD_VOCAB] = 800000,     [SRV_LOAD_TEMPLATE] = 830000,
				[SRV_LOAD_DRAFT] = 850000,     [SRV_LOAD_ENGINE] = 900000,
				[SRV_LOAD_ADAPTERS] = 950000};

static void load_stage(http_server *s, enum srv_load_stage st) {
	atomic_store(&s->mdl->load_stage, st);
	atomic_store(&s->mdl->progress_ppm, stage_ppm[st]);
}

// model_load_progress's reports: the weights stage's share of the scale, passed on to cfg's hook.
static void on_weights(void *ud, uint64_t done, uint64_t total) {
	http_server *s = ud;
	if (atomic_load(&s->mdl->load_stage) == SRV_LOAD_OPEN) atomic_store(&s->mdl->load_stage, SRV_LOAD_WEIGHTS); // the file is open
	const enum srv_load_stage st = atomic_load(&s->mdl->load_stage);
	const int lo = stage_ppm[st], hi = stage_ppm[st + 1];
	atomic_store(&s->mdl->progress_ppm, lo + (int)(total ? (double)(hi - lo) * (double)done / (double)total : 0));
	if (s->cfg.load_progress && st == SRV_LOAD_WEIGHTS) s->cfg.load_progress(s->cfg.load_progress_ud, done, total);
}

static void *loader(void *arg) {
	http_server *s = arg;
	srv_model *M = s->mdl;
	char err[512];
	uint64_t t0 = base_now_us();
	atomic_store(&M->progress_ppm, 1000);
	int rc = model_load_head(&M->m, M->model_path, s->cfg.draft_head, on_weights, s, err, sizeof err);
	if (!rc) {
		load_stage(s, SRV_LOAD_VOCAB);
		rc = srv_model_setup(M, load_stage, err, sizeof err);
	}
	if (!rc && s->cfg.draft_model) {
		load_stage(s, SRV_LOAD_DRAFT);
		rc = model_load_progress(&M->draft, s->cfg.draft_model, on_weights, s, err, sizeof err);
		if (!rc) model_set_context(M->draft, lane_config_max_context(&M->lanes, model_hparams_of(M->draft)));
		M->lanes.draft_model = M->draft;
	}
	if (!rc) {
		load_stage(s, SRV_LOAD_ENGINE);
		rc = srv_learning_start(s, err, sizeof err);
		if (!rc) rc = lane_host_new(&M->host, M->m, M->vocab, &M->lanes, err, sizeof err);
	}
	if (!rc) {
		load_stage(s, SRV_LOAD_ADAPTERS);
		rc = srv_adapters_start(s, err, sizeof err);
	}
	if (!rc && s->mdl->learn) learn_live_attach(s->mdl->learn, s->mdl->host, s->mdl->loras);
	if (!rc) s->mdl->max_ctx = lane_host_max_context(s->mdl->host);
	pthread_mutex_lock(&s->mu);
	if (rc) {
		snprintf(s->mdl->load_err, sizeof s->mdl->load_err, "%s", err);
		atomic_store(&s->state, HTTP_FAILED);
	} else {
		atomic_store(&s->mdl->progress_ppm, 1000000);
		atomic_store(&M->mstate, SRV_M_READY);
		int want = HTTP_LOADING;
		atomic_compare_exchange_strong(&s->state, &want, HTTP_READY);
	}
	pthread_mutex_unlock(&s->mu);
	if (rc) {
		LOG_ERROR(SRV_MOD, "cannot load %s: %s", s->mdl->model_path, err);
		return NULL;
	}
	LOG_INFO(SRV_MOD, "model %s ready in %.1f s: up to %d tokens per request%s", s->mdl->model_id,
		 (double)(base_now_us() - t0) / 1e6, s->mdl->max_ctx, model_compact(s->mdl->m) ? "; IQ weights compact, as in the file" : "");
	print_try(s);
	return NULL;
}

// ---- lifecycle --------------------------------------------------------------------------------

// The adapters' folder, made when missing; without it HTTP loads and saves are refused.
static void open_adapters_dir(http_server *s) {
	char err[512];
	if (!s->adapters_path) return;
	if (base_dir_open(s->adapters_path, true, &s->adapters_dfd, err, sizeof err)) {
		LOG_WARN(SRV_MOD, "adapters over HTTP are off: %s", err);
		return;
	}
	const int swept = base_dir_sweep(s->adapters_dfd);
	if (swept) LOG_INFO(SRV_MOD, "removed %d unfinished save%s from %s", swept, swept == 1 ? "" : "s", s->adapters_path);
}

static char *dup_or_null(const char *p) { return p && *p ? strdup(p) : NULL; }

#define FD_RESERVE 256 // descriptors beside the connections: files, the listener, the pool's own

// The connection limit against the open-file limit (raised to its hard limit when that
// helps): 0 becomes what fits, up to 16384; an explicit limit that cannot fit is an error.
static int fit_connections(http_config *cfg, int n_slots, char *err, size_t errlen) {
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl)) rl.rlim_cur = rl.rlim_max = 1024;
	const rlim_t want = (rlim_t)(cfg->max_connections ? cfg->max_connections : 16384) + (rlim_t)n_slots + FD_RESERVE;
	if (rl.rlim_cur < want && rl.rlim_cur < rl.rlim_max) {
		struct rlimit up = {want < rl.rlim_max ? want : rl.rlim_max, rl.rlim_max};
		if (!setrlimit(RLIMIT_NOFILE, &up)) rl.rlim_cur = up.rlim_cur;
	}
	const long room = (long)rl.rlim_cur - n_slots - FD_RESERVE;
	if (cfg->max_connections == 0) {
		cfg->max_connections = room < 16 ? 16 : room > 16384 ? 16384 : (int)room;
		return 0;
	}
	if (cfg->max_connections > room)
		return base_seterr(err, errlen, LANES_EINVAL,
				   "%s %d needs %d open files, and the limit is %llu (ulimit -n)", HTTP_SETTING(cfg, max_connections),
				   cfg->max_connections, cfg->max_connections + n_slots + FD_RESERVE, (unsigned long long)rl.rlim_cur);
	return 0;
}

_Static_assert(BASE_RANGE_HI(HTTP_RANGE_MAX_LORA) == MODEL_LORAS_MAX, "the adapters' ceiling is the registry's");

// A number of http_config and the range it must be in.
enum num_kind { NUM_INT, NUM_SIZE, NUM_DOUBLE };
#define NUM(f, k, r) NUM_(f, k, r)
#define NUM_(f, k, lo, hi) {#f, offsetof(http_config, f), k, (lo), (hi)}
static const struct {
	const char *name;
	size_t off;
	enum num_kind kind;
	double lo, hi;
} nums[] = {
	NUM(port, NUM_INT, HTTP_RANGE_PORT),
	NUM(max_body, NUM_SIZE, HTTP_RANGE_MAX_BODY),
	NUM(max_connections, NUM_INT, HTTP_RANGE_MAX_CONNECTIONS),
	NUM(responses_store, NUM_INT, HTTP_RANGE_RESPONSES_STORE),
	NUM(max_per_ip, NUM_INT, HTTP_RANGE_MAX_PER_IP),
	NUM(header_timeout_s, NUM_DOUBLE, HTTP_RANGE_HEADER_TIMEOUT_S),
	NUM(idle_timeout_s, NUM_INT, HTTP_RANGE_IDLE_TIMEOUT_S),
	NUM(http_threads, NUM_INT, HTTP_RANGE_THREADS),
	NUM(max_output_bytes, NUM_SIZE, HTTP_RANGE_MAX_OUTPUT_BYTES),
	NUM(max_tokenize_bytes, NUM_SIZE, HTTP_RANGE_MAX_TOKENIZE_BYTES),
	NUM(max_lora, NUM_INT, HTTP_RANGE_MAX_LORA),
	NUM(learn_share, NUM_DOUBLE, HTTP_RANGE_LEARN_SHARE),
	NUM(max_models, NUM_INT, HTTP_RANGE_MAX_MODELS),
};

const char *http_setting_name(const http_config *cfg, const char *field) {
	const char *n = cfg->setting_name ? cfg->setting_name(field) : NULL;
	return n ? n : field;
}

int http_config_check(const http_config *cfg, char *err, size_t errlen) {
	const bool primary = cfg->model_path && *cfg->model_path;
	if (!primary && !cfg->n_models_dirs && !cfg->n_aliases)
		return base_seterr(err, errlen, LANES_EINVAL, "no model: give %s or %s", HTTP_SETTING(cfg, model_path), HTTP_SETTING(cfg, models_dirs));
	// what belongs to the -m model has nothing to belong to without one
	const char *needs = cfg->n_loras ? HTTP_SETTING(cfg, loras) : cfg->draft_model ? HTTP_SETTING(cfg, draft_model)
			  : cfg->draft_head ? HTTP_SETTING(cfg, draft_head)
			  : cfg->n_peers ? HTTP_SETTING(cfg, peers) : NULL;
	if (!primary && needs)
		return base_seterr(err, errlen, LANES_EINVAL, "%s needs a model given with %s: the models served by name run without them", needs,
				   HTTP_SETTING(cfg, model_path));
	for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
		const void *p = (const char *)cfg + nums[i].off;
		double v;
		if (nums[i].kind == NUM_INT) v = *(const int *)p;
		else if (nums[i].kind == NUM_SIZE) v = (double)*(const size_t *)p;
		else v = *(const double *)p;
		if (!(v >= nums[i].lo && v <= nums[i].hi))
			return base_seterr(err, errlen, LANES_EINVAL, "%s must be %.15g..%.15g, not %.15g", http_setting_name(cfg, nums[i].name),
					   nums[i].lo, nums[i].hi, v);
	}
	if (lane_config_check(&cfg->lanes, err, errlen) || srv_guard_config_check(cfg, err, errlen) || sampling_check(cfg, err, errlen))
		return LANES_EINVAL;
	return 0;
}

int http_server_new(http_server **out, const http_config *cfg, char *err, size_t errlen) {
	*out = NULL;
	if (http_config_check(cfg, err, errlen)) return LANES_EINVAL;
	const bool reason_auto = !cfg->reasoning_format || !strcmp(cfg->reasoning_format, "auto");
	const reason_format *reason_named = NULL;
	if (!reason_auto && reason_format_named(cfg->reasoning_format, &reason_named))
		return base_seterr(err, errlen, LANES_EINVAL, "%s must be auto, none or one of %s, got '%s'",
				   HTTP_SETTING(cfg, reasoning_format), reason_format_names(), cfg->reasoning_format);
	http_server *s = calloc(1, sizeof *s);
	if (!s) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	s->cfg = *cfg;
	s->cfg.reasoning_format = NULL; // resolved: the caller's string is not kept
	s->reason_auto = reason_auto;
	s->reason_named = reason_named;
	if (getrandom(s->think_key, sizeof s->think_key, 0) != (ssize_t)sizeof s->think_key) {
		free(s);
		return base_seterr(err, errlen, LANES_EIO, "no random bytes for the thinking signatures' key: %s", strerror(errno));
	}
	s->mdl = calloc(1, sizeof *s->mdl);
	if (!s->mdl) {
		free(s);
		return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	}
	s->mdl->s = s;
	s->mdl->model_path = dup_or_null(cfg->model_path);
	s->alias = dup_or_null(cfg->alias);
	s->api_key = dup_or_null(cfg->api_key);
	s->host_addr = strdup(cfg->host && *cfg->host ? cfg->host : "127.0.0.1");
	s->mdl->template_path = dup_or_null(cfg->chat_template);
	s->adapters_path = dup_or_null(cfg->adapters_dir);
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->slot_mu, NULL);
	pthread_mutex_init(&s->wait_mu, NULL);
	s->waker_ep = s->waker_quit = s->flush_fd = s->adapters_dfd = -1;
	s->overflow = srv_grid_route;
	atomic_init(&s->state, HTTP_LOADING);
	// seeds drawn for requests without one differ across restarts
	s->cfg.lanes.seed = splitmix64(base_now_ns() ^ ((uint64_t)getpid() << 32));
	atomic_init(&s->id_state, splitmix64(base_now_ns() + 1));
	srv_metrics_init(s);
	s->mdl->pinned = true;
	s->mdl->keep_s = -1;
	s->mdl->lanes = s->cfg.lanes;
	if ((!s->mdl->model_path && cfg->model_path && *cfg->model_path) || !s->host_addr) {
		http_server_free(s);
		return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	}
	// the model id: --alias, else the file name without .gguf (none: the folder's models alone)
	if (!srv_has_primary(s)) {
		atomic_store(&s->mdl->gone, true);
		s->mdl->pinned = false;
	} else if (s->alias) {
		snprintf(s->mdl->model_id, sizeof s->mdl->model_id, "%s", s->alias);
	} else {
		const char *b = strrchr(s->mdl->model_path, '/');
		b = b ? b + 1 : s->mdl->model_path;
		size_t n = strlen(b);
		if (n > 5 && !strcmp(b + n - 5, ".gguf")) n -= 5;
		snprintf(s->mdl->model_id, sizeof s->mdl->model_id, "%.*s", (int)n, b);
	}
	// a generation call holds a slot from its submission to its last byte: room for every
	// request the lane host can hold, and as many again still writing their replies
	s->n_slots = 2 * (cfg->lanes.lanes + cfg->lanes.queue);
	if (s->n_slots < 16) s->n_slots = 16;
	if (fit_connections(&s->cfg, s->n_slots, err, errlen)) {
		http_server_free(s);
		return LANES_EINVAL;
	}
	s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
	if (!s->slots) {
		http_server_free(s);
		return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	}

	int mrc = srv_models_start(s, err, errlen);
	if (mrc) {
		http_server_free(s);
		return mrc;
	}
	if (srv_waker_start(s, err, errlen)) {
		http_server_free(s);
		return LANES_EIO;
	}
	int grc = srv_grid_start(s, err, errlen);
	if (grc) {
		http_server_free(s);
		return grc;
	}

	open_adapters_dir(s);
	s->responses = srv_store_new(cfg->responses_store, SRV_STORE_ENTRY_MAX, SRV_STORE_TOTAL_MAX);
	if (srv_pulls_start(s) || (cfg->responses_store > 0 && !s->responses)) {
		http_server_free(s);
		return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	}
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)cfg->port);
	if (inet_pton(AF_INET, s->host_addr, &sa.sin_addr) != 1) {
		http_server_free(s);
		return base_seterr(err, errlen, LANES_EINVAL, "%s must be an IPv4 address, got '%s'", HTTP_SETTING(cfg, host), cfg->host);
	}
	if (srv_http_start(s, &hooks, err, errlen)) {
		http_server_free(s);
		return LANES_EIO;
	}
	if (srv_work_start(s, err, errlen) || srv_gate_start(s, &sa, err, errlen)) {
		http_server_free(s);
		return LANES_EIO;
	}
	// loopback is 127.0.0.0/8: any other address lets the network in
	s->mutations_closed = (ntohl(sa.sin_addr.s_addr) >> 24) != 127 && !s->api_key && !cfg->allow_unauth_mutations;
	if (s->mutations_closed)
		LOG_WARN(SRV_MOD, "listening on %s without %s: adapter, learning and model-cache changes are refused (403); give %s KEY, "
				  "or %s to take them from anyone", s->host_addr, HTTP_SETTING(cfg, api_key), HTTP_SETTING(cfg, api_key),
			 HTTP_SETTING(cfg, allow_unauth_mutations));
	LOG_DEBUG(SRV_MOD, "connections: up to %d open, %d per address (0: any), %d threads; request deadline %g s, idle %d s",
		 s->cfg.max_connections, cfg->max_per_ip, cfg->http_threads, cfg->header_timeout_s, cfg->idle_timeout_s);
	if (!srv_has_primary(s)) {
		atomic_store(&s->state, HTTP_READY); // the folder's models load on their first requests
	} else if (pthread_create(&s->mdl->loader, NULL, loader, s)) {
		http_server_free(s);
		return base_seterr(err, errlen, LANES_ENOMEM, "cannot start the loader thread");
	} else {
		s->mdl->loader_started = true;
	}
	*out = s;
	return 0;
}

void http_server_free(http_server *s) {
	if (!s) return;
	if (s->mdl->loader_started) pthread_join(s->mdl->loader, NULL);
	// libmicrohttpd refuses to stop with connections suspended: the pulls', the saves', the
	// gate's, the calls', the grid's and the work threads' are woken first
	srv_pulls_stop(s);
	srv_models_stop(s);
	learn_live_stop(s->mdl->learn);
	srv_gate_stop(s);
	srv_waker_release(s);
	srv_grid_release(s);
	srv_work_stop(s);
	srv_http_stop(s);
	srv_waker_stop(s);
	srv_grid_stop(s);
	srv_gate_free(s);
	lane_host_free(s->mdl->host);
	srv_models_free(s);
	learn_live_free(s->mdl->learn);
	srv_adapters_free(s);
	srv_pulls_free(s);
	srv_store_free(s->responses);
	chat_free(&s->mdl->chat);
	tok_vocab_free(s->mdl->vocab);
	model_free(s->mdl->m);
	model_free(s->mdl->draft);
	free(s->slots);
	free(s->mdl->rank_w);
	free(s->mdl->model_path);
	free(s->alias);
	free(s->api_key);
	free(s->host_addr);
	free(s->mdl->template_path);
	free(s->mdl);
	free(s->adapters_path);
	if (s->adapters_dfd >= 0) close(s->adapters_dfd);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->slot_mu);
	pthread_mutex_destroy(&s->wait_mu);
	free(s);
}

int http_server_port(const http_server *s) { return s->port; }

enum http_state http_server_state(http_server *s, char *err, size_t errlen) {
	int st = atomic_load(&s->state);
	if (st == HTTP_FAILED && err) {
		pthread_mutex_lock(&s->mu);
		snprintf(err, errlen, "%s", s->mdl->load_err);
		pthread_mutex_unlock(&s->mu);
	}
	return (enum http_state)st;
}

void http_server_drain(http_server *s) {
	pthread_mutex_lock(&s->mu);
	int want = HTTP_READY;
	if (atomic_compare_exchange_strong(&s->state, &want, HTTP_DRAINING)) {
		if (s->mdl->host) lane_host_drain(s->mdl->host);
		srv_models_drain(s, NULL);
	}
	pthread_mutex_unlock(&s->mu);
}

void http_server_halt(http_server *s, const char *reason) {
	pthread_mutex_lock(&s->mu);
	int st = atomic_load(&s->state);
	if (st == HTTP_READY || st == HTTP_DRAINING) {
		snprintf(s->halt_reason, sizeof s->halt_reason, "%s", reason ? reason : "halted");
		atomic_store(&s->state, HTTP_HALTED);
		if (s->mdl->host) lane_host_halt(s->mdl->host, s->halt_reason);
		srv_models_drain(s, s->halt_reason);
	}
	pthread_mutex_unlock(&s->mu);
}

int http_server_open(http_server *s, int *in_engine) {
	int calls = atomic_load(&s->calls_open);
	int st = atomic_load(&s->state);
	lane_host *h = srv_primary_host(s);
	int lanes = (st == HTTP_READY || st == HTTP_DRAINING || st == HTTP_HALTED) ? (h ? lane_host_open(h) : 0) + srv_models_open(s) : 0;
	if (in_engine) *in_engine = lanes;
	// a connection whose request is still arriving gets its answer (a 503 while draining)
	int conns = atomic_load(&s->socks_pending);
	int n = calls > lanes ? calls : lanes;
	return conns > n ? conns : n;
}
