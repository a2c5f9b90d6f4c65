// model/head: MTP head versions made at run time. A version is the model seen through a copy of
// its layer table whose MTP layer 0 is the version's own f32 block, so the forward pass reads it
// exactly as it reads a head file's f32 tensors.
#include "model/model_int.h"

#include <stdlib.h>
#include <string.h>

struct model_head {
	atomic_int refs;
	model view;         // m with layers and nextn below; shares every other table with m
	mlayer *layers;     // m's trunk layers, then the version's block
	mnextn nx;
	float *mem;         // the copied weights
	void **packed;      // [H_MATS] the kernel set's copies of the matrices (NULL where read in place)
	uint64_t bytes;
};

enum { H_EH, H_Q, H_K, H_V, H_O, H_GATE, H_UP, H_DOWN, H_MATS };

enum { NREQ = 13, NPART = 19 };

// w's parts in the order they are laid out, and their lengths; false when a required one is missing.
static bool parts_of(const model_hparams *hp, const model_head_f32 *w, const float **src, int64_t *len) {
	const int64_t E = hp->n_embd, D = hp->head_dim, qd = (int64_t)hp->n_heads * D, kvd = (int64_t)hp->n_kv_heads * D, F = hp->n_ff;
	const float *s[NPART] = {w->eh_proj, w->wq, w->wk, w->wv, w->wo, w->ffn_gate, w->ffn_up, w->ffn_down, w->enorm, w->hnorm,
				 w->attn_norm, w->ffn_norm, w->head_norm, w->bq, w->bk, w->bv, w->bo, w->q_norm, w->k_norm};
	const int64_t n[NPART] = {2 * E * E, qd * E, kvd * E, kvd * E, E * qd, F * E, F * E, E * F, E, E, E, E, E, qd, kvd, kvd, E, D, D};
	for (int i = 0; i < NPART; i++) {
		if (i < NREQ && !s[i]) return false;
		src[i] = s[i], len[i] = s[i] ? n[i] : 0;
	}
	return true;
}

// Copies w into v's memory and lays its matrices out for the kernel set.
static void fill(model_head *v, const model_head_f32 *w) {
	const model_hparams *hp = &v->view.hp;
	const float *src[NPART];
	int64_t len[NPART], at = 0;
	parts_of(hp, w, src, len);
	for (int i = 0; i < NPART; i++)
		if (src[i]) memcpy(v->mem + at, src[i], (size_t)len[i] * sizeof *v->mem), at += len[i];
	mlayer *y = &v->layers[hp->n_layers];
	mweight *mats[H_MATS] = {&v->nx.eh_proj, &y->wq, &y->wk, &y->wv, &y->wo, &y->ffn_gate, &y->ffn_up, &y->ffn_down};
	for (int i = 0; i < H_MATS; i++)
		tensor_mat_init(&mats[i]->tm, v->view.ks, GGUF_T_F32, mats[i]->rows, mats[i]->k, 1, mats[i]->data, v->packed[i], NULL);
}

int model_head_new(model_head **out, const model *m, const model_head_f32 *w, char *err, size_t errlen) {
	*out = NULL;
	const model_hparams *hp = &m->hp;
	if (hp->encoder || hp->full_attn_interval > 0 || hp->n_experts)
		return base_seterr(err, errlen, LANES_EINVAL, "model: head versions are made for dense attention models only");
	const float *src[NPART];
	int64_t len[NPART], total = 0;
	if (!parts_of(hp, w, src, len)) return base_seterr(err, errlen, LANES_EINVAL, "model: a head version lacks a weight");
	for (int i = 0; i < NPART; i++) total += len[i];
	model_head *v = calloc(1, sizeof *v);
	if (!v) return base_seterr(err, errlen, LANES_ENOMEM, "model: out of memory");
	atomic_init(&v->refs, 1);
	v->layers = calloc((size_t)hp->n_layers + 1, sizeof *v->layers);
	v->mem = malloc((size_t)total * sizeof *v->mem);
	v->packed = calloc(H_MATS, sizeof *v->packed);
	if (!v->layers || !v->mem || !v->packed) goto oom;
	v->bytes = (uint64_t)total * sizeof *v->mem;
	v->view = *m;
	v->view.hp.n_nextn = 1;
	v->view.layers = v->layers;
	v->view.nextn = &v->nx;
	v->view.owned = NULL, v->view.n_owned = v->view.cap_owned = 0;
	memcpy(v->layers, m->layers, (size_t)hp->n_layers * sizeof *v->layers);
	mlayer *y = &v->layers[hp->n_layers];
	const float *c[NPART] = {0};
	int64_t at = 0;
	for (int i = 0; i < NPART; i++)
		if (src[i]) c[i] = v->mem + at, at += len[i];
	mweight *mats[H_MATS] = {&v->nx.eh_proj, &y->wq, &y->wk, &y->wv, &y->wo, &y->ffn_gate, &y->ffn_up, &y->ffn_down};
	for (int i = 0; i < H_MATS; i++) {
		const int64_t k = i == H_EH ? 2 * hp->n_embd : i == H_O ? (int64_t)hp->n_heads * hp->head_dim : i == H_DOWN ? hp->n_ff : hp->n_embd;
		const int64_t rows = len[i] / k;
		*mats[i] = (mweight){.data = c[i], .type = GGUF_T_F32, .k = k, .rows = rows, .n_mat = 1, .row_bytes = (size_t)k * 4,
				     .mat_bytes = (size_t)(k * rows) * 4};
		const size_t pb = tensor_pack_bytes(m->ks, GGUF_T_F32, rows, k, 1);
		if (pb && !(v->packed[i] = aligned_alloc(64, (pb + 63) & ~(size_t)63))) goto oom;
		v->bytes += pb;
	}
	v->nx.enorm = c[8], v->nx.hnorm = c[9];
	y->attn_norm = c[10], y->ffn_norm = c[11];
	v->nx.head_norm = c[12];
	y->bq = c[13], y->bk = c[14], y->bv = c[15], y->bo = c[16];
	y->q_norm = c[17], y->k_norm = c[18];
	// the embedding and output head the model's own head reads, else the trunk's
	v->nx.embed = hp->n_nextn ? m->nextn[0].embed : &m->tok_embd;
	v->nx.head = hp->n_nextn ? m->nextn[0].head : &m->output;
	fill(v, w);
	*out = v;
	return LANES_OK;
oom:
	model_head_free(v);
	return base_seterr(err, errlen, LANES_ENOMEM, "model: out of memory for a head version");
}

void model_head_set(model_head *v, const model_head_f32 *w) { fill(v, w); }

model_head *model_head_ref(model_head *v) {
	atomic_fetch_add(&v->refs, 1);
	return v;
}

void model_head_free(model_head *v) {
	if (!v || atomic_fetch_sub(&v->refs, 1) > 1) return;
	for (int i = 0; v->packed && i < H_MATS; i++) free(v->packed[i]);
	free(v->packed);
	free(v->layers);
	free(v->mem);
	free(v);
}

const model *model_head_model(const model_head *v) { return &v->view; }
uint64_t model_head_bytes(const model_head *v) { return v->bytes; }
