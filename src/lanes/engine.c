// lanes: the engine thread's loop — waits for work, admits at each round boundary, runs the
// round, gives the background's owner its boundary and publishes the snapshot (or waits while
// leases hold the queue back); halt (end everything failed, no allocation) and drain (refuse
// new submits) are asked for here from any thread.
#include "lanes/lanes_int.h"

#include <time.h>

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
		lane_finish(h, queued, LANE_EV_FAILED, 0, -1, h->halt_reason, NULL, 0);
		queued = next;
	}
	for (int32_t i = 0; i < h->cfg.lanes; i++)
		if (h->lanes[i]) lane_finish(h, h->lanes[i], LANE_EV_FAILED, 0, -1, h->halt_reason, NULL, 0);
}

// Under h->mu: waits until there is work (requests, or the background's), a halt or the end.
static void wait_for_work(lane_host *h) {
	while (!h->quit && !h->halting && !h->qhead && !any_active(h) && !h->bg_more && !h->bg_woken && !h->slot_head) {
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
		lane_window_follow(h);
		lane_publish(h);
		pthread_mutex_lock(&h->mu);
	}
}

// Under h->mu, released on return: takes the queue over and ends every request failed with
// the halt's reason, publishes, then waits for lane_host_free to end the thread.
static void halt(lane_host *h) {
	lane_req *q = h->qhead;
	h->qhead = h->qtail = NULL;
	h->qlen = 0;
	lane_lease_clear(h);
	struct lane_slot_task *st = lane_slot_take(h);
	pthread_mutex_unlock(&h->mu);
	lane_slot_tasks(h, st, true);
	halt_all(h, q);
	lane_bg_halt(h);
	h->stats.halted = true;
	lane_publish(h);
	pthread_mutex_lock(&h->mu);
	// submits fail while halting, so nothing more arrives
	while (!h->quit) pthread_cond_wait(&h->work, &h->mu);
	pthread_mutex_unlock(&h->mu);
}

void *lane_engine(void *arg) {
	lane_host *h = arg;
	for (;;) {
		int32_t n_cancelled = 0;
		lane_window_follow(h);
		pthread_mutex_lock(&h->mu);
		wait_for_work(h);
		if (h->halting) {
			halt(h);
			break;
		}
		if (h->quit) {
			pthread_mutex_unlock(&h->mu);
			break;
		}
		lane_admit(h, h->cancelled, &n_cancelled);
		const bool bg = h->bg_more || h->bg_woken;
		h->bg_woken = false;
		// nothing runs and the queue waits: leases hold the lanes or pages it needs
		const bool held = h->qhead && !any_active(h) && !bg;
		if (held) lane_lease_wait(h);
		struct lane_slot_task *st = lane_slot_take(h);
		// slot actions alone: no round to run after them
		const bool only_slots = st && !h->qhead && !any_active(h) && !bg;
		pthread_mutex_unlock(&h->mu);
		lane_end_cancelled(h, h->cancelled, n_cancelled);
		lane_slot_tasks(h, st, false);
		if (held || only_slots) {
			lane_publish(h);
			continue;
		}
		h->round++;
		uint64_t t0 = base_now_us();
		lane_run_round(h);
		lane_observe(&h->stats.round_seconds, (base_now_us() - t0) / 1e6);
		lane_bg_boundary(h);
		lane_publish(h);
	}
	return NULL;
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
