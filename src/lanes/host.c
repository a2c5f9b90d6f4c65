// lanes: the host's set-up and tear-down — configuration (defaults, checks, the compute
// memory a configuration needs) and lane_host_new / lane_host_free. The engine's work lives
// beside it: engine, admit, round, emit, finals, window, draft, snapshot (docs/design.md).
#include "lanes/lanes_int.h"

#include "sample/sample.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define MOD "lanes"

void lane_config_default(lane_config *c) {
	memset(c, 0, sizeof *c);
	c->lanes = 4;
	c->queue = LANE_DEFAULT_QUEUE;
	c->ctx = LANE_DEFAULT_CTX;
	c->round_ms = LANE_DEFAULT_ROUND_MS;
	c->page_tokens = 16;
	c->kv_type = KV_F16S;
	c->prefix_cache = true;
	c->draft = LANE_DRAFT_AUTO;
	c->draft_max = LANE_DEFAULT_DRAFT_MAX;
	c->seed = 0x6c616e6573ull;
	c->window_recent_s = 300;
	c->experts = true;
}

int32_t lane_max_rows(const lane_config *cfg) {
	LANES_ASSERT(cfg->draft_max >= 0 && cfg->draft_max <= LANE_MAX_DRAFT);
	return cfg->lanes * (1 + cfg->draft_max) + LANE_PROMPT_ROWS;
}

int32_t lane_window_stride(const lane_config *cfg, const model_hparams *hp) {
	const int64_t pt = cfg->page_tokens, s = (4 * (int64_t)hp->n_swa + pt - 1) / pt * pt;
	return s < INT32_MAX ? (int32_t)s : INT32_MAX / (int32_t)pt * (int32_t)pt;
}

int32_t lane_local_tokens(const lane_config *cfg, const model_hparams *hp, int32_t window) {
	if (hp->n_swa <= 0 || hp->full_attn_interval > 0 || hp->encoder) return 0;
	// its window, the windows a prompt's resumes read (its end, each stride), a round's rows
	const int64_t w = hp->n_swa, t = (2 + window / lane_window_stride(cfg, hp)) * w + lane_max_rows(cfg) + 3 * (int64_t)cfg->page_tokens;
	return t < window ? (int32_t)t : window;
}

// Rows of logits one round writes at most: a decode row and its drafts per live lane, or
// the last prompt row of a filling one.
static int32_t max_logit_rows(const lane_config *cfg) {
	LANES_ASSERT(cfg->draft_max >= 0 && cfg->draft_max <= LANE_MAX_DRAFT);
	return cfg->lanes * (1 + cfg->draft_max);
}

int32_t lane_config_max_context(const lane_config *cfg, const model_hparams *hp) {
	const int32_t train = hp->n_ctx_train > 0 ? hp->n_ctx_train : cfg->ctx;
	// an encoder's sequence runs whole in one round: its learned positions and a round's rows bound it
	if (hp->encoder) return imin(imin(train, cfg->ctx), LANE_PROMPT_ROWS);
	return cfg->window_max > 0 ? cfg->window_max : imin(train, cfg->ctx);
}

uint64_t lane_compute_bytes(const model_hparams *hp, const lane_config *cfg) {
	const int nth = cfg->threads > 0 ? cfg->threads : base_cpu_count();
	// the longest sequence a request may hold, as lane_host_new sets it
	const int32_t window = lane_config_max_context(cfg, hp);
	const uint64_t V = (uint64_t)hp->n_vocab, rows = (uint64_t)lane_max_rows(cfg);
	uint64_t b = model_ws_bytes(hp, (int64_t)rows, nth, model_attn_fused() ? 0 : window);
	b += (uint64_t)max_logit_rows(cfg) * V * sizeof(float);    // logits
	b += V * (sizeof(float) + sizeof(int32_t));                 // sampling scratch and counts
	b += rows * (sizeof(model_row) + sizeof(int32_t));          // the round's rows
	b += lane_draft_compute_bytes(hp, cfg, nth, window);
	b += lane_experts_bytes(hp, cfg);
	return b;
}

int32_t lane_host_max_context(const lane_host *h) { return h->max_ctx; }

_Static_assert(BASE_RANGE_HI(LANE_RANGE_LANES) == LANE_SNAP_MAX_LANES && BASE_RANGE_HI(LANE_RANGE_DRAFT_MAX) == LANE_MAX_DRAFT,
	       "the ranges are the arrays' sizes");

// An int32_t field of lane_config and the range it must be in.
#define INT_FIELD(f, r) INT_FIELD_(f, r)
#define INT_FIELD_(f, lo, hi) {#f, offsetof(lane_config, f), (lo), (hi)}
static const struct {
	const char *name;
	size_t off;
	int64_t lo, hi;
} int_fields[] = {
	INT_FIELD(lanes, LANE_RANGE_LANES), INT_FIELD(queue, LANE_RANGE_QUEUE),           INT_FIELD(ctx, LANE_RANGE_CTX),
	INT_FIELD(piece, LANE_RANGE_PIECE), INT_FIELD(page_tokens, LANE_RANGE_PAGE_TOKENS), INT_FIELD(draft_max, LANE_RANGE_DRAFT_MAX),
};

int lane_config_check(const lane_config *cfg, char *err, size_t errlen) {
	for (size_t i = 0; i < sizeof int_fields / sizeof int_fields[0]; i++) {
		int32_t v;
		memcpy(&v, (const char *)cfg + int_fields[i].off, sizeof v);
		if (v < int_fields[i].lo || v > int_fields[i].hi)
			return base_seterr(err, errlen, LANES_EINVAL, "%s must be %lld..%lld, not %d", int_fields[i].name,
					   (long long)int_fields[i].lo, (long long)int_fields[i].hi, v);
	}
	if (!(cfg->round_ms >= BASE_RANGE_LO(LANE_RANGE_ROUND_MS) && cfg->round_ms <= BASE_RANGE_HI(LANE_RANGE_ROUND_MS)))
		return base_seterr(err, errlen, LANES_EINVAL, "round_ms must be %g..%g, not %g", BASE_RANGE_LO(LANE_RANGE_ROUND_MS),
				   (double)BASE_RANGE_HI(LANE_RANGE_ROUND_MS), cfg->round_ms);
	if (cfg->window_max < 0 || cfg->window_max > (1 << 24) || (cfg->window_max > 0 && (cfg->window < 1 || cfg->window > cfg->window_max)))
		return base_seterr(err, errlen, LANES_EINVAL, "the window must be 1..%d tokens (the largest the budget allows)",
				   cfg->window_max);
	if (cfg->window_max > 0 && !(cfg->window_recent_s > 0 && cfg->window_recent_s <= 86400))
		return base_seterr(err, errlen, LANES_EINVAL, "window_recent_s must be in (0, 86400] seconds");
	if (!(cfg->row_us >= 0 && cfg->row_us < 1e9 && cfg->fixed_us >= 0 && cfg->fixed_us < 1e9))
		return base_seterr(err, errlen, LANES_EINVAL, "row_us and fixed_us must be in [0, 1e9) microseconds");
	if ((unsigned)cfg->draft > LANE_DRAFT_MTP) return base_seterr(err, errlen, LANES_EINVAL, "draft mode %d is not one of the four", (int)cfg->draft);
	const lane_background *bg = &cfg->background;
	if (bg->run && (!bg->cost || !(bg->share > 0 && bg->share <= 1)))
		return base_seterr(err, errlen, LANES_EINVAL, "background work needs its price and a share of the round in (0, 1], got %g",
				   bg->share);
	return 0;
}

int lane_host_new(lane_host **out, const model *m, const tok_vocab *vocab, const lane_config *cfgin, char *err,
		  size_t errlen) {
	*out = NULL;
	lane_config cfg = *cfgin;
	if (lane_config_check(&cfg, err, errlen)) return LANES_EINVAL;
	if (cfg.threads <= 0) cfg.threads = base_cpu_count();
	if (cfg.pool) cfg.threads = base_pool_threads(cfg.pool);
	lane_host *h = calloc(1, sizeof *h);
	if (!h) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	h->cfg = cfg;
	h->m = m;
	h->vocab = vocab;
	h->hp = *model_hparams_of(m);
	h->max_piece = 4; // an unknown character's token covers up to 4 bytes
	for (int32_t i = 0; i < tok_n_tokens(vocab); i++) {
		size_t n = 0;
		if (tok_text(vocab, i, &n) && n > h->max_piece) h->max_piece = n;
	}
	atomic_init(&h->seed_state, cfg.seed);
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->work, NULL);
	pthread_mutex_init(&h->snap_mu, NULL);
	pthread_mutex_init(&h->gv_mu, NULL);
	h->max_ctx = lane_config_max_context(&cfg, &h->hp);
	kv_config kc;
	if (cfg.window_max > 0) {
		// elastic: room for every lane at the largest window, used up to the window's share
		kc = model_kv_config(m, cfg.kv_type, cfg.lanes, cfg.window_max, cfg.page_tokens);
		atomic_init(&h->window, cfg.window);
	} else {
		kc = model_kv_config(m, cfg.kv_type, cfg.lanes, h->max_ctx, cfg.page_tokens);
		kc.n_pages = lane_pages_for(h, cfg.ctx);
		if (kc.n_pages < lane_pages_for(h, h->max_ctx)) kc.n_pages = lane_pages_for(h, h->max_ctx);
	}
	// past what the lanes keep of a sliding-window model's local rows, unheld pages give theirs up
	const int32_t lt = lane_local_tokens(&cfg, &h->hp, h->max_ctx);
	if (lt > 0) kc.local_cap = cfg.lanes * ((lt + cfg.page_tokens - 1) / cfg.page_tokens);
	int rc = kv_new(&h->kv, &kc, err, errlen);
	if (!rc && cfg.cache_dir && cfg.prefix_cache) {
		// rows differ by kernel set and activation width: each has a folder of its own
		const char *ks = tensor_kernels_name(model_kernels(m)), *act = tensor_act_name(tensor_kernels_act(model_kernels(m)));
		uint8_t ident[32];
		sha256_ctx c;
		sha256_init(&c);
		sha256_update(&c, cfg.cache_ident, sizeof cfg.cache_ident);
		sha256_update(&c, ks, strlen(ks) + 1);
		sha256_update(&c, act, strlen(act) + 1);
		// a model whose rope factors depend on the context (Phi 3's LongRoPE) keys on the ones it rotates by
		if (h->hp.rope.freq_factors) sha256_update(&c, h->hp.rope.freq_factors, sizeof(float) * (size_t)(h->hp.rope.n_rot / 2));
		sha256_final(&c, ident);
		rc = kv_disk_open(h->kv, cfg.cache_dir, ident, cfg.cache_dir_bytes ? cfg.cache_dir_bytes : LANE_DEFAULT_CACHE_DIR_BYTES,
				  err, errlen);
	}
	if (!rc && cfg.pool) h->pool = cfg.pool;
	else if (!rc) rc = base_pool_new(&h->pool, cfg.threads);
	h->lanes = calloc((size_t)cfg.lanes, sizeof *h->lanes);
	h->last = calloc((size_t)cfg.lanes, sizeof *h->last);
	// a request queued or admitted is counted open: no more than queue + lanes, and as many
	// again as leases may hold (a request with a lease passes a full queue)
	h->cancelled = calloc((size_t)cfg.queue + 2 * (size_t)cfg.lanes, sizeof *h->cancelled);
	h->leases = calloc((size_t)cfg.lanes, sizeof *h->leases);
	const size_t V = (size_t)h->hp.n_vocab, max_rows = (size_t)lane_max_rows(&cfg);
	if (!rc) rc = model_ws_new(&h->ws, m, (int64_t)max_rows, cfg.threads, model_attn_fused() ? 0 : h->max_ctx, err, errlen);
	h->cap_logits = max_logit_rows(&cfg);
	h->logits = malloc((size_t)h->cap_logits * V * sizeof(float));
	h->rows = malloc(max_rows * sizeof *h->rows);
	h->row_lane = malloc(max_rows * sizeof *h->row_lane);
	h->row_hidden = malloc(max_rows * sizeof *h->row_hidden);
	h->cap_rows = h->rows && h->row_lane && h->row_hidden ? (int32_t)max_rows : 0;
	h->scratch = malloc((size_t)h->hp.n_vocab * sizeof(float));
	h->top = calloc(LANE_MAX_TOP_LOGPROBS, sizeof *h->top);
	h->ctxbuf = malloc(4096 * sizeof *h->ctxbuf);
	h->round_lora = malloc((size_t)cfg.lanes * MODEL_LORA_MAX * sizeof *h->round_lora);
	model_memory mm;
	model_memory_of(m, &mm);
	h->weight_bytes = mm.total_bytes ? (double)mm.total_bytes : 1;
	if (!rc && cfg.draft_model) rc = lane_draft_open(h, kc.n_pages, err, errlen);
	if (!rc && cfg.draft == LANE_DRAFT_MTP && !lane_mtp_wanted(&h->hp, &cfg))
		rc = base_seterr(err, errlen, LANES_EINVAL, "draft mtp: %s", h->hp.n_nextn ? "the MTP head drafts only without a draft model, a proposer hook, and with draft_max > 0"
											  : "the model has no MTP layer (nextn_predict_layers), and no head can be learned here");
	if (!rc && lane_mtp_wanted(&h->hp, &cfg)) rc = lane_mtp_open(h, kc.n_pages, err, errlen);
	h->counts = calloc((size_t)h->hp.n_vocab, sizeof *h->counts);
	// the host's own accounting of its compute memory, from the sizes it allocated
	h->compute_bytes = (h->ws ? model_ws_size(h->ws) : 0) + (uint64_t)max_logit_rows(&cfg) * V * sizeof(float) +
			   V * (sizeof(float) + sizeof(int32_t)) + max_rows * (sizeof(model_row) + sizeof(int32_t)) +
			   lane_draft_held_bytes(h) + lane_experts_bytes(&h->hp, &cfg);
	if (!rc) rc = sampler_new(&h->sampler, h->hp.n_vocab);
	if (!rc && (!h->lanes || !h->last || !h->cancelled || !h->leases || !h->logits || !h->scratch || !h->top || !h->counts || !h->ctxbuf ||
			 !h->cap_rows || !h->round_lora))
		rc = LANES_ENOMEM;
	if (!rc) rc = lane_experts_open(h, (int32_t)max_rows, err, errlen);
	if (!rc && cfg.window_max > 0) lane_window_set(h, cfg.window);
	if (rc) {
		if (rc == LANES_ENOMEM) base_seterr(err, errlen, rc, "out of memory");
		lane_host_free(h);
		return rc;
	}
	lane_calibrate(h);
	lane_publish(h);
	if (pthread_create(&h->thread, NULL, lane_engine, h)) {
		lane_host_free(h);
		return base_seterr(err, errlen, LANES_ENOMEM, "cannot start the engine thread");
	}
	h->thread_started = true;
	LOG_INFO(MOD, "%d lanes, %d KV tokens (%d pages of %d, %s, %.1f MiB), up to %d tokens per request, %d threads",
		 cfg.lanes, kc.n_pages * cfg.page_tokens, kc.n_pages, cfg.page_tokens, kv_type_name(cfg.kv_type),
		 kv_reserved_bytes(h->kv) / 1048576.0, h->max_ctx, cfg.threads);
	if (cfg.window_max > 0)
		LOG_INFO(MOD, "elastic window: %d tokens now, %d..%d, following requests of the last %.0f s", cfg.window,
			 cfg.window, cfg.window_max, cfg.window_recent_s);
	LOG_DEBUG(MOD, "compute: %.1f MiB (%d rows per pass, %s attention)", h->compute_bytes / 1048576.0,
		 (int)max_rows, h->ws && model_attn_fused() ? "fused" : "unfused");
	*out = h;
	return 0;
}

int32_t lane_host_open(lane_host *h) { return atomic_load(&h->open); }

void lane_host_set_fault(lane_host *h, bool (*fn)(void *, uint64_t, uint64_t), void *arg) {
	pthread_mutex_lock(&h->mu);
	h->fault = fn;
	h->fault_arg = arg;
	pthread_mutex_unlock(&h->mu);
}

void lane_host_free(lane_host *h) {
	if (!h) return;
	if (h->thread_started) {
		lane_host_halt(h, "server shutting down");
		pthread_mutex_lock(&h->mu);
		h->quit = true;
		pthread_cond_signal(&h->work);
		pthread_mutex_unlock(&h->mu);
		pthread_join(h->thread, NULL);
	}
	lane_slot_tasks(h, lane_slot_take(h), true); // none is posted once halting: none waits here
	lane_slot_free(h);
	if (h->kv) {
		const int32_t flushed = kv_disk_flush(h->kv);
		const kv_disk_stats d = kv_disk_stats_of(h->kv);
		if (flushed || d.read) LOG_INFO(MOD, "prefix cache on disk: %llu pages read, %llu written", (unsigned long long)d.read,
						(unsigned long long)d.written);
	}
	kv_free(h->kv);
	lane_draft_free(h);
	free(h->ctxbuf);
	if (!h->cfg.pool) base_pool_free(h->pool);
	free(h->lanes);
	free(h->cancelled);
	free(h->leases);
	free(h->logits);
	free(h->scratch);
	free(h->top);
	free(h->counts);
	sampler_free(h->sampler);
	free(h->rows);
	free(h->round_lora);
	free(h->row_lane);
	free(h->row_hidden);
	free(h->hidden);
	lane_experts_close(h);
	model_ws_free(h->ws);
	pthread_mutex_destroy(&h->mu);
	pthread_cond_destroy(&h->work);
	pthread_mutex_destroy(&h->snap_mu);
	lane_constrain_free(h);
	pthread_mutex_destroy(&h->gv_mu);
	free(h);
}
