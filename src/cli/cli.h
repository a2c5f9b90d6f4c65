// cli: the `lanes` command and its subcommands; one file per subcommand, each
// `int cmd_NAME(const cli_settings *s)` run on the settings cli_setup parsed, returning the
// process exit code. What several commands share is declared here (common.c).
#ifndef LANES_CLI_H
#define LANES_CLI_H

#include "base/base.h"
#include "cli/settings.h"
#include "kv/kv.h"
#include "lanes/lanes.h"
#include "model/model.h"
#include "pull/pull.h"
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
// {http_config's name of a setting, serve's flag}, ending with {NULL, NULL}: how the server's
// messages name what `lanes serve` was given.
extern const char *const cli_serve_flags[][2];
int cmd_plan(const cli_settings *s);
int cmd_pull(const cli_settings *s);
int cmd_ls(const cli_settings *s);
int cmd_rm(const cli_settings *s);
int cmd_experts(const cli_settings *s);
int cmd_mtp_merge(const cli_settings *s);
// The model cache (cmd_pull.c over src/pull): ref (hf:ORG/REPO/FILE.gguf, ORG/REPO:QUANT, an
// http(s) URL) downloaded unless cached; its path into path. Prints its error and returns -1, else 0.
int cli_pull(const cli_settings *s, const char *ref, char *path, size_t n);
// The cache settings (LANES_MODELS, the hub, its token and bounds) as src/pull takes them.
void cli_pull_config(const cli_settings *s, pull_config *c);
// Whether serve's -m names something to pull rather than a file.
bool cli_is_pull_ref(const char *model);
// -m NAME when no file has that name: the cached model `lanes ls` calls NAME (s->model then
// points at its file). Prints its error and returns 1 when NAME is only a partial download, or
// a reference to pull that only serve pulls; else 0.
int cli_model_lookup(cli_settings *s);

// Each prints its error (cli_err) and returns -1, else 0:
// "1,2,3" or "[1, 2, 3]" into a malloc'd list;
int cli_parse_ids(const char *s, int32_t **ids, size_t *n);
// a pool of `want` threads (0: one per core);
int cli_threads(int64_t want, base_pool **pool);
// a model and, when voc is not NULL, its vocabulary;
int cli_load_model(const char *path, model **m, tok_vocab **voc);
// The same with the MTP head of file head (NULL: none) in place of the model's own.
int cli_load_model_head(const char *path, const char *head, model **m, tok_vocab **voc);
// the vocabulary of a GGUF file (a model or a vocab-only file).
int cli_load_vocab(const char *path, tok_vocab **voc);
// "PATH:SCALE" when what follows the last ':' is a number (*scale), else all of arg is the
// path (scale 1);
void cli_split_lora(const char *arg, char *path, size_t n, float *scale);
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
// The samplers' settings (--dry-*, --xtc-*, --top-nsigma, --dynatemp-*, --mirostat*, --samplers,
// --sampling-seq) into sp. 0, or 2 after printing the error.
int cli_sampling(const cli_settings *s, lane_sampling *sp);

// ---- progress (progress.c): one display for every long step ----------------------------------
// On a terminal (stderr) a bar redrawn in place; otherwise a plain line at each tenth when
// `lines`, else nothing. Nothing at all below LANES_LOG=info.
typedef struct {
	const char *what;  // the display's name: "pull", "load", ...
	bool bytes;        // amounts are bytes: shown in MiB, with the rate and the time left
	bool tty, on;      // stderr is a terminal; anything is shown
	bool drawn;        // a bar is on screen, without its newline
	uint64_t t0_us, last_us;
	int64_t t0_done;   // done at the first update: the rate counts what this run adds
	int last_step;     // the last tenth printed as a plain line
} cli_progress;
void cli_progress_start(cli_progress *p, const char *what, bool bytes, bool lines);
// done of total (total <= 0: unknown); note (NULL: none) follows the bar, e.g. a tensor's name.
void cli_progress_update(cli_progress *p, int64_t done, int64_t total, const char *note);
void cli_progress_clear(cli_progress *p); // wipes the bar before another line is printed
void cli_progress_end(cli_progress *p);   // leaves the bar as drawn, with its newline
// A model_progress_fn over a started cli_progress (ud): updates it and ends it when whole.
void cli_progress_model(void *ud, uint64_t done, uint64_t total);

#endif
