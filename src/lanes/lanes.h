// lanes: the lane host — runs many requests at once in rounds (admit, decode rows for
// live lanes, priced prompt pieces for filling lanes, one forward pass, sample, emit,
// finals) on one engine thread. No HTTP here; callers submit requests and read events.
#ifndef LANES_LANES_H
#define LANES_LANES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#define LANE_MAX_TOP_LOGPROBS 20
#define LANE_MAX_STOPS 16
#define LANE_MAX_DRAFT 16
#define LANE_MAX_SAMPLERS 16
#define LANE_MAX_DRY_BREAKERS 32
#define LANE_DRY_BREAKER_MAX 40 // bytes of one breaker

// Who proposed draft tokens: prompt lookup (n-gram), a draft model or the model's own MTP head.
enum lane_proposer { LANE_PROP_NGRAM, LANE_PROP_MODEL, LANE_PROP_MTP, LANE_PROP_COUNT };
// auto: n-gram drafts, then the draft model's when one is given, else the MTP head's when the
// model has one; ngram: n-gram drafts alone; mtp: as auto, and the model must have a head (or
// cfg.mtp_learn: one may be learned while serving).
enum lane_draft_mode { LANE_DRAFT_AUTO, LANE_DRAFT_OFF, LANE_DRAFT_NGRAM, LANE_DRAFT_MTP };
// An embedding request's pooling of its prompt's final hidden states into one vector: the
// last token's, the mean over every token, or the first token's; or none: every token's own.
enum lane_embed { LANE_EMBED_OFF, LANE_EMBED_LAST, LANE_EMBED_MEAN, LANE_EMBED_CLS, LANE_EMBED_NONE };

typedef struct lane_api lane_api;

typedef struct {
	int32_t token;
	float bias;               // added to the token's logit; -INFINITY bans it
} lane_bias;

typedef struct {
	float temperature;        // 0: greedy
	int32_t top_k;            // 0: off
	float top_p;              // 1: off
	float min_p;              // 0: off
	float typical_p;          // locally typical sampling: 1 (or 0, unset): off
	float repeat_penalty;     // 1: off; applied over the last repeat_last_n tokens
	int32_t repeat_last_n;    // 0: the whole context
	float presence_penalty;   // 0: off
	float frequency_penalty;  // 0: off
	float dry_multiplier;     // DRY: 0: off (sample_dry)
	float dry_base;
	int32_t dry_allowed_length;
	int32_t dry_penalty_last_n; // -1: the whole context, 0: off
	const char *const *dry_breakers; // n_dry_breakers strings: a token whose text holds one breaks a match (copied at submit)
	int32_t n_dry_breakers;
	float xtc_probability;    // 0: off
	float xtc_threshold;
	float top_n_sigma;        // <= 0: off
	float dynatemp_range;     // 0: a fixed temperature
	float dynatemp_exponent;
	int32_t mirostat;         // 0: off, 1 or 2
	float mirostat_tau, mirostat_eta;
	uint8_t samplers[LANE_MAX_SAMPLERS]; // enum sample_stage in the order they run
	int32_t n_samplers;       // 0: the default order (every stage)
	const lane_bias *bias;    // n_bias entries (copied at submit)
	int32_t n_bias;
	uint64_t seed;            // with has_seed false the host draws one per request
	bool has_seed;
	int32_t choice;           // choice index: the draw of token p is a function of (seed, choice, p)
} lane_sampling;

// A reply's thinking section and its budget. The markers are read on the request's own text;
// the forced tokens are the request's own, so a budgeted request's tokens are a function of the
// request alone, whatever runs beside it.
typedef struct {
	const char *open, *close; // the section's markers (1..LANE_THINK_MARKER bytes each; copied at submit)
	bool inside;              // the prompt opened the section: the reply starts in it
	int32_t budget;           // thinking tokens, counted after the open marker; then end_ids are
	                          // taken as the next tokens in place of draws (-1: no bound)
	const int32_t *end_ids;   // the close marker and what the template writes after it (copied at submit)
	int32_t n_end_ids;        // 1..LANE_THINK_END
} lane_think;
#define LANE_THINK_MARKER 64
#define LANE_THINK_END 64

typedef struct {
	const int32_t *prompt;    // prompt ids (copied at submit)
	int32_t n_prompt;
	lane_sampling sampling;
	int32_t max_tokens;       // <= 0: up to the context a request may use
	const int32_t *stop_ids;  // extra stop tokens besides the vocabulary's end-of-generation set
	int32_t n_stop_ids;
	const char *const *stop_strs; // stop strings, matched on text across tokens, never emitted
	int32_t n_stop_strs;
	bool ignore_eos;          // keep generating through end-of-generation tokens
	bool logprobs;            // report each token's log-probability
	int32_t top_logprobs;     // and the top n alternatives (<= LANE_MAX_TOP_LOGPROBS)
	bool draft;               // allow speculative drafting for this request (never changes its tokens)
	// Each prompt token's log-probability after the first (and its rank, and the top
	// prompt_top_logprobs alternatives), from the prompt pass itself: its rows keep their
	// logits. Such a request does not read the prefix cache (a cached row has no logits).
	bool prompt_logprobs;
	int32_t prompt_top_logprobs; // 0..LANE_MAX_TOP_LOGPROBS
	const lane_api *api;      // the API's names and narrower bounds for errors (NULL: the host's)
	// LANE_EMBED_OFF: generate. Otherwise the prompt runs through the rounds like any other
	// and the request ends with its pooled vector, generating nothing (max_tokens, sampling
	// and stops are unused). LANE_EMBED_LAST reads and feeds the prefix cache as a generation
	// does; the other poolings read every row, so they neither read nor write it.
	enum lane_embed embed;
	bool normalize;           // an embedding is L2-normalized (default true)
	// Constrained decoding (NULL: none): every token drawn is one the grammar allows, and an
	// end-of-generation token only where its text is whole. The host takes its own reference.
	// With triggers the constraint starts where the text first contains one (lazy). With think,
	// it starts after the thinking section (none is looked for unless the prompt opened one).
	struct grammar *grammar;
	const char *const *grammar_triggers; // copied at submit
	int n_grammar_triggers;
	// Reasoning (NULL: none): where the thinking section ends, and its budget (copied at submit).
	const lane_think *think;
	// Adapters every row of the request adds, loaded for the host's model (copied at submit,
	// when the host takes a reference on each that it drops as the request ends: the caller may
	// drop its own at once). NULL: none. The prefix cache keys on the set (each adapter's
	// model_lora_id and scale, in order): KV cached under one set is never reused by another.
	const model_lora_set *lora;
	// The domain the expert observer counts the request's rows under (lane_check_domain;
	// copied at submit). NULL or "": none (counted in the totals alone).
	const char *domain;
	// A capacity lease (lane_lease_new) the request uses: it takes one of the lease's lanes and
	// its share of the pages, and is admitted before requests without one. 0, or a lease that is
	// used up, released or lapsed: an ordinary request.
	uint64_t lease;
} lane_request;

// Neutral sampling (temperature 1, no top-k/top-p/min-p, no penalties, DRY, XTC, top-nσ or
// mirostat; their other parameters at llama-server's defaults), drafting allowed. Thread-safe.
void lane_request_init(lane_request *q);

// ---- the request contract: one set of bounds, narrowed per API ----------------------------
// Every field a request's bounds cover. The host's own bounds are the widest; an API may
// narrow a range and name a field its own way (lane_api), and the one validator below
// checks both.
enum lane_field {
	LANE_F_PROMPT,
	LANE_F_MAX_TOKENS,
	LANE_F_TEMPERATURE,
	LANE_F_TOP_K,
	LANE_F_TOP_P,
	LANE_F_MIN_P,
	LANE_F_TYPICAL_P,
	LANE_F_REPEAT_PENALTY,
	LANE_F_REPEAT_LAST_N,
	LANE_F_PRESENCE_PENALTY,
	LANE_F_FREQUENCY_PENALTY,
	LANE_F_LOGIT_BIAS,
	LANE_F_STOP,
	LANE_F_STOP_IDS,
	LANE_F_TOP_LOGPROBS,
	LANE_F_CHOICE,
	LANE_F_DRY_MULTIPLIER,
	LANE_F_DRY_BASE,
	LANE_F_DRY_ALLOWED_LENGTH,
	LANE_F_DRY_PENALTY_LAST_N,
	LANE_F_DRY_SEQUENCE_BREAKERS,
	LANE_F_XTC_PROBABILITY,
	LANE_F_XTC_THRESHOLD,
	LANE_F_TOP_N_SIGMA,
	LANE_F_DYNATEMP_RANGE,
	LANE_F_DYNATEMP_EXPONENT,
	LANE_F_MIROSTAT,
	LANE_F_MIROSTAT_TAU,
	LANE_F_MIROSTAT_ETA,
	LANE_F_SAMPLERS,
	LANE_F_COUNT
};

typedef struct {
	bool set;                 // false: the host's range alone
	double lo, hi;            // inclusive
} lane_range;
#define LANE_RANGE(lo, hi) {true, (lo), (hi)}

// How one API presents the contract: its names for the fields (NULL: the host's name) and
// the ranges it documents where they are narrower than the host's.
struct lane_api {
	const char *name[LANE_F_COUNT];
	lane_range range[LANE_F_COUNT];
};

// The host's name of a field ("temperature", "max_tokens", ...). Thread-safe.
const char *lane_field_name(enum lane_field f);
// api's name of f (the host's when api is NULL or names none). Thread-safe.
const char *lane_api_name(const lane_api *api, enum lane_field f);
// Checks one value of field f against the host's range and api's (NULL: the host's alone).
// 0, or LANES_EINVAL with "NAME must be between LO and HI, got V" in err. Thread-safe.
int lane_check_value(const lane_api *api, enum lane_field f, double v, char *err, size_t errlen);
// Checks q's sampling and limits — everything but the prompt — with the bounds above and
// the vocabulary's size for token ids. Cheap: callers run it before building the prompt.
// 0, or LANES_EINVAL with err naming the field and *bad (may be NULL) set to it. Thread-safe.
int lane_check_params(const lane_request *q, const lane_api *api, int32_t n_vocab, char *err, size_t errlen,
		      enum lane_field *bad);

enum lane_ev_kind { LANE_EV_TOKEN, LANE_EV_FINISHED, LANE_EV_CANCELLED, LANE_EV_FAILED };
// GRAMMAR: the grammar allows no token here (ambiguity past its stacks that compile did not
// reach, or biases that ban every token it allows); the text so far is all emitted.
enum lane_finish { LANE_FINISH_STOP, LANE_FINISH_LENGTH, LANE_FINISH_STOP_SEQUENCE, LANE_FINISH_GRAMMAR };

typedef struct {
	int32_t token;
	float logprob;
} lane_top;

typedef struct {
	enum lane_ev_kind kind;
	// LANE_EV_TOKEN
	int32_t token;            // generated id
	const char *text;         // text now complete (may be empty: held for UTF-8 or a stop string)
	size_t text_len;
	float logprob;            // when requested
	int32_t n_top;
	const lane_top *top;      // n_top alternatives, most likely first
	// terminal events
	enum lane_finish finish;  // LANE_EV_FINISHED
	int32_t stop_index;       // stop string matched, or -1
	const char *reason;       // LANE_EV_FAILED: why
	char token_sha[65];       // SHA-256 of the generated ids as little-endian int32, hex
	int32_t n_prompt;         // prompt tokens
	int32_t n_generated;      // generated tokens
	int32_t n_cached;         // prompt tokens taken from the prefix cache
	const float *embedding;   // LANE_EV_FINISHED of an embedding request: n_vectors x n_embd floats
	int32_t n_embd;           // (one, or one per prompt token for LANE_EMBED_NONE), valid until
	int32_t n_vectors;        // lane_req_free; a function of the prompt alone, bit for bit
	uint64_t t_us;            // when the engine queued it (base_now_us): its time, however late it is read
} lane_event;

typedef struct lane_host lane_host;
typedef struct lane_req lane_req;

// A lane filling its prompt, as the row policy sees it.
typedef struct {
	int32_t lane;             // lane id
	uint64_t serial;          // submit order (smaller: earlier)
	int32_t filled;           // prompt tokens in KV
	int32_t remaining;        // prompt tokens still to feed
} lane_fill;

// Hooks that change how a round is filled; NULL fields keep the defaults. None of them
// can change a request's tokens — only when its rows run.
typedef struct {
	void *arg;
	// Budget: prompt rows this round may add beside n_decode decode and draft rows
	// (default: the share of --round-ms the calibrated pricing model leaves).
	int32_t (*budget)(void *arg, int32_t n_decode, double row_us, double fixed_us, double round_ms);
	// Row policy: the index in filling[0..n) of the lane that gets the next prompt piece,
	// or -1 for none (default: the earliest admitted).
	int32_t (*next_piece)(void *arg, const lane_fill *filling, int32_t n);
	// Proposer: up to k draft tokens to follow ctx (its last n tokens) into out; returns
	// how many (default: prompt lookup, then the draft model when one is configured).
	int32_t (*propose)(void *arg, const int32_t *ctx, int32_t n, int32_t *out, int32_t k);
} lane_hooks;

// Work the host runs beside the requests (the server's training steps), on the engine thread:
// priced in prompt rows (what a forward pass over that many prompt tokens costs), given at
// most `share` of what a round has for prompt pieces and run after the round's forward pass.
// It never touches a request's rows, KV or adapters, so it cannot change a token. The host
// measures the time a unit of its price takes, so the share holds in time.
typedef struct {
	void *arg;
	// The price of the next piece, in prompt rows; 0: nothing to run now.
	double (*cost)(void *arg);
	// Runs pieces in order while the next one's price fits in budget (prompt rows); returns
	// the prices of those it ran.
	double (*run)(void *arg, base_pool *pool, double budget);
	// At every round boundary, after the round (and after lane_host_wake, even while idle): the
	// owner's own tasks and commits. True when it has pieces for the next round (the engine
	// then does not wait for requests).
	bool (*boundary)(void *arg);
	// The host halts: after every request has ended, before the halt's snapshot.
	void (*halt)(void *arg);
	double share;             // most of a round's prompt budget it takes: (0, 1] when run is set
} lane_background;

typedef struct {
	int32_t lanes;            // concurrent requests (default 4)
	int32_t queue;            // waiting requests beyond the lanes (default 64)
	int32_t ctx;              // KV tokens across all lanes (default 8192)
	int32_t piece;            // most prompt tokens one lane feeds per round (0: no cap)
	double round_ms;          // target duration of a round with prompt pieces (default 100)
	double row_us, fixed_us;  // the pricing of a row and of a round's fixed cost (0: timed at start)
	int32_t threads;          // compute threads (0: one per core)
	base_pool *pool;          // compute threads shared with other lane hosts (borrowed, base_pool_share'd; NULL: its own of threads)
	int32_t page_tokens;      // KV page size (default 16)
	enum kv_type kv_type;     // KV cache type (default f16s)
	bool prefix_cache;        // share prompt KV across requests (default on)
	// The prefix cache's pages of the base model kept in this folder across restarts (NULL:
	// in memory only), at most cache_dir_bytes of them; cache_ident names the model's file
	// (base_file_ident), to which the host adds its kernel set and KV layout.
	const char *cache_dir;
	uint64_t cache_dir_bytes;
	uint8_t cache_ident[32];
	enum lane_draft_mode draft; // who drafts (enum lane_draft_mode)
	int32_t draft_max;        // most draft tokens per lane per round (default 8; adapted per lane)
	const model *draft_model; // optional; its vocabulary must equal the target's
	// A head may be learned while serving (lane_host_set_head): with draft mtp, a model without
	// an MTP layer opens the head's machinery and its lanes draft with the head once one is set.
	bool mtp_learn;
	lane_hooks hooks;         // budget, row policy and proposer (zero: the defaults)
	uint64_t seed;            // seeds drawn for requests without one come from here
	// Elastic window (window_max > 0): the KV holds lanes * window tokens, the window a
	// request may use follows demand between `window` (the floor) and window_max, and
	// ctx is ignored. window_max == 0: a fixed pool of ctx tokens.
	int32_t window;
	int32_t window_max;
	double window_recent_s;   // demand counts requests that ended this recently (default 300)
	bool experts;             // count each MoE layer's expert choices (default on; lane_host_experts)
	lane_background background; // work beside the requests (zero: none)
} lane_config;

// The samplers' bounds: the request contract's (lane_check_params) and the CLI's defaults'.
#define LANE_RANGE_DRY_MULTIPLIER 0, 100
#define LANE_RANGE_DRY_BASE 1, 100
#define LANE_RANGE_DRY_ALLOWED_LENGTH 0, 1000000
#define LANE_RANGE_DRY_PENALTY_LAST_N -1, 2147483647
#define LANE_RANGE_XTC_PROBABILITY 0, 1
#define LANE_RANGE_XTC_THRESHOLD 0, 1
#define LANE_RANGE_TOP_N_SIGMA -1, 100
#define LANE_RANGE_DYNATEMP_RANGE 0, 1000
#define LANE_RANGE_DYNATEMP_EXPONENT 0, 100
#define LANE_RANGE_MIROSTAT 0, 2
#define LANE_RANGE_MIROSTAT_TAU 0, 100
#define LANE_RANGE_MIROSTAT_ETA 0, 10
// What lane_request_init gives them (llama-server's defaults); the CLI states its defaults from these.
#define LANE_DEFAULT_DRY_BASE 1.75
#define LANE_DEFAULT_DRY_ALLOWED_LENGTH 2
#define LANE_DEFAULT_DRY_PENALTY_LAST_N -1
#define LANE_DEFAULT_XTC_THRESHOLD 0.1
#define LANE_DEFAULT_TOP_N_SIGMA -1
#define LANE_DEFAULT_DYNATEMP_EXPONENT 1
#define LANE_DEFAULT_MIROSTAT_TAU 5
#define LANE_DEFAULT_MIROSTAT_ETA 0.1

// What lane_config_default gives; the CLI's settings table states its defaults from these.
#define LANE_DEFAULT_QUEUE 64
#define LANE_DEFAULT_CTX 8192
#define LANE_DEFAULT_ROUND_MS 100
#define LANE_DEFAULT_DRAFT_MAX 8
#define LANE_DEFAULT_CACHE_DIR_BYTES (4ull << 30)

// The values lane_config_check takes (min, max), said once: the CLI's settings table reads them.
#define LANE_RANGE_LANES 1, 64
#define LANE_RANGE_QUEUE 0, 1000000
#define LANE_RANGE_CTX 16, 16777216
#define LANE_RANGE_PIECE 0, 2147483647
#define LANE_RANGE_ROUND_MS 0.001, 100000
#define LANE_RANGE_PAGE_TOKENS 1, 4096
#define LANE_RANGE_DRAFT_MAX 0, 16

// The defaults above. Thread-safe.
void lane_config_default(lane_config *c);
// Checks cfg's values against the ranges above and each other. 0, or LANES_EINVAL with err
// naming the field (as lane_config spells it) and its range. Thread-safe; lane_host_new calls it.
int lane_config_check(const lane_config *cfg, char *err, size_t errlen);

// Bytes the host allocates for compute beside the KV: the forward pass's workspace for the
// most rows one round can hold, the logits of those rows, and sampling scratch. Uses
// lanes, draft_max, threads (0: one per core), the draft model and, for unfused attention,
// the largest window. cfg's draft_max must be 0..LANE_MAX_DRAFT, as lane_host_new checks
// (others abort). Thread-safe.
uint64_t lane_compute_bytes(const model_hparams *hp, const lane_config *cfg);
// Most rows one round forwards: a decode row and draft_max drafts per lane, plus prompt rows.
// cfg's draft_max must be 0..LANE_MAX_DRAFT (others abort). Thread-safe.
int32_t lane_max_rows(const lane_config *cfg);
// Tokens of a sliding-window model's local layers one lane keeps in memory at most: its
// window, the window before its prompt's end and before each lane_window_stride of it (for a
// resume of the prompt or of one that parts from it), the rows one round adds and three pages
// (0: the model has no local layers; the window itself when it is shorter). Thread-safe.
int32_t lane_local_tokens(const lane_config *cfg, const model_hparams *hp, int32_t window);
// The stride of the windows a lane keeps inside its prompt for prompts that part from it: four
// windows, in whole pages. Thread-safe.
int32_t lane_window_stride(const lane_config *cfg, const model_hparams *hp);

// Checks cfg (LANES_EINVAL naming the field and its range), allocates everything the host
// will use, prices a round and starts the engine thread over m and vocab (both must outlive
// the host). 0, LANES_EINVAL or LANES_ENOMEM with err. Thread-safe: each call builds its own host.
int lane_host_new(lane_host **out, const model *m, const tok_vocab *vocab, const lane_config *cfg,
		  char *err, size_t errlen);
// Halts (if not yet), joins the engine thread and frees. Requests still held by callers
// remain valid until lane_req_free. Not thread-safe: no other call on h may run during or
// after it (calls on requests may).
void lane_host_free(lane_host *h);

// The tokens one request may use at most: min(model context, --ctx), or the largest window.
// Thread-safe.
int32_t lane_host_max_context(const lane_host *h);
// The same before a host exists: what a host of cfg over a model of hp will answer (the context
// to give model_set_context). Thread-safe.
int32_t lane_config_max_context(const lane_config *cfg, const model_hparams *hp);

// Checks q's prompt (not empty, every id in the vocabulary) and that it leaves room in the
// context a request may use for a token (an embedding: that it fits). A larger max_tokens is
// not an error: generation stops at the context with LANE_FINISH_LENGTH. 0; LANES_EINVAL or
// LANES_ELIMIT with *bad = LANE_F_PROMPT and err naming the numbers. Thread-safe.
int lane_check_prompt(const lane_host *h, const lane_request *q, const lane_api *api, char *err, size_t errlen,
		      enum lane_field *bad);
// Cheap bounds on a prompt before it is rendered and tokenized: each of n_parts (messages)
// takes at least one token, and no token covers more text than the vocabulary's longest,
// so n_bytes of text need at least n_bytes / that many. 0, or LANES_ELIMIT (*bad =
// LANE_F_PROMPT) when the prompt cannot fit the context a request may use. Thread-safe.
int lane_check_prompt_size(const lane_host *h, size_t n_parts, size_t n_bytes, const lane_api *api, char *err,
			   size_t errlen, enum lane_field *bad);
// The log-probability entries (each token and each alternative) n choices of q may report
// at most: n x min(max_tokens, max_ctx) (max_ctx when unset) x (1 + top_logprobs), 0 without logprobs.
// Thread-safe.
int64_t lane_output_entries(const lane_request *q, int32_t n, int32_t max_ctx);
// A fresh seed for a request that gave none: 53 bits, so JSON clients keep it exact; drawn
// from the host's seed sequence (lane_config.seed). Thread-safe.
uint64_t lane_draw_seed(lane_host *h);

// Submits a request: lane_check_params and lane_check_prompt with the host's bounds (and
// q->api's when set), then queues it. Never blocks on the engine. On success *out is the caller's handle.
// Errors: LANES_EINVAL (bad parameters: message in err), LANES_ELIMIT (the prompt does not
// fit the context a request may use), LANES_EBUSY (queue full), and
// LANES_ECANCELLED (the host is halting or draining). Thread-safe.
int lane_submit(lane_host *h, const lane_request *r, lane_req **out, char *err, size_t errlen);

// Waits up to timeout_us (<0: forever) for the request's next event. Returns 1 with *ev
// filled (valid until the next call on req), 0 on timeout. After a terminal event there
// are no more events. Not thread-safe on one req: one reader per request (safe beside the
// engine thread).
int lane_next(lane_req *req, lane_event *ev, int64_t timeout_us);
// Asks the host to cancel req: it ends with a cancelled event (unless it already ended).
// Thread-safe.
void lane_cancel(lane_req *req);
// A prompt token's log-probability as the prompt pass gave it: rank 1 is the most likely token.
typedef struct {
	float logprob;
	int32_t rank;
} lane_prompt_lp;
// The prompt's log-probabilities of a request submitted with prompt_logprobs, once its first
// event has been read (the prompt pass is whole then): entry i (1..n_prompt-1) is lp[i], with
// its alternatives top[i*k .. i*k+k) most likely first (*k of them); entry 0 has none. NULL for
// a request without them. Valid until lane_req_free; read by the request's reader.
const lane_prompt_lp *lane_req_prompt_logprobs(const lane_req *req, const lane_top **top, int32_t *k);
// Releases the caller's handle; cancels the request first if it has not ended. Once per
// handle, by its reader (safe beside the engine thread).
void lane_req_free(lane_req *req);
// A callback run (from the engine thread, under a lock of req's own: it must not block or
// call lane functions on req) as each event is queued, once the reader can take it; ev is
// a copy of that event, valid during the call (its text and top are not set), so the
// callback may leave the reader asleep until one it cares about. After set_notify returns,
// the old callback is not running and will not run again. Thread-safe.
void lane_req_set_notify(lane_req *req, void (*fn)(void *arg, const lane_event *ev), void *arg);

// Halt: at the next round boundary every queued and admitted request ends failed with
// reason (copied). Further submits are refused. Idempotent. Thread-safe.
void lane_host_halt(lane_host *h, const char *reason);
// Stop admitting new submits (drain); accepted requests go on. Thread-safe.
void lane_host_drain(lane_host *h);
// Asks for a round boundary soon, even while no request runs: the background's owner has
// tasks for its boundary callback. Thread-safe; never waits for a round.
void lane_host_wake(lane_host *h);
// Whether the host drafts with an MTP head, so that lane_host_set_head may give it one.
bool lane_host_head_ok(const lane_host *h);
// From the next MTP pass on, the head drafts with version v (the host takes this reference;
// NULL: the model's own head again). Requests admitted afterwards draft with it where the model
// has no head of its own; each lane's head KV keeps the rows earlier versions wrote (drafts
// never change a token). Only on the engine thread, between rounds: from the background's
// boundary hook.
void lane_host_set_head(lane_host *h, model_head *v);
// Requests not yet ended (queued + admitted). Thread-safe.
int32_t lane_host_open(lane_host *h);

enum lane_phase { LANE_IDLE, LANE_FILLING, LANE_LIVE };

typedef struct {
	int32_t id;
	enum lane_phase phase;
	int32_t prompt_tokens;    // the request's prompt length
	int32_t filled;           // prompt tokens in KV so far
	int32_t generated_tokens;
	int32_t draft_k;          // draft tokens it may propose next
	float draft_acceptance;   // accepted / proposed draft tokens so far (0 when none)
	int32_t n_draft_at;       // places in a proposal that drafts reached so far
	float draft_acceptance_at[LANE_MAX_DRAFT]; // of those, accepted / proposed at each place
} lane_snap_lane;

#define LANE_SNAP_MAX_LANES 64
#define LANE_SNAP_MAX_LORA 64
#define LANE_HIST_BUCKETS 12

// One adapter the requests not yet ended add, by its model_lora_id.
typedef struct {
	uint64_t id;
	int32_t running;          // admitted requests (filling or live) that add it
	int32_t waiting;          // queued requests that add it
} lane_snap_lora;

// Upper bounds (seconds) of the duration histograms' buckets; the last is +Inf.
extern const double lane_hist_bounds[LANE_HIST_BUCKETS];

typedef struct {
	uint64_t count[LANE_HIST_BUCKETS]; // observations <= bound (cumulative, as Prometheus wants)
	uint64_t n;
	double sum;                        // seconds
} lane_hist;

// What the engine publishes at every round boundary; control reads copy it without
// touching the engine.
typedef struct {
	uint64_t sequence;        // snapshots published so far
	uint64_t clock_us;        // when this one was published
	int32_t n_lanes;
	lane_snap_lane lanes[LANE_SNAP_MAX_LANES];
	int32_t queue_depth;
	int32_t kv_pages_used, kv_pages_free, kv_pages_cached;
	int32_t kv_local_held;      // a sliding-window model's pages whose local layers' rows are in memory
	uint64_t kv_local_freed;    // times a page's local rows were freed (kv_seq_release_window and the cap)
	uint64_t kv_local_page_bytes; // bytes of one page's local rows
	uint64_t prefix_hit_tokens;
	kv_disk_stats prefix_disk;  // the prefix cache's pages on disk (zero without --cache-dir)
	uint64_t prefix_query_tokens; // prompt tokens of the requests that looked in the prefix cache
	uint64_t prompt_tokens, generated_tokens;
	uint64_t rounds;
	uint64_t forward_us;      // time inside forward passes, summed
	uint64_t draft_tokens[LANE_PROP_COUNT];   // proposed
	uint64_t draft_accepted[LANE_PROP_COUNT]; // of which the target confirmed
	uint64_t draft_at[LANE_PROP_COUNT][LANE_MAX_DRAFT], draft_accepted_at[LANE_PROP_COUNT][LANE_MAX_DRAFT]; // the same by position in the drafts
	uint64_t draft_replayed;  // accepted drafts fed again after a recurrent state's rewind
	lane_hist round_seconds;  // whole rounds
	lane_hist forward_seconds; // their forward passes
	uint64_t finished, cancelled, failed, rejected;
	// memory and the elastic window (window fields 0 with a fixed pool)
	int32_t window;           // tokens a request may use now
	int32_t window_demand;    // p95 of recent requests' sizes
	int32_t window_floor, window_max;
	uint64_t kv_bytes;        // KV pages the pool may use now (limit), every layer (a sliding-window model's local rows: the cap's pages)
	uint64_t kv_reserved_bytes; // the whole reservation
	uint64_t kv_used_bytes;   // pages held (a sliding-window model's local rows: the pages that hold them)
	uint64_t compute_bytes;   // workspace, logits and scratch the host allocated
	int32_t n_lora;           // adapters in use, the first LANE_SNAP_MAX_LORA of them by lane, then queue order
	lane_snap_lora lora[LANE_SNAP_MAX_LORA];
	bool halting;             // a halt was asked for
	bool halted;              // and every request it took over has ended
	bool draining;
	// capacity, fresh at every copy (not at the round boundary): what a new request or lease could take
	int32_t lanes_free;       // lanes no request (running or queued) or lease holds
	uint64_t kv_free_bytes;   // KV bytes of the pages no admitted request or lease holds
	uint64_t kv_page_bytes;   // bytes of one KV page, every layer
	int32_t kv_pages_limit;   // pages the pool may use now
	int32_t leases;           // leases open
	int32_t leased_lanes;     // lanes held for leases, by the leases or by their queued requests
} lane_snapshot;

// Copies the last snapshot the engine published (with the current rejected count, queue depth
// and capacity) into *out; never waits for a round. Thread-safe.
void lane_host_snapshot(lane_host *h, lane_snapshot *out);

// ---- the expert observer (lane_config.experts on a MoE model) -----------------------------
// Every row a forward pass computes (prompt rows, decode rows and draft rows; not prompt tokens
// taken from the prefix cache) adds its choices at every MoE layer to the counters of its
// request's domain and phase (prompt or generated), after the pass, on the engine thread.
#define LANE_DOMAIN_MAX 32      // bytes of a domain name
#define LANE_EXPERT_DOMAINS 8   // named domains a window holds; later names count as "other"
#define LANE_EXPERT_SLOTS (LANE_EXPERT_DOMAINS + 2) // unlabeled, the named ones, "other"
enum lane_expert_phase { LANE_PHASE_PROMPT, LANE_PHASE_GENERATED, LANE_PHASE_COUNT };

// A copy of the counters since the window began.
typedef struct {
	model_experts *counts;    // group slot * LANE_PHASE_COUNT + phase (allocated by lane_experts_init)
	int32_t n_named;          // named domains in slots 1..n_named
	char name[LANE_EXPERT_SLOTS][LANE_DOMAIN_MAX + 1]; // slot names: "" (unlabeled), the named, "other"
	uint64_t window;          // windows begun before this one (each reset begins one)
	double seconds;           // how long this window has run
} lane_experts;

// Checks a domain name: 1..LANE_DOMAIN_MAX letters, digits, '_', '-' or '.'. 0, or LANES_EINVAL
// with err naming the rule. Thread-safe.
int lane_check_domain(const char *domain, char *err, size_t errlen);
// Whether h counts experts: a MoE model with lane_config.experts. Thread-safe.
bool lane_host_observes_experts(const lane_host *h);
// Room for a copy of h's counters in e. 0; LANES_ENOTFOUND when h counts no experts; LANES_ENOMEM.
// Thread-safe.
int lane_experts_init(const lane_host *h, lane_experts *e);
void lane_experts_release(lane_experts *e); // accepts one never initialized (zeroed)
// Copies the counters into e (initialized for h); reset then begins a new window: every counter
// zero, no named domain. Never waits for a round: the engine holds the counters' lock only to
// add a pass's choices. Thread-safe.
void lane_host_experts(lane_host *h, lane_experts *e, bool reset);
// ---- capacity leases: lanes and KV pages held for a lessee (a peer about to forward work) ----
// A lease holds lanes (and the pages of a prompt spike) until requests that name it take them,
// it is released, or it lapses. Requests without a lease are admitted only to the lanes and
// pages no lease holds; a request that names one is admitted before them.
typedef struct {
	uint64_t id;              // what lane_request.lease and lane_lease_release name (never 0)
	int32_t granted;          // lanes held: 1..want
	int32_t pages;            // KV pages held for the prompt spike
	uint64_t kv_bytes;        // their bytes
	uint64_t expires_us;      // base_now_us() when it lapses unless used up or released first
} lane_lease;

#define LANE_LEASE_MAX_TTL_US (600ull * 1000000) // ten minutes

// Holds as many lanes as are free up to want (at least one) and the KV pages spike_bytes take,
// for ttl_us (1..LANE_LEASE_MAX_TTL_US). 0 with *out; LANES_EINVAL (want < 1, a ttl out of
// range); LANES_EBUSY when no lane is free or not the pages (err gives the free figures);
// LANES_ECANCELLED while draining or halting. Thread-safe; never waits for a round.
int lane_lease_new(lane_host *h, int32_t want, uint64_t spike_bytes, uint64_t ttl_us, lane_lease *out, char *err,
		   size_t errlen);
// Gives back the lanes and pages of lease id that no request took yet. 0, or LANES_ENOTFOUND
// when no such lease is held (used up, released or lapsed). Thread-safe.
int lane_lease_release(lane_host *h, uint64_t id);

// ---- slots: what a lane last held, saved, restored and erased (llama-server's slot actions) ----
// A lane's last request (one that finished or was cancelled) leaves its prompt on record; its
// cached pages of the base model are what a save writes and an erase drops. Restore takes a file's
// pages into the prefix cache, so a prompt that starts with its tokens hits them; the lane's record
// becomes the file's tokens. Every action runs on the engine thread at a round boundary.
enum lane_slot_action { LANE_SLOT_SAVE, LANE_SLOT_RESTORE, LANE_SLOT_ERASE };
typedef struct {
	enum lane_slot_action action;
	int32_t lane;             // 0..lanes-1
	uint8_t *bytes;           // save: the file made (malloc'd, the caller frees); restore: the file's bytes (the caller's)
	size_t n_bytes;
	int32_t n_tokens;         // tokens saved, restored or erased
} lane_slot_job;
// The largest slot file a restore may take (every KV page), 0 when the host has no prefix cache
// on disk. Thread-safe.
uint64_t lane_slot_max_bytes(const lane_host *h);
// Runs job at the engine's next round boundary and waits for it: call from a thread that may wait
// a round, never an HTTP or engine thread. 0; LANES_ENOTFOUND (no such lane), LANES_EBUSY (the
// lane runs a request), LANES_EUNSUPPORTED (no prefix cache on disk, a recurrent model; a save
// whose last request used adapters), LANES_EINVAL (a restore's file damaged, truncated or another
// cache's), LANES_ENOMEM, LANES_ECANCELLED (halting); with err. Thread-safe.
int lane_slot_run(lane_host *h, lane_slot_job *job, char *err, size_t errlen);

// Hooks for tests: when set, fault(arg, round, request_serial) returning true makes an
// allocation for that request fail in that round. Not thread-safe against a running round:
// the engine reads it without a lock (a hook for tests only).
void lane_host_set_fault(lane_host *h, bool (*fault)(void *arg, uint64_t round, uint64_t serial), void *arg);

#endif
