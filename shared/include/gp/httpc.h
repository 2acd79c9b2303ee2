/* gp/httpc.h -- a minimal non-blocking HTTP/1.0 GET and POST on the loop.
 *
 * For reading another server's monitoring endpoint (the recovery service
 * reads nats-server's /leafz) and posting to another server's API
 * (alerting posts to Alertmanager's /api/v2/alerts).  One request per connection, the body read
 * until the server closes, a deadline for the whole exchange and a cap on
 * the body.  The host is resolved when the URL is parsed
 * (gp_httpc_url_parse, at start-up: name resolution blocks), never on the
 * loop.  Loop thread only. */
#ifndef GP_HTTPC_H
#define GP_HTTPC_H

#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>

#include "gp/err.h"

struct ev_loop;

typedef struct gp_httpc_url {
    struct sockaddr_storage addr;
    socklen_t               addrlen;
    char                    host[256];     /* as written, for the Host header */
    char                    path[512];
} gp_httpc_url;

/* Parses "http://host[:port][/path]" (port 80, path "/" by default) and
 * resolves host.  INVAL with a message in err for anything else. */
gp_err gp_httpc_url_parse(const char *url, gp_httpc_url *out, char *err, size_t errlen);

/* Called once: OK with the status and body (NUL-terminated, valid during
 * the call), TIMEOUT at the deadline, TOOBIG past max_body, UNAVAIL when
 * the connection failed or closed before a complete status line. */
typedef void gp_httpc_cb(void *arg, gp_err err, int status, const char *body, size_t len);

typedef struct gp_httpc_req gp_httpc_req;

/* Starts GET url (path may be overridden: NULL keeps url's).  *out (may
 * be NULL) is the request until cb ran; cancel it with gp_httpc_cancel
 * (cb is then not called). */
gp_err gp_httpc_get(struct ev_loop *loop, const gp_httpc_url *url, const char *path,
                    unsigned timeout_ms, size_t max_body, gp_httpc_cb *cb, void *arg,
                    gp_httpc_req **out);
/* POST body (len bytes, Content-Type content_type) to url (path as for
 * GET); the same callback and cancel.  INVAL: a content type with a line
 * break in it. */
gp_err gp_httpc_post(struct ev_loop *loop, const gp_httpc_url *url, const char *path,
                     const char *content_type, const void *body, size_t len,
                     unsigned timeout_ms, size_t max_body, gp_httpc_cb *cb, void *arg,
                     gp_httpc_req **out);
void   gp_httpc_cancel(gp_httpc_req *r);

#endif
