// tests: tool-call formats — each family is picked from its real template, a conversation with
// tools, a call and a result renders through that template in the family's shape, calls the
// model writes scan back (whole, prefix by prefix and in pieces, alike; cut short), and grammars
// name the tools.
#include "base/base.h"
#include "grammar/grammar.h"
#include "template/template.h"
#include "chat/chat.h"

#include "t.h"

#include <jansson.h>

static const char *TOOLS = "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
			   "\"Weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
			   "{\"type\": \"string\", \"description\": \"the city\"}}, \"required\": [\"city\"]}}},"
			   "{\"type\": \"function\", \"function\": {\"name\": \"get_time\", \"description\": \"Time now\"}}]";

static const char *CONV = "[{\"role\": \"system\", \"content\": \"Be brief.\"},"
			  "{\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
			  "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call_abc123\", \"type\": "
			  "\"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
			  "{\"role\": \"tool\", \"tool_call_id\": \"call_abc123\", \"content\": \"22 C and sunny\"}]";

static const struct {
	const char *file, *family, *call; // call: how the rendered conversation shows the call
} FILES[] = {
	{"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "hermes",
	 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"},
	{"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "hermes",
	 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"},
	{"Qwen-Qwen2.5-7B-Instruct.jinja", "hermes",
	 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"},
	{"meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"},
	{"meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"},
	{"meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"},
	{"mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral",
	 "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \""},
	{"meetkai-functionary-medium-v3.1.jinja", "functionary-v3.1", "<function=get_weather>{\"city\": \"Paris\"}</function>"},
	{"meetkai-functionary-medium-v3.2.jinja", "functionary-v3.2", ">>>get_weather\n{\"city\": \"Paris\"}"},
	{"CohereForAI-c4ai-command-r-plus-tool_use.jinja", "command-r", "Action:\n```json\n[\n    {\n        \"tool_name\": \"get_weather\""},
	{"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "command-r",
	 "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"},
	{"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "deepseek-r1",
	 "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>"},
	{"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "deepseek-r1",
	 "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>"},
	{"llama-cpp-deepseek-r1.jinja", "deepseek-r1",
	 "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>"},
	{"fireworks-ai-llama-3-firefunction-v2.jinja", "firefunction-v2",
	 " functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]"},
	{"google-gemma-2-2b-it.jinja", "fallback",
	 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>"},
	{"microsoft-Phi-3.5-mini-instruct.jinja", "fallback",
	 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>"},
};
#define N_FILES (sizeof FILES / sizeof FILES[0])

static char *read_template(const char *file) {
	char path[512];
	snprintf(path, sizeof path, "%s/chat-templates/%s", t_shared(), file);
	return t_read_file(path, NULL);
}

static int count(const char *s, const char *sub) {
	int n = 0;
	for (const char *p = s; (p = strstr(p, sub)); p++) n++;
	return n;
}

static void test_format_of(void) {
	for (size_t i = 0; i < N_FILES; i++) {
		char *src = read_template(FILES[i].file);
		CHECKF(src, "cannot read %s", FILES[i].file);
		if (!src) continue;
		const char *got = tool_format_name(tool_format_of(src));
		CHECKF(!strcmp(got, FILES[i].family), "%s: %s, want %s", FILES[i].file, got, FILES[i].family);
		free(src);
	}
	CHECK(!strcmp(tool_format_name(tool_format_of(NULL)), "fallback"));
	CHECK(!strcmp(tool_format_name(tool_format_of(tmpl_chatml())), "fallback"));
}

// Renders conv (JSON text) with tools through the template in file, as the server would.
static char *render_file(const char *file, const char *tools_json, const char *conv_json, char *err, size_t errlen) {
	char *src = read_template(file), *out = NULL;
	json_t *tools = json_loads(tools_json, 0, NULL), *conv = json_loads(conv_json, 0, NULL), *msgs = NULL, *tl = NULL;
	const tool_format *f = tool_format_of(src);
	tmpl *t = NULL;
	size_t n;
	if (src && !tool_render_context(f, tools, conv, &msgs, &tl, err, errlen) &&
	    !tmpl_compile(&t, src, strlen(src), err, errlen)) {
		json_t *ctx = json_pack("{s:O, s:s, s:s, s:b}", "messages", msgs, "bos_token", "<s>", "eos_token", "</s>",
					"add_generation_prompt", 1);
		if (tl) json_object_set(ctx, "tools", tl);
		if (tool_template_vars(f, tl, "2026-12-02", ctx) || tmpl_render(t, ctx, "2026-12-02", &out, &n, err, errlen))
			out = NULL;
		json_decref(ctx);
	}
	tmpl_free(t);
	json_decref(msgs);
	json_decref(tl);
	json_decref(tools);
	json_decref(conv);
	free(src);
	return out;
}

// Every family's real template renders the tools, the call and the result in its own shape.
static void test_render_every_template(void) {
	for (size_t i = 0; i < N_FILES; i++) {
		t_case("%s", FILES[i].file);
		char err[512] = "";
		char *out = render_file(FILES[i].file, TOOLS, CONV, err, sizeof err);
		CHECKF(out, "%s: %s", FILES[i].file, err);
		if (!out) continue;
		CHECKF(strstr(out, FILES[i].call), "%s: no call in its shape [%s] in\n%s", FILES[i].file, FILES[i].call, out);
		CHECKF(strstr(out, "Weather in a city") && strstr(out, "get_time") && count(out, "get_weather") >= 2,
		       "%s: no tool list in\n%s", FILES[i].file, out);
		CHECKF(strstr(out, "22 C and sunny") && strstr(out, "Weather in Paris?"), "%s: no result in\n%s", FILES[i].file,
		       out);
		if (!strcmp(FILES[i].family, "fallback"))
			CHECKF(strstr(out, "<tool_response>\n22 C and sunny\n</tool_response>"), "%s", out);
		free(out);
	}
	t_case("%s", "");
}

static int is_named(const json_t *m, const char *name) {
	const char *s = json_string_value(json_object_get(m, "name"));
	return s && !strcmp(s, name);
}

static const char *TWO_CALLS =
	"[{\"role\": \"user\", \"content\": \"Weather in Paris and the time?\"},"
	"{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": ["
	"{\"id\": \"call_one\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}},"
	"{\"id\": \"call_two\", \"type\": \"function\", \"function\": {\"name\": \"get_time\", \"arguments\": \"{}\"}}]},"
	"{\"role\": \"tool\", \"tool_call_id\": \"call_one\", \"content\": \"sunny\"},"
	"{\"role\": \"tool\", \"tool_call_id\": \"call_two\", \"content\": \"noon\"}]";

// Templates with rules of their own about calls render parallel calls too.
static void test_render_shapes(void) {
	char err[512] = "";
	// Mistral wants 9-character ids, and a result must carry its call's id
	char *out = render_file("mistralai-Mistral-Nemo-Instruct-2407.jinja", TOOLS, TWO_CALLS, err, sizeof err);
	CHECKF(out, "%s", err);
	const char *id = out ? strstr(out, "\"id\": \"") : NULL, *res = out ? strstr(out, "\"call_id\": \"") : NULL;
	CHECK(id && res && !memcmp(id + 7, res + 12, 10) && id[16] == '"');
	free(out);
	// Llama 3 refuses two calls in one turn: each call gets its own turn
	out = render_file("meta-llama-Llama-3.1-8B-Instruct.jinja", TOOLS, TWO_CALLS, err, sizeof err);
	CHECKF(out && strstr(out, "{\"name\": \"get_time\", \"parameters\": {}}") &&
		       strstr(out, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"),
	       "%s %s", err, out ? out : "");
	free(out);
	// Qwen: both calls in one turn, both results in one user turn
	out = render_file("Qwen-Qwen2.5-7B-Instruct.jinja", TOOLS, TWO_CALLS, err, sizeof err);
	CHECKF(out && strstr(out, "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}") &&
		       strstr(out, "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nnoon\n</tool_response><|im_end|>"),
	       "%s %s", err, out ? out : "");
	free(out);
	// Gemma has no system role and wants turns to alternate: the fallback keeps both rules
	out = render_file("google-gemma-2-2b-it.jinja", TOOLS, CONV, err, sizeof err);
	CHECKF(out && strstr(out, "<start_of_turn>user\nYou can call functions") && strstr(out, "Be brief.\nWeather in Paris?"),
	       "%s %s", err, out ? out : "");
	free(out);
	// DeepSeek R1 shows a turn's text or its calls, never both: the text gets its own turn
	const char *with_text = "[{\"role\": \"user\", \"content\": \"Weather?\"}, {\"role\": \"assistant\", \"content\": "
				"\"Let me look.\", \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": "
				"{\"name\": \"get_time\", \"arguments\": \"{}\"}}]}]";
	out = render_file("llama-cpp-deepseek-r1.jinja", TOOLS, with_text, err, sizeof err);
	CHECKF(out && strstr(out, "<｜Assistant｜>Let me look.<｜end▁of▁sentence｜><｜Assistant｜><｜tool▁calls▁begin｜>"
				  "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```"),
	       "%s %s", err, out ? out : "");
	free(out);
	// a tool result names the call it answers
	json_t *conv = json_loads(TWO_CALLS, 0, NULL), *m = NULL, *t = NULL;
	CHECK(tool_render_context(tool_format_of("<tool_call>"), NULL, conv, &m, &t, err, sizeof err) == 0);
	CHECK(is_named(json_array_get(m, 3), "get_time") && !t);
	json_decref(m);
	json_decref(conv);
}

static void expect_err(const char *tools_json, const char *conv_json, const char *want) {
	json_t *tools = tools_json ? json_loads(tools_json, 0, NULL) : NULL, *conv = json_loads(conv_json, 0, NULL);
	json_t *m = NULL, *t = NULL;
	char err[256] = "";
	int rc = tool_render_context(tool_format_of(NULL), tools, conv, &m, &t, err, sizeof err);
	CHECKF(rc == LANES_EINVAL && strstr(err, want), "want error [%s], got %d [%s]", want, rc, err);
	CHECK(!m && !t);
	json_decref(tools);
	json_decref(conv);
}

static void test_render_errors(void) {
	const char *user = "[{\"role\": \"user\", \"content\": \"hi\"}]";
	expect_err("[{\"type\": \"function\", \"function\": {\"name\": \"a\"}}, {\"type\": \"function\", \"function\": "
		   "{\"name\": \"bad name\"}}]", user, "tools[1].function.name");
	expect_err("[{\"type\": \"function\", \"function\": {\"name\": \"a\"}}, {\"type\": \"function\", \"function\": "
		   "{\"name\": \"a\"}}]", user, "tools[1].function.name: repeats");
	expect_err("[{\"type\": \"function\", \"function\": {\"name\": \"a\", \"parameters\": {\"type\": \"string\"}}}]", user,
		   "tools[0].function.parameters");
	expect_err("[{\"type\": \"retrieval\"}]", user, "tools[0].type");
	expect_err("{}", user, "tools: must be an array");
	expect_err(NULL, "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"x\", "
		   "\"function\": {\"name\": \"a\", \"arguments\": \"{oops\"}}]}]", "messages[1].tool_calls[0].function.arguments");
}

// ---- parsing ------------------------------------------------------------------------------

static const struct {
	const char *family, *content; // content: what comes before the calls, as the model writes it
	const char *one, *two;        // one call (get_weather Paris), two calls (then get_time {})
} OUTPUTS[] = {
	{"hermes", "Let me check. ", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
	 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n"
	 "{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"},
	{"llama3", "", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", NULL},
	{"mistral", "", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"a1b2c3d4e\"}]",
	 "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"a1b2c3d4e\"}, "
	 "{\"name\": \"get_time\", \"arguments\": {}, \"id\": \"zzzzzzzz9\"}]"},
	{"functionary-v3.1", "Sure. ", "<function=get_weather>{\"city\": \"Paris\"}</function>",
	 "<function=get_weather>{\"city\": \"Paris\"}</function><function=get_time>{}</function>"},
	{"functionary-v3.2", "all\nLet me check.", "get_weather\n{\"city\": \"Paris\"}", "get_weather\n{\"city\": \"Paris\"}>>>get_time\n{}"},
	{"command-r", "<|START_THINKING|>I will look it up.<|END_THINKING|>",
	 "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}\n]<|END_ACTION|>",
	 "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}},\n"
	 "    {\"tool_call_id\": \"1\", \"tool_name\": \"get_time\", \"parameters\": {}}\n]<|END_ACTION|>"},
	{"deepseek-r1", "I should call it.\n",
	 "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
	 "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n"
	 "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
	{"firefunction-v2", "", " functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
	 " functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": {}}]"},
	{"harmony", "", "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}", NULL},
	{"fallback", "Checking.\n", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
	 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>"},
};
#define N_OUTPUTS (sizeof OUTPUTS / sizeof OUTPUTS[0])

static const tool_format *family(const char *name) {
	static const char *src[] = {"<tool_call>", "<|start_header_id|> ipython", "[TOOL_CALLS]", "<function=", ">>>all",
				    "<|START_ACTION|>", "<｜tool▁calls▁begin｜>", " functools[", "<|channel|>commentary <|call|>", NULL};
	for (size_t i = 0; i < sizeof src / sizeof src[0]; i++) {
		const tool_format *f = tool_format_of(src[i]);
		if (!strcmp(tool_format_name(f), name)) return f;
	}
	return NULL;
}

static json_t *want_calls(int n) {
	return json_loads(n == 1 ? "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]"
				 : "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", "
				   "\"arguments\": {}}]",
			  0, NULL);
}

// A scan's calls as [{name, arguments: object}] (an open call's as tool_scan_input gives them).
static json_t *scan_calls(const tool_scan *s, const char *text) {
	json_t *a = json_array();
	for (int k = 0; k < s->n_calls; k++)
		json_array_append_new(a, json_pack("{s:s%, s:o}", "name", text + s->calls[k].name_off, s->calls[k].name_len,
						   "arguments", tool_scan_input(s, text, k)));
	return a;
}

static void scan_whole(tool_scan *s, const tool_format *f, bool calls_only, const char *text, size_t len) {
	tool_scan_init(s, f, calls_only);
	CHECK(tool_scan_feed(s, text, len, TOOL_END) == 0);
}

// Two scans found the same: content, and calls byte for byte.
static bool same_scan(const tool_scan *a, const tool_scan *b) {
	if (a->content_off != b->content_off || a->content_len != b->content_len || a->n_calls != b->n_calls) return false;
	for (int k = 0; k < a->n_calls; k++)
		if (memcmp(&a->calls[k], &b->calls[k], sizeof a->calls[k])) return false;
	return true;
}

// Scans text (cut to len) whole, and fed in pieces of 1 to chunk bytes: both find the same.
static void check_pieces(const tool_format *f, bool calls_only, const char *text, size_t len, uint32_t chunk) {
	tool_scan whole, inc;
	scan_whole(&whole, f, calls_only, text, len);
	tool_scan_init(&inc, f, calls_only);
	uint32_t seed = (uint32_t)len * 2654435761u + chunk;
	for (size_t k = 0; k < len;) {
		seed = seed * 1103515245u + 12345u;
		k += 1 + (seed >> 16) % chunk;
		if (k > len) k = len;
		CHECK(tool_scan_feed(&inc, text, k, TOOL_MORE) == 0);
	}
	CHECK(tool_scan_feed(&inc, text, len, TOOL_END) == 0);
	CHECKF(same_scan(&whole, &inc), "%s: [%.*s] in pieces of up to %u: content %zu/%zu, calls %d/%d", tool_format_name(f),
	       (int)len, text, chunk, whole.content_len, inc.content_len, whole.n_calls, inc.n_calls);
	tool_scan_free(&whole);
	tool_scan_free(&inc);
}

// Scans text whole and then fed prefix by prefix, as a stream is: the stream never shows marker
// bytes as content nor takes back what it showed, its calls grow by bytes of the whole's, and
// it ends where the whole scan ends. Every cut of the text, scanned as final, is a cut call.
static void check_parse(const tool_format *f, const char *content, const char *calls, int ncalls) {
	char text[2048];
	snprintf(text, sizeof text, "%s%s", content, calls);
	size_t len = strlen(text), clen = strlen(content);
	tool_scan w;
	scan_whole(&w, f, false, text, len);
	json_t *want = want_calls(ncalls), *got = scan_calls(&w, text);
	CHECKF(json_equal(got, want), "%s: [%s] parses to %s", tool_format_name(f), text, json_dumps(got, JSON_COMPACT));
	CHECKF(w.content_len == clen && w.over, "%s: content %zu, want %zu", tool_format_name(f), w.content_len, clen);
	for (int k = 0; k < w.n_calls; k++) CHECK(w.calls[k].whole && text[w.calls[k].args_off] == '{');
	json_decref(got);
	tool_scan s;
	tool_scan_init(&s, f, false);
	size_t shown = 0;
	for (size_t k = 0; k <= len; k++) {
		CHECK(tool_scan_feed(&s, text, k, TOOL_MORE) == 0);
		CHECKF(s.content_len <= clen && s.content_len >= shown, "%s prefix %zu: content %zu, want at most %zu",
		       tool_format_name(f), k, s.content_len, clen);
		shown = s.content_len;
		CHECKF(s.n_calls <= w.n_calls, "%s prefix %zu: %d calls", tool_format_name(f), k, s.n_calls);
		for (int j = 0; j < s.n_calls && j < w.n_calls; j++) {
			const tool_call_span *a = &s.calls[j], *b = &w.calls[j];
			CHECKF(a->name_off == b->name_off && a->name_len == b->name_len && a->args_len <= b->args_len &&
				       (!a->args_len || a->args_off == b->args_off) && a->whole == (a->args_len == b->args_len),
			       "%s prefix %zu: call %d", tool_format_name(f), k, j);
			// the open call's arguments are every byte read: nothing held back
			if (!a->whole && a->args_len) CHECKF(a->args_off + a->args_len == k, "%s prefix %zu", tool_format_name(f), k);
		}
		// a reply cut here: no marker bytes in the content, the calls begun are there
		tool_scan cut;
		tool_scan_init(&cut, f, false);
		CHECK(tool_scan_feed(&cut, text, k, TOOL_CUT) == 0);
		CHECKF(cut.content_len <= clen, "%s cut %zu: content %zu", tool_format_name(f), k, cut.content_len);
		CHECKF(cut.n_calls >= s.n_calls, "%s cut %zu: calls", tool_format_name(f), k);
		json_t *in = cut.n_calls ? tool_scan_input(&cut, text, cut.n_calls - 1) : NULL;
		CHECK(!cut.n_calls || json_is_object(in));
		json_decref(in);
		tool_scan_free(&cut);
	}
	CHECK(tool_scan_feed(&s, text, len, TOOL_END) == 0);
	CHECKF(same_scan(&s, &w), "%s: prefix by prefix differs from whole", tool_format_name(f));
	tool_scan_free(&s);
	for (uint32_t chunk = 2; chunk < 40; chunk *= 3) check_pieces(f, false, text, len, chunk);
	tool_scan_free(&w);
	json_decref(want);
}

static void test_parse_round_trip(void) {
	for (size_t i = 0; i < N_OUTPUTS; i++) {
		const tool_format *f = family(OUTPUTS[i].family);
		CHECKF(f, "no family %s", OUTPUTS[i].family);
		if (!f) continue;
		t_case("%s", OUTPUTS[i].family);
		check_parse(f, "", OUTPUTS[i].one, 1);
		if (*OUTPUTS[i].content) {
			// after text, functionary v3.2 opens its call itself
			char call[512];
			snprintf(call, sizeof call, "%s%s", strcmp(OUTPUTS[i].family, "functionary-v3.2") ? "" : ">>>", OUTPUTS[i].one);
			check_parse(f, OUTPUTS[i].content, call, 1);
		}
		if (OUTPUTS[i].two) check_parse(f, "", OUTPUTS[i].two, 2);
		// a reply without calls is all content
		const char *plain = !strcmp(OUTPUTS[i].family, "functionary-v3.2") ? "all\nIt is sunny." : "It is sunny.";
		tool_scan p;
		scan_whole(&p, f, false, plain, strlen(plain));
		CHECK(p.n_calls == 0 && p.content_len == strlen(plain) && p.over);
		CHECK(p.content_len - p.content_off == strlen("It is sunny."));
		tool_scan_free(&p);
		// under a grammar that makes the reply calls, a call cut in its opening leaves no content
		const size_t ol = strlen(OUTPUTS[i].one);
		for (size_t k = 0; k < ol; k++) {
			scan_whole(&p, f, true, OUTPUTS[i].one, k);
			CHECKF(p.content_len == 0, "%s: calls only, cut at %zu: content %zu", OUTPUTS[i].family, k, p.content_len);
			tool_scan_free(&p);
		}
		scan_whole(&p, f, true, OUTPUTS[i].one, ol);
		CHECK(p.n_calls == 1 && p.calls[0].whole && p.content_len == 0);
		tool_scan_free(&p);
	}
	t_case("%s", "");
}

// An open call's input: the members read whole, and a string value closed where it was cut.
static void test_parse_cut(void) {
	static const struct { const char *args, *input; } CUTS[] = {
		{"{", "{}"},
		{"{\"city\": \"Par", "{\"city\": \"Par\"}"},
		{"{\"city\": \"Paris\", \"n", "{\"city\": \"Paris\"}"},
		{"{\"city\": \"Paris\", \"n\": ", "{\"city\": \"Paris\"}"},
		{"{\"a\": 12", "{}"},
		{"{\"a\": 12, \"b\"", "{\"a\": 12}"},
		{"{\"a\": [1, {\"b\": tru", "{\"a\": [1, {}]}"},
		{"{\"a\": [1, \"x\\u00", "{\"a\": [1, \"x\"]}"},
		{"{\"a\": \"x\\", "{\"a\": \"x\"}"},
		{"{\"a\": {\"b\": [[", "{\"a\": {\"b\": [[]]}}"},
		{"{\"a\": -0.5e+3, \"b\": [true, false, null], \"c\": \"q\\\"\\u00e9\", \"d\": {}}",
		 "{\"a\": -0.5e+3, \"b\": [true, false, null], \"c\": \"q\\\"\\u00e9\", \"d\": {}}"},
	};
	const tool_format *f = family("hermes");
	for (size_t i = 0; i < sizeof CUTS / sizeof CUTS[0]; i++) {
		char text[512];
		snprintf(text, sizeof text, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": %s", CUTS[i].args);
		tool_scan s;
		scan_whole(&s, f, true, text, strlen(text));
		json_t *in = s.n_calls == 1 ? tool_scan_input(&s, text, 0) : NULL, *want = json_loads(CUTS[i].input, 0, NULL);
		CHECKF(in && json_equal(in, want) && s.content_len == 0, "[%s] reads as %s", CUTS[i].args,
		       in ? json_dumps(in, JSON_COMPACT) : "no call");
		CHECKF(s.n_calls == 1 && s.calls[0].args_len == strlen(CUTS[i].args), "[%s]: arguments %zu", CUTS[i].args,
		       s.n_calls ? s.calls[0].args_len : 0);
		json_decref(in);
		json_decref(want);
		tool_scan_free(&s);
	}
	// arguments that are not JSON end the call where they stop being JSON, and the scan with it
	const char *t = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"a\": 1x}}</tool_call>";
	tool_scan s;
	scan_whole(&s, f, false, t, strlen(t));
	CHECK(s.n_calls == 1 && !s.calls[0].whole && s.calls[0].args_len == strlen("{\"a\": 1") && s.content_len == 0);
	tool_scan_free(&s);
}

static void test_parse_malformed(void) {
	const tool_format *f = family("hermes");
	// a marker that opens no well-formed call stays content, and no call is reported
	const char *t = "Use <tool_call> tags like <tool_call>{name: x}</tool_call>.";
	tool_scan s;
	scan_whole(&s, f, false, t, strlen(t));
	CHECK(s.n_calls == 0 && s.content_len == strlen(t));
	tool_scan_free(&s);
	// a call cut short by the end of the reply is the call so far, not content
	t = "Sure. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par";
	scan_whole(&s, f, false, t, strlen(t));
	CHECK(s.n_calls == 1 && !s.calls[0].whole && s.content_len == strlen("Sure. "));
	CHECK(s.calls[0].name_len == 11 && !memcmp(t + s.calls[0].name_off, "get_weather", 11));
	CHECK(s.calls[0].args_len == strlen("{\"city\": \"Par"));
	tool_scan_free(&s);
	// cut before its name: the opening is dropped, the text before it stays
	t = "Sure. <tool_call>\n{\"na";
	scan_whole(&s, f, false, t, strlen(t));
	CHECK(s.n_calls == 0 && s.content_len == strlen("Sure. "));
	tool_scan_free(&s);
	// a marker at the end of a reply that may be text is text, unless max_tokens cut it
	t = "Sure. <tool_ca";
	scan_whole(&s, f, false, t, strlen(t));
	CHECK(s.n_calls == 0 && s.content_len == strlen(t));
	tool_scan_free(&s);
	tool_scan_init(&s, f, false);
	CHECK(tool_scan_feed(&s, t, strlen(t), TOOL_CUT) == 0 && s.n_calls == 0 && s.content_len == strlen("Sure. "));
	tool_scan_free(&s);
	// text after the calls is no content
	t = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\nDone, it is noon.";
	scan_whole(&s, f, false, t, strlen(t));
	CHECK(s.n_calls == 1 && s.calls[0].whole && s.content_len == 0);
	tool_scan_free(&s);
	// a name longer than any tool's is none
	char longname[300];
	snprintf(longname, sizeof longname, "<tool_call>\n{\"name\": \"%0100d\", \"arguments\": {}}\n</tool_call>", 0);
	scan_whole(&s, f, false, longname, strlen(longname));
	CHECK(s.n_calls == 0 && s.content_len == strlen(longname));
	tool_scan_free(&s);
}

// Hostile text: every family's replies, cut and mutated, under every family's scan, whole and in pieces.
static void test_parse_hostile(void) {
	uint32_t seed = 12345;
	for (size_t i = 0; i < N_OUTPUTS; i++)
		for (size_t j = 0; j < N_OUTPUTS; j++) {
			const tool_format *f = family(OUTPUTS[j].family);
			char text[1024];
			snprintf(text, sizeof text, "%s%s", OUTPUTS[i].content, OUTPUTS[i].two ? OUTPUTS[i].two : OUTPUTS[i].one);
			size_t len = strlen(text);
			for (int round = 0; round < 40; round++) {
				seed = seed * 1103515245u + 12345u;
				text[(seed >> 8) % len] = (char)(seed >> 20);
				const size_t n = (seed >> 4) % (len + 1);
				for (int only = 0; only < 2; only++) {
					tool_scan s;
					scan_whole(&s, f, only, text, n);
					CHECK(s.content_off <= s.content_len && s.content_len <= n && s.over);
					for (int k = 0; k < s.n_calls; k++)
						CHECK(s.calls[k].name_off + s.calls[k].name_len <= n && s.calls[k].args_off + s.calls[k].args_len <= n);
					json_t *in = s.n_calls ? tool_scan_input(&s, text, s.n_calls - 1) : NULL;
					CHECK(!s.n_calls || json_is_object(in));
					json_decref(in);
					tool_scan_free(&s);
					check_pieces(f, only, text, n, 1 + (seed >> 24) % 16);
				}
			}
		}
	json_t *m = NULL, *t = NULL;
	char err[256];
	json_t *conv = json_loads("[{\"role\": \"assistant\", \"tool_calls\": [7, {\"function\": 3}]}, {\"role\": 5}]", 0, NULL);
	CHECK(tool_render_context(family("mistral"), NULL, conv, &m, &t, err, sizeof err) == LANES_EINVAL);
	CHECKF(strstr(err, "messages[0].tool_calls[0]"), "%s", err);
	json_decref(conv);
	conv = json_loads("[{\"role\": \"tool\"}, {\"content\": \"x\"}]", 0, NULL);
	CHECK(tool_render_context(family("hermes"), NULL, conv, &m, &t, err, sizeof err) == LANES_EINVAL);
	CHECKF(strstr(err, "messages[1]"), "%s", err);
	json_decref(conv);
}

// ---- grammars -----------------------------------------------------------------------------

// A matcher over a vocabulary of the 256 bytes, so accept_bytes can follow any text.
static grammar_vocab *byte_vocab(void) {
	static char bytes[256];
	const char *piece[256];
	uint32_t len[256];
	bool usable[256];
	for (int i = 0; i < 256; i++) bytes[i] = (char)i, piece[i] = &bytes[i], len[i] = 1, usable[i] = true;
	grammar_vocab *v = NULL;
	return grammar_vocab_new(&v, 256, piece, len, usable, NULL, 0) ? NULL : v;
}

// Whether text (from its first byte) is a whole sentence of gbnf; lazy: with the triggers.
static int accepts(const grammar_vocab *v, const char *gbnf, const char *text, const char *const *trig, int nt) {
	grammar *g = NULL;
	grammar_matcher *m = NULL;
	char err[256] = "";
	if (grammar_compile(&g, gbnf, strlen(gbnf), NULL, err, sizeof err)) {
		fprintf(stderr, "grammar does not compile: %s\n%s\n", err, gbnf);
		return -1;
	}
	int ok = !grammar_matcher_new(&m, g, v, trig, nt, err, sizeof err) &&
		 !grammar_matcher_accept_bytes(m, text, strlen(text)) && grammar_matcher_accepting(m) &&
		 grammar_matcher_triggered(m);
	grammar_matcher_free(m);
	grammar_unref(g);
	return ok;
}

static const char *STRICT_TOOLS =
	"[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather in a city\", "
	"\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
	"[\"city\"], \"additionalProperties\": false}}}, {\"type\": \"function\", \"function\": {\"name\": \"get_time\"}}]";

// Rewrites the first occurrence of from in s to to (s has room).
static void replace(char *s, size_t cap, const char *from, const char *to) {
	char *p = strstr(s, from);
	if (!p) return;
	char rest[2048];
	snprintf(rest, sizeof rest, "%s", p + strlen(from));
	snprintf(p, cap - (size_t)(p - s), "%s%s", to, rest);
}

// The calls each family's model writes follow its grammar; wrong names, arguments against the
// schema and broken syntax do not.
static void test_grammar(void) {
	json_t *tools = json_loads(STRICT_TOOLS, 0, NULL);
	grammar_vocab *v = byte_vocab();
	CHECK(v);
	for (size_t i = 0; v && i < N_OUTPUTS; i++) {
		const tool_format *f = family(OUTPUTS[i].family);
		t_case("%s", OUTPUTS[i].family);
		bool v32 = !strcmp(OUTPUTS[i].family, "functionary-v3.2");
		char *g = NULL, err[256] = "";
		const char *const *trig = NULL;
		int nt = 0;
		// the grammar holds the template's own layout, compact arguments
		char one[1024], two[1024];
		snprintf(one, sizeof one, "%s", OUTPUTS[i].one);
		snprintf(two, sizeof two, "%s", OUTPUTS[i].two ? OUTPUTS[i].two : "");
		replace(one, sizeof one, "{\"city\": \"Paris\"}", "{\"city\":\"Paris\"}");
		replace(two, sizeof two, "{\"city\": \"Paris\"}", "{\"city\":\"Paris\"}");
		replace(two, sizeof two, "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
			"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>");
		CHECK(tool_grammar(f, tools, TOOL_CHOICE_REQUIRED, NULL, true, &g, &trig, &nt, NULL, err, sizeof err) == 0 && nt == 0);
		if (!g) continue;
		CHECKF(accepts(v, g, one, NULL, 0) == 1, "%s: required grammar refuses [%s]", OUTPUTS[i].family, one);
		if (*two) CHECKF(accepts(v, g, two, NULL, 0) == 1, "%s: refuses [%s]", OUTPUTS[i].family, two);
		char bad[1024];
		snprintf(bad, sizeof bad, "%s", one);
		replace(bad, sizeof bad, "get_weather", "get_wetter");
		CHECK(accepts(v, g, bad, NULL, 0) == 0);
		snprintf(bad, sizeof bad, "%s", one);
		replace(bad, sizeof bad, "\"city\"", "\"town\"");
		CHECK(accepts(v, g, bad, NULL, 0) == 0);
		snprintf(bad, sizeof bad, "%s", one);
		bad[strlen(bad) - 1] = 0;
		CHECK(accepts(v, g, bad, NULL, 0) == 0);
		CHECK(accepts(v, g, "It is sunny.", NULL, 0) == 0);
		free(g);
		g = NULL;
		// named: only that tool; without parallel: one call
		CHECK(tool_grammar(f, tools, TOOL_CHOICE_NAMED, "get_weather", false, &g, &trig, &nt, NULL, err, sizeof err) == 0);
		if (g) {
			CHECK(accepts(v, g, one, NULL, 0) == 1);
			if (*two) CHECK(accepts(v, g, two, NULL, 0) == 0);
			CHECK(!strstr(g, "get_time"));
		}
		free(g);
		g = NULL;
		// auto: text, then a call opened by the trigger
		CHECK(tool_grammar(f, tools, TOOL_CHOICE_AUTO, NULL, true, &g, &trig, &nt, NULL, err, sizeof err) == 0);
		CHECK(nt == 1 && trig && trig[0][0]);
		if (g && nt == 1) {
			char text[1200];
			snprintf(text, sizeof text, "Let me see. %s%s", v32 ? ">>>" : "", one);
			CHECKF(accepts(v, g, text, trig, nt) == 1, "%s: auto refuses [%s]", OUTPUTS[i].family, text);
			snprintf(text, sizeof text, "Let me see. %s%s", v32 ? ">>>" : "", bad);
			CHECK(accepts(v, g, text, trig, nt) == 0);
		}
		free(g);
		g = NULL;
		CHECK(tool_grammar(f, tools, TOOL_CHOICE_NAMED, "nope", false, &g, &trig, &nt, NULL, err, sizeof err) == LANES_EINVAL);
		CHECK(!g && strstr(err, "nope"));
	}
	t_case("%s", "");
	// harmony: a required call may follow the message header the model writes after its thinking
	char *g = NULL, err[256] = "";
	CHECK(tool_grammar(family("harmony"), tools, TOOL_CHOICE_REQUIRED, NULL, true, &g, NULL, NULL, NULL, err, sizeof err) == 0);
	CHECK(g && accepts(v, g, "<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}", NULL, 0) == 1);
	CHECK(g && accepts(v, g, "<|start|>assistant<|channel|>final<|message|>{}", NULL, 0) == 0);
	free(g);
	g = NULL;
	// a tool without parameters takes any object
	CHECK(tool_grammar(family("hermes"), tools, TOOL_CHOICE_NAMED, "get_time", false, &g, NULL, NULL, NULL, err, sizeof err) == 0);
	CHECK(g && accepts(v, g, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\":\"UTC\"}}\n</tool_call>", NULL, 0) == 1);
	free(g);
	g = NULL;
	grammar_vocab_free(v);
	// a tool not marked strict relaxes what cannot be checked and names it; a strict one is refused
	json_t *bad = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
				 "\"object\", \"patternProperties\": {}, \"properties\": {\"a\": {\"if\": {}, \"type\": \"string\"}}}}}]", 0, NULL);
	tool_schema_notes notes = {0};
	CHECK(tool_grammar(family("hermes"), bad, TOOL_CHOICE_REQUIRED, NULL, false, &g, NULL, NULL, &notes, err, sizeof err) == 0);
	CHECKF(!strcmp(notes.relaxed, "patternProperties, if") && notes.bad == -1, "%s", notes.relaxed);
	free(g);
	g = NULL;
	json_object_set_new(json_object_get(json_array_get(bad, 0), "function"), "strict", json_true());
	notes = (tool_schema_notes){.field = "input_schema"};
	CHECK(tool_grammar(family("hermes"), bad, TOOL_CHOICE_REQUIRED, NULL, false, &g, NULL, NULL, &notes, err, sizeof err) ==
	      LANES_EINVAL);
	CHECKF(strstr(err, "tools[0].input_schema: ") && strstr(err, "patternProperties") && notes.bad == 0 && !g, "%s", err);
	json_decref(bad);
	json_decref(tools);
}


// Feeds text's first n of len bytes to s and appends what it released to think and answer.
static void reason_take(reason_scan *s, const char *text, size_t n, size_t len, char *think, size_t *tn, char *answer, size_t *an) {
	reason_scan_feed(s, text, n, n == len);
	memcpy(think + *tn, text + s->think_off + *tn, s->think_len - *tn);
	*tn = s->think_len;
	const size_t al = reason_scan_answer(s, n);
	memcpy(answer + *an, text + s->answer_off + *an, al - *an);
	*an = al;
	think[*tn] = answer[*an] = 0;
}

// ---- harmony (gpt-oss) ------------------------------------------------------------------------

static char *read_gpt_oss(void) { return t_read_file("tests/data/templates/openai-gpt-oss-120b.jinja", NULL); }

// gpt-oss's template names both families; the conversation renders with the call in the commentary
// channel, the result from functions.NAME, and the thinking sent back as reasoning_content.
static void test_harmony_render(void) {
	char *src = read_gpt_oss();
	CHECK(src != NULL);
	if (!src) return;
	CHECK(!strcmp(tool_format_name(tool_format_of(src)), "harmony"));
	CHECK(!strcmp(reason_format_name(reason_format_of(src)), "harmony"));
	const char *conv = "[{\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
			   "{\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"Call it.\", \"tool_calls\": [{\"id\": \"c1\", "
			   "\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
			   "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"22 C and sunny\"}]";
	json_t *tools = json_loads(TOOLS, 0, NULL), *msgs = json_loads(conv, 0, NULL), *m = NULL, *tl = NULL;
	char err[512] = "", *out = NULL;
	size_t n = 0;
	tmpl *t = NULL;
	CHECKF(tool_render_context(tool_format_of(src), tools, msgs, &m, &tl, err, sizeof err) == 0, "%s", err);
	CHECKF(tmpl_compile(&t, src, strlen(src), err, sizeof err) == 0, "%s", err);
	json_t *ctx = json_pack("{s:O, s:O, s:b, s:s}", "messages", m, "tools", tl, "add_generation_prompt", 1, "reasoning_effort", "low");
	CHECKF(t && tmpl_render(t, ctx, "2026-12-02", &out, &n, err, sizeof err) == 0, "%s", err);
	CHECKF(out && strstr(out, "Reasoning: low\n") && strstr(out, "type get_weather = (_: {\n// the city\ncity: string,\n}) => any;") &&
		       strstr(out, "<|start|>assistant<|channel|>analysis<|message|>Call it.<|end|>"
				   "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>"
				   "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"22 C and sunny\"<|end|><|start|>assistant"),
	       "%s", out ? out : err);
	free(out);
	json_decref(ctx);
	json_decref(m);
	json_decref(tl);
	// a call turn's text is its analysis: the thinking beside it is left out, as the template wants
	json_t *a = json_array_get(msgs, 1);
	json_object_set_new(a, "content", json_string("Let me look."));
	CHECK(tool_render_context(tool_format_of(src), tools, msgs, &m, &tl, err, sizeof err) == 0);
	CHECK(m && !json_object_get(json_array_get(m, 1), "thinking"));
	json_decref(m);
	json_decref(tl);
	tmpl_free(t);
	json_decref(tools);
	json_decref(msgs);
	free(src);
}

// A gpt-oss reply read as the server reads it: the reasoning scan splits off the analysis and the
// headers, the tool scan reads the answer. Fed split at any byte, or a byte at a time, it finds
// what the whole finds.
static void harmony_split(const char *text, bool inside, size_t cut, char *think, char *answer, json_t **calls) {
	const reason_format *rf;
	CHECK(reason_format_named("harmony", &rf) == 0 && rf);
	reason_scan s;
	reason_scan_init(&s, rf, inside);
	tool_scan ts;
	tool_scan_init(&ts, family("harmony"), false);
	size_t tn = 0, an = 0;
	const size_t len = strlen(text);
	// cut 0: a byte at a time; else the text up to cut, then the rest
	for (size_t n = cut < len ? (cut ? cut : len > 0) : len;; n = cut || n == len ? len : n + 1) {
		reason_take(&s, text, n, len, think, &tn, answer, &an);
		CHECK(tool_scan_feed(&ts, answer, an, n == len ? TOOL_END : TOOL_MORE) == 0);
		if (n == len) break;
	}
	*calls = scan_calls(&ts, answer);
	answer[ts.content_len] = 0;
	memmove(answer, answer + ts.content_off, strlen(answer + ts.content_off) + 1);
	tool_scan_free(&ts);
}

static void test_harmony_scan(void) {
	// inside: the prompt opened the analysis (a grammar follows the thinking)
	static const struct { const char *text, *think, *content; int calls; bool inside; } cases[] = {
		{"<|channel|>analysis<|message|>The user greets.<|end|><|start|>assistant<|channel|>final<|message|>Hello!", "The user greets.",
		 "Hello!", 0, false},
		{"<|channel|>final<|message|>Hi there.", "", "Hi there.", 0, false},
		{"<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
		 "<|constrain|>json<|message|>{\"city\": \"Paris\"}", "Need weather.", "", 1, false},
		{"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}", "", "", 1, false},
		{"<|channel|>analysis<|message|>cut short <|en", "cut short <|en", "", 0, false},
		{"<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>fin", "x", "", 0, false},
		{"Plain words.", "", "Plain words.", 0, false},
		{"Need it.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
		 "{\"city\": \"Paris\"}", "Need it.", "", 1, true},
		{"Fine.<|end|><|channel|>final<|message|> Sure.", "Fine.", "Sure.", 0, true},
		// a commentary preamble before the call is content
		{"<|channel|>analysis<|message|>Plan.<|end|><|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|>"
		 "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}",
		 "Plan.", "Let me check.", 1, false},
		{"<|channel|>commentary<|message|>Only words.<|end|>", "", "Only words.<|end|>", 0, false},
		// the recipient before the channel, as the template writes calls in history
		{"<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json"
		 "<|message|>{\"city\": \"Paris\"}", "Need weather.", "", 1, false},
		{"<|channel|>analysis<|message|>Go.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json"
		 "<|message|>{\"city\": \"Paris\"}", "Go.", "", 1, false},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const size_t len = strlen(cases[i].text);
		for (size_t cut = 0; cut <= len; cut++) {
			char think[512], answer[512];
			json_t *calls = NULL;
			harmony_split(cases[i].text, cases[i].inside, cut, think, answer, &calls);
			json_t *want = cases[i].calls ? want_calls(cases[i].calls) : json_array();
			CHECKF(!strcmp(think, cases[i].think) && !strcmp(answer, cases[i].content) && json_equal(calls, want),
			       "case %zu cut at %zu: think '%s' content '%s' calls %s", i, cut, think, answer,
			       json_dumps(calls, JSON_COMPACT));
			json_decref(calls);
			json_decref(want);
		}
	}
	// thinking off writes an empty analysis; the model picks the channel after it
	const reason_format *rf;
	CHECK(reason_format_named("harmony", &rf) == 0);
	char *p = strdup("<|start|>user<|message|>Hi<|end|><|start|>assistant");
	size_t n = strlen(p);
	bool inside = true;
	CHECK(reason_prompt_end(rf, true, false, false, &p, &n, &inside) == 0 && !inside);
	CHECK(p && !strcmp(p, "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>analysis<|message|><|end|>"));
	free(p);
}

// ---- reasoning families -----------------------------------------------------------------------

static void test_reason_of(void) {
	static const struct { const char *file, *family; } want[] = {
		{"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "think"}, {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "think"},
		{"llama-cpp-deepseek-r1.jinja", "think"}, {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "command-r7b"},
		{"Qwen-Qwen2.5-7B-Instruct.jinja", "none"}, {"meta-llama-Llama-3.1-8B-Instruct.jinja", "none"},
		{"CohereForAI-c4ai-command-r-plus-tool_use.jinja", "none"}};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		char *src = read_template(want[i].file);
		CHECKF(src, "cannot read %s", want[i].file);
		const char *got = reason_format_name(reason_format_of(src));
		CHECKF(!strcmp(got, want[i].family), "%s: %s, want %s", want[i].file, got, want[i].family);
		free(src);
	}
	const reason_format *f;
	CHECK(reason_format_named("none", &f) == 0 && !f);
	CHECK(reason_format_named("command-r7b", &f) == 0 && f && !strcmp(f->close, "<|END_THINKING|>"));
	CHECK(reason_format_named("deepseek", &f) == -1);
	CHECK(reason_opened(reason_format_of("<think>"), "x<｜Assistant｜><think>\n", strlen("x<｜Assistant｜><think>\n")));
	CHECK(!reason_opened(reason_format_of("<think>"), "<think>\n\n</think>\n\n", 20));
}

// Feeds text k bytes at a time; the pieces of thinking and answer released concatenate to what one
// whole scan finds.
static void scan_pieces(const reason_format *f, bool inside, const char *text, size_t k, char *think, char *answer) {
	reason_scan s;
	reason_scan_init(&s, f, inside);
	size_t tn = 0, an = 0;
	const size_t len = strlen(text);
	for (size_t n = k < len ? k : len;; n = n + k < len ? n + k : len) {
		reason_take(&s, text, n, len, think, &tn, answer, &an);
		if (n == len) break;
	}
}

static void test_reason_scan(void) {
	const reason_format *think = reason_format_of("<think>"), *r7b = reason_format_of("<|START_THINKING|>");
	static const struct { int fam; bool inside; const char *text, *think, *answer; } cases[] = {
		{0, false, "<think>\nThe sky scatters blue.\n</think>\n\nRayleigh.", "The sky scatters blue.", "Rayleigh."},
		{0, false, "  <think>a</think>b", "a", "b"},
		{0, true, "Let me see.\n</think>\n\nIt is blue.", "Let me see.", "It is blue."},
		{0, true, "cut short </thi", "cut short </thi", ""},        // never closed: thinking, the partial marker too
		{0, false, "No thinking here.", "", "No thinking here."},
		{0, false, "<thin", "", "<thin"},                           // an opening cut short is the answer
		{0, false, "<thinking>x", "", "<thinking>x"},
		{0, false, "a </think> b", "", "a </think> b"},             // a close with no open is text
		{0, true, "</think>\n\n", "", ""},
		{0, true, "x </ think></think>y", "x </ think>", "y"},
		{1, false, "<|START_THINKING|>plan<|END_THINKING|>answer", "plan", "answer"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const reason_format *f = cases[i].fam ? r7b : think;
		char t[128], a[128];
		for (size_t k = 1; k <= 9; k++) {
			scan_pieces(f, cases[i].inside, cases[i].text, k, t, a);
			CHECKF(!strcmp(t, cases[i].think) && !strcmp(a, cases[i].answer), "case %zu by %zu: think '%s' answer '%s'", i, k, t, a);
		}
	}
	// no family: all of it is the answer
	char t[64], a[64];
	scan_pieces(NULL, false, "<think>x</think>y", 3, t, a);
	CHECK(!strcmp(t, "") && !strcmp(a, "<think>x</think>y"));
}

int main(void) {
	test_format_of();
	test_render_every_template();
	test_render_shapes();
	test_render_errors();
	test_parse_round_trip();
	test_parse_cut();
	test_parse_malformed();
	test_parse_hostile();
	test_grammar();
	test_reason_of();
	test_reason_scan();
	test_harmony_render();
	test_harmony_scan();
	T_DONE("test_tools");
}
