// server/gen/gen: the generation call every API shares — the request as read, checked
// against the request contract (lane_check_params, lane_check_prompt), the chat prompt;
// then one lane request per choice, and the reply or the SSE stream. While a call waits its
// connection is suspended: the engine's notify resumes it (a stream at each token, a reply
// at its end), and one waker thread watches the clients' sockets (a reset cancels at once;
// a half-close is probed) and the streams' keep-alive timers.
#include "server/gen/gen.h"
#include "grammar/grammar.h"
#include "model/loras.h"
#include "sample/sample.h"
#include "server/grid/grid.h"

#include <math.h>

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

// ---- the request as read --------------------------------------------------------------------

// A row whose JSON key is the name of its lane_sampling member, bounded as field LANE_F_f.
#define SAMPLING_ROW(member, kind, f) {#member, SRV_K_##kind, LANE_F_##f, offsetof(srv_gen, lr.sampling.member), .sub = NULL}

const srv_field srv_gen_fields[] = {
	SRV_ROW(srv_gen, model, SRV_K_STR),
	SAMPLING_ROW(top_k, INT, TOP_K), SAMPLING_ROW(min_p, NUM, MIN_P), SAMPLING_ROW(typical_p, NUM, TYPICAL_P),
	{"seed", SRV_K_SEED, .off = offsetof(srv_gen, lr.sampling)},
	SRV_ROW(srv_gen, stream, SRV_K_BOOL),
	{"draft", SRV_K_BOOL, .off = offsetof(srv_gen, lr.draft)},
	{"ignore_eos", SRV_K_BOOL, .off = offsetof(srv_gen, lr.ignore_eos)},
	// llama-server's samplers, by its names
	SAMPLING_ROW(dry_multiplier, NUM, DRY_MULTIPLIER), SAMPLING_ROW(dry_base, NUM, DRY_BASE),
	SAMPLING_ROW(dry_allowed_length, INT, DRY_ALLOWED_LENGTH), SAMPLING_ROW(dry_penalty_last_n, INT, DRY_PENALTY_LAST_N),
	{"dry_sequence_breakers", SRV_K_JSON, .off = offsetof(srv_gen, dry_breakers_sent)},
	SAMPLING_ROW(xtc_probability, NUM, XTC_PROBABILITY), SAMPLING_ROW(xtc_threshold, NUM, XTC_THRESHOLD),
	SAMPLING_ROW(top_n_sigma, NUM, TOP_N_SIGMA), SAMPLING_ROW(dynatemp_range, NUM, DYNATEMP_RANGE),
	SAMPLING_ROW(dynatemp_exponent, NUM, DYNATEMP_EXPONENT), SAMPLING_ROW(mirostat, INT, MIROSTAT),
	SAMPLING_ROW(mirostat_tau, NUM, MIROSTAT_TAU), SAMPLING_ROW(mirostat_eta, NUM, MIROSTAT_ETA),
	{"samplers", SRV_K_JSON, .off = offsetof(srv_gen, samplers_sent)},
	// what other servers' clients send: aliases with the same meaning, template variables
	{"repetition_penalty", SRV_K_NUM, LANE_F_REPEAT_PENALTY, offsetof(srv_gen, lr.sampling.repeat_penalty), .sub = NULL},
	{"n_predict", SRV_K_JSON, .off = offsetof(srv_gen, n_predict)},
	{"chat_template_kwargs", SRV_K_JSON, .off = offsetof(srv_gen, template_kwargs)},
	{"reasoning_effort", SRV_K_STR, .off = offsetof(srv_gen, reasoning_effort)},
	{"thinking_budget", SRV_K_JSON, .off = offsetof(srv_gen, thinking_budget)},
	{"lora", SRV_K_JSON, .off = offsetof(srv_gen, lora)},
	{"metadata", SRV_K_JSON, .off = offsetof(srv_gen, metadata)},
	// what lanes does not do as asked: the prefix cache works without a key, and no identity is kept
	SRV_NAMED_AS("prompt_cache_key", STR),
	SRV_NAMED_AS("prompt_cache_retention", STR),
	SRV_NAMED_AS("prompt_cache_options", OBJECT),
	SRV_NAMED_AS("safety_identifier", STR),
	SRV_NAMED_AS("cache_prompt", BOOL),
	SRV_NAMED_AS("id_slot", INT),
	{0},
};

void srv_gen_init(srv_gen *g, const lane_api *api, srv_conn *conn) {
	memset(g, 0, sizeof *g);
	g->conn = conn;
	lane_request_init(&g->lr); // "draft": false turns drafting off; --draft off for every request
	if (conn && conn->s) g->lr.sampling = conn->s->cfg.sampling; // the server's samplers, before the request's own
	g->api = *api;
	g->n = 1;
	g->think_budget = -1;
	g->n_dry_breakers = -1;
}

void srv_gen_free(srv_gen *g) {
	free(g->prompt);
	free(g->bias.p);
	for (int i = 0; g->prompts && i < g->n; i++) free(g->prompts[i]);
	free(g->prompts);
	free(g->n_prompts);
	grammar_unref(g->grammar);
	json_decref(g->tools);
	json_decref(g->format);
	for (int32_t i = 0; i < g->lora_set.n; i++) model_lora_free(g->lora_set.use[i].lora);
	g->lora_set.n = 0;
	g->grammar = NULL;
	g->tools = NULL;
	g->format = NULL;
	g->prompt = NULL;
	g->bias.p = NULL;
	g->prompts = NULL;
	g->n_prompts = NULL;
}

// Points g's request at g's own storage: again whenever g has been copied.
static void gen_wire(srv_gen *g) {
	g->lr.api = &g->api;
	g->lr.prompt = g->prompt;
	g->lr.stop_strs = g->stops.s;
	g->lr.n_stop_strs = g->stops.n;
	g->lr.sampling.bias = g->bias.p;
	g->lr.sampling.n_bias = g->bias.n;
	g->lr.grammar = g->grammar;
	g->lr.grammar_triggers = g->triggers;
	g->lr.n_grammar_triggers = g->n_triggers;
	g->lr.lora = g->lora_set.n ? &g->lora_set : NULL;
	g->lr.think = g->reasoning ? &g->lthink : NULL;
	if (g->n_dry_breakers >= 0) {
		g->lr.sampling.dry_breakers = g->dry_breakers;
		g->lr.sampling.n_dry_breakers = g->n_dry_breakers;
	}
}

// dry_sequence_breakers (an array of strings) and samplers (an array of llama-server's names,
// or a string of its letters) as sent, into g's request.
static int gen_samplers(srv_gen *g, srv_err *e) {
	char err[256];
	const json_t *b = g->dry_breakers_sent, *o = g->samplers_sent;
	if (b) {
		const char *name = lane_api_name(&g->api, LANE_F_DRY_SEQUENCE_BREAKERS);
		if (!json_is_array(b)) return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s must be an array of strings", name);
		if (lane_check_value(&g->api, LANE_F_DRY_SEQUENCE_BREAKERS, (double)json_array_size(b), err, sizeof err))
			return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s", err);
		size_t i;
		json_t *x;
		g->n_dry_breakers = 0;
		json_array_foreach(b, i, x) {
			if (!json_is_string(x)) return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s[%zu] must be a string", name, i);
			g->dry_breakers[g->n_dry_breakers++] = json_string_value(x);
		}
	}
	if (!o) return 0;
	const char *name = lane_api_name(&g->api, LANE_F_SAMPLERS);
	lane_sampling *sp = &g->lr.sampling;
	const size_t n = json_is_array(o) ? json_array_size(o) : json_is_string(o) ? json_string_length(o) : 0;
	if (!json_is_array(o) && !json_is_string(o))
		return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s must be an array of sampler names or a string of their letters", name);
	if (lane_check_value(&g->api, LANE_F_SAMPLERS, (double)n, err, sizeof err)) return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s", err);
	// an empty order would read as the default one, not as "no samplers"
	if (!n) return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s is empty: name at least one sampler, or leave it out for the default order", name);
	for (size_t i = 0; i < n; i++) {
		const json_t *x = json_is_array(o) ? json_array_get(o, i) : NULL;
		const char *s = json_is_string(o) ? json_string_value(o) : json_string_value(x);
		const int st = json_is_string(o) ? sample_stage_letter(s[i]) : s ? sample_stage_named(s) : -1;
		if (st < 0 && json_is_string(o))
			return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s: '%c' is not a sampler's letter (e d s k y p m x t)", name, s[i]);
		if (st < 0)
			return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s[%zu] is not a sampler's name (penalties, dry, top_n_sigma, top_k, typ_p, "
				"top_p, min_p, xtc, temperature)", name, i);
		sp->samplers[i] = (uint8_t)st;
	}
	sp->n_samplers = (int32_t)n;
	return 0;
}

// Appends adapter a (a reference the set takes over) at scale to g's set; a scale of 0 turns it
// off, as in llama-server, so it is dropped.
static int set_add(srv_gen *g, const model_lora *a, float scale, const char *name, const char *param, srv_err *e) {
	model_lora_set *set = &g->lora_set;
	for (int32_t i = 0; i < set->n; i++)
		if (set->use[i].lora == a) {
			model_lora_free(a);
			return srv_fail(e, SRV_E_BAD_REQUEST, param, "%s: the adapter '%s' is named twice", param, name);
		}
	if (scale == 0) {
		model_lora_free(a);
		return 0;
	}
	if (set->n == MODEL_LORA_MAX) {
		model_lora_free(a);
		return srv_fail(e, SRV_E_BAD_REQUEST, param, "at most %d adapters per request", MODEL_LORA_MAX);
	}
	set->use[set->n].lora = a;
	set->use[set->n++].scale = scale;
	return 0;
}

static int no_adapter(srv_err *e, const char *param, const char *what) {
	srv_fail(e, SRV_E_NOT_FOUND, param, "%s: no such adapter is loaded (GET /v1/adapters lists them)", what);
	snprintf(e->code, sizeof e->code, "model_not_found");
	return -1;
}

int srv_gen_bind(srv_model *M, srv_gen *g, srv_err *e) {
	struct model_loras *l = srv_loras_of(M); // a model's adapters are its own
	const model_lora *a;
	float scale;
	char name[MODEL_LORA_NAME_MAX + 1];
	if (g->model && l && strcmp(g->model, M->model_id) && !model_loras_bind(l, g->model, 0, &a, &scale, name)) {
		if (set_add(g, a, scale, name, "model", e)) return -1;
		memcpy(g->model_name, name, sizeof g->model_name);
	}
	if (!g->lora) return 0;
	if (!json_is_array(g->lora))
		return srv_fail(e, SRV_E_BAD_REQUEST, "lora", "lora must be an array of {\"name\" or \"id\", \"scale\"}");
	size_t i;
	json_t *it;
	json_array_foreach(g->lora, i, it) {
		char p[32], what[96];
		snprintf(p, sizeof p, "lora[%zu]", i);
		json_t *nm = json_object_get(it, "name"), *id = json_object_get(it, "id"), *sc = json_object_get(it, "scale");
		const char *k;
		json_t *v;
		json_object_foreach(it, k, v)
			if (strcmp(k, "name") && strcmp(k, "id") && strcmp(k, "scale"))
				return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.%s: unknown field (an entry is {\"name\" or \"id\", \"scale\"})", p, k);
		if (!json_is_object(it) || !nm == !id || (nm && !json_is_string(nm)) || (id && !json_is_integer(id)))
			return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s must be {\"name\": string} or {\"id\": integer}, with an optional \"scale\"", p);
		if (sc && (!json_is_number(sc) || !(fabs(json_number_value(sc)) <= MODEL_LORA_SCALE_MAX)))
			return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.scale must be a number between -%d and %d", p, MODEL_LORA_SCALE_MAX,
					MODEL_LORA_SCALE_MAX);
		if (nm) snprintf(what, sizeof what, "%s: '%.64s'", p, json_string_value(nm));
		else snprintf(what, sizeof what, "%s: id %lld", p, (long long)json_integer_value(id));
		if (!l || model_loras_bind(l, nm ? json_string_value(nm) : NULL, id ? json_integer_value(id) : -1, &a, &scale, name))
			return no_adapter(e, p, what);
		if (set_add(g, a, sc ? (float)json_number_value(sc) : scale, name, p, e)) return -1;
	}
	return 0;
}

// metadata: an object; its "domain", when set, the request's domain for the expert observer.
// Its other labels are kept nowhere: named.
static int srv_gen_domain(srv_gen *g, srv_err *e) {
	if (!g->metadata) return 0;
	if (!json_is_object(g->metadata)) return srv_fail(e, SRV_E_BAD_REQUEST, "metadata", "metadata must be an object");
	json_t *d = json_object_get(g->metadata, "domain");
	if (json_object_size(g->metadata) > (d ? 1u : 0u)) srv_ignored_add(g->conn, "metadata");
	if (!d || json_is_null(d)) return 0;
	char err[160];
	if (!json_is_string(d) || lane_check_domain(json_string_value(d), err, sizeof err))
		return srv_fail(e, SRV_E_BAD_REQUEST, "metadata.domain", "metadata.domain: %s", json_is_string(d) ? err : "must be a string");
	g->lr.domain = json_string_value(d);
	return 0;
}

int srv_gen_check(srv_model *M, srv_gen *g, srv_err *e) {
	http_server *s = M->s;
	if (srv_check_model(s, g->model, e) || srv_gen_bind(M, g, e)) return -1;
	if (g->template_kwargs && !json_is_object(g->template_kwargs))
		return srv_fail(e, SRV_E_BAD_REQUEST, "chat_template_kwargs", "chat_template_kwargs must be an object");
	if (g->template_kwargs && json_object_get(g->template_kwargs, "messages"))
		return srv_fail(e, SRV_E_BAD_REQUEST, "chat_template_kwargs", "chat_template_kwargs may not set messages");
	if (srv_gen_domain(g, e)) return -1;
	if (g->reasoning_effort && srv_think_effort(g, g->reasoning_effort, "reasoning_effort", e)) return -1;
	if (g->thinking_budget) {
		const json_int_t b = json_is_integer(g->thinking_budget) ? json_integer_value(g->thinking_budget) : -2;
		if (b < 0 || b > INT32_MAX)
			return srv_fail(e, SRV_E_BAD_REQUEST, "thinking_budget", "thinking_budget must be an integer of at least 0 (thinking tokens)");
		g->think_budget = (int32_t)b;
		if (g->think == SRV_THINK_DEFAULT) g->think = SRV_THINK_ON;
	}
	if (g->n_predict) {
		const json_int_t np = json_is_integer(g->n_predict) ? json_integer_value(g->n_predict) : 0;
		if (!json_is_integer(g->n_predict) || np == 0 || np < -1 || np > INT32_MAX)
			return srv_fail(e, SRV_E_BAD_REQUEST, "n_predict", "n_predict must be -1 (no limit) or an integer of at least 1");
		g->lr.max_tokens = np > 0 ? (int32_t)np : 0;
	}
	// a request that sets no limit gets the server's (--max-tokens); the window caps both
	if (!g->lr.max_tokens && s->cfg.max_tokens > 0) g->lr.max_tokens = s->cfg.max_tokens;
	if (gen_samplers(g, e)) return -1;
	gen_wire(g);
	char err[256];
	enum lane_field bad = LANE_F_COUNT;
	if (lane_check_params(&g->lr, &g->api, M->n_vocab, err, sizeof err, &bad))
		return srv_fail(e, SRV_E_BAD_REQUEST, bad < LANE_F_COUNT ? lane_api_name(&g->api, bad) : NULL, "%s", err);
	const int64_t entries = g->stream ? 0 : lane_output_entries(&g->lr, g->n, M->max_ctx);
	if (entries > (int64_t)(s->cfg.max_output_bytes / SRV_LOGPROB_BYTES))
		return srv_fail(e, SRV_E_BAD_REQUEST, lane_api_name(&g->api, LANE_F_MAX_TOKENS),
				"n (%d) x %s (%d) x (1 + top_logprobs %d) log-probability entries could take %lld bytes, more than "
				"a reply may hold (%zu, %s): lower one of them, or stream",
				g->n, lane_api_name(&g->api, LANE_F_MAX_TOKENS), g->lr.max_tokens > 0 ? g->lr.max_tokens : M->max_ctx,
				g->lr.top_logprobs, (long long)entries * SRV_LOGPROB_BYTES, s->cfg.max_output_bytes,
				HTTP_SETTING(&s->cfg, max_output_bytes));
	return 0;
}

// ---- chat prompts ---------------------------------------------------------------------------

// One OpenAI chat message as read.
typedef struct {
	json_t *role, *content, *tool_calls;
	const char *tool_call_id;
} oai_msg;

static const srv_field oai_msg_fields[] = {
	SRV_ROW(oai_msg, role, SRV_K_JSON),
	SRV_ROW(oai_msg, content, SRV_K_JSON),
	SRV_IGNORED("name"),
	SRV_IGNORED("refusal"),
	SRV_ROW(oai_msg, tool_calls, SRV_K_JSON),
	SRV_ROW(oai_msg, tool_call_id, SRV_K_STR),
	{0},
};

// An assistant turn's tool_calls, checked and copied as [{id, type, function: {name, arguments}}].
static int oai_tool_calls(json_t *calls, const char *p, json_t **out, srv_err *e) {
	*out = NULL;
	if (!json_is_array(calls)) return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s must be an array", p);
	json_t *copy = json_array();
	size_t k;
	json_t *tc;
	json_array_foreach(calls, k, tc) {
		char pk[128];
		snprintf(pk, sizeof pk, "%s[%zu]", p, k);
		json_t *id = json_object_get(tc, "id"), *ty = json_object_get(tc, "type"), *fn = json_object_get(tc, "function");
		json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
		const char *bad = !json_is_object(tc)                                   ? ""
				  : !json_is_string(id)                                 ? ".id"
				  : ty && !(json_is_string(ty) && !strcmp(json_string_value(ty), "function")) ? ".type"
				  : !json_is_object(fn)                                 ? ".function"
				  : !json_is_string(name)                               ? ".function.name"
				  : !json_is_string(args)                               ? ".function.arguments"
										        : NULL;
		if (bad) {
			json_decref(copy);
			return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s%s is missing or not valid (a tool call is {id, type: \"function\", "
					"function: {name, arguments: JSON text}})", pk, bad);
		}
		if (!copy || json_array_append_new(copy, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type", "function", "function",
								   "name", name, "arguments", args))) {
			json_decref(copy);
			return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
		}
	}
	*out = copy;
	return 0;
}

int srv_openai_messages(json_t *msgs, srv_conn *c, json_t **out, srv_err *e) {
	static const char *const part_types[] = {"text", NULL};
	*out = NULL;
	if (!json_is_array(msgs) || !json_array_size(msgs))
		return srv_fail(e, SRV_E_BAD_REQUEST, "messages", "messages must be a non-empty array");
	json_t *flat = json_array();
	if (!flat) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	size_t i;
	json_t *m;
	json_array_foreach(msgs, i, m) {
		char p[64];
		snprintf(p, sizeof p, "messages[%zu]", i);
		if (!json_is_object(m)) {
			json_decref(flat);
			return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s must be an object", p);
		}
		oai_msg r = {0};
		if (srv_fields_known(m, oai_msg_fields, p, e) || srv_fields_read(m, oai_msg_fields, &r, p, NULL, c, e)) goto fail;
		const char *role = json_string_value(r.role);
		char pr[80];
		snprintf(pr, sizeof pr, "%s.role", p);
		if (!role) {
			srv_fail(e, SRV_E_BAD_REQUEST, pr, "%s must be a string", pr);
			goto fail;
		}
		if (!strcmp(role, "developer")) role = "system";
		if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "tool")) {
			srv_fail(e, SRV_E_BAD_REQUEST, pr, "%s '%s' is not supported: system, developer, user, assistant or tool", pr, role);
			goto fail;
		}
		const bool tool = !strcmp(role, "tool"), assistant = !strcmp(role, "assistant");
		char pc[80], pt[80], *text = NULL;
		snprintf(pc, sizeof pc, "%s.content", p);
		snprintf(pt, sizeof pt, "%s.tool_calls", p);
		json_t *calls = NULL;
		if (r.tool_calls && !assistant) {
			srv_fail(e, SRV_E_BAD_REQUEST, pt, "%s: only assistant turns make tool calls", pt);
			goto fail;
		}
		if (r.tool_call_id && !tool) {
			srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.tool_call_id: only tool turns answer a tool call", p);
			goto fail;
		}
		if (tool && !r.tool_call_id) {
			srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.tool_call_id is required in a tool turn", p);
			goto fail;
		}
		if (!r.content && !assistant) {
			srv_fail(e, SRV_E_BAD_REQUEST, pc, "%s is required", pc);
			goto fail;
		}
		if (r.tool_calls && json_array_size(r.tool_calls) && oai_tool_calls(r.tool_calls, pt, &calls, e)) goto fail;
		if (r.tool_calls && !json_is_array(r.tool_calls)) {
			srv_fail(e, SRV_E_BAD_REQUEST, pt, "%s must be an array", pt);
			goto fail;
		}
		if (srv_content_text(r.content, pc, part_types, c, &text, e)) {
			json_decref(calls);
			goto fail;
		}
		json_t *o = json_pack("{s:s, s:s}", "role", role, "content", text);
		free(text);
		if (o && calls) json_object_set_new(o, "tool_calls", calls);
		else json_decref(calls);
		if (o && tool) json_object_set_new(o, "tool_call_id", json_string(r.tool_call_id));
		if (!o || json_array_append_new(flat, o)) {
			srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
			goto fail;
		}
	}
	*out = flat;
	return 0;
fail:
	json_decref(flat);
	return -1;
}

// A prompt refused before it was tokenized: it cannot fit the context.
static int too_long(srv_err *e, const char *param, const char *msg) {
	srv_fail(e, SRV_E_BAD_REQUEST, param, "%s", msg);
	snprintf(e->code, sizeof e->code, "context_length_exceeded");
	return -1;
}

int srv_check_parts(srv_model *M, json_t *parts, const char *param, srv_err *e) {
	const lane_api api = {.name = {[LANE_F_PROMPT] = param}};
	char err[256];
	if (!json_is_array(parts) || !lane_check_prompt_size(M->host, json_array_size(parts), 0, &api, err, sizeof err, NULL)) return 0;
	return too_long(e, param, err);
}

// The rendered prompt against the context: refused before it is tokenized.
static int fits(const srv_model *M, size_t bytes, char *err, size_t errlen) {
	static const lane_api msgs = {.name = {[LANE_F_PROMPT] = "the rendered messages"}};
	return lane_check_prompt_size(M->host, 0, bytes, &msgs, err, errlen, NULL);
}

// Whether the template renders a system turn that comes after the conversation began, probed
// once: many raise an error there, some drop it.
static bool system_turns(srv_model *M) {
	const int known = atomic_load(&M->system_turns);
	if (known) return known > 0;
	static const char mark[] = "lanes-system-turn-probe";
	json_t *m = json_pack("[{s:s, s:s}, {s:s, s:s}, {s:s, s:s}, {s:s, s:s}, {s:s, s:s}]", "role", "system", "content", "s",
			      "role", "user", "content", "u", "role", "assistant", "content", "a", "role", "system", "content", mark,
			      "role", "user", "content", "u");
	const chat_input in = {.messages = m, .add_generation_prompt = true};
	char *text = NULL, err[256];
	size_t len = 0;
	const bool yes = m && !chat_render(&M->chat, &in, &text, &len, NULL, err, sizeof err) && memmem(text, len, mark, sizeof mark - 1);
	free(text);
	json_decref(m);
	atomic_store(&M->system_turns, yes ? 1 : -1);
	return yes;
}

static bool is_system(const json_t *m) {
	const char *r = json_string_value(json_object_get(m, "role"));
	return r && !strcmp(r, "system");
}

// messages with every system turn after the first other turn joined, in order, to the leading
// system prompt (one made when there is none); NULL when there is none such (or out of memory).
static json_t *join_system(const json_t *messages) {
	size_t lead = 0, late = 0, i;
	const json_t *m;
	while (lead < json_array_size(messages) && is_system(json_array_get(messages, lead))) lead++;
	json_array_foreach(messages, i, m) late += i >= lead && is_system(m);
	if (!late) return NULL;
	srv_buf sys = {0};
	json_array_foreach(messages, i, m) {
		const char *t = is_system(m) ? json_string_value(json_object_get(m, "content")) : NULL;
		if (!t) continue;
		if (sys.len) srv_buf_adds(&sys, "\n\n");
		srv_buf_adds(&sys, t);
	}
	json_t *out = json_array();
	if (out && !sys.oom) json_array_append_new(out, json_pack("{s:s, s:s%}", "role", "system", "content", sys.p ? sys.p : "", sys.len));
	json_array_foreach(messages, i, m)
		if (!is_system(m)) json_array_append(out, (json_t *)m);
	const bool ok = out && !sys.oom && json_array_size(out) == json_array_size(messages) - lead - late + 1;
	srv_buf_free(&sys);
	if (!ok) json_decref(out);
	return ok ? out : NULL;
}

int srv_chat_prompt(srv_model *M, json_t *messages, const char *prefill, const char *param, srv_gen *g,
		    int32_t **ids, int32_t *n, srv_err *e) {
	*ids = NULL;
	*n = 0;
	char err[512];
	if (srv_check_parts(M, messages, param, e)) return -1;
	json_t *joined = NULL;
	if (json_array_size(messages) > 1 && !system_turns(M) && (joined = join_system(messages))) messages = joined;
	// thinking off: the template's own switch, where it has one and the client did not set it
	json_t *kw = g ? g->template_kwargs : NULL, *kwo = NULL;
	const reason_format *rf = M->reason;
	if (g && rf && rf->off_var && json_is_false(json_object_get(kw, rf->off_var))) g->think = SRV_THINK_OFF;
	if (g && g->think == SRV_THINK_OFF && M->reason_switch && !json_object_get(kw, rf->off_var)) {
		kwo = kw ? json_copy(kw) : json_object();
		if (kwo) json_object_set_new(kwo, rf->off_var, json_false());
		kw = kwo;
	}
	const chat_input in = {.messages = messages, .tools = g ? g->tools : NULL, .kwargs = kw,
			       .reasoning_effort = g ? g->reasoning_effort : NULL, .prefill = prefill, .add_generation_prompt = true};
	int32_t *v = NULL;
	size_t cnt = 0;
	enum chat_fault fault = CHAT_F_NONE;
	char *text = NULL;
	size_t len = 0;
	int rc = chat_render(&M->chat, &in, &text, &len, &fault, err, sizeof err);
	json_decref(kwo);
	if (!rc && g && !srv_think_prompt(M, g, prefill && *prefill, &text, &len)) rc = base_seterr(err, sizeof err, LANES_ENOMEM, "out of memory");
	if (!rc && (rc = fits(M, len, err, sizeof err))) fault = CHAT_F_SIZE;
	if (!rc && (rc = tok_encode_chat(M->vocab, text, len, &v, &cnt, err, sizeof err))) fault = CHAT_F_MESSAGES;
	free(text);
	json_decref(joined);
	if (rc == LANES_ENOMEM) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	if (rc && fault == CHAT_F_SIZE) return too_long(e, param, err);
	if (rc) return srv_fail(e, SRV_E_BAD_REQUEST, fault == CHAT_F_TOOLS ? "tools" : param, "%s", err);
	if (cnt > (size_t)INT32_MAX / 2) {
		free(v);
		return srv_fail(e, SRV_E_BAD_REQUEST, param, "the prompt is too long");
	}
	*ids = v;
	*n = (int32_t)cnt;
	return 0;
}

// ---- wake-up slots and the waker --------------------------------------------------------------

#define KEEPALIVE_US 15000000   // a stream with nothing to say sends a comment this often
#define TICK_MS 100             // how often deadlines and stream keep-alives are looked at

static uint64_t wake_key(int slot, uint32_t gen) { return (uint64_t)(uint32_t)slot | (uint64_t)(gen & 0x7fffffffu) << 32; }

// Takes a free slot for c and watches c's socket from the waker; -1 when none is free.
static int slot_get(http_server *s, srv_call *c) {
	int got = -1;
	pthread_mutex_lock(&s->slot_mu);
	for (int i = 0; i < s->n_slots && got < 0; i++)
		if (!s->slots[i].used) {
			srv_slot *sl = &s->slots[i];
			sl->used = true;
			sl->gen++;
			sl->call = c;
			got = i;
			if (c->sock >= 0) {
				struct epoll_event ev = {.events = EPOLLRDHUP, .data.u64 = wake_key(i, sl->gen)};
				if (epoll_ctl(s->waker_ep, EPOLL_CTL_ADD, c->sock, &ev)) c->sock = -1;
			}
		}
	pthread_mutex_unlock(&s->slot_mu);
	return got;
}

// ---- held stream tokens: one write for the tokens that come within --stream-flush-ms ----------

#define FLUSH_KEY (UINT64_MAX - 1) // the flush timer's key in the waker's epoll set

// Under slot_mu: sets the flush timer to fire at `at` (0: disarms it); false if it could not.
static bool flush_arm(http_server *s, uint64_t at) {
	struct itimerspec its = {{0, 0}, {(time_t)(at / 1000000), (long)(at % 1000000) * 1000}};
	if (timerfd_settime(s->flush_fd, TFD_TIMER_ABSTIME, &its, NULL)) return false;
	s->flush_timer_at = at;
	return true;
}

// Under slot_mu: c's held tokens go out with the wake-up being made.
static void flush_release(http_server *s, srv_call *c) {
	if (!c->flush_at_us) return;
	c->flush_at_us = 0;
	if (--s->n_held == 0 && s->flush_timer_at) flush_arm(s, 0);
}

// Under slot_mu: a stream's token event that came before flush_after_us waits for the ones
// after it (true), so a fast stream costs a write per interval, not per token. The first token
// after flush_after_us takes them all; the timer sends them if none comes within the interval.
static bool flush_hold(http_server *s, srv_call *c) {
	const uint64_t now = base_now_us();
	if (s->flush_fd < 0 || !c->flush_after_us || now >= c->flush_after_us) return false;
	if (!c->flush_at_us) {
		const uint64_t at = now + s->cfg.stream_flush_us;
		// nothing is held that the timer could not send
		if ((!s->flush_timer_at || at < s->flush_timer_at) && !flush_arm(s, at)) return false;
		c->flush_at_us = at;
		s->n_held++;
	}
	return true;
}

static void call_wake(srv_call *c);

// The waker, when the flush timer fires: resumes the calls whose tokens are due, then sets the
// timer for the next.
static void flush_due(http_server *s) {
	uint64_t n;
	ssize_t r = read(s->flush_fd, &n, sizeof n);
	(void)r;
	pthread_mutex_lock(&s->slot_mu);
	s->flush_timer_at = 0; // a one-shot: it fired
	const uint64_t now = base_now_us();
	uint64_t next = 0;
	for (int i = 0; i < s->n_slots && s->n_held > 0; i++) {
		srv_call *c = s->slots[i].used ? s->slots[i].call : NULL;
		if (!c || !c->flush_at_us) continue;
		if (c->flush_at_us <= now) call_wake(c);
		else if (!next || c->flush_at_us < next) next = c->flush_at_us;
	}
	// a timer that cannot be set sends what is held now
	if (next && !flush_arm(s, next))
		for (int i = 0; i < s->n_slots; i++) {
			srv_call *c = s->slots[i].used ? s->slots[i].call : NULL;
			if (c && c->flush_at_us) call_wake(c);
		}
	pthread_mutex_unlock(&s->slot_mu);
}

static void slot_put(http_server *s, srv_call *c) {
	if (c->slot < 0) return;
	pthread_mutex_lock(&s->slot_mu);
	flush_release(s, c);
	if (c->sock >= 0) epoll_ctl(s->waker_ep, EPOLL_CTL_DEL, c->sock, NULL);
	s->slots[c->slot].used = false;
	s->slots[c->slot].call = NULL;
	pthread_mutex_unlock(&s->slot_mu);
	c->slot = -1;
}

// Under slot_mu: ends c's wait for the engine, or keeps the wake for its next one.
static void call_wake(srv_call *c) {
	http_server *s = c->s;
	flush_release(s, c);
	c->flush_after_us = c->g.stream && s->cfg.stream_flush_us ? base_now_us() + s->cfg.stream_flush_us : 0;
	c->wake_at_us = 0;
	srv_wake(c->conn, SRV_WAIT_ENGINE);
}

// From the thread that runs the call: parks its connection until an event wakes it (true), or
// returns false at once when a wake came first or the server is stopping.
static bool call_suspend(srv_call *c, uint64_t wake_at_us) {
	http_server *s = c->s;
	pthread_mutex_lock(&s->slot_mu); // the waker's release sets quit under it
	bool ok = !atomic_load(&s->quit);
	if (ok) {
		c->wake_at_us = wake_at_us;
		ok = srv_park(c->conn, SRV_WAIT_ENGINE);
		if (!ok) c->wake_at_us = 0;
	}
	pthread_mutex_unlock(&s->slot_mu);
	return ok;
}

// What a token event adds to a non-streamed reply, as --max-output-bytes counts it.
static size_t event_bytes(const srv_call *c, const lane_event *ev) {
	return ev->text_len + (c->g.lr.logprobs ? (size_t)(1 + ev->n_top) * SRV_LOGPROB_BYTES : 0);
}

// The engine's notify, as it queues an event of one of c's requests: resumes the call. A
// non-streamed call sleeps through its tokens until its end, or until they pass the
// output's bound (where pump fails it), so a reply costs no wake-up per token.
static void call_notify(void *arg, const lane_event *ev) {
	srv_call *c = arg;
	if (!c->g.stream && ev->kind == LANE_EV_TOKEN) {
		c->queued_bytes += event_bytes(c, ev);
		if (c->queued_bytes <= c->s->cfg.max_output_bytes) return;
	}
	pthread_mutex_lock(&c->s->slot_mu);
	if (!(c->g.stream && ev->kind == LANE_EV_TOKEN && flush_hold(c->s, c))) call_wake(c);
	pthread_mutex_unlock(&c->s->slot_mu);
}

// The waker's view of one event on a call's socket.
static void waker_event(http_server *s, const struct epoll_event *ev) {
	const int i = (int)(uint32_t)ev->data.u64;
	if (i < 0 || i >= s->n_slots) return;
	srv_slot *sl = &s->slots[i];
	pthread_mutex_lock(&s->slot_mu);
	srv_call *c = sl->used ? sl->call : NULL;
	if (c && wake_key(i, sl->gen) != ev->data.u64) c = NULL; // a socket of a call gone before
	if (c) {
		if (ev->events & (EPOLLERR | EPOLLHUP)) {
			// a reset or a failed write: the client went away; stop watching the socket
			atomic_store(&c->gone, true);
			epoll_ctl(s->waker_ep, EPOLL_CTL_DEL, c->sock, NULL);
		} else if (ev->events & EPOLLRDHUP) {
			// a half-close may be a client still reading (nc -N): watch for errors only
			atomic_store(&c->hup, true);
			struct epoll_event mod = {.events = 0, .data.u64 = ev->data.u64};
			epoll_ctl(s->waker_ep, EPOLL_CTL_MOD, c->sock, &mod);
		}
	}
	if (c) call_wake(c);
	pthread_mutex_unlock(&s->slot_mu);
}

static void *waker_main(void *arg) {
	http_server *s = arg;
	struct epoll_event evs[64];
	uint64_t next_tick = 0;
	for (;;) {
		int n = epoll_wait(s->waker_ep, evs, 64, TICK_MS);
		if (n < 0 && errno != EINTR) break;
		bool quit = false;
		for (int k = 0; k < n; k++) {
			if (evs[k].data.u64 == UINT64_MAX) quit = true;
			else if (evs[k].data.u64 == FLUSH_KEY) flush_due(s);
			else waker_event(s, &evs[k]);
		}
		if (quit) break;
		const uint64_t now = base_now_us();
		if (now < next_tick) continue;
		next_tick = now + TICK_MS * 1000;
		pthread_mutex_lock(&s->slot_mu);
		for (int i = 0; i < s->n_slots; i++) {
			srv_call *c = s->slots[i].used ? s->slots[i].call : NULL;
			if (c && c->wake_at_us && now >= c->wake_at_us) call_wake(c);
		}
		pthread_mutex_unlock(&s->slot_mu);
	}
	return NULL;
}

int srv_waker_start(http_server *s, char *err, size_t errlen) {
	s->waker_ep = epoll_create1(EPOLL_CLOEXEC);
	s->waker_quit = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->waker_ep < 0 || s->waker_quit < 0) return base_seterr(err, errlen, LANES_EIO, "epoll: %s", strerror(errno));
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
	if (epoll_ctl(s->waker_ep, EPOLL_CTL_ADD, s->waker_quit, &ev)) return base_seterr(err, errlen, LANES_EIO, "epoll_ctl: %s", strerror(errno));
	// without the timer every token goes out at once
	s->flush_fd = s->cfg.stream_flush_us ? timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC) : -1;
	struct epoll_event fev = {.events = EPOLLIN, .data.u64 = FLUSH_KEY};
	if (s->flush_fd >= 0 && epoll_ctl(s->waker_ep, EPOLL_CTL_ADD, s->flush_fd, &fev)) {
		close(s->flush_fd);
		s->flush_fd = -1;
	}
	if (pthread_create(&s->waker, NULL, waker_main, s)) return base_seterr(err, errlen, LANES_ENOMEM, "cannot start the waker thread");
	s->waker_started = true;
	return 0;
}

void srv_waker_release(http_server *s) {
	pthread_mutex_lock(&s->slot_mu);
	atomic_store(&s->quit, true);
	for (int i = 0; s->slots && i < s->n_slots; i++)
		if (s->slots[i].used && s->slots[i].call) call_wake(s->slots[i].call);
	pthread_mutex_unlock(&s->slot_mu);
}

void srv_waker_stop(http_server *s) {
	if (s->waker_started) {
		uint64_t one = 1;
		ssize_t w = write(s->waker_quit, &one, sizeof one);
		(void)w;
		pthread_join(s->waker, NULL);
		s->waker_started = false;
	}
	if (s->waker_ep > 0) close(s->waker_ep);
	if (s->waker_quit > 0) close(s->waker_quit);
	if (s->flush_fd >= 0) close(s->flush_fd);
	s->waker_ep = s->waker_quit = s->flush_fd = -1;
}

// ---- SSE output ---------------------------------------------------------------------------------

void srv_sse_raw(srv_call *c, const char *s) { srv_buf_adds(&c->out, s); }

void srv_sse(srv_call *c, const char *name, json_t *data) { srv_stream_event(c->api->family, &c->out, name, data); }

const char *srv_call_model(const srv_call *c) { return c->g.model_name[0] ? c->g.model_name : c->mdl->model_id; }

bool srv_choice_cut(const srv_choice *ch) { return ch->finish == LANE_FINISH_LENGTH || ch->finish == LANE_FINISH_GRAMMAR; }

void srv_finish_note(json_t *o, const srv_choice *ch) {
	if (o && ch->finish == LANE_FINISH_GRAMMAR) json_object_set_new(o, "lanes_stop_reason", json_string("grammar_dead_end"));
}

int32_t srv_call_generated(const srv_call *c) {
	int32_t n = 0;
	// a choice that never saw its end (cancelled) counts the tokens that reached it
	for (int i = 0; i < c->n; i++) n += c->ch[i].ended ? c->ch[i].n_generated : c->ch[i].n_tokens;
	return n;
}

// ---- events -------------------------------------------------------------------------------------

static void call_cancel(srv_call *c) {
	for (int i = 0; i < c->n; i++)
		if (c->req[i] && !c->ch[i].ended) lane_cancel(c->req[i]);
}

// Takes every event that has arrived; ends the call when all choices finished or one failed.
static void pump(srv_call *c) {
	if (c->over) return;
	http_server *s = c->s;
	lane_event ev;
	for (int i = 0; i < c->n && !c->failed; i++) {
		srv_choice *ch = &c->ch[i];
		while (!ch->ended && !c->failed && lane_next(c->req[i], &ev, 0)) {
			// the engine's time: a reply takes its tokens at the end, when they are long made
			const uint64_t at = ev.t_us;
			if (ev.kind == LANE_EV_TOKEN) {
				if (ch->n_tokens == 0) srv_hist_observe(&s->ttft, (double)(at - c->conn->t0_us) / 1e6, 1), ch->t_first_us = at;
				else srv_hist_observe(&s->itl, (double)(at - ch->t_last_us) / 1e6, 1);
				ch->t_last_us = at;
				ch->n_tokens++;
				srv_choice_text(c, i, ev.text, ev.text_len, &ev, false);
				c->out_bytes += event_bytes(c, &ev);
				if (!c->g.stream && c->out_bytes > s->cfg.max_output_bytes) {
					c->failed = c->too_big = true;
					snprintf(c->fail_reason, sizeof c->fail_reason,
						 "the reply passed the %zu bytes it may hold (%s): lower %s or n, or stream", s->cfg.max_output_bytes,
						 HTTP_SETTING(&s->cfg, max_output_bytes), lane_api_name(&c->g.api, LANE_F_MAX_TOKENS));
				}
				continue;
			}
			ch->ended = true;
			ch->kind = ev.kind;
			ch->finish = ev.finish;
			ch->stop_index = ev.stop_index;
			ch->n_generated = ev.n_generated;
			ch->n_cached = ev.n_cached;
			ch->n_prompt = ev.n_prompt;
			memcpy(ch->token_sha, ev.token_sha, sizeof ch->token_sha);
			if (ev.kind == LANE_EV_FINISHED && ev.embedding) {
				const size_t nf = (size_t)ev.n_embd * (size_t)ev.n_vectors;
				ch->embedding = malloc(nf * sizeof *ch->embedding);
				if (ch->embedding) memcpy(ch->embedding, ev.embedding, nf * sizeof *ch->embedding);
				ch->n_embd = ch->embedding ? ev.n_embd : 0;
				ch->n_vectors = ch->embedding ? ev.n_vectors : 0;
			}
			if (ev.kind == LANE_EV_FINISHED) {
				// what the scan held back is placed now, with the rest of the text
				srv_choice_text(c, i, ev.text, ev.text_len, NULL, true);
				if (c->api->choice_end && c->g.stream) c->api->choice_end(c, i);
			} else {
				c->failed = true;
				snprintf(c->fail_reason, sizeof c->fail_reason, "%s",
					 ev.kind == LANE_EV_FAILED && ev.reason ? ev.reason : "the request was cancelled");
			}
		}
	}
	bool all = true;
	for (int i = 0; i < c->n; i++) all &= c->ch[i].ended;
	if (c->failed) {
		call_cancel(c);
		if (c->g.stream && c->api->fail) c->api->fail(c);
		else if (c->g.stream) srv_stream_error(c->api->family, &c->out, &(srv_stream_seen){0}, c->fail_reason);
		c->over = true;
		c->conn->outcome = "failed";
	} else if (all) {
		if (c->g.stream) c->api->done(c);
		c->over = true;
		c->conn->outcome = "finished";
	}
	c->conn->n_gen = srv_call_generated(c);
}

static void set_timeout(srv_call *c, unsigned seconds) {
	srv_conn_timeout(c->conn, seconds);
}

// The client went away (its socket failed), or the server is stopping.
static bool call_gone(srv_call *c) { return atomic_load(&c->gone) || atomic_load(&c->s->quit); }

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
	srv_call *c = cls;
	(void)pos;
	for (;;) {
		if (c->out.oom) return SRV_STREAM_FAIL;
		if (c->out_off < c->out.len) {
			size_t n = c->out.len - c->out_off;
			if (n > max) n = max;
			memcpy(buf, c->out.p + c->out_off, n);
			c->out_off += n;
			if (c->out_off == c->out.len) c->out_off = c->out.len = 0;
			c->last_out_us = base_now_us();
			return (ssize_t)n;
		}
		if (c->over) {
			set_timeout(c, (unsigned)c->s->cfg.idle_timeout_s);
			return SRV_STREAM_END;
		}
		if (call_gone(c)) {
			call_cancel(c);
			c->conn->outcome = "cancelled";
			return SRV_STREAM_FAIL;
		}
		pump(c);
		if (c->out.len || c->over) continue;
		// after a half-close, a comment tells a client still reading from one gone (a reset)
		if ((atomic_load(&c->hup) && !c->probed) || base_now_us() >= c->last_out_us + KEEPALIVE_US) {
			c->probed = atomic_load(&c->hup);
			srv_sse_raw(c, ": keep-alive\n\n");
			continue;
		}
		if (call_suspend(c, c->last_out_us + KEEPALIVE_US)) return 0; // resumed on events
	}
}

// A non-streamed call: the reply once every choice ended.
static void call_reply(srv_call *c) {
	srv_conn *conn = c->conn;
	srv_err e;
	set_timeout(c, (unsigned)c->s->cfg.idle_timeout_s);
	if (c->failed) {
		conn->host_counted = c->too_big; // the host counted its cancel
		srv_fail(&e, c->too_big ? SRV_E_BAD_REQUEST : SRV_E_INTERNAL, c->too_big ? lane_api_name(&c->g.api, LANE_F_MAX_TOKENS) : NULL,
			 "%s", c->fail_reason);
		srv_reply_error(conn, &e);
		conn->outcome = "failed";
		return;
	}
	json_t *body = c->api->reply(c);
	if (!body) {
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		srv_reply_error(conn, &e);
		return;
	}
	srv_reply_json(conn, 200, body, 0);
}

// A non-streamed call's step: takes the events, then replies, or ends a call whose client
// went away, or suspends the connection until its end (or its socket) resumes it.
static void call_step(srv_call *c) {
	static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
	for (;;) {
		pump(c);
		if (c->over) {
			call_reply(c);
			return;
		}
		if (!call_gone(c) && atomic_load(&c->hup) && !c->probed) {
			// an interim 100 is harmless to a client still reading; a closed one answers it
			// with a reset. HTTP/1.0 has no interim replies: there a half-close means gone.
			c->probed = true;
			ssize_t w = c->conn->http11 && c->sock >= 0
					    ? send(c->sock, probe, sizeof probe - 1, MSG_NOSIGNAL | MSG_DONTWAIT)
					    : -1;
			if (w < 0) atomic_store(&c->gone, true);
		}
		if (call_gone(c)) {
			call_cancel(c);
			c->conn->outcome = "cancelled";
			return;
		}
		if (call_suspend(c, 0)) return; // resumed on events: gen_resume
	}
}

// A non-streamed call's connection, resumed: replies, or suspends it again.
static void gen_resume(srv_conn *conn) { call_step(conn->call); }

// ---- the call -----------------------------------------------------------------------------------

void srv_call_free(srv_call *c) {
	if (!c) return;
	// first: neither the engine nor the waker sees the call any more
	for (int i = 0; i < c->n; i++)
		if (c->req[i]) lane_req_set_notify(c->req[i], NULL, NULL);
	slot_put(c->s, c);
	for (int i = 0; i < c->n; i++)
		if (c->req[i]) lane_req_free(c->req[i]);
	if (c->conn) {
		c->conn->n_gen = srv_call_generated(c);
		c->conn->call = NULL;
	}
	if (c->api && c->api->free_state) c->api->free_state(c->st);
	for (int i = 0; c->ch && i < c->n; i++)
		srv_buf_free(&c->ch[i].text), free(c->ch[i].embedding), json_decref(c->ch[i].tools.ids), tool_scan_free(&c->ch[i].tools.scan),
			srv_buf_free(&c->ch[i].raw), srv_buf_free(&c->ch[i].thinking);
	free(c->ch);
	free(c->req);
	srv_gen_free(&c->g);
	srv_buf_free(&c->out);
	atomic_fetch_sub(&c->s->calls_open, 1);
	free(c);
}

void srv_gen_run(srv_conn *conn, const srv_api *api, void *st, srv_gen *g, const char *id_prefix) {
	srv_model *M = conn->mdl;
	http_server *s = conn->s;
	srv_err e;
	conn->n_prompt = g->lr.n_prompt;
	gen_wire(g);
	char err[256];
	enum lane_field bad = LANE_F_PROMPT;
	// --strict-params: what the adapters (and the tools) named is refused, once all of it is known
	int rc = srv_ignored_refuse(conn, &e);
	const bool refused = rc;
	for (int i = 0; g->prompts && i < g->n && !rc; i++) {
		lane_request one = g->lr;
		one.prompt = g->prompts[i];
		one.n_prompt = g->n_prompts[i];
		rc = lane_check_prompt(M->host, &one, &g->api, err, sizeof err, &bad);
		conn->n_prompt += g->n_prompts[i];
	}
	if (!rc && !g->prompts) rc = lane_check_prompt(M->host, &g->lr, &g->api, err, sizeof err, &bad);
	if (rc && !refused) {
		srv_fail(&e, SRV_E_BAD_REQUEST, lane_api_name(&g->api, bad), "%s", err);
		if (rc == LANES_ELIMIT) snprintf(e.code, sizeof e.code, "context_length_exceeded");
	}
	// the body's metadata.domain, else the x-lanes-domain header (a proxy may label traffic)
	const char *hd = g->lr.domain ? NULL : srv_header(conn, "x-lanes-domain");
	if (!rc && hd && (rc = lane_check_domain(hd, err, sizeof err)))
		srv_fail(&e, SRV_E_BAD_REQUEST, NULL, "x-lanes-domain: %s", err);
	if (!rc && hd) g->lr.domain = hd;
	srv_call *c = rc ? NULL : calloc(1, sizeof *c);
	if (!rc && !c) rc = srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
	if (rc) {
		if (api->free_state) api->free_state(st);
		srv_gen_free(g);
		srv_reply_error(conn, &e);
		return;
	}
	c->s = s;
	c->mdl = conn->mdl;
	c->conn = conn;
	c->api = api;
	c->st = st;
	c->g = *g;
	memset(g, 0, sizeof *g); // the call owns the storage now
	gen_wire(&c->g);
	c->n = c->g.n;
	c->slot = -1;
	c->created = (int64_t)time(NULL);
	srv_new_id(s, id_prefix, c->id, sizeof c->id);
	atomic_fetch_add(&s->calls_open, 1);
	conn->call = c;
	// drawn here, not by the host, so that every choice shares it and the reply can name it
	if (!c->g.lr.sampling.has_seed) {
		c->g.lr.sampling.seed = lane_draw_seed(M->host);
		c->g.lr.sampling.has_seed = true;
	}
	c->ch = calloc((size_t)c->n, sizeof *c->ch);
	c->req = calloc((size_t)c->n, sizeof *c->req);
	c->sock = srv_sock_fd(conn);
	c->last_out_us = base_now_us();
	c->slot = slot_get(s, c);
	if (!c->ch || !c->req) {
		c->n = 0;
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		srv_reply_error(conn, &e);
		return;
	}
	if (c->slot < 0) {
		srv_fail(&e, SRV_E_BUSY, NULL, "too many generation calls are open: retry shortly");
		srv_reply_error(conn, &e);
		return;
	}
	for (int i = 0; i < c->n; i++) reason_scan_init(&c->ch[i].rs, c->g.reasoning ? M->reason : NULL, c->g.think_inside);
	lane_request lr = c->g.lr;
	lr.lease = srv_lease_of(conn); // a peer's forward: admitted on the lane it leased
	for (int i = 0; i < c->n; i++) {
		lr.sampling.choice = i;
		if (c->g.prompts) lr.prompt = c->g.prompts[i], lr.n_prompt = c->g.n_prompts[i];
		rc = lane_submit(M->host, &lr, &c->req[i], err, sizeof err);
		if (rc) {
			// the choices already queued are cancelled when the call is freed
			srv_fail(&e, srv_kind_of(rc, SRV_BLAME_ENGINE), rc == LANES_ELIMIT ? lane_api_name(&c->g.api, LANE_F_PROMPT) : NULL, "%s", err);
			if (rc == LANES_ECANCELLED && atomic_load(&s->state) == HTTP_DRAINING)
				snprintf(e.msg, sizeof e.msg, "the server is draining: retry shortly");
			conn->host_counted = true;
			// a full queue: a peer may take the request instead
			if (rc == LANES_EBUSY && s->overflow && s->overflow(conn, true)) {
				srv_call_free(c);
				return;
			}
			srv_reply_error(conn, &e);
			return;
		}
		lane_req_set_notify(c->req[i], call_notify, c);
	}
	srv_grid_submitted(conn);
	// the requests hold their adapters now: an unload need not wait for this reply to go out
	for (int32_t i = 0; i < c->g.lora_set.n; i++) model_lora_free(c->g.lora_set.use[i].lora);
	c->g.lora_set.n = 0;
	set_timeout(c, 0);
	if (c->g.stream) {
		api->begin(c);
		const char *const hdrs[] = {"Content-Type", c->g.stream_type ? c->g.stream_type : "text/event-stream",
					    "Cache-Control", "no-cache", "X-Accel-Buffering", "no", NULL};
		srv_reply_stream(conn, 200, stream_reader, c, hdrs);
		return;
	}
	conn->resume = gen_resume;
	call_step(c);
}
