// lanes: the queue and admission — lane_submit checks a request against the contract and
// queues it (never blocking on the engine); at each round boundary the engine admits requests
// with a lease first, then from the queue's head in FIFO order, while a lane and the KV pages
// the request will need are free beyond what leases hold.
#include "lanes/lanes_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// Pages a request needs for its whole life: prompt plus every token it may generate.
static int32_t request_pages(const lane_host *h, const lane_req *r) {
	return lane_pages_for(h, (int64_t)r->n_prompt + r->max_tokens);
}

// Admits r to a free lane when one is free beyond those leases hold (r's own claim aside)
// and its pages fit beside the pages admitted requests and leases hold; true when it did.
static bool admit_one(lane_host *h, lane_req *r, int32_t *n_free) {
	if (*n_free <= lane_lease_held_lanes(h, r)) return false;
	int32_t lane = -1;
	for (int32_t i = 0; i < h->cfg.lanes && lane < 0; i++)
		if (!h->lanes[i]) lane = i;
	if (lane < 0) return false;
	// the request gets the window it needs (submit checked the budget allows it)
	const int32_t tokens = r->n_prompt + r->max_tokens;
	if (h->cfg.window_max > 0 && tokens > atomic_load(&h->window)) lane_window_set(h, tokens);
	const int32_t total = kv_pages_limit(h->kv), need = request_pages(h, r);
	if (h->pages_reserved + need + lane_lease_held_pages(h, r) > total) return false;
	lane_lease_unclaim(h, r);
	r->lane = lane;
	r->pages_reserved = need;
	h->pages_reserved += need;
	h->lanes[lane] = r;
	(*n_free)--;
	return true;
}

// Requests with a lease first, in queue order, then the others in FIFO order: a request that
// does not fit yet waits, and so does everything behind it (the others wait for leased ones).
void lane_admit(lane_host *h, lane_req **cancelled, int32_t *n_cancelled) {
	lane_req **pp = &h->qhead, *prev = NULL;
	while (*pp) {
		lane_req *r = *pp;
		if (atomic_load(&r->cancel)) {
			*pp = r->next;
			if (h->qtail == r) h->qtail = prev;
			h->qlen--;
			lane_lease_unclaim(h, r);
			cancelled[(*n_cancelled)++] = r;
			continue;
		}
		prev = r;
		pp = &r->next;
	}
	lane_lease_expire(h, base_now_us());
	int32_t n_free = 0;
	for (int32_t i = 0; i < h->cfg.lanes; i++) n_free += !h->lanes[i];
	for (int pass = 0; pass < 2; pass++) {
		pp = &h->qhead;
		prev = NULL;
		while (*pp) {
			lane_req *r = *pp;
			if (r->claimed != (pass == 0)) {
				prev = r;
				pp = &r->next;
				continue;
			}
			if (!admit_one(h, r, &n_free)) {
				if (pass == 0) return;
				break;
			}
			*pp = r->next;
			if (h->qtail == r) h->qtail = prev;
			h->qlen--;
			r->next = NULL;
		}
	}
}

void lane_start_admitted(lane_host *h) {
	// each starts from the longest cached prefix of its prompt; the last prompt token is
	// always computed, for its logits or hidden state. An embedding pooled over more than its
	// last token computes every token: its pool reads them
	for (int32_t i = 0; i < h->cfg.lanes; i++) {
		lane_req *r = h->lanes[i];
		if (!r || r->started) continue;
		r->started = true;
		lane_draft_start(h, r);
		// a request for prompt log-probabilities computes every row: a cached one has no logits
		// an encoder's rows depend on the whole sequence: no prefix of it can be reused
		if (h->cfg.prefix_cache && (r->embed == LANE_EMBED_OFF || r->embed == LANE_EMBED_LAST) && !r->plp && !h->hp.encoder) {
			r->n_cached = r->n_filled = kv_prefix_attach(h->kv, i, r->prefix_root, r->prompt, r->n_prompt - 1);
			h->stats.prefix_hit_tokens += (uint64_t)r->n_cached;
			h->stats.prefix_query_tokens += (uint64_t)r->n_prompt;
			// a recurrent state's checkpoint, where the next turn resumes: the prompt's last whole page before its last token
			const int32_t pt = kv_config_of(h->kv)->page_tokens, at = (r->n_prompt - 1) / pt * pt;
			kv_seq_capture(h->kv, i, 0, at > r->n_filled ? at : 0);
		}
	}
}

// r takes a reference on each adapter of set, the key its prefix-cache chain starts from (a
// function of the adapters' ids and scales, in order: another set or version never shares a
// page), and the price of its rows' terms.
static void lane_lora_bind(lane_req *r, const model_lora_set *set) {
	r->lora = *set;
	uint64_t key = 0;
	for (int32_t i = 0; i < set->n; i++) {
		model_lora_ref(set->use[i].lora);
		model_lora_info info;
		model_lora_info_of(set->use[i].lora, &info);
		const struct { uint64_t id; float scale; uint32_t pad; } k = {model_lora_id(set->use[i].lora), set->use[i].scale, 0};
		key = base_hash64(&k, sizeof k, key);
		r->lora_cost += info.share * LANE_LORA_MADD_COST;
		r->lora_read[i] = (double)info.bytes / r->host->weight_bytes;
	}
	r->prefix_root = set->n ? (key ? key : 1) : 0;
}

// r's DRY from q: the map of the tokens whose text holds a sequence breaker, and the scratch
// for the most tokens it scans. 0, or LANES_ENOMEM.
static int dry_attach(lane_host *h, lane_req *r, const lane_request *q) {
	const lane_sampling *s = &q->sampling;
	r->s.dry_breakers = NULL, r->s.n_dry_breakers = 0; // the caller's: the map holds them
	if (s->dry_multiplier == 0.0f || s->dry_penalty_last_n == 0) return 0;
	const int64_t most = (int64_t)q->n_prompt + r->max_tokens;
	const int64_t scan = s->dry_penalty_last_n > 0 && s->dry_penalty_last_n < most ? s->dry_penalty_last_n : most;
	r->dry_z = malloc((size_t)(2 * scan) * sizeof *r->dry_z);
	if (!r->dry_z) return LANES_ENOMEM;
	const int32_t nv = h->hp.n_vocab;
	if (s->n_dry_breakers) {
		r->dry_breaker = calloc((size_t)nv, 1);
		if (!r->dry_breaker) return LANES_ENOMEM;
		for (int32_t t = 0; t < nv; t++) {
			size_t n = 0;
			const char *piece = tok_piece(h->vocab, t, 0, &n);
			for (int32_t i = 0; piece && i < s->n_dry_breakers && !r->dry_breaker[t]; i++)
				r->dry_breaker[t] = memmem(piece, n, s->dry_breakers[i], strlen(s->dry_breakers[i])) != NULL;
		}
	}
	r->dry = (sample_dry){s->dry_multiplier, s->dry_base, s->dry_allowed_length, s->dry_penalty_last_n, r->dry_breaker};
	return 0;
}

int lane_submit(lane_host *h, const lane_request *q, lane_req **out, char *err, size_t errlen) {
	*out = NULL;
	int rc = lane_check_params(q, q->api, h->hp.n_vocab, err, errlen, NULL);
	if (!rc) rc = lane_check_prompt(h, q, q->api, err, errlen, NULL);
	if (!rc && q->lora && (q->lora->n < 0 || q->lora->n > MODEL_LORA_MAX))
		rc = base_seterr(err, errlen, LANES_EINVAL, "at most %d adapters per request", MODEL_LORA_MAX);
	for (int32_t i = 0; !rc && q->lora && i < q->lora->n; i++)
		if (!q->lora->use[i].lora || model_lora_base(q->lora->use[i].lora) != h->m || !isfinite(q->lora->use[i].scale))
			rc = base_seterr(err, errlen, LANES_EINVAL, "adapter %d: not loaded for this model, or a scale that is not finite", i);
	if (!rc && q->domain && q->domain[0]) rc = lane_check_domain(q->domain, err, errlen);
	if (rc) {
		atomic_fetch_add(&h->rejected, 1);
		return rc;
	}
	lane_req *r = calloc(1, sizeof *r);
	if (!r) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	pthread_mutex_init(&r->mu, NULL);
	pthread_mutex_init(&r->nmu, NULL);
	pthread_cond_init(&r->cv, NULL);
	atomic_init(&r->refs, 2);
	r->host = h;
	r->lane = -1;
	r->n_prompt = q->n_prompt;
	r->s = q->sampling;
	r->explicit_max = q->max_tokens > 0;
	r->embed = q->embed;
	r->normalize = q->normalize;
	if (q->lora) lane_lora_bind(r, q->lora);
	if (q->domain) snprintf(r->domain, sizeof r->domain, "%s", q->domain);
	if (q->embed != LANE_EMBED_OFF) r->max_tokens = 0;
	// past the context, generation ends there with "length": the cap depends on the prompt
	// and the host's largest context alone, never on what else runs
	else if (q->max_tokens > 0) r->max_tokens = imin(q->max_tokens, h->max_ctx - q->n_prompt);
	else if (h->cfg.window_max > 0) {
		// without max_tokens a request may run to the current window (or one window past its prompt)
		const int32_t w = atomic_load(&h->window);
		r->max_tokens = w - q->n_prompt >= 1 ? w - q->n_prompt : imin(w, h->max_ctx - q->n_prompt);
	} else r->max_tokens = h->max_ctx - q->n_prompt;
	r->ignore_eos = q->ignore_eos;
	r->logprobs = q->logprobs || q->top_logprobs > 0;
	r->top_logprobs = q->top_logprobs;
	r->draft = q->draft;
	r->prompt = malloc((size_t)q->n_prompt * sizeof *r->prompt);
	r->gen = malloc((size_t)(r->max_tokens ? r->max_tokens : 1) * sizeof *r->gen);
	r->detok = tok_stream_new(h->vocab, 0);
	bool ok = r->prompt && r->gen && r->detok;
	if (ok && q->prompt_logprobs && q->embed == LANE_EMBED_OFF) {
		r->pk = q->prompt_top_logprobs;
		r->plp = calloc((size_t)q->n_prompt, sizeof *r->plp);
		r->ptop = r->pk ? calloc((size_t)q->n_prompt * (size_t)r->pk, sizeof *r->ptop) : NULL;
		ok = r->plp && (r->ptop || !r->pk);
	}
	if (ok && r->embed != LANE_EMBED_OFF) {
		r->pool_sum = calloc((size_t)h->hp.n_embd, sizeof *r->pool_sum);
		const size_t nv = r->embed == LANE_EMBED_NONE ? (size_t)q->n_prompt : 1;
		r->vec = malloc(nv * (size_t)h->hp.n_embd * sizeof *r->vec);
		ok = r->pool_sum && r->vec;
	}
	if (ok && q->sampling.n_bias) {
		r->bias = malloc((size_t)q->sampling.n_bias * sizeof *r->bias);
		if ((ok = r->bias != NULL)) memcpy(r->bias, q->sampling.bias, (size_t)q->sampling.n_bias * sizeof *r->bias);
	}
	r->s.bias = r->bias;
	if (ok) ok = dry_attach(h, r, q) == 0;
	if (ok && q->n_stop_ids) {
		r->stop_ids = malloc((size_t)q->n_stop_ids * sizeof *r->stop_ids);
		if ((ok = r->stop_ids != NULL)) memcpy(r->stop_ids, q->stop_ids, (size_t)q->n_stop_ids * sizeof *r->stop_ids);
		r->n_stop_ids = q->n_stop_ids;
	}
	for (int32_t i = 0; ok && i < q->n_stop_strs; i++) {
		ok = (r->stops[i] = strdup(q->stop_strs[i])) != NULL;
		r->stop_len[i] = ok ? strlen(r->stops[i]) : 0;
		r->n_stops = i + 1;
	}
	if (!ok) {
		lreq_unref(r);
		lreq_unref(r);
		return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	}
	if ((rc = lane_constrain_attach(h, r, q, err, errlen))) {
		lreq_unref(r);
		lreq_unref(r);
		return rc;
	}
	memcpy(r->prompt, q->prompt, (size_t)q->n_prompt * sizeof *r->prompt);
	lane_think_attach(r, q);
	sha256_init(&r->sha);
	pthread_mutex_lock(&h->mu);
	if (h->halting || h->draining || h->quit) {
		pthread_mutex_unlock(&h->mu);
		atomic_fetch_add(&h->rejected, 1);
		lreq_unref(r);
		lreq_unref(r);
		return base_seterr(err, errlen, LANES_ECANCELLED, h->halting ? "%s" : "the server is draining", h->halt_reason);
	}
	// a request with a lease takes its lane from the lease, past a full queue
	if (!(q->lease && lane_lease_claim(h, q->lease, r)) && atomic_load(&h->open) >= h->cfg.queue + h->cfg.lanes) {
		pthread_mutex_unlock(&h->mu);
		atomic_fetch_add(&h->rejected, 1);
		lreq_unref(r);
		lreq_unref(r);
		return base_seterr(err, errlen, LANES_EBUSY, "the queue is full (%d waiting)", h->cfg.queue);
	}
	if (!r->s.has_seed) r->s.seed = lane_draw_seed(h);
	const lane_sampling *sp = &r->s;
	r->sp = (sample_params){sp->temperature, sp->top_k, sp->top_p, sp->min_p, sp->seed, sp->typical_p, sp->top_n_sigma,
				sp->xtc_probability, sp->xtc_threshold, sp->dynatemp_range, sp->dynatemp_exponent, sp->mirostat,
				sp->mirostat_tau, sp->mirostat_eta, {0}, sp->n_samplers};
	_Static_assert(sizeof r->sp.order == sizeof sp->samplers, "a request's sampler order fits the sampler's");
	memcpy(r->sp.order, sp->samplers, sizeof r->sp.order);
	r->pen = (sample_penalties){sp->repeat_penalty, sp->repeat_last_n, sp->presence_penalty, sp->frequency_penalty};
	r->mirostat_mu = 2.0f * sp->mirostat_tau;
	r->serial = ++h->serial;
	if (h->qtail) h->qtail->next = r;
	else h->qhead = r;
	h->qtail = r;
	h->qlen++;
	atomic_fetch_add(&h->open, 1);
	pthread_cond_signal(&h->work);
	pthread_mutex_unlock(&h->mu);
	*out = r;
	return 0;
}
