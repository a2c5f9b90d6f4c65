// tests: fill-in-the-middle prompts (src/chat/fim.c) over real vocabularies — Qwen2's (repository
// and file tokens), Refact's (a repository token, no file separator), DeepSeek Coder's (BOS, no
// framing tokens) — in llama-server's order, and a vocabulary without FIM tokens refused by name.
#include "t.h"
#include "base/base.h"
#include "chat/chat.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "vocab.h"

// The expected prompt, built piece by piece as the convention says.
typedef struct {
	int32_t ids[512];
	size_t n;
} want;

static void w_id(want *w, int32_t id) {
	if (w->n < 512) w->ids[w->n++] = id;
}

static void w_text(want *w, const tok_vocab *v, const char *s, bool special) {
	int32_t *ids = NULL;
	size_t n = 0;
	char err[128];
	if (tok_encode(v, s, strlen(s), false, special, &ids, &n, err, sizeof err)) return;
	for (size_t i = 0; i < n; i++) w_id(w, ids[i]);
	free(ids);
}

static int32_t id_of(const tok_vocab *v, const char *text) { return tok_find(v, text, strlen(text)); }

static bool same(const want *w, const int32_t *ids, size_t n) {
	if (n != w->n) {
		fprintf(stderr, "fim: %zu ids, want %zu\n", n, w->n);
		return false;
	}
	for (size_t i = 0; i < n; i++)
		if (ids[i] != w->ids[i]) {
			fprintf(stderr, "fim: id %zu is %d, want %d\n", i, ids[i], w->ids[i]);
			return false;
		}
	return true;
}

static const char prefix[] = "def add(a, b):\n    ", middle[] = "return", suffix[] = "\n\nprint(add(1, 2))\n";
static const chat_fim_file files[] = {{"util.py", "import os\n", 7, 10}, {NULL, "x = 1\n", 0, 6}};

// The prompt chat_fim_prompt assembles for f is w.
static bool assembles(const tok_vocab *v, const chat_fim *f, const want *w) {
	int32_t *ids = NULL;
	size_t n = 0;
	char err[256];
	const bool ok = chat_fim_prompt(v, f, &ids, &n, err, sizeof err) == 0 && same(w, ids, n);
	free(ids);
	return ok;
}

static chat_fim request(bool repo, size_t n_extra) {
	return (chat_fim){.prefix = prefix, .prefix_len = strlen(prefix), .middle = middle, .middle_len = strlen(middle),
			  .suffix = suffix, .suffix_len = strlen(suffix), .extra = files, .n_extra = n_extra, .repo = repo};
}

// PRE prefix middle SUF suffix MID, the tail of every form.
static void w_tail(want *w, const tok_vocab *v) {
	w_id(w, tok_fim(v, TOK_FIM_PRE));
	w_text(w, v, prefix, false);
	w_text(w, v, middle, true);
	w_id(w, tok_fim(v, TOK_FIM_SUF));
	w_text(w, v, suffix, false);
	w_id(w, tok_fim(v, TOK_FIM_MID));
}

static void test_qwen2(void) {
	tok_vocab *v = t_vocab("qwen2");
	CHECK(v);
	if (!v) return;
	// the ids Qwen2.5-Coder publishes for its FIM and repository tokens
	CHECK(tok_fim(v, TOK_FIM_PRE) == 151659 && tok_fim(v, TOK_FIM_MID) == 151660 && tok_fim(v, TOK_FIM_SUF) == 151661);
	CHECK(tok_fim(v, TOK_FIM_PAD) == 151662 && tok_fim(v, TOK_FIM_REP) == 151663 && tok_fim(v, TOK_FIM_SEP) == 151664);
	CHECK(chat_fim_supported(v) && !tok_add_bos(v));
	int32_t *ids = NULL;
	size_t n = 0;
	char err[256];
	// no files, no framing (OpenAI's and Ollama's suffix): the tail alone
	chat_fim f = request(false, 0);
	want w = {0};
	w_tail(&w, v);
	CHECK(assembles(v, &f, &w));
	// /infill: the repository, each file after its separator and name (a nameless one is "tmp"), the current file
	f = request(true, 2);
	w = (want){0};
	w_id(&w, id_of(v, "<|repo_name|>"));
	w_text(&w, v, "myproject\n", false);
	w_id(&w, id_of(v, "<|file_sep|>"));
	w_text(&w, v, "util.py\n", false);
	w_text(&w, v, "import os\n", false);
	w_id(&w, id_of(v, "<|file_sep|>"));
	w_text(&w, v, "tmp\n", false);
	w_text(&w, v, "x = 1\n", false);
	w_id(&w, id_of(v, "<|file_sep|>"));
	w_text(&w, v, "filename\n", false);
	w_tail(&w, v);
	CHECK(assembles(v, &f, &w) && w.ids[0] == 151663 && w.ids[w.n - 1] == 151660);
	// the text being typed parses control tokens, the code around it does not
	const chat_fim sp = {.prefix = "<|im_start|>", .prefix_len = 12, .middle = "<|im_start|>", .middle_len = 12};
	CHECK(chat_fim_prompt(v, &sp, &ids, &n, err, sizeof err) == 0);
	int starts = 0;
	for (size_t i = 0; i < n; i++) starts += ids[i] == 151644;
	CHECK(starts == 1 && n > 4);
	free(ids);
	tok_vocab_free(v);
}

static void test_refact(void) {
	tok_vocab *v = t_vocab("refact");
	CHECK(v && chat_fim_supported(v));
	if (!v) return;
	CHECK(tok_fim(v, TOK_FIM_PRE) == id_of(v, "<fim_prefix>") && tok_fim(v, TOK_FIM_REP) == id_of(v, "<reponame>"));
	CHECK(tok_fim(v, TOK_FIM_SEP) < 0);
	// a repository token and no file separator: each file after llama-server's snippet line
	chat_fim f = request(true, 1);
	want w = {0};
	if (tok_add_bos(v)) w_id(&w, tok_bos(v));
	w_id(&w, tok_fim(v, TOK_FIM_REP));
	w_text(&w, v, "myproject\n", false);
	w_text(&w, v, "\n\n--- snippet ---\n\n", false);
	w_text(&w, v, "import os\n", false);
	w_tail(&w, v);
	CHECK(assembles(v, &f, &w));
	tok_vocab_free(v);
}

static void test_deepseek_coder(void) {
	tok_vocab *v = t_vocab("deepseek-coder");
	CHECK(v && chat_fim_supported(v));
	if (!v) return;
	CHECK(tok_fim(v, TOK_FIM_PRE) == id_of(v, "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>"));
	CHECK(tok_fim(v, TOK_FIM_SUF) == id_of(v, "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>"));
	CHECK(tok_fim(v, TOK_FIM_MID) == id_of(v, "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>"));
	CHECK(tok_add_bos(v) && tok_bos(v) >= 0);
	// BOS first, then the snippet-framed file (no repository token), then the tail
	chat_fim f = request(true, 1);
	want w = {0};
	w_id(&w, tok_bos(v));
	w_text(&w, v, "\n\n--- snippet ---\n\n", false);
	w_text(&w, v, "import os\n", false);
	w_tail(&w, v);
	CHECK(assembles(v, &f, &w));
	tok_vocab_free(v);
}

static void test_without(void) {
	static const char *const names[] = {"llama-spm", "gpt-2"};
	for (size_t k = 0; k < 2; k++) {
		tok_vocab *v = t_vocab(names[k]);
		CHECK(v);
		if (!v) continue;
		CHECK(!chat_fim_supported(v));
		chat_fim f = request(false, 0);
		int32_t *ids = (int32_t *)&f;
		size_t n = 1;
		char err[256] = "";
		CHECK(chat_fim_prompt(v, &f, &ids, &n, err, sizeof err) == LANES_EUNSUPPORTED && !ids && !n);
		CHECK(strstr(err, "fill-in-the-middle") && strstr(err, "prefix, suffix, middle"));
		tok_vocab_free(v);
	}
}

int main(void) {
	test_qwen2();
	test_refact();
	test_deepseek_coder();
	test_without();
	T_DONE("test_fim");
}
