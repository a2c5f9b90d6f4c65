// cli/common: what several subcommands share — token id lists, thread pools, loading a
// model or a vocabulary — each printing its own error in the `lanes CMD: ...` style.
#include "cli/cli.h"
#include "gguf/gguf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int cli_parse_ids(const char *s, int32_t **ids, size_t *n) {
	*ids = NULL;
	*n = 0;
	size_t cap = 16, cnt = 0;
	int32_t *v = malloc(cap * sizeof *v);
	if (!v) return -1;
	const char *p = s;
	while (*p == ' ' || *p == '[') p++;
	while (*p && *p != ']') {
		char *end;
		errno = 0;
		long long x = strtoll(p, &end, 10);
		if (end == p || errno || x < 0 || x > INT32_MAX) {
			cli_err("bad token id list at '%s' (want ids like 1,2,3)", p);
			free(v);
			return -1;
		}
		if (cnt == cap) {
			int32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
			if (!nv) { free(v); return -1; }
			v = nv;
		}
		v[cnt++] = (int32_t)x;
		p = end;
		while (*p == ' ') p++;
		if (*p == ',') p++;
		while (*p == ' ') p++;
	}
	if (!cnt) {
		cli_err("empty token id list");
		free(v);
		return -1;
	}
	*ids = v;
	*n = cnt;
	return 0;
}

enum kv_type cli_kv_type(const char *name) {
	const int t = kv_type_parse(name);
	LANES_ASSERT(t >= 0); // the settings table admits only the names kv_type_parse knows
	return (enum kv_type)t;
}

int cli_threads(int64_t want, base_pool **pool) {
	const int n = want > 0 ? (int)want : base_cpu_count();
	if (base_pool_new(pool, n)) {
		cli_err("cannot start %d threads", n);
		return -1;
	}
	return 0;
}

int cli_load_model(const char *path, model **m, tok_vocab **voc) {
	char err[512];
	if (model_load(m, path, err, sizeof err) || (voc && tok_vocab_load(voc, model_gguf(*m), err, sizeof err))) {
		cli_err("%s", err);
		return -1;
	}
	return 0;
}

int cli_load_vocab(const char *path, tok_vocab **voc) {
	char err[512];
	gguf *g;
	if (gguf_open(&g, path, err, sizeof err)) {
		cli_err("%s", err);
		return -1;
	}
	const int rc = tok_vocab_load(voc, g, err, sizeof err);
	gguf_free(g);
	if (rc) cli_err("%s: %s", path, err);
	return rc ? -1 : 0;
}
