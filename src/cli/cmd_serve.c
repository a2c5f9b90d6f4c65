// cli: `lanes serve -m MODEL [--host H] [--port P] ...` — the HTTP server. Listens at once,
// loads the model in the background, and owns the process signals: the first SIGTERM or
// SIGINT drains (LANES_DRAIN_S seconds, default 20), the deadline or a second signal halts.
#include "base/base.h"
#include "cli/cli.h"
#include "plan/plan.h"
#include "server/server.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HALT_REASON "server restarting: retry shortly"
#define HALT_GRACE_US 5000000 // after a halt, how long the failed requests get to write their errors

static int drain_seconds(double *out) {
	const char *v = getenv("LANES_DRAIN_S");
	*out = 20.0;
	if (!v || !*v) return 0;
	char *end;
	errno = 0;
	double d = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(d) || d < 0 || d > 86400) {
		fprintf(stderr, "lanes serve: LANES_DRAIN_S must be a number of seconds in 0..86400, got '%s'\n", v);
		return -1;
	}
	*out = d;
	return 0;
}

// --memory: the planner sizes the lanes and the largest window from the file's metadata
// before anything loads; the window starts at its floor and follows demand.
static int plan_serve(http_config *cfg, const char *path, const char *memory, int32_t lanes, int32_t window) {
	uint64_t budget;
	char err[512], a[32], b[32], c[32], d[32];
	if (!strcmp(memory, "auto")) budget = plan_available_memory();
	else if (plan_parse_size(memory, &budget)) {
		fprintf(stderr, "lanes serve: --memory: '%s' is not a size (e.g. 4GiB, 500MB, 1.5GiB or auto)\n", memory);
		return 1;
	}
	plan_model pm;
	plan_result pr;
	if (plan_model_load(&pm, path, err, sizeof err) ||
	    plan_make(&pr, &pm, budget, lanes, &cfg->lanes, err, sizeof err)) {
		fprintf(stderr, "lanes serve: %s\n", err);
		return 1;
	}
	if (!pr.fits) {
		fprintf(stderr, "lanes serve: nothing fits in %s: %s\n", plan_format_size(budget, a, sizeof a), pr.reason);
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

int cmd_serve(int argc, char **argv) {
	http_config cfg;
	http_config_default(&cfg);
	const char *model_path = NULL, *host = "127.0.0.1", *alias = NULL, *api_key = NULL, *tmpl_path = NULL,
		   *draft_mode = "auto", *draft_model = NULL, *memory = NULL, *kv_type = NULL;
	int64_t draft_max = cfg.lanes.draft_max;
	int64_t window = 0;
	int64_t port = 8080, max_body = (int64_t)cfg.max_body, lanes = 0, ctx = cfg.lanes.ctx,
		queue = cfg.lanes.queue, piece = cfg.lanes.piece, threads = 0, conns = cfg.max_connections;
	double round_ms = cfg.lanes.round_ms;
	bool help = false;
	const cli_opt opts[] = {
		{"-m|--model", CLI_STR, &model_path, "GGUF model file"},
		{"--host", CLI_STR, &host, "listen address (default 127.0.0.1)"},
		{"--port", CLI_INT, &port, "listen port (default 8080; 0 = any free port)"},
		{"--alias", CLI_STR, &alias, "model id in the API (default: the file name without .gguf)"},
		{"--api-key", CLI_STR, &api_key, "require this key (Authorization: Bearer or x-api-key); control reads stay open"},
		{"--max-body", CLI_INT, &max_body, "largest request body in bytes (default 8 MiB)"},
		{"--chat-template", CLI_STR, &tmpl_path, "Jinja chat template file (default: the model's, else ChatML)"},
		{"--lanes", CLI_INT, &lanes, "concurrent requests (default 4; with --memory the planner chooses)"},
		{"--memory", CLI_STR, &memory, "memory budget (e.g. 4GiB, 500MB, or auto: what is available): plan lanes and an elastic window"},
		{"--window", CLI_INT, &window, "with --memory: the window's floor and start (default min(1024, the plan's))"},
		{"--kv-type", CLI_STR, &kv_type, "KV cache type: f16s (default), f16, q8_0 or q4_0"},
		{"--ctx", CLI_INT, &ctx, "without --memory: a fixed pool of KV tokens across all lanes (default 8192)"},
		{"--queue", CLI_INT, &queue, "waiting requests beyond the lanes (default 64)"},
		{"--piece", CLI_INT, &piece, "most prompt tokens one lane feeds per round (default 0 = no cap)"},
		{"--round-ms", CLI_FLOAT, &round_ms, "target duration of a round with prompt pieces (default 100)"},
		{"-t|--threads", CLI_INT, &threads, "compute threads (default: one per core)"},
		{"--max-connections", CLI_INT, &conns, "concurrent connections (default 256)"},
		{"--draft", CLI_STR, &draft_mode, "speculative decoding for requests that allow it: auto (default) or off"},
		{"--draft-model", CLI_STR, &draft_model, "a draft model with the same vocabulary (auto uses it beside n-gram)"},
		{"--draft-max", CLI_INT, &draft_max, "most draft tokens per lane per round, adapted per lane (default 8)"},
		{"-h|--help", CLI_FLAG, &help, "show this help"},
	};
	const int nopts = sizeof opts / sizeof opts[0];
	const char *synopsis = "lanes serve -m MODEL [--host 127.0.0.1] [--port 8080] [--alias NAME] [--api-key KEY] "
			       "[--max-body BYTES] [--chat-template FILE] [--lanes N] [--memory SIZE [--window N]] "
			       "[--kv-type f16s|f16|q8_0|q4_0] [--ctx N] [--queue N] [--piece N] "
			       "[--round-ms MS] [--threads N] [--draft auto|off] [--draft-model FILE] [--draft-max K]";
	int npos;
	if (cli_parse(argc, argv, opts, nopts, NULL, 0, &npos)) return 2;
	if (help || !model_path) {
		cli_usage(synopsis, opts, nopts);
		return help ? 0 : 2;
	}
	double drain_s;
	if (drain_seconds(&drain_s)) return 2;
	const struct {
		const char *name;
		int64_t v, lo, hi;
	} ranges[] = {{"--port", port, 0, 65535},       {"--max-body", max_body, 16, (int64_t)1 << 34},
		      {"--lanes", lanes, 0, 64},         {"--ctx", ctx, 16, 1 << 24},
		      {"--window", window, 0, 1 << 24},
		      {"--queue", queue, 0, 1000000},    {"--piece", piece, 0, INT32_MAX},
		      {"--threads", threads, 0, 1024},   {"--max-connections", conns, 1, 65536},
		      {"--draft-max", draft_max, 1, LANE_MAX_DRAFT}};
	for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
		if (ranges[i].v < ranges[i].lo || ranges[i].v > ranges[i].hi) {
			fprintf(stderr, "lanes serve: %s must be %lld..%lld\n", ranges[i].name, (long long)ranges[i].lo,
				(long long)ranges[i].hi);
			return 2;
		}
	cfg.model_path = model_path;
	cfg.host = host;
	cfg.port = (int)port;
	cfg.alias = alias;
	cfg.api_key = api_key;
	cfg.max_body = (size_t)max_body;
	cfg.chat_template = tmpl_path;
	cfg.max_connections = (int)conns;
	cfg.lanes.lanes = lanes ? (int32_t)lanes : cfg.lanes.lanes;
	cfg.lanes.ctx = (int32_t)ctx;
	if (kv_type) {
		int t = kv_type_parse(kv_type);
		if (t < 0) {
			fprintf(stderr, "lanes serve: --kv-type must be f16s, f16, q8_0 or q4_0, not '%s'\n", kv_type);
			return 2;
		}
		cfg.lanes.kv_type = (enum kv_type)t;
	}
	cfg.lanes.queue = (int32_t)queue;
	cfg.lanes.piece = (int32_t)piece;
	cfg.lanes.round_ms = round_ms;
	cfg.lanes.threads = (int32_t)threads;
	if (strcmp(draft_mode, "auto") && strcmp(draft_mode, "off")) {
		fprintf(stderr, "lanes serve: --draft must be auto or off, not '%s'\n", draft_mode);
		return 2;
	}
	cfg.lanes.draft = strcmp(draft_mode, "off") ? LANE_DRAFT_AUTO : LANE_DRAFT_OFF;
	cfg.lanes.draft_max = (int32_t)draft_max;
	cfg.draft_model = draft_model;
	if (memory && plan_serve(&cfg, model_path, memory, (int32_t)lanes, (int32_t)window)) return 1;
	if (!memory && window) {
		fprintf(stderr, "lanes serve: --window needs --memory\n");
		return 2;
	}

	// every thread the server starts inherits this mask: the signals come to sigtimedwait here
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	char err[512];
	http_server *s = NULL;
	if (http_server_new(&s, &cfg, err, sizeof err)) {
		fprintf(stderr, "lanes serve: %s\n", err);
		return 1;
	}
	LOG_INFO("serve", "listening on http://%s:%d (loading %s)", host, http_server_port(s), model_path);

	int rc = 0, signals = 0;
	bool halted = false;
	uint64_t deadline = 0, halt_at = 0;
	for (;;) {
		struct timespec ts = {0, 20 * 1000 * 1000};
		int sig = sigtimedwait(&set, NULL, &ts);
		enum http_state st = http_server_state(s, err, sizeof err);
		if (st == HTTP_FAILED) {
			fprintf(stderr, "lanes serve: %s\n", err);
			rc = 1;
			break;
		}
		uint64_t now = lanes_now_us();
		if (sig > 0) {
			signals++;
			if (st == HTTP_LOADING) {
				LOG_INFO("serve", "%s while loading: exiting", strsignal(sig));
				break;
			}
			if (signals == 1) {
				LOG_INFO("serve", "%s: draining for up to %.3g s (a second signal halts)", strsignal(sig), drain_s);
				http_server_drain(s);
				deadline = now + (uint64_t)(drain_s * 1e6);
			} else if (!halted) {
				LOG_INFO("serve", "%s: halting", strsignal(sig));
				http_server_halt(s, HALT_REASON);
				halted = true;
				halt_at = now;
			} else {
				LOG_WARN("serve", "%s: exiting now", strsignal(sig));
				break;
			}
		}
		if (!signals) continue;
		int open = http_server_open(s);
		if (!halted && open == 0) {
			LOG_INFO("serve", "drained: every request ended");
			break;
		}
		if (!halted && now >= deadline) {
			LOG_INFO("serve", "drain deadline passed with %d requests open: halting", open);
			http_server_halt(s, HALT_REASON);
			halted = true;
			halt_at = now;
		}
		if (halted && (open == 0 || now - halt_at > HALT_GRACE_US)) {
			if (open) LOG_WARN("serve", "%d requests still open after the halt: closing their connections", open);
			break;
		}
	}
	http_server_free(s);
	return rc;
}
