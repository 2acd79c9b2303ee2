/* gp/http.h -- a minimal HTTP/1.0 endpoint for /metrics and /healthz.
 *
 * Reads one GET request per connection, answers, closes.  Non-blocking
 * sockets on the loop with an output buffer and an offset (partial writes
 * are resumed on EV_WRITE).  A client that does not read can never hold
 * the loop or the endpoint:
 *   - deadlines: the request must arrive within the timeout (read
 *     deadline), and the answer must then be taken within the timeout
 *     again (write deadline), else the connection is closed;
 *   - at most GP_HTTP_MAX_CLIENTS connections, of which
 *     GP_HTTP_PROBE_SLOTS are only used when the others are taken and
 *     only answer /healthz and /readyz (503 for anything else there), so
 *     scrapers stuck in their write deadline never hold the last slots;
 *   - when every slot is taken, a new connection takes the slot of the
 *     oldest one still sending its request (a slow or half request),
 *     which is closed; only when every slot is answering is it refused.
 * So a liveness probe is answered while slow clients hold every slot.
 * Loop thread only. */
#ifndef GP_HTTP_H
#define GP_HTTP_H

#include <stdint.h>

#include "gp/buf.h"
#include "gp/err.h"

struct ev_loop;

typedef struct gp_http gp_http;

/* Fills body for path; OK -> 200, NOTFOUND -> 404, UNAVAIL -> 503 (body
 * still sent), anything else -> 500.  *ctype defaults to text/plain. */
typedef gp_err gp_http_handler(void *arg, const char *path, gp_buf *body, const char **ctype);

/* port 0 picks a free port (see gp_http_port). */
gp_err gp_http_new(struct ev_loop *loop, const char *host, int port, gp_http_handler *fn,
                   void *arg, gp_http **out);
int    gp_http_port(const gp_http *h);
/* The read and the write deadline (each), in ms; default 5000. */
void   gp_http_set_timeout(gp_http *h, unsigned ms);
void   gp_http_free(gp_http *h);

typedef struct gp_http_stats {
    unsigned clients;              /* connections open now */
    uint64_t accepted;
    uint64_t refused;              /* closed at once: every slot busy answering */
    uint64_t evicted;              /* closed to make room: still sending its request */
    uint64_t probe_only;           /* answered 503 in a probe slot: not /healthz or /readyz */
    uint64_t read_timeouts;        /* closed: no whole request within the deadline */
    uint64_t write_timeouts;       /* closed: the answer not taken within the deadline */
} gp_http_stats;

void   gp_http_get_stats(const gp_http *h, gp_http_stats *out);

#endif
