// lanes: the elastic window — the tokens a request may use follow the p95 of recent requests'
// sizes between the floor and the largest window, and the KV pool's page limit follows it.
#include "lanes/lanes_int.h"

#include <stdlib.h>

#define MOD "lanes"

// Sets the window (rounded up to whole pages, within the floor and the largest window) and
// the pool's page limit: a window for every lane, and never below what admitted requests
// were promised.
void lane_window_set(lane_host *h, int32_t tokens) {
	const int32_t pt = h->cfg.page_tokens;
	int32_t w = (int32_t)(((int64_t)tokens + pt - 1) / pt * pt);
	if (w < h->cfg.window) w = h->cfg.window;
	if (w > h->cfg.window_max) w = h->cfg.window_max;
	if (w != atomic_load(&h->window)) {
		LOG_INFO(MOD, "window %d -> %d tokens (demand %d)", atomic_load(&h->window), w, h->window_demand);
		atomic_store(&h->window, w);
		h->window_changed_us = base_now_us();
	}
	int64_t limit = (int64_t)h->cfg.lanes * lane_pages_for(h, w);
	if (limit < h->pages_reserved) limit = h->pages_reserved;
	kv_set_limit(h->kv, (int32_t)limit);
}

// A finished request's size: what it asked for (prompt + max_tokens) when it set
// max_tokens, else what it used.
void lane_window_record(lane_host *h, const lane_req *r) {
	if (h->cfg.window_max <= 0) return;
	const int32_t tokens = r->n_prompt + (r->explicit_max ? r->max_tokens : r->n_gen);
	h->demand[h->demand_next].tokens = tokens;
	h->demand[h->demand_next].at_us = base_now_us();
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
void lane_window_follow(lane_host *h) {
	if (h->cfg.window_max <= 0) return;
	const uint64_t now = base_now_us(), recent = (uint64_t)(h->cfg.window_recent_s * 1e6);
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
	if (target > w) lane_window_set(h, (int32_t)target);
	else if (target < (int64_t)w * 3 / 4 && w > h->cfg.window && now - h->window_changed_us >= (uint64_t)(hold_s * 1e6))
		lane_window_set(h, (int32_t)target);
	else lane_window_set(h, w); // keeps the limit up to date with what is reserved
}
