// tests: vocabularies from files — a GGUF's tokenizer, or one of ../shared/vocab by name.
#ifndef LANES_TEST_VOCAB_H
#define LANES_TEST_VOCAB_H

#include "tokenizer/tokenizer.h"

// The vocabulary of the GGUF at path; NULL (the reason on stderr) when it does not load.
tok_vocab *t_vocab_path(const char *path);
// ../shared/vocab/ggml-vocab-NAME.gguf's.
tok_vocab *t_vocab(const char *name);
// The texts of ids[0..n) into out (cap bytes, cut short there), spaces between, U+2581 as '_'.
void t_pieces(const tok_vocab *v, const int32_t *ids, size_t n, char *out, size_t cap);

#endif
