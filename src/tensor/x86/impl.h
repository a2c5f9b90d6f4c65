// tensor/x86/impl: the x86 kernels written once over a small vector vocabulary that
// kernels_avx2.c (8 lanes) and kernels_avx512.c (16 lanes) define before including it.
// Matmul lanes run across the 16 rows of a packed tile; every output walks its k blocks in
// order with its own float accumulator, and the integer dot products inside a block (int8
// codes against both int8 halves of 16-bit activations, see kern_q8) are exact, so an
// output's bits never depend on the batch, its row's place in it, or the threads.
//
// The includer defines VL (32-bit lanes per vector), NH (vectors per 16-row tile), VB (bytes
// per vector), RMAX (activation rows per pass over a tile), KX_ROWS_2CH (rows per pass from
// which each row's dot product runs as two chains, not four), KX_Q8_UNSIGNED (Q8_0 codes
// packed as q ^ 0x80), KX_DP16 (products summed in int16 before widening), KX_GROUP (rows
// whose q8 dot products advance in lockstep, 0 for none), KX_ATT_ACC (the attention's score
// accumulators in registers, a multiple of 4), vi/vf/vd and the v_* vocabulary
// functions.
#include "tensor/kern.h"

#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
// Small fixed loops unrolled, so vectors of codes stay in registers.
#define UNROLL _Pragma("GCC unroll 16")

// A tile's first pass streams its weights from memory, whether one row (decode) or a batch
// goes over it: prefetching KX_PF bytes ahead keeps more loads in flight than the hardware
// prefetcher alone (a batch's later passes find them in cache, at the cost of a few hints).
#ifndef KX_PF
#define KX_PF 2048
#endif
AI void pf(const uint8_t *p, size_t bytes) {
	if (KX_PF)
		for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + KX_PF + o, 0, 3);
}

// ---- shared helpers over the vocabulary -----------------------------------------------------
AI vi bcast32(const int8_t *p) {
	int32_t v;
	memcpy(&v, p, 4);
	return v_set1_32(v);
}

// Moves bits left (s > 0) or right (s < 0) within 16-bit lanes; callers mask the bits they keep.
AI vi v_shift(vi v, int s) { return s > 0 ? v_slli16(v, s) : s < 0 ? v_srli16(v, -s) : v; }

// planes4 at p, half h -> w[0..3] codes of elements 4g+b, w[4..7] of 16+4g+b.
AI void unpack4(const uint8_t *p, int h, vi w[8]) {
	const vi m = v_set1_8(0x0f);
	UNROLL for (int g = 0; g < 4; g++) {
		const vi v = v_load(p + 64 * g + VB * h);
		w[g] = v_and(v, m);
		w[4 + g] = v_and(v_srli16(v, 4), m);
	}
}

// hb1 at p: bit X of every code.
AI void add_hb1(const uint8_t *p, int h, int X, vi w[8]) {
	const vi P = v_load(p + VB * h), m = v_set1_8((char)(1 << X));
	UNROLL for (int g = 0; g < 4; g++) {
		w[g] = v_or_and(w[g], v_shift(P, X - g), m);
		w[4 + g] = v_or_and(w[4 + g], v_shift(P, X - 4 - g), m);
	}
}

// planes2 at p: two-bit fields moved to bit `to` (0 for low bits, 4 for Q6_K's high bits).
AI void add_planes2(const uint8_t *p, int h, int to, bool first, vi w[8]) {
	const vi m = v_set1_8((char)(3 << to));
	UNROLL for (int hh = 0; hh < 2; hh++) {
		const vi H = v_load(p + 64 * hh + VB * h);
		UNROLL for (int t = 0; t < 2; t++) {
			const int g = 2 * hh + t;
			const vi lo = v_shift(H, to - 4 * t), hi = v_shift(H, to - 4 * t - 2);
			w[g] = first ? v_and(lo, m) : v_or_and(w[g], lo, m);
			w[4 + g] = first ? v_and(hi, m) : v_or_and(w[4 + g], hi, m);
		}
	}
}

// Holds the codes in their registers to the end of a block, so the last row's chains do not
// take them over (which costs a register copy per dot product).
AI void keep8(const vi w[8]) {
	__asm__ volatile("" ::"v"(w[0]), "v"(w[1]), "v"(w[2]), "v"(w[3]), "v"(w[4]), "v"(w[5]), "v"(w[6]), "v"(w[7]));
}

// Row i's block b: blocks of KERN_Q8_BYTES with `one` (width q8), else whole kern_q8s.
AI const kern_q8 *xrow(const uint8_t *xa, size_t xs, int i, int64_t b, bool one) {
	return (const kern_q8 *)(xa + (size_t)i * xs + (size_t)b * (one ? KERN_Q8_BYTES : sizeof(kern_q8)));
}

// ---- matmul row kernels: R activation rows against one half of one tile ---------------------
// Every row's accumulator sees exactly the same operations whatever R is: the integer dot of
// a block is exact however its chains are split, and its float steps are the same per row.
#define ROWS _Pragma("GCC unroll 16") for (int i = 0; i < R; i++)

// One row's dot product with one block's codes: 256 (w . qh) + w . ql + init over the codes
// of half `part` (0: elements 0..15, 1: 16..31, 2: all 32), or with `one` (width q8) w . qh +
// init alone. Weights stay in registers while rows go one after another; nch chains of
// dependent dot products (2 or 4) per row, enough with the other rows' chains to fill the
// pipeline.
AI vi dot_row(const vi w[8], const kern_q8 *x, int part, int bits, vi init, int nch, bool one) {
#if KX_DP16
	if (one) {
		const int L1 = bits <= 4 ? 8 : bits == 5 ? 4 : bits == 6 ? 2 : 1;
		const int g0 = part == 1 ? 4 : 0, g1 = part == 0 ? 4 : 8;
		vi acc = init;
		UNROLL for (int a = g0; a < g1; a += L1) {
			vi h16 = v_zeroi();
			const int nt = g1 - a < L1 ? g1 - a : L1;
			UNROLL for (int t = 0; t < nt; t++) {
				const int g = a + t, off = g < 4 ? 4 * g : 16 + 4 * (g - 4);
				h16 = v_add16(h16, v_mul8(w[g], bcast32(x->qh + off)));
			}
			acc = v_addi(acc, v_widen16(h16));
		}
		(void)nch;
		return acc;
	}
	// u8 x s8 products summed in int16 for as many codes as cannot overflow it (each pair
	// is at most 2 * (2^bits - 1) * 127), then widened once: fewer instructions than a
	// widening step per product.
	const int L = bits <= 4 ? 8 : bits == 5 ? 4 : bits == 6 ? 2 : 1;
	const int g0 = part == 1 ? 4 : 0, g1 = part == 0 ? 4 : 8;
	vi hi = v_zeroi(), lo = init;
	UNROLL for (int a = g0; a < g1; a += L) {
		vi h16 = v_zeroi(), l16 = v_zeroi();
		const int nt = g1 - a < L ? g1 - a : L;
		UNROLL for (int t = 0; t < nt; t++) {
			const int g = a + t, off = g < 4 ? 4 * g : 16 + 4 * (g - 4);
			h16 = v_add16(h16, v_mul8(w[g], bcast32(x->qh + off)));
			l16 = v_add16(l16, v_mul8(w[g], bcast32(x->ql + off)));
		}
		hi = v_addi(hi, v_widen16(h16));
		lo = v_addi(lo, v_widen16(l16));
	}
	(void)nch;
	return v_addi(v_slli32(hi, 8), lo);
#else
	const int g0 = part == 1 ? 4 : 0, g1 = part == 0 ? 4 : 8;
	if (one) {
		if (nch == 4 && part == 2) {
			vi c0 = init, c1 = v_zero_chain();
			UNROLL for (int g = 0; g < 4; g++) {
				c0 = v_dpb(c0, w[g], x->qh + 4 * g);
				c1 = v_dpb(c1, w[4 + g], x->qh + 16 + 4 * g);
			}
			return v_addi(c0, c1);
		}
		vi c = init;
		UNROLL for (int g = g0; g < g1; g++) c = v_dpb(c, w[g], x->qh + (g < 4 ? 4 * g : 16 + 4 * (g - 4)));
		return c;
	}
	if (nch == 4 && part == 2) {
		vi h0 = v_zero_chain(), h1 = v_zero_chain(), l0 = init, l1 = v_zero_chain();
		UNROLL for (int g = 0; g < 4; g++) {
			h0 = v_dpb(h0, w[g], x->qh + 4 * g);
			l0 = v_dpb(l0, w[g], x->ql + 4 * g);
			h1 = v_dpb(h1, w[4 + g], x->qh + 16 + 4 * g);
			l1 = v_dpb(l1, w[4 + g], x->ql + 16 + 4 * g);
		}
		return v_addi(v_slli32(v_addi(h0, h1), 8), v_addi(l0, l1));
	}
	vi hi = v_zero_chain(), lo = init;
	UNROLL for (int g = g0; g < g1; g++) {
		const int off = g < 4 ? 4 * g : 16 + 4 * (g - 4);
		hi = v_dpb(hi, w[g], x->qh + off);
		lo = v_dpb(lo, w[g], x->ql + off);
	}
	return v_addi(v_slli32(hi, 8), lo);
#endif
}

// Chains per row: a lone row needs its own parallel chains, a full pass has other rows'.
#define NCH(R) ((R) >= KX_ROWS_2CH ? 2 : 4)

// acc + s * (D * d_x): one fma, or with pow2 (D a power of two, so D * d_x is exact) a multiply
// then an add, which give the reference's q8 bits (MXFP4).
AI vf acc_block(vf acc, vi s, vf D, float dx, bool pow2) {
	const vf f = v_mul(D, v_set1f(dx));
	return pow2 ? v_add(acc, v_mul(v_cvt(s), f)) : v_fma(v_cvt(s), f, acc);
}

#if KX_GROUP
// Width q8 in groups of KX_GROUP rows whose dot products advance in lockstep, one code vector
// at a time (more independent chains in flight than row after row). The group's first row is
// opaque to the compiler, so the others are addressed from it and the stride rather than kept
// as a pointer each. A row's integer sums and float steps are those of the row path.
AI const uint8_t *group_base(const uint8_t *xa, size_t xs, int i0, int64_t b) {
	const uint8_t *gb = xa + (size_t)b * KERN_Q8_BYTES + (size_t)i0 * xs;
	__asm__("" : "+r"(gb));
	return gb;
}
AI const kern_q8 *group_row(const uint8_t *gb, size_t xs, int j) { return (const kern_q8 *)(gb + (size_t)j * xs); }
// c[j] += the block's codes against row j's qh.
AI void dot_group(const vi w[8], const uint8_t *gb, size_t xs, vi c[KX_GROUP]) {
	UNROLL for (int g = 0; g < 8; g++) UNROLL for (int j = 0; j < KX_GROUP; j++)
		c[j] = v_dpb(c[j], w[g], group_row(gb, xs, j)->qh + (g < 4 ? 4 * g : 16 + 4 * (g - 4)));
}
// R rows (a multiple of KX_GROUP) against block b of codes w stored with offset off:
// acc += (w . qh - off * sum) * D * d_x (acc_block), and + M * ds_x when affine.
AI void rows_group(const vi w[8], const uint8_t *xa, size_t xs, int64_t b, int R, int off, vf D, bool affine, vf M,
		   bool pow2, vf *acc) {
	UNROLL for (int i0 = 0; i0 < R; i0 += KX_GROUP) {
		const uint8_t *gb = group_base(xa, xs, i0, b);
		vi c[KX_GROUP];
		UNROLL for (int j = 0; j < KX_GROUP; j++) {
			const kern_q8 *x = group_row(gb, xs, j);
			c[j] = v_set1_32(off == 8 ? x->n8 : -off * x->sum);
		}
		dot_group(w, gb, xs, c);
		UNROLL for (int j = 0; j < KX_GROUP; j++) {
			const kern_q8 *x = group_row(gb, xs, j);
			acc[i0 + j] = acc_block(acc[i0 + j], c[j], D, x->d, pow2);
			if (affine) acc[i0 + j] = v_fma(M, v_set1f(x->ds), acc[i0 + j]);
		}
	}
	keep8(w);
}
// Width q8, KX_IQ_GROUP rows at a time: R rows' activation block xb against a block of codes w
// stored with offset off whose halves of 16 are scaled by Da and Db, the operations of the row
// path (iq_rows, rows_q63_K, rows_q2_K): acc += d_x * (Da (w . x)_a + Db (w . x)_b), and with
// mins - d_x * (Ma s16_a + Mb s16_b). Taken from HALVES_FROM rows a pass: with fewer, the row
// path was as fast.
#define HALVES_FROM 8
AI void halves_group(const vi w[8], vf Da, vf Db, const uint8_t *xa, size_t xs, int64_t xb, int R, int off, bool mins,
		     vf Ma, vf Mb, vf *acc) {
	UNROLL for (int i0 = 0; i0 < R; i0 += KX_IQ_GROUP) {
		const uint8_t *gb = group_base(xa, xs, i0, xb);
		vi c[2][KX_IQ_GROUP];
		UNROLL for (int j = 0; j < KX_IQ_GROUP; j++) UNROLL for (int p = 0; p < 2; p++) {
			const kern_q8 *x = group_row(gb, xs, j);
			c[p][j] = v_set1_32(off == 32 ? x->n32[p] : -off * x->s16[p]);
		}
		UNROLL for (int g = 0; g < 4; g++) UNROLL for (int j = 0; j < KX_IQ_GROUP; j++) UNROLL for (int p = 0; p < 2; p++)
			c[p][j] = v_dpb(c[p][j], w[4 * p + g], group_row(gb, xs, j)->qh + 16 * p + 4 * g);
		UNROLL for (int j = 0; j < KX_IQ_GROUP; j++) {
			const kern_q8 *x = group_row(gb, xs, j);
			const vf t = v_fma(v_cvt(c[0][j]), Da, v_mul(v_cvt(c[1][j]), Db));
			acc[i0 + j] = v_fma(t, v_set1f(x->d), acc[i0 + j]);
			if (mins) {
				const vf m = v_fma(Ma, v_set1f((float)x->s16[0]), v_mul(Mb, v_set1f((float)x->s16[1])));
				acc[i0 + j] = v_fnma(m, v_set1f(x->d), acc[i0 + j]);
			}
		}
	}
	keep8(w);
}
#endif

// Legacy 32-blocks: w = d * (u - off) (off > 0), or d * u + m (affine).
AI void rows_legacy(const uint8_t *tw, int64_t nb, const uint8_t *xa, size_t xs, int h, int R, vf *acc, size_t bbytes,
		    bool five, int off, bool affine, bool one) {
	ROWS acc[i] = v_zerof();
	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *blk = tw + (size_t)b * bbytes;
		pf(blk, bbytes);
		vi w[8];
		unpack4(blk, h, w);
		if (five) add_hb1(blk + 256, h, 4, w);
		const uint8_t *sc = blk + (five ? 320 : 256);
		const vf D = v_ldh(sc + 2 * VL * h);
		const vf M = affine ? v_ldh(sc + 32 + 2 * VL * h) : v_zerof();
#if KX_GROUP
		if (one && R >= KX_GROUP) {
			rows_group(w, xa, xs, b, R, off, D, affine, M, false, acc);
			continue;
		}
#endif
		ROWS {
			const kern_q8 *x = xrow(xa, xs, i, b, one);
			const vi s = dot_row(w, x, 2, five ? 5 : 4, v_set1_32(off == 8 ? x->n8 : -off * x->sum), NCH(R), one);
			acc[i] = v_fma(v_cvt(s), v_mul(D, v_set1f(x->d)), acc[i]);
			if (affine) acc[i] = v_fma(M, v_set1f(x->ds), acc[i]);
		}
		keep8(w);
	}
}

// acc[i] += D * d_x * (w . x) for R rows' activation block b against one block of 8-bit
// signed codes w (stored as w ^ 0x80 with KX_Q8_UNSIGNED); pow2: D a power of two (acc_block).
AI void rows_signed(const vi w[8], const uint8_t *xa, size_t xs, int64_t b, int R, vf D, vf *acc, bool pow2, bool one) {
#if KX_Q8_UNSIGNED
#if KX_GROUP
	if (one && R >= KX_GROUP) {
		rows_group(w, xa, xs, b, R, 128, D, false, v_zerof(), pow2, acc);
		return;
	}
#endif
	ROWS {
		const kern_q8 *x = xrow(xa, xs, i, b, one);
		const vi s = dot_row(w, x, 2, 8, v_set1_32(-128 * x->sum), NCH(R), one);
		acc[i] = acc_block(acc[i], s, D, x->d, pow2);
	}
	keep8(w);
#else
	// Signed codes: |w| (unsigned) against the activations carrying w's sign.
	vi aw[8];
	UNROLL for (int g = 0; g < 8; g++) aw[g] = v_abs8(w[g]);
	ROWS {
		const kern_q8 *x = xrow(xa, xs, i, b, one);
		vi hi = v_zeroi(), lo = v_zeroi();
		UNROLL for (int g = 0; g < 8; g++) hi = v_dp(hi, aw[g], v_sign8(bcast32(x->qh + 4 * g), w[g]));
		if (!one) UNROLL for (int g = 0; g < 8; g++) lo = v_dp(lo, aw[g], v_sign8(bcast32(x->ql + 4 * g), w[g]));
		const vi s = one ? hi : v_addi(v_slli32(hi, 8), lo);
		acc[i] = acc_block(acc[i], s, D, x->d, pow2);
	}
#endif
}

AI void rows_q8_0(const uint8_t *tw, int64_t nb, const uint8_t *xa, size_t xs, int h, int R, vf *acc, bool one) {
	ROWS acc[i] = v_zerof();
	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *blk = tw + (size_t)b * 544;
		pf(blk, 544);
		vi w[8];
		UNROLL for (int g = 0; g < 8; g++) w[g] = v_load(blk + 64 * g + VB * h);
		rows_signed(w, xa, xs, b, R, v_ldh(blk + 512 + 2 * VL * h), acc, false, one);
	}
}

// IQ4_NL (blocks of 32), IQ4_XS (xsb: 8 sub-blocks of 32 with int8 scales) and MXFP4 (mx:
// blocks of 32 with float scales, the E2M1 codebook): 4-bit indices looked up in the codebook,
// one byte shuffle per vector, then dotted as Q8_0's signed codes. w = d * v(u), or d * sc * v(u).
AI void rows_iq4(const uint8_t *tw, int64_t nb, const uint8_t *xa, size_t xs, int h, int R, vf *acc, bool xsb,
		 bool mx, bool one) {
	const int nsub = xsb ? 8 : 1;
	const size_t bbytes = xsb ? 8 * 256 + 128 + 32 : mx ? 256 + 64 : 256 + 32;
	// The codebook in every 128-bit lane, biased by 128 where the dot products want unsigned codes.
	const vi lut = v_xor(v_lut16(mx ? tensor_mxfp4_values : tensor_iq4nl_values),
			     v_set1_8(KX_Q8_UNSIGNED ? (char)0x80 : 0));
	ROWS acc[i] = v_zerof();
	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *blk = tw + (size_t)b * bbytes, *sc = blk + 256 * nsub;
		pf(blk, bbytes);
		const vf D0 = mx ? v_loadf((const float *)sc + VL * h) : v_ldh(sc + (xsb ? 128 : 0) + 2 * VL * h);
		for (int j = 0; j < nsub; j++) {
			vi w[8];
			unpack4(blk + 256 * j, h, w);
			UNROLL for (int g = 0; g < 8; g++) w[g] = v_shuf8(lut, w[g]);
			const vf D = xsb ? v_mul(D0, v_cvt(v_ldi8(sc + 16 * j + VL * h))) : D0;
			rows_signed(w, xa, xs, nsub * b + j, R, D, acc, mx, one);
		}
	}
}

// Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins; w = d*sc*u - dmin*m.
AI void rows_q45_K(const uint8_t *tw, int64_t nsb, const uint8_t *xa, size_t xs, int h, int R, vf *acc, bool five,
		    bool one) {
	const size_t sbytes = five ? 320 : 256, bbytes = 8 * sbytes + 256 + 64;
	ROWS acc[i] = v_zerof();
	for (int64_t b = 0; b < nsb; b++) {
		const uint8_t *blk = tw + (size_t)b * bbytes, *sc = blk + 8 * sbytes;
		pf(blk, bbytes);
		const vf D0 = v_ldh(sc + 256 + 2 * VL * h), M0 = v_ldh(sc + 288 + 2 * VL * h);
		for (int j = 0; j < 8; j++) {
			vi w[8];
			unpack4(blk + j * sbytes, h, w);
			if (five) add_hb1(blk + j * sbytes + 256, h, 4, w);
			const vf D = v_mul(D0, v_cvt(v_ldu8(sc + 16 * j + VL * h)));
			const vf M = v_mul(M0, v_cvt(v_ldu8(sc + 128 + 16 * j + VL * h)));
#if KX_GROUP
			if (one && R >= KX_GROUP) { // acc - M ds_x is acc + (-M) ds_x, one rounding either way
				rows_group(w, xa, xs, 8 * b + j, R, 0, D, true, v_mul(M, v_set1f(-1.0f)), false, acc);
				continue;
			}
#endif
			ROWS {
				const kern_q8 *x = xrow(xa, xs, i, 8 * b + j, one);
				const vi s = dot_row(w, x, 2, five ? 5 : 4, v_zero_chain(), NCH(R), one);
				acc[i] = v_fma(v_cvt(s), v_mul(D, v_set1f(x->d)), acc[i]);
				acc[i] = v_fnma(M, v_set1f(x->ds), acc[i]);
			}
			keep8(w);
		}
	}
}

// Q6_K and Q3_K: sub-blocks of 16 with int8 scales; w = d*sc*(u - off).
AI void rows_q63_K(const uint8_t *tw, int64_t nsb, const uint8_t *xa, size_t xs, int h, int R, vf *acc, bool six,
		    bool one) {
	const size_t sbytes = six ? 384 : 192, bbytes = 8 * sbytes + 256 + 32;
	const int off = six ? 32 : 4;
	ROWS acc[i] = v_zerof();
	for (int64_t b = 0; b < nsb; b++) {
		const uint8_t *blk = tw + (size_t)b * bbytes, *sc = blk + 8 * sbytes;
		pf(blk, bbytes);
		const vf D0 = v_ldh(sc + 256 + 2 * VL * h);
		for (int j = 0; j < 8; j++) {
			vi w[8];
			if (six) {
				unpack4(blk + j * sbytes, h, w);
				add_planes2(blk + j * sbytes + 256, h, 4, false, w);
			} else {
				add_planes2(blk + j * sbytes, h, 0, true, w);
				add_hb1(blk + j * sbytes + 128, h, 2, w);
			}
			const vf Da = v_mul(D0, v_cvt(v_ldi8(sc + 32 * j + VL * h)));
			const vf Db = v_mul(D0, v_cvt(v_ldi8(sc + 32 * j + 16 + VL * h)));
#if KX_GROUP
			if (one && R >= HALVES_FROM) {
				halves_group(w, Da, Db, xa, xs, 8 * b + j, R, off, false, Da, Db, acc);
				continue;
			}
#endif
			ROWS {
				const kern_q8 *x = xrow(xa, xs, i, 8 * b + j, one);
				const vi sa = dot_row(w, x, 0, six ? 6 : 3, v_set1_32(six ? x->n32[0] : -off * x->s16[0]), 2, one);
				const vi sb = dot_row(w, x, 1, six ? 6 : 3, v_set1_32(six ? x->n32[1] : -off * x->s16[1]), 2, one);
				const vf t = v_fma(v_cvt(sa), Da, v_mul(v_cvt(sb), Db));
				acc[i] = v_fma(t, v_set1f(x->d), acc[i]);
			}
			keep8(w);
		}
	}
}

// Q2_K: sub-blocks of 16 with 4-bit scales and mins; w = d*sc*u - dmin*m.
AI void rows_q2_K(const uint8_t *tw, int64_t nsb, const uint8_t *xa, size_t xs, int h, int R, vf *acc, bool one) {
	const size_t bbytes = 8 * 128 + 256 + 64;
	ROWS acc[i] = v_zerof();
	for (int64_t b = 0; b < nsb; b++) {
		const uint8_t *blk = tw + (size_t)b * bbytes, *sc = blk + 8 * 128;
		pf(blk, bbytes);
		const vf D0 = v_ldh(sc + 256 + 2 * VL * h), M0 = v_ldh(sc + 288 + 2 * VL * h);
		for (int j = 0; j < 8; j++) {
			vi w[8];
			add_planes2(blk + j * 128, h, 0, true, w);
			const vi ca = v_ldu8(sc + 32 * j + VL * h), cb = v_ldu8(sc + 32 * j + 16 + VL * h);
			const vi m15 = v_set1_32(15);
			const vf Da = v_mul(D0, v_cvt(v_and(ca, m15))), Db = v_mul(D0, v_cvt(v_and(cb, m15)));
			const vf Ma = v_mul(M0, v_cvt(v_srli32(ca, 4))), Mb = v_mul(M0, v_cvt(v_srli32(cb, 4)));
#if KX_GROUP
			if (one && R >= HALVES_FROM) {
				halves_group(w, Da, Db, xa, xs, 8 * b + j, R, 0, true, Ma, Mb, acc);
				continue;
			}
#endif
			ROWS {
				const kern_q8 *x = xrow(xa, xs, i, 8 * b + j, one);
				const vi sa = dot_row(w, x, 0, 2, v_zero_chain(), 2, one);
				const vi sb = dot_row(w, x, 1, 2, v_zero_chain(), 2, one);
				const vf t = v_fma(v_cvt(sa), Da, v_mul(v_cvt(sb), Db));
				const vf m = v_fma(Ma, v_set1f((float)x->s16[0]), v_mul(Mb, v_set1f((float)x->s16[1])));
				acc[i] = v_fma(t, v_set1f(x->d), acc[i]);
				acc[i] = v_fnma(m, v_set1f(x->d), acc[i]);
			}
			keep8(w);
		}
	}
}

// One row's dot of signed codes w over half `part` (0: elements 0..15, 1: 16..31).
AI vi dot_signed_half(const vi w[8], const kern_q8 *x, int part, bool one) {
#if KX_Q8_UNSIGNED
	return dot_row(w, x, part, 8, v_set1_32(-128 * x->s16[part]), 2, one);
#else
	// |w| (unsigned) against the activations carrying w's sign.
	vi hi = v_zeroi(), lo = v_zeroi();
	UNROLL for (int g = 4 * part; g < 4 * part + 4; g++) {
		const vi aw = v_abs8(w[g]);
		hi = v_dp(hi, aw, v_sign8(bcast32(x->qh + 4 * g), w[g]));
		if (!one) lo = v_dp(lo, aw, v_sign8(bcast32(x->ql + 4 * g), w[g]));
	}
	return one ? hi : v_addi(v_slli32(hi, 8), lo);
#endif
}

// Grid types whose two halves of a sub-block always share one scale: their sub-blocks are
// dotted whole, as IQ4_XS's, one integer sum and one scale a block rather than two.
AI bool iq_shared_scale(uint32_t type) {
	return type == GGUF_T_IQ2_XXS || type == GGUF_T_IQ3_XXS || type == GGUF_T_IQ3_S || type == GGUF_T_IQ1_S;
}

// R rows' activation block xb against a grid sub-block's values w (both halves of 16 scaled
// by Da, Db; Da alone with shared): the arithmetic packed and compact grid tiles share, so
// their bits are one.
AI void iq_rows(const vi w[8], vf Da, vf Db, const uint8_t *xa, size_t xs, int64_t xb, int R, vf *acc, bool shared,
		bool one) {
	if (shared) {
		rows_signed(w, xa, xs, xb, R, Da, acc, false, one);
		return;
	}
#if KX_GROUP && KX_Q8_UNSIGNED
	if (one && R >= HALVES_FROM) {
		halves_group(w, Da, Db, xa, xs, xb, R, 128, false, Da, Db, acc);
		return;
	}
#endif
	ROWS {
		const kern_q8 *x = xrow(xa, xs, i, xb, one);
		const vi sa = dot_signed_half(w, x, 0, one), sb = dot_signed_half(w, x, 1, one);
		const vf t = v_fma(v_cvt(sa), Da, v_mul(v_cvt(sb), Db));
		acc[i] = v_fma(t, v_set1f(x->d), acc[i]);
	}
	keep8(w);
}

// Grid types (IQ3, IQ2, IQ1): 4-bit indices looked up in the type's 16 values (biased by 128 where
// the dot products want unsigned codes), sub-blocks of 16 with unsigned scales;
// w = d * mul * sc * v(u) (mul a power of two, so d * mul is exact).
AI void rows_iq(const uint8_t *tw, int64_t nsb, const uint8_t *xa, size_t xs, int h, int R, vf *acc, uint32_t type,
		bool one) {
	const size_t bbytes = 8 * 256 + 256 + 32;
	const kern_iq_codebook *cb = kern_iq_codebook_of(type);
	const bool shared = iq_shared_scale(type);
	const vi lut = v_xor(v_lut16(cb->v), v_set1_8(KX_Q8_UNSIGNED ? (char)0x80 : 0));
	ROWS acc[i] = v_zerof();
	for (int64_t b = 0; b < nsb; b++) {
		const uint8_t *blk = tw + (size_t)b * bbytes, *sc = blk + 8 * 256;
		pf(blk, bbytes);
		const vf D0 = v_mul(v_ldh(sc + 256 + 2 * VL * h), v_set1f(cb->mul));
		for (int j = 0; j < 8; j++) {
			vi w[8];
			unpack4(blk + 256 * j, h, w);
			UNROLL for (int g = 0; g < 8; g++) w[g] = v_shuf8(lut, w[g]);
			const vf Da = v_mul(D0, v_cvt(v_ldu8(sc + 32 * j + VL * h)));
			const vf Db = shared ? Da : v_mul(D0, v_cvt(v_ldu8(sc + 32 * j + 16 + VL * h)));
			iq_rows(w, Da, Db, xa, xs, 8 * b + j, R, acc, shared, one);
		}
	}
}

// ---- grid types held compact ----------------------------------------------------------------
// A compact tile block (tensor_compact_bytes): 2-byte unit u of row r at (KERN_TILE u + r) 2, so the
// units of half h's rows at one offset are one load. Lane l: the little-endian u16 at byte o
// (even) of row VL h + l's block, its u32 at o, and its byte at o.
AI vi cu16(const uint8_t *bb, int o, int h) { return v_ldu16(bb + KERN_TILE * o + 2 * VL * h); }
AI vi cu32(const uint8_t *bb, int o, int h) { return v_or(cu16(bb, o, h), v_slli32(cu16(bb, o + 2, h), 16)); }
AI vi cu8(const uint8_t *bb, int o, int h) { return v_and(o % 2 ? v_srli32(cu16(bb, o - 1, h), 8) : cu16(bb, o, h), v_set1_32(0xff)); }

// Lane l: table[idx[l]], its first 4 bytes in *lo and the next 4 in *hi; scalar loads from an
// L1-resident table outrun gathers.
AI void lookup64(const uint64_t *table, vi idx, vi *lo, vi *hi) {
	int32_t ix[VL];
	uint64_t g[VL];
	v_storei(ix, idx);
	UNROLL for (int l = 0; l < VL; l++) g[l] = table[ix[l]];
	v_load64(g, lo, hi);
}
AI vi lookup32(const uint32_t *table, vi idx) {
	int32_t ix[VL];
	v_storei(ix, idx);
	UNROLL for (int l = 0; l < VL; l++) ix[l] = (int32_t)table[ix[l]];
	return v_load(ix);
}

// Byte b of each lane: 0xff where bit 4q + b of the lane's low byte s is set.
static const uint8_t iq_bcast0[64] = {0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0, 0, 0, 4, 4, 4, 4,
				      8, 8, 8, 8, 12, 12, 12, 12, 0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12,
				      0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12};
AI vi sign_mask(vi s, int q) {
	const vi bit = v_set1_32((int)(0x08040201u << 4 * q));
	return v_cmpeq8(v_and(v_shuf8(s, v_load(iq_bcast0)), bit), bit);
}

// The 8 signs of an IQ2_XXS/IQ3_XXS group from its 7 stored bits (tensor_iq_signs), per lane.
AI vi signs7(vi s7) {
	vi p = v_xor(s7, v_srli32(s7, 4));
	p = v_xor(p, v_srli32(p, 2));
	p = v_xor(p, v_srli32(p, 1));
	return v_or(s7, v_slli32(v_and(p, v_set1_32(1)), 7));
}

// Magnitudes m with signs: m where the mask is 0, -m where 0xff.
AI vi with_sign(vi m, vi neg) { return v_sub8(v_xor(m, neg), neg); }

// 2 s + 1 of the 4-bit (3-bit for IQ1) scale field s at bit `at` of each lane.
AI vi iq_scale(vi v, int at, int mask) { return v_addi(v_slli32(v_and(v_srli32(v, at), v_set1_32(mask)), 1), v_set1_32(1)); }

// The values of elements 4k..4k+3 of sub-block j in w[k] (k < 8), as rows_iq's lut gives them
// (biased by 128 where the dot products want unsigned codes), and the scales of its halves of
// 16 (sc[0], sc[1]), from the compact tile block at bb (half h's rows).
AI void iq_in_values(uint32_t type, const uint8_t *bb, int h, int j, vi lut, vi w[8], vi sc[2]) {
	const vi b8 = v_set1_32(0xff), unsig = v_set1_8(KX_Q8_UNSIGNED ? (char)0x80 : 0);
	switch (type) {
	case GGUF_T_IQ2_XXS:
	case GGUF_T_IQ2_XS:
	case GGUF_T_IQ2_S: {
		const uint64_t *grid = type == GGUF_T_IQ2_XXS ? tensor_iq2xxs_grid : type == GGUF_T_IQ2_XS ? tensor_iq2xs_grid : tensor_iq2s_grid;
		vi a0, a1, hq = v_zeroi();
		if (type == GGUF_T_IQ2_S) {
			a0 = cu32(bb, 2 + 4 * j, h);          // index low bytes
			a1 = cu32(bb, 2 + QK_K / 8 + 4 * j, h); // sign bytes
			hq = cu8(bb, 2 + QK_K / 4 + j, h);      // index top bits
		} else {
			a0 = cu32(bb, 2 + 8 * j, h), a1 = cu32(bb, 6 + 8 * j, h);
		}
		if (type == GGUF_T_IQ2_XXS) {
			sc[0] = sc[1] = iq_scale(a1, 28, 15);
		} else { // a byte per sub-block after the indices (and IQ2_S's qh), read 4 at a time
			const int at = type == GGUF_T_IQ2_XS ? 2 + QK_K / 4 : 2 + QK_K / 4 + QK_K / 32;
			const vi v = cu32(bb, at + 4 * (j / 4), h);
			sc[0] = iq_scale(v, 8 * (j % 4), 15), sc[1] = iq_scale(v, 8 * (j % 4) + 4, 15);
		}
		UNROLL for (int l = 0; l < 4; l++) {
			vi idx, sg;
			if (type == GGUF_T_IQ2_XXS) {
				idx = v_and(v_srli32(a0, 8 * l), b8);
				sg = signs7(v_and(v_srli32(a1, 7 * l), v_set1_32(127)));
			} else if (type == GGUF_T_IQ2_XS) {
				const vi v = l < 2 ? a0 : a1;
				const vi u = l % 2 ? v_srli32(v, 16) : v;
				idx = v_and(u, v_set1_32(511));
				sg = signs7(v_and(v_srli32(u, 9), v_set1_32(127)));
			} else {
				idx = v_or(v_and(v_srli32(a0, 8 * l), b8), v_slli32(v_and(v_srli32(hq, 2 * l), v_set1_32(3)), 8));
				sg = v_and(v_srli32(a1, 8 * l), b8);
			}
			vi g[2];
			lookup64(grid, idx, &g[0], &g[1]);
			UNROLL for (int q = 0; q < 2; q++) w[2 * l + q] = v_xor(with_sign(g[q], sign_mask(sg, q)), unsig);
		}
		return;
	}
	case GGUF_T_IQ3_XXS:
	case GGUF_T_IQ3_S: {
		const uint32_t *grid = type == GGUF_T_IQ3_XXS ? tensor_iq3xxs_grid : tensor_iq3s_grid;
		const vi i0 = cu32(bb, 2 + 8 * j, h), i1 = cu32(bb, 6 + 8 * j, h);
		vi hb = v_zeroi(), sgs;
		if (type == GGUF_T_IQ3_S) {
			hb = cu8(bb, 2 + QK_K / 4 + j, h);                    // qh[j]: the indices' 9th bits
			sgs = cu32(bb, 2 + QK_K / 4 + QK_K / 32 + 4 * j, h); // a sign byte per group
			// the 4 bytes of scales, a nibble per sub-block
			sc[0] = sc[1] = iq_scale(cu32(bb, 2 + QK_K / 4 + QK_K / 32 + QK_K / 8, h), 4 * j, 15);
		} else {
			sgs = cu32(bb, 2 + QK_K / 4 + 4 * j, h);
			sc[0] = sc[1] = iq_scale(sgs, 28, 15);
		}
		UNROLL for (int l = 0; l < 4; l++) {
			const vi sg = type == GGUF_T_IQ3_S ? v_and(v_srli32(sgs, 8 * l), b8)
							   : signs7(v_and(v_srli32(sgs, 7 * l), v_set1_32(127)));
			UNROLL for (int q = 0; q < 2; q++) {
				const int k = 2 * l + q;
				vi idx = v_and(v_srli32(k < 4 ? i0 : i1, 8 * (k % 4)), b8);
				if (type == GGUF_T_IQ3_S) idx = v_or(idx, v_slli32(v_and(v_srli32(hb, k), v_set1_32(1)), 8));
				w[k] = v_xor(with_sign(lookup32(grid, idx), sign_mask(sg, q)), unsig);
			}
		}
		return;
	}
	case GGUF_T_IQ1_S:
	case GGUF_T_IQ1_M: {
		// codes 2 (grid + 1) + (delta > 0), looked up in the codebook as rows_iq's
		const bool m = type == GGUF_T_IQ1_M;
		const vi lo = cu32(bb, (m ? 0 : 2) + 4 * j, h);
		const vi qh = cu16(bb, (m ? QK_K / 8 : 2 + QK_K / 8) + 2 * j, h);
		const vi one = v_set1_8(1);
		if (m) { // 3-bit scales per 16, four to a little-endian u16
			const vi v = cu32(bb, QK_K / 8 + QK_K / 16 + 4 * (j / 4), h);
			const int at = 16 * (j / 2 % 2) + 6 * (j % 2);
			sc[0] = iq_scale(v, at, 7), sc[1] = iq_scale(v, at + 3, 7);
		} else {
			sc[0] = sc[1] = iq_scale(qh, 12, 7);
		}
		UNROLL for (int l = 0; l < 4; l++) {
			const vi top = m ? v_srli32(qh, 4 * l) : v_srli32(qh, 3 * l);
			const vi idx = v_or(v_and(v_srli32(lo, 8 * l), b8), v_slli32(v_and(top, v_set1_32(7)), 8));
			const vi neg = v_and(v_srli32(qh, m ? 4 * l + 3 : 15), v_set1_32(1));
			const vi plus = v_xor(v_shuf8(neg, v_load(iq_bcast0)), one); // 1 in every byte where the delta is +1/8
			vi g[2];
			lookup64(tensor_iq1s_grid, idx, &g[0], &g[1]);
			UNROLL for (int q = 0; q < 2; q++) {
				const vi c = v_add8(g[q], one);
				w[2 * l + q] = v_shuf8(lut, v_add8(v_add8(c, c), plus));
			}
		}
		return;
	}
	}
}

// rows_iq over a compact tile (blocks of bs bytes): the same values and scales, so the same
// operations and bits.
AI void rows_iq_in(const uint8_t *tw, size_t bs, uint32_t type, int64_t nsb, const uint8_t *xa, size_t xs, int h, int R,
		   vf *acc, bool one) {
	const kern_iq_codebook *cb = kern_iq_codebook_of(type);
	const vi lut = v_xor(v_lut16(cb->v), v_set1_8(KX_Q8_UNSIGNED ? (char)0x80 : 0));
	const vi h16 = v_set1_32(0xffff);
	ROWS acc[i] = v_zerof();
	for (int64_t b = 0; b < nsb; b++) {
		const uint8_t *bb = tw + (size_t)b * KERN_TILE * bs;
		pf(bb, KERN_TILE * bs);
		vi d;
		if (type == GGUF_T_IQ1_M) { // d in the top nibbles of the four u16 of scales
			const vi s01 = cu32(bb, QK_K / 8 + QK_K / 16, h), s23 = cu32(bb, QK_K / 8 + QK_K / 16 + 4, h);
			d = v_or(v_or(v_srli32(v_and(s01, h16), 12), v_and(v_srli32(s01, 24), v_set1_32(0xf0))),
				 v_or(v_and(v_srli32(v_and(s23, h16), 4), v_set1_32(0xf00)), v_and(v_srli32(s23, 16), v_set1_32(0xf000))));
		} else {
			d = cu16(bb, 0, h);
		}
		const vf D0 = v_mul(v_h2f(d), v_set1f(cb->mul));
		for (int j = 0; j < 8; j++) {
			vi w[8], sc[2];
			iq_in_values(type, bb, h, j, lut, w, sc);
			const vf Da = v_mul(D0, v_cvt(sc[0]));
			const vf Db = v_mul(D0, v_cvt(sc[1]));
			iq_rows(w, Da, Db, xa, xs, 8 * b + j, R, acc, iq_shared_scale(type), one);
		}
	}
}

// Float types: one k at a time, acc = acc + w*x (fused), in k order.
AI void rows_float(const uint8_t *tw, int64_t k, const uint8_t *xa, size_t xs, int h, int R, vf *acc, uint32_t type) {
	ROWS acc[i] = v_zerof();
	for (int64_t e = 0; e < k; e++) {
		const vf wv = type == GGUF_T_F32 ? v_loadf((const float *)tw + 16 * e + VL * h)
			    : type == GGUF_T_F16 ? v_ldh(tw + 32 * e + 2 * VL * h)
						 : v_ldbf(tw + 32 * e + 2 * VL * h);
		ROWS acc[i] = v_fma(wv, v_set1f(((const float *)(xa + (size_t)i * xs))[e]), acc[i]);
	}
}

// ---- matmul drivers ----------------------------------------------------------------------------
// Writes the lanes of acc that fall inside [o, o1) of row yr.
// With add, each becomes y + a.
AI void put_out(float *yr, int64_t o, int64_t o1, vf a, bool add) {
	if (o + VL <= o1) {
		v_storef(yr + o, add ? v_add(v_loadf(yr + o), a) : a);
	} else {
		float t[VL];
		v_storef(t, a);
		for (int l = 0; o + l < o1; l++) yr[o + l] = add ? yr[o + l] + t[l] : t[l];
	}
}

// Rows go RMAX at a time, then 8, 4, 2 and 1: a few instantiations per type keep the code
// small, and a row's operations are the same in each. Long batches go in row blocks whose
// activations stay in L2 while every tile of the slice passes over them.
#define KX_ACT_L2 (768 * 1024)
// Activation rows a pass takes when `left` remain: RMAX, then 8, 4, 2 and 1.
#define KX_ROWS_FOR(left) ((left) >= RMAX ? RMAX : (left) >= 8 ? 8 : (left) >= 4 ? 4 : (left) >= 2 ? 2 : 1)
// PASS(..., R) with R the constant equal to r, one instantiation per row count.
#define KX_PASS(r, PASS, ...)                                                                                      \
	do {                                                                                                      \
		if ((r) == RMAX) PASS(__VA_ARGS__, RMAX);                                                         \
		else if (RMAX > 8 && (r) == 8) PASS(__VA_ARGS__, 8);                                              \
		else if ((r) == 4) PASS(__VA_ARGS__, 4);                                                          \
		else if ((r) == 2) PASS(__VA_ARGS__, 2);                                                          \
		else PASS(__VA_ARGS__, 1);                                                                        \
	} while (0)
#define MM_DRIVER(NAME, BLOCK_ELEMS, BLOCK_BYTES, CALL, ONE)                                                       \
	/* R rows [r0, r0 + R) against the half h of the tile at tw, into y (R a constant). */                \
	AI void NAME##_pass(const uint8_t *tw, int64_t nb, const uint8_t *xr, size_t xs, int h, float *y,         \
			    int64_t ldy, int64_t r0, int64_t o, int64_t o1, bool add, const int R) {             \
		vf acc[RMAX];                                                                                     \
		CALL(R, ONE);                                                                                     \
		ROWS put_out(y + (r0 + i) * ldy, o + VL * h, o1, acc[i], add);                                    \
	}                                                                                                         \
	static void NAME(const tensor_mat *w, const void *mat, const void *xa_, size_t xs, int64_t n, float *y,    \
			 int64_t ldy, int64_t o0, int64_t o1, bool add) {                                            \
		const uint8_t *xa = xa_;                                                                          \
		const int64_t nb = w->k / (BLOCK_ELEMS);                                                          \
		const size_t tile_bytes = (size_t)nb * (BLOCK_BYTES);                                             \
		int64_t rb = (int64_t)(KX_ACT_L2 / xs) / RMAX * RMAX;                                             \
		if (rb < RMAX) rb = RMAX;                                                                         \
		for (int64_t rb0 = 0; rb0 < n; rb0 += rb) {                                                       \
			const int64_t rb1 = rb0 + rb < n ? rb0 + rb : n;                                          \
			for (int64_t o = o0; o < o1; o += KERN_TILE) {                                            \
				const uint8_t *tw = (const uint8_t *)mat + (size_t)(o / KERN_TILE) * tile_bytes;   \
				for (int64_t r0 = rb0; r0 < rb1;) {                                               \
					const int64_t left = rb1 - r0;                                            \
					const int R = KX_ROWS_FOR(left);                                          \
					const uint8_t *xr = xa + (size_t)r0 * xs;                                 \
					for (int h = 0; h < NH; h++)                                              \
						KX_PASS(R, NAME##_pass, tw, nb, xr, xs, h, y, ldy, r0, o, o1, add);       \
					r0 += R;                                                                  \
				}                                                                                 \
			}                                                                                         \
		}                                                                                                 \
	}

#define CALL_Q4_0(R, ONE) rows_legacy(tw, nb, xr, xs, h, R, acc, 288, false, 8, false, ONE)
#define CALL_Q4_1(R, ONE) rows_legacy(tw, nb, xr, xs, h, R, acc, 320, false, 0, true, ONE)
#define CALL_Q5_0(R, ONE) rows_legacy(tw, nb, xr, xs, h, R, acc, 352, true, 16, false, ONE)
#define CALL_Q5_1(R, ONE) rows_legacy(tw, nb, xr, xs, h, R, acc, 384, true, 0, true, ONE)
#define CALL_Q8_0(R, ONE) rows_q8_0(tw, nb, xr, xs, h, R, acc, ONE)
#define CALL_IQ4_NL(R, ONE) rows_iq4(tw, nb, xr, xs, h, R, acc, false, false, ONE)
#define CALL_IQ4_XS(R, ONE) rows_iq4(tw, nb, xr, xs, h, R, acc, true, false, ONE)
#define CALL_MXFP4(R, ONE) rows_iq4(tw, nb, xr, xs, h, R, acc, false, true, ONE)
#define CALL_Q4_K(R, ONE) rows_q45_K(tw, nb, xr, xs, h, R, acc, false, ONE)
#define CALL_Q5_K(R, ONE) rows_q45_K(tw, nb, xr, xs, h, R, acc, true, ONE)
#define CALL_Q6_K(R, ONE) rows_q63_K(tw, nb, xr, xs, h, R, acc, true, ONE)
#define CALL_Q3_K(R, ONE) rows_q63_K(tw, nb, xr, xs, h, R, acc, false, ONE)
#define CALL_Q2_K(R, ONE) rows_q2_K(tw, nb, xr, xs, h, R, acc, ONE)
#define CALL_IQ3_XXS(R, ONE) rows_iq(tw, nb, xr, xs, h, R, acc, GGUF_T_IQ3_XXS, ONE)
#define CALL_IQ3_S(R, ONE) rows_iq(tw, nb, xr, xs, h, R, acc, GGUF_T_IQ3_S, ONE)
#define CALL_IQ2_XXS(R, ONE) rows_iq(tw, nb, xr, xs, h, R, acc, GGUF_T_IQ2_XXS, ONE)
#define CALL_IQ2(R, ONE) rows_iq(tw, nb, xr, xs, h, R, acc, GGUF_T_IQ2_XS, ONE) // and IQ2_S: their codebook, a scale per 16
#define CALL_IQ1_S(R, ONE) rows_iq(tw, nb, xr, xs, h, R, acc, GGUF_T_IQ1_S, ONE)
#define CALL_IQ1_M(R, ONE) rows_iq(tw, nb, xr, xs, h, R, acc, GGUF_T_IQ1_M, ONE)
#define CALL_F32(R, ONE) rows_float(tw, nb, xr, xs, h, R, acc, GGUF_T_F32)
#define CALL_F16(R, ONE) rows_float(tw, nb, xr, xs, h, R, acc, GGUF_T_F16)
#define CALL_BF16(R, ONE) rows_float(tw, nb, xr, xs, h, R, acc, GGUF_T_BF16)

// Each quantized type twice: 16-bit activations (mm_*) and 8-bit (mm8_*).
#define MM_TYPES(X)                                                                                                \
	X(q4_0, 32, 288, CALL_Q4_0) X(q4_1, 32, 320, CALL_Q4_1) X(q5_0, 32, 352, CALL_Q5_0) X(q5_1, 32, 384, CALL_Q5_1) \
	X(q8_0, 32, 544, CALL_Q8_0) X(q2_K, 256, 8 * 128 + 320, CALL_Q2_K) X(q3_K, 256, 8 * 192 + 288, CALL_Q3_K)        \
	X(q4_K, 256, 8 * 256 + 320, CALL_Q4_K) X(q5_K, 256, 8 * 320 + 320, CALL_Q5_K) X(q6_K, 256, 8 * 384 + 288, CALL_Q6_K) \
	X(iq4_nl, 32, 288, CALL_IQ4_NL) X(iq4_xs, 256, 8 * 256 + 160, CALL_IQ4_XS) X(mxfp4, 32, 320, CALL_MXFP4)              \
	X(iq3_xxs, 256, 8 * 256 + 288, CALL_IQ3_XXS) X(iq3_s, 256, 8 * 256 + 288, CALL_IQ3_S)                          \
	X(iq2_xxs, 256, 8 * 256 + 288, CALL_IQ2_XXS) X(iq2, 256, 8 * 256 + 288, CALL_IQ2)                              \
	X(iq1_s, 256, 8 * 256 + 288, CALL_IQ1_S) X(iq1_m, 256, 8 * 256 + 288, CALL_IQ1_M)
#define MM_BOTH(T, BE, BB, CALL) MM_DRIVER(mm_##T, BE, BB, CALL, false) MM_DRIVER(mm8_##T, BE, BB, CALL, true)
MM_TYPES(MM_BOTH)
MM_DRIVER(mm_f32, 1, 64, CALL_F32, false)
MM_DRIVER(mm_f16, 1, 32, CALL_F16, false)
MM_DRIVER(mm_bf16, 1, 32, CALL_BF16, false)

typedef void (*mm_fn)(const tensor_mat *, const void *, const void *, size_t, int64_t, float *, int64_t, int64_t,
		      int64_t, bool);
#define MM_ENTRIES(P)                                                                                              \
	[GGUF_T_F32] = mm_f32, [GGUF_T_F16] = mm_f16, [GGUF_T_BF16] = mm_bf16, [GGUF_T_Q4_0] = P##q4_0,                \
	[GGUF_T_Q4_1] = P##q4_1, [GGUF_T_Q5_0] = P##q5_0, [GGUF_T_Q5_1] = P##q5_1, [GGUF_T_Q8_0] = P##q8_0,            \
	[GGUF_T_Q2_K] = P##q2_K, [GGUF_T_Q3_K] = P##q3_K, [GGUF_T_Q4_K] = P##q4_K, [GGUF_T_Q5_K] = P##q5_K,            \
	[GGUF_T_Q6_K] = P##q6_K, [GGUF_T_IQ4_NL] = P##iq4_nl, [GGUF_T_IQ4_XS] = P##iq4_xs, [GGUF_T_MXFP4] = P##mxfp4,         \
	[GGUF_T_TQ1_0] = P##q2_K, [GGUF_T_TQ2_0] = P##q2_K, [GGUF_T_IQ3_XXS] = P##iq3_xxs, [GGUF_T_IQ3_S] = P##iq3_s,      \
	[GGUF_T_IQ2_XXS] = P##iq2_xxs, [GGUF_T_IQ2_XS] = P##iq2, [GGUF_T_IQ2_S] = P##iq2, [GGUF_T_IQ1_S] = P##iq1_s,  \
	[GGUF_T_IQ1_M] = P##iq1_m
static const mm_fn mm_table[GGUF_T_COUNT] = {MM_ENTRIES(mm_)};
static const mm_fn mm8_table[GGUF_T_COUNT] = {MM_ENTRIES(mm8_)};

static bool kx_compact(uint32_t type) { return type < GGUF_T_COUNT && mm_table[type] && kern_iq_codebook_of(type); }

// Compact grid matrices, a few activation rows at a time: the tiles' fields loaded straight
// into the values rows_iq looks up (rows_iq_in), R rows against half h of each tile, rows in
// MM_DRIVER's groups.
#define MM_IN_DRIVER(NAME, TYPE, BLOCK, ONE)                                                                      \
	AI void NAME##_pass(const uint8_t *tw, int64_t nb, const uint8_t *xr, size_t xs, int h, float *y, int64_t ldy, \
			    int64_t r0, int64_t o, int64_t o1, bool add, const int R) {                                \
		vf acc[RMAX];                                                                                     \
		rows_iq_in(tw, sizeof(BLOCK), TYPE, nb, xr, xs, h, R, acc, ONE);                                  \
		ROWS put_out(y + (r0 + i) * ldy, o + VL * h, o1, acc[i], add);                                    \
	}                                                                                                         \
	static void NAME(const tensor_mat *w, const void *mat, const void *xa_, size_t xs, int64_t n, float *y,    \
			 int64_t ldy, int64_t o0, int64_t o1, bool add) {                                            \
		const uint8_t *xa = xa_;                                                                          \
		const int64_t nb = w->k / 256;                                                                    \
		for (int64_t o = o0; o < o1; o += KERN_TILE) {                                                    \
			const uint8_t *tw = (const uint8_t *)mat + (size_t)o * w->row_bytes;                      \
			const int nr = (int)(w->rows - o < KERN_TILE ? w->rows - o : KERN_TILE);                  \
			for (int64_t r0 = 0; r0 < n;) {                                                           \
				const int64_t left = n - r0;                                                      \
				const int R = KX_ROWS_FOR(left);                                                  \
				const uint8_t *xr = xa + (size_t)r0 * xs;                                         \
				for (int h = 0; h < NH && VL * h < nr; h++)                                       \
					KX_PASS(R, NAME##_pass, tw, nb, xr, xs, h, y, ldy, r0, o, o1, add);       \
				r0 += R;                                                                          \
			}                                                                                         \
		}                                                                                                 \
	}
#define MM_IN_TYPES(X)                                                                                             \
	X(iq2_xxs, GGUF_T_IQ2_XXS, block_iq2_xxs) X(iq2_xs, GGUF_T_IQ2_XS, block_iq2_xs) X(iq2_s, GGUF_T_IQ2_S, block_iq2_s) \
	X(iq3_xxs, GGUF_T_IQ3_XXS, block_iq3_xxs) X(iq3_s, GGUF_T_IQ3_S, block_iq3_s) X(iq1_s, GGUF_T_IQ1_S, block_iq1_s) \
	X(iq1_m, GGUF_T_IQ1_M, block_iq1_m)
#define MM_IN_BOTH(T, TYPE, BLOCK) MM_IN_DRIVER(mmin_##T, TYPE, BLOCK, false) MM_IN_DRIVER(mmin8_##T, TYPE, BLOCK, true)
MM_IN_TYPES(MM_IN_BOTH)
#define MM_IN_ENTRY(P, T, TYPE) [TYPE] = P##T,
#define MM_IN16(T, TYPE, BLOCK) MM_IN_ENTRY(mmin_, T, TYPE)
#define MM_IN8(T, TYPE, BLOCK) MM_IN_ENTRY(mmin8_, T, TYPE)
static const mm_fn mmin_table[GGUF_T_COUNT] = {MM_IN_TYPES(MM_IN16)};
static const mm_fn mmin8_table[GGUF_T_COUNT] = {MM_IN_TYPES(MM_IN8)};

// Activation rows up to which a compact matrix's tiles are read as they are for each pass;
// past it a tile is expanded once and every pass reads the copy.
#define KX_IN_ROWS RMAX

// A compact grid matrix for many rows: each tile's rows put back in the file's layout, then
// expanded into the packed layout, in this thread's scratch, once, and the packed kernel run
// over it for every activation row: the packed matrix's bits at the file's size.
static void mm_compact(mm_fn fn, const tensor_mat *w, const void *mat, const uint8_t *xa, size_t xs, int64_t n,
		       float *y, int64_t ldy, int64_t o0, int64_t o1, bool add) {
	const size_t tb = kern_x86_pack_bytes(w->type, KERN_TILE, w->k), rows_b = KERN_TILE * w->row_bytes;
	uint8_t *tile = kern_x86_scratch(tb + rows_b), *rows = tile + tb;
	LANES_ASSERT(tile);
	const size_t bs = tensor_traits_of(w->type)->bytes, nb = w->row_bytes / bs;
	for (int64_t o = o0; o < o1; o += KERN_TILE) {
		const int64_t nr = w->rows - o < KERN_TILE ? w->rows - o : KERN_TILE;
		const uint8_t *t = (const uint8_t *)mat + (size_t)o * w->row_bytes;
		for (size_t b = 0; b < nb; b++)
			for (size_t u = 0; u < bs / 2; u++) {
				uint16_t v[KERN_TILE];
				memcpy(v, t + (b * bs + 2 * u) * KERN_TILE, sizeof v);
				for (int64_t r = 0; r < nr; r++) memcpy(rows + (size_t)r * w->row_bytes + b * bs + 2 * u, &v[r], 2);
			}
		kern_x86_pack_tile(w->type, rows, w->row_bytes, nr, w->k, tile, KX_Q8_UNSIGNED);
		fn(w, tile, xa, xs, n, y + o, ldy, 0, o1 - o < KERN_TILE ? o1 - o : KERN_TILE, add);
	}
}

// A type without a kernel here is read in place with float activations (kern_x86_act_kind),
// as the reference reads it; one with a kernel, packed or (grid types) compact.
static void kx_matmul_with(const mm_fn *table, const mm_fn *in_table, const tensor_mat *w, const void *mat, const void *xa,
			   size_t xs, int64_t n, float *y, int64_t ldy, int64_t o0, int64_t o1, bool add) {
	const mm_fn fn = table[w->type];
	if (!fn) {
		tensor_kernels_ref.matmul(w, mat, xa, xs, n, y, ldy, o0, o1, add);
	} else if (w->compact) {
		LANES_ASSERT(kx_compact(w->type));
		if (n <= KX_IN_ROWS) in_table[w->type](w, mat, xa, xs, n, y, ldy, o0, o1, add);
		else mm_compact(fn, w, mat, xa, xs, n, y, ldy, o0, o1, add);
	} else {
		LANES_ASSERT(w->packed);
		fn(w, mat, xa, xs, n, y, ldy, o0, o1, add);
	}
}

static void kx_matmul8(const tensor_mat *w, const void *mat, const void *xa, size_t xs, int64_t n, float *y,
		       int64_t ldy, int64_t o0, int64_t o1, bool add) {
	kx_matmul_with(mm8_table, mmin8_table, w, mat, xa, xs, n, y, ldy, o0, o1, add);
}

static void kx_matmul(const tensor_mat *w, const void *mat, const void *xa, size_t xs, int64_t n, float *y, int64_t ldy,
		      int64_t o0, int64_t o1, bool add) {
	kx_matmul_with(mm_table, mmin_table, w, mat, xa, xs, n, y, ldy, o0, o1, add);
}

static size_t kx_pack_bytes(uint32_t type, int64_t rows, int64_t k) {
	return type < GGUF_T_COUNT && mm_table[type] ? kern_x86_pack_bytes(type, rows, k) : 0;
}

static void kx_pack(uint32_t type, const void *src, size_t row_bytes, int64_t rows, int64_t k, void *dst, int64_t t0,
		    int64_t t1) {
	kern_x86_pack(type, src, row_bytes, rows, k, dst, t0, t1, KX_Q8_UNSIGNED);
}

// ---- activations, per block of 32 -----------------------------------------------------------
// t = x / (amax/127) rounds to qh (nearest even; with `one`, width q8, that is all, the
// reference's arithmetic, so both make the same blocks). Width q16 also keeps the rest
// t - qh (exact, |.| <= 1/2) times 256 rounded to ql, clamped to 127:
// |x - d (256 qh + ql)| <= amax / (127 * 256).
AI void act_block(const float *x, kern_q8 *o, bool one) {
	vf v[32 / VL];
	vf am = v_zerof();
	UNROLL for (int c = 0; c < 32 / VL; c++) {
		v[c] = v_loadf(x + VL * c);
		am = v_max(am, v_absf(v[c]));
	}
	const float amax = v_hmax(am), d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
	vi u0 = v_zeroi(), u1 = v_zeroi(); // the block's integers over each half
	UNROLL for (int c = 0; c < 32 / VL; c++) {
		const vf t = v_mul(v[c], v_set1f(id));
		const vi h = v_cvtr(t);
		v_store8(o->qh + VL * c, h);
		vi u = h;
		if (!one) {
			const vf rest = v_mul(v_sub(t, v_cvt(h)), v_set1f(256.0f));
			const vi l = v_cvtr(v_min(v_max(rest, v_set1f(-127.0f)), v_set1f(127.0f)));
			v_store8(o->ql + VL * c, l);
			u = v_addi(v_slli32(h, 8), l);
		}
		if (VL * c < 16) u0 = v_addi(u0, u);
		else u1 = v_addi(u1, u);
	}
	const int32_t s0 = v_hsumi(u0), s1 = v_hsumi(u1);
	o->d = one ? d : d * (1.0f / 256.0f);
	o->sum = s0 + s1;
	o->s16[0] = s0, o->s16[1] = s1;
	o->ds = o->d * (float)(s0 + s1);
	o->n8 = -8 * (s0 + s1);
	o->n32[0] = -32 * s0, o->n32[1] = -32 * s1;
}

static void kx_act_q8(const float *x, int64_t k, kern_q8 *dst) {
	for (int64_t b = 0; b < k / 32; b++) act_block(x + 32 * b, &dst[b], false);
}

static void kx_act_q8_8(const float *x, int64_t k, kern_q8 *dst) {
	for (int64_t b = 0; b < k / 32; b++) act_block(x + 32 * b, (kern_q8 *)((uint8_t *)dst + (size_t)b * KERN_Q8_BYTES), true);
}

// ---- KV rows as Q8_0 and Q4_0 blocks: the reference quantizers' bytes, vectorized ------------
// Q8_0: d = amax / 127, q = roundf(x / d); Q4_0: d = the largest magnitude (first on ties,
// signed) / -8, q = min(15, trunc(x / d + 8.5)); x / d as x * (1 / d), each step a separate
// rounding as the scalar code's. Other types take the reference.
static void kx_quant_row(uint32_t type, const float *x, void *dst, int64_t n) {
	if (type != GGUF_T_Q8_0 && type != GGUF_T_Q4_0) {
		tensor_traits_of(type)->from_f32(x, dst, n);
		return;
	}
	for (int64_t b = 0; b < n / 32; b++, x += 32) {
		vf v[32 / VL];
		vf am = v_zerof();
		UNROLL for (int c = 0; c < 32 / VL; c++) {
			v[c] = v_loadf(x + VL * c);
			am = v_max(am, v_absf(v[c]));
		}
		const float amax = v_hmax(am);
		if (type == GGUF_T_Q8_0) {
			block_q8_0 *o = (block_q8_0 *)dst + b;
			const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
			o->d = tensor_f32_to_f16(d);
			UNROLL for (int c = 0; c < 32 / VL; c++) v_store8(o->qs + VL * c, v_cvtt(v_roundaway(v_mul(v[c], v_set1f(id)))));
			continue;
		}
		block_q4_0 *o = (block_q4_0 *)dst + b;
		float mx = 0.0f;
		for (int j = 0; j < 32 && amax > 0.0f; j++)
			if (fabsf(x[j]) == amax) {
				mx = x[j];
				break;
			}
		const float d = mx / -8, id = d ? 1.0f / d : 0.0f;
		o->d = tensor_f32_to_f16(d);
		vi q[32 / VL];
		UNROLL for (int c = 0; c < 32 / VL; c++)
			q[c] = v_mini(v_cvtt(v_add(v_mul(v[c], v_set1f(id)), v_set1f(8.5f))), v_set1_32(15));
		UNROLL for (int c = 0; c < 16 / VL; c++) v_store8((int8_t *)o->qs + VL * c, v_or(q[c], v_slli32(q[c + 16 / VL], 4)));
	}
}

// The set's table in one width (the includer names the set and its CPU check).
#define KX_SET(NAME, ACT, TWIN, ACT_Q8, MATMUL, CPU_OK)                                                             \
	{.name = NAME, .act = ACT, .twin = &TWIN, .act_bytes = ACT == TENSOR_ACT_Q8 ? KERN_Q8_BYTES : sizeof(kern_q8),  \
	 .tile = KERN_TILE, .pack_bytes = kx_pack_bytes, .pack = kx_pack, .compact = kx_compact, .act_kind = kern_x86_act_kind,              \
	 .act_q8 = ACT_Q8, .matmul = MATMUL, .attn = kx_attn, .attn_unfused = kx_attn_unfused, .rmsnorm = kx_rmsnorm,  \
	 .swiglu = kx_swiglu, .geglu = kx_geglu, .swiglu_oai = kx_swiglu_oai, .softcap_rows = kx_softcap_rows, .f16s_encode = kx_f16s_encode, .quant_row = kx_quant_row,          \
	 .f32_rows = kx_f32_rows,                                                                                     \
	 .f32_t16 = kx_f32_t16, .f32_fwd = kx_f32_fwd, .f32_bwd = kx_f32_bwd, .cpu_ok = CPU_OK}
#define KX_SETS(NAME, Q16, Q8, CPU_OK)                                                                             \
	const tensor_kernels Q16 = KX_SET(NAME, TENSOR_ACT_Q16, Q8, kx_act_q8, kx_matmul, CPU_OK);                     \
	const tensor_kernels Q8 = KX_SET(NAME, TENSOR_ACT_Q8, Q16, kx_act_q8_8, kx_matmul8, CPU_OK);

// ---- exp and the pointwise kernels -------------------------------------------------------------
// e^x for x <= 88 (above it, e^88; below -87.3 it flushes to 0): 2^n * p(r), r = x - n ln2 in [-ln2/2, ln2/2].
AI vf v_exp(vf x) {
	x = v_min(x, v_set1f(88.0f));
	x = v_max(x, v_set1f(-87.3f));
	const vf n = v_round(v_mul(x, v_set1f(1.44269504088896341f)));
	vf r = v_fma(n, v_set1f(-0.693359375f), x);
	r = v_fma(n, v_set1f(2.12194440e-4f), r);
	vf p = v_set1f(1.9875691500e-4f);
	p = v_fma(p, r, v_set1f(1.3981999507e-3f));
	p = v_fma(p, r, v_set1f(8.3334519073e-3f));
	p = v_fma(p, r, v_set1f(4.1665795894e-2f));
	p = v_fma(p, r, v_set1f(1.6666665459e-1f));
	p = v_fma(p, r, v_set1f(5.0000001201e-1f));
	p = v_fma(p, v_mul(r, r), v_add(r, v_set1f(1.0f)));
	return v_mul(p, v_pow2i(n));
}

AI vf silu_mul(vf gv, vf uv) { return v_mul(v_div(gv, v_add(v_set1f(1.0f), v_exp(v_sub(v_zerof(), gv)))), uv); }

// GELU's tanh form as x sigmoid(2y), y = sqrt(2/pi) (x + 0.044715 x^3): 0.5 x (1 + tanh y) exactly.
AI vf gelu_mul(vf gv, vf uv) {
	const vf y2 = v_mul(v_mul(v_fma(v_mul(gv, gv), v_set1f(0.044715f), v_set1f(1.0f)), gv), v_set1f(-1.5957691216057308f));
	return v_mul(v_div(gv, v_add(v_set1f(1.0f), v_exp(y2))), uv);
}

// Every element takes the same vector arithmetic, the tail too: callers pass whole batches,
// so which elements form the tail depends on the batch size.
#define KX_GLU(name, op)                                                                       \
	static void name(const float *g, const float *u, float *out, int64_t n) {              \
		int64_t i = 0;                                                                 \
		for (; i + VL <= n; i += VL) v_storef(out + i, op(v_loadf(g + i), v_loadf(u + i))); \
		if (i < n) {                                                                   \
			float tg[VL] = {0}, tu[VL] = {0}, to[VL];                              \
			memcpy(tg, g + i, (size_t)(n - i) * sizeof(float));                    \
			memcpy(tu, u + i, (size_t)(n - i) * sizeof(float));                    \
			v_storef(to, op(v_loadf(tg), v_loadf(tu)));                            \
			memcpy(out + i, to, (size_t)(n - i) * sizeof(float));                  \
		}                                                                              \
	}
// gpt-oss's experts: x = min(g, 7), y = clamp(u, -7, 7), x sigmoid(1.702 x) (y + 1).
AI vf oai_mul(vf gv, vf uv) {
	const vf x = v_min(gv, v_set1f((float)TENSOR_OAI_LIMIT));
	const vf y = v_max(v_min(uv, v_set1f((float)TENSOR_OAI_LIMIT)), v_set1f((float)-TENSOR_OAI_LIMIT));
	const vf sig = v_div(x, v_add(v_set1f(1.0f), v_exp(v_mul(x, v_set1f((float)-TENSOR_OAI_ALPHA)))));
	return v_mul(sig, v_add(y, v_set1f(1.0f)));
}

// cap tanh(x / cap) = cap - 2 cap / (e^(2x / cap) + 1): saturates at +-cap as tanh does.
AI vf softcap_v(vf x, float cap) {
	const vf e = v_exp(v_mul(x, v_set1f(2.0f / cap)));
	return v_sub(v_set1f(cap), v_div(v_set1f(2.0f * cap), v_add(e, v_set1f(1.0f))));
}

static void kx_softcap_rows(float *x, int64_t n, float cap) {
	int64_t i = 0;
	for (; i + VL <= n; i += VL) v_storef(x + i, softcap_v(v_loadf(x + i), cap));
	if (i < n) {
		float t[VL] = {0};
		memcpy(t, x + i, (size_t)(n - i) * sizeof(float));
		v_storef(t, softcap_v(v_loadf(t), cap));
		memcpy(x + i, t, (size_t)(n - i) * sizeof(float));
	}
}

KX_GLU(kx_swiglu, silu_mul)
KX_GLU(kx_geglu, gelu_mul)
KX_GLU(kx_swiglu_oai, oai_mul)

static void kx_rmsnorm(const float *x, const float *w, int64_t n, float eps, float *y) {
	if (n % VL) {
		tensor_rmsnorm(x, w, n, eps, y);
		return;
	}
	vd s0 = v_zerod(), s1 = v_zerod();
	for (int64_t i = 0; i < n; i += VL) {
		const vf v = v_loadf(x + i);
		const vd lo = v_lo_pd(v), hi = v_hi_pd(v);
		s0 = v_fmad(lo, lo, s0);
		s1 = v_fmad(hi, hi, s1);
	}
	const double ss = v_hsumd(v_addd(s0, s1));
	const float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
	for (int64_t i = 0; i < n; i += VL) {
		const vf v = v_mul(v_loadf(x + i), v_set1f(scale));
		v_storef(y + i, w ? v_mul(v, v_loadf(w + i)) : v);
	}
}

// Scaled f16 encode (tensor_f16s_encode's search, vectorized): the octave as the reference
// picks it, then the scale of the octave with the least squared error (float sums).
static uint8_t kx_f16s_encode(const float *x, int32_t n, uint16_t *h) {
#ifdef KX_NARROW
	if (n % VL && n % KX_NARROW_VL == 0) return KX_NARROW.f16s_encode(x, n, h);
#endif
	if (n % VL) return tensor_f16s_encode(x, n, h);
	vf am = v_zerof();
	for (int32_t i = 0; i < n; i += VL) am = v_max(am, v_absf(v_loadf(x + i)));
	const float m = v_hmax(am);
	int oct = 8;
	while (oct < 15 && m >= ldexpf(16384.0f, oct - 8)) oct++;
	while (oct > 0 && m < ldexpf(0x1p-6f, oct - 8)) oct--;
	int best = 0;
	float best_err = INFINITY;
	for (int j = 0; j < 16; j++) {
		const float sc = tensor_f16s_scale((uint8_t)(oct * 16 + j));
		const vf vs = v_set1f(sc);
		vf err = v_zerof();
		for (int32_t i = 0; i < n; i += VL) {
			const vf v = v_loadf(x + i);
			const vf d = v_sub(v_mul(v_f16round(v_div(v, vs)), vs), v);
			err = v_fma(d, d, err);
		}
		const float e = v_hsum(err);
		if (e < best_err) best_err = e, best = j;
	}
	const uint8_t b = (uint8_t)(oct * 16 + best);
	const vf vs = v_set1f(tensor_f16s_scale(b));
	for (int32_t i = 0; i < n; i += VL) v_storeh(h + i, v_div(v_loadf(x + i), vs));
	return b;
}
