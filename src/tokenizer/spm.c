// tokenizer/spm: SentencePiece-style encoding (tokenizer.ggml.model "llama") as llama.cpp's
// llm_tokenizer_spm does it: one symbol per UTF-8 character, adjacent pairs that form a token
// merged best score first, and symbols that are not tokens written as byte tokens <0xNN>.
#include "tokenizer/tok_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
	int32_t prev, next;
	uint32_t off, n;
} sym;

static int try_pair(const tok_vocab *v, const char *text, const sym *syms, int32_t l, int32_t r,
		    tok_heap *heap) {
	if (l < 0 || r < 0) return 0;
	// Adjacent symbols are contiguous in the text, so the pair is one slice of it.
	uint32_t n = syms[l].n + syms[r].n;
	int64_t id = tok_strtab_find(&v->tokens, text + syms[l].off, n);
	if (id < 0) return 0;
	return tok_heap_push(heap, (tok_bigram){-(double)v->scores[id], l, r, n});
}

// Encodes text[a..b) (symbols stored in syms, candidates in heap; both reused).
static int spm_segment(const tok_vocab *v, const char *text, size_t a, size_t b, sym *syms, tok_heap *heap,
		       tok_ids *out) {
	int rc = 0;
	int32_t ns = 0;
	for (size_t off = a; off < b; ns++) {
		size_t cl = tok_utf8_len((uint8_t)text[off]);
		if (cl > b - off) cl = b - off;
		syms[ns] = (sym){ns - 1, off + cl == b ? -1 : ns + 1, (uint32_t)off, (uint32_t)cl};
		off += cl;
	}
	heap->n = 0;
	for (int32_t i = 1; !rc && i < ns; i++) rc = try_pair(v, text, syms, i - 1, i, heap);
	while (!rc && heap->n) {
		tok_bigram bg = tok_heap_pop(heap);
		sym *l = &syms[bg.left], *r = &syms[bg.right];
		if (!l->n || !r->n || l->n + r->n != bg.size) continue; // stale
		l->n += r->n;
		r->n = 0;
		l->next = r->next;
		if (r->next >= 0) syms[r->next].prev = bg.left;
		rc = try_pair(v, text, syms, l->prev, bg.left, heap);
		if (!rc) rc = try_pair(v, text, syms, bg.left, l->next, heap);
	}
	// Every merged symbol is a token; a lone character that is not becomes its bytes.
	for (int32_t i = 0; !rc && ns > 0 && i >= 0; i = syms[i].next) {
		const sym *y = &syms[i];
		int64_t id = tok_strtab_find(&v->tokens, text + y->off, y->n);
		if (id >= 0) {
			rc = tok_ids_push(out, (int32_t)id);
			continue;
		}
		for (uint32_t k = 0; !rc && k < y->n; k++) {
			int32_t bt = v->byte_tok[(uint8_t)text[y->off + k]];
			if (bt < 0) bt = v->unk;
			if (bt >= 0) rc = tok_ids_push(out, bt);
		}
	}
	return rc;
}

static bool is_space_mark(const char *t, size_t i, size_t len) {
	return i + 3 <= len && !memcmp(t + i, "\xE2\x96\x81", 3);
}

int tok_spm_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out) {
	if (!len) return 0;
	if (len > UINT32_MAX) return LANES_ELIMIT;
	sym *syms = malloc(len * sizeof *syms);
	tok_heap heap = {0};
	if (!syms) return LANES_ENOMEM;
	int rc = 0;
	size_t seg = 0;
	if (v->spm_split) {
		// Cut before each U+2581 that follows another character: no token spans such a cut.
		bool prev_mark = false;
		for (size_t i = 0; !rc && i < len;) {
			bool mark = is_space_mark(text, i, len);
			if (mark && !prev_mark && i > seg) {
				rc = spm_segment(v, text, seg, i, syms, &heap, out);
				seg = i;
			}
			prev_mark = mark;
			size_t cl = tok_utf8_len((uint8_t)text[i]);
			i += cl < len - i ? cl : len - i;
		}
	}
	if (!rc) rc = spm_segment(v, text, seg, len, syms, &heap, out);
	free(syms);
	free(heap.v);
	return rc;
}
