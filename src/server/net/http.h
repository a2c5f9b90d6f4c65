// server/net/http: libmicrohttpd's daemon and its callbacks — a request's head, its body, the
// wait it goes on from, its end — turned into the daemon's hooks, so that nothing above net/
// names the library.
#ifndef LANES_SERVER_NET_HTTP_H
#define LANES_SERVER_NET_HTTP_H

#include "server/net/base.h"

typedef struct srv_http_hooks {
	// The head is in (url and method as sent): routes c (c->rt, c->allow, c->family, c->gen)
	// and judges it. 0, or -1 with e: refused before its body is read.
	int (*head)(srv_conn *c, const char *url, const char *method, srv_err *e);
	// The body is in (or none was sent): reply, park, or neither (the connection closes).
	srv_handler *body;
	// The request ended (whole: its reply went out whole): logs it and frees what the layers
	// above hold of it; net/ frees c after.
	void (*ended)(srv_conn *c, bool whole);
} srv_http_hooks;

// Starts libmicrohttpd (epoll in cfg's thread pool, no listening socket: the gate hands it
// connections) with h (which must outlive it). 0, or LANES_EIO with a message.
int srv_http_start(http_server *s, const srv_http_hooks *h, char *err, size_t errlen);
// Stops it: after every parked connection was woken (it refuses to stop with one suspended).
// Accepts a server whose daemon never started.
void srv_http_stop(http_server *s);

#endif
