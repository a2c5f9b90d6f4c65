// kv: the prefix cache — whole pages indexed by a hash chained over every token before and
// in them, so a page is found only for the exact same prefix; the tokens and parent hash
// are kept and compared, so a hash collision can never attach the wrong page.
#include "kv/kv_int.h"

#include <stdlib.h>
#include <string.h>

struct kv_prefix {
	uint64_t *slot_key;  // open-addressing table: chain hash (0 = empty)
	int32_t *slot_page;
	uint32_t mask;       // table size - 1
	uint64_t *key;       // per page: its chain hash when cached, else 0
	uint64_t *parent;    // per page: the chain hash before it
	int32_t *tokens;     // per page: page_tokens ids
	uint8_t *flag;       // per page: PX_KEEP, PX_ON_DISK
	int32_t *prev, *next; // LRU list of cached pages (head = most recent)
	int32_t head, tail;
	int32_t n_cached;    // pages in the index
	int32_t n_only;      // of which no sequence holds
	// checkpoints of the recurrent state (a cache with one): the state after whole pages
	uint64_t *ck_key;    // [state_ckpts] chain hash of the pages before it (0: empty)
	uint64_t *ck_used;   // [state_ckpts] when last published or attached: the least recent goes first
	float *ck_state;     // [state_ckpts][state_floats]
	uint64_t ck_clock;
};

enum { PX_KEEP = 1, PX_ON_DISK = 2 }; // the base model's page (disk may keep it); a file holds it

static uint64_t chain(uint64_t parent, const int32_t *tok, int32_t n) {
	uint64_t h = base_hash64(tok, (size_t)n * sizeof *tok, parent);
	return h ? h : 1;
}

int kv_prefix_init(kv_cache *kv) {
	int32_t np = kv->cfg.n_pages, pt = kv->cfg.page_tokens;
	kv_prefix *p = calloc(1, sizeof *p);
	if (!p) return LANES_ENOMEM;
	kv->px = p;
	uint32_t size = 16;
	while (size < 2u * (uint32_t)np) size *= 2;
	p->mask = size - 1;
	p->slot_key = calloc(size, sizeof *p->slot_key);
	p->slot_page = calloc(size, sizeof *p->slot_page);
	p->key = calloc((size_t)np, sizeof *p->key);
	p->parent = calloc((size_t)np, sizeof *p->parent);
	p->tokens = calloc((size_t)np * (size_t)pt, sizeof *p->tokens);
	p->flag = calloc((size_t)np, sizeof *p->flag);
	p->prev = malloc((size_t)np * sizeof *p->prev);
	p->next = malloc((size_t)np * sizeof *p->next);
	p->head = p->tail = -1;
	if (!p->slot_key || !p->slot_page || !p->key || !p->parent || !p->tokens || !p->flag || !p->prev || !p->next) return LANES_ENOMEM;
	const size_t nc = kv->state ? (size_t)kv->cfg.state_ckpts : 0;
	if (nc) {
		p->ck_key = calloc(nc, sizeof *p->ck_key);
		p->ck_used = calloc(nc, sizeof *p->ck_used);
		p->ck_state = malloc(nc * (size_t)kv->cfg.state_floats * sizeof *p->ck_state);
		if (!p->ck_key || !p->ck_used || !p->ck_state) return LANES_ENOMEM;
	}
	return LANES_OK;
}

void kv_prefix_release(kv_cache *kv) {
	kv_prefix *p = kv->px;
	if (!p) return;
	free(p->slot_key);
	free(p->slot_page);
	free(p->key);
	free(p->parent);
	free(p->tokens);
	free(p->flag);
	free(p->prev);
	free(p->next);
	free(p->ck_key);
	free(p->ck_used);
	free(p->ck_state);
	free(p);
	kv->px = NULL;
}

void kv__prefix_now_only(kv_cache *kv, int32_t page) {
	if (kv->px && kv->px->key[page]) kv->px->n_only++;
}

int32_t kv_pages_cached(const kv_cache *kv) { return kv->px ? kv->px->n_only : 0; }

static void lru_unlink(kv_prefix *p, int32_t pg) {
	if (p->prev[pg] >= 0) p->next[p->prev[pg]] = p->next[pg];
	else p->head = p->next[pg];
	if (p->next[pg] >= 0) p->prev[p->next[pg]] = p->prev[pg];
	else p->tail = p->prev[pg];
}

static void lru_front(kv_prefix *p, int32_t pg) {
	p->prev[pg] = -1;
	p->next[pg] = p->head;
	if (p->head >= 0) p->prev[p->head] = pg;
	p->head = pg;
	if (p->tail < 0) p->tail = pg;
}

static int32_t lookup(const kv_cache *kv, uint64_t key, uint64_t parent, const int32_t *tok) {
	const kv_prefix *p = kv->px;
	int32_t pt = kv->cfg.page_tokens;
	for (uint32_t i = (uint32_t)key & p->mask;; i = (i + 1) & p->mask) {
		if (!p->slot_key[i]) return -1;
		if (p->slot_key[i] != key) continue;
		int32_t pg = p->slot_page[i];
		if (p->parent[pg] == parent && !memcmp(p->tokens + (size_t)pg * pt, tok, (size_t)pt * sizeof *tok)) return pg;
	}
}

static void table_remove(kv_prefix *p, uint64_t key, int32_t page) {
	uint32_t i = (uint32_t)key & p->mask;
	while (p->slot_key[i] && !(p->slot_key[i] == key && p->slot_page[i] == page)) i = (i + 1) & p->mask;
	if (!p->slot_key[i]) return;
	// backward-shift deletion keeps every probe chain unbroken
	uint32_t hole = i;
	for (uint32_t j = (i + 1) & p->mask; p->slot_key[j]; j = (j + 1) & p->mask) {
		uint32_t home = (uint32_t)p->slot_key[j] & p->mask;
		if (((j - home) & p->mask) >= ((j - hole) & p->mask)) {
			p->slot_key[hole] = p->slot_key[j];
			p->slot_page[hole] = p->slot_page[j];
			hole = j;
		}
	}
	p->slot_key[hole] = 0;
}

// Writes pg to disk unless a file holds it or it is not the base model's.
static void keep_on_disk(kv_cache *kv, int32_t pg) {
	kv_prefix *p = kv->px;
	// a recurrent model's checkpoints stay in memory: its pages alone would never be read back
	if (!kv->disk || p->flag[pg] != PX_KEEP || kv->state) return;
	if (kv__disk_write(kv, pg, p->key[pg], p->parent[pg], p->tokens + (size_t)pg * kv->cfg.page_tokens))
		p->flag[pg] |= PX_ON_DISK;
}

// Removes page pg from the index and drops the cache's hold on it; a page leaving memory
// (persist) goes to disk first.
static void drop(kv_cache *kv, int32_t pg, bool persist) {
	kv_prefix *p = kv->px;
	if (persist) keep_on_disk(kv, pg);
	p->flag[pg] = 0;
	table_remove(p, p->key[pg], pg);
	lru_unlink(p, pg);
	p->key[pg] = 0;
	p->n_cached--;
	if (kv->ref[pg] == 1) p->n_only--;
	kv__page_unref(kv, pg);
}

void kv__prefix_drop(kv_cache *kv, int32_t page) {
	if (kv->px && kv->px->key[page]) drop(kv, page, true);
}

void kv_prefix_evict_one(kv_cache *kv) {
	kv_prefix *p = kv->px;
	for (int32_t pg = p->tail; pg >= 0; pg = p->prev[pg])
		if (kv->ref[pg] == 1) {
			drop(kv, pg, true);
			return;
		}
	LANES_ASSERT(!"no cache-only page to evict");
}

void kv_prefix_clear(kv_cache *kv) {
	kv_prefix *p = kv->px;
	for (int32_t i = 0; p->ck_key && i < kv->cfg.state_ckpts; i++) p->ck_key[i] = p->ck_used[i] = 0;
	for (int32_t pg = p->tail; pg >= 0;) {
		int32_t prev = p->prev[pg];
		if (kv->ref[pg] == 1) drop(kv, pg, false);
		pg = prev;
	}
}

// Indexes page pg as the one after parent holding tok (chain hash k); the cache holds it.
static void insert(kv_cache *kv, int32_t pg, uint64_t k, uint64_t parent, const int32_t *tok, uint8_t flag) {
	kv_prefix *p = kv->px;
	int32_t pt = kv->cfg.page_tokens;
	uint32_t slot = (uint32_t)k & p->mask;
	while (p->slot_key[slot]) slot = (slot + 1) & p->mask;
	p->slot_key[slot] = k;
	p->slot_page[slot] = pg;
	p->key[pg] = k;
	p->parent[pg] = parent;
	p->flag[pg] = flag;
	memcpy(p->tokens + (size_t)pg * pt, tok, (size_t)pt * sizeof *tok);
	kv->ref[pg]++;
	p->n_cached++;
	lru_front(p, pg);
}

// A page read from disk into a free page, indexed as cache-only; -1 when there is no file for
// the prefix or no page to spare.
static int32_t from_disk(kv_cache *kv, uint64_t k, uint64_t parent, const int32_t *tok) {
	if (kv->n_free == 0 && kv_pages_cached(kv) > 0) kv_prefix_evict_one(kv);
	if (kv->n_free == 0) return -1;
	int32_t pg = kv->free_ids[kv->n_free - 1];
	if (!kv__disk_read(kv, pg, k, parent, tok)) return -1;
	kv->n_free--;
	kv__page_taken(kv, pg);
	insert(kv, pg, k, parent, tok, PX_KEEP | PX_ON_DISK);
	kv->px->n_only++;
	return pg;
}

uint64_t kv__prefix_chain(uint64_t parent, const int32_t *tok, int32_t n) { return chain(parent, tok, n); }

bool kv__prefix_has(const kv_cache *kv, int32_t pg) { return kv->px && kv->px->key[pg] != 0; }

int32_t kv__prefix_find(const kv_cache *kv, uint64_t key, uint64_t parent, const int32_t *tok) {
	return kv->px ? lookup(kv, key, parent, tok) : -1;
}

int32_t kv__prefix_adopt(kv_cache *kv, uint64_t key, uint64_t parent, const int32_t *tok, const uint8_t *rows) {
	if (!kv->px) return -1;
	if (kv->n_free == 0 && kv_pages_cached(kv) > 0) kv_prefix_evict_one(kv);
	if (kv->n_free == 0) return -1;
	const int32_t pg = kv->free_ids[--kv->n_free];
	kv__page_copy(kv, pg, (uint8_t *)rows, false);
	kv__page_taken(kv, pg);
	// kept, not yet on disk: the disk cache writes it when it leaves memory, as any page of the base
	insert(kv, pg, key, parent, tok, PX_KEEP);
	kv->px->n_only++;
	return pg;
}

void kv__prefix_forget(kv_cache *kv, int32_t page) {
	if (kv->px && kv->px->key[page]) drop(kv, page, false);
}

// The checkpoint after the pages of chain hash key, or -1.
static int32_t ck_find(const kv_cache *kv, uint64_t key) {
	for (int32_t i = 0; kv->px->ck_key && i < kv->cfg.state_ckpts; i++)
		if (kv->px->ck_key[i] == key) return i;
	return -1;
}

// Pages without the recurrent state after them would not give the same bits: with a state,
// only the pages up to the last checkpoint among the cached ones (n / pt of them at most);
// *cached gets how many of them are cached, checkpoint or not.
static int32_t ck_pages(kv_cache *kv, uint64_t root, const int32_t *tokens, int32_t whole, int32_t *slot, int32_t *cached) {
	const int32_t pt = kv->cfg.page_tokens;
	uint64_t key = root;
	int32_t best = 0, i = 0;
	*slot = -1;
	for (; i < whole; i++) {
		const int32_t *tok = tokens + (size_t)i * pt;
		const uint64_t k = chain(key, tok, pt);
		if (lookup(kv, k, key, tok) < 0) break;
		const int32_t c = ck_find(kv, k);
		if (c >= 0) best = i + 1, *slot = c;
		key = k;
	}
	*cached = i;
	return best;
}

int32_t kv_prefix_attach(kv_cache *kv, int32_t seq, uint64_t root, const int32_t *tokens, int32_t n) {
	kv_seq *s = kv__seq(kv, seq);
	kv_prefix *p = kv->px;
	int32_t pt = kv->cfg.page_tokens;
	if (!s || s->len || !p || n < pt) return s ? s->len : 0;
	int32_t whole = n / pt, ck = -1, cached = 0;
	if (kv->state) {
		whole = ck_pages(kv, root, tokens, whole, &ck, &cached);
		// the pages go on past the checkpoint: the state where they end is worth keeping
		s->capture[1] = cached > whole ? cached * pt : 0;
		if (!whole) return 0;
	}
	if (kv__seq_reserve(kv, s, whole)) return 0;
	uint64_t key = root;
	int32_t got = 0;
	for (; got < whole; got++) {
		const int32_t *tok = tokens + (size_t)got * pt;
		uint64_t k = chain(key, tok, pt);
		int32_t pg = lookup(kv, k, key, tok);
		if (pg < 0 && kv->disk && root == 0 && !kv->state) pg = from_disk(kv, k, key, tok);
		if (pg < 0) break;
		if (kv->ref[pg] == 1) p->n_only--;
		kv->ref[pg]++;
		s->pages[s->npages++] = pg;
		key = k;
	}
	// a resume reads the local rows of the window before it: end where none of them is freed
	if (kv->lheld) {
		int32_t use = got;
		for (; use > 0; use--) {
			int64_t first = (int64_t)use * pt - kv->cfg.window + 1;
			int32_t i = (int32_t)((first > 0 ? first : 0) / pt);
			while (i < use && !kv__page_freed(kv, s->pages[i])) i++;
			if (i == use) break;
		}
		while (got > use) kv__page_unref(kv, s->pages[--got]), s->npages--;
	}
	// the earliest pages become the most recent, so a prefix outlives its continuations
	for (int32_t i = got - 1; i >= 0; i--) {
		lru_unlink(p, s->pages[i]);
		lru_front(p, s->pages[i]);
	}
	s->len = got * pt;
	if (ck >= 0) {
		LANES_ASSERT(got == whole);
		memcpy(kv_seq_state(kv, seq), p->ck_state + (size_t)ck * (size_t)kv->cfg.state_floats,
		       (size_t)kv->cfg.state_floats * sizeof(float));
		p->ck_used[ck] = ++p->ck_clock;
	}
	return s->len;
}

void kv_prefix_publish(kv_cache *kv, int32_t seq, uint64_t root, const int32_t *tokens, int32_t n) {
	kv_seq *s = kv__seq(kv, seq);
	kv_prefix *p = kv->px;
	int32_t pt = kv->cfg.page_tokens;
	if (!s || !p) return;
	if (n > s->len) n = s->len;
	// each captured state goes with the pages before it, once the sequence has passed it
	int32_t cap[KV_CAPTURES];
	for (int c = 0; c < KV_CAPTURES; c++)
		cap[c] = kv->state && p->ck_key && s->capture[c] > 0 && s->capture[c] <= n ? s->capture[c] : 0;
	uint64_t key = root;
	for (int32_t i = 0; i < n / pt; i++) {
		const int32_t *tok = tokens + (size_t)i * pt;
		uint64_t k = chain(key, tok, pt);
		int32_t pg = s->pages[i];
		if (p->key[pg] == 0 && lookup(kv, k, key, tok) < 0) insert(kv, pg, k, key, tok, root == 0 ? PX_KEEP : 0);
		key = k;
		for (int slot = 0; slot < KV_CAPTURES; slot++) {
			if ((i + 1) * pt != cap[slot]) continue;
			int32_t c = ck_find(kv, k);
			if (c < 0) { // the least recently used takes it (an empty one first: never used)
				c = 0;
				for (int32_t j = 1; j < kv->cfg.state_ckpts; j++)
					if (p->ck_used[j] < p->ck_used[c]) c = j;
				memcpy(p->ck_state + (size_t)c * (size_t)kv->cfg.state_floats, kv_seq_capture_state(kv, seq, slot),
				       (size_t)kv->cfg.state_floats * sizeof(float));
				p->ck_key[c] = k;
			}
			p->ck_used[c] = ++p->ck_clock;
			s->capture[slot] = 0;
		}
	}
}

int32_t kv_disk_flush(kv_cache *kv) {
	kv_prefix *p = kv->px;
	int32_t n = 0;
	if (!p || !kv->disk) return 0;
	for (int32_t pg = p->head; pg >= 0; pg = p->next[pg])
		if (p->flag[pg] == PX_KEEP) {
			keep_on_disk(kv, pg);
			n += p->flag[pg] == (PX_KEEP | PX_ON_DISK);
		}
	return n;
}
