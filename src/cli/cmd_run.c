// cli: `lanes run -m MODEL (-p TEXT | --ids 1,2,3) -n N [sampling] [--threads T] [--print-ids]`
// — generates a continuation and streams its text to stdout. Also the id-list parser and
// model/pool setup that `lanes logits` and `lanes bench` share.
#include "base/base.h"
#include "cli/cli.h"
#include "model/model.h"
#include "sample/sample.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_parse_ids(const char *s, int32_t **ids, size_t *n) {
	*ids = NULL;
	*n = 0;
	size_t cap = 16, cnt = 0;
	int32_t *v = malloc(cap * sizeof *v);
	if (!v) return -1;
	const char *p = s;
	while (*p == ' ' || *p == '[') p++;
	while (*p && *p != ']') {
		char *end;
		errno = 0;
		long long x = strtoll(p, &end, 10);
		if (end == p || errno || x < 0 || x > INT32_MAX) {
			fprintf(stderr, "lanes: bad token id list at '%s' (want ids like 1,2,3)\n", p);
			free(v);
			return -1;
		}
		if (cnt == cap) {
			int32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
			if (!nv) { free(v); return -1; }
			v = nv;
		}
		v[cnt++] = (int32_t)x;
		p = end;
		while (*p == ' ') p++;
		if (*p == ',') p++;
		while (*p == ' ') p++;
	}
	if (!cnt) {
		fprintf(stderr, "lanes: empty token id list\n");
		free(v);
		return -1;
	}
	*ids = v;
	*n = cnt;
	return 0;
}

int cli_kv_type(const char *name, enum kv_type *out) {
	for (int t = 0; t < KV_TYPE_COUNT; t++)
		if (!strcmp(name, kv_type_name((enum kv_type)t))) {
			*out = (enum kv_type)t;
			return 0;
		}
	fprintf(stderr, "lanes: unknown kv type '%s' (f16s or f16)\n", name);
	return -1;
}

int cli_threads(int64_t want, lanes_pool **pool) {
	int n = want > 0 ? (int)(want > 1024 ? 1024 : want) : lanes_cpu_count();
	if (lanes_pool_new(pool, n)) {
		fprintf(stderr, "lanes: cannot start %d threads\n", n);
		return -1;
	}
	return 0;
}

// Feeds rows [0, n) of one sequence starting at position pos0 in batches of at most
// `chunk`, asking logits for the rows that want them (all, or only the last).
static int feed(const model *m, kv_cache *kv, lanes_pool *pool, const int32_t *ids, int64_t n, int32_t pos0,
		float *last_logits) {
	char err[256];
	const int64_t chunk = 256;
	model_row *rows = malloc((size_t)(n < chunk ? n : chunk) * sizeof *rows);
	if (!rows) return -1;
	for (int64_t i0 = 0; i0 < n; i0 += chunk) {
		int64_t c = n - i0 < chunk ? n - i0 : chunk;
		for (int64_t i = 0; i < c; i++)
			rows[i] = (model_row){ids[i0 + i], (int32_t)(pos0 + i0 + i), 0, i0 + i == n - 1};
		if (model_forward(m, kv, pool, rows, c, last_logits, err, sizeof err)) {
			fprintf(stderr, "lanes run: %s\n", err);
			free(rows);
			return -1;
		}
	}
	free(rows);
	return 0;
}

int cmd_run(int argc, char **argv) {
	const char *model_path = NULL, *prompt = NULL, *ids_arg = NULL, *kv_name = "f16s";
	int64_t n_predict = 64, top_k = 40, seed = -1, threads = 0;
	double temp = 0.8, top_p = 0.95, min_p = 0.0;
	bool print_ids = false, help = false;
	const cli_opt opts[] = {
		{"-m|--model", CLI_STR, &model_path, "GGUF model file"},
		{"-p|--prompt", CLI_STR, &prompt, "prompt text (BOS added as the vocab says)"},
		{"--ids", CLI_STR, &ids_arg, "prompt as token ids, used exactly: 1,2,3"},
		{"-n|--n-predict", CLI_INT, &n_predict, "tokens to generate (default 64)"},
		{"--temp", CLI_FLOAT, &temp, "temperature (default 0.8; 0 = greedy)"},
		{"--top-k", CLI_INT, &top_k, "keep the k most likely tokens (default 40; 0 = all)"},
		{"--top-p", CLI_FLOAT, &top_p, "nucleus probability (default 0.95; 1 = off)"},
		{"--min-p", CLI_FLOAT, &min_p, "drop tokens below min-p x the top one (default 0 = off)"},
		{"--seed", CLI_INT, &seed, "random seed (default: from the clock, printed on stderr)"},
		{"-t|--threads", CLI_INT, &threads, "threads (default: number of cores)"},
		{"--kv", CLI_STR, &kv_name, "kv cache type: f16s (default) or f16"},
		{"--print-ids", CLI_FLAG, &print_ids, "end with a line holding the generated ids as JSON"},
		{"-h|--help", CLI_FLAG, &help, "show this help"},
	};
	const int nopts = sizeof opts / sizeof opts[0];
	const char *synopsis = "lanes run -m MODEL (-p TEXT | --ids 1,2,3) [-n N] [--temp T] [--top-k K] "
			       "[--top-p P] [--min-p P] [--seed S] [--threads T] [--print-ids]";
	int npos;
	if (cli_parse(argc, argv, opts, nopts, NULL, 0, &npos)) return 2;
	if (help || !model_path || (!prompt == !ids_arg) || n_predict < 0) {
		cli_usage(synopsis, opts, nopts);
		return help ? 0 : 2;
	}
	char err[512];
	sample_params sp = sample_defaults();
	sp.temp = (float)temp;
	sp.top_k = top_k > INT32_MAX ? INT32_MAX : (int32_t)top_k;
	sp.top_p = (float)top_p;
	sp.min_p = (float)min_p;
	sp.seed = seed >= 0 ? (uint64_t)seed : splitmix64(lanes_now_ns());
	if (top_k < 0 || sample_check(&sp, err, sizeof err)) {
		fprintf(stderr, "lanes run: %s\n", top_k < 0 ? "--top-k must be >= 0" : err);
		return 2;
	}
	enum kv_type kvt;
	if (cli_kv_type(kv_name, &kvt)) return 2;

	int rc = 1;
	model *m = NULL;
	tok_vocab *voc = NULL;
	lanes_pool *pool = NULL;
	kv_cache *kv = NULL;
	sampler *smp = NULL;
	tok_stream *ts = NULL;
	int32_t *ids = NULL, *gen = NULL;
	float *logits = NULL;
	size_t n_ids = 0;
	if (model_load(&m, model_path, err, sizeof err)) {
		fprintf(stderr, "lanes run: %s\n", err);
		goto out;
	}
	const model_hparams *hp = model_hparams_of(m);
	if (tok_vocab_load(&voc, model_gguf(m), err, sizeof err)) {
		fprintf(stderr, "lanes run: %s\n", err);
		goto out;
	}
	if (prompt) {
		if (tok_encode(voc, prompt, strlen(prompt), true, true, &ids, &n_ids, err, sizeof err)) {
			fprintf(stderr, "lanes run: %s\n", err);
			goto out;
		}
		if (!n_ids) {
			fprintf(stderr, "lanes run: the prompt encodes to no tokens\n");
			goto out;
		}
	} else if (cli_parse_ids(ids_arg, &ids, &n_ids)) {
		goto out;
	}
	for (size_t i = 0; i < n_ids; i++)
		if (ids[i] >= hp->n_vocab) {
			fprintf(stderr, "lanes run: token id %d is outside the vocabulary (%d)\n", ids[i], hp->n_vocab);
			goto out;
		}
	if ((int64_t)n_ids + n_predict > INT32_MAX / 2) {
		fprintf(stderr, "lanes run: prompt plus -n is too long\n");
		goto out;
	}
	if (cli_threads(threads, &pool)) goto out;
	kv_config kc = model_kv_config(m, kvt, 1, (int32_t)(n_ids + (size_t)n_predict), 16);
	if (kv_new(&kv, &kc, err, sizeof err)) {
		fprintf(stderr, "lanes run: %s\n", err);
		goto out;
	}
	logits = malloc((size_t)hp->n_vocab * sizeof *logits);
	gen = malloc(((size_t)n_predict + 1) * sizeof *gen);
	ts = tok_stream_new(voc, 0);
	if (!logits || !gen || !ts || sampler_new(&smp, hp->n_vocab)) {
		fprintf(stderr, "lanes run: out of memory\n");
		goto out;
	}
	LOG_INFO("run", "%s: %.1f MiB of weights used in place (%.1f KiB copied); %zu prompt tokens, seed %llu, %d threads, kv %s",
		 hp->arch, model_weight_bytes(m) / 1048576.0, model_copied_bytes(m) / 1024.0, n_ids,
		 (unsigned long long)sp.seed, lanes_pool_threads(pool), kv_name);
	uint64_t t0 = lanes_now_us();
	if (feed(m, kv, pool, ids, (int64_t)n_ids, 0, logits)) goto out;
	uint64_t t1 = lanes_now_us();
	int64_t n_gen = 0;
	for (int64_t i = 0; i < n_predict; i++) {
		const int32_t pos = (int32_t)n_ids + (int32_t)i;
		const int32_t tok = sampler_pick(smp, &sp, logits, 0, pos);
		if (tok_is_eog(voc, tok)) break;
		gen[n_gen++] = tok;
		const char *piece;
		size_t len;
		if (tok_stream_push(ts, tok, &piece, &len)) {
			fprintf(stderr, "lanes run: cannot decode token %d\n", tok);
			goto out;
		}
		fwrite(piece, 1, len, stdout);
		fflush(stdout);
		if (i + 1 < n_predict && feed(m, kv, pool, &tok, 1, pos, logits)) goto out;
	}
	const char *piece;
	size_t len;
	if (!tok_stream_flush(ts, &piece, &len)) fwrite(piece, 1, len, stdout);
	uint64_t t2 = lanes_now_us();
	if (print_ids) {
		printf("\n[");
		for (int64_t i = 0; i < n_gen; i++) printf("%s%d", i ? "," : "", gen[i]);
		printf("]\n");
	}
	fflush(stdout);
	LOG_INFO("run", "prompt %zu tokens in %.3f s (%.1f tok/s); generated %lld tokens in %.3f s (%.1f tok/s)", n_ids,
		 (t1 - t0) / 1e6, n_ids / ((t1 - t0) / 1e6 + 1e-9), (long long)n_gen, (t2 - t1) / 1e6,
		 n_gen / ((t2 - t1) / 1e6 + 1e-9));
	rc = 0;
out:
	tok_stream_free(ts);
	sampler_free(smp);
	free(logits);
	free(gen);
	free(ids);
	kv_free(kv);
	lanes_pool_free(pool);
	tok_vocab_free(voc);
	model_free(m);
	return rc;
}
