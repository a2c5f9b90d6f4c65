// tests: the CLI's settings table (src/cli/settings.c) — every default parses and sits in its
// range, no command sees one spelling twice, the KV choices are the KV module's names, serve's
// and plan's defaults are the libraries' own, and values out of range or unknown are refused.
#include "t.h"
#include "cli/settings.h"
#include "kv/kv.h"
#include "server/server.h"

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
