// kv: slot files — a prompt's cached pages of the base model written whole into one file and read
// back into the prefix cache (llama-server's slot save and restore). The file carries the disk
// folder's ident and the layout, and a checksum over all of it: anything else is refused.
#include "kv/kv_int.h"

#include <stdlib.h>
#include <string.h>

#define MAGIC "lanesSL1"

typedef struct {
	char magic[8];
	uint8_t ident[32];   // the disk folder's: the model file, kernel set and the cache's layout
	uint32_t type, n_layers, kv_dim, group, page_tokens, n_pages;
	uint64_t row_bytes, s_stride;
} slot_head;

static void head_of(const kv_cache *kv, slot_head *h, uint32_t n_pages) {
	memset(h, 0, sizeof *h);
	memcpy(h->magic, MAGIC, 8);
	memcpy(h->ident, kv__disk_ident(kv), 32);
	h->type = (uint32_t)kv->cfg.type;
	h->n_layers = (uint32_t)kv->cfg.n_layers;
	h->kv_dim = (uint32_t)kv->cfg.kv_dim;
	h->group = (uint32_t)kv->cfg.group;
	h->page_tokens = (uint32_t)kv->cfg.page_tokens;
	h->n_pages = n_pages;
	h->row_bytes = kv->row_bytes;
	h->s_stride = kv->s_stride;
}

// Bytes of a file of n pages: header, tokens, rows, checksum (n at most the cache's pages).
static size_t file_bytes(const kv_cache *kv, uint64_t n) {
	return sizeof(slot_head) + (size_t)n * ((size_t)kv->cfg.page_tokens * sizeof(int32_t) + kv__page_rows_bytes(kv)) +
	       sizeof(uint64_t);
}

static int usable(const kv_cache *kv, char *err, size_t errlen) {
	if (!kv->disk || !kv->px) return base_seterr(err, errlen, LANES_EUNSUPPORTED, "the prefix cache has no folder on disk");
	if (kv->state) return base_seterr(err, errlen, LANES_EUNSUPPORTED, "a model with recurrent state keeps no prefix pages on disk");
	return 0;
}

uint64_t kv_slot_max_bytes(const kv_cache *kv) { return file_bytes(kv, (uint64_t)kv->cfg.n_pages); }

int kv_slot_save(kv_cache *kv, const int32_t *tokens, int32_t n, uint8_t **out, size_t *len, int32_t *n_tokens, char *err,
		 size_t errlen) {
	*out = NULL, *len = 0, *n_tokens = 0;
	int rc = usable(kv, err, errlen);
	if (rc) return rc;
	const int32_t pt = kv->cfg.page_tokens;
	int32_t got = 0;
	for (uint64_t key = 0; got < n / pt; got++) {
		const int32_t *tok = tokens + (size_t)got * pt;
		const uint64_t k = kv__prefix_chain(key, tok, pt);
		const int32_t pg = kv__prefix_find(kv, k, key, tok);
		if (pg < 0 || kv__page_freed(kv, pg)) break; // a page without its local rows cannot be restored
		key = k;
	}
	const size_t bytes = file_bytes(kv, (uint64_t)got), tb = (size_t)got * pt * sizeof(int32_t), rb = kv__page_rows_bytes(kv);
	uint8_t *buf = malloc(bytes);
	if (!buf) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	slot_head h;
	head_of(kv, &h, (uint32_t)got);
	memcpy(buf, &h, sizeof h);
	if (tb) memcpy(buf + sizeof h, tokens, tb); // a lane that held nothing has no tokens
	uint64_t key = 0;
	for (int32_t i = 0; i < got; i++) {
		const int32_t *tok = tokens + (size_t)i * pt;
		const uint64_t k = kv__prefix_chain(key, tok, pt);
		kv__page_copy(kv, kv__prefix_find(kv, k, key, tok), buf + sizeof h + tb + (size_t)i * rb, true);
		key = k;
	}
	const uint64_t sum = base_hash64(buf, bytes - sizeof sum, h.n_pages);
	memcpy(buf + bytes - sizeof sum, &sum, sizeof sum);
	*out = buf, *len = bytes, *n_tokens = got * pt;
	return 0;
}

int kv_slot_load(kv_cache *kv, const uint8_t *buf, size_t len, int32_t **tokens, int32_t *n_tokens, char *err, size_t errlen) {
	*tokens = NULL, *n_tokens = 0;
	int rc = usable(kv, err, errlen);
	if (rc) return rc;
	slot_head h, want;
	if (len < sizeof h + sizeof(uint64_t)) return base_seterr(err, errlen, LANES_EINVAL, "shorter than a slot file's header");
	memcpy(&h, buf, sizeof h);
	if (memcmp(h.magic, MAGIC, 8)) return base_seterr(err, errlen, LANES_EINVAL, "not a slot file");
	// compared only, never used, before the checksum: a foreign file says so rather than its size
	head_of(kv, &want, h.n_pages);
	if (memcmp(&h, &want, sizeof h))
		return base_seterr(err, errlen, LANES_EINVAL, "saved for another model file, kernel set or KV type");
	// the size from a page count bounded by the cache: the checksum then covers every byte
	if (h.n_pages > (uint32_t)kv->cfg.n_pages || len != file_bytes(kv, h.n_pages))
		return base_seterr(err, errlen, LANES_EINVAL, "truncated or grown (%zu bytes)", len);
	uint64_t sum;
	memcpy(&sum, buf + len - sizeof sum, sizeof sum);
	if (sum != base_hash64(buf, len - sizeof sum, h.n_pages)) return base_seterr(err, errlen, LANES_EINVAL, "its checksum is wrong");
	const int32_t pt = kv->cfg.page_tokens, np = (int32_t)h.n_pages;
	const size_t tb = (size_t)np * pt * sizeof(int32_t), rb = kv__page_rows_bytes(kv);
	int32_t *tok = malloc(tb ? tb : 1);
	if (!tok) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	memcpy(tok, buf + sizeof h, tb);
	uint64_t key = 0;
	int32_t got = 0;
	for (; got < np; got++) {
		const int32_t *t = tok + (size_t)got * pt;
		const uint64_t k = kv__prefix_chain(key, t, pt);
		if (kv__prefix_find(kv, k, key, t) < 0 && kv__prefix_adopt(kv, k, key, t, buf + sizeof h + tb + (size_t)got * rb) < 0) break;
		key = k;
	}
	*tokens = tok, *n_tokens = got * pt;
	return 0;
}

int32_t kv_slot_erase(kv_cache *kv, const int32_t *tokens, int32_t n) {
	if (usable(kv, NULL, 0)) return 0;
	const int32_t pt = kv->cfg.page_tokens;
	int32_t dropped = 0;
	uint64_t key = 0;
	for (int32_t i = 0; i < n / pt; i++) {
		const int32_t *tok = tokens + (size_t)i * pt;
		const uint64_t k = kv__prefix_chain(key, tok, pt);
		const int32_t pg = kv__prefix_find(kv, k, key, tok);
		if (pg >= 0) kv__prefix_forget(kv, pg);
		// the page may live on disk alone (evicted, or from before a restart)
		if (kv__disk_forget(kv, k) || pg >= 0) dropped += pt;
		key = k;
	}
	return dropped;
}
