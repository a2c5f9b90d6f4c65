// cli: `lanes detokenize -m MODEL [--special] [--keep-space]` — reads a JSON array of token
// ids from stdin and prints their text exactly, adding nothing (no newline).
#include "base/base.h"
#include "cli/cli.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

int cmd_detokenize(const cli_settings *s) {
	json_error_t jerr;
	json_t *arr = json_loadf(stdin, 0, &jerr);
	if (!arr || !json_is_array(arr)) {
		cli_err("stdin must hold a JSON array of token ids%s%s", arr ? "" : ": ", arr ? "" : jerr.text);
		json_decref(arr);
		return 1;
	}
	size_t n = json_array_size(arr);
	int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
	if (!ids) {
		json_decref(arr);
		cli_err("out of memory");
		return 1;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(arr, i);
		json_int_t x = json_is_integer(e) ? json_integer_value(e) : 0;
		if (!json_is_integer(e) || x < INT32_MIN || x > INT32_MAX) {
			cli_err("element %zu is not a token id", i);
			free(ids);
			json_decref(arr);
			return 1;
		}
		ids[i] = (int32_t)x;
	}
	json_decref(arr);
	char err[512];
	tok_vocab *v;
	if (cli_load_vocab(s->model, &v)) {
		free(ids);
		return 1;
	}
	unsigned flags = (s->special ? TOK_DECODE_SPECIAL : 0) | (s->keep_space ? 0 : TOK_DECODE_STRIP_SPACE);
	char *text;
	size_t len;
	int rc = tok_detokenize(v, ids, n, flags, &text, &len, err, sizeof err);
	free(ids);
	tok_vocab_free(v);
	if (rc) {
		cli_err("%s", err);
		return 1;
	}
	size_t w = fwrite(text, 1, len, stdout);
	free(text);
	return w == len && !fflush(stdout) ? 0 : 1;
}
