// template: chat templates — a Jinja2 subset interpreter that renders Hugging Face
// chat templates byte for byte as Jinja2 3.1 does for apply_chat_template (trim_blocks,
// lstrip_blocks, immutable sandbox, raise_exception, strftime_now, HF's tojson).
#ifndef LANES_TEMPLATE_H
#define LANES_TEMPLATE_H

#include <jansson.h> // the render context is a JSON object
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// A compiled template. Immutable after compile: any number of threads may render it at once.
typedef struct tmpl tmpl;

// Bounds on one render; a render that would pass one stops with LANES_ELIMIT and a message.
typedef struct {
	int64_t max_steps;  // evaluation steps: nodes visited plus work done inside filters/methods
	int64_t max_output; // bytes of rendered text (also bounds every captured block or macro result)
	int64_t max_memory; // bytes of scratch memory the render may allocate
	int max_calls;      // nesting of macro calls (recursion)
} tmpl_limits;

// Defaults: 10M steps, 16 MiB output, 128 MiB memory, 100 nested macro calls.
void tmpl_default_limits(tmpl_limits *l);

// Parses src (len bytes, need not be NUL-terminated; at most 1 MiB). On success *out owns the
// template (free with tmpl_free) and 0 is returned. On a syntax error returns LANES_EFORMAT
// (LANES_ELIMIT when the template is too large or nests too deeply) with "line N: message"
// in err.
int tmpl_compile(tmpl **out, const char *src, size_t len, char *err, size_t errlen);
void tmpl_free(tmpl *t); // accepts NULL
// Replaces t's limits (t keeps a copy). Not thread-safe against concurrent renders of t.
void tmpl_set_limits(tmpl *t, const tmpl_limits *l);

// Renders t with the variables of context (a JSON object: messages, bos_token, eos_token,
// add_generation_prompt, tools, ...; NULL for none). date_ymd ("2026-12-02") is the date
// strftime_now() formats (at 00:00:00); NULL means the local date now.
// On success *out is a malloc'd NUL-terminated string (free() it) of *out_len bytes and 0 is
// returned. On failure returns a negative code and a message in err: LANES_EINVAL for errors
// the template reports (raise_exception's message verbatim, "'x' is undefined", type errors),
// LANES_ELIMIT when a limit stops it, LANES_ENOMEM when memory runs out.
int tmpl_render(const tmpl *t, const json_t *context, const char *date_ymd, char **out,
		size_t *out_len, char *err, size_t errlen);

// Compiles src (NUL-terminated) and renders it with messages (a JSON array of {role, content,
// ...}), bos/eos token text (NULL means ""), and add_generation_prompt. Returns as tmpl_render.
int tmpl_render_chat(const char *src, const json_t *messages, const char *bos, const char *eos,
		     bool add_generation_prompt, const char *date_ymd, char **out, size_t *out_len,
		     char *err, size_t errlen);

// A ChatML template (<|im_start|>role\ncontent<|im_end|>\n ...) for models whose GGUF has no
// tokenizer.chat_template. Static storage.
const char *tmpl_chatml(void);

// The plain fallback for a model with neither a template nor ChatML's tokens (a story model):
// the turns' texts one after the other, a space between two where the text needs one, no roles
// and no generation prompt, so the model continues the conversation as its own text. A single
// user turn renders as exactly its text. Static storage.
const char *tmpl_plain(void);

#endif
