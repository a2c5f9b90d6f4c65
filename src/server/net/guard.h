// server/net/guard: the guards a request passes before anything is read — its Host against
// the names this server answers to (DNS rebinding), its Origin against --cors-origin
// (pages of other sites), application/json on POST bodies, the API key on control reads
// with --protect-control — and the answer to OPTIONS (CORS preflights).
#ifndef LANES_SERVER_NET_GUARD_H
#define LANES_SERVER_NET_GUARD_H

#include "server/net/base.h"

// Checks cfg's guard settings (--allowed-host, --cors-origin, --protect-control); 0, or
// LANES_EINVAL with err naming the bad value.
int srv_guard_config_check(const http_config *cfg, char *err, size_t errlen);
// Whether the request presents the API key (true when none is set).
bool srv_authorized(srv_conn *c);
// The guards for the request on c, whose route (c->rt, NULL when none matched) and the
// path's methods (c->allow) are known; sets c->cors and c->bare. 0, or -1 with e.
int srv_guard(srv_conn *c, const char *url, const char *method, srv_err *e);
// OPTIONS on a known path: 204 with the CORS preflight's headers (srv_guard refused an
// origin that is not allowed), or with Allow when it is no preflight.
void srv_preflight(srv_conn *c);

#endif
