// cli: `lanes run -m MODEL (-p TEXT | --ids 1,2,3) [-n N] [sampling] [--lora PATH[:SCALE]]
// [--print-ids] [--think | --no-think | --think-budget N]` — generates a continuation through the
// lane host and streams its text to stdout; with a thinking option -p is a user turn through the
// chat template, and the reply's thinking is shown apart from its answer.
#include "base/base.h"
#include "chat/chat.h"
#include "grammar/grammar.h"
#include "cli/cli.h"
#include "lanes/lanes.h"
#include "model/model.h"
#include "sample/sample.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIM "\033[2m"
#define UNDIM "\033[0m"

// The prompt of a thinking option: -p as a user turn through the chat template, its end as the
// thinking asks (reason_prompt_end, as the server's chat APIs do); *f the reasoning family (NULL:
// none). constrained: a grammar follows the thinking. 0, 1 when the work failed, 2 when the option
// does not fit the model; the error printed.
static int think_prompt(const cli_settings *s, const tok_vocab *voc, bool constrained, chat_tmpl *ct, const reason_format **f, bool *inside,
			int32_t **ids, size_t *n) {
	char err[512];
	*inside = false;
	if (chat_load(ct, voc, s->chat_template, err, sizeof err)) {
		cli_err("%s", err);
		return 1;
	}
	*f = ct->reason;
	if (strcmp(s->reasoning_format, "auto") && reason_format_named(s->reasoning_format, f)) {
		cli_err("--reasoning-format %s is none of %s", s->reasoning_format, reason_format_names());
		return 2;
	}
	if (!*f && !s->no_think) {
		cli_err("%s: this model does not think (its chat template, %s, sets no thinking apart): give --chat-template FILE with a "
			"thinking section, or --reasoning-format %s",
			s->think ? "--think" : "--think-budget", ct->origin, reason_format_names());
		return 2;
	}
	if (!*f) LOG_WARN("run", "--no-think: this model does not think (its chat template, %s, sets no thinking apart); the turn goes as it is", ct->origin);
	// thinking off: the template's own switch where it has one, else an empty section after it
	const bool off = s->no_think, switched = off && *f && (*f)->off_var && ct->reason_switch;
	json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", s->prompt);
	json_t *kw = switched ? json_pack("{s:b}", (*f)->off_var, 0) : NULL;
	if (!msgs || (switched && !kw)) {
		json_decref(msgs);
		json_decref(kw);
		cli_err("the prompt is not UTF-8 text");
		return 1;
	}
	const chat_input in = {.messages = msgs, .kwargs = kw, .add_generation_prompt = true};
	char *text = NULL;
	size_t len = 0;
	int rc = chat_render(ct, &in, &text, &len, NULL, err, sizeof err);
	if (!rc && *f && (rc = reason_prompt_end(*f, off, switched, constrained, &text, &len, inside))) snprintf(err, sizeof err, "out of memory");
	if (!rc) rc = tok_encode_chat(voc, text, len, ids, n, err, sizeof err);
	free(text);
	json_decref(msgs);
	json_decref(kw);
	if (rc) {
		cli_err("%s", err);
		return 1;
	}
	LOG_INFO("run", "-p is a user turn, rendered by the chat template (%s); reasoning: %s%s", ct->origin, reason_format_name(*f),
		 off ? ", thinking off" : *inside ? ", the prompt opens the thinking" : "");
	return 0;
}

// A reply that thinks, as the terminal shows it: the thinking between a header and a footer
// (dimmed on a terminal), then the answer; the markers never shown.
typedef struct {
	reason_scan rs;
	char *raw;                 // the reply's text so far: len bytes of cap
	size_t len, cap;
	size_t thought, answered;  // bytes of the thinking and of the answer written
	bool head, foot, dim;      // the header and the footer written; stdout is a terminal
} think_show;

static void put(const char *p, size_t n, char *last) {
	if (!n) return;
	fwrite(p, 1, n, stdout);
	*last = p[n - 1];
}

// Adds a piece of the reply's text (end: the last) and writes what it tells; -1: out of memory.
static int show(think_show *t, const char *text, size_t n, bool end, char *last) {
	if (t->len + n > t->cap) {
		const size_t cap = (t->len + n) * 2 + 256;
		char *r = realloc(t->raw, cap);
		if (!r) return -1;
		t->raw = r, t->cap = cap;
	}
	if (n) memcpy(t->raw + t->len, text, n);
	t->len += n;
	reason_scan_feed(&t->rs, t->raw, t->len, end);
	if (t->rs.think_len > t->thought) {
		if (!t->head) fputs(t->dim ? DIM "Thinking...\n" : "Thinking...\n", stdout), t->head = true;
		put(t->raw + t->rs.think_off + t->thought, t->rs.think_len - t->thought, last);
		t->thought = t->rs.think_len;
	}
	if (t->head && !t->foot && t->rs.phase == REASON_AFTER) {
		const char *foot = t->dim ? "\n...done thinking." UNDIM "\n\n" : "\n...done thinking.\n\n";
		put(foot, strlen(foot), last);
		t->foot = true;
	}
	// thinking cut short: no footer, and the terminal's colour back
	if (end && t->head && !t->foot && t->dim) fputs(UNDIM, stdout);
	const size_t al = reason_scan_answer(&t->rs, t->len);
	if (al > t->answered) {
		put(t->raw + t->rs.answer_off + t->answered, al - t->answered, last);
		t->answered = al;
	}
	return 0;
}

int cmd_run(const cli_settings *s) {
	if (!s->prompt == !s->ids) return cli_usage_error(s, "give one of -p TEXT and --ids 1,2,3");
	const bool budget = cli_given(s, &s->think_budget), thinking = s->think || s->no_think || budget;
	if (s->no_think && (s->think || budget))
		return cli_usage_error(s, "--no-think turns off the thinking that %s asks for: give one of them", s->think ? "--think" : "--think-budget");
	if (thinking && s->ids)
		return cli_usage_error(s, "--think, --no-think and --think-budget take -p TEXT (a user turn through the chat template), not --ids");
	if (!thinking && (cli_given(s, &s->chat_template) || cli_given(s, &s->reasoning_format)))
		return cli_usage_error(s, "--chat-template and --reasoning-format go with --think, --no-think or --think-budget");
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
	chat_tmpl ct = {0};
	const reason_format *rf = NULL;
	think_show show_st = {0};
	bool inside = false;
	int32_t *ids = NULL, *gen = NULL;
	size_t n_ids = 0;
	model_lora **loras = NULL;
	model_lora_set set = {0};
	if (cli_grammar(s, &gram) || cli_load_model(s->model, &m, &voc) || cli_load_loras(m, &s->lora, &set, &loras)) goto out;
	const model_hparams *hp = model_hparams_of(m);
	if (thinking) {
		if ((rc = think_prompt(s, voc, gram != NULL, &ct, &rf, &inside, &ids, &n_ids))) goto out;
		rc = 1;
	} else if (prompt) {
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
	model_set_context(m, lane_config_max_context(&cfg, model_hparams_of(m)));
	if (lane_host_new(&host, m, voc, &cfg, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	gen = malloc(((size_t)n_predict + 1) * sizeof *gen);
	if (!gen) {
		cli_err("out of memory");
		goto out;
	}
	lane_request q;
	lane_request_init(&q);
	q.draft = false;
	q.prompt = ids;
	q.n_prompt = (int32_t)n_ids;
	q.max_tokens = (int32_t)n_predict;
	q.lora = set.n ? &set : NULL;
	q.sampling.temperature = sp.temp, q.sampling.top_k = sp.top_k, q.sampling.top_p = sp.top_p, q.sampling.min_p = sp.min_p;
	q.sampling.seed = sp.seed, q.sampling.has_seed = true;
	if (cli_sampling(s, &q.sampling)) {
		rc = 2;
		goto out;
	}
	q.grammar = gram;
	// the thinking as the server's chat APIs settle it: markers, where the reply starts, the budget
	int32_t ends[LANE_THINK_END];
	int32_t n_ends = 0;
	lane_think lt;
	if (rf) {
		if (budget && reason_end_ids(rf, voc, ends, LANE_THINK_END, &n_ends, err, sizeof err)) {
			cli_err("%s", err);
			goto out;
		}
		lt = (lane_think){.open = rf->open, .close = rf->close, .inside = inside, .budget = budget ? (int32_t)s->think_budget : -1,
				  .end_ids = ends, .n_end_ids = n_ends};
		q.think = &lt;
		reason_scan_init(&show_st.rs, rf, inside);
		show_st.dim = isatty(STDOUT_FILENO);
	}
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
		if (!rf) put(ev.text, ev.text_len, &last);
		else if (show(&show_st, ev.text, ev.text_len, ev.kind != LANE_EV_TOKEN, &last)) {
			cli_err("out of memory");
			goto out;
		}
		fflush(stdout);
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
	chat_free(&ct);
	free(show_st.raw);
	tok_vocab_free(voc);
	cli_free_loras(loras, set.n);
	model_free(m);
	return rc;
}
