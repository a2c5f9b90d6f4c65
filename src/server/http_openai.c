// server: the OpenAI adapters — POST /v1/chat/completions and POST /v1/completions: request
// parsing (every field checked and named on error; unsupported parameters refused), the
// reply and chunk shapes, logprobs in both formats, usage, and the halt's error event.
#include "server/http_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	json_t *j;             // the request: stop strings point into it
	bool chat;
	bool logprobs;         // chat: logprobs; completions: logprobs >= 0
	int top_logprobs;
	bool include_usage;
	bool echo;             // completions
	char *echo_text;       // completions: the prompt's text when echo
	json_t **lp;           // per choice: chat logprobs.content, or completions' four arrays below
	json_t **lp_top, **lp_lp, **lp_off;
	size_t *offset;        // per choice: completions text_offset so far
} oai_state;

static void oai_free(void *p) {
	oai_state *st = p;
	if (!st) return;
	json_decref(st->j);
	free(st->echo_text);
	for (int i = 0; i < SRV_MAX_N; i++) {
		if (st->lp) json_decref(st->lp[i]);
		if (st->lp_top) json_decref(st->lp_top[i]);
		if (st->lp_lp) json_decref(st->lp_lp[i]);
		if (st->lp_off) json_decref(st->lp_off[i]);
	}
	free(st->lp);
	free(st->lp_top);
	free(st->lp_lp);
	free(st->lp_off);
	free(st->offset);
	free(st);
}

static const char *finish_name(const srv_choice *ch) { return ch->finish == LANE_FINISH_LENGTH ? "length" : "stop"; }

static json_t *usage(const srv_call *c) {
	int32_t gen = srv_call_generated(c);
	return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", c->g.n_prompt, "completion_tokens", gen, "total_tokens",
			 c->g.n_prompt + gen, "prompt_tokens_details", "cached_tokens", c->n ? c->ch[0].n_cached : 0);
}

// ---- logprobs -----------------------------------------------------------------------------------

static json_t *chat_lp_entry(http_server *s, int32_t id, float lp, const lane_top *top, int32_t n_top) {
	json_t *bytes = NULL;
	char *t = srv_token_text(s, id, &bytes);
	json_t *tops = json_array();
	for (int32_t k = 0; k < n_top && tops; k++) {
		json_t *b2 = NULL;
		char *t2 = srv_token_text(s, top[k].token, &b2);
		json_array_append_new(tops, json_pack("{s:s, s:o, s:o}", "token", t2 ? t2 : "", "logprob",
						      srv_real(top[k].logprob), "bytes", b2 ? b2 : json_array()));
		free(t2);
	}
	json_t *e = json_pack("{s:s, s:o, s:o, s:o}", "token", t ? t : "", "logprob", srv_real(lp), "bytes",
			      bytes ? bytes : json_array(), "top_logprobs", tops ? tops : json_array());
	free(t);
	return e;
}

// Completions' legacy logprobs: appends one token to the four arrays of choice i.
static void cmpl_lp_add(srv_call *c, int i, const lane_event *ev) {
	oai_state *st = c->st;
	char *t = srv_token_text(c->s, ev->token, NULL);
	json_array_append_new(st->lp[i], json_string(t ? t : ""));
	json_array_append_new(st->lp_lp[i], srv_real(ev->logprob));
	if (st->top_logprobs > 0) {
		json_t *o = json_object();
		for (int32_t k = 0; k < ev->n_top && o; k++) {
			char *t2 = srv_token_text(c->s, ev->top[k].token, NULL);
			if (t2 && !json_object_get(o, t2)) json_object_set_new(o, t2, srv_real(ev->top[k].logprob));
			free(t2);
		}
		json_array_append_new(st->lp_top[i], o ? o : json_null());
	} else {
		json_array_append_new(st->lp_top[i], json_null());
	}
	json_array_append_new(st->lp_off[i], json_integer((json_int_t)st->offset[i]));
	st->offset[i] += t ? strlen(t) : 0;
	free(t);
}

static json_t *cmpl_lp_object(oai_state *st, int i) {
	return json_pack("{s:O, s:O, s:O, s:O}", "tokens", st->lp[i], "token_logprobs", st->lp_lp[i], "top_logprobs",
			 st->lp_top[i], "text_offset", st->lp_off[i]);
}

// ---- chunks --------------------------------------------------------------------------------------

static json_t *chunk(srv_call *c, json_t *choices) {
	oai_state *st = c->st;
	json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o}", "id", c->id, "object",
			      st->chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)c->created, "model",
			      c->s->model_id, "system_fingerprint", "lanes", "choices", choices ? choices : json_array());
	if (o && st->include_usage) json_object_set_new(o, "usage", json_null());
	return o;
}

static void oai_begin(srv_call *c) {
	oai_state *st = c->st;
	for (int i = 0; i < c->n; i++) {
		json_t *ch;
		if (st->chat)
			ch = json_pack("{s:i, s:{s:s, s:s}, s:n, s:n}", "index", i, "delta", "role", "assistant", "content", "",
				       "logprobs", "finish_reason");
		else if (st->echo)
			ch = json_pack("{s:i, s:s, s:n, s:n}", "index", i, "text", st->echo_text, "logprobs", "finish_reason");
		else
			continue;
		srv_sse(c, NULL, chunk(c, json_pack("[o]", ch)));
	}
}

static void oai_text(srv_call *c, int i, const char *text, size_t len, const lane_event *tok) {
	oai_state *st = c->st;
	bool with_lp = st->logprobs && tok;
	if (!c->g.stream) {
		if (!with_lp) return;
		if (st->chat) json_array_append_new(st->lp[i], chat_lp_entry(c->s, tok->token, tok->logprob, tok->top, tok->n_top));
		else cmpl_lp_add(c, i, tok);
		return;
	}
	if (!len && !with_lp) return;
	json_t *lp = json_null();
	if (with_lp && st->chat) {
		json_decref(lp);
		lp = json_pack("{s:[o], s:n}", "content", chat_lp_entry(c->s, tok->token, tok->logprob, tok->top, tok->n_top), "refusal");
	} else if (with_lp) {
		for (int k = 0; k < c->n; k++) {
			json_array_clear(st->lp[k]);
			json_array_clear(st->lp_lp[k]);
			json_array_clear(st->lp_top[k]);
			json_array_clear(st->lp_off[k]);
		}
		cmpl_lp_add(c, i, tok);
		json_decref(lp);
		lp = cmpl_lp_object(st, i);
	}
	json_t *ch;
	if (st->chat)
		ch = json_pack("{s:i, s:{s:s%}, s:o, s:n}", "index", i, "delta", "content", text, len, "logprobs", lp, "finish_reason");
	else
		ch = json_pack("{s:i, s:s%, s:o, s:n}", "index", i, "text", text, len, "logprobs", lp, "finish_reason");
	srv_sse(c, NULL, chunk(c, json_pack("[o]", ch)));
}

static void oai_choice_end(srv_call *c, int i) {
	oai_state *st = c->st;
	const srv_choice *ch = &c->ch[i];
	json_t *o;
	if (st->chat)
		o = json_pack("{s:i, s:{}, s:n, s:s, s:s}", "index", i, "delta", "logprobs", "finish_reason", finish_name(ch),
			      "token_sha", ch->token_sha);
	else
		o = json_pack("{s:i, s:s, s:n, s:s, s:s}", "index", i, "text", "", "logprobs", "finish_reason", finish_name(ch),
			      "token_sha", ch->token_sha);
	srv_sse(c, NULL, chunk(c, json_pack("[o]", o)));
}

static void oai_done(srv_call *c) {
	oai_state *st = c->st;
	if (st->include_usage) {
		json_t *o = chunk(c, NULL);
		if (o) json_object_set_new(o, "usage", usage(c));
		srv_sse(c, NULL, o);
	}
	srv_sse_raw(c, "data: [DONE]\n\n");
}

static void oai_fail(srv_call *c) {
	srv_sse(c, NULL, json_pack("{s:{s:s, s:s}}", "error", "message", c->fail_reason, "type", "server_error"));
}

static json_t *oai_reply(srv_call *c) {
	oai_state *st = c->st;
	json_t *choices = json_array();
	for (int i = 0; i < c->n && choices; i++) {
		const srv_choice *ch = &c->ch[i];
		const char *text = ch->text.p ? ch->text.p : "";
		json_t *o;
		if (st->chat) {
			json_t *lp = st->logprobs ? json_pack("{s:O, s:n}", "content", st->lp[i], "refusal") : json_null();
			o = json_pack("{s:i, s:{s:s, s:s%, s:n}, s:o, s:s, s:s}", "index", i, "message", "role", "assistant", "content",
				      text, ch->text.len, "refusal", "logprobs", lp, "finish_reason", finish_name(ch), "token_sha",
				      ch->token_sha);
		} else {
			srv_buf t = {0};
			if (st->echo) srv_buf_adds(&t, st->echo_text);
			srv_buf_add(&t, text, ch->text.len);
			json_t *lp = st->logprobs ? cmpl_lp_object(st, i) : json_null();
			o = json_pack("{s:i, s:s%, s:o, s:s, s:s}", "index", i, "text", t.p ? t.p : "", t.len, "logprobs", lp,
				      "finish_reason", finish_name(ch), "token_sha", ch->token_sha);
			srv_buf_free(&t);
		}
		if (!o) {
			json_decref(choices);
			return NULL;
		}
		json_array_append_new(choices, o);
	}
	if (!choices) return NULL;
	return json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:o, s:I}", "id", c->id, "object",
			 st->chat ? "chat.completion" : "text_completion", "created", (json_int_t)c->created, "model",
			 c->s->model_id, "system_fingerprint", "lanes", "choices", choices, "usage", usage(c), "seed",
			 (json_int_t)c->g.seed);
}

static const srv_api oai_api = {oai_begin, oai_text, oai_choice_end, oai_done, oai_fail, oai_reply, oai_free};

// ---- parsing ------------------------------------------------------------------------------------

// Parameters we accept only at their neutral value; anything else is refused by name.
static int neutral(json_t *j, srv_err *e) {
	json_t *v;
	if ((v = json_object_get(j, "response_format")) && !json_is_null(v)) {
		const char *t = json_string_value(json_object_get(v, "type"));
		if (!t || strcmp(t, "text"))
			return srv_fail(e, SRV_E_BAD_REQUEST, "response_format",
					"unsupported parameter: response_format (only {\"type\": \"text\"} is supported)");
	}
	if ((v = json_object_get(j, "tools")) && !json_is_null(v) && !(json_is_array(v) && !json_array_size(v)))
		return srv_fail(e, SRV_E_BAD_REQUEST, "tools", "unsupported parameter: tools (tool calls are not supported)");
	if ((v = json_object_get(j, "tool_choice")) && !json_is_null(v) &&
	    !(json_is_string(v) && (!strcmp(json_string_value(v), "none") || !strcmp(json_string_value(v), "auto"))))
		return srv_fail(e, SRV_E_BAD_REQUEST, "tool_choice", "unsupported parameter: tool_choice (tool calls are not supported)");
	if ((v = json_object_get(j, "modalities")) && !json_is_null(v)) {
		bool ok = json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)) &&
			  !strcmp(json_string_value(json_array_get(v, 0)), "text");
		if (!ok) return srv_fail(e, SRV_E_BAD_REQUEST, "modalities", "unsupported parameter: modalities (only [\"text\"])");
	}
	if ((v = json_object_get(j, "store")) && json_is_true(v))
		return srv_fail(e, SRV_E_BAD_REQUEST, "store", "unsupported parameter: store (completions are not stored)");
	if ((v = json_object_get(j, "suffix")) && !json_is_null(v) && !(json_is_string(v) && !json_string_length(v)))
		return srv_fail(e, SRV_E_BAD_REQUEST, "suffix", "unsupported parameter: suffix");
	return 0;
}

// Sampling fields shared by both endpoints.
static int oai_sampling(http_server *s, json_t *j, srv_gen *g, srv_err *e) {
	double d;
	int64_t x;
	int rc;
	if ((rc = srv_get_num(j, "temperature", 0, 2, &d, e)) < 0) return -1;
	if (rc) g->lr.sampling.temperature = (float)d;
	if ((rc = srv_get_num(j, "top_p", 0, 1, &d, e)) < 0) return -1;
	if (rc && d <= 0) return srv_fail(e, SRV_E_BAD_REQUEST, "top_p", "top_p must be greater than 0, got %g", d);
	if (rc) g->lr.sampling.top_p = (float)d;
	if ((rc = srv_get_num(j, "presence_penalty", -2, 2, &d, e)) < 0) return -1;
	if (rc) g->lr.sampling.presence_penalty = (float)d;
	if ((rc = srv_get_num(j, "frequency_penalty", -2, 2, &d, e)) < 0) return -1;
	if (rc) g->lr.sampling.frequency_penalty = (float)d;
	if ((rc = srv_get_num(j, "repeat_penalty", 0, 100, &d, e)) < 0) return -1;
	if (rc && d <= 0) return srv_fail(e, SRV_E_BAD_REQUEST, "repeat_penalty", "repeat_penalty must be greater than 0");
	if (rc) g->lr.sampling.repeat_penalty = (float)d;
	if ((rc = srv_get_int(j, "n", 1, SRV_MAX_N, &x, e)) < 0) return -1;
	if (rc) g->n = (int)x;
	if (srv_gen_common(j, g, e) < 0) return -1;
	if (srv_get_stops(j, "stop", g, e) < 0) return -1;
	json_t *lb = json_object_get(j, "logit_bias");
	if (lb && !json_is_null(lb)) {
		if (!json_is_object(lb)) return srv_fail(e, SRV_E_BAD_REQUEST, "logit_bias", "logit_bias must be an object of token id → bias");
		size_t n = json_object_size(lb);
		g->bias = calloc(n ? n : 1, sizeof *g->bias);
		if (!g->bias) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
		const char *key;
		json_t *v;
		json_object_foreach(lb, key, v) {
			char *end;
			long long id = strtoll(key, &end, 10);
			if (end == key || *end || id < 0 || id >= s->n_vocab)
				return srv_fail(e, SRV_E_BAD_REQUEST, "logit_bias", "logit_bias key '%s' is not a token id in 0..%d", key,
						s->n_vocab - 1);
			double bv = json_is_number(v) ? json_number_value(v) : NAN;
			if (!(bv >= -100 && bv <= 100))
				return srv_fail(e, SRV_E_BAD_REQUEST, "logit_bias", "logit_bias for token %lld must be a number in -100..100", id);
			g->bias[g->n_bias++] = (lane_bias){(int32_t)id, bv <= -100 ? -INFINITY : (float)bv};
		}
	}
	json_t *so = json_object_get(j, "stream_options");
	if (so && !json_is_null(so)) {
		static const char *const known[] = {"include_usage", "include_obfuscation", NULL};
		if (!json_is_object(so)) return srv_fail(e, SRV_E_BAD_REQUEST, "stream_options", "stream_options must be an object");
		if (srv_check_keys(so, known, "stream_options", e)) return -1;
		bool inc = false;
		if (srv_get_bool(so, "include_usage", &inc, e) < 0) {
			snprintf(e->param, sizeof e->param, "stream_options.include_usage");
			return -1;
		}
	}
	return 0;
}

static bool include_usage(json_t *j) {
	json_t *so = json_object_get(j, "stream_options");
	return json_is_object(so) && json_is_true(json_object_get(so, "include_usage"));
}

static oai_state *state_new(json_t *j, bool chat, int n) {
	oai_state *st = calloc(1, sizeof *st);
	if (!st) return NULL;
	st->j = j;
	st->chat = chat;
	st->lp = calloc(SRV_MAX_N, sizeof *st->lp);
	st->lp_top = calloc(SRV_MAX_N, sizeof *st->lp_top);
	st->lp_lp = calloc(SRV_MAX_N, sizeof *st->lp_lp);
	st->lp_off = calloc(SRV_MAX_N, sizeof *st->lp_off);
	st->offset = calloc(SRV_MAX_N, sizeof *st->offset);
	bool ok = st->lp && st->lp_top && st->lp_lp && st->lp_off && st->offset;
	for (int i = 0; ok && i < n; i++) {
		st->lp[i] = json_array();
		st->lp_top[i] = json_array();
		st->lp_lp[i] = json_array();
		st->lp_off[i] = json_array();
		ok = st->lp[i] && st->lp_top[i] && st->lp_lp[i] && st->lp_off[i];
	}
	if (!ok) {
		st->j = NULL;
		oai_free(st);
		return NULL;
	}
	return st;
}

int srv_openai_messages(json_t *msgs, json_t **out, srv_err *e) {
	static const char *const part_types[] = {"text", NULL};
	static const char *const known[] = {"role", "content", "name", "refusal", "tool_calls", NULL};
	*out = NULL;
	if (!json_is_array(msgs) || !json_array_size(msgs))
		return srv_fail(e, SRV_E_BAD_REQUEST, "messages", "messages must be a non-empty array");
	json_t *flat = json_array();
	if (!flat) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	size_t i;
	json_t *m;
	json_array_foreach(msgs, i, m) {
		char p[64];
		snprintf(p, sizeof p, "messages[%zu]", i);
		if (!json_is_object(m)) {
			json_decref(flat);
			return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s must be an object", p);
		}
		if (srv_check_keys(m, known, p, e)) goto fail;
		json_t *tc = json_object_get(m, "tool_calls");
		if (tc && !json_is_null(tc) && !(json_is_array(tc) && !json_array_size(tc))) {
			srv_fail(e, SRV_E_BAD_REQUEST, p, "unsupported parameter: %s.tool_calls (tool calls are not supported)", p);
			goto fail;
		}
		const char *role = json_string_value(json_object_get(m, "role"));
		if (!role) {
			srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.role must be a string", p);
			goto fail;
		}
		if (!strcmp(role, "developer")) role = "system";
		if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant")) {
			srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.role '%s' is not supported: system, developer, user or assistant", p, role);
			goto fail;
		}
		char pc[80], *text = NULL;
		snprintf(pc, sizeof pc, "%s.content", p);
		json_t *content = json_object_get(m, "content");
		if ((!content || json_is_null(content)) && strcmp(role, "assistant")) {
			srv_fail(e, SRV_E_BAD_REQUEST, pc, "%s is required", pc);
			goto fail;
		}
		if (srv_content_text(json_object_get(m, "content"), pc, part_types, &text, e)) goto fail;
		json_t *o = json_pack("{s:s, s:s}", "role", role, "content", text);
		free(text);
		if (!o || json_array_append_new(flat, o)) {
			srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
			goto fail;
		}
	}
	*out = flat;
	return 0;
fail:
	json_decref(flat);
	return -1;
}

enum MHD_Result srv_chat_completions(srv_conn *c) {
	http_server *s = c->s;
	static const char *const known[] = {
		"model", "messages", "temperature", "top_p", "top_k", "min_p", "max_tokens", "max_completion_tokens", "stop",
		"seed", "n", "presence_penalty", "frequency_penalty", "repeat_penalty", "logit_bias", "logprobs",
		"top_logprobs", "stream", "stream_options", "draft", "ignore_eos", "user", "metadata", "store", "response_format", "tools",
		"tool_choice", "parallel_tool_calls", "modalities", "service_tier", NULL};
	srv_err e;
	json_t *j = NULL, *flat = NULL;
	oai_state *st = NULL;
	srv_gen g;
	srv_gen_init(&g);
	int64_t x;
	int rc;
	if (srv_parse_body(c, &j, &e) || srv_check_keys(j, known, NULL, &e) || neutral(j, &e) || srv_check_model(s, j, false, &e))
		goto fail;
	if (oai_sampling(s, j, &g, &e)) goto fail;
	if ((rc = srv_get_int(j, "max_tokens", 1, INT32_MAX, &x, &e)) < 0) goto fail;
	if (rc) g.lr.max_tokens = (int32_t)x;
	if ((rc = srv_get_int(j, "max_completion_tokens", 1, INT32_MAX, &x, &e)) < 0) goto fail;
	if (rc) g.lr.max_tokens = (int32_t)x, g.max_field = "max_completion_tokens";
	bool logprobs = false;
	int64_t top = 0;
	if (srv_get_bool(j, "logprobs", &logprobs, &e) < 0) goto fail;
	if ((rc = srv_get_int(j, "top_logprobs", 0, LANE_MAX_TOP_LOGPROBS, &top, &e)) < 0) goto fail;
	if (rc && !logprobs) {
		srv_fail(&e, SRV_E_BAD_REQUEST, "top_logprobs", "top_logprobs needs logprobs: true");
		goto fail;
	}
	if (srv_openai_messages(json_object_get(j, "messages"), &flat, &e)) goto fail;
	if (srv_chat_prompt(s, flat, NULL, &g.prompt, &g.n_prompt, &e)) goto fail;
	json_decref(flat);
	flat = NULL;
	if (!(st = state_new(j, true, g.n))) {
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		goto fail;
	}
	j = NULL;
	st->logprobs = logprobs;
	st->top_logprobs = (int)top;
	st->include_usage = g.stream && include_usage(st->j);
	g.lr.logprobs = logprobs;
	g.lr.top_logprobs = (int32_t)top;
	g.prompt_field = "messages";
	return srv_gen_run(c, &oai_api, st, &g, "chatcmpl-");
fail:
	json_decref(j);
	json_decref(flat);
	free(g.prompt);
	free(g.bias);
	return srv_reply_error(c, &e);
}

// The completion prompt: a string, token ids, or a one-element array of either.
static int cmpl_prompt(http_server *s, json_t *p, srv_gen *g, char **echo, srv_err *e) {
	if (json_is_array(p) && json_array_size(p) == 1 &&
	    (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
		p = json_array_get(p, 0);
	char err[256];
	if (json_is_string(p)) {
		size_t n = 0;
		int rc = tok_encode(s->vocab, json_string_value(p), json_string_length(p), true, true, &g->prompt, &n, err, sizeof err);
		if (rc) return srv_fail(e, rc == LANES_ENOMEM ? SRV_E_INTERNAL : SRV_E_BAD_REQUEST, "prompt", "%s", err);
		if (n > (size_t)INT32_MAX / 2) return srv_fail(e, SRV_E_BAD_REQUEST, "prompt", "the prompt is too long");
		g->n_prompt = (int32_t)n;
		*echo = strdup(json_string_value(p));
		return *echo ? 0 : srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	}
	if (!json_is_array(p) || !json_array_size(p))
		return srv_fail(e, SRV_E_BAD_REQUEST, "prompt", "prompt must be a string or an array of token ids (one prompt per request)");
	size_t n = json_array_size(p);
	if (n > (size_t)INT32_MAX / 2) return srv_fail(e, SRV_E_BAD_REQUEST, "prompt", "the prompt is too long");
	g->prompt = malloc(n * sizeof *g->prompt);
	if (!g->prompt) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(p, i);
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= s->n_vocab) {
			char pp[48];
			snprintf(pp, sizeof pp, "prompt[%zu]", i);
			return srv_fail(e, SRV_E_BAD_REQUEST, pp, "%s must be a token id in 0..%d (one prompt per request)", pp, s->n_vocab - 1);
		}
		g->prompt[i] = (int32_t)json_integer_value(v);
	}
	g->n_prompt = (int32_t)n;
	size_t len;
	if (tok_detokenize(s->vocab, g->prompt, n, TOK_DECODE_STRIP_SPACE, echo, &len, err, sizeof err))
		return srv_fail(e, SRV_E_BAD_REQUEST, "prompt", "%s", err);
	return 0;
}

enum MHD_Result srv_completions(srv_conn *c) {
	http_server *s = c->s;
	static const char *const known[] = {
		"model", "prompt", "temperature", "top_p", "top_k", "min_p", "max_tokens", "stop", "seed", "n",
		"presence_penalty", "frequency_penalty", "repeat_penalty", "logit_bias", "logprobs", "echo", "stream",
		"stream_options", "draft", "ignore_eos", "user", "suffix", "best_of", NULL};
	srv_err e;
	json_t *j = NULL;
	oai_state *st = NULL;
	char *echo_text = NULL;
	srv_gen g;
	srv_gen_init(&g);
	g.lr.max_tokens = 16;
	g.prompt_field = "prompt";
	int64_t x;
	int rc;
	if (srv_parse_body(c, &j, &e) || srv_check_keys(j, known, NULL, &e) || neutral(j, &e) || srv_check_model(s, j, false, &e))
		goto fail;
	if (oai_sampling(s, j, &g, &e)) goto fail;
	if ((rc = srv_get_int(j, "best_of", 1, SRV_MAX_N, &x, &e)) < 0) goto fail;
	if (rc && x != g.n) {
		srv_fail(&e, SRV_E_BAD_REQUEST, "best_of", "unsupported parameter: best_of (only best_of = n)");
		goto fail;
	}
	if ((rc = srv_get_int(j, "max_tokens", 1, INT32_MAX, &x, &e)) < 0) goto fail;
	if (rc) g.lr.max_tokens = (int32_t)x;
	bool echo = false;
	int64_t lp = -1;
	if (srv_get_bool(j, "echo", &echo, &e) < 0) goto fail;
	if (srv_get_int(j, "logprobs", 0, LANE_MAX_TOP_LOGPROBS, &lp, &e) < 0) goto fail;
	if (echo && lp >= 0) {
		srv_fail(&e, SRV_E_BAD_REQUEST, "echo", "echo with logprobs is not supported (prompt logprobs are not computed)");
		goto fail;
	}
	json_t *p = json_object_get(j, "prompt");
	if (!p || json_is_null(p)) {
		srv_fail(&e, SRV_E_BAD_REQUEST, "prompt", "prompt is required");
		goto fail;
	}
	if (cmpl_prompt(s, p, &g, &echo_text, &e)) goto fail;
	if (!(st = state_new(j, false, g.n))) {
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		goto fail;
	}
	j = NULL;
	st->echo = echo;
	st->echo_text = echo_text;
	echo_text = NULL;
	st->logprobs = lp >= 0;
	st->top_logprobs = lp > 0 ? (int)lp : 0;
	for (int i = 0; i < g.n && echo; i++) st->offset[i] = strlen(st->echo_text);
	st->include_usage = g.stream && include_usage(st->j);
	g.lr.logprobs = lp >= 0;
	g.lr.top_logprobs = lp > 0 ? (int32_t)lp : 0;
	return srv_gen_run(c, &oai_api, st, &g, "cmpl-");
fail:
	json_decref(j);
	free(echo_text);
	free(g.prompt);
	free(g.bias);
	return srv_reply_error(c, &e);
}
