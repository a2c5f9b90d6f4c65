// tests: the CLI's settings table (src/cli/settings.c) — every default parses and sits in its
// range, no command sees one spelling twice, the KV choices are the KV module's names, serve's
// and plan's defaults and ranges are the libraries' own, and values out of range or unknown are
// refused.
#include "t.h"
#include "cli/cli.h"
#include "cli/settings.h"
#include "kv/kv.h"
#include "server/server.h"

// serve's numbers that land in http_config or lane_config, each with what sets it there and the
// smallest step past an end.
#define SET(name, expr) static void name(http_config *c, double v) { expr; }
SET(set_port, c->port = (int)v)
SET(set_max_body, c->max_body = (size_t)v)
SET(set_max_connections, c->max_connections = (int)v)
SET(set_responses_store, c->responses_store = (int)v)
SET(set_max_per_ip, c->max_per_ip = (int)v)
SET(set_header_timeout, c->header_timeout_s = v)
SET(set_idle_timeout, c->idle_timeout_s = (int)v)
SET(set_http_threads, c->http_threads = (int)v)
SET(set_max_output, c->max_output_bytes = (size_t)v)
SET(set_max_tokenize, c->max_tokenize_bytes = (size_t)v)
SET(set_max_lora, c->max_lora = (int)v)
SET(set_learn_share, c->learn_share = v)
SET(set_lanes, c->lanes.lanes = (int32_t)v)
SET(set_ctx, c->lanes.ctx = (int32_t)v)
SET(set_queue, c->lanes.queue = (int32_t)v)
SET(set_piece, c->lanes.piece = (int32_t)v)
SET(set_round_ms, c->lanes.round_ms = v)
SET(set_draft_max, c->lanes.draft_max = (int32_t)v)
// a sampler's parameters with the sampler on, so the request contract checks them
SET(set_dry_multiplier, c->sampling.dry_multiplier = (float)v)
SET(set_dry_base, c->sampling.dry_base = (float)v; c->sampling.dry_multiplier = 1)
SET(set_dry_allowed, c->sampling.dry_allowed_length = (int32_t)v; c->sampling.dry_multiplier = 1)
SET(set_dry_last_n, c->sampling.dry_penalty_last_n = (int32_t)v; c->sampling.dry_multiplier = 1)
SET(set_xtc_probability, c->sampling.xtc_probability = (float)v)
SET(set_xtc_threshold, c->sampling.xtc_threshold = (float)v; c->sampling.xtc_probability = 1)
SET(set_top_n_sigma, c->sampling.top_n_sigma = (float)v)
SET(set_dynatemp_range, c->sampling.dynatemp_range = (float)v)
SET(set_dynatemp_exp, c->sampling.dynatemp_exponent = (float)v; c->sampling.dynatemp_range = 1)
SET(set_mirostat, c->sampling.mirostat = (int32_t)v)
SET(set_mirostat_ent, c->sampling.mirostat_tau = (float)v; c->sampling.mirostat = 2)
SET(set_mirostat_lr, c->sampling.mirostat_eta = (float)v; c->sampling.mirostat = 2)
static const struct {
	const char *names;
	void (*set)(http_config *c, double v);
	double step;
} lib_numbers[] = {
	{"--port", set_port, 1}, {"--max-body", set_max_body, 1}, {"--max-connections", set_max_connections, 1},
	{"--responses-store", set_responses_store, 1}, {"--max-connections-per-ip", set_max_per_ip, 1},
	{"--header-timeout", set_header_timeout, 0.01}, {"--idle-timeout", set_idle_timeout, 1},
	{"--http-threads", set_http_threads, 1}, {"--max-output-bytes", set_max_output, 1},
	{"--max-tokenize-bytes", set_max_tokenize, 1}, {"--max-lora", set_max_lora, 1}, {"--learn-share", set_learn_share, 0.01},
	{"--lanes", set_lanes, 1}, {"--ctx", set_ctx, 1}, {"--queue", set_queue, 1}, {"--piece", set_piece, 1},
	{"--round-ms", set_round_ms, 0.0005}, {"--draft-max", set_draft_max, 1},
	{"--dry-multiplier", set_dry_multiplier, 0.01}, {"--dry-base", set_dry_base, 0.01}, {"--dry-allowed-length", set_dry_allowed, 1},
	{"--dry-penalty-last-n", set_dry_last_n, 1}, {"--xtc-probability", set_xtc_probability, 0.01},
	{"--xtc-threshold", set_xtc_threshold, 0.01}, {"--top-nsigma", set_top_n_sigma, 0.01},
	{"--dynatemp-range", set_dynatemp_range, 0.01}, {"--dynatemp-exp", set_dynatemp_exp, 0.01}, {"--mirostat", set_mirostat, 1},
	{"--mirostat-ent", set_mirostat_ent, 0.01}, {"--mirostat-lr", set_mirostat_lr, 0.01},
};

// Whether http_config_check takes v for the number lib_numbers[k] sets.
static bool lib_takes(size_t k, double v) {
	http_config c;
	http_config_default(&c);
	c.model_path = "x.gguf";
	lib_numbers[k].set(&c, v);
	char err[256];
	return http_config_check(&c, err, sizeof err) == 0;
}

// Parses argv for a command named name (id) into s; the cli_setup return code.
static int setup(enum cli_cmd id, const char *name, int argc, const char **argv, cli_settings *s) {
	const cli_command c = {.id = id, .name = name, .what = "test", .head = "-m MODEL"};
	return cli_setup(&c, argc, (char **)argv, s);
}

int main(void) {
	char err[256];
	CHECKF(cli_settings_check(err, sizeof err) == 0, "%s", err);

	// the KV choices are exactly the types kv_type_parse knows
	for (int i = 0; i < cli_settings_count; i++) {
		const cli_setting *st = &cli_settings_table[i];
		if (st->field != offsetof(cli_settings, kv_type)) continue;
		for (int t = 0; t < KV_TYPE_COUNT; t++) CHECK(cli_choice_index(st->meta, kv_type_name((enum kv_type)t)) >= 0);
		CHECK(cli_choice_index(st->meta, "f8") < 0);
	}

	// serve's defaults are http_config_default's and lane_config_default's
	http_config hc;
	http_config_default(&hc);
	cli_settings s;
	const char *serve[] = {"serve", "-m", "x.gguf"};
	CHECK(setup(CMD_SERVE, "serve", 3, serve, &s) == -1);
	CHECK(!strcmp(s.host, hc.host));
	CHECK(s.port == hc.port);
	CHECK(s.max_body == (int64_t)hc.max_body);
	CHECK(s.max_connections == hc.max_connections);
	CHECK(s.ctx == hc.lanes.ctx);
	CHECK(s.queue == hc.lanes.queue);
	CHECK(s.piece == hc.lanes.piece);
	CHECK(s.round_ms == hc.lanes.round_ms);
	CHECK(s.draft_max == hc.lanes.draft_max);
	CHECK(kv_type_parse(s.kv_type) == (int)hc.lanes.kv_type);
	CHECK(!strcmp(s.draft_mode, "auto") && hc.lanes.draft == LANE_DRAFT_AUTO);
	CHECK(s.lanes == 0 && !cli_given(&s, &s.lanes) && cli_given(&s, &s.model));
	// the samplers serve's flags give are the sampling a request starts from
	lane_sampling sp = hc.sampling;
	CHECK(cli_sampling(&s, &sp) == 0);
	CHECK(!memcmp(&sp, &hc.sampling, sizeof sp));

	// serve's range of each number is exactly what the libraries take
	for (size_t k = 0; k < sizeof lib_numbers / sizeof lib_numbers[0]; k++) {
		const cli_setting *st = NULL;
		for (int i = 0; i < cli_settings_count && !st; i++)
			if (cli_settings_table[i].names && !strcmp(cli_settings_table[i].names, lib_numbers[k].names) &&
			    (cli_settings_table[i].cmds & (1u << CMD_SERVE)))
				st = &cli_settings_table[i];
		CHECKF(st != NULL, "%s is a serve setting", lib_numbers[k].names);
		if (!st) continue;
		const char *n = lib_numbers[k].names;
		CHECKF(lib_takes(k, st->min) && lib_takes(k, st->max), "%s: the library takes %g and %g", n, st->min, st->max);
		CHECKF(!lib_takes(k, st->min - lib_numbers[k].step), "%s: the library refuses %g", n, st->min - lib_numbers[k].step);
		if (st->max < INT32_MAX) // past INT32_MAX an int32_t field cannot say it
			CHECKF(!lib_takes(k, st->max + lib_numbers[k].step), "%s: the library refuses %g", n, st->max + lib_numbers[k].step);
	}

	// the server names its settings as http_config spells them, and as serve's flags under lanes serve
	for (int i = 0; cli_serve_flags[i][0]; i++) {
		bool found = false;
		for (int k = 0; k < cli_settings_count && !found; k++) {
			const cli_setting *st = &cli_settings_table[k];
			if (!st->names || !(st->cmds & (1u << CMD_SERVE))) continue;
			const char *at = strstr(st->names, cli_serve_flags[i][1]);
			const size_t n = strlen(cli_serve_flags[i][1]);
			found = at && (at == st->names || at[-1] == '|') && (at[n] == 0 || at[n] == '|');
		}
		CHECKF(found, "%s names %s, a serve flag", cli_serve_flags[i][0], cli_serve_flags[i][1]);
	}
	http_config_default(&hc);
	hc.model_path = "x.gguf";
	hc.port = 70000;
	CHECK(http_config_check(&hc, err, sizeof err) == LANES_EINVAL);
	CHECKF(!strcmp(err, "port must be 0..65535, not 70000"), "%s", err);
	CHECK(!strcmp(HTTP_SETTING(&hc, lanes.queue), "lanes.queue"));

	// given values land in their fields; out-of-range and unknown ones are refused
	const char *run[] = {"run", "-m", "x.gguf", "--ids=1,2", "-n", "5", "--temp", "0.5", "--kv", "q8_0", "--seed", "0"};
	CHECK(setup(CMD_RUN, "run", 12, run, &s) == -1);
	CHECK(s.n_predict == 5 && s.temp == 0.5 && !strcmp(s.kv_type, "q8_0") && !strcmp(s.ids, "1,2"));
	CHECK(cli_given(&s, &s.seed) && s.seed == 0);
	const char *bad[][4] = {{"run", "-m", "x", "--temp=2.5"}, {"run", "-m", "x", "--kv=f8"}, {"run", "-m", "x", "--port=1"},
				{"run", "-m", "x", "--top-p=nan"}, {"run", "-m", "x", "--print-ids=1"}};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECKF(setup(CMD_RUN, "run", 4, bad[i], &s) == 2, "%s", bad[i][3]);
	const char *missing[] = {"run", "--ids", "1"};
	CHECK(setup(CMD_RUN, "run", 3, missing, &s) == 2);
	T_DONE("settings");
}
