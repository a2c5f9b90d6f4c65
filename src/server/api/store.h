// server/api/store: the finished Responses this server keeps for previous_response_id and
// GET/DELETE /v1/responses/{id} — in memory, bounded in count and bytes, least recently used out.
// Entries are JSON text: a reader gets its own copy, so no json_t is shared between threads.
#ifndef LANES_SERVER_STORE_H
#define LANES_SERVER_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define SRV_STORE_ENTRY_MAX ((size_t)16 << 20) // one response and its input, as JSON text
#define SRV_STORE_TOTAL_MAX ((size_t)256 << 20) // every entry together

typedef struct srv_store srv_store;

// A store of at most max entries, entry_max bytes each and total_max bytes together (the
// server passes SRV_STORE_*_MAX). NULL when max is 0 (nothing is kept), or out of memory.
srv_store *srv_store_new(int max, size_t entry_max, size_t total_max);
void srv_store_free(srv_store *st); // accepts NULL
// Keeps id's response object and the input items that led to it (copies; an entry under id is
// replaced), evicting the least recently used past the bounds. false: not kept (off, too big, no memory).
bool srv_store_put(srv_store *st, const char *id, const json_t *response, const json_t *input);
// id's response and input (new references; either pointer may be NULL), and marks it used.
// false: none kept under id (never, evicted or deleted).
bool srv_store_get(srv_store *st, const char *id, json_t **response, json_t **input);
// Forgets id. false: none kept under it.
bool srv_store_delete(srv_store *st, const char *id);

#endif
