// cli/settings: the one table of every option and environment knob of `lanes` (Redis's
// habit: {name, bounds, default, field}), and what reads it: the argv and environment
// parser, the validator, `--help`, the command list's markdown for docs/cli.md, and the
// hand-off of the shared knobs to the libraries (which never read the environment).
#include "cli/settings.h"
#include "server/server.h"
#include "base/base.h"
#include "model/model.h"
#include "tensor/tensor.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

// A default said where the library says it: its macro, as the table's text.
#define SAID_(x) #x
#define SAID(x) SAID_(x)
// a library's range (its MIN, MAX macro) as the table's bounds
#define RANGE_(lo, hi) .min = (lo), .max = (hi)
#define RANGE(r) RANGE_(r)

#define F(x) offsetof(cli_settings, x)
#define B(c) (1u << CMD_##c)
#define ALL ((1u << CMD_COUNT) - 1)
#define MODEL_CMDS (B(TOKENIZE) | B(DETOKENIZE) | B(RUN) | B(LOGITS) | B(LEARN) | B(BENCH) | B(SERVE) | B(PLAN) | B(EXPERTS) | B(MTP_MERGE))
#define THREAD_CMDS (B(QUANTIZE) | B(GEN) | B(RUN) | B(LOGITS) | B(LEARN) | B(BENCH) | B(SERVE) | B(PLAN) | B(EXPERTS))
#define KV_CMDS (B(RUN) | B(LOGITS) | B(BENCH) | B(SERVE) | B(PLAN))
#define I32 2147483647
#define I64 INT64_MAX

// Rows for one command are printed in table order; a spelling may recur for other commands.
const cli_setting cli_settings_table[] = {
	{.names = "-m|--model", .kind = SET_STR, .field = F(model), .meta = "MODEL", .cmds = MODEL_CMDS | B(TEMPLATE), .req = MODEL_CMDS & ~B(SERVE),
	 .help = "GGUF file (a vocab-only file does for tokenize, detokenize and template)"},
	{.names = "-m|--model", .kind = SET_STR, .field = F(model), .meta = "BASE", .cmds = B(GEN),
	 .help = "with --lora: the base model the adapter is for"},
	{.names = "--lora", .kind = SET_LIST, .field = F(lora), .meta = "PATH[:SCALE]", .cmds = B(RUN) | B(LOGITS),
	 .help = "a LoRA adapter (GGUF) for the model, its scale 1 unless given; several add up in order"},
	{.names = "--lora", .kind = SET_LIST, .field = F(lora), .meta = "PATH[:SCALE]", .cmds = B(BENCH),
	 .help = "with --concurrent: a LoRA adapter; request i uses adapter i mod the adapters given"},
	{.names = "--lora", .kind = SET_INT, .field = F(lora_rank), .min = 1, .max = 4096, .meta = "RANK", .cmds = B(GEN),
	 .help = "write a random LoRA adapter of this rank for -m BASE instead of a model"},
	{.names = "--lora-zero-b", .kind = SET_FLAG, .field = F(lora_zero_b), .cmds = B(GEN),
	 .help = "with --lora: B = 0, so the adapter changes nothing"},
	{.names = "--end-logit", .kind = SET_FLOAT, .field = F(end_logit), .dflt = "0", .min = 0, .max = 1000, .meta = "L", .cmds = B(GEN),
	 .help = "give the end-of-turn token a logit of about L at every position (one residual dimension held constant that only its output row reads), so a random model ends its turns; 0: off"},
	{.names = "--data", .kind = SET_STR, .field = F(data_file), .meta = "FILE.jsonl", .cmds = B(LEARN), .req = B(LEARN),
	 .help = "training examples, one JSON object a line: {\"messages\": [...]} (the assistant turns learned) or {\"prompt\", \"completion\"}"},
	{.names = "--eval", .kind = SET_STR, .field = F(eval_file), .meta = "FILE.jsonl", .cmds = B(LEARN),
	 .help = "held-out examples (the same format): their loss before and after training"},
	{.names = "-o|--output", .kind = SET_STR, .field = F(output), .meta = "ADAPTER.gguf", .cmds = B(LEARN), .req = B(LEARN),
	 .help = "the trained adapter, a GGUF LoRA file that lanes and llama.cpp load (with --mtp: the head, which --draft-head loads)"},
	{.names = "-o|--output", .kind = SET_STR, .field = F(output), .meta = "OUT.gguf", .cmds = B(MTP_MERGE), .req = B(MTP_MERGE),
	 .help = "the model with the head's layers after its trunk, in the standard nextn names"},
	{.names = "--mtp", .kind = SET_FLAG, .field = F(mtp), .cmds = B(LEARN),
	 .help = "train an MTP head (the trunk frozen) on the model's own choices instead of a LoRA adapter: -o is the head's GGUF"},
	{.names = "--gen", .kind = SET_INT, .field = F(mtp_gen), .dflt = "0", .min = 0, .max = 1 << 20, .meta = "N", .cmds = B(LEARN),
	 .help = "with --mtp: the head learns from the model's own N-token continuations of windows of the examples' text, one every 16 tokens (0: the model's choices along the examples' own text)"},
	{.names = "--mtp-memory", .kind = SET_STR, .field = F(mtp_memory), .dflt = "2GiB", .meta = "SIZE", .cmds = B(LEARN),
	 .help = "with --mtp: the most the model's states of the training sequences take at once; past it the examples are run through the model in shards, again at each pass over them"},
	{.names = "--temp", .kind = SET_FLOAT, .field = F(temp), .dflt = "0", .min = 0, .max = 2, .meta = "T", .cmds = B(LEARN),
	 .help = "with --mtp --gen: the continuations are drawn at this temperature (from --seed) for more varied text; the head learns the greedy choice either way (0: greedy)"},
	{.names = "--imatrix", .kind = SET_STR, .field = F(imatrix), .meta = "FILE", .cmds = B(QUANTIZE),
	 .help = "an importance matrix (llama-imatrix's GGUF or .dat): the K-quant, IQ4, IQ3, IQ2 and IQ1 tensors are fitted closest where it says the inputs are large"},
	{.names = "--draft-head", .kind = SET_STR, .field = F(draft_head), .meta = "HEAD.gguf", .cmds = B(MTP_MERGE), .req = B(MTP_MERGE),
	 .help = "the MTP head (lanes learn --mtp) to add to the model"},
	{.names = "--from", .kind = SET_STR, .field = F(from_adapter), .meta = "ADAPTER.gguf", .cmds = B(LEARN),
	 .help = "go on training this adapter (its rank and alpha) instead of a new one"},
	{.names = "--rank", .kind = SET_INT, .field = F(lora_rank), .dflt = "8", .min = 1, .max = 4096, .meta = "R", .cmds = B(LEARN),
	 .help = "rank of the new adapter on every attention and FFN projection"},
	{.names = "--alpha", .kind = SET_FLOAT, .field = F(alpha), .dflt = "0", .min = 0, .max = 1000000, .meta = "A", .cmds = B(LEARN),
	 .help = "the new adapter's alpha: its terms are scaled by alpha / rank (0: alpha = rank)"},
	{.names = "--steps", .kind = SET_INT, .field = F(steps), .dflt = "100", .min = 1, .max = 100000000, .meta = "N", .cmds = B(LEARN),
	 .help = "optimizer steps (the examples are cycled, shuffled each pass)"},
	{.names = "--batch", .kind = SET_INT, .field = F(batch), .dflt = "4", .min = 1, .max = 65536, .meta = "N", .cmds = B(LEARN),
	 .help = "examples per step"},
	{.names = "--lr", .kind = SET_FLOAT, .field = F(lr), .dflt = "0.001", .min = 0, .max = 10, .meta = "F", .cmds = B(LEARN),
	 .help = "AdamW learning rate"},
	{.names = "--weight-decay", .kind = SET_FLOAT, .field = F(weight_decay), .dflt = "0.01", .min = 0, .max = 100, .meta = "F",
	 .cmds = B(LEARN), .help = "AdamW's decoupled weight decay"},
	{.names = "--clip", .kind = SET_FLOAT, .field = F(clip), .dflt = "1", .min = 0, .max = 1000000000, .meta = "F", .cmds = B(LEARN),
	 .help = "clip the gradient's global L2 norm to this (0 = off)"},
	{.names = "--max-tokens", .kind = SET_INT, .field = F(max_tokens), .dflt = "512", .min = 2, .max = 1 << 24, .meta = "N",
	 .cmds = B(LEARN), .help = "examples longer than this are cut to their first N tokens"},
	{.names = "--piece", .kind = SET_INT, .field = F(piece), .dflt = "64", .min = 1, .max = 65536, .meta = "N", .cmds = B(LEARN),
	 .help = "tokens per piece of a step (the gradient rounds differently per piece size; the loss does not)"},
	{.names = "--seed", .kind = SET_INT, .field = F(seed), .dflt = "1", .min = 0, .max = I64, .meta = "S", .cmds = B(LEARN),
	 .help = "random seed: the new adapter's A and the order of the examples"},
	{.names = "--type", .kind = SET_STR, .field = F(type), .dflt = "F32", .meta = "TYPE", .cmds = B(LEARN),
	 .help = "the saved adapter's type: F32, F16, BF16 or Q8_0"},
	{.names = "-p|--prompt", .kind = SET_STR, .field = F(prompt), .meta = "TEXT", .cmds = B(RUN), .help = "prompt text (BOS added as the vocab says)"},
	{.names = "--text", .kind = SET_STR, .field = F(prompt), .meta = "TEXT", .cmds = B(BENCH),
	 .help = "with --concurrent: each request's prompt is BOS, a token of its own, then this text (in place of --req-prompt random tokens)"},
	{.names = "--ids", .kind = SET_STR, .field = F(ids), .meta = "1,2,3", .cmds = B(RUN) | B(LOGITS), .req = B(LOGITS),
	 .help = "token ids, used exactly"},
	{.names = "-o|--output", .kind = SET_STR, .field = F(output), .meta = "FILE", .cmds = B(LOGITS) | B(GEN), .req = B(LOGITS) | B(GEN),
	 .help = "output file (logits: float32 [positions][vocab])"},
	{.names = "-n|--n-predict", .kind = SET_INT, .field = F(n_predict), .dflt = "64", .min = 0, .max = 1 << 24, .meta = "N",
	 .cmds = B(RUN), .help = "tokens to generate"},
	{.names = "--temp", .kind = SET_FLOAT, .field = F(temp), .dflt = "0.8", .min = 0, .max = 2, .meta = "T", .cmds = B(RUN),
	 .help = "temperature (0 = greedy)"},
	{.names = "--top-k", .kind = SET_INT, .field = F(top_k), .dflt = "40", .min = 0, .max = I32, .meta = "K", .cmds = B(RUN),
	 .help = "keep the k most likely tokens (0 = all)"},
	{.names = "--top-p", .kind = SET_FLOAT, .field = F(top_p), .dflt = "0.95", .min = 0, .max = 1, .meta = "P", .cmds = B(RUN),
	 .help = "nucleus probability, above 0 (1 = off)"},
	{.names = "--min-p", .kind = SET_FLOAT, .field = F(min_p), .dflt = "0", .min = 0, .max = 1, .meta = "P", .cmds = B(RUN),
	 .help = "drop tokens below min-p x the top one (0 = off)"},
	// the samplers people tune, by llama-server's flags: serve's every request starts from them
	{.names = "--dry-multiplier", .kind = SET_FLOAT, .field = F(dry_multiplier), .dflt = "0", RANGE(LANE_RANGE_DRY_MULTIPLIER), .meta = "N",
	 .cmds = B(RUN) | B(SERVE), .help = "DRY: a token that would extend a repeat of n tokens loses N x base^(n - allowed length) (0 = off)"},
	{.names = "--dry-base", .kind = SET_FLOAT, .field = F(dry_base), .dflt = SAID(LANE_DEFAULT_DRY_BASE), RANGE(LANE_RANGE_DRY_BASE), .meta = "N",
	 .cmds = B(RUN) | B(SERVE), .help = "DRY: the penalty's base"},
	{.names = "--dry-allowed-length", .kind = SET_INT, .field = F(dry_allowed_length), .dflt = SAID(LANE_DEFAULT_DRY_ALLOWED_LENGTH),
	 RANGE(LANE_RANGE_DRY_ALLOWED_LENGTH), .meta = "N", .cmds = B(RUN) | B(SERVE), .help = "DRY: repeats this long go free"},
	{.names = "--dry-penalty-last-n", .kind = SET_INT, .field = F(dry_penalty_last_n), .dflt = SAID(LANE_DEFAULT_DRY_PENALTY_LAST_N),
	 RANGE(LANE_RANGE_DRY_PENALTY_LAST_N), .meta = "N", .cmds = B(RUN) | B(SERVE), .help = "DRY: the context's last N tokens are scanned (-1 = all, 0 = off)"},
	{.names = "--dry-sequence-breaker", .kind = SET_LIST, .field = F(dry_breaker), .meta = "TEXT", .cmds = B(RUN) | B(SERVE),
	 .help = "DRY: a token whose text holds TEXT breaks a repeat (default: newline, colon, double quote, asterisk; none = no breakers)"},
	{.names = "--xtc-probability", .kind = SET_FLOAT, .field = F(xtc_probability), .dflt = "0", RANGE(LANE_RANGE_XTC_PROBABILITY), .meta = "P",
	 .cmds = B(RUN) | B(SERVE), .help = "XTC: the chance it drops the likely tokens at a position (0 = off)"},
	{.names = "--xtc-threshold", .kind = SET_FLOAT, .field = F(xtc_threshold), .dflt = SAID(LANE_DEFAULT_XTC_THRESHOLD), RANGE(LANE_RANGE_XTC_THRESHOLD),
	 .meta = "P", .cmds = B(RUN) | B(SERVE), .help = "XTC: every token this likely but the least likely of them is dropped"},
	{.names = "--top-nsigma", .kind = SET_FLOAT, .field = F(top_n_sigma), .dflt = SAID(LANE_DEFAULT_TOP_N_SIGMA), RANGE(LANE_RANGE_TOP_N_SIGMA),
	 .meta = "N", .cmds = B(RUN) | B(SERVE), .help = "keep the logits within N standard deviations of the top one (<= 0 = off)"},
	{.names = "--dynatemp-range", .kind = SET_FLOAT, .field = F(dynatemp_range), .dflt = "0", RANGE(LANE_RANGE_DYNATEMP_RANGE), .meta = "N",
	 .cmds = B(RUN) | B(SERVE), .help = "dynamic temperature: from temp - N to temp + N by the candidates' entropy (0 = fixed)"},
	{.names = "--dynatemp-exp", .kind = SET_FLOAT, .field = F(dynatemp_exp), .dflt = SAID(LANE_DEFAULT_DYNATEMP_EXPONENT),
	 RANGE(LANE_RANGE_DYNATEMP_EXPONENT), .meta = "N", .cmds = B(RUN) | B(SERVE), .help = "dynamic temperature: the normalized entropy's exponent"},
	{.names = "--mirostat", .kind = SET_INT, .field = F(mirostat), .dflt = "0", RANGE(LANE_RANGE_MIROSTAT), .meta = "N", .cmds = B(RUN) | B(SERVE),
	 .help = "mirostat 1 or 2: temperature, then it alone (0 = off)"},
	{.names = "--mirostat-lr", .kind = SET_FLOAT, .field = F(mirostat_lr), .dflt = SAID(LANE_DEFAULT_MIROSTAT_ETA), RANGE(LANE_RANGE_MIROSTAT_ETA),
	 .meta = "ETA", .cmds = B(RUN) | B(SERVE), .help = "mirostat's learning rate"},
	{.names = "--mirostat-ent", .kind = SET_FLOAT, .field = F(mirostat_ent), .dflt = SAID(LANE_DEFAULT_MIROSTAT_TAU), RANGE(LANE_RANGE_MIROSTAT_TAU),
	 .meta = "TAU", .cmds = B(RUN) | B(SERVE), .help = "mirostat's target surprise (bits)"},
	{.names = "--samplers", .kind = SET_STR, .field = F(samplers), .meta = "LIST", .cmds = B(RUN) | B(SERVE),
	 .help = "the samplers that run, in order, by name separated by ';' (penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature; default: all)"},
	{.names = "--sampler-seq|--sampling-seq", .kind = SET_STR, .field = F(sampling_seq), .meta = "LETTERS", .cmds = B(RUN) | B(SERVE),
	 .help = "--samplers by one letter each: e d s k y p m x t"},
	{.names = "--seed", .kind = SET_INT, .field = F(seed), .min = 0, .max = I64, .meta = "S", .cmds = B(RUN),
	 .help = "random seed (default: from the clock, logged)"},
	{.names = "--seed", .kind = SET_INT, .field = F(seed), .dflt = "1", .min = 0, .max = I64, .meta = "S", .cmds = B(GEN),
	 .help = "random seed"},
	{.names = "-p|--n-prompt", .kind = SET_INT, .field = F(n_prompt), .dflt = "512", .min = 0, .max = 1 << 20, .meta = "P",
	 .cmds = B(BENCH), .help = "prompt tokens, one pass (0 = skip)"},
	{.names = "-n|--n-gen", .kind = SET_INT, .field = F(n_gen), .dflt = "128", .min = 0, .max = 1 << 20, .meta = "N",
	 .cmds = B(BENCH), .help = "generated tokens, one at a time (0 = skip)"},
	{.names = "-r|--repetitions", .kind = SET_INT, .field = F(reps), .dflt = "3", .min = 1, .max = 1000, .meta = "R",
	 .cmds = B(BENCH), .help = "repetitions"},
	{.names = "-d|--depth", .kind = SET_INT, .field = F(depth), .dflt = "0", .min = 0, .max = 1 << 22, .meta = "D",
	 .cmds = B(BENCH), .help = "the prompt pass and the decode after a context of D tokens, filled once in pieces of 512, as llama-bench -d (attention as LANES_ATTN says)"},
	{.names = "--concurrent", .kind = SET_INT, .field = F(concurrent), .dflt = "0", .min = 0, .max = 1024, .meta = "M",
	 .cmds = B(BENCH), .help = "M requests at once through the lane host: aggregate tok/s, latency (0 = off)"},
	{.names = "--lanes", .kind = SET_INT, .field = F(lanes), .min = 1, .max = 64, .meta = "N", .cmds = B(BENCH),
	 .help = "lanes for --concurrent (default: one per request, and one for --fill)"},
	{.names = "--fill", .kind = SET_INT, .field = F(fill), .dflt = "0", .min = 0, .max = 1 << 20, .meta = "P", .cmds = B(BENCH),
	 .help = "with --concurrent: a P-token prompt fills while the M requests decode"},
	{.names = "--req-prompt", .kind = SET_INT, .field = F(req_prompt), .dflt = "16", .min = 0, .max = (1 << 20) - 1, .meta = "T",
	 .cmds = B(BENCH), .help = "with --concurrent: prompt tokens of each request"},
	{.names = "--draft", .kind = SET_FLAG, .field = F(draft), .cmds = B(BENCH), .help = "with --concurrent: requests allow speculative drafting"},
	{.names = "--repetitive", .kind = SET_FLAG, .field = F(repetitive), .cmds = B(BENCH),
	 .help = "with --concurrent: prompts repeat one short phrase"},
	{.names = "--host", .kind = SET_STR, .field = F(host), .dflt = HTTP_DEFAULT_HOST, .meta = "HOST", .cmds = B(SERVE), .help = "listen address"},
	{.names = "--port", .kind = SET_INT, .field = F(port), .dflt = SAID(HTTP_DEFAULT_PORT), RANGE(HTTP_RANGE_PORT), .meta = "PORT", .cmds = B(SERVE),
	 .help = "listen port (0 = any free port)"},
	{.names = "--alias", .kind = SET_LIST, .field = F(alias), .meta = "NAME", .cmds = B(SERVE),
	 .help = "the -m model's id in the API (default: the file name without .gguf); NAME=FILE serves FILE as NAME beside it (repeatable)"},
	{.names = "--api-key", .kind = SET_STR, .field = F(api_key), .meta = "KEY", .cmds = B(SERVE),
	 .help = "require this key (Authorization: Bearer or x-api-key); control reads stay open"},
	{.names = "--protect-control", .kind = SET_FLAG, .field = F(protect_control), .cmds = B(SERVE),
	 .help = "with --api-key: /slots, /metrics, /props and /health's details need the key too"},
	{.names = "--allowed-host", .kind = SET_LIST, .field = F(allowed_host), .meta = "NAME", .cmds = B(SERVE),
	 .help = "answer requests whose Host names NAME (* = any), besides loopback names and addresses"},
	{.names = "--cors-origin", .kind = SET_LIST, .field = F(cors_origin), .meta = "ORIGIN", .cmds = B(SERVE),
	 .help = "let pages of ORIGIN (http://host:port; * = any) call the API from a browser (CORS)"},
	{.names = "--no-webui", .kind = SET_FLAG, .field = F(no_webui), .cmds = B(SERVE), .help = "serve no web page at /"},
	{.names = "--max-tokens", .kind = SET_INT, .field = F(serve_max_tokens), .dflt = "1024", .min = 0, .max = INT32_MAX, .meta = "N",
	 .cmds = B(SERVE), .help = "output tokens of a request that sets no limit (0 = what the window allows); a request's own limit wins"},
	{.names = "--responses-store", .kind = SET_INT, .field = F(responses_store), .dflt = SAID(HTTP_DEFAULT_RESPONSES_STORE), RANGE(HTTP_RANGE_RESPONSES_STORE), .meta = "N",
	 .cmds = B(SERVE), .help = "finished /v1/responses kept for previous_response_id and GET, least recently used out (0 = none kept)"},
	{.names = "--max-output-bytes", .kind = SET_INT, .field = F(max_output_bytes), .dflt = SAID(HTTP_DEFAULT_MAX_OUTPUT_BYTES), RANGE(HTTP_RANGE_MAX_OUTPUT_BYTES), .meta = "BYTES",
	 .cmds = B(SERVE), .help = "largest non-streamed generation reply in bytes"},
	{.names = "--stream-flush-ms", .kind = SET_FLOAT, .field = F(stream_flush_ms), .dflt = SAID(HTTP_DEFAULT_STREAM_FLUSH_MS), .min = 0, .max = 1000, .meta = "MS",
	 .cmds = B(SERVE), .help = "a stream's tokens that come within MS of its last write go out together, at most MS later (0 = each at once)"},
	{.names = "--max-tokenize-bytes", .kind = SET_INT, .field = F(max_tokenize_bytes), .dflt = SAID(HTTP_DEFAULT_MAX_TOKENIZE_BYTES), RANGE(HTTP_RANGE_MAX_TOKENIZE_BYTES), .meta = "BYTES",
	 .cmds = B(SERVE), .help = "largest /tokenize and /detokenize body in bytes"},
	{.names = "--max-body", .kind = SET_INT, .field = F(max_body), .dflt = SAID(HTTP_DEFAULT_MAX_BODY), RANGE(HTTP_RANGE_MAX_BODY), .meta = "BYTES",
	 .cmds = B(SERVE), .help = "largest request body in bytes"},
	{.names = "--max-connections", .kind = SET_INT, .field = F(max_connections), .dflt = "0", RANGE(HTTP_RANGE_MAX_CONNECTIONS), .meta = "N",
	 .cmds = B(SERVE), .help = "open connections at once; more wait in the listen queue (0 = what the open-file limit allows, up to 16384)"},
	{.names = "--max-connections-per-ip", .kind = SET_INT, .field = F(max_per_ip), .dflt = SAID(HTTP_DEFAULT_MAX_PER_IP), RANGE(HTTP_RANGE_MAX_PER_IP), .meta = "N",
	 .cmds = B(SERVE), .help = "open connections from one client address; more get a 429 and are closed at once (0 = no limit)"},
	{.names = "--header-timeout", .kind = SET_FLOAT, .field = F(header_timeout), .dflt = SAID(HTTP_DEFAULT_HEADER_TIMEOUT_S), RANGE(HTTP_RANGE_HEADER_TIMEOUT_S), .meta = "SECONDS",
	 .cmds = B(SERVE), .help = "a request's head and body must arrive within this, else 408 and close"},
	{.names = "--idle-timeout", .kind = SET_INT, .field = F(idle_timeout), .dflt = SAID(HTTP_DEFAULT_IDLE_TIMEOUT_S), RANGE(HTTP_RANGE_IDLE_TIMEOUT_S), .meta = "SECONDS",
	 .cmds = B(SERVE), .help = "a connection silent this long between requests is closed"},
	{.names = "--http-threads", .kind = SET_INT, .field = F(http_threads), .dflt = SAID(HTTP_DEFAULT_THREADS), RANGE(HTTP_RANGE_THREADS), .meta = "N",
	 .cmds = B(SERVE), .help = "threads serving the connections (each polls its share with epoll)"},
	{.names = "--peer", .kind = SET_LIST, .field = F(peer), .meta = "URL", .cmds = B(SERVE),
	 .help = "another lanes server (http://host:port) this one overflows to when its queue is deep (repeatable)"},
	{.names = "--overflow-queue", .kind = SET_INT, .field = F(overflow_queue), .dflt = "0", .min = 0, .max = 1000000, .meta = "N",
	 .cmds = B(SERVE), .help = "with --peer: when more than N requests wait here, new ones take the first lane free here or on a peer"},
	{.names = "--peer-poll-ms", .kind = SET_INT, .field = F(peer_poll_ms), .dflt = SAID(HTTP_DEFAULT_PEER_POLL_MS), .min = 10, .max = 600000, .meta = "MS",
	 .cmds = B(SERVE), .help = "with --peer: how often each peer's residency beacon is read"},
	{.names = "--peer-timeout-ms", .kind = SET_INT, .field = F(peer_timeout_ms), .dflt = SAID(HTTP_DEFAULT_PEER_TIMEOUT_MS), .min = 10, .max = 600000,
	 .meta = "MS", .cmds = B(SERVE), .help = "with --peer: a beacon read, lease request, connection or streamed reply's head slower than this fails"},
	{.names = "--peer-key", .kind = SET_STR, .field = F(peer_key), .meta = "KEY", .cmds = B(SERVE),
	 .help = "with --peer: the key sent to peers (default: a forwarded request's own, and --api-key for beacons and leases)"},
	{.names = "--chat-template", .kind = SET_STR, .field = F(chat_template), .meta = "FILE", .cmds = B(SERVE) | B(RUN),
	 .help = "Jinja chat template file (default: the model's, else ChatML or plain text as the vocabulary has it)"},
	{.names = "--reasoning-format", .kind = SET_CHOICE, .field = F(reasoning_format), .dflt = "auto",
	 .meta = "auto|none|think|command-r7b|harmony", .cmds = B(SERVE) | B(RUN),
	 .help = "how replies set their thinking apart: auto = the chat template's family, none = all of it is the answer"},
	{.names = "--lanes", .kind = SET_INT, .field = F(lanes), RANGE(LANE_RANGE_LANES), .meta = "N", .cmds = B(SERVE),
	 .help = "concurrent requests (default 4; with --memory the planner chooses)"},
	{.names = "--lanes", .kind = SET_INT, .field = F(lanes), .dflt = "4", .min = 1, .max = 64, .meta = "N", .cmds = B(EXPERTS),
	 .help = "corpus pieces run at once"},
	{.names = "--lanes", .kind = SET_INT, .field = F(lanes), RANGE(LANE_RANGE_LANES), .meta = "N", .cmds = B(PLAN),
	 .help = "concurrent requests (default: the planner chooses)"},
	{.names = "--memory", .kind = SET_STR, .field = F(memory), .meta = "SIZE", .cmds = B(SERVE),
	 .help = "memory budget (4GiB, 500MB, or auto: what is available): plan lanes and an elastic window; with --models-dir, what the "
		 "models loaded at once share"},
	{.names = "--memory", .kind = SET_STR, .field = F(memory), .meta = "SIZE", .cmds = B(PLAN),
	 .help = "memory budget: 8GiB, 1.5GiB, 512MiB, 2GB or bytes (default: the available memory)"},
	{.names = "--window", .kind = SET_INT, .field = F(window), .min = 1, .max = 1 << 24, .meta = "N", .cmds = B(SERVE),
	 .help = "with --memory: the window's floor and start (default min(1024, the plan's))"},
	{.names = "--kv|--kv-type", .kind = SET_CHOICE, .field = F(kv_type), .dflt = "f16s", .meta = "f16s|f16|q8_0|q4_0", .cmds = KV_CMDS,
	 .help = "KV cache type"},
	{.names = "--activations", .kind = SET_CHOICE, .field = F(activations), .dflt = "q16", .meta = "q16|q8",
	 .cmds = B(RUN) | B(LOGITS) | B(BENCH) | B(SERVE),
	 .help = "activation width of the quantized matmuls: q8 = int8 per block of 32 as llama.cpp (half the int8 products per block: faster prompts and batched decode, logit error below llama.cpp's), q16 = 16 bits; float weights keep float activations"},
	{.names = "--compact-weights", .env = "LANES_COMPACT_WEIGHTS", .kind = SET_CHOICE, .field = F(compact_weights), .dflt = "auto",
	 .meta = "auto|on|off", .cmds = B(RUN) | B(LOGITS) | B(LEARN) | B(BENCH) | B(SERVE) | B(PLAN),
	 .help = "the IQ1, IQ2 and IQ3 types' weights: on = as compact as in the file (1.6 to 3.4 bits a weight, the same outputs, a slower decode), off = expanded to about 4.5 bits a weight for the fastest kernels, auto = compact when expanded weights would take more than 3/4 of the available memory"},
	{.names = "--ctx", .kind = SET_INT, .field = F(ctx), .dflt = SAID(LANE_DEFAULT_CTX), RANGE(LANE_RANGE_CTX), .meta = "N", .cmds = B(SERVE),
	 .help = "without --memory: a fixed pool of KV tokens across all lanes"},
	{.names = "--queue", .kind = SET_INT, .field = F(queue), .dflt = SAID(LANE_DEFAULT_QUEUE), RANGE(LANE_RANGE_QUEUE), .meta = "N", .cmds = B(SERVE),
	 .help = "waiting requests beyond the lanes"},
	{.names = "--piece", .kind = SET_INT, .field = F(piece), .dflt = "0", RANGE(LANE_RANGE_PIECE), .meta = "N", .cmds = B(SERVE) | B(PLAN),
	 .help = "most prompt tokens one lane feeds per round (0 = no cap)"},
	{.names = "--round-ms", .kind = SET_FLOAT, .field = F(round_ms), .dflt = SAID(LANE_DEFAULT_ROUND_MS), RANGE(LANE_RANGE_ROUND_MS), .meta = "MS",
	 .cmds = B(SERVE), .help = "target duration of a round with prompt pieces"},
	{.names = "--price-row-us", .kind = SET_FLOAT, .field = F(price_row_us), .dflt = "0", .min = 0, .max = 999999999, .meta = "US",
	 .cmds = B(SERVE), .help = "what one row of a pass costs, in microseconds, for planning rounds and drafts (0 = timed at start)"},
	{.names = "--price-fixed-us", .kind = SET_FLOAT, .field = F(price_fixed_us), .dflt = "0", .min = 0, .max = 999999999, .meta = "US",
	 .cmds = B(SERVE), .help = "with --price-row-us: what a pass costs beyond its rows, in microseconds"},
	{.names = "-t|--threads", .kind = SET_INT, .field = F(threads), .dflt = "0", .min = 0, .max = 1024, .meta = "N", .cmds = THREAD_CMDS,
	 .help = "compute threads (0 = one per core)"},
	{.names = "--pooling", .kind = SET_CHOICE, .field = F(pooling), .dflt = "auto", .meta = "auto|last|mean|cls|none", .cmds = B(SERVE),
	 .help = "how /v1/embeddings pools a text's hidden states (auto: the model's pooling_type, else last; none: a vector per token)"},
	{.names = "--strict-model", .kind = SET_FLAG, .field = F(strict_model), .cmds = B(SERVE),
	 .help = "a request naming another model gets 404 (default: any name means the one model served, until an adapter is loaded)"},
	{.names = "--lora", .kind = SET_LIST, .field = F(lora), .meta = "NAME=PATH[:SCALE]", .cmds = B(SERVE),
	 .help = "serve a LoRA adapter (GGUF) as NAME (\"model\": NAME, or \"lora\": [{\"name\"}]), scale 1 unless given; NAME= may be left out: the file's name"},
	{.names = "--max-lora", .kind = SET_INT, .field = F(max_lora), .dflt = SAID(HTTP_DEFAULT_MAX_LORA), RANGE(HTTP_RANGE_MAX_LORA), .meta = "N", .cmds = B(SERVE),
	 .help = "adapters loaded at once (--lora and POST /v1/adapters)"},
	{.names = "--adapters-dir", .env = "LANES_ADAPTERS", .kind = SET_STR, .field = F(adapters_dir), .meta = "DIR", .cmds = B(SERVE),
	 .help = "the folder POST /v1/adapters loads from and /v1/adapters/NAME/save writes to, by file name (default ~/.cache/lanes/adapters)"},
	{.names = "--cache-dir", .env = "LANES_CACHE_DIR", .kind = SET_STR, .field = F(cache_dir), .meta = "DIR", .cmds = B(SERVE),
	 .help = "keep the prefix cache's pages of the base model in this folder (written as they leave memory and at drain), so a prompt seen before a restart is read back, not computed again (default: in memory only)"},
	{.names = "--cache-dir-max", .kind = SET_STR, .field = F(cache_dir_max), .dflt = "4GiB", .meta = "SIZE", .cmds = B(SERVE),
	 .help = "the most the page files in --cache-dir take; the oldest written are deleted first"},
	{.names = "--models-dir", .kind = SET_LIST, .field = F(serve_models_dir), .meta = "DIR", .cmds = B(SERVE),
	 .help = "serve every GGUF under DIR (beside -m, if given) by its path there without .gguf: loaded by its first request, unloaded when "
		 "idle (repeatable: the first holds what Ollama's pull writes); with neither, serve the model cache"},
	{.names = "--keep-alive", .kind = SET_STR, .field = F(keep_alive), .dflt = "5m", .meta = "DURATION", .cmds = B(SERVE),
	 .help = "how long a --models-dir model stays loaded idle (30s, 5m, 1h; -1: for good; 0: unloaded after each request); a request's keep_alive wins"},
	{.names = "--max-models", .kind = SET_INT, .field = F(max_models), .dflt = SAID(HTTP_DEFAULT_MAX_MODELS), RANGE(HTTP_RANGE_MAX_MODELS), .meta = "N",
	 .cmds = B(SERVE), .help = "--models-dir models loaded at once: the least recently used idle one is unloaded for another (with --memory: 64)"},
	{.names = "--allow-unauthenticated-mutations", .kind = SET_FLAG, .field = F(allow_unauth_mutations), .cmds = B(SERVE),
	 .help = "with --host not loopback and no --api-key: take adapter and learning changes anyway (refused by default)"},
	{.names = "--learn-share", .kind = SET_FLOAT, .field = F(learn_share), .dflt = SAID(HTTP_DEFAULT_LEARN_SHARE), RANGE(HTTP_RANGE_LEARN_SHARE), .meta = "F", .cmds = B(SERVE),
	 .help = "most of a round's prompt budget that training steps (POST /learn/grants) take; 0: learning off"},
	{.names = "--strict-params", .kind = SET_FLAG, .field = F(strict_params), .cmds = B(SERVE),
	 .help = "refuse (400, naming them) the documented fields and content lanes accepts but cannot honour, instead of ignoring them"},
	{.names = "--embeddings", .kind = SET_FLAG, .field = F(embeddings), .cmds = B(SERVE),
	 .help = "serve embeddings only: the generation endpoints answer 400"},
	{.names = "--draft", .kind = SET_CHOICE, .field = F(draft_mode), .dflt = "auto", .meta = "auto|off|ngram|mtp", .cmds = B(SERVE),
	 .help = "speculative decoding for requests that allow it: ngram alone, or the draft model or the model's MTP head beside it (auto; mtp: the model's head, or with --learn-share one learned here: POST /learn/grants kind mtp)"},
	{.names = "--draft-head", .kind = SET_STR, .field = F(draft_head), .meta = "HEAD.gguf", .cmds = B(SERVE) | B(BENCH),
	 .help = "an MTP head (lanes learn --mtp) for the -m model, in place of any it has: its drafts as the model's own head's"},
	{.names = "--draft-model", .kind = SET_STR, .field = F(draft_model), .meta = "FILE", .cmds = B(SERVE) | B(BENCH),
	 .help = "a draft model with the same vocabulary (serve's auto uses it beside n-gram, in place of an MTP head)"},
	{.names = "--draft-max", .kind = SET_INT, .field = F(draft_max), .dflt = SAID(LANE_DEFAULT_DRAFT_MAX), RANGE(LANE_RANGE_DRAFT_MAX), .meta = "K", .cmds = B(SERVE) | B(PLAN),
	 .help = "most draft tokens per lane per round, adapted per lane"},
	{.names = "--chunk", .kind = SET_INT, .field = F(chunk), .dflt = "256", .min = 1, .max = 1 << 20, .meta = "N", .cmds = B(LOGITS),
	 .help = "positions per forward pass (results do not depend on it)"},
	{.names = "--grammar", .kind = SET_STR, .field = F(grammar_file), .meta = "FILE", .cmds = B(RUN),
	 .help = "constrain the text to this GBNF grammar (start rule root)"},
	{.names = "--json-schema", .kind = SET_STR, .field = F(json_schema_file), .meta = "FILE", .cmds = B(RUN),
	 .help = "constrain the text to JSON valid against this JSON Schema"},
	{.names = "--print-ids", .kind = SET_FLAG, .field = F(print_ids), .cmds = B(RUN), .help = "end with a line holding the generated ids as JSON"},
	{.names = "--think", .kind = SET_FLAG, .field = F(think), .cmds = B(RUN),
	 .help = "-p is a user turn through the chat template, and the reply's thinking is shown before the answer between Thinking... and ...done thinking. (dimmed on a terminal); a model with no reasoning format is an error"},
	{.names = "--no-think", .kind = SET_FLAG, .field = F(no_think), .cmds = B(RUN),
	 .help = "-p is a user turn through the chat template, thinking off: the template's switch (enable_thinking=false) where it has one, else an empty thinking section; a model with no reasoning format: a note, and the turn as it is"},
	{.names = "--think-budget", .kind = SET_INT, .field = F(think_budget), .min = 0, .max = 1 << 24, .meta = "N", .cmds = B(RUN),
	 .help = "as --think, and after N thinking tokens the thinking is ended by its close marker, forced as the API's thinking budget is (0: at once); a model with no reasoning format is an error"},
	{.names = "--no-bos", .kind = SET_FLAG, .field = F(no_bos), .cmds = B(TOKENIZE), .help = "add no BOS/EOS even where the vocab asks for them"},
	{.names = "--no-parse-special", .kind = SET_FLAG, .field = F(no_parse_special), .cmds = B(TOKENIZE),
	 .help = "keep control-token text (\"<s>\") as plain text"},
	{.names = "--special", .kind = SET_FLAG, .field = F(special), .cmds = B(DETOKENIZE), .help = "render control tokens as their text (\"</s>\")"},
	{.names = "--keep-space", .kind = SET_FLAG, .field = F(keep_space), .cmds = B(DETOKENIZE),
	 .help = "keep the leading space an SPM vocab prefixes to text"},
	{.names = "--file", .kind = SET_STR, .field = F(file), .meta = "T.jinja", .cmds = B(TEMPLATE), .help = "a Jinja chat template file instead of a model"},
	{.names = "--messages", .kind = SET_STR, .field = F(messages), .meta = "M.json", .cmds = B(TEMPLATE), .req = B(TEMPLATE),
	 .help = "JSON array of {role, content} (or an object: the whole context)"},
	{.names = "--add-generation-prompt", .kind = SET_FLAG, .field = F(add_generation_prompt), .cmds = B(TEMPLATE),
	 .help = "end with the assistant's turn header"},
	{.names = "--bos", .kind = SET_STR, .field = F(bos), .meta = "S", .cmds = B(TEMPLATE), .help = "bos_token text (default: the model's; empty with --file)"},
	{.names = "--eos", .kind = SET_STR, .field = F(eos), .meta = "S", .cmds = B(TEMPLATE), .help = "eos_token text (default: the model's; empty with --file)"},
	{.names = "--date", .kind = SET_STR, .field = F(date), .meta = "YYYY-MM-DD", .cmds = B(TEMPLATE), .help = "the day strftime_now() sees (default: today)"},
	{.names = "--shape", .kind = SET_STR, .field = F(shape), .meta = "NAME", .cmds = B(GEN),
	 .help = "test, agent (the test size, a 131072-token window), tinyllama-1.1b, qwen2.5-0.5b, llama-3.2-1b, mixtral-mini, moe-mid, qwen2moe-test, gemma2-test, gemma2-2b, gemma3-test, gemma3-1b, phi3-test, phi3.5-mini, phi4-mini, gpt-oss-test, gpt-oss-20b, reranker-test or reranker-0.5b (Qwen3-Reranker-shaped, pooling rank), bert-rerank-test, xlmr-rerank-test or bert-rerank-base (BERT cross-encoders with a small vocabulary of their own, WordPiece or XLM-RoBERTa's Unigram: no --vocab)"},
	{.names = "--type", .kind = SET_STR, .field = F(type), .dflt = "F32", .meta = "TYPE", .cmds = B(GEN),
	 .help = "file type: F32 F16 BF16 Q8_0 Q4_0 Q4_K_M Q6_K ... (an adapter: F32, F16, BF16 or Q8_0)"},
	{.names = "--vocab", .kind = SET_STR, .field = F(vocab), .meta = "VOCAB.gguf", .cmds = B(GEN),
	 .help = "GGUF whose tokenizer.* keys (and vocab size) are copied"},
	{.names = "--json", .kind = SET_FLAG, .field = F(json), .cmds = B(INFO) | B(BENCH) | B(PLAN) | B(EXPERTS), .help = "print one JSON object"},
	{.names = "--corpus", .kind = SET_STR, .field = F(corpus), .meta = "DIR", .cmds = B(EXPERTS), .req = B(EXPERTS),
	 .help = "a folder with a file or a folder of files per domain (the domain is its name without the extension)"},
	{.names = "--tokens", .kind = SET_INT, .field = F(corpus_tokens), .dflt = "0", .min = 0, .max = I64, .meta = "N",
	 .cmds = B(EXPERTS), .help = "feed at most N tokens of each domain (0 = all of it)"},
	{.names = "--svg", .kind = SET_STR, .field = F(svg), .meta = "OUT.svg", .cmds = B(EXPERTS),
	 .help = "write the heat map of experts x layers per domain and the working-set curves"},
	{.names = "--experts", .kind = SET_CHOICE, .field = F(experts), .dflt = "on", .meta = "on|off", .cmds = B(SERVE) | B(BENCH),
	 .help = "count each MoE layer's expert choices per domain (GET /v1/experts; never changes a token)"},
	{.names = "--metrics-experts", .kind = SET_FLAG, .field = F(metrics_experts), .cmds = B(SERVE),
	 .help = "add lanes_expert_activations_total{layer,expert} to /metrics (a line per layer and expert)"},
	{.names = "--hf-token", .env = "HF_TOKEN", .kind = SET_STR, .field = F(hf_token), .meta = "TOKEN", .cmds = B(PULL) | B(SERVE),
	 .help = "Hugging Face token for gated repositories (sent to the hub only)"},
	{.env = "LANES_MODELS", .kind = SET_STR, .field = F(models_dir), .meta = "DIR", .cmds = B(PULL) | B(LS) | B(RM) | MODEL_CMDS | B(TEMPLATE) | B(GEN),
	 .help = "the model cache (default ~/.cache/lanes/models); -m takes a name `lanes ls` prints"},
	{.env = "LANES_HF_ENDPOINT", .kind = SET_STR, .field = F(hf_endpoint), .dflt = "https://huggingface.co", .meta = "URL",
	 .cmds = B(PULL) | B(SERVE), .help = "the hub that hf: references and ORG/REPO:QUANT name"},
	{.env = "LANES_PULL_STALL_S", .kind = SET_INT, .field = F(pull_stall_s), .dflt = "30", .min = 1, .max = 3600, .meta = "SECONDS",
	 .cmds = B(PULL) | B(SERVE), .help = "a transfer that receives nothing this long fails (and is tried again, resuming)"},
	{.env = "LANES_PULL_TRIES", .kind = SET_INT, .field = F(pull_tries), .dflt = "6", .min = 1, .max = 100, .meta = "N",
	 .cmds = B(PULL) | B(SERVE), .help = "a request the network or the hub's 429, 502, 503 or 504 failed is tried this often in all"},
	{.env = "LANES_PULL_RETRY_MS", .kind = SET_INT, .field = F(pull_retry_ms), .dflt = "1000", .min = 1, .max = 3600000, .meta = "MS",
	 .cmds = B(PULL) | B(SERVE), .help = "the wait before the second try, doubled before each next one"},
	{.env = "LANES_PULL_RETRY_MAX_MS", .kind = SET_INT, .field = F(pull_retry_max_ms), .dflt = "16000", .min = 1, .max = 3600000, .meta = "MS",
	 .cmds = B(PULL) | B(SERVE), .help = "the longest wait between tries, a longer Retry-After from the hub included"},
	{.env = "LANES_PULL_MAX_BYTES", .kind = SET_INT, .field = F(pull_max_bytes), .dflt = "1099511627776", .min = 1, .max = I64,
	 .meta = "BYTES", .cmds = B(PULL) | B(SERVE), .help = "the largest file a pull writes: a larger published size is refused, a body past it cut off"},
	{.names = "-h|--help", .kind = SET_FLAG, .field = F(help), .cmds = ALL, .help = "show this help"},
	{.names = "--log", .env = "LANES_LOG", .kind = SET_CHOICE, .field = F(log), .dflt = "info", .meta = "error|warn|info|debug",
	 .cmds = ALL, .help = "how much goes to stderr: info says what a user needs (listening, the model, the memory plan, requests), debug adds the engine's internals"},
	{.names = "--log-format", .env = "LANES_LOG_FORMAT", .kind = SET_CHOICE, .field = F(log_format), .dflt = "text", .meta = "text|json",
	 .cmds = ALL, .help = "json: each log line one object {time, level, module, msg}, and no progress bars"},
	{.env = "LANES_KERNELS", .kind = SET_CHOICE, .field = F(kernels), .meta = "ref|avx2|avx512", .cmds = ALL,
	 .help = "force a kernel set (default: the best this CPU runs)"},
	{.env = "LANES_ATTN", .kind = SET_CHOICE, .field = F(attn), .dflt = "fused", .meta = "fused|unfused", .cmds = ALL,
	 .help = "unfused keeps score buffers (f16 types), for comparison"},
	{.env = "LANES_DRAIN_S", .kind = SET_FLOAT, .field = F(drain_s), .dflt = "20", .min = 0, .max = 86400, .meta = "SECONDS",
	 .cmds = B(SERVE), .help = "how long a drain lets running requests finish"},
};
const int cli_settings_count = (int)(sizeof cli_settings_table / sizeof cli_settings_table[0]);
_Static_assert(sizeof cli_settings_table / sizeof cli_settings_table[0] <= 256, "cli_settings.given holds 256 bits");

static const char *cmd_name = "lanes"; // "lanes run" once cli_setup has seen the command

static void verr(const char *fmt, va_list ap) {
	char msg[1024];
	vsnprintf(msg, sizeof msg, fmt, ap);
	fprintf(stderr, "%s: %s\n", cmd_name, msg);
}

void cli_err(const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	verr(fmt, ap);
	va_end(ap);
}

static int usage_error(const cli_command *c);

int cli_usage_error(const cli_settings *s, const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	verr(fmt, ap);
	va_end(ap);
	return usage_error(s->cmd);
}

// ---- names and choices -------------------------------------------------------------------
// The i-th '|'-separated word of list into buf; false past the end.
static bool word_at(const char *list, int i, char *buf, size_t n) {
	for (const char *p = list; p; i--) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);
		if (i == 0) {
			snprintf(buf, n, "%.*s", (int)len, p);
			return true;
		}
		p = bar ? bar + 1 : NULL;
	}
	return false;
}

static int word_index(const char *list, const char *s, size_t len) {
	char w[64];
	for (int i = 0; word_at(list, i, w, sizeof w); i++)
		if (strlen(w) == len && !strncmp(w, s, len)) return i;
	return -1;
}

int cli_choice_index(const char *choices, const char *value) { return word_index(choices, value, strlen(value)); }

// "a, b or c" from "a|b|c".
static void choice_list(const char *choices, char *buf, size_t n) {
	char w[64];
	size_t k = 0;
	buf[0] = 0;
	int count = 0;
	while (word_at(choices, count, w, sizeof w)) count++;
	for (int i = 0; i < count && word_at(choices, i, w, sizeof w) && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%s", i == 0 ? "" : i == count - 1 ? " or " : ", ", w);
}

// ---- values --------------------------------------------------------------------------------
// A bound as the user writes it: a whole number without a point, INT64_MAX as itself.
static int bound_text(double v, char *out, size_t n) {
	if (v >= 0x1p63) return snprintf(out, n, "%lld", (long long)INT64_MAX);
	if (v == floor(v) && v > -0x1p63) return snprintf(out, n, "%lld", (long long)v);
	return snprintf(out, n, "%g", v);
}

// "MIN..MAX" of a number's setting.
static void range_text(const cli_setting *st, char *out, size_t n) {
	const int k = bound_text(st->min, out, n);
	if (k > 0 && (size_t)k + 2 < n) {
		memcpy(out + k, "..", 2);
		bound_text(st->max, out + k + 2, n - (size_t)k - 2);
	}
}

// Stores val into the setting's field; who is the flag or variable as the user wrote it.
static int set_value(const cli_setting *st, cli_settings *s, const char *who, const char *val) {
	void *dst = (char *)s + st->field;
	char *end, list[256], range[64];
	errno = 0;
	switch (st->kind) {
	case SET_STR: *(const char **)dst = val; return 0;
	case SET_FLAG: *(bool *)dst = true; return 0;
	case SET_LIST: {
		cli_list *l = dst;
		if (l->n >= CLI_LIST_MAX) {
			cli_err("%s is given more than %d times", who, CLI_LIST_MAX);
			return -1;
		}
		l->v[l->n++] = val;
		return 0;
	}
	case SET_CHOICE:
		if (cli_choice_index(st->meta, val) < 0) {
			choice_list(st->meta, list, sizeof list);
			cli_err("%s must be %s, not '%s'", who, list, val);
			return -1;
		}
		*(const char **)dst = val;
		return 0;
	case SET_INT: {
		long long v = strtoll(val, &end, 10);
		range_text(st, range, sizeof range);
		if (errno || end == val || *end) {
			cli_err("%s wants an integer in %s, got '%s'", who, range, val);
			return -1;
		}
		if ((double)v < st->min || (double)v > st->max) {
			cli_err("%s must be %s, not %s", who, range, val);
			return -1;
		}
		*(int64_t *)dst = v;
		return 0;
	}
	case SET_FLOAT: {
		double v = strtod(val, &end);
		range_text(st, range, sizeof range);
		if (errno || end == val || *end || !isfinite(v)) {
			cli_err("%s wants a number in %s, got '%s'", who, range, val);
			return -1;
		}
		if (v < st->min || v > st->max) {
			cli_err("%s must be %s, not %s", who, range, val);
			return -1;
		}
		*(double *)dst = v;
		return 0;
	}
	}
	return -1;
}

static bool takes(const cli_setting *st, enum cli_cmd c) { return st->cmds & (1u << c); }

static void mark_given(cli_settings *s, int i) { s->given[i / 64] |= 1ull << (i % 64); }

bool cli_given(const cli_settings *s, const void *field) {
	const size_t off = (size_t)((const char *)field - (const char *)s);
	for (int i = 0; i < cli_settings_count; i++)
		if (cli_settings_table[i].field == off && (s->given[i / 64] >> (i % 64) & 1)) return true;
	return false;
}

// The defaults and the environment for command c (CMD_COUNT: the knobs every command shares).
static int load_defaults_env(cli_settings *s, enum cli_cmd c) {
	memset(s, 0, sizeof *s);
	for (int i = 0; i < cli_settings_count; i++) {
		const cli_setting *st = &cli_settings_table[i];
		if (c == CMD_COUNT ? st->cmds != ALL : !takes(st, c)) continue;
		if (st->dflt && set_value(st, s, st->names ? st->names : st->env, st->dflt)) return -1;
		const char *v = st->env ? getenv(st->env) : NULL;
		if (!v || !*v) continue;
		if (set_value(st, s, st->env, v)) return -1;
		mark_given(s, i);
	}
	return 0;
}

// Hands the shared knobs to the libraries.
static void apply_log(const cli_settings *s) {
	if (s->log) base_log_level = cli_choice_index("error|warn|info|debug", s->log);
	base_log_json = s->log_format && !strcmp(s->log_format, "json");
}

static int apply_env(const cli_settings *s) {
	apply_log(s);
	if (s->attn) model_attn_set_fused(strcmp(s->attn, "unfused") != 0);
	if (s->kernels && tensor_kernels_force(s->kernels, "LANES_KERNELS")) {
		const char *names[8];
		char have[128] = "";
		const int n = tensor_kernels_available(names, 8);
		for (int i = 0, k = 0; i < n && i < 8; i++) k += snprintf(have + k, sizeof have - (size_t)k, "%s%s", i ? ", " : "", names[i]);
		cli_err("LANES_KERNELS=%s: this CPU cannot run that set (it runs %s)", s->kernels, have);
		return -1;
	}
	return 0;
}

int cli_env_apply(void) {
	cli_settings s;
	if (load_defaults_env(&s, CMD_COUNT) || apply_env(&s)) return 2;
	return 0;
}

static const cli_setting *find_option(enum cli_cmd c, const char *a, size_t len) {
	for (int i = 0; i < cli_settings_count; i++) {
		const cli_setting *st = &cli_settings_table[i];
		if (st->names && takes(st, c) && word_index(st->names, a, len) >= 0) return st;
	}
	return NULL;
}

// The usage line and a pointer to `lanes help CMD`, after an error.
static int usage_error(const cli_command *c) {
	cli_print_usage_line(stderr, c);
	fprintf(stderr, "`lanes help %s` describes every option.\n", c->name);
	return 2;
}

int cli_setup(const cli_command *c, int argc, char **argv, cli_settings *s) {
	static char name[64];
	snprintf(name, sizeof name, "lanes %s", c->name);
	cmd_name = name;
	if (load_defaults_env(s, c->id) || apply_env(s)) return 2;
	s->cmd = c;
	bool only_pos = false;
	uint64_t seen[4] = {0}; // settings given on this command line (as many bits as cli_settings.given)
	const char *seen_as[4 * 64] = {0};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (only_pos || a[0] != '-' || a[1] == 0) {
			if (s->npos >= c->npos) {
				cli_err("unexpected argument '%s'", a);
				return usage_error(c);
			}
			s->pos[s->npos++] = a;
			continue;
		}
		if (!strcmp(a, "--")) {
			only_pos = true;
			continue;
		}
		const char *eq = strchr(a, '=');
		const size_t len = eq ? (size_t)(eq - a) : strlen(a);
		const cli_setting *st = find_option(c->id, a, len);
		if (!st) {
			cli_err("unknown option '%.*s'", (int)len, a);
			return usage_error(c);
		}
		char who[64];
		snprintf(who, sizeof who, "%.*s", (int)len, a);
		const char *val = eq ? eq + 1 : NULL;
		if (st->kind == SET_FLAG && val) {
			cli_err("%s takes no value", who);
			return 2;
		}
		if (st->kind != SET_FLAG && !val) {
			if (i + 1 >= argc) {
				cli_err("%s needs a value (%s)", who, st->meta);
				return 2;
			}
			val = argv[++i];
		}
		const int idx = (int)(st - cli_settings_table);
		// a second value would silently win over the first (a list takes both): say so instead
		if (st->kind != SET_LIST && (seen[idx / 64] >> (idx % 64) & 1)) {
			cli_err("%s is given twice (%s, then %s): give it once", who, seen_as[idx] ? seen_as[idx] : "on", val ? val : "on");
			return 2;
		}
		seen[idx / 64] |= 1ull << (idx % 64);
		seen_as[idx] = val;
		if (set_value(st, s, who, val)) return 2;
		mark_given(s, idx);
	}
	apply_log(s); // --log and --log-format from the command line
	if (s->help) {
		cli_print_help(stdout, c);
		return 0;
	}
	for (int i = 0; i < cli_settings_count; i++) {
		const cli_setting *st = &cli_settings_table[i];
		if (!(st->req & (1u << c->id)) || (s->given[i / 64] >> (i % 64) & 1) || st->dflt) continue;
		char first[64];
		word_at(st->names, 0, first, sizeof first);
		cli_err("%s %s is required", first, st->meta);
		return usage_error(c);
	}
	if (s->npos != c->npos) {
		cli_err("wants %d argument%s, got %d", c->npos, c->npos == 1 ? "" : "s", s->npos);
		return usage_error(c);
	}
	// the width the models this command loads run with
	enum tensor_act act;
	if (s->activations && !tensor_act_parse(s->activations, &act)) tensor_kernels_select_act(act);
	if (s->compact_weights)
		model_select_compact((enum model_compact)cli_choice_index("auto|on|off", s->compact_weights));
	return -1;
}

// ---- help ----------------------------------------------------------------------------------
static bool in_head(const cli_command *c, const cli_setting *st) {
	char w[64];
	for (int k = 0; st->names && word_at(st->names, k, w, sizeof w); k++) {
		const size_t n = strlen(w);
		for (const char *p = strstr(c->head, w); p; p = strstr(p + 1, w))
			if ((p == c->head || p[-1] == ' ' || p[-1] == '(' || p[-1] == '[') && (p[n] == ' ' || p[n] == 0)) return true;
	}
	return false;
}

// "-t|--threads N" (the choices for a choice, nothing for a switch).
static void option_text(const cli_setting *st, char *buf, size_t n) {
	snprintf(buf, n, "%s%s%s", st->names ? st->names : st->env, st->kind == SET_FLAG ? "" : st->names ? " " : "=",
		 st->kind == SET_FLAG ? "" : st->meta);
}

// "default 64; 0..1024", "default f16s", "1..64", or "" (nothing to say).
static void bounds_text(const cli_setting *st, char *buf, size_t n) {
	size_t k = 0;
	buf[0] = 0;
	if (st->dflt) k += (size_t)snprintf(buf, n, "default %s", st->dflt);
	if (st->kind == SET_INT || st->kind == SET_FLOAT)
{
		char range[64];
		range_text(st, range, sizeof range);
		snprintf(buf + k, n - k, "%s%s", k ? "; " : "", range);
	}
	if (st->kind == SET_LIST) k += (size_t)snprintf(buf + k, n - k, "%srepeatable", k ? "; " : "");
	if (st->names && st->env) snprintf(buf + k, n - k, "%senv %s", k ? "; " : "", st->env);
}

// The last spelling: the long one ("--threads" of "-t|--threads").
static void long_name(const cli_setting *st, char *buf, size_t n) {
	const char *bar = strrchr(st->names, '|');
	snprintf(buf, n, "%s", bar ? bar + 1 : st->names);
}

void cli_print_usage_line(FILE *f, const cli_command *c) {
	fprintf(f, "usage: lanes %s%s%s", c->name, *c->head ? " " : "", c->head);
	for (int i = 0; i < cli_settings_count; i++) {
		const cli_setting *st = &cli_settings_table[i];
		if (!st->names || !takes(st, c->id) || st->field == offsetof(cli_settings, help) || in_head(c, st)) continue;
		char name[64];
		long_name(st, name, sizeof name);
		if (st->kind == SET_FLAG) fprintf(f, " [%s]", name);
		else if (st->req & (1u << c->id)) fprintf(f, " %s %s", name, st->meta);
		else fprintf(f, " [%s %s]", name, st->dflt && st->kind != SET_CHOICE ? st->dflt : st->meta);
	}
	fputc('\n', f);
}

// "  --temp T   temperature (0 = greedy) [default 0.8; 0..2]"
static void help_line(FILE *f, const cli_setting *st) {
	char opt[96], b[96];
	option_text(st, opt, sizeof opt);
	bounds_text(st, b, sizeof b);
	fprintf(f, "  %-34s %s%s%s%s\n", opt, st->help, *b ? " [" : "", b, *b ? "]" : "");
}

void cli_print_help(FILE *f, const cli_command *c) {
	cli_print_usage_line(f, c);
	fprintf(f, "%s\n\noptions:\n", c->what);
	bool env = false;
	for (int i = 0; i < cli_settings_count; i++) {
		const cli_setting *st = &cli_settings_table[i];
		if (!takes(st, c->id)) continue;
		if (!st->names) {
			env = true;
			continue;
		}
		help_line(f, st);
	}
	if (env) fprintf(f, "\nenvironment:\n");
	for (int i = 0; i < cli_settings_count && env; i++) {
		const cli_setting *st = &cli_settings_table[i];
		if (st->names || !takes(st, c->id)) continue;
		help_line(f, st);
	}
}

// Markdown table cells: '|' escaped.
static void md_cell(FILE *f, const char *s, bool code) {
	fputs(code ? " `" : " ", f);
	for (; *s; s++) fputs(*s == '|' ? "\\|" : *s == '<' && !code ? "&lt;" : (char[]){*s, 0}, f);
	fputs(code ? "` |" : " |", f);
}

static void md_row(FILE *f, const cli_setting *st) {
	char opt[96], b[96];
	option_text(st, opt, sizeof opt);
	bounds_text(st, b, sizeof b);
	fputc('|', f);
	md_cell(f, opt, true);
	md_cell(f, st->help, false);
	md_cell(f, b, false);
	fputc('\n', f);
}

void cli_print_markdown(FILE *f, const cli_command *cmds, int n) {
	for (int k = 0; k < n; k++) {
		const cli_command *c = &cmds[k];
		fprintf(f, "### %s\n\n%s.\n\n```\n", c->name, c->what);
		cli_print_usage_line(f, c);
		fprintf(f, "```\n\n| option | what | default; range |\n|---|---|---|\n");
		for (int i = 0; i < cli_settings_count; i++) {
			const cli_setting *st = &cli_settings_table[i];
			if (takes(st, c->id) && (st->names || st->cmds != ALL)) md_row(f, st);
		}
		fputc('\n', f);
	}
	fprintf(f, "### environment (every command)\n\n| variable | what | default; choices |\n|---|---|---|\n");
	for (int i = 0; i < cli_settings_count; i++) {
		const cli_setting *st = &cli_settings_table[i];
		if (!st->names && st->cmds == ALL) md_row(f, st);
	}
}

int cli_settings_check(char *err, size_t errlen) {
	for (int c = 0; c < CMD_COUNT; c++) {
		cli_settings s;
		memset(&s, 0, sizeof s);
		for (int i = 0; i < cli_settings_count; i++) {
			const cli_setting *st = &cli_settings_table[i];
			if (!takes(st, (enum cli_cmd)c)) continue;
			if (st->dflt && set_value(st, &s, "default", st->dflt))
				return base_seterr(err, errlen, LANES_EINVAL, "%s: bad default '%s'", st->names ? st->names : st->env, st->dflt);
			if (st->kind != SET_FLAG && !st->meta)
				return base_seterr(err, errlen, LANES_EINVAL, "%s: no value name", st->names ? st->names : st->env);
			char w[64];
			for (int k = 0; st->names && word_at(st->names, k, w, sizeof w); k++)
				if (find_option((enum cli_cmd)c, w, strlen(w)) != st)
					return base_seterr(err, errlen, LANES_EINVAL, "command %d sees %s twice", c, w);
		}
	}
	return 0;
}

// ---- man pages and shell completions ---------------------------------------------------------
// Text for roff: backslashes doubled as \e, a line never starting with a control character.
static void roff_text(FILE *f, const char *s) {
	if (*s == '.' || *s == '\'') fputs("\\&", f);
	for (; *s; s++) {
		if (*s == '\\') fputs("\\e", f);
		else if (*s == '-') fputs("\\-", f);
		else if (*s == '\n') {
			fputc('\n', f);
			if (s[1] == '.' || s[1] == '\'') fputs("\\&", f);
		} else fputc(*s, f);
	}
}

static void man_option(FILE *f, const cli_setting *st) {
	char w[64], b[96];
	fputs(".TP\n", f);
	if (!st->names) {
		fputs("\\fB", f);
		roff_text(f, st->env);
		fputs("\\fR=\\fI", f);
		roff_text(f, st->meta);
		fputs("\\fR\n", f);
	} else {
		for (int k = 0; word_at(st->names, k, w, sizeof w); k++) {
			fputs(k ? ", \\fB" : "\\fB", f);
			roff_text(f, w);
			fputs("\\fR", f);
		}
		if (st->kind != SET_FLAG) {
			fputs(" \\fI", f);
			roff_text(f, st->meta);
			fputs("\\fR", f);
		}
		fputc('\n', f);
	}
	roff_text(f, st->help);
	bounds_text(st, b, sizeof b);
	if (*b) {
		fputs(" [", f);
		roff_text(f, b);
		fputc(']', f);
	}
	fputc('\n', f);
}

static void man_head(FILE *f, const char *title, const char *name, const char *what) {
	fprintf(f, ".TH %s 1 \"\" \"", title);
	roff_text(f, base_version_string());
	fputs("\" \"lanes\"\n.SH NAME\n", f);
	roff_text(f, name);
	fputs(" \\- ", f);
	roff_text(f, what);
	fputc('\n', f);
}

// The environment variables c reads (c NULL: those every command reads), the exit codes, the
// pages to see.
static void man_tail(FILE *f, const cli_command *c, const char *see) {
	fputs(".SH ENVIRONMENT\n", f);
	for (int i = 0; i < cli_settings_count; i++) {
		const cli_setting *st = &cli_settings_table[i];
		if (!st->names && (st->cmds == ALL || (c && takes(st, c->id)))) man_option(f, st);
	}
	fputs(".SH EXIT STATUS\n.TP\n0\nsuccess\n.TP\n1\nthe work failed (a file that cannot be read, a model that does not load, "
	      "a plan that does not fit, a port in use); the message names the problem\n.TP\n2\nbad arguments: an unknown command or "
	      "option, a value out of its range, a missing requirement\n.SH SEE ALSO\n",
	      f);
	roff_text(f, see);
	fputc('\n', f);
}

void cli_print_man(FILE *f, const cli_command *cmds, int n, const cli_command *c) {
	if (!c) {
		man_head(f, "LANES", "lanes", "an LLM inference server: GGUF models on the CPU, served over HTTP");
		fputs(".SH SYNOPSIS\n\\fBlanes\\fR \\fICOMMAND\\fR [\\fIoptions\\fR]\n.br\n\\fBlanes help\\fR [\\fICOMMAND\\fR]\n.br\n"
		      "\\fBlanes \\-\\-version\\fR\n.SH DESCRIPTION\n"
		      "\\fBlanes\\fR loads GGUF models of the llama family, gemma2, gemma3, phi3 and gpt-oss, runs them on the CPU and serves them over the OpenAI, "
		      "Anthropic, Responses and Ollama HTTP APIs; its other commands inspect, convert, generate, benchmark and train. "
		      "Results go to stdout, logs and progress to stderr. Each command's page lists its options, their defaults "
		      "and their ranges.\n.SH COMMANDS\n",
		      f);
		char see[2048];
		size_t k = 0;
		for (int i = 0; i < n; i++) {
			fprintf(f, ".TP\n\\fBlanes\\-%s\\fR(1)\n", cmds[i].name);
			roff_text(f, cmds[i].what);
			fputc('\n', f);
			k += (size_t)snprintf(see + k, k < sizeof see ? sizeof see - k : 0, "%slanes-%s(1)", i ? ", " : "", cmds[i].name);
		}
		man_tail(f, NULL, see);
		return;
	}
	char title[64], name[64];
	snprintf(name, sizeof name, "lanes-%s", c->name);
	snprintf(title, sizeof title, "LANES-%s", c->name);
	for (char *p = title; *p; p++) *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
	man_head(f, title, name, c->what);
	fputs(".SH SYNOPSIS\n", f);
	char *line = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&line, &len);
	if (m) {
		cli_print_usage_line(m, c);
		fclose(m);
		roff_text(f, line + strlen("usage: "));
		free(line);
	}
	fputs(".SH DESCRIPTION\n", f);
	roff_text(f, c->what);
	fputs(".\n.SH OPTIONS\n", f);
	for (int i = 0; i < cli_settings_count; i++)
		if (cli_settings_table[i].names && takes(&cli_settings_table[i], c->id)) man_option(f, &cli_settings_table[i]);
	man_tail(f, c, "lanes(1)");
}

// The words of a '|' list, separated by spaces.
static void print_words(FILE *f, const char *list, const char *sep) {
	char w[64];
	for (int k = 0; word_at(list, k, w, sizeof w); k++) fprintf(f, "%s%s", k ? sep : "", w);
}

void cli_print_bash(FILE *f, const cli_command *cmds, int n) {
	fputs("# bash completion for lanes, written by `lanes help --bash` from its settings table\n"
	      "_lanes() {\n\tlocal cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} opts=\n"
	      "\tCOMPREPLY=()\n\tif [ \"$COMP_CWORD\" -eq 1 ]; then\n\t\tCOMPREPLY=($(compgen -W \"",
	      f);
	for (int i = 0; i < n; i++) fprintf(f, "%s ", cmds[i].name);
	fputs("help --help --version\" -- \"$cur\"))\n\t\treturn 0\n\tfi\n\tcase ${COMP_WORDS[1]} in\n\thelp)\n"
	      "\t\t[ \"$COMP_CWORD\" -eq 2 ] && COMPREPLY=($(compgen -W \"",
	      f);
	for (int i = 0; i < n; i++) fprintf(f, "%s%s", i ? " " : "", cmds[i].name);
	fputs("\" -- \"$cur\"))\n\t\treturn 0 ;;\n", f);
	for (int i = 0; i < n; i++) {
		const cli_command *c = &cmds[i];
		fprintf(f, "\t%s)\n\t\tcase $prev in\n", c->name);
		// a choice completes its choices; any other value is left to the shell (file names)
		for (int k = 0; k < cli_settings_count; k++) {
			const cli_setting *st = &cli_settings_table[k];
			if (!st->names || !takes(st, c->id) || st->kind == SET_FLAG) continue;
			fputs("\t\t", f);
			print_words(f, st->names, "|");
			if (st->kind == SET_CHOICE) {
				fputs(") COMPREPLY=($(compgen -W \"", f);
				print_words(f, st->meta, " ");
				fputs("\" -- \"$cur\")); return 0 ;;\n", f);
			} else fputs(") return 0 ;;\n", f);
		}
		fputs("\t\tesac\n\t\topts=\"", f);
		bool first = true;
		for (int k = 0; k < cli_settings_count; k++) {
			const cli_setting *st = &cli_settings_table[k];
			if (!st->names || !takes(st, c->id)) continue;
			fputs(first ? "" : " ", f);
			print_words(f, st->names, " ");
			first = false;
		}
		fputs("\" ;;\n", f);
	}
	fputs("\t*) return 0 ;;\n\tesac\n"
	      "\tcase $cur in -*) COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\")) ;; esac\n\treturn 0\n}\n"
	      "complete -o default -F _lanes lanes\n",
	      f);
}

// Text in a single-quoted zsh _arguments spec: quotes closed and reopened, and the characters
// that end its part (brackets in a description, colons in a value's name) escaped.
static void zsh_text(FILE *f, const char *s, const char *specials) {
	for (; *s; s++) {
		if (*s == '\'') fputs("'\\''", f);
		else if (strchr(specials, *s) || *s == '\\') fprintf(f, "\\%c", *s);
		else fputc(*s, f);
	}
}

void cli_print_zsh(FILE *f, const cli_command *cmds, int n) {
	fputs("#compdef lanes\n# zsh completion for lanes, written by `lanes help --zsh` from its settings table\n"
	      "_lanes() {\n\tlocal -a commands\n\tcommands=(\n",
	      f);
	for (int i = 0; i < n; i++) {
		fprintf(f, "\t\t'%s:", cmds[i].name);
		for (const char *p = cmds[i].what; *p; p++) fputs(*p == '\'' ? "'\\''" : (char[]){*p, 0}, f);
		fputs("'\n", f);
	}
	fputs("\t\t'help:describe a command'\n\t)\n\tif (( CURRENT == 2 )); then\n"
	      "\t\t_describe -t commands 'lanes command' commands\n\t\t_arguments '--version[print the version]' '--help[list the commands]'\n"
	      "\t\treturn\n\tfi\n\tlocal cmd=$words[2]\n\tshift words\n\t(( CURRENT-- ))\n\tcase $cmd in\n"
	      "\thelp) _describe -t commands 'lanes command' commands ;;\n",
	      f);
	for (int i = 0; i < n; i++) {
		const cli_command *c = &cmds[i];
		fprintf(f, "\t%s) _arguments -s", c->name);
		for (int k = 0; k < cli_settings_count; k++) {
			const cli_setting *st = &cli_settings_table[k];
			if (!st->names || !takes(st, c->id)) continue;
			char w[64];
			for (int j = 0; word_at(st->names, j, w, sizeof w); j++) {
				fputs(" \\\n\t\t'", f);
				if (st->kind == SET_LIST) fputc('*', f);
				else if (strchr(st->names, '|')) {
					fputc('(', f);
					print_words(f, st->names, " ");
					fputc(')', f);
				}
				fprintf(f, "%s[", w);
				zsh_text(f, st->help, "[]");
				fputc(']', f);
				if (st->kind == SET_CHOICE) {
					fputs(":", f);
					zsh_text(f, st->meta, ":");
					fputs(":(", f);
					print_words(f, st->meta, " ");
					fputc(')', f);
				} else if (st->kind == SET_STR || st->kind == SET_LIST) {
					fputs(":", f);
					zsh_text(f, st->meta, ":");
					fputs(":_files", f);
				} else if (st->kind != SET_FLAG) {
					fputs(":", f);
					zsh_text(f, st->meta, ":");
					fputs(": ", f);
				}
				fputc('\'', f);
			}
		}
		fputs(c->npos ? " \\\n\t\t'*:file:_files' ;;\n" : " ;;\n", f);
	}
	fputs("\tesac\n}\n_lanes \"$@\"\n", f);
}
