// tests: training examples read from a JSONL file of {"prompt", "completion"} lines, shared by
// the training and learning-while-serving tests.
#ifndef LANES_TEST_STORIES_H
#define LANES_TEST_STORIES_H

#include "learn/learn.h"
#include "tokenizer/tokenizer.h"

// Up to n examples from the first lines of path, each cut to at most cut (<= 512) tokens; their count.
int t_read_stories(const tok_vocab *v, const char *path, int n, int cut, learn_example **ex);

#endif
