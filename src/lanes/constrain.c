// lanes: constrained decoding — a request with a grammar gets a matcher at submit; each draw
// masks what the grammar forbids at the request's own state (a function of the tokens it took,
// never of other lanes), and each token taken advances the matcher.
#include "lanes/lanes_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TRIGGERS 16

// The vocabulary as grammars see it: each token's bytes as the request's detokenizer emits
// them mid-text; control tokens render nothing and are never drawn under a grammar.
static grammar_vocab *vocab_of(lane_host *h, char *err, size_t errlen) {
	grammar_vocab *gv = atomic_load(&h->gvocab);
	if (gv) return gv;
	pthread_mutex_lock(&h->gv_mu);
	if (!(gv = atomic_load(&h->gvocab))) {
		const int32_t n = h->hp.n_vocab, nt = tok_n_tokens(h->vocab);
		const char **piece = calloc((size_t)n, sizeof *piece);
		uint32_t *len = calloc((size_t)n, sizeof *len);
		bool *usable = calloc((size_t)n, sizeof *usable);
		size_t n_eog = 0;
		const int32_t *eog = tok_eog_ids(h->vocab, &n_eog);
		if (piece && len && usable) {
			for (int32_t i = 0; i < n; i++) {
				size_t l = 0;
				const char *p = i < nt ? tok_piece(h->vocab, i, 0, &l) : NULL;
				piece[i] = p ? p : "";
				len[i] = p ? (uint32_t)l : 0;
				usable[i] = p && l > 0 && !tok_is_eog(h->vocab, i);
			}
			if (grammar_vocab_new(&gv, n, piece, len, usable, eog, n_eog)) gv = NULL;
		}
		free(piece);
		free(len);
		free(usable);
		if (gv) atomic_store(&h->gvocab, gv);
	}
	pthread_mutex_unlock(&h->gv_mu);
	if (!gv) base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	return gv;
}

int lane_constrain_check(const lane_request *q, char *err, size_t errlen) {
	if (!q->grammar && !q->n_grammar_triggers) return 0;
	if (!q->grammar) return base_seterr(err, errlen, LANES_EINVAL, "grammar triggers need a grammar");
	if (q->embed != LANE_EMBED_OFF) return base_seterr(err, errlen, LANES_EINVAL, "an embedding request takes no grammar");
	if (q->n_grammar_triggers < 0 || q->n_grammar_triggers > MAX_TRIGGERS || (q->n_grammar_triggers && !q->grammar_triggers))
		return base_seterr(err, errlen, LANES_EINVAL, "a grammar takes 0 to %d triggers", MAX_TRIGGERS);
	for (int i = 0; i < q->n_grammar_triggers; i++)
		if (!q->grammar_triggers[i] || !q->grammar_triggers[i][0])
			return base_seterr(err, errlen, LANES_EINVAL, "grammar trigger %d is empty", i);
	return 0;
}

int lane_constrain_attach(lane_host *h, lane_req *r, const lane_request *q, char *err, size_t errlen) {
	if (!q->grammar) return 0;
	grammar_vocab *gv = vocab_of(h, err, errlen);
	if (!gv) return LANES_ENOMEM;
	int rc = grammar_matcher_new(&r->gm, q->grammar, gv, q->grammar_triggers, q->n_grammar_triggers, err, errlen);
	if (rc) return rc;
	r->grammar = grammar_ref(q->grammar);
	return 0;
}

int lane_constrain_mask(lane_req *r, float *x, int32_t nv) {
	if (!r->gm) return 0;
	const uint64_t *m;
	if (grammar_matcher_mask(r->gm, &m)) return LANES_ENOMEM;
	bool any = false;
	for (int32_t w = 0; w < (nv + 63) / 64; w++) {
		uint64_t bits = m[w];
		any |= bits != 0;
		if (bits == ~0ull) continue;
		const int32_t end = w * 64 + 64 < nv ? w * 64 + 64 : nv;
		for (int32_t i = w * 64; i < end; i++)
			if (!(bits >> (i & 63) & 1)) x[i] = -INFINITY;
	}
	return any ? 0 : LANES_EINVAL;
}

// The mask worker: while the forward pass runs, it computes the masks the live constrained
// lanes' next draws will need, so sampling finds them in the matchers' caches. It only reads
// matchers the engine leaves alone until lane_constrain_join; a mask is a function of the
// state alone, so when it runs never changes a token.
struct lane_masker {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool busy, quit;
	grammar_matcher *todo[LANE_SNAP_MAX_LANES];
	int n;
};

static void *masker_main(void *arg) {
	struct lane_masker *w = arg;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!w->busy && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
		if (w->quit) break;
		int n = w->n;
		pthread_mutex_unlock(&w->mu);
		for (int i = 0; i < n; i++) {
			const uint64_t *m;
			(void)grammar_matcher_mask(w->todo[i], &m); // a failure shows again at the draw
		}
		pthread_mutex_lock(&w->mu);
		w->busy = false;
		pthread_cond_broadcast(&w->cv);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

void lane_constrain_prefetch(lane_host *h) {
	grammar_matcher *todo[LANE_SNAP_MAX_LANES];
	int n = 0;
	for (int32_t i = 0; i < h->cfg.lanes && n < LANE_SNAP_MAX_LANES; i++)
		if (h->lanes[i] && h->lanes[i]->gm && !lane_think_holds(h->lanes[i])) todo[n++] = h->lanes[i]->gm;
	if (!n) return;
	struct lane_masker *w = h->masker;
	if (!w) {
		// started on first use: hosts that never see a grammar run no extra thread
		if (!(w = calloc(1, sizeof *w))) return;
		pthread_mutex_init(&w->mu, NULL);
		pthread_cond_init(&w->cv, NULL);
		if (pthread_create(&w->thread, NULL, masker_main, w)) {
			pthread_mutex_destroy(&w->mu);
			pthread_cond_destroy(&w->cv);
			free(w);
			return;
		}
		h->masker = w;
	}
	pthread_mutex_lock(&w->mu);
	memcpy(w->todo, todo, (size_t)n * sizeof *todo);
	w->n = n;
	w->busy = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

void lane_constrain_join(lane_host *h) {
	struct lane_masker *w = h->masker;
	if (!w) return;
	pthread_mutex_lock(&w->mu);
	while (w->busy) pthread_cond_wait(&w->cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

void lane_constrain_free(lane_host *h) {
	struct lane_masker *w = h->masker;
	if (!w) return;
	pthread_mutex_lock(&w->mu);
	w->quit = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	free(w);
	h->masker = NULL;
	grammar_vocab_free(h->gvocab);
	h->gvocab = NULL;
}
