// server/net/guard: request guards, run from the request handler before a body is read.
// A page on another site can make a browser send requests here (simple POSTs need no
// preflight), and through DNS rebinding read the answers under its own name; the Host, the
// Origin and the Content-Type checks close both, and CORS opens them again per origin.
#include "server/net/guard.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

// Whether the comma-separated entries of v[0..n) hold s[0..len) (case-insensitive), or "*".
static bool list_has(const char *const *v, int n, const char *s, size_t len) {
	for (int i = 0; i < n; i++) {
		for (const char *p = v[i]; p && *p;) {
			while (*p == ' ' || *p == ',') p++;
			size_t k = strcspn(p, ",");
			size_t t = k;
			while (t && p[t - 1] == ' ') t--;
			if ((t == 1 && *p == '*') || (t == len && t && !strncasecmp(p, s, len))) return true;
			p += k;
		}
	}
	return false;
}

// ---- settings -----------------------------------------------------------------------------------

// Calls bad on the first comma-separated entry of v[0..n) that ok refuses.
static int each_entry(const char *const *v, int n, bool (*ok)(const char *, size_t), const char *flag, const char *want,
		      char *err, size_t errlen) {
	for (int i = 0; i < n; i++) {
		for (const char *p = v[i]; p;) {
			while (*p == ' ') p++;
			size_t k = strcspn(p, ",");
			size_t t = k;
			while (t && p[t - 1] == ' ') t--;
			if (!ok(p, t)) return base_seterr(err, errlen, LANES_EINVAL, "%s must be %s, got '%.*s'", flag, want, (int)t, p);
			p = p[k] ? p + k + 1 : NULL;
		}
	}
	return 0;
}

// A host name or IP literal, without a port: what a Host header holds before ':'.
static bool host_entry_ok(const char *p, size_t n) {
	if (n == 1 && *p == '*') return true;
	if (!n || n > 253) return false;
	if (*p == '[') return p[n - 1] == ']' && n > 2;
	for (size_t i = 0; i < n; i++)
		if (!(p[i] == '-' || p[i] == '.' || p[i] == '_' || (p[i] >= '0' && p[i] <= '9') || ((p[i] | 0x20) >= 'a' && (p[i] | 0x20) <= 'z')))
			return false;
	return true;
}

// An origin as browsers send it: scheme://host[:port], no path; or "null", or "*".
static bool origin_entry_ok(const char *p, size_t n) {
	if ((n == 1 && *p == '*') || (n == 4 && !strncmp(p, "null", 4))) return true;
	const char *sep = memmem(p, n, "://", 3);
	if (!sep || sep == p) return false;
	size_t rest = n - (size_t)(sep + 3 - p);
	return rest > 0 && !memchr(sep + 3, '/', rest);
}

int srv_guard_config_check(const http_config *cfg, char *err, size_t errlen) {
	if (each_entry(cfg->allowed_hosts, cfg->n_allowed_hosts, host_entry_ok, HTTP_SETTING(cfg, allowed_hosts),
		       "a host name or address without a port (every port is allowed), or *", err, errlen) ||
	    each_entry(cfg->cors_origins, cfg->n_cors_origins, origin_entry_ok, HTTP_SETTING(cfg, cors_origins),
		       "an origin such as http://localhost:3000 (scheme://host[:port], no path), null or *", err, errlen))
		return LANES_EINVAL;
	if (cfg->protect_control && !(cfg->api_key && *cfg->api_key))
		return base_seterr(err, errlen, LANES_EINVAL, "%s needs %s (the key it puts control reads behind)", HTTP_SETTING(cfg, protect_control),
				   HTTP_SETTING(cfg, api_key));
	return 0;
}

// ---- the API key --------------------------------------------------------------------------------

// Constant-time comparison of a presented key with the configured one.
static bool key_equal(const char *a, const char *b) {
	size_t la = strlen(a), lb = strlen(b);
	unsigned char d = la != lb;
	for (size_t i = 0; i < la && i < lb; i++) d |= (unsigned char)(a[i] ^ b[i]);
	return d == 0;
}

bool srv_authorized(srv_conn *c) {
	const char *key = c->s->api_key;
	if (!key || !*key) return true;
	const char *x = srv_header(c, "x-api-key");
	if (x && key_equal(x, key)) return true;
	const char *a = srv_header(c, "Authorization");
	if (a && !strncasecmp(a, "Bearer ", 7)) {
		a += 7;
		while (*a == ' ') a++;
		if (key_equal(a, key)) return true;
	}
	return false;
}

// ---- Host ---------------------------------------------------------------------------------------

// The name part of a Host header value ("[::1]:8080" → "[::1]"), or 0 when it is malformed.
static size_t host_name(const char *h) {
	size_t n = h[0] == '[' ? strcspn(h, "]") + 1 : strcspn(h, ":");
	if (h[0] == '[' && h[n - 1] != ']') return 0;
	if (h[n] && (h[n] != ':' || !h[n + 1] || strspn(h + n + 1, "0123456789") != strlen(h + n + 1))) return 0;
	return n;
}

static bool ipv4_literal(const char *p, size_t n, struct in_addr *a) {
	char b[INET_ADDRSTRLEN];
	if (n >= sizeof b) return false;
	memcpy(b, p, n);
	b[n] = 0;
	return inet_pton(AF_INET, b, a) == 1;
}

// Names that always mean this machine: no page elsewhere can have its DNS answer them.
static bool loopback_name(const char *p, size_t n) {
	struct in_addr a;
	if (ipv4_literal(p, n, &a)) return (ntohl(a.s_addr) >> 24) == 127;
	if (n == 5 && !strncmp(p, "[::1]", 5)) return true;
	if (n == 9 && !strncasecmp(p, "localhost", 9)) return true;
	return n > 10 && !strncasecmp(p + n - 10, ".localhost", 10);
}

// Host names this server answers to: the loopback names; IP literals (the bound address,
// any when bound to 0.0.0.0) and this machine's own name when it listens beyond loopback;
// and --allowed-host. A DNS rebinding attack needs a name its author's DNS answers.
static bool host_allowed(http_server *s, const char *p, size_t n) {
	if (list_has(s->cfg.allowed_hosts, s->cfg.n_allowed_hosts, p, n) || loopback_name(p, n)) return true;
	struct in_addr bound, a;
	if (inet_pton(AF_INET, s->host_addr, &bound) != 1 || (ntohl(bound.s_addr) >> 24) == 127) return false;
	if (ipv4_literal(p, n, &a)) return bound.s_addr == INADDR_ANY || a.s_addr == bound.s_addr;
	if (*p == '[') return bound.s_addr == INADDR_ANY;
	char me[256];
	if (gethostname(me, sizeof me)) return false;
	me[sizeof me - 1] = 0;
	size_t m = strlen(me);
	return m && ((n == m && !strncasecmp(p, me, m)) || (n == m + 6 && !strncasecmp(p, me, m) && !strncasecmp(p + m, ".local", 6)));
}

// ---- Origin and Content-Type -------------------------------------------------------------------

// An Origin that is this server's own: http:// and the Host the request was sent to.
static bool same_origin(const char *origin, const char *host) {
	return host && !strncasecmp(origin, "http://", 7) && !strcasecmp(origin + 7, host);
}

// application/json, with an optional charset that must be UTF-8 (RFC 8259).
static bool json_ctype(const char *ct, char *why, size_t n) {
	if (!ct) return snprintf(why, n, "none"), false;
	while (*ct == ' ' || *ct == '\t') ct++;
	size_t k = strcspn(ct, "; \t");
	bool ok = k == 16 && !strncasecmp(ct, "application/json", 16);
	for (const char *p = ct + k; ok && *p;) {
		p += strspn(p, "; \t");
		size_t pl = strcspn(p, ";");
		if (pl > 8 && !strncasecmp(p, "charset=", 8)) {
			const char *v = p + 8;
			size_t vl = pl - 8;
			while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t')) vl--;
			if (vl >= 2 && *v == '"' && v[vl - 1] == '"') v++, vl -= 2;
			ok = (vl == 5 && !strncasecmp(v, "utf-8", 5)) || (vl == 4 && !strncasecmp(v, "utf8", 4));
		}
		p += pl;
	}
	if (!ok) snprintf(why, n, "'%.100s'", ct);
	return ok;
}

// ---- the guards ---------------------------------------------------------------------------------

static bool is_control(const char *url) {
	return !strcmp(url, "/slots") || !strcmp(url, "/metrics") || !strcmp(url, "/props") || !strcmp(url, "/health") ||
	       !strcmp(url, "/v1/residency") || !strcmp(url, "/v1/adapters") || !strcmp(url, "/v1/experts") ||
	       !strcmp(url, "/v1/experts.svg");
}

int srv_guard(srv_conn *c, const char *url, const char *method, srv_err *e) {
	http_server *s = c->s;
	const char *host = srv_header(c, "Host"); // none (HTTP/1.0): no name to check
	if (host) {
		size_t n = host_name(host);
		if (!n || !host_allowed(s, host, n)) {
			srv_fail(e, SRV_E_FORBIDDEN, NULL,
				 "the Host header '%.100s' is not a name of this server (a guard against DNS rebinding): "
				 "start it with %s %.*s to answer to that name",
				 host, HTTP_SETTING(&s->cfg, allowed_hosts), n ? (int)n : 0, host);
			snprintf(e->code, sizeof e->code, "host_not_allowed");
			return -1;
		}
	}
	const char *origin = srv_header(c, "Origin");
	if (origin && !same_origin(origin, host)) {
		if (!list_has(s->cfg.cors_origins, s->cfg.n_cors_origins, origin, strlen(origin))) {
			srv_fail(e, SRV_E_FORBIDDEN, NULL,
				 "cross-origin requests are refused: start the server with %s %.100s to allow pages of that origin",
				 HTTP_SETTING(&s->cfg, cors_origins), origin);
			snprintf(e->code, sizeof e->code, "origin_not_allowed");
			return -1;
		}
		c->cors = list_has(s->cfg.cors_origins, s->cfg.n_cors_origins, "", 0) ? "*" : origin; // "" matches only *
	}
	if (s->cfg.protect_control && is_control(url) && !srv_authorized(c)) {
		if (strcmp(url, "/health"))
			return srv_fail(e, SRV_E_AUTH, NULL, "invalid API key: control reads need it (%s); send Authorization: Bearer KEY",
					HTTP_SETTING(&s->cfg, protect_control));
		c->bare = true;
	}
	char why[128];
	// Ollama's API is driven with curl -d as its own docs show: there Host and Origin guard alone
	if (c->rt && c->family != SRV_OLLAMA && !strcmp(method, "POST") && !json_ctype(srv_header(c, "Content-Type"), why, sizeof why))
		return srv_fail(e, SRV_E_MEDIA_TYPE, NULL,
				"Content-Type must be application/json, got %s (curl -d sends application/x-www-form-urlencoded: "
				"add -H 'Content-Type: application/json')",
				why);
	const char *enc = srv_header(c, "Content-Encoding");
	if (c->rt && !strcmp(method, "POST") && enc && strcasecmp(enc, "identity"))
		return srv_fail(e, SRV_E_MEDIA_TYPE, NULL, "Content-Encoding %.40s is not supported: send the body uncompressed", enc);
	return 0;
}

void srv_preflight(srv_conn *c) {
	static const char headers[] = "authorization, content-type, x-api-key, anthropic-version";
	char h[1024];
	const char *asked = srv_header(c, "Access-Control-Request-Headers");
	// the SDKs add headers of their own (x-stainless-*, anthropic-beta): an allowed origin may send them
	snprintf(h, sizeof h, "%s%s%.900s", headers, asked && *asked ? ", " : "", asked ? asked : "");
	const char *const hdrs[] = {"Allow", c->allow, c->cors ? "Access-Control-Allow-Methods" : NULL, c->allow,
				    "Access-Control-Allow-Headers", h, "Access-Control-Max-Age", "600", NULL};
	srv_reply_body(c, 204, "", 0, SRV_MEM_KEEP, hdrs);
}
