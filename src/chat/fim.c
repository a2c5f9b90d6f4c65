// chat/fim: fill-in-the-middle prompts — the code before and after the cursor, and other files
// of the project, framed by the vocabulary's FIM tokens in the order llama-server's /infill uses,
// so a client gets the prompt it was tuned against.
#include "chat/chat.h"
#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	int32_t *p;
	size_t n, cap;
	int rc;
} fim_ids;

static void put(fim_ids *l, int32_t id) {
	if (l->rc) return;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;
		int32_t *p = realloc(l->p, cap * sizeof *p);
		if (!p) {
			l->rc = LANES_ENOMEM;
			return;
		}
		l->p = p, l->cap = cap;
	}
	l->p[l->n++] = id;
}

// Text tokenized with no BOS or EOS; special tokens parsed only where the client types them.
static void put_text(fim_ids *l, const tok_vocab *v, const char *text, size_t len, bool special, char *err, size_t errlen) {
	if (l->rc || !len) return;
	int32_t *ids = NULL;
	size_t n = 0;
	if ((l->rc = tok_encode(v, text, len, false, special, &ids, &n, err, errlen))) return;
	for (size_t i = 0; i < n; i++) put(l, ids[i]);
	free(ids);
}

static void put_str(fim_ids *l, const tok_vocab *v, const char *s, char *err, size_t errlen) { put_text(l, v, s, strlen(s), false, err, errlen); }

bool chat_fim_supported(const tok_vocab *v) {
	return tok_fim(v, TOK_FIM_PRE) >= 0 && tok_fim(v, TOK_FIM_SUF) >= 0 && tok_fim(v, TOK_FIM_MID) >= 0;
}

int chat_fim_prompt(const tok_vocab *v, const chat_fim *f, int32_t **ids, size_t *n, char *err, size_t errlen) {
	*ids = NULL, *n = 0;
	if (!chat_fim_supported(v)) {
		static const char *const names[] = {"prefix", "suffix", "middle"};
		char miss[64] = "";
		for (int k = 0; k < 3; k++)
			if (tok_fim(v, (enum tok_fim)k) < 0) snprintf(miss + strlen(miss), sizeof miss - strlen(miss), "%s%s", *miss ? ", " : "", names[k]);
		return base_seterr(err, errlen, LANES_EUNSUPPORTED, "this model has no fill-in-the-middle tokens (missing: %s)", miss);
	}
	const int32_t rep = tok_fim(v, TOK_FIM_REP), sep = tok_fim(v, TOK_FIM_SEP);
	fim_ids l = {0};
	if (tok_add_bos(v) && tok_bos(v) >= 0) put(&l, tok_bos(v));
	const bool framed = f->repo || f->n_extra;
	// the repository and file names llama-server writes, as the models were tuned on such framing
	if (framed && rep >= 0) put(&l, rep), put_str(&l, v, "myproject\n", err, errlen);
	for (size_t k = 0; k < f->n_extra; k++) {
		const chat_fim_file *x = &f->extra[k];
		if (sep >= 0) {
			// the name and its line end tokenized together, as llama-server does
			const size_t len = x->filename ? x->filename_len : 3;
			char *name = malloc(len + 2);
			if (!name) {
				l.rc = LANES_ENOMEM;
				break;
			}
			memcpy(name, x->filename ? x->filename : "tmp", len);
			name[len] = '\n', name[len + 1] = 0;
			put(&l, sep);
			put_text(&l, v, name, len + 1, false, err, errlen);
			free(name);
		} else {
			put_str(&l, v, "\n\n--- snippet ---\n\n", err, errlen);
		}
		put_text(&l, v, x->text, x->text_len, false, err, errlen);
	}
	if (framed && sep >= 0) put(&l, sep), put_str(&l, v, "filename\n", err, errlen);
	put(&l, tok_fim(v, TOK_FIM_PRE));
	put_text(&l, v, f->prefix, f->prefix_len, false, err, errlen);
	if (f->middle_ids)
		for (size_t i = 0; i < f->n_middle_ids; i++) put(&l, f->middle_ids[i]);
	else
		put_text(&l, v, f->middle, f->middle_len, true, err, errlen);
	put(&l, tok_fim(v, TOK_FIM_SUF));
	put_text(&l, v, f->suffix, f->suffix_len, false, err, errlen);
	put(&l, tok_fim(v, TOK_FIM_MID));
	if (l.rc) {
		free(l.p);
		if (l.rc == LANES_ENOMEM) base_seterr(err, errlen, l.rc, "out of memory");
		return l.rc;
	}
	*ids = l.p, *n = l.n;
	return 0;
}
