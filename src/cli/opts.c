// cli: option parsing shared by every subcommand.
#include "cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool name_matches(const char *names, const char *arg, size_t arglen) {
	const char *p = names;
	while (*p) {
		const char *bar = strchr(p, '|');
		size_t n = bar ? (size_t)(bar - p) : strlen(p);
		if (n == arglen && !strncmp(p, arg, n)) return true;
		if (!bar) break;
		p = bar + 1;
	}
	return false;
}

static int set_value(const cli_opt *o, const char *flag, const char *val) {
	char *end;
	errno = 0;
	switch (o->kind) {
	case CLI_STR: *(const char **)o->dst = val; return 0;
	case CLI_INT: {
		long long v = strtoll(val, &end, 10);
		if (errno || end == val || *end) {
			fprintf(stderr, "lanes: %s wants an integer, got '%s'\n", flag, val);
			return -1;
		}
		*(int64_t *)o->dst = v;
		return 0;
	}
	case CLI_FLOAT: {
		double v = strtod(val, &end);
		if (errno || end == val || *end) {
			fprintf(stderr, "lanes: %s wants a number, got '%s'\n", flag, val);
			return -1;
		}
		*(double *)o->dst = v;
		return 0;
	}
	case CLI_FLAG: *(bool *)o->dst = true; return 0;
	}
	return -1;
}

int cli_parse(int argc, char **argv, const cli_opt *opts, int nopts, const char **pos, int maxpos,
	      int *npos) {
	int np = 0;
	bool only_pos = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (only_pos || a[0] != '-' || a[1] == 0) {
			if (np >= maxpos) {
				fprintf(stderr, "lanes %s: unexpected argument '%s'\n", argv[0], a);
				return -1;
			}
			pos[np++] = a;
			continue;
		}
		if (!strcmp(a, "--")) { only_pos = true; continue; }
		const char *eq = strchr(a, '=');
		size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
		const cli_opt *o = NULL;
		for (int k = 0; k < nopts && !o; k++)
			if (name_matches(opts[k].names, a, nlen)) o = &opts[k];
		if (!o) {
			fprintf(stderr, "lanes %s: unknown option '%.*s'\n", argv[0], (int)nlen, a);
			return -1;
		}
		if (o->kind == CLI_FLAG) {
			if (eq) {
				fprintf(stderr, "lanes %s: %.*s takes no value\n", argv[0], (int)nlen, a);
				return -1;
			}
			*(bool *)o->dst = true;
			continue;
		}
		const char *val = eq ? eq + 1 : NULL;
		if (!val) {
			if (i + 1 >= argc) {
				fprintf(stderr, "lanes %s: %s needs a value\n", argv[0], a);
				return -1;
			}
			val = argv[++i];
		}
		if (set_value(o, a, val)) return -1;
	}
	*npos = np;
	return 0;
}

void cli_usage(const char *synopsis, const cli_opt *opts, int nopts) {
	fprintf(stderr, "usage: %s\n", synopsis);
	for (int i = 0; i < nopts; i++) fprintf(stderr, "  %-24s %s\n", opts[i].names, opts[i].help);
}
