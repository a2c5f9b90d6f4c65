// cli: `lanes run -m MODEL (-p TEXT | --ids 1,2,3) [-n N] [sampling] [--lora PATH[:SCALE]]
// [--print-ids]` — generates a continuation through the lane host and streams its text to stdout.
#include "base/base.h"
#include "grammar/grammar.h"
#include "cli/cli.h"
#include "lanes/lanes.h"
#include "model/model.h"
#include "sample/sample.h"
#include "tokenizer/tokenizer.h"

#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_run(const cli_settings *s) {
	if (!s->prompt == !s->ids) return cli_usage_error(s, "give one of -p TEXT and --ids 1,2,3");
	const char *prompt = s->prompt, *kv_name = s->kv_type;
	const int64_t n_predict = s->n_predict;
	const bool print_ids = s->print_ids;
	char err[512];
	sample_params sp = sample_defaults();
	sp.temp = (float)s->temp;
	sp.top_k = (int32_t)s->top_k;
	sp.top_p = (float)s->top_p;
	sp.min_p = (float)s->min_p;
	sp.seed = cli_given(s, &s->seed) ? (uint64_t)s->seed : splitmix64(base_now_ns());
	if (sample_check(&sp, err, sizeof err)) {
		cli_err("%s", err);
		return 2;
	}
	const enum kv_type kvt = cli_kv_type(kv_name);

	int rc = 1;
	model *m = NULL;
	tok_vocab *voc = NULL;
	lane_host *host = NULL;
	lane_req *req = NULL;
	grammar *gram = NULL;
	int32_t *ids = NULL, *gen = NULL;
	size_t n_ids = 0;
	model_lora **loras = NULL;
	model_lora_set set = {0};
	if (cli_grammar(s, &gram) || cli_load_model(s->model, &m, &voc) || cli_load_loras(m, &s->lora, &set, &loras)) goto out;
	const model_hparams *hp = model_hparams_of(m);
	if (prompt) {
		if (tok_encode(voc, prompt, strlen(prompt), true, true, &ids, &n_ids, err, sizeof err)) {
			cli_err("%s", err);
			goto out;
		}
		if (!n_ids) {
			cli_err("the prompt encodes to no tokens");
			goto out;
		}
	} else if (cli_parse_ids(s->ids, &ids, &n_ids)) {
		goto out;
	}
	for (size_t i = 0; i < n_ids; i++)
		if (ids[i] >= hp->n_vocab) {
			cli_err("token id %d is outside the vocabulary (%d)\n", ids[i], hp->n_vocab);
			goto out;
		}
	if ((int64_t)n_ids + n_predict > INT32_MAX / 2) {
		cli_err("prompt plus -n is too long");
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
	cfg.threads = (int32_t)s->threads;
	cfg.kv_type = kvt;
	cfg.ctx = (int32_t)(n_ids + (size_t)n_predict);
	if (cfg.ctx < 16) cfg.ctx = 16;
	cfg.prefix_cache = false;
	if (lane_host_new(&host, m, voc, &cfg, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	gen = malloc(((size_t)n_predict + 1) * sizeof *gen);
	if (!gen) {
		cli_err("out of memory");
		goto out;
	}
	lane_request q = {0};
	q.prompt = ids;
	q.n_prompt = (int32_t)n_ids;
	q.max_tokens = (int32_t)n_predict;
	q.lora = set.n ? &set : NULL;
	q.sampling = (lane_sampling){.temperature = sp.temp, .top_k = sp.top_k, .top_p = sp.top_p, .min_p = sp.min_p,
				     .repeat_penalty = 1, .seed = sp.seed, .has_seed = true};
	q.grammar = gram;
	LOG_INFO("run", "%s: %.1f MiB of weights used in place (%.1f KiB copied); %zu prompt tokens, seed %llu, kv %s", hp->arch,
		 model_weight_bytes(m) / 1048576.0, model_copied_bytes(m) / 1024.0, n_ids, (unsigned long long)sp.seed, kv_name);
	// the tokens' times are the engine's (when it queued each), not when this thread read them
	uint64_t t0 = base_now_us(), t1 = 0, t2 = 0;
	if (lane_submit(host, &q, &req, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	int64_t n_gen = 0;
	char last = 0; // the last byte of text written
	lane_event ev;
	while (lane_next(req, &ev, -1) == 1) {
		if (ev.kind == LANE_EV_TOKEN) {
			if (!t1) t1 = ev.t_us;
			t2 = ev.t_us;
			if (n_gen <= n_predict) gen[n_gen++] = ev.token;
		}
		fwrite(ev.text, 1, ev.text_len, stdout);
		fflush(stdout);
		if (ev.text_len) last = ev.text[ev.text_len - 1];
		if (ev.kind == LANE_EV_TOKEN) continue;
		if (ev.kind == LANE_EV_FAILED) {
			fputc('\n', stderr);
			cli_err("%s", ev.reason ? ev.reason : "failed");
			goto out;
		}
		break;
	}
	if (print_ids) {
		printf("\n[");
		for (int64_t i = 0; i < n_gen; i++) printf("%s%d", i ? "," : "", gen[i]);
		printf("]\n");
	} else if (last != '\n' && last && (isatty(STDOUT_FILENO) || isatty(STDERR_FILENO))) {
		putchar('\n'); // the stats line and the shell prompt start on a line of their own
	}
	fflush(stdout);
	if (!t1) t1 = t2 = base_now_us();
	// from the first token to the last: the rate of the tokens after the first
	if (n_gen > 1 && t2 > t1)
		LOG_INFO("run", "prompt %zu tokens and first token in %.3f s; %lld more tokens in %.3f s (%.1f tok/s)", n_ids,
			 (t1 - t0) / 1e6, (long long)(n_gen - 1), (t2 - t1) / 1e6, (n_gen - 1) / ((t2 - t1) / 1e6));
	else
		LOG_INFO("run", "prompt %zu tokens and first token in %.3f s; %lld tokens in all", n_ids, (t1 - t0) / 1e6, (long long)n_gen);
	rc = 0;
out:
	lane_req_free(req);
	lane_host_free(host);
	free(gen);
	free(ids);
	grammar_unref(gram);
	tok_vocab_free(voc);
	cli_free_loras(loras, set.n);
	model_free(m);
	return rc;
}
