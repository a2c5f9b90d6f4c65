// cli: `lanes bench -m MODEL [-p 512] [-n 128] [-r 3] [--threads T] [--json]` — prompt
// processing (P tokens from an empty context in one pass) and generation (N tokens one at a
// time from an empty context), as llama-bench measures them: every repetition's tokens and
// seconds, the spread (min, median, max) and mean and sd over them, and the kernels' own limit
// on one stream's rate (the fastest single-token pass of the bare forward) beside them.
#include "base/base.h"
#include "cli/bench.h"
#include "cli/cli.h"
#include "model/model.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

typedef struct {
	const model *m;
	kv_cache *kv;
	base_pool *pool;
	float *logits;
	model_row *rows;
} bench_ctx;

static int32_t bench_token(const model *m, int64_t i) {
	return (int32_t)(splitmix64((uint64_t)i) % (uint64_t)model_hparams_of(m)->n_vocab);
}

static int fill_depth(bench_ctx *b, int64_t depth);

// Seconds for one pass over n prompt tokens after a context of depth tokens; -1 on error.
static double run_pp(bench_ctx *b, int64_t depth, int64_t n) {
	char err[256];
	if (!depth) kv_seq_clear(b->kv, 0);
	else if (fill_depth(b, depth)) return -1;
	for (int64_t i = 0; i < n; i++) b->rows[i] = (model_row){bench_token(b->m, depth + i), (int32_t)(depth + i), 0, i == n - 1, NULL};
	uint64_t t0 = base_now_ns();
	if (model_forward(b->m, b->kv, b->pool, b->rows, n, b->logits, err, sizeof err)) {
		cli_err("%s", err);
		return -1;
	}
	return (base_now_ns() - t0) / 1e9;
}

// Seconds for n single-token passes of the bare forward; -1 on error. *fastest (may be NULL)
// takes the shortest pass when it is shorter: no stream through the lane host can be faster.
static double run_tg(bench_ctx *b, int64_t n, double *fastest) {
	char err[256];
	kv_seq_clear(b->kv, 0);
	uint64_t t0 = base_now_ns(), prev = t0;
	for (int64_t i = 0; i < n; i++) {
		model_row r = {bench_token(b->m, i), (int32_t)i, 0, true, NULL};
		if (model_forward(b->m, b->kv, b->pool, &r, 1, b->logits, err, sizeof err)) {
			cli_err("%s", err);
			return -1;
		}
		const uint64_t now = base_now_ns();
		if (fastest && (*fastest <= 0 || (now - prev) / 1e9 < *fastest)) *fastest = (now - prev) / 1e9;
		prev = now;
	}
	return (base_now_ns() - t0) / 1e9;
}

static double fill_tps; // tokens/s of the last depth fill

// A context of depth tokens in the KV: filled once, in pieces of 512 (as an agent's prompt
// arrives), and cut back to depth for each later use — filled again for a model with a
// recurrent state, which cannot be cut back. 0, or -1 on error.
static int fill_depth(bench_ctx *b, int64_t depth) {
	char err[256];
	const bool state = model_state_floats(model_hparams_of(b->m)) > 0;
	if (kv_seq_len(b->kv, 0) < depth || (state && kv_seq_len(b->kv, 0) != depth)) {
		const uint64_t f0 = base_now_ns();
		kv_seq_clear(b->kv, 0);
		for (int64_t i0 = 0; i0 < depth; i0 += 512) {
			const int64_t m = depth - i0 < 512 ? depth - i0 : 512;
			for (int64_t i = 0; i < m; i++) b->rows[i] = (model_row){bench_token(b->m, i0 + i), (int32_t)(i0 + i), 0, i == m - 1, NULL};
			if (model_forward(b->m, b->kv, b->pool, b->rows, m, b->logits, err, sizeof err)) {
				cli_err("%s", err);
				return -1;
			}
		}
		fill_tps = depth / ((base_now_ns() - f0) / 1e9);
		LOG_INFO("bench", "filled %lld tokens in pieces of 512: %.2f tok/s", (long long)depth, fill_tps);
	}
	kv_seq_truncate(b->kv, 0, depth);
	return 0;
}

// Seconds for n single-token passes after a context of depth tokens; -1 on error.
static double run_tg_depth(bench_ctx *b, int64_t depth, int64_t n) {
	char err[256];
	if (fill_depth(b, depth)) return -1;
	uint64_t t0 = base_now_ns();
	for (int64_t i = 0; i < n; i++) {
		model_row r = {bench_token(b->m, depth + i), (int32_t)(depth + i), 0, true, NULL};
		if (model_forward(b->m, b->kv, b->pool, &r, 1, b->logits, err, sizeof err)) {
			cli_err("%s", err);
			return -1;
		}
	}
	return (base_now_ns() - t0) / 1e9;
}

static double peak_rss_mib(void) {
	struct rusage ru;
	return getrusage(RUSAGE_SELF, &ru) ? 0 : ru.ru_maxrss / 1024.0;
}

// One repetition's figure: what was counted and timed, and their ratio.
typedef struct {
	int64_t tokens;
	double seconds, tps;
} bench_rep;

// The figures over the repetitions: mean and sd, and the spread.
typedef struct {
	double mean, sd, min, median, max;
} bench_stats;

static int cmp_dbl(const void *a, const void *b) {
	const double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static bench_stats stats_of(const bench_rep *r, int n) {
	bench_stats st = {0};
	double *x = malloc((size_t)n * sizeof *x);
	if (!x || n < 1) {
		free(x);
		return st;
	}
	double s = 0, q = 0;
	for (int i = 0; i < n; i++) s += x[i] = r[i].tps;
	st.mean = s / n;
	for (int i = 0; i < n; i++) q += (x[i] - st.mean) * (x[i] - st.mean);
	st.sd = n > 1 ? sqrt(q / (n - 1)) : 0.0;
	qsort(x, (size_t)n, sizeof *x, cmp_dbl);
	st.min = x[0];
	st.max = x[n - 1];
	st.median = n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
	free(x);
	return st;
}

// {"min", "median", "max", "reps": [{"tokens", "seconds", "tps"}...]}
static json_t *stats_json(const bench_stats *st, const bench_rep *r, int n) {
	json_t *reps = json_array();
	for (int i = 0; reps && i < n; i++)
		json_array_append_new(reps, json_pack("{s:I, s:f, s:f}", "tokens", (json_int_t)r[i].tokens, "seconds", r[i].seconds, "tps", r[i].tps));
	return json_pack("{s:f, s:f, s:f, s:o*}", "min", st->min, "median", st->median, "max", st->max, "reps", reps);
}

// `--concurrent M`: M requests through one lane host; aggregate tokens/s and latencies.
static int bench_concurrent(const model *m, const tok_vocab *voc, const char *path, const bench_lanes_opts *o, bool json) {
	char err[512];
	int32_t M = o->concurrent, lanes = o->lanes, fill = o->fill;
	bench_lanes_result r;
	if (bench_lanes(m, voc, o, &r, err, sizeof err)) {
		cli_err("%s", err);
		return 1;
	}
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	const char *act = tensor_act_name(tensor_kernels_act(model_kernels(m)));
	// the MTP head's acceptance by position in the drafts, as far as it drafted
	char pos[LANE_MAX_DRAFT * 16] = "";
	size_t k = 0;
	for (int j = 0; j < LANE_MAX_DRAFT && r.mtp_at[j] && k < sizeof pos; j++)
		k += (size_t)snprintf(pos + k, sizeof pos - k, json ? "%s%.4f" : "%s%.0f%%", j ? (json ? ", " : " ") : "",
				      (json ? 1.0 : 100.0) * (double)r.mtp_accepted_at[j] / (double)r.mtp_at[j]);
	if (json)
		printf("{\"model\": \"%s\", \"activations\": \"%s\", \"concurrent\": %d, \"lanes\": %d, \"fill\": %d, "
		       "\"tokens\": %d, \"seconds\": %.3f, \"aggregate_tps\": %.2f, \"tg_tps\": %.2f, \"ttft_ms\": %.1f, "
		       "\"itl_p50_ms\": %.2f, \"itl_p99_ms\": %.2f, \"draft_tokens\": %llu, \"draft_accepted\": %llu, "
		       "\"mtp_acceptance_by_position\": [%s]}\n",
		       base, act, M, lanes > 0 ? lanes : M + (fill > 0), fill, r.tokens, r.seconds, r.tps, r.tg_tps, r.ttft_ms,
		       r.itl_p50_ms, r.itl_p99_ms, (unsigned long long)r.drafted, (unsigned long long)r.accepted, pos);
	else
		printf("%s (activations %s): %d concurrent requests%s: %d tokens in %.2f s = %.2f tok/s aggregate; first token "
		       "%.0f ms; inter-token p50 %.1f ms, p99 %.1f ms; drafts %llu/%llu accepted%s%s\n",
		       base, act, M, fill > 0 ? " (and a filling prompt)" : "", r.tokens, r.seconds, r.tps, r.ttft_ms, r.itl_p50_ms,
		       r.itl_p99_ms, (unsigned long long)r.accepted, (unsigned long long)r.drafted, *pos ? "; the MTP head's by position: " : "", pos);
	return 0;
}

int cmd_bench(const cli_settings *set) {
	const char *model_path = set->model, *kv_name = set->kv_type;
	const int64_t n_pp = set->n_prompt, n_tg = set->n_gen, reps = set->reps, threads = set->threads, depth = set->depth;
	const bool json = set->json;
	const enum kv_type kvt = cli_kv_type(kv_name);
	if (set->lora.n && set->concurrent <= 0) return cli_usage_error(set, "--lora goes with --concurrent M");
	if (set->prompt && set->concurrent <= 0) return cli_usage_error(set, "--text goes with --concurrent M");
	char err[512];
	int rc = 1;
	int32_t *text = NULL;
	model *m = NULL, *dm = NULL;
	tok_vocab *voc = NULL;
	bench_ctx b = {0};
	model_lora **loras = NULL;
	model_lora_set all = {0}, one[MODEL_LORA_MAX];
	bench_rep *pp = calloc((size_t)reps, sizeof *pp), *tg = calloc((size_t)reps, sizeof *tg);
	if (!pp || !tg) goto out;
	const uint64_t load_t0 = base_now_us();
	if (cli_load_model_head(model_path, set->draft_head, &m, NULL)) goto out;
	model_set_context(m, (int32_t)(depth + n_pp + n_tg)); // the positions a run uses are its context (Phi 3's factors)
	const double load_s = (double)(base_now_us() - load_t0) / 1e6;
	if (tok_vocab_load(&voc, model_gguf(m), err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	if (set->concurrent > 0) {
		bench_lanes_opts o = {.concurrent = (int32_t)set->concurrent, .lanes = (int32_t)set->lanes, .n_gen = n_tg > 0 ? (int32_t)n_tg : 1,
				      .n_prompt = (int32_t)set->req_prompt, .fill = (int32_t)set->fill,
				      .threads = (int32_t)threads, .kv_type = kvt, .draft = set->draft, .repetitive = set->repetitive,
				      .no_experts = !strcmp(set->experts, "off")};
		if (set->draft_model && cli_load_model(set->draft_model, &dm, NULL)) goto out;
		o.draft_model = dm;
		size_t nt = 0;
		if (set->prompt && tok_encode(voc, set->prompt, strlen(set->prompt), false, false, &text, &nt, err, sizeof err)) {
			cli_err("%s", err);
			goto out;
		}
		if (set->prompt && (nt < 1 || nt > 1 << 20)) {
			cli_err("--text: the text gives %zu tokens", nt);
			goto out;
		}
		o.text = text, o.n_text = (int32_t)nt;
		if (cli_load_loras(m, &set->lora, &all, &loras)) goto out;
		for (int32_t k = 0; k < all.n; k++) one[k] = (model_lora_set){.n = 1, .use = {all.use[k]}};
		o.lora_sets = one;
		o.n_lora_sets = all.n;
		rc = bench_concurrent(m, voc, model_path, &o, json);
		goto out;
	}
	b.m = m;
	const model_hparams *hp = model_hparams_of(m);
	if (cli_threads(threads, &b.pool)) goto out;
	const int64_t ctx = (n_pp > n_tg ? n_pp : n_tg) + depth + 1;
	kv_config kc = model_kv_config(m, kvt, 1, (int32_t)ctx, 16);
	if (kv_new(&b.kv, &kc, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	b.logits = malloc((size_t)hp->n_vocab * sizeof *b.logits);
	b.rows = malloc((size_t)(n_pp > 512 ? n_pp : 512) * sizeof *b.rows);
	if (!b.logits || !b.rows) {
		cli_err("out of memory");
		goto out;
	}
	const char *type = tensor_traits_of(hp->main_type) ? tensor_traits_of(hp->main_type)->name : "?";
	const char *base = strrchr(model_path, '/') ? strrchr(model_path, '/') + 1 : model_path;
	LOG_INFO("bench", "%s (%s, %s, %.1f MiB of weights in place, %.1f KiB copied), %d threads, kv %s", base, hp->arch,
		 type, model_weight_bytes(m) / 1048576.0, model_copied_bytes(m) / 1024.0, base_pool_threads(b.pool), kv_name);
	const char *act = tensor_act_name(tensor_kernels_act(model_kernels(m)));
	LOG_INFO("bench", "kernels %s, activations %s: %.1f MiB repacked in %.0f ms%s; load %.2f s",
		 tensor_kernels_name(model_kernels(m)), act, model_packed_bytes(m) / 1048576.0, model_pack_ms(m),
		 model_compact(m) ? " (IQ weights compact, as in the file)" : "", load_s);
	// Warm-up: one token touches every weight once, so page faults stay out of the figures.
	if (run_tg(&b, 1, NULL) < 0) goto out;
	double fastest = 0; // seconds of the fastest single-token pass of the bare forward
	for (int64_t r = 0; r < reps; r++) {
		double s;
		if (n_pp) {
			if ((s = run_pp(&b, depth, n_pp)) < 0) goto out;
			pp[r] = (bench_rep){n_pp, s, n_pp / s};
			LOG_INFO("bench", "pp%lld at depth %lld rep %lld: %lld tokens in %.6f s = %.2f tok/s", (long long)n_pp, (long long)depth,
				 (long long)r + 1, (long long)n_pp, s, pp[r].tps);
		}
		if (n_tg && depth) {
			if ((s = run_tg_depth(&b, depth, n_tg)) < 0) goto out;
			tg[r] = (bench_rep){n_tg, s, n_tg / s};
			LOG_INFO("bench", "tg%lld at depth %lld rep %lld: %lld tokens in %.6f s = %.2f tok/s", (long long)n_tg,
				 (long long)depth, (long long)r + 1, (long long)n_tg, s, tg[r].tps);
		} else if (n_tg) {
			// the kernels' limit, measured beside each repetition so both see the same machine
			if (run_tg(&b, n_tg, &fastest) < 0) goto out;
			// generation goes through the lane host, as every served token does
			bench_lanes_opts o = {.concurrent = 1, .n_gen = (int32_t)n_tg, .threads = (int32_t)threads, .kv_type = kvt,
					      .no_experts = !strcmp(set->experts, "off")};
			bench_lanes_result res;
			if (bench_lanes(m, voc, &o, &res, err, sizeof err)) {
				cli_err("%s", err);
				goto out;
			}
			// timed from the first token to the last, so the first token's prompt pass is left out
			tg[r] = (bench_rep){res.tg_tokens, res.tg_seconds, res.tg_tps};
			LOG_INFO("bench", "tg%lld rep %lld: %lld tokens after the first in %.6f s = %.2f tok/s", (long long)n_tg,
				 (long long)r + 1, (long long)tg[r].tokens, tg[r].seconds, tg[r].tps);
		}
	}
	const bench_stats pst = n_pp ? stats_of(pp, (int)reps) : (bench_stats){0};
	const bench_stats tst = n_tg ? stats_of(tg, (int)reps) : (bench_stats){0};
	const double limit = fastest > 0 ? 1 / fastest : 0;
	const int nth = base_pool_threads(b.pool);
	const char *kname = tensor_kernels_name(model_kernels(m));
	if (json) {
		json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:I, s:f, s:f, s:I, s:f, s:f, s:s, s:f, s:f, s:f, s:s, s:I, s:s, s:f}",
				      "model", base, "type", type, "activations", act, "threads", nth, "pp_tokens",
				      (json_int_t)n_pp, "pp_tps", pst.mean, "pp_sd", pst.sd, "tg_tokens", (json_int_t)n_tg, "tg_tps",
				      tst.mean, "tg_sd", tst.sd, "kernels", kname, "load_s", load_s,
				      "packed_mib", model_packed_bytes(m) / 1048576.0, "pack_ms", model_pack_ms(m), "kv",
				      kv_type_name(kvt), "depth", (json_int_t)depth, "attention",
				      model_attn_fused() ? "fused" : "unfused", "peak_rss_mib", peak_rss_mib());
		if (o && depth) json_object_set_new(o, "fill_tps", json_real(fill_tps));
		if (o && n_pp) json_object_set_new(o, "pp", stats_json(&pst, pp, (int)reps));
		if (o && n_tg) json_object_set_new(o, "tg", stats_json(&tst, tg, (int)reps));
		if (o && limit > 0) json_object_set_new(o, "tg_limit_tps", json_real(limit));
		char *s = o ? json_dumps(o, JSON_REAL_PRECISION(6)) : NULL;
		if (!s) {
			cli_err("out of memory");
			json_decref(o);
			goto out;
		}
		printf("%s\n", s);
		free(s);
		json_decref(o);
	} else {
		printf("| model | type | activations | kernels | threads | test | t/s median | min | max | mean ± sd |\n"
		       "|---|---|---|---|---|---|---|---|---|---|\n");
		char test[64];
		if (n_pp) {
			if (depth) snprintf(test, sizeof test, "pp%lld @ %lld", (long long)n_pp, (long long)depth);
			else snprintf(test, sizeof test, "pp%lld", (long long)n_pp);
			printf("| %s | %s | %s | %s | %d | %s | %.2f | %.2f | %.2f | %.2f ± %.2f |\n", base, type, act, kname, nth, test,
			       pst.median, pst.min, pst.max, pst.mean, pst.sd);
		}
		if (n_tg) {
			if (depth) snprintf(test, sizeof test, "tg%lld @ %lld", (long long)n_tg, (long long)depth);
			else snprintf(test, sizeof test, "tg%lld", (long long)n_tg);
			printf("| %s | %s | %s | %s | %d | %s | %.2f | %.2f | %.2f | %.2f ± %.2f |\n", base, type, act, kname, nth, test,
			       tst.median, tst.min, tst.max, tst.mean, tst.sd);
		}
		printf("%lld repetitions; kv %s, %s attention, peak RSS %.1f MiB", (long long)reps, kv_type_name(kvt),
		       model_attn_fused() ? "fused" : "unfused", peak_rss_mib());
		if (limit > 0) printf("; the kernels' limit for one stream: %.2f tok/s (the fastest bare single-token pass)", limit);
		printf("\n");
	}
	rc = 0;
out:
	free(text);
	free(pp);
	free(tg);
	free(b.logits);
	free(b.rows);
	kv_free(b.kv);
	base_pool_free(b.pool);
	tok_vocab_free(voc);
	cli_free_loras(loras, all.n);
	model_free(dm);
	model_free(m);
	return rc;
}
