// tokenizer internals shared by the module's files (vocab, pre-tokenizer, SPM, BPE, encode,
// detok): the vocab struct, string tables, UTF-8 helpers and the growable id list.
// Not part of the module's interface; other modules include tokenizer.h only.
#ifndef LANES_TOK_IMPL_H
#define LANES_TOK_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/base.h"
#include <string.h>
#include "tokenizer/tokenizer.h"

// Token attributes (bits): the stored type plus what llama.cpp infers from names.
enum {
	TOK_A_NORMAL = 1u << 0,
	TOK_A_UNKNOWN = 1u << 1,
	TOK_A_CONTROL = 1u << 2,
	TOK_A_USER = 1u << 3,
	TOK_A_UNUSED = 1u << 4,
	TOK_A_BYTE = 1u << 5,
	TOK_A_LSTRIP = 1u << 6, // whitespace left of it in text is dropped when it is parsed
	TOK_A_RSTRIP = 1u << 7, // whitespace right of it likewise
	TOK_A_EOG = 1u << 8,
};

// A set of strings with a hash index: entry i is arena[off[i] .. off[i]+len[i]).
typedef struct {
	char *arena;
	uint64_t *off;
	uint32_t *len;
	uint32_t n;
	uint32_t *slot;  // entry index + 1; 0 = empty
	uint32_t *hash;  // low 32 bits of each entry's hash, to skip most compares
	uint64_t mask;   // slots - 1
	uint32_t max_len; // longest entry
} tok_strtab;

// 64-bit hash of a byte string, eight bytes at a time.
static inline uint64_t tok_hash(const void *p, size_t n) {
	const uint8_t *b = p;
	uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
	for (; n >= 8; b += 8, n -= 8) {
		uint64_t w;
		memcpy(&w, b, 8);
		h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
		h ^= h >> 31;
	}
	uint64_t w = 0;
	for (size_t i = 0; i < n; i++) w |= (uint64_t)b[i] << (8 * i);
	return splitmix64(h ^ w);
}

// Entry index of key[0..len), or -1.
int64_t tok_strtab_find(const tok_strtab *t, const char *key, size_t len);
// Entry index of the string a ' ' b (a BPE merge), or -1.
int64_t tok_strtab_find_pair(const tok_strtab *t, const char *a, size_t alen, const char *b,
			     size_t blen);

typedef struct tok_pre_def tok_pre_def;

struct tok_vocab {
	enum tok_model model;
	int32_t n_tokens;
	tok_strtab tokens;       // entry i = token i's text
	float *scores;           // (n_tokens)
	uint8_t *type;           // (n_tokens) enum tok_type as stored
	uint16_t *attr;          // (n_tokens) TOK_A_* bits
	tok_strtab merges;       // BPE: entry r = merge of rank r, "a b"
	uint32_t *merge_split;   // (merges.n) bytes before the separating space
	char *piece_arena;       // rendered bytes of every token
	uint64_t *piece_off;     // (n_tokens)
	uint32_t *piece_len;     // (n_tokens)
	int32_t bos, eos, eot, eom, unk, pad, sep;
	int32_t fim[TOK_FIM__COUNT]; // fill-in-the-middle ids by enum tok_fim (-1: none)
	bool add_bos, add_eos, add_sep, add_space_prefix, ignore_merges; // add_sep: WordPiece ends a text with [SEP]
	int32_t *special;        // control / user-defined / unknown ids, longest text first
	size_t n_special;
	uint32_t *sp_start;      // (65537) CSR by a special token's first two bytes into sp_list
	uint32_t *sp_list;       // indexes into special[] (tokens of 2+ bytes)
	uint32_t *sp_short;      // indexes into special[] of one-byte tokens
	size_t n_sp_short;
	bool spm_split;          // SPM: no token has U+2581 after another character, so text can
				 // be cut before each such U+2581 without changing the result
	int32_t *eog;            // ascending
	size_t n_eog;
	int32_t byte_tok[256];   // id that stands for a raw byte (-1 when none)
	uint16_t byte_cp[256];   // BPE: GPT-2 byte -> code point
	int16_t cp_byte[324];    // BPE: code point -> byte (-1 when not a byte's)
	char *chat_template;
	char *pre_name;
	const tok_pre_def *pre;  // BPE pre-tokenizer
	pcre2_code **re;         // (n_re) compiled pre-tokenizer regexes
	size_t n_re;
	uint32_t re_pairs;       // ovector pairs the regexes need
	// Unigram (ugm.c)
	double ugm_unk_score;    // what a code point no token covers costs: the lowest normal score less 10
	bool ugm_merge_spaces;   // tokenizer.ggml.remove_extra_whitespaces
	uint32_t *xcda;          // (n_xcda) the precompiled charsmap's double array, or NULL
	size_t n_xcda;
	char *ugm_repl;          // (n_repl + 1) its replacement strings, NUL-terminated, one NUL added after them
	size_t n_repl;
	int32_t *ugm_sorted;     // (n_ugm) the ids a text may be cut into, by their bytes: a prefix before its extensions
	int32_t n_ugm;
};

// ---- a growable list of ids -------------------------------------------------------------
typedef struct {
	int32_t *v;
	size_t n, cap;
} tok_ids;
int tok_ids_push(tok_ids *l, int32_t id); // 0 or LANES_ENOMEM

// ---- a min-heap of candidate merges: lowest key first, then leftmost ---------------------
typedef struct {
	double key;     // BPE: merge rank; SPM: minus the merged token's score
	int32_t left, right;
	uint32_t size;  // bytes of the merged text when the candidate was made
} tok_bigram;
typedef struct {
	tok_bigram *v;
	size_t n, cap;
} tok_heap;
int tok_heap_push(tok_heap *h, tok_bigram b); // 0 or LANES_ENOMEM
tok_bigram tok_heap_pop(tok_heap *h);         // h->n > 0

// ---- UTF-8 --------------------------------------------------------------------------------
// Length of the sequence a lead byte announces (1 for stray continuation bytes), as llama.cpp
// splits text into characters.
static inline size_t tok_utf8_len(uint8_t c) {
	static const uint8_t lut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
	return lut[c >> 4];
}
// How many bytes at s[0..n) (n > 0) begin a well-formed UTF-8 sequence (Unicode table 3-7),
// with *need the sequence's full length (0 when s[0] can start none).
size_t tok_utf8_prefix(const uint8_t *s, size_t n, size_t *need);
// Length of the well-formed UTF-8 sequence at s[0..n) (1-4), or 0 when it is ill-formed or
// cut short.
size_t tok_utf8_valid(const uint8_t *s, size_t n);
// Appends code point cp as UTF-8 to out (at least 4 bytes); returns the bytes written.
size_t tok_utf8_put(uint32_t cp, char *out);

// ---- pieces of the pipeline ----------------------------------------------------------------
// Pre-tokenizer lookup by tokenizer.ggml.pre; NULL when unknown.
const tok_pre_def *tok_pre_find(const char *name);
bool tok_pre_ignore_merges(const tok_pre_def *p);
bool tok_pre_add_bos(const tok_pre_def *p);
// Compiles the pre-tokenizer's regexes into v->re.
int tok_pre_compile(tok_vocab *v, char *err, size_t errlen);

// Splits valid UTF-8 text[0..len) into words with v's regexes (applied in sequence, each on
// the pieces of the one before, unmatched stretches kept as pieces).
int tok_pre_split(const tok_vocab *v, const char *text, size_t len, tok_span **spans, size_t *n,
		  char *err, size_t errlen);

// SPM on one text fragment (spaces already escaped as U+2581).
int tok_spm_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out);
// Unigram: the charsmap and the unknown score from g (ugm.c); on one text fragment.
int tok_ugm_init(tok_vocab *v, const gguf *g, char *err, size_t errlen);
int tok_ugm_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out);
// WordPiece on one text fragment (BERT's basic split, then the longest pieces; wpm.c).
int tok_wpm_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out);
// BPE on one text fragment (raw bytes; invalid UTF-8 becomes U+FFFD).
int tok_bpe_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out, char *err,
		   size_t errlen);

#endif
