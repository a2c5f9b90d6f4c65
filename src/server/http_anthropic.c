// server: the Anthropic Messages adapter (POST /v1/messages) — system and text blocks into
// the chat template (a trailing assistant turn is a prefill the reply continues), the
// message reply, the event stream (message_start … message_stop) and its error event.
#include "server/http_int.h"

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
	if (ch->finish != LANE_FINISH_STOP_SEQUENCE || ch->stop_index < 0 || ch->stop_index >= c->g.n_stops) return json_null();
	return json_string(c->g.stops[ch->stop_index]);
}

static void ant_begin(srv_call *c) {
	srv_sse(c, "message_start",
		json_pack("{s:s, s:{s:s, s:s, s:s, s:[], s:s, s:n, s:n, s:{s:i, s:i}}}", "type", "message_start", "message", "id",
			  c->id, "type", "message", "role", "assistant", "content", "model", c->s->model_id, "stop_reason",
			  "stop_sequence", "usage", "input_tokens", c->g.n_prompt, "output_tokens", 0));
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
		json_pack("{s:s, s:{s:s, s:o}, s:{s:i, s:i}}", "type", "message_delta", "delta", "stop_reason",
			  stop_reason(&c->ch[0]), "stop_sequence", stop_sequence(c), "usage", "input_tokens", c->g.n_prompt,
			  "output_tokens", srv_call_generated(c)));
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
			 "usage", "input_tokens", c->g.n_prompt, "output_tokens", ch->n_generated, "cache_read_input_tokens",
			 ch->n_cached, "token_sha", ch->token_sha, "seed", (json_int_t)c->g.seed);
}

static const srv_api ant_api = {ant_begin, ant_text, NULL, ant_done, ant_fail, ant_reply, ant_free};

// ---- parsing ------------------------------------------------------------------------------------

static const char *const text_blocks[] = {"text", NULL};

// Fields accepted only at their neutral value.
static int ant_neutral(json_t *j, srv_err *e) {
	json_t *v;
	if ((v = json_object_get(j, "tools")) && !json_is_null(v) && !(json_is_array(v) && !json_array_size(v)))
		return srv_fail(e, SRV_E_BAD_REQUEST, "tools", "unsupported parameter: tools (tool use is not supported)");
	if ((v = json_object_get(j, "tool_choice")) && !json_is_null(v)) {
		const char *t = json_string_value(json_object_get(v, "type"));
		if (!t || (strcmp(t, "none") && strcmp(t, "auto")))
			return srv_fail(e, SRV_E_BAD_REQUEST, "tool_choice", "unsupported parameter: tool_choice (tool use is not supported)");
	}
	if ((v = json_object_get(j, "thinking")) && !json_is_null(v)) {
		const char *t = json_string_value(json_object_get(v, "type"));
		if (!t || strcmp(t, "disabled"))
			return srv_fail(e, SRV_E_BAD_REQUEST, "thinking", "unsupported parameter: thinking (extended thinking is not supported)");
	}
	if ((v = json_object_get(j, "metadata")) && !json_is_null(v) && !json_is_object(v))
		return srv_fail(e, SRV_E_BAD_REQUEST, "metadata", "metadata must be an object");
	return 0;
}

// system + messages into [{role, content}]; a final assistant turn becomes *prefill.
static int ant_messages(json_t *j, json_t **out, char **prefill, srv_err *e) {
	static const char *const known[] = {"role", "content", NULL};
	*out = NULL;
	*prefill = NULL;
	json_t *msgs = json_object_get(j, "messages");
	if (!json_is_array(msgs) || !json_array_size(msgs))
		return srv_fail(e, SRV_E_BAD_REQUEST, "messages", "messages: must be a non-empty array");
	json_t *flat = json_array();
	if (!flat) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	json_t *sys = json_object_get(j, "system");
	if (sys && !json_is_null(sys)) {
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
		if (srv_check_keys(m, known, p, e)) goto fail;
		const char *role = json_string_value(json_object_get(m, "role"));
		if (!role || (strcmp(role, "user") && strcmp(role, "assistant"))) {
			srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.role: must be \"user\" or \"assistant\"", p);
			goto fail;
		}
		json_t *content = json_object_get(m, "content");
		if (!content || json_is_null(content)) {
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
	static const char *const known[] = {"model", "messages", "max_tokens", "system", "stop_sequences", "temperature",
					    "top_p", "top_k", "metadata", "stream", "tools", "tool_choice", "thinking",
					    "service_tier", "seed", "min_p", "draft", "ignore_eos", NULL};
	srv_err e;
	json_t *j = NULL, *flat = NULL;
	char *prefill = NULL;
	ant_state *st = NULL;
	srv_gen g;
	srv_gen_init(&g);
	double d;
	int64_t x;
	int rc;
	if (srv_parse_body(c, &j, &e) || srv_check_keys(j, known, NULL, &e) || ant_neutral(j, &e) || srv_check_model(s, j, false, &e))
		goto fail;
	if ((rc = srv_get_int(j, "max_tokens", 1, INT32_MAX, &x, &e)) < 0) goto fail;
	if (!rc) {
		srv_fail(&e, SRV_E_BAD_REQUEST, "max_tokens", "max_tokens: field required");
		goto fail;
	}
	g.lr.max_tokens = (int32_t)x;
	if ((rc = srv_get_num(j, "temperature", 0, 1, &d, &e)) < 0) goto fail;
	if (rc) g.lr.sampling.temperature = (float)d;
	if ((rc = srv_get_num(j, "top_p", 0, 1, &d, &e)) < 0) goto fail;
	if (rc && d <= 0) {
		srv_fail(&e, SRV_E_BAD_REQUEST, "top_p", "top_p must be greater than 0");
		goto fail;
	}
	if (rc) g.lr.sampling.top_p = (float)d;
	if (srv_gen_common(j, &g, &e) < 0) goto fail;
	json_t *ss = json_object_get(j, "stop_sequences");
	if (ss && !json_is_null(ss) && !json_is_array(ss)) {
		srv_fail(&e, SRV_E_BAD_REQUEST, "stop_sequences", "stop_sequences: must be an array of strings");
		goto fail;
	}
	if (srv_get_stops(j, "stop_sequences", &g, &e) < 0) goto fail;
	if (ant_messages(j, &flat, &prefill, &e)) goto fail;
	if (srv_chat_prompt(s, flat, prefill, &g.prompt, &g.n_prompt, &e)) goto fail;
	json_decref(flat);
	free(prefill);
	flat = NULL;
	prefill = NULL;
	if (!(st = calloc(1, sizeof *st))) {
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		goto fail;
	}
	st->j = j;
	g.prompt_field = "messages";
	g.max_field = "max_tokens";
	return srv_gen_run(c, &ant_api, st, &g, "msg_");
fail:
	json_decref(j);
	json_decref(flat);
	free(prefill);
	free(g.prompt);
	free(g.bias);
	return srv_reply_error(c, &e);
}
