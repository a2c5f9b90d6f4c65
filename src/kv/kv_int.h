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
	bool stale;      // cut back past its recurrent state: invalid until cleared
	int32_t capture[KV_CAPTURES]; // the positions whose state a pass keeps a copy of (0: none)
	int32_t mark;    // the position whose state a pass keeps for kv_seq_rewind (0: none)
	int32_t lseen;   // pages before it were looked at by kv_seq_release_window
	int32_t lshared; // the first of them it passed while another sequence held it (-1: none)
} kv_seq;

typedef struct kv_prefix kv_prefix;
typedef struct kv_disk kv_disk;

struct kv_cache {
	kv_config cfg;
	size_t row_bytes;    // bytes of one token's K (or V) row in one layer
	size_t page_bytes;   // row_bytes * page_tokens
	size_t s_stride;     // scale bytes per page of one layer (0 but for F16S)
	size_t map_bytes;    // bytes of each of the four mappings
	uint8_t *k, *v;      // [n_layers][n_pages][page_tokens] rows
	uint8_t *ks, *vs;    // [n_layers][n_pages][page_tokens][kv_dim / group]; NULL but for F16S
	int32_t limit;       // pages at or above it are not handed out
	int32_t over;        // pages at or above the limit still held
	bool released;       // the memory above the limit went back to the system
	int32_t *free_ids;   // stack of free page ids
	int32_t n_free;
	int32_t *ref;        // holders of each page: sequences, plus one when the prefix cache has it
	kv_seq *seqs;        // n_seqs slots
	float *state;        // [n_seqs][state_floats] recurrent state; NULL without one
	float *captured;     // [KV_CAPTURES][n_seqs][state_floats] copies kept at each capture position
	float *marked;       // [n_seqs][state_floats] copies kept at each mark
	kv_prefix *px;
	kv_disk *disk;       // the prefix cache's pages on disk, when attached
	uint8_t *lheld;      // per page: its local layers' rows are in memory (kv_config.window), else NULL
	int32_t held;        // pages with lheld set
	uint64_t n_freed;    // pages whose local rows were freed, all told
	int32_t clock;       // where the sweep for local_cap goes on
};

kv_seq *kv__seq(const kv_cache *kv, int32_t seq);
// Page pg is handed out: its local rows will be written, so they count as held; over
// local_cap, pages no sequence holds give theirs up (pg aside). Not thread-safe.
void kv__page_taken(kv_cache *kv, int32_t pg);
// Whether pg's local rows are freed: it cannot be written out whole, nor resumed where they are read.
static inline bool kv__page_freed(const kv_cache *kv, int32_t pg) { return kv->lheld && !kv->lheld[pg]; }
// Whether the prefix cache holds pg (one of its references).
bool kv__prefix_has(const kv_cache *kv, int32_t pg);
void kv__page_unref(kv_cache *kv, int32_t page);
int kv__seq_reserve(kv_cache *kv, kv_seq *s, int32_t need);
int kv_prefix_init(kv_cache *kv);      // LANES_ENOMEM
void kv_prefix_release(kv_cache *kv);  // frees the index (pages are the pool's)
void kv_prefix_evict_one(kv_cache *kv); // frees the least recently used cache-only page
void kv__prefix_now_only(kv_cache *kv, int32_t page); // page's last sequence let go of it
void kv__prefix_drop(kv_cache *kv, int32_t page);     // takes the page out of the index, if there
// Page pg's rows as the file of chain hash key (false: not written, counted and logged once).
bool kv__disk_write(kv_cache *kv, int32_t pg, uint64_t key, uint64_t parent, const int32_t *tokens);
// Fills page pg from the file of chain hash key when it holds exactly that prefix (a foreign
// or damaged file is deleted); false for a miss.
bool kv__disk_read(kv_cache *kv, int32_t pg, uint64_t key, uint64_t parent, const int32_t *tokens);
// The page's bytes in file order: every layer's K rows, V rows, then K and V scales; into file
// (to_file) or from it. kv__page_rows_bytes of them.
void kv__page_copy(kv_cache *kv, int32_t pg, uint8_t *file, bool to_file);
size_t kv__page_rows_bytes(const kv_cache *kv);
// The disk folder's ident (the model file, kernel set and layout), NULL without one.
const uint8_t *kv__disk_ident(const kv_cache *kv);
// Deletes the page file of chain hash key; whether there was one.
bool kv__disk_forget(kv_cache *kv, uint64_t key);
// The prefix index as slot files use it (slot.c): the chain hash after parent over tok, the
// cached page after parent holding tok (-1: none), a page taken into the index as root 0's
// cache-only page from rows (kv__page_copy's order; -1 when no page can be had), and a page
// taken out of the index without writing it to disk.
uint64_t kv__prefix_chain(uint64_t parent, const int32_t *tok, int32_t n);
int32_t kv__prefix_find(const kv_cache *kv, uint64_t key, uint64_t parent, const int32_t *tok);
int32_t kv__prefix_adopt(kv_cache *kv, uint64_t key, uint64_t parent, const int32_t *tok, const uint8_t *rows);
void kv__prefix_forget(kv_cache *kv, int32_t page);

#endif
