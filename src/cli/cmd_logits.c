// cli: `lanes logits -m MODEL --ids 1,2,3 -o OUT.f32 [--threads T]` — the float32 logits of
// every prompt position, row-major [positions][vocab], little-endian.
#include "base/base.h"
#include "cli/cli.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>

int cmd_logits(int argc, char **argv) {
	const char *model_path = NULL, *ids_arg = NULL, *out_path = NULL, *kv_name = "f16s";
	int64_t threads = 0, chunk = 256;
	bool help = false;
	const cli_opt opts[] = {
		{"-m|--model", CLI_STR, &model_path, "GGUF model file"},
		{"--ids", CLI_STR, &ids_arg, "token ids: 1,2,3"},
		{"-o|--output", CLI_STR, &out_path, "output file: float32 [positions][vocab]"},
		{"-t|--threads", CLI_INT, &threads, "threads (default: number of cores)"},
		{"--kv|--kv-type", CLI_STR, &kv_name, "kv cache type: f16s (default), f16, q8_0 or q4_0"},
		{"--chunk", CLI_INT, &chunk, "positions per forward pass (default 256; results do not depend on it)"},
		{"-h|--help", CLI_FLAG, &help, "show this help"},
	};
	const int nopts = sizeof opts / sizeof opts[0];
	int npos;
	if (cli_parse(argc, argv, opts, nopts, NULL, 0, &npos)) return 2;
	if (help || !model_path || !ids_arg || !out_path || chunk < 1) {
		cli_usage("lanes logits -m MODEL --ids 1,2,3 -o OUT.f32 [--threads T]", opts, nopts);
		return help ? 0 : 2;
	}
	enum kv_type kvt;
	if (cli_kv_type(kv_name, &kvt)) return 2;
	char err[512];
	int rc = 1;
	model *m = NULL;
	lanes_pool *pool = NULL;
	kv_cache *kv = NULL;
	int32_t *ids = NULL;
	size_t n = 0;
	float *logits = NULL;
	model_row *rows = NULL;
	FILE *f = NULL;
	if (cli_parse_ids(ids_arg, &ids, &n)) goto out;
	if (n > INT32_MAX / 2) {
		fprintf(stderr, "lanes logits: too many ids\n");
		goto out;
	}
	if (model_load(&m, model_path, err, sizeof err)) {
		fprintf(stderr, "lanes logits: %s\n", err);
		goto out;
	}
	const int64_t V = model_hparams_of(m)->n_vocab;
	if (cli_threads(threads, &pool)) goto out;
	kv_config kc = model_kv_config(m, kvt, 1, (int32_t)n, 16);
	if (kv_new(&kv, &kc, err, sizeof err)) {
		fprintf(stderr, "lanes logits: %s\n", err);
		goto out;
	}
	const int64_t c = chunk < (int64_t)n ? chunk : (int64_t)n;
	logits = malloc((size_t)(c * V) * sizeof *logits);
	rows = malloc((size_t)c * sizeof *rows);
	if (!logits || !rows) {
		fprintf(stderr, "lanes logits: out of memory\n");
		goto out;
	}
	if (!(f = fopen(out_path, "wb"))) {
		perror(out_path);
		goto out;
	}
	for (int64_t i0 = 0; i0 < (int64_t)n; i0 += c) {
		const int64_t k = (int64_t)n - i0 < c ? (int64_t)n - i0 : c;
		for (int64_t i = 0; i < k; i++) rows[i] = (model_row){ids[i0 + i], (int32_t)(i0 + i), 0, true};
		if (model_forward(m, kv, pool, rows, k, logits, err, sizeof err)) {
			fprintf(stderr, "lanes logits: %s\n", err);
			goto out;
		}
		// The file is little-endian float32, as is every machine lanes runs on.
		if (fwrite(logits, sizeof *logits, (size_t)(k * V), f) != (size_t)(k * V)) {
			perror(out_path);
			goto out;
		}
	}
	if (fclose(f)) {
		f = NULL;
		perror(out_path);
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
	lanes_pool_free(pool);
	model_free(m);
	return rc;
}
