// lanes: reasoning — a request's thinking section followed on its own text (the open marker at
// the reply's start, or the prompt's; the close marker), its thinking tokens counted, and at its
// budget the close marker's tokens taken in place of draws. All of it is a function of the
// request's own tokens, so it holds solo, concurrent, in pieces, cached and drafted.
#include "lanes/lanes_int.h"

#include <stdio.h>
#include <string.h>

int lane_think_check(const lane_request *q, int32_t n_vocab, char *err, size_t errlen) {
	const lane_think *t = q->think;
	if (!t) return 0;
	if (q->embed != LANE_EMBED_OFF) return base_seterr(err, errlen, LANES_EINVAL, "an embedding request does not think");
	const size_t ol = t->open ? strlen(t->open) : 0, cl = t->close ? strlen(t->close) : 0;
	if (ol < 1 || ol > LANE_THINK_MARKER || cl < 1 || cl > LANE_THINK_MARKER)
		return base_seterr(err, errlen, LANES_EINVAL, "the thinking markers must be 1..%d bytes", LANE_THINK_MARKER);
	if (t->budget < -1) return base_seterr(err, errlen, LANES_EINVAL, "the thinking budget must be -1 (none) or at least 0");
	if (t->budget >= 0 && (t->n_end_ids < 1 || t->n_end_ids > LANE_THINK_END || !t->end_ids))
		return base_seterr(err, errlen, LANES_EINVAL, "a thinking budget needs 1..%d end tokens", LANE_THINK_END);
	for (int32_t i = 0; t->budget >= 0 && i < t->n_end_ids; i++)
		if (t->end_ids[i] < 0 || t->end_ids[i] >= n_vocab)
			return base_seterr(err, errlen, LANES_EINVAL, "thinking end token %d is not in the vocabulary", t->end_ids[i]);
	return 0;
}

// The budget is spent: the end tokens come next.
static void force_at_budget(lane_req *r) {
	if (r->th.phase == LANE_TH_IN && r->th.budget >= 0 && r->th.count >= r->th.budget && r->th.n_end) {
		r->th.phase = LANE_TH_FORCE;
		r->th.forced = 0;
	}
}

void lane_think_attach(lane_req *r, const lane_request *q) {
	memset(&r->th, 0, sizeof r->th);
	const lane_think *t = q->think;
	if (!t) return;
	snprintf(r->th.open, sizeof r->th.open, "%s", t->open);
	snprintf(r->th.close, sizeof r->th.close, "%s", t->close);
	r->th.budget = t->budget;
	if (t->budget >= 0) {
		memcpy(r->th.end, t->end_ids, (size_t)t->n_end_ids * sizeof *t->end_ids);
		r->th.n_end = t->n_end_ids;
	}
	// under a grammar a section is looked for only where the prompt opened it: the grammar's
	// first token cannot wait to see whether the reply opens one
	r->th.phase = t->inside ? LANE_TH_IN : q->grammar ? LANE_TH_AFTER : LANE_TH_BEFORE;
	force_at_budget(r);
}

int32_t lane_think_forced(const lane_req *r) { return r->th.phase == LANE_TH_FORCE ? r->th.end[r->th.forced] : -1; }

bool lane_think_holds(const lane_req *r) { return r->th.phase != LANE_TH_OFF && r->th.phase != LANE_TH_AFTER; }

// One byte of thinking: true when it completes the close marker.
static bool close_byte(lane_req *r, char c) {
	const size_t cl = strlen(r->th.close);
	if (r->th.n_buf == cl) memmove(r->th.buf, r->th.buf + 1, --r->th.n_buf);
	r->th.buf[r->th.n_buf++] = c;
	return r->th.n_buf == cl && !memcmp(r->th.buf, r->th.close, cl);
}

void lane_think_took(lane_req *r, const char *t, size_t n) {
	switch (r->th.phase) {
	case LANE_TH_FORCE:
		if (++r->th.forced == r->th.n_end) r->th.phase = LANE_TH_AFTER;
		return;
	case LANE_TH_IN:
		r->th.count++;
		for (size_t i = 0; i < n; i++)
			if (close_byte(r, t[i])) {
				r->th.phase = LANE_TH_AFTER;
				return;
			}
		force_at_budget(r);
		return;
	case LANE_TH_BEFORE: {
		// leading whitespace, then the open marker, or no section at all
		const size_t ol = strlen(r->th.open);
		size_t i = 0;
		for (; i < n && r->th.phase == LANE_TH_BEFORE; i++) {
			if (!r->th.n_buf && (t[i] == ' ' || t[i] == '\n' || t[i] == '\t' || t[i] == '\r')) continue;
			if (t[i] != r->th.open[r->th.n_buf]) r->th.phase = LANE_TH_AFTER;
			else if (++r->th.n_buf == ol) r->th.phase = LANE_TH_IN, r->th.n_buf = 0;
		}
		// what this token holds past the open marker is thinking already
		for (; i < n && r->th.phase == LANE_TH_IN; i++)
			if (close_byte(r, t[i])) r->th.phase = LANE_TH_AFTER;
		force_at_budget(r);
		return;
	}
	default:
		return;
	}
}
