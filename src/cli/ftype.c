// cli/ftype: the file-type table and llama.cpp's per-tensor mix rules (more bits for
// attn_v/ffn_down in chosen layers, Q6_K output, fallbacks for rows that do not fit a block).
#include "cli/ftype.h"
#include "gguf/gguf.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

// llama_ftype numbers, as written to general.file_type.
enum {
	FT_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9,
	FT_Q2_K = 10, FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14,
	FT_Q4_K_M = 15, FT_Q5_K_S = 16, FT_Q5_K_M = 17, FT_Q6_K = 18, FT_IQ2_XXS = 19, FT_IQ2_XS = 20, FT_IQ3_XXS = 23, FT_IQ1_S = 24,
	FT_IQ4_NL = 25, FT_IQ3_S = 26, FT_IQ2_S = 28, FT_IQ2_M = 29, FT_IQ4_XS = 30, FT_IQ1_M = 31,
	FT_BF16 = 32, FT_TQ1_0 = 36, FT_TQ2_0 = 37, FT_MXFP4_MOE = 38,
};

static const ftype_info ftypes[] = {
	{"F32", FT_F32, GGUF_T_F32, false},       {"F16", FT_F16, GGUF_T_F16, false},
	{"BF16", FT_BF16, GGUF_T_BF16, false},    {"Q8_0", FT_Q8_0, GGUF_T_Q8_0, false},
	{"Q4_0", FT_Q4_0, GGUF_T_Q4_0, false},    {"Q4_1", FT_Q4_1, GGUF_T_Q4_1, false},
	{"Q5_0", FT_Q5_0, GGUF_T_Q5_0, false},    {"Q5_1", FT_Q5_1, GGUF_T_Q5_1, false},
	{"Q2_K", FT_Q2_K, GGUF_T_Q2_K, false},    {"Q3_K_S", FT_Q3_K_S, GGUF_T_Q3_K, false},
	{"Q3_K_M", FT_Q3_K_M, GGUF_T_Q3_K, false}, {"Q3_K_L", FT_Q3_K_L, GGUF_T_Q3_K, false},
	{"Q4_K_S", FT_Q4_K_S, GGUF_T_Q4_K, false}, {"Q4_K_M", FT_Q4_K_M, GGUF_T_Q4_K, false},
	{"Q5_K_S", FT_Q5_K_S, GGUF_T_Q5_K, false}, {"Q5_K_M", FT_Q5_K_M, GGUF_T_Q5_K, false},
	{"Q6_K", FT_Q6_K, GGUF_T_Q6_K, false},    {"IQ4_NL", FT_IQ4_NL, GGUF_T_IQ4_NL, false},
	{"IQ4_XS", FT_IQ4_XS, GGUF_T_IQ4_XS, false}, {"IQ3_S", FT_IQ3_S, GGUF_T_IQ3_S, false},
	{"IQ3_XXS", FT_IQ3_XXS, GGUF_T_IQ3_XXS, false}, {"IQ2_S", FT_IQ2_S, GGUF_T_IQ2_S, false},
	{"IQ2_M", FT_IQ2_M, GGUF_T_IQ2_S, false}, {"IQ2_XS", FT_IQ2_XS, GGUF_T_IQ2_XS, false},
	{"IQ2_XXS", FT_IQ2_XXS, GGUF_T_IQ2_XXS, false}, {"IQ1_M", FT_IQ1_M, GGUF_T_IQ1_M, false},
	{"IQ1_S", FT_IQ1_S, GGUF_T_IQ1_S, false},   {"TQ1_0", FT_TQ1_0, GGUF_T_TQ1_0, false},
	{"TQ2_0", FT_TQ2_0, GGUF_T_TQ2_0, false},
	// llama.cpp has one file type for MXFP4; MXFP4 alone puts every weight in it
	{"MXFP4", FT_MXFP4_MOE, GGUF_T_MXFP4, false}, {"MXFP4_MOE", FT_MXFP4_MOE, GGUF_T_MXFP4, true},
};

static const struct { const char *alias, *name; } aliases[] = {
	{"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"},
};

const ftype_info *ftype_by_name(const char *name) {
	for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
		if (!strcasecmp(name, aliases[i].alias)) name = aliases[i].name;
	for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0]; i++)
		if (!strcasecmp(name, ftypes[i].name)) return &ftypes[i];
	return NULL;
}

const char *ftype_names(void) {
	static char names[512];
	if (!names[0])
		for (size_t i = 0, o = 0; i < sizeof ftypes / sizeof ftypes[0] && o < sizeof names; i++)
			o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", i ? " " : "", ftypes[i].name);
	return names;
}

enum cat { C_OTHER, C_TOKEN_EMBD, C_OUTPUT, C_ATTN_V, C_ATTN_K, C_ATTN_Q, C_ATTN_OUTPUT,
	   C_FFN_DOWN };

// Categories as llama.cpp matches them (substrings, first match wins).
static enum cat category(const char *name) {
	if (!strcmp(name, "output.weight")) return C_OUTPUT;
	if (!strcmp(name, "token_embd.weight")) return C_TOKEN_EMBD;
	if (strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight") ||
	    strstr(name, "attn_v.weight"))
		return C_ATTN_V;
	if (strstr(name, "attn_k.weight")) return C_ATTN_K;
	if (strstr(name, "attn_q.weight")) return C_ATTN_Q;
	if (strstr(name, "attn_output.weight")) return C_ATTN_OUTPUT;
	if (strstr(name, "ffn_down")) return C_FFN_DOWN;
	return C_OTHER;
}

static bool ends_with(const char *s, const char *suffix) {
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !strcmp(s + n - k, suffix);
}

// Weights llama.cpp quantizes: at least 2-D, named *weight, not norms or MoE routers.
static bool quantizable(const char *name, uint32_t n_dims, const int64_t *ne) {
	int dims = 0;
	for (uint32_t d = 0; d < n_dims; d++)
		if (ne[d] > 1) dims = (int)d + 1;
	// the convolution's few taps per channel stay as they are (llama.cpp keeps them F32 too)
	return dims >= 2 && ends_with(name, "weight") && !strstr(name, "_norm.weight") &&
	       !strstr(name, "ffn_gate_inp.weight") && !strstr(name, "ssm_conv1d.weight");
}

// llama.cpp's layer choice for extra bits: the first and last eighth, and every third between.
static bool use_more_bits(int64_t i, int64_t n) {
	return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static int64_t layer_of(const char *name) {
	int l;
	return sscanf(name, "blk.%d.", &l) == 1 ? l : -1;
}

// The 2- and 1-bit file types, mixed by rules of their own.
static bool low_bit(uint32_t ft) {
	return ft == FT_IQ2_XXS || ft == FT_IQ2_XS || ft == FT_IQ2_S || ft == FT_IQ2_M || ft == FT_IQ1_S || ft == FT_IQ1_M;
}

const char *ftype_imatrix_note(const ftype_info *ft) {
	if (!low_bit(ft->id) && ft->id != FT_IQ3_XXS) return NULL;
	// IQ3_XXS's mix puts attn_q and attn_k in IQ2_S
	return "note: llama.cpp's quantizer makes IQ2 and IQ1 tensors only with an importance matrix (--imatrix); "
	       "lanes quantizes them without one, at a lower quality";
}

// output.weight, or a tied token_embd.
static uint32_t output_type(uint32_t ft, int64_t ncols, uint32_t t, const gguf_ttype_info *ti) {
	if (ncols % ti->block) return GGUF_T_Q8_0;
	if (low_bit(ft) || ft == FT_IQ3_XXS) return GGUF_T_Q5_K;
	return t == GGUF_T_Q8_0 ? t : GGUF_T_Q6_K;
}

// llama.cpp's rules for the 2-bit file types (what they leave alone keeps t).
static uint32_t low_bit_rule(const ftype_model *m, uint32_t ft, int cat, int64_t gqa, int64_t il, uint32_t t) {
	const bool s = ft == FT_IQ2_S || ft == FT_IQ2_M;
	switch (cat) {
	case C_ATTN_V: return gqa >= 4 || m->n_expert >= 4 ? GGUF_T_Q4_K : s ? GGUF_T_IQ3_S : GGUF_T_Q2_K;
	case C_ATTN_K: return m->n_expert == 8 ? GGUF_T_Q4_K : t;
	case C_FFN_DOWN: return il < m->n_layer / 8 ? (s ? GGUF_T_IQ3_S : GGUF_T_Q2_K) : t;
	case C_ATTN_OUTPUT:
		return m->n_expert == 8 ? GGUF_T_Q5_K : s ? GGUF_T_IQ3_S : ft == FT_IQ1_S || ft == FT_IQ1_M ? GGUF_T_IQ2_XXS : t;
	default: return t;
	}
}

static uint32_t mix_rule(const ftype_model *m, const char *name, int64_t ncols, uint32_t t) {
	const uint32_t ft = m->ft->id;
	const int64_t gqa = m->n_head_kv > 0 ? m->n_head / m->n_head_kv : 1;
	const int64_t il = layer_of(name), nl = m->n_layer;
	const bool is_70b = m->llama_arch && nl == 80 && m->n_head != m->n_head_kv;
	const gguf_ttype_info *ti = gguf_ttype_get(t);
	const enum cat cat = category(name);
	if (cat == C_OUTPUT || (cat == C_TOKEN_EMBD && m->tied)) return output_type(ft, ncols, t, ti);
	if (cat == C_TOKEN_EMBD) {
		if (ft == FT_IQ2_XXS || ft == FT_IQ2_XS || ft == FT_IQ1_S || ft == FT_IQ1_M) return GGUF_T_Q2_K;
		if (ft == FT_IQ2_S || ft == FT_IQ2_M || ft == FT_IQ3_XXS) return GGUF_T_IQ3_S;
		return ft == FT_TQ1_0 || ft == FT_TQ2_0 ? GGUF_T_Q4_K : t;
	}
	if (low_bit(ft)) return low_bit_rule(m, ft, cat, gqa, il, t);
	switch (cat) {
	case C_TOKEN_EMBD:
	case C_OUTPUT: return t; // above
	case C_ATTN_V:
		if (ft == FT_Q2_K) t = gqa >= 4 ? GGUF_T_Q4_K : GGUF_T_Q3_K;
		else if (ft == FT_IQ3_XXS) t = gqa >= 4 ? GGUF_T_Q4_K : GGUF_T_IQ3_S; // llama.cpp without an importance matrix
		else if (ft == FT_Q3_K_M) t = il < 2 ? GGUF_T_Q5_K : GGUF_T_Q4_K;
		else if (ft == FT_Q3_K_L) t = GGUF_T_Q5_K;
		else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && gqa >= 4) t = GGUF_T_Q5_K;
		else if (ft == FT_IQ3_S && gqa >= 4) t = GGUF_T_Q4_K;
		else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(il, m->n_attn_v)) t = GGUF_T_Q6_K;
		else if (ft == FT_Q4_K_S && il < 4) t = GGUF_T_Q5_K;
		if (is_70b && (t == GGUF_T_Q3_K || t == GGUF_T_Q4_K)) t = GGUF_T_Q5_K;
		if (m->n_expert == 8) t = GGUF_T_Q8_0;
		return t;
	case C_ATTN_K:
		return m->n_expert == 8 ? GGUF_T_Q8_0 : ft == FT_IQ3_XXS ? GGUF_T_IQ2_S : t;
	case C_ATTN_OUTPUT:
		if (m->n_expert == 8) {
			if (ft == FT_Q2_K || ft == FT_Q3_K_S || ft == FT_Q3_K_M || ft == FT_Q4_K_S ||
			    ft == FT_Q4_K_M || ft == FT_IQ4_NL || ft == FT_IQ4_XS || ft == FT_IQ3_S || ft == FT_IQ3_XXS)
				t = GGUF_T_Q5_K;
		} else if (ft == FT_Q2_K) {
			t = GGUF_T_Q3_K;
		} else if (ft == FT_IQ3_XXS) {
			t = GGUF_T_IQ3_S;
		} else if (ft == FT_Q3_K_M) {
			t = GGUF_T_Q4_K;
		} else if (ft == FT_Q3_K_L) {
			t = GGUF_T_Q5_K;
		}
		return t;
	case C_FFN_DOWN:
		if (ft == FT_Q2_K) t = GGUF_T_Q3_K;
		else if (ft == FT_IQ3_XXS) t = il < nl / 8 ? GGUF_T_Q4_K : GGUF_T_Q3_K; // without an importance matrix
		else if (ft == FT_Q3_K_M) t = il < nl / 16 ? GGUF_T_Q5_K : GGUF_T_Q4_K;
		else if (ft == FT_Q3_K_L) t = GGUF_T_Q5_K;
		else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(il, nl)) t = GGUF_T_Q6_K;
		else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && il < nl / 8) t = GGUF_T_Q5_K; // llama.cpp's rule without an importance matrix
		else if (ft == FT_Q4_K_S && il < nl / 8) t = GGUF_T_Q5_K;
		return t;
	case C_ATTN_Q:
		return ft == FT_IQ3_XXS ? GGUF_T_IQ2_S : t;
	case C_OTHER:
		return t;
	}
	return t;
}

// The type a 256-element type falls back to when its block does not divide the row (llama.cpp's map).
static uint32_t fallback_of(uint32_t t) {
	switch (t) {
	case GGUF_T_IQ4_XS: case GGUF_T_IQ3_XXS: case GGUF_T_IQ3_S: case GGUF_T_IQ2_XXS: case GGUF_T_IQ2_XS:
	case GGUF_T_IQ2_S: case GGUF_T_IQ1_S: case GGUF_T_IQ1_M: return GGUF_T_IQ4_NL;
	case GGUF_T_TQ1_0: case GGUF_T_TQ2_0: return GGUF_T_Q4_0;
	case GGUF_T_Q2_K: case GGUF_T_Q3_K: return GGUF_T_Q4_0;
	case GGUF_T_Q4_K: return GGUF_T_Q5_0;
	case GGUF_T_Q5_K: return GGUF_T_Q5_1;
	case GGUF_T_Q6_K: return GGUF_T_Q8_0;
	default: return GGUF_T_F16;
	}
}

uint32_t ftype_pick(const ftype_model *m, const char *name, uint32_t n_dims, const int64_t *ne,
		    uint32_t cur_type, char *note, size_t notelen) {
	if (notelen) note[0] = 0;
	if (!quantizable(name, n_dims, ne)) return cur_type;
	uint32_t t = m->ft->base;
	const gguf_ttype_info *ti = gguf_ttype_get(t);
	if (ti->block == 1) return t; // F32, F16, BF16: no mix
	const enum cat c = category(name);
	if (m->ft->experts && c != C_OUTPUT && !(c == C_TOKEN_EMBD && m->tied))
		t = n_dims >= 3 && ne[2] > 1 ? t : GGUF_T_Q8_0; // llama.cpp: the output's rule first, then this
	else
		t = mix_rule(m, name, ne[0], t);
	ti = gguf_ttype_get(t);
	if (ne[0] % ti->block) {
		uint32_t f = fallback_of(t);
		if (ne[0] % gguf_ttype_get(f)->block) f = GGUF_T_F16;
		snprintf(note, notelen, "%s: row length %lld is not a multiple of %u (%s): using %s",
			 name, (long long)ne[0], ti->block, ti->name, gguf_ttype_get(f)->name);
		t = f;
	}
	return t;
}
