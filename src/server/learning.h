// server/learning: learning while serving — grants (an adapter, caps on its steps and tokens,
// an expiry), the examples they queue, their training steps run as the lane host's background
// work (priced pieces in the rounds), each step committed at a round boundary as a new version
// of the adapter in the registry, and the ledger the engine publishes when it changed. The
// srv_learn_* calls are thread-safe and never wait for the engine: a mutation is a task the
// engine applies at its next round boundary. Nothing here knows HTTP.
#ifndef LANES_SERVER_LEARNING_H
#define LANES_SERVER_LEARNING_H

#include "lanes/lanes.h"
#include "learn/learn.h"
#include "server/adapters.h"

#define SRV_LEARN_GRANTS 64        // grants listed at once: the open ones, then the latest that ended
#define SRV_LEARN_MAX_EXAMPLE 1024 // tokens of one example at most
#define SRV_LEARN_MAX_RANK 256
#define SRV_LEARN_MAX_BATCH 64
#define SRV_LEARN_MAX_EXPIRY_S (30.0 * 86400)
#define SRV_LEARN_REASON 160

enum srv_grant_state {
	SRV_GRANT_ACTIVE,    // its examples train the adapter
	SRV_GRANT_EXHAUSTED, // its steps or its tokens are used up
	SRV_GRANT_REVOKED,   // revoked: stopped at a step boundary
	SRV_GRANT_EXPIRED,   // its time ran out: stopped at a step boundary
	SRV_GRANT_FAILED,    // an allocation failed or the adapter was unloaded (reason says)
	SRV_GRANT_HALTED,    // the server halted
	SRV_GRANT__COUNT
};
extern const char *const srv_grant_state_name[SRV_GRANT__COUNT]; // "active", "exhausted", ...

typedef struct {
	uint64_t id;                       // written "grant-ID"
	char adapter[SRV_LORA_NAME_MAX + 1];
	enum srv_grant_state state;
	int64_t steps_done, steps_max;
	int64_t tokens_used, tokens_max;   // tokens the committed steps ran through the model
	double last_loss;                  // the last committed step's mean loss (NAN before one)
	int64_t expires_at;                // unix seconds (0: never)
	int64_t version;                   // the registry's version of the adapter as of its last commit
	int64_t queued;                    // examples accepted and not yet in a committed step
	char reason[SRV_LEARN_REASON];     // failed, halted: why
} srv_grant_info;

// The ledger as the engine last published it: at start, then at a round boundary whenever a
// mutation moved the revision (never per decode round).
typedef struct {
	uint64_t sequence;        // publications so far (1: the one at start)
	uint64_t clock_us;        // when (base_now_us)
	uint64_t revision;        // mutations applied so far
	int32_t n_grants;
	srv_grant_info grants[SRV_LEARN_GRANTS]; // oldest first
	int64_t committed_steps;  // since start, every grant's
	int64_t aborted_steps;    // begun and dropped before their commit (revoked, expired, failed, halted)
	int64_t tokens_trained;   // tokens of the committed steps
	int64_t examples;         // examples accepted
	uint64_t optimizer_bytes; // AdamW moments of the adapters that learn here
	uint64_t job_bytes;       // gradients, queued examples and step memory of the jobs
	double train_seconds;     // time inside training pieces
	int32_t adapters;         // adapters that learn here
} srv_learn_ledger;

typedef struct {
	const char *adapter;      // a new name, an adapter this server trains, or one loaded from a file
	int64_t max_steps;        // 1..
	int64_t max_tokens;       // 2..: tokens its steps may run through the model
	float lr;                 // 0: 1e-3
	int32_t rank;             // 0: 8 for a new adapter; else it must be the adapter's
	int32_t batch;            // examples per step at most; 0: 4
	double expires_s;         // 0: never
} srv_grant_req;

typedef struct srv_learn srv_learn;

// Learning for model m (only read), steps cut into pieces of piece tokens (0: 64). Publishes
// the first, empty ledger and starts the learn thread (saves, expiry wake-ups). 0 or LANES_ENOMEM.
int srv_learn_new(srv_learn **out, const model *m, int32_t piece, char *err, size_t errlen);
// The hook for lane_config.background: share is the most of a round's prompt budget training takes.
lane_background srv_learn_background(srv_learn *l, double share);
// Grants may be made once the lane host (running the hook) and the adapter registry exist.
void srv_learn_attach(srv_learn *l, lane_host *h, srv_loras *reg);
// Stops taking saves and ends the learn thread; each save not yet written ends cancelled
// (its callback runs). Before whatever its callbacks reach is stopped. Idempotent.
void srv_learn_stop(srv_learn *l);
// After the lane host is freed (its engine has stopped running the hook). Accepts NULL.
void srv_learn_free(srv_learn *l);

// Opens a grant on r->adapter: made when no adapter has that name (rank r->rank on the
// attention and FFN projections, served at once as version 0), trained on from its file when
// a loaded adapter has it. *out: the grant; *created: a new adapter was made. LANES_EINVAL (a
// field out of range, a rank that is not the adapter's, a file that cannot be trained),
// LANES_EBUSY (the adapter has an open grant, its name is loading, every slot is open or the
// registry is full), LANES_ECANCELLED (halted, or not attached), LANES_ENOMEM; err says which.
int srv_learn_grant(srv_learn *l, const srv_grant_req *r, srv_grant_info *out, bool *created, char *err, size_t errlen);
// Revokes grant id: no example is taken from now on, and at the next round boundary its step
// in progress is dropped (nothing commits). LANES_ENOTFOUND, LANES_EBUSY (it ended, or was
// revoked already: *out says how).
int srv_learn_revoke(srv_learn *l, uint64_t id, srv_grant_info *out, char *err, size_t errlen);
// Queues example e (taken on success) for grant id; *out is the grant and *tokens_left the
// tokens it has left once its queued examples have run. LANES_EINVAL (longer than
// SRV_LEARN_MAX_EXAMPLE), LANES_ENOTFOUND, LANES_EBUSY (the grant ended, was revoked or
// expired), LANES_ELIMIT (more tokens than the grant has left), LANES_ECANCELLED, LANES_ENOMEM.
int srv_learn_example(srv_learn *l, uint64_t id, learn_example *e, srv_grant_info *out, int64_t *tokens_left, char *err,
		      size_t errlen);
// Writes the committed weights of the adapter called name (one this server trains) as file
// (base_name_ok) in folder dfd, F32, whole or not at all (base_wfile): the engine copies them
// at its next round boundary and the learn thread writes the copy, then calls done(arg, rc,
// message, version) once, on that thread. dfd must stay open until then. LANES_EINVAL (a bad
// name), LANES_ENOTFOUND (no adapter of that name trains here), LANES_ECANCELLED,
// LANES_ENOMEM: then done is not called.
typedef void (*srv_learn_saved)(void *arg, int rc, const char *msg, int64_t version);
int srv_learn_save(srv_learn *l, const char *name, int dfd, const char *file, srv_learn_saved done, void *arg, char *err,
		   size_t errlen);
// A copy of the last publication. Never waits for a round.
void srv_learn_ledger_of(srv_learn *l, srv_learn_ledger *out);

#endif
