// tests: vocabularies from files — a GGUF's tokenizer, or one of ../shared/vocab by name.
#ifndef LANES_TEST_VOCAB_H
#define LANES_TEST_VOCAB_H

#include "tokenizer/tokenizer.h"

// The vocabulary of the GGUF at path; NULL (the reason on stderr) when it does not load.
tok_vocab *t_vocab_path(const char *path);
// ../shared/vocab/ggml-vocab-NAME.gguf's.
tok_vocab *t_vocab(const char *name);

#endif
