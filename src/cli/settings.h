// cli/settings: every option and environment knob of `lanes` in one table — spellings,
// environment variable, field, default, range, help — and the parser, validator and help
// printer the subcommands share. A bad value is an error naming it and its range.
#ifndef LANES_CLI_SETTINGS_H
#define LANES_CLI_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// The subcommands; a setting names those that take it as bits (1u << CMD_x).
enum cli_cmd {
	CMD_INFO, CMD_QUANTIZE, CMD_GEN, CMD_TOKENIZE, CMD_DETOKENIZE, CMD_TEMPLATE,
	CMD_RUN, CMD_LOGITS, CMD_LEARN, CMD_BENCH, CMD_SERVE, CMD_PLAN, CMD_PULL, CMD_LS, CMD_RM, CMD_EXPERTS, CMD_MTP_MERGE, CMD_COUNT
};

// A repeatable option's values, in the order given (they point into argv).
#define CLI_LIST_MAX 16
typedef struct {
	const char *v[CLI_LIST_MAX];
	int n;
} cli_list;

// Every value any command takes; each setting of the table writes one field.
typedef struct {
	// files and texts
	const char *grammar_file, *json_schema_file, *data_file, *eval_file, *from_adapter;
	const char *model, *prompt, *ids, *output, *vocab, *shape, *type, *file, *messages, *bos, *eos, *date;
	const char *host, *api_key, *chat_template, *memory, *draft_model, *draft_head, *hf_token, *hf_endpoint, *models_dir, *adapters_dir;
	const char *corpus, *svg, *imatrix;
	const char *cache_dir, *cache_dir_max, *keep_alive, *mtp_memory;
	const char *peer_key;
	// choices (validated: one of the setting's choices)
	const char *kv_type, *draft_mode, *log, *log_format, *kernels, *attn, *pooling, *experts, *activations, *reasoning_format, *compact_weights;
	// numbers
	int64_t n_predict, top_k, seed, threads, chunk, n_prompt, n_gen, reps, depth, concurrent, lanes, fill, req_prompt;
	int64_t port, max_body, window, ctx, queue, piece, max_connections, draft_max, max_per_ip, idle_timeout, http_threads;
	int64_t max_output_bytes, max_tokenize_bytes, lora_rank, max_lora, max_models, corpus_tokens, steps, batch, max_tokens;
	int64_t serve_max_tokens, responses_store, overflow_queue, peer_poll_ms, peer_timeout_ms, pull_stall_s, pull_max_bytes;
	int64_t pull_tries, pull_retry_ms, pull_retry_max_ms, think_budget, mtp_gen;
	int64_t dry_allowed_length, dry_penalty_last_n, mirostat;
	double dry_multiplier, dry_base, xtc_probability, xtc_threshold, top_n_sigma, dynatemp_range, dynatemp_exp, mirostat_lr, mirostat_ent;
	const char *samplers, *sampling_seq;
	double temp, top_p, min_p, round_ms, price_row_us, price_fixed_us, drain_s, header_timeout, lr, alpha, weight_decay, clip, learn_share, stream_flush_ms, end_logit;
	cli_list allowed_host, cors_origin, lora, peer, dry_breaker, alias, serve_models_dir; // repeatable
	// switches
	bool help, json, protect_control, print_ids, no_bos, no_parse_special, special, keep_space, add_generation_prompt, draft, repetitive,
		embeddings, strict_params, mtp, strict_model, lora_zero_b, no_webui, metrics_experts, allow_unauth_mutations,
		think, no_think;
	const char *pos[3]; // positional arguments, npos of them
	int npos;
	uint64_t given[4];  // bit i: setting i was given (flag or environment)
	const struct cli_command *cmd; // the command they were parsed for
} cli_settings;

enum cli_kind { SET_STR, SET_INT, SET_FLOAT, SET_FLAG, SET_CHOICE, SET_LIST /* repeatable: a cli_list */ };

typedef struct {
	const char *names;  // "-t|--threads": every spelling; NULL for an environment-only knob
	const char *env;    // "LANES_LOG"; NULL when no variable sets it
	enum cli_kind kind;
	size_t field;       // offsetof(cli_settings, ...)
	const char *dflt;   // parsed as a given value would be; NULL: none (the field stays 0 / NULL)
	double min, max;    // range of SET_INT and SET_FLOAT values (INT64_MAX: any)
	const char *meta;   // the value's name in usage ("N"); for SET_CHOICE the choices, "a|b|c"
	uint32_t cmds, req; // the commands that take it, and those that cannot do without it
	const char *help;   // one line: what it does (the default and range are printed from the table)
} cli_setting;

extern const cli_setting cli_settings_table[];
extern const int cli_settings_count;

typedef struct cli_command {
	enum cli_cmd id;
	const char *name;
	int (*fn)(const cli_settings *s);
	const char *what; // one line for the command list
	const char *head; // the synopsis's required part; the options it names are not listed again
	int npos;         // positional arguments it takes, exactly
} cli_command;

// Fills s with the defaults, then the environment, then argv[1..] (argv[0] is the command's
// name). Returns -1 when the command should run, else the exit code: 0 after --help, 2 after
// printing the error (a bad value names the option and its range).
int cli_setup(const cli_command *c, int argc, char **argv, cli_settings *s);
// The environment knobs every command shares (LANES_LOG, LANES_KERNELS, LANES_ATTN), checked
// and handed to the libraries; 0, or 2 after printing the error. Test binaries call it too.
int cli_env_apply(void);
// Whether the setting that writes field (a pointer into s) was given.
bool cli_given(const cli_settings *s, const void *field);
// Index of value among choices "a|b|c"; -1 when it is none of them.
int cli_choice_index(const char *choices, const char *value);

void cli_print_help(FILE *f, const cli_command *c);
void cli_print_usage_line(FILE *f, const cli_command *c);
void cli_print_markdown(FILE *f, const cli_command *cmds, int n);
// The manual page of c in man(7) roff; c NULL: lanes(1), the command list.
void cli_print_man(FILE *f, const cli_command *cmds, int n, const cli_command *c);
// Completion scripts for bash and zsh: the commands, each one's options and their choices.
void cli_print_bash(FILE *f, const cli_command *cmds, int n);
void cli_print_zsh(FILE *f, const cli_command *cmds, int n);
// cli_err's message, then the command's usage line; returns 2, the exit code of bad arguments.
int cli_usage_error(const cli_settings *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Prints "lanes CMD: " and the message to stderr (CMD: the command cli_setup last saw).
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// Checks the table itself: defaults parse and sit in range, no command sees one spelling twice.
int cli_settings_check(char *err, size_t errlen);

#endif
