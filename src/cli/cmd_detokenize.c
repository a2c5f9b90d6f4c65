// cli: `lanes detokenize -m MODEL [--special] [--keep-space]` — reads a JSON array of token
// ids from stdin and prints their text exactly, adding nothing (no newline).
#include "base/base.h"
#include "cli/cli.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

int cmd_detokenize(int argc, char **argv) {
	const char *model = NULL;
	bool special = false, keep_space = false, help = false;
	cli_opt opts[] = {
		{"-m|--model", CLI_STR, &model, "GGUF file (a model or a vocab-only file)"},
		{"--special", CLI_FLAG, &special, "render control tokens as their text (\"</s>\")"},
		{"--keep-space", CLI_FLAG, &keep_space, "keep the leading space an SPM vocab prefixes to text"},
		{"-h|--help", CLI_FLAG, &help, "show this help"},
	};
	int nopts = sizeof opts / sizeof opts[0], np = 0;
	if (cli_parse(argc, argv, opts, nopts, NULL, 0, &np)) return 2;
	if (help || !model) {
		cli_usage("lanes detokenize -m MODEL [--special] [--keep-space] < IDS.json", opts, nopts);
		return help ? 0 : 2;
	}
	json_error_t jerr;
	json_t *arr = json_loadf(stdin, 0, &jerr);
	if (!arr || !json_is_array(arr)) {
		fprintf(stderr, "lanes detokenize: stdin must hold a JSON array of token ids%s%s\n", arr ? "" : ": ",
			arr ? "" : jerr.text);
		json_decref(arr);
		return 1;
	}
	size_t n = json_array_size(arr);
	int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
	if (!ids) {
		json_decref(arr);
		fprintf(stderr, "lanes detokenize: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(arr, i);
		json_int_t x = json_is_integer(e) ? json_integer_value(e) : 0;
		if (!json_is_integer(e) || x < INT32_MIN || x > INT32_MAX) {
			fprintf(stderr, "lanes detokenize: element %zu is not a token id\n", i);
			free(ids);
			json_decref(arr);
			return 1;
		}
		ids[i] = (int32_t)x;
	}
	json_decref(arr);
	char err[512];
	gguf *g;
	if (gguf_open(&g, model, err, sizeof err)) {
		fprintf(stderr, "lanes detokenize: %s\n", err);
		free(ids);
		return 1;
	}
	tok_vocab *v;
	int rc = tok_vocab_load(&v, g, err, sizeof err);
	gguf_free(g);
	if (rc) {
		fprintf(stderr, "lanes detokenize: %s: %s\n", model, err);
		free(ids);
		return 1;
	}
	unsigned flags = (special ? TOK_DECODE_SPECIAL : 0) | (keep_space ? 0 : TOK_DECODE_STRIP_SPACE);
	char *text;
	size_t len;
	rc = tok_detokenize(v, ids, n, flags, &text, &len, err, sizeof err);
	free(ids);
	tok_vocab_free(v);
	if (rc) {
		fprintf(stderr, "lanes detokenize: %s\n", err);
		return 1;
	}
	size_t w = fwrite(text, 1, len, stdout);
	free(text);
	return w == len && !fflush(stdout) ? 0 : 1;
}
