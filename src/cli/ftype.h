// cli/ftype: llama.cpp's model file types (Q8_0, Q4_K_M, ...) and the type each one gives
// every tensor, shared by `lanes quantize` and `lanes gen` so both make the mixes users expect.
#ifndef LANES_CLI_FTYPE_H
#define LANES_CLI_FTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
	const char *name; // "Q4_K_M"
	uint32_t id;      // general.file_type (llama_ftype numbering)
	uint32_t base;    // enum gguf_ttype most weights get
	bool experts;     // base for MoE expert stacks alone, Q8_0 for the other weights (MXFP4_MOE)
} ftype_info;

// File type by name, case-insensitive ("Q4_K" means Q4_K_M as in llama.cpp); NULL if unknown.
const ftype_info *ftype_by_name(const char *name);
// Names accepted, space-separated, for usage messages.
const char *ftype_names(void);

// For a file type whose tensors llama.cpp's quantizer makes only with an importance matrix,
// a line saying that lanes makes them without one (at a lower quality); NULL for the others.
const char *ftype_imatrix_note(const ftype_info *ft);

// What the rules need to know of the model.
typedef struct {
	const ftype_info *ft;
	bool llama_arch;  // general.architecture == "llama" (the 70B rule)
	int64_t n_layer;  // <arch>.block_count
	int64_t n_head, n_head_kv, n_expert;
	int64_t n_attn_v; // attn_v-like tensors in the model
	bool tied;        // no output.weight: token_embd doubles as the output
} ftype_model;

// Type for one tensor: its name, dims and current type. Tensors that are never quantized
// (1-D, norms, biases, MoE routers) keep cur_type. When the chosen type's block does not
// divide the row length a fitting fallback is taken and described in note (else note = "").
uint32_t ftype_pick(const ftype_model *m, const char *name, uint32_t n_dims, const int64_t *ne,
		    uint32_t cur_type, char *note, size_t notelen);

#endif
