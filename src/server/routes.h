// server/routes: what the daemon (server.c) calls in the layers below it — every endpoint, and the
// metrics set-up. Each endpoint file includes this to keep its definitions in step.
#ifndef LANES_SERVER_ROUTES_H
#define LANES_SERVER_ROUTES_H

#include "server/net/base.h"

// control reads (ops/control.c): answered from the lane host's last snapshot
void srv_health(srv_conn *c);
void srv_slots(srv_conn *c);
void srv_metrics(srv_conn *c);
void srv_models(srv_conn *c);
void srv_props(srv_conn *c);
void srv_model_one(srv_conn *c);
// the expert observer (ops/experts.c): /v1/experts, /v1/experts.svg, and /metrics' expert lines
void srv_experts(srv_conn *c);
void srv_experts_svg(srv_conn *c);
void srv_metrics_experts(http_server *s, srv_buf *b);
// The server's own histograms (time to first token, inter-token gaps).
void srv_metrics_init(http_server *s);

// llama-server's slot actions (ops/slots.c): POST /slots/{id}?action=save|restore|erase, files in --cache-dir
void srv_slot_action(srv_conn *c);

// tokenizer utilities (api/tokens.c)
void srv_tokenize(srv_conn *c);
void srv_detokenize(srv_conn *c);

// API adapters (api/openai.c, api/anthropic.c, api/responses.c)
void srv_chat_completions(srv_conn *c);
void srv_completions(srv_conn *c);
void srv_messages(srv_conn *c);
void srv_count_tokens(srv_conn *c);
void srv_responses(srv_conn *c);
void srv_responses_get(srv_conn *c);    // GET /v1/responses/{id}[/input_items]
void srv_responses_delete(srv_conn *c); // DELETE /v1/responses/{id}
void srv_embeddings(srv_conn *c);
// Rerankers (api/rerank.c): Jina's and Cohere's /v1/rerank, vLLM's /v1/score; the scoring
// row read once the model is loaded.
void srv_rerank(srv_conn *c);
void srv_score(srv_conn *c);
void srv_rank_load(srv_model *M);

// LoRA adapters (ops/adapters.c): the endpoints, the adapters given at start (loaded with the
// model, before the server is ready), the loader thread of POSTed ones, and what /v1/models
// and /metrics say of them
void srv_adapters_list(srv_conn *c);
void srv_adapters_load(srv_conn *c);
void srv_adapters_unload(srv_conn *c);
int srv_adapters_start(http_server *s, char *err, size_t errlen);
void srv_adapters_free(http_server *s); // after the lane host: no request holds an adapter
// The file a load or save names in the adapters' folder into out: file as sent, else NAME.gguf
// (name may be NULL); a "path" sent is a 400. 0, or -1 with e.
int srv_adapter_file(http_server *s, const char *path, const char *file, const char *name, char out[BASE_NAME_MAX + 1], srv_err *e);
// Appends a model object for each ready adapter (only: that one alone; NULL: all) to data.
void srv_adapters_models(http_server *s, json_t *data, const char *only);
// lanes_lora_requests_info (and vllm:lora_requests_info) from sn, and each adapter's requests.
void srv_adapters_metrics(http_server *s, const lane_snapshot *sn, srv_buf *out);

// learning while serving (ops/learning.c): grants, examples, the ledger, saving an adapter
// that learns here; the learner made before the lane host (its hook is the host's background),
// and what /metrics says of it
void srv_learn_grants(srv_conn *c);
void srv_learn_grant_new(srv_conn *c);
void srv_learn_grant_revoke(srv_conn *c);
void srv_learn_examples(srv_conn *c);
void srv_adapters_save(srv_conn *c);
int srv_learning_start(http_server *s, char *err, size_t errlen);
void srv_learning_metrics(http_server *s, srv_buf *out);

// the web page (ops/webui.c): its files, compiled in
void srv_webui(srv_conn *c);

// Ollama's API (api/ollama.c; its embeddings in api/embed.c)
void srv_ollama_version(srv_conn *c);
void srv_ollama_tags(srv_conn *c);
void srv_ollama_ps(srv_conn *c);
void srv_ollama_show(srv_conn *c);
void srv_ollama_generate(srv_conn *c);
void srv_ollama_chat(srv_conn *c);
void srv_ollama_embed(srv_conn *c);
void srv_ollama_embeddings(srv_conn *c);

// llama-server's fill-in-the-middle (api/infill.c)
void srv_infill(srv_conn *c);

// the model cache over Ollama's API (ops/cache.c): pulls run on threads of their own, stopped
// (cancelled, their connections resumed, their threads waited for) before the daemon stops
void srv_ollama_pull(srv_conn *c);
void srv_ollama_copy(srv_conn *c);
void srv_ollama_delete(srv_conn *c);
int srv_pulls_start(http_server *s);
void srv_pulls_stop(http_server *s);
void srv_pulls_free(http_server *s); // after the daemon stopped

// The models served by name (ops/models.c): the -m model first, then --models-dir's.
int srv_models_start(http_server *s, char *err, size_t errlen); // after the -m model is made, before it loads
void srv_models_stop(http_server *s);                           // loads end; before the daemon stops
void srv_models_free(http_server *s);                           // after the -m model's lane host is freed
void srv_model_free(srv_model *M);
// What a loaded model's file gives beside its weights: vocabulary, reranker, chat template,
// reasoning, the prefix cache's ident; stage (may be NULL) hears the template's turn come.
// 0, or a code with err.
int srv_model_setup(srv_model *M, void (*stage)(http_server *s, enum srv_load_stage st), char *err, size_t errlen);
// Sets c->mdl from its body's "model" (or "name"); a model of --models-dir not loaded is loaded,
// c parked until it is in. true: c was replied to or parked (srv_models_go runs it on).
bool srv_models_pick(srv_conn *c);
// What follows a request's pick: the grid may forward it, else its route runs (server.c).
void srv_models_go(srv_conn *c);
// c ended: its model is no longer held by it.
void srv_models_release(srv_conn *c);
// --models-dir read again: new files are served, files gone are no longer (after a pull, copy or delete).
void srv_models_rescan(http_server *s);
// The same when the folder was last read more than a second ago (a list, a name not found).
void srv_models_refresh(http_server *s);
// Every loaded model of --models-dir drains (halt NULL) or halts with that reason.
void srv_models_drain(http_server *s, const char *halt);
// Requests open in the lane hosts of --models-dir's loaded models.
int srv_models_open(http_server *s);
// M's state as the lists say it: {"value": "loaded"|"loading"|"unloaded"|"failed", "error"?, "unloads_in_s"?}.
json_t *srv_model_status(srv_model *M);

// The pooling the server uses for a model (cfg's when set, else pooling_type, else last).
enum lane_embed srv_pooling_of(const char *cfg, const model_hparams *hp);
// The text callback of calls that send no text (embeddings, rerank): their reply is built whole.
void srv_text_none(srv_call *c, int i, const char *text, size_t len, const lane_event *tok);

#endif
