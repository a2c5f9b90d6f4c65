// kv: the paged key/value cache. A pool of fixed-size pages (page_tokens tokens of every
// layer's K and V, stored as f16, optionally with a scale byte per group), a block table per
// sequence slot, page alloc/free, and truncation. Knows nothing of architectures: a token's
// K (or V) in one layer is kv_dim values.
#ifndef LANES_KV_H
#define LANES_KV_H

#include <stddef.h>
#include <stdint.h>

// How K and V values are stored; every type is per token (no value depends on another token).
enum kv_type {
	KV_F16,   // f16
	KV_F16S,  // f16 plus one scale byte per group of `group` values (tensor_f16s_encode)
	KV_TYPE_COUNT
};
const char *kv_type_name(enum kv_type t); // "f16", "f16s"; NULL when unknown

typedef struct {
	enum kv_type type;
	int32_t n_layers;     // layers, each with its own K and V
	int32_t kv_dim;       // values of one token's K (and of its V) in one layer
	int32_t group;        // values sharing one scale byte (a head); divides kv_dim (F16S)
	int32_t page_tokens;  // tokens per page (e.g. 16)
	int32_t n_pages;      // pages in the pool
	int32_t n_seqs;       // sequence slots; ids are 0..n_seqs-1
} kv_config;

typedef struct kv_cache kv_cache;

// Allocates the pool (n_layers * n_pages * page_tokens * kv_dim * 2 f16 values, and for
// F16S a scale byte per group) and the slots, all empty. Returns 0, LANES_EINVAL (bad config, message in err) or LANES_ENOMEM.
int kv_new(kv_cache **out, const kv_config *cfg, char *err, size_t errlen);
void kv_free(kv_cache *kv); // accepts NULL
const kv_config *kv_config_of(const kv_cache *kv);

// Pages held by nothing.
int32_t kv_pages_free(const kv_cache *kv);
// Pages held only by the prefix cache: a grow takes them back, least recently used first.
int32_t kv_pages_cached(const kv_cache *kv);
// Pages a sequence of len tokens holds.
int32_t kv_pages_for(const kv_cache *kv, int64_t len);

// Tokens held by sequence seq (positions 0..len-1); -1 when seq is not a slot.
int32_t kv_seq_len(const kv_cache *kv, int32_t seq);
// Grows seq to len tokens (len >= its length), taking the pages it needs. Positions past
// the old length hold whatever the caller writes next. Returns 0, LANES_EINVAL (bad seq or
// len), or LANES_ELIMIT when the pool has too few free pages (then nothing changes).
int kv_seq_grow(kv_cache *kv, int32_t seq, int64_t len);
// Cuts seq to len tokens (len <= its length; a longer len is clamped) and frees the pages
// it no longer needs. Ignores a bad seq.
void kv_seq_truncate(kv_cache *kv, int32_t seq, int64_t len);
void kv_seq_clear(kv_cache *kv, int32_t seq); // truncate to 0
// The block table of seq: page ids for positions [i*page_tokens, (i+1)*page_tokens);
// *n gets their count. Valid until the next grow/truncate of seq.
const int32_t *kv_seq_pages(const kv_cache *kv, int32_t seq, int32_t *n);

// Storage of layer l: the K (or V) row of the token in slot s of page p starts at
// base + p * kv_page_stride(kv) + s * kv_dim, and holds kv_dim f16 values.
uint16_t *kv_k_base(kv_cache *kv, int32_t layer);
uint16_t *kv_v_base(kv_cache *kv, int32_t layer);
size_t kv_page_stride(const kv_cache *kv); // f16 values per page of one layer
// F16S scale bytes of layer l: the byte of group g of the token in slot s of page p is at
// base + p * kv_scale_page_stride(kv) + s * (kv_dim / group) + g. NULL for plain F16.
uint8_t *kv_ks_base(kv_cache *kv, int32_t layer);
uint8_t *kv_vs_base(kv_cache *kv, int32_t layer);
size_t kv_scale_page_stride(const kv_cache *kv);
// The K (or V) row of position pos of seq in layer; pos < kv_seq_len(seq) (checked: aborts).
uint16_t *kv_k_row(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos);
uint16_t *kv_v_row(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos);
// The scale bytes (kv_dim / group) of that row; NULL for plain F16.
uint8_t *kv_ks_row(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos);
uint8_t *kv_vs_row(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos);

// ---- prefix cache: full pages keyed by the hash of their whole token prefix -------------
// Attaches to the empty sequence seq the cached pages that hold tokens[0..n) page by page
// (only whole pages, stopping at the first miss) and returns the tokens now in seq.
int32_t kv_prefix_attach(kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t n);
// Offers seq's whole pages for positions [0, n) to the cache (tokens: the ids at those
// positions, already written); pages whose prefix is cached already are left alone.
void kv_prefix_publish(kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t n);
// Drops every cached page that no sequence holds.
void kv_prefix_clear(kv_cache *kv);

#endif
