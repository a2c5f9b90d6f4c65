// tests: LoRA adapters, once per kernel set the CPU runs — logits with an adapter against a
// model whose weights were merged in float64 (the golden tolerance), B = 0 against the base bit
// for bit, rows of different adapters (and none) in one pass against each row alone, and
// clear errors naming the tensor for corrupt or mismatched adapter files.
#include "t.h"
#include "gen.h"

#include "cli/cli.h"
#include "lanes/lanes.h"
#include "model/model.h"
#include "model/loras.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
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

// ---- the lane host and the server's registry -------------------------------------------------
// stories260K, its adapters, and 16 requests over three adapters and the base model.
#define NQ 16
#define QGEN 24

typedef struct {
	int32_t prompt[64];
	lane_request q;
} qspec;

typedef struct {
	int32_t ids[QGEN + 1];
	int32_t n, cached, terminals;
	enum lane_ev_kind end;
	char sha[65];
} qres;

static model *SM;
static tok_vocab *SV;
static const model *SDRAFT;
static double ROW_US, FIXED_US; // pricing of hosts made by mk_host (0: timed at start)

static lane_host *mk_host(int lanes, int piece, bool cache, int threads) {
	lane_config c;
	lane_config_default(&c);
	c.row_us = ROW_US;
	c.fixed_us = FIXED_US;
	c.lanes = lanes;
	c.piece = piece;
	c.prefix_cache = cache;
	c.threads = threads;
	c.ctx = 2048;
	c.draft_model = SDRAFT;
	char err[256];
	lane_host *h = NULL;
	CHECKF(lane_host_new(&h, SM, SV, &c, err, sizeof err) == 0, "lane_host_new: %s", err);
	return h;
}

static void q_collect(lane_req *r, qres *out) {
	memset(out, 0, sizeof *out);
	lane_event ev;
	while (lane_next(r, &ev, 60 * 1000000) == 1) {
		if (ev.kind == LANE_EV_TOKEN) {
			if (out->n <= QGEN) out->ids[out->n] = ev.token;
			out->n++;
			continue;
		}
		out->terminals++;
		out->end = ev.kind;
		out->cached = ev.n_cached;
		memcpy(out->sha, ev.token_sha, 65);
		if (lane_next(r, &ev, 0) == 1) out->terminals++;
		break;
	}
}

// Runs requests [from, from + n) of s on h, all submitted at once or one by one.
static void q_run(lane_host *h, qspec *s, int from, int n, qres *out, bool together) {
	lane_req *r[NQ] = {0};
	char err[256];
	for (int i = from; i < from + n; i++) {
		CHECKF(lane_submit(h, &s[i].q, &r[i], err, sizeof err) == 0, "submit %d: %s", i, err);
		if (!together && r[i]) q_collect(r[i], &out[i]), lane_req_free(r[i]), r[i] = NULL;
	}
	for (int i = from; i < from + n; i++)
		if (r[i]) q_collect(r[i], &out[i]), lane_req_free(r[i]);
}

static bool q_same(const qres *a, const qres *b) {
	return a->terminals == 1 && b->terminals == 1 && a->end == b->end && a->n == b->n && !strcmp(a->sha, b->sha) &&
	       !memcmp(a->ids, b->ids, sizeof(int32_t) * (size_t)(a->n < QGEN ? a->n : QGEN));
}

// Request i adds sets[i % 4]: none, A, B at 0.5, then C after A; every prompt starts with one
// 40-token head (a prefix each set caches for itself), every third repeats a phrase (n-gram
// drafts), greedy and seeded sampling alternate.
static void q_specs(qspec *s, const model_lora_set *const *sets) {
	const int32_t V = model_hparams_of(SM)->n_vocab;
	uint64_t x = 7;
	for (int i = 0; i < NQ; i++) {
		memset(&s[i], 0, sizeof s[i]);
		const int32_t n = 44 + i % 17;
		s[i].prompt[0] = 1;
		for (int32_t k = 1; k < n; k++) {
			x = splitmix64(x);
			s[i].prompt[k] = k < 40 ? 3 + (k * 37) % (V - 3) : i % 3 == 0 ? s[i].prompt[40 + (k - 40) % 3] : 3 + (int32_t)(x % (uint64_t)(V - 3));
		}
		lane_request *q = &s[i].q;
		lane_request_init(q);
		q->prompt = s[i].prompt;
		q->n_prompt = n;
		q->max_tokens = QGEN;
		q->ignore_eos = true;
		q->draft = false;
		q->sampling.temperature = i % 2 ? 0.8f : 0;
		q->sampling.seed = 100 + (uint64_t)i;
		q->sampling.has_seed = true;
		q->lora = sets[i % 4];
	}
}

static void set_draft(qspec *s, bool on) {
	for (int i = 0; i < NQ; i++) s[i].q.draft = on;
}

// 16 requests over three adapters and the base give the same tokens alone, all at once, in
// prompt pieces, from the prefix cache (each set's own: a prefix cached under one set is never
// another's), drafted by n-grams and by a draft model, on one thread or two.
static void lanes_exact(void) {
	t_case("stories260K");
	char pa[512], pb[512], pc[512], pd[1024], cmd[2048];
	tmp_path(pa, sizeof pa, "la.gguf");
	tmp_path(pb, sizeof pb, "lb.gguf");
	tmp_path(pc, sizeof pc, "lc.gguf");
	CHECK(gen_adapter(pa, 8, "F32", 21, false) == 0);
	CHECK(gen_adapter(pb, 4, "F16", 22, false) == 0);
	CHECK(gen_adapter(pc, 16, "BF16", 23, false) == 0);
	model_lora *A = load_lora(SM, pa), *B = load_lora(SM, pb), *C = load_lora(SM, pc);
	CHECK(A && B && C);
	if (!A || !B || !C) goto out;
	const model_lora_set sa = {1, {{A, 1.0f}}}, sb = {1, {{B, 0.5f}}}, sc = {2, {{A, 1.0f}, {C, 1.5f}}};
	const model_lora_set *sets[4] = {NULL, &sa, &sb, &sc};
	static qspec s[NQ];
	static qres solo[NQ], conc[NQ], pieces[NQ], warm[NQ], cached[NQ], cross[NQ], ngram[NQ], dmodel[NQ];
	q_specs(s, sets);
	lane_host *h = mk_host(1, 0, false, 2);
	q_run(h, s, 0, NQ, solo, false);
	lane_host_free(h);
	h = mk_host(8, 0, false, 2);
	q_run(h, s, 0, NQ, conc, true);
	lane_host_free(h);
	h = mk_host(5, 3, false, 2);
	q_run(h, s, 0, NQ, pieces, true);
	lane_host_free(h);
	// the prefix cache: base requests first, then every set's; then all of them again
	h = mk_host(4, 0, true, 1);
	for (int i = 0; i < NQ; i += 4) q_run(h, s, i, 1, warm, false);
	for (int i = 0; i < NQ; i++)
		if (i % 4) q_run(h, s, i, 1, warm, false);
	q_run(h, s, 0, NQ, cached, true);
	lane_host_free(h);
	// a reload of A is a new adapter: the head cached under the first never serves it
	model_lora *A2 = load_lora(SM, pa);
	const model_lora_set sa2 = {1, {{A2, 1.0f}}};
	h = mk_host(2, 0, true, 2);
	q_run(h, s, 1, 1, cross, false);
	qspec again = s[1];
	again.q.lora = &sa2;
	lane_req *r = NULL;
	char err[256];
	CHECK(A2 && lane_submit(h, &again.q, &r, err, sizeof err) == 0);
	if (r) q_collect(r, &cross[5]), lane_req_free(r);
	lane_host_free(h);
	model_lora_free(A2);
	set_draft(s, true);
	// priced as a model whose rows are nearly free: every round drafts, whatever this machine's speed
	ROW_US = 1, FIXED_US = 1000;
	h = mk_host(8, 0, false, 2);
	q_run(h, s, 0, NQ, ngram, true);
	lane_snapshot snap;
	lane_host_snapshot(h, &snap);
	lane_host_free(h);
	CHECKF(snap.draft_accepted[LANE_PROP_NGRAM] > 0, "n-gram drafts were accepted (%llu)", (unsigned long long)snap.draft_accepted[LANE_PROP_NGRAM]);
	// the draft model: stories260K's Q8_0 copy, with no adapter, proposes for every request
	snprintf(pd, sizeof pd, "%s/lanes-lora-draft-%d.gguf", t_tmp(), (int)getpid());
	const char *bin = getenv("LANES_BIN");
	snprintf(cmd, sizeof cmd, "'%s' quantize '%s/models/stories260K.gguf' '%s' Q8_0 >/dev/null 2>&1", bin ? bin : "build/lanes", t_shared(), pd);
	model *dm = NULL;
	CHECKF(system(cmd) == 0 && (dm = load(pd)) != NULL, "the draft model");
	remove(pd);
	SDRAFT = dm;
	if (dm) {
		h = mk_host(8, 0, false, 2);
		q_run(h, s, 0, NQ, dmodel, true);
		lane_host_snapshot(h, &snap);
		lane_host_free(h);
		CHECKF(snap.draft_tokens[LANE_PROP_MODEL] > 0, "the draft model proposed (%llu)", (unsigned long long)snap.draft_tokens[LANE_PROP_MODEL]);
	}
	SDRAFT = NULL;
	ROW_US = FIXED_US = 0;
	model_free(dm);
	set_draft(s, false);
	int hits = 0, adapter_hits = 0;
	for (int i = 0; i < NQ; i++) {
		CHECKF(solo[i].terminals == 1 && solo[i].end == LANE_EV_FINISHED && solo[i].n == QGEN, "request %d ended once with %d tokens", i, QGEN);
		CHECKF(q_same(&solo[i], &conc[i]), "request %d: solo = concurrent", i);
		CHECKF(q_same(&solo[i], &pieces[i]), "request %d: whole = pieces", i);
		CHECKF(q_same(&solo[i], &warm[i]), "request %d: solo = after other sets cached the same head", i);
		CHECKF(q_same(&solo[i], &cached[i]), "request %d: fresh = prefix-cache hit", i);
		CHECKF(q_same(&solo[i], &ngram[i]), "request %d: undrafted = n-gram drafted", i);
		if (dm) CHECKF(q_same(&solo[i], &dmodel[i]), "request %d: undrafted = draft model", i);
		// first of its set in the warm-up: nothing cached under its set yet, though base requests cached its head
		if (i < 4) CHECKF(warm[i].cached == 0, "request %d: no page of another set was attached (%d tokens)", i, warm[i].cached);
		hits += cached[i].cached > 0;
		adapter_hits += i % 4 && cached[i].cached >= 32;
	}
	CHECKF(hits == NQ && adapter_hits == NQ * 3 / 4, "every request, adapters' too, ran from its set's cached head (%d, %d)", hits, adapter_hits);
	CHECKF(q_same(&solo[1], &cross[1]) && q_same(&solo[1], &cross[5]) && cross[5].cached == 0,
	       "a reloaded adapter gets nothing cached under the first load (%d tokens)", cross[5].cached);
	CHECKF(!q_same(&solo[0], &solo[1]) || !q_same(&solo[0], &solo[2]), "adapters change tokens");
out:
	model_lora_free(A), model_lora_free(B), model_lora_free(C);
	remove(pa), remove(pb), remove(pc);
}

// Requests bound to a registry's versions: replacing and then unloading an adapter while its
// requests wait and run changes none of their tokens; the old version is listed as retired
// (with its requests in the snapshot) until the last one ends and is freed then; new binds
// see each change at once.
static void registry_hot(void) {
	t_case("stories260K");
	char pa[512], pb[512], err[256];
	tmp_path(pa, sizeof pa, "ha.gguf");
	tmp_path(pb, sizeof pb, "hb.gguf");
	CHECK(gen_adapter(pa, 8, "F32", 31, false) == 0);
	CHECK(gen_adapter(pb, 8, "F32", 32, false) == 0);
	model_loras *reg = NULL;
	CHECK(model_loras_new(&reg, SM, 2) == 0);
	uint64_t t1 = 0, t2 = 0;
	CHECK(model_loras_reserve(reg, "a", pa, NAN, false, &t1, err, sizeof err) == 0);
	CHECK(model_loras_reserve(reg, "a", pa, NAN, false, &t2, err, sizeof err) == LANES_EBUSY && strstr(err, "loading"));
	CHECK(model_loras_reserve(reg, "b c", pa, NAN, false, &t2, err, sizeof err) == LANES_EINVAL);
	CHECK(model_loras_reserve(reg, "z", pa, 2.0f, false, &t2, err, sizeof err) == 0);
	CHECK(model_loras_reserve(reg, "y", pa, 1.0f, false, &t2, err, sizeof err) == LANES_ELIMIT && strstr(err, "2 adapters are loaded, the most it holds"));
	CHECK(!model_loras_has(reg, "a") && !model_loras_ever(reg));
	bool freed;
	CHECK(model_loras_remove(reg, "a", &freed) == LANES_EBUSY);
	model_loras_publish(reg, "z", 999, NULL, NULL); // a stale ticket changes nothing
	model_loras_publish(reg, "z", t2, NULL, NULL);  // a failed first load frees the name
	model_loras_entry *v = NULL;
	CHECK(model_loras_list(reg, &v) == 1 && v && v[0].state == MODEL_LORAS_LOADING && v[0].id == 0);
	free(v);
	uint32_t ver = 0;
	model_loras_publish(reg, "a", t1, load_lora(SM, pa), &ver);
	CHECK(ver == 1 && model_loras_has(reg, "a") && model_loras_ever(reg));
	static qspec s[NQ];
	static qres with_a[NQ], with_b[NQ], hot[NQ], blocker_res;
	const model_lora_set *none[4] = {NULL, NULL, NULL, NULL};
	q_specs(s, none);
	model_lora_set set[NQ];
	const model_lora *a;
	float scale;
	// the tokens of version 1 and of version 2, each bound from the registry
	lane_host *h = mk_host(8, 0, false, 2);
	for (int i = 0; i < 8; i++) {
		CHECK(model_loras_bind(reg, "a", 0, &a, &scale, NULL) == 0 && scale == 1.0f);
		set[i] = (model_lora_set){1, {{a, scale}}};
		s[i].q.lora = &set[i];
		s[8 + i].q = s[i].q;
	}
	q_run(h, s, 0, 8, with_a, true);
	for (int i = 0; i < 8; i++) model_lora_free(set[i].use[0].lora);
	// one lane, held by a long request: eight requests on version 1 wait behind it
	lane_host *h1 = mk_host(1, 0, false, 2);
	lane_request long_q = s[0].q;
	long_q.lora = NULL;
	long_q.max_tokens = 1500;
	lane_req *blocker = NULL, *r[8] = {0};
	CHECK(lane_submit(h1, &long_q, &blocker, err, sizeof err) == 0);
	for (int i = 0; i < 8; i++) {
		CHECK(model_loras_bind(reg, NULL, 0, &a, &scale, NULL) == 0);
		set[i] = (model_lora_set){1, {{a, scale}}};
		CHECK(lane_submit(h1, &s[i].q, &r[i], err, sizeof err) == 0);
		model_lora_free(a); // each request holds its own reference
	}
	const uint64_t v1 = model_lora_id(set[0].use[0].lora);
	uint64_t t3 = 0;
	CHECK(model_loras_reserve(reg, "a", pb, NAN, true, &t3, err, sizeof err) == 0);
	model_loras_publish(reg, "a", t3, load_lora(SM, pb), &ver);
	CHECK(ver == 2);
	for (int i = 0; i < 8; i++) {
		CHECK(model_loras_bind(reg, "a", 0, &a, &scale, NULL) == 0 && model_lora_id(a) != v1);
		set[8 + i] = (model_lora_set){1, {{a, scale}}};
		s[8 + i].q.lora = &set[8 + i];
	}
	CHECK(model_loras_remove(reg, "a", &freed) == 0 && !freed);
	CHECK(!model_loras_has(reg, "a") && model_loras_bind(reg, "a", 0, &a, &scale, NULL) == LANES_ENOTFOUND);
	const int n = model_loras_list(reg, &v);
	CHECKF(n == 2 && v[0].state == MODEL_LORAS_RETIRED && v[1].state == MODEL_LORAS_RETIRED &&
		       (v[0].lora_id == v1 || v[1].lora_id == v1) && v[0].version + v[1].version == 3,
	       "versions 1 and 2 are listed as retired while requests hold them (%d listed)", n);
	free(v);
	lane_snapshot snap = {0};
	for (int w = 0; w < 500 && !(snap.n_lora == 1 && snap.lora[0].id == v1 && snap.lora[0].waiting == 8); w++) {
		usleep(2000);
		lane_host_snapshot(h1, &snap);
	}
	CHECKF(snap.n_lora == 1 && snap.lora[0].id == v1 && snap.lora[0].waiting == 8 && snap.lora[0].running == 0,
	       "the snapshot counts version 1's waiting requests (%d adapters)", snap.n_lora);
	lane_cancel(blocker);
	q_collect(blocker, &blocker_res);
	lane_req_free(blocker);
	q_run(h, s, 8, 8, with_b, true); // version 2, by the binds taken before it was unloaded
	for (int i = 0; i < 8; i++) {
		model_lora_free(set[8 + i].use[0].lora);
		if (r[i]) q_collect(r[i], &hot[i]), lane_req_free(r[i]);
	}
	for (int w = 0; w < 500 && model_loras_list(reg, &v) > 0; w++) free(v), usleep(2000);
	CHECKF(model_loras_list(reg, &v) == 0 && !v, "every version is freed once its requests ended");
	for (int w = 0; w < 500 && (lane_host_snapshot(h1, &snap), snap.n_lora); w++) usleep(2000);
	CHECKF(snap.n_lora == 0, "the snapshot lists no adapter once every request ended");
	for (int i = 0; i < 8; i++) {
		CHECKF(q_same(&with_a[i], &hot[i]), "request %d: version 1 replaced and unloaded while it waited: same tokens", i);
		CHECKF(!q_same(&with_a[i], &with_b[i]), "request %d: version 2 gives other tokens", i);
	}
	lane_host_free(h1);
	lane_host_free(h);
	model_loras_free(reg);
	remove(pa), remove(pb);
}

// Reference counting under concurrency: four threads bind and drop versions while a fifth
// publishes new ones and unloads and reloads the names; a version a thread holds is always
// listed (current or retired), and once every thread is done no retired version is left.
typedef struct {
	model_loras *reg;
	int bad;
	atomic_bool stop;
	uint64_t binds;
} race_arg;

static void *race_binder(void *p) {
	race_arg *ra = p;
	uint64_t x = (uint64_t)(uintptr_t)p ^ 0x9e37;
	while (!atomic_load(&ra->stop)) {
		x = splitmix64(x);
		const model_lora *a;
		float scale;
		if (model_loras_bind(ra->reg, x & 1 ? "p" : "q", 0, &a, &scale, NULL)) continue;
		model_lora_info info;
		model_lora_info_of(a, &info); // reads the adapter: freed under us would be a use after free
		model_loras_entry *v = NULL;
		const int n = model_loras_list(ra->reg, &v);
		bool listed = false;
		for (int i = 0; i < n; i++) listed |= v[i].lora_id == model_lora_id(a);
		free(v);
		if (!listed || info.rank != 4) __atomic_add_fetch(&ra->bad, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&ra->binds, 1, __ATOMIC_RELAXED);
		model_lora_free(a);
	}
	return NULL;
}

static void registry_race(void) {
	t_case("registry");
	char pa[512], err[256];
	tmp_path(pa, sizeof pa, "ra.gguf");
	CHECK(gen_adapter(pa, 4, "F32", 41, false) == 0);
	race_arg ra = {0};
	CHECK(model_loras_new(&ra.reg, SM, 4) == 0);
	atomic_init(&ra.stop, false);
	pthread_t th[4];
	for (int i = 0; i < 4; i++) CHECK(pthread_create(&th[i], NULL, race_binder, &ra) == 0);
	int publishes = 0;
	for (int k = 0; k < 300; k++) {
		const char *name = k & 1 ? "p" : "q";
		uint64_t t;
		bool freed;
		const bool loaded = model_loras_has(ra.reg, name);
		if (loaded && k % 3 == 0) {
			CHECK(model_loras_remove(ra.reg, name, &freed) == 0);
			continue;
		}
		if (model_loras_reserve(ra.reg, name, pa, NAN, loaded, &t, err, sizeof err)) continue;
		model_loras_publish(ra.reg, name, t, load_lora(SM, pa), NULL);
		publishes++;
	}
	atomic_store(&ra.stop, true);
	for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
	model_loras_entry *v = NULL;
	const int n = model_loras_list(ra.reg, &v);
	int retired = 0;
	for (int i = 0; i < n; i++) retired += v[i].state == MODEL_LORAS_RETIRED;
	free(v);
	printf("registry race: %d publishes, %llu binds\n", publishes, (unsigned long long)ra.binds);
	CHECKF(ra.bad == 0, "%d binds held a version that was no longer listed", ra.bad);
	CHECKF(retired == 0 && publishes > 100 && ra.binds > 100, "no retired version outlives its holders (%d left)", retired);
	model_loras_free(ra.reg);
	remove(pa);
}

static void host_tests(void) {
	char path[1024], err[512];
	snprintf(path, sizeof path, "%s/models/stories260K.gguf", t_shared());
	CHECKF(model_load(&SM, path, err, sizeof err) == 0, "%s", err);
	if (SM) CHECKF(tok_vocab_load(&SV, model_gguf(SM), err, sizeof err) == 0, "%s", err);
	snprintf(base_path, sizeof base_path, "%s", path);
	if (SM && SV) {
		lanes_exact();
		registry_hot();
		registry_race();
	}
	tok_vocab_free(SV);
	model_free(SM);
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
	// gemma2 and gemma3: the output and down projections' terms go before the blocks' post norms;
	// phi3: the adapter leaves its fused matrices out; qwen3next: its recurrent layers' projections
	// (q, k, v and z in one matrix, interleaved per key head) and its gated queries adapted
	static const char *const gemmas[] = {"gemma2-test", "gemma3-test", "phi3-test", "qwen3-next-test"};
	for (int gi = 0; gi < 4; gi++) {
		char g2[512], vocab[512];
		tmp_path(g2, sizeof g2, "gemma.gguf");
		snprintf(vocab, sizeof vocab, "%s/models/stories260K.gguf", t_shared());
		CHECK(t_gen_model(gemmas[gi], "F32", vocab, g2) == 0);
		snprintf(base_path, sizeof base_path, "%s", g2);
		model *gm = load(g2);
		CHECK(gm != NULL);
		if (gm) {
			accuracy(gm, "F32", 8, 1.0f);
			exactness(gm);
		}
		model_free(gm);
		remove(g2);
	}
	snprintf(base_path, sizeof base_path, "%s/models/ref-llama-F32.gguf", t_shared());
	host_tests();
	T_DONE("lora");
}
