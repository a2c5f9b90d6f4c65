// pull: the model cache (pull.h) — references to URLs, the hub's listing, one resumable
// transfer with its checks, and the cached files' names for lookups, copies and removals.
#include "pull/pull.h"
#include "base/base.h"
#include "gguf/gguf.h"

#include <ctype.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PULL_TRIES 6           // five retries, as Ollama's downloads take
#define PULL_RETRY_MS 1000     // the first wait: a hub still starting gets 1+2+4+8+16 s
#define PULL_RETRY_MAX_MS 16000
#define PULL_REDIRECTS 10 // the hub's resolve takes one or two to its CDN
#define MAX_LISTING (64u << 20)
#define MAX_NAME 400      // bytes of a name from a reference or a listing (a component: 255)
#define GATED_HINT " (a gated repository? give --hf-token or HF_TOKEN)"

typedef struct {
	char url[4096];
	char rel[1024]; // where it goes under the cache folder
	bool hub;       // from the hub: the token and its checksum headers apply
} pull_ref;

// One pull: its settings, who hears its progress, and where its error goes.
typedef struct {
	const pull_config *c;
	pull_progress_fn fn;
	void *ud;
	bool cancelled;
	pull_progress p;
	char *err;
	size_t errlen;
	uint64_t t0_us; // when the first try of the current request began
} pull_ctx;

static int fail(pull_ctx *x, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(pull_ctx *x, int code, const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	if (x->err && x->errlen) vsnprintf(x->err, x->errlen, fmt, ap);
	va_end(ap);
	return code;
}

// Tells the listener; false when it cancels the pull.
static bool report(pull_ctx *x) {
	if (x->cancelled) return false;
	if (x->fn && x->fn(x->ud, &x->p)) x->cancelled = true;
	return !x->cancelled;
}

void pull_cache_dir(const pull_config *c, char *out, size_t n) {
	if (c->dir && *c->dir) snprintf(out, n, "%s", c->dir);
	else snprintf(out, n, "%s/.cache/lanes/models", getenv("HOME") ? getenv("HOME") : ".");
}

bool pull_safe_path(const char *p, bool slashes) {
	if (!*p || strlen(p) > MAX_NAME) return false;
	for (const char *w = p; *w;) {
		const char *e = w;
		while (*e && *e != '/') {
			if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-", *e)) return false;
			e++;
		}
		const size_t len = (size_t)(e - w);
		if (!len || len > 255 || (len == 1 && w[0] == '.') || (len == 2 && w[0] == '.' && w[1] == '.')) return false;
		if (*e && !slashes) return false;
		w = *e ? e + 1 : e;
		if (*e && !*w) return false;
	}
	return true;
}

static bool ends_with(const char *s, const char *suf) {
	const size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcasecmp(s + a - b, suf);
}

static const char *endpoint(const pull_config *c) { return c->endpoint && *c->endpoint ? c->endpoint : "https://huggingface.co"; }

static void auth_header(const pull_config *c, const pull_ref *r, struct curl_slist **h) {
	if (!r->hub || !c->token || !*c->token) return;
	char line[1024];
	snprintf(line, sizeof line, "Authorization: Bearer %s", c->token);
	*h = curl_slist_append(*h, line);
}

// A name the hub sent, fit for one line of a terminal: odd bytes as \xNN, cut short.
static void shown(const char *p, char *out, size_t n) {
	size_t k = 0;
	for (; *p && k + 8 < n; p++) {
		const unsigned char ch = (unsigned char)*p;
		k += (size_t)snprintf(out + k, n - k, ch >= 0x20 && ch < 0x7f && ch != '\\' && ch != '\'' ? "%c" : "\\x%02x", ch);
	}
	snprintf(out + k, n - k, "%s", *p ? "..." : "");
}

static int on_cancel_check(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ut, curl_off_t un) {
	(void)dltotal, (void)dlnow, (void)ut, (void)un;
	return ((pull_ctx *)ud)->cancelled;
}

// The options every transfer takes: redirects bounded and kept to HTTP(S), stalls bounded.
static void transfer_opts(const pull_config *c, CURL *h) {
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(h, CURLOPT_MAXREDIRS, (long)PULL_REDIRECTS);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)c->stall_s);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L); // less than a byte a second for that long
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)c->stall_s);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "lanes");
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L); // pulls may run beside other threads
}

// A failed transfer's reason, in the words of the knob or limit that ended it.
static void why_failed(const pull_config *c, CURLcode rc, char *out, size_t n) {
	if (rc == CURLE_OPERATION_TIMEDOUT) snprintf(out, n, "nothing arrived for %lld s (LANES_PULL_STALL_S)", (long long)c->stall_s);
	else if (rc == CURLE_TOO_MANY_REDIRECTS) snprintf(out, n, "too many redirects (more than %d)", PULL_REDIRECTS);
	else snprintf(out, n, "%s", curl_easy_strerror(rc));
}

// Whether a failed try is worth another: the network broke, or the hub asked to come back later.
static bool transient(CURLcode rc, long code) {
	if (code == 429 || code == 502 || code == 503 || code == 504) return true;
	switch (rc) {
	case CURLE_PARTIAL_FILE: case CURLE_RECV_ERROR: case CURLE_SEND_ERROR: case CURLE_GOT_NOTHING:
	case CURLE_OPERATION_TIMEDOUT: case CURLE_COULDNT_CONNECT: case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_HTTP2: case CURLE_HTTP2_STREAM: case CURLE_SSL_CONNECT_ERROR:
		return true;
	default:
		return false;
	}
}

static int tries(const pull_config *c) { return c->tries > 0 ? c->tries : PULL_TRIES; }

// The wait after try `attempt` failed: the first wait doubled per try; a Retry-After (seconds,
// -1: none) counts when longer; never past the cap.
static int64_t wait_ms(const pull_config *c, int attempt, int64_t retry_after_s) {
	const int64_t first = c->retry_ms > 0 ? c->retry_ms : PULL_RETRY_MS, cap = c->retry_max_ms > 0 ? c->retry_max_ms : PULL_RETRY_MAX_MS;
	int64_t w = first;
	for (int i = 1; i < attempt && w < cap; i++) w *= 2;
	if (retry_after_s > 0 && retry_after_s * 1000 > w) w = retry_after_s * 1000;
	return w < cap ? w : cap;
}

// The failure of a request retried until it gave up: its reason and what the tries took.
static int gave_up(pull_ctx *x, const char *url, const char *why, int attempt) {
	const double s = (double)(base_now_us() - x->t0_us) / 1e6;
	if (attempt <= 1) return fail(x, LANES_EIO, "%s: %s", url, why);
	return fail(x, LANES_EIO, "%s: %s; gave up after %d tries over %.1f s (LANES_PULL_TRIES)", url, why, attempt, s);
}

// Says why try `attempt` failed and what comes next, then waits, hearing cancels: false when
// the pull was cancelled. have: bytes a next try resumes from (0: it starts over).
static bool retry_wait(pull_ctx *x, int attempt, const char *why, int64_t have, int64_t retry_after_s) {
	const int64_t ms = wait_ms(x->c, attempt, retry_after_s);
	if (have > 0)
		LOG_WARN("pull", "%s (try %d of %d): resuming from byte %lld in %g s", why, attempt, tries(x->c), (long long)have, (double)ms / 1000);
	else LOG_WARN("pull", "%s (try %d of %d): trying again in %g s", why, attempt, tries(x->c), (double)ms / 1000);
	const pull_progress keep = x->p;
	const uint64_t end = base_now_us() + (uint64_t)ms * 1000;
	x->p.stage = PULL_RETRY, x->p.attempt = attempt;
	for (uint64_t now = base_now_us(); now < end; now = base_now_us()) {
		x->p.wait_ms = (int64_t)((end - now) / 1000);
		if (!report(x)) return false;
		const uint64_t step = end - now < 100000 ? end - now : 100000; // a cancel is heard within 0.1 s
		nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = (long)step * 1000}, NULL);
	}
	x->p = keep;
	return true;
}

// The seconds of a Retry-After header line (-1: not one, or an HTTP date).
static int64_t retry_after(const char *line, size_t n) {
	const char *k = "retry-after:";
	if (n <= strlen(k) || strncasecmp(line, k, strlen(k))) return -1;
	const char *v = line + strlen(k);
	while (*v == ' ' || *v == '\t') v++;
	if (*v < '0' || *v > '9') return -1;
	const long long s = strtoll(v, NULL, 10);
	return s > 0 && s < 86400 ? s : -1;
}

typedef struct {
	char *p;
	size_t len, cap;
	int64_t retry_after_s; // the last response's Retry-After (-1: none)
} listing;

static size_t to_buf(char *p, size_t sz, size_t n, void *ud) {
	listing *b = ud;
	const size_t add = sz * n;
	if (b->len + add > MAX_LISTING) return 0; // a listing is never this large
	if (b->len + add + 1 > b->cap) {
		const size_t cap = (b->len + add + 1) * 2;
		char *nb = realloc(b->p, cap);
		if (!nb) return 0;
		b->p = nb, b->cap = cap;
	}
	memcpy(b->p + b->len, p, add);
	b->len += add;
	return add;
}

static size_t listing_header(char *line, size_t sz, size_t n, void *ud) {
	listing *b = ud;
	if (sz * n >= 5 && !strncmp(line, "HTTP/", 5)) b->retry_after_s = -1; // a new response
	const int64_t ra = retry_after(line, sz * n);
	if (ra > 0) b->retry_after_s = ra;
	return sz * n;
}

// Whether the file name holds quant as a word of its own: "-Q4_K_M." holds Q4_K_M, not Q4_K.
static bool holds_quant(const char *name, const char *quant) {
	const size_t k = strlen(quant);
	for (const char *p = strcasestr(name, quant); p; p = strcasestr(p + 1, quant)) {
		const char before = p == name ? '-' : p[-1], after = p[k];
		if (!isalnum((unsigned char)before) && !isalnum((unsigned char)after) && after != '_') return true;
	}
	return false;
}

const char *const pull_default_quants[] = {"Q4_K_M", "Q4_K_S", "Q4_0", "IQ4_XS", "IQ4_NL", "Q5_K_M", "Q5_K_S", "Q5_0",
					   "Q6_K", "Q8_0", "Q3_K_L", "Q3_K_M", "Q2_K", "BF16", "F16", "F32", NULL};

// A multimodal projector sits beside a model in many repositories: it is no model.
static bool is_projector(const char *name) {
	const char *base = strrchr(name, '/');
	return strcasestr(base ? base + 1 : name, "mmproj") != NULL;
}

// Of names (n of them), the index ORG/REPO without :QUANT takes (-1: none), its quant into q:
// the first default quant a single file holds, else the first part of a split one.
static int default_pick(const char *const *names, int n, const char **q) {
	for (int split = 0; split < 2; split++)
		for (int k = 0; pull_default_quants[k]; k++)
			for (int i = 0; i < n; i++)
				if (!is_projector(names[i]) && holds_quant(names[i], pull_default_quants[k]) && (strstr(names[i], "-of-") != NULL) == split &&
				    (!split || strstr(names[i], "00001-of-"))) {
					*q = pull_default_quants[k];
					return i;
				}
	return -1;
}

// The repository's file listing into *out (a JSON array), tried again after a transient failure.
static int read_listing(pull_ctx *x, const char *org, const char *repo, json_t **out) {
	const pull_config *c = x->c;
	char url[4096];
	snprintf(url, sizeof url, "%s/api/models/%s/%s/tree/main", endpoint(c), org, repo);
	x->t0_us = base_now_us();
	for (int attempt = 1;; attempt++) {
		CURL *h = curl_easy_init();
		if (!h) return fail(x, LANES_ENOMEM, "out of memory");
		listing body = {.retry_after_s = -1};
		struct curl_slist *hd = NULL;
		pull_ref hub = {.hub = true};
		auth_header(c, &hub, &hd);
		curl_easy_setopt(h, CURLOPT_URL, url);
		transfer_opts(c, h);
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
		curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, to_buf);
		curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
		curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, listing_header);
		curl_easy_setopt(h, CURLOPT_HEADERDATA, &body);
		curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
		curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_cancel_check);
		curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
		CURLcode rc = curl_easy_perform(h);
		long code = 0;
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
		curl_easy_cleanup(h);
		curl_slist_free_all(hd);
		if (rc == CURLE_OK) {
			json_t *arr = json_loadb(body.p ? body.p : "", body.len, 0, NULL);
			free(body.p);
			if (!json_is_array(arr)) {
				json_decref(arr);
				return fail(x, LANES_EIO, "%s: not a file listing", url);
			}
			*out = arr;
			return 0;
		}
		free(body.p);
		char why[256];
		if (code >= 400) snprintf(why, sizeof why, "HTTP %ld", code);
		else why_failed(c, rc, why, sizeof why);
		if (x->cancelled) return fail(x, LANES_ECANCELLED, "the pull was cancelled");
		if (attempt < tries(c) && transient(rc, code)) {
			if (!retry_wait(x, attempt, why, 0, body.retry_after_s)) return fail(x, LANES_ECANCELLED, "the pull was cancelled");
			continue;
		}
		if (code == 404) return fail(x, LANES_ENOTFOUND, "%s: HTTP %ld", url, code);
		if (code >= 400 && !transient(rc, code))
			return fail(x, LANES_EIO, "%s: HTTP %ld%s", url, code, code == 401 || code == 403 ? GATED_HINT : "");
		if (rc == CURLE_WRITE_ERROR) return fail(x, LANES_EIO, "%s: the file listing is larger than %u MiB", url, MAX_LISTING >> 20);
		return gave_up(x, url, why, attempt);
	}
}

// ORG/REPO:QUANT: the .gguf file of the repository's listing whose name holds QUANT; quant
// NULL: the first of pull_default_quants the listing has, said in the log.
static int pick_file(pull_ctx *x, const char *org, const char *repo, const char *quant, char *file, size_t n) {
	json_t *arr = NULL;
	const int rc = read_listing(x, org, repo, &arr);
	if (rc) return rc;
	int found = 0, unsafe = 0, nsafe = 0;
	size_t i;
	json_t *e;
	char best[1024] = "", first_unsafe[128] = "";
	const char *safe[256];
	json_array_foreach(arr, i, e) {
		const char *p = json_string_value(json_object_get(e, "path"));
		if (!p || !ends_with(p, ".gguf") || (quant && !strcasestr(p, quant))) continue;
		if (!pull_safe_path(p, true)) { // it would leave the cache, or is no file name: never written
			if (!unsafe++) shown(p, first_unsafe, sizeof first_unsafe);
			continue;
		}
		if (!quant) {
			if (nsafe < (int)(sizeof safe / sizeof safe[0])) safe[nsafe++] = p;
			continue;
		}
		// the first of a split model's parts is not a whole model: prefer a single file
		if (!found || (strstr(best, "-of-") && !strstr(p, "-of-"))) snprintf(best, sizeof best, "%s", p);
		found++;
	}
	if (!quant) {
		const char *q = NULL;
		int k = default_pick(safe, nsafe, &q);
		int models = 0;
		for (int j = 0; j < nsafe; j++) {
			if (is_projector(safe[j])) continue;
			if (k < 0 && !models) k = j; // no quantization named: the only model there is
			models++;
		}
		if (k >= 0 && (q || models == 1)) {
			snprintf(best, sizeof best, "%s", safe[k]);
			found = 1;
			if (q) LOG_INFO("pull", "%s/%s: no quantization given, taking %s (%s); name another as %s/%s:QUANT", org, repo, q, best, org, repo);
			else LOG_INFO("pull", "%s/%s: no quantization given, taking its one model %s", org, repo, best);
		} else if (models > 1) {
			char names[512];
			size_t w = 0;
			names[0] = 0;
			for (int j = 0, shown_n = 0; j < nsafe && shown_n < 4 && w < sizeof names; j++)
				if (!is_projector(safe[j])) w += (size_t)snprintf(names + w, sizeof names - w, "%s%s", shown_n++ ? ", " : "", safe[j]);
			json_decref(arr);
			return fail(x, LANES_ENOTFOUND, "%s/%s has %d .gguf files and none of the usual quantizations (Q4_K_M, Q8_0, ...): name one as %s/%s:QUANT or hf:%s/%s/FILE.gguf (%s%s)",
				    org, repo, models, org, repo, org, repo, names, models > 4 ? ", ..." : "");
		}
	}
	json_decref(arr);
	const char *what = quant ? quant : "a model";
	if (!found && unsafe)
		return fail(x, LANES_EIO, "%s/%s lists no .gguf file matching '%s' with a safe name (refused %d, such as '%s')", org, repo,
			    what, unsafe, first_unsafe);
	if (!found) return fail(x, LANES_ENOTFOUND, quant ? "%s/%s has no .gguf file matching '%s'" : "%s/%s has no .gguf file (%s)", org, repo, what);
	if (unsafe) LOG_WARN("pull", "%d file names of %s/%s refused as unsafe, such as '%s'", unsafe, org, repo, first_unsafe);
	if (found > 1) LOG_INFO("pull", "%d files match '%s': taking %s", found, quant, best);
	snprintf(file, n, "%s", best);
	return 0;
}

// The hub's spellings of a reference, as Ollama and the hub's own pages write them.
static const char *hub_ref(const char *ref) {
	static const char *const prefixes[] = {"hf:", "hf.co/", "huggingface.co/"};
	for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
		if (!strncmp(ref, prefixes[i], strlen(prefixes[i]))) return ref + strlen(prefixes[i]);
	return ref;
}

static int not_ref(pull_ctx *x, const char *ref) {
	return fail(x, LANES_EINVAL, "'%s' is not a model reference: hf:ORG/REPO/FILE.gguf, ORG/REPO[:QUANT]%s", ref,
		    x->c->urls ? " or an https:// URL" : " or hf.co/ORG/REPO[:QUANT]");
}

// ref into r; resolve: ORG/REPO:QUANT asks the hub's listing which file (else only its form is checked).
static int parse_ref(pull_ctx *x, const char *ref, pull_ref *r, bool resolve) {
	const pull_config *c = x->c;
	memset(r, 0, sizeof *r);
	if (!strncmp(ref, "https://", 8) || !strncmp(ref, "http://", 7)) {
		if (!c->urls) return not_ref(x, ref);
		const char *host = strstr(ref, "//") + 2, *slash = strchr(host, '/');
		char name[512], hostname[256];
		const char *q = slash ? slash + strcspn(slash, "?#") : host + strlen(host);
		const char *b = q;
		while (b > host && b[-1] != '/') b--;
		snprintf(hostname, sizeof hostname, "%.*s", (int)((slash ? slash : q) - host), host);
		snprintf(name, sizeof name, "%.*s", (int)(q - b), b);
		for (char *p = hostname; *p; p++)
			if (*p == ':') *p = '_';
		if (!slash || !pull_safe_path(hostname, false) || !pull_safe_path(name, false) || !ends_with(name, ".gguf"))
			return fail(x, LANES_EINVAL, "'%s': a URL must end in a file name NAME.gguf", ref);
		snprintf(r->url, sizeof r->url, "%s", ref);
		snprintf(r->rel, sizeof r->rel, "url/%s/%s", hostname, name);
		return 0;
	}
	const char *given = ref;
	ref = hub_ref(ref);
	char org[256], repo[256], file[1024] = "";
	const char *a = strchr(ref, '/');
	if (!a || a - ref >= (long)sizeof org) return not_ref(x, given);
	snprintf(org, sizeof org, "%.*s", (int)(a - ref), ref);
	const char *b = a + 1 + strcspn(a + 1, "/:");
	if (b - a - 1 >= (long)sizeof repo) return not_ref(x, given);
	snprintf(repo, sizeof repo, "%.*s", (int)(b - a - 1), a + 1);
	if (!pull_safe_path(org, false) || !pull_safe_path(repo, false)) return not_ref(x, given);
	if (*b == ':') {
		if (!pull_safe_path(b + 1, false)) return not_ref(x, given);
		if (!resolve) return 0;
		int rc = pick_file(x, org, repo, b + 1, file, sizeof file);
		if (rc) return rc;
	} else if (*b == '/') {
		snprintf(file, sizeof file, "%s", b + 1);
		if (!pull_safe_path(file, true) || !ends_with(file, ".gguf")) return not_ref(x, given);
	} else if (!*b && !ends_with(repo, ".gguf")) { // ORG/REPO: the default quantization
		if (!resolve) return 0;
		int rc = pick_file(x, org, repo, NULL, file, sizeof file);
		if (rc) return rc;
	} else return not_ref(x, given);
	snprintf(r->url, sizeof r->url, "%s/%s/%s/resolve/main/%s", endpoint(c), org, repo, file);
	snprintf(r->rel, sizeof r->rel, "%s/%s/%s", org, repo, file);
	r->hub = true;
	return 0;
}

static int mkdirs(const char *path) {
	char p[4096];
	snprintf(p, sizeof p, "%s", path);
	for (char *q = p + 1; *q; q++) {
		if (*q != '/') continue;
		*q = 0;
		if (mkdir(p, 0755) && errno != EEXIST) return -1;
		*q = '/';
	}
	return 0;
}

// ---- one transfer --------------------------------------------------------------------------

typedef struct {
	FILE *f;
	CURL *c;
	pull_ctx *x;
	int64_t have, total;        // bytes in the .part file; the whole file's size (-1: unknown)
	char sha[65];               // the hub's SHA-256 of the file ("": none published)
	int64_t linked_size;        // X-Linked-Size (-1: none)
	int64_t range_start;        // a 206's Content-Range start (-1: none)
	bool restart_checked, discard; // discard: an error's body, never part of the file
	char why[256];              // why a callback stopped the transfer ("": it did not)
	bool drop;                  // ... and the .part file goes too: its bytes are not the file's
	sha256_ctx hash;            // of the .part file's first `hashed` bytes, fed as they are written
	int64_t hashed;             // -1: lost (a read failed), the file is read back at the end
	int64_t retry_after_s;      // the last response's Retry-After (-1: none)
} xfer;

static void header_value(const char *line, size_t n, const char *name, char *out, size_t on) {
	const size_t k = strlen(name);
	if (n <= k || strncasecmp(line, name, k) || line[k] != ':') return;
	const char *v = line + k + 1;
	const char *end = line + n;
	while (v < end && (*v == ' ' || *v == '\t')) v++;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ')) end--;
	if (end - v >= 2 && !strncmp(v, "W/", 2)) v += 2;
	if (end > v && *v == '"') v++, end -= end[-1] == '"';
	snprintf(out, on, "%.*s", (int)(end - v), v);
}

static bool is_sha(const char *h) {
	if (strlen(h) != 64) return false;
	for (const char *p = h; *p; p++)
		if (!strchr("0123456789abcdef", *p)) return false;
	return true;
}

// A byte count as a header gives it: digits only, or -1.
static int64_t count_of(const char *v) {
	if (!*v || strlen(v) > 18 || v[strspn(v, "0123456789")]) return -1;
	return strtoll(v, NULL, 10);
}

// Headers of every response on the way (the hub's 302 carries X-Linked-ETag and X-Linked-Size).
static size_t on_header(char *line, size_t sz, size_t n, void *ud) {
	xfer *x = ud;
	char v[256] = "";
	if (sz * n >= 5 && !strncmp(line, "HTTP/", 5)) x->range_start = x->retry_after_s = -1; // a new response
	const int64_t ra = retry_after(line, sz * n);
	if (ra > 0) x->retry_after_s = ra;
	header_value(line, sz * n, "x-linked-etag", v, sizeof v);
	if (is_sha(v) && !x->sha[0]) snprintf(x->sha, sizeof x->sha, "%s", v);
	v[0] = 0;
	header_value(line, sz * n, "x-linked-size", v, sizeof v);
	if (v[0] && x->linked_size < 0) x->linked_size = count_of(v);
	v[0] = 0;
	header_value(line, sz * n, "etag", v, sizeof v); // a bare LFS oid is its SHA-256 too
	if (x->sha[0] == 0 && is_sha(v)) snprintf(x->sha, sizeof x->sha, "%s", v);
	v[0] = 0;
	header_value(line, sz * n, "content-range", v, sizeof v); // bytes START-END/TOTAL
	if (!strncmp(v, "bytes ", 6)) {
		char start[32] = "";
		snprintf(start, sizeof start, "%.*s", (int)strcspn(v + 6, "-"), v + 6);
		x->range_start = count_of(start);
		const char *slash = strchr(v, '/');
		if (slash && count_of(slash + 1) >= 0) x->total = count_of(slash + 1);
	}
	return sz * n;
}

// Stops the transfer with a reason; drop: the .part file is not the file's beginning.
static size_t stop(xfer *x, bool drop, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static size_t stop(xfer *x, bool drop, const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(x->why, sizeof x->why, fmt, ap);
	va_end(ap);
	x->drop = drop;
	return 0;
}

static size_t on_data(char *p, size_t sz, size_t n, void *ud) {
	xfer *x = ud;
	const int64_t max = x->x->c->max_bytes;
	if (!x->restart_checked) {
		long code = 0;
		curl_off_t len = -1;
		curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &code);
		curl_easy_getinfo(x->c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
		x->discard = code >= 300;
		if (x->discard) return 0; // an error's body is never read: its status says it all
		if (code == 206 && x->range_start < 0) return stop(x, false, "the hub answered 206 without a Content-Range");
		if (code == 206 && x->range_start != x->have && x->range_start != 0)
			return stop(x, false, "the hub answered 206 from byte %lld when asked for bytes %lld-", (long long)x->range_start,
				    (long long)x->have);
		if (code != 206 || x->range_start == 0) x->total = len; // the whole file from its start
		if ((code != 206 || x->range_start == 0) && x->have) { // the server sent the whole file: start over
			if (ftruncate(fileno(x->f), 0) || fseek(x->f, 0, SEEK_SET)) return stop(x, false, "cannot write: %s", strerror(errno));
			x->have = 0;
			sha256_init(&x->hash);
			x->hashed = 0;
		}
		x->restart_checked = true;
		if (x->linked_size > max)
			return stop(x, true, "the hub says %lld bytes, larger than %lld bytes (LANES_PULL_MAX_BYTES)", (long long)x->linked_size,
				    (long long)max);
		if (x->total > max)
			return stop(x, true, "%lld bytes, larger than %lld bytes (LANES_PULL_MAX_BYTES)", (long long)x->total, (long long)max);
	}
	const int64_t add = (int64_t)(sz * n);
	// a body that runs past the size published for it is not the file, however it ends
	if (x->linked_size >= 0 && x->have + add > x->linked_size)
		return stop(x, true, "more than the %lld bytes the hub publishes", (long long)x->linked_size);
	if (x->have + add > max) return stop(x, true, "larger than %lld bytes (LANES_PULL_MAX_BYTES)", (long long)max);
	if (fwrite(p, sz, n, x->f) != n) return stop(x, false, "cannot write: %s", strerror(errno));
	x->have += add;
	if (x->hashed >= 0) {
		sha256_update(&x->hash, p, sz * n);
		x->hashed += add;
	}
	return sz * n;
}

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ut, curl_off_t un) {
	xfer *x = ud;
	int64_t total = x->linked_size > 0 ? x->linked_size : x->total;
	if (total <= 0 && dltotal > 0) total = x->have - dlnow + dltotal; // this transfer's start plus its length
	pull_ctx *px = x->x;
	px->p.stage = PULL_DOWNLOAD;
	px->p.sha = x->sha;
	px->p.done = x->have;
	px->p.total = total > 0 ? total : -1;
	return !report(px);
}

// The hash of the .part file's first x->have bytes, read back when what was fed differs (a
// download resumed from an earlier run, or a retry after a failed write).
static void hash_part(const char *part, xfer *x) {
	if (x->hashed == x->have) return;
	sha256_init(&x->hash);
	x->hashed = 0;
	FILE *f = fopen(part, "rb");
	const size_t cap = 1 << 20;
	unsigned char *buf = f ? malloc(cap) : NULL;
	size_t n;
	while (buf && x->hashed < x->have && (n = fread(buf, 1, cap, f)) > 0) {
		if ((int64_t)n > x->have - x->hashed) n = (size_t)(x->have - x->hashed);
		sha256_update(&x->hash, buf, n);
		x->hashed += (int64_t)n;
	}
	if (x->hashed != x->have) x->hashed = -1;
	free(buf);
	if (f) fclose(f);
}

// The download of r into part, resumed where it stopped; 0 when the server says it is whole.
// On failure the .part file stays (a later pull resumes it) unless it is empty or not the file's.
static int fetch(pull_ctx *px, const pull_ref *r, const char *part, xfer *x) {
	const pull_config *c = px->c;
	struct curl_slist *h = NULL;
	auth_header(c, r, &h);
	int rc_out = 0;
	px->t0_us = base_now_us();
	for (int attempt = 1;; attempt++) {
		struct stat st;
		x->have = stat(part, &st) ? 0 : st.st_size;
		hash_part(part, x);
		x->f = fopen(part, "ab");
		if (!x->f) {
			rc_out = fail(px, LANES_EIO, "%s: %s", part, strerror(errno));
			break;
		}
		x->c = curl_easy_init();
		x->restart_checked = x->discard = false;
		x->why[0] = 0;
		x->range_start = -1;
		char range[64];
		snprintf(range, sizeof range, "%lld-", (long long)x->have);
		curl_easy_setopt(x->c, CURLOPT_URL, r->url);
		transfer_opts(c, x->c);
		curl_easy_setopt(x->c, CURLOPT_HTTPHEADER, h);
		if (x->have) curl_easy_setopt(x->c, CURLOPT_RANGE, range);
		curl_easy_setopt(x->c, CURLOPT_HEADERFUNCTION, on_header);
		curl_easy_setopt(x->c, CURLOPT_HEADERDATA, x);
		curl_easy_setopt(x->c, CURLOPT_WRITEFUNCTION, on_data);
		curl_easy_setopt(x->c, CURLOPT_WRITEDATA, x);
		curl_easy_setopt(x->c, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(x->c, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(x->c, CURLOPT_XFERINFODATA, x);
		CURLcode rc = curl_easy_perform(x->c);
		long code = 0;
		curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &code);
		curl_easy_cleanup(x->c);
		const bool wrote = !fclose(x->f);
		if (!wrote) x->hashed = -1; // fed bytes may not all be in the file
		if (px->cancelled) {
			rc_out = fail(px, LANES_ECANCELLED, "the pull was cancelled");
			break;
		}
		if (code == 416 && x->have > 0) break; // the .part file was already whole
		const bool again = attempt < tries(c) && wrote && !x->why[0] && transient(rc, code);
		char why[256];
		if (code >= 400) snprintf(why, sizeof why, "HTTP %ld", code);
		else why_failed(c, rc, why, sizeof why);
		if (again) {
			struct stat now;
			if (!retry_wait(px, attempt, why, stat(part, &now) ? 0 : now.st_size, x->retry_after_s)) {
				rc_out = fail(px, LANES_ECANCELLED, "the pull was cancelled");
				break;
			}
			continue;
		}
		if (code >= 400 && transient(rc, code) && !x->why[0]) { // the hub kept saying come back later
			rc_out = gave_up(px, r->url, why, attempt);
			break;
		}
		if (x->discard || (rc == CURLE_OK && code >= 300)) { // an error, or a redirect with nowhere to go
			rc_out = fail(px, code == 404 ? LANES_ENOTFOUND : LANES_EIO, "%s: HTTP %ld%s", r->url, code,
				      code == 401 || code == 403 ? GATED_HINT : "");
			break;
		}
		if (x->why[0]) {
			rc_out = fail(px, x->drop ? LANES_EFORMAT : LANES_EIO, "%s: %s%s", r->rel, x->why, x->drop ? ": removed" : "");
			if (x->drop) unlink(part);
			break;
		}
		if (rc == CURLE_OK && wrote) break;
		if (!wrote) rc_out = fail(px, LANES_EIO, "%s: cannot write: %s", part, strerror(errno));
		else if (!transient(rc, code)) rc_out = fail(px, LANES_EIO, "%s: %s", r->url, why);
		else rc_out = gave_up(px, r->url, why, attempt);
		break;
	}
	curl_slist_free_all(h);
	struct stat st;
	if (rc_out && !stat(part, &st) && st.st_size == 0) unlink(part); // nothing came: no partial download to list
	return rc_out;
}

static int file_sha(const char *path, char out[65]) {
	FILE *f = fopen(path, "rb");
	if (!f) return -1;
	sha256_ctx c;
	sha256_init(&c);
	const size_t cap = 1 << 20;
	unsigned char *buf = malloc(cap);
	size_t n;
	while (buf && (n = fread(buf, 1, cap, f)) > 0) sha256_update(&c, buf, n);
	const bool bad = !buf || ferror(f);
	free(buf);
	fclose(f);
	uint8_t d[32];
	sha256_final(&c, d);
	for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
	return bad ? -1 : 0;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_OK;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

// The download of r to path: the .part file locked while written, checked, then renamed.
static int pull_into(pull_ctx *px, const pull_ref *r, const char *path) {
	char part[4200];
	struct stat st;
	snprintf(part, sizeof part, "%s.part", path);
	if (mkdirs(part)) return fail(px, LANES_EIO, "%s: %s", part, strerror(errno));
	// a second pull of the same file (this server's or another process's) must not write it too
	const int lock = open(part, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (lock < 0) return fail(px, LANES_EIO, "%s: %s", part, strerror(errno));
	if (flock(lock, LOCK_EX | LOCK_NB)) {
		close(lock);
		return fail(px, LANES_EBUSY, "%s is being pulled by another pull: wait for it to end", r->rel);
	}
	LOG_INFO("pull", "%s -> %s", r->url, path);
	xfer x = {.x = px, .linked_size = -1, .total = -1, .range_start = -1, .retry_after_s = -1};
	sha256_init(&x.hash);
	int rc = fetch(px, r, part, &x);
	if (!rc && stat(part, &st)) rc = fail(px, LANES_EIO, "%s: %s", part, strerror(errno));
	if (!rc && x.linked_size >= 0 && st.st_size != x.linked_size) {
		rc = fail(px, LANES_EFORMAT, "%s: %lld bytes, the hub says %lld: removed", r->rel, (long long)st.st_size,
			  (long long)x.linked_size);
		unlink(part);
	}
	if (!rc) {
		px->p = (pull_progress){.stage = PULL_VERIFY, .rel = r->rel, .sha = x.sha, .done = st.st_size, .total = st.st_size};
		if (!report(px)) rc = fail(px, LANES_ECANCELLED, "the pull was cancelled");
	}
	char sha[65];
	if (!rc && x.sha[0]) {
		if (x.hashed == st.st_size) { // hashed as it arrived: no second read
			uint8_t d[32];
			sha256_final(&x.hash, d);
			for (int i = 0; i < 32; i++) snprintf(sha + 2 * i, 3, "%02x", d[i]);
		} else if (file_sha(part, sha)) {
			rc = fail(px, LANES_EIO, "%s: cannot read it back", part);
		}
		if (!rc && strcmp(sha, x.sha)) {
			rc = fail(px, LANES_EFORMAT, "%s: SHA-256 %s, the hub publishes %s: removed", r->rel, sha, x.sha);
			unlink(part);
		}
	} else if (!rc) LOG_WARN("pull", "no SHA-256 published for %s: only the GGUF structure is checked", r->rel);
	char gerr[512];
	gguf *g = NULL;
	if (!rc && gguf_open(&g, part, gerr, sizeof gerr)) {
		rc = fail(px, LANES_EFORMAT, "%s is not a GGUF file (%s): removed", r->rel, gerr);
		unlink(part);
	}
	gguf_free(g);
	if (!rc) {
		px->p.stage = PULL_COMMIT;
		report(px); // the file is whole and checked: a cancel now changes nothing
		if (rename(part, path)) rc = fail(px, LANES_EIO, "%s: %s", path, strerror(errno));
	}
	if (!rc) LOG_INFO("pull", "%s: %lld bytes%s", r->rel, (long long)st.st_size, x.sha[0] ? ", SHA-256 checked" : "");
	close(lock);
	return rc;
}

// A .part file beside a whole one is left from an earlier pull: gone, unless a pull writes it now.
static void drop_stale_part(const char *path) {
	char part[4200];
	snprintf(part, sizeof part, "%s.part", path);
	const int fd = open(part, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) return;
	if (!flock(fd, LOCK_EX | LOCK_NB)) unlink(part);
	close(fd);
}

int pull_model(const pull_config *c, const char *ref, pull_progress_fn fn, void *ud, char *path, size_t n, char *rel,
	       size_t reln, char *err, size_t errlen) {
	pull_ctx px = {.c = c, .fn = fn, .ud = ud, .err = err, .errlen = errlen, .p = {.stage = PULL_RESOLVE, .rel = "", .sha = ""}};
	pull_ref r;
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc) return fail(&px, LANES_EIO, "libcurl: %s", curl_easy_strerror(curl_init_rc));
	if (!report(&px)) return fail(&px, LANES_ECANCELLED, "the pull was cancelled");
	int rc = parse_ref(&px, ref, &r, true);
	if (rc) return rc;
	char dir[2048];
	pull_cache_dir(c, dir, sizeof dir);
	snprintf(path, n, "%s/%s", dir, r.rel);
	if (rel) snprintf(rel, reln, "%s", r.rel);
	px.p.rel = r.rel;
	struct stat st;
	if (!stat(path, &st)) {
		LOG_INFO("pull", "%s is in the cache", r.rel);
		drop_stale_part(path);
		px.p = (pull_progress){.stage = PULL_COMMIT, .rel = r.rel, .sha = "", .done = st.st_size, .total = st.st_size};
		report(&px);
		return 0;
	}
	return pull_into(&px, &r, path);
}

int pull_ref_check(const pull_config *c, const char *ref, char *err, size_t errlen) {
	pull_ctx px = {.c = c, .err = err, .errlen = errlen};
	pull_ref r;
	return parse_ref(&px, ref, &r, false);
}

bool pull_is_ref(const char *m) {
	if (!m) return false;
	struct stat st;
	if (!stat(m, &st)) return false; // a file of that name wins
	if (!strncmp(m, "hf:", 3) || !strncmp(m, "https://", 8) || !strncmp(m, "http://", 7)) return true;
	const char *h = hub_ref(m), *slash = strchr(h, '/');
	if (!slash || strchr(slash + 1, '/')) return false;
	const char *colon = strchr(slash, ':'); // ORG/REPO:QUANT, or ORG/REPO naming no file
	char org[256], repo[256];
	const size_t rl = colon ? (size_t)(colon - slash - 1) : strlen(slash + 1);
	if ((size_t)(slash - h) >= sizeof org || rl >= sizeof repo) return false;
	snprintf(org, sizeof org, "%.*s", (int)(slash - h), h);
	snprintf(repo, sizeof repo, "%.*s", (int)rl, slash + 1);
	return pull_safe_path(org, false) && pull_safe_path(repo, false) && (colon || !ends_with(repo, ".gguf"));
}

// ---- names in the cache ----------------------------------------------------------------------

// Whether the file rel under dir is a regular file whose folder lies inside dir.
static bool inside(const char *dir, const char *rel) {
	char root[PATH_MAX], p[4096], real[PATH_MAX];
	snprintf(p, sizeof p, "%s/%s", dir, rel);
	char *slash = strrchr(p, '/');
	*slash = 0;
	if (!realpath(dir, root) || !realpath(p, real)) return false;
	const size_t n = strlen(root);
	if (strncmp(real, root, n) || (real[n] && real[n] != '/')) return false;
	*slash = '/';
	struct stat st;
	return !lstat(p, &st) && S_ISREG(st.st_mode);
}

int pull_cache_new_name(const char *name, char *rel, size_t n, char *err, size_t errlen) {
	char b[300];
	const size_t len = strlen(name);
	if (len >= sizeof b) return base_seterr(err, errlen, LANES_EINVAL, "'%.64s...' is too long for a model name", name);
	snprintf(b, sizeof b, "%s", name);
	if (len > 7 && !strcmp(b + len - 7, ":latest")) b[len - 7] = 0;
	if (len > 5 && ends_with(b, ".gguf")) b[strlen(b) - 5] = 0;
	if (!base_name_ok(b) || strlen(b) + 5 > BASE_NAME_MAX)
		return base_seterr(err, errlen, LANES_EINVAL,
				   "'%.64s' cannot name a copy: 1 to %d letters, digits, '.', '_' or '-' (not first '.'), with or without :latest",
				   name, BASE_NAME_MAX - 5);
	snprintf(rel, n, "%s.gguf", b);
	return 0;
}

// Of the models in the cache folder dir/folder, the one quant names (NULL: the default
// quantization's) into file: complete files first, then partial downloads (*partial set).
static bool cached_pick(const char *dir, const char *folder, const char *quant, char *file, size_t n, bool *partial) {
	char p[4096], names[64][256];
	const char *list[64];
	snprintf(p, sizeof p, "%s/%s", dir, folder);
	for (int part = 0; part < 2; part++) {
		DIR *d = opendir(p);
		struct dirent *de;
		int k = 0;
		while (d && (de = readdir(d)) && k < 64) {
			char f[256];
			snprintf(f, sizeof f, "%s", de->d_name);
			const size_t len = strlen(f);
			if (part && (len <= 5 || strcmp(f + len - 5, ".part"))) continue;
			if (part) f[len - 5] = 0;
			if (!ends_with(f, ".gguf") || !pull_safe_path(f, false) || (quant && !strcasestr(f, quant))) continue;
			snprintf(names[k], sizeof names[k], "%s", f);
			list[k] = names[k];
			k++;
		}
		if (d) closedir(d);
		int best = -1;
		const char *q;
		if (!quant) best = default_pick(list, k, &q);
		for (int i = 0; i < k; i++) // as pick_file picks: a single file over a split one's part
			if (!is_projector(list[i]) && (quant || (k == 1 && best < 0)) &&
			    (best < 0 || (quant && strstr(list[best], "-of-") && !strstr(list[i], "-of-"))))
				best = i;
		if (best >= 0) {
			snprintf(file, n, "%s/%s", folder, list[best]);
			*partial = part;
			return true;
		}
	}
	return false;
}

int pull_cache_find(const pull_config *c, const char *name, char *rel, size_t n, char *err, size_t errlen) {
	char dir[2048], b[512];
	pull_cache_dir(c, dir, sizeof dir);
	const char *h = hub_ref(name);
	if (strlen(h) >= sizeof b) return base_seterr(err, errlen, LANES_EINVAL, "'%.64s...' is not a model name", name);
	snprintf(b, sizeof b, "%s", h);
	const size_t len = strlen(b);
	if (len > 7 && !strcmp(b + len - 7, ":latest")) b[len - 7] = 0;
	const char *slash = strchr(b, '/'), *colon = strrchr(b, ':');
	char folder[512] = "";
	const char *quant = NULL;
	if (slash && colon && colon > slash) { // ORG/REPO:QUANT: the file of that folder a pull picked
		snprintf(folder, sizeof folder, "%.*s", (int)(colon - b), b);
		quant = colon + 1;
		if (strchr(slash + 1, '/') || !pull_safe_path(folder, true) || !pull_safe_path(quant, false))
			return base_seterr(err, errlen, LANES_EINVAL, "'%s' is not a model name", name);
	} else {
		if (!pull_safe_path(b, true)) return base_seterr(err, errlen, LANES_EINVAL, "'%s' is not a model name", name);
		char p[4096];
		struct stat st;
		snprintf(p, sizeof p, "%s/%s", dir, b);
		// ORG/REPO, a folder a pull filled: the file its default quantization picks
		if (slash && !strchr(slash + 1, '/') && !ends_with(b, ".gguf") && !stat(p, &st) && S_ISDIR(st.st_mode))
			snprintf(folder, sizeof folder, "%s", b);
		else snprintf(rel, n, "%s%s", b, ends_with(b, ".gguf") ? "" : ".gguf");
	}
	bool partial = false;
	if (folder[0] && !cached_pick(dir, folder, quant, rel, n, &partial))
		return base_seterr(err, errlen, LANES_ENOTFOUND, "model '%s' is not in the cache", name);
	char part[1100];
	snprintf(part, sizeof part, "%s.part", rel);
	if (!partial && inside(dir, rel)) return 0;
	if (inside(dir, part))
		return base_seterr(err, errlen, LANES_EBUSY, "'%s' is only partly downloaded (%s.part): pull it again to resume it, or remove it", name, rel);
	return base_seterr(err, errlen, LANES_ENOTFOUND, "model '%s' is not in the cache", name);
}

int pull_cache_copy(const pull_config *c, const char *src, const char *dst, char *err, size_t errlen) {
	char dir[2048], from[4096], to[4096], tmp[4200];
	pull_cache_dir(c, dir, sizeof dir);
	snprintf(from, sizeof from, "%s/%s", dir, src);
	snprintf(to, sizeof to, "%s/%s", dir, dst);
	snprintf(tmp, sizeof tmp, "%s/.%s.copy", dir, dst); // hidden: never listed as a model
	unlink(tmp);
	if (!strcmp(from, to)) return 0;
	// cached files are never written in place (a pull renames a whole one over), so a link is a copy
	if (link(from, tmp)) {
		int in = open(from, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		int out = in < 0 ? -1 : open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		char *buf = out < 0 ? NULL : malloc(1 << 20);
		ssize_t k = buf ? 0 : -1;
		while (buf && (k = read(in, buf, 1 << 20)) > 0)
			if (write(out, buf, (size_t)k) != k) k = -1;
		const int e = errno;
		free(buf);
		if (in >= 0) close(in);
		if (out >= 0 && (close(out) || k < 0)) k = -1;
		if (k < 0) {
			unlink(tmp);
			return base_seterr(err, errlen, LANES_EIO, "cannot copy %s to %s: %s", src, dst, strerror(e));
		}
	}
	if (rename(tmp, to)) {
		const int e = errno;
		unlink(tmp);
		return base_seterr(err, errlen, LANES_EIO, "cannot copy %s to %s: %s", src, dst, strerror(e));
	}
	return 0;
}

int pull_cache_remove(const pull_config *c, const char *rel, char *err, size_t errlen) {
	char dir[2048], path[4096], part[4200];
	pull_cache_dir(c, dir, sizeof dir);
	snprintf(path, sizeof path, "%s/%s", dir, rel);
	snprintf(part, sizeof part, "%s.part", path);
	const int fd = open(part, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB)) { // a pull writes it now
		close(fd);
		return base_seterr(err, errlen, LANES_EBUSY, "%s is being pulled now: wait for the pull to end", rel);
	}
	const bool had_part = fd >= 0 && !unlink(part);
	if (fd >= 0) close(fd);
	if (unlink(path) && !(had_part && errno == ENOENT))
		return base_seterr(err, errlen, errno == ENOENT ? LANES_ENOTFOUND : LANES_EIO, "%s: %s", rel, strerror(errno));
	return 0;
}
