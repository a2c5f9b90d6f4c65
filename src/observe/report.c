// observe/report: the expert observer's counters summed per view (all rows, each domain), every
// layer's ranking and working set, the domains' hot sets compared — and the report as JSON and text.
#include "observe/observe_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const int obs_levels[OBS_LEVELS] = {50, 80, 90, 95};

static void view_free(obs_view *v) {
	free(v->act), free(v->phase_act), free(v->mass), free(v->pairs), free(v->rank), free(v->cum), free(v->ws), free(v->top10);
	free(v->hot);
	memset(v, 0, sizeof *v);
}

static int view_new(obs_view *v, const model_experts_view *g, const char *name) {
	memset(v, 0, sizeof *v);
	snprintf(v->name, sizeof v->name, "%s", name);
	v->L = g->n_layers, v->E = g->n_experts, v->K = g->n_used, v->P = g->n_pairs;
	const size_t LE = (size_t)v->L * (size_t)v->E;
	v->act = calloc(LE, sizeof *v->act);
	v->phase_act = calloc(LE * LANE_PHASE_COUNT, sizeof *v->phase_act);
	v->mass = calloc(LE, sizeof *v->mass);
	v->pairs = calloc((size_t)v->L * (size_t)v->P + 1, sizeof *v->pairs);
	v->rank = malloc(LE * sizeof *v->rank);
	v->cum = malloc((LE + (size_t)v->L) * sizeof *v->cum);
	v->ws = malloc((size_t)v->L * OBS_LEVELS * sizeof *v->ws);
	v->top10 = malloc((size_t)v->L * sizeof *v->top10);
	v->hot = calloc(LE, sizeof *v->hot);
	if (v->act && v->phase_act && v->mass && v->pairs && v->rank && v->cum && v->ws && v->top10 && v->hot) return LANES_OK;
	view_free(v);
	return LANES_ENOMEM;
}

// Adds group g (of phase ph) into v.
static void view_add(obs_view *v, const model_experts_view *g, int ph) {
	const size_t LE = (size_t)v->L * (size_t)v->E;
	v->rows += g->rows;
	v->phase_rows[ph] += g->rows;
	for (size_t i = 0; i < LE; i++) {
		v->act[i] += g->act[i];
		v->phase_act[(size_t)ph * LE + i] += g->act[i];
		v->mass[i] += g->mass[i];
	}
	for (size_t i = 0; i < (size_t)v->L * (size_t)v->P; i++) v->pairs[i] += g->pairs[i];
}

static int by_mass(const void *a, const void *b, void *arg) {
	const double *mass = arg;
	const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	if (mass[x] != mass[y]) return mass[x] > mass[y] ? -1 : 1;
	return (x > y) - (x < y);
}

// Every layer's ranking, cumulative mass, working set and top-10% share.
static void view_rank(obs_view *v, int32_t n10) {
	for (int32_t l = 0; l < v->L; l++) {
		int32_t *rk = v->rank + (size_t)l * v->E;
		double *cum = v->cum + (size_t)l * (v->E + 1), *mass = v->mass + (size_t)l * v->E;
		for (int32_t x = 0; x < v->E; x++) rk[x] = x;
		qsort_r(rk, (size_t)v->E, sizeof *rk, by_mass, mass);
		cum[0] = 0;
		for (int32_t k = 0; k < v->E; k++) cum[k + 1] = cum[k] + mass[rk[k]];
		const double total = cum[v->E];
		for (int i = 0; i < OBS_LEVELS; i++) {
			int32_t c = 0;
			while (total > 0 && c < v->E && !(cum[c] >= obs_levels[i] / 100.0 * total)) c++;
			v->ws[(size_t)l * OBS_LEVELS + i] = c;
		}
		v->top10[l] = total > 0 ? cum[n10] / total : 0;
		int lv = 0;
		while (lv < OBS_LEVELS - 1 && obs_levels[lv] != OBS_HOT_SHARE) lv++;
		for (int32_t k = 0; k < v->ws[(size_t)l * OBS_LEVELS + lv]; k++) v->hot[(size_t)l * v->E + rk[k]] = 1;
	}
}

bool obs_hot(const obs_view *v, int32_t l, int32_t x) { return v->hot[(size_t)l * v->E + x]; }

void obs_report_free(obs_report *r) {
	view_free(&r->all);
	for (int32_t d = 0; d < r->n_dom; d++) view_free(&r->dom[d]);
	r->n_dom = 0;
}

int obs_report_make(obs_report *r, const lane_experts *e) {
	memset(r, 0, sizeof *r);
	model_experts_view g;
	model_experts_group(e->counts, 0, &g);
	r->n10 = (g.n_experts + 9) / 10;
	if (view_new(&r->all, &g, "all")) return LANES_ENOMEM;
	for (int32_t s = 0; s < LANE_EXPERT_SLOTS; s++) {
		const bool named = s >= 1 && s <= e->n_named, other = s == LANE_EXPERT_SLOTS - 1;
		obs_view *dv = NULL;
		for (int ph = 0; ph < LANE_PHASE_COUNT; ph++) {
			model_experts_group(e->counts, s * LANE_PHASE_COUNT + ph, &g);
			view_add(&r->all, &g, ph);
			if (!(named || other) || !g.rows) continue;
			if (!dv) {
				dv = &r->dom[r->n_dom];
				if (view_new(dv, &g, e->name[s])) {
					obs_report_free(r);
					return LANES_ENOMEM;
				}
				r->n_dom++;
			}
			view_add(dv, &g, ph);
		}
	}
	view_rank(&r->all, r->n10);
	for (int32_t d = 0; d < r->n_dom; d++) view_rank(&r->dom[d], r->n10);
	return LANES_OK;
}

// ---- JSON -----------------------------------------------------------------------------------
static json_t *u64_array(const uint64_t *v, int64_t n) {
	json_t *a = json_array();
	for (int64_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer((json_int_t)v[i]));
	return a;
}

static json_t *real(double v) { return json_real(isfinite(v) ? v : 0); }

typedef struct {
	uint64_t count;
	int32_t i, j;
} pair_count;

static int by_count(const void *a, const void *b) {
	const pair_count *x = a, *y = b;
	if (x->count != y->count) return x->count > y->count ? -1 : 1;
	if (x->i != y->i) return x->i < y->i ? -1 : 1;
	return (x->j > y->j) - (x->j < y->j);
}

// The OBS_TOP_PAIRS pairs of layer l chosen together most: [[i, j, count], ...].
static json_t *top_pairs(const obs_view *v, int32_t l) {
	pair_count top[OBS_TOP_PAIRS + 1];
	int n = 0;
	const uint64_t *pc = v->pairs + (size_t)l * (size_t)v->P;
	for (int32_t i = 0; i < v->E; i++)
		for (int32_t j = i + 1; j < v->E; j++) {
			const uint64_t c = pc[model_expert_pair(v->E, i, j)];
			if (!c) continue;
			pair_count p = {c, i, j};
			if (n == OBS_TOP_PAIRS && by_count(&p, &top[n - 1]) >= 0) continue;
			int k = n < OBS_TOP_PAIRS ? n++ : n - 1;
			while (k > 0 && by_count(&p, &top[k - 1]) < 0) top[k] = top[k - 1], k--;
			top[k] = p;
		}
	json_t *a = json_array();
	for (int k = 0; a && k < n; k++) json_array_append_new(a, json_pack("[i, i, I]", top[k].i, top[k].j, (json_int_t)top[k].count));
	return a;
}

static json_t *layers_json(const obs_view *v, bool phases) {
	json_t *out = json_array();
	for (int32_t l = 0; out && l < v->L; l++) {
		const size_t at = (size_t)l * v->E;
		json_t *mass = json_array(), *rank = json_array(), *ws = json_object();
		for (int32_t x = 0; mass && rank && x < v->E; x++) {
			json_array_append_new(mass, real(v->mass[at + x]));
			json_array_append_new(rank, json_integer(v->rank[at + x]));
		}
		for (int i = 0; ws && i < OBS_LEVELS; i++) {
			char key[8];
			snprintf(key, sizeof key, "%d", obs_levels[i]);
			json_object_set_new(ws, key, json_integer(v->ws[(size_t)l * OBS_LEVELS + i]));
		}
		json_t *o = json_pack("{s:i, s:o, s:o*, s:o*, s:o, s:o*, s:o*}", "layer", l, "activations", u64_array(v->act + at, v->E),
				      "mass", mass, "ranking", rank, "top10_share", real(v->top10[l]), "working_set", ws, "pairs",
				      top_pairs(v, l));
		const size_t LE = (size_t)v->L * v->E;
		if (o && phases) {
			json_object_set_new(o, "prompt_activations", u64_array(v->phase_act + at, v->E));
			json_object_set_new(o, "generated_activations", u64_array(v->phase_act + LE + at, v->E));
		}
		if (!o || json_array_append_new(out, o)) {
			json_decref(out);
			return NULL;
		}
	}
	return out;
}

// Mass of v on the (layer, expert) cells where keep(l, x) holds, over all of v's mass.
static double mass_share(const obs_report *r, int32_t d, int mode) {
	const obs_view *v = &r->dom[d];
	double in = 0, total = 0;
	for (int32_t l = 0; l < v->L; l++)
		for (int32_t x = 0; x < v->E; x++) {
			const double m = v->mass[(size_t)l * v->E + x];
			total += m;
			int hot_in = 0;
			for (int32_t o = 0; o < r->n_dom; o++) hot_in += obs_hot(&r->dom[o], l, x);
			// mode 0: hot in every domain; mode 1: hot in this one alone
			if (mode == 0 ? hot_in == r->n_dom : hot_in == 1 && obs_hot(v, l, x)) in += m;
		}
	return total > 0 ? in / total : 0;
}

static double jaccard(const obs_view *a, const obs_view *b) {
	uint64_t both = 0, any = 0;
	for (int32_t l = 0; l < a->L; l++)
		for (int32_t x = 0; x < a->E; x++) {
			const bool ha = obs_hot(a, l, x), hb = obs_hot(b, l, x);
			both += ha && hb;
			any += ha || hb;
		}
	return any ? (double)both / (double)any : 0;
}

json_t *obs_experts_json(const lane_experts *e, const char *model_name) {
	obs_report r;
	if (obs_report_make(&r, e)) return NULL;
	const obs_view *a = &r.all;
	json_t *doms = json_object(), *jac = json_object(), *shared = json_object(), *own = json_object();
	for (int32_t d = 0; doms && d < r.n_dom; d++) {
		const obs_view *v = &r.dom[d];
		json_object_set_new(doms, v->name, json_pack("{s:I, s:I, s:I, s:o*}", "rows", (json_int_t)v->rows, "prompt_rows",
							    (json_int_t)v->phase_rows[LANE_PHASE_PROMPT], "generated_rows",
							    (json_int_t)v->phase_rows[LANE_PHASE_GENERATED], "layers", layers_json(v, false)));
		for (int32_t o = d + 1; jac && o < r.n_dom; o++) {
			char key[2 * LANE_DOMAIN_MAX + 2];
			// the pair's names in byte order, so a client finds the pair whatever order domains came in
			const bool ab = strcmp(v->name, r.dom[o].name) < 0;
			snprintf(key, sizeof key, "%s|%s", ab ? v->name : r.dom[o].name, ab ? r.dom[o].name : v->name);
			json_object_set_new(jac, key, real(jaccard(v, &r.dom[o])));
		}
		if (r.n_dom >= 2 && shared && own) {
			json_object_set_new(shared, v->name, real(mass_share(&r, d, 0)));
			json_object_set_new(own, v->name, real(mass_share(&r, d, 1)));
		}
	}
	json_t *o = json_pack("{s:s, s:i, s:i, s:I, s:I, s:I, s:I, s:o, s:o, s:o*, s:o*, s:o*, s:o*, s:o*}", "model", model_name,
			      "experts", a->E, "experts_per_token", a->K, "rows", (json_int_t)a->rows, "prompt_rows",
			      (json_int_t)a->phase_rows[LANE_PHASE_PROMPT], "generated_rows",
			      (json_int_t)a->phase_rows[LANE_PHASE_GENERATED], "window", (json_int_t)e->window, "seconds",
			      real(e->seconds), "uniform_top10_share", real((double)r.n10 / a->E), "layers", layers_json(a, true),
			      "domains", doms, "jaccard", jac, "shared_mass", shared, "own_mass", own);
	obs_report_free(&r);
	return o;
}

// ---- text -----------------------------------------------------------------------------------
static void print_view(FILE *f, const obs_view *v, int32_t n10, int32_t hot) {
	fprintf(f, "%-12s %llu rows (%llu prompt, %llu generated)\n", v->name, (unsigned long long)v->rows,
		(unsigned long long)v->phase_rows[LANE_PHASE_PROMPT], (unsigned long long)v->phase_rows[LANE_PHASE_GENERATED]);
	fprintf(f, "  layer  top10%%  (uniform %4.1f%%)  working set 50/80/90/95%%   hot experts (most mass first)\n",
		100.0 * n10 / v->E);
	for (int32_t l = 0; l < v->L; l++) {
		const int32_t *ws = v->ws + (size_t)l * OBS_LEVELS, *rk = v->rank + (size_t)l * v->E;
		fprintf(f, "  %5d  %5.1f%%                   %3d/%3d/%3d/%3d of %3d      ", l, 100 * v->top10[l], ws[0], ws[1], ws[2], ws[3],
			v->E);
		for (int32_t k = 0; k < hot && k < v->E; k++) fprintf(f, "%s%d", k ? " " : "", rk[k]);
		fprintf(f, "\n");
	}
}

void obs_experts_print(FILE *f, const lane_experts *e, const char *model_name) {
	obs_report r;
	if (obs_report_make(&r, e)) {
		fprintf(f, "out of memory for the report\n");
		return;
	}
	fprintf(f, "%s: %d experts, %d per token, %d layers\n", model_name, r.all.E, r.all.K, r.all.L);
	print_view(f, &r.all, r.n10, 8);
	for (int32_t d = 0; d < r.n_dom; d++) print_view(f, &r.dom[d], r.n10, 8);
	if (r.n_dom >= 2) {
		fprintf(f, "hot sets (%d%% of each layer's mass), Jaccard similarity:\n", OBS_HOT_SHARE);
		for (int32_t d = 0; d < r.n_dom; d++)
			for (int32_t o = d + 1; o < r.n_dom; o++)
				fprintf(f, "  %s | %s: %.3f\n", r.dom[d].name, r.dom[o].name, jaccard(&r.dom[d], &r.dom[o]));
		fprintf(f, "mass on experts hot in every domain / in this domain alone:\n");
		for (int32_t d = 0; d < r.n_dom; d++)
			fprintf(f, "  %-12s %5.1f%% / %5.1f%%\n", r.dom[d].name, 100 * mass_share(&r, d, 0), 100 * mass_share(&r, d, 1));
	}
	obs_report_free(&r);
}
