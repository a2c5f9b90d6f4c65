// bench: tokenizer throughput — encodes about 1 MB of mixed text (English prose, code,
// numbers, whitespace runs and the vocab test texts: Cyrillic, Khmer, CJK, emoji) with one
// vocab, then decodes it, and prints tokens/s for each.
// usage: tok_bench [VOCAB.gguf] [MiB]   (default: $LANES_SHARED/vocab/ggml-vocab-qwen2.gguf, 1)
#include "base/base.h"
#include "cli/settings.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *words[] = {
	"the", "model", "token", "lane", "request", "server", "quick", "brown", "fox", "jumps", "over",
	"lazy", "dog", "Once", "upon", "a", "time", "there", "was", "little", "girl", "named", "Lily",
	"she", "liked", "to", "play", "in", "park", "with", "her", "friends", "because", "it's", "we've",
	"don't", "inference", "throughput", "latency", "batch", "attention", "matrix", "vector",
};
static const char *code = "for (int i = 0; i < n; i++) {\n    sum += x[i] * y[i];\n}\n";

typedef struct {
	char *p;
	size_t n, cap;
} buf;

static void put(buf *b, const char *s, size_t n) {
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2;
		b->p = realloc(b->p, b->cap);
		if (!b->p) { fprintf(stderr, "tok_bench: out of memory\n"); exit(1); }
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
}

int main(int argc, char **argv) {
	if (cli_env_apply()) return 2; // LANES_LOG and the other knobs, as the CLI reads them
	const char *shared = getenv("LANES_SHARED");
	if (!shared || !*shared) shared = "../shared";
	char vpath[1024];
	snprintf(vpath, sizeof vpath, "%s/vocab/ggml-vocab-qwen2.gguf", shared);
	const char *path = argc > 1 ? argv[1] : vpath;
	double mib = argc > 2 ? atof(argv[2]) : 1.0;
	size_t target = (size_t)(mib * 1048576.0);

	char err[512];
	gguf *g;
	uint64_t t0 = base_now_us();
	if (gguf_open(&g, path, err, sizeof err)) { fprintf(stderr, "tok_bench: %s\n", err); return 1; }
	tok_vocab *v;
	int rc = tok_vocab_load(&v, g, err, sizeof err);
	gguf_free(g);
	if (rc) { fprintf(stderr, "tok_bench: %s: %s\n", path, err); return 1; }
	uint64_t t_load = base_now_us() - t0;

	// The vocab's test texts, when they are next to it.
	char ipath[1100];
	snprintf(ipath, sizeof ipath, "%s.inp", path);
	FILE *f = fopen(ipath, "rb");
	buf inp = {0};
	if (f) {
		char tmp[4096];
		size_t k;
		while ((k = fread(tmp, 1, sizeof tmp, f)) > 0) put(&inp, tmp, k);
		fclose(f);
	}
	buf text = {0};
	uint64_t r = 42;
	while (text.n < target) {
		r = splitmix64(r);
		unsigned pick = (unsigned)(r % 10);
		if (pick < 6) { // a sentence
			int nw = 5 + (int)(r >> 8) % 12;
			for (int i = 0; i < nw; i++) {
				r = splitmix64(r);
				const char *w = words[r % (sizeof words / sizeof words[0])];
				put(&text, i ? " " : "", i ? 1 : 0);
				put(&text, w, strlen(w));
			}
			put(&text, (r >> 20) % 3 ? ". " : ".\n\n", (r >> 20) % 3 ? 2 : 3);
		} else if (pick < 7) {
			put(&text, code, strlen(code));
		} else if (pick < 8) {
			char num[64];
			int k = snprintf(num, sizeof num, " %llu.%02u   \t", (unsigned long long)(r >> 24), (unsigned)(r % 100));
			put(&text, num, (size_t)k);
		} else if (inp.n) {
			size_t at = (size_t)(r >> 16) % inp.n, len = 200;
			while (at > 0 && ((uint8_t)inp.p[at] & 0xC0) == 0x80) at--; // start on a character
			if (at + len > inp.n) len = inp.n - at;
			while (at + len < inp.n && ((uint8_t)inp.p[at + len] & 0xC0) == 0x80) len++;
			put(&text, inp.p + at, len);
		}
	}

	int32_t *ids = NULL;
	size_t n = 0;
	uint64_t best_enc = UINT64_MAX, best_dec = UINT64_MAX, best_stream = UINT64_MAX;
	for (int rep = 0; rep < 3; rep++) {
		free(ids);
		uint64_t a = base_now_us();
		if (tok_encode(v, text.p, text.n, true, true, &ids, &n, err, sizeof err)) {
			fprintf(stderr, "tok_bench: encode: %s\n", err);
			return 1;
		}
		uint64_t b = base_now_us();
		char *out;
		size_t ol;
		if (tok_detokenize(v, ids, n, 0, &out, &ol, err, sizeof err)) {
			fprintf(stderr, "tok_bench: decode: %s\n", err);
			return 1;
		}
		free(out);
		uint64_t c = base_now_us();
		tok_stream *s = tok_stream_new(v, 0);
		size_t total = 0;
		for (size_t i = 0; i < n; i++) {
			const char *o;
			size_t on;
			tok_stream_push(s, ids[i], &o, &on);
			total += on;
		}
		tok_stream_free(s);
		uint64_t d = base_now_us();
		if (b - a < best_enc) best_enc = b - a;
		if (c - b < best_dec) best_dec = c - b;
		if (d - c < best_stream) best_stream = d - c;
		if (total == 0) return 1;
	}
	double mb = text.n / 1048576.0;
	printf("tok_bench %s (%s, pre %s): load %.1f ms\n", path, tok_model(v) == TOK_MODEL_SPM ? "spm" : "bpe",
	       tok_pre_name(v), t_load / 1000.0);
	printf("  encode  %.2f MiB -> %zu tokens in %.1f ms: %.0f tokens/s, %.2f MiB/s\n", mb, n, best_enc / 1000.0,
	       n / (best_enc / 1e6), mb / (best_enc / 1e6));
	printf("  decode  %.0f tokens/s (whole sequence), %.0f tokens/s (streamed one by one)\n", n / (best_dec / 1e6),
	       n / (best_stream / 1e6));
	free(ids);
	free(text.p);
	free(inp.p);
	tok_vocab_free(v);
	return 0;
}
