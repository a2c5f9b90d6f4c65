// server/gen/tools: structured outputs and tool calls as every adapter uses them — a GBNF
// text, a JSON Schema or "any JSON object" into the request's grammar; tools and tool_choice
// into the prompt's tools and the calls' grammar; the output parsed back into calls, whole or
// as a stream of content, call starts, argument deltas and call ends.
#include "server/gen/gen.h"
#include "grammar/grammar.h"
#include "grammar/schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- grammars -----------------------------------------------------------------------------------

int srv_grammar_text(srv_gen *g, const char *text, size_t len, const char *param, srv_err *e) {
	char err[400];
	grammar *gr = NULL;
	int rc = grammar_compile(&gr, text, len, NULL, err, sizeof err);
	if (rc == LANES_ENOMEM) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	if (rc) return srv_fail(e, SRV_E_BAD_REQUEST, param, "%s: %s", param, err);
	grammar_unref(g->grammar);
	g->grammar = gr;
	g->triggers = NULL;
	g->n_triggers = 0;
	return 0;
}

int srv_grammar_schema(srv_gen *g, const json_t *schema, const char *param, srv_err *e) {
	if (!json_is_object(schema) && !json_is_boolean(schema))
		return srv_fail(e, SRV_E_BAD_REQUEST, param, "%s must be a JSON Schema (an object)", param);
	char err[400], *gbnf = NULL;
	int rc = grammar_schema_gbnf(schema, "root", &gbnf, err, sizeof err);
	if (rc == LANES_ENOMEM) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	if (rc) return srv_fail(e, SRV_E_BAD_REQUEST, param, "%s: %s", param, err);
	rc = srv_grammar_text(g, gbnf, strlen(gbnf), param, e);
	free(gbnf);
	return rc;
}

int srv_grammar_json_object(srv_gen *g, srv_err *e) {
	const char *t = grammar_json_object_gbnf();
	return srv_grammar_text(g, t, strlen(t), "response_format", e);
}

// ---- tools --------------------------------------------------------------------------------------

int srv_tool_choice(json_t *v, bool flat, enum tool_choice *out, const char **name, srv_err *e) {
	*out = TOOL_CHOICE_AUTO;
	*name = NULL;
	if (!v || json_is_null(v)) return 0;
	static const struct { const char *s; enum tool_choice c; } modes[] = {
		{"none", TOOL_CHOICE_NONE}, {"auto", TOOL_CHOICE_AUTO}, {"required", TOOL_CHOICE_REQUIRED}};
	const char *s = json_string_value(v);
	for (size_t k = 0; s && k < sizeof modes / sizeof modes[0]; k++)
		if (!strcmp(s, modes[k].s)) return *out = modes[k].c, 0;
	const char *ty = json_string_value(json_object_get(v, "type"));
	json_t *n = flat ? json_object_get(v, "name") : json_object_get(json_object_get(v, "function"), "name");
	if (!ty || strcmp(ty, "function") || !json_is_string(n))
		return srv_fail(e, SRV_E_BAD_REQUEST, "tool_choice",
				"tool_choice must be \"none\", \"auto\", \"required\" or %s",
				flat ? "{\"type\": \"function\", \"name\": NAME}" : "{\"type\": \"function\", \"function\": {\"name\": NAME}}");
	*out = TOOL_CHOICE_NAMED;
	*name = json_string_value(n);
	return 0;
}

// JSON values in v, counted until past limit: a bound on the work v's grammar may take.
static size_t json_nodes(const json_t *v, size_t limit) {
	size_t n = 1, i;
	const char *k;
	json_t *x;
	if (json_is_array(v))
		json_array_foreach(v, i, x) {
			if (n > limit) break;
			n += json_nodes(x, limit - n);
		}
	else if (json_is_object(v))
		json_object_foreach((json_t *)v, k, x) {
			if (n > limit) break;
			n += json_nodes(x, limit - n);
		}
	return n;
}

int srv_tools_set(http_server *s, srv_gen *g, json_t *tools, enum tool_choice choice, const char *name, bool parallel,
		  const char *param, const char *schema_at, srv_err *e) {
	if (tools && !json_is_array(tools)) return srv_fail(e, SRV_E_BAD_REQUEST, param, "%s must be an array", param);
	// the grammar's cost grows with the tools: bounded before it is built
	if (json_array_size(tools) > SRV_TOOLS_MAX)
		return srv_fail(e, SRV_E_BAD_REQUEST, param, "%s: %zu tools, more than the %d a request may offer", param, json_array_size(tools),
				SRV_TOOLS_MAX);
	if (tools && json_nodes(tools, SRV_TOOLS_NODES) > SRV_TOOLS_NODES)
		return srv_fail(e, SRV_E_BAD_REQUEST, param, "%s: the tools' definitions hold more than %d JSON values together", param,
				SRV_TOOLS_NODES);
	const bool any = tools && json_array_size(tools);
	if (!any) {
		if (choice == TOOL_CHOICE_REQUIRED || choice == TOOL_CHOICE_NAMED)
			return srv_fail(e, SRV_E_BAD_REQUEST, "tool_choice", "tool_choice asks for a tool call, but no %s were given", param);
		return 0;
	}
	if (choice == TOOL_CHOICE_NAMED) {
		bool found = false;
		size_t k;
		json_t *t;
		json_array_foreach(tools, k, t) {
			const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
			found |= n && !strcmp(n, name);
		}
		if (!found) return srv_fail(e, SRV_E_BAD_REQUEST, "tool_choice", "tool_choice names '%s', which is not among the %s", name, param);
	}
	// none: the model is not told of tools it may not call, and its text is not parsed
	if (choice == TOOL_CHOICE_NONE) return 0;
	const tool_format *f = s->chat.fmt;
	char err[400], *gbnf = NULL;
	const char *const *trig = NULL;
	int n_trig = 0;
	tool_schema_notes notes = {.field = schema_at};
	int rc = tool_grammar(f, tools, choice, name, parallel, &gbnf, &trig, &n_trig, &notes, err, sizeof err);
	if (rc == LANES_ENOMEM) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	if (rc && notes.bad >= 0) {
		// the message begins with the tool's path; the field says it too
		char at[96];
		snprintf(at, sizeof at, "%s[%d].%s", param, notes.bad, schema_at);
		return srv_fail(e, SRV_E_BAD_REQUEST, at, "%s", err);
	}
	if (rc) return srv_fail(e, SRV_E_BAD_REQUEST, param, "%s", err);
	snprintf(g->schema_relaxed, sizeof g->schema_relaxed, "%s", notes.relaxed);
	rc = srv_grammar_text(g, gbnf, strlen(gbnf), param, e);
	free(gbnf);
	if (rc) return rc;
	g->triggers = choice == TOOL_CHOICE_AUTO ? trig : NULL;
	g->n_triggers = choice == TOOL_CHOICE_AUTO ? n_trig : 0;
	json_decref(g->tools);
	g->tools = json_incref(tools);
	g->parse_calls = true;
	if (!g->tool_id_prefix) g->tool_id_prefix = "call_";
	return 0;
}

// ---- the output as calls ----------------------------------------------------------------------

// Call k's id: given once, kept for the stream and the reply.
static const char *call_id(srv_call *c, srv_tool_stream *ts, int k) {
	if (!ts->ids) ts->ids = json_array();
	while (ts->ids && (int)json_array_size(ts->ids) <= k) {
		char id[64];
		srv_new_id(c->s, c->g.tool_id_prefix ? c->g.tool_id_prefix : "call_", id, sizeof id);
		json_array_append_new(ts->ids, json_string(id));
	}
	const char *id = json_string_value(json_array_get(ts->ids, (size_t)k));
	return id ? id : "";
}

// One parsed call in the shape adapters use: {id, name, arguments: JSON text, input: object}.
static json_t *call_object(srv_call *c, srv_tool_stream *ts, int k, json_t *parsed) {
	json_t *args = json_object_get(parsed, "arguments");
	char *text = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_t *o = json_pack("{s:s, s:O, s:s, s:O}", "id", call_id(c, ts, k), "name", json_object_get(parsed, "name"), "arguments",
			      text ? text : "{}", "input", args);
	free(text);
	return o;
}

int srv_tool_calls(srv_call *c, int i, size_t *content_len, json_t **calls) {
	srv_choice *ch = &c->ch[i];
	*content_len = ch->text.len;
	*calls = json_array();
	if (!*calls) return -1;
	if (!c->g.parse_calls || ch->tools.plain) return 0;
	tool_parsed p;
	char err[256];
	const tool_format *f = c->s->chat.fmt;
	if (tool_parse(f, ch->text.p ? ch->text.p : "", ch->text.len, true, &p, err, sizeof err)) {
		// a call cut short (by length) is not a call: the text stays the reply's content
		LOG_DEBUG(SRV_MOD, "the output holds no whole tool call: %s", err);
		return 0;
	}
	*content_len = p.content_len;
	size_t k;
	json_t *v;
	json_array_foreach(p.calls, k, v) json_array_append_new(*calls, call_object(c, &ch->tools, (int)k, v));
	tool_parsed_free(&p);
	return 0;
}

void srv_tools_stream(srv_call *c, int i, bool final, const srv_tool_sink *sink) {
	srv_choice *ch = &c->ch[i];
	srv_tool_stream *ts = &ch->tools;
	const char *text = ch->text.p ? ch->text.p : "";
	tool_parsed p;
	char err[256];
	const tool_format *f = c->s->chat.fmt;
	if (ts->plain || tool_parse(f, text, ch->text.len, final, &p, err, sizeof err)) {
		// the text holds no whole call: what was not sent as content goes now
		ts->plain = ts->n_started == 0;
		if (ts->plain && ch->text.len > ts->content_sent) sink->content(c, i, text + ts->content_sent, ch->text.len - ts->content_sent);
		if (ts->plain) ts->content_sent = ch->text.len;
		return;
	}
	const size_t upto = final || json_array_size(p.calls) || p.open ? p.content_len : p.safe_len;
	if (upto > ts->content_sent && ts->n_started == 0) {
		sink->content(c, i, text + ts->content_sent, upto - ts->content_sent);
		ts->content_sent = upto;
	}
	const int n_done = (int)json_array_size(p.calls);
	for (int k = 0; k < n_done; k++) {
		if (k < ts->n_started - 1 || (k == ts->n_started - 1 && ts->cur_done)) continue;
		json_t *o = call_object(c, ts, k, json_array_get(p.calls, (size_t)k));
		const char *args = json_string_value(json_object_get(o, "arguments"));
		if (!o || !args) break;
		if (k >= ts->n_started) {
			const char *name = json_string_value(json_object_get(o, "name"));
			sink->call_start(c, i, k, call_id(c, ts, k), name, strlen(name));
			ts->n_started = k + 1;
			ts->cur_sent = 0;
		}
		// the arguments as parsed extend what the stream sent of them (compact JSON both)
		const size_t al = strlen(args);
		if (ts->cur_sent <= al && !strncmp(args, text + ts->cur_off, ts->cur_sent)) {
			if (al > ts->cur_sent) sink->call_args(c, i, k, args + ts->cur_sent, al - ts->cur_sent);
		} else {
			LOG_DEBUG(SRV_MOD, "tool call %d: the arguments streamed differ from their parsed form", k);
		}
		ts->cur_sent = al;
		ts->cur_done = true;
		sink->call_end(c, i, k, call_id(c, ts, k), o);
		json_decref(o);
	}
	if (p.open && p.partial_name && !final) {
		const int k = n_done;
		if (k >= ts->n_started) {
			sink->call_start(c, i, k, call_id(c, ts, k), p.partial_name, p.partial_name_len);
			ts->n_started = k + 1;
			ts->cur_sent = 0;
			ts->cur_done = false;
		}
		// the arguments go once the call is whole, in the compact form the reply has: raw text
		// may run past the object (the closing marker) or be laid out otherwise
		ts->cur_off = p.args_off;
	}
	tool_parsed_free(&p);
}
