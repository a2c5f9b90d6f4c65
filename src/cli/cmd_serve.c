// cli: `lanes serve -m MODEL [--host H] [--port P] ...` — the HTTP server. Listens at once,
// loads the model in the background, and owns the process signals: the first SIGTERM or
// SIGINT drains (for LANES_DRAIN_S seconds), the deadline or a second signal halts.
#include "base/base.h"
#include "cli/cli.h"
#include "plan/plan.h"
#include "server/server.h"
#include "tensor/tensor.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HALT_REASON "server restarting: retry shortly"
#define HALT_GRACE_US 5000000 // once the engine has ended every request, how long their errors get to be written

// --memory: the planner sizes the lanes and the largest window from the file's metadata
// before anything loads; the window starts at its floor and follows demand. 0, else the exit
// code with the message printed (2: the size is no size).
static int plan_serve(http_config *cfg, const char *path, const char *memory, int32_t lanes, int32_t window) {
	uint64_t budget;
	char err[512], a[32], b[32], c[32], d[32];
	if (!strcmp(memory, "auto")) budget = plan_available_memory();
	else if (plan_parse_size(memory, &budget)) {
		cli_err("--memory: '%s' is not a size (e.g. 4GiB, 500MB, 1.5GiB or auto)", memory);
		return 2;
	}
	if (strcmp(memory, "auto")) model_select_compact_budget(budget); // what auto may expand into
	plan_model pm;
	plan_result pr;
	if (plan_model_load(&pm, path, err, sizeof err) ||
	    plan_make(&pr, &pm, budget, lanes, &cfg->lanes, err, sizeof err)) {
		cli_err("%s", err);
		return 1;
	}
	if (!pr.fits) {
		cli_err("nothing fits in %s: %s", plan_format_size(budget, a, sizeof a), pr.reason);
		return 1;
	}
	const int32_t pt = pr.page_tokens;
	int32_t floor = window > 0 ? window : 1024;
	floor = (floor + pt - 1) / pt * pt;
	if (floor > pr.window) {
		if (window > 0) LOG_WARN("serve", "--window %d is more than the budget allows: the floor is %d", window, pr.window);
		floor = pr.window;
	}
	cfg->lanes.lanes = pr.lanes;
	cfg->lanes.window_max = pr.window;
	cfg->lanes.window = floor;
	LOG_INFO("serve", "plan for %s: %d lanes, window %d..%d tokens of %s KV; weights %s, KV %s, compute %s",
		 plan_format_size(budget, a, sizeof a), pr.lanes, floor, pr.window, kv_type_name(pr.kv_type),
		 plan_format_size(pr.weights_bytes, b, sizeof b), plan_format_size(pr.kv_bytes, c, sizeof c),
		 plan_format_size(pr.compute_reserve_bytes, d, sizeof d));
	if (cfg->draft_model) LOG_WARN("serve", "the draft model's memory is not part of the plan");
	return 0;
}

// --memory with --models-dir: the budget every model loaded at once shares, each planned at
// --lanes and --ctx; the -m model's share is checked here. 0, else the exit code, printed.
static int plan_folder(http_config *cfg, const char *path, const char *memory) {
	char err[512], a[32], b[32];
	cfg->memory_bytes = strcmp(memory, "auto") ? 0 : plan_available_memory();
	if (!cfg->memory_bytes && plan_parse_size(memory, &cfg->memory_bytes)) return 2; // checked before
	if (strcmp(memory, "auto")) model_select_compact_budget(cfg->memory_bytes);
	if (!path) {
		LOG_INFO("serve", "plan for %s: the models loaded at once share it, each with %d lanes and %d KV tokens",
			 plan_format_size(cfg->memory_bytes, a, sizeof a), cfg->lanes.lanes, cfg->lanes.ctx);
		return 0;
	}
	plan_model pm;
	plan_result pr;
	const int32_t lanes = cfg->lanes.lanes;
	if (plan_model_load(&pm, path, err, sizeof err) ||
	    plan_at(&pr, &pm, cfg->memory_bytes, lanes, (cfg->lanes.ctx + lanes - 1) / lanes, &cfg->lanes, err, sizeof err)) {
		cli_err("%s", err);
		return 1;
	}
	if (!pr.fits) {
		cli_err("the -m model does not fit in %s: %s", plan_format_size(cfg->memory_bytes, a, sizeof a), pr.reason);
		return 1;
	}
	LOG_INFO("serve", "plan for %s: the -m model takes %s; the folder's models loaded at once share the rest, each with %d lanes and %d KV tokens",
		 plan_format_size(cfg->memory_bytes, a, sizeof a), plan_format_size(pr.total_bytes, b, sizeof b), lanes, cfg->lanes.ctx);
	return 0;
}

// The load's bar on a terminal, drawn by the loader thread once the listening line is out.
typedef struct {
	cli_progress bar;
	atomic_bool shown;
} serve_bar;

static void serve_progress(void *ud, uint64_t done, uint64_t total) {
	serve_bar *b = ud;
	if (atomic_load(&b->shown)) cli_progress_model(&b->bar, done, total);
}

// --lora NAME=PATH[:SCALE] (or PATH[:SCALE]: the name is the file's, without .gguf) into l;
// the strings go into buf (len bytes a entry). 0, or 1 with the message printed.
static int split_serve_lora(const char *arg, http_lora *l, char *buf, size_t len) {
	const char *eq = strchr(arg, '=');
	char *name = buf, *path = buf + len / 2;
	cli_split_lora(eq ? eq + 1 : arg, path, len / 2, &l->scale);
	if (eq) {
		snprintf(name, len / 2, "%.*s", (int)(eq - arg), arg);
	} else {
		const char *b = strrchr(path, '/');
		b = b ? b + 1 : path;
		size_t n = strlen(b);
		if (n > 5 && !strcmp(b + n - 5, ".gguf")) n -= 5;
		snprintf(name, len / 2, "%.*s", (int)n, b);
	}
	if (!*path) {
		cli_err("--lora %s: no file (NAME=PATH[:SCALE])", arg);
		return 1;
	}
	l->name = name;
	l->path = path;
	return 0;
}

// The flag of each http_config setting the server's messages name (test_settings holds each
// to a real serve flag).
const char *const cli_serve_flags[][2] = {
	{"host", "--host"}, {"port", "--port"}, {"api_key", "--api-key"}, {"max_body", "--max-body"},
	{"reasoning_format", "--reasoning-format"}, {"max_connections", "--max-connections"},
	{"max_per_ip", "--max-connections-per-ip"}, {"header_timeout_s", "--header-timeout"}, {"idle_timeout_s", "--idle-timeout"},
	{"http_threads", "--http-threads"}, {"responses_store", "--responses-store"}, {"pooling", "--pooling"},
	{"embeddings_only", "--embeddings"}, {"strict_params", "--strict-params"}, {"allowed_hosts", "--allowed-host"},
	{"cors_origins", "--cors-origin"}, {"protect_control", "--protect-control"}, {"max_output_bytes", "--max-output-bytes"},
	{"max_tokenize_bytes", "--max-tokenize-bytes"}, {"no_webui", "--no-webui"}, {"peers", "--peer"},
	{"overflow_queue", "--overflow-queue"}, {"peer_poll_ms", "--peer-poll-ms"}, {"peer_timeout_ms", "--peer-timeout-ms"},
	{"loras", "--lora"}, {"max_lora", "--max-lora"}, {"adapters_dir", "--adapters-dir"}, {"models_dirs", "--models-dir"}, {"aliases", "--alias"},
	{"keep_alive_s", "--keep-alive"}, {"max_models", "--max-models"}, {"model_path", "-m"}, {"draft_model", "--draft-model"}, {"draft_head", "--draft-head"},
	{"memory_bytes", "--memory"}, {"lanes.ctx", "--ctx"},
	{"allow_unauth_mutations", "--allow-unauthenticated-mutations"}, {"learn_share", "--learn-share"},
	{"lanes.lanes", "--lanes"}, {"lanes.queue", "--queue"}, {"lanes.experts", "--experts"},
	{"sampling.dry_multiplier", "--dry-multiplier"}, {"sampling.dry_base", "--dry-base"},
	{"sampling.dry_allowed_length", "--dry-allowed-length"}, {"sampling.dry_penalty_last_n", "--dry-penalty-last-n"},
	{"sampling.dry_breakers", "--dry-sequence-breaker"}, {"sampling.xtc_probability", "--xtc-probability"},
	{"sampling.xtc_threshold", "--xtc-threshold"}, {"sampling.top_n_sigma", "--top-nsigma"},
	{"sampling.dynatemp_range", "--dynatemp-range"}, {"sampling.dynatemp_exponent", "--dynatemp-exp"},
	{"sampling.mirostat", "--mirostat"}, {"sampling.mirostat_tau", "--mirostat-ent"}, {"sampling.mirostat_eta", "--mirostat-lr"},
	{"sampling.samplers", "--samplers"},
	{NULL, NULL},
};

static const char *serve_flag(const char *field) {
	for (int i = 0; cli_serve_flags[i][0]; i++)
		if (!strcmp(cli_serve_flags[i][0], field)) return cli_serve_flags[i][1];
	return NULL;
}

int cmd_serve(const cli_settings *s) {
	if (s->price_fixed_us > 0 && s->price_row_us <= 0) return cli_usage_error(s, "--price-fixed-us needs --price-row-us");
	if (!s->memory && s->window) return cli_usage_error(s, "--window needs --memory");
	uint64_t size;
	if (s->memory && strcmp(s->memory, "auto") && plan_parse_size(s->memory, &size)) {
		cli_err("--memory: '%s' is not a size (e.g. 4GiB, 500MB, 1.5GiB or auto)", s->memory);
		return 2;
	}
	uint64_t cache_max = 0;
	if (s->cache_dir_max && plan_parse_size(s->cache_dir_max, &cache_max)) {
		cli_err("--cache-dir-max: '%s' is not a size (e.g. 4GiB, 500MB)", s->cache_dir_max);
		return 2;
	}
	if (s->cache_dir && *s->cache_dir) {
		// a folder that cannot be made is the operator's to fix before the model loads
		char err[512];
		int dfd;
		if (base_dir_open(s->cache_dir, true, &dfd, err, sizeof err)) {
			cli_err("--cache-dir: %s", err);
			return 2;
		}
		close(dfd);
	}
	char pulled[4096], cache[4096];
	const char *model_path = s->model, *dirs[CLI_LIST_MAX], *alias = NULL;
	int n_dirs = s->serve_models_dir.n, n_aliases = 0;
	http_alias aliases[CLI_LIST_MAX];
	char alias_buf[CLI_LIST_MAX][256];
	for (int i = 0; i < n_dirs; i++) dirs[i] = s->serve_models_dir.v[i];
	// --alias NAME names the -m model; NAME=FILE serves FILE by that name
	for (int i = 0; i < s->alias.n; i++) {
		const char *a = s->alias.v[i], *eq = strchr(a, '=');
		struct stat st;
		if (!eq) {
			if (alias) return cli_usage_error(s, "--alias NAME names the -m model once; --alias NAME=FILE serves another file");
			alias = a;
			continue;
		}
		if (eq == a || (size_t)(eq - a) >= sizeof alias_buf[0] || stat(eq + 1, &st) || !S_ISREG(st.st_mode)) {
			cli_err("--alias %s: give NAME=FILE, FILE a model file", a);
			return 2;
		}
		snprintf(alias_buf[n_aliases], sizeof alias_buf[0], "%.*s", (int)(eq - a), a);
		aliases[n_aliases] = (http_alias){alias_buf[n_aliases], eq + 1};
		n_aliases++;
	}
	if (alias && !model_path) return cli_usage_error(s, "--alias NAME names the -m model: give -m, or NAME=FILE");
	if (!n_dirs && !model_path) {
		// no model named: the models `lanes pull` put in the cache, as Ollama serves its own
		pull_config pc;
		cli_pull_config(s, &pc);
		pull_cache_dir(&pc, cache, sizeof cache);
		char err[512];
		int dfd;
		if (base_dir_open(cache, true, &dfd, err, sizeof err)) {
			cli_err("the model cache: %s", err);
			return 2;
		}
		close(dfd);
		dirs[n_dirs++] = cache;
	}
	const bool multi = n_dirs || n_aliases;
	if (multi && s->window) return cli_usage_error(s, "--window is the one-model plan's: with --models-dir each model runs --lanes and --ctx");
	if (cli_is_pull_ref(s->model)) {
		if (cli_pull(s, s->model, pulled, sizeof pulled)) return 1;
		model_path = pulled;
	}
	http_config cfg;
	http_config_default(&cfg);
	cfg.setting_name = serve_flag;
	const double drain_s = s->drain_s;
	cfg.model_path = model_path;
	cfg.host = s->host;
	cfg.port = (int)s->port;
	cfg.alias = alias;
	cfg.api_key = s->api_key;
	cfg.max_body = (size_t)s->max_body;
	cfg.chat_template = s->chat_template;
	cfg.reasoning_format = s->reasoning_format;
	cfg.max_connections = (int)s->max_connections;
	cfg.max_per_ip = (int)s->max_per_ip;
	cfg.header_timeout_s = s->header_timeout;
	cfg.idle_timeout_s = (int)s->idle_timeout;
	cfg.http_threads = (int)s->http_threads;
	cfg.lanes.lanes = s->lanes ? (int32_t)s->lanes : cfg.lanes.lanes;
	cfg.lanes.ctx = (int32_t)s->ctx;
	cfg.lanes.kv_type = cli_kv_type(s->kv_type);
	cfg.lanes.cache_dir = s->cache_dir && *s->cache_dir ? s->cache_dir : NULL;
	cfg.lanes.cache_dir_bytes = cache_max;
	cfg.lanes.queue = (int32_t)s->queue;
	cfg.lanes.piece = (int32_t)s->piece;
	cfg.lanes.round_ms = s->round_ms;
	cfg.lanes.row_us = s->price_row_us;
	cfg.lanes.fixed_us = s->price_fixed_us;
	cfg.lanes.threads = (int32_t)s->threads;
	static const char *const modes[] = {[LANE_DRAFT_AUTO] = "auto", [LANE_DRAFT_OFF] = "off", [LANE_DRAFT_NGRAM] = "ngram",
					    [LANE_DRAFT_MTP] = "mtp"};
	cfg.lanes.draft = LANE_DRAFT_AUTO;
	for (int i = 0; i < (int)(sizeof modes / sizeof modes[0]); i++)
		if (!strcmp(s->draft_mode, modes[i])) cfg.lanes.draft = (enum lane_draft_mode)i;
	cfg.lanes.draft_max = (int32_t)s->draft_max;
	cfg.draft_model = s->draft_model;
	cfg.draft_head = s->draft_head;
	cfg.pooling = strcmp(s->pooling, "auto") ? s->pooling : NULL;
	cfg.embeddings_only = s->embeddings;
	cfg.strict_params = s->strict_params;
	cfg.max_tokens = (int32_t)s->serve_max_tokens;
	if (cli_sampling(s, &cfg.sampling)) return 2;
	cfg.responses_store = (int)s->responses_store;
	cfg.strict_model = s->strict_model;
	cfg.allowed_hosts = s->allowed_host.v;
	cfg.n_allowed_hosts = s->allowed_host.n;
	cfg.cors_origins = s->cors_origin.v;
	cfg.n_cors_origins = s->cors_origin.n;
	cfg.protect_control = s->protect_control;
	cfg.max_output_bytes = (size_t)s->max_output_bytes;
	cfg.stream_flush_us = (uint32_t)lround(s->stream_flush_ms * 1000);
	cfg.max_tokenize_bytes = (size_t)s->max_tokenize_bytes;
	cfg.no_webui = s->no_webui;
	cfg.lanes.experts = strcmp(s->experts, "off") != 0;
	cfg.metrics_experts = s->metrics_experts;
	cfg.peers = s->peer.v;
	cfg.n_peers = s->peer.n;
	cfg.overflow_queue = (int)s->overflow_queue;
	cfg.peer_poll_ms = (int)s->peer_poll_ms;
	cfg.peer_timeout_ms = (int)s->peer_timeout_ms;
	cfg.peer_key = s->peer_key;
	cfg.models_dirs = dirs;
	cfg.n_models_dirs = n_dirs;
	cfg.aliases = aliases;
	cfg.n_aliases = n_aliases;
	cfg.max_models = (int)s->max_models;
	if (!base_parse_duration(s->keep_alive, &cfg.keep_alive_s)) {
		cli_err("--keep-alive: '%s' is no duration (30s, 5m, 1h, -1 or 0)", s->keep_alive);
		return 2;
	}
	serve_bar bar;
	cli_progress_start(&bar.bar, "load", true, false);
	atomic_init(&bar.shown, false);
	cfg.load_progress = serve_progress;
	cfg.load_progress_ud = &bar;
	cfg.max_lora = (int)s->max_lora;
	cfg.learn_share = s->learn_share;
	cfg.lanes.mtp_learn = s->learn_share > 0; // with --draft mtp, a head can be learned here
	char adapters_dir[4096];
	if (s->adapters_dir && *s->adapters_dir) snprintf(adapters_dir, sizeof adapters_dir, "%s", s->adapters_dir);
	else snprintf(adapters_dir, sizeof adapters_dir, "%s/.cache/lanes/adapters", getenv("HOME") ? getenv("HOME") : ".");
	cfg.adapters_dir = adapters_dir;
	cfg.allow_unauth_mutations = s->allow_unauth_mutations;
	cli_pull_config(s, &cfg.cache);
	cfg.cache.urls = false; // over HTTP the hub's names alone: the server fetches no URL a client names
	if (n_dirs) cfg.cache.dir = dirs[0]; // Ollama's pull, copy and delete change what it serves
	enum { LORA_BUF = 8192 };
	http_lora *loras = s->lora.n ? calloc((size_t)s->lora.n, sizeof *loras) : NULL;
	char *lora_buf = s->lora.n ? malloc((size_t)s->lora.n * LORA_BUF) : NULL;
	if (s->lora.n && (!loras || !lora_buf)) {
		cli_err("out of memory");
		free(loras);
		free(lora_buf);
		return 1;
	}
	for (int i = 0; i < s->lora.n; i++)
		if (split_serve_lora(s->lora.v[i], &loras[i], lora_buf + (size_t)i * LORA_BUF, LORA_BUF)) {
			free(loras);
			free(lora_buf);
			return 1;
		}
	cfg.loras = loras;
	cfg.n_loras = s->lora.n;
	int rc = 0, signals = 0;
	char err[512];
	if (s->memory && !multi) {
		if ((rc = plan_serve(&cfg, model_path, s->memory, (int32_t)s->lanes, (int32_t)s->window))) goto out;
	} else if (s->memory) {
		if ((rc = plan_folder(&cfg, model_path, s->memory))) goto out;
		if (!cli_given(s, &s->max_models)) cfg.max_models = HTTP_MAX_MODELS; // the memory decides
	} else if (model_path) {
		// the model's metadata read at once (no tensor data), so a file that cannot be served is
		// named here, before the server listens
		plan_model pm;
		if (plan_model_load(&pm, model_path, err, sizeof err)) {
			cli_err("%s", err);
			rc = 1;
			goto out;
		}
	}
	LOG_INFO("serve", "%s; kernels %s", base_version_string(), tensor_kernels_name(tensor_kernels_default()));
	LOG_DEBUG("serve", "built with %s", base_build_flags());

	// every thread the server starts inherits this mask: the signals come to sigtimedwait here
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	http_server *srv = NULL;
	if (http_server_new(&srv, &cfg, err, sizeof err)) {
		cli_err("%s", err);
		rc = 1;
		goto out;
	}
	if (model_path) LOG_INFO("serve", "listening on http://%s:%d (loading %s)", s->host, http_server_port(srv), model_path);
	else LOG_INFO("serve", "listening on http://%s:%d (models by name, each loaded by its first request)", s->host, http_server_port(srv));
	atomic_store(&bar.shown, true);

	bool halted = false;
	uint64_t deadline = 0, halt_at = 0;
	for (;;) {
		struct timespec ts = {0, 20 * 1000 * 1000};
		int sig = sigtimedwait(&set, NULL, &ts);
		enum http_state st = http_server_state(srv, err, sizeof err);
		if (st == HTTP_FAILED) { // the server has logged why
			rc = 1;
			break;
		}
		uint64_t now = base_now_us();
		if (sig > 0) {
			signals++;
			if (st == HTTP_LOADING) {
				LOG_INFO("serve", "%s while loading: exiting", strsignal(sig));
				break;
			}
			if (signals == 1) {
				LOG_INFO("serve", "%s: draining for up to %.3g s (a second signal halts)", strsignal(sig), drain_s);
				http_server_drain(srv);
				deadline = now + (uint64_t)(drain_s * 1e6);
			} else if (!halted) {
				LOG_INFO("serve", "%s: halting", strsignal(sig));
				http_server_halt(srv, HALT_REASON);
				halted = true;
			} else {
				LOG_WARN("serve", "%s: exiting now", strsignal(sig));
				break;
			}
		}
		if (!signals) continue;
		int in_engine = 0, open = http_server_open(srv, &in_engine);
		if (!halted && open == 0) {
			LOG_INFO("serve", "drained: every request ended");
			break;
		}
		if (!halted && now >= deadline) {
			LOG_INFO("serve", "drain deadline passed with %d requests open: halting", open);
			http_server_halt(srv, HALT_REASON);
			halted = true;
		}
		// the halt lands at the engine's next round boundary, however long the round in flight takes
		if (halted && !halt_at && in_engine == 0) halt_at = now;
		if (halted && (open == 0 || (halt_at && now - halt_at > HALT_GRACE_US))) {
			if (open) LOG_WARN("serve", "%d requests still open after the halt: closing their connections", open);
			break;
		}
	}
	http_server_free(srv);
out:
	free(loras);
	free(lora_buf);
	return rc;
}
