// tests: the samplers people tune — DRY, XTC, top-nσ, mirostat, dynamic temperature and the
// samplers' order — each on a fixed logit vector against its published definition, counted over
// many draws where it draws.
#include "t.h"

#include "base/base.h"
#include "sample/sample.h"

#include <math.h>

enum { DRAWS = 20000 };

// Picks over DRAWS positions (seed 1, choice 0) into cnt[nv].
static void count_picks(sampler *s, const sample_params *p, const float *lg, int nv, int *cnt) {
	memset(cnt, 0, (size_t)nv * sizeof *cnt);
	for (int pos = 0; pos < DRAWS; pos++) cnt[sampler_pick(s, p, lg, 0, pos)]++;
}

static sample_params plain(void) {
	sample_params p = sample_defaults();
	p.temp = 1, p.top_k = 0, p.top_p = 1, p.seed = 1;
	return p;
}

// What DRY should do, by its definition: for every earlier place the context's last n tokens
// recur (n as long as it goes, no breaker inside), the token that followed gets n.
static void dry_naive(float *x, int nv, const sample_dry *d, const int32_t *ctx, int L) {
	int best[64] = {0};
	for (int i = 0; i + 1 < L; i++) {
		int n = 0;
		while (n <= i && ctx[i - n] == ctx[L - 1 - n] && !(d->breaker && d->breaker[ctx[L - 1 - n]])) n++;
		const int t = ctx[i + 1];
		if (n >= (d->allowed_length > 1 ? d->allowed_length : 1) && !(d->breaker && d->breaker[t]) && n > best[t]) best[t] = n;
	}
	for (int t = 0; t < nv; t++)
		if (best[t]) x[t] -= d->multiplier * (float)pow(d->base, best[t] - d->allowed_length);
}

static void dry(void) {
	enum { NV = 10 };
	int32_t best[NV] = {0}, z[2 * 48]; // DRY's scratch: twice the longest context below
	const int32_t ctx[] = {1, 2, 3, 4, 5, 1, 2, 3};
	float x[NV] = {0}, want[NV] = {0};
	sample_dry d = {.multiplier = 0.5f, .base = 2.0f, .allowed_length = 2, .last_n = -1};
	// "1 2 3" recurs: the 4 that followed it is penalised by 0.5 * 2^(3 - 2), nothing else is
	sample_dry_apply(x, NV, &d, ctx, 8, NULL, 0, best, z);
	want[4] = -1.0f;
	CHECKF(!memcmp(x, want, sizeof x), "the repeat's next token alone: x[4] = %g", x[4]);
	for (int t = 0; t < NV; t++) CHECK(best[t] == 0);
	// the same split between prompt and generated tokens
	memset(x, 0, sizeof x);
	sample_dry_apply(x, NV, &d, ctx, 5, ctx + 5, 3, best, z);
	CHECK(!memcmp(x, want, sizeof x));
	// a repeat shorter than the allowed length is free
	d.allowed_length = 4;
	memset(x, 0, sizeof x);
	sample_dry_apply(x, NV, &d, ctx, 8, NULL, 0, best, z);
	CHECK(x[4] == 0.0f);
	// a breaker inside the repeat ("2") cuts it to "3": under the allowed length, then at it
	uint8_t brk[NV] = {0};
	brk[2] = 1;
	d.allowed_length = 2, d.breaker = brk;
	memset(x, 0, sizeof x);
	sample_dry_apply(x, NV, &d, ctx, 8, NULL, 0, best, z);
	CHECK(x[4] == 0.0f);
	d.allowed_length = 1;
	sample_dry_apply(x, NV, &d, ctx, 8, NULL, 0, best, z);
	CHECKF(x[4] == -0.5f, "a repeat of 1 at allowed length 1: 0.5 * 2^0, got %g", x[4]);
	// a breaker is never penalised, though it followed a repeat
	const int32_t ctx2[] = {1, 2, 7, 1, 2};
	brk[2] = 0, brk[7] = 1;
	memset(x, 0, sizeof x);
	sample_dry_apply(x, NV, &d, ctx2, 5, NULL, 0, best, z);
	CHECK(x[7] == 0.0f);
	// the window: the last 4 tokens hold no repeat; off at last_n 0 and multiplier 0
	d.breaker = NULL, d.allowed_length = 2, d.last_n = 4;
	sample_dry_apply(x, NV, &d, ctx, 8, NULL, 0, best, z);
	d.last_n = 0;
	sample_dry_apply(x, NV, &d, ctx, 8, NULL, 0, best, z);
	d.last_n = -1, d.multiplier = 0;
	sample_dry_apply(x, NV, &d, ctx, 8, NULL, 0, best, z);
	for (int t = 0; t < NV; t++) CHECK(x[t] == 0.0f);
	// a huge repeat stays finite
	int32_t run[40];
	for (int i = 0; i < 40; i++) run[i] = i % 2;
	d = (sample_dry){.multiplier = 1, .base = 100, .allowed_length = 0, .last_n = -1};
	memset(x, 0, sizeof x);
	int32_t zz[80];
	sample_dry_apply(x, NV, &d, run, 40, NULL, 0, best, zz);
	CHECKF(isfinite(x[0]) && x[0] < -1e30f, "a long repeat: %g", x[0]);
	// random contexts over a small vocabulary against the definition, breakers and windows too
	uint64_t s = 5;
	int agree = 0, tries = 0;
	for (int rep = 0; rep < 400; rep++, tries++) {
		int32_t c[48];
		const int L = 2 + (int)((s = splitmix64(s)) % 46);
		for (int i = 0; i < L; i++) c[i] = (int32_t)((s = splitmix64(s)) % (rep % 2 ? 3 : 5));
		uint8_t b[NV] = {0};
		if (rep % 3 == 0) b[(s = splitmix64(s)) % 5] = 1;
		const int last = rep % 4 == 0 ? (int)(s % (unsigned)L) + 1 : -1;
		d = (sample_dry){.multiplier = 0.25f, .base = 1.5f, .allowed_length = rep % 3, .last_n = last, .breaker = rep % 3 ? NULL : b};
		float a[NV] = {0}, e[NV] = {0};
		const int from = last > 0 && last < L ? L - last : 0;
		sample_dry_apply(a, NV, &d, c, L / 2, c + L / 2, L - L / 2, best, z);
		dry_naive(e, NV, &d, c + from, L - from);
		agree += !memcmp(a, e, sizeof a);
	}
	CHECKF(agree == tries, "DRY agrees with its definition on random contexts (%d of %d)", agree, tries);
}

static void xtc(void) {
	// probabilities 0.4, 0.3, 0.2, 0.1
	const float lg[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
	sampler *s;
	CHECK(sampler_new(&s, 4) == 0);
	if (!s) return;
	int cnt[4];
	sample_params p = plain();
	p.xtc_threshold = 0.25f, p.xtc_probability = 1;
	// always on: 0 and 1 reach the threshold, so 0 goes and 1 (the last of them) stays
	count_picks(s, &p, lg, 4, cnt);
	CHECKF(cnt[0] == 0 && cnt[1] > 0 && cnt[2] > 0 && cnt[3] > 0, "xtc 1: %d %d %d %d", cnt[0], cnt[1], cnt[2], cnt[3]);
	CHECKF(fabs(cnt[1] / (double)DRAWS - 0.5) < 0.015, "xtc 1: token 1 takes 0.3 / 0.6 (%d)", cnt[1]);
	// at threshold 0.15 the three first reach it: 2 is the last of them
	p.xtc_threshold = 0.15f;
	count_picks(s, &p, lg, 4, cnt);
	CHECKF(cnt[0] == 0 && cnt[1] == 0 && cnt[2] > 0 && cnt[3] > 0, "xtc 0.15: %d %d %d %d", cnt[0], cnt[1], cnt[2], cnt[3]);
	// one alone reaching it: nothing goes
	p.xtc_threshold = 0.35f;
	count_picks(s, &p, lg, 4, cnt);
	CHECKF(fabs(cnt[0] / (double)DRAWS - 0.4) < 0.015, "xtc 0.35: token 0 as without it (%d)", cnt[0]);
	// with probability 0.5 it runs at half the positions: token 0 at 0.5 * 0.4
	p.xtc_threshold = 0.25f, p.xtc_probability = 0.5f;
	count_picks(s, &p, lg, 4, cnt);
	CHECKF(fabs(cnt[0] / (double)DRAWS - 0.2) < 0.015, "xtc 0.5: token 0 at 0.2 (%d)", cnt[0]);
	// its coin is a stream of its own, a function of (seed, choice, position): where it runs token 0 never comes
	int ran = 0, zero_when_ran = 0;
	for (int pos = 0; pos < 4000; pos++) {
		const bool on = sample_uniform_stream(p.seed, 0, pos, 1) < 0.5;
		const int32_t t = sampler_pick(s, &p, lg, 0, pos);
		ran += on, zero_when_ran += on && t == 0;
		CHECK(t == sampler_pick(s, &p, lg, 0, pos));
	}
	CHECKF(ran > 1800 && ran < 2200 && zero_when_ran == 0, "xtc's coin: %d of 4000 ran, token 0 in %d", ran, zero_when_ran);
	CHECK(sample_uniform_stream(1, 0, 5, 0) == sample_uniform(1, 0, 5) && sample_uniform_stream(1, 0, 5, 1) != sample_uniform(1, 0, 5));
	sampler_free(s);
	// a threshold of 0 with banned tokens (-inf, as a grammar leaves them): never one of those
	const float lb[8] = {3, 2.5f, 1, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
	CHECK(sampler_new(&s, 8) == 0);
	if (!s) return;
	int cb[8];
	p.xtc_threshold = 0, p.xtc_probability = 1;
	count_picks(s, &p, lb, 8, cb);
	CHECKF(cb[2] == DRAWS, "xtc 0: the least likely allowed token always (%d; banned %d)", cb[2], cb[3] + cb[7]);
	sampler_free(s);
}

static void top_n_sigma(void) {
	enum { NV = 8 };
	const float lg[NV] = {4.0f, 3.5f, 3.0f, 1.0f, 0.0f, -1.0f, -2.0f, -INFINITY};
	double mean = 0, var = 0;
	for (int i = 0; i < NV - 1; i++) mean += lg[i] / (NV - 1.0);
	for (int i = 0; i < NV - 1; i++) var += (lg[i] - mean) * (lg[i] - mean) / (NV - 1.0);
	const double sd = sqrt(var);
	sampler *s;
	CHECK(sampler_new(&s, NV) == 0);
	if (!s) return;
	int cnt[NV];
	const float ns[] = {0.5f, 1.0f, 2.0f};
	for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
		for (float temp = 1; temp <= 4; temp += 3) {
			sample_params p = plain();
			p.top_n_sigma = ns[k], p.temp = temp;
			count_picks(s, &p, lg, NV, cnt);
			// exactly the tokens within n sigma of the top, at any temperature
			for (int i = 0; i < NV; i++) {
				const bool in = lg[i] >= 4.0 - ns[k] * sd;
				CHECKF(in ? cnt[i] > 0 : cnt[i] == 0, "top-nσ %g at temp %g: token %d (logit %g, floor %g) drawn %d times", ns[k],
				       temp, i, lg[i], 4.0 - ns[k] * sd, cnt[i]);
			}
		}
	sampler_free(s);
}

// Mirostat's mu after one draw, by its definition: the surprise of the token drawn under the
// distribution it was drawn from, compared with tau.
static void mirostat(void) {
	enum { NV = 200 };
	float lg[NV];
	for (int i = 0; i < NV; i++) lg[i] = -1.1f * logf(i + 1.0f); // Zipf-like, exponent 1.1
	sampler *s;
	CHECK(sampler_new(&s, NV) == 0);
	if (!s) return;
	double z = 0;
	for (int i = 0; i < NV; i++) z += exp(lg[i]);
	sample_params p = plain();
	p.mirostat = 2, p.mirostat_tau = 3, p.mirostat_eta = 0.1f;
	// v2: the tokens whose surprise passes mu are cut; mu moves by eta * (surprise - tau)
	int bad = 0, moved = 0;
	for (int pos = 0; pos < 2000; pos++) {
		const float mu0 = 4.0f;
		float mu = mu0;
		const int32_t t = sampler_draw(s, &p, lg, 0, pos, &mu);
		double kept = 0;
		for (int i = 0; i < NV; i++)
			if (i == 0 || -log2(exp(lg[i]) / z) <= mu0) kept += exp(lg[i]);
		const double surprise = -log2(exp(lg[t]) / kept);
		bad += -log2(exp(lg[t]) / z) > mu0 && t != 0;
		moved += fabs(mu - (mu0 - 0.1 * (surprise - 3.0))) < 1e-4;
	}
	CHECKF(bad == 0 && moved == 2000, "mirostat 2: %d draws past mu, mu right %d of 2000", bad, moved);
	// over a run, mu settles where the surprise averages tau
	float mu = 2 * p.mirostat_tau;
	double sum = 0;
	for (int pos = 0; pos < 4000; pos++) {
		const float before = mu;
		sampler_draw(s, &p, lg, 0, pos, &mu);
		if (pos >= 1000) sum += (before - mu) / p.mirostat_eta + p.mirostat_tau;
	}
	CHECKF(fabs(sum / 3000 - p.mirostat_tau) < 0.1, "mirostat 2: mean surprise %g, tau %g", sum / 3000, p.mirostat_tau);
	// v1: k from the Zipf exponent it estimates (1.1 here), the top k kept
	p.mirostat = 1;
	const double sh = 1.1, eps = sh - 1;
	moved = bad = 0;
	for (int pos = 0; pos < 2000; pos++) {
		const float mu0 = 5.0f;
		float m = mu0;
		const int32_t t = sampler_draw(s, &p, lg, 0, pos, &m);
		const int k = (int)pow(eps * pow(2.0, mu0) / (1 - pow(NV, -eps)), 1 / sh);
		double kept = 0;
		for (int i = 0; i < k && i < NV; i++) kept += exp(lg[i]);
		bad += t >= k;
		moved += fabs(m - (mu0 - 0.1 * (-log2(exp(lg[t]) / kept) - 3.0))) < 1e-3;
	}
	CHECKF(bad == 0 && moved == 2000, "mirostat 1: %d draws past k, mu right %d of 2000", bad, moved);
	// no state given: mu starts at 2 tau each time, and the draw is repeatable
	CHECK(sampler_pick(s, &p, lg, 0, 9) == sampler_pick(s, &p, lg, 0, 9));
	sampler_free(s);
}

// Dynamic temperature: temp +- range by the normalized entropy to the exponent's power.
static void dynatemp(void) {
	enum { NV = 6 };
	const float lg[NV] = {2.0f, 1.5f, 0.5f, 0.0f, -1.0f, -INFINITY};
	double z = 0, h = 0;
	for (int i = 0; i < NV - 1; i++) z += exp(lg[i]);
	for (int i = 0; i < NV - 1; i++) h -= exp(lg[i]) / z * log(exp(lg[i]) / z);
	const double norm = h / log(NV - 1.0); // the banned token is no candidate
	sampler *s;
	CHECK(sampler_new(&s, NV) == 0);
	if (!s) return;
	const float ranges[] = {0.5f, 1.0f}, exps[] = {1.0f, 2.0f};
	for (int a = 0; a < 2; a++)
		for (int b = 0; b < 2; b++) {
			sample_params dyn = plain(), fixed = plain();
			dyn.temp = 1.2f, dyn.dynatemp_range = ranges[a], dyn.dynatemp_exponent = exps[b];
			const double lo = 1.2 - ranges[a] > 0 ? 1.2 - ranges[a] : 0, hi = 1.2 + ranges[a];
			fixed.temp = (float)(lo + (hi - lo) * pow(norm, exps[b]));
			int same = 0;
			for (int pos = 0; pos < 4000; pos++) same += sampler_pick(s, &dyn, lg, 0, pos) == sampler_pick(s, &fixed, lg, 0, pos);
			CHECKF(same >= 3990, "dynatemp %g^%g: draws as temperature %g (%d of 4000)", ranges[a], exps[b], fixed.temp, same);
		}
	// a flat distribution has entropy 1 normalized: temp + range
	const float flat[3] = {0.5f, 0.5f, 0.5f};
	sample_params dyn = plain();
	dyn.temp = 0.5f, dyn.dynatemp_range = 0.5f;
	CHECK(sample_check(&dyn, NULL, 0) == 0);
	sampler *s3;
	CHECK(sampler_new(&s3, 3) == 0);
	int cnt[3];
	if (s3) count_picks(s3, &dyn, flat, 3, cnt);
	CHECK(s3 && cnt[0] > 6000 && cnt[1] > 6000 && cnt[2] > 6000);
	sampler_free(s3);
	sampler_free(s);
}

// The order: each stage runs where the list puts it, and a stage the list leaves out is off.
static void order(void) {
	const float lg[3] = {2.0f, 1.0f, 0.0f};
	sampler *s;
	CHECK(sampler_new(&s, 3) == 0);
	if (!s) return;
	int cnt[3];
	// min-p 0.3 on the raw probabilities drops token 2 (e^-2 of the top); at temperature 3 first it stays (e^-2/3)
	sample_params p = plain();
	p.temp = 3, p.min_p = 0.3f;
	p.order[0] = SAMPLE_MIN_P, p.order[1] = SAMPLE_TEMPERATURE, p.n_order = 2;
	count_picks(s, &p, lg, 3, cnt);
	CHECKF(cnt[1] > 0 && cnt[2] == 0, "min_p then temperature: %d %d %d", cnt[0], cnt[1], cnt[2]);
	p.order[0] = SAMPLE_TEMPERATURE, p.order[1] = SAMPLE_MIN_P;
	count_picks(s, &p, lg, 3, cnt);
	CHECKF(cnt[2] > 0, "temperature then min_p: %d %d %d", cnt[0], cnt[1], cnt[2]);
	// the default order is temperature first
	sample_params d = p;
	d.n_order = 0;
	for (int pos = 0; pos < 500; pos++) CHECK(sampler_pick(s, &d, lg, 0, pos) == sampler_pick(s, &p, lg, 0, pos));
	// top-k 1 left out of the list: off
	p.top_k = 1, p.min_p = 0, p.n_order = 1;
	count_picks(s, &p, lg, 3, cnt);
	CHECK(cnt[1] > 0);
	p.order[1] = SAMPLE_TOP_K, p.n_order = 2;
	count_picks(s, &p, lg, 3, cnt);
	CHECK(cnt[0] == DRAWS);
	CHECK(sample_runs(&p, SAMPLE_TOP_K) && !sample_runs(&p, SAMPLE_DRY) && sample_runs(&d, SAMPLE_DRY));
	// llama-server's names and letters
	CHECK(sample_stage_named("top_k") == SAMPLE_TOP_K && sample_stage_named("typ_p") == SAMPLE_TYPICAL &&
	      sample_stage_named("temperature") == SAMPLE_TEMPERATURE && sample_stage_named("dry") == SAMPLE_DRY &&
	      sample_stage_named("top_n_sigma") == SAMPLE_TOP_N_SIGMA && sample_stage_named("xtc") == SAMPLE_XTC &&
	      sample_stage_named("penalties") == SAMPLE_PENALTIES && sample_stage_named("mirostat") == -1);
	const char letters[] = "edskypmxt";
	const int want[] = {SAMPLE_PENALTIES, SAMPLE_DRY, SAMPLE_TOP_N_SIGMA, SAMPLE_TOP_K, SAMPLE_TYPICAL,
			    SAMPLE_TOP_P, SAMPLE_MIN_P, SAMPLE_XTC, SAMPLE_TEMPERATURE};
	for (int i = 0; letters[i]; i++) CHECK(sample_stage_letter(letters[i]) == want[i]);
	CHECK(sample_stage_letter('q') == -1);
	for (int st = 0; st < SAMPLE_STAGES; st++) CHECK(sample_stage_named(sample_stage_name(st)) == st);
	// bad values are refused, naming the field
	char err[128];
	const struct { sample_params p; const char *field; } refused[] = {
		{{.temp = 1, .top_p = 1, .xtc_probability = 1.5f}, "xtc_probability"},
		{{.temp = 1, .top_p = 1, .xtc_threshold = -1}, "xtc_threshold"},
		{{.temp = 1, .top_p = 1, .mirostat = 3}, "mirostat"},
		{{.temp = 1, .top_p = 1, .dynatemp_range = -1}, "dynatemp_range"},
		{{.temp = 1, .top_p = 1, .top_n_sigma = NAN}, "top_n_sigma"},
		{{.temp = 1, .top_p = 1, .n_order = 1, .order = {SAMPLE_STAGES}}, "samplers"},
	};
	for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++)
		CHECKF(sample_check(&refused[k].p, err, sizeof err) == LANES_EINVAL && strstr(err, refused[k].field), "%s refused: %s",
		       refused[k].field, err);
	sampler_free(s);
}

int main(void) {
	dry();
	xtc();
	top_n_sigma();
	mirostat();
	dynatemp();
	order();
	T_DONE("sample");
}
