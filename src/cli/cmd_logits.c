// cli: `lanes logits -m MODEL --ids 1,2,3 -o OUT.f32 [--lora PATH[:SCALE]] [--threads T]` — the
// float32 logits of every prompt position, row-major [positions][vocab], little-endian.
#include "base/base.h"
#include "cli/cli.h"
#include "model/model.h"

#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

int cmd_logits(const cli_settings *s) {
	const char *out_path = s->output;
	const enum kv_type kvt = cli_kv_type(s->kv_type);
	char err[512];
	int rc = 1;
	model *m = NULL;
	base_pool *pool = NULL;
	kv_cache *kv = NULL;
	int32_t *ids = NULL;
	size_t n = 0;
	float *logits = NULL;
	model_row *rows = NULL;
	FILE *f = NULL;
	model_lora **loras = NULL;
	model_lora_set set = {0};
	if (cli_parse_ids(s->ids, &ids, &n)) goto out;
	if (n > INT32_MAX / 2) {
		cli_err("too many ids");
		goto out;
	}
	if (cli_load_model(s->model, &m, NULL)) goto out;
	model_set_context(m, (int32_t)n); // the positions given are the context in use
	if (cli_load_loras(m, &s->lora, &set, &loras)) goto out;
	const int64_t V = model_hparams_of(m)->n_vocab;
	if (cli_threads(s->threads, &pool)) goto out;
	kv_config kc = model_kv_config(m, kvt, 1, (int32_t)n, 16);
	if (kv_new(&kv, &kc, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	const int64_t c = s->chunk < (int64_t)n ? s->chunk : (int64_t)n;
	logits = malloc((size_t)(c * V) * sizeof *logits);
	rows = malloc((size_t)c * sizeof *rows);
	if (!logits || !rows) {
		cli_err("out of memory");
		goto out;
	}
	if (!(f = fopen(out_path, "wb"))) {
		cli_err("%s: %s", out_path, strerror(errno));
		goto out;
	}
	for (int64_t i0 = 0; i0 < (int64_t)n; i0 += c) {
		const int64_t k = (int64_t)n - i0 < c ? (int64_t)n - i0 : c;
		for (int64_t i = 0; i < k; i++) rows[i] = (model_row){ids[i0 + i], (int32_t)(i0 + i), 0, true, set.n ? &set : NULL};
		if (model_forward(m, kv, pool, rows, k, logits, err, sizeof err)) {
			cli_err("%s", err);
			goto out;
		}
		// The file is little-endian float32, as is every machine lanes runs on.
		if (fwrite(logits, sizeof *logits, (size_t)(k * V), f) != (size_t)(k * V)) {
			cli_err("%s: %s", out_path, strerror(errno));
			goto out;
		}
	}
	if (fclose(f)) {
		f = NULL;
		cli_err("%s: %s", out_path, strerror(errno));
		goto out;
	}
	f = NULL;
	LOG_INFO("logits", "%zu positions x %lld logits -> %s", n, (long long)V, out_path);
	rc = 0;
out:
	if (f) fclose(f);
	free(rows);
	free(logits);
	free(ids);
	kv_free(kv);
	base_pool_free(pool);
	cli_free_loras(loras, set.n);
	model_free(m);
	return rc;
}
