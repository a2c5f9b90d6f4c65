// tokenizer/ugm: the Unigram model ("t5": T5's and XLM-RoBERTa's SentencePiece vocabularies).
// The text is normalized as the file's precompiled charsmap says (the longest input prefix the
// map holds is replaced by its string; the map is a double array, each node one 32-bit word),
// spaces become U+2581 (one before the text, runs merged where the file asks), then the
// tokenization with the largest sum of scores wins (Viterbi over code points); a code point
// no token covers costs the lowest score less 10 as [UNK], and neighbouring [UNK]s merge.
#include "tokenizer/tok_impl.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

#define UGM_UNK_PENALTY 10.0
#define UGM_PIECE_MAX 256 // bytes of a piece: SentencePiece's are 16 code points at most

#define UGM_PIECE (TOK_A_NORMAL | TOK_A_USER | TOK_A_UNUSED)

// A node's fields in the charsmap's double array (base, the label that leads to it, whether it
// ends a key, the value a key's last node points at).
static uint32_t xcda_base(uint32_t node) { return (node >> 10) << ((node & (1u << 9)) >> 6); }
static uint32_t xcda_lcheck(uint32_t node) { return node & ((1u << 31) | 0xffu); }
static bool xcda_leaf(uint32_t node) { return (node >> 8) & 1; }
static uint32_t xcda_value(uint32_t node) { return node & ((1u << 31) - 1); }

// Token order by bytes (a prefix first), then id.
static int by_bytes(const void *a, const void *b, void *arg) {
	const tok_vocab *v = arg;
	const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	size_t nx, ny;
	const char *sx = tok_text(v, x, &nx), *sy = tok_text(v, y, &ny);
	const int c = memcmp(sx, sy, nx < ny ? nx : ny);
	return c ? c : nx != ny ? (nx < ny ? -1 : 1) : (x > y) - (x < y);
}

int tok_ugm_init(tok_vocab *v, const gguf *g, char *err, size_t errlen) {
	double lo = DBL_MAX;
	v->ugm_sorted = malloc(((size_t)v->n_tokens + 1) * sizeof *v->ugm_sorted);
	if (!v->ugm_sorted) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	for (int32_t i = 0; i < v->n_tokens; i++) {
		if (v->attr[i] & TOK_A_NORMAL && v->scores[i] < lo) lo = v->scores[i];
		size_t len;
		tok_text(v, i, &len);
		if (!(v->attr[i] & UGM_PIECE) || !len) continue;
		// the cut's search walks a piece's bytes at every position of the text: a bound keeps it linear
		if (len > UGM_PIECE_MAX)
			return base_seterr(err, errlen, LANES_EFORMAT, "token %d is %zu bytes: a Unigram piece is %d at most", i, len,
					   UGM_PIECE_MAX);
		v->ugm_sorted[v->n_ugm++] = i;
	}
	qsort_r(v->ugm_sorted, (size_t)v->n_ugm, sizeof *v->ugm_sorted, by_bytes, v);
	v->ugm_unk_score = (lo == DBL_MAX ? 0 : lo) - UGM_UNK_PENALTY;
	const gguf_value *cm = gguf_get(g, "tokenizer.ggml.precompiled_charsmap");
	if (!cm) return 0;
	if (cm->type != GGUF_ARRAY || (cm->arr.type != GGUF_U8 && cm->arr.type != GGUF_I8))
		return base_seterr(err, errlen, LANES_EFORMAT, "tokenizer.ggml.precompiled_charsmap must be an array of bytes");
	const uint8_t *b = cm->arr.raw;
	const size_t n = (size_t)cm->arr.n;
	if (n == 0) return 0;
	uint32_t blob = 0;
	if (n >= 4) blob = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	if (n < 4 || blob % 4 || blob < 4 || blob > n - 4)
		return base_seterr(err, errlen, LANES_EFORMAT, "tokenizer.ggml.precompiled_charsmap: its double array (%u bytes) does not fit its %zu bytes",
				   blob, n);
	v->xcda = malloc(blob);
	v->ugm_repl = malloc(n - 4 - blob + 1);
	if (!v->xcda || !v->ugm_repl) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	v->n_xcda = blob / 4;
	for (size_t i = 0; i < v->n_xcda; i++) {
		const uint8_t *p = b + 4 + 4 * i;
		v->xcda[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	}
	v->n_repl = n - 4 - blob;
	memcpy(v->ugm_repl, b + 4 + blob, v->n_repl);
	v->ugm_repl[v->n_repl] = 0; // the last string ends even where the file's does not
	return 0;
}

// The longest prefix of s[0..n) the charsmap replaces: its length (0: none) and replacement.
static size_t charsmap_prefix(const tok_vocab *v, const uint8_t *s, size_t n, const char **repl) {
	if (!v->n_xcda) return 0;
	size_t best = 0;
	uint32_t at = xcda_base(v->xcda[0]);
	for (size_t i = 0; i < n && s[i]; i++) {
		at ^= s[i];
		if (at >= v->n_xcda || xcda_lcheck(v->xcda[at]) != s[i]) break;
		const bool leaf = xcda_leaf(v->xcda[at]);
		at ^= xcda_base(v->xcda[at]);
		if (at >= v->n_xcda) break;
		if (leaf) {
			const uint32_t off = xcda_value(v->xcda[at]);
			if (off >= v->n_repl) break; // a value outside the strings: the map ends here
			best = i + 1;
			*repl = v->ugm_repl + off;
		}
	}
	return best;
}

// text normalized into out (NULL: only counted); returns its bytes: the charsmap's
// replacements, then spaces as U+2581 (one before the text when add_space_prefix; runs of them
// merged and the ends' dropped when remove_extra_whitespaces).
static size_t normalize(const tok_vocab *v, const char *text, size_t len, char *out) {
	static const char sp[] = "\xE2\x96\x81";
	bool prepended = false, in_word = false;
	size_t o = 0;
	for (size_t i = 0; i < len;) {
		const char *r = NULL;
		size_t rn, used = charsmap_prefix(v, (const uint8_t *)text + i, len - i, &r);
		if (used) {
			rn = strlen(r);
		} else {
			used = tok_utf8_valid((const uint8_t *)text + i, len - i);
			r = text + i, rn = used;
			if (!used) r = "\xEF\xBF\xBD", rn = 3, used = 1;
		}
		i += used;
		for (size_t k = 0; k < rn; k++) {
			const bool space = r[k] == ' ';
			if ((space && !v->ugm_merge_spaces) || (!space && !in_word && ((v->add_space_prefix && !prepended) || v->ugm_merge_spaces))) {
				if (out) memcpy(out + o, sp, 3);
				o += 3;
				prepended |= !space;
			}
			in_word = !space;
			if (!space && out) out[o] = r[k];
			o += !space;
		}
	}
	return o;
}

typedef struct {
	int32_t tok;
	size_t from;
	double score;
} ugm_best;

// The first of the sorted ids [lo, hi) (each longer than k bytes) whose byte k is at least c
// (above: past c).
static int32_t bound(const tok_vocab *v, int32_t lo, int32_t hi, size_t k, uint8_t c, bool above) {
	while (lo < hi) {
		const int32_t m = lo + (hi - lo) / 2;
		size_t len;
		const uint8_t b = (uint8_t)tok_text(v, v->ugm_sorted[m], &len)[k];
		if (b < c || (above && b == c)) lo = m + 1;
		else hi = m;
	}
	return lo;
}

int tok_ugm_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out) {
	const size_t n = normalize(v, text, len, NULL);
	if (!n) return 0;
	char *ns = malloc(n);
	ugm_best *best = ns ? malloc((n + 1) * sizeof *best) : NULL;
	if (!best) {
		free(ns);
		return LANES_ENOMEM;
	}
	normalize(v, text, len, ns);
	int rc = 0;
	for (size_t i = 0; i <= n; i++) best[i] = (ugm_best){v->unk, 0, -DBL_MAX};
	best[0].score = 0;
	for (size_t at = 0; at < n;) {
		size_t cp = tok_utf8_len((uint8_t)ns[at]);
		if (cp > n - at) cp = n - at;
		bool whole = false;
		// the pieces the text at at starts with: the sorted ids narrowed a byte at a time
		int32_t lo = 0, hi = v->n_ugm;
		for (size_t l = 1; at + l <= n && lo < hi; l++) {
			size_t tl;
			while (lo < hi && (tok_text(v, v->ugm_sorted[lo], &tl), tl < l)) lo++;
			const uint8_t c = (uint8_t)ns[at + l - 1];
			lo = bound(v, lo, hi, l - 1, c, false);
			hi = bound(v, lo, hi, l - 1, c, true);
			if (lo == hi || (tok_text(v, v->ugm_sorted[lo], &tl), tl != l)) continue;
			const int32_t id = v->ugm_sorted[lo];
			whole |= l == cp;
			const double s = best[at].score + (v->attr[id] & TOK_A_USER ? 0.0 : (double)v->scores[id]);
			if (s > best[at + l].score) best[at + l] = (ugm_best){(int32_t)id, at, s};
		}
		if (!whole) {
			const double s = best[at].score + v->ugm_unk_score;
			if (s > best[at + cp].score) best[at + cp] = (ugm_best){v->unk, at, s};
		}
		at += cp;
	}
	// the best path backwards, neighbouring [UNK]s as one, then turned around
	const size_t first = out->n;
	bool prev_unk = false;
	for (size_t at = n; at > 0 && !rc; at = best[at].from) {
		const bool unk = best[at].tok == v->unk;
		if (!(prev_unk && unk)) rc = tok_ids_push(out, best[at].tok);
		prev_unk = unk;
	}
	for (size_t i = first, j = out->n; !rc && i + 1 < j; i++, j--) {
		const int32_t t = out->v[i];
		out->v[i] = out->v[j - 1], out->v[j - 1] = t;
	}
	free(best);
	free(ns);
	return rc;
}
