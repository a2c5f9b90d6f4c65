// server/net/park: the one way a connection waits. Whatever it waits for — a work thread, the
// engine, a peer, an adapter load or save, a pull — it is suspended by srv_park and resumed by
// srv_wake under one lock, so a wake is never lost (one that comes before its park is kept for
// it) and never doubled. The gate's hold on a kept-alive socket between requests is the
// socket's, not a request's, and stays in net/sock.c.
#include "server/net/base.h"

#include <microhttpd.h>

const char *const srv_wait_name[SRV_WAIT__COUNT] = {"none", "work", "engine", "peer", "load", "save", "pull", "model"};

// Under wait_mu: c's suspension is counted as waiting for kind.
static void count_park(srv_conn *c, enum srv_wait kind) {
	c->wait = kind;
	atomic_fetch_add(&c->s->parked[kind], 1);
	atomic_fetch_add(&c->s->parks[kind], 1);
}

// Under wait_mu: c's wait ends; libmicrohttpd runs it again (on_request, or its reply's reader).
static void resume(srv_conn *c, enum srv_wait woke) {
	http_server *s = c->s;
	atomic_fetch_sub(&s->parked[c->wait], 1);
	atomic_fetch_add(&s->wakes[c->wait], 1);
	c->wait = SRV_WAIT_NONE;
	c->woke = woke;
	MHD_resume_connection(c->mc);
}

bool srv_park(srv_conn *c, enum srv_wait kind) {
	const unsigned bit = 1u << kind;
	bool parked = true;
	pthread_mutex_lock(&c->s->wait_mu);
	if (c->wait == SRV_WAIT_WORK) {
		c->then = kind; // suspended already: srv_park_worked parks it for kind
	} else if (c->woken & bit) {
		c->woken &= ~bit;
		parked = false;
	} else {
		c->woke = SRV_WAIT_NONE;
		c->parked = true;
		count_park(c, kind);
		MHD_suspend_connection(c->mc);
	}
	pthread_mutex_unlock(&c->s->wait_mu);
	return parked;
}

void srv_wake(srv_conn *c, enum srv_wait kind) {
	pthread_mutex_lock(&c->s->wait_mu);
	if (c->wait == kind) resume(c, kind);
	else c->woken |= 1u << kind;
	pthread_mutex_unlock(&c->s->wait_mu);
}

enum srv_wait srv_woke(srv_conn *c) {
	pthread_mutex_lock(&c->s->wait_mu);
	const enum srv_wait w = c->woke;
	c->woke = SRV_WAIT_NONE;
	pthread_mutex_unlock(&c->s->wait_mu);
	return w;
}

void srv_park_worked(srv_conn *c) {
	http_server *s = c->s;
	pthread_mutex_lock(&s->wait_mu);
	const enum srv_wait k = c->then;
	const unsigned bit = k ? 1u << k : 0;
	c->then = SRV_WAIT_NONE;
	if (k && !(c->woken & bit)) { // the route waits on: still suspended, now for k
		atomic_fetch_sub(&s->parked[SRV_WAIT_WORK], 1);
		atomic_fetch_add(&s->wakes[SRV_WAIT_WORK], 1);
		count_park(c, k);
	} else {
		c->woken &= ~bit;
		resume(c, k ? k : SRV_WAIT_WORK);
	}
	pthread_mutex_unlock(&s->wait_mu);
}
