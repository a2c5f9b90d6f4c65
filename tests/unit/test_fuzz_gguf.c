// tests: replays the GGUF fuzz corpus (tests/corpus/gguf) and seeds made from the shared
// models — whole small files and the metadata heads of every file.
#include "../fuzz/fuzz_gguf.c"
#include "gguf/gguf.h"
#include "replay.h"
#include "t.h"

int main(void) {
	int n = replay_dir("tests/corpus/gguf");
	CHECKF(n >= 10, "corpus replayed (%d files)", n);
	const char *dirs[] = {"models", "vocab"};
	int seeds = 0;
	for (int k = 0; k < 2; k++) {
		char path[1024];
		snprintf(path, sizeof path, "%s/%s", t_shared(), dirs[k]);
		DIR *d = opendir(path);
		CHECK(d != NULL);
		if (!d) continue;
		struct dirent *e;
		while ((e = readdir(d))) {
			size_t L = strlen(e->d_name);
			if (L < 6 || strcmp(e->d_name + L - 5, ".gguf")) continue;
			char file[2048];
			snprintf(file, sizeof file, "%s/%s", path, e->d_name);
			size_t len = 0;
			uint8_t *b = (uint8_t *)t_read_file(file, &len);
			CHECK(b != NULL);
			if (!b) continue;
			// whole file, then heads cut inside the metadata and inside the tensor infos
			LLVMFuzzerTestOneInput(b, len);
			for (size_t cut = 7; cut < len && cut < (1u << 20); cut = cut * 3 + 1) LLVMFuzzerTestOneInput(b, cut);
			free(b);
			seeds++;
		}
		closedir(d);
	}
	CHECKF(seeds >= 30, "seeds from shared files (%d)", seeds);
	T_DONE("fuzz_gguf");
}
