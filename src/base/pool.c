// base: a fixed thread pool. The caller runs as worker 0; each job hands every worker
// its (ith, nth) so kernels split output rows or columns, never a reduction.
#include "base/base.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

struct lanes_pool {
	int n;                    // threads including the caller
	pthread_t *threads;       // n - 1 workers
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	lanes_task_fn fn;
	void *arg;
	uint64_t gen;             // job generation, bumped per run
	int pending;              // workers still running the current job
	bool quit;
};

typedef struct {
	lanes_pool *p;
	int ith;
} worker_arg;

static void *worker(void *v) {
	worker_arg wa = *(worker_arg *)v;
	free(v);
	lanes_pool *p = wa.p;
	uint64_t seen = 0;
	for (;;) {
		pthread_mutex_lock(&p->mu);
		while (p->gen == seen && !p->quit) pthread_cond_wait(&p->go, &p->mu);
		if (p->quit) { pthread_mutex_unlock(&p->mu); return NULL; }
		seen = p->gen;
		lanes_task_fn fn = p->fn;
		void *arg = p->arg;
		pthread_mutex_unlock(&p->mu);
		fn(arg, wa.ith, p->n);
		pthread_mutex_lock(&p->mu);
		if (--p->pending == 0) pthread_cond_signal(&p->done);
		pthread_mutex_unlock(&p->mu);
	}
}

int lanes_pool_new(lanes_pool **out, int n_threads) {
	*out = NULL;
	if (n_threads < 1 || n_threads > 1024) return LANES_EINVAL;
	lanes_pool *p = calloc(1, sizeof *p);
	if (!p) return LANES_ENOMEM;
	p->n = n_threads;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	if (n_threads > 1) {
		p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
		if (!p->threads) { lanes_pool_free(p); return LANES_ENOMEM; }
	}
	for (int i = 1; i < n_threads; i++) {
		worker_arg *wa = malloc(sizeof *wa);
		if (!wa) { p->n = i; lanes_pool_free(p); return LANES_ENOMEM; }
		wa->p = p;
		wa->ith = i;
		if (pthread_create(&p->threads[i - 1], NULL, worker, wa)) {
			free(wa);
			p->n = i;
			lanes_pool_free(p);
			return LANES_ENOMEM;
		}
	}
	*out = p;
	return LANES_OK;
}

void lanes_pool_free(lanes_pool *p) {
	if (!p) return;
	pthread_mutex_lock(&p->mu);
	p->quit = true;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; i < p->n; i++) pthread_join(p->threads[i - 1], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	free(p->threads);
	free(p);
}

int lanes_pool_threads(const lanes_pool *p) { return p ? p->n : 1; }

void lanes_pool_run(lanes_pool *p, lanes_task_fn fn, void *arg) {
	if (!p || p->n == 1) { fn(arg, 0, 1); return; }
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->arg = arg;
	p->pending = p->n - 1;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	fn(arg, 0, p->n);
	pthread_mutex_lock(&p->mu);
	while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

int lanes_cpu_count(void) {
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}
