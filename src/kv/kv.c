// kv: the paged f16 key/value cache — one pool of pages, a free stack, and a growable block
// table per sequence slot. Layout per layer: [page][slot][kv_dim] for K, the same for V, and
// [page][slot][kv_dim / group] for their scale bytes (F16S).
#include "kv/kv_int.h"

#include <stdlib.h>
#include <string.h>


int kv_new(kv_cache **out, const kv_config *cfg, char *err, size_t errlen) {
	*out = NULL;
	if (!kv_type_name(cfg->type))
		return lanes_seterr(err, errlen, LANES_EINVAL, "kv: unknown cache type %d", (int)cfg->type);
	if (cfg->n_layers < 1 || cfg->kv_dim < 1 || cfg->page_tokens < 1 || cfg->n_pages < 1 || cfg->n_seqs < 1)
		return lanes_seterr(err, errlen, LANES_EINVAL, "kv: layers, kv_dim, page_tokens, pages and seqs must be >= 1");
	const bool scaled = cfg->type == KV_F16S;
	if (scaled && (cfg->group < 1 || cfg->kv_dim % cfg->group))
		return lanes_seterr(err, errlen, LANES_EINVAL, "kv: group %d does not divide kv_dim %d", cfg->group, cfg->kv_dim);
	uint64_t stride, total;
	if (!ck_mul((uint64_t)cfg->page_tokens, (uint64_t)cfg->kv_dim, &stride) ||
	    !ck_mul(stride, (uint64_t)cfg->n_pages, &total) || !ck_mul(total, (uint64_t)cfg->n_layers, &total) ||
	    !ck_mul(total, sizeof(uint16_t), &total) || total > SIZE_MAX / 2)
		return lanes_seterr(err, errlen, LANES_EINVAL, "kv: cache size overflows");
	kv_cache *kv = calloc(1, sizeof *kv);
	if (!kv) return lanes_seterr(err, errlen, LANES_ENOMEM, "kv: out of memory");
	kv->cfg = *cfg;
	kv->page_stride = (size_t)stride;
	kv->k = malloc((size_t)total);
	kv->v = malloc((size_t)total);
	kv->free_ids = malloc((size_t)cfg->n_pages * sizeof *kv->free_ids);
	kv->seqs = calloc((size_t)cfg->n_seqs, sizeof *kv->seqs);
	kv->ref = calloc((size_t)cfg->n_pages, sizeof *kv->ref);
	bool scales_ok = true;
	if (scaled) {
		kv->s_stride = kv->page_stride / (size_t)cfg->group;
		const size_t sbytes = (size_t)total / sizeof(uint16_t) / (size_t)cfg->group;
		kv->ks = malloc(sbytes);
		kv->vs = malloc(sbytes);
		scales_ok = kv->ks && kv->vs;
	}
	if (!kv->k || !kv->v || !kv->free_ids || !kv->seqs || !kv->ref || !scales_ok || kv_prefix_init(kv)) {
		kv_free(kv);
		return lanes_seterr(err, errlen, LANES_ENOMEM, "kv: out of memory for %llu bytes of cache",
				    (unsigned long long)total * 2);
	}
	// Pop order gives low page ids first.
	for (int32_t i = 0; i < cfg->n_pages; i++) kv->free_ids[i] = cfg->n_pages - 1 - i;
	kv->n_free = cfg->n_pages;
	*out = kv;
	return LANES_OK;
}

void kv_free(kv_cache *kv) {
	if (!kv) return;
	if (kv->seqs)
		for (int32_t i = 0; i < kv->cfg.n_seqs; i++) free(kv->seqs[i].pages);
	free(kv->seqs);
	free(kv->ref);
	kv_prefix_release(kv);
	free(kv->free_ids);
	free(kv->k);
	free(kv->v);
	free(kv->ks);
	free(kv->vs);
	free(kv);
}

const char *kv_type_name(enum kv_type t) {
	static const char *const names[KV_TYPE_COUNT] = {[KV_F16] = "f16", [KV_F16S] = "f16s"};
	return (unsigned)t < KV_TYPE_COUNT ? names[t] : NULL;
}

const kv_config *kv_config_of(const kv_cache *kv) { return &kv->cfg; }
int32_t kv_pages_free(const kv_cache *kv) { return kv->n_free; }

int32_t kv_pages_for(const kv_cache *kv, int64_t len) {
	if (len <= 0) return 0;
	int64_t n = (len + kv->cfg.page_tokens - 1) / kv->cfg.page_tokens;
	return n > INT32_MAX ? INT32_MAX : (int32_t)n;
}

kv_seq *kv__seq(const kv_cache *kv, int32_t seq) {
	return seq >= 0 && seq < kv->cfg.n_seqs ? &kv->seqs[seq] : NULL;
}
#define seq_at kv__seq

void kv__page_unref(kv_cache *kv, int32_t page) {
	LANES_ASSERT(kv->ref[page] > 0);
	if (--kv->ref[page] == 0) kv->free_ids[kv->n_free++] = page;
	else if (kv->ref[page] == 1) kv__prefix_now_only(kv, page);
}

int kv__seq_reserve(kv_cache *kv, kv_seq *s, int32_t need) {
	if (need <= s->cap) return LANES_OK;
	int32_t cap = s->cap ? s->cap : 8;
	while (cap < need) cap = cap > INT32_MAX / 2 ? need : cap * 2;
	int32_t *p = realloc(s->pages, (size_t)cap * sizeof *p);
	if (!p) return LANES_ENOMEM;
	s->pages = p;
	s->cap = cap;
	return LANES_OK;
}

int32_t kv_seq_len(const kv_cache *kv, int32_t seq) {
	const kv_seq *s = seq_at(kv, seq);
	return s ? s->len : -1;
}

int kv_seq_grow(kv_cache *kv, int32_t seq, int64_t len) {
	kv_seq *s = seq_at(kv, seq);
	if (!s || len < s->len || len > INT32_MAX) return LANES_EINVAL;
	int32_t need = kv_pages_for(kv, len);
	// pages only the prefix cache holds are given back on demand
	if (need - s->npages > kv->n_free + kv_pages_cached(kv)) return LANES_ELIMIT;
	if (kv__seq_reserve(kv, s, need)) return LANES_ENOMEM;
	while (s->npages < need) {
		if (kv->n_free == 0) kv_prefix_evict_one(kv);
		int32_t p = kv->free_ids[--kv->n_free];
		kv->ref[p] = 1;
		s->pages[s->npages++] = p;
	}
	s->len = (int32_t)len;
	return LANES_OK;
}

void kv_seq_truncate(kv_cache *kv, int32_t seq, int64_t len) {
	kv_seq *s = seq_at(kv, seq);
	if (!s) return;
	if (len < 0) len = 0;
	if (len >= s->len) return;
	int32_t keep = kv_pages_for(kv, len);
	// a shared page is only ever read: no one may write into it again after a cut
	LANES_ASSERT(len % kv->cfg.page_tokens == 0 || kv->ref[s->pages[keep - 1]] == 1);
	while (s->npages > keep) kv__page_unref(kv, s->pages[--s->npages]);
	s->len = (int32_t)len;
}

void kv_seq_clear(kv_cache *kv, int32_t seq) { kv_seq_truncate(kv, seq, 0); }

const int32_t *kv_seq_pages(const kv_cache *kv, int32_t seq, int32_t *n) {
	const kv_seq *s = seq_at(kv, seq);
	*n = s ? s->npages : 0;
	return s ? s->pages : NULL;
}

uint16_t *kv_k_base(kv_cache *kv, int32_t layer) {
	LANES_ASSERT(layer >= 0 && layer < kv->cfg.n_layers);
	return kv->k + (size_t)layer * kv->cfg.n_pages * kv->page_stride;
}

uint16_t *kv_v_base(kv_cache *kv, int32_t layer) {
	LANES_ASSERT(layer >= 0 && layer < kv->cfg.n_layers);
	return kv->v + (size_t)layer * kv->cfg.n_pages * kv->page_stride;
}

size_t kv_page_stride(const kv_cache *kv) { return kv->page_stride; }
size_t kv_scale_page_stride(const kv_cache *kv) { return kv->s_stride; }

uint8_t *kv_ks_base(kv_cache *kv, int32_t layer) {
	LANES_ASSERT(layer >= 0 && layer < kv->cfg.n_layers);
	return kv->ks ? kv->ks + (size_t)layer * kv->cfg.n_pages * kv->s_stride : NULL;
}

uint8_t *kv_vs_base(kv_cache *kv, int32_t layer) {
	LANES_ASSERT(layer >= 0 && layer < kv->cfg.n_layers);
	return kv->vs ? kv->vs + (size_t)layer * kv->cfg.n_pages * kv->s_stride : NULL;
}

// The (page, slot) of position pos of seq, as an index of the token's row among all rows.
static size_t row_index(const kv_cache *kv, int32_t seq, int32_t pos) {
	const kv_seq *s = seq_at(kv, seq);
	LANES_ASSERT(s && pos >= 0 && pos < s->len);
	int32_t pt = kv->cfg.page_tokens;
	return (size_t)s->pages[pos / pt] * (size_t)pt + (size_t)(pos % pt);
}

static size_t row_off(const kv_cache *kv, int32_t seq, int32_t pos) {
	return row_index(kv, seq, pos) * (size_t)kv->cfg.kv_dim;
}

uint8_t *kv_ks_row(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos) {
	uint8_t *b = kv_ks_base(kv, layer);
	return b ? b + row_index(kv, seq, pos) * (size_t)(kv->cfg.kv_dim / kv->cfg.group) : NULL;
}

uint8_t *kv_vs_row(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos) {
	uint8_t *b = kv_vs_base(kv, layer);
	return b ? b + row_index(kv, seq, pos) * (size_t)(kv->cfg.kv_dim / kv->cfg.group) : NULL;
}

uint16_t *kv_k_row(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos) {
	return kv_k_base(kv, layer) + row_off(kv, seq, pos);
}

uint16_t *kv_v_row(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos) {
	return kv_v_base(kv, layer) + row_off(kv, seq, pos);
}
