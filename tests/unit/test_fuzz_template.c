// tests: replays the template fuzz corpus (tests/corpus/template) and the real chat templates
// in ../shared through the fuzz target; every input must return, each within bounded time.
#include "../fuzz/fuzz_template.c"
#include "base/base.h"
#include "t.h"

#include <dirent.h>

// Runs every regular file in dir through the target; returns how many ran.
static int replay(const char *dir, const char *suffix, uint64_t *worst_us) {
	DIR *d = opendir(dir);
	CHECKF(d != NULL, "cannot open %s", dir);
	if (!d) return 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t L = strlen(e->d_name);
		if (e->d_name[0] == '.' || (suffix && (L < strlen(suffix) || strcmp(e->d_name + L - strlen(suffix), suffix))))
			continue;
		char path[2048];
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		size_t len = 0;
		char *b = t_read_file(path, &len);
		if (!b) continue;
		uint64_t t0 = base_now_us();
		LLVMFuzzerTestOneInput((const uint8_t *)b, len);
		uint64_t dt = base_now_us() - t0;
		if (dt > *worst_us) *worst_us = dt;
		// a sanitizer build is slow; an unbounded loop or recursion would take far longer
		CHECKF(dt < 10u * 1000 * 1000, "%s took %llu ms", path, (unsigned long long)(dt / 1000));
		free(b);
		n++;
	}
	closedir(d);
	return n;
}

int main(void) {
	uint64_t worst = 0;
	int n = replay("tests/corpus/template", NULL, &worst);
	CHECKF(n >= 30, "corpus replayed (%d files)", n);
	char dir[1024];
	snprintf(dir, sizeof dir, "%s/chat-templates", t_shared());
	int m = replay(dir, ".jinja", &worst);
	CHECKF(m >= 10, "shared templates replayed (%d files)", m);
	fprintf(stderr, "fuzz_template: %d corpus + %d shared inputs, slowest %llu us\n", n, m, (unsigned long long)worst);
	T_DONE("fuzz_template");
}
