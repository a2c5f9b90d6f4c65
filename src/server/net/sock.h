// server/net/sock: the connections around libmicrohttpd — the listening socket and the gate
// thread that accepts on it, the limits per client address, every connection's deadlines, and
// each request head read with MSG_PEEK and judged before libmicrohttpd parses it. A head that
// libmicrohttpd would refuse with its own HTML, misread or wait on is answered here in the
// API's JSON shape; a sound one is handed to libmicrohttpd, which reads it again.
#ifndef LANES_SERVER_NET_SOCK_H
#define LANES_SERVER_NET_SOCK_H

#include "server/net/base.h"

#include <netinet/in.h>

// ---- the request head --------------------------------------------------------------------
#define SRV_HEAD_MAX 16384   // bytes of a request head, blank lines before it included
#define SRV_TARGET_MAX 8192  // bytes of its request-target
#define SRV_FIELDS_MAX 100   // header lines
#define SRV_PIECES_MAX 256   // header lines, query arguments and cookies: libmicrohttpd keeps a record of each
#define SRV_CHUNK_WINDOW 32768 // bytes of a chunked body the gate judges (at least) before libmicrohttpd reads it

typedef struct {
	size_t len;              // bytes of the whole head, blank lines before it included
	int status;              // a refusal's HTTP status (400, 413, 414, 431, 505); 0 when none
	enum srv_family family;  // the shape of its error: the API the path belongs to
	bool head_method;        // HEAD: a refusal carries no body
	bool chunked;            // Transfer-Encoding: chunked
	bool has_length;         // a Content-Length was sent; length is the first one
	uint64_t length;
	char msg[200];           // why it was refused
} srv_head;

// Judges the head at the start of p (n bytes; eof: no more will come). 1: whole, and
// libmicrohttpd will read it as written; 0: more bytes are needed; -1: refused (h->status,
// h->msg) — at the first byte that cannot belong to a sound head, with no wait for a line end.
int srv_head_scan(const unsigned char *p, size_t n, bool eof, srv_head *h);
// Judges a chunked body at the start of p (n bytes; eof: no more will come), its chunks, last
// chunk and trailer lines, as libmicrohttpd would read them. 1: whole, *wire its bytes; 0: more
// bytes are needed; -1: refused (h->status 400, or 413 past max_body bytes, and h->msg).
int srv_chunks_scan(const unsigned char *p, size_t n, bool eof, uint64_t max_body, srv_head *h, uint64_t *wire);

// ---- connections -------------------------------------------------------------------------
// Binds sa, listens, and starts the gate thread, which hands sound connections to s->mhd
// (started with MHD_USE_NO_LISTEN_SOCKET). Sets s->port. 0, or a negative code with a message.
int srv_gate_start(http_server *s, const struct sockaddr_in *sa, char *err, size_t errlen);
// Stops accepting, closes the connections the gate holds and hands back to libmicrohttpd those
// it keeps suspended, to be closed there: before srv_http_stop.
void srv_gate_stop(http_server *s);
// Frees what is left (after srv_http_stop). Accepts a server whose gate never started.
void srv_gate_free(http_server *s);

#endif
