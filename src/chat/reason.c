// chat, reason: one table row per reasoning family — how its template is recognized, the
// markers that set its thinking apart, what its template writes around them — and the scan
// that splits a reply's text into thinking and answer as it streams.
#include "chat/chat.h"
#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Order matters: the first row one of whose markers appears wins (Command R7B's template
// mentions no <think>, but a template that names several families is read as the first).
static const reason_format formats[] = {
	// gpt-oss: the analysis message is the thinking; what follows it is the answer — the final
	// channel's text, or a commentary message to a function that the harmony tool family reads —
	// whose channel the model picks itself after <|end|>, even where the thinking was cut
	{.name = "harmony", .detect = {"<|channel|>"}, .open = "<|channel|>analysis<|message|>", .close = "<|end|>",
	 .after_open = "", .after = "",
	 .answer_head = {"<|start|>assistant", "<|channel|>final<|message|>", "<|channel|>commentary<|message|>"}},
	{.name = "command-r7b", .detect = {"<|START_THINKING|>"}, .open = "<|START_THINKING|>", .close = "<|END_THINKING|>",
	 .after_open = "", .after = ""},
	// Qwen3, QwQ, DeepSeek-R1 and its distills (whose templates open the section in the prompt)
	{.name = "think", .detect = {"<think>", "</think>"}, .open = "<think>", .close = "</think>", .after_open = "\n",
	 .after = "\n\n", .off_var = "enable_thinking"},
};
#define N_FORMATS (sizeof formats / sizeof formats[0])

const reason_format *reason_format_of(const char *src) {
	for (size_t i = 0; src && i < N_FORMATS; i++)
		for (int k = 0; k < 2 && formats[i].detect[k]; k++)
			if (strstr(src, formats[i].detect[k])) return &formats[i];
	return NULL;
}

int reason_format_named(const char *name, const reason_format **out) {
	*out = NULL;
	if (!strcmp(name, "none")) return 0;
	for (size_t i = 0; i < N_FORMATS; i++)
		if (!strcmp(name, formats[i].name)) return *out = &formats[i], 0;
	return -1;
}

const char *reason_format_name(const reason_format *f) { return f ? f->name : "none"; }

const char *reason_format_names(void) { return "think|command-r7b|harmony"; }

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

bool reason_opened(const reason_format *f, const char *text, size_t len) {
	if (!f) return false;
	while (len && is_space(text[len - 1])) len--;
	const size_t n = strlen(f->open);
	return len >= n && !memcmp(text + len - n, f->open, n);
}

int reason_end_ids(const reason_format *f, const tok_vocab *v, int32_t *ids, int32_t max, int32_t *n, char *err, size_t errlen) {
	*n = 0;
	char text[2 * REASON_MARKER_MAX + 8];
	snprintf(text, sizeof text, "%s%s", f->close, f->after);
	int32_t *got = NULL;
	size_t k = 0;
	int rc = tok_encode(v, text, strlen(text), false, true, &got, &k, err, errlen);
	if (rc) return rc;
	if (k < 1 || k > (size_t)max) {
		free(got);
		return base_seterr(err, errlen, LANES_EFORMAT, "the reasoning family %s's end marker encodes to %zu tokens", f->name, k);
	}
	memcpy(ids, got, k * sizeof *got);
	*n = (int32_t)k;
	free(got);
	return 0;
}

// Appends a, b, c and d to the text; false: out of memory.
static bool append(char **text, size_t *len, const char *a, const char *b, const char *c, const char *d) {
	const size_t n = strlen(a) + strlen(b) + strlen(c) + strlen(d);
	char *t = realloc(*text, *len + n + 1);
	if (!t) return false;
	snprintf(t + *len, n + 1, "%s%s%s%s", a, b, c, d);
	*text = t;
	*len += n;
	return true;
}

int reason_prompt_end(const reason_format *f, bool off, bool switched, bool grammar, char **text, size_t *len, bool *inside) {
	*inside = reason_opened(f, *text, *len);
	bool ok = true;
	if (off) {
		// an empty section, closed: the reply is the answer
		if (*inside) ok = append(text, len, f->close, f->after, "", "");
		else if (!switched) ok = append(text, len, f->open, f->after_open, f->close, f->after);
		*inside = false;
	} else if (!*inside && grammar) {
		// the constraint starts after the section, which only one the prompt opened tells
		ok = append(text, len, f->open, f->after_open, "", "");
		*inside = true;
	}
	return ok ? 0 : LANES_ENOMEM;
}

void reason_scan_init(reason_scan *s, const reason_format *f, bool inside) {
	memset(s, 0, sizeof *s);
	s->f = f;
	if (!f) {
		s->phase = REASON_AFTER;
		s->answer_known = true;
	} else if (inside) {
		s->phase = REASON_IN;
		s->thought = true;
	}
}

// Bytes at the end of text[0, n) that could begin marker m.
static size_t marker_tail(const char *t, size_t n, const char *m) {
	const size_t l = strlen(m);
	for (size_t k = l - 1 < n ? l - 1 : n; k > 0; k--)
		if (!memcmp(t + n - k, m, k)) return k;
	return 0;
}

// The thinking grows to end (exclusive), less its trailing whitespace; its leading whitespace
// is skipped while nothing of it has been reported.
static void think_to(reason_scan *s, const char *t, size_t end) {
	if (!s->think_len)
		while (s->think_off < end && is_space(t[s->think_off])) s->think_off++;
	size_t e = end;
	while (e > s->think_off && is_space(t[e - 1])) e--;
	if (e > s->think_off && e - s->think_off > s->think_len) s->think_len = e - s->think_off;
}

// After the close marker: the answer begins at the first byte that is neither whitespace nor one
// of the family's heads (each skipped where it stands next; one cut short is waited for, and
// dropped at the end: it is syntax, never text).
static void answer_from(reason_scan *s, const char *t, size_t len, bool end) {
	for (;;) {
		while (s->pos < len && is_space(t[s->pos])) s->pos++;
		const char *h = s->head < REASON_HEADS ? s->f->answer_head[s->head] : NULL;
		if (!h) break;
		const size_t n = strlen(h), have = len - s->pos;
		if (have >= n && !memcmp(t + s->pos, h, n)) s->pos += n;
		else if (have < n && have && !memcmp(t + s->pos, h, have)) {
			if (!end) return;
			s->pos = len;
		} else if (!have && !end) return;
		s->head++;
	}
	if (s->pos < len || end) s->answer_known = true, s->answer_off = s->pos;
	s->pos = len;
}

void reason_scan_feed(reason_scan *s, const char *text, size_t len, bool end) {
	if (s->phase == REASON_BEFORE) {
		// leading whitespace, then the open marker or the answer
		size_t i = 0;
		while (i < len && is_space(text[i])) i++;
		const size_t n = strlen(s->f->open), have = len - i;
		if (have >= n && !memcmp(text + i, s->f->open, n)) {
			s->phase = REASON_IN;
			s->thought = true;
			s->pos = s->think_start = s->think_off = i + n;
		} else if ((have < n && !memcmp(text + i, s->f->open, have)) && !end) {
			s->pos = len;
			return;
		} else if (s->f->answer_head[0]) {
			// no thinking: the answer still begins after the family's heads
			s->phase = REASON_AFTER;
			s->pos = i;
		} else {
			s->phase = REASON_AFTER;
			s->answer_known = true;
			s->answer_off = 0;
			s->pos = len;
			return;
		}
	}
	if (s->phase == REASON_IN) {
		const char *c = s->f->close;
		const size_t cl = strlen(c);
		// the search starts where a close marker could still begin
		const size_t from = s->pos > s->think_start + cl ? s->pos - cl : s->think_start;
		const char *p = len > from ? memmem(text + from, len - from, c, cl) : NULL;
		if (p) {
			think_to(s, text, (size_t)(p - text));
			s->phase = REASON_AFTER;
			s->pos = (size_t)(p - text) + cl;
		} else {
			think_to(s, text, end ? len : len - marker_tail(text, len, c));
			s->pos = len;
			return;
		}
	}
	if (!s->answer_known) answer_from(s, text, len, end);
	else s->pos = len;
}

size_t reason_scan_answer(const reason_scan *s, size_t len) { return s->answer_known && len > s->answer_off ? len - s->answer_off : 0; }
