// cli: `lanes COMMAND ...` — one table of subcommands; the settings table (settings.c)
// parses each command's options before it runs. `lanes` (usage, exit 2), `lanes help [CMD]`
// and `lanes --version` answer here.
#include "base/base.h"
#include "cli/cli.h"
#include "tensor/tensor.h"

#include <string.h>

static const cli_command commands[] = {
	{CMD_INFO, "info", cmd_info, "print a GGUF file's metadata and tensors", "MODEL.gguf", 1},
	{CMD_TOKENIZE, "tokenize", cmd_tokenize, "print the token ids of stdin's text", "-m MODEL", 0},
	{CMD_DETOKENIZE, "detokenize", cmd_detokenize, "print the text of a JSON array of token ids", "-m MODEL", 0},
	{CMD_TEMPLATE, "template", cmd_template, "render a chat template over a JSON list of messages",
	 "(-m MODEL | --file T.jinja) --messages M.json", 0},
	{CMD_QUANTIZE, "quantize", cmd_quantize, "convert a model's weights to a file type (Q8_0, Q4_K_M, ...)", "IN.gguf OUT.gguf TYPE", 3},
	{CMD_GEN, "gen", cmd_gen, "write a random-weight model (llama family, gemma2, gemma3, phi3, gpt-oss, qwen3next, bert), or a LoRA adapter for one, for tests and benchmarks",
	 "(--shape NAME [--vocab VOCAB.gguf] | --lora RANK -m BASE) --type TYPE -o OUT.gguf", 0},
	{CMD_RUN, "run", cmd_run, "generate text from a prompt", "-m MODEL (-p TEXT | --ids 1,2,3)", 0},
	{CMD_LOGITS, "logits", cmd_logits, "write the logits of every prompt position", "-m MODEL --ids 1,2,3 -o OUT.f32", 0},
	{CMD_LEARN, "learn", cmd_learn, "train a LoRA adapter on examples (JSONL) and save it", "-m MODEL --data FILE.jsonl -o ADAPTER.gguf", 0},
	{CMD_BENCH, "bench", cmd_bench, "measure prompt processing and generation speed", "-m MODEL", 0},
	{CMD_SERVE, "serve", cmd_serve, "serve models over HTTP (OpenAI, Anthropic, Responses and Ollama APIs)", "[-m MODEL]", 0},
	{CMD_PLAN, "plan", cmd_plan, "plan lanes, window and KV for a memory budget from a model's metadata", "-m MODEL", 0},
	{CMD_PULL, "pull", cmd_pull, "download a model into the cache (hf:ORG/REPO/FILE.gguf, ORG/REPO:QUANT, URL)", "REF", 1},
	{CMD_LS, "ls", cmd_ls, "list the models in the cache", "", 0},
	{CMD_RM, "rm", cmd_rm, "delete a model from the cache", "NAME", 1},
	{CMD_EXPERTS, "experts", cmd_experts, "which experts a MoE model uses on a corpus of domains: report, JSON, SVG heat map",
	 "-m MODEL --corpus DIR", 0},
	{CMD_MTP_MERGE, "mtp-merge", cmd_mtp_merge, "add an MTP head (lanes learn --mtp) to its model's GGUF in the standard nextn names",
	 "-m MODEL --draft-head HEAD.gguf -o OUT.gguf", 0},
};
#define N_COMMANDS (int)(sizeof commands / sizeof commands[0])

static void command_list(FILE *f) {
	fprintf(f, "usage: lanes COMMAND [options]\n\ncommands:\n");
	for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].what);
	fprintf(f, "\n`lanes help COMMAND` (or `lanes COMMAND --help`) describes one command; `lanes --version` the build.\n");
}

static const cli_command *find(const char *name) {
	for (int i = 0; i < N_COMMANDS; i++)
		if (!strcmp(name, commands[i].name)) return &commands[i];
	return NULL;
}

static int version(void) {
	base_log_level = LOG_LEVEL_ERROR; // the version alone: the kernel set's log line would repeat stdout's
	const char *names[8];
	const int n = tensor_kernels_available(names, 8);
	printf("%s\nkernels: %s (this CPU runs", base_version_string(), tensor_kernels_name(tensor_kernels_default()));
	for (int i = 0; i < n && i < 8; i++) printf(" %s", names[i]);
	printf(")\nbuild: %s\n", base_build_flags());
	return 0;
}

int main(int argc, char **argv) {
	const cli_command *c = argc >= 2 ? find(argv[1]) : NULL;
	if (c) {
		cli_settings s;
		const int rc = cli_setup(c, argc - 1, argv + 1, &s);
		return rc >= 0 ? rc : cli_model_lookup(&s) ? 1 : c->fn(&s);
	}
	if (cli_env_apply()) return 2;
	// no command is a usage error: the list on stderr, exit 2 (asked for, it goes to stdout)
	if (argc < 2) {
		command_list(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		command_list(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) return version();
	if (!strcmp(argv[1], "help")) {
		if (argc == 2) {
			command_list(stdout);
			return 0;
		}
		// the reference in docs/cli.md is this output
		if (argc == 3 && !strcmp(argv[2], "--markdown")) {
			cli_print_markdown(stdout, commands, N_COMMANDS);
			return 0;
		}
		// what `make install` writes: the manual pages and the shell completions
		if (argc >= 3 && !strcmp(argv[2], "--man")) {
			c = argc == 4 ? find(argv[3]) : NULL;
			if (argc > 4 || (argc == 4 && !c)) {
				fprintf(stderr, "lanes help --man: no command '%s'\n", argc > 3 ? argv[3] : "");
				return 2;
			}
			cli_print_man(stdout, commands, N_COMMANDS, c);
			return 0;
		}
		if (argc == 3 && (!strcmp(argv[2], "--bash") || !strcmp(argv[2], "--zsh"))) {
			(argv[2][2] == 'b' ? cli_print_bash : cli_print_zsh)(stdout, commands, N_COMMANDS);
			return 0;
		}
		c = argc == 3 ? find(argv[2]) : NULL;
		if (!c) {
			fprintf(stderr, "lanes help: no command '%s'\n", argc > 2 ? argv[2] : "");
			command_list(stderr);
			return 2;
		}
		cli_print_help(stdout, c);
		return 0;
	}
	fprintf(stderr, "lanes: unknown command '%s'\n", argv[1]);
	command_list(stderr);
	return 2;
}
