// lanes: background work — the owner's priced pieces (the server's training steps) given at
// most a share of each round's prompt budget and run after the round's forward pass, the
// owner's boundary after every round, and its halt. The time a unit of the price takes is
// measured as pieces run, so the share holds in time and not only in price.
#include "lanes/lanes_int.h"

double lane_bg_reserve(lane_host *h, double decode) {
	const lane_background *b = &h->cfg.background;
	h->bg_units = 0;
	if (!b->run) return 0;
	const double next = b->cost(b->arg);
	if (!(next > 0)) {
		h->bg_credit = 0;
		return 0;
	}
	const double rows = lane_prompt_budget(h, decode) * b->share;
	if (!(h->bg_us > 0)) h->bg_us = h->row_us > 0 ? h->row_us : 1;
	const double row_us = h->row_us > 0 ? h->row_us : h->bg_us;
	const double units = rows * row_us / h->bg_us + h->bg_credit;
	// a piece larger than a round's share waits until the rounds' shares add up to it
	if (next > units) {
		h->bg_credit = units;
		return 0;
	}
	h->bg_credit = 0;
	h->bg_units = units;
	return units * h->bg_us / row_us;
}

void lane_bg_run(lane_host *h) {
	const lane_background *b = &h->cfg.background;
	if (!(h->bg_units > 0)) return;
	const uint64_t t0 = base_now_us();
	const double spent = b->run(b->arg, h->pool, h->bg_units);
	const double dt = (double)(base_now_us() - t0);
	h->bg_units = 0;
	if (!(spent > 0)) return;
	// up at once, down slowly: a slow piece is not priced low again in the next round
	const double us = dt / spent;
	h->bg_us = us > h->bg_us ? us : 0.9 * h->bg_us + 0.1 * us;
}

void lane_bg_boundary(lane_host *h) {
	const lane_background *b = &h->cfg.background;
	h->bg_more = b->boundary && b->boundary(b->arg);
}

void lane_bg_halt(lane_host *h) {
	const lane_background *b = &h->cfg.background;
	h->bg_more = false;
	if (b->halt) b->halt(b->arg);
}

void lane_host_wake(lane_host *h) {
	pthread_mutex_lock(&h->mu);
	h->bg_woken = true;
	pthread_cond_signal(&h->work);
	pthread_mutex_unlock(&h->mu);
}
