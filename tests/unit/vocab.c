// tests: vocabularies from files, shared by the tokenizer's tests and the prompts built over them.
#include "vocab.h"
#include "gguf/gguf.h"

#include <stdio.h>
#include <stdlib.h>

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
