// tokenizer/bpe: byte-level BPE (tokenizer.ggml.model "gpt2"): invalid UTF-8 becomes U+FFFD,
// the pre-tokenizer splits the text into words, each word's bytes are mapped to GPT-2's
// printable characters and merged pair by pair in merge-rank order.
#include "tokenizer/tok_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
	int32_t prev, next;
	uint32_t off, n; // bytes of the encoded word
} sym;

typedef struct {
	char *enc;       // the word, GPT-2 encoded
	size_t enc_cap;
	sym *syms;
	size_t syms_cap;
	tok_heap heap;
} scratch;

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
	if (need <= *cap) return 0;
	size_t c = *cap ? *cap : 64;
	while (c < need) c *= 2;
	void *np = realloc(*p, c * elem);
	if (!np) return LANES_ENOMEM;
	*p = np;
	*cap = c;
	return 0;
}

static int add_bigram(const tok_vocab *v, scratch *s, int32_t l, int32_t r) {
	if (l < 0 || r < 0) return 0;
	const sym *a = &s->syms[l], *b = &s->syms[r];
	int64_t rank = tok_strtab_find_pair(&v->merges, s->enc + a->off, a->n, s->enc + b->off, b->n);
	if (rank < 0 || v->merge_split[rank] != a->n) return 0;
	return tok_heap_push(&s->heap, (tok_bigram){(double)rank, l, r, a->n + b->n});
}

// Merges one encoded word and appends its ids.
static int bpe_word(const tok_vocab *v, scratch *s, size_t len, tok_ids *out) {
	const char *w = s->enc;
	if (v->ignore_merges) {
		int64_t id = tok_strtab_find(&v->tokens, w, len);
		if (id >= 0) return tok_ids_push(out, (int32_t)id);
	}
	if (grow((void **)&s->syms, &s->syms_cap, len, sizeof *s->syms)) return LANES_ENOMEM;
	int32_t ns = 0;
	for (size_t off = 0; off < len; ns++) {
		size_t cl = tok_utf8_len((uint8_t)w[off]);
		if (cl > len - off) cl = len - off;
		s->syms[ns] = (sym){ns - 1, off + cl == len ? -1 : ns + 1, (uint32_t)off, (uint32_t)cl};
		off += cl;
	}
	s->heap.n = 0;
	for (int32_t i = 1; i < ns; i++)
		if (add_bigram(v, s, i - 1, i)) return LANES_ENOMEM;
	while (s->heap.n) {
		tok_bigram b = tok_heap_pop(&s->heap);
		sym *l = &s->syms[b.left], *r = &s->syms[b.right];
		// A candidate is stale once either side has changed since it was made.
		if (!l->n || !r->n || l->n + r->n != b.size) continue;
		l->n += r->n;
		r->n = 0;
		l->next = r->next;
		if (r->next >= 0) s->syms[r->next].prev = b.left;
		if (add_bigram(v, s, l->prev, b.left) || add_bigram(v, s, b.left, l->next)) return LANES_ENOMEM;
	}
	for (int32_t i = 0; i >= 0 && i < ns; i = s->syms[i].next) {
		const sym *y = &s->syms[i];
		if (!y->n) continue;
		int64_t id = tok_strtab_find(&v->tokens, w + y->off, y->n);
		if (id >= 0) {
			if (tok_ids_push(out, (int32_t)id)) return LANES_ENOMEM;
			continue;
		}
		// A merge result missing from the vocab: fall back to its characters' tokens.
		for (uint32_t k = 0; k < y->n;) {
			size_t cl = tok_utf8_len((uint8_t)w[y->off + k]);
			if (cl > y->n - k) cl = y->n - k;
			int64_t cid = tok_strtab_find(&v->tokens, w + y->off + k, cl);
			if (cid >= 0 && tok_ids_push(out, (int32_t)cid)) return LANES_ENOMEM;
			k += (uint32_t)cl;
		}
	}
	return 0;
}

// A copy of text with every byte that is not part of well-formed UTF-8 replaced by U+FFFD
// (as llama.cpp decodes it), or NULL with *clean set when text is already valid.
static char *sanitize(const char *text, size_t len, size_t *out_len, bool *clean) {
	size_t bad = 0;
	for (size_t i = 0; i < len;) {
		size_t l = tok_utf8_valid((const uint8_t *)text + i, len - i);
		if (!l) { bad++; l = 1; }
		i += l;
	}
	*clean = bad == 0;
	if (!bad) return NULL;
	char *o = malloc(len + 2 * bad);
	if (!o) return NULL;
	size_t k = 0;
	for (size_t i = 0; i < len;) {
		size_t l = tok_utf8_valid((const uint8_t *)text + i, len - i);
		if (!l) {
			memcpy(o + k, "\xEF\xBF\xBD", 3);
			k += 3;
			i++;
			continue;
		}
		memcpy(o + k, text + i, l);
		k += l;
		i += l;
	}
	*out_len = k;
	return o;
}

int tok_bpe_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out, char *err,
		   size_t errlen) {
	bool clean;
	size_t clen = len;
	char *copy = sanitize(text, len, &clen, &clean);
	if (!clean && !copy) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	const char *t = clean ? text : copy;
	tok_span *words;
	size_t nw;
	int rc = tok_pre_split(v, t, clen, &words, &nw, err, errlen);
	scratch s = {0};
	for (size_t i = 0; !rc && i < nw; i++) {
		size_t wl = words[i].end - words[i].start;
		if (wl > UINT32_MAX / 2) {
			rc = base_seterr(err, errlen, LANES_ELIMIT, "a word of %zu bytes is too long", wl);
			break;
		}
		if (grow((void **)&s.enc, &s.enc_cap, 2 * wl, 1)) { rc = LANES_ENOMEM; break; }
		size_t el = 0;
		for (size_t k = words[i].start; k < words[i].end; k++)
			el += tok_utf8_put(v->byte_cp[(uint8_t)t[k]], s.enc + el);
		rc = bpe_word(v, &s, el, out);
	}
	if (rc == LANES_ENOMEM) base_seterr(err, errlen, rc, "out of memory");
	free(words);
	free(s.enc);
	free(s.syms);
	free(s.heap.v);
	free(copy);
	return rc;
}
