// model/loras: the registry of named LoRA adapters — names taken while their file loads,
// current versions held by the registry, retired versions listed until the last request
// holding one ends (the adapter's free callback takes it off the list). A reference is never
// dropped under the registry's lock: the last one runs that callback, which takes the lock.
#include "model/loras.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
	model_loras_entry info;
	const model_lora *a;      // ready: the current version (the registry's reference)
	char next_path[1024];     // replacing: the new version's file and scale
	float next_scale;
	uint64_t ticket;          // the load in progress (loading or replacing) that may publish
} entry;

struct model_loras {
	pthread_mutex_t mu;
	const model *m;
	int max;
	entry e[MODEL_LORAS_MAX];    // names, in the order they were taken
	int n;
	model_loras_entry *old;       // retired versions still held by requests
	int n_old, cap_old;
	uint64_t next_ticket;
	bool ever;
};

// Under mu: takes entry i off the list, keeping the others' order.
static void unlist(model_loras *r, int i) {
	memmove(&r->e[i], &r->e[i + 1], (size_t)(r->n - i - 1) * sizeof r->e[0]);
	r->n--;
}

bool model_lora_name_ok(const char *name) {
	const size_t n = name ? strlen(name) : 0;
	if (n < 1 || n > MODEL_LORA_NAME_MAX) return false;
	for (size_t i = 0; i < n; i++) {
		const char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

int model_loras_new(model_loras **out, const model *m, int max_names) {
	*out = NULL;
	model_loras *r = calloc(1, sizeof *r);
	if (!r) return LANES_ENOMEM;
	pthread_mutex_init(&r->mu, NULL);
	r->m = m;
	r->max = max_names < 1 ? 1 : max_names > MODEL_LORAS_MAX ? MODEL_LORAS_MAX : max_names;
	*out = r;
	return 0;
}

void model_loras_free(model_loras *r) {
	if (!r) return;
	const model_lora *drop[MODEL_LORAS_MAX];
	int nd = 0;
	pthread_mutex_lock(&r->mu);
	for (int i = 0; i < r->n; i++)
		if (r->e[i].a) drop[nd++] = r->e[i].a;
	r->n = 0;
	pthread_mutex_unlock(&r->mu);
	for (int i = 0; i < nd; i++) model_lora_free(drop[i]);
	pthread_mutex_destroy(&r->mu);
	free(r->old);
	free(r);
}

int model_loras_max(const model_loras *r) { return r->max; }

// Under mu: the entry called name, or NULL.
static entry *find(model_loras *r, const char *name) {
	for (int i = 0; i < r->n; i++)
		if (!strcmp(r->e[i].info.name, name)) return &r->e[i];
	return NULL;
}

// The adapter's last reference went: its retired record goes with it.
static void on_free(void *arg, const model_lora *a) {
	model_loras *r = arg;
	const uint64_t id = model_lora_id(a);
	pthread_mutex_lock(&r->mu);
	for (int i = 0; i < r->n_old; i++)
		if (r->old[i].lora_id == id) {
			r->old[i] = r->old[--r->n_old];
			break;
		}
	pthread_mutex_unlock(&r->mu);
}

// Under mu: e's current version joins the retired list; returns the reference to drop
// (after unlocking). NULL when there is no room to list it: it is dropped unlisted.
static const model_lora *retire(model_loras *r, entry *e) {
	const model_lora *a = e->a;
	e->a = NULL;
	if (!a) return NULL;
	if (r->n_old == r->cap_old) {
		const int cap = r->cap_old ? 2 * r->cap_old : 8;
		model_loras_entry *p = realloc(r->old, (size_t)cap * sizeof *p);
		if (!p) return a;
		r->old = p;
		r->cap_old = cap;
	}
	model_loras_entry *o = &r->old[r->n_old++];
	*o = e->info;
	o->state = MODEL_LORAS_RETIRED;
	o->replacing = false;
	return a;
}

// Under mu: whether a name has number id.
static bool id_taken(const model_loras *r, uint32_t id) {
	for (int i = 0; i < r->n; i++)
		if (r->e[i].info.id == id) return true;
	return false;
}

int model_loras_reserve(model_loras *r, const char *name, const char *path, float scale, bool replace, uint64_t *ticket,
		      char *err, size_t errlen) {
	if (!model_lora_name_ok(name))
		return base_seterr(err, errlen, LANES_EINVAL, "an adapter's name is 1 to %d letters, digits, '.', '_' or '-'",
				   MODEL_LORA_NAME_MAX);
	int rc = 0;
	pthread_mutex_lock(&r->mu);
	entry *e = find(r, name);
	if (replace) {
		if (!e) rc = base_seterr(err, errlen, LANES_ENOTFOUND, "no adapter called '%s' is loaded: there is nothing to replace", name);
		else if (e->info.state != MODEL_LORAS_READY || e->info.replacing)
			rc = base_seterr(err, errlen, LANES_EBUSY, "the adapter '%s' is loading: wait for it to end", name);
		else {
			e->info.replacing = true;
			snprintf(e->next_path, sizeof e->next_path, "%s", path);
			e->next_scale = isnan(scale) ? e->info.scale : scale;
			e->ticket = *ticket = ++r->next_ticket;
		}
	} else if (e) {
		rc = base_seterr(err, errlen, LANES_EBUSY, "an adapter called '%s' is %s: DELETE it first, or send \"replace\": true", name,
				 e->info.state == MODEL_LORAS_LOADING ? "loading" : "loaded");
	} else if (r->n >= r->max) {
		rc = base_seterr(err, errlen, LANES_ELIMIT, "%d adapters are loaded, the most it holds", r->n);
	} else {
		// the smallest number no loaded name has: ids run 0..n-1 as llama-server's list does
		uint32_t id = 0;
		while (id_taken(r, id)) id++;
		e = &r->e[r->n++];
		memset(e, 0, sizeof *e);
		snprintf(e->info.name, sizeof e->info.name, "%s", name);
		snprintf(e->info.path, sizeof e->info.path, "%s", path);
		e->info.scale = isnan(scale) ? 1.0f : scale;
		e->info.state = MODEL_LORAS_LOADING;
		e->info.id = id;
		e->ticket = *ticket = ++r->next_ticket;
	}
	pthread_mutex_unlock(&r->mu);
	return rc;
}

void model_loras_publish(model_loras *r, const char *name, uint64_t ticket, model_lora *a, uint32_t *version) {
	if (a) model_lora_on_free(a, on_free, r); // before anyone else can hold it
	const model_lora *drop = NULL;
	uint32_t v = 0;
	pthread_mutex_lock(&r->mu);
	entry *e = find(r, name);
	if (e && e->ticket != ticket) e = NULL; // unloaded (and maybe taken again) while this loaded
	if (!e) {
		drop = a;
	} else if (e->info.state == MODEL_LORAS_LOADING) {
		if (a) {
			e->a = a;
			e->info.state = MODEL_LORAS_READY;
			e->info.version = 1;
			r->ever = true;
		} else {
			unlist(r, (int)(e - r->e)); // a failed first load frees the name
			e = NULL;
		}
	} else if (a) {
		drop = retire(r, e);
		e->a = a;
		e->info.version++;
		snprintf(e->info.path, sizeof e->info.path, "%s", e->next_path);
		e->info.scale = e->next_scale;
	}
	if (e) e->info.replacing = false, e->ticket = 0;
	if (e && a) {
		e->info.lora_id = model_lora_id(a);
		model_lora_info_of(a, &e->info.info);
		e->info.created = (int64_t)time(NULL);
		v = e->info.version;
	}
	pthread_mutex_unlock(&r->mu);
	model_lora_free(drop);
	if (version) *version = v;
}

int model_loras_remove(model_loras *r, const char *name, bool *freed) {
	*freed = false;
	pthread_mutex_lock(&r->mu);
	entry *e = find(r, name);
	if (!e || e->info.state == MODEL_LORAS_LOADING) {
		pthread_mutex_unlock(&r->mu);
		return e ? LANES_EBUSY : LANES_ENOTFOUND;
	}
	const uint64_t id = e->info.lora_id;
	const model_lora *drop = retire(r, e);
	unlist(r, (int)(e - r->e)); // a replacement loading now publishes into nothing
	pthread_mutex_unlock(&r->mu);
	model_lora_free(drop);
	pthread_mutex_lock(&r->mu);
	*freed = true;
	for (int i = 0; i < r->n_old; i++) *freed &= r->old[i].lora_id != id;
	pthread_mutex_unlock(&r->mu);
	return 0;
}

int model_loras_bind(model_loras *r, const char *name, int64_t id, const model_lora **a, float *scale, char *name_out) {
	*a = NULL;
	pthread_mutex_lock(&r->mu);
	entry *e = NULL;
	for (int i = 0; i < r->n && !e; i++)
		if (r->e[i].info.state == MODEL_LORAS_READY && (name ? !strcmp(r->e[i].info.name, name) : r->e[i].info.id == id)) e = &r->e[i];
	if (e) {
		*a = model_lora_ref(e->a);
		*scale = e->info.scale;
		e->info.requests++;
		if (name_out) memcpy(name_out, e->info.name, sizeof e->info.name);
	}
	pthread_mutex_unlock(&r->mu);
	return e ? 0 : LANES_ENOTFOUND;
}

bool model_loras_has(model_loras *r, const char *name) {
	pthread_mutex_lock(&r->mu);
	const entry *e = find(r, name);
	const bool ok = e && e->info.state == MODEL_LORAS_READY;
	pthread_mutex_unlock(&r->mu);
	return ok;
}

bool model_loras_named(model_loras *r, const char *name) {
	pthread_mutex_lock(&r->mu);
	const entry *e = find(r, name);
	const bool taken = e && e->info.state != MODEL_LORAS_RETIRED;
	pthread_mutex_unlock(&r->mu);
	return taken;
}

bool model_loras_ever(model_loras *r) {
	pthread_mutex_lock(&r->mu);
	const bool ever = r->ever;
	pthread_mutex_unlock(&r->mu);
	return ever;
}

int model_loras_list(model_loras *r, model_loras_entry **out) {
	*out = NULL;
	pthread_mutex_lock(&r->mu);
	const int n = r->n + r->n_old;
	model_loras_entry *v = n ? malloc((size_t)n * sizeof *v) : NULL;
	if (v) {
		for (int i = 0; i < r->n; i++) v[i] = r->e[i].info;
		if (r->n_old) memcpy(v + r->n, r->old, (size_t)r->n_old * sizeof *v);
	}
	pthread_mutex_unlock(&r->mu);
	if (n && !v) return LANES_ENOMEM;
	*out = v;
	return n;
}
