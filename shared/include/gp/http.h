/* gp/http.h -- a minimal HTTP/1.0 endpoint for /metrics and /healthz.
 *
 * Reads one GET request per connection, answers, closes.  Non-blocking
 * sockets on the loop with an output buffer and an offset (partial writes
 * are resumed on EV_WRITE), a read deadline, and at most
 * GP_HTTP_MAX_CLIENTS connections.  Loop thread only. */
#ifndef GP_HTTP_H
#define GP_HTTP_H

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
void   gp_http_free(gp_http *h);

#endif
