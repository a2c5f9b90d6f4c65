// kv: private structures shared by the cache and its prefix index.
#ifndef LANES_KV_INT_H
#define LANES_KV_INT_H

#include "base/base.h"
#include "kv/kv.h"

typedef struct {
	int32_t len;     // tokens held
	int32_t npages;  // pages in the table
	int32_t cap;     // table capacity
	int32_t *pages;  // block table
} kv_seq;

typedef struct kv_prefix kv_prefix;

struct kv_cache {
	kv_config cfg;
	size_t page_stride;  // f16 values per page of one layer
	size_t s_stride;     // scale bytes per page of one layer (0 for F16)
	uint16_t *k, *v;     // [n_layers][n_pages][page_tokens][kv_dim]
	uint8_t *ks, *vs;    // [n_layers][n_pages][page_tokens][kv_dim / group]; NULL for F16
	int32_t *free_ids;   // stack of free page ids
	int32_t n_free;
	int32_t *ref;        // holders of each page: sequences, plus one when the prefix cache has it
	kv_seq *seqs;        // n_seqs slots
	kv_prefix *px;
};

kv_seq *kv__seq(const kv_cache *kv, int32_t seq);
void kv__page_unref(kv_cache *kv, int32_t page);
int kv__seq_reserve(kv_cache *kv, kv_seq *s, int32_t need);
int kv_prefix_init(kv_cache *kv);      // LANES_ENOMEM
void kv_prefix_release(kv_cache *kv);  // frees the index (pages are the pool's)
void kv_prefix_evict_one(kv_cache *kv); // frees the least recently used cache-only page
void kv__prefix_now_only(kv_cache *kv, int32_t page); // page's last sequence let go of it

#endif
