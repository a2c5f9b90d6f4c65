// tests: the kept Responses (server/api/store) — least recently used out past the count and the
// bytes, an entry over its cap not kept, replace and delete, copies that outlive the entry, and
// threads putting, reading and deleting at once.
#include "t.h"
#include "server/api/store.h"

static json_t *resp(const char *id, size_t pad) {
	char *p = malloc(pad + 1);
	memset(p, 'x', pad);
	p[pad] = 0;
	json_t *r = json_pack("{s:s, s:s}", "id", id, "pad", p);
	free(p);
	return r;
}

static bool has(srv_store *st, const char *id) { return srv_store_get(st, id, NULL, NULL); }

static void put(srv_store *st, const char *id, size_t pad) {
	json_t *r = resp(id, pad), *in = json_pack("[{s:s, s:s}]", "role", "user", "content", id);
	CHECK(srv_store_put(st, id, r, in));
	json_decref(r);
	json_decref(in);
}

static void test_count_lru(void) {
	CHECK(!srv_store_new(0, 1 << 20, 1 << 20));
	srv_store *st = srv_store_new(2, 1 << 20, 1 << 20);
	put(st, "a", 1);
	put(st, "b", 1);
	CHECK(has(st, "a")); // a is now the most recently used
	put(st, "c", 1);
	CHECK(has(st, "a") && !has(st, "b") && has(st, "c"));
	json_t *r = NULL, *in = NULL;
	CHECK(srv_store_get(st, "c", &r, &in));
	CHECK(!strcmp(json_string_value(json_object_get(r, "id")), "c"));
	CHECK(!strcmp(json_string_value(json_object_get(json_array_get(in, 0), "content")), "c"));
	CHECK(srv_store_delete(st, "c") && !srv_store_delete(st, "c") && !has(st, "c"));
	// the copies outlive the entry
	CHECK(!strcmp(json_string_value(json_object_get(r, "id")), "c"));
	json_decref(r);
	json_decref(in);
	r = in = (json_t *)1;
	CHECK(!srv_store_get(st, "c", &r, &in) && !r && !in);
	put(st, "a", 5); // replaced, not added
	put(st, "d", 1);
	CHECK(has(st, "a") && has(st, "d"));
	srv_store_free(st);
	srv_store_free(NULL);
}

static void test_bytes(void) {
	srv_store *st = srv_store_new(100, 2000, 5000);
	json_t *big = resp("big", 3000), *in = json_array();
	CHECK(!srv_store_put(st, "big", big, in) && !has(st, "big")); // over the entry cap
	json_decref(big);
	json_decref(in);
	put(st, "a", 1500);
	put(st, "b", 1500);
	put(st, "c", 1500);
	CHECK(has(st, "a")); // b is now the least recently used
	put(st, "d", 1500);  // past the total: b goes
	CHECK(has(st, "a") && !has(st, "b") && has(st, "c") && has(st, "d"));
	srv_store_free(st);
}

static srv_store *shared;

static void *worker(void *arg) {
	const int t = (int)(size_t)arg;
	char id[32];
	for (int i = 0; i < 2000; i++) {
		snprintf(id, sizeof id, "r%d_%d", t, i % 50);
		json_t *r = resp(id, (size_t)(i % 7) * 10), *in = json_array();
		srv_store_put(shared, id, r, in);
		json_decref(r);
		json_decref(in);
		snprintf(id, sizeof id, "r%d_%d", (t + 1) % 4, (i * 7) % 50);
		json_t *got = NULL;
		if (srv_store_get(shared, id, &got, NULL)) CHECK(!strcmp(json_string_value(json_object_get(got, "id")), id));
		json_decref(got);
		if (i % 5 == 0) srv_store_delete(shared, id);
	}
	return NULL;
}

static void test_threads(void) {
	shared = srv_store_new(64, 1 << 20, 1 << 20);
	pthread_t th[4];
	for (int t = 0; t < 4; t++) pthread_create(&th[t], NULL, worker, (void *)(size_t)t);
	for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
	int n = 0;
	char id[32];
	for (int t = 0; t < 4; t++)
		for (int i = 0; i < 50; i++) snprintf(id, sizeof id, "r%d_%d", t, i), n += has(shared, id);
	CHECK(n > 0 && n <= 64);
	srv_store_free(shared);
}

int main(void) {
	test_count_lru();
	test_bytes();
	test_threads();
	T_DONE("responses_store");
}
