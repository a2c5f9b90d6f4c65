// fuzz: the chat template interpreter on arbitrary source — compile, then render against a
// small fixed chat context under tight limits; it must answer with text or an error, never crash.
#include "template/template.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char fuzz_template_ctx[] =
	"{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
	" {\"role\": \"user\", \"content\": \"Hi \\u00e9 {{ x }}\"},"
	" {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call12345\", \"type\": \"function\","
	"   \"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, true, null]}}}]},"
	" {\"role\": \"tool\", \"tool_call_id\": \"call12345\", \"content\": \"42\"},"
	" {\"role\": \"user\", \"content\": \"  padded  \"}],"
	" \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
	"   \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\"}}, \"required\": [\"a\"]}}}],"
	" \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"add_generation_prompt\": true}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	static json_t *ctx;
	if (!ctx) ctx = json_loads(fuzz_template_ctx, 0, NULL);
	if (!ctx) abort();
	tmpl *t = NULL;
	char err[256];
	err[0] = 0;
	if (tmpl_compile(&t, (const char *)data, size, err, sizeof err) != 0) {
		if (t || !err[0]) abort(); // a failed compile leaves nothing and says why
		return 0;
	}
	tmpl_limits lim;
	tmpl_default_limits(&lim);
	lim.max_steps = 300000;
	lim.max_output = 1 << 20;
	lim.max_memory = 32 << 20;
	tmpl_set_limits(t, &lim);
	char *out = NULL;
	size_t n = 0;
	err[0] = 0;
	int rc = tmpl_render(t, ctx, "2026-12-02", &out, &n, err, sizeof err);
	if (rc == 0) {
		if (!out || out[n] != 0 || n > (size_t)lim.max_output) abort();
		free(out);
	} else if (out || rc > 0) {
		abort();
	}
	tmpl_free(t);
	return 0;
}
