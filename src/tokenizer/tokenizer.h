// tokenizer: the vocabulary from GGUF metadata, SentencePiece-style (llama), byte-level BPE
// (gpt2, pre-tokenizer regexes run on PCRE2), WordPiece (bert) and Unigram (t5) encoders,
// special-token parsing, a streaming detokenizer. Tokenizes as llama.cpp does.
#ifndef LANES_TOKENIZER_H
#define LANES_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

// A loaded vocabulary. Read-only after tok_vocab_load: any number of threads may encode and
// decode with it at once. It keeps its own copies, so the gguf may be closed after loading.
typedef struct tok_vocab tok_vocab;

// tokenizer.ggml.model
enum tok_model {
	TOK_MODEL_SPM, // "llama": SentencePiece-style, score-driven merges with byte fallback
	TOK_MODEL_BPE, // "gpt2": byte-level BPE with a named pre-tokenizer
	TOK_MODEL_WPM, // "bert": WordPiece after BERT's basic split; [CLS] text [SEP] with the specials
	TOK_MODEL_UGM, // "t5": Unigram (T5's, XLM-RoBERTa's) after the file's charsmap normalization
};

// tokenizer.ggml.token_type values, numbered as in the file.
enum tok_type {
	TOK_TYPE_UNDEFINED = 0,
	TOK_TYPE_NORMAL = 1,
	TOK_TYPE_UNKNOWN = 2,
	TOK_TYPE_CONTROL = 3,
	TOK_TYPE_USER_DEFINED = 4,
	TOK_TYPE_UNUSED = 5,
	TOK_TYPE_BYTE = 6,
};

// Loads the vocabulary from g's tokenizer.* keys (a full model or a vocab-only file; tensors
// are not needed). Every array length, type and id is checked; a bad file gets a negative
// code (LANES_ENOTFOUND: no tokenizer; LANES_EUNSUPPORTED: unknown model or pre-tokenizer;
// LANES_EFORMAT / LANES_ERANGE: malformed) and a message in err. On success *out owns it.
int tok_vocab_load(tok_vocab **out, const gguf *g, char *err, size_t errlen);
void tok_vocab_free(tok_vocab *v); // accepts NULL

// ---- facts about the vocabulary (ids are -1 when the vocab has none) -------------------
int32_t tok_n_tokens(const tok_vocab *v);
enum tok_model tok_model(const tok_vocab *v);
const char *tok_pre_name(const tok_vocab *v); // pre-tokenizer in use ("default" for SPM)
int32_t tok_bos(const tok_vocab *v);
int32_t tok_sep(const tok_vocab *v); // the separator ([SEP]); -1: none
int32_t tok_eos(const tok_vocab *v);
int32_t tok_eot(const tok_vocab *v); // from the file, else found by text (<|eot_id|>, <|im_end|>, ...)
int32_t tok_eom(const tok_vocab *v); // from the file, else <|eom_id|>
int32_t tok_pad(const tok_vocab *v);
int32_t tok_unk(const tok_vocab *v);
// Fill-in-the-middle tokens: tokenizer.ggml.fim_*_token_id, else found by their known texts
// (<|fim_prefix|>, <fim_prefix>, <PRE>, <|repo_name|>, <|file_sep|>, ...).
enum tok_fim { TOK_FIM_PRE, TOK_FIM_SUF, TOK_FIM_MID, TOK_FIM_PAD, TOK_FIM_REP, TOK_FIM_SEP, TOK_FIM__COUNT };
int32_t tok_fim(const tok_vocab *v, enum tok_fim which);
bool tok_add_bos(const tok_vocab *v); // tokenizer.ggml.add_bos_token; absent: SPM and llama3 yes, BPE no
bool tok_add_eos(const tok_vocab *v); // tokenizer.ggml.add_eos_token; absent: no
bool tok_add_space_prefix(const tok_vocab *v); // SPM prefixes a space to text (default yes)
// End of generation: eos, eot, eom and control tokens such as <|im_end|>, <|eot_id|>,
// <|end_of_text|>, <end_of_turn>, <|endoftext|> (as llama.cpp infers them). False for bad ids.
bool tok_is_eog(const tok_vocab *v, int32_t id);
// Every end-of-generation id, ascending; *n gets the count. Valid while v lives.
const int32_t *tok_eog_ids(const tok_vocab *v, size_t *n);
// Control or unknown token (rendered only on request, parsed from text only with parse_special).
bool tok_is_control(const tok_vocab *v, int32_t id);
// The token's type as stored (TOK_TYPE_UNDEFINED for bad ids). EOG-looking tokens stored as
// normal are reported as CONTROL, as llama.cpp treats them.
enum tok_type tok_token_type(const tok_vocab *v, int32_t id);
// The token's vocabulary string (not NUL-terminated, *len bytes; GPT-2 byte-encoded for BPE,
// with ▁ for SPM). NULL for bad ids. Valid while v lives.
const char *tok_text(const tok_vocab *v, int32_t id, size_t *len);
// Bytes of the longest vocabulary string: no token stands for more bytes of text, so a text
// of more than n times this cannot encode to n tokens or fewer.
size_t tok_max_text_len(const tok_vocab *v);
// Id of the token whose vocabulary string is exactly text[0..len); -1 when none.
int32_t tok_find(const tok_vocab *v, const char *text, size_t len);
// The token's score (tokenizer.ggml.scores; 0 when absent or bad id).
float tok_score(const tok_vocab *v, int32_t id);
// tokenizer.chat_template, NUL-terminated; NULL when the file has none. Valid while v lives.
const char *tok_chat_template(const tok_vocab *v);

// ---- encoding ---------------------------------------------------------------------------
// Tokenizes text[0..len) (any bytes; a trailing newline is text like any other).
//   add_special:   add BOS / EOS as the vocab says (tok_add_bos / tok_add_eos).
//   parse_special: control tokens written in the text ("<|im_start|>", "<s>") become their
//                  ids; false keeps them as plain text. User-defined tokens are always parsed.
// On success *ids is a malloc'd array (free() it; NULL when *n is 0) of *n ids and 0 is
// returned; otherwise a negative code and a message in err.
int tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_special,
	       bool parse_special, int32_t **ids, size_t *n, char *err, size_t errlen);

// Tokenizes a rendered chat prompt: special tokens are parsed, BOS is added when the vocab
// adds one unless the prompt already begins with it (its text or id), EOS is never added.
// Returns as tok_encode.
int tok_encode_chat(const tok_vocab *v, const char *prompt, size_t len, int32_t **ids,
		    size_t *n, char *err, size_t errlen);

// Pre-tokenization of a BPE vocab: splits text[0..len) (valid UTF-8) into the words the
// merges run on, as byte spans {start, end} into text. *spans is malloc'd (free() it).
// LANES_EUNSUPPORTED for SPM vocabs, LANES_EFORMAT for invalid UTF-8.
typedef struct {
	size_t start, end;
} tok_span;
int tok_pretokenize(const tok_vocab *v, const char *text, size_t len, tok_span **spans,
		    size_t *n, char *err, size_t errlen);

// ---- decoding ---------------------------------------------------------------------------
enum {
	// Control and unknown tokens render as their text ("</s>", "<|im_end|>"); without this
	// flag they render as nothing. User-defined tokens always render.
	TOK_DECODE_SPECIAL = 1u << 0,
	// Drop the space an SPM encoder prefixed (vocab with add_space_prefix): one leading space
	// of the first token that renders text, after any leading tokens that render nothing
	// (such as BOS). Use it to decode a whole text; not for a reply that continues a prompt.
	TOK_DECODE_STRIP_SPACE = 1u << 1,
};

// The bytes token id renders as alone (▁ → space for SPM, GPT-2 bytes decoded for BPE,
// <0xNN> → one byte), honouring TOK_DECODE_SPECIAL only. The bytes may be part of a UTF-8
// sequence. *len gets the count. NULL for bad ids. Valid while v lives.
const char *tok_piece(const tok_vocab *v, int32_t id, unsigned flags, size_t *len);

// Decodes ids[0..n) into text. The result is always valid UTF-8: bytes that do not form
// UTF-8 become U+FFFD. On success *out is malloc'd and NUL-terminated (free() it), *len its
// length, and 0 is returned; LANES_ERANGE with a message naming the index for an id outside
// the vocab.
int tok_detokenize(const tok_vocab *v, const int32_t *ids, size_t n, unsigned flags, char **out,
		   size_t *len, char *err, size_t errlen);

// A per-request streaming decoder: fed one token at a time, it hands back the text that is
// complete so far. Bytes that end inside a UTF-8 sequence are held until the sequence
// completes; bytes that cannot be UTF-8 come out as U+FFFD at once; tok_stream_flush turns a
// sequence still held at the end into U+FFFD. Concatenated outputs equal tok_detokenize.
typedef struct tok_stream tok_stream;
tok_stream *tok_stream_new(const tok_vocab *v, unsigned flags); // NULL on OOM
void tok_stream_free(tok_stream *s);                            // accepts NULL
// Feeds id. *out (not NUL-terminated, *n bytes, possibly 0) points into s and stays valid
// until the next call on s. Returns 0, LANES_ERANGE for an id outside the vocab (nothing is
// consumed), or LANES_ENOMEM.
int tok_stream_push(tok_stream *s, int32_t id, const char **out, size_t *n);
// Ends the text: any held bytes come out as U+FFFD. Same *out rules. Afterwards s starts a new
// text (TOK_DECODE_STRIP_SPACE applies again).
int tok_stream_flush(tok_stream *s, const char **out, size_t *n);
// Bytes held back, waiting for the rest of a UTF-8 sequence (0..3).
size_t tok_stream_pending(const tok_stream *s);

#endif
