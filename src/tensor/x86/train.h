// tensor/x86/train: the training products of a set (tensor_k_f32_fwd, tensor_k_f32_bwd) over its
// vector vocabulary (vf, VL, v_fma...). A tile of 16 outputs is 16 / VL vectors; several rows
// share each weight vector loaded, and every output adds its inputs in order with one fused
// multiply-add each, whatever the number of rows.

// Rows as f32: the common types converted a vector at a time (the same products as the
// reference, so the same bits), the others by their reference converter.
static void kx_f32_rows(uint32_t type, const void *src, float *dst, int64_t n) {
	if (type == GGUF_T_Q4_0) {
		const block_q4_0 *b = src;
		const vi lo = v_set1_32(15), off = v_set1_32(-8);
		for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0) {
			const vf d = v_set1f(tensor_f16_to_f32(b[i].d));
			for (int j = 0; j < QK4_0 / 2; j += VL) {
				const vi q = v_ldu8(b[i].qs + j);
				v_storef(dst + j, v_mul(v_cvt(v_addi(v_and(q, lo), off)), d));
				v_storef(dst + QK4_0 / 2 + j, v_mul(v_cvt(v_addi(v_srli32(q, 4), off)), d));
			}
		}
	} else if (type == GGUF_T_Q8_0) {
		const block_q8_0 *b = src;
		for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
			const vf d = v_set1f(tensor_f16_to_f32(b[i].d));
			for (int j = 0; j < QK8_0; j += VL) v_storef(dst + j, v_mul(v_cvt(v_ldi8(b[i].qs + j)), d));
		}
	} else if (type == GGUF_T_F16 && n % VL == 0) {
		for (int64_t i = 0; i < n; i += VL) v_storef(dst + i, v_ldh((const uint16_t *)src + i));
	} else if (type == GGUF_T_F32) {
		memcpy(dst, src, (size_t)n * sizeof *dst);
	} else {
		tensor_traits_of(type)->to_f32(src, dst, n);
	}
}

// A 16-row tile transposed: blocks of VL x VL in registers, the columns past the last whole
// block one at a time.
#if VL == 16
static inline void kt_block(const float *w, int64_t ldw, float *wt) {
	__m512 r[16], t[16];
	for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(w + i * ldw);
	for (int i = 0; i < 8; i++) t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]), t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	for (int i = 0; i < 4; i++) {
		r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
		r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
		r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
		r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
	}
	for (int h = 0; h < 2; h++)
		for (int i = 0; i < 4; i++) {
			t[8 * h + i] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + 4 + i], 0x88);
			t[8 * h + 4 + i] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + 4 + i], 0xDD);
		}
	for (int i = 0; i < 8; i++) {
		r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
		r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
	}
	for (int i = 0; i < 16; i++) _mm512_storeu_ps(wt + i * 16, r[i]);
}
#else
// Rows r0..r0+7, columns c..c+7: wt[(c + j) * 16 + r0 + i] = w[(r0 + i) * ldw + c + j].
static inline void kt_block8(const float *w, int64_t ldw, float *wt) {
	__m256 r[8], t[8];
	for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(w + i * ldw);
	for (int i = 0; i < 4; i++) t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]), t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	for (int i = 0; i < 2; i++) {
		r[4 * i + 0] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
		r[4 * i + 1] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
		r[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
		r[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
	}
	for (int i = 0; i < 4; i++) {
		t[i] = _mm256_permute2f128_ps(r[i], r[4 + i], 0x20);
		t[4 + i] = _mm256_permute2f128_ps(r[i], r[4 + i], 0x31);
	}
	for (int i = 0; i < 8; i++) _mm256_storeu_ps(wt + i * 16, t[i]);
}

static inline void kt_block(const float *w, int64_t ldw, float *wt) {
	for (int c = 0; c < 16; c += 8)
		for (int r = 0; r < 16; r += 8) kt_block8(w + r * ldw + c, ldw, wt + c * 16 + r);
}
#endif

static void kx_f32_t16(const float *w, int64_t ldw, int64_t kn, float *wt) {
	int64_t c = 0;
	for (; c + 16 <= kn; c += 16) kt_block(w + c, ldw, wt + c * 16);
	for (; c < kn; c++)
		for (int r = 0; r < 16; r++) wt[c * 16 + r] = w[r * ldw + c];
}

#define KT_NV (16 / VL)     // vectors per 16 outputs
#define KT_ROWS (8 / KT_NV) // rows of x (or dy) sharing each weight vector

static void kx_f32_fwd(const float *wt, int64_t kn, const float *x, int64_t ldx, int64_t n, float *y) {
	int64_t i = 0;
	for (; i + KT_ROWS <= n; i += KT_ROWS) {
		vf acc[KT_ROWS][KT_NV];
		_Pragma("GCC unroll 8") for (int r = 0; r < KT_ROWS; r++)
			_Pragma("GCC unroll 2") for (int v = 0; v < KT_NV; v++) acc[r][v] = v_loadf(y + (i + r) * 16 + v * VL);
		for (int64_t c = 0; c < kn; c++) {
			vf w[KT_NV];
			_Pragma("GCC unroll 2") for (int v = 0; v < KT_NV; v++) w[v] = v_loadf(wt + c * 16 + v * VL);
			_Pragma("GCC unroll 8") for (int r = 0; r < KT_ROWS; r++) {
				const vf xb = v_set1f(x[(i + r) * ldx + c]);
				_Pragma("GCC unroll 2") for (int v = 0; v < KT_NV; v++) acc[r][v] = v_fma(xb, w[v], acc[r][v]);
			}
		}
		_Pragma("GCC unroll 8") for (int r = 0; r < KT_ROWS; r++)
			_Pragma("GCC unroll 2") for (int v = 0; v < KT_NV; v++) v_storef(y + (i + r) * 16 + v * VL, acc[r][v]);
	}
	for (; i < n; i++) {
		vf acc[KT_NV];
		for (int v = 0; v < KT_NV; v++) acc[v] = v_loadf(y + i * 16 + v * VL);
		for (int64_t c = 0; c < kn; c++) {
			const vf xb = v_set1f(x[i * ldx + c]);
			for (int v = 0; v < KT_NV; v++) acc[v] = v_fma(xb, v_loadf(wt + c * 16 + v * VL), acc[v]);
		}
		for (int v = 0; v < KT_NV; v++) v_storef(y + i * 16 + v * VL, acc[v]);
	}
}

// One row's columns [c, c + VL) (all of them in bounds) over the tile's nr rows.
#define KT_BWD_ROWS 8
static void kx_f32_bwd(const float *w, int64_t ldw, int64_t nr, int64_t kn, const float *dy, int64_t ldy, int64_t n,
		       float *dx, int64_t ldx) {
	int64_t i = 0;
	for (; i + KT_BWD_ROWS <= n; i += KT_BWD_ROWS) {
		int64_t c = 0;
		for (; c + VL <= kn; c += VL) {
			vf acc[KT_BWD_ROWS];
			_Pragma("GCC unroll 8") for (int q = 0; q < KT_BWD_ROWS; q++) acc[q] = v_loadf(dx + (i + q) * ldx + c);
			for (int64_t r = 0; r < nr; r++) {
				const vf wv = v_loadf(w + r * ldw + c);
				_Pragma("GCC unroll 8") for (int q = 0; q < KT_BWD_ROWS; q++) acc[q] = v_fma(v_set1f(dy[(i + q) * ldy + r]), wv, acc[q]);
			}
			_Pragma("GCC unroll 8") for (int q = 0; q < KT_BWD_ROWS; q++) v_storef(dx + (i + q) * ldx + c, acc[q]);
		}
		for (; c < kn; c++)
			for (int q = 0; q < KT_BWD_ROWS; q++) {
				float a = dx[(i + q) * ldx + c];
				for (int64_t r = 0; r < nr; r++) a = fmaf(dy[(i + q) * ldy + r], w[r * ldw + c], a);
				dx[(i + q) * ldx + c] = a;
			}
	}
	for (; i < n; i++) {
		int64_t c = 0;
		for (; c + VL <= kn; c += VL) {
			vf acc = v_loadf(dx + i * ldx + c);
			for (int64_t r = 0; r < nr; r++) acc = v_fma(v_set1f(dy[i * ldy + r]), v_loadf(w + r * ldw + c), acc);
			v_storef(dx + i * ldx + c, acc);
		}
		for (; c < kn; c++) {
			float a = dx[i * ldx + c];
			for (int64_t r = 0; r < nr; r++) a = fmaf(dy[i * ldy + r], w[r * ldw + c], a);
			dx[i * ldx + c] = a;
		}
	}
}

#undef KT_NV
#undef KT_ROWS
#undef KT_BWD_ROWS
