// tests: the MoE expert observer, on ref-moe (F16, Q8_0) and generated qwen2moe and qwen3next files — every
// row's kept choices are the top k a float64 forward of the same tokens picks (the f32 forward
// may take the runner-up only where the float64 router itself is within 1e-3 of a tie), and
// the counters equal counts recomputed here from those choices: in mixed batches, and through
// the lane host by domain and phase; activations sum to rows x layers x k; a request's tokens
// are the same with the observer on or off, alone or concurrent; domains past the bound count
// as "other"; dense models and the observer off have no counters.
#include "t.h"
#include "ref64.h"

#include "cli/cli.h"
#include "lanes/lanes.h"
#include "model/model.h"
#include "tensor/tensor.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <unistd.h>

#define MAXP 128 // tokens of a sequence
#define TIE 1e-3 // a float64 router gap below this may fall either way in float32
#define NREQ 4
#define GEN 6    // tokens each request generates

static model *M;
static tok_vocab *V;

static const char *const TEXTS[NREQ] = {
	"Once upon a time there was a little girl named Lily. She loved to play outside in the sun with her dog.",
	"int main(void) { for (int i = 0; i < 10; i++) printf(\"%d\\n\", i * i); return 0; }",
	"The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat by the door.",
	"def add(a, b): return a + b; x = [add(i, 2) for i in range(5)]; print(sum(x))",
};
static const char *const DOMAINS[NREQ] = {"story", "code", NULL, "code"};

// Token ids of text (BOS first), at most MAXP.
static int tokens(const char *text, int32_t *ids) {
	int32_t *p = NULL;
	size_t n = 0;
	char err[128];
	if (tok_encode(V, text, strlen(text), true, true, &p, &n, err, sizeof err)) return 0;
	if (n > MAXP) n = MAXP;
	memcpy(ids, p, n * sizeof *ids);
	free(p);
	return (int)n;
}

// ---- the float64 reference and the rows' choices checked against it ------------------------
typedef struct {
	int32_t ids[MAXP];
	int P;
	int32_t *rid, *ralt; // [L][P][K], [L][P]
	double *rw, *rm;     // [L][P][K], [L][P]
} seqref;

static void seqref_make(const ref64_shape *rs, seqref *q) {
	const size_t LP = (size_t)rs->L * q->P;
	q->rid = malloc(sizeof(int32_t) * LP * rs->K);
	q->ralt = malloc(sizeof(int32_t) * LP);
	q->rw = malloc(sizeof(double) * LP * rs->K);
	q->rm = malloc(sizeof(double) * LP);
	ref64_routes rt = {q->rid, q->rw, q->ralt, q->rm};
	ref64_forward(model_gguf(M), rs, q->ids, q->P, NULL, &rt);
}

static void seqref_free(seqref *q) { free(q->rid), free(q->ralt), free(q->rw), free(q->rm); }

typedef struct {
	int rows, ties, wrong, wrong_w;
	double closest; // the smallest reference margin seen
} verdict;

static bool has(const int32_t *set, int K, int32_t e) {
	for (int k = 0; k < K; k++)
		if (set[k] == e) return true;
	return false;
}

// Position p of q at layer l: the experts the forward chose (as a set: an order between two
// chosen near a tie cannot matter to the counts) against the reference's, and their weights.
static void check_row(const seqref *q, int K, int l, int p, const int32_t *got, const float *gw, verdict *vd) {
	const size_t at = (size_t)l * q->P + p;
	const int32_t *want = q->rid + at * K;
	int missing = 0;
	for (int k = 0; k < K; k++) missing += !has(got, K, want[k]);
	vd->rows++;
	vd->closest = fmin(vd->closest, q->rm[at]);
	if (missing == 0) {
		for (int k = 0; k < K; k++)
			for (int j = 0; j < K; j++)
				if (got[j] == want[k]) vd->wrong_w += !(fabs(gw[j] - q->rw[at * K + k]) <= 1e-3);
		return;
	}
	// the runner-up in place of the K-th choice, where float64 itself is all but tied
	const bool swap = missing == 1 && q->rm[at] < TIE && has(got, K, q->ralt[at]) && !has(got, K, want[K - 1]);
	if (swap) vd->ties++;
	else vd->wrong++;
}

static void report(const char *name, const char *what, const verdict *vd) {
	printf("%-22s %-6s %s: %d row-layers as the float64 reference, %d at a near-tie took the runner-up (closest %.1e)\n",
	       name, tensor_kernels_name(model_kernels(M)), what, vd->rows - vd->ties, vd->ties, vd->closest);
	CHECKF(vd->wrong == 0 && vd->wrong_w == 0, "%s %s: %d choices and %d weights differ from the float64 reference", name,
	       what, vd->wrong, vd->wrong_w);
}

// ---- counts recomputed here --------------------------------------------------------------
typedef struct {
	uint64_t *act, *pairs, rows;
	double *mass;
} counts;

static counts counts_new(void) {
	const model_hparams *hp = model_hparams_of(M);
	const size_t X = (size_t)hp->n_experts, L = (size_t)hp->n_layers;
	return (counts){calloc(L * X, 8), calloc(L * X * (X - 1) / 2 + 1, 8), 0, calloc(L * X, 8)};
}

static void counts_free(counts *c) { free(c->act), free(c->pairs), free(c->mass); }

// One row's choices at layer l.
static void count_row(counts *c, int l, const int32_t *id, const float *w) {
	const model_hparams *hp = model_hparams_of(M);
	const int X = hp->n_experts, K = hp->n_experts_used;
	const int64_t NP = (int64_t)X * (X - 1) / 2;
	for (int k = 0; k < K; k++) {
		c->act[l * X + id[k]]++;
		c->mass[l * X + id[k]] += w[k];
		for (int k2 = k + 1; k2 < K; k2++) {
			const int a = id[k] < id[k2] ? id[k] : id[k2], b = id[k] < id[k2] ? id[k2] : id[k];
			c->pairs[l * NP + model_expert_pair(X, a, b)]++;
		}
	}
}

// A group of the counters against counts: rows, every activation and pair exactly, the mass to
// the last bits, and activations summing to rows x layers x k.
static bool same_counts(const model_experts_view *v, const counts *c, const char *what) {
	const int64_t cells = (int64_t)v->n_layers * v->n_experts, pc = (int64_t)v->n_layers * v->n_pairs;
	int bad = 0, mass = 0;
	uint64_t sum = 0;
	for (int64_t i = 0; i < cells; i++) {
		bad += v->act[i] != c->act[i];
		mass += !(fabs(v->mass[i] - c->mass[i]) <= 1e-9 * (1 + c->mass[i]));
		sum += v->act[i];
	}
	for (int64_t i = 0; i < pc; i++) bad += v->pairs[i] != c->pairs[i];
	const bool sums = sum == v->rows * (uint64_t)v->n_layers * (uint64_t)v->n_used;
	if (bad || mass || v->rows != c->rows || !sums)
		fprintf(stderr, "%s: rows %llu (want %llu); %d counts and %d masses differ; activations sum %s\n", what,
			(unsigned long long)v->rows, (unsigned long long)c->rows, bad, mass, sums ? "right" : "wrong");
	return !bad && !mass && v->rows == c->rows && sums;
}

// ---- model level: mixed batches --------------------------------------------------------------
// The prompts fed in mixed batches (rows of every sequence interleaved, in pieces of 1 to 14):
// each row keeps the reference's choices, and the counters per sequence equal its counts.
static void pass_choices(const char *name) {
	t_case("%s %s", name, tensor_kernels_name(model_kernels(M)));
	char err[256];
	const model_hparams *hp = model_hparams_of(M);
	ref64_shape rs;
	ref64_shape_of(M, &rs);
	const int K = hp->n_experts_used, L = hp->n_layers;
	seqref q[NREQ];
	counts want[NREQ];
	verdict vd = {.closest = INFINITY};
	for (int s = 0; s < NREQ; s++) {
		q[s].P = tokens(TEXTS[s], q[s].ids);
		CHECK(q[s].P > 8);
		seqref_make(&rs, &q[s]);
		want[s] = counts_new();
	}
	kv_config kc = model_kv_config(M, KV_F16S, NREQ, 256, 16);
	kv_cache *kv = NULL;
	model_ws *ws = NULL;
	model_routes *routes = NULL;
	model_experts *ex = NULL;
	float *lg = malloc(sizeof(float) * 64 * (size_t)hp->n_vocab);
	CHECK(kv_new(&kv, &kc, err, sizeof err) == 0);
	CHECK(model_ws_new(&ws, M, 64, 1, 0, err, sizeof err) == 0);
	CHECK(model_routes_new(&routes, hp, 64, err, sizeof err) == 0);
	CHECK(model_experts_new(&ex, hp, NREQ + 1, err, sizeof err) == 0);
	if (!kv || !ws || !routes || !ex) goto out;
	model_ws_set_routes(ws, routes);
	int done[NREQ] = {0};
	for (int round = 0, left = 1; left; round++) {
		model_row rows[64];
		int32_t grp[64];
		int n = 0;
		left = 0;
		for (int s = 0; s < NREQ; s++) {
			const int take = (s * 4 + 1 + round * 8) % 14 + 1;
			for (int k = 0; k < take && done[s] < q[s].P; k++, done[s]++) {
				rows[n] = (model_row){q[s].ids[done[s]], done[s], s, true, NULL};
				grp[n++] = s;
			}
			left |= done[s] < q[s].P;
		}
		CHECKF(model_forward_ws(M, kv, NULL, ws, rows, n, lg, err, sizeof err) == 0, "%s", err);
		CHECK(model_routes_rows(routes) == n);
		for (int i = 0; i < n; i++) want[grp[i]].rows++;
		for (int l = 0; l < L; l++)
			for (int i = 0; i < n; i++) {
				const int32_t *id = model_routes_ids(routes, l) + (size_t)i * K;
				const float *w = model_routes_weights(routes, l) + (size_t)i * K;
				check_row(&q[grp[i]], K, l, rows[i].pos, id, w, &vd);
				count_row(&want[grp[i]], l, id, w);
			}
		model_experts_add(ex, routes, grp);
	}
	report(name, "mixed batches", &vd);
	for (int s = 0; s < NREQ; s++) {
		model_experts_view v;
		model_experts_group(ex, s, &v);
		CHECKF(same_counts(&v, &want[s], name), "%s: sequence %d's counters equal its counts", name, s);
	}
	model_experts_view none;
	model_experts_group(ex, NREQ, &none);
	CHECK(none.rows == 0);
out:
	free(lg);
	for (int s = 0; s < NREQ; s++) seqref_free(&q[s]), counts_free(&want[s]);
	model_experts_free(ex);
	model_routes_free(routes);
	model_ws_free(ws);
	kv_free(kv);
}

// ---- through the lane host -------------------------------------------------------------------
typedef struct {
	int32_t ids[GEN + 1];
	int n, terminals;
	char sha[65];
} result;

static void collect(lane_req *r, result *out) {
	memset(out, 0, sizeof *out);
	lane_event ev;
	while (lane_next(r, &ev, 30 * 1000000) == 1) {
		if (ev.kind == LANE_EV_TOKEN && out->n <= GEN) out->ids[out->n++] = ev.token;
		if (ev.kind == LANE_EV_TOKEN) continue;
		out->terminals++;
		memcpy(out->sha, ev.token_sha, sizeof out->sha);
		break;
	}
}

static lane_host *host(int lanes, int piece, bool experts) {
	lane_config c;
	lane_config_default(&c);
	c.lanes = lanes;
	c.piece = piece;
	c.prefix_cache = false;
	c.threads = 2;
	c.ctx = 1024;
	c.experts = experts;
	char err[256];
	lane_host *h = NULL;
	CHECKF(lane_host_new(&h, M, V, &c, err, sizeof err) == 0, "lane_host_new: %s", err);
	return h;
}

typedef struct {
	int32_t prompt[MAXP];
	lane_request q;
} spec;

// The requests: TEXTS in DOMAINS, GEN tokens each (greedy, or sampled with a seed), no drafts.
static void make_specs(spec *s, bool sampled) {
	for (int i = 0; i < NREQ; i++) {
		lane_request *q = &s[i].q;
		lane_request_init(q);
		q->n_prompt = tokens(TEXTS[i], s[i].prompt);
		q->prompt = s[i].prompt;
		q->max_tokens = GEN;
		q->ignore_eos = true;
		q->draft = false;
		q->domain = DOMAINS[i];
		q->sampling.temperature = sampled ? 0.9f : 0;
		q->sampling.seed = 7 + (uint64_t)i;
		q->sampling.has_seed = true;
	}
}

static void run(lane_host *h, spec *s, result *res, bool concurrent) {
	lane_req *r[NREQ] = {0};
	char err[256];
	for (int i = 0; i < NREQ; i++) {
		CHECKF(lane_submit(h, &s[i].q, &r[i], err, sizeof err) == 0, "submit: %s", err);
		if (!concurrent && r[i]) collect(r[i], &res[i]);
	}
	for (int i = 0; i < NREQ; i++) {
		if (concurrent && r[i]) collect(r[i], &res[i]);
		lane_req_free(r[i]);
	}
}

static int slot_of(const lane_experts *e, const char *domain) {
	if (!domain) return 0;
	for (int s = 1; s <= e->n_named; s++)
		if (!strcmp(e->name[s], domain)) return s;
	return -1;
}

// Concurrent requests in prompt pieces of 7: the host's counters by domain and phase equal the
// counts of each request's rows recomputed here — its prompt and every token it fed back, run
// alone in one pass, each row checked against the float64 reference.
static void host_counts(const char *name) {
	t_case("%s", name);
	char err[256];
	const model_hparams *hp = model_hparams_of(M);
	const int K = hp->n_experts_used, L = hp->n_layers;
	static spec s[NREQ];
	result res[NREQ];
	make_specs(s, false);
	lane_host *h = host(NREQ, 7, true);
	if (!h) return;
	CHECK(lane_host_observes_experts(h));
	run(h, s, res, true);
	lane_experts e, after;
	CHECK(lane_experts_init(h, &e) == 0 && lane_experts_init(h, &after) == 0);
	if (!e.counts || !after.counts) goto out;
	lane_host_experts(h, &e, true);
	lane_host_experts(h, &after, false);
	CHECKF(e.n_named == 2 && slot_of(&e, "story") > 0 && slot_of(&e, "code") > 0, "%s: two named domains (%d)", name, e.n_named);
	counts want[LANE_EXPERT_SLOTS][LANE_PHASE_COUNT];
	for (int sl = 0; sl < LANE_EXPERT_SLOTS; sl++)
		for (int ph = 0; ph < LANE_PHASE_COUNT; ph++) want[sl][ph] = counts_new();
	ref64_shape rs;
	ref64_shape_of(M, &rs);
	verdict vd = {.closest = INFINITY};
	model_routes *routes = NULL;
	model_ws *ws = NULL;
	CHECK(model_routes_new(&routes, hp, MAXP, err, sizeof err) == 0);
	CHECK(model_ws_new(&ws, M, MAXP, 1, 0, err, sizeof err) == 0);
	float *lg = malloc(sizeof(float) * MAXP * (size_t)hp->n_vocab);
	for (int i = 0; routes && ws && i < NREQ; i++) {
		CHECKF(res[i].terminals == 1 && res[i].n == GEN, "%s request %d: %d tokens", name, i, res[i].n);
		// the rows the request ran: its prompt, then each generated token but the last fed back
		seqref q = {.P = s[i].q.n_prompt + GEN - 1};
		memcpy(q.ids, s[i].prompt, sizeof(int32_t) * (size_t)s[i].q.n_prompt);
		memcpy(q.ids + s[i].q.n_prompt, res[i].ids, sizeof(int32_t) * (GEN - 1));
		seqref_make(&rs, &q);
		kv_config kc = model_kv_config(M, KV_F16S, 1, MAXP, 16);
		kv_cache *kv = NULL;
		model_row rows[MAXP];
		for (int p = 0; p < q.P; p++) rows[p] = (model_row){q.ids[p], p, 0, false, NULL};
		CHECK(kv_new(&kv, &kc, err, sizeof err) == 0);
		model_ws_set_routes(ws, routes);
		CHECKF(kv && model_forward_ws(M, kv, NULL, ws, rows, q.P, lg, err, sizeof err) == 0, "%s", err);
		const int sl = slot_of(&e, DOMAINS[i]);
		for (int p = 0; sl >= 0 && p < q.P; p++) {
			counts *c = &want[sl][p < s[i].q.n_prompt ? LANE_PHASE_PROMPT : LANE_PHASE_GENERATED];
			c->rows++;
			for (int l = 0; l < L; l++) {
				const int32_t *id = model_routes_ids(routes, l) + (size_t)p * K;
				const float *w = model_routes_weights(routes, l) + (size_t)p * K;
				check_row(&q, K, l, p, id, w, &vd);
				count_row(c, l, id, w);
			}
		}
		kv_free(kv);
		seqref_free(&q);
	}
	report(name, "lane host", &vd);
	for (int g = 0; g < LANE_EXPERT_SLOTS * LANE_PHASE_COUNT; g++) {
		model_experts_view v, z;
		model_experts_group(e.counts, g, &v);
		model_experts_group(after.counts, g, &z);
		CHECKF(same_counts(&v, &want[g / LANE_PHASE_COUNT][g % LANE_PHASE_COUNT], name),
		       "%s: slot %d (%s) %s rows equal their counts", name, g / LANE_PHASE_COUNT, e.name[g / LANE_PHASE_COUNT],
		       g % LANE_PHASE_COUNT ? "generated" : "prompt");
		CHECKF(z.rows == 0, "%s: the reset began an empty window", name);
	}
	CHECK(after.window == e.window + 1 && after.n_named == 0);
	for (int sl = 0; sl < LANE_EXPERT_SLOTS; sl++)
		for (int ph = 0; ph < LANE_PHASE_COUNT; ph++) counts_free(&want[sl][ph]);
	free(lg);
	model_ws_free(ws);
	model_routes_free(routes);
out:
	lane_experts_release(&e);
	lane_experts_release(&after);
	lane_host_free(h);
}

// A request's tokens are the same bit for bit with the observer on or off, alone or concurrent.
static void tokens_unchanged(const char *name) {
	t_case("%s", name);
	static spec s[NREQ];
	result off[NREQ], on_solo[NREQ], on_conc[NREQ], off_conc[NREQ];
	make_specs(s, true);
	lane_host *h = host(1, 0, false);
	CHECK(h && !lane_host_observes_experts(h));
	if (h) run(h, s, off, false);
	lane_host_free(h);
	h = host(NREQ, 5, false);
	if (h) run(h, s, off_conc, true);
	lane_host_free(h);
	h = host(1, 0, true);
	if (h) run(h, s, on_solo, false);
	lane_host_free(h);
	h = host(NREQ, 5, true);
	if (h) run(h, s, on_conc, true);
	lane_host_free(h);
	for (int i = 0; i < NREQ; i++) {
		CHECKF(off[i].terminals == 1 && off[i].n == GEN, "%s request %d finished", name, i);
		CHECKF(!strcmp(off[i].sha, on_solo[i].sha) && !strcmp(off[i].sha, on_conc[i].sha) && !strcmp(off[i].sha, off_conc[i].sha),
		       "%s request %d: the same tokens with the observer on and off, alone and concurrent", name, i);
	}
}

// Named domains fill LANE_EXPERT_DOMAINS slots in the order first seen; later names, and the name
// "other" itself, count as "other"; a bad name is refused at submit.
static void domain_bound(const char *name) {
	t_case("%s", name);
	char err[256], names[LANE_EXPERT_DOMAINS + 3][16];
	lane_host *h = host(1, 0, true);
	if (!h) return;
	int32_t prompt[3] = {1, 20, 30};
	const int n = LANE_EXPERT_DOMAINS + 3;
	for (int i = 0; i < n; i++) {
		snprintf(names[i], sizeof names[i], i == 2 ? "other" : "d%d", i);
		lane_request q;
		lane_request_init(&q);
		q.prompt = prompt, q.n_prompt = 3, q.max_tokens = 1, q.domain = names[i];
		lane_req *r = NULL;
		result res;
		CHECKF(lane_submit(h, &q, &r, err, sizeof err) == 0, "%s", err);
		if (r) collect(r, &res);
		lane_req_free(r);
	}
	const char *bad[] = {"has space", "<b>", "", "a-very-long-domain-name-past-32-bytes"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		lane_request q;
		lane_request_init(&q);
		q.prompt = prompt, q.n_prompt = 3, q.max_tokens = 1, q.domain = bad[i];
		lane_req *r = NULL;
		const int rc = lane_submit(h, &q, &r, err, sizeof err);
		CHECKF(bad[i][0] ? rc == LANES_EINVAL && strstr(err, "domain") && !r : rc == 0, "domain '%s': rc %d", bad[i], rc);
		if (r) {
			result res;
			collect(r, &res);
			lane_req_free(r);
		}
	}
	lane_experts e;
	CHECK(lane_experts_init(h, &e) == 0);
	if (e.counts) {
		lane_host_experts(h, &e, false);
		CHECKF(e.n_named == LANE_EXPERT_DOMAINS, "%s: %d named domains", name, e.n_named);
		for (int i = 0, k = 0; i < n && k < LANE_EXPERT_DOMAINS; i++)
			if (i != 2) CHECKF(!strcmp(e.name[++k], names[i]), "%s: slot %d is %s", name, k, e.name[k]);
		model_experts_view v, u;
		model_experts_group(e.counts, (LANE_EXPERT_SLOTS - 1) * LANE_PHASE_COUNT, &v);
		model_experts_group(e.counts, 0, &u);
		CHECKF(!strcmp(e.name[LANE_EXPERT_SLOTS - 1], "other") && v.rows == 3 * 3, "%s: 'other' holds 3 requests' rows (%llu)",
		       name, (unsigned long long)v.rows);
		CHECKF(u.rows == 3, "%s: the request with an empty domain is unlabeled (%llu rows)", name, (unsigned long long)u.rows);
	}
	lane_experts_release(&e);
	lane_host_free(h);
}

// A dense model, and a MoE model with the observer off, have no counters.
static void no_counters(void) {
	char path[1024], err[256];
	snprintf(path, sizeof path, "%s/models/stories260K.gguf", t_shared());
	model *m = NULL;
	tok_vocab *v = NULL;
	CHECKF(model_load(&m, path, err, sizeof err) == 0 && tok_vocab_load(&v, model_gguf(m), err, sizeof err) == 0, "%s", err);
	lane_config c;
	lane_config_default(&c);
	c.ctx = 256;
	lane_host *h = NULL;
	if (v) CHECKF(lane_host_new(&h, m, v, &c, err, sizeof err) == 0, "%s", err);
	lane_experts e;
	CHECK(h && !lane_host_observes_experts(h) && lane_experts_init(h, &e) == LANES_ENOTFOUND && !e.counts);
	model_routes *r = (model_routes *)1;
	CHECK(model_routes_new(&r, model_hparams_of(m), 8, err, sizeof err) == LANES_EINVAL && !r && strstr(err, "no experts"));
	lane_host_free(h);
	tok_vocab_free(v);
	model_free(m);
}

static void with_model(const char *path, void (*fn)(const char *)) {
	char err[512];
	CHECKF(model_load(&M, path, err, sizeof err) == 0, "%s", err);
	if (M) CHECKF(tok_vocab_load(&V, model_gguf(M), err, sizeof err) == 0, "%s", err);
	const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	if (M && V) fn(name);
	tok_vocab_free(V);
	model_free(M);
	V = NULL;
	M = NULL;
}

// `lanes gen --shape qwen2moe-test` (a shared expert beside 16 routed, top 4) into path.
static int gen_shape(const char *shape, const char *path) {
	char vocab[1024];
	snprintf(vocab, sizeof vocab, "%s/models/stories260K.gguf", t_shared());
	char *argv[] = {"gen", "--shape", (char *)shape, "--type", "Q8_0", "--vocab", vocab, "-o", (char *)path, NULL};
	static const cli_command c = {CMD_GEN, "gen", cmd_gen, "", "", 0};
	cli_settings s;
	const int rc = cli_setup(&c, 9, argv, &s);
	return rc >= 0 ? rc : cmd_gen(&s);
}

int main(void) {
	char path[1024];
	const char *models[] = {"ref-moe-F16.gguf", "ref-moe-Q8_0.gguf"};
	// the choices under every kernel set this CPU runs; the host's counts under the default one
	const char *sets[8];
	const int ns = tensor_kernels_available(sets, 8);
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof path, "%s/models/%s", t_shared(), models[i]);
		for (int k = 0; k < ns; k++) {
			CHECK(tensor_kernels_select(sets[k]) == 0);
			with_model(path, pass_choices);
		}
		with_model(path, host_counts);
	}
	with_model(path, tokens_unchanged);
	with_model(path, domain_bound);
	snprintf(path, sizeof path, "%s/lanes-experts-%d-qwen2moe.gguf", t_tmp(), (int)getpid());
	CHECK(gen_shape("qwen2moe-test", path) == 0);
	with_model(path, pass_choices);
	with_model(path, host_counts);
	remove(path);
	// qwen3next: its MoE (a shared expert beside the routed ones) behind recurrent layers
	snprintf(path, sizeof path, "%s/lanes-experts-%d-qwen3next.gguf", t_tmp(), (int)getpid());
	CHECK(gen_shape("qwen3-next-test", path) == 0);
	with_model(path, pass_choices);
	with_model(path, host_counts);
	with_model(path, tokens_unchanged);
	remove(path);
	no_counters();
	T_DONE("experts");
}
