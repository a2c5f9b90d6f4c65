// tests: every architecture the model loads (llama, MQA, tied, rope scalings, qwen2, qwen3,
// llama MoE, qwen2moe, qwen3moe, gemma2, gemma3, phi3, gpt-oss, qwen3next) on small synthetic files, against a plain float64 forward
// written here from the weights in the file; and hostile files that must fail with a clear
// message naming the culprit, never a crash.
#include "t.h"
#include "gen.h"
#include "ref64.h"

#include "model/model.h"
#include "tensor/tensor.h"

#include <math.h>
#include <unistd.h>

typedef struct {
	const char *arch;
	int E, L, H, HKV, D, F, V;  // D: key_length (0: E / H)
	int X, K, FX, FS;           // experts, used, expert FFN, shared expert FFN
	bool bias, qk_norm, tied, moe_norm, shexp;
	const char *rope_type;      // NULL: none
	float rope_factor;
	bool rope_freqs;            // rope_freqs.weight tensor
	uint32_t wtype;             // matrices' type
	int swa;                    // gemma, phi3: attention.sliding_window
	float attn_cap, final_cap;  // gemma2: the soft caps
	const char *swa_layers;     // gemma3: attention.sliding_window_pattern as one bool a layer ("1": local)
	bool no_short;              // phi3: leave rope_factors_short out (its factors are written, both)
	bool neg_short;             // phi3: every short factor -1
	// Hostile knobs.
	const char *skip;           // leave this tensor out
	const char *reshape;        // give this tensor one row too many
	const char *retype;         // store this tensor as I32
	int bad_key;                // 1: head_count 0, 2: kv heads 3, 3: used > experts, 4: huge embd,
	                            // 5: rope type "foo", 6: odd rope dims, 7: value_length differs
} synth;

static float frand(uint64_t *s) {
	*s = splitmix64(*s);
	return (float)((double)(*s >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static void key_u32(gguf_writer *w, const synth *s, const char *k, uint32_t v) {
	char full[128];
	snprintf(full, sizeof full, "%s.%s", s->arch, k);
	gguf_writer_set_u32(w, full, v);
}

static void key_f32(gguf_writer *w, const synth *s, const char *k, float v) {
	char full[128];
	snprintf(full, sizeof full, "%s.%s", s->arch, k);
	gguf_writer_set_f32(w, full, v);
}

// Adds tensor name of shape [a, b, c] filled with mean + scale * noise, stored as type.
static void add(gguf_writer *w, const synth *s, uint64_t *seed, const char *name, int64_t a, int64_t b, int64_t c,
		uint32_t type, float mean, float scale) {
	if (s->skip && !strcmp(s->skip, name)) return;
	if (s->reshape && !strcmp(s->reshape, name)) b++;
	int64_t ne[3] = {a, b, c}, n = a * b * c;
	uint32_t nd = c > 1 ? 3 : b > 1 ? 2 : 1;
	float *f = malloc((size_t)n * sizeof *f);
	for (int64_t i = 0; i < n; i++) f[i] = mean + scale * frand(seed);
	if (s->retype && !strcmp(s->retype, name)) {
		gguf_writer_add_tensor(w, name, GGUF_T_I32, nd, ne, f, (uint64_t)n * 4);
	} else {
		const tensor_traits *tt = tensor_traits_of(type);
		size_t rb = tensor_row_bytes(type, a);
		uint8_t *q = malloc(rb * (size_t)(b * c));
		for (int64_t r = 0; r < b * c; r++) tt->from_f32(f + r * a, q + r * rb, a);
		gguf_writer_add_tensor(w, name, type, nd, ne, q, rb * (size_t)(b * c));
		free(q);
	}
	free(f);
}

static int write_synth(const synth *s, const char *path) {
	gguf_writer *w = gguf_writer_new();
	const int D = s->D ? s->D : s->E / s->H, qd = s->H * D, kvd = s->HKV * D;
	gguf_writer_set_str(w, "general.architecture", s->arch);
	key_u32(w, s, "context_length", 256);
	key_u32(w, s, "embedding_length", s->bad_key == 4 ? 0x7fffffffu : (uint32_t)s->E);
	key_u32(w, s, "block_count", (uint32_t)s->L);
	key_u32(w, s, "feed_forward_length", (uint32_t)s->F);
	key_u32(w, s, "attention.head_count", s->bad_key == 1 ? 0 : (uint32_t)s->H);
	key_u32(w, s, "attention.head_count_kv", s->bad_key == 2 ? 3 : (uint32_t)s->HKV);
	key_f32(w, s, "attention.layer_norm_rms_epsilon", 1e-5f);
	key_f32(w, s, "rope.freq_base", 10000.0f);
	if (s->D) key_u32(w, s, "attention.key_length", (uint32_t)s->D);
	const bool gemma = !strncmp(s->arch, "gemma", 5), phi3 = !strcmp(s->arch, "phi3"), oai = !strcmp(s->arch, "gpt-oss");
	if (gemma || phi3 || oai) key_u32(w, s, "attention.sliding_window", (uint32_t)s->swa);
	if (s->swa_layers) {
		char full[128];
		uint8_t local[64];
		for (int l = 0; l < s->L; l++) local[l] = s->swa_layers[l] == '1';
		snprintf(full, sizeof full, "%s.attention.sliding_window_pattern", s->arch);
		gguf_writer_set_arr(w, full, GGUF_BOOL, local, (uint64_t)s->L);
	}
	if (!strcmp(s->arch, "gemma2")) {
		key_f32(w, s, "attn_logit_softcapping", s->attn_cap);
		key_f32(w, s, "final_logit_softcapping", s->final_cap);
	}
	if (s->bad_key == 7) key_u32(w, s, "attention.value_length", (uint32_t)D + 2);
	if (s->bad_key == 6) key_u32(w, s, "rope.dimension_count", (uint32_t)D - 1);
	if (s->X) {
		key_u32(w, s, "expert_count", (uint32_t)s->X);
		key_u32(w, s, "expert_used_count", s->bad_key == 3 ? (uint32_t)s->X + 1 : (uint32_t)s->K);
		key_u32(w, s, "expert_feed_forward_length", (uint32_t)s->FX);
		if (s->FS) key_u32(w, s, "expert_shared_feed_forward_length", (uint32_t)s->FS);
	}
	if (s->rope_type || s->bad_key == 5) {
		char full[128];
		snprintf(full, sizeof full, "%s.rope.scaling.type", s->arch);
		gguf_writer_set_str(w, full, s->bad_key == 5 ? "foo" : s->rope_type);
		key_f32(w, s, "rope.scaling.factor", s->rope_factor);
		key_u32(w, s, "rope.scaling.original_context_length", 64);
	}
	uint64_t seed = 12345;
	const uint32_t wt = s->wtype;
	char nm[96];
	add(w, s, &seed, "token_embd.weight", s->E, s->V, 1, wt, 0, 1.0f);
	add(w, s, &seed, "output_norm.weight", s->E, 1, 1, GGUF_T_F32, 1, 0.1f);
	if (!s->tied) add(w, s, &seed, "output.weight", s->E, s->V, 1, wt, 0, 4.0f / sqrtf((float)s->E));
	if (s->rope_freqs) add(w, s, &seed, "rope_freqs.weight", D / 2, 1, 1, GGUF_T_F32, 3, 2);
	if (phi3) {
		add(w, s, &seed, "rope_factors_long.weight", D / 2, 1, 1, GGUF_T_F32, 6, 1);
		if (!s->no_short)
			add(w, s, &seed, "rope_factors_short.weight", D / 2, 1, 1, GGUF_T_F32, s->neg_short ? -1 : 2, s->neg_short ? 0 : 0.5f);
	}
	for (int l = 0; l < s->L; l++) {
#define T(what, a, b, c, type, mean, scale)                            \
	do {                                                           \
		snprintf(nm, sizeof nm, "blk.%d." what, l);            \
		add(w, s, &seed, nm, a, b, c, type, mean, scale);      \
	} while (0)
		const float in = 1.0f / sqrtf((float)s->E);
		T("attn_norm.weight", s->E, 1, 1, GGUF_T_F32, 1, 0.1f);
		if (phi3) {
			T("attn_qkv.weight", s->E, qd + 2 * kvd, 1, wt, 0, 2 * in);
		} else {
			T("attn_q.weight", s->E, qd, 1, wt, 0, 2 * in);
			T("attn_k.weight", s->E, kvd, 1, wt, 0, 2 * in);
			T("attn_v.weight", s->E, kvd, 1, wt, 0, in);
		}
		T("attn_output.weight", qd, s->E, 1, wt, 0, 1.0f / sqrtf((float)qd));
		if (s->bias) {
			T("attn_q.bias", qd, 1, 1, GGUF_T_F32, 0, 0.2f);
			T("attn_k.bias", kvd, 1, 1, GGUF_T_F32, 0, 0.2f);
			T("attn_v.bias", kvd, 1, 1, GGUF_T_F32, 0, 0.2f);
		}
		if (s->qk_norm) {
			T("attn_q_norm.weight", D, 1, 1, GGUF_T_F32, 1, 0.2f);
			T("attn_k_norm.weight", D, 1, 1, GGUF_T_F32, 1, 0.2f);
		}
		if (oai) {
			T("attn_output.bias", s->E, 1, 1, GGUF_T_F32, 0, 0.2f);
			T("attn_sinks.weight", s->H, 1, 1, GGUF_T_F32, 1, 1);
		}
		if (oai) T("post_attention_norm.weight", s->E, 1, 1, GGUF_T_F32, 1, 0.1f);
		else T("ffn_norm.weight", s->E, 1, 1, GGUF_T_F32, 1, 0.1f);
		if (gemma) {
			T("post_attention_norm.weight", s->E, 1, 1, GGUF_T_F32, 1, 0.3f);
			T("post_ffw_norm.weight", s->E, 1, 1, GGUF_T_F32, 1, 0.3f);
		}
		if (phi3) {
			T("ffn_up.weight", s->E, 2 * s->F, 1, wt, 0, in);
			T("ffn_down.weight", s->F, s->E, 1, wt, 0, 1.0f / sqrtf((float)s->F));
		} else if (!s->X) {
			T("ffn_gate.weight", s->E, s->F, 1, wt, 0, in);
			T("ffn_up.weight", s->E, s->F, 1, wt, 0, in);
			T("ffn_down.weight", s->F, s->E, 1, wt, 0, 1.0f / sqrtf((float)s->F));
		} else {
			T("ffn_gate_inp.weight", s->E, s->X, 1, GGUF_T_F32, 0, 3 * in);
			T("ffn_gate_exps.weight", s->E, s->FX, s->X, wt, 0, in);
			T("ffn_up_exps.weight", s->E, s->FX, s->X, wt, 0, in);
			T("ffn_down_exps.weight", s->FX, s->E, s->X, wt, 0, 1.0f / sqrtf((float)s->FX));
			if (oai) {
				T("ffn_gate_inp.bias", s->X, 1, 1, GGUF_T_F32, 0, 0.5f);
				T("ffn_gate_exps.bias", s->FX, s->X, 1, GGUF_T_F32, 0, 0.5f);
				T("ffn_up_exps.bias", s->FX, s->X, 1, GGUF_T_F32, 0, 0.5f);
				T("ffn_down_exps.bias", s->E, s->X, 1, GGUF_T_F32, 0, 0.2f);
			}
			if (s->FS) {
				T("ffn_gate_inp_shexp.weight", s->E, 1, 1, GGUF_T_F32, 0, in);
				T("ffn_gate_shexp.weight", s->E, s->FS, 1, wt, 0, in);
				T("ffn_up_shexp.weight", s->E, s->FS, 1, wt, 0, in);
				T("ffn_down_shexp.weight", s->FS, s->E, 1, wt, 0, 1.0f / sqrtf((float)s->FS));
			}
		}
#undef T
	}
	char err[256];
	int rc = gguf_writer_write(w, path, err, sizeof err);
	if (rc) fprintf(stderr, "write %s: %s\n", path, err);
	gguf_writer_free(w);
	return rc;
}

// ---- the float64 reference (ref64.c) over the file's weights ---------------------------------
static ref64_shape ref_shape(const synth *s) {
	const bool gemma2 = !strcmp(s->arch, "gemma2"), gemma3 = !strcmp(s->arch, "gemma3"), phi3 = !strcmp(s->arch, "phi3"),
		   oai = !strcmp(s->arch, "gpt-oss");
	int pattern = gemma2 || oai ? 2 : 6; // a bool a layer: its period (every layer local: 0)
	if (s->swa_layers) pattern = (int)(strchr(s->swa_layers, '0') ? strchr(s->swa_layers, '0') - s->swa_layers + 1 : 0);
	ref64_shape r = {.arch = s->arch, .E = s->E, .L = s->L, .H = s->H, .HKV = s->HKV, .D = s->D ? s->D : s->E / s->H,
			     .V = s->V, .F = s->F, .X = s->X, .K = s->K, .FX = s->FX, .FS = s->FS, .moe_norm = s->moe_norm,
			     .tied = s->tied, .rope_base = 10000.0,
			     .rope_scale = s->rope_type && !strcmp(s->rope_type, "linear") ? 1.0 / s->rope_factor : 1.0,
			     .rms_eps = 1e-5, .embd_scale = gemma2 ? sqrt((double)s->E) : 0, .post_norms = gemma2, .geglu = gemma2,
			     .attn_softcap = gemma2 ? s->attn_cap : 0, .final_softcap = gemma2 ? s->final_cap : 0,
			     .swa = gemma2 || gemma3 || phi3 || oai ? s->swa : 0, .swa_pattern = phi3 ? 0 : pattern,
			     .rope_factors = phi3 ? "rope_factors_short.weight" : NULL, .oai = oai};
	if (gemma3) r.embd_scale = sqrt((double)s->E), r.post_norms = r.geglu = true;
	return r;
}

static void reference(const gguf *g, const synth *s, const int32_t *ids, int P, double *logits) {
	const ref64_shape rs = ref_shape(s);
	ref64_forward(g, &rs, ids, P, logits, NULL);
}

// Gemma 2: the reference without its window, without each soft cap, and with SiLU instead of
// GELU is each far from the model's logits (so a pass that left one out would fail the check).
static void gemma2_parts(const char *label, const gguf *g, const synth *s, const int32_t *ids, int P, const float *lg,
			 double tol) {
	for (int k = 0; k < 4; k++) {
		ref64_shape rs = ref_shape(s);
		if (k == 0) rs.swa = 0;
		if (k == 1) rs.attn_softcap = 0;
		if (k == 2) rs.final_softcap = 0;
		if (k == 3) rs.geglu = false;
		double *alt = malloc(sizeof(double) * P * s->V), worst = 0;
		ref64_forward(g, &rs, ids, P, alt, NULL);
		for (int i = 0; i < P * s->V; i++) worst = fmax(worst, fabs(lg[i] - alt[i]));
		static const char *const parts[4] = {"window", "attention soft cap", "final soft cap", "GELU"};
		CHECKF(worst > 10 * tol, "%s: the %s changes the logits by %g only", label, parts[k], worst);
		free(alt);
	}
}

// ---- the checks --------------------------------------------------------------------------
// The logits of every row of ids[0..P) in one pass from position 0 into lg; 0 or the pass's code.
static int run_prompt(const model *m, const int32_t *ids, int P, float *lg, char *err, size_t errlen) {
	kv_config c = model_kv_config(m, KV_F16S, 1, P, 4);
	kv_cache *kv;
	int rc = kv_new(&kv, &c, err, errlen);
	model_row *rows = malloc(sizeof *rows * (size_t)P);
	for (int i = 0; i < P; i++) rows[i] = (model_row){ids[i], i, 0, true, NULL};
	if (!rc) rc = model_forward(m, kv, NULL, rows, P, lg, err, errlen);
	free(rows);
	kv_free(kv);
	return rc;
}

static void arch_case(const char *label, synth s) {
	char path[512], err[256];
	snprintf(path, sizeof path, "%s/arch-%s.gguf", t_tmp(), label);
	CHECK(write_synth(&s, path) == 0);
	model *m;
	int rc = model_load(&m, path, err, sizeof err);
	CHECKF(rc == 0, "%s: %s", label, err);
	if (rc) return;
	const model_hparams *hp = model_hparams_of(m);
	CHECK(hp->n_vocab == s.V && hp->n_heads == s.H && hp->n_kv_heads == s.HKV &&
	      hp->head_dim == (s.D ? s.D : s.E / s.H) && hp->n_experts == s.X);
	enum { P = 12 };
	int32_t ids[P];
	for (int i = 0; i < P; i++) ids[i] = (int32_t)((i * 7 + 3) % s.V);
	float *lg = malloc(sizeof(float) * P * s.V);
	double *ref = malloc(sizeof(double) * P * s.V);
	CHECKF(run_prompt(m, ids, P, lg, err, sizeof err) == 0, "%s: %s", label, err);
	bool finite = true;
	for (int i = 0; i < P * s.V; i++) finite &= isfinite(lg[i]);
	CHECKF(finite, "%s: non-finite logits", label);
	if (!(s.rope_type && !strcmp(s.rope_type, "yarn"))) {
		reference(model_gguf(m), &s, ids, P, ref);
		double worst = 0, spread = 0;
		for (int i = 0; i < P * s.V; i++) worst = fmax(worst, fabs(lg[i] - ref[i])), spread += ref[i] * ref[i];
		spread = sqrt(spread / (P * s.V));
		CHECKF(worst < 0.003 * spread && spread > 0.5, "%s: logits off the float64 reference by %g (rms %g)", label,
		       worst, spread);
		if (!strcmp(s.arch, "gemma2")) gemma2_parts(label, model_gguf(m), &s, ids, P, lg, 0.003 * spread);
	}
	free(lg), free(ref);
	model_free(m);
	remove(path);
}

// A part of an architecture and the reference without it (or done another way).
typedef struct {
	const char *name;
	void (*leave_out)(ref64_shape *);
} arch_part;

static void no_window(ref64_shape *s) { s->swa = 0; }
static void no_qk_norm(ref64_shape *s) { s->no_qk_norm = true; }
static void global_rope_on_local(ref64_shape *s) { s->rope_base_swa = s->rope_scale_swa = 0; }
static void no_global_scaling(ref64_shape *s) { s->rope_scale = 1; }

// `lanes gen --shape shape`: a prompt past the local layers' window, every row's logits against
// the float64 reference of the hyper-parameters as loaded, and each part left out of the
// reference far from them (so a pass that left it out would fail). hp_ok: the shape as loaded;
// n_ctx: the context model_set_context is told (0: none).
static void gen_parts_case(const char *shape, const char *type, bool (*hp_ok)(const model_hparams *), const arch_part *parts,
			   int n_parts, int32_t n_ctx) {
	char path[512], vocab[512], err[256];
	snprintf(path, sizeof path, "%s/arch-gen-%s-%s.gguf", t_tmp(), shape, type);
	snprintf(vocab, sizeof vocab, "%s/models/stories260K.gguf", t_shared());
	CHECKF(t_gen_model(shape, type, vocab, path) == 0, "lanes gen --shape %s --type %s", shape, type);
	model *m;
	int rc = model_load(&m, path, err, sizeof err);
	CHECKF(rc == 0, "%s: %s", shape, err);
	if (rc) return;
	if (n_ctx) model_set_context(m, n_ctx);
	CHECKF(hp_ok(model_hparams_of(m)), "%s: hyper-parameters as loaded", shape);
	enum { P = 40 };
	const int V = model_hparams_of(m)->n_vocab;
	int32_t ids[P];
	for (int i = 0; i < P; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
	float *lg = malloc(sizeof(float) * P * V);
	double *ref = malloc(sizeof(double) * P * V), *alt = malloc(sizeof(double) * P * V);
	CHECKF(run_prompt(m, ids, P, lg, err, sizeof err) == 0, "%s: %s", shape, err);
	ref64_shape rs;
	ref64_shape_of(m, &rs);
	ref64_forward(model_gguf(m), &rs, ids, P, ref, NULL);
	double worst = 0, spread = 0;
	for (int i = 0; i < P * V; i++) worst = fmax(worst, fabs(lg[i] - ref[i])), spread += ref[i] * ref[i];
	spread = sqrt(spread / (P * V));
	CHECKF(worst < 0.003 * spread && spread > 0.5, "%s %s: logits off the float64 reference by %g (rms %g)", shape, type,
	       worst, spread);
	for (int k = 0; k < n_parts; k++) {
		ref64_shape vs = rs;
		parts[k].leave_out(&vs);
		ref64_forward(model_gguf(m), &vs, ids, P, alt, NULL);
		double moved = 0;
		bool finite = true;
		for (int i = 0; i < P * V; i++) moved = fmax(moved, fabs(lg[i] - alt[i])), finite &= isfinite(alt[i]);
		CHECKF(finite, "%s: the reference without the %s is not finite", shape, parts[k].name);
		CHECKF(moved > 0.03 * spread, "%s: the %s changes the logits by %g only", shape, parts[k].name, moved);
	}
	free(lg), free(ref), free(alt);
	model_free(m);
	remove(path);
}

static bool gemma2_hp(const model_hparams *hp) {
	return !strcmp(hp->arch, "gemma2") && hp->n_swa == 16 && hp->swa_pattern == 2 && hp->attn_softcap == 50.0f &&
	       hp->final_softcap == 30.0f && hp->head_dim == 32 && hp->post_norms && hp->geglu && !hp->rope_swa.n_rot;
}

static const arch_part gemma2_gen_parts[] = {{"window", no_window}};

static bool gemma3_hp(const model_hparams *hp) {
	return !strcmp(hp->arch, "gemma3") && hp->n_swa == 16 && hp->swa_pattern == 6 && hp->attn_softcap == 0.0f &&
	       hp->final_softcap == 0.0f && hp->head_dim == 32 && hp->post_norms && hp->geglu && hp->rope.freq_base == 1e6 &&
	       hp->rope.freq_scale == 0.125 && hp->rope_swa.freq_base == 10000.0 && hp->rope_swa.freq_scale == 1.0 &&
	       model_layer_window(hp, 4) == 16 && model_layer_window(hp, 5) == 0;
}

static void no_partial_rotary(ref64_shape *s) { s->n_rot = 0; }
static void no_rope_factors(ref64_shape *s) { s->rope_factors = "none"; }
static void other_rope_factors(ref64_shape *s) {
	s->rope_factors = strcmp(s->rope_factors, "rope_factors_long.weight") ? "rope_factors_long.weight" : "rope_factors_short.weight";
}
static void no_attn_factor(ref64_shape *s) { s->rope_mscale = 1; }
static void gate_up_swapped(ref64_shape *s) { s->swap_gate_up = true; }

static bool phi3_hp(const model_hparams *hp) {
	bool every = true;
	for (int l = 0; l < hp->n_layers; l++) every &= model_layer_window(hp, l) == 16;
	return !strcmp(hp->arch, "phi3") && every && hp->head_dim == 32 && hp->rope.n_rot == 24 && hp->rope.neox &&
	       hp->rope.n_ctx_orig == 64 && fabs(hp->rope.attn_factor - sqrt(1 + log(4.0) / log(64.0))) < 1e-6 &&
	       hp->rope.freq_factors && !hp->post_norms && !hp->geglu && hp->embd_scale == 1.0f;
}

static const arch_part phi3_parts[] = {
	{"window", no_window},
	{"partial rotary", no_partial_rotary},
	{"LongRoPE factors", no_rope_factors},
	{"choice of LongRoPE factors", other_rope_factors},
	{"attention factor", no_attn_factor},
	{"gate-up order", gate_up_swapped},
};

// model_set_context: Phi 3 rotates by its short factors at load and within the original context
// of 64, by its long ones past it.
static void phi3_context_case(void) {
	char path[512], vocab[512], err[256];
	snprintf(path, sizeof path, "%s/arch-phi3-ctx.gguf", t_tmp());
	snprintf(vocab, sizeof vocab, "%s/models/stories260K.gguf", t_shared());
	CHECK(t_gen_model("phi3-test", "F32", vocab, path) == 0);
	model *m;
	CHECKF(model_load(&m, path, err, sizeof err) == 0, "%s", err);
	if (!m) return;
	const void *lg = gguf_find_tensor(model_gguf(m), "rope_factors_long.weight")->data,
		   *sh = gguf_find_tensor(model_gguf(m), "rope_factors_short.weight")->data;
	const model_hparams *hp = model_hparams_of(m);
	CHECK((const void *)hp->rope.freq_factors == sh);
	model_set_context(m, 65);
	CHECK((const void *)hp->rope.freq_factors == lg);
	model_set_context(m, 64);
	CHECK((const void *)hp->rope.freq_factors == sh);
	model_free(m);
	remove(path);
}

static void no_sinks(ref64_shape *s) { s->no_sinks = true; }
static void no_biases(ref64_shape *s) { s->no_biases = true; }
static void plain_glu(ref64_shape *s) { s->plain_glu = true; }
static void no_yarn(ref64_shape *s) { s->yarn_ext = 0, s->rope_scale = 1; }

static bool oai_hp(const model_hparams *hp) {
	return !strcmp(hp->arch, "gpt-oss") && hp->oai && hp->n_swa == 16 && hp->swa_pattern == 2 && model_layer_window(hp, 0) == 16 &&
	       model_layer_window(hp, 1) == 0 && hp->head_dim == 32 && hp->n_experts == 8 && hp->n_experts_used == 4 &&
	       hp->moe_norm && hp->rope.neox && !hp->post_norms && !hp->geglu && hp->embd_scale == 1.0f && hp->rope.ext_factor == 1.0 &&
	       hp->rope.freq_scale == 0.25 && hp->rope.n_ctx_orig == 64 && hp->rope.beta_fast == 32 && hp->rope.beta_slow == 1;
}

static const arch_part oai_parts[] = {
	{"window", no_window},
	{"attention sinks", no_sinks},
	{"router and expert biases", no_biases},
	{"clamped SwiGLU", plain_glu},
	{"YaRN", no_yarn},
};

static const arch_part gemma3_parts[] = {
	{"window", no_window},
	{"q/k norm", no_qk_norm},
	{"local layers' rope base", global_rope_on_local},
	{"global layers' rope scaling", no_global_scaling},
};

static void no_attn_gate(ref64_shape *s) { s->no_attn_gate = true; }
static void no_conv(ref64_shape *s) { s->no_conv = true; }
static void no_decay(ref64_shape *s) { s->no_decay = true; }
static void no_out_gate(ref64_shape *s) { s->no_out_gate = true; }

static bool next_hp(const model_hparams *hp) {
	return !strcmp(hp->arch, "qwen3next") && hp->attn_gate && hp->full_attn_interval == 4 && hp->ssm_conv == 4 &&
	       hp->ssm_dk == 16 && hp->ssm_k_heads == 2 && hp->ssm_v_heads == 4 && hp->ssm_dv == 16 && model_layer_recurrent(hp, 0) &&
	       model_layer_recurrent(hp, 2) && !model_layer_recurrent(hp, 3) && model_kv_layers(hp) == 1 && hp->head_dim == 32 &&
	       hp->rope.n_rot == 8 && hp->rope.neox && hp->n_experts == 8 && hp->n_experts_used == 2 && hp->n_ff_shexp == 64 &&
	       hp->moe_norm && model_state_floats(hp) == 3 * (3 * 128 + 4 * 16 * 16);
}

static const arch_part next_parts[] = {
	{"attention's output gate", no_attn_gate},
	{"causal convolution", no_conv},
	{"decay", no_decay},
	{"gated norm's gate", no_out_gate},
	{"partial rotary", no_partial_rotary},
};

// Qwen3-Next's delta rule two ways in the float64 reference: token by token and in chunks of 16
// (and of 7, which do not divide the prompt) agree far within the accuracy bar.
static void next_forms_case(void) {
	char path[512], vocab[512], err[256];
	snprintf(path, sizeof path, "%s/arch-forms-%d.gguf", t_tmp(), (int)getpid());
	snprintf(vocab, sizeof vocab, "%s/models/stories260K.gguf", t_shared());
	CHECK(t_gen_model("qwen3-next-test", "F32", vocab, path) == 0);
	model *m;
	int rc = model_load(&m, path, err, sizeof err);
	CHECKF(rc == 0, "%s", err);
	if (rc) return;
	enum { P = 40 };
	const int V = model_hparams_of(m)->n_vocab;
	int32_t ids[P];
	for (int i = 0; i < P; i++) ids[i] = (int32_t)((i * 53 + 5) % V);
	double *a = malloc(sizeof(double) * P * V), *b = malloc(sizeof(double) * P * V);
	ref64_shape rs;
	ref64_shape_of(m, &rs);
	ref64_forward(model_gguf(m), &rs, ids, P, a, NULL);
	const int chunks[] = {16, 7};
	for (int c = 0; c < 2; c++) {
		rs.chunk = chunks[c];
		ref64_forward(model_gguf(m), &rs, ids, P, b, NULL);
		double worst = 0, spread = 0;
		for (int i = 0; i < P * V; i++) worst = fmax(worst, fabs(a[i] - b[i])), spread += a[i] * a[i];
		spread = sqrt(spread / (P * V));
		CHECKF(worst < 1e-9 * spread, "chunks of %d: the chunked delta rule is off the recurrence by %g (rms %g)", chunks[c], worst,
		       spread);
	}
	free(a), free(b);
	model_free(m);
	remove(path);
}

// A copy of the gguf at src with tensor skip left out, tensor reshape given one row more, and
// (key non-NULL) key set to u32 val.
static void rewrite(const char *src, const char *dst, const char *skip, const char *reshape, const char *key, uint32_t val) {
	char err[256];
	gguf *g;
	CHECKF(gguf_open(&g, src, err, sizeof err) == 0, "%s", err);
	gguf_writer *w = gguf_writer_new();
	CHECK(gguf_writer_copy_kv(w, g, "general.alignment") == 0);
	if (key) CHECK(gguf_writer_set_u32(w, key, val) == 0);
	for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
		const gguf_tensor *t = gguf_tensor_at(g, i);
		if (skip && !strcmp(t->name, skip)) continue;
		int64_t ne[GGUF_MAX_DIMS];
		memcpy(ne, t->ne, sizeof ne);
		uint64_t nb = t->nbytes;
		void *data = (void *)t->data;
		if (reshape && !strcmp(t->name, reshape)) {
			const uint64_t row = nb / (uint64_t)(ne[1] * ne[2] * ne[3]);
			ne[1]++;
			data = calloc(1, nb + row);
			memcpy(data, t->data, nb);
			nb += row;
		}
		CHECK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne, data, nb) == 0);
		if (data != t->data) free(data);
	}
	CHECKF(gguf_writer_write(w, dst, err, sizeof err) == 0, "%s", err);
	gguf_writer_free(w);
	gguf_free(g);
}

// Older Qwen3-Next files store a DeltaNet layer's attn_qkv and attn_gate as one ssm_in whose rows
// per key head are its q, k, its value heads' v, then their z: the same weights in that layout
// give the same logits bit for bit, and the float64 reference reads it too.
static void next_legacy_case(void) {
	char src[512], dst[512], vocab[512], err[256];
	snprintf(src, sizeof src, "%s/arch-next-new-%d.gguf", t_tmp(), (int)getpid());
	snprintf(dst, sizeof dst, "%s/arch-next-old-%d.gguf", t_tmp(), (int)getpid());
	snprintf(vocab, sizeof vocab, "%s/models/stories260K.gguf", t_shared());
	CHECK(t_gen_model("qwen3-next-test", "Q8_0", vocab, src) == 0);
	model *a;
	CHECKF(model_load(&a, src, err, sizeof err) == 0, "%s", err);
	if (!a) return;
	const model_hparams *hp = model_hparams_of(a);
	const int64_t Dk = hp->ssm_dk, Dv = hp->ssm_dv, Hk = hp->ssm_k_heads, R = hp->ssm_v_heads / Hk;
	const gguf *g = model_gguf(a);
	gguf_writer *w = gguf_writer_new();
	CHECK(gguf_writer_copy_kv(w, g, "general.alignment") == 0);
	for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
		const gguf_tensor *t = gguf_tensor_at(g, i);
		int l;
		char leaf[64];
		if (sscanf(t->name, "blk.%d.%63s", &l, leaf) == 2 && !strcmp(leaf, "attn_gate.weight")) continue;
		if (sscanf(t->name, "blk.%d.%63s", &l, leaf) != 2 || strcmp(leaf, "attn_qkv.weight")) {
			CHECK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes) == 0);
			continue;
		}
		char zn[64], in[64];
		snprintf(zn, sizeof zn, "blk.%d.attn_gate.weight", l);
		snprintf(in, sizeof in, "blk.%d.ssm_in.weight", l);
		const gguf_tensor *z = gguf_find_tensor(g, zn);
		const size_t rb = t->nbytes / (size_t)t->ne[1];
		const int64_t rows = t->ne[1] + z->ne[1];
		uint8_t *out = malloc(rb * (size_t)rows), *o = out;
		const uint8_t *qkv = t->data, *zz = z->data;
#define ROWS(base, first, n) (memcpy(o, (base) + (size_t)(first) * rb, (size_t)(n) * rb), o += (size_t)(n) * rb)
		for (int64_t kh = 0; kh < Hk; kh++) {
			ROWS(qkv, kh * Dk, Dk);
			ROWS(qkv, Hk * Dk + kh * Dk, Dk);
			ROWS(qkv, 2 * Hk * Dk + kh * R * Dv, R * Dv);
			ROWS(zz, kh * R * Dv, R * Dv);
		}
#undef ROWS
		const int64_t ne[2] = {t->ne[0], rows};
		CHECK(gguf_writer_add_tensor(w, in, t->type, 2, ne, out, rb * (size_t)rows) == 0);
		free(out);
	}
	CHECKF(gguf_writer_write(w, dst, err, sizeof err) == 0, "%s", err);
	gguf_writer_free(w);
	model *b;
	CHECKF(model_load(&b, dst, err, sizeof err) == 0, "%s", err);
	enum { P = 24 };
	const int V = hp->n_vocab;
	int32_t ids[P];
	for (int i = 0; i < P; i++) ids[i] = (int32_t)((i * 29 + 7) % V);
	float *la = malloc(sizeof(float) * P * V), *lb = malloc(sizeof(float) * P * V);
	double *ra = malloc(sizeof(double) * P * V), *rb = malloc(sizeof(double) * P * V);
	CHECK(b && run_prompt(a, ids, P, la, err, sizeof err) == 0 && run_prompt(b, ids, P, lb, err, sizeof err) == 0);
	CHECKF(b && !memcmp(la, lb, sizeof(float) * P * V), "ssm_in's layout gives other logits than attn_qkv + attn_gate");
	ref64_shape rs;
	ref64_shape_of(a, &rs);
	ref64_forward(model_gguf(a), &rs, ids, P, ra, NULL);
	if (b) ref64_forward(model_gguf(b), &rs, ids, P, rb, NULL);
	double worst = 0;
	for (int i = 0; b && i < P * V; i++) worst = fmax(worst, fabs(ra[i] - rb[i]));
	CHECKF(b && worst < 1e-9, "the reference reads ssm_in's layout %g off", worst);
	free(la), free(lb), free(ra), free(rb);
	model_free(a);
	model_free(b);
	remove(src);
	remove(dst);
}

// Broken Qwen3-Next files: the loader names the tensor or key at fault.
static void next_hostile_case(void) {
	char src[512], dst[512], vocab[512], err[256];
	snprintf(src, sizeof src, "%s/arch-next-src-%d.gguf", t_tmp(), (int)getpid());
	snprintf(dst, sizeof dst, "%s/arch-next-bad-%d.gguf", t_tmp(), (int)getpid());
	snprintf(vocab, sizeof vocab, "%s/models/stories260K.gguf", t_shared());
	CHECK(t_gen_model("qwen3-next-test", "Q8_0", vocab, src) == 0);
	static const struct {
		const char *skip, *reshape, *key;
		uint32_t val;
		int rc;
		const char *msg;
	} bad[] = {
		{"blk.1.ssm_conv1d.weight", NULL, NULL, 0, LANES_EFORMAT, "blk.1.ssm_conv1d.weight"},
		{"blk.2.ssm_a", NULL, NULL, 0, LANES_EFORMAT, "blk.2.ssm_a"},
		{"blk.0.attn_gate.weight", NULL, NULL, 0, LANES_EFORMAT, "blk.0.attn_gate.weight"},
		{"blk.3.attn_q_norm.weight", NULL, NULL, 0, LANES_EFORMAT, "blk.3.attn_q_norm.weight"},
		{"blk.3.ffn_gate_inp_shexp.weight", NULL, NULL, 0, LANES_EFORMAT, "blk.3.ffn_gate_inp_shexp.weight"},
		{NULL, "blk.0.ssm_ba.weight", NULL, 0, LANES_EFORMAT, "blk.0.ssm_ba.weight has shape"},
		{NULL, "blk.3.attn_q.weight", NULL, 0, LANES_EFORMAT, "blk.3.attn_q.weight has shape"},
		{NULL, "blk.1.ssm_out.weight", NULL, 0, LANES_EFORMAT, "blk.1.ssm_out.weight has shape"},
		{NULL, NULL, "qwen3next.ssm.time_step_rank", 3, LANES_EFORMAT, "time_step_rank = 3"},
		{NULL, NULL, "qwen3next.full_attention_interval", 2, LANES_EFORMAT, "blk.1.attn_q.weight"},
		{NULL, NULL, "qwen3next.ssm.conv_kernel", 0, LANES_EFORMAT, "ssm.conv_kernel"},
		{NULL, NULL, "qwen3next.full_attention_interval", 4000, LANES_EFORMAT, "leaves no full-attention layer"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		t_case("qwen3next hostile %zu", i);
		rewrite(src, dst, bad[i].skip, bad[i].reshape, bad[i].key, bad[i].val);
		model *m = NULL;
		const int rc = model_load(&m, dst, err, sizeof err);
		CHECKF(rc == bad[i].rc && strstr(err, bad[i].msg), "case %zu: rc %d, '%s' (want '%s')", i, rc, err, bad[i].msg);
		model_free(m);
	}
	remove(src);
	remove(dst);
}

static void hostile(const char *label, synth s, int want_rc, const char *want_msg) {
	char path[512], err[256] = "";
	snprintf(path, sizeof path, "%s/hostile-%s.gguf", t_tmp(), label);
	CHECK(write_synth(&s, path) == 0);
	model *m = (model *)1;
	int rc = model_load(&m, path, err, sizeof err);
	CHECKF(rc == want_rc && m == NULL, "%s: rc %d (want %d): %s", label, rc, want_rc, err);
	CHECKF(strstr(err, want_msg) != NULL, "%s: message '%s' does not name '%s'", label, err, want_msg);
	if (!rc) model_free(m);
	remove(path);
}

// model_load_progress: reports from done 0 up to total, the bytes of every matrix the forward
// pass multiplies by (experts, the shared expert's gate and the tied output included), one
// report per matrix after the first; never falling.
typedef struct {
	int n;
	uint64_t done[256], total[256];
} reports;
static void on_report(void *ud, uint64_t done, uint64_t total) {
	reports *r = ud;
	if (r->n < 256) r->done[r->n] = done, r->total[r->n] = total;
	r->n++;
}

static void progress_case(const char *label, synth s) {
	char path[512], err[256];
	snprintf(path, sizeof path, "%s/progress-%s.gguf", t_tmp(), label);
	CHECK(write_synth(&s, path) == 0);
	reports r = {0};
	model *m;
	int rc = model_load_progress(&m, path, on_report, &r, err, sizeof err);
	CHECKF(rc == 0, "%s: %s", label, err);
	if (rc) return;
	const gguf *g = model_gguf(m);
	const bool tied = !gguf_find_tensor(g, "output.weight");
	uint64_t want = 0;
	int mats = 0;
	for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
		const gguf_tensor *t = gguf_tensor_at(g, i);
		// the shared expert's gate is stored as a vector and multiplied by as a one-row matrix
		if ((t->n_dims < 2 && !strstr(t->name, "gate_inp_shexp")) || (!tied && !strcmp(t->name, "token_embd.weight"))) continue;
		want += t->nbytes;
		mats++;
	}
	CHECKF(r.n == mats + 1 && r.n <= 256, "%s: %d reports for %d matrices", label, r.n, mats);
	CHECKF(r.n > 0 && r.done[0] == 0 && r.done[r.n - 1] == want, "%s: reports end at %llu of %llu", label,
	       r.n ? (unsigned long long)r.done[r.n - 1] : 0ull, (unsigned long long)want);
	bool fine = true;
	for (int i = 0; i < r.n && i < 256; i++) fine &= r.total[i] == want && (!i || r.done[i] >= r.done[i - 1]);
	CHECKF(fine, "%s: a report fell or changed its total", label);
	model_free(m);
	// a file that fails to load reports nothing past its error, and the call still fails cleanly
	reports none = {0};
	CHECK(model_load_progress(&m, "/nonexistent/model.gguf", on_report, &none, err, sizeof err) != 0 && none.n == 0 && !m);
}

// A copy of g as out, block_count and nextn_predict_layers set (nextn < 0: the key left out),
// without the tensors whose names start with drop (NULL: none).
static int write_variant(const gguf *g, const char *out, uint32_t blocks, int32_t nextn, const char *drop) {
	gguf_writer *w = gguf_writer_new();
	int rc = w ? 0 : LANES_ENOMEM;
	for (int64_t i = 0; i < gguf_n_kv(g) && !rc; i++) {
		const gguf_kv *kv = gguf_kv_at(g, i);
		char *key = gguf_str_dup(kv->key);
		if (!key) rc = LANES_ENOMEM;
		else if (!strcmp(key, "llama.block_count")) rc = gguf_writer_set_u32(w, key, blocks);
		else if (!strcmp(key, "llama.nextn_predict_layers")) rc = nextn < 0 ? 0 : gguf_writer_set_u32(w, key, (uint32_t)nextn);
		else rc = gguf_writer_set(w, key, &kv->val);
		free(key);
	}
	for (int64_t i = 0; i < gguf_n_tensors(g) && !rc; i++) {
		const gguf_tensor *t = gguf_tensor_at(g, i);
		if (drop && !strncmp(t->name, drop, strlen(drop))) continue;
		rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
	}
	char err[256];
	if (!rc) rc = gguf_writer_write(w, out, err, sizeof err);
	gguf_writer_free(w);
	return rc;
}

static int32_t argmax_f(const float *x, int n) {
	int32_t b = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[b]) b = i;
	return b;
}

// The MTP head of `lanes gen --shape mtp-test` (F32): the file's trunk gives the logits of the
// same file with its nextn layer stripped (the MTP block never runs in the trunk); the head's
// logits over a prompt (each row reading the trunk's hidden state) and a row chained on its
// own state match the float64 reference, and so do its proposals where the reference's best
// two are apart; nextn metadata that leaves no trunk, or a layer without eh_proj, is refused
// naming what is wrong.
static void test_mtp(void) {
	char path[512], alt[512], vocab[512], err[256];
	snprintf(path, sizeof path, "%s/arch-mtp.gguf", t_tmp());
	snprintf(alt, sizeof alt, "%s/arch-mtp-alt.gguf", t_tmp());
	snprintf(vocab, sizeof vocab, "%s/models/stories260K.gguf", t_shared());
	CHECK(t_gen_model("mtp-test", "F32", vocab, path) == 0);
	model *m = NULL, *t = NULL;
	int rc = model_load(&m, path, err, sizeof err);
	CHECKF(rc == 0, "mtp: %s", err);
	if (rc) return;
	const model_hparams *hp = model_hparams_of(m);
	CHECKF(hp->n_layers == 2 && hp->n_nextn == 1, "mtp: %d trunk layers and %d MTP layers", hp->n_layers, hp->n_nextn);
	enum { P = 24 };
	const int V = hp->n_vocab, E = hp->n_embd;
	int32_t ids[P], tok[P];
	for (int i = 0; i < P; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
	float *lg = malloc(sizeof(float) * P * V), *lt = malloc(sizeof(float) * P * V);
	CHECK(write_variant(model_gguf(m), alt, 2, -1, "blk.2.") == 0);
	CHECKF(model_load(&t, alt, err, sizeof err) == 0, "mtp stripped: %s", err);
	CHECK(t && model_hparams_of(t)->n_nextn == 0 && run_prompt(m, ids, P, lg, err, sizeof err) == 0 &&
	      run_prompt(t, ids, P, lt, err, sizeof err) == 0);
	CHECKF(t && !memcmp(lg, lt, sizeof(float) * P * V), "mtp: the trunk's logits are the stripped file's, bit for bit");
	model_free(t);
	char bad[256];
	CHECK(write_variant(model_gguf(m), alt, 3, 3, NULL) == 0);
	CHECK(model_load(&t, alt, bad, sizeof bad) == LANES_EFORMAT && !t && strstr(bad, "nextn_predict_layers = 3"));
	CHECK(write_variant(model_gguf(m), alt, 3, 1, "blk.2.nextn.eh_proj") == 0);
	CHECK(model_load(&t, alt, bad, sizeof bad) == LANES_EFORMAT && !t && strstr(bad, "blk.2.nextn.eh_proj.weight"));
	remove(alt);

	// the trunk's hidden states, then the head over positions 0..P-2 and one chained row at P-1
	kv_config c = model_kv_config(m, KV_F16S, 1, P, 4), hc = model_mtp_kv_config(m, KV_F16S, 1, P, 4);
	kv_cache *kv = NULL, *hkv = NULL;
	model_ws *w = NULL;
	float *hid = malloc(sizeof(float) * P * E), *hout = malloc(sizeof(float) * P * E);
	model_row rows[P];
	bool want[P];
	for (int i = 0; i < P; i++) rows[i] = (model_row){ids[i], i, 0, false, NULL}, want[i] = true;
	CHECK(kv_new(&kv, &c, err, sizeof err) == 0 && kv_new(&hkv, &hc, err, sizeof err) == 0 &&
	      model_ws_new(&w, m, P, 1, 0, err, sizeof err) == 0);
	CHECKF(model_forward_hidden(m, kv, NULL, w, rows, P, lg, want, hid, err, sizeof err) == 0, "mtp trunk: %s", err);
	for (int i = 0; i + 1 < P; i++) rows[i] = (model_row){ids[i + 1], i, 0, true, NULL}, tok[i] = ids[i + 1];
	CHECKF(model_mtp_forward(m, hkv, NULL, w, rows, P - 1, hid, lg, hout, err, sizeof err) == 0, "mtp head: %s", err);
	tok[P - 1] = argmax_f(lg + (size_t)(P - 2) * V, V);
	rows[0] = (model_row){tok[P - 1], P - 1, 0, true, NULL};
	CHECKF(model_mtp_forward(m, hkv, NULL, w, rows, 1, hout + (size_t)(P - 2) * E, lg + (size_t)(P - 1) * V, hout + (size_t)(P - 1) * E,
				 err, sizeof err) == 0, "mtp chained: %s", err);
	// the head takes no adapters
	model_lora_set set = {0};
	rows[0].lora = &set;
	CHECK(model_mtp_forward(m, hkv, NULL, w, rows, 1, hid, lt, NULL, err, sizeof err) == LANES_EINVAL);

	ref64_shape rs;
	ref64_shape_of(m, &rs);
	double *rh = malloc(sizeof(double) * P * E), *rl = malloc(sizeof(double) * P * V), *ro = malloc(sizeof(double) * P * E);
	ref64_forward_hidden(model_gguf(m), &rs, ids, P, NULL, NULL, rh);
	ref64_mtp(model_gguf(m), &rs, tok, rh, P - 1, NULL, ro);
	memcpy(rh + (size_t)(P - 1) * E, ro + (size_t)(P - 2) * E, sizeof(double) * E);
	ref64_mtp(model_gguf(m), &rs, tok, rh, P, rl, NULL);
	double worst = 0, spread = 0;
	for (int i = 0; i < P * V; i++) worst = fmax(worst, fabs(lg[i] - rl[i])), spread += rl[i] * rl[i];
	spread = sqrt(spread / (P * V));
	CHECKF(worst < 0.003 * spread && spread > 0.5, "mtp head: logits off the float64 reference by %g (rms %g)", worst, spread);
	int agree = 0, clear = 0;
	for (int p = 0; p < P; p++) {
		const double *r = rl + (size_t)p * V;
		int b = 0, b2 = -1;
		for (int i = 1; i < V; i++)
			if (r[i] > r[b]) b2 = b, b = i;
			else if (b2 < 0 || r[i] > r[b2]) b2 = i;
		if (r[b] - r[b2] < 4 * worst) continue;
		clear++;
		agree += argmax_f(lg + (size_t)p * V, V) == b;
	}
	CHECKF(clear >= P / 2 && agree == clear, "mtp head: proposals equal the reference's at %d of %d clear positions", agree, clear);
	free(rh), free(rl), free(ro), free(hid), free(hout), free(lg), free(lt);
	kv_free(kv), kv_free(hkv), model_ws_free(w);
	model_free(m);
	remove(path);
}

int main(void) {
	test_mtp();
	const synth llama = {.arch = "llama", .E = 64, .L = 2, .H = 4, .HKV = 2, .F = 96, .V = 50, .wtype = GGUF_T_F32};
	synth s = llama;
	arch_case("llama", s);
	s.wtype = GGUF_T_Q8_0, s.HKV = 1;
	arch_case("llama-mqa-q8", s);
	s = llama, s.tied = true, s.bias = true;
	arch_case("llama-tied-bias", s);
	s = llama, s.rope_type = "linear", s.rope_factor = 4;
	arch_case("rope-linear", s);
	s = llama, s.rope_freqs = true, s.rope_type = "llama3", s.rope_factor = 8;
	arch_case("rope-llama3", s);
	s = llama, s.rope_type = "yarn", s.rope_factor = 4;
	arch_case("rope-yarn", s);
	s = llama, s.arch = "qwen2", s.bias = true, s.wtype = GGUF_T_Q4_K;
	s.E = 256, s.F = 256;
	arch_case("qwen2-q4k", s);
	s = llama, s.arch = "qwen3", s.qk_norm = true, s.D = 24;
	arch_case("qwen3", s);
	s = llama, s.X = 4, s.K = 2, s.FX = 64, s.moe_norm = true, s.wtype = GGUF_T_Q8_0;
	arch_case("llama-moe", s);
	s = llama, s.arch = "qwen2moe", s.bias = true, s.X = 6, s.K = 2, s.FX = 32, s.FS = 64;
	arch_case("qwen2moe", s);
	s = llama, s.arch = "qwen3moe", s.qk_norm = true, s.X = 5, s.K = 3, s.FX = 32, s.moe_norm = true;
	arch_case("qwen3moe", s);
	// heads wider than n_embd / n_heads, tied; a window shorter than the prompt on layer 0;
	// soft caps small enough to bend the scores and logits
	const synth gemma2 = {.arch = "gemma2", .E = 64, .L = 2, .H = 4, .HKV = 2, .D = 32, .F = 96, .V = 50, .tied = true,
			      .wtype = GGUF_T_F32, .swa = 5, .attn_cap = 1.5f, .final_cap = 4.0f};
	arch_case("gemma2", gemma2);
	s = gemma2, s.wtype = GGUF_T_Q8_0, s.L = 4, s.tied = false, s.swa = 3;
	arch_case("gemma2-q8", s);
	// gemma3: q/k norms, a window of 3 on five layers of six; a period a file gives as one bool a
	// layer; phi3: fused matrices, LongRoPE's short factors, a window of 4 on every layer
	const synth gemma3 = {.arch = "gemma3", .E = 64, .L = 6, .H = 4, .HKV = 2, .D = 32, .F = 96, .V = 50, .tied = true,
			      .qk_norm = true, .wtype = GGUF_T_F32, .swa = 3};
	arch_case("gemma3", gemma3);
	s = gemma3, s.L = 4, s.swa_layers = "1010", s.wtype = GGUF_T_Q8_0;
	arch_case("gemma3-pattern", s);
	const synth phi3 = {.arch = "phi3", .E = 64, .L = 2, .H = 4, .HKV = 2, .F = 96, .V = 50, .wtype = GGUF_T_Q8_0, .swa = 4};
	arch_case("phi3", phi3);
	// gpt-oss: sinks, a window of 4 on the even layers, biased router and experts, heads of 24
	const synth oai = {.arch = "gpt-oss", .E = 64, .L = 4, .H = 4, .HKV = 2, .D = 24, .V = 50, .X = 6, .K = 3, .FX = 32,
			   .bias = true, .moe_norm = true, .wtype = GGUF_T_Q8_0, .swa = 4};
	arch_case("gpt-oss", oai);
	gen_parts_case("gemma2-test", "F32", gemma2_hp, gemma2_gen_parts, 1, 0);
	gen_parts_case("gemma2-test", "Q8_0", gemma2_hp, gemma2_gen_parts, 1, 0);
	gen_parts_case("gemma3-test", "F32", gemma3_hp, gemma3_parts, 4, 0);
	gen_parts_case("gemma3-test", "Q8_0", gemma3_hp, gemma3_parts, 4, 0);
	// phi3: the short factors within the original context of 64, the long ones past it
	gen_parts_case("phi3-test", "F32", phi3_hp, phi3_parts, 6, 0);
	gen_parts_case("phi3-test", "Q8_0", phi3_hp, phi3_parts, 6, 64);
	gen_parts_case("phi3-test", "Q8_0", phi3_hp, phi3_parts, 6, 256);
	phi3_context_case();
	gen_parts_case("gpt-oss-test", "F32", oai_hp, oai_parts, 5, 0);
	gen_parts_case("gpt-oss-test", "MXFP4_MOE", oai_hp, oai_parts, 5, 0);
	gen_parts_case("qwen3-next-test", "F32", next_hp, next_parts, 5, 0);
	gen_parts_case("qwen3-next-test", "Q8_0", next_hp, next_parts, 5, 0);
	next_forms_case();
	next_hostile_case();
	next_legacy_case();

	s = llama;
	progress_case("llama", s);
	s.tied = true, s.wtype = GGUF_T_Q8_0;
	progress_case("tied-q8", s);
	s = llama, s.arch = "qwen2moe", s.bias = true, s.X = 6, s.K = 2, s.FX = 32, s.FS = 64;
	progress_case("qwen2moe", s);

	s = llama, s.arch = "gpt2";
	hostile("arch", s, LANES_EUNSUPPORTED, "'gpt2'");
	s = llama, s.skip = "blk.1.ffn_up.weight";
	hostile("missing", s, LANES_EFORMAT, "blk.1.ffn_up.weight");
	s = llama, s.skip = "token_embd.weight";
	hostile("no-embd", s, LANES_EFORMAT, "token_embd.weight");
	s = llama, s.reshape = "blk.0.attn_k.weight";
	hostile("shape", s, LANES_EFORMAT, "blk.0.attn_k.weight has shape");
	s = llama, s.retype = "blk.0.attn_q.weight";
	hostile("type", s, LANES_EUNSUPPORTED, "blk.0.attn_q.weight has type");
	s = llama, s.arch = "qwen2";
	hostile("no-bias", s, LANES_EFORMAT, "attn_q.bias");
	s = llama, s.bad_key = 1;
	hostile("heads", s, LANES_EFORMAT, "head_count");
	s = llama, s.bad_key = 2;
	hostile("kv-heads", s, LANES_EFORMAT, "kv heads");
	s = llama, s.X = 4, s.K = 2, s.FX = 64, s.bad_key = 3;
	hostile("experts", s, LANES_EFORMAT, "expert_used_count");
	s = llama, s.bad_key = 4;
	hostile("embd", s, LANES_EFORMAT, "embedding_length");
	s = llama, s.bad_key = 5;
	hostile("rope-type", s, LANES_EUNSUPPORTED, "'foo'");
	s = llama, s.bad_key = 6;
	hostile("rope-dims", s, LANES_EFORMAT, "rope.dimension_count");
	s = llama, s.bad_key = 7;
	hostile("value-len", s, LANES_EUNSUPPORTED, "value length");
	s = llama, s.X = 4, s.K = 2, s.FX = 64, s.skip = "blk.0.ffn_gate_exps.weight";
	hostile("no-experts", s, LANES_EFORMAT, "blk.0.ffn_gate_exps.weight");
	s = gemma2, s.skip = "blk.1.post_ffw_norm.weight";
	hostile("gemma2-post-norm", s, LANES_EFORMAT, "blk.1.post_ffw_norm.weight");
	s = gemma2, s.X = 4, s.K = 2, s.FX = 64;
	hostile("gemma2-experts", s, LANES_EUNSUPPORTED, "gemma2 with experts");
	s = gemma3, s.swa_layers = "101100";
	hostile("gemma3-pattern", s, LANES_EUNSUPPORTED, "not a repeating pattern");
	s = gemma3, s.skip = "blk.2.attn_k_norm.weight";
	hostile("gemma3-k-norm", s, LANES_EFORMAT, "blk.2.attn_k_norm.weight");
	s = phi3, s.no_short = true;
	hostile("phi3-short", s, LANES_EFORMAT, "rope_factors_short.weight");
	s = phi3, s.neg_short = true;
	hostile("phi3-neg-factor", s, LANES_EFORMAT, "rope_factors_short.weight[0] = -1 is not a positive number");
	s = gemma3, s.swa = 0;
	hostile("gemma3-no-window", s, LANES_EFORMAT, "sliding_window");
	s = phi3, s.reshape = "blk.1.attn_qkv.weight";
	hostile("phi3-qkv", s, LANES_EFORMAT, "blk.1.attn_qkv.weight");
	s = phi3, s.reshape = "blk.0.ffn_up.weight";
	hostile("phi3-gate-up", s, LANES_EFORMAT, "blk.0.ffn_up.weight");
	// gpt-oss: a missing sink or router bias, an expert bias a row too long
	static const struct {
		const char *label, *skip, *reshape, *msg;
	} oai_bad[] = {
		{"gpt-oss-sinks", "blk.3.attn_sinks.weight", NULL, "blk.3.attn_sinks.weight"},
		{"gpt-oss-router-bias", "blk.1.ffn_gate_inp.bias", NULL, "blk.1.ffn_gate_inp.bias"},
		{"gpt-oss-expert-bias", NULL, "blk.2.ffn_down_exps.bias", "blk.2.ffn_down_exps.bias has shape"},
	};
	for (size_t i = 0; i < sizeof oai_bad / sizeof oai_bad[0]; i++) {
		s = oai, s.skip = oai_bad[i].skip, s.reshape = oai_bad[i].reshape;
		hostile(oai_bad[i].label, s, LANES_EFORMAT, oai_bad[i].msg);
	}
	s = oai, s.X = 0;
	hostile("gpt-oss-dense", s, LANES_EFORMAT, "expert_count");
	T_DONE("model_arch");
}
