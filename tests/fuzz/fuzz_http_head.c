// fuzz: the gate's judges of a request head and of a chunked body (server/net/sock.h) on
// arbitrary bytes: each answers whole, more or refused, within the bytes it was given; a whole
// head is whole on its own bytes, and one that needs more is refused when no more will come.
#include "server/net/sock.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_refusal(const srv_head *h) {
	static const int codes[] = {400, 413, 414, 431, 505};
	bool known = false;
	for (size_t k = 0; k < sizeof codes / sizeof *codes; k++) known |= h->status == codes[k];
	if (!known || !h->msg[0] || !memchr(h->msg, 0, sizeof h->msg)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	// an exactly-sized copy so a read past the end is caught
	uint8_t *p = malloc(size ? size : 1);
	if (!p) return 0;
	if (size) memcpy(p, data, size);
	srv_head h, again;
	for (int eof = 0; eof < 2; eof++) {
		const int v = srv_head_scan(p, size, eof, &h);
		if (v == -1) fuzz_refusal(&h);
		else if (v == 0 && (eof || size >= SRV_HEAD_MAX)) abort(); // more cannot help
		else if (v == 1 && (!h.len || h.len > size || h.len > SRV_HEAD_MAX)) abort();
		else if (v < -1 || v > 1) abort();
		if (v == 0 && srv_head_scan(p, size, true, &again) != -1) abort();
		if (v != 1) continue;
		if (srv_head_scan(p, h.len, false, &again) != 1 || again.len != h.len || again.chunked != h.chunked) abort();
		if (!h.chunked) continue;
		uint64_t wire = 0;
		const size_t nb = size - h.len;
		const int c = srv_chunks_scan(p + h.len, nb, eof, 1 << 20, &h, &wire);
		if (c == -1) {
			fuzz_refusal(&h);
			if (h.status != 400 && h.status != 413) abort();
		} else if (c == 1) {
			if (!wire || wire > nb) abort();
			if (srv_chunks_scan(p + h.len, (size_t)wire, true, 1 << 20, &again, &wire) != 1) abort();
		} else if (c != 0 || eof) abort();
	}
	free(p);
	return 0;
}
