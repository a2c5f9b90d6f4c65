// server/adapters: the registry of named LoRA adapters — names taken while their file loads,
// current versions held by the registry, retired versions listed until the last request
// holding one ends (the adapter's free callback takes it off the list). A reference is never
// dropped under the registry's lock: the last one runs that callback, which takes the lock.
#include "server/adapters.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
	srv_lora_info info;
	const model_lora *a;      // ready: the current version (the registry's reference)
	char next_path[1024];     // replacing: the new version's file and scale
	float next_scale;
	uint64_t ticket;          // the load in progress (loading or replacing) that may publish
} entry;

struct srv_loras {
	pthread_mutex_t mu;
	const model *m;
	int max;
	entry e[SRV_LORA_MAX];    // names, in the order they were taken
	int n;
	srv_lora_info *old;       // retired versions still held by requests
	int n_old, cap_old;
	uint64_t next_ticket;
	bool ever;
};

// Under mu: takes entry i off the list, keeping the others' order.
static void unlist(srv_loras *r, int i) {
	memmove(&r->e[i], &r->e[i + 1], (size_t)(r->n - i - 1) * sizeof r->e[0]);
	r->n--;
}

bool srv_lora_name_ok(const char *name) {
	const size_t n = name ? strlen(name) : 0;
	if (n < 1 || n > SRV_LORA_NAME_MAX) return false;
	for (size_t i = 0; i < n; i++) {
		const char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

int srv_loras_new(srv_loras **out, const model *m, int max_names) {
	*out = NULL;
	srv_loras *r = calloc(1, sizeof *r);
	if (!r) return LANES_ENOMEM;
	pthread_mutex_init(&r->mu, NULL);
	r->m = m;
	r->max = max_names < 1 ? 1 : max_names > SRV_LORA_MAX ? SRV_LORA_MAX : max_names;
	*out = r;
	return 0;
}

void srv_loras_free(srv_loras *r) {
	if (!r) return;
	const model_lora *drop[SRV_LORA_MAX];
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

int srv_loras_max(const srv_loras *r) { return r->max; }

// Under mu: the entry called name, or NULL.
static entry *find(srv_loras *r, const char *name) {
	for (int i = 0; i < r->n; i++)
		if (!strcmp(r->e[i].info.name, name)) return &r->e[i];
	return NULL;
}

// The adapter's last reference went: its retired record goes with it.
static void on_free(void *arg, const model_lora *a) {
	srv_loras *r = arg;
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
static const model_lora *retire(srv_loras *r, entry *e) {
	const model_lora *a = e->a;
	e->a = NULL;
	if (!a) return NULL;
	if (r->n_old == r->cap_old) {
		const int cap = r->cap_old ? 2 * r->cap_old : 8;
		srv_lora_info *p = realloc(r->old, (size_t)cap * sizeof *p);
		if (!p) return a;
		r->old = p;
		r->cap_old = cap;
	}
	srv_lora_info *o = &r->old[r->n_old++];
	*o = e->info;
	o->state = SRV_LORA_RETIRED;
	o->replacing = false;
	return a;
}

// Under mu: whether a name has number id.
static bool id_taken(const srv_loras *r, uint32_t id) {
	for (int i = 0; i < r->n; i++)
		if (r->e[i].info.id == id) return true;
	return false;
}

int srv_loras_reserve(srv_loras *r, const char *name, const char *path, float scale, bool replace, uint64_t *ticket,
		      char *err, size_t errlen) {
	if (!srv_lora_name_ok(name))
		return base_seterr(err, errlen, LANES_EINVAL, "an adapter's name is 1 to %d letters, digits, '.', '_' or '-'",
				   SRV_LORA_NAME_MAX);
	int rc = 0;
	pthread_mutex_lock(&r->mu);
	entry *e = find(r, name);
	if (replace) {
		if (!e) rc = base_seterr(err, errlen, LANES_ENOTFOUND, "no adapter called '%s' is loaded: there is nothing to replace", name);
		else if (e->info.state != SRV_LORA_READY || e->info.replacing)
			rc = base_seterr(err, errlen, LANES_EBUSY, "the adapter '%s' is loading: wait for it to end", name);
		else {
			e->info.replacing = true;
			snprintf(e->next_path, sizeof e->next_path, "%s", path);
			e->next_scale = isnan(scale) ? e->info.scale : scale;
			e->ticket = *ticket = ++r->next_ticket;
		}
	} else if (e) {
		rc = base_seterr(err, errlen, LANES_EBUSY, "an adapter called '%s' is %s: DELETE it first, or send \"replace\": true", name,
				 e->info.state == SRV_LORA_LOADING ? "loading" : "loaded");
	} else if (r->n >= r->max) {
		rc = base_seterr(err, errlen, LANES_ELIMIT, "%d adapters are loaded, the most this server holds (--max-lora %d): DELETE one first",
				 r->n, r->max);
	} else {
		// the smallest number no loaded name has: ids run 0..n-1 as llama-server's list does
		uint32_t id = 0;
		while (id_taken(r, id)) id++;
		e = &r->e[r->n++];
		memset(e, 0, sizeof *e);
		snprintf(e->info.name, sizeof e->info.name, "%s", name);
		snprintf(e->info.path, sizeof e->info.path, "%s", path);
		e->info.scale = isnan(scale) ? 1.0f : scale;
		e->info.state = SRV_LORA_LOADING;
		e->info.id = id;
		e->ticket = *ticket = ++r->next_ticket;
	}
	pthread_mutex_unlock(&r->mu);
	return rc;
}

void srv_loras_publish(srv_loras *r, const char *name, uint64_t ticket, model_lora *a, uint32_t *version) {
	if (a) model_lora_on_free(a, on_free, r); // before anyone else can hold it
	const model_lora *drop = NULL;
	uint32_t v = 0;
	pthread_mutex_lock(&r->mu);
	entry *e = find(r, name);
	if (e && e->ticket != ticket) e = NULL; // unloaded (and maybe taken again) while this loaded
	if (!e) {
		drop = a;
	} else if (e->info.state == SRV_LORA_LOADING) {
		if (a) {
			e->a = a;
			e->info.state = SRV_LORA_READY;
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

int srv_loras_remove(srv_loras *r, const char *name, bool *freed) {
	*freed = false;
	pthread_mutex_lock(&r->mu);
	entry *e = find(r, name);
	if (!e || e->info.state == SRV_LORA_LOADING) {
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

int srv_loras_bind(srv_loras *r, const char *name, int64_t id, const model_lora **a, float *scale, char *name_out) {
	*a = NULL;
	pthread_mutex_lock(&r->mu);
	entry *e = NULL;
	for (int i = 0; i < r->n && !e; i++)
		if (r->e[i].info.state == SRV_LORA_READY && (name ? !strcmp(r->e[i].info.name, name) : r->e[i].info.id == id)) e = &r->e[i];
	if (e) {
		*a = model_lora_ref(e->a);
		*scale = e->info.scale;
		e->info.requests++;
		if (name_out) memcpy(name_out, e->info.name, sizeof e->info.name);
	}
	pthread_mutex_unlock(&r->mu);
	return e ? 0 : LANES_ENOTFOUND;
}

bool srv_loras_has(srv_loras *r, const char *name) {
	pthread_mutex_lock(&r->mu);
	const entry *e = find(r, name);
	const bool ok = e && e->info.state == SRV_LORA_READY;
	pthread_mutex_unlock(&r->mu);
	return ok;
}

bool srv_loras_ever(srv_loras *r) {
	pthread_mutex_lock(&r->mu);
	const bool ever = r->ever;
	pthread_mutex_unlock(&r->mu);
	return ever;
}

int srv_loras_list(srv_loras *r, srv_lora_info **out) {
	*out = NULL;
	pthread_mutex_lock(&r->mu);
	const int n = r->n + r->n_old;
	srv_lora_info *v = n ? malloc((size_t)n * sizeof *v) : NULL;
	if (v) {
		for (int i = 0; i < r->n; i++) v[i] = r->e[i].info;
		if (r->n_old) memcpy(v + r->n, r->old, (size_t)r->n_old * sizeof *v);
	}
	pthread_mutex_unlock(&r->mu);
	if (n && !v) return LANES_ENOMEM;
	*out = v;
	return n;
}
