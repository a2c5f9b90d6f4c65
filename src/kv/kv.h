// kv: the paged key/value cache. A pool of fixed-size pages (page_tokens tokens of every
// layer's K and V, as f16, f16 with a scale byte per group, or q8_0/q4_0 blocks), a block
// table per sequence slot, page alloc/free, truncation, and a page limit that lets the
// pool's memory follow demand. Knows nothing of architectures: a token's K (or V) in one
// layer is kv_dim values.
#ifndef LANES_KV_H
#define LANES_KV_H

#include <stddef.h>
#include <stdint.h>

// How K and V values are stored; every type is per token (no value depends on another token).
enum kv_type {
	KV_F16,   // f16
	KV_F16S,  // f16 plus one scale byte per group of `group` values (tensor_f16s_encode)
	KV_Q8_0,  // blocks of 32 values: an f16 scale and 32 int8 (34 bytes)
	KV_Q4_0,  // blocks of 32 values: an f16 scale and 32 4-bit codes (18 bytes)
	KV_TYPE_COUNT
};
const char *kv_type_name(enum kv_type t); // "f16", "f16s", "q8_0", "q4_0"; NULL when unknown
// The type named s (as kv_type_name spells it); -1 when none is.
int kv_type_parse(const char *s);
// Bytes one token takes in the cache: K and V of every layer, scales included. 0 when the
// type cannot hold rows of kv_dim values in groups of `group` (block types need kv_dim % 32 == 0).
uint64_t kv_bytes_per_token(enum kv_type type, int32_t n_layers, int32_t kv_dim, int32_t group);

typedef struct {
	enum kv_type type;
	int32_t n_layers;     // layers, each with its own K and V
	int32_t kv_dim;       // values of one token's K (and of its V) in one layer
	int32_t group;        // values sharing one scale byte (a head); divides kv_dim (F16S)
	int32_t page_tokens;  // tokens per page (e.g. 16)
	int32_t n_pages;      // pages reserved (address space; memory is taken as pages are used)
	int32_t n_seqs;       // sequence slots; ids are 0..n_seqs-1
} kv_config;

typedef struct kv_cache kv_cache;

// Reserves the pool (n_pages pages of kv_bytes_per_token * page_tokens bytes) and the
// slots, all empty, with every page usable (limit n_pages). Returns 0, LANES_EINVAL (bad
// config, message in err) or LANES_ENOMEM.
int kv_new(kv_cache **out, const kv_config *cfg, char *err, size_t errlen);
void kv_free(kv_cache *kv); // accepts NULL
const kv_config *kv_config_of(const kv_cache *kv);

// Bytes of the whole reservation (n_pages pages).
uint64_t kv_reserved_bytes(const kv_cache *kv);
// Bytes of one page, every layer's K and V with their scales.
uint64_t kv_page_bytes(const kv_cache *kv);

// The pool hands out only pages below its limit. Raising the limit adds pages; lowering it
// drops cache-only pages above it at once and returns the memory of the pages above it to
// the system as soon as no sequence holds any of them.
int32_t kv_pages_limit(const kv_cache *kv);
void kv_set_limit(kv_cache *kv, int32_t limit); // clamped to 1..n_pages
// Pages at or above the limit that sequences still hold.
int32_t kv_pages_over_limit(const kv_cache *kv);

// Pages below the limit held by nothing.
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

// Storage of layer l as bytes: the K (or V) row of the token in slot s of page p starts at
// data + p * kv_page_row_bytes(kv) * page_tokens + s * kv_row_bytes(kv). A row is kv_dim f16
// values (F16, F16S) or kv_dim / 32 blocks of block_q8_0 / block_q4_0 (tensor.h).
uint8_t *kv_k_data(kv_cache *kv, int32_t layer);
uint8_t *kv_v_data(kv_cache *kv, int32_t layer);
size_t kv_row_bytes(const kv_cache *kv);
// The same for the f16 types, counted in f16 values: row at base + p * kv_page_stride(kv)
// + s * kv_dim. NULL (and 0) for the block types.
uint16_t *kv_k_base(kv_cache *kv, int32_t layer);
uint16_t *kv_v_base(kv_cache *kv, int32_t layer);
size_t kv_page_stride(const kv_cache *kv); // f16 values per page of one layer
// F16S scale bytes of layer l: the byte of group g of the token in slot s of page p is at
// base + p * kv_scale_page_stride(kv) + s * (kv_dim / group) + g. NULL for plain F16.
uint8_t *kv_ks_base(kv_cache *kv, int32_t layer);
uint8_t *kv_vs_base(kv_cache *kv, int32_t layer);
size_t kv_scale_page_stride(const kv_cache *kv);
// The K (or V) row of position pos of seq in layer; pos < kv_seq_len(seq) (checked: aborts).
uint8_t *kv_k_at(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos);
uint8_t *kv_v_at(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos);
// As f16 values (F16, F16S only).
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
