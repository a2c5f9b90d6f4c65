// tokenizer/vocab: loads and validates the vocabulary from GGUF metadata (tokens, scores,
// types, merges, special ids, flags, chat template), infers what llama.cpp infers from token
// names (EOT, EOG, FIM, per-token strip rules), and answers the accessors of tokenizer.h.
#include "tokenizer/tok_impl.h"

#include <assert.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY(k) "tokenizer.ggml." k

// ---- string table building -------------------------------------------------------------

static int strtab_alloc(tok_strtab *t, uint64_t n, uint64_t bytes) {
	uint64_t slots = 16;
	while (slots < 2 * n) slots *= 2;
	t->arena = malloc(bytes ? bytes : 1);
	t->off = malloc((n ? n : 1) * sizeof *t->off);
	t->len = malloc((n ? n : 1) * sizeof *t->len);
	t->hash = malloc((n ? n : 1) * sizeof *t->hash);
	t->slot = calloc(slots, sizeof *t->slot);
	t->mask = slots - 1;
	t->n = 0;
	return t->arena && t->off && t->len && t->hash && t->slot ? 0 : LANES_ENOMEM;
}

static void strtab_free(tok_strtab *t) {
	free(t->arena);
	free(t->off);
	free(t->len);
	free(t->hash);
	free(t->slot);
	memset(t, 0, sizeof *t);
}

// Adds s (copied at *used in the arena); returns the new entry, or the existing entry's index
// with *dup set when s is already present.
static uint32_t strtab_add(tok_strtab *t, const char *s, size_t len, uint64_t *used, bool *dup) {
	uint64_t h = tok_hash(s, len);
	uint64_t i = h & t->mask;
	for (;; i = (i + 1) & t->mask) {
		uint32_t sl = t->slot[i];
		if (!sl) break;
		uint32_t e = sl - 1;
		if (t->hash[e] == (uint32_t)h && t->len[e] == len && !memcmp(t->arena + t->off[e], s, len)) {
			*dup = true;
			return e;
		}
	}
	uint32_t e = t->n++;
	memcpy(t->arena + *used, s, len);
	t->off[e] = *used;
	t->len[e] = (uint32_t)len;
	t->hash[e] = (uint32_t)h;
	*used += len;
	t->slot[i] = e + 1;
	if (len > t->max_len) t->max_len = (uint32_t)len;
	*dup = false;
	return e;
}

// ---- reading keys -----------------------------------------------------------------------

// A string array key; NULL with a message when absent (if required) or of another type.
static int get_str_arr(const gguf *g, const char *key, bool required, const gguf_value **out,
		       char *err, size_t errlen) {
	*out = NULL;
	const gguf_value *v = gguf_get(g, key);
	if (!v) return required ? base_seterr(err, errlen, LANES_EFORMAT, "%s is missing", key) : 0;
	if (v->type != GGUF_ARRAY || v->arr.type != GGUF_STRING)
		return base_seterr(err, errlen, LANES_EFORMAT, "%s must be an array of strings", key);
	*out = v;
	return 0;
}

// An optional token id key: absent keeps *id; -1 (or 0xFFFFFFFF) means none.
static int get_id(const gguf *g, const char *key, int32_t n_tokens, int32_t *id, char *err,
		  size_t errlen) {
	const gguf_value *v = gguf_get(g, key);
	if (!v) return 0;
	// Converters write "no such token" as -1, which an unsigned key stores as all ones.
	if ((v->type == GGUF_U32 && v->u == UINT32_MAX) || (v->type == GGUF_U64 && v->u == UINT64_MAX)) {
		*id = -1;
		return 0;
	}
	int64_t x;
	if (v->type == GGUF_BOOL || !gguf_value_i64(v, &x))
		return base_seterr(err, errlen, LANES_EFORMAT, "%s must be an integer", key);
	if (x == -1) {
		*id = -1;
		return 0;
	}
	if (x < 0 || x >= n_tokens)
		return base_seterr(err, errlen, LANES_ERANGE, "%s = %lld is outside the vocabulary (%d tokens)",
				    key, (long long)x, n_tokens);
	*id = (int32_t)x;
	return 0;
}

static int get_flag(const gguf *g, const char *key, bool *flag, char *err, size_t errlen) {
	int rc = gguf_get_bool(g, key, flag);
	if (rc == LANES_EFORMAT) return base_seterr(err, errlen, rc, "%s must be a bool", key);
	return 0;
}

// ---- names llama.cpp recognizes ---------------------------------------------------------

static const char *const eot_names[] = {
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
	"<EOT>", "_<EOT>", "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
	"<end_of_utterance>", NULL};
static const char *const eom_names[] = {"<|eom_id|>", NULL};
static const char *const fim_pre_names[] = {
	"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
	"<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const fim_suf_names[] = {
	"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
	"<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const fim_mid_names[] = {
	"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
	"<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const fim_pad_names[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
static const char *const fim_rep_names[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
static const char *const fim_sep_names[] = {"<|file_sep|>", NULL};
static const char *const eog_names[] = {
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
	"<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
	"<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
	"<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~[", NULL};
// Tokens gpt-oss needs rendered always.
static const char *const always_render_names[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};

static int32_t find_cstr(const tok_vocab *v, const char *s) {
	int64_t e = tok_strtab_find(&v->tokens, s, strlen(s));
	return (int32_t)e;
}

// Special ids read from the file; index order matches special_keys below.
enum { SP_BOS, SP_EOS, SP_EOT, SP_EOM, SP_UNK, SP_SEP, SP_PAD, SP_CLS, SP_FIM_PRE, SP_FIM_SUF, SP_FIM_MID,
       SP_FIM_PAD, SP_FIM_REP, SP_FIM_SEP, SP_COUNT };
// the FIM slots run in enum tok_fim's order, so tok_fim reads them by offset
static_assert(SP_FIM_SEP - SP_FIM_PRE == TOK_FIM_SEP && SP_COUNT - SP_FIM_PRE == TOK_FIM__COUNT, "FIM slots out of order");

static const struct {
	int slot;
	const char *key;
	const char *const *names; // looked up by text when the key is absent (may be NULL)
} special_keys[] = {
	{SP_BOS, KEY("bos_token_id"), NULL},
	{SP_EOS, KEY("eos_token_id"), NULL},
	{SP_EOT, KEY("eot_token_id"), eot_names},
	{SP_EOM, KEY("eom_token_id"), eom_names},
	{SP_UNK, KEY("unknown_token_id"), NULL},
	{SP_SEP, KEY("seperator_token_id"), NULL},
	{SP_PAD, KEY("padding_token_id"), NULL},
	{SP_CLS, KEY("cls_token_id"), NULL},
	{SP_FIM_PRE, KEY("fim_pre_token_id"), fim_pre_names},
	{SP_FIM_SUF, KEY("fim_suf_token_id"), fim_suf_names},
	{SP_FIM_MID, KEY("fim_mid_token_id"), fim_mid_names},
	{SP_FIM_PAD, KEY("fim_pad_token_id"), fim_pad_names},
	{SP_FIM_REP, KEY("fim_rep_token_id"), fim_rep_names},
	{SP_FIM_SEP, KEY("fim_sep_token_id"), fim_sep_names},
	{SP_FIM_PRE, KEY("prefix_token_id"), NULL}, // deprecated spellings
	{SP_FIM_SUF, KEY("suffix_token_id"), NULL},
	{SP_FIM_MID, KEY("middle_token_id"), NULL},
};

// ---- loading --------------------------------------------------------------------------------

static int load_tokens(tok_vocab *v, const gguf *g, char *err, size_t errlen) {
	const gguf_value *arr;
	int rc = get_str_arr(g, KEY("tokens"), true, &arr, err, errlen);
	if (rc) return rc;
	uint64_t n = arr->arr.n;
	if (n == 0 || n > INT32_MAX - 1)
		return base_seterr(err, errlen, LANES_EFORMAT, KEY("tokens") " has %llu entries", (unsigned long long)n);
	v->n_tokens = (int32_t)n;
	uint64_t bytes = 0;
	for (uint64_t i = 0; i < n; i++) {
		gguf_str s = gguf_arr_str(arr, i);
		uint64_t l = s.len ? s.len : 32;
		if (s.len > UINT32_MAX / 2 || !ck_add(bytes, l, &bytes))
			return base_seterr(err, errlen, LANES_EFORMAT, "token %llu is too long", (unsigned long long)i);
	}
	if ((rc = strtab_alloc(&v->tokens, n, bytes))) return base_seterr(err, errlen, rc, "out of memory");
	uint64_t used = 0;
	for (uint64_t i = 0; i < n; i++) {
		gguf_str s = gguf_arr_str(arr, i);
		char empty[32];
		const char *p = s.ptr;
		size_t len = s.len;
		if (!len) { // as llama.cpp: an empty token gets a placeholder name
			len = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%llu]", (unsigned long long)i);
			p = empty;
		}
		bool dup;
		uint32_t e = strtab_add(&v->tokens, p, len, &used, &dup);
		if (dup)
			return base_seterr(err, errlen, LANES_EFORMAT, "duplicate token in vocabulary: '%.*s' has ids %u and %llu",
					    (int)(len > 64 ? 64 : len), p, e, (unsigned long long)i);
	}
	return 0;
}

static int load_scores_types(tok_vocab *v, const gguf *g, char *err, size_t errlen) {
	int32_t n = v->n_tokens;
	v->scores = calloc((size_t)n, sizeof *v->scores);
	v->type = malloc((size_t)n);
	v->attr = calloc((size_t)n, sizeof *v->attr);
	if (!v->scores || !v->type || !v->attr) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	const gguf_value *sc = gguf_get(g, KEY("scores"));
	if (sc) {
		if (sc->type != GGUF_ARRAY || (sc->arr.type != GGUF_F32 && sc->arr.type != GGUF_I32))
			return base_seterr(err, errlen, LANES_EFORMAT, KEY("scores") " must be an array of f32 or i32");
		if (sc->arr.n != (uint64_t)n)
			return base_seterr(err, errlen, LANES_EFORMAT, KEY("scores") " has %llu entries for %d tokens",
					    (unsigned long long)sc->arr.n, n);
		for (int32_t i = 0; i < n; i++) v->scores[i] = (float)gguf_arr_f64(sc, (uint64_t)i);
	}
	const gguf_value *ty = gguf_get(g, KEY("token_type"));
	if (ty) {
		if (ty->type != GGUF_ARRAY || ty->arr.type == GGUF_STRING || ty->arr.type == GGUF_ARRAY ||
		    ty->arr.type == GGUF_F32 || ty->arr.type == GGUF_F64 || ty->arr.type == GGUF_BOOL)
			return base_seterr(err, errlen, LANES_EFORMAT, KEY("token_type") " must be an array of integers");
		if (ty->arr.n != (uint64_t)n)
			return base_seterr(err, errlen, LANES_EFORMAT, KEY("token_type") " has %llu entries for %d tokens",
					    (unsigned long long)ty->arr.n, n);
	}
	static const uint16_t attr_of_type[7] = {
		[TOK_TYPE_UNDEFINED] = 0,           [TOK_TYPE_NORMAL] = TOK_A_NORMAL,
		[TOK_TYPE_UNKNOWN] = TOK_A_UNKNOWN, [TOK_TYPE_CONTROL] = TOK_A_CONTROL,
		[TOK_TYPE_USER_DEFINED] = TOK_A_USER, [TOK_TYPE_UNUSED] = TOK_A_UNUSED,
		[TOK_TYPE_BYTE] = TOK_A_BYTE,
	};
	for (int32_t i = 0; i < n; i++) {
		int64_t t = ty ? gguf_arr_i64(ty, (uint64_t)i) : TOK_TYPE_NORMAL;
		if (t < 0 || t > TOK_TYPE_BYTE)
			return base_seterr(err, errlen, LANES_EFORMAT, "token %d has type %lld (valid: 0..6)", i, (long long)t);
		v->type[i] = (uint8_t)t;
		v->attr[i] = attr_of_type[t];
	}
	return 0;
}

static int load_merges(tok_vocab *v, const gguf *g, char *err, size_t errlen) {
	const gguf_value *arr;
	int rc = get_str_arr(g, KEY("merges"), true, &arr, err, errlen);
	if (rc) return rc;
	uint64_t n = arr->arr.n, bytes = 0;
	if (n > INT32_MAX - 1) return base_seterr(err, errlen, LANES_EFORMAT, KEY("merges") " has too many entries");
	for (uint64_t i = 0; i < n; i++)
		if (!ck_add(bytes, gguf_arr_str(arr, i).len, &bytes) || gguf_arr_str(arr, i).len > UINT32_MAX / 2)
			return base_seterr(err, errlen, LANES_EFORMAT, "merge %llu is too long", (unsigned long long)i);
	if ((rc = strtab_alloc(&v->merges, n, bytes))) return base_seterr(err, errlen, rc, "out of memory");
	v->merge_split = malloc((n ? n : 1) * sizeof *v->merge_split);
	if (!v->merge_split) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	uint64_t used = 0;
	for (uint64_t i = 0; i < n; i++) {
		gguf_str s = gguf_arr_str(arr, i);
		// The pair splits at the first space after the first byte, as llama.cpp reads it.
		const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
		if (!sp)
			return base_seterr(err, errlen, LANES_EFORMAT, "merge %llu ('%.*s') is not two tokens separated by a space",
					    (unsigned long long)i, (int)(s.len > 64 ? 64 : s.len), s.ptr);
		bool dup;
		uint32_t e = strtab_add(&v->merges, s.ptr, s.len, &used, &dup);
		if (!dup) v->merge_split[e] = (uint32_t)(sp - s.ptr); // a repeated merge keeps its first rank
	}
	return 0;
}

static bool is_hex(char c) { return isxdigit((unsigned char)c) != 0; }

// Byte tokens must read <0xNN>; returns the byte or -1.
static int byte_of_text(const char *s, size_t len) {
	if (len != 6 || memcmp(s, "<0x", 3) || s[5] != '>' || !is_hex(s[3]) || !is_hex(s[4])) return -1;
	return (int)strtol((char[]){s[3], s[4], 0}, NULL, 16);
}

static void gpt2_byte_map(tok_vocab *v) {
	for (int i = 0; i < 324; i++) v->cp_byte[i] = -1;
	int n = 0;
	for (int b = 0; b < 256; b++) {
		bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
		v->byte_cp[b] = (uint16_t)(printable ? b : 256 + n++);
		v->cp_byte[v->byte_cp[b]] = (int16_t)b;
	}
}

static void byte_tokens(tok_vocab *v) {
	for (int b = 0; b < 256; b++) {
		char buf[8];
		int32_t id = -1;
		if (v->model == TOK_MODEL_BPE) {
			size_t l = tok_utf8_put(v->byte_cp[b], buf);
			id = (int32_t)tok_strtab_find(&v->tokens, buf, l);
		} else {
			snprintf(buf, sizeof buf, "<0x%02X>", b);
			id = (int32_t)tok_strtab_find(&v->tokens, buf, 6);
			if (id < 0 && b < 0x80) { // llama.cpp falls back to the byte as a one-character token
				buf[0] = (char)b;
				id = (int32_t)tok_strtab_find(&v->tokens, buf, 1);
			}
		}
		v->byte_tok[b] = id;
	}
}

// The bytes each token renders as (TOK_DECODE_SPECIAL decides at decode time whether control
// and unknown tokens show).
static int build_pieces(tok_vocab *v, char *err, size_t errlen) {
	int32_t n = v->n_tokens;
	uint64_t bytes = 0;
	for (int32_t i = 0; i < n; i++) bytes += v->tokens.len[i];
	v->piece_arena = malloc(bytes ? bytes : 1);
	v->piece_off = malloc((size_t)n * sizeof *v->piece_off);
	v->piece_len = malloc((size_t)n * sizeof *v->piece_len);
	if (!v->piece_arena || !v->piece_off || !v->piece_len) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	uint64_t used = 0;
	for (int32_t i = 0; i < n; i++) {
		const char *t = v->tokens.arena + v->tokens.off[i];
		size_t tl = v->tokens.len[i];
		char *o = v->piece_arena + used;
		size_t ol = 0;
		uint16_t a = v->attr[i];
		if (a & (TOK_A_CONTROL | TOK_A_UNKNOWN | TOK_A_USER)) {
			memcpy(o, t, tl);
			ol = tl;
		} else if (a & TOK_A_NORMAL) {
			if (v->model != TOK_MODEL_BPE) {
				for (size_t k = 0; k < tl;) {
					if (k + 3 <= tl && !memcmp(t + k, "\xE2\x96\x81", 3)) { o[ol++] = ' '; k += 3; }
					else o[ol++] = t[k++];
				}
			} else {
				for (size_t k = 0; k < tl;) {
					// Each character of a byte-level token stands for one byte.
					size_t cl = tok_utf8_valid((const uint8_t *)t + k, tl - k);
					uint32_t cp = 0x110000;
					if (cl == 1) cp = (uint8_t)t[k];
					else if (cl == 2) cp = ((uint32_t)(t[k] & 0x1F) << 6) | (t[k + 1] & 0x3F);
					if (cp < 324 && v->cp_byte[cp] >= 0) { o[ol++] = (char)v->cp_byte[cp]; k += cl; }
					else { // not a byte's character: keep it as written
						size_t c = cl ? cl : 1;
						memcpy(o + ol, t + k, c);
						ol += c;
						k += c;
					}
				}
			}
		} else if (a & TOK_A_BYTE) {
			int b = byte_of_text(t, tl);
			if (b < 0)
				return base_seterr(err, errlen, LANES_EFORMAT, "token %d has type BYTE but reads '%.*s', not <0xNN>",
						    i, (int)(tl > 32 ? 32 : tl), t);
			o[ol++] = (char)b;
		}
		v->piece_off[i] = used;
		v->piece_len[i] = (uint32_t)ol;
		used += ol;
	}
	return 0;
}

static int cmp_special(const void *a, const void *b, void *arg) {
	const tok_vocab *v = arg;
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	uint32_t lx = v->tokens.len[x], ly = v->tokens.len[y];
	if (lx != ly) return lx > ly ? -1 : 1;
	return (x > y) - (x < y);
}

// What llama.cpp infers from token texts: EOT/EOM/FIM ids and the EOG set. A token found by
// its text keeps its stored type: only that type decides whether text parsing matches it.
static int infer_specials(tok_vocab *v, int32_t sp[SP_COUNT], const gguf *g, char *err, size_t errlen) {
	for (size_t k = 0; k < sizeof special_keys / sizeof special_keys[0]; k++) {
		int s = special_keys[k].slot;
		if (!special_keys[k].names || sp[s] >= 0) continue;
		for (const char *const *nm = special_keys[k].names; *nm; nm++) {
			int32_t id = find_cstr(v, *nm);
			if (id >= 0) {
				sp[s] = id;
				break;
			}
		}
	}
	// FIM pad/repo/sep, named EOG tokens, then eos/eot/eom.
	uint8_t *eog = calloc((size_t)v->n_tokens, 1);
	if (!eog) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	const int fim_eog[] = {SP_FIM_PAD, SP_FIM_REP, SP_FIM_SEP, SP_EOS, SP_EOT, SP_EOM};
	for (size_t k = 0; k < sizeof fim_eog / sizeof fim_eog[0]; k++)
		if (sp[fim_eog[k]] >= 0) eog[sp[fim_eog[k]]] = 1;
	for (const char *const *nm = eog_names; *nm; nm++) {
		int32_t id = find_cstr(v, *nm);
		if (id >= 0) eog[id] = 1;
	}
	for (const char *const *nm = always_render_names; *nm; nm++) {
		int32_t id = find_cstr(v, *nm);
		if (id >= 0) v->attr[id] = TOK_A_USER;
	}
	// o200k_harmony and solar-open: <|end|> ends a message, not the generation.
	int32_t end = find_cstr(v, "<|end|>"), ret = find_cstr(v, "<|return|>"), call = find_cstr(v, "<|call|>"),
		calls = find_cstr(v, "<|calls|>"), flush = find_cstr(v, "<|flush|>");
	bool has_call = (call >= 0 && eog[call]) || (calls >= 0 && eog[calls]);
	if (end >= 0 && eog[end] && has_call && ((ret >= 0 && eog[ret]) || (flush >= 0 && eog[flush]))) {
		eog[end] = 0;
		v->attr[end] = TOK_A_USER;
	}
	// gemma4: </s> is not an end of generation when <|tool_response> is.
	int32_t tr = find_cstr(v, "<|tool_response>"), s_end = find_cstr(v, "</s>");
	if (tr >= 0 && eog[tr] && s_end >= 0 && eog[s_end]) {
		eog[s_end] = 0;
		v->attr[s_end] = TOK_A_NORMAL;
	}
	size_t ne = 0;
	for (int32_t i = 0; i < v->n_tokens; i++) ne += eog[i];
	v->eog = malloc((ne ? ne : 1) * sizeof *v->eog);
	if (!v->eog) { free(eog); return base_seterr(err, errlen, LANES_ENOMEM, "out of memory"); }
	for (int32_t i = 0; i < v->n_tokens; i++)
		if (eog[i]) {
			v->eog[v->n_eog++] = i;
			v->attr[i] |= TOK_A_EOG;
		}
	free(eog);

	// Special tokens parsed out of text, longest first (ties by id).
	size_t ns = 0;
	for (int32_t i = 0; i < v->n_tokens; i++)
		if (v->attr[i] & (TOK_A_CONTROL | TOK_A_USER | TOK_A_UNKNOWN)) ns++;
	v->special = malloc((ns ? ns : 1) * sizeof *v->special);
	if (!v->special) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	for (int32_t i = 0; i < v->n_tokens; i++)
		if (v->attr[i] & (TOK_A_CONTROL | TOK_A_USER | TOK_A_UNKNOWN)) v->special[v->n_special++] = i;
	qsort_r(v->special, v->n_special, sizeof *v->special, cmp_special, v);
	// Index the special tokens by their first two bytes, so encoding finds which occur in one pass.
	v->sp_start = calloc(65537, sizeof *v->sp_start);
	v->sp_list = malloc((ns ? ns : 1) * sizeof *v->sp_list);
	v->sp_short = malloc((ns ? ns : 1) * sizeof *v->sp_short);
	if (!v->sp_start || !v->sp_list || !v->sp_short) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	for (size_t k = 0; k < v->n_special; k++) {
		const uint8_t *t = (const uint8_t *)v->tokens.arena + v->tokens.off[v->special[k]];
		if (v->tokens.len[v->special[k]] >= 2) v->sp_start[((unsigned)t[0] << 8 | t[1]) + 1]++;
		else v->sp_short[v->n_sp_short++] = (uint32_t)k;
	}
	for (size_t b = 0; b < 65536; b++) v->sp_start[b + 1] += v->sp_start[b];
	uint32_t *fill = calloc(65536, sizeof *fill);
	if (!fill) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	for (size_t k = 0; k < v->n_special; k++) {
		const uint8_t *t = (const uint8_t *)v->tokens.arena + v->tokens.off[v->special[k]];
		if (v->tokens.len[v->special[k]] < 2) continue;
		unsigned key = (unsigned)t[0] << 8 | t[1];
		v->sp_list[v->sp_start[key] + fill[key]++] = (uint32_t)k;
	}
	free(fill);

	// Phi-3: special tokens swallow the whitespace after them, except <unk>, <s>, <|endoftext|>.
	gguf_str name;
	if (!gguf_get_str(g, "general.name", &name)) {
		char lower[256];
		size_t l = name.len < sizeof lower - 1 ? name.len : sizeof lower - 1;
		for (size_t i = 0; i < l; i++) lower[i] = (char)tolower((unsigned char)name.ptr[i]);
		lower[l] = 0;
		if (strstr(lower, "phi-3") || strstr(lower, "phi3")) {
			for (size_t i = 0; i < v->n_special; i++) v->attr[v->special[i]] |= TOK_A_RSTRIP;
			int32_t id = find_cstr(v, "</s>");
			if (id >= 0) v->attr[id] |= TOK_A_RSTRIP;
			const char *keep[] = {"<unk>", "<s>", "<|endoftext|>"};
			for (size_t i = 0; i < 3; i++)
				if ((id = find_cstr(v, keep[i])) >= 0) v->attr[id] &= (uint16_t)~TOK_A_RSTRIP;
		}
	}
	return 0;
}

static char *dup_str(gguf_str s) { return gguf_str_dup(s); }

// True when no token has U+2581 right after another character (see tok_vocab.spm_split).
static bool spm_can_split(const tok_vocab *v) {
	for (int32_t i = 0; i < v->n_tokens; i++) {
		const char *t = v->tokens.arena + v->tokens.off[i];
		size_t l = v->tokens.len[i];
		for (size_t k = 1; k + 3 <= l; k++)
			if (!memcmp(t + k, "\xE2\x96\x81", 3) && (k < 3 || memcmp(t + k - 3, "\xE2\x96\x81", 3))) return false;
	}
	return true;
}

int tok_vocab_load(tok_vocab **out, const gguf *g, char *err, size_t errlen) {
	*out = NULL;
	gguf_str model;
	int rc = gguf_get_str(g, KEY("model"), &model);
	if (rc == LANES_ENOTFOUND) return base_seterr(err, errlen, LANES_ENOTFOUND, "no tokenizer: " KEY("model") " is missing");
	if (rc) return base_seterr(err, errlen, LANES_EFORMAT, KEY("model") " must be a string");
	tok_vocab *v = calloc(1, sizeof *v);
	if (!v) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	if (gguf_str_eq(model, "llama")) v->model = TOK_MODEL_SPM;
	else if (gguf_str_eq(model, "gpt2")) v->model = TOK_MODEL_BPE;
	else if (gguf_str_eq(model, "bert")) v->model = TOK_MODEL_WPM;
	else if (gguf_str_eq(model, "t5")) v->model = TOK_MODEL_UGM;
	else {
		rc = base_seterr(err, errlen, LANES_EUNSUPPORTED, "unsupported tokenizer model '%.*s' (lanes knows llama, gpt2, bert, t5)",
				  (int)(model.len > 64 ? 64 : model.len), model.ptr);
		goto fail;
	}

	// Pre-tokenizer: BPE only; a missing name means llama.cpp's "default".
	gguf_str pre = {"default", 7};
	rc = gguf_get_str(g, KEY("pre"), &pre);
	if (rc == LANES_EFORMAT) { rc = base_seterr(err, errlen, rc, KEY("pre") " must be a string"); goto fail; }
	if (rc == LANES_ENOTFOUND) {
		pre = (gguf_str){"default", 7};
		if (v->model == TOK_MODEL_BPE) LOG_WARN("tok", "%s is missing; using the 'default' pre-tokenizer", KEY("pre"));
	}
	if (v->model != TOK_MODEL_BPE) pre = (gguf_str){"default", 7};
	if (!(v->pre_name = dup_str(pre))) { rc = base_seterr(err, errlen, LANES_ENOMEM, "out of memory"); goto fail; }
	if (v->model == TOK_MODEL_BPE && !(v->pre = tok_pre_find(v->pre_name))) {
		rc = base_seterr(err, errlen, LANES_EUNSUPPORTED, "unsupported pre-tokenizer '%s'", v->pre_name);
		goto fail;
	}

	if ((rc = load_tokens(v, g, err, errlen))) goto fail;
	if ((rc = load_scores_types(v, g, err, errlen))) goto fail;
	if (v->model == TOK_MODEL_BPE && (rc = load_merges(v, g, err, errlen))) goto fail;
	if (v->model == TOK_MODEL_UGM && (rc = tok_ugm_init(v, g, err, errlen))) goto fail;

	// Special ids: llama.cpp's SPM defaults, none for BPE; the file's keys override.
	int32_t sp[SP_COUNT];
	for (int i = 0; i < SP_COUNT; i++) sp[i] = -1;
	if (v->model == TOK_MODEL_SPM) {
		sp[SP_BOS] = v->n_tokens > 1 ? 1 : -1;
		sp[SP_EOS] = v->n_tokens > 2 ? 2 : -1;
		sp[SP_UNK] = 0;
	}
	for (size_t k = 0; k < sizeof special_keys / sizeof special_keys[0]; k++) {
		if (!gguf_get(g, special_keys[k].key)) continue;
		if ((rc = get_id(g, special_keys[k].key, v->n_tokens, &sp[special_keys[k].slot], err, errlen))) goto fail;
	}

	// WordPiece: [CLS] opens a text (as its BOS) and [SEP] ends it
	if (v->model == TOK_MODEL_WPM) {
		if (sp[SP_CLS] >= 0) sp[SP_BOS] = sp[SP_CLS];
		if (sp[SP_UNK] < 0) sp[SP_UNK] = find_cstr(v, "[UNK]");
		if (sp[SP_UNK] < 0) {
			rc = base_seterr(err, errlen, LANES_EFORMAT, "a WordPiece vocabulary needs an unknown token (" KEY("unknown_token_id") " or [UNK])");
			goto fail;
		}
	}
	if (v->model == TOK_MODEL_UGM && sp[SP_UNK] < 0) {
		rc = base_seterr(err, errlen, LANES_EFORMAT, "a Unigram vocabulary needs an unknown token (" KEY("unknown_token_id") ")");
		goto fail;
	}
	// Flags: llama.cpp's defaults per model and pre-tokenizer, then the file's keys.
	v->add_bos = v->model == TOK_MODEL_SPM || v->model == TOK_MODEL_WPM || (v->pre && tok_pre_add_bos(v->pre));
	v->add_eos = v->model == TOK_MODEL_UGM; // T5's defaults: no BOS, an EOS
	v->add_sep = v->model == TOK_MODEL_WPM;
	v->add_space_prefix = v->model == TOK_MODEL_SPM || v->model == TOK_MODEL_UGM;
	v->ignore_merges = v->pre && tok_pre_ignore_merges(v->pre);
	if ((rc = get_flag(g, KEY("add_bos_token"), &v->add_bos, err, errlen)) ||
	    (rc = get_flag(g, KEY("add_eos_token"), &v->add_eos, err, errlen)) ||
	    (rc = get_flag(g, KEY("add_sep_token"), &v->add_sep, err, errlen)) ||
	    (rc = get_flag(g, KEY("add_space_prefix"), &v->add_space_prefix, err, errlen)) ||
	    (rc = get_flag(g, KEY("remove_extra_whitespaces"), &v->ugm_merge_spaces, err, errlen)))
		goto fail;

	gguf_str chat;
	rc = gguf_get_str(g, "tokenizer.chat_template", &chat);
	if (rc == LANES_EFORMAT) { rc = base_seterr(err, errlen, rc, "tokenizer.chat_template must be a string"); goto fail; }
	if (!rc && !(v->chat_template = dup_str(chat))) { rc = base_seterr(err, errlen, LANES_ENOMEM, "out of memory"); goto fail; }

	if ((rc = infer_specials(v, sp, g, err, errlen))) goto fail;
	v->bos = sp[SP_BOS];
	v->eos = sp[SP_EOS];
	v->eot = sp[SP_EOT];
	v->eom = sp[SP_EOM];
	v->unk = sp[SP_UNK];
	v->pad = sp[SP_PAD];
	v->sep = sp[SP_SEP];
	for (int i = 0; i < TOK_FIM__COUNT; i++) v->fim[i] = sp[SP_FIM_PRE + i];
	if (v->add_bos && v->bos < 0) {
		rc = base_seterr(err, errlen, LANES_EFORMAT, "BOS is to be added (%s) but there is no BOS token",
				  gguf_get(g, KEY("add_bos_token")) ? KEY("add_bos_token") : "the default for this tokenizer");
		goto fail;
	}
	if (v->add_sep && v->sep < 0) {
		rc = base_seterr(err, errlen, LANES_EFORMAT, "a [SEP] is to be added but there is no separator token (" KEY("seperator_token_id") ")");
		goto fail;
	}
	if (v->add_eos && v->eos < 0) {
		rc = base_seterr(err, errlen, LANES_EFORMAT, KEY("add_eos_token") " is true but there is no EOS token");
		goto fail;
	}

	if (v->model == TOK_MODEL_BPE) gpt2_byte_map(v);
	else v->spm_split = spm_can_split(v);
	byte_tokens(v);
	if ((rc = build_pieces(v, err, errlen))) goto fail;
	if (v->model == TOK_MODEL_BPE && (rc = tok_pre_compile(v, err, errlen))) goto fail;
	*out = v;
	return 0;
fail:
	tok_vocab_free(v);
	return rc;
}

void tok_vocab_free(tok_vocab *v) {
	if (!v) return;
	strtab_free(&v->tokens);
	strtab_free(&v->merges);
	free(v->merge_split);
	free(v->scores);
	free(v->type);
	free(v->attr);
	free(v->piece_arena);
	free(v->piece_off);
	free(v->piece_len);
	free(v->special);
	free(v->sp_start);
	free(v->sp_list);
	free(v->sp_short);
	free(v->eog);
	free(v->chat_template);
	free(v->pre_name);
	free(v->xcda);
	free(v->ugm_repl);
	free(v->ugm_sorted);
	for (size_t i = 0; i < v->n_re; i++) pcre2_code_free(v->re[i]);
	free(v->re);
	free(v);
}

// ---- accessors ------------------------------------------------------------------------------

static bool id_ok(const tok_vocab *v, int32_t id) { return id >= 0 && id < v->n_tokens; }

int32_t tok_n_tokens(const tok_vocab *v) { return v->n_tokens; }
enum tok_model tok_model(const tok_vocab *v) { return v->model; }
const char *tok_pre_name(const tok_vocab *v) { return v->pre_name; }
int32_t tok_bos(const tok_vocab *v) { return v->bos; }
int32_t tok_sep(const tok_vocab *v) { return v->sep; }
int32_t tok_eos(const tok_vocab *v) { return v->eos; }
int32_t tok_eot(const tok_vocab *v) { return v->eot; }
int32_t tok_eom(const tok_vocab *v) { return v->eom; }
int32_t tok_pad(const tok_vocab *v) { return v->pad; }
int32_t tok_unk(const tok_vocab *v) { return v->unk; }
int32_t tok_fim(const tok_vocab *v, enum tok_fim which) { return (unsigned)which < TOK_FIM__COUNT ? v->fim[which] : -1; }
bool tok_add_bos(const tok_vocab *v) { return v->add_bos; }
bool tok_add_eos(const tok_vocab *v) { return v->add_eos; }
bool tok_add_space_prefix(const tok_vocab *v) { return v->add_space_prefix; }
bool tok_is_eog(const tok_vocab *v, int32_t id) { return id_ok(v, id) && (v->attr[id] & TOK_A_EOG); }
bool tok_is_control(const tok_vocab *v, int32_t id) {
	return id_ok(v, id) && (v->attr[id] & (TOK_A_CONTROL | TOK_A_UNKNOWN));
}
const int32_t *tok_eog_ids(const tok_vocab *v, size_t *n) {
	*n = v->n_eog;
	return v->eog;
}

enum tok_type tok_token_type(const tok_vocab *v, int32_t id) {
	if (!id_ok(v, id)) return TOK_TYPE_UNDEFINED;
	uint16_t a = v->attr[id];
	if (a & TOK_A_CONTROL) return TOK_TYPE_CONTROL;
	if (a & TOK_A_USER) return TOK_TYPE_USER_DEFINED;
	if (a & TOK_A_UNKNOWN) return TOK_TYPE_UNKNOWN;
	if (a & TOK_A_NORMAL) return TOK_TYPE_NORMAL;
	return (enum tok_type)v->type[id];
}

const char *tok_text(const tok_vocab *v, int32_t id, size_t *len) {
	if (!id_ok(v, id)) return NULL;
	if (len) *len = v->tokens.len[id];
	return v->tokens.arena + v->tokens.off[id];
}

size_t tok_max_text_len(const tok_vocab *v) { return v->tokens.max_len; }

int32_t tok_find(const tok_vocab *v, const char *text, size_t len) {
	return (int32_t)tok_strtab_find(&v->tokens, text, len);
}

float tok_score(const tok_vocab *v, int32_t id) { return id_ok(v, id) ? v->scores[id] : 0.0f; }

const char *tok_chat_template(const tok_vocab *v) { return v->chat_template; }

const char *tok_piece(const tok_vocab *v, int32_t id, unsigned flags, size_t *len) {
	if (!id_ok(v, id)) return NULL;
	uint16_t a = v->attr[id];
	bool hidden = (a & (TOK_A_CONTROL | TOK_A_UNKNOWN)) && !(flags & TOK_DECODE_SPECIAL);
	*len = hidden ? 0 : v->piece_len[id];
	return v->piece_arena + v->piece_off[id];
}
