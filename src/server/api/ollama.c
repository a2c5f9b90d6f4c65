// server/api/ollama: Ollama's API as a compatibility layer over the same lane requests —
// GET /api/version, /api/tags, /api/ps, POST /api/show, and POST /api/generate and
// /api/chat (NDJSON streaming by default, `stream: false` for one object; chat's tools through
// gen/tools.c, calls in Ollama's shape), with Ollama's `options`, reply fields (done,
// done_reason, counts, durations in ns) and {"error"} shape. The model cache is ops/cache.c's.
#include "model/loras.h"
#include "server/gen/gen.h"
#include "server/routes.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

// The Ollama API version whose features these endpoints serve (tools in chat, capabilities, pull,
// copy, delete); clients compare it: Codex's --oss wants 0.13.4 or newer.
#define OLL_API_VERSION "0.13.4"

// ---- model facts ------------------------------------------------------------------------------

// Ollama names carry a tag; ":latest" names the one model too.
static bool oll_model_ok(const srv_model *M, const char *name) {
	if (!name) return true;
	const size_t n = strlen(M->model_id);
	return !strncmp(name, M->model_id, n) && (!name[n] || !strcmp(name + n, ":latest"));
}

// The loaded adapter name calls (":latest" allowed), into out; false when it calls none.
static bool oll_adapter(srv_model *M, const char *name, char *out) {
	struct model_loras *l = srv_loras_of(M);
	size_t n = name ? strlen(name) : 0;
	if (n > 7 && !strcmp(name + n - 7, ":latest")) n -= 7;
	if (!l || !n || n > MODEL_LORA_NAME_MAX) return false;
	memcpy(out, name, n);
	out[n] = 0;
	return model_loras_has(l, out);
}

// Any name means the one model unless --strict-model, until an adapter has been loaded.
static int oll_check_model(srv_model *M, const char *name, bool lookup, srv_err *e) {
	http_server *s = M->s;
	char a[MODEL_LORA_NAME_MAX + 1];
	struct model_loras *l = srv_loras_of(M);
	if (oll_model_ok(M, name) || oll_adapter(M, name, a) ||
	    (!lookup && !s->cfg.strict_model && s->n_models == 1 && !(l && model_loras_ever(l))))
		return 0;
	if (s->n_models > 1) return name && srv_models_find(s, name) == M ? 0 : srv_models_named(s, name, e); // ORG/REPO:QUANT too
	return srv_fail(e, SRV_E_NOT_FOUND, "model", "model '%s' not found: this server serves '%s'%s", name, M->model_id,
			l && model_loras_ever(l) ? " and the adapters GET /v1/adapters lists" : "");
}

static void now_iso(char *out, size_t n) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char d[32];
	strftime(d, sizeof d, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out, n, "%s.%09ldZ", d, ts.tv_nsec);
}

// "260K", "1.1B": the parameter count as Ollama prints it.
static void param_size(const gguf *g, char *out, size_t n) {
	double p = 0;
	for (int64_t i = 0; i < gguf_n_tensors(g); i++) p += (double)gguf_tensor_nelem(gguf_tensor_at(g, i));
	if (p >= 1e9) snprintf(out, n, "%.1fB", p / 1e9);
	else if (p >= 1e6) snprintf(out, n, "%.1fM", p / 1e6);
	else snprintf(out, n, "%.0fK", p / 1e3);
}

// g: the file, when open (its tensors give the parameter count).
static json_t *details_of(const model_hparams *hp, const gguf *g) {
	const gguf_ttype_info *ti = gguf_ttype_get(hp->main_type);
	char ps[32] = "";
	if (g) param_size(g, ps, sizeof ps);
	return json_pack("{s:s, s:s, s:s, s:[s], s:s, s:s}", "parent_model", "", "format", "gguf", "family", hp->arch,
			 "families", hp->arch, "parameter_size", ps, "quantization_level", ti ? ti->name : "unknown");
}

// Whether M is in and stays so while its caller holds it.
static bool is_in(const srv_model *M) { return (M->pinned || atomic_load(&M->mstate) == SRV_M_READY) && M->m; }

static json_t *details(const srv_model *M) {
	// a model of --models-dir not loaded: what its metadata says
	return is_in(M) ? details_of(model_hparams_of(M->m), model_gguf(M->m)) : details_of(&M->meta, NULL);
}

// One entry of /api/tags (with_ps: of /api/ps).
static json_t *model_entry(const srv_model *M, bool with_ps) {
	struct stat st;
	const bool ok = stat(M->model_path, &st) == 0;
	char mod[64] = "", name[160];
	if (ok) {
		struct tm tm;
		gmtime_r(&st.st_mtime, &tm);
		strftime(mod, sizeof mod, "%Y-%m-%dT%H:%M:%SZ", &tm);
	}
	snprintf(name, sizeof name, "%s:latest", M->model_id);
	json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:o}", "name", name, "model", name, "size",
			      (json_int_t)(ok ? st.st_size : 0), "digest", "", "details", details(M));
	if (!o) return NULL;
	if (with_ps) {
		// the -m model is loaded until the server stops; another until its keep-alive passes idle
		char exp[64] = "9999-12-31T23:59:59Z";
		json_t *ms = M->pinned ? NULL : srv_model_status((srv_model *)M);
		json_t *in = json_object_get(ms, "unloads_in_s");
		if (in) {
			const time_t at = time(NULL) + (time_t)ceil(json_number_value(in));
			struct tm tm;
			gmtime_r(&at, &tm);
			strftime(exp, sizeof exp, "%Y-%m-%dT%H:%M:%SZ", &tm);
		}
		json_decref(ms);
		json_object_set_new(o, "expires_at", json_string(exp));
		json_object_set_new(o, "size_vram", json_integer(0));
		json_object_set_new(o, "context_length", json_integer(M->max_ctx));
	} else {
		json_object_set_new(o, "modified_at", json_string(mod));
	}
	return o;
}

void srv_ollama_version(srv_conn *c) {
	srv_reply_json(c, 200, json_pack("{s:s, s:s}", "version", OLL_API_VERSION, "server", base_version_string()), 0);
}

// Every model served (tags) or loaded (ps); the -m model once it is in.
static void list(srv_conn *c, bool ps) {
	http_server *s = c->s;
	if (!ps) srv_models_refresh(s); // what was put in the folder, or taken out, since
	srv_model **v = malloc(SRV_MODELS_MAX * sizeof *v);
	const int n = v ? srv_models_each(s, ps, v, SRV_MODELS_MAX) : 0;
	json_t *a = v ? json_array() : NULL;
	const int st = atomic_load(&s->state);
	for (int i = 0; a && i < n; i++) {
		if (v[i] == s->mdl && (st == HTTP_LOADING || st == HTTP_FAILED)) continue;
		if (!ps && v[i] != s->mdl && v[i]->meta.arch[0] == 0) continue; // a file that is no model: /v1/models says why
		json_array_append_new(a, model_entry(v[i], ps));
	}
	srv_models_put(s, v, n);
	free(v);
	srv_reply_json(c, 200, a ? json_pack("{s:o}", "models", a) : NULL, 0);
}

void srv_ollama_tags(srv_conn *c) { list(c, false); }

void srv_ollama_ps(srv_conn *c) { list(c, true); }

typedef struct {
	const char *model, *name;
	bool verbose;
} show_req;

static const srv_field show_fields[] = {
	SRV_ROW(show_req, model, SRV_K_STR),
	SRV_ROW(show_req, name, SRV_K_STR),
	SRV_ROW(show_req, verbose, SRV_K_BOOL),
	{0},
};

// What the model does here, as Ollama names it: completion and tools unless --embeddings (tools
// work on every template: one without a tool family of its own gets the fallback's calls), and
// embedding always; thinking when replies set their thinking apart (a reasoning family); insert
// when the vocabulary has fill-in-the-middle tokens (generate's suffix).
static json_t *capabilities(const http_server *s, bool reason, const tok_vocab *vocab) {
	json_t *a = json_array();
	if (!s->cfg.embeddings_only) {
		json_array_append_new(a, json_string("completion"));
		json_array_append_new(a, json_string("tools"));
	}
	json_array_append_new(a, json_string("embedding"));
	if (!s->cfg.embeddings_only && reason) json_array_append_new(a, json_string("thinking"));
	if (!s->cfg.embeddings_only && chat_fim_supported(vocab)) json_array_append_new(a, json_string("insert"));
	return a;
}

static json_t *show_body(const http_server *s, const model_hparams *hp, const gguf *g, const tok_vocab *vocab, const char *tsrc, bool reason) {
	char k[64];
	json_t *info = json_object();
	json_object_set_new(info, "general.architecture", json_string(hp->arch));
	snprintf(k, sizeof k, "%s.context_length", hp->arch);
	json_object_set_new(info, k, json_integer(hp->n_ctx_train));
	snprintf(k, sizeof k, "%s.embedding_length", hp->arch);
	json_object_set_new(info, k, json_integer(hp->n_embd));
	snprintf(k, sizeof k, "%s.block_count", hp->arch);
	json_object_set_new(info, k, json_integer(hp->n_layers));
	// the template in use: the model's, a file's or the fallback
	return json_pack("{s:s, s:s, s:s, s:o, s:o, s:o}", "modelfile", "", "parameters", "", "template", tsrc ? tsrc : "", "details",
			 details_of(hp, g), "model_info", info, "capabilities", capabilities(s, reason, vocab));
}

// A model not loaded, described from its file — metadata, vocabulary and template — with its
// weights unread, so listing a folder's capabilities loads nothing. NULL: e says why.
static json_t *show_unloaded(const srv_model *M, srv_err *e) {
	const http_server *s = M->s;
	gguf *g = NULL;
	tok_vocab *vocab = NULL;
	chat_tmpl chat;
	memset(&chat, 0, sizeof chat);
	model_hparams hp;
	char err[512];
	int rc = gguf_open(&g, M->model_path, err, sizeof err);
	if (!rc) rc = model_meta_from_gguf(g, &hp, NULL, err, sizeof err);
	if (!rc) rc = tok_vocab_load(&vocab, g, err, sizeof err);
	if (!rc) rc = chat_load(&chat, vocab, M->template_path, err, sizeof err);
	json_t *o = NULL;
	if (!rc) o = show_body(s, &hp, g, vocab, chat.src, s->reason_auto ? chat.reason != NULL : s->reason_named != NULL);
	else srv_fail(e, SRV_E_INTERNAL, "model", "the model '%s' cannot be read from %s: %s", M->model_id, M->model_path, err);
	if (!rc && !o) srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	chat_free(&chat);
	tok_vocab_free(vocab);
	gguf_free(g);
	return o;
}

void srv_ollama_show(srv_conn *c) {
	srv_model *M = c->mdl;
	srv_err e;
	json_t *j = NULL;
	show_req r = {0};
	if (srv_parse_body(c, &j, &e) || srv_fields_known(j, show_fields, NULL, &e) ||
	    srv_fields_read(j, show_fields, &r, NULL, NULL, NULL, &e)) {
		json_decref(j);
		srv_reply_error(c, &e);
		return;
	}
	const char *name = r.model ? r.model : r.name;
	if (!name || oll_check_model(M, name, true, &e)) {
		if (!name) srv_fail(&e, SRV_E_BAD_REQUEST, "model", "model is required");
		json_decref(j);
		srv_reply_error(c, &e);
		return;
	}
	json_decref(j);
	if (is_in(M)) {
		srv_reply_json(c, 200, show_body(M->s, model_hparams_of(M->m), model_gguf(M->m), M->vocab, M->chat.src, M->reason != NULL), 0);
		return;
	}
	json_t *o = show_unloaded(M, &e);
	if (o) srv_reply_json(c, 200, o, 0);
	else srv_reply_error(c, &e);
}

// ---- generate and chat -------------------------------------------------------------------------

typedef struct {
	srv_gen g;
	bool chat;
	json_t *j;                     // the request: the stops point into it
	json_t *messages;              // chat
	const char *prompt, *system, *suffix, *templ; // generate
	bool raw;
	bool parallel_tool_calls;      // lanes' extension, as OpenAI's (default true: Ollama's models call several)
	json_t *format, *images, *context, *tools, *tool_choice, *think, *keep_alive;
	json_t *num_predict, *repeat_last_n;
	json_t *tfs_z;
	char name[160];                // the model as the client named it
	char lora[MODEL_LORA_NAME_MAX + 1]; // the adapter it names, without a tag
} oll_req;

// Options lanes honours; the ones that only tune Ollama's own runner are accepted and ignored.
static const srv_field oll_options[] = {
	{"temperature", SRV_K_NUM, LANE_F_TEMPERATURE, offsetof(oll_req, g.lr.sampling.temperature), .sub = NULL},
	{"top_p", SRV_K_NUM, LANE_F_TOP_P, offsetof(oll_req, g.lr.sampling.top_p), .sub = NULL},
	{"top_k", SRV_K_INT, LANE_F_TOP_K, offsetof(oll_req, g.lr.sampling.top_k), .sub = NULL},
	{"min_p", SRV_K_NUM, LANE_F_MIN_P, offsetof(oll_req, g.lr.sampling.min_p), .sub = NULL},
	{"seed", SRV_K_SEED, .off = offsetof(oll_req, g.lr.sampling)},
	{"num_predict", SRV_K_JSON, .off = offsetof(oll_req, num_predict)},
	{"stop", SRV_K_STOP_ARRAY, LANE_F_STOP, offsetof(oll_req, g.stops), .sub = NULL},
	{"repeat_penalty", SRV_K_NUM, LANE_F_REPEAT_PENALTY, offsetof(oll_req, g.lr.sampling.repeat_penalty), .sub = NULL},
	{"repeat_last_n", SRV_K_JSON, .off = offsetof(oll_req, repeat_last_n)},
	{"presence_penalty", SRV_K_NUM, LANE_F_PRESENCE_PENALTY, offsetof(oll_req, g.lr.sampling.presence_penalty), .sub = NULL},
	{"frequency_penalty", SRV_K_NUM, LANE_F_FREQUENCY_PENALTY, offsetof(oll_req, g.lr.sampling.frequency_penalty), .sub = NULL},
	{"mirostat", SRV_K_INT, LANE_F_MIROSTAT, offsetof(oll_req, g.lr.sampling.mirostat), .sub = NULL},
	{"mirostat_tau", SRV_K_NUM, LANE_F_MIROSTAT_TAU, offsetof(oll_req, g.lr.sampling.mirostat_tau), .sub = NULL},
	{"mirostat_eta", SRV_K_NUM, LANE_F_MIROSTAT_ETA, offsetof(oll_req, g.lr.sampling.mirostat_eta), .sub = NULL},
	{"tfs_z", SRV_K_JSON, .off = offsetof(oll_req, tfs_z)},
	SRV_IGNORED("logits_all"), SRV_IGNORED("embedding_only"),
	{"typical_p", SRV_K_NUM, LANE_F_TYPICAL_P, offsetof(oll_req, g.lr.sampling.typical_p), .sub = NULL},
	SRV_IGNORED("num_ctx"), SRV_IGNORED("num_keep"), SRV_IGNORED("num_batch"), SRV_IGNORED("num_gpu"),
	SRV_IGNORED("main_gpu"), SRV_IGNORED("num_thread"), SRV_IGNORED("use_mmap"), SRV_IGNORED("use_mlock"),
	SRV_IGNORED("low_vram"), SRV_IGNORED("numa"), SRV_IGNORED("f16_kv"), SRV_IGNORED("vocab_only"),
	SRV_IGNORED("penalize_newline"),
	{0},
};

static const srv_field oll_chat_fields[] = {
	{"model", SRV_K_STR, .off = offsetof(oll_req, g.model)},
	SRV_ROW(oll_req, messages, SRV_K_JSON),
	{"stream", SRV_K_BOOL, .off = offsetof(oll_req, g.stream)},
	SRV_ROW(oll_req, format, SRV_K_JSON),
	{"options", SRV_K_OBJECT, .sub = oll_options},
	SRV_ROW(oll_req, keep_alive, SRV_K_JSON),
	SRV_ROW(oll_req, tools, SRV_K_JSON),
	SRV_ROW(oll_req, tool_choice, SRV_K_JSON), // lanes' extensions: OpenAI's values, for a call the client needs
	SRV_ROW(oll_req, parallel_tool_calls, SRV_K_BOOL),
	SRV_ROW(oll_req, think, SRV_K_JSON),
	SRV_NAMED_AS("logprobs", BOOL), // not in this reply's shape yet
	SRV_NAMED_AS("top_logprobs", INT),
	{0},
};

static const srv_field oll_generate_fields[] = {
	{"model", SRV_K_STR, .off = offsetof(oll_req, g.model)},
	SRV_ROW(oll_req, prompt, SRV_K_STR),
	SRV_ROW(oll_req, system, SRV_K_STR),
	SRV_ROW(oll_req, suffix, SRV_K_STR),
	{"template", SRV_K_STR, .off = offsetof(oll_req, templ)},
	SRV_ROW(oll_req, raw, SRV_K_BOOL),
	{"stream", SRV_K_BOOL, .off = offsetof(oll_req, g.stream)},
	SRV_ROW(oll_req, format, SRV_K_JSON),
	SRV_ROW(oll_req, images, SRV_K_JSON),
	SRV_ROW(oll_req, context, SRV_K_JSON),
	{"options", SRV_K_OBJECT, .sub = oll_options},
	SRV_ROW(oll_req, keep_alive, SRV_K_JSON),
	SRV_ROW(oll_req, think, SRV_K_JSON),
	SRV_NAMED_AS("logprobs", BOOL),
	SRV_NAMED_AS("top_logprobs", INT),
	SRV_NAMED("width"), // image generation's
	SRV_NAMED("height"),
	SRV_NAMED("steps"),
	{0},
};

static const lane_api oll_chat_api = {.name = {[LANE_F_PROMPT] = "messages", [LANE_F_MAX_TOKENS] = "options.num_predict"}};
static const lane_api oll_gen_api = {.name = {[LANE_F_PROMPT] = "prompt", [LANE_F_MAX_TOKENS] = "options.num_predict"}};

static void oll_free(void *p) {
	oll_req *r = p;
	if (!r) return;
	json_decref(r->j);
	free(r);
}

static void ndjson(srv_call *c, json_t *o) { srv_sse(c, NULL, o); }

// A parsed call as Ollama writes it: arguments an object, not JSON text.
static json_t *oll_call(const json_t *call, int k) {
	return json_pack("{s:O, s:{s:i, s:O, s:O}}", "id", json_object_get(call, "id"), "function", "index", k, "name",
			 json_object_get(call, "name"), "arguments", json_object_get(call, "input"));
}

// The head of every reply object: model, created_at, and the text as the endpoint puts it.
static json_t *oll_object(srv_call *c, const char *text, size_t len, bool done) {
	const oll_req *r = c->st;
	char at[48];
	now_iso(at, sizeof at);
	json_t *o = r->chat ? json_pack("{s:s, s:s, s:{s:s, s:s%}, s:b}", "model", r->name, "created_at", at, "message", "role",
					"assistant", "content", text, len, "done", done)
			    : json_pack("{s:s, s:s, s:s%, s:b}", "model", r->name, "created_at", at, "response", text, len, "done",
					done);
	return o;
}

// The final object's fields: why it ended, the counts and the durations in nanoseconds.
static json_t *oll_final(srv_call *c, const char *text, size_t len) {
	const srv_choice *ch = &c->ch[0];
	json_t *o = oll_object(c, text, len, true);
	if (!o) return NULL;
	const uint64_t now = base_now_us(), t0 = c->conn->t0_us;
	const uint64_t first = ch->t_first_us ? ch->t_first_us : now;
	json_object_set_new(o, "done_reason", json_string(srv_choice_cut(ch) ? "length" : "stop"));
	srv_finish_note(o, ch);
	json_object_set_new(o, "total_duration", json_integer((json_int_t)((now - t0) * 1000)));
	json_object_set_new(o, "load_duration", json_integer(0));
	json_object_set_new(o, "prompt_eval_count", json_integer(c->g.lr.n_prompt - ch->n_cached));
	json_object_set_new(o, "prompt_eval_duration", json_integer((json_int_t)((first - t0) * 1000)));
	json_object_set_new(o, "eval_count", json_integer(ch->n_generated));
	json_object_set_new(o, "eval_duration", json_integer((json_int_t)((now - first) * 1000)));
	json_object_set_new(o, "token_sha", json_string(ch->token_sha));
	return o;
}

// ---- tool calls in a stream: the text before a call as content, each call whole in its own object

static void sink_content(srv_call *c, int i, const char *text, size_t len) {
	if (len) ndjson(c, oll_object(c, text, len, false));
}

// Thinking goes in message.thinking (chat) or thinking (generate), beside an empty text.
static void oll_think_set(srv_call *c, json_t *o, const char *text, size_t len) {
	const oll_req *r = c->st;
	if (o) json_object_set_new(r->chat ? json_object_get(o, "message") : o, "thinking", json_stringn(text, len));
}

static void oll_thinking(srv_call *c, int i, const char *text, size_t len) {
	json_t *o = oll_object(c, "", 0, false);
	oll_think_set(c, o, text, len);
	ndjson(c, o);
}

static void sink_start(srv_call *c, int i, int k, const char *id, const char *name, size_t name_len) {}

static void sink_args(srv_call *c, int i, int k, const char *text, size_t len) {}

static void sink_end(srv_call *c, int i, int k, const char *id, json_t *call) {
	json_t *o = oll_object(c, "", 0, false);
	if (o) json_object_set_new(json_object_get(o, "message"), "tool_calls", json_pack("[o]", oll_call(call, k)));
	ndjson(c, o);
}

static const srv_tool_sink oll_sink = {sink_content, sink_start, sink_args, sink_end};

static void oll_text(srv_call *c, int i, const char *text, size_t len, const lane_event *tok) {
	(void)i, (void)tok;
	if (c->g.stream && c->g.parse_calls) srv_tools_stream(c, 0, false, &oll_sink);
	else if (c->g.stream && len) ndjson(c, oll_object(c, text, len, false));
}

static void oll_begin(srv_call *c) { (void)c; }

static void oll_done(srv_call *c) {
	if (c->g.parse_calls) srv_tools_stream(c, 0, true, &oll_sink);
	ndjson(c, oll_final(c, "", 0));
}

static json_t *oll_reply(srv_call *c) {
	const srv_choice *ch = &c->ch[0];
	size_t clen = ch->text.len;
	json_t *calls = NULL;
	if (srv_tool_calls(c, 0, &clen, &calls)) return NULL;
	json_t *o = oll_final(c, ch->text.p ? ch->text.p : "", clen);
	if (ch->rs.thought) oll_think_set(c, o, ch->thinking.p ? ch->thinking.p : "", ch->thinking.len);
	if (o && json_array_size(calls)) {
		json_t *tc = json_array();
		size_t k;
		json_t *v;
		json_array_foreach(calls, k, v) json_array_append_new(tc, oll_call(v, (int)k));
		json_object_set_new(json_object_get(o, "message"), "tool_calls", tc);
	}
	json_decref(calls);
	return o;
}

static const srv_api oll_srv_api = {.begin = oll_begin, .text = oll_text, .thinking = oll_thinking, .done = oll_done, .reply = oll_reply, .free_state = oll_free, .family = SRV_OLLAMA};

// Ollama's num_predict (-1 and -2: to the window) and repeat_last_n (-1: the whole context,
// 0: no penalty), and the options lanes honours only at their neutral values (named otherwise).
static int oll_options_apply(srv_conn *c, oll_req *r, srv_err *e) {
	const json_t *np = r->num_predict, *rl = r->repeat_last_n;
	const json_int_t n = json_is_integer(np) ? json_integer_value(np) : -1;
	if ((np && !json_is_integer(np)) || n < -2 || n == 0 || n > INT32_MAX)
		return srv_fail(e, SRV_E_BAD_REQUEST, "options.num_predict", "options.num_predict must be -1, -2 or an integer of at least 1");
	r->g.lr.max_tokens = n > 0 ? (int32_t)n : 0;
	const json_int_t last = json_is_integer(rl) ? json_integer_value(rl) : 64; // Ollama's default
	if ((rl && !json_is_integer(rl)) || last < -1 || last > INT32_MAX)
		return srv_fail(e, SRV_E_BAD_REQUEST, "options.repeat_last_n", "options.repeat_last_n must be an integer of -1 or more");
	if (last == 0) r->g.lr.sampling.repeat_penalty = 1.0f;
	r->g.lr.sampling.repeat_last_n = last > 0 ? (int32_t)last : 0;
	static const struct { const char *name; double neutral; size_t off; } fixed[] = {
		{"tfs_z", 1, offsetof(oll_req, tfs_z)},
	};
	for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++) {
		json_t *v = *(json_t **)((char *)r + fixed[k].off);
		char name[32];
		snprintf(name, sizeof name, "options.%s", fixed[k].name);
		if (v && !json_is_number(v)) return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s must be a number", name);
		if (v && json_number_value(v) != fixed[k].neutral) srv_ignored_add(c, name);
	}
	return 0;
}

// images: base64 strings, each read as a placeholder (this model cannot see); *n of them.
static int oll_images(const json_t *images, const char *p, size_t *n, srv_err *e) {
	*n = 0;
	if (!images || json_is_null(images)) return 0;
	if (!json_is_array(images)) return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s must be an array of base64 strings", p);
	size_t k;
	json_t *v;
	json_array_foreach(images, k, v) if (!json_is_string(v))
		return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s[%zu] must be a base64 string", p, k);
	*n = json_array_size(images);
	return 0;
}

// text, then a placeholder per image (named on c). malloc'd.
static char *with_images(srv_conn *c, const char *text, size_t n_images) {
	static const char ph[] = "[image omitted: this model cannot see images]";
	srv_buf b = {0};
	srv_buf_adds(&b, text);
	for (size_t k = 0; k < n_images; k++) {
		if (b.len) srv_buf_adds(&b, "\n");
		srv_buf_adds(&b, ph);
	}
	if (n_images) srv_ignored_add(c, "images");
	srv_buf_add(&b, "", 1);
	if (b.oom) srv_buf_free(&b);
	return b.p;
}

// Fields lanes cannot honour: named, or refused where going on would answer something else.
static int oll_unsupported(srv_conn *c, oll_req *r, srv_err *e) {
	if (r->context && !(json_is_array(r->context) && !json_array_size(r->context)))
		return srv_fail(e, SRV_E_BAD_REQUEST, "context", "context (a previous reply's tokens) is not supported: send the text");
	const json_t *t = r->think;
	const char *ts = json_string_value(t);
	if (t && !json_is_boolean(t) && !json_is_null(t) && !(ts && (!strcmp(ts, "high") || !strcmp(ts, "medium") || !strcmp(ts, "low"))))
		return srv_fail(e, SRV_E_BAD_REQUEST, "think", "think must be a boolean, \"high\", \"medium\" or \"low\"");
	// a level bounds the thinking as reasoning_effort does
	if ((json_is_true(t) || ts) && !c->mdl->reason) srv_ignored_add(c, "think"); // no reasoning family: nothing to show
	if (ts) srv_think_effort(&r->g, ts, "think", e);
	else if (json_is_boolean(t)) r->g.think = json_is_true(t) ? SRV_THINK_ON : SRV_THINK_OFF;
	if (r->templ && *r->templ) srv_ignored_add(c, "template"); // the model's chat template renders it
	return 0;
}

// format: "json" (any JSON object) or a JSON Schema into the request's grammar; chat's tools
// (OpenAI's shape, as Ollama takes them) as the OpenAI path sets them: beside a format, the
// reply is a call or the format's JSON.
static int oll_format(srv_model *M, oll_req *r, srv_err *e) {
	json_t *f = r->format;
	enum tool_choice choice = TOOL_CHOICE_AUTO;
	const char *name = NULL;
	if (r->chat && srv_tool_choice(r->tool_choice, false, &choice, &name, e)) return -1;
	const bool format = f && !json_is_null(f) && !(json_is_string(f) && !json_string_length(f));
	int rc = 0;
	if (!format) rc = 0;
	else if (json_is_string(f) && !strcmp(json_string_value(f), "json")) rc = srv_grammar_json_object(&r->g, e);
	else if (json_is_object(f)) rc = srv_grammar_schema(&r->g, f, "format", e);
	else rc = srv_fail(e, SRV_E_BAD_REQUEST, "format", "format must be \"json\" or a JSON Schema object");
	if (rc) return rc;
	return r->chat ? srv_tools_set(M, &r->g, r->tools, choice, name, r->parallel_tool_calls, "tools", "function.parameters", e) : 0;
}

// An assistant turn's tool_calls ({function: {name, arguments: object}}, an id when the client
// kept one) as the chat template reads them: OpenAI's calls, each with an id; pending gets
// {id, name} of each, for the tool turns that answer them.
static int oll_calls(json_t *calls, size_t i, const char *p, json_t *o, json_t *pending, srv_err *e) {
	if (!json_is_array(calls)) return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.tool_calls must be an array", p);
	json_t *out = json_array();
	json_array_clear(pending);
	size_t k;
	json_t *tc;
	json_array_foreach(calls, k, tc) {
		json_t *fn = json_object_get(tc, "function"), *id = json_object_get(tc, "id");
		json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
		if (!json_is_object(fn) || !json_is_string(name) || (args && !json_is_object(args) && !json_is_string(args))) {
			json_decref(out);
			return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.tool_calls[%zu] must be {\"function\": {\"name\", \"arguments\": {...}}}", p, k);
		}
		char made[48];
		snprintf(made, sizeof made, "call_%zu_%zu", i, k); // the same conversation gets the same ids
		const char *cid = json_is_string(id) ? json_string_value(id) : made;
		json_t *c = json_pack("{s:s, s:s, s:{s:O, s:o}}", "id", cid, "type", "function", "function", "name", name, "arguments",
				      args ? json_incref(args) : json_object());
		if (!c || json_array_append_new(out, c) || json_array_append_new(pending, json_pack("{s:s, s:O}", "id", cid, "name", name))) {
			json_decref(out);
			return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
		}
	}
	json_object_set_new(o, "tool_calls", out);
	return 0;
}

// A tool turn's result tied to the call it answers: its tool_call_id, else the first call of the
// turn before not answered yet whose name is its tool_name (any, without one).
static void oll_answer(json_t *m, json_t *o, json_t *pending) {
	const char *id = json_string_value(json_object_get(m, "tool_call_id"));
	const char *tool = json_string_value(json_object_get(m, "tool_name"));
	size_t k;
	json_t *c;
	json_array_foreach(pending, k, c) {
		const char *cid = json_string_value(json_object_get(c, "id")), *nm = json_string_value(json_object_get(c, "name"));
		if (id ? strcmp(id, cid) : tool && strcmp(tool, nm)) continue;
		if (!tool) tool = nm;
		if (!id) json_object_set_new(o, "tool_call_id", json_string(cid));
		json_array_remove(pending, k);
		break;
	}
	if (id) json_object_set_new(o, "tool_call_id", json_string(id));
	if (tool) json_object_set_new(o, "name", json_string(tool));
}

// Ollama chat messages as the chat template reads them: {role, content} strings, a placeholder
// for each image, an assistant turn's tool calls and the tool turns that answer them.
static int oll_messages(srv_conn *c, json_t *msgs, json_t **out, srv_err *e) {
	static const char *const fields[] = {"role", "content", "images", "tool_calls", "thinking", "tool_name", "tool_call_id", NULL};
	*out = NULL;
	if (!json_is_array(msgs) || !json_array_size(msgs))
		return srv_fail(e, SRV_E_BAD_REQUEST, "messages", "messages must be a non-empty array");
	json_t *flat = json_array(), *pending = json_array();
	size_t i;
	json_t *m;
	json_array_foreach(msgs, i, m) {
		char p[64];
		snprintf(p, sizeof p, "messages[%zu]", i);
		const char *role = json_string_value(json_object_get(m, "role"));
		json_t *content = json_object_get(m, "content");
		json_t *images = json_object_get(m, "images"), *calls = json_object_get(m, "tool_calls");
		const char *bad = NULL;
		const char *k;
		json_t *v;
		json_object_foreach(m, k, v) {
			size_t f = 0;
			while (fields[f] && strcmp(k, fields[f])) f++;
			if (!fields[f]) bad = k;
		}
		char pi[80];
		snprintf(pi, sizeof pi, "%s.images", p);
		size_t n_images = 0;
		if (!json_is_object(m)) srv_fail(e, SRV_E_BAD_REQUEST, p, "%s must be an object", p);
		else if (bad) srv_fail(e, SRV_E_BAD_REQUEST, p, "unknown field %s.%s", p, bad);
		else if (!role) srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.role must be a string", p);
		else if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "tool"))
			srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.role '%s' is not supported: system, user, assistant or tool", p, role);
		else if (calls && !json_is_null(calls) && strcmp(role, "assistant") && !(json_is_array(calls) && !json_array_size(calls)))
			srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.tool_calls: only assistant turns make tool calls", p);
		else if (oll_images(images, pi, &n_images, e)) {
			// e names what is wrong with them
		}
		else if (content && !json_is_string(content) && !json_is_null(content))
			srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.content must be a string", p);
		else {
			char *text = with_images(c, json_is_string(content) ? json_string_value(content) : "", n_images);
			json_t *o = text ? json_pack("{s:s, s:s}", "role", role, "content", text) : NULL;
			free(text);
			int rc = o ? 0 : srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
			if (!rc && json_array_size(calls)) rc = oll_calls(calls, i, p, o, pending, e);
			if (!rc && !strcmp(role, "tool")) oll_answer(m, o, pending);
			if (!rc && !json_array_append_new(flat, o)) continue;
			if (!rc) srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
			if (rc) json_decref(o);
		}
		json_decref(flat);
		json_decref(pending);
		return -1;
	}
	json_decref(pending);
	*out = flat;
	return 0;
}

static void oll_run(srv_conn *c, bool chat) {
	srv_model *M = c->mdl;
	srv_err e;
	oll_req *r = calloc(1, sizeof *r);
	if (!r) {
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		srv_reply_error(c, &e);
		return;
	}
	r->chat = chat;
	r->parallel_tool_calls = true;
	srv_gen_init(&r->g, chat ? &oll_chat_api : &oll_gen_api, c);
	r->g.stream = true; // Ollama streams unless told not to
	r->g.stream_type = "application/x-ndjson";
	// Ollama's default options
	r->g.lr.sampling.temperature = 0.8f;
	r->g.lr.sampling.top_k = 40;
	r->g.lr.sampling.top_p = 0.9f;
	r->g.lr.sampling.repeat_penalty = 1.1f;
	const srv_field *t = chat ? oll_chat_fields : oll_generate_fields;
	int rc = srv_parse_body(c, &r->j, &e) || srv_fields_known(r->j, t, NULL, &e) ||
		 srv_fields_read(r->j, t, r, NULL, &r->g.api, c, &e);
	if (!rc && !r->g.model) rc = srv_fail(&e, SRV_E_BAD_REQUEST, "model", "model is required");
	if (!rc) rc = oll_check_model(M, r->g.model, false, &e);
	if (!rc) snprintf(r->name, sizeof r->name, "%s", r->g.model);
	// checked here, in Ollama's naming; an adapter's name is bound by srv_gen_check
	r->g.model = !rc && oll_adapter(M, r->g.model, r->lora) ? r->lora : NULL;
	size_t n_images = 0;
	if (!rc) rc = oll_unsupported(c, r, &e) || oll_images(r->images, "images", &n_images, &e) || oll_options_apply(c, r, &e) ||
		      srv_gen_check(M, &r->g, &e) || oll_format(M, r, &e);
	const bool insert = !chat && r->suffix && *r->suffix;
	if (!rc && !chat && (!r->prompt || !*r->prompt) && !insert) {
		// Ollama's way to load a model: an empty prompt answers done at once
		json_decref(r->j);
		srv_gen_free(&r->g);
		char at[48];
		now_iso(at, sizeof at);
		json_t *o = json_pack("{s:s, s:s, s:s, s:b, s:s}", "model", r->name, "created_at", at, "response", "", "done", 1,
				      "done_reason", "load");
		free(r);
		srv_reply_json(c, 200, o, 0);
		return;
	}
	if (!rc && insert) {
		// fill-in-the-middle, as Ollama's insert templates render it: the prompt, then the suffix
		if (n_images) srv_ignored_add(c, "images");
		if (r->system && *r->system) srv_ignored_add(c, "system"); // an insert prompt has no system turn
		const char *pre = r->prompt ? r->prompt : "";
		const chat_fim f = {.prefix = pre, .prefix_len = strlen(pre), .suffix = r->suffix, .suffix_len = strlen(r->suffix)};
		size_t n = 0;
		char err[256];
		int t2 = lane_check_prompt_size(M->host, 0, f.prefix_len + f.suffix_len, &r->g.api, err, sizeof err, NULL);
		if (!t2) t2 = chat_fim_prompt(M->vocab, &f, &r->g.prompt, &n, err, sizeof err);
		if (t2) rc = srv_fail(&e, srv_kind_of(t2, SRV_BLAME_REQUEST), t2 == LANES_EUNSUPPORTED ? "suffix" : "prompt", "%s", err);
		r->g.lr.n_prompt = (int32_t)n;
	} else if (!rc && !chat && r->raw) {
		if (n_images) srv_ignored_add(c, "images"); // a raw prompt is tokenized as sent
		size_t n = 0;
		char err[256];
		int t2 = tok_encode(M->vocab, r->prompt, strlen(r->prompt), true, true, &r->g.prompt, &n, err, sizeof err);
		if (t2) rc = srv_fail(&e, t2 == LANES_ENOMEM ? SRV_E_INTERNAL : SRV_E_BAD_REQUEST, "prompt", "%s", err);
		r->g.lr.n_prompt = (int32_t)n;
	} else if (!rc) {
		json_t *flat = NULL;
		if (chat) {
			rc = oll_messages(c, r->messages, &flat, &e);
		} else {
			char *prompt = with_images(c, r->prompt, n_images);
			flat = !prompt ? NULL
			       : r->system && *r->system ? json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system", "content", r->system,
								     "role", "user", "content", prompt)
							 : json_pack("[{s:s, s:s}]", "role", "user", "content", prompt);
			free(prompt);
			if (!flat) rc = srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		}
		if (!rc) rc = srv_chat_prompt(M, flat, NULL, chat ? "messages" : "prompt", &r->g, &r->g.prompt, &r->g.lr.n_prompt, &e);
		json_decref(flat);
	}
	if (rc) {
		srv_gen_free(&r->g);
		oll_free(r);
		srv_reply_error(c, &e);
		return;
	}
	srv_gen g = r->g;
	memset(&r->g, 0, sizeof r->g);
	srv_gen_run(c, &oll_srv_api, r, &g, chat ? "chat-" : "gen-");
}

void srv_ollama_chat(srv_conn *c) { oll_run(c, true); }
void srv_ollama_generate(srv_conn *c) { oll_run(c, false); }
