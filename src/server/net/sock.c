// server/net/sock: the connections around libmicrohttpd 0.9.75, which answers a head it cannot
// parse with HTML (a bad Content-Length: its status line twice) and waits for a line end behind
// junk. The gate thread accepts, counts connections per address and peeks at each head (the next
// one on a kept-alive connection too): a bad one gets JSON here, a sound one goes to libmicrohttpd.
#include "server/net/sock.h"
#include "server/net/mhd.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

// ---- the request head -------------------------------------------------------------------------

#define METHOD_MAX 32

static bool tchar(unsigned char c) {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

// A byte of a request-target or of a header value (obs-text included, as libmicrohttpd takes it).
static bool vchar(unsigned char c) { return c > 0x20 && c != 0x7f; }

static int refuse(srv_head *h, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(srv_head *h, int status, const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(h->msg, sizeof h->msg, fmt, ap);
	va_end(ap);
	h->status = status;
	return -1;
}

static int bad_line(srv_head *h, const unsigned char *p, size_t i) {
	return refuse(h, 400, "malformed request line (byte 0x%02x at offset %zu): a request line is METHOD PATH HTTP/1.1", p[i], i);
}

static bool name_is(const unsigned char *p, size_t n, const char *name) {
	return n == strlen(name) && !strncasecmp((const char *)p, name, n);
}

// One line end at p[i] (CRLF, or LF as libmicrohttpd also takes it): its length, 0 when more
// bytes are needed, -1 when a CR stands alone.
static int line_end(const unsigned char *p, size_t i, size_t n) {
	if (p[i] == '\n') return 1;
	if (i + 1 >= n) return 0;
	return p[i + 1] == '\n' ? 2 : -1;
}

int srv_head_scan(const unsigned char *p, size_t n, bool eof, srv_head *h) {
	memset(h, 0, sizeof *h);
	h->family = SRV_OPENAI;
	const size_t lim = n < SRV_HEAD_MAX ? n : SRV_HEAD_MAX;
	size_t i = 0;
	int e;
	// blank lines before the request line are skipped (RFC 9112, 2.2), as libmicrohttpd does
	while (i < lim && (p[i] == '\r' || p[i] == '\n')) {
		if ((e = line_end(p, i, lim)) == 0) goto more;
		if (e < 0) return bad_line(h, p, i);
		i += (size_t)e;
	}
	// the method: a token
	const size_t m0 = i;
	while (i < lim && tchar(p[i]) && i - m0 < METHOD_MAX) i++;
	if (i >= lim) goto more;
	if (i - m0 >= METHOD_MAX) return refuse(h, 400, "malformed request line: the method is longer than %d bytes", METHOD_MAX);
	if (p[i] != ' ' || i == m0) return bad_line(h, p, i);
	h->head_method = i - m0 == 4 && !memcmp(p + m0, "HEAD", 4);
	// the request-target: visible bytes up to one space
	const size_t t0 = ++i;
	size_t pieces = 0;
	bool query = false;
	while (i < lim && vchar(p[i])) {
		if (i - t0 >= SRV_TARGET_MAX) {
			h->family = srv_family_of((const char *)p + t0, i - t0);
			return refuse(h, 414, "the request target is longer than %d bytes", SRV_TARGET_MAX);
		}
		if (p[i] == '?' && !query) query = true, pieces++;
		else if (p[i] == '&' && query) pieces++; // libmicrohttpd keeps each query argument as a record
		i++;
	}
	h->family = srv_family_of((const char *)p + t0, i - t0);
	if (i >= lim) goto more;
	if (p[i] != ' ' || i == t0) return bad_line(h, p, i);
	// the version: HTTP/DIGIT.DIGIT, then the line's end
	i++;
	for (size_t k = 0; k < 8; k++) {
		if (i + k >= lim) goto more;
		const unsigned char c = p[i + k];
		const bool ok = k < 5 ? c == (unsigned char)"HTTP/"[k] : k == 6 ? c == '.' : c >= '0' && c <= '9';
		if (!ok && k < 5)
			return refuse(h, 400, "malformed request line (byte 0x%02x at offset %zu): a request line is METHOD PATH HTTP/1.1, "
				      "a space in PATH written %%20", c, i + k);
		if (!ok) return refuse(h, 400, "malformed request line: the version is HTTP/1.1 or HTTP/1.0 (byte 0x%02x at offset %zu)", c, i + k);
	}
	const char major = (char)p[i + 5], minor = (char)p[i + 7];
	i += 8;
	if (i >= lim) goto more;
	if (p[i] != '\r' && p[i] != '\n') return bad_line(h, p, i);
	if ((e = line_end(p, i, lim)) == 0) goto more;
	if (e < 0) return bad_line(h, p, i + 1);
	i += (size_t)e;
	if (major != '1') return refuse(h, 505, "HTTP/%c.%c is not supported: send HTTP/1.1 or HTTP/1.0", major, minor);
	// the header lines, up to an empty one
	int fields = 0;
	for (;;) {
		if (i >= lim) goto more;
		if (p[i] == '\r' || p[i] == '\n') {
			if ((e = line_end(p, i, lim)) == 0) goto more;
			if (e < 0) return refuse(h, 400, "malformed header line: a CR not followed by LF (offset %zu)", i);
			h->len = i + (size_t)e;
			return 1;
		}
		if (p[i] == ' ' || p[i] == '\t')
			return refuse(h, 400, "malformed header line: a line that starts with whitespace (a folded value) is not accepted");
		const size_t n0 = i;
		while (i < lim && tchar(p[i])) i++;
		if (i >= lim) goto more;
		if (p[i] != ':' || i == n0)
			return refuse(h, 400, "malformed header line (byte 0x%02x at offset %zu): a header line is Name: value%s", p[i], i,
				      p[i] == ' ' || p[i] == '\t' ? ", with no space before the colon" : "");
		const unsigned char *name = p + n0;
		const size_t nl = i - n0;
		i++;
		while (i < lim && (p[i] == ' ' || p[i] == '\t')) i++;
		const size_t v0 = i;
		while (i < lim && (vchar(p[i]) || p[i] == ' ' || p[i] == '\t')) i++;
		if (i >= lim) goto more;
		const size_t v1 = i;
		if ((p[i] != '\r' && p[i] != '\n') || (e = line_end(p, i, lim)) < 0)
			return refuse(h, 400, "malformed header line: the value of %.*s holds the control byte 0x%02x", (int)(nl < 64 ? nl : 64),
				      (const char *)name, p[i]);
		if (e == 0) goto more;
		i += (size_t)e;
		if (++fields > SRV_FIELDS_MAX) return refuse(h, 431, "more than %d header lines", SRV_FIELDS_MAX);
		pieces++;
		if (name_is(name, nl, "Content-Length")) {
			// libmicrohttpd reads the first one, digits and nothing else; two that differ are refused later
			uint64_t v = 0;
			bool over = false;
			for (size_t k = v0; k < v1; k++) {
				if (p[k] < '0' || p[k] > '9') {
					return refuse(h, 400, "Content-Length '%.*s' is not a decimal number", (int)(v1 - v0 < 40 ? v1 - v0 : 40),
						      (const char *)p + v0);
				}
				over |= __builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, (uint64_t)(p[k] - '0'), &v);
			}
			if (v0 == v1) return refuse(h, 400, "Content-Length is empty: it is a decimal number of bytes");
			if (over)
				return refuse(h, 413, "the request body (Content-Length %.*s) is larger than any this server accepts",
					      (int)(v1 - v0 < 40 ? v1 - v0 : 40), (const char *)p + v0);
			if (!h->has_length) h->has_length = true, h->length = v;
		} else if (name_is(name, nl, "Transfer-Encoding")) {
			h->chunked |= name_is(p + v0, v1 - v0, "chunked");
		} else if (name_is(name, nl, "Cookie")) {
			for (size_t k = v0; k < v1; k++) pieces += p[k] == ';'; // a record per cookie
		}
		if (pieces > SRV_PIECES_MAX)
			return refuse(h, 431, "more than %d header lines, query arguments and cookies together", SRV_PIECES_MAX);
	}
more:
	if (n >= SRV_HEAD_MAX) return refuse(h, 431, "the request head is larger than %d bytes", SRV_HEAD_MAX);
	if (eof) return refuse(h, 400, "malformed or incomplete HTTP request: the connection closed before the request head ended");
	return 0;
}

#define CHUNK_LINE_MAX 1024 // a chunk-size line with its extensions, or a trailer line

int srv_chunks_scan(const unsigned char *p, size_t n, bool eof, uint64_t max_body, srv_head *h, uint64_t *wire) {
	h->status = 0;
	h->msg[0] = 0;
	size_t i = 0;
	uint64_t body = 0;
	size_t l0 = 0; // where the line being read began (SIZE_MAX: in a chunk's data)
	int e;
	for (;;) {
		// chunk-size [BWS ; chunk-ext] CRLF
		l0 = i;
		uint64_t size = 0;
		bool over = false;
		while (i < n && isxdigit(p[i])) {
			const unsigned d = p[i] <= '9' ? (unsigned)(p[i] - '0') : (unsigned)((p[i] | 0x20) - 'a' + 10);
			over |= size >> 60 != 0;
			size = size << 4 | d;
			i++;
		}
		if (i >= n) goto more;
		if (i == l0) return refuse(h, 400, "malformed chunked body: a chunk size is hex digits (byte 0x%02x at body offset %zu)", p[i], i);
		while (i < n && (p[i] == ' ' || p[i] == '\t')) i++;
		if (i < n && p[i] == ';')
			while (i < n && (vchar(p[i]) || p[i] == ' ' || p[i] == '\t')) i++;
		if (i >= n) goto more;
		if ((p[i] != '\r' && p[i] != '\n') || (e = line_end(p, i, n)) < 0)
			return refuse(h, 400, "malformed chunked body: the chunk size line holds byte 0x%02x (body offset %zu)", p[i], i);
		if (e == 0) goto more;
		i += (size_t)e;
		if (over || size > max_body || body + size > max_body)
			return refuse(h, 413, "the request body is larger than the limit of %llu bytes", (unsigned long long)max_body);
		body += size;
		if (!size) break;
		// chunk-data CRLF
		l0 = SIZE_MAX;
		if (size > n - i) goto more;
		i += (size_t)size;
		if (i >= n) goto more;
		if ((p[i] != '\r' && p[i] != '\n') || (e = line_end(p, i, n)) < 0)
			return refuse(h, 400, "malformed chunked body: a chunk's data is longer than its size (body offset %zu)", i);
		if (e == 0) goto more;
		i += (size_t)e;
	}
	// trailer lines (name: value), then an empty line
	for (;;) {
		if (i >= n) goto more;
		if (p[i] == '\r' || p[i] == '\n') {
			if ((e = line_end(p, i, n)) == 0) goto more;
			if (e < 0) return refuse(h, 400, "malformed chunked body: a CR not followed by LF after the last chunk");
			*wire = i + (size_t)e;
			return 1;
		}
		l0 = i;
		while (i < n && tchar(p[i])) i++;
		if (i >= n) goto more;
		if (p[i] != ':' || i == l0)
			return refuse(h, 400, "malformed chunked body: a trailer line is Name: value (byte 0x%02x at body offset %zu)", p[i], i);
		while (i < n && (vchar(p[i]) || p[i] == ' ' || p[i] == '\t')) i++;
		if (i >= n) goto more;
		if ((p[i] != '\r' && p[i] != '\n') || (e = line_end(p, i, n)) < 0)
			return refuse(h, 400, "malformed chunked body: a trailer line holds the control byte 0x%02x", p[i]);
		if (e == 0) goto more;
		i += (size_t)e;
	}
more:
	if (l0 != SIZE_MAX && n - l0 > CHUNK_LINE_MAX)
		return refuse(h, 400, "malformed chunked body: a chunk size or trailer line longer than %d bytes", CHUNK_LINE_MAX);
	if (eof) return refuse(h, 400, "malformed chunked body: the connection closed before its last chunk");
	return 0;
}

// ---- connections ------------------------------------------------------------------------------

#define TICK_MS 100
#define LINGER_US 2000000 // a refused client's bytes are read and dropped this long before closing
#define ACCEPT_BATCH 64

enum sock_phase {
	SOCK_HEAD,   // the gate peeks at its first head; libmicrohttpd has not seen it
	SOCK_ADDING, // given to libmicrohttpd, which has not yet started it
	SOCK_MHD,    // libmicrohttpd's: a request arriving or answered, or a next one it reads unjudged
	SOCK_KEPT,   // kept alive, suspended in libmicrohttpd; the gate peeks at its next head
	SOCK_LINGER, // the gate answered it: read and dropped until the client closes, then closed
};

typedef struct srv_sock srv_sock;
struct srv_sock {
	srv_sock *prev, *next;
	srv_sock *due;                 // the tick's list of connections whose deadline passed
	int fd;
	struct sockaddr_in sa;         // the client's address
	enum sock_phase phase;         // (under mu) changed by the gate or by libmicrohttpd's thread alone
	struct MHD_Connection *mc;     // libmicrohttpd's connection (NULL until it started)
	uint64_t deadline_us;          // the head and body must be in by then; idle ones close then (0: none due)
	uint64_t head_len;             // bytes of the head the gate handed over (0: libmicrohttpd read it unjudged)
	bool with_body;                // ... and of the chunked body after it, judged too
	uint64_t req_bytes;            // bytes of the current request on the wire (UINT64_MAX: unknown)
	uint64_t expect;               // bytes libmicrohttpd read for the requests so far (UINT64_MAX: unknown)
	bool pending;                  // counted in socks_pending: a request arriving or not yet answered
	bool received;                 // the current request was read whole
	bool unread;                   // it was answered before its body: what follows is that body, not junk
	bool timed_out;                // its deadline passed: closed with a 408
	bool said;                     // the gate wrote its last reply: libmicrohttpd's close adds none
	bool begun;                    // KEPT: bytes of the next request came (its head deadline runs)
	uint64_t sent_mark, recv_mark; // TCP bytes sent and received when the last request was answered
};

struct srv_gate {
	pthread_mutex_t mu;            // the list, the counts, the map and every connection's phase and marks
	srv_sock *socks;               // every open connection
	int open;                      // connections open, the gate's and libmicrohttpd's
	bool armed;                    // the listening socket is in the epoll set (under the connection limit)
	bool stopping;
	srv_sock **adding;             // by fd: given to libmicrohttpd, not yet started there
	int n_adding;
	struct ip_count {
		uint32_t addr, n;
	} *ips;                        // connections per client address (open addressing; NULL: no limit)
	size_t ip_mask;
	int lfd, ep, quit_fd;
	pthread_t thread;
	bool started;
	unsigned char peek[SRV_HEAD_MAX + SRV_CHUNK_WINDOW];
};

static size_t ip_slot(const struct srv_gate *g, uint32_t addr) { return (size_t)splitmix64(addr) & g->ip_mask; }

static struct ip_count *ip_find(struct srv_gate *g, uint32_t addr) {
	size_t i = ip_slot(g, addr);
	while (g->ips[i].n && g->ips[i].addr != addr) i = (i + 1) & g->ip_mask;
	return &g->ips[i];
}

static void ip_add(struct srv_gate *g, uint32_t addr) {
	if (!g->ips) return;
	struct ip_count *e = ip_find(g, addr);
	e->addr = addr;
	e->n++;
}

// Deletion by backward shift keeps every probe chain whole without tombstones.
static void ip_del(struct srv_gate *g, uint32_t addr) {
	if (!g->ips) return;
	struct ip_count *e = ip_find(g, addr);
	if (!e->n || --e->n) return;
	size_t i = (size_t)(e - g->ips), j = i;
	for (;;) {
		j = (j + 1) & g->ip_mask;
		if (!g->ips[j].n) break;
		const size_t k = ip_slot(g, g->ips[j].addr);
		if ((j > i && (k <= i || k > j)) || (j < i && k <= i && k > j)) {
			g->ips[i] = g->ips[j];
			i = j;
		}
	}
	g->ips[i].n = 0;
}

static void tcp_bytes(int fd, uint64_t *sent, uint64_t *recvd) {
	struct tcp_info ti;
	socklen_t len = sizeof ti;
	memset(&ti, 0, sizeof ti);
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len)) ti.tcpi_bytes_sent = ti.tcpi_bytes_received = 0;
	*sent = ti.tcpi_bytes_sent;
	*recvd = ti.tcpi_bytes_received;
}

// Bytes the application has read from fd (a client's FIN counts one when seen); UINT64_MAX
// when the kernel will not say.
static uint64_t bytes_read(int fd) {
	for (int tries = 0; tries < 4; tries++) {
		uint64_t s, r1, r2;
		int inq = 0;
		tcp_bytes(fd, &s, &r1);
		if (ioctl(fd, SIOCINQ, &inq)) return UINT64_MAX;
		tcp_bytes(fd, &s, &r2);
		if (r1 == r2 && inq >= 0 && (uint64_t)inq <= r1) return r1 - (uint64_t)inq;
	}
	return UINT64_MAX;
}

// Under mu.
static void sock_pending(http_server *s, srv_sock *k, bool on) {
	if (k->pending == on) return;
	k->pending = on;
	atomic_fetch_add(&s->socks_pending, on ? 1 : -1);
}

static void gate_watch(struct srv_gate *g, srv_sock *k) {
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = k};
	epoll_ctl(g->ep, EPOLL_CTL_ADD, k->fd, &ev);
}

// Under mu: the listening socket is polled while there is room for one more connection.
static void gate_arm(http_server *s) {
	struct srv_gate *g = s->gate;
	const bool want = !g->stopping && g->open < s->cfg.max_connections;
	if (want == g->armed || g->lfd < 0) return;
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &g->lfd};
	if (!epoll_ctl(g->ep, want ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, g->lfd, &ev)) g->armed = want;
}

// Under mu: k leaves the list and the counts.
static void sock_unlink(http_server *s, srv_sock *k) {
	struct srv_gate *g = s->gate;
	sock_pending(s, k, false);
	if (k->prev) k->prev->next = k->next;
	else g->socks = k->next;
	if (k->next) k->next->prev = k->prev;
	g->open--;
	ip_del(g, k->sa.sin_addr.s_addr);
	gate_arm(s);
}

// A connection libmicrohttpd never had: closed and forgotten.
static void sock_drop(http_server *s, srv_sock *k) {
	pthread_mutex_lock(&s->gate->mu);
	sock_unlink(s, k);
	pthread_mutex_unlock(&s->gate->mu);
	close(k->fd);
	free(k);
}

// The connection goes (back) to libmicrohttpd: started there, or resumed.
static void sock_give(http_server *s, srv_sock *k, uint64_t head_len, bool with_body) {
	struct srv_gate *g = s->gate;
	epoll_ctl(g->ep, EPOLL_CTL_DEL, k->fd, NULL);
	pthread_mutex_lock(&g->mu);
	k->head_len = head_len;
	k->with_body = with_body;
	struct MHD_Connection *mc = k->mc;
	k->phase = mc ? SOCK_MHD : SOCK_ADDING;
	if (!mc && k->fd < g->n_adding) g->adding[k->fd] = k;
	pthread_mutex_unlock(&g->mu);
	if (mc) {
		MHD_resume_connection(mc);
		return;
	}
	if (k->fd >= g->n_adding || MHD_add_connection(s->mhd, k->fd, (const struct sockaddr *)&k->sa, sizeof k->sa) != MHD_YES) {
		// libmicrohttpd closed the socket (or it was never given)
		pthread_mutex_lock(&g->mu);
		if (k->fd < g->n_adding) g->adding[k->fd] = NULL;
		sock_unlink(s, k);
		pthread_mutex_unlock(&g->mu);
		if (k->fd >= g->n_adding) close(k->fd);
		free(k);
	}
}

// Reads and drops what the client has sent; true when it has closed (or failed).
static bool sock_drain(struct srv_gate *g, int fd) {
	for (;;) {
		ssize_t r = recv(fd, g->peek, sizeof g->peek, MSG_DONTWAIT);
		if (r > 0) continue;
		return r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
	}
}

// The lingering connection ends: closed here, or handed back to libmicrohttpd to close.
static void sock_finish(http_server *s, srv_sock *k) {
	if (!k->mc) {
		sock_drop(s, k);
		return;
	}
	sock_drain(s->gate, k->fd);
	shutdown(k->fd, SHUT_RDWR); // libmicrohttpd reads the end at once and closes
	sock_give(s, k, 0, false);
}

// e in f's shape with status, written on fd (with its Retry-After when it has one).
static void sock_error(int fd, enum srv_family f, int status, const srv_err *e, bool head_only) {
	int st;
	json_t *body = srv_error_body(f, e, &st);
	char *txt = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	char ra[32] = "";
	if (srv_retry_after(e->kind) > 0) snprintf(ra, sizeof ra, "Retry-After: %d\r\n", srv_retry_after(e->kind));
	if (txt) srv_raw_reply(fd, status, ra, txt, head_only);
	free(txt);
}

static void timeout_error(http_server *s, srv_err *e) {
	srv_fail(e, SRV_E_BAD_REQUEST, NULL, "the request did not arrive within %g s (%s)", s->cfg.header_timeout_s,
		 HTTP_SETTING(&s->cfg, header_timeout_s));
}

// The gate's own reply, then the client's bytes are read and dropped until it closes, so that
// the close sends no reset that could cost the client the reply.
static void sock_say(http_server *s, srv_sock *k, enum srv_family f, int status, const srv_err *e, bool head_only) {
	LOG_INFO(SRV_MOD, "(no request) %d %s", status, e->msg); // the access log's line for a head refused
	sock_error(k->fd, f, status, e, head_only);
	shutdown(k->fd, SHUT_WR);
	pthread_mutex_lock(&s->gate->mu);
	sock_pending(s, k, false); // answered: a drain need not wait for it
	k->phase = SOCK_LINGER;
	k->said = true;
	k->deadline_us = base_now_us() + LINGER_US;
	pthread_mutex_unlock(&s->gate->mu);
	if (sock_drain(s->gate, k->fd)) sock_finish(s, k);
}

static void sock_timeout(http_server *s, srv_sock *k) {
	srv_err e;
	timeout_error(s, &e);
	sock_say(s, k, SRV_OPENAI, 408, &e, false);
}

// A connection that went quiet or away before its head: closed with nothing to say.
static void sock_quiet(http_server *s, srv_sock *k) {
	if (!k->mc) {
		sock_drop(s, k);
		return;
	}
	shutdown(k->fd, SHUT_RD); // libmicrohttpd reads the end and closes
	sock_give(s, k, 0, false);
}

// New bytes, a half-close or an error on a connection whose head the gate awaits.
static void sock_event(http_server *s, srv_sock *k, uint32_t events) {
	struct srv_gate *g = s->gate;
	pthread_mutex_lock(&g->mu);
	const enum sock_phase phase = k->phase;
	pthread_mutex_unlock(&g->mu);
	if (phase == SOCK_LINGER) {
		if (sock_drain(g, k->fd) || (events & (EPOLLHUP | EPOLLERR))) sock_finish(s, k);
		return;
	}
	if (events & EPOLLERR) {
		sock_quiet(s, k);
		return;
	}
	ssize_t r = recv(k->fd, g->peek, sizeof g->peek, MSG_PEEK | MSG_DONTWAIT);
	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
		if (events & (EPOLLHUP | EPOLLRDHUP)) sock_quiet(s, k);
		return;
	}
	if (r <= 0) {
		sock_quiet(s, k);
		return;
	}
	if (phase == SOCK_KEPT) {
		// the next request began: the idle deadline gives way to --header-timeout from now
		pthread_mutex_lock(&g->mu);
		if (!k->begun) k->deadline_us = base_now_us() + (uint64_t)(s->cfg.header_timeout_s * 1e6);
		k->begun = true;
		pthread_mutex_unlock(&g->mu);
	}
	srv_head h;
	const bool eof = (events & (EPOLLHUP | EPOLLRDHUP)) != 0;
	int v = srv_head_scan(g->peek, (size_t)r, eof, &h);
	uint64_t body = 0;
	// a chunked body is judged too while it fits the window; past it libmicrohttpd reads the rest
	if (v > 0 && h.chunked && !h.has_length && (size_t)r < sizeof g->peek)
		v = srv_chunks_scan(g->peek + h.len, (size_t)r - h.len, eof, s->cfg.max_body, &h, &body);
	if (v > 0) sock_give(s, k, h.len + body, body != 0);
	else if (v < 0) {
		srv_err e;
		srv_fail(&e, h.status == 413 ? SRV_E_TOO_LARGE : SRV_E_BAD_REQUEST, NULL, "%s", h.msg);
		sock_say(s, k, h.family, h.status, &e, h.head_method);
	}
}

static void gate_accept(http_server *s) {
	struct srv_gate *g = s->gate;
	for (int b = 0; b < ACCEPT_BATCH; b++) {
		pthread_mutex_lock(&g->mu);
		const bool room = g->open < s->cfg.max_connections && !g->stopping;
		pthread_mutex_unlock(&g->mu);
		if (!room) return; // past --max-connections the rest wait in the kernel's queue
		struct sockaddr_in sa;
		socklen_t sl = sizeof sa;
		int fd = accept4(g->lfd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED) continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				// out of descriptors: the kernel's queue holds the rest until the next tick
				pthread_mutex_lock(&g->mu);
				if (g->armed && !epoll_ctl(g->ep, EPOLL_CTL_DEL, g->lfd, NULL)) g->armed = false;
				pthread_mutex_unlock(&g->mu);
			}
			return;
		}
		srv_sock *k = calloc(1, sizeof *k);
		pthread_mutex_lock(&g->mu);
		const struct ip_count *ic = g->ips ? ip_find(g, sa.sin_addr.s_addr) : NULL;
		if (!k || (ic && ic->n >= (uint32_t)s->cfg.max_per_ip)) {
			// past --max-connections-per-ip: a 429 without reading the request, and closed at once,
			// so that one address cannot hold more than its share (out of memory: closed)
			pthread_mutex_unlock(&g->mu);
			if (k) {
				srv_err e;
				srv_fail(&e, SRV_E_BUSY, NULL, "too many connections from this address (%s %d): retry shortly",
					 HTTP_SETTING(&s->cfg, max_per_ip), s->cfg.max_per_ip);
				sock_error(fd, SRV_OPENAI, 429, &e, false);
			}
			close(fd);
			free(k);
			continue;
		}
		if (fd >= g->n_adding) {
			int n = g->n_adding ? g->n_adding : 1024;
			while (n <= fd) n *= 2;
			srv_sock **a = realloc(g->adding, (size_t)n * sizeof *a);
			if (a) {
				memset(a + g->n_adding, 0, (size_t)(n - g->n_adding) * sizeof *a);
				g->adding = a;
				g->n_adding = n;
			}
		}
		k->fd = fd;
		k->sa = sa;
		k->phase = SOCK_HEAD;
		k->deadline_us = base_now_us() + (uint64_t)(s->cfg.header_timeout_s * 1e6);
		sock_pending(s, k, true);
		k->next = g->socks;
		if (g->socks) g->socks->prev = k;
		g->socks = k;
		g->open++;
		ip_add(g, sa.sin_addr.s_addr);
		gate_arm(s);
		pthread_mutex_unlock(&g->mu);
		gate_watch(g, k);
	}
}

// Connections past their deadline: the gate's are answered 408 (or closed when nothing came),
// lingering ones closed; one in libmicrohttpd is shut for reading, so that it closes there
// (and its last word is the 408).
static void gate_tick(http_server *s, uint64_t now) {
	struct srv_gate *g = s->gate;
	srv_sock *due = NULL;
	pthread_mutex_lock(&g->mu);
	gate_arm(s);
	for (srv_sock *k = g->socks; k; k = k->next) {
		if (!k->deadline_us || now < k->deadline_us || k->phase == SOCK_ADDING) continue;
		if (k->phase == SOCK_MHD) {
			k->deadline_us = 0;
			k->timed_out = true;
			shutdown(k->fd, SHUT_RD);
			continue;
		}
		k->due = due;
		due = k;
	}
	pthread_mutex_unlock(&g->mu);
	while (due) { // the gate's own: no other thread changes them now
		srv_sock *k = due;
		due = k->due;
		if (k->phase == SOCK_LINGER) {
			sock_finish(s, k);
			continue;
		}
		ssize_t r = recv(k->fd, g->peek, 1, MSG_PEEK | MSG_DONTWAIT);
		if (r > 0) sock_timeout(s, k);
		else sock_quiet(s, k);
	}
}

static void *gate_main(void *arg) {
	http_server *s = arg;
	struct srv_gate *g = s->gate;
	struct epoll_event evs[64];
	uint64_t next_tick = 0;
	for (;;) {
		int n = epoll_wait(g->ep, evs, 64, TICK_MS);
		if (n < 0 && errno != EINTR) break;
		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr == &g->quit_fd) return NULL;
			if (evs[i].data.ptr == &g->lfd) gate_accept(s);
			else sock_event(s, evs[i].data.ptr, evs[i].events);
		}
		const uint64_t now = base_now_us();
		if (now < next_tick) continue;
		next_tick = now + TICK_MS * 1000;
		gate_tick(s, now);
	}
	return NULL;
}

int srv_gate_start(http_server *s, const struct sockaddr_in *sa, char *err, size_t errlen) {
	struct srv_gate *g = calloc(1, sizeof *g);
	if (!g) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	s->gate = g;
	pthread_mutex_init(&g->mu, NULL);
	g->lfd = g->ep = g->quit_fd = -1;
	if (s->cfg.max_per_ip > 0) {
		size_t cap = 64;
		while (cap < 2 * (size_t)s->cfg.max_connections + 2) cap *= 2;
		g->ips = calloc(cap, sizeof *g->ips);
		g->ip_mask = cap - 1;
		if (!g->ips) return base_seterr(err, errlen, LANES_ENOMEM, "out of memory");
	}
	g->ep = epoll_create1(EPOLL_CLOEXEC);
	g->quit_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	g->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (g->ep < 0 || g->quit_fd < 0 || g->lfd < 0) return base_seterr(err, errlen, LANES_EIO, "socket: %s", strerror(errno));
	int one = 1;
	setsockopt(g->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(g->lfd, (const struct sockaddr *)sa, sizeof *sa) || listen(g->lfd, SOMAXCONN)) {
		// each cause names the setting that fixes it
		if (errno == EADDRINUSE)
			return base_seterr(err, errlen, LANES_EIO,
					   "cannot listen on %s:%d: the port is in use (another server?); pick another with --port N (make run PORT=N), or --port 0 for any free one",
					   s->host_addr, s->cfg.port);
		if (errno == EACCES)
			return base_seterr(err, errlen, LANES_EIO, "cannot listen on %s:%d: ports below 1024 need privileges; pick another with --port N (make run PORT=N)",
					   s->host_addr, s->cfg.port);
		return base_seterr(err, errlen, LANES_EIO, "cannot listen on %s:%d: %s; --host names an address of this machine (127.0.0.1, 0.0.0.0 for all)",
				   s->host_addr, s->cfg.port, strerror(errno));
	}
	struct sockaddr_in got;
	socklen_t gl = sizeof got;
	s->port = getsockname(g->lfd, (struct sockaddr *)&got, &gl) ? s->cfg.port : ntohs(got.sin_port);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &g->quit_fd};
	if (epoll_ctl(g->ep, EPOLL_CTL_ADD, g->quit_fd, &ev)) return base_seterr(err, errlen, LANES_EIO, "epoll_ctl: %s", strerror(errno));
	pthread_mutex_lock(&g->mu);
	gate_arm(s);
	pthread_mutex_unlock(&g->mu);
	if (pthread_create(&g->thread, NULL, gate_main, s)) return base_seterr(err, errlen, LANES_ENOMEM, "cannot start the gate thread");
	g->started = true;
	return 0;
}

void srv_gate_stop(http_server *s) {
	struct srv_gate *g = s->gate;
	if (!g) return;
	pthread_mutex_lock(&g->mu);
	g->stopping = true;
	gate_arm(s);
	pthread_mutex_unlock(&g->mu);
	if (g->started) {
		uint64_t one = 1;
		ssize_t w = write(g->quit_fd, &one, sizeof one);
		(void)w;
		pthread_join(g->thread, NULL);
		g->started = false;
	}
	// what the gate held: its own connections closed, libmicrohttpd's suspended ones resumed to close there
	srv_sock *held = NULL;
	pthread_mutex_lock(&g->mu);
	for (srv_sock *k = g->socks; k; k = k->next)
		if (k->phase == SOCK_HEAD || k->phase == SOCK_KEPT || k->phase == SOCK_LINGER) k->due = held, held = k;
	pthread_mutex_unlock(&g->mu);
	while (held) {
		srv_sock *k = held;
		held = k->due;
		if (k->mc) shutdown(k->fd, SHUT_RDWR);
		sock_quiet(s, k);
	}
}

void srv_gate_free(http_server *s) {
	struct srv_gate *g = s->gate;
	if (!g) return;
	srv_gate_stop(s);
	while (g->socks) { // given to libmicrohttpd but never started there
		srv_sock *k = g->socks;
		g->socks = k->next;
		free(k);
	}
	if (g->lfd >= 0) close(g->lfd);
	if (g->ep >= 0) close(g->ep);
	if (g->quit_fd >= 0) close(g->quit_fd);
	free(g->adding);
	free(g->ips);
	pthread_mutex_destroy(&g->mu);
	free(g);
	s->gate = NULL;
}

// ---- libmicrohttpd's side -----------------------------------------------------------------------

// A reply written straight to the socket as libmicrohttpd closes it: for bytes that never
// became a request (a malformed next request it read unjudged) and for a request cut by its
// deadline, where libmicrohttpd itself would close with nothing sent.
static void sock_last_word(http_server *s, srv_sock *k) {
	uint64_t sent, recvd;
	tcp_bytes(k->fd, &sent, &recvd);
	// TCP counts a client's FIN as one received byte: a half-close after a reply is not junk
	if (atomic_load(&s->quit) || k->said || k->received || k->unread || sent != k->sent_mark || recvd <= k->recv_mark + 1) return;
	srv_err e;
	if (k->timed_out) timeout_error(s, &e);
	else srv_fail(&e, SRV_E_BAD_REQUEST, NULL, "malformed or incomplete HTTP request: a request line is METHOD PATH HTTP/1.1");
	sock_error(k->fd, SRV_OPENAI, k->timed_out ? 408 : 400, &e, false);
}

void srv_sock_notify(http_server *s, struct MHD_Connection *mc, void **socket_context, enum MHD_ConnectionNotificationCode code) {
	struct srv_gate *g = s->gate;
	srv_sock *k = *socket_context;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
		const int fd = ci ? ci->connect_fd : -1;
		pthread_mutex_lock(&g->mu);
		k = fd >= 0 && fd < g->n_adding ? g->adding[fd] : NULL;
		if (k) {
			g->adding[fd] = NULL;
			k->mc = mc;
			k->phase = SOCK_MHD;
		}
		pthread_mutex_unlock(&g->mu);
		*socket_context = k;
		return;
	}
	if (!k) return;
	*socket_context = NULL;
	pthread_mutex_lock(&g->mu);
	sock_unlink(s, k);
	pthread_mutex_unlock(&g->mu);
	sock_last_word(s, k);
	free(k);
}

static srv_sock *sock_of(srv_conn *c) {
	if (!c->sock) {
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c->mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
		c->sock = ci ? ci->socket_context : NULL;
	}
	return c->sock;
}

// Bytes the request takes on the wire: its head and a Content-Length body (UINT64_MAX: unknown).
static uint64_t request_bytes(srv_conn *c, const srv_sock *k) {
	uint64_t head = k->head_len;
	if (!head) {
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c->mc, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
		if (!ci) return UINT64_MAX;
		head = ci->header_size;
	}
	if (MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING))
		return k->with_body ? head : UINT64_MAX;
	const char *cl = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (!cl) return head;
	char *end;
	errno = 0;
	unsigned long long n = strtoull(cl, &end, 10);
	return errno || end == cl || *end || n > UINT64_MAX - head ? UINT64_MAX : head + n;
}

void srv_sock_begin(srv_conn *c) {
	srv_sock *k = sock_of(c);
	if (!k) return;
	const uint64_t req = request_bytes(c, k);
	pthread_mutex_lock(&c->s->gate->mu);
	sock_pending(c->s, k, true);
	k->received = false;
	k->unread = false;
	k->head_len = 0;
	k->with_body = false;
	k->req_bytes = req;
	pthread_mutex_unlock(&c->s->gate->mu);
}

void srv_sock_received(srv_conn *c, bool unread) {
	srv_sock *k = sock_of(c);
	if (!k) return;
	pthread_mutex_lock(&c->s->gate->mu);
	k->received = true;
	k->unread |= unread;
	k->deadline_us = 0;
	pthread_mutex_unlock(&c->s->gate->mu);
}

// The Connection header names token (case-insensitive, in a comma list), as libmicrohttpd reads it.
static bool conn_token(srv_conn *c, const char *token) {
	const char *v = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONNECTION);
	const size_t tn = strlen(token);
	while (v && *v) {
		while (*v == ' ' || *v == '\t' || *v == ',') v++;
		const char *e = v;
		while (*e && *e != ',') e++;
		const char *t = e;
		while (t > v && (t[-1] == ' ' || t[-1] == '\t')) t--;
		if ((size_t)(t - v) == tn && !strncasecmp(v, token, tn)) return true;
		v = e;
	}
	return false;
}

void srv_sock_answered(srv_conn *c) {
	srv_sock *k = sock_of(c);
	if (!k) return;
	http_server *s = c->s;
	struct srv_gate *g = s->gate;
	uint64_t sent, recvd;
	tcp_bytes(k->fd, &sent, &recvd);
	// libmicrohttpd keeps the connection for the next request (HTTP/1.1 without "close", or HTTP/1.0
	// with "keep-alive" and a reply of known length; the body read whole); when it has read nothing
	// past this request, the gate can judge the next head
	const uint64_t expect = k->expect == UINT64_MAX || k->req_bytes == UINT64_MAX ? UINT64_MAX : k->expect + k->req_bytes;
	const bool persist = (c->http11 || (conn_token(c, "keep-alive") && !c->unsized)) && !conn_token(c, "close");
	const bool keep = persist && k->received && !k->unread && expect != UINT64_MAX &&
			  bytes_read(k->fd) == expect;
	pthread_mutex_lock(&g->mu);
	sock_pending(s, k, false);
	k->received = false;
	k->sent_mark = sent;
	k->recv_mark = recvd;
	k->expect = expect;
	const bool kept = keep && !g->stopping;
	// the gate sees the next request's first byte and starts its head deadline then; libmicrohttpd
	// reads it unjudged, so there the idle time and the head's share one deadline
	k->deadline_us = base_now_us() + (uint64_t)(((kept ? 0 : s->cfg.header_timeout_s) + s->cfg.idle_timeout_s) * 1e6);
	if (kept) {
		MHD_suspend_connection(c->mc);
		k->phase = SOCK_KEPT;
		k->begun = false;
	}
	pthread_mutex_unlock(&g->mu);
	if (kept) gate_watch(g, k);
}
