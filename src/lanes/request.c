// lanes: the request contract — the one set of bounds every request is checked against,
// narrowed per API by the caller's lane_api, and the seed drawn for requests without one.
#include "lanes/lanes_int.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct {
	const char *name;
	double lo, hi;            // inclusive, but lo itself is refused when lo_open
	bool lo_open;
} host_bound;

// The host's bounds: the widest any API may offer.
static const host_bound host[LANE_F_COUNT] = {
	[LANE_F_PROMPT] = {"prompt", 1, INT32_MAX, false},
	[LANE_F_MAX_TOKENS] = {"max_tokens", 0, INT32_MAX, false},
	[LANE_F_TEMPERATURE] = {"temperature", 0, 1000, false},
	[LANE_F_TOP_K] = {"top_k", 0, INT32_MAX, false},
	[LANE_F_TOP_P] = {"top_p", 0, 1, true},
	[LANE_F_MIN_P] = {"min_p", 0, 1, false},
	[LANE_F_TYPICAL_P] = {"typical_p", 0, 1, true},
	[LANE_F_REPEAT_PENALTY] = {"repeat_penalty", 0, 100, true},
	[LANE_F_REPEAT_LAST_N] = {"repeat_last_n", 0, INT32_MAX, false},
	[LANE_F_PRESENCE_PENALTY] = {"presence_penalty", -2, 2, false},
	[LANE_F_FREQUENCY_PENALTY] = {"frequency_penalty", -2, 2, false},
	[LANE_F_LOGIT_BIAS] = {"logit_bias", -INFINITY, HUGE_VAL, false},
	[LANE_F_STOP] = {"stop", 0, LANE_MAX_STOPS, false},
	[LANE_F_STOP_IDS] = {"stop_ids", 0, 1024, false},
	[LANE_F_TOP_LOGPROBS] = {"top_logprobs", 0, LANE_MAX_TOP_LOGPROBS, false},
	[LANE_F_CHOICE] = {"choice", 0, INT32_MAX, false},
	[LANE_F_DRY_MULTIPLIER] = {"dry_multiplier", LANE_RANGE_DRY_MULTIPLIER, false},
	[LANE_F_DRY_BASE] = {"dry_base", LANE_RANGE_DRY_BASE, false},
	[LANE_F_DRY_ALLOWED_LENGTH] = {"dry_allowed_length", LANE_RANGE_DRY_ALLOWED_LENGTH, false},
	[LANE_F_DRY_PENALTY_LAST_N] = {"dry_penalty_last_n", LANE_RANGE_DRY_PENALTY_LAST_N, false},
	[LANE_F_DRY_SEQUENCE_BREAKERS] = {"dry_sequence_breakers", 0, LANE_MAX_DRY_BREAKERS, false},
	[LANE_F_XTC_PROBABILITY] = {"xtc_probability", LANE_RANGE_XTC_PROBABILITY, false},
	[LANE_F_XTC_THRESHOLD] = {"xtc_threshold", LANE_RANGE_XTC_THRESHOLD, false},
	[LANE_F_TOP_N_SIGMA] = {"top_n_sigma", LANE_RANGE_TOP_N_SIGMA, false},
	[LANE_F_DYNATEMP_RANGE] = {"dynatemp_range", LANE_RANGE_DYNATEMP_RANGE, false},
	[LANE_F_DYNATEMP_EXPONENT] = {"dynatemp_exponent", LANE_RANGE_DYNATEMP_EXPONENT, false},
	[LANE_F_MIROSTAT] = {"mirostat", LANE_RANGE_MIROSTAT, false},
	[LANE_F_MIROSTAT_TAU] = {"mirostat_tau", LANE_RANGE_MIROSTAT_TAU, false},
	[LANE_F_MIROSTAT_ETA] = {"mirostat_eta", LANE_RANGE_MIROSTAT_ETA, false},
	[LANE_F_SAMPLERS] = {"samplers", 0, LANE_MAX_SAMPLERS, false},
};

// llama-server's default sequence breakers.
static const char *const DRY_BREAKERS[] = {"\n", ":", "\"", "*"};

#define STOP_MAX_BYTES 1024

void lane_request_init(lane_request *q) {
	memset(q, 0, sizeof *q);
	q->sampling.temperature = 1.0f;
	q->sampling.top_p = 1.0f;
	q->sampling.typical_p = 1.0f;
	q->sampling.repeat_penalty = 1.0f;
	q->sampling.dry_base = (float)LANE_DEFAULT_DRY_BASE;
	q->sampling.dry_allowed_length = LANE_DEFAULT_DRY_ALLOWED_LENGTH;
	q->sampling.dry_penalty_last_n = LANE_DEFAULT_DRY_PENALTY_LAST_N;
	q->sampling.dry_breakers = DRY_BREAKERS;
	q->sampling.n_dry_breakers = (int32_t)(sizeof DRY_BREAKERS / sizeof DRY_BREAKERS[0]);
	q->sampling.xtc_threshold = (float)LANE_DEFAULT_XTC_THRESHOLD;
	q->sampling.top_n_sigma = (float)LANE_DEFAULT_TOP_N_SIGMA;
	q->sampling.dynatemp_exponent = (float)LANE_DEFAULT_DYNATEMP_EXPONENT;
	q->sampling.mirostat_tau = (float)LANE_DEFAULT_MIROSTAT_TAU;
	q->sampling.mirostat_eta = (float)LANE_DEFAULT_MIROSTAT_ETA;
	q->draft = true;
	q->normalize = true;
}

const char *lane_field_name(enum lane_field f) { return (unsigned)f < LANE_F_COUNT ? host[f].name : "?"; }

const char *lane_api_name(const lane_api *api, enum lane_field f) {
	if (api && (unsigned)f < LANE_F_COUNT && api->name[f]) return api->name[f];
	return lane_field_name(f);
}

int lane_check_value(const lane_api *api, enum lane_field f, double v, char *err, size_t errlen) {
	if ((unsigned)f >= LANE_F_COUNT) return base_seterr(err, errlen, LANES_EINVAL, "unknown field %d", (int)f);
	const host_bound *b = &host[f];
	double lo = b->lo, hi = b->hi;
	bool lo_open = b->lo_open;
	if (api && api->range[f].set) {
		if (api->range[f].lo > lo || (api->range[f].lo == lo && !lo_open)) lo = api->range[f].lo, lo_open = false;
		if (api->range[f].hi < hi) hi = api->range[f].hi;
	}
	const char *name = lane_api_name(api, f);
	if (isnan(v) || v < lo || v > hi || (lo_open && v == lo)) {
		if (lo_open) return base_seterr(err, errlen, LANES_EINVAL, "%s must be greater than %.15g and at most %.15g, got %.15g", name, lo, hi, v);
		return base_seterr(err, errlen, LANES_EINVAL, "%s must be between %.15g and %.15g, got %.15g", name, lo, hi, v);
	}
	return 0;
}

// Checks one field and records it as the bad one on failure.
static int field(const lane_api *api, enum lane_field f, double v, char *err, size_t errlen, enum lane_field *bad) {
	int rc = lane_check_value(api, f, v, err, errlen);
	if (rc && bad) *bad = f;
	return rc;
}

static int fail(enum lane_field f, enum lane_field *bad, int rc) {
	if (bad) *bad = f;
	return rc;
}

int lane_check_params(const lane_request *q, const lane_api *api, int32_t n_vocab, char *err, size_t errlen,
		      enum lane_field *bad) {
	const lane_sampling *s = &q->sampling;
	if (field(api, LANE_F_TEMPERATURE, s->temperature, err, errlen, bad) ||
	    field(api, LANE_F_TOP_K, s->top_k, err, errlen, bad) || field(api, LANE_F_TOP_P, s->top_p, err, errlen, bad) ||
	    field(api, LANE_F_MIN_P, s->min_p, err, errlen, bad) ||
	    (s->typical_p && field(api, LANE_F_TYPICAL_P, s->typical_p, err, errlen, bad)) || // 0: not set
	    field(api, LANE_F_REPEAT_PENALTY, s->repeat_penalty, err, errlen, bad) ||
	    field(api, LANE_F_REPEAT_LAST_N, s->repeat_last_n, err, errlen, bad) ||
	    field(api, LANE_F_PRESENCE_PENALTY, s->presence_penalty, err, errlen, bad) ||
	    field(api, LANE_F_FREQUENCY_PENALTY, s->frequency_penalty, err, errlen, bad) ||
	    field(api, LANE_F_CHOICE, s->choice, err, errlen, bad) ||
	    field(api, LANE_F_DRY_MULTIPLIER, s->dry_multiplier, err, errlen, bad) ||
	    field(api, LANE_F_XTC_PROBABILITY, s->xtc_probability, err, errlen, bad) ||
	    field(api, LANE_F_TOP_N_SIGMA, s->top_n_sigma, err, errlen, bad) ||
	    field(api, LANE_F_DYNATEMP_RANGE, s->dynatemp_range, err, errlen, bad) ||
	    field(api, LANE_F_MIROSTAT, s->mirostat, err, errlen, bad) ||
	    field(api, LANE_F_SAMPLERS, s->n_samplers, err, errlen, bad) ||
	    // a sampler's other parameters count where it is on (a zeroed request leaves them 0)
	    (s->dry_multiplier && (field(api, LANE_F_DRY_BASE, s->dry_base, err, errlen, bad) ||
				   field(api, LANE_F_DRY_ALLOWED_LENGTH, s->dry_allowed_length, err, errlen, bad) ||
				   field(api, LANE_F_DRY_PENALTY_LAST_N, s->dry_penalty_last_n, err, errlen, bad) ||
				   field(api, LANE_F_DRY_SEQUENCE_BREAKERS, s->n_dry_breakers, err, errlen, bad))) ||
	    (s->xtc_probability && field(api, LANE_F_XTC_THRESHOLD, s->xtc_threshold, err, errlen, bad)) ||
	    (s->dynatemp_range && field(api, LANE_F_DYNATEMP_EXPONENT, s->dynatemp_exponent, err, errlen, bad)) ||
	    (s->mirostat && (field(api, LANE_F_MIROSTAT_TAU, s->mirostat_tau, err, errlen, bad) ||
			     field(api, LANE_F_MIROSTAT_ETA, s->mirostat_eta, err, errlen, bad))) ||
	    (q->max_tokens && field(api, LANE_F_MAX_TOKENS, q->max_tokens, err, errlen, bad)) || // 0: not sent
	    field(api, LANE_F_TOP_LOGPROBS, q->top_logprobs, err, errlen, bad))
		return LANES_EINVAL;
	const char *dn = lane_api_name(api, LANE_F_DRY_SEQUENCE_BREAKERS);
	if (s->n_dry_breakers < 0 || s->n_dry_breakers > LANE_MAX_DRY_BREAKERS || (s->n_dry_breakers && !s->dry_breakers))
		return fail(LANE_F_DRY_SEQUENCE_BREAKERS, bad, base_seterr(err, errlen, LANES_EINVAL, "%s is missing", dn));
	for (int32_t i = 0; i < s->n_dry_breakers; i++) {
		const size_t L = s->dry_breakers[i] ? strlen(s->dry_breakers[i]) : 0;
		if (L == 0 || L > LANE_DRY_BREAKER_MAX)
			return fail(LANE_F_DRY_SEQUENCE_BREAKERS, bad,
				    base_seterr(err, errlen, LANES_EINVAL, "%s: breaker %d must be 1..%d bytes", dn, i, LANE_DRY_BREAKER_MAX));
	}
	for (int32_t i = 0; i < s->n_samplers; i++)
		if (s->samplers[i] >= SAMPLE_STAGES)
			return fail(LANE_F_SAMPLERS, bad,
				    base_seterr(err, errlen, LANES_EINVAL, "%s: entry %d is not a sampler", lane_api_name(api, LANE_F_SAMPLERS), i));
	if (q->prompt_logprobs && (q->prompt_top_logprobs < 0 || q->prompt_top_logprobs > LANE_MAX_TOP_LOGPROBS))
		return fail(LANE_F_TOP_LOGPROBS, bad, base_seterr(err, errlen, LANES_EINVAL, "prompt_logprobs must be between 0 and %d, got %d",
								 LANE_MAX_TOP_LOGPROBS, q->prompt_top_logprobs));
	const char *bn = lane_api_name(api, LANE_F_LOGIT_BIAS);
	if (s->n_bias < 0 || s->n_bias > n_vocab || (s->n_bias && !s->bias))
		return fail(LANE_F_LOGIT_BIAS, bad, base_seterr(err, errlen, LANES_EINVAL, "%s has too many entries", bn));
	for (int32_t i = 0; i < s->n_bias; i++) {
		if (s->bias[i].token < 0 || s->bias[i].token >= n_vocab)
			return fail(LANE_F_LOGIT_BIAS, bad,
				    base_seterr(err, errlen, LANES_EINVAL, "%s token %d is not in the vocabulary", bn, s->bias[i].token));
		if (isnan(s->bias[i].bias) || s->bias[i].bias == INFINITY)
			return fail(LANE_F_LOGIT_BIAS, bad,
				    base_seterr(err, errlen, LANES_EINVAL, "%s for token %d is not a number", bn, s->bias[i].token));
		// a ban (-INFINITY) is not a bias: an API's range bounds the finite ones
		if (s->bias[i].bias != -INFINITY && field(api, LANE_F_LOGIT_BIAS, s->bias[i].bias, err, errlen, bad))
			return LANES_EINVAL;
	}
	if (q->n_stop_ids < 0 || q->n_stop_ids > host[LANE_F_STOP_IDS].hi || (q->n_stop_ids && !q->stop_ids))
		return fail(LANE_F_STOP_IDS, bad, base_seterr(err, errlen, LANES_EINVAL, "too many stop tokens"));
	for (int32_t i = 0; i < q->n_stop_ids; i++)
		if (q->stop_ids[i] < 0 || q->stop_ids[i] >= n_vocab)
			return fail(LANE_F_STOP_IDS, bad,
				    base_seterr(err, errlen, LANES_EINVAL, "stop token %d is not in the vocabulary", q->stop_ids[i]));
	const char *sn = lane_api_name(api, LANE_F_STOP);
	if (q->n_stop_strs < 0 || q->n_stop_strs > LANE_MAX_STOPS || (q->n_stop_strs && !q->stop_strs))
		return fail(LANE_F_STOP, bad, base_seterr(err, errlen, LANES_EINVAL, "%s: at most %d stop sequences", sn, LANE_MAX_STOPS));
	for (int32_t i = 0; i < q->n_stop_strs; i++) {
		size_t L = q->stop_strs[i] ? strlen(q->stop_strs[i]) : 0;
		if (L == 0 || L > STOP_MAX_BYTES)
			return fail(LANE_F_STOP, bad,
				    base_seterr(err, errlen, LANES_EINVAL, "%s: stop sequence %d must be 1..%d bytes", sn, i, STOP_MAX_BYTES));
	}
	if (lane_think_check(q, n_vocab, err, errlen)) return LANES_EINVAL;
	return lane_constrain_check(q, err, errlen);
}

int lane_check_prompt(const lane_host *h, const lane_request *q, const lane_api *api, char *err, size_t errlen,
		      enum lane_field *bad) {
	const int32_t nv = h->hp.n_vocab;
	const char *pn = lane_api_name(api, LANE_F_PROMPT);
	if (!q->prompt || q->n_prompt < 1)
		return fail(LANE_F_PROMPT, bad, base_seterr(err, errlen, LANES_EINVAL, "%s is empty: it encodes to no tokens", pn));
	for (int32_t i = 0; i < q->n_prompt; i++)
		if (q->prompt[i] < 0 || q->prompt[i] >= nv)
			return fail(LANE_F_PROMPT, bad,
				    base_seterr(err, errlen, LANES_EINVAL, "prompt token %d at index %d is not in the vocabulary (0..%d)",
						 q->prompt[i], i, nv - 1));
	if (h->hp.encoder && q->embed == LANE_EMBED_OFF)
		return fail(LANE_F_PROMPT, bad,
			    base_seterr(err, errlen, LANES_EINVAL,
					 "this model (%s) is an encoder: it generates no text; use it through /v1/rerank, /v1/score or /v1/embeddings",
					 h->hp.arch));
	// a generation needs room for one token; a larger max_tokens is capped at the context
	const int32_t want = q->embed != LANE_EMBED_OFF ? 0 : 1;
	if ((int64_t)q->n_prompt + want <= h->max_ctx) return 0;
	if (h->cfg.window_max > 0)
		return fail(LANE_F_PROMPT, bad,
			    base_seterr(err, errlen, LANES_ELIMIT,
					 "the prompt (%d tokens) is too long for the largest window the memory budget allows (%d tokens)",
					 q->n_prompt, h->max_ctx));
	return fail(LANE_F_PROMPT, bad,
		    base_seterr(err, errlen, LANES_ELIMIT, "the prompt (%d tokens) is too long for the context of %d tokens a request may use",
				 q->n_prompt, h->max_ctx));
}

int lane_check_prompt_size(const lane_host *h, size_t n_parts, size_t n_bytes, const lane_api *api, char *err,
			   size_t errlen, enum lane_field *bad) {
	const char *pn = lane_api_name(api, LANE_F_PROMPT);
	if (n_parts > (size_t)h->max_ctx)
		return fail(LANE_F_PROMPT, bad,
			    base_seterr(err, errlen, LANES_ELIMIT,
					 "%s has %zu entries: more than the context of %d tokens a request may use holds (each takes a token at least)",
					 pn, n_parts, h->max_ctx));
	if (n_bytes / h->max_piece > (size_t)h->max_ctx)
		return fail(LANE_F_PROMPT, bad,
			    base_seterr(err, errlen, LANES_ELIMIT,
					 "%s (%zu bytes) cannot fit the context of %d tokens a request may use (no token covers more than %zu bytes)",
					 pn, n_bytes, h->max_ctx, h->max_piece));
	return 0;
}

int64_t lane_output_entries(const lane_request *q, int32_t n, int32_t max_ctx) {
	if (!q->logprobs) return 0;
	// a max_tokens past the context is capped there, as submit caps it
	const int64_t tokens = q->max_tokens > 0 && q->max_tokens < max_ctx ? q->max_tokens : max_ctx;
	return (int64_t)(n > 0 ? n : 1) * tokens * (1 + (q->top_logprobs > 0 ? q->top_logprobs : 0));
}

uint64_t lane_draw_seed(lane_host *h) {
	uint64_t x = splitmix64(atomic_fetch_add(&h->seed_state, 0x9e3779b97f4a7c15ull));
	return x & ((1ull << 53) - 1);
}
