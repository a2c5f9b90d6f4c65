// tests: `lanes gen` in process (gen.h).
#include "gen.h"

#include "cli/cli.h"

int t_gen_model(const char *shape, const char *type, const char *vocab, const char *out) {
	char *argv[] = {"gen", "--shape", (char *)shape, "--type", (char *)type, "-o", (char *)out, "--vocab", (char *)vocab, NULL};
	static const cli_command c = {CMD_GEN, "gen", cmd_gen, "", "", 0};
	cli_settings s;
	const int rc = cli_setup(&c, vocab ? 9 : 7, argv, &s);
	return rc >= 0 ? rc : cmd_gen(&s);
}
