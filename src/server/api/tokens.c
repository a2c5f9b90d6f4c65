// server/api/tokens: the tokenizer utilities — POST /tokenize (text, or chat messages rendered
// as /v1/chat/completions renders them) and POST /detokenize.
#include "server/gen/gen.h"
#include "server/routes.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	const char *content;
	json_t *messages;
	bool add_special, parse_special;
} tokenize_req;

static const srv_field tokenize_fields[] = {
	SRV_ROW(tokenize_req, content, SRV_K_STR),
	SRV_ROW(tokenize_req, messages, SRV_K_JSON),
	SRV_ROW(tokenize_req, add_special, SRV_K_BOOL),
	SRV_ROW(tokenize_req, parse_special, SRV_K_BOOL),
	SRV_IGNORED_AS("model", STR),
	{0},
};

typedef struct {
	json_t *tokens;
} detokenize_req;

static const srv_field detokenize_fields[] = {
	SRV_ROW(detokenize_req, tokens, SRV_K_JSON),
	SRV_IGNORED_AS("model", STR),
	{0},
};

// Tokenizing costs tens of times its text in memory and time: a limit of its own, checked
// before the body is parsed.
static int small_enough(srv_conn *c, srv_err *e) {
	size_t lim = c->s->cfg.max_tokenize_bytes;
	if (c->body.len <= lim) return 0;
	return srv_fail(e, SRV_E_TOO_LARGE, NULL, "the body of %s (%zu bytes) is larger than its limit of %zu bytes (%s)", c->path,
			c->body.len, lim, HTTP_SETTING(&c->s->cfg, max_tokenize_bytes));
}

void srv_tokenize(srv_conn *c) {
	srv_model *M = c->mdl;
	srv_err e;
	json_t *j = NULL;
	int32_t *ids = NULL;
	size_t n = 0;
	tokenize_req r = {.parse_special = true};
	if (small_enough(c, &e) || srv_parse_body(c, &j, &e) || srv_fields_known(j, tokenize_fields, NULL, &e) ||
	    srv_fields_read(j, tokenize_fields, &r, NULL, NULL, NULL, &e))
		goto fail;
	const char *content = r.content;
	if (r.messages) {
		json_t *flat = NULL;
		int32_t n32 = 0;
		if (content) {
			srv_fail(&e, SRV_E_BAD_REQUEST, "messages", "send content or messages, not both");
			goto fail;
		}
		if (srv_check_parts(M, r.messages, "messages", &e) || srv_openai_messages(r.messages, c, &flat, &e)) goto fail;
		int rc = srv_chat_prompt(M, flat, NULL, "messages", NULL, &ids, &n32, &e);
		json_decref(flat);
		if (rc || srv_ignored_refuse(c, &e)) goto fail;
		n = (size_t)n32;
	} else {
		if (!content) {
			srv_fail(&e, SRV_E_BAD_REQUEST, "content", "content is required (a string)");
			goto fail;
		}
		char err[256];
		int rc = tok_encode(M->vocab, content, strlen(content), r.add_special, r.parse_special, &ids, &n, err, sizeof err);
		if (rc) {
			srv_fail(&e, srv_kind_of(rc, SRV_BLAME_REQUEST), "content", "%s", err);
			goto fail;
		}
	}
	json_decref(j);
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
	free(ids);
	srv_reply_json(c, 200, arr ? json_pack("{s:o}", "tokens", arr) : NULL, 0);
	return;
fail:
	json_decref(j);
	free(ids);
	srv_reply_error(c, &e);
}

void srv_detokenize(srv_conn *c) {
	srv_model *M = c->mdl;
	srv_err e;
	json_t *j = NULL;
	int32_t *ids = NULL;
	detokenize_req r = {0};
	if (small_enough(c, &e) || srv_parse_body(c, &j, &e) || srv_fields_known(j, detokenize_fields, NULL, &e) ||
	    srv_fields_read(j, detokenize_fields, &r, NULL, NULL, NULL, &e))
		goto fail;
	json_t *t = r.tokens;
	if (!json_is_array(t)) {
		srv_fail(&e, SRV_E_BAD_REQUEST, "tokens", "tokens must be an array of token ids");
		goto fail;
	}
	size_t n = json_array_size(t);
	ids = malloc((n ? n : 1) * sizeof *ids);
	if (!ids) {
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(t, i);
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= M->n_vocab) {
			char p[48];
			snprintf(p, sizeof p, "tokens[%zu]", i);
			srv_fail(&e, SRV_E_BAD_REQUEST, p, "%s must be a token id in 0..%d", p, M->n_vocab - 1);
			goto fail;
		}
		ids[i] = (int32_t)json_integer_value(v);
	}
	char *out = NULL, err[256];
	size_t len = 0;
	int rc = tok_detokenize(M->vocab, ids, n, TOK_DECODE_STRIP_SPACE, &out, &len, err, sizeof err);
	if (rc) {
		srv_fail(&e, srv_kind_of(rc, SRV_BLAME_REQUEST), "tokens", "%s", err);
		goto fail;
	}
	json_decref(j);
	free(ids);
	json_t *body = json_pack("{s:s%}", "content", out, len);
	free(out);
	srv_reply_json(c, 200, body, 0);
	return;
fail:
	json_decref(j);
	free(ids);
	srv_reply_error(c, &e);
}
