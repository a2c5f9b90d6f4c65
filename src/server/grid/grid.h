// server/grid/grid: the grid — what makes this server one of
// several. The residency beacon (GET /v1/residency) and capacity leases (POST and DELETE
// /v1/leases) answer from the lane host without waiting on it; /metrics gains the gauges a
// gateway's endpoint picker reads under vLLM's names. Overflow (grid/peer.c): one thread polls
// the peers' beacons and forwards requests to them through libcurl's multi interface, so no
// HTTP thread ever waits on a peer.
#ifndef LANES_SERVER_GRID_GRID_H
#define LANES_SERVER_GRID_GRID_H

#include "server/net/base.h"

#define SRV_GRID_HOP "x-lanes-hop" // a forwarded request carries it: it is never forwarded again
#define SRV_GRID_MAX_PEERS 16

// ---- the lessor's side (grid/grid.c) ------------------------------------------------------
void srv_residency(srv_conn *c);
void srv_lease_new(srv_conn *c);
void srv_lease_release(srv_conn *c);
// The adapters this server holds for its model, as the beacon lists them (a new reference).
// The one place that knows them: forwarding reads them too.
json_t *srv_grid_adapters(http_server *s);
// /metrics: the gateway's gauges (vLLM's names), leases, and the overflow's counters.
void srv_grid_metrics(http_server *s, const lane_snapshot *sn, srv_buf *b);

// ---- overflow to peers (grid/peer.c) --------------------------------------------------------
// Checks the peers and starts the poller when there are any. 0, or a negative code with err.
int srv_grid_start(http_server *s, char *err, size_t errlen);
// Before the daemon stops: every forward waiting on a peer is resumed and ends.
void srv_grid_release(http_server *s);
// After the daemon stopped: stops the poller and frees the grid. Accepts a server without one.
void srv_grid_stop(http_server *s);
// A generation request whose body is in: overflowed (true: c is parked, and goes on with the
// peer's reply, or runs here when no peer took it after all) when this server's queue is deeper than --overflow-queue or full (full: the lane host just
// refused it as such), others already wait, or it is draining — and a peer holds the model.
// It then waits (suspended, at most --queue of them) for a peer's lease, and is forwarded, or
// for a lane here, and runs here. Else false: it runs here. A request that came from a peer is
// never forwarded again.
bool srv_grid_route(srv_conn *c, bool full);
// A request srv_grid_route kept here is in the lane host now (or ended): it no longer counts
// as arriving. Accepts any connection.
void srv_grid_submitted(srv_conn *c);
// While draining: whether a generation request may still go to a peer (so it is read, not refused).
bool srv_grid_may_forward(http_server *s);
// The request's connection ended (request-completed callback): its transfer is cancelled.
void srv_grid_done(srv_conn *c);
// /metrics: each peer's state and the requests forwarded to it.
void srv_grid_peer_metrics(http_server *s, srv_buf *b);
// Requests waiting for a peer's lease or a lane here (0 without peers).
int srv_grid_pending(http_server *s);

#endif
