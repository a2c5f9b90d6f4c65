// lanes: private structures and functions shared by the host's files (engine, admit, round,
// emit, finals, window, draft, snapshot, req); nothing here is seen outside src/lanes.
#ifndef LANES_LANES_INT_H
#define LANES_LANES_INT_H

#include "grammar/grammar.h"
#include "lanes/lanes.h"
#include "sample/sample.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#define LANE_DEMAND_SAMPLES 256 // recent requests' sizes the window follows
#define LANE_PROMPT_ROWS 512     // prompt rows one round carries at most
#define LANE_DRAFT_CHUNK 512     // rows per draft-model pass while it catches up
#define MTP_IDLE 8               // rounds a lane's head drafts go unasked before its head stops being fed
// What one multiply-add of an adapter's term costs against one of the base model's matmuls:
// the terms run in f32 over small matrices, rows grouped by adapter, where the base's kernels
// reuse each quantized weight across the whole batch.
#define LANE_LORA_MADD_COST 4.0

typedef struct ev_node {
	struct ev_node *next;
	lane_event ev;
	lane_top top[LANE_MAX_TOP_LOGPROBS];
	// token text follows the node
} ev_node;

// A capacity lease as the host holds it (lease.c).
struct lane_lease_slot {
	uint64_t id;
	int32_t lanes, pages;     // still held: not yet taken by a request
	uint64_t expires_us;
};

struct lane_req {
	lane_host *host;
	atomic_int refs;          // the caller's handle and the host's
	atomic_bool cancel;
	uint64_t serial;          // submit order

	// the request, copied at submit
	int32_t *prompt, n_prompt;
	lane_sampling s;
	sample_params sp;         // the sampler's view of s, built once at submit
	sample_penalties pen;
	sample_dry dry;           // DRY (multiplier 0: off), its breakers a map over the vocabulary
	uint8_t *dry_breaker;     // [n_vocab] (NULL: no breakers)
	int32_t *dry_z;           // DRY's scratch: twice the tokens it may scan
	float mirostat_mu;        // mirostat's state after the tokens taken so far
	lane_bias *bias;
	int32_t max_tokens;       // resolved: never past the context
	bool explicit_max;        // the caller set max_tokens
	int32_t *stop_ids, n_stop_ids;
	char *stops[LANE_MAX_STOPS];
	size_t stop_len[LANE_MAX_STOPS];
	int n_stops;
	size_t stop_max;          // longest stop string
	bool ignore_eos, logprobs, draft;
	int32_t top_logprobs;
	lane_prompt_lp *plp;      // (n_prompt) prompt_logprobs: each prompt token's, from its row before (NULL: not asked)
	lane_top *ptop;           // (n_prompt x pk) their alternatives
	int32_t pk;
	enum lane_embed embed;
	bool normalize;
	grammar *grammar;         // constrained decoding: the host's reference (NULL: none)
	grammar_matcher *gm;      // where the generated text stands in it
	model_lora_set lora;      // its adapters, a reference on each until it ends (n = 0: none)
	uint64_t prefix_root;     // where its prefix-cache chain starts: 0 for the base, else its adapter set's key
	double lora_cost;         // its adapters' work per row, in base rows (pricing)
	double lora_read[MODEL_LORA_MAX]; // each adapter's bytes over the model's weights' (pricing)
	char domain[LANE_DOMAIN_MAX + 1]; // the expert observer's domain ("": none)
	uint64_t dom_window;      // the host's exp_window + 1 when dom_slot was found (engine thread)
	int32_t dom_slot;         // its slot in that window
	double *pool_sum;         // an embedding's running pool, n_embd values in token order
	float *vec;               // its final vector

	// channel
	pthread_mutex_t mu;
	pthread_cond_t cv;
	ev_node *head, *tail, *cur;
	ev_node final;            // the terminal event, preallocated
	char reason[160];
	pthread_mutex_t nmu;      // the notify callback: held while it runs, apart from mu so readers never wait on it
	void (*notify)(void *, const lane_event *);
	void *notify_arg;

	// engine state (engine thread only)
	struct lane_req *next;    // queue link
	bool ended;
	bool started;             // its first round has run (prefix attached)
	int32_t lane;             // -1 while queued
	int32_t n_filled;         // prompt tokens in KV
	int32_t n_cached;         // of which came from the prefix cache
	int32_t *gen, n_gen;      // generated ids (capacity max_tokens)
	int32_t last;             // token fed in the next decode row
	int32_t pages_reserved;   // KV pages promised at admission
	bool claimed;             // queued with a lane (and claim_pages) taken from a lease (under host mu)
	int32_t claim_pages;
	int32_t drafts[LANE_MAX_DRAFT]; // this round's proposal
	int32_t n_draft;
	enum lane_proposer prop;
	int32_t draft_k;          // current proposal size, adapted to acceptance
	float draft_ema;          // recent acceptance rate
	uint64_t n_drafted, n_accepted;
	uint32_t drafted_at[LANE_MAX_DRAFT], accepted_at[LANE_MAX_DRAFT]; // by place in the proposal
	int32_t dkv_len;          // tokens the draft model's KV holds for this lane
	bool mtp;                 // its rows keep their hidden states for the MTP head (mtp.c)
	int32_t mtp_next;         // the head's proposal for the token after last, made when the context was mtp_at long
	int32_t mtp_at;
	int32_t mtp_idle;         // rounds in a row the head's drafts were not worth asking for: past MTP_IDLE, the head is not fed
	tok_stream *detok;
	char *pending;            // text held back while it may start a stop string
	size_t n_pending, cap_pending;
	sha256_ctx sha;
	// reasoning (think.c)
	struct {
		int phase;            // LANE_TH_OFF, BEFORE, IN, FORCE, AFTER
		char open[LANE_THINK_MARKER + 1], close[LANE_THINK_MARKER + 1];
		char buf[LANE_THINK_MARKER]; // BEFORE: the text after leading whitespace; IN: the tail that may begin close
		size_t n_buf;
		int32_t budget;       // -1: none
		int32_t count;        // thinking tokens taken
		int32_t end[LANE_THINK_END], n_end, forced;
	} th;
};

// A lane's last request's prompt, as slot actions read it (slots.c).
struct lane_last {
	int32_t *ids, n, cap;     // the prompt (cap: ids' room)
	uint64_t root;            // its prefix chain's root: 0 for the base model
};

struct lane_host {
	lane_config cfg;
	const model *m;
	const tok_vocab *vocab;
	model_hparams hp;
	kv_cache *kv;
	base_pool *pool;
	int32_t max_ctx;          // tokens one request may use (elastic: the largest window)
	size_t max_piece;         // bytes of the longest token's text: the most text one token covers
	model_ws *ws;             // the forward pass's workspace, for lane_max_rows rows
	uint64_t compute_bytes;   // what the host allocated for compute (lane_compute_bytes)
	// elastic window (cfg.window_max > 0)
	atomic_int window;        // tokens a request may use now (read by submitters)
	int32_t window_demand;    // the p95 the window last followed
	uint64_t window_changed_us;
	struct { int32_t tokens; uint64_t at_us; } demand[LANE_DEMAND_SAMPLES];
	int32_t n_demand, demand_next;
	pthread_t thread;
	bool thread_started;

	pthread_mutex_t mu;       // guards the queue and the flags below
	pthread_cond_t work;
	lane_req *qhead, *qtail;
	int32_t qlen;
	bool quit, draining, halting;
	struct lane_slot_task *slot_head, *slot_tail; // slot actions for the next boundary (slots.c)
	char halt_reason[160];
	uint64_t serial;
	atomic_uint_least64_t seed_state; // lane_draw_seed's sequence
	atomic_int open;          // requests submitted and not yet ended
	atomic_uint_least64_t rejected; // submits refused
	// capacity leases (lease.c), under mu; every lease holds a lane, so cfg.lanes slots suffice
	struct lane_lease_slot *leases;
	int32_t n_leases;
	int32_t lease_lanes, lease_pages; // held by leases, not yet taken by a request
	int32_t claim_lanes, claim_pages; // taken from leases by requests still queued
	uint64_t lease_serial;

	// engine thread only
	lane_req **lanes;         // cfg.lanes slots, NULL when idle
	struct lane_last *last;   // cfg.lanes: each lane's last request's prompt (slots.c)
	lane_req **cancelled;     // admission's scratch: cfg.queue + cfg.lanes slots (the most ever queued)
	_Atomic int32_t pages_reserved; // sum over admitted requests (changed by the engine; leases read it under mu)
	uint64_t round;
	double row_us, fixed_us;  // pricing: cost of a row and of a round
	double draw_us;           // calibrated pricing: a sampled row's draw and emit, as the rounds measure it (0: not yet)
	double mtp_us;            // the MTP head's chained pass, as measured (0: not yet)
	double weight_bytes;      // the model's weights as held: what fixed_us mostly reads
	const model_lora **round_lora; // adapters this round's rows read so far (lanes * MODEL_LORA_MAX)
	int32_t n_round_lora;
	model_row *rows;
	int32_t *row_lane;        // lane of each row
	bool *row_hidden;         // the rows whose hidden state an embedding pools
	float *hidden;            // their hidden states, cap_hidden rows of n_embd
	int32_t cap_hidden;
	float *logits;            // cap_logits rows of n_vocab
	int32_t cap_logits;
	int32_t cap_rows;
	float *scratch;           // n_vocab floats for sampling
	lane_top *top;
	sampler *sampler;
	pthread_mutex_t gv_mu;    // guards building gvocab, on the first constrained submit
	grammar_vocab *_Atomic gvocab; // the vocabulary as grammars see it (NULL until then)
	struct lane_masker *masker; // computes masks beside the forward pass (NULL until a grammar runs)
	int32_t *counts;          // n_vocab occurrence counts, zero between uses
	// speculative decoding
	kv_cache *dkv;            // the draft model's KV, one sequence per lane
	model_ws *dws;            // its forward workspace (LANE_DRAFT_CHUNK rows, or a row per lane)
	float *dlogits;           // draft logits, one row per lane
	model_row *drows;
	int32_t cap_drows;
	int32_t *ctxbuf;          // a lane's context (prompt + generated) for the n-gram search
	// the MTP head (mtp.c); mkv NULL when it does not draft
	kv_cache *mkv;            // its KV (one layer), one sequence per lane
	model_head *head;         // the version learned while serving (NULL: the model's own head)
	uint64_t head_at[LANE_MAX_DRAFT], head_acc[LANE_MAX_DRAFT]; // the head's drafts by position when it was set: the rates since price it
	model_ws *mws;            // its workspace: lane_max_rows rows
	model_row *mrows;         // a head pass's rows, lane_max_rows of them
	float *mhin;              // their hidden states [lane_max_rows][n_embd]
	float *mlogits;           // a row per lane
	float *mstate;            // [lanes][n_embd]: each lane's last head row's state, which the next chained row reads
	bool (*fault)(void *, uint64_t, uint64_t);
	void *fault_arg;
	// background work (background.c): engine thread only, but bg_woken (under mu)
	bool bg_woken;            // lane_host_wake asked for a boundary
	bool bg_more;             // the owner had pieces to run at the last boundary
	double bg_units;          // price this round's background pieces may take (0: none)
	double bg_credit;         // price saved up while the next piece did not fit a round's share
	double bg_us;             // time one unit of its price takes, as measured

	// the expert observer (routes NULL: off)
	model_routes *routes;     // each pass's router choices
	int32_t *row_group;       // each row's counter group, lane_max_rows of them
	pthread_mutex_t exp_mu;   // guards the counters and the window below (held briefly by both sides)
	model_experts *experts;   // since the window began
	char exp_name[LANE_EXPERT_SLOTS][LANE_DOMAIN_MAX + 1];
	int32_t exp_named;
	uint64_t exp_window, exp_since_us;

	// published snapshot
	pthread_mutex_t snap_mu;
	lane_snapshot snap;
	lane_snapshot stats;      // counters the engine accumulates (engine thread)
};

static inline int32_t imin(int32_t a, int32_t b) { return a < b ? a : b; }

// KV pages that hold tokens tokens.
static inline int32_t lane_pages_for(const lane_host *h, int64_t tokens) {
	const int32_t pt = h->cfg.page_tokens;
	return (int32_t)((tokens + pt - 1) / pt);
}

// The test hook: true when an allocation for r must fail in this round.
static inline bool lane_fault(lane_host *h, const lane_req *r) {
	return h->fault && h->fault(h->fault_arg, h->round, r->serial);
}

// Engine (engine.c): the thread's loop, started by lane_host_new.
void *lane_engine(void *arg);

// Admission (admit.c). Under h->mu: moves cancelled queued requests to cancelled[], then
// admits from the queue's head while a lane and its KV pages are free.
void lane_admit(lane_host *h, lane_req **cancelled, int32_t *n_cancelled);
// At the start of a round: lanes admitted since the last one attach their cached prefix.
void lane_start_admitted(lane_host *h);

// The round (round.c): rows, prompt pieces within the budget, one forward pass, sampling.
void lane_run_round(lane_host *h);
// Prices a row and a round from timed forward passes (at start-up, before the engine runs).
void lane_calibrate(lane_host *h);

// Prompt rows a round may carry after decode and draft rows costing decode base rows.
double lane_prompt_budget(const lane_host *h, double decode);

// Slots (slots.c). The tasks taken from the list (under h->mu) run at the boundary, or end
// cancelled at a halt; a request's end leaves its prompt on its lane's record.
struct lane_slot_task *lane_slot_take(lane_host *h);
void lane_slot_tasks(lane_host *h, struct lane_slot_task *t, bool cancel);
void lane_slot_record(lane_host *h, const lane_req *r);
void lane_slot_free(lane_host *h);

// Background work (background.c).
// Before the prompt pieces: the price the background may take this round; returns the prompt
// rows it keeps from them (0: none runs).
double lane_bg_reserve(lane_host *h, double decode);
// After the forward pass: its pieces within what lane_bg_reserve kept.
void lane_bg_run(lane_host *h);
// At the round boundary, and at the halt.
void lane_bg_boundary(lane_host *h);
void lane_bg_halt(lane_host *h);

// Emit (emit.c): samples r's next token from lg, emits its text, and ends r when a stop
// token, stop string or its length says so; returns the token.
int32_t lane_emit_sampled(lane_host *h, lane_req *r, const float *lg);
// A prompt row's logits lg (at pos) into the log-probability of r's prompt token at pos + 1.
void lane_emit_prompt_lp(lane_host *h, lane_req *r, const float *lg, int32_t pos);

// Reasoning (think.c).
enum { LANE_TH_OFF, LANE_TH_BEFORE, LANE_TH_IN, LANE_TH_FORCE, LANE_TH_AFTER };
// q's think: 0, or LANES_EINVAL with err. Thread-safe.
int lane_think_check(const lane_request *q, int32_t n_vocab, char *err, size_t errlen);
// At submit: r's thinking state from q.
void lane_think_attach(lane_req *r, const lane_request *q);
// The token r must take next (its budget is spent), or -1: a draw.
int32_t lane_think_forced(const lane_req *r);
// r's grammar waits: the thinking section is not over.
bool lane_think_holds(const lane_req *r);
// After r took a token whose text is t (n bytes): counts it, follows the markers, starts forcing
// at the budget.
void lane_think_took(lane_req *r, const char *t, size_t n);

// Constrained decoding (constrain.c).
// The grammar fields of q: 0, or LANES_EINVAL with err. Thread-safe.
int lane_constrain_check(const lane_request *q, char *err, size_t errlen);
// At submit: r gets its matcher at the grammar's start (and the host builds the grammar
// vocabulary on first use). 0, LANES_EINVAL or LANES_ENOMEM with err.
int lane_constrain_attach(lane_host *h, lane_req *r, const lane_request *q, char *err, size_t errlen);
// Sets the logits in x (nv of them) of every token r's grammar forbids now to -inf.
// 0; LANES_EINVAL when it allows none; LANES_ENOMEM.
int lane_constrain_mask(lane_req *r, float *x, int32_t nv);
// Around a forward pass: the masks the live constrained lanes need next are computed on the
// mask worker meanwhile; join waits for it (before any request may end).
void lane_constrain_prefetch(lane_host *h);
void lane_constrain_join(lane_host *h);
// Stops the mask worker and frees the grammar vocabulary.
void lane_constrain_free(lane_host *h);

// Drops r's references on its adapters (once: the set is empty after).
void lane_lora_release(lane_req *r);

// Finals (finals.c): ends r with its terminal event, releases its lane and KV pages, and
// drops the host's reference.
void lane_finish(lane_host *h, lane_req *r, enum lane_ev_kind kind, enum lane_finish fin, int32_t stop_index,
		 const char *reason, const char *text, size_t len);
// Ends the n requests admission took out of the queue, then the admitted ones cancelled.
void lane_end_cancelled(lane_host *h, lane_req **cancelled, int32_t n);

// Capacity leases (lease.c); every call under h->mu.
// Drops the leases that lapsed by now_us.
void lane_lease_expire(lane_host *h, uint64_t now_us);
// r (being queued) takes a lane and its share of the pages from lease id: true, or false
// when no such lease is held (r is then an ordinary request).
bool lane_lease_claim(lane_host *h, uint64_t id, lane_req *r);
// A claimed r leaves the queue (admitted or cancelled): its claim ends.
void lane_lease_unclaim(lane_host *h, lane_req *r);
// Lanes and pages held for leases besides r's own claim (r may be NULL).
int32_t lane_lease_held_lanes(const lane_host *h, const lane_req *r);
int32_t lane_lease_held_pages(const lane_host *h, const lane_req *r);
// The engine has queued work that leases hold back: waits until one may lapse or something
// changes (50 ms at most, so cancels of queued requests are seen).
void lane_lease_wait(lane_host *h);
// Halt: every lease and claim ends.
void lane_lease_clear(lane_host *h);

// The elastic window (window.c): set only with window_max > 0; follow and record do nothing
// with a fixed pool.
// Sets the window to tokens (whole pages, floor..window_max) and the pool's page limit.
void lane_window_set(lane_host *h, int32_t tokens);
// At a round boundary: the window follows recent demand.
void lane_window_follow(lane_host *h);
// Records an ending request's size as demand.
void lane_window_record(lane_host *h, const lane_req *r);

// A request's context token at position i: its prompt, then what it generated.
static inline int32_t lane_ctx_at(const lane_req *r, int32_t i) { return i < r->n_prompt ? r->prompt[i] : r->gen[i - r->n_prompt]; }

// The MTP head (mtp.c). Whether a host of cfg drafts with the head of a model of hp.
bool lane_mtp_wanted(const model_hparams *hp, const lane_config *cfg);
// Allocates the head's KV (n_pages beside the target's), workspace and buffers.
int lane_mtp_open(lane_host *h, int32_t n_pages, char *err, size_t errlen);
void lane_mtp_free(lane_host *h);
// The model whose MTP layer drafts: the version set last, else the host's own.
const model *lane_mtp_model(const lane_host *h);
// Whether a head drafts now (the model's, or a version set).
bool lane_mtp_has_head(const lane_host *h);
uint64_t lane_mtp_compute_bytes(const model_hparams *hp, const lane_config *cfg, int nth, int32_t window);
uint64_t lane_mtp_held_bytes(const lane_host *h);
// After the round's rows were sampled: the head reads the hidden states of the n rows' lanes
// up to each one's last accepted row, and proposes the token after each lane's last.
void lane_mtp_feed(lane_host *h, int32_t n);
// Drafts for the n lanes in rs with the head, up to ks[i] tokens each, chaining its own states.
void lane_mtp_propose(lane_host *h, lane_req **rs, const int32_t *ks, int32_t n);

// Drafting (draft.c).
// Checks the draft model and allocates its KV (beside the target's n_pages), workspace
// and logits. 0, LANES_EINVAL or LANES_ENOMEM with err.
int lane_draft_open(lane_host *h, int32_t n_pages, char *err, size_t errlen);
// Frees what drafting allocated; nothing to free is fine.
void lane_draft_free(lane_host *h);
// Compute bytes drafting needs (lane_compute_bytes's share) beside a target of hp, for cfg,
// nth threads and, for unfused attention, a window of window tokens.
uint64_t lane_draft_compute_bytes(const model_hparams *hp, const lane_config *cfg, int nth, int32_t window);
// Compute bytes the host's draft model holds.
uint64_t lane_draft_held_bytes(const lane_host *h);
// A newly admitted request's proposal size and acceptance estimate.
void lane_draft_start(lane_host *h, lane_req *r);
// Lanes that may draft this round get proposals in r->drafts / r->n_draft.
void lane_propose(lane_host *h);
// After the target verified nd drafts of r at decode position P, acc of them matching.
void lane_draft_verified(lane_host *h, lane_req *r, int32_t nd, int32_t acc, int32_t P);

// The expert observer (experts.c).
// Bytes it allocates for a host of cfg over a model of hp (0 when it is off).
uint64_t lane_experts_bytes(const model_hparams *hp, const lane_config *cfg);
// Allocates the routes and counters when cfg.experts and the model has experts. 0, or an error.
int lane_experts_open(lane_host *h, int32_t max_rows, char *err, size_t errlen);
void lane_experts_close(lane_host *h);
// After a forward pass over the round's n rows: their choices into the counters.
void lane_experts_count(lane_host *h, int32_t n);

// Snapshot (snapshot.c).
// Counts one duration (seconds) in hi.
void lane_observe(lane_hist *hi, double seconds);
// Publishes the engine's state for control reads (at every round boundary).
void lane_publish(lane_host *h);

// The request's channel (req.c).
void lreq_ref(lane_req *r);
void lreq_unref(lane_req *r);
// Queues a token event (copies text and top). LANES_ENOMEM when it cannot.
int lreq_emit_token(lane_req *r, int32_t token, const char *text, size_t len, float logprob,
		    const lane_top *top, int32_t n_top);
// Queues the terminal event (no allocation); later calls do nothing.
void lreq_end(lane_req *r, enum lane_ev_kind kind, enum lane_finish finish, int32_t stop_index,
	      const char *reason, const char *text, size_t len);

#endif
