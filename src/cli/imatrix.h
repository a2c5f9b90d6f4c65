// cli/imatrix: importance matrices as llama.cpp's llama-imatrix writes them — its GGUF
// (`<weight>.in_sum2` and `<weight>.counts` tensors) and its older binary `.dat` — read into the
// mean squared activation of each input column of each weight, for `lanes quantize --imatrix`.
#ifndef LANES_CLI_IMATRIX_H
#define LANES_CLI_IMATRIX_H

#include <stddef.h>
#include <stdint.h>

typedef struct cli_imatrix cli_imatrix;

// Reads path (either format, told by its first bytes). 0, or LANES_EIO / LANES_EFORMAT /
// LANES_ENOMEM with a message naming the file and the entry at fault.
int imatrix_load(cli_imatrix **out, const char *path, char *err, size_t errlen);
void imatrix_free(cli_imatrix *im); // accepts NULL
// The importances of weight `name` ("blk.0.attn_q.weight"): *n values, its input columns
// (times its experts for a stack of them); NULL when the file has none for it.
const float *imatrix_find(const cli_imatrix *im, const char *name, int64_t *n);
int32_t imatrix_entries(const cli_imatrix *im);
// Chunks of text the matrix was computed over, as the file says (0: not said).
int64_t imatrix_chunks(const cli_imatrix *im);

#endif
