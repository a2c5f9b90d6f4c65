// tokenizer/pretok: BPE pre-tokenizers — the regex lists llama.cpp uses for each
// tokenizer.ggml.pre name, compiled with PCRE2 (UTF, Unicode properties, JIT when available),
// and the splitter that applies them in sequence.
#include "tokenizer/tok_impl.h"

#include <stdlib.h>
#include <string.h>

struct tok_pre_def {
	const char *const *names;  // tokenizer.ggml.pre spellings
	const char *const *regex;  // applied in order; NULL-terminated
	bool ignore_merges;        // a word that is a whole token is emitted as is
	bool add_bos;              // BOS default when the file does not say
};

// GPT-2's pattern without its trailing \s+ (unmatched stretches become words anyway).
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3                                                                                  \
	RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+" \
			"|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                   \
	RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+" \
			"|\\s+(?!\\S)|\\s+"
// llama.cpp folds non-ASCII whitespace to \v before regexes written with literal code point
// ranges, so such ranges never match whitespace; the ranges below leave those code points out.
// CJK and Hangul: 4E00-9FA5, 0800-4E00, AC00-D7FF, minus White_Space.
#define RE_DS_CJK                                                                                  \
	"[\\x{0800}-\\x{167F}\\x{1681}-\\x{1FFF}\\x{200B}-\\x{2027}\\x{202A}-\\x{202E}\\x{2030}-\\x{205E}" \
	"\\x{2060}-\\x{2FFF}\\x{3001}-\\x{9FA5}\\x{AC00}-\\x{D7FF}]+"
// DeepSeek LLM's cased-letter class, as in its tokenizer.json.
#define RE_DS_LETTERS                                                                              \
	"\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"  \
	"\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}" \
	"\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}"       \
	"\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"     \
	"\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"     \
	"\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"               \
	"\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"               \
	"\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}"     \
	"\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}"       \
	"\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"               \
	"\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"               \
	"\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"     \
	"\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"     \
	"\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"                   \
	"\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"               \
	"\\x{1E900}-\\x{1E943}]+"
// ASCII and full-width punctuation, curly quotes, ideographic comma and full stop (not U+3000).
#define RE_DS_PUNCT "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3001}-\\x{3002}]+"
#define RE_PORO " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+"
// Letters as llama.cpp's adapted regex sees them: "upper" = any letter but a-z, "lower" = any
// letter but A-Z (non-ASCII letters count as both).
#define RE_UP "((?=[\\p{L}])([^a-z]))"
#define RE_LO "((?=[\\p{L}])([^A-Z]))"
#define RE_TEKKEN                                                                                   \
	"[^\\r\\n\\p{L}\\p{N}]?" RE_UP "*" RE_LO "+|[^\\r\\n\\p{L}\\p{N}]?" RE_UP "+" RE_LO "*|\\p{N}"       \
	"| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT4O                                                                                    \
	"[^\\r\\n\\p{L}\\p{N}]?" RE_UP "*" RE_LO "+" RE_CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?" RE_UP "+"    \
	RE_LO "*" RE_CONTRACTIONS "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define LIST(...) (const char *const[]){__VA_ARGS__, NULL}

static const tok_pre_def pre_defs[] = {
	{LIST("default"),
	 LIST("[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"), false, false},
	{LIST("gpt-2", "mpt", "phi-2", "olmo", "jais", "gigachat", "trillion", "granite-docling", "exaone4",
	      "a.x-4.0", "mellum"),
	 LIST(RE_GPT2), false, false},
	{LIST("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
	      "jina-v5-nano"),
	 LIST(RE_LLAMA3), true, true},
	{LIST("dbrx", "smaug-bpe"), LIST(RE_LLAMA3), false, false},
	{LIST("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "hunyuan", "megrez", "solar-open",
	      "grok-2"),
	 LIST(RE_QWEN2), false, false},
	{LIST("deepseek-llm"),
	 LIST("[\r\n]", RE_DS_LETTERS, RE_DS_PUNCT, "\\s+$", RE_DS_CJK, "\\p{N}+"), false, false},
	{LIST("deepseek-coder"),
	 LIST("[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_DS_CJK, "\\p{N}"), false, false},
	{LIST("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"),
	 LIST("\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
	      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
	      "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
	 false, false},
	{LIST("falcon"), LIST("[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"), false, false},
	{LIST("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"),
	 LIST("\\p{N}", RE_GPT2), false, false},
	{LIST("poro-chat", "bloom", "gpt3-finnish"), LIST(RE_PORO), false, false},
	{LIST("viking"), LIST(RE_PORO, "\\p{N}"), false, false},
	{LIST("tekken"), LIST(RE_TEKKEN), true, true},
	{LIST("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), LIST(RE_GPT4O), false, false},
	{LIST("seed-coder"),
	 LIST(RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+"
			      "|\\s+(?!\\S)|\\s+"),
	 false, false},
	{LIST("bailingmoe", "bailingmoe2", "llada-moe"),
	 LIST("'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
	      "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"),
	 false, false},
};

const tok_pre_def *tok_pre_find(const char *name) {
	for (size_t i = 0; i < sizeof pre_defs / sizeof pre_defs[0]; i++)
		for (const char *const *n = pre_defs[i].names; *n; n++)
			if (!strcmp(*n, name)) return &pre_defs[i];
	return NULL;
}

bool tok_pre_ignore_merges(const tok_pre_def *p) { return p->ignore_merges; }
bool tok_pre_add_bos(const tok_pre_def *p) { return p->add_bos; }

int tok_pre_compile(tok_vocab *v, char *err, size_t errlen) {
	size_t n = 0;
	while (v->pre->regex[n]) n++;
	v->re = calloc(n, sizeof *v->re);
	if (!v->re) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	v->re_pairs = 1;
	for (size_t i = 0; i < n; i++) {
		int ec;
		PCRE2_SIZE eo;
		pcre2_code *re = pcre2_compile((PCRE2_SPTR)v->pre->regex[i], PCRE2_ZERO_TERMINATED,
					       PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &ec, &eo, NULL);
		if (!re) {
			PCRE2_UCHAR msg[256];
			pcre2_get_error_message(ec, msg, sizeof msg);
			return base_seterr(err, errlen, LANES_EUNSUPPORTED, "pre-tokenizer '%s' regex %zu: %s at offset %zu",
					    v->pre_name, i, (const char *)msg, (size_t)eo);
		}
		v->re[v->n_re++] = re;
		pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); // without JIT the interpreter runs it
		uint32_t caps = 0;
		pcre2_pattern_info(re, PCRE2_INFO_CAPTURECOUNT, &caps);
		if (caps + 1 > v->re_pairs) v->re_pairs = caps + 1;
	}
	return 0;
}

typedef struct {
	tok_span *v;
	size_t n, cap;
} spans;

static int spans_push(spans *s, size_t a, size_t b) {
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		tok_span *nv = realloc(s->v, cap * sizeof *nv);
		if (!nv) return LANES_ENOMEM;
		s->v = nv;
		s->cap = cap;
	}
	s->v[s->n++] = (tok_span){a, b};
	return 0;
}

// Splits text[a..b) with re: every match is a piece, and so is every stretch between matches.
// Each piece is matched alone, as llama.cpp does (lookarounds and $ see only the piece).
static int split_one(const pcre2_code *re, pcre2_match_data *md, const char *text, size_t a, size_t b,
		     spans *out, char *err, size_t errlen) {
	PCRE2_SPTR subj = (PCRE2_SPTR)(text + a);
	size_t len = b - a, pos = 0, prev = 0;
	while (pos < len) {
		int rc = pcre2_match(re, subj, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
		if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
			rc = pcre2_match(re, subj, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
		if (rc == PCRE2_ERROR_NOMATCH) break;
		if (rc < 0) {
			PCRE2_UCHAR msg[256];
			pcre2_get_error_message(rc, msg, sizeof msg);
			return base_seterr(err, errlen, rc == PCRE2_ERROR_NOMEMORY ? LANES_ENOMEM : LANES_ELIMIT,
					    "pre-tokenizer regex failed: %s", (const char *)msg);
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
		size_t s = ov[0], e = ov[1];
		if (e == s) { // an empty match splits nothing: look again one character on
			pos = s + tok_utf8_len((uint8_t)subj[s]);
			continue;
		}
		if (s > prev && spans_push(out, a + prev, a + s)) return LANES_ENOMEM;
		if (spans_push(out, a + s, a + e)) return LANES_ENOMEM;
		prev = pos = e;
	}
	if (prev < len && spans_push(out, a + prev, b)) return LANES_ENOMEM;
	return 0;
}

int tok_pre_split(const tok_vocab *v, const char *text, size_t len, tok_span **out, size_t *n_out,
		  char *err, size_t errlen) {
	*out = NULL;
	*n_out = 0;
	if (!len) return 0;
	spans cur = {0}, next = {0};
	pcre2_match_data *md = pcre2_match_data_create(v->re_pairs, NULL);
	int rc = md ? spans_push(&cur, 0, len) : LANES_ENOMEM;
	for (size_t r = 0; !rc && r < v->n_re; r++) {
		next.n = 0;
		for (size_t i = 0; !rc && i < cur.n; i++)
			rc = split_one(v->re[r], md, text, cur.v[i].start, cur.v[i].end, &next, err, errlen);
		spans t = cur;
		cur = next;
		next = t;
	}
	pcre2_match_data_free(md);
	free(next.v);
	if (rc) {
		free(cur.v);
		if (rc == LANES_ENOMEM) base_seterr(err, errlen, rc, "out of memory");
		return rc;
	}
	*out = cur.v;
	*n_out = cur.n;
	return 0;
}

int tok_pretokenize(const tok_vocab *v, const char *text, size_t len, tok_span **spans_out, size_t *n,
		    char *err, size_t errlen) {
	*spans_out = NULL;
	*n = 0;
	if (v->model != TOK_MODEL_BPE)
		return base_seterr(err, errlen, LANES_EUNSUPPORTED, "pre-tokenization applies to BPE vocabularies only");
	for (size_t i = 0; i < len;) {
		size_t l = tok_utf8_valid((const uint8_t *)text + i, len - i);
		if (!l) return base_seterr(err, errlen, LANES_EFORMAT, "invalid UTF-8 at byte %zu", i);
		i += l;
	}
	return tok_pre_split(v, text, len, spans_out, n, err, errlen);
}
