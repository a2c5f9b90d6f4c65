// server/ops/slots: llama-server's slot actions — POST /slots/{id}?action=save|restore|erase. A
// lane's cached prompt pages are written to a file of --cache-dir, read back into the prefix
// cache, or dropped. The route runs on the utilities' work thread: the file is read and written
// there, and the KV is touched by the engine at a round boundary (lane_slot_run), never here.
#include "server/net/base.h"
#include "server/routes.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
	const char *filename;
} slot_req;

static const srv_field slot_fields[] = {
	SRV_ROW(slot_req, filename, SRV_K_STR),
	{0},
};

// The slot id of the path (/slots/ID, decimal digits alone), or -1.
static int32_t slot_id(const char *path) {
	const char *p = path + strlen("/slots/");
	int64_t v = 0;
	if (!*p) return -1;
	for (; *p; p++) {
		if (*p < '0' || *p > '9' || v > INT32_MAX / 10) return -1;
		v = v * 10 + (*p - '0');
	}
	return v <= INT32_MAX ? (int32_t)v : -1;
}

// The body's filename, a plain name of the folder: no path, no hidden or temporary file.
static int slot_filename(srv_conn *c, const char **out, srv_err *e) {
	json_t *j = NULL;
	slot_req r = {0};
	int rc = srv_parse_body(c, &j, e) || srv_fields_known(j, slot_fields, NULL, e) || srv_fields_read(j, slot_fields, &r, NULL, NULL, c, e);
	json_decref(j); // the string lives on in the connection's parsed body
	if (rc) return -1;
	if (!r.filename) return srv_fail(e, SRV_E_BAD_REQUEST, "filename", "filename is required: the slot file's name in --cache-dir");
	if (!base_name_ok(r.filename))
		return srv_fail(e, SRV_E_BAD_REQUEST, "filename",
				"filename must be a plain file name: 1 to %d of A-Z a-z 0-9 . _ -, not starting with '.'", BASE_NAME_MAX);
	*out = r.filename;
	return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n) {
	while (n) {
		const ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR) continue;
		if (w <= 0) return -1;
		p += w, n -= (size_t)w;
	}
	return 0;
}

// The file name of folder dfd whole into *out (malloc'd), at most max bytes. 0, or a code with e.
static int read_file(int dfd, const char *name, uint64_t max, uint8_t **out, size_t *len, bool *bad, srv_err *e) {
	char err[256];
	int fd;
	*out = NULL, *len = 0, *bad = false;
	int rc = base_file_open_in(dfd, name, &fd, err, sizeof err);
	if (rc == LANES_ENOTFOUND) return srv_fail(e, SRV_E_NOT_FOUND, "filename", "no slot file '%s' in --cache-dir", name);
	if (rc) return srv_fail(e, srv_kind_of(rc, SRV_BLAME_REQUEST), "filename", "%s", err);
	struct stat st;
	if (fstat(fd, &st)) {
		close(fd);
		return srv_fail(e, SRV_E_INTERNAL, NULL, "%s: %s", name, strerror(errno));
	}
	if ((uint64_t)st.st_size > max) {
		close(fd);
		*bad = true;
		return srv_fail(e, SRV_E_BAD_REQUEST, "filename", "'%s' is larger than any slot file of this cache", name);
	}
	uint8_t *b = malloc(st.st_size ? (size_t)st.st_size : 1);
	size_t got = 0;
	while (b && got < (size_t)st.st_size) {
		const ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR) continue;
		if (r <= 0) break;
		got += (size_t)r;
	}
	close(fd);
	if (!b) return srv_fail(e, SRV_E_INTERNAL, NULL, "out of memory");
	*out = b, *len = got;
	return 0;
}

void srv_slot_action(srv_conn *c) {
	http_server *s = c->s;
	srv_err e;
	char err[512];
	const char *action = srv_query(c, "action"), *name = NULL;
	const int32_t id = slot_id(c->path);
	lane_host *h = srv_primary_host(s);
	lane_slot_job job = {.lane = id};
	int dfd = -1;
	uint8_t *file = NULL;
	const uint64_t t0 = base_now_us();
	if (!action || (strcmp(action, "save") && strcmp(action, "restore") && strcmp(action, "erase"))) {
		srv_fail(&e, SRV_E_BAD_REQUEST, "action", "action must be save, restore or erase (POST /slots/{id}?action=...)");
		goto fail;
	}
	job.action = !strcmp(action, "save") ? LANE_SLOT_SAVE : !strcmp(action, "restore") ? LANE_SLOT_RESTORE : LANE_SLOT_ERASE;
	if (!s->cfg.lanes.cache_dir) {
		srv_fail(&e, SRV_E_UNSUPPORTED, NULL, "this server was started without --cache-dir: slot files are kept there (llama-server's --slot-save-path)");
		goto fail;
	}
	if (!h) {
		srv_fail(&e, srv_has_primary(s) ? SRV_E_UNAVAILABLE : SRV_E_NOT_FOUND, NULL,
			 srv_has_primary(s) ? "the model is not loaded yet" : "this server has no -m model: it has no slots of its own");
		goto fail;
	}
	if (!lane_slot_max_bytes(h)) {
		srv_fail(&e, SRV_E_UNSUPPORTED, NULL, "this server's prefix cache is off: slot files hold its pages");
		goto fail;
	}
	if (id < 0 || id >= s->mdl->lanes.lanes) {
		srv_fail(&e, SRV_E_NOT_FOUND, NULL, "no slot '%s': slots are 0..%d (GET /slots lists them)", c->path + strlen("/slots/"),
			 s->mdl->lanes.lanes - 1);
		goto fail;
	}
	if (job.action != LANE_SLOT_ERASE) {
		if (slot_filename(c, &name, &e)) goto fail;
		if (base_dir_open(s->cfg.lanes.cache_dir, false, &dfd, err, sizeof err)) {
			srv_fail(&e, SRV_E_INTERNAL, NULL, "%s", err);
			goto fail;
		}
	}
	if (job.action == LANE_SLOT_RESTORE) {
		bool bad;
		if (read_file(dfd, name, lane_slot_max_bytes(h), &file, &job.n_bytes, &bad, &e)) {
			if (bad) unlinkat(dfd, name, 0);
			goto fail;
		}
		job.bytes = file;
	}
	int rc = lane_slot_run(h, &job, err, sizeof err);
	if (rc == LANES_EINVAL && job.action == LANE_SLOT_RESTORE) {
		// damaged, truncated or another cache's: never trusted, and not offered again
		unlinkat(dfd, name, 0);
		LOG_WARN(SRV_MOD, "slot file %s refused (%s) and deleted", name, err);
		srv_fail(&e, SRV_E_BAD_REQUEST, "filename", "slot file '%s' refused and deleted: %s", name, err);
		goto fail;
	}
	if (rc) {
		srv_fail(&e, rc == LANES_EUNSUPPORTED ? SRV_E_UNSUPPORTED : srv_kind_of(rc, SRV_BLAME_STATE), NULL, "%s", err);
		goto fail;
	}
	json_t *body = NULL;
	struct stat st;
	if (job.action == LANE_SLOT_SAVE && !fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) && S_ISDIR(st.st_mode)) {
		free(job.bytes);
		srv_fail(&e, SRV_E_CONFLICT, "filename", "'%s' is a folder of --cache-dir (the page cache's own): name another file", name);
		goto fail;
	}
	if (job.action == LANE_SLOT_SAVE) {
		base_wfile w;
		rc = base_wfile_begin(&w, dfd, name, err, sizeof err);
		if (!rc && write_all(w.fd, job.bytes, job.n_bytes)) {
			rc = base_seterr(err, sizeof err, LANES_EIO, "%s: %s", name, strerror(errno));
			base_wfile_abort(&w);
		} else if (!rc) {
			rc = base_wfile_commit(&w, err, sizeof err);
		}
		free(job.bytes);
		if (rc) {
			srv_fail(&e, SRV_E_INTERNAL, NULL, "cannot write the slot file: %s", err);
			goto fail;
		}
		body = json_pack("{s:i, s:s, s:i, s:I, s:{s:f}}", "id_slot", id, "filename", name, "n_saved", job.n_tokens, "n_written",
				 (json_int_t)job.n_bytes, "timings", "save_ms", (double)(base_now_us() - t0) / 1e3);
	} else if (job.action == LANE_SLOT_RESTORE) {
		body = json_pack("{s:i, s:s, s:i, s:I, s:{s:f}}", "id_slot", id, "filename", name, "n_restored", job.n_tokens, "n_read",
				 (json_int_t)job.n_bytes, "timings", "restore_ms", (double)(base_now_us() - t0) / 1e3);
	} else {
		body = json_pack("{s:i, s:i}", "id_slot", id, "n_erased", job.n_tokens);
	}
	LOG_INFO(SRV_MOD, "slot %d %s%s%s: %d tokens", id, action, name ? " " : "", name ? name : "", job.n_tokens);
	free(file);
	if (dfd >= 0) close(dfd);
	srv_reply_json(c, 200, body, 0);
	return;
fail:
	free(file);
	if (dfd >= 0) close(dfd);
	srv_reply_error(c, &e);
}
