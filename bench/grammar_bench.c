// bench: constrained decoding cost — builds the token trie of a vocabulary, then steps a
// JSON grammar (nested objects) through a generated document token by token, timing
// mask() + accept(). The document is fed three times in a row: the first copy visits each
// state cold, the third finds every state's mask cached (warm).
// usage: grammar_bench [VOCAB.gguf...]   (default: $LANES_SHARED/vocab/ggml-vocab-qwen2.gguf)
#include "base/base.h"
#include "cli/settings.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *gbnf =
	"root   ::= (ws object \"\\n\")+\n"
	"value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
	"object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
	"array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
	"string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
	"number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
	"ws     ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

// A tool-call-like document: nested objects, arrays, prose strings, numbers, unicode.
static const char *doc =
	"{\"name\": \"search_flights\", \"arguments\": {\"origin\": \"San Francisco (SFO)\", "
	"\"destination\": \"Z\xC3\xBCrich, Switzerland\", \"passengers\": [{\"name\": \"Ada Lovelace\", "
	"\"age\": 36, \"seat\": \"window\"}, {\"name\": \"Charles Babbage\", \"age\": 79, \"seat\": null}], "
	"\"dates\": {\"depart\": \"2025-07-14\", \"return\": \"2025-07-28\", \"flexible\": true}, "
	"\"budget\": {\"currency\": \"EUR\", \"max\": 1250.50, \"notes\": \"Prefer direct flights; a single "
	"stop is fine if it saves more than 200 \xE2\x82\xAC. No red-eyes, please \xF0\x9F\x99\x8F.\"}, "
	"\"loyalty\": [\"Star Alliance\", \"oneworld\"], \"score\": -3.5e+2}}";

static double now_ms(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int run(const char *path) {
	char err[512];
	gguf *gf;
	if (gguf_open(&gf, path, err, sizeof err)) { fprintf(stderr, "grammar_bench: %s\n", err); return 1; }
	tok_vocab *tv;
	int rc = tok_vocab_load(&tv, gf, err, sizeof err);
	gguf_free(gf);
	if (rc) { fprintf(stderr, "grammar_bench: %s: %s\n", path, err); return 1; }
	int32_t n = tok_n_tokens(tv);
	const char **pc = malloc((size_t)n * sizeof *pc);
	uint32_t *len = malloc((size_t)n * sizeof *len);
	bool *usable = malloc((size_t)n);
	if (!pc || !len || !usable) { fprintf(stderr, "grammar_bench: out of memory\n"); return 1; }
	for (int32_t i = 0; i < n; i++) {
		size_t l = 0;
		pc[i] = tok_piece(tv, i, 0, &l);
		len[i] = (uint32_t)l, usable[i] = pc[i] && l && !tok_is_control(tv, i);
	}
	size_t neog;
	const int32_t *eog = tok_eog_ids(tv, &neog);
	grammar_vocab *v;
	double t0 = now_ms();
	if (grammar_vocab_new(&v, n, pc, len, usable, eog, neog)) { fprintf(stderr, "grammar_bench: out of memory\n"); return 1; }
	double t_trie = now_ms() - t0;
	grammar *g;
	if (grammar_compile(&g, gbnf, strlen(gbnf), NULL, err, sizeof err)) { fprintf(stderr, "grammar_bench: %s\n", err); return 1; }
	size_t dl = strlen(doc), tl = (dl + 1) * 3;
	char *text = malloc(tl + 1);
	for (int k = 0; k < 3; k++) memcpy(text + k * (dl + 1), doc, dl), text[k * (dl + 1) + dl] = '\n';
	text[tl] = 0;
	int32_t *ids;
	size_t nids;
	if (tok_encode(tv, text, tl, false, false, &ids, &nids, err, sizeof err)) { fprintf(stderr, "grammar_bench: %s\n", err); return 1; }
	grammar_matcher *m;
	if (grammar_matcher_new(&m, g, v, NULL, 0, err, sizeof err)) { fprintf(stderr, "grammar_bench: %s\n", err); return 1; }
	double sum[3] = {0}, max[3] = {0};
	int cnt[3] = {0};
	size_t off = 0;
	for (size_t i = 0; i < nids; i++) {
		size_t pl = 0;
		tok_piece(tv, ids[i], 0, &pl);
		int copy = (int)(off / (dl + 1));
		if (copy > 2) copy = 2;
		off += pl;
		const uint64_t *mask;
		double a = now_ms();
		if (grammar_matcher_mask(m, &mask) || !(mask[ids[i] / 64] >> (ids[i] % 64) & 1)) {
			fprintf(stderr, "grammar_bench: token %zu (id %d) is not in the mask\n", i, ids[i]);
			return 1;
		}
		if (grammar_matcher_accept(m, ids[i])) { fprintf(stderr, "grammar_bench: token %zu refused\n", i); return 1; }
		double d = now_ms() - a;
		sum[copy] += d, cnt[copy]++;
		if (d > max[copy]) max[copy] = d;
	}
	const char *name = strrchr(path, '/');
	printf("grammar %s: %d tokens, trie %.1f ms; json %zu tokens x3: mask+accept cold %.3f ms/token (max %.2f), "
	       "second %.3f, warm %.4f ms/token (max %.3f)\n",
	       name ? name + 1 : path, n, t_trie, nids / 3, sum[0] / (cnt[0] ? cnt[0] : 1), max[0], sum[1] / (cnt[1] ? cnt[1] : 1),
	       sum[2] / (cnt[2] ? cnt[2] : 1), max[2]);
	grammar_matcher_free(m);
	grammar_unref(g);
	grammar_vocab_free(v);
	free(ids), free(text), free(pc), free(len), free(usable);
	tok_vocab_free(tv);
	return 0;
}

int main(int argc, char **argv) {
	if (cli_env_apply()) return 2; // LANES_LOG and the other knobs, as the CLI reads them
	if (argc > 1) {
		int rc = 0;
		for (int i = 1; i < argc; i++) rc |= run(argv[i]);
		return rc;
	}
	const char *shared = getenv("LANES_SHARED");
	char path[1024];
	snprintf(path, sizeof path, "%s/vocab/ggml-vocab-qwen2.gguf", shared && *shared ? shared : "../shared");
	return run(path);
}
