// tokenizer/encode: text to ids. Special-token strings are cut out of the text first (longest
// token first, as llama.cpp does), the remaining fragments go through SPM or BPE, and BOS/EOS
// are added as the vocab says.
#include "tokenizer/tok_impl.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	size_t off, len;
	int32_t tok; // -1 for a text fragment
} frag;

typedef struct {
	frag *v;
	size_t n, cap;
} frags;

static int frags_push(frags *f, frag x) {
	if (f->n == f->cap) {
		size_t cap = f->cap ? f->cap * 2 : 16;
		frag *nv = realloc(f->v, cap * sizeof *nv);
		if (!nv) return LANES_ENOMEM;
		f->v = nv;
		f->cap = cap;
	}
	f->v[f->n++] = x;
	return 0;
}

// Splits every text fragment of *cur around each occurrence of special token id.
static int cut_token(const tok_vocab *v, const char *text, int32_t id, frags *cur, frags *next) {
	const char *tt = v->tokens.arena + v->tokens.off[id];
	size_t tl = v->tokens.len[id];
	uint16_t a = v->attr[id];
	next->n = 0;
	for (size_t i = 0; i < cur->n; i++) {
		frag f = cur->v[i];
		if (f.tok >= 0 || f.len < tl) {
			if (frags_push(next, f)) return LANES_ENOMEM;
			continue;
		}
		size_t off = f.off, len = f.len;
		for (;;) {
			const char *m = len >= tl ? memmem(text + off, len, tt, tl) : NULL;
			if (!m) {
				if (len && frags_push(next, (frag){off, len, -1})) return LANES_ENOMEM;
				break;
			}
			size_t mo = (size_t)(m - text), left = mo - off;
			if (a & TOK_A_LSTRIP)
				while (left && isspace((unsigned char)text[off + left - 1])) left--;
			if (left && frags_push(next, (frag){off, left, -1})) return LANES_ENOMEM;
			if (frags_push(next, (frag){0, 0, id})) return LANES_ENOMEM;
			size_t r = mo + tl, rlen = off + len - r;
			if (a & TOK_A_RSTRIP)
				while (rlen && isspace((unsigned char)text[r])) r++, rlen--;
			off = r;
			len = rlen;
		}
	}
	frags t = *cur;
	*cur = *next;
	*next = t;
	return 0;
}

static bool skipped(const tok_vocab *v, int32_t id, bool parse_special) {
	return !parse_special && (v->attr[id] & (TOK_A_CONTROL | TOK_A_UNKNOWN));
}

// Marks in occurs[k] whether special[k] appears anywhere in the text (one pass, by first two
// bytes), so the cutting below scans the text only for tokens that are there.
static void find_occurring(const tok_vocab *v, const char *text, size_t len, bool parse_special, uint8_t *occurs) {
	const uint8_t *t = (const uint8_t *)text;
	for (size_t i = 0; i + 1 < len; i++) {
		unsigned key = (unsigned)t[i] << 8 | t[i + 1];
		for (uint32_t j = v->sp_start[key]; j < v->sp_start[key + 1]; j++) {
			uint32_t k = v->sp_list[j];
			int32_t id = v->special[k];
			size_t tl = v->tokens.len[id];
			if (occurs[k] || tl > len - i || skipped(v, id, parse_special)) continue;
			if (!memcmp(text + i, v->tokens.arena + v->tokens.off[id], tl)) occurs[k] = 1;
		}
	}
	for (size_t j = 0; j < v->n_sp_short; j++) {
		uint32_t k = v->sp_short[j];
		int32_t id = v->special[k];
		if (!skipped(v, id, parse_special) && v->tokens.len[id] == 1 && memchr(text, v->tokens.arena[v->tokens.off[id]], len))
			occurs[k] = 1;
	}
}

static int partition(const tok_vocab *v, const char *text, size_t len, bool parse_special, frags *out) {
	out->n = 0;
	if (!len) return 0;
	if (frags_push(out, (frag){0, len, -1})) return LANES_ENOMEM;
	if (!v->n_special) return 0;
	uint8_t *occurs = calloc(v->n_special, 1);
	if (!occurs) return LANES_ENOMEM;
	find_occurring(v, text, len, parse_special, occurs);
	frags tmp = {0};
	int rc = 0;
	for (size_t k = 0; !rc && k < v->n_special; k++)
		if (occurs[k]) rc = cut_token(v, text, v->special[k], out, &tmp);
	free(tmp.v);
	free(occurs);
	return rc;
}

// SPM: a space is prefixed to text at the start and after each special token, then spaces
// are written as U+2581.
static int spm_fragment(const tok_vocab *v, const char *text, size_t len, bool prefix, char **buf,
			size_t *cap, tok_ids *out) {
	size_t need = 3 * (len + 1);
	if (need > *cap) {
		char *nb = realloc(*buf, need);
		if (!nb) return LANES_ENOMEM;
		*buf = nb;
		*cap = need;
	}
	char *o = *buf;
	size_t k = 0;
	if (prefix) { memcpy(o, "\xE2\x96\x81", 3); k = 3; }
	for (size_t i = 0; i < len; i++) {
		if (text[i] == ' ') { memcpy(o + k, "\xE2\x96\x81", 3); k += 3; }
		else o[k++] = text[i];
	}
	return tok_spm_encode(v, o, k, out);
}

int tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_special,
	       bool parse_special, int32_t **ids, size_t *n, char *err, size_t errlen) {
	*ids = NULL;
	*n = 0;
	tok_ids out = {0};
	frags fr = {0};
	char *buf = NULL;
	size_t cap = 0;
	int rc = partition(v, text, len, parse_special, &fr);
	if (!rc && add_special && v->add_bos) rc = tok_ids_push(&out, v->bos);
	bool prev_special = true;
	for (size_t i = 0; !rc && i < fr.n; i++) {
		const frag *f = &fr.v[i];
		if (f->tok >= 0) {
			rc = tok_ids_push(&out, f->tok);
			prev_special = true;
		} else if (v->model == TOK_MODEL_SPM) {
			rc = spm_fragment(v, text + f->off, f->len, v->add_space_prefix && prev_special, &buf, &cap, &out);
			prev_special = false;
		} else if (v->model == TOK_MODEL_WPM) {
			rc = tok_wpm_encode(v, text + f->off, f->len, &out);
		} else if (v->model == TOK_MODEL_UGM) {
			rc = tok_ugm_encode(v, text + f->off, f->len, &out);
		} else {
			rc = tok_bpe_encode(v, text + f->off, f->len, &out, err, errlen);
		}
	}
	if (!rc && add_special && v->add_eos) rc = tok_ids_push(&out, v->eos);
	if (!rc && add_special && v->add_sep) rc = tok_ids_push(&out, v->sep);
	free(fr.v);
	free(buf);
	if (rc) {
		free(out.v);
		if (rc == LANES_ENOMEM) base_seterr(err, errlen, rc, "out of memory");
		else if (rc == LANES_ELIMIT && v->model == TOK_MODEL_SPM) base_seterr(err, errlen, rc, "text too long");
		return rc;
	}
	if (!out.n) free(out.v), out.v = NULL;
	*ids = out.v;
	*n = out.n;
	return 0;
}

int tok_encode_chat(const tok_vocab *v, const char *prompt, size_t len, int32_t **ids, size_t *n,
		    char *err, size_t errlen) {
	int rc = tok_encode(v, prompt, len, false, true, ids, n, err, errlen);
	if (rc || !v->add_bos || v->bos < 0 || (*n && (*ids)[0] == v->bos)) return rc;
	int32_t *nv = realloc(*ids, (*n + 1) * sizeof *nv);
	if (!nv) {
		free(*ids);
		*ids = NULL;
		*n = 0;
		return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	}
	memmove(nv + 1, nv, *n * sizeof *nv);
	nv[0] = v->bos;
	*ids = nv;
	(*n)++;
	return 0;
}
