// cli: the `lanes` command and its subcommands; one file per subcommand, each
// `int cmd_NAME(const cli_settings *s)` run on the settings cli_setup parsed, returning the
// process exit code. What several commands share is declared here (common.c).
#ifndef LANES_CLI_H
#define LANES_CLI_H

#include "base/base.h"
#include "cli/settings.h"
#include "kv/kv.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

int cmd_info(const cli_settings *s);
int cmd_quantize(const cli_settings *s);
int cmd_gen(const cli_settings *s);
int cmd_tokenize(const cli_settings *s);
int cmd_detokenize(const cli_settings *s);
int cmd_template(const cli_settings *s);
int cmd_run(const cli_settings *s);
int cmd_logits(const cli_settings *s);
int cmd_learn(const cli_settings *s);
int cmd_bench(const cli_settings *s);
int cmd_serve(const cli_settings *s);
int cmd_plan(const cli_settings *s);
int cmd_pull(const cli_settings *s);
int cmd_ls(const cli_settings *s);
int cmd_rm(const cli_settings *s);
// The model cache (cmd_pull.c): ref (hf:ORG/REPO/FILE.gguf, ORG/REPO:QUANT, an http(s) URL)
// downloaded unless cached; its path into path. Prints its error and returns -1, else 0.
int cli_pull(const cli_settings *s, const char *ref, char *path, size_t n);
// Whether serve's -m names something to pull rather than a file.
bool cli_is_pull_ref(const char *model);

// Each prints its error (cli_err) and returns -1, else 0:
// "1,2,3" or "[1, 2, 3]" into a malloc'd list;
int cli_parse_ids(const char *s, int32_t **ids, size_t *n);
// a pool of `want` threads (0: one per core);
int cli_threads(int64_t want, base_pool **pool);
// a model and, when voc is not NULL, its vocabulary;
int cli_load_model(const char *path, model **m, tok_vocab **voc);
// the vocabulary of a GGUF file (a model or a vocab-only file).
int cli_load_vocab(const char *path, tok_vocab **voc);
// the --lora PATH[:SCALE] adapters for m, in order, into set (*loras: set->n of them, to free
// with cli_free_loras);
int cli_load_loras(const model *m, const cli_list *l, model_lora_set *set, model_lora ***loras);
void cli_free_loras(model_lora **loras, int n);
// The kv type of a validated --kv-type value.
enum kv_type cli_kv_type(const char *name);
// All of the file at path, NUL-terminated (free() it), its size in *len; NULL on error (errno).
char *cli_read_file(const char *path, size_t *len);
// The grammar `lanes run` constrains to: --grammar FILE (GBNF) or --json-schema FILE; *g NULL
// when neither is given. 0, or 1 after printing the error.
struct grammar;
int cli_grammar(const cli_settings *s, struct grammar **g);

#endif
