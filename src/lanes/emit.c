// lanes: emit — a row's logits become the request's token (penalties, biases, the draw at
// (seed, choice, position)), its logprobs, and text through the streaming detokenizer, held
// back while it may still become a stop string; a stop token, stop string or length ends it,
// and so does a grammar that allows no token.
#include "lanes/lanes_int.h"

#include "sample/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int pending_add(lane_req *r, const char *s, size_t n) {
	if (r->n_pending + n + 1 > r->cap_pending) {
		size_t cap = r->cap_pending ? r->cap_pending : 64;
		while (cap < r->n_pending + n + 1) cap *= 2;
		char *p = realloc(r->pending, cap);
		if (!p) return LANES_ENOMEM;
		r->pending = p;
		r->cap_pending = cap;
	}
	memcpy(r->pending + r->n_pending, s, n);
	r->n_pending += n;
	r->pending[r->n_pending] = 0;
	return 0;
}

// The first stop string inside the pending text: its index and where it starts.
static int find_stop(const lane_req *r, size_t *at) {
	int best = -1;
	size_t best_at = 0;
	for (int i = 0; i < r->n_stops; i++) {
		const char *p = memmem(r->pending, r->n_pending, r->stops[i], r->stop_len[i]);
		if (p && (best < 0 || (size_t)(p - r->pending) < best_at)) {
			best = i;
			best_at = (size_t)(p - r->pending);
		}
	}
	*at = best_at;
	return best;
}

// How much of the pending text is safe to emit: all but the longest suffix that could
// still grow into a stop string.
static size_t safe_prefix(const lane_req *r) {
	size_t keep = 0;
	for (int i = 0; i < r->n_stops; i++) {
		size_t L = r->stop_len[i];
		for (size_t k = L - 1 < r->n_pending ? L - 1 : r->n_pending; k > keep; k--)
			if (!memcmp(r->pending + r->n_pending - k, r->stops[i], k)) {
				keep = k;
				break;
			}
	}
	return r->n_pending - keep;
}

static void pending_drop(lane_req *r, size_t n) {
	if (!n) return;
	memmove(r->pending, r->pending + n, r->n_pending - n);
	r->n_pending -= n;
	if (r->pending) r->pending[r->n_pending] = 0;
}

static bool is_stop_token(const lane_host *h, const lane_req *r, int32_t tok) {
	if (!r->ignore_eos && tok_is_eog(h->vocab, tok)) return true;
	for (int32_t i = 0; i < r->n_stop_ids; i++)
		if (r->stop_ids[i] == tok) return true;
	return false;
}

// Log-probabilities of the raw distribution: the chosen token's and the top n; its rank
// (1 + the tokens more likely) when rank is not NULL.
static float logprobs(const float *logits, int32_t n_vocab, int32_t tok, lane_top *top, int32_t n_top, int32_t *rank) {
	float mx = -INFINITY;
	for (int32_t i = 0; i < n_vocab; i++)
		if (logits[i] > mx) mx = logits[i];
	double sum = 0;
	for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
	float lse = mx + (float)log(sum);
	for (int32_t k = 0; k < n_top; k++) top[k] = (lane_top){-1, -INFINITY};
	for (int32_t i = 0; i < n_vocab && n_top > 0; i++) {
		float v = logits[i] - lse;
		if (v <= top[n_top - 1].logprob) continue;
		int32_t k = n_top - 1;
		while (k > 0 && top[k - 1].logprob < v) { top[k] = top[k - 1]; k--; }
		top[k] = (lane_top){i, v};
	}
	const float lp = logits[tok] - lse;
	if (rank) {
		int32_t above = 0;
		for (int32_t i = 0; i < n_vocab; i++) above += logits[i] - lse > lp;
		*rank = 1 + above;
	}
	return lp;
}

// The request's token at absolute position pos: penalties, biases and the grammar's mask on
// a copy of the logits, then the sampler's draw at (seed, choice, pos). -1 when the grammar
// allows no token (-2: out of memory).
static int32_t pick(lane_host *h, lane_req *r, const float *lg, int32_t pos) {
	int32_t nv = h->hp.n_vocab;
	float *x = h->scratch;
	memcpy(x, lg, (size_t)nv * sizeof *x);
	const lane_sampling *s = &r->s;
	// a spent thinking budget: the close marker's tokens, whatever the logits say
	const int32_t forced = lane_think_forced(r);
	if (forced >= 0) return forced;
	if (sample_runs(&r->sp, SAMPLE_PENALTIES)) sample_penalize(x, nv, &r->pen, r->prompt, r->n_prompt, r->gen, r->n_gen, h->counts);
	if (r->dry_z && sample_runs(&r->sp, SAMPLE_DRY))
		sample_dry_apply(x, nv, &r->dry, r->prompt, r->n_prompt, r->gen, r->n_gen, h->counts, r->dry_z);
	for (int32_t i = 0; i < s->n_bias; i++) x[s->bias[i].token] += s->bias[i].bias;
	const bool gm = r->gm && !lane_think_holds(r);
	int rc = gm ? lane_constrain_mask(r, x, nv) : 0;
	if (rc) return rc == LANES_ENOMEM ? -2 : -1;
	// mirostat's mu is the request's, moved by each token taken: drafts draw in order, none is undone
	int32_t tok = sampler_draw(h->sampler, &r->sp, x, (uint64_t)s->choice, pos, &r->mirostat_mu);
	// every candidate may be banned by biases the grammar did not forbid: none is left
	return gm && x[tok] == -INFINITY ? -1 : tok;
}

// Ends r with the text it holds back and what its detokenizer still holds, as finish fin.
static void finish_flushed(lane_host *h, lane_req *r, enum lane_finish fin) {
	const char *t;
	size_t n = 0;
	tok_stream_flush(r->detok, &t, &n);
	if (n && pending_add(r, t, n)) { lane_finish(h, r, LANE_EV_FAILED, 0, -1, "out of memory", NULL, 0); return; }
	lane_finish(h, r, LANE_EV_FINISHED, fin, -1, NULL, r->pending, r->n_pending);
}

// Takes the sampled token of lane r: records it, emits its text, ends the request when a
// stop token, stop string, length or the context says so.
static void take_token(lane_host *h, lane_req *r, int32_t tok, float lp, const lane_top *top, int32_t n_top) {
	// under a grammar an end-of-generation token comes only where the text is whole: it ends
	// the request even with ignore_eos
	const bool gm = r->gm && !lane_think_holds(r); // the grammar starts after the thinking
	const bool eog = gm && tok_is_eog(h->vocab, tok);
	if (gm && grammar_matcher_accept(r->gm, tok)) {
		lane_finish(h, r, LANE_EV_FAILED, 0, -1, "the grammar refused the token drawn", NULL, 0);
		return;
	}
	if (eog || is_stop_token(h, r, tok)) {
		finish_flushed(h, r, LANE_FINISH_STOP);
		return;
	}
	r->gen[r->n_gen++] = tok;
	sha256_update(&r->sha, &tok, 4);
	h->stats.generated_tokens++;
	r->last = tok;
	const char *t;
	size_t n = 0;
	tok_stream_push(r->detok, tok, &t, &n);
	lane_think_took(r, t, n);
	bool length = r->n_gen >= r->max_tokens;
	// the grammar's sentence is whole and nothing may follow: it ends as at a stop token
	const bool done = gm && grammar_matcher_finished(r->gm);
	if (length || done) {
		if (n && pending_add(r, t, n)) goto oom;
		tok_stream_flush(r->detok, &t, &n);
	}
	if (n && pending_add(r, t, n)) goto oom;
	size_t at;
	int si = r->n_stops ? find_stop(r, &at) : -1;
	if (si >= 0) {
		if (lreq_emit_token(r, tok, r->pending, at, lp, top, n_top) || lane_fault(h, r)) goto oom;
		lane_finish(h, r, LANE_EV_FINISHED, LANE_FINISH_STOP_SEQUENCE, si, NULL, NULL, 0);
		return;
	}
	size_t emit = length || done ? r->n_pending : safe_prefix(r);
	if (lreq_emit_token(r, tok, r->pending, emit, lp, top, n_top) || lane_fault(h, r)) goto oom;
	pending_drop(r, emit);
	if (done) lane_finish(h, r, LANE_EV_FINISHED, LANE_FINISH_STOP, -1, NULL, NULL, 0);
	else if (length) lane_finish(h, r, LANE_EV_FINISHED, LANE_FINISH_LENGTH, -1, NULL, NULL, 0);
	return;
oom:
	lane_finish(h, r, LANE_EV_FAILED, 0, -1, "out of memory", NULL, 0);
}

// Samples the request's next token from lg and takes it; returns the token.
int32_t lane_emit_sampled(lane_host *h, lane_req *r, const float *lg) {
	int32_t pos = r->n_prompt + r->n_gen; // absolute position of the token drawn now
	int32_t tok = pick(h, r, lg, pos);
	if (tok == -2) {
		lane_finish(h, r, LANE_EV_FAILED, 0, -1, "out of memory", NULL, 0);
		return -1;
	}
	if (tok < 0) {
		finish_flushed(h, r, LANE_FINISH_GRAMMAR);
		return -1;
	}
	int32_t n_top = r->top_logprobs;
	float lp = 0;
	if (r->logprobs) lp = logprobs(lg, h->hp.n_vocab, tok, h->top, n_top, NULL);
	take_token(h, r, tok, lp, h->top, r->logprobs ? n_top : 0);
	return tok;
}

void lane_emit_prompt_lp(lane_host *h, lane_req *r, const float *lg, int32_t pos) {
	lane_prompt_lp *e = &r->plp[pos + 1];
	lane_top *top = r->pk ? r->ptop + (size_t)(pos + 1) * r->pk : NULL; // no alternatives asked: no room
	e->logprob = logprobs(lg, h->hp.n_vocab, r->prompt[pos + 1], top, r->pk, &e->rank);
}
