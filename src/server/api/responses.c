// server/api/responses: the OpenAI Responses adapter (POST /v1/responses) — input and
// instructions into the chat template, the response object, and the event stream that
// the official client's responses.stream() accumulates (created … completed), with
// response.failed for a request that ends failed; finished responses kept (api/store.h) for
// previous_response_id and GET/DELETE /v1/responses/{id}.
#include "server/api/store.h"
#include "server/gen/gen.h"
#include "server/routes.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	json_t *j;                 // the request
	char item_id[64];          // the output message's id
	json_t *instructions;      // echoed back (null when absent)
	json_t *max_output_tokens; // echoed back
	double temperature, top_p;
	bool truncation_auto;      // echoed back: "auto" when sent, else "disabled"
	int items;                 // stream: output items added
	bool msg_open;             // stream: the message item is open
	bool rs_open;              // stream: the reasoning item is open
	size_t msg_len;            // stream: bytes of its text sent
	srv_stream_seen seen;      // stream: the response it opened with, for its failure
	json_t *previous;          // echoed back: previous_response_id (null when absent)
	json_t *kept_input;        // the input items to keep with the finished response (NULL: not kept)
} resp_state;

static void resp_free(void *p) {
	resp_state *st = p;
	if (!st) return;
	json_decref(st->j);
	json_decref(st->seen.response);
	json_decref(st->instructions);
	json_decref(st->max_output_tokens);
	json_decref(st->previous);
	json_decref(st->kept_input);
	free(st);
}

static json_t *usage(const srv_call *c) {
	int32_t gen = srv_call_generated(c);
	return json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens", c->g.lr.n_prompt, "input_tokens_details",
			 "cached_tokens", c->ch[0].n_cached, "output_tokens", gen, "output_tokens_details", "reasoning_tokens", srv_call_thought(c),
			 "total_tokens", c->g.lr.n_prompt + gen);
}

static json_t *text_part(const char *text, size_t len) {
	return json_pack("{s:s, s:s%, s:[], s:[]}", "type", "output_text", "text", text, len, "annotations", "logprobs");
}

// The output message with the first len bytes of text; with_text false: an empty content list.
static json_t *message_item_n(srv_call *c, const char *status, bool with_text, size_t len) {
	resp_state *st = c->st;
	const srv_buf *t = &c->ch[0].text;
	json_t *content = with_text ? json_pack("[o]", text_part(t->p ? t->p : "", len)) : json_array();
	return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", st->item_id, "type", "message", "status", status, "role",
			 "assistant", "content", content);
}

static json_t *message_item(srv_call *c, const char *status, bool with_text) {
	return message_item_n(c, status, with_text, c->ch[0].text.len);
}

// A function_call output item; its id follows from the call's id.
static json_t *call_item(const char *call_id, const char *name, size_t name_len, const char *args, size_t args_len,
			 const char *status) {
	char id[80];
	snprintf(id, sizeof id, "fc_%s", strncmp(call_id, "call_", 5) ? call_id : call_id + 5);
	return json_pack("{s:s, s:s, s:s, s:s%, s:s%, s:s}", "id", id, "type", "function_call", "call_id", call_id, "name", name,
			 name_len, "arguments", args, args_len, "status", status);
}

// The reasoning item: its id follows from the message's.
static json_t *reasoning_item(srv_call *c, const char *status, bool with_text) {
	resp_state *st = c->st;
	const srv_buf *t = &c->ch[0].thinking;
	char id[80];
	snprintf(id, sizeof id, "rs_%s", st->item_id + 4);
	json_t *content = with_text ? json_pack("[{s:s, s:s%}]", "type", "reasoning_text", "text", t->p ? t->p : "", t->len) : json_array();
	return json_pack("{s:s, s:s, s:[], s:o, s:s}", "id", id, "type", "reasoning", "summary", "content", content, "status", status);
}

// The output items of the finished text: the reasoning, a message (unless the turn is calls
// alone) and the calls.
static json_t *output_items(srv_call *c, const char *status) {
	size_t clen = c->ch[0].text.len;
	json_t *calls = NULL;
	if (srv_tool_calls(c, 0, &clen, &calls)) return NULL;
	json_t *out = json_array();
	if (c->ch[0].rs.thought) json_array_append_new(out, reasoning_item(c, status, true));
	const char *t = c->ch[0].text.p ? c->ch[0].text.p : "";
	size_t sp = 0;
	while (sp < clen && strchr(" \t\r\n", t[sp])) sp++;
	if (sp < clen || !json_array_size(calls)) json_array_append_new(out, message_item_n(c, status, true, clen));
	size_t k;
	json_t *v;
	json_array_foreach(calls, k, v) {
		const char *n = json_string_value(json_object_get(v, "name")), *a = json_string_value(json_object_get(v, "arguments"));
		json_array_append_new(out, call_item(json_string_value(json_object_get(v, "id")), n, strlen(n), a, strlen(a),
						     json_is_true(json_object_get(v, "whole")) ? "completed" : "incomplete"));
	}
	json_decref(calls);
	return out;
}

// The response object in a given status; output and usage as far as they are known.
static json_t *response(srv_call *c, const char *status, json_t *output, bool with_usage) {
	resp_state *st = c->st;
	json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:n, s:n, s:O, s:O, s:s, s:o, s:b, s:O, s:{s:n, s:n}, s:b, s:f, s:{s:{s:s}}, "
			      "s:s, s:[], s:f, s:s, s:n, s:{}}",
			      "id", c->id, "object", "response", "created_at", (json_int_t)c->created, "status", status, "error",
			      "incomplete_details", "instructions", st->instructions, "max_output_tokens", st->max_output_tokens,
			      "model", srv_call_model(c), "output", output ? output : json_array(), "parallel_tool_calls", 0,
			      "previous_response_id", st->previous, "reasoning", "effort", "summary", "store", st->kept_input != NULL, "temperature", st->temperature,
			      "text", "format", "type", "text", "tool_choice", "auto", "tools", "top_p", st->top_p, "truncation",
			      st->truncation_auto ? "auto" : "disabled", "user", "metadata");
	if (!r) return NULL;
	json_object_set_new(r, "usage", with_usage ? usage(c) : json_null());
	return r;
}

static json_t *final_response(srv_call *c) {
	resp_state *st = c->st;
	const srv_choice *ch = &c->ch[0];
	bool incomplete = srv_choice_cut(ch);
	json_t *r = response(c, incomplete ? "incomplete" : "completed", output_items(c, incomplete ? "incomplete" : "completed"), true);
	if (!r) return NULL;
	if (incomplete) {
		json_t *d = json_pack("{s:s}", "reason", "max_output_tokens");
		srv_finish_note(d, ch);
		json_object_set_new(r, "incomplete_details", d);
	}
	json_object_set_new(r, "token_sha", json_string(ch->token_sha));
	json_object_set_new(r, "seed", json_integer((json_int_t)c->g.lr.sampling.seed));
	// kept as it is answered: a response that failed or was cancelled never gets here
	if (st->kept_input) srv_store_put(c->s->responses, c->id, r, st->kept_input);
	return r;
}

// One event: its type and sequence number go into data.
static void event(srv_call *c, const char *type, json_t *data) {
	if (data) {
		json_object_set_new(data, "type", json_string(type));
		json_object_set_new(data, "sequence_number", json_integer(c->seq++));
	}
	srv_sse(c, type, data);
}

static void rs_close(srv_call *c) {
	resp_state *st = c->st;
	if (!st->rs_open) return;
	const srv_buf *t = &c->ch[0].thinking;
	json_t *item = reasoning_item(c, "completed", true);
	json_t *id = json_incref(json_object_get(item, "id"));
	event(c, "response.reasoning_text.done",
	      json_pack("{s:O, s:i, s:i, s:s%}", "item_id", id, "output_index", st->items, "content_index", 0, "text", t->p ? t->p : "", t->len));
	event(c, "response.content_part.done", json_pack("{s:O, s:i, s:i, s:{s:s, s:s%}}", "item_id", id, "output_index", st->items,
							 "content_index", 0, "part", "type", "reasoning_text", "text", t->p ? t->p : "", t->len));
	event(c, "response.output_item.done", json_pack("{s:i, s:o}", "output_index", st->items, "item", item));
	json_decref(id);
	st->items++;
	st->rs_open = false;
}

static void resp_thinking(srv_call *c, int i, const char *text, size_t len) {
	resp_state *st = c->st;
	char id[80];
	snprintf(id, sizeof id, "rs_%s", st->item_id + 4);
	if (!st->rs_open) {
		st->rs_open = true;
		event(c, "response.output_item.added",
		      json_pack("{s:i, s:o}", "output_index", st->items, "item", reasoning_item(c, "in_progress", false)));
		event(c, "response.content_part.added", json_pack("{s:s, s:i, s:i, s:{s:s, s:s}}", "item_id", id, "output_index", st->items,
								  "content_index", 0, "part", "type", "reasoning_text", "text", ""));
	}
	event(c, "response.reasoning_text.delta",
	      json_pack("{s:s, s:i, s:i, s:s%}", "item_id", id, "output_index", st->items, "content_index", 0, "delta", text, len));
}

static void msg_open(srv_call *c) {
	resp_state *st = c->st;
	rs_close(c);
	st->msg_open = true;
	event(c, "response.output_item.added",
	      json_pack("{s:i, s:o}", "output_index", st->items, "item", message_item(c, "in_progress", false)));
	event(c, "response.content_part.added", json_pack("{s:s, s:i, s:i, s:o}", "item_id", st->item_id, "output_index", st->items,
							  "content_index", 0, "part", text_part("", 0)));
}

static void msg_delta(srv_call *c, const char *text, size_t len) {
	resp_state *st = c->st;
	st->msg_len += len;
	event(c, "response.output_text.delta", json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", st->item_id, "output_index",
							 st->items, "content_index", 0, "delta", text, len, "logprobs"));
}

// Closes the message item with the text sent so far.
static void msg_close(srv_call *c, const char *status) {
	resp_state *st = c->st;
	const char *text = c->ch[0].text.p ? c->ch[0].text.p : "";
	const size_t len = st->msg_len;
	event(c, "response.output_text.done", json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", st->item_id, "output_index",
							st->items, "content_index", 0, "text", text, len, "logprobs"));
	event(c, "response.content_part.done", json_pack("{s:s, s:i, s:i, s:o}", "item_id", st->item_id, "output_index", st->items,
							 "content_index", 0, "part", text_part(text, len)));
	event(c, "response.output_item.done", json_pack("{s:i, s:o}", "output_index", st->items, "item", message_item_n(c, status, true, len)));
	st->items++;
	st->msg_open = false;
}

static void sink_content(srv_call *c, int i, const char *text, size_t len) {
	resp_state *st = c->st;
	if (!st->msg_open) msg_open(c);
	msg_delta(c, text, len);
}

static void sink_start(srv_call *c, int i, int k, const char *id, const char *name, size_t name_len) {
	resp_state *st = c->st;
	rs_close(c);
	if (st->msg_open) msg_close(c, "completed");
	event(c, "response.output_item.added",
	      json_pack("{s:i, s:o}", "output_index", st->items, "item", call_item(id, name, name_len, "", 0, "in_progress")));
}

static void sink_args(srv_call *c, int i, int k, const char *text, size_t len) {
	resp_state *st = c->st;
	char item[80];
	snprintf(item, sizeof item, "fc_%s", c->ch[0].tools.ids ? json_string_value(json_array_get(c->ch[0].tools.ids, (size_t)k)) + 5 : "");
	event(c, "response.function_call_arguments.delta",
	      json_pack("{s:s, s:i, s:s%}", "item_id", item, "output_index", st->items, "delta", text, len));
}

static void sink_end(srv_call *c, int i, int k, const char *id, json_t *call) {
	resp_state *st = c->st;
	const char *n = json_string_value(json_object_get(call, "name")), *a = json_string_value(json_object_get(call, "arguments"));
	// a call cut short ends with the arguments it has, incomplete
	json_t *item = call_item(id, n ? n : "", n ? strlen(n) : 0, a ? a : "", a ? strlen(a) : 0,
				 json_is_true(json_object_get(call, "whole")) ? "completed" : "incomplete");
	event(c, "response.function_call_arguments.done",
	      json_pack("{s:O, s:i, s:s}", "item_id", json_object_get(item, "id"), "output_index", st->items, "arguments", a ? a : ""));
	event(c, "response.output_item.done", json_pack("{s:i, s:o}", "output_index", st->items, "item", item));
	st->items++;
}

static const srv_tool_sink resp_sink = {sink_content, sink_start, sink_args, sink_end};

static void resp_begin(srv_call *c) {
	resp_state *st = c->st;
	json_t *r = response(c, "in_progress", NULL, false);
	st->seen.response = json_incref(r); // never changed after: the failure repeats it
	event(c, "response.created", json_pack("{s:o}", "response", r));
	event(c, "response.in_progress", json_pack("{s:o}", "response", response(c, "in_progress", NULL, false)));
	// with tools or thinking the items open as the text shows what they are
	if (!c->g.parse_calls && !c->g.reasoning) msg_open(c);
}

static void resp_text(srv_call *c, int i, const char *text, size_t len, const lane_event *tok) {
	if (!c->g.stream) return;
	resp_state *st = c->st;
	if (c->g.parse_calls) srv_tools_stream(c, 0, false, &resp_sink);
	else if (len && !st->msg_open) sink_content(c, 0, text, len);
	else if (len) msg_delta(c, text, len);
}

static void resp_done(srv_call *c) {
	resp_state *st = c->st;
	const srv_choice *ch = &c->ch[0];
	bool incomplete = srv_choice_cut(ch);
	if (c->g.parse_calls) srv_tools_stream(c, 0, true, &resp_sink);
	// a reply that never left its thinking still ends with its message, as the reply's output does
	if ((!st->items && !st->msg_open) || (st->rs_open && !c->g.parse_calls)) msg_open(c);
	rs_close(c);
	if (st->msg_open) msg_close(c, incomplete ? "incomplete" : "completed");
	event(c, incomplete ? "response.incomplete" : "response.completed", json_pack("{s:o}", "response", final_response(c)));
}

// The family's response.failed, after the response the stream opened with: what a relay of
// this stream would send in its place.
static void resp_fail(srv_call *c) {
	resp_state *st = c->st;
	st->seen.seq = c->seq;
	srv_stream_error(SRV_RESPONSES, &c->out, &st->seen, c->fail_reason);
	c->seq = st->seen.seq;
}

static json_t *resp_reply(srv_call *c) { return final_response(c); }

static const srv_api resp_api = {.begin = resp_begin, .text = resp_text, .thinking = resp_thinking, .done = resp_done, .fail = resp_fail, .reply = resp_reply, .free_state = resp_free, .family = SRV_RESPONSES};

// ---- parsing ------------------------------------------------------------------------------------

// A request as read.
typedef struct {
	srv_gen g;
	json_t *input;
	const char *instructions;
	const char *truncation;    // "auto" or "disabled": a prompt that does not fit is refused either way
	double temperature, top_p; // echoed back as sent
	json_t *store, *previous_response_id, *conversation, *prompt, *tools, *tool_choice, *text, *reasoning, *include, *background;
	bool parallel_tool_calls;
	bool max_sent;             // the request set its limit: echoed back as max_output_tokens (else null)
} resp_req;

// The Responses API's bounds where they are narrower than the host's.
static const lane_api resp_lane_api = {
	.name = {[LANE_F_PROMPT] = "input", [LANE_F_MAX_TOKENS] = "max_output_tokens"},
	.range = {[LANE_F_MAX_TOKENS] = LANE_RANGE(1, INT32_MAX), [LANE_F_TEMPERATURE] = LANE_RANGE(0, 2)},
};

static const srv_field resp_fields[] = {
	{NULL, SRV_K_INCLUDE, .off = offsetof(resp_req, g), .sub = srv_gen_fields},
	SRV_ROW(resp_req, input, SRV_K_JSON),
	SRV_ROW(resp_req, instructions, SRV_K_STR),
	{"max_output_tokens", SRV_K_INT, LANE_F_MAX_TOKENS, offsetof(resp_req, g.lr.max_tokens), .sub = NULL},
	{"temperature", SRV_K_REAL, LANE_F_TEMPERATURE, offsetof(resp_req, temperature), .sub = NULL},
	{"top_p", SRV_K_REAL, LANE_F_TOP_P, offsetof(resp_req, top_p), .sub = NULL},
	SRV_ROW(resp_req, store, SRV_K_JSON),
	SRV_ROW(resp_req, previous_response_id, SRV_K_JSON),
	SRV_ROW(resp_req, tools, SRV_K_JSON),
	SRV_ROW(resp_req, tool_choice, SRV_K_JSON),
	SRV_ROW(resp_req, text, SRV_K_JSON),
	SRV_ROW(resp_req, reasoning, SRV_K_JSON),
	SRV_ROW(resp_req, include, SRV_K_JSON),
	SRV_ROW(resp_req, background, SRV_K_JSON),
	SRV_IGNORED_AS("user", STR),
	SRV_ROW(resp_req, parallel_tool_calls, SRV_K_BOOL),
	SRV_ROW(resp_req, truncation, SRV_K_STR),
	SRV_ROW(resp_req, conversation, SRV_K_JSON),
	SRV_ROW(resp_req, prompt, SRV_K_JSON),
	SRV_IGNORED_AS("stream_options", OBJECT),
	// documented, and not done here: hosted features, and log-probabilities this output lacks
	SRV_NAMED_AS("service_tier", STR),
	SRV_NAMED_AS("client_metadata", OBJECT),
	SRV_NAMED_AS("context_management", ARRAY),
	SRV_NAMED_AS("moderation", OBJECT),
	SRV_NAMED_AS("max_tool_calls", INT),
	SRV_NAMED_AS("top_logprobs", INT),
	{0},
};

// One input item as read.
typedef struct {
	json_t *type, *role, *content;
	json_t *call_id, *name, *arguments, *output; // function_call and function_call_output items
} resp_item;

static const srv_field resp_item_fields[] = {
	SRV_ROW(resp_item, type, SRV_K_JSON),
	SRV_ROW(resp_item, role, SRV_K_JSON),
	SRV_ROW(resp_item, content, SRV_K_JSON),
	SRV_ROW(resp_item, call_id, SRV_K_JSON),
	SRV_ROW(resp_item, name, SRV_K_JSON),
	SRV_ROW(resp_item, arguments, SRV_K_JSON),
	SRV_ROW(resp_item, output, SRV_K_JSON),
	SRV_IGNORED("id"),
	SRV_IGNORED("status"),
	{0},
};

// text's keys (format is checked by value).
static const srv_field text_fields[] = {
	SRV_IGNORED("format"),
	SRV_NAMED_AS("verbosity", STR),
	{0},
};

// reasoning's keys: the effort reaches the template as chat's reasoning_effort; no summary is made.
typedef struct {
	const char *effort;
} resp_reasoning;

static const srv_field reasoning_fields[] = {
	SRV_ROW(resp_reasoning, effort, SRV_K_STR),
	SRV_NAMED_AS("summary", STR),
	SRV_NAMED_AS("generate_summary", STR),
	{0},
};

// What lanes cannot do as asked: named, or refused where going on would answer another
// conversation than the client's.
static int resp_neutral(srv_conn *c, resp_req *r, srv_err *e) {
	json_t *v;
	if ((v = r->store) && !json_is_boolean(v)) return srv_fail(e, SRV_E_BAD_REQUEST, "store", "store must be a boolean");
	if (json_is_true(v) && !c->s->responses) srv_ignored_add(c, "store"); // --responses-store 0: nothing is kept
	if ((v = r->previous_response_id) && !json_is_string(v))
		return srv_fail(e, SRV_E_BAD_REQUEST, "previous_response_id", "previous_response_id must be a string");
	if (r->conversation)
		return srv_fail(e, SRV_E_BAD_REQUEST, "conversation",
				"unsupported parameter: conversation (this server keeps no conversations: send the whole conversation as input)");
	if (r->prompt)
		return srv_fail(e, SRV_E_BAD_REQUEST, "prompt",
				"unsupported parameter: prompt (this server keeps no prompt templates: send instructions and input)");
	if ((v = r->text)) {
		if (!json_is_object(v)) return srv_fail(e, SRV_E_BAD_REQUEST, "text", "text must be an object");
		char none = 0; // its rows store nothing
		if (srv_fields_known(v, text_fields, "text", e) || srv_fields_read(v, text_fields, &none, "text", NULL, c, e)) return -1;
	}
	if ((v = r->reasoning)) {
		resp_reasoning rr = {0};
		if (!json_is_object(v)) return srv_fail(e, SRV_E_BAD_REQUEST, "reasoning", "reasoning must be an object");
		if (srv_fields_known(v, reasoning_fields, "reasoning", e) || srv_fields_read(v, reasoning_fields, &rr, "reasoning", NULL, c, e))
			return -1;
		if (rr.effort && !r->g.reasoning_effort) r->g.reasoning_effort = rr.effort;
	}
	if ((v = r->include)) {
		size_t k;
		json_t *it;
		if (!json_is_array(v)) return srv_fail(e, SRV_E_BAD_REQUEST, "include", "include must be an array of strings");
		json_array_foreach(v, k, it) if (!json_is_string(it))
			return srv_fail(e, SRV_E_BAD_REQUEST, "include", "include[%zu] must be a string", k);
		if (json_array_size(v)) srv_ignored_add(c, "include"); // none of the extras is produced
	}
	if ((v = r->background) && !json_is_boolean(v)) return srv_fail(e, SRV_E_BAD_REQUEST, "background", "background must be a boolean");
	if (json_is_true(v)) srv_ignored_add(c, "background"); // the response is made while the client waits
	const char *tr = r->truncation;
	if (tr && strcmp(tr, "auto") && strcmp(tr, "disabled"))
		return srv_fail(e, SRV_E_BAD_REQUEST, "truncation", "truncation must be \"auto\" or \"disabled\"");
	if (tr && !strcmp(tr, "auto")) srv_ignored_add(c, "truncation"); // a prompt that does not fit is refused, not cut
	return 0;
}

// text.format into the grammar; tools [{type: function, name, description, parameters}] and
// tool_choice as OpenAI chat's.
// A function tool {type, name, description, parameters} onto oai in Chat Completions' shape.
static int resp_function(json_t *oai, json_t *tl, size_t k, srv_err *e) {
	const char *ty = json_string_value(json_object_get(tl, "type"));
	json_t *n = json_object_get(tl, "name"), *d = json_object_get(tl, "description"), *p = json_object_get(tl, "parameters");
	if (!ty || strcmp(ty, "function") || !json_is_string(n) || (d && !json_is_string(d) && !json_is_null(d)) ||
	    (p && !json_is_object(p) && !json_is_null(p)))
		return srv_fail(e, SRV_E_BAD_REQUEST, "tools", "tools[%zu] must be {type: \"function\", name, description, parameters}", k);
	json_t *fn = json_pack("{s:O}", "name", n);
	if (fn && json_is_string(d)) json_object_set(fn, "description", d);
	if (fn && json_is_object(p)) json_object_set(fn, "parameters", p);
	if (fn && json_is_boolean(json_object_get(tl, "strict"))) json_object_set(fn, "strict", json_object_get(tl, "strict"));
	json_array_append_new(oai, json_pack("{s:s, s:o}", "type", "function", "function", fn));
	return 0;
}

static int resp_constrain(srv_model *M, resp_req *r, srv_err *e) {
	json_t *f = json_object_get(r->text, "format");
	const char *t = json_is_null(f) || !f ? "text" : json_string_value(json_object_get(f, "type"));
	if (!t || (strcmp(t, "text") && strcmp(t, "json_object") && strcmp(t, "json_schema")))
		return srv_fail(e, SRV_E_BAD_REQUEST, "text.format",
				"text.format.type must be \"text\", \"json_object\" or \"json_schema\"");
	enum tool_choice choice;
	const char *name;
	if (srv_tool_choice(r->tool_choice, true, &choice, &name, e)) return -1;
	if (r->tools && !json_is_array(r->tools)) return srv_fail(e, SRV_E_BAD_REQUEST, "tools", "tools must be an array");
	int rc = 0;
	if (!strcmp(t, "json_object")) rc = srv_grammar_json_object(&r->g, e);
	if (!strcmp(t, "json_schema")) {
		json_t *sc = json_object_get(f, "schema");
		rc = sc ? srv_grammar_schema(&r->g, sc, "text.format.schema", e)
			: srv_fail(e, SRV_E_BAD_REQUEST, "text.format.schema", "text.format.schema is required");
	}
	if (rc) return rc;
	json_t *oai = json_array();
	size_t k, j;
	json_t *tl, *in;
	json_array_foreach(r->tools, k, tl) {
		const char *ty = json_string_value(json_object_get(tl, "type"));
		json_t *inner = json_object_get(tl, "tools");
		if (ty && !strcmp(ty, "namespace") && json_is_array(inner)) {
			// a namespace groups function tools (Codex's): its functions are offered as they are
			json_array_foreach(inner, j, in) if (resp_function(oai, in, k, e)) return json_decref(oai), -1;
		} else if (ty && strcmp(ty, "function") && json_is_object(tl)) {
			// hosted tools (web_search, file_search, mcp, custom grammars ...) run on OpenAI's side
			char nm[80];
			snprintf(nm, sizeof nm, "tools.%.60s", ty);
			srv_ignored_add(r->g.conn, nm);
		} else if (resp_function(oai, tl, k, e)) {
			return json_decref(oai), -1;
		}
	}
	rc = srv_tools_set(M, &r->g, oai, choice, name, r->parallel_tool_calls, "tools", "parameters", e);
	json_decref(oai);
	return rc;
}

// A function_call input item onto the assistant turn before it (one made when there is none).
static int call_turn(json_t *flat, const resp_item *it, const char *p, srv_err *e) {
	if (!json_is_string(it->call_id) || !json_is_string(it->name) || !json_is_string(it->arguments))
		return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s: a function_call item is {call_id, name, arguments: JSON text}", p);
	json_t *last = json_array_get(flat, json_array_size(flat) - 1);
	const char *role = json_string_value(json_object_get(last, "role"));
	if (!last || !role || strcmp(role, "assistant")) {
		last = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
		json_array_append_new(flat, last);
	}
	json_t *calls = json_object_get(last, "tool_calls");
	if (!calls) json_object_set_new(last, "tool_calls", calls = json_array());
	json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", it->call_id, "type", "function", "function", "name",
					       it->name, "arguments", it->arguments));
	return 0;
}

// The stored conversation previous_response_id names (its input items, then its output items),
// then this request's input, as input items; without it, the input as items. *out NULL: a 404.
static int resp_history(http_server *s, const resp_req *r, json_t **out, srv_err *e) {
	json_t *in = r->input, *prev = NULL, *items = NULL;
	*out = NULL;
	if (!json_is_string(in) && !(json_is_array(in) && json_array_size(in)))
		return srv_fail(e, SRV_E_BAD_REQUEST, "input", "input must be a string or a non-empty array of messages");
	const char *pid = json_string_value(r->previous_response_id);
	if (pid && !srv_store_get(s->responses, pid, &prev, &items)) {
		srv_fail(e, SRV_E_NOT_FOUND, "previous_response_id", "Previous response with id '%.200s' not found.", pid);
		snprintf(e->code, sizeof e->code, "previous_response_not_found");
		return -1;
	}
	if (!items && !(items = json_array())) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	json_array_extend(items, json_object_get(prev, "output"));
	json_decref(prev);
	if (json_is_string(in)) json_array_append_new(items, json_pack("{s:s, s:s, s:O}", "type", "message", "role", "user", "content", in));
	else json_array_extend(items, in);
	// input_items lists items by id, as OpenAI gives every item one; reading them ignores it
	size_t k;
	json_t *it;
	json_array_foreach(items, k, it) {
		if (!json_is_object(it) || json_is_string(json_object_get(it, "id"))) continue;
		const char *ty = json_string_value(json_object_get(it, "type"));
		char id[64];
		srv_new_id(s, ty && !strcmp(ty, "function_call") ? "fc_" : ty && !strcmp(ty, "function_call_output") ? "fco_" : "msg_", id, sizeof id);
		json_object_set_new(it, "id", json_string(id));
	}
	*out = items;
	return 0;
}

// instructions + input into [{role, content}].
static int resp_input(srv_conn *c, const resp_req *r, json_t **out, srv_err *e) {
	static const char *const part_types[] = {"input_text", "output_text", "text", NULL};
	*out = NULL;
	json_t *flat = json_array();
	if (!flat) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	if (r->instructions) json_array_append_new(flat, json_pack("{s:s, s:s}", "role", "system", "content", r->instructions));
	json_t *in = r->input;
	if (json_is_string(in)) {
		json_array_append_new(flat, json_pack("{s:s, s:O}", "role", "user", "content", in));
	} else if (json_is_array(in) && json_array_size(in)) {
		size_t i;
		json_t *m;
		json_array_foreach(in, i, m) {
			char p[64], pc[80], pr[80];
			snprintf(p, sizeof p, "input[%zu]", i);
			snprintf(pc, sizeof pc, "%s.content", p);
			snprintf(pr, sizeof pr, "%s.role", p);
			if (!json_is_object(m)) {
				srv_fail(e, SRV_E_BAD_REQUEST, p, "%s must be an object", p);
				goto fail;
			}
			resp_item it = {0};
			srv_fields_read(m, resp_item_fields, &it, p, NULL, NULL, e); // JSON rows only: it cannot fail
			const char *type = json_string_value(it.type);
			if (srv_fields_known(m, resp_item_fields, p, e)) goto fail;
			if (type && !strcmp(type, "function_call")) {
				if (call_turn(flat, &it, p, e)) goto fail;
				continue;
			}
			if (type && !strcmp(type, "function_call_output")) {
				char *res = NULL;
				if (!json_is_string(it.call_id)) {
					srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.call_id must be a string", p);
					goto fail;
				}
				snprintf(pc, sizeof pc, "%s.output", p);
				if (srv_content_text(it.output, pc, part_types, c, &res, e)) goto fail;
				json_array_append_new(flat, json_pack("{s:s, s:O, s:s}", "role", "tool", "tool_call_id", it.call_id, "content", res));
				free(res);
				continue;
			}
			if (type && strcmp(type, "message")) {
				srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.type '%s' is not supported: message, function_call or function_call_output", p, type);
				goto fail;
			}
			const char *role = json_string_value(it.role);
			if (role && !strcmp(role, "developer")) role = "system";
			if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system"))) {
				srv_fail(e, SRV_E_BAD_REQUEST, pr, "%s must be user, assistant, system or developer", pr);
				goto fail;
			}
			if (!it.content) {
				srv_fail(e, SRV_E_BAD_REQUEST, pc, "%s is required", pc);
				goto fail;
			}
			char *text = NULL;
			if (srv_content_text(it.content, pc, part_types, c, &text, e)) goto fail;
			json_array_append_new(flat, json_pack("{s:s, s:s}", "role", role, "content", text));
			free(text);
		}
	} else {
		srv_fail(e, SRV_E_BAD_REQUEST, "input", "input must be a string or a non-empty array of messages");
		goto fail;
	}
	*out = flat;
	return 0;
fail:
	json_decref(flat);
	return -1;
}

void srv_responses(srv_conn *c) {
	srv_model *M = c->mdl;
	http_server *s = c->s;
	srv_err e;
	json_t *j = NULL, *flat = NULL;
	json_t *items = NULL; // the input after the stored conversation, as kept with the response
	resp_state *st = NULL;
	resp_req r = {.temperature = 1.0, .top_p = 1.0, .parallel_tool_calls = true};
	srv_gen_init(&r.g, &resp_lane_api, c);
	if (srv_parse_body(c, &j, &e) || srv_fields_known(j, resp_fields, NULL, &e) ||
	    srv_fields_read(j, resp_fields, &r, NULL, &r.g.api, c, &e) || resp_neutral(c, &r, &e))
		goto fail;
	r.max_sent = r.g.lr.max_tokens > 0 || json_integer_value(r.g.n_predict) > 0; // not --max-tokens's
	r.g.lr.sampling.temperature = (float)r.temperature;
	r.g.lr.sampling.top_p = (float)r.top_p;
	// what OpenAI keeps when store is absent: kept, unless --responses-store 0
	const bool keep = s->responses && !json_is_false(r.store);
	if ((keep || r.previous_response_id) && resp_history(s, &r, &items, &e)) goto fail;
	if (r.previous_response_id) r.input = items; // the instructions are this request's alone
	if (srv_gen_check(M, &r.g, &e) || resp_constrain(M, &r, &e) || srv_check_parts(M, r.input, "input", &e) || resp_input(c, &r, &flat, &e) ||
	    srv_chat_prompt(M, flat, NULL, "input", &r.g, &r.g.prompt, &r.g.lr.n_prompt, &e))
		goto fail;
	json_decref(flat);
	flat = NULL;
	if (!(st = calloc(1, sizeof *st))) {
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		goto fail;
	}
	st->j = j;
	st->previous = json_incref(r.previous_response_id ? r.previous_response_id : json_null());
	st->kept_input = keep ? items : NULL;
	if (!keep) json_decref(items);
	items = NULL;
	st->instructions = r.instructions ? json_string(r.instructions) : json_null();
	st->max_output_tokens = r.max_sent ? json_integer(r.g.lr.max_tokens) : json_null();
	st->temperature = r.temperature;
	st->top_p = r.top_p;
	st->truncation_auto = r.truncation && !strcmp(r.truncation, "auto");
	srv_new_id(s, "msg_", st->item_id, sizeof st->item_id);
	srv_gen_run(c, &resp_api, st, &r.g, "resp_");
	return;
fail:
	json_decref(j);
	json_decref(flat);
	json_decref(items);
	srv_gen_free(&r.g);
	srv_reply_error(c, &e);
}

// ---- the kept responses --------------------------------------------------------------------

// The id in /v1/responses/{id}[/rest] into id; rest gets what follows it ("" for none).
static void path_id(const srv_conn *c, char *id, size_t n, const char **rest) {
	const char *p = c->path + strlen("/v1/responses/");
	size_t k = strcspn(p, "/");
	snprintf(id, n, "%.*s", (int)(k < n ? k : n - 1), p);
	*rest = p + k;
}

static void not_found(srv_conn *c, const char *id) {
	srv_err e;
	srv_fail(&e, SRV_E_NOT_FOUND, NULL, "Response with id '%.200s' not found.", id);
	srv_reply_error(c, &e);
}

// input_items' list: order (desc by default, as OpenAI), limit 1..100 (20), after an item's id.
static void input_items(srv_conn *c, json_t *input) {
	srv_err e;
	const char *order = srv_query(c, "order");
	const char *lim = srv_query(c, "limit");
	const char *after = srv_query(c, "after");
	char *end = NULL;
	long limit = lim ? strtol(lim, &end, 10) : 20;
	if (order && strcmp(order, "asc") && strcmp(order, "desc")) {
		json_decref(input);
		srv_fail(&e, SRV_E_BAD_REQUEST, "order", "order must be \"asc\" or \"desc\"");
		srv_reply_error(c, &e);
		return;
	}
	if (lim && (!*lim || *end || limit < 1 || limit > 100)) {
		json_decref(input);
		srv_fail(&e, SRV_E_BAD_REQUEST, "limit", "limit must be an integer 1..100");
		srv_reply_error(c, &e);
		return;
	}
	const bool asc = order && !strcmp(order, "asc");
	const size_t n = json_array_size(input);
	size_t from = 0; // items skipped in the order asked: those up to and including after
	if (after) {
		while (from < n && strcmp(after, json_string_value(json_object_get(json_array_get(input, asc ? from : n - 1 - from), "id")) ?: "")) from++;
		from = from < n ? from + 1 : n;
	}
	json_t *data = json_array();
	for (size_t k = from; k < n && json_array_size(data) < (size_t)limit; k++) json_array_append(data, json_array_get(input, asc ? k : n - 1 - k));
	const size_t got = json_array_size(data);
	json_t *first = json_object_get(json_array_get(data, 0), "id"), *last = got ? json_object_get(json_array_get(data, got - 1), "id") : NULL;
	json_t *body = json_pack("{s:s, s:o, s:O, s:O, s:b}", "object", "list", "data", data, "first_id", first ? first : json_null(),
				 "last_id", last ? last : json_null(), "has_more", from + got < n);
	json_decref(input);
	srv_reply_json(c, 200, body, 0);
}

void srv_responses_get(srv_conn *c) {
	char id[128];
	const char *rest;
	path_id(c, id, sizeof id, &rest);
	json_t *r = NULL, *input = NULL;
	const bool items = !strcmp(rest, "/input_items");
	if (*rest && !items) {
		srv_err e;
		srv_fail(&e, SRV_E_NOT_FOUND, NULL, "no such endpoint: GET %s", c->path);
		srv_reply_error(c, &e);
		return;
	}
	if (!srv_store_get(c->s->responses, id, items ? NULL : &r, items ? &input : NULL)) { not_found(c, id); return; }
	if (items) input_items(c, input);
	else srv_reply_json(c, 200, r, 0);
}

void srv_responses_delete(srv_conn *c) {
	char id[128];
	const char *rest;
	path_id(c, id, sizeof id, &rest);
	if (*rest || !srv_store_delete(c->s->responses, id)) { not_found(c, id); return; }
	srv_reply_json(c, 200, json_pack("{s:s, s:s, s:b}", "id", id, "object", "response", "deleted", 1), 0);
}
