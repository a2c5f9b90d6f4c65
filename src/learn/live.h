// learn/live: learning while serving — grants (an adapter, caps on its steps and tokens,
// an expiry), the examples they queue, their training steps run as the lane host's background
// work (priced pieces in the rounds), each step committed at a round boundary as a new version
// of the adapter in the registry, and the ledger the engine publishes when it changed. The
// learn_live_* calls are thread-safe and never wait for the engine: a mutation is a task the
// engine applies at its next round boundary. Nothing here knows HTTP.
#ifndef LANES_LEARN_LIVE_H
#define LANES_LEARN_LIVE_H

#include "lanes/lanes.h"
#include "learn/learn.h"
#include "model/loras.h"

#define LEARN_LIVE_GRANTS 64        // grants listed at once: the open ones, then the latest that ended
#define LEARN_LIVE_MAX_EXAMPLE 1024 // tokens of one example at most
#define LEARN_LIVE_MAX_RANK 256
#define LEARN_LIVE_MAX_BATCH 64
#define LEARN_LIVE_MAX_EXPIRY_S (30.0 * 86400)
#define LEARN_LIVE_REASON 160

// What a grant trains: a LoRA adapter, or the server's MTP head (its drafter), named
// LEARN_LIVE_HEAD in the ledger and for saves.
enum learn_kind { LEARN_KIND_LORA, LEARN_KIND_MTP, LEARN_KIND__COUNT };
extern const char *const learn_kind_name[LEARN_KIND__COUNT]; // "lora", "mtp"
#define LEARN_LIVE_HEAD "mtp"

enum learn_grant_state {
	LEARN_GRANT_ACTIVE,    // its examples train the adapter
	LEARN_GRANT_EXHAUSTED, // its steps or its tokens are used up
	LEARN_GRANT_REVOKED,   // revoked: stopped at a step boundary
	LEARN_GRANT_EXPIRED,   // its time ran out: stopped at a step boundary
	LEARN_GRANT_FAILED,    // an allocation failed or the adapter was unloaded (reason says)
	LEARN_GRANT_HALTED,    // the server halted
	LEARN_GRANT__COUNT
};
extern const char *const learn_grant_state_name[LEARN_GRANT__COUNT]; // "active", "exhausted", ...

typedef struct {
	uint64_t id;                       // written "grant-ID"
	enum learn_kind kind;
	char adapter[MODEL_LORA_NAME_MAX + 1];
	enum learn_grant_state state;
	int64_t steps_done, steps_max;
	int64_t tokens_used, tokens_max;   // tokens the committed steps ran through the model
	double last_loss;                  // the last committed step's mean loss (NAN before one)
	int64_t expires_at;                // unix seconds (0: never)
	int64_t version;                   // the registry's version of the adapter as of its last commit (the head: its steps)
	int64_t queued;                    // examples accepted and not yet in a committed step
	float lr;                          // AdamW's rate
	char reason[LEARN_LIVE_REASON];     // failed, halted: why
} learn_grant_info;

// The ledger as the engine last published it: at start, then at a round boundary whenever a
// mutation moved the revision (never per decode round).
typedef struct {
	uint64_t sequence;        // publications so far (1: the one at start)
	uint64_t clock_us;        // when (base_now_us)
	uint64_t revision;        // mutations applied so far
	int32_t n_grants;
	learn_grant_info grants[LEARN_LIVE_GRANTS]; // oldest first
	int64_t committed_steps;  // since start, every grant's
	int64_t aborted_steps;    // begun and dropped before their commit (revoked, expired, failed, halted)
	int64_t tokens_trained;   // tokens of the committed steps
	int64_t examples;         // examples accepted
	uint64_t optimizer_bytes; // AdamW moments of the adapters that learn here
	uint64_t job_bytes;       // gradients, queued examples and step memory of the jobs
	double train_seconds;     // time inside training pieces
	int32_t adapters;         // adapters that learn here
} learn_ledger;

typedef struct {
	enum learn_kind kind;     // mtp: the head (adapter LEARN_LIVE_HEAD, no rank)
	const char *adapter;      // a new name, an adapter this server trains, or one loaded from a file
	int64_t max_steps;        // 1..
	int64_t max_tokens;       // 2..: tokens its steps may run through the model
	float lr;                 // 0: 1e-3 (the head: 0.02 / sqrt(n_embd))
	int32_t rank;             // 0: 8 for a new adapter; else it must be the adapter's
	int32_t batch;            // examples per step at most; 0: 4
	double expires_s;         // 0: never
} learn_grant_req;

typedef struct learn_live learn_live;

// Learning for model m (only read), steps cut into pieces of piece tokens (0: 64). Publishes
// the first, empty ledger and starts the learn thread (saves, expiry wake-ups). 0 or LANES_ENOMEM.
int learn_live_new(learn_live **out, const model *m, int32_t piece, char *err, size_t errlen);
// The hook for lane_config.background: share is the most of a round's prompt budget training takes.
lane_background learn_live_background(learn_live *l, double share);
// Grants may be made once the lane host (running the hook) and the adapter registry exist.
void learn_live_attach(learn_live *l, lane_host *h, model_loras *reg);
// Stops taking saves and ends the learn thread; each save not yet written ends cancelled
// (its callback runs). Before whatever its callbacks reach is stopped. Idempotent.
void learn_live_stop(learn_live *l);
// After the lane host is freed (its engine has stopped running the hook). Accepts NULL.
void learn_live_free(learn_live *l);

// Opens a grant on r->adapter: made when no adapter has that name (rank r->rank on the
// attention and FFN projections, served at once as version 0), trained on from its file when
// a loaded adapter has it. *out: the grant; *created: a new adapter was made. LANES_EINVAL (a
// field out of range, a rank that is not the adapter's, a file that cannot be trained),
// LANES_EBUSY (the adapter has an open grant, its name is loading, every slot is open or the
// registry is full), LANES_ECANCELLED (halted, or not attached), LANES_ENOMEM; err says which.
// Kind mtp trains the head the lanes draft with (the model's own, or from the trunk's last
// block when it has none: learn_mtp_new), each commit served from the next round on
// (lane_host_set_head); LANES_EUNSUPPORTED when the host drafts with no head
// (lane_host_head_ok) or the model's head cannot be trained, LANES_EINVAL for a rank.
int learn_live_grant(learn_live *l, const learn_grant_req *r, learn_grant_info *out, bool *created, char *err, size_t errlen);
// Revokes grant id: no example is taken from now on, and at the next round boundary its step
// in progress is dropped (nothing commits). LANES_ENOTFOUND, LANES_EBUSY (it ended, or was
// revoked already: *out says how).
int learn_live_revoke(learn_live *l, uint64_t id, learn_grant_info *out, char *err, size_t errlen);
// Queues example e (taken on success) for grant id; *out is the grant and *tokens_left the
// tokens it has left once its queued examples have run. LANES_EINVAL (longer than
// LEARN_LIVE_MAX_EXAMPLE), LANES_ENOTFOUND, LANES_EBUSY (the grant ended, was revoked or
// expired), LANES_ELIMIT (more tokens than the grant has left), LANES_ECANCELLED, LANES_ENOMEM.
int learn_live_example(learn_live *l, uint64_t id, learn_example *e, learn_grant_info *out, int64_t *tokens_left, char *err,
		      size_t errlen);
// Writes the committed weights of the adapter called name (one this server trains; the head:
// LEARN_LIVE_HEAD, as learn_mtp_save writes it) as file
// (base_name_ok) in folder dfd, F32, whole or not at all (base_wfile): the engine copies them
// at its next round boundary and the learn thread writes the copy, then calls done(arg, rc,
// message, version) once, on that thread. dfd must stay open until then. LANES_EINVAL (a bad
// name), LANES_ENOTFOUND (no adapter of that name trains here), LANES_ECANCELLED,
// LANES_ENOMEM: then done is not called.
typedef void (*learn_live_saved)(void *arg, int rc, const char *msg, int64_t version);
int learn_live_save(learn_live *l, const char *name, int dfd, const char *file, learn_live_saved done, void *arg, char *err,
		   size_t errlen);
// A copy of the last publication. Never waits for a round.
void learn_live_ledger_of(learn_live *l, learn_ledger *out);

#endif
