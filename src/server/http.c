// server, layer 3: the libmicrohttpd daemon (a thread per connection, so a request that
// waits on the engine never delays another), the route table, request bodies, the API key,
// the access log, the background model load, and the drain/halt states.
#include "server/http_gen.h"
#include "server/http_guard.h"
#include "server/http_routes.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <unistd.h>

void http_config_default(http_config *c) {
	memset(c, 0, sizeof *c);
	c->host = "127.0.0.1";
	c->port = 8080;
	c->max_body = 8u << 20;
	c->max_connections = 256;
	c->max_output_bytes = 16u << 20;
	c->max_tokenize_bytes = 1u << 20;
	lane_config_default(&c->lanes);
}

// ---- routes ---------------------------------------------------------------------------------

enum {
	SRV_R_AUTH = 1 << 0,  // needs the API key when one is set
	SRV_R_MODEL = 1 << 1, // needs the model (503 while loading)
	SRV_R_GEN = 1 << 2,   // generates (503 while draining or halted)
	SRV_R_PREFIX = 1 << 3 // path matches as a prefix
};

struct srv_route {
	const char *method, *path;
	unsigned flags;
	enum srv_family family;
	enum MHD_Result (*fn)(srv_conn *c);
};
typedef struct srv_route srv_route;

static const srv_route routes[] = {
	{"GET", "/health", 0, SRV_OPENAI, srv_health},
	{"GET", "/slots", 0, SRV_OPENAI, srv_slots},
	{"GET", "/metrics", 0, SRV_OPENAI, srv_metrics},
	{"GET", "/v1/models", 0, SRV_OPENAI, srv_models},
	{"GET", "/props", 0, SRV_OPENAI, srv_props},
	{"GET", "/v1/models/", SRV_R_PREFIX, SRV_OPENAI, srv_model_one},
	{"POST", "/v1/chat/completions", SRV_R_AUTH | SRV_R_MODEL | SRV_R_GEN, SRV_OPENAI, srv_chat_completions},
	{"POST", "/v1/completions", SRV_R_AUTH | SRV_R_MODEL | SRV_R_GEN, SRV_OPENAI, srv_completions},
	{"POST", "/v1/messages", SRV_R_AUTH | SRV_R_MODEL | SRV_R_GEN, SRV_ANTHROPIC, srv_messages},
	{"POST", "/v1/responses", SRV_R_AUTH | SRV_R_MODEL | SRV_R_GEN, SRV_OPENAI, srv_responses},
	{"POST", "/tokenize", SRV_R_AUTH | SRV_R_MODEL, SRV_OPENAI, srv_tokenize},
	{"POST", "/detokenize", SRV_R_AUTH | SRV_R_MODEL, SRV_OPENAI, srv_detokenize},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])

static bool path_matches(const srv_route *r, const char *url) {
	if (r->flags & SRV_R_PREFIX) return !strncmp(url, r->path, strlen(r->path)) && url[strlen(r->path)];
	return !strcmp(url, r->path);
}

// OPTIONS on any known path: the CORS preflight, or the path's Allow list.
static const srv_route preflight_route = {"OPTIONS", "", 0, SRV_OPENAI, srv_preflight};

// The route for (method, url); allow gets the path's methods ("" for an unknown path).
static const srv_route *route_find(const char *method, const char *url, char *allow, size_t n) {
	const srv_route *r = NULL;
	size_t k = 0;
	allow[0] = 0;
	for (size_t i = 0; i < N_ROUTES; i++) {
		if (!path_matches(&routes[i], url)) continue;
		if (k < n) k += (size_t)snprintf(allow + k, n - k, "%s, ", routes[i].method);
		if (!strcmp(routes[i].method, method)) r = &routes[i];
	}
	if (k && k < n) snprintf(allow + k, n - k, "OPTIONS");
	return r || !k || strcmp(method, "OPTIONS") ? r : &preflight_route;
}

// ---- the request handler ----------------------------------------------------------------------

// Errors that need no body: unknown path, method, key, size, state.
static int early_check(srv_conn *c, const char *url, const char *method, srv_err *e) {
	http_server *s = c->s;
	c->rt = route_find(method, url, c->allow, sizeof c->allow);
	if (c->rt) c->family = c->rt->family, c->gen = c->rt->flags & SRV_R_GEN;
	if (srv_guard(c, url, method, e)) return -1;
	if (!c->rt) {
		if (c->allow[0]) return srv_fail(e, SRV_E_METHOD, NULL, "method %s is not allowed on %s", method, url);
		return srv_fail(e, SRV_E_NOT_FOUND, NULL, "no such endpoint: %s %s", method, url);
	}
	unsigned fl = c->rt->flags;
	if ((fl & SRV_R_AUTH) && !srv_authorized(c))
		return srv_fail(e, SRV_E_AUTH, NULL,
				c->rt->family == SRV_ANTHROPIC ? "invalid x-api-key" : "invalid API key: send Authorization: Bearer KEY");
	const char *cl = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl) {
		char *end;
		errno = 0;
		unsigned long long n = strtoull(cl, &end, 10);
		if (!errno && end != cl && n > s->cfg.max_body)
			return srv_fail(e, SRV_E_TOO_LARGE, NULL, "the request body (%llu bytes) is larger than the limit of %zu bytes", n,
					s->cfg.max_body);
	}
	int st = atomic_load(&s->state);
	if ((fl & SRV_R_MODEL) && (st == HTTP_LOADING || st == HTTP_FAILED))
		return srv_fail(e, SRV_E_UNAVAILABLE, NULL, "the model is loading: retry shortly");
	if ((fl & SRV_R_GEN) && st == HTTP_DRAINING)
		return srv_fail(e, SRV_E_UNAVAILABLE, NULL, "the server is draining: retry shortly");
	if ((fl & SRV_R_GEN) && st == HTTP_HALTED) {
		pthread_mutex_lock(&s->mu);
		srv_fail(e, SRV_E_UNAVAILABLE, NULL, "%s", s->halt_reason);
		pthread_mutex_unlock(&s->mu);
		return -1;
	}
	return 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
				  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
	http_server *s = cls;
	srv_conn *c = *con_cls;
	if (!c) {
		c = calloc(1, sizeof *c);
		if (!c) return MHD_NO;
		c->s = s;
		c->mc = mc;
		c->t0_us = base_now_us();
		snprintf(c->method, sizeof c->method, "%s", method);
		snprintf(c->path, sizeof c->path, "%s", url);
		*con_cls = c;
		srv_err e;
		if (early_check(c, url, method, &e)) return srv_reply_error(c, &e);
		return MHD_YES;
	}
	if (c->replied) {
		*upload_size = 0; // a reply went out early: the rest of the body is dropped
		return MHD_YES;
	}
	if (*upload_size) {
		// a chunked body (no Content-Length) over the limit is read and dropped: libmicrohttpd
		// cannot reply in the middle of a body, so the 413 goes out at its end
		if (c->body_over || c->body.len + *upload_size > s->cfg.max_body) {
			c->body_over = true;
			srv_buf_free(&c->body);
			*upload_size = 0;
			return MHD_YES;
		}
		srv_buf_add(&c->body, upload, *upload_size);
		*upload_size = 0;
		if (c->body.oom) {
			srv_err e;
			srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
			return srv_reply_error(c, &e);
		}
		return MHD_YES;
	}
	if (c->body_over) {
		srv_err e;
		srv_fail(&e, SRV_E_TOO_LARGE, NULL, "the request body is larger than the limit of %zu bytes", s->cfg.max_body);
		return srv_reply_error(c, &e);
	}
	return c->rt->fn(c);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe) {
	srv_conn *c = *con_cls;
	if (!c) return;
	*con_cls = NULL;
	if (c->call) {
		if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && !c->call->over) c->outcome = "cancelled";
		srv_call_free(c->call);
	}
	double ms = (double)(base_now_us() - c->t0_us) / 1000.0;
	const char *why = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed early)";
	if (c->n_prompt || c->n_gen || c->outcome)
		LOG_INFO(SRV_MOD, "%s %s %d %s prompt=%d generated=%d %.1f ms%s", c->method, c->path, c->status,
			 c->outcome ? c->outcome : "", c->n_prompt, c->n_gen, ms, why);
	else
		LOG_INFO(SRV_MOD, "%s %s %d %.1f ms%s", c->method, c->path, c->status, ms, why);
	srv_buf_free(&c->body);
	free(c);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
	char msg[512];
	vsnprintf(msg, sizeof msg, fmt, ap);
	size_t n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
	LOG_DEBUG(SRV_MOD, "libmicrohttpd: %s", msg);
}

// ---- loading ----------------------------------------------------------------------------------

static char *read_file(const char *path, size_t *len) {
	FILE *f = fopen(path, "rb");
	if (!f) return NULL;
	srv_buf b = {0};
	char tmp[65536];
	size_t n;
	while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) srv_buf_add(&b, tmp, n);
	bool bad = ferror(f) || b.oom;
	fclose(f);
	if (bad) {
		srv_buf_free(&b);
		return NULL;
	}
	if (!b.p) srv_buf_add(&b, "", 1), b.len = 0;
	*len = b.len;
	return b.p;
}

static char *token_string(const tok_vocab *v, int32_t id) {
	size_t n = 0;
	const char *t = id >= 0 ? tok_text(v, id, &n) : NULL;
	char *out = malloc(n + 1);
	if (out) {
		if (n) memcpy(out, t, n);
		out[n] = 0;
	}
	return out;
}

// The "try" lines, runnable as printed: the key when one is set; for a model with no chat
// template of its own, a plain completion first (what such a model was trained to write).
static void print_try(const http_server *s) {
	char auth[300] = "";
	if (s->api_key) snprintf(auth, sizeof auth, " -H 'Authorization: Bearer %s'", s->api_key);
	const bool own_template = s->template_path || tok_chat_template(s->vocab);
	if (!own_template)
		LOG_INFO(SRV_MOD,
			 "try: curl http://%s:%d/v1/completions -H 'Content-Type: application/json'%s -d "
			 "'{\"prompt\":\"Once upon a time\",\"max_tokens\":64}'",
			 s->host_addr, s->port, auth);
	LOG_INFO(SRV_MOD,
		 "%s: curl http://%s:%d/v1/chat/completions -H 'Content-Type: application/json'%s -d "
		 "'{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],\"max_tokens\":64}'",
		 own_template ? "try" : "or chat", s->host_addr, s->port, auth);
}

static int load_template(http_server *s, char *err, size_t errlen) {
	char e2[512];
	if (s->template_path) {
		size_t len;
		char *src = read_file(s->template_path, &len);
		if (!src) return base_seterr(err, errlen, LANES_EIO, "cannot read --chat-template %s: %s", s->template_path, strerror(errno));
		int rc = tmpl_compile(&s->tmpl, src, len, e2, sizeof e2);
		free(src);
		if (rc) return base_seterr(err, errlen, rc, "--chat-template %s: %s", s->template_path, e2);
		LOG_INFO(SRV_MOD, "chat template from %s", s->template_path);
		return 0;
	}
	const char *src = tok_chat_template(s->vocab);
	if (src) {
		if (!tmpl_compile(&s->tmpl, src, strlen(src), e2, sizeof e2)) return 0;
		LOG_WARN(SRV_MOD, "the model's chat template does not compile (%s): using ChatML instead", e2);
	} else {
		LOG_WARN(SRV_MOD, "the model has no chat template: using ChatML");
	}
	const char *ml = tmpl_chatml();
	int rc = tmpl_compile(&s->tmpl, ml, strlen(ml), e2, sizeof e2);
	if (rc) return base_seterr(err, errlen, rc, "the ChatML template does not compile: %s", e2);
	return 0;
}

static void *loader(void *arg) {
	http_server *s = arg;
	char err[512];
	uint64_t t0 = base_now_us();
	atomic_store(&s->progress_pm, 10);
	int rc = model_load(&s->m, s->model_path, err, sizeof err);
	if (!rc) {
		atomic_store(&s->progress_pm, 600);
		s->n_vocab = model_hparams_of(s->m)->n_vocab;
		rc = tok_vocab_load(&s->vocab, model_gguf(s->m), err, sizeof err);
	}
	if (!rc) {
		atomic_store(&s->progress_pm, 700);
		rc = load_template(s, err, sizeof err);
	}
	if (!rc) {
		s->bos_text = token_string(s->vocab, tok_bos(s->vocab));
		s->eos_text = token_string(s->vocab, tok_eos(s->vocab));
		if (!s->bos_text || !s->eos_text) rc = base_seterr(err, sizeof err, LANES_ENOMEM, "out of memory");
	}
	if (!rc && s->cfg.draft_model) {
		atomic_store(&s->progress_pm, 720);
		rc = model_load(&s->draft, s->cfg.draft_model, err, sizeof err);
		s->cfg.lanes.draft_model = s->draft;
	}
	if (!rc) {
		atomic_store(&s->progress_pm, 750);
		rc = lane_host_new(&s->host, s->m, s->vocab, &s->cfg.lanes, err, sizeof err);
	}
	if (!rc) s->max_ctx = lane_host_max_context(s->host);
	pthread_mutex_lock(&s->mu);
	if (rc) {
		snprintf(s->load_err, sizeof s->load_err, "%s", err);
		atomic_store(&s->state, HTTP_FAILED);
	} else {
		atomic_store(&s->progress_pm, 1000);
		int want = HTTP_LOADING;
		atomic_compare_exchange_strong(&s->state, &want, HTTP_READY);
	}
	pthread_mutex_unlock(&s->mu);
	if (rc) {
		LOG_ERROR(SRV_MOD, "cannot load %s: %s", s->model_path, err);
		return NULL;
	}
	LOG_INFO(SRV_MOD, "model %s ready in %.1f s: up to %d tokens per request", s->model_id,
		 (double)(base_now_us() - t0) / 1e6, s->max_ctx);
	print_try(s);
	return NULL;
}

// ---- lifecycle --------------------------------------------------------------------------------

static char *dup_or_null(const char *p) { return p && *p ? strdup(p) : NULL; }

int http_server_new(http_server **out, const http_config *cfg, char *err, size_t errlen) {
	*out = NULL;
	if (!cfg->model_path || !*cfg->model_path) return base_seterr(err, errlen, LANES_EINVAL, "no model: -m MODEL");
	if (cfg->port < 0 || cfg->port > 65535) return base_seterr(err, errlen, LANES_EINVAL, "--port must be 0..65535");
	if (cfg->max_body < 16 || cfg->max_body > ((size_t)1 << 34))
		return base_seterr(err, errlen, LANES_EINVAL, "--max-body must be 16..17179869184 bytes");
	if (cfg->max_connections < 1 || cfg->max_connections > 65536)
		return base_seterr(err, errlen, LANES_EINVAL, "max connections must be 1..65536");
	if (srv_guard_config_check(cfg, err, errlen)) return LANES_EINVAL;
	http_server *s = calloc(1, sizeof *s);
	if (!s) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	s->cfg = *cfg;
	s->model_path = strdup(cfg->model_path);
	s->alias = dup_or_null(cfg->alias);
	s->api_key = dup_or_null(cfg->api_key);
	s->host_addr = strdup(cfg->host && *cfg->host ? cfg->host : "127.0.0.1");
	s->template_path = dup_or_null(cfg->chat_template);
	pthread_mutex_init(&s->mu, NULL);
	atomic_init(&s->state, HTTP_LOADING);
	// seeds drawn for requests without one differ across restarts
	s->cfg.lanes.seed = splitmix64(base_now_ns() ^ ((uint64_t)getpid() << 32));
	atomic_init(&s->id_state, splitmix64(base_now_ns() + 1));
	srv_metrics_init(s);
	if (!s->model_path || !s->host_addr) {
		http_server_free(s);
		return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	}
	// the model id: --alias, else the file name without .gguf
	if (s->alias) {
		snprintf(s->model_id, sizeof s->model_id, "%s", s->alias);
	} else {
		const char *b = strrchr(s->model_path, '/');
		b = b ? b + 1 : s->model_path;
		size_t n = strlen(b);
		if (n > 5 && !strcmp(b + n - 5, ".gguf")) n -= 5;
		snprintf(s->model_id, sizeof s->model_id, "%.*s", (int)n, b);
	}
	s->n_slots = cfg->max_connections;
	s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
	if (!s->slots) {
		http_server_free(s);
		return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	}
	for (int i = 0; i < s->n_slots; i++) s->slots[i].fd = -1;
	for (int i = 0; i < s->n_slots; i++) {
		s->slots[i].fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (s->slots[i].fd < 0) {
			int en = errno;
			http_server_free(s);
			return base_seterr(err, errlen, LANES_EIO, "eventfd: %s", strerror(en));
		}
	}

	struct sockaddr_in sa;
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)cfg->port);
	if (inet_pton(AF_INET, s->host_addr, &sa.sin_addr) != 1) {
		http_server_free(s);
		return base_seterr(err, errlen, LANES_EINVAL, "--host must be an IPv4 address, got '%s'", cfg->host);
	}
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;
	s->mhd = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, &sa,
				  MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_LIMIT,
				  (unsigned)cfg->max_connections, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60,
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_END);
	if (!s->mhd) {
		http_server_free(s);
		return base_seterr(err, errlen, LANES_EIO, "cannot listen on %s:%d (in use, or not an address of this machine)",
				    cfg->host, cfg->port);
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
	s->port = di ? di->port : cfg->port;
	if (pthread_create(&s->loader, NULL, loader, s)) {
		http_server_free(s);
		return base_seterr(err, errlen, LANES_ENOMEM, "cannot start the loader thread");
	}
	s->loader_started = true;
	*out = s;
	return 0;
}

void http_server_free(http_server *s) {
	if (!s) return;
	if (s->loader_started) pthread_join(s->loader, NULL);
	if (s->mhd) MHD_stop_daemon(s->mhd);
	lane_host_free(s->host);
	tmpl_free(s->tmpl);
	tok_vocab_free(s->vocab);
	model_free(s->m);
	model_free(s->draft);
	for (int i = 0; s->slots && i < s->n_slots; i++)
		if (s->slots[i].fd >= 0) close(s->slots[i].fd);
	free(s->slots);
	free(s->bos_text);
	free(s->eos_text);
	free(s->model_path);
	free(s->alias);
	free(s->api_key);
	free(s->host_addr);
	free(s->template_path);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

int http_server_port(const http_server *s) { return s->port; }

enum http_state http_server_state(http_server *s, char *err, size_t errlen) {
	int st = atomic_load(&s->state);
	if (st == HTTP_FAILED && err) {
		pthread_mutex_lock(&s->mu);
		snprintf(err, errlen, "%s", s->load_err);
		pthread_mutex_unlock(&s->mu);
	}
	return (enum http_state)st;
}

void http_server_drain(http_server *s) {
	pthread_mutex_lock(&s->mu);
	int want = HTTP_READY;
	if (atomic_compare_exchange_strong(&s->state, &want, HTTP_DRAINING)) lane_host_drain(s->host);
	pthread_mutex_unlock(&s->mu);
}

void http_server_halt(http_server *s, const char *reason) {
	pthread_mutex_lock(&s->mu);
	int st = atomic_load(&s->state);
	if (st == HTTP_READY || st == HTTP_DRAINING) {
		snprintf(s->halt_reason, sizeof s->halt_reason, "%s", reason ? reason : "halted");
		atomic_store(&s->state, HTTP_HALTED);
		lane_host_halt(s->host, s->halt_reason);
	}
	pthread_mutex_unlock(&s->mu);
}

int http_server_open(http_server *s) {
	int calls = atomic_load(&s->calls_open);
	int st = atomic_load(&s->state);
	int lanes = (st == HTTP_READY || st == HTTP_DRAINING || st == HTTP_HALTED) ? lane_host_open(s->host) : 0;
	return calls > lanes ? calls : lanes;
}
