// server/api/anthropic: the Anthropic Messages adapter (POST /v1/messages) — system, text, tool
// and thinking blocks into the chat template (a trailing assistant turn is a prefill the reply
// continues), output_format into the grammar, the message reply, the event stream
// (message_start … message_stop) and its error event.
#include "server/gen/gen.h"
#include "server/routes.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	json_t *j;       // the request: stop sequences point into it
	int blocks;      // stream: content blocks started
	bool text_open;  // stream: the last block is a text block still open
	bool think_open; // stream: the last block is a thinking block still open
} ant_state;

static void ant_free(void *p) {
	ant_state *st = p;
	if (!st) return;
	json_decref(st->j);
	free(st);
}

static const char *stop_reason(const srv_choice *ch) {
	static const char *const names[] = {[LANE_FINISH_STOP] = "end_turn", [LANE_FINISH_LENGTH] = "max_tokens",
					    [LANE_FINISH_STOP_SEQUENCE] = "stop_sequence", [LANE_FINISH_GRAMMAR] = "max_tokens"};
	return names[ch->finish <= LANE_FINISH_GRAMMAR ? ch->finish : 0];
}

static json_t *stop_sequence(const srv_call *c) {
	const srv_choice *ch = &c->ch[0];
	if (ch->finish != LANE_FINISH_STOP_SEQUENCE || ch->stop_index < 0 || ch->stop_index >= c->g.stops.n) return json_null();
	return json_string(c->g.stops.s[ch->stop_index]);
}

// The stop reason of a turn that made tool calls.
static const char *turn_stop(const srv_call *c, bool calls) {
	return calls && !srv_choice_cut(&c->ch[0]) ? "tool_use" : stop_reason(&c->ch[0]);
}

// ---- tool use in a stream: blocks start as the parser finds them ---------------------------------

static void block_stop(srv_call *c, int index) {
	srv_sse(c, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", index));
}

// The thinking block ends with its signature, made over the whole of its text.
static void think_stop(srv_call *c) {
	ant_state *st = c->st;
	if (!st->think_open) return;
	const srv_buf *t = &c->ch[0].thinking;
	char sig[SRV_THINK_SIG];
	srv_think_sign(c->s, t->p ? t->p : "", t->len, sig);
	srv_sse(c, "content_block_delta",
		json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index", st->blocks - 1, "delta", "type",
			  "signature_delta", "signature", sig));
	block_stop(c, st->blocks - 1);
	st->think_open = false;
}

static void ant_thinking(srv_call *c, int i, const char *text, size_t len) {
	ant_state *st = c->st;
	if (!st->think_open) {
		srv_sse(c, "content_block_start",
			json_pack("{s:s, s:i, s:{s:s, s:s, s:s}}", "type", "content_block_start", "index", st->blocks++, "content_block",
				  "type", "thinking", "thinking", "", "signature", ""));
		st->think_open = true;
	}
	srv_sse(c, "content_block_delta",
		json_pack("{s:s, s:i, s:{s:s, s:s%}}", "type", "content_block_delta", "index", st->blocks - 1, "delta", "type",
			  "thinking_delta", "thinking", text, len));
}

static void text_start(srv_call *c) {
	ant_state *st = c->st;
	think_stop(c);
	srv_sse(c, "content_block_start",
		json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_start", "index", st->blocks++, "content_block", "type",
			  "text", "text", ""));
	st->text_open = true;
}

static void text_delta(srv_call *c, const char *text, size_t len) {
	ant_state *st = c->st;
	srv_sse(c, "content_block_delta",
		json_pack("{s:s, s:i, s:{s:s, s:s%}}", "type", "content_block_delta", "index", st->blocks - 1, "delta", "type",
			  "text_delta", "text", text, len));
}

static void sink_content(srv_call *c, int i, const char *text, size_t len) {
	ant_state *st = c->st;
	if (!st->text_open) text_start(c);
	text_delta(c, text, len);
}

static void sink_start(srv_call *c, int i, int k, const char *id, const char *name, size_t name_len) {
	ant_state *st = c->st;
	think_stop(c);
	if (st->text_open) block_stop(c, st->blocks - 1), st->text_open = false;
	srv_sse(c, "content_block_start",
		json_pack("{s:s, s:i, s:{s:s, s:s, s:s%, s:{}}}", "type", "content_block_start", "index", st->blocks++, "content_block",
			  "type", "tool_use", "id", id, "name", name, name_len, "input"));
}

static void sink_args(srv_call *c, int i, int k, const char *text, size_t len) {
	ant_state *st = c->st;
	srv_sse(c, "content_block_delta",
		json_pack("{s:s, s:i, s:{s:s, s:s%}}", "type", "content_block_delta", "index", st->blocks - 1, "delta", "type",
			  "input_json_delta", "partial_json", text, len));
}

static void sink_end(srv_call *c, int i, int k, const char *id, json_t *call) {
	ant_state *st = c->st;
	block_stop(c, st->blocks - 1);
}

static const srv_tool_sink ant_sink = {sink_content, sink_start, sink_args, sink_end};

// Anthropic's input_tokens leave out the cached tokens it reports beside them: the three add up to the prompt.
static json_t *usage(const srv_call *c, int32_t n_cached, int32_t output) {
	return json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", c->g.lr.n_prompt - n_cached, "cache_creation_input_tokens", 0,
			 "cache_read_input_tokens", n_cached, "output_tokens", output);
}

// message_start goes out at once, before the prefix-cache hit is known: its usage counts the whole
// prompt as input; message_delta's is the final count, which the clients take over it.
static void ant_begin(srv_call *c) {
	srv_sse(c, "message_start",
		json_pack("{s:s, s:{s:s, s:s, s:s, s:[], s:s, s:n, s:n, s:o}}", "type", "message_start", "message", "id", c->id, "type",
			  "message", "role", "assistant", "content", "model", srv_call_model(c), "stop_reason", "stop_sequence", "usage",
			  usage(c, 0, 0)));
	// with tools or thinking the blocks start as the text shows what they are
	if (!c->g.parse_calls && !c->g.reasoning) text_start(c);
	srv_sse(c, "ping", json_pack("{s:s}", "type", "ping"));
}

static void ant_text(srv_call *c, int i, const char *text, size_t len, const lane_event *tok) {
	if (!c->g.stream) return;
	ant_state *st = c->st;
	if (c->g.parse_calls) srv_tools_stream(c, 0, false, &ant_sink);
	else if (len && !st->text_open) sink_content(c, 0, text, len);
	else if (len) text_delta(c, text, len);
}

static void ant_done(srv_call *c) {
	ant_state *st = c->st;
	if (c->g.parse_calls) srv_tools_stream(c, 0, true, &ant_sink);
	// a reply that never left its thinking still ends with a text block, as a turn must
	if (!st->blocks || (st->think_open && !c->g.parse_calls)) text_start(c);
	think_stop(c);
	if (st->text_open) block_stop(c, st->blocks - 1);
	const srv_tool_stream *ts = &c->ch[0].tools;
	json_t *d = json_pack("{s:s, s:{s:s, s:o}, s:o}", "type", "message_delta", "delta", "stop_reason",
			      turn_stop(c, c->g.parse_calls && ts->n_started), "stop_sequence", stop_sequence(c), "usage",
			      usage(c, c->ch[0].n_cached, srv_call_generated(c)));
	srv_finish_note(json_object_get(d, "delta"), &c->ch[0]);
	srv_sse(c, "message_delta", d);
	srv_sse(c, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

static json_t *ant_reply(srv_call *c) {
	const srv_choice *ch = &c->ch[0];
	const char *text = ch->text.p ? ch->text.p : "";
	size_t clen = ch->text.len;
	json_t *calls = NULL;
	if (srv_tool_calls(c, 0, &clen, &calls)) return NULL;
	json_t *content = json_array();
	if (ch->rs.thought) {
		char sig[SRV_THINK_SIG];
		srv_think_sign(c->s, ch->thinking.p ? ch->thinking.p : "", ch->thinking.len, sig);
		json_array_append_new(content, json_pack("{s:s, s:s%, s:s}", "type", "thinking", "thinking", ch->thinking.p ? ch->thinking.p : "",
							 ch->thinking.len, "signature", sig));
	}
	size_t sp = 0;
	while (sp < clen && strchr(" \t\r\n", text[sp])) sp++;
	// a turn of calls alone has no text block
	if (sp < clen || !json_array_size(calls) || (ch->rs.thought && !json_array_size(calls))) json_array_append_new(content, json_pack("{s:s, s:s%}", "type", "text", "text", text, clen));
	size_t k;
	json_t *v;
	json_array_foreach(calls, k, v) json_array_append_new(content, json_pack("{s:s, s:O, s:O, s:O}", "type", "tool_use", "id",
						json_object_get(v, "id"), "name", json_object_get(v, "name"), "input", json_object_get(v, "input")));
	const bool with_calls = json_array_size(calls);
	json_decref(calls);
	json_t *m = json_pack("{s:s, s:s, s:s, s:o, s:s, s:s, s:o, s:o, s:s, s:I}", "id", c->id, "type",
			 "message", "role", "assistant", "content", content, "model", srv_call_model(c), "stop_reason", turn_stop(c, with_calls), "stop_sequence", stop_sequence(c),
			 "usage", usage(c, ch->n_cached, ch->n_generated), "token_sha", ch->token_sha, "seed", (json_int_t)c->g.lr.sampling.seed);
	srv_finish_note(m, ch);
	return m;
}

static const srv_api ant_api = {.begin = ant_begin, .text = ant_text, .thinking = ant_thinking, .done = ant_done, .reply = ant_reply, .free_state = ant_free, .family = SRV_ANTHROPIC};

// ---- parsing ------------------------------------------------------------------------------------

static const char *const text_blocks[] = {"text", NULL};

// A request as read.
typedef struct {
	srv_gen g;
	json_t *messages, *system;
	json_t *tools, *tool_choice, *thinking;
	json_t *output_format, *config_format; // output_format, output_config.format: one JSON Schema
} ant_req;

// Anthropic's bounds where they are narrower than the host's.
static const lane_api ant_lane_api = {
	.name = {[LANE_F_PROMPT] = "messages", [LANE_F_STOP] = "stop_sequences"},
	.range = {[LANE_F_MAX_TOKENS] = LANE_RANGE(1, INT32_MAX), [LANE_F_TEMPERATURE] = LANE_RANGE(0, 1)},
};

static const srv_field output_config_fields[] = {
	{"format", SRV_K_JSON, .off = offsetof(ant_req, config_format)},
	SRV_NAMED_AS("effort", STR), // no reasoning runs for it to bound
	SRV_NAMED_AS("task_budget", OBJECT),
	{0},
};

// What both /v1/messages and count_tokens read beside the conversation, and the hosted features
// neither can honour.
static const srv_field ant_common_fields[] = {
	SRV_ROW(ant_req, messages, SRV_K_JSON),
	SRV_ROW(ant_req, system, SRV_K_JSON),
	SRV_ROW(ant_req, tools, SRV_K_JSON),
	SRV_ROW(ant_req, tool_choice, SRV_K_JSON),
	SRV_ROW(ant_req, thinking, SRV_K_JSON),
	SRV_ROW(ant_req, output_format, SRV_K_JSON),
	{"output_config", SRV_K_OBJECT, .sub = output_config_fields},
	SRV_NAMED_AS("cache_control", OBJECT), // the prefix cache works without marks
	SRV_NAMED_AS("context_management", OBJECT),
	SRV_NAMED_AS("mcp_servers", ARRAY),
	SRV_NAMED_AS("compaction", OBJECT),
	SRV_NAMED_AS("billing_policy", OBJECT),
	SRV_NAMED_AS("speed", STR),
	SRV_NAMED_AS("user_profile_id", STR),
	SRV_NAMED_AS("workspace_id", STR),
	{0},
};

static const srv_field ant_fields[] = {
	{NULL, SRV_K_INCLUDE, .off = offsetof(ant_req, g), .sub = srv_gen_fields},
	{NULL, SRV_K_INCLUDE, .sub = ant_common_fields},
	{"max_tokens", SRV_K_INT, LANE_F_MAX_TOKENS, offsetof(ant_req, g.lr.max_tokens), .sub = NULL},
	{"temperature", SRV_K_NUM, LANE_F_TEMPERATURE, offsetof(ant_req, g.lr.sampling.temperature), .sub = NULL},
	{"top_p", SRV_K_NUM, LANE_F_TOP_P, offsetof(ant_req, g.lr.sampling.top_p), .sub = NULL},
	{"stop_sequences", SRV_K_STOP_ARRAY, LANE_F_STOP, offsetof(ant_req, g.stops), .sub = NULL},
	SRV_NAMED_AS("service_tier", STR),
	SRV_NAMED("container"),
	SRV_NAMED_AS("diagnostics", OBJECT),
	SRV_NAMED_AS("inference_geo", STR),
	SRV_NAMED("fallbacks"),
	SRV_NAMED("fallback_credit_token"),
	SRV_NAMED_AS("thread", OBJECT),
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

// thinking in each documented form: {"type": "enabled", "budget_tokens"} (the lane's budget),
// adaptive and between_tools (the model's own measure) or disabled, each with an optional display
// (omitted is named: the thinking is shown). max_tokens 0: not known (count_tokens).
static int ant_think(srv_conn *c, srv_gen *g, const json_t *v, int32_t max_tokens, srv_err *e) {
	static const char *const forms = "{\"type\": \"enabled\", \"budget_tokens\": N}, {\"type\": \"adaptive\"}, "
					 "{\"type\": \"between_tools\"} or {\"type\": \"disabled\"}";
	if (!v) return 0;
	const char *t = json_string_value(json_object_get(v, "type"));
	const bool enabled = t && !strcmp(t, "enabled");
	if (!json_is_object(v) || !t || (!enabled && strcmp(t, "adaptive") && strcmp(t, "between_tools") && strcmp(t, "disabled")))
		return srv_fail(e, SRV_E_BAD_REQUEST, "thinking", "thinking: must be %s", forms);
	const char *k;
	json_t *x;
	json_object_foreach((json_t *)v, k, x) {
		const bool known = !strcmp(k, "type") || (!strcmp(k, "display") && strcmp(t, "disabled") && strcmp(t, "between_tools")) ||
				   (!strcmp(k, "budget_tokens") && enabled);
		if (!known) return srv_fail(e, SRV_E_BAD_REQUEST, "thinking", "thinking.%s: unsupported parameter for type \"%s\"", k, t);
	}
	const json_t *d = json_object_get(v, "display");
	const char *ds = json_string_value(d);
	if (d && !json_is_null(d) && (!ds || (strcmp(ds, "summarized") && strcmp(ds, "omitted"))))
		return srv_fail(e, SRV_E_BAD_REQUEST, "thinking", "thinking.display: must be \"summarized\" or \"omitted\"");
	const json_t *b = json_object_get(v, "budget_tokens");
	if (enabled) {
		const json_int_t n = json_is_integer(b) ? json_integer_value(b) : 0;
		if (n < 1024) return srv_fail(e, SRV_E_BAD_REQUEST, "thinking", "thinking.budget_tokens: must be an integer of at least 1024");
		if (max_tokens && n >= max_tokens)
			return srv_fail(e, SRV_E_BAD_REQUEST, "thinking", "thinking.budget_tokens: must be less than max_tokens");
	}
	// a model with no reasoning family has no thinking to bound or show
	if (!c->mdl->reason && strcmp(t, "disabled")) srv_ignored_add(c, "thinking");
	else if (ds && !strcmp(ds, "omitted")) srv_ignored_add(c, "thinking.display");
	g->think = strcmp(t, "disabled") ? SRV_THINK_ON : SRV_THINK_OFF;
	if (enabled) g->think_budget = (int32_t)json_integer_value(b);
	return 0;
}

// output_format (or output_config.format): {"type": "json_schema", "schema"} into the grammar;
// compile false only checks its shape (count_tokens: the prompt does not depend on it).
static int ant_format(ant_req *r, bool compile, srv_err *e) {
	const bool both = r->output_format && r->config_format;
	json_t *f = r->output_format ? r->output_format : r->config_format;
	const char *param = r->output_format ? "output_format" : "output_config.format";
	if (both) return srv_fail(e, SRV_E_BAD_REQUEST, "output_format", "output_format: send it or output_config.format, not both");
	if (!f) return 0;
	const char *t = json_string_value(json_object_get(f, "type"));
	json_t *sc = json_object_get(f, "schema");
	const char *k;
	json_t *x;
	json_object_foreach(f, k, x) if (strcmp(k, "type") && strcmp(k, "schema"))
		return srv_fail(e, SRV_E_BAD_REQUEST, param, "%s.%s: unsupported parameter", param, k);
	if (!t || strcmp(t, "json_schema") || !json_is_object(sc))
		return srv_fail(e, SRV_E_BAD_REQUEST, param, "%s: must be {\"type\": \"json_schema\", \"schema\": {...}}", param);
	if (!compile) return 0;
	char p[48];
	snprintf(p, sizeof p, "%s.schema", param);
	return srv_grammar_schema(&r->g, sc, p, e);
}

// thinking, the format's shape, and the one field that is required: before srv_gen_check, whose
// --max-tokens would fill in a max_tokens not sent.
static int ant_check(srv_conn *c, ant_req *r, bool count, srv_err *e) {
	if (ant_think(c, &r->g, r->thinking, count ? 0 : r->g.lr.max_tokens, e) || ant_format(r, false, e)) return -1;
	if (!r->g.lr.max_tokens) return srv_fail(e, SRV_E_BAD_REQUEST, "max_tokens", "max_tokens: field required");
	return 0;
}

// tools [{name, description, input_schema}] and tool_choice {type: auto|any|tool|none, name}
// as OpenAI's, for the tool format.
static int ant_tools(srv_model *M, ant_req *r, srv_err *e) {
	json_t *tools = r->tools, *tc = r->tool_choice;
	if (tools && !json_is_array(tools)) return srv_fail(e, SRV_E_BAD_REQUEST, "tools", "tools: must be an array");
	enum tool_choice choice = TOOL_CHOICE_AUTO;
	const char *name = NULL;
	bool parallel = true;
	if (tc) {
		static const struct { const char *s; enum tool_choice c; } modes[] = {
			{"auto", TOOL_CHOICE_AUTO}, {"any", TOOL_CHOICE_REQUIRED}, {"tool", TOOL_CHOICE_NAMED}, {"none", TOOL_CHOICE_NONE}};
		const char *t = json_string_value(json_object_get(tc, "type"));
		size_t k = 0;
		while (t && k < sizeof modes / sizeof modes[0] && strcmp(t, modes[k].s)) k++;
		json_t *dp = json_object_get(tc, "disable_parallel_tool_use");
		if (!t || k == sizeof modes / sizeof modes[0] || (dp && !json_is_boolean(dp)))
			return srv_fail(e, SRV_E_BAD_REQUEST, "tool_choice",
					"tool_choice: must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}, with a name for \"tool\"");
		choice = modes[k].c;
		name = json_string_value(json_object_get(tc, "name"));
		if (choice == TOOL_CHOICE_NAMED && !name)
			return srv_fail(e, SRV_E_BAD_REQUEST, "tool_choice", "tool_choice.name: field required for type \"tool\"");
		parallel = !json_is_true(dp);
	}
	json_t *oai = json_array();
	size_t k;
	json_t *t;
	json_array_foreach(tools, k, t) {
		const char *ty = json_string_value(json_object_get(t, "type"));
		json_t *n = json_object_get(t, "name"), *d = json_object_get(t, "description"), *sc = json_object_get(t, "input_schema");
		if (!json_is_object(t) || (ty && strcmp(ty, "custom")) || !json_is_string(n) || !json_is_object(sc) ||
		    (d && !json_is_string(d))) {
			json_decref(oai);
			return srv_fail(e, SRV_E_BAD_REQUEST, "tools",
					"tools.%zu: a tool is {name, description, input_schema} (server tools are not supported)", k);
		}
		json_t *fn = json_pack("{s:O, s:O}", "name", n, "parameters", sc);
		if (fn && d) json_object_set(fn, "description", d);
		// strict: the input is exact to the schema or the request refused
		if (fn && json_is_boolean(json_object_get(t, "strict"))) json_object_set(fn, "strict", json_object_get(t, "strict"));
		json_array_append_new(oai, json_pack("{s:s, s:o}", "type", "function", "function", fn));
	}
	r->g.tool_id_prefix = "toolu_";
	int rc = srv_tools_set(M, &r->g, oai, choice, name, parallel, "tools", "input_schema", e);
	json_decref(oai);
	return rc;
}

// One message's blocks: text, tool_use (assistant turns) and tool_result (user turns) as OpenAI
// messages appended to flat; *text_only tells a plain turn (a prefill when it comes last).
// An assistant turn's thinking goes to *reasoning (malloc'd; NULL: none) for the templates that
// render it; redacted thinking is dropped. Parts the model cannot read are named on c.
static int ant_blocks(srv_conn *c, const char *role, json_t *content, const char *pc, json_t *flat, char **text,
		      char **reasoning, bool *text_only, srv_err *e) {
	*text_only = true;
	*reasoning = NULL;
	if (!json_is_array(content)) return srv_content_text(content, pc, text_blocks, c, text, e);
	const bool assistant = !strcmp(role, "assistant");
	srv_buf b = {0}, th = {0};
	json_t *calls = json_array();
	size_t k;
	json_t *bl;
	json_array_foreach(content, k, bl) {
		char p[128];
		snprintf(p, sizeof p, "%s.%zu", pc, k);
		const char *ty = json_string_value(json_object_get(bl, "type"));
		if (ty && !strcmp(ty, "tool_use") && assistant) {
			json_t *id = json_object_get(bl, "id"), *n = json_object_get(bl, "name"), *in = json_object_get(bl, "input");
			if (!json_is_string(id) || !json_is_string(n) || !json_is_object(in)) {
				srv_fail(e, SRV_E_BAD_REQUEST, p, "%s: a tool_use block is {id, name, input: object}", p);
				goto fail;
			}
			char *args = json_dumps(in, JSON_COMPACT);
			json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", id, "type", "function", "function", "name", n,
							       "arguments", args ? args : "{}"));
			free(args);
			*text_only = false;
		} else if (ty && !strcmp(ty, "tool_result") && !assistant) {
			json_t *id = json_object_get(bl, "tool_use_id"), *err = json_object_get(bl, "is_error");
			char pr[160], *rt = NULL;
			snprintf(pr, sizeof pr, "%s.content", p);
			if (!json_is_string(id) || (err && !json_is_boolean(err))) {
				srv_fail(e, SRV_E_BAD_REQUEST, p, "%s: a tool_result block is {tool_use_id, content, is_error}", p);
				goto fail;
			}
			if (srv_content_text(json_object_get(bl, "content"), pr, text_blocks, c, &rt, e)) goto fail;
			json_t *o = json_pack("{s:s, s:O, s:s+}", "role", "tool", "tool_call_id", id, "content", json_is_true(err) ? "Error: " : "", rt);
			free(rt);
			json_array_append_new(flat, o);
			*text_only = false;
		} else if (ty && !strcmp(ty, "thinking") && assistant) {
			json_t *tt = json_object_get(bl, "thinking");
			if (!json_is_string(tt)) {
				srv_fail(e, SRV_E_BAD_REQUEST, p, "%s: a thinking block is {thinking, signature}", p);
				goto fail;
			}
			// a block this server made comes back with its signature; one changed since does not
			if (!srv_think_signed(c->s, json_string_value(tt), json_string_length(tt), json_string_value(json_object_get(bl, "signature")))) {
				srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.signature: Invalid signature in thinking block (not a block this server made, "
					 "or its thinking was changed)", p);
				goto fail;
			}
			if (th.len) srv_buf_adds(&th, "\n\n");
			srv_buf_add(&th, json_string_value(tt), json_string_length(tt));
		} else if (ty && !strcmp(ty, "redacted_thinking") && assistant) {
			continue; // encrypted for another server's model: nothing here can read it
		} else {
			json_t *arr = json_pack("[O]", bl);
			char *t = NULL;
			int rc = srv_content_text(arr, pc, text_blocks, c, &t, e);
			json_decref(arr);
			if (rc) {
				snprintf(e->param, sizeof e->param, "%s", p);
				goto fail;
			}
			srv_buf_adds(&b, t);
			free(t);
		}
	}
	if (th.len || th.oom) {
		srv_buf_add(&th, "", 1);
		if (!(*reasoning = th.p)) {
			srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
			goto fail;
		}
		th = (srv_buf){0};
	}
	if (json_array_size(calls)) {
		json_t *m = json_pack("{s:s, s:s%, s:O}", "role", "assistant", "content", b.p ? b.p : "", b.len, "tool_calls", calls);
		if (m && *reasoning) json_object_set_new(m, "reasoning_content", json_string(*reasoning));
		json_array_append_new(flat, m);
		srv_buf_free(&b);
		*text = NULL;
	} else {
		srv_buf_add(&b, "", 1);
		*text = b.p;
		if (!*text) {
			json_decref(calls);
			free(*reasoning);
			*reasoning = NULL;
			return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
		}
	}
	json_decref(calls);
	return 0;
fail:
	srv_buf_free(&b);
	srv_buf_free(&th);
	json_decref(calls);
	return -1;
}

// system + messages into [{role, content}]; a final assistant turn becomes *prefill. A system
// message among them (Claude Code sends one for a model it does not know) stays a system turn
// where it is: srv_chat_prompt joins it to the system prompt for a template that has none there.
static int ant_messages(srv_conn *c, json_t *msgs, json_t *sys, json_t **out, char **prefill, srv_err *e) {
	*out = NULL;
	*prefill = NULL;
	if (!json_is_array(msgs) || !json_array_size(msgs))
		return srv_fail(e, SRV_E_BAD_REQUEST, "messages", "messages: must be a non-empty array");
	json_t *flat = json_array();
	if (!flat) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	if (sys) {
		char *text = NULL;
		if (srv_content_text(sys, "system", text_blocks, c, &text, e)) goto fail;
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
		if (srv_fields_known(m, ant_msg_fields, p, e) || srv_fields_read(m, ant_msg_fields, &r, p, NULL, c, e)) goto fail;
		const char *role = json_string_value(r.role);
		if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system"))) {
			srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.role: must be \"user\" or \"assistant\" (or \"system\")", p);
			goto fail;
		}
		json_t *content = r.content;
		if (!content) {
			srv_fail(e, SRV_E_BAD_REQUEST, pc, "%s: field required", pc);
			goto fail;
		}
		char *text = NULL, *reasoning = NULL;
		bool plain = true;
		if (!strcmp(role, "system")) {
			if (srv_content_text(content, pc, text_blocks, c, &text, e)) goto fail;
		} else if (ant_blocks(c, role, content, pc, flat, &text, &reasoning, &plain, e)) {
			goto fail;
		}
		if (i == n - 1 && !strcmp(role, "assistant") && plain) {
			*prefill = text;
			free(reasoning);
			break;
		}
		// a user turn of tool results alone adds no user message
		if (text && (plain || *text)) {
			json_t *o = json_pack("{s:s, s:s}", "role", role, "content", text);
			if (o && reasoning) json_object_set_new(o, "reasoning_content", json_string(reasoning));
			json_array_append_new(flat, o);
		}
		free(text);
		free(reasoning);
	}
	*out = flat;
	return 0;
fail:
	json_decref(flat);
	return -1;
}

void srv_messages(srv_conn *c) {
	srv_model *M = c->mdl;
	srv_err e;
	json_t *j = NULL, *flat = NULL;
	char *prefill = NULL;
	ant_state *st = NULL;
	ant_req r = {0};
	srv_gen_init(&r.g, &ant_lane_api, c);
	if (srv_parse_body(c, &j, &e) || srv_fields_known(j, ant_fields, NULL, &e) ||
	    srv_fields_read(j, ant_fields, &r, NULL, &r.g.api, c, &e) || ant_check(c, &r, false, &e) || srv_gen_check(M, &r.g, &e) ||
	    ant_format(&r, true, &e) || ant_tools(M, &r, &e) ||
	    srv_check_parts(M, r.messages, "messages", &e) || ant_messages(c, r.messages, r.system, &flat, &prefill, &e) ||
	    srv_chat_prompt(M, flat, prefill, "messages", &r.g, &r.g.prompt, &r.g.lr.n_prompt, &e))
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
	srv_gen_run(c, &ant_api, st, &r.g, "msg_");
	return;
fail:
	json_decref(j);
	json_decref(flat);
	free(prefill);
	srv_gen_free(&r.g);
	srv_reply_error(c, &e);
}

static const srv_field ant_count_fields[] = {
	{"model", SRV_K_STR, .off = offsetof(ant_req, g.model)},
	{NULL, SRV_K_INCLUDE, .sub = ant_common_fields},
	{0},
};

// POST /v1/messages/count_tokens: the prompt /v1/messages would run, counted.
void srv_count_tokens(srv_conn *c) {
	srv_model *M = c->mdl;
	http_server *s = c->s;
	srv_err e;
	json_t *j = NULL, *flat = NULL;
	char *prefill = NULL;
	ant_req r = {0};
	srv_gen_init(&r.g, &ant_lane_api, c);
	r.g.lr.max_tokens = 1; // not part of this request
	int rc = srv_parse_body(c, &j, &e) || srv_fields_known(j, ant_count_fields, NULL, &e) ||
		 srv_fields_read(j, ant_count_fields, &r, NULL, &r.g.api, c, &e) || ant_check(c, &r, true, &e) ||
		 srv_check_model(s, r.g.model, &e) || ant_tools(M, &r, &e) || ant_messages(c, r.messages, r.system, &flat, &prefill, &e) ||
		 srv_chat_prompt(M, flat, prefill, "messages", &r.g, &r.g.prompt, &r.g.lr.n_prompt, &e) || srv_ignored_refuse(c, &e);
	const int32_t n = r.g.lr.n_prompt;
	json_decref(j);
	json_decref(flat);
	free(prefill);
	srv_gen_free(&r.g);
	if (rc) { srv_reply_error(c, &e); return; }
	srv_reply_json(c, 200, json_pack("{s:i}", "input_tokens", n), 0);
}
