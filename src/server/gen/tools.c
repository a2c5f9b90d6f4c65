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
	json_decref(g->format);
	g->format = NULL;
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
	if (!rc) g->format = json_incref((json_t *)schema);
	return rc;
}

int srv_grammar_json_object(srv_gen *g, srv_err *e) {
	const char *t = grammar_json_object_gbnf();
	int rc = srv_grammar_text(g, t, strlen(t), "response_format", e);
	if (!rc) g->format = json_pack("{s:s}", "type", "object");
	return rc;
}

// The format's grammar beside the calls': the reply is either a call or the format's JSON, as
// the OpenAI APIs allow tools and a format together (calls until the final answer).
static int with_format(srv_gen *g, const char *calls, const char *param, srv_err *e) {
	char err[400], *fmt = NULL;
	int rc = grammar_schema_gbnf(g->format, "fmt", &fmt, err, sizeof err);
	if (rc == LANES_ENOMEM) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	if (rc) return srv_fail(e, SRV_E_BAD_REQUEST, param, "%s: %s", param, err);
	// the calls' start rule is `root`, defined once at a line's start and named nowhere else
	const char *r = !strncmp(calls, "root ::=", 8) ? calls : strstr(calls, "\nroot ::=");
	if (r && r != calls) r++;
	char *text = NULL;
	size_t cap = 0;
	FILE *o = r ? open_memstream(&text, &cap) : NULL;
	if (o) {
		fprintf(o, "%s\n%.*scalls%s\nroot ::= fmt | calls\n", fmt, (int)(r - calls), calls, r + 4);
		if (fclose(o)) free(text), text = NULL;
	}
	free(fmt);
	json_t *keep = json_incref(g->format);
	rc = text ? srv_grammar_text(g, text, strlen(text), param, e) : srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	free(text);
	g->format = keep; // srv_grammar_text cleared it
	return rc;
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

int srv_tools_set(srv_model *M, srv_gen *g, json_t *tools, enum tool_choice choice, const char *name, bool parallel,
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
	const tool_format *f = M->chat.fmt;
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
	// each keyword a tool's schema (not strict) could not check is named, once
	for (const char *k = notes.relaxed; *k;) {
		k += strspn(k, ", ");
		const size_t n = strcspn(k, ", ");
		if (!n) break;
		char nm[96];
		snprintf(nm, sizeof nm, "schema.%.*s", (int)(n < 80 ? n : 80), k);
		srv_ignored_add(g->conn, nm);
		k += n;
	}
	// a format in auto: the reply is a call or the format's JSON, from its first token
	const bool fmt = choice == TOOL_CHOICE_AUTO && g->format;
	rc = fmt ? with_format(g, gbnf, param, e) : srv_grammar_text(g, gbnf, strlen(gbnf), param, e);
	free(gbnf);
	if (rc) return rc;
	g->triggers = choice == TOOL_CHOICE_AUTO && !fmt ? trig : NULL;
	g->n_triggers = choice == TOOL_CHOICE_AUTO && !fmt ? n_trig : 0;
	json_decref(g->tools);
	g->tools = json_incref(tools);
	g->parse_calls = true;
	g->calls_only = choice != TOOL_CHOICE_AUTO;
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

// Call k of the scan over text in the shape adapters use: {id, name, arguments: the JSON text as
// the model wrote it (so far, for an open call), input: an object, whole}.
static json_t *call_object(srv_call *c, srv_tool_stream *ts, const tool_scan *sc, const char *text, int k) {
	const tool_call_span *sp = &sc->calls[k];
	json_t *input = tool_scan_input(sc, text, k);
	if (!input) return NULL;
	return json_pack("{s:s, s:s%, s:s%, s:o, s:b}", "id", call_id(c, ts, k), "name", text + sp->name_off, sp->name_len,
			 "arguments", text + sp->args_off, sp->args_len, "input", input, "whole", sp->whole);
}

int srv_tool_calls(srv_call *c, int i, size_t *content_len, json_t **calls) {
	srv_choice *ch = &c->ch[i];
	*content_len = ch->text.len;
	*calls = json_array();
	if (!*calls) return -1;
	if (!c->g.parse_calls) return 0;
	// one scan of the whole text: what a stream of the same text sent, piece by piece
	const char *text = ch->text.p ? ch->text.p : "";
	tool_scan sc;
	tool_scan_init(&sc, c->mdl->chat.fmt, c->g.calls_only);
	int rc = tool_scan_feed(&sc, text, ch->text.len, srv_choice_cut(ch) ? TOOL_CUT : TOOL_END);
	*content_len = sc.content_len;
	for (int k = 0; !rc && k < sc.n_calls; k++) {
		json_t *o = call_object(c, &ch->tools, &sc, text, k);
		rc = !o || json_array_append_new(*calls, o) ? -1 : 0;
	}
	tool_scan_free(&sc);
	if (rc) json_decref(*calls), *calls = NULL;
	return rc;
}

void srv_tools_stream(srv_call *c, int i, bool final, const srv_tool_sink *sink) {
	srv_choice *ch = &c->ch[i];
	srv_tool_stream *ts = &ch->tools;
	const char *text = ch->text.p ? ch->text.p : "";
	if (!ts->scanning) tool_scan_init(&ts->scan, c->mdl->chat.fmt, c->g.calls_only), ts->scanning = true;
	const tool_scan *sc = &ts->scan;
	// the scan reads only what the text adds: its pieces go out as they are found
	if (tool_scan_feed(&ts->scan, text, ch->text.len, !final ? TOOL_MORE : srv_choice_cut(ch) ? TOOL_CUT : TOOL_END)) return;
	if (ts->n_started == 0 && sc->content_len > ts->content_sent) {
		sink->content(c, i, text + ts->content_sent, sc->content_len - ts->content_sent);
		ts->content_sent = sc->content_len;
	}
	for (int k = ts->n_started && !ts->cur_done ? ts->n_started - 1 : ts->n_started; k < sc->n_calls; k++) {
		const tool_call_span *sp = &sc->calls[k];
		if (k >= ts->n_started) {
			sink->call_start(c, i, k, call_id(c, ts, k), text + sp->name_off, sp->name_len);
			ts->n_started = k + 1;
			ts->cur_sent = 0;
			ts->cur_done = false;
		}
		if (sp->args_len > ts->cur_sent) {
			sink->call_args(c, i, k, text + sp->args_off + ts->cur_sent, sp->args_len - ts->cur_sent);
			ts->cur_sent = sp->args_len;
		}
		// a call ends when its object closes, or with the scan (cut, or the text left the layout)
		if (!sp->whole && !sc->over) break;
		json_t *o = call_object(c, ts, sc, text, k);
		ts->cur_done = true;
		sink->call_end(c, i, k, call_id(c, ts, k), o);
		json_decref(o);
	}
}
