// lanes: the model's own MTP head as the proposer of the rounds — fed the trunk's hidden states
// of each lane's accepted rows after every round (leaving the first proposal), chained on its
// own states for the further drafts at the next round's start. Proposals never change a token.
#include "lanes/lanes_int.h"

#include <stdlib.h>
#include <string.h>

#define MOD "lanes"

bool lane_mtp_wanted(const model_hparams *hp, const lane_config *cfg) {
	// a head is learned for dense attention models alone
	const bool learnable = cfg->mtp_learn && cfg->draft == LANE_DRAFT_MTP && !hp->n_experts && !hp->full_attn_interval && !hp->encoder;
	return (hp->n_nextn > 0 || learnable) && cfg->draft_max > 0 && !cfg->draft_model && !cfg->hooks.propose &&
	       (cfg->draft == LANE_DRAFT_AUTO || cfg->draft == LANE_DRAFT_MTP);
}

int lane_mtp_open(lane_host *h, int32_t n_pages, char *err, size_t errlen) {
	const lane_config *cfg = &h->cfg;
	const size_t rows = (size_t)lane_max_rows(cfg), E = (size_t)h->hp.n_embd, lanes = (size_t)cfg->lanes;
	kv_config c = model_mtp_kv_config(h->m, cfg->kv_type, cfg->lanes, h->max_ctx, cfg->page_tokens);
	// the chain's rows run ahead of the context by the drafts
	c.n_pages = n_pages + cfg->lanes * (lane_pages_for(h, cfg->draft_max) + 1);
	int rc = kv_new(&h->mkv, &c, err, errlen);
	if (!rc)
		rc = model_ws_new_head(&h->mws, h->m, (int64_t)rows, cfg->threads, model_attn_fused() ? 0 : h->max_ctx + LANE_MAX_DRAFT + 1,
				  err, errlen);
	h->mrows = malloc(rows * sizeof *h->mrows);
	h->mhin = malloc(rows * E * sizeof *h->mhin);
	h->mlogits = malloc(lanes * (size_t)h->hp.n_vocab * sizeof *h->mlogits);
	h->mstate = calloc(lanes * E, sizeof *h->mstate);
	if (!rc && (!h->mrows || !h->mhin || !h->mlogits || !h->mstate)) rc = base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	return rc;
}

const model *lane_mtp_model(const lane_host *h) { return h->head ? model_head_model(h->head) : h->m; }

bool lane_mtp_has_head(const lane_host *h) { return h->mkv && (h->hp.n_nextn > 0 || h->head); }

bool lane_host_head_ok(const lane_host *h) { return h->mkv != NULL; }

void lane_host_set_head(lane_host *h, model_head *v) {
	if (!h->mkv) {
		model_head_free(v);
		return;
	}
	model_head_free(h->head);
	h->head = v;
	memcpy(h->head_at, h->stats.draft_at[LANE_PROP_MTP], sizeof h->head_at);
	memcpy(h->head_acc, h->stats.draft_accepted_at[LANE_PROP_MTP], sizeof h->head_acc);
}

void lane_mtp_free(lane_host *h) {
	model_head_free(h->head);
	kv_free(h->mkv);
	model_ws_free(h->mws);
	free(h->mrows);
	free(h->mhin);
	free(h->mlogits);
	free(h->mstate);
}

uint64_t lane_mtp_compute_bytes(const model_hparams *hp, const lane_config *cfg, int nth, int32_t window) {
	if (!lane_mtp_wanted(hp, cfg)) return 0;
	const uint64_t rows = (uint64_t)lane_max_rows(cfg), E = (uint64_t)hp->n_embd, lanes = (uint64_t)cfg->lanes;
	return model_ws_bytes_head(hp, (int64_t)rows, nth, model_attn_fused() ? 0 : window + LANE_MAX_DRAFT + 1) +
	       rows * (sizeof(model_row) + E * sizeof(float)) + lanes * ((uint64_t)hp->n_vocab + E) * sizeof(float);
}

uint64_t lane_mtp_held_bytes(const lane_host *h) {
	if (!h->mkv) return 0;
	const uint64_t rows = (uint64_t)lane_max_rows(&h->cfg), E = (uint64_t)h->hp.n_embd, lanes = (uint64_t)h->cfg.lanes;
	return model_ws_size(h->mws) + rows * (sizeof(model_row) + E * sizeof(float)) +
	       lanes * ((uint64_t)h->hp.n_vocab + E) * sizeof(float);
}

// One head pass over the m rows gathered; each row with logits leaves its lane's proposal
// (the context being at long) and chained state. A pass that fails takes the head from its
// lanes: their drafts come from prompt lookup from then on.
static void feed_pass(lane_host *h, int32_t *m) {
	if (!*m) return;
	const int32_t E = h->hp.n_embd, V = h->hp.n_vocab;
	char err[256];
	if (model_mtp_forward(lane_mtp_model(h), h->mkv, h->pool, h->mws, h->mrows, *m, h->mhin, h->mlogits, h->mhin, err, sizeof err)) {
		LOG_WARN(MOD, "MTP head: %s", err);
		for (int32_t i = 0; i < *m; i++) {
			lane_req *r = h->lanes[h->mrows[i].seq];
			if (r) r->mtp = false, r->mtp_at = -1;
			kv_seq_clear(h->mkv, h->mrows[i].seq);
		}
		*m = 0;
		return;
	}
	// the states were written over the inputs, the rows with logits in order
	for (int32_t i = 0, k = 0; i < *m; i++) {
		if (!h->mrows[i].logits) continue;
		const int32_t lane = h->mrows[i].seq;
		lane_req *r = h->lanes[lane];
		r->mtp_next = sample_argmax(h->mlogits + (size_t)k * V, V);
		r->mtp_at = r->n_prompt + r->n_gen;
		memcpy(h->mstate + (size_t)lane * E, h->mhin + (size_t)k * E, (size_t)E * sizeof(float));
		k++;
	}
	*m = 0;
}

void lane_mtp_feed(lane_host *h, int32_t n) {
	if (!h->mkv) return;
	const int32_t E = h->hp.n_embd, cap = lane_max_rows(&h->cfg);
	int32_t m = 0, hi = 0;
	// a lane's rows are one run of the batch: its decode row and drafts, or its prompt piece
	for (int32_t i = 0, j; i < n; i = j) {
		const int32_t lane = h->row_lane[i], h0 = hi;
		for (j = i; j < n && h->row_lane[j] == lane; j++) hi += h->row_hidden[j];
		lane_req *r = h->lanes[lane];
		// a lane the head's drafts do not pay for stops feeding it; the positions it skips get
		// the embedding alone when it is worth asking again
		if (!r || !r->mtp || !h->row_hidden[i] || r->mtp_idle > MTP_IDLE) continue;
		// row p reads the token at p + 1: up to the one drawn last, past the rejected drafts
		const int32_t p0 = h->rows[i].pos, last = r->n_prompt + r->n_gen - 2, p1 = imin(h->rows[j - 1].pos, last);
		int32_t len = kv_seq_len(h->mkv, lane);
		if (len > p0) kv_seq_truncate(h->mkv, lane, len = p0);
		r->mtp_at = -1;
		// positions the trunk did not run here (a cached prefix) get the embedding alone
		for (int32_t p = len; p <= p1; p++) {
			if (m == cap) feed_pass(h, &m);
			if (!r->mtp) break;
			h->mrows[m] = (model_row){lane_ctx_at(r, p + 1), p, lane, p == last, NULL};
			float *dst = h->mhin + (size_t)m * E;
			if (p >= p0) memcpy(dst, h->hidden + (size_t)(h0 + p - p0) * E, (size_t)E * sizeof(float));
			else memset(dst, 0, (size_t)E * sizeof(float));
			m++;
		}
	}
	feed_pass(h, &m);
}

void lane_mtp_propose(lane_host *h, lane_req **rs, const int32_t *ks, int32_t n) {
	const int32_t E = h->hp.n_embd, V = h->hp.n_vocab;
	int32_t kmax = 0;
	for (int32_t i = 0; i < n; i++) {
		lane_req *r = rs[i];
		r->n_draft = 0;
		r->prop = LANE_PROP_MTP;
		if (!r->mtp || r->mtp_at != r->n_prompt + r->n_gen) continue;
		r->drafts[r->n_draft++] = r->mtp_next;
		if (ks[i] > kmax) kmax = ks[i];
	}
	// then one row per lane per step, all lanes in one pass, each on its own last state
	char err[256];
	for (int32_t step = 1; step < kmax; step++) {
		int32_t m = 0;
		for (int32_t i = 0; i < n; i++) {
			lane_req *r = rs[i];
			const int32_t pos = r->n_prompt + r->n_gen - 2 + step;
			if (r->n_draft != step || step >= ks[i] || kv_seq_len(h->mkv, r->lane) != pos) continue;
			h->mrows[m] = (model_row){r->drafts[step - 1], pos, r->lane, true, NULL};
			memcpy(h->mhin + (size_t)m * E, h->mstate + (size_t)r->lane * E, (size_t)E * sizeof(float));
			m++;
		}
		if (!m) break;
		const uint64_t t0 = base_now_us();
		if (model_mtp_forward(lane_mtp_model(h), h->mkv, h->pool, h->mws, h->mrows, m, h->mhin, h->mlogits, h->mhin, err, sizeof err)) {
			LOG_WARN(MOD, "MTP head: %s", err);
			break;
		}
		// the pricing's cost of a chained draft: timing picks how many drafts, never a token
		const double us = (double)(base_now_us() - t0);
		h->mtp_us = h->mtp_us > 0.0 ? 0.9 * h->mtp_us + 0.1 * us : us;
		for (int32_t k = 0; k < m; k++) {
			const int32_t lane = h->mrows[k].seq;
			lane_req *r = h->lanes[lane];
			r->drafts[r->n_draft++] = sample_argmax(h->mlogits + (size_t)k * V, V);
			memcpy(h->mstate + (size_t)lane * E, h->mhin + (size_t)k * E, (size_t)E * sizeof(float));
		}
	}
}
