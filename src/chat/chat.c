// chat: the template chosen once, and one path from messages, tools and variables to the
// prompt's text and ids (the tool-call families' shapes from tools.c).
#include "chat/chat.h"
#include "base/base.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOD "chat"

static char *token_string(const tok_vocab *v, int32_t id) {
	size_t n = 0;
	const char *t = v && id >= 0 ? tok_text(v, id, &n) : NULL;
	char *out = malloc(n + 1);
	if (out) {
		if (n) memcpy(out, t, n);
		out[n] = 0;
	}
	return out;
}

int chat_load_src(chat_tmpl *c, const tok_vocab *v, const char *src, size_t len, char *err, size_t errlen) {
	memset(c, 0, sizeof *c);
	c->v = v;
	int rc = tmpl_compile(&c->t, src, len, err, errlen);
	if (rc) return rc;
	c->src = malloc(len + 1);
	c->bos = token_string(v, v ? tok_bos(v) : -1);
	c->eos = token_string(v, v ? tok_eos(v) : -1);
	if (!c->src || !c->bos || !c->eos) {
		chat_free(c);
		return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	}
	memcpy(c->src, src, len);
	c->src[len] = 0;
	// the tool-call family is read off the template once, not per request or token
	c->fmt = tool_format_of(c->src);
	c->reason = reason_format_of(c->src);
	c->reason_switch = c->reason && c->reason->off_var && strstr(c->src, c->reason->off_var);
	c->own = true;
	return 0;
}

static char *read_file(const char *path, size_t *len) {
	FILE *f = fopen(path, "rb");
	if (!f) return NULL;
	char *buf = NULL;
	size_t n = 0, cap = 0;
	for (;;) {
		if (cap - n < 65536) {
			char *nb = realloc(buf, cap += 65536 + cap);
			if (!nb) break;
			buf = nb;
		}
		const size_t k = fread(buf + n, 1, cap - n - 1, f);
		n += k;
		if (!k) break;
	}
	const bool bad = ferror(f) || !buf;
	fclose(f);
	if (bad) {
		free(buf);
		return NULL;
	}
	buf[n] = 0;
	*len = n;
	return buf;
}

int chat_load(chat_tmpl *c, const tok_vocab *v, const char *path, char *err, size_t errlen) {
	char e2[512];
	memset(c, 0, sizeof *c);
	if (path) {
		size_t len = 0;
		char *src = read_file(path, &len);
		if (!src) return base_seterr(err, errlen, LANES_EIO, "cannot read --chat-template %s: %s", path, strerror(errno));
		int rc = chat_load_src(c, v, src, len, e2, sizeof e2);
		free(src);
		if (rc) return base_seterr(err, errlen, rc, "--chat-template %s: %s", path, e2);
		snprintf(c->origin, sizeof c->origin, "--chat-template");
		LOG_INFO(MOD, "chat template from %s", path);
		return 0;
	}
	const char *src = v ? tok_chat_template(v) : NULL;
	// the fallback is the vocabulary's own text form: ChatML where it has ChatML's tokens, else plain text
	const bool chatml = v && tok_find(v, "<|im_start|>", 12) >= 0 && tok_find(v, "<|im_end|>", 10) >= 0;
	const char *name = chatml ? "ChatML" : "plain text";
	if (src) {
		if (!chat_load_src(c, v, src, strlen(src), e2, sizeof e2)) {
			snprintf(c->origin, sizeof c->origin, "the model's");
			return 0;
		}
		LOG_WARN(MOD, "the model's chat template does not compile (%s): using %s instead", e2, name);
	} else if (chatml) {
		LOG_WARN(MOD, "the model has no chat template: using ChatML, which its vocabulary has the tokens of");
	} else {
		LOG_INFO(MOD, "the model has no chat template: chat turns are joined as plain text, which the model continues "
			      "(a chat request gives what a completion of the same text gives)");
	}
	const char *fb = chatml ? tmpl_chatml() : tmpl_plain();
	int rc = chat_load_src(c, v, fb, strlen(fb), e2, sizeof e2);
	if (rc) return base_seterr(err, errlen, rc, "the %s template does not compile: %s", name, e2);
	c->own = false;
	c->plain = !chatml;
	snprintf(c->origin, sizeof c->origin, "%s", name);
	return 0;
}

void chat_free(chat_tmpl *c) {
	tmpl_free(c->t);
	free(c->src);
	free(c->bos);
	free(c->eos);
	memset(c, 0, sizeof *c);
}

// A conversation that holds tool calls or results: the tool format shapes it.
static bool has_tool_turns(const json_t *messages) {
	size_t i;
	json_t *m;
	json_array_foreach(messages, i, m) {
		const char *role = json_string_value(json_object_get(m, "role"));
		if (json_object_get(m, "tool_calls") || (role && !strcmp(role, "tool"))) return true;
	}
	return false;
}

static int fail(enum chat_fault *fault, enum chat_fault f, int rc) {
	if (fault) *fault = f;
	return rc;
}

int chat_render(const chat_tmpl *c, const chat_input *in, char **text, size_t *len, enum chat_fault *fault, char *err,
		size_t errlen) {
	*text = NULL;
	*len = 0;
	if (fault) *fault = CHAT_F_NONE;
	// tools offered or tool turns: the family's shapes for the template (the fallback's as text)
	json_t *shaped = NULL, *tools = NULL;
	if (in->as_given) {
		tools = in->tools ? json_incref((json_t *)in->tools) : NULL;
	} else if (in->tools || has_tool_turns(in->messages)) {
		int rc = tool_render_context(c->fmt, in->tools, in->messages, &shaped, &tools, err, errlen);
		if (rc) return fail(fault, rc == LANES_ENOMEM ? CHAT_F_NONE : strncmp(err, "tools", 5) ? CHAT_F_MESSAGES : CHAT_F_TOOLS, rc);
	}
	json_t *ctx = json_pack("{s:s, s:s, s:b}", "bos_token", in->bos ? in->bos : c->bos, "eos_token", in->eos ? in->eos : c->eos,
				"add_generation_prompt", in->add_generation_prompt);
	const json_t *msgs = shaped ? shaped : in->messages;
	if (ctx && msgs && json_object_set(ctx, "messages", (json_t *)msgs)) json_decref(ctx), ctx = NULL;
	json_decref(shaped);
	if (ctx && tools) json_object_set_new(ctx, "tools", tools);
	else json_decref(tools);
	if (!ctx) return fail(fault, CHAT_F_NONE, base_seterr(err, errlen, LANES_ENOMEM, "out of memory"));
	// the client's variables come after ours, so a template reads what it was sent
	if (in->kwargs) json_object_update(ctx, (json_t *)in->kwargs);
	if (in->reasoning_effort) json_object_set_new(ctx, "reasoning_effort", json_string(in->reasoning_effort));
	char msg[512];
	int rc = tmpl_render(c->t, ctx, in->date_ymd, text, len, msg, sizeof msg);
	json_decref(ctx);
	if (rc == LANES_ENOMEM) return fail(fault, CHAT_F_NONE, base_seterr(err, errlen, rc, "out of memory"));
	if (rc) return fail(fault, CHAT_F_TEMPLATE, base_seterr(err, errlen, rc, "the chat template failed: %s", msg));
	if (in->prefill && *in->prefill) {
		const size_t pl = strlen(in->prefill);
		char *t = realloc(*text, *len + pl + 1);
		if (!t) {
			free(*text);
			*text = NULL;
			return fail(fault, CHAT_F_NONE, base_seterr(err, errlen, LANES_ENOMEM, "out of memory"));
		}
		memcpy(t + *len, in->prefill, pl + 1);
		*text = t;
		*len += pl;
	}
	return 0;
}

int chat_prompt(const chat_tmpl *c, const chat_input *in, chat_check_fn check, void *check_arg, int32_t **ids, size_t *n,
		enum chat_fault *fault, char *err, size_t errlen) {
	*ids = NULL;
	*n = 0;
	char *text;
	size_t len;
	int rc = chat_render(c, in, &text, &len, fault, err, errlen);
	if (rc) return rc;
	if (check && (rc = check(check_arg, len, err, errlen))) {
		free(text);
		return fail(fault, CHAT_F_SIZE, rc);
	}
	if (!c->v) rc = base_seterr(err, errlen, LANES_EINVAL, "no vocabulary to tokenize the prompt with");
	else rc = tok_encode_chat(c->v, text, len, ids, n, err, errlen);
	free(text);
	if (rc && fault) *fault = rc == LANES_ENOMEM ? CHAT_F_NONE : CHAT_F_MESSAGES;
	return rc;
}
