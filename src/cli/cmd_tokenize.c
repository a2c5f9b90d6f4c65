// cli: `lanes tokenize -m MODEL [--no-bos] [--no-parse-special]` — tokenizes stdin verbatim
// (a trailing newline is part of the text) and prints the ids as one JSON array line.
#include "base/base.h"
#include "cli/cli.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>

// Reads all of f; NULL on error. *len gets the byte count.
static char *read_all(FILE *f, size_t *len) {
	size_t cap = 65536, n = 0;
	char *buf = malloc(cap);
	while (buf) {
		n += fread(buf + n, 1, cap - n, f);
		if (n < cap) break;
		char *nb = realloc(buf, cap * 2);
		if (!nb) { free(buf); return NULL; }
		buf = nb;
		cap *= 2;
	}
	if (buf && ferror(f)) { free(buf); return NULL; }
	*len = n;
	return buf;
}

int cmd_tokenize(int argc, char **argv) {
	const char *model = NULL;
	bool no_bos = false, no_parse = false, help = false;
	cli_opt opts[] = {
		{"-m|--model", CLI_STR, &model, "GGUF file (a model or a vocab-only file)"},
		{"--no-bos", CLI_FLAG, &no_bos, "add no BOS/EOS even where the vocab asks for them"},
		{"--no-parse-special", CLI_FLAG, &no_parse, "keep control-token text (\"<s>\") as plain text"},
		{"-h|--help", CLI_FLAG, &help, "show this help"},
	};
	int nopts = sizeof opts / sizeof opts[0], np = 0;
	if (cli_parse(argc, argv, opts, nopts, NULL, 0, &np)) return 2;
	if (help || !model) {
		cli_usage("lanes tokenize -m MODEL [--no-bos] [--no-parse-special] < TEXT", opts, nopts);
		return help ? 0 : 2;
	}
	char err[512];
	gguf *g;
	if (gguf_open(&g, model, err, sizeof err)) {
		fprintf(stderr, "lanes tokenize: %s\n", err);
		return 1;
	}
	tok_vocab *v;
	int rc = tok_vocab_load(&v, g, err, sizeof err);
	gguf_free(g);
	if (rc) {
		fprintf(stderr, "lanes tokenize: %s: %s\n", model, err);
		return 1;
	}
	size_t len;
	char *text = read_all(stdin, &len);
	if (!text) {
		fprintf(stderr, "lanes tokenize: cannot read stdin\n");
		tok_vocab_free(v);
		return 1;
	}
	int32_t *ids;
	size_t n;
	rc = tok_encode(v, text, len, !no_bos, !no_parse, &ids, &n, err, sizeof err);
	free(text);
	tok_vocab_free(v);
	if (rc) {
		fprintf(stderr, "lanes tokenize: %s\n", err);
		return 1;
	}
	putchar('[');
	for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
	puts("]");
	free(ids);
	return fflush(stdout) ? 1 : 0;
}
