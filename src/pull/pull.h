// pull: the model cache — a reference (hf:ORG/REPO/FILE.gguf, ORG/REPO[:QUANT], an http(s) URL)
// downloaded from a hub with libcurl into a folder (resumed into a .part file, size and the
// hub's SHA-256 checked, validated as GGUF before it takes its name), and the names of what
// the folder holds. What a hub sends is bounded: redirects, stalls, sizes, names; a failed try
// is retried after a wait that doubles up to a cap. `lanes pull` and the server's Ollama
// /api/pull, /api/copy and /api/delete use it.
#ifndef LANES_PULL_H
#define LANES_PULL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
	const char *dir;      // the cache folder (NULL or "": ~/.cache/lanes/models)
	const char *endpoint; // the hub (NULL or "": https://huggingface.co)
	const char *token;    // sent to the hub alone (NULL: none)
	int64_t stall_s;      // a transfer that receives nothing this long fails (seconds)
	int64_t max_bytes;    // the largest file a pull writes
	int tries;            // a request the network or the hub's 429/502/503/504 failed is tried this often (0: 6)
	int64_t retry_ms;     // the wait before the second try, doubled before each next (0: 1000 ms)
	int64_t retry_max_ms; // the cap on that wait, and on a Retry-After the hub sends (0: 16000 ms)
	bool urls;            // http(s) URLs are references too (else only the hub's names are)
} pull_config;

// What a pull reports as it goes.
enum pull_stage {
	PULL_RESOLVE,  // the reference is being resolved (a listing may be read)
	PULL_DOWNLOAD, // bytes arrive: done of total (-1: unknown yet)
	PULL_VERIFY,   // the file is whole: its checksum and GGUF structure are checked
	PULL_COMMIT,   // it takes its name in the cache
	PULL_RETRY,    // a try failed: heard again and again during the wait before the next (wait_ms left)
};
typedef struct {
	enum pull_stage stage;
	const char *rel;      // the file under the cache folder ("" until resolved)
	const char *sha;      // the hub's SHA-256 in hex ("": not known, or none published)
	int64_t done, total;  // bytes
	int attempt;          // PULL_RETRY: the try that failed (1, 2, ...)
	int64_t wait_ms;      // PULL_RETRY: milliseconds until the next try
} pull_progress;
// Hears a pull's progress on the pulling thread; nonzero cancels the pull (LANES_ECANCELLED).
typedef int (*pull_progress_fn)(void *ud, const pull_progress *p);

// The cache folder c names, into out.
void pull_cache_dir(const pull_config *c, char *out, size_t n);
// Downloads ref unless the cache holds it; its path into path (n bytes) and, when rel is not
// NULL, its name under the cache folder into rel (reln bytes). fn (may be NULL) hears the
// progress. 0, or LANES_EINVAL (not a reference), LANES_ENOTFOUND (the hub has no such file),
// LANES_EIO (the hub or the network failed, or the file cannot be written), LANES_EFORMAT (what
// arrived is not the file), LANES_EBUSY (another pull writes it now), LANES_ECANCELLED, with err.
int pull_model(const pull_config *c, const char *ref, pull_progress_fn fn, void *ud, char *path, size_t n, char *rel,
	       size_t reln, char *err, size_t errlen);
// Whether ref has the form of a reference c takes, asking nothing of the hub. 0 or LANES_EINVAL, with err.
int pull_ref_check(const pull_config *c, const char *ref, char *err, size_t errlen);
// Whether m names something to pull rather than a file (a file of that name wins): hf:...,
// hf.co/..., a URL, ORG/REPO:QUANT, or ORG/REPO (one slash, no .gguf ending).
bool pull_is_ref(const char *m);
// The quantization ORG/REPO without :QUANT takes: the first of these the repository has.
extern const char *const pull_default_quants[];
// Whether p is a name under the cache: words of [A-Za-z0-9._+-] (separated by '/' when
// slashes), never "." or "..", short enough to be a file name.
bool pull_safe_path(const char *p, bool slashes);
// The cached file name means, its name under the cache folder into rel (n bytes): a name as
// `lanes ls` prints it (".gguf" may be left out), NAME (or NAME:latest) for NAME.gguf, a hub
// reference ORG/REPO:QUANT (also hf:ORG/REPO:QUANT, hf.co/ORG/REPO:QUANT) for the file of
// ORG/REPO a pull of it wrote, ORG/REPO for the file the default quantization picks among
// those cached, or hf:ORG/REPO/FILE.gguf. 0, LANES_EINVAL (not a name), LANES_ENOTFOUND, or
// LANES_EBUSY (only a partial download of it is there), with err.
int pull_cache_find(const pull_config *c, const char *name, char *rel, size_t n, char *err, size_t errlen);
// A name a copy may give, NAME or NAME:latest, into rel as NAME.gguf. 0 or LANES_EINVAL, with err.
int pull_cache_new_name(const char *name, char *rel, size_t n, char *err, size_t errlen);
// Copies the cached file src to dst (names under the cache): a hard link where the folder
// allows one, else the bytes; dst is replaced whole. 0, or LANES_EIO with err.
int pull_cache_copy(const pull_config *c, const char *src, const char *dst, char *err, size_t errlen);
// Removes the cached file rel and a partial download of it (either may be all there is).
// 0, or LANES_ENOTFOUND / LANES_EIO with err.
int pull_cache_remove(const pull_config *c, const char *rel, char *err, size_t errlen);

#endif
