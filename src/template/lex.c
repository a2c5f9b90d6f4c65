// template/lex: the lexer — text, {{ }} and {% %} tags into tokens, with trim_blocks and
// lstrip_blocks exactly as Jinja applies them, raw blocks and Python string escapes.
#include "template/template_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- lexer -------------------------------------------------------------------------------------

static const struct {
	const char *s;
	uint8_t op;
} op_table[] = {
	{"//", OP_FLOORDIV}, {"**", OP_POW}, {"==", OP_EQ}, {"!=", OP_NE}, {">=", OP_GE}, {"<=", OP_LE},
	{"+", OP_ADD}, {"-", OP_SUB}, {"*", OP_MUL}, {"/", OP_DIV}, {"%", OP_MOD}, {"~", OP_TILDE},
	{"[", OP_LBRACKET}, {"]", OP_RBRACKET}, {"(", OP_LPAREN}, {")", OP_RPAREN}, {"{", OP_LBRACE},
	{"}", OP_RBRACE}, {">", OP_GT}, {"<", OP_LT}, {"=", OP_ASSIGN}, {".", OP_DOT}, {":", OP_COLON},
	{"|", OP_PIPE}, {",", OP_COMMA}, {";", OP_SEMI},
};

static token *lex_push(lexer *L, uint8_t t) {
	if (L->n == L->cap) {
		size_t cap = L->cap ? L->cap * 2 : 256;
		token *nv = tmpl__alloc_arr(L->r, cap, sizeof(token));
		if (L->n) memcpy(nv, L->v, L->n * sizeof(token));
		L->v = nv;
		L->cap = cap;
	}
	token *k = &L->v[L->n++];
	memset(k, 0, sizeof *k);
	k->t = t;
	k->line = L->line;
	return k;
}

static int count_nl(const char *p, size_t n) {
	int k = 0;
	for (size_t i = 0; i < n; i++) k += p[i] == '\n';
	return k;
}

static _Noreturn void lex_fail(lexer *L, const char *msg) {
	tmpl__fail(L->r, LANES_EFORMAT, "line %d: %s", L->line, msg);
}

// Applies `-` (strip all trailing whitespace) or lstrip_blocks to text before a tag.
static size_t strip_before(const char *text, size_t n, char sign, bool lstrip_ok, bool line_starting) {
	if (sign == '-') {
		size_t keep = 0, i = 0;
		while (i < n) {
			int w = tmpl__ws_at(text + i, text + n);
			if (w) i += (size_t)w;
			else {
				int l;
				tmpl__utf8_dec(text + i, text + n, &l);
				i += (size_t)l;
				keep = i;
			}
		}
		return keep;
	}
	if (sign == '+' || !lstrip_ok) return n;
	size_t lpos = 0;
	for (size_t i = n; i > 0; i--)
		if (text[i - 1] == '\n') { lpos = i; break; }
	if (lpos == 0 && !line_starting) return n;
	if (lpos == n) return n;
	for (size_t i = lpos; i < n;) {
		int w = tmpl__ws_at(text + i, text + n);
		if (!w) return n;
		i += (size_t)w;
	}
	return lpos;
}

static void emit_text(lexer *L, const char *p, size_t n) {
	if (!n) return;
	token *k = lex_push(L, T_TEXT);
	k->s = (str_t){p, n};
}

static size_t skip_ws(const char *s, size_t i, size_t len) {
	for (int w; (w = tmpl__ws_at(s + i, s + len)); ) i += (size_t)w;
	return i;
}

// Matches `raw` or `endraw` after `{%`/`{%-`/`{%+` at i; returns the end of the closing `%}`
// (with its stripping) or 0. *sign gets the opener's sign, *trimmed whether `-%}` was used.
static size_t match_rawtag(const char *s, size_t i, size_t len, const char *word, bool trim_nl, char *sign) {
	if (i + 2 > len || s[i] != '{' || s[i + 1] != '%') return 0;
	size_t j = i + 2;
	*sign = 0;
	if (j < len && (s[j] == '-' || s[j] == '+')) *sign = s[j++];
	j = skip_ws(s, j, len);
	size_t wl = strlen(word);
	if (j + wl > len || memcmp(s + j, word, wl)) return 0;
	j = skip_ws(s, j + wl, len);
	if (j + 3 <= len && s[j] == '+' && s[j + 1] == '%' && s[j + 2] == '}' && trim_nl) return j + 3;
	if (j + 3 <= len && s[j] == '-' && s[j + 1] == '%' && s[j + 2] == '}') return skip_ws(s, j + 3, len);
	if (j + 2 <= len && s[j] == '%' && s[j + 1] == '}') {
		j += 2;
		if (trim_nl && j < len && s[j] == '\n') j++;
		return j;
	}
	return 0;
}

static char unhex(char c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }
static bool ishex(char c) { return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'f'); }

// Decodes a string literal body as Python's unicode-escape codec does.
static str_t unescape(lexer *L, const char *p, size_t n) {
	char *o = tmpl__alloc(L->r, n + 1);
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		if (p[i] != '\\' || i + 1 >= n) { o[k++] = p[i++]; continue; }
		char c = p[i + 1];
		i += 2;
		switch (c) {
		case '\n': break;
		case '\\': o[k++] = '\\'; break;
		case '\'': o[k++] = '\''; break;
		case '"': o[k++] = '"'; break;
		case 'a': o[k++] = 7; break;
		case 'b': o[k++] = 8; break;
		case 'f': o[k++] = 12; break;
		case 'n': o[k++] = '\n'; break;
		case 'r': o[k++] = '\r'; break;
		case 't': o[k++] = '\t'; break;
		case 'v': o[k++] = 11; break;
		case 'x': case 'u': case 'U': {
			int nd = c == 'x' ? 2 : c == 'u' ? 4 : 8;
			if (i + (size_t)nd > n) lex_fail(L, "truncated escape in string");
			uint32_t v = 0;
			for (int d = 0; d < nd; d++) {
				if (!ishex(p[i + (size_t)d])) lex_fail(L, "truncated escape in string");
				v = v * 16 + (uint32_t)unhex(p[i + (size_t)d]);
			}
			i += (size_t)nd;
			if (v > 0x10ffff) lex_fail(L, "illegal Unicode character in string");
			k += (size_t)tmpl__utf8_enc(v, o + k);
			break;
		}
		default:
			if (c >= '0' && c <= '7') {
				uint32_t v = (uint32_t)(c - '0');
				for (int d = 0; d < 2 && i < n && p[i] >= '0' && p[i] <= '7'; d++) v = v * 8 + (uint32_t)(p[i++] - '0');
				k += (size_t)tmpl__utf8_enc(v, o + k);
			} else {
				o[k++] = '\\';
				o[k++] = c;
			}
		}
	}
	return (str_t){o, k};
}

// Lexes the inside of a {{ }} or {% %} tag from i; returns the position after its end.
static size_t lex_tag(lexer *L, size_t i, bool block, bool *line_starting) {
	const char *s = L->src;
	size_t len = L->len;
	int balance = 0;
	for (;;) {
		if (i >= len) lex_fail(L, block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
		char end = block ? '%' : '}';
		if (balance == 0) {
			if (block && s[i] == '+' && i + 2 < len && s[i + 1] == '%' && s[i + 2] == '}') {
				lex_push(L, T_BEND);
				*line_starting = false;
				return i + 3;
			}
			if (s[i] == '-' && i + 2 < len && s[i + 1] == end && s[i + 2] == '}') {
				token *k = lex_push(L, block ? T_BEND : T_VEND);
				(void)k;
				size_t j = skip_ws(s, i + 3, len);
				*line_starting = j > i + 3 ? s[j - 1] == '\n' : false;
				L->line += count_nl(s + i, j - i);
				return j;
			}
			if (s[i] == end && i + 1 < len && s[i + 1] == '}') {
				lex_push(L, block ? T_BEND : T_VEND);
				size_t j = i + 2;
				*line_starting = false;
				if (block && j < len && s[j] == '\n') {
					j++;
					L->line++;
					*line_starting = true;
				}
				return j;
			}
		}
		int w = tmpl__ws_at(s + i, s + len);
		if (w) {
			if (s[i] == '\n') L->line++;
			i += (size_t)w;
			continue;
		}
		char c = s[i];
		if (c >= '0' && c <= '9') {
			size_t j = i;
			while (j < len && ((s[j] >= '0' && s[j] <= '9') || s[j] == '_')) j++;
			bool isf = false;
			if (j + 1 < len && s[j] == '.' && s[j + 1] >= '0' && s[j + 1] <= '9') {
				isf = true;
				j++;
				while (j < len && ((s[j] >= '0' && s[j] <= '9') || s[j] == '_')) j++;
			}
			if (j < len && (s[j] | 32) == 'e') {
				size_t e = j + 1;
				if (e < len && (s[e] == '+' || s[e] == '-')) e++;
				if (e < len && s[e] >= '0' && s[e] <= '9') {
					isf = true;
					j = e;
					while (j < len && ((s[j] >= '0' && s[j] <= '9') || s[j] == '_')) j++;
				}
			}
			char tmp[64];
			size_t k = 0;
			for (size_t q = i; q < j && k < sizeof tmp - 1; q++)
				if (s[q] != '_') tmp[k++] = s[q];
			tmp[k] = 0;
			if (isf) {
				token *t = lex_push(L, T_FLOAT);
				t->f = strtod(tmp, NULL);
			} else {
				token *t = lex_push(L, T_INT);
				int base = 10;
				const char *num = tmp;
				if (tmp[0] == '0' && (tmp[1] | 32) == 'x') base = 16, num = tmp + 2, j = i + 2;
				else if (tmp[0] == '0' && (tmp[1] | 32) == 'o') base = 8, num = tmp + 2, j = i + 2;
				else if (tmp[0] == '0' && (tmp[1] | 32) == 'b') base = 2, num = tmp + 2, j = i + 2;
				if (base != 10) {
					while (j < len && (ishex(s[j]) || s[j] == '_')) j++;
					k = 0;
					for (size_t q = i + 2; q < j && k < sizeof tmp - 1; q++)
						if (s[q] != '_') tmp[k++] = s[q];
					tmp[k] = 0;
					num = tmp;
				}
				char *ep;
				errno = 0;
				unsigned long long v = strtoull(num, &ep, base);
				if (errno || *ep || v > INT64_MAX) lex_fail(L, "integer literal out of range");
				t->i = (int64_t)v;
			}
			i = j;
			continue;
		}
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
			size_t j = i + 1;
			while (j < len && ((s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z') ||
					   (s[j] >= '0' && s[j] <= '9') || s[j] == '_'))
				j++;
			token *t = lex_push(L, T_NAME);
			t->s = (str_t){s + i, j - i};
			i = j;
			continue;
		}
		if (c == '\'' || c == '"') {
			size_t j = i + 1;
			while (j < len && s[j] != c) j += s[j] == '\\' ? 2 : 1;
			if (j >= len) lex_fail(L, "unterminated string");
			token *t = lex_push(L, T_STR);
			t->s = unescape(L, s + i + 1, j - i - 1);
			L->line += count_nl(s + i, j - i);
			i = j + 1;
			continue;
		}
		size_t k;
		for (k = 0; k < sizeof op_table / sizeof op_table[0]; k++) {
			size_t ol = strlen(op_table[k].s);
			if (i + ol <= len && !memcmp(s + i, op_table[k].s, ol)) break;
		}
		if (k == sizeof op_table / sizeof op_table[0]) lex_fail(L, "unexpected character in tag");
		uint8_t op = op_table[k].op;
		if (op == OP_LBRACE || op == OP_LBRACKET || op == OP_LPAREN) balance++;
		if (op == OP_RBRACE || op == OP_RBRACKET || op == OP_RPAREN) {
			if (!balance) lex_fail(L, "unexpected closing bracket");
			balance--;
		}
		token *t = lex_push(L, T_OP);
		t->op = op;
		i += strlen(op_table[k].s);
	}
}

void tmpl__lex(lexer *L) {
	const char *s = L->src;
	size_t len = L->len, pos = 0;
	bool line_starting = true;
	L->line = 1;
	while (pos < len) {
		size_t i = pos;
		const char *hit = NULL;
		while (i + 1 < len) {
			hit = memchr(s + i, '{', len - i - 1);
			if (!hit) break;
			i = (size_t)(hit - s);
			if (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#') break;
			i++;
			hit = NULL;
		}
		if (!hit) {
			emit_text(L, s + pos, len - pos);
			break;
		}
		char kind = s[i + 1];
		char sign = i + 2 < len && (s[i + 2] == '-' || s[i + 2] == '+') ? s[i + 2] : 0;
		char rs;
		size_t raw_end = kind == '%' ? match_rawtag(s, i, len, "raw", false, &rs) : 0;
		size_t keep = strip_before(s + pos, i - pos, sign, kind != '{', line_starting);
		emit_text(L, s + pos, keep);
		L->line += count_nl(s + pos, i - pos);
		if (raw_end) {
			bool ls = s[raw_end - 1] == '\n';
			L->line += count_nl(s + i, raw_end - i);
			size_t j = raw_end, close = 0;
			char sign2 = 0;
			for (; j + 1 < len; j++)
				if (s[j] == '{' && s[j + 1] == '%' && (close = match_rawtag(s, j, len, "endraw", true, &sign2))) break;
			if (!close) lex_fail(L, "missing end of raw directive");
			size_t k = strip_before(s + raw_end, j - raw_end, sign2, true, ls);
			emit_text(L, s + raw_end, k);
			L->line += count_nl(s + raw_end, close - raw_end);
			line_starting = s[close - 1] == '\n';
			pos = close;
			continue;
		}
		size_t j = i + 2 + (sign ? 1 : 0);
		if (kind == '#') {
			size_t e = 0;
			for (; j + 1 < len; j++) {
				if ((s[j] == '+' || s[j] == '-') && j + 2 < len && s[j + 1] == '#' && s[j + 2] == '}') {
					e = s[j] == '-' ? skip_ws(s, j + 3, len) : j + 3;
					break;
				}
				if (s[j] == '#' && s[j + 1] == '}') {
					e = j + 2;
					if (e < len && s[e] == '\n') e++;
					break;
				}
			}
			if (!e) lex_fail(L, "missing end of comment tag");
			L->line += count_nl(s + i, e - i);
			line_starting = s[e - 1] == '\n';
			pos = e;
			continue;
		}
		lex_push(L, kind == '{' ? T_VBEG : T_BBEG);
		pos = lex_tag(L, j, kind == '%', &line_starting);
	}
	lex_push(L, T_EOF);
}
