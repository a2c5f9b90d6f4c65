// lanes: finals — a request's end: its one terminal event, the release of its lane and KV
// pages (exactly once), the counters, and the ends of cancelled requests at a round boundary.
#include "lanes/lanes_int.h"

#include <stdlib.h>

// A reply joins its prompt in the prefix cache: a conversation's next turn holds both. The last
// token's row may hold a rejected draft (a request can end inside its drafts), so the pages
// stop before it; a recurrent model's checkpoint is the copy taken at the last page boundary.
static void publish_reply(lane_host *h, lane_req *r) {
	if (!h->cfg.prefix_cache || r->lane < 0 || r->embed != LANE_EMBED_OFF || r->n_filled < r->n_prompt) return;
	const int32_t pt = kv_config_of(h->kv)->page_tokens, n = imin(kv_seq_len(h->kv, r->lane), r->n_prompt + r->n_gen - 1);
	if (n / pt <= r->n_prompt / pt) return; // no whole page past the prompt's, published already
	// the later of the captures within the pages is the reply's checkpoint; the earlier is dropped
	const int32_t c0 = kv_seq_capture_pos(h->kv, r->lane, 0), c1 = kv_seq_capture_pos(h->kv, r->lane, 1);
	if (c0 && c1 && c0 <= n && c1 <= n) kv_seq_capture(h->kv, r->lane, c0 < c1 ? 0 : 1, 0);
	int32_t *t = malloc((size_t)n * sizeof *t);
	if (!t) return;
	for (int32_t i = 0; i < n; i++) t[i] = lane_ctx_at(r, i);
	kv_prefix_publish(h->kv, r->lane, r->prefix_root, t, n);
	free(t);
}

// Frees r's lane, its KV in both models and the pages it was promised; once, as lane < 0 after.
static void release_lane(lane_host *h, lane_req *r) {
	if (r->lane >= 0) {
		kv_seq_clear(h->kv, r->lane);
		if (h->dkv) kv_seq_clear(h->dkv, r->lane);
		if (h->mkv) kv_seq_clear(h->mkv, r->lane);
		r->dkv_len = 0;
		h->lanes[r->lane] = NULL;
		h->pages_reserved -= r->pages_reserved;
		r->pages_reserved = 0;
		r->lane = -1;
	}
}

void lane_finish(lane_host *h, lane_req *r, enum lane_ev_kind kind, enum lane_finish fin, int32_t stop_index,
		 const char *reason, const char *text, size_t len) {
	if (r->lane >= 0) lane_window_record(h, r);
	// a halt's ends allocate nothing: a failed request leaves no record and publishes nothing
	if (kind != LANE_EV_FAILED) publish_reply(h, r), lane_slot_record(h, r);
	release_lane(h, r);
	lane_lora_release(r); // no pass uses them after this: an unloaded adapter may go now
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

void lane_end_cancelled(lane_host *h, lane_req **cancelled, int32_t n) {
	for (int32_t i = 0; i < n; i++) lane_finish(h, cancelled[i], LANE_EV_CANCELLED, 0, -1, NULL, NULL, 0);
	for (int32_t i = 0; i < h->cfg.lanes; i++)
		if (h->lanes[i] && atomic_load(&h->lanes[i]->cancel))
			lane_finish(h, h->lanes[i], LANE_EV_CANCELLED, 0, -1, NULL, NULL, 0);
}
