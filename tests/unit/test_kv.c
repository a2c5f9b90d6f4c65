// tests: the paged KV cache alone — lowering the page limit never touches rows a sequence
// holds; a sliding-window cache frees the local rows no query reads, shared pages once the
// other holder lets go, and only where a page's slice of a layer is whole system pages.
#include "kv/kv.h"
#include "t.h"

#include <string.h>
#include <unistd.h>

// Writes position-stamped rows (value pos + layer / 8) into positions [from, to) of seq.
static void stamp(kv_cache *kv, const tensor_kernels *ks, int32_t seq, int32_t from, int32_t to) {
	const kv_config *c = kv_config_of(kv);
	float row[256];
	for (int32_t p = from; p < to; p++)
		for (int32_t l = 0; l < c->n_layers; l++) {
			for (int32_t i = 0; i < c->kv_dim; i++) row[i] = (float)p + (float)l / 8.0f;
			kv_put(kv, ks, l, seq, p, row, row);
		}
}

// Whether seq's rows [from, to) of layer l still hold their stamps.
static bool stamped(kv_cache *kv, int32_t l, int32_t seq, int32_t from, int32_t to) {
	for (int32_t p = from; p < to; p++) {
		const uint16_t *k = kv_k_row(kv, l, seq, p);
		if (tensor_f16_to_f32(k[0]) != (float)p + (float)l / 8.0f) return false;
	}
	return true;
}

static void limit_keeps_held_rows(const tensor_kernels *ks) {
	const kv_config c = {.type = KV_F16, .n_layers = 2, .kv_dim = 128, .group = 128, .page_tokens = 16, .n_pages = 8, .n_seqs = 2};
	kv_cache *kv = NULL;
	char err[256];
	CHECKF(kv_new(&kv, &c, err, sizeof err) == 0, "%s", err);
	if (!kv) return;
	int32_t tok[48];
	for (int i = 0; i < 48; i++) tok[i] = 3 + i;
	// pages 0..2: the prefix cache's alone; pages 3..5: sequence 1's
	CHECK(kv_seq_grow(kv, 0, 48) == 0);
	stamp(kv, ks, 0, 0, 48);
	kv_prefix_publish(kv, 0, 0, tok, 48);
	kv_seq_clear(kv, 0);
	CHECK(kv_seq_grow(kv, 1, 48) == 0);
	stamp(kv, ks, 1, 0, 48);
	int32_t np;
	const int32_t *pg = kv_seq_pages(kv, 1, &np);
	CHECK(np == 3 && pg[0] == 3 && pg[2] == 5);
	kv_set_limit(kv, 5);
	kv_set_limit(kv, 2);
	CHECKF(stamped(kv, 0, 1, 0, 48) && stamped(kv, 1, 1, 0, 48), "lowering the limit past the cache's pages kept sequence 1's rows");
	kv_free(kv);
}

static void window_frees(const tensor_kernels *ks) {
	const long sys = sysconf(_SC_PAGESIZE);
	// a page of 16 f16 rows of 128 values is 4 KiB of each layer: freed; of 64 values, 2 KiB: not
	CHECK(sys != 4096 || (kv_local_bytes_per_token(KV_F16, 3, 128, 16) == 3 * 2 * 256 &&
			      kv_local_bytes_per_token(KV_F16, 3, 64, 16) == 0 && kv_local_bytes_per_token(KV_Q8_0, 3, 128, 16) == 0));
	const kv_config c = {.type = KV_F16, .n_layers = 2, .kv_dim = 128, .group = 128, .page_tokens = 16, .n_pages = 32, .n_seqs = 2,
			     .window = 32, .swa_pattern = 2};
	kv_cache *kv = NULL;
	char err[256];
	CHECKF(kv_new(&kv, &c, err, sizeof err) == 0, "%s", err);
	if (!kv) return;
	CHECK(kv_layer_local(&c, 0) && !kv_layer_local(&c, 1));
	if (sys != 4096) goto out; // whole system pages of another size: the check above does not apply
	int32_t tok[64];
	for (int i = 0; i < 64; i++) tok[i] = 7 + i;
	// two sequences share 64 tokens: neither frees the shared pages while the other holds them
	CHECK(kv_seq_grow(kv, 0, 64) == 0);
	stamp(kv, ks, 0, 0, 64);
	kv_prefix_publish(kv, 0, 0, tok, 64);
	CHECK(kv_prefix_attach(kv, 1, 0, tok, 64) == 64);
	CHECK(kv_seq_release_window(kv, 0, 0, 0) == 0 && kv_seq_release_window(kv, 1, 0, 0) == 0);
	// sequence 1 goes on to 200 tokens: its own pages before its window are freed, and the
	// shared ones once sequence 0 has let go; the global layer and the window keep their rows
	CHECK(kv_seq_grow(kv, 1, 200) == 0);
	stamp(kv, ks, 1, 64, 200);
	const int32_t first = kv_seq_release_window(kv, 1, 0, 0);
	kv_seq_clear(kv, 0);
	const int32_t second = kv_seq_release_window(kv, 1, 0, 0);
	CHECKF(first == 6 && second == 4, "freed %d pages, then %d (want 6, then the 4 shared ones)", first, second);
	CHECK(kv_pages_local_freed(kv) == 10 && kv_local_page_bytes(kv) == 2 * 16 * 256);
	CHECKF(stamped(kv, 1, 1, 0, 200) && stamped(kv, 0, 1, 160, 200), "the global layer's rows and the window's stay");
	// the freed pages are not attached where a resume would read them: none of the 64 tokens
	kv_seq_clear(kv, 0);
	CHECK(kv_prefix_attach(kv, 0, 0, tok, 64) == 0);
	// a kept window: freeing with keep 48 leaves the pages of positions 17 .. 47
	kv_seq_clear(kv, 1);
	CHECK(kv_seq_grow(kv, 1, 200) == 0);
	stamp(kv, ks, 1, 0, 200);
	CHECK(kv_seq_release_window(kv, 1, 48, 0) == 8);
	CHECKF(stamped(kv, 0, 1, 16, 48), "the window before keep stays");
out:
	kv_free(kv);
}

int main(void) {
	const tensor_kernels *ks = tensor_kernels_find("ref");
	CHECK(ks != NULL);
	if (ks) limit_keeps_held_rows(ks), window_frees(ks);
	T_DONE("kv");
}
