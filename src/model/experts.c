// model/experts: the MoE observer's counters — the choices each MoE layer's router made in a
// pass (kept by the pass into room allocated once) and the per-group counts added from them:
// activations, routing mass and co-chosen pairs per expert. Nothing here changes a logit.
#include "model/model_int.h"

#include <stdlib.h>
#include <string.h>

struct model_routes {
	int32_t n_layers, K;
	int64_t max_rows, n; // rows the room holds; rows of the last pass
	int32_t *ids;        // [n_layers][max_rows][K]
	float *w;            // [n_layers][max_rows][K]
};

int model_routes_new(model_routes **out, const model_hparams *hp, int64_t max_rows, char *err, size_t errlen) {
	*out = NULL;
	if (!hp->n_experts || hp->n_experts_used < 1)
		return base_seterr(err, errlen, LANES_EINVAL, "experts: the model has no experts");
	uint64_t cells;
	if (max_rows < 1 || !ck_mul((uint64_t)max_rows, (uint64_t)hp->n_layers * (uint64_t)hp->n_experts_used, &cells) ||
	    cells > SIZE_MAX / 8)
		return base_seterr(err, errlen, LANES_EINVAL, "experts: room for %lld rows is too large", (long long)max_rows);
	model_routes *r = calloc(1, sizeof *r);
	if (r) {
		*r = (model_routes){.n_layers = hp->n_layers, .K = hp->n_experts_used, .max_rows = max_rows};
		r->ids = calloc((size_t)cells, sizeof *r->ids);
		r->w = calloc((size_t)cells, sizeof *r->w);
	}
	if (!r || !r->ids || !r->w) {
		model_routes_free(r);
		return base_seterr(err, errlen, LANES_ENOMEM, "experts: out of memory");
	}
	*out = r;
	return LANES_OK;
}

void model_routes_free(model_routes *r) {
	if (!r) return;
	free(r->ids);
	free(r->w);
	free(r);
}

void model_routes_put(model_routes *r, int32_t l, const int32_t *ids, const float *w, int64_t n) {
	LANES_ASSERT(l >= 0 && l < r->n_layers && n <= r->max_rows);
	const size_t at = (size_t)l * (size_t)r->max_rows * (size_t)r->K, cnt = (size_t)n * (size_t)r->K;
	memcpy(r->ids + at, ids, cnt * sizeof *ids);
	memcpy(r->w + at, w, cnt * sizeof *w);
	r->n = n;
}

int64_t model_routes_rows(const model_routes *r) { return r->n; }

const int32_t *model_routes_ids(const model_routes *r, int32_t l) {
	return r->ids + (size_t)l * (size_t)r->max_rows * (size_t)r->K;
}

const float *model_routes_weights(const model_routes *r, int32_t l) {
	return r->w + (size_t)l * (size_t)r->max_rows * (size_t)r->K;
}

// ---- counters -------------------------------------------------------------------------------
struct model_experts {
	int32_t G, L, E, K;
	int64_t P;        // pairs per layer
	uint64_t *rows;   // [G]
	uint64_t *act;    // [G][L][E]
	double *mass;     // [G][L][E]
	uint64_t *pairs;  // [G][L][P]
};

int model_experts_new(model_experts **out, const model_hparams *hp, int32_t n_groups, char *err, size_t errlen) {
	*out = NULL;
	if (!hp->n_experts || hp->n_experts_used < 1)
		return base_seterr(err, errlen, LANES_EINVAL, "experts: the model has no experts");
	if (n_groups < 1) return base_seterr(err, errlen, LANES_EINVAL, "experts: %d groups", n_groups);
	const uint64_t E = (uint64_t)hp->n_experts, P = E * (E - 1) / 2;
	uint64_t cells, pcells;
	if (!ck_mul((uint64_t)n_groups * (uint64_t)hp->n_layers, E, &cells) ||
	    !ck_mul((uint64_t)n_groups * (uint64_t)hp->n_layers, P, &pcells) || cells > SIZE_MAX / 8 || pcells > SIZE_MAX / 8)
		return base_seterr(err, errlen, LANES_EINVAL, "experts: counters for %d groups are too large", n_groups);
	model_experts *c = calloc(1, sizeof *c);
	if (c) {
		*c = (model_experts){.G = n_groups, .L = hp->n_layers, .E = hp->n_experts, .K = hp->n_experts_used, .P = (int64_t)P};
		c->rows = calloc((size_t)n_groups, sizeof *c->rows);
		c->act = calloc((size_t)cells, sizeof *c->act);
		c->mass = calloc((size_t)cells, sizeof *c->mass);
		c->pairs = calloc(pcells ? (size_t)pcells : 1, sizeof *c->pairs);
	}
	if (!c || !c->rows || !c->act || !c->mass || !c->pairs) {
		model_experts_free(c);
		return base_seterr(err, errlen, LANES_ENOMEM, "experts: out of memory for the counters");
	}
	*out = c;
	return LANES_OK;
}

void model_experts_free(model_experts *c) {
	if (!c) return;
	free(c->rows), free(c->act), free(c->mass), free(c->pairs);
	free(c);
}

static size_t cells_of(const model_experts *c) { return (size_t)c->G * (size_t)c->L * (size_t)c->E; }
static size_t pcells_of(const model_experts *c) { return (size_t)c->G * (size_t)c->L * (size_t)c->P; }

void model_experts_clear(model_experts *c) {
	memset(c->rows, 0, (size_t)c->G * sizeof *c->rows);
	memset(c->act, 0, cells_of(c) * sizeof *c->act);
	memset(c->mass, 0, cells_of(c) * sizeof *c->mass);
	memset(c->pairs, 0, pcells_of(c) * sizeof *c->pairs);
}

void model_experts_add(model_experts *c, const model_routes *r, const int32_t *group) {
	LANES_ASSERT(r->n_layers == c->L && r->K == c->K);
	const int32_t E = c->E, K = c->K;
	for (int64_t i = 0; i < r->n; i++)
		if (group[i] >= 0 && group[i] < c->G) c->rows[group[i]]++;
	for (int32_t l = 0; l < c->L; l++) {
		const int32_t *ids = model_routes_ids(r, l);
		const float *w = model_routes_weights(r, l);
		for (int64_t i = 0; i < r->n; i++) {
			const int32_t g = group[i];
			if (g < 0 || g >= c->G) continue;
			const size_t base = ((size_t)g * (size_t)c->L + (size_t)l) * (size_t)E;
			uint64_t *pairs = c->pairs + ((size_t)g * (size_t)c->L + (size_t)l) * (size_t)c->P;
			const int32_t *id = ids + i * K;
			for (int32_t k = 0; k < K; k++) {
				LANES_ASSERT(id[k] >= 0 && id[k] < E);
				c->act[base + (size_t)id[k]]++;
				c->mass[base + (size_t)id[k]] += (double)w[i * K + k];
				for (int32_t k2 = k + 1; k2 < K; k2++) {
					const int32_t a = id[k] < id[k2] ? id[k] : id[k2], b = id[k] < id[k2] ? id[k2] : id[k];
					pairs[model_expert_pair(E, a, b)]++;
				}
			}
		}
	}
}

int model_experts_copy(model_experts *dst, const model_experts *src) {
	if (dst->G != src->G || dst->L != src->L || dst->E != src->E || dst->K != src->K) return LANES_EINVAL;
	memcpy(dst->rows, src->rows, (size_t)src->G * sizeof *dst->rows);
	memcpy(dst->act, src->act, cells_of(src) * sizeof *dst->act);
	memcpy(dst->mass, src->mass, cells_of(src) * sizeof *dst->mass);
	memcpy(dst->pairs, src->pairs, pcells_of(src) * sizeof *dst->pairs);
	return LANES_OK;
}

void model_experts_group(const model_experts *c, int32_t g, model_experts_view *out) {
	LANES_ASSERT(g >= 0 && g < c->G);
	const size_t cell = (size_t)g * (size_t)c->L * (size_t)c->E;
	*out = (model_experts_view){.n_layers = c->L, .n_experts = c->E, .n_used = c->K, .n_pairs = c->P, .n_groups = c->G,
				    .rows = c->rows[g], .act = c->act + cell, .mass = c->mass + cell,
				    .pairs = c->pairs + (size_t)g * (size_t)c->L * (size_t)c->P};
}
