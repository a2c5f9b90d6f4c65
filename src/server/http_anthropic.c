// server: the Anthropic Messages adapter (POST /v1/messages) — system and text blocks into
// the chat template (a trailing assistant turn is a prefill the reply continues), the
// message reply, the event stream (message_start … message_stop) and its error event.
#include "server/http_gen.h"
#include "server/http_routes.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	json_t *j; // the request: stop sequences point into it
} ant_state;

static void ant_free(void *p) {
	ant_state *st = p;
	if (!st) return;
	json_decref(st->j);
	free(st);
}

static const char *stop_reason(const srv_choice *ch) {
	static const char *const names[] = {[LANE_FINISH_STOP] = "end_turn", [LANE_FINISH_LENGTH] = "max_tokens",
					    [LANE_FINISH_STOP_SEQUENCE] = "stop_sequence"};
	return names[ch->finish <= LANE_FINISH_STOP_SEQUENCE ? ch->finish : 0];
}

static json_t *stop_sequence(const srv_call *c) {
	const srv_choice *ch = &c->ch[0];
	if (ch->finish != LANE_FINISH_STOP_SEQUENCE || ch->stop_index < 0 || ch->stop_index >= c->g.stops.n) return json_null();
	return json_string(c->g.stops.s[ch->stop_index]);
}

static void ant_begin(srv_call *c) {
	srv_sse(c, "message_start",
		json_pack("{s:s, s:{s:s, s:s, s:s, s:[], s:s, s:n, s:n, s:{s:i, s:i, s:i}}}", "type", "message_start", "message", "id",
			  c->id, "type", "message", "role", "assistant", "content", "model", c->s->model_id, "stop_reason",
			  "stop_sequence", "usage", "input_tokens", c->g.lr.n_prompt, "output_tokens", 0, "cache_read_input_tokens", 0));
	srv_sse(c, "content_block_start",
		json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_start", "index", 0, "content_block", "type", "text",
			  "text", ""));
	srv_sse(c, "ping", json_pack("{s:s}", "type", "ping"));
}

static void ant_text(srv_call *c, int i, const char *text, size_t len, const lane_event *tok) {
	if (!c->g.stream || !len) return;
	srv_sse(c, "content_block_delta",
		json_pack("{s:s, s:i, s:{s:s, s:s%}}", "type", "content_block_delta", "index", 0, "delta", "type", "text_delta",
			  "text", text, len));
}

static void ant_done(srv_call *c) {
	srv_sse(c, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", 0));
	srv_sse(c, "message_delta",
		json_pack("{s:s, s:{s:s, s:o}, s:{s:i, s:i, s:i}}", "type", "message_delta", "delta", "stop_reason",
			  stop_reason(&c->ch[0]), "stop_sequence", stop_sequence(c), "usage", "input_tokens", c->g.lr.n_prompt,
			  "output_tokens", srv_call_generated(c), "cache_read_input_tokens", c->ch[0].n_cached));
	srv_sse(c, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

static void ant_fail(srv_call *c) {
	srv_sse(c, "error", json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", "api_error", "message", c->fail_reason));
}

static json_t *ant_reply(srv_call *c) {
	const srv_choice *ch = &c->ch[0];
	return json_pack("{s:s, s:s, s:s, s:[{s:s, s:s%}], s:s, s:s, s:o, s:{s:i, s:i, s:i}, s:s, s:I}", "id", c->id, "type",
			 "message", "role", "assistant", "content", "type", "text", "text", ch->text.p ? ch->text.p : "",
			 ch->text.len, "model", c->s->model_id, "stop_reason", stop_reason(ch), "stop_sequence", stop_sequence(c),
			 "usage", "input_tokens", c->g.lr.n_prompt, "output_tokens", ch->n_generated, "cache_read_input_tokens",
			 ch->n_cached, "token_sha", ch->token_sha, "seed", (json_int_t)c->g.lr.sampling.seed);
}

static const srv_api ant_api = {ant_begin, ant_text, NULL, ant_done, ant_fail, ant_reply, ant_free};

// ---- parsing ------------------------------------------------------------------------------------

static const char *const text_blocks[] = {"text", NULL};

// A request as read.
typedef struct {
	srv_gen g;
	json_t *messages, *system;
	json_t *tools, *tool_choice, *thinking, *metadata; // neutral values only
} ant_req;

// Anthropic's bounds where they are narrower than the host's.
static const lane_api ant_lane_api = {
	.name = {[LANE_F_PROMPT] = "messages", [LANE_F_STOP] = "stop_sequences"},
	.range = {[LANE_F_MAX_TOKENS] = LANE_RANGE(1, INT32_MAX), [LANE_F_TEMPERATURE] = LANE_RANGE(0, 1)},
};

static const srv_field ant_fields[] = {
	{NULL, SRV_K_INCLUDE, .off = offsetof(ant_req, g), .sub = srv_gen_fields},
	SRV_ROW(ant_req, messages, SRV_K_JSON),
	SRV_ROW(ant_req, system, SRV_K_JSON),
	{"max_tokens", SRV_K_INT, LANE_F_MAX_TOKENS, offsetof(ant_req, g.lr.max_tokens), NULL},
	{"temperature", SRV_K_NUM, LANE_F_TEMPERATURE, offsetof(ant_req, g.lr.sampling.temperature), NULL},
	{"top_p", SRV_K_NUM, LANE_F_TOP_P, offsetof(ant_req, g.lr.sampling.top_p), NULL},
	{"stop_sequences", SRV_K_STOP_ARRAY, LANE_F_STOP, offsetof(ant_req, g.stops), NULL},
	SRV_ROW(ant_req, metadata, SRV_K_JSON),
	SRV_ROW(ant_req, tools, SRV_K_JSON),
	SRV_ROW(ant_req, tool_choice, SRV_K_JSON),
	SRV_ROW(ant_req, thinking, SRV_K_JSON),
	SRV_IGNORED_AS("service_tier", STR),
	{0},
};

// One message as read.
typedef struct {
	json_t *role, *content;
} ant_msg;

static const srv_field ant_msg_fields[] = {
	SRV_ROW(ant_msg, role, SRV_K_JSON),
	SRV_ROW(ant_msg, content, SRV_K_JSON),
	{0},
};

// Fields accepted only at their neutral value, and the one that is required.
static int ant_neutral(const ant_req *r, srv_err *e) {
	json_t *v;
	if ((v = r->tools) && !(json_is_array(v) && !json_array_size(v)))
		return srv_fail(e, SRV_E_BAD_REQUEST, "tools", "unsupported parameter: tools (tool use is not supported)");
	if ((v = r->tool_choice)) {
		const char *t = json_string_value(json_object_get(v, "type"));
		if (!t || (strcmp(t, "none") && strcmp(t, "auto")))
			return srv_fail(e, SRV_E_BAD_REQUEST, "tool_choice", "unsupported parameter: tool_choice (tool use is not supported)");
	}
	if ((v = r->thinking)) {
		const char *t = json_string_value(json_object_get(v, "type"));
		if (!t || strcmp(t, "disabled"))
			return srv_fail(e, SRV_E_BAD_REQUEST, "thinking", "unsupported parameter: thinking (extended thinking is not supported)");
	}
	if ((v = r->metadata) && !json_is_object(v)) return srv_fail(e, SRV_E_BAD_REQUEST, "metadata", "metadata must be an object");
	if (!r->g.lr.max_tokens) return srv_fail(e, SRV_E_BAD_REQUEST, "max_tokens", "max_tokens: field required");
	return 0;
}

// system + messages into [{role, content}]; a final assistant turn becomes *prefill.
static int ant_messages(json_t *msgs, json_t *sys, json_t **out, char **prefill, srv_err *e) {
	*out = NULL;
	*prefill = NULL;
	if (!json_is_array(msgs) || !json_array_size(msgs))
		return srv_fail(e, SRV_E_BAD_REQUEST, "messages", "messages: must be a non-empty array");
	json_t *flat = json_array();
	if (!flat) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	if (sys) {
		char *text = NULL;
		if (srv_content_text(sys, "system", text_blocks, &text, e)) goto fail;
		json_array_append_new(flat, json_pack("{s:s, s:s}", "role", "system", "content", text));
		free(text);
	}
	size_t n = json_array_size(msgs), i;
	json_t *m;
	json_array_foreach(msgs, i, m) {
		char p[64], pc[80];
		snprintf(p, sizeof p, "messages[%zu]", i);
		snprintf(pc, sizeof pc, "%s.content", p);
		if (!json_is_object(m)) {
			srv_fail(e, SRV_E_BAD_REQUEST, p, "%s: must be an object", p);
			goto fail;
		}
		ant_msg r = {0};
		if (srv_fields_known(m, ant_msg_fields, p, e) || srv_fields_read(m, ant_msg_fields, &r, p, NULL, e)) goto fail;
		const char *role = json_string_value(r.role);
		if (!role || (strcmp(role, "user") && strcmp(role, "assistant"))) {
			srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.role: must be \"user\" or \"assistant\"", p);
			goto fail;
		}
		json_t *content = r.content;
		if (!content) {
			srv_fail(e, SRV_E_BAD_REQUEST, pc, "%s: field required", pc);
			goto fail;
		}
		char *text = NULL;
		if (srv_content_text(content, pc, text_blocks, &text, e)) goto fail;
		if (i == n - 1 && !strcmp(role, "assistant")) {
			*prefill = text;
			break;
		}
		json_array_append_new(flat, json_pack("{s:s, s:s}", "role", role, "content", text));
		free(text);
	}
	*out = flat;
	return 0;
fail:
	json_decref(flat);
	return -1;
}

enum MHD_Result srv_messages(srv_conn *c) {
	http_server *s = c->s;
	srv_err e;
	json_t *j = NULL, *flat = NULL;
	char *prefill = NULL;
	ant_state *st = NULL;
	ant_req r = {0};
	srv_gen_init(&r.g, &ant_lane_api);
	if (srv_parse_body(c, &j, &e) || srv_fields_known(j, ant_fields, NULL, &e) ||
	    srv_fields_read(j, ant_fields, &r, NULL, &r.g.api, &e) || ant_neutral(&r, &e) || srv_gen_check(s, &r.g, &e) ||
	    srv_check_parts(s, r.messages, "messages", &e) || ant_messages(r.messages, r.system, &flat, &prefill, &e) ||
	    srv_chat_prompt(s, flat, prefill, "messages", &r.g, &r.g.prompt, &r.g.lr.n_prompt, &e))
		goto fail;
	json_decref(flat);
	free(prefill);
	flat = NULL;
	prefill = NULL;
	if (!(st = calloc(1, sizeof *st))) {
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		goto fail;
	}
	st->j = j;
	return srv_gen_run(c, &ant_api, st, &r.g, "msg_");
fail:
	json_decref(j);
	json_decref(flat);
	free(prefill);
	srv_gen_free(&r.g);
	return srv_reply_error(c, &e);
}

static const srv_field ant_count_fields[] = {
	{"model", SRV_K_STR, .off = offsetof(ant_req, g.model)},
	SRV_ROW(ant_req, messages, SRV_K_JSON),
	SRV_ROW(ant_req, system, SRV_K_JSON),
	SRV_ROW(ant_req, tools, SRV_K_JSON),
	SRV_ROW(ant_req, tool_choice, SRV_K_JSON),
	SRV_ROW(ant_req, thinking, SRV_K_JSON),
	{0},
};

// POST /v1/messages/count_tokens: the prompt /v1/messages would run, counted.
enum MHD_Result srv_count_tokens(srv_conn *c) {
	http_server *s = c->s;
	srv_err e;
	json_t *j = NULL, *flat = NULL;
	char *prefill = NULL;
	ant_req r = {0};
	srv_gen_init(&r.g, &ant_lane_api);
	r.g.lr.max_tokens = 1; // not part of this request
	int rc = srv_parse_body(c, &j, &e) || srv_fields_known(j, ant_count_fields, NULL, &e) ||
		 srv_fields_read(j, ant_count_fields, &r, NULL, &r.g.api, &e) || ant_neutral(&r, &e) ||
		 srv_check_model(s, r.g.model, &e) || ant_messages(r.messages, r.system, &flat, &prefill, &e) ||
		 srv_chat_prompt(s, flat, prefill, "messages", &r.g, &r.g.prompt, &r.g.lr.n_prompt, &e);
	const int32_t n = r.g.lr.n_prompt;
	json_decref(j);
	json_decref(flat);
	free(prefill);
	srv_gen_free(&r.g);
	if (rc) return srv_reply_error(c, &e);
	return srv_reply_json(c, 200, json_pack("{s:i}", "input_tokens", n), 0);
}
