// base: a fixed thread pool. The caller runs as worker 0; each job hands every worker
// its (ith, nth) so kernels split output rows or columns, never a reduction. Between jobs
// workers spin briefly before sleeping, since a forward pass posts jobs microseconds apart.
#include "base/base.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

// How long a worker (or the caller waiting for the workers) spins before sleeping.
#define SPIN_NS 200000

struct base_pool {
	int n;                    // threads including the caller
	pthread_t *threads;       // n - 1 workers
	pthread_mutex_t mu;
	pthread_mutex_t run_mu;   // one job at a time when shared: lane hosts of several models run on it
	bool shared;
	pthread_cond_t go, done;
	base_task_fn fn;         // the current job, published by gen
	void *arg;
	_Atomic uint64_t gen;     // job generation, bumped per run
	atomic_int pending;       // workers still running the current job
	atomic_int sleepers;      // workers blocked on go
	atomic_bool waiting;      // the caller is blocked on done
	atomic_bool quit;
};

typedef struct {
	base_pool *p;
	int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

// Spins until *gen differs from seen (true) or about SPIN_NS pass (false).
static bool spin_gen(base_pool *p, uint64_t seen) {
	uint64_t t0 = 0;
	for (unsigned i = 1;; i++) {
		if (atomic_load_explicit(&p->gen, memory_order_acquire) != seen || atomic_load(&p->quit)) return true;
		cpu_relax();
		if (i % 64 == 0) {
			const uint64_t now = base_now_ns();
			if (!t0) t0 = now;
			else if (now - t0 > SPIN_NS) return false;
		}
	}
}

static void *worker(void *v) {
	worker_arg wa = *(worker_arg *)v;
	free(v);
	base_pool *p = wa.p;
	uint64_t seen = 0;
	for (;;) {
		if (!spin_gen(p, seen)) {
			pthread_mutex_lock(&p->mu);
			atomic_fetch_add(&p->sleepers, 1);
			while (atomic_load(&p->gen) == seen && !atomic_load(&p->quit)) pthread_cond_wait(&p->go, &p->mu);
			atomic_fetch_sub(&p->sleepers, 1);
			pthread_mutex_unlock(&p->mu);
		}
		if (atomic_load(&p->quit)) return NULL;
		seen = atomic_load_explicit(&p->gen, memory_order_acquire);
		p->fn(p->arg, wa.ith, p->n);
		if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->waiting)) {
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->done);
			pthread_mutex_unlock(&p->mu);
		}
	}
}

int base_pool_new(base_pool **out, int n_threads) {
	*out = NULL;
	if (n_threads < 1 || n_threads > 1024) return LANES_EINVAL;
	base_pool *p = calloc(1, sizeof *p);
	if (!p) return LANES_ENOMEM;
	p->n = n_threads;
	pthread_mutex_init(&p->mu, NULL);
	pthread_mutex_init(&p->run_mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	if (n_threads > 1) {
		p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
		if (!p->threads) { base_pool_free(p); return LANES_ENOMEM; }
	}
	for (int i = 1; i < n_threads; i++) {
		worker_arg *wa = malloc(sizeof *wa);
		if (!wa) { p->n = i; base_pool_free(p); return LANES_ENOMEM; }
		wa->p = p;
		wa->ith = i;
		if (pthread_create(&p->threads[i - 1], NULL, worker, wa)) {
			free(wa);
			p->n = i;
			base_pool_free(p);
			return LANES_ENOMEM;
		}
	}
	*out = p;
	return LANES_OK;
}

void base_pool_free(base_pool *p) {
	if (!p) return;
	pthread_mutex_lock(&p->mu);
	atomic_store(&p->quit, true);
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; i < p->n; i++) pthread_join(p->threads[i - 1], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_mutex_destroy(&p->run_mu);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	free(p->threads);
	free(p);
}

int base_pool_threads(const base_pool *p) { return p ? p->n : 1; }

void base_pool_run(base_pool *p, base_task_fn fn, void *arg) {
	if (!p || p->n == 1) { fn(arg, 0, 1); return; }
	if (p->shared) pthread_mutex_lock(&p->run_mu);
	p->fn = fn;
	p->arg = arg;
	atomic_store(&p->pending, p->n - 1);
	atomic_fetch_add_explicit(&p->gen, 1, memory_order_seq_cst);
	// A worker that went to sleep counted itself first (under mu), so it is seen here.
	if (atomic_load(&p->sleepers) > 0) {
		pthread_mutex_lock(&p->mu);
		pthread_cond_broadcast(&p->go);
		pthread_mutex_unlock(&p->mu);
	}
	fn(arg, 0, p->n);
	uint64_t t0 = 0;
	for (unsigned i = 1; atomic_load(&p->pending) > 0; i++) {
		cpu_relax();
		if (i % 64) continue;
		const uint64_t now = base_now_ns();
		if (!t0) t0 = now;
		else if (now - t0 > SPIN_NS) {
			pthread_mutex_lock(&p->mu);
			atomic_store(&p->waiting, true);
			while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->mu);
			atomic_store(&p->waiting, false);
			pthread_mutex_unlock(&p->mu);
			break;
		}
	}
	if (p->shared) pthread_mutex_unlock(&p->run_mu);
}

void base_pool_share(base_pool *p) { p->shared = true; }

void base_pool_wait(const _Atomic long long *done, long long target) {
	for (int spins = 0; atomic_load(done) < target; spins++) {
		if (spins < 20000) cpu_relax();
		else sched_yield();
	}
}

int base_cpu_count(void) {
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}

uint64_t base_available_memory(void) {
	FILE *f = fopen("/proc/meminfo", "r");
	if (!f) return 0;
	char line[256];
	unsigned long long kib = 0;
	bool found = false;
	while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
	fclose(f);
	uint64_t bytes;
	return found && ck_mul(kib, 1024, &bytes) ? bytes : 0;
}
