// tensor (internal): the kernel-set table behind tensor_kernels — what each instruction set
// provides (packing, activation preparation, matmul, attention, norms) — and the packed
// layouts and activation blocks the x86 sets share. Internal to src/tensor.
#ifndef LANES_TENSOR_KERN_H
#define LANES_TENSOR_KERN_H

#include "tensor/tensor.h"

// How a matmul wants its activations: float rows as given, or quantized per row into
// kern_q8 blocks of 32 (each row's blocks depend on that row alone).
enum kern_act { KERN_ACT_F32, KERN_ACT_Q8 };

// One block of 32 activations. Width q16: 16-bit integers split in two int8 halves,
// x ~= d * (256*qh + ql), qh = round(x / (256 d)) in [-127, 127] and ql the rounded rest in
// [-127, 127]; each half goes through an exact int8 dot product, so a block costs two of
// them and keeps about 16 bits of every activation (llama.cpp keeps 8). Width q8: x ~= d * qh
// with d = amax / 127 and qh = x / d rounded to nearest even, and a block costs one dot
// product; its blocks are the struct's first KERN_Q8_BYTES bytes (no ql), one cache line each.
// The sums below are over the block's integers either way.
typedef struct {
	float d;        // scale of one unit of the integers (256*qh + ql, or qh)
	float ds;       // d * sum (for the min terms of affine types)
	int32_t sum;    // sum of the integers over 32
	int32_t s16[2]; // the same over each half of 16
	// Ready-made starts of the integer dot products of codes stored with an offset (the dot
	// of u - off is that of u plus -off * sum): loaded as they are, they cost no arithmetic.
	int32_t n8;     // -8 * sum (Q4_0)
	int32_t n32[2]; // -32 * s16 (Q6_K)
	int8_t qh[32];
	int8_t ql[32];
} kern_q8;
static_assert(sizeof(kern_q8) == 96, "kern_q8 size");
#define KERN_Q8_BYTES 64
static_assert(offsetof(kern_q8, qh) == 32 && offsetof(kern_q8, ql) == KERN_Q8_BYTES, "kern_q8 layout");

struct tensor_kernels {
	const char *name;
	enum tensor_act act;        // the activation width of its quantized matmuls
	size_t act_bytes;           // bytes of one prepared block: sizeof(kern_q8), or KERN_Q8_BYTES for q8
	const tensor_kernels *twin; // the same set in the other width
	int tile; // outputs per packed tile; threads split outputs on multiples of it
	// Bytes of one packed matrix (rows x k of type); NULL: the set reads rows in place.
	size_t (*pack_bytes)(uint32_t type, int64_t rows, int64_t k);
	// Packs tiles [t0, t1) of one matrix whose rows lie row_bytes apart in src.
	void (*pack)(uint32_t type, const void *src, size_t row_bytes, int64_t rows, int64_t k, void *dst,
		     int64_t t0, int64_t t1);
	// Whether matmul also takes rows of type in place through the packed kernels (NULL: never).
	bool (*compact)(uint32_t type);
	enum kern_act (*act_kind)(uint32_t type);
	// Quantizes one row of k floats (k a multiple of 32) into k/32 kern_q8 blocks of the set's
	// width, act_bytes apart.
	void (*act_q8)(const float *x, int64_t k, kern_q8 *dst);
	// Outputs [o0, o1) (o0 a multiple of tile) of n activation rows: y[r*ldy + o] = the dot, or
	// with add y = y + the dot. mat: the matrix's first byte (packed, or its first row in place);
	// xa: rows xa_stride bytes apart, floats or kern_q8 blocks as act_kind says.
	void (*matmul)(const tensor_mat *w, const void *mat, const void *xa, size_t xa_stride, int64_t n, float *y,
		       int64_t ldy, int64_t o0, int64_t o1, bool add);
	// Fused attention of nr rows (as tensor_k_attn_rows; scratch: tensor_attn_scratch(nq,
	// head_dim) floats) and unfused of one row (f16 rows; scores: nq * n_pos floats).
	void (*attn)(const float *q, size_t q_stride, const int32_t *ridx, int32_t nr, int32_t nq, int32_t head_dim,
		     float scale, const tensor_kv_view *kvv, const int32_t *n_pos, float *scratch, float *out, size_t o_stride);
	void (*attn_unfused)(const float *q, int32_t nq, int32_t head_dim, float scale, const tensor_kv_view *kvv,
			     int32_t n_pos, float *scores, float *out);
	void (*rmsnorm)(const float *x, const float *w, int64_t n, float eps, float *y);
	void (*swiglu)(const float *g, const float *u, float *out, int64_t n);
	void (*geglu)(const float *g, const float *u, float *out, int64_t n);
	void (*swiglu_oai)(const float *g, const float *u, float *out, int64_t n);
	void (*softcap_rows)(float *x, int64_t n, float cap); // x = cap tanh(x / cap), in place
	uint8_t (*f16s_encode)(const float *x, int32_t n, uint16_t *h);
	// The training products (tensor_k_f32_rows, _t16, _fwd, _bwd).
	void (*f32_rows)(uint32_t type, const void *src, float *dst, int64_t n);
	void (*f32_t16)(const float *w, int64_t ldw, int64_t kn, float *wt);
	void (*f32_fwd)(const float *wt, int64_t kn, const float *x, int64_t ldx, int64_t n, float *y);
	void (*f32_bwd)(const float *w, int64_t ldw, int64_t nr, int64_t kn, const float *dy, int64_t ldy, int64_t n, float *dx,
			int64_t ldx);
	// A row of n floats to type's blocks, the reference quantizer's bytes (NULL: the reference).
	void (*quant_row)(uint32_t type, const float *x, void *dst, int64_t n);
	bool (*cpu_ok)(void); // whether this CPU runs the set
};

// CPUID (and the OS's saving of the wide registers): whether the x86 sets can run.
bool kern_cpu_avx2(void);
bool kern_cpu_avx512(void);

// tensor_f16s_scale of every byte, for kernels that look scales up per position.
extern const float kern_f16s_scales[256];

extern const tensor_kernels tensor_kernels_ref, tensor_kernels_ref_q8;
extern const tensor_kernels tensor_kernels_avx2, tensor_kernels_avx2_q8;
extern const tensor_kernels tensor_kernels_avx512, tensor_kernels_avx512_q8;

// ---- block codes (tensor/codes.c) ------------------------------------------------------------
// One block of a quantized row as unsigned codes: the element values are, per type,
// Q4_0 d(u-8), Q4_1 d u + m, Q5_0 d(u-16), Q5_1 d u + m, Q8_0 d q (q the code's signed
// bits; stored as q ^ 0x80 with q8u), Q2_K d sc_j u - dmin mn_j (sc_j = sc & 15, mn_j =
// sc >> 4, j per 16), Q3_K d sc_j (u-4) and Q6_K d sc_j (u-32) (sc_j signed, j per 16),
// Q4_K/Q5_K d sc_j u - dmin mn_j (j per 32), IQ4_NL d v(u) and IQ4_XS d sc_j v(u) (sc_j
// signed, j per 32; v the codebook tensor_iq4nl_values), MXFP4 2^(sc_0 - 128) v(u) (sc_0
// the E8M0 exponent e; v the doubled E2M1 codebook tensor_mxfp4_values). TQ1_0 and TQ2_0 give
// Q2_K's codes. The grid types (IQ3, IQ2, IQ1) give d sc_j mul v(u): sc_j unsigned, j per 16,
// v and mul their kern_iq_codebook (a grid point's signed elements each take one of 16 values).
typedef struct {
	uint8_t u[QK_K];
	uint16_t d, m;      // fp16 scale and min (legacy), or super-block d and dmin (K)
	uint8_t sc[16];     // K-quants: sub-block scales (Q3_K/Q6_K/IQ4_XS: int8, signed); MXFP4: sc[0] = e
	uint8_t mn[16];     // K-quants: sub-block mins
} kern_codes;
// Whether type has codes (the quantized weight types; not the float ones, nor Q8_1/Q8_K).
bool kern_has_codes(uint32_t type);
// Decodes the block of type at b (kern_has_codes(type)).
void kern_decode(uint32_t type, const uint8_t *b, kern_codes *o, bool q8u);
// The type whose codes type's decoder gives, and whose packed layout and kernels it shares:
// Q2_K for TQ1_0 and TQ2_0 (trits under scale 1 and min 1), else type itself.
uint32_t kern_codes_as(uint32_t type);
// A grid type's element values, ascending, and the power of two its scales carry.
typedef struct {
	int8_t v[16];
	float mul;
} kern_iq_codebook;
// The codebook of a grid type; NULL for any other type.
const kern_iq_codebook *kern_iq_codebook_of(uint32_t type);
// Q4_K/Q5_K: the 6-bit scale and min of sub-block j from the 12 packed bytes q.
void kern_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m);

// ---- the x86 packed layout (tensor/x86/pack.c), shared by the avx2 and avx512 sets --------
// Rows are grouped in tiles of 16 (the last one padded with zero rows). Within a tile the
// blocks follow in k order; a block of 32 elements keeps its quants as unsigned codes u in
// "planes" of 64 bytes whose byte 4r+b belongs to row r of the tile:
//   planes4 (4 planes): plane g, byte 4r+b = u[4g+b] & 15 | (u[16+4g+b] & 15) << 4
//   planes8 (8 planes): plane g, byte 4r+b = u[4g+b]
//   hb1 (1 plane): byte 4r+b, bit g = bit X of u[4g+b], bit 4+g = bit X of u[16+4g+b]
//   planes2 (2 planes, h = 0, 1): for g = 2h+t, bits 4t..4t+1 = field of u[4g+b] and
//     bits 4t+2..4t+3 = field of u[16+4g+b] (field: u & 3, or u >> 4 for Q6_K's high bits)
// so one vector of 32-bit lanes holds four neighbouring codes of each of 16 rows, ready for
// an int8 dot product with four activation bytes broadcast to every lane. Per-row scales
// follow the block's planes as 16 fp16 values, or 16 bytes per sub-block for K-quants.
// IQ4_NL, IQ4_XS and MXFP4 keep their 4-bit indices in planes4 (the kernels look the codebook
// up); MXFP4's per-row scales are 16 floats, 2^(e - 128) (beyond fp16's range); the grid types
// too, then a scale byte per 16 (as Q6_K's) and the fp16 d.
#define KERN_TILE 16
size_t kern_x86_pack_bytes(uint32_t type, int64_t rows, int64_t k);
// q8_unsigned: Q8_0 codes stored as q ^ 0x80 (an unsigned operand), else as signed q.
void kern_x86_pack(uint32_t type, const void *src, size_t row_bytes, int64_t rows, int64_t k, void *dst, int64_t t0,
		   int64_t t1, bool q8_unsigned);
// One tile from the nr (<= KERN_TILE) rows at src, row_bytes apart, into dst (its
// kern_x86_pack_bytes(type, KERN_TILE, k) bytes): the bytes kern_x86_pack writes for it.
void kern_x86_pack_tile(uint32_t type, const void *src, size_t row_bytes, int64_t nr, int64_t k, void *dst,
			bool q8_unsigned);
// This thread's scratch of at least bytes (kept for the thread's next call, freed when it
// ends); NULL when it cannot grow.
void *kern_x86_scratch(size_t bytes);
enum kern_act kern_x86_act_kind(uint32_t type);
// Bytes of one packed tile-block: 32 elements (legacy), 256 (K-quants), 1 (float types).
size_t kern_x86_block_bytes(uint32_t type);

#endif
