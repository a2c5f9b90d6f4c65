// fuzz: JSON Schema to GBNF on arbitrary JSON text: a schema gives GBNF the grammar engine
// compiles (or finds past a limit, never malformed) or a message; then the text itself is fed
// to a matcher over the grammar, whose masks must say exactly what it takes.
#include "base/base.h"
#include "fuzz_matcher.h"
#include "grammar/schema.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	json_t *s = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
	if (!s) return 0;
	char *gbnf = NULL, err[512] = "", rel[256];
	// the relaxed compiler on the odd sizes: tool schemas take it
	const int rc = size & 1 ? grammar_schema_gbnf_relaxed(s, "root", &gbnf, rel, sizeof rel, err, sizeof err)
				: grammar_schema_gbnf(s, "root", &gbnf, err, sizeof err);
	json_decref(s);
	if (rc) {
		if (gbnf || !err[0] || rc > 0) abort(); // a refusal leaves nothing and says why
		return 0;
	}
	if (!gbnf) abort();
	grammar_limits lim;
	grammar_default_limits(&lim);
	lim.max_stacks = 256; // the same code at a size that keeps the fuzzer fast
	grammar *g = NULL;
	const int crc = grammar_compile(&g, gbnf, strlen(gbnf), &lim, err, sizeof err);
	if (crc != 0 && crc != LANES_ELIMIT && crc != LANES_ENOMEM) abort(); // the schema wrote GBNF that does not parse
	if (g) fuzz_feed(g, NULL, data, size);
	grammar_unref(g);
	free(gbnf);
	return 0;
}
