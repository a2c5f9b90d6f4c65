// server/ops/adapters: LoRA adapters over HTTP — GET /v1/adapters (the registry, with each
// adapter's running and waiting requests from the lane host's snapshot), POST /v1/adapters (a
// load: the file is read and checked on the adapter loader thread while the connection waits
// suspended, so neither the engine nor a connection thread reads it), DELETE
// /v1/adapters/NAME; the adapters given at start; what /v1/models and /metrics say of them.
#include "model/loras.h"
#include "server/net/base.h"
#include "server/net/work.h"
#include "server/routes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct lora_job {
	http_server *s;
	srv_model *M;                // its base model (held by the connection, or the -m model at start)
	srv_conn *conn;              // the POST waiting for it, parked
	char name[MODEL_LORA_NAME_MAX + 1];
	char path[1024];             // as listed: the operator's path, or the adapters' folder and file
	char file[BASE_NAME_MAX + 1]; // a file in the adapters' folder ("": path is the operator's)
	float scale;
	bool replace;
	uint64_t ticket;             // the registry's reservation
	// the outcome, written before the job wakes the connection
	int rc;
	char err[768];
	uint32_t version;
	double ms;
	model_lora_info info;
} lora_job;

// Reads and checks the job's file against the model, then publishes it (or frees its name).
static void run_load(http_server *s, lora_job *j) {
	const uint64_t t0 = base_now_us();
	model_lora *a = NULL;
	if (j->file[0]) {
		int fd;
		// a missing or refused file is the client's 400, like a malformed one
		if (base_file_open_in(s->adapters_dfd, j->file, &fd, j->err, sizeof j->err)) j->rc = LANES_EINVAL;
		else {
			j->rc = model_lora_load_fd(&a, j->M->m, fd, j->file, j->err, sizeof j->err);
			close(fd);
		}
	} else {
		j->rc = model_lora_load(&a, j->M->m, j->path, j->err, sizeof j->err);
	}
	if (!j->rc) model_lora_info_of(a, &j->info);
	model_loras_publish(j->M->loras, j->name, j->ticket, a, &j->version);
	j->ms = (double)(base_now_us() - t0) / 1000.0;
	if (!j->rc && !j->version)
		j->rc = base_seterr(j->err, sizeof j->err, LANES_EBUSY, "the adapter '%s' was unloaded while it loaded", j->name);
	if (!j->rc)
		LOG_INFO(SRV_MOD, "adapter %s v%u of %s from %s in %.0f ms: rank %d, %d matrices (%s), %.2f MiB", j->name, j->version, j->M->model_id,
			 j->path, j->ms, j->info.rank, j->info.n_targets, j->info.targets, (double)j->info.bytes / 1048576.0);
	else
		LOG_WARN(SRV_MOD, "adapter %s not loaded: %s", j->name, j->err);
}

// The load thread's job (net/work.c): the file read and checked, or the load ended unread.
static void load_job(void *arg, bool stopping) {
	lora_job *j = arg;
	if (stopping) {
		j->rc = base_seterr(j->err, sizeof j->err, LANES_ECANCELLED, "the server is stopping");
		model_loras_publish(j->M->loras, j->name, j->ticket, NULL, NULL);
	} else {
		run_load(j->s, j);
	}
	srv_wake(j->conn, SRV_WAIT_LOAD); // the connection answers from the job
}

// What follows the registry's refusal rc: for want of room (LANES_ELIMIT), the setting that bounds it.
static const char *full_hint(http_server *s, int rc, char hint[96]) {
	hint[0] = 0;
	if (rc == LANES_ELIMIT) snprintf(hint, 96, " (%s %d): DELETE one first", HTTP_SETTING(&s->cfg, max_lora), s->cfg.max_lora);
	return hint;
}

// Adapter i given at start, NAME=PATH[:SCALE] already split.
static int load_at_start(http_server *s, int i, char *err, size_t errlen) {
	const http_lora *l = &s->cfg.loras[i];
	if (!strcmp(l->name, s->mdl->model_id))
		return base_seterr(err, errlen, LANES_EINVAL, "%s %s: the name is the base model's", HTTP_SETTING(&s->cfg, loras), l->name);
	for (int k = 0; k < i; k++)
		if (!strcmp(s->cfg.loras[k].name, l->name))
			return base_seterr(err, errlen, LANES_EINVAL, "%s %s: two adapters have that name", HTTP_SETTING(&s->cfg, loras), l->name);
	if (!(fabsf(l->scale) <= MODEL_LORA_SCALE_MAX))
		return base_seterr(err, errlen, LANES_EINVAL, "%s %s: the scale must be between -%d and %d", HTTP_SETTING(&s->cfg, loras), l->name,
				   MODEL_LORA_SCALE_MAX, MODEL_LORA_SCALE_MAX);
	lora_job j = {.M = s->mdl, .scale = l->scale};
	snprintf(j.name, sizeof j.name, "%s", l->name);
	snprintf(j.path, sizeof j.path, "%s", l->path);
	char why[256], hint[96];
	int rc = model_loras_reserve(s->mdl->loras, l->name, l->path, l->scale, false, &j.ticket, why, sizeof why);
	if (rc) return base_seterr(err, errlen, rc, "%s %s=%s: %s%s", HTTP_SETTING(&s->cfg, loras), l->name, l->path, why, full_hint(s, rc, hint));
	run_load(s, &j);
	if (j.rc) return base_seterr(err, errlen, j.rc, "%s %s: %s", HTTP_SETTING(&s->cfg, loras), l->name, j.err);
	return 0;
}

int srv_adapters_start(http_server *s, char *err, size_t errlen) {
	if (model_loras_new(&s->mdl->loras, s->mdl->m, s->cfg.max_lora)) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	if (s->cfg.n_loras > s->cfg.max_lora)
		return base_seterr(err, errlen, LANES_EINVAL, "%d %s adapters, more than %s %d", s->cfg.n_loras, HTTP_SETTING(&s->cfg, loras),
				   HTTP_SETTING(&s->cfg, max_lora), s->cfg.max_lora);
	for (int i = 0; i < s->cfg.n_loras; i++) {
		int rc = load_at_start(s, i, err, errlen);
		if (rc) return rc;
	}
	return 0;
}

void srv_adapters_free(http_server *s) {
	model_loras_free(s->mdl->loras);
	s->mdl->loras = NULL;
}

// ---- what the snapshot says of each adapter ------------------------------------------------

static const lane_snap_lora *snap_of(const lane_snapshot *sn, uint64_t id) {
	for (int32_t i = 0; id && i < sn->n_lora; i++)
		if (sn->lora[i].id == id) return &sn->lora[i];
	return NULL;
}

static const char *const state_name[] = {[MODEL_LORAS_LOADING] = "loading", [MODEL_LORAS_READY] = "ready", [MODEL_LORAS_RETIRED] = "retired"};

static json_t *adapter_object(const srv_model *M, const model_loras_entry *a, const lane_snapshot *sn) {
	const lane_snap_lora *u = snap_of(sn, a->lora_id);
	json_t *targets = json_array();
	for (const char *p = a->info.targets; targets && *p;) {
		const char *q = strchr(p, ',');
		const size_t n = q ? (size_t)(q - p) : strlen(p);
		json_array_append_new(targets, json_stringn(p, n));
		p += n + (q != NULL);
	}
	json_t *o = json_pack("{s:s, s:i, s:i, s:s, s:s, s:s, s:o, s:i, s:o, s:I, s:i, s:i, s:I, s:I}", "name", a->name, "id",
			      (int)a->id, "version", (int)a->version, "status", state_name[a->state], "parent", M->model_id, "path",
			      a->path, "scale", srv_real(a->scale), "rank", a->info.rank, "alpha", srv_real(a->info.alpha), "bytes",
			      (json_int_t)a->info.bytes, "requests_running", u ? u->running : 0, "requests_waiting",
			      u ? u->waiting : 0, "requests_total", (json_int_t)a->requests, "created", (json_int_t)a->created);
	if (o) json_object_set_new(o, "targets", targets ? targets : json_array());
	else json_decref(targets);
	if (o && a->replacing) json_object_set_new(o, "replacing", json_true());
	return o;
}

// M's registry entries and its lane host's last snapshot; NULL before the model is in.
static model_loras_entry *list_with_snapshot(srv_model *M, int *n, lane_snapshot **sn) {
	*n = 0;
	*sn = NULL;
	struct model_loras *l = srv_loras_of(M);
	if (!l) return NULL;
	model_loras_entry *v = NULL;
	*n = model_loras_list(l, &v);
	*sn = calloc(1, sizeof **sn);
	if (*n < 0 || !*sn) {
		*n = 0;
		free(v);
		free(*sn);
		*sn = NULL;
		return NULL;
	}
	lane_host_snapshot(M->host, *sn); // in: its host is too
	return v;
}

// Every loaded model's adapters, each naming its base model (parent).
void srv_adapters_list(srv_conn *c) {
	http_server *s = c->s;
	srv_model *ms[SRV_MODELS_MAX];
	const int nm = srv_models_each(s, true, ms, SRV_MODELS_MAX);
	json_t *data = json_array();
	for (int k = 0; k < nm; k++) {
		int n;
		lane_snapshot *sn;
		model_loras_entry *v = list_with_snapshot(ms[k], &n, &sn);
		for (int i = 0; data && i < n; i++) json_array_append_new(data, adapter_object(ms[k], &v[i], sn));
		free(v);
		free(sn);
	}
	srv_models_put(s, ms, nm);
	srv_reply_json(c, 200, json_pack("{s:s, s:o, s:i}", "object", "list", "data", data ? data : json_array(), "max_lora",
					 s->cfg.max_lora),
		       0);
}

// ---- POST /v1/adapters -------------------------------------------------------------------

int srv_adapter_file(http_server *s, const char *path, const char *file, const char *name, char out[BASE_NAME_MAX + 1], srv_err *e) {
	if (path)
		return srv_fail(e, SRV_E_BAD_REQUEST, "path",
				"paths are not taken over HTTP: put the file in the server's adapters folder (%s) and name it with \"file\"",
				HTTP_SETTING(&s->cfg, adapters_dir));
	if (s->adapters_dfd < 0)
		return srv_fail(e, SRV_E_CONFLICT, "file", "this server has no adapters folder (%s): adapters load and save over HTTP only there",
				HTTP_SETTING(&s->cfg, adapters_dir));
	if (!file && name && strlen(name) + 5 <= BASE_NAME_MAX) {
		snprintf(out, BASE_NAME_MAX + 1, "%s.gguf", name);
		file = out;
	}
	if (!file || !base_name_ok(file))
		return srv_fail(e, SRV_E_BAD_REQUEST, "file",
				"file must be a file name in the adapters folder: 1 to %d of A-Z a-z 0-9 . _ -, not starting with '.'",
				BASE_NAME_MAX);
	if (file != out) snprintf(out, BASE_NAME_MAX + 1, "%s", file);
	return 0;
}

typedef struct {
	const char *name, *file, *path, *base;
	json_t *scale;
	bool replace;
} load_req;

static const srv_field load_fields[] = {
	SRV_ROW(load_req, name, SRV_K_STR),
	SRV_ROW(load_req, base, SRV_K_STR), // read by the pick: the model it is loaded on
	SRV_ROW(load_req, file, SRV_K_STR),
	SRV_ROW(load_req, path, SRV_K_STR),
	SRV_ROW(load_req, scale, SRV_K_JSON),
	SRV_ROW(load_req, replace, SRV_K_BOOL),
	{0},
};

static void load_done(srv_conn *c) {
	free(c->job);
	c->job = NULL;
}

// The load's end woke the connection: the job's outcome is the reply.
static void load_resume(srv_conn *c) {
	lora_job *j = c->job;
	srv_err e;
	if (j->rc) {
		const enum srv_ekind k = srv_kind_of(j->rc, SRV_BLAME_REQUEST);
		srv_fail(&e, k, "file", "%s", j->err);
		if (k == SRV_E_BAD_REQUEST) snprintf(e.code, sizeof e.code, "invalid_adapter");
		srv_reply_error(c, &e);
		return;
	}
	model_loras_entry a = {.version = j->version, .state = MODEL_LORAS_READY, .scale = 1, .info = j->info, .created = (int64_t)time(NULL)};
	snprintf(a.name, sizeof a.name, "%s", j->name);
	snprintf(a.path, sizeof a.path, "%s", j->path);
	// the entry as the registry has it now (its id, scale, count), unless it changed since
	int n;
	lane_snapshot *sn;
	model_loras_entry *v = list_with_snapshot(j->M, &n, &sn);
	for (int i = 0; i < n; i++)
		if (v[i].state == MODEL_LORAS_READY && !strcmp(v[i].name, j->name) && v[i].version == j->version) a = v[i];
	static const lane_snapshot none;
	json_t *o = adapter_object(j->M, &a, sn ? sn : &none);
	free(v);
	free(sn);
	if (o) json_object_set_new(o, "load_ms", srv_real(j->ms));
	srv_reply_json(c, 200, o, 0);
}

void srv_adapters_load(srv_conn *c) {
	http_server *s = c->s;
	srv_err e;
	json_t *j = NULL;
	load_req r = {0};
	char file[BASE_NAME_MAX + 1];
	if (srv_parse_body(c, &j, &e) || srv_fields_known(j, load_fields, NULL, &e) || srv_fields_read(j, load_fields, &r, NULL, NULL, NULL, &e))
		goto fail;
	if (!r.name) {
		srv_fail(&e, SRV_E_BAD_REQUEST, "name", "name is required: {\"name\", \"file\"?, \"scale\"?, \"replace\"?}");
		goto fail;
	}
	if (srv_adapter_file(s, r.path, r.file, r.name, file, &e)) goto fail;
	if (!model_lora_name_ok(r.name)) {
		srv_fail(&e, SRV_E_BAD_REQUEST, "name", "an adapter's name is 1 to %d letters, digits, '.', '_' or '-'", MODEL_LORA_NAME_MAX);
		goto fail;
	}
	// c->mdl: the base model "base" names (held, loaded), else the -m model
	srv_model *M = c->mdl;
	if (!strcmp(r.name, s->mdl->model_id) || srv_models_find(s, r.name)) {
		srv_fail(&e, SRV_E_CONFLICT, "name", "'%s' is a model's name", r.name);
		goto fail;
	}
	if (r.scale && (!json_is_number(r.scale) || !(fabs(json_number_value(r.scale)) <= MODEL_LORA_SCALE_MAX))) {
		srv_fail(&e, SRV_E_BAD_REQUEST, "scale", "scale must be a number between -%d and %d", MODEL_LORA_SCALE_MAX, MODEL_LORA_SCALE_MAX);
		goto fail;
	}
	lora_job *job = calloc(1, sizeof *job);
	if (!job) {
		srv_fail(&e, SRV_E_INTERNAL, NULL, "out of memory");
		goto fail;
	}
	snprintf(job->name, sizeof job->name, "%s", r.name);
	snprintf(job->file, sizeof job->file, "%s", file);
	snprintf(job->path, sizeof job->path, "%s/%s", s->adapters_path, file);
	job->scale = r.scale ? (float)json_number_value(r.scale) : NAN; // NAN: 1, or the replaced version's
	job->replace = r.replace;
	json_decref(j);
	j = NULL;
	char err[256], hint[96];
	job->M = M;
	const char *owner = NULL;
	int rc = srv_models_reserve_adapter(M, job->name, job->path, job->scale, job->replace, &job->ticket, &owner, err, sizeof err);
	if (owner) { // a request names an adapter alone: one name, one model
		free(job);
		srv_fail(&e, SRV_E_CONFLICT, "name", "'%s' is an adapter of %s: DELETE it first", r.name, owner);
		goto fail;
	}
	if (rc) {
		free(job);
		srv_fail(&e, srv_kind_of(rc, SRV_BLAME_STATE), "name", "%s%s", err, full_hint(s, rc, hint));
		goto fail;
	}
	job->s = s;
	job->conn = c;
	c->job = job;
	c->resume = load_resume;
	c->done = load_done;
	rc = srv_work_post(s, SRV_WORK_LOAD, load_job, job);
	if (rc) {
		model_loras_publish(M->loras, job->name, job->ticket, NULL, NULL);
		srv_fail(&e, srv_kind_of(rc, SRV_BLAME_STATE), NULL,
			 rc == LANES_ENOMEM ? "out of memory" : "the server is stopping");
		srv_reply_error(c, &e);
		return;
	}
	// a load that ended before this park is answered at once
	if (!srv_park(c, SRV_WAIT_LOAD)) load_resume(c);
	return;
fail:
	json_decref(j);
	srv_reply_error(c, &e);
}

// ---- DELETE /v1/adapters/NAME --------------------------------------------------------------

void srv_adapters_unload(srv_conn *c) {
	http_server *s = c->s;
	char name[MODEL_LORA_NAME_MAX + 8] = ""; // a longer name is no adapter's: left empty, it finds none
	const char *asked = c->path + strlen("/v1/adapters/");
	if (strlen(asked) < sizeof name) snprintf(name, sizeof name, "%s", asked);
	const size_t len = strlen(name);
	if (len > 7 && !strcmp(name + len - 7, ":latest")) name[len - 7] = 0; // Ollama's tag, as requests may name it
	srv_err e;
	// the model that holds it (held while this runs); else the -m model's registry says why not
	srv_model *M = srv_models_adapter(s, name), *held = M;
	if (!M && srv_has_primary(s)) M = s->mdl;
	int n;
	lane_snapshot *sn = NULL;
	model_loras_entry *v = M ? list_with_snapshot(M, &n, &sn) : NULL;
	uint64_t id = 0;
	for (int i = 0; v && i < n; i++)
		if (v[i].state != MODEL_LORAS_RETIRED && !strcmp(v[i].name, name)) id = v[i].lora_id;
	free(v);
	bool freed = false;
	const int rc = M ? model_loras_remove(M->loras, name, &freed) : LANES_EINVAL;
	if (rc) {
		free(sn);
		if (held) srv_models_put(s, &held, 1);
		if (rc == LANES_EBUSY) srv_fail(&e, SRV_E_CONFLICT, NULL, "the adapter '%.64s' is loading: wait for it to end", name);
		else srv_fail(&e, SRV_E_NOT_FOUND, NULL, "no adapter called '%.64s' is loaded", asked);
		srv_reply_error(c, &e);
		return;
	}
	const lane_snap_lora *u = sn ? snap_of(sn, id) : NULL;
	json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:i}", "name", name, "parent", M->model_id, "status", freed ? "unloaded" : "unloading",
			      "requests_running", u ? u->running : 0, "requests_waiting", u ? u->waiting : 0);
	free(sn);
	LOG_INFO(SRV_MOD, "adapter %s of %s unloaded%s", name, M->model_id, freed ? "" : ": freed when the requests holding it end");
	if (held) srv_models_put(s, &held, 1);
	// 202: the memory goes when the requests still holding it end; new requests get 404 now
	srv_reply_json(c, freed ? 200 : 202, o, 0);
}

// ---- what /v1/models and /metrics say ------------------------------------------------------

void srv_adapters_models(http_server *s, json_t *data, const char *only) {
	srv_model *ms[SRV_MODELS_MAX];
	const int nm = srv_models_each(s, true, ms, SRV_MODELS_MAX);
	for (int k = 0; k < nm; k++) {
		int n;
		lane_snapshot *sn;
		model_loras_entry *v = list_with_snapshot(ms[k], &n, &sn);
		for (int i = 0; i < n; i++) {
			if (v[i].state != MODEL_LORAS_READY || (only && strcmp(only, v[i].name))) continue;
			json_array_append_new(data, json_pack("{s:s, s:s, s:I, s:s, s:s, s:s}", "id", v[i].name, "object", "model", "created",
							      (json_int_t)v[i].created, "owned_by", "lanes", "parent", ms[k]->model_id, "root",
							      v[i].path));
		}
		free(v);
		free(sn);
	}
	srv_models_put(s, ms, nm);
}

// Names of the adapters with requests of one kind, comma-separated, into b: each once, though
// two versions of it may have requests.
static void names_with(const model_loras_entry *v, int n, const lane_snapshot *sn, bool running, srv_buf *b) {
	bool *said = n ? calloc((size_t)n, sizeof *said) : NULL;
	bool first = true;
	for (int32_t k = 0; said && k < sn->n_lora; k++) {
		if (!(running ? sn->lora[k].running : sn->lora[k].waiting)) continue;
		for (int i = 0; i < n; i++) {
			if (v[i].lora_id != sn->lora[k].id) continue;
			int j = 0; // the first entry with this name stands for it
			while (j < i && strcmp(v[j].name, v[i].name)) j++;
			if (!said[j]) {
				if (!first) srv_buf_adds(b, ",");
				srv_buf_adds(b, v[i].name);
				said[j] = true;
				first = false;
			}
			break;
		}
	}
	free(said);
}

void srv_adapters_metrics(http_server *s, const lane_snapshot *sn, srv_buf *out) {
	int n = 0;
	model_loras_entry *v = NULL;
	struct model_loras *l = srv_loras_of(s->mdl);
	if (l) n = model_loras_list(l, &v);
	if (n < 0) n = 0;
	srv_buf run = {0}, wait = {0};
	names_with(v, n, sn, true, &run);
	names_with(v, n, sn, false, &wait);
	// the gauge's value is when the engine last published what it says (unix seconds)
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	const double now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
	const double at = sn->clock_us ? now - (double)(base_now_us() - sn->clock_us) / 1e6 : now;
	static const char *const names[] = {"lanes_lora_requests_info", "vllm:lora_requests_info"};
	char line[256];
	for (int k = 0; k < 2; k++) {
		snprintf(line, sizeof line, "# HELP %s Adapters of the running and the waiting requests; the value is when that was so (unix seconds).\n"
					    "# TYPE %s gauge\n",
			 names[k], names[k]);
		srv_buf_adds(out, line);
		srv_buf_adds(out, names[k]);
		srv_buf_adds(out, "{running_lora_adapters=\"");
		srv_buf_adds(out, run.p ? run.p : "");
		srv_buf_adds(out, "\",waiting_lora_adapters=\"");
		srv_buf_adds(out, wait.p ? wait.p : "");
		snprintf(line, sizeof line, "\",max_lora=\"%d\"} %.3f\n", s->cfg.max_lora, at);
		srv_buf_adds(out, line);
	}
	srv_buf_free(&run);
	srv_buf_free(&wait);
	srv_buf_adds(out, "# HELP lanes_lora_requests_total Requests that named each adapter.\n# TYPE lanes_lora_requests_total counter\n");
	for (int i = 0; i < n; i++) {
		if (v[i].state == MODEL_LORAS_RETIRED) continue;
		snprintf(line, sizeof line, "lanes_lora_requests_total{adapter=\"%s\"} %llu\n", v[i].name, (unsigned long long)v[i].requests);
		srv_buf_adds(out, line);
	}
	free(v);
}
