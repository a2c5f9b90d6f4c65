// cli: `lanes SUBCOMMAND ...` — dispatches through one table of subcommands.
#include "base/base.h"
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static const struct {
	const char *name;
	int (*fn)(int, char **);
	const char *what;
} commands[] = {
	{"info", cmd_info, "print a GGUF file's metadata and tensors"},
	{"tokenize", cmd_tokenize, "print the token ids of stdin's text"},
	{"detokenize", cmd_detokenize, "print the text of a JSON array of token ids"},
	{"template", cmd_template, "render a chat template over a JSON list of messages"},
	{"quantize", cmd_quantize, "convert a model's weights to a file type (Q8_0, Q4_K_M, ...)"},
	{"gen", cmd_gen, "write a random-weight llama-family model for tests and benchmarks"},
	{"run", cmd_run, "generate text from a prompt"},
	{"logits", cmd_logits, "write the logits of every prompt position"},
	{"bench", cmd_bench, "measure prompt processing and generation speed"},
	{"serve", cmd_serve, "serve a model over HTTP (OpenAI and Anthropic APIs)"},
	{"plan", cmd_plan, "plan lanes, window and KV for a memory budget from a model's metadata"},
};

static void usage(void) {
	fprintf(stderr, "usage: lanes COMMAND [options]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(stderr, "  %-12s %s\n", commands[i].name, commands[i].what);
	fprintf(stderr, "\n`lanes COMMAND --help` describes one command.\n");
}

int main(int argc, char **argv) {
	lanes_log_init();
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage();
		return argc < 2 ? 2 : 0;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "lanes: unknown command '%s'\n", argv[1]);
	usage();
	return 2;
}
