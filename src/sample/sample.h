// sample: turns a row of logits into a token — greedy, temperature (fixed or dynamic), top-k,
// typical, top-p, min-p, top-nσ, XTC and mirostat, in a caller's order. The random draw for
// the token at position pos of choice i is a pure function of (seed, i, pos): no RNG state,
// so the same request gives the same text however it is batched.
#ifndef LANES_SAMPLE_H
#define LANES_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// The stages of a pick, by llama-server's names; a caller's order lists them (repeats allowed).
// PENALTIES and DRY are the lane host's, applied to the logits before the others.
enum sample_stage {
	SAMPLE_PENALTIES,
	SAMPLE_DRY,
	SAMPLE_TOP_N_SIGMA,
	SAMPLE_TOP_K,
	SAMPLE_TYPICAL,
	SAMPLE_TOP_P,
	SAMPLE_MIN_P,
	SAMPLE_XTC,
	SAMPLE_TEMPERATURE,
	SAMPLE_STAGES
};
#define SAMPLE_MAX_ORDER 16

typedef struct {
	float temp;     // logits / temp; 0 = greedy (argmax, ties to the lower id)
	int32_t top_k;  // keep the k most likely tokens; 0 = all
	float top_p;    // then keep the smallest most-likely set whose probability reaches top_p; 1 = all
	float min_p;    // then drop tokens below min_p * the most likely one's probability; 0 = none
	uint64_t seed;  // with the choice index and position, fixes every draw
	float typical;  // after top-k: keep the most typical tokens (closest to the entropy) up to this mass; 0 or 1 = off
	float top_n_sigma;       // keep logits within n standard deviations of the top one; <= 0 = off
	float xtc_probability;   // the chance XTC runs at a position (its own draw); 0 = off
	float xtc_threshold;     // XTC drops every token of probability >= this but the least likely of them
	float dynatemp_range;    // temperature from temp - range to temp + range by the entropy; 0 = fixed
	float dynatemp_exponent; // the normalized entropy's exponent in that mapping
	int32_t mirostat;        // 1 or 2: mirostat (temperature, then it alone); 0 = off
	float mirostat_tau;      // its target surprise (bits)
	float mirostat_eta;      // its learning rate
	uint8_t order[SAMPLE_MAX_ORDER]; // enum sample_stage, in the order they run
	int32_t n_order;         // 0: the default order, top-nσ, temperature, top-k, typical, top-p, min-p, XTC
} sample_params;

// temp 0.8, top_k 40, top_p 0.95, min_p 0, seed 0, the other samplers off. Thread-safe.
sample_params sample_defaults(void);
// 0, or LANES_EINVAL with a message naming the bad field (temp < 0 or not finite,
// top_k < 0, top_p outside (0, 1], min_p outside [0, 1], ...). Thread-safe.
int sample_check(const sample_params *p, char *err, size_t errlen);
// Whether p's order runs stage st (the default order runs every stage). Thread-safe.
bool sample_runs(const sample_params *p, enum sample_stage st);
// The stage llama-server names name ("top_k", "typ_p", ...), or -1. Thread-safe.
int sample_stage_named(const char *name);
// The stage llama-server's one-letter form names ('k', 'y', ...), or -1. Thread-safe.
int sample_stage_letter(char c);
// The stage's name as sample_stage_named reads it. Thread-safe.
const char *sample_stage_name(enum sample_stage st);

// The uniform draw in [0, 1) for (seed, choice, pos): splitmix64 chained over the three.
// Thread-safe.
double sample_uniform(uint64_t seed, uint64_t choice, int64_t pos);
// The draw of another stream at (seed, choice, pos): stream 0 is sample_uniform's, each other
// one independent of it (XTC's coin is stream 1). Thread-safe.
double sample_uniform_stream(uint64_t seed, uint64_t choice, int64_t pos, uint64_t stream);

typedef struct sampler sampler;
// Scratch for n_vocab candidates; one sampler per thread. 0, LANES_EINVAL or LANES_ENOMEM.
// Thread-safe.
int sampler_new(sampler **out, int32_t n_vocab);
// Accepts NULL. Not thread-safe: no other call on s may run during or after it.
void sampler_free(sampler *s);

// The token for position pos of choice `choice` from logits (n_vocab floats, unchanged; NaN
// counts as -inf). The stages run in p's order; the draw picks from what is left by cumulative
// probability, candidates ordered by logit then id. With mirostat, temperature and mirostat
// alone run, and *mu (its state; the caller keeps one per sequence, 2 * tau at the start)
// follows the token drawn; mu NULL: 2 * tau, not kept. p must have passed sample_check.
// Not thread-safe on s: one sampler per thread.
int32_t sampler_draw(sampler *s, const sample_params *p, const float *logits, uint64_t choice, int64_t pos, float *mu);
// sampler_draw without a mirostat state.
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

// DRY ("don't repeat yourself"): a token that would extend a repeat of n >= allowed_length
// tokens of the context (prompt + generated) is penalised by multiplier * base^(n - allowed_length);
// a match never spans a sequence breaker, and a breaker is never penalised.
typedef struct {
	float multiplier;        // 0 = off
	float base;
	int32_t allowed_length;
	int32_t last_n;          // the window of the context it scans; -1 = all, 0 = off
	const uint8_t *breaker;  // [n_vocab] nonzero: the token breaks a match (NULL: none does)
} sample_dry;
// Applies d to x (nv logits). best: nv zeroed ints, zeroed again on return; z: 2 * (the window's
// length) ints of scratch. Thread-safe for distinct x, best and z.
void sample_dry_apply(float *x, int32_t nv, const sample_dry *d, const int32_t *prompt, int32_t n_prompt,
		      const int32_t *gen, int32_t n_gen, int32_t *best, int32_t *z);

#endif
