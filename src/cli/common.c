// cli/common: what several subcommands share — token id lists, thread pools, loading a
// model or a vocabulary — each printing its own error in the `lanes CMD: ...` style.
#include "cli/cli.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "grammar/schema.h"
#include "sample/sample.h"

#include <errno.h>
#include <math.h>
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
			cli_err("bad token id list at '%s' (want ids like 1,2,3)", p);
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
		cli_err("empty token id list");
		free(v);
		return -1;
	}
	*ids = v;
	*n = cnt;
	return 0;
}

enum kv_type cli_kv_type(const char *name) {
	const int t = kv_type_parse(name);
	LANES_ASSERT(t >= 0); // the settings table admits only the names kv_type_parse knows
	return (enum kv_type)t;
}

int cli_threads(int64_t want, base_pool **pool) {
	const int n = want > 0 ? (int)want : base_cpu_count();
	if (base_pool_new(pool, n)) {
		cli_err("cannot start %d threads", n);
		return -1;
	}
	return 0;
}

int cli_load_model(const char *path, model **m, tok_vocab **voc) { return cli_load_model_head(path, NULL, m, voc); }

int cli_load_model_head(const char *path, const char *head, model **m, tok_vocab **voc) {
	char err[512];
	cli_progress bar;
	cli_progress_start(&bar, "load", true, false);
	const int rc = model_load_head(m, path, head, cli_progress_model, &bar, err, sizeof err);
	cli_progress_end(&bar);
	if (rc || (voc && tok_vocab_load(voc, model_gguf(*m), err, sizeof err))) {
		cli_err("%s", err);
		return -1;
	}
	return 0;
}

void cli_split_lora(const char *arg, char *path, size_t n, float *scale) {
	const char *c = strrchr(arg, ':');
	char *end = NULL;
	double v = 0;
	if (c && c[1]) {
		errno = 0;
		v = strtod(c + 1, &end);
	}
	if (c && c[1] && end && !*end && !errno && isfinite(v)) {
		snprintf(path, n, "%.*s", (int)(c - arg), arg);
		*scale = (float)v;
	} else {
		snprintf(path, n, "%s", arg);
		*scale = 1.0f;
	}
}

int cli_load_loras(const model *m, const cli_list *l, model_lora_set *set, model_lora ***loras) {
	memset(set, 0, sizeof *set);
	*loras = NULL;
	if (!l->n) return 0;
	if (l->n > MODEL_LORA_MAX) {
		cli_err("at most %d --lora adapters", MODEL_LORA_MAX);
		return -1;
	}
	model_lora **a = calloc((size_t)l->n, sizeof *a);
	if (!a) {
		cli_err("out of memory");
		return -1;
	}
	for (int i = 0; i < l->n; i++) {
		char path[4096], err[768];
		float scale;
		cli_split_lora(l->v[i], path, sizeof path, &scale);
		if (model_lora_load(&a[i], m, path, err, sizeof err)) {
			cli_err("%s", err);
			cli_free_loras(a, i);
			return -1;
		}
		model_lora_info info;
		model_lora_info_of(a[i], &info);
		LOG_INFO("lora", "%s: rank %d, alpha %g, scale %g, %d matrices (%s), %.2f MiB", path, info.rank, info.alpha, scale,
			 info.n_targets, info.targets, info.bytes / 1048576.0);
		set->use[i].lora = a[i];
		set->use[i].scale = scale;
	}
	set->n = l->n;
	*loras = a;
	return 0;
}

void cli_free_loras(model_lora **loras, int n) {
	for (int i = 0; loras && i < n; i++) model_lora_free(loras[i]);
	free(loras);
}

int cli_load_vocab(const char *path, tok_vocab **voc) {
	char err[512];
	gguf *g;
	if (gguf_open(&g, path, err, sizeof err)) {
		cli_err("%s", err);
		return -1;
	}
	const int rc = tok_vocab_load(voc, g, err, sizeof err);
	gguf_free(g);
	if (rc) cli_err("%s: %s", path, err);
	return rc ? -1 : 0;
}

char *cli_read_file(const char *path, size_t *len) {
	FILE *f = fopen(path, "rb");
	if (!f) return NULL;
	size_t cap = 65536, n = 0;
	char *buf = malloc(cap + 1);
	while (buf) {
		n += fread(buf + n, 1, cap - n, f);
		if (n < cap) break;
		char *nb = realloc(buf, cap * 2 + 1);
		if (!nb) { free(buf); buf = NULL; break; }
		buf = nb;
		cap *= 2;
	}
	if (buf && ferror(f)) { free(buf); buf = NULL; }
	fclose(f);
	if (buf) { buf[n] = 0; *len = n; }
	return buf;
}

int cli_grammar(const cli_settings *s, grammar **g) {
	*g = NULL;
	if (!s->grammar_file && !s->json_schema_file) return 0;
	if (s->grammar_file && s->json_schema_file) return cli_usage_error(s, "give one of --grammar and --json-schema");
	const char *path = s->grammar_file ? s->grammar_file : s->json_schema_file;
	size_t len = 0;
	char *text = cli_read_file(path, &len), *gbnf = NULL, err[512];
	if (!text) {
		cli_err("cannot read %s: %s", path, strerror(errno));
		return 1;
	}
	int rc = 0;
	if (s->json_schema_file) {
		json_error_t je;
		json_t *schema = json_loadb(text, len, 0, &je);
		if (!schema) {
			cli_err("%s: line %d: %s", path, je.line, je.text);
			free(text);
			return 1;
		}
		rc = grammar_schema_gbnf(schema, "root", &gbnf, err, sizeof err);
		json_decref(schema);
		free(text);
		if (rc) {
			cli_err("%s: %s", path, err);
			return 1;
		}
		text = gbnf;
		len = strlen(gbnf);
	}
	rc = grammar_compile(g, text, len, NULL, err, sizeof err);
	free(text);
	if (rc) {
		cli_err("%s: %s", s->json_schema_file ? "the schema's grammar" : path, err);
		return 1;
	}
	return 0;
}

int cli_sampling(const cli_settings *s, lane_sampling *sp) {
	sp->dry_multiplier = (float)s->dry_multiplier;
	sp->dry_base = (float)s->dry_base;
	sp->dry_allowed_length = (int32_t)s->dry_allowed_length;
	sp->dry_penalty_last_n = (int32_t)s->dry_penalty_last_n;
	if (s->dry_breaker.n) {
		const bool none = s->dry_breaker.n == 1 && !strcmp(s->dry_breaker.v[0], "none");
		sp->dry_breakers = none ? NULL : s->dry_breaker.v;
		sp->n_dry_breakers = none ? 0 : s->dry_breaker.n;
		for (int32_t i = 0; i < sp->n_dry_breakers; i++)
			if (!*sp->dry_breakers[i] || strlen(sp->dry_breakers[i]) > LANE_DRY_BREAKER_MAX)
				return cli_usage_error(s, "--dry-sequence-breaker must be 1..%d bytes", LANE_DRY_BREAKER_MAX);
	}
	sp->xtc_probability = (float)s->xtc_probability;
	sp->xtc_threshold = (float)s->xtc_threshold;
	sp->top_n_sigma = (float)s->top_n_sigma;
	sp->dynatemp_range = (float)s->dynatemp_range;
	sp->dynatemp_exponent = (float)s->dynatemp_exp;
	sp->mirostat = (int32_t)s->mirostat;
	sp->mirostat_tau = (float)s->mirostat_ent;
	sp->mirostat_eta = (float)s->mirostat_lr;
	if (s->samplers && s->sampling_seq) return cli_usage_error(s, "give one of --samplers and --sampling-seq");
	if ((s->samplers && !*s->samplers) || (s->sampling_seq && !*s->sampling_seq))
		return cli_usage_error(s, "--samplers and --sampling-seq name at least one sampler (leave them out for the default order)");
	sp->n_samplers = 0;
	for (const char *p = s->samplers; p && *p;) {
		const size_t n = strcspn(p, ";");
		char name[32];
		const int st = n < sizeof name ? (memcpy(name, p, n), name[n] = 0, sample_stage_named(name)) : -1;
		if (st < 0)
			return cli_usage_error(s, "--samplers: '%.*s' is not a sampler (penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, "
				"temperature)", (int)n, p);
		if (sp->n_samplers == LANE_MAX_SAMPLERS) return cli_usage_error(s, "--samplers: at most %d", LANE_MAX_SAMPLERS);
		sp->samplers[sp->n_samplers++] = (uint8_t)st;
		p += n + (p[n] == ';');
	}
	for (const char *p = s->sampling_seq; p && *p; p++) {
		const int st = sample_stage_letter(*p);
		if (st < 0) return cli_usage_error(s, "--sampling-seq: '%c' is not a sampler's letter (e d s k y p m x t)", *p);
		if (sp->n_samplers == LANE_MAX_SAMPLERS) return cli_usage_error(s, "--sampling-seq: at most %d", LANE_MAX_SAMPLERS);
		sp->samplers[sp->n_samplers++] = (uint8_t)st;
	}
	return 0;
}
