// template, tools: tool-call formats per chat-template family, in one table — how a family's
// template is recognized, how tools and tool turns reach it, the grammar a call follows, and
// how generated text is parsed back into calls. Requests and replies stay in OpenAI's shape
// here; each API adapter converts its own.
#ifndef LANES_TEMPLATE_TOOLS_H
#define LANES_TEMPLATE_TOOLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct tool_format tool_format;

// The format for the template whose source is src (NULL: the model has none): the family whose
// markers the source holds, else the fallback — ChatML-style prompts with Hermes
// <tool_call>{"name", "arguments"}</tool_call> calls and the tools listed in the system turn —
// so tools work on every model. Static storage. Thread-safe.
const tool_format *tool_format_of(const char *src);
// "hermes", "llama3", "mistral", "functionary-v3.1", "functionary-v3.2", "command-r",
// "deepseek-r1", "firefunction-v2", "fallback". Thread-safe.
const char *tool_format_name(const tool_format *f);

// tools: OpenAI's [{"type": "function", "function": {"name", "description"?, "parameters"?}}],
// checked (names unique and plain, parameters an object schema). messages: OpenAI chat messages
// as the server flattened them ({role, content: string}, assistant turns with "tool_calls"
// [{id, type, function: {name, arguments: JSON text}}], {role: "tool", tool_call_id, content}).
// Sets *out_messages (new reference) to what the template renders — arguments as objects for
// native families; for the fallback, the tool list in the system turn and calls and results as
// text — and *out_tools to what the template's `tools` variable holds (NULL: do not set it).
// tools may be NULL (a conversation with tool turns but no tools offered now).
// 0, or LANES_EINVAL with err naming what is wrong (e.g. "tools[1].function.name: ..."),
// LANES_ENOMEM. Thread-safe.
int tool_render_context(const tool_format *f, const json_t *tools, const json_t *messages, json_t **out_messages,
			json_t **out_tools, char *err, size_t errlen);

// Sets in context (the render's variables) what f's template reads beside messages and tools:
// firefunction v2's `functions` (the tools as JSON text) and `datetime` (date_ymd). tools: as
// tool_render_context's *out_tools. 0 or LANES_ENOMEM. Thread-safe.
int tool_template_vars(const tool_format *f, const json_t *tools, const char *date_ymd, json_t *context);

enum tool_choice { TOOL_CHOICE_NONE, TOOL_CHOICE_AUTO, TOOL_CHOICE_REQUIRED, TOOL_CHOICE_NAMED };

// The GBNF (start rule `root`) that generated text must follow for f's calls: one call (or,
// with parallel, one or more) of any tool in tools, or of `name` alone (TOOL_CHOICE_NAMED),
// each call's arguments constrained by its parameters schema. TOOL_CHOICE_AUTO gives the same
// grammar and sets *triggers (static strings, *n_triggers of them) to the texts that open a
// call, for a lazy matcher; required and named give no triggers (a call from the first byte).
// *gbnf is malloc'd. 0, LANES_EINVAL (a schema keyword unsupported, named), LANES_ENOMEM.
// Thread-safe.
int tool_grammar(const tool_format *f, const json_t *tools, enum tool_choice choice, const char *name, bool parallel,
		 char **gbnf, const char *const **triggers, int *n_triggers, char *err, size_t errlen);

// Generated text split into content and calls.
typedef struct {
	size_t content_len;   // bytes of text before the first call: the reply's content
	size_t safe_len;      // of those, bytes a stream may send now (none may begin a call marker)
	json_t *calls;        // [{"name": string, "arguments": object}], the complete calls in order (owned)
	bool open;            // a call has begun and is not complete yet
	const char *partial_name; // open call: its name once known (points into text), else NULL
	size_t partial_name_len;
	size_t args_off, args_len; // open call: the bytes of its arguments' JSON text seen so far
	size_t content_off;   // bytes of syntax before the content (functionary v3.2's "all\n"): content is [content_off, content_len)
} tool_parsed;

// Parses text (len bytes) generated under f. final: the text is whole (an open call is then an
// error: LANES_EINVAL with what was cut short). Text that is not a call stays content.
// 0, LANES_EINVAL, LANES_ENOMEM. Free out with tool_parsed_free. Thread-safe.
int tool_parse(const tool_format *f, const char *text, size_t len, bool final, tool_parsed *out, char *err,
	       size_t errlen);
void tool_parsed_free(tool_parsed *p);

#endif
