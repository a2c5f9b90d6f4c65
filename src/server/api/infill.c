// server/api/infill: llama-server's POST /infill — code completion at a cursor: the code before
// and after it and other files of the project into a fill-in-the-middle prompt (src/chat/fim.c),
// generated as any completion, answered in llama-server's /completion shape (content, stop,
// tokens_predicted, stop_type, timings) or streamed as its SSE, whose last event says stop.
#include "server/gen/gen.h"
#include "server/routes.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	srv_gen g;
	json_t *j;                     // the request: the stops point into it
	const char *input_prefix, *input_suffix;
	const char *grammar;           // GBNF text
	json_t *prompt;                // text, or token ids and texts
	json_t *input_extra, *repeat_last_n, *max_tokens, *json_schema;
} inf_req;

static const srv_field inf_fields[] = {
	{NULL, SRV_K_INCLUDE, .off = offsetof(inf_req, g), .sub = srv_gen_fields},
	SRV_ROW(inf_req, input_prefix, SRV_K_STR),
	SRV_ROW(inf_req, input_suffix, SRV_K_STR),
	SRV_ROW(inf_req, input_extra, SRV_K_JSON),
	SRV_ROW(inf_req, prompt, SRV_K_JSON),
	SRV_ROW(inf_req, max_tokens, SRV_K_JSON),
	{"temperature", SRV_K_NUM, LANE_F_TEMPERATURE, offsetof(inf_req, g.lr.sampling.temperature), .sub = NULL},
	{"top_p", SRV_K_NUM, LANE_F_TOP_P, offsetof(inf_req, g.lr.sampling.top_p), .sub = NULL},
	{"repeat_penalty", SRV_K_NUM, LANE_F_REPEAT_PENALTY, offsetof(inf_req, g.lr.sampling.repeat_penalty), .sub = NULL},
	SRV_ROW(inf_req, repeat_last_n, SRV_K_JSON),
	{"presence_penalty", SRV_K_NUM, LANE_F_PRESENCE_PENALTY, offsetof(inf_req, g.lr.sampling.presence_penalty), .sub = NULL},
	{"frequency_penalty", SRV_K_NUM, LANE_F_FREQUENCY_PENALTY, offsetof(inf_req, g.lr.sampling.frequency_penalty), .sub = NULL},
	{"stop", SRV_K_STOPS, LANE_F_STOP, offsetof(inf_req, g.stops), .sub = NULL},
	{"logit_bias", SRV_K_BIAS, LANE_F_LOGIT_BIAS, offsetof(inf_req, g.bias), .sub = NULL},
	SRV_ROW(inf_req, grammar, SRV_K_STR),
	SRV_ROW(inf_req, json_schema, SRV_K_JSON),
	// llama-server's knobs lanes does not run (its samplers come with srv_gen_fields): named when sent
	SRV_NAMED("n_probs"), SRV_NAMED("n_keep"), SRV_NAMED("n_indent"), SRV_NAMED("min_keep"),
	SRV_NAMED("t_max_predict_ms"), SRV_NAMED("t_max_prompt_ms"), SRV_NAMED("post_sampling_probs"),
	SRV_NAMED("response_fields"), SRV_NAMED("return_tokens"), SRV_NAMED("timings_per_token"), SRV_NAMED("return_progress"),
	{0},
};

static const lane_api inf_api = {.name = {[LANE_F_PROMPT] = "input_prefix", [LANE_F_MAX_TOKENS] = "n_predict"}};

static void inf_free(void *p) {
	inf_req *r = p;
	if (!r) return;
	json_decref(r->j);
	free(r);
}

// llama-server's stop_type: eos, limit (max tokens, the context, a grammar's dead end) or word.
static const char *stop_type(const srv_choice *ch) {
	if (srv_choice_cut(ch)) return "limit";
	return ch->finish == LANE_FINISH_STOP_SEQUENCE ? "word" : "eos";
}

// The last object: stop first, so that a relay knows the stream's end by its first bytes.
static json_t *inf_final(srv_call *c, const char *text, size_t len) {
	const srv_choice *ch = &c->ch[0];
	const uint64_t now = base_now_us(), t0 = c->conn->t0_us;
	const uint64_t first = ch->t_first_us ? ch->t_first_us : now;
	const char *word = ch->finish == LANE_FINISH_STOP_SEQUENCE && ch->stop_index >= 0 && ch->stop_index < c->g.stops.n
				   ? c->g.stops.s[ch->stop_index] : "";
	const double prompt_ms = (double)(first - t0) / 1e3, predicted_ms = (double)(now - first) / 1e3;
	json_t *o = json_pack("{s:b, s:i, s:s%, s:[], s:i, s:s, s:i, s:i, s:s, s:s, s:i, s:b, s:b, s:s}", "stop", 1, "index", 0,
			      "content", text, len, "tokens", "id_slot", -1, "model", srv_call_model(c), "tokens_predicted",
			      ch->n_generated, "tokens_evaluated", c->g.lr.n_prompt, "stop_type", stop_type(ch), "stopping_word", word,
			      "tokens_cached", ch->n_cached, "truncated", 0, "has_new_line", memchr(text, '\n', len) != NULL,
			      "token_sha", ch->token_sha);
	json_t *t = json_pack("{s:i, s:f, s:i, s:f}", "prompt_n", c->g.lr.n_prompt - ch->n_cached, "prompt_ms", prompt_ms,
			      "predicted_n", ch->n_generated, "predicted_ms", predicted_ms);
	if (o && t) json_object_set_new(o, "timings", t);
	else json_decref(t);
	srv_finish_note(o, ch);
	return o;
}

static void inf_text(srv_call *c, int i, const char *text, size_t len, const lane_event *tok) {
	(void)i, (void)tok;
	if (!c->g.stream || !len) return;
	srv_sse(c, NULL, json_pack("{s:i, s:s%, s:[], s:b, s:i, s:i, s:i}", "index", 0, "content", text, len, "tokens", "stop", 0,
				   "id_slot", -1, "tokens_predicted", c->ch[0].n_tokens, "tokens_evaluated", c->g.lr.n_prompt));
}

static void inf_begin(srv_call *c) { (void)c; }

static void inf_done(srv_call *c) { srv_sse(c, NULL, inf_final(c, "", 0)); }

static json_t *inf_reply(srv_call *c) {
	const srv_choice *ch = &c->ch[0];
	return inf_final(c, ch->text.p ? ch->text.p : "", ch->text.len);
}

static const srv_api inf_srv_api = {.begin = inf_begin, .text = inf_text, .done = inf_done, .reply = inf_reply, .free_state = inf_free, .family = SRV_LLAMA};

// input_extra: [{"filename", "text"}] (keys beside these, such as an editor's "time", are its own); *out malloc'd.
static int inf_extra(const json_t *x, chat_fim_file **out, size_t *n, srv_err *e) {
	*out = NULL, *n = 0;
	if (!x) return 0;
	if (!json_is_array(x))
		return srv_fail(e, SRV_E_BAD_REQUEST, "input_extra", "input_extra must be an array of {\"filename\": string, \"text\": string}");
	if (!json_array_size(x)) return 0;
	chat_fim_file *f = calloc(json_array_size(x), sizeof *f);
	if (!f) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	size_t k;
	json_t *it;
	json_array_foreach(x, k, it) {
		json_t *text = json_object_get(it, "text"), *name = json_object_get(it, "filename");
		char p[48];
		snprintf(p, sizeof p, "input_extra[%zu]", k);
		if (!json_is_object(it) || !json_is_string(text) || (name && !json_is_null(name) && !json_is_string(name))) {
			free(f);
			return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s must be {\"filename\": string, \"text\": string} (filename optional)", p);
		}
		f[k].text = json_string_value(text), f[k].text_len = json_string_length(text);
		if (json_is_string(name)) f[k].filename = json_string_value(name), f[k].filename_len = json_string_length(name);
	}
	*out = f, *n = json_array_size(x);
	return 0;
}

// max_tokens (n_predict, read after it, wins) and repeat_last_n (-1: the whole context, 0: no penalty).
static int inf_options(inf_req *r, srv_err *e) {
	if (r->max_tokens) {
		const json_int_t m = json_is_integer(r->max_tokens) ? json_integer_value(r->max_tokens) : 0;
		if (m < 1 || m > INT32_MAX) return srv_fail(e, SRV_E_BAD_REQUEST, "max_tokens", "max_tokens must be an integer of at least 1");
		r->g.lr.max_tokens = (int32_t)m;
	}
	const json_t *rl = r->repeat_last_n;
	const json_int_t last = json_is_integer(rl) ? json_integer_value(rl) : 64; // llama-server's default
	if ((rl && !json_is_integer(rl)) || last < -1 || last > INT32_MAX)
		return srv_fail(e, SRV_E_BAD_REQUEST, "repeat_last_n", "repeat_last_n must be an integer of -1 or more");
	if (last == 0) r->g.lr.sampling.repeat_penalty = 1.0f;
	r->g.lr.sampling.repeat_last_n = last > 0 ? (int32_t)last : 0;
	return 0;
}

// A grammar or a JSON Schema (llama-server's) into the request's grammar.
static int inf_constrain(inf_req *r, srv_err *e) {
	if (r->grammar && r->json_schema) return srv_fail(e, SRV_E_BAD_REQUEST, "grammar", "send one of json_schema and grammar");
	if (r->grammar && *r->grammar) return srv_grammar_text(&r->g, r->grammar, strlen(r->grammar), "grammar", e);
	if (r->json_schema) return srv_grammar_schema(&r->g, r->json_schema, "json_schema", e);
	return 0;
}

// prompt as ids: token ids and strings (tokenized with special tokens parsed, as llama-server's
// mixed prompts are) in order, or a one-element array of such; *out malloc'd, *n of them.
static int inf_middle_ids(srv_model *M, json_t *p, int32_t **out, size_t *n, srv_err *e) {
	*out = NULL, *n = 0;
	if (json_array_size(p) == 1 && json_is_array(json_array_get(p, 0))) p = json_array_get(p, 0);
	size_t k, cap = 0;
	json_t *v;
	char err[256], at[48];
	int rc = 0;
	json_array_foreach(p, k, v) {
		snprintf(at, sizeof at, "prompt[%zu]", k);
		int32_t one, *ids = &one;
		size_t m = 1;
		if (json_is_string(v)) {
			if ((rc = tok_encode(M->vocab, json_string_value(v), json_string_length(v), false, true, &ids, &m, err, sizeof err))) {
				srv_fail(e, srv_kind_of(rc, SRV_BLAME_REQUEST), at, "%s: %s", at, err);
				break;
			}
		} else if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < M->n_vocab) {
			one = (int32_t)json_integer_value(v);
		} else {
			rc = srv_fail(e, SRV_E_BAD_REQUEST, at, "%s must be a token id in 0..%d or a string", at, M->n_vocab - 1);
			break;
		}
		if (!m) { // an empty string adds nothing
			if (ids != &one) free(ids);
			continue;
		}
		int32_t *q = *out;
		if (*n + m > cap) {
			cap = (*n + m) * 2;
			q = cap <= (size_t)INT32_MAX ? realloc(*out, cap * sizeof *q) : NULL;
		}
		if (q) *out = q, memcpy(*out + *n, ids, m * sizeof *ids), *n += m;
		if (ids != &one) free(ids);
		if (!q) {
			rc = srv_fail(e, SRV_E_BAD_REQUEST, "prompt", "the prompt is too long");
			break;
		}
	}
	if (rc) free(*out), *out = NULL, *n = 0;
	return rc;
}

// The prompt in the vocabulary's fill-in-the-middle form; a model without the tokens is a 400.
static int inf_prompt(srv_model *M, inf_req *r, srv_err *e) {
	chat_fim f = {.repo = true};
	if (inf_extra(r->input_extra, (chat_fim_file **)&f.extra, &f.n_extra, e)) return -1;
	f.prefix = r->input_prefix, f.prefix_len = r->input_prefix ? strlen(r->input_prefix) : 0;
	f.suffix = r->input_suffix, f.suffix_len = r->input_suffix ? strlen(r->input_suffix) : 0;
	int32_t *mid = NULL;
	if (json_is_string(r->prompt)) {
		f.middle = json_string_value(r->prompt), f.middle_len = json_string_length(r->prompt);
	} else if (json_is_array(r->prompt)) {
		if (inf_middle_ids(M, r->prompt, &mid, &f.n_middle_ids, e)) {
			free((void *)f.extra);
			return -1;
		}
		f.middle_ids = mid;
	} else if (r->prompt && !json_is_null(r->prompt)) {
		free((void *)f.extra);
		return srv_fail(e, SRV_E_BAD_REQUEST, "prompt", "prompt must be a string, or an array of token ids and strings");
	}
	size_t bytes = f.prefix_len + f.suffix_len + f.middle_len;
	for (size_t k = 0; k < f.n_extra; k++) bytes += f.extra[k].text_len + f.extra[k].filename_len;
	char err[256];
	int rc = lane_check_prompt_size(M->host, 0, bytes, &r->g.api, err, sizeof err, NULL);
	if (rc) {
		srv_fail(e, SRV_E_BAD_REQUEST, "input_prefix", "%s", err);
		snprintf(e->code, sizeof e->code, "context_length_exceeded");
	}
	size_t n = 0;
	if (!rc && (rc = chat_fim_prompt(M->vocab, &f, &r->g.prompt, &n, err, sizeof err)))
		srv_fail(e, srv_kind_of(rc, SRV_BLAME_REQUEST), rc == LANES_EUNSUPPORTED ? NULL : "input_prefix", "%s", err);
	free((void *)f.extra);
	free(mid);
	if (rc) return -1;
	r->g.lr.n_prompt = (int32_t)n;
	return 0;
}

void srv_infill(srv_conn *c) {
	srv_model *M = c->mdl;
	srv_err e;
	inf_req *r = calloc(1, sizeof *r);
	if (!r) {
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		srv_reply_error(c, &e);
		return;
	}
	srv_gen_init(&r->g, &inf_api, c);
	// llama-server's sampling defaults
	r->g.lr.sampling.temperature = 0.8f;
	r->g.lr.sampling.top_k = 40;
	r->g.lr.sampling.top_p = 0.95f;
	r->g.lr.sampling.min_p = 0.05f;
	int rc = srv_parse_body(c, &r->j, &e) || srv_fields_known(r->j, inf_fields, NULL, &e) ||
		 srv_fields_read(r->j, inf_fields, r, NULL, &r->g.api, c, &e) || inf_options(r, &e) || srv_gen_check(M, &r->g, &e) ||
		 inf_constrain(r, &e) || inf_prompt(M, r, &e);
	if (rc) {
		srv_gen_free(&r->g);
		inf_free(r);
		srv_reply_error(c, &e);
		return;
	}
	srv_gen g = r->g;
	memset(&r->g, 0, sizeof r->g);
	srv_gen_run(c, &inf_srv_api, r, &g, "infill-");
}
