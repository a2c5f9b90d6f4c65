// cli: `lanes mtp-merge -m MODEL --draft-head HEAD.gguf -o OUT.gguf` — one file: the model's
// metadata and tensors with the head's MTP layers after its trunk (in place of any it had),
// block_count and nextn_predict_layers saying so, in the names models that ship a head use.
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

// Whether name is a tensor of block l or later ("blk.N." with N >= l).
static bool block_at_or_after(const char *name, int32_t l) {
	int n = -1, used = 0;
	return sscanf(name, "blk.%d.%n", &n, &used) == 1 && used > 0 && n >= l;
}

int cmd_mtp_merge(const cli_settings *s) {
	char err[512], key[96];
	int rc = 1;
	model_hparams hpv;
	const model_hparams *hp = &hpv;
	gguf *g = NULL, *hg = NULL;
	gguf_writer *w = NULL;
	// the head is checked against the model as serving would bind it, no weight read
	if (gguf_open(&g, s->model, err, sizeof err) || gguf_open(&hg, s->draft_head, err, sizeof err) ||
	    model_meta_head(g, hg, &hpv, NULL, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	if (!(w = gguf_writer_new()) || gguf_writer_copy_kv(w, g, NULL)) goto oom;
	snprintf(key, sizeof key, "%s.block_count", hp->arch);
	if (gguf_writer_set_u32(w, key, (uint32_t)(hp->n_layers + hp->n_nextn))) goto oom;
	snprintf(key, sizeof key, "%s.nextn_predict_layers", hp->arch);
	if (gguf_writer_set_u32(w, key, (uint32_t)hp->n_nextn)) goto oom;
	for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
		const gguf_tensor *t = gguf_tensor_at(g, i);
		if (block_at_or_after(t->name, hp->n_layers)) continue; // the model's own MTP layers give way
		if (gguf_writer_add_tensor_ref(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes)) goto oom;
	}
	for (int64_t i = 0; i < gguf_n_tensors(hg); i++) {
		const gguf_tensor *t = gguf_tensor_at(hg, i);
		if (!block_at_or_after(t->name, hp->n_layers)) continue;
		if (gguf_writer_add_tensor_ref(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes)) goto oom;
	}
	if (gguf_writer_write(w, s->output, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	printf("mtp-merge: %s with %d MTP layer%s from %s written to %s\n", s->model, hp->n_nextn, hp->n_nextn == 1 ? "" : "s", s->draft_head,
	       s->output);
	rc = 0;
	goto out;
oom:
	cli_err("out of memory");
out:
	gguf_writer_free(w);
	gguf_free(hg);
	gguf_free(g);
	return rc;
}
