// kv: the paged key/value cache. A pool of fixed-size pages (page_tokens tokens of every
// layer's K and V, as f16, f16 with a scale byte per group, or q8_0/q4_0 blocks), a block
// table per sequence slot, page alloc/free, truncation, and a page limit that lets the
// pool's memory follow demand. Knows nothing of architectures: a token's K (or V) in one
// layer is kv_dim values.
#ifndef LANES_KV_H
#define LANES_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

// How K and V values are stored; every type is per token (no value depends on another token).
enum kv_type {
	KV_F16,   // f16
	KV_F16S,  // f16 plus one scale byte per group of `group` values (tensor_f16s_encode)
	KV_Q8_0,  // blocks of 32 values: an f16 scale and 32 int8 (34 bytes)
	KV_Q4_0,  // blocks of 32 values: an f16 scale and 32 4-bit codes (18 bytes)
	KV_TYPE_COUNT
};

// What a KV type is, one entry per enum kv_type: the one place code asks about a type.
typedef struct {
	const char *name;   // as --kv-type spells it: "f16", "f16s", "q8_0", "q4_0"
	uint32_t ttype;     // enum gguf_ttype of a row's values: its block (kv_dim must be a multiple) and bytes
	bool scaled;        // one scale byte per group of `group` values beside the row
	bool f16;           // rows are f16 values: the unfused attention reads them, kv_k_row serves them
	int enc;            // enum tensor_kv_enc: how the attention kernels read a row
	// Encodes one token's row of n values (groups of `group` when scaled) into row (and
	// scales) with the kernel set ks; deterministic in x alone.
	void (*encode)(const tensor_kernels *ks, const float *x, int32_t n, int32_t group, uint8_t *row,
		       uint8_t *scales);
} kv_type_traits;

// Thread-safe (constant data). The traits of type t; NULL when t is not a kv_type.
const kv_type_traits *kv_type_get(enum kv_type t);
// Thread-safe (constant data). "f16", "f16s", "q8_0", "q4_0"; NULL when unknown.
const char *kv_type_name(enum kv_type t);
// Thread-safe (constant data). The type named s (as kv_type_name spells it); -1 when none is.
int kv_type_parse(const char *s);
// Thread-safe (constant data). Bytes one token takes in the cache: K and V of every layer,
// scales included. 0 when the type cannot hold rows of kv_dim values in groups of `group`
// (block types need kv_dim to be a multiple of their block).
uint64_t kv_bytes_per_token(enum kv_type type, int32_t n_layers, int32_t kv_dim, int32_t group);

typedef struct {
	enum kv_type type;
	int32_t n_layers;     // layers, each with its own K and V
	int32_t kv_dim;       // values of one token's K (and of its V) in one layer
	int32_t group;        // values sharing one scale byte (a head); divides kv_dim (F16S)
	int32_t page_tokens;  // tokens per page (e.g. 16)
	int32_t n_pages;      // pages reserved (address space; memory is taken as pages are used)
	int32_t n_seqs;       // sequence slots; ids are 0..n_seqs-1
	int64_t state_floats; // recurrent state each sequence keeps beside its pages (0: none)
	int32_t state_ckpts;  // the prefix cache's checkpoints of that state, least recently used dropped first
	// Local layers: readers of layer l see only the last `window` positions (0: no such layers)
	// when swa_pattern is 0 or l % swa_pattern < swa_pattern - 1. Their rows of a page no reader
	// can reach any more are freed (kv_seq_release_window), and at most local_cap pages keep
	// local rows in memory (0: no cap): past it, the pages no sequence holds give theirs up.
	int32_t window, swa_pattern, local_cap;
} kv_config;

typedef struct kv_cache kv_cache;

// Thread-safety below: a "read" changes nothing, so reads of one cache may run on many
// threads at once; every other call on a cache must not overlap any call on the same cache.

// Reserves the pool (n_pages pages of kv_bytes_per_token * page_tokens bytes) and the
// slots, all empty, with every page usable (limit n_pages). Returns 0, LANES_EINVAL (bad
// config, message in err) or LANES_ENOMEM. Thread-safe: the caches it makes share nothing.
int kv_new(kv_cache **out, const kv_config *cfg, char *err, size_t errlen);
void kv_free(kv_cache *kv); // accepts NULL. Not thread-safe: nothing else may use kv.
const kv_config *kv_config_of(const kv_cache *kv); // Thread-safe: a read.

// Bytes of the whole reservation (n_pages pages). Thread-safe: a read.
uint64_t kv_reserved_bytes(const kv_cache *kv);
// Bytes of one page, every layer's K and V with their scales. Thread-safe: a read.
uint64_t kv_page_bytes(const kv_cache *kv);

// The pool hands out only pages below its limit. Raising the limit adds pages; lowering it
// drops cache-only pages above it at once and returns the memory of the pages above it to
// the system as soon as no sequence holds any of them.
int32_t kv_pages_limit(const kv_cache *kv); // Thread-safe: a read.
void kv_set_limit(kv_cache *kv, int32_t limit); // clamped to 1..n_pages. Not thread-safe.
// Pages at or above the limit that sequences still hold. Thread-safe: a read.
int32_t kv_pages_over_limit(const kv_cache *kv);

// Pages below the limit held by nothing. Thread-safe: a read.
int32_t kv_pages_free(const kv_cache *kv);
// Pages held only by the prefix cache: a grow takes them back, least recently used first.
// Thread-safe: a read.
int32_t kv_pages_cached(const kv_cache *kv);
// Pages a sequence of len tokens holds. Thread-safe: a read.
int32_t kv_pages_for(const kv_cache *kv, int64_t len);

// Tokens held by sequence seq (positions 0..len-1); -1 when seq is not a slot. Thread-safe: a read.
int32_t kv_seq_len(const kv_cache *kv, int32_t seq);
// Grows seq to len tokens (len >= its length), taking the pages it needs. Positions past
// the old length hold whatever the caller writes next. Returns 0, LANES_EINVAL (bad seq or
// len), or LANES_ELIMIT when the pool has too few free pages (then nothing changes).
// Not thread-safe.
int kv_seq_grow(kv_cache *kv, int32_t seq, int64_t len);
// Cuts seq to len tokens (len <= its length; a longer len is clamped) and frees the pages
// it no longer needs. Ignores a bad seq. Not thread-safe.
void kv_seq_truncate(kv_cache *kv, int32_t seq, int64_t len);
// Undoes a kv_seq_grow that nothing was written into: back to len, the state and its capture
// as they were (a truncation would take the state for stale).
void kv_seq_ungrow(kv_cache *kv, int32_t seq, int64_t len);
void kv_seq_clear(kv_cache *kv, int32_t seq); // truncate to 0. Not thread-safe.
// ---- recurrent state: a fixed block of floats per sequence, for models with recurrent layers --
// A sequence's state is for all its tokens: zero when it is empty, advanced by the forward
// pass with every token it adds. A cut to 0 zeroes it; a cut to any other length leaves no
// state for the tokens kept, so the sequence's state is invalid until it is cleared.
// The prefix cache keeps checkpoints of it: the state after a whole number of pages, keyed by
// the hash chain of those pages' tokens (state_ckpts of them, least recently used dropped
// first). A pass keeps a copy of a sequence's state at the positions asked for (capture slots;
// a prompt's: 0 its last page, 1 the fork kv_prefix_attach asks for); kv_prefix_publish offers those
// copies with the pages before them; kv_prefix_attach attaches pages only up to the last
// checkpoint it finds among them and restores the state there.
// Seq's state (state_floats floats), or NULL without one or for a bad seq. Thread-safe: a read.
float *kv_seq_state(kv_cache *kv, int32_t seq);
// False when seq was cut back to a length other than 0 since its last clear. Thread-safe: a read.
bool kv_seq_state_valid(const kv_cache *kv, int32_t seq);
// Bytes of every sequence's state together, with the copies being captured and the checkpoints.
// Thread-safe: a read.
uint64_t kv_state_bytes(const kv_cache *kv);
// Bytes of state per sequence slot a cache of state_floats per sequence holds (its own, the two
// captures, the mark, and the checkpoints model_kv_config gives it: two per slot). Thread-safe.
uint64_t kv_state_bytes_per_seq(int64_t state_floats);
#define KV_CAPTURES 2
// Asks the passes that take seq past position pos - 1 to keep a copy of its state as it is
// after that position (pos a whole number of pages past its length; 0: none), in the capture
// slot given. Not thread-safe.
void kv_seq_capture(kv_cache *kv, int32_t seq, int slot, int32_t pos);
// The position seq's capture slot is for (0: none), and where the pass writes it (NULL without
// a state). Thread-safe: reads; the pass writes the copy as it writes the state.
int32_t kv_seq_capture_pos(const kv_cache *kv, int32_t seq, int slot);
float *kv_seq_capture_state(kv_cache *kv, int32_t seq, int slot);
// Drafts on a recurrent state: asks the passes that take seq past position pos - 1 to keep a
// copy of its state as it is after that position (pos past its length; 0: none), so rejected
// rows after it can be undone. A cut below pos forgets the mark. Not thread-safe.
void kv_seq_mark(kv_cache *kv, int32_t seq, int32_t pos);
// The position seq's mark is for (0: none), and where the pass writes its copy (NULL without a
// state). Thread-safe: reads; the pass writes the copy as it writes the state.
int32_t kv_seq_mark_pos(const kv_cache *kv, int32_t seq);
float *kv_seq_mark_state(kv_cache *kv, int32_t seq);
// Cuts seq back to its mark with the state kept there, valid, and forgets the mark. Returns 0,
// or LANES_EINVAL (nothing changes) when seq has no mark a pass has taken it past.
// Not thread-safe.
int kv_seq_rewind(kv_cache *kv, int32_t seq);

// ---- local layers (kv_config.window): their rows only where a reader can reach them -------
// Frees the local layers' rows of seq's pages that hold only positions before its window
// (before len - window + 1: no query at len or later reads them; and before the window of its
// last whole page, where a next turn resumes from the prefix cache) and that no other sequence
// holds (those are looked at again next time), but for the window before position keep and
// before each multiple of stride up to keep (0: none), where a resume of its prompt, or of a
// prompt that parts from it there, would read; returns the pages freed. Their other layers'
// rows stay. A page whose local rows are freed is attached from the prefix cache only where no
// resume reads them, is never written to disk or to a slot file, and gets them back when next
// handed out. Only a cache whose pages' slices of a layer are whole system pages frees (see
// kv_local_bytes_per_token); for others it does nothing. Not thread-safe.
int32_t kv_seq_release_window(kv_cache *kv, int32_t seq, int32_t keep, int32_t stride);
// Bytes per token of n_local layers' K and V rows that a cache of this type frees (0 when a
// page of page_tokens rows of one layer is not whole system pages: then nothing is freed).
// Scale bytes (F16S) are not counted: they stay. Thread-safe.
uint64_t kv_local_bytes_per_token(enum kv_type type, int32_t n_local, int32_t kv_dim, int32_t page_tokens);
// Pages whose local rows are in memory, and how many times a page's local rows were freed.
// Thread-safe: reads.
int32_t kv_pages_local_held(const kv_cache *kv);
uint64_t kv_pages_local_freed(const kv_cache *kv);
// Bytes of one page's local rows that are freed (K and V of every local layer; 0 when the cache
// frees none). Thread-safe: a read.
uint64_t kv_local_page_bytes(const kv_cache *kv);
// Whether layer l is local. Thread-safe: a read.
bool kv_layer_local(const kv_config *c, int32_t l);

// The block table of seq: page ids for positions [i*page_tokens, (i+1)*page_tokens);
// *n gets their count. Valid until the next grow/truncate of seq. Thread-safe: a read.
const int32_t *kv_seq_pages(const kv_cache *kv, int32_t seq, int32_t *n);

// Storage of layer l as bytes: the K (or V) row of the token in slot s of page p starts at
// data + (p * page_tokens + s) * kv_row_bytes(kv). A row is kv_dim
// values of the type's ttype: f16 (F16, F16S) or blocks of block_q8_0 / block_q4_0 (tensor.h).
// The pointer functions below are reads (thread-safe); writing through what they return
// is the caller's to order against readers of the same rows.
uint8_t *kv_k_data(kv_cache *kv, int32_t layer); // Thread-safe: a read.
uint8_t *kv_v_data(kv_cache *kv, int32_t layer); // Thread-safe: a read.
size_t kv_row_bytes(const kv_cache *kv);          // Thread-safe: a read.
// The same for the f16 types, counted in f16 values: row at base + p * kv_page_stride(kv)
// + s * kv_dim. NULL (and 0) for the block types.
uint16_t *kv_k_base(kv_cache *kv, int32_t layer); // Thread-safe: a read.
uint16_t *kv_v_base(kv_cache *kv, int32_t layer); // Thread-safe: a read.
size_t kv_page_stride(const kv_cache *kv); // f16 values per page of one layer. Thread-safe: a read.
// F16S scale bytes of layer l: the byte of group g of the token in slot s of page p is at
// base + p * kv_scale_page_stride(kv) + s * (kv_dim / group) + g. NULL for plain F16.
uint8_t *kv_ks_base(kv_cache *kv, int32_t layer); // Thread-safe: a read.
uint8_t *kv_vs_base(kv_cache *kv, int32_t layer); // Thread-safe: a read.
size_t kv_scale_page_stride(const kv_cache *kv);   // Thread-safe: a read.
// The K (or V) row of position pos of seq in layer; pos < kv_seq_len(seq) (checked: aborts).
uint8_t *kv_k_at(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos); // Thread-safe: a read.
uint8_t *kv_v_at(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos); // Thread-safe: a read.
// As f16 values (F16, F16S only).
uint16_t *kv_k_row(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos); // Thread-safe: a read.
uint16_t *kv_v_row(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos); // Thread-safe: a read.
// The scale bytes (kv_dim / group) of that row; NULL for plain F16.
uint8_t *kv_ks_row(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos); // Thread-safe: a read.
uint8_t *kv_vs_row(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos); // Thread-safe: a read.

// Encodes the K and V (kv_dim floats each) of position pos of seq in layer into the cache
// with the kernel set ks, as the type's encode does. Thread-safe for distinct rows, beside
// reads of other rows; no call that changes kv's sequences may overlap it.
void kv_put(kv_cache *kv, const tensor_kernels *ks, int32_t layer, int32_t seq, int32_t pos, const float *k,
	    const float *v);
// The attention kernels' view of the values [first, first + a head) of every position of
// seq in layer (F16S: first is a multiple of group, a head is one group). Valid until the
// next grow/truncate of seq. Thread-safe: a read.
tensor_kv_view kv_view(kv_cache *kv, int32_t layer, int32_t seq, int32_t first);

// ---- prefix cache: full pages keyed by the hash of their whole token prefix -------------
// The chain of hashes starts at root: KV written under different roots (the base model, an
// adapter set) is never shared, even for the same tokens. Root 0 is the base model's.
// Attaches to the empty sequence seq the cached pages that hold tokens[0..n) page by page
// (only whole pages, stopping at the first miss) and returns the tokens now in seq. With a
// recurrent state: only up to the last checkpoint among them, whose state seq then has; where
// cached pages go on past it (another prompt parted from this one there), seq's capture slot 1
// asks for the state at the last of them, the fork a third prompt may resume from.
// Not thread-safe.
int32_t kv_prefix_attach(kv_cache *kv, int32_t seq, uint64_t root, const int32_t *tokens, int32_t n);
// Offers seq's whole pages for positions [0, n) to the cache (tokens: the ids at those
// positions, already written); pages whose prefix is cached already are left alone. With a
// recurrent state, also the copies captured at seq's capture positions (when seq has passed
// them and they are within n) as the checkpoints after the pages before them. Not thread-safe.
void kv_prefix_publish(kv_cache *kv, int32_t seq, uint64_t root, const int32_t *tokens, int32_t n);
// Drops every cached page that no sequence holds. Not thread-safe.
void kv_prefix_clear(kv_cache *kv);

// ---- the prefix cache on disk: pages of the base model (root 0) that outlive the process ---
// A folder of page files under dir, named by ident (the caller's hash of what the rows depend
// on: the model file, the kernel set and activation width) and the cache's layout, so another
// model, build choice or page size never reads them. From kv_disk_open on, a cached page
// leaving memory is written first (unless kept already), and a prefix that misses in memory is
// read from its file; a file whose checksum, identity or layout is wrong is deleted, never
// read. The folder keeps at most max_bytes of page files, the oldest written deleted first.
typedef struct {
	uint64_t read, written;  // pages read into the cache, pages written
	uint64_t refused;        // files deleted as damaged or foreign
	uint64_t failed, dropped; // writes that failed (a full disk); files deleted for room
} kv_disk_stats;
// Opens (makes) the folder and takes stock of its files. LANES_EIO/LANES_EINVAL with why.
// Not thread-safe.
int kv_disk_open(kv_cache *kv, const char *dir, const uint8_t ident[32], uint64_t max_bytes, char *err, size_t errlen);
// Writes every cached page of root 0 that is not on disk yet (at drain); the count written.
// Not thread-safe.
int32_t kv_disk_flush(kv_cache *kv);
// Detaches the folder (kv_free does too). Not thread-safe.
void kv_disk_close(kv_cache *kv);
// The counts so far (zero without a folder). Thread-safe: a read.
kv_disk_stats kv_disk_stats_of(const kv_cache *kv);

// ---- slot files: a prompt's cached pages of the base model in one file (llama-server's slot
// save and restore). A file holds the disk folder's ident, the layout, the pages' tokens and rows,
// and a checksum: it is taken back only by a cache whose rows would be the same bits. Each needs
// kv_disk_open (LANES_EUNSUPPORTED without it, or with a recurrent state, whose pages alone would
// not give the same bits). Not thread-safe, but kv_slot_max_bytes.
// The file for tokens[0..n)'s cached pages: whole pages from the first, up to the first not
// cached. *out malloc'd (*len bytes; the caller frees), *n_tokens the tokens its pages hold.
// 0, LANES_EUNSUPPORTED or LANES_ENOMEM with err.
int kv_slot_save(kv_cache *kv, const int32_t *tokens, int32_t n, uint8_t **out, size_t *len, int32_t *n_tokens, char *err,
		 size_t errlen);
// The largest file kv_slot_load may take: every page of the cache. Thread-safe.
uint64_t kv_slot_max_bytes(const kv_cache *kv);
// Checks a file's bytes (size, checksum, ident, layout) and takes its pages into the prefix cache
// as pages no sequence holds (a page cached already stays), in order until no page can be had.
// *tokens (malloc'd, may be NULL) the file's tokens, *n_tokens how many the cache now holds of
// them. 0; LANES_EINVAL for a file that is damaged, truncated or another cache's (nothing taken);
// LANES_EUNSUPPORTED, LANES_ENOMEM; with err.
int kv_slot_load(kv_cache *kv, const uint8_t *buf, size_t len, int32_t **tokens, int32_t *n_tokens, char *err, size_t errlen);
// Drops tokens[0..n)'s cached pages from memory and their page files from disk (a sequence that
// holds one keeps it); the tokens the dropped pages held.
int32_t kv_slot_erase(kv_cache *kv, const int32_t *tokens, int32_t n);

#endif
