// tests: training examples from a JSONL file (stories.h); lines that fail to parse are skipped.
#include "stories.h"

#include <jansson.h>
#include <stdio.h>

int t_read_stories(const tok_vocab *v, const char *path, int n, int cut, learn_example **ex) {
	FILE *f = fopen(path, "r");
	char line[4096], err[256];
	int k = 0;
	if (cut > 512) cut = 512;
	while (f && k < n && fgets(line, sizeof line, f)) {
		json_t *o = json_loads(line, 0, NULL);
		learn_example *e = NULL;
		if (o && !learn_example_text(&e, v, json_string_value(json_object_get(o, "prompt")),
					     json_string_value(json_object_get(o, "completion")), 0, err, sizeof err)) {
			const int64_t len = learn_example_tokens(e) < cut ? learn_example_tokens(e) : cut;
			bool fl[512];
			for (int64_t i = 0; i < len; i++) fl[i] = learn_example_is_learned(e, i);
			if (learn_example_ids(&ex[k], learn_example_ids_of(e), fl, len, err, sizeof err) == 0) k++;
		}
		learn_example_free(e);
		json_decref(o);
	}
	if (f) fclose(f);
	return k;
}
