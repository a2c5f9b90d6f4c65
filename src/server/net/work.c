// server/net/work: the work threads. libmicrohttpd lets a suspended connection be given its
// reply from any thread and resumed from any thread, so a route runs here with its
// connection suspended; when it returns, the connection is resumed — unless its generation
// call now waits for the engine, in which case the engine's notify resumes it (srv_gen_park).
#include "server/net/work.h"
#include "server/grid/grid.h"

#include <stdlib.h>

typedef struct srv_job srv_job;
struct srv_job {
	srv_job *next;
	srv_conn *c;
	enum MHD_Result (*fn)(srv_conn *c);
};

// One queue and its threads per class of work, so that one class never waits behind the other.
typedef struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	srv_job *head, *tail;          // queued, oldest first
	bool stop;
	pthread_t threads[SRV_WORK_THREADS];
	int n_threads;
} work_queue;

struct srv_work {
	work_queue q[SRV_WORK__COUNT];
};

static const int queue_threads[SRV_WORK__COUNT] = {[SRV_WORK_GEN] = SRV_WORK_THREADS, [SRV_WORK_UTIL] = 1};

// The route has answered (or ended): the connection goes back to libmicrohttpd.
static void job_done(srv_conn *c) {
	c->in_work = false;
	if (c->park) {
		c->park = false;
		if (srv_gen_park(c)) return; // resumed on the call's events
	} else if (c->park_fwd) {
		c->park_fwd = false;
		if (srv_grid_park(c)) return; // the grid's thread resumes it
	} else {
		c->worked = true; // answered, or to be closed
	}
	MHD_resume_connection(c->mc);
}

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
		if (!stop) {
			j->c->in_work = true;
			j->fn(j->c);
		}
		job_done(j->c);
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

enum MHD_Result srv_work_run(srv_conn *c, enum srv_work_class k, enum MHD_Result (*fn)(srv_conn *c)) {
	work_queue *w = &c->s->work->q[k];
	srv_job *j = calloc(1, sizeof *j);
	if (!j) return fn(c);
	j->c = c;
	j->fn = fn;
	pthread_mutex_lock(&w->mu);
	if (w->stop) { // the server is stopping: the connection closes
		pthread_mutex_unlock(&w->mu);
		free(j);
		return MHD_NO;
	}
	MHD_suspend_connection(c->mc);
	if (w->tail) w->tail->next = j;
	else w->head = j;
	w->tail = j;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	return MHD_YES;
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
