// server/net/mhd: what net/'s files share of libmicrohttpd, and what nothing above net/ sees —
// the gate's side of each connection libmicrohttpd holds.
#ifndef LANES_SERVER_NET_MHD_H
#define LANES_SERVER_NET_MHD_H

#include "server/net/base.h"

#include <microhttpd.h>

#define SRV_MHD_POOL 65536   // libmicrohttpd's memory per connection: room for any head the gate lets through

// libmicrohttpd's connection notifications (MHD_OPTION_NOTIFY_CONNECTION).
void srv_sock_notify(http_server *s, struct MHD_Connection *mc, void **socket_context, enum MHD_ConnectionNotificationCode code);
// A request's head is in (its first call); what it read and will read is counted.
void srv_sock_begin(srv_conn *c);
// c's request was read whole, or answered before its body (unread: the bytes that follow are
// that body, not junk): its deadline no longer applies.
void srv_sock_received(srv_conn *c, bool unread);
// c's reply went out whole. A connection libmicrohttpd keeps alive, with nothing of the next
// request read yet, is suspended there and watched by the gate until that request's head is
// whole (the idle and head deadlines run meanwhile). From the request-completed callback.
void srv_sock_answered(srv_conn *c);

#endif
