// sample: penalties on a row of logits before the draw — repetition over a window of the
// context, presence and frequency over the generated tokens, and DRY's over repeated sequences.
#include "sample/sample.h"

#include <float.h>
#include <math.h>

void sample_penalize(float *x, int32_t nv, const sample_penalties *p, const int32_t *prompt, int32_t n_prompt,
		     const int32_t *gen, int32_t n_gen, int32_t *counts) {
	if (p->repeat != 1.0f) {
		int64_t total = (int64_t)n_prompt + n_gen;
		int64_t from = p->repeat_last_n > 0 && p->repeat_last_n < total ? total - p->repeat_last_n : 0;
		// each distinct token of the window once, in window order
		for (int64_t i = from; i < total; i++) {
			int32_t t = i < n_prompt ? prompt[i] : gen[i - n_prompt];
			if (t < 0 || t >= nv || counts[t]) continue;
			counts[t] = 1;
			x[t] = x[t] > 0 ? x[t] / p->repeat : x[t] * p->repeat;
		}
		for (int64_t i = from; i < total; i++) {
			int32_t t = i < n_prompt ? prompt[i] : gen[i - n_prompt];
			if (t >= 0 && t < nv) counts[t] = 0;
		}
	}
	if (p->presence != 0.0f || p->frequency != 0.0f) {
		for (int32_t i = 0; i < n_gen; i++)
			if (gen[i] >= 0 && gen[i] < nv) counts[gen[i]]++;
		for (int32_t i = 0; i < n_gen; i++) {
			int32_t t = gen[i];
			if (t < 0 || t >= nv || !counts[t]) continue;
			x[t] -= (float)counts[t] * p->frequency + p->presence;
			counts[t] = 0;
		}
	}
}

void sample_dry_apply(float *x, int32_t nv, const sample_dry *d, const int32_t *prompt, int32_t n_prompt,
		      const int32_t *gen, int32_t n_gen, int32_t *best, int32_t *z) {
	if (d->multiplier == 0.0f || d->last_n == 0) return;
	const int64_t total = (int64_t)n_prompt + n_gen;
	const int64_t L = d->last_n > 0 && d->last_n < total ? d->last_n : total;
	if (L < 2) return;
	// the window reversed: rev[k] is the token k places before the last
	int32_t *rev = z + L;
	for (int64_t k = 0; k < L; k++) {
		const int64_t i = total - 1 - k;
		rev[k] = i < n_prompt ? prompt[i] : gen[i - n_prompt];
	}
	// a match covers only tokens after the last breaker: those are the ones it compares with
	int64_t lim = 0;
	while (lim < L && !(d->breaker && rev[lim] >= 0 && rev[lim] < nv && d->breaker[rev[lim]])) lim++;
	if (lim == 0) return;
	// z[k] (the Z-algorithm): the tokens ending k places back repeat the last z[k], and rev[k - 1] followed them
	int64_t l = 0, r = 0;
	for (int64_t k = 1; k < L; k++) {
		int64_t n = k < r ? (r - k < z[k - l] ? r - k : z[k - l]) : 0;
		while (k + n < L && rev[n] == rev[k + n]) n++;
		if (k + n > r) l = k, r = k + n;
		z[k] = (int32_t)n;
	}
	const int64_t need = d->allowed_length > 1 ? d->allowed_length : 1;
	for (int64_t k = 1; k < L; k++) {
		const int64_t n = z[k] < lim ? z[k] : lim;
		const int32_t t = rev[k - 1];
		if (n < need || t < 0 || t >= nv || (d->breaker && d->breaker[t])) continue;
		if (n > best[t]) best[t] = (int32_t)n;
	}
	for (int64_t k = 1; k < L; k++) {
		const int32_t t = rev[k - 1];
		if (t < 0 || t >= nv || !best[t]) continue;
		// past what a float holds the penalty is the largest float: the token stays finite
		const double pen = (double)d->multiplier * pow((double)d->base, (double)(best[t] - d->allowed_length));
		x[t] -= pen < FLT_MAX ? (float)pen : FLT_MAX;
		best[t] = 0;
	}
}
