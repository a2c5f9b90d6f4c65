// tensor/x86/attn: attention over the paged KV store, written once over the vector
// vocabulary of kernels_avx2.c and kernels_avx512.c, which include it after impl.h.
// ---- unfused attention over paged f16 rows --------------------------------------------------------
#define ATT_MAXC 16 // head_dim / VL at most
#ifdef KX_NARROW
// A head this set's vectors do not divide but the narrower set's do: its kernels keep it in vectors.
AI bool narrow_head(int32_t D) { return D % VL && D % KX_NARROW_VL == 0 && D / KX_NARROW_VL <= ATT_MAXC; }
#endif

// q . k for the nj (<= VL) K rows of a group in kf (nc vectors each), in the lanes of one
// vector: each product summed over the head's values in lanes, then the VL sums reduced
// side by side in one fixed tree, so a score never depends on its neighbours or on n_pos.
AI vf score_group(const float *qh, const float *kf, int nj, const int nc) {
	vf part[VL];
	UNROLL for (int l = 0; l < VL; l++) {
		if (l >= nj) {
			part[l] = v_zerof();
			continue;
		}
		const float *kl = kf + (size_t)l * nc * VL;
		vf a = v_mul(v_loadf(qh), v_loadf(kl));
		for (int c = 1; c < nc; c++) a = v_fma(v_loadf(qh + VL * c), v_loadf(kl + VL * c), a);
		part[l] = a;
	}
	return v_hsum_lanes(part);
}

// The body for nc = D / VL vectors per head; called with nc a constant for the common head
// sizes, so the loops over a head's vectors unroll into registers.
AI void attn_body(const float *q, int32_t nq, int32_t D, float scale, const tensor_kv_view *kvv, int32_t n_pos,
		  float *scores, float *out, const int nc) {
	const int32_t pt = kvv->page_tokens;
	// Scores in groups of VL positions fixed by absolute position (score_group).
	float kf[VL * ATT_MAXC * VL] __attribute__((aligned(64)));
	float ksc[VL] __attribute__((aligned(64)));
	for (int32_t j0 = 0; j0 < n_pos; j0 += VL) {
		const int nj = n_pos - j0 < VL ? n_pos - j0 : VL;
		for (int l = 0; l < nj; l++) {
			const int32_t j = j0 + l;
			const size_t page = (size_t)kvv->pages[j / pt], slot = (size_t)(j % pt);
			const uint16_t *kr = (const uint16_t *)kvv->k + page * kvv->page_stride + slot * kvv->row_stride;
			for (int c = 0; c < nc; c++) v_storef(kf + (size_t)(l * nc + c) * VL, v_ldh(kr + VL * c));
			ksc[l] = kvv->ks ? kern_f16s_scales[kvv->ks[page * kvv->s_page_stride + slot * kvv->s_row_stride]] * scale
					 : scale;
		}
		for (int l = nj; l < VL; l++) ksc[l] = 0.0f;
		for (int32_t hq = 0; hq < nq; hq++) {
			const float *qh = q + (size_t)hq * D;
			const vf sv = v_mul(score_group(qh, kf, nj, nc), v_loadf(ksc));
			float *dst = scores + (size_t)hq * n_pos + j0;
			if (nj == VL) v_storef(dst, sv);
			else {
				float t[VL];
				v_storef(t, sv);
				memcpy(dst, t, (size_t)nj * sizeof(float));
			}
		}
	}
	// Softmax per head: max, exp, sum in lanes (position mod VL), then one reduction.
	float inv[64];
	for (int32_t hq = 0; hq < nq; hq++) {
		float *sc = scores + (size_t)hq * n_pos;
		float mx = -INFINITY;
		for (int32_t j = 0; j < n_pos; j++) mx = sc[j] > mx ? sc[j] : mx;
		vf sum = v_zerof();
		int32_t j = 0;
		for (; j + VL <= n_pos; j += VL) {
			const vf p = v_exp(v_sub(v_loadf(sc + j), v_set1f(mx)));
			v_storef(sc + j, p);
			sum = v_add(sum, p);
		}
		float tail = 0.0f;
		for (; j < n_pos; j++) {
			float t[VL] = {0};
			t[0] = sc[j] - mx;
			float e[VL];
			v_storef(e, v_exp(v_loadf(t)));
			sc[j] = e[0];
			tail += e[0];
		}
		const float total = v_hsum(sum) + tail;
		inv[hq] = 1.0f / total;
	}
	// Weighted sum of V in position order, HG heads at a time (accumulators in registers);
	// the V scale folds into each position's weight.
	const int HG = nc <= 4 ? 4 : nc <= 8 ? 2 : 1;
	for (int32_t h0 = 0; h0 < nq; h0 += HG) {
		const int hn = nq - h0 < HG ? nq - h0 : HG;
		vf acc[4][ATT_MAXC];
		UNROLL for (int a = 0; a < HG; a++)
			UNROLL for (int c = 0; c < nc; c++) acc[a][c] = v_zerof();
		for (int32_t j = 0; j < n_pos; j++) {
			const size_t page = (size_t)kvv->pages[j / pt], slot = (size_t)(j % pt);
			const uint16_t *vr = (const uint16_t *)kvv->v + page * kvv->page_stride + slot * kvv->row_stride;
			const float vsc = kvv->vs ? kern_f16s_scales[kvv->vs[page * kvv->s_page_stride + slot * kvv->s_row_stride]] : 1.0f;
			vf vv[ATT_MAXC] = {0};
			UNROLL for (int c = 0; c < nc; c++) vv[c] = v_ldh(vr + VL * c);
			UNROLL for (int a = 0; a < HG; a++) {
				if (a >= hn) break;
				const vf p = v_set1f(scores[(size_t)(h0 + a) * n_pos + j] * vsc);
				UNROLL for (int c = 0; c < nc; c++) acc[a][c] = v_fma(p, vv[c], acc[a][c]);
			}
		}
		for (int a = 0; a < hn; a++) {
			const float iv = inv[h0 + a];
			for (int c = 0; c < nc; c++) v_storef(out + (size_t)(h0 + a) * D + VL * c, v_mul(acc[a][c], v_set1f(iv)));
		}
	}
}

static void kx_attn_unfused(const float *q, int32_t nq, int32_t D, float scale, const tensor_kv_view *kvv, int32_t n_pos,
		    float *scores, float *out) {
	const int nc = D / VL;
	if (nq > 64) { // the 1/sum table holds 64 heads
		kx_attn_unfused(q, 64, D, scale, kvv, n_pos, scores, out);
		kx_attn_unfused(q + (size_t)64 * D, nq - 64, D, scale, kvv, n_pos, scores + (size_t)64 * n_pos, out + (size_t)64 * D);
		return;
	}
#ifdef KX_NARROW
	if (narrow_head(D)) {
		KX_NARROW.attn_unfused(q, nq, D, scale, kvv, n_pos, scores, out);
		return;
	}
#endif
	if (D % VL || nc > ATT_MAXC) {
		for (int32_t hq = 0; hq < nq; hq++)
			tensor_attn_f16(q + (size_t)hq * D, D, scale, kvv, n_pos, scores + (size_t)hq * n_pos, out + (size_t)hq * D);
		return;
	}
	if (nc == 4) attn_body(q, nq, D, scale, kvv, n_pos, scores, out, 4);
	else if (nc == 8) attn_body(q, nq, D, scale, kvv, n_pos, scores, out, 8);
	else attn_body(q, nq, D, scale, kvv, n_pos, scores, out, nc);
}

// ---- fused attention over the paged store (any row encoding) ------------------------------------
#define TT TENSOR_ATT_TILE

// A KV block's 32 codes as floats in 32 / VL vectors (q8_0: the int8 codes; q4_0: the nibbles
// minus 8), and its scale (returned): exact, as d * q is in float.
AI float block_codes(int enc, const uint8_t *blk, vf *c) {
	uint16_t dh;
	memcpy(&dh, blk, 2);
	const float d = _cvtsh_ss(dh);
	__m128i lo, hi;
	if (enc == TENSOR_KV_Q8_0) {
		lo = _mm_loadu_si128((const __m128i *)(blk + 2));
		hi = _mm_loadu_si128((const __m128i *)(blk + 18));
	} else {
		const __m128i raw = _mm_loadu_si128((const __m128i *)(blk + 2)), m = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
		lo = _mm_sub_epi8(_mm_and_si128(raw, m), eight);
		hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m), eight);
	}
#if VL == 16
	c[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo));
	c[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi));
#else
	c[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
	c[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
	c[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
	c[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
#endif
	return d;
}

// Position j's row of a KV block type: the head's first block.
AI const uint8_t *block_row(const tensor_kv_view *kvv, bool v, int32_t j) {
	const int32_t pt = kvv->page_tokens;
	const size_t bs = kvv->enc == TENSOR_KV_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0);
	return (v ? kvv->v : kvv->k) + (size_t)kvv->pages[j / pt] * kvv->page_stride + (size_t)(j % pt) * kvv->row_stride +
	       (size_t)(kvv->off / 32) * bs;
}

// Position j's K (or V) values of one head as floats into o; returns its scale value.
AI float att_row(const tensor_kv_view *kvv, bool v, int32_t j, int32_t D, float *o) {
	const int32_t pt = kvv->page_tokens;
	const size_t page = (size_t)kvv->pages[j / pt], slot = (size_t)(j % pt);
	const uint8_t *base = v ? kvv->v : kvv->k, *sb = v ? kvv->vs : kvv->ks;
	if (kvv->enc == TENSOR_KV_F16) {
		const uint16_t *r = (const uint16_t *)base + page * kvv->page_stride + slot * kvv->row_stride;
		for (int32_t c = 0; c < D; c += VL) v_storef(o + c, v_ldh(r + c));
		return sb ? kern_f16s_scales[sb[page * kvv->s_page_stride + slot * kvv->s_row_stride]] : 1.0f;
	}
	if (kvv->off % 32 || D % 32) return tensor_kv_row(kvv, v, j, D, o);
	const uint8_t *r = block_row(kvv, v, j);
	const size_t bs = kvv->enc == TENSOR_KV_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0);
	for (int32_t b = 0; b < D / 32; b++) {
		vf c[32 / VL];
		const vf d = v_set1f(block_codes(kvv->enc, r + (size_t)b * bs, c));
		UNROLL for (int i = 0; i < 32 / VL; i++) v_storef(o + 32 * b + VL * i, v_mul(d, c[i]));
	}
	return 1.0f;
}

// The body for nc = D / VL vectors per head (a constant for the common sizes), shaped as the
// unfused one: scores in groups of VL positions (K rows read once for every head), then per
// tile each head's running maximum, sum (lanes summed per tile, added in tile order) and
// output, whose V rows are read once per HG heads held in registers.
AI void fused_body(const float *q, int32_t nq, int32_t D, float scale, const tensor_kv_view *kvv, int32_t n_pos,
		   float *scratch, float *out, const int nc) {
	// scores, outputs, maxima and sums per head, then a tile of V rows (tensor_attn_scratch)
	float *sc = scratch, *acc = sc + (size_t)nq * TT, *mx = acc + (size_t)nq * D, *sum = mx + nq, *vtile = sum + nq;
	float kf[VL * ATT_MAXC * VL] __attribute__((aligned(64)));
	float ksc[VL] __attribute__((aligned(64))), vsc[TT * ATT_MAXC * VL / 32];
	float alpha[64];
	const int HG = nc <= 4 ? 4 : nc <= 8 ? 2 : 1;
	for (int32_t h = 0; h < nq; h++) mx[h] = -INFINITY, sum[h] = 0.0f;
	for (size_t i = 0; i < (size_t)nq * D; i++) acc[i] = 0.0f;
	for (int32_t t0 = 0; t0 < n_pos; t0 += TT) {
		const int nt = n_pos - t0 < TT ? n_pos - t0 : TT;
		for (int g0 = 0; g0 < nt; g0 += VL) {
			const int nj = nt - g0 < VL ? nt - g0 : VL;
			for (int l = 0; l < nj; l++) ksc[l] = att_row(kvv, false, t0 + g0 + l, D, kf + (size_t)l * nc * VL) * scale;
			for (int l = nj; l < VL; l++) ksc[l] = 0.0f;
			for (int32_t hq = 0; hq < nq; hq++) {
				const float *qh = q + (size_t)hq * D;
				v_storef(sc + (size_t)hq * TT + g0, v_mul(score_group(qh, kf, nj, nc), v_loadf(ksc)));
			}
		}
		// per head: the tile's maximum, the rescale of what earlier tiles summed, the weights
		for (int32_t hq = 0; hq < nq; hq++) {
			float *s = sc + (size_t)hq * TT;
			float tmx = -INFINITY;
			for (int l = 0; l < nt; l++) tmx = s[l] > tmx ? s[l] : tmx;
			alpha[hq] = 1.0f;
			if (tmx > mx[hq]) {
				alpha[hq] = (float)exp((double)mx[hq] - tmx);
				mx[hq] = tmx;
			}
			vf ps = v_zerof();
			for (int g0 = 0; g0 < nt; g0 += VL) {
				vf p = v_exp(v_sub(v_loadf(s + g0), v_set1f(mx[hq])));
				if (nt - g0 < VL) {
					float t[VL] __attribute__((aligned(64)));
					v_storef(t, p);
					for (int l = nt - g0; l < VL; l++) t[l] = 0.0f;
					p = v_loadf(t);
				}
				ps = v_add(ps, p);
				v_storef(s + g0, p);
			}
			sum[hq] = sum[hq] * alpha[hq] + v_hsum(ps);
		}
		// The tile's V rows once, for every group of heads: f16 values as floats with the row's
		// scale (f16s), block codes as floats with each block's scale; then per group of HG heads
		// the weighted rows in position order, each scale folded into its weight.
		const bool f16 = kvv->enc == TENSOR_KV_F16, blocks = !f16 && kvv->off % 32 == 0 && D % 32 == 0;
		const int nbv = blocks ? nc * VL / 32 : 1; // scales per row
		const size_t bs = kvv->enc == TENSOR_KV_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0);
		for (int l = 0; l < nt; l++) {
			float *vr = vtile + (size_t)l * nc * VL;
			const int32_t j = t0 + l, pt = kvv->page_tokens;
			if (f16) {
				const size_t page = (size_t)kvv->pages[j / pt], slot = (size_t)(j % pt);
				const uint16_t *r = (const uint16_t *)kvv->v + page * kvv->page_stride + slot * kvv->row_stride;
				UNROLL for (int c = 0; c < nc; c++) v_storef(vr + VL * c, v_ldh(r + VL * c));
				vsc[l] = kvv->vs ? kern_f16s_scales[kvv->vs[page * kvv->s_page_stride + slot * kvv->s_row_stride]] : 1.0f;
			} else if (blocks) {
				const uint8_t *r = block_row(kvv, true, j);
				for (int b2 = 0; b2 < nbv; b2++) {
					vf c[32 / VL];
					vsc[l * nbv + b2] = block_codes(kvv->enc, r + (size_t)b2 * bs, c);
					UNROLL for (int i = 0; i < 32 / VL; i++) v_storef(vr + 32 * b2 + VL * i, c[i]);
				}
			} else {
				vsc[l] = att_row(kvv, true, j, D, vr);
			}
		}
		for (int32_t h0 = 0; h0 < nq; h0 += HG) {
			const int hn = nq - h0 < HG ? nq - h0 : HG;
			vf av[4][ATT_MAXC];
			for (int a = 0; a < 4; a++)
				for (int c = 0; c < ATT_MAXC; c++) av[a][c] = v_zerof();
			UNROLL for (int a = 0; a < HG; a++) {
				if (a >= hn) break;
				const vf al = v_set1f(alpha[h0 + a]);
				UNROLL for (int c = 0; c < nc; c++) av[a][c] = v_mul(v_loadf(acc + (size_t)(h0 + a) * D + VL * c), al);
			}
			for (int l = 0; l < nt; l++) {
				vf vv[ATT_MAXC] = {0};
				UNROLL for (int c = 0; c < nc; c++) vv[c] = v_loadf(vtile + (size_t)l * nc * VL + VL * c);
				UNROLL for (int a = 0; a < HG; a++) {
					if (a >= hn) break;
					const float p = sc[(size_t)(h0 + a) * TT + l];
					if (nbv == 1) {
						const vf w = v_set1f(p * vsc[l]);
						UNROLL for (int c = 0; c < nc; c++) av[a][c] = v_fma(w, vv[c], av[a][c]);
					} else {
						UNROLL for (int c = 0; c < nc; c++) {
							const vf w = v_set1f(p * vsc[l * nbv + c * VL / 32]);
							av[a][c] = v_fma(w, vv[c], av[a][c]);
						}
					}
				}
			}
			UNROLL for (int a = 0; a < HG; a++) {
				if (a >= hn) break;
				UNROLL for (int c = 0; c < nc; c++) v_storef(acc + (size_t)(h0 + a) * D + VL * c, av[a][c]);
			}
		}
	}
	for (int32_t hq = 0; hq < nq; hq++) {
		const vf iv = v_set1f(1.0f / sum[hq]);
		for (int c = 0; c < nc; c++) v_storef(out + (size_t)hq * D + VL * c, v_mul(v_loadf(acc + (size_t)hq * D + VL * c), iv));
	}
}

static void kx_attn(const float *q, int32_t nq, int32_t D, float scale, const tensor_kv_view *kvv, int32_t n_pos,
		    float *scratch, float *out) {
	const int nc = D / VL;
	if (nq > 64) { // the per-head rescale table holds 64 heads
		kx_attn(q, 64, D, scale, kvv, n_pos, scratch, out);
		kx_attn(q + (size_t)64 * D, nq - 64, D, scale, kvv, n_pos, scratch, out + (size_t)64 * D);
		return;
	}
#ifdef KX_NARROW
	if (narrow_head(D)) {
		KX_NARROW.attn(q, nq, D, scale, kvv, n_pos, scratch, out);
		return;
	}
#endif
	if (D % VL || nc > ATT_MAXC) {
		for (int32_t hq = 0; hq < nq; hq++)
			tensor_attn(q + (size_t)hq * D, D, scale, kvv, n_pos, scratch, out + (size_t)hq * D);
		return;
	}
	if (nc == 4) fused_body(q, nq, D, scale, kvv, n_pos, scratch, out, 4);
	else if (nc == 8) fused_body(q, nq, D, scale, kvv, n_pos, scratch, out, 8);
	else fused_body(q, nq, D, scale, kvv, n_pos, scratch, out, nc);
}
#undef TT
