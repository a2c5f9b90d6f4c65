// tokenizer/detok: ids to text. The streaming decoder assembles token bytes into UTF-8,
// holding a sequence cut at a token boundary until it completes and replacing bytes that can
// never be UTF-8 with U+FFFD; tok_detokenize runs one over a whole sequence.
#include "tokenizer/tok_impl.h"

#include <stdlib.h>
#include <string.h>

struct tok_stream {
	const tok_vocab *v;
	unsigned flags;
	bool strip;        // the SPM prefix space is still to be dropped
	uint8_t held[4];   // start of a UTF-8 sequence cut at a token boundary
	size_t n_held;
	uint8_t *in;       // held bytes + the token's bytes
	size_t in_cap;
	char *out;
	size_t n_out, out_cap;
};

static bool strip_applies(const tok_vocab *v, unsigned flags) {
	return (flags & TOK_DECODE_STRIP_SPACE) && (v->model == TOK_MODEL_SPM || v->model == TOK_MODEL_UGM) && v->add_space_prefix;
}

tok_stream *tok_stream_new(const tok_vocab *v, unsigned flags) {
	tok_stream *s = calloc(1, sizeof *s);
	if (!s) return NULL;
	s->v = v;
	s->flags = flags;
	s->strip = strip_applies(v, flags);
	return s;
}

void tok_stream_free(tok_stream *s) {
	if (!s) return;
	free(s->in);
	free(s->out);
	free(s);
}

size_t tok_stream_pending(const tok_stream *s) { return s->n_held; }

static int reserve(void **p, size_t *cap, size_t need) {
	if (need <= *cap) return 0;
	size_t c = *cap ? *cap : 256;
	while (c < need) c *= 2;
	void *np = realloc(*p, c);
	if (!np) return LANES_ENOMEM;
	*p = np;
	*cap = c;
	return 0;
}

static void put_fffd(tok_stream *s) {
	memcpy(s->out + s->n_out, "\xEF\xBF\xBD", 3);
	s->n_out += 3;
}

// Appends b[0..n) to the output as UTF-8. Ill-formed bytes become U+FFFD (one per maximal
// ill-formed prefix, as Unicode recommends); a well-formed but unfinished sequence at the end
// is held, or replaced when final.
static int feed(tok_stream *s, const uint8_t *b, size_t n, bool final) {
	if (reserve((void **)&s->out, &s->out_cap, s->n_out + 3 * n + 4)) return LANES_ENOMEM;
	size_t i = 0;
	s->n_held = 0;
	while (i < n) {
		size_t need, p = tok_utf8_prefix(b + i, n - i, &need);
		if (need && p == need) { // a whole character
			memcpy(s->out + s->n_out, b + i, need);
			s->n_out += need;
			i += need;
		} else if (need && i + p == n && !final) { // cut short by the end of the input: hold it
			memcpy(s->held, b + i, p);
			s->n_held = p;
			i = n;
		} else { // ill-formed (or cut short at the very end): the next byte starts over
			put_fffd(s);
			i += p ? p : 1;
		}
	}
	return 0;
}

// Appends token id's text to the output (not clearing what is there).
static int stream_add(tok_stream *s, int32_t id) {
	size_t pl;
	const char *p = tok_piece(s->v, id, s->flags, &pl);
	if (!p) return LANES_ERANGE;
	if (s->strip && pl) { // tokens that render nothing (BOS) leave the strip for later
		if (p[0] == ' ') p++, pl--;
		s->strip = false;
	}
	if (!pl) return 0;
	if (reserve((void **)&s->in, &s->in_cap, s->n_held + pl)) return LANES_ENOMEM;
	memcpy(s->in, s->held, s->n_held);
	memcpy(s->in + s->n_held, p, pl);
	return feed(s, s->in, s->n_held + pl, false);
}

int tok_stream_push(tok_stream *s, int32_t id, const char **out, size_t *n) {
	s->n_out = 0;
	*out = "";
	*n = 0;
	if (id < 0 || id >= s->v->n_tokens) return LANES_ERANGE;
	int rc = stream_add(s, id);
	if (rc) return rc;
	*out = s->out ? s->out : "";
	*n = s->n_out;
	return 0;
}

static int stream_end(tok_stream *s) {
	uint8_t h[4];
	size_t nh = s->n_held;
	memcpy(h, s->held, nh);
	int rc = feed(s, h, nh, true);
	s->strip = strip_applies(s->v, s->flags);
	return rc;
}

int tok_stream_flush(tok_stream *s, const char **out, size_t *n) {
	s->n_out = 0;
	*out = "";
	*n = 0;
	int rc = stream_end(s);
	if (rc) return rc;
	*out = s->out ? s->out : "";
	*n = s->n_out;
	return 0;
}

int tok_detokenize(const tok_vocab *v, const int32_t *ids, size_t n, unsigned flags, char **out,
		   size_t *len, char *err, size_t errlen) {
	*out = NULL;
	*len = 0;
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= v->n_tokens)
			return base_seterr(err, errlen, LANES_ERANGE, "token %zu is %d, outside the vocabulary (0..%d)", i,
					    ids[i], v->n_tokens - 1);
	tok_stream *s = tok_stream_new(v, flags);
	int rc = s ? 0 : LANES_ENOMEM;
	for (size_t i = 0; !rc && i < n; i++) rc = stream_add(s, ids[i]);
	if (!rc) rc = stream_end(s);
	if (!rc) rc = reserve((void **)&s->out, &s->out_cap, s->n_out + 1);
	if (rc) {
		tok_stream_free(s);
		return base_seterr(err, errlen, rc, "out of memory");
	}
	s->out[s->n_out] = 0;
	*out = s->out;
	*len = s->n_out;
	s->out = NULL;
	tok_stream_free(s);
	return 0;
}
