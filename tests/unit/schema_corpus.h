// tests: the schema corpus (tests/corpus/schema/*.json, each {"schema", "valid", "invalid"})
// walked file by file, for the tests that make seeds of it.
#ifndef LANES_SCHEMA_CORPUS_H
#define LANES_SCHEMA_CORPUS_H

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

// Calls each(file, path, arg) for every corpus file that parses (file NULL for one that does
// not); returns how many files there were, -1 when the folder cannot be read.
static inline int schema_corpus_each(void (*each)(json_t *file, const char *path, void *arg), void *arg) {
	DIR *d = opendir("tests/corpus/schema");
	if (!d) return -1;
	int n = 0;
	for (struct dirent *e; (e = readdir(d));) {
		size_t L = strlen(e->d_name);
		if (L < 6 || strcmp(e->d_name + L - 5, ".json")) continue;
		char path[1024];
		snprintf(path, sizeof path, "tests/corpus/schema/%s", e->d_name);
		json_t *f = json_load_file(path, 0, NULL);
		each(f, path, arg);
		json_decref(f);
		n++;
	}
	closedir(d);
	return n;
}

#endif
