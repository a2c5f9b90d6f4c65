// observe (internal): the counters summed into the views a report reads — all rows, and each
// domain — with every layer's ranking, cumulative mass and working set, shared by report.c and svg.c.
#ifndef LANES_OBSERVE_INT_H
#define LANES_OBSERVE_INT_H

#include "observe/observe.h"

#define OBS_LEVELS 4
extern const int obs_levels[OBS_LEVELS]; // the working set's percentages: 50, 80, 90, 95

typedef struct {
	char name[LANE_DOMAIN_MAX + 1];
	int32_t L, E, K;
	int64_t P;                    // pairs per layer
	uint64_t rows, phase_rows[LANE_PHASE_COUNT];
	uint64_t *act;                // [L][E]
	uint64_t *phase_act;          // [LANE_PHASE_COUNT][L][E]
	double *mass;                 // [L][E]
	uint64_t *pairs;              // [L][P]
	int32_t *rank;                // [L][E]: experts by mass, largest first (ties: the lower id)
	double *cum;                  // [L][E + 1]: mass of the first k in rank order
	int32_t *ws;                  // [L][OBS_LEVELS]: the working set at each level
	double *top10;                // [L]: share of the mass on the first ceil(E/10)
	uint8_t *hot;                 // [L][E]: 1 for the experts of the working set at OBS_HOT_SHARE%
} obs_view;

typedef struct {
	obs_view all;
	obs_view dom[LANE_EXPERT_DOMAINS + 1]; // the named domains with rows, then "other" when it has rows
	int32_t n_dom;
	int32_t n10;                  // experts in a layer's top 10%
} obs_report;

// Sums e's groups into r's views. 0, or LANES_ENOMEM (r is then freed).
int obs_report_make(obs_report *r, const lane_experts *e);
void obs_report_free(obs_report *r);
// Whether expert x of layer l is in v's hot set (the working set at OBS_HOT_SHARE%).
bool obs_hot(const obs_view *v, int32_t l, int32_t x);

#endif
