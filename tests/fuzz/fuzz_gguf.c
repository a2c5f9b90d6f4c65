// fuzz: the GGUF reader on arbitrary bytes — it must answer with an error or a parse
// whose every count, string and tensor lies inside the input.
#include "gguf/gguf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	// an exactly-sized copy so a read past the end is caught
	uint8_t *copy = malloc(size ? size : 1);
	if (!copy) return 0;
	if (size) memcpy(copy, data, size);
	gguf *g = NULL;
	char err[256];
	if (gguf_open_mem(&g, copy, size, err, sizeof err) == 0) {
		volatile uint64_t sink = 0;
		for (int64_t i = 0; i < gguf_n_kv(g); i++) {
			const gguf_kv *kv = gguf_kv_at(g, i);
			if (kv->key.len) sink += (uint8_t)kv->key.ptr[kv->key.len - 1];
			const gguf_value *v = &kv->val;
			if (v->type == GGUF_STRING && v->s.len) sink += (uint8_t)v->s.ptr[v->s.len - 1];
			if (v->type == GGUF_ARRAY && v->arr.n) {
				if (v->arr.type == GGUF_STRING) {
					gguf_str s = gguf_arr_str(v, v->arr.n - 1);
					if (s.len) sink += (uint8_t)s.ptr[s.len - 1];
				} else if (v->arr.type != GGUF_ARRAY) {
					sink += (uint64_t)gguf_arr_i64(v, v->arr.n - 1);
				}
			}
		}
		for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
			const gguf_tensor *t = gguf_tensor_at(g, i);
			if (t->nbytes) sink += ((const uint8_t *)t->data)[t->nbytes - 1];
			sink += (uint64_t)gguf_tensor_nelem(t);
		}
		(void)sink;
		gguf_free(g);
	}
	free(copy);
	return 0;
}
