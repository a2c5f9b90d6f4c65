// server/net/work: the work threads. libmicrohttpd lets a suspended connection be given its
// reply from any thread and resumed from any thread, so a job runs here with its connection
// parked, and its end wakes it through net/park.c like every other wait.
#include "server/net/work.h"

#include <stdlib.h>

typedef struct srv_job srv_job;
struct srv_job {
	srv_job *next;
	void (*fn)(void *arg, bool stopping);
	void *arg;
	srv_handler *route;            // a route's job: arg is its connection
};

// One queue and its threads per class of work.
typedef struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	srv_job *head, *tail;          // queued, oldest first
	bool stop;
	pthread_t threads[SRV_WORK_PULLS > 2 ? SRV_WORK_PULLS : 2];
	int n_threads;
} work_queue;

struct srv_work {
	work_queue q[SRV_WORK__COUNT];
};

static const int queue_threads[SRV_WORK__COUNT] = {
	[SRV_WORK_GEN] = 2, [SRV_WORK_UTIL] = 1, [SRV_WORK_LOAD] = 1, [SRV_WORK_PULL] = SRV_WORK_PULLS,
};

static void *work_main(void *arg) {
	work_queue *w = arg;
	for (;;) {
		pthread_mutex_lock(&w->mu);
		while (!w->head && !w->stop) pthread_cond_wait(&w->cv, &w->mu);
		srv_job *j = w->head;
		if (j) {
			w->head = j->next;
			if (!w->head) w->tail = NULL;
		}
		const bool stop = w->stop;
		pthread_mutex_unlock(&w->mu);
		if (!j) return NULL;
		if (j->route) {
			// it runs unless the server stops, then the connection goes on as it left it
			if (!stop) j->route(j->arg);
			srv_park_worked(j->arg);
		} else {
			j->fn(j->arg, stop);
		}
		free(j);
	}
}

int srv_work_start(http_server *s, char *err, size_t errlen) {
	struct srv_work *all = calloc(1, sizeof *all);
	if (!all) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	s->work = all;
	for (int k = 0; k < SRV_WORK__COUNT; k++) {
		work_queue *w = &all->q[k];
		pthread_mutex_init(&w->mu, NULL);
		pthread_cond_init(&w->cv, NULL);
		for (int i = 0; i < queue_threads[k]; i++) {
			if (pthread_create(&w->threads[i], NULL, work_main, w)) return base_seterr(err, errlen, LANES_ENOMEM, "cannot start a work thread");
			w->n_threads++;
		}
	}
	return 0;
}

// Queues j; c, when set, is parked for SRV_WAIT_WORK first, under the queue's lock, so the
// job's end can only follow its park. 0, or LANES_ECANCELLED when the server stops.
static int post(work_queue *w, srv_job *j, srv_conn *c) {
	pthread_mutex_lock(&w->mu);
	if (w->stop) {
		pthread_mutex_unlock(&w->mu);
		return LANES_ECANCELLED;
	}
	if (c) srv_park(c, SRV_WAIT_WORK);
	if (w->tail) w->tail->next = j;
	else w->head = j;
	w->tail = j;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	return 0;
}

int srv_work_post(http_server *s, enum srv_work_class k, void (*fn)(void *arg, bool stopping), void *arg) {
	if (!s->work) return LANES_ECANCELLED;
	srv_job *j = calloc(1, sizeof *j);
	if (!j) return LANES_ENOMEM;
	j->fn = fn;
	j->arg = arg;
	const int rc = post(&s->work->q[k], j, NULL);
	if (rc) free(j);
	return rc;
}

// From a request's last call (its body is in): parks c for SRV_WAIT_WORK and runs route(c) on a
// thread of class k; the route replies, or parks c for what it waits for next.
static void work_run(srv_conn *c, enum srv_work_class k, srv_handler *route) {
	srv_job *j = calloc(1, sizeof *j);
	if (!j) {
		route(c); // on this thread, then
		return;
	}
	j->route = route;
	j->arg = c;
	if (post(&c->s->work->q[k], j, c)) free(j); // the server stops: neither replied nor parked, the connection closes
}

void srv_route_run(srv_conn *c) {
	const unsigned fl = c->rt->flags;
	if (fl & SRV_R_WORK) work_run(c, fl & SRV_R_UTIL ? SRV_WORK_UTIL : SRV_WORK_GEN, c->rt->fn);
	else c->rt->fn(c);
}

void srv_work_stop(http_server *s) {
	struct srv_work *all = s->work;
	if (!all) return;
	for (int k = 0; k < SRV_WORK__COUNT; k++) {
		work_queue *w = &all->q[k];
		pthread_mutex_lock(&w->mu);
		w->stop = true;
		pthread_cond_broadcast(&w->cv);
		pthread_mutex_unlock(&w->mu);
	}
	for (int k = 0; k < SRV_WORK__COUNT; k++) {
		work_queue *w = &all->q[k];
		for (int i = 0; i < w->n_threads; i++) pthread_join(w->threads[i], NULL);
		pthread_mutex_destroy(&w->mu);
		pthread_cond_destroy(&w->cv);
	}
	free(all);
	s->work = NULL;
}
