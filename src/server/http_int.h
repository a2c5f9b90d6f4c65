// server: private structures shared by the server's files — the server and connection
// state, the error kinds and their shapes per API family, JSON field readers, byte buffers,
// metrics histograms, and the generation call that every API adapter drives.
#ifndef LANES_HTTP_INT_H
#define LANES_HTTP_INT_H

#include "server/server.h"
#include "template/template.h"

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>

#define SRV_MOD "http"

// ---- a growing byte buffer; on OOM it stops growing and sets oom -------------------------
typedef struct {
	char *p;
	size_t len, cap;
	bool oom;
} srv_buf;
void srv_buf_add(srv_buf *b, const void *s, size_t n);
void srv_buf_adds(srv_buf *b, const char *s);
void srv_buf_free(srv_buf *b);

// ---- errors: one kind, shaped per API family ----------------------------------------------
enum srv_ekind {
	SRV_E_BAD_REQUEST, // 400
	SRV_E_AUTH,        // 401
	SRV_E_NOT_FOUND,   // 404
	SRV_E_METHOD,      // 405
	SRV_E_TOO_LARGE,   // 413
	SRV_E_BUSY,        // 429 (OpenAI) / 529 (Anthropic), with Retry-After
	SRV_E_UNAVAILABLE, // 503 with Retry-After: loading, draining, halted
	SRV_E_INTERNAL,    // 500: a generation failed (the halt among others)
	SRV_E__COUNT
};

enum srv_family { SRV_OPENAI, SRV_ANTHROPIC };

typedef struct {
	enum srv_ekind kind;
	char param[96];  // the field at fault ("" for none)
	char code[48];   // OpenAI's code ("" for none)
	char msg[512];
} srv_err;

// Fills e and returns -1.
int srv_fail(srv_err *e, enum srv_ekind kind, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
// The error's HTTP status and JSON body in the family's shape.
json_t *srv_error_body(enum srv_family f, const srv_err *e, int *status);
// Retry-After seconds for the kind (0: none).
int srv_retry_after(enum srv_ekind kind);

// ---- histograms (Prometheus, cumulative on output) -----------------------------------------
#define SRV_HIST_MAX 16
typedef struct {
	const char *name, *help;
	int n;                                        // finite bounds in le
	double le[SRV_HIST_MAX];                      // upper bounds, seconds, ascending
	atomic_uint_least64_t bucket[SRV_HIST_MAX + 1]; // per bucket (not cumulative); last is +Inf
	atomic_uint_least64_t sum_ns, count;
} srv_hist;
void srv_hist_observe(srv_hist *h, double seconds, uint64_t weight);
void srv_hist_print(const srv_hist *h, srv_buf *out);

// ---- the server ---------------------------------------------------------------------------
typedef struct {
	int fd;     // eventfd, written by the engine's notify callback
	bool used;
} srv_slot;

struct http_server {
	http_config cfg;               // strings point into the copies below
	char *model_path, *alias, *api_key, *host_addr, *template_path;
	char model_id[128];
	struct MHD_Daemon *mhd;
	int port;

	atomic_int state;              // enum http_state
	atomic_int progress_pm;        // load progress, per mille
	char load_err[512];
	pthread_t loader;
	bool loader_started;

	// set by the loader before state becomes HTTP_READY, read-only afterwards
	model *m;
	model *draft;                  // draft model for speculative decoding, or NULL
	tok_vocab *vocab;
	tmpl *tmpl;
	lane_host *host;
	int32_t max_ctx;               // tokens one request may use
	int32_t n_vocab;
	char *bos_text, *eos_text;

	pthread_mutex_t mu;            // state changes, halt reason, slots
	char halt_reason[160];
	atomic_int calls_open;         // generation calls not yet completed
	atomic_uint_least64_t rejected; // API requests refused before reaching the lane host
	atomic_uint_least64_t seed_state;
	atomic_uint_least64_t id_state;

	srv_slot *slots;               // one per connection; never closed while the host lives
	int n_slots;

	srv_hist ttft, itl;
	atomic_bool quit;
};

// ---- one HTTP request ---------------------------------------------------------------------
typedef struct srv_conn srv_conn;
typedef struct srv_call srv_call;

enum {
	SRV_R_AUTH = 1 << 0,  // needs the API key when one is set
	SRV_R_MODEL = 1 << 1, // needs the model (503 while loading)
	SRV_R_GEN = 1 << 2,   // generates (503 while draining or halted)
	SRV_R_PREFIX = 1 << 3 // path matches as a prefix
};

typedef struct {
	const char *method, *path;
	unsigned flags;
	enum srv_family family;
	enum MHD_Result (*fn)(srv_conn *c);
} srv_route;

struct srv_conn {
	http_server *s;
	struct MHD_Connection *mc;
	const srv_route *rt;
	char method[16];
	char path[192];
	uint64_t t0_us;
	srv_buf body;
	bool body_over;                // the body passed --max-body
	bool replied;
	int status;
	int32_t n_prompt, n_gen;       // for the access log
	const char *outcome;           // for the access log ("finished", "failed", ...)
	bool host_counted;             // the lane host counted this refusal itself
	srv_call *call;
};

// Replies (the body is stolen); retry_after > 0 adds the header.
enum MHD_Result srv_reply_json(srv_conn *c, int status, json_t *body, int retry_after);
enum MHD_Result srv_reply_text(srv_conn *c, int status, const char *ctype, const char *text, size_t len);
enum MHD_Result srv_reply_error(srv_conn *c, const srv_err *e);
int srv_sock_fd(srv_conn *c);

// Parses the body as a JSON object.
int srv_parse_body(srv_conn *c, json_t **out, srv_err *e);
// A fresh id with the prefix ("chatcmpl-", "msg_", "resp_").
void srv_new_id(http_server *s, const char *prefix, char *out, size_t n);
// A seed for a request without one: 53 bits, so JSON clients keep it exact.
uint64_t srv_draw_seed(http_server *s);

// ---- JSON fields: each returns 0 when absent or null (out untouched), 1 when read, -1 on a
// wrong type or range (e filled, naming the field) -------------------------------------------
int srv_get_num(json_t *o, const char *key, double lo, double hi, double *out, srv_err *e);
int srv_get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, srv_err *e);
int srv_get_bool(json_t *o, const char *key, bool *out, srv_err *e);
int srv_get_str(json_t *o, const char *key, const char **out, srv_err *e);
// 400 naming every key of o that is not in known (NULL-terminated).
int srv_check_keys(json_t *o, const char *const *known, const char *where, srv_err *e);
// 404 when "model" names another model; required: 400 when missing.
int srv_check_model(http_server *s, json_t *o, bool required, srv_err *e);
// Text of a message content: a string, or an array of parts whose type is one of types
// (each {"type", "text"}). *out is malloc'd.
int srv_content_text(json_t *content, const char *param, const char *const *types, char **out, srv_err *e);
// OpenAI chat messages (system/developer/user/assistant, content a string or text parts)
// flattened into [{role, content: string}] for the chat template.
int srv_openai_messages(json_t *msgs, json_t **out, srv_err *e);
// Renders messages (array of {role, content: string}) with the chat template and tokenizes
// them; prefill (may be NULL) is appended after the generation prompt.
int srv_chat_prompt(http_server *s, json_t *messages, const char *prefill, int32_t **ids, int32_t *n,
		    srv_err *e);

// ---- a generation call: n lane requests for one HTTP request ------------------------------
#define SRV_MAX_N 32

typedef struct {
	int32_t *prompt;               // malloc'd, owned by the call once run
	int32_t n_prompt;
	lane_request lr;               // sampling and limits (prompt and choice are set per lane)
	int n;                         // choices
	bool stream;
	const char *stops[LANE_MAX_STOPS]; // point into the request's JSON
	int n_stops;
	lane_bias *bias;               // malloc'd, owned by the call once run
	int n_bias;
	bool has_seed;
	uint64_t seed;
	const char *max_field;         // the API's name of max_tokens, for errors
	const char *prompt_field;      // the API's name of the prompt, for errors
} srv_gen;

void srv_gen_init(srv_gen *g);
int srv_gen_common(json_t *j, srv_gen *g, srv_err *e);
// Reads "stop" as a string or an array of strings into g.
int srv_get_stops(json_t *o, const char *key, srv_gen *g, srv_err *e);

typedef struct {
	bool ended;
	enum lane_ev_kind kind;
	enum lane_finish finish;
	int32_t stop_index;
	char token_sha[65];
	int32_t n_generated, n_cached;
	srv_buf text;                  // every piece of text so far
	uint64_t t_last_us;            // last token event
	int32_t n_tokens;              // token events
} srv_choice;

// What an API adapter does with the call's events. Streamed calls write SSE into c->out.
typedef struct {
	void (*begin)(srv_call *c);    // stream: the opening events
	// text of choice i: tok is the token event (NULL for the terminal event's remainder)
	void (*text)(srv_call *c, int i, const char *text, size_t len, const lane_event *tok);
	void (*choice_end)(srv_call *c, int i); // stream: choice i finished
	void (*done)(srv_call *c);     // stream: every choice finished — the closing events
	void (*fail)(srv_call *c);     // stream: the API's error event for c->fail_reason
	json_t *(*reply)(srv_call *c); // non-stream: the reply once every choice finished
	void (*free_state)(void *st);
} srv_api;

struct srv_call {
	http_server *s;
	srv_conn *conn;
	const srv_api *api;
	void *st;                      // the adapter's parsed request
	srv_gen g;
	int n;
	srv_choice *ch;
	lane_req **req;
	char id[64];
	int64_t created;               // unix seconds
	srv_buf out;                   // SSE bytes not yet handed to MHD
	size_t out_off;
	int slot;
	int sock;
	bool over;                     // nothing more will be written
	bool failed;
	char fail_reason[200];
	int64_t seq;                   // next SSE sequence number (Responses)
};

// Validates the limits, submits every choice, then answers: waits and replies (non-stream)
// or starts the SSE stream. Takes ownership of st (freed with api->free_state) and of g's
// prompt and bias, also on failure. The call's id is id_prefix plus random hex.
enum MHD_Result srv_gen_run(srv_conn *c, const srv_api *api, void *st, srv_gen *g, const char *id_prefix);
// Ends and frees a call (cancels its requests); from the request-completed callback.
void srv_call_free(srv_call *c);
// Appends one SSE event ("event: name" when name is set) with data (stolen) to c->out.
void srv_sse(srv_call *c, const char *name, json_t *data);
void srv_sse_raw(srv_call *c, const char *s);
// Sum of generated tokens over the choices.
int32_t srv_call_generated(const srv_call *c);
// A token's bytes as valid UTF-8 (invalid bytes become U+FFFD), NUL-terminated, malloc'd.
char *srv_token_text(http_server *s, int32_t id, json_t **bytes);
// A JSON number that never fails (non-finite values clamped).
json_t *srv_real(double v);

// ---- endpoints ----------------------------------------------------------------------------
enum MHD_Result srv_health(srv_conn *c);
enum MHD_Result srv_slots(srv_conn *c);
enum MHD_Result srv_metrics(srv_conn *c);
enum MHD_Result srv_models(srv_conn *c);
enum MHD_Result srv_model_one(srv_conn *c);
enum MHD_Result srv_tokenize(srv_conn *c);
enum MHD_Result srv_detokenize(srv_conn *c);
enum MHD_Result srv_chat_completions(srv_conn *c);
enum MHD_Result srv_completions(srv_conn *c);
enum MHD_Result srv_messages(srv_conn *c);
enum MHD_Result srv_responses(srv_conn *c);

// Metrics set-up and tear-down (round and forward histograms come exact from the snapshot).
int srv_metrics_start(http_server *s);
void srv_metrics_stop(http_server *s);
void srv_metrics_init(http_server *s);

#endif
