// cli: the `lanes` command and its subcommands; one file per subcommand, each
// `int cmd_NAME(int argc, char **argv)` returning the process exit code.
#ifndef LANES_CLI_H
#define LANES_CLI_H

#include <stdbool.h>
#include <stdint.h>

enum cli_kind { CLI_STR, CLI_INT, CLI_FLOAT, CLI_FLAG };

typedef struct {
	const char *names; // "-m|--model": every spelling, separated by '|'
	enum cli_kind kind;
	void *dst;         // const char **, int64_t *, double *, bool *
	const char *help;  // one line for usage
} cli_opt;

// Parses argv[1..] (argv[0] is the subcommand). Options accept `--flag value` and
// `--flag=value`; other words go to pos (at most maxpos). Returns 0, or -1 after printing
// a clear error to stderr.
int cli_parse(int argc, char **argv, const cli_opt *opts, int nopts, const char **pos, int maxpos,
	      int *npos);
void cli_usage(const char *synopsis, const cli_opt *opts, int nopts);

int cmd_info(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_gen(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_plan(int argc, char **argv);
// Shared by run, logits and bench (cmd_run.c): "1,2,3" or "[1, 2, 3]" into a malloc'd list;
// a kv type by name; a pool of `want` threads (<= 0: one per core). Each prints its error.
#include "kv/kv.h"
#include "base/base.h"
int cli_parse_ids(const char *s, int32_t **ids, size_t *n);
int cli_kv_type(const char *name, enum kv_type *out);
int cli_threads(int64_t want, lanes_pool **pool);

#endif
