// gguf: reads GGUF files (versions 2 and 3) through mmap, validating every count, length,
// offset and shape against the bytes that remain, and writes GGUF files that read back
// identically. Knows the tensor types only as block sizes; kernels live in tensor/.
#ifndef LANES_GGUF_H
#define LANES_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Metadata value types, numbered as in the file.
enum gguf_vtype {
	GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5,
	GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10,
	GGUF_I64 = 11, GGUF_F64 = 12, GGUF_VTYPE_COUNT
};

// Every tensor type lanes knows, stated once: X(NAME, number in the file (ggml's numbering),
// elements per block, bytes per block). The enum, the reader's table, the tensor traits and
// the block structs' static_asserts are all built from this list.
#define GGUF_TTYPES(X)                                                                          \
	X(F32, 0, 1, 4) X(F16, 1, 1, 2) X(Q4_0, 2, 32, 18) X(Q4_1, 3, 32, 20) X(Q5_0, 6, 32, 22)    \
	X(Q5_1, 7, 32, 24) X(Q8_0, 8, 32, 34) X(Q8_1, 9, 32, 36) X(Q2_K, 10, 256, 84)               \
	X(Q3_K, 11, 256, 110) X(Q4_K, 12, 256, 144) X(Q5_K, 13, 256, 176) X(Q6_K, 14, 256, 210)     \
	X(Q8_K, 15, 256, 292) X(IQ2_XXS, 16, 256, 66) X(IQ2_XS, 17, 256, 74) X(IQ3_XXS, 18, 256, 98) \
	X(IQ1_S, 19, 256, 50) X(IQ4_NL, 20, 32, 18) X(IQ3_S, 21, 256, 110) X(IQ2_S, 22, 256, 82)     \
	X(IQ4_XS, 23, 256, 136) X(I8, 24, 1, 1) X(I16, 25, 1, 2) X(I32, 26, 1, 4) X(I64, 27, 1, 8)  \
	X(F64, 28, 1, 8) X(IQ1_M, 29, 256, 56) X(BF16, 30, 1, 2) X(TQ1_0, 34, 256, 54)              \
	X(TQ2_0, 35, 256, 66) X(MXFP4, 39, 32, 17)

#define GGUF__TYPE(T, N, B, S) GGUF_T_##T = N,
enum gguf_ttype { GGUF_TTYPES(GGUF__TYPE) GGUF_T_COUNT = 40 };
#undef GGUF__TYPE
// GGUF_BLOCK_Q4_0, GGUF_BYTES_Q4_0, ...: the list's facts as constants
#define GGUF__FACTS(T, N, B, S) GGUF_BLOCK_##T = B, GGUF_BYTES_##T = S,
enum { GGUF_TTYPES(GGUF__FACTS) };
#undef GGUF__FACTS

typedef struct {
	const char *name; // "Q4_K"; NULL for a number this build does not know
	uint32_t block;   // elements per block (1 for plain types)
	uint32_t bytes;   // bytes per block
} gguf_ttype_info;

// Facts about tensor type t; NULL when t is not a type lanes knows.
const gguf_ttype_info *gguf_ttype_get(uint32_t t);
// Type by name ("Q8_0", case-insensitive); -1 when unknown.
int gguf_ttype_by_name(const char *name);
const char *gguf_vtype_name(uint32_t t);
size_t gguf_vtype_size(uint32_t t); // bytes of a numeric value type; 0 for string/array

// A string inside the file: not NUL-terminated, valid while the gguf is open.
typedef struct {
	const char *ptr;
	uint64_t len;
} gguf_str;

typedef struct gguf_value gguf_value;
struct gguf_value {
	enum gguf_vtype type;
	union {
		uint64_t u;   // U8, U16, U32, U64, BOOL
		int64_t i;    // I8, I16, I32, I64
		double f;     // F32, F64
		gguf_str s;   // STRING
		struct {
			enum gguf_vtype type; // element type
			uint64_t n;           // element count
			const void *raw;      // numeric elements, little-endian in the file (may be unaligned)
			gguf_str *strs;       // STRING elements
			gguf_value *vals;     // ARRAY elements (nested arrays)
		} arr;
	};
};

typedef struct {
	gguf_str key;
	gguf_value val;
} gguf_kv;

#define GGUF_MAX_DIMS 4

typedef struct {
	char *name;                 // NUL-terminated copy
	uint32_t n_dims;
	int64_t ne[GGUF_MAX_DIMS];  // elements per dimension, fastest first; unused dims are 1
	uint32_t type;              // enum gguf_ttype
	uint64_t offset;            // from the start of the data section
	uint64_t nbytes;            // bytes the tensor occupies
	const void *data;           // into the mapping
} gguf_tensor;

typedef struct gguf gguf;

// Opens and validates path. On failure returns a negative code and writes a message
// naming the problem and its byte offset into err.
int gguf_open(gguf **out, const char *path, char *err, size_t errlen);
// The same over an open file (fd stays the caller's; name is how messages call it).
int gguf_open_fd(gguf **out, int fd, const char *name, char *err, size_t errlen);
// The same over caller-owned bytes (kept alive and unchanged while the gguf is open).
int gguf_open_mem(gguf **out, const void *data, size_t size, char *err, size_t errlen);
void gguf_free(gguf *g); // accepts NULL

uint32_t gguf_version(const gguf *g);
uint32_t gguf_alignment(const gguf *g);
uint64_t gguf_data_offset(const gguf *g); // file offset of the tensor data section
uint64_t gguf_file_size(const gguf *g);

int64_t gguf_n_kv(const gguf *g);
const gguf_kv *gguf_kv_at(const gguf *g, int64_t i);
const gguf_value *gguf_get(const gguf *g, const char *key); // NULL when absent

// Typed reads of one key: 0 on success, LANES_ENOTFOUND when absent, LANES_EFORMAT when
// the stored type does not fit. Integers of any width convert when the value fits.
int gguf_get_i64(const gguf *g, const char *key, int64_t *out);
int gguf_get_u32(const gguf *g, const char *key, uint32_t *out);
int gguf_get_f32(const gguf *g, const char *key, float *out);
int gguf_get_bool(const gguf *g, const char *key, bool *out);
int gguf_get_str(const gguf *g, const char *key, gguf_str *out);
// An array value (any element type); NULL when absent or not an array.
const gguf_value *gguf_get_arr(const gguf *g, const char *key);

// Array element reads; the caller has checked i < arr.n and the element type.
int64_t gguf_arr_i64(const gguf_value *arr, uint64_t i); // integer element types
double gguf_arr_f64(const gguf_value *arr, uint64_t i);  // F32/F64 (and integers)
gguf_str gguf_arr_str(const gguf_value *arr, uint64_t i);
// A value's numeric reading: integers, floats and bools; false for other types.
bool gguf_value_i64(const gguf_value *v, int64_t *out);
bool gguf_value_f64(const gguf_value *v, double *out);

bool gguf_str_eq(gguf_str s, const char *c);
char *gguf_str_dup(gguf_str s); // malloc'd, NUL-terminated; NULL on OOM

int64_t gguf_n_tensors(const gguf *g);
const gguf_tensor *gguf_tensor_at(const gguf *g, int64_t i);
const gguf_tensor *gguf_find_tensor(const gguf *g, const char *name);
int64_t gguf_tensor_nelem(const gguf_tensor *t);

// ---- writer -----------------------------------------------------------------------------
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void); // NULL on OOM
void gguf_writer_free(gguf_writer *w); // accepts NULL
// Sets key to a deep copy of v (replacing an earlier value of the same key, keeping its place).
int gguf_writer_set(gguf_writer *w, const char *key, const gguf_value *v);
int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
// Numeric array of n elements of type t, copied from little-endian raw bytes.
int gguf_writer_set_arr(gguf_writer *w, const char *key, enum gguf_vtype t, const void *raw, uint64_t n);
int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
int gguf_writer_remove(gguf_writer *w, const char *key);
// Copies every key of g (in order), skipping keys that start with skip_prefix (may be NULL).
int gguf_writer_copy_kv(gguf_writer *w, const gguf *g, const char *skip_prefix);
// Adds a tensor; data (nbytes, must match type and shape) is copied at once.
int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
			   const int64_t *ne, const void *data, uint64_t nbytes);
// The same, the data not copied: read at the write, so it must stay valid until then (a
// tensor of an open gguf, say).
int gguf_writer_add_tensor_ref(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
			       const int64_t *ne, const void *data, uint64_t nbytes);
// Writes version 3 with general.alignment (default 32) to path, whole or not at all
// (base_wfile: the old file stays until the new one is complete on disk).
int gguf_writer_write(gguf_writer *w, const char *path, char *err, size_t errlen);
// The same as name in folder dfd (a checked name: base_name_ok).
int gguf_writer_write_at(gguf_writer *w, int dfd, const char *name, char *err, size_t errlen);

#endif
