// sample: turns a row of logits into a token — greedy, temperature, top-k, top-p, min-p.
// The random draw for the token at position pos of choice i is a pure function of
// (seed, i, pos): no RNG state, so the same request gives the same text however it is batched.
#ifndef LANES_SAMPLE_H
#define LANES_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
	float temp;     // logits / temp; 0 = greedy (argmax, ties to the lower id)
	int32_t top_k;  // keep the k most likely tokens; 0 = all
	float top_p;    // then keep the smallest most-likely set whose probability reaches top_p; 1 = all
	float min_p;    // then drop tokens below min_p * the most likely one's probability; 0 = none
	uint64_t seed;  // with the choice index and position, fixes every draw
	float typical;  // after top-k: keep the most typical tokens (closest to the entropy) up to this mass; 0 or 1 = off
} sample_params;

// temp 0.8, top_k 40, top_p 0.95, min_p 0, seed 0. Thread-safe.
sample_params sample_defaults(void);
// 0, or LANES_EINVAL with a message naming the bad field (temp < 0 or not finite,
// top_k < 0, top_p outside (0, 1], min_p outside [0, 1]). Thread-safe.
int sample_check(const sample_params *p, char *err, size_t errlen);

// The uniform draw in [0, 1) for (seed, choice, pos): splitmix64 chained over the three.
// Thread-safe.
double sample_uniform(uint64_t seed, uint64_t choice, int64_t pos);

typedef struct sampler sampler;
// Scratch for n_vocab candidates; one sampler per thread. 0, LANES_EINVAL or LANES_ENOMEM.
// Thread-safe.
int sampler_new(sampler **out, int32_t n_vocab);
// Accepts NULL. Not thread-safe: no other call on s may run during or after it.
void sampler_free(sampler *s);

// The token for position pos of choice `choice` from logits (n_vocab floats, unchanged; NaN
// counts as -inf). Filters apply in order temperature, top-k, typical, top-p, min-p; the draw picks
// from what is left by cumulative probability, candidates ordered by logit then id.
// p must have passed sample_check. Not thread-safe on s: one sampler per thread.
int32_t sampler_pick(sampler *s, const sample_params *p, const float *logits, uint64_t choice, int64_t pos);
// Greedy pick alone: the index of the largest logit (ties to the lower id; NaN ignored).
// Thread-safe.
int32_t sample_argmax(const float *logits, int32_t n_vocab);

// Penalties applied to logits before sampling (the lane host's requests).
typedef struct {
	float repeat;           // 1 = off: logit / repeat when positive, * repeat when not
	int32_t repeat_last_n;  // window of the context (prompt + generated) it covers; 0 = all
	float presence;         // subtracted once from every token generated so far
	float frequency;        // subtracted per occurrence among the generated tokens
} sample_penalties;
// Applies p to x (nv logits). counts: nv zeroed ints of scratch, zeroed again on return.
// Thread-safe for distinct x and counts.
void sample_penalize(float *x, int32_t nv, const sample_penalties *p, const int32_t *prompt, int32_t n_prompt,
		     const int32_t *gen, int32_t n_gen, int32_t *counts);

#endif
