// cli: what `lanes bench` shares between its files.
#ifndef LANES_CLI_BENCH_H
#define LANES_CLI_BENCH_H

#include "lanes/lanes.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

typedef struct {
	int32_t concurrent;   // requests at once (1: a single stream)
	int32_t lanes;        // lanes of the host (0: one per request, plus one for the filler)
	int32_t n_gen;        // tokens each request generates
	int32_t n_prompt;     // prompt tokens of each request besides BOS
	int32_t fill;         // > 0: one more request with a prompt this long fills while they decode
	int32_t threads;      // 0: one per core
	enum kv_type kv_type;
	bool draft;           // requests allow drafting (n-gram, and the draft model when given)
	const model *draft_model;
	bool repetitive;      // prompts repeat one short phrase (where prompt lookup shines)
	const model_lora_set *lora_sets; // request i adds lora_sets[i % n_lora_sets] (the filler none)
	int32_t n_lora_sets;
	bool no_experts;      // the host runs without the expert observer (MoE models)
	const int32_t *text;  // n_text > 0: each prompt is BOS, a token of its own, then these (n_prompt unused)
	int32_t n_text;
} bench_lanes_opts;

typedef struct {
	int32_t tokens;       // generated in all
	double seconds;       // from the first submit to the last token
	double tps;           // aggregate tokens/s
	double tg_tps;        // tg_tokens / tg_seconds
	int32_t tg_tokens;    // tokens after each request's first
	double tg_seconds;    // from the first token to the last, by the engine's clock
	double ttft_ms;       // to the first token of any request
	double itl_p50_ms, itl_p99_ms; // gaps between a request's consecutive tokens
	uint64_t drafted, accepted;    // draft tokens proposed and accepted
	uint64_t mtp_at[LANE_MAX_DRAFT], mtp_accepted_at[LANE_MAX_DRAFT]; // the MTP head's, by position
} bench_lanes_result;

// Runs the requests through a lane host of its own; 0 or an error with a message (a request
// that ended before its n_gen tokens is one).
int bench_lanes(const model *m, const tok_vocab *voc, const bench_lanes_opts *o, bench_lanes_result *res, char *err,
		size_t errlen);

#endif
