// sample: the samplers. Candidates are sorted by (logit desc, id asc), a total order, and
// probabilities are summed in double in that order, so every pick is reproducible.
#include "sample/sample.h"

#include "base/base.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	float logit;
	int32_t id;
} cand;

#define RADIX_BITS 11
#define RADIX_PASSES ((32 + RADIX_BITS - 1) / RADIX_BITS)

struct sampler {
	int32_t n_vocab;
	cand *c;     // [n_vocab]
	cand *tmp;   // [n_vocab] the radix sort's other half
	uint32_t hist[RADIX_PASSES][1 << RADIX_BITS];
	double *p;   // [n_vocab] probabilities of the sorted candidates
	double *t;   // [n_vocab] typical sampling's scores
	int32_t *ix; // [n_vocab] typical sampling's order
};

sample_params sample_defaults(void) {
	return (sample_params){.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.0f, .seed = 0};
}

int sample_check(const sample_params *p, char *err, size_t errlen) {
	if (!(p->temp >= 0.0f) || isinf(p->temp))
		return base_seterr(err, errlen, LANES_EINVAL, "sample: temperature must be a finite number >= 0");
	if (p->top_k < 0) return base_seterr(err, errlen, LANES_EINVAL, "sample: top_k must be >= 0");
	if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
		return base_seterr(err, errlen, LANES_EINVAL, "sample: top_p must be in (0, 1]");
	if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
		return base_seterr(err, errlen, LANES_EINVAL, "sample: min_p must be in [0, 1]");
	if (!(p->typical >= 0.0f && p->typical <= 1.0f))
		return base_seterr(err, errlen, LANES_EINVAL, "sample: typical_p must be in [0, 1]");
	return LANES_OK;
}

double sample_uniform(uint64_t seed, uint64_t choice, int64_t pos) {
	uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ choice) ^ (uint64_t)pos);
	return (double)(h >> 11) * 0x1p-53;
}

int sampler_new(sampler **out, int32_t n_vocab) {
	*out = NULL;
	if (n_vocab < 1) return LANES_EINVAL;
	sampler *s = calloc(1, sizeof *s);
	if (!s) return LANES_ENOMEM;
	s->n_vocab = n_vocab;
	s->c = malloc((size_t)n_vocab * sizeof *s->c);
	s->tmp = malloc((size_t)n_vocab * sizeof *s->tmp);
	s->p = malloc((size_t)n_vocab * sizeof *s->p);
	s->t = malloc((size_t)n_vocab * sizeof *s->t);
	s->ix = malloc((size_t)n_vocab * sizeof *s->ix);
	if (!s->c || !s->tmp || !s->p || !s->t || !s->ix) {
		sampler_free(s);
		return LANES_ENOMEM;
	}
	*out = s;
	return LANES_OK;
}

void sampler_free(sampler *s) {
	if (!s) return;
	free(s->c);
	free(s->tmp);
	free(s->p);
	free(s->t);
	free(s->ix);
	free(s);
}

int32_t sample_argmax(const float *logits, int32_t n_vocab) {
	int32_t best = 0;
	for (int32_t i = 1; i < n_vocab; i++)
		if (logits[i] > logits[best] || isnan(logits[best])) best = i;
	return best;
}

// Orders by logit descending, then id ascending: a total order, so sorting is reproducible.
static int cand_cmp(const void *a, const void *b) {
	const cand *x = a, *y = b;
	if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

// The logit as an unsigned key that ascends as the logit descends (-0 as +0, equal as they compare).
static inline uint32_t desc_key(float f) {
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	if (u == 0x80000000u) u = 0;
	return u & 0x80000000u ? u : ~(u | 0x80000000u);
}

// Sorts the n candidates, given in id order, by cand_cmp's order: a stable radix sort on
// the logit's key keeps equal logits in id order, in linear time for a whole vocabulary.
static void sort_by_id_order(sampler *s, int32_t n) {
	enum { BITS = RADIX_BITS, B = 1 << BITS, PASSES = RADIX_PASSES };
	uint32_t(*hist)[B] = s->hist;
	memset(hist, 0, sizeof s->hist);
	for (int32_t i = 0; i < n; i++) {
		const uint32_t k = desc_key(s->c[i].logit);
		for (int d = 0; d < PASSES; d++) hist[d][(k >> (d * BITS)) & (B - 1)]++;
	}
	cand *from = s->c, *to = s->tmp;
	for (int d = 0; d < PASSES; d++) {
		uint32_t *h = hist[d], sum = 0;
		if (h[(desc_key(from[0].logit) >> (d * BITS)) & (B - 1)] == (uint32_t)n) continue; // one digit for all
		for (int b = 0; b < B; b++) {
			const uint32_t c = h[b];
			h[b] = sum;
			sum += c;
		}
		for (int32_t i = 0; i < n; i++) to[h[(desc_key(from[i].logit) >> (d * BITS)) & (B - 1)]++] = from[i];
		cand *t = from;
		from = to;
		to = t;
	}
	if (from != s->c) memcpy(s->c, from, (size_t)n * sizeof *s->c);
}

static inline bool cand_before(const cand *x, const cand *y) {
	return x->logit > y->logit || (x->logit == y->logit && x->id < y->id);
}

// Moves the k first candidates (in cand order) to the front, in any order (quickselect).
static void select_top(cand *c, int32_t n, int32_t k) {
	int32_t lo = 0, hi = n - 1;
	while (lo < hi) {
		cand pivot = c[lo + (hi - lo) / 2];
		int32_t i = lo, j = hi;
		while (i <= j) {
			while (cand_before(&c[i], &pivot)) i++;
			while (cand_before(&pivot, &c[j])) j--;
			if (i <= j) {
				cand t = c[i];
				c[i++] = c[j];
				c[j--] = t;
			}
		}
		if (k - 1 <= j) hi = j;
		else if (k - 1 >= i) lo = i;
		else break;
	}
}

// Locally typical sampling: scores |-log q - H| (q the candidate's probability, H the
// entropy), ties in candidate order; keeps the lowest-scored up to mass `typical` (one at
// least), then restores candidate order. Returns the candidates kept.
static int typical_cmp(const void *a, const void *b, void *arg) {
	const double *t = arg;
	const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	if (t[x] != t[y]) return t[x] < t[y] ? -1 : 1;
	return (x > y) - (x < y);
}

static int index_cmp(const void *a, const void *b) {
	const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return (x > y) - (x < y);
}

static int32_t typical_keep(sampler *s, int32_t n, double total, float typical) {
	double h = 0.0;
	for (int32_t i = 0; i < n; i++) {
		const double q = s->p[i] / total;
		if (q > 0) h -= q * log(q);
	}
	for (int32_t i = 0; i < n; i++) {
		const double q = s->p[i] / total;
		s->t[i] = q > 0 ? fabs(-log(q) - h) : INFINITY;
		s->ix[i] = i;
	}
	qsort_r(s->ix, (size_t)n, sizeof *s->ix, typical_cmp, s->t);
	double cum = 0.0;
	int32_t keep = n;
	for (int32_t k = 0; k < n; k++) {
		cum += s->p[s->ix[k]];
		if (cum >= typical * total) {
			keep = k + 1;
			break;
		}
	}
	// the kept set back in candidate order (indices ascending), packed to the front
	qsort(s->ix, (size_t)keep, sizeof *s->ix, index_cmp);
	for (int32_t k = 0; k < keep; k++) {
		s->c[k] = s->c[s->ix[k]];
		s->p[k] = s->p[s->ix[k]];
	}
	return keep;
}

int32_t sampler_pick(sampler *s, const sample_params *p, const float *logits, uint64_t choice, int64_t pos) {
	const int32_t V = s->n_vocab;
	if (p->temp <= 0.0f) return sample_argmax(logits, V);
	int32_t n = V;
	for (int32_t i = 0; i < V; i++) s->c[i] = (cand){isnan(logits[i]) ? -INFINITY : logits[i] / p->temp, i};
	if (p->top_k > 0 && p->top_k < n) {
		select_top(s->c, n, p->top_k);
		n = p->top_k;
		qsort(s->c, (size_t)n, sizeof *s->c, cand_cmp);
	} else {
		sort_by_id_order(s, n);
	}
	if (s->c[0].logit == -INFINITY) return s->c[0].id;
	double total = 0.0;
	for (int32_t i = 0; i < n; i++) total += s->p[i] = exp((double)s->c[i].logit - s->c[0].logit);
	if (p->typical > 0.0f && p->typical < 1.0f) {
		n = typical_keep(s, n, total, p->typical);
		total = 0.0;
		for (int32_t i = 0; i < n; i++) total += s->p[i];
	}
	if (p->top_p < 1.0f) {
		double cum = 0.0;
		int32_t keep = n;
		for (int32_t i = 0; i < n; i++) {
			cum += s->p[i];
			if (cum >= p->top_p * total) {
				keep = i + 1;
				break;
			}
		}
		n = keep;
	}
	if (p->min_p > 0.0f) {
		int32_t keep = 1;
		while (keep < n && s->p[keep] >= p->min_p * s->p[0]) keep++;
		n = keep;
	}
	total = 0.0;
	for (int32_t i = 0; i < n; i++) total += s->p[i];
	const double target = sample_uniform(p->seed, choice, pos) * total;
	double cum = 0.0;
	for (int32_t i = 0; i < n; i++) {
		cum += s->p[i];
		if (target < cum) return s->c[i].id;
	}
	return s->c[n - 1].id;
}
