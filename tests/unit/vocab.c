// tests: vocabularies from files, shared by the tokenizer's tests and the prompts built over them.
#include "vocab.h"
#include "gguf/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tok_vocab *t_vocab_path(const char *path) {
	char err[512];
	gguf *g;
	if (gguf_open(&g, path, err, sizeof err)) {
		fprintf(stderr, "%s: %s\n", path, err);
		return NULL;
	}
	tok_vocab *v = NULL;
	if (tok_vocab_load(&v, g, err, sizeof err)) fprintf(stderr, "%s: %s\n", path, err);
	gguf_free(g);
	return v;
}

tok_vocab *t_vocab(const char *name) {
	char path[1024];
	const char *shared = getenv("LANES_SHARED"); // as t_shared reads it
	snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", shared && *shared ? shared : "../shared", name);
	return t_vocab_path(path);
}

void t_pieces(const tok_vocab *v, const int32_t *ids, size_t n, char *out, size_t cap) {
	size_t at = 0;
	for (size_t i = 0; i < n && at + 2 < cap; i++) {
		size_t len;
		const char *t = tok_text(v, ids[i], &len);
		if (i) out[at++] = ' ';
		for (size_t j = 0; j < len && at + 1 < cap;)
			if (len - j >= 3 && !memcmp(t + j, "\xE2\x96\x81", 3)) out[at++] = '_', j += 3;
			else out[at++] = t[j++];
	}
	out[at] = 0;
}
