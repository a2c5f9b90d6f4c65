// server/api/openai: the OpenAI adapters — POST /v1/chat/completions and POST /v1/completions: request
// parsing (every field checked and named on error; unsupported parameters refused), the
// reply and chunk shapes, logprobs in both formats, usage, and the halt's error event.
#include "server/gen/gen.h"
#include "server/routes.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	json_t *j;             // the request: stop strings point into it
	bool chat;
	bool include_usage;
	bool echo;             // completions
	bool echo_lp;          // completions: echo with logprobs, the prompt's entries from the prompt pass
	bool echoed[SRV_MAX_N]; // stream with echo_lp: choice i's echo was sent (at its first event)
	int32_t prompt_k;      // vLLM's prompt_logprobs: alternatives per prompt token (-1: not asked)
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

static const char *finish_name(const srv_choice *ch) { return srv_choice_cut(ch) ? "length" : "stop"; }

// A streamed choice that announced tool calls ends with "tool_calls", unless it was cut.
static const char *stream_finish(const srv_call *c, const srv_choice *ch) {
	return c->g.parse_calls && ch->tools.n_started && !srv_choice_cut(ch) ? "tool_calls" : finish_name(ch);
}

static json_t *usage(const srv_call *c) {
	int32_t gen = srv_call_generated(c);
	return json_pack("{s:i, s:i, s:i, s:{s:i}, s:{s:i}}", "prompt_tokens", c->g.lr.n_prompt, "completion_tokens", gen, "total_tokens",
			 c->g.lr.n_prompt + gen, "prompt_tokens_details", "cached_tokens", c->n ? c->ch[0].n_cached : 0,
			 "completion_tokens_details", "reasoning_tokens", srv_call_thought(c));
}

// ---- logprobs -----------------------------------------------------------------------------------

static json_t *chat_lp_entry(const srv_model *M, int32_t id, float lp, const lane_top *top, int32_t n_top) {
	json_t *bytes = NULL;
	char *t = srv_token_text(M, id, &bytes);
	json_t *tops = json_array();
	for (int32_t k = 0; k < n_top && tops; k++) {
		json_t *b2 = NULL;
		char *t2 = srv_token_text(M, top[k].token, &b2);
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
	char *t = srv_token_text(c->mdl, ev->token, NULL);
	json_array_append_new(st->lp[i], json_string(t ? t : ""));
	json_array_append_new(st->lp_lp[i], srv_real(ev->logprob));
	if (c->g.lr.top_logprobs > 0) {
		json_t *o = json_object();
		for (int32_t k = 0; k < ev->n_top && o; k++) {
			char *t2 = srv_token_text(c->mdl, ev->top[k].token, NULL);
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

// The echoed prompt's entries of choice i's legacy logprobs, appended to the four arrays: every
// prompt token, the first's log-probability null, the others' from the prompt pass.
static void cmpl_prompt_lp(srv_call *c, int i, json_t *tokens, json_t *lps, json_t *tops, json_t *offs) {
	const lane_top *top;
	int32_t k;
	const lane_prompt_lp *lp = lane_req_prompt_logprobs(c->req[i], &top, &k);
	const int32_t want = c->g.lr.top_logprobs < k ? c->g.lr.top_logprobs : k;
	size_t off = 0;
	for (int32_t p = 0; p < c->g.lr.n_prompt; p++) {
		char *t = srv_token_text(c->mdl, c->g.prompt[p], NULL);
		json_array_append_new(tokens, json_string(t ? t : ""));
		json_array_append_new(lps, p && lp ? srv_real(lp[p].logprob) : json_null());
		json_t *o = p && lp && want > 0 ? json_object() : NULL;
		for (int32_t j = 0; o && j < want; j++) {
			char *t2 = srv_token_text(c->mdl, top[(size_t)p * k + j].token, NULL);
			if (t2 && !json_object_get(o, t2)) json_object_set_new(o, t2, srv_real(top[(size_t)p * k + j].logprob));
			free(t2);
		}
		json_array_append_new(tops, o ? o : json_null());
		json_array_append_new(offs, json_integer((json_int_t)off));
		off += t ? strlen(t) : 0;
		free(t);
	}
}

// vLLM's prompt_logprobs: null for the first token, then per token {"id": {"logprob", "rank",
// "decoded_token"}} for the prompt's token and the want most likely.
static json_t *vllm_prompt_lp(srv_call *c, int i, int32_t want) {
	const lane_top *top;
	int32_t k;
	const lane_prompt_lp *lp = lane_req_prompt_logprobs(c->req[i], &top, &k);
	json_t *a = json_array();
	if (!lp || !a) return a;
	if (want > k) want = k;
	json_array_append_new(a, json_null());
	for (int32_t p = 1; p < c->g.lr.n_prompt; p++) {
		json_t *o = json_object();
		char key[16];
		char *t = srv_token_text(c->mdl, c->g.prompt[p], NULL);
		snprintf(key, sizeof key, "%d", c->g.prompt[p]);
		json_object_set_new(o, key, json_pack("{s:o, s:i, s:s}", "logprob", srv_real(lp[p].logprob), "rank", lp[p].rank,
						       "decoded_token", t ? t : ""));
		free(t);
		for (int32_t j = 0; j < want; j++) {
			const lane_top *x = &top[(size_t)p * k + j];
			snprintf(key, sizeof key, "%d", x->token);
			if (json_object_get(o, key)) continue;
			char *t2 = srv_token_text(c->mdl, x->token, NULL);
			json_object_set_new(o, key, json_pack("{s:o, s:i, s:s}", "logprob", srv_real(x->logprob), "rank", j + 1,
							       "decoded_token", t2 ? t2 : ""));
			free(t2);
		}
		json_array_append_new(a, o);
	}
	return a;
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
			      srv_call_model(c), "system_fingerprint", "lanes", "choices", choices ? choices : json_array());
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
		else if (st->echo && !st->echo_lp)
			ch = json_pack("{s:i, s:s, s:n, s:n}", "index", i, "text", st->echo_text, "logprobs", "finish_reason");
		else
			continue;
		srv_sse(c, NULL, chunk(c, json_pack("[o]", ch)));
	}
}

// Stream with echo and logprobs: choice i's echo with its prompt's entries, sent at its first
// event, when the prompt pass is whole.
static void echo_lp_chunk(srv_call *c, int i) {
	oai_state *st = c->st;
	if (!st->echo_lp || st->echoed[i]) return;
	st->echoed[i] = true;
	json_t *a[4] = {json_array(), json_array(), json_array(), json_array()};
	if (a[0] && a[1] && a[2] && a[3]) cmpl_prompt_lp(c, i, a[0], a[1], a[2], a[3]);
	json_t *lp = json_pack("{s:o*, s:o*, s:o*, s:o*}", "tokens", a[0], "token_logprobs", a[1], "top_logprobs", a[2], "text_offset", a[3]);
	srv_sse(c, NULL, chunk(c, json_pack("[{s:i, s:s, s:o*, s:n}]", "index", i, "text", st->echo_text, "logprobs", lp, "finish_reason")));
}

// ---- tool calls in a stream -----------------------------------------------------------------------

static void delta(srv_call *c, int i, json_t *d) {
	srv_sse(c, NULL, chunk(c, json_pack("[{s:i, s:o, s:n, s:n}]", "index", i, "delta", d, "logprobs", "finish_reason")));
}

static void sink_content(srv_call *c, int i, const char *text, size_t len) { delta(c, i, json_pack("{s:s%}", "content", text, len)); }

static void sink_start(srv_call *c, int i, int k, const char *id, const char *name, size_t name_len) {
	delta(c, i, json_pack("{s:[{s:i, s:s, s:s, s:{s:s%, s:s}}]}", "tool_calls", "index", k, "id", id, "type", "function", "function",
			      "name", name, name_len, "arguments", ""));
}

static void sink_args(srv_call *c, int i, int k, const char *text, size_t len) {
	delta(c, i, json_pack("{s:[{s:i, s:{s:s%}}]}", "tool_calls", "index", k, "function", "arguments", text, len));
}

static void sink_end(srv_call *c, int i, int k, const char *id, json_t *call) { (void)c, (void)i, (void)k, (void)id, (void)call; }

static const srv_tool_sink oai_sink = {sink_content, sink_start, sink_args, sink_end};

// The thinking as vLLM, llama-server and DeepSeek's API stream it.
static void oai_thinking(srv_call *c, int i, const char *text, size_t len) {
	if (((oai_state *)c->st)->chat) delta(c, i, json_pack("{s:s%}", "reasoning_content", text, len));
}

static void oai_text(srv_call *c, int i, const char *text, size_t len, const lane_event *tok) {
	oai_state *st = c->st;
	if (c->g.stream) echo_lp_chunk(c, i);
	bool with_lp = c->g.lr.logprobs && tok;
	if (c->g.stream && st->chat && c->g.parse_calls) {
		// the text goes out as the parser splits it; a token's logprobs in a chunk of their own
		srv_tools_stream(c, i, false, &oai_sink);
		if (with_lp)
			srv_sse(c, NULL, chunk(c, json_pack("[{s:i, s:{}, s:{s:[o], s:n}, s:n}]", "index", i, "delta", "logprobs", "content",
							    chat_lp_entry(c->mdl, tok->token, tok->logprob, tok->top, tok->n_top),
							    "refusal", "finish_reason")));
		return;
	}
	if (!c->g.stream) {
		if (!with_lp) return;
		if (st->chat) json_array_append_new(st->lp[i], chat_lp_entry(c->mdl, tok->token, tok->logprob, tok->top, tok->n_top));
		else cmpl_lp_add(c, i, tok);
		return;
	}
	if (!len && !with_lp) return;
	json_t *lp = json_null();
	if (with_lp && st->chat) {
		json_decref(lp);
		lp = json_pack("{s:[o], s:n}", "content", chat_lp_entry(c->mdl, tok->token, tok->logprob, tok->top, tok->n_top), "refusal");
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
	echo_lp_chunk(c, i);
	if (st->chat && c->g.parse_calls) srv_tools_stream(c, i, true, &oai_sink);
	if (st->chat)
		o = json_pack("{s:i, s:{}, s:n, s:s, s:s}", "index", i, "delta", "logprobs", "finish_reason", stream_finish(c, ch),
			      "token_sha", ch->token_sha);
	else
		o = json_pack("{s:i, s:s, s:n, s:s, s:s}", "index", i, "text", "", "logprobs", "finish_reason", finish_name(ch),
			      "token_sha", ch->token_sha);
	srv_finish_note(o, ch);
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

static json_t *oai_reply(srv_call *c) {
	oai_state *st = c->st;
	json_t *choices = json_array();
	for (int i = 0; i < c->n && choices; i++) {
		const srv_choice *ch = &c->ch[i];
		const char *text = ch->text.p ? ch->text.p : "";
		json_t *o;
		if (st->chat) {
			json_t *lp = c->g.lr.logprobs ? json_pack("{s:O, s:n}", "content", st->lp[i], "refusal") : json_null();
			size_t clen = ch->text.len;
			json_t *calls = NULL;
			if (c->g.parse_calls && srv_tool_calls(c, i, &clen, &calls)) {
				json_decref(lp);
				json_decref(choices);
				return NULL;
			}
			const bool with_calls = calls && json_array_size(calls);
			o = json_pack("{s:i, s:{s:s, s:s%, s:n}, s:o, s:s, s:s}", "index", i, "message", "role", "assistant", "content",
				      text, clen, "refusal", "logprobs", lp, "finish_reason", with_calls && !srv_choice_cut(ch) ? "tool_calls" : finish_name(ch),
				      "token_sha", ch->token_sha);
			json_t *msg = json_object_get(o, "message");
			if (msg && ch->rs.thought)
				json_object_set_new(msg, "reasoning_content", json_stringn(ch->thinking.p ? ch->thinking.p : "", ch->thinking.len));
			if (msg && with_calls) {
				// content null when the turn is only calls, as OpenAI sends it
				size_t sp = 0;
				while (sp < clen && strchr(" \t\r\n", text[sp])) sp++;
				if (sp == clen) json_object_set_new(msg, "content", json_null());
				json_t *tc = json_array();
				size_t k;
				json_t *v;
				json_array_foreach(calls, k, v) json_array_append_new(tc, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id",
						json_object_get(v, "id"), "type", "function", "function", "name", json_object_get(v, "name"),
						"arguments", json_object_get(v, "arguments")));
				json_object_set_new(msg, "tool_calls", tc);
			}
			json_decref(calls);
		} else {
			srv_buf t = {0};
			if (st->echo) srv_buf_adds(&t, st->echo_text);
			srv_buf_add(&t, text, ch->text.len);
			json_t *lp = json_null();
			if (c->g.lr.logprobs && st->echo_lp) {
				// the prompt's entries first, then the generated ones
				json_t *a[4] = {json_array(), json_array(), json_array(), json_array()};
				if (a[0] && a[1] && a[2] && a[3]) {
					cmpl_prompt_lp(c, i, a[0], a[1], a[2], a[3]);
					json_array_extend(a[0], st->lp[i]), json_array_extend(a[1], st->lp_lp[i]);
					json_array_extend(a[2], st->lp_top[i]), json_array_extend(a[3], st->lp_off[i]);
				}
				json_decref(lp);
				lp = json_pack("{s:o*, s:o*, s:o*, s:o*}", "tokens", a[0], "token_logprobs", a[1], "top_logprobs", a[2], "text_offset", a[3]);
			} else if (c->g.lr.logprobs) {
				json_decref(lp);
				lp = cmpl_lp_object(st, i);
			}
			o = json_pack("{s:i, s:s%, s:o, s:s, s:s}", "index", i, "text", t.p ? t.p : "", t.len, "logprobs", lp,
				      "finish_reason", finish_name(ch), "token_sha", ch->token_sha);
			if (o && st->prompt_k >= 0) json_object_set_new(o, "prompt_logprobs", vllm_prompt_lp(c, i, st->prompt_k));
			srv_buf_free(&t);
		}
		srv_finish_note(o, ch);
		if (!o) {
			json_decref(choices);
			return NULL;
		}
		json_array_append_new(choices, o);
	}
	if (!choices) return NULL;
	json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:o, s:I}", "id", c->id, "object",
			      st->chat ? "chat.completion" : "text_completion", "created", (json_int_t)c->created, "model",
			      srv_call_model(c), "system_fingerprint", "lanes", "choices", choices, "usage", usage(c), "seed",
			      (json_int_t)c->g.lr.sampling.seed);
	// vLLM puts a chat's prompt log-probabilities beside the choices (one prompt for all)
	if (r && st->chat && st->prompt_k >= 0 && c->n) json_object_set_new(r, "prompt_logprobs", vllm_prompt_lp(c, 0, st->prompt_k));
	return r;
}

static const srv_api oai_api = {.begin = oai_begin, .text = oai_text, .thinking = oai_thinking, .choice_end = oai_choice_end, .done = oai_done, .reply = oai_reply, .free_state = oai_free, .family = SRV_OPENAI};

// ---- parsing ------------------------------------------------------------------------------------

// One request of either endpoint as read.
typedef struct {
	srv_gen g;
	json_t *messages, *prompt;   // chat; completions
	json_t *response_format, *tools, *tool_choice, *modalities, *store, *suffix, *function_call;
	json_t *prompt_logprobs;     // vLLM's: alternatives per prompt token
	const char *grammar;         // GBNF text (llama-server's extension)
	json_t *json_schema;         // a JSON Schema (llama-server's extension)
	bool parallel_tool_calls;
	bool echo;                   // completions
	int best_of;                 // completions (0: not sent)
	bool include_usage;          // stream_options.include_usage
} oai_req;

// OpenAI's bounds where they are narrower than the host's; -100 bans a token.
#define OAI_RANGES {[LANE_F_MAX_TOKENS] = LANE_RANGE(1, INT32_MAX), [LANE_F_TEMPERATURE] = LANE_RANGE(0, 2), \
		    [LANE_F_LOGIT_BIAS] = LANE_RANGE(-100, 100)}
static const lane_api chat_api = {.name = {[LANE_F_PROMPT] = "messages"}, .range = OAI_RANGES};
static const lane_api cmpl_api = {.name = {[LANE_F_PROMPT] = "prompt", [LANE_F_TOP_LOGPROBS] = "logprobs"}, .range = OAI_RANGES};

static const srv_field stream_options_fields[] = {
	SRV_ROW(oai_req, include_usage, SRV_K_BOOL),
	SRV_IGNORED_AS("include_obfuscation", BOOL),
	{0},
};

// The fields both endpoints read.
static const srv_field oai_fields[] = {
	{NULL, SRV_K_INCLUDE, .off = offsetof(oai_req, g), .sub = srv_gen_fields},
	{"temperature", SRV_K_NUM, LANE_F_TEMPERATURE, offsetof(oai_req, g.lr.sampling.temperature), .sub = NULL},
	{"top_p", SRV_K_NUM, LANE_F_TOP_P, offsetof(oai_req, g.lr.sampling.top_p), .sub = NULL},
	{"presence_penalty", SRV_K_NUM, LANE_F_PRESENCE_PENALTY, offsetof(oai_req, g.lr.sampling.presence_penalty), .sub = NULL},
	{"frequency_penalty", SRV_K_NUM, LANE_F_FREQUENCY_PENALTY, offsetof(oai_req, g.lr.sampling.frequency_penalty), .sub = NULL},
	{"repeat_penalty", SRV_K_NUM, LANE_F_REPEAT_PENALTY, offsetof(oai_req, g.lr.sampling.repeat_penalty), .sub = NULL},
	{"n", SRV_K_CHOICES, .off = offsetof(oai_req, g.n)},
	{"stop", SRV_K_STOPS, LANE_F_STOP, offsetof(oai_req, g.stops), .sub = NULL},
	{"logit_bias", SRV_K_BIAS, LANE_F_LOGIT_BIAS, offsetof(oai_req, g.bias), .sub = NULL},
	{"stream_options", SRV_K_OBJECT, .sub = stream_options_fields},
	{"max_tokens", SRV_K_INT, LANE_F_MAX_TOKENS, offsetof(oai_req, g.lr.max_tokens), .sub = NULL},
	SRV_ROW(oai_req, grammar, SRV_K_STR),
	SRV_ROW(oai_req, json_schema, SRV_K_JSON),
	SRV_ROW(oai_req, prompt_logprobs, SRV_K_JSON),
	SRV_IGNORED_AS("user", STR),
	{0},
};

static const srv_field chat_fields[] = {
	{NULL, SRV_K_INCLUDE, .sub = oai_fields},
	SRV_ROW(oai_req, messages, SRV_K_JSON),
	{"max_completion_tokens", SRV_K_INT, LANE_F_MAX_TOKENS, offsetof(oai_req, g.lr.max_tokens), .sub = NULL},
	{"logprobs", SRV_K_BOOL, .off = offsetof(oai_req, g.lr.logprobs)},
	{"top_logprobs", SRV_K_INT, LANE_F_TOP_LOGPROBS, offsetof(oai_req, g.lr.top_logprobs), .sub = NULL},
	SRV_ROW(oai_req, store, SRV_K_JSON),
	SRV_ROW(oai_req, response_format, SRV_K_JSON),
	SRV_ROW(oai_req, tools, SRV_K_JSON),
	SRV_ROW(oai_req, tool_choice, SRV_K_JSON),
	SRV_ROW(oai_req, modalities, SRV_K_JSON),
	SRV_ROW(oai_req, parallel_tool_calls, SRV_K_BOOL),
	// documented, and not done here: hosted features, audio, the deprecated functions
	SRV_NAMED_AS("service_tier", STR),
	SRV_NAMED_AS("audio", OBJECT),
	SRV_ROW(oai_req, function_call, SRV_K_JSON),
	SRV_NAMED_AS("functions", ARRAY),
	SRV_NAMED_AS("moderation", OBJECT),
	SRV_NAMED_AS("prediction", OBJECT),
	SRV_NAMED_AS("verbosity", STR),
	SRV_NAMED_AS("web_search_options", OBJECT),
	{0},
};

static const srv_field cmpl_fields[] = {
	{NULL, SRV_K_INCLUDE, .sub = oai_fields},
	SRV_ROW(oai_req, prompt, SRV_K_JSON),
	{"logprobs", SRV_K_INT, LANE_F_TOP_LOGPROBS, offsetof(oai_req, g.lr.top_logprobs), .sub = NULL},
	SRV_ROW(oai_req, echo, SRV_K_BOOL),
	SRV_ROW(oai_req, suffix, SRV_K_JSON),
	SRV_ROW(oai_req, best_of, SRV_K_CHOICES),
	{0},
};

// What tells the two endpoints apart.
typedef struct {
	const srv_field *fields;
	const lane_api *api;
	bool chat;
	int32_t max_tokens;          // the default (0: the rest of the context)
	const char *id_prefix;
} oai_endpoint;
static const oai_endpoint chat_ep = {chat_fields, &chat_api, true, 0, "chatcmpl-"};
static const oai_endpoint cmpl_ep = {cmpl_fields, &cmpl_api, false, 16, "cmpl-"};

// Fields lanes honours only at their neutral value: checked, and named when they ask more.
static int neutral(srv_conn *c, const oai_req *r, srv_err *e) {
	json_t *v;
	if ((v = r->modalities)) {
		size_t k;
		json_t *m;
		bool text_only = true, ok = json_is_array(v);
		json_array_foreach(v, k, m) {
			const char *x = json_string_value(m);
			ok &= x && (!strcmp(x, "text") || !strcmp(x, "audio"));
			text_only &= x && !strcmp(x, "text");
		}
		if (!ok) return srv_fail(e, SRV_E_BAD_REQUEST, "modalities", "modalities must be an array of \"text\" and \"audio\"");
		if (!text_only) srv_ignored_add(c, "modalities"); // no audio comes out: the reply is text
	}
	if ((v = r->function_call) && !json_is_string(v) && !json_is_object(v))
		return srv_fail(e, SRV_E_BAD_REQUEST, "function_call", "function_call must be \"none\", \"auto\" or {\"name\"}");
	if (v) srv_ignored_add(c, "function_call"); // the deprecated functions: tools take their place
	if ((v = r->store) && !json_is_boolean(v)) return srv_fail(e, SRV_E_BAD_REQUEST, "store", "store must be a boolean");
	if (json_is_true(v)) srv_ignored_add(c, "store"); // completions are not stored
	if ((v = r->suffix) && !json_is_string(v)) return srv_fail(e, SRV_E_BAD_REQUEST, "suffix", "suffix must be a string");
	return 0;
}

// response_format, grammar and json_schema into the request's grammar; tools and tool_choice.
static int oai_constrain(srv_model *M, oai_req *r, srv_err *e) {
	json_t *rf = r->response_format, *schema = NULL;
	const char *type = NULL;
	if (rf) {
		type = json_string_value(json_object_get(rf, "type"));
		if (!type || (strcmp(type, "text") && strcmp(type, "json_object") && strcmp(type, "json_schema")))
			return srv_fail(e, SRV_E_BAD_REQUEST, "response_format",
					"response_format.type must be \"text\", \"json_object\" or \"json_schema\"");
		if (!strcmp(type, "text")) type = NULL;
	}
	if (type && !strcmp(type, "json_schema")) {
		json_t *js = json_object_get(rf, "json_schema");
		if (!json_is_object(js))
			return srv_fail(e, SRV_E_BAD_REQUEST, "response_format.json_schema",
					"response_format.json_schema must be an object {name, schema, strict}");
		json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict");
		if (name && !json_is_string(name))
			return srv_fail(e, SRV_E_BAD_REQUEST, "response_format.json_schema.name", "response_format.json_schema.name must be a string");
		if (strict && !json_is_boolean(strict) && !json_is_null(strict))
			return srv_fail(e, SRV_E_BAD_REQUEST, "response_format.json_schema.strict", "response_format.json_schema.strict must be a boolean");
		if (!(schema = json_object_get(js, "schema")))
			return srv_fail(e, SRV_E_BAD_REQUEST, "response_format.json_schema.schema", "response_format.json_schema.schema is required");
	}
	// llama-server's {type: json_object, schema}
	if (type && !strcmp(type, "json_object")) schema = json_object_get(rf, "schema");
	const int formats = !!type + !!r->grammar + !!r->json_schema;
	if (formats > 1)
		return srv_fail(e, SRV_E_BAD_REQUEST, r->grammar ? "grammar" : "json_schema",
				"send one of response_format, json_schema and grammar");
	enum tool_choice choice;
	const char *name;
	if (srv_tool_choice(r->tool_choice, false, &choice, &name, e)) return -1;
	if (json_is_array(r->tools)) {
		size_t k;
		json_t *t;
		json_array_foreach(r->tools, k, t) {
			const char *ty = json_string_value(json_object_get(t, "type"));
			if (!ty || strcmp(ty, "function"))
				return srv_fail(e, SRV_E_BAD_REQUEST, "tools", "tools[%zu].type must be \"function\"", k);
		}
	}
	const bool calls = json_array_size(r->tools) && choice != TOOL_CHOICE_NONE;
	// a format joins the calls (gen/tools.c); a GBNF text of the client's own cannot
	if (r->grammar && calls)
		return srv_fail(e, SRV_E_BAD_REQUEST, "grammar",
				"grammar cannot be combined with tool calls: send tool_choice \"none\", leave out the tools, or use response_format");
	int rc = 0;
	if (schema) rc = srv_grammar_schema(&r->g, schema, !strcmp(type, "json_schema") ? "response_format.json_schema.schema" : "response_format.schema", e);
	else if (type) rc = srv_grammar_json_object(&r->g, e);
	else if (r->grammar) rc = srv_grammar_text(&r->g, r->grammar, strlen(r->grammar), "grammar", e);
	else if (r->json_schema) rc = srv_grammar_schema(&r->g, r->json_schema, "json_schema", e);
	if (rc) return rc;
	return srv_tools_set(M, &r->g, r->tools, choice, name, r->parallel_tool_calls, "tools", "function.parameters", e);
}

// The body read with the endpoint's fields and checked against the request contract;
// top_logprobs is -1 when neither top_logprobs nor completions' logprobs was sent.
static int oai_read(srv_conn *c, json_t **j, const oai_endpoint *ep, oai_req *r, srv_err *e) {
	memset(r, 0, sizeof *r);
	srv_gen_init(&r->g, ep->api, c);
	r->g.lr.max_tokens = ep->max_tokens;
	r->g.lr.top_logprobs = -1;
	r->parallel_tool_calls = true;
	if (srv_parse_body(c, j, e) || srv_fields_known(*j, ep->fields, NULL, e) ||
	    srv_fields_read(*j, ep->fields, r, NULL, &r->g.api, c, e) || neutral(c, r, e))
		return -1;
	bool sent = r->g.lr.top_logprobs >= 0;
	if (!sent) r->g.lr.top_logprobs = 0;
	if (!ep->chat) r->g.lr.logprobs = sent;
	else if (sent && !r->g.lr.logprobs)
		return srv_fail(e, SRV_E_BAD_REQUEST, "top_logprobs", "top_logprobs needs logprobs: true");
	if (r->best_of && r->best_of != r->g.n) srv_ignored_add(c, "best_of"); // n completions, not the best n of best_of
	if (r->prompt_logprobs) {
		const json_int_t k = json_is_integer(r->prompt_logprobs) ? json_integer_value(r->prompt_logprobs) : -1;
		if (k < 0 || k > LANE_MAX_TOP_LOGPROBS)
			return srv_fail(e, SRV_E_BAD_REQUEST, "prompt_logprobs", "prompt_logprobs must be an integer in 0..%d", LANE_MAX_TOP_LOGPROBS);
		// as vLLM: the prompt's log-probabilities come in the whole reply only
		if (r->g.stream) return srv_fail(e, SRV_E_BAD_REQUEST, "prompt_logprobs", "prompt_logprobs are not available when stream is true");
		r->g.lr.prompt_logprobs = true;
		r->g.lr.prompt_top_logprobs = (int32_t)k;
	}
	return srv_gen_check(c->mdl, &r->g, e) || oai_constrain(c->mdl, r, e);
}

static oai_state *state_new(json_t *j, const oai_req *r, bool chat) {
	oai_state *st = calloc(1, sizeof *st);
	if (!st) return NULL;
	st->j = j;
	st->chat = chat;
	st->include_usage = r->g.stream && r->include_usage;
	st->lp = calloc(SRV_MAX_N, sizeof *st->lp);
	st->lp_top = calloc(SRV_MAX_N, sizeof *st->lp_top);
	st->lp_lp = calloc(SRV_MAX_N, sizeof *st->lp_lp);
	st->lp_off = calloc(SRV_MAX_N, sizeof *st->lp_off);
	st->offset = calloc(SRV_MAX_N, sizeof *st->offset);
	bool ok = st->lp && st->lp_top && st->lp_lp && st->lp_off && st->offset;
	for (int i = 0; ok && i < r->g.n; i++) {
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

// Hands the request to the generation call, or answers its error.
static void oai_run(srv_conn *c, const oai_endpoint *ep, json_t *j, oai_req *r, char *echo_text, srv_err *e) {
	// the prompt's entries, each token and its alternatives, against what a whole reply may hold
	const int64_t entries = r->g.lr.prompt_logprobs ? (int64_t)r->g.n * r->g.lr.n_prompt * (1 + r->g.lr.prompt_top_logprobs) : 0;
	const bool big = !r->g.stream && entries > (int64_t)(c->s->cfg.max_output_bytes / SRV_LOGPROB_BYTES);
	oai_state *st = big ? NULL : state_new(j, r, ep->chat);
	if (big) {
		json_decref(j);
		free(echo_text);
		srv_gen_free(&r->g);
		srv_fail(e, SRV_E_BAD_REQUEST, r->prompt_logprobs ? "prompt_logprobs" : "logprobs",
			 "the prompt's log-probabilities (%lld entries) would pass the %zu bytes a reply may hold (%s): stream, or ask fewer",
			 (long long)entries, c->s->cfg.max_output_bytes, HTTP_SETTING(&c->s->cfg, max_output_bytes));
		srv_reply_error(c, e);
		return;
	}
	if (!st) {
		json_decref(j);
		free(echo_text);
		srv_gen_free(&r->g);
		srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
		srv_reply_error(c, e);
		return;
	}
	st->echo = r->echo;
	st->echo_lp = r->echo && r->g.lr.logprobs;
	st->prompt_k = r->prompt_logprobs ? (int32_t)json_integer_value(r->prompt_logprobs) : -1;
	st->echo_text = echo_text;
	// with the prompt's entries the offsets run over the listed tokens' texts, generated ones after them
	size_t off = r->echo ? strlen(echo_text) : 0;
	if (st->echo_lp) {
		off = 0;
		for (int32_t p = 0; p < r->g.lr.n_prompt; p++) {
			char *t = srv_token_text(c->mdl, r->g.prompt[p], NULL);
			off += t ? strlen(t) : 0;
			free(t);
		}
	}
	for (int i = 0; i < r->g.n; i++) st->offset[i] = off;
	srv_gen_run(c, &oai_api, st, &r->g, ep->id_prefix);
}

void srv_chat_completions(srv_conn *c) {
	srv_err e;
	json_t *j = NULL, *flat = NULL;
	oai_req r;
	if (oai_read(c, &j, &chat_ep, &r, &e) || srv_check_parts(c->mdl, r.messages, "messages", &e) ||
	    srv_openai_messages(r.messages, c, &flat, &e) ||
	    srv_chat_prompt(c->mdl, flat, NULL, "messages", &r.g, &r.g.prompt, &r.g.lr.n_prompt, &e)) {
		json_decref(j);
		json_decref(flat);
		srv_gen_free(&r.g);
		srv_reply_error(c, &e);
		return;
	}
	json_decref(flat);
	oai_run(c, &chat_ep, j, &r, NULL, &e);
}

// The completion prompt: a string, token ids, or a one-element array of either; with a
// non-empty suffix, a string continued up to that suffix.
static int cmpl_prompt(srv_model *M, json_t *p, json_t *suffix, srv_gen *g, char **echo, srv_err *e) {
	if (json_is_array(p) && json_array_size(p) == 1 &&
	    (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
		p = json_array_get(p, 0);
	char err[256];
	// a list of several prompts (strings or id lists) is a batch: say so rather than call it a bad id
	if (json_is_array(p) && json_array_size(p) > 1 && (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
		return srv_fail(e, SRV_E_BAD_REQUEST, "prompt",
				"batch prompts are not supported: %zu prompts were sent, send one per request (or n for several completions of one)",
				json_array_size(p));
	const size_t n_suffix = json_string_length(suffix);
	if (n_suffix && !json_is_string(p))
		return srv_fail(e, SRV_E_BAD_REQUEST, "suffix", "suffix needs the prompt as a string (its text is what comes before the insertion)");
	if (json_is_string(p)) {
		size_t n = 0;
		if (lane_check_prompt_size(M->host, 0, json_string_length(p) + n_suffix, &g->api, err, sizeof err, NULL)) {
			srv_fail(e, SRV_E_BAD_REQUEST, "prompt", "%s", err);
			snprintf(e->code, sizeof e->code, "context_length_exceeded");
			return -1;
		}
		// a suffix makes it a fill-in-the-middle prompt: the insertion between prompt and suffix
		const chat_fim f = {.prefix = json_string_value(p), .prefix_len = json_string_length(p),
				    .suffix = json_string_value(suffix), .suffix_len = n_suffix};
		int rc = n_suffix ? chat_fim_prompt(M->vocab, &f, &g->prompt, &n, err, sizeof err)
				  : tok_encode(M->vocab, json_string_value(p), json_string_length(p), true, true, &g->prompt, &n, err, sizeof err);
		if (rc) return srv_fail(e, srv_kind_of(rc, SRV_BLAME_REQUEST), n_suffix ? "suffix" : "prompt", "%s", err);
		if (n > (size_t)INT32_MAX / 2) return srv_fail(e, SRV_E_BAD_REQUEST, "prompt", "the prompt is too long");
		g->lr.n_prompt = (int32_t)n;
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
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= M->n_vocab) {
			char pp[48];
			snprintf(pp, sizeof pp, "prompt[%zu]", i);
			return srv_fail(e, SRV_E_BAD_REQUEST, pp, "%s must be a token id in 0..%d (one prompt per request)", pp, M->n_vocab - 1);
		}
		g->prompt[i] = (int32_t)json_integer_value(v);
	}
	g->lr.n_prompt = (int32_t)n;
	size_t len;
	if (tok_detokenize(M->vocab, g->prompt, n, TOK_DECODE_STRIP_SPACE, echo, &len, err, sizeof err))
		return srv_fail(e, SRV_E_BAD_REQUEST, "prompt", "%s", err);
	return 0;
}

void srv_completions(srv_conn *c) {
	srv_err e;
	json_t *j = NULL;
	char *echo_text = NULL;
	oai_req r;
	int rc = oai_read(c, &j, &cmpl_ep, &r, &e);
	// echo with logprobs: the prompt's entries too, from the prompt pass itself
	if (!rc && r.echo && r.g.lr.logprobs) {
		r.g.lr.prompt_logprobs = true;
		if (r.g.lr.prompt_top_logprobs < r.g.lr.top_logprobs) r.g.lr.prompt_top_logprobs = r.g.lr.top_logprobs;
	}
	if (!rc && !r.prompt) rc = srv_fail(&e, SRV_E_BAD_REQUEST, "prompt", "prompt is required");
	if (!rc) rc = cmpl_prompt(c->mdl, r.prompt, r.suffix, &r.g, &echo_text, &e);
	if (rc) {
		json_decref(j);
		free(echo_text);
		srv_gen_free(&r.g);
		srv_reply_error(c, &e);
		return;
	}
	oai_run(c, &cmpl_ep, j, &r, echo_text, &e);
}
