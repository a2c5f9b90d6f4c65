// plan: the memory planner — from a model's metadata and a memory budget, how many lanes and
// how long a window per lane fit beside the weights and the compute reserve, for a KV type;
// and when nothing fits, what does not and by how much. Also parses sizes ("1.5GiB").
#ifndef LANES_PLAN_H
#define LANES_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/kv.h"
#include "lanes/lanes.h"
#include "model/model.h"

// Parses a byte count: a decimal number (fractions allowed) and an optional unit, with an
// optional space between: B, KiB/MiB/GiB/TiB (powers of 1024) or KB/MB/GB/TB (powers of
// 1000), case-insensitive. A bare number is bytes; the result is rounded to a whole byte.
// Returns 0, or LANES_EINVAL (empty, negative, junk, or 2^63 bytes and more).
int plan_parse_size(const char *s, uint64_t *out);
// Writes b as "512 B", "22.0 KiB", "607 MiB", "1.1 GiB" into buf; returns buf.
char *plan_format_size(uint64_t b, char *buf, size_t n);
// MemAvailable of /proc/meminfo in bytes; 0 when unknown.
uint64_t plan_available_memory(void);

// What the planner needs to know of a model.
typedef struct {
	model_hparams hp;   // rope.freq_factors is NULL
	model_memory mem;   // the weights' memory for the default kernel set
} plan_model;

// From the file's metadata alone (model_load_meta); model_load's codes and messages.
int plan_model_load(plan_model *out, const char *path, char *err, size_t errlen);
// From a loaded model: the same figures as plan_model_load of its file.
void plan_model_of(plan_model *out, const model *m);

#define PLAN_WINDOW_DEFAULT_CAP 32768 // the window cap when the model states no context length
#define PLAN_WINDOW_FLOOR 256         // the least window that counts as fitting
#define PLAN_WINDOW_GOOD 2048         // the window that several lanes must reach to be chosen

typedef struct {
	uint64_t weights_bytes;         // model_memory.total_bytes
	uint64_t kv_bytes_per_token;    // K and V of every layer that keeps them, scales included
	uint64_t kv_local_bytes_per_token; // of which a sliding-window model's local layers (0: none)
	int32_t local_tokens;           // the local layers' tokens a lane keeps (lane_local_tokens at this window)
	uint64_t compute_reserve_bytes; // lane_compute_bytes at these lanes and this window
	uint64_t state_bytes_per_lane;  // a recurrent model's state, its capture and checkpoint (kv_state_bytes_per_seq), fixed per lane; else 0
	uint64_t kv_bytes;              // (kv_bytes_per_token * window + state_bytes_per_lane) * lanes, the
					// local layers counted for local_tokens instead of the window
	uint64_t total_bytes;           // weights + kv + compute reserve
	uint64_t budget_bytes;
	enum kv_type kv_type;
	int32_t page_tokens;
	int32_t lanes;                  // lanes planned (when nothing fits: the ones tried)
	int32_t window;                 // tokens per lane, a multiple of page_tokens (when nothing
					// fits: the least window it needed, and the figures above are for it)
	int32_t window_cap;             // the longest window planned for: n_ctx_train in whole pages
	bool fits;                      // total_bytes <= budget_bytes
	char reason[320];               // empty when it fits, else what does not fit and by how much
} plan_result;

// Plans pm under budget bytes. lanes: 1..LANE_SNAP_MAX_LANES, or 0 to choose: the most of
// {16, 8, 4, 2, 1} that get the whole window cap, else the most of {4, 2, 1} whose window
// reaches min(cap, PLAN_WINDOW_GOOD), else 1 lane with any window >= min(cap,
// PLAN_WINDOW_FLOOR). With lanes given the window is the longest that fits (at most the
// cap) and it fits when >= min(cap, PLAN_WINDOW_FLOOR). cfg: the lane configuration the
// server runs (kv_type, page_tokens, threads, draft_max, piece; its lanes, ctx and window
// fields are ignored). Not fitting is a result (fits false), not an error. Returns 0, or
// LANES_EINVAL (lanes out of range, page_tokens < 1, a KV type that cannot hold this
// model's rows: message in err).
int plan_make(plan_result *out, const plan_model *pm, uint64_t budget, int32_t lanes, const lane_config *cfg,
	      char *err, size_t errlen);
// The figures of exactly lanes lanes (1..LANE_SNAP_MAX_LANES) of window tokens (>= 1; taken
// as whole pages) under budget; fits and reason as plan_make says them. Errors as plan_make.
int plan_at(plan_result *out, const plan_model *pm, uint64_t budget, int32_t lanes, int32_t window,
	    const lane_config *cfg, char *err, size_t errlen);

#endif
