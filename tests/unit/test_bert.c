// tests: the bert architecture (a cross-encoder from `lanes gen --shape bert-rerank-test`) —
// its classifier's input and score against the float64 reference, a sequence's state the same
// bits alone, among 64 and on 1 or 3 threads (each kernel set), the rows an encoder refuses, and WordPiece
// vectors written by hand from the algorithm over the generated vocabulary.
#include "t.h"

#include "base/base.h"
#include "gen.h"
#include "model/model.h"
#include "ref64.h"
#include "vocab.h"
#include "tensor/tensor.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <unistd.h>

static char path[512];

static model *load(void) {
	char err[256];
	model *m = NULL;
	const int rc = model_load(&m, path, err, sizeof err);
	CHECKF(rc == 0, "%s", err);
	return m;
}

// The pooled states of n sequences (seqs[i]: lens[i] ids) in one pass on pool: out [n][E].
static int run_seqs(const model *m, base_pool *pool, const int32_t *const *seqs, const int *lens, int n, float *out, char *err,
		    size_t errlen) {
	int total = 0, most = 1;
	for (int i = 0; i < n; i++) total += lens[i], most = lens[i] > most ? lens[i] : most;
	kv_config c = model_kv_config(m, KV_F16, n, most, 16);
	kv_cache *kv;
	int rc = kv_new(&kv, &c, err, errlen);
	model_row *rows = malloc(sizeof *rows * (size_t)total);
	bool *want = calloc((size_t)total, sizeof *want);
	// interleaved, last sequence first, so no row's neighbours in the batch are its own sequence's
	int r = 0;
	for (int p = 0; p < most; p++)
		for (int i = n - 1; i >= 0; i--)
			if (p < lens[i]) want[r] = p == 0, rows[r++] = (model_row){seqs[i][p], p, i, false, NULL};
	float *hid = malloc(sizeof *hid * (size_t)n * (size_t)model_hparams_of(m)->n_embd);
	if (!rc) rc = model_forward_hidden(m, kv, pool, NULL, rows, total, NULL, want, hid, err, errlen);
	// the flagged rows come in batch order: position 0 of sequence n-1 first
	const int E = model_hparams_of(m)->n_embd;
	for (int i = 0; !rc && i < n; i++) memcpy(out + (size_t)i * E, hid + (size_t)(n - 1 - i) * E, sizeof *out * (size_t)E);
	free(hid), free(rows), free(want);
	kv_free(kv);
	return rc;
}

static double score_of(const model *m, const float *pooled) {
	const gguf *g = model_gguf(m);
	const gguf_tensor *w = gguf_find_tensor(g, "cls.output.weight"), *b = gguf_find_tensor(g, "cls.output.bias");
	double z = ((const float *)b->data)[0];
	for (int e = 0; e < model_hparams_of(m)->n_embd; e++) z += ((const float *)w->data)[e] * pooled[e];
	return z;
}

// A pair as rerank frames it: [CLS] q [SEP] d [SEP], ids chosen across the vocabulary.
static int pair(int32_t *ids, int nq, int nd, int salt, int V) {
	int n = 0;
	ids[n++] = 2;
	for (int i = 0; i < nq; i++) ids[n++] = 5 + (i * 31 + salt * 7) % (V - 5);
	ids[n++] = 3;
	for (int i = 0; i < nd; i++) ids[n++] = 5 + (i * 17 + salt * 13 + 3) % (V - 5);
	ids[n++] = 3;
	return n;
}

static void test_hparams(void) {
	model *m = load();
	if (!m) return;
	const model_hparams *hp = model_hparams_of(m);
	CHECK(!strcmp(hp->arch, "bert") && hp->encoder && hp->n_embd == 64 && hp->n_layers == 2 && hp->n_heads == 4 &&
	      hp->head_dim == 16 && hp->n_ff == 128 && hp->n_ctx_train == 512 && hp->n_types == 2 && hp->type_sep == 3 &&
	      hp->cls_head && hp->pooling == 4 && fabsf(hp->norm_eps - 1e-12f) < 1e-18f);
	model_free(m);
}

// The classifier's input and the score against the float64 reference, within the bar the
// other architectures' tests use; leaving out the token types or the bidirectional attention
// moves them far past it.
static void test_reference(void) {
	model *m = load();
	if (!m) return;
	const int E = model_hparams_of(m)->n_embd, V = model_hparams_of(m)->n_vocab;
	char err[256];
	int32_t ids[80];
	const int P = pair(ids, 9, 60, 1, V);
	const int32_t *seqs[1] = {ids};
	float got[64];
	CHECKF(run_seqs(m, NULL, seqs, &P, 1, got, err, sizeof err) == 0, "%s", err);
	double ref[64], z, alt[64], za;
	ref64_bert(model_gguf(m), ids, P, &(ref64_bert_opts){0}, ref, &z);
	double worst = 0, spread = 0;
	for (int e = 0; e < E; e++) worst = fmax(worst, fabs(got[e] - ref[e])), spread += ref[e] * ref[e];
	spread = sqrt(spread / E);
	CHECKF(worst < 0.003 * spread && spread > 0.05, "pooled state off the float64 reference by %g (rms %g)", worst, spread);
	CHECKF(fabs(score_of(m, got) - z) < 0.003 * fmax(1, fabs(z)), "score %g against %g", score_of(m, got), z);
	const ref64_bert_opts parts[] = {{.causal = true}, {.no_types = true}};
	for (int k = 0; k < 2; k++) {
		ref64_bert(model_gguf(m), ids, P, &parts[k], alt, &za);
		double moved = 0;
		for (int e = 0; e < E; e++) moved = fmax(moved, fabs(got[e] - alt[e]));
		CHECKF(moved > 0.03 * spread, "%s changes the pooled state by %g only", k ? "token types" : "bidirectional attention", moved);
	}
	model_free(m);
}

// A sequence's state: the same bits alone, among 64 sequences of other lengths, and on 3 threads.
static void test_batch_invariance(void) {
	model *m = load();
	if (!m) return;
	const int E = model_hparams_of(m)->n_embd, V = model_hparams_of(m)->n_vocab;
	enum { N = 64 };
	int32_t *ids = malloc(sizeof *ids * N * 80);
	const int32_t *seqs[N];
	int lens[N];
	for (int i = 0; i < N; i++) seqs[i] = ids + i * 80, lens[i] = pair(ids + i * 80, 3 + i % 7, 5 + (i * 11) % 60, i, V);
	float *all = malloc(sizeof *all * N * 64), *three = malloc(sizeof *all * N * 64), one[64];
	char err[256];
	base_pool *pool = NULL;
	CHECK(base_pool_new(&pool, 3) == 0);
	CHECKF(run_seqs(m, NULL, seqs, lens, N, all, err, sizeof err) == 0, "%s", err);
	CHECKF(run_seqs(m, pool, seqs, lens, N, three, err, sizeof err) == 0, "%s", err);
	CHECK(!memcmp(all, three, sizeof *all * N * E));
	const int pick[] = {0, 17, 42, 63};
	for (int k = 0; k < 4; k++) {
		const int i = pick[k];
		CHECKF(run_seqs(m, NULL, &seqs[i], &lens[i], 1, one, err, sizeof err) == 0, "%s", err);
		CHECKF(!memcmp(one, all + (size_t)i * E, sizeof one), "sequence %d alone differs from itself among %d", i, N);
	}
	// and the sequences differ from one another: the comparison above can fail
	CHECK(memcmp(all, all + E, sizeof one));
	base_pool_free(pool);
	free(ids), free(all), free(three);
	model_free(m);
}

// Rows an encoder refuses: a sequence continued past what a cache holds, logits, a position
// past the learned ones, a sequence with a gap.
static void test_refusals(void) {
	model *m = load();
	if (!m) return;
	char err[256];
	kv_config c = model_kv_config(m, KV_F16, 1, 600, 16);
	kv_cache *kv;
	CHECK(kv_new(&kv, &c, err, sizeof err) == 0);
	model_row rows[3] = {{2, 0, 0, false, NULL}, {7, 1, 0, false, NULL}, {3, 2, 0, false, NULL}};
	const bool want[3] = {true, false, false};
	float hid[64];
	CHECK(model_forward_hidden(m, kv, NULL, NULL, rows, 3, NULL, want, hid, err, sizeof err) == 0 && kv_seq_len(kv, 0) == 3);
	model_row more = {9, 3, 0, false, NULL};
	CHECK(model_forward_hidden(m, kv, NULL, NULL, &more, 1, NULL, NULL, NULL, err, sizeof err) == LANES_EINVAL &&
	      strstr(err, "whole"));
	kv_seq_clear(kv, 0);
	rows[2].logits = true;
	CHECK(model_forward_hidden(m, kv, NULL, NULL, rows, 3, NULL, NULL, NULL, err, sizeof err) == LANES_EINVAL && strstr(err, "logits"));
	rows[2].logits = false, rows[2].pos = 3;
	CHECK(model_forward_hidden(m, kv, NULL, NULL, rows, 3, NULL, NULL, NULL, err, sizeof err) == LANES_EINVAL &&
	      strstr(err, "position 3 given where 2"));
	model_row far = {2, 512, 0, false, NULL};
	CHECK(model_forward_hidden(m, kv, NULL, NULL, &far, 1, NULL, NULL, NULL, err, sizeof err) == LANES_EINVAL &&
	      strstr(err, "512 positions"));
	CHECK(kv_seq_len(kv, 0) == 0);
	kv_free(kv);
	model_free(m);
}

// WordPiece: the expected pieces written by hand from the algorithm (BERT's basic split, the
// longest piece from the word's start, U+2581 on a word's first piece) over the generated
// vocabulary, which has every letter and digit as a word and a continuation, some words and
// some suffixes (s, ing, able, ...), and no piece for any character outside ASCII.
static void test_wordpiece(void) {
	model *m = load();
	if (!m) return;
	char err[256];
	tok_vocab *v = NULL;
	CHECKF(tok_vocab_load(&v, model_gguf(m), err, sizeof err) == 0, "%s", err);
	if (!v) {
		model_free(m);
		return;
	}
	CHECK(tok_model(v) == TOK_MODEL_WPM && tok_bos(v) == 2 && tok_sep(v) == 3);
	static const struct {
		const char *text;
		bool special;
		const char *pieces; // space-separated token texts, "_" for U+2581
	} cases[] = {
		{"The cats say MEOW, hello!", true, "[CLS] _the _cat s _say _meow _, _h e l l o _! [SEP]"},
		{"playing unplayable", false, "_play ing _un p l a y able"},
		// accents stripped (precomposed and combining), Latin-1 capitals lowercased
		{"Caf\xC3\xA9 CAFE\xCC\x81 \xC3\x89t\xC3\xA9", false, "_cafe _cafe _e t e"},
		// a character no piece covers makes its whole word one [UNK]; CJK characters are words alone
		{"dog\xE2\x82\xAC cat \xE7\x8C\xAB\xE7\x8A\xAC", false, "[UNK] _cat [UNK] [UNK]"},
		// control characters dropped, every whitespace splits, punctuation alone
		{"a\x01" "b\tc\xC2\xA0" "d(e)", false, "_a b _c _d _( _e _)"},
		// control tokens in the text stay text when not parsed
		{"[SEP] x", false, "_[ _s e p _] _x"},
		{"[SEP] x", true, "[CLS] [SEP] _x [SEP]"},
		{"", true, "[CLS] [SEP]"},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		int32_t *ids = NULL;
		size_t n = 0;
		CHECKF(tok_encode(v, cases[k].text, strlen(cases[k].text), cases[k].special, cases[k].special, &ids, &n, err, sizeof err) == 0,
		       "%s", err);
		char got[512];
		t_pieces(v, ids, n, got, sizeof got);
		CHECKF(!strcmp(got, cases[k].pieces), "case %zu: got \"%s\", want \"%s\"", k, got, cases[k].pieces);
		free(ids);
	}
	// a word of more than 100 characters is [UNK], though every letter is a piece
	char word[102];
	memset(word, 'a', 101), word[101] = 0;
	int32_t *ids = NULL;
	size_t n = 0;
	CHECK(tok_encode(v, word, 101, false, false, &ids, &n, err, sizeof err) == 0 && n == 1 && ids[0] == 1);
	free(ids);
	CHECK(tok_encode(v, word, 100, false, false, &ids, &n, err, sizeof err) == 0 && n == 100 && ids[0] != 1);
	free(ids);
	tok_vocab_free(v);
	model_free(m);
}

int main(void) {
	snprintf(path, sizeof path, "%s/bert-%d.gguf", t_tmp(), (int)getpid());
	CHECK(t_gen_model("bert-rerank-test", "F32", NULL, path) == 0);
	test_hparams();
	// each kernel set this CPU runs: its matmuls carry the attention too
	const char *sets[8];
	const int ns = tensor_kernels_available(sets, 8);
	for (int k = 0; k < ns; k++) {
		CHECK(tensor_kernels_force(sets[k], "test") == 0);
		t_case("%s", sets[k]);
		test_reference();
		test_batch_invariance();
	}
	t_case("%s", "");
	test_refusals();
	test_wordpiece();
	remove(path);
	T_DONE("bert");
}
