// server/api/embed: the embedding endpoints — POST /v1/embeddings (OpenAI) and Ollama's
// /api/embed and /api/embeddings. Each input (a string, or token ids) is one prompt-only lane
// request through the rounds, pooled as --pooling says and L2-normalized (Ollama's legacy
// endpoint: not normalized); "dimensions" truncates and renormalizes, "encoding_format"
// base64 sends the float32 bytes.
#include "server/gen/gen.h"
#include "server/routes.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum lane_embed srv_pooling_of(const char *cfg, const model_hparams *hp) {
	if (cfg && !strcmp(cfg, "mean")) return LANE_EMBED_MEAN;
	if (cfg && !strcmp(cfg, "cls")) return LANE_EMBED_CLS;
	if (cfg && !strcmp(cfg, "none")) return LANE_EMBED_NONE;
	if (cfg) return LANE_EMBED_LAST;
	// the GGUF's pooling_type: 1 mean, 2 cls, 3 last; none (0), rank (4) or absent: last
	return hp->pooling == 1 ? LANE_EMBED_MEAN : hp->pooling == 2 ? LANE_EMBED_CLS : LANE_EMBED_LAST;
}

enum embed_shape { EMB_OPENAI, EMB_OLLAMA, EMB_OLLAMA_LEGACY };

typedef struct {
	srv_gen g;
	enum embed_shape shape;
	json_t *input, *prompt, *options, *keep_alive;
	bool truncate;
	const char *encoding_format;
	json_t *dims;
	int32_t dimensions;
	bool base64;
} embed_req;

static const srv_field embed_fields[] = {
	{"model", SRV_K_STR, .off = offsetof(embed_req, g.model)},
	SRV_ROW(embed_req, input, SRV_K_JSON),
	SRV_ROW(embed_req, encoding_format, SRV_K_STR),
	{"dimensions", SRV_K_JSON, .off = offsetof(embed_req, dims)},
	SRV_IGNORED("user"),
	{0},
};

static const srv_field ollama_embed_fields[] = {
	{"model", SRV_K_STR, .off = offsetof(embed_req, g.model)},
	SRV_ROW(embed_req, input, SRV_K_JSON),
	SRV_ROW(embed_req, truncate, SRV_K_BOOL),
	{"dimensions", SRV_K_JSON, .off = offsetof(embed_req, dims)},
	SRV_ROW(embed_req, options, SRV_K_JSON),
	SRV_ROW(embed_req, keep_alive, SRV_K_JSON),
	{0},
};

static const srv_field ollama_legacy_fields[] = {
	{"model", SRV_K_STR, .off = offsetof(embed_req, g.model)},
	SRV_ROW(embed_req, prompt, SRV_K_JSON),
	SRV_ROW(embed_req, options, SRV_K_JSON),
	SRV_ROW(embed_req, keep_alive, SRV_K_JSON),
	{0},
};

static const lane_api embed_api = {.name = {[LANE_F_PROMPT] = "input"}};
static const lane_api legacy_api = {.name = {[LANE_F_PROMPT] = "prompt"}};

// One input's ids: a string (tokenized with the vocabulary's special tokens added, text
// never parsed as special tokens) or an array of token ids.
static int input_ids(srv_model *M, json_t *v, const char *p, bool truncate, int32_t **ids, int32_t *n, srv_err *e) {
	*ids = NULL;
	*n = 0;
	if (json_is_string(v)) {
		if (!json_string_length(v)) return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s is an empty string", p);
		size_t cnt = 0;
		char err[256];
		int rc = tok_encode(M->vocab, json_string_value(v), json_string_length(v), true, false, ids, &cnt, err, sizeof err);
		if (rc) return srv_fail(e, srv_kind_of(rc, SRV_BLAME_REQUEST), p, "%s", err);
		if (cnt > (size_t)INT32_MAX / 2) return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s is too long", p);
		*n = (int32_t)cnt;
		if (truncate && *n > M->max_ctx) *n = M->max_ctx; // Ollama's truncate: the head that fits
		return 0;
	}
	if (!json_is_array(v) || !json_array_size(v))
		return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s must be a non-empty string or array of token ids", p);
	const size_t cnt = json_array_size(v);
	if (cnt > (size_t)M->max_ctx)
		return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s has %zu tokens: more than the %d a request may use", p, cnt, M->max_ctx);
	*ids = malloc(cnt * sizeof **ids);
	if (!*ids) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	for (size_t i = 0; i < cnt; i++) {
		json_t *t = json_array_get(v, i);
		if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= M->n_vocab) {
			free(*ids);
			*ids = NULL;
			return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s[%zu] must be a token id in 0..%d", p, i, M->n_vocab - 1);
		}
		(*ids)[i] = (int32_t)json_integer_value(t);
	}
	*n = (int32_t)cnt;
	return 0;
}

// The inputs as one prompt per choice: a string, an array of ids, or an array of either.
static int read_inputs(srv_model *M, json_t *in, const char *name, bool truncate, srv_gen *g, srv_err *e) {
	http_server *s = M->s;
	if (!in) return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s is required", name);
	// one input: a string, or an array of ids
	const bool one = json_is_string(in) || (json_is_array(in) && json_array_size(in) && json_is_integer(json_array_get(in, 0)));
	if (!one && (!json_is_array(in) || !json_array_size(in)))
		return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s must be a string, an array of strings, or token ids", name);
	const size_t n = one ? 1 : json_array_size(in);
	const lane_config *lc = &s->cfg.lanes;
	const size_t most = (size_t)lc->lanes + (size_t)lc->queue;
	if (n > most)
		return srv_fail(e, SRV_E_BAD_REQUEST, name,
				"%s has %zu items: this server takes at most %zu per request (%s plus %s)", name, n, most,
				HTTP_SETTING(&s->cfg, lanes.lanes), HTTP_SETTING(&s->cfg, lanes.queue));
	g->prompts = calloc(n, sizeof *g->prompts);
	g->n_prompts = calloc(n, sizeof *g->n_prompts);
	if (!g->prompts || !g->n_prompts) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	g->n = (int)n;
	for (size_t i = 0; i < n; i++) {
		char p[48];
		if (one) snprintf(p, sizeof p, "%s", name);
		else snprintf(p, sizeof p, "%s[%zu]", name, i);
		if (input_ids(M, one ? in : json_array_get(in, i), p, truncate, &g->prompts[i], &g->n_prompts[i], e)) return -1;
	}
	return 0;
}

void srv_text_none(srv_call *c, int i, const char *text, size_t len, const lane_event *tok) {
	(void)c, (void)i, (void)text, (void)len, (void)tok;
}

static char *base64_of(const unsigned char *p, size_t n) {
	static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
	if (!out) return NULL;
	for (size_t i = 0; i < n; i += 3) {
		const uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
		*o++ = A[v >> 18 & 63];
		*o++ = A[v >> 12 & 63];
		*o++ = i + 1 < n ? A[v >> 6 & 63] : '=';
		*o++ = i + 2 < n ? A[v & 63] : '=';
	}
	*o = 0;
	return out;
}

// One vector as sent: its first d values, renormalized when d cuts it; floats or base64.
static json_t *vector_json(const float *v, int32_t n, int32_t d, bool base64) {
	float *x = malloc((size_t)d * sizeof *x);
	if (!x) return NULL;
	double ss = 0;
	for (int32_t i = 0; i < d; i++) ss += (double)v[i] * v[i];
	const double scale = d < n && ss > 0 ? 1.0 / sqrt(ss) : 1.0;
	for (int32_t i = 0; i < d; i++) x[i] = d < n ? (float)(v[i] * scale) : v[i];
	json_t *out = NULL;
	if (base64) {
		// little-endian float32, as OpenAI's clients decode it
		unsigned char *b = malloc((size_t)d * 4);
		for (int32_t i = 0; b && i < d; i++) {
			uint32_t u;
			memcpy(&u, &x[i], 4);
			for (int k = 0; k < 4; k++) b[4 * i + k] = (unsigned char)(u >> (8 * k));
		}
		char *t = b ? base64_of(b, (size_t)d * 4) : NULL;
		out = t ? json_string(t) : NULL;
		free(t);
		free(b);
	} else {
		out = json_array();
		for (int32_t i = 0; out && i < d; i++)
			if (json_array_append_new(out, json_real(x[i]))) {
				json_decref(out);
				out = NULL;
			}
	}
	free(x);
	return out;
}

// Ollama's replies: {"embeddings": [[...]], counts, durations} or the legacy {"embedding": [...]}.
static json_t *ollama_reply(srv_call *c) {
	const embed_req *r = c->st;
	json_t *vs = json_array();
	int64_t tokens = 0;
	for (int i = 0; vs && i < c->n; i++) {
		const srv_choice *ch = &c->ch[i];
		json_t *v = ch->embedding ? vector_json(ch->embedding, ch->n_embd, r->dimensions > 0 ? r->dimensions : ch->n_embd, false) : NULL;
		if (!v || json_array_append_new(vs, v)) {
			json_decref(vs);
			return NULL;
		}
		tokens += ch->n_prompt;
	}
	if (!vs) return NULL;
	if (r->shape == EMB_OLLAMA_LEGACY) {
		json_t *o = json_pack("{s:O}", "embedding", json_array_get(vs, 0));
		json_decref(vs);
		return o;
	}
	const json_int_t ns = (json_int_t)((base_now_us() - c->conn->t0_us) * 1000);
	return json_pack("{s:s, s:o, s:I, s:i, s:I}", "model", srv_call_model(c), "embeddings", vs, "total_duration", ns,
			 "load_duration", 0, "prompt_eval_count", (json_int_t)tokens);
}

static json_t *embed_reply(srv_call *c) {
	const embed_req *r = c->st;
	if (r->shape != EMB_OPENAI) return ollama_reply(c);
	json_t *data = json_array();
	int64_t tokens = 0;
	for (int i = 0; data && i < c->n; i++) {
		const srv_choice *ch = &c->ch[i];
		if (!ch->embedding) {
			json_decref(data);
			return NULL;
		}
		const int32_t d = r->dimensions > 0 ? r->dimensions : ch->n_embd;
		const bool per_token = c->g.lr.embed == LANE_EMBED_NONE; // --pooling none: a vector per token
		json_t *vec = per_token ? json_array() : vector_json(ch->embedding, ch->n_embd, d, r->base64);
		for (int32_t t = 0; vec && per_token && t < ch->n_vectors; t++)
			if (json_array_append_new(vec, vector_json(ch->embedding + (size_t)t * ch->n_embd, ch->n_embd, d, false))) {
				json_decref(vec);
				vec = NULL;
			}
		json_t *o = vec ? json_pack("{s:s, s:i, s:o}", "object", "embedding", "index", i, "embedding", vec) : NULL;
		if (!o || json_array_append_new(data, o)) {
			json_decref(data);
			return NULL;
		}
		tokens += ch->n_prompt;
	}
	if (!data) return NULL;
	return json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "object", "list", "data", data, "model", srv_call_model(c), "usage",
			 "prompt_tokens", (json_int_t)tokens, "total_tokens", (json_int_t)tokens);
}

static void embed_free(void *st) { free(st); }

static const srv_api embed_srv_api = {.text = srv_text_none, .reply = embed_reply, .free_state = embed_free};

// Ollama names carry a tag: ":latest" names this model too.
static int check_model_tagged(srv_model *M, const char *id, srv_err *e) {
	http_server *s = M->s;
	const size_t n = strlen(M->model_id);
	if (id && !strncmp(id, M->model_id, n) && !strcmp(id + n, ":latest")) return 0;
	return srv_check_model(s, id, e);
}

// The reply is built whole: its vectors (one per token with --pooling none) at about 24 bytes
// a value as JSON text (6 as base64) must fit --max-output-bytes before any work is done.
static int reply_size_check(srv_model *M, const embed_req *r, int32_t E, srv_err *e) {
	http_server *s = M->s;
	uint64_t vectors = 0;
	for (int i = 0; i < r->g.n; i++) vectors += M->pooling == LANE_EMBED_NONE ? (uint64_t)r->g.n_prompts[i] : 1;
	const uint64_t bytes = vectors * (uint64_t)(r->dimensions > 0 ? r->dimensions : E) * (r->base64 ? 6 : 24);
	if (bytes <= s->cfg.max_output_bytes) return 0;
	return srv_fail(e, SRV_E_BAD_REQUEST, r->shape == EMB_OLLAMA_LEGACY ? "prompt" : "input",
			"%llu vectors of %d values would take about %llu bytes, more than a reply may hold (%zu, %s): "
			"send fewer or shorter inputs%s",
			(unsigned long long)vectors, r->dimensions > 0 ? r->dimensions : E, (unsigned long long)bytes,
			s->cfg.max_output_bytes, HTTP_SETTING(&s->cfg, max_output_bytes), r->base64 || M->pooling == LANE_EMBED_NONE ? "" : ", or base64");
}

static void embed_run(srv_conn *c, enum embed_shape shape) {
	srv_model *M = c->mdl;
	http_server *s = c->s;
	srv_err e;
	json_t *j = NULL;
	embed_req *r = calloc(1, sizeof *r);
	if (!r) {
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		srv_reply_error(c, &e);
		return;
	}
	r->shape = shape;
	r->truncate = true;
	srv_gen_init(&r->g, shape == EMB_OLLAMA_LEGACY ? &legacy_api : &embed_api, c);
	const srv_field *t = shape == EMB_OPENAI ? embed_fields : shape == EMB_OLLAMA ? ollama_embed_fields : ollama_legacy_fields;
	int rc = srv_body_read(c, t, r, &j, &e);
	if (!rc && shape != EMB_OPENAI && !r->g.model) rc = srv_fail(&e, SRV_E_BAD_REQUEST, "model", "model is required");
	if (!rc) rc = shape == EMB_OPENAI ? srv_check_model(s, r->g.model, &e) : check_model_tagged(M, r->g.model, &e);
	if (!rc) rc = srv_gen_bind(M, &r->g, &e); // an adapter's name: its hidden states
	const int32_t E = model_hparams_of(M->m)->n_embd;
	if (!rc && r->encoding_format && strcmp(r->encoding_format, "float") && strcmp(r->encoding_format, "base64"))
		rc = srv_fail(&e, SRV_E_BAD_REQUEST, "encoding_format", "encoding_format must be \"float\" or \"base64\", got \"%s\"",
			      r->encoding_format);
	r->base64 = r->encoding_format && !strcmp(r->encoding_format, "base64");
	if (!rc && M->pooling == LANE_EMBED_NONE && (r->base64 || shape != EMB_OPENAI))
		rc = srv_fail(&e, SRV_E_BAD_REQUEST, r->base64 ? "encoding_format" : NULL,
			      "with %s none a text gets a vector per token: only /v1/embeddings with float encoding sends them",
			      HTTP_SETTING(&s->cfg, pooling));
	if (!rc && r->dims && (!json_is_integer(r->dims) || json_integer_value(r->dims) < 1 || json_integer_value(r->dims) > E))
		rc = srv_fail(&e, SRV_E_BAD_REQUEST, "dimensions", "dimensions must be an integer between 1 and %d (the model's width)", E);
	if (!rc && r->dims) r->dimensions = (int32_t)json_integer_value(r->dims);
	if (!rc && r->options && !json_is_object(r->options))
		rc = srv_fail(&e, SRV_E_BAD_REQUEST, "options", "options must be an object");
	if (!rc && shape == EMB_OLLAMA_LEGACY && !json_is_string(r->prompt))
		rc = srv_fail(&e, SRV_E_BAD_REQUEST, "prompt", "prompt must be a string");
	if (!rc)
		rc = shape == EMB_OLLAMA_LEGACY ? read_inputs(M, r->prompt, "prompt", true, &r->g, &e)
						: read_inputs(M, r->input, "input", shape == EMB_OLLAMA && r->truncate, &r->g, &e);
	if (!rc) rc = reply_size_check(M, r, E, &e);
	if (rc) {
		json_decref(j);
		srv_gen_free(&r->g);
		free(r);
		srv_reply_error(c, &e);
		return;
	}
	r->g.lr.embed = M->pooling;
	r->g.lr.normalize = shape != EMB_OLLAMA_LEGACY; // as Ollama: /api/embeddings is not normalized
	r->g.model = NULL; // it pointed into the body, freed here
	r->input = r->dims = r->prompt = r->options = r->keep_alive = NULL;
	r->encoding_format = NULL;
	json_decref(j);
	srv_gen g = r->g;
	memset(&r->g, 0, sizeof r->g);
	srv_gen_run(c, &embed_srv_api, r, &g, "embd-");
}

void srv_embeddings(srv_conn *c) { embed_run(c, EMB_OPENAI); }
void srv_ollama_embed(srv_conn *c) { embed_run(c, EMB_OLLAMA); }
void srv_ollama_embeddings(srv_conn *c) { embed_run(c, EMB_OLLAMA_LEGACY); }
