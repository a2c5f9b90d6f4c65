// template: the module's interface — compile (lex, parse), render (the JSON context into the
// global scope, evaluate) under the limits, the chat shortcut and the ChatML fallback.
#include "template/template_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SRC (1u << 20)      // template source bytes
#define COMPILE_MEMORY (64u << 20)

// ---- API -----------------------------------------------------------------------------------------

struct tmpl {
	arena a;
	node *root;
	tmpl_limits lim;
};

void tmpl_default_limits(tmpl_limits *l) {
	l->max_steps = 10 * 1000 * 1000;
	l->max_output = 16 << 20;
	l->max_memory = 128 << 20;
	l->max_calls = 100;
}

int tmpl_compile(tmpl **out, const char *src, size_t len, char *err, size_t errlen) {
	*out = NULL;
	if (!src && len) return base_seterr(err, errlen, LANES_EINVAL, "template source is NULL");
	if (len > MAX_SRC) return base_seterr(err, errlen, LANES_ELIMIT, "template is larger than %u bytes", MAX_SRC);
	tmpl *t = calloc(1, sizeof *t);
	R *r = calloc(1, sizeof *r);
	if (!t || !r) {
		free(t);
		free(r);
		return base_seterr(err, errlen, LANES_ENOMEM, "out of memory compiling template");
	}
	r->err = err;
	r->errlen = errlen;
	r->a.limit = COMPILE_MEMORY;
	r->max_steps = INT64_MAX;
	r->max_output = INT64_MAX / 4;
	if (setjmp(r->jb)) {
		int code = r->code;
		tmpl__arena_free(&r->a);
		free(r);
		free(t);
		return code;
	}
	// newlines normalize to \n and one trailing newline is dropped, as Jinja's lexer does
	char *s = tmpl__alloc(r, len + 1);
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r') {
			s[n++] = '\n';
			if (i + 1 < len && src[i + 1] == '\n') i++;
		} else
			s[n++] = src[i];
	}
	if (n && s[n - 1] == '\n') n--;
	s[n] = 0;
	lexer L = {.r = r, .src = s, .len = n};
	tmpl__lex(&L);
	r->tok = L.v;
	r->ntok = L.n;
	r->pos = 0;
	int which;
	t->root = tmpl__parse_body(r, NULL, 0, &which);
	t->a = r->a;
	tmpl_default_limits(&t->lim);
	free(r);
	*out = t;
	return LANES_OK;
}

void tmpl_free(tmpl *t) {
	if (!t) return;
	tmpl__arena_free(&t->a);
	free(t);
}

void tmpl_set_limits(tmpl *t, const tmpl_limits *l) { t->lim = *l; }

static bool parse_date(const char *s, struct tm *tm) {
	int y, m, d;
	char tail;
	if (sscanf(s, "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3) return false;
	if (y < 1 || y > 9999 || m < 1 || m > 12 || d < 1 || d > 31) return false;
	memset(tm, 0, sizeof *tm);
	tm->tm_year = y - 1900;
	tm->tm_mon = m - 1;
	tm->tm_mday = d;
	time_t tt = timegm(tm);
	struct tm back;
	if (!gmtime_r(&tt, &back) || back.tm_mday != d) return false;
	*tm = back;
	return true;
}

int tmpl_render(const tmpl *t, const json_t *context, const char *date_ymd, char **out, size_t *out_len,
		char *err, size_t errlen) {
	*out = NULL;
	if (out_len) *out_len = 0;
	if (!t) return base_seterr(err, errlen, LANES_EINVAL, "no template");
	if (context && !json_is_object(context)) return base_seterr(err, errlen, LANES_EINVAL, "template context must be a JSON object");
	struct tm date;
	if (date_ymd) {
		if (!parse_date(date_ymd, &date)) return base_seterr(err, errlen, LANES_EINVAL, "bad date '%s' (want YYYY-MM-DD)", date_ymd);
	} else {
		time_t now = time(NULL);
		localtime_r(&now, &date);
	}
	R *r = calloc(1, sizeof *r);
	if (!r) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory rendering template");
	r->err = err;
	r->errlen = errlen;
	r->a.limit = (size_t)t->lim.max_memory;
	r->max_steps = t->lim.max_steps;
	r->max_output = t->lim.max_output;
	r->max_calls = t->lim.max_calls;
	r->date = date;
	if (setjmp(r->jb)) {
		int code = r->code;
		tmpl__arena_free(&r->a);
		free(r);
		return code;
	}
	scope *globals = tmpl__scope_new(r, NULL);
	if (context) {
		const char *k;
		json_t *v;
		json_object_foreach((json_t *)context, k, v) tmpl__scope_set(r, globals, (str_t){k, strlen(k)}, tmpl__from_json(r, v, 0));
	}
	scope *top = tmpl__scope_new(r, globals);
	buf b = {0};
	tmpl__exec(r, t->root, top, &b);
	char *res = malloc(b.n + 1);
	if (!res) tmpl__fail(r, LANES_ENOMEM, "out of memory rendering template");
	if (b.n) memcpy(res, b.p, b.n);
	res[b.n] = 0;
	*out = res;
	if (out_len) *out_len = b.n;
	tmpl__arena_free(&r->a);
	free(r);
	return LANES_OK;
}

int tmpl_render_chat(const char *src, const json_t *messages, const char *bos, const char *eos,
		     bool add_generation_prompt, const char *date_ymd, char **out, size_t *out_len, char *err,
		     size_t errlen) {
	*out = NULL;
	tmpl *t;
	int rc = tmpl_compile(&t, src, src ? strlen(src) : 0, err, errlen);
	if (rc) return rc;
	json_t *ctx = json_object();
	if (!ctx) {
		tmpl_free(t);
		return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	}
	json_object_set_new(ctx, "messages", messages ? json_incref((json_t *)messages) : json_array());
	json_object_set_new(ctx, "bos_token", json_string(bos ? bos : ""));
	json_object_set_new(ctx, "eos_token", json_string(eos ? eos : ""));
	json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_generation_prompt));
	rc = tmpl_render(t, ctx, date_ymd, out, out_len, err, errlen);
	json_decref(ctx);
	tmpl_free(t);
	return rc;
}

const char *tmpl_plain(void) {
	// a space between two turns only where neither side has one and the next does not open with punctuation
	return "{%- set ns = namespace(prev='') -%}"
	       "{%- for message in messages -%}"
	       "{%- set text = message['content'] if message['content'] is string else '' -%}"
	       "{%- if ns.prev and text and ns.prev[-1:] not in ' \n\t' and text[:1] not in ' \n\t.,;:!?' %} {% endif -%}"
	       "{{- text -}}"
	       "{%- if text %}{% set ns.prev = text %}{% endif -%}"
	       "{%- endfor -%}";
}

const char *tmpl_chatml(void) {
	return "{%- for message in messages -%}"
	       "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
	       "{%- endfor -%}"
	       "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";
}
