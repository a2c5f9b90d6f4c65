// tensor/x86/attn: attention over the paged KV store, written once over the vector
// vocabulary of kernels_avx2.c and kernels_avx512.c, which include it after impl.h.
// ---- attention over the paged f16 store ---------------------------------------------------------
#define ATT_MAXC 16 // head_dim / VL at most

// The body for nc = D / VL vectors per head; called with nc a constant for the common head
// sizes, so the loops over a head's vectors unroll into registers.
AI void attn_body(const float *q, int32_t nq, int32_t D, float scale, const tensor_kv_view *kvv, int32_t n_pos,
		  float *scores, float *out, const int nc) {
	const int32_t pt = kvv->page_tokens;
	// Scores in groups of VL positions fixed by absolute position: each score's products are
	// summed in lanes over the head's values, then VL such sums reduced side by side in one
	// fixed tree (v_hsum_lanes), so a score never depends on its neighbours or on n_pos.
	float kf[VL * ATT_MAXC * VL] __attribute__((aligned(64)));
	float ksc[VL] __attribute__((aligned(64)));
	for (int32_t j0 = 0; j0 < n_pos; j0 += VL) {
		const int nj = n_pos - j0 < VL ? n_pos - j0 : VL;
		for (int l = 0; l < nj; l++) {
			const int32_t j = j0 + l;
			const size_t page = (size_t)kvv->pages[j / pt], slot = (size_t)(j % pt);
			const uint16_t *kr = kvv->k + page * kvv->page_stride + slot * kvv->row_stride;
			for (int c = 0; c < nc; c++) v_storef(kf + (size_t)(l * nc + c) * VL, v_ldh(kr + VL * c));
			ksc[l] = kvv->ks ? kern_f16s_scales[kvv->ks[page * kvv->s_page_stride + slot * kvv->s_row_stride]] * scale
					 : scale;
		}
		for (int l = nj; l < VL; l++) ksc[l] = 0.0f;
		for (int32_t hq = 0; hq < nq; hq++) {
			const float *qh = q + (size_t)hq * D;
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
			const vf sv = v_mul(v_hsum_lanes(part), v_loadf(ksc));
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
			const uint16_t *vr = kvv->v + page * kvv->page_stride + slot * kvv->row_stride;
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

static void kx_attn(const float *q, int32_t nq, int32_t D, float scale, const tensor_kv_view *kvv, int32_t n_pos,
		    float *scores, float *out) {
	const int nc = D / VL;
	if (nq > 64) { // the 1/sum table holds 64 heads
		kx_attn(q, 64, D, scale, kvv, n_pos, scores, out);
		kx_attn(q + (size_t)64 * D, nq - 64, D, scale, kvv, n_pos, scores + (size_t)64 * n_pos, out + (size_t)64 * D);
		return;
	}
	if (D % VL || nc > ATT_MAXC) {
		for (int32_t hq = 0; hq < nq; hq++)
			tensor_attn_f16(q + (size_t)hq * D, D, scale, kvv, n_pos, scores + (size_t)hq * n_pos, out + (size_t)hq * D);
		return;
	}
	if (nc == 4) attn_body(q, nq, D, scale, kvv, n_pos, scores, out, 4);
	else if (nc == 8) attn_body(q, nq, D, scale, kvv, n_pos, scores, out, 8);
	else attn_body(q, nq, D, scale, kvv, n_pos, scores, out, nc);
}
