// tests: the numerics contract, bit for bit — a sequence's logits alone equal its logits in a
// batch with other sequences (rows in any order, prompt and decode rows mixed), a prompt whole
// equals it cut into pieces of 1, 7 and 64, 1 thread equals 2 and 3, and a sequence truncated
// and re-fed equals the original — under every kernel set the CPU runs, in both activation
// widths; on shared models, on files of the types no shared model has (IQ4, TQ, IQ3, IQ2,
// MXFP4; MXFP4_MOE: the MoE model's experts) `lanes quantize` makes here, and on the gemma2,
// gemma3, phi3, gpt-oss and qwen3next ones `lanes gen` writes (their local layers' window shorter
// than the prompt; gpt-oss's sinks; Qwen3-Next's recurrent state, with pieces cut at every
// offset, prefix-cache hits at every page boundary from its state's checkpoints, and a cut
// into its state refused until the sequence is cleared).
#include "t.h"
#include "gen.h"

#include "model/model.h"
#include "sample/sample.h"

#include <unistd.h>

#define P 80 // prompt length

typedef struct {
	model *m;
	int32_t V;
	int32_t ids[P];
	float *ref; // [P][V]: whole prompt, one thread
} fixture;

static kv_cache *new_kv(const model *m, enum kv_type t, int32_t seqs, int32_t ctx) {
	char err[256];
	kv_config c = model_kv_config(m, t, seqs, ctx, 16);
	kv_cache *kv = NULL;
	CHECKF(kv_new(&kv, &c, err, sizeof err) == 0, "%s", err);
	return kv;
}

// Feeds ids[from, to) of sequence seq in pieces of `piece`, writing logits of every row into out[from..].
static int feed(const model *m, kv_cache *kv, base_pool *pool, int32_t seq, const int32_t *ids, int from, int to,
		int piece, float *out, int32_t V) {
	char err[256];
	model_row rows[P];
	for (int i0 = from; i0 < to; i0 += piece) {
		int n = to - i0 < piece ? to - i0 : piece;
		for (int i = 0; i < n; i++) rows[i] = (model_row){ids[i0 + i], i0 + i, seq, true, NULL};
		int rc = model_forward(m, kv, pool, rows, n, out + (size_t)i0 * V, err, sizeof err);
		if (rc) {
			fprintf(stderr, "forward: %s\n", err);
			return rc;
		}
	}
	return 0;
}

static bool same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

// A recurrent model: the prompt cut once at every offset (the first piece 1..P-1 long, then the
// rest, in two passes) gives the whole prompt's logits; so do pieces of 2 beside decode-like
// single rows of another sequence. A recurrent layer's state depends on every earlier token,
// so a cut anywhere must leave it exactly as the whole pass does.
static void every_offset(fixture *f, enum kv_type t) {
	const size_t all = (size_t)P * f->V;
	float *out = malloc(all * sizeof *out);
	bool ok = true;
	for (int cut = 1; cut < P && ok; cut++) {
		kv_cache *kv = new_kv(f->m, t, 1, P);
		memset(out, 0, all * sizeof *out);
		ok = feed(f->m, kv, NULL, 0, f->ids, 0, cut, cut, out, f->V) == 0 && feed(f->m, kv, NULL, 0, f->ids, cut, P, P, out, f->V) == 0;
		CHECKF(ok && same(out, f->ref, all), "a cut at %d differs from the whole prompt", cut);
		ok = ok && same(out, f->ref, all);
		kv_free(kv);
	}
	free(out);
}

// A recurrent model's prefix cache: the state captured after each page boundary b (inside a
// piece of 7), published with the pages and attached to another sequence, which resumes at b
// and gives the whole prompt's logits for the rest, bit for bit. Pages published without a
// checkpoint are not attached; of two checkpoints the later one inside a prompt is taken, and
// a prompt that parts from them before the first takes none.
static void checkpoints(fixture *f, enum kv_type t) {
	const size_t all = (size_t)P * f->V;
	float *out = malloc(all * sizeof *out);
	const int32_t pt = 16;
	for (int32_t b = pt; b < P; b += pt) {
		kv_cache *kv = new_kv(f->m, t, 3, P);
		kv_seq_capture(kv, 0, 0, b);
		CHECK(feed(f->m, kv, NULL, 0, f->ids, 0, P, 7, out, f->V) == 0);
		kv_prefix_publish(kv, 0, 0, f->ids, P);
		CHECKF(kv_seq_capture_pos(kv, 0, 0) == 0, "the capture at %d was published", b);
		const int32_t got = kv_prefix_attach(kv, 1, 0, f->ids, P - 1);
		CHECKF(got == b, "attached %d tokens, the checkpoint is at %d", got, b);
		memset(out, 0, all * sizeof *out);
		CHECK(feed(f->m, kv, NULL, 1, f->ids, got, P, 5, out, f->V) == 0);
		CHECKF(same(out + (size_t)b * f->V, f->ref + (size_t)b * f->V, (size_t)(P - b) * f->V),
		       "resumed from the checkpoint at %d: the rest differs from the whole prompt", b);
		// another adapter set's chain finds none
		CHECK(kv_prefix_attach(kv, 2, 77, f->ids, P - 1) == 0);
		kv_free(kv);
	}
	kv_cache *kv = new_kv(f->m, t, 3, P);
	CHECK(feed(f->m, kv, NULL, 0, f->ids, 0, P, P, out, f->V) == 0);
	kv_prefix_publish(kv, 0, 0, f->ids, P);
	CHECKF(kv_prefix_attach(kv, 1, 0, f->ids, P - 1) == 0, "pages without a checkpoint are not attached");
	kv_seq_clear(kv, 0);
	kv_seq_capture(kv, 0, 0, 32);
	CHECK(feed(f->m, kv, NULL, 0, f->ids, 0, 40, 40, out, f->V) == 0);
	kv_prefix_publish(kv, 0, 0, f->ids, 40);
	kv_seq_clear(kv, 0);
	kv_seq_capture(kv, 0, 0, 64);
	CHECK(feed(f->m, kv, NULL, 0, f->ids, 0, P, 33, out, f->V) == 0);
	kv_prefix_publish(kv, 0, 0, f->ids, P);
	CHECK(kv_prefix_attach(kv, 1, 0, f->ids, P - 1) == 64);
	CHECK(kv_prefix_attach(kv, 2, 0, f->ids, 63) == 32);
	kv_seq_clear(kv, 2);
	int32_t other[P];
	memcpy(other, f->ids, sizeof other);
	other[20] = other[20] == 5 ? 6 : 5;
	CHECK(kv_prefix_attach(kv, 2, 0, other, P - 1) == 0);
	kv_free(kv);
	free(out);
}

// level 0: pieces of 7, 2 threads; 1: also pieces of 64; 2: also pieces of 1 and 3 threads.
static void pieces_and_threads(fixture *f, enum kv_type t, int level) {
	const size_t all = (size_t)P * f->V;
	float *out = malloc(all * sizeof *out);
	const int sizes[] = {7, 64, 1};
	for (int s = 0; s < level + 1; s++) {
		kv_cache *kv = new_kv(f->m, t, 1, P);
		memset(out, 0, all * sizeof *out);
		CHECK(feed(f->m, kv, NULL, 0, f->ids, 0, P, sizes[s], out, f->V) == 0);
		CHECKF(same(out, f->ref, all), "pieces of %d differ from the whole prompt", sizes[s]);
		kv_free(kv);
	}
	for (int nth = 2; nth <= (level == 2 ? 3 : 2); nth++) {
		base_pool *pool;
		CHECK(base_pool_new(&pool, nth) == 0);
		kv_cache *kv = new_kv(f->m, t, 1, P);
		CHECK(feed(f->m, kv, pool, 0, f->ids, 0, P, nth == 2 ? P : 7, out, f->V) == 0);
		CHECKF(same(out, f->ref, all), "%d threads differ from 1", nth);
		if (kv_config_of(kv)->state_floats) {
			// a recurrent state cannot be cut back: refused until cleared, then the same again
			kv_seq_truncate(kv, 0, 41);
			model_row r = {f->ids[41], 41, 0, true, NULL};
			char err[256];
			CHECK(model_forward(f->m, kv, pool, &r, 1, out, err, sizeof err) == LANES_EINVAL && strstr(err, "recurrent state"));
			kv_seq_clear(kv, 0);
			memset(out, 0, all * sizeof *out);
			CHECK(feed(f->m, kv, pool, 0, f->ids, 0, P, 13, out, f->V) == 0);
			CHECKF(same(out, f->ref, all), "cleared + re-fed differs (%d threads)", nth);
			// drafts: the state kept at a mark, rows past it with other tokens rewound, the
			// prompt's own tokens fed from there give the whole prompt's logits
			CHECK(kv_seq_rewind(kv, 0) == LANES_EINVAL);
			kv_seq_clear(kv, 0);
			CHECK(feed(f->m, kv, pool, 0, f->ids, 0, 30, 30, out, f->V) == 0);
			int32_t wrong[P];
			for (int i = 0; i < P; i++) wrong[i] = f->ids[i] == 5 ? 6 : 5;
			memcpy(wrong + 30, f->ids + 30, sizeof(int32_t));
			kv_seq_mark(kv, 0, 31);
			CHECK(kv_seq_mark_pos(kv, 0) == 31);
			CHECK(feed(f->m, kv, pool, 0, wrong, 30, 38, 8, out, f->V) == 0);
			CHECK(kv_seq_rewind(kv, 0) == 0 && kv_seq_len(kv, 0) == 31 && kv_seq_mark_pos(kv, 0) == 0);
			CHECK(kv_seq_rewind(kv, 0) == LANES_EINVAL);
			memset(out, 0, all * sizeof *out);
			CHECK(feed(f->m, kv, pool, 0, f->ids, 31, P, 5, out, f->V) == 0);
			CHECKF(same(out + 31 * (size_t)f->V, f->ref + 31 * (size_t)f->V, all - 31 * (size_t)f->V),
			       "rewound to a mark + re-fed differs (%d threads)", nth);
			kv_free(kv);
			base_pool_free(pool);
			continue;
		}
		// Truncate and re-feed the tail: the prefix from the cache gives the same logits.
		kv_seq_truncate(kv, 0, 41);
		CHECK(kv_seq_len(kv, 0) == 41);
		memset(out + 41 * (size_t)f->V, 0, (all - 41 * (size_t)f->V) * sizeof *out);
		CHECK(feed(f->m, kv, pool, 0, f->ids, 41, P, 13, out, f->V) == 0);
		CHECKF(same(out, f->ref, all), "truncate + re-feed differs (%d threads)", nth);
		kv_free(kv);
		base_pool_free(pool);
	}
	free(out);
}

// Sequence 0 runs in batches shared with sequences 1 and 2: they prefill while it prefills,
// then it decodes while they prefill, its rows in reverse order within each batch.
static void mixed_batches(fixture *f, enum kv_type t) {
	char err[256];
	const int32_t V = f->V;
	kv_cache *kv = new_kv(f->m, t, 3, P + 40);
	base_pool *pool;
	CHECK(base_pool_new(&pool, 2) == 0);
	int32_t other[2][P];
	for (int s = 0; s < 2; s++)
		for (int i = 0; i < P; i++) other[s][i] = (int32_t)(3 + splitmix64((uint64_t)(1000 * s + i)) % (uint64_t)(V - 3));
	model_row rows[3 * P];
	float *out = malloc((size_t)3 * P * V * sizeof *out);
	float *mine = malloc((size_t)P * V * sizeof *mine);
	int done0 = 0, done[2] = {0, 0};
	const int steps[][3] = {{10, 30, 5}, {1, 0, 50}, {33, 17, 1}, {36, 33, 24}};
	bool ok = true;
	for (int st = 0; st < 4 && ok; st++) {
		int n = 0, n0 = steps[st][0];
		// Others first, then sequence 0's rows in reverse order, interleaved with decode-like singles.
		for (int s = 0; s < 2; s++)
			for (int i = 0; i < steps[st][s + 1] && done[s] < P; i++, done[s]++)
				rows[n++] = (model_row){other[s][done[s]], done[s], s + 1, (done[s] & 1) == 0, NULL};
		int first = n;
		for (int i = n0 - 1; i >= 0; i--) rows[n++] = (model_row){f->ids[done0 + i], done0 + i, 0, true, NULL};
		// Swap one other-sequence row into the middle of sequence 0's block.
		if (first > 0 && n - first > 2) {
			model_row tmp = rows[first - 1];
			rows[first - 1] = rows[first + 1];
			rows[first + 1] = tmp;
		}
		int rc = model_forward(f->m, kv, pool, rows, n, out, err, sizeof err);
		CHECKF(rc == 0, "mixed batch %d: %s", st, err);
		if (rc) ok = false;
		// Pick sequence 0's logits out of the flagged rows, in batch order.
		int li = 0;
		for (int i = 0; i < n && ok; i++) {
			if (!rows[i].logits) continue;
			if (rows[i].seq == 0) memcpy(mine + (size_t)rows[i].pos * V, out + (size_t)li * V, (size_t)V * sizeof *out);
			li++;
		}
		done0 += n0;
	}
	CHECK(done0 == P);
	CHECKF(ok && same(mine, f->ref, (size_t)P * V), "logits in mixed batches differ from the sequence alone");
	// Greedy decode of 8 tokens: alone (fresh cache, one thread) and beside the others' decode rows.
	kv_cache *solo = new_kv(f->m, t, 1, P + 40);
	CHECK(feed(f->m, solo, NULL, 0, f->ids, 0, P, P, out, V) == 0);
	int32_t a = sample_argmax(out + (size_t)(P - 1) * V, V), b = sample_argmax(mine + (size_t)(P - 1) * V, V);
	float la[512], lb[512];
	bool dec_same = a == b;
	for (int i = 0; i < 8 && dec_same && V <= 512; i++) {
		model_row r = {a, P + i, 0, true, NULL};
		CHECK(model_forward(f->m, solo, NULL, &r, 1, la, err, sizeof err) == 0);
		int n = 0;
		rows[n++] = (model_row){other[0][(i * 7) % P], done[0] + i, 1, true, NULL};
		rows[n++] = (model_row){b, P + i, 0, true, NULL};
		rows[n++] = (model_row){other[1][(i * 5) % P], done[1] + i, 2, i % 2 == 0, NULL};
		CHECK(model_forward(f->m, kv, pool, rows, n, out, err, sizeof err) == 0);
		memcpy(lb, out + (size_t)V, (size_t)V * sizeof *lb);
		dec_same = same(la, lb, (size_t)V);
		a = sample_argmax(la, V);
		b = sample_argmax(lb, V);
	}
	CHECKF(dec_same, "decode rows beside other sequences differ from decoding alone");
	kv_free(solo);
	free(mine);
	free(out);
	base_pool_free(pool);
	kv_free(kv);
}

// Bad batches fail cleanly and leave the cache as it was.
static void bad_batches(fixture *f) {
	char err[256];
	kv_config c = model_kv_config(f->m, KV_F16S, 2, 32, 16); // 4 pages
	kv_cache *kv;
	CHECK(kv_new(&kv, &c, err, sizeof err) == 0);
	float *out = malloc((size_t)64 * f->V * sizeof *out);
	model_row rows[64];
	for (int i = 0; i < 64; i++) rows[i] = (model_row){f->ids[i], i, 0, false, NULL};
	CHECK(model_forward(f->m, kv, NULL, rows, 40, out, err, sizeof err) == 0);
	CHECK(kv_seq_len(kv, 0) == 40 && kv_pages_free(kv) == 1);
	// A gap, a repeat, a bad token, a bad sequence: EINVAL, nothing changes.
	model_row gap = {1, 41, 0, true, NULL}, rep[2] = {{1, 40, 0, true, NULL}, {1, 40, 0, true, NULL}};
	model_row tok = {f->V, 40, 0, true, NULL}, seq = {1, 0, 7, true, NULL};
	CHECK(model_forward(f->m, kv, NULL, &gap, 1, out, err, sizeof err) == LANES_EINVAL);
	CHECK(strstr(err, "position 41") != NULL);
	CHECK(model_forward(f->m, kv, NULL, rep, 2, out, err, sizeof err) == LANES_EINVAL);
	CHECK(model_forward(f->m, kv, NULL, &tok, 1, out, err, sizeof err) == LANES_EINVAL);
	CHECK(model_forward(f->m, kv, NULL, &seq, 1, out, err, sizeof err) == LANES_EINVAL);
	// Out of pages: sequence 1 wants 2 pages, 1 is free.
	for (int i = 0; i < 20; i++) rows[i] = (model_row){f->ids[i], i, 1, true, NULL};
	CHECK(model_forward(f->m, kv, NULL, rows, 20, out, err, sizeof err) == LANES_ELIMIT);
	CHECK(kv_seq_len(kv, 0) == 40 && kv_seq_len(kv, 1) == 0 && kv_pages_free(kv) == 1);
	// A kv cache of another shape is refused.
	kv_config c2 = c;
	c2.kv_dim *= 2;
	c2.group *= 2;
	kv_cache *kv2;
	CHECK(kv_new(&kv2, &c2, err, sizeof err) == 0);
	CHECK(model_forward(f->m, kv2, NULL, rows, 1, out, err, sizeof err) == LANES_EINVAL);
	kv_free(kv2);
	free(out);
	kv_free(kv);
}

// Every model gets the mixed-batch checks; `full` adds pieces of 1, 3 threads and plain f16.
static void run_file(const char *name, const char *path, bool full) {
	t_case("%s %s %s", name, tensor_kernels_name(tensor_kernels_default()), tensor_act_name(tensor_kernels_act(tensor_kernels_default())));
	char err[256];
	fixture f = {0};
	int rc = model_load(&f.m, path, err, sizeof err);
	CHECKF(rc == 0, "%s: %s", name, err);
	if (rc) return;
	f.V = model_hparams_of(f.m)->n_vocab;
	for (int i = 0; i < P; i++) f.ids[i] = (int32_t)(3 + splitmix64((uint64_t)i * 77 + 5) % (uint64_t)(f.V - 3));
	f.ids[0] = 1;
	// The default type gets every check; plain f16 whole vs pieces of 7 and 2 threads; the
	// block types mixed batches too (exactness holds within each type).
	const enum kv_type types[] = {KV_F16S, KV_Q8_0, KV_F16, KV_Q4_0};
	for (int t = 0; t < (full ? 4 : 2); t++) {
		t_case("%s kv %d", name, (int)types[t]);
		f.ref = malloc((size_t)P * f.V * sizeof *f.ref);
		kv_cache *kv = new_kv(f.m, types[t], 1, P);
		CHECK(feed(f.m, kv, NULL, 0, f.ids, 0, P, P, f.ref, f.V) == 0);
		kv_free(kv);
		pieces_and_threads(&f, types[t], t == 0 ? (full ? 2 : 1) : 0);
		if (model_state_floats(model_hparams_of(f.m))) {
			if (t == 0) every_offset(&f, types[t]);
			checkpoints(&f, types[t]);
		}
		if (types[t] != KV_F16) mixed_batches(&f, types[t]);
		free(f.ref);
	}
	bad_batches(&f);
	model_free(f.m);
}

static void run_model(const char *name, bool full) {
	char path[512];
	snprintf(path, sizeof path, "%s/models/%s.gguf", t_shared(), name);
	run_file(name, path, full);
}

int main(void) {
	// Each kernel set this CPU runs keeps the contract on its own, in both activation widths
	// (q8 changes only quantized weights' matmuls: stories260K is F32; the slow reference
	// set's q8 takes one model).
	const char *sets[8];
	const int ns = tensor_kernels_available(sets, 8);
	// one file per kernel path: TQ1_0 shares TQ2_0's codes, and every grid type rows_iq (IQ3_XXS's
	// mix holds IQ3_XXS, IQ3_S and IQ2_S); then the MoE model's experts in MXFP4
	static const char *const made[] = {"IQ4_NL", "IQ4_XS", "TQ2_0", "IQ3_XXS", "IQ2_XXS", "MXFP4", "MXFP4_MOE"};
	static const char *const made_src[] = {"ref-llama-F32", "ref-llama-F32", "ref-llama-F32", "ref-llama-F32",
					       "ref-llama-F32", "ref-llama-F32", "ref-moe-F16"};
	enum { NMADE = sizeof made / sizeof made[0] };
	char made_path[NMADE][512];
	for (int q = 0; q < NMADE; q++)
		CHECKF(t_quantize("exact", made_src[q], made[q], made_path[q], sizeof made_path[q]), "lanes quantize to %s", made[q]);
	// gpt-oss's experts in MXFP4, as its published files have them
	static const char *const fams[] = {"gemma2-test", "gemma3-test", "phi3-test", "gpt-oss-test", "qwen3-next-test"};
	static const char *const fam_type[] = {"Q8_0", "Q8_0", "Q8_0", "MXFP4_MOE", "Q8_0"};
	enum { NFAM = sizeof fams / sizeof fams[0] };
	char fam_path[NFAM][512], vocab[512];
	snprintf(vocab, sizeof vocab, "%s/models/stories260K.gguf", t_shared());
	for (int g = 0; g < NFAM; g++) {
		snprintf(fam_path[g], sizeof fam_path[g], "%s/exact-%s-%d.gguf", t_tmp(), fams[g], (int)getpid());
		CHECK(t_gen_model(fams[g], fam_type[g], vocab, fam_path[g]) == 0);
	}
	for (int a = 0; a < TENSOR_ACT_COUNT; a++)
		for (int k = 0; k < ns; k++) {
			const bool q8 = a == TENSOR_ACT_Q8, ref = !strcmp(sets[k], "ref");
			CHECK(tensor_kernels_select_act((enum tensor_act)a) == 0);
			CHECK(tensor_kernels_select(sets[k]) == 0);
			if (!q8) run_model("stories260K", true);
			run_model("ref-qwen2-Q4_K_M", false);
			if (q8 && ref) continue;
			run_model("ref-moe-Q8_0", false);
			run_model("ref-llama-Q4_0", false);
			for (int q = 0; q < NMADE; q++) run_file(made[q], made_path[q], false);
			for (int g = 0; g < NFAM; g++) run_file(fams[g], fam_path[g], !q8);
		}
	for (int q = 0; q < NMADE; q++) remove(made_path[q]);
	for (int g = 0; g < NFAM; g++) remove(fam_path[g]);
	CHECK(tensor_kernels_select_act(TENSOR_ACT_Q16) == 0);
	T_DONE("exact");
}
