// kv: the paged key/value cache — one reserved pool of pages, a free stack of the pages below
// the limit, and a growable block table per sequence slot. Layout per layer: [page][slot] rows
// for K, the same for V, and [page][slot][kv_dim / group] scale bytes (F16S). The pool is
// reserved address space: memory is taken as pages are first written and handed back when
// the limit drops.
#include "kv/kv_int.h"
#include "tensor/tensor.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

// A row of plain values: the kernel set's quantizer of the row's tensor type (the reference's bytes).
#define ENCODE_PLAIN(fname, ttype)                                                                        \
	static void fname(const tensor_kernels *ks, const float *x, int32_t n, int32_t group, uint8_t *row, \
			  uint8_t *scales) {                                                                  \
		tensor_k_quantize_row(ks, ttype, x, row, n);                                               \
	}
ENCODE_PLAIN(encode_f16, GGUF_T_F16)
ENCODE_PLAIN(encode_q8_0, GGUF_T_Q8_0)
ENCODE_PLAIN(encode_q4_0, GGUF_T_Q4_0)

// Each group of f16 values gets its scale byte from the kernel set's encoder.
static void encode_f16s(const tensor_kernels *ks, const float *x, int32_t n, int32_t group, uint8_t *row,
			uint8_t *scales) {
	uint16_t *h = (uint16_t *)row;
	for (int32_t g = 0; g < n / group; g++) scales[g] = tensor_k_f16s_encode(ks, x + g * group, group, h + g * group);
}

static const kv_type_traits kv_types[KV_TYPE_COUNT] = {
	[KV_F16] = {.name = "f16", .ttype = GGUF_T_F16, .f16 = true, .enc = TENSOR_KV_F16, .encode = encode_f16},
	[KV_F16S] = {.name = "f16s", .ttype = GGUF_T_F16, .scaled = true, .f16 = true, .enc = TENSOR_KV_F16,
		     .encode = encode_f16s},
	[KV_Q8_0] = {.name = "q8_0", .ttype = GGUF_T_Q8_0, .enc = TENSOR_KV_Q8_0, .encode = encode_q8_0},
	[KV_Q4_0] = {.name = "q4_0", .ttype = GGUF_T_Q4_0, .enc = TENSOR_KV_Q4_0, .encode = encode_q4_0},
};

const kv_type_traits *kv_type_get(enum kv_type t) { return (unsigned)t < KV_TYPE_COUNT ? &kv_types[t] : NULL; }

const char *kv_type_name(enum kv_type t) {
	const kv_type_traits *kt = kv_type_get(t);
	return kt ? kt->name : NULL;
}

int kv_type_parse(const char *s) {
	for (int t = 0; s && t < KV_TYPE_COUNT; t++)
		if (!strcmp(s, kv_types[t].name)) return t;
	return -1;
}

uint64_t kv_bytes_per_token(enum kv_type type, int32_t n_layers, int32_t kv_dim, int32_t group) {
	const kv_type_traits *kt = kv_type_get(type);
	if (n_layers < 1 || kv_dim < 1 || !kt) return 0;
	uint64_t row = tensor_row_bytes(kt->ttype, kv_dim);
	if (!row) return 0;
	if (kt->scaled) {
		if (group < 1 || kv_dim % group) return 0;
		row += (uint64_t)(kv_dim / group);
	}
	return row * 2 * (uint64_t)n_layers;
}

static void *reserve(size_t bytes) {
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void unreserve(void *p, size_t bytes) {
	if (p) munmap(p, bytes);
}

int kv_new(kv_cache **out, const kv_config *cfg, char *err, size_t errlen) {
	*out = NULL;
	const kv_type_traits *kt = kv_type_get(cfg->type);
	if (!kt) return base_seterr(err, errlen, LANES_EINVAL, "kv: unknown cache type %d", (int)cfg->type);
	if (cfg->n_layers < 1 || cfg->kv_dim < 1 || cfg->page_tokens < 1 || cfg->n_pages < 1 || cfg->n_seqs < 1)
		return base_seterr(err, errlen, LANES_EINVAL, "kv: layers, kv_dim, page_tokens, pages and seqs must be >= 1");
	uint64_t state_all;
	if (cfg->state_floats < 0 || cfg->state_ckpts < 0 || !ck_mul((uint64_t)cfg->state_floats, (uint64_t)cfg->n_seqs, &state_all) ||
	    state_all > SIZE_MAX / 8)
		return base_seterr(err, errlen, LANES_EINVAL, "kv: recurrent state of %lld floats per sequence is out of range",
				    (long long)cfg->state_floats);
	const bool scaled = kt->scaled;
	if (scaled && (cfg->group < 1 || cfg->kv_dim % cfg->group))
		return base_seterr(err, errlen, LANES_EINVAL, "kv: group %d does not divide kv_dim %d", cfg->group, cfg->kv_dim);
	const size_t rb = tensor_row_bytes(kt->ttype, cfg->kv_dim);
	if (!rb)
		return base_seterr(err, errlen, LANES_EINVAL, "kv: %s rows need kv_dim (%d) to be a multiple of %lld",
				    kt->name, cfg->kv_dim, (long long)tensor_traits_of(kt->ttype)->block);
	uint64_t pb, total;
	if (!ck_mul((uint64_t)cfg->page_tokens, rb, &pb) || !ck_mul(pb, (uint64_t)cfg->n_pages, &total) ||
	    !ck_mul(total, (uint64_t)cfg->n_layers, &total) || total > SIZE_MAX / 4)
		return base_seterr(err, errlen, LANES_EINVAL, "kv: cache size overflows");
	kv_cache *kv = calloc(1, sizeof *kv);
	if (!kv) return base_seterr(err, errlen, LANES_ENOMEM, "kv: out of memory");
	kv->cfg = *cfg;
	kv->row_bytes = rb;
	kv->page_bytes = (size_t)pb;
	kv->map_bytes = (size_t)total;
	kv->limit = cfg->n_pages;
	kv->k = reserve(kv->map_bytes);
	kv->v = reserve(kv->map_bytes);
	kv->free_ids = malloc((size_t)cfg->n_pages * sizeof *kv->free_ids);
	kv->seqs = calloc((size_t)cfg->n_seqs, sizeof *kv->seqs);
	kv->ref = calloc((size_t)cfg->n_pages, sizeof *kv->ref);
	if (state_all) kv->state = calloc((size_t)state_all, sizeof *kv->state);
	if (state_all) kv->captured = calloc((size_t)state_all * KV_CAPTURES, sizeof *kv->captured);
	if (state_all) kv->marked = calloc((size_t)state_all, sizeof *kv->marked);
	bool scales_ok = !state_all || (kv->state && kv->captured && kv->marked);
	if (cfg->window < 0 || cfg->swa_pattern < 0 || cfg->local_cap < 0) {
		kv_free(kv);
		return base_seterr(err, errlen, LANES_EINVAL, "kv: window, swa_pattern and local_cap must be >= 0");
	}
	// local rows are freed only where a page's slice of a layer is whole system pages
	const bool frees = cfg->window > 0 && kv_local_bytes_per_token(cfg->type, 1, cfg->kv_dim, cfg->page_tokens) > 0;
	if (frees && !(kv->lheld = calloc((size_t)cfg->n_pages, 1))) scales_ok = false;
	if (scaled) {
		kv->s_stride = (size_t)cfg->page_tokens * (size_t)(cfg->kv_dim / cfg->group);
		kv->ks = reserve(kv->s_stride * (size_t)cfg->n_pages * (size_t)cfg->n_layers);
		kv->vs = reserve(kv->s_stride * (size_t)cfg->n_pages * (size_t)cfg->n_layers);
		scales_ok = kv->ks && kv->vs;
	}
	if (!kv->k || !kv->v || !kv->free_ids || !kv->seqs || !kv->ref || !scales_ok || kv_prefix_init(kv)) {
		uint64_t want = kv_reserved_bytes(kv);
		kv_free(kv);
		return base_seterr(err, errlen, LANES_ENOMEM, "kv: cannot reserve %llu bytes of cache",
				    (unsigned long long)want);
	}
	for (int32_t i = 0; i < cfg->n_seqs; i++) kv->seqs[i].lshared = -1;
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
	free(kv->state);
	free(kv->captured);
	free(kv->marked);
	free(kv->lheld);
	kv_disk_close(kv);
	kv_prefix_release(kv);
	free(kv->free_ids);
	unreserve(kv->k, kv->map_bytes);
	unreserve(kv->v, kv->map_bytes);
	const size_t sb = kv->s_stride * (size_t)kv->cfg.n_pages * (size_t)kv->cfg.n_layers;
	unreserve(kv->ks, sb);
	unreserve(kv->vs, sb);
	free(kv);
}

uint64_t kv_page_bytes(const kv_cache *kv) {
	return ((uint64_t)kv->page_bytes * 2 + (uint64_t)kv->s_stride * 2) * (uint64_t)kv->cfg.n_layers;
}

uint64_t kv_reserved_bytes(const kv_cache *kv) { return kv_page_bytes(kv) * (uint64_t)kv->cfg.n_pages; }

// ---- the limit ---------------------------------------------------------------------------------

bool kv_layer_local(const kv_config *c, int32_t l) {
	return c->window > 0 && (c->swa_pattern == 0 || l % c->swa_pattern < c->swa_pattern - 1);
}

uint64_t kv_local_bytes_per_token(enum kv_type type, int32_t n_local, int32_t kv_dim, int32_t page_tokens) {
	const kv_type_traits *kt = kv_type_get(type);
	const uint64_t row = kt && kv_dim > 0 ? tensor_row_bytes(kt->ttype, kv_dim) : 0, sys = (uint64_t)sysconf(_SC_PAGESIZE);
	if (!row || n_local < 1 || page_tokens < 1 || (row * (uint64_t)page_tokens) % sys) return 0;
	return 2 * row * (uint64_t)n_local;
}

uint64_t kv_local_page_bytes(const kv_cache *kv) {
	uint64_t n = 0;
	for (int32_t l = 0; kv->lheld && l < kv->cfg.n_layers; l++) n += kv_layer_local(&kv->cfg, l);
	return n * (uint64_t)kv->page_bytes * 2;
}

int32_t kv_pages_local_held(const kv_cache *kv) { return kv->lheld ? kv->held : 0; }
uint64_t kv_pages_local_freed(const kv_cache *kv) { return kv->n_freed; }

// Frees pg's local rows: each local layer's K and V slice of the page (whole system pages,
// kv_new saw to it) goes back to the system; the scale bytes (F16S), a few per row, stay.
static void free_local(kv_cache *kv, int32_t pg) {
	kv->lheld[pg] = 0;
	kv->held--;
	kv->n_freed++;
	for (int32_t l = 0; l < kv->cfg.n_layers; l++) {
		if (!kv_layer_local(&kv->cfg, l)) continue;
		const size_t at = kv->page_bytes * ((size_t)l * (size_t)kv->cfg.n_pages + (size_t)pg);
		madvise(kv->k + at, kv->page_bytes, MADV_DONTNEED);
		madvise(kv->v + at, kv->page_bytes, MADV_DONTNEED);
	}
}

void kv__page_taken(kv_cache *kv, int32_t pg) {
	if (!kv->lheld || kv->lheld[pg]) return;
	kv->lheld[pg] = 1;
	kv->held++;
	const int32_t cap = kv->cfg.local_cap;
	if (!cap || kv->held <= cap) return;
	// past the cap, pages no sequence holds give theirs up, down to 7/8 of it so sweeps stay rare
	for (int32_t k = 0; k < kv->cfg.n_pages && kv->held > cap - cap / 8; k++) {
		const int32_t p = kv->clock;
		kv->clock = (kv->clock + 1) % kv->cfg.n_pages;
		if (p == pg || !kv->lheld[p] || kv->ref[p] > (kv__prefix_has(kv, p) ? 1 : 0)) continue;
		free_local(kv, p);
	}
}

// Whether positions [lo, hi) lie in the window before keep or before a multiple of stride up
// to keep: where a resume of the prompt, or of a prompt that parts from it there, reads.
static bool kept(const kv_cache *kv, int64_t lo, int64_t hi, int32_t keep, int32_t stride) {
	const int64_t w = kv->cfg.window;
	if (keep <= 0) return false;
	if (hi > keep - w + 1 && lo < keep) return true;
	if (stride <= 0) return false;
	const int64_t c = (lo / stride + 1) * stride; // the first multiple past lo: its window is the first that could reach [lo, hi)
	return c <= keep && c - w + 1 < hi;
}

int32_t kv_seq_release_window(kv_cache *kv, int32_t seq, int32_t keep, int32_t stride) {
	kv_seq *s = kv__seq(kv, seq);
	if (!s || !kv->lheld) return 0;
	// the window before its last whole page stays too: a next turn resumes there
	const int64_t pt = kv->cfg.page_tokens, from = ((int64_t)s->len - 1) / pt * pt - kv->cfg.window + 1;
	int32_t n = 0, shared = -1;
	// pages passed while another sequence held them are looked at again until freed
	for (int32_t i = s->lshared >= 0 ? s->lshared : s->lseen; i < s->npages && (int64_t)(i + 1) * pt <= from; i++) {
		const int32_t pg = s->pages[i];
		if (i >= s->lseen) s->lseen = i + 1;
		if (!kv->lheld[pg] || kept(kv, (int64_t)i * pt, (int64_t)(i + 1) * pt, keep, stride)) continue;
		// another sequence that holds it may still read it
		if (kv->ref[pg] - (kv__prefix_has(kv, pg) ? 1 : 0) > 1) {
			if (shared < 0) shared = i;
			continue;
		}
		free_local(kv, pg);
		n++;
	}
	s->lshared = shared;
	return n;
}

// Hands back the memory of every page at or above the limit, layer by layer (whole system
// pages only: a partial one at a boundary stays).
static void release_tail(kv_cache *kv) {
	const size_t sys = (size_t)sysconf(_SC_PAGESIZE);
	uint8_t *maps[4] = {kv->k, kv->v, kv->ks, kv->vs};
	const size_t per[4] = {kv->page_bytes, kv->page_bytes, kv->s_stride, kv->s_stride};
	for (int m = 0; m < 4; m++) {
		if (!maps[m]) continue;
		for (int32_t l = 0; l < kv->cfg.n_layers; l++) {
			uintptr_t lo = (uintptr_t)maps[m] + per[m] * ((size_t)l * (size_t)kv->cfg.n_pages + (size_t)kv->limit);
			uintptr_t hi = (uintptr_t)maps[m] + per[m] * (size_t)(l + 1) * (size_t)kv->cfg.n_pages;
			lo = (lo + sys - 1) & ~(uintptr_t)(sys - 1);
			hi &= ~(uintptr_t)(sys - 1);
			if (lo < hi) madvise((void *)lo, hi - lo, MADV_DONTNEED);
		}
	}
	for (int32_t p = kv->limit; kv->lheld && p < kv->cfg.n_pages; p++)
		if (kv->lheld[p]) kv->lheld[p] = 0, kv->held--;
	kv->released = true;
}

int32_t kv_pages_limit(const kv_cache *kv) { return kv->limit; }
int32_t kv_pages_over_limit(const kv_cache *kv) { return kv->over; }

void kv_set_limit(kv_cache *kv, int32_t limit) {
	if (limit < 1) limit = 1;
	if (limit > kv->cfg.n_pages) limit = kv->cfg.n_pages;
	const int32_t old = kv->limit;
	if (limit == old) return;
	kv->limit = limit;
	if (limit > old) {
		// Free pages of the new range join the stack; held ones join when let go.
		for (int32_t p = limit - 1; p >= old; p--)
			if (kv->ref[p] == 0) kv->free_ids[kv->n_free++] = p;
	} else {
		int32_t n = 0;
		for (int32_t i = 0; i < kv->n_free; i++)
			if (kv->free_ids[i] < limit) kv->free_ids[n++] = kv->free_ids[i];
		kv->n_free = n;
		// over still counts the old limit's pages: a drop must not hand back pages sequences hold
		kv->released = true;
		for (int32_t p = limit; p < kv->cfg.n_pages; p++)
			if (kv->ref[p] == 1) kv__prefix_drop(kv, p);
	}
	kv->over = 0;
	for (int32_t p = limit; p < kv->cfg.n_pages; p++) kv->over += kv->ref[p] > 0;
	kv->released = false;
	if (!kv->over) release_tail(kv);
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
	if (--kv->ref[page] == 0) {
		if (page < kv->limit) kv->free_ids[kv->n_free++] = page;
		else if (--kv->over == 0 && !kv->released) release_tail(kv);
	} else if (kv->ref[page] == 1) {
		kv__prefix_now_only(kv, page);
		// above the limit the cache does not keep it
		if (page >= kv->limit) kv__prefix_drop(kv, page);
	}
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
		kv__page_taken(kv, p);
	}
	s->len = (int32_t)len;
	return LANES_OK;
}

void kv_seq_truncate(kv_cache *kv, int32_t seq, int64_t len) {
	kv_seq *s = seq_at(kv, seq);
	if (!s) return;
	if (len < 0) len = 0;
	for (int c = 0; c < KV_CAPTURES; c++)
		if (s->capture[c] > len) s->capture[c] = 0; // its pages are cut, or it was never reached
	if (s->mark > len) s->mark = 0;
	if (len >= s->len) return;
	int32_t keep = kv_pages_for(kv, len);
	// a shared page is only ever read: no one may write into it again after a cut
	LANES_ASSERT(len % kv->cfg.page_tokens == 0 || kv->ref[s->pages[keep - 1]] == 1);
	while (s->npages > keep) kv__page_unref(kv, s->pages[--s->npages]);
	s->len = (int32_t)len;
	if (s->lseen > s->npages) s->lseen = s->npages;
	if (s->lshared >= s->npages) s->lshared = -1;
	if (kv->state) {
		// the state holds every token: only an empty sequence has one again (zero)
		s->stale = len > 0;
		if (!len) memset(kv_seq_state(kv, seq), 0, (size_t)kv->cfg.state_floats * sizeof(float));
	}
}

void kv_seq_ungrow(kv_cache *kv, int32_t seq, int64_t len) {
	kv_seq *s = seq_at(kv, seq);
	if (!s) return;
	const bool stale = s->stale;
	int32_t capture[KV_CAPTURES];
	memcpy(capture, s->capture, sizeof capture);
	const int32_t mark = s->mark;
	kv_seq_truncate(kv, seq, len);
	memcpy(s->capture, capture, sizeof capture);
	s->stale = stale, s->mark = mark;
}

// Seq's block in all (its state, capture or mark), NULL without one.
static float *state_of(const kv_cache *kv, float *all, int32_t seq) {
	return all && seq_at(kv, seq) ? all + (size_t)seq * (size_t)kv->cfg.state_floats : NULL;
}

void kv_seq_mark(kv_cache *kv, int32_t seq, int32_t pos) {
	kv_seq *s = seq_at(kv, seq);
	if (!s || !kv->state) return;
	LANES_ASSERT(pos == 0 || pos > s->len);
	s->mark = pos;
}

int32_t kv_seq_mark_pos(const kv_cache *kv, int32_t seq) {
	const kv_seq *s = seq_at(kv, seq);
	return s && kv->state ? s->mark : 0;
}

float *kv_seq_mark_state(kv_cache *kv, int32_t seq) { return state_of(kv, kv->marked, seq); }

int kv_seq_rewind(kv_cache *kv, int32_t seq) {
	kv_seq *s = seq_at(kv, seq);
	if (!s || !kv->state || !s->mark || s->len < s->mark || s->stale) return LANES_EINVAL;
	const int32_t at = s->mark;
	kv_seq_truncate(kv, seq, at);
	memcpy(kv_seq_state(kv, seq), kv_seq_mark_state(kv, seq), (size_t)kv->cfg.state_floats * sizeof(float));
	s->stale = false, s->mark = 0;
	return LANES_OK;
}

void kv_seq_capture(kv_cache *kv, int32_t seq, int slot, int32_t pos) {
	kv_seq *s = seq_at(kv, seq);
	if (!s || !kv->state) return;
	LANES_ASSERT(pos == 0 || (pos > s->len && pos % kv->cfg.page_tokens == 0));
	if (slot >= 0 && slot < KV_CAPTURES) s->capture[slot] = pos;
}

int32_t kv_seq_capture_pos(const kv_cache *kv, int32_t seq, int slot) {
	const kv_seq *s = seq_at(kv, seq);
	return s && kv->state && slot >= 0 && slot < KV_CAPTURES ? s->capture[slot] : 0;
}

float *kv_seq_capture_state(kv_cache *kv, int32_t seq, int slot) {
	if (slot < 0 || slot >= KV_CAPTURES || !kv->captured) return NULL;
	return state_of(kv, kv->captured + (size_t)slot * (size_t)kv->cfg.n_seqs * (size_t)kv->cfg.state_floats, seq);
}

uint64_t kv_state_bytes_per_seq(int64_t state_floats) { return (uint64_t)state_floats * 6 * sizeof(float); }

float *kv_seq_state(kv_cache *kv, int32_t seq) { return state_of(kv, kv->state, seq); }

bool kv_seq_state_valid(const kv_cache *kv, int32_t seq) {
	const kv_seq *s = seq_at(kv, seq);
	return s && !s->stale;
}

uint64_t kv_state_bytes(const kv_cache *kv) {
	return (uint64_t)kv->cfg.state_floats * ((2 + KV_CAPTURES) * (uint64_t)kv->cfg.n_seqs + (uint64_t)kv->cfg.state_ckpts) * sizeof(float);
}

void kv_seq_clear(kv_cache *kv, int32_t seq) { kv_seq_truncate(kv, seq, 0); }

const int32_t *kv_seq_pages(const kv_cache *kv, int32_t seq, int32_t *n) {
	const kv_seq *s = seq_at(kv, seq);
	*n = s ? s->npages : 0;
	return s ? s->pages : NULL;
}

uint8_t *kv_k_data(kv_cache *kv, int32_t layer) {
	LANES_ASSERT(layer >= 0 && layer < kv->cfg.n_layers);
	return kv->k + (size_t)layer * kv->cfg.n_pages * kv->page_bytes;
}

uint8_t *kv_v_data(kv_cache *kv, int32_t layer) {
	LANES_ASSERT(layer >= 0 && layer < kv->cfg.n_layers);
	return kv->v + (size_t)layer * kv->cfg.n_pages * kv->page_bytes;
}

size_t kv_row_bytes(const kv_cache *kv) { return kv->row_bytes; }

static bool is_f16(const kv_cache *kv) { return kv_types[kv->cfg.type].f16; }

uint16_t *kv_k_base(kv_cache *kv, int32_t layer) { return is_f16(kv) ? (uint16_t *)kv_k_data(kv, layer) : NULL; }
uint16_t *kv_v_base(kv_cache *kv, int32_t layer) { return is_f16(kv) ? (uint16_t *)kv_v_data(kv, layer) : NULL; }
size_t kv_page_stride(const kv_cache *kv) { return is_f16(kv) ? kv->page_bytes / 2 : 0; }
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


uint8_t *kv_ks_row(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos) {
	uint8_t *b = kv_ks_base(kv, layer);
	return b ? b + row_index(kv, seq, pos) * (size_t)(kv->cfg.kv_dim / kv->cfg.group) : NULL;
}

uint8_t *kv_vs_row(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos) {
	uint8_t *b = kv_vs_base(kv, layer);
	return b ? b + row_index(kv, seq, pos) * (size_t)(kv->cfg.kv_dim / kv->cfg.group) : NULL;
}

uint8_t *kv_k_at(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos) {
	return kv_k_data(kv, layer) + row_index(kv, seq, pos) * kv->row_bytes;
}

uint8_t *kv_v_at(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos) {
	return kv_v_data(kv, layer) + row_index(kv, seq, pos) * kv->row_bytes;
}

uint16_t *kv_k_row(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos) {
	return is_f16(kv) ? (uint16_t *)kv_k_at(kv, layer, seq, pos) : NULL;
}

uint16_t *kv_v_row(kv_cache *kv, int32_t layer, int32_t seq, int32_t pos) {
	return is_f16(kv) ? (uint16_t *)kv_v_at(kv, layer, seq, pos) : NULL;
}

void kv_put(kv_cache *kv, const tensor_kernels *ks, int32_t layer, int32_t seq, int32_t pos, const float *k,
	    const float *v) {
	const kv_type_traits *kt = &kv_types[kv->cfg.type];
	const int32_t n = kv->cfg.kv_dim, group = kv->cfg.group;
	kt->encode(ks, k, n, group, kv_k_at(kv, layer, seq, pos), kv_ks_row(kv, layer, seq, pos));
	kt->encode(ks, v, n, group, kv_v_at(kv, layer, seq, pos), kv_vs_row(kv, layer, seq, pos));
}

tensor_kv_view kv_view(kv_cache *kv, int32_t layer, int32_t seq, int32_t first) {
	const kv_type_traits *kt = &kv_types[kv->cfg.type];
	// f16 rows are addressed in values, block rows in bytes with the head's offset inside
	const size_t unit = kt->f16 ? 2 : 1, row = kv->row_bytes / unit;
	const uint8_t *ks = kv_ks_base(kv, layer), *vs = kv_vs_base(kv, layer);
	const size_t sg = kt->scaled ? (size_t)first / (size_t)kv->cfg.group : 0;
	int32_t npages;
	return (tensor_kv_view){
		.enc = kt->enc,
		.k = kv_k_data(kv, layer) + (kt->f16 ? (size_t)first * 2 : 0),
		.v = kv_v_data(kv, layer) + (kt->f16 ? (size_t)first * 2 : 0),
		.ks = ks ? ks + sg : NULL,
		.vs = vs ? vs + sg : NULL,
		.pages = kv_seq_pages(kv, seq, &npages),
		.page_stride = row * (size_t)kv->cfg.page_tokens,
		.row_stride = row,
		.s_page_stride = kv->s_stride,
		.s_row_stride = kt->scaled ? (size_t)(kv->cfg.kv_dim / kv->cfg.group) : 0,
		.page_tokens = kv->cfg.page_tokens,
		.off = kt->f16 ? 0 : first,
	};
}
