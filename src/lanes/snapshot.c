// lanes: the snapshot — what the engine publishes at every round boundary (lanes, queue, KV,
// window, counters, histograms) and the copy control reads take without touching the engine.
#include "lanes/lanes_int.h"

#include <math.h>

const double lane_hist_bounds[LANE_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, INFINITY};

void lane_observe(lane_hist *hi, double seconds) {
	for (int i = 0; i < LANE_HIST_BUCKETS; i++)
		if (seconds <= lane_hist_bounds[i]) hi->count[i]++;
	hi->n++;
	hi->sum += seconds;
}

// Counts one request's adapters in the snapshot's list (running: admitted, else queued).
static void count_lora(lane_snapshot *s, const lane_req *r, bool running) {
	for (int32_t k = 0; k < r->lora.n; k++) {
		const uint64_t id = model_lora_id(r->lora.use[k].lora);
		int32_t i = 0;
		while (i < s->n_lora && s->lora[i].id != id) i++;
		if (i == s->n_lora) {
			if (i == LANE_SNAP_MAX_LORA) continue;
			s->lora[s->n_lora++] = (lane_snap_lora){id, 0, 0};
		}
		if (running) s->lora[i].running++;
		else s->lora[i].waiting++;
	}
}

void lane_publish(lane_host *h) {
	lane_snapshot *s = &h->stats;
	s->sequence++;
	s->clock_us = base_now_us();
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
		l->n_draft_at = 0;
		for (int32_t j = 0; r && j < LANE_MAX_DRAFT && r->drafted_at[j]; j++)
			l->draft_acceptance_at[l->n_draft_at++] = (float)r->accepted_at[j] / (float)r->drafted_at[j];
	}
	s->n_lora = 0;
	for (int32_t i = 0; i < h->cfg.lanes; i++)
		if (h->lanes[i]) count_lora(s, h->lanes[i], true);
	int32_t total = kv_pages_limit(h->kv);
	s->kv_pages_free = kv_pages_free(h->kv);
	s->kv_pages_used = total - s->kv_pages_free + kv_pages_over_limit(h->kv);
	if (h->cfg.window_max > 0) {
		s->window = atomic_load(&h->window);
		s->window_demand = h->window_demand;
		s->window_floor = h->cfg.window;
		s->window_max = h->cfg.window_max;
	}
	// a sliding-window model's local rows count where they are held (at most the cap), not per page
	const uint64_t lpb = kv_local_page_bytes(h->kv), gpb = kv_page_bytes(h->kv) - lpb, cap = (uint64_t)kv_config_of(h->kv)->local_cap;
	s->kv_bytes = (uint64_t)total * gpb + (cap && cap < (uint64_t)total ? cap : (uint64_t)total) * lpb;
	s->kv_reserved_bytes = kv_reserved_bytes(h->kv);
	s->kv_used_bytes = (uint64_t)s->kv_pages_used * gpb + (uint64_t)kv_pages_local_held(h->kv) * lpb;
	// a head version learned while serving is held beside the compute memory sized at start
	s->compute_bytes = h->compute_bytes + (h->head ? model_head_bytes(h->head) : 0);
	s->kv_pages_cached = kv_pages_cached(h->kv);
	s->kv_local_held = kv_pages_local_held(h->kv);
	s->kv_local_freed = kv_pages_local_freed(h->kv);
	s->kv_local_page_bytes = kv_local_page_bytes(h->kv);
	s->prefix_disk = kv_disk_stats_of(h->kv);
	pthread_mutex_lock(&h->mu);
	s->queue_depth = h->qlen;
	for (const lane_req *r = h->qhead; r; r = r->next) count_lora(s, r, false);
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
	// the queue and capacity as they are now: a lessee decides on them
	out->kv_page_bytes = kv_page_bytes(h->kv);
	pthread_mutex_lock(&h->mu);
	lane_lease_expire(h, base_now_us());
	out->queue_depth = h->qlen;
	out->kv_pages_limit = kv_pages_limit(h->kv);
	const int32_t lanes = h->cfg.lanes - atomic_load(&h->open) - h->lease_lanes;
	const int32_t pages = out->kv_pages_limit - h->pages_reserved - lane_lease_held_pages(h, NULL);
	out->lanes_free = lanes > 0 ? lanes : 0;
	out->kv_free_bytes = pages > 0 ? (uint64_t)pages * out->kv_page_bytes : 0;
	out->leases = h->n_leases;
	out->leased_lanes = lane_lease_held_lanes(h, NULL);
	pthread_mutex_unlock(&h->mu);
}
