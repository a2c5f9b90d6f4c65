// learn/job: training jobs — the example queue, a step's life (started from the queue with all
// its memory, run piece by piece within a caller's budget, then committed or dropped), the
// AdamW update behind a commit, and evaluation through the inference path.
#include "learn/learn_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void learn_opts_default(learn_opts *o) {
	*o = (learn_opts){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .clip = 1.0f,
			  .batch = 4, .piece = 64, .max_tokens = 4096};
}

static bool in(double v, double lo, double hi) { return v >= lo && v <= hi; }

// Multiply-adds of one token through layer l with a's adapters, attention aside.
static double layer_macs(const model *m, const learn_adapter *a, int32_t l) {
	const model_hparams *hp = model_hparams_of(m);
	const double E = hp->n_embd, qd = (double)hp->n_heads * hp->head_dim, kvd = (double)hp->n_kv_heads * hp->head_dim;
	double macs = 2.0 * E * qd + 2.0 * E * kvd;
	if (hp->n_experts)
		macs += E * hp->n_experts + 3.0 * E * hp->n_ff_exp * hp->n_experts_used + (hp->n_ff_shexp ? 3.0 * E * hp->n_ff_shexp + E : 0.0);
	else macs += 3.0 * E * hp->n_ff;
	for (int32_t k = 0; k < MODEL_LORA_OUTPUT; k++) {
		const lpair *p = learn_pair_of(a, l, k);
		if (p) macs += (double)p->r * (p->n_in + p->n_out);
	}
	return macs;
}

int learn_job_new(learn_job **out, learn_adapter *a, const learn_opts *o, char *err, size_t errlen) {
	*out = NULL;
	const model_hparams *hp = model_hparams_of(a->m);
	if (!in(o->lr, 0, 10) || !in(o->beta1, 0, 0.999999) || !in(o->beta2, 0, 0.999999999) || !in(o->eps, 1e-30, 1) ||
	    !in(o->weight_decay, 0, 100) || !in(o->clip, 0, 1e9) || o->batch < 1 || o->batch > 65536 || o->piece < 1 ||
	    o->piece > 65536 || o->max_tokens < 2 || o->max_tokens > (1 << 24))
		return base_seterr(err, errlen, LANES_EINVAL, "learn: an option is out of range (lr, betas, eps, weight decay, clip, batch, piece, max tokens)");
	if (hp->n_experts > 256 || hp->n_experts_used > 64 || hp->head_dim > 1024)
		return base_seterr(err, errlen, LANES_EUNSUPPORTED, "learn: %d experts (%d used) or heads of %d values are more than training handles",
				    hp->n_experts, hp->n_experts_used, hp->head_dim);
	if (hp->attn_gate || hp->encoder)
		return base_seterr(err, errlen, LANES_EUNSUPPORTED, "learn: training covers the attention blocks of the llama, gemma, phi3 and gpt-oss families, not %s's",
				    hp->arch);
	if (a->busy) return base_seterr(err, errlen, LANES_EBUSY, "learn: another job trains this adapter");
	learn_job *j = learn_calloc(1, sizeof *j);
	if (!j) return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory");
	j->a = a;
	j->m = a->m;
	j->o = *o;
	j->lw = learn_calloc((size_t)hp->n_layers, sizeof *j->lw);
	j->lmacs = learn_calloc((size_t)hp->n_layers, sizeof *j->lmacs);
	j->grad = learn_calloc((size_t)a->n_params, sizeof *j->grad);
	if (!j->lw || !j->lmacs || !j->grad) {
		learn_job_free(j);
		return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory for a job's gradients");
	}
	model_io_weights_of(a->m, &j->io);
	j->head_macs = (double)hp->n_embd * hp->n_vocab;
	const lpair *po = learn_pair_of(a, -1, MODEL_LORA_OUTPUT);
	if (po) j->head_macs += (double)po->r * (po->n_in + po->n_out);
	j->tok_macs = j->head_macs;
	for (int32_t l = 0; l < hp->n_layers; l++) {
		model_layer_weights_of(a->m, l, &j->lw[l]);
		j->lmacs[l] = layer_macs(a->m, a, l);
		j->tok_macs += j->lmacs[l] + 2.0 * hp->n_heads * hp->head_dim;
	}
	a->busy = true;
	*out = j;
	return LANES_OK;
}

// Ends the step; its memory stays for the next one (no page is touched twice for nothing).
static void step_clear(learn_job *j) {
	for (int32_t i = 0; i < j->n_ex; i++) learn_example_free(j->ex[i]);
	free(j->ex);
	j->ex = NULL, j->n_ex = 0;
	j->b = (learn_buf){0};
	j->state = LEARN_IDLE;
}

void learn_job_free(learn_job *j) {
	if (!j) return;
	step_clear(j);
	free(j->mem);
	for (int64_t i = j->q_head; i < j->q_n; i++) learn_example_free(j->q[i]);
	free(j->q);
	free(j->lw);
	free(j->lmacs);
	free(j->grad);
	if (j->a) j->a->busy = false;
	free(j);
}

static uint64_t example_bytes(const learn_example *e) { return sizeof *e + (uint64_t)e->n * 5; }

int learn_job_add(learn_job *j, const learn_example *e, char *err, size_t errlen) {
	const int32_t nv = model_hparams_of(j->m)->n_vocab;
	if (e->n > j->o.max_tokens)
		return base_seterr(err, errlen, LANES_EINVAL, "learn: an example of %lld tokens is longer than %lld", (long long)e->n,
				    (long long)j->o.max_tokens);
	for (int64_t i = 0; i < e->n; i++)
		if (e->ids[i] < 0 || e->ids[i] >= nv)
			return base_seterr(err, errlen, LANES_EINVAL, "learn: token %d at %lld is outside the vocabulary (%d)", e->ids[i],
					    (long long)i, nv);
	if (j->q_n == j->q_cap && j->q_head > 0) {
		memmove(j->q, j->q + j->q_head, (size_t)(j->q_n - j->q_head) * sizeof *j->q);
		j->q_n -= j->q_head, j->q_head = 0;
	}
	if (j->q_n == j->q_cap) {
		const int64_t cap = j->q_cap ? j->q_cap * 2 : 16;
		learn_example **q = learn_alloc_fails() ? NULL : realloc(j->q, (size_t)cap * sizeof *q);
		if (!q) return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory for the queue");
		j->q = q, j->q_cap = cap;
	}
	learn_example *c;
	bool *flags = learn_malloc((size_t)e->n);
	if (!flags) return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory for an example");
	for (int64_t i = 0; i < e->n; i++) flags[i] = e->learn[i];
	int rc = learn_example_ids(&c, e->ids, flags, e->n, err, errlen);
	free(flags);
	if (rc) return rc;
	j->q[j->q_n++] = c;
	j->q_bytes += example_bytes(c);
	return LANES_OK;
}

int64_t learn_job_queued(const learn_job *j) { return j->q_n - j->q_head; }

uint64_t learn_job_bytes(const learn_job *j) {
	uint64_t ex = 0;
	for (int32_t i = 0; i < j->n_ex; i++) ex += example_bytes(j->ex[i]);
	return (uint64_t)j->a->n_params * 4 + j->q_bytes + ex + j->mem_bytes;
}

enum learn_state learn_step_state(const learn_job *j) { return j->state; }

// Takes the next batch from the queue with all the memory its pieces will need: on failure
// the queue is as it was.
static int step_begin(learn_job *j, char *err, size_t errlen) {
	const int32_t n = (int32_t)(learn_job_queued(j) < j->o.batch ? learn_job_queued(j) : j->o.batch);
	int64_t T = 0, Tmax = 0, learned = 0;
	for (int32_t i = 0; i < n; i++) {
		const learn_example *e = j->q[j->q_head + i];
		T += e->n, learned += e->n_learned;
		Tmax = e->n > Tmax ? e->n : Tmax;
	}
	const uint64_t bytes = learn_buf_layout(j, T, Tmax, NULL, NULL);
	learn_example **ex = learn_malloc((size_t)n * sizeof *ex);
	void *mem = bytes && bytes <= j->mem_bytes ? j->mem : bytes ? learn_malloc((size_t)bytes) : NULL;
	if (!ex || !mem) {
		free(ex);
		return base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory for a step of %lld tokens (%.1f MiB)", (long long)T,
				    (double)bytes / 1048576.0);
	}
	if (mem != j->mem) {
		free(j->mem);
		j->mem_bytes = bytes;
	}
	for (int32_t i = 0; i < n; i++) ex[i] = j->q[j->q_head + i], j->q_bytes -= example_bytes(ex[i]);
	j->q_head += n;
	j->ex = ex, j->n_ex = n, j->mem = mem;
	j->T = T, j->Tmax = Tmax, j->n_learned = learned, j->P = j->o.piece < T ? j->o.piece : T;
	j->n_chunks = (int32_t)((T + j->P - 1) / j->P);
	learn_buf_layout(j, T, Tmax, mem, &j->b);
	learn_step_fill(j);
	memset(j->b.dx, 0, (size_t)(T * model_hparams_of(j->m)->n_embd) * 4);
	memset(j->grad, 0, (size_t)j->a->n_params * sizeof *j->grad);
	j->loss_sum = 0.0, j->grad_norm = 0.0;
	j->phase = PH_FWD, j->layer = 0, j->chunk = 0;
	j->state = LEARN_RUNNING;
	return LANES_OK;
}

double learn_step_next_cost(const learn_job *j) {
	if (j->state == LEARN_IDLE) {
		// a step starts with its first piece: layer 0's forward over the first chunk of the batch
		const model_hparams *hp = model_hparams_of(j->m);
		const int64_t ne = learn_job_queued(j) < j->o.batch ? learn_job_queued(j) : j->o.batch;
		double rows = 0.0, ctx = 0.0;
		for (int64_t e = 0; e < ne && rows < j->o.piece; e++) {
			const int64_t take = j->q[j->q_head + e]->n < j->o.piece - (int64_t)rows ? j->q[j->q_head + e]->n : j->o.piece - (int64_t)rows;
			rows += (double)take, ctx += (double)take * (double)(take + 1) / 2.0;
		}
		return (j->lmacs[0] * rows + 2.0 * ctx * hp->n_heads * hp->head_dim) / j->tok_macs;
	}
	return learn_piece_macs(j) / j->tok_macs;
}

int learn_step_run(learn_job *j, base_pool *pool, double budget, double *spent, char *err, size_t errlen) {
	double used = 0.0;
	if (spent) *spent = 0.0;
	if (j->state == LEARN_READY) return LANES_OK;
	if (j->state == LEARN_IDLE) {
		if (!learn_job_queued(j) || learn_step_next_cost(j) > budget) return LANES_OK;
		int rc = step_begin(j, err, errlen);
		if (rc) return rc;
	}
	for (;;) {
		const double c = learn_piece_macs(j) / j->tok_macs;
		if (j->phase == PH_DONE || used + c > budget) break;
		learn_piece_run(j, pool);
		used += c;
	}
	if (j->phase == PH_DONE) {
		double ss = 0.0;
		for (int64_t i = 0; i < j->a->n_params; i++) ss += (double)j->grad[i] * j->grad[i];
		j->grad_norm = sqrt(ss);
		j->state = LEARN_READY;
	}
	if (spent) *spent = used;
	return LANES_OK;
}

void learn_step_abort(learn_job *j) { step_clear(j); }

int learn_step_info_of(const learn_job *j, learn_step_info *out) {
	if (j->state == LEARN_IDLE) return LANES_ENOTFOUND;
	*out = (learn_step_info){.step = j->committed + 1, .examples = j->n_ex, .tokens = j->T, .learned = j->n_learned,
				 .loss = j->n_learned ? j->loss_sum / (double)j->n_learned : 0.0, .grad_norm = j->grad_norm,
				 .version = j->a->version};
	return LANES_OK;
}

int learn_step_grad(const learn_job *j, int32_t i, const float **ga, const float **gb) {
	if (j->state != LEARN_READY || i < 0 || i >= j->a->n_pairs) return LANES_EBUSY;
	*ga = j->grad + j->a->pairs[i].a_off;
	*gb = j->grad + j->a->pairs[i].b_off;
	return LANES_OK;
}

int learn_commit(learn_job *j, model_lora **version, learn_step_info *info, char *err, size_t errlen) {
	if (version) *version = NULL;
	if (j->state != LEARN_READY) return base_seterr(err, errlen, LANES_EBUSY, "learn: no whole step to commit");
	model_lora *ver = NULL;
	int rc;
	// the only allocation comes first: past it nothing can fail
	if (version && (rc = learn_lora_shell(j->a, &ver, err, errlen))) return rc;
	learn_adapter *a = j->a;
	const learn_opts *o = &j->o;
	const float clip = o->clip > 0 && j->grad_norm > o->clip ? (float)(o->clip / j->grad_norm) : 1.0f;
	const double t = (double)(a->adam_t + 1);
	const float bc1 = (float)(1.0 - pow(o->beta1, t)), bc2 = (float)(1.0 - pow(o->beta2, t));
	for (int64_t i = 0; i < a->n_params; i++) {
		const float g = j->grad[i] * clip;
		a->m1[i] = o->beta1 * a->m1[i] + (1.0f - o->beta1) * g;
		a->m2[i] = o->beta2 * a->m2[i] + (1.0f - o->beta2) * g * g;
		const float mh = a->m1[i] / bc1, vh = a->m2[i] / bc2;
		a->w[i] -= o->lr * (mh / (sqrtf(vh) + o->eps) + o->weight_decay * a->w[i]);
	}
	a->adam_t++;
	a->version++;
	j->committed++;
	learn_step_info in;
	learn_step_info_of(j, &in);
	in.step = j->committed, in.version = a->version;
	if (info) *info = in;
	if (ver) {
		learn_lora_fill(a, ver);
		*version = ver;
	}
	step_clear(j);
	return LANES_OK;
}

// ---- evaluation ------------------------------------------------------------------------------
int learn_eval(const model *m, const model_lora *lora, base_pool *pool, const learn_example *const *ex, int64_t n,
	       double *nll, int64_t *count, char *err, size_t errlen) {
	*nll = 0.0, *count = 0;
	const model_hparams *hp = model_hparams_of(m);
	const int64_t V = hp->n_vocab, CH = 128;
	int64_t longest = 1;
	for (int64_t i = 0; i < n; i++) longest = ex[i]->n > longest ? ex[i]->n : longest;
	kv_config c = model_kv_config(m, KV_F16S, 1, (int32_t)longest, 16);
	kv_cache *kv = NULL;
	model_ws *ws = NULL;
	model_row *rows = learn_malloc((size_t)CH * sizeof *rows);
	float *lg = learn_malloc((size_t)(CH * V) * sizeof *lg);
	int rc = !rows || !lg ? base_seterr(err, errlen, LANES_ENOMEM, "learn: out of memory") : LANES_OK;
	if (!rc) rc = kv_new(&kv, &c, err, errlen);
	if (!rc) rc = model_ws_new(&ws, m, CH, base_pool_threads(pool), 0, err, errlen);
	model_lora_set set = {.n = lora ? 1 : 0, .use = {{lora, 1.0f}}};
	for (int64_t e = 0; e < n && !rc; e++) {
		const learn_example *x = ex[e];
		kv_seq_clear(kv, 0);
		for (int64_t p0 = 0; p0 + 1 < x->n && !rc; p0 += CH) {
			const int64_t np = x->n - 1 - p0 < CH ? x->n - 1 - p0 : CH;
			for (int64_t r = 0; r < np; r++) rows[r] = (model_row){x->ids[p0 + r], (int32_t)(p0 + r), 0, true, &set};
			if ((rc = model_forward_ws(m, kv, pool, ws, rows, np, lg, err, errlen))) break;
			for (int64_t r = 0; r < np; r++) {
				if (!x->learn[p0 + r + 1]) continue;
				const float *l = lg + r * V;
				float mx = l[0];
				for (int64_t v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
				double sum = 0.0;
				for (int64_t v = 0; v < V; v++) sum += exp((double)l[v] - mx);
				*nll += mx + log(sum) - l[x->ids[p0 + r + 1]];
				++*count;
			}
		}
	}
	model_ws_free(ws);
	kv_free(kv);
	free(rows);
	free(lg);
	return rc;
}
