// chat, tools: one table row per tool-call family — how its template is recognized, how
// messages and tools are shaped for it, the layout of its calls (which both the grammar and the
// parser read), and the texts that open a call. Layouts are strings where %N is the tool's
// name, %A its arguments (a JSON object), %I a 9-character id and %D a small number.
#include "chat/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "grammar/schema.h"

struct tool_format {
	const char *name;
	const char *detect[2];  // every one must appear in the template source
	bool args_text;         // the template concatenates arguments: keep them JSON text
	bool content_null;      // an assistant turn with calls must have content none
	bool short_ids;         // call ids must be 9 alphanumeric characters
	bool one_call_per_turn; // the template refuses several calls in one turn
	bool plan_field;        // the call turn's text goes in tool_plan
	bool tools_in_system;   // the template never renders tools: list them in the system turn
	bool fallback;          // no tool support: calls and results become plain text
	bool no_system_role;    // the template refuses a system turn: instructions go to the first user turn
	bool bare_first;        // the prompt ends with the call's opener: the first call lacks it
	const char *trigger;    // the text that opens the calls (a lazy grammar's trigger)
	const char *open;       // before the first call (begins with trigger), or "" when each call opens
	const char *call;       // one call's layout
	const char *sep;        // between calls
	const char *close;      // after the last call
};

#define HERMES_CALL "<tool_call>\n{\"name\": \"%N\", \"arguments\": %A}\n</tool_call>"

// Order matters: the first row whose markers all appear wins (functionary v3.1 also holds
// <|python_tag|>, firefunction also holds <|start_header_id|>). Llama 3's <|python_tag|> calls of
// builtin tools are left as content.
static const struct tool_format formats[] = {
	// the prompt ends with ">>>": required and named grammars begin with the bare first call; a
	// lazy grammar constrains the calls that follow a ">>>" the model writes itself
	{.name = "functionary-v3.2", .detect = {">>>all"}, .args_text = true, .bare_first = true, .trigger = ">>>",
	 .open = "", .call = ">>>%N\n%A", .sep = "", .close = ""},
	{.name = "functionary-v3.1", .detect = {"<function="}, .args_text = true, .trigger = "<function=", .open = "",
	 .call = "<function=%N>%A</function>", .sep = "", .close = ""},
	{.name = "firefunction-v2", .detect = {" functools["}, .args_text = true, .trigger = " functools[",
	 .open = " functools[", .call = "{\"name\": \"%N\", \"arguments\": %A}", .sep = ", ", .close = "]"},
	// the distilled models' templates never render tools, and the other one renders them through
	// map | tojson, which Jinja2 refuses (a generator): list them in the system turn for both
	{.name = "deepseek-r1", .detect = {"<｜tool▁calls▁begin｜>"}, .args_text = true, .content_null = true,
	 .tools_in_system = true, .trigger = "<｜tool▁calls▁begin｜>", .open = "<｜tool▁calls▁begin｜>",
	 .call = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>%N\n```json\n%A\n```<｜tool▁call▁end｜>", .sep = "\n",
	 .close = "<｜tool▁calls▁end｜>"},
	{.name = "command-r", .detect = {"<|START_ACTION|>"}, .plan_field = true, .trigger = "<|START_ACTION|>",
	 .open = "<|START_ACTION|>[\n    ",
	 .call = "{\"tool_call_id\": \"%D\", \"tool_name\": \"%N\", \"parameters\": %A}", .sep = ",\n    ",
	 .close = "\n]<|END_ACTION|>"},
	{.name = "command-r", .detect = {"Action:", "<|START_OF_TURN_TOKEN|>"}, .trigger = "Action:",
	 .open = "Action:\n```json\n[\n",
	 .call = "    {\n        \"tool_name\": \"%N\",\n        \"parameters\": %A\n    }", .sep = ",\n",
	 .close = "\n]```"},
	{.name = "mistral", .detect = {"[TOOL_CALLS]"}, .short_ids = true, .trigger = "[TOOL_CALLS]",
	 .open = "[TOOL_CALLS][", .call = "{\"name\": \"%N\", \"arguments\": %A, \"id\": \"%I\"}", .sep = ", ",
	 .close = "]"},
	{.name = "llama3", .detect = {"<|start_header_id|>", "ipython"}, .one_call_per_turn = true,
	 .trigger = "{\"name\"", .open = "", .call = "{\"name\": \"%N\", \"parameters\": %A}", .sep = "", .close = ""},
	{.name = "hermes", .detect = {"<tool_call>"}, .trigger = "<tool_call>", .open = "", .call = HERMES_CALL,
	 .sep = "\n", .close = ""},
	{.name = "fallback", .detect = {"System role not supported"}, .fallback = true, .no_system_role = true,
	 .trigger = "<tool_call>", .open = "", .call = HERMES_CALL, .sep = "\n", .close = ""},
	{.name = "fallback", .detect = {""}, .fallback = true, .trigger = "<tool_call>", .open = "",
	 .call = HERMES_CALL, .sep = "\n", .close = ""},
};
#define N_FORMATS (sizeof formats / sizeof formats[0])

const tool_format *tool_format_of(const char *src) {
	for (size_t i = 0; src && i < N_FORMATS; i++) {
		bool all = true;
		for (int k = 0; k < 2 && formats[i].detect[k]; k++) all = all && strstr(src, formats[i].detect[k]);
		if (all) return &formats[i];
	}
	return &formats[N_FORMATS - 1];
}

const char *tool_format_name(const tool_format *f) { return f ? f->name : "fallback"; }

// ---- tools and messages -------------------------------------------------------------------

static bool plain_name(const char *s) {
	size_t n = strlen(s);
	if (n < 1 || n > 64) return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
			return false;
	}
	return true;
}

static bool is_str(const json_t *v, const char *s) { return json_is_string(v) && !strcmp(json_string_value(v), s); }

// Checks tools and returns them normalized: description and parameters always present, so
// templates that read tool.parameters.properties or concatenate the description render.
static int check_tools(const json_t *tools, json_t **out, char *err, size_t errlen) {
	*out = NULL;
	if (!tools || json_is_null(tools)) return 0;
	if (!json_is_array(tools)) return base_seterr(err, errlen, LANES_EINVAL, "tools: must be an array");
	json_t *res = json_array();
	if (!res) return LANES_ENOMEM;
	for (size_t i = 0; i < json_array_size(tools); i++) {
		const json_t *t = json_array_get(tools, i);
		const json_t *type = json_object_get(t, "type"), *fn = json_object_get(t, "function");
		const char *msg = NULL, *at = "";
		if (!json_is_object(t)) msg = "must be an object";
		else if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
			at = ".type", msg = "must be \"function\"";
		else if (!json_is_object(fn)) at = ".function", msg = "must be an object";
		const json_t *name = json_object_get(fn, "name"), *desc = json_object_get(fn, "description");
		const json_t *params = json_object_get(fn, "parameters");
		if (msg) {
		} else if (!json_is_string(name) || !plain_name(json_string_value(name)))
			at = ".function.name", msg = "must match ^[a-zA-Z0-9_-]{1,64}$";
		else if (desc && !json_is_string(desc) && !json_is_null(desc))
			at = ".function.description", msg = "must be a string";
		else if (params && !json_is_null(params) &&
			 (!json_is_object(params) || (json_object_get(params, "type") &&
						      !is_str(json_object_get(params, "type"), "object"))))
			at = ".function.parameters", msg = "must be a JSON Schema of type object";
		for (size_t j = 0; !msg && j < i; j++)
			if (!strcmp(json_string_value(json_object_get(json_object_get(json_array_get(res, j), "function"),
								     "name")),
				    json_string_value(name)))
				at = ".function.name", msg = "repeats the name of an earlier tool";
		if (msg) {
			json_decref(res);
			return base_seterr(err, errlen, LANES_EINVAL, "tools[%zu]%s: %s", i, at, msg);
		}
		json_t *p = params && json_is_object(params) ? json_deep_copy(params) : json_object();
		if (p && !json_object_get(p, "type")) json_object_set_new(p, "type", json_string("object"));
		if (p && !json_object_get(p, "properties")) json_object_set_new(p, "properties", json_object());
		json_t *nf = json_pack("{s:O, s:s, s:o}", "name", name, "description",
				       json_is_string(desc) ? json_string_value(desc) : "", "parameters", p);
		if (!nf || json_array_append_new(res, json_pack("{s:s, s:o}", "type", "function", "function", nf))) {
			json_decref(res);
			return LANES_ENOMEM;
		}
	}
	*out = res;
	return 0;
}

// A 9-character alphanumeric id for an OpenAI call id (same id in, same id out).
static void short_id(const char *id, char out[10]) {
	static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	size_t n = strlen(id);
	bool ok = n == 9;
	for (size_t i = 0; ok && i < n; i++) ok = strchr(alnum, id[i]) && id[i];
	if (ok) {
		memcpy(out, id, 10);
		return;
	}
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)id[i]) * 1099511628211ull;
	for (int i = 0; i < 9; i++, h /= 62) out[i] = alnum[h % 62];
	out[9] = 0;
}

static const char *content_of(const json_t *m) {
	const char *s = json_string_value(json_object_get(m, "content"));
	return s ? s : "";
}

// The instructions the fallback (or a template that never renders tools) puts in the system
// turn: the tools, and f's call syntax shown with placeholders.
static char *tools_prompt(const tool_format *f, const json_t *tools) {
	char *list = NULL;
	size_t cap = 0;
	FILE *o = open_memstream(&list, &cap);
	if (!o) return NULL;
	fputs("You can call functions to help with the user's request. The functions are listed within "
	      "<tools></tools> as JSON:\n<tools>\n", o);
	for (size_t i = 0; i < json_array_size(tools); i++) {
		char *s = json_dumps(json_array_get(tools, i), JSON_COMPACT | JSON_ENSURE_ASCII);
		if (s) fprintf(o, "%s\n", s);
		free(s);
	}
	fprintf(o, "</tools>\nTo call one, reply with its name and its arguments as a JSON object, in this form:\n%s", f->open);
	for (const char *p = f->call; *p; p++) {
		if (*p != '%' || !p[1]) {
			fputc(*p, o);
			continue;
		}
		p++;
		fputs(*p == 'N' ? "<function-name>" : *p == 'A' ? "<arguments-object>" : *p == 'I' ? "<9 letters or digits>" : "0", o);
	}
	fprintf(o, "%s\n", f->close);
	if (f->fallback) fputs("A function's result comes back within <tool_response></tool_response>.", o);
	fclose(o);
	return list;
}

// Appends text to the content of the last message when it has role, else a new message.
static int push_text(json_t *msgs, const char *role, const char *text) {
	json_t *last = json_array_get(msgs, json_array_size(msgs) ? json_array_size(msgs) - 1 : 0);
	if (last && !strcmp(json_string_value(json_object_get(last, "role")), role)) {
		const char *c = content_of(last);
		size_t n = strlen(c) + strlen(text) + 2;
		char *s = malloc(n);
		if (!s) return LANES_ENOMEM;
		snprintf(s, n, "%s%s%s", c, *c ? "\n" : "", text);
		int rc = json_object_set_new(last, "content", json_string(s)) ? LANES_ENOMEM : 0;
		free(s);
		return rc;
	}
	return json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", role, "content", text)) ? LANES_ENOMEM : 0;
}

static int fallback_messages(const tool_format *f, const json_t *tools, const json_t *in, json_t *out) {
	char *prompt = tools && json_array_size(tools) ? tools_prompt(f, tools) : NULL;
	if (tools && json_array_size(tools) && !prompt) return LANES_ENOMEM;
	int rc = 0;
	size_t i = 0;
	const json_t *m0 = json_array_get(in, 0);
	bool sys0 = m0 && !strcmp(json_string_value(json_object_get(m0, "role")), "system");
	if (prompt && !f->no_system_role) {
		rc = push_text(out, "system", sys0 ? content_of(m0) : "");
		rc = rc ? rc : push_text(out, "system", prompt);
		i = sys0;
	} else if (prompt) {
		rc = push_text(out, "user", prompt);
	}
	for (; !rc && i < json_array_size(in); i++) {
		const json_t *m = json_array_get(in, i);
		const char *role = json_string_value(json_object_get(m, "role"));
		const json_t *calls = json_object_get(m, "tool_calls");
		if (!strcmp(role, "tool")) {
			size_t n = strlen(content_of(m)) + 64;
			char *s = malloc(n);
			if (!s) return free(prompt), LANES_ENOMEM;
			snprintf(s, n, "<tool_response>\n%s\n</tool_response>", content_of(m));
			rc = push_text(out, "user", s);
			free(s);
		} else if (!strcmp(role, "assistant") && json_array_size(calls)) {
			if (*content_of(m)) rc = push_text(out, "assistant", content_of(m));
			for (size_t j = 0; !rc && j < json_array_size(calls); j++) {
				const json_t *fn = json_object_get(json_array_get(calls, j), "function");
				char *args = json_dumps(json_object_get(fn, "arguments"), JSON_COMPACT | JSON_ENSURE_ASCII);
				size_t n = (args ? strlen(args) : 0) + strlen(json_string_value(json_object_get(fn, "name"))) + 64;
				char *s = args ? malloc(n) : NULL;
				if (s) snprintf(s, n, "<tool_call>\n{\"name\": \"%s\", \"arguments\": %s}\n</tool_call>",
						json_string_value(json_object_get(fn, "name")), args);
				rc = s ? push_text(out, "assistant", s) : LANES_ENOMEM;
				free(s);
				free(args);
			}
		} else if (!strcmp(role, "system") && f->no_system_role) {
			rc = push_text(out, "user", content_of(m));
		} else {
			rc = push_text(out, role, content_of(m));
		}
	}
	free(prompt);
	return rc;
}

// Checks one message's shape and returns a copy with arguments parsed (for native families).
static int convert_message(const tool_format *f, const json_t *m, size_t i, json_t **out, char *err, size_t errlen) {
	*out = NULL;
	const char *role = json_string_value(json_object_get(m, "role"));
	if (!json_is_object(m) || !role)
		return base_seterr(err, errlen, LANES_EINVAL, "messages[%zu]: must be an object with a string role", i);
	const json_t *content = json_object_get(m, "content");
	if (content && !json_is_string(content) && !json_is_null(content))
		return base_seterr(err, errlen, LANES_EINVAL, "messages[%zu].content: must be a string", i);
	json_t *c = json_deep_copy(m);
	if (!c) return LANES_ENOMEM;
	const json_t *calls = json_object_get(m, "tool_calls");
	if (calls && !json_is_null(calls) && !json_is_array(calls)) {
		json_decref(c);
		return base_seterr(err, errlen, LANES_EINVAL, "messages[%zu].tool_calls: must be an array", i);
	}
	json_t *ccalls = json_object_get(c, "tool_calls");
	for (size_t j = 0; j < json_array_size(calls); j++) {
		json_t *fn = json_object_get(json_array_get(ccalls, j), "function");
		const json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
		const char *bad = NULL, *what = "";
		json_t *obj = NULL;
		if (!json_is_object(fn)) bad = ".function", what = "must be an object";
		else if (!json_is_string(name)) bad = ".function.name", what = "must be a string";
		else if (json_is_object(args)) obj = json_incref((json_t *)args);
		else if (!json_is_string(args)) bad = ".function.arguments", what = "must be a JSON text";
		else if (!(obj = json_loads(json_string_value(args), JSON_DECODE_ANY, NULL)) || !json_is_object(obj))
			bad = ".function.arguments", what = "is not a JSON object";
		if (bad) {
			json_decref(obj);
			json_decref(c);
			return base_seterr(err, errlen, LANES_EINVAL, "messages[%zu].tool_calls[%zu]%s: %s", i, j, bad, what);
		}
		if (f->args_text && json_is_string(args)) {
			json_decref(obj); // the client's own text: the bytes the model wrote stay the prompt's
		} else if (f->args_text) {
			char *s = json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII);
			json_object_set_new(fn, "arguments", json_string(s ? s : "{}"));
			free(s);
			json_decref(obj);
		} else {
			json_object_set_new(fn, "arguments", obj);
		}
		json_t *call = json_array_get(ccalls, j);
		if (!json_object_get(call, "type")) json_object_set_new(call, "type", json_string("function"));
		if (!json_is_string(json_object_get(call, "id"))) {
			char id[16];
			snprintf(id, sizeof id, "call%zu%zu", i, j);
			json_object_set_new(call, "id", json_string(id));
		}
		if (f->short_ids) {
			char sid[10];
			short_id(json_string_value(json_object_get(call, "id")), sid);
			json_object_set_new(call, "id", json_string(sid));
		}
	}
	if (json_array_size(calls)) {
		if (f->plan_field) json_object_set_new(c, "tool_plan", json_string(content_of(m)));
		json_object_set_new(c, "content", f->content_null ? json_null() : json_string(content_of(m)));
	} else if (calls) {
		json_object_del(c, "tool_calls");
	}
	if (!json_is_string(json_object_get(c, "content")) && !(json_array_size(calls) && f->content_null))
		json_object_set_new(c, "content", json_string(""));
	*out = c;
	return 0;
}

// The name of the call a tool turn answers, from the assistant turns before it.
static const json_t *call_name(const json_t *msgs, size_t upto, const char *id) {
	for (size_t i = upto; id && i-- > 0;) {
		const json_t *calls = json_object_get(json_array_get(msgs, i), "tool_calls");
		for (size_t j = 0; j < json_array_size(calls); j++)
			if (is_str(json_object_get(json_array_get(calls, j), "id"), id))
				return json_object_get(json_object_get(json_array_get(calls, j), "function"), "name");
	}
	return NULL;
}

int tool_render_context(const tool_format *f, const json_t *tools, const json_t *messages, json_t **out_messages,
			json_t **out_tools, char *err, size_t errlen) {
	*out_messages = NULL;
	*out_tools = NULL;
	if (!f) f = tool_format_of(NULL);
	if (!json_is_array(messages)) return base_seterr(err, errlen, LANES_EINVAL, "messages: must be an array");
	json_t *nt = NULL;
	int rc = check_tools(tools, &nt, err, errlen);
	if (rc) return rc;
	json_t *conv = json_array(), *res = json_array();
	if (!conv || !res) rc = LANES_ENOMEM;
	for (size_t i = 0; !rc && i < json_array_size(messages); i++) {
		json_t *c;
		rc = convert_message(f, json_array_get(messages, i), i, &c, err, errlen);
		if (!rc && !strcmp(json_string_value(json_object_get(c, "role")), "tool")) {
			const char *id = json_string_value(json_object_get(c, "tool_call_id"));
			const json_t *nm = call_name(messages, i, id);
			if (nm && !json_object_get(c, "name")) json_object_set(c, "name", (json_t *)nm);
			if (f->short_ids && id) {
				char sid[10];
				short_id(id, sid);
				json_object_set_new(c, "tool_call_id", json_string(sid));
			}
		}
		if (!rc) json_array_append_new(conv, c);
	}
	if (!rc && f->fallback) {
		rc = fallback_messages(f, nt, conv, res);
	} else if (!rc) {
		for (size_t i = 0; !rc && i < json_array_size(conv); i++) {
			json_t *m = json_array_get(conv, i);
			json_t *calls = json_object_get(m, "tool_calls");
			const char *text = json_string_value(json_object_get(json_array_get(messages, i), "content"));
			if (f->content_null && json_array_size(calls) && text && *text) {
				// the template shows either text or calls in a turn: the text gets a turn of its own
				json_t *t = json_pack("{s:s, s:s}", "role", "assistant", "content", text);
				rc = !t || json_array_append_new(res, t) ? LANES_ENOMEM : 0;
			}
			if (!f->one_call_per_turn || json_array_size(calls) < 2) {
				rc = json_array_append(res, m) ? LANES_ENOMEM : 0;
				continue;
			}
			// one assistant turn per call, the text with the first
			for (size_t j = 0; !rc && j < json_array_size(calls); j++) {
				json_t *one = json_pack("{s:s, s:s, s:[O]}", "role", "assistant", "content",
							j ? "" : content_of(m), "tool_calls", json_array_get(calls, j));
				rc = !one || json_array_append_new(res, one) ? LANES_ENOMEM : 0;
			}
		}
		if (!rc && f->tools_in_system && json_array_size(nt)) {
			char *p = tools_prompt(f, nt);
			json_t *m0 = json_array_get(res, 0);
			bool sys0 = m0 && !strcmp(json_string_value(json_object_get(m0, "role")), "system");
			size_t n = p ? strlen(p) + (sys0 ? strlen(content_of(m0)) : 0) + 2 : 0;
			char *s = p ? malloc(n) : NULL;
			if (s) snprintf(s, n, "%s%s%s", sys0 ? content_of(m0) : "", sys0 && *content_of(m0) ? "\n" : "", p);
			if (!s) rc = LANES_ENOMEM;
			else if (sys0) rc = json_object_set_new(m0, "content", json_string(s)) ? LANES_ENOMEM : 0;
			else rc = json_array_insert_new(res, 0, json_pack("{s:s, s:s}", "role", "system", "content", s))
					  ? LANES_ENOMEM : 0;
			free(s);
			free(p);
		}
	}
	json_decref(conv);
	if (rc) {
		json_decref(res);
		json_decref(nt);
		return rc;
	}
	*out_messages = res;
	if (f->fallback || f->tools_in_system) json_decref(nt);
	else *out_tools = nt;
	return 0;
}

int tool_template_vars(const tool_format *f, const json_t *tools, const char *date_ymd, json_t *context) {
	if (!f || strcmp(f->name, "firefunction-v2")) return 0;
	json_t *fns = json_array();
	for (size_t i = 0; fns && i < json_array_size(tools); i++)
		json_array_append(fns, json_object_get(json_array_get(tools, i), "function"));
	char *s = fns ? json_dumps(fns, JSON_INDENT(4) | JSON_ENSURE_ASCII) : NULL;
	json_decref(fns);
	int rc = !s || json_object_set_new(context, "functions", json_string(s)) ||
			 json_object_set_new(context, "datetime", json_string(date_ymd ? date_ymd : ""))
		 ? LANES_ENOMEM : 0;
	free(s);
	return rc;
}

// ---- grammar --------------------------------------------------------------------------------

// Writes s as a GBNF literal.
static void gbnf_lit(FILE *o, const char *s, size_t n) {
	fputc('"', o);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') fprintf(o, "\\%c", c);
		else if (c == '\n') fputs("\\n", o);
		else if (c == '\r') fputs("\\r", o);
		else if (c == '\t') fputs("\\t", o);
		else if (c < 0x20) fprintf(o, "\\x%02X", c);
		else fputc(c, o);
	}
	fputc('"', o);
}

// One call of tool k under f's layout as a GBNF sequence; skip: bytes of the layout to leave out.
static void gbnf_call(FILE *o, const tool_format *f, const char *name, int k, size_t skip) {
	const char *p = f->call + skip;
	while (*p) {
		const char *q = strchr(p, '%');
		if (!q) q = p + strlen(p);
		if (q > p) gbnf_lit(o, p, (size_t)(q - p)), fputc(' ', o);
		if (!*q) break;
		if (q[1] == 'N') gbnf_lit(o, name, strlen(name));
		else if (q[1] == 'A') fprintf(o, "tool-%d-args", k);
		else if (q[1] == 'I') fputs("[a-zA-Z0-9]{9}", o);
		else if (q[1] == 'D') fputs("[0-9]{1,4}", o);
		fputc(' ', o);
		p = q + 2;
	}
}

// Adds the names in list (comma separated) to the names in to (cap bytes), each once.
static void names_merge(char *to, size_t cap, const char *list) {
	for (const char *p = list; *p;) {
		const char *e = strchr(p, ',');
		size_t n = e ? (size_t)(e - p) : strlen(p), have = strlen(to);
		bool seen = false;
		for (const char *q = to; *q && !seen;) {
			const char *qe = strchr(q, ',');
			size_t k = qe ? (size_t)(qe - q) : strlen(q);
			seen = k == n && !memcmp(q, p, n);
			q += k + (qe != NULL);
			while (*q == ' ') q++;
		}
		if (!seen && have + n + 3 <= cap) snprintf(to + have, cap - have, "%s%.*s", have ? ", " : "", (int)n, p);
		p += n + (e != NULL);
		while (*p == ' ') p++;
	}
}

int tool_grammar(const tool_format *f, const json_t *tools, enum tool_choice choice, const char *name, bool parallel,
		 char **gbnf, const char *const **triggers, int *n_triggers, tool_schema_notes *notes, char *err, size_t errlen) {
	*gbnf = NULL;
	if (notes) notes->bad = -1, notes->relaxed[0] = 0;
	if (triggers) *triggers = NULL;
	if (n_triggers) *n_triggers = 0;
	if (!f) f = tool_format_of(NULL);
	if (choice == TOOL_CHOICE_NONE) return base_seterr(err, errlen, LANES_EINVAL, "tool_choice none has no grammar");
	json_t *nt;
	int rc = check_tools(tools, &nt, err, errlen);
	if (rc) return rc;
	if (!json_array_size(nt)) {
		json_decref(nt);
		return base_seterr(err, errlen, LANES_EINVAL, "tools: a tool call needs at least one tool");
	}
	if (f->one_call_per_turn) parallel = false;
	char *text = NULL;
	size_t cap = 0;
	FILE *o = open_memstream(&text, &cap);
	if (!o) return json_decref(nt), LANES_ENOMEM;
	int used = 0;
	for (size_t i = 0; !rc && i < json_array_size(nt); i++) {
		const json_t *fn = json_object_get(json_array_get(nt, i), "function");
		const char *tn = json_string_value(json_object_get(fn, "name"));
		if (choice == TOOL_CHOICE_NAMED && (!name || strcmp(tn, name))) continue;
		char root[32], *s = NULL;
		snprintf(root, sizeof root, "tool-%zu-args", i);
		// the client's schema as given: the normalized copy's added keys would change its meaning
		const json_t *fn0 = json_object_get(json_array_get(tools, i), "function");
		const json_t *params = json_object_get(fn0, "parameters");
		json_t *any = json_is_object(params) ? NULL : json_pack("{s:s}", "type", "object");
		// strict tools are exact or refused; the others are served with what can be checked
		char relaxed[256] = "";
		if (json_is_true(json_object_get(fn0, "strict"))) rc = grammar_schema_gbnf(any ? any : params, root, &s, err, errlen);
		else rc = grammar_schema_gbnf_relaxed(any ? any : params, root, &s, relaxed, sizeof relaxed, err, errlen);
		json_decref(any);
		if (rc) {
			char inner[256];
			snprintf(inner, sizeof inner, "%s", err ? err : "");
			base_seterr(err, errlen, rc, "tools[%zu].%s: %s", i, notes && notes->field ? notes->field : "function.parameters", inner);
			if (notes) notes->bad = (int)i;
			break;
		}
		if (notes) names_merge(notes->relaxed, sizeof notes->relaxed, relaxed);
		fprintf(o, "%s\n", s);
		free(s);
		fprintf(o, "call-%zu ::= ", i);
		gbnf_call(o, f, tn, (int)i, 0);
		fputc('\n', o);
		if (f->bare_first) {
			fprintf(o, "first-%zu ::= ", i);
			gbnf_call(o, f, tn, (int)i, strlen(f->trigger));
			fputc('\n', o);
		}
		used++;
	}
	if (!rc && !used) rc = base_seterr(err, errlen, LANES_EINVAL, "tool_choice: no tool named '%s'", name ? name : "");
	if (!rc) {
		// call ::= call-0 | call-1 ...; first (functionary v3.2 after its prompt) likewise
		for (int pass = 0; pass < 1 + f->bare_first; pass++) {
			fputs(pass ? "first ::=" : "call ::=", o);
			int k = 0;
			for (size_t i = 0; i < json_array_size(nt); i++) {
				const char *tn = json_string_value(json_object_get(json_object_get(json_array_get(nt, i), "function"), "name"));
				if (choice == TOOL_CHOICE_NAMED && strcmp(tn, name)) continue;
				fprintf(o, "%s %s-%zu", k++ ? " |" : "", pass ? "first" : "call", i);
			}
			fputc('\n', o);
		}
		bool bare = f->bare_first && choice != TOOL_CHOICE_AUTO;
		fputs("root ::= ", o);
		if (*f->open) gbnf_lit(o, f->open, strlen(f->open)), fputc(' ', o);
		fputs(bare ? "first" : "call", o);
		if (parallel) {
			fputs(" (", o);
			if (*f->sep) gbnf_lit(o, f->sep, strlen(f->sep)), fputc(' ', o);
			fputs("call)*", o);
		}
		if (*f->close) fputc(' ', o), gbnf_lit(o, f->close, strlen(f->close));
		fputc('\n', o);
	}
	json_decref(nt);
	if (fclose(o) || rc) {
		free(text);
		return rc ? rc : LANES_ENOMEM;
	}
	*gbnf = text;
	if (choice == TOOL_CHOICE_AUTO && triggers && n_triggers) {
		*triggers = &f->trigger;
		*n_triggers = 1;
	}
	return 0;
}

// ---- parsing --------------------------------------------------------------------------------

enum { M_NO, M_YES, M_MORE }; // a layout's match: failed, complete, cut short by the end of text

typedef struct {
	const char *t;
	size_t len, pos;
	const char *name; // the call's name, once read
	size_t name_len, args_off;
	json_t *args;
} cursor;

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Matches the literal l (n bytes): a space or newline in l takes any run of whitespace, and
// whitespace may come before JSON punctuation, as models lay out calls loosely.
static int match_lit(cursor *c, const char *l, size_t n) {
	for (size_t i = 0; i < n; i++) {
		if (is_space(l[i])) {
			while (c->pos < c->len && is_space(c->t[c->pos])) c->pos++;
			continue;
		}
		if (strchr("{}[],:\"", l[i]))
			while (c->pos < c->len && is_space(c->t[c->pos])) c->pos++;
		if (c->pos == c->len) return M_MORE;
		if (c->t[c->pos] != l[i]) return M_NO;
		c->pos++;
	}
	return M_YES;
}

static bool name_char(char c) {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
	       c == '.';
}

// Matches one call of f's layout from skip bytes into it.
static int match_call(cursor *c, const tool_format *f, size_t skip) {
	const char *p = f->call + skip;
	c->name = NULL;
	json_decref(c->args);
	c->args = NULL;
	while (*p) {
		const char *q = strchr(p, '%');
		if (!q) q = p + strlen(p);
		int r = match_lit(c, p, (size_t)(q - p));
		if (r != M_YES) return r;
		if (!*q) break;
		size_t s = c->pos;
		if (q[1] == 'A') {
			while (c->pos < c->len && is_space(c->t[c->pos])) c->pos++;
			c->args_off = c->pos;
			if (c->pos == c->len) return M_MORE;
			if (c->t[c->pos] != '{') return M_NO;
			json_error_t je;
			c->args = json_loadb(c->t + c->pos, c->len - c->pos, JSON_DISABLE_EOF_CHECK, &je);
			if (!c->args) return json_error_code(&je) == json_error_premature_end_of_input ? M_MORE : M_NO;
			c->pos += (size_t)je.position;
		} else {
			bool digits = q[1] == 'D';
			while (c->pos < c->len && (digits ? c->t[c->pos] != '"' : name_char(c->t[c->pos]))) c->pos++;
			if (c->pos == c->len) return M_MORE;
			if (c->pos == s && q[1] != 'D') return M_NO;
			if (q[1] == 'N') c->name = c->t + s, c->name_len = c->pos - s;
		}
		p = q + 2;
	}
	return M_YES;
}

// Matches the calls from c->pos and appends the complete ones to calls. M_MORE: the text may
// go on with more of them; out then tells of the open call (its name and arguments so far).
static int match_calls(cursor *c, const tool_format *f, bool bare, json_t *calls, tool_parsed *out) {
	int r = bare ? M_YES : match_lit(c, f->open, strlen(f->open));
	if (r == M_YES) r = match_call(c, f, bare ? strlen(f->trigger) : 0);
	while (r == M_YES) {
		json_t *call = json_pack("{s:s%, s:O}", "name", c->name, c->name_len, "arguments", c->args);
		if (!call || json_array_append_new(calls, call)) return LANES_ENOMEM;
		size_t before = c->pos;
		r = match_lit(c, f->sep, strlen(f->sep));
		if (r == M_YES) r = match_call(c, f, 0);
		if (r == M_YES) continue;
		if (r == M_NO) c->name = NULL, json_decref(c->args), c->args = NULL;
		size_t after = c->pos;
		c->pos = before;
		int rc = match_lit(c, f->close, strlen(f->close));
		if (rc == M_YES && (r == M_NO || *f->close)) return M_YES;
		if (rc == M_NO && r == M_NO) return M_NO;
		c->pos = after;
		r = M_MORE;
	}
	if (r == M_MORE) {
		out->open = true;
		out->partial_name = c->name;
		out->partial_name_len = c->name ? c->name_len : 0;
		if (c->name && c->args_off > (size_t)(c->name - c->t)) {
			out->args_off = c->args_off;
			out->args_len = c->len - c->args_off;
		}
	}
	return r;
}

// Bytes at the end of text[0, n) that could begin s.
static size_t marker_tail(const char *t, size_t n, const char *s) {
	size_t m = strlen(s);
	for (size_t k = m - 1 < n ? m - 1 : n; k > 0; k--)
		if (!memcmp(t + n - k, s, k)) return k;
	return 0;
}

// Text that opens a call but does not follow the layout stays content and no call is reported:
// in auto mode a reply that merely mentions a marker must not turn into a broken call. Text
// after the last call is dropped (a model that has called ends its turn there).
int tool_parse(const tool_format *f, const char *text, size_t len, bool final, tool_parsed *out, char *err,
	       size_t errlen) {
	memset(out, 0, sizeof *out);
	if (!f) f = tool_format_of(NULL);
	if (!text) text = "", len = 0;
	out->calls = json_array();
	if (!out->calls) return LANES_ENOMEM;
	cursor c = {.t = text, .len = len};
	int r = M_NO;
	size_t from = 0, at = len;
	if (f->bare_first) {
		// the prompt ends with ">>>": "all\n" and text, or a call's name and arguments
		if (len < 4 && !memcmp(text, "all\n", len)) from = len;
		else if (!memcmp(text, "all\n", 4)) from = 4;
		else if ((r = match_calls(&c, f, true, out->calls, out)) != M_NO) at = 0;
		else json_array_clear(out->calls), out->open = false;
		out->content_off = from;
	}
	size_t tl = strlen(f->trigger);
	for (const char *p; r == M_NO && from < len && (p = memmem(text + from, len - from, f->trigger, tl));) {
		json_decref(c.args);
		c = (cursor){.t = text, .len = len, .pos = (size_t)(p - text)};
		r = match_calls(&c, f, false, out->calls, out);
		if (r == M_NO) {
			json_array_clear(out->calls);
			out->open = false, out->partial_name = NULL, out->partial_name_len = out->args_off = out->args_len = 0;
			from = (size_t)(p - text) + 1;
		} else {
			at = (size_t)(p - text);
		}
	}
	json_decref(c.args);
	if (r == LANES_ENOMEM) return tool_parsed_free(out), LANES_ENOMEM;
	out->content_len = at < out->content_off ? out->content_off : at;
	out->safe_len = out->content_len;
	if (r == M_NO) out->safe_len = len - marker_tail(text, len, f->trigger);
	if (out->safe_len < out->content_off) out->safe_len = out->content_off;
	if (final && out->open) {
		if (json_array_size(out->calls) && !out->partial_name) {
			out->open = false; // the calls were whole; what follows them opened nothing
			return 0;
		}
		tool_parsed_free(out);
		return base_seterr(err, errlen, LANES_EINVAL, "the tool call in the reply is cut short");
	}
	return 0;
}

void tool_parsed_free(tool_parsed *p) {
	if (!p) return;
	json_decref(p->calls);
	p->calls = NULL;
}
