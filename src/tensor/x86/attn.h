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
// sizes, so the loops over a head's vectors unroll into registers. A window's positions
// lo..n_pos-1 are the only ones read, scored and summed (lo is the row's own).
AI void attn_body(const float *q, int32_t nq, int32_t D, float scale, const tensor_kv_view *kvv, int32_t n_pos,
		  float *scores, float *out, const int nc) {
	const int32_t pt = kvv->page_tokens, lo = tensor_attn_first(kvv, n_pos);
	// Scores in groups of VL positions from the first one the row sees (score_group).
	float kf[VL * ATT_MAXC * VL] __attribute__((aligned(64)));
	float ksc[VL] __attribute__((aligned(64)));
	scores += lo, n_pos -= lo;
	for (int32_t j0 = 0; j0 < n_pos; j0 += VL) {
		const int nj = n_pos - j0 < VL ? n_pos - j0 : VL;
		for (int l = 0; l < nj; l++) {
			const int32_t j = lo + j0 + l;
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
			float *dst = scores + (size_t)hq * (n_pos + lo) + j0;
			if (nj == VL) v_storef(dst, sv);
			else {
				float t[VL];
				v_storef(t, sv);
				memcpy(dst, t, (size_t)nj * sizeof(float));
			}
			if (kvv->softcap != 0.0f)
				for (int l = 0; l < nj; l++) dst[l] = tensor_softcap(dst[l], kvv->softcap);
		}
	}
	// Softmax per head: max, exp, sum in lanes (position mod VL), then one reduction.
	float inv[64];
	for (int32_t hq = 0; hq < nq; hq++) {
		float *sc = scores + (size_t)hq * (n_pos + lo);
		float mx = kvv->sinks ? kvv->sinks[hq] : -INFINITY; // a sink is a score whose value row is 0
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
		float total = v_hsum(sum) + tail;
		if (kvv->sinks) {
			float t[VL] = {0}, e[VL];
			t[0] = kvv->sinks[hq] - mx;
			v_storef(e, v_exp(v_loadf(t)));
			total += e[0];
		}
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
			const size_t page = (size_t)kvv->pages[(lo + j) / pt], slot = (size_t)((lo + j) % pt);
			const uint16_t *vr = (const uint16_t *)kvv->v + page * kvv->page_stride + slot * kvv->row_stride;
			const float vsc = kvv->vs ? kern_f16s_scales[kvv->vs[page * kvv->s_page_stride + slot * kvv->s_row_stride]] : 1.0f;
			vf vv[ATT_MAXC] = {0};
			UNROLL for (int c = 0; c < nc; c++) vv[c] = v_ldh(vr + VL * c);
			UNROLL for (int a = 0; a < HG; a++) {
				if (a >= hn) break;
				const vf p = v_set1f(scores[(size_t)(h0 + a) * (n_pos + lo) + j] * vsc);
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
		const tensor_kv_view rest = tensor_kv_head(kvv, 64);
		kx_attn_unfused(q, 64, D, scale, kvv, n_pos, scores, out);
		kx_attn_unfused(q + (size_t)64 * D, nq - 64, D, scale, &rest, n_pos, scores + (size_t)64 * n_pos, out + (size_t)64 * D);
		return;
	}
#ifdef KX_NARROW
	if (narrow_head(D)) {
		KX_NARROW.attn_unfused(q, nq, D, scale, kvv, n_pos, scores, out);
		return;
	}
#endif
	if (D % VL || nc > ATT_MAXC) {
		for (int32_t hq = 0; hq < nq; hq++) {
			const tensor_kv_view kh = tensor_kv_head(kvv, hq);
			tensor_attn_f16(q + (size_t)hq * D, D, scale, &kh, n_pos, scores + (size_t)hq * n_pos, out + (size_t)hq * D);
		}
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

// Asks for position j's K (or V) values of one head ahead of their use.
AI void att_prefetch(const tensor_kv_view *kvv, bool v, int32_t j, int32_t D) {
	const int32_t pt = kvv->page_tokens;
	const size_t page = (size_t)kvv->pages[j / pt], slot = (size_t)(j % pt);
	const uint8_t *p;
	size_t bytes;
	if (kvv->enc == TENSOR_KV_F16) {
		p = (const uint8_t *)((const uint16_t *)(v ? kvv->v : kvv->k) + page * kvv->page_stride + slot * kvv->row_stride);
		bytes = (size_t)D * 2;
	} else {
		p = block_row(kvv, v, j);
		bytes = (size_t)D / 32 * (kvv->enc == TENSOR_KV_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0));
	}
	for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 3);
}

// ---- the fused kernel: a block's queries in lanes ------------------------------------------------
// A block holds up to TENSOR_ATT_QUERIES queries (rows x heads of one KV head), lane r*nq + h
// for head h of row r, and reads the KV store once per tile of TT positions fixed by absolute
// position. Each query's figures follow one fixed sequence of float operations that no other
// lane enters: its score of position j is q[0]*k[0], then fma(q[e], k[e], s) for e in order,
// times the row's K scale times `scale`, then tensor_softcap when the view caps scores (the
// same scalar call in every set); per tile the maximum over the positions it may see,
// alpha = exp(old - new maximum) in double when it grows, p = exp(s - max) by v_exp, the
// tile's sum of p as a fixed tree over the TT slots (4 slots 16 apart summed in order, then
// halves folded 8, 4, 2, 1 apart; slots it may not see are +0), sum = sum * alpha + that, and
// its output acc * alpha + w_j v_j for its positions in order (w = p times the V row's scale);
// the result is acc / sum. A view's sinks start a lane's maximum at its head's sink logit and
// its sum at 1 (else -inf and 0). Lanes past a row's position or before its window add +0 and scale
// by 1, which change nothing, so a row's bits are the same alone, in any block, on any thread,
// in either set.
#define QBMAX (KX_ATT_ACC / 4) // query vectors per register block

typedef struct {
	int32_t D, QP;    // head size; lanes, padded to whole vectors
	float *qt;        // [D][QP] the queries, transposed
	float *sc;        // [TT][QP] scores, then weights
	float *kv;        // [TT][D] the tile's K rows, then its V rows
	float *acc;       // [Q][D] running outputs
	float *mx, *sum, *alpha, *lim; // [QP] each: running maximum, sum, this tile's rescale, positions seen
	float *first;     // [QP] the first position each lane sees (its window's start, else 0)
	float cap;        // the scores' soft cap (0: none)
	float *ks, *vs;   // [TT] the rows' K scales (times `scale`) and V scales
} att_blk;

// Scores of positions j0..j0+JB-1 for query vectors v0..v0+QB-1, each a chain over the head's
// values, scaled, and -inf where the lane may not see the position (past it, or before its window).
AI void score_block(const att_blk *b, int32_t t0, int j0, int v0, const int JB, const int QB) {
	const int32_t D = b->D, QP = b->QP;
	vf a[8][QBMAX];
	UNROLL for (int j = 0; j < JB; j++) {
		const vf k = v_set1f(b->kv[(size_t)(j0 + j) * D]);
		UNROLL for (int v = 0; v < QB; v++) a[j][v] = v_mul(v_loadf(b->qt + (size_t)(v0 + v) * VL), k);
	}
	for (int32_t e = 1; e < D; e++) {
		vf qv[QBMAX];
		UNROLL for (int v = 0; v < QB; v++) qv[v] = v_loadf(b->qt + (size_t)e * QP + (size_t)(v0 + v) * VL);
		UNROLL for (int j = 0; j < JB; j++) {
			const vf k = v_set1f(b->kv[(size_t)(j0 + j) * D + e]);
			UNROLL for (int v = 0; v < QB; v++) a[j][v] = v_fma(qv[v], k, a[j][v]);
		}
	}
	UNROLL for (int j = 0; j < JB; j++) {
		const vf ks = v_set1f(b->ks[j0 + j]), at = v_set1f((float)(t0 + j0 + j)), ninf = v_set1f(-INFINITY);
		UNROLL for (int v = 0; v < QB; v++) {
			const vf s = v_sel_lt(at, v_loadf(b->lim + (size_t)(v0 + v) * VL), v_mul(a[j][v], ks), ninf);
			v_storef(b->sc + (size_t)(j0 + j) * QP + (size_t)(v0 + v) * VL, v_sel_lt(at, v_loadf(b->first + (size_t)(v0 + v) * VL), ninf, s));
		}
	}
}

// Positions j0.. of query vectors v0..v0+QB-1: JB at a time, then one at a time.
AI void score_vecs(const att_blk *b, int32_t t0, int nt, int v0, const int QB) {
	const int JB = KX_ATT_ACC / QB > 8 ? 8 : KX_ATT_ACC / QB;
	int j = 0;
	for (; j + JB <= nt; j += JB) score_block(b, t0, j, v0, JB, QB);
	for (; j < nt; j++) score_block(b, t0, j, v0, 1, QB);
}

// A tile's scores, maxima, rescales, weights and sums for every lane (nt positions from t0).
static void tile_softmax(const att_blk *b, int32_t t0, int nt) {
	const int32_t QP = b->QP, QV = QP / VL;
	for (int v0 = 0; v0 < QV; v0 += QBMAX) {
		const int qb = QV - v0 < QBMAX ? QV - v0 : QBMAX;
		if (qb == 1) score_vecs(b, t0, nt, v0, 1);
#if QBMAX >= 2
		else if (qb == 2) score_vecs(b, t0, nt, v0, 2);
#endif
#if QBMAX >= 4
		else if (qb == 3) score_vecs(b, t0, nt, v0, 3);
		else score_vecs(b, t0, nt, v0, 4);
#endif
	}
	// the soft cap, one scalar call per score a lane sees (the same function in every set)
	if (b->cap != 0.0f)
		for (int j = 0; j < nt; j++)
			for (int32_t l = 0; l < QP; l++) {
				float *s = b->sc + (size_t)j * QP + l;
				if (*s != -INFINITY) *s = tensor_softcap(*s, b->cap);
			}
	for (int32_t v = 0; v < QV; v++) {
		float *sc = b->sc + (size_t)v * VL;
		const vf lim = v_loadf(b->lim + (size_t)v * VL), first = v_loadf(b->first + (size_t)v * VL);
		vf tmx = v_set1f(-INFINITY);
		for (int j = 0; j < nt; j++) tmx = v_max(tmx, v_loadf(sc + (size_t)j * QP));
		float tm[VL];
		v_storef(tm, tmx);
		for (int l = 0; l < VL; l++) {
			float *mx = b->mx + (size_t)v * VL + l, *al = b->alpha + (size_t)v * VL + l;
			*al = 1.0f;
			if (tm[l] > *mx) {
				*al = (float)exp((double)*mx - tm[l]);
				*mx = tm[l];
			}
		}
		const vf m = v_loadf(b->mx + (size_t)v * VL), zero = v_zerof();
		for (int j = 0; j < nt; j++) {
			float *s = sc + (size_t)j * QP;
			const vf at = v_set1f((float)(t0 + j)), p = v_sel_lt(at, lim, v_exp(v_sub(v_loadf(s), m)), zero);
			v_storef(s, v_sel_lt(at, first, zero, p));
		}
		// the tile's sum: slots l, l+16, l+32, l+48 in order, then halves folded
		vf t[16];
		for (int l = 0; l < 16; l++) {
			t[l] = l < nt ? v_loadf(sc + (size_t)l * QP) : zero;
			for (int k = l + 16; k < TT; k += 16) t[l] = v_add(t[l], k < nt ? v_loadf(sc + (size_t)k * QP) : zero);
		}
		for (int h = 8; h >= 1; h /= 2)
			for (int l = 0; l < h; l++) t[l] = v_add(t[l], t[l + h]);
		float *sum = b->sum + (size_t)v * VL;
		v_storef(sum, v_add(v_mul(v_loadf(sum), v_loadf(b->alpha + (size_t)v * VL)), t[0]));
	}
}

// Row r's heads: outputs rescaled, then its nt weighted V rows of the tile in position order,
// HG heads at a time in registers (nc a constant, so they stay there).
AI void tile_pv_nc(const att_blk *b, int32_t r, int32_t nq, int nt, const int nc) {
	const int HG = nc <= 4 ? 4 : nc <= 8 ? 2 : 1;
	const int32_t D = b->D, QP = b->QP;
	for (int32_t h0 = 0; h0 < nq; h0 += HG) {
		const int hn = nq - h0 < HG ? nq - h0 : HG;
		const int32_t l0 = r * nq + h0;
		vf av[4][ATT_MAXC];
		UNROLL for (int a = 0; a < HG; a++) {
			const vf al = v_set1f(a < hn ? b->alpha[l0 + a] : 0.0f);
			UNROLL for (int c = 0; c < nc; c++)
				av[a][c] = a < hn ? v_mul(v_loadf(b->acc + (size_t)(l0 + a) * D + VL * c), al) : v_zerof();
		}
		for (int j = 0; j < nt; j++) {
			vf vv[ATT_MAXC];
			UNROLL for (int c = 0; c < nc; c++) vv[c] = v_loadf(b->kv + (size_t)j * D + VL * c);
			const float *w = b->sc + (size_t)j * QP + l0;
			UNROLL for (int a = 0; a < HG; a++) {
				if (a >= hn) break;
				const vf wv = v_set1f(w[a]);
				UNROLL for (int c = 0; c < nc; c++) av[a][c] = v_fma(wv, vv[c], av[a][c]);
			}
		}
		UNROLL for (int a = 0; a < HG; a++) {
			if (a >= hn) break;
			UNROLL for (int c = 0; c < nc; c++) v_storef(b->acc + (size_t)(l0 + a) * D + VL * c, av[a][c]);
		}
	}
}

#define PV_NC(n) \
	case n: tile_pv_nc(b, r, nq, nt, n); break;
static void tile_pv(const att_blk *b, int32_t r, int32_t nq, int nt, int nc) {
	switch (nc) {
		PV_NC(1) PV_NC(2) PV_NC(3) PV_NC(4) PV_NC(5) PV_NC(6) PV_NC(7) PV_NC(8)
		PV_NC(9) PV_NC(10) PV_NC(11) PV_NC(12) PV_NC(13) PV_NC(14) PV_NC(15) PV_NC(16)
	}
}
#undef PV_NC

// One block of nr rows (nr * nq lanes at most the scratch's), nc = D / VL vectors per head.
AI void att_block(const float *q, size_t qs, const int32_t *ridx, int32_t nr, int32_t nq, int32_t D, float scale,
		  const tensor_kv_view *kvv, const int32_t *n_pos, float *scratch, float *out, size_t os, const int nc) {
	const int32_t Q = nr * nq, QP = (Q + VL - 1) / VL * VL;
	att_blk b = {.D = D, .QP = QP, .qt = scratch};
	b.sc = b.qt + (size_t)D * QP, b.kv = b.sc + (size_t)TT * QP, b.acc = b.kv + (size_t)TT * D;
	b.mx = b.acc + (size_t)Q * D, b.sum = b.mx + QP, b.alpha = b.sum + QP, b.lim = b.alpha + QP;
	b.first = b.lim + QP, b.ks = b.first + QP, b.vs = b.ks + TT, b.cap = kvv->softcap;
	int32_t maxp = 0, minp = INT32_MAX; // the positions some row sees: minp..maxp-1
	for (int32_t i = 0; i < nr; i++) {
		const float *qr = q + (size_t)(ridx ? ridx[i] : i) * qs;
		const int32_t lo = tensor_attn_first(kvv, n_pos[i]);
		for (int32_t h = 0; h < nq; h++)
			for (int32_t e = 0; e < D; e++) b.qt[(size_t)e * QP + i * nq + h] = qr[(size_t)h * D + e];
		for (int32_t h = 0; h < nq; h++) b.lim[i * nq + h] = (float)n_pos[i], b.first[i * nq + h] = (float)lo;
		maxp = n_pos[i] > maxp ? n_pos[i] : maxp;
		minp = lo < minp ? lo : minp;
	}
	for (int32_t l = Q; l < QP; l++) {
		for (int32_t e = 0; e < D; e++) b.qt[(size_t)e * QP + l] = 0.0f;
		b.lim[l] = 0.0f, b.first[l] = 0.0f;
	}
	for (int32_t l = 0; l < QP; l++) b.mx[l] = -INFINITY, b.sum[l] = 0.0f;
	// a sink starts a lane's online softmax as a score seen before position 0, whose value row is 0
	for (int32_t l = 0; kvv->sinks && l < Q; l++) b.mx[l] = kvv->sinks[l % nq], b.sum[l] = 1.0f;
	memset(b.acc, 0, (size_t)Q * D * sizeof(float));
	// Tiles wholly before every row's window add +0 and rescale by 1: they are not walked, and
	// positions before minp are never read (zeros stand in for them, selected away all the same).
	for (int32_t t0 = minp / TT * TT; t0 < maxp; t0 += TT) {
		const int nt = maxp - t0 < TT ? maxp - t0 : TT;
		// this tile's V rows and the next tile's K rows are asked for while the K rows convert
		for (int j = 0; j < nt; j++) {
			if (t0 + j < minp) {
				memset(b.kv + (size_t)j * D, 0, (size_t)D * sizeof(float));
				b.ks[j] = 0.0f;
				continue;
			}
			att_prefetch(kvv, true, t0 + j, D);
			if (t0 + TT + j < maxp) att_prefetch(kvv, false, t0 + TT + j, D);
			b.ks[j] = att_row(kvv, false, t0 + j, D, b.kv + (size_t)j * D) * scale;
		}
		tile_softmax(&b, t0, nt);
		for (int j = 0; j < nt; j++) {
			if (t0 + j < minp) {
				memset(b.kv + (size_t)j * D, 0, (size_t)D * sizeof(float));
				b.vs[j] = 0.0f;
				continue;
			}
			b.vs[j] = att_row(kvv, true, t0 + j, D, b.kv + (size_t)j * D);
		}
		// the weights with the V rows' scales (1 but for f16s)
		for (int j = 0; j < nt; j++) {
			const vf vsc = v_set1f(b.vs[j]);
			for (int32_t v = 0; v < QP; v += VL) v_storef(b.sc + (size_t)j * QP + v, v_mul(v_loadf(b.sc + (size_t)j * QP + v), vsc));
		}
		for (int32_t i = 0; i < nr; i++)
			if (n_pos[i] > t0 && b.first[i * nq] < (float)(t0 + nt)) tile_pv(&b, i, nq, n_pos[i] - t0 < nt ? n_pos[i] - t0 : nt, nc);
	}
	for (int32_t i = 0; i < nr; i++) {
		float *o = out + (size_t)(ridx ? ridx[i] : i) * os;
		for (int32_t h = 0; h < nq; h++) {
			const int32_t l = i * nq + h;
			const vf iv = v_set1f(1.0f / b.sum[l]);
			for (int c = 0; c < nc; c++) v_storef(o + (size_t)h * D + VL * c, v_mul(v_loadf(b.acc + (size_t)l * D + VL * c), iv));
		}
	}
}

static void kx_attn(const float *q, size_t qs, const int32_t *ridx, int32_t nr, int32_t nq, int32_t D, float scale,
		    const tensor_kv_view *kvv, const int32_t *n_pos, float *scratch, float *out, size_t os) {
	const int nc = D / VL;
#ifdef KX_NARROW
	if (narrow_head(D)) {
		KX_NARROW.attn(q, qs, ridx, nr, nq, D, scale, kvv, n_pos, scratch, out, os);
		return;
	}
#endif
	if (D % VL || nc > ATT_MAXC) {
		for (int32_t i = 0; i < nr; i++) {
			const size_t r = (size_t)(ridx ? ridx[i] : i);
			for (int32_t h = 0; h < nq; h++) {
				const tensor_kv_view kh = tensor_kv_head(kvv, h);
				tensor_attn(q + r * qs + (size_t)h * D, D, scale, &kh, n_pos[i], scratch, out + r * os + (size_t)h * D);
			}
		}
		return;
	}
	// blocks of the rows the scratch's lanes hold
	const int32_t rb = tensor_attn_block_rows(nq);
	for (int32_t i0 = 0; i0 < nr; i0 += rb) {
		const int32_t n = nr - i0 < rb ? nr - i0 : rb;
		const int32_t *ri = ridx ? ridx + i0 : NULL;
		const float *qb = ridx ? q : q + (size_t)i0 * qs;
		float *ob = ridx ? out : out + (size_t)i0 * os;
		if (nc == 4) att_block(qb, qs, ri, n, nq, D, scale, kvv, n_pos + i0, scratch, ob, os, 4);
		else if (nc == 8) att_block(qb, qs, ri, n, nq, D, scale, kvv, n_pos + i0, scratch, ob, os, 8);
		else att_block(qb, qs, ri, n, nq, D, scale, kvv, n_pos + i0, scratch, ob, os, nc);
	}
}
#undef QBMAX
#undef TT
