// server: the OpenAI Responses adapter (POST /v1/responses, stateless) — input and
// instructions into the chat template, the response object, and the event stream that
// the official client's responses.stream() accumulates (created … completed), with
// response.failed for a request that ends failed.
#include "server/http_gen.h"
#include "server/http_routes.h"

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
} resp_state;

static void resp_free(void *p) {
	resp_state *st = p;
	if (!st) return;
	json_decref(st->j);
	json_decref(st->instructions);
	json_decref(st->max_output_tokens);
	free(st);
}

static json_t *usage(const srv_call *c) {
	int32_t gen = srv_call_generated(c);
	return json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens", c->g.lr.n_prompt, "input_tokens_details",
			 "cached_tokens", c->ch[0].n_cached, "output_tokens", gen, "output_tokens_details", "reasoning_tokens", 0,
			 "total_tokens", c->g.lr.n_prompt + gen);
}

static json_t *text_part(const char *text, size_t len) {
	return json_pack("{s:s, s:s%, s:[], s:[]}", "type", "output_text", "text", text, len, "annotations", "logprobs");
}

// The output message; content NULL gives an empty content list.
static json_t *message_item(srv_call *c, const char *status, bool with_text) {
	resp_state *st = c->st;
	const srv_buf *t = &c->ch[0].text;
	json_t *content = with_text ? json_pack("[o]", text_part(t->p ? t->p : "", t->len)) : json_array();
	return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", st->item_id, "type", "message", "status", status, "role",
			 "assistant", "content", content);
}

// The response object in a given status; output and usage as far as they are known.
static json_t *response(srv_call *c, const char *status, json_t *output, bool with_usage) {
	resp_state *st = c->st;
	json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:n, s:n, s:O, s:O, s:s, s:o, s:b, s:n, s:{s:n, s:n}, s:b, s:f, s:{s:{s:s}}, "
			      "s:s, s:[], s:f, s:s, s:n, s:{}}",
			      "id", c->id, "object", "response", "created_at", (json_int_t)c->created, "status", status, "error",
			      "incomplete_details", "instructions", st->instructions, "max_output_tokens", st->max_output_tokens,
			      "model", c->s->model_id, "output", output ? output : json_array(), "parallel_tool_calls", 0,
			      "previous_response_id", "reasoning", "effort", "summary", "store", 0, "temperature", st->temperature,
			      "text", "format", "type", "text", "tool_choice", "auto", "tools", "top_p", st->top_p, "truncation",
			      st->truncation_auto ? "auto" : "disabled", "user", "metadata");
	if (!r) return NULL;
	json_object_set_new(r, "usage", with_usage ? usage(c) : json_null());
	return r;
}

static json_t *final_response(srv_call *c) {
	const srv_choice *ch = &c->ch[0];
	bool incomplete = ch->finish == LANE_FINISH_LENGTH;
	json_t *r = response(c, incomplete ? "incomplete" : "completed",
			     json_pack("[o]", message_item(c, incomplete ? "incomplete" : "completed", true)), true);
	if (!r) return NULL;
	if (incomplete) json_object_set_new(r, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
	json_object_set_new(r, "token_sha", json_string(ch->token_sha));
	json_object_set_new(r, "seed", json_integer((json_int_t)c->g.lr.sampling.seed));
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

static void resp_begin(srv_call *c) {
	resp_state *st = c->st;
	event(c, "response.created", json_pack("{s:o}", "response", response(c, "in_progress", NULL, false)));
	event(c, "response.in_progress", json_pack("{s:o}", "response", response(c, "in_progress", NULL, false)));
	event(c, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", 0, "item", message_item(c, "in_progress", false)));
	event(c, "response.content_part.added",
	      json_pack("{s:s, s:i, s:i, s:o}", "item_id", st->item_id, "output_index", 0, "content_index", 0, "part", text_part("", 0)));
}

static void resp_text(srv_call *c, int i, const char *text, size_t len, const lane_event *tok) {
	resp_state *st = c->st;
	if (!c->g.stream || !len) return;
	event(c, "response.output_text.delta",
	      json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", st->item_id, "output_index", 0, "content_index", 0, "delta",
			text, len, "logprobs"));
}

static void resp_done(srv_call *c) {
	resp_state *st = c->st;
	const srv_choice *ch = &c->ch[0];
	const char *text = ch->text.p ? ch->text.p : "";
	bool incomplete = ch->finish == LANE_FINISH_LENGTH;
	event(c, "response.output_text.done",
	      json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", st->item_id, "output_index", 0, "content_index", 0, "text",
			text, ch->text.len, "logprobs"));
	event(c, "response.content_part.done",
	      json_pack("{s:s, s:i, s:i, s:o}", "item_id", st->item_id, "output_index", 0, "content_index", 0, "part",
			text_part(text, ch->text.len)));
	event(c, "response.output_item.done",
	      json_pack("{s:i, s:o}", "output_index", 0, "item", message_item(c, incomplete ? "incomplete" : "completed", true)));
	event(c, incomplete ? "response.incomplete" : "response.completed", json_pack("{s:o}", "response", final_response(c)));
}

static void resp_fail(srv_call *c) {
	json_t *r = response(c, "failed", json_pack("[o]", message_item(c, "incomplete", true)), true);
	if (r) json_object_set_new(r, "error", json_pack("{s:s, s:s}", "code", "server_error", "message", c->fail_reason));
	event(c, "response.failed", r ? json_pack("{s:o}", "response", r) : NULL);
}

static json_t *resp_reply(srv_call *c) { return final_response(c); }

static const srv_api resp_api = {resp_begin, resp_text, NULL, resp_done, resp_fail, resp_reply, resp_free};

// ---- parsing ------------------------------------------------------------------------------------

// A request as read.
typedef struct {
	srv_gen g;
	json_t *input;
	const char *instructions;
	const char *truncation;    // "auto" or "disabled": a prompt that does not fit is refused either way
	double temperature, top_p; // echoed back as sent
	json_t *store, *previous_response_id, *tools, *tool_choice, *text, *reasoning, *include, *background; // neutral values only
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
	{"max_output_tokens", SRV_K_INT, LANE_F_MAX_TOKENS, offsetof(resp_req, g.lr.max_tokens), NULL},
	{"temperature", SRV_K_REAL, LANE_F_TEMPERATURE, offsetof(resp_req, temperature), NULL},
	{"top_p", SRV_K_REAL, LANE_F_TOP_P, offsetof(resp_req, top_p), NULL},
	SRV_ROW(resp_req, store, SRV_K_JSON),
	SRV_ROW(resp_req, previous_response_id, SRV_K_JSON),
	SRV_ROW(resp_req, tools, SRV_K_JSON),
	SRV_ROW(resp_req, tool_choice, SRV_K_JSON),
	SRV_ROW(resp_req, text, SRV_K_JSON),
	SRV_ROW(resp_req, reasoning, SRV_K_JSON),
	SRV_ROW(resp_req, include, SRV_K_JSON),
	SRV_ROW(resp_req, background, SRV_K_JSON),
	SRV_IGNORED_AS("metadata", OBJECT),
	SRV_IGNORED_AS("user", STR),
	SRV_IGNORED_AS("parallel_tool_calls", BOOL),
	SRV_ROW(resp_req, truncation, SRV_K_STR),
	SRV_IGNORED_AS("service_tier", STR),
	SRV_IGNORED_AS("stream_options", OBJECT),
	{0},
};

// One input item as read.
typedef struct {
	json_t *type, *role, *content;
} resp_item;

static const srv_field resp_item_fields[] = {
	SRV_ROW(resp_item, type, SRV_K_JSON),
	SRV_ROW(resp_item, role, SRV_K_JSON),
	SRV_ROW(resp_item, content, SRV_K_JSON),
	SRV_IGNORED("id"),
	SRV_IGNORED("status"),
	{0},
};

// text's keys (format is checked by value).
static const srv_field text_fields[] = {
	SRV_IGNORED("format"),
	{0},
};

static int resp_neutral(const resp_req *r, srv_err *e) {
	json_t *v;
	if (r->store && !json_is_false(r->store))
		return srv_fail(e, SRV_E_BAD_REQUEST, "store",
				"unsupported parameter: store (this server is stateless and keeps no responses: only false)");
	if (r->previous_response_id)
		return srv_fail(e, SRV_E_BAD_REQUEST, "previous_response_id",
				"unsupported parameter: previous_response_id (this server is stateless: send the whole conversation as input)");
	if (srv_no_tools(r->tools, r->tool_choice, e)) return -1;
	if ((v = r->text)) {
		json_t *f = json_is_object(v) ? json_object_get(v, "format") : NULL;
		if (json_is_null(f)) f = NULL; // null is the same as left out
		const char *t = f ? json_string_value(json_object_get(f, "type")) : "text";
		if (!json_is_object(v) || !t || strcmp(t, "text"))
			return srv_fail(e, SRV_E_BAD_REQUEST, "text.format", "unsupported parameter: text.format (only {\"type\": \"text\"})");
		if (srv_fields_known(v, text_fields, "text", e)) return -1;
	}
	if ((v = r->reasoning) && !(json_is_object(v) && !json_object_size(v)))
		return srv_fail(e, SRV_E_BAD_REQUEST, "reasoning", "unsupported parameter: reasoning (only {})");
	if ((v = r->include) && !(json_is_array(v) && !json_array_size(v)))
		return srv_fail(e, SRV_E_BAD_REQUEST, "include", "unsupported parameter: include");
	if ((v = r->background) && !json_is_false(v))
		return srv_fail(e, SRV_E_BAD_REQUEST, "background", "unsupported parameter: background (only false)");
	const char *tr = r->truncation;
	if (tr && strcmp(tr, "auto") && strcmp(tr, "disabled"))
		return srv_fail(e, SRV_E_BAD_REQUEST, "truncation", "truncation must be \"auto\" or \"disabled\"");
	return 0;
}

// instructions + input into [{role, content}].
static int resp_input(const resp_req *r, json_t **out, srv_err *e) {
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
			srv_fields_read(m, resp_item_fields, &it, p, NULL, e); // JSON rows only: it cannot fail
			const char *type = json_string_value(it.type);
			if (type && strcmp(type, "message")) {
				srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.type '%s' is not supported: only messages", p, type);
				goto fail;
			}
			if (srv_fields_known(m, resp_item_fields, p, e)) goto fail;
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
			if (srv_content_text(it.content, pc, part_types, &text, e)) goto fail;
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

enum MHD_Result srv_responses(srv_conn *c) {
	http_server *s = c->s;
	srv_err e;
	json_t *j = NULL, *flat = NULL;
	resp_state *st = NULL;
	resp_req r = {.temperature = 1.0, .top_p = 1.0};
	srv_gen_init(&r.g, &resp_lane_api);
	if (srv_parse_body(c, &j, &e) || srv_fields_known(j, resp_fields, NULL, &e) ||
	    srv_fields_read(j, resp_fields, &r, NULL, &r.g.api, &e) || resp_neutral(&r, &e))
		goto fail;
	r.g.lr.sampling.temperature = (float)r.temperature;
	r.g.lr.sampling.top_p = (float)r.top_p;
	if (srv_gen_check(s, &r.g, &e) || srv_check_parts(s, r.input, "input", &e) || resp_input(&r, &flat, &e) ||
	    srv_chat_prompt(s, flat, NULL, "input", &r.g, &r.g.prompt, &r.g.lr.n_prompt, &e))
		goto fail;
	json_decref(flat);
	flat = NULL;
	if (!(st = calloc(1, sizeof *st))) {
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		goto fail;
	}
	st->j = j;
	st->instructions = r.instructions ? json_string(r.instructions) : json_null();
	st->max_output_tokens = r.g.lr.max_tokens > 0 ? json_integer(r.g.lr.max_tokens) : json_null();
	st->temperature = r.temperature;
	st->top_p = r.top_p;
	st->truncation_auto = r.truncation && !strcmp(r.truncation, "auto");
	srv_new_id(s, "msg_", st->item_id, sizeof st->item_id);
	return srv_gen_run(c, &resp_api, st, &r.g, "resp_");
fail:
	json_decref(j);
	json_decref(flat);
	srv_gen_free(&r.g);
	return srv_reply_error(c, &e);
}
