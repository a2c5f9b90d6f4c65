// tests: the lane host — a request's tokens and logprobs are the same alone, concurrent,
// in random prompt pieces and after a prefix-cache warm-up; random submit/cancel/halt ends
// every request exactly once and frees every lane and page; injected faults stay local.
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "lanes/lanes.h"
#include "learn/learn.h"
#include "model/model.h"
#include "plan/plan.h"
#include "sample/sample.h"
#include "t.h"
#include "gen.h"
#include "stories.h"
#include "tokenizer/tokenizer.h"

#include <dirent.h>
#include <math.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

#define NREQ 32
#define MAXGEN 48

typedef struct {
	int32_t prompt[64];
	int32_t n_prompt;
	lane_request q;
	lane_bias bias[2];
	const char *stops[2];
} req_spec;

typedef struct {
	int32_t ids[MAXGEN + 1];
	float lp[MAXGEN + 1];
	int32_t n;
	enum lane_ev_kind end;
	enum lane_finish finish;
	char sha[65];
	char text[1024];
	size_t text_len;
	int terminals;
	char reason[160];
	uint64_t t_first;   // when the engine queued the first event (its t_us)
} result;

static model *M;
static tok_vocab *V;

static void make_specs(req_spec *s, int n, uint64_t seed, int32_t n_vocab) {
	uint64_t x = seed;
	for (int i = 0; i < n; i++) {
		memset(&s[i], 0, sizeof s[i]);
		x = splitmix64(x);
		s[i].n_prompt = 1 + (int32_t)(x % 60);
		s[i].prompt[0] = 1;
		for (int32_t k = 1; k < s[i].n_prompt; k++) {
			x = splitmix64(x);
			s[i].prompt[k] = 3 + (int32_t)(x % (uint64_t)(n_vocab - 3));
		}
		// half the requests share a long common head, so the prefix cache has work
		if (i % 2 == 0 && s[i].n_prompt > 40)
			for (int32_t k = 1; k < 40; k++) s[i].prompt[k] = 3 + (k * 37) % (n_vocab - 3);
		lane_request *q = &s[i].q;
		q->prompt = s[i].prompt;
		q->n_prompt = s[i].n_prompt;
		q->max_tokens = 4 + (int32_t)(x >> 40) % (MAXGEN - 4);
		q->sampling.top_p = 1;
		q->sampling.repeat_penalty = 1;
		q->logprobs = true;
		q->top_logprobs = (i % 3 == 0) ? 3 : 0;
		if (i % 4) {
			q->sampling.temperature = 0.5f + (float)(i % 5) * 0.3f;
			q->sampling.top_k = (i % 3) * 20;
			q->sampling.top_p = i % 2 ? 0.9f : 1.0f;
			q->sampling.min_p = i % 5 == 1 ? 0.05f : 0;
			q->sampling.seed = 1000 + (uint64_t)i;
			q->sampling.has_seed = true;
			q->sampling.choice = i % 3;
			q->sampling.presence_penalty = i % 6 == 1 ? 0.5f : 0;
			q->sampling.frequency_penalty = i % 7 == 2 ? 0.3f : 0;
			q->sampling.repeat_penalty = i % 5 == 3 ? 1.1f : 1;
		}
		if (i % 5 == 4) {
			s[i].bias[0] = (lane_bias){5, 2.0f};
			s[i].bias[1] = (lane_bias){6, -INFINITY};
			q->sampling.bias = s[i].bias;
			q->sampling.n_bias = 2;
		}
		q->ignore_eos = i % 2 == 1;
	}
}

static void collect(lane_req *r, result *out) {
	memset(out, 0, sizeof *out);
	lane_event ev;
	while (lane_next(r, &ev, 30 * 1000000) == 1) {
		if (!out->t_first) out->t_first = ev.t_us;
		if (ev.kind == LANE_EV_TOKEN) {
			if (out->n <= MAXGEN) {
				out->ids[out->n] = ev.token;
				out->lp[out->n] = ev.logprob;
			}
			out->n++;
		}
		if (ev.text_len && out->text_len + ev.text_len < sizeof out->text) {
			memcpy(out->text + out->text_len, ev.text, ev.text_len);
			out->text_len += ev.text_len;
		}
		if (ev.kind != LANE_EV_TOKEN) {
			out->terminals++;
			out->end = ev.kind;
			out->finish = ev.finish;
			memcpy(out->sha, ev.token_sha, 65);
			if (ev.reason) snprintf(out->reason, sizeof out->reason, "%s", ev.reason);
			if (lane_next(r, &ev, 0) == 1) out->terminals++; // nothing may follow a terminal event
			break;
		}
	}
}

static const model *DRAFT; // draft model for hosts made by host(), or NULL
static enum kv_type KVT = KV_F16S; // KV type of hosts made by host()
static int32_t WINDOW, WINDOW_MAX; // elastic window of hosts made by host() (0: fixed pool)
static int32_t QUEUE = -1; // queue of hosts made by host() (-1: the default)
static double ROW_US, FIXED_US;   // pricing of hosts made by host() (0: timed at start)
static const char *CACHE_DIR;     // the prefix cache's folder of hosts made by host() (NULL: none)
static uint64_t CACHE_MAX;        // its cap (0: the default)
static uint8_t CACHE_IDENT;       // the first byte of the model's identity those hosts are given
static int32_t PAGE_TOKENS;       // tokens per KV page of hosts made by host() (0: the default)

static lane_host *host(int lanes, int piece, bool cache, int threads) {
	lane_config c;
	lane_config_default(&c);
	c.draft_model = DRAFT;
	c.lanes = lanes;
	c.piece = piece;
	c.prefix_cache = cache;
	c.threads = threads;
	c.ctx = 2048;
	c.kv_type = KVT;
	c.window = WINDOW;
	c.window_max = WINDOW_MAX;
	if (PAGE_TOKENS) c.page_tokens = PAGE_TOKENS;
	if (QUEUE >= 0) c.queue = QUEUE;
	c.row_us = ROW_US;
	c.fixed_us = FIXED_US;
	c.cache_dir = CACHE_DIR;
	c.cache_dir_bytes = CACHE_MAX;
	c.cache_ident[0] = CACHE_IDENT;
	char err[256];
	lane_host *h = NULL;
	int rc = lane_host_new(&h, M, V, &c, err, sizeof err);
	CHECKF(rc == 0, "lane_host_new: %s", err);
	return h;
}

static bool same(const result *a, const result *b) {
	return a->n == b->n && !memcmp(a->ids, b->ids, sizeof(int32_t) * (size_t)(a->n < MAXGEN ? a->n : MAXGEN)) &&
	       !memcmp(a->lp, b->lp, sizeof(float) * (size_t)(a->n < MAXGEN ? a->n : MAXGEN)) && !strcmp(a->sha, b->sha) &&
	       a->end == b->end && a->finish == b->finish && a->text_len == b->text_len && !memcmp(a->text, b->text, a->text_len);
}

static void run_all(lane_host *h, req_spec *s, int n, result *res, bool concurrent) {
	lane_req *r[NREQ];
	char err[256];
	if (concurrent) {
		for (int i = 0; i < n; i++) CHECKF(lane_submit(h, &s[i].q, &r[i], err, sizeof err) == 0, "submit: %s", err);
		for (int i = 0; i < n; i++) {
			if (r[i]) collect(r[i], &res[i]);
			lane_req_free(r[i]);
		}
	} else {
		for (int i = 0; i < n; i++) {
			CHECKF(lane_submit(h, &s[i].q, &r[i], err, sizeof err) == 0, "submit: %s", err);
			if (r[i]) collect(r[i], &res[i]);
			lane_req_free(r[i]);
		}
	}
}

// name: a file of ../shared/models, or a path.
static void model_path(char *path, size_t n, const char *name) {
	if (strchr(name, '/')) snprintf(path, n, "%s", name);
	else snprintf(path, n, "%s/models/%s", t_shared(), name);
}

static void test_exact_kv(const char *name, enum kv_type kvt) {
	t_case("%s kv %d", name, (int)kvt);
	KVT = kvt;
	char path[1024], err[512];
	t_case("%s", name);
	model_path(path, sizeof path, name);
	CHECKF(model_load(&M, path, err, sizeof err) == 0, "%s", err);
	if (!M) return;
	t_case("%s kv %d %s", name, (int)kvt, tensor_act_name(tensor_kernels_act(model_kernels(M))));
	CHECKF(tok_vocab_load(&V, model_gguf(M), err, sizeof err) == 0, "%s", err);
	if (!V) { model_free(M); M = NULL; return; }
	static req_spec s[NREQ];
	make_specs(s, NREQ / 2, 42, model_hparams_of(M)->n_vocab);
	static result solo[NREQ], conc[NREQ], pieces[NREQ], cached[NREQ], threads1[NREQ];
	lane_host *h = host(1, 0, false, 2);
	run_all(h, s, NREQ / 2, solo, false);
	lane_host_free(h);
	h = host(8, 0, false, 2);
	run_all(h, s, NREQ / 2, conc, true);
	lane_host_free(h);
	h = host(5, 3, false, 2);
	run_all(h, s, NREQ / 2, pieces, true);
	lane_host_free(h);
	h = host(4, 7, true, 1);
	run_all(h, s, NREQ / 2, threads1, true);  // warms the prefix cache
	run_all(h, s, NREQ / 2, cached, true);    // and runs from it
	lane_snapshot snap;
	lane_host_snapshot(h, &snap);
	static result again[6];
	if (model_state_floats(model_hparams_of(M))) {
		// a recurrent model keeps one state checkpoint per lane (least recently used dropped):
		// the last requests' prompts (those past a page), run again, resume from theirs
		const uint64_t before = snap.prefix_hit_tokens;
		run_all(h, s + NREQ / 2 - 6, 6, again, true);
		lane_host_snapshot(h, &snap);
		CHECKF(snap.prefix_hit_tokens > before, "%s: the state checkpoints were hit (%llu tokens)", name,
		       (unsigned long long)(snap.prefix_hit_tokens - before));
		for (int i = 0; i < 6; i++) CHECKF(same(&solo[NREQ / 2 - 6 + i], &again[i]), "%s req %d: fresh = checkpoint", name, i);
	}
	CHECKF(snap.prefix_hit_tokens > 0, "%s: the prefix cache was hit (%llu tokens)", name, (unsigned long long)snap.prefix_hit_tokens);
	lane_host_free(h);
	int generated = 0;
	for (int i = 0; i < NREQ / 2; i++) {
		CHECKF(solo[i].terminals == 1 && solo[i].end == LANE_EV_FINISHED, "%s req %d: finished once", name, i);
		CHECKF(same(&solo[i], &conc[i]), "%s req %d: solo = concurrent", name, i);
		CHECKF(same(&solo[i], &pieces[i]), "%s req %d: whole = pieces", name, i);
		CHECKF(same(&solo[i], &threads1[i]), "%s req %d: 2 threads = 1 thread", name, i);
		CHECKF(same(&solo[i], &cached[i]), "%s req %d: fresh = prefix cache", name, i);
		generated += solo[i].n;
	}
	CHECKF(generated > NREQ * 2, "%s: tokens were generated (%d)", name, generated);
	KVT = KV_F16S;
	tok_vocab_free(V);
	model_free(M);
	V = NULL;
	M = NULL;
}

static void test_exact(const char *name) { test_exact_kv(name, KV_F16S); }

// The elastic window: a burst of long requests grows it (and the KV the pool may use), it
// shrinks back to the floor when they stop, tokens never depend on it, and a request past
// the largest window the budget allows is refused with the numbers.
static void test_elastic(void) {
	static req_spec s[NREQ];
	make_specs(s, 6, 77, model_hparams_of(M)->n_vocab);
	for (int i = 0; i < 6; i++) s[i].q.max_tokens = i < 3 ? 300 : 20; // 3 long, 3 short
	static result fixed[NREQ], elastic[NREQ];
	lane_host *h = host(2, 0, false, 2);
	run_all(h, s, 6, fixed, true);
	lane_host_free(h);
	lane_config c;
	lane_config_default(&c);
	c.lanes = 2;
	c.window = 128;
	c.window_max = 512;
	c.window_recent_s = 2.0;
	char err[256];
	CHECKF(lane_host_new(&h, M, V, &c, err, sizeof err) == 0, "elastic host: %s", err);
	if (!h) return;
	lane_snapshot a, b, d;
	lane_host_snapshot(h, &a);
	CHECKF(a.window == 128 && a.window_floor == 128 && a.window_max == 512, "starts at the floor (%d %d %d)", a.window,
	       a.window_floor, a.window_max);
	CHECKF(a.kv_reserved_bytes == 4 * a.kv_bytes, "the pool may use a quarter of the reservation (%llu of %llu)",
	       (unsigned long long)a.kv_bytes, (unsigned long long)a.kv_reserved_bytes);
	CHECKF(a.compute_bytes > 0 && a.compute_bytes == lane_compute_bytes(model_hparams_of(M), &(lane_config){
		       .lanes = 2, .draft_max = 8, .threads = 0, .window = 128, .window_max = 512}),
	       "compute bytes = lane_compute_bytes (%llu)", (unsigned long long)a.compute_bytes);
	// a burst of long requests
	run_all(h, s, 6, elastic, true);
	int32_t need = 0;
	for (int i = 0; i < 3; i++) need = s[i].n_prompt + 300 > need ? s[i].n_prompt + 300 : need;
	for (int t = 0; t < 1200; t++) {
		lane_host_snapshot(h, &b);
		if (b.window_demand) break;
		usleep(50000);
	}
	CHECKF(b.window >= need && b.window <= 512, "the burst grew the window (%d for %d)", b.window, need);
	CHECKF(b.window_demand >= 300, "demand follows the requests' sizes (%d)", b.window_demand);
	CHECKF(b.kv_bytes > a.kv_bytes, "the pool may use more KV (%llu -> %llu)", (unsigned long long)a.kv_bytes,
	       (unsigned long long)b.kv_bytes);
	for (int i = 0; i < 6; i++) CHECKF(same(&fixed[i], &elastic[i]), "req %d: elastic window = fixed pool", i);
	// they stop: the window comes back to the floor on its own
	for (int t = 0; t < 600; t++) {
		lane_host_snapshot(h, &d);
		if (d.window == 128) break;
		usleep(100000);
	}
	CHECKF(d.window == 128 && d.kv_bytes == a.kv_bytes, "the window shrank back (%d, %llu bytes)", d.window,
	       (unsigned long long)d.kv_bytes);
	// short requests keep it there
	run_all(h, s + 3, 3, elastic + 3, false);
	lane_host_snapshot(h, &d);
	CHECKF(d.window == 128, "short requests keep the floor (%d)", d.window);
	lane_req *r = NULL;
	// without max_tokens a request runs to the current window
	lane_request open = s[3].q;
	open.max_tokens = 0;
	open.ignore_eos = true;
	result o;
	CHECK(lane_submit(h, &open, &r, err, sizeof err) == 0);
	if (r) collect(r, &o), lane_req_free(r);
	CHECKF(o.n == 128 - open.n_prompt && o.finish == LANE_FINISH_LENGTH, "ran to the window: %d tokens", o.n);
	// past the largest window: capped there, ending with "length", the same tokens as asking
	// for exactly what fits
	lane_request big = s[0].q;
	big.ignore_eos = true;
	result bg[2];
	for (int k = 0; k < 2; k++) {
		big.max_tokens = k ? 512 - big.n_prompt : 600;
		CHECK(lane_submit(h, &big, &r, err, sizeof err) == 0);
		if (r) collect(r, &bg[k]), lane_req_free(r);
	}
	CHECKF(bg[0].n == 512 - big.n_prompt && bg[0].finish == LANE_FINISH_LENGTH, "capped at the largest window: %d tokens",
	       bg[0].n);
	CHECK(same(&bg[0], &bg[1]));
	// a prompt past it is refused with the numbers
	int32_t *ids = calloc(600, sizeof *ids);
	big.prompt = ids;
	big.n_prompt = 600;
	CHECK(lane_submit(h, &big, &r, err, sizeof err) == LANES_ELIMIT && !r);
	CHECKF(strstr(err, "largest window") && strstr(err, "512"), "refusal names the window: %s", err);
	free(ids);
	lane_host_free(h);
}

// The planner's figures are what a host started from the plan allocates by its own
// accounting: KV reservation and compute, within 2%, for every KV type.
static void test_plan_accounting(void) {
	char path[1024], err[256];
	snprintf(path, sizeof path, "%s/models/stories260K.gguf", t_shared());
	plan_model pm;
	CHECKF(plan_model_load(&pm, path, err, sizeof err) == 0, "%s", err);
	for (int t = 0; t < KV_TYPE_COUNT; t++) {
		lane_config c;
		lane_config_default(&c);
		c.kv_type = (enum kv_type)t;
		c.threads = 2;
		plan_result pr;
		CHECKF(plan_make(&pr, &pm, 24u << 20, 0, &c, err, sizeof err) == 0, "%s", err);
		CHECKF(pr.fits, "%s: fits in 24 MiB: %s", kv_type_name(c.kv_type), pr.reason);
		c.lanes = pr.lanes;
		c.window_max = pr.window;
		c.window = pr.window;
		lane_host *h = NULL;
		CHECKF(lane_host_new(&h, M, V, &c, err, sizeof err) == 0, "%s", err);
		if (!h) continue;
		lane_snapshot sn;
		lane_host_snapshot(h, &sn);
		const double kv = (double)sn.kv_reserved_bytes / (double)pr.kv_bytes,
			     comp = (double)sn.compute_bytes / (double)pr.compute_reserve_bytes;
		CHECKF(fabs(kv - 1) <= 0.02 && fabs(comp - 1) <= 0.02,
		       "%s: plan KV %llu / compute %llu, host %llu / %llu", kv_type_name(c.kv_type),
		       (unsigned long long)pr.kv_bytes, (unsigned long long)pr.compute_reserve_bytes,
		       (unsigned long long)sn.kv_reserved_bytes, (unsigned long long)sn.compute_bytes);
		CHECKF(sn.kv_bytes == sn.kv_reserved_bytes, "%s: at the plan's window the pool may use all of it",
		       kv_type_name(c.kv_type));
		lane_host_free(h);
	}
	// with a draft model (here the model itself) its workspace and logits count too
	lane_config c;
	lane_config_default(&c);
	c.threads = 2;
	c.draft_model = M;
	lane_host *h = NULL;
	CHECKF(lane_host_new(&h, M, V, &c, err, sizeof err) == 0, "%s", err);
	if (h) {
		lane_snapshot sn;
		lane_host_snapshot(h, &sn);
		c.draft_model = NULL;
		const uint64_t plain = lane_compute_bytes(model_hparams_of(M), &c);
		c.draft_model = M;
		CHECKF(sn.compute_bytes == lane_compute_bytes(model_hparams_of(M), &c) && sn.compute_bytes > plain,
		       "draft model: host %llu, lane_compute_bytes %llu (without it %llu)", (unsigned long long)sn.compute_bytes,
		       (unsigned long long)lane_compute_bytes(model_hparams_of(M), &c), (unsigned long long)plain);
		lane_host_free(h);
	}
}

// Random submits, cancels and a halt at random points: every request gets exactly one
// terminal event, and at the end every lane and KV page is free and nothing is open.
static void test_chaos(uint64_t seed) {
	t_case("seed %llu", (unsigned long long)seed);
	req_spec s[NREQ];
	make_specs(s, NREQ, seed, model_hparams_of(M)->n_vocab);
	lane_config c;
	lane_config_default(&c);
	c.lanes = 3;
	c.queue = 6;
	c.ctx = 1024;
	c.piece = 5;
	char err[256];
	lane_host *h = NULL;
	CHECKF(lane_host_new(&h, M, V, &c, err, sizeof err) == 0, "%s", err);
	if (!h) return;
	lane_req *r[3 * NREQ] = {0};
	int n = 0, busy = 0;
	uint64_t x = seed;
	for (int k = 0; k < 3 * NREQ; k++) {
		x = splitmix64(x);
		int rc = lane_submit(h, &s[k % NREQ].q, &r[n], err, sizeof err);
		if (rc == LANES_EBUSY) busy++;
		else CHECKF(rc == 0, "submit: %s", err);
		if (rc == 0) n++;
		if (x % 5 == 0 && n) lane_cancel(r[(x >> 8) % (uint64_t)n]);
		if (x % 7 == 0) usleep((useconds_t)(x >> 50) % 3000);
	}
	x = splitmix64(x);
	usleep((useconds_t)(x % 20000));
	lane_host_halt(h, "halt for the test");
	int cancelled = 0, failed = 0, finished = 0;
	for (int i = 0; i < n; i++) {
		result res;
		collect(r[i], &res);
		CHECKF(res.terminals == 1, "chaos %llu: request %d has %d terminal events", (unsigned long long)seed, i, res.terminals);
		if (res.end == LANE_EV_CANCELLED) cancelled++;
		if (res.end == LANE_EV_FINISHED) finished++;
		if (res.end == LANE_EV_FAILED) {
			failed++;
			CHECKF(!strcmp(res.reason, "halt for the test"), "failed with the halt's reason: %s", res.reason);
		}
		lane_req_free(r[i]);
	}
	CHECK(cancelled + failed + finished == n);
	CHECK(lane_submit(h, &s[0].q, &r[0], err, sizeof err) == LANES_ECANCELLED);
	lane_snapshot snap;
	for (int w = 0; w < 60000; w++) {
		lane_host_snapshot(h, &snap);
		if (snap.halted) break;
		usleep(1000);
	}
	CHECK(lane_host_open(h) == 0);
	CHECK(snap.halted);
	CHECKF(snap.kv_pages_used == snap.kv_pages_cached, "every page free or only cached (%d used, %d cached)",
	       snap.kv_pages_used, snap.kv_pages_cached);
	for (int i = 0; i < snap.n_lanes; i++) CHECK(snap.lanes[i].phase == LANE_IDLE);
	lane_host_free(h);
}

// Faults injected into one request's rounds end that request alone; the others finish with
// the tokens they have solo. Faults during halt still deliver every terminal event.
static uint64_t victim;
static bool fault_victim(void *arg, uint64_t round, uint64_t serial) { return serial == victim && round > 3; }
static bool fault_all(void *arg, uint64_t round, uint64_t serial) { return true; }

static void test_faults(void) {
	req_spec s[6];
	make_specs(s, 6, 7, model_hparams_of(M)->n_vocab);
	for (int i = 0; i < 6; i++) s[i].q.max_tokens = 20, s[i].q.ignore_eos = true;
	static result solo[6], with[6];
	lane_host *h = host(1, 0, false, 2);
	run_all(h, s, 6, solo, false);
	lane_host_free(h);
	h = host(6, 4, false, 2);
	victim = 3; // serials count from 1: the third request
	lane_host_set_fault(h, fault_victim, NULL);
	run_all(h, s, 6, with, true);
	for (int i = 0; i < 6; i++) {
		if (i == 2) CHECKF(with[i].end == LANE_EV_FAILED && with[i].terminals == 1, "the faulted request failed alone");
		else CHECKF(same(&solo[i], &with[i]), "request %d unharmed by another's fault", i);
	}
	lane_host_free(h);
	// every allocation fails while a halt takes over: terminal events still arrive
	h = host(2, 2, false, 2);
	lane_req *r[6];
	char err[256];
	// the faults come first: a request the engine took at once could otherwise finish before them
	lane_host_set_fault(h, fault_all, NULL);
	for (int i = 0; i < 6; i++) CHECK(lane_submit(h, &s[i].q, &r[i], err, sizeof err) == 0);
	lane_host_halt(h, "server restarting: retry shortly");
	for (int i = 0; i < 6; i++) {
		result res;
		collect(r[i], &res);
		CHECKF(res.terminals == 1 && res.end == LANE_EV_FAILED, "request %d ended once under faults and halt", i);
		lane_req_free(r[i]);
	}
	lane_host_free(h);
}

static lane_req *submit1(lane_host *h, const lane_request *q) {
	lane_req *r = NULL;
	char err[256];
	int rc = lane_submit(h, q, &r, err, sizeof err);
	CHECKF(rc == 0, "submit: %s", err);
	return r;
}

// A grammar that allows no token ends its request as a finish, never a failure, with the text
// so far all out: past what compile explored (every way on needs more stacks than the grammar
// may hold), and where biases ban every token the grammar allows.
static void test_grammar_dead_end(void) {
	lane_host *h = host(2, 0, false, 2);
	if (!h) return;
	char err[256];
	grammar_limits lim;
	grammar_default_limits(&lim);
	lim.max_stacks = 2, lim.max_explore = 1;
	const char *past = "root ::= \"Onc\" (\"ea\" | \"eb\" | \"ec\")"; // the 'c' would need three stacks
	const char *hi = "root ::= \"Hi\" [\\x01]";
	grammar *g[2] = {NULL, NULL};
	CHECKF(grammar_compile(&g[0], past, strlen(past), &lim, err, sizeof err) == 0, "%s", err);
	CHECKF(grammar_compile(&g[1], hi, strlen(hi), NULL, err, sizeof err) == 0, "%s", err);
	size_t l = 0;
	const char *p = tok_piece(V, 4, 0, &l);
	CHECKF(p && l == 1 && p[0] == 1, "token 4 is the byte 0x01");
	lane_bias ban = {4, -INFINITY};
	int32_t bos = 1;
	static const char *const want[2] = {"On", "Hi"};
	for (int i = 0; i < 2 && g[0] && g[1]; i++) {
		lane_request q = {.prompt = &bos, .n_prompt = 1, .max_tokens = 40, .grammar = g[i]};
		q.sampling.top_p = 1;
		q.sampling.repeat_penalty = 1;
		if (i == 1) q.sampling.bias = &ban, q.sampling.n_bias = 1;
		result res;
		lane_req *r = submit1(h, &q);
		if (r) collect(r, &res);
		lane_req_free(r);
		CHECKF(r && res.terminals == 1 && res.end == LANE_EV_FINISHED && res.finish == LANE_FINISH_GRAMMAR,
		       "dead end %d: one terminal, finished by the grammar (end %d, finish %d: %s)", i, res.end, res.finish, res.reason);
		CHECKF(r && res.n >= 1 && res.text_len == strlen(want[i]) && !memcmp(res.text, want[i], res.text_len),
		       "dead end %d: the text so far, all of it: '%.*s' in %d tokens", i, (int)res.text_len, res.text, res.n);
	}
	grammar_unref(g[0]);
	grammar_unref(g[1]);
	lane_host_free(h);
}

// The rounds a prompt takes: with no stream decoding a round takes the whole prompt (up to
// 512 rows) whatever the pricing leaves, so a lone prompt fills in one pass; beside a live
// stream it fills in the pieces the budget gives (a round target of 1 us: one page a round).
static void test_idle_fill(void) {
	lane_config c;
	lane_config_default(&c);
	c.lanes = 2;
	c.threads = 2;
	c.ctx = 2048;
	c.round_ms = 0.001;
	c.prefix_cache = false; // the second prompt is the first: it must fill again
	char err[256];
	lane_host *h = NULL;
	CHECKF(lane_host_new(&h, M, V, &c, err, sizeof err) == 0, "lane_host_new: %s", err);
	if (!h) return;
	int32_t prompt[300];
	for (int32_t k = 0; k < 300; k++) prompt[k] = k ? 3 + (k * 7) % 400 : 1;
	lane_request q = {.prompt = prompt, .n_prompt = 300, .max_tokens = 1, .ignore_eos = true};
	q.sampling.top_p = 1;
	q.sampling.repeat_penalty = 1;
	lane_request live = q;
	live.n_prompt = 2;
	live.max_tokens = 1500;
	uint64_t rounds[2];
	for (int pass = 0; pass < 2; pass++) {
		// pass 1: a stream decodes beside the prompt
		lane_req *a = pass ? submit1(h, &live) : NULL;
		lane_event ev;
		if (a) CHECK(lane_next(a, &ev, 30 * 1000000) == 1 && ev.kind == LANE_EV_TOKEN);
		lane_snapshot s0, s1;
		lane_host_snapshot(h, &s0);
		lane_req *r = submit1(h, &q);
		result res;
		collect(r, &res);
		lane_req_free(r);
		CHECK(res.n == 1);
		// the snapshot is published after the round that ended the request
		for (int w = 0; w < 60000; w++) {
			lane_host_snapshot(h, &s1);
			if (s1.finished > s0.finished) break;
			usleep(1000);
		}
		rounds[pass] = s1.rounds - s0.rounds;
		if (a) {
			lane_cancel(a);
			collect(a, &res);
			lane_req_free(a);
		}
	}
	CHECKF(rounds[0] == 1, "a lone 300-token prompt fills in one round (%llu rounds)", (unsigned long long)rounds[0]);
	CHECKF(rounds[1] >= 300 / 16, "beside a stream it fills a page a round (%llu rounds)", (unsigned long long)rounds[1]);
	lane_host_free(h);
}

// What a user of the API sees: stop strings cut across token boundaries and never shown,
// banned tokens never drawn, penalties change the text, lengths, and refusals with reasons.
static void test_semantics(void) {
	lane_host *h = host(2, 0, true, 2);
	int32_t prompt[5];
	size_t np = 0;
	int32_t *ids = NULL;
	char err[256];
	CHECK(tok_encode(V, "Once upon a time", 16, true, false, &ids, &np, err, sizeof err) == 0);
	memcpy(prompt, ids, np * sizeof *ids);
	free(ids);
	lane_request q = {.prompt = prompt, .n_prompt = (int32_t)np, .max_tokens = 40};
	q.sampling.top_p = 1;
	q.sampling.repeat_penalty = 1;
	result base, cut, banned, pen;
	lane_req *r = submit1(h, &q);
	collect(r, &base);
	lane_req_free(r);
	CHECKF(base.n == 40 && base.finish == LANE_FINISH_LENGTH, "greedy run of 40 tokens ends by length (%d)", base.n);
	// a stop string that spans tokens: the text before it only, finish stop_sequence
	const char *text = base.text;
	const char *mid = text + base.text_len / 2;
	char stop[8];
	memcpy(stop, mid, 5);
	stop[5] = 0;
	const char *stops[1] = {stop};
	q.stop_strs = stops;
	q.n_stop_strs = 1;
	r = submit1(h, &q);
	collect(r, &cut);
	lane_req_free(r);
	size_t at = (size_t)(strstr(text, stop) - text);
	CHECKF(cut.end == LANE_EV_FINISHED && cut.finish == LANE_FINISH_STOP_SEQUENCE, "ends on the stop string");
	CHECKF(cut.text_len == at && !memcmp(cut.text, text, at), "text up to the stop string only (%zu vs %zu)", cut.text_len, at);
	q.n_stop_strs = 0;
	// banning the first token changes the first token
	lane_bias ban = {base.ids[0], -INFINITY};
	q.sampling.bias = &ban;
	q.sampling.n_bias = 1;
	r = submit1(h, &q);
	collect(r, &banned);
	lane_req_free(r);
	bool seen = false;
	for (int i = 0; i < banned.n && i < MAXGEN; i++) seen |= banned.ids[i] == ban.token;
	CHECKF(!seen && banned.ids[0] != base.ids[0], "a banned token is never drawn");
	q.sampling.n_bias = 0;
	// a strong frequency penalty breaks greedy repetition
	q.sampling.frequency_penalty = 2;
	q.sampling.presence_penalty = 2;
	r = submit1(h, &q);
	collect(r, &pen);
	lane_req_free(r);
	int distinct_base = 0, distinct_pen = 0;
	for (int i = 0; i < base.n && i < pen.n; i++) {
		bool b = true, p2 = true;
		for (int k = 0; k < i; k++) b &= base.ids[k] != base.ids[i], p2 &= pen.ids[k] != pen.ids[i];
		distinct_base += b;
		distinct_pen += p2;
	}
	CHECKF(distinct_pen > distinct_base, "penalties make more distinct tokens (%d > %d)", distinct_pen, distinct_base);
	q.sampling.frequency_penalty = q.sampling.presence_penalty = 0;
	// refusals: each with a reason naming the field
	lane_request bad = q;
	int32_t *long_prompt = calloc(5000, sizeof *long_prompt);
	bad.prompt = long_prompt;
	bad.n_prompt = 5000;
	CHECK(lane_submit(h, &bad, &r, err, sizeof err) == LANES_ELIMIT && strstr(err, "context"));
	free(long_prompt);
	bad = q;
	bad.sampling.temperature = -1;
	CHECK(lane_submit(h, &bad, &r, err, sizeof err) == LANES_EINVAL && strstr(err, "temperature"));
	bad = q;
	bad.sampling.top_p = 0;
	CHECK(lane_submit(h, &bad, &r, err, sizeof err) == LANES_EINVAL && strstr(err, "top_p"));
	int32_t huge = 1 << 30;
	bad = q;
	bad.prompt = &huge;
	bad.n_prompt = 1;
	CHECK(lane_submit(h, &bad, &r, err, sizeof err) == LANES_EINVAL && strstr(err, "vocabulary"));
	bad = q;
	bad.n_prompt = 0;
	CHECK(lane_submit(h, &bad, &r, err, sizeof err) == LANES_EINVAL && strstr(err, "empty"));
	bad = q;
	bad.top_logprobs = 99;
	CHECK(lane_submit(h, &bad, &r, err, sizeof err) == LANES_EINVAL && strstr(err, "top_logprobs"));
	lane_snapshot snap;
	for (int w = 0; w < 60000; w++) {
		lane_host_snapshot(h, &snap);
		if (snap.finished >= 4) break;
		usleep(1000); // the snapshot follows the round that ended the request
	}
	CHECKF(snap.rejected == 6 && snap.finished == 4, "rejected %llu, finished %llu", (unsigned long long)snap.rejected,
	       (unsigned long long)snap.finished);
	lane_host_free(h);
	// a full queue is refused with EBUSY
	lane_config c;
	lane_config_default(&c);
	c.lanes = 1;
	c.queue = 1;
	c.ctx = 256;
	CHECK(lane_host_new(&h, M, V, &c, err, sizeof err) == 0);
	q.max_tokens = 100;
	lane_req *a = submit1(h, &q), *b = submit1(h, &q);
	CHECK(lane_submit(h, &q, &r, err, sizeof err) == LANES_EBUSY && strstr(err, "queue"));
	lane_req_free(a);
	lane_req_free(b);
	lane_host_free(h);
}

// What a notify callback saw: each event's kind, token and time, as it was queued.
typedef struct {
	pthread_mutex_t mu;
	int n;
	enum lane_ev_kind kind[MAXGEN + 2];
	int32_t token[MAXGEN + 2];
	uint64_t t_us[MAXGEN + 2];
} notes;

static void note(void *arg, const lane_event *ev) {
	notes *w = arg;
	pthread_mutex_lock(&w->mu);
	if (w->n < MAXGEN + 2) w->kind[w->n] = ev->kind, w->token[w->n] = ev->token, w->t_us[w->n] = ev->t_us;
	w->n++;
	pthread_mutex_unlock(&w->mu);
}

// The notify callback is handed each event as the engine queues it, the terminal one too,
// with the time the reader later reads in it: a reader may sleep until the event it wants.
static void test_notify(void) {
	lane_host *h = host(1, 0, false, 2);
	int32_t prompt[3] = {1, 400, 300};
	lane_request q = {.prompt = prompt, .n_prompt = 3, .max_tokens = 24, .ignore_eos = true};
	q.sampling.top_p = 1;
	q.sampling.repeat_penalty = 1;
	static notes w = {.mu = PTHREAD_MUTEX_INITIALIZER};
	const uint64_t t0 = base_now_us();
	// a request holding the one lane, so the callback is set before the next one starts
	lane_request qb = q;
	qb.max_tokens = 200;
	lane_req *blocker = submit1(h, &qb);
	lane_req *r = submit1(h, &q);
	lane_req_set_notify(r, note, &w);
	lane_req_free(blocker);
	lane_event ev;
	enum lane_ev_kind kind[MAXGEN + 2];
	int32_t token[MAXGEN + 2];
	uint64_t t_us[MAXGEN + 2];
	int n = 0;
	while (n < MAXGEN + 2 && lane_next(r, &ev, 30 * 1000000) == 1) {
		kind[n] = ev.kind, token[n] = ev.token, t_us[n] = ev.t_us;
		n++;
		if (ev.kind != LANE_EV_TOKEN) break;
	}
	// the reader may take an event before its callback runs: the end's callback still comes
	bool ended = false;
	for (int w8 = 0; w8 < 60000 && !ended; w8++) {
		pthread_mutex_lock(&w.mu);
		ended = w.n > 0 && w.n <= MAXGEN + 2 && w.kind[w.n - 1] == LANE_EV_FINISHED;
		pthread_mutex_unlock(&w.mu);
		if (!ended) usleep(1000);
	}
	lane_req_set_notify(r, NULL, NULL);
	lane_req_free(r);
	lane_host_free(h);
	CHECKF(ended, "the callback saw the end");
	CHECKF(n == 25 && kind[24] == LANE_EV_FINISHED, "24 tokens and the end (%d events)", n);
	// events queued before the callback was set are not seen: the rest are, in order
	CHECKF(w.n >= 1 && w.n <= n, "the callback saw %d of %d events", w.n, n);
	const int skip = n - w.n;
	bool same = true, rising = true;
	for (int i = 0; i < w.n && i + skip < n; i++)
		same &= w.kind[i] == kind[i + skip] && w.t_us[i] == t_us[i + skip] && (kind[i + skip] != LANE_EV_TOKEN || w.token[i] == token[i + skip]);
	for (int i = 1; i < n; i++) rising &= t_us[i] >= t_us[i - 1];
	CHECKF(same, "the callback's events are the reader's, kind, token and time");
	CHECKF(rising && t_us[0] >= t0 && t_us[n - 1] <= base_now_us(), "events carry the engine's time, in order");
}

// A reader takes an event while that event's callback still runs (a woken reader never
// waits for the engine to leave the callback): the callback holds on until it is read.
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int phase;     // 0: waiting for an event; 1: the callback holds one; 2: the reader took it; -1: it never did
	uint64_t t_us; // the held event's time
} held = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

static void hold(void *arg, const lane_event *ev) {
	(void)arg;
	pthread_mutex_lock(&held.mu);
	if (held.phase == 0) {
		held.phase = 1, held.t_us = ev->t_us;
		pthread_cond_broadcast(&held.cv);
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 3;
		while (held.phase == 1)
			if (pthread_cond_timedwait(&held.cv, &held.mu, &dl)) held.phase = -1;
	}
	pthread_mutex_unlock(&held.mu);
}

static void test_notify_apart(void) {
	lane_host *h = host(1, 0, false, 2);
	int32_t prompt[3] = {1, 400, 300};
	// long enough that events still come after the callback is set
	lane_request q = {.prompt = prompt, .n_prompt = 3, .max_tokens = 64, .ignore_eos = true};
	q.sampling.top_p = 1;
	q.sampling.repeat_penalty = 1;
	lane_request qb = q;
	qb.max_tokens = 200;
	lane_req *blocker = submit1(h, &qb); // holds the one lane until the callback is set
	lane_req *r = submit1(h, &q);
	if (!r) {
		lane_req_free(blocker);
		lane_host_free(h);
		return;
	}
	lane_req_set_notify(r, hold, NULL);
	lane_req_free(blocker);
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 10;
	pthread_mutex_lock(&held.mu);
	while (held.phase == 0)
		if (pthread_cond_timedwait(&held.cv, &held.mu, &dl)) break;
	const bool called = held.phase == 1;
	const uint64_t want = held.t_us;
	pthread_mutex_unlock(&held.mu);
	CHECKF(called, "the callback ran");
	lane_event ev;
	bool got = false;
	while (called && !got && lane_next(r, &ev, 5 * 1000000) == 1) got = ev.t_us == want;
	pthread_mutex_lock(&held.mu);
	const bool apart = got && held.phase == 1;
	if (held.phase == 1) held.phase = 2;
	pthread_cond_broadcast(&held.cv);
	pthread_mutex_unlock(&held.mu);
	CHECKF(apart, "the reader took the event while its callback ran");
	lane_req_set_notify(r, NULL, NULL);
	while (lane_next(r, &ev, 5 * 1000000) == 1 && ev.kind == LANE_EV_TOKEN) {}
	lane_req_free(r);
	lane_host_free(h);
}

// h's snapshot once finished requests have ended: the last round's counts are published at its end.
static void snapshot_after(lane_host *h, uint64_t finished, lane_snapshot *snap) {
	for (int w = 0; w < 60000; w++) {
		lane_host_snapshot(h, snap);
		if (snap->finished >= finished) break;
		usleep(1000);
	}
}

// Speculative decoding never changes a token: 32 requests (greedy and seeded sampling at
// several temperatures, some on repetitive prompts) give the same tokens, logprobs and
// receipts drafted and undrafted, solo and concurrent; and drafts get accepted.
static void test_draft_equal(const char *what, uint64_t *accepted_out, uint64_t *drafted_out) {
	static req_spec s[NREQ];
	make_specs(s, NREQ, 99, model_hparams_of(M)->n_vocab);
	for (int i = 0; i < NREQ; i++) {
		if (i % 3 == 0) // repetitive prompts: a phrase said over and over
			for (int32_t k = 1; k < s[i].n_prompt; k++) s[i].prompt[k] = s[i].prompt[1 + (k - 1) % 5];
		s[i].q.ignore_eos = true;
		s[i].q.max_tokens = 24 + i % 16;
		if (i % 4) s[i].q.sampling.temperature = 0.2f + 0.4f * (float)(i % 4);
	}
	static result plain[NREQ], drafted[NREQ], drafted_solo[NREQ];
	lane_host *h = host(8, 0, false, 2);
	run_all(h, s, NREQ, plain, true);
	lane_host_free(h);
	for (int i = 0; i < NREQ; i++) s[i].q.draft = true;
	// priced as a model whose rows are nearly free: every round drafts, whatever this machine's speed
	ROW_US = 1, FIXED_US = 1000;
	h = host(8, 0, false, 2);
	run_all(h, s, NREQ, drafted, true);
	lane_snapshot snap;
	snapshot_after(h, NREQ, &snap);
	lane_host_free(h);
	h = host(1, 0, false, 2);
	run_all(h, s, NREQ / 4, drafted_solo, false);
	lane_host_free(h);
	ROW_US = FIXED_US = 0;
	for (int i = 0; i < NREQ; i++) {
		CHECKF(same(&plain[i], &drafted[i]), "%s req %d: drafted = undrafted", what, i);
		if (i < NREQ / 4) CHECKF(same(&plain[i], &drafted_solo[i]), "%s req %d: drafted solo = undrafted", what, i);
	}
	uint64_t acc = 0, prop = 0;
	for (int p = 0; p < LANE_PROP_COUNT; p++) acc += snap.draft_accepted[p], prop += snap.draft_tokens[p];
	fprintf(stderr, "%s: %llu of %llu draft tokens accepted (n-gram %llu/%llu, model %llu/%llu)\n", what,
		(unsigned long long)acc, (unsigned long long)prop, (unsigned long long)snap.draft_accepted[0],
		(unsigned long long)snap.draft_tokens[0], (unsigned long long)snap.draft_accepted[1],
		(unsigned long long)snap.draft_tokens[1]);
	CHECKF(acc > 0 && acc <= prop, "%s: drafts accepted (%llu of %llu)", what, (unsigned long long)acc, (unsigned long long)prop);
	// a recurrent state was rewound past accepted drafts (fed again) as well as at the first
	if (model_state_floats(model_hparams_of(M)))
		CHECKF(snap.draft_replayed > 0 && acc < prop, "%s: %llu drafts fed again after a rewind, %llu of %llu accepted", what,
		       (unsigned long long)snap.draft_replayed, (unsigned long long)acc, (unsigned long long)prop);
	if (accepted_out) *accepted_out = snap.draft_accepted[LANE_PROP_MODEL];
	if (drafted_out) *drafted_out = snap.draft_tokens[LANE_PROP_MODEL];
}

static void test_draft_ngram(void) { test_draft_equal("n-gram", NULL, NULL); }

// A conversation's second turn: its prompt (the first turn's, part of its reply, then more)
// resumes after the last whole page of the reply inside the shared prefix (a recurrent model:
// from the reply's checkpoint there) and computes only the tokens after it (counted); its tokens
// are a fresh host's. A third request that leaves the first prompt inside its last whole page
// resumes from nothing newer than a page (or checkpoint) inside its own prefix.
static void test_next_turn(void) {
	static req_spec s[3];
	make_specs(s, 3, 7, model_hparams_of(M)->n_vocab);
	s[0].n_prompt = s[0].q.n_prompt = 40;
	for (int i = 0; i < 3; i++) s[i].q.max_tokens = 12, s[i].q.ignore_eos = true;
	lane_host *h = host(2, 5, true, 2);
	lane_config dc;
	lane_config_default(&dc);
	const int32_t pt = dc.page_tokens, at = (40 - 1) / pt * pt; // the hosts' pages: the default
	static result r1, r2, r3, f2, f3;
	run_all(h, &s[0], 1, &r1, false);
	CHECK(r1.n >= 8);
	// turn 2: the first prompt, 8 tokens of its reply, 10 more
	memcpy(s[1].prompt, s[0].prompt, 40 * sizeof(int32_t));
	memcpy(s[1].prompt + 40, r1.ids, 8 * sizeof(int32_t));
	for (int k = 0; k < 10; k++) s[1].prompt[48 + k] = 3 + (k * 11) % 50;
	s[1].n_prompt = s[1].q.n_prompt = 58;
	// another request that parts from the first prompt before its checkpoint
	memcpy(s[2].prompt, s[0].prompt, 40 * sizeof(int32_t));
	s[2].prompt[at - 3] = s[0].prompt[at - 3] == 7 ? 8 : 7;
	s[2].n_prompt = s[2].q.n_prompt = 40;
	lane_snapshot a, b, c;
	// a snapshot that has seen each request end (one is published at a round's end)
	snapshot_after(h, 1, &a);
	run_all(h, &s[1], 1, &r2, false);
	snapshot_after(h, 2, &b);
	run_all(h, &s[2], 1, &r3, false);
	snapshot_after(h, 3, &c);
	lane_host_free(h);
	// the reply's pages up to its last token (whose row may be a rejected draft's) are cached
	const int32_t full = (40 + r1.n - 1) / pt, shared = 48 / pt, resume = (full < shared ? full : shared) * pt;
	CHECK(resume > at);
	CHECKF(b.prefix_hit_tokens - a.prefix_hit_tokens == (uint64_t)resume, "turn 2 resumed at %llu, not %d",
	       (unsigned long long)(b.prefix_hit_tokens - a.prefix_hit_tokens), resume);
	CHECKF(b.prompt_tokens - a.prompt_tokens == (uint64_t)(58 - resume), "turn 2 computed %llu prompt tokens, not %d",
	       (unsigned long long)(b.prompt_tokens - a.prompt_tokens), 58 - resume);
	CHECKF(c.prefix_hit_tokens - b.prefix_hit_tokens < (uint64_t)at - 3, "a prompt that parts at %d resumed at %llu", at - 3,
	       (unsigned long long)(c.prefix_hit_tokens - b.prefix_hit_tokens));
	h = host(1, 0, false, 2);
	run_all(h, &s[1], 1, &f2, false);
	run_all(h, &s[2], 1, &f3, false);
	lane_host_free(h);
	CHECKF(same(&r2, &f2), "turn 2 from the checkpoint = fresh");
	CHECKF(same(&r3, &f3), "a prompt that parts before the checkpoint = fresh");
}

// Conversations that share a head (a system prompt) and part after it: on a recurrent model the
// second to part computes from the start (no checkpoint lies inside the head yet) and keeps the
// state where the cached pages end; a third resumes there (counted), with a fresh host's tokens.
static void test_shared_head(void) {
	static req_spec s[3];
	const int32_t nv = model_hparams_of(M)->n_vocab;
	make_specs(s, 3, 9, nv);
	lane_config dc;
	lane_config_default(&dc);
	const int32_t pt = dc.page_tokens, head = 2 * pt + 8;
	for (int i = 0; i < 3; i++) {
		s[i].n_prompt = s[i].q.n_prompt = head + 10 + i;
		for (int32_t k = 1; k < s[i].n_prompt; k++) s[i].prompt[k] = 3 + (k < head ? k * 37 : k * 13 + i * 7) % (nv - 3);
		s[i].q.max_tokens = 4, s[i].q.ignore_eos = true;
	}
	lane_host *h = host(2, 5, true, 2);
	static result r[3], f[3];
	uint64_t hit[3];
	for (int i = 0; i < 3; i++) {
		lane_snapshot a, b;
		lane_host_snapshot(h, &a);
		run_all(h, &s[i], 1, &r[i], false);
		lane_host_snapshot(h, &b);
		hit[i] = b.prefix_hit_tokens - a.prefix_hit_tokens;
	}
	lane_host_free(h);
	const bool rec = model_state_floats(model_hparams_of(M)) > 0;
	const int32_t shared = head / pt * pt;
	CHECKF(hit[0] == 0 && hit[1] == (uint64_t)(rec ? 0 : shared) && hit[2] == (uint64_t)shared,
	       "hits %llu, %llu, %llu (the head's pages: %d)", (unsigned long long)hit[0], (unsigned long long)hit[1],
	       (unsigned long long)hit[2], shared);
	h = host(1, 0, false, 2);
	run_all(h, s, 3, f, false);
	lane_host_free(h);
	for (int i = 0; i < 3; i++) CHECKF(same(&r[i], &f[i]), "req %d: from the shared head = fresh", i);
}

// A proposer that knows each request's undrafted tokens (ORACLE_*): it proposes what follows
// the context with the last draft wrong, so every round accepts all but one and, on a recurrent
// model, feeds them again after the rewind.
#define ORACLE_N 2
static int32_t ORACLE_P[ORACLE_N][64], ORACLE_NP[ORACLE_N], ORACLE_G[ORACLE_N][MAXGEN + 1], ORACLE_NG[ORACLE_N];
static int32_t oracle(void *arg, const int32_t *ctx, int32_t n, int32_t *out, int32_t k) {
	(void)arg;
	for (int i = 0; i < ORACLE_N; i++) {
		if (n < ORACLE_NP[i] || memcmp(ctx, ORACLE_P[i], sizeof(int32_t) * (size_t)ORACLE_NP[i])) continue;
		const int32_t g = n - ORACLE_NP[i];
		if (g + k > ORACLE_NG[i]) k = ORACLE_NG[i] - g;
		if (k < 2) return 0;
		memcpy(out, ORACLE_G[i] + g, (size_t)k * sizeof *out);
		out[k - 1] = (out[k - 1] + 1) % model_hparams_of(M)->n_vocab;
		return k;
	}
	return 0;
}

static int32_t full_budget(void *arg, int32_t n_decode, double row_us, double fixed_us, double round_ms) {
	(void)arg, (void)n_decode, (void)row_us, (void)fixed_us, (void)round_ms;
	return 512; // the most prompt rows a round carries
}

// Drafts fed again after a rewind never take a lane past 1 + draft_max rows (the pass's
// workspace counts that many): two lanes accepting 15 of 16 drafts a round beside a long
// prompt filling at the full budget all finish, with the undrafted tokens.
static void test_replay_rows(void) {
	static req_spec s[ORACLE_N + 1];
	static int32_t longp[2048];
	make_specs(s, ORACLE_N, 7, model_hparams_of(M)->n_vocab);
	for (int i = 0; i < ORACLE_N; i++) {
		s[i].q.sampling.temperature = 0, s[i].q.ignore_eos = true, s[i].q.max_tokens = MAXGEN;
		s[i].prompt[1] = 10 + i;
		if (s[i].n_prompt < 4) s[i].n_prompt = s[i].q.n_prompt = 4;
		memcpy(ORACLE_P[i], s[i].prompt, sizeof ORACLE_P[i]);
		ORACLE_NP[i] = s[i].n_prompt;
	}
	static result plain[ORACLE_N], got[ORACLE_N + 1];
	lane_host *h = host(3, 0, false, 2);
	run_all(h, s, ORACLE_N, plain, true);
	lane_host_free(h);
	for (int i = 0; i < ORACLE_N; i++) ORACLE_NG[i] = plain[i].n, memcpy(ORACLE_G[i], plain[i].ids, sizeof ORACLE_G[i]);
	s[ORACLE_N] = s[0];
	longp[0] = 1;
	for (int k = 1; k < 2030; k++) longp[k] = 3 + (k * 31) % (model_hparams_of(M)->n_vocab - 3);
	s[ORACLE_N].q.prompt = longp, s[ORACLE_N].q.n_prompt = 2030, s[ORACLE_N].q.max_tokens = 8;
	for (int i = 0; i < ORACLE_N; i++) s[i].q.draft = true;
	for (int rep = 0; rep < 3; rep++) {
		lane_config c;
		lane_config_default(&c);
		c.lanes = 3, c.threads = 2, c.ctx = 6144, c.draft_max = 16;
		c.hooks.propose = oracle, c.hooks.budget = full_budget;
		char err[256];
		CHECKF(lane_host_new(&h, M, V, &c, err, sizeof err) == 0, "%s", err);
		if (!h) return;
		run_all(h, s, ORACLE_N + 1, got, true);
		lane_snapshot sn;
		lane_host_snapshot(h, &sn);
		lane_host_free(h);
		CHECKF(sn.draft_replayed > 0 && sn.failed == 0, "rep %d: %llu replayed, %llu failed", rep, (unsigned long long)sn.draft_replayed,
		       (unsigned long long)sn.failed);
		for (int i = 0; i < ORACLE_N; i++) CHECKF(same(&plain[i], &got[i]), "rep %d req %d: drafted = undrafted", rep, i);
		CHECKF(got[ORACLE_N].end == LANE_EV_FINISHED, "rep %d: the long prompt ended %d (%s)", rep, got[ORACLE_N].end, got[ORACLE_N].reason);
	}
}

// A reply's last whole page has its checkpoint however the reply ends — on a stop token at a
// page boundary, inside drafts that crossed the next one — so the next turn (the prompt, the
// reply, more) resumes there, drafted or not.
static void test_reply_checkpoint(void) {
	static req_spec s[2];
	lane_config dc;
	lane_config_default(&dc);
	const int32_t pt = dc.page_tokens;
	for (int32_t np = 8; np <= 20; np += 6)
		for (int32_t stop_at = 12; stop_at < 40; stop_at += 4)
			for (int draft = 0; draft < 2; draft++) {
				make_specs(s, 2, 11, model_hparams_of(M)->n_vocab);
				s[0].n_prompt = s[0].q.n_prompt = np;
				s[0].q.sampling.temperature = 0, s[0].q.ignore_eos = true, s[0].q.max_tokens = 40;
				s[0].q.logprobs = false, s[0].q.top_logprobs = 0, s[0].q.n_stop_strs = 0;
				memcpy(ORACLE_P[0], s[0].prompt, sizeof ORACLE_P[0]);
				ORACLE_NP[0] = np, ORACLE_NP[1] = 1 << 20;
				lane_config c = dc;
				c.lanes = 1, c.threads = 2, c.ctx = 2048, c.draft_max = 16, c.prefix_cache = true, c.hooks.propose = oracle;
				char err[256];
				lane_host *h;
				static result a, b;
				s[0].q.draft = false, s[0].q.n_stop_ids = 0;
				CHECKF(lane_host_new(&h, M, V, &c, err, sizeof err) == 0, "%s", err);
				run_all(h, s, 1, &a, false);
				lane_host_free(h);
				ORACLE_NG[0] = a.n;
				memcpy(ORACLE_G[0], a.ids, sizeof ORACLE_G[0]);
				// the first token at stop_at or later not drawn before it stops the reply there
				int32_t at = stop_at, stop = -1;
				for (; at < a.n && stop < 0; at++) {
					bool seen = tok_is_eog(V, a.ids[at]);
					for (int32_t k = 0; k < at && !seen; k++) seen = a.ids[k] == a.ids[at];
					if (!seen) stop = a.ids[at];
				}
				if (stop < 0) continue;
				s[0].q.draft = draft, s[0].q.stop_ids = &stop, s[0].q.n_stop_ids = 1;
				CHECKF(lane_host_new(&h, M, V, &c, err, sizeof err) == 0, "%s", err);
				run_all(h, s, 1, &a, false);
				static int32_t p2[64];
				memcpy(p2, s[0].prompt, (size_t)np * sizeof(int32_t));
				memcpy(p2 + np, a.ids, (size_t)a.n * sizeof(int32_t));
				for (int32_t k = np + a.n; k < 64; k++) p2[k] = 3 + k;
				s[1] = s[0];
				s[1].q.prompt = p2, s[1].q.n_prompt = 64, s[1].q.max_tokens = 2, s[1].q.draft = false, s[1].q.n_stop_ids = 0;
				lane_snapshot x, y;
				lane_host_snapshot(h, &x);
				run_all(h, &s[1], 1, &b, false);
				lane_host_snapshot(h, &y);
				lane_host_free(h);
				// the reply's pages end before its last token, whose row may be a rejected draft's
				const uint64_t want = (uint64_t)((np + a.n - 1) / pt * pt), got = y.prefix_hit_tokens - x.prefix_hit_tokens;
				CHECKF(got == want, "prompt %d, reply of %d stopped at %d, %s: the next turn resumed at %llu, not %llu", np, a.n,
				       at - 1, draft ? "drafted" : "undrafted", (unsigned long long)got, (unsigned long long)want);
			}
}

// One request on a one-lane host priced as given, drafting: its result and the draft tokens
// proposed and accepted for it.
static void run_priced(double row_us, double fixed_us, const lane_request *q, result *res, uint64_t *proposed, uint64_t *accepted) {
	lane_config c;
	lane_config_default(&c);
	c.lanes = 1;
	c.ctx = 512;
	c.row_us = row_us;
	c.fixed_us = fixed_us;
	char err[256];
	lane_host *h = NULL;
	CHECKF(lane_host_new(&h, M, V, &c, err, sizeof err) == 0, "lane_host_new: %s", err);
	if (!h) return;
	lane_req *r = submit1(h, q);
	collect(r, res);
	lane_req_free(r);
	lane_snapshot sn;
	lane_host_snapshot(h, &sn);
	*proposed = sn.draft_tokens[LANE_PROP_NGRAM];
	*accepted = sn.draft_accepted[LANE_PROP_NGRAM];
	lane_host_free(h);
}

// Drafts are priced: where a row costs much beside a round's fixed cost (a small model),
// text whose drafts fail soon stops getting them, while text that repeats keeps them; where
// rows are nearly free every round drafts. Tokens are the undrafted ones throughout.
static void test_draft_priced(void) {
	int32_t *ids = NULL;
	size_t np = 0;
	char err[256];
	const char *rep = "Lily saw a cat. Lily saw a cat. Lily saw a cat. Lily saw a cat.";
	CHECK(tok_encode(V, rep, strlen(rep), true, false, &ids, &np, err, sizeof err) == 0);
	lane_request q = {.prompt = ids, .n_prompt = (int32_t)np, .max_tokens = 48, .ignore_eos = true, .draft = true};
	q.sampling.top_p = 1;
	q.sampling.repeat_penalty = 1;
	result plain, dear, cheap;
	uint64_t prop[2], acc[2], none;
	lane_request off = q;
	off.draft = false;
	// repeating text, greedy: drafts are accepted, and kept where rows are dear
	run_priced(100, 10, &off, &plain, &none, &none);
	run_priced(100, 10, &q, &dear, &prop[0], &acc[0]);
	CHECKF(same(&plain, &dear) && acc[0] >= 12, "repeating text keeps its drafts (%llu of %llu accepted)",
	       (unsigned long long)acc[0], (unsigned long long)prop[0]);
	// text that does not repeat (sampled hot): drafts where rows are nearly free, hardly any where dear
	int32_t once[3] = {1, 400, 300};
	q.prompt = off.prompt = once;
	q.n_prompt = off.n_prompt = 3;
	q.max_tokens = off.max_tokens = 64;
	q.sampling.temperature = off.sampling.temperature = 1.5f;
	q.sampling.seed = off.sampling.seed = 11;
	q.sampling.has_seed = off.sampling.has_seed = true;
	run_priced(100, 10, &off, &plain, &none, &none);
	run_priced(100, 10, &q, &dear, &prop[0], &acc[0]);
	run_priced(1, 1000, &q, &cheap, &prop[1], &acc[1]);
	CHECK(same(&plain, &dear) && same(&plain, &cheap));
	CHECKF(prop[1] >= 32 && prop[0] * 4 < prop[1], "drafts proposed: %llu where rows are dear, %llu where nearly free",
	       (unsigned long long)prop[0], (unsigned long long)prop[1]);
	free(ids);
}

// The draft model path: stories260K (F32) drafted by its own Q8_0 copy.
static void test_draft_model(void) {
	char src[1024], dst[1024], cmd[4096], err[512];
	snprintf(src, sizeof src, "%s/models/stories260K.gguf", t_shared());
	snprintf(dst, sizeof dst, "%s/lanes-draft-q8_0-%d.gguf", t_tmp(), (int)getpid());
	const char *bin = getenv("LANES_BIN");
	snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s' Q8_0 2>/dev/null", bin ? bin : "build/lanes", src, dst);
	CHECKF(system(cmd) == 0, "lanes quantize makes the draft model");
	model *dm = NULL;
	CHECKF(model_load(&dm, dst, err, sizeof err) == 0, "%s", err);
	unlink(dst);
	if (!dm) return;
	DRAFT = dm;
	uint64_t acc = 0, prop = 0;
	test_draft_equal("draft model", &acc, &prop);
	CHECKF(prop > 0 && acc * 4 > prop, "the draft model's tokens are often accepted (%llu of %llu)",
	       (unsigned long long)acc, (unsigned long long)prop);
	DRAFT = NULL;
	model_free(dm);
	// a draft model with another vocabulary is refused at load
	snprintf(src, sizeof src, "%s/models/ref-spm-Q4_0.gguf", t_shared());
	CHECK(model_load(&dm, src, err, sizeof err) == 0);
	lane_config c;
	lane_config_default(&c);
	c.draft_model = dm;
	lane_host *h = NULL;
	CHECK(lane_host_new(&h, M, V, &c, err, sizeof err) == LANES_EINVAL && h == NULL && strstr(err, "vocabulary"));
	model_free(dm);
}

// The MTP head as the proposer (a generated model with one nextn layer): 16 requests, greedy
// and seeded, give the same tokens, logprobs and receipts undrafted, drafted concurrently in
// prompt pieces, again from the prefix cache (the head's KV then starts with a cached prefix
// it never saw the trunk run), and drafted solo; the head proposed, and its drafts were priced
// and verified like the others.
static void test_draft_mtp(void) {
	enum { N = 16 };
	CHECKF(model_hparams_of(M)->n_nextn == 1, "the model has an MTP layer (%d)", model_hparams_of(M)->n_nextn);
	static req_spec s[NREQ];
	make_specs(s, N, 7, model_hparams_of(M)->n_vocab);
	for (int i = 0; i < N; i++) {
		s[i].q.ignore_eos = true;
		s[i].q.max_tokens = 20 + i % 12;
	}
	static result plain[N], conc[N], cached[N], solo[N];
	lane_host *h = host(8, 0, false, 2);
	run_all(h, s, N, plain, true);
	lane_snapshot snap;
	lane_host_snapshot(h, &snap);
	CHECKF(snap.draft_tokens[LANE_PROP_MTP] == 0, "undrafted requests never run the head (%llu)",
	       (unsigned long long)snap.draft_tokens[LANE_PROP_MTP]);
	lane_host_free(h);
	for (int i = 0; i < N; i++) s[i].q.draft = true;
	ROW_US = 1, FIXED_US = 1000; // every round drafts
	h = host(4, 7, true, 2);
	run_all(h, s, N, conc, true);
	run_all(h, s, N, cached, true);
	snapshot_after(h, 2 * N, &snap);
	lane_host_free(h);
	h = host(1, 5, false, 1);
	run_all(h, s, N / 2, solo, false);
	lane_host_free(h);
	ROW_US = FIXED_US = 0;
	for (int i = 0; i < N; i++) {
		CHECKF(same(&plain[i], &conc[i]), "MTP req %d: drafted in pieces = undrafted", i);
		CHECKF(same(&plain[i], &cached[i]), "MTP req %d: drafted from the prefix cache = undrafted", i);
		if (i < N / 2) CHECKF(same(&plain[i], &solo[i]), "MTP req %d: drafted solo on 1 thread = undrafted", i);
	}
	fprintf(stderr, "MTP head: %llu of %llu drafts accepted (n-gram %llu of %llu)\n",
		(unsigned long long)snap.draft_accepted[LANE_PROP_MTP], (unsigned long long)snap.draft_tokens[LANE_PROP_MTP],
		(unsigned long long)snap.draft_accepted[LANE_PROP_NGRAM], (unsigned long long)snap.draft_tokens[LANE_PROP_NGRAM]);
	// this random head is never right, so the pricing stops asking it once 16 first drafts failed
	CHECKF(snap.draft_tokens[LANE_PROP_MTP] >= 16 && snap.draft_accepted[LANE_PROP_MTP] <= snap.draft_tokens[LANE_PROP_MTP],
	       "the head proposed (%llu)", (unsigned long long)snap.draft_tokens[LANE_PROP_MTP]);
	// asked for the head: refused for a model without one, and with a draft model
	lane_config c;
	lane_config_default(&c);
	c.draft = LANE_DRAFT_MTP;
	char err[256];
	h = NULL;
	c.draft_model = M;
	CHECK(lane_host_new(&h, M, V, &c, err, sizeof err) == LANES_EINVAL && !h && strstr(err, "draft model"));
}

// A sliding-window model's local layers keep only what a reader can reach (pages of 32 here:
// a page's slice of a layer is then a whole system page, which the cache needs to free it): a
// request past its window frees the local rows of the pages before it, but the window before
// its prompt's end, before each stride of its prompt, and before its last whole page; a next
// turn resumes at the reply's last cached page, a prompt that parts inside a stride at the
// stride, the same prompt at its end, and one that parts where the freed pages would be read
// before them; each gives a fresh host's tokens; pages no lane holds give their local rows up
// past the host's cap; and the planner counts the local layers for what a lane keeps.
static void test_window_release(void) {
	const model_hparams *hp = model_hparams_of(M);
	CHECKF(hp->n_swa == 16, "the model has a window of 16 (%d)", hp->n_swa);
	enum { PT = 32, N = 6 };
	PAGE_TOKENS = PT;
	lane_config dc;
	lane_config_default(&dc);
	dc.page_tokens = PT;
	CHECK(lane_window_stride(&dc, hp) == 64);
	static int32_t pr[N][160];
	static req_spec s[N];
	static result r[N], f[N];
	make_specs(s, N, 5, hp->n_vocab);
	int32_t np[N];
	for (int i = 0; i < N; i++) {
		pr[i][0] = 1;
		for (int k = 1; k < 160; k++) pr[i][k] = 3 + (i * 211 + k * 37) % (hp->n_vocab - 3);
		s[i].q.prompt = pr[i], s[i].q.max_tokens = 48, s[i].q.ignore_eos = true, s[i].q.draft = false;
	}
	np[0] = 20;  // A: 20 + 48 tokens: its page 0 falls out of every window it keeps
	np[3] = 100; // D: 100 + 48: pages 1 (the stride's window) and 2 (the prompt end's) kept, page 0 freed
	lane_host *h = host(1, 0, true, 2);
	lane_snapshot a, b[N];
	s[0].q.n_prompt = np[0];
	run_all(h, &s[0], 1, &r[0], false);
	snapshot_after(h, 1, &a);
	CHECK(r[0].n == 48);
	// B, A's next turn: its prompt, its reply and 4 tokens (resumes at 64: the window before it is kept)
	memcpy(pr[1], pr[0], 20 * sizeof(int32_t));
	memcpy(pr[1] + 20, r[0].ids, 48 * sizeof(int32_t));
	np[1] = 72;
	// C: A's prompt and 20 of its reply, then another turn: a resume at 32 reads the freed page 0
	memcpy(pr[2], pr[1], 40 * sizeof(int32_t));
	np[2] = 48;
	// E: parts from D at 70 (resumes at 64, the stride); F: D's prompt again (resumes at 96)
	memcpy(pr[4], pr[3], 70 * sizeof(int32_t));
	np[4] = 80;
	memcpy(pr[5], pr[3], 100 * sizeof(int32_t));
	np[5] = 100;
	const int order[5] = {2, 1, 3, 4, 5};
	for (int k = 0; k < 5; k++) {
		const int i = order[k];
		s[i].q.n_prompt = np[i];
		run_all(h, &s[i], 1, &r[i], false);
		snapshot_after(h, 2 + (uint64_t)k, &b[i]);
	}
	lane_host_free(h);
	CHECKF(a.kv_local_freed == 1 && a.kv_local_page_bytes > 0 && a.kv_local_held + 1 == 3,
	       "A freed page 0's local rows (%llu freed, %d held, %llu bytes a page)", (unsigned long long)a.kv_local_freed,
	       a.kv_local_held, (unsigned long long)a.kv_local_page_bytes);
	static const int32_t want[N] = {0, 64, 0, 0, 64, 96};
	uint64_t before = a.prefix_hit_tokens;
	for (int k = 0; k < 5; k++) {
		const int i = order[k];
		CHECKF(b[i].prefix_hit_tokens - before == (uint64_t)want[i], "request %d resumed at %llu, not %d", i,
		       (unsigned long long)(b[i].prefix_hit_tokens - before), want[i]);
		before = b[i].prefix_hit_tokens;
	}
	h = host(1, 0, false, 2);
	for (int i = 1; i < N; i++) {
		if (i == 3) continue;
		run_all(h, &s[i], 1, &f[i], false);
		CHECKF(same(&r[i], &f[i]), "request %d from the prefix cache = fresh", i);
	}
	lane_host_free(h);
	// pages no lane holds give up their local rows past the host's cap: 48 prompts of 60 tokens
	// each leave their first page cached with its local rows (a resume of the prompt reads them)
	static req_spec many[48];
	static result mr[48];
	make_specs(many, 48, 77, hp->n_vocab);
	for (int i = 0; i < 48; i++) {
		many[i].n_prompt = many[i].q.n_prompt = 60;
		for (int k = 1; k < 60; k++) many[i].prompt[k] = 3 + (i * 131 + k * 17) % (hp->n_vocab - 3);
		many[i].q.max_tokens = 2, many[i].q.draft = false;
	}
	h = host(1, 0, true, 2);
	for (int i = 0; i < 48; i++) run_all(h, &many[i], 1, &mr[i], false); // run_all takes at most NREQ at once
	lane_snapshot d;
	snapshot_after(h, 48, &d);
	lane_host_free(h);
	PAGE_TOKENS = 0;
	lane_config cc = dc;
	cc.lanes = 1, cc.ctx = 2048, cc.threads = 2;
	const int32_t cap = (lane_local_tokens(&cc, hp, lane_config_max_context(&cc, hp)) + PT - 1) / PT;
	CHECKF(cap < 48 && d.kv_local_held <= cap && d.kv_local_freed >= (uint64_t)(48 - cap),
	       "%d pages hold local rows (cap %d), %llu freed", d.kv_local_held, cap, (unsigned long long)d.kv_local_freed);
	// the planner: the local layers cost a lane what it keeps
	plan_model pm;
	plan_model_of(&pm, M);
	plan_result pl;
	char err[256];
	CHECK(plan_at(&pl, &pm, (uint64_t)1 << 40, 4, 4096, &dc, err, sizeof err) == 0);
	int32_t n_local = 0;
	for (int32_t l = 0; l < hp->n_layers; l++) n_local += model_layer_window(hp, l) > 0;
	CHECKF(n_local > 0 && pl.kv_local_bytes_per_token == (uint64_t)n_local * 2 * hp->n_kv_heads * hp->head_dim * 2,
	       "local %llu of %llu bytes a token (%d local layers)", (unsigned long long)pl.kv_local_bytes_per_token,
	       (unsigned long long)pl.kv_bytes_per_token, n_local);
	const uint64_t kv = 4 * ((pl.kv_bytes_per_token - pl.kv_local_bytes_per_token) * 4096 + pl.kv_local_bytes_per_token * (uint64_t)pl.local_tokens);
	CHECKF(pl.local_tokens > 32 && pl.local_tokens < 4096 && pl.kv_bytes == kv, "local tokens %d, kv %llu bytes (want %llu)",
	       pl.local_tokens, (unsigned long long)pl.kv_bytes, (unsigned long long)kv);
	// pages of 16: a page's slice is half a system page here, so nothing is freed, and the planner counts it all
	lane_config d16;
	lane_config_default(&d16);
	CHECK(plan_at(&pl, &pm, (uint64_t)1 << 40, 4, 4096, &d16, err, sizeof err) == 0 && pl.kv_local_bytes_per_token == 0 &&
	      pl.kv_bytes == 4 * pl.kv_bytes_per_token * 4096);
}

// A head trained here for stories260K (the trunk frozen: `lanes learn --mtp`), served with
// --draft-head: its first drafts are accepted above a floor on natural text, drafted =
// undrafted for greedy and seeded requests, and `lanes mtp-merge` writes one file whose head
// gives the same logits; heads that do not fit a model are refused by name.
static void test_trained_head(void) {
	enum { NT = 48, NH = 8, N = 16, STEPS = 200 };
	char err[512], head[1024], merged[1024], cmd[4096], src[1024];
	learn_example *tr[NT] = {0}, *he[NH] = {0};
	learn_mtp_seq **seqs = NULL, **hseqs = NULL;
	int64_t ns = 0, nh = 0;
	learn_mtp *hd = NULL;
	model *mh = NULL, *mm = NULL, *base = M;
	const int nt = t_read_stories(V, "tests/data/learn/stories-train.jsonl", NT, 512, tr);
	const int nhe = t_read_stories(V, "tests/data/learn/stories-held.jsonl", NH, 512, he);
	CHECKF(nt == NT && nhe == NH, "read %d and %d stories", nt, nhe);
	snprintf(head, sizeof head, "%s/lanes-head-%d.gguf", t_tmp(), (int)getpid());
	snprintf(merged, sizeof merged, "%s/lanes-merged-%d.gguf", t_tmp(), (int)getpid());
	snprintf(src, sizeof src, "%s/models/stories260K.gguf", t_shared());
	base_pool *pool = NULL;
	CHECK(base_pool_new(&pool, 2) == 0);
	CHECK(learn_mtp_seqs_of(&seqs, &ns, M, pool, (const learn_example *const *)tr, nt, 64, 512, 1.0f, 1, err, sizeof err) == 0);
	CHECK(learn_mtp_seqs_of(&hseqs, &nh, M, pool, (const learn_example *const *)he, nhe, 64, 512, 1.0f, 2, err, sizeof err) == 0);
	CHECK(learn_mtp_new(&hd, M, err, sizeof err) == 0);
	if (!seqs || !hseqs || !hd || nt != NT || nhe != NH) goto out;
	learn_opts o;
	learn_opts_default(&o);
	o.lr = 0.006f;
	for (int step = 0; step < STEPS; step++) {
		const learn_mtp_seq *batch[8];
		for (int b = 0; b < 8; b++) batch[b] = seqs[splitmix64((uint64_t)(step * 8 + b)) % (uint64_t)ns];
		learn_step_info info;
		CHECKF(learn_mtp_step(hd, pool, batch, 8, &o, &info, err, sizeof err) == 0, "%s", err);
	}
	double acc[2], loss;
	CHECK(learn_mtp_eval(hd, pool, (const learn_mtp_seq *const *)hseqs, (int32_t)nh, acc, &loss, err, sizeof err) == 0);
	fprintf(stderr, "trained MTP head: %d steps; held-out drafts the model's choice %.1f%% first, %.1f%% chained (loss %.3f)\n", STEPS,
		100 * acc[0], 100 * acc[1], loss);
	CHECKF(acc[0] >= 0.40, "the trained head's first draft is the model's choice %.1f%% of the time (floor 40%%)", 100 * acc[0]);
	CHECKF(learn_mtp_save(hd, head, err, sizeof err) == 0, "%s", err);
	CHECKF(model_load_head(&mh, src, head, NULL, NULL, err, sizeof err) == 0, "%s", err);
	if (!mh) goto out;
	CHECK(model_hparams_of(mh)->n_nextn == 1 && model_hparams_of(mh)->n_layers == model_hparams_of(M)->n_layers);
	// natural prompts: the hseqs-out stories' first words; half greedy, half seeded draws
	static req_spec s[N];
	for (int i = 0; i < N; i++) {
		memset(&s[i], 0, sizeof s[i]);
		const learn_example *e = he[i % NH];
		s[i].n_prompt = 4 + i % 9;
		memcpy(s[i].prompt, learn_example_ids_of(e), (size_t)s[i].n_prompt * 4);
		lane_request *q = &s[i].q;
		q->prompt = s[i].prompt, q->n_prompt = s[i].n_prompt, q->max_tokens = MAXGEN, q->ignore_eos = true;
		q->sampling.top_p = 1, q->sampling.repeat_penalty = 1, q->logprobs = true;
		if (i >= N / 2) q->sampling.temperature = 0.8f, q->sampling.seed = 77 + (uint64_t)i, q->sampling.has_seed = true;
	}
	static result plain[N], drafted[N];
	M = mh;
	lane_host *h = host(4, 0, false, 2);
	if (h) run_all(h, s, N, plain, true);
	lane_host_free(h);
	for (int i = 0; i < N; i++) s[i].q.draft = true;
	ROW_US = 1, FIXED_US = 1000; // drafts pay on any machine
	h = host(4, 5, true, 2);
	lane_snapshot snap = {0};
	if (h) {
		run_all(h, s, N / 2, drafted, true); // the greedy ones: what the head is measured on
		lane_host_snapshot(h, &snap);
		run_all(h, s + N / 2, N / 2, drafted + N / 2, true);
	}
	lane_host_free(h);
	ROW_US = FIXED_US = 0;
	M = base;
	for (int i = 0; i < N; i++) CHECKF(same(&plain[i], &drafted[i]), "trained head req %d: drafted = undrafted", i);
	const uint64_t p1 = snap.draft_at[LANE_PROP_MTP][0], a1 = snap.draft_accepted_at[LANE_PROP_MTP][0];
	fprintf(stderr, "trained MTP head served: %llu of %llu first drafts accepted (%.1f%%)\n", (unsigned long long)a1,
		(unsigned long long)p1, p1 ? 100.0 * (double)a1 / (double)p1 : 0.0);
	CHECKF(p1 >= 32 && a1 * 100 >= p1 * 40, "the served head's first drafts: %llu of %llu accepted (floor 40%%)", (unsigned long long)a1,
	       (unsigned long long)p1);
	// one file through mtp-merge: the same head, the same logits
	const char *bin = getenv("LANES_BIN");
	snprintf(cmd, sizeof cmd, "'%s' mtp-merge -m '%s' --draft-head '%s' -o '%s' > /dev/null 2>&1", bin ? bin : "build/lanes", src, head, merged);
	CHECKF(system(cmd) == 0, "lanes mtp-merge writes the merged file");
	CHECKF(model_load(&mm, merged, err, sizeof err) == 0, "%s", err);
	if (mm) {
		CHECK(model_hparams_of(mm)->n_nextn == 1 && model_hparams_of(mm)->n_layers == model_hparams_of(M)->n_layers);
		const int32_t E = model_hparams_of(M)->n_embd, nv = model_hparams_of(M)->n_vocab;
		model *two[2] = {mh, mm};
		float *lg[2], *hin = calloc((size_t)8 * E, sizeof *hin);
		for (int i = 0; i < 8 * E; i++) hin[i] = (float)((i * 37) % 23) / 11.0f - 1.0f;
		model_row rows[8];
		for (int r = 0; r < 8; r++) rows[r] = (model_row){3 + r * 29, r, 0, true, NULL};
		for (int k = 0; k < 2; k++) {
			lg[k] = calloc((size_t)8 * nv, sizeof *lg[k]);
			kv_config c = model_mtp_kv_config(two[k], KV_F16S, 1, 64, 16);
			kv_cache *kv = NULL;
			model_ws *ws = NULL;
			CHECK(kv_new(&kv, &c, err, sizeof err) == 0 && model_ws_new(&ws, two[k], 8, 1, 64, err, sizeof err) == 0);
			CHECKF(kv && ws && model_mtp_forward(two[k], kv, NULL, ws, rows, 8, hin, lg[k], NULL, err, sizeof err) == 0, "%s", err);
			model_ws_free(ws);
			kv_free(kv);
		}
		CHECKF(!memcmp(lg[0], lg[1], (size_t)8 * nv * sizeof(float)), "the merged file's head gives the logits of --draft-head's");
		free(lg[0]), free(lg[1]), free(hin);
	}
	// heads that do not fit are refused, naming why
	snprintf(cmd, sizeof cmd, "%s/models/ref-llama-F32.gguf", t_shared());
	model *bad = NULL;
	CHECKF(model_load_head(&bad, cmd, head, NULL, NULL, err, sizeof err) == LANES_EFORMAT && !bad && strstr(err, "draft head"),
	       "a head for another model: %s", err);
	CHECKF(model_load_head(&bad, src, src, NULL, NULL, err, sizeof err) == LANES_EFORMAT && !bad && strstr(err, "not an MTP head"),
	       "a model as the head: %s", err);
out:
	unlink(head);
	unlink(merged);
	model_free(mh);
	model_free(mm);
	learn_mtp_free(hd);
	for (int64_t i = 0; i < ns; i++) learn_mtp_seq_free(seqs[i]);
	for (int64_t i = 0; i < nh; i++) learn_mtp_seq_free(hseqs[i]);
	free(seqs), free(hseqs);
	for (int i = 0; i < NT; i++) learn_example_free(tr[i]);
	for (int i = 0; i < NH; i++) learn_example_free(he[i]);
	base_pool_free(pool);
}

// Hooks change when rows run, never what a request gets: a stingy planner, a newest-first
// row policy and a proposer of wrong guesses leave every token as it was.
static int32_t budget_small(void *arg, int32_t n_decode, double row_us, double fixed_us, double round_ms) { return 5; }
static int32_t newest_first(void *arg, const lane_fill *f, int32_t n) {
	int32_t best = 0;
	for (int32_t i = 1; i < n; i++)
		if (f[i].serial > f[best].serial) best = i;
	(*(int *)arg)++;
	return best;
}
static int32_t wrong_guesses(void *arg, const int32_t *ctx, int32_t n, int32_t *out, int32_t k) {
	for (int32_t i = 0; i < k; i++) out[i] = (ctx[n - 1] + 7 * i + 3) % 500;
	return k;
}

static void test_hooks(void) {
	static req_spec s[12];
	make_specs(s, 12, 5, model_hparams_of(M)->n_vocab);
	static result plain[12], hooked[12];
	lane_host *h = host(1, 0, false, 2);
	run_all(h, s, 12, plain, false);
	lane_host_free(h);
	for (int i = 0; i < 12; i++) s[i].q.draft = true;
	int calls = 0;
	lane_config c;
	lane_config_default(&c);
	c.lanes = 6;
	c.ctx = 2048;
	c.hooks = (lane_hooks){.arg = &calls, .budget = budget_small, .next_piece = newest_first, .propose = wrong_guesses};
	char err[256];
	CHECK(lane_host_new(&h, M, V, &c, err, sizeof err) == 0);
	run_all(h, s, 12, hooked, true);
	lane_snapshot snap;
	lane_host_snapshot(h, &snap);
	lane_host_free(h);
	CHECKF(calls > 12, "the row policy was asked (%d times)", calls);
	CHECKF(snap.draft_tokens[LANE_PROP_NGRAM] > 0, "the proposer hook proposed");
	for (int i = 0; i < 12; i++) CHECKF(same(&plain[i], &hooked[i]), "req %d: hooks leave the tokens alone", i);
}

// An embedding request's vector, collected; its terminal event and counts checked (only a
// last-token vector may take its prompt from the prefix cache).
static void collect_vec(lane_req *r, float *out, int32_t E, enum lane_embed pool) {
	lane_event ev;
	int got = 0, tokens = 0;
	while (lane_next(r, &ev, 30 * 1000000) == 1) {
		if (ev.kind == LANE_EV_TOKEN) {
			tokens++;
			continue;
		}
		CHECKF(ev.kind == LANE_EV_FINISHED && ev.embedding && ev.n_embd == E, "an embedding ends finished with %d values", E);
		if (ev.embedding && ev.n_embd == E) memcpy(out, ev.embedding, (size_t)E * sizeof *out), got = 1;
		CHECK(ev.n_generated == 0 && (ev.n_cached == 0 || pool == LANE_EMBED_LAST));
		break;
	}
	CHECK(got && tokens == 0);
}

// A one-sequence KV cache and a workspace for n rows, for passes straight through the model.
static void direct_new(int32_t n, kv_cache **kv, model_ws **w) {
	char err[256];
	kv_config c = model_kv_config(M, KV_F16S, 1, 128, 16);
	*kv = NULL, *w = NULL;
	CHECKF(kv_new(kv, &c, err, sizeof err) == 0, "%s", err);
	CHECKF(model_ws_new(w, M, n, 1, 0, err, sizeof err) == 0, "%s", err);
}

// The pooled, normalized vector straight from the forward pass: every row's hidden state.
static void embed_direct(const int32_t *ids, int32_t n, enum lane_embed mode, float *out) {
	const model_hparams *hp = model_hparams_of(M);
	const int32_t E = hp->n_embd;
	char err[256];
	kv_cache *kv;
	model_ws *w;
	direct_new(n, &kv, &w);
	model_row rows[64];
	bool want[64];
	float *hid = malloc((size_t)n * E * sizeof *hid);
	for (int32_t i = 0; i < n; i++) rows[i] = (model_row){ids[i], i, 0, false, NULL}, want[i] = true;
	CHECKF(kv && w && model_forward_hidden(M, kv, NULL, w, rows, n, NULL, want, hid, err, sizeof err) == 0, "%s", err);
	double *sum = calloc((size_t)E, sizeof *sum), ss = 0;
	for (int32_t i = 0; i < n; i++) {
		if ((mode == LANE_EMBED_LAST && i != n - 1) || (mode == LANE_EMBED_CLS && i != 0)) continue;
		for (int32_t e = 0; e < E; e++) sum[e] = mode == LANE_EMBED_MEAN ? sum[e] + hid[(size_t)i * E + e] : hid[(size_t)i * E + e];
	}
	const double div = mode == LANE_EMBED_MEAN ? n : 1;
	for (int32_t e = 0; e < E; e++) ss += (sum[e] / div) * (sum[e] / div);
	for (int32_t e = 0; e < E; e++) out[e] = (float)(sum[e] / div * (1.0 / sqrt(ss)));
	free(sum);
	free(hid);
	model_ws_free(w);
	kv_free(kv);
}

// Each prompt token's log-probability straight from the forward pass (every row's logits),
// taken as emit.c takes a token's: the float log-sum-exp over a double sum, and the rank.
static void prompt_lp_direct(const int32_t *ids, int32_t n, lane_prompt_lp *out) {
	const int32_t nv = model_hparams_of(M)->n_vocab;
	char err[256];
	kv_cache *kv;
	model_ws *w;
	direct_new(n, &kv, &w);
	model_row rows[64];
	float *lg = malloc((size_t)n * nv * sizeof *lg);
	for (int32_t i = 0; i < n; i++) rows[i] = (model_row){ids[i], i, 0, true, NULL};
	CHECKF(kv && w && lg && model_forward_ws(M, kv, NULL, w, rows, n, lg, err, sizeof err) == 0, "%s", err);
	for (int32_t p = 0; lg && p + 1 < n; p++) {
		const float *l = lg + (size_t)p * nv;
		float mx = -INFINITY;
		for (int32_t i = 0; i < nv; i++) mx = l[i] > mx ? l[i] : mx;
		double sum = 0;
		for (int32_t i = 0; i < nv; i++) sum += exp((double)l[i] - mx);
		const float lse = mx + (float)log(sum), lp = l[ids[p + 1]] - lse;
		int32_t above = 0;
		for (int32_t i = 0; i < nv; i++) above += l[i] - lse > lp;
		out[p + 1] = (lane_prompt_lp){lp, 1 + above};
	}
	free(lg);
	model_ws_free(w);
	kv_free(kv);
}

// Prompt log-probabilities come from the prompt pass itself, bit for bit the forward pass's:
// concurrent with every prompt in the prefix cache (which such a request does not read), solo,
// and in pieces of 3; the generated tokens are those of the same requests without them.
static void test_prompt_lp(void) {
	static req_spec s[NREQ];
	static result plain[NREQ], res[NREQ];
	const int n = 8;
	make_specs(s, n, 11, model_hparams_of(M)->n_vocab);
	lane_host *hs[3] = {host(4, 7, true, 2), host(1, 0, false, 2), host(5, 3, false, 2)};
	if (hs[0]) run_all(hs[0], s, n, plain, true); // every prompt into the prefix cache
	for (int i = 0; i < n; i++) s[i].q.prompt_logprobs = true, s[i].q.prompt_top_logprobs = i % 4;
	char err[256];
	for (int w = 0; w < 3; w++) {
		lane_req *r[NREQ] = {0};
		for (int i = 0; hs[w] && i < n; i++) CHECKF(lane_submit(hs[w], &s[i].q, &r[i], err, sizeof err) == 0, "submit: %s", err);
		for (int i = 0; i < n; i++) {
			if (!r[i]) continue;
			collect(r[i], &res[i]);
			CHECKF(same(&plain[i], &res[i]), "way %d req %d: the same tokens as without prompt log-probabilities", w, i);
			const lane_top *top;
			int32_t k;
			const lane_prompt_lp *lp = lane_req_prompt_logprobs(r[i], &top, &k);
			lane_prompt_lp want[64];
			prompt_lp_direct(s[i].prompt, s[i].n_prompt, want);
			CHECKF(lp && k == i % 4, "way %d req %d: %d alternatives", w, i, k);
			for (int32_t p = 1; lp && p < s[i].n_prompt; p++) {
				CHECKF(!memcmp(&lp[p], &want[p], sizeof want[p]), "way %d req %d token %d: %g (rank %d), the forward pass's %g (rank %d)",
				       w, i, p, lp[p].logprob, lp[p].rank, want[p].logprob, want[p].rank);
				CHECK(!k || (top[(size_t)p * k].logprob >= lp[p].logprob && (want[p].rank > 1 || top[(size_t)p * k].token == s[i].prompt[p])));
			}
			lane_req_free(r[i]);
		}
	}
	for (int w = 0; w < 3; w++) lane_host_free(hs[w]);
}

// Embeddings through the rounds: each pooling's vector is what the forward pass's hidden
// states give, bit for bit, alone or among 24 requests (generations and embeddings) in
// prompt pieces of 5 on 2 threads with the prefix cache on; and a generation beside them
// keeps its tokens.
static void test_embed(void) {
	const int32_t E = model_hparams_of(M)->n_embd, NV = model_hparams_of(M)->n_vocab;
	t_case("%s", model_hparams_of(M)->arch);
	enum { N = 24 };
	req_spec s[N];
	make_specs(s, N, 77, NV);
	float *solo = malloc((size_t)N * E * sizeof *solo), *conc = malloc((size_t)N * E * sizeof *conc);
	float *direct = malloc((size_t)E * sizeof *direct);
	result gen_solo[N], gen_conc[N];
	for (int i = 0; i < N; i++) {
		if (i % 3 == 2) continue; // every third stays a generation
		s[i].q.embed = i % 3 == 0 ? LANE_EMBED_MEAN : (i / 3) % 2 ? LANE_EMBED_LAST : LANE_EMBED_CLS;
		s[i].q.normalize = true;
	}
	char err[256];
	lane_host *h = host(1, 0, false, 1);
	for (int i = 0; h && i < N; i++) {
		lane_req *r = NULL;
		CHECKF(lane_submit(h, &s[i].q, &r, err, sizeof err) == 0, "submit: %s", err);
		if (!r) continue;
		if (s[i].q.embed) collect_vec(r, solo + (size_t)i * E, E, s[i].q.embed);
		else collect(r, &gen_solo[i]);
		lane_req_free(r);
		if (!s[i].q.embed) continue;
		embed_direct(s[i].prompt, s[i].n_prompt, s[i].q.embed, direct);
		CHECKF(!memcmp(direct, solo + (size_t)i * E, (size_t)E * sizeof *direct), "request %d: the pooled hidden states", i);
		double n2 = 0;
		for (int32_t e = 0; e < E; e++) n2 += (double)solo[(size_t)i * E + e] * solo[(size_t)i * E + e];
		CHECKF(fabs(n2 - 1) < 1e-5, "request %d: unit length (%g)", i, n2);
	}
	lane_host_free(h);
	h = host(4, 5, true, 2);
	lane_req *r[N];
	for (int i = 0; h && i < N; i++) CHECKF(lane_submit(h, &s[i].q, &r[i], err, sizeof err) == 0, "submit: %s", err);
	for (int i = 0; h && i < N; i++) {
		if (!r[i]) continue;
		if (s[i].q.embed) collect_vec(r[i], conc + (size_t)i * E, E, s[i].q.embed);
		else collect(r[i], &gen_conc[i]);
		lane_req_free(r[i]);
		if (s[i].q.embed)
			CHECKF(!memcmp(solo + (size_t)i * E, conc + (size_t)i * E, (size_t)E * sizeof *solo), "request %d: concurrent = solo", i);
		else
			CHECKF(same(&gen_solo[i], &gen_conc[i]), "generation %d beside embeddings = solo", i);
	}
	// last-token vectors read the prefix cache (and feed it): again from it, the same bits
	lane_snapshot before;
	if (h) lane_host_snapshot(h, &before);
	for (int i = 0; h && i < N; i++) {
		if (s[i].q.embed != LANE_EMBED_LAST) continue;
		lane_req *a = NULL;
		CHECK(lane_submit(h, &s[i].q, &a, err, sizeof err) == 0);
		if (!a) continue;
		collect_vec(a, direct, E, LANE_EMBED_LAST);
		lane_req_free(a);
		CHECKF(!memcmp(direct, solo + (size_t)i * E, (size_t)E * sizeof *direct), "request %d: from the prefix cache = solo", i);
	}
	lane_snapshot after;
	if (h) lane_host_snapshot(h, &after);
	CHECKF(h && after.prefix_hit_tokens > before.prefix_hit_tokens, "last-token embeddings hit the prefix cache (%llu)",
	       (unsigned long long)(after.prefix_hit_tokens - before.prefix_hit_tokens));
	// a different text is a different vector; without normalization the direction stays
	CHECK(memcmp(solo, solo + 3 * (size_t)E, (size_t)E * sizeof *solo) != 0);
	s[0].q.normalize = false;
	lane_req *u = NULL;
	CHECK(h && lane_submit(h, &s[0].q, &u, err, sizeof err) == 0);
	if (u) {
		collect_vec(u, direct, E, s[0].q.embed);
		double n2 = 0, dot = 0;
		for (int32_t e = 0; e < E; e++) n2 += (double)direct[e] * direct[e], dot += (double)direct[e] * solo[e];
		CHECKF(fabs(n2 - 1) > 1e-3 && fabs(dot / sqrt(n2) - 1) < 1e-5, "unnormalized: length %g, cosine %g", sqrt(n2), dot / sqrt(n2));
		lane_req_free(u);
	}
	// a prompt over the context is refused, naming the prompt, whatever max_tokens says
	int32_t *big = calloc(4096, sizeof *big);
	lane_request q;
	lane_request_init(&q);
	q.embed = LANE_EMBED_LAST;
	q.prompt = big;
	q.n_prompt = 4096;
	q.max_tokens = 1;
	enum lane_field bad = LANE_F_COUNT;
	CHECK(h && lane_check_prompt(h, &q, NULL, err, sizeof err, &bad) == LANES_ELIMIT && bad == LANE_F_PROMPT);
	q.n_prompt = 2040;
	q.max_tokens = 100;
	CHECKF(h && lane_check_prompt(h, &q, NULL, err, sizeof err, &bad) == 0, "an embedding reserves no generation: %s", err);
	free(big);
	lane_host_free(h);
	free(solo), free(conc), free(direct);
}

// The ways a request runs that must not change its tokens.
enum { WAY_SOLO, WAY_CONCURRENT, WAY_PIECES, WAY_THREADS1, WAY_CACHED, WAY_DRAFTED, WAYS };
static const char *const WAY_NAME[WAYS] = {"solo", "concurrent", "in pieces", "on 1 thread", "from the prefix cache", "drafted"};

// s's first n requests run every way: solo, 8 at once, in pieces of 3 beside each other, on 1
// thread (warming the prefix cache), from the cache, and drafted in every round (s's draft set).
static void run_every_way(req_spec *s, int n, result ways[WAYS][NREQ]) {
	lane_host *h = host(1, 0, false, 2);
	run_all(h, s, n, ways[WAY_SOLO], false);
	lane_host_free(h);
	h = host(8, 0, false, 2);
	run_all(h, s, n, ways[WAY_CONCURRENT], true);
	lane_host_free(h);
	h = host(5, 3, false, 2);
	run_all(h, s, n, ways[WAY_PIECES], true);
	lane_host_free(h);
	h = host(4, 7, true, 1);
	run_all(h, s, n, ways[WAY_THREADS1], true);
	run_all(h, s, n, ways[WAY_CACHED], true);
	lane_host_free(h);
	for (int i = 0; i < n; i++) s[i].q.draft = true;
	ROW_US = 1, FIXED_US = 1000; // every round drafts
	h = host(8, 0, false, 2);
	run_all(h, s, n, ways[WAY_DRAFTED], true);
	lane_host_free(h);
	ROW_US = FIXED_US = 0;
}

// Request i gave every way what it gave solo.
static void check_every_way(const char *what, result ways[WAYS][NREQ], int i) {
	for (int w = 1; w < WAYS; w++) CHECKF(same(&ways[WAY_SOLO][i], &ways[w][i]), "%s req %d: solo = %s", what, i, WAY_NAME[w]);
}

// Constrained decoding keeps every promise: requests under a grammar (from the first token,
// or lazily from a trigger) beside free ones give the same tokens solo, concurrent, in
// pieces, from the prefix cache, on 1 thread and drafted; and every text follows its grammar.
static const char *const G_TRIGGERS[] = {"e"};
static void test_grammar_exact(void) {
	static const char json[] = "root ::= \"{\\\"name\\\": \\\"\" [a-z ]{1,12} \"\\\", \\\"age\\\": \" [1-9] [0-9]? \"}\"\n";
	static const char lazy[] = "root ::= \"e\" [ a-z]{0,6} \".\"\n";
	char err[256];
	grammar *g[2] = {NULL, NULL};
	CHECKF(grammar_compile(&g[0], json, strlen(json), NULL, err, sizeof err) == 0, "json grammar: %s", err);
	CHECKF(grammar_compile(&g[1], lazy, strlen(lazy), NULL, err, sizeof err) == 0, "lazy grammar: %s", err);
	if (!g[0] || !g[1]) { grammar_unref(g[0]); grammar_unref(g[1]); return; }
	static req_spec s[NREQ];
	const int n = NREQ / 2;
	make_specs(s, n, 7, model_hparams_of(M)->n_vocab);
	for (int i = 0; i < n; i++) {
		lane_request *q = &s[i].q;
		q->max_tokens = MAXGEN;
		if (i % 3 == 2) continue; // free requests run beside the constrained ones
		q->grammar = g[i % 3];
		if (i % 3 == 1) q->grammar_triggers = G_TRIGGERS, q->n_grammar_triggers = 1;
	}
	static result ways[WAYS][NREQ];
	run_every_way(s, n, ways);
	const result *solo = ways[WAY_SOLO];
	int whole = 0, triggered = 0;
	// a vocabulary of one unusable token: the texts are checked byte by byte
	grammar_vocab *bytes_only = NULL;
	const char *none[] = {""};
	const uint32_t zero[] = {0};
	const bool unusable[] = {false};
	CHECK(grammar_vocab_new(&bytes_only, 1, none, zero, unusable, NULL, 0) == 0);
	for (int i = 0; i < n && bytes_only; i++) {
		CHECKF(solo[i].terminals == 1 && solo[i].end == LANE_EV_FINISHED, "grammar req %d: finished once (%s)", i, solo[i].reason);
		check_every_way("grammar", ways, i);
		if (!s[i].q.grammar) continue;
		// the text follows the grammar: whole when it stopped, a prefix when cut by length
		grammar_matcher *m = NULL;
		const bool is_lazy = s[i].q.n_grammar_triggers > 0;
		const char *text = solo[i].text;
		size_t len = solo[i].text_len;
		if (is_lazy) {
			const char *at = memmem(text, len, "e", 1);
			if (!at) continue;
			triggered++;
			len -= (size_t)(at - text);
			text = at;
		}
		CHECKF(grammar_matcher_new(&m, s[i].q.grammar, bytes_only, NULL, 0, err, sizeof err) == 0, "matcher: %s", err);
		if (!m) continue;
		CHECKF(grammar_matcher_accept_bytes(m, text, len) == 0, "grammar req %d: its text follows the grammar: %.*s", i,
		       (int)solo[i].text_len, solo[i].text);
		if (solo[i].finish == LANE_FINISH_STOP) {
			CHECKF(grammar_matcher_accepting(m), "grammar req %d: a stopped text is whole: %.*s", i, (int)len, text);
			whole += !is_lazy;
		}
		grammar_matcher_free(m);
	}
	grammar_vocab_free(bytes_only);
	CHECKF(whole > 0, "constrained requests finished whole documents (%d)", whole);
	fprintf(stderr, "grammar: %d whole documents, %d lazy requests triggered\n", whole, triggered);
	grammar_unref(g[0]);
	grammar_unref(g[1]);
}

// The samplers people tune keep every promise: DRY (its breakers the lane's map of the
// vocabulary), XTC (its own coin), top-nσ, mirostat 1 and 2 (mu the request's own), dynamic
// temperature and an order of the caller's give the same tokens solo, concurrent, in pieces, on
// 1 thread, cached and drafted; and each changes what the request gives without it.
static const char *const SMP_BREAKERS[] = {"\n", "."};
enum { SMP_KINDS = 7 };
static const char *const SMP_NAME[SMP_KINDS] = {"dry", "xtc", "top_n_sigma", "mirostat 2", "mirostat 1", "dynatemp", "samplers"};

static void smp_on(lane_sampling *sp, int kind) {
	switch (kind) {
	case 0:
		sp->dry_multiplier = 2.0f, sp->dry_base = 1.75f, sp->dry_allowed_length = 1, sp->dry_penalty_last_n = -1;
		sp->dry_breakers = SMP_BREAKERS, sp->n_dry_breakers = 2;
		break;
	case 1: sp->xtc_probability = 0.7f, sp->xtc_threshold = 0.05f; break;
	case 2: sp->top_n_sigma = 0.7f; break;
	case 3: sp->mirostat = 2, sp->mirostat_tau = 2.0f, sp->mirostat_eta = 0.3f; break;
	case 4: sp->mirostat = 1, sp->mirostat_tau = 2.0f, sp->mirostat_eta = 0.3f; break;
	case 5: sp->dynatemp_range = 1.0f, sp->dynatemp_exponent = 0.5f; break;
	default:
		sp->samplers[0] = SAMPLE_MIN_P, sp->samplers[1] = SAMPLE_TOP_K, sp->samplers[2] = SAMPLE_TEMPERATURE;
		sp->n_samplers = 3, sp->min_p = 0.2f, sp->top_k = 5;
		break;
	}
}

static void test_samplers_exact(void) {
	static req_spec s[NREQ], off[NREQ];
	const int n = NREQ / 2;
	make_specs(s, n, 53, model_hparams_of(M)->n_vocab);
	for (int i = 0; i < n; i++) {
		lane_sampling *sp = &s[i].q.sampling;
		sp->temperature = 1.5f, sp->seed = 70 + (uint64_t)i, sp->has_seed = true;
		sp->top_k = 0, sp->top_p = 1, sp->min_p = 0;
		s[i].q.max_tokens = MAXGEN, s[i].q.ignore_eos = true;
		off[i] = s[i];
		off[i].q.prompt = off[i].prompt;
		smp_on(sp, i % SMP_KINDS);
	}
	static result ways[WAYS][NREQ], plain[NREQ];
	lane_host *h = host(1, 0, false, 2);
	run_all(h, off, n, plain, false);
	lane_host_free(h);
	run_every_way(s, n, ways);
	int changed[SMP_KINDS] = {0};
	for (int i = 0; i < n; i++) {
		CHECKF(ways[WAY_SOLO][i].terminals == 1 && ways[WAY_SOLO][i].n == MAXGEN, "%s req %d: finished once (%s)",
		       SMP_NAME[i % SMP_KINDS], i, ways[WAY_SOLO][i].reason);
		check_every_way(SMP_NAME[i % SMP_KINDS], ways, i);
		changed[i % SMP_KINDS] += memcmp(ways[WAY_SOLO][i].ids, plain[i].ids, sizeof plain[i].ids) != 0;
	}
	for (int k = 0; k < SMP_KINDS; k++) CHECKF(changed[k] > 0, "%s changes the tokens", SMP_NAME[k]);
	// a bad value is refused at submit, naming the field
	char err[256];
	lane_request q = s[0].q;
	q.sampling.xtc_probability = 2;
	lane_req *bad = NULL;
	h = host(1, 0, false, 2);
	CHECKF(h && lane_submit(h, &q, &bad, err, sizeof err) != 0 && strstr(err, "xtc_probability"), "refused: %s", err);
	q = s[0].q;
	q.sampling.dry_base = 0.5f;
	CHECKF(h && lane_submit(h, &q, &bad, err, sizeof err) != 0 && strstr(err, "dry_base"), "refused: %s", err);
	lane_host_free(h);
}

// Reasoning budgets (lanes/think.c): the lane takes the end tokens in place of draws exactly at
// the budget — at once for a budget of 0, counted after the reply's own open marker when the
// prompt opened none — a close marker the reply writes ends the section unforced, a bad think is
// refused at submit, and the forced tokens are the request's own: the same solo, beside other
// lanes, in pieces, cached, on 1 thread and drafted.
static const int32_t TH_END[] = {300, 301, 302}; // the end marker, as token ids
#define TH_NEND 3

static lane_think th_spec(bool inside, int32_t budget, const char *open, const char *close) {
	return (lane_think){.open = open, .close = close, .inside = inside, .budget = budget, .end_ids = TH_END, .n_end_ids = TH_NEND};
}

// One request's result on h.
static void think_run(lane_host *h, const lane_request *q, result *res) {
	lane_req *r = submit1(h, q);
	if (r) collect(r, res);
	lane_req_free(r);
}

// The text of token k of a free reply (its first k + 1 tokens' text less its first k's).
static void token_text(lane_host *h, lane_request q, int32_t k, char *out, size_t n) {
	static result a, b;
	q.max_tokens = k, q.think = NULL;
	if (k) think_run(h, &q, &a);
	else memset(&a, 0, sizeof a);
	q.max_tokens = k + 1;
	think_run(h, &q, &b);
	const size_t len = b.text_len > a.text_len ? b.text_len - a.text_len : 0;
	snprintf(out, n, "%.*s", (int)len, b.text + a.text_len);
}

static bool ends_at(const result *r, int32_t at) {
	if (r->n < at + TH_NEND) return false;
	return !memcmp(r->ids + at, TH_END, sizeof TH_END);
}

static void test_think(void) {
	static req_spec s[NREQ];
	const int n = NREQ / 2;
	make_specs(s, n, 35, model_hparams_of(M)->n_vocab);
	for (int i = 0; i < n; i++) s[i].q.ignore_eos = true, s[i].q.max_tokens = 20;
	lane_host *h = host(1, 0, false, 2);
	if (!h) return;
	// one sampled request, free and under budgets
	lane_request q = s[1].q;
	static result free_r, r;
	think_run(h, &q, &free_r);
	CHECKF(free_r.n == 20 && !memmem(free_r.text, free_r.text_len, "</think>", 8), "the free reply: %d tokens, no close marker", free_r.n);
	for (int32_t b = 0; b <= 6; b += 3) {
		lane_think t = th_spec(true, b, "<think>", "</think>");
		q.think = &t;
		think_run(h, &q, &r);
		CHECKF(!memcmp(r.ids, free_r.ids, (size_t)b * sizeof *r.ids), "budget %d: the thinking is the free reply's", b);
		CHECKF(ends_at(&r, b), "budget %d: the end tokens come at token %d (%d %d %d)", b, b, r.ids[b], r.ids[b + 1], r.ids[b + 2]);
		CHECKF(r.n == 20 && r.terminals == 1 && r.finish == LANE_FINISH_LENGTH, "budget %d: the forced tokens count to max_tokens", b);
	}
	// unbounded, the section runs on: no forced tokens
	lane_think t = th_spec(true, -1, "<think>", "</think>");
	q.think = &t;
	think_run(h, &q, &r);
	CHECK(same(&r, &free_r));
	// no section in the prompt: the count starts after the reply's own open marker (its first token)
	char open[64], close[64];
	token_text(h, q, 0, open, sizeof open);
	const char *o = open + strspn(open, " \n\t\r");
	CHECKF(*o, "the first token '%s' is more than whitespace", open);
	t = th_spec(false, 4, o, "</think>");
	think_run(h, &q, &r);
	CHECKF(!memcmp(r.ids, free_r.ids, 5 * sizeof *r.ids) && ends_at(&r, 5), "opened by the reply ('%s'): the end tokens come after 1 + 4 tokens", o);
	// a reply that opens no section is never forced
	t = th_spec(false, 0, "<think>", "</think>");
	think_run(h, &q, &r);
	CHECK(same(&r, &free_r));
	// the close marker the reply writes itself (its third token's text) ends the section before the budget
	token_text(h, q, 2, close, sizeof close);
	CHECKF(*close, "the third token has text");
	t = th_spec(true, 5, "<think>", close);
	think_run(h, &q, &r);
	CHECKF(same(&r, &free_r), "closed by the reply ('%s'): nothing forced", close);
	// refused at submit, naming the fault
	char err[256];
	lane_req *bad = NULL;
	const struct { lane_think t; const char *says; } refused[] = {
		{th_spec(true, -2, "<think>", "</think>"), "budget"}, {th_spec(true, 3, "", "</think>"), "markers"},
		{{.open = "<think>", .close = "</think>", .budget = 3, .end_ids = TH_END, .n_end_ids = 0}, "end tokens"},
		{{.open = "<think>", .close = "</think>", .budget = 3, .end_ids = (const int32_t[]){1 << 30}, .n_end_ids = 1}, "vocabulary"}};
	for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
		q.think = &refused[k].t;
		err[0] = 0;
		CHECKF(lane_submit(h, &q, &bad, err, sizeof err) != 0 && strstr(err, refused[k].says), "bad think %zu refused: %s", k, err);
		lane_req_free(bad);
		bad = NULL;
	}
	lane_host_free(h);
	// the same tokens however the requests run: budgets from 0, inside or not, one without think
	static lane_think th[NREQ];
	for (int i = 0; i < n; i++) {
		th[i] = th_spec(i % 4 != 3, i % 7, i % 4 == 3 ? o : "<think>", "</think>");
		s[i].q.think = i == 5 ? NULL : &th[i];
	}
	static result ways[WAYS][NREQ];
	run_every_way(s, n, ways);
	const result *solo = ways[WAY_SOLO];
	int forced = 0;
	for (int i = 0; i < n; i++) {
		CHECKF(solo[i].terminals == 1 && solo[i].n == 20, "think req %d: finished once with its 20 tokens (%s)", i, solo[i].reason);
		check_every_way("think", ways, i);
		if (s[i].q.think && th[i].inside) {
			CHECKF(ends_at(&solo[i], th[i].budget), "think req %d: the end tokens at its budget %d", i, th[i].budget);
			forced++;
		}
	}
	CHECKF(forced >= n / 2, "requests were forced (%d)", forced);
}

static void with_model(const char *name, void (*fn)(void)) {
	char path[1024], err[512];
	model_path(path, sizeof path, name);
	CHECKF(model_load(&M, path, err, sizeof err) == 0, "%s", err);
	if (M) CHECKF(tok_vocab_load(&V, model_gguf(M), err, sizeof err) == 0, "%s", err);
	if (M && V) fn();
	tok_vocab_free(V);
	model_free(M);
	V = NULL;
	M = NULL;
}

static void chaos_all(void) {
	for (uint64_t seed = 1; seed <= 12; seed++) test_chaos(seed);
}

// The request contract: one validator, the host's bounds narrowed by an API's table, the
// API's field names in the messages, and the bad field reported.
static void test_contract(void) {
	static const lane_api api = {
		.name = {[LANE_F_MAX_TOKENS] = "max_output_tokens", [LANE_F_TEMPERATURE] = "temp"},
		.range = {[LANE_F_TEMPERATURE] = LANE_RANGE(0, 2), [LANE_F_TOP_P] = LANE_RANGE(0, 1)},
	};
	char err[256];
	enum lane_field bad = LANE_F_COUNT;
	CHECK(lane_check_value(NULL, LANE_F_TEMPERATURE, 5, err, sizeof err) == 0);
	CHECK(lane_check_value(&api, LANE_F_TEMPERATURE, 5, err, sizeof err) == LANES_EINVAL && strstr(err, "temp must be between 0 and 2, got 5"));
	CHECK(lane_check_value(&api, LANE_F_TEMPERATURE, 2, err, sizeof err) == 0);
	CHECK(lane_check_value(NULL, LANE_F_TEMPERATURE, 1001, err, sizeof err) == LANES_EINVAL && strstr(err, "temperature"));
	CHECK(lane_check_value(NULL, LANE_F_TEMPERATURE, NAN, err, sizeof err) == LANES_EINVAL);
	// an API's range never widens the host's: top_p 0 stays refused
	CHECK(lane_check_value(&api, LANE_F_TOP_P, 0, err, sizeof err) == LANES_EINVAL && strstr(err, "greater than 0"));
	CHECK(lane_check_value(&api, LANE_F_TOP_P, 1, err, sizeof err) == 0);
	CHECK(lane_check_value(NULL, LANE_F_REPEAT_PENALTY, 0, err, sizeof err) == LANES_EINVAL);
	CHECK(lane_check_value(NULL, LANE_F_TOP_LOGPROBS, LANE_MAX_TOP_LOGPROBS + 1, err, sizeof err) == LANES_EINVAL);
	CHECK(!strcmp(lane_api_name(&api, LANE_F_MAX_TOKENS), "max_output_tokens") && !strcmp(lane_api_name(&api, LANE_F_TOP_K), "top_k"));
	lane_request q;
	lane_request_init(&q);
	CHECK(q.sampling.temperature == 1 && q.sampling.top_p == 1 && q.sampling.repeat_penalty == 1 && q.draft);
	CHECK(lane_check_params(&q, &api, 100, err, sizeof err, &bad) == 0);
	q.sampling.temperature = 1.5f;
	CHECK(lane_check_params(&q, NULL, 100, err, sizeof err, &bad) == 0);
	q.sampling.temperature = 3;
	CHECK(lane_check_params(&q, &api, 100, err, sizeof err, &bad) == LANES_EINVAL && bad == LANE_F_TEMPERATURE);
	q.sampling.temperature = 1;
	q.sampling.presence_penalty = -2.5f;
	CHECK(lane_check_params(&q, &api, 100, err, sizeof err, &bad) == LANES_EINVAL && bad == LANE_F_PRESENCE_PENALTY);
	q.sampling.presence_penalty = 0;
	lane_bias b = {100, 1};
	q.sampling.bias = &b;
	q.sampling.n_bias = 1;
	CHECK(lane_check_params(&q, &api, 100, err, sizeof err, &bad) == LANES_EINVAL && bad == LANE_F_LOGIT_BIAS);
	b.token = 99;
	CHECK(lane_check_params(&q, &api, 100, err, sizeof err, &bad) == 0);
	const char *stops[] = {""};
	q.stop_strs = stops;
	q.n_stop_strs = 1;
	CHECK(lane_check_params(&q, &api, 100, err, sizeof err, &bad) == LANES_EINVAL && bad == LANE_F_STOP);
	q.n_stop_strs = 0;
	// an API's range bounds what was sent: max_tokens 0 (not sent) passes a range of 1.., a
	// ban (-inf) passes a range of finite biases, a finite bias outside it does not
	static const lane_api narrow = {.range = {[LANE_F_MAX_TOKENS] = LANE_RANGE(1, INT32_MAX),
						  [LANE_F_LOGIT_BIAS] = LANE_RANGE(-100, 100)}};
	q.max_tokens = 0;
	b.bias = -INFINITY;
	CHECK(lane_check_params(&q, &narrow, 100, err, sizeof err, &bad) == 0);
	b.bias = -101;
	CHECK(lane_check_params(&q, &narrow, 100, err, sizeof err, &bad) == LANES_EINVAL && bad == LANE_F_LOGIT_BIAS);
	b.bias = 1;
	q.max_tokens = -1;
	CHECK(lane_check_params(&q, &narrow, 100, err, sizeof err, &bad) == LANES_EINVAL && bad == LANE_F_MAX_TOKENS);
	q.max_tokens = 0;
	// the context check names the API's field and the numbers
	lane_host *h = NULL;
	lane_config cfg;
	lane_config_default(&cfg);
	cfg.ctx = 256;
	cfg.lanes = 1;
	CHECK(lane_host_new(&h, M, V, &cfg, err, sizeof err) == 0);
	if (!h) return;
	int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	q.prompt = ids;
	q.n_prompt = 8;
	q.max_tokens = 100000;
	CHECKF(lane_check_prompt(h, &q, &api, err, sizeof err, &bad) == 0, "max_tokens past the context is capped: %s", err);
	int32_t *many = calloc(256, sizeof *many);
	q.prompt = many;
	q.n_prompt = 256;
	CHECK(lane_check_prompt(h, &q, &api, err, sizeof err, &bad) == LANES_ELIMIT && bad == LANE_F_PROMPT && strstr(err, "256 tokens"));
	q.prompt = ids;
	q.n_prompt = 8;
	free(many);
	q.max_tokens = 0;
	CHECK(lane_check_prompt(h, &q, &api, err, sizeof err, &bad) == 0);
	q.n_prompt = 0;
	CHECK(lane_check_prompt(h, &q, &api, err, sizeof err, &bad) == LANES_EINVAL && bad == LANE_F_PROMPT);
	// cheap size bounds before tokenizing: a message takes a token at least, a token covers
	// at most the vocabulary's longest text
	CHECK(lane_check_prompt_size(h, 256, 0, &api, err, sizeof err, &bad) == 0);
	bad = LANE_F_COUNT;
	CHECK(lane_check_prompt_size(h, 257, 0, &api, err, sizeof err, &bad) == LANES_ELIMIT && bad == LANE_F_PROMPT &&
	      strstr(err, "257 entries"));
	CHECK(lane_check_prompt_size(h, 0, 256 * 4, &api, err, sizeof err, &bad) == 0);
	CHECK(lane_check_prompt_size(h, 0, (size_t)1 << 30, &api, err, sizeof err, &bad) == LANES_ELIMIT && strstr(err, "bytes"));
	// the log-probability entries a reply may hold: n x max_tokens (capped at the context, the
	// context when unset) x (1 + top)
	lane_request lq;
	lane_request_init(&lq);
	lq.max_tokens = 200;
	CHECK(lane_output_entries(&lq, 32, 256) == 0);
	lq.logprobs = true;
	lq.top_logprobs = 20;
	CHECK(lane_output_entries(&lq, 32, 256) == 32 * 200 * 21);
	lq.max_tokens = 2000;
	CHECK(lane_output_entries(&lq, 32, 256) == 32 * 256 * 21);
	lq.max_tokens = 0;
	lq.top_logprobs = 0;
	CHECK(lane_output_entries(&lq, 1, 256) == 256);
	uint64_t s1 = lane_draw_seed(h), s2 = lane_draw_seed(h);
	CHECK(s1 != s2 && s1 < (1ull << 53) && s2 < (1ull << 53));
	lane_host_free(h);
}

// A configuration out of range is refused, naming the field and its range, never replaced.
static void test_config_refused(void) {
	const struct { int32_t page_tokens, draft_max; const char *says; } bad[] = {
		{0, 8, "page_tokens must be 1..4096"},
		{4097, 8, "page_tokens must be 1..4096"},
		{16, -1, "draft_max must be 0..16, not -1"},
		{16, LANE_MAX_DRAFT + 1, "draft_max must be 0..16, not 17"},
	};
	char err[256];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		lane_config c;
		lane_config_default(&c);
		c.page_tokens = bad[i].page_tokens;
		c.draft_max = bad[i].draft_max;
		lane_host *h = NULL;
		err[0] = 0;
		CHECKF(lane_host_new(&h, M, V, &c, err, sizeof err) == LANES_EINVAL && h == NULL && strstr(err, bad[i].says),
		       "page_tokens %d, draft_max %d refused: '%s'", bad[i].page_tokens, bad[i].draft_max, err);
	}
	lane_config c;
	lane_config_default(&c);
	c.draft_max = 0;
	lane_host *h = NULL;
	CHECKF(lane_host_new(&h, M, V, &c, err, sizeof err) == 0, "draft_max 0 is allowed: %s", err);
	lane_host_free(h);
	// an elastic window with no demand horizon is refused, not given a default
	lane_config_default(&c);
	c.window = 256;
	c.window_max = 512;
	c.window_recent_s = 0;
	h = NULL;
	CHECK(lane_host_new(&h, M, V, &c, err, sizeof err) == LANES_EINVAL && !h && strstr(err, "window_recent_s"));
	// a price that is no number of microseconds is refused
	lane_config_default(&c);
	c.row_us = NAN;
	CHECK(lane_host_new(&h, M, V, &c, err, sizeof err) == LANES_EINVAL && !h && strstr(err, "row_us"));
	c.row_us = 5, c.fixed_us = -1;
	CHECK(lane_host_new(&h, M, V, &c, err, sizeof err) == LANES_EINVAL && !h && strstr(err, "fixed_us"));
}

// ---- capacity leases ----------------------------------------------------------------------------

static lane_host *lease_host(int lanes, int queue) {
	QUEUE = queue;
	lane_host *h = host(lanes, 0, true, 2);
	QUEUE = -1;
	return h;
}

static lane_snapshot lease_snap(lane_host *h) {
	lane_snapshot sn;
	lane_host_snapshot(h, &sn);
	return sn;
}

// The order in which requests saw their first event (notify callback: engine thread).
static atomic_int lease_order;
static void first_event(void *arg, const lane_event *ev) {
	(void)ev;
	int *at = arg;
	if (!*at) *at = atomic_fetch_add(&lease_order, 1) + 1;
}

// A lease holds its lanes against requests without one; a request naming it is admitted
// before them (past a full queue), with the tokens it has alone; release, expiry, refusals.
static void test_leases(void) {
	req_spec s[4];
	make_specs(s, 4, 11, model_hparams_of(M)->n_vocab);
	for (int i = 0; i < 4; i++) s[i].q.max_tokens = 16, s[i].q.ignore_eos = true;
	static result solo[4];
	lane_host *h = lease_host(1, 0);
	if (!h) return;
	run_all(h, s, 4, solo, false);
	char err[256];
	lane_lease l, l2;
	const uint64_t ttl = 10 * 1000000ull;
	CHECK(lane_lease_new(h, 0, 0, ttl, &l, err, sizeof err) == LANES_EINVAL);
	CHECK(lane_lease_new(h, 1, 0, 0, &l, err, sizeof err) == LANES_EINVAL);
	CHECK(lane_lease_new(h, 1, 0, LANE_LEASE_MAX_TTL_US + 1, &l, err, sizeof err) == LANES_EINVAL);
	CHECKF(lane_lease_new(h, 1, (uint64_t)1 << 40, ttl, &l, err, sizeof err) == LANES_EBUSY && strstr(err, "KV bytes free"),
	       "a spike larger than the pool: %s", err);
	// want 3 of 1 lane: granted 1; then nothing is free for another lease
	CHECKF(lane_lease_new(h, 3, 4096, ttl, &l, err, sizeof err) == 0 && l.granted == 1 && l.id && l.pages > 0, "lease: %s", err);
	lane_snapshot sn = lease_snap(h);
	CHECKF(sn.lanes_free == 0 && sn.leases == 1 && sn.leased_lanes == 1, "lanes_free %d leases %d leased %d", sn.lanes_free,
	       sn.leases, sn.leased_lanes);
	CHECK(sn.kv_free_bytes == (uint64_t)(sn.kv_pages_limit - l.pages) * sn.kv_page_bytes);
	CHECKF(lane_lease_new(h, 1, 0, ttl, &l2, err, sizeof err) == LANES_EBUSY && strstr(err, "0 lanes free"), "busy: %s", err);
	// a request without the lease waits, though its lane is idle
	int at_a = 0;
	atomic_store(&lease_order, 0);
	lane_req *a = submit1(h, &s[0].q), *b = NULL;
	if (a) lane_req_set_notify(a, first_event, &at_a);
	usleep(150000);
	sn = lease_snap(h);
	CHECKF(sn.queue_depth == 1 && at_a == 0, "held back by the lease: queue %d", sn.queue_depth);
	// the queue (0 beyond the lane) is full, and the lessee's request passes it
	lane_req *c = NULL;
	CHECK(lane_submit(h, &s[2].q, &c, err, sizeof err) == LANES_EBUSY);
	lane_request q = s[1].q;
	q.lease = l.id;
	b = submit1(h, &q);
	result ra, rb;
	if (b) collect(b, &rb);
	if (a) collect(a, &ra);
	// by the engine's clock: a notify set after submit can miss events already queued
	CHECKF(rb.t_first && ra.t_first > rb.t_first, "the leased request ran first (a at %llu, b at %llu us)",
	       (unsigned long long)ra.t_first, (unsigned long long)rb.t_first);
	CHECK(a && b && same(&ra, &solo[0]) && same(&rb, &solo[1]) && ra.terminals == 1 && rb.terminals == 1);
	if (a) lane_req_set_notify(a, NULL, NULL);
	lane_req_free(a);
	lane_req_free(b);
	// used up: nothing to release, and every lane is free again
	CHECK(lane_lease_release(h, l.id) == LANES_ENOTFOUND);
	sn = lease_snap(h);
	CHECKF(sn.lanes_free == 1 && sn.leases == 0 && sn.leased_lanes == 0, "after use: free %d leases %d", sn.lanes_free, sn.leases);
	// release gives it back
	CHECK(lane_lease_new(h, 1, 0, ttl, &l, err, sizeof err) == 0);
	CHECK(lease_snap(h).lanes_free == 0);
	CHECK(lane_lease_release(h, l.id) == 0);
	CHECK(lane_lease_release(h, l.id) == LANES_ENOTFOUND);
	sn = lease_snap(h);
	CHECK(sn.lanes_free == 1 && sn.leases == 0 && sn.kv_free_bytes == (uint64_t)sn.kv_pages_limit * sn.kv_page_bytes);
	// expiry: a request held back by a lease runs once it lapses; naming a lapsed lease is no error
	CHECK(lane_lease_new(h, 1, 0, 40000, &l, err, sizeof err) == 0);
	a = submit1(h, &s[2].q);
	if (a) collect(a, &ra);
	CHECK(a && same(&ra, &solo[2]));
	lane_req_free(a);
	CHECK(lane_lease_release(h, l.id) == LANES_ENOTFOUND);
	q = s[3].q;
	q.lease = l.id;
	a = submit1(h, &q);
	if (a) collect(a, &ra);
	CHECK(a && same(&ra, &solo[3]));
	lane_req_free(a);
	// a draining host leases nothing
	lane_host_drain(h);
	CHECK(lane_lease_new(h, 1, 0, ttl, &l, err, sizeof err) == LANES_ECANCELLED);
	lane_host_free(h);
}

// Random leases, submits with and without them, cancels and releases: every request ends
// once, and afterwards every lane and page is free and no lease is held; a halt ends them too.
static void test_lease_chaos(uint64_t seed) {
	t_case("seed %llu", (unsigned long long)seed);
	req_spec s[NREQ];
	make_specs(s, NREQ, seed, model_hparams_of(M)->n_vocab);
	lane_host *h = lease_host(3, 4);
	if (!h) return;
	lane_req *r[2 * NREQ] = {0};
	uint64_t ids[2 * NREQ] = {0};
	int n = 0, n_ids = 0;
	uint64_t x = seed;
	char err[256];
	for (int k = 0; k < 2 * NREQ; k++) {
		x = splitmix64(x);
		lane_lease l;
		if (x % 3 == 0 && lane_lease_new(h, 1 + (int32_t)(x >> 10) % 2, (x >> 20) % 8192, 1000 + (x >> 30) % 60000, &l, err,
						  sizeof err) == 0)
			ids[n_ids++] = l.id;
		lane_request q = s[k % NREQ].q;
		if (x % 2 && n_ids) q.lease = ids[(x >> 40) % (uint64_t)n_ids];
		int rc = lane_submit(h, &q, &r[n], err, sizeof err);
		CHECKF(rc == 0 || rc == LANES_EBUSY, "submit: %s", err);
		if (rc == 0) n++;
		if (x % 5 == 0 && n) lane_cancel(r[(x >> 8) % (uint64_t)n]);
		if (x % 7 == 0 && n_ids) lane_lease_release(h, ids[(x >> 48) % (uint64_t)n_ids]);
		if (x % 4 == 0) usleep((useconds_t)(x >> 52) % 3000);
	}
	const bool halt = seed % 2;
	if (halt) lane_host_halt(h, "halt for the test");
	for (int i = 0; i < n; i++) {
		result res;
		collect(r[i], &res);
		CHECKF(res.terminals == 1, "request %d has %d terminal events", i, res.terminals);
		lane_req_free(r[i]);
	}
	CHECK(lane_host_open(h) == 0);
	// leases still held lapse on their own (ttl at most 61 ms): waited for, however slow the machine
	lane_snapshot sn = lease_snap(h);
	for (int w = 0; w < 6000 && (sn.leases || (!halt && sn.lanes_free != 3)); w++) usleep(10000), sn = lease_snap(h);
	if (!halt)
		CHECKF(sn.lanes_free == 3 && sn.kv_free_bytes == (uint64_t)sn.kv_pages_limit * sn.kv_page_bytes,
		       "everything free: %d lanes, %llu bytes", sn.lanes_free, (unsigned long long)sn.kv_free_bytes);
	CHECKF(sn.leases == 0 && sn.leased_lanes == 0, "no lease held: %d leases, %d lanes", sn.leases, sn.leased_lanes);
	lane_host_free(h);
}

// The page files in the one folder under dir (the host names it); paths into names, count.
static int page_files(const char *dir, char names[][1024], int cap, off_t *size) {
	int n = 0;
	DIR *top = opendir(dir);
	for (struct dirent *e; top && (e = readdir(top));) {
		if (e->d_name[0] == '.') continue;
		char sub[1024];
		snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
		DIR *d = opendir(sub);
		for (struct dirent *f; d && (f = readdir(d));) {
			if (!strstr(f->d_name, ".kvpage")) continue;
			if (n < cap) snprintf(names[n], 1024, "%s/%s", sub, f->d_name);
			struct stat st;
			if (n < cap && size && !stat(names[n], &st)) *size = st.st_size;
			n++;
		}
		if (d) closedir(d);
	}
	if (top) closedir(top);
	return n;
}

// Whether the page file at path holds a prompt's first page (its parent chain hash is the root's).
static bool first_page(const char *path) {
	uint64_t parent = 1;
	FILE *f = fopen(path, "rb");
	if (f && fseek(f, 48, SEEK_SET) == 0 && fread(&parent, sizeof parent, 1, f) != 1) parent = 1;
	if (f) fclose(f);
	return parent == 0;
}

// A host over CACHE_DIR for a model whose identity starts with ident runs s one after another
// into out, drains; what its snapshot said before.
static lane_snapshot run_cached(uint8_t ident, req_spec *s, int n, result *out) {
	CACHE_IDENT = ident;
	lane_host *h = host(4, 0, true, 2);
	run_all(h, s, n, out, false);
	lane_snapshot sn;
	lane_host_snapshot(h, &sn);
	lane_host_free(h);
	CACHE_IDENT = 0;
	return sn;
}

// --cache-dir: pages written at drain are read back by the next host with the same bits as a
// fresh prompt; damaged and foreign files are refused and deleted, and the cap holds.
static void test_cache_dir(void) {
	char dir[1024], other[1024], names[64][1024];
	snprintf(dir, sizeof dir, "%s/lanes-kvdisk-%d", t_tmp(), (int)getpid());
	static req_spec s[NREQ];
	static result solo[NREQ], first[NREQ], back[NREQ], after[NREQ];
	make_specs(s, NREQ / 2, 77, model_hparams_of(M)->n_vocab);
	// each reply ends inside its prompt's last page: every page file is a prompt's, as counted below
	lane_config dc;
	lane_config_default(&dc);
	for (int i = 0; i < NREQ / 2; i++) {
		const int32_t room = dc.page_tokens - s[i].n_prompt % dc.page_tokens;
		if (s[i].q.max_tokens > room) s[i].q.max_tokens = room;
	}
	lane_host *h = host(1, 0, false, 2);
	run_all(h, s, NREQ / 2, solo, false);
	lane_host_free(h);

	CACHE_DIR = dir;
	CHECK(run_cached(0, s, NREQ / 2, first).prefix_disk.read == 0); // drains: every cached page to disk
	off_t fsize = 0;
	const int n_files = page_files(dir, names, 64, &fsize);
	CHECKF(n_files >= 4 && fsize > 0, "pages written at drain (%d)", n_files);

	lane_snapshot sn = run_cached(0, s, NREQ / 2, back);
	CHECKF(sn.prefix_disk.read >= (uint64_t)n_files / 2 && sn.prefix_hit_tokens > 0, "pages read back (%llu, %llu tokens)",
	       (unsigned long long)sn.prefix_disk.read, (unsigned long long)sn.prefix_hit_tokens);
	CHECK(sn.prefix_disk.refused == 0);
	for (int i = 0; i < NREQ / 2; i++) {
		CHECKF(same(&solo[i], &first[i]), "req %d: fresh = cached", i);
		CHECKF(same(&solo[i], &back[i]), "req %d: fresh = read back from disk", i);
	}

	// a flipped byte, a cut file and a file of another model's folder are refused and deleted
	// (then written again, whole and their own, at drain); first pages, as a prompt reads them
	int n = page_files(dir, names, 64, NULL), firsts = 0;
	for (int i = 0; i < n && i < 64 && firsts < 3; i++)
		if (first_page(names[i])) memmove(names[firsts++], names[i], sizeof names[0]);
	CHECKF(firsts == 3, "three first pages (%d)", firsts);
	if (firsts == 3) {
		FILE *f = fopen(names[0], "r+b");
		CHECK(f && fseek(f, fsize / 2, SEEK_SET) == 0);
		if (f) {
			int c = fgetc(f);
			fseek(f, fsize / 2, SEEK_SET);
			fputc(c ^ 0x10, f);
			fclose(f);
		}
		CHECK(truncate(names[1], fsize - 7) == 0);
		CACHE_IDENT = 1; // another model: its own folder, where names[2] is planted
		h = host(1, 0, true, 2);
		lane_host_free(h);
		CACHE_IDENT = 0;
		int others = 0;
		DIR *top = opendir(dir);
		for (struct dirent *e; top && (e = readdir(top));) {
			char seg[300];
			snprintf(seg, sizeof seg, "/%s/", e->d_name);
			if (e->d_name[0] == '.' || strstr(names[2], seg)) continue;
			snprintf(other, sizeof other, "%s/%s", dir, e->d_name);
			others++;
		}
		if (top) closedir(top);
		CHECKF(others == 1, "another model's folder (%d)", others);
		char planted[1100], copy[1200];
		snprintf(planted, sizeof planted, "%s/%s", other, strrchr(names[2], '/') + 1);
		snprintf(copy, sizeof copy, "cp '%s' '%s'", names[2], planted);
		CHECK(system(copy) == 0);
		sn = run_cached(1, s, NREQ / 2, after);
		CHECKF(sn.prefix_disk.refused == 1, "the planted file is refused (%llu)", (unsigned long long)sn.prefix_disk.refused);
		for (int i = 0; i < NREQ / 2; i++) CHECKF(same(&solo[i], &after[i]), "req %d: fresh = beside a foreign file", i);
		sn = run_cached(0, s, NREQ / 2, after);
		CHECKF(sn.prefix_disk.refused == 2, "the damaged files are refused (%llu)", (unsigned long long)sn.prefix_disk.refused);
		for (int i = 0; i < NREQ / 2; i++) CHECKF(same(&solo[i], &after[i]), "req %d: fresh = after refusals", i);
		// what drain wrote in their place is whole: read back, nothing refused
		sn = run_cached(1, s, NREQ / 2, after);
		CHECKF(sn.prefix_disk.refused == 0 && sn.prefix_disk.read > 0, "written again whole (%llu refused, %llu read)",
		       (unsigned long long)sn.prefix_disk.refused, (unsigned long long)sn.prefix_disk.read);
		sn = run_cached(0, s, NREQ / 2, after);
		CHECKF(sn.prefix_disk.refused == 0 && sn.prefix_disk.read >= (uint64_t)n_files / 2, "written again whole (%llu refused, %llu read)",
		       (unsigned long long)sn.prefix_disk.refused, (unsigned long long)sn.prefix_disk.read);
		for (int i = 0; i < NREQ / 2; i++) CHECKF(same(&solo[i], &after[i]), "req %d: fresh = read back again", i);
	}

	// a reply's pages are written too: a next turn (the prompt, the reply, more) after a restart
	// reads them back, with a fresh host's tokens
	char rm[1100];
	snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
	CHECK(system(rm) == 0);
	static req_spec t[2];
	static result r1, r2, f2;
	make_specs(t, 2, 5, model_hparams_of(M)->n_vocab);
	t[0].n_prompt = t[0].q.n_prompt = 20;
	t[0].q.sampling.temperature = 0, t[0].q.ignore_eos = true, t[0].q.max_tokens = 40, t[0].q.n_stop_strs = 0, t[0].q.n_stop_ids = 0;
	run_cached(0, t, 1, &r1);
	CHECK(r1.n == 40);
	t[1] = t[0];
	t[1].q.prompt = t[1].prompt;
	memcpy(t[1].prompt + 20, r1.ids, 30 * sizeof(int32_t));
	for (int k = 50; k < 55; k++) t[1].prompt[k] = 3 + k;
	t[1].n_prompt = t[1].q.n_prompt = 55, t[1].q.max_tokens = 8;
	sn = run_cached(0, &t[1], 1, &r2);
	CHECKF(sn.prefix_hit_tokens == 48 && sn.prefix_disk.read == 3, "turn 2 after a restart: %llu tokens from %llu pages read back",
	       (unsigned long long)sn.prefix_hit_tokens, (unsigned long long)sn.prefix_disk.read);
	h = host(1, 0, false, 2);
	run_all(h, &t[1], 1, &f2, false);
	lane_host_free(h);
	CHECKF(same(&r2, &f2), "turn 2 from the reply's pages on disk = fresh");
	CHECK(system(rm) == 0);

	// a cap of two files: the folder never holds more, the oldest go first
	CACHE_MAX = (uint64_t)fsize * 2;
	h = host(4, 0, true, 2);
	run_all(h, s, NREQ / 2, after, true);
	lane_host_free(h);
	CHECKF(page_files(dir, names, 64, NULL) == 2, "the cap holds (%d files)", page_files(dir, names, 64, NULL));
	CACHE_MAX = 0;
	CACHE_DIR = NULL;
	CHECK(system(rm) == 0);
}

// Slot actions: a lane's last prompt saved, erased and restored hits with the bits of a fresh
// prompt; a damaged or cut file is refused whole; no such lane, no folder and a busy lane are said.
static void test_slots(void) {
	char dir[1024], rm[1100];
	snprintf(dir, sizeof dir, "%s/lanes-slots-%d", t_tmp(), (int)getpid());
	snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
	static req_spec s[8];
	static result solo[1], first[1], back[1];
	make_specs(s, 8, 91, model_hparams_of(M)->n_vocab);
	int k = 0;
	while (k < 7 && s[k].n_prompt < 34) k++;
	CHECKF(s[k].n_prompt >= 34, "a prompt of two pages or more (%d)", s[k].n_prompt);
	char err[256];
	lane_host *h = host(1, 0, true, 2);
	run_all(h, &s[k], 1, solo, false);
	lane_slot_job none = {.action = LANE_SLOT_SAVE};
	CHECK(lane_slot_run(h, &none, err, sizeof err) == LANES_EUNSUPPORTED && lane_slot_max_bytes(h) == 0);
	lane_host_free(h);

	CACHE_DIR = dir;
	h = host(1, 0, true, 2);
	run_all(h, &s[k], 1, first, false);
	CHECK(same(&solo[0], &first[0]));
	lane_slot_job save = {.action = LANE_SLOT_SAVE};
	CHECKF(lane_slot_run(h, &save, err, sizeof err) == 0, "save: %s", err);
	const int32_t pages = s[k].n_prompt / 16 * 16;
	CHECKF(save.n_tokens == pages && save.bytes && save.n_bytes <= lane_slot_max_bytes(h), "saved %d of %d tokens", save.n_tokens, pages);
	lane_slot_job erase = {.action = LANE_SLOT_ERASE}, again = {.action = LANE_SLOT_SAVE};
	CHECK(lane_slot_run(h, &erase, err, sizeof err) == 0 && erase.n_tokens == pages);
	CHECK(lane_slot_run(h, &again, err, sizeof err) == 0 && again.n_tokens == 0);
	free(again.bytes);
	// damaged or cut: refused, nothing taken
	uint8_t *bad = malloc(save.n_bytes);
	CHECK(bad != NULL);
	if (bad) {
		memcpy(bad, save.bytes, save.n_bytes);
		bad[save.n_bytes / 2] ^= 4;
		lane_slot_job r1 = {.action = LANE_SLOT_RESTORE, .bytes = bad, .n_bytes = save.n_bytes};
		lane_slot_job r2 = {.action = LANE_SLOT_RESTORE, .bytes = save.bytes, .n_bytes = save.n_bytes - 3};
		CHECK(lane_slot_run(h, &r1, err, sizeof err) == LANES_EINVAL && strstr(err, "checksum"));
		CHECK(lane_slot_run(h, &r2, err, sizeof err) == LANES_EINVAL);
		free(bad);
	}
	lane_slot_job far = {.action = LANE_SLOT_ERASE, .lane = 1};
	CHECK(lane_slot_run(h, &far, err, sizeof err) == LANES_ENOTFOUND);
	lane_snapshot sn0, sn1;
	lane_host_snapshot(h, &sn0);
	lane_slot_job restore = {.action = LANE_SLOT_RESTORE, .bytes = save.bytes, .n_bytes = save.n_bytes};
	CHECKF(lane_slot_run(h, &restore, err, sizeof err) == 0 && restore.n_tokens == pages, "restore: %s (%d)", err, restore.n_tokens);
	run_all(h, &s[k], 1, back, false);
	lane_host_snapshot(h, &sn1);
	CHECKF(sn1.prefix_hit_tokens - sn0.prefix_hit_tokens == (uint64_t)pages, "the restored pages hit (%llu)",
	       (unsigned long long)(sn1.prefix_hit_tokens - sn0.prefix_hit_tokens));
	CHECK(same(&solo[0], &back[0]));
	// a lane mid-request is busy
	lane_req *r = NULL;
	// far longer than a round: a reader slow to see the first token still finds the lane busy
	s[k].q.max_tokens = 1500;
	s[k].q.ignore_eos = true;
	CHECK(lane_submit(h, &s[k].q, &r, err, sizeof err) == 0);
	lane_event ev;
	CHECK(lane_next(r, &ev, -1) == 1);
	lane_slot_job busy = {.action = LANE_SLOT_SAVE};
	const int brc = lane_slot_run(h, &busy, err, sizeof err);
	CHECKF(brc == LANES_EBUSY && ev.kind == LANE_EV_TOKEN, "a lane mid-request is busy (%d)", brc);
	free(busy.bytes);
	lane_req_free(r);
	free(save.bytes);
	lane_host_free(h);
	CACHE_DIR = NULL;
	CHECK(system(rm) == 0);
}

// Phi 3's LongRoPE: pages whose keys turned by the long factors go to a folder of their own, so a
// restart with the other factors never reads them.
static void test_cache_dir_rope(void) {
	char dir[1024], rm[1100];
	snprintf(dir, sizeof dir, "%s/lanes-kvdisk-rope-%d", t_tmp(), (int)getpid());
	CACHE_DIR = dir;
	for (int k = 0; k < 3; k++) {
		model_set_context(M, k == 1 ? 256 : 64);
		lane_host_free(host(1, 0, true, 2));
	}
	CACHE_DIR = NULL;
	int folders = 0;
	DIR *top = opendir(dir);
	for (struct dirent *e; top && (e = readdir(top));) folders += e->d_name[0] != '.';
	if (top) closedir(top);
	CHECKF(folders == 2, "a folder for each set of rope factors (%d)", folders);
	snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
	CHECK(system(rm) == 0);
}

static void lease_chaos_all(void) {
	for (uint64_t seed = 1; seed <= 6; seed++) test_lease_chaos(seed);
}

int main(void) {
	with_model("stories260K.gguf", chaos_all);
	with_model("stories260K.gguf", test_faults);
	with_model("stories260K.gguf", test_semantics);
	with_model("stories260K.gguf", test_notify);
	with_model("stories260K.gguf", test_notify_apart);
	with_model("stories260K.gguf", test_idle_fill);
	with_model("stories260K.gguf", test_draft_ngram);
	with_model("stories260K.gguf", test_draft_priced);
	with_model("stories260K.gguf", test_draft_model);
	test_exact("stories260K.gguf");
	with_model("stories260K.gguf", test_elastic);
	with_model("stories260K.gguf", test_plan_accounting);
	with_model("stories260K.gguf", test_cache_dir);
	with_model("stories260K.gguf", test_slots);
	test_exact_kv("stories260K.gguf", KV_Q8_0);
	test_exact_kv("stories260K.gguf", KV_Q4_0);
	test_exact_kv("stories260K.gguf", KV_F16);
	test_exact_kv("ref-qwen2-Q8_0.gguf", KV_Q8_0);
	test_exact("ref-llama-Q4_K_M.gguf");
	test_exact("ref-qwen2-Q8_0.gguf");
	test_exact("ref-moe-Q8_0.gguf");
	// gemma2 (its local layers' window shorter than the prompts): solo, concurrent, in pieces,
	// on 1 thread, from the prefix cache and drafted all give the same tokens
	char gemma2[512], vocab[512];
	snprintf(gemma2, sizeof gemma2, "%s/lanes-gemma2-%d.gguf", t_tmp(), (int)getpid());
	snprintf(vocab, sizeof vocab, "%s/models/stories260K.gguf", t_shared());
	CHECK(t_gen_model("gemma2-test", "Q8_0", vocab, gemma2) == 0);
	test_exact(gemma2);
	with_model(gemma2, test_draft_ngram);
	remove(gemma2);
	// gemma3: five local layers (their own rope base) to one global; phi3: fused matrices,
	// LongRoPE, partial rotary, a window on every layer
	static const char *const fams[] = {"gemma3-test", "phi3-test"};
	for (int f = 0; f < 2; f++) {
		snprintf(gemma2, sizeof gemma2, "%s/lanes-%s-%d.gguf", t_tmp(), fams[f], (int)getpid());
		CHECK(t_gen_model(fams[f], "Q8_0", vocab, gemma2) == 0);
		test_exact(gemma2);
		with_model(gemma2, test_draft_ngram);
		if (f == 0) {
			with_model(gemma2, test_window_release);
			// pages of 32, so the local layers' rows are freed as the lanes go: every way
			// (solo, concurrent, pieces, 1 thread, the prefix cache) and drafted, the same tokens
			PAGE_TOKENS = 32;
			test_exact(gemma2);
			with_model(gemma2, test_draft_ngram);
			PAGE_TOKENS = 0;
		}
		if (f == 1) with_model(gemma2, test_cache_dir_rope);
		remove(gemma2);
	}
	// qwen3next: Gated DeltaNet layers with a recurrent state per lane — solo, concurrent, in
	// pieces, on 1 thread, from the prefix cache's state checkpoints, asked to draft, under a
	// grammar and with a thinking budget, the same tokens; lanes reused by later requests
	// start from a zero state
	snprintf(gemma2, sizeof gemma2, "%s/lanes-qwen3-next-test-%d.gguf", t_tmp(), (int)getpid());
	CHECK(t_gen_model("qwen3-next-test", "Q8_0", vocab, gemma2) == 0);
	test_exact(gemma2);
	with_model(gemma2, test_next_turn);
	with_model(gemma2, test_shared_head);
	with_model(gemma2, test_replay_rows);
	with_model(gemma2, test_reply_checkpoint);
	with_model(gemma2, test_draft_ngram);
	with_model(gemma2, test_grammar_exact);
	with_model(gemma2, test_think);
	remove(gemma2);
	// a model with an MTP layer: every way, and the head as the proposer
	snprintf(gemma2, sizeof gemma2, "%s/lanes-mtp-test-%d.gguf", t_tmp(), (int)getpid());
	CHECK(t_gen_model("mtp-test", "Q8_0", vocab, gemma2) == 0);
	test_exact(gemma2);
	with_model(gemma2, test_draft_mtp);
	remove(gemma2);
	with_model("stories260K.gguf", test_trained_head);
	// The 8-bit activation width keeps the contract too: the quantized models again, and drafts.
	CHECK(tensor_kernels_select_act(TENSOR_ACT_Q8) == 0);
	test_exact("ref-llama-Q4_K_M.gguf");
	test_exact("ref-qwen2-Q8_0.gguf");
	test_exact("ref-moe-Q8_0.gguf");
	with_model("ref-llama-Q4_K_M.gguf", test_draft_ngram);
	CHECK(tensor_kernels_select_act(TENSOR_ACT_Q16) == 0);
	with_model("stories260K.gguf", test_hooks);
	with_model("stories260K.gguf", test_next_turn);
	with_model("stories260K.gguf", test_shared_head);
	with_model("stories260K.gguf", test_reply_checkpoint);
	with_model("stories260K.gguf", test_contract);
	with_model("stories260K.gguf", test_config_refused);
	with_model("stories260K.gguf", test_embed);
	with_model("stories260K.gguf", test_prompt_lp);
	with_model("ref-qwen2-Q8_0.gguf", test_prompt_lp);
	with_model("ref-qwen2-Q8_0.gguf", test_embed);
	with_model("stories260K.gguf", test_grammar_exact);
	with_model("ref-spm-Q4_0.gguf", test_grammar_exact);
	with_model("stories260K.gguf", test_grammar_dead_end);
	with_model("stories260K.gguf", test_think);
	with_model("stories260K.gguf", test_samplers_exact);
	with_model("stories260K.gguf", test_leases);
	with_model("stories260K.gguf", lease_chaos_all);
	T_DONE("lanes");
}
