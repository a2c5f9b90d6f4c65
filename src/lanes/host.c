// lanes: the engine thread. Each round admits from the queue, adds a decode row for every
// live lane and prompt pieces for filling lanes within the priced budget, runs one forward
// pass, samples, emits, and ends requests — publishing a snapshot at every boundary.
#include "lanes/lanes_int.h"

#include "sample/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MOD "lanes"

void lane_config_default(lane_config *c) {
	memset(c, 0, sizeof *c);
	c->lanes = 4;
	c->queue = 64;
	c->ctx = 8192;
	c->round_ms = 100;
	c->page_tokens = 16;
	c->kv_type = KV_F16S;
	c->prefix_cache = true;
	c->draft = LANE_DRAFT_AUTO;
	c->draft_max = 8;
	c->seed = 0x6c616e6573ull;
	c->window_recent_s = 300;
}

static int32_t imin(int32_t a, int32_t b) { return a < b ? a : b; }

int32_t lane_max_rows(const lane_config *cfg) {
	const int32_t dm = cfg->draft_max >= 0 && cfg->draft_max <= LANE_MAX_DRAFT ? cfg->draft_max : 8;
	return cfg->lanes * (1 + dm) + LANE_PROMPT_ROWS;
}

// Rows of logits one round writes at most: a decode row and its drafts per live lane, or
// the last prompt row of a filling one.
static int32_t max_logit_rows(const lane_config *cfg) {
	const int32_t dm = cfg->draft_max >= 0 && cfg->draft_max <= LANE_MAX_DRAFT ? cfg->draft_max : 8;
	return cfg->lanes * (1 + dm);
}

uint64_t lane_compute_bytes(const model_hparams *hp, const lane_config *cfg) {
	const int nth = cfg->threads > 0 ? cfg->threads : lanes_cpu_count();
	// the longest sequence a request may hold, as lane_host_new sets it
	const int32_t train = hp->n_ctx_train > 0 ? hp->n_ctx_train : cfg->ctx;
	const int32_t window = cfg->window_max > 0 ? cfg->window_max : imin(train, cfg->ctx);
	const uint64_t V = (uint64_t)hp->n_vocab, rows = (uint64_t)lane_max_rows(cfg);
	uint64_t b = model_ws_bytes(hp, (int64_t)rows, nth, model_attn_fused() ? 0 : window);
	b += (uint64_t)max_logit_rows(cfg) * V * sizeof(float);    // logits
	b += V * (sizeof(float) + sizeof(int32_t));                 // sampling scratch and counts
	b += rows * (sizeof(model_row) + sizeof(int32_t));          // the round's rows
	if (cfg->draft_model) {
		const int32_t drows = cfg->lanes > LANE_DRAFT_CHUNK ? cfg->lanes : LANE_DRAFT_CHUNK;
		b += (uint64_t)cfg->lanes * V * sizeof(float); // draft logits
		b += model_ws_bytes(model_hparams_of(cfg->draft_model), drows, nth,
				    model_attn_fused() ? 0 : window + LANE_MAX_DRAFT + 1);
	}
	return b;
}

const double lane_hist_bounds[LANE_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, INFINITY};

static void observe(lane_hist *hi, double seconds) {
	for (int i = 0; i < LANE_HIST_BUCKETS; i++)
		if (seconds <= lane_hist_bounds[i]) hi->count[i]++;
	hi->n++;
	hi->sum += seconds;
}

// ---- admission and release --------------------------------------------------------------
static void set_window(lane_host *h, int32_t tokens);

static int32_t pages_for(const lane_host *h, int64_t tokens) {
	int32_t pt = h->cfg.page_tokens;
	return (int32_t)((tokens + pt - 1) / pt);
}

// Pages a request needs for its whole life: prompt plus every token it may generate.
static int32_t request_pages(const lane_host *h, const lane_req *r) {
	return pages_for(h, (int64_t)r->n_prompt + r->max_tokens);
}

static void release_lane(lane_host *h, lane_req *r) {
	if (r->lane >= 0) {
		kv_seq_clear(h->kv, r->lane);
		if (h->dkv) kv_seq_clear(h->dkv, r->lane);
		r->dkv_len = 0;
		h->lanes[r->lane] = NULL;
		h->pages_reserved -= r->pages_reserved;
		r->pages_reserved = 0;
		r->lane = -1;
	}
}

// Ends r (terminal event), frees its lane and KV, and drops the host's reference.
static void record_demand(lane_host *h, const lane_req *r);

static void finish(lane_host *h, lane_req *r, enum lane_ev_kind kind, enum lane_finish fin, int32_t stop_index,
		   const char *reason, const char *text, size_t len) {
	if (r->lane >= 0) record_demand(h, r);
	release_lane(h, r);
	switch (kind) {
	case LANE_EV_FINISHED: h->stats.finished++; break;
	case LANE_EV_CANCELLED: h->stats.cancelled++; break;
	default: h->stats.failed++; break;
	}
	// counted out before the caller can see the end, so a caller never sees it still open
	atomic_fetch_sub(&h->open, 1);
	lreq_end(r, kind, fin, stop_index, reason, text, len);
	lreq_unref(r);
}

// ---- the elastic window --------------------------------------------------------------------------

// Sets the window (rounded up to whole pages, within the floor and the largest window) and
// the pool's page limit: a window for every lane, and never below what admitted requests
// were promised.
static void set_window(lane_host *h, int32_t tokens) {
	const int32_t pt = h->cfg.page_tokens;
	int32_t w = (int32_t)(((int64_t)tokens + pt - 1) / pt * pt);
	if (w < h->cfg.window) w = h->cfg.window;
	if (w > h->cfg.window_max) w = h->cfg.window_max;
	if (w != atomic_load(&h->window)) {
		LOG_INFO(MOD, "window %d -> %d tokens (demand %d)", atomic_load(&h->window), w, h->window_demand);
		atomic_store(&h->window, w);
		h->window_changed_us = lanes_now_us();
	}
	int64_t limit = (int64_t)h->cfg.lanes * pages_for(h, w);
	if (limit < h->pages_reserved) limit = h->pages_reserved;
	kv_set_limit(h->kv, (int32_t)limit);
}

// A finished request's size: what it asked for (prompt + max_tokens) when it set
// max_tokens, else what it used.
static void record_demand(lane_host *h, const lane_req *r) {
	if (h->cfg.window_max <= 0) return;
	const int32_t tokens = r->n_prompt + (r->explicit_max ? r->max_tokens : r->n_gen);
	h->demand[h->demand_next].tokens = tokens;
	h->demand[h->demand_next].at_us = lanes_now_us();
	h->demand_next = (h->demand_next + 1) % LANE_DEMAND_SAMPLES;
	if (h->n_demand < LANE_DEMAND_SAMPLES) h->n_demand++;
}

static int cmp_i32(const void *a, const void *b) {
	const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return (x > y) - (x < y);
}

// At a round boundary: the window follows the p95 of recent sizes plus a quarter, at least
// the floor and what admitted requests need. It grows at once and shrinks only below three
// quarters of itself and after holding a while, so it does not flap.
static void replan(lane_host *h) {
	if (h->cfg.window_max <= 0) return;
	const uint64_t now = lanes_now_us(), recent = (uint64_t)(h->cfg.window_recent_s * 1e6);
	int32_t v[LANE_DEMAND_SAMPLES], n = 0;
	for (int32_t i = 0; i < h->n_demand; i++)
		if (now - h->demand[i].at_us <= recent) v[n++] = h->demand[i].tokens;
	int32_t p95 = 0;
	if (n) {
		qsort(v, (size_t)n, sizeof *v, cmp_i32);
		p95 = v[(n * 95 + 99) / 100 - 1];
	}
	h->window_demand = p95;
	int64_t target = (int64_t)p95 + p95 / 4;
	for (int32_t i = 0; i < h->cfg.lanes; i++)
		if (h->lanes[i] && h->lanes[i]->n_prompt + h->lanes[i]->max_tokens > target)
			target = h->lanes[i]->n_prompt + h->lanes[i]->max_tokens;
	if (target > h->cfg.window_max) target = h->cfg.window_max;
	const int32_t w = atomic_load(&h->window);
	const double hold_s = h->cfg.window_recent_s / 4 < 5 ? h->cfg.window_recent_s / 4 : 5;
	if (target > w) set_window(h, (int32_t)target);
	else if (target < (int64_t)w * 3 / 4 && w > h->cfg.window && now - h->window_changed_us >= (uint64_t)(hold_s * 1e6))
		set_window(h, (int32_t)target);
	else set_window(h, w); // keeps the limit up to date with what is reserved
}

// Under h->mu: pull cancelled requests out of the queue, then admit from its head while a
// lane and the KV pages it will need are free. FIFO: a request that does not fit yet waits
// and so does everything behind it.
static void admit(lane_host *h, lane_req **cancelled, int32_t *n_cancelled) {
	lane_req **pp = &h->qhead, *prev = NULL;
	while (*pp) {
		lane_req *r = *pp;
		if (atomic_load(&r->cancel)) {
			*pp = r->next;
			if (h->qtail == r) h->qtail = prev;
			h->qlen--;
			cancelled[(*n_cancelled)++] = r;
			continue;
		}
		prev = r;
		pp = &r->next;
	}
	while (h->qhead) {
		lane_req *r = h->qhead;
		int32_t lane = -1;
		for (int32_t i = 0; i < h->cfg.lanes && lane < 0; i++)
			if (!h->lanes[i]) lane = i;
		if (lane < 0) break;
		// the request gets the window it needs (submit checked the budget allows it)
		const int32_t tokens = r->n_prompt + r->max_tokens;
		if (h->cfg.window_max > 0 && tokens > atomic_load(&h->window)) set_window(h, tokens);
		int32_t total = kv_pages_limit(h->kv);
		int32_t need = request_pages(h, r);
		if (h->pages_reserved + need > total) break;
		h->qhead = r->next;
		if (!h->qhead) h->qtail = NULL;
		h->qlen--;
		r->next = NULL;
		r->lane = lane;
		r->pages_reserved = need;
		h->pages_reserved += need;
		h->lanes[lane] = r;
	}
}

// ---- text: the streaming detokenizer and stop strings --------------------------------------

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

// ---- sampling ------------------------------------------------------------------------------

static bool is_stop_token(const lane_host *h, const lane_req *r, int32_t tok) {
	if (!r->ignore_eos && tok_is_eog(h->vocab, tok)) return true;
	for (int32_t i = 0; i < r->n_stop_ids; i++)
		if (r->stop_ids[i] == tok) return true;
	return false;
}

// Log-probabilities of the raw distribution: the chosen token's and the top n.
static float logprobs(const float *logits, int32_t n_vocab, int32_t tok, lane_top *top, int32_t n_top) {
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
	return logits[tok] - lse;
}

// The request's token at absolute position pos: penalties and biases on a copy of the
// logits, then the sampler's draw at (seed, choice, pos).
static int32_t pick(lane_host *h, const lane_req *r, const float *lg, int32_t pos) {
	int32_t nv = h->hp.n_vocab;
	float *x = h->scratch;
	memcpy(x, lg, (size_t)nv * sizeof *x);
	const lane_sampling *s = &r->s;
	sample_penalize(x, nv, &r->pen, r->prompt, r->n_prompt, r->gen, r->n_gen, h->counts);
	for (int32_t i = 0; i < s->n_bias; i++) x[s->bias[i].token] += s->bias[i].bias;
	return sampler_pick(h->sampler, &r->sp, x, (uint64_t)s->choice, pos);
}

// ---- one round ------------------------------------------------------------------------------

static int ensure_rows(lane_host *h, int32_t n) {
	if (n <= h->cap_rows) return 0;
	int32_t cap = h->cap_rows ? h->cap_rows : 64;
	while (cap < n) cap *= 2;
	model_row *rows = realloc(h->rows, (size_t)cap * sizeof *rows);
	if (rows) h->rows = rows;
	int32_t *rl = realloc(h->row_lane, (size_t)cap * sizeof *rl);
	if (rl) h->row_lane = rl;
	if (!rows || !rl) return LANES_ENOMEM;
	h->cap_rows = cap;
	return 0;
}

// Prompt rows this round may carry after n_decode decode rows, from the pricing model.
static int32_t prompt_budget(const lane_host *h, int32_t n_decode) {
	if (h->cfg.hooks.budget) {
		int32_t n = h->cfg.hooks.budget(h->cfg.hooks.arg, n_decode, h->row_us, h->fixed_us, h->cfg.round_ms);
		return n < 0 ? 0 : n > LANE_PROMPT_ROWS ? LANE_PROMPT_ROWS : n;
	}
	double left = h->cfg.round_ms * 1000.0 - h->fixed_us - n_decode * h->row_us;
	int32_t n = h->row_us > 0 ? (int32_t)(left / h->row_us) : 512;
	// a page of prompt per round at least, so busy decoding never starves a filling lane
	return n < h->cfg.page_tokens ? h->cfg.page_tokens : n > LANE_PROMPT_ROWS ? LANE_PROMPT_ROWS : n;
}

static bool fault(lane_host *h, const lane_req *r) { return h->fault && h->fault(h->fault_arg, h->round, r->serial); }

// Takes the sampled token of lane r: records it, emits its text, ends the request when a
// stop token, stop string, length or the context says so.
static void take_token(lane_host *h, lane_req *r, int32_t tok, float lp, const lane_top *top, int32_t n_top) {
	if (is_stop_token(h, r, tok)) {
		const char *t;
		size_t n = 0;
		tok_stream_flush(r->detok, &t, &n);
		if (n && pending_add(r, t, n)) { finish(h, r, LANE_EV_FAILED, 0, -1, "out of memory", NULL, 0); return; }
		finish(h, r, LANE_EV_FINISHED, LANE_FINISH_STOP, -1, NULL, r->pending, r->n_pending);
		return;
	}
	r->gen[r->n_gen++] = tok;
	sha256_update(&r->sha, &tok, 4);
	h->stats.generated_tokens++;
	r->last = tok;
	const char *t;
	size_t n = 0;
	tok_stream_push(r->detok, tok, &t, &n);
	bool length = r->n_gen >= r->max_tokens;
	if (length) {
		if (n && pending_add(r, t, n)) goto oom;
		tok_stream_flush(r->detok, &t, &n);
	}
	if (n && pending_add(r, t, n)) goto oom;
	size_t at;
	int si = r->n_stops ? find_stop(r, &at) : -1;
	if (si >= 0) {
		if (lreq_emit_token(r, tok, r->pending, at, lp, top, n_top) || fault(h, r)) goto oom;
		finish(h, r, LANE_EV_FINISHED, LANE_FINISH_STOP_SEQUENCE, si, NULL, NULL, 0);
		return;
	}
	size_t emit = length ? r->n_pending : safe_prefix(r);
	if (lreq_emit_token(r, tok, r->pending, emit, lp, top, n_top) || fault(h, r)) goto oom;
	pending_drop(r, emit);
	if (length) finish(h, r, LANE_EV_FINISHED, LANE_FINISH_LENGTH, -1, NULL, NULL, 0);
	return;
oom:
	finish(h, r, LANE_EV_FAILED, 0, -1, "out of memory", NULL, 0);
}

// Samples the request's next token from lg and takes it; returns the token.
static int32_t emit_sampled(lane_host *h, lane_req *r, const float *lg) {
	int32_t pos = r->n_prompt + r->n_gen; // absolute position of the token drawn now
	int32_t tok = pick(h, r, lg, pos);
	int32_t n_top = r->top_logprobs;
	float lp = 0;
	if (r->logprobs) lp = logprobs(lg, h->hp.n_vocab, tok, h->top, n_top);
	take_token(h, r, tok, lp, h->top, r->logprobs ? n_top : 0);
	return tok;
}

// The filling lane whose prompt piece comes next: the row policy's choice, or the earliest
// admitted. A lane already given a piece this round is not offered again.
static lane_req *next_piece(lane_host *h) {
	lane_fill f[LANE_SNAP_MAX_LANES];
	int32_t n = 0;
	lane_req *first = NULL;
	for (int32_t i = 0; i < h->cfg.lanes; i++) {
		lane_req *c = h->lanes[i];
		if (!c || c->n_filled >= c->n_prompt || kv_seq_len(h->kv, i) != c->n_filled) continue;
		f[n++] = (lane_fill){i, c->serial, c->n_filled, c->n_prompt - c->n_filled};
		if (!first || c->serial < first->serial) first = c;
	}
	if (!n || !h->cfg.hooks.next_piece) return first;
	int32_t k = h->cfg.hooks.next_piece(h->cfg.hooks.arg, f, n);
	return k >= 0 && k < n ? h->lanes[f[k].lane] : NULL;
}

// A proposer hook's drafts for r, from the last tokens of its context.
static void custom_propose(lane_host *h, lane_req *r, int32_t k) {
	int32_t L = r->n_prompt + r->n_gen, from = L > 4096 ? L - 4096 : 0;
	for (int32_t i = from; i < L; i++) h->ctxbuf[i - from] = i < r->n_prompt ? r->prompt[i] : r->gen[i - r->n_prompt];
	int32_t got = h->cfg.hooks.propose(h->cfg.hooks.arg, h->ctxbuf, L - from, r->drafts, k);
	r->n_draft = got < 0 ? 0 : got > k ? k : got;
	for (int32_t j = 0; j < r->n_draft; j++)
		if (r->drafts[j] < 0 || r->drafts[j] >= h->hp.n_vocab) r->n_draft = j; // an id outside the vocabulary ends it
	r->prop = LANE_PROP_NGRAM;
}

// Lanes that may draft this round get proposals: a strong n-gram match (2 or more tokens
// long) first, else the draft model when there is one, else the n-gram's weak match.
static void propose(lane_host *h) {
	lane_req *mr[LANE_SNAP_MAX_LANES];
	int32_t mk[LANE_SNAP_MAX_LANES], nm = 0;
	for (int32_t i = 0; i < h->cfg.lanes; i++) {
		lane_req *r = h->lanes[i];
		if (!r) continue;
		r->n_draft = 0;
		if (r->n_filled < r->n_prompt || !r->draft || h->cfg.draft == LANE_DRAFT_OFF) continue;
		int32_t k = imin(r->draft_k, r->max_tokens - r->n_gen - 1);
		if (k <= 0) continue;
		if (h->cfg.hooks.propose) {
			custom_propose(h, r, k);
			continue;
		}
		int32_t n = lane_propose_ngram(h, r, k);
		if (n < 2 && h->dkv) {
			mr[nm] = r;
			mk[nm++] = k;
		}
	}
	if (nm) lane_propose_model(h, mr, mk, nm);
}

// After verifying nd drafts of which acc matched: cut the KV the rejected drafts wrote,
// count, and adapt how many this lane proposes next.
static void verified(lane_host *h, lane_req *r, int32_t nd, int32_t acc, int32_t P) {
	h->stats.draft_tokens[r->prop] += (uint64_t)nd;
	h->stats.draft_accepted[r->prop] += (uint64_t)acc;
	r->n_drafted += (uint64_t)nd;
	r->n_accepted += (uint64_t)acc;
	if (r->lane < 0) return; // it ended inside the drafts
	kv_seq_truncate(h->kv, r->lane, P + 1 + acc);
	if (h->dkv && r->dkv_len > P + 1 + acc) {
		kv_seq_truncate(h->dkv, r->lane, P + 1 + acc);
		r->dkv_len = P + 1 + acc;
	}
	r->draft_ema = 0.8f * r->draft_ema + 0.2f * (float)acc / (float)nd;
	int32_t k = (int32_t)(1.5f + r->draft_ema * (float)h->cfg.draft_max);
	r->draft_k = k < 1 ? 1 : k > h->cfg.draft_max ? h->cfg.draft_max : k;
}

static void run_round(lane_host *h) {
	int32_t n_vocab = h->hp.n_vocab;
	int32_t n = 0, n_decode = 0;
	// newly admitted lanes start from the longest cached prefix of their prompt; the last
	// prompt token is always computed, for its logits
	for (int32_t i = 0; i < h->cfg.lanes; i++) {
		lane_req *r = h->lanes[i];
		if (!r || r->started) continue;
		r->started = true;
		r->draft_k = imin(4, h->cfg.draft_max);
		r->draft_ema = 0.5f;
		if (h->cfg.prefix_cache) {
			r->n_cached = r->n_filled = kv_prefix_attach(h->kv, i, r->prompt, r->n_prompt - 1);
			h->stats.prefix_hit_tokens += (uint64_t)r->n_cached;
		}
	}
	propose(h);
	// a decode row for every live lane first, each followed by its draft rows
	for (int32_t i = 0; i < h->cfg.lanes; i++) {
		lane_req *r = h->lanes[i];
		if (!r || r->n_filled < r->n_prompt) continue;
		if (ensure_rows(h, n + 1 + r->n_draft) || fault(h, r)) {
			finish(h, r, LANE_EV_FAILED, 0, -1, "out of memory", NULL, 0);
			continue;
		}
		int32_t pos = r->n_prompt + r->n_gen - 1;
		h->rows[n] = (model_row){r->last, pos, i, true};
		h->row_lane[n++] = i;
		for (int32_t k = 0; k < r->n_draft; k++) {
			h->rows[n] = (model_row){r->drafts[k], pos + 1 + k, i, true};
			h->row_lane[n++] = i;
		}
		n_decode += 1 + r->n_draft;
	}
	// then prompt pieces in admission order, within the budget
	int32_t budget = prompt_budget(h, n_decode);
	for (;;) {
		lane_req *r = budget > 0 ? next_piece(h) : NULL;
		if (!r) break;
		int32_t take = imin(r->n_prompt - r->n_filled, budget);
		if (h->cfg.piece > 0) take = imin(take, h->cfg.piece);
		if (ensure_rows(h, n + take) || fault(h, r)) {
			finish(h, r, LANE_EV_FAILED, 0, -1, "out of memory", NULL, 0);
			continue;
		}
		for (int32_t k = 0; k < take; k++) {
			int32_t pos = r->n_filled + k;
			h->rows[n] = (model_row){r->prompt[pos], pos, r->lane, pos == r->n_prompt - 1};
			h->row_lane[n++] = r->lane;
		}
		budget -= take;
		// mark the piece as taken so the loop moves on; the KV length confirms it after forward
		r->n_filled += take;
	}
	if (n == 0) return;
	int32_t n_logits = 0;
	for (int32_t i = 0; i < n; i++) n_logits += h->rows[i].logits;
	char err[256];
	uint64_t t0 = lanes_now_us();
	int rc = model_forward_ws(h->m, h->kv, h->pool, h->ws, h->rows, n, h->logits, err, sizeof err);
	uint64_t dt = lanes_now_us() - t0;
	h->stats.forward_us += dt;
	observe(&h->stats.forward_seconds, dt / 1e6);
	h->stats.rounds++;
	if (rc) {
		// the forward pass changed nothing: every lane in it ends failed
		LOG_ERROR(MOD, "forward pass failed: %s", err);
		for (int32_t i = 0; i < n; i++) {
			lane_req *r = h->lanes[h->row_lane[i]];
			if (r) finish(h, r, LANE_EV_FAILED, 0, -1, err, NULL, 0);
		}
		return;
	}
	int32_t li = 0;
	for (int32_t i = 0; i < n; i++) {
		if (!h->rows[i].logits) {
			h->stats.prompt_tokens++;
			continue;
		}
		const float *lg = h->logits + (size_t)li++ * n_vocab;
		lane_req *r = h->lanes[h->row_lane[i]];
		if (!r) continue;
		if (r->n_gen == 0 && h->rows[i].pos == r->n_prompt - 1) {
			h->stats.prompt_tokens++;
			if (h->cfg.prefix_cache) kv_prefix_publish(h->kv, r->lane, r->prompt, r->n_prompt);
		}
		if (h->rows[i].pos == r->n_prompt - 1) {
			emit_sampled(h, r, lg);
			continue;
		}
		// a decode row and its drafts: the target's token at each position, in order, until
		// one differs from the draft; every token taken is the target's own
		int32_t nd = r->n_draft, P = h->rows[i].pos, acc = 0;
		lreq_ref(r); // ending it inside the drafts must not free it under us
		for (int32_t j = 0; j <= nd; j++) {
			int32_t tok = emit_sampled(h, r, h->logits + (size_t)(li - 1 + j) * n_vocab);
			if (r->lane < 0 || j == nd || tok != r->drafts[j]) break;
			acc++;
		}
		li += nd;
		i += nd;
		if (nd) verified(h, r, nd, acc, P);
		lreq_unref(r);
	}
	(void)n_logits;
}

// ---- the engine thread ------------------------------------------------------------------------

static void publish(lane_host *h) {
	lane_snapshot *s = &h->stats;
	s->sequence++;
	s->clock_us = lanes_now_us();
	s->n_lanes = imin(h->cfg.lanes, LANE_SNAP_MAX_LANES);
	for (int32_t i = 0; i < s->n_lanes; i++) {
		lane_req *r = h->lanes[i];
		lane_snap_lane *l = &s->lanes[i];
		l->id = i;
		l->phase = !r ? LANE_IDLE : r->n_filled < r->n_prompt || kv_seq_len(h->kv, i) < r->n_prompt ? LANE_FILLING : LANE_LIVE;
		l->prompt_tokens = r ? r->n_prompt : 0;
		l->filled = r ? kv_seq_len(h->kv, i) : 0;
		l->generated_tokens = r ? r->n_gen : 0;
		l->draft_k = r ? r->draft_k : 0;
		l->draft_acceptance = r && r->n_drafted ? (float)r->n_accepted / (float)r->n_drafted : 0;
	}
	int32_t total = kv_pages_limit(h->kv);
	s->kv_pages_free = kv_pages_free(h->kv);
	s->kv_pages_used = total - s->kv_pages_free + kv_pages_over_limit(h->kv);
	if (h->cfg.window_max > 0) {
		s->window = atomic_load(&h->window);
		s->window_demand = h->window_demand;
		s->window_floor = h->cfg.window;
		s->window_max = h->cfg.window_max;
	}
	s->kv_bytes = (uint64_t)total * kv_page_bytes(h->kv);
	s->kv_reserved_bytes = kv_reserved_bytes(h->kv);
	s->kv_used_bytes = (uint64_t)s->kv_pages_used * kv_page_bytes(h->kv);
	s->compute_bytes = h->compute_bytes;
	s->kv_pages_cached = kv_pages_cached(h->kv);
	pthread_mutex_lock(&h->mu);
	s->queue_depth = h->qlen;
	s->halting = h->halting;
	s->draining = h->draining;
	pthread_mutex_unlock(&h->mu);
	pthread_mutex_lock(&h->snap_mu);
	h->snap = *s;
	pthread_mutex_unlock(&h->snap_mu);
}

void lane_host_snapshot(lane_host *h, lane_snapshot *out) {
	pthread_mutex_lock(&h->snap_mu);
	*out = h->snap;
	pthread_mutex_unlock(&h->snap_mu);
	out->rejected = atomic_load(&h->rejected);
}

static bool any_active(const lane_host *h) {
	for (int32_t i = 0; i < h->cfg.lanes; i++)
		if (h->lanes[i]) return true;
	return false;
}

// Halt: take the queue and every lane, end each failed with the reason. No allocation.
static void halt_all(lane_host *h, lane_req *queued) {
	while (queued) {
		lane_req *next = queued->next;
		queued->next = NULL;
		finish(h, queued, LANE_EV_FAILED, 0, -1, h->halt_reason, NULL, 0);
		queued = next;
	}
	for (int32_t i = 0; i < h->cfg.lanes; i++)
		if (h->lanes[i]) finish(h, h->lanes[i], LANE_EV_FAILED, 0, -1, h->halt_reason, NULL, 0);
}

static void *engine(void *arg) {
	lane_host *h = arg;
	lane_req **cancelled = calloc((size_t)h->cfg.queue + 1, sizeof *cancelled);
	for (;;) {
		int32_t n_cancelled = 0;
		replan(h);
		pthread_mutex_lock(&h->mu);
		while (!h->quit && !h->halting && !h->qhead && !any_active(h)) {
			if (h->cfg.window_max <= 0 || atomic_load(&h->window) <= h->cfg.window) {
				pthread_cond_wait(&h->work, &h->mu);
				continue;
			}
			// idle above the floor: wake now and then so the window can shrink back
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 250 * 1000000L;
			if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
			if (pthread_cond_timedwait(&h->work, &h->mu, &ts) == 0) continue;
			pthread_mutex_unlock(&h->mu);
			replan(h);
			publish(h);
			pthread_mutex_lock(&h->mu);
		}
		if (h->halting) {
			lane_req *q = h->qhead;
			h->qhead = h->qtail = NULL;
			h->qlen = 0;
			pthread_mutex_unlock(&h->mu);
			halt_all(h, q);
			h->stats.halted = true;
			publish(h);
			pthread_mutex_lock(&h->mu);
			bool quit = h->quit;
			// stay to refuse nothing more: submits fail while halting
			while (!h->quit) pthread_cond_wait(&h->work, &h->mu);
			pthread_mutex_unlock(&h->mu);
			(void)quit;
			break;
		}
		if (h->quit) {
			pthread_mutex_unlock(&h->mu);
			break;
		}
		if (cancelled) admit(h, cancelled, &n_cancelled);
		pthread_mutex_unlock(&h->mu);
		for (int32_t i = 0; i < n_cancelled; i++) finish(h, cancelled[i], LANE_EV_CANCELLED, 0, -1, NULL, NULL, 0);
		for (int32_t i = 0; i < h->cfg.lanes; i++)
			if (h->lanes[i] && atomic_load(&h->lanes[i]->cancel))
				finish(h, h->lanes[i], LANE_EV_CANCELLED, 0, -1, NULL, NULL, 0);
		h->round++;
		uint64_t t0 = lanes_now_us();
		run_round(h);
		observe(&h->stats.round_seconds, (lanes_now_us() - t0) / 1e6);
		publish(h);
	}
	free(cancelled);
	return NULL;
}

// ---- pricing ----------------------------------------------------------------------------------

// Times forward passes of 1 and of 16 rows on lane 0 to price a row and a round (16: the
// batch where the kernels have turned compute-bound, as busy rounds are).
static void calibrate(lane_host *h) {
	int32_t big = imin(16, h->max_ctx);
	model_row rows[16];
	double t[2] = {0, 0};
	int32_t sizes[2] = {1, big};
	char err[128];
	for (int rep = 0; rep < 2; rep++)
		for (int k = 0; k < 2; k++) {
			for (int32_t i = 0; i < sizes[k]; i++) rows[i] = (model_row){tok_bos(h->vocab) >= 0 ? tok_bos(h->vocab) : 0, i, 0, i == sizes[k] - 1};
			uint64_t t0 = lanes_now_us();
			int rc = model_forward_ws(h->m, h->kv, h->pool, h->ws, rows, sizes[k], h->logits, err, sizeof err);
			double dt = (double)(lanes_now_us() - t0);
			kv_seq_clear(h->kv, 0);
			if (rc) return;
			if (rep == 1) t[k] = dt; // the first pass warms caches
		}
	h->row_us = big > 1 ? (t[1] - t[0]) / (big - 1) : t[0];
	if (h->row_us < 1) h->row_us = 1;
	h->fixed_us = t[0] - h->row_us > 0 ? t[0] - h->row_us : 0;
	LOG_INFO(MOD, "pricing: %.0f us per row, %.0f us per round; round target %.0f ms gives %d prompt rows",
		 h->row_us, h->fixed_us, h->cfg.round_ms, prompt_budget(h, 0));
}

// ---- host lifecycle -------------------------------------------------------------------------------

int32_t lane_host_max_context(const lane_host *h) { return h->max_ctx; }


int lane_host_new(lane_host **out, const model *m, const tok_vocab *vocab, const lane_config *cfgin, char *err,
		  size_t errlen) {
	*out = NULL;
	lane_config cfg = *cfgin;
	if (cfg.lanes < 1 || cfg.lanes > LANE_SNAP_MAX_LANES)
		return lanes_seterr(err, errlen, LANES_EINVAL, "--lanes must be 1..%d", LANE_SNAP_MAX_LANES);
	if (cfg.queue < 0 || cfg.queue > 1000000) return lanes_seterr(err, errlen, LANES_EINVAL, "--queue must be 0..1000000");
	if (cfg.ctx < 16 || cfg.ctx > (1 << 24)) return lanes_seterr(err, errlen, LANES_EINVAL, "--ctx must be 16..16777216");
	if (cfg.window_max < 0 || cfg.window_max > (1 << 24) || (cfg.window_max > 0 && (cfg.window < 1 || cfg.window > cfg.window_max)))
		return lanes_seterr(err, errlen, LANES_EINVAL, "the window must be 1..%d tokens (the largest the budget allows)",
				    cfg.window_max);
	if (cfg.window_max > 0 && !(cfg.window_recent_s > 0)) cfg.window_recent_s = 300;
	if (cfg.piece < 0) return lanes_seterr(err, errlen, LANES_EINVAL, "--piece must be >= 0");
	if (!(cfg.round_ms > 0 && cfg.round_ms < 1e6)) return lanes_seterr(err, errlen, LANES_EINVAL, "--round-ms must be > 0");
	if (cfg.page_tokens < 1 || cfg.page_tokens > 4096) cfg.page_tokens = 16;
	if (cfg.threads <= 0) cfg.threads = lanes_cpu_count();
	lane_host *h = calloc(1, sizeof *h);
	if (!h) return lanes_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	h->cfg = cfg;
	h->m = m;
	h->vocab = vocab;
	h->hp = *model_hparams_of(m);
	atomic_init(&h->seed_state, cfg.seed);
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->work, NULL);
	pthread_mutex_init(&h->snap_mu, NULL);
	int32_t n_ctx = h->hp.n_ctx_train > 0 ? h->hp.n_ctx_train : cfg.ctx;
	kv_config kc;
	if (cfg.window_max > 0) {
		// elastic: room for every lane at the largest window, used up to the window's share
		h->max_ctx = cfg.window_max;
		kc = model_kv_config(m, cfg.kv_type, cfg.lanes, cfg.window_max, cfg.page_tokens);
		atomic_init(&h->window, cfg.window);
	} else {
		h->max_ctx = imin(n_ctx, cfg.ctx);
		kc = model_kv_config(m, cfg.kv_type, cfg.lanes, h->max_ctx, cfg.page_tokens);
		kc.n_pages = pages_for(h, cfg.ctx);
		if (kc.n_pages < pages_for(h, h->max_ctx)) kc.n_pages = pages_for(h, h->max_ctx);
	}
	int rc = kv_new(&h->kv, &kc, err, errlen);
	if (!rc) rc = lanes_pool_new(&h->pool, cfg.threads);
	h->lanes = calloc((size_t)cfg.lanes, sizeof *h->lanes);
	if (cfg.draft_max < 0 || cfg.draft_max > LANE_MAX_DRAFT) cfg.draft_max = 8;
	h->cfg = cfg;
	const size_t V = (size_t)h->hp.n_vocab, max_rows = (size_t)lane_max_rows(&cfg);
	if (!rc) rc = model_ws_new(&h->ws, m, (int64_t)max_rows, cfg.threads, model_attn_fused() ? 0 : h->max_ctx, err, errlen);
	h->logits = malloc((size_t)max_logit_rows(&cfg) * V * sizeof(float));
	h->rows = malloc(max_rows * sizeof *h->rows);
	h->row_lane = malloc(max_rows * sizeof *h->row_lane);
	h->cap_rows = h->rows && h->row_lane ? (int32_t)max_rows : 0;
	h->scratch = malloc((size_t)h->hp.n_vocab * sizeof(float));
	h->top = calloc(LANE_MAX_TOP_LOGPROBS, sizeof *h->top);
	h->ctxbuf = malloc(4096 * sizeof *h->ctxbuf);
	if (!rc && cfg.draft_model) {
		rc = lane_draft_check(m, cfg.draft_model, err, errlen);
		kv_config dc = model_kv_config(cfg.draft_model, cfg.kv_type, cfg.lanes, h->max_ctx, cfg.page_tokens);
		dc.n_pages = kc.n_pages + cfg.lanes * (pages_for(h, cfg.draft_max) + 1);
		if (!rc) rc = kv_new(&h->dkv, &dc, err, errlen);
		const int32_t drows = cfg.lanes > LANE_DRAFT_CHUNK ? cfg.lanes : LANE_DRAFT_CHUNK;
		if (!rc)
			rc = model_ws_new(&h->dws, cfg.draft_model, drows, cfg.threads,
					  model_attn_fused() ? 0 : h->max_ctx + LANE_MAX_DRAFT + 1, err, errlen);
		h->dlogits = malloc((size_t)cfg.lanes * (size_t)h->hp.n_vocab * sizeof(float));
		if (!rc && !h->dlogits) rc = LANES_ENOMEM;
	}
	h->counts = calloc((size_t)h->hp.n_vocab, sizeof *h->counts);
	// the host's own accounting of its compute memory, from the sizes it allocated
	h->compute_bytes = (h->ws ? model_ws_size(h->ws) : 0) + (uint64_t)max_logit_rows(&cfg) * V * sizeof(float) +
			   V * (sizeof(float) + sizeof(int32_t)) + max_rows * (sizeof(model_row) + sizeof(int32_t)) +
			   (cfg.draft_model ? (uint64_t)cfg.lanes * V * sizeof(float) : 0) + (h->dws ? model_ws_size(h->dws) : 0);
	if (!rc) rc = sampler_new(&h->sampler, h->hp.n_vocab);
	if (!rc && (!h->lanes || !h->logits || !h->scratch || !h->top || !h->counts || !h->ctxbuf || !h->cap_rows))
		rc = LANES_ENOMEM;
	if (!rc && cfg.window_max > 0) set_window(h, cfg.window);
	if (rc) {
		if (rc == LANES_ENOMEM) lanes_seterr(err, errlen, rc, "out of memory");
		lane_host_free(h);
		return rc;
	}
	calibrate(h);
	publish(h);
	if (pthread_create(&h->thread, NULL, engine, h)) {
		lane_host_free(h);
		return lanes_seterr(err, errlen, LANES_ENOMEM, "cannot start the engine thread");
	}
	h->thread_started = true;
	LOG_INFO(MOD, "%d lanes, %d KV tokens (%d pages of %d, %s, %.1f MiB), up to %d tokens per request, %d threads",
		 cfg.lanes, kc.n_pages * cfg.page_tokens, kc.n_pages, cfg.page_tokens, kv_type_name(cfg.kv_type),
		 kv_reserved_bytes(h->kv) / 1048576.0, h->max_ctx, cfg.threads);
	if (cfg.window_max > 0)
		LOG_INFO(MOD, "elastic window: %d tokens now, %d..%d, following requests of the last %.0f s", cfg.window,
			 cfg.window, cfg.window_max, cfg.window_recent_s);
	LOG_INFO(MOD, "compute: %.1f MiB (%d rows per pass, %s attention)", h->compute_bytes / 1048576.0,
		 (int)max_rows, h->ws && model_attn_fused() ? "fused" : "unfused");
	*out = h;
	return 0;
}

void lane_host_halt(lane_host *h, const char *reason) {
	pthread_mutex_lock(&h->mu);
	if (!h->halting) {
		h->halting = true;
		snprintf(h->halt_reason, sizeof h->halt_reason, "%s", reason ? reason : "halted");
	}
	pthread_cond_signal(&h->work);
	pthread_mutex_unlock(&h->mu);
}

void lane_host_drain(lane_host *h) {
	pthread_mutex_lock(&h->mu);
	h->draining = true;
	pthread_mutex_unlock(&h->mu);
}

int32_t lane_host_open(lane_host *h) { return atomic_load(&h->open); }

void lane_host_set_fault(lane_host *h, bool (*fn)(void *, uint64_t, uint64_t), void *arg) {
	pthread_mutex_lock(&h->mu);
	h->fault = fn;
	h->fault_arg = arg;
	pthread_mutex_unlock(&h->mu);
}

void lane_host_free(lane_host *h) {
	if (!h) return;
	if (h->thread_started) {
		lane_host_halt(h, "server shutting down");
		pthread_mutex_lock(&h->mu);
		h->quit = true;
		pthread_cond_signal(&h->work);
		pthread_mutex_unlock(&h->mu);
		pthread_join(h->thread, NULL);
	}
	kv_free(h->kv);
	kv_free(h->dkv);
	model_ws_free(h->dws);
	free(h->dlogits);
	free(h->drows);
	free(h->ctxbuf);
	lanes_pool_free(h->pool);
	free(h->lanes);
	free(h->logits);
	free(h->scratch);
	free(h->top);
	free(h->counts);
	sampler_free(h->sampler);
	free(h->rows);
	free(h->row_lane);
	model_ws_free(h->ws);
	pthread_mutex_destroy(&h->mu);
	pthread_cond_destroy(&h->work);
	pthread_mutex_destroy(&h->snap_mu);
	free(h);
}

// ---- submit ---------------------------------------------------------------------------------------

int lane_submit(lane_host *h, const lane_request *q, lane_req **out, char *err, size_t errlen) {
	*out = NULL;
	int rc = lane_check_params(q, q->api, h->hp.n_vocab, err, errlen, NULL);
	if (!rc) rc = lane_check_prompt(h, q, q->api, err, errlen, NULL);
	if (rc) {
		atomic_fetch_add(&h->rejected, 1);
		return rc;
	}
	lane_req *r = calloc(1, sizeof *r);
	if (!r) return lanes_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	atomic_init(&r->refs, 2);
	r->host = h;
	r->lane = -1;
	r->n_prompt = q->n_prompt;
	r->s = q->sampling;
	r->explicit_max = q->max_tokens > 0;
	if (q->max_tokens > 0) r->max_tokens = q->max_tokens;
	else if (h->cfg.window_max > 0) {
		// without max_tokens a request may run to the current window (or one window past its prompt)
		const int32_t w = atomic_load(&h->window);
		r->max_tokens = w - q->n_prompt >= 1 ? w - q->n_prompt : imin(w, h->max_ctx - q->n_prompt);
	} else r->max_tokens = h->max_ctx - q->n_prompt;
	r->ignore_eos = q->ignore_eos;
	r->logprobs = q->logprobs || q->top_logprobs > 0;
	r->top_logprobs = q->top_logprobs;
	r->draft = q->draft;
	r->prompt = malloc((size_t)q->n_prompt * sizeof *r->prompt);
	r->gen = malloc((size_t)r->max_tokens * sizeof *r->gen);
	r->detok = tok_stream_new(h->vocab, 0);
	bool ok = r->prompt && r->gen && r->detok;
	if (ok && q->sampling.n_bias) {
		r->bias = malloc((size_t)q->sampling.n_bias * sizeof *r->bias);
		if ((ok = r->bias != NULL)) memcpy(r->bias, q->sampling.bias, (size_t)q->sampling.n_bias * sizeof *r->bias);
	}
	r->s.bias = r->bias;
	if (ok && q->n_stop_ids) {
		r->stop_ids = malloc((size_t)q->n_stop_ids * sizeof *r->stop_ids);
		if ((ok = r->stop_ids != NULL)) memcpy(r->stop_ids, q->stop_ids, (size_t)q->n_stop_ids * sizeof *r->stop_ids);
		r->n_stop_ids = q->n_stop_ids;
	}
	for (int32_t i = 0; ok && i < q->n_stop_strs; i++) {
		ok = (r->stops[i] = strdup(q->stop_strs[i])) != NULL;
		r->stop_len[i] = ok ? strlen(r->stops[i]) : 0;
		r->n_stops = i + 1;
	}
	if (!ok) {
		lreq_unref(r);
		lreq_unref(r);
		return lanes_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	}
	memcpy(r->prompt, q->prompt, (size_t)q->n_prompt * sizeof *r->prompt);
	sha256_init(&r->sha);
	pthread_mutex_lock(&h->mu);
	if (h->halting || h->draining || h->quit) {
		pthread_mutex_unlock(&h->mu);
		atomic_fetch_add(&h->rejected, 1);
		lreq_unref(r);
		lreq_unref(r);
		return lanes_seterr(err, errlen, LANES_ECANCELLED, h->halting ? "%s" : "the server is draining", h->halt_reason);
	}
	if (atomic_load(&h->open) >= h->cfg.queue + h->cfg.lanes) {
		pthread_mutex_unlock(&h->mu);
		atomic_fetch_add(&h->rejected, 1);
		lreq_unref(r);
		lreq_unref(r);
		return lanes_seterr(err, errlen, LANES_EBUSY, "the queue is full (%d waiting)", h->cfg.queue);
	}
	if (!r->s.has_seed) r->s.seed = lane_draw_seed(h);
	const lane_sampling *sp = &r->s;
	r->sp = (sample_params){sp->temperature, sp->top_k, sp->top_p, sp->min_p, sp->seed};
	r->pen = (sample_penalties){sp->repeat_penalty, sp->repeat_last_n, sp->presence_penalty, sp->frequency_penalty};
	r->serial = ++h->serial;
	if (h->qtail) h->qtail->next = r;
	else h->qhead = r;
	h->qtail = r;
	h->qlen++;
	atomic_fetch_add(&h->open, 1);
	pthread_cond_signal(&h->work);
	pthread_mutex_unlock(&h->mu);
	*out = r;
	return 0;
}
