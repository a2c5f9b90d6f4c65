// server/api/rerank: POST /v1/rerank and /rerank (the Jina and Cohere shape llama-server and
// vLLM take) and /v1/score (vLLM's) over a reranker of either kind. Each (query, document) pair
// is one prompt-only lane request. A decoder reranker reads it in Qwen3-Reranker's published
// prompt format, and its last hidden state is scored; a cross-encoder (a BERT-family encoder
// with a classifier) reads [CLS] query [SEP] document [SEP] whole in one round, and its first
// row's classifier input is scored. The score is the file's classifier row (cls.output) or the
// output head's "yes" row less its "no" row, in double, through a sigmoid. A pair's score is
// the same alone or among many, as any embedding is; a decoder's pairs share their head
// through the prefix cache.
#include "server/gen/gen.h"
#include "server/routes.h"

#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define MOD "server"

// Qwen3-Reranker's format: its system turn, the pair as the user's turn, an empty thinking block.
static const char RANK_PREFIX[] =
	"<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. "
	"Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n";
static const char RANK_SUFFIX[] = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
static const char RANK_INSTRUCTION[] = "Given a web search query, retrieve relevant passages that answer the query";

static bool named_reranker(const gguf *g) {
	static const char *const keys[] = {"general.name", "general.basename"};
	for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
		gguf_str v;
		if (gguf_get_str(g, keys[k], &v)) continue;
		for (uint64_t i = 0; i + 6 <= v.len; i++)
			if (!strncasecmp(v.ptr + i, "rerank", 6)) return true;
	}
	return false;
}

// One row of t (n_embd values) into out, added with sign.
static int add_row(const gguf_tensor *t, int64_t row, int32_t E, double sign, double *out) {
	const size_t rb = tensor_row_bytes(t->type, E);
	if (!rb || t->ne[0] != E || row >= t->ne[1]) return -1;
	float *x = malloc((size_t)E * sizeof *x);
	if (!x) return -1;
	const int rc = tensor_dequantize_rows(t->type, (const uint8_t *)t->data + (size_t)row * rb, x, 1, E, NULL);
	for (int32_t e = 0; !rc && e < E; e++) out[e] += sign * x[e];
	free(x);
	return rc ? -1 : 0;
}

// The one token text is; -1 when it is none or several.
static int32_t single_token(const tok_vocab *v, const char *text) {
	int32_t *ids = NULL, id = -1;
	size_t n = 0;
	char err[128];
	if (!tok_encode(v, text, strlen(text), false, false, &ids, &n, err, sizeof err) && n == 1) id = ids[0];
	free(ids);
	return id;
}

void srv_rank_load(srv_model *M) {
	const model_hparams *hp = model_hparams_of(M->m);
	const gguf *g = model_gguf(M->m);
	const int32_t E = hp->n_embd;
	const gguf_tensor *cls = gguf_find_tensor(g, "cls.output.weight");
	M->rank_w = NULL;
	if (!cls && hp->encoder) {
		M->rank_why = "this encoder has no classifier (cls.output): it embeds texts, it does not rerank them";
		return;
	}
	if (!cls && hp->pooling != 4 && !named_reranker(g)) {
		M->rank_why = "this model is not a reranker (its file has no classifier cls.output, no rank pooling and no reranker name)";
		return;
	}
	double *w = calloc((size_t)E, sizeof *w);
	if (!w) {
		M->rank_why = "out of memory";
		return;
	}
	if (cls) {
		const gguf_tensor *bias = gguf_find_tensor(g, "cls.output.bias");
		if (add_row(cls, 0, E, 1.0, w)) {
			M->rank_why = "the reranker's classifier (cls.output) is not a row of the model's width in a block type lanes reads";
			free(w);
			return;
		}
		if (bias && bias->type == GGUF_T_F32 && bias->ne[0] >= 1) M->rank_b = ((const float *)bias->data)[0];
		snprintf(M->rank_how, sizeof M->rank_how, "%s", hp->encoder ? "its classifier (cls.output) as a cross-encoder" : "its classifier (cls.output)");
	} else {
		const int32_t yes = single_token(M->vocab, "yes"), no = single_token(M->vocab, "no");
		const gguf_tensor *out = gguf_find_tensor(g, "output.weight");
		if (!out) out = gguf_find_tensor(g, "token_embd.weight");
		if (yes < 0 || no < 0 || !out || add_row(out, yes, E, 1.0, w) || add_row(out, no, E, -1.0, w)) {
			M->rank_why = "this reranker's vocabulary has no single \"yes\" and \"no\" tokens its output head scores";
			free(w);
			return;
		}
		snprintf(M->rank_how, sizeof M->rank_how, "its \"yes\" (%d) and \"no\" (%d) logits", (int)yes, (int)no);
	}
	M->rank_w = w;
	M->rank_why = NULL;
	LOG_INFO(MOD, "reranker: /v1/rerank scores pairs by %s", M->rank_how);
}

enum rank_shape { RANK_RERANK, RANK_SCORE };

typedef struct {
	srv_gen g;
	enum rank_shape shape;
	const char *query, *instruction;
	json_t *documents, *text_1, *text_2;
	json_t *top_n;
	bool return_documents;
	json_t *docs;              // the documents' texts (owned), in order
	int32_t *qids, n_q;        // a cross-encoder's query, tokenized once for every pair
} rank_req;

static const srv_field rerank_fields[] = {
	{"model", SRV_K_STR, .off = offsetof(rank_req, g.model)},
	SRV_ROW(rank_req, query, SRV_K_STR),
	SRV_ROW(rank_req, documents, SRV_K_JSON),
	SRV_ROW(rank_req, top_n, SRV_K_JSON),
	SRV_ROW(rank_req, return_documents, SRV_K_BOOL),
	SRV_ROW(rank_req, instruction, SRV_K_STR),
	SRV_NAMED("max_chunks_per_doc"),
	SRV_NAMED("rank_fields"),
	SRV_IGNORED("user"),
	{0},
};

static const srv_field score_fields[] = {
	{"model", SRV_K_STR, .off = offsetof(rank_req, g.model)},
	SRV_ROW(rank_req, text_1, SRV_K_JSON),
	SRV_ROW(rank_req, text_2, SRV_K_JSON),
	SRV_ROW(rank_req, instruction, SRV_K_STR),
	SRV_NAMED("truncate_prompt_tokens"),
	SRV_IGNORED("user"),
	{0},
};

static const lane_api rank_api = {.name = {[LANE_F_PROMPT] = "documents"}};

// ids of text appended to *ids (*n of *cap).
static int append(srv_model *M, const char *text, bool first, bool special, int32_t **ids, int32_t *n, srv_err *e) {
	int32_t *t = NULL;
	size_t cnt = 0;
	char err[256];
	const int rc = tok_encode(M->vocab, text, strlen(text), first, special, &t, &cnt, err, sizeof err);
	if (rc) return srv_fail(e, srv_kind_of(rc, SRV_BLAME_REQUEST), NULL, "%s", err);
	int32_t *m = cnt ? realloc(*ids, ((size_t)*n + cnt) * sizeof *m) : *ids;
	if (cnt && !m) {
		free(t);
		return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	}
	if (cnt) memcpy(m + *n, t, cnt * sizeof *t);
	*ids = m;
	*n += (int32_t)cnt;
	free(t);
	return 0;
}

// A cross-encoder's pair, the texts never read as control tokens: BERT's [CLS] query [SEP]
// document [SEP], or RoBERTa's <s> query </s></s> document </s> (its EOS, then its separator).
static int cross_ids(srv_model *M, const rank_req *r, const char *doc, int32_t **ids, int32_t *n, srv_err *e) {
	const tok_vocab *v = M->vocab;
	const bool bert = tok_model(v) == TOK_MODEL_WPM;
	const int32_t open = tok_bos(v), sep = tok_sep(v), close = bert ? sep : tok_eos(v);
	if (open < 0 || sep < 0 || close < 0)
		return srv_fail(e, SRV_E_BAD_REQUEST, "model", "this cross-encoder's vocabulary has no %s to frame a pair",
				bert ? "[CLS] and [SEP]" : "BOS, EOS and separator tokens");
	const int32_t mid[2] = {close, sep}, n_mid = bert ? 1 : 2;
	*ids = malloc(sizeof **ids);
	if (!*ids) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	(*ids)[0] = open;
	*n = 1;
	int32_t *tail = NULL, nt = 0;
	int rc = append(M, doc, false, false, &tail, &nt, e);
	int32_t *m = rc ? NULL : realloc(*ids, ((size_t)*n + (size_t)r->n_q + (size_t)nt + 3) * sizeof *m);
	if (!rc && !m) rc = srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	if (!rc) {
		if (r->n_q) memcpy(m + *n, r->qids, (size_t)r->n_q * sizeof *m);
		*n += r->n_q;
		memcpy(m + *n, mid + 2 - n_mid, (size_t)n_mid * sizeof *mid);
		*n += n_mid;
		if (nt) memcpy(m + *n, tail, (size_t)nt * sizeof *tail);
		*n += nt;
		m[(*n)++] = close;
		*ids = m;
	}
	free(tail);
	return rc;
}

// The pair's prompt: the format's own parts with their control tokens, the client's texts
// never read as control tokens.
static int pair_ids(srv_model *M, const rank_req *r, const char *doc, const char *p, int32_t **ids, int32_t *n, srv_err *e) {
	*ids = NULL;
	*n = 0;
	int rc;
	if (model_hparams_of(M->m)->encoder) {
		rc = cross_ids(M, r, doc, ids, n, e);
	} else {
		const char *instr = r->instruction ? r->instruction : RANK_INSTRUCTION;
		const size_t len = strlen(instr) + strlen(r->query) + strlen(doc) + 64;
		char *user = malloc(len);
		if (!user) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
		snprintf(user, len, "<Instruct>: %s\n<Query>: %s\n<Document>: %s", instr, r->query, doc);
		rc = append(M, RANK_PREFIX, true, true, ids, n, e) || append(M, user, false, false, ids, n, e) ||
		     append(M, RANK_SUFFIX, false, true, ids, n, e);
		free(user);
	}
	if (!rc && *n > M->max_ctx)
		rc = srv_fail(e, SRV_E_BAD_REQUEST, p, "%s makes a prompt of %d tokens: more than the %d a request may use", p, *n,
			      M->max_ctx);
	return rc ? -1 : 0;
}

// The documents as texts: strings, or objects with a "text" (Jina's and Cohere's).
static int read_docs(srv_model *M, rank_req *r, json_t *in, const char *name, srv_err *e) {
	http_server *s = M->s;
	if (json_is_string(in)) {
		r->docs = json_array();
		if (!r->docs || json_array_append(r->docs, in)) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	} else if (json_is_array(in) && json_array_size(in)) {
		r->docs = json_array();
		for (size_t i = 0; r->docs && i < json_array_size(in); i++) {
			json_t *d = json_array_get(in, i), *t = json_is_object(d) ? json_object_get(d, "text") : d;
			if (!json_is_string(t))
				return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s[%zu] must be a string or an object with a string \"text\"", name, i);
			if (json_array_append(r->docs, t)) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
		}
	} else
		return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s is required: a non-empty array of documents", name);
	const size_t n = json_array_size(r->docs);
	const size_t most = (size_t)s->cfg.lanes.lanes + (size_t)s->cfg.lanes.queue;
	if (n > most)
		return srv_fail(e, SRV_E_BAD_REQUEST, name, "%s has %zu items: this server takes at most %zu per request (%s plus %s)", name,
				n, most, HTTP_SETTING(&s->cfg, lanes.lanes), HTTP_SETTING(&s->cfg, lanes.queue));
	srv_gen *g = &r->g;
	g->prompts = calloc(n, sizeof *g->prompts);
	g->n_prompts = calloc(n, sizeof *g->n_prompts);
	if (!g->prompts || !g->n_prompts) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	g->n = (int)n;
	// the query's part once, so an oversized query is refused before it is tokenized per document;
	// a cross-encoder's query tokens serve every pair (its tokenizers fold any length into few)
	if (model_hparams_of(M->m)->encoder && append(M, r->query ? r->query : "", false, false, &r->qids, &r->n_q, e)) return -1;
	int32_t *head = NULL, n_head = 0;
	const int rc = pair_ids(M, r, "", r->shape == RANK_RERANK ? "query" : "text_1", &head, &n_head, e);
	free(head);
	if (rc) return -1;
	for (size_t i = 0; i < n; i++) {
		char p[48];
		snprintf(p, sizeof p, "%s[%zu]", name, i);
		if (pair_ids(M, r, json_string_value(json_array_get(r->docs, i)), p, &g->prompts[i], &g->n_prompts[i], e)) return -1;
	}
	return 0;
}

static double score_of(const srv_model *M, const srv_choice *ch) {
	double z = M->rank_b;
	for (int32_t e = 0; e < ch->n_embd; e++) z += M->rank_w[e] * ch->embedding[e];
	return 1.0 / (1.0 + exp(-z));
}

typedef struct {
	int index;
	double score;
} ranked;

static int by_score(const void *a, const void *b) {
	const ranked *x = a, *y = b;
	// ties keep the documents' order, so a reply never depends on the sort
	return x->score > y->score ? -1 : x->score < y->score ? 1 : x->index - y->index;
}

static json_t *rank_reply(srv_call *c) {
	srv_model *M = c->mdl;
	const rank_req *r = c->st;
	ranked *v = calloc((size_t)c->n, sizeof *v);
	int64_t tokens = 0;
	for (int i = 0; v && i < c->n; i++) {
		if (!c->ch[i].embedding) {
			free(v);
			return NULL;
		}
		v[i] = (ranked){i, score_of(M, &c->ch[i])};
		tokens += c->ch[i].n_prompt;
	}
	if (!v) return NULL;
	json_t *out = json_array();
	if (r->shape == RANK_SCORE) {
		for (int i = 0; out && i < c->n; i++)
			if (json_array_append_new(out, json_pack("{s:i, s:s, s:f}", "index", i, "object", "score", "score", v[i].score))) {
				json_decref(out);
				out = NULL;
			}
		free(v);
		return out ? json_pack("{s:s, s:s, s:I, s:s, s:o, s:{s:I, s:I}}", "id", c->id, "object", "list", "created",
				       (json_int_t)time(NULL), "model", srv_call_model(c), "data", out, "usage", "prompt_tokens",
				       (json_int_t)tokens, "total_tokens", (json_int_t)tokens)
			   : NULL;
	}
	qsort(v, (size_t)c->n, sizeof *v, by_score);
	const int top = r->top_n ? (int)json_integer_value(r->top_n) : c->n;
	for (int i = 0; out && i < c->n && i < top; i++) {
		json_t *o = json_pack("{s:i, s:f}", "index", v[i].index, "relevance_score", v[i].score);
		if (o && r->return_documents)
			json_object_set_new(o, "document", json_pack("{s:O}", "text", json_array_get(r->docs, (size_t)v[i].index)));
		if (!o || json_array_append_new(out, o)) {
			json_decref(out);
			out = NULL;
		}
	}
	free(v);
	return out ? json_pack("{s:s, s:s, s:s, s:o, s:{s:I, s:I}}", "id", c->id, "object", "list", "model", srv_call_model(c),
			       "results", out, "usage", "prompt_tokens", (json_int_t)tokens, "total_tokens", (json_int_t)tokens)
		   : NULL;
}

static void rank_free(void *st) {
	rank_req *r = st;
	free(r->qids);
	json_decref(r->docs);
	json_decref(r->top_n);
	free(r);
}

static const srv_api rank_srv_api = {.text = srv_text_none, .reply = rank_reply, .free_state = rank_free};

static void rank_run(srv_conn *c, enum rank_shape shape) {
	srv_model *M = c->mdl;
	http_server *s = c->s;
	srv_err e;
	json_t *j = NULL;
	rank_req *r = calloc(1, sizeof *r);
	if (!r) {
		srv_reply_error(c, (srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory"), &e));
		return;
	}
	*r = (rank_req){.shape = shape, .return_documents = true};
	srv_gen_init(&r->g, &rank_api, c);
	int rc = srv_body_read(c, shape == RANK_RERANK ? rerank_fields : score_fields, r, &j, &e);
	if (!rc) rc = srv_check_model(s, r->g.model, &e);
	if (!rc && !M->rank_w) rc = srv_fail(&e, SRV_E_BAD_REQUEST, "model", "%s: /v1/rerank and /v1/score need one", M->rank_why);
	if (!rc && r->top_n && (!json_is_integer(r->top_n) || json_integer_value(r->top_n) < 1))
		rc = srv_fail(&e, SRV_E_BAD_REQUEST, "top_n", "top_n must be an integer of at least 1");
	if (!rc && shape == RANK_SCORE) {
		json_t *q = json_is_array(r->text_1) && json_array_size(r->text_1) == 1 ? json_array_get(r->text_1, 0) : r->text_1;
		if (!json_is_string(q))
			rc = srv_fail(&e, SRV_E_BAD_REQUEST, "text_1", "text_1 must be a string (or an array of one): the query");
		else
			r->query = json_string_value(q);
	}
	if (!rc && shape == RANK_RERANK && !r->query) rc = srv_fail(&e, SRV_E_BAD_REQUEST, "query", "query is required: a string");
	const bool cross = model_hparams_of(M->m)->encoder;
	if (!rc && cross && r->instruction)
		rc = srv_fail(&e, SRV_E_BAD_REQUEST, "instruction", "instruction is for a decoder reranker's prompt: a cross-encoder reads the query and document alone");
	if (!rc) rc = read_docs(M, r, shape == RANK_RERANK ? r->documents : r->text_2, shape == RANK_RERANK ? "documents" : "text_2", &e);
	if (rc) {
		json_decref(j);
		srv_gen_free(&r->g);
		json_decref(r->docs);
		free(r->qids);
		free(r);
		srv_reply_error(c, &e);
		return;
	}
	// a decoder's last position's hidden state, as the output head reads it (a cross-encoder's
	// first, its classifier's input), not normalized
	r->g.lr.embed = cross ? LANE_EMBED_CLS : LANE_EMBED_LAST;
	r->g.lr.normalize = false;
	if (r->top_n) r->top_n = json_integer(json_integer_value(r->top_n)); // a copy: the body goes
	json_t *top = r->top_n;
	r->g.model = NULL;
	r->query = r->instruction = NULL;
	r->documents = r->text_1 = r->text_2 = NULL;
	json_decref(j);
	r->top_n = top;
	srv_gen g = r->g;
	memset(&r->g, 0, sizeof r->g);
	srv_gen_run(c, &rank_srv_api, r, &g, shape == RANK_RERANK ? "rerank-" : "score-");
}

void srv_rerank(srv_conn *c) { rank_run(c, RANK_RERANK); }
void srv_score(srv_conn *c) { rank_run(c, RANK_SCORE); }
