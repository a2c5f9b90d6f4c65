// tests: the tokenizer against llama.cpp's vocab test vectors (every vocab in shared/vocab),
// round trips, the llama3 pre-tokenizer split, special-token parsing, the streaming
// detokenizer, vocab validation errors and concurrent use.
#include "t.h"
#include "base/base.h"
#include "cli/settings.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "vocab.h"
#include "tokenizer/tok_impl.h" // white-box: the SPM cut-point shortcut is checked against the plain run

#include <dirent.h>
#include <pthread.h>
#include <stdarg.h>
#include <unistd.h>

// ---- helpers ----------------------------------------------------------------------------

// Encodes s and compares with the expected ids (terminated by -2).
static bool enc_is(const tok_vocab *v, const char *s, size_t len, bool add, bool parse, const int32_t *want) {
	int32_t *ids;
	size_t n;
	char err[256];
	if (tok_encode(v, s, len, add, parse, &ids, &n, err, sizeof err)) {
		fprintf(stderr, "encode failed: %s\n", err);
		return false;
	}
	size_t nw = 0;
	while (want[nw] != -2) nw++;
	bool ok = n == nw && (!n || !memcmp(ids, want, n * sizeof *ids));
	if (!ok) {
		fprintf(stderr, "encode '%.*s': got [", (int)len, s);
		for (size_t i = 0; i < n; i++) fprintf(stderr, "%s%d", i ? " " : "", ids[i]);
		fprintf(stderr, "] want [");
		for (size_t i = 0; i < nw; i++) fprintf(stderr, "%s%d", i ? " " : "", want[i]);
		fprintf(stderr, "]\n");
	}
	free(ids);
	return ok;
}

static bool has_id(const tok_vocab *v, const char *s, bool parse, int32_t id) {
	int32_t *ids;
	size_t n;
	char err[256];
	if (tok_encode(v, s, strlen(s), false, parse, &ids, &n, err, sizeof err)) return false;
	bool found = false;
	for (size_t i = 0; i < n; i++) found |= ids[i] == id;
	free(ids);
	return found;
}

// ---- the vector files -------------------------------------------------------------------

typedef struct {
	char **text;
	size_t *len;
	size_t n;
} texts;

// Texts of a .inp file: each is followed by "\n__ggml_vocab_test__\n".
static bool read_inp(const char *path, texts *t) {
	size_t len;
	char *buf = t_read_file(path, &len);
	if (!buf) return false;
	static const char sep[] = "\n__ggml_vocab_test__\n";
	size_t sl = sizeof sep - 1, pos = 0;
	memset(t, 0, sizeof *t);
	for (;;) {
		char *m = memmem(buf + pos, len - pos, sep, sl);
		if (!m) break;
		size_t l = (size_t)(m - (buf + pos));
		t->text = realloc(t->text, (t->n + 1) * sizeof *t->text);
		t->len = realloc(t->len, (t->n + 1) * sizeof *t->len);
		t->text[t->n] = malloc(l + 1);
		memcpy(t->text[t->n], buf + pos, l);
		t->text[t->n][l] = 0;
		t->len[t->n++] = l;
		pos = (size_t)(m - buf) + sl;
	}
	bool ok = pos == len; // nothing may follow the last separator
	free(buf);
	return ok;
}

static void free_texts(texts *t) {
	for (size_t i = 0; i < t->n; i++) free(t->text[i]);
	free(t->text);
	free(t->len);
}

// One line of a .out file: ids separated by spaces (a leading space; empty for no ids).
static size_t parse_ids(const char *line, size_t len, int32_t *ids, size_t cap) {
	size_t n = 0;
	for (size_t i = 0; i < len;) {
		while (i < len && line[i] == ' ') i++;
		if (i >= len) break;
		long x = 0;
		while (i < len && line[i] >= '0' && line[i] <= '9') x = x * 10 + (line[i++] - '0');
		if (n < cap) ids[n] = (int32_t)x;
		n++;
	}
	return n;
}

static const char *all_vocabs[] = {"llama-spm", "phi-3", "gpt-2", "qwen2", "deepseek-llm", "deepseek-coder",
				   "falcon", "starcoder", "refact", "mpt"};

static void test_vectors(void) {
	size_t n_files = 0;
	for (size_t f = 0; f < sizeof all_vocabs / sizeof all_vocabs[0]; f++) {
		const char *name = all_vocabs[f];
		char path[1024];
		snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", t_shared(), name);
		tok_vocab *v = t_vocab_path(path);
		CHECKF(v != NULL, "load %s", name);
		if (!v) continue;
		n_files++;
		texts tx;
		char ip[1100], op[1100];
		snprintf(ip, sizeof ip, "%s.inp", path);
		snprintf(op, sizeof op, "%s.out", path);
		CHECKF(read_inp(ip, &tx), "read %s", ip);
		size_t olen = 0;
		char *out = t_read_file(op, &olen);
		CHECKF(out != NULL, "read %s", op);
		size_t line_start = 0, k = 0, pass = 0;
		bool round = !strcmp(name, "llama-spm") || !strcmp(name, "gpt-2") || !strcmp(name, "qwen2");
		for (size_t i = 0; out && i < tx.n; i++) {
			const char *nl = memchr(out + line_start, '\n', olen - line_start);
			size_t ll = nl ? (size_t)(nl - (out + line_start)) : olen - line_start;
			int32_t want[4096];
			size_t nw = parse_ids(out + line_start, ll, want, 4096);
			line_start += ll + 1;
			k++;
			int32_t *ids;
			size_t n;
			char err[256];
			int rc = tok_encode(v, tx.text[i], tx.len[i], false, false, &ids, &n, err, sizeof err);
			bool ok = !rc && n == nw && (!n || !memcmp(ids, want, n * sizeof *ids));
			CHECKF(ok, "%s vector %zu '%s': %zu ids, want %zu", name, i, tx.text[i], rc ? 0 : n, nw);
			if (!ok && !rc) {
				fprintf(stderr, "  got ");
				for (size_t j = 0; j < n; j++) fprintf(stderr, " %d", ids[j]);
				fprintf(stderr, "\n  want");
				for (size_t j = 0; j < nw; j++) fprintf(stderr, " %d", want[j]);
				fprintf(stderr, "\n");
			}
			pass += ok;
			if (round && !rc) { // detokenizing restores the text exactly
				char *back;
				size_t bl;
				rc = tok_detokenize(v, ids, n, TOK_DECODE_STRIP_SPACE, &back, &bl, err, sizeof err);
				CHECKF(!rc && bl == tx.len[i] && !memcmp(back, tx.text[i], bl), "%s round trip %zu '%s' -> '%s'",
				       name, i, tx.text[i], rc ? "(error)" : back);
				free(back);
			}
			free(ids);
		}
		CHECKF(k == tx.n && tx.n >= 40, "%s: %zu texts, %zu result lines", name, tx.n, k);
		fprintf(stderr, "vectors %s: %zu/%zu\n", name, pass, tx.n);
		free(out);
		free_texts(&tx);
		tok_vocab_free(v);
	}
	CHECKF(n_files == sizeof all_vocabs / sizeof all_vocabs[0], "loaded %zu vocab files", n_files);
	// Every vocab in the folder is one of the above.
	char dir[1024];
	snprintf(dir, sizeof dir, "%s/vocab", t_shared());
	DIR *d = opendir(dir);
	CHECK(d != NULL);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l < 5 || strcmp(e->d_name + l - 5, ".gguf")) continue;
		bool known = false;
		for (size_t f = 0; f < sizeof all_vocabs / sizeof all_vocabs[0]; f++) {
			char nm[256];
			snprintf(nm, sizeof nm, "ggml-vocab-%s.gguf", all_vocabs[f]);
			known |= !strcmp(nm, e->d_name);
		}
		CHECKF(known, "vocab %s is not tested", e->d_name);
	}
	if (d) closedir(d);
}

// ---- a synthetic llama3-style vocab, written with the GGUF writer -----------------------

enum { SY_HE = 256, SY_LL, SY_HELL, SY_HELLO, SY_XYZ, SY_BOT, SY_EOT_TEXT, SY_EOT_ID, SY_N };

// GPT-2's byte-to-character map, computed here independently of the library.
static void gpt2_char(int b, char out[4]) {
	static int cp[256];
	static bool init;
	if (!init) {
		int n = 0;
		for (int i = 0; i < 256; i++) {
			bool pr = (i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE;
			cp[i] = pr ? i : 256 + n++;
		}
		init = true;
	}
	int c = cp[b];
	if (c < 0x80) { out[0] = (char)c; out[1] = 0; }
	else { out[0] = (char)(0xC0 | (c >> 6)); out[1] = (char)(0x80 | (c & 0x3F)); out[2] = 0; }
}

static gguf_writer *synth_writer(void) {
	static char bytes[256][4];
	const char *toks[SY_N];
	int32_t types[SY_N];
	for (int b = 0; b < 256; b++) {
		gpt2_char(b, bytes[b]);
		toks[b] = bytes[b];
		types[b] = TOK_TYPE_NORMAL;
	}
	const char *extra[] = {"He", "ll", "Hell", "Hello", "xyz", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"};
	for (int i = 0; i < SY_N - 256; i++) {
		toks[256 + i] = extra[i];
		types[256 + i] = 256 + i >= SY_BOT ? TOK_TYPE_CONTROL : TOK_TYPE_NORMAL;
	}
	const char *merges[] = {"H e", "l l", "He ll", "Hell o"};
	gguf_writer *w = gguf_writer_new();
	gguf_writer_set_str(w, "general.architecture", "llama");
	gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
	gguf_writer_set_str(w, "tokenizer.ggml.pre", "llama-bpe");
	gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, SY_N);
	gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, types, SY_N);
	gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 4);
	gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", SY_BOT);
	gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", SY_EOT_TEXT);
	return w;
}

// Writes w, loads it as a vocab; returns tok_vocab_load's code (*out NULL on failure).
static int synth_load(gguf_writer *w, tok_vocab **out, char *err, size_t errlen) {
	char path[1024];
	snprintf(path, sizeof path, "%s/tok_synth_%d.gguf", t_tmp(), (int)getpid());
	*out = NULL;
	int rc = gguf_writer_write(w, path, err, errlen);
	gguf_writer_free(w);
	if (rc) return rc;
	gguf *g;
	rc = gguf_open(&g, path, err, errlen);
	if (!rc) {
		rc = tok_vocab_load(out, g, err, errlen);
		gguf_free(g);
	}
	remove(path);
	return rc;
}

static void split_is(const tok_vocab *v, const char *text, ...) {
	tok_span *sp;
	size_t n;
	char err[256];
	int rc = tok_pretokenize(v, text, strlen(text), &sp, &n, err, sizeof err);
	CHECKF(!rc, "pretokenize '%s': %s", text, err);
	if (rc) return;
	va_list ap;
	va_start(ap, text);
	size_t i = 0;
	bool ok = true;
	for (const char *w; (w = va_arg(ap, const char *));) {
		if (i >= n || sp[i].end - sp[i].start != strlen(w) || memcmp(text + sp[i].start, w, strlen(w))) ok = false;
		i++;
	}
	va_end(ap);
	ok = ok && i == n;
	CHECKF(ok, "llama3 split of '%s'", text);
	if (!ok) {
		fprintf(stderr, "  got:");
		for (size_t k = 0; k < n; k++) fprintf(stderr, " [%.*s]", (int)(sp[k].end - sp[k].start), text + sp[k].start);
		fprintf(stderr, "\n");
	}
	free(sp);
}

static void test_llama3(void) {
	tok_vocab *v;
	char err[512];
	int rc = synth_load(synth_writer(), &v, err, sizeof err);
	CHECKF(!rc, "synthetic llama3 vocab: %s", err);
	if (rc) return;
	CHECK(tok_model(v) == TOK_MODEL_BPE && !strcmp(tok_pre_name(v), "llama-bpe"));
	CHECK(tok_add_bos(v));  // llama3 pre-tokenizers add BOS when the file does not say
	CHECK(!tok_add_eos(v));
	CHECK(tok_bos(v) == SY_BOT && tok_eos(v) == SY_EOT_TEXT);
	CHECK(tok_eot(v) == SY_EOT_ID); // found by its text
	CHECK(tok_is_eog(v, SY_EOT_ID) && tok_is_eog(v, SY_EOT_TEXT) && !tok_is_eog(v, SY_BOT) && !tok_is_eog(v, 'a'));
	CHECK(tok_chat_template(v) == NULL);

	// Splits written from the published regex:
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	split_is(v, "Hello world", "Hello", " world", NULL);
	split_is(v, "I'm fine", "I", "'m", " fine", NULL);
	split_is(v, "HE'LL WE'VE", "HE", "'LL", " WE", "'VE", NULL);
	split_is(v, "don't", "don", "'t", NULL);
	split_is(v, "'tis", "'t", "is", NULL);
	split_is(v, "1234567", "123", "456", "7", NULL);
	split_is(v, "3.14", "3", ".", "14", NULL);
	split_is(v, "a1b", "a", "1", "b", NULL);
	split_is(v, "  hello", " ", " hello", NULL);
	split_is(v, "hello\n\nworld", "hello", "\n\n", "world", NULL);
	split_is(v, "abc\r\ndef", "abc", "\r\n", "def", NULL);
	split_is(v, "a.b!!\n", "a", ".b", "!!\n", NULL);
	split_is(v, "x   \n  y", "x", "   \n", " ", " y", NULL);
	split_is(v, "   ", "   ", NULL);
	split_is(v, "\t\tx", "\t", "\tx", NULL);
	split_is(v, "\xc3\x9c" "n" "\xc3\xaf" "c" "\xc3\xb6" "d" "\xc3\xa9" " \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",
		 "\xc3\x9c" "n" "\xc3\xaf" "c" "\xc3\xb6" "d" "\xc3\xa9", " \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", NULL);
	split_is(v, " \xf0\x9f\x98\x80!", " \xf0\x9f\x98\x80!", NULL);
	split_is(v, "x\xc2\xa0\xc2\xa0y", "x", "\xc2\xa0", "\xc2\xa0y", NULL); // U+00A0 is whitespace
	split_is(v, "", NULL);
	tok_span *sp;
	size_t ns;
	CHECK(tok_pretokenize(v, "a\xff", 2, &sp, &ns, err, sizeof err) == LANES_EFORMAT);

	// Merges, and ignore_merges: a word that is a token is taken whole even without merges.
	CHECK(enc_is(v, "Hello", 5, false, false, (const int32_t[]){SY_HELLO, -2}));
	CHECK(enc_is(v, "Hell", 4, false, false, (const int32_t[]){SY_HELL, -2}));
	CHECK(enc_is(v, "xyz", 3, false, false, (const int32_t[]){SY_XYZ, -2}));
	CHECK(enc_is(v, "Hellx", 5, false, false, (const int32_t[]){SY_HELL, 'x', -2}));
	CHECK(enc_is(v, "Hello", 5, true, false, (const int32_t[]){SY_BOT, SY_HELLO, -2}));
	// Token b stands for byte b here (GPT-2 character U+0120 for the space).
	CHECK(tok_find(v, "\xc4\xa0", 2) == ' ');
	CHECK(enc_is(v, " He", 3, false, false, (const int32_t[]){' ', SY_HE, -2}));
	// Invalid UTF-8 becomes U+FFFD (EF BF BD) before splitting, as llama.cpp does.
	CHECK(enc_is(v, "a\xff", 2, false, false, (const int32_t[]){'a', 0xEF, 0xBF, 0xBD, -2}));

	// Chat prompts: BOS once, whether or not the rendered text starts with it.
	int32_t *ids;
	size_t n;
	const char *p1 = "<|begin_of_text|>Hello<|eot_id|>";
	CHECK(!tok_encode_chat(v, p1, strlen(p1), &ids, &n, err, sizeof err));
	CHECK(n == 3 && ids[0] == SY_BOT && ids[1] == SY_HELLO && ids[2] == SY_EOT_ID);
	free(ids);
	CHECK(!tok_encode_chat(v, "Hello", 5, &ids, &n, err, sizeof err));
	CHECK(n == 2 && ids[0] == SY_BOT && ids[1] == SY_HELLO);
	free(ids);
	// tok_encode with add_special adds a second BOS (as llama.cpp warns); the helper does not.
	CHECK(enc_is(v, p1, strlen(p1), true, true, (const int32_t[]){SY_BOT, SY_BOT, SY_HELLO, SY_EOT_ID, -2}));
	tok_vocab_free(v);
}

// Each case changes the synthetic file so that loading must fail with a clear error.
static void test_validation(void) {
	char err[512];
	tok_vocab *v;
	struct {
		const char *what;
		int want;
		void (*mutate)(gguf_writer *w);
	} cases[] = {
		{"bos out of range", LANES_ERANGE, NULL},
		{"eot out of range", LANES_ERANGE, NULL},
		{"type count", LANES_EFORMAT, NULL},
		{"scores count", LANES_EFORMAT, NULL},
		{"bad type value", LANES_EFORMAT, NULL},
		{"no merges", LANES_EFORMAT, NULL},
		{"merge without space", LANES_EFORMAT, NULL},
		{"unknown model", LANES_EUNSUPPORTED, NULL},
		{"unknown pre", LANES_EUNSUPPORTED, NULL},
		{"duplicate token", LANES_EFORMAT, NULL},
		{"no model key", LANES_ENOTFOUND, NULL},
		{"tokens not strings", LANES_EFORMAT, NULL},
		{"add_bos without bos", LANES_EFORMAT, NULL},
		{"bos is a string", LANES_EFORMAT, NULL},
		{"add_bos not a bool", LANES_EFORMAT, NULL},
		{"chat_template not a string", LANES_EFORMAT, NULL},
		{"byte token misnamed", LANES_EFORMAT, NULL},
		{"WordPiece without [UNK]", LANES_EFORMAT, NULL},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		gguf_writer *w = synth_writer();
		int32_t t300[300] = {0};
		float f10[10] = {0};
		switch (c) {
		case 0: gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", SY_N); break;
		case 1: gguf_writer_set_i32(w, "tokenizer.ggml.eot_token_id", -7); break;
		case 2: gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, t300, 300); break;
		case 3: gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_F32, f10, 10); break;
		case 4: t300[0] = 9; gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, t300, SY_N); break;
		case 5: gguf_writer_remove(w, "tokenizer.ggml.merges"); break;
		case 6: gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const[]){"Hello"}, 1); break;
		case 7: gguf_writer_set_str(w, "tokenizer.ggml.model", "rwkv"); break;
		case 8: gguf_writer_set_str(w, "tokenizer.ggml.pre", "no-such-pre"); break;
		case 9: gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const[]){"a", "b", "a"}, 3);
			gguf_writer_remove(w, "tokenizer.ggml.token_type");
			gguf_writer_remove(w, "tokenizer.ggml.bos_token_id");
			gguf_writer_remove(w, "tokenizer.ggml.eos_token_id"); break;
		case 10: gguf_writer_remove(w, "tokenizer.ggml.model"); break;
		case 11: gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_I32, t300, SY_N); break;
		case 12: gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0xFFFFFFFFu); break; // llama3 adds BOS
		case 13: gguf_writer_set_str(w, "tokenizer.ggml.bos_token_id", "1"); break;
		case 14: gguf_writer_set_u32(w, "tokenizer.ggml.add_bos_token", 1); break;
		case 15: gguf_writer_set_u32(w, "tokenizer.chat_template", 1); break;
		case 16: t300[65] = TOK_TYPE_BYTE; gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, t300, SY_N); break;
		case 17: gguf_writer_set_str(w, "tokenizer.ggml.model", "bert"); break;
		}
		err[0] = 0;
		int rc = synth_load(w, &v, err, sizeof err);
		if (getenv("TOK_VERBOSE")) fprintf(stderr, "%s: %s\n", cases[c].what, err);
		CHECKF(rc == cases[c].want && v == NULL && err[0], "%s: got %d (%s), want %d", cases[c].what, rc, err,
		       cases[c].want);
		tok_vocab_free(v);
	}
	// Ids given as -1 / 0xFFFFFFFF mean "none" (as real files write them), not an error.
	gguf_writer *w = synth_writer();
	gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);
	gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
	gguf_writer_set_str(w, "tokenizer.chat_template", "{{ messages }}");
	int rc = synth_load(w, &v, err, sizeof err);
	CHECKF(!rc, "pad = none: %s", err);
	if (!rc) {
		CHECK(tok_pad(v) == -1 && !tok_add_bos(v));
		CHECK(tok_chat_template(v) && !strcmp(tok_chat_template(v), "{{ messages }}"));
		CHECK(enc_is(v, "Hello", 5, true, false, (const int32_t[]){SY_HELLO, -2}));
	}
	tok_vocab_free(v);
}

// ids of s (no BOS), into a caller array; returns the count (or -1).
static long enc(const tok_vocab *v, const char *s, bool parse, int32_t *out, size_t cap) {
	int32_t *ids;
	size_t n;
	char err[256];
	if (tok_encode(v, s, strlen(s), false, parse, &ids, &n, err, sizeof err)) return -1;
	if (n > cap) n = cap;
	if (n) memcpy(out, ids, n * sizeof *ids);
	free(ids);
	return (long)n;
}

static bool detok_is(const tok_vocab *v, const int32_t *ids, size_t n, unsigned flags, const char *want) {
	char *s;
	size_t l;
	char err[256];
	if (tok_detokenize(v, ids, n, flags, &s, &l, err, sizeof err)) return false;
	bool ok = l == strlen(want) && !memcmp(s, want, l) && s[l] == 0;
	if (!ok) fprintf(stderr, "detokenize: got '%s' want '%s'\n", s, want);
	free(s);
	return ok;
}

static void test_special(void) {
	tok_vocab *q = t_vocab("qwen2"), *sp = t_vocab("llama-spm"), *g2 = t_vocab("gpt-2"),
		  *phi = t_vocab("phi-3"), *ds = t_vocab("deepseek-llm");
	CHECK(q && sp && g2 && phi && ds);
	if (!q || !sp || !g2 || !phi || !ds) goto done;
	int32_t a[256], b[256], c[256];
	long na, nb, nc;

	// Qwen2: <|im_start|> / <|im_end|> become single ids only when parsing specials.
	int32_t im_start = tok_find(q, "<|im_start|>", 12), im_end = tok_find(q, "<|im_end|>", 10);
	CHECK(im_start == 151644 && im_end == 151645);
	CHECK(tok_is_control(q, im_start) && tok_is_eog(q, im_end) && !tok_is_eog(q, im_start));
	CHECK(tok_eos(q) == im_end && tok_eot(q) == im_end && !tok_add_bos(q));
	const char *chat = "<|im_start|>user\nHello<|im_end|>\n";
	na = enc(q, chat, true, a, 256);
	nb = enc(q, "user\nHello", true, b, 256);
	nc = enc(q, "\n", true, c, 256);
	CHECK(na == nb + nc + 2 && na > 2 && a[0] == im_start && a[nb + 1] == im_end);
	CHECK(na > 2 && !memcmp(a + 1, b, (size_t)nb * sizeof *b) && !memcmp(a + nb + 2, c, (size_t)nc * sizeof *c));
	CHECK(!has_id(q, chat, false, im_start) && !has_id(q, chat, false, im_end));
	na = enc(q, chat, false, a, 256);
	CHECK(na > 6 && detok_is(q, a, (size_t)na, 0, chat)); // kept as text, it reads back as text
	// Rendering control tokens is asked for; without it they vanish.
	int32_t seq[] = {im_start, b[0], im_end};
	char want[64];
	size_t l0;
	const char *t0 = tok_piece(q, b[0], 0, &l0);
	snprintf(want, sizeof want, "<|im_start|>%.*s<|im_end|>", (int)l0, t0);
	CHECK(detok_is(q, seq, 3, TOK_DECODE_SPECIAL, want));
	snprintf(want, sizeof want, "%.*s", (int)l0, t0);
	CHECK(detok_is(q, seq, 3, 0, want));
	// Chat helper: Qwen adds no BOS.
	int32_t *ids;
	size_t n;
	char err[256];
	CHECK(!tok_encode_chat(q, chat, strlen(chat), &ids, &n, err, sizeof err) && n > 0 && ids[0] == im_start);
	free(ids);

	// Qwen2: "</s>" is a plain token there (it still ends a generation, found by its text):
	// special parsing leaves it to the ordinary tokenizer, so the text reads the same both ways.
	const int32_t s_end = tok_find(q, "</s>", 4);
	CHECK(s_end >= 0 && tok_token_type(q, s_end) == TOK_TYPE_NORMAL && tok_is_eog(q, s_end));
	na = enc(q, "a</s>b", true, a, 256);
	nb = enc(q, "a</s>b", false, b, 256);
	CHECK(na == nb && na > 0 && !memcmp(a, b, (size_t)na * sizeof *a) && !has_id(q, "a</s>b", true, s_end));
	CHECK(!tok_encode_chat(q, "x</s>y", 6, &ids, &n, err, sizeof err) && (long)n == enc(q, "x</s>y", false, c, 256) &&
	      !memcmp(ids, c, n * sizeof *ids));
	free(ids);
	na = enc(q, "a<|im_end|>b", true, a, 256);
	CHECK(na == 3 && a[1] == im_end);

	// GPT-2: <|endoftext|>.
	CHECK(enc_is(g2, "<|endoftext|>", 13, false, true, (const int32_t[]){50256, -2}));
	CHECK(!has_id(g2, "<|endoftext|>", false, 50256));
	CHECK(tok_is_eog(g2, 50256) && tok_bos(g2) == 50256);

	// SPM: <s> parsed is BOS, and the text after a special token gets the space prefix again.
	na = enc(sp, "<s>Hello", true, a, 256);
	nb = enc(sp, "Hello", true, b, 256);
	CHECK(na == nb + 1 && a[0] == 1 && !memcmp(a + 1, b, (size_t)nb * sizeof *b));
	CHECK(!has_id(sp, "<s>Hello", false, 1) && !has_id(sp, "x</s>", false, 2) && has_id(sp, "x</s>", true, 2));
	CHECK(enc_is(sp, "", 0, true, true, (const int32_t[]){1, -2}));
	CHECK(enc_is(sp, "", 0, false, true, (const int32_t[]){-2}));
	CHECK(enc_is(sp, "Hello world", 11, true, false, (const int32_t[]){1, 15043, 3186, -2}));
	CHECK(enc_is(sp, "<unk>", 5, false, true, (const int32_t[]){0, -2}));
	// Chat helper: BOS once, whether the prompt starts with "<s>" or not.
	CHECK(!tok_encode_chat(sp, "<s>[INST] hi [/INST]", 20, &ids, &n, err, sizeof err));
	CHECK(n > 2 && ids[0] == 1 && ids[1] != 1);
	free(ids);
	CHECK(!tok_encode_chat(sp, "[INST] hi [/INST]", 17, &ids, &n, err, sizeof err));
	CHECK(n > 2 && ids[0] == 1 && ids[1] != 1);
	free(ids);
	// EOS / BOS rendering and the SPM leading space.
	CHECK(detok_is(sp, (const int32_t[]){1, 15043, 3186, 2}, 4, TOK_DECODE_STRIP_SPACE, "Hello world"));
	CHECK(detok_is(sp, (const int32_t[]){1, 15043, 3186, 2}, 4, 0, " Hello world"));
	CHECK(detok_is(sp, (const int32_t[]){1, 15043, 3186, 2}, 4, TOK_DECODE_SPECIAL, "<s> Hello world</s>"));
	CHECK(detok_is(sp, (const int32_t[]){15043, 3186}, 2, TOK_DECODE_STRIP_SPACE, "Hello world"));

	// Phi-3: special tokens swallow the whitespace after them (except <s>, <unk>, <|endoftext|>).
	na = enc(phi, "<|user|>\nHi<|end|>", true, a, 256);
	nb = enc(phi, "Hi", true, b, 256);
	CHECK(na == nb + 2 && a[0] == 32010 && a[na - 1] == 32007 && !memcmp(a + 1, b, (size_t)nb * sizeof *b));
	na = enc(phi, "<|endoftext|>\nHi", true, a, 256);
	nb = enc(phi, "\nHi", true, b, 256);
	CHECK(na == nb + 1 && a[0] == 32000 && !memcmp(a + 1, b, (size_t)nb * sizeof *b));
	CHECK(tok_eot(phi) == 32007 && tok_is_eog(phi, 32007) && tok_is_eog(phi, 32000));

	// User-defined tokens are parsed even when specials are not (as llama.cpp and HF do).
	int32_t o_slash = tok_find(ds, "\xc3\xb8", 2);
	CHECK(o_slash == 100002 && tok_token_type(ds, o_slash) == TOK_TYPE_USER_DEFINED);
	CHECK(enc_is(ds, "\xc3\xb8", 2, false, false, (const int32_t[]){100002, -2}));
	CHECK(detok_is(ds, (const int32_t[]){100002}, 1, 0, "\xc3\xb8"));
	CHECK(tok_add_bos(ds) && enc_is(ds, "", 0, true, false, (const int32_t[]){100000, -2}));
done:
	tok_vocab_free(q);
	tok_vocab_free(sp);
	tok_vocab_free(g2);
	tok_vocab_free(phi);
	tok_vocab_free(ds);
}

// Pushes ids one by one; returns the concatenated output (malloc'd) and checks each push.
static char *stream_all(const tok_vocab *v, const int32_t *ids, size_t n, unsigned flags, size_t *len) {
	tok_stream *s = tok_stream_new(v, flags);
	char *acc = malloc(16 * n + 16);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		const char *o;
		size_t on;
		if (tok_stream_push(s, ids[i], &o, &on)) { k = (size_t)-1; break; }
		memcpy(acc + k, o, on);
		k += on;
	}
	const char *o;
	size_t on;
	if (k != (size_t)-1 && !tok_stream_flush(s, &o, &on)) {
		memcpy(acc + k, o, on);
		k += on;
	}
	tok_stream_free(s);
	*len = k;
	return acc;
}

static bool push_is(tok_stream *s, int32_t id, const char *want, size_t pending) {
	const char *o;
	size_t n;
	int rc = tok_stream_push(s, id, &o, &n);
	bool ok = !rc && n == strlen(want) && !memcmp(o, want, n) && tok_stream_pending(s) == pending;
	if (!ok) fprintf(stderr, "push %d: rc %d got '%.*s' (%zu) want '%s', pending %zu\n", id, rc, (int)n, o, n, want,
			 tok_stream_pending(s));
	return ok;
}

static void test_stream(void) {
	tok_vocab *sp = t_vocab("llama-spm"), *g2 = t_vocab("gpt-2");
	CHECK(sp && g2);
	if (!sp || !g2) goto done;
	int32_t B[256];
	for (int b = 0; b < 256; b++) {
		char name[8];
		snprintf(name, sizeof name, "<0x%02X>", b);
		B[b] = tok_find(sp, name, 6);
		if (B[b] < 0 || tok_token_type(sp, B[b]) != TOK_TYPE_BYTE) { CHECKF(0, "byte token %s", name); goto done; }
	}
	tok_stream *s = tok_stream_new(sp, 0);
	CHECK(s != NULL);
	// é = C3 A9: the first byte is held until the second arrives.
	CHECK(push_is(s, B[0xC3], "", 1));
	CHECK(push_is(s, B[0xA9], "\xc3\xa9", 0));
	// A 4-byte emoji over four tokens.
	CHECK(push_is(s, B[0xF0], "", 1));
	CHECK(push_is(s, B[0x9F], "", 2));
	CHECK(push_is(s, B[0x98], "", 3));
	CHECK(push_is(s, B[0x81], "\xf0\x9f\x98\x81", 0));
	// Bytes that can never be UTF-8 come out as U+FFFD at once.
	CHECK(push_is(s, B[0xFF], "\xef\xbf\xbd", 0));
	CHECK(push_is(s, B[0x80], "\xef\xbf\xbd", 0));
	CHECK(push_is(s, B[0xC0], "\xef\xbf\xbd", 0));
	// A sequence broken by the next token: U+FFFD, then the new token's text.
	CHECK(push_is(s, B[0xC3], "", 1));
	CHECK(push_is(s, 15043, "\xef\xbf\xbd Hello", 0));
	// A surrogate (ED A0) and an overlong (E0 80) are broken at their second byte.
	CHECK(push_is(s, B[0xED], "", 1));
	CHECK(push_is(s, B[0xA0], "\xef\xbf\xbd\xef\xbf\xbd", 0));
	CHECK(push_is(s, B[0xE0], "", 1));
	CHECK(push_is(s, B[0x80], "\xef\xbf\xbd\xef\xbf\xbd", 0));
	// What is still held at the end becomes U+FFFD on flush.
	CHECK(push_is(s, B[0xE2], "", 1));
	CHECK(push_is(s, B[0x82], "", 2));
	const char *o;
	size_t n;
	CHECK(!tok_stream_flush(s, &o, &n) && n == 3 && !memcmp(o, "\xef\xbf\xbd", 3) && tok_stream_pending(s) == 0);
	CHECK(!tok_stream_flush(s, &o, &n) && n == 0);
	// Bad ids are refused and change nothing.
	CHECK(push_is(s, B[0xC3], "", 1));
	CHECK(tok_stream_push(s, -1, &o, &n) == LANES_ERANGE && n == 0);
	CHECK(tok_stream_push(s, tok_n_tokens(sp), &o, &n) == LANES_ERANGE && n == 0);
	CHECK(push_is(s, B[0xA9], "\xc3\xa9", 0));
	// Control tokens: nothing unless asked for.
	CHECK(push_is(s, 2, "", 0));
	tok_stream_free(s);
	s = tok_stream_new(sp, TOK_DECODE_SPECIAL | TOK_DECODE_STRIP_SPACE);
	CHECK(push_is(s, 1, "<s>", 0));
	CHECK(push_is(s, 15043, " Hello", 0)); // the strip went to "<s>", which rendered
	CHECK(push_is(s, 2, "</s>", 0));
	tok_stream_free(s);
	s = tok_stream_new(sp, TOK_DECODE_STRIP_SPACE);
	CHECK(push_is(s, 1, "", 0));
	CHECK(push_is(s, 15043, "Hello", 0)); // the space prefixed after BOS is dropped
	CHECK(push_is(s, 3186, " world", 0));
	CHECK(!tok_stream_flush(s, &o, &n) && n == 0);
	CHECK(push_is(s, 15043, "Hello", 0)); // flush starts a new text
	tok_stream_free(s);
	tok_stream_free(NULL);

	// Streamed output equals whole-sequence output, for every vector text.
	const char *vocabs[] = {"llama-spm", "gpt-2"};
	for (int k = 0; k < 2; k++) {
		const tok_vocab *v = k ? g2 : sp;
		char path[1024];
		snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.inp", t_shared(), vocabs[k]);
		texts tx;
		CHECK(read_inp(path, &tx));
		bool all = true;
		size_t partial = 0;
		for (size_t i = 0; i < tx.n; i++) {
			int32_t *ids;
			size_t ni;
			char err[256];
			if (tok_encode(v, tx.text[i], tx.len[i], true, false, &ids, &ni, err, sizeof err)) { all = false; continue; }
			char *whole;
			size_t wl, sl;
			if (tok_detokenize(v, ids, ni, TOK_DECODE_STRIP_SPACE, &whole, &wl, err, sizeof err)) { all = false; free(ids); continue; }
			char *st = stream_all(v, ids, ni, TOK_DECODE_STRIP_SPACE, &sl);
			all &= sl == wl && !memcmp(st, whole, wl) && wl == tx.len[i] && !memcmp(whole, tx.text[i], wl);
			// Count tokens whose bytes end inside a character: the stream must have held them.
			tok_stream *ss = tok_stream_new(v, 0);
			for (size_t j = 0; j < ni; j++) {
				const char *oo;
				size_t on;
				tok_stream_push(ss, ids[j], &oo, &on);
				partial += tok_stream_pending(ss) > 0;
				for (size_t q = 0; q < on;) { // every push hands out whole, valid characters
					size_t cl = (uint8_t)oo[q] < 0x80 ? 1 : (uint8_t)oo[q] < 0xE0 ? 2 : (uint8_t)oo[q] < 0xF0 ? 3 : 4;
					all &= q + cl <= on;
					q += cl;
				}
			}
			tok_stream_free(ss);
			free(st);
			free(whole);
			free(ids);
		}
		CHECKF(all, "%s: streamed == whole == original text", vocabs[k]);
		CHECKF(partial > 0, "%s: some tokens end inside a character (%zu)", vocabs[k], partial);
		free_texts(&tx);
	}

	// Bad ids: a clear error from the whole-sequence decoder and the accessors.
	char *out;
	size_t ol;
	char err[256] = "";
	CHECK(tok_detokenize(sp, (const int32_t[]){15043, 32000}, 2, 0, &out, &ol, err, sizeof err) == LANES_ERANGE);
	CHECK(out == NULL && strstr(err, "token 1") && strstr(err, "32000"));
	CHECK(tok_detokenize(sp, (const int32_t[]){-5}, 1, 0, &out, &ol, err, sizeof err) == LANES_ERANGE);
	CHECK(tok_text(sp, -1, &ol) == NULL && tok_text(sp, 32000, &ol) == NULL && tok_piece(sp, 32000, 0, &ol) == NULL);
	CHECK(!tok_is_eog(sp, -1) && !tok_is_eog(sp, 1 << 30) && tok_token_type(sp, -3) == TOK_TYPE_UNDEFINED);
	CHECK(tok_detokenize(sp, NULL, 0, 0, &out, &ol, err, sizeof err) == 0 && ol == 0 && out && out[0] == 0);
	free(out);
done:
	tok_vocab_free(sp);
	tok_vocab_free(g2);
}

// The shared models carry vocabularies too; stories260K's must round-trip a story line.
static void test_models(void) {
	char path[1024];
	snprintf(path, sizeof path, "%s/models/stories260K.gguf", t_shared());
	tok_vocab *v = t_vocab_path(path);
	CHECK(v != NULL);
	if (!v) return;
	CHECK(tok_n_tokens(v) == 512 && tok_model(v) == TOK_MODEL_SPM && tok_bos(v) == 1 && tok_eos(v) == 2);
	CHECK(tok_pad(v) == -1 && tok_add_bos(v) && tok_add_space_prefix(v));
	const char *story = "Once upon a time, there was a little girl named Lily.\nShe liked to play.";
	int32_t *ids;
	size_t n;
	char err[256];
	CHECK(!tok_encode(v, story, strlen(story), true, true, &ids, &n, err, sizeof err));
	CHECK(n > 10 && ids[0] == 1);
	CHECK(detok_is(v, ids, n, TOK_DECODE_STRIP_SPACE, story));
	free(ids);
	tok_vocab_free(v);
}

// Several threads encode and decode with one vocab at once and get the single-thread answers.
typedef struct {
	const tok_vocab *v;
	texts *tx;
	int32_t **want;
	size_t *nwant;
	int ok;
} worker;

static void *work(void *arg) {
	worker *w = arg;
	w->ok = 1;
	for (int rep = 0; rep < 5; rep++)
		for (size_t i = 0; i < w->tx->n; i++) {
			int32_t *ids;
			size_t n;
			char err[256], *back;
			size_t bl;
			if (tok_encode(w->v, w->tx->text[i], w->tx->len[i], false, false, &ids, &n, err, sizeof err)) { w->ok = 0; continue; }
			if (n != w->nwant[i] || (n && memcmp(ids, w->want[i], n * sizeof *ids))) w->ok = 0;
			if (tok_detokenize(w->v, ids, n, 0, &back, &bl, err, sizeof err) || bl != w->tx->len[i] ||
			    memcmp(back, w->tx->text[i], bl))
				w->ok = 0;
			else free(back);
			free(ids);
		}
	return NULL;
}

static void test_threads(void) {
	tok_vocab *v = t_vocab("qwen2");
	char path[1024];
	snprintf(path, sizeof path, "%s/vocab/ggml-vocab-qwen2.gguf.inp", t_shared());
	texts tx;
	CHECK(v && read_inp(path, &tx));
	if (!v) return;
	int32_t *want[64];
	size_t nwant[64];
	for (size_t i = 0; i < tx.n && i < 64; i++) {
		char err[256];
		tok_encode(v, tx.text[i], tx.len[i], false, false, &want[i], &nwant[i], err, sizeof err);
	}
	enum { NT = 4 };
	pthread_t th[NT];
	worker w[NT];
	for (int i = 0; i < NT; i++) {
		w[i] = (worker){v, &tx, want, nwant, 0};
		pthread_create(&th[i], NULL, work, &w[i]);
	}
	for (int i = 0; i < NT; i++) {
		pthread_join(th[i], NULL);
		CHECKF(w[i].ok, "thread %d got the single-thread results", i);
	}
	for (size_t i = 0; i < tx.n && i < 64; i++) free(want[i]);
	free_texts(&tx);
	tok_vocab_free(v);
}

// SPM cuts the text before each U+2581 that follows another character when no token could span
// such a cut; the result must equal merging the whole text at once.
static void test_spm_cuts(void) {
	tok_vocab *v = t_vocab("llama-spm");
	char path[1024];
	snprintf(path, sizeof path, "%s/vocab/ggml-vocab-llama-spm.gguf.inp", t_shared());
	size_t il;
	char *inp = t_read_file(path, &il);
	CHECK(v && inp);
	if (!v || !inp) { tok_vocab_free(v); free(inp); return; }
	CHECK(v->spm_split);
	char *text = malloc(8 * (il + 32));
	size_t n = 0;
	for (int r = 0; r < 8; r++) { // the vectors, with their separators, several times over
		memcpy(text + n, inp, il);
		n += il;
		const char *tail = "  x\xe2\x96\x81y  \xe2\x96\x81\xe2\x96\x81 ";
		memcpy(text + n, tail, strlen(tail));
		n += strlen(tail);
	}
	int32_t *a, *b;
	size_t na, nb;
	char err[256];
	CHECK(!tok_encode(v, text, n, true, true, &a, &na, err, sizeof err));
	v->spm_split = false;
	CHECK(!tok_encode(v, text, n, true, true, &b, &nb, err, sizeof err));
	CHECK(na == nb && na > 1000 && !memcmp(a, b, na * sizeof *a));
	free(a);
	free(b);
	free(text);
	free(inp);
	tok_vocab_free(v);
}

// Well-formed UTF-8 length at s[0..n) (1-4), 0 when ill-formed: Unicode's table 3-7.
static size_t utf8_ok(const uint8_t *s, size_t n) {
	uint8_t c = s[0];
	if (c < 0x80) return 1;
	size_t need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
	if (!need || n < need) return 0;
	uint8_t lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
	if (s[1] < lo || s[1] > hi) return 0;
	for (size_t i = 2; i < need; i++)
		if ((s[i] & 0xC0) != 0x80) return 0;
	return need;
}

// Every ill-formed byte replaced by U+FFFD (how BPE encoding reads text).
static size_t fix_per_byte(const uint8_t *s, size_t n, char *o) {
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		size_t l = utf8_ok(s + i, n - i);
		if (l) { memcpy(o + k, s + i, l); k += l; i += l; }
		else { memcpy(o + k, "\xef\xbf\xbd", 3); k += 3; i++; }
	}
	return k;
}

// Each maximal ill-formed prefix replaced by one U+FFFD (how the decoder writes bytes).
static size_t fix_maximal(const uint8_t *s, size_t n, char *o) {
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		size_t l = utf8_ok(s + i, n - i);
		if (l) { memcpy(o + k, s + i, l); k += l; i += l; continue; }
		size_t j = 1;
		uint8_t c = s[i];
		size_t need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
		uint8_t lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
		while (j < need && i + j < n && s[i + j] >= (j == 1 ? lo : 0x80) && s[i + j] <= (j == 1 ? hi : 0xBF)) j++;
		memcpy(o + k, "\xef\xbf\xbd", 3);
		k += 3;
		i += j;
	}
	return k;
}

static size_t put_utf8(uint32_t cp, uint8_t *o) {
	if (cp < 0x800) { o[0] = (uint8_t)(0xC0 | cp >> 6); o[1] = (uint8_t)(0x80 | (cp & 0x3F)); return 2; }
	if (cp < 0x10000) {
		o[0] = (uint8_t)(0xE0 | cp >> 12); o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (uint8_t)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (uint8_t)(0xF0 | cp >> 18); o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
	o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (uint8_t)(0x80 | (cp & 0x3F));
	return 4;
}

// Random text (ASCII, whitespace, any character; for BPE also stray bytes) encodes and decodes
// back to itself as each family reads it, and random id streams always come out as valid UTF-8.
// (SPM splits ill-formed bytes as llama.cpp does, which may swallow a following space mark.)
static void test_random(void) {
	const char *names[] = {"llama-spm", "gpt-2", "qwen2"};
	uint64_t r = 7;
	for (int k = 0; k < 3; k++) {
		tok_vocab *v = t_vocab(names[k]);
		CHECK(v != NULL);
		if (!v) continue;
		bool spm = tok_model(v) == TOK_MODEL_SPM;
		int good = 0, runs = 300;
		for (int it = 0; it < runs; it++) {
			uint8_t in[400];
			char want[1300];
			r = splitmix64(r);
			size_t n = 0, cap = r % (sizeof in - 4);
			while (n < cap) {
				r = splitmix64(r);
				unsigned pick = r % 10;
				if (pick < 5) in[n++] = (uint8_t)(0x20 + (r >> 8) % 95);
				else if (pick < 6) in[n++] = (uint8_t)"\n\t "[(r >> 8) % 3];
				else if (pick < 8 || spm) { // a valid character of 2-4 bytes, surrogates excepted
					uint32_t cp = 0x80 + (uint32_t)((r >> 8) % 0x10FF80);
					if (cp >= 0xD800 && cp < 0xE000) cp -= 0x800;
					if (cp == 0x2581) cp++; // SPM's space mark reads back as a space
					n += put_utf8(cp, in + n);
				} else in[n++] = (uint8_t)(r >> 16); // any byte: BPE reads ill-formed ones as U+FFFD
			}
			size_t wl = spm ? fix_maximal(in, n, want) : fix_per_byte(in, n, want);
			int32_t *ids;
			size_t ni;
			char err[256], *back;
			size_t bl;
			if (tok_encode(v, (const char *)in, n, true, false, &ids, &ni, err, sizeof err)) continue;
			if (!tok_detokenize(v, ids, ni, TOK_DECODE_STRIP_SPACE, &back, &bl, err, sizeof err)) {
				bool same = bl == wl && !memcmp(back, want, wl);
				good += same;
				if (!same && getenv("TOK_VERBOSE")) {
					fprintf(stderr, "in  :");
					for (size_t i = 0; i < n; i++) fprintf(stderr, " %02x", in[i]);
					fprintf(stderr, "\nwant:");
					for (size_t i = 0; i < wl; i++) fprintf(stderr, " %02x", (uint8_t)want[i]);
					fprintf(stderr, "\nback:");
					for (size_t i = 0; i < bl; i++) fprintf(stderr, " %02x", (uint8_t)back[i]);
					fprintf(stderr, "\n");
				}
				free(back);
			}
			free(ids);
		}
		CHECKF(good == runs, "%s: %d of %d random texts read back", names[k], good, runs);
		// Random ids: every push hands out valid UTF-8, whatever the order.
		tok_stream *s = tok_stream_new(v, TOK_DECODE_SPECIAL);
		bool valid = true;
		for (int it = 0; it < 20000; it++) {
			r = splitmix64(r);
			const char *o;
			size_t on;
			int32_t id = (int32_t)(r % (uint64_t)tok_n_tokens(v));
			if (it % 3 == 0 && !spm) id = (int32_t)(r % 256); // single-byte tokens split characters
			if (tok_stream_push(s, id, &o, &on)) { valid = false; break; }
			for (size_t q = 0; q < on;) {
				size_t l = utf8_ok((const uint8_t *)o + q, on - q);
				if (!l) { valid = false; break; }
				q += l;
			}
		}
		CHECKF(valid, "%s: random ids stream as valid UTF-8", names[k]);
		tok_stream_free(s);
		tok_vocab_free(v);
	}
}

// The charsmap's double array for keys with distinct first bytes, each to its value (an offset
// into the replacement strings), laid out by hand: the root's base is 512, so a key's first
// node lies at 512 ^ its first byte; the other nodes and the values take fresh indices below 512.
static void xcda_put(uint32_t *a, const char *key, uint32_t value, uint32_t *fresh) {
	const uint8_t *k = (const uint8_t *)key;
	const size_t m = strlen(key);
	uint32_t at = 512 ^ k[0];
	for (size_t i = 0; i < m; i++) {
		const uint32_t next = (*fresh)++;
		const uint32_t base = i + 1 < m ? at ^ next ^ k[i + 1] : at ^ next;
		a[at] = base << 10 | (i + 1 == m ? 1u << 8 : 0) | k[i];
		if (i + 1 == m) a[next] = value;
		at = next;
	}
}

// Unigram (tokenizer.ggml.model "t5"): the best sum of scores wins, a code point no piece
// covers is an [UNK] (neighbours merged) costing the lowest score less 10, the charsmap
// replaces the longest prefix it holds, spaces are U+2581 (merged when the file says so).
// The expected pieces are worked out by hand from the scores below.
static void test_unigram(void) {
	static const char *const toks[] = {"<s>", "<pad>", "</s>", "<unk>", "\xE2\x96\x81", "\xE2\x96\x81" "a", "b", "\xE2\x96\x81" "ab",
					   "c", "\xE2\x96\x81" "abc", "\xE2\x96\x81" "c", "a"};
	static const float scores[] = {0, 0, 0, 0, -2, -1, -3, -2.5f, -4, -9, -3.5f, -2};
	static const int32_t types[] = {3, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1};
	enum { NT = sizeof toks / sizeof toks[0] };
	// "Ａ" (U+FF21) -> "a", no-break space -> " "
	uint32_t a[1024] = {0}, fresh = 16;
	a[0] = 512u << 10;
	xcda_put(a, "\xEF\xBC\xA1", 0, &fresh);
	xcda_put(a, "\xC2\xA0", 2, &fresh);
	uint8_t cm[4 + sizeof a + 4];
	const uint32_t blob = sizeof a;
	for (int i = 0; i < 4; i++) cm[i] = (uint8_t)(blob >> (8 * i));
	for (size_t i = 0; i < 1024; i++)
		for (int b = 0; b < 4; b++) cm[4 + 4 * i + b] = (uint8_t)(a[i] >> (8 * b));
	memcpy(cm + 4 + sizeof a, "a\0 \0", 4);
	static const struct {
		bool merge;
		const char *text, *pieces; // "_" for U+2581
	} cases[] = {
		{false, "abc", "_ab c"},                     // -6.5 beats _abc (-9) and _a b c (-8)
		{false, "ab  c", "_ab _ _c"},                // each space its own U+2581
		{true, "  ab  c ", "_ab _c"},                // merged, the ends' dropped
		{false, "a\xE2\x82\xAC\xE2\x82\xAC" "b", "_a <unk> b"}, // two uncovered code points, one [UNK]
		{false, "\xEF\xBC\xA1" "b", "_ab"},         // the charsmap's replacement
		{false, "a\xC2\xA0" "c", "_a _c"},          // a replacement that is a space
		{false, "", ""},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		gguf_writer *w = gguf_writer_new();
		gguf_writer_set_str(w, "tokenizer.ggml.model", "t5");
		gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NT);
		gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_F32, scores, NT);
		gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, types, NT);
		gguf_writer_set_arr(w, "tokenizer.ggml.precompiled_charsmap", GGUF_U8, cm, sizeof cm);
		gguf_writer_set_bool(w, "tokenizer.ggml.remove_extra_whitespaces", cases[k].merge);
		gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0);
		gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
		gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 3);
		tok_vocab *v;
		char err[256];
		CHECKF(synth_load(w, &v, err, sizeof err) == 0, "%s", err);
		if (!v) continue;
		int32_t *ids = NULL;
		size_t n = 0;
		CHECKF(tok_encode(v, cases[k].text, strlen(cases[k].text), false, false, &ids, &n, err, sizeof err) == 0, "%s", err);
		char got[256];
		t_pieces(v, ids, n, got, sizeof got);
		CHECKF(!strcmp(got, cases[k].pieces), "case %zu: got \"%s\", want \"%s\"", k, got, cases[k].pieces);
		free(ids);
		// the specials T5's way: no BOS, an EOS
		if (k == 0) {
			CHECK(tok_encode(v, "abc", 3, true, false, &ids, &n, err, sizeof err) == 0 && n == 3 && ids[2] == 2);
			free(ids);
		}
		// random texts of a, b and c: the cut is the best sum of scores a plain search over every
		// piece at every byte finds (the pieces of this vocabulary cover any such text)
		for (int r = 0; k == 0 && r < 200; r++) {
			char text[40], ns[48];
			const int m = 1 + r % 37;
			for (int i = 0; i < m; i++) text[i] = "abc"[(r * 7 + i * i * 3 + i) % 3];
			memcpy(ns, "\xE2\x96\x81", 3);
			memcpy(ns + 3, text, (size_t)m);
			const int nn = m + 3;
			double best[48];
			int from[48], tok[48];
			for (int i = 0; i <= nn; i++) best[i] = -1e300;
			best[0] = 0;
			for (int at = 0; at < nn; at++)
				for (int t = 4; t < NT && best[at] > -1e300; t++) {
					const int l = (int)strlen(toks[t]);
					if (at + l > nn || memcmp(ns + at, toks[t], (size_t)l)) continue;
					if (best[at] + scores[t] > best[at + l]) best[at + l] = best[at] + scores[t], from[at + l] = at, tok[at + l] = t;
				}
			int32_t want[48];
			int nw = 0;
			for (int at = nn; at > 0; at = from[at]) want[nw++] = tok[at];
			CHECK(tok_encode(v, text, (size_t)m, false, false, &ids, &n, err, sizeof err) == 0);
			bool same = (int)n == nw;
			for (int i = 0; same && i < nw; i++) same = ids[i] == want[nw - 1 - i];
			CHECKF(same, "random text %d (%.*s): the cut differs from the plain search's", r, m, text);
			free(ids);
		}
		tok_vocab_free(v);
	}
	// a piece longer than any SentencePiece writes is refused: the search walks it at every byte
	{
		char longest[300];
		memset(longest, 'b', sizeof longest - 1);
		longest[sizeof longest - 1] = 0;
		const char *lt[NT];
		memcpy(lt, toks, sizeof lt);
		lt[6] = longest;
		gguf_writer *w = gguf_writer_new();
		gguf_writer_set_str(w, "tokenizer.ggml.model", "t5");
		gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", lt, NT);
		gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_F32, scores, NT);
		gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, types, NT);
		gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 3);
		tok_vocab *v;
		char err[256];
		CHECKF(synth_load(w, &v, err, sizeof err) == LANES_EFORMAT && strstr(err, "token 6 is 299 bytes"), "%s", err);
	}
	// a charsmap whose double array runs past its bytes is refused
	gguf_writer *w = gguf_writer_new();
	gguf_writer_set_str(w, "tokenizer.ggml.model", "t5");
	gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NT);
	gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 3);
	const uint8_t bad[8] = {0xff, 0, 0, 0, 1, 2, 3, 4};
	gguf_writer_set_arr(w, "tokenizer.ggml.precompiled_charsmap", GGUF_U8, bad, sizeof bad);
	tok_vocab *v;
	char err[256];
	CHECK(synth_load(w, &v, err, sizeof err) == LANES_EFORMAT && strstr(err, "charsmap"));
}

int main(void) {
	if (cli_env_apply()) return 2; // LANES_LOG and the other knobs, as the CLI reads them
	test_random();
	test_spm_cuts();
	test_vectors();
	test_llama3();
	test_validation();
	test_special();
	test_stream();
	test_models();
	test_threads();
	test_unigram();
	T_DONE("tokenizer");
}
