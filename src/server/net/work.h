// server/net/work: the work threads, the one queue of background work. A route that parses a
// body, renders a chat template and tokenizes a prompt may take seconds on a large request, an
// adapter's file is read and checked, a model is pulled: each runs here, its connection parked
// (net/park.c), so that the connection threads keep serving every other connection (control
// reads first among them) meanwhile; its end wakes the connection.
#ifndef LANES_SERVER_NET_WORK_H
#define LANES_SERVER_NET_WORK_H

#include "server/net/base.h"

// The classes of work, each with threads of its own, so that none starves another: generation
// requests' parsing, the utilities whose bodies may cost more (tokenize, learning examples),
// adapter loads, and pulls (which may last minutes).
enum srv_work_class { SRV_WORK_GEN, SRV_WORK_UTIL, SRV_WORK_LOAD, SRV_WORK_PULL, SRV_WORK__COUNT };
#define SRV_WORK_PULLS 2 // pulls running at once

// Starts the work threads. 0, or a negative code with a message.
int srv_work_start(http_server *s, char *err, size_t errlen);
// Runs fn(arg, false) on a thread of class k, in the order posted; once the server stops, a job
// not yet run gets fn(arg, true) instead, which only ends it (and wakes whoever waits on it).
// 0, or LANES_ECANCELLED (the server stops) / LANES_ENOMEM, fn never run.
int srv_work_post(http_server *s, enum srv_work_class k, void (*fn)(void *arg, bool stopping), void *arg);
// Runs c's route (c->rt) once its body is in: on a work thread of the route's class, c parked
// meanwhile, when the route parses, renders and tokenizes (SRV_R_WORK), else on this thread.
void srv_route_run(srv_conn *c);
// Lets the running jobs finish, ends the queued ones (fn(arg, true)), and joins the threads:
// after srv_waker_release (s->quit is set), before the daemon stops. Accepts a server whose work
// threads never started.
void srv_work_stop(http_server *s);

#endif
