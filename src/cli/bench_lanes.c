// cli: the generation half of `lanes bench`, driven through the lane host — one stream
// (tg) or M concurrent requests (`--concurrent M [--lanes N] [--fill P]`) with aggregate
// tokens/s and inter-token latency percentiles.
#include "cli/bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	lane_req *req;
	uint64_t last_us;  // time of the previous token event
	int32_t n;         // tokens seen
	bool done;
} stream;

typedef struct {
	uint64_t *gaps;
	size_t n_gaps, cap_gaps;
	uint64_t first_us, last_us; // the first and last token of any stream, by the engine's clock
	int32_t total, open;
	bool failed;
	char reason[160];
} tally;

// Counts one event of stream s: token times and gaps, or its end. Times are the engine's (when
// it queued the event), so a reader that wakes late does not bunch the tokens it reads.
static void count(tally *t, stream *s, const lane_event *ev, int32_t n_gen) {
	const uint64_t now = ev->t_us;
	if (ev->kind == LANE_EV_TOKEN) {
		if (s->n > 0 && t->n_gaps < t->cap_gaps) t->gaps[t->n_gaps++] = now - s->last_us;
		if (!t->first_us || now < t->first_us) t->first_us = now;
		if (now > t->last_us) t->last_us = now;
		s->last_us = now;
		s->n++;
		t->total++;
		return;
	}
	s->done = true;
	t->open--;
	if (ev->kind != LANE_EV_FINISHED) {
		t->failed = true;
		snprintf(t->reason, sizeof t->reason, "%s", ev->reason ? ev->reason : "cancelled");
	} else if (s->n != n_gen) {
		// a figure over fewer tokens than asked for would be reported as n_gen's
		t->failed = true;
		snprintf(t->reason, sizeof t->reason, "it ended after %d of %d tokens", s->n, n_gen);
	}
}

static int cmp_u64(const void *a, const void *b) {
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static double pct(const uint64_t *v, size_t n, double p) {
	if (!n) return 0;
	size_t i = (size_t)ceil(p * (double)n) - 1;
	return v[i < n ? i : n - 1] / 1000.0;
}

int bench_lanes(const model *m, const tok_vocab *voc, const bench_lanes_opts *o, bench_lanes_result *res, char *err,
		size_t errlen) {
	memset(res, 0, sizeof *res);
	int32_t n_vocab = model_hparams_of(m)->n_vocab;
	int32_t M = o->concurrent > 0 ? o->concurrent : 1;
	lane_config cfg;
	lane_config_default(&cfg);
	cfg.lanes = o->lanes > 0 ? o->lanes : M + (o->fill > 0);
	cfg.queue = M + 1;
	cfg.threads = o->threads;
	cfg.kv_type = o->kv_type;
	const int32_t n_prompt = o->n_text > 0 ? o->n_text + 1 : o->n_prompt;
	int64_t per = (int64_t)n_prompt + o->n_gen + 1;
	int64_t fill = o->fill > 0 ? (int64_t)o->fill + 2 : 0;
	// whole pages per request: a request of `per` tokens holds ceil(per / page) pages
	const int64_t pt = cfg.page_tokens;
	int64_t ctx = (per + pt - 1) / pt * pt * M + (fill + pt - 1) / pt * pt;
	int32_t ctx_train = model_hparams_of(m)->n_ctx_train;
	if (ctx_train > 0 && (per > ctx_train || fill > ctx_train))
		return base_seterr(err, errlen, LANES_EINVAL, "a request of %lld tokens exceeds the model's context of %d",
				    (long long)(per > fill ? per : fill), ctx_train);
	cfg.ctx = (int32_t)(ctx < 64 ? 64 : ctx);
	cfg.prefix_cache = false;
	cfg.draft_model = o->draft_model;
	cfg.experts = !o->no_experts;
	lane_host *h = NULL;
	int rc = lane_host_new(&h, m, voc, &cfg, err, errlen);
	if (rc) return rc;
	stream *st = calloc((size_t)M + 1, sizeof *st);
	int32_t *prompt = malloc(((size_t)n_prompt + (size_t)(fill > 0 ? fill : 0) + 2) * sizeof *prompt);
	size_t cap_gaps = (size_t)M * (size_t)(o->n_gen > 0 ? o->n_gen : 1);
	uint64_t *gaps = malloc(cap_gaps * sizeof *gaps);
	if (!st || !prompt || !gaps) {
		rc = base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
		goto out;
	}
	int32_t bos = tok_bos(voc) >= 0 ? tok_bos(voc) : 0;
	uint64_t t0 = base_now_us();
	for (int32_t i = 0; i <= M; i++) {
		bool filler = i == M;
		if (filler && fill <= 0) break;
		int32_t np = filler ? (int32_t)fill - 1 : 1 + n_prompt;
		prompt[0] = bos;
		// distinct prompts, so no request can lean on another's KV
		for (int32_t k = 1; k < np; k++) {
			int32_t kk = o->repetitive && !filler ? 1 + (k - 1) % 7 : k;
			prompt[k] = (int32_t)(splitmix64(((uint64_t)i << 32) + (uint64_t)kk) % (uint64_t)n_vocab);
		}
		if (!filler && o->n_text > 0) memcpy(prompt + 2, o->text, (size_t)o->n_text * sizeof *prompt);
		lane_request q = {0};
		q.prompt = prompt;
		q.n_prompt = np;
		q.max_tokens = filler ? 1 : o->n_gen;
		q.ignore_eos = true;
		q.sampling.top_p = 1;
		q.sampling.repeat_penalty = 1;
		q.sampling.has_seed = true;
		q.draft = o->draft;
		q.lora = o->n_lora_sets && !filler ? &o->lora_sets[i % o->n_lora_sets] : NULL;
		if ((rc = lane_submit(h, &q, &st[i].req, err, errlen))) goto out;
	}
	tally t = {.gaps = gaps, .cap_gaps = cap_gaps, .open = M};
	while (t.open > 0 && !t.failed) {
		bool got = false;
		for (int32_t i = 0; i < M; i++) {
			lane_event ev;
			while (!st[i].done && lane_next(st[i].req, &ev, 0) == 1) {
				count(&t, &st[i], &ev, o->n_gen);
				got = true;
			}
		}
		// nothing new anywhere: sleep on the first open stream until it has news
		for (int32_t i = 0; !got && i < M; i++)
			if (!st[i].done) {
				lane_event ev;
				if (lane_next(st[i].req, &ev, 1000) == 1) count(&t, &st[i], &ev, o->n_gen);
				break;
			}
	}
	if (t.failed) {
		rc = base_seterr(err, errlen, LANES_EINVAL, "a request ended early: %s", t.reason);
		goto out;
	}
	size_t n_gaps = t.n_gaps;
	int32_t total = t.total;
	uint64_t t_first = t.first_us;
	uint64_t t_end = t.last_us > t0 ? t.last_us : base_now_us();
	lane_snapshot snap;
	lane_host_snapshot(h, &snap);
	for (int p = 0; p < LANE_PROP_COUNT; p++) res->drafted += snap.draft_tokens[p], res->accepted += snap.draft_accepted[p];
	memcpy(res->mtp_at, snap.draft_at[LANE_PROP_MTP], sizeof res->mtp_at);
	memcpy(res->mtp_accepted_at, snap.draft_accepted_at[LANE_PROP_MTP], sizeof res->mtp_accepted_at);
	qsort(gaps, n_gaps, sizeof *gaps, cmp_u64);
	res->tokens = total;
	res->seconds = (t_end - t0) / 1e6;
	res->tps = total / res->seconds;
	// single stream: tokens after the first over the time after the first, as llama-bench's tg
	res->tg_tokens = total > M ? total - M : 0;
	res->tg_seconds = (t_end - t_first) / 1e6;
	res->tg_tps = res->tg_tokens && t_end > t_first ? res->tg_tokens / res->tg_seconds : 0;
	res->itl_p50_ms = pct(gaps, n_gaps, 0.50);
	res->itl_p99_ms = pct(gaps, n_gaps, 0.99);
	res->ttft_ms = t_first ? (t_first - t0) / 1000.0 : 0;
	rc = 0;
out:
	if (st)
		for (int32_t i = 0; i <= M; i++) {
			if (st[i].req && i == M) {
				lane_event ev;
				while (lane_next(st[i].req, &ev, 30 * 1000000) == 1 && ev.kind == LANE_EV_TOKEN) {}
			}
			lane_req_free(st[i].req);
		}
	lane_host_free(h);
	free(st);
	free(prompt);
	free(gaps);
	return rc;
}
