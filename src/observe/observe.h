// observe: reports over the expert observer's counters (lane_host_experts) — per layer and per
// domain: activations and routing mass, the hot-to-cold ranking, the top 10%'s share of the mass,
// the pairs chosen together most, the working-set curve; across domains the Jaccard similarity
// of their hot sets and the mass they share — as JSON, as text, and as an SVG heat map.
// Computed on the caller's thread from a copy: nothing here touches the engine.
#ifndef LANES_OBSERVE_H
#define LANES_OBSERVE_H

#include <jansson.h>
#include <stdio.h>

#include "lanes/lanes.h"

#define OBS_TOP_PAIRS 32 // pairs a layer lists
#define OBS_HOT_SHARE 90 // a hot set covers this percentage of a layer's mass

// The report as JSON (a new reference; NULL when out of memory):
// {"model", "experts", "experts_per_token", "rows", "prompt_rows", "generated_rows", "window", "seconds",
//  "uniform_top10_share", "layers": [LAYER], "domains": {NAME: {"rows", "prompt_rows", "generated_rows",
//  "layers": [LAYER]}}, "jaccard": {"A|B": x}, "shared_mass": {NAME: x}, "own_mass": {NAME: x}}
// LAYER = {"layer", "activations": [E], "mass": [E], "ranking": [E ids, hot first], "top10_share",
//  "working_set": {"50", "80", "90", "95"}, "pairs": [[i, j, count]]}; the top-level layers add
// "prompt_activations" and "generated_activations". The ranking orders experts by mass (ties: the
// lower id); the working set at p% is how many of them, in that order, first hold p% of the mass;
// a hot set is the experts of the working set at OBS_HOT_SHARE% (of every layer); jaccard compares
// two domains' hot sets as sets of (layer, expert); shared_mass is the share of a domain's mass on
// experts hot in every domain, own_mass on experts hot in that domain alone. Domains are the named
// ones and "other" that have rows; unlabeled rows count in the totals only.
json_t *obs_experts_json(const lane_experts *e, const char *model_name);
// The same report as text lines for a terminal.
void obs_experts_print(FILE *f, const lane_experts *e, const char *model_name);
// An SVG image: a heat map of experts x layers for all rows and for each domain (each cell an
// expert's activations against the uniform share), and the working-set curves. malloc'd,
// NUL-terminated, its length in *len; NULL when out of memory. Text in it is escaped.
char *obs_experts_svg(const lane_experts *e, const char *model_name, size_t *len);

#endif
