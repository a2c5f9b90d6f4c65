// lanes: draft proposers for speculative decoding — prompt lookup (the continuation of the
// latest earlier occurrence of the context's last n-gram) and a small draft model decoding
// greedily over its own KV. Proposals only ever save time: the target verifies every one.
#include "lanes/lanes_int.h"

#include <stdlib.h>
#include <string.h>

#define NGRAM_MAX 3
#define NGRAM_WINDOW 4096   // how far back the search looks

static int32_t ctx_at(const lane_req *r, int32_t i) { return i < r->n_prompt ? r->prompt[i] : r->gen[i - r->n_prompt]; }

int32_t lane_propose_ngram(lane_host *h, lane_req *r, int32_t k) {
	r->n_draft = 0;
	int32_t L = r->n_prompt + r->n_gen;
	int32_t from = L > NGRAM_WINDOW ? L - NGRAM_WINDOW : 0;
	int32_t *c = h->ctxbuf;
	for (int32_t i = from; i < L; i++) c[i - from] = ctx_at(r, i);
	int32_t n_ctx = L - from;
	for (int32_t n = NGRAM_MAX; n >= 1; n--) {
		if (n_ctx <= n) continue;
		const int32_t *key = c + n_ctx - n;
		for (int32_t j = n_ctx - n - 1; j >= 0; j--) {
			if (memcmp(c + j, key, (size_t)n * sizeof *key)) continue;
			int32_t got = 0;
			for (int32_t t = j + n; t < n_ctx && got < k; t++) r->drafts[got++] = c[t];
			if (got) {
				r->n_draft = got;
				r->prop = LANE_PROP_NGRAM;
				return n;
			}
		}
	}
	return 0;
}

static int ensure_drows(lane_host *h, int32_t n) {
	if (n <= h->cap_drows) return 0;
	int32_t cap = h->cap_drows ? h->cap_drows : 64;
	while (cap < n) cap *= 2;
	model_row *rows = realloc(h->drows, (size_t)cap * sizeof *rows);
	if (!rows) return LANES_ENOMEM;
	h->drows = rows;
	h->cap_drows = cap;
	return 0;
}

// Feeds the draft model what lane r's context has beyond dkv_len, ending with the
// logits of its last token; returns the greedy draft, or -1 when the pass failed.
static int32_t catch_up(lane_host *h, lane_req *r) {
	const model *dm = h->cfg.draft_model;
	int32_t last = r->n_prompt + r->n_gen - 1; // position of r->last
	char err[256];
	if (ensure_drows(h, LANE_DRAFT_CHUNK)) return -1;
	while (r->dkv_len <= last) {
		int32_t n = 0;
		for (int32_t p = r->dkv_len; p <= last && n < LANE_DRAFT_CHUNK; p++, n++)
			h->drows[n] = (model_row){ctx_at(r, p), p, r->lane, p == last};
		if (model_forward_ws(dm, h->dkv, h->pool, h->dws, h->drows, n, h->dlogits, err, sizeof err)) {
			LOG_WARN("lanes", "draft model: %s", err);
			return -1;
		}
		r->dkv_len += n;
	}
	return sample_argmax(h->dlogits, model_hparams_of(dm)->n_vocab);
}

void lane_propose_model(lane_host *h, lane_req **rs, const int32_t *ks, int32_t n) {
	const model *dm = h->cfg.draft_model;
	int32_t nv = model_hparams_of(dm)->n_vocab;
	char err[256];
	int32_t kmax = 0;
	for (int32_t i = 0; i < n; i++) {
		lane_req *r = rs[i];
		r->n_draft = 0;
		r->prop = LANE_PROP_MODEL;
		int32_t d = catch_up(h, r);
		if (d < 0) continue;
		r->drafts[r->n_draft++] = d;
		if (ks[i] > kmax) kmax = ks[i];
	}
	// then one row per lane per step, all lanes in one pass
	if (ensure_drows(h, n)) return;
	for (int32_t step = 1; step < kmax; step++) {
		int32_t m = 0;
		for (int32_t i = 0; i < n; i++) {
			lane_req *r = rs[i];
			if (r->n_draft != step || step >= ks[i]) continue;
			int32_t pos = r->n_prompt + r->n_gen - 1 + step;
			h->drows[m++] = (model_row){r->drafts[step - 1], pos, r->lane, true};
		}
		if (!m) break;
		if (model_forward_ws(dm, h->dkv, h->pool, h->dws, h->drows, m, h->dlogits, err, sizeof err)) {
			LOG_WARN("lanes", "draft model: %s", err);
			break;
		}
		int32_t li = 0;
		for (int32_t i = 0; i < n; i++) {
			lane_req *r = rs[i];
			if (r->n_draft != step || step >= ks[i]) continue;
			r->dkv_len++;
			r->drafts[r->n_draft++] = sample_argmax(h->dlogits + (size_t)li++ * nv, nv);
		}
	}
}

int lane_draft_check(const model *target, const model *draft, char *err, size_t errlen) {
	const gguf *a = model_gguf(target), *b = model_gguf(draft);
	const gguf_value *ta = gguf_get_arr(a, "tokenizer.ggml.tokens"), *tb = gguf_get_arr(b, "tokenizer.ggml.tokens");
	int32_t na = model_hparams_of(target)->n_vocab, nb = model_hparams_of(draft)->n_vocab;
	if (na != nb)
		return lanes_seterr(err, errlen, LANES_EINVAL, "the draft model's vocabulary has %d tokens, the model's %d", nb, na);
	if (!ta || !tb || ta->arr.n != tb->arr.n || ta->arr.type != GGUF_STRING || tb->arr.type != GGUF_STRING)
		return lanes_seterr(err, errlen, LANES_EINVAL, "the draft model's vocabulary differs from the model's");
	for (uint64_t i = 0; i < ta->arr.n; i++) {
		gguf_str x = gguf_arr_str(ta, i), y = gguf_arr_str(tb, i);
		if (x.len != y.len || memcmp(x.ptr, y.ptr, x.len))
			return lanes_seterr(err, errlen, LANES_EINVAL,
					    "the draft model's vocabulary differs from the model's at token %llu ('%.*s' vs '%.*s')",
					    (unsigned long long)i, (int)(y.len > 40 ? 40 : y.len), y.ptr, (int)(x.len > 40 ? 40 : x.len), x.ptr);
	}
	return 0;
}
