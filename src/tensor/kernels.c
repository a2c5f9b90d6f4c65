// tensor/kernels: kernel-set dispatch (CPUID once, or the set the caller forces), weight
// packing for a set, and the threaded matmul driver: activations prepared once per call,
// then threads claim tiles of outputs — never a share of k — so the split leaves every sum alone.
#include "tensor/kern.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

bool kern_cpu_avx2(void) {
#if defined(__x86_64__)
	__builtin_cpu_init();
	// F16C from CPUID leaf 1 (ECX bit 29): clang before 15 has no "f16c" for __builtin_cpu_supports
	unsigned a, b, c = 0, d;
	const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
	return false;
#endif
}

bool kern_cpu_avx512(void) {
#if defined(__x86_64__)
	__builtin_cpu_init();
	return kern_cpu_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
	       __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bf16");
#else
	return false;
#endif
}

// Portable first, best last. The fuzz build has the reference set alone: it fuzzes parsers, not kernels.
#ifdef LANES_KERNELS_REF_ONLY
static const tensor_kernels *const all_sets[] = {&tensor_kernels_ref};
#else
static const tensor_kernels *const all_sets[] = {&tensor_kernels_ref, &tensor_kernels_avx2, &tensor_kernels_avx512};
#endif
#define N_SETS (int)(sizeof all_sets / sizeof all_sets[0])

static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static _Atomic(const tensor_kernels *) default_set;

const tensor_kernels *tensor_kernels_find(const char *name) {
	for (int i = 0; i < N_SETS; i++)
		if (name && !strcmp(all_sets[i]->name, name)) return all_sets[i]->cpu_ok() ? all_sets[i] : NULL;
	return NULL;
}

static const tensor_kernels *forced_set; // named by tensor_kernels_force before first use
static const char *forced_by;

static void choose_default(void) {
	const tensor_kernels *best = &tensor_kernels_ref;
	for (int i = 0; i < N_SETS; i++)
		if (all_sets[i]->cpu_ok()) best = all_sets[i];
	if (forced_set) best = forced_set;
	atomic_store(&default_set, best);
	LOG_INFO("tensor", "kernels: %s%s%s%s", best->name, forced_set ? " (" : "", forced_set ? forced_by : "", forced_set ? ")" : "");
}

int tensor_kernels_force(const char *name, const char *by) {
	bool known = false;
	for (int i = 0; i < N_SETS; i++) known |= name && !strcmp(all_sets[i]->name, name);
	if (!known) return LANES_EINVAL;
	const tensor_kernels *ks = tensor_kernels_find(name);
	if (!ks) return LANES_EUNSUPPORTED;
	forced_set = ks;
	forced_by = by ? by : "forced";
	return LANES_OK;
}

static _Atomic int default_act; // enum tensor_act of the default set

const tensor_kernels *tensor_kernels_default(void) {
	pthread_once(&default_once, choose_default);
	return tensor_kernels_with_act(atomic_load(&default_set), (enum tensor_act)atomic_load(&default_act));
}

int tensor_kernels_select_act(enum tensor_act act) {
	if ((unsigned)act >= TENSOR_ACT_COUNT) return LANES_EINVAL;
	atomic_store(&default_act, (int)act);
	return LANES_OK;
}

const tensor_kernels *tensor_kernels_with_act(const tensor_kernels *ks, enum tensor_act act) {
	return ks->act == act ? ks : ks->twin;
}

enum tensor_act tensor_kernels_act(const tensor_kernels *ks) { return ks->act; }

static const char *const act_names[TENSOR_ACT_COUNT] = {[TENSOR_ACT_Q16] = "q16", [TENSOR_ACT_Q8] = "q8"};

const char *tensor_act_name(enum tensor_act act) { return (unsigned)act < TENSOR_ACT_COUNT ? act_names[act] : "?"; }

int tensor_act_parse(const char *name, enum tensor_act *out) {
	for (int a = 0; a < TENSOR_ACT_COUNT; a++)
		if (name && !strcmp(name, act_names[a])) {
			*out = (enum tensor_act)a;
			return LANES_OK;
		}
	return LANES_EINVAL;
}

int tensor_kernels_select(const char *name) {
	pthread_once(&default_once, choose_default);
	for (int i = 0; i < N_SETS; i++) {
		if (!name || strcmp(all_sets[i]->name, name)) continue;
		if (!all_sets[i]->cpu_ok()) return LANES_EUNSUPPORTED;
		atomic_store(&default_set, all_sets[i]);
		return LANES_OK;
	}
	return LANES_EINVAL;
}

const char *tensor_kernels_name(const tensor_kernels *ks) { return ks ? ks->name : "?"; }

int tensor_kernels_available(const char **names, int cap) {
	int n = 0;
	for (int i = 0; i < N_SETS; i++)
		if (all_sets[i]->cpu_ok()) {
			if (n < cap) names[n] = all_sets[i]->name;
			n++;
		}
	return n;
}

// ---- packing ----------------------------------------------------------------------------
size_t tensor_pack_bytes(const tensor_kernels *ks, uint32_t type, int64_t rows, int64_t k, int64_t n_mat) {
	if (!ks->pack_bytes || !tensor_traits_of(type) || rows <= 0 || k <= 0 || n_mat <= 0) return 0;
	uint64_t one = ks->pack_bytes(type, rows, k), all;
	if (!one || !ck_mul(one, (uint64_t)n_mat, &all) || all > SIZE_MAX / 2) return 0;
	return (size_t)all;
}

bool tensor_compact_ok(const tensor_kernels *ks, uint32_t type) {
	return ks->compact && type < GGUF_T_COUNT && ks->compact(type);
}

size_t tensor_compact_bytes(const tensor_kernels *ks, uint32_t type, int64_t rows, int64_t k, int64_t n_mat) {
	const tensor_traits *tt = tensor_traits_of(type);
	if (!tensor_compact_ok(ks, type) || !tt || rows <= 0 || k <= 0 || n_mat <= 0 || k % tt->block ||
	    tt->bytes % 2)
		return 0;
	uint64_t b;
	if (!ck_mul((uint64_t)(rows + ks->tile - 1) / (uint64_t)ks->tile * (uint64_t)ks->tile, tensor_row_bytes(type, k), &b) ||
	    !ck_mul(b, (uint64_t)n_mat, &b) || b > SIZE_MAX / 2)
		return 0;
	return (size_t)b;
}

// Tiles [t0, t1) of one matrix into its compact layout: tile t's block b at (t nb + b) T bs,
// and there 2-byte unit u of row r at (u T + r) 2 (T rows a tile, bs bytes a block).
static void compact_tiles(const tensor_mat *m, const uint8_t *src, uint8_t *dst, int64_t t0, int64_t t1) {
	const int64_t T = m->ks->tile, bs = (int64_t)tensor_traits_of(m->type)->bytes;
	const int64_t nb = (int64_t)m->row_bytes / bs;
	for (int64_t t = t0; t < t1; t++)
		for (int64_t b = 0; b < nb; b++) {
			uint8_t *o = dst + (size_t)((t * nb + b) * T * bs);
			for (int64_t r = 0; r < T; r++) {
				const int64_t row = t * T + r;
				const uint8_t *in = src + (size_t)row * m->row_bytes + (size_t)(b * bs);
				for (int64_t u = 0; u < bs / 2; u++) {
					uint8_t *q = o + (size_t)((u * T + r) * 2);
					if (row < m->rows) memcpy(q, in + 2 * u, 2);
					else memset(q, 0, 2);
				}
			}
		}
}

typedef struct {
	const tensor_mat *m;
	const uint8_t *src;
	uint8_t *dst;
	int64_t tiles; // per matrix
} pack_job;

static void pack_task(void *arg, int ith, int nth) {
	const pack_job *j = arg;
	const int64_t total = j->tiles * j->m->n_mat;
	const int64_t a = total * ith / nth, b = total * (ith + 1) / nth;
	for (int64_t mat = a / j->tiles; mat < j->m->n_mat && mat * j->tiles < b; mat++) {
		int64_t t0 = a - mat * j->tiles, t1 = b - mat * j->tiles;
		t0 = t0 < 0 ? 0 : t0;
		t1 = t1 > j->tiles ? j->tiles : t1;
		if (t0 >= t1) continue;
		const uint8_t *src = j->src + (size_t)mat * j->m->row_bytes * (size_t)j->m->rows;
		uint8_t *dst = j->dst + (size_t)mat * j->m->mat_bytes;
		if (j->m->compact) compact_tiles(j->m, src, dst, t0, t1);
		else j->m->ks->pack(j->m->type, src, j->m->row_bytes, j->m->rows, j->m->k, dst, t0, t1);
	}
}

// Fills m's copy at dst from src, tiles split across pool's threads.
static void pack_run(const tensor_mat *m, const void *src, void *dst, base_pool *pool) {
	pack_job j = {m, src, dst, (m->rows + m->ks->tile - 1) / m->ks->tile};
	if (pool && j.tiles * m->n_mat > 1) base_pool_run(pool, pack_task, &j);
	else pack_task(&j, 0, 1);
}

void tensor_mat_init(tensor_mat *m, const tensor_kernels *ks, uint32_t type, int64_t rows, int64_t k,
		     int64_t n_mat, const void *src, void *dst, base_pool *pool) {
	*m = (tensor_mat){.ks = ks, .type = type, .rows = rows, .k = k, .n_mat = n_mat, .data = src,
			  .row_bytes = tensor_row_bytes(type, k)};
	m->mat_bytes = m->row_bytes * (size_t)rows;
	if (!dst) return;
	LANES_ASSERT(ks->pack && ks->pack_bytes);
	m->mat_bytes = ks->pack_bytes(type, rows, k);
	m->data = dst;
	m->packed = true;
	pack_run(m, src, dst, pool);
}

void tensor_mat_init_compact(tensor_mat *m, const tensor_kernels *ks, uint32_t type, int64_t rows, int64_t k,
			     int64_t n_mat, const void *src, void *dst, base_pool *pool) {
	*m = (tensor_mat){.ks = ks, .type = type, .rows = rows, .k = k, .n_mat = n_mat, .data = dst,
			  .row_bytes = tensor_row_bytes(type, k), .packed = true, .compact = true};
	LANES_ASSERT(tensor_compact_bytes(ks, type, rows, k, n_mat));
	m->mat_bytes = tensor_compact_bytes(ks, type, rows, k, 1);
	pack_run(m, src, dst, pool);
}

// ---- the matmul driver ---------------------------------------------------------------------
#define MAX_MATS 8

typedef struct {
	int nw;
	const tensor_mat *const *ws;
	const int64_t *mats;
	const float *x;
	int64_t n, k;
	float *const *ys;
	const tensor_mm_opts *o;
	enum kern_act act;
	bool prep;         // rows are made or quantized before the dot products
	void *xa;          // prepared activations (KERN_ACT_Q8), else x
	size_t xa_stride;  // bytes between prepared rows
	int64_t first[MAX_MATS + 1]; // first global tile of each matrix
	int64_t chunk_div; // a claim takes the tiles left over this, at least one
	atomic_llong prep_next, prep_done; // activation rows claimed, and prepared
	atomic_llong next; // next tile to claim
} mm_job;

// Multiply-adds of a matmul below which it runs on the caller alone.
#define MM_POOL_MIN (1 << 19)

// Rows of activations prepared per claim.
#define PREP_ROWS 4

static void mm_run(void *arg, int ith, int nth) {
	mm_job *j = arg;
	if (j->prep) {
		// Threads claim rows to make and prepare, then wait for them all (base_pool_wait).
		const tensor_kernels *ks = j->ws[0]->ks;
		for (;;) {
			const int64_t r0 = atomic_fetch_add(&j->prep_next, PREP_ROWS);
			if (r0 >= j->n) break;
			const int64_t r1 = r0 + PREP_ROWS < j->n ? r0 + PREP_ROWS : j->n;
			for (int64_t r = r0; r < r1; r++) {
				if (j->o && j->o->make_row) j->o->make_row(j->o->arg, r);
				if (j->act == KERN_ACT_Q8)
					ks->act_q8(j->x + r * j->k, j->k, (kern_q8 *)((uint8_t *)j->xa + (size_t)r * j->xa_stride));
			}
			atomic_fetch_add(&j->prep_done, r1 - r0);
		}
		base_pool_wait(&j->prep_done, j->n);
	}
	if (j->o && j->o->pre) j->o->pre(j->o->hook_arg, ith);
	const int64_t total = j->first[j->nw];
	const bool add = j->o && j->o->add;
	int64_t c0 = atomic_load(&j->next);
	for (;;) {
		if (c0 >= total) break;
		// Claims shrink as tiles run out: long runs at first, then small ones that even out
		// threads a busy machine slows unevenly.
		const int64_t take = (total - c0) / j->chunk_div;
		const int64_t c1 = take > 1 ? c0 + take : c0 + 1;
		if (!atomic_compare_exchange_weak(&j->next, &c0, c1)) continue;
		for (int i = 0; i < j->nw; i++) {
			const int64_t a = c0 > j->first[i] ? c0 : j->first[i], b = c1 < j->first[i + 1] ? c1 : j->first[i + 1];
			if (a >= b) continue;
			const tensor_mat *w = j->ws[i];
			const int tile = w->ks->tile;
			const int64_t o0 = (a - j->first[i]) * tile, o1 = (b - j->first[i]) * tile;
			w->ks->matmul(w, (const uint8_t *)w->data + (size_t)j->mats[i] * w->mat_bytes, j->xa, j->xa_stride, j->n,
				      j->ys[i], w->rows, o0, o1 < w->rows ? o1 : w->rows, add);
			if (j->o && j->o->post) j->o->post(j->o->hook_arg, ith, i, o0, o1 < w->rows ? o1 : w->rows);
		}
		c0 = atomic_load(&j->next);
	}
	(void)ith, (void)nth;
}

size_t tensor_matmul_scratch(const tensor_kernels *ks, int64_t n, int64_t k) {
	return (size_t)n * (size_t)(k / 32) * ks->act_bytes + 64;
}

void tensor_matmuls(base_pool *pool, int nw, const tensor_mat *const *ws, const int64_t *mats, const float *x,
		    int64_t n, float *const *ys) {
	tensor_matmuls_opts(pool, nw, ws, mats, x, n, ys, NULL);
}

void tensor_matmuls_opts(base_pool *pool, int nw, const tensor_mat *const *ws, const int64_t *mats, const float *x,
			 int64_t n, float *const *ys, const tensor_mm_opts *o) {
	LANES_ASSERT(nw >= 1 && nw <= MAX_MATS);
	if (n <= 0) return;
	const tensor_kernels *ks = ws[0]->ks;
	mm_job j = {.nw = nw, .ws = ws, .mats = mats, .x = x, .n = n, .k = ws[0]->k, .ys = ys, .o = o};
	j.act = ks->act_kind(ws[0]->type);
	for (int i = 0; i < nw; i++) {
		LANES_ASSERT(ws[i]->ks == ks && ws[i]->k == j.k);
		if (ks->act_kind(ws[i]->type) != j.act) { // inputs prepared differently: one pass each
			LANES_ASSERT(!o || (!o->make_row && !o->pre && !o->post));
			for (int t = 0; t < nw; t++) tensor_matmuls_opts(pool, 1, ws + t, mats + t, x, n, ys + t, o);
			return;
		}
		j.first[i + 1] = j.first[i] + (ws[i]->rows + ks->tile - 1) / ks->tile;
	}
	void *buf = NULL;
	if (j.act == KERN_ACT_Q8) {
		j.xa_stride = (size_t)(j.k / 32) * ks->act_bytes;
		const size_t need = tensor_matmul_scratch(ks, n, j.k);
		void *at = o && o->scratch && o->scratch_bytes >= need ? o->scratch : (buf = malloc(need));
		LANES_ASSERT(at);
		j.xa = (void *)(((uintptr_t)at + 63) & ~(uintptr_t)63);
	} else {
		j.xa = (void *)x;
		j.xa_stride = (size_t)j.k * sizeof(float);
	}
	j.prep = j.act == KERN_ACT_Q8 || (o && o->make_row);
	const int nth = base_pool_threads(pool);
	const int64_t total = j.first[nw];
	j.chunk_div = (int64_t)nth * 3;
	atomic_init(&j.prep_next, 0);
	atomic_init(&j.prep_done, 0);
	atomic_init(&j.next, 0);
	// Work below a few microseconds costs less alone than a handoff to the pool's threads.
	const double work = (double)(j.first[nw] * ks->tile) * (double)j.k * (double)n;
	if (nth > 1 && (total > 1 || n > 1) && work >= MM_POOL_MIN) base_pool_run(pool, mm_run, &j);
	else mm_run(&j, 0, 1);
	free(buf);
}

void tensor_matmul_part(const tensor_mat *w, int64_t mat, const float *x, int64_t ldx, int64_t n, float *y,
			int64_t ldy, int64_t o0, int64_t o1, void *scratch, bool add) {
	const tensor_kernels *ks = w->ks;
	LANES_ASSERT(o0 >= 0 && o0 % ks->tile == 0 && ldx >= w->k && ldy >= w->rows);
	if (o1 > w->rows) o1 = w->rows;
	if (n <= 0 || o0 >= o1) return;
	const void *xa = x;
	size_t xs = (size_t)ldx * sizeof(float);
	if (ks->act_kind(w->type) == KERN_ACT_Q8) {
		uint8_t *a = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
		xs = (size_t)(w->k / 32) * ks->act_bytes;
		for (int64_t r = 0; r < n; r++) ks->act_q8(x + r * ldx, w->k, (kern_q8 *)(a + (size_t)r * xs));
		xa = a;
	}
	ks->matmul(w, (const uint8_t *)w->data + (size_t)mat * w->mat_bytes, xa, xs, n, y, ldy, o0, o1, add);
}

// ---- the other kernels of a set -------------------------------------------------------------
void tensor_k_rmsnorm(const tensor_kernels *ks, const float *x, const float *w, int64_t n, float eps, float *y) {
	ks->rmsnorm(x, w, n, eps, y);
}

void tensor_k_f32_rows(const tensor_kernels *ks, uint32_t type, const void *src, float *dst, int64_t n) {
	ks->f32_rows(type, src, dst, n);
}

void tensor_k_f32_t16(const tensor_kernels *ks, const float *w, int64_t ldw, int64_t kn, float *wt) {
	ks->f32_t16(w, ldw, kn, wt);
}

void tensor_k_f32_fwd(const tensor_kernels *ks, const float *wt, int64_t kn, const float *x, int64_t ldx, int64_t n,
		      float *y) {
	ks->f32_fwd(wt, kn, x, ldx, n, y);
}

void tensor_k_f32_bwd(const tensor_kernels *ks, const float *w, int64_t ldw, int64_t nr, int64_t kn, const float *dy,
		      int64_t ldy, int64_t n, float *dx, int64_t ldx) {
	ks->f32_bwd(w, ldw, nr, kn, dy, ldy, n, dx, ldx);
}

void tensor_k_swiglu(const tensor_kernels *ks, const float *g, const float *u, float *out, int64_t n) {
	ks->swiglu(g, u, out, n);
}

void tensor_k_softcap_rows(const tensor_kernels *ks, float *x, int64_t n, float cap) { ks->softcap_rows(x, n, cap); }

void tensor_k_swiglu_oai(const tensor_kernels *ks, const float *g, const float *u, float *out, int64_t n) {
	ks->swiglu_oai(g, u, out, n);
}

void tensor_k_geglu(const tensor_kernels *ks, const float *g, const float *u, float *out, int64_t n) {
	ks->geglu(g, u, out, n);
}

uint8_t tensor_k_f16s_encode(const tensor_kernels *ks, const float *x, int32_t n, uint16_t *h) {
	return ks->f16s_encode(x, n, h);
}

void tensor_k_quantize_row(const tensor_kernels *ks, uint32_t type, const float *x, void *dst, int64_t n) {
	if (ks->quant_row) ks->quant_row(type, x, dst, n);
	else tensor_traits_of(type)->from_f32(x, dst, n);
}

void tensor_k_attn(const tensor_kernels *ks, const float *q, int32_t nq, int32_t head_dim, float scale,
		   const tensor_kv_view *kvv, int32_t n_pos, float *scratch, float *out) {
	ks->attn(q, 0, NULL, 1, nq, head_dim, scale, kvv, &n_pos, scratch, out, 0);
}

void tensor_k_attn_rows(const tensor_kernels *ks, const float *q, size_t q_stride, const int32_t *ridx, int32_t nr,
			int32_t nq, int32_t head_dim, float scale, const tensor_kv_view *kvv, const int32_t *n_pos,
			float *scratch, float *out, size_t o_stride) {
	ks->attn(q, q_stride, ridx, nr, nq, head_dim, scale, kvv, n_pos, scratch, out, o_stride);
}

void tensor_k_attn_unfused(const tensor_kernels *ks, const float *q, int32_t nq, int32_t head_dim, float scale,
			   const tensor_kv_view *kvv, int32_t n_pos, float *scores, float *out) {
	ks->attn_unfused(q, nq, head_dim, scale, kvv, n_pos, scores, out);
}
