// tests: the memory planner — size parsing, the plan's arithmetic and lane-choice rules, its
// reasons, and that the metadata-only model description equals a loaded model's figures
// without reading tensor data (a copy with its data zeroed, a buffer whose data is unreadable).
#include "gguf/gguf.h"
#include "model/model.h"
#include "plan/plan.h"
#include "t.h"
#include "gen.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

static void test_sizes(void) {
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
		{"0", 0},
		{"123", 123},
		{"123B", 123},
		{"123 b", 123},
		{"512KiB", 512ull << 10},
		{"512kib", 512ull << 10},
		{"3MiB", 3ull << 20},
		{"2GiB", 2ull << 30},
		{"2 GiB", 2ull << 30},
		{"1.5GiB", 3ull << 29},
		{"1TiB", 1ull << 40},
		{"0.5KiB", 512},
		{"4KB", 4000},
		{"4kb", 4000},
		{"300MB", 300000000ull},
		{"2GB", 2000000000ull},
		{"2.5GB", 2500000000ull},
		{"1.25 TB", 1250000000000ull},
		{"1.5", 2},
		{"0.25MiB", 1ull << 18},
		{"7.", 7},
		{".5KiB", 512},
		{"9223372036854775807", 9223372036854775807ull},
		{"8388607TiB", 8388607ull << 40},
	};
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		uint64_t v = 12345;
		const int rc = plan_parse_size(good[i].s, &v);
		CHECKF(rc == 0 && v == good[i].v, "'%s': rc %d, %llu (want %llu)", good[i].s, rc, (unsigned long long)v,
		       (unsigned long long)good[i].v);
	}
	static const char *const bad[] = {"", " ", "-1", "-1GiB", "+1", "abc", "1x", "GiB", "1.5.2", "1  GiB", " 1GiB",
					  "1e3", "1 G", "1K", "12MiBs", "1,5GiB", "9223372036854775808", "8388608TiB",
					  "99999999999999999999999", "20000000000GB", "0x10", ".", "1GiB "};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint64_t v = 777;
		const int rc = plan_parse_size(bad[i], &v);
		CHECKF(rc == LANES_EINVAL && v == 777, "'%s' should be refused: rc %d, %llu", bad[i], rc, (unsigned long long)v);
	}
	CHECK(plan_parse_size(NULL, &(uint64_t){0}) == LANES_EINVAL);

	char b[24];
	CHECK(!strcmp(plan_format_size(512, b, sizeof b), "512 B"));
	CHECK(!strcmp(plan_format_size(22528, b, sizeof b), "22.0 KiB"));
	CHECK(!strcmp(plan_format_size(607ull << 20, b, sizeof b), "607 MiB"));
	CHECK(!strcmp(plan_format_size(1181116006ull, b, sizeof b), "1.1 GiB"));

	const uint64_t avail = plan_available_memory();
	CHECKF(avail > 0, "MemAvailable: %llu", (unsigned long long)avail);
}

static char *model_path(char *buf, size_t n, const char *name) {
	snprintf(buf, n, "%s/models/%s", t_shared(), name);
	return buf;
}

// Every figure of a plan matches its parts, and it is within the budget when it fits.
static void check_sums(const plan_result *r, const char *what) {
	CHECKF(r->kv_bytes == (r->kv_bytes_per_token * (uint64_t)r->window + r->state_bytes_per_lane) * (uint64_t)r->lanes, "%s: kv bytes",
	       what);
	CHECKF(r->total_bytes == r->weights_bytes + r->kv_bytes + r->compute_reserve_bytes, "%s: total is not the sum", what);
	CHECKF(r->window > 0 && r->window % r->page_tokens == 0, "%s: window %d is not whole pages", what, r->window);
	CHECKF(r->window <= r->window_cap, "%s: window %d over the cap %d", what, r->window, r->window_cap);
	CHECKF(r->fits == (r->total_bytes <= r->budget_bytes), "%s: fits %d but total %llu, budget %llu", what, r->fits,
	       (unsigned long long)r->total_bytes, (unsigned long long)r->budget_bytes);
	CHECKF(r->fits == (r->reason[0] == 0), "%s: fits %d, reason '%s'", what, r->fits, r->reason);
}

static uint64_t total_at(const plan_model *pm, int32_t lanes, int32_t window, const lane_config *cfg) {
	plan_result r;
	char err[256];
	if (plan_at(&r, pm, UINT64_MAX / 2, lanes, window, cfg, err, sizeof err)) return 0;
	return r.total_bytes;
}

static void test_arithmetic(const plan_model *base) {
	plan_model pm = *base;
	lane_config cfg;
	lane_config_default(&cfg);
	char err[256];
	plan_result r, r2;

	// the per-token cost is the KV module's
	const model_hparams *hp = &pm.hp;
	CHECK(plan_make(&r, &pm, 1ull << 40, 0, &cfg, err, sizeof err) == 0);
	CHECK(r.kv_bytes_per_token == kv_bytes_per_token(KV_F16S, hp->n_layers, hp->n_kv_heads * hp->head_dim, hp->head_dim));
	CHECK(r.weights_bytes == pm.mem.total_bytes);
	CHECKF(r.fits && r.lanes == 16 && r.window == r.window_cap && r.window_cap == hp->n_ctx_train / 16 * 16,
	       "a huge budget: %d lanes of %d (cap %d)", r.lanes, r.window, r.window_cap);
	check_sums(&r, "huge budget");
	lane_config at = cfg;
	at.lanes = 16;
	at.window = at.window_max = r.window;
	at.ctx = 16 * r.window;
	CHECK(r.compute_reserve_bytes == lane_compute_bytes(hp, &at));

	// a sweep of budgets for fixed lane counts: sums hold, the window is the longest that
	// fits, and a smaller budget never gives a longer window
	const int32_t lane_counts[] = {1, 4, 16};
	for (size_t li = 0; li < 3; li++) {
		const int32_t L = lane_counts[li];
		const uint64_t top = total_at(&pm, L, r.window_cap, &cfg) + 4096;
		int32_t prev = INT32_MAX;
		int fits_seen = 0;
		for (int step = 64; step >= 0; step--) {
			const uint64_t budget = pm.mem.total_bytes + (top - pm.mem.total_bytes) / 64 * (uint64_t)step;
			CHECK(plan_make(&r2, &pm, budget, L, &cfg, err, sizeof err) == 0);
			check_sums(&r2, "sweep");
			CHECK(r2.lanes == L);
			if (!r2.fits) {
				prev = 0;
				continue;
			}
			fits_seen++;
			CHECKF(r2.window <= prev, "%d lanes: budget %llu gives window %d, a larger one gave %d", L,
			       (unsigned long long)budget, r2.window, prev);
			prev = r2.window;
			if (r2.window < r2.window_cap) {
				const uint64_t more = total_at(&pm, L, r2.window + r2.page_tokens, &cfg);
				CHECKF(more > budget, "%d lanes: window %d is not the longest in budget %llu", L, r2.window,
				       (unsigned long long)budget);
			}
		}
		CHECKF(fits_seen > 4, "%d lanes: only %d budgets fit", L, fits_seen);
	}

	// q8_0 and q4_0 KV: at most 55% (and 30%) of f16's bytes; the window grows into the bytes freed
	lane_config c16 = cfg, c8 = cfg, c4 = cfg;
	c16.kv_type = KV_F16;
	c8.kv_type = KV_Q8_0;
	c4.kv_type = KV_Q4_0;
	pm.hp.n_ctx_train = 1 << 20; // no cap in the way
	const uint64_t budget = total_at(&pm, 4, 4096, &c16);
	plan_result p16, p8, p4;
	CHECK(plan_make(&p16, &pm, budget, 4, &c16, err, sizeof err) == 0);
	CHECK(plan_make(&p8, &pm, budget, 4, &c8, err, sizeof err) == 0);
	CHECK(plan_make(&p4, &pm, budget, 4, &c4, err, sizeof err) == 0);
	check_sums(&p16, "f16");
	check_sums(&p8, "q8_0");
	check_sums(&p4, "q4_0");
	CHECKF(p8.kv_bytes_per_token * 100 <= p16.kv_bytes_per_token * 55, "q8_0 %llu vs f16 %llu bytes per token",
	       (unsigned long long)p8.kv_bytes_per_token, (unsigned long long)p16.kv_bytes_per_token);
	CHECKF(p4.kv_bytes_per_token * 100 <= p16.kv_bytes_per_token * 30, "q4_0 %llu vs f16 %llu bytes per token",
	       (unsigned long long)p4.kv_bytes_per_token, (unsigned long long)p16.kv_bytes_per_token);
	CHECKF(p16.fits && p16.window == 4096, "f16 window %d", p16.window);
	// q8_0 spends the budget on KV as f16 does (to within a page per lane and the difference
	// of the compute reserves), so its window grows by the ratio of the per-token costs
	const uint64_t used16 = p16.kv_bytes + p16.compute_reserve_bytes, used8 = p8.kv_bytes + p8.compute_reserve_bytes;
	CHECKF(p8.fits && p8.window > p16.window && used8 + 4 * 16 * p8.kv_bytes_per_token > used16 &&
		       budget - p8.total_bytes < 4 * 16 * p8.kv_bytes_per_token + (p8.compute_reserve_bytes - p16.compute_reserve_bytes) + 1,
	       "q8_0 window %d (f16 %d): KV and compute %llu vs %llu", p8.window, p16.window, (unsigned long long)used8,
	       (unsigned long long)used16);
	if (p8.compute_reserve_bytes == p16.compute_reserve_bytes) // fused attention: the reserve ignores the window
		CHECKF((uint64_t)p8.window * p8.kv_bytes_per_token >= (uint64_t)(p16.window - 16) * p16.kv_bytes_per_token &&
			       p8.window * 100 >= p16.window * 170,
		       "q8_0 window %d, f16 %d", p8.window, p16.window);
	CHECKF(p4.fits && p4.window > p8.window, "q4_0 window %d, q8_0 %d", p4.window, p8.window);
	pm = *base;

	// lanes choice: 16 lanes at the full cap when the budget holds them, else 8, ...
	const int32_t cap = r.window_cap;
	uint64_t b16 = total_at(&pm, 16, cap, &cfg), b8 = total_at(&pm, 8, cap, &cfg);
	CHECK(plan_make(&r, &pm, b16, 0, &cfg, err, sizeof err) == 0 && r.lanes == 16 && r.window == cap && r.fits);
	CHECK(plan_make(&r, &pm, b16 - 1, 0, &cfg, err, sizeof err) == 0 && r.lanes == 8 && r.window == cap && r.fits);
	CHECK(plan_make(&r, &pm, b8 - 1, 0, &cfg, err, sizeof err) == 0 && r.lanes == 4 && r.window == cap && r.fits);
	CHECK(plan_make(&r, &pm, total_at(&pm, 1, cap, &cfg), 0, &cfg, err, sizeof err) == 0 && r.lanes == 1 &&
	      r.window == cap);

	// ... else the most of {4, 2, 1} with a window of 2048, else 1 lane with 256
	pm.hp.n_ctx_train = 32768;
	const uint64_t b4g = total_at(&pm, 4, 2048, &cfg);
	CHECK(b4g < total_at(&pm, 1, 32768, &cfg));
	CHECK(plan_make(&r, &pm, b4g, 0, &cfg, err, sizeof err) == 0);
	CHECKF(r.fits && r.lanes == 4 && r.window == 2048, "4 lanes of 2048: got %d of %d", r.lanes, r.window);
	CHECK(plan_make(&r, &pm, b4g - 1, 0, &cfg, err, sizeof err) == 0);
	CHECKF(r.fits && r.lanes == 2 && r.window >= 2048, "2 lanes of 2048+: got %d of %d", r.lanes, r.window);
	const uint64_t b1g = total_at(&pm, 1, 2048, &cfg);
	CHECK(plan_make(&r, &pm, b1g - 1, 0, &cfg, err, sizeof err) == 0);
	CHECKF(r.fits && r.lanes == 1 && r.window == 2032, "1 lane of 2032: got %d of %d", r.lanes, r.window);
	const uint64_t b1f = total_at(&pm, 1, 256, &cfg);
	CHECK(plan_make(&r, &pm, b1f, 0, &cfg, err, sizeof err) == 0);
	CHECKF(r.fits && r.lanes == 1 && r.window == 256, "1 lane of 256: got %d of %d", r.lanes, r.window);
	CHECK(plan_make(&r, &pm, b1f - 1, 0, &cfg, err, sizeof err) == 0);
	CHECKF(!r.fits && r.lanes == 1 && r.window == 256 && r.total_bytes == b1f, "under 1 lane of 256: %d of %d fits %d",
	       r.lanes, r.window, r.fits);
	check_sums(&r, "1 lane short");
	CHECKF(strstr(r.reason, "1 lane needs at least 1 x 256 tokens") && strstr(r.reason, "of KV"), "reason '%s'", r.reason);

	// a short trained context: the cap in whole pages, and the floor is the cap
	pm.hp.n_ctx_train = 100;
	CHECK(plan_make(&r, &pm, 1ull << 40, 0, &cfg, err, sizeof err) == 0 && r.window_cap == 96 && r.window == 96);
	CHECK(plan_make(&r, &pm, total_at(&pm, 1, 96, &cfg), 0, &cfg, err, sizeof err) == 0 && r.fits && r.window == 96);
	CHECK(plan_make(&r, &pm, total_at(&pm, 1, 96, &cfg) - 1, 0, &cfg, err, sizeof err) == 0 && !r.fits);
	pm.hp.n_ctx_train = 0;
	CHECK(plan_make(&r, &pm, 1ull << 40, 0, &cfg, err, sizeof err) == 0 && r.window_cap == PLAN_WINDOW_DEFAULT_CAP);
	pm = *base;

	// lanes given: the longest window; short of 256 tokens it does not fit, and says why
	const uint64_t b4 = total_at(&pm, 4, 256, &cfg);
	CHECK(plan_make(&r, &pm, b4, 4, &cfg, err, sizeof err) == 0 && r.fits && r.lanes == 4 && r.window == 256);
	CHECK(plan_make(&r, &pm, b4 - 1, 4, &cfg, err, sizeof err) == 0 && !r.fits && r.lanes == 4 && r.window == 256);
	CHECKF(strstr(r.reason, "4 lanes need at least 4 x 256 tokens x ") && strstr(r.reason, "left after the weights"),
	       "reason '%s'", r.reason);
	// the weights alone over the budget
	CHECK(plan_make(&r, &pm, pm.mem.total_bytes - 1, 0, &cfg, err, sizeof err) == 0 && !r.fits);
	CHECKF(strstr(r.reason, "the weights alone need") && strstr(r.reason, "the budget is"), "reason '%s'", r.reason);
	check_sums(&r, "weights over");
	// weights fit, but not with the compute reserve
	plan_result one;
	CHECK(plan_at(&one, &pm, 0, 1, 256, &cfg, err, sizeof err) == 0);
	if (one.compute_reserve_bytes > 1) {
		CHECK(plan_make(&r, &pm, pm.mem.total_bytes + one.compute_reserve_bytes - 1, 1, &cfg, err, sizeof err) == 0);
		CHECKF(!r.fits && strstr(r.reason, "compute reserve for 1 lane"), "reason '%s'", r.reason);
	}

	// bad arguments
	CHECK(plan_make(&r, &pm, 1ull << 30, -1, &cfg, err, sizeof err) == LANES_EINVAL);
	CHECK(plan_make(&r, &pm, 1ull << 30, LANE_SNAP_MAX_LANES + 1, &cfg, err, sizeof err) == LANES_EINVAL);
	CHECK(plan_at(&r, &pm, 1ull << 30, 0, 256, &cfg, err, sizeof err) == LANES_EINVAL);
	CHECK(plan_at(&r, &pm, 1ull << 30, 1, 0, &cfg, err, sizeof err) == LANES_EINVAL);
	lane_config bad = cfg;
	bad.page_tokens = 0;
	CHECK(plan_make(&r, &pm, 1ull << 30, 0, &bad, err, sizeof err) == LANES_EINVAL);
	bad = cfg;
	bad.kv_type = KV_TYPE_COUNT;
	CHECK(plan_make(&r, &pm, 1ull << 30, 0, &bad, err, sizeof err) == LANES_EINVAL);
	pm.hp.head_dim = 20; // rows of 2 x 20 values: not whole q8_0 blocks
	pm.hp.n_kv_heads = 2;
	bad = cfg;
	bad.kv_type = KV_Q8_0;
	CHECK(plan_make(&r, &pm, 1ull << 30, 0, &bad, err, sizeof err) == LANES_EINVAL && strstr(err, "q8_0"));
}

static bool same_hparams(const model_hparams *a, const model_hparams *b) {
	return !strcmp(a->arch, b->arch) && a->n_vocab == b->n_vocab && a->n_embd == b->n_embd &&
	       a->n_layers == b->n_layers && a->n_heads == b->n_heads && a->n_kv_heads == b->n_kv_heads &&
	       a->head_dim == b->head_dim && a->n_ff == b->n_ff && a->n_experts == b->n_experts &&
	       a->n_experts_used == b->n_experts_used && a->n_ff_exp == b->n_ff_exp && a->n_ff_shexp == b->n_ff_shexp &&
	       a->moe_norm == b->moe_norm && a->n_ctx_train == b->n_ctx_train && a->rms_eps == b->rms_eps &&
	       a->rope.n_rot == b->rope.n_rot && a->rope.freq_base == b->rope.freq_base && a->main_type == b->main_type;
}

static bool same_memory(const model_memory *a, const model_memory *b) {
	return a->packed_bytes == b->packed_bytes && a->in_place_bytes == b->in_place_bytes &&
	       a->copied_bytes == b->copied_bytes && a->file_bytes == b->file_bytes && a->total_bytes == b->total_bytes &&
	       a->kernels && b->kernels && !strcmp(a->kernels, b->kernels);
}

static bool same_plan(const plan_result *a, const plan_result *b) {
	return a->weights_bytes == b->weights_bytes && a->kv_bytes_per_token == b->kv_bytes_per_token &&
	       a->compute_reserve_bytes == b->compute_reserve_bytes && a->kv_bytes == b->kv_bytes &&
	       a->total_bytes == b->total_bytes && a->lanes == b->lanes && a->window == b->window &&
	       a->fits == b->fits && !strcmp(a->reason, b->reason);
}

// The metadata description of every shared model, and of the files in extra (NULL-ended),
// equals the loaded model's figures.
static void test_meta_equals_loaded(const char *kernels, const char *const *extra) {
	static const char *const names[] = {
		"stories260K.gguf",     "ref-llama-F32.gguf",    "ref-llama-F16.gguf",  "ref-llama-BF16.gguf",
		"ref-llama-Q4_0.gguf",  "ref-llama-Q4_K_M.gguf", "ref-llama-Q6_K.gguf", "ref-llama-Q8_0.gguf",
		"ref-llama-Q2_K.gguf",  "ref-moe-Q4_K_M.gguf",   "ref-moe-Q8_0.gguf",   "ref-qwen2-Q4_K_M.gguf",
		"ref-qwen2-F16.gguf",   "ref-tied-Q8_0.gguf",    "ref-spm-Q4_0.gguf",
	};
	const size_t nn = sizeof names / sizeof names[0];
	lane_config cfg;
	lane_config_default(&cfg);
	char path[1024], err[512];
	for (size_t i = 0; i < nn || extra[i - nn]; i++) {
		if (i < nn) model_path(path, sizeof path, names[i]);
		else snprintf(path, sizeof path, "%s", extra[i - nn]);
		plan_model meta, loaded;
		int rc = plan_model_load(&meta, path, err, sizeof err);
		CHECKF(rc == 0, "%s: %s", path, err);
		model *m = NULL;
		rc = model_load(&m, path, err, sizeof err);
		CHECKF(rc == 0, "%s: %s", path, err);
		if (rc) continue;
		plan_model_of(&loaded, m);
		CHECKF(meta.mem.packed_bytes == model_packed_bytes(m), "%s (%s): packed %llu, loaded %llu", path, kernels,
		       (unsigned long long)meta.mem.packed_bytes, (unsigned long long)model_packed_bytes(m));
		CHECKF(meta.mem.copied_bytes == model_copied_bytes(m), "%s: copied %llu, loaded %llu", path,
		       (unsigned long long)meta.mem.copied_bytes, (unsigned long long)model_copied_bytes(m));
		CHECKF(meta.mem.file_bytes == model_weight_bytes(m), "%s: file bytes", path);
		CHECKF(same_memory(&meta.mem, &loaded.mem), "%s: in place %llu, loaded %llu", path,
		       (unsigned long long)meta.mem.in_place_bytes, (unsigned long long)loaded.mem.in_place_bytes);
		CHECKF(meta.mem.total_bytes == meta.mem.packed_bytes + meta.mem.in_place_bytes + meta.mem.copied_bytes,
		       "%s: total", path);
		CHECKF(!strcmp(meta.mem.kernels, tensor_kernels_name(model_kernels(m))), "%s: kernels", path);
		CHECKF(same_hparams(&meta.hp, model_hparams_of(m)) && !meta.hp.rope.freq_factors, "%s: hparams", path);
		// token_embd is always read in place, and every bound tensor is counted somewhere
		const gguf_tensor *te = gguf_find_tensor(model_gguf(m), "token_embd.weight");
		CHECKF(te && meta.mem.in_place_bytes >= te->nbytes && meta.mem.in_place_bytes <= meta.mem.file_bytes,
		       "%s: in place %llu", path, (unsigned long long)meta.mem.in_place_bytes);
		if (!strcmp(kernels, "ref")) {
			// the portable set repacks nothing: what is not copied is read in place
			CHECKF(meta.mem.packed_bytes == 0, "%s: ref packs", path);
			if (meta.mem.copied_bytes == 0)
				CHECKF(meta.mem.in_place_bytes == meta.mem.file_bytes, "%s: ref in place %llu of %llu", path,
				       (unsigned long long)meta.mem.in_place_bytes, (unsigned long long)meta.mem.file_bytes);
		}
		plan_result a, b;
		CHECK(plan_make(&a, &meta, 64ull << 20, 0, &cfg, err, sizeof err) == 0);
		CHECK(plan_make(&b, &loaded, 64ull << 20, 0, &cfg, err, sizeof err) == 0);
		CHECKF(same_plan(&a, &b), "%s: plans differ", path);
		model_free(m);
	}
}

// Writes a copy of src whose f32 vectors are stored as f16, so that loading converts them.
static int write_f16_vectors(const char *src, const char *dst) {
	char err[512];
	gguf *g;
	if (gguf_open(&g, src, err, sizeof err)) return -1;
	gguf_writer *w = gguf_writer_new();
	int rc = w ? gguf_writer_copy_kv(w, g, NULL) : -1;
	for (int64_t i = 0; !rc && i < gguf_n_tensors(g); i++) {
		const gguf_tensor *t = gguf_tensor_at(g, i);
		if (t->n_dims == 1 && t->type == GGUF_T_F32) {
			uint16_t *h = malloc((size_t)t->ne[0] * sizeof *h);
			for (int64_t j = 0; h && j < t->ne[0]; j++) h[j] = tensor_f32_to_f16(((const float *)t->data)[j]);
			rc = h ? gguf_writer_add_tensor(w, t->name, GGUF_T_F16, 1, t->ne, h, (uint64_t)t->ne[0] * 2) : -1;
			free(h);
		} else {
			rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
		}
	}
	if (!rc) rc = gguf_writer_write(w, dst, err, sizeof err);
	gguf_writer_free(w);
	gguf_free(g);
	return rc;
}

// Writes a copy of src whose tensor data section is zeroed.
static int write_zeroed(const char *src, const char *dst, uint64_t data_off) {
	size_t n;
	char *buf = t_read_file(src, &n);
	if (!buf || data_off > n) {
		free(buf);
		return -1;
	}
	memset(buf + data_off, 0, n - data_off);
	FILE *f = fopen(dst, "wb");
	const int ok = f && fwrite(buf, 1, n, f) == n;
	if (f) fclose(f);
	free(buf);
	return ok ? 0 : -1;
}

// Metadata mode reads no tensor data: the same figures from a copy whose data is zeroed, and
// from a buffer whose data section cannot be read at all (a touch would crash this test).
static void test_meta_reads_no_data(const char *extra) {
	static const char *const names[] = {"ref-qwen2-F16.gguf", "ref-moe-Q4_K_M.gguf", "ref-llama-BF16.gguf",
					    "stories260K.gguf", NULL};
	lane_config cfg;
	lane_config_default(&cfg);
	char path[1024], tmp[1024], err[512];
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (names[i]) model_path(path, sizeof path, names[i]);
		else snprintf(path, sizeof path, "%s", extra);
		gguf *g;
		if (gguf_open(&g, path, err, sizeof err)) {
			CHECKF(0, "%s: %s", path, err);
			continue;
		}
		const uint64_t data_off = gguf_data_offset(g), size = gguf_file_size(g);
		gguf_free(g);
		plan_model want, zeroed;
		CHECK(plan_model_load(&want, path, err, sizeof err) == 0);

		snprintf(tmp, sizeof tmp, "%s/test_plan_%d_%zu.gguf", t_tmp(), (int)getpid(), i);
		CHECK(write_zeroed(path, tmp, data_off) == 0);
		const int rc = plan_model_load(&zeroed, tmp, err, sizeof err);
		CHECKF(rc == 0, "%s zeroed: %s", path, err);
		unlink(tmp);
		plan_result a, b;
		CHECK(plan_make(&a, &want, 256ull << 20, 0, &cfg, err, sizeof err) == 0);
		CHECK(plan_make(&b, &zeroed, 256ull << 20, 0, &cfg, err, sizeof err) == 0);
		CHECKF(rc == 0 && same_memory(&want.mem, &zeroed.mem) && same_hparams(&want.hp, &zeroed.hp) &&
			       same_plan(&a, &b),
		       "%s: the zeroed copy plans differently", path);

		// the file in memory with its data section (from the page where it starts) unreadable
		const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
		const size_t shift = (pg - data_off % pg) % pg, span = (shift + size + pg - 1) / pg * pg;
		uint8_t *base = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		size_t n;
		char *bytes = t_read_file(path, &n);
		CHECK(base != MAP_FAILED && bytes && n == size);
		if (base == MAP_FAILED || !bytes || n != size) {
			free(bytes);
			continue;
		}
		memcpy(base + shift, bytes, n);
		free(bytes);
		CHECK(mprotect(base + shift + data_off, span - shift - data_off, PROT_NONE) == 0);
		if (gguf_open_mem(&g, base + shift, size, err, sizeof err)) {
			CHECKF(0, "%s in memory: %s", path, err);
		} else {
			plan_model mem;
			CHECK(model_meta_from_gguf(g, &mem.hp, &mem.mem, err, sizeof err) == 0);
			CHECKF(same_memory(&want.mem, &mem.mem) && same_hparams(&want.hp, &mem.hp), "%s: unreadable data plans differently",
			       path);
			CHECK(gguf_n_tensors(g) > 0); // the gguf is still the caller's
			gguf_free(g);
		}
		munmap(base, span);
	}
	// errors come back as model_load's
	plan_model pm;
	model_path(path, sizeof path, "no-such-model.gguf");
	CHECK(plan_model_load(&pm, path, err, sizeof err) < 0 && err[0]);
}

// A model with recurrent layers (qwen3next): KV per token for its full-attention layers alone,
// and its state a fixed block per lane (its own, two captures' copies, a draft mark's and two checkpoints), counted
// in every plan.
static void test_recurrent(void) {
	char path[1024], vocab[1024], err[256];
	snprintf(path, sizeof path, "%s/test_plan_%d_next.gguf", t_tmp(), (int)getpid());
	snprintf(vocab, sizeof vocab, "%s/models/stories260K.gguf", t_shared());
	CHECK(t_gen_model("qwen3-next-test", "Q8_0", vocab, path) == 0);
	plan_model pm;
	CHECKF(plan_model_load(&pm, path, err, sizeof err) == 0, "%s", err);
	const model_hparams *hp = &pm.hp;
	lane_config cfg;
	lane_config_default(&cfg);
	plan_result r, r1;
	CHECK(plan_make(&r, &pm, 1ull << 40, 4, &cfg, err, sizeof err) == 0);
	CHECK(plan_at(&r1, &pm, 1ull << 40, 1, r.window, &cfg, err, sizeof err) == 0);
	check_sums(&r, "recurrent");
	check_sums(&r1, "recurrent, 1 lane");
	CHECKF(model_kv_layers(hp) == 1 && r.kv_bytes_per_token == kv_bytes_per_token(KV_F16S, 1, hp->n_kv_heads * hp->head_dim, hp->head_dim),
	       "KV of the %d full-attention layers alone: %llu bytes per token", model_kv_layers(hp), (unsigned long long)r.kv_bytes_per_token);
	CHECKF(r.state_bytes_per_lane == (uint64_t)model_state_floats(hp) * 4 * 6 && r.state_bytes_per_lane > 0 &&
	       r.kv_bytes - r1.kv_bytes == 3 * (r1.kv_bytes_per_token * (uint64_t)r.window + r.state_bytes_per_lane),
	       "state %llu bytes per lane", (unsigned long long)r.state_bytes_per_lane);
	// the cache a lane host makes holds the same state
	model *m;
	CHECKF(model_load(&m, path, err, sizeof err) == 0, "%s", err);
	kv_config kc = model_kv_config(m, KV_F16S, 4, 64, 16);
	kv_cache *kv;
	CHECK(kv_new(&kv, &kc, err, sizeof err) == 0);
	CHECK(kv_state_bytes(kv) == 4 * r.state_bytes_per_lane && kv_seq_state(kv, 3) && !kv_seq_state(kv, 4));
	kv_free(kv);
	model_free(m);
	unlink(path);
}

int main(void) {
	char path[1024], err[512];
	plan_model pm;
	test_sizes();
	if (plan_model_load(&pm, model_path(path, sizeof path, "ref-llama-Q4_0.gguf"), err, sizeof err)) {
		CHECKF(0, "%s", err);
		T_DONE("plan");
	}
	test_arithmetic(&pm);
	test_recurrent();
	// a model whose vectors loading converts to f32 copies (qwen2: biases too)
	char f16v[1024];
	snprintf(f16v, sizeof f16v, "%s/test_plan_%d_f16v.gguf", t_tmp(), (int)getpid());
	CHECK(write_f16_vectors(model_path(path, sizeof path, "ref-qwen2-Q4_K_M.gguf"), f16v) == 0);
	plan_model conv;
	CHECK(plan_model_load(&conv, f16v, err, sizeof err) == 0);
	CHECKF(conv.mem.copied_bytes > 0 && conv.mem.copied_bytes % 4 == 0, "copied %llu", (unsigned long long)conv.mem.copied_bytes);
	test_meta_reads_no_data(f16v);
	// and files of the types no shared model has, as `lanes quantize` makes them
	char iq4nl[1024], iq4xs[1024], tq1[1024], iq2[1024];
	CHECK(t_quantize_ref("plan", "IQ4_NL", iq4nl, sizeof iq4nl) && t_quantize_ref("plan", "IQ4_XS", iq4xs, sizeof iq4xs));
	CHECK(t_quantize_ref("plan", "TQ1_0", tq1, sizeof tq1) && t_quantize_ref("plan", "IQ2_XXS", iq2, sizeof iq2));
	const char *const extra[] = {f16v, iq4nl, iq4xs, tq1, iq2, NULL};
	test_meta_equals_loaded(tensor_kernels_name(tensor_kernels_default()), extra);
	// and for the portable set, which reads every matrix in place
	CHECK(tensor_kernels_select("ref") == 0);
	test_meta_equals_loaded("ref", extra);
	unlink(f16v), unlink(iq4nl), unlink(iq4xs), unlink(tq1), unlink(iq2);
	T_DONE("plan");
}
