// server: reading request fields — typed getters that name the field at fault, unknown
// parameters, the model check, message contents, stop sequences, and the chat prompt
// (template render plus tokenization) shared by the three chat-style APIs.
#include "server/http_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *type_name(const json_t *v) {
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a number";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	default: return "null";
	}
}

int srv_get_num(json_t *o, const char *key, double lo, double hi, double *out, srv_err *e) {
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) return 0;
	if (!json_is_number(v)) return srv_fail(e, SRV_E_BAD_REQUEST, key, "%s must be a number, got %s", key, type_name(v));
	double x = json_number_value(v);
	if (!isfinite(x) || x < lo || x > hi)
		return srv_fail(e, SRV_E_BAD_REQUEST, key, "%s must be between %g and %g, got %g", key, lo, hi, x);
	*out = x;
	return 1;
}

int srv_get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, srv_err *e) {
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) return 0;
	int64_t x;
	if (json_is_integer(v)) {
		x = json_integer_value(v);
	} else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15) {
		x = (int64_t)json_real_value(v);
	} else {
		return srv_fail(e, SRV_E_BAD_REQUEST, key, "%s must be an integer, got %s", key, type_name(v));
	}
	if (x < lo || x > hi)
		return srv_fail(e, SRV_E_BAD_REQUEST, key, "%s must be between %lld and %lld, got %lld", key, (long long)lo,
				(long long)hi, (long long)x);
	*out = x;
	return 1;
}

int srv_get_bool(json_t *o, const char *key, bool *out, srv_err *e) {
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) return 0;
	if (!json_is_boolean(v)) return srv_fail(e, SRV_E_BAD_REQUEST, key, "%s must be a boolean, got %s", key, type_name(v));
	*out = json_is_true(v);
	return 1;
}

int srv_get_str(json_t *o, const char *key, const char **out, srv_err *e) {
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) return 0;
	if (!json_is_string(v)) return srv_fail(e, SRV_E_BAD_REQUEST, key, "%s must be a string, got %s", key, type_name(v));
	*out = json_string_value(v);
	return 1;
}

int srv_check_keys(json_t *o, const char *const *known, const char *where, srv_err *e) {
	srv_buf names = {0};
	const char *first = NULL, *key;
	json_t *v;
	int n = 0;
	json_object_foreach(o, key, v) {
		bool ok = false;
		for (const char *const *k = known; *k && !ok; k++) ok = !strcmp(*k, key);
		if (ok) continue;
		if (!first) first = key;
		if (n++) srv_buf_adds(&names, ", ");
		srv_buf_adds(&names, key);
	}
	if (!n) return 0;
	char param[96];
	snprintf(param, sizeof param, "%s%s%s", where ? where : "", where ? "." : "", first);
	srv_fail(e, SRV_E_BAD_REQUEST, param, "unsupported parameter%s%s%s: %s", n > 1 ? "s" : "", where ? " in " : "",
		 where ? where : "", names.p ? names.p : "");
	srv_buf_free(&names);
	return -1;
}

int srv_check_model(http_server *s, json_t *o, bool required, srv_err *e) {
	const char *m = NULL;
	int rc = srv_get_str(o, "model", &m, e);
	if (rc < 0) return rc;
	if (!rc) return required ? srv_fail(e, SRV_E_BAD_REQUEST, "model", "model is required") : 0;
	if (strcmp(m, s->model_id)) {
		srv_fail(e, SRV_E_NOT_FOUND, "model", "the model '%s' does not exist: this server serves '%s'", m, s->model_id);
		snprintf(e->code, sizeof e->code, "model_not_found");
		return -1;
	}
	return 0;
}

int srv_content_text(json_t *content, const char *param, const char *const *types, char **out, srv_err *e) {
	*out = NULL;
	if (!content || json_is_null(content)) {
		*out = strdup("");
		return *out ? 0 : srv_fail(e, SRV_E_INTERNAL, param, "out of memory");
	}
	if (json_is_string(content)) {
		*out = strdup(json_string_value(content));
		return *out ? 0 : srv_fail(e, SRV_E_INTERNAL, param, "out of memory");
	}
	if (!json_is_array(content))
		return srv_fail(e, SRV_E_BAD_REQUEST, param, "%s must be a string or an array of text parts, got %s", param,
				type_name(content));
	srv_buf b = {0};
	size_t i;
	json_t *part;
	json_array_foreach(content, i, part) {
		char p[128];
		snprintf(p, sizeof p, "%s[%zu]", param, i);
		const char *ty = json_is_object(part) ? json_string_value(json_object_get(part, "type")) : NULL;
		if (!ty) {
			srv_buf_free(&b);
			return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s must be an object with a \"type\"", p);
		}
		bool ok = false;
		for (const char *const *t = types; *t && !ok; t++) ok = !strcmp(*t, ty);
		if (!ok) {
			srv_buf_free(&b);
			return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.type '%s' is not supported: only text (%s) is", p, ty, types[0]);
		}
		json_t *tx = json_object_get(part, "text");
		if (!json_is_string(tx)) {
			srv_buf_free(&b);
			return srv_fail(e, SRV_E_BAD_REQUEST, p, "%s.text must be a string", p);
		}
		srv_buf_add(&b, json_string_value(tx), json_string_length(tx));
	}
	if (!b.p) srv_buf_add(&b, "", 1), b.len = 0;
	if (b.oom || !b.p) {
		srv_buf_free(&b);
		return srv_fail(e, SRV_E_INTERNAL, param, "out of memory");
	}
	*out = b.p;
	return 0;
}

int srv_get_stops(json_t *o, const char *key, srv_gen *g, srv_err *e) {
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) return 0;
	if (json_is_string(v)) {
		if (!json_string_length(v)) return srv_fail(e, SRV_E_BAD_REQUEST, key, "%s must not be empty", key);
		g->stops[0] = json_string_value(v);
		g->n_stops = 1;
		return 1;
	}
	if (!json_is_array(v)) return srv_fail(e, SRV_E_BAD_REQUEST, key, "%s must be a string or an array of strings", key);
	if (json_array_size(v) > LANE_MAX_STOPS)
		return srv_fail(e, SRV_E_BAD_REQUEST, key, "%s has %zu entries: at most %d", key, json_array_size(v), LANE_MAX_STOPS);
	size_t i;
	json_t *x;
	json_array_foreach(v, i, x) {
		if (!json_is_string(x) || !json_string_length(x) || json_string_length(x) > 1024)
			return srv_fail(e, SRV_E_BAD_REQUEST, key, "%s[%zu] must be a string of 1..1024 bytes", key, i);
		g->stops[g->n_stops++] = json_string_value(x);
	}
	return 1;
}

int srv_chat_prompt(http_server *s, json_t *messages, const char *prefill, int32_t **ids, int32_t *n, srv_err *e) {
	*ids = NULL;
	*n = 0;
	json_t *ctx = json_pack("{s:O, s:s, s:s, s:b}", "messages", messages, "bos_token", s->bos_text, "eos_token",
				s->eos_text, "add_generation_prompt", 1);
	if (!ctx) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	char *text = NULL, err[512];
	size_t len = 0;
	int rc = tmpl_render(s->tmpl, ctx, NULL, &text, &len, err, sizeof err);
	json_decref(ctx);
	if (rc == LANES_ENOMEM) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	if (rc) return srv_fail(e, SRV_E_BAD_REQUEST, "messages", "the chat template failed: %s", err);
	if (prefill && *prefill) {
		size_t pl = strlen(prefill);
		char *t = realloc(text, len + pl + 1);
		if (!t) {
			free(text);
			return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
		}
		memcpy(t + len, prefill, pl + 1);
		text = t;
		len += pl;
	}
	int32_t *v = NULL;
	size_t cnt = 0;
	rc = tok_encode_chat(s->vocab, text, len, &v, &cnt, err, sizeof err);
	free(text);
	if (rc) return srv_fail(e, rc == LANES_ENOMEM ? SRV_E_INTERNAL : SRV_E_BAD_REQUEST, "messages", "%s", err);
	if (cnt > (size_t)INT32_MAX / 2) {
		free(v);
		return srv_fail(e, SRV_E_BAD_REQUEST, "messages", "the prompt is too long");
	}
	*ids = v;
	*n = (int32_t)cnt;
	return 0;
}
