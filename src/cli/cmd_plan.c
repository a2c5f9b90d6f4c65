// cli: `lanes plan -m MODEL [--memory SIZE] [--lanes N] [--kv-type T] [--json]` — reads only
// the model's metadata and prints how its weights, KV and compute reserve fit a memory budget.
// Exit 0 when the plan fits, 1 when it does not (or the model cannot be read), 2 on bad args.
#include "base/base.h"
#include "cli/cli.h"
#include "plan/plan.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_json(const plan_result *r, const plan_model *pm) {
	json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:s, s:I, s:I, s:s, s:I, s:I, s:I, s:s}",
			      "weights_bytes", (json_int_t)r->weights_bytes,
			      "kv_bytes_per_token", (json_int_t)r->kv_bytes_per_token,
			      "state_bytes_per_lane", (json_int_t)r->state_bytes_per_lane,
			      "compute_reserve_bytes", (json_int_t)r->compute_reserve_bytes,
			      "lanes", (json_int_t)r->lanes,
			      "window", (json_int_t)r->window,
			      "fits", r->fits,
			      "reason", r->reason,
			      "total_bytes", (json_int_t)(r->total_bytes > INT64_MAX ? INT64_MAX : r->total_bytes),
			      "kv_bytes", (json_int_t)(r->kv_bytes > INT64_MAX ? INT64_MAX : r->kv_bytes),
			      "kv_type", kv_type_name(r->kv_type),
			      "budget_bytes", (json_int_t)r->budget_bytes,
			      "window_cap", (json_int_t)r->window_cap,
			      "page_tokens", (json_int_t)r->page_tokens,
			      "kernels", pm->mem.kernels ? pm->mem.kernels : "");
	if (o && r->kv_local_bytes_per_token) {
		json_object_set_new(o, "kv_local_bytes_per_token", json_integer((json_int_t)r->kv_local_bytes_per_token));
		json_object_set_new(o, "local_tokens", json_integer(r->local_tokens));
	}
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	puts(s ? s : "{}");
	free(s);
	json_decref(o);
}

static void print_text(const plan_result *r, const plan_model *pm, const char *path, bool budget_given) {
	char a[24], b[24], c[24], d[24];
	const model_hparams *hp = &pm->hp;
	const model_memory *mm = &pm->mem;
	printf("model         %s (%s, %d layers, %d KV heads of %d, trained context %d)\n", path, hp->arch, hp->n_layers,
	       hp->n_kv_heads, hp->head_dim, hp->n_ctx_train);
	printf("weights       %s (repacked %s, read in place %s, copied %s; kernels %s)\n",
	       plan_format_size(r->weights_bytes, a, sizeof a), plan_format_size(mm->packed_bytes, b, sizeof b),
	       plan_format_size(mm->in_place_bytes, c, sizeof c), plan_format_size(mm->copied_bytes, d, sizeof d),
	       mm->kernels ? mm->kernels : "?");
	printf("KV per token  %s (%s)\n", plan_format_size(r->kv_bytes_per_token, a, sizeof a), kv_type_name(r->kv_type));
	if (r->state_bytes_per_lane)
		printf("state         %s per lane (%d recurrent layers; KV in the %d others)\n", plan_format_size(r->state_bytes_per_lane, a, sizeof a),
		       hp->n_layers - model_kv_layers(hp), model_kv_layers(hp));
	if (r->kv_local_bytes_per_token)
		printf("local layers  %s of it (sliding window of %d): a lane keeps %d tokens of theirs\n",
		       plan_format_size(r->kv_local_bytes_per_token, a, sizeof a), hp->n_swa, r->local_tokens);
	printf("lanes         %d\n", r->lanes);
	printf("window        %d tokens per lane (cap %d, pages of %d)\n", r->window, r->window_cap, r->page_tokens);
	printf("KV            %s (%d x %d tokens%s)\n", plan_format_size(r->kv_bytes, a, sizeof a), r->lanes, r->window,
	       r->state_bytes_per_lane ? ", states included" : r->kv_local_bytes_per_token ? ", the local layers' as kept" : "");
	printf("compute       %s reserve\n", plan_format_size(r->compute_reserve_bytes, a, sizeof a));
	printf("total         %s\n", plan_format_size(r->total_bytes, a, sizeof a));
	printf("budget        %s%s\n", plan_format_size(r->budget_bytes, a, sizeof a),
	       budget_given ? "" : " (available memory)");
	if (r->fits) printf("fits          yes\n");
	else printf("fits          no: %s\n", r->reason);
}

int cmd_plan(const cli_settings *s) {
	lane_config cfg;
	lane_config_default(&cfg);
	cfg.kv_type = cli_kv_type(s->kv_type);
	cfg.threads = (int32_t)s->threads;
	cfg.piece = (int32_t)s->piece;
	cfg.draft_max = (int32_t)s->draft_max;
	const char *memory = s->memory, *model_path = s->model;
	uint64_t budget;
	if (memory) {
		if (plan_parse_size(memory, &budget)) {
			cli_err("--memory '%s' is not a size (e.g. 8GiB, 1.5GiB, 512MiB, 2GB, 4096)", memory);
			return 2;
		}
	} else if (!(budget = plan_available_memory())) {
		cli_err("cannot read the available memory from /proc/meminfo; give --memory");
		return 2;
	}

	if (memory) model_select_compact_budget(budget); // what auto may expand into
	char err[512];
	plan_model pm;
	if (plan_model_load(&pm, model_path, err, sizeof err)) {
		cli_err("%s", err);
		return 1;
	}
	plan_result r;
	if (plan_make(&r, &pm, budget, (int32_t)s->lanes, &cfg, err, sizeof err)) {
		cli_err("%s", err);
		return 1;
	}
	if (s->json) print_json(&r, &pm);
	else print_text(&r, &pm, model_path, memory != NULL);
	return r.fits ? 0 : 1;
}
