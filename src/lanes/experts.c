// lanes: the expert observer's host side — after each forward pass the rows' router choices
// go into counters by domain and phase (prompt or generated) under a lock the engine holds
// only for that; readers copy the counters under it and never wait for a round.
#include "lanes/lanes_int.h"

#include <stdlib.h>
#include <string.h>

int lane_check_domain(const char *d, char *err, size_t errlen) {
	size_t n = d ? strlen(d) : 0;
	bool ok = n >= 1 && n <= LANE_DOMAIN_MAX;
	for (size_t i = 0; ok && i < n; i++) {
		const char c = d[i];
		ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
	}
	if (!ok)
		return base_seterr(err, errlen, LANES_EINVAL, "a domain is 1 to %d letters, digits, '_', '-' or '.'", LANE_DOMAIN_MAX);
	return LANES_OK;
}

uint64_t lane_experts_bytes(const model_hparams *hp, const lane_config *cfg) {
	if (!cfg->experts || !hp->n_experts) return 0;
	const uint64_t rows = (uint64_t)lane_max_rows(cfg), L = (uint64_t)hp->n_layers, E = (uint64_t)hp->n_experts;
	const uint64_t routes = rows * L * (uint64_t)hp->n_experts_used * (sizeof(int32_t) + sizeof(float));
	const uint64_t counters = LANE_EXPERT_SLOTS * LANE_PHASE_COUNT * (8 + L * E * 16 + L * E * (E - 1) / 2 * 8);
	return routes + counters + rows * sizeof(int32_t);
}

int lane_experts_open(lane_host *h, int32_t max_rows, char *err, size_t errlen) {
	if (!h->cfg.experts || !h->hp.n_experts) return LANES_OK;
	int rc = model_routes_new(&h->routes, &h->hp, max_rows, err, errlen);
	if (!rc) rc = model_experts_new(&h->experts, &h->hp, LANE_EXPERT_SLOTS * LANE_PHASE_COUNT, err, errlen);
	h->row_group = malloc((size_t)max_rows * sizeof *h->row_group);
	if (!rc && !h->row_group) rc = base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	if (rc) {
		model_routes_free(h->routes);
		model_experts_free(h->experts);
		free(h->row_group);
		h->routes = NULL, h->experts = NULL, h->row_group = NULL;
		return rc;
	}
	pthread_mutex_init(&h->exp_mu, NULL);
	snprintf(h->exp_name[LANE_EXPERT_SLOTS - 1], sizeof h->exp_name[0], "other");
	h->exp_since_us = base_now_us();
	model_ws_set_routes(h->ws, h->routes);
	return LANES_OK;
}

void lane_experts_close(lane_host *h) {
	if (!h->routes) return;
	model_ws_set_routes(h->ws, NULL);
	model_routes_free(h->routes);
	model_experts_free(h->experts);
	free(h->row_group);
	pthread_mutex_destroy(&h->exp_mu);
}

bool lane_host_observes_experts(const lane_host *h) { return h->routes != NULL; }

// Under exp_mu: r's domain slot in the current window; a new name takes the next free slot,
// and once they are taken it counts as "other" (as does the name "other" itself).
static int32_t domain_slot(lane_host *h, lane_req *r) {
	if (r->dom_window == h->exp_window + 1) return r->dom_slot;
	int32_t slot = 0;
	if (r->domain[0]) {
		slot = LANE_EXPERT_SLOTS - 1;
		for (int32_t i = 1; i <= h->exp_named && slot == LANE_EXPERT_SLOTS - 1; i++)
			if (!strcmp(h->exp_name[i], r->domain)) slot = i;
		if (slot == LANE_EXPERT_SLOTS - 1 && h->exp_named < LANE_EXPERT_DOMAINS && strcmp(r->domain, "other")) {
			slot = ++h->exp_named;
			memcpy(h->exp_name[slot], r->domain, sizeof h->exp_name[slot]);
		}
	}
	r->dom_window = h->exp_window + 1;
	r->dom_slot = slot;
	return slot;
}

void lane_experts_count(lane_host *h, int32_t n) {
	if (!h->routes) return;
	pthread_mutex_lock(&h->exp_mu);
	for (int32_t i = 0; i < n; i++) {
		lane_req *r = h->lanes[h->row_lane[i]];
		// a prompt row is a position before the prompt's end; decode and draft rows follow it
		const int phase = !r ? 0 : h->rows[i].pos < r->n_prompt ? LANE_PHASE_PROMPT : LANE_PHASE_GENERATED;
		h->row_group[i] = r ? domain_slot(h, r) * LANE_PHASE_COUNT + phase : -1;
	}
	model_experts_add(h->experts, h->routes, h->row_group);
	pthread_mutex_unlock(&h->exp_mu);
}

int lane_experts_init(const lane_host *h, lane_experts *e) {
	memset(e, 0, sizeof *e);
	if (!h->routes) return LANES_ENOTFOUND;
	return model_experts_new(&e->counts, &h->hp, LANE_EXPERT_SLOTS * LANE_PHASE_COUNT, NULL, 0);
}

void lane_experts_release(lane_experts *e) {
	model_experts_free(e->counts);
	e->counts = NULL;
}

void lane_host_experts(lane_host *h, lane_experts *e, bool reset) {
	LANES_ASSERT(h->routes && e->counts);
	pthread_mutex_lock(&h->exp_mu);
	model_experts_copy(e->counts, h->experts);
	memcpy(e->name, h->exp_name, sizeof e->name);
	e->n_named = h->exp_named;
	e->window = h->exp_window;
	const uint64_t now = base_now_us();
	e->seconds = (double)(now - h->exp_since_us) / 1e6;
	if (reset) {
		model_experts_clear(h->experts);
		for (int32_t i = 1; i <= h->exp_named; i++) h->exp_name[i][0] = 0;
		h->exp_named = 0;
		h->exp_window++;
		h->exp_since_us = now;
	}
	pthread_mutex_unlock(&h->exp_mu);
}
