// server/gen/gen: the generation call every API adapter drives — the request as read
// (a lane_request plus what only HTTP has), the chat prompt (template and tokenizer), lane
// requests per choice, the reply or the SSE stream; connections wait for events suspended,
// resumed by the engine's notify (or the waker, for their sockets and timers).
#ifndef LANES_SERVER_GEN_GEN_H
#define LANES_SERVER_GEN_GEN_H

#include "model/loras.h"
#include "server/net/base.h"
#include "chat/chat.h"

// What a non-streamed reply's size counts for each log-probability entry (a token or an
// alternative) beside the text: about what one takes in the JSON.
#define SRV_LOGPROB_BYTES 64

// ---- a request as an adapter reads it ------------------------------------------------------
// What a request asked of the model's thinking.
enum srv_think { SRV_THINK_DEFAULT, SRV_THINK_ON, SRV_THINK_OFF };

typedef struct {
	srv_conn *conn;                // the request: what it sent and lanes ignores is named on it (srv_ignored_add)
	lane_request lr;               // the contract; api, prompt, stops and bias point into this struct
	lane_api api;                  // the adapter's names and bounds, each field named as the client sent it
	int n;                         // choices
	bool stream;
	const char *model;             // "model" as sent (NULL: none)
	int32_t *prompt;               // malloc'd, owned
	srv_stops stops;
	srv_biases bias;               // owned
	const char *stream_type;       // the stream's content type (NULL: text/event-stream)
	json_t *template_kwargs;       // chat_template_kwargs: more variables for the chat template (borrowed)
	const char *reasoning_effort;  // passed to templates that read it
	json_t *metadata;              // the client's labels (borrowed); "domain" names the expert observer's domain
	json_t *n_predict;             // llama-server's max_tokens (-1: no limit)
	json_t *dry_breakers_sent;     // llama-server's dry_sequence_breakers as sent (borrowed)
	json_t *samplers_sent;         // llama-server's samplers as sent (borrowed): names, or a string of letters
	const char *dry_breakers[LANE_MAX_DRY_BREAKERS]; // point into the request's JSON
	int32_t n_dry_breakers;        // -1: the lane's default breakers
	int32_t **prompts;             // n prompts, one per choice, owned (NULL: every choice runs prompt)
	int32_t *n_prompts;
	// constrained decoding and tools (gen/tools.c)
	struct grammar *grammar;       // owned reference (NULL: unconstrained)
	const char *const *triggers;   // static: the grammar is lazy from the first of these
	int n_triggers;
	json_t *tools;                 // OpenAI-shaped tools rendered into the prompt (owned; NULL: none)
	json_t *format;                // the response format's schema (owned; NULL: none): calls in auto join it
	const char *tool_id_prefix;    // "call_", "toolu_": the ids given to parsed calls
	bool parse_calls;              // the output is parsed into tool calls
	bool calls_only;               // the grammar makes the output calls from its first byte
	// adapters: "model" naming one, then "lora" (llama-server's [{"name"|"id", "scale"}])
	json_t *lora;                  // "lora" as sent (borrowed)
	model_lora_set lora_set;       // the versions bound at the check, a reference on each (owned)
	char model_name[MODEL_LORA_NAME_MAX + 1]; // the adapter "model" named ("": the base): replies name it
	// reasoning (gen/think.c)
	enum srv_think think;          // what the client asked (default: the model's and its template's)
	int32_t think_budget;          // thinking tokens before the lane closes the section (-1: no bound)
	json_t *thinking_budget;       // lanes' extension "thinking_budget" as sent (borrowed): think_budget in every API
	bool reasoning;                // the output is split into thinking and answer (a chat prompt, a reasoning family)
	bool think_inside;             // the prompt opened the section: the reply starts in it
	lane_think lthink;             // the lane's view (markers and end tokens the server's)
} srv_gen;

// The rows every API reads alike (offsets in srv_gen): model, top_k, min_p, seed, stream,
// the draft and ignore_eos extensions, and llama-server's samplers (DRY, XTC, top-nσ, mirostat,
// dynamic temperature, their order).
extern const srv_field srv_gen_fields[];

// Neutral sampling, drafting allowed, one choice, the adapter's api, for conn's request.
void srv_gen_init(srv_gen *g, const lane_api *api, srv_conn *conn);
// Frees g's storage (not g). Accepts a g that srv_gen_run took over: it cleared it.
void srv_gen_free(srv_gen *g);
// The model check and the adapters' binding (their current versions, each held until g is
// freed), then lane_check_params over every field read, and a non-streamed reply's
// log-probability entries against --max-output-bytes; cheap, so adapters run it before
// building the prompt. 0, or -1 with e naming the field in the API's words.
int srv_gen_check(srv_model *M, srv_gen *g, srv_err *e);
// The binding alone: g->model when it names an adapter, then g->lora's entries. 0, or -1 with
// e: 404 model_not_found for an adapter not loaded, 400 for a malformed entry.
int srv_gen_bind(srv_model *M, srv_gen *g, srv_err *e);

// ---- chat prompts ---------------------------------------------------------------------------
// 400 context_length_exceeded naming param when the array parts (messages, input items)
// has more entries than the context has tokens: checked before they are flattened.
int srv_check_parts(srv_model *M, json_t *parts, const char *param, srv_err *e);
// OpenAI chat messages (system/developer/user/assistant, content a string or text parts)
// flattened into [{role, content: string}] for the chat template; parts the model cannot read
// are named on c (srv_content_text).
int srv_openai_messages(json_t *msgs, srv_conn *c, json_t **out, srv_err *e);
// Renders messages (array of {role, content: string}) with the chat template and tokenizes
// them; prefill (may be NULL) is appended after the generation prompt. A system message after
// the conversation began joins the leading system prompt, in order, where the template renders
// no system turn there. g (may be NULL) adds
// its chat_template_kwargs and reasoning_effort to the template's variables. Errors name param.
// With a reasoning family g's think settles the prompt's end (gen/think.c): off turns thinking off
// through the template's switch, else closes an empty section; a grammar opens the section where
// the template does not, so the constraint starts after it.
int srv_chat_prompt(srv_model *M, json_t *messages, const char *prefill, const char *param, srv_gen *g,
		    int32_t **ids, int32_t *n, srv_err *e);

// ---- reasoning (gen/think.c) ------------------------------------------------------------------
// At load: the family (--reasoning-format, else the template's) and its end tokens. 0 or a code.
int srv_reason_load(srv_model *M, char *err, size_t errlen);
// A reasoning_effort (OpenAI, Responses, Ollama's think levels) as g's think and budget: none
// turns thinking off, minimal, low and medium bound it, high and xhigh leave it free; another
// value only reaches the template. param names it in errors. 0, or -1 with e.
int srv_think_effort(srv_gen *g, const char *effort, const char *param, srv_err *e);
// A thinking block's signature: HMAC-SHA256 of its text under the server's key, base64.
#define SRV_THINK_SIG 45
void srv_think_sign(const http_server *s, const char *text, size_t len, char out[SRV_THINK_SIG]);
// Whether sig is the signature this server gave text.
bool srv_think_signed(const http_server *s, const char *text, size_t len, const char *sig);
// The rendered prompt's end as g's thinking asks (with a reasoning family): g->reasoning,
// g->think_inside and g->lthink set. A client's prefill (prefill true) is continued as sent.
// false: out of memory.
bool srv_think_prompt(srv_model *M, srv_gen *g, bool prefill, char **text, size_t *len);
// Reasoning tokens of the call's choices (usage's reasoning_tokens).
int32_t srv_call_thought(const srv_call *c);

// ---- constrained decoding and tool calls (gen/tools.c) -----------------------------------
#define SRV_TOOLS_MAX 512     // tools one request may offer
#define SRV_TOOLS_NODES 65536 // JSON values in their definitions together
// GBNF text into g's grammar; 400 naming param with the compiler's message (line, column).
int srv_grammar_text(srv_gen *g, const char *text, size_t len, const char *param, srv_err *e);
// A JSON Schema into g's grammar; 400 naming param with the keyword at fault.
int srv_grammar_schema(srv_gen *g, const json_t *schema, const char *param, srv_err *e);
// Any JSON object into g's grammar.
int srv_grammar_json_object(srv_gen *g, srv_err *e);
// OpenAI's tool_choice: "none", "auto", "required" or {"type": "function", "function": {"name"}}
// (flat: Responses' {"type": "function", "name"}); *name points into v. NULL: auto.
int srv_tool_choice(json_t *v, bool flat, enum tool_choice *out, const char **name, srv_err *e);
// Tools offered (OpenAI-shaped, borrowed; NULL or empty: none): checked, rendered into the
// prompt, and unless choice is none, a grammar for the calls and their parsing from the output.
// A tool's schema is exact when its function.strict is true, else best effort: each keyword it
// relaxed is named on g->conn (schema.KEYWORD in x-lanes-ignored). param names tools in the API's words, schema_at a tool's schema
// inside one ("function.parameters", "input_schema"): a refused schema is a 400 naming
// param[i].schema_at. 0, or -1 with e naming the field at fault.
int srv_tools_set(srv_model *M, srv_gen *g, json_t *tools, enum tool_choice choice, const char *name, bool parallel,
		  const char *param, const char *schema_at, srv_err *e);

// One choice's tool calls as the output gives them, streamed or whole.
typedef struct {
	tool_scan scan;                // stream: the text read so far (owned once scanning)
	bool scanning;                 // scan was started
	size_t content_sent;           // stream: bytes of content sent
	int n_started;                 // calls announced (their ids in ids)
	size_t cur_sent;               // of the last call announced, bytes of its arguments sent
	bool cur_done;                 // that call's end was sent
	json_t *ids;                   // the ids given to the calls, in order (owned)
} srv_tool_stream;

// What an adapter does with a choice's parsed output as it streams.
typedef struct {
	void (*content)(srv_call *c, int i, const char *text, size_t len);
	void (*call_start)(srv_call *c, int i, int k, const char *id, const char *name, size_t name_len);
	void (*call_args)(srv_call *c, int i, int k, const char *text, size_t len);
	void (*call_end)(srv_call *c, int i, int k, const char *id, json_t *call); // call: as srv_tool_calls gives
} srv_tool_sink;
// Sends what choice i's text now adds: content up to where a call could begin (all of it when
// final), each call's start, the bytes its arguments gain, its end (when its object closes, or
// at the end of the text for a call cut short). The pieces concatenate to srv_tool_calls'.
void srv_tools_stream(srv_call *c, int i, bool final, const srv_tool_sink *sink);
// Choice i's whole output: the content's length and the calls [{"id", "name", "arguments": the
// JSON text as generated, "input": object, "whole": false for a call cut short (its arguments
// so far; input as tool_scan_input)}] (new reference; empty: none). 0, or -1: out of memory.
int srv_tool_calls(srv_call *c, int i, size_t *content_len, json_t **calls);

// ---- a generation call: n lane requests for one HTTP request ------------------------------
typedef struct {
	bool ended;
	enum lane_ev_kind kind;
	enum lane_finish finish;
	int32_t stop_index;
	char token_sha[65];
	int32_t n_generated, n_cached;
	srv_buf text;                  // every piece of text so far
	uint64_t t_first_us, t_last_us; // first and last token events
	int32_t n_tokens;              // token events
	float *embedding;              // an embedding request's vector (malloc'd), n_embd floats
	int32_t n_embd, n_vectors, n_prompt;
	srv_tool_stream tools;         // tool calls parsed from text
	// reasoning (g.reasoning): text holds the answer alone
	srv_buf raw;                   // the whole text: thinking, its markers, the answer
	srv_buf thinking;              // the thinking so far, markers and surrounding whitespace left out
	reason_scan rs;                // where raw stands
	int32_t n_think;               // tokens of thinking (the markers' included)
	int32_t n_unsure;              // tokens read before the reply showed whether it thinks
} srv_choice;

// What an API adapter does with the call's events. Streamed calls write SSE into c->out.
typedef struct {
	void (*begin)(srv_call *c);    // stream: the opening events
	// text of choice i: tok is the token event (NULL for the terminal event's remainder)
	void (*text)(srv_call *c, int i, const char *text, size_t len, const lane_event *tok);
	// stream: thinking of choice i, before the answer's text (NULL: the adapter shows none)
	void (*thinking)(srv_call *c, int i, const char *text, size_t len);
	void (*choice_end)(srv_call *c, int i); // stream: choice i finished
	void (*done)(srv_call *c);     // stream: every choice finished — the closing events
	void (*fail)(srv_call *c);     // stream: its error event for c->fail_reason (NULL: the family's alone)
	json_t *(*reply)(srv_call *c); // non-stream: the reply once every choice finished
	void (*free_state)(void *st);
	enum srv_family family;        // its stream's framing and error event
} srv_api;

struct srv_call {
	http_server *s;
	srv_model *mdl;                // the model it runs on
	srv_conn *conn;
	const srv_api *api;
	void *st;                      // the adapter's parsed request
	srv_gen g;
	int n;
	srv_choice *ch;
	lane_req **req;
	char id[64];
	int64_t created;               // unix seconds
	srv_buf out;                   // stream bytes not yet handed to the socket
	size_t out_off;
	int slot;
	int sock;
	size_t queued_bytes;           // engine thread: what its token events add to out_bytes
	uint64_t wake_at_us;           // the waker wakes it then even without events (0: never; under slot_mu)
	uint64_t flush_after_us;       // stream: token events before then wait to go out together (under slot_mu)
	uint64_t flush_at_us;          // stream: tokens are held; the waker resumes it then (0: none; under slot_mu)
	atomic_bool hup;               // the client half-closed: it may still be reading, or gone
	atomic_bool gone;              // the client's socket failed: it went away
	bool probed;                   // after hup: something was written to see whether it is gone
	uint64_t last_out_us;          // stream: when bytes last went to the socket
	bool over;                     // nothing more will be written
	bool failed;
	char fail_reason[200];
	int64_t seq;                   // next SSE sequence number (Responses)
	size_t out_bytes;              // non-stream: the reply's size so far, as --max-output-bytes counts it
	bool too_big;                  // failed: out_bytes passed --max-output-bytes
};

// Checks the prompt against the context (lane_check_prompt), submits every choice, then
// answers: waits and replies (non-stream) or starts the SSE stream. Takes ownership of st
// (freed with api->free_state) and of g's storage, also on failure. The call's id is
// id_prefix plus random hex.
void srv_gen_run(srv_conn *c, const srv_api *api, void *st, srv_gen *g, const char *id_prefix);
// Ends and frees a call (cancels its requests); from the request-completed callback.
void srv_call_free(srv_call *c);

// ---- the waker: one thread, so that no connection thread blocks on the engine ----------------
// Starts it over every slot's eventfd (each slot's fd must be open). 0 or a negative code.
int srv_waker_start(http_server *s, char *err, size_t errlen);
// Sets s->quit and resumes every suspended call, which then ends: before the daemon stops.
void srv_waker_release(http_server *s);
// Stops and joins it (after the daemon stopped). Accepts a server whose waker never started.
void srv_waker_stop(http_server *s);
// Appends one event in the call's family's framing (srv_stream_event), data stolen, to c->out.
void srv_sse(srv_call *c, const char *name, json_t *data);
void srv_sse_raw(srv_call *c, const char *s);
// Choice i's text as an event brings it (tok NULL: the terminal event's rest; end: no more comes):
// with reasoning split into thinking and answer, each piece to the adapter as it is found.
void srv_choice_text(srv_call *c, int i, const char *text, size_t len, const lane_event *tok, bool end);
// Sum of generated tokens over the choices.
int32_t srv_call_generated(const srv_call *c);
// The model a reply names: the adapter the request named, else the server's model.
const char *srv_call_model(const srv_call *c);
// The choice was cut before its text was whole: by max_tokens, or by a grammar that allows
// no token there; every API shows both as its length finish.
bool srv_choice_cut(const srv_choice *ch);
// Names the real end in o as "lanes_stop_reason" where the API's own finish cannot tell it
// (a grammar's dead end: "grammar_dead_end"); leaves o alone otherwise. o may be NULL.
void srv_finish_note(json_t *o, const srv_choice *ch);

#endif
