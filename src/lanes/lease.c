// lanes: capacity leases — lanes and KV pages held for a lessee (a peer about to forward a
// request here) until requests naming the lease take them, it is released, or it lapses.
// Every figure lives under the host's mutex, beside the queue that admission reads.
#include "lanes/lanes_int.h"

#include <inttypes.h>
#include <time.h>

static void drop(lane_host *h, int32_t i) {
	h->lease_lanes -= h->leases[i].lanes;
	h->lease_pages -= h->leases[i].pages;
	h->leases[i] = h->leases[--h->n_leases];
}

void lane_lease_expire(lane_host *h, uint64_t now_us) {
	for (int32_t i = 0; i < h->n_leases;)
		if (h->leases[i].expires_us <= now_us) drop(h, i);
		else i++;
}

static int32_t find(const lane_host *h, uint64_t id) {
	for (int32_t i = 0; i < h->n_leases; i++)
		if (h->leases[i].id == id) return i;
	return -1;
}

int32_t lane_lease_held_lanes(const lane_host *h, const lane_req *r) {
	return h->lease_lanes + h->claim_lanes - (r && r->claimed ? 1 : 0);
}

int32_t lane_lease_held_pages(const lane_host *h, const lane_req *r) {
	return h->lease_pages + h->claim_pages - (r && r->claimed ? r->claim_pages : 0);
}

// Pages no admitted request or lease holds.
static int32_t pages_free(const lane_host *h) {
	const int32_t n = kv_pages_limit(h->kv) - h->pages_reserved - lane_lease_held_pages(h, NULL);
	return n > 0 ? n : 0;
}

// Lanes no request (queued or running) or lease holds.
static int32_t lanes_free(const lane_host *h) {
	const int32_t n = h->cfg.lanes - atomic_load(&h->open) - h->lease_lanes;
	return n > 0 ? n : 0;
}

int lane_lease_new(lane_host *h, int32_t want, uint64_t spike_bytes, uint64_t ttl_us, lane_lease *out, char *err,
		   size_t errlen) {
	if (want < 1) return base_seterr(err, errlen, LANES_EINVAL, "want_concurrency must be at least 1");
	if (ttl_us < 1000 || ttl_us > LANE_LEASE_MAX_TTL_US)
		return base_seterr(err, errlen, LANES_EINVAL, "ttl_ms must be 1..%llu", (unsigned long long)(LANE_LEASE_MAX_TTL_US / 1000));
	const uint64_t pb = kv_page_bytes(h->kv);
	const uint64_t pages = (spike_bytes + pb - 1) / pb;
	const uint64_t now = base_now_us();
	int rc = 0;
	pthread_mutex_lock(&h->mu);
	lane_lease_expire(h, now);
	const int32_t lf = lanes_free(h), pf = pages_free(h);
	if (h->halting || h->draining || h->quit) {
		rc = base_seterr(err, errlen, LANES_ECANCELLED, "%s", h->halting ? h->halt_reason : "the server is draining");
	} else if (!lf || pages > (uint64_t)pf || h->n_leases >= h->cfg.lanes) {
		rc = base_seterr(err, errlen, LANES_EBUSY, "no capacity to lease: %d lanes free, %" PRIu64 " KV bytes free (%" PRIu64 " asked for)",
				 lf, (uint64_t)pf * pb, spike_bytes);
	} else {
		struct lane_lease_slot *l = &h->leases[h->n_leases++];
		// splitmix64 is a bijection: distinct serials give distinct ids
		do l->id = splitmix64(h->cfg.seed ^ ++h->lease_serial);
		while (!l->id);
		l->lanes = want < lf ? want : lf;
		l->pages = (int32_t)pages;
		l->expires_us = now + ttl_us;
		h->lease_lanes += l->lanes;
		h->lease_pages += l->pages;
		*out = (lane_lease){l->id, l->lanes, l->pages, (uint64_t)l->pages * pb, l->expires_us};
	}
	pthread_mutex_unlock(&h->mu);
	return rc;
}

int lane_lease_release(lane_host *h, uint64_t id) {
	pthread_mutex_lock(&h->mu);
	lane_lease_expire(h, base_now_us());
	const int32_t i = find(h, id);
	if (i >= 0) drop(h, i);
	// requests without a lease may now fit
	if (i >= 0) pthread_cond_signal(&h->work);
	pthread_mutex_unlock(&h->mu);
	return i >= 0 ? 0 : LANES_ENOTFOUND;
}

bool lane_lease_claim(lane_host *h, uint64_t id, lane_req *r) {
	lane_lease_expire(h, base_now_us());
	const int32_t i = find(h, id);
	if (i < 0) return false;
	struct lane_lease_slot *l = &h->leases[i];
	// an even share of the spike's pages per lane; the last lane takes what is left
	const int32_t share = l->lanes > 1 ? l->pages / l->lanes : l->pages;
	l->lanes--;
	l->pages -= share;
	h->lease_lanes--;
	h->lease_pages -= share;
	h->claim_lanes++;
	h->claim_pages += share;
	r->claimed = true;
	r->claim_pages = share;
	if (!l->lanes) drop(h, i);
	return true;
}

void lane_lease_unclaim(lane_host *h, lane_req *r) {
	if (!r->claimed) return;
	h->claim_lanes--;
	h->claim_pages -= r->claim_pages;
	r->claimed = false;
	r->claim_pages = 0;
}

void lane_lease_wait(lane_host *h) {
	uint64_t until = base_now_us() + 50000;
	for (int32_t i = 0; i < h->n_leases; i++)
		if (h->leases[i].expires_us < until) until = h->leases[i].expires_us;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	const uint64_t now = base_now_us(), wait_ns = until > now ? (until - now) * 1000 : 0;
	ts.tv_sec += (time_t)(wait_ns / 1000000000);
	ts.tv_nsec += (long)(wait_ns % 1000000000);
	if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
	pthread_cond_timedwait(&h->work, &h->mu, &ts);
}

void lane_lease_clear(lane_host *h) {
	h->n_leases = 0;
	h->lease_lanes = h->lease_pages = h->claim_lanes = h->claim_pages = 0;
}
