// lanes: the round — decode and draft rows for live lanes, prompt pieces for filling lanes
// within the budget the pricing model gives (calibrated once at start-up), one forward pass,
// then each row's token sampled and emitted in order.
#include "lanes/lanes_int.h"

#include <math.h>
#include <stdlib.h>

#define MOD "lanes"

static int ensure_rows(lane_host *h, int32_t n) {
	if (n <= h->cap_rows) return 0;
	int32_t cap = h->cap_rows ? h->cap_rows : 64;
	while (cap < n) cap *= 2;
	model_row *rows = realloc(h->rows, (size_t)cap * sizeof *rows);
	if (rows) h->rows = rows;
	int32_t *rl = realloc(h->row_lane, (size_t)cap * sizeof *rl);
	if (rl) h->row_lane = rl;
	bool *rh = realloc(h->row_hidden, (size_t)cap * sizeof *rh);
	if (rh) h->row_hidden = rh;
	if (!rows || !rl || !rh) return LANES_ENOMEM;
	h->cap_rows = cap;
	return 0;
}

// What one of r's rows costs, in base rows: 1 plus its adapters' terms. A budget hook
// counts rows as they are.
static double row_weight(const lane_host *h, const lane_req *r) { return h->cfg.hooks.budget ? 1.0 : 1.0 + r->lora_cost; }

// What reading r's adapters costs this pass, in base rows, for those no earlier row of the
// round brought: each a share of the round's fixed cost (mostly the reading of the model's own
// weights) as large as its bytes are of the model's. The rows of one adapter share the reading.
static double lora_reads(lane_host *h, const lane_req *r) {
	if (h->cfg.hooks.budget || h->row_us <= 0) return 0;
	double c = 0;
	for (int32_t k = 0; k < r->lora.n; k++) {
		const model_lora *a = r->lora.use[k].lora;
		int32_t i = 0;
		while (i < h->n_round_lora && h->round_lora[i] != a) i++;
		if (i < h->n_round_lora) continue;
		if (h->n_round_lora < h->cfg.lanes * MODEL_LORA_MAX) h->round_lora[h->n_round_lora++] = a;
		c += h->fixed_us * r->lora_read[k] / h->row_us;
	}
	return c;
}

// Base rows of prompt this round may carry after decode and draft rows costing decode base
// rows: the budget hook's figure, else the share of --round-ms the pricing model leaves. A round
// with no decode rows has no stream's latency to keep: it takes all it can, so a burst of
// requests starts decoding together (lanes that started rounds apart end rounds apart, in small
// rounds that cost a pass's fixed time each) and a lone prompt fills in the fewest passes.
double lane_prompt_budget(const lane_host *h, double decode) {
	if (h->cfg.hooks.budget) {
		int32_t n = h->cfg.hooks.budget(h->cfg.hooks.arg, (int32_t)ceil(decode), h->row_us, h->fixed_us, h->cfg.round_ms);
		return n < 0 ? 0 : n > LANE_PROMPT_ROWS ? LANE_PROMPT_ROWS : n;
	}
	if (decode <= 0) return LANE_PROMPT_ROWS;
	double left = h->cfg.round_ms * 1000.0 - h->fixed_us - decode * h->row_us;
	double n = h->row_us > 0 ? floor(left / h->row_us) : 512;
	// a page of prompt per round at least, so busy decoding never starves a filling lane
	return n < h->cfg.page_tokens ? h->cfg.page_tokens : n > LANE_PROMPT_ROWS ? LANE_PROMPT_ROWS : n;
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

// A decode row for every live lane, each followed by its draft rows; returns the rows' count
// and their cost in base rows in *cost.
static int32_t add_decode_rows(lane_host *h, double *cost) {
	int32_t n = 0;
	*cost = 0;
	for (int32_t i = 0; i < h->cfg.lanes; i++) {
		lane_req *r = h->lanes[i];
		if (!r || r->n_filled < r->n_prompt) continue;
		// drafts a recurrent state was rewound past (accepted ones) are fed again first
		const int32_t pos = r->n_prompt + r->n_gen - 1, from = kv_seq_len(h->kv, i);
		// a lane's rows stay within 1 + draft_max, as the pass's workspace counts them: replays leave fewer drafts
		const int32_t room = h->cfg.draft_max - (pos - from);
		if (r->n_draft > room) r->n_draft = room > 0 ? room : 0;
		if (ensure_rows(h, n + (pos - from) + 1 + r->n_draft) || lane_fault(h, r)) {
			lane_finish(h, r, LANE_EV_FAILED, 0, -1, "out of memory", NULL, 0);
			continue;
		}
		for (int32_t p = from; p < pos; p++) {
			h->rows[n] = (model_row){lane_ctx_at(r, p), p, i, false, r->lora.n ? &r->lora : NULL};
			h->row_hidden[n] = r->mtp;
			h->row_lane[n++] = i;
		}
		h->stats.draft_replayed += (uint64_t)(pos - from);
		// the state after the decode row is kept: a rejected draft rewinds to it
		if (r->n_draft) kv_seq_mark(h->kv, i, pos + 1);
		// and copies for the reply's checkpoint: at the last page boundary the replays and the
		// decode row cross (confirmed by this pass), in the older capture's slot, then at the last
		// the drafts cross, in the other; a rejection drops only the drafts' (kv_seq_rewind)
		const int32_t pt = kv_config_of(h->kv)->page_tokens, conf = (pos + 1) / pt * pt, pend = (pos + r->n_draft + 1) / pt * pt;
		if (h->cfg.prefix_cache && r->embed == LANE_EMBED_OFF) {
			int slot = kv_seq_capture_pos(h->kv, i, 0) <= kv_seq_capture_pos(h->kv, i, 1) ? 0 : 1;
			if (conf > from) kv_seq_capture(h->kv, i, slot, conf), slot ^= 1;
			if (pend > conf && pend > from) kv_seq_capture(h->kv, i, slot, pend);
		}
		h->rows[n] = (model_row){r->last, pos, i, true, r->lora.n ? &r->lora : NULL};
		h->row_hidden[n] = r->mtp;
		h->row_lane[n++] = i;
		for (int32_t k = 0; k < r->n_draft; k++) {
			h->rows[n] = (model_row){r->drafts[k], pos + 1 + k, i, true, r->lora.n ? &r->lora : NULL};
			h->row_hidden[n] = r->mtp;
			h->row_lane[n++] = i;
		}
		*cost += (pos - from + 1 + r->n_draft) * row_weight(h, r) + lora_reads(h, r);
	}
	return n;
}

// After the n decode and draft rows (costing decode base rows), prompt pieces in admission
// order (or the row policy's) until the budget, less the rows kept for background work, is
// spent, and while the logits buffer has room for the rows that keep theirs (a prompt's last;
// every row of one that asked for prompt log-probabilities); returns the rows' count.
static int32_t add_prompt_pieces(lane_host *h, int32_t n, double decode, double keep) {
	double budget = lane_prompt_budget(h, decode) - keep;
	int32_t n_logits = n; // decode and draft rows all keep theirs
	for (;;) {
		lane_req *r = budget >= 1 ? next_piece(h) : NULL;
		if (!r) break;
		budget -= lora_reads(h, r);
		const double w = row_weight(h, r);
		const double fit = floor(budget / w);
		int32_t take = imin(r->n_prompt - r->n_filled, fit < 1 ? 1 : fit > LANE_PROMPT_ROWS ? LANE_PROMPT_ROWS : (int32_t)fit);
		if (h->cfg.piece > 0 && !h->hp.encoder) take = imin(take, h->cfg.piece); // an encoder's sequence is never cut
		const int32_t room = h->cap_logits - n_logits;
		if (r->plp) take = imin(take, room);
		else if (r->n_filled + take == r->n_prompt && room < 1) take = r->n_prompt - 1 - r->n_filled; // its last row waits
		// an encoder's sequence is one piece (its rows keep no logits): past the budget it opens the next round
		if (h->hp.encoder && take < r->n_prompt) {
			if (n > 0) break;
			take = r->n_prompt;
		}
		// the pieces cut here change no bits: a row's logits never depend on its piece
		if (take < 1) break;
		n_logits += r->plp ? take : r->n_filled + take == r->n_prompt;
		if (ensure_rows(h, n + take) || lane_fault(h, r)) {
			lane_finish(h, r, LANE_EV_FAILED, 0, -1, "out of memory", NULL, 0);
			continue;
		}
		const bool embed = r->embed != LANE_EMBED_OFF;
		for (int32_t k = 0; k < take; k++) {
			int32_t pos = r->n_filled + k;
			const bool last = pos == r->n_prompt - 1;
			h->rows[n] = (model_row){r->prompt[pos], pos, r->lane, (last || r->plp) && !embed, r->lora.n ? &r->lora : NULL};
			h->row_hidden[n] = r->embed == LANE_EMBED_MEAN || r->embed == LANE_EMBED_NONE || (r->embed == LANE_EMBED_LAST && last) ||
					   (r->embed == LANE_EMBED_CLS && pos == 0) || r->mtp;
			h->row_lane[n++] = r->lane;
		}
		budget -= take * w;
		// mark the piece as taken so the loop moves on; the KV length confirms it after forward
		r->n_filled += take;
	}
	return n;
}

// Room for the hidden states of the flagged rows among the n; false when it cannot grow.
static bool ensure_hidden(lane_host *h, int32_t n, int32_t *nh) {
	*nh = 0;
	for (int32_t i = 0; i < n; i++) *nh += h->row_hidden[i];
	if (*nh <= h->cap_hidden) return true;
	float *p = realloc(h->hidden, (size_t)*nh * (size_t)h->hp.n_embd * sizeof *p);
	if (!p) return false;
	h->hidden = p;
	h->cap_hidden = *nh;
	return true;
}

// One forward pass over the n rows, timed. When it fails it changed nothing, and every lane
// in it ends failed; returns the error then.
static int forward(lane_host *h, int32_t n) {
	char err[256];
	int32_t nh;
	int rc = ensure_hidden(h, n, &nh) ? 0 : base_seterr(err, sizeof err, LANES_ENOMEM, "out of memory");
	uint64_t t0 = base_now_us();
	lane_constrain_prefetch(h);
	if (!rc)
		rc = model_forward_hidden(h->m, h->kv, h->pool, h->ws, h->rows, n, h->logits, nh ? h->row_hidden : NULL,
					  h->hidden, err, sizeof err);
	uint64_t dt = base_now_us() - t0;
	lane_constrain_join(h);
	h->stats.forward_us += dt;
	lane_observe(&h->stats.forward_seconds, dt / 1e6);
	h->stats.rounds++;
	if (rc) {
		LOG_ERROR(MOD, "forward pass failed: %s", err);
		for (int32_t i = 0; i < n; i++) {
			lane_req *r = h->lanes[h->row_lane[i]];
			if (r) lane_finish(h, r, LANE_EV_FAILED, 0, -1, err, NULL, 0);
		}
	}
	return rc;
}

// An embedding's prompt row: its hidden state joins the pool (in token order, so pieces
// and batches never change the sum); the last row ends the request with the vector.
static void embed_row(lane_host *h, lane_req *r, const float *hid, int32_t pos) {
	const int32_t E = h->hp.n_embd;
	if (r->embed == LANE_EMBED_NONE) {
		// every token its own vector, normalized alone
		double ss = 0;
		for (int32_t e = 0; e < E; e++) ss += (double)hid[e] * hid[e];
		const double scale = r->normalize && ss > 0 ? 1.0 / sqrt(ss) : 1.0;
		for (int32_t e = 0; e < E; e++) r->vec[(size_t)pos * E + e] = (float)(hid[e] * scale);
		if (pos == r->n_prompt - 1) lane_finish(h, r, LANE_EV_FINISHED, LANE_FINISH_STOP, -1, NULL, NULL, 0);
		return;
	}
	if (hid) {
		if (r->embed == LANE_EMBED_MEAN)
			for (int32_t e = 0; e < E; e++) r->pool_sum[e] += hid[e];
		else
			for (int32_t e = 0; e < E; e++) r->pool_sum[e] = hid[e];
	}
	if (pos != r->n_prompt - 1) return;
	// the last token's vector needs no other row's: its prompt's pages serve later requests
	if (h->cfg.prefix_cache && r->embed == LANE_EMBED_LAST && !h->hp.encoder) kv_prefix_publish(h->kv, r->lane, r->prefix_root, r->prompt, r->n_prompt);
	const double div = r->embed == LANE_EMBED_MEAN ? r->n_prompt : 1;
	double ss = 0;
	for (int32_t e = 0; e < E; e++) ss += (r->pool_sum[e] / div) * (r->pool_sum[e] / div);
	const double scale = r->normalize && ss > 0 ? 1.0 / sqrt(ss) : 1.0;
	for (int32_t e = 0; e < E; e++) r->vec[e] = (float)(r->pool_sum[e] / div * scale);
	lane_finish(h, r, LANE_EV_FINISHED, LANE_FINISH_STOP, -1, NULL, NULL, 0);
}

// Row by row, the rows with logits: a prompt's last row publishes its prefix and draws the
// first token; a decode row and its drafts draw the target's token at each position, in
// order, until one differs from the draft. Every token taken is the target's own, and
// emitting it may end its request.
static void sample_rows(lane_host *h, int32_t n) {
	const int32_t n_vocab = h->hp.n_vocab;
	int32_t li = 0, hi = 0, drawn = 0;
	const uint64_t t0 = base_now_us();
	for (int32_t i = 0; i < n; i++) {
		// the hidden states are the flagged rows', in batch order (the MTP head's included)
		const float *hid = h->row_hidden[i] ? h->hidden + (size_t)hi++ * h->hp.n_embd : NULL;
		if (!h->rows[i].logits) {
			lane_req *r = h->lanes[h->row_lane[i]];
			if (r && h->rows[i].pos >= r->n_prompt) continue; // a replayed draft: counted as one
			h->stats.prompt_tokens++;
			if (r && r->embed != LANE_EMBED_OFF) embed_row(h, r, hid, h->rows[i].pos);
			continue;
		}
		const float *lg = h->logits + (size_t)li++ * n_vocab;
		lane_req *r = h->lanes[h->row_lane[i]];
		if (!r) continue;
		if (h->rows[i].pos < r->n_prompt - 1) { // a prompt row kept for its log-probabilities
			h->stats.prompt_tokens++;
			lane_emit_prompt_lp(h, r, lg, h->rows[i].pos);
			continue;
		}
		if (r->n_gen == 0 && h->rows[i].pos == r->n_prompt - 1) {
			h->stats.prompt_tokens++;
			if (h->cfg.prefix_cache) kv_prefix_publish(h->kv, r->lane, r->prefix_root, r->prompt, r->n_prompt);
		}
		if (h->rows[i].pos == r->n_prompt - 1) {
			lane_emit_sampled(h, r, lg);
			drawn++;
			continue;
		}
		int32_t nd = r->n_draft, P = h->rows[i].pos, acc = 0;
		lreq_ref(r); // ending it inside the drafts must not free it under us
		for (int32_t j = 0; j <= nd; j++) {
			int32_t tok = lane_emit_sampled(h, r, h->logits + (size_t)(li - 1 + j) * n_vocab);
			drawn++;
			if (r->lane < 0 || j == nd || tok != r->drafts[j]) break;
			acc++;
		}
		li += nd;
		for (int32_t j = 1; j <= nd; j++) hi += h->row_hidden[i + j];
		i += nd;
		if (nd) lane_draft_verified(h, r, nd, acc, P);
		lreq_unref(r);
	}
	// what a draw costs beside a row's forward work, for the drafts' price (lane_propose);
	// prices given in the configuration stay as given
	if (drawn && h->cfg.row_us <= 0) {
		const double per = (double)(base_now_us() - t0) / drawn;
		h->draw_us = h->draw_us > 0 ? 0.9 * h->draw_us + 0.1 * per : per;
	}
}

// One round as the design orders it (the engine admitted under its lock just before): the
// admitted lanes start, live lanes get decode and draft rows, filling lanes prompt pieces
// within the budget (less the background's share), one forward pass, then row by row sample,
// emit and finals; the background's pieces last.
void lane_run_round(lane_host *h) {
	lane_start_admitted(h);
	// no query reads local rows before a lane's window from here on (but a resume's are kept)
	for (int32_t i = 0; h->hp.n_swa > 0 && i < h->cfg.lanes; i++)
		if (h->lanes[i])
			kv_seq_release_window(h->kv, i, (h->lanes[i]->n_prompt - 1) / h->cfg.page_tokens * h->cfg.page_tokens,
					      lane_window_stride(&h->cfg, &h->hp));
	lane_propose(h);
	h->n_round_lora = 0;
	double decode;
	int32_t n = add_decode_rows(h, &decode);
	n = add_prompt_pieces(h, n, decode, lane_bg_reserve(h, decode));
	if (n > 0 && !forward(h, n)) {
		lane_experts_count(h, n);
		sample_rows(h, n);
		lane_mtp_feed(h, n);
	}
	lane_bg_run(h);
}

// Times forward passes of 1 and of 16 rows on lane 0 to price a row and a round (16: the
// batch where the kernels have turned compute-bound, as busy rounds are). The fastest of a
// few passes each counts: on a shared machine one pass can land in another's busy moment.
void lane_calibrate(lane_host *h) {
	if (h->cfg.row_us > 0) {
		h->row_us = h->cfg.row_us;
		h->fixed_us = h->cfg.fixed_us;
		return;
	}
	int32_t big = imin(16, h->max_ctx);
	model_row rows[16];
	double t[2] = {INFINITY, INFINITY};
	int32_t sizes[2] = {1, big};
	char err[128];
	const uint64_t start = base_now_us();
	// the first pass warms caches; then up to 4 more, fewer when passes are slow
	for (int rep = 0; rep < 5 && (rep < 2 || base_now_us() - start < 300000); rep++)
		for (int k = 0; k < 2; k++) {
			for (int32_t i = 0; i < sizes[k]; i++)
				rows[i] = (model_row){tok_bos(h->vocab) >= 0 ? tok_bos(h->vocab) : 0, i, 0, i == sizes[k] - 1 && !h->hp.encoder, NULL};
			uint64_t t0 = base_now_us();
			int rc = model_forward_ws(h->m, h->kv, h->pool, h->ws, rows, sizes[k], h->logits, err, sizeof err);
			double dt = (double)(base_now_us() - t0);
			kv_seq_clear(h->kv, 0);
			if (rc) return;
			if (rep > 0 && dt < t[k]) t[k] = dt;
		}
	h->row_us = big > 1 ? (t[1] - t[0]) / (big - 1) : t[0];
	if (h->row_us < 1) h->row_us = 1;
	h->fixed_us = t[0] - h->row_us > 0 ? t[0] - h->row_us : 0;
	LOG_DEBUG(MOD, "pricing: %.0f us per row, %.0f us per round; round target %.0f ms gives %.0f prompt rows beside a stream",
		 h->row_us, h->fixed_us, h->cfg.round_ms, lane_prompt_budget(h, 1));
}
