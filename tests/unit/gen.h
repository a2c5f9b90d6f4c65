// tests: models with random weights written by `lanes gen` (cmd_gen, in process), for the
// architectures the shared files do not cover.
#ifndef LANES_TEST_GEN_H
#define LANES_TEST_GEN_H

// `lanes gen --shape shape --type type --vocab vocab -o out` (vocab NULL: none, a bert shape); 0 on success.
int t_gen_model(const char *shape, const char *type, const char *vocab, const char *out);

#endif
