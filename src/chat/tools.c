// chat, tools: one table row per tool-call family — how its template is recognized, how
// messages and tools are shaped for it, the layout of its calls (which both the grammar and the
// parser read), and the texts that open a call. Layouts are strings where %N is the tool's
// name, %A its arguments (a JSON object), %I a 9-character id, %D a small number and (in a
// layout only the parser reads) %H a header's words up to the literal after it.
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
	bool thinking_field;    // the template reads an assistant turn's reasoning as `thinking`
	const char *lead;       // what a grammar lets the model write before the calls, which the reasoning family strips (NULL: none)
	const char *trigger;    // the text that opens the calls (a lazy grammar's trigger)
	const char *open;       // before the first call (begins with trigger), or "" when each call opens
	const char *call;       // one call's layout
	const char *sep;        // between calls
	const char *close;      // after the last call
	const char *more_trigger[TOOL_MORE_LAYOUTS]; // open calls in layouts no grammar writes, read only (NULL: none)
	const char *more_call[TOOL_MORE_LAYOUTS];    // those layouts, each beginning with its trigger
};

#define HERMES_CALL "<tool_call>\n{\"name\": \"%N\", \"arguments\": %A}\n</tool_call>"

// Order matters: the first row whose markers all appear wins (functionary v3.1 also holds
// <|python_tag|>, firefunction also holds <|start_header_id|>). Llama 3's <|python_tag|> calls of
// builtin tools are left as content.
static const struct tool_format formats[] = {
	// gpt-oss: a call is a commentary message to functions.NAME, one per turn (<|call|> ends the
	// generation); the reasoning family strips <|start|>assistant, so the answer opens with <|channel|>
	{.name = "harmony", .detect = {"<|channel|>commentary", "<|call|>"}, .one_call_per_turn = true,
	 .thinking_field = true, .lead = "<|start|>assistant", .trigger = "<|channel|>commentary to=functions.", .open = "",
	 .call = "<|channel|>commentary to=functions.%N <|constrain|>json<|message|>%A", .sep = "", .close = "",
	 // the recipient before the channel, as the template writes calls in history; a call after a
	 // commentary preamble (the reasoning family strips that one's header), the preamble's end its syntax
	 .more_trigger = {"to=functions.", "<|end|><|start|>assistant<|channel|>commentary to=functions."},
	 .more_call = {"to=functions.%N%H<|message|>%A",
		       "<|end|><|start|>assistant<|channel|>commentary to=functions.%N <|constrain|>json<|message|>%A"}},
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
	// the template refuses both thinking and text in a call turn: the text is the analysis there
	const json_t *reasoning = json_object_get(m, "reasoning_content");
	if (f->thinking_field && json_is_string(reasoning) && !json_object_get(c, "thinking") &&
	    !(json_array_size(calls) && *content_of(c)))
		json_object_set(c, "thinking", (json_t *)reasoning);
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
		// the message header the model writes after its thinking, before a required call
		if (f->lead && choice != TOOL_CHOICE_AUTO) gbnf_lit(o, f->lead, strlen(f->lead)), fputs("? ", o);
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

enum { PH_CONTENT, PH_PREFIX, PH_LAYOUT, PH_OVER };   // a scan's phase
enum { PART_OPEN, PART_CALL, PART_SEP, PART_CLOSE }; // the layout string being matched
#define TOOL_WORD_MAX 64 // a name, id or number longer than a tool's name may be is none

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static bool name_char(char c) {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
	       c == '.';
}

// Bytes at the end of text[0, n) that could begin s.
static size_t marker_tail(const char *t, size_t n, const char *s) {
	size_t m = strlen(s);
	for (size_t k = m - 1 < n ? m - 1 : n; k > 0; k--)
		if (!memcmp(t + n - k, s, k)) return k;
	return 0;
}

// ---- the arguments: a JSON object read byte by byte --------------------------------------------

enum { J_VALUE, J_FIRST_KEY, J_KEY, J_COLON, J_AFTER, J_FIRST_ITEM, J_STR, J_ESC, J_HEX, J_NUM, J_LIT };
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP }; // where a number stands
enum { J_TAKE, J_DONE, J_BAD };                                         // a byte: taken, closed the object, refused

static bool js_array(const tool_scan *s) { return s->js.stack[(s->js.depth - 1) / 64] >> ((s->js.depth - 1) % 64) & 1; }

// Opens a container; at: the offset after its bracket.
static int js_push(tool_scan *s, bool arr, size_t at) {
	if (s->js.depth == TOOL_JSON_DEPTH) return J_BAD;
	const uint64_t bit = 1ull << (s->js.depth % 64);
	if (arr) s->js.stack[s->js.depth / 64] |= bit;
	else s->js.stack[s->js.depth / 64] &= ~bit;
	s->js.depth++;
	s->js.st = arr ? J_FIRST_ITEM : J_FIRST_KEY;
	s->js.safe = at;
	return J_TAKE;
}

// A value ended just before at (a container: closed by the byte before at).
static int js_after(tool_scan *s, size_t at) {
	s->js.st = J_AFTER;
	s->js.safe = at;
	return J_TAKE;
}

static int js_pop(tool_scan *s, size_t at) {
	if (--s->js.depth == 0) return J_DONE;
	return js_after(s, at);
}

// Reads byte c at offset p of the arguments (RFC 8259's grammar, one byte at a time).
static int js_byte(tool_scan *s, char c, size_t p) {
	for (;;) switch (s->js.st) {
	case J_VALUE:
		if (is_space(c)) return J_TAKE;
		if (c == '{' || c == '[') return js_push(s, c == '[', p + 1);
		if (c == '"') return s->js.st = J_STR, s->js.key = false, J_TAKE;
		if (c == '-' || (c >= '0' && c <= '9'))
			return s->js.st = J_NUM, s->js.sub = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT, J_TAKE;
		s->js.lit = c == 't' ? "rue" : c == 'f' ? "alse" : c == 'n' ? "ull" : NULL;
		return s->js.lit ? (s->js.st = J_LIT, J_TAKE) : J_BAD;
	case J_FIRST_ITEM:
		if (is_space(c)) return J_TAKE;
		if (c == ']') return js_pop(s, p + 1);
		s->js.st = J_VALUE;
		continue;
	case J_FIRST_KEY:
	case J_KEY:
		if (is_space(c)) return J_TAKE;
		if (c == '}' && s->js.st == J_FIRST_KEY) return js_pop(s, p + 1);
		if (c == '"') return s->js.st = J_STR, s->js.key = true, J_TAKE;
		return J_BAD;
	case J_COLON:
		if (is_space(c)) return J_TAKE;
		return c == ':' ? (s->js.st = J_VALUE, J_TAKE) : J_BAD;
	case J_AFTER:
		if (is_space(c)) return J_TAKE;
		if (c == ',') return s->js.st = js_array(s) ? J_VALUE : J_KEY, J_TAKE;
		if (c == (js_array(s) ? ']' : '}')) return js_pop(s, p + 1);
		return J_BAD;
	case J_STR:
		if (c == '"') return s->js.key ? (s->js.st = J_COLON, J_TAKE) : js_after(s, p + 1);
		if (c == '\\') return s->js.st = J_ESC, s->js.esc = p, J_TAKE;
		return (unsigned char)c < 0x20 ? J_BAD : J_TAKE;
	case J_ESC:
		if (c == 'u') return s->js.st = J_HEX, s->js.n = 4, J_TAKE;
		return c && strchr("\"\\/bfnrt", c) ? (s->js.st = J_STR, J_TAKE) : J_BAD;
	case J_HEX:
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return J_BAD;
		if (--s->js.n == 0) s->js.st = J_STR;
		return J_TAKE;
	case J_NUM: {
		const bool digit = c >= '0' && c <= '9', e = c == 'e' || c == 'E';
		int *n = &s->js.sub, next = -1;
		switch (*n) {
		case N_MINUS: next = c == '0' ? N_ZERO : digit ? N_INT : -1; break;
		case N_ZERO: next = c == '.' ? N_DOT : e ? N_E : -2; break;
		case N_INT: next = digit ? N_INT : c == '.' ? N_DOT : e ? N_E : -2; break;
		case N_DOT: next = digit ? N_FRAC : -1; break;
		case N_FRAC: next = digit ? N_FRAC : e ? N_E : -2; break;
		case N_E: next = c == '+' || c == '-' ? N_ESIGN : digit ? N_EXP : -1; break;
		case N_ESIGN: next = digit ? N_EXP : -1; break;
		case N_EXP: next = digit ? N_EXP : -2; break;
		}
		if (next >= 0) return *n = next, J_TAKE;
		if (next == -1) return J_BAD;
		js_after(s, p); // the number ended before c: c is read after it
		continue;
	}
	case J_LIT:
		if (c != *s->js.lit) return J_BAD;
		return *++s->js.lit ? J_TAKE : js_after(s, p + 1);
	default:
		return J_BAD;
	}
}

// ---- the layout ---------------------------------------------------------------------------------

static void scan_over(tool_scan *s) {
	s->phase = PH_OVER;
	s->over = true;
}

// Starts matching the layout at at: part's string from skip bytes into it.
static void layout_at(tool_scan *s, size_t at, int part, size_t skip, size_t search_next) {
	const char *strs[] = {[PART_OPEN] = s->f->open, [PART_CALL] = s->alt ? s->f->more_call[s->alt - 1] : s->f->call, [PART_SEP] = s->f->sep,
			      [PART_CLOSE] = s->f->close};
	s->phase = PH_LAYOUT;
	s->pos = s->cand = at;
	s->search = search_next;
	s->part = part;
	s->lay = strs[part] + skip;
	s->tentative = true;
	s->dir_n = 0;
}

// Before any call has begun the match falls back to content; between calls it may still be the
// calls' close; anything else ends the scan.
static void layout_fails(tool_scan *s) {
	if (!s->tentative || (s->n_calls && s->part == PART_CLOSE)) scan_over(s);
	else if (s->n_calls) layout_at(s, s->cand, PART_CLOSE, 0, 0);
	else s->phase = PH_CONTENT;
}

// The end of the string being matched: after a call, the match from its separator is tentative
// again (it may still be the calls' close).
static void part_end(tool_scan *s) {
	if (s->part == PART_OPEN || s->part == PART_SEP) {
		s->part = PART_CALL;
		s->lay = s->alt ? s->f->more_call[s->alt - 1] : s->f->call;
	} else if (s->part == PART_CALL) {
		s->part = PART_SEP;
		s->lay = s->f->sep;
		s->cand = s->pos;
		s->tentative = true;
	} else {
		scan_over(s);
	}
}

static int call_begin(tool_scan *s, size_t name_off, size_t name_len) {
	if (s->n_calls == s->cap_calls) {
		int cap = s->cap_calls ? 2 * s->cap_calls : 4;
		tool_call_span *c = realloc(s->calls, (size_t)cap * sizeof *c);
		if (!c) return LANES_ENOMEM;
		s->calls = c, s->cap_calls = cap;
	}
	s->calls[s->n_calls++] = (tool_call_span){.name_off = name_off, .name_len = name_len};
	s->tentative = false;
	return 0;
}

// Reads the layout from s->pos while bytes last; stops at the end of text or when the phase changes.
static int scan_layout(tool_scan *s, const char *t, size_t len) {
	while (s->phase == PH_LAYOUT) {
		const char *l = s->lay;
		if (!*l) {
			part_end(s);
			continue;
		}
		if (s->pos == len) return 0;
		const char b = t[s->pos];
		if (l[0] == '%' && l[1] == 'A') {
			// every layout names its tool before the arguments: the call has begun
			if (s->tentative) {
				layout_fails(s);
				continue;
			}
			tool_call_span *c = &s->calls[s->n_calls - 1];
			if (!s->dir_n) {
				if (is_space(b)) {
					s->pos++;
					continue;
				}
				if (b != '{') {
					layout_fails(s);
					continue;
				}
				memset(&s->js, 0, sizeof s->js);
				s->js.st = J_VALUE;
				c->args_off = s->pos;
				s->dir_n = 1;
			}
			int r = J_TAKE;
			while (s->pos < len && (r = js_byte(s, t[s->pos], s->pos)) != J_BAD) {
				c->args_len = ++s->pos - c->args_off;
				if (r == J_DONE) break;
			}
			if (r == J_BAD) {
				scan_over(s);
			} else if (r == J_DONE) {
				c->whole = true;
				s->dir_n = 0;
				s->lay += 2;
			}
			continue;
		}
		if (l[0] == '%' && l[1] == 'H') {
			// up to the literal after it, which may still be arriving
			const size_t n = strcspn(l + 2, "%"), have = len - s->pos < n ? len - s->pos : n;
			if (!memcmp(t + s->pos, l + 2, have)) {
				if (have < n) return 0;
				s->dir_n = 0;
				s->lay += 2;
			} else if (s->dir_n++ < TOOL_WORD_MAX) {
				s->pos++;
			} else {
				layout_fails(s);
			}
			continue;
		}
		if (l[0] == '%' && l[1]) {
			const bool digits = l[1] == 'D', take = digits ? b != '"' : name_char(b);
			if (take && s->dir_n < TOOL_WORD_MAX) {
				if (!s->dir_n) s->dir_off = s->pos;
				s->dir_n++, s->pos++;
				continue;
			}
			if (take || (!s->dir_n && !digits)) {
				layout_fails(s);
				continue;
			}
			if (l[1] == 'N') {
				if (!s->n_calls) s->content_len = s->cand;
				if (call_begin(s, s->dir_off, s->dir_n)) return LANES_ENOMEM;
			}
			s->dir_n = 0;
			s->lay += 2;
			continue;
		}
		// a space in the layout takes any run of whitespace, and whitespace may come before JSON
		// punctuation: models lay out calls loosely
		if (is_space(*l)) {
			if (is_space(b)) s->pos++;
			else s->lay++;
		} else if (strchr("{}[],:\"", *l) && is_space(b)) {
			s->pos++;
		} else if (b == *l) {
			s->pos++, s->lay++;
		} else {
			layout_fails(s);
		}
	}
	return 0;
}

// Content: looks for the triggers from s->search (the first to begin wins, the main one on a
// tie); holds back the bytes that could begin one.
static void scan_content(tool_scan *s, const char *t, size_t len) {
	const char *found = NULL;
	size_t most = 0, tail = 0;
	for (int k = 0; k <= TOOL_MORE_LAYOUTS; k++) {
		const char *tr = k ? s->f->more_trigger[k - 1] : s->f->trigger;
		if (!tr) continue;
		const size_t tl = strlen(tr), tk = marker_tail(t, len, tr);
		const char *p = s->search < len ? memmem(t + s->search, len - s->search, tr, tl) : NULL;
		if (p && (!found || p < found)) found = p, s->alt = k;
		if (tl > most) most = tl;
		if (tk > tail) tail = tk;
	}
	if (found) {
		const size_t at = (size_t)(found - t);
		if (at > s->content_len) s->content_len = at;
		layout_at(s, at, *s->f->open ? PART_OPEN : PART_CALL, 0, at + 1);
		return;
	}
	if (len >= most && len - most + 1 > s->search) s->search = len - most + 1;
	const size_t upto = len - tail;
	if (upto > s->content_len) s->content_len = upto;
	s->pos = len;
}

// Functionary v3.2's reply opens with "all\n" and text, or with a call's name (its ">>>" is the prompt's).
static void scan_prefix(tool_scan *s, const char *t, size_t len) {
	static const char all[] = "all\n";
	const size_t n = len < 4 ? len : 4;
	if (memcmp(t, all, n)) {
		layout_at(s, 0, PART_CALL, strlen(s->f->trigger), 0);
	} else if (n == 4) {
		s->content_off = s->content_len = s->search = 4;
		s->phase = PH_CONTENT;
	} else {
		s->pos = len;
	}
}

void tool_scan_init(tool_scan *s, const tool_format *f, bool calls_only) {
	memset(s, 0, sizeof *s);
	s->f = f ? f : tool_format_of(NULL);
	if (calls_only) layout_at(s, 0, s->f->bare_first ? PART_CALL : *s->f->open ? PART_OPEN : PART_CALL,
				  s->f->bare_first ? strlen(s->f->trigger) : 0, 0);
	else s->phase = s->f->bare_first ? PH_PREFIX : PH_CONTENT;
}

int tool_scan_feed(tool_scan *s, const char *text, size_t len, enum tool_end end) {
	if (!text) text = "", len = 0;
	// each phase reads until it waits for more text (the phase stays) or hands over to another
	while (s->phase != PH_OVER) {
		const int ph = s->phase;
		if (ph == PH_LAYOUT && scan_layout(s, text, len)) return LANES_ENOMEM;
		else if (ph == PH_CONTENT) scan_content(s, text, len);
		else if (ph == PH_PREFIX) scan_prefix(s, text, len);
		if (s->phase == ph) break;
	}
	if (end != TOOL_MORE && s->phase != PH_OVER) {
		// held back: content now, unless a call's opening (dropped: it is no content)
		if (s->phase == PH_PREFIX) s->content_off = end == TOOL_CUT ? 0 : len;
		if (s->phase != PH_LAYOUT && end == TOOL_END) s->content_len = len;
		scan_over(s);
	}
	return 0;
}

// text[off, cut), a closing quote when quote, and the closers of the open containers, parsed.
static json_t *closed_object(const tool_scan *s, const char *t, size_t off, size_t cut, bool quote) {
	const size_t n = cut - off + (quote ? 1 : 0) + (size_t)s->js.depth;
	char *b = malloc(n ? n : 1);
	if (!b) return NULL;
	memcpy(b, t + off, cut - off);
	size_t k = cut - off;
	if (quote) b[k++] = '"';
	for (int d = s->js.depth; d > 0; d--) b[k++] = s->js.stack[(d - 1) / 64] >> ((d - 1) % 64) & 1 ? ']' : '}';
	json_t *o = json_loadb(b, k, 0, NULL);
	free(b);
	return o;
}

json_t *tool_scan_input(const tool_scan *s, const char *text, int k) {
	if (k < 0 || k >= s->n_calls) return json_object();
	const tool_call_span *c = &s->calls[k];
	json_t *o = NULL;
	if (c->whole) {
		o = json_loadb(text + c->args_off, c->args_len, 0, NULL);
		if (!o) o = json_loadb(text + c->args_off, c->args_len, JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, NULL);
	} else if (c->args_len && k == s->n_calls - 1) {
		const int st = s->js.st;
		if ((st == J_STR || st == J_ESC || st == J_HEX) && !s->js.key)
			o = closed_object(s, text, c->args_off, st == J_STR ? c->args_off + c->args_len : s->js.esc, true);
		if (!o) o = closed_object(s, text, c->args_off, s->js.safe, false);
	}
	return o && json_is_object(o) ? o : (json_decref(o), json_object());
}

void tool_scan_free(tool_scan *s) {
	if (!s) return;
	free(s->calls);
	s->calls = NULL;
	s->n_calls = s->cap_calls = 0;
}
