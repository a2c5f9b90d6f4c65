// tokenizer/wpm: WordPiece for BERT-family vocabularies ("bert") as GGUF files store them:
// llama.cpp's converter writes a word's first piece with a leading U+2581 and a continuation
// bare (BERT's "##" dropped). The text is split as BERT's basic tokenizer does (whitespace,
// punctuation and CJK characters alone, control characters dropped, lowercased, accents
// stripped), then each word takes the longest piece that matches from its start, repeatedly;
// a word some part of which no piece matches is one [UNK].
#include "tokenizer/tok_impl.h"

#include <stdlib.h>
#include <string.h>

#define WPM_MAX_WORD 100 // code points: a longer word is [UNK], as BERT's WordPiece has it

static bool wpm_space(uint32_t c) {
	return c == ' ' || (c >= 0x09 && c <= 0x0D) || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
	       c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static bool wpm_control(uint32_t c) { return c == 0 || c == 0xFFFD || c < 0x20 || (c >= 0x7F && c <= 0x9F) || c == 0xAD; }

// ASCII's non-alphanumeric printables (BERT counts them all), Latin-1's and the general
// punctuation blocks, and CJK characters: each a word of its own.
static bool wpm_alone(uint32_t c) {
	if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
	return c == 0xA1 || c == 0xA7 || c == 0xAB || c == 0xB6 || c == 0xB7 || c == 0xBB || c == 0xBF || (c >= 0x2010 && c <= 0x2027) ||
	       (c >= 0x2030 && c <= 0x205E) || (c >= 0x3001 && c <= 0x303F) || (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
	       (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2CEAF) || (c >= 0xF900 && c <= 0xFAFF) ||
	       (c >= 0x2F800 && c <= 0x2FA1F);
}

// Latin-1's letters with their accents stripped (the base letter of each that decomposes, as
// the uncased vocabularies' NFD and mark stripping give it), the others lowercased.
static uint32_t latin1_fold(uint32_t c) {
	static const char base[] = "aaaaaa\0ceeeeiiii\0nooooo\0\0uuuuy\0\0" // U+00C0..U+00DF
				   "aaaaaa\0ceeeeiiii\0nooooo\0\0uuuuy\0y"; // U+00E0..U+00FF
	if (base[c - 0xC0]) return (uint32_t)(unsigned char)base[c - 0xC0];
	return c <= 0xDE && c != 0xD7 ? c + 0x20 : c;
}

static uint32_t wpm_fold(uint32_t c) {
	if (c >= 'A' && c <= 'Z') return c + 32;
	if (c >= 0xC0 && c <= 0xFF) return latin1_fold(c);
	if ((c >= 0x391 && c <= 0x3A9 && c != 0x3A2) || (c >= 0x410 && c <= 0x42F)) return c + 32; // Greek, Cyrillic capitals
	if (c >= 0x400 && c <= 0x40F) return c + 80;
	return c;
}

// The pieces of one word (w: U+2581 then the word's bytes, nc its code points) into out.
static int wpm_word(const tok_vocab *v, const char *w, size_t n, size_t nc, tok_ids *out) {
	const size_t mark = out->n;
	bool ok = nc <= WPM_MAX_WORD;
	for (size_t i = 0; ok && i < n;) {
		size_t j = n - i < v->tokens.max_len ? n : i + v->tokens.max_len;
		int64_t id = -1;
		for (; j > i && (id = tok_strtab_find(&v->tokens, w + i, j - i)) < 0; j--) {}
		if (id < 0) ok = false;
		else if (tok_ids_push(out, (int32_t)id)) return LANES_ENOMEM;
		i = j;
	}
	if (ok) return 0;
	out->n = mark;
	return tok_ids_push(out, v->unk);
}

int tok_wpm_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out) {
	// a word grows at most 3 bytes per input byte (a fold never lengthens a character past 3)
	char *w = malloc(3 * len + 4);
	if (!w) return LANES_ENOMEM;
	size_t n = 0, nc = 0;
	int rc = 0;
	const uint8_t *s = (const uint8_t *)text;
	for (size_t i = 0; i <= len && !rc;) {
		uint32_t c = ' ';
		size_t cl = 1;
		if (i < len) {
			cl = tok_utf8_valid(s + i, len - i);
			if (!cl) cl = 1, c = 0xFFFD;
			else if (cl == 1) c = s[i];
			else if (cl == 2) c = (uint32_t)(s[i] & 0x1F) << 6 | (s[i + 1] & 0x3F);
			else if (cl == 3) c = (uint32_t)(s[i] & 0x0F) << 12 | (uint32_t)(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
			else c = (uint32_t)(s[i] & 0x07) << 18 | (uint32_t)(s[i + 1] & 0x3F) << 12 | (uint32_t)(s[i + 2] & 0x3F) << 6 | (s[i + 3] & 0x3F);
		}
		i += cl;
		if (c >= 0x300 && c <= 0x36F) continue; // a combining accent
		const bool space = wpm_space(c), alone = wpm_alone(c);
		if (!space && wpm_control(c)) continue;
		if ((space || alone) && nc) {
			rc = wpm_word(v, w, n, nc, out);
			nc = 0;
		}
		if (space || rc) continue;
		if (!nc) memcpy(w, "\xE2\x96\x81", 3), n = 3;
		n += tok_utf8_put(wpm_fold(c), w + n);
		nc++;
		if (alone) {
			rc = wpm_word(v, w, n, nc, out);
			nc = 0;
		}
	}
	free(w);
	return rc;
}
