// server: the HTTP server of lanes — libmicrohttpd's epoll thread pool, the OpenAI, Anthropic and
// Responses API adapters, SSE streaming, control reads from the lane host's snapshot, and
// the drain/halt states. The engine runs in src/lanes; nothing here runs a forward pass.
#ifndef LANES_SERVER_H
#define LANES_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lanes/lanes.h"
#include "pull/pull.h"

// What http_config_default gives; the CLI's settings table states its defaults from these.
#define HTTP_DEFAULT_HOST "127.0.0.1"
#define HTTP_DEFAULT_PORT 8080
#define HTTP_DEFAULT_MAX_BODY 8388608
#define HTTP_DEFAULT_RESPONSES_STORE 256
#define HTTP_DEFAULT_MAX_PER_IP 64
#define HTTP_DEFAULT_HEADER_TIMEOUT_S 10
#define HTTP_DEFAULT_IDLE_TIMEOUT_S 60
#define HTTP_DEFAULT_THREADS 4
#define HTTP_DEFAULT_MAX_OUTPUT_BYTES 16777216
#define HTTP_DEFAULT_MAX_TOKENIZE_BYTES 1048576
#define HTTP_DEFAULT_STREAM_FLUSH_MS 2
#define HTTP_DEFAULT_PEER_POLL_MS 500
#define HTTP_DEFAULT_PEER_TIMEOUT_MS 2000
#define HTTP_DEFAULT_MAX_LORA 8
#define HTTP_DEFAULT_LEARN_SHARE 0.25
#define HTTP_DEFAULT_KEEP_ALIVE_S 300
#define HTTP_DEFAULT_MAX_MODELS 2

// The values http_config_check takes (min, max), said once: the CLI's settings table reads them.
#define HTTP_RANGE_PORT 0, 65535
#define HTTP_RANGE_MAX_BODY 16, 17179869184
#define HTTP_RANGE_MAX_CONNECTIONS 0, 65536
#define HTTP_RANGE_RESPONSES_STORE 0, 65536
#define HTTP_RANGE_MAX_PER_IP 0, 65536
#define HTTP_RANGE_HEADER_TIMEOUT_S 0.1, 3600
#define HTTP_RANGE_IDLE_TIMEOUT_S 1, 86400
#define HTTP_RANGE_THREADS 1, 256
#define HTTP_RANGE_MAX_OUTPUT_BYTES 1024, 17179869184
#define HTTP_RANGE_MAX_TOKENIZE_BYTES 16, 17179869184
#define HTTP_RANGE_MAX_LORA 1, 64
#define HTTP_RANGE_LEARN_SHARE 0, 1
#define HTTP_MAX_MODELS 64
#define HTTP_RANGE_MAX_MODELS 1, HTTP_MAX_MODELS

// An adapter the server loads at start (lanes serve --lora NAME=PATH[:SCALE]).
typedef struct {
	const char *name;           // what requests call it ("model" or "lora")
	const char *path;           // its GGUF file
	float scale;                // what a request that names it gets unless it gives its own
} http_lora;

// A model file served by a name of its own (`--alias NAME=FILE`).
typedef struct {
	const char *name, *path;
} http_alias;

typedef struct {
	// How messages name a setting, given as spelt here ("max_body", "lanes.queue"): NULL, by
	// that spelling; `lanes serve` names its flags.
	const char *(*setting_name)(const char *field);
	const char *model_path;     // GGUF file, loaded in the background after listening starts
	const char *host;           // listen address (default "127.0.0.1")
	int port;                   // 0: any free port (see http_server_port)
	const char *alias;          // model id (NULL: the file name without ".gguf")
	const char *api_key;        // NULL or "": every path is open
	size_t max_body;            // largest request body in bytes (default 8 MiB)
	const char *chat_template;  // path of a Jinja chat template (NULL: the model's, else ChatML)
	const char *reasoning_format; // "auto" (or NULL): the template's reasoning family; "none"; or a family's name
	int max_connections;        // open connections at once (0: as many as the open-file limit allows)
	int max_per_ip;             // open connections from one client address (0: no limit)
	double header_timeout_s;    // a request's head and body must arrive within this (seconds)
	int idle_timeout_s;         // a kept-alive connection with nothing to do closes after this (seconds)
	int http_threads;           // threads that serve the connections (epoll, one pool)
	lane_config lanes;          // the lane host's options
	const char *draft_model;    // path of a draft model for speculative decoding (NULL: none)
	const char *draft_head;     // path of an MTP head for the -m model (NULL: none)
	const char *pooling;        // embeddings: "last", "mean" or "cls" (NULL: the model's pooling_type, else last)
	bool embeddings_only;       // the generation endpoints answer 400
	bool strict_model;          // a model name that is not this server's gets 404 (default: any name means it)
	bool strict_params;         // what lanes accepts and cannot honour (x-lanes-ignored) gets a 400 instead
	int32_t max_tokens;         // the output limit of a request that sets none (0: what the window allows)
	lane_sampling sampling;     // what every generation's sampling starts from (lane_request_init's); what it points to is borrowed
	int responses_store;        // finished Responses kept for previous_response_id and GET (0: none)
	// request guards (docs/api.md, "Browsers and hostile clients"); the lists are borrowed:
	// they must outlive the server. Each entry may hold several, comma-separated.
	const char *const *allowed_hosts; // Host names accepted besides the defaults; "*": any
	int n_allowed_hosts;
	const char *const *cors_origins;  // origins allowed cross-origin (CORS); "*": any
	int n_cors_origins;
	bool protect_control;       // with api_key: /slots, /metrics, /props and /health's details need it
	size_t max_output_bytes;    // largest non-streamed generation reply (default 16 MiB)
	size_t max_tokenize_bytes;  // largest /tokenize and /detokenize body (default 1 MiB)
	uint32_t stream_flush_us;   // a stream's tokens within this of its last write go out together (0: each at once)
	bool no_webui;              // GET / and the page's files answer 404
	bool metrics_experts;       // /metrics adds lanes_expert_activations_total{layer,expert}
	// the grid (docs/deploy.md): peers this server overflows to; the list is borrowed
	const char *const *peers;   // base URLs, http://host:port
	int n_peers;
	int overflow_queue;         // past this many waiting here, a request takes the first lane free here or on a peer
	int peer_poll_ms;           // how often each peer's beacon is read
	int peer_timeout_ms;        // a beacon read, lease or connection to a peer slower than this fails
	const char *peer_key;       // the key sent to peers (NULL: the client's own, and --api-key for beacons and leases)
	model_progress_fn load_progress; // hears the model's load progress on the loader thread (NULL: none)
	void *load_progress_ud;
	const http_lora *loras;     // adapters loaded with the model (borrowed: they must outlive the server)
	int n_loras;
	int max_lora;               // adapters loaded at once, 1..64 (default 8)
	double learn_share;         // most of a round's prompt budget training takes, 0..1 (0: learning off; default 0.25)
	const char *adapters_dir;   // the folder HTTP adapter loads and saves name files in (NULL: none; they are refused)
	bool allow_unauth_mutations; // adapter and learning changes even when open to the network without api_key
	pull_config cache;          // the model cache Ollama's /api/pull, /api/copy and /api/delete work on (strings borrowed)
	// more models served by name beside model_path (ops/models.c): each GGUF under models_dir,
	// loaded on its first request and unloaded once idle for keep_alive_s (< 0: never)
	const char *const *models_dirs; // none: model_path alone; the first is where Ollama's pull, copy and delete write
	int n_models_dirs;
	const http_alias *aliases;  // files served by a name of their own, as a folder's are (borrowed)
	int n_aliases;
	double keep_alive_s;        // default 300; a request's own keep_alive (Ollama's) wins for its model
	int max_models;             // models_dir's models loaded at once: the least recently used idle one goes first
	// with models_dir: the memory every model loaded at once must fit in, each planned at its
	// lanes and ctx (the least recently used idle one unloaded for another; 0: not counted)
	uint64_t memory_bytes;
} http_config;

void http_config_default(http_config *c);

enum http_state {
	HTTP_LOADING,  // listening, the model is loading: API requests get 503
	HTTP_READY,
	HTTP_FAILED,   // the model did not load: http_server_state's err says why
	HTTP_DRAINING, // no new requests; accepted ones go on
	HTTP_HALTED,   // every open request ended failed with the halt's reason
};

typedef struct http_server http_server;

// Binds and starts serving (control reads answer at once), then loads the model in a
// background thread. Returns 0, or a negative code with a message (bad config, cannot bind).
// Signals are the caller's business: block SIGINT/SIGTERM/SIGPIPE before calling, since the
// server's threads inherit the mask.
int http_server_new(http_server **out, const http_config *cfg, char *err, size_t errlen);
// Checks cfg's values against the ranges above, its lane_config (lane_config_check) and its
// guards' entries. 0, or LANES_EINVAL with err naming the field (as http_config spells it).
// Thread-safe; http_server_new calls it first.
int http_config_check(const http_config *cfg, char *err, size_t errlen);
// What messages call cfg's setting field (cfg->setting_name's answer, else field). Thread-safe.
const char *http_setting_name(const http_config *cfg, const char *field);
// The same for a member of http_config (or of its lanes), checked when compiled: HTTP_SETTING(cfg, no_webui).
#define HTTP_SETTING(cfg, member) ((void)sizeof((cfg)->member), http_setting_name((cfg), #member))
// Stops listening, ends every connection, joins the loader and frees everything. Accepts NULL.
void http_server_free(http_server *s);

int http_server_port(const http_server *s); // the bound port
// The current state; for HTTP_FAILED the load error goes into err (may be NULL).
enum http_state http_server_state(http_server *s, char *err, size_t errlen);
// Drain: /health says draining, new API requests get 503 with Retry-After; accepted
// requests (running and queued) go on. Idempotent.
void http_server_drain(http_server *s);
// Halt: every open request ends failed with reason (the lane host's halt), each API writes
// its error. Idempotent.
void http_server_halt(http_server *s, const char *reason);
// Requests not yet over: API calls still being answered plus the lane host's open requests.
// in_engine (may be NULL): those of them the lane host has not ended yet.
int http_server_open(http_server *s, int *in_engine);

#endif
