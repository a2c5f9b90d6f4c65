// tests: replays the schema fuzz corpus (tests/corpus/schema_text: raw JSON texts) through the
// fuzz target, then the schemas of tests/corpus/schema as seeds. Every input returns, each
// within bounded time.
#include "../fuzz/fuzz_schema.c"
#include "replay.h"
#include "schema_corpus.h"
#include "t.h"

// a sanitizer build is slow; an unbounded walk would take far longer
#define SLOW_US (10u * 1000 * 1000)

static uint64_t slowest;
static int seeds;

static void seed(json_t *f, const char *path, void *arg) {
	char *text = f ? json_dumps(json_object_get(f, "schema"), JSON_ENCODE_ANY) : NULL;
	CHECKF(text != NULL, "%s has a schema", path);
	if (!text) return;
	const uint64_t dt = replay_one((const uint8_t *)text, strlen(text));
	if (dt > slowest) slowest = dt;
	seeds++;
	free(text);
}

int main(void) {
	int n = replay_dir_timed("tests/corpus/schema_text", &slowest);
	CHECKF(n >= 8, "corpus replayed (%d files)", n);
	CHECK(schema_corpus_each(seed, NULL) >= 11);
	CHECKF(seeds >= 11, "seeds from the schema corpus (%d)", seeds);
	CHECKF(slowest < SLOW_US, "slowest input %llu ms", (unsigned long long)(slowest / 1000));
	fprintf(stderr, "fuzz_schema: %d corpus + %d seeds, slowest %llu us\n", n, seeds, (unsigned long long)slowest);
	T_DONE("fuzz_schema");
}
