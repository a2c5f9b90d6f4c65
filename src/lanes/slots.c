// lanes: slots — llama-server's slot save, restore and erase over the prefix cache. A lane keeps
// its last request's prompt; the actions come from other threads as tasks the engine runs at a
// round boundary (the KV is the engine's alone), each waking its poster when done.
#include "lanes/lanes_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct lane_slot_task {
	struct lane_slot_task *next;
	lane_slot_job *job;
	int rc;
	char err[256];
	bool done;                // under mu: the poster may return (and its task with it)
	pthread_mutex_t mu;
	pthread_cond_t cv;
} lane_slot_task;

uint64_t lane_slot_max_bytes(const lane_host *h) { return h->cfg.cache_dir && h->cfg.prefix_cache ? kv_slot_max_bytes(h->kv) : 0; }

void lane_slot_record(lane_host *h, const lane_req *r) {
	if (!h->last || r->lane < 0) return;
	struct lane_last *l = &h->last[r->lane];
	if (l->cap < r->n_prompt) {
		int32_t *p = realloc(l->ids, (size_t)r->n_prompt * sizeof *p);
		if (!p) { // a record lost costs a later save its pages, never the request
			l->n = 0;
			return;
		}
		l->ids = p, l->cap = r->n_prompt;
	}
	memcpy(l->ids, r->prompt, (size_t)r->n_prompt * sizeof *r->prompt);
	l->n = r->n_prompt;
	l->root = r->prefix_root;
}

void lane_slot_free(lane_host *h) {
	for (int32_t i = 0; h->last && i < h->cfg.lanes; i++) free(h->last[i].ids);
	free(h->last);
	h->last = NULL;
}

lane_slot_task *lane_slot_take(lane_host *h) {
	lane_slot_task *t = h->slot_head;
	h->slot_head = h->slot_tail = NULL;
	return t;
}

// On the engine thread: one action on lane job->lane.
static int run_one(lane_host *h, lane_slot_job *job, char *err, size_t errlen) {
	struct lane_last *l = &h->last[job->lane];
	if (h->lanes[job->lane]) return base_seterr(err, errlen, LANES_EBUSY, "slot %d is running a request", job->lane);
	switch (job->action) {
	case LANE_SLOT_SAVE:
		if (l->n && l->root)
			return base_seterr(err, errlen, LANES_EUNSUPPORTED, "slot %d's last request used adapters: only the base model's pages are saved", job->lane);
		return kv_slot_save(h->kv, l->ids, l->n, &job->bytes, &job->n_bytes, &job->n_tokens, err, errlen);
	case LANE_SLOT_RESTORE: {
		int32_t *ids = NULL;
		const int rc = kv_slot_load(h->kv, job->bytes, job->n_bytes, &ids, &job->n_tokens, err, errlen);
		if (rc) return rc;
		free(l->ids);
		l->ids = ids, l->n = l->cap = job->n_tokens, l->root = 0;
		return 0;
	}
	case LANE_SLOT_ERASE:
		job->n_tokens = l->root ? 0 : kv_slot_erase(h->kv, l->ids, l->n);
		l->n = 0;
		return 0;
	}
	return base_seterr(err, errlen, LANES_EINVAL, "no such slot action");
}

void lane_slot_tasks(lane_host *h, lane_slot_task *t, bool cancel) {
	while (t) {
		lane_slot_task *next = t->next;
		const int rc = cancel ? base_seterr(t->err, sizeof t->err, LANES_ECANCELLED, "%s", h->halt_reason)
				      : run_one(h, t->job, t->err, sizeof t->err);
		pthread_mutex_lock(&t->mu);
		t->rc = rc;
		t->done = true;
		pthread_cond_signal(&t->cv);
		pthread_mutex_unlock(&t->mu); // t may be gone from here on
		t = next;
	}
}

int lane_slot_run(lane_host *h, lane_slot_job *job, char *err, size_t errlen) {
	if (job->lane < 0 || job->lane >= h->cfg.lanes)
		return base_seterr(err, errlen, LANES_ENOTFOUND, "no slot %d: slots are 0..%d", job->lane, h->cfg.lanes - 1);
	if (!lane_slot_max_bytes(h))
		return base_seterr(err, errlen, LANES_EUNSUPPORTED, "the prefix cache keeps nothing on disk (no --cache-dir, or the prefix cache off)");
	lane_slot_task t = {.job = job};
	pthread_mutex_init(&t.mu, NULL);
	pthread_cond_init(&t.cv, NULL);
	pthread_mutex_lock(&h->mu);
	const bool closed = h->halting || h->quit;
	if (!closed) {
		if (h->slot_tail) h->slot_tail->next = &t;
		else h->slot_head = &t;
		h->slot_tail = &t;
		pthread_cond_signal(&h->work);
	}
	pthread_mutex_unlock(&h->mu);
	int rc = closed ? base_seterr(err, errlen, LANES_ECANCELLED, "the server is halting") : 0;
	if (!closed) {
		pthread_mutex_lock(&t.mu);
		while (!t.done) pthread_cond_wait(&t.cv, &t.mu);
		pthread_mutex_unlock(&t.mu);
		rc = t.rc;
		if (rc) base_seterr(err, errlen, rc, "%s", t.err);
	}
	pthread_mutex_destroy(&t.mu);
	pthread_cond_destroy(&t.cv);
	return rc;
}
