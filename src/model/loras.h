// model/loras: the LoRA adapters a server serves, by name. Each name has a current version
// (a model_lora the registry holds a reference on); a request binds to the version current
// when it arrives and holds its own reference until it ends, so loading a new version,
// unloading or replacing never frees memory a running request uses: an old version is
// listed as retired until its last reference goes, and freed then. Thread-safe throughout,
// and nothing here waits on the engine.
#ifndef LANES_MODEL_LORAS_H
#define LANES_MODEL_LORAS_H

#include "model/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MODEL_LORA_NAME_MAX 64   // bytes of a name: [A-Za-z0-9._-]
#define MODEL_LORAS_MAX 64        // most names at once (--max-lora's ceiling)
#define MODEL_LORA_SCALE_MAX 100 // largest |scale| a request or a load may give

enum model_loras_state {
	MODEL_LORAS_LOADING, // the name is taken, its file is being read: requests get 404
	MODEL_LORAS_READY,   // requests bind to it
	MODEL_LORAS_RETIRED, // unloaded or replaced: only the requests already bound use it
};

// One entry as model_loras_list copies it.
typedef struct {
	char name[MODEL_LORA_NAME_MAX + 1];
	char path[1024];
	uint32_t id;              // the name's number (llama-server's "id"): the smallest free when it was loaded
	uint32_t version;         // 1 at the first load, +1 at each replacement
	enum model_loras_state state;
	bool replacing;           // ready, and a new version is loading
	float scale;              // what a request that names it without a scale gets
	uint64_t lora_id;         // model_lora_id (0 while loading)
	model_lora_info info;     // zero while loading
	uint64_t requests;        // requests bound to the name so far (all its versions)
	int64_t created;          // unix seconds: when this version was published
} model_loras_entry;

typedef struct model_loras model_loras;

// A registry for adapters of m holding at most max_names names. 0 or LANES_ENOMEM.
int model_loras_new(model_loras **out, const model *m, int max_names);
// Drops the registry's references (accepts NULL). Every request bound to an adapter must have
// ended, so that no retired version outlives it.
void model_loras_free(model_loras *r);
int model_loras_max(const model_loras *r);

// True when name may name an adapter: 1..MODEL_LORA_NAME_MAX of [A-Za-z0-9._-].
bool model_lora_name_ok(const char *name);

// Takes name for a load of path at scale (NAN: 1, or the replaced version's) as a new name,
// or for a new version of it (replace, when it is ready and not already replacing); *ticket
// names the load. LANES_EINVAL (a bad name),
// LANES_EBUSY (taken, or loading), LANES_ENOTFOUND (replace of a name not loaded),
// LANES_ELIMIT (max_names reached); err says which.
int model_loras_reserve(model_loras *r, const char *name, const char *path, float scale, bool replace, uint64_t *ticket,
		      char *err, size_t errlen);
// Ends the load ticket: a becomes the name's current version (the registry takes over the
// caller's reference; a retired version stays listed until its last request ends), or, with
// a NULL, the load failed and the name is as it was before. A name unloaded meanwhile gets
// nothing: a is dropped. *version: the version published, 0 for none (may be NULL).
void model_loras_publish(model_loras *r, const char *name, uint64_t ticket, model_lora *a, uint32_t *version);
// Unloads name: at once no request binds to it; its version is retired and freed when the
// last request holding it ends. 0, LANES_ENOTFOUND or LANES_EBUSY (still loading). *freed:
// whether it went at once (no request held it).
int model_loras_remove(model_loras *r, const char *name, bool *freed);

// The current version of the adapter called name (or numbered id, when name is NULL) with a
// reference the caller drops with model_lora_free, its scale, and its name into name_out (may
// be NULL); counts one request. 0 or LANES_ENOTFOUND.
int model_loras_bind(model_loras *r, const char *name, int64_t id, const model_lora **a, float *scale, char *name_out);
// Whether name is loaded (ready). Thread-safe, as everything here.
bool model_loras_has(model_loras *r, const char *name);
// Whether name is taken: an adapter loading or loaded under it. Thread-safe.
bool model_loras_named(model_loras *r, const char *name);
// Whether an adapter has ever been loaded.
bool model_loras_ever(model_loras *r);
// A copy of every entry (loading, ready, then retired), malloc'd into *out. Returns the count
// (0 with *out NULL when there is none), or LANES_ENOMEM.
int model_loras_list(model_loras *r, model_loras_entry **out);

#endif
