// cli: `lanes run -m MODEL (-p TEXT | --ids 1,2,3) -n N [sampling] [--threads T] [--print-ids]`
// — generates a continuation through the lane host and streams its text to stdout. Also the id-list parser and
// model/pool setup that `lanes logits` and `lanes bench` share.
#include "base/base.h"
#include "cli/cli.h"
#include "lanes/lanes.h"
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
	const int t = kv_type_parse(name);
	if (t >= 0) {
		*out = (enum kv_type)t;
		return 0;
	}
	fprintf(stderr, "lanes: unknown kv type '%s' (f16s, f16, q8_0 or q4_0)\n", name);
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
		{"--kv|--kv-type", CLI_STR, &kv_name, "kv cache type: f16s (default), f16, q8_0 or q4_0"},
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
	lane_host *host = NULL;
	lane_req *req = NULL;
	int32_t *ids = NULL, *gen = NULL;
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
	if (n_predict == 0) {
		rc = 0;
		if (print_ids) printf("\n[]\n");
		goto out;
	}
	// one lane, with the KV the request needs: every token goes through the lane rounds
	lane_config cfg;
	lane_config_default(&cfg);
	cfg.lanes = 1;
	cfg.queue = 1;
	cfg.threads = threads > 0 ? (int32_t)(threads > 1024 ? 1024 : threads) : 0;
	cfg.kv_type = kvt;
	cfg.ctx = (int32_t)(n_ids + (size_t)n_predict);
	if (cfg.ctx < 16) cfg.ctx = 16;
	cfg.prefix_cache = false;
	if (lane_host_new(&host, m, voc, &cfg, err, sizeof err)) {
		fprintf(stderr, "lanes run: %s\n", err);
		goto out;
	}
	gen = malloc(((size_t)n_predict + 1) * sizeof *gen);
	if (!gen) {
		fprintf(stderr, "lanes run: out of memory\n");
		goto out;
	}
	lane_request q = {0};
	q.prompt = ids;
	q.n_prompt = (int32_t)n_ids;
	q.max_tokens = (int32_t)n_predict;
	q.sampling = (lane_sampling){.temperature = sp.temp, .top_k = sp.top_k, .top_p = sp.top_p, .min_p = sp.min_p,
				     .repeat_penalty = 1, .seed = sp.seed, .has_seed = true};
	LOG_INFO("run", "%s: %.1f MiB of weights used in place (%.1f KiB copied); %zu prompt tokens, seed %llu, kv %s", hp->arch,
		 model_weight_bytes(m) / 1048576.0, model_copied_bytes(m) / 1024.0, n_ids, (unsigned long long)sp.seed, kv_name);
	uint64_t t0 = lanes_now_us(), t1 = 0;
	if (lane_submit(host, &q, &req, err, sizeof err)) {
		fprintf(stderr, "lanes run: %s\n", err);
		goto out;
	}
	int64_t n_gen = 0;
	lane_event ev;
	while (lane_next(req, &ev, -1) == 1) {
		if (ev.kind == LANE_EV_TOKEN) {
			if (!t1) t1 = lanes_now_us();
			if (n_gen <= n_predict) gen[n_gen++] = ev.token;
		}
		fwrite(ev.text, 1, ev.text_len, stdout);
		fflush(stdout);
		if (ev.kind == LANE_EV_TOKEN) continue;
		if (ev.kind == LANE_EV_FAILED) {
			fprintf(stderr, "\nlanes run: %s\n", ev.reason ? ev.reason : "failed");
			goto out;
		}
		break;
	}
	uint64_t t2 = lanes_now_us();
	if (print_ids) {
		printf("\n[");
		for (int64_t i = 0; i < n_gen; i++) printf("%s%d", i ? "," : "", gen[i]);
		printf("]\n");
	}
	fflush(stdout);
	if (!t1) t1 = t2;
	LOG_INFO("run", "prompt %zu tokens and first token in %.3f s; %lld more tokens in %.3f s (%.1f tok/s)", n_ids,
		 (t1 - t0) / 1e6, (long long)(n_gen > 0 ? n_gen - 1 : 0), (t2 - t1) / 1e6,
		 (n_gen > 1 ? n_gen - 1 : 0) / ((t2 - t1) / 1e6 + 1e-9));
	rc = 0;
out:
	lane_req_free(req);
	lane_host_free(host);
	free(gen);
	free(ids);
	tok_vocab_free(voc);
	model_free(m);
	return rc;
}
