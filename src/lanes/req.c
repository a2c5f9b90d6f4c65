// lanes: a request's channel — events queued by the engine thread and read by the caller,
// with the terminal event stored in the request itself so ending one never allocates.
#include "lanes/lanes_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void lreq_ref(lane_req *r) { atomic_fetch_add(&r->refs, 1); }

void lreq_unref(lane_req *r) {
	if (atomic_fetch_sub(&r->refs, 1) != 1) return;
	ev_node *n = r->head;
	while (n) {
		ev_node *next = n->next;
		if (n != &r->final) free(n);
		n = next;
	}
	if (r->cur && r->cur != &r->final) free(r->cur);
	tok_stream_free(r->detok);
	for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
	free(r->prompt);
	free(r->bias);
	free(r->dry_breaker);
	free(r->dry_z);
	free(r->stop_ids);
	free(r->gen);
	free(r->plp);
	free(r->ptop);
	free(r->pool_sum);
	free(r->vec);
	free(r->pending);
	grammar_matcher_free(r->gm);
	grammar_unref(r->grammar);
	lane_lora_release(r);
	pthread_mutex_destroy(&r->mu);
	pthread_mutex_destroy(&r->nmu);
	pthread_cond_destroy(&r->cv);
	free(r);
}

void lane_lora_release(lane_req *r) {
	for (int32_t i = 0; i < r->lora.n; i++) model_lora_free(r->lora.use[i].lora);
	r->lora.n = 0;
}

static void push(lane_req *r, ev_node *n) {
	n->next = NULL;
	n->ev.t_us = base_now_us();
	// the callback's copy: once queued, the node is the reader's to take and free
	lane_event ev = n->ev;
	ev.text = NULL;
	pthread_mutex_lock(&r->mu);
	if (r->tail) r->tail->next = n;
	else r->head = n;
	r->tail = n;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
	// apart from mu, so a reader the callback wakes takes the event without waiting for it;
	// under nmu, so once lane_req_set_notify(NULL) returns no callback is running
	pthread_mutex_lock(&r->nmu);
	if (r->notify) r->notify(r->notify_arg, &ev);
	pthread_mutex_unlock(&r->nmu);
}

int lreq_emit_token(lane_req *r, int32_t token, const char *text, size_t len, float logprob,
		    const lane_top *top, int32_t n_top) {
	size_t sz = sizeof(ev_node) + len + 1;
	ev_node *n = malloc(sz);
	if (!n) return LANES_ENOMEM;
	memset(&n->ev, 0, sizeof n->ev);
	n->ev.kind = LANE_EV_TOKEN;
	n->ev.token = token;
	n->ev.logprob = logprob;
	n->ev.n_top = n_top;
	if (n_top) memcpy(n->top, top, (size_t)n_top * sizeof *top);
	char *t = (char *)(n + 1);
	if (len) memcpy(t, text, len);
	t[len] = 0;
	n->ev.text = t;
	n->ev.text_len = len;
	push(r, n);
	return 0;
}

void lreq_end(lane_req *r, enum lane_ev_kind kind, enum lane_finish finish, int32_t stop_index,
	      const char *reason, const char *text, size_t len) {
	if (r->ended) return;
	r->ended = true;
	lane_event *e = &r->final.ev;
	memset(e, 0, sizeof *e);
	e->kind = kind;
	e->finish = finish;
	e->stop_index = stop_index;
	if (reason) {
		snprintf(r->reason, sizeof r->reason, "%s", reason);
		e->reason = r->reason;
	}
	e->text = text ? text : "";
	e->text_len = text ? len : 0;
	e->n_prompt = r->n_prompt;
	e->n_generated = r->n_gen;
	e->n_cached = r->n_cached;
	if (kind == LANE_EV_FINISHED && r->embed != LANE_EMBED_OFF) {
		e->embedding = r->vec;
		e->n_embd = r->host->hp.n_embd;
		e->n_vectors = r->embed == LANE_EMBED_NONE ? r->n_prompt : 1;
	}
	uint8_t d[32];
	sha256_ctx c = r->sha;
	sha256_final(&c, d);
	for (int i = 0; i < 32; i++) {
		e->token_sha[2 * i] = "0123456789abcdef"[d[i] >> 4];
		e->token_sha[2 * i + 1] = "0123456789abcdef"[d[i] & 15];
	}
	e->token_sha[64] = 0;
	push(r, &r->final);
}

int lane_next(lane_req *r, lane_event *ev, int64_t timeout_us) {
	pthread_mutex_lock(&r->mu);
	if (r->cur && r->cur != &r->final) free(r->cur);
	r->cur = NULL;
	struct timespec dl;
	if (timeout_us > 0) {
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += timeout_us / 1000000;
		dl.tv_nsec += (long)(timeout_us % 1000000) * 1000;
		if (dl.tv_nsec >= 1000000000) { dl.tv_sec++; dl.tv_nsec -= 1000000000; }
	}
	while (!r->head) {
		if (timeout_us == 0) break;
		if (timeout_us < 0) pthread_cond_wait(&r->cv, &r->mu);
		else if (pthread_cond_timedwait(&r->cv, &r->mu, &dl) == ETIMEDOUT) break;
	}
	ev_node *n = r->head;
	if (n) {
		r->head = n->next;
		if (!r->head) r->tail = NULL;
		r->cur = n;
		*ev = n->ev;
		if (n->ev.kind == LANE_EV_TOKEN) ev->top = n->top;
	}
	pthread_mutex_unlock(&r->mu);
	return n != NULL;
}

void lane_req_set_notify(lane_req *r, void (*fn)(void *, const lane_event *), void *arg) {
	pthread_mutex_lock(&r->nmu);
	r->notify = fn;
	r->notify_arg = arg;
	pthread_mutex_unlock(&r->nmu);
}

// Only a flag: the engine is running rounds whenever a request is open, and reads it at
// the next round boundary.
void lane_cancel(lane_req *r) { atomic_store(&r->cancel, true); }

void lane_req_free(lane_req *r) {
	if (!r) return;
	lane_cancel(r);
	lreq_unref(r);
}

const lane_prompt_lp *lane_req_prompt_logprobs(const lane_req *r, const lane_top **top, int32_t *k) {
	*top = r->ptop;
	*k = r->pk;
	return r->plp;
}
