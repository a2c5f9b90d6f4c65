// server/api/store: the Responses kept in memory (store.h). A list in order of use under one
// mutex; each lookup copies the text out, so the lock is held for memcpy and strcmp alone.
#include "server/api/store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
	struct entry *prev, *next; // prev: more recently used
	char *id, *response, *input;
	size_t bytes;              // of the three strings
} entry;

struct srv_store {
	pthread_mutex_t mu;
	entry *head, *tail;        // head: the most recently used
	int n, max;
	size_t bytes, entry_max, total_max; // of the entries' strings
};

srv_store *srv_store_new(int max, size_t entry_max, size_t total_max) {
	if (max <= 0) return NULL;
	srv_store *st = calloc(1, sizeof *st);
	if (!st) return NULL;
	pthread_mutex_init(&st->mu, NULL);
	st->max = max;
	st->entry_max = entry_max < total_max ? entry_max : total_max;
	st->total_max = total_max;
	return st;
}

static void entry_free(entry *e) {
	if (!e) return;
	free(e->id);
	free(e->response);
	free(e->input);
	free(e);
}

static void unlink_entry(srv_store *st, entry *e) {
	if (e->prev) e->prev->next = e->next;
	else st->head = e->next;
	if (e->next) e->next->prev = e->prev;
	else st->tail = e->prev;
	e->prev = e->next = NULL;
	st->n--;
	st->bytes -= e->bytes;
}

static void push_front(srv_store *st, entry *e) {
	e->prev = NULL;
	e->next = st->head;
	if (st->head) st->head->prev = e;
	st->head = e;
	if (!st->tail) st->tail = e;
	st->n++;
	st->bytes += e->bytes;
}

static entry *find(srv_store *st, const char *id) {
	for (entry *e = st->head; e; e = e->next)
		if (!strcmp(e->id, id)) return e;
	return NULL;
}

void srv_store_free(srv_store *st) {
	if (!st) return;
	for (entry *e = st->head, *nx; e; e = nx) {
		nx = e->next;
		entry_free(e);
	}
	pthread_mutex_destroy(&st->mu);
	free(st);
}

bool srv_store_put(srv_store *st, const char *id, const json_t *response, const json_t *input) {
	if (!st || !id || !response || !input) return false;
	entry *e = calloc(1, sizeof *e);
	if (!e) return false;
	e->id = strdup(id);
	e->response = json_dumps(response, JSON_COMPACT);
	e->input = json_dumps(input, JSON_COMPACT);
	if (!e->id || !e->response || !e->input) return entry_free(e), false;
	e->bytes = strlen(e->id) + strlen(e->response) + strlen(e->input);
	if (e->bytes > st->entry_max) return entry_free(e), false;
	entry *old = NULL, *gone = NULL;
	pthread_mutex_lock(&st->mu);
	if ((old = find(st, id))) unlink_entry(st, old);
	// evicted entries are chained through next and freed after the lock
	while (st->tail && (st->n >= st->max || st->bytes + e->bytes > st->total_max)) {
		entry *t = st->tail;
		unlink_entry(st, t);
		t->next = gone;
		gone = t;
	}
	push_front(st, e);
	pthread_mutex_unlock(&st->mu);
	entry_free(old);
	while (gone) {
		entry *nx = gone->next;
		entry_free(gone);
		gone = nx;
	}
	return true;
}

bool srv_store_get(srv_store *st, const char *id, json_t **response, json_t **input) {
	if (response) *response = NULL;
	if (input) *input = NULL;
	if (!st || !id) return false;
	char *r = NULL, *in = NULL;
	bool found = false;
	pthread_mutex_lock(&st->mu);
	entry *e = find(st, id);
	if (e) {
		found = true;
		unlink_entry(st, e);
		push_front(st, e);
		if (response) r = strdup(e->response);
		if (input) in = strdup(e->input);
	}
	pthread_mutex_unlock(&st->mu);
	// text this store wrote parses back unless memory ran out: then it reads as not kept
	if (response) found &= (*response = r ? json_loads(r, JSON_ALLOW_NUL, NULL) : NULL) != NULL;
	if (input) found &= (*input = in ? json_loads(in, JSON_ALLOW_NUL, NULL) : NULL) != NULL;
	free(r);
	free(in);
	if (!found) {
		if (response) json_decref(*response), *response = NULL;
		if (input) json_decref(*input), *input = NULL;
	}
	return found;
}

bool srv_store_delete(srv_store *st, const char *id) {
	if (!st || !id) return false;
	pthread_mutex_lock(&st->mu);
	entry *e = find(st, id);
	if (e) unlink_entry(st, e);
	pthread_mutex_unlock(&st->mu);
	const bool had = e != NULL;
	entry_free(e);
	return had;
}
