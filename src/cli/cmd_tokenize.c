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

int cmd_tokenize(const cli_settings *s) {
	char err[512];
	tok_vocab *v;
	if (cli_load_vocab(s->model, &v)) return 1;
	size_t len;
	char *text = read_all(stdin, &len);
	if (!text) {
		cli_err("cannot read stdin");
		tok_vocab_free(v);
		return 1;
	}
	int32_t *ids;
	size_t n;
	int rc = tok_encode(v, text, len, !s->no_bos, !s->no_parse_special, &ids, &n, err, sizeof err);
	free(text);
	tok_vocab_free(v);
	if (rc) {
		cli_err("%s", err);
		return 1;
	}
	putchar('[');
	for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
	puts("]");
	free(ids);
	return fflush(stdout) ? 1 : 0;
}
