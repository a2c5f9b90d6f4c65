// tests: learning while serving (src/learn/live.c over the lane host's background hook).
// The hook: pieces run only when their price fits the round's share, the engine keeps going
// while the owner has work and sleeps when it has none, the halt reaches the owner once. Grants
// on stories260K: a grant's steps lower the held-out loss and each is a new version in the
// registry; the ledger's sequence moves only when something changed; requests beside training
// keep their tokens bit for bit (base, and adapter versions bound before the commits); custody:
// a revocation, an expiry, an allocation failing during a step and a halt each end their grant
// with no partial commit, and every request ends with exactly one terminal event.
#include "t.h"
#include "stories.h"

#include "cli/cli.h"
#include "learn/live.h"

#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdatomic.h>
#include <unistd.h>

static char err[512];
static model *M;
static tok_vocab *V;

// ---- the hook alone --------------------------------------------------------------------------
typedef struct {
	atomic_int pieces_left, ran, boundaries, halts, misfits;
	atomic_int idle; // boundaries that found no work left: the engine sleeps after one
	double price;
} fake_bg;

static double fake_cost(void *arg) {
	fake_bg *f = arg;
	return atomic_load(&f->pieces_left) > 0 ? f->price : 0;
}

static double fake_run(void *arg, base_pool *pool, double budget) {
	fake_bg *f = arg;
	double spent = 0;
	if (budget < f->price) atomic_fetch_add(&f->misfits, 1); // run was called with less than a piece
	while (atomic_load(&f->pieces_left) > 0 && spent + f->price <= budget) {
		atomic_fetch_sub(&f->pieces_left, 1);
		atomic_fetch_add(&f->ran, 1);
		spent += f->price;
	}
	return spent;
}

static bool fake_boundary(void *arg) {
	fake_bg *f = arg;
	atomic_fetch_add(&f->boundaries, 1);
	const bool more = atomic_load(&f->pieces_left) > 0;
	if (!more) atomic_fetch_add(&f->idle, 1);
	return more;
}

static void fake_halt(void *arg) { atomic_fetch_add(&((fake_bg *)arg)->halts, 1); }

static lane_host *host_with(const lane_background *bg, int lanes) {
	lane_config c;
	lane_config_default(&c);
	c.lanes = lanes;
	c.threads = 2;
	c.ctx = 4096;
	// fixed prices (as the HTTP tests give): the share a step gets does not follow a calibration a busy machine skews
	c.row_us = 100;
	c.fixed_us = 20000;
	c.background = *bg;
	lane_host *h = NULL;
	CHECKF(lane_host_new(&h, M, V, &c, err, sizeof err) == 0, "lane_host_new: %s", err);
	return h;
}

typedef struct {
	int terminals;
	enum lane_ev_kind end;
	char sha[65];
	int32_t n;
} result;

static void collect(lane_req *r, result *out) {
	memset(out, 0, sizeof *out);
	lane_event ev;
	while (lane_next(r, &ev, 60 * 1000000) == 1) {
		if (ev.kind == LANE_EV_TOKEN) {
			out->n++;
			continue;
		}
		out->terminals++;
		out->end = ev.kind;
		memcpy(out->sha, ev.token_sha, 65);
		if (lane_next(r, &ev, 0) == 1) out->terminals++; // nothing may follow a terminal event
		break;
	}
}

static lane_req *submit_n(lane_host *h, const model_lora *lora, int seed, int32_t max_tokens, int32_t n_prompt) {
	int32_t prompt[64];
	for (int i = 0; i < n_prompt; i++) prompt[i] = 1 + (int32_t)(splitmix64((uint64_t)(seed * 31 + i)) % 500);
	lane_request q;
	lane_request_init(&q);
	q.prompt = prompt;
	q.n_prompt = n_prompt;
	q.max_tokens = max_tokens;
	q.ignore_eos = true;
	q.sampling.temperature = seed % 2 ? 0.8f : 0.0f;
	q.sampling.seed = (uint64_t)seed;
	q.sampling.has_seed = true;
	model_lora_set set = {.n = lora ? 1 : 0, .use = {{lora, 1.0f}}};
	if (lora) q.lora = &set;
	lane_req *r = NULL;
	CHECKF(lane_submit(h, &q, &r, err, sizeof err) == 0, "submit: %s", err);
	return r;
}

static lane_req *submit(lane_host *h, const model_lora *lora, int seed, int32_t max_tokens) { return submit_n(h, lora, seed, max_tokens, 12); }

static void run1(lane_host *h, const model_lora *lora, int seed, int32_t n_prompt, result *res) {
	lane_req *r = submit_n(h, lora, seed, 32, n_prompt);
	if (r) collect(r, res);
	lane_req_free(r);
}

static void test_hook(void) {
	t_case("the background hook");
	fake_bg f = {.price = 3};
	lane_background bg = {.arg = &f, .cost = fake_cost, .run = fake_run, .boundary = fake_boundary, .halt = fake_halt, .share = 1.5};
	lane_config c;
	lane_config_default(&c);
	c.background = bg;
	lane_host *h = NULL;
	CHECK(lane_host_new(&h, M, V, &c, err, sizeof err) == LANES_EINVAL && strstr(err, "share"));
	bg.share = 0.25;
	h = host_with(&bg, 2);
	if (!h) return;
	// idle, nothing to do: no boundary runs
	usleep(50000);
	CHECK(atomic_load(&f.boundaries) == 0);
	// woken with work: rounds run until it is done, then the engine sleeps again
	atomic_store(&f.pieces_left, 400);
	lane_host_wake(h);
	for (int i = 0; i < 60000 && atomic_load(&f.pieces_left) > 0; i++) usleep(1000);
	CHECK(atomic_load(&f.pieces_left) == 0 && atomic_load(&f.ran) == 400);
	// the boundary that found the work done, after which the engine sleeps
	for (int i = 0; i < 60000 && !atomic_load(&f.idle); i++) usleep(1000);
	const int b = atomic_load(&f.boundaries);
	usleep(50000);
	CHECKF(atomic_load(&f.boundaries) == b, "boundaries went on while idle: %d then %d", b, atomic_load(&f.boundaries));
	CHECK(atomic_load(&f.misfits) == 0);
	// a piece larger than a round's share still runs, once the rounds' shares add up to it
	f.price = 1e5;
	atomic_store(&f.pieces_left, 2);
	lane_host_wake(h);
	for (int i = 0; i < 60000 && atomic_load(&f.pieces_left) > 0; i++) usleep(1000);
	CHECK(atomic_load(&f.pieces_left) == 0);
	// beside requests, tokens are those of a host without it
	f.price = 2;
	atomic_store(&f.pieces_left, 1 << 20);
	lane_host_wake(h);
	result with[4], without[4];
	lane_req *r[4];
	for (int i = 0; i < 4; i++) r[i] = submit(h, NULL, 7 + i, 48);
	for (int i = 0; i < 4; i++) {
		if (r[i]) collect(r[i], &with[i]);
		lane_req_free(r[i]);
	}
	CHECK(atomic_load(&f.ran) > 402);
	atomic_store(&f.pieces_left, 0);
	lane_host_free(h);
	CHECK(atomic_load(&f.halts) == 1);
	lane_background none = {0};
	h = host_with(&none, 2);
	for (int i = 0; h && i < 4; i++) {
		lane_req *q = submit(h, NULL, 7 + i, 48);
		if (q) collect(q, &without[i]);
		lane_req_free(q);
		CHECKF(with[i].terminals == 1 && without[i].terminals == 1 && !strcmp(with[i].sha, without[i].sha),
		       "request %d: %s beside the background, %s without", i, with[i].sha, without[i].sha);
	}
	lane_host_free(h);
}

// ---- grants ------------------------------------------------------------------------------------
static learn_example *TR[48], *HE[8];
static int NTR, NHE;


// A copy of example i of the training set (learn_live_example takes it).
static learn_example *train_ex(int i) {
	const learn_example *e = TR[i % NTR];
	const int64_t n = learn_example_tokens(e);
	bool fl[512];
	for (int64_t k = 0; k < n; k++) fl[k] = learn_example_is_learned(e, k);
	learn_example *c = NULL;
	learn_example_ids(&c, learn_example_ids_of(e), fl, n, err, sizeof err);
	return c;
}

typedef struct {
	learn_live *l;
	model_loras *reg;
	lane_host *h;
} server;

static bool serve(server *s, double share) {
	memset(s, 0, sizeof *s);
	CHECK(model_loras_new(&s->reg, M, 16) == 0);
	CHECKF(learn_live_new(&s->l, M, 32, err, sizeof err) == 0, "learn_live_new: %s", err);
	if (!s->reg || !s->l) return false;
	const lane_background bg = learn_live_background(s->l, share);
	s->h = host_with(&bg, 4);
	if (!s->h) return false;
	learn_live_attach(s->l, s->h, s->reg);
	return true;
}

static void unserve(server *s) {
	learn_live_stop(s->l);
	lane_host_free(s->h);
	learn_live_free(s->l);
	model_loras_free(s->reg);
}

static learn_ledger LG; // one at a time: the tests run on one thread

static const learn_grant_info *grant_in(learn_live *l, uint64_t id) {
	learn_live_ledger_of(l, &LG);
	for (int i = 0; i < LG.n_grants; i++)
		if (LG.grants[i].id == id) return &LG.grants[i];
	return NULL;
}

// Waits (up to 60 s) until grant id is listed in a state other than active (or, with
// steps > 0, has committed that many steps); returns its entry in LG.
static const learn_grant_info *wait_grant(learn_live *l, uint64_t id, int64_t steps) {
	for (int i = 0; i < 60000; i++) {
		const learn_grant_info *g = grant_in(l, id);
		if (g && (g->state != LEARN_GRANT_ACTIVE || (steps > 0 && g->steps_done >= steps))) return g;
		usleep(1000);
	}
	return grant_in(l, id);
}

// The registry's version of name (0: not ready).
static uint32_t reg_version(model_loras *reg, const char *name) {
	model_loras_entry *v = NULL;
	const int n = model_loras_list(reg, &v);
	uint32_t ver = 0;
	for (int i = 0; i < n; i++)
		if (v[i].state == MODEL_LORAS_READY && !strcmp(v[i].name, name)) ver = v[i].version;
	free(v);
	return ver;
}

static uint64_t open_grant(server *s, const char *name, int64_t steps, double expires_s, int32_t rank) {
	learn_grant_req r = {.adapter = name, .max_steps = steps, .max_tokens = 1 << 30, .lr = 0.02f, .rank = rank, .batch = 4,
			   .expires_s = expires_s};
	learn_grant_info gi;
	bool created;
	CHECKF(learn_live_grant(s->l, &r, &gi, &created, err, sizeof err) == 0, "grant on %s: %s", name, err);
	return gi.id;
}

static int feed(server *s, uint64_t id, int n) {
	int ok = 0;
	for (int i = 0; i < n; i++) {
		learn_example *e = train_ex(i);
		learn_grant_info gi;
		int64_t left;
		if (e && learn_live_example(s->l, id, e, &gi, &left, err, sizeof err) == 0) ok++;
		else learn_example_free(e);
	}
	return ok;
}

static double held_out(const model_lora *lora) {
	double nll;
	int64_t cnt;
	if (learn_eval(M, lora, NULL, (const learn_example *const *)HE, NHE, &nll, &cnt, err, sizeof err) || !cnt) return -1;
	return nll / (double)cnt;
}

static void test_grants(void) {
	t_case("stories260K grants");
	server s;
	if (!serve(&s, 0.5)) return;
	learn_live_ledger_of(s.l, &LG);
	CHECK(LG.sequence == 1 && LG.n_grants == 0 && LG.revision == 0);
	// bad grants
	learn_grant_info gi;
	bool created;
	learn_grant_req bad[] = {{.adapter = "a b", .max_steps = 1, .max_tokens = 10}, {.adapter = "x", .max_steps = 0, .max_tokens = 10},
			       {.adapter = "x", .max_steps = 1, .max_tokens = 1}, {.adapter = "x", .max_steps = 1, .max_tokens = 10, .rank = 9999},
			       {.adapter = "x", .max_steps = 1, .max_tokens = 10, .lr = 5}};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(learn_live_grant(s.l, &bad[i], &gi, &created, err, sizeof err) == LANES_EINVAL);
	CHECK(!model_loras_has(s.reg, "x"));

	// a grant makes the adapter, served at once as version 0 (B = 0: the base's tokens)
	const double before = held_out(NULL);
	learn_grant_req r = {.adapter = "p", .max_steps = 6, .max_tokens = 1 << 30, .lr = 0.02f, .rank = 4, .batch = 4};
	CHECKF(learn_live_grant(s.l, &r, &gi, &created, err, sizeof err) == 0 && created, "grant: %s", err);
	const uint64_t p = gi.id;
	CHECK(model_loras_has(s.reg, "p") && reg_version(s.reg, "p") == 1);
	CHECK(learn_live_grant(s.l, &r, &gi, &created, err, sizeof err) == LANES_EBUSY && strstr(err, "open grant"));
	CHECK(feed(&s, p, 40) == 40);
	const learn_grant_info *g = wait_grant(s.l, p, 0);
	CHECKF(g && g->state == LEARN_GRANT_EXHAUSTED && g->steps_done == 6 && g->version == 7 && g->queued == 0 && g->tokens_used > 0,
	       "grant p: %s after %lld steps", g ? learn_grant_state_name[g->state] : "missing", g ? (long long)g->steps_done : -1);
	CHECK(g && isfinite(g->last_loss) && LG.committed_steps == 6 && LG.tokens_trained == g->tokens_used && LG.examples == 40);
	CHECK(reg_version(s.reg, "p") == 7); // version 0 and one per step
	// the examples after the last step go unused; a grant that ended takes none
	learn_example *e = train_ex(0);
	int64_t left;
	CHECK(learn_live_example(s.l, p, e, &gi, &left, err, sizeof err) == LANES_EBUSY && strstr(err, "exhausted"));
	learn_example_free(e);
	e = train_ex(0);
	CHECK(learn_live_example(s.l, 999, e, &gi, &left, err, sizeof err) == LANES_ENOTFOUND);
	learn_example_free(e);
	// the last version lowers the held-out loss
	const model_lora *pl = NULL;
	float scale;
	CHECK(model_loras_bind(s.reg, "p", -1, &pl, &scale, NULL) == 0);
	const double after = pl ? held_out(pl) : -1;
	printf("learning: 6 steps through the rounds: held-out loss %.4f -> %.4f\n", before, after);
	CHECKF(after > 0 && after < before, "held-out loss %.4f -> %.4f", before, after);

	// a token cap: examples beyond what is left are refused, and the grant ends when its tokens are used
	learn_grant_req capped = {.adapter = "p", .max_steps = 100, .max_tokens = learn_example_tokens(TR[0]) + learn_example_tokens(TR[1]), .lr = 0.01f};
	CHECKF(learn_live_grant(s.l, &capped, &gi, &created, err, sizeof err) == 0 && !created, "grant: %s", err);
	const uint64_t c = gi.id;
	CHECK(feed(&s, c, 1) == 1);
	e = train_ex(2);
	CHECK(learn_example_tokens(e) > learn_example_tokens(TR[1]) ? learn_live_example(s.l, c, e, &gi, &left, err, sizeof err) == LANES_ELIMIT : true);
	learn_example_free(e);
	e = train_ex(1);
	CHECK(learn_live_example(s.l, c, e, &gi, &left, err, sizeof err) == 0 && left == 0);
	g = wait_grant(s.l, c, 0);
	CHECKF(g && g->state == LEARN_GRANT_EXHAUSTED && g->tokens_used == capped.max_tokens, "capped: %s, %lld tokens",
	       g ? learn_grant_state_name[g->state] : "missing", g ? (long long)g->tokens_used : -1);

	// the sequence moves only when something changed: none for a 512-token request
	const uint64_t q = open_grant(&s, "p", 5, 0, 0);
	for (int i = 0; i < 60000 && !grant_in(s.l, q); i++) usleep(1000);
	const uint64_t seq = LG.sequence;
	lane_req *rq = submit(s.h, pl, 3, 512);
	result res;
	if (rq) collect(rq, &res);
	lane_req_free(rq);
	CHECK(rq && res.terminals == 1 && res.n == 512);
	learn_live_ledger_of(s.l, &LG);
	CHECKF(LG.sequence == seq, "the ledger was published %llu times during a request with no learning", (unsigned long long)(LG.sequence - seq));
	CHECK(learn_live_revoke(s.l, q, &gi, err, sizeof err) == 0 && gi.state == LEARN_GRANT_REVOKED);
	CHECK(learn_live_revoke(s.l, q, &gi, err, sizeof err) == LANES_EBUSY);
	g = wait_grant(s.l, q, 0);
	CHECKF(g && g->state == LEARN_GRANT_REVOKED && LG.sequence == seq + 1, "revoked: sequence %llu -> %llu", (unsigned long long)seq,
	       (unsigned long long)LG.sequence);

	// saving writes the committed weights: loaded back, the held-out loss is the same bits
	// saves take a file name in a folder, never a path
	const int dfd = open(t_tmp(), O_RDONLY | O_DIRECTORY);
	CHECK(learn_live_save(s.l, "p", dfd, "../x.gguf", NULL, NULL, err, sizeof err) == LANES_EINVAL && strstr(err, "not a file name"));
	CHECK(learn_live_save(s.l, "p", dfd, "/tmp/x.gguf", NULL, NULL, err, sizeof err) == LANES_EINVAL);
	CHECK(learn_live_save(s.l, "p", dfd, ".hidden", NULL, NULL, err, sizeof err) == LANES_EINVAL);
	CHECK(learn_live_save(s.l, "nope", dfd, "x.gguf", NULL, NULL, err, sizeof err) == LANES_ENOTFOUND);
	model_lora_free(pl);
	unserve(&s);
	close(dfd);
}

// Saving: done once, from the learn thread.
typedef struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int calls, rc;
	int64_t version;
} saved;

static void on_saved(void *arg, int rc, const char *msg, int64_t version) {
	saved *sv = arg;
	pthread_mutex_lock(&sv->mu);
	sv->calls++;
	sv->rc = rc;
	sv->version = version;
	pthread_cond_signal(&sv->cv);
	pthread_mutex_unlock(&sv->mu);
}

static void test_save(void) {
	t_case("saving");
	server s;
	if (!serve(&s, 0.5)) return;
	const uint64_t id = open_grant(&s, "w", 3, 0, 4);
	feed(&s, id, 12);
	const learn_grant_info *g = wait_grant(s.l, id, 0);
	CHECK(g && g->state == LEARN_GRANT_EXHAUSTED && g->version == 4);
	char path[512], file[64];
	snprintf(file, sizeof file, "lanes-learning-%d.gguf", (int)getpid());
	snprintf(path, sizeof path, "%s/%s", t_tmp(), file);
	const int dfd = open(t_tmp(), O_RDONLY | O_DIRECTORY);
	saved sv = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
	CHECKF(learn_live_save(s.l, "w", dfd, file, on_saved, &sv, err, sizeof err) == 0, "save: %s", err);
	pthread_mutex_lock(&sv.mu);
	while (!sv.calls) pthread_cond_wait(&sv.cv, &sv.mu);
	pthread_mutex_unlock(&sv.mu);
	CHECK(sv.calls == 1 && sv.rc == 0 && sv.version == 4);
	const model_lora *served = NULL;
	model_lora *loaded = NULL;
	float scale;
	CHECK(model_loras_bind(s.reg, "w", -1, &served, &scale, NULL) == 0);
	CHECKF(model_lora_load(&loaded, M, path, err, sizeof err) == 0, "load: %s", err);
	if (served && loaded) {
		const double a = held_out(served), b = held_out(loaded);
		CHECKF(a == b && a > 0, "held-out loss %.9f served, %.9f from the file", a, b);
	}
	model_lora_free(served);
	model_lora_free(loaded);
	unserve(&s);
	unlink(path);
	close(dfd);
}

// ---- exactness beside training ---------------------------------------------------------------
static void test_beside(void) {
	t_case("tokens beside training");
	server s;
	if (!serve(&s, 0.5)) return;
	// a version made before, bound by requests on both sides
	const uint64_t first = open_grant(&s, "v", 2, 0, 4);
	feed(&s, first, 8);
	wait_grant(s.l, first, 0);
	const model_lora *v2 = NULL;
	float scale;
	CHECK(model_loras_bind(s.reg, "v", -1, &v2, &scale, NULL) == 0);
	enum { N = 8 };
	result alone[N], beside[N];
	for (int i = 0; i < N; i++) {
		lane_req *r = submit(s.h, i % 2 ? v2 : NULL, 100 + i, 64);
		if (r) collect(r, &alone[i]);
		lane_req_free(r);
	}
	// then with a grant training a new adapter: its version 0 is bound before any commit
	const uint64_t id = open_grant(&s, "t", 1000, 0, 8);
	const model_lora *t0 = NULL;
	CHECK(model_loras_bind(s.reg, "t", -1, &t0, &scale, NULL) == 0);
	// a request that runs until a step has committed (then cancelled), its first token in before
	// t has an example: a commit seen while it still runs happened beside it
	lane_req *holder = submit(s.h, NULL, 99, 1900);
	lane_event ev;
	CHECK(holder && lane_next(holder, &ev, 60 * 1000000) == 1 && ev.kind == LANE_EV_TOKEN);
	learn_live_ledger_of(s.l, &LG);
	const int64_t steps0 = LG.committed_steps;
	lane_req *r[N + 1];
	for (int i = 0; i < N; i++) r[i] = submit(s.h, i % 2 ? v2 : NULL, 100 + i, 64);
	r[N] = submit(s.h, t0, 100, 64); // version 0 of t: B = 0, the base's tokens
	CHECK(feed(&s, id, 48) == 48);
	for (int i = 0; i < N; i++) {
		if (r[i]) collect(r[i], &beside[i]);
		lane_req_free(r[i]);
		CHECKF(beside[i].terminals == 1 && !strcmp(alone[i].sha, beside[i].sha), "request %d: %s alone, %s beside training", i,
		       alone[i].sha, beside[i].sha);
	}
	result zero;
	if (r[N]) collect(r[N], &zero);
	lane_req_free(r[N]);
	for (int w = 0; w < 6000; w++) {
		learn_live_ledger_of(s.l, &LG);
		if (LG.committed_steps > steps0) break;
		usleep(10000);
	}
	if (holder) {
		lane_cancel(holder);
		result held;
		collect(holder, &held);
		CHECKF(held.terminals == 1 && held.end == LANE_EV_CANCELLED, "the request beside training ended (%d) before a step committed",
		       (int)held.end);
	}
	lane_req_free(holder);
	CHECKF(!strcmp(zero.sha, alone[0].sha), "version 0 of a new adapter: %s, the base: %s", zero.sha, alone[0].sha);
	CHECKF(LG.committed_steps > steps0, "no step was committed while the requests ran (%lld)", (long long)LG.committed_steps);
	printf("beside training: %d requests bit for bit while %lld steps committed\n", N + 1, (long long)(LG.committed_steps - steps0));
	// each version keys the prefix cache on its own: a prompt cached under version 0 is not
	// reused by the last one
	learn_live_revoke(s.l, id, &(learn_grant_info){0}, err, sizeof err);
	wait_grant(s.l, id, 0);
	const model_lora *tn = NULL;
	CHECK(model_loras_bind(s.reg, "t", -1, &tn, &scale, NULL) == 0 && tn && model_lora_id(tn) != model_lora_id(t0));
	result cached0, cachedn, fresh;
	run1(s.h, t0, 500, 48, &cached0);
	run1(s.h, tn, 500, 48, &cachedn);
	lane_background none = {0};
	lane_host *h = host_with(&none, 2);
	if (h) run1(h, tn, 500, 48, &fresh);
	lane_host_free(h);
	CHECKF(h && strcmp(cached0.sha, cachedn.sha) && !strcmp(cachedn.sha, fresh.sha), "the last version: %s after version 0's prompt, %s alone",
	       cachedn.sha, fresh.sha);
	// the registry goes last: the versions held here are dropped first
	model_lora_free(v2);
	model_lora_free(t0);
	model_lora_free(tn);
	unserve(&s);
}

// ---- custody ------------------------------------------------------------------------------------
// Requests running through it all end with exactly one terminal event each.
static void requests_end(lane_req **r, int n) {
	for (int i = 0; i < n; i++) {
		result res;
		if (r[i]) collect(r[i], &res);
		lane_req_free(r[i]);
		CHECKF(r[i] && res.terminals == 1, "request %d: %d terminal events", i, r[i] ? res.terminals : -1);
	}
}

static void test_custody(void) {
	t_case("custody");
	server s;
	if (!serve(&s, 0.5)) return;
	lane_req *r[4];
	// revoked during a step: the step is dropped, its adapter keeps the versions committed
	uint64_t id = open_grant(&s, "r", 1000, 0, 4);
	feed(&s, id, 48);
	const learn_grant_info *g = wait_grant(s.l, id, 2);
	const int64_t aborted = LG.aborted_steps;
	for (int i = 0; i < 4; i++) r[i] = submit(s.h, NULL, 200 + i, 32);
	learn_grant_info gi;
	CHECK(learn_live_revoke(s.l, id, &gi, err, sizeof err) == 0);
	requests_end(r, 4);
	g = wait_grant(s.l, id, 0);
	CHECKF(g && g->state == LEARN_GRANT_REVOKED && reg_version(s.reg, "r") == 1 + g->steps_done && g->queued == 0,
	       "revoked: %s, %lld steps, registry version %u", g ? learn_grant_state_name[g->state] : "missing", g ? (long long)g->steps_done : -1,
	       reg_version(s.reg, "r"));
	CHECKF(LG.aborted_steps == aborted + 1, "steps dropped: %lld -> %lld", (long long)aborted, (long long)LG.aborted_steps);
	usleep(20000);
	CHECK(g && reg_version(s.reg, "r") == 1 + g->steps_done);

	// expired: it stops at the next boundary, even with the engine idle
	id = open_grant(&s, "r", 1000, 0.2, 0);
	g = wait_grant(s.l, id, 0);
	CHECKF(g && g->state == LEARN_GRANT_EXPIRED && g->expires_at > 0, "idle grant: %s", g ? learn_grant_state_name[g->state] : "missing");
	learn_example *e = train_ex(0);
	int64_t left;
	CHECK(learn_live_example(s.l, id, e, &gi, &left, err, sizeof err) == LANES_EBUSY);
	learn_example_free(e);
	const uint32_t v_before = reg_version(s.reg, "r");
	id = open_grant(&s, "r", 1000, 0.3, 0);
	feed(&s, id, 48);
	g = wait_grant(s.l, id, 0);
	CHECKF(g && g->state == LEARN_GRANT_EXPIRED && reg_version(s.reg, "r") == v_before + g->steps_done, "training grant: %s",
	       g ? learn_grant_state_name[g->state] : "missing");

	// an allocation failing during a step (at its start, in a piece's memory, at its commit): the
	// grant fails, no partial commit
	for (int k = 0; k < 4; k++) {
		id = open_grant(&s, "f", 1000, 0, 4);
		feed(&s, id, 48);
		g = wait_grant(s.l, id, 1);
		for (int i = 0; i < 4; i++) r[i] = submit(s.h, NULL, 300 + i, 24);
		learn_test_fail_alloc(k);
		g = wait_grant(s.l, id, 0);
		learn_test_fail_alloc(-1);
		requests_end(r, 4);
		CHECKF(g && g->state == LEARN_GRANT_FAILED && strstr(g->reason, "out of memory") && reg_version(s.reg, "f") == 1 + g->steps_done,
		       "allocation %d: %s (%s), %lld steps, version %u", k, g ? learn_grant_state_name[g->state] : "missing", g ? g->reason : "",
		       g ? (long long)g->steps_done : -1, reg_version(s.reg, "f"));
		// unloaded: the next grant on the name makes a new adapter
		model_loras_remove(s.reg, "f", &(bool){false});
	}

	// halted during training: every grant ends halted, every request once, nothing partial
	id = open_grant(&s, "h", 1000, 0, 4);
	feed(&s, id, 48);
	wait_grant(s.l, id, 1);
	for (int i = 0; i < 4; i++) r[i] = submit(s.h, NULL, 400 + i, 256);
	lane_host_halt(s.h, "a test halt");
	requests_end(r, 4);
	g = wait_grant(s.l, id, 0);
	CHECKF(g && g->state == LEARN_GRANT_HALTED && reg_version(s.reg, "h") == 1 + g->steps_done, "halted: %s",
	       g ? learn_grant_state_name[g->state] : "missing");
	for (int i = 0; i < LG.n_grants; i++) CHECK(LG.grants[i].state != LEARN_GRANT_ACTIVE);
	learn_grant_req again = {.adapter = "h", .max_steps = 1, .max_tokens = 100};
	bool created;
	CHECK(learn_live_grant(s.l, &again, &gi, &created, err, sizeof err) == LANES_ECANCELLED);
	e = train_ex(0);
	CHECK(learn_live_example(s.l, id, e, &gi, &left, err, sizeof err) != 0);
	learn_example_free(e);
	unserve(&s);
}

int main(void) {
	if (cli_env_apply()) return 2;
	char path[512];
	snprintf(path, sizeof path, "%s/models/stories260K.gguf", t_shared());
	CHECKF(model_load(&M, path, err, sizeof err) == 0, "%s", err);
	CHECK(M && tok_vocab_load(&V, model_gguf(M), err, sizeof err) == 0);
	if (!M || !V) T_DONE("learning");
	NTR = t_read_stories(V, "tests/data/learn/stories-train.jsonl", 48, 64, TR);
	NHE = t_read_stories(V, "tests/data/learn/stories-held.jsonl", 8, 64, HE);
	CHECKF(NTR == 48 && NHE == 8, "stories: %d and %d", NTR, NHE);
	test_hook();
	test_grants();
	test_save();
	test_beside();
	test_custody();
	for (int i = 0; i < NTR; i++) learn_example_free(TR[i]);
	for (int i = 0; i < NHE; i++) learn_example_free(HE[i]);
	tok_vocab_free(V);
	model_free(M);
	T_DONE("learning");
}
