// tests: replays the grammar fuzz corpus (tests/corpus/grammar) through the fuzz target, then
// seeds made from the schema corpus: each schema's GBNF fed each of its valid documents, whose
// every byte the masks must agree on. Every input returns, each within bounded time.
#include "../fuzz/fuzz_grammar.c"
#include "grammar/schema.h"
#include "replay.h"
#include "schema_corpus.h"
#include "t.h"

// a sanitizer build is slow; an unbounded walk would take far longer
#define SLOW_US (10u * 1000 * 1000)

static uint64_t slowest;
static int seeds;

// Input: the schema's GBNF, no trigger, a valid document to feed.
static void seed(json_t *f, const char *path, void *arg) {
	char err[512] = "", *gbnf = NULL;
	CHECKF(f && grammar_schema_gbnf(json_object_get(f, "schema"), "root", &gbnf, err, sizeof err) == 0, "%s: %s", path, err);
	size_t i, gl = gbnf ? strlen(gbnf) : 0;
	json_t *doc;
	json_array_foreach(json_object_get(f, "valid"), i, doc) {
		char *text = json_dumps(doc, JSON_COMPACT | JSON_ENCODE_ANY);
		size_t tl = strlen(text);
		uint8_t *in = malloc(gl + 2 + tl);
		memcpy(in, gbnf, gl), in[gl] = 0, in[gl + 1] = 0, memcpy(in + gl + 2, text, tl);
		const uint64_t dt = replay_one(in, gl + 2 + tl);
		if (dt > slowest) slowest = dt;
		free(in), free(text);
		seeds++;
	}
	free(gbnf);
}

int main(void) {
	int n = replay_dir_timed("tests/corpus/grammar", &slowest);
	CHECKF(n >= 10, "corpus replayed (%d files)", n);
	CHECK(schema_corpus_each(seed, NULL) >= 11);
	CHECKF(seeds >= 20, "seeds from the schema corpus (%d)", seeds);
	CHECKF(slowest < SLOW_US, "slowest input %llu ms", (unsigned long long)(slowest / 1000));
	fprintf(stderr, "fuzz_grammar: %d corpus + %d seeds, slowest %llu us\n", n, seeds, (unsigned long long)slowest);
	T_DONE("fuzz_grammar");
}
