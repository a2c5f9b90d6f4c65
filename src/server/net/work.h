// server/net/work: the work threads. A route that parses a body, renders a chat template and
// tokenizes a prompt may take seconds on a large request; it runs here while its connection
// is suspended, so that the connection threads keep serving every other connection (control
// reads first among them) meanwhile.
#ifndef LANES_SERVER_NET_WORK_H
#define LANES_SERVER_NET_WORK_H

#include "server/gen/gen.h"

#define SRV_WORK_THREADS 2

// Generation requests' parsing, and the utilities (tokenize, learning examples) whose bodies
// may cost more: each class has its own threads, so neither starves the other.
enum srv_work_class { SRV_WORK_GEN, SRV_WORK_UTIL, SRV_WORK__COUNT };

// Starts the work threads. 0, or a negative code with a message.
int srv_work_start(http_server *s, char *err, size_t errlen);
// From a request's last call (its body is in): suspends the connection and queues fn(c) for a
// work thread, which replies (or leaves a generation call waiting for the waker) and resumes it.
// A route run here must not suspend its connection itself: srv_gen's calls know how to wait.
enum MHD_Result srv_work_run(srv_conn *c, enum srv_work_class k, enum MHD_Result (*fn)(srv_conn *c));
// Lets the running routes finish, ends the queued ones unrun (their connections close), and
// joins the threads: after srv_waker_release (s->quit is set), before MHD_stop_daemon.
// Accepts a server whose work threads never started.
void srv_work_stop(http_server *s);

#endif
