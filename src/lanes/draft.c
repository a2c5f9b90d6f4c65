// lanes: drafting for speculative decoding — proposers (prompt lookup: the
// continuation of the latest earlier occurrence of the context's last n-gram; a small draft
// model decoding greedily over its own KV; the model's MTP head, in mtp.c; a hook), the per-lane proposal size adapted to
// acceptance and priced against the round's cost (a draft row is only worth its time when
// it is likely enough to be accepted), verification's bookkeeping, and the draft model's
// memory. Proposals never change a token: the target verifies every one.
#include "lanes/lanes_int.h"

#include <stdlib.h>
#include <string.h>

#define NGRAM_MAX 3
#define NGRAM_WINDOW 4096   // how far back the search looks
#define MTP_UNTRIED 0.5   // a head's acceptance at a first position no request has tried: a trial where rows are cheap, none where dear
#define DRAFT_REGAIN 0.01f  // per round a lane does not draft, its acceptance estimate regains this share of the way to 1

// Writes r->drafts / r->n_draft (0 when it has nothing); returns the length of the n-gram
// it matched (0: none).
static int32_t propose_ngram(lane_host *h, lane_req *r, int32_t k) {
	r->n_draft = 0;
	int32_t L = r->n_prompt + r->n_gen;
	int32_t from = L > NGRAM_WINDOW ? L - NGRAM_WINDOW : 0;
	int32_t *c = h->ctxbuf;
	for (int32_t i = from; i < L; i++) c[i - from] = lane_ctx_at(r, i);
	int32_t n_ctx = L - from;
	for (int32_t n = NGRAM_MAX; n >= 1; n--) {
		if (n_ctx <= n) continue;
		const int32_t *key = c + n_ctx - n;
		for (int32_t j = n_ctx - n - 1; j >= 0; j--) {
			if (memcmp(c + j, key, (size_t)n * sizeof *key)) continue;
			int32_t got = 0;
			for (int32_t t = j + n; t < n_ctx && got < k; t++) r->drafts[got++] = c[t];
			if (got) {
				r->n_draft = got;
				r->prop = LANE_PROP_NGRAM;
				return n;
			}
		}
	}
	return 0;
}

static int ensure_drows(lane_host *h, int32_t n) {
	if (n <= h->cap_drows) return 0;
	int32_t cap = h->cap_drows ? h->cap_drows : 64;
	while (cap < n) cap *= 2;
	model_row *rows = realloc(h->drows, (size_t)cap * sizeof *rows);
	if (!rows) return LANES_ENOMEM;
	h->drows = rows;
	h->cap_drows = cap;
	return 0;
}

// Feeds the draft model what lane r's context has beyond dkv_len, ending with the
// logits of its last token; returns the greedy draft, or -1 when the pass failed.
static int32_t catch_up(lane_host *h, lane_req *r) {
	const model *dm = h->cfg.draft_model;
	int32_t last = r->n_prompt + r->n_gen - 1; // position of r->last
	char err[256];
	if (ensure_drows(h, LANE_DRAFT_CHUNK)) return -1;
	while (r->dkv_len <= last) {
		int32_t n = 0;
		for (int32_t p = r->dkv_len; p <= last && n < LANE_DRAFT_CHUNK; p++, n++)
			h->drows[n] = (model_row){lane_ctx_at(r, p), p, r->lane, p == last, NULL};
		if (model_forward_ws(dm, h->dkv, h->pool, h->dws, h->drows, n, h->dlogits, err, sizeof err)) {
			LOG_WARN("lanes", "draft model: %s", err);
			return -1;
		}
		r->dkv_len += n;
	}
	return sample_argmax(h->dlogits, model_hparams_of(dm)->n_vocab);
}

// Drafts for the n lanes in rs with the draft model, up to ks[i] tokens each, greedily.
static void propose_model(lane_host *h, lane_req **rs, const int32_t *ks, int32_t n) {
	const model *dm = h->cfg.draft_model;
	int32_t nv = model_hparams_of(dm)->n_vocab;
	char err[256];
	int32_t kmax = 0;
	for (int32_t i = 0; i < n; i++) {
		lane_req *r = rs[i];
		r->n_draft = 0;
		r->prop = LANE_PROP_MODEL;
		int32_t d = catch_up(h, r);
		if (d < 0) continue;
		r->drafts[r->n_draft++] = d;
		if (ks[i] > kmax) kmax = ks[i];
	}
	// then one row per lane per step, all lanes in one pass
	if (ensure_drows(h, n)) return;
	for (int32_t step = 1; step < kmax; step++) {
		int32_t m = 0;
		for (int32_t i = 0; i < n; i++) {
			lane_req *r = rs[i];
			if (r->n_draft != step || step >= ks[i]) continue;
			int32_t pos = r->n_prompt + r->n_gen - 1 + step;
			h->drows[m++] = (model_row){r->drafts[step - 1], pos, r->lane, true, NULL};
		}
		if (!m) break;
		if (model_forward_ws(dm, h->dkv, h->pool, h->dws, h->drows, m, h->dlogits, err, sizeof err)) {
			LOG_WARN("lanes", "draft model: %s", err);
			break;
		}
		int32_t li = 0;
		for (int32_t i = 0; i < n; i++) {
			lane_req *r = rs[i];
			if (r->n_draft != step || step >= ks[i]) continue;
			r->dkv_len++;
			r->drafts[r->n_draft++] = sample_argmax(h->dlogits + (size_t)li++ * nv, nv);
		}
	}
}

// Checks that the draft model's vocabulary equals the target's.
static int draft_check(const model *target, const model *draft, char *err, size_t errlen) {
	const gguf *a = model_gguf(target), *b = model_gguf(draft);
	const gguf_value *ta = gguf_get_arr(a, "tokenizer.ggml.tokens"), *tb = gguf_get_arr(b, "tokenizer.ggml.tokens");
	int32_t na = model_hparams_of(target)->n_vocab, nb = model_hparams_of(draft)->n_vocab;
	// its rejected proposals would be cut from a recurrent state, which cannot be cut back
	if (model_state_floats(model_hparams_of(draft)))
		return base_seterr(err, errlen, LANES_EUNSUPPORTED, "a draft model with recurrent layers (%s) is not supported",
				   model_hparams_of(draft)->arch);
	if (na != nb)
		return base_seterr(err, errlen, LANES_EINVAL, "the draft model's vocabulary has %d tokens, the model's %d", nb, na);
	if (!ta || !tb || ta->arr.n != tb->arr.n || ta->arr.type != GGUF_STRING || tb->arr.type != GGUF_STRING)
		return base_seterr(err, errlen, LANES_EINVAL, "the draft model's vocabulary differs from the model's");
	for (uint64_t i = 0; i < ta->arr.n; i++) {
		gguf_str x = gguf_arr_str(ta, i), y = gguf_arr_str(tb, i);
		if (x.len != y.len || memcmp(x.ptr, y.ptr, x.len))
			return base_seterr(err, errlen, LANES_EINVAL,
					    "the draft model's vocabulary differs from the model's at token %llu ('%.*s' vs '%.*s')",
					    (unsigned long long)i, (int)(y.len > 40 ? 40 : y.len), y.ptr, (int)(x.len > 40 ? 40 : x.len), x.ptr);
	}
	return 0;
}

// A proposer hook's drafts for r, from the last tokens of its context.
static void custom_propose(lane_host *h, lane_req *r, int32_t k) {
	int32_t L = r->n_prompt + r->n_gen, from = L > 4096 ? L - 4096 : 0;
	for (int32_t i = from; i < L; i++) h->ctxbuf[i - from] = lane_ctx_at(r, i);
	int32_t got = h->cfg.hooks.propose(h->cfg.hooks.arg, h->ctxbuf, L - from, r->drafts, k);
	r->n_draft = got < 0 ? 0 : got > k ? k : got;
	for (int32_t j = 0; j < r->n_draft; j++)
		if (r->drafts[j] < 0 || r->drafts[j] >= h->hp.n_vocab) r->n_draft = j; // an id outside the vocabulary ends it
	r->prop = LANE_PROP_NGRAM;
}

// The number of drafts (up to kmax) that most raises the lanes' expected tokens per unit of
// round time, from the pricing: each draft row costs a row and a draw, the j-th is accepted
// with probability a^j, and the round's fixed cost is shared by its n_live lanes. 0 when a
// draft row costs more than it is expected to save (a small model's rows are dear).
static int32_t drafts_worth(const lane_host *h, float a, int32_t kmax, int32_t n_live) {
	const double F = h->fixed_us / (n_live > 1 ? n_live : 1), R = h->row_us + h->draw_us;
	double best = 1.0 / (F + R), e = 1.0, q = 1.0;
	int32_t k_best = 0;
	for (int32_t k = 1; k <= kmax; k++) {
		q *= a;
		e += q;
		const double v = e / (F + (1 + k) * R);
		if (v > best) best = v, k_best = k;
	}
	return k_best;
}

// The MTP drafts (up to kmax) that most raise a lane's expected tokens per unit of round time:
// the first comes with the head's feed, each further one costs a chained pass of the head
// (shared by the lanes drafting), and draft j is accepted (with those before it) at the rate
// the request measured at position j once it has tried it often enough, else the rate every
// request measured there since the head was last set, else (untried) MTP_UNTRIED for the first
// and the one before times the first's for the rest.
static int32_t mtp_worth(const lane_host *h, const lane_req *r, int32_t kmax, int32_t n_live) {
	// a chained pass not yet timed is priced as a row
	const double n = n_live > 1 ? n_live : 1, F = h->fixed_us / n, R = h->row_us + h->draw_us, H = (h->mtp_us > 0 ? h->mtp_us : R) / n;
	// the rates every request measured since the head was last set
	uint64_t hd[LANE_MAX_DRAFT], ha[LANE_MAX_DRAFT];
	for (int32_t j = 0; j < kmax; j++)
		hd[j] = h->stats.draft_at[LANE_PROP_MTP][j] - h->head_at[j], ha[j] = h->stats.draft_accepted_at[LANE_PROP_MTP][j] - h->head_acc[j];
	double best = 1.0 / (F + R), e = 1.0, p = 1.0, p0 = MTP_UNTRIED;
	int32_t k_best = 0;
	for (int32_t k = 1; k <= kmax; k++) {
		const int32_t j = k - 1;
		p = r->drafted_at[j] >= 16 ? (double)r->accepted_at[j] / (double)r->drafted_at[j]
		    : hd[j] >= 16	  ? (double)ha[j] / (double)hd[j]
		    : j == 0		  ? MTP_UNTRIED
					  : p * p0;
		if (j == 0) p0 = p;
		e += p;
		const double v = e / (F + (1 + k) * R + (k - 1) * H);
		if (v > best) best = v, k_best = k;
	}
	return k_best;
}

// Lanes that may draft this round get proposals: a strong n-gram match (2 or more tokens
// long) first, else the draft model or the MTP head when there is one, else the n-gram's weak
// match.
void lane_propose(lane_host *h) {
	lane_req *mr[LANE_SNAP_MAX_LANES];
	int32_t mk[LANE_SNAP_MAX_LANES], nm = 0, n_live = 0;
	for (int32_t i = 0; i < h->cfg.lanes; i++) n_live += h->lanes[i] && h->lanes[i]->n_filled >= h->lanes[i]->n_prompt;
	for (int32_t i = 0; i < h->cfg.lanes; i++) {
		lane_req *r = h->lanes[i];
		if (!r) continue;
		r->n_draft = 0;
		if (r->n_filled < r->n_prompt || !r->draft || h->cfg.draft == LANE_DRAFT_OFF) continue;
		const int32_t room = r->max_tokens - r->n_gen - 1;
		int32_t k = imin(r->draft_k, room);
		const int32_t km = r->mtp && k > 0 && !h->cfg.hooks.propose ? mtp_worth(h, r, imin(h->cfg.draft_max, room), n_live) : 0;
		r->mtp_idle = km > 0 ? 0 : r->mtp_idle + 1;
		if (k > 0 && !h->cfg.hooks.propose) k = drafts_worth(h, r->draft_ema, k, n_live);
		if (k <= 0 && km <= 0) {
			// not drafting tells nothing of acceptance: the estimate creeps back up, so the
			// lane tries again now and then (text may have turned repetitive)
			r->draft_ema += (1.0f - r->draft_ema) * DRAFT_REGAIN;
			continue;
		}
		if (h->cfg.hooks.propose) {
			custom_propose(h, r, k);
			continue;
		}
		int32_t n = k > 0 ? propose_ngram(h, r, k) : 0;
		if (n < 2 && ((h->dkv && h->cfg.draft != LANE_DRAFT_NGRAM) || km > 0)) {
			mr[nm] = r;
			mk[nm++] = r->mtp ? km : k;
		}
	}
	if (nm && h->mkv) lane_mtp_propose(h, mr, mk, nm);
	else if (nm) propose_model(h, mr, mk, nm);
}

void lane_draft_start(lane_host *h, lane_req *r) {
	r->draft_k = imin(4, h->cfg.draft_max);
	// optimistic: a few rows tell a repetitive text from another
	r->draft_ema = 1.0f;
	r->mtp = lane_mtp_has_head(h) && r->draft && r->embed == LANE_EMBED_OFF;
	r->mtp_at = -1;
	r->mtp_idle = 0;
	memset(r->drafted_at, 0, sizeof r->drafted_at);
	memset(r->accepted_at, 0, sizeof r->accepted_at);
}

// Cuts the KV the rejected drafts wrote, counts, and adapts how many this lane proposes next.
void lane_draft_verified(lane_host *h, lane_req *r, int32_t nd, int32_t acc, int32_t P) {
	h->stats.draft_tokens[r->prop] += (uint64_t)nd;
	h->stats.draft_accepted[r->prop] += (uint64_t)acc;
	r->n_drafted += (uint64_t)nd;
	r->n_accepted += (uint64_t)acc;
	for (int32_t j = 0; j < nd; j++) {
		r->drafted_at[j]++, r->accepted_at[j] += j < acc;
		h->stats.draft_at[r->prop][j]++, h->stats.draft_accepted_at[r->prop][j] += j < acc;
	}
	if (r->lane < 0) return; // it ended inside the drafts
	if (kv_seq_mark_pos(h->kv, r->lane)) {
		// a recurrent state cannot be cut: back to the decode row's; the next round feeds the accepted drafts again
		if (acc == nd) {
			kv_seq_mark(h->kv, r->lane, 0);
		} else if (kv_seq_rewind(h->kv, r->lane)) {
			lane_finish(h, r, LANE_EV_FAILED, 0, -1, "drafts: the recurrent state could not be rewound", NULL, 0);
			return;
		}
	} else {
		kv_seq_truncate(h->kv, r->lane, P + 1 + acc);
	}
	if (h->dkv && r->dkv_len > P + 1 + acc) {
		kv_seq_truncate(h->dkv, r->lane, P + 1 + acc);
		r->dkv_len = P + 1 + acc;
	}
	r->draft_ema = 0.8f * r->draft_ema + 0.2f * (float)acc / (float)nd;
	int32_t k = (int32_t)(1.5f + r->draft_ema * (float)h->cfg.draft_max);
	r->draft_k = k < 1 ? 1 : k > h->cfg.draft_max ? h->cfg.draft_max : k;
}

int lane_draft_open(lane_host *h, int32_t n_pages, char *err, size_t errlen) {
	const lane_config *cfg = &h->cfg;
	int rc = draft_check(h->m, cfg->draft_model, err, errlen);
	kv_config dc = model_kv_config(cfg->draft_model, cfg->kv_type, cfg->lanes, h->max_ctx, cfg->page_tokens);
	dc.n_pages = n_pages + cfg->lanes * (lane_pages_for(h, cfg->draft_max) + 1);
	if (!rc) rc = kv_new(&h->dkv, &dc, err, errlen);
	const int32_t drows = cfg->lanes > LANE_DRAFT_CHUNK ? cfg->lanes : LANE_DRAFT_CHUNK;
	if (!rc)
		rc = model_ws_new(&h->dws, cfg->draft_model, drows, cfg->threads,
				  model_attn_fused() ? 0 : h->max_ctx + LANE_MAX_DRAFT + 1, err, errlen);
	h->dlogits = malloc((size_t)cfg->lanes * (size_t)h->hp.n_vocab * sizeof(float));
	if (!rc && !h->dlogits) rc = LANES_ENOMEM;
	return rc;
}

void lane_draft_free(lane_host *h) {
	lane_mtp_free(h);
	kv_free(h->dkv);
	model_ws_free(h->dws);
	free(h->dlogits);
	free(h->drows);
}

uint64_t lane_draft_compute_bytes(const model_hparams *hp, const lane_config *cfg, int nth, int32_t window) {
	if (!cfg->draft_model) return lane_mtp_compute_bytes(hp, cfg, nth, window);
	const uint64_t V = (uint64_t)hp->n_vocab;
	const int32_t drows = cfg->lanes > LANE_DRAFT_CHUNK ? cfg->lanes : LANE_DRAFT_CHUNK;
	uint64_t b = (uint64_t)cfg->lanes * V * sizeof(float); // draft logits
	b += model_ws_bytes(model_hparams_of(cfg->draft_model), drows, nth,
			    model_attn_fused() ? 0 : window + LANE_MAX_DRAFT + 1);
	return b;
}

uint64_t lane_draft_held_bytes(const lane_host *h) {
	return (h->cfg.draft_model ? (uint64_t)h->cfg.lanes * h->hp.n_vocab * sizeof(float) : 0) +
	       (h->dws ? model_ws_size(h->dws) : 0) + lane_mtp_held_bytes(h);
}
