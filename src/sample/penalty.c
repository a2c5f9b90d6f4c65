// sample: penalties on a row of logits before the draw — repetition over a window of the
// context, presence and frequency over the generated tokens.
#include "sample/sample.h"

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
