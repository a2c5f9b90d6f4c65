// fuzz: the GBNF compiler on arbitrary text, then a matcher over what compiles fed bytes: the
// compiler answers a grammar or an error with its message, and every mask says exactly which
// tokens the matcher then takes. Input: GBNF text, NUL, a trigger (empty: none), NUL, bytes.
#include "base/base.h"
#include "fuzz_matcher.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	const uint8_t *z1 = memchr(data, 0, size);
	const size_t tl = z1 ? (size_t)(z1 - data) : size;
	const uint8_t *rest = z1 ? z1 + 1 : data + size, *end = data + size;
	const uint8_t *z2 = memchr(rest, 0, (size_t)(end - rest));
	char trigger[64] = "";
	const size_t gl = (size_t)((z2 ? z2 : end) - rest);
	memcpy(trigger, rest, gl < sizeof trigger - 1 ? gl : sizeof trigger - 1);
	const uint8_t *feed = z2 ? z2 + 1 : data; // no feed given: the text itself
	const size_t nf = z2 ? (size_t)(end - feed) : tl;
	// an exactly-sized copy so a read past the end is caught
	char *text = malloc(tl ? tl : 1);
	if (!text) return 0;
	memcpy(text, data, tl);
	grammar_limits lim;
	grammar_default_limits(&lim);
	lim.max_stacks = 256; // the same code at a size that keeps the fuzzer fast
	grammar *g = NULL;
	char err[256] = "";
	const int rc = grammar_compile(&g, text, tl, &lim, err, sizeof err);
	if (rc == 0) {
		if (!g) abort();
		fuzz_feed(g, trigger, feed, nf);
		grammar_unref(g);
	} else if (g || !err[0] || (rc != LANES_EFORMAT && rc != LANES_ELIMIT && rc != LANES_ENOMEM)) {
		abort(); // a refusal leaves nothing and says why
	}
	free(text);
	return 0;
}
