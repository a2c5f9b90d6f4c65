// cli: the model cache — `lanes pull REF` downloads a GGUF with libcurl (resumed into a .part
// file, size and the hub's SHA-256 checked, validated as GGUF before it takes its name),
// `lanes ls` lists the cache and `lanes rm NAME` deletes; `lanes serve -m hf:...` pulls first.
// What a hub sends is bounded: redirects, stalls, sizes, names. A .part file a broken transfer
// leaves is resumed by the next pull; one whose bytes cannot be the file's is removed.
#include "base/base.h"
#include "cli/cli.h"
#include "gguf/gguf.h"

#include <curl/curl.h>
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define PULL_TRIES 5
#define PULL_REDIRECTS 10 // the hub's resolve takes one or two to its CDN
#define MAX_LISTING (64u << 20)
#define MAX_NAME 400      // bytes of a name from a reference or a listing (a component: 255)
#define GATED_HINT " (a gated repository? give --hf-token or HF_TOKEN)"

typedef struct {
	char url[4096];
	char rel[1024]; // where it goes under the cache folder
	bool hub;       // from the hub: the token and its checksum headers apply
} pull_ref;

static void cache_dir(const cli_settings *s, char *out, size_t n) {
	if (s->models_dir && *s->models_dir) snprintf(out, n, "%s", s->models_dir);
	else snprintf(out, n, "%s/.cache/lanes/models", getenv("HOME") ? getenv("HOME") : ".");
}

// A name from a reference or a listing: words of [A-Za-z0-9._+-], never "." or "..", short
// enough to be a file name.
static bool safe_path(const char *p, bool slashes) {
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

static const char *endpoint(const cli_settings *s) { return s->hf_endpoint && *s->hf_endpoint ? s->hf_endpoint : "https://huggingface.co"; }

static void auth_header(const cli_settings *s, const pull_ref *r, struct curl_slist **h) {
	if (!r->hub || !s->hf_token || !*s->hf_token) return;
	char line[1024];
	snprintf(line, sizeof line, "Authorization: Bearer %s", s->hf_token);
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

// The options every transfer takes: redirects bounded and kept to HTTP(S), stalls bounded.
static void transfer_opts(const cli_settings *s, CURL *c) {
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(c, CURLOPT_MAXREDIRS, (long)PULL_REDIRECTS);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)s->pull_stall_s);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L); // less than a byte a second for that long
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)s->pull_stall_s);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "lanes");
}

// A failed transfer's reason, in the words of the knob or limit that ended it.
static void why_failed(const cli_settings *s, CURLcode rc, char *out, size_t n) {
	if (rc == CURLE_OPERATION_TIMEDOUT) snprintf(out, n, "nothing arrived for %lld s (LANES_PULL_STALL_S)", (long long)s->pull_stall_s);
	else if (rc == CURLE_TOO_MANY_REDIRECTS) snprintf(out, n, "too many redirects (more than %d)", PULL_REDIRECTS);
	else snprintf(out, n, "%s", curl_easy_strerror(rc));
}

typedef struct {
	char *p;
	size_t len, cap;
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

// ORG/REPO:QUANT: the .gguf file of the repository's listing whose name holds QUANT.
static int pick_file(const cli_settings *s, const char *org, const char *repo, const char *quant, char *file, size_t n) {
	char url[4096];
	snprintf(url, sizeof url, "%s/api/models/%s/%s/tree/main", endpoint(s), org, repo);
	CURL *c = curl_easy_init();
	if (!c) return -1;
	listing body = {0};
	struct curl_slist *h = NULL;
	pull_ref hub = {.hub = true};
	auth_header(s, &hub, &h);
	curl_easy_setopt(c, CURLOPT_URL, url);
	transfer_opts(s, c);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, to_buf);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
	curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
	CURLcode rc = curl_easy_perform(c);
	long code = 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	if (rc != CURLE_OK) {
		char why[256];
		why_failed(s, rc, why, sizeof why);
		if (code >= 400) cli_err("%s: HTTP %ld%s", url, code, code == 401 || code == 403 ? GATED_HINT : "");
		else if (rc == CURLE_WRITE_ERROR) cli_err("%s: the file listing is larger than %u MiB", url, MAX_LISTING >> 20);
		else cli_err("%s: %s", url, why);
		free(body.p);
		return -1;
	}
	json_t *arr = json_loadb(body.p ? body.p : "", body.len, 0, NULL);
	free(body.p);
	if (!json_is_array(arr)) {
		cli_err("%s: not a file listing", url);
		json_decref(arr);
		return -1;
	}
	int found = 0, unsafe = 0;
	size_t i;
	json_t *e;
	char best[1024] = "", first_unsafe[128] = "";
	json_array_foreach(arr, i, e) {
		const char *p = json_string_value(json_object_get(e, "path"));
		if (!p || !ends_with(p, ".gguf") || !strcasestr(p, quant)) continue;
		if (!safe_path(p, true)) { // it would leave the cache, or is no file name: never written
			if (!unsafe++) shown(p, first_unsafe, sizeof first_unsafe);
			continue;
		}
		// the first of a split model's parts is not a whole model: prefer a single file
		if (!found || (strstr(best, "-of-") && !strstr(p, "-of-"))) snprintf(best, sizeof best, "%s", p);
		found++;
	}
	json_decref(arr);
	if (!found && unsafe) {
		cli_err("%s/%s lists no .gguf file matching '%s' with a safe name (refused %d, such as '%s')", org, repo, quant, unsafe,
			first_unsafe);
		return -1;
	}
	if (!found) {
		cli_err("%s/%s has no .gguf file matching '%s'", org, repo, quant);
		return -1;
	}
	if (unsafe) LOG_WARN("pull", "%d file names of %s/%s refused as unsafe, such as '%s'", unsafe, org, repo, first_unsafe);
	if (found > 1) LOG_INFO("pull", "%d files match '%s': taking %s", found, quant, best);
	snprintf(file, n, "%s", best);
	return 0;
}

static int parse_ref(const cli_settings *s, const char *ref, pull_ref *r) {
	memset(r, 0, sizeof *r);
	if (!strncmp(ref, "https://", 8) || !strncmp(ref, "http://", 7)) {
		const char *host = strstr(ref, "//") + 2, *slash = strchr(host, '/');
		char name[512], hostname[256];
		const char *q = slash ? slash + strcspn(slash, "?#") : host + strlen(host);
		const char *b = q;
		while (b > host && b[-1] != '/') b--;
		snprintf(hostname, sizeof hostname, "%.*s", (int)((slash ? slash : q) - host), host);
		snprintf(name, sizeof name, "%.*s", (int)(q - b), b);
		for (char *p = hostname; *p; p++)
			if (*p == ':') *p = '_';
		if (!slash || !safe_path(hostname, false) || !safe_path(name, false) || !ends_with(name, ".gguf")) {
			cli_err("'%s': a URL must end in a file name NAME.gguf", ref);
			return -1;
		}
		snprintf(r->url, sizeof r->url, "%s", ref);
		snprintf(r->rel, sizeof r->rel, "url/%s/%s", hostname, name);
		return 0;
	}
	if (!strncmp(ref, "hf:", 3)) ref += 3;
	char org[256], repo[256], file[1024] = "";
	const char *a = strchr(ref, '/');
	if (!a || a - ref >= (long)sizeof org) goto bad;
	snprintf(org, sizeof org, "%.*s", (int)(a - ref), ref);
	const char *b = a + 1 + strcspn(a + 1, "/:");
	if (b - a - 1 >= (long)sizeof repo) goto bad;
	snprintf(repo, sizeof repo, "%.*s", (int)(b - a - 1), a + 1);
	if (!safe_path(org, false) || !safe_path(repo, false)) goto bad;
	if (*b == ':') {
		if (!safe_path(b + 1, false)) goto bad;
		if (pick_file(s, org, repo, b + 1, file, sizeof file)) return -1;
	} else if (*b == '/') {
		snprintf(file, sizeof file, "%s", b + 1);
		if (!safe_path(file, true) || !ends_with(file, ".gguf")) goto bad;
	} else goto bad;
	snprintf(r->url, sizeof r->url, "%s/%s/%s/resolve/main/%s", endpoint(s), org, repo, file);
	snprintf(r->rel, sizeof r->rel, "%s/%s/%s", org, repo, file);
	r->hub = true;
	return 0;
bad:
	cli_err("'%s' is not a model reference: hf:ORG/REPO/FILE.gguf, ORG/REPO:QUANT or an https:// URL", ref);
	return -1;
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
	const cli_settings *s;
	int64_t have, total;        // bytes in the .part file; the whole file's size (-1: unknown)
	char sha[65];               // the hub's SHA-256 of the file ("": none published)
	int64_t linked_size;        // X-Linked-Size (-1: none)
	int64_t range_start;        // a 206's Content-Range start (-1: none)
	bool restart_checked, discard; // discard: an error's body, never part of the file
	char why[256];              // why a callback stopped the transfer ("": it did not)
	bool drop;                  // ... and the .part file goes too: its bytes are not the file's
	sha256_ctx hash;            // of the .part file's first `hashed` bytes, fed as they are written
	int64_t hashed;             // -1: lost (a read failed), the file is read back at the end
	cli_progress bar;
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
	if (sz * n >= 5 && !strncmp(line, "HTTP/", 5)) x->range_start = -1; // a new response
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
	const int64_t max = x->s->pull_max_bytes;
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
	cli_progress_update(&x->bar, x->have, total, NULL);
	return 0;
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

// Whether a failed transfer is worth another try: the network broke, not the hub's answer.
static bool transient(CURLcode rc) {
	switch (rc) {
	case CURLE_PARTIAL_FILE: case CURLE_RECV_ERROR: case CURLE_SEND_ERROR: case CURLE_GOT_NOTHING:
	case CURLE_OPERATION_TIMEDOUT: case CURLE_COULDNT_CONNECT: case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_HTTP2: case CURLE_HTTP2_STREAM: case CURLE_SSL_CONNECT_ERROR:
		return true;
	default:
		return false;
	}
}

// The download of r into part, resumed where it stopped; 0 when the server says it is whole.
// On failure the .part file stays (a later pull resumes it) unless it is empty or not the file's.
static int fetch(const cli_settings *s, const pull_ref *r, const char *part, xfer *x) {
	struct curl_slist *h = NULL;
	auth_header(s, r, &h);
	int rc_out = 0;
	for (int attempt = 1;; attempt++) {
		struct stat st;
		x->have = stat(part, &st) ? 0 : st.st_size;
		hash_part(part, x);
		x->f = fopen(part, "ab");
		if (!x->f) {
			cli_err("%s: %s", part, strerror(errno));
			curl_slist_free_all(h);
			return -1;
		}
		x->c = curl_easy_init();
		x->restart_checked = x->discard = false;
		x->why[0] = 0;
		x->range_start = -1;
		char range[64];
		snprintf(range, sizeof range, "%lld-", (long long)x->have);
		curl_easy_setopt(x->c, CURLOPT_URL, r->url);
		transfer_opts(s, x->c);
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
		cli_progress_end(&x->bar);
		if (code == 416 && x->have > 0) break; // the .part file was already whole
		if (x->discard || (rc == CURLE_OK && code >= 300)) { // an error, or a redirect with nowhere to go
			cli_err("%s: HTTP %ld%s", r->url, code, code == 401 || code == 403 ? GATED_HINT : "");
			rc_out = -1;
			break;
		}
		if (x->why[0]) {
			cli_err("%s: %s%s", r->rel, x->why, x->drop ? ": removed" : "");
			if (x->drop) unlink(part);
			rc_out = -1;
			break;
		}
		if (rc == CURLE_OK && wrote) break;
		if (attempt >= PULL_TRIES || !transient(rc) || !wrote) {
			char why[256];
			why_failed(s, rc, why, sizeof why);
			if (!wrote) cli_err("%s: cannot write: %s", part, strerror(errno));
			else if (!transient(rc)) cli_err("%s: %s", r->url, why);
			else cli_err("%s: %s after %d tries", r->url, why, attempt);
			rc_out = -1;
			break;
		}
		LOG_WARN("pull", "%s (%lld bytes so far): resuming", curl_easy_strerror(rc), (long long)x->have);
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

int cli_pull(const cli_settings *s, const char *ref, char *path, size_t n) {
	pull_ref r;
	if (curl_global_init(CURL_GLOBAL_DEFAULT)) return -1;
	if (parse_ref(s, ref, &r)) return -1;
	char dir[2048], part[4200];
	cache_dir(s, dir, sizeof dir);
	snprintf(path, n, "%s/%s", dir, r.rel);
	struct stat st;
	if (!stat(path, &st)) {
		LOG_INFO("pull", "%s is in the cache", r.rel);
		return 0;
	}
	snprintf(part, sizeof part, "%s.part", path);
	if (mkdirs(part)) {
		cli_err("%s: %s", part, strerror(errno));
		return -1;
	}
	LOG_INFO("pull", "%s -> %s", r.url, path);
	xfer x = {.s = s, .linked_size = -1, .total = -1, .range_start = -1};
	sha256_init(&x.hash);
	cli_progress_start(&x.bar, "pull", true, true);
	if (fetch(s, &r, part, &x)) return -1;
	if (stat(part, &st)) {
		cli_err("%s: %s", part, strerror(errno));
		return -1;
	}
	if (x.linked_size >= 0 && st.st_size != x.linked_size) {
		cli_err("%s: %lld bytes, the hub says %lld: removed", r.rel, (long long)st.st_size, (long long)x.linked_size);
		unlink(part);
		return -1;
	}
	char sha[65];
	if (x.sha[0]) {
		if (x.hashed == st.st_size) { // hashed as it arrived: no second read
			uint8_t d[32];
			sha256_final(&x.hash, d);
			for (int i = 0; i < 32; i++) snprintf(sha + 2 * i, 3, "%02x", d[i]);
		} else if (file_sha(part, sha)) {
			cli_err("%s: cannot read it back", part);
			return -1;
		}
		if (strcmp(sha, x.sha)) {
			cli_err("%s: SHA-256 %s, the hub publishes %s: removed", r.rel, sha, x.sha);
			unlink(part);
			return -1;
		}
	} else LOG_WARN("pull", "no SHA-256 published for %s: only the GGUF structure is checked", r.rel);
	char err[512];
	gguf *g = NULL;
	if (gguf_open(&g, part, err, sizeof err)) {
		cli_err("%s is not a GGUF file (%s): removed", r.rel, err);
		unlink(part);
		return -1;
	}
	gguf_free(g);
	if (rename(part, path)) {
		cli_err("%s: %s", path, strerror(errno));
		return -1;
	}
	LOG_INFO("pull", "%s: %lld bytes%s", r.rel, (long long)st.st_size, x.sha[0] ? ", SHA-256 checked" : "");
	return 0;
}

bool cli_is_pull_ref(const char *m) {
	if (!m) return false;
	struct stat st;
	if (!stat(m, &st)) return false; // a file of that name wins
	if (!strncmp(m, "hf:", 3) || !strncmp(m, "https://", 8) || !strncmp(m, "http://", 7)) return true;
	const char *slash = strchr(m, '/'), *colon = strchr(m, ':'); // ORG/REPO:QUANT
	return slash && colon && colon > slash && !strchr(slash + 1, '/');
}

int cmd_pull(const cli_settings *s) {
	char path[4096];
	if (cli_pull(s, s->pos[0], path, sizeof path)) return 1;
	printf("%s\n", path);
	return 0;
}

// ---- ls and rm -----------------------------------------------------------------------------

static size_t ls_root;
static int ls_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
	if (flag == FTW_F && ends_with(p, ".gguf")) printf("%10.1f MiB  %s\n", (double)st->st_size / 1048576.0, p + ls_root + 1);
	if (flag == FTW_F && ends_with(p, ".gguf.part")) printf("%10.1f MiB  %s (partial)\n", (double)st->st_size / 1048576.0, p + ls_root + 1);
	return 0;
}

int cmd_ls(const cli_settings *s) {
	char dir[2048];
	cache_dir(s, dir, sizeof dir);
	ls_root = strlen(dir);
	struct stat st;
	if (stat(dir, &st)) return 0; // nothing pulled yet
	return nftw(dir, ls_one, 16, FTW_PHYS) ? 1 : 0;
}

int cmd_rm(const cli_settings *s) {
	char dir[2048], path[4096], part[4200];
	cache_dir(s, dir, sizeof dir);
	const char *name = s->pos[0];
	if (!strncmp(name, "hf:", 3)) name += 3;
	if (!safe_path(name, true) || !ends_with(name, ".gguf")) {
		cli_err("'%s' is not a cached model: give a name as `lanes ls` prints it", s->pos[0]);
		return 2;
	}
	snprintf(path, sizeof path, "%s/%s", dir, name);
	snprintf(part, sizeof part, "%s.part", path);
	const bool a = !unlink(path), b = !unlink(part);
	if (!a && !b) {
		cli_err("%s is not in the cache", name);
		return 1;
	}
	printf("removed %s\n", name);
	return 0;
}
