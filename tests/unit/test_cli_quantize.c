// tests: `lanes quantize` and `lanes gen` end to end — our files from the F32 reference
// model equal llama.cpp's byte for byte, mixes and fallbacks on stories260K, llama.cpp's mix
// rules for the types no reference file has (IQ4_NL, IQ4_XS), generated models' metadata,
// tensors, determinism and weight scales.
#include "base/base.h"
#include "cli/ftype.h"
#include "gguf/gguf.h"
#include "tensor/tensor.h"
#include "t.h"

#include <math.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *bin(void) {
	const char *b = getenv("LANES_BIN");
	return b && *b ? b : "build/lanes";
}

// Runs `lanes ARGS` with stderr to errpath; returns the exit status.
static int run(const char *errpath, const char *fmt, ...) {
	char args[2048], cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof args, fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof cmd, "%s %s >/dev/null 2>%s", bin(), args, errpath ? errpath : "/dev/null");
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static gguf *open_or_fail(const char *path) {
	char err[256];
	gguf *g = NULL;
	int rc = gguf_open(&g, path, err, sizeof err);
	CHECKF(rc == 0, "%s: %s", path, err);
	return rc ? NULL : g;
}

static const char *type_name(uint32_t t) {
	const gguf_ttype_info *ti = gguf_ttype_get(t);
	return ti ? ti->name : "?";
}

// Relative RMS difference between a tensor and its dequantized counterpart.
static double rel_err(const gguf_tensor *a, const gguf_tensor *b) {
	int64_t n = gguf_tensor_nelem(a);
	float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
	tensor_traits_of(a->type)->to_f32(a->data, x, n);
	tensor_traits_of(b->type)->to_f32(b->data, y, n);
	double se = 0, sx = 0;
	for (int64_t i = 0; i < n; i++) {
		se += (double)(x[i] - y[i]) * (x[i] - y[i]);
		sx += (double)x[i] * x[i];
	}
	free(x);
	free(y);
	return sx > 0 ? sqrt(se / sx) : sqrt(se);
}

// ---- quantize: the reference model against llama.cpp's own conversions ------------------
static void test_matches_llamacpp(void) {
	static const char *types[] = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M",
				      "Q4_K_M", "Q5_K_M", "Q6_K", "F16", "BF16"};
	char src[1024], ref[1024], out[1024];
	snprintf(src, sizeof src, "%s/models/ref-llama-F32.gguf", t_shared());
	for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
		snprintf(ref, sizeof ref, "%s/models/ref-llama-%s.gguf", t_shared(), types[k]);
		snprintf(out, sizeof out, "%s/q-ref-%s.gguf", t_tmp(), types[k]);
		int rc = run(NULL, "quantize %s %s %s --threads 2", src, out, types[k]);
		CHECKF(rc == 0, "quantize to %s: exit %d", types[k], rc);
		if (rc) continue;
		gguf *a = open_or_fail(out), *b = open_or_fail(ref);
		if (a && b) {
			CHECK(gguf_n_tensors(a) == gguf_n_tensors(b));
			uint32_t fa = 99, fb = 98;
			gguf_get_u32(a, "general.file_type", &fa);
			gguf_get_u32(b, "general.file_type", &fb);
			CHECKF(fa == fb, "%s: file_type %u vs llama.cpp %u", types[k], fa, fb);
			int diff_type = 0, diff_bytes = 0;
			for (int64_t i = 0; i < gguf_n_tensors(b); i++) {
				const gguf_tensor *tb = gguf_tensor_at(b, i);
				const gguf_tensor *ta = gguf_find_tensor(a, tb->name);
				if (!ta || ta->type != tb->type) {
					diff_type++;
					fprintf(stderr, "%s %s: ours %s, llama.cpp %s\n", types[k], tb->name,
						ta ? type_name(ta->type) : "missing", type_name(tb->type));
					continue;
				}
				if (ta->nbytes != tb->nbytes || memcmp(ta->data, tb->data, tb->nbytes)) diff_bytes++;
			}
			CHECKF(diff_type == 0, "%s: %d tensors typed differently from llama.cpp", types[k], diff_type);
			CHECKF(diff_bytes == 0, "%s: %d tensors differ from llama.cpp's bytes", types[k], diff_bytes);
			// Metadata comes across.
			gguf_str nm;
			CHECK(gguf_get_str(a, "general.name", &nm) == 0 && gguf_str_eq(nm, "ref-llama"));
			const gguf_value *toks = gguf_get_arr(a, "tokenizer.ggml.tokens");
			CHECK(toks && toks->arr.n == 512);
		}
		gguf_free(a);
		gguf_free(b);
		remove(out);
	}
}

// MoE (8 experts: Q8_0 attn_k/attn_v, Q5_K attn_output) and qwen2 (biases) from their F16
// files: the same types as llama.cpp chose, values close to its (it started from F32).
static void test_mixes_moe_qwen2(void) {
	static const char *models[] = {"moe", "qwen2"}, *types[] = {"Q8_0", "Q4_K_M"};
	char src[1024], ref[1024], out[1024];
	for (int mi = 0; mi < 2; mi++)
		for (int k = 0; k < 2; k++) {
			snprintf(src, sizeof src, "%s/models/ref-%s-F16.gguf", t_shared(), models[mi]);
			snprintf(ref, sizeof ref, "%s/models/ref-%s-%s.gguf", t_shared(), models[mi], types[k]);
			snprintf(out, sizeof out, "%s/q-%s-%s.gguf", t_tmp(), models[mi], types[k]);
			int rc = run(NULL, "quantize %s %s %s", src, out, types[k]);
			CHECKF(rc == 0, "%s %s: exit %d", models[mi], types[k], rc);
			gguf *a = rc ? NULL : open_or_fail(out), *b = open_or_fail(ref);
			if (a && b) {
				CHECK(gguf_n_tensors(a) == gguf_n_tensors(b));
				int bad = 0;
				double worst = 0;
				for (int64_t i = 0; i < gguf_n_tensors(b); i++) {
					const gguf_tensor *tb = gguf_tensor_at(b, i);
					const gguf_tensor *ta = gguf_find_tensor(a, tb->name);
					if (!ta || ta->type != tb->type) {
						bad++;
						fprintf(stderr, "%s %s %s: ours %s, llama.cpp %s\n", models[mi], types[k],
							tb->name, ta ? type_name(ta->type) : "missing", type_name(tb->type));
						continue;
					}
					double e = rel_err(tb, ta);
					if (e > worst) worst = e;
				}
				CHECKF(bad == 0, "%s %s: %d tensors typed differently", models[mi], types[k], bad);
				CHECKF(worst < (k == 0 ? 0.01 : 0.08), "%s %s: worst difference %.4f", models[mi],
				       types[k], worst);
			}
			gguf_free(a);
			gguf_free(b);
			remove(out);
		}
}

// ---- quantize: stories260K (rows of 64 and 172 elements force fallbacks) ------------------
static void test_stories(void) {
	static const struct {
		const char *ft;
		double max_err; // relative RMS error of any quantized tensor
		const char *embd, *output, *attn_v1, *attn_v2, *ffn_down0, *attn_q0;
	} cases[] = {
		{"Q8_0", 0.01, "Q8_0", "Q8_0", "Q8_0", "Q8_0", "F16", "Q8_0"},
		{"Q4_0", 0.15, "Q4_0", "Q8_0", "Q4_0", "Q4_0", "F16", "Q4_0"},
		{"Q4_K_M", 0.07, "Q5_0", "Q8_0", "Q5_0", "Q8_0", "F16", "Q5_0"},
		{"Q6_K", 0.01, "Q8_0", "Q8_0", "Q8_0", "Q8_0", "F16", "Q8_0"},
		// rows of 64 do not fit IQ4_XS's 256: IQ4_NL
		{"IQ4_NL", 0.12, "IQ4_NL", "Q8_0", "IQ4_NL", "IQ4_NL", "F16", "IQ4_NL"},
		{"IQ4_XS", 0.12, "IQ4_NL", "Q8_0", "IQ4_NL", "IQ4_NL", "F16", "IQ4_NL"},
		{"MXFP4", 0.15, "MXFP4", "Q8_0", "MXFP4", "MXFP4", "F16", "MXFP4"},
	};
	char src[1024], out[1024], errf[1024];
	snprintf(src, sizeof src, "%s/models/stories260K.gguf", t_shared());
	snprintf(errf, sizeof errf, "%s/q-stories.err", t_tmp());
	gguf *s = open_or_fail(src);
	if (!s) return;
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		snprintf(out, sizeof out, "%s/q-stories-%s.gguf", t_tmp(), cases[k].ft);
		int rc = run(errf, "quantize %s %s %s", src, out, cases[k].ft);
		CHECKF(rc == 0, "stories to %s: exit %d", cases[k].ft, rc);
		if (rc) continue;
		char *errtext = t_read_file(errf, NULL);
		CHECKF(errtext && strstr(errtext, "blk.0.ffn_down.weight: row length 172"),
		       "%s: no fallback note on stderr", cases[k].ft);
		free(errtext);
		gguf *q = open_or_fail(out);
		if (!q) continue;
		static const char *names[] = {"token_embd.weight", "output.weight", "blk.1.attn_v.weight",
					      "blk.2.attn_v.weight", "blk.0.ffn_down.weight",
					      "blk.0.attn_q.weight"};
		const char *want[] = {cases[k].embd, cases[k].output, cases[k].attn_v1, cases[k].attn_v2,
				      cases[k].ffn_down0, cases[k].attn_q0};
		for (int i = 0; i < 6; i++) {
			const gguf_tensor *t = gguf_find_tensor(q, names[i]);
			CHECKF(t && !strcmp(type_name(t->type), want[i]), "%s %s: %s, want %s", cases[k].ft,
			       names[i], t ? type_name(t->type) : "missing", want[i]);
		}
		CHECK(gguf_n_tensors(q) == gguf_n_tensors(s));
		double worst = 0;
		for (int64_t i = 0; i < gguf_n_tensors(s); i++) {
			const gguf_tensor *a = gguf_tensor_at(s, i), *b = gguf_find_tensor(q, a->name);
			CHECK(b != NULL);
			if (!b) continue;
			CHECK(b->n_dims == a->n_dims && b->ne[0] == a->ne[0] && b->ne[1] == a->ne[1]);
			if (a->n_dims == 1) CHECKF(b->type == GGUF_T_F32 && !memcmp(a->data, b->data, a->nbytes),
						   "%s: 1-D tensor changed", a->name);
			double e = rel_err(a, b);
			if (e > worst) worst = e;
		}
		CHECKF(worst < cases[k].max_err, "%s: worst relative error %.4f", cases[k].ft, worst);
		// Requantizing a quantized file works and keeps the values close.
		if (!strcmp(cases[k].ft, "Q8_0")) {
			char out2[1024];
			snprintf(out2, sizeof out2, "%s/q-stories-requant.gguf", t_tmp());
			rc = run(NULL, "quantize %s %s Q4_0", out, out2);
			CHECK(rc == 0);
			gguf *r = rc ? NULL : open_or_fail(out2);
			if (r) {
				const gguf_tensor *a = gguf_find_tensor(s, "blk.0.attn_q.weight");
				const gguf_tensor *b = gguf_find_tensor(r, "blk.0.attn_q.weight");
				CHECK(b && b->type == GGUF_T_Q4_0 && rel_err(a, b) < 0.15);
				gguf_free(r);
			}
			remove(out2);
		}
		gguf_free(q);
		remove(out);
	}
	gguf_free(s);
	remove(errf);
	// Bad invocations fail cleanly.
	CHECK(run(NULL, "quantize %s %s/x.gguf Q9_9", src, t_tmp()) == 2);
	CHECK(run(NULL, "quantize %s/nonexistent.gguf %s/x.gguf Q8_0", t_tmp(), t_tmp()) == 1);
	CHECK(run(NULL, "quantize %s", src) == 2);
}

typedef struct {
	const char *name;
	uint32_t type;
} tensor_want;

// ../shared's ref-moe-F16 quantized to ft: the types of the tensors in want, and the file type.
static void moe_types(const char *ft, uint32_t file_type, const tensor_want *want, size_t n) {
	char src[1024], out[1024];
	snprintf(src, sizeof src, "%s/models/ref-moe-F16.gguf", t_shared());
	snprintf(out, sizeof out, "%s/q-moe-%s.gguf", t_tmp(), ft);
	const int rc = run(NULL, "quantize %s %s %s", src, out, ft);
	CHECKF(rc == 0, "moe %s: exit %d", ft, rc);
	gguf *g = rc ? NULL : open_or_fail(out);
	if (g) {
		for (size_t i = 0; i < n; i++) {
			const gguf_tensor *t = gguf_find_tensor(g, want[i].name);
			CHECKF(t && t->type == want[i].type, "moe %s %s: %s, want %s", ft, want[i].name, t ? type_name(t->type) : "missing",
			       type_name(want[i].type));
		}
		uint32_t ftv = 0;
		CHECK(gguf_get_u32(g, "general.file_type", &ftv) == 0 && ftv == file_type);
		gguf_free(g);
	}
	remove(out);
}

// ---- the 2- and 3-bit grid types and the ternary ones: llama.cpp's rules -------------------
static void test_low_bit_mixes(void) {
	// A TinyLlama-shaped model (22 layers); query heads per KV head 8 (gqa) or 1.
	static const struct {
		const char *ft, *name;
		int gqa;
		uint32_t want;
	} cases[] = {
		{"IQ2_XXS", "token_embd.weight", 8, GGUF_T_Q2_K}, {"IQ2_XXS", "output.weight", 8, GGUF_T_Q5_K},
		{"IQ2_XXS", "blk.5.attn_v.weight", 8, GGUF_T_Q4_K}, {"IQ2_XXS", "blk.5.attn_v.weight", 1, GGUF_T_Q2_K},
		{"IQ2_XXS", "blk.1.ffn_down.weight", 8, GGUF_T_Q2_K}, {"IQ2_XXS", "blk.3.ffn_down.weight", 8, GGUF_T_IQ2_XXS},
		{"IQ2_XXS", "blk.3.attn_output.weight", 8, GGUF_T_IQ2_XXS}, {"IQ2_XS", "blk.3.ffn_up.weight", 8, GGUF_T_IQ2_XS},
		{"IQ2_S", "token_embd.weight", 8, GGUF_T_IQ3_S}, {"IQ2_S", "blk.5.attn_v.weight", 1, GGUF_T_IQ3_S},
		{"IQ2_S", "blk.1.ffn_down.weight", 8, GGUF_T_IQ3_S}, {"IQ2_S", "blk.3.attn_output.weight", 8, GGUF_T_IQ3_S},
		{"IQ2_M", "blk.3.attn_q.weight", 8, GGUF_T_IQ2_S},
		{"IQ3_XXS", "token_embd.weight", 8, GGUF_T_IQ3_S}, {"IQ3_XXS", "output.weight", 8, GGUF_T_Q5_K},
		{"IQ3_XXS", "blk.5.attn_v.weight", 8, GGUF_T_Q4_K}, {"IQ3_XXS", "blk.5.attn_v.weight", 1, GGUF_T_IQ3_S},
		{"IQ3_XXS", "blk.5.attn_q.weight", 8, GGUF_T_IQ2_S}, {"IQ3_XXS", "blk.5.attn_k.weight", 8, GGUF_T_IQ2_S},
		{"IQ3_XXS", "blk.1.ffn_down.weight", 8, GGUF_T_Q4_K}, {"IQ3_XXS", "blk.3.ffn_down.weight", 8, GGUF_T_Q3_K},
		{"IQ3_XXS", "blk.3.attn_output.weight", 8, GGUF_T_IQ3_S}, {"IQ3_XXS", "blk.3.ffn_gate.weight", 8, GGUF_T_IQ3_XXS},
		{"IQ3_S", "blk.5.attn_v.weight", 8, GGUF_T_Q4_K}, {"IQ3_S", "blk.5.attn_v.weight", 1, GGUF_T_IQ3_S},
		{"IQ3_S", "output.weight", 8, GGUF_T_Q6_K}, {"TQ1_0", "token_embd.weight", 8, GGUF_T_Q4_K},
		{"TQ2_0", "output.weight", 8, GGUF_T_Q6_K}, {"TQ2_0", "blk.5.attn_v.weight", 8, GGUF_T_TQ2_0},
		{"IQ1_S", "token_embd.weight", 8, GGUF_T_Q2_K}, {"IQ1_S", "blk.3.attn_output.weight", 8, GGUF_T_IQ2_XXS},
		{"IQ1_M", "output.weight", 8, GGUF_T_Q5_K}, {"IQ1_M", "blk.5.attn_v.weight", 1, GGUF_T_Q2_K},
		{"IQ1_M", "blk.3.ffn_up.weight", 8, GGUF_T_IQ1_M}, {"IQ1_S", "blk.3.ffn_gate.weight", 8, GGUF_T_IQ1_S},
	};
	char note[256];
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const ftype_model fm = {.ft = ftype_by_name(cases[i].ft), .llama_arch = true, .n_layer = 22, .n_head = 32,
					.n_head_kv = 32 / cases[i].gqa, .n_attn_v = 22};
		CHECKF(fm.ft != NULL, "%s: a file type", cases[i].ft);
		if (!fm.ft) continue;
		const int64_t ne[2] = {2048, 256};
		const uint32_t t = ftype_pick(&fm, cases[i].name, 2, ne, GGUF_T_F32, note, sizeof note);
		CHECKF(t == cases[i].want && !note[0], "%s %s (gqa %d): %s, want %s", cases[i].ft, cases[i].name, cases[i].gqa,
		       type_name(t), type_name(cases[i].want));
	}
	// a row that is not whole blocks: IQ4_NL for the grid types, Q4_0 for the ternary ones
	const ftype_model f2 = {.ft = ftype_by_name("IQ2_XS"), .n_layer = 22, .n_head = 32, .n_head_kv = 4},
			  ft = {.ft = ftype_by_name("TQ1_0"), .n_layer = 22, .n_head = 32, .n_head_kv = 4};
	const int64_t odd[2] = {96, 256};
	CHECK(ftype_pick(&f2, "blk.3.attn_q.weight", 2, odd, GGUF_T_F32, note, sizeof note) == GGUF_T_IQ4_NL && note[0]);
	CHECK(ftype_pick(&ft, "blk.3.attn_q.weight", 2, odd, GGUF_T_F32, note, sizeof note) == GGUF_T_Q4_0 && note[0]);
	// the types llama.cpp makes only with an importance matrix say so; the others do not
	CHECK(ftype_imatrix_note(ftype_by_name("IQ2_XXS")) && ftype_imatrix_note(ftype_by_name("IQ3_XXS")) &&
	      ftype_imatrix_note(ftype_by_name("IQ1_M")) &&
	      strstr(ftype_imatrix_note(ftype_by_name("IQ2_S")), "importance matrix"));
	CHECK(!ftype_imatrix_note(ftype_by_name("IQ3_S")) && !ftype_imatrix_note(ftype_by_name("Q4_K_M")) &&
	      !ftype_imatrix_note(ftype_by_name("TQ2_0")));
	// and lanes quantize says it (stories260K's rows fit no 256-block: the file is quick to make)
	char src[1024], out[1024], errf[1024];
	snprintf(src, sizeof src, "%s/models/stories260K.gguf", t_shared());
	snprintf(out, sizeof out, "%s/q-stories-IQ2_XXS.gguf", t_tmp());
	snprintf(errf, sizeof errf, "%s/q-stories-iq2.err", t_tmp());
	CHECK(run(errf, "quantize %s %s IQ2_XXS", src, out) == 0);
	char *errtext = t_read_file(errf, NULL);
	CHECKF(errtext && strstr(errtext, "importance matrix") && strstr(errtext, "lanes quantizes them without one"),
	       "IQ2_XXS: no note on stderr: %s", errtext ? errtext : "(none)");
	free(errtext);
	remove(out), remove(errf);
}

// ---- IQ4_NL and IQ4_XS: llama.cpp's rules without an importance matrix ---------------------
static void test_iq4_mixes(void) {
	// A TinyLlama-shaped model (22 layers, 8 query heads per KV head): Q5_K for attn_v and for
	// the first eighth of the ffn_down layers, Q6_K for the output, the base type elsewhere.
	for (int k = 0; k < 2; k++) {
		const char *ft = k ? "IQ4_XS" : "IQ4_NL";
		const uint32_t base = k ? GGUF_T_IQ4_XS : GGUF_T_IQ4_NL;
		const ftype_model fm = {.ft = ftype_by_name(ft), .llama_arch = true, .n_layer = 22, .n_head = 32,
					.n_head_kv = 4, .n_attn_v = 22};
		CHECKF(fm.ft && fm.ft->base == base && fm.ft->id == (k ? 30u : 25u), "%s: file type", ft);
		if (!fm.ft) continue;
		static const struct {
			const char *name;
			int64_t cols;
			int want; // -1: the base type
		} cases[] = {
			{"blk.0.attn_q.weight", 2048, -1}, {"blk.5.attn_v.weight", 2048, GGUF_T_Q5_K},
			{"blk.0.ffn_down.weight", 5632, GGUF_T_Q5_K}, {"blk.1.ffn_down.weight", 5632, GGUF_T_Q5_K},
			{"blk.2.ffn_down.weight", 5632, -1}, {"blk.21.ffn_down.weight", 5632, -1},
			{"output.weight", 2048, GGUF_T_Q6_K}, {"token_embd.weight", 2048, -1},
			{"blk.3.attn_output.weight", 2048, -1}, {"blk.3.ffn_gate.weight", 2048, -1},
		};
		char note[256];
		for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
			const int64_t ne[2] = {cases[i].cols, 256};
			const uint32_t t = ftype_pick(&fm, cases[i].name, 2, ne, GGUF_T_F32, note, sizeof note);
			const uint32_t want = cases[i].want < 0 ? base : (uint32_t)cases[i].want;
			CHECKF(t == want && !note[0], "%s %s: %s, want %s", ft, cases[i].name, type_name(t), type_name(want));
		}
		// 4 query heads per KV head are enough for attn_v's Q5_K; 2 are not
		ftype_model g2 = fm;
		g2.n_head = 16;
		const int64_t ne[2] = {2048, 256}, odd[2] = {96, 256}, odder[2] = {100, 256};
		CHECK(ftype_pick(&g2, "blk.5.attn_v.weight", 2, ne, GGUF_T_F32, note, sizeof note) == GGUF_T_Q5_K);
		g2.n_head = 8;
		CHECK(ftype_pick(&g2, "blk.5.attn_v.weight", 2, ne, GGUF_T_F32, note, sizeof note) == base);
		// a row that is not whole blocks of the type falls back to IQ4_NL, then to F16
		CHECK(ftype_pick(&fm, "blk.3.attn_q.weight", 2, odd, GGUF_T_F32, note, sizeof note) ==
		      GGUF_T_IQ4_NL && (note[0] != 0) == (k == 1));
		CHECK(ftype_pick(&fm, "blk.3.attn_q.weight", 2, odder, GGUF_T_F32, note, sizeof note) == GGUF_T_F16 && note[0]);
	}
	// MoE of 8 experts: attn_k and attn_v Q8_0, attn_output Q5_K, the experts the base type.
	static const tensor_want want[] = {
		{"blk.0.attn_k.weight", GGUF_T_Q8_0}, {"blk.1.attn_v.weight", GGUF_T_Q8_0},
		{"blk.2.attn_output.weight", GGUF_T_Q5_K}, {"blk.0.ffn_up_exps.weight", GGUF_T_IQ4_XS},
		{"blk.0.ffn_down_exps.weight", GGUF_T_IQ4_XS}, {"blk.0.attn_q.weight", GGUF_T_IQ4_XS},
		{"output.weight", GGUF_T_Q6_K},
	};
	moe_types("IQ4_XS", 30, want, sizeof want / sizeof want[0]);
}

// ---- MXFP4 and MXFP4_MOE -------------------------------------------------------------------
static void test_mxfp4_mixes(void) {
	// MXFP4: every weight but the output (llama.cpp's Q6_K rule); llama.cpp's file type 38
	const ftype_model fm = {.ft = ftype_by_name("mxfp4"), .llama_arch = true, .n_layer = 22, .n_head = 32,
				.n_head_kv = 4, .n_attn_v = 22};
	CHECK(fm.ft && fm.ft->base == GGUF_T_MXFP4 && fm.ft->id == 38 && !fm.ft->experts);
	if (!fm.ft) return;
	char note[256];
	const int64_t ne[3] = {2048, 256, 8}, odd[2] = {48, 256};
	static const char *const dense[] = {"blk.0.attn_q.weight", "blk.5.attn_v.weight", "blk.0.ffn_down.weight",
					    "token_embd.weight", "blk.0.ffn_up_exps.weight"};
	for (size_t i = 0; i < sizeof dense / sizeof dense[0]; i++)
		CHECKF(ftype_pick(&fm, dense[i], 2, ne, GGUF_T_F32, note, sizeof note) == GGUF_T_MXFP4 && !note[0], "MXFP4 %s",
		       dense[i]);
	CHECK(ftype_pick(&fm, "output.weight", 2, ne, GGUF_T_F32, note, sizeof note) == GGUF_T_Q6_K);
	CHECK(ftype_pick(&fm, "blk.0.attn_q.weight", 2, odd, GGUF_T_F32, note, sizeof note) == GGUF_T_F16 && note[0]);
	// MXFP4_MOE, llama.cpp's rule: expert stacks (a third dimension over 1) MXFP4, the output
	// its own rule, every other weight Q8_0
	ftype_model mm = fm;
	mm.ft = ftype_by_name("MXFP4_MOE");
	CHECK(mm.ft && mm.ft->base == GGUF_T_MXFP4 && mm.ft->id == 38 && mm.ft->experts);
	if (!mm.ft) return;
	const int64_t one[3] = {2048, 256, 1};
	CHECK(ftype_pick(&mm, "blk.0.ffn_up_exps.weight", 3, ne, GGUF_T_F32, note, sizeof note) == GGUF_T_MXFP4);
	CHECK(ftype_pick(&mm, "blk.0.ffn_down_exps.weight", 3, ne, GGUF_T_F16, note, sizeof note) == GGUF_T_MXFP4);
	CHECK(ftype_pick(&mm, "blk.0.ffn_up_exps.weight", 3, one, GGUF_T_F32, note, sizeof note) == GGUF_T_Q8_0);
	CHECK(ftype_pick(&mm, "blk.0.attn_q.weight", 2, ne, GGUF_T_F32, note, sizeof note) == GGUF_T_Q8_0);
	CHECK(ftype_pick(&mm, "token_embd.weight", 2, ne, GGUF_T_F32, note, sizeof note) == GGUF_T_Q8_0);
	CHECK(ftype_pick(&mm, "output.weight", 2, ne, GGUF_T_F32, note, sizeof note) == GGUF_T_Q6_K);
	mm.tied = true; // the embedding is the output
	CHECK(ftype_pick(&mm, "token_embd.weight", 2, ne, GGUF_T_F32, note, sizeof note) == GGUF_T_Q6_K);
	// a real MoE file: its experts MXFP4, the other weights Q8_0
	static const tensor_want want[] = {
		{"blk.1.ffn_up_exps.weight", GGUF_T_MXFP4}, {"blk.1.ffn_down_exps.weight", GGUF_T_MXFP4},
		{"blk.1.attn_q.weight", GGUF_T_Q8_0}, {"blk.2.attn_output.weight", GGUF_T_Q8_0},
	};
	moe_types("MXFP4_MOE", 38, want, sizeof want / sizeof want[0]);
}

// ---- gen ---------------------------------------------------------------------------------
static bool has_u32(const gguf *g, const char *key, uint32_t want) {
	uint32_t v = 0;
	return gguf_get_u32(g, key, &v) == 0 && v == want;
}

static double tensor_std(const gguf_tensor *t, double *mean) {
	int64_t n = gguf_tensor_nelem(t);
	float *x = malloc((size_t)n * 4);
	tensor_traits_of(t->type)->to_f32(t->data, x, n);
	double s = 0, s2 = 0;
	for (int64_t i = 0; i < n; i++) s += x[i], s2 += (double)x[i] * x[i];
	free(x);
	*mean = s / n;
	return sqrt(s2 / n - *mean * *mean);
}

static void test_gen(void) {
	static const char *types[] = {"F32", "F16", "Q8_0", "Q4_0", "Q4_K_M", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4"};
	char vocab[1024], out[1024], out2[1024];
	snprintf(vocab, sizeof vocab, "%s/models/stories260K.gguf", t_shared());
	for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
		snprintf(out, sizeof out, "%s/gen-%s.gguf", t_tmp(), types[k]);
		int rc = run(NULL, "gen --shape test --type %s --vocab %s -o %s --seed 7", types[k], vocab, out);
		CHECKF(rc == 0, "gen %s: exit %d", types[k], rc);
		gguf *g = rc ? NULL : open_or_fail(out);
		if (!g) continue;
		gguf_str s;
		CHECK(gguf_get_str(g, "general.architecture", &s) == 0 && gguf_str_eq(s, "llama"));
		CHECK(has_u32(g, "llama.embedding_length", 64));
		CHECK(has_u32(g, "llama.block_count", 2));
		CHECK(has_u32(g, "llama.attention.head_count", 4));
		CHECK(has_u32(g, "llama.attention.head_count_kv", 2));
		CHECK(has_u32(g, "llama.feed_forward_length", 192));
		CHECK(has_u32(g, "llama.context_length", 256));
		CHECK(has_u32(g, "llama.rope.dimension_count", 16));
		CHECK(has_u32(g, "general.alignment", 32));
		float eps = 0, base = 0;
		CHECK(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps) == 0 && eps == 1e-5f);
		CHECK(gguf_get_f32(g, "llama.rope.freq_base", &base) == 0 && base == 10000.0f);
		uint32_t ft = 0;
		CHECK(gguf_get_u32(g, "general.file_type", &ft) == 0);
		const gguf_value *toks = gguf_get_arr(g, "tokenizer.ggml.tokens");
		CHECK(toks && toks->arr.n == 512);
		CHECK(gguf_get_str(g, "tokenizer.ggml.model", &s) == 0 && gguf_str_eq(s, "llama"));
		CHECK(gguf_get_arr(g, "tokenizer.ggml.scores") != NULL);
		CHECK(gguf_n_tensors(g) == 3 + 2 * 9);
		static const char *names[] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
					      "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};
		static const int64_t shape[9][2] = {{64, 1}, {64, 64}, {64, 32}, {64, 32}, {64, 64},
						    {64, 1}, {64, 192}, {64, 192}, {192, 64}};
		for (int l = 0; l < 2; l++)
			for (int i = 0; i < 9; i++) {
				char nm[64];
				snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, names[i]);
				const gguf_tensor *t = gguf_find_tensor(g, nm);
				CHECKF(t && t->ne[0] == shape[i][0] && t->ne[1] == shape[i][1], "%s", nm);
				if (t && shape[i][1] == 1) CHECK(t->type == GGUF_T_F32 && t->n_dims == 1);
			}
		const gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
		const gguf_tensor *outw = gguf_find_tensor(g, "output.weight");
		const gguf_tensor *norm = gguf_find_tensor(g, "output_norm.weight");
		CHECK(emb && emb->ne[0] == 64 && emb->ne[1] == 512);
		CHECK(outw && outw->ne[0] == 64 && outw->ne[1] == 512);
		CHECK(norm && norm->type == GGUF_T_F32);
		if (outw && norm) {
			// Output weights scaled for logit std 5 over unit-RMS inputs; norms near 1.
			double mean, sd = tensor_std(outw, &mean);
			CHECKF(fabs(sd - 5.0 / 8.0) < 0.05 && fabs(mean) < 0.02, "%s: output std %.3f", types[k], sd);
			sd = tensor_std(norm, &mean);
			CHECKF(fabs(mean - 1.0) < 0.05 && sd > 0.01 && sd < 0.1, "%s: norm %.3f/%.3f", types[k], mean, sd);
		}
		if (!strcmp(types[k], "Q4_K_M")) {
			// 64-wide rows do not fit Q4_K's 256 block: Q5_0; more-bits layers: Q6_K -> Q8_0.
			CHECK(emb && emb->type == GGUF_T_Q5_0);
			CHECK(outw && outw->type == GGUF_T_Q8_0);
			const gguf_tensor *v0 = gguf_find_tensor(g, "blk.0.attn_v.weight"), *v1 = gguf_find_tensor(g, "blk.1.attn_v.weight");
			CHECK(v0 && v0->type == GGUF_T_Q5_0 && v1 && v1->type == GGUF_T_Q8_0); // layer 1 of 2 gets more bits
			CHECK(ft == 15);
		}
		if (!strcmp(types[k], "Q4_0")) {
			CHECK(emb && emb->type == GGUF_T_Q4_0 && outw && outw->type == GGUF_T_Q8_0);
			CHECK(ft == 2);
		}
		if (!strncmp(types[k], "IQ4_", 4)) { // 64-wide rows do not fit IQ4_XS's 256: IQ4_NL
			CHECK(emb && emb->type == GGUF_T_IQ4_NL && outw && outw->type == GGUF_T_Q8_0);
			CHECK(ft == (strcmp(types[k], "IQ4_XS") ? 25u : 30u));
		}
		if (!strcmp(types[k], "MXFP4")) // the output's Q6_K does not fit 64-wide rows: Q8_0
			CHECK(emb && emb->type == GGUF_T_MXFP4 && outw && outw->type == GGUF_T_Q8_0 && ft == 38);
		if (!strcmp(types[k], "F32")) {
			CHECK(emb && emb->type == GGUF_T_F32 && ft == 0);
			// Logits of random unit-RMS hidden states have std near 5.
			if (outw) {
				const float *w = outw->data;
				uint64_t r = 3;
				double s2 = 0;
				int cnt = 0;
				for (int rep = 0; rep < 8; rep++) {
					float h[64];
					double ss = 0;
					for (int i = 0; i < 64; i++) {
						h[i] = (float)((double)(splitmix64(r++) >> 11) / 9007199254740992.0 - 0.5);
						ss += h[i] * h[i];
					}
					for (int i = 0; i < 64; i++) h[i] = (float)(h[i] / sqrt(ss / 64));
					for (int v = 0; v < 512; v++) {
						double z = 0;
						for (int i = 0; i < 64; i++) z += w[v * 64 + i] * h[i];
						s2 += z * z;
						cnt++;
					}
				}
				double lsd = sqrt(s2 / cnt);
				CHECKF(lsd > 4.0 && lsd < 6.0, "logit std %.2f", lsd);
			}
		}
		gguf_free(g);
		// Deterministic: the same seed gives the same bytes, another seed other weights.
		if (!strcmp(types[k], "Q4_0")) {
			snprintf(out2, sizeof out2, "%s/gen-again.gguf", t_tmp());
			CHECK(run(NULL, "gen --shape test --type Q4_0 --vocab %s -o %s --seed 7 --threads 1", vocab, out2) == 0);
			size_t la = 0, lb = 0;
			char *a = t_read_file(out, &la), *b = t_read_file(out2, &lb);
			CHECK(a && b && la == lb && !memcmp(a, b, la));
			free(b);
			CHECK(run(NULL, "gen --shape test --type Q4_0 --vocab %s -o %s --seed 8", vocab, out2) == 0);
			b = t_read_file(out2, &lb);
			CHECK(a && b && la == lb && memcmp(a, b, la));
			free(a);
			free(b);
			remove(out2);
		}
		remove(out);
	}
	// qwen2 family shape metadata and biases (vocabulary from a BPE vocab file), small type.
	snprintf(vocab, sizeof vocab, "%s/vocab/ggml-vocab-qwen2.gguf", t_shared());
	snprintf(out, sizeof out, "%s/gen-qwen.gguf", t_tmp());
	int rc = run(NULL, "gen --shape qwen2.5-0.5b --type Q4_0 --vocab %s -o %s", vocab, out);
	CHECK(rc == 0);
	gguf *g = rc ? NULL : open_or_fail(out);
	if (g) {
		gguf_str s;
		CHECK(gguf_get_str(g, "general.architecture", &s) == 0 && gguf_str_eq(s, "qwen2"));
		CHECK(has_u32(g, "qwen2.embedding_length", 896) && has_u32(g, "qwen2.block_count", 24));
		CHECK(has_u32(g, "qwen2.attention.head_count", 14) && has_u32(g, "qwen2.attention.head_count_kv", 2));
		CHECK(has_u32(g, "qwen2.rope.dimension_count", 64) && has_u32(g, "qwen2.context_length", 32768));
		CHECK(gguf_find_tensor(g, "output.weight") == NULL); // tied
		const gguf_tensor *b = gguf_find_tensor(g, "blk.23.attn_k.bias");
		CHECK(b && b->ne[0] == 128 && b->type == GGUF_T_F32);
		const gguf_tensor *e = gguf_find_tensor(g, "token_embd.weight");
		const gguf_value *toks = gguf_get_arr(g, "tokenizer.ggml.tokens");
		CHECK(e && toks && e->ne[1] == (int64_t)toks->arr.n && e->type == GGUF_T_Q8_0); // tied: output rule, 896 does not fit Q6_K
		CHECK(gguf_get_arr(g, "tokenizer.ggml.merges") != NULL);
		gguf_free(g);
	}
	remove(out);
	CHECK(run(NULL, "gen --shape nope --vocab %s -o %s", vocab, out) == 2);
	CHECK(run(NULL, "gen --shape test --type Q4_0 -o %s", out) == 2);
}


// ---- --imatrix: llama-imatrix's two formats, the grid types fitted under them -----------------
#define IM_COLS 512
#define IM_ROWS 32
#define IM_EXPERTS 4

// The importance of column c (of expert e for the stack): a few columns large, the rest small;
// powers of two, so both formats' means come back exact.
static float im_value(int c, int e) { return (c + 7 * e) % 16 == 0 ? 64.0f : 0.0625f; }

static uint64_t im_rng = 12345;
static float im_rand(void) { return (float)((double)(splitmix64(im_rng++) >> 11) / 9007199254740992.0 - 0.5); }

// A llama-shaped file with one dense matrix and one stack of experts, both quantized to IQ2_XXS
// in the IQ2_XXS mix.
static int im_model(const char *path) {
	gguf_writer *w = gguf_writer_new();
	char err[256];
	float *a = malloc(IM_COLS * IM_ROWS * 4), *b = malloc(IM_COLS * IM_ROWS * IM_EXPERTS * 4);
	for (int i = 0; i < IM_COLS * IM_ROWS; i++) a[i] = im_rand();
	for (int i = 0; i < IM_COLS * IM_ROWS * IM_EXPERTS; i++) b[i] = im_rand();
	const int64_t na[2] = {IM_COLS, IM_ROWS}, nb[3] = {IM_COLS, IM_ROWS, IM_EXPERTS};
	int rc = !w || gguf_writer_set_str(w, "general.architecture", "llama") || gguf_writer_set_u32(w, "llama.block_count", 8) ||
		 gguf_writer_set_u32(w, "llama.attention.head_count", 8) || gguf_writer_set_u32(w, "llama.expert_count", IM_EXPERTS) ||
		 gguf_writer_add_tensor(w, "blk.3.ffn_gate.weight", GGUF_T_F32, 2, na, a, sizeof(float) * IM_COLS * IM_ROWS) ||
		 gguf_writer_add_tensor(w, "blk.3.ffn_up_exps.weight", GGUF_T_F32, 3, nb, b, sizeof(float) * IM_COLS * IM_ROWS * IM_EXPERTS) ||
		 gguf_writer_write(w, path, err, sizeof err);
	gguf_writer_free(w);
	free(a), free(b);
	return rc;
}

static void put_i32(FILE *f, int32_t v) { fwrite(&v, 4, 1, f); }

// llama-imatrix's .dat: entries of name, calls, values (the means times the calls), then the
// last call and the dataset's name. `skip` leaves out the stack's entry; `cut` ends the file early.
static void im_dat(const char *path, bool skip, long cut) {
	FILE *f = fopen(path, "wb");
	const char *names[2] = {"blk.3.ffn_gate.weight", "blk.3.ffn_up_exps.weight"};
	const int32_t ncall = 8;
	put_i32(f, skip ? 1 : 2);
	for (int k = 0; k < (skip ? 1 : 2); k++) {
		const int ne = k ? IM_EXPERTS : 1;
		put_i32(f, (int32_t)strlen(names[k]));
		fwrite(names[k], 1, strlen(names[k]), f);
		put_i32(f, ncall);
		put_i32(f, IM_COLS * ne);
		for (int e = 0; e < ne; e++)
			for (int c = 0; c < IM_COLS; c++) {
				const float v = im_value(c, k ? e : 0) * ncall;
				fwrite(&v, 4, 1, f);
			}
	}
	put_i32(f, 8);
	put_i32(f, 4);
	fwrite("text", 1, 4, f);
	fclose(f);
	if (cut > 0) (void)!truncate(path, cut);
}

// The GGUF form: <name>.in_sum2 (sums of squares per expert) and <name>.counts (rows per expert).
// `nocounts` leaves the stack's counts out.
static void im_gguf(const char *path, bool nocounts) {
	gguf_writer *w = gguf_writer_new();
	char err[256];
	float sums[IM_COLS * IM_EXPERTS], counts[IM_EXPERTS];
	gguf_writer_set_str(w, "general.type", "imatrix");
	gguf_writer_set_u32(w, "imatrix.chunk_count", 8);
	for (int k = 0; k < 2; k++) {
		const int ne = k ? IM_EXPERTS : 1;
		const char *name = k ? "blk.3.ffn_up_exps.weight" : "blk.3.ffn_gate.weight";
		char tn[128];
		for (int e = 0; e < ne; e++) {
			counts[e] = (float)(16 << e);
			for (int c = 0; c < IM_COLS; c++) sums[e * IM_COLS + c] = im_value(c, k ? e : 0) * counts[e];
		}
		const int64_t ns[2] = {IM_COLS, ne}, nc[2] = {1, ne};
		snprintf(tn, sizeof tn, "%s.in_sum2", name);
		gguf_writer_add_tensor(w, tn, GGUF_T_F32, 2, ns, sums, sizeof(float) * IM_COLS * ne);
		snprintf(tn, sizeof tn, "%s.counts", name);
		if (!(k && nocounts)) gguf_writer_add_tensor(w, tn, GGUF_T_F32, 2, nc, counts, sizeof(float) * ne);
	}
	CHECKF(gguf_writer_write(w, path, err, sizeof err) == 0, "%s", err);
	gguf_writer_free(w);
}

// Sum over the tensor's elements of importance times squared error, against the F32 original.
static double im_werr(const gguf_tensor *orig, const gguf_tensor *q) {
	const int64_t n = gguf_tensor_nelem(orig), rows = n / IM_COLS;
	float *y = malloc((size_t)n * 4);
	tensor_traits_of(q->type)->to_f32(q->data, y, n);
	double e = 0;
	for (int64_t r = 0; r < rows; r++)
		for (int c = 0; c < IM_COLS; c++) {
			const double d = (double)((const float *)orig->data)[r * IM_COLS + c] - y[r * IM_COLS + c];
			e += im_value(c, (int)(r / IM_ROWS)) * d * d;
		}
	free(y);
	return e;
}

static void test_imatrix(void) {
	char src[1024], dat[1024], gg[1024], out[4][1024], errf[1024];
	snprintf(src, sizeof src, "%s/lanes-im-model-%d.gguf", t_tmp(), (int)getpid());
	snprintf(dat, sizeof dat, "%s/lanes-im-%d.dat", t_tmp(), (int)getpid());
	snprintf(gg, sizeof gg, "%s/lanes-im-%d.gguf", t_tmp(), (int)getpid());
	snprintf(errf, sizeof errf, "%s/lanes-im-%d.err", t_tmp(), (int)getpid());
	for (int i = 0; i < 4; i++) snprintf(out[i], sizeof out[i], "%s/lanes-im-out%d-%d.gguf", t_tmp(), i, (int)getpid());
	CHECK(im_model(src) == 0);
	im_dat(dat, false, 0);
	im_gguf(gg, false);
	CHECK(run(NULL, "quantize %s %s IQ2_XXS", src, out[0]) == 0);
	CHECK(run(errf, "quantize %s %s IQ2_XXS --imatrix %s", src, out[1], dat) == 0);
	char *text = t_read_file(errf, NULL);
	CHECKF(text && strstr(text, "2 entries, 8 chunks") && strstr(text, "importance used for 2 tensors") && !strstr(text, "lanes quantizes them without"),
	       "stderr with --imatrix: %s", text ? text : "(none)");
	free(text);
	CHECK(run(NULL, "quantize %s %s IQ2_XXS --imatrix %s", src, out[2], gg) == 0);
	gguf *g0 = open_or_fail(src), *g[3] = {open_or_fail(out[0]), open_or_fail(out[1]), open_or_fail(out[2])};
	if (g0 && g[0] && g[1] && g[2]) {
		const char *names[2] = {"blk.3.ffn_gate.weight", "blk.3.ffn_up_exps.weight"};
		for (int k = 0; k < 2; k++) {
			const gguf_tensor *o = gguf_find_tensor(g0, names[k]), *t[3];
			for (int i = 0; i < 3; i++) t[i] = gguf_find_tensor(g[i], names[k]);
			if (!o || !t[0] || !t[1] || !t[2]) {
				CHECKF(0, "%s missing", names[k]);
				continue;
			}
			CHECKF(t[1]->type == GGUF_T_IQ2_XXS && t[0]->type == GGUF_T_IQ2_XXS, "%s: IQ2_XXS (%s)", names[k], type_name(t[1]->type));
			// both formats give the same means, so the same bytes
			CHECKF(t[1]->nbytes == t[2]->nbytes && !memcmp(t[1]->data, t[2]->data, t[1]->nbytes), "%s: .dat and GGUF differ", names[k]);
			const double plain = im_werr(o, t[0]), weighted = im_werr(o, t[1]);
			printf("imatrix %s: importance-weighted error %.4g without, %.4g with (%.0f%% lower)\n", names[k], plain, weighted,
			       100.0 * (1.0 - weighted / plain));
			CHECKF(weighted < 0.8 * plain, "%s: the importance-weighted error %.4g with the matrix, %.4g without", names[k], weighted, plain);
		}
	}
	gguf_free(g0);
	for (int i = 0; i < 3; i++) gguf_free(g[i]);
	// an entry missing is said, and the tensor is fitted without
	im_dat(dat, true, 0);
	CHECK(run(errf, "quantize %s %s IQ2_XXS --imatrix %s", src, out[3], dat) == 0);
	text = t_read_file(errf, NULL);
	CHECKF(text && strstr(text, "has nothing for blk.3.ffn_up_exps.weight") && strstr(text, "(1 of the types that take it had none)"),
	       "a missing entry: %s", text ? text : "(none)");
	free(text);
	// bad files fail with the file and the entry named, and write nothing
	static const struct {
		int kind;
		long cut;
		const char *want;
	} bad[] = {
		{0, 30, "entry blk.3.ffn_gate.weight: cut short"}, {0, 2, "not an importance matrix"},
		{0, 1000, "512 values, more than the file holds"}, {1, 0, "in_sum2 without its counts"},
		{2, 0, "cannot open it"}, {3, 0, "takes 2048 (made for another model?)"}, {4, 0, "value 0 is -1"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		remove(out[3]);
		const char *file = dat;
		if (bad[i].kind == 0) im_dat(dat, false, bad[i].cut);
		if (bad[i].kind == 1) im_gguf(gg, true), file = gg;
		if (bad[i].kind == 2) file = "/nonexistent/imatrix.dat";
		if (bad[i].kind == 3 || bad[i].kind == 4) { // the stack's entry sized for one matrix; a negative mean
			FILE *f = fopen(dat, "wb");
			const char *nm = bad[i].kind == 3 ? "blk.3.ffn_up_exps.weight" : "blk.3.ffn_gate.weight";
			put_i32(f, 1), put_i32(f, (int32_t)strlen(nm));
			fwrite(nm, 1, strlen(nm), f);
			put_i32(f, 1), put_i32(f, IM_COLS);
			for (int c = 0; c < IM_COLS; c++) {
				const float v = bad[i].kind == 4 ? -1.0f : 1.0f;
				fwrite(&v, 4, 1, f);
			}
			fclose(f);
		}
		CHECK(run(errf, "quantize %s %s IQ2_XXS --imatrix %s", src, out[3], file) != 0);
		text = t_read_file(errf, NULL);
		CHECKF(text && strstr(text, bad[i].want), "bad imatrix %zu: stderr lacks '%s': %s", i, bad[i].want, text ? text : "(none)");
		free(text);
		FILE *o = fopen(out[3], "rb");
		CHECKF(!o, "bad imatrix %zu: an output was written", i);
		if (o) fclose(o);
	}
	remove(src), remove(dat), remove(gg), remove(errf);
	for (int i = 0; i < 4; i++) remove(out[i]);
}

int main(void) {
	test_matches_llamacpp();
	test_mixes_moe_qwen2();
	test_stories();
	test_iq4_mixes();
	test_mxfp4_mixes();
	test_low_bit_mixes();
	test_gen();
	test_imatrix();
	T_DONE("cli_quantize");
}
