// learn/example: training examples — token ids with the tokens to learn marked — from ids, from
// a prompt and its completion, or from a conversation rendered by the chat template (the
// assistant turns learned). Turn boundaries are found on tokens: the ids a prefix renders to
// are compared with the whole conversation's, so a token spanning a seam is never split.
#include "learn/learn_int.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int make(learn_example **out, const int32_t *ids, const uint8_t *flags, int64_t n, char *err, size_t errlen) {
	*out = NULL;
	if (n < 2 || n > INT32_MAX) return base_seterr(err, errlen, LANES_EINVAL, "learn: an example has 2 or more tokens, not %lld", (long long)n);
	int64_t learned = 0;
	for (int64_t i = 1; i < n; i++) learned += flags[i] != 0;
	if (!learned) return base_seterr(err, errlen, LANES_EINVAL, "learn: the example has no token to learn");
	learn_example *e = learn_calloc(1, sizeof *e);
	if (e) {
		e->ids = learn_malloc((size_t)n * sizeof *e->ids);
		e->learn = learn_malloc((size_t)n);
	}
	if (!e || !e->ids || !e->learn) {
		learn_example_free(e);
		return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory for an example");
	}
	e->n = n;
	e->n_learned = learned;
	memcpy(e->ids, ids, (size_t)n * sizeof *ids);
	e->learn[0] = 0;
	for (int64_t i = 1; i < n; i++) e->learn[i] = flags[i] != 0;
	*out = e;
	return LANES_OK;
}

int learn_example_ids(learn_example **out, const int32_t *ids, const bool *learn, int64_t n, char *err, size_t errlen) {
	*out = NULL;
	if (n < 2) return base_seterr(err, errlen, LANES_EINVAL, "learn: an example has 2 or more tokens, not %lld", (long long)n);
	uint8_t *f = learn_malloc((size_t)n);
	if (!f) return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
	for (int64_t i = 0; i < n; i++) f[i] = learn[i];
	int rc = make(out, ids, f, n, err, errlen);
	free(f);
	return rc;
}

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
	size_t i = 0;
	while (i < na && i < nb && a[i] == b[i]) i++;
	return i;
}

// Text of len bytes that cannot encode to max_tokens tokens or fewer (max_tokens > 0).
static int too_long(const tok_vocab *v, size_t len, int64_t max_tokens, char *err, size_t errlen) {
	if (max_tokens <= 0 || len / (tok_max_text_len(v) + 1) < (size_t)max_tokens) return 0;
	return base_seterr(err, errlen, LANES_EINVAL, "learn: the example's text (%zu bytes) cannot fit in %lld tokens", len,
			   (long long)max_tokens);
}

static int too_many(int64_t n, int64_t max_tokens, char *err, size_t errlen) {
	if (max_tokens <= 0 || n <= max_tokens) return 0;
	return base_seterr(err, errlen, LANES_EINVAL, "learn: the example has %lld tokens: a step takes examples of %lld at most",
			   (long long)n, (long long)max_tokens);
}

int learn_example_text(learn_example **out, const tok_vocab *v, const char *prompt, const char *completion, int64_t max_tokens,
		       char *err, size_t errlen) {
	*out = NULL;
	const size_t pl = strlen(prompt), cl = strlen(completion);
	if (too_long(v, pl + cl, max_tokens, err, errlen)) return LANES_EINVAL;
	char *full = learn_malloc(pl + cl + 1);
	int32_t *pi = NULL, *fi = NULL;
	uint8_t *f = NULL;
	size_t pn = 0, fn = 0;
	int rc;
	if (!full) return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
	memcpy(full, prompt, pl);
	memcpy(full + pl, completion, cl + 1);
	if ((rc = tok_encode(v, prompt, pl, true, true, &pi, &pn, err, errlen)) ||
	    (rc = tok_encode(v, full, pl + cl, true, true, &fi, &fn, err, errlen)) || (rc = too_many((int64_t)fn, max_tokens, err, errlen)))
		goto done;
	const int32_t eos = tok_eos(v);
	const bool add_eos = eos >= 0 && !(fn && fi[fn - 1] == eos);
	const size_t n = fn + (add_eos ? 1 : 0), s = common_prefix(pi, pn, fi, fn);
	int32_t *ids = learn_malloc((n ? n : 1) * sizeof *ids);
	f = learn_calloc(n ? n : 1, 1);
	if (!ids || !f) {
		free(ids);
		rc = base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
		goto done;
	}
	if (fn) memcpy(ids, fi, fn * sizeof *ids);
	if (add_eos) ids[fn] = eos;
	for (size_t i = s; i < n; i++) f[i] = 1;
	rc = make(out, ids, f, (int64_t)n, err, errlen);
	free(ids);
done:
	free(full);
	free(pi);
	free(fi);
	free(f);
	return rc;
}

// The ids of the first k messages rendered as the server renders a chat.
static int render(const chat_tmpl *c, const json_t *messages, size_t k, bool gen, int32_t **ids, size_t *n, size_t *text_len, char *err,
		  size_t errlen) {
	*ids = NULL;
	json_t *part = json_array();
	int rc = !part ? LANES_ENOMEM : 0;
	for (size_t i = 0; i < k && !rc; i++)
		if (json_array_append(part, json_array_get(messages, i))) rc = LANES_ENOMEM;
	if (rc) {
		json_decref(part);
		return base_seterr(err, errlen, rc, "learn: out of memory");
	}
	const chat_input in = {.messages = part, .add_generation_prompt = gen};
	char msg[512], *text = NULL;
	size_t len = 0;
	rc = chat_render(c, &in, &text, &len, NULL, msg, sizeof msg);
	if (!rc) rc = tok_encode_chat(c->v, text, len, ids, n, msg, sizeof msg);
	if (!rc && text_len) *text_len = len;
	free(text);
	json_decref(part);
	if (rc) rc = base_seterr(err, errlen, rc == LANES_ENOMEM ? rc : LANES_EINVAL, "learn: %s", msg);
	return rc;
}

// Bytes of a message's text: its content string, or its parts' texts.
static size_t message_bytes(const json_t *m) {
	const json_t *c = json_object_get(m, "content");
	if (json_is_string(c)) return json_string_length(c);
	size_t n = 0, i;
	const json_t *part;
	json_array_foreach(c, i, part) n += json_string_length(json_object_get(part, "text"));
	return n;
}

int learn_example_chat(learn_example **out, const chat_tmpl *c, const json_t *messages, int64_t max_tokens, char *err, size_t errlen) {
	*out = NULL;
	const tok_vocab *v = c->v;
	const size_t nm = json_array_size(messages);
	if (!json_is_array(messages) || !nm) return base_seterr(err, errlen, LANES_EINVAL, "learn: messages must be a non-empty array");
	if (max_tokens > 0 && (int64_t)nm > max_tokens)
		return base_seterr(err, errlen, LANES_EINVAL, "learn: %zu messages cannot fit in %lld tokens", nm, (long long)max_tokens);
	size_t bytes = 0, turns = 0;
	for (size_t i = 0; i < nm; i++) {
		const json_t *m = json_array_get(messages, i);
		bytes += message_bytes(m);
		turns += !strcmp(json_string_value(json_object_get(m, "role")) ? json_string_value(json_object_get(m, "role")) : "", "assistant");
	}
	if (too_long(v, bytes, max_tokens, err, errlen)) return LANES_EINVAL;
	int32_t *full = NULL, *part = NULL;
	uint8_t *f = NULL;
	size_t fn = 0, pn = 0;
	size_t text_len = 0;
	int rc = render(c, messages, nm, false, &full, &fn, &text_len, err, errlen);
	if (!rc) rc = too_many((int64_t)fn, max_tokens, err, errlen);
	// each assistant turn renders its prefix twice: bounded before that work starts
	if (!rc && max_tokens > 0 && turns > LEARN_RENDER_BUDGET / 2 / (text_len + 1))
		rc = base_seterr(err, errlen, LANES_EINVAL, "learn: %zu assistant turns over %zu bytes of conversation are too many to learn from",
				 turns, text_len);
	if (!rc && !(f = learn_calloc(fn ? fn : 1, 1))) rc = base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
	for (size_t i = 0; i < nm && !rc; i++) {
		const json_t *m = json_array_get(messages, i);
		const char *role = json_string_value(json_object_get(m, "role"));
		if (!json_is_object(m) || !role) {
			rc = base_seterr(err, errlen, LANES_EINVAL, "learn: message %zu has no role", i);
			break;
		}
		if (strcmp(role, "assistant")) continue;
		// the turn runs from where the prompt for it ends to where its own rendering ends
		if ((rc = render(c, messages, i, true, &part, &pn, NULL, err, errlen))) break;
		const size_t s = common_prefix(part, pn, full, fn);
		free(part);
		part = NULL;
		if ((rc = render(c, messages, i + 1, false, &part, &pn, NULL, err, errlen))) break;
		const size_t e = common_prefix(part, pn, full, fn);
		free(part);
		part = NULL;
		for (size_t k = s; k < e; k++) f[k] = 1;
	}
	if (!rc) {
		bool any = false;
		for (size_t k = 1; k < fn; k++) any |= f[k] != 0;
		rc = any ? make(out, full, f, (int64_t)fn, err, errlen)
			 : base_seterr(err, errlen, LANES_EINVAL, "learn: the conversation has no assistant turn to learn");
	}
	free(full);
	free(part);
	free(f);
	return rc;
}

void learn_example_free(learn_example *e) {
	if (!e) return;
	free(e->ids);
	free(e->learn);
	free(e);
}

int64_t learn_example_tokens(const learn_example *e) { return e->n; }
int64_t learn_example_learned(const learn_example *e) { return e->n_learned; }
const int32_t *learn_example_ids_of(const learn_example *e) { return e->ids; }
bool learn_example_is_learned(const learn_example *e, int64_t i) { return i >= 0 && i < e->n && e->learn[i]; }
