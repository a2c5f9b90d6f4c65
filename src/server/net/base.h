// server/net/base: the HTTP plumbing every other server file uses and that uses none of
// them — the server and connection state, byte buffers, errors shaped per API family,
// routes, replies, headers, ids, histograms, and the JSON field tables that read a request.
// Only net/ names the HTTP library: its types are opaque here.
#ifndef LANES_SERVER_NET_BASE_H
#define LANES_SERVER_NET_BASE_H

#include "server/server.h"
#include "chat/chat.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#define SRV_MOD "http"
#define SRV_LEASE_HEADER "x-lanes-lease" // the capacity lease a request a peer forwarded uses
#define SRV_MAX_N 32 // most choices (n) one request may ask for
#define SRV_IGNORED_HEADER "x-lanes-ignored" // names what a request sent that lanes accepted and did not honour
#define SRV_IGNORED_MAX 512 // bytes of names one request's header lists
#define SRV_MODELS_MAX 1024 // models one server lists: the -m model and --models-dir's files

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
	SRV_E_FORBIDDEN,   // 403: a Host or Origin this server does not answer
	SRV_E_NOT_FOUND,   // 404
	SRV_E_METHOD,      // 405, with Allow
	SRV_E_CONFLICT,    // 409: the resource's state forbids it (a name taken, a limit reached)
	SRV_E_TOO_LARGE,   // 413
	SRV_E_MEDIA_TYPE,  // 415: a POST body that is not application/json
	SRV_E_BUSY,        // 429 (OpenAI) / 529 (Anthropic), with Retry-After
	SRV_E_UNAVAILABLE, // 503 with Retry-After: loading, draining, halted
	SRV_E_INTERNAL,    // 500: a generation failed (the halt among others)
	SRV_E_NO_MEMORY,   // 507: a model needs more of --memory than is left to it
	SRV_E_UNSUPPORTED, // 501: the server was not started with what it needs (llama-server's not_supported_error)
	SRV_E__COUNT
};

// The API families: each answers its own paths with its own error body, and streams in its
// own framing, ending and error event. The APIs and the grid's relay read them from here alone.
enum srv_family { SRV_OPENAI, SRV_ANTHROPIC, SRV_RESPONSES, SRV_OLLAMA, SRV_LLAMA, SRV_FAMILY__COUNT };
typedef struct {
	const char *name;      // "openai", "anthropic", "responses", "ollama", "llama" (llama-server's own paths)
	const char *prefix;    // its paths start so ("": every path no other family has)
	bool ndjson;           // its streams are JSON lines, else server-sent events
	const char *ends[5];   // SSE: how an event that ends a stream starts a line
} srv_family_info;
extern const srv_family_info srv_families[SRV_FAMILY__COUNT];

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
// Who a library error code (LANES_E*) is about; with the code it decides the HTTP kind.
enum srv_blame {
	SRV_BLAME_REQUEST, // checking what the request sent (a body, a prompt, a grammar, a file it names)
	SRV_BLAME_STATE,   // a named resource's state (an adapter, a grant, a lease, the model cache)
	SRV_BLAME_ENGINE,  // the lane host taking a request: busy is a full queue
};
// The HTTP kind of library error code rc from a call of that blame: the one mapping.
enum srv_ekind srv_kind_of(int rc, enum srv_blame b);
// Retry-After seconds for the kind (0: none).
int srv_retry_after(enum srv_ekind kind);
// The family a path belongs to by its prefix (srv_families). path need not be NUL-terminated.
enum srv_family srv_family_of(const char *path, size_t n);
// What a stream told its client that its error event repeats: the Responses object as
// response.created sent it (a reference, or NULL), and the next sequence number.
typedef struct {
	json_t *response;
	int64_t seq;
} srv_stream_seen;
// One stream event in f's framing (SSE with name when set, or a JSON line), data stolen.
void srv_stream_event(enum srv_family f, srv_buf *out, const char *name, json_t *data);
// The event that ends f's stream as failed with msg, after what seen says was sent (Responses
// advances seen->seq); the same bytes whether the stream was made here or relayed from a peer.
void srv_stream_error(enum srv_family f, srv_buf *out, srv_stream_seen *seen, const char *msg);
// Notes what event ev (n bytes, whole) of a stream of f says that srv_stream_error repeats.
void srv_stream_note(enum srv_family f, srv_stream_seen *seen, const char *ev, size_t n);
// Whether whole event ev (n bytes) ends a stream of f: its finish or its error.
bool srv_stream_ends(enum srv_family f, const char *ev, size_t n);
// The reason phrase this server writes for a status it answers itself.
const char *srv_reason(int status);
// A whole JSON reply written on fd without blocking — status line, Date, Content-Type,
// Content-Length, extra (header lines, each ending in CRLF), Connection: close, then body
// unless head_only — for replies libmicrohttpd cannot give. 0 when every byte went out.
int srv_raw_reply(int fd, int status, const char *extra, const char *body, bool head_only);

// ---- histograms (Prometheus, cumulative on output) -----------------------------------------
#define SRV_HIST_MAX 16
typedef struct {
	const char *name, *help;
	int n;                                        // finite bounds in le
	double le[SRV_HIST_MAX];                      // upper bounds, seconds, ascending
	atomic_uint_least64_t bucket[SRV_HIST_MAX + 1]; // per bucket (not cumulative); last is +Inf
	atomic_uint_least64_t sum_ns, count;
} srv_hist;
void srv_hist_init(srv_hist *h, const char *name, const char *help, const double *le, int n);
void srv_hist_observe(srv_hist *h, double seconds, uint64_t weight);
void srv_hist_print(const srv_hist *h, srv_buf *out);

// ---- the server ---------------------------------------------------------------------------
// The loader's steps, in order, as /health names them while loading.
enum srv_load_stage { SRV_LOAD_OPEN, SRV_LOAD_WEIGHTS, SRV_LOAD_VOCAB, SRV_LOAD_TEMPLATE, SRV_LOAD_DRAFT, SRV_LOAD_ENGINE, SRV_LOAD_ADAPTERS };
extern const char *const srv_load_stage_name[];

typedef struct srv_call srv_call;
typedef struct srv_conn srv_conn;
struct MHD_Daemon;
struct MHD_Connection;

// Every endpoint, and every step a request goes on with when a wait ends: it replies, or
// parks the connection (srv_park), or neither, and then the connection closes.
typedef void srv_handler(srv_conn *c);

// A route of the daemon's table, as net/ dispatches it.
enum {
	SRV_R_AUTH = 1 << 0,  // needs the API key when one is set
	SRV_R_MODEL = 1 << 1, // needs the model (503 while loading)
	SRV_R_GEN = 1 << 2,   // generates (503 while draining or halted)
	SRV_R_PREFIX = 1 << 3, // path matches as a prefix
	SRV_R_WORK = 1 << 4,   // runs on a work thread (reads a body, may render and tokenize a prompt)
	SRV_R_MUTATE = 1 << 5, // changes adapters, learning, the model cache or slot files: refused when open to the network without a key
	SRV_R_UTIL = 1 << 6,   // with SRV_R_WORK: on the utilities' work thread, not the generation requests'
	SRV_R_DESCRIBE = 1 << 7, // with SRV_R_MODEL: describes its model, which a request does not load
	SRV_R_BASE = 1 << 8      // picks its model by "base" (an adapter's base model), loading it as a request would
};
typedef struct srv_route {
	const char *method, *path;
	unsigned flags;
	enum srv_family family;
	srv_handler *fn;
} srv_route;

// What a suspended connection waits for (net/park.c): one kind at a time, one park/wake pair.
enum srv_wait {
	SRV_WAIT_NONE,   // not suspended: a connection thread runs it
	SRV_WAIT_WORK,   // its route runs on a work thread
	SRV_WAIT_ENGINE, // its generation call waits for the engine's events (or its socket, or a timer)
	SRV_WAIT_PEER,   // forwarded: waits for a peer's reply, or for a lane here
	SRV_WAIT_LOAD,   // an adapter load on the load thread
	SRV_WAIT_SAVE,   // an adapter save on the learn thread
	SRV_WAIT_PULL,   // a model pull's progress or end
	SRV_WAIT_MODEL,  // its model's load on a loader thread
	SRV_WAIT__COUNT
};
extern const char *const srv_wait_name[SRV_WAIT__COUNT];
typedef struct {
	bool used;
	srv_call *call;  // the call holding the slot (under slot_mu)
	uint32_t gen;    // bumped at each use: tells a stale waker event from a current one
} srv_slot;

// One model the server serves: its file, its load, and what the loader made of it.
enum srv_model_state {
	SRV_M_LISTED,  // a file of --models-dir, not loaded: its first request loads it
	SRV_M_LOADING, // a loader thread reads it; requests wait parked for it
	SRV_M_READY,
	SRV_M_FAILED,  // its load failed: load_err says why; the next request tries again
	SRV_M_UNLOADING, // the reaper frees it, outside models_mu; requests for it wait parked, then load it again
};
extern const char *const srv_model_state_name[];

// One model the server serves: its file, its load, and what the loader made of it.
typedef struct srv_model {
	http_server *s;
	char *model_path, *template_path;
	char model_id[128];
	bool pinned;                   // the -m model: loaded at start, never unloaded
	bool named;                    // an --alias NAME=FILE: listed whatever the folders hold
	const char *dir;               // the --models-dir it was found in (NULL: -m or an alias)
	atomic_bool gone;              // its file left the folder: listed no more, unloaded once idle
	uint64_t file_bytes, file_ino;
	int64_t file_mtime_ns;         // with the size and inode: the file a rescan finds is the one listed
	bool stale;                    // under models_mu: its file changed while loaded; unloaded once idle, read anew
	model_hparams meta;            // a --models-dir file's, from its metadata: what the lists say before it loads
	uint64_t need_bytes;           // with --memory: its plan at its lanes and KV (weights, KV, compute)
	lane_config lanes;             // its lane host's options
	atomic_int mstate;             // enum srv_model_state
	// under s->models_mu
	int users;                     // requests holding it: it is not unloaded under them
	uint64_t used_us;              // when it was last picked or let go
	double keep_s;                 // how long it stays loaded idle (< 0: for good)
	struct srv_conn *waiting;      // requests parked for its load or unload (linked by next_wait)
	atomic_int progress_ppm;       // load progress, parts per million
	atomic_int load_stage;         // what the loader does now (enum srv_load_stage)
	char load_err[512];
	pthread_t loader;
	bool loader_started;
	// set by the loader before state becomes HTTP_READY, read-only afterwards
	model *m;
	model *draft;                  // draft model for speculative decoding, or NULL
	tok_vocab *vocab;
	lane_host *host;
	int32_t max_ctx;               // tokens one request may use
	int32_t n_vocab;
	enum lane_embed pooling;       // how /v1/embeddings pools
	double *rank_w, rank_b;        // a reranker's score: w . the last hidden state + b (NULL: not one)
	const char *rank_why;          // why the model is not one
	char rank_how[64];             // what w is: its classifier, or its yes and no logits
	chat_tmpl chat;                     // the chat template, its tool-call family, bos and eos texts
	const reason_format *reason;   // how replies set their thinking apart (NULL: they do not)
	bool reason_switch;            // the chat template reads reason's off_var: thinking off sets it false
	int32_t think_end[LANE_THINK_END]; // its close marker and what the template writes after it, as tokens
	int32_t n_think_end;
	atomic_int system_turns;       // its template renders a system turn inside a conversation: 1 yes, -1 no, 0 not probed yet
	struct model_loras *loras;       // the adapters (model/loras.h): set by the loader with the model
	struct learn_live *learn;       // learning while serving (learn/live.h), NULL when --learn-share is 0
} srv_model;

struct http_server {
	http_config cfg;               // strings point into the copies below
	char *alias, *api_key, *host_addr, *adapters_path;
	struct srv_model *mdl;         // the -m model: adapters, learning, the grid and the control reads are its
	srv_model **models;            // every model served by name: mdl first, then --models-dir's (ops/models.c);
	atomic_int n_models;           // appended to under models_mu, never moved: read without it
	pthread_mutex_t models_mu;     // the models' loads, users and idle times; taken before wait_mu
	pthread_cond_t models_cv;      // the reaper's wake: a model let go, or the server stopping
	pthread_t reaper;              // unloads models idle past their keep-alive
	bool reaper_started, models_quit;
	atomic_uint_least64_t scanned_us; // when the folder was last read (srv_models_refresh)
	atomic_uint_least64_t put_scan_us; // when a request's name last had it read
	struct srv_conn *room_waiting; // under models_mu: requests parked until a loaded model is let go, to make room
	base_pool *pool;               // the compute threads every model's lane host shares
	struct MHD_Daemon *mhd;
	const struct srv_http_hooks *hooks; // the daemon's steps of a request (net/http.h)
	int port;

	atomic_int state;              // enum http_state

	// set by http_server_new: --reasoning-format, and the key thinking blocks are signed with
	bool reason_auto;              // the template's family
	const reason_format *reason_named; // else this one (NULL: none)
	uint8_t think_key[32];         // random per server: a signature made here is recognised here alone

	pthread_mutex_t mu;            // state changes, load error, halt reason, slots
	char halt_reason[160];
	atomic_int calls_open;         // generation calls not yet completed
	atomic_uint_least64_t rejected; // API requests refused before reaching the lane host
	atomic_uint_least64_t id_state;

	srv_slot *slots;               // one per generation call; never closed while the host lives
	int n_slots;
	pthread_mutex_t slot_mu;       // slots, the calls' wake times and the flush timer
	pthread_mutex_t wait_mu;       // every connection's wait (net/park.c); taken last, under any other lock
	atomic_int parked[SRV_WAIT__COUNT];              // connections suspended now, by what they wait for
	atomic_uint_least64_t parks[SRV_WAIT__COUNT];    // suspensions, by kind
	atomic_uint_least64_t wakes[SRV_WAIT__COUNT];    // resumptions, by kind: equal to parks once none is parked
	pthread_t waker;               // resumes suspended calls on their clients' sockets and keep-alive timers
	bool waker_started;
	int waker_ep, waker_quit;      // its epoll set and the eventfd that stops it
	int flush_fd;                  // the waker's timer for streams' held tokens (under slot_mu:)
	uint64_t flush_timer_at;       // when it fires (0: disarmed)
	int n_held;                    // calls holding tokens for it
	// set by the daemon: forwards a request the lane host refused as full to a peer (true: it
	// replied or parked c), or not
	bool (*overflow)(srv_conn *c, bool full);
	struct srv_gate *gate;         // the listening socket, the connections and their deadlines (net/sock.c)
	struct srv_work *work;         // the threads that run routes off the connection threads (net/work.c)
	atomic_int socks_pending;      // connections with a request arriving or not yet answered

	srv_hist ttft, itl;
	atomic_bool quit;
	struct srv_grid *grid;         // peers and the overflow's thread (grid/peer.c), or NULL
	atomic_uint_least64_t leases_granted, leases_refused;

	int adapters_dfd;              // the folder adapters are loaded from and saved to by name (-1: none)
	bool mutations_closed;         // open to the network with no key: adapter and learning changes are refused
	struct srv_pulls *pulls;       // Ollama's pulls running on threads of their own (ops/cache.c)
	struct srv_store *responses;   // finished Responses kept (api/store.h), NULL when --responses-store is 0
};

// Whether the server serves models by name beside (or instead of) a -m model.
static inline bool srv_multi(const http_server *s) { return s->cfg.n_models_dirs > 0 || s->cfg.n_aliases > 0; }

// The folder Ollama's pull, copy and delete write to (NULL: none).
static inline const char *srv_models_home(const http_server *s) { return s->cfg.n_models_dirs ? s->cfg.models_dirs[0] : NULL; }

// Whether the server has a -m model (a server of --models-dir alone has none: its stub in
// models[0] is never listed, loaded or picked).
static inline bool srv_has_primary(const http_server *s) { return s->mdl->model_path != NULL; }

// The -m model's lane host once it is in; NULL while it loads, after it failed, or with none.
static inline lane_host *srv_primary_host(http_server *s) {
	const int st = atomic_load(&s->state);
	return st == HTTP_READY || st == HTTP_DRAINING || st == HTTP_HALTED ? s->mdl->host : NULL;
}

// ---- one HTTP request ---------------------------------------------------------------------
struct srv_sock;

// What a request sent that lanes accepted and did not honour, as x-lanes-ignored lists it.
typedef struct {
	char names[SRV_IGNORED_MAX];   // "a,b,c" (NUL-terminated)
	size_t len;
	bool cut;                      // a name did not fit: the list ends with ",..."
} srv_ignored;

struct srv_conn {
	http_server *s;
	srv_model *mdl;                // the model its request names (set before its route runs)
	bool holds_mdl;                // it counts among mdl's users until it ends
	struct srv_conn *next_wait;    // the next request parked for the same model's load, or for room
	struct srv_conn **wait_list;   // the list it is parked on (a model's waiting, or the server's room_waiting)
	bool room_wait;                // it waited for room: woken, it is picked afresh
	struct MHD_Connection *mc;
	const struct srv_route *rt;    // the daemon's route (NULL: none matched)
	enum srv_family family;        // the route's error shape
	bool gen;                      // the route generates: its refusals count as rejected
	char method[16];
	char path[192];
	uint64_t t0_us;
	srv_buf body;
	json_t *json;                  // the body parsed, once (srv_parse_body): the grid and the route share it
	bool body_over;                // the body passed --max-body
	bool replied;
	bool broken;                   // no reply could be queued: the connection closes
	bool parked;                   // the step running now suspended it (net/park.c)
	int status;
	int32_t n_prompt, n_gen;       // for the access log
	const char *outcome;           // for the access log ("finished", "failed", ...)
	bool host_counted;             // the lane host counted this refusal itself
	bool http11;                   // HTTP/1.1 or later: an interim 100 may be sent
	struct srv_sock *sock;         // the connection this request came on
	srv_call *call;
	char allow[48];                // the path's methods, for Allow ("": an unknown path)
	const char *cors;              // Access-Control-Allow-Origin of every reply (NULL: none)
	bool bare;                     // --protect-control without the key: /health says no more than its status
	bool closed_after_reply;       // the reply went out on the socket itself and the connection closed
	bool unsized;                  // the reply's length is not known ahead: HTTP/1.0 ends it by closing
	struct srv_fwd *fwd;           // forwarded to a peer (grid/peer.c), or NULL
	bool routed_here;              // the grid sent it to run here and counts it until it is submitted
	const char *via;               // for the access log: the peer that answered (the server's copy)
	// set by whatever parks it for the engine, a peer, a load, a save or a pull: resume goes on
	// when that wait ends, done frees what it holds when the request ends (both may be NULL)
	srv_handler *resume;
	void (*done)(srv_conn *c);
	void *job;
	// the one wait (net/park.c), under s->wait_mu
	enum srv_wait wait;            // what it is suspended for now
	enum srv_wait then;            // what its route, running on a work thread, waits for once it returns
	enum srv_wait woke;            // the wait that ended: what on_request goes on from when resumed
	unsigned woken;                // wakes that came before their park, a bit per kind
	srv_ignored ignored;           // for the header and the access log
};

// Names something c's request sent that lanes accepts and cannot honour (a field, "where.field",
// or a kind of content such as "image"): the access log and the x-lanes-ignored header of every
// 2xx reply list it, and --strict-params refuses the request (srv_ignored_refuse). Each name
// once, in the order first named; bytes outside printable ASCII and commas become '_'. c NULL:
// nothing.
void srv_ignored_add(srv_conn *c, const char *name);
// Under --strict-params: 400 naming everything c's request sent that lanes would ignore (param
// the first). 0 when nothing was named, or without --strict-params.
int srv_ignored_refuse(srv_conn *c, srv_err *e);

// ---- the one wait (net/park.c) ------------------------------------------------------------
// From the thread that runs c (a connection thread, or the work thread running its route):
// suspends c until srv_wake(c, kind). A route on a work thread is parked when it returns. False
// when a wake of that kind came first (it is used up): the caller goes on at once.
bool srv_park(srv_conn *c, enum srv_wait kind);
// From any thread, while c lives: ends c's wait for kind (libmicrohttpd resumes it, exactly
// once), or, when c does not wait for it yet, keeps the wake for its next park of that kind.
void srv_wake(srv_conn *c, enum srv_wait kind);
// The wait whose end resumed c (SRV_WAIT_NONE: none), taken: on_request goes on from it.
enum srv_wait srv_woke(srv_conn *c);
// From the work thread (net/work.c) whose route on c returned: c stays suspended for what the
// route parked it for, or is resumed (for that wait when its wake came first, else as worked).
void srv_park_worked(srv_conn *c);

// ---- replies: each carries the headers every reply with its status does (CORS, Allow,
// WWW-Authenticate, x-lanes-ignored); one that cannot be queued closes the connection --------
// JSON (body stolen); retry_after > 0 adds the header.
void srv_reply_json(srv_conn *c, int status, json_t *body, int retry_after);
void srv_reply_text(srv_conn *c, int status, const char *ctype, const char *text, size_t len);
// e in the shape of c's API family, with its status (and Retry-After).
void srv_reply_error(srv_conn *c, const srv_err *e);
// How a reply's bytes are held: for the server's life (compiled in), copied, or freed once sent.
enum srv_mem { SRV_MEM_KEEP, SRV_MEM_COPY, SRV_MEM_FREE };
// len bytes of data; hdrs: name, value, ..., NULL (Content-Type among them, or none).
void srv_reply_body(srv_conn *c, int status, const void *data, size_t len, enum srv_mem mem, const char *const *hdrs);
// A body of unknown length, read through fn(arg, ...) as the socket takes it: up to max bytes
// into buf; 0 when it parked c until there are more; SRV_STREAM_END, or SRV_STREAM_FAIL (the
// connection is cut).
#define SRV_STREAM_END ((ssize_t)-1)
#define SRV_STREAM_FAIL ((ssize_t)-2)
typedef ssize_t srv_reader(void *arg, uint64_t pos, char *buf, size_t max);
void srv_reply_stream(srv_conn *c, int status, srv_reader *fn, void *arg, const char *const *hdrs);

// The request's header name (case-insensitive; the first when sent twice), or NULL.
const char *srv_header(srv_conn *c, const char *name);
// The query argument name, or NULL.
const char *srv_query(srv_conn *c, const char *name);
// The seconds c may stay idle before it is closed (0: never), from now on.
void srv_conn_timeout(srv_conn *c, unsigned seconds);
int srv_sock_fd(srv_conn *c);

// The body as a JSON object (a new reference): parsed on the first call, shared after.
int srv_parse_body(srv_conn *c, json_t **out, srv_err *e);
// A fresh id with the prefix ("chatcmpl-", "msg_", "resp_").
void srv_new_id(http_server *s, const char *prefix, char *out, size_t n);
// A capacity lease's id as the API writes it ("lease-" and 16 hex digits), and back (0: not one).
void srv_lease_name(uint64_t id, char *out, size_t n);
uint64_t srv_lease_parse(const char *name);
// The lease a request names in x-lanes-lease (0: none, or not a lease id).
uint64_t srv_lease_of(srv_conn *c);
// A request's model: 0 for none sent, this server's model, a loaded adapter, or — while no
// adapter has ever been loaded — any name unless --strict-model; else 404 model_not_found.
int srv_check_model(http_server *s, const char *id, srv_err *e);
// The model called name (":latest" allowed) among those served (ops/models.c), or NULL.
srv_model *srv_models_find(http_server *s, const char *name);
// A 404 for id naming every model served; -1.
int srv_models_named(http_server *s, const char *id, srv_err *e);
// Up to max models into out, in list order (loaded_only: those loaded), each held (not
// unloaded) until srv_models_put; how many.
int srv_models_each(http_server *s, bool loaded_only, srv_model **out, int max);
void srv_models_put(http_server *s, srv_model **v, int n);
// Reserves an adapter's name on M's registry (model_loras_reserve) unless another model has an
// adapter of that name, loading or loaded (*owner then names it): both under the models' lock,
// so two loads of one name on two models cannot both pass.
int srv_models_reserve_adapter(srv_model *M, const char *name, const char *path, float scale, bool replace, uint64_t *ticket,
			       const char **owner, char *err, size_t errlen);
// What a list says of M, read under the models' lock (M need not be held).
typedef struct {
	bool in;                       // loaded now
	int32_t max_ctx;               // tokens a request may use (when in)
	char family[16];               // its architecture ("" when its file does not read)
	int64_t size;                  // its file's bytes (-1: gone)
} srv_model_facts;
void srv_models_facts(srv_model *M, srv_model_facts *out);
// The model named, when loaded now, held for its caller (srv_models_put lets it go); NULL: none.
srv_model *srv_models_hold(http_server *s, const char *name);
// A lookup by name (GET /v1/models/ID): 404 model_not_found unless id is this server's model
// or a loaded adapter.
int srv_model_lookup(http_server *s, const char *id, srv_err *e);
// M's adapters once it is in (NULL before, and for a model not loaded): control reads may run
// while it loads. A model of --models-dir must be held (users) while they are read.
struct model_loras *srv_loras_of(srv_model *M);
// The loaded model with an adapter called name (":latest" allowed), held for its caller
// (srv_models_put lets it go); NULL: none.
srv_model *srv_models_adapter(http_server *s, const char *name);
// A JSON number that never fails (non-finite values clamped).
json_t *srv_real(double v);
// v as compact JSON text (malloc'd; NULL when out of memory) whose reals are in the shortest form
// that reads back as the same double: a 0.8 a client sent comes back as 0.8.
char *srv_json_text(const json_t *v);
// A token of M's vocabulary as valid UTF-8 (invalid bytes become U+FFFD), NUL-terminated, malloc'd.
char *srv_token_text(const srv_model *M, int32_t id, json_t **bytes);
// Text of a message content: a string, or an array of parts whose type is one of types
// (each {"type", "text"}). A part this model cannot read (image, image_url, input_image,
// document, file, input_file, input_audio) becomes a short text saying so, named on c
// (srv_ignored_add; c may be NULL); an Anthropic document whose source is text is its text.
// *out is malloc'd.
int srv_content_text(json_t *content, const char *param, const char *const *types, srv_conn *c, char **out, srv_err *e);

// ---- field tables: each JSON field of an API named once, with its kind and destination ---
enum srv_kind {
	SRV_K_END,        // ends a table
	SRV_K_NUM,        // a number into a float
	SRV_K_REAL,       // a number into a double
	SRV_K_INT,        // an integer into an int32_t
	SRV_K_CHOICES,    // an integer 1..SRV_MAX_N into an int
	SRV_K_BOOL,       // into a bool
	SRV_K_STR,        // a string into a const char * (into the request's JSON)
	SRV_K_JSON,       // any value into a json_t * (borrowed; NULL when absent or null): the adapter reads it
	SRV_K_SEED,       // an integer into a lane_sampling's seed (has_seed set)
	SRV_K_STOPS,      // a string or an array of strings into an srv_stops
	SRV_K_STOP_ARRAY, // an array of strings into an srv_stops
	SRV_K_BIAS,       // {"token id": bias} into an srv_biases; the API's lowest bias bans the token
	SRV_K_OBJECT,     // an object read with the rows of sub, unknown keys refused
	SRV_K_INCLUDE,    // the rows of sub, read at off (no JSON key of its own)
	SRV_K_IGNORE,     // accepted and not used (named: see srv_field.named); the ignored kinds come last
	SRV_K_IGNORE_STR, // ... once checked to be a string
	SRV_K_IGNORE_BOOL, // ... a boolean
	SRV_K_IGNORE_OBJECT, // ... an object
	SRV_K_IGNORE_ARRAY, // ... an array
	SRV_K_IGNORE_INT, // ... an integer
};

typedef struct srv_field srv_field;
struct srv_field {
	const char *name;         // the JSON key
	enum srv_kind kind;
	enum lane_field field;    // NUM, REAL, INT, stops, bias: whose bounds apply (lane_check_value)
	size_t off;               // where the value goes: an offset in the struct the table reads into
	const srv_field *sub;     // SRV_K_OBJECT and SRV_K_INCLUDE: the rows
	bool named;               // SRV_K_IGNORE*: a field that could change a reply, named when sent (srv_ignored_add)
};
// A row whose JSON key is the name of its member of T.
#define SRV_ROW(T, member, kind) {#member, (kind), .off = offsetof(T, member)}
// A row for a field accepted and ignored in silence: it cannot change a reply (user, keep_alive).
#define SRV_IGNORED(name) {(name), SRV_K_IGNORE, .off = 0}
// ... once its value has the type T: STR, BOOL, OBJECT, ARRAY or INT.
#define SRV_IGNORED_AS(name, T) {(name), SRV_K_IGNORE_##T, .off = 0}
// A row for a documented field lanes cannot honour (a hosted feature): accepted, and named when
// sent (not null) — the x-lanes-ignored header, the access log, --strict-params's 400.
#define SRV_NAMED(name) {(name), SRV_K_IGNORE, .off = 0, .named = true}
// ... once its value has the type T.
#define SRV_NAMED_AS(name, T) {(name), SRV_K_IGNORE_##T, .off = 0, .named = true}

typedef struct {
	const char *s[LANE_MAX_STOPS]; // point into the request's JSON
	int n;
} srv_stops;

typedef struct {
	lane_bias *p;             // malloc'd
	int n;
} srv_biases;

// 400 naming every key of o that no row of t names, param the first (where.key when where is set).
int srv_fields_known(json_t *o, const srv_field *t, const char *where, srv_err *e);
// Reads every row of t that o has (absent or null: the destination is left as it is) into
// base: types checked here, bounds with lane_check_value against api, whose name of each
// bounded field becomes the key it was read from; the named rows sent are named on c (may be
// NULL). 0, or -1 with e naming the field.
int srv_fields_read(json_t *o, const srv_field *t, void *base, const char *where, lane_api *api, srv_conn *c, srv_err *e);
// The body parsed (*j, the caller's to free), its keys checked against t and read into base
// with no bounds: the three steps of an endpoint whose table holds no lane field.
int srv_body_read(srv_conn *c, const srv_field *t, void *base, json_t **j, srv_err *e);

#endif
