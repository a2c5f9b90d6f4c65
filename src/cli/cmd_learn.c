// cli: `lanes learn -m MODEL --data FILE.jsonl -o ADAPTER.gguf [--rank R] [--steps N] ...` —
// trains a LoRA adapter offline through the same jobs, steps and commits a server runs, with a
// progress line per step (step, loss, tokens/s), the held-out loss before and after (--eval),
// and the adapter saved as a GGUF LoRA file.
#include "cli/cli.h"
#include "learn/learn.h"
#include "plan/plan.h"
#include "template/template.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	learn_example **ex;
	int64_t n, cap;
} ex_list;

static void ex_list_free(ex_list *l) {
	for (int64_t i = 0; i < l->n; i++) learn_example_free(l->ex[i]);
	free(l->ex);
	*l = (ex_list){0};
}

typedef struct {
	tok_vocab *voc;
	chat_tmpl chat;     // loaded at the first conversation
	bool chat_loaded;
	int64_t max_tokens;
} ex_ctx;

// The model's chat template (ChatML when it has none or it does not compile), as the server picks it.
static int chat_template(ex_ctx *c) {
	char err[512];
	if (chat_load(&c->chat, c->voc, NULL, err, sizeof err)) {
		cli_err("%s", err);
		return -1;
	}
	c->chat_loaded = true;
	return 0;
}

// One JSONL line into an example, cut to max_tokens; *e NULL when nothing is left to learn.
static int line_example(ex_ctx *c, const char *path, int64_t lineno, const char *line, learn_example **e) {
	*e = NULL;
	char err[512];
	json_error_t je;
	json_t *o = json_loads(line, 0, &je);
	int rc = 0;
	if (!json_is_object(o)) {
		cli_err("%s:%lld: %s", path, (long long)lineno, o ? "a line is a JSON object" : je.text);
		json_decref(o);
		return -1;
	}
	json_t *msgs = json_object_get(o, "messages"), *p = json_object_get(o, "prompt"), *cpl = json_object_get(o, "completion");
	if (msgs) {
		if (!c->chat_loaded && chat_template(c)) rc = -1;
		else if (learn_example_chat(e, &c->chat, msgs, 0, err, sizeof err)) rc = -1;
	} else if (json_is_string(p) && json_is_string(cpl)) {
		if (learn_example_text(e, c->voc, json_string_value(p), json_string_value(cpl), 0, err, sizeof err)) rc = -1;
	} else {
		snprintf(err, sizeof err, "a line holds \"messages\", or \"prompt\" and \"completion\" strings");
		rc = -1;
	}
	json_decref(o);
	if (rc) {
		cli_err("%s:%lld: %s", path, (long long)lineno, err);
		return -1;
	}
	const int64_t n = learn_example_tokens(*e);
	if (n <= c->max_tokens) return 0;
	// cut to the first max_tokens tokens
	int32_t *ids = malloc((size_t)c->max_tokens * sizeof *ids);
	bool *fl = malloc((size_t)c->max_tokens);
	learn_example *cut = NULL;
	if (ids && fl) {
		memcpy(ids, learn_example_ids_of(*e), (size_t)c->max_tokens * sizeof *ids);
		for (int64_t i = 0; i < c->max_tokens; i++) fl[i] = learn_example_is_learned(*e, i);
		if (learn_example_ids(&cut, ids, fl, c->max_tokens, err, sizeof err))
			LOG_WARN("learn", "%s:%lld: nothing to learn in its first %lld tokens: left out", path, (long long)lineno,
				 (long long)c->max_tokens);
	}
	free(ids);
	free(fl);
	learn_example_free(*e);
	*e = cut;
	return 0;
}

static int read_examples(ex_ctx *c, const char *path, ex_list *out) {
	size_t len;
	char *text = cli_read_file(path, &len);
	if (!text) {
		cli_err("%s: cannot read it", path);
		return -1;
	}
	int rc = 0;
	int64_t lineno = 0;
	for (char *line = text, *next; line && *line && !rc; line = next) {
		next = strchr(line, '\n');
		if (next) *next++ = 0;
		lineno++;
		if (!line[strspn(line, " \t\r")]) continue;
		learn_example *e;
		if ((rc = line_example(c, path, lineno, line, &e)) || !e) continue;
		if (out->n == out->cap) {
			int64_t cap = out->cap ? out->cap * 2 : 64;
			learn_example **nx = realloc(out->ex, (size_t)cap * sizeof *nx);
			if (!nx) {
				learn_example_free(e);
				cli_err("out of memory");
				rc = -1;
				break;
			}
			out->ex = nx, out->cap = cap;
		}
		out->ex[out->n++] = e;
	}
	free(text);
	if (!rc && !out->n) {
		cli_err("%s: no examples", path);
		rc = -1;
	}
	return rc;
}

// The mean held-out loss through the inference path, or -1 after printing the error.
static double held_out(const model *m, const model_lora *lora, base_pool *pool, const ex_list *ev, int64_t *count) {
	char err[512];
	double nll;
	if (learn_eval(m, lora, pool, (const learn_example *const *)ev->ex, ev->n, &nll, count, err, sizeof err)) {
		cli_err("%s", err);
		return -1;
	}
	return *count ? nll / (double)*count : 0.0;
}

// The MTP sequences of examples [lo, hi) of l (learn_mtp_seqs_of); NULL after printing the error.
static learn_mtp_seq **mtp_seqs(const cli_settings *s, const model *m, base_pool *pool, const ex_list *l, int64_t lo, int64_t hi,
				int64_t *count) {
	char err[512];
	learn_mtp_seq **out;
	// a shard's sequences draw as the whole list's would: numbered from their place in it
	int64_t before = 0;
	for (int64_t i = 0; i < lo; i++) before += s->mtp_gen ? (learn_example_tokens(l->ex[i]) + LEARN_MTP_STRIDE - 1) / LEARN_MTP_STRIDE : 1;
	if (!learn_mtp_seqs_of(&out, count, m, pool, (const learn_example *const *)l->ex + lo, hi - lo, s->mtp_gen, s->max_tokens,
			       (float)s->temp, (uint64_t)s->seed + (uint64_t)before, err, sizeof err))
		return out;
	cli_err("%s", err);
	return NULL;
}

// The end of the shard of l from lo: the examples whose sequences' states take at most budget
// bytes together (one at least).
static int64_t shard_end(const cli_settings *s, const model *m, const ex_list *l, int64_t lo, uint64_t budget) {
	const uint64_t per_token = ((uint64_t)model_hparams_of(m)->n_embd + 18) * 4;
	uint64_t bytes = 0;
	int64_t hi = lo;
	for (; hi < l->n; hi++) {
		const int64_t n = learn_example_tokens(l->ex[hi]), len = s->mtp_gen ? LEARN_MTP_WINDOW + 1 + s->mtp_gen : n;
		const int64_t seqs = s->mtp_gen ? (n + LEARN_MTP_STRIDE - 1) / LEARN_MTP_STRIDE : 1;
		const uint64_t b = (uint64_t)seqs * (uint64_t)(len < s->max_tokens ? len : s->max_tokens) * per_token;
		if (hi > lo && bytes + b > budget) break;
		bytes += b;
	}
	return hi;
}

static void mtp_seqs_free(learn_mtp_seq **q, int64_t n) {
	for (int64_t i = 0; q && i < n; i++) learn_mtp_seq_free(q[i]);
	free(q);
}

// lanes learn --mtp: the head trained on the model's choices, written for --draft-head.
static int learn_mtp_cli(const cli_settings *s, const model *m, base_pool *pool, const ex_list *train, const ex_list *ev) {
	char err[512];
	int rc = 1;
	learn_mtp *h = NULL;
	learn_mtp_seq **tr = NULL, **te = NULL, **batch = NULL;
	int64_t *order = NULL, ntr = 0, nte = 0;
	const uint64_t t0 = base_now_us();
	uint64_t budget;
	if (plan_parse_size(s->mtp_memory, &budget) || !budget) {
		cli_err("--mtp-memory: '%s' is not a size (e.g. 2GiB, 500MB)", s->mtp_memory);
		return 2;
	}
	if (learn_mtp_new(&h, m, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	// the training examples in shards whose states fit the budget: one shard is made once
	int64_t lo = 0, hi = shard_end(s, m, train, 0, budget), shards = 0;
	for (int64_t a = 0; a < train->n; a = shard_end(s, m, train, a, budget)) shards++;
	if (!(tr = mtp_seqs(s, m, pool, train, lo, hi, &ntr)) || (ev->n && !(te = mtp_seqs(s, m, pool, ev, 0, ev->n, &nte)))) goto out;
	int64_t rows = 0;
	for (int64_t i = 0; i < ntr; i++) rows += learn_mtp_seq_tokens(tr[i]) - 1;
	printf("learn --mtp: %lld sequences (%lld head rows, %s) in %.1f s; head of %lld parameters (%.2f MiB, optimizer %.2f MiB)\n",
	       (long long)ntr, (long long)rows, s->mtp_gen ? "the model's continuations" : "the examples' text",
	       (double)(base_now_us() - t0) / 1e6, (long long)learn_mtp_params(h), learn_mtp_params(h) * 4 / 1048576.0,
	       learn_mtp_params(h) * 8 / 1048576.0);
	if (shards > 1)
		printf("learn --mtp: the examples' states exceed --mtp-memory %s: %lld shards, each run through the model again at every pass (the first: examples 1-%lld)\n",
		       s->mtp_memory, (long long)shards, (long long)hi);
	double acc0[2] = {0, 0}, loss0 = 0, acc1[2], loss1;
	if (te && learn_mtp_eval(h, pool, (const learn_mtp_seq *const *)te, (int32_t)nte, acc0, &loss0, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	learn_opts o;
	learn_opts_default(&o);
	o.lr = (float)s->lr, o.weight_decay = (float)s->weight_decay, o.clip = (float)s->clip;
	// room for the largest shard's order
	int64_t most = 0;
	for (int64_t a = 0, b; a < train->n; a = b) {
		b = shard_end(s, m, train, a, budget);
		int64_t k = 0;
		for (int64_t i = a; i < b; i++) k += s->mtp_gen ? (learn_example_tokens(train->ex[i]) + LEARN_MTP_STRIDE - 1) / LEARN_MTP_STRIDE : 1;
		most = k > most ? k : most;
	}
	order = malloc((size_t)(most > ntr ? most : ntr) * sizeof *order);
	batch = malloc((size_t)s->batch * sizeof *batch);
	if (!order || !batch) {
		cli_err("out of memory");
		goto out;
	}
	uint64_t rng = splitmix64((uint64_t)s->seed ^ 0x6d7470ull);
	int64_t next = INT64_MAX, tokens = 0; // shuffled at the first take
	bool passed = false;                  // the shard's sequences have all been taken
	const uint64_t t1 = base_now_us();
	for (int64_t step = 1; step <= s->steps; step++) {
		// the next shard's sequences in place of these, between steps (a batch holds them)
		if (passed && shards > 1) {
			mtp_seqs_free(tr, ntr);
			tr = NULL, ntr = 0;
			lo = hi == train->n ? 0 : hi;
			hi = shard_end(s, m, train, lo, budget);
			if (!(tr = mtp_seqs(s, m, pool, train, lo, hi, &ntr))) goto out;
			next = INT64_MAX;
		}
		passed = false;
		for (int64_t b = 0; b < s->batch; b++) {
			if (next >= ntr) {
				for (int64_t i = 0; i < ntr; i++) order[i] = i;
				for (int64_t i = ntr - 1; i > 0; i--) {
					const int64_t k = (int64_t)(splitmix64(rng++) % (uint64_t)(i + 1)), t = order[i];
					order[i] = order[k], order[k] = t;
				}
				next = 0;
			}
			batch[b] = tr[order[next++]];
			passed |= next == ntr;
		}
		learn_step_info info;
		if (learn_mtp_step(h, pool, (const learn_mtp_seq *const *)batch, (int32_t)s->batch, &o, &info, err, sizeof err)) {
			cli_err("%s", err);
			goto out;
		}
		tokens += info.learned;
		if (step == 1 || step == s->steps || step % 10 == 0) {
			const double all = (double)(base_now_us() - t1) / 1e6;
			printf("step %lld/%lld  loss %.4f  grad %.3f  (%.0f rows/s)\n", (long long)step, (long long)s->steps, info.loss, info.grad_norm,
			       all > 0 ? (double)tokens / all : 0.0);
			fflush(stdout);
		}
	}
	const double secs = (double)(base_now_us() - t1) / 1e6;
	if (learn_mtp_save(h, s->output, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	printf("learn --mtp: %lld steps in %.1f s; head written to %s (lanes serve -m MODEL --draft-head %s)\n", (long long)s->steps, secs,
	       s->output, s->output);
	if (te) {
		if (learn_mtp_eval(h, pool, (const learn_mtp_seq *const *)te, (int32_t)nte, acc1, &loss1, err, sizeof err)) {
			cli_err("%s", err);
			goto out;
		}
		printf("held-out: the head's first draft is the model's choice %.1f%% -> %.1f%% of the time, its second (chained) %.1f%% -> %.1f%%, "
		       "loss %.4f -> %.4f\n", 100 * acc0[0], 100 * acc1[0], 100 * acc0[1], 100 * acc1[1], loss0, loss1);
	}
	rc = 0;
out:
	free(order);
	free(batch);
	mtp_seqs_free(tr, ntr);
	mtp_seqs_free(te, nte);
	learn_mtp_free(h);
	return rc;
}

int cmd_learn(const cli_settings *s) {
	char err[512];
	int rc = 1;
	model *m = NULL;
	base_pool *pool = NULL;
	learn_adapter *a = NULL;
	learn_job *j = NULL;
	model_lora *ver = NULL;
	ex_ctx c = {.max_tokens = s->max_tokens};
	ex_list train = {0}, ev = {0};
	int64_t *order = NULL;
	const int ti = gguf_ttype_by_name(s->type);
	if (ti != GGUF_T_F32 && ti != GGUF_T_F16 && ti != GGUF_T_BF16 && ti != GGUF_T_Q8_0) {
		rc = cli_usage_error(s, "--type is F32, F16, BF16 or Q8_0, not '%s'", s->type);
		goto out;
	}
	if (cli_load_model(s->model, &m, &c.voc) || cli_threads(s->threads, &pool)) goto out;
	if (read_examples(&c, s->data_file, &train) || (s->eval_file && read_examples(&c, s->eval_file, &ev))) goto out;
	if (s->mtp) {
		rc = learn_mtp_cli(s, m, pool, &train, &ev);
		goto out;
	}
	const learn_adapter_opts ao = {.rank = (int32_t)s->lora_rank, .alpha = (float)s->alpha, .seed = (uint64_t)s->seed};
	if (s->from_adapter ? learn_adapter_load(&a, m, s->from_adapter, err, sizeof err) : learn_adapter_new(&a, m, &ao, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	learn_opts o;
	learn_opts_default(&o);
	o.lr = (float)s->lr, o.weight_decay = (float)s->weight_decay, o.clip = (float)s->clip;
	o.batch = (int32_t)s->batch, o.piece = (int32_t)s->piece, o.max_tokens = s->max_tokens;
	if (learn_job_new(&j, a, &o, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	learn_adapter_info ai;
	learn_adapter_info_of(a, &ai);
	int64_t learned = 0;
	for (int64_t i = 0; i < train.n; i++) learned += learn_example_learned(train.ex[i]);
	printf("learn: %lld examples (%lld tokens learned), adapter rank %d alpha %g on %d weights (%s): %lld parameters, %.2f MiB, optimizer %.2f MiB\n",
	       (long long)train.n, (long long)learned, ai.rank, (double)ai.alpha, ai.n_pairs, ai.targets, (long long)ai.params,
	       ai.param_bytes / 1048576.0, ai.optimizer_bytes / 1048576.0);
	double before = 0, after = 0;
	int64_t ev_count = 0;
	if (ev.n) {
		if (s->from_adapter && learn_adapter_lora(a, &ver, err, sizeof err)) {
			cli_err("%s", err);
			goto out;
		}
		if ((before = held_out(m, ver, pool, &ev, &ev_count)) < 0) goto out;
		model_lora_free(ver);
		ver = NULL;
	}
	// the examples in a shuffled order per pass, from the seed
	if (!(order = malloc((size_t)train.n * sizeof *order))) {
		cli_err("out of memory");
		goto out;
	}
	uint64_t rng = splitmix64((uint64_t)s->seed ^ 0x6c6561726eull);
	int64_t next = train.n, tokens = 0;
	const uint64_t t0 = base_now_us();
	for (int64_t step = 1; step <= s->steps; step++) {
		for (int64_t b = 0; b < s->batch; b++) {
			if (next == train.n) {
				for (int64_t i = 0; i < train.n; i++) order[i] = i;
				for (int64_t i = train.n - 1; i > 0; i--) {
					const int64_t k = (int64_t)(splitmix64(rng++) % (uint64_t)(i + 1)), t = order[i];
					order[i] = order[k], order[k] = t;
				}
				next = 0;
			}
			if (learn_job_add(j, train.ex[order[next++]], err, sizeof err)) {
				cli_err("%s", err);
				goto out;
			}
		}
		const uint64_t ts = base_now_us();
		learn_step_info info;
		if (learn_step_run(j, pool, INFINITY, NULL, err, sizeof err) || learn_commit(j, NULL, &info, err, sizeof err)) {
			cli_err("%s", err);
			goto out;
		}
		tokens += info.tokens;
		const double dt = (double)(base_now_us() - ts) / 1e6, all = (double)(base_now_us() - t0) / 1e6;
		printf("step %lld/%lld  loss %.4f  grad %.3f  tokens %lld  %.0f tok/s  (%.0f tok/s overall)\n", (long long)step,
		       (long long)s->steps, info.loss, info.grad_norm, (long long)info.tokens, dt > 0 ? (double)info.tokens / dt : 0.0,
		       all > 0 ? (double)tokens / all : 0.0);
		fflush(stdout);
	}
	const double secs = (double)(base_now_us() - t0) / 1e6;
	if (learn_adapter_save(a, s->output, (uint32_t)ti, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	printf("learn: %lld steps, %lld tokens in %.1f s (%.1f tok/s); adapter written to %s\n", (long long)s->steps, (long long)tokens,
	       secs, secs > 0 ? (double)tokens / secs : 0.0, s->output);
	if (ev.n) {
		if (learn_adapter_lora(a, &ver, err, sizeof err)) {
			cli_err("%s", err);
			goto out;
		}
		if ((after = held_out(m, ver, pool, &ev, &ev_count)) < 0) goto out;
		printf("held-out loss: %.4f -> %.4f (%+.1f%%) over %lld tokens of %lld examples\n", before, after,
		       before > 0 ? 100.0 * (after - before) / before : 0.0, (long long)ev_count, (long long)ev.n);
	}
	rc = 0;
out:
	free(order);
	model_lora_free(ver);
	learn_job_free(j);
	learn_adapter_free(a);
	ex_list_free(&train);
	ex_list_free(&ev);
	chat_free(&c.chat);
	tok_vocab_free(c.voc);
	base_pool_free(pool);
	model_free(m);
	return rc;
}
