// tokenizer/util: the hashed string tables (token texts, BPE merges), strict UTF-8 checks
// and the growable id list the encoders write into.
#include "tokenizer/tok_impl.h"

#include <stdlib.h>
#include <string.h>

int64_t tok_strtab_find(const tok_strtab *t, const char *key, size_t len) {
	if (!t->slot || len > t->max_len) return -1;
	uint64_t h = tok_hash(key, len);
	for (uint64_t i = h & t->mask;; i = (i + 1) & t->mask) {
		uint32_t s = t->slot[i];
		if (!s) return -1;
		uint32_t e = s - 1;
		if (t->hash[e] == (uint32_t)h && t->len[e] == len && !memcmp(t->arena + t->off[e], key, len))
			return e;
	}
}

int64_t tok_strtab_find_pair(const tok_strtab *t, const char *a, size_t alen, const char *b,
			     size_t blen) {
	size_t len = alen + 1 + blen;
	if (len > t->max_len) return -1; // longer than every entry (this also bounds key below)
	char key[len];
	memcpy(key, a, alen);
	key[alen] = ' ';
	memcpy(key + alen + 1, b, blen);
	return tok_strtab_find(t, key, len);
}

size_t tok_utf8_prefix(const uint8_t *s, size_t n, size_t *need) {
	*need = 0;
	if (!n) return 0;
	uint8_t c = s[0], lo = 0x80, hi = 0xBF;
	if (c < 0x80) return *need = 1;
	if (c >= 0xC2 && c <= 0xDF) *need = 2;
	else if (c == 0xE0) *need = 3, lo = 0xA0;
	else if (c >= 0xE1 && c <= 0xEF) *need = 3, hi = c == 0xED ? 0x9F : 0xBF;
	else if (c == 0xF0) *need = 4, lo = 0x90;
	else if (c >= 0xF1 && c <= 0xF3) *need = 4;
	else if (c == 0xF4) *need = 4, hi = 0x8F;
	else return 0;
	size_t i = 1;
	for (; i < *need && i < n; i++)
		if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xBF)) break;
	return i;
}

size_t tok_utf8_valid(const uint8_t *s, size_t n) {
	size_t need, p = tok_utf8_prefix(s, n, &need);
	return need && p == need ? need : 0;
}

size_t tok_utf8_put(uint32_t cp, char *out) {
	uint8_t *o = (uint8_t *)out;
	if (cp < 0x80) { o[0] = (uint8_t)cp; return 1; }
	if (cp < 0x800) { o[0] = 0xC0 | (cp >> 6); o[1] = 0x80 | (cp & 0x3F); return 2; }
	if (cp < 0x10000) {
		o[0] = 0xE0 | (cp >> 12); o[1] = 0x80 | ((cp >> 6) & 0x3F); o[2] = 0x80 | (cp & 0x3F);
		return 3;
	}
	o[0] = 0xF0 | (cp >> 18); o[1] = 0x80 | ((cp >> 12) & 0x3F);
	o[2] = 0x80 | ((cp >> 6) & 0x3F); o[3] = 0x80 | (cp & 0x3F);
	return 4;
}

int tok_ids_push(tok_ids *l, int32_t id) {
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		int32_t *nv = realloc(l->v, cap * sizeof *nv);
		if (!nv) return LANES_ENOMEM;
		l->v = nv;
		l->cap = cap;
	}
	l->v[l->n++] = id;
	return 0;
}

static bool bigram_before(const tok_bigram *a, const tok_bigram *b) {
	return a->key < b->key || (a->key == b->key && a->left < b->left);
}

int tok_heap_push(tok_heap *h, tok_bigram b) {
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 64;
		tok_bigram *nv = realloc(h->v, cap * sizeof *nv);
		if (!nv) return LANES_ENOMEM;
		h->v = nv;
		h->cap = cap;
	}
	size_t i = h->n++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!bigram_before(&b, &h->v[p])) break;
		h->v[i] = h->v[p];
		i = p;
	}
	h->v[i] = b;
	return 0;
}

tok_bigram tok_heap_pop(tok_heap *h) {
	tok_bigram top = h->v[0], last = h->v[--h->n];
	size_t i = 0, n = h->n;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n) break;
		if (c + 1 < n && bigram_before(&h->v[c + 1], &h->v[c])) c++;
		if (!bigram_before(&h->v[c], &last)) break;
		h->v[i] = h->v[c];
		i = c;
	}
	if (n) h->v[i] = last;
	return top;
}
