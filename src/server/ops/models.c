// server/ops/models: the models served by name. The -m model loads at start and stays; each
// GGUF under --models-dir is listed at start, loaded by its first request on a loader thread
// of its own (the request parked meanwhile, never holding an HTTP thread), and unloaded once
// idle past its keep-alive, or to make room under --max-models (the least recently used idle
// one first). Every model's lane host runs its rounds on the server's one compute pool.
#include "server/routes.h"
#include "server/gen/gen.h"

#include "base/base.h"
#include "model/loras.h"
#include "model/model.h"
#include "plan/plan.h"
#include "tokenizer/tokenizer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MOD "server"
#define SCAN_DEPTH 3 // ORG/REPO/FILE.gguf: the depth `lanes pull` writes at
#define LOAD_NICE 10  // the niceness weights are read at (Linux: per thread)
#define RESCAN_US 1000000 // a list, or a name not found, reads the folder again at most this often

const char *const srv_model_state_name[] = {"unloaded", "loading", "loaded", "failed", "unloading"};

// ---- reading a model in and letting it go -------------------------------------------------------

int srv_model_setup(srv_model *M, void (*stage)(http_server *s, enum srv_load_stage st), char *err, size_t errlen) {
	http_server *s = M->s;
	const model_hparams *hp = model_hparams_of(M->m);
	// the context every request may use settles what depends on it, once (Phi 3's rope factors)
	model_set_context(M->m, lane_config_max_context(&M->lanes, hp));
	M->n_vocab = hp->n_vocab;
	M->pooling = srv_pooling_of(s->cfg.pooling, hp);
	int rc = tok_vocab_load(&M->vocab, model_gguf(M->m), err, errlen);
	if (!rc) srv_rank_load(M);
	if (!rc && stage) stage(s, SRV_LOAD_TEMPLATE);
	if (!rc) rc = chat_load(&M->chat, M->vocab, M->template_path, err, errlen);
	if (!rc) rc = srv_reason_load(M, err, errlen);
	if (!rc && M->lanes.cache_dir) rc = base_file_ident(M->model_path, M->lanes.cache_ident, err, errlen);
	return rc;
}

static int64_t mtime_ns(const struct stat *st) { return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec; }

static void note_file(srv_model *M, const struct stat *st) {
	M->file_bytes = (uint64_t)st->st_size;
	M->file_ino = (uint64_t)st->st_ino;
	M->file_mtime_ns = mtime_ns(st);
}

static bool read_meta(http_server *s, srv_model *M);

// What a load made, freed. No request holds it, nothing reads it: not under models_mu.
static void free_loaded(srv_model *M) {
	lane_host_free(M->host);
	model_loras_free(M->loras); // its adapters go with it (after the host: no request holds one)
	chat_free(&M->chat);
	tok_vocab_free(M->vocab);
	model_free(M->m);
	free(M->rank_w);
}

// Under models_mu: the requests parked on the list head are woken (each goes on, or fails, as its model's state says).
static void wake_list(srv_conn **head) {
	for (srv_conn *c = *head, *next; c; c = next) {
		next = c->next_wait;
		c->next_wait = NULL;
		c->wait_list = NULL;
		srv_wake(c, SRV_WAIT_MODEL);
	}
	*head = NULL;
}

// Under models_mu, after free_loaded: M is listed again, and the requests that waited for the
// unload go on (picking it again loads it).
static void unloaded(srv_model *M) {
	if (atomic_load(&M->mstate) != SRV_M_UNLOADING) return;
	M->host = NULL, M->vocab = NULL, M->m = NULL, M->rank_w = NULL, M->rank_why = NULL, M->loras = NULL;
	M->reason = NULL, M->n_think_end = 0, M->max_ctx = 0;
	atomic_store(&M->system_turns, 0);
	memset(&M->chat, 0, sizeof M->chat);
	atomic_store(&M->mstate, SRV_M_LISTED);
	// a file replaced while it was loaded: the next load reads the new one, listed as it is now
	if (M->stale && !read_meta(M->s, M)) atomic_store(&M->mstate, SRV_M_FAILED);
	M->stale = false;
	wake_list(&M->waiting);
	wake_list(&M->s->room_waiting); // the room it held is free now
	pthread_cond_broadcast(&M->s->models_cv);
}

// Under models_mu: M, loaded and idle, is to be freed; the reaper does it outside the lock, so
// no pick or request end waits on a lane host's threads or a cache flush.
static void retire(srv_model *M) {
	atomic_store(&M->mstate, SRV_M_UNLOADING);
	pthread_cond_broadcast(&M->s->models_cv);
}


typedef struct {
	srv_model *M;
	int rc;
	char err[512];
} weights_job;

// The weights read and repacked at a lower priority, so the models serving now get the cores
// first; a thread of its own, since the threads a thread makes inherit its niceness and the
// lane host's must not.
static void *read_weights(void *arg) {
	weights_job *j = arg;
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), LOAD_NICE);
	j->rc = model_load(&j->M->m, j->M->model_path, j->err, sizeof j->err);
	return NULL;
}

static void *load_thread(void *arg) {
	srv_model *M = arg;
	http_server *s = M->s;
	char err[512];
	const uint64_t t0 = base_now_us();
	weights_job j = {.M = M};
	pthread_t t;
	int rc = pthread_create(&t, NULL, read_weights, &j) ? base_seterr(err, sizeof err, LANES_ENOMEM, "cannot start a thread") : 0;
	if (!rc) {
		pthread_join(t, NULL);
		rc = j.rc;
		if (rc) snprintf(err, sizeof err, "%s", j.err);
	}
	if (!rc) rc = srv_model_setup(M, NULL, err, sizeof err);
	if (!rc) rc = lane_host_new(&M->host, M->m, M->vocab, &M->lanes, err, sizeof err);
	if (!rc && model_loras_new(&M->loras, M->m, s->cfg.max_lora)) rc = base_seterr(err, sizeof err, LANES_ENOMEM, "out of memory");
	if (!rc) M->max_ctx = lane_host_max_context(M->host);
	if (rc) free_loaded(M); // what it made before it failed: no request has seen any of it
	pthread_mutex_lock(&s->models_mu);
	if (rc) {
		snprintf(M->load_err, sizeof M->load_err, "%s", err);
		LOG_ERROR(MOD, "cannot load %s: %s", M->model_path, err);
		M->host = NULL, M->vocab = NULL, M->m = NULL, M->rank_w = NULL, M->rank_why = NULL, M->reason = NULL, M->loras = NULL;
		M->max_ctx = 0;
		memset(&M->chat, 0, sizeof M->chat);
		atomic_store(&M->mstate, SRV_M_FAILED);
		wake_list(&s->room_waiting); // the room it held is free again
	} else {
		M->load_err[0] = 0;
		atomic_store(&M->mstate, SRV_M_READY);
		// a drain or halt that came during the load (srv_models_drain saw no host) reaches it now
		const int st = atomic_load(&s->state);
		if (st == HTTP_DRAINING) lane_host_drain(M->host);
		else if (st == HTTP_HALTED) lane_host_halt(M->host, s->halt_reason);
		LOG_INFO(MOD, "model %s loaded in %.1f s: up to %d tokens per request%s", M->model_id, (double)(base_now_us() - t0) / 1e6,
			 M->max_ctx, model_compact(M->m) ? "; IQ weights compact, as in the file" : "");
	}
	M->used_us = base_now_us();
	wake_list(&M->waiting);
	pthread_cond_broadcast(&s->models_cv);
	pthread_mutex_unlock(&s->models_mu);
	return NULL;
}

// ---- the list -----------------------------------------------------------------------------------

// What M takes loaded, as the planner counts it: its weights, its lanes' KV of --ctx tokens
// and their compute reserve (0 when the budget is not counted).
static uint64_t need_of(const http_server *s, const srv_model *M, const model_memory *mem) {
	if (!s->cfg.memory_bytes) return 0;
	plan_model pm = {.hp = M->meta, .mem = *mem};
	plan_result pr;
	char err[256];
	const int32_t lanes = M->lanes.lanes, window = (M->lanes.ctx + lanes - 1) / lanes;
	if (plan_at(&pr, &pm, s->cfg.memory_bytes, lanes, window, &M->lanes, err, sizeof err)) return UINT64_MAX; // a KV type it cannot hold: never fits
	return pr.total_bytes;
}

// M's metadata read again (its file may have changed), and what it needs; false: it is no model.
static bool read_meta(http_server *s, srv_model *M) {
	model_memory mem;
	if (model_load_meta(M->model_path, &M->meta, &mem, M->load_err, sizeof M->load_err)) return false;
	M->need_bytes = need_of(s, M, &mem);
	return true;
}

static bool has_suffix(const char *n, const char *suf) {
	const size_t a = strlen(n), b = strlen(suf);
	return a > b && !strcmp(n + a - b, suf);
}

static srv_model *listed(http_server *s, const char *dir, const char *path, const char *id) {
	srv_model *M = calloc(1, sizeof *M);
	if (!M) return NULL;
	M->s = s;
	M->dir = dir;
	M->model_path = strdup(path);
	if (!M->model_path) {
		free(M);
		return NULL;
	}
	snprintf(M->model_id, sizeof M->model_id, "%s", id);
	M->keep_s = s->cfg.keep_alive_s;
	M->lanes = s->cfg.lanes;
	M->lanes.draft_model = NULL; // the draft model is the -m model's
	M->lanes.pool = s->pool;
	struct stat st;
	if (!stat(path, &st)) note_file(M, &st);
	atomic_init(&M->mstate, SRV_M_LISTED);
	// what the file is, from its metadata alone: a file that cannot be a model is listed failing
	if (!read_meta(s, M)) atomic_store(&M->mstate, SRV_M_FAILED);
	return M;
}

// Under models_mu (or before the server runs): M appended, the count published after it.
static int add(http_server *s, srv_model *M) {
	const int n = atomic_load(&s->n_models);
	if (n >= SRV_MODELS_MAX) return LANES_EINVAL;
	s->models[n] = M;
	atomic_store(&s->n_models, n + 1);
	return 0;
}

static srv_model *find_id(http_server *s, const char *id, bool gone_too) {
	const int n = atomic_load(&s->n_models);
	for (int i = 0; i < n; i++)
		if (!strcmp(s->models[i]->model_id, id) && (gone_too || !atomic_load(&s->models[i]->gone))) return s->models[i];
	return NULL;
}

srv_model *srv_models_find(http_server *s, const char *name) {
	char base[sizeof s->mdl->model_id];
	size_t n = strlen(name);
	if (n > 7 && !strcmp(name + n - 7, ":latest")) n -= 7; // Ollama's tag
	if (n >= sizeof base) return NULL;
	memcpy(base, name, n);
	base[n] = 0;
	srv_model *M = find_id(s, base, false);
	if (M || !srv_models_home(s)) return M;
	// the names `lanes ls` prints for what `lanes pull` wrote there (ORG/REPO:QUANT, ORG/REPO)
	pull_config pc = s->cfg.cache;
	pc.dir = srv_models_home(s);
	char rel[1024], err[256];
	if (pull_cache_find(&pc, name, rel, sizeof rel, err, sizeof err) || !has_suffix(rel, ".gguf")) return NULL;
	rel[strlen(rel) - 5] = 0;
	return find_id(s, rel, false);
}

// Under models_mu: M's file put back, or replaced under its name (changed), as st says it is now.
static void relist(http_server *s, srv_model *M, const struct stat *st, bool changed) {
	const int mst = atomic_load(&M->mstate);
	if (atomic_exchange(&M->gone, false)) M->keep_s = s->cfg.keep_alive_s;
	note_file(M, st);
	if (mst == SRV_M_READY || mst == SRV_M_LOADING || mst == SRV_M_UNLOADING) {
		M->stale |= changed; // its old weights serve the requests that hold it, then it unloads
	} else {
		if (mst == SRV_M_FAILED) atomic_store(&M->mstate, SRV_M_LISTED);
		if (!read_meta(s, M)) atomic_store(&M->mstate, SRV_M_FAILED);
	}
	if (changed) LOG_INFO(MOD, "%s changed in %s", M->model_id, M->dir);
}

// Every GGUF under dir/rel, named by its path there without .gguf; hidden entries and
// unfinished downloads are skipped, symlinks followed. seen: the models found, by index;
// *partial set when a folder or an entry could not be read (not one that went away).
static int scan(http_server *s, const char *dir, const char *rel, int depth, bool *seen, bool *partial) {
	char path[4096];
	snprintf(path, sizeof path, "%s%s%s", dir, *rel ? "/" : "", rel);
	DIR *d = opendir(path);
	if (!d && errno != ENOENT) *partial = true;
	if (!d) return depth ? 0 : LANES_EIO;
	struct dirent *e;
	int rc = 0;
	while (!rc && (e = readdir(d))) {
		if (e->d_name[0] == '.') continue;
		char sub[1024], full[4096];
		if (snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name) >= (int)sizeof sub) continue;
		snprintf(full, sizeof full, "%s/%s", dir, sub);
		struct stat st;
		if (stat(full, &st)) {
			*partial |= errno != ENOENT;
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			if (depth + 1 < SCAN_DEPTH) rc = scan(s, dir, sub, depth + 1, seen, partial);
			continue;
		}
		if (!S_ISREG(st.st_mode) || !has_suffix(sub, ".gguf")) continue;
		sub[strlen(sub) - 5] = 0;
		const bool fits = strlen(sub) < sizeof s->mdl->model_id;
		srv_model *M = fits ? find_id(s, sub, true) : NULL;
		if (!fits || M == s->mdl) {
			if (!s->reaper_started) LOG_WARN(MOD, "%s: not served (its name is too long, or the -m model's)", full); // said once, at start
			continue;
		}
		if (M && M->dir != dir) {
			// an alias's name, or the same name in a folder given before: this folder's file serves
			// it once that one is gone, unloaded and held by no one
			const int mst = atomic_load(&M->mstate);
			if (!M->dir || !atomic_load(&M->gone) || M->users || (mst != SRV_M_LISTED && mst != SRV_M_FAILED)) continue;
			char *p = strdup(full);
			if (!p) continue;
			free(M->model_path);
			M->model_path = p;
			M->dir = dir;
			M->file_ino = 0; // read anew below
		}
		const bool changed = M && (M->file_bytes != (uint64_t)st.st_size || M->file_ino != (uint64_t)st.st_ino || M->file_mtime_ns != mtime_ns(&st));
		if (M) {
			if (atomic_load(&M->gone) || changed) relist(s, M, &st, changed);
		} else if (!(M = listed(s, dir, full, sub))) {
			rc = LANES_ENOMEM;
			break;
		} else if (add(s, M)) {
			LOG_WARN(MOD, "%s: not served (more than %d models)", full, SRV_MODELS_MAX);
			srv_model_free(M);
			continue;
		}
		for (int i = 0; i < atomic_load(&s->n_models); i++)
			if (s->models[i] == M) seen[i] = true;
	}
	closedir(d);
	return rc;
}

void srv_models_refresh(http_server *s) {
	if (!s->cfg.n_models_dirs) return;
	const uint64_t now = base_now_us(), last = atomic_load(&s->scanned_us);
	if (now - last < RESCAN_US && last) return;
	uint64_t want = last;
	if (atomic_compare_exchange_strong(&s->scanned_us, &want, now)) srv_models_rescan(s); // one caller scans
}

// Under models_mu: every folder read again. seen: the models found, by index. A folder that
// cannot be read is *failed (the first) and *partial, and the others are read all the same.
static int scan_all(http_server *s, bool *seen, bool *partial, const char **failed) {
	int first = 0;
	for (int d = 0; d < s->cfg.n_models_dirs; d++) {
		const int rc = scan(s, s->cfg.models_dirs[d], "", 0, seen, partial);
		if (rc == LANES_EIO) *partial = true;
		if (rc && !first) {
			first = rc;
			*failed = s->cfg.models_dirs[d];
		}
		if (rc == LANES_ENOMEM) break;
	}
	return first;
}

void srv_models_rescan(http_server *s) {
	if (!s->cfg.n_models_dirs) return;
	atomic_store(&s->scanned_us, base_now_us());
	bool *seen = calloc(SRV_MODELS_MAX, sizeof *seen);
	if (!seen) return;
	pthread_mutex_lock(&s->models_mu);
	const int before = atomic_load(&s->n_models);
	bool partial = false;
	const char *failed = NULL;
	if (scan_all(s, seen, &partial, &failed) != LANES_ENOMEM) {
		// a file no longer there: listed no more, unloaded once no request holds it (a read
		// that failed for want of descriptors or rights says nothing of what is gone)
		for (int i = 1; i < atomic_load(&s->n_models) && !partial; i++)
			if (!seen[i] && s->models[i]->dir && !atomic_exchange(&s->models[i]->gone, true)) {
				s->models[i]->keep_s = 0;
				LOG_INFO(MOD, "%s left %s: no longer served", s->models[i]->model_id, s->models[i]->dir);
			}
		for (int i = before; i < atomic_load(&s->n_models); i++)
			LOG_INFO(MOD, "serving %s, new in %s", s->models[i]->model_id, s->models[i]->dir);
	}
	pthread_cond_broadcast(&s->models_cv);
	pthread_mutex_unlock(&s->models_mu);
	free(seen);
}

static int by_id(const void *a, const void *b) {
	return strcmp((*(srv_model *const *)a)->model_id, (*(srv_model *const *)b)->model_id);
}

// ---- unloading idle models --------------------------------------------------------------------

// Under models_mu: when M, loaded and idle, is due to unload (0: never).
static uint64_t due_us(const srv_model *M) {
	if (M->pinned || atomic_load(&M->mstate) != SRV_M_READY || M->users || (M->keep_s < 0 && !M->stale)) return 0;
	return M->stale ? M->used_us : M->used_us + (uint64_t)(M->keep_s * 1e6);
}

// Frees the models retired, and retires the ones idle past their keep-alive.
static void *reaper(void *arg) {
	http_server *s = arg;
	pthread_mutex_lock(&s->models_mu);
	while (!s->models_quit) {
		uint64_t next = 0, now = base_now_us();
		for (int i = 0; i < s->n_models; i++) {
			const uint64_t at = due_us(s->models[i]);
			if (!at) continue;
			if (at <= now) retire(s->models[i]);
			else if (!next || at < next) next = at;
		}
		bool freed = false;
		for (int i = 0; i < s->n_models; i++) {
			srv_model *M = s->models[i];
			if (atomic_load(&M->mstate) != SRV_M_UNLOADING) continue;
			pthread_mutex_unlock(&s->models_mu);
			free_loaded(M);
			pthread_mutex_lock(&s->models_mu);
			unloaded(M);
			LOG_INFO(MOD, "model %s unloaded", M->model_id);
			freed = true;
		}
		if (freed) continue; // the clock moved on, and a waiter may have loaded another
		if (!next) {
			pthread_cond_wait(&s->models_cv, &s->models_mu);
		} else {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			const uint64_t wait = next - now;
			ts.tv_sec += (time_t)(wait / 1000000);
			ts.tv_nsec += (long)(wait % 1000000) * 1000;
			if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
			pthread_cond_timedwait(&s->models_cv, &s->models_mu, &ts);
		}
	}
	pthread_mutex_unlock(&s->models_mu);
	return NULL;
}

// ---- lifecycle ----------------------------------------------------------------------------------

int srv_models_start(http_server *s, char *err, size_t errlen) {
	pthread_mutex_init(&s->models_mu, NULL);
	pthread_cond_init(&s->models_cv, NULL);
	s->models = calloc(srv_multi(s) ? SRV_MODELS_MAX : 1, sizeof *s->models);
	if (!s->models || add(s, s->mdl)) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	if (!srv_multi(s)) return 0;
	if (srv_has_primary(s)) read_meta(s, s->mdl); // its share of --memory (a file that does not read fails its load)
	int rc = base_pool_new(&s->pool, s->cfg.lanes.threads > 0 ? s->cfg.lanes.threads : base_cpu_count());
	if (rc) return base_seterr(err, errlen, rc, "cannot start the compute threads");
	base_pool_share(s->pool);
	s->mdl->lanes.pool = s->pool;
	// the names given first: a folder's file of the same name is not served by it
	for (int i = 0; i < s->cfg.n_aliases; i++) {
		const http_alias *a = &s->cfg.aliases[i];
		if (strlen(a->name) >= sizeof s->mdl->model_id || !strcmp(a->name, s->mdl->model_id) || find_id(s, a->name, true))
			return base_seterr(err, errlen, LANES_EINVAL, "%s %s=%s: the name is too long or taken", HTTP_SETTING(&s->cfg, aliases), a->name, a->path);
		srv_model *M = listed(s, NULL, a->path, a->name);
		if (!M || add(s, M)) {
			srv_model_free(M);
			return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
		}
		M->named = true;
	}
	bool *seen = calloc(SRV_MODELS_MAX, sizeof *seen);
	bool partial = false;
	const char *failed = NULL;
	rc = seen ? scan_all(s, seen, &partial, &failed) : LANES_ENOMEM;
	free(seen);
	if (rc == LANES_EIO) return base_seterr(err, errlen, rc, "%s %s: %s", HTTP_SETTING(&s->cfg, models_dirs), failed, strerror(errno));
	if (rc) return base_seterr(err, errlen, rc, "out of memory");
	qsort(s->models + 1, (size_t)(s->n_models - 1), sizeof *s->models, by_id);
	char where[512] = "";
	for (int d = 0, k = 0; d < s->cfg.n_models_dirs && k < (int)sizeof where; d++)
		k += snprintf(where + k, sizeof where - (size_t)k, "%s%s", d ? ", " : "", s->cfg.models_dirs[d]);
	LOG_INFO(MOD, "serving %d model%s%s%s%s%s, each loaded by its first request", s->n_models - 1, s->n_models == 2 ? "" : "s",
		 *where ? " of " : "", where, srv_has_primary(s) ? " beside " : "", srv_has_primary(s) ? s->mdl->model_id : "");
	if (pthread_create(&s->reaper, NULL, reaper, s)) return base_seterr(err, errlen, LANES_ENOMEM, "cannot start the models' reaper");
	s->reaper_started = true;
	return 0;
}

void srv_models_stop(http_server *s) {
	if (!s->models) return;
	pthread_mutex_lock(&s->models_mu);
	s->models_quit = true;
	wake_list(&s->room_waiting); // picked again, they hear the server is stopping
	pthread_cond_broadcast(&s->models_cv);
	pthread_mutex_unlock(&s->models_mu);
	if (s->reaper_started) pthread_join(s->reaper, NULL);
	s->reaper_started = false;
	// what the reaper left unloading is freed here; its waiters, picked again, hear the server stops
	for (int i = 1; i < s->n_models; i++) {
		srv_model *M = s->models[i];
		if (atomic_load(&M->mstate) != SRV_M_UNLOADING) continue;
		free_loaded(M);
		pthread_mutex_lock(&s->models_mu);
		unloaded(M);
		pthread_mutex_unlock(&s->models_mu);
	}
	// a load still running ends before its model is freed
	for (int i = 1; i < s->n_models; i++) {
		srv_model *M = s->models[i];
		if (M->loader_started) pthread_join(M->loader, NULL);
		M->loader_started = false;
	}
}

void srv_model_free(srv_model *M) {
	if (!M) return;
	const int st = atomic_load(&M->mstate);
	if (st == SRV_M_READY || st == SRV_M_UNLOADING) free_loaded(M);
	free(M->model_path);
	free(M->template_path);
	free(M);
}

void srv_models_free(http_server *s) {
	if (!s->models) return;
	for (int i = 1; i < s->n_models; i++) srv_model_free(s->models[i]);
	free(s->models);
	s->models = NULL;
	atomic_store(&s->n_models, 0);
	base_pool_free(s->pool);
	pthread_mutex_destroy(&s->models_mu);
	pthread_cond_destroy(&s->models_cv);
}

// ---- a request's model --------------------------------------------------------------------------

// Under models_mu: one holder of M fewer; a loaded model no one holds may make the room a
// parked request waits for.
static void let_go(http_server *s, srv_model *M) {
	M->users--;
	if (!M->users && atomic_load(&M->mstate) == SRV_M_READY && !M->pinned) wake_list(&s->room_waiting);
	pthread_cond_broadcast(&s->models_cv);
}

// The names served, quoted, for an error to list.
static void served_list(http_server *s, char *list, size_t n) {
	size_t k = 0;
	list[0] = 0;
	for (int i = 0; i < atomic_load(&s->n_models) && k < n; i++)
		if (!atomic_load(&s->models[i]->gone)) k += (size_t)snprintf(list + k, n - k, "%s'%s'", k ? ", " : "", s->models[i]->model_id);
	if (!k) snprintf(list, n, "no model yet (put GGUF files in %s, or pull one)", srv_models_home(s) ? srv_models_home(s) : "its folder");
}

// Under models_mu: the model in now with an adapter called name (":latest" allowed), or NULL.
static srv_model *adapter_owner(http_server *s, const char *name) {
	char base[MODEL_LORA_NAME_MAX + 1];
	size_t n = strlen(name);
	if (n > 7 && !strcmp(name + n - 7, ":latest")) n -= 7;
	if (!n || n >= sizeof base) return NULL;
	memcpy(base, name, n);
	base[n] = 0;
	for (int i = 0; i < s->n_models; i++) {
		struct model_loras *l = atomic_load(&s->models[i]->gone) ? NULL : srv_loras_of(s->models[i]);
		if (l && model_loras_has(l, base)) return s->models[i];
	}
	return NULL;
}

srv_model *srv_models_adapter(http_server *s, const char *name) {
	pthread_mutex_lock(&s->models_mu);
	srv_model *M = adapter_owner(s, name);
	if (M) M->users++;
	pthread_mutex_unlock(&s->models_mu);
	return M;
}

// Whether name is a file put in the folder since it was read (a name that is no file there
// costs a stat, never a scan).
static bool put_since(http_server *s, const char *name) {
	char path[4096], base[256];
	struct stat st;
	size_t n = strlen(name);
	if (n > 7 && !strcmp(name + n - 7, ":latest")) n -= 7; // Ollama's tag
	if (n >= sizeof s->mdl->model_id || n >= sizeof base) return false;
	memcpy(base, name, n);
	base[n] = 0;
	// only what a scan would serve: no hidden part, at most SCAN_DEPTH deep
	int depth = 0;
	for (const char *p = base; *p; p++) depth += *p == '/';
	if (!pull_safe_path(base, true) || base[0] == '.' || strstr(base, "/.") || depth >= SCAN_DEPTH) return false;
	// and a folder read at most ten times a second for it, whatever names the requests try
	const uint64_t now = base_now_us(), last = atomic_load(&s->put_scan_us);
	if (last && now - last < RESCAN_US / 10) return false;
	for (int d = 0; d < s->cfg.n_models_dirs; d++) {
		snprintf(path, sizeof path, "%s/%s.gguf", s->cfg.models_dirs[d], base);
		if (!stat(path, &st) && S_ISREG(st.st_mode)) {
			atomic_store(&s->put_scan_us, now);
			return true;
		}
	}
	return false;
}

// A request of a server without -m that names no model.
static void unnamed(srv_conn *c) {
	char list[512];
	srv_err e;
	served_list(c->s, list, sizeof list);
	if (c->rt->flags & SRV_R_BASE)
		srv_fail(&e, SRV_E_BAD_REQUEST, "base", "name the adapter's base model (\"base\"): this server has no default one and serves %s", list);
	else
		srv_fail(&e, SRV_E_BAD_REQUEST, "model", "name the model: this server has no default one and serves %s", list);
	srv_reply_error(c, &e);
}

// Ollama's keep_alive: seconds as a number, or a duration ("5m", "1h30m", "-1", "0"). false: none of these.
static bool keep_alive_of(json_t *v, double *out) {
	if (!json_is_number(v)) return base_parse_duration(json_string_value(v), out);
	*out = json_number_value(v);
	if (*out < 0 || *out > 3.2e9) *out = -1; // as base_parse_duration takes them
	return isfinite(json_number_value(v));
}

// Under models_mu: room for want beside the models loaded now — fewer than --max-models, and
// with --memory its need beside theirs — the least recently used idle ones unloaded until
// there is. 0; 1 when every one it would unload is busy (e says so); -1 with e, a 507, when
// it does not fit even alone beside the -m model (saying how much it needs and how much is left).
static int make_room(http_server *s, const srv_model *want, srv_err *e) {
	const uint64_t budget = s->cfg.memory_bytes, fixed = srv_has_primary(s) ? s->mdl->need_bytes : 0;
	if (budget && (fixed > budget || want->need_bytes > budget - fixed)) {
		char a[32], b[32], c[32];
		plan_format_size(want->need_bytes, a, sizeof a);
		plan_format_size(budget - (fixed < budget ? fixed : budget), b, sizeof b);
		plan_format_size(budget, c, sizeof c);
		if (!fixed)
			return srv_fail(e, SRV_E_NO_MEMORY, "model", "the model '%s' needs %s loaded, more than all of %s %s: give more, or fewer %s or %s",
					want->model_id, a, HTTP_SETTING(&s->cfg, memory_bytes), c, HTTP_SETTING(&s->cfg, lanes.lanes),
					HTTP_SETTING(&s->cfg, lanes.ctx));
		return srv_fail(e, SRV_E_NO_MEMORY, "model", "the model '%s' needs %s loaded and %s of %s %s is free beside the -m model: give more, or fewer %s or %s",
				want->model_id, a, b, HTTP_SETTING(&s->cfg, memory_bytes), c, HTTP_SETTING(&s->cfg, lanes.lanes),
				HTTP_SETTING(&s->cfg, lanes.ctx));
	}
	for (;;) {
		int in = 0;
		uint64_t used = fixed;
		srv_model *lru = NULL;
		for (int i = 1; i < s->n_models; i++) {
			srv_model *M = s->models[i];
			const int st = atomic_load(&M->mstate);
			if (M == want || (st != SRV_M_READY && st != SRV_M_LOADING && st != SRV_M_UNLOADING)) continue;
			in++; // one unloading still holds its memory: the load waits for the reaper to free it
			used += M->need_bytes;
			if (st == SRV_M_READY && !M->users && (!lru || M->used_us < lru->used_us)) lru = M;
		}
		if (in < s->cfg.max_models && (!budget || used + want->need_bytes <= budget)) return 0;
		if (!lru) {
			return 1;
		}
		retire(lru); // freed by the reaper while this one loads
	}
}

// A resumed request whose model's load ended: its route runs, or it fails as the load did.
static void model_resume(srv_conn *c) {
	srv_model *M = c->mdl;
	const int st = atomic_load(&M->mstate);
	// it waited for an unload, for room or (unheld) for a replaced file's old model to be let go,
	// or another request began a load since its wake: picked afresh, it loads or waits again
	if ((st != SRV_M_READY && st != SRV_M_FAILED) || c->room_wait || !c->holds_mdl) {
		c->room_wait = false;
		srv_models_release(c);
		if (!srv_models_pick(c)) srv_models_go(c);
		return;
	}
	if (st != SRV_M_READY) {
		srv_err e;
		pthread_mutex_lock(&c->s->models_mu);
		srv_fail(&e, SRV_E_INTERNAL, "model", "the model '%s' did not load from %s: %s", M->model_id, M->model_path, M->load_err);
		pthread_mutex_unlock(&c->s->models_mu);
		srv_reply_error(c, &e);
		return;
	}
	srv_models_go(c);
}

// Under models_mu, which it lets go: c parked on the list head until wake_list wakes it, then
// resumed (at once when the wake came before the park). true, as the pick returns.
static bool park_on(srv_conn *c, srv_conn **head) {
	c->next_wait = *head;
	c->wait_list = head;
	*head = c;
	c->resume = model_resume;
	pthread_mutex_unlock(&c->s->models_mu);
	if (!srv_park(c, SRV_WAIT_MODEL)) model_resume(c);
	return true;
}

// Without -m every request a model serves names one: the ones that do not are answered here,
// as the routes would run on no model.
bool srv_models_pick(srv_conn *c) {
	http_server *s = c->s;
	const bool primary = srv_has_primary(s);
	c->mdl = s->mdl;
	if (primary && !srv_multi(s)) return false;
	if (!c->body.len) {
		if (primary || !strcmp(c->method, "GET") || !strcmp(c->method, "HEAD")) return false; // /api/ps lists what is loaded
		unnamed(c);
		return true;
	}
	json_t *j;
	srv_err e;
	if (srv_parse_body(c, &j, &e)) {
		if (primary) return false; // the route says what is wrong with the body
		srv_reply_error(c, &e);
		return true;
	}
	const bool base = c->rt->flags & SRV_R_BASE;
	const char *name = json_string_value(json_object_get(j, base ? "base" : "model"));
	if (!name && c->family == SRV_OLLAMA) name = json_string_value(json_object_get(j, "name")); // its older spelling
	srv_model *M = name ? srv_models_find(s, name) : NULL;
	if (name && !M && put_since(s, name)) {
		srv_models_rescan(s);
		M = srv_models_find(s, name);
	}
	if (name && !M && !base) { // an adapter of a model loaded now: the request runs on that model
		pthread_mutex_lock(&s->models_mu);
		M = adapter_owner(s, name);
		pthread_mutex_unlock(&s->models_mu);
	}
	double keep;
	const bool has_keep = keep_alive_of(json_object_get(j, "keep_alive"), &keep);
	if (!M && (!primary || (base && name))) { // without -m a name is needed; a base named must be one
		if (name) {
			srv_models_named(s, name, &e);
			if (base) snprintf(e.param, sizeof e.param, "base");
			srv_reply_error(c, &e);
		} else {
			unnamed(c);
		}
		json_decref(j);
		return true;
	}
	json_decref(j);
	if (!M || M == s->mdl) return false; // the -m model, one of its adapters, or a name its route refuses
	pthread_mutex_lock(&s->models_mu);
	if (s->models_quit) {
		pthread_mutex_unlock(&s->models_mu);
		srv_fail(&e, SRV_E_UNAVAILABLE, NULL, "the server is stopping");
		srv_reply_error(c, &e);
		return true;
	}
	c->mdl = M;
	c->holds_mdl = true;
	M->users++;
	const bool describe = c->rt->flags & SRV_R_DESCRIBE;
	if (!describe) { // a look at a model is no use of it
		M->used_us = base_now_us();
		M->keep_s = has_keep ? keep : s->cfg.keep_alive_s; // as Ollama: a request without keep_alive gets the default
	}
	int st = atomic_load(&M->mstate);
	if (st == SRV_M_READY && M->stale && !describe) { // its file changed: never served from the old one again
		if (M->users == 1) {
			retire(M);
			st = SRV_M_UNLOADING;
		} else { // the requests on the old one end first: this one waits unheld, so they can
			M->users--;
			c->holds_mdl = false;
			return park_on(c, &M->waiting);
		}
	}
	if (st == SRV_M_READY || (c->rt->flags & SRV_R_DESCRIBE)) { // held as it is: a description reads its file
		pthread_mutex_unlock(&s->models_mu);
		return false;
	}
	// a file whose metadata does not read (read again, it may have been mended) is answered at
	// once, never at the cost of a model loaded now
	if (st == SRV_M_FAILED && !M->meta.arch[0] && !read_meta(s, M)) {
		pthread_mutex_unlock(&s->models_mu);
		model_resume(c);
		return true;
	}
	if (st != SRV_M_LOADING && st != SRV_M_UNLOADING) { // an unload ends by waking its waiters, who load it again
		const int room = make_room(s, M, &e);
		if (room < 0) {
			pthread_mutex_unlock(&s->models_mu);
			srv_reply_error(c, &e);
			return true;
		}
		if (room > 0) { // every loaded one is busy: it waits, as Ollama queues, until one is let go
			c->room_wait = true;
			return park_on(c, &s->room_waiting);
		}
		if (M->loader_started) pthread_join(M->loader, NULL); // the last load's thread has ended
		M->loader_started = false;
		atomic_store(&M->mstate, SRV_M_LOADING);
		LOG_INFO(MOD, "loading %s for a request", M->model_id);
		if (pthread_create(&M->loader, NULL, load_thread, M)) {
			snprintf(M->load_err, sizeof M->load_err, "cannot start its loader thread");
			atomic_store(&M->mstate, SRV_M_FAILED);
			pthread_mutex_unlock(&s->models_mu);
			model_resume(c);
			return true;
		}
		M->loader_started = true;
	}
	return park_on(c, &M->waiting);
}

void srv_models_release(srv_conn *c) {
	http_server *s = c->s;
	if (!srv_multi(s)) return;
	pthread_mutex_lock(&s->models_mu);
	srv_model *M = c->mdl;
	// a request that leaves while parked is no longer woken
	for (srv_conn **p = c->wait_list; p && *p; p = &(*p)->next_wait)
		if (*p == c) {
			*p = c->next_wait;
			break;
		}
	c->wait_list = NULL;
	c->next_wait = NULL;
	if (c->holds_mdl) {
		M->used_us = base_now_us(); // a request, not a list's look, keeps it loaded
		let_go(s, M);
		c->holds_mdl = false;
	}
	pthread_mutex_unlock(&s->models_mu);
}

// ---- what the lists say -------------------------------------------------------------------------

json_t *srv_model_status(srv_model *M) {
	http_server *s = M->s;
	pthread_mutex_lock(&s->models_mu);
	const int st = M->pinned ? SRV_M_READY : atomic_load(&M->mstate);
	json_t *o = json_pack("{s:s}", "value", srv_model_state_name[st]);
	if (o && st == SRV_M_FAILED) json_object_set_new(o, "error", json_string(M->load_err));
	// when it unloads once idle (a request running now puts that off)
	const uint64_t at = !M->pinned && st == SRV_M_READY && M->keep_s >= 0 ? M->used_us + (uint64_t)(M->keep_s * 1e6) : 0;
	if (o && at) json_object_set_new(o, "unloads_in_s", json_real((double)(at > base_now_us() ? at - base_now_us() : 0) / 1e6));
	pthread_mutex_unlock(&s->models_mu);
	return o;
}

int srv_models_each(http_server *s, bool loaded_only, srv_model **out, int max) {
	int n = 0;
	pthread_mutex_lock(&s->models_mu);
	for (int i = 0; i < s->n_models && n < max; i++) {
		srv_model *M = s->models[i];
		if ((loaded_only && !M->pinned && atomic_load(&M->mstate) != SRV_M_READY) || (!loaded_only && atomic_load(&M->gone))) continue;
		M->users++;
		out[n++] = M;
	}
	pthread_mutex_unlock(&s->models_mu);
	return n;
}

int srv_models_reserve_adapter(srv_model *M, const char *name, const char *path, float scale, bool replace, uint64_t *ticket,
			       const char **owner, char *err, size_t errlen) {
	http_server *s = M->s;
	*owner = NULL;
	pthread_mutex_lock(&s->models_mu);
	for (int i = 0; i < s->n_models && !*owner; i++) {
		struct model_loras *l = s->models[i] == M ? NULL : srv_loras_of(s->models[i]);
		if (l && model_loras_named(l, name)) *owner = s->models[i]->model_id;
	}
	int rc = *owner ? LANES_EINVAL : model_loras_reserve(M->loras, name, path, scale, replace, ticket, err, errlen);
	pthread_mutex_unlock(&s->models_mu);
	return rc;
}

void srv_models_facts(srv_model *M, srv_model_facts *out) {
	http_server *s = M->s;
	struct stat st;
	pthread_mutex_lock(&s->models_mu);
	out->in = M == s->mdl ? srv_primary_host(s) != NULL : atomic_load(&M->mstate) == SRV_M_READY;
	out->max_ctx = out->in ? M->max_ctx : 0;
	const char *arch = M == s->mdl && out->in ? model_hparams_of(M->m)->arch : M->meta.arch;
	snprintf(out->family, sizeof out->family, "%s", arch);
	out->size = M->model_path && !stat(M->model_path, &st) ? (int64_t)st.st_size : -1;
	pthread_mutex_unlock(&s->models_mu);
}

srv_model *srv_models_hold(http_server *s, const char *name) {
	srv_model *M = srv_models_find(s, name);
	pthread_mutex_lock(&s->models_mu);
	if (M && (M->pinned || atomic_load(&M->mstate) == SRV_M_READY)) M->users++;
	else M = NULL;
	pthread_mutex_unlock(&s->models_mu);
	return M;
}

void srv_models_put(http_server *s, srv_model **v, int n) {
	pthread_mutex_lock(&s->models_mu);
	for (int i = 0; i < n; i++) let_go(s, v[i]);
	pthread_mutex_unlock(&s->models_mu);
}

int srv_models_named(http_server *s, const char *id, srv_err *e) {
	char list[512];
	served_list(s, list, sizeof list);
	srv_fail(e, SRV_E_NOT_FOUND, "model", "the model '%s' does not exist: this server serves %s", id, list);
	snprintf(e->code, sizeof e->code, "model_not_found");
	return -1;
}

// ---- drain, halt and the count of open requests reach every loaded model --------------------

void srv_models_drain(http_server *s, const char *halt) {
	if (!s->models) return;
	pthread_mutex_lock(&s->models_mu);
	for (int i = 1; i < s->n_models; i++) {
		srv_model *M = s->models[i];
		if (atomic_load(&M->mstate) != SRV_M_READY) continue;
		if (halt) lane_host_halt(M->host, halt);
		else lane_host_drain(M->host);
	}
	pthread_mutex_unlock(&s->models_mu);
}

int srv_models_open(http_server *s) {
	int n = 0;
	if (!s->models) return 0;
	pthread_mutex_lock(&s->models_mu);
	for (int i = 1; i < s->n_models; i++)
		if (atomic_load(&s->models[i]->mstate) == SRV_M_READY) n += lane_host_open(s->models[i]->host);
	pthread_mutex_unlock(&s->models_mu);
	return n;
}
