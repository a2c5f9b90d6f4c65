// cli: `lanes template (-m MODEL | --file T.jinja) --messages M.json ...` — renders a chat
// template (the GGUF's tokenizer.chat_template, or a file) and prints the prompt exactly.
#include "base/base.h"
#include "cli/cli.h"
#include "gguf/gguf.h"
#include "template/template.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The text of token number key_id (tokenizer.ggml.bos_token_id / eos_token_id); NULL if absent.
static char *token_text(const gguf *g, const char *key_id) {
	int64_t id;
	if (gguf_get_i64(g, key_id, &id)) return NULL;
	const gguf_value *toks = gguf_get_arr(g, "tokenizer.ggml.tokens");
	if (!toks || toks->arr.type != GGUF_STRING || id < 0 || (uint64_t)id >= toks->arr.n) return NULL;
	return gguf_str_dup(gguf_arr_str(toks, (uint64_t)id));
}

int cmd_template(const cli_settings *set) {
	const char *model_path = set->model, *file = set->file, *messages = set->messages, *bos = set->bos, *eos = set->eos;
	const bool gen = set->add_generation_prompt;
	if (!model_path == !file) return cli_usage_error(set, "give one of -m MODEL and --file T.jinja");
	char err[1024];
	char *src = NULL, *model_bos = NULL, *model_eos = NULL;
	size_t len = 0;
	if (model_path) {
		gguf *g;
		if (gguf_open(&g, model_path, err, sizeof err)) {
			cli_err("%s", err);
			return 1;
		}
		gguf_str s;
		if (gguf_get_str(g, "tokenizer.chat_template", &s) == 0) {
			src = gguf_str_dup(s);
			len = src ? strlen(src) : 0;
		} else {
			LOG_INFO("template", "%s has no tokenizer.chat_template; using ChatML", model_path);
			src = strdup(tmpl_chatml());
			len = strlen(tmpl_chatml());
		}
		model_bos = token_text(g, "tokenizer.ggml.bos_token_id");
		model_eos = token_text(g, "tokenizer.ggml.eos_token_id");
		gguf_free(g);
	} else {
		src = cli_read_file(file, &len);
		if (!src) {
			cli_err("cannot read %s", file);
			return 1;
		}
	}
	int rc = 1;
	json_error_t je;
	json_t *msgs = json_load_file(messages, JSON_ALLOW_NUL, &je), *ctx = NULL;
	tmpl *t = NULL;
	if (!msgs) {
		cli_err("%s: line %d: %s", messages, je.line, je.text);
		goto done;
	}
	if (json_is_array(msgs)) {
		ctx = json_object();
		json_object_set(ctx, "messages", msgs);
	} else if (json_is_object(msgs)) {
		ctx = json_incref(msgs);
	} else {
		cli_err("%s must hold a JSON array of messages", messages);
		goto done;
	}
	if (!json_object_get(ctx, "bos_token") || bos)
		json_object_set_new(ctx, "bos_token", json_string(bos ? bos : model_bos ? model_bos : ""));
	if (!json_object_get(ctx, "eos_token") || eos)
		json_object_set_new(ctx, "eos_token", json_string(eos ? eos : model_eos ? model_eos : ""));
	if (!json_object_get(ctx, "add_generation_prompt") || gen)
		json_object_set_new(ctx, "add_generation_prompt", json_boolean(gen));
	if (tmpl_compile(&t, src, len, err, sizeof err)) {
		cli_err("%s: %s", model_path ? model_path : file, err);
		goto done;
	}
	char *out;
	size_t n;
	if (tmpl_render(t, ctx, set->date, &out, &n, err, sizeof err)) {
		cli_err("%s", err);
		goto done;
	}
	rc = fwrite(out, 1, n, stdout) == n && fflush(stdout) == 0 ? 0 : 1;
	free(out);
done:
	tmpl_free(t);
	json_decref(ctx);
	json_decref(msgs);
	free(src);
	free(model_bos);
	free(model_eos);
	return rc;
}
