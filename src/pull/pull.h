// pull: the model cache — a reference (hf:ORG/REPO/FILE.gguf, ORG/REPO:QUANT, an http(s) URL)
// downloaded from a hub with libcurl into a folder (resumed into a .part file, size and the
// hub's SHA-256 checked, validated as GGUF before it takes its name), and the names of what
// the folder holds. What a hub sends is bounded: redirects, stalls, sizes, names. `lanes pull`
// and the server's Ollama /api/pull, /api/copy and /api/delete use it.
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
	bool urls;            // http(s) URLs are references too (else only the hub's names are)
} pull_config;

// What a pull reports as it goes.
enum pull_stage {
	PULL_RESOLVE,  // the reference is being resolved (a listing may be read)
	PULL_DOWNLOAD, // bytes arrive: done of total (-1: unknown yet)
	PULL_VERIFY,   // the file is whole: its checksum and GGUF structure are checked
	PULL_COMMIT,   // it takes its name in the cache
};
typedef struct {
	enum pull_stage stage;
	const char *rel;      // the file under the cache folder ("" until resolved)
	const char *sha;      // the hub's SHA-256 in hex ("": not known, or none published)
	int64_t done, total;  // bytes
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
// Whether m names something to pull rather than a file (a file of that name wins).
bool pull_is_ref(const char *m);
// Whether p is a name under the cache: words of [A-Za-z0-9._+-] (separated by '/' when
// slashes), never "." or "..", short enough to be a file name.
bool pull_safe_path(const char *p, bool slashes);
// The cached file name means, its name under the cache folder into rel (n bytes): a name as
// `lanes ls` prints it (".gguf" may be left out), NAME (or NAME:latest) for NAME.gguf, or a
// hub reference ORG/REPO:QUANT (also hf:ORG/REPO:QUANT, hf.co/ORG/REPO:QUANT) for the file
// of ORG/REPO a pull of it wrote. 0, LANES_EINVAL (not a name), LANES_ENOTFOUND, with err.
int pull_cache_find(const pull_config *c, const char *name, char *rel, size_t n, char *err, size_t errlen);
// A name a copy may give, NAME or NAME:latest, into rel as NAME.gguf. 0 or LANES_EINVAL, with err.
int pull_cache_new_name(const char *name, char *rel, size_t n, char *err, size_t errlen);
// Copies the cached file src to dst (names under the cache): a hard link where the folder
// allows one, else the bytes; dst is replaced whole. 0, or LANES_EIO with err.
int pull_cache_copy(const pull_config *c, const char *src, const char *dst, char *err, size_t errlen);
// Removes the cached file rel and a partial download of it. 0, or LANES_ENOTFOUND / LANES_EIO with err.
int pull_cache_remove(const pull_config *c, const char *rel, char *err, size_t errlen);

#endif
