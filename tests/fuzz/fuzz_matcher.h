// fuzz: what the grammar targets check of a compiled grammar — a matcher over a vocabulary of
// every single byte and a few longer pieces, fed bytes, whose every mask must say exactly which
// tokens it then takes (the longer pieces tried on a fresh matcher replaying the same bytes).
#ifndef LANES_FUZZ_MATCHER_H
#define LANES_FUZZ_MATCHER_H

#include "grammar/grammar.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_FEED 64 // bytes fed to one matcher
static const char *const fuzz_pieces[] = {"\"", "{\"", "\":", "ab", "true", "\xc3\xa9", "  ", "<tool_call>"};
#define FUZZ_NP (int32_t)(sizeof fuzz_pieces / sizeof *fuzz_pieces)
#define FUZZ_EOG (256 + FUZZ_NP) // the last id

// Token b < 256 is byte b; then the pieces; then an end-of-generation token.
static const grammar_vocab *fuzz_vocab(void) {
	static grammar_vocab *v;
	if (v) return v;
	static char bytes[256];
	const char *piece[FUZZ_EOG + 1];
	uint32_t len[FUZZ_EOG + 1];
	bool usable[FUZZ_EOG + 1];
	for (int i = 0; i < 256; i++) bytes[i] = (char)i, piece[i] = bytes + i, len[i] = 1, usable[i] = true;
	for (int32_t i = 0; i < FUZZ_NP; i++)
		piece[256 + i] = fuzz_pieces[i], len[256 + i] = (uint32_t)strlen(fuzz_pieces[i]), usable[256 + i] = true;
	piece[FUZZ_EOG] = "", len[FUZZ_EOG] = 0, usable[FUZZ_EOG] = false;
	const int32_t eog = FUZZ_EOG;
	if (grammar_vocab_new(&v, FUZZ_EOG + 1, piece, len, usable, &eog, 1)) abort();
	return v;
}

static bool fuzz_bit(const uint64_t *mask, int32_t id) { return mask[id / 64] >> (id % 64) & 1; }

// Whether a fresh matcher over g takes the bytes took[0..n) and then piece k.
static bool fuzz_takes_piece(grammar *g, const char *const *trig, int nt, const unsigned char *took, size_t n, int32_t k) {
	grammar_matcher *m = NULL;
	char err[256];
	if (grammar_matcher_new(&m, g, fuzz_vocab(), trig, nt, err, sizeof err)) abort();
	if (n && grammar_matcher_accept_bytes(m, (const char *)took, n)) abort(); // the same bytes, the same answers
	const bool ok = grammar_matcher_accept(m, 256 + k) == 0;
	grammar_matcher_free(m);
	return ok;
}

// Feeds feed[0..n) byte by byte to a matcher over g (lazy when trigger is non-empty), skipping
// the bytes it refuses; aborts where a mask and the matcher disagree.
static void fuzz_feed(grammar *g, const char *trigger, const unsigned char *feed, size_t n) {
	const char *trig[1] = {trigger};
	const int nt = trigger && trigger[0] ? 1 : 0;
	grammar_matcher *m = NULL;
	char err[256];
	if (grammar_matcher_new(&m, g, fuzz_vocab(), trig, nt, err, sizeof err)) return; // a start past max_stacks
	unsigned char took[FUZZ_FEED];
	size_t nt_took = 0;
	for (size_t i = 0; i < n && i < FUZZ_FEED; i++) {
		const uint64_t *mask;
		if (grammar_matcher_mask(m, &mask)) break; // out of memory: nothing to judge
		if (fuzz_bit(mask, FUZZ_EOG) != grammar_matcher_accepting(m)) abort();
		if (grammar_matcher_finished(m) && !grammar_matcher_accepting(m)) abort();
		if (i % 8 == 0)
			for (int32_t k = 0; k < FUZZ_NP; k++)
				if (fuzz_bit(mask, 256 + k) != fuzz_takes_piece(g, trig, nt, took, nt_took, k)) abort();
		const bool allowed = fuzz_bit(mask, feed[i]);
		const int rc = grammar_matcher_accept_bytes(m, (const char *)feed + i, 1);
		if ((rc == 0) != allowed) abort();
		if (rc == 0) took[nt_took++] = feed[i];
	}
	grammar_matcher_free(m);
}

#endif
