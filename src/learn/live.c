// learn/live: grants and their examples (made on the HTTP threads, under the lock), the
// engine's side (adapters that learn, their jobs, steps run in the rounds' background share,
// commits published through the adapter registry at round boundaries, the ledger), and the
// learn thread that writes saved adapters and wakes the engine when a grant expires.
#include "learn/live.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MOD "learn"

const char *const learn_kind_name[LEARN_KIND__COUNT] = {[LEARN_KIND_LORA] = "lora", [LEARN_KIND_MTP] = "mtp"};

const char *const learn_grant_state_name[LEARN_GRANT__COUNT] = {
	[LEARN_GRANT_ACTIVE] = "active",   [LEARN_GRANT_EXHAUSTED] = "exhausted", [LEARN_GRANT_REVOKED] = "revoked",
	[LEARN_GRANT_EXPIRED] = "expired", [LEARN_GRANT_FAILED] = "failed",       [LEARN_GRANT_HALTED] = "halted",
};

// A grant's slot. The HTTP side fills it (used, then ready); the engine adopts it at a round
// boundary and from then on writes its state and counts. Every field under mu.
typedef struct {
	bool used;                // the slot holds a grant
	bool ready;               // made: the engine may adopt it
	bool adopted;             // the engine has it: the ledger lists it
	bool revoke;              // revocation asked for
	learn_grant_info info;
	learn_adapter *fresh;     // an adapter made or loaded for it, for the engine to take (NULL: the engine's own)
	learn_mtp *fresh_head;    // kind mtp: the head made for it (NULL: the engine's own)
	int64_t fresh_version;    // the registry's version of fresh's weights
	int32_t rank;             // the adapter's
	float lr;
	int32_t batch;
	uint64_t expires_us;      // base_now_us() when it expires (0: never)
	int64_t reserved;         // tokens used plus those of its queued examples
} grant;

typedef struct ex_task {
	struct ex_task *next;
	uint64_t grant;
	learn_example *e;
} ex_task;

typedef struct save_task {
	struct save_task *next;
	char name[MODEL_LORA_NAME_MAX + 1];
	int dfd;                  // the folder it is written in (borrowed)
	char file[BASE_NAME_MAX + 1];
	learn_adapter *copy;      // the weights to write (the engine's copy)
	learn_mtp *head_copy;     // or the head's
	int64_t version;
	int rc;                   // set when it cannot be written (the message in msg)
	char msg[512];
	learn_live_saved done;
	void *arg;
} save_task;

// An adapter that learns here, or the head (engine thread).
typedef struct {
	char name[MODEL_LORA_NAME_MAX + 1];
	learn_adapter *a;
	learn_job *job;           // while its grant has work (freed when idle: its memory goes with it)
	learn_mtp *head;          // the head instead of a: a, job NULL
	learn_mtp_job *mjob;
	int64_t version;          // the registry's version of its committed weights
	grant *g;                 // its open grant, or NULL
} ladapter;

// A name the engine trains, as the HTTP side knows it (under mu).
typedef struct {
	char name[MODEL_LORA_NAME_MAX + 1];
	int32_t rank;
} lname;

struct learn_live {
	const model *m;
	int32_t piece;
	lane_host *host;
	model_loras *reg;

	pthread_mutex_t mu;       // the slots, names, task lists and flags below
	pthread_cond_t cv;        // the learn thread's: a save to write, a new expiry, the stop
	grant g[LEARN_LIVE_GRANTS];
	uint64_t next_id;
	uint64_t changes;         // grants made or revoked since the engine last looked
	ex_task *ex_head, *ex_tail;
	save_task *sv_head, *sv_tail; // for the engine to copy
	save_task *wr_head, *wr_tail; // for the learn thread to write
	lname names[MODEL_LORAS_MAX];
	int n_names;
	bool head_made;           // the engine has a head (an mtp grant was made)
	int64_t head_version;     // its steps committed
	int64_t examples;
	bool halted, stopping;
	pthread_t thread;
	bool thread_started;

	// the engine's (engine thread only)
	ladapter ad[MODEL_LORAS_MAX];
	int n_ad;
	uint64_t seen;            // changes as the engine last saw them
	uint64_t revision, published;
	int32_t rr;               // the adapter whose pieces go first in the next round
	int64_t committed, aborted, tokens;
	double train_s;

	pthread_mutex_t pub_mu;   // the publication
	learn_ledger pub;
};

static int64_t unix_now(void) { return (int64_t)time(NULL); }

static bool ended(const grant *s) { return s->adopted && s->info.state != LEARN_GRANT_ACTIVE; }

// Under mu: the slot of grant id, or NULL.
static grant *slot_of(learn_live *l, uint64_t id) {
	for (int i = 0; i < LEARN_LIVE_GRANTS; i++)
		if (l->g[i].used && l->g[i].ready && l->g[i].info.id == id) return &l->g[i];
	return NULL;
}

// Under mu: the rank of the adapter the engine trains under name (0: none).
static int32_t name_rank(const learn_live *l, const char *name) {
	for (int i = 0; i < l->n_names; i++)
		if (!strcmp(l->names[i].name, name)) return l->names[i].rank;
	return 0;
}

static void name_set(learn_live *l, const char *name, int32_t rank) {
	for (int i = 0; i < l->n_names; i++)
		if (!strcmp(l->names[i].name, name)) {
			l->names[i].rank = rank;
			return;
		}
	if (l->n_names == MODEL_LORAS_MAX) return; // the engine holds as many: it refuses the grant
	snprintf(l->names[l->n_names].name, sizeof l->names[0].name, "%s", name);
	l->names[l->n_names++].rank = rank;
}

static void name_drop(learn_live *l, const char *name) {
	for (int i = 0; i < l->n_names; i++)
		if (!strcmp(l->names[i].name, name)) {
			l->names[i] = l->names[--l->n_names];
			return;
		}
}

// ---- the ledger ------------------------------------------------------------------------------

// Engine: the slots the engine has, oldest first, with the totals, as the new publication.
static void publish(learn_live *l) {
	uint64_t opt = 0, jobs = 0;
	for (int i = 0; i < l->n_ad; i++) {
		const ladapter *d = &l->ad[i];
		if (d->head) {
			opt += learn_mtp_bytes(d->head) / 2; // of weights, two moments and the gradient: the moments
			if (d->mjob) jobs += learn_mtp_job_bytes(d->mjob);
			continue;
		}
		learn_adapter_info ai;
		learn_adapter_info_of(d->a, &ai);
		opt += ai.optimizer_bytes;
		if (d->job) jobs += learn_job_bytes(d->job);
	}
	pthread_mutex_lock(&l->mu);
	pthread_mutex_lock(&l->pub_mu);
	learn_ledger *p = &l->pub;
	p->sequence++;
	p->clock_us = base_now_us();
	p->revision = l->revision;
	p->n_grants = 0;
	for (int i = 0; i < LEARN_LIVE_GRANTS; i++) {
		if (!l->g[i].used || !l->g[i].adopted) continue;
		int k = p->n_grants++;
		while (k > 0 && p->grants[k - 1].id > l->g[i].info.id) {
			p->grants[k] = p->grants[k - 1];
			k--;
		}
		p->grants[k] = l->g[i].info;
	}
	p->committed_steps = l->committed;
	p->aborted_steps = l->aborted;
	p->tokens_trained = l->tokens;
	p->examples = l->examples;
	p->optimizer_bytes = opt;
	p->job_bytes = jobs;
	p->train_seconds = l->train_s;
	p->adapters = l->n_ad;
	pthread_mutex_unlock(&l->pub_mu);
	pthread_mutex_unlock(&l->mu);
	l->published = l->revision;
}

void learn_live_ledger_of(learn_live *l, learn_ledger *out) {
	pthread_mutex_lock(&l->pub_mu);
	*out = l->pub;
	pthread_mutex_unlock(&l->pub_mu);
}

// Frees a list of examples not taken.
static void free_examples(ex_task *t) {
	while (t) {
		ex_task *next = t->next;
		learn_example_free(t->e);
		free(t);
		t = next;
	}
}

// Under mu: the saves not yet copied end with why, handed to the learn thread for their callbacks.
static void cancel_saves(learn_live *l, const char *why) {
	for (save_task *t = l->sv_head; t; t = t->next) t->rc = base_seterr(t->msg, sizeof t->msg, LANES_ECANCELLED, "%s", why);
	if (!l->sv_head) return;
	if (l->wr_tail) l->wr_tail->next = l->sv_head;
	else l->wr_head = l->sv_head;
	l->wr_tail = l->sv_tail;
	l->sv_head = l->sv_tail = NULL;
	pthread_cond_broadcast(&l->cv);
}

// ---- the engine's side ---------------------------------------------------------------------

static ladapter *adapter_named(learn_live *l, const char *name) {
	for (int i = 0; i < l->n_ad; i++)
		if (!strcmp(l->ad[i].name, name)) return &l->ad[i];
	return NULL;
}

// The state of d's job (idle without one).
static enum learn_state job_state(const ladapter *d) {
	return d->mjob ? learn_mtp_job_state(d->mjob) : d->job ? learn_step_state(d->job) : LEARN_IDLE;
}

static bool has_job(const ladapter *d) { return d->job || d->mjob; }

// Drops the step in progress and the queued examples of d's job (nothing commits).
static void drop_job(learn_live *l, ladapter *d) {
	if (!has_job(d)) return;
	if (job_state(d) != LEARN_IDLE) l->aborted++;
	learn_job_free(d->job);
	learn_mtp_job_free(d->mjob);
	d->job = NULL, d->mjob = NULL;
}

// Under mu: d's grant ends in state st (reason: why, or NULL); its job goes with it.
static void end_grant(learn_live *l, ladapter *d, enum learn_grant_state st, const char *reason) {
	grant *s = d->g;
	drop_job(l, d);
	d->g = NULL;
	if (!s) return;
	s->info.state = st;
	s->info.queued = 0;
	if (reason) snprintf(s->info.reason, sizeof s->info.reason, "%s", reason);
	l->revision++;
	LOG_INFO(MOD, "grant-%llu on %s: %s after %lld steps%s%s", (unsigned long long)s->info.id, d->name, learn_grant_state_name[st],
		 (long long)s->info.steps_done, reason ? ": " : "", reason ? reason : "");
}

static void adapter_free_at(learn_live *l, int i) {
	ladapter *d = &l->ad[i];
	drop_job(l, d);
	learn_adapter_free(d->a);
	learn_mtp_free(d->head);
	l->ad[i] = l->ad[--l->n_ad];
}

// Under mu, when every entry is taken: an adapter with no grant whose name the registry no
// longer serves goes (never the head).
static void make_room(learn_live *l) {
	for (int i = 0; l->n_ad == MODEL_LORAS_MAX && i < l->n_ad; i++)
		if (!l->ad[i].g && !l->ad[i].head && !model_loras_has(l->reg, l->ad[i].name)) adapter_free_at(l, i);
}

// Under mu: the next free entry of the engine's, named name (the caller made room).
static ladapter *slot_new(learn_live *l, const char *name) {
	ladapter *d = &l->ad[l->n_ad++];
	memset(d, 0, sizeof *d);
	snprintf(d->name, sizeof d->name, "%s", name);
	return d;
}

// Under mu: the engine takes a grant the HTTP side made (with its new adapter, if any).
static void adopt(learn_live *l, grant *s) {
	s->adopted = true;
	l->revision++;
	ladapter *d = adapter_named(l, s->info.adapter);
	if (s->info.kind == LEARN_KIND_MTP) {
		if (!d) {
			make_room(l);
			if (!s->fresh_head || l->n_ad == MODEL_LORAS_MAX) {
				snprintf(s->info.reason, sizeof s->info.reason, "%s",
					 s->fresh_head ? "every adapter slot learns already: no room for the head" : "the head is gone");
				learn_mtp_free(s->fresh_head);
				s->fresh_head = NULL;
				s->info.state = LEARN_GRANT_FAILED;
				// the next grant makes a head again
				l->head_made = false;
				name_drop(l, s->info.adapter);
				return;
			}
			d = slot_new(l, s->info.adapter);
			d->head = s->fresh_head;
			s->fresh_head = NULL;
		}
		learn_mtp_free(s->fresh_head); // made twice by grants racing: the engine's stays
		s->fresh_head = NULL;
		s->info.version = d->version;
		d->g = s;
		if (s->revoke) end_grant(l, d, LEARN_GRANT_REVOKED, NULL);
		return;
	}
	if (s->fresh) {
		if (d) { // an adapter unloaded meanwhile and made again: the new one replaces it
			drop_job(l, d);
			learn_adapter_free(d->a);
		} else {
			make_room(l);
			if (l->n_ad == MODEL_LORAS_MAX) {
				learn_adapter_free(s->fresh);
				s->fresh = NULL;
				s->info.state = LEARN_GRANT_FAILED;
				snprintf(s->info.reason, sizeof s->info.reason, "%d adapters learn here already", MODEL_LORAS_MAX);
				name_drop(l, s->info.adapter);
				return;
			}
			d = slot_new(l, s->info.adapter);
		}
		d->a = s->fresh;
		s->fresh = NULL;
	}
	if (!d) {
		s->info.state = LEARN_GRANT_FAILED;
		snprintf(s->info.reason, sizeof s->info.reason, "the adapter '%s' is gone", s->info.adapter);
		return;
	}
	if (s->fresh_version) d->version = s->fresh_version;
	s->info.version = d->version;
	d->g = s;
	if (s->revoke) end_grant(l, d, LEARN_GRANT_REVOKED, NULL);
}

// Under mu: grants made and revocations asked for since the last boundary.
static void apply_changes(learn_live *l) {
	for (int i = 0; i < LEARN_LIVE_GRANTS; i++) {
		grant *s = &l->g[i];
		if (s->used && s->ready && !s->adopted) adopt(l, s);
	}
	for (int i = 0; i < l->n_ad; i++)
		if (l->ad[i].g && l->ad[i].g->revoke) end_grant(l, &l->ad[i], LEARN_GRANT_REVOKED, NULL);
}

// d's job for its grant, made when it has none. Under mu.
static int job_of(learn_live *l, ladapter *d, char *err, size_t errlen) {
	if (has_job(d)) return 0;
	learn_opts o;
	learn_opts_default(&o);
	o.lr = d->g->lr;
	o.batch = d->g->batch;
	o.piece = l->piece;
	o.max_tokens = LEARN_LIVE_MAX_EXAMPLE;
	return d->head ? learn_mtp_job_new(&d->mjob, d->head, &o, err, errlen) : learn_job_new(&d->job, d->a, &o, err, errlen);
}

// Under mu: an example for grant id into its adapter's job (dropped when the grant ended).
static void take_example(learn_live *l, ex_task *t) {
	char err[256];
	for (int i = 0; i < l->n_ad; i++) {
		ladapter *d = &l->ad[i];
		if (!d->g || d->g->info.id != t->grant) continue;
		int rc = job_of(l, d, err, sizeof err);
		if (!rc) rc = d->head ? learn_mtp_job_add(d->mjob, t->e, err, sizeof err) : learn_job_add(d->job, t->e, err, sizeof err);
		if (rc) end_grant(l, d, LEARN_GRANT_FAILED, err);
		else l->revision++;
		return;
	}
}

// Under mu: the expired grants end, their steps dropped.
static void expire(learn_live *l, uint64_t now) {
	for (int i = 0; i < l->n_ad; i++) {
		grant *s = l->ad[i].g;
		if (s && s->expires_us && now >= s->expires_us) end_grant(l, &l->ad[i], LEARN_GRANT_EXPIRED, NULL);
	}
}

// Under mu: saves asked for take a copy of the committed weights to the learn thread.
static void take_saves(learn_live *l) {
	save_task *t = l->sv_head;
	l->sv_head = l->sv_tail = NULL;
	while (t) {
		save_task *next = t->next;
		t->next = NULL;
		const ladapter *d = adapter_named(l, t->name);
		if (!d) t->rc = base_seterr(t->msg, sizeof t->msg, LANES_ENOTFOUND, "no adapter called '%s' learns here", t->name);
		else if (d->head) {
			if (!(t->rc = learn_mtp_copy(&t->head_copy, d->head, t->msg, sizeof t->msg))) t->version = d->version;
		} else if (!(t->rc = learn_adapter_copy(&t->copy, d->a, t->msg, sizeof t->msg))) t->version = d->version;
		if (l->wr_tail) l->wr_tail->next = t;
		else l->wr_head = t;
		l->wr_tail = t;
		t = next;
	}
	pthread_cond_broadcast(&l->cv);
}

// Engine: d's whole step becomes the adapter's next version, published under its name; the
// grant may end with it. A name the registry is loading now waits for the next boundary.
// Under mu: d's grant counts a committed step, which made version v; the grant may end with it.
static void step_done(learn_live *l, ladapter *d, const learn_step_info *info, int64_t v) {
	grant *s = d->g;
	s->info.steps_done++;
	s->info.tokens_used += info->tokens;
	s->info.last_loss = info->loss;
	s->info.version = d->version = v;
	s->info.queued = s->info.queued > info->examples ? s->info.queued - info->examples : 0;
	l->committed++;
	l->tokens += info->tokens;
	l->revision++;
	if (s->info.steps_done >= s->info.steps_max || s->info.tokens_used >= s->info.tokens_max)
		end_grant(l, d, LEARN_GRANT_EXHAUSTED, NULL);
}

// Engine: the head's whole step becomes its next version, drafting from the next round.
static void commit_head(learn_live *l, ladapter *d) {
	char err[256];
	model_head *ver = NULL;
	learn_step_info info;
	const int rc = learn_mtp_job_commit(d->mjob, &ver, &info, err, sizeof err);
	if (!rc) lane_host_set_head(l->host, ver);
	pthread_mutex_lock(&l->mu);
	if (rc) {
		end_grant(l, d, LEARN_GRANT_FAILED, err);
		pthread_mutex_unlock(&l->mu);
		return;
	}
	l->head_version = d->version + 1;
	step_done(l, d, &info, d->version + 1);
	pthread_mutex_unlock(&l->mu);
}

static void commit(learn_live *l, ladapter *d) {
	if (d->head) {
		commit_head(l, d);
		return;
	}
	char err[256];
	uint64_t ticket;
	int rc = model_loras_reserve(l->reg, d->name, "", NAN, true, &ticket, err, sizeof err);
	if (rc) {
		// unloaded (or being replaced from a file): the steps have nowhere to go
		pthread_mutex_lock(&l->mu);
		end_grant(l, d, LEARN_GRANT_FAILED, rc == LANES_EBUSY ? "the adapter is being replaced from a file" : "the adapter was unloaded");
		if (rc != LANES_EBUSY) {
			name_drop(l, d->name);
			adapter_free_at(l, (int)(d - l->ad));
		}
		pthread_mutex_unlock(&l->mu);
		return;
	}
	model_lora *ver = NULL;
	learn_step_info info;
	rc = learn_commit(d->job, &ver, &info, err, sizeof err);
	uint32_t v = 0;
	model_loras_publish(l->reg, d->name, ticket, rc ? NULL : ver, &v);
	pthread_mutex_lock(&l->mu);
	if (rc) { // nothing changed: the weights and version are as they were
		end_grant(l, d, LEARN_GRANT_FAILED, err);
		pthread_mutex_unlock(&l->mu);
		return;
	}
	if (!v) { // unloaded between the reservation and the version
		end_grant(l, d, LEARN_GRANT_FAILED, "the adapter was unloaded");
		name_drop(l, d->name);
		adapter_free_at(l, (int)(d - l->ad));
		pthread_mutex_unlock(&l->mu);
		return;
	}
	step_done(l, d, &info, v);
	pthread_mutex_unlock(&l->mu);
}

static bool has_work(const ladapter *d) {
	if (!d->g || !has_job(d)) return false;
	return job_state(d) != LEARN_IDLE || (d->mjob ? learn_mtp_job_queued(d->mjob) : learn_job_queued(d->job)) > 0;
}

static bool on_boundary(void *arg) {
	learn_live *l = arg;
	pthread_mutex_lock(&l->mu);
	if (l->changes != l->seen) {
		l->seen = l->changes;
		apply_changes(l);
	}
	expire(l, base_now_us());
	ex_task *ex = l->ex_head;
	l->ex_head = l->ex_tail = NULL;
	for (ex_task *t = ex; t; t = t->next) take_example(l, t);
	if (l->sv_head) take_saves(l);
	pthread_mutex_unlock(&l->mu);
	free_examples(ex);
	bool more = false;
	// from the last: an adapter dropped at its commit takes the last one's place
	for (int i = l->n_ad - 1; i >= 0; i--) {
		ladapter *d = &l->ad[i];
		if (d->g && job_state(d) == LEARN_READY) commit(l, d);
		if (i < l->n_ad && has_job(d) && !has_work(d)) {
			pthread_mutex_lock(&l->mu); // an idle job's memory goes back; the next example makes another
			drop_job(l, d);
			pthread_mutex_unlock(&l->mu);
		}
	}
	for (int i = 0; i < l->n_ad; i++) more |= has_work(&l->ad[i]);
	if (l->revision != l->published) publish(l);
	return more;
}

static double on_cost(void *arg) {
	learn_live *l = arg;
	double c = 0;
	for (int i = 0; i < l->n_ad; i++) {
		const ladapter *d = &l->ad[i];
		if (!d->g || !has_job(d) || job_state(d) == LEARN_READY) continue;
		const double x = d->mjob ? learn_mtp_job_next_cost(d->mjob) : learn_step_next_cost(d->job);
		if (x > 0 && (c == 0 || x < c)) c = x;
	}
	return c;
}

// The adapters' pieces within budget, a different adapter first each round.
static double on_run(void *arg, base_pool *pool, double budget) {
	learn_live *l = arg;
	const uint64_t t0 = base_now_us();
	double spent = 0;
	char err[256];
	const int n = l->n_ad, first = n ? l->rr++ % n : 0;
	for (int k = 0; k < n; k++) {
		ladapter *d = &l->ad[(first + k) % n];
		if (!d->g || !has_job(d) || job_state(d) == LEARN_READY) continue;
		double s = 0;
		const int rc = d->mjob ? learn_mtp_job_run(d->mjob, pool, budget - spent, &s, err, sizeof err)
				       : learn_step_run(d->job, pool, budget - spent, &s, err, sizeof err);
		spent += s;
		if (rc) {
			pthread_mutex_lock(&l->mu);
			end_grant(l, d, LEARN_GRANT_FAILED, err);
			pthread_mutex_unlock(&l->mu);
		}
	}
	l->train_s += (double)(base_now_us() - t0) / 1e6;
	return spent;
}

static void on_halt(void *arg) {
	learn_live *l = arg;
	pthread_mutex_lock(&l->mu);
	l->halted = true;
	for (int i = 0; i < l->n_ad; i++) end_grant(l, &l->ad[i], LEARN_GRANT_HALTED, "the server halted");
	for (int i = 0; i < LEARN_LIVE_GRANTS; i++) {
		grant *s = &l->g[i];
		if (!s->used || !s->ready || s->adopted) continue;
		learn_adapter_free(s->fresh);
		learn_mtp_free(s->fresh_head);
		s->fresh = NULL, s->fresh_head = NULL;
		s->adopted = true;
		s->info.state = LEARN_GRANT_HALTED;
		snprintf(s->info.reason, sizeof s->info.reason, "the server halted");
	}
	ex_task *ex = l->ex_head;
	l->ex_head = l->ex_tail = NULL;
	cancel_saves(l, "the server halted before the adapter was saved");
	l->revision++;
	pthread_mutex_unlock(&l->mu);
	free_examples(ex);
	publish(l);
}

lane_background learn_live_background(learn_live *l, double share) {
	return (lane_background){.arg = l, .cost = on_cost, .run = on_run, .boundary = on_boundary, .halt = on_halt, .share = share};
}

// ---- the learn thread: saves, and the engine woken when a grant expires --------------------

static void *learn_main(void *arg) {
	learn_live *l = arg;
	uint64_t woken = 0; // the latest expiry the engine was woken for
	pthread_mutex_lock(&l->mu);
	for (;;) {
		save_task *t = l->wr_head;
		if (t) {
			l->wr_head = t->next;
			if (!l->wr_head) l->wr_tail = NULL;
			const bool stop = l->stopping;
			pthread_mutex_unlock(&l->mu);
			if (!t->rc && stop) t->rc = base_seterr(t->msg, sizeof t->msg, LANES_ECANCELLED, "the server is stopping");
			if (!t->rc)
				t->rc = t->head_copy ? learn_mtp_save_at(t->head_copy, t->dfd, t->file, t->msg, sizeof t->msg)
						     : learn_adapter_save_at(t->copy, t->dfd, t->file, GGUF_T_F32, t->msg, sizeof t->msg);
			if (!t->rc) LOG_INFO(MOD, "%s %s v%lld saved as %s", t->head_copy ? "head" : "adapter", t->name, (long long)t->version, t->file);
			learn_adapter_free(t->copy);
			learn_mtp_free(t->head_copy);
			t->done(t->arg, t->rc, t->rc ? t->msg : "", t->version);
			free(t);
			pthread_mutex_lock(&l->mu);
			continue;
		}
		if (l->stopping) break;
		uint64_t next = 0;
		for (int i = 0; i < LEARN_LIVE_GRANTS; i++) {
			const grant *s = &l->g[i];
			if (s->used && s->ready && !ended(s) && s->expires_us > woken && (!next || s->expires_us < next)) next = s->expires_us;
		}
		const uint64_t now = base_now_us();
		if (next && now >= next) {
			woken = next;
			lane_host *h = l->host;
			pthread_mutex_unlock(&l->mu);
			if (h) lane_host_wake(h);
			pthread_mutex_lock(&l->mu);
			continue;
		}
		if (!next) {
			pthread_cond_wait(&l->cv, &l->mu);
			continue;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		const uint64_t wait = next - now;
		ts.tv_sec += (time_t)(wait / 1000000);
		ts.tv_nsec += (long)(wait % 1000000) * 1000;
		if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
		pthread_cond_timedwait(&l->cv, &l->mu, &ts);
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

// ---- set-up and tear-down --------------------------------------------------------------------

int learn_live_new(learn_live **out, const model *m, int32_t piece, char *err, size_t errlen) {
	*out = NULL;
	learn_live *l = calloc(1, sizeof *l);
	if (!l) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	l->m = m;
	l->piece = piece > 0 ? piece : 64;
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cv, NULL);
	pthread_mutex_init(&l->pub_mu, NULL);
	publish(l);
	if (pthread_create(&l->thread, NULL, learn_main, l)) {
		learn_live_free(l);
		return base_seterr(err, errlen, LANES_ENOMEM, "cannot start the learn thread");
	}
	l->thread_started = true;
	*out = l;
	return 0;
}

void learn_live_attach(learn_live *l, lane_host *h, model_loras *reg) {
	pthread_mutex_lock(&l->mu);
	l->host = h;
	l->reg = reg;
	pthread_mutex_unlock(&l->mu);
}

void learn_live_stop(learn_live *l) {
	if (!l || !l->thread_started) return;
	pthread_mutex_lock(&l->mu);
	l->stopping = true;
	cancel_saves(l, "the server is stopping");
	pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
	pthread_join(l->thread, NULL);
	l->thread_started = false;
}

void learn_live_free(learn_live *l) {
	if (!l) return;
	learn_live_stop(l);
	while (l->n_ad) adapter_free_at(l, l->n_ad - 1);
	for (int i = 0; i < LEARN_LIVE_GRANTS; i++) learn_adapter_free(l->g[i].fresh), learn_mtp_free(l->g[i].fresh_head);
	free_examples(l->ex_head);
	pthread_mutex_destroy(&l->mu);
	pthread_cond_destroy(&l->cv);
	pthread_mutex_destroy(&l->pub_mu);
	free(l);
}

// ---- the HTTP side ------------------------------------------------------------------------------

// Under mu: a free slot, else the one of the oldest grant that ended (it leaves the ledger).
static grant *free_slot(learn_live *l) {
	grant *old = NULL;
	for (int i = 0; i < LEARN_LIVE_GRANTS; i++) {
		grant *s = &l->g[i];
		if (!s->used) return s;
		if (ended(s) && (!old || s->info.id < old->info.id)) old = s;
	}
	return old;
}

// The path of the file a loaded adapter (ready) called name came from ("" when it has none),
// and its version.
static bool file_of(model_loras *reg, const char *name, char *path, size_t n, int64_t *version) {
	model_loras_entry *v = NULL;
	const int k = model_loras_list(reg, &v);
	bool found = false;
	for (int i = 0; i < k; i++)
		if (v[i].state == MODEL_LORAS_READY && !strcmp(v[i].name, name)) {
			snprintf(path, n, "%s", v[i].path);
			*version = v[i].version;
			found = true;
		}
	free(v);
	return found;
}

// The adapter a grant on r->adapter trains when the engine has none of that name serving:
// the loaded file's weights, or a new one published as version 0.
static int make_adapter(learn_live *l, const learn_grant_req *r, uint64_t seed, learn_adapter **out, int64_t *version, bool *created,
			char *err, size_t errlen) {
	char path[1024], why[512];
	*out = NULL;
	*created = false;
	if (file_of(l->reg, r->adapter, path, sizeof path, version)) {
		if (!*path)
			return base_seterr(err, errlen, LANES_EINVAL, "the adapter '%s' has no file to train on (it learned on a server since stopped?)",
					   r->adapter);
		int rc = learn_adapter_load(out, l->m, path, why, sizeof why);
		if (rc) return base_seterr(err, errlen, rc == LANES_ENOMEM ? rc : LANES_EINVAL, "the adapter '%s' cannot be trained: %s", r->adapter, why);
		learn_adapter_info ai;
		learn_adapter_info_of(*out, &ai);
		if (r->rank && r->rank != ai.rank) {
			learn_adapter_free(*out);
			*out = NULL;
			return base_seterr(err, errlen, LANES_EINVAL, "the adapter '%s' has rank %d: a grant cannot change it (leave rank out)",
					   r->adapter, ai.rank);
		}
		return 0;
	}
	uint64_t ticket;
	int rc = model_loras_reserve(l->reg, r->adapter, "", 1.0f, false, &ticket, why, sizeof why);
	if (rc) return base_seterr(err, errlen, rc == LANES_EINVAL ? rc : LANES_EBUSY, "%s", why);
	const learn_adapter_opts ao = {.rank = r->rank ? r->rank : 8, .seed = seed};
	model_lora *v0 = NULL;
	rc = learn_adapter_new(out, l->m, &ao, why, sizeof why);
	if (!rc) rc = learn_adapter_lora(*out, &v0, why, sizeof why);
	uint32_t v = 0;
	model_loras_publish(l->reg, r->adapter, ticket, rc ? NULL : v0, &v);
	if (!rc && !v) rc = base_seterr(why, sizeof why, LANES_EBUSY, "the adapter '%s' was unloaded as it was made", r->adapter);
	if (rc) {
		learn_adapter_free(*out);
		*out = NULL;
		return base_seterr(err, errlen, rc, "%s", why);
	}
	*version = v;
	*created = true;
	return 0;
}

int learn_live_grant(learn_live *l, const learn_grant_req *r, learn_grant_info *out, bool *created, char *err, size_t errlen) {
	*created = false;
	const bool head = r->kind == LEARN_KIND_MTP;
	if (!model_lora_name_ok(r->adapter))
		return base_seterr(err, errlen, LANES_EINVAL, "adapter must be a name of 1 to %d letters, digits, '.', '_' or '-'", MODEL_LORA_NAME_MAX);
	if (head != !strcmp(r->adapter, LEARN_LIVE_HEAD))
		return base_seterr(err, errlen, LANES_EINVAL, head ? "a grant of kind mtp trains the head, named '%s'" : "'%s' names the MTP head: a grant of kind mtp trains it",
				   LEARN_LIVE_HEAD);
	if (head && r->rank) return base_seterr(err, errlen, LANES_EINVAL, "rank is a LoRA adapter's: the head trains its own weights");
	if (r->max_steps < 1 || r->max_steps > 1000000000)
		return base_seterr(err, errlen, LANES_EINVAL, "max_steps must be between 1 and 1000000000, got %lld", (long long)r->max_steps);
	if (r->max_tokens < 2 || r->max_tokens > ((int64_t)1 << 40))
		return base_seterr(err, errlen, LANES_EINVAL, "max_tokens must be between 2 and %lld, got %lld", (long long)1 << 40,
				   (long long)r->max_tokens);
	if (!(r->lr >= 0 && r->lr <= 1)) return base_seterr(err, errlen, LANES_EINVAL, "lr must be between 0 and 1 (0: 0.001)");
	if (r->rank < 0 || r->rank > LEARN_LIVE_MAX_RANK)
		return base_seterr(err, errlen, LANES_EINVAL, "rank must be between 1 and %d, got %d", LEARN_LIVE_MAX_RANK, r->rank);
	if (r->batch < 0 || r->batch > LEARN_LIVE_MAX_BATCH)
		return base_seterr(err, errlen, LANES_EINVAL, "batch must be between 1 and %d, got %d", LEARN_LIVE_MAX_BATCH, r->batch);
	if (!(r->expires_s >= 0 && r->expires_s <= LEARN_LIVE_MAX_EXPIRY_S))
		return base_seterr(err, errlen, LANES_EINVAL, "expires_s must be between 0 and %.0f seconds", LEARN_LIVE_MAX_EXPIRY_S);
	pthread_mutex_lock(&l->mu);
	int rc = 0;
	grant *s = NULL;
	if (!l->host || l->halted || l->stopping) rc = base_seterr(err, errlen, LANES_ECANCELLED, "the server is halting: no grant is made");
	for (int i = 0; !rc && i < LEARN_LIVE_GRANTS; i++) {
		const grant *o = &l->g[i];
		if (o->used && !ended(o) && !strcmp(o->info.adapter, r->adapter))
			rc = base_seterr(err, errlen, LANES_EBUSY, "the adapter '%s' has an open grant (grant-%llu): revoke it or let it end first",
					 r->adapter, (unsigned long long)o->info.id);
	}
	if (!rc && head && !lane_host_head_ok(l->host))
		rc = base_seterr(err, errlen, LANES_EUNSUPPORTED,
				 "this server drafts with no MTP head: start it with --draft mtp to learn one (or serve a model with a head, or --draft-head)");
	if (!rc && !(s = free_slot(l)))
		rc = base_seterr(err, errlen, LANES_EBUSY, "%d grants are open, the most this server holds: revoke one first", LEARN_LIVE_GRANTS);
	const int32_t learned = rc ? 0 : name_rank(l, r->adapter);
	const bool head_made = l->head_made;
	if (!rc) {
		memset(s, 0, sizeof *s);
		s->used = true;
		s->info.id = ++l->next_id;
		s->info.kind = r->kind;
		snprintf(s->info.adapter, sizeof s->info.adapter, "%s", r->adapter);
		s->info.state = LEARN_GRANT_ACTIVE;
		s->info.steps_max = r->max_steps;
		s->info.tokens_max = r->max_tokens;
		s->info.last_loss = NAN;
		// a head's steps move whole blocks: wider ones need smaller steps
		s->lr = r->lr > 0 ? r->lr : head ? 0.02f / sqrtf((float)model_hparams_of(l->m)->n_embd) : 1e-3f;
		s->info.lr = s->lr;
		s->batch = r->batch > 0 ? r->batch : 4;
		if (r->expires_s > 0) {
			s->expires_us = base_now_us() + (uint64_t)(r->expires_s * 1e6);
			s->info.expires_at = unix_now() + (int64_t)ceil(r->expires_s);
		}
	}
	const uint64_t id = s ? s->info.id : 0;
	pthread_mutex_unlock(&l->mu);
	if (rc) return rc;
	// the adapter: the engine's own while the registry serves it, else the file's or a new one
	learn_adapter *fresh = NULL;
	learn_mtp *fresh_head = NULL;
	int64_t fresh_version = 0;
	int32_t rank = learned;
	if (head) {
		// the engine's head goes on; else one from the model's own head or its last block
		char why[256];
		if (!head_made && (rc = learn_mtp_new(&fresh_head, l->m, why, sizeof why)))
			rc = base_seterr(err, errlen, rc == LANES_ENOMEM ? rc : LANES_EUNSUPPORTED, "%s", why);
		*created = !head_made;
		rank = 1;
	} else if (learned && model_loras_has(l->reg, r->adapter)) {
		if (r->rank && r->rank != learned)
			rc = base_seterr(err, errlen, LANES_EINVAL, "the adapter '%s' has rank %d: a grant cannot change it (leave rank out)",
					 r->adapter, learned);
	} else if (!(rc = make_adapter(l, r, id, &fresh, &fresh_version, created, err, errlen))) {
		learn_adapter_info ai;
		learn_adapter_info_of(fresh, &ai);
		rank = ai.rank;
	}
	pthread_mutex_lock(&l->mu);
	if (!rc && (l->halted || l->stopping)) rc = base_seterr(err, errlen, LANES_ECANCELLED, "the server is halting: no grant is made");
	if (rc) {
		learn_adapter_free(fresh);
		learn_mtp_free(fresh_head);
		s->used = false;
		pthread_mutex_unlock(&l->mu);
		return rc;
	}
	if (head) l->head_made = true;
	s->fresh_head = fresh_head;
	s->fresh = fresh;
	s->fresh_version = fresh_version;
	char path[8];
	if (head) fresh_version = l->head_version;
	else if (!fresh_version) file_of(l->reg, r->adapter, path, sizeof path, &fresh_version);
	s->info.version = fresh_version;
	s->rank = rank;
	s->ready = true;
	name_set(l, r->adapter, rank);
	l->changes++;
	*out = s->info;
	pthread_cond_broadcast(&l->cv); // its expiry, if any
	pthread_mutex_unlock(&l->mu);
	char what[32];
	snprintf(what, sizeof what, head ? "the MTP head" : "rank %d", rank);
	LOG_INFO(MOD, "grant-%llu on %s%s (%s): %lld steps, %lld tokens, lr %g%s", (unsigned long long)id, r->adapter, *created ? " (new)" : "",
		 what, (long long)r->max_steps, (long long)r->max_tokens, (double)out->lr, r->expires_s > 0 ? ", expiring" : "");
	lane_host_wake(l->host);
	return 0;
}

int learn_live_revoke(learn_live *l, uint64_t id, learn_grant_info *out, char *err, size_t errlen) {
	pthread_mutex_lock(&l->mu);
	grant *s = slot_of(l, id);
	int rc = 0;
	if (!s) rc = base_seterr(err, errlen, LANES_ENOTFOUND, "no grant grant-%llu", (unsigned long long)id);
	else if (ended(s))
		rc = base_seterr(err, errlen, LANES_EBUSY, "grant-%llu has ended already (%s)", (unsigned long long)id, learn_grant_state_name[s->info.state]);
	else if (s->revoke) rc = base_seterr(err, errlen, LANES_EBUSY, "grant-%llu is revoked already", (unsigned long long)id);
	if (s) {
		if (!rc) {
			s->revoke = true;
			l->changes++;
		}
		*out = s->info;
		if (!ended(s)) out->state = LEARN_GRANT_REVOKED;
	}
	pthread_mutex_unlock(&l->mu);
	if (!rc) lane_host_wake(l->host);
	return rc;
}

int learn_live_example(learn_live *l, uint64_t id, learn_example *e, learn_grant_info *out, int64_t *tokens_left, char *err,
		      size_t errlen) {
	const int64_t n = learn_example_tokens(e);
	if (n > LEARN_LIVE_MAX_EXAMPLE)
		return base_seterr(err, errlen, LANES_EINVAL, "the example has %lld tokens: a step takes examples of %d at most", (long long)n,
				   LEARN_LIVE_MAX_EXAMPLE);
	ex_task *t = calloc(1, sizeof *t);
	if (!t) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	pthread_mutex_lock(&l->mu);
	grant *s = slot_of(l, id);
	int rc = 0;
	if (!s) rc = base_seterr(err, errlen, LANES_ENOTFOUND, "no grant grant-%llu", (unsigned long long)id);
	else if (l->halted || l->stopping) rc = base_seterr(err, errlen, LANES_ECANCELLED, "the server is halting: no example is taken");
	else if (ended(s))
		rc = base_seterr(err, errlen, LANES_EBUSY, "grant-%llu has ended (%s)%s%s", (unsigned long long)id, learn_grant_state_name[s->info.state],
				 s->info.reason[0] ? ": " : "", s->info.reason);
	else if (s->revoke) rc = base_seterr(err, errlen, LANES_EBUSY, "grant-%llu was revoked", (unsigned long long)id);
	else if (s->info.kind == LEARN_KIND_MTP && n < 3)
		rc = base_seterr(err, errlen, LANES_EINVAL, "the example has %lld tokens: the head learns from 3 or more", (long long)n);
	else if (s->expires_us && base_now_us() >= s->expires_us) rc = base_seterr(err, errlen, LANES_EBUSY, "grant-%llu has expired", (unsigned long long)id);
	else if (n > s->info.tokens_max - s->reserved)
		rc = base_seterr(err, errlen, LANES_ELIMIT, "grant-%llu has %lld of its %lld tokens left (those of its queued examples counted): this example has %lld",
				 (unsigned long long)id, (long long)(s->info.tokens_max - s->reserved), (long long)s->info.tokens_max, (long long)n);
	if (!rc) {
		s->reserved += n;
		s->info.queued++;
		l->examples++;
		t->grant = id;
		t->e = e;
		if (l->ex_tail) l->ex_tail->next = t;
		else l->ex_head = t;
		l->ex_tail = t;
	}
	if (s) {
		*out = s->info;
		*tokens_left = s->info.tokens_max - s->reserved;
	}
	pthread_mutex_unlock(&l->mu);
	if (rc) {
		free(t);
		return rc;
	}
	lane_host_wake(l->host);
	return 0;
}

int learn_live_save(learn_live *l, const char *name, int dfd, const char *file, learn_live_saved done, void *arg, char *err,
		   size_t errlen) {
	int rc = 0;
	if (!base_name_ok(file)) return base_seterr(err, errlen, LANES_EINVAL, "'%.64s' is not a file name", file);
	save_task *t = calloc(1, sizeof *t);
	if (!t) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	snprintf(t->name, sizeof t->name, "%s", name);
	t->dfd = dfd;
	snprintf(t->file, sizeof t->file, "%s", file);
	t->done = done;
	t->arg = arg;
	pthread_mutex_lock(&l->mu);
	if (l->halted || l->stopping || !l->host) rc = base_seterr(err, errlen, LANES_ECANCELLED, "the server is halting: nothing is saved");
	else if (!name_rank(l, name)) rc = base_seterr(err, errlen, LANES_ENOTFOUND, "no adapter called '%s' learns here", name);
	if (!rc) {
		if (l->sv_tail) l->sv_tail->next = t;
		else l->sv_head = t;
		l->sv_tail = t;
	}
	pthread_mutex_unlock(&l->mu);
	if (rc) {
		free(t);
		return rc;
	}
	lane_host_wake(l->host);
	return 0;
}
