// tests: LoRA adapters, once per kernel set the CPU runs — logits with an adapter against a
// model whose weights were merged in float64 (the golden tolerance), B = 0 against the base bit
// for bit, rows of different adapters (and none) in one pass against each row alone, and
// clear errors naming the tensor for corrupt or mismatched adapter files.
#include "t.h"

#include "cli/cli.h"
#include "model/model.h"

#include <jansson.h>
#include <math.h>
#include <unistd.h>

static char base_path[512];
static float tol; // the golden bar of the base model: 1.10 x llama.cpp's max error + 0.01

// `lanes gen --lora RANK -m BASE -o OUT --type TYPE --seed S [--lora-zero-b]`.
static int gen_adapter(const char *out, int rank, const char *type, int seed, bool zero_b) {
	char r[16], sd[16];
	snprintf(r, sizeof r, "%d", rank);
	snprintf(sd, sizeof sd, "%d", seed);
	char *argv[] = {"gen", "--lora", r, "-m", base_path, "-o", (char *)out, "--type", (char *)type, "--seed", sd,
			zero_b ? "--lora-zero-b" : NULL, NULL};
	const int argc = zero_b ? 12 : 11;
	static const cli_command c = {CMD_GEN, "gen", cmd_gen, "", "", 0};
	cli_settings s;
	const int rc = cli_setup(&c, argc, argv, &s);
	return rc >= 0 ? rc : cmd_gen(&s);
}

static void tmp_path(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/lanes-lora-%d-%s", t_tmp(), (int)getpid(), name); }

// Runs each sequence's prompt in one pass (rows of all sequences interleaved), then one
// decode row per sequence; logits of every row, sequence by sequence, into out.
static int run_seqs(const model *m, base_pool *pool, int nseq, const int32_t *const *ids, int P,
		    const model_lora_set *const *sets, float *out) {
	char err[256];
	const int V = model_hparams_of(m)->n_vocab;
	kv_config c = model_kv_config(m, KV_F16S, nseq, P + 16, 16);
	kv_cache *kv;
	if (kv_new(&kv, &c, err, sizeof err)) return -1;
	model_row *rows = calloc((size_t)nseq * (size_t)P, sizeof *rows);
	float *lg = malloc((size_t)nseq * (size_t)P * (size_t)V * sizeof *lg);
	int rc = 0;
	for (int i = 0; i < P; i++)
		for (int q = 0; q < nseq; q++) rows[i * nseq + q] = (model_row){ids[q][i], i, q, true, sets[q]};
	if ((rc = model_forward(m, kv, pool, rows, (int64_t)nseq * P, lg, err, sizeof err))) goto out;
	for (int i = 0; i < P; i++)
		for (int q = 0; q < nseq; q++)
			memcpy(out + ((size_t)q * (P + 1) + i) * V, lg + ((size_t)i * nseq + q) * V, (size_t)V * sizeof *lg);
	for (int q = 0; q < nseq; q++) rows[q] = (model_row){ids[q][P], P, q, true, sets[q]};
	if ((rc = model_forward(m, kv, pool, rows, nseq, lg, err, sizeof err))) goto out;
	for (int q = 0; q < nseq; q++) memcpy(out + ((size_t)q * (P + 1) + P) * V, lg + (size_t)q * V, (size_t)V * sizeof *lg);
out:
	if (rc) fprintf(stderr, "forward: %s\n", err);
	free(lg);
	free(rows);
	kv_free(kv);
	return rc;
}

static const int32_t prompt[17] = {1, 307, 379, 269, 61, 224, 158, 223, 503, 102, 506, 349, 425, 268, 58, 463, 389};
#define P 16

static float max_diff(const float *a, const float *b, size_t n) {
	float mx = 0;
	for (size_t i = 0; i < n; i++) {
		const float d = fabsf(a[i] - b[i]);
		if (!(d <= mx)) mx = d;
	}
	return mx;
}

// Writes base + scale * B A (float64, as F32) for every pair of the adapter file to path.
static int write_merged(const char *adapter, float scale, const char *path) {
	char err[256];
	gguf *b = NULL, *a = NULL;
	gguf_writer *w = gguf_writer_new();
	int rc = gguf_open(&b, base_path, err, sizeof err) || gguf_open(&a, adapter, err, sizeof err) || !w ||
		 gguf_writer_copy_kv(w, b, NULL);
	float alpha = 0;
	gguf_get_f32(a, "adapter.lora.alpha", &alpha);
	for (int64_t i = 0; !rc && i < gguf_n_tensors(b); i++) {
		const gguf_tensor *t = gguf_tensor_at(b, i);
		char na[160], nb[160];
		snprintf(na, sizeof na, "%s.lora_a", t->name);
		snprintf(nb, sizeof nb, "%s.lora_b", t->name);
		const gguf_tensor *ta = gguf_find_tensor(a, na), *tb = gguf_find_tensor(a, nb);
		if (!ta) {
			rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
			continue;
		}
		const int64_t n_in = t->ne[0], n_out = t->ne[1], r = ta->ne[1];
		float *A = malloc((size_t)(r * n_in) * 4), *B = malloc((size_t)(n_out * r) * 4), *W = malloc((size_t)(n_out * n_in) * 4);
		rc = t->type != GGUF_T_F32 || tensor_dequantize_rows(ta->type, ta->data, A, r, n_in, NULL) ||
		     tensor_dequantize_rows(tb->type, tb->data, B, n_out, r, NULL);
		const double s = alpha != 0 ? (double)scale * alpha / (double)r : scale;
		const float *w0 = t->data;
		for (int64_t o = 0; !rc && o < n_out; o++)
			for (int64_t k = 0; k < n_in; k++) {
				double d = 0;
				for (int64_t j = 0; j < r; j++) d += (double)B[o * r + j] * (double)A[j * n_in + k];
				W[o * n_in + k] = (float)((double)w0[o * n_in + k] + s * d);
			}
		if (!rc) rc = gguf_writer_add_tensor(w, t->name, GGUF_T_F32, t->n_dims, t->ne, W, (uint64_t)(n_out * n_in) * 4);
		free(A), free(B), free(W);
	}
	if (!rc) rc = gguf_writer_write(w, path, err, sizeof err);
	if (rc) fprintf(stderr, "merge: %s\n", err);
	gguf_writer_free(w);
	gguf_free(a);
	gguf_free(b);
	return rc;
}

static model *load(const char *path) {
	char err[512];
	model *m = NULL;
	if (model_load(&m, path, err, sizeof err)) fprintf(stderr, "%s\n", err);
	return m;
}

static model_lora *load_lora(const model *m, const char *path) {
	char err[512];
	model_lora *a = NULL;
	if (model_lora_load(&a, m, path, err, sizeof err)) fprintf(stderr, "%s\n", err);
	return a;
}

// Adapter logits equal the merged model's within the golden bar, and differ from the base's.
static void accuracy(const model *m, const char *type, int rank, float scale) {
	t_case("%s %s r%d", tensor_kernels_name(model_kernels(m)), type, rank);
	char ap[512], mp[512];
	tmp_path(ap, sizeof ap, "acc.gguf");
	tmp_path(mp, sizeof mp, "merged.gguf");
	CHECK(gen_adapter(ap, rank, type, 11, false) == 0);
	CHECK(write_merged(ap, scale, mp) == 0);
	model *merged = load(mp);
	model_lora *a = load_lora(m, ap);
	CHECK(merged && a);
	if (merged && a) {
		const int V = model_hparams_of(m)->n_vocab;
		const size_t nv = (size_t)(P + 1) * V;
		float *la = malloc(nv * 4), *lm = malloc(nv * 4), *lb = malloc(nv * 4);
		model_lora_set set = {.n = 1, .use = {{a, scale}}};
		const int32_t *ids[1] = {prompt};
		const model_lora_set *with[1] = {&set}, *none[1] = {NULL};
		CHECK(run_seqs(m, NULL, 1, ids, P, with, la) == 0);
		CHECK(run_seqs(merged, NULL, 1, ids, P, none, lm) == 0);
		CHECK(run_seqs(m, NULL, 1, ids, P, none, lb) == 0);
		const float d = max_diff(la, lm, nv), moved = max_diff(la, lb, nv);
		printf("%-7s %-5s r%-3d adapter vs merged: max %.5f (bar %.5f); adapter vs base: max %.3f\n",
		       tensor_kernels_name(model_kernels(m)), type, rank, d, tol, moved);
		CHECKF(d <= tol, "adapter vs merged: max error %.6f > %.6f", d, tol);
		CHECKF(moved > 10 * tol, "the adapter moves the logits by %.6f only", moved);
		free(la), free(lm), free(lb);
	}
	model_lora_free(a);
	model_free(merged);
	remove(ap);
	remove(mp);
}

// B = 0: the base's logits, bit for bit; rows of two adapters, both, and none in one pass:
// each the logits it gets alone.
static void exactness(const model *m) {
	t_case("%s", tensor_kernels_name(model_kernels(m)));
	char p0[512], p1[512], p2[512];
	tmp_path(p0, sizeof p0, "zero.gguf");
	tmp_path(p1, sizeof p1, "a1.gguf");
	tmp_path(p2, sizeof p2, "a2.gguf");
	CHECK(gen_adapter(p0, 8, "F16", 3, true) == 0);
	CHECK(gen_adapter(p1, 8, "F32", 5, false) == 0);
	CHECK(gen_adapter(p2, 32, "Q8_0", 7, false) == 0);
	model_lora *z = load_lora(m, p0), *a1 = load_lora(m, p1), *a2 = load_lora(m, p2);
	CHECK(z && a1 && a2);
	if (!z || !a1 || !a2) goto out;
	const int V = model_hparams_of(m)->n_vocab;
	const size_t nv = (size_t)(P + 1) * V;
	const model_lora_set sz = {.n = 1, .use = {{z, 2.0f}}}, s1 = {.n = 1, .use = {{a1, 1.0f}}},
			     s2 = {.n = 1, .use = {{a2, 0.5f}}}, s12 = {.n = 2, .use = {{a1, 1.0f}, {a2, 0.5f}}};
	int32_t other[P + 1];
	for (int i = 0; i <= P; i++) other[i] = (prompt[i] * 7 + 3) % V;
	const int32_t *ids[5] = {prompt, other, prompt, other, prompt};
	const model_lora_set *sets[5] = {&s1, &s2, NULL, &s12, &sz};
	float *solo = malloc(5 * nv * 4), *mixed = malloc(5 * nv * 4), *base = malloc(nv * 4);
	for (int q = 0; q < 5; q++) CHECK(run_seqs(m, NULL, 1, &ids[q], P, &sets[q], solo + q * nv) == 0);
	CHECK(run_seqs(m, NULL, 5, ids, P, sets, mixed) == 0);
	const model_lora_set *none[1] = {NULL};
	CHECK(run_seqs(m, NULL, 1, ids, P, none, base) == 0);
	CHECKF(!memcmp(solo + 4 * nv, base, nv * 4), "B = 0: logits differ from the base's");
	for (int q = 0; q < 5; q++) CHECKF(!memcmp(solo + q * nv, mixed + q * nv, nv * 4), "sequence %d: mixed pass differs from alone", q);
	// threads split the adapters' rows (and one adapter's rows into pieces): the same bits
	for (int nth = 2; nth <= 3; nth++) {
		base_pool *pool = NULL;
		CHECK(base_pool_new(&pool, nth) == 0);
		CHECK(run_seqs(m, pool, 5, ids, P, sets, mixed) == 0);
		for (int q = 0; q < 5; q++)
			CHECKF(!memcmp(solo + q * nv, mixed + q * nv, nv * 4), "%d threads, sequence %d: differs from alone", nth, q);
		const model_lora_set *one[5] = {&s2, &s2, &s2, &s2, &s2};
		float *alone = malloc(nv * 4);
		CHECK(run_seqs(m, pool, 5, ids, P, one, mixed) == 0);
		CHECK(run_seqs(m, NULL, 1, &ids[1], P, &one[1], alone) == 0);
		CHECKF(!memcmp(alone, mixed + nv, nv * 4), "%d threads, one adapter's rows in pieces: differs from alone", nth);
		free(alone);
		base_pool_free(pool);
	}
	CHECKF(memcmp(solo, solo + 3 * nv, nv * 4) != 0, "two adapters give what one gives");
	// a row may not carry an adapter loaded for another model
	model *other_m = load(base_path);
	char err[256];
	kv_config c = model_kv_config(other_m, KV_F16S, 1, 32, 16);
	kv_cache *kv = NULL;
	CHECK(other_m && kv_new(&kv, &c, err, sizeof err) == 0);
	if (other_m && kv) {
		model_row row = {1, 0, 0, true, &s1};
		CHECK(model_forward(other_m, kv, NULL, &row, 1, base, err, sizeof err) == LANES_EINVAL);
		CHECKF(strstr(err, "another model") != NULL, "%s", err);
		CHECK(kv_seq_len(kv, 0) == 0);
	}
	kv_free(kv);
	model_free(other_m);
	free(solo), free(mixed), free(base);
out:
	model_lora_free(z), model_lora_free(a1), model_lora_free(a2);
	remove(p0), remove(p1), remove(p2);
}

// Rewrites the adapter at src into dst with one change; what: see below.
enum corrupt { C_MISSING_B, C_SHAPE, C_RANK, C_ARCH, C_GTYPE, C_ATYPE, C_TARGET, C_SUFFIX, C_QTYPE, C_TRUNCATE };

static int corrupt(const char *src, const char *dst, enum corrupt what) {
	char err[256];
	gguf *g;
	if (gguf_open(&g, src, err, sizeof err)) return -1;
	gguf_writer *w = gguf_writer_new();
	int rc = gguf_writer_copy_kv(w, g, NULL);
	if (what == C_ARCH) rc |= gguf_writer_set_str(w, "general.architecture", "qwen2");
	if (what == C_GTYPE) rc |= gguf_writer_set_str(w, "general.type", "model");
	if (what == C_ATYPE) rc |= gguf_writer_set_str(w, "adapter.type", "control_vector");
	for (int64_t i = 0; !rc && i < gguf_n_tensors(g); i++) {
		const gguf_tensor *t = gguf_tensor_at(g, i);
		int64_t ne[2] = {t->ne[0], t->ne[1]};
		char name[160];
		snprintf(name, sizeof name, "%s", t->name);
		uint32_t type = t->type;
		const void *data = t->data;
		uint64_t nb = t->nbytes;
		void *q = NULL;
		if (what == C_MISSING_B && !strcmp(name, "blk.1.attn_k.weight.lora_b")) continue;
		if (what == C_SHAPE && !strcmp(name, "blk.0.ffn_up.weight.lora_b")) ne[1] /= 2, nb /= 2;
		if (what == C_RANK && !strcmp(name, "blk.0.attn_q.weight.lora_b")) ne[0] /= 2, ne[1] *= 2;
		if (what == C_TARGET && !strncmp(name, "blk.2.attn_v.weight", 19)) memcpy(name, "blk.2.attn_z", 12);
		if (what == C_SUFFIX && !strcmp(name, "blk.3.ffn_down.weight.lora_a")) strcat(name, "x");
		if (what == C_QTYPE && !strcmp(name, "blk.0.attn_output.weight.lora_a")) {
			q = malloc(nb);
			tensor_quantize_rows(GGUF_T_Q4_0, data, q, ne[1], ne[0], NULL);
			type = GGUF_T_Q4_0, data = q, nb = (uint64_t)ne[1] * tensor_row_bytes(GGUF_T_Q4_0, ne[0]);
		}
		rc = gguf_writer_add_tensor(w, name, type, 2, ne, data, nb);
		free(q);
	}
	if (!rc) rc = gguf_writer_write(w, dst, err, sizeof err);
	gguf_writer_free(w);
	gguf_free(g);
	if (!rc && what == C_TRUNCATE) {
		size_t len;
		char *b = t_read_file(dst, &len);
		FILE *f = fopen(dst, "wb");
		rc = !b || !f || fwrite(b, 1, len * 9 / 10, f) != len * 9 / 10;
		if (f) fclose(f);
		free(b);
	}
	return rc;
}

static void errors(const model *m) {
	t_case("errors");
	char src[512], dst[512], err[768];
	tmp_path(src, sizeof src, "good.gguf");
	tmp_path(dst, sizeof dst, "bad.gguf");
	CHECK(gen_adapter(src, 8, "F32", 1, false) == 0);
	const struct {
		enum corrupt what;
		const char *want; // the message names this
	} cases[] = {
		{C_MISSING_B, "blk.1.attn_k.weight.lora_a"}, {C_SHAPE, "blk.0.ffn_up.weight.lora_b"},
		{C_RANK, "blk.0.attn_q.weight.lora_b"}, {C_ARCH, "qwen2"}, {C_GTYPE, "general.type"},
		{C_ATYPE, "adapter.type"}, {C_TARGET, "blk.2.attn_z.weight.lora_"}, {C_SUFFIX, "blk.3.ffn_down.weight.lora_ax"},
		{C_QTYPE, "blk.0.attn_output.weight.lora_a"}, {C_TRUNCATE, "run past the end"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		CHECK(corrupt(src, dst, cases[i].what) == 0);
		model_lora *a = NULL;
		err[0] = 0;
		const int rc = model_lora_load(&a, m, dst, err, sizeof err);
		printf("  %s\n", err);
		CHECKF(rc < 0 && !a && strstr(err, cases[i].want) && strstr(err, dst), "case %zu: rc %d, '%s' (wants '%s')", i, rc, err,
		       cases[i].want);
		model_lora_free(a);
	}
	// an adapter for another base: a llama of other shapes, a model file that is no adapter
	char other[512];
	snprintf(other, sizeof other, "%s/models/stories260K.gguf", t_shared());
	snprintf(base_path, sizeof base_path, "%s", other);
	CHECK(gen_adapter(dst, 4, "F32", 1, false) == 0);
	snprintf(base_path, sizeof base_path, "%s/models/ref-llama-F32.gguf", t_shared());
	model_lora *a = NULL;
	CHECK(model_lora_load(&a, m, dst, err, sizeof err) < 0 && !a);
	CHECKF(strstr(err, ".lora_") != NULL, "%s", err);
	CHECK(model_lora_load(&a, m, base_path, err, sizeof err) < 0 && !a);
	CHECKF(strstr(err, "general.type"), "%s", err);
	CHECK(model_lora_load(&a, m, "/nonexistent/x.gguf", err, sizeof err) < 0 && !a);
	remove(src), remove(dst);
}

int main(void) {
	if (cli_env_apply()) return 2;
	snprintf(base_path, sizeof base_path, "%s/models/ref-llama-F32.gguf", t_shared());
	char gp[512];
	snprintf(gp, sizeof gp, "%s/golden/ref-llama-F32/golden.json", t_shared());
	json_error_t je;
	json_t *g = json_load_file(gp, 0, &je);
	CHECKF(g != NULL, "%s: %s", gp, je.text);
	if (!g) T_DONE("lora");
	tol = (float)(1.10 * json_real_value(json_object_get(g, "llamacpp_max_abs_err")) + 0.01);
	json_decref(g);
	const char *sets[8];
	const int ns = tensor_kernels_available(sets, 8);
	for (int k = 0; k < ns; k++) {
		CHECK(tensor_kernels_select(sets[k]) == 0);
		model *m = load(base_path);
		CHECK(m != NULL);
		if (!m) continue;
		accuracy(m, "F32", 8, 1.0f);
		accuracy(m, "F16", 16, 0.75f);
		accuracy(m, "BF16", 4, 2.0f);
		accuracy(m, "Q8_0", 32, 1.0f);
		exactness(m);
		if (k == ns - 1) errors(m);
		model_free(m);
	}
	T_DONE("lora");
}
