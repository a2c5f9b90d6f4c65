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
	return (sample_params){.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.0f, .seed = 0, .xtc_threshold = 0.1f,
			       .dynatemp_exponent = 1.0f, .mirostat_tau = 5.0f, .mirostat_eta = 0.1f};
}

// llama-server's names and letters of the stages (the first name is the one it prints).
static const struct {
	const char *names[4];
	char letter;
} STAGE[SAMPLE_STAGES] = {
	[SAMPLE_PENALTIES] = {{"penalties"}, 'e'},
	[SAMPLE_DRY] = {{"dry"}, 'd'},
	[SAMPLE_TOP_N_SIGMA] = {{"top_n_sigma", "top-n-sigma"}, 's'},
	[SAMPLE_TOP_K] = {{"top_k", "top-k"}, 'k'},
	[SAMPLE_TYPICAL] = {{"typ_p", "typical_p", "typ-p", "typical"}, 'y'},
	[SAMPLE_TOP_P] = {{"top_p", "top-p", "nucleus"}, 'p'},
	[SAMPLE_MIN_P] = {{"min_p", "min-p"}, 'm'},
	[SAMPLE_XTC] = {{"xtc"}, 'x'},
	[SAMPLE_TEMPERATURE] = {{"temperature", "temp"}, 't'},
};

int sample_stage_named(const char *name) {
	for (int st = 0; st < SAMPLE_STAGES; st++)
		for (int k = 0; k < 4 && STAGE[st].names[k]; k++)
			if (!strcmp(name, STAGE[st].names[k])) return st;
	return -1;
}

int sample_stage_letter(char c) {
	for (int st = 0; st < SAMPLE_STAGES; st++)
		if (STAGE[st].letter == c) return st;
	return -1;
}

const char *sample_stage_name(enum sample_stage st) { return (unsigned)st < SAMPLE_STAGES ? STAGE[st].names[0] : "?"; }

bool sample_runs(const sample_params *p, enum sample_stage st) {
	if (!p->n_order) return true;
	for (int32_t i = 0; i < p->n_order; i++)
		if (p->order[i] == st) return true;
	return false;
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
	if (!isfinite(p->top_n_sigma)) return base_seterr(err, errlen, LANES_EINVAL, "sample: top_n_sigma must be a finite number");
	if (!(p->xtc_probability >= 0.0f && p->xtc_probability <= 1.0f))
		return base_seterr(err, errlen, LANES_EINVAL, "sample: xtc_probability must be in [0, 1]");
	if (!(p->xtc_threshold >= 0.0f && p->xtc_threshold <= 1.0f))
		return base_seterr(err, errlen, LANES_EINVAL, "sample: xtc_threshold must be in [0, 1]");
	if (!(p->dynatemp_range >= 0.0f) || isinf(p->dynatemp_range))
		return base_seterr(err, errlen, LANES_EINVAL, "sample: dynatemp_range must be a finite number >= 0");
	if (!(p->dynatemp_exponent >= 0.0f) || isinf(p->dynatemp_exponent))
		return base_seterr(err, errlen, LANES_EINVAL, "sample: dynatemp_exponent must be a finite number >= 0");
	if (p->mirostat < 0 || p->mirostat > 2) return base_seterr(err, errlen, LANES_EINVAL, "sample: mirostat must be 0, 1 or 2");
	if (!(p->mirostat_tau >= 0.0f) || isinf(p->mirostat_tau))
		return base_seterr(err, errlen, LANES_EINVAL, "sample: mirostat_tau must be a finite number >= 0");
	if (!(p->mirostat_eta >= 0.0f) || isinf(p->mirostat_eta))
		return base_seterr(err, errlen, LANES_EINVAL, "sample: mirostat_eta must be a finite number >= 0");
	if (p->n_order < 0 || p->n_order > SAMPLE_MAX_ORDER)
		return base_seterr(err, errlen, LANES_EINVAL, "sample: samplers lists at most %d stages", SAMPLE_MAX_ORDER);
	for (int32_t i = 0; i < p->n_order; i++)
		if (p->order[i] >= SAMPLE_STAGES) return base_seterr(err, errlen, LANES_EINVAL, "sample: samplers names an unknown stage");
	return LANES_OK;
}

double sample_uniform(uint64_t seed, uint64_t choice, int64_t pos) { return sample_uniform_stream(seed, choice, pos, 0); }

double sample_uniform_stream(uint64_t seed, uint64_t choice, int64_t pos, uint64_t stream) {
	uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ choice) ^ (uint64_t)pos);
	if (stream) h = splitmix64(h ^ splitmix64(stream));
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


// The candidates c[0..n) as a pick's stages see them: in id order until a stage sorts them
// (then by cand_cmp, with p their probabilities relative to the first and total their sum).
typedef struct {
	int32_t n;
	bool sorted;
	double total;
} pool;

// p and total from the sorted candidates' logits.
static void weigh(sampler *s, pool *q) {
	q->total = 0.0;
	for (int32_t i = 0; i < q->n; i++) q->total += s->p[i] = exp((double)s->c[i].logit - s->c[0].logit);
}

static void resum(sampler *s, pool *q) {
	q->total = 0.0;
	for (int32_t i = 0; i < q->n; i++) q->total += s->p[i];
}

// Sorts the candidates: the k first alone when 0 < k < n (the rest dropped), else all.
static void sort_pool(sampler *s, pool *q, int32_t k) {
	if (q->sorted) {
		if (k > 0 && k < q->n) q->n = k, resum(s, q);
		return;
	}
	if (k > 0 && k < q->n) {
		select_top(s->c, q->n, k);
		q->n = k;
		qsort(s->c, (size_t)q->n, sizeof *s->c, cand_cmp);
	} else {
		sort_by_id_order(s, q->n);
	}
	q->sorted = true;
	weigh(s, q);
}

// The entropy (nats) of softmax over the finite candidates, and their count.
static double entropy(const sampler *s, const pool *q, int32_t *finite) {
	float mx = -INFINITY;
	for (int32_t i = 0; i < q->n; i++)
		if (s->c[i].logit > mx) mx = s->c[i].logit;
	double sum = 0.0, lsum = 0.0;
	int32_t f = 0;
	for (int32_t i = 0; i < q->n && mx > -INFINITY; i++) {
		if (s->c[i].logit == -INFINITY) continue;
		const double d = (double)s->c[i].logit - mx, e = exp(d);
		sum += e;
		lsum += e * d;
		f++;
	}
	*finite = f;
	return f ? log(sum) - lsum / sum : 0.0;
}

// Temperature: fixed, or dynamic by the normalized entropy of what is left; a temperature of 0
// keeps the most likely candidate alone.
static void temperature(sampler *s, pool *q, const sample_params *p) {
	float t = p->temp;
	if (p->dynatemp_range > 0.0f) {
		int32_t f;
		const double h = entropy(s, q, &f);
		if (f < 2) return;
		const double lo = p->temp > p->dynatemp_range ? p->temp - p->dynatemp_range : 0.0, hi = (double)p->temp + p->dynatemp_range;
		const double norm = h / log((double)f);
		t = (float)(lo + (hi - lo) * pow(norm < 0 ? 0 : norm > 1 ? 1 : norm, p->dynatemp_exponent));
	}
	if (t <= 0.0f) {
		sort_pool(s, q, 1);
		return;
	}
	for (int32_t i = 0; i < q->n; i++) s->c[i].logit = s->c[i].logit / t;
	if (q->sorted) weigh(s, q);
}

// Top-nσ: keeps the candidates whose logit is within n standard deviations (over the finite
// logits) of the largest.
static void top_n_sigma(sampler *s, pool *q, float nsig) {
	float mx = -INFINITY;
	double sum = 0.0;
	int32_t f = 0;
	for (int32_t i = 0; i < q->n; i++) {
		if (s->c[i].logit == -INFINITY) continue;
		if (s->c[i].logit > mx) mx = s->c[i].logit;
		sum += s->c[i].logit;
		f++;
	}
	if (f < 2) return;
	const double mean = sum / f;
	double var = 0.0;
	for (int32_t i = 0; i < q->n; i++)
		if (s->c[i].logit != -INFINITY) var += ((double)s->c[i].logit - mean) * ((double)s->c[i].logit - mean);
	const double floor = (double)mx - nsig * sqrt(var / f);
	int32_t keep = 0;
	for (int32_t i = 0; i < q->n; i++)
		if ((double)s->c[i].logit >= floor) {
			if (q->sorted) s->p[keep] = s->p[i];
			s->c[keep++] = s->c[i];
		}
	q->n = keep;
	if (q->sorted) resum(s, q);
}

// XTC: at a chance of its own, drops every candidate of probability >= threshold but the least
// likely of them, when two or more reach it.
static void xtc(sampler *s, pool *q, const sample_params *p, uint64_t choice, int64_t pos) {
	if (p->xtc_probability <= 0.0f || q->n < 2) return;
	if (sample_uniform_stream(p->seed, choice, pos, 1) >= p->xtc_probability) return;
	int32_t m = 0;
	// a banned candidate (probability 0) never counts, or a threshold of 0 would keep only it
	while (m < q->n && s->p[m] > 0 && s->p[m] >= p->xtc_threshold * q->total) m++;
	if (m < 2) return;
	memmove(s->c, s->c + m - 1, (size_t)(q->n - m + 1) * sizeof *s->c);
	memmove(s->p, s->p + m - 1, (size_t)(q->n - m + 1) * sizeof *s->p);
	q->n -= m - 1;
	resum(s, q);
}

// The draw at (seed, choice, pos) from the sorted candidates by cumulative probability: an index.
static int32_t draw(const sampler *s, const pool *q, const sample_params *p, uint64_t choice, int64_t pos) {
	const double target = sample_uniform(p->seed, choice, pos) * q->total;
	double cum = 0.0;
	for (int32_t i = 0; i < q->n; i++) {
		cum += s->p[i];
		if (target < cum) return i;
	}
	return q->n - 1;
}

// Mirostat: the candidates tempered and sorted, cut where their surprise passes what mu allows
// (v1 by the Zipf exponent it estimates, v2 directly); mu then moves by eta toward tau.
static int32_t mirostat(sampler *s, pool *q, const sample_params *p, uint64_t choice, int64_t pos, float *mu) {
	float m = mu ? *mu : 2.0f * p->mirostat_tau;
	for (int32_t i = 0; i < q->n; i++) s->c[i].logit = s->c[i].logit / p->temp;
	sort_pool(s, q, 0);
	if (s->c[0].logit == -INFINITY) return s->c[0].id;
	if (p->mirostat == 1) {
		// the Zipf exponent by least squares over the first 100 candidates' ratios
		double num = 0.0, den = 0.0;
		for (int32_t i = 0; i + 1 < q->n && i < 99 && s->p[i + 1] > 0; i++) {
			const double t = log((i + 2.0) / (i + 1.0)), b = log(s->p[i] / s->p[i + 1]);
			num += t * b;
			den += t * t;
		}
		const double sh = den > 0 ? num / den : 0.0, eps = sh - 1.0;
		const double k = pow(eps * pow(2.0, m) / (1.0 - pow((double)s->n_vocab, -eps)), 1.0 / sh);
		const int32_t keep = !(k >= 1) ? 1 : k < q->n ? (int32_t)k : q->n; // NaN: the top one; past n: all
		sort_pool(s, q, keep);
	} else {
		int32_t keep = 1;
		while (keep < q->n && -log2(s->p[keep] / q->total) <= m) keep++;
		q->n = keep;
		resum(s, q);
	}
	const int32_t i = draw(s, q, p, choice, pos);
	if (mu) *mu = m - p->mirostat_eta * (float)(-log2(s->p[i] / q->total) - p->mirostat_tau);
	return s->c[i].id;
}

static const uint8_t DEFAULT_ORDER[] = {SAMPLE_TOP_N_SIGMA, SAMPLE_TEMPERATURE, SAMPLE_TOP_K, SAMPLE_TYPICAL,
					SAMPLE_TOP_P, SAMPLE_MIN_P, SAMPLE_XTC};

int32_t sampler_draw(sampler *s, const sample_params *p, const float *logits, uint64_t choice, int64_t pos, float *mu) {
	const int32_t V = s->n_vocab;
	if (p->temp <= 0.0f) return sample_argmax(logits, V);
	pool q = {V, false, 0.0};
	for (int32_t i = 0; i < V; i++) s->c[i] = (cand){isnan(logits[i]) ? -INFINITY : logits[i], i};
	if (p->mirostat) return mirostat(s, &q, p, choice, pos, mu);
	const uint8_t *order = p->n_order ? p->order : DEFAULT_ORDER;
	const int32_t n_order = p->n_order ? p->n_order : (int32_t)sizeof DEFAULT_ORDER;
	for (int32_t k = 0; k < n_order; k++) {
		switch ((enum sample_stage)order[k]) {
		case SAMPLE_TEMPERATURE: temperature(s, &q, p); break;
		case SAMPLE_TOP_N_SIGMA:
			if (p->top_n_sigma > 0.0f) top_n_sigma(s, &q, p->top_n_sigma);
			break;
		case SAMPLE_TOP_K: sort_pool(s, &q, p->top_k); break;
		case SAMPLE_TYPICAL:
			if (p->typical > 0.0f && p->typical < 1.0f) {
				sort_pool(s, &q, 0);
				if (s->c[0].logit == -INFINITY) return s->c[0].id;
				q.n = typical_keep(s, q.n, q.total, p->typical);
				resum(s, &q);
			}
			break;
		case SAMPLE_TOP_P:
			if (p->top_p < 1.0f) {
				sort_pool(s, &q, 0);
				double cum = 0.0;
				for (int32_t i = 0; i < q.n; i++) {
					cum += s->p[i];
					if (cum >= p->top_p * q.total) {
						q.n = i + 1;
						break;
					}
				}
				resum(s, &q);
			}
			break;
		case SAMPLE_MIN_P:
			if (p->min_p > 0.0f) {
				sort_pool(s, &q, 0);
				int32_t keep = 1;
				while (keep < q.n && s->p[keep] >= p->min_p * s->p[0]) keep++;
				q.n = keep;
				resum(s, &q);
			}
			break;
		case SAMPLE_XTC:
			if (p->xtc_probability > 0.0f) {
				sort_pool(s, &q, 0);
				xtc(s, &q, p, choice, pos);
			}
			break;
		default: break; // PENALTIES and DRY are the caller's
		}
		if (q.sorted && s->c[0].logit == -INFINITY) return s->c[0].id;
	}
	sort_pool(s, &q, 0);
	if (s->c[0].logit == -INFINITY) return s->c[0].id;
	return s->c[draw(s, &q, p, choice, pos)].id;
}

int32_t sampler_pick(sampler *s, const sample_params *p, const float *logits, uint64_t choice, int64_t pos) {
	return sampler_draw(s, p, logits, choice, pos, NULL);
}
