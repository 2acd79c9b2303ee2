/* httpc.c -- see gp/httpc.h. */
#include <errno.h>
#include <ev.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gp/buf.h"
#include "gp/httpc.h"

struct gp_httpc_req {
    struct ev_loop *loop;
    ev_io           io;
    ev_timer        t;
    int             fd;
    gp_buf          req;                 /* the request: head and body */
    size_t          sent;
    gp_buf          in;
    gp_httpc_cb    *cb;
    void           *arg;
};

gp_err
gp_httpc_url_parse(const char *url, gp_httpc_url *out, char *err, size_t errlen)
{
    const char      *p, *slash, *colon;
    char             port[8] = "80";
    size_t           hl;
    struct addrinfo  hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int              rc;

    memset(out, 0, sizeof(*out));
    if (strncmp(url, "http://", 7) != 0) {
        snprintf(err, errlen, "%s: only http:// URLs", url);
        return GP_EINVAL;
    }
    p = url + 7;
    slash = strchr(p, '/');
    hl = slash != NULL ? (size_t)(slash - p) : strlen(p);
    colon = memchr(p, ':', hl);
    if (colon != NULL) {
        size_t pl = hl - (size_t)(colon - p) - 1;

        if (pl == 0 || pl >= sizeof(port) || strspn(colon + 1, "0123456789") < pl) {
            snprintf(err, errlen, "%s: bad port", url);
            return GP_EINVAL;
        }
        memcpy(port, colon + 1, pl);
        port[pl] = '\0';
        hl = (size_t)(colon - p);
    }
    if (hl == 0 || hl >= sizeof(out->host) ||
        snprintf(out->path, sizeof(out->path), "%s", slash != NULL ? slash : "/") >=
            (int)sizeof(out->path)) {
        snprintf(err, errlen, "%s: bad host or path", url);
        return GP_EINVAL;
    }
    memcpy(out->host, p, hl);
    out->host[hl] = '\0';
    if ((rc = getaddrinfo(out->host, port, &hints, &ai)) != 0 || ai == NULL) {
        snprintf(err, errlen, "%s: %s", out->host, gai_strerror(rc));
        return GP_EINVAL;
    }
    memcpy(&out->addr, ai->ai_addr, ai->ai_addrlen);
    out->addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    return GP_EOK;
}

static void
req_free(gp_httpc_req *r)
{
    ev_io_stop(r->loop, &r->io);
    ev_timer_stop(r->loop, &r->t);
    if (r->fd >= 0)
        close(r->fd);
    gp_buf_fini(&r->in);
    gp_buf_fini(&r->req);
    free(r);
}

void
gp_httpc_cancel(gp_httpc_req *r)
{
    if (r != NULL)
        req_free(r);
}

/* Ends the request: the status from "HTTP/1.x NNN", the body after the
 * blank line. */
static void
finish(gp_httpc_req *r, gp_err err)
{
    int         status = 0;
    const char *body = "", *hdr_end;
    size_t      len = 0;

    if (err == GP_EOK) {
        hdr_end = r->in.n > 0 ? strstr(r->in.p, "\r\n\r\n") : NULL;
        if (hdr_end == NULL || sscanf(r->in.p, "HTTP/1.%*d %d", &status) != 1) {
            err = GP_EUNAVAIL;
        } else {
            body = hdr_end + 4;
            len = r->in.n - (size_t)(body - r->in.p);
        }
    }
    r->cb(r->arg, err, status, body, len);
    req_free(r);
}

static void
on_io(struct ev_loop *loop, ev_io *w, int revents)
{
    gp_httpc_req *r = w->data;
    char          chunk[16384];
    ssize_t       n;

    (void)loop;
    if ((revents & EV_WRITE) && r->sent < r->req.n) {
        int       soerr = 0;
        socklen_t sl = sizeof(soerr);

        if (getsockopt(r->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
            finish(r, GP_EUNAVAIL);
            return;
        }
        n = send(r->fd, r->req.p + r->sent, r->req.n - r->sent, MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
            finish(r, GP_EUNAVAIL);
            return;
        }
        if (n > 0)
            r->sent += (size_t)n;
        if (r->sent == r->req.n) {
            ev_io_stop(r->loop, &r->io);
            ev_io_set(&r->io, r->fd, EV_READ);
            ev_io_start(r->loop, &r->io);
        }
        return;
    }
    if (!(revents & EV_READ))
        return;
    for (;;) {
        n = recv(r->fd, chunk, sizeof(chunk), 0);
        if (n > 0) {
            if (gp_buf_append(&r->in, chunk, (size_t)n) != GP_EOK) {
                finish(r, GP_ETOOBIG);
                return;
            }
            continue;
        }
        if (n == 0) {
            finish(r, GP_EOK);
        } else if (errno != EAGAIN && errno != EINTR) {
            finish(r, GP_EUNAVAIL);
        }
        return;
    }
}

static void
on_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop, (void)revents;
    finish(w->data, GP_ETIMEOUT);
}

/* Connects and sends r->req; on failure frees r. */
static gp_err
start(struct ev_loop *loop, const gp_httpc_url *url, gp_httpc_req *r, unsigned timeout_ms,
      gp_httpc_req **out)
{
    r->fd = socket(url->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (r->fd < 0 || (connect(r->fd, (const struct sockaddr *)&url->addr, url->addrlen) != 0 &&
                      errno != EINPROGRESS)) {
        req_free(r);
        return GP_EUNAVAIL;
    }
    ev_io_init(&r->io, on_io, r->fd, EV_WRITE);
    r->io.data = r;
    ev_io_start(loop, &r->io);
    ev_timer_init(&r->t, on_timeout, timeout_ms / 1000.0, 0);
    r->t.data = r;
    ev_timer_start(loop, &r->t);
    if (out != NULL)
        *out = r;
    return GP_EOK;
}

static gp_httpc_req *
req_new(struct ev_loop *loop, size_t max_body, gp_httpc_cb *cb, void *arg)
{
    gp_httpc_req *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return NULL;
    r->loop = loop;
    r->cb = cb;
    r->arg = arg;
    r->fd = -1;
    gp_buf_init(&r->in, max_body + 4096);          /* the headers on top */
    gp_buf_init(&r->req, 0);
    return r;
}

gp_err
gp_httpc_get(struct ev_loop *loop, const gp_httpc_url *url, const char *path,
             unsigned timeout_ms, size_t max_body, gp_httpc_cb *cb, void *arg,
             gp_httpc_req **out)
{
    gp_httpc_req *r;

    if (out != NULL)
        *out = NULL;
    if ((r = req_new(loop, max_body, cb, arg)) == NULL)
        return GP_ENOMEM;
    if (gp_buf_printf(&r->req, "GET %s HTTP/1.0\r\nHost: %s\r\nAccept: */*\r\n\r\n",
                      path != NULL ? path : url->path, url->host) != GP_EOK) {
        req_free(r);
        return GP_ENOMEM;
    }
    return start(loop, url, r, timeout_ms, out);
}

gp_err
gp_httpc_post(struct ev_loop *loop, const gp_httpc_url *url, const char *path,
              const char *content_type, const void *body, size_t len, unsigned timeout_ms,
              size_t max_body, gp_httpc_cb *cb, void *arg, gp_httpc_req **out)
{
    gp_httpc_req *r;

    if (out != NULL)
        *out = NULL;
    if (content_type == NULL || strpbrk(content_type, "\r\n") != NULL || (body == NULL && len))
        return GP_EINVAL;
    if ((r = req_new(loop, max_body, cb, arg)) == NULL)
        return GP_ENOMEM;
    if (gp_buf_printf(&r->req, "POST %s HTTP/1.0\r\nHost: %s\r\nAccept: */*\r\n"
                      "Content-Type: %s\r\nContent-Length: %zu\r\n\r\n",
                      path != NULL ? path : url->path, url->host, content_type, len) != GP_EOK ||
        (len > 0 && gp_buf_append(&r->req, body, len) != GP_EOK)) {
        req_free(r);
        return GP_ENOMEM;
    }
    return start(loop, url, r, timeout_ms, out);
}
