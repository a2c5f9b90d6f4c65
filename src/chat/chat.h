// chat: a conversation to the prompt the model reads. The chat template is chosen once (a
// file, the model's own, else ChatML or plain text as the vocabulary has it); messages, tools
// and the client's variables are shaped for the template's tool-call family and rendered as
// Hugging Face does, then tokenized — one path for the server, `lanes learn` and `lanes template`. The tool-call families are one table
// (tools.c): how a family's template is recognized, how tools and tool turns reach it, the
// grammar a call follows, and how generated text is parsed back into calls. Thread-safe: a
// chat is immutable once loaded.
#ifndef LANES_CHAT_H
#define LANES_CHAT_H

#include "template/template.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// ---- tool-call families ---------------------------------------------------------------------
typedef struct tool_format tool_format;

// The format for the template whose source is src (NULL: the model has none): the family whose
// markers the source holds, else the fallback — ChatML-style prompts with Hermes
// <tool_call>{"name", "arguments"}</tool_call> calls and the tools listed in the system turn —
// so tools work on every model. Static storage. Thread-safe.
const tool_format *tool_format_of(const char *src);
// "harmony", "hermes", "llama3", "mistral", "functionary-v3.1", "functionary-v3.2", "command-r",
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

// What tool_grammar tells of the tools' schemas besides the grammar.
typedef struct {
	const char *field; // in: a tool's schema in the caller's API, for messages ("function.parameters" when NULL)
	int bad;           // out: the tool whose schema was refused, -1 none
	char relaxed[256]; // out: the keywords non-strict schemas relaxed, comma separated, each once ("" none)
} tool_schema_notes;

// The GBNF (start rule `root`) that generated text must follow for f's calls: one call (or,
// with parallel, one or more) of any tool in tools, or of `name` alone (TOOL_CHOICE_NAMED),
// each call's arguments constrained by its parameters schema: exactly for a tool whose
// function.strict is true (grammar_schema_gbnf), best effort for the others
// (grammar_schema_gbnf_relaxed, the keywords relaxed in notes). TOOL_CHOICE_AUTO gives the same
// grammar and sets *triggers (static strings, *n_triggers of them) to the texts that open a
// call, for a lazy matcher; required and named give no triggers (a call from the first byte).
// notes may be NULL. *gbnf is malloc'd. 0, LANES_EINVAL ("tools[i].<field>: " and the schema's
// fault), LANES_ELIMIT, LANES_ENOMEM. Thread-safe.
int tool_grammar(const tool_format *f, const json_t *tools, enum tool_choice choice, const char *name, bool parallel,
		 char **gbnf, const char *const **triggers, int *n_triggers, tool_schema_notes *notes, char *err, size_t errlen);

// One call in generated text, as far as the text goes.
typedef struct {
	size_t name_off, name_len; // its name in the text
	size_t args_off, args_len; // its arguments' JSON text so far (args_len 0: they have not begun)
	bool whole;                // the arguments are a whole JSON object
} tool_call_span;

#define TOOL_JSON_DEPTH 2048 // nesting the arguments may reach (jansson's own bound)
#define TOOL_MORE_LAYOUTS 2  // the layouts a family's calls may take beside the main one, read only

// Generated text read incrementally into content and calls: fed the text as it grows, a scan
// reads only the bytes it has not read, and never takes back what it reported, so a stream of
// what it finds concatenates to what one scan of the whole text finds. A call begins once its
// name is read (text that opens a call but leaves the layout before that stays content); its
// arguments are every byte of its JSON object so far, and it is whole when the object closes.
// Text that leaves the layout after a call has begun, and text after the last call, end the
// scan. The caller allocates it; tool_scan_free frees what it holds.
typedef struct {
	// what the text read so far holds
	size_t content_off;      // bytes of syntax before the content (functionary v3.2's "all\n")
	size_t content_len;      // the content is [content_off, content_len): bytes no call can claim any more
	tool_call_span *calls;   // n_calls of them (malloc'd); only the last may be open
	int n_calls, cap_calls;
	bool over;               // the scan has ended: what the text adds now is neither content nor a call
	// the scan's own state
	const tool_format *f;
	size_t pos;              // bytes read
	int phase;               // content, the v3.2 prefix, a layout, over
	bool tentative;          // the layout's match may still fail back (no call of it begun yet)
	int alt;                 // the call being matched takes the family's main layout (0) or another (1...)
	size_t cand;             // where the match in progress began (content ends there if it holds)
	size_t search;           // content: where the search for the trigger goes on
	int part;                // which of the layout's strings is being matched
	const char *lay;         // the next byte of that string to match
	size_t dir_n;            // bytes a %N, %I or %D has taken
	size_t dir_off;          // where it began
	struct {
		int st;              // what the next byte may be
		int sub, n;          // where a number stands; hex digits an escape still needs
		bool key;            // the string being read is a key
		const char *lit;     // the rest of a literal being read (true, false, null)
		int depth;
		uint64_t stack[TOOL_JSON_DEPTH / 64]; // per depth: 1 for an array, 0 for an object
		size_t safe;         // [args_off, safe) and the closers of the open containers are valid JSON
		size_t esc;          // in a string: where an escape being read began
	} js;
} tool_scan;

// Starts a scan of text generated under f (NULL: the fallback). calls_only: the grammar makes
// the text a call from its first byte (tool_choice required or named): no content is looked
// for until the text leaves the call's layout.
void tool_scan_init(tool_scan *s, const tool_format *f, bool calls_only);
// How far the text fed goes: more may come; it ended (content held back because it could open
// a call is content now); it was cut short (by max_tokens: what was held back is dropped). At an
// end, a call's opening cut before its name is dropped, and an open call stays open (not whole).
enum tool_end { TOOL_MORE, TOOL_END, TOOL_CUT };
// Reads text (the whole text so far, len bytes, the bytes fed before unchanged) from where the
// scan stopped. 0 or LANES_ENOMEM. One thread at a time per scan.
int tool_scan_feed(tool_scan *s, const char *text, size_t len, enum tool_end end);
// Call k's arguments (text: what the scan read) as an object (new reference; NULL: out of
// memory): a whole call's parsed;
// an open call's as far as they go — the members read whole, and a string value being read
// closed where it was cut; a member whose key or other value was cut is left out.
json_t *tool_scan_input(const tool_scan *s, const char *text, int k);
void tool_scan_free(tool_scan *s); // accepts a zeroed s


// ---- reasoning families (reason.c) ------------------------------------------------------------
#define REASON_HEADS 3 // the headers a family's answer may begin with

// How a family's replies set their thinking apart from the answer: one table row each.
typedef struct {
	const char *name;       // "think", "command-r7b", "harmony"
	const char *detect[2];  // any one appearing in the template source names the family
	const char *open;       // opens the thinking section
	const char *close;      // closes it
	const char *after_open; // what the template writes after open where it opens the section itself
	const char *after;      // what the template's replies put between close and the answer
	const char *off_var;    // the template's variable that turns thinking off when false (NULL: none)
	const char *answer_head[REASON_HEADS]; // what the answer may begin with, each skipped in turn (NULL: none)
} reason_format;

#define REASON_MARKER_MAX 64 // the longest marker a family's row holds, in bytes

// The family whose markers the template source src holds; NULL: none (or src NULL). Static
// storage. Thread-safe.
const reason_format *reason_format_of(const char *src);
// The family called name ("none": *out NULL); -1 when no family has that name. Thread-safe.
int reason_format_named(const char *name, const reason_format **out);
// f's name, "none" for NULL. Thread-safe.
const char *reason_format_name(const reason_format *f);
// The names --reasoning-format takes besides none and auto, "a|b|c" (static). Thread-safe.
const char *reason_format_names(void);
// Whether a rendered prompt (text, len bytes) ends inside a thinking section its generation
// prompt opened, so the reply starts in it. Thread-safe.
bool reason_opened(const reason_format *f, const char *text, size_t len);

// The tokens a spent thinking budget forces: f's close marker and what its template writes
// after it, encoded with v (special tokens parsed, no BOS), into ids (room for max), *n of them.
// 0, or LANES_EFORMAT (none, or more than max) / the tokenizer's code, with err. Thread-safe.
int reason_end_ids(const reason_format *f, const tok_vocab *v, int32_t *ids, int32_t max, int32_t *n, char *err, size_t errlen);
// A rendered prompt's end (*text malloc'd, *len bytes; realloc'd as it grows) as the request's
// thinking asks. off: thinking off — the section the prompt opened is closed empty, else an
// empty one is written unless switched (the template's own switch already wrote it). grammar: a
// constraint follows the thinking, so a section the prompt did not open is opened. *inside: the
// reply starts in the section. 0 or LANES_ENOMEM. Thread-safe.
int reason_prompt_end(const reason_format *f, bool off, bool switched, bool grammar, char **text, size_t *len, bool *inside);

enum reason_phase { REASON_BEFORE, REASON_IN, REASON_AFTER };

// A reply's text read incrementally into thinking and answer: fed the text as it grows, it reads
// only the bytes it has not read and never takes back what it reported, so what a stream sends
// piece by piece concatenates to what one scan of the whole text finds. The thinking is the text
// between the markers, its surrounding whitespace trimmed; the answer is what follows the close
// marker, its leading whitespace and the family's answer heads trimmed — or the whole text when
// the reply opens no section (less those heads).
// Markers never reach either. The caller allocates it; it holds no memory.
typedef struct {
	const reason_format *f;
	enum reason_phase phase;
	bool thought;             // a section was opened (the prompt's, or the reply's own)
	size_t think_off, think_len; // the thinking so far: [think_off, think_off + think_len)
	bool answer_known;        // where the answer begins is known
	size_t answer_off;        // the answer: [answer_off, end of text) once answer_known
	size_t pos;               // bytes read
	size_t think_start;       // where the section's text begins (after the open marker)
	int head;                 // the family's answer heads looked for so far
} reason_scan;

// Starts a scan under f (NULL: the whole text is the answer). inside: the prompt opened the
// section, so the reply starts in it.
void reason_scan_init(reason_scan *s, const reason_format *f, bool inside);
// Reads text (the whole text so far, len bytes; the bytes fed before unchanged) from where the
// scan stopped. end: no more text comes — held-back bytes are placed (a close marker cut short is
// thinking; an open marker cut short, answer). One thread at a time per scan.
void reason_scan_feed(reason_scan *s, const char *text, size_t len, bool end);
// Bytes of the answer the scan has released (0 until answer_known).
size_t reason_scan_answer(const reason_scan *s, size_t len);

// ---- a model's chat ---------------------------------------------------------------------------
typedef struct {
	tmpl *t;                    // the compiled template
	char *src;                  // its source (malloc'd)
	const tool_format *fmt;     // its tool-call family (tool_format_of(src))
	const reason_format *reason; // its reasoning family (reason_format_of(src); NULL: none)
	bool reason_switch;         // the template reads the family's off_var
	const tok_vocab *v;         // the vocabulary the prompt is tokenized with (borrowed; NULL: render only)
	char *bos, *eos;            // the texts the template sees as bos_token and eos_token (malloc'd)
	bool own;                   // the template is the model's or a file's, not a fallback
	bool plain;                 // the fallback is plain text (the vocabulary has no ChatML tokens)
	char origin[64];            // where it came from, for messages ("the model's", "--chat-template", "ChatML", "plain text")
} chat_tmpl;

// Chooses and compiles the template once: the file at path when given (its errors are
// errors), else v's tokenizer.chat_template, else a fallback in the vocabulary's own text form:
// ChatML where v has <|im_start|> and <|im_end|>, else plain text (tmpl_plain: a story model
// continues the conversation); a log line says which, and why when the model's does not compile. bos and eos: v's BOS and EOS token texts (v may be NULL: none).
// 0, or LANES_EIO / LANES_EFORMAT / LANES_ENOMEM with err naming the file or the template.
int chat_load(chat_tmpl *c, const tok_vocab *v, const char *path, char *err, size_t errlen);
// The same over source text (a file's already read, or a model's), with no fallback.
int chat_load_src(chat_tmpl *c, const tok_vocab *v, const char *src, size_t len, char *err, size_t errlen);
void chat_free(chat_tmpl *c); // accepts a zeroed c

// What one prompt is rendered from. messages: OpenAI-shaped chat messages as the server
// flattens them ({role, content: string}, assistant tool_calls, tool results); NULL: the
// template sees no messages variable.
typedef struct {
	const json_t *messages;
	const json_t *tools;        // OpenAI-shaped tools offered (NULL: none)
	const json_t *kwargs;       // the client's template variables, set after ours (NULL: none)
	const char *reasoning_effort; // passed to templates that read it (NULL: not set)
	const char *prefill;        // text after the generation prompt (NULL: none)
	bool add_generation_prompt;
	const char *date_ymd;       // strftime_now's date (NULL: today)
	const char *bos, *eos;      // the texts the template sees, instead of c's (NULL: c's)
	bool as_given;              // messages and tools reach the template unshaped, as apply_chat_template sends them
} chat_input;

// Which part of a chat_input a failure is about.
enum chat_fault { CHAT_F_NONE, CHAT_F_MESSAGES, CHAT_F_TOOLS, CHAT_F_TEMPLATE, CHAT_F_SIZE };

// The prompt's text: tools and tool turns shaped for c's family, the variables set, the
// template rendered, prefill appended. *text malloc'd. 0, or LANES_EINVAL / LANES_ELIMIT /
// LANES_ENOMEM with err and *fault (may be NULL) saying what is at fault.
int chat_render(const chat_tmpl *c, const chat_input *in, char **text, size_t *len, enum chat_fault *fault, char *err,
		size_t errlen);
// A bound on the rendered text checked before it is tokenized: 0, or a code with err set.
typedef int (*chat_check_fn)(void *arg, size_t bytes, char *err, size_t errlen);
// chat_render, then check (may be NULL) on its length (CHAT_F_SIZE when it refuses), then the
// text tokenized as a chat prompt (special tokens parsed, BOS as the vocab says). *ids
// malloc'd, *n of them. Codes as chat_render, and the tokenizer's.
int chat_prompt(const chat_tmpl *c, const chat_input *in, chat_check_fn check, void *check_arg, int32_t **ids, size_t *n,
		enum chat_fault *fault, char *err, size_t errlen);

// ---- fill-in-the-middle (fim.c) ---------------------------------------------------------------
// A file of the project beside the one being edited (llama-server's input_extra).
typedef struct {
	const char *filename;       // NULL: "tmp", as llama-server names a file sent without one
	const char *text;
	size_t filename_len, text_len;
} chat_fim_file;

// What a fill-in-the-middle prompt is made of: the code before the cursor, the text being typed
// there (tokenized with special tokens parsed), the code after it, and other files.
typedef struct {
	const char *prefix, *middle, *suffix;
	size_t prefix_len, middle_len, suffix_len;
	const int32_t *middle_ids;  // the typed text as token ids instead (NULL: middle's text)
	size_t n_middle_ids;
	const chat_fim_file *extra;
	size_t n_extra;
	bool repo;                  // llama-server's /infill: the repository framing even with no files
} chat_fim;

// Whether v has the tokens a fill-in-the-middle prompt needs (prefix, suffix, middle).
bool chat_fim_supported(const tok_vocab *v);
// The prompt in llama-server's order (format_infill): BOS as v adds it (first, where llama-server
// puts it after the files); with repo or files, <|repo_name|>myproject\n where v has a repository
// token, each file after <|file_sep|>NAME\n where v has a file separator (else after a snippet
// line), then <|file_sep|>filename\n; then PRE prefix middle SUF suffix MID. *ids malloc'd, *n of them. 0, or LANES_EUNSUPPORTED
// naming the missing tokens, or the tokenizer's code, with err.
int chat_fim_prompt(const tok_vocab *v, const chat_fim *f, int32_t **ids, size_t *n, char *err, size_t errlen);

#endif
