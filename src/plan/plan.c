// plan: sizes ("1.5GiB"), the machine's available memory, and the planner that splits a
// memory budget into weights, KV (lanes x window x bytes per token) and the compute reserve.
#include "plan/plan.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

// ---- sizes ----------------------------------------------------------------------------------
static const struct {
	const char *name;
	uint64_t mult;
} units[] = {
	{"", 1},
	{"b", 1},
	{"kib", 1ull << 10},
	{"mib", 1ull << 20},
	{"gib", 1ull << 30},
	{"tib", 1ull << 40},
	{"kb", 1000ull},
	{"mb", 1000ull * 1000},
	{"gb", 1000ull * 1000 * 1000},
	{"tb", 1000ull * 1000 * 1000 * 1000},
};

int plan_parse_size(const char *s, uint64_t *out) {
	if (!s) return LANES_EINVAL;
	const char *p = s;
	uint64_t ip = 0, frac = 0, scale = 1; // the number is ip + frac / scale
	int digits = 0;
	for (; isdigit((unsigned char)*p); p++, digits++)
		if (!ck_mul(ip, 10, &ip) || !ck_add(ip, (uint64_t)(*p - '0'), &ip)) return LANES_EINVAL;
	if (*p == '.') {
		p++;
		for (; isdigit((unsigned char)*p); p++, digits++)
			if (scale < 1000000000000000000ull) { // digits past the 18th cannot change a whole byte
				frac = frac * 10 + (uint64_t)(*p - '0');
				scale *= 10;
			}
	}
	if (!digits) return LANES_EINVAL;
	if (*p == ' ') p++;
	char unit[8];
	size_t n = strlen(p);
	if (n >= sizeof unit) return LANES_EINVAL;
	for (size_t i = 0; i <= n; i++) unit[i] = (char)tolower((unsigned char)p[i]);
	for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
		if (strcmp(unit, units[u].name)) continue;
		uint64_t whole;
		if (!ck_mul(ip, units[u].mult, &whole)) return LANES_EINVAL;
		// frac / scale * mult, rounded to the nearest byte, without overflow: split mult by scale
		const long double part = (long double)frac * (long double)units[u].mult / (long double)scale;
		uint64_t v;
		if (!ck_add(whole, (uint64_t)(part + 0.5L), &v) || v > (uint64_t)INT64_MAX) return LANES_EINVAL;
		*out = v;
		return LANES_OK;
	}
	return LANES_EINVAL;
}

char *plan_format_size(uint64_t b, char *buf, size_t n) {
	static const char *const names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	if (b < 1024) {
		snprintf(buf, n, "%llu B", (unsigned long long)b);
		return buf;
	}
	double v = (double)b;
	int u = 0;
	while (v >= 1024.0 && u < 6) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, n, v >= 99.95 ? "%.0f %s" : "%.1f %s", v, names[u]);
	return buf;
}

uint64_t plan_available_memory(void) { return base_available_memory(); }

// ---- the model ------------------------------------------------------------------------------
int plan_model_load(plan_model *out, const char *path, char *err, size_t errlen) {
	memset(out, 0, sizeof *out);
	return model_load_meta(path, &out->hp, &out->mem, err, errlen);
}

void plan_model_of(plan_model *out, const model *m) {
	memset(out, 0, sizeof *out);
	out->hp = *model_hparams_of(m);
	out->hp.rope.freq_factors = NULL;
	model_memory_of(m, &out->mem);
}

// ---- the plan -------------------------------------------------------------------------------
typedef struct {
	const plan_model *pm;
	lane_config cfg;
	uint64_t kvpt, kvpt_local; // per token: every layer's K and V, and the local layers' of them
	uint64_t budget;
} planner;

typedef struct {
	uint64_t compute, kv, total; // total UINT64_MAX when it overflows
} cost;

static cost cost_of(const planner *P, int32_t lanes, int32_t window) {
	lane_config c = P->cfg;
	c.lanes = lanes;
	c.window = window;
	c.window_max = window;
	c.ctx = (int32_t)((int64_t)lanes * window > INT32_MAX ? INT32_MAX : (int64_t)lanes * window);
	cost r = {.compute = lane_compute_bytes(&P->pm->hp, &c)};
	uint64_t per_lane, local, t;
	// a recurrent model's state: a fixed block per lane beside its pages
	const uint64_t state = kv_state_bytes_per_seq(model_state_floats(&P->pm->hp));
	// a sliding-window model's local layers hold a lane's window and a round's rows, not all of it
	const int32_t lt = P->kvpt_local ? lane_local_tokens(&c, &P->pm->hp, window) : 0;
	if (!ck_mul(P->kvpt - P->kvpt_local, (uint64_t)window, &per_lane) || !ck_mul(P->kvpt_local, (uint64_t)lt, &local) ||
	    !ck_add(per_lane, local, &per_lane) || !ck_add(per_lane, state, &per_lane) ||
	    !ck_mul(per_lane, (uint64_t)lanes, &r.kv)) {
		r.kv = r.total = UINT64_MAX;
		return r;
	}
	if (!ck_add(P->pm->mem.total_bytes, r.kv, &t) || !ck_add(t, r.compute, &r.total)) r.total = UINT64_MAX;
	return r;
}

// The longest window (whole pages, at most cap) whose total fits the budget for lanes; 0 if
// not even one page fits. Costs grow with the window, so the pages are searched by halving.
static int32_t best_window(const planner *P, int32_t lanes, int32_t cap) {
	const int32_t pt = P->cfg.page_tokens;
	int32_t lo = 0, hi = cap / pt; // lo pages fit (0 trivially), hi is the most tried
	if (cost_of(P, lanes, hi * pt).total <= P->budget) return hi * pt;
	while (hi - lo > 1) {
		const int32_t mid = lo + (hi - lo) / 2;
		if (cost_of(P, lanes, mid * pt).total <= P->budget) lo = mid;
		else hi = mid;
	}
	return lo * pt;
}

static void fill(plan_result *r, const planner *P, int32_t lanes, int32_t window) {
	const cost c = cost_of(P, lanes, window);
	r->lanes = lanes;
	r->window = window;
	r->compute_reserve_bytes = c.compute;
	r->kv_bytes = c.kv;
	lane_config lc = P->cfg;
	lc.lanes = lanes;
	r->local_tokens = P->kvpt_local ? lane_local_tokens(&lc, &P->pm->hp, window) : 0;
	r->total_bytes = c.total;
	r->fits = c.total <= P->budget;
}

// Says what does not fit when r->lanes lanes cannot have r->window tokens each.
static void explain(plan_result *r, const planner *P) {
	char w[24], b[24], c[24], t[24], k[24], kv[24], left[24];
	const uint64_t weights = P->pm->mem.total_bytes;
	plan_format_size(weights, w, sizeof w);
	plan_format_size(P->budget, b, sizeof b);
	plan_format_size(r->compute_reserve_bytes, c, sizeof c);
	if (weights > P->budget) {
		snprintf(r->reason, sizeof r->reason, "the weights alone need %s, the budget is %s", w, b);
		return;
	}
	uint64_t fixed;
	if (!ck_add(weights, r->compute_reserve_bytes, &fixed)) fixed = UINT64_MAX;
	if (fixed > P->budget) {
		plan_format_size(fixed, t, sizeof t);
		snprintf(r->reason, sizeof r->reason,
			 "the weights (%s) and the compute reserve for %d lane%s (%s) need %s, the budget is %s", w,
			 r->lanes, r->lanes == 1 ? "" : "s", c, t, b);
		return;
	}
	plan_format_size(P->kvpt, k, sizeof k);
	plan_format_size(r->kv_bytes, kv, sizeof kv);
	plan_format_size(P->budget - fixed, left, sizeof left);
	snprintf(r->reason, sizeof r->reason,
		 "%d lane%s need%s at least %d x %d tokens x %s of KV = %s, %s is left after the weights (%s) and the "
		 "compute reserve (%s)",
		 r->lanes, r->lanes == 1 ? "" : "s", r->lanes == 1 ? "s" : "", r->lanes, r->window, k, kv, left, w, c);
}

// Checks the inputs and fills the figures that do not depend on lanes or window.
static int setup(planner *P, plan_result *out, const plan_model *pm, uint64_t budget, int32_t lanes, bool lanes_opt,
		 const lane_config *cfg, char *err, size_t errlen) {
	memset(out, 0, sizeof *out);
	if (lanes < (lanes_opt ? 0 : 1) || lanes > LANE_SNAP_MAX_LANES)
		return base_seterr(err, errlen, LANES_EINVAL, "plan: lanes must be 1..%d%s", LANE_SNAP_MAX_LANES,
				    lanes_opt ? " (0: let the planner choose)" : "");
	const int32_t pt = cfg->page_tokens;
	if (pt < 1 || pt > 65536) return base_seterr(err, errlen, LANES_EINVAL, "plan: page_tokens must be 1..65536");
	const model_hparams *hp = &pm->hp;
	const char *tn = kv_type_name(cfg->kv_type);
	if (!tn) return base_seterr(err, errlen, LANES_EINVAL, "plan: unknown KV type");
	*P = (planner){.pm = pm, .cfg = *cfg, .budget = budget,
		       .kvpt = kv_bytes_per_token(cfg->kv_type, model_kv_layers(hp), hp->n_kv_heads * hp->head_dim, hp->head_dim)};
	if (!P->kvpt)
		return base_seterr(err, errlen, LANES_EINVAL, "plan: KV type %s cannot hold rows of %d values (%d heads of %d)",
				    tn, hp->n_kv_heads * hp->head_dim, hp->n_kv_heads, hp->head_dim);
	int32_t n_local = 0;
	for (int32_t l = 0; hp->n_swa > 0 && !hp->full_attn_interval && !hp->encoder && l < hp->n_layers; l++) n_local += model_layer_window(hp, l) > 0;
	if (n_local) P->kvpt_local = kv_local_bytes_per_token(cfg->kv_type, n_local, hp->n_kv_heads * hp->head_dim, pt);
	const int32_t cap = hp->n_ctx_train > 0 ? hp->n_ctx_train : PLAN_WINDOW_DEFAULT_CAP;
	out->weights_bytes = pm->mem.total_bytes;
	out->kv_bytes_per_token = P->kvpt;
	out->kv_local_bytes_per_token = P->kvpt_local;
	out->state_bytes_per_lane = kv_state_bytes_per_seq(model_state_floats(hp));
	out->budget_bytes = budget;
	out->kv_type = cfg->kv_type;
	out->page_tokens = pt;
	out->window_cap = cap >= pt ? cap / pt * pt : pt;
	return LANES_OK;
}

// x tokens in whole pages, at most the window cap.
static int32_t need(const plan_result *r, int32_t x) {
	const int64_t w = ((int64_t)x + r->page_tokens - 1) / r->page_tokens * r->page_tokens;
	return w < r->window_cap ? (int32_t)w : r->window_cap;
}

int plan_make(plan_result *out, const plan_model *pm, uint64_t budget, int32_t lanes, const lane_config *cfg,
	      char *err, size_t errlen) {
	planner P;
	int rc = setup(&P, out, pm, budget, lanes, true, cfg, err, errlen);
	if (rc) return rc;
	const int32_t wcap = out->window_cap, need_floor = need(out, PLAN_WINDOW_FLOOR), need_good = need(out, PLAN_WINDOW_GOOD);
	int32_t pick = 0, window = 0;
	if (lanes > 0) {
		window = best_window(&P, lanes, wcap);
		if (window >= need_floor) pick = lanes;
	} else {
		static const int32_t full[] = {16, 8, 4, 2, 1}, good[] = {4, 2, 1};
		for (size_t i = 0; !pick && i < sizeof full / sizeof full[0]; i++)
			if ((window = best_window(&P, full[i], wcap)) >= wcap) pick = full[i];
		for (size_t i = 0; !pick && i < sizeof good / sizeof good[0]; i++)
			if ((window = best_window(&P, good[i], wcap)) >= need_good) pick = good[i];
		if (!pick && (window = best_window(&P, 1, wcap)) >= need_floor) pick = 1;
	}
	if (pick) {
		fill(out, &P, pick, window);
		return LANES_OK;
	}
	fill(out, &P, lanes > 0 ? lanes : 1, need_floor);
	if (!out->fits) explain(out, &P);
	return LANES_OK;
}

int plan_at(plan_result *out, const plan_model *pm, uint64_t budget, int32_t lanes, int32_t window,
	    const lane_config *cfg, char *err, size_t errlen) {
	planner P;
	int rc = setup(&P, out, pm, budget, lanes, false, cfg, err, errlen);
	if (rc) return rc;
	if (window < 1) return base_seterr(err, errlen, LANES_EINVAL, "plan: the window must be at least 1 token");
	const int64_t pt = out->page_tokens, w = ((int64_t)window + pt - 1) / pt * pt;
	fill(out, &P, lanes, w > INT32_MAX ? (int32_t)(INT32_MAX / pt * pt) : (int32_t)w);
	if (!out->fits) explain(out, &P);
	return LANES_OK;
}
