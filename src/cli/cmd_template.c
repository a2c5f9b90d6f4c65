// cli: `lanes template (-m MODEL | --file T.jinja) --messages M.json ...` — renders a chat
// template (the GGUF's tokenizer.chat_template, or a file) and prints the prompt exactly.
#include "base/base.h"
#include "chat/chat.h"
#include "cli/cli.h"
#include "gguf/gguf.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_template(const cli_settings *set) {
	const char *model_path = set->model, *file = set->file, *messages = set->messages;
	if (!model_path == !file) return cli_usage_error(set, "give one of -m MODEL and --file T.jinja");
	char err[1024];
	tok_vocab *v = NULL;
	chat_tmpl ct = {0};
	json_t *msgs = NULL, *vars = NULL;
	int rc = 1;
	if (model_path) {
		gguf *g;
		if (gguf_open(&g, model_path, err, sizeof err) || tok_vocab_load(&v, g, err, sizeof err)) {
			cli_err("%s", err);
			if (!v) gguf_free(g);
			goto done;
		}
		gguf_free(g);
		if (chat_load(&ct, v, NULL, err, sizeof err)) {
			cli_err("%s: %s", model_path, err);
			goto done;
		}
	} else {
		size_t len = 0;
		char *src = cli_read_file(file, &len);
		if (!src) {
			cli_err("cannot read %s", file);
			goto done;
		}
		const int bad = chat_load_src(&ct, NULL, src, len, err, sizeof err);
		free(src);
		if (bad) {
			cli_err("%s: %s", file, err);
			goto done;
		}
	}
	json_error_t je;
	msgs = json_load_file(messages, JSON_ALLOW_NUL, &je);
	if (!msgs) {
		cli_err("%s: line %d: %s", messages, je.line, je.text);
		goto done;
	}
	// an object is the whole context: its variables win over the defaults, the flags over them
	vars = json_is_object(msgs) ? json_deep_copy(msgs) : json_object();
	if (!json_is_array(msgs) && !json_is_object(msgs)) {
		cli_err("%s must hold a JSON array of messages", messages);
		goto done;
	}
	json_t *list = json_is_array(msgs) ? msgs : json_object_get(msgs, "messages");
	json_object_del(vars, "messages");
	json_object_del(vars, "tools");
	if (set->bos) json_object_del(vars, "bos_token");
	if (set->eos) json_object_del(vars, "eos_token");
	if (set->add_generation_prompt) json_object_del(vars, "add_generation_prompt");
	const chat_input in = {.messages = list, .tools = json_is_object(msgs) ? json_object_get(msgs, "tools") : NULL, .kwargs = vars,
			       .add_generation_prompt = set->add_generation_prompt, .date_ymd = set->date, .bos = set->bos, .eos = set->eos,
			       .as_given = true};
	char *out;
	size_t n;
	if (chat_render(&ct, &in, &out, &n, NULL, err, sizeof err)) {
		cli_err("%s", err);
		goto done;
	}
	rc = fwrite(out, 1, n, stdout) == n && fflush(stdout) == 0 ? 0 : 1;
	free(out);
done:
	chat_free(&ct);
	tok_vocab_free(v);
	json_decref(vars);
	json_decref(msgs);
	return rc;
}
