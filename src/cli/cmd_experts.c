// cli: `lanes experts -m MODEL --corpus DIR [--tokens N] [--json] [--svg OUT.svg]` — which experts a
// MoE model uses, domain by domain: every domain's text (a file, or a folder of files, named for
// the domain) is cut into prompts that run through a lane host as served requests do (prompt rows,
// one token drawn each), then the observer's report is printed and the heat map drawn.
#include "base/base.h"
#include "cli/cli.h"
#include "lanes/lanes.h"
#include "observe/observe.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PIECE 512 // prompt tokens of one request at most

typedef struct {
	char name[LANE_DOMAIN_MAX + 1];
	int32_t *ids;
	size_t n;
} domain;

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// The sorted names in dir (no dot files); NULL on error with errno set.
static char **list_dir(const char *dir, size_t *n) {
	DIR *d = opendir(dir);
	if (!d) return NULL;
	size_t cap = 16;
	char **v = malloc(cap * sizeof *v);
	struct dirent *e;
	*n = 0;
	while (v && (e = readdir(d))) {
		if (e->d_name[0] == '.') continue;
		if (*n == cap) {
			char **nv = realloc(v, (cap *= 2) * sizeof *v);
			if (!nv) break;
			v = nv;
		}
		if (!(v[*n] = strdup(e->d_name))) break;
		(*n)++;
	}
	closedir(d);
	if (v) qsort(v, *n, sizeof *v, by_name);
	return v;
}

static void free_list(char **v, size_t n) {
	for (size_t i = 0; v && i < n; i++) free(v[i]);
	free(v);
}

// Appends the file at path to *text (a newline between files). 0, or -1 after printing the error.
static int append_file(const char *path, char **text, size_t *len) {
	size_t n;
	char *t = cli_read_file(path, &n);
	if (!t) {
		cli_err("cannot read %s: %s", path, strerror(errno));
		return -1;
	}
	char *grown = realloc(*text, *len + n + 2);
	if (!grown) {
		free(t);
		cli_err("out of memory");
		return -1;
	}
	*text = grown;
	if (*len) (*text)[(*len)++] = '\n';
	memcpy(*text + *len, t, n);
	*len += n;
	(*text)[*len] = 0;
	free(t);
	return 0;
}

// One corpus entry: a file (the domain is its name up to the last '.') or a folder of files.
static int read_domain(const tok_vocab *v, const char *dir, const char *entry, int64_t max_tokens, domain *out) {
	char path[4096], err[256];
	snprintf(path, sizeof path, "%s/%s", dir, entry);
	struct stat st;
	if (stat(path, &st)) {
		cli_err("%s: %s", path, strerror(errno));
		return -1;
	}
	const bool folder = S_ISDIR(st.st_mode);
	size_t nl = strlen(entry);
	const char *dot = folder ? NULL : strrchr(entry, '.');
	if (dot && dot != entry) nl = (size_t)(dot - entry);
	snprintf(out->name, sizeof out->name, "%.*s", (int)(nl < sizeof out->name ? nl : sizeof out->name - 1), entry);
	if (nl >= sizeof out->name || lane_check_domain(out->name, err, sizeof err)) {
		cli_err("corpus entry '%s': %s", entry, err[0] ? err : "a domain is at most 32 bytes");
		return -1;
	}
	char *text = NULL;
	size_t len = 0;
	int rc = 0;
	if (folder) {
		size_t n = 0;
		char **files = list_dir(path, &n);
		if (!files) {
			cli_err("cannot read %s: %s", path, strerror(errno));
			return -1;
		}
		for (size_t i = 0; i < n && !rc; i++) {
			char fp[8192];
			snprintf(fp, sizeof fp, "%s/%s", path, files[i]);
			if (!stat(fp, &st) && S_ISREG(st.st_mode)) rc = append_file(fp, &text, &len);
		}
		free_list(files, n);
	} else if (S_ISREG(st.st_mode)) {
		rc = append_file(path, &text, &len);
	}
	if (!rc && !len) {
		cli_err("corpus entry '%s' holds no text", entry);
		rc = -1;
	}
	if (!rc && tok_encode(v, text, len, false, false, &out->ids, &out->n, err, sizeof err)) {
		cli_err("%s: %s", path, err);
		rc = -1;
	}
	free(text);
	if (!rc && max_tokens > 0 && out->n > (size_t)max_tokens) out->n = (size_t)max_tokens;
	return rc;
}

int cmd_experts(const cli_settings *s) {
	char err[512];
	model *m = NULL;
	tok_vocab *voc = NULL;
	lane_host *h = NULL;
	domain *doms = NULL;
	lane_req **reqs = NULL;
	lane_experts e = {0};
	size_t n_entries = 0, n_dom = 0, n_req = 0, total = 0;
	char **entries = NULL;
	int rc = 1;
	if (cli_load_model(s->model, &m, &voc)) goto out;
	const model_hparams *hp = model_hparams_of(m);
	if (!hp->n_experts) {
		cli_err("%s has no experts (a dense %s model): there is nothing to observe", s->model, hp->arch);
		goto out;
	}
	if (!(entries = list_dir(s->corpus, &n_entries))) {
		cli_err("cannot read the corpus %s: %s", s->corpus, strerror(errno));
		goto out;
	}
	if (!n_entries) {
		cli_err("the corpus %s is empty: give it a file or a folder per domain", s->corpus);
		goto out;
	}
	if (!(doms = calloc(n_entries, sizeof *doms))) {
		cli_err("out of memory");
		goto out;
	}
	for (; n_dom < n_entries; n_dom++) {
		if (read_domain(voc, s->corpus, entries[n_dom], s->corpus_tokens, &doms[n_dom])) goto out;
		total += doms[n_dom].n;
	}
	if (n_dom > LANE_EXPERT_DOMAINS)
		LOG_WARN("experts", "%zu domains: the first %d are counted apart, the rest under 'other'", n_dom, LANE_EXPERT_DOMAINS);
	// the pieces of every domain, in turn, so that the lanes run several domains at once
	const size_t piece = hp->n_ctx_train > 0 && hp->n_ctx_train - 2 < PIECE ? (size_t)(hp->n_ctx_train - 2) : PIECE;
	if (piece < 1) {
		cli_err("%s: a context of %d tokens holds no prompt", s->model, hp->n_ctx_train);
		goto out;
	}
	size_t n_pieces = 0;
	for (size_t d = 0; d < n_dom; d++) n_pieces += (doms[d].n + piece - 1) / piece;
	lane_config cfg;
	lane_config_default(&cfg);
	cfg.lanes = (int32_t)s->lanes;
	cfg.queue = (int32_t)(n_pieces < 1000000 ? n_pieces : 1000000);
	cfg.threads = (int32_t)s->threads;
	cfg.ctx = (int32_t)(piece + 2 * (size_t)cfg.page_tokens) * cfg.lanes;
	cfg.prefix_cache = false;
	cfg.draft = LANE_DRAFT_OFF;
	cfg.experts = true;
	model_set_context(m, lane_config_max_context(&cfg, model_hparams_of(m)));
	if (lane_host_new(&h, m, voc, &cfg, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	if (!(reqs = calloc(n_pieces, sizeof *reqs))) {
		cli_err("out of memory");
		goto out;
	}
	const int32_t bos = tok_add_bos(voc) ? tok_bos(voc) : -1;
	int32_t prompt[PIECE + 1];
	const uint64_t t0 = base_now_us();
	for (size_t off = 0, more = 1; more; off += piece) {
		more = 0;
		for (size_t d = 0; d < n_dom; d++) {
			if (off >= doms[d].n) continue;
			more = 1;
			const size_t take = doms[d].n - off < piece ? doms[d].n - off : piece;
			int32_t np = 0;
			if (bos >= 0) prompt[np++] = bos;
			memcpy(prompt + np, doms[d].ids + off, take * sizeof *prompt);
			lane_request q;
			lane_request_init(&q);
			q.prompt = prompt;
			q.n_prompt = np + (int32_t)take;
			q.max_tokens = 1;
			q.sampling.temperature = 0;
			q.draft = false;
			q.domain = doms[d].name;
			// the queue holds every piece, so a submit is refused only for what a piece is
			if (lane_submit(h, &q, &reqs[n_req], err, sizeof err)) {
				cli_err("%s, piece at token %zu: %s", doms[d].name, off, err);
				goto out;
			}
			n_req++;
		}
	}
	for (size_t i = 0; i < n_req; i++) {
		lane_event ev;
		while (lane_next(reqs[i], &ev, -1) == 1 && ev.kind == LANE_EV_TOKEN) {}
		if (ev.kind != LANE_EV_FINISHED) {
			cli_err("a piece ended early: %s", ev.reason ? ev.reason : "cancelled");
			goto out;
		}
	}
	const double secs = (double)(base_now_us() - t0) / 1e6;
	if (lane_experts_init(h, &e)) {
		cli_err("out of memory");
		goto out;
	}
	lane_host_experts(h, &e, false);
	LOG_INFO("experts", "%zu tokens of %zu domains in %zu pieces: %.2f s, %.0f tok/s", total, n_dom, n_req, secs, total / secs);
	const char *base = strrchr(s->model, '/') ? strrchr(s->model, '/') + 1 : s->model;
	if (s->json) {
		json_t *j = obs_experts_json(&e, base);
		if (!j || json_dumpf(j, stdout, JSON_COMPACT) || putchar('\n') == EOF) {
			json_decref(j);
			cli_err("cannot write the report");
			goto out;
		}
		json_decref(j);
	} else {
		obs_experts_print(stdout, &e, base);
	}
	if (s->svg) {
		size_t len = 0;
		char *svg = obs_experts_svg(&e, base, &len);
		FILE *f = svg ? fopen(s->svg, "wb") : NULL;
		const bool ok = f && fwrite(svg, 1, len, f) == len;
		if ((f && fclose(f)) || !ok) {
			cli_err("cannot write %s: %s", s->svg, svg ? strerror(errno) : "out of memory");
			free(svg);
			goto out;
		}
		free(svg);
		LOG_INFO("experts", "wrote %s", s->svg);
	}
	rc = fflush(stdout) ? 1 : 0;
out:
	for (size_t i = 0; reqs && i < n_req; i++) lane_req_free(reqs[i]);
	free(reqs);
	lane_experts_release(&e);
	lane_host_free(h);
	for (size_t d = 0; doms && d < n_entries; d++) free(doms[d].ids);
	free(doms);
	free_list(entries, n_entries);
	tok_vocab_free(voc);
	model_free(m);
	return rc;
}
