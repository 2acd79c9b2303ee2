/* http.c -- minimal HTTP/1.0 endpoint for /metrics and /healthz (see gp/http.h). */
#include "gp/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gp/limits.h"
#include "gp/log.h"

#define HTTP_TIMEOUT_MS 5000      /* default read and write deadline */
/* Slots from here on are probe slots (gp/http.h). */
#define PROBE_FROM (GP_HTTP_MAX_CLIENTS - GP_HTTP_PROBE_SLOTS)

typedef struct client {
    ev_io           io;
    ev_timer        timer;
    struct gp_http *srv;
    char            req[GP_HTTP_MAX_REQ];
    size_t          req_n;
    gp_buf          out;
    size_t          sent;
    int             slot;
    bool            writing;      /* the request is in: answering */
    uint64_t        seq;          /* accept order: the oldest is evicted first */
} client;

struct gp_http {
    struct ev_loop  *loop;
    ev_io            accept_io;
    int              fd;
    int              port;
    double           timeout;     /* seconds, each of the read and write deadlines */
    gp_http_handler *fn;
    void            *arg;
    uint64_t         seq;
    gp_http_stats    st;
    client          *clients[GP_HTTP_MAX_CLIENTS];
};

static void
client_close(client *c)
{
    ev_io_stop(c->srv->loop, &c->io);
    ev_timer_stop(c->srv->loop, &c->timer);
    close(c->io.fd);
    c->srv->clients[c->slot] = NULL;
    c->srv->st.clients--;
    gp_buf_fini(&c->out);
    free(c);
}

/* Closes with a reset: what the client did not take is dropped at once
 * instead of staying in the kernel until it reads (or never). */
static void
client_abort(client *c)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};

    setsockopt(c->io.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    client_close(c);
}

static void
deadline(client *c)
{
    ev_timer_stop(c->srv->loop, &c->timer);
    ev_timer_set(&c->timer, c->srv->timeout, 0);
    ev_timer_start(c->srv->loop, &c->timer);
}

static bool
probe_path(const char *path)
{
    return strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0;
}

static void
client_write_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    client *c = GP_CONTAINER_OF(w, client, io);
    ssize_t n;

    (void)loop;
    (void)revents;
    while (c->sent < c->out.n) {
        n = write(w->fd, c->out.p + c->sent, c->out.n - c->sent);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;                          /* resume on the next EV_WRITE */
        if (n <= 0)
            break;
        c->sent += (size_t)n;
    }
    client_close(c);
}

static void
respond(client *c, const char *path)
{
    gp_buf      body;
    const char *ctype = "text/plain; version=0.0.4; charset=utf-8";
    const char *status;
    gp_err      rc;

    gp_buf_init(&body, 0);
    if (c->slot >= PROBE_FROM && !probe_path(path)) {
        c->srv->st.probe_only++;
        ctype = "text/plain; charset=utf-8";
        gp_buf_printf(&body, "busy: every HTTP slot is taken; only /healthz and /readyz are "
                      "answered now\n");
        rc = GP_EUNAVAIL;
    } else {
        rc = c->srv->fn(c->srv->arg, path, &body, &ctype);
    }
    status = rc == GP_EOK ? "200 OK" : rc == GP_ENOTFOUND ? "404 Not Found"
           : rc == GP_EUNAVAIL ? "503 Service Unavailable" : "500 Internal Server Error";
    gp_buf_printf(&c->out, "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                  "Connection: close\r\n\r\n", status, ctype, body.n);
    gp_buf_append(&c->out, body.p, body.n);
    gp_buf_fini(&body);
    c->writing = true;
    deadline(c);                             /* the write deadline starts now */
    ev_io_stop(c->srv->loop, &c->io);
    ev_io_set(&c->io, c->io.fd, EV_WRITE);
    ev_set_cb(&c->io, client_write_cb);
    ev_io_start(c->srv->loop, &c->io);
}

static void
client_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    client *c = GP_CONTAINER_OF(w, client, io);
    char    path[256];
    ssize_t n;

    (void)loop;
    (void)revents;
    n = read(w->fd, c->req + c->req_n, sizeof(c->req) - 1 - c->req_n);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        client_close(c);
        return;
    }
    c->req_n += (size_t)n;
    c->req[c->req_n] = '\0';
    if (strstr(c->req, "\r\n\r\n") == NULL && strstr(c->req, "\n\n") == NULL) {
        if (c->req_n >= sizeof(c->req) - 1)
            client_close(c);                 /* header too large */
        return;
    }
    if (sscanf(c->req, "GET %255s", path) != 1)
        snprintf(path, sizeof(path), "/bad-request");
    respond(c, path);
}

static void
client_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    client *c = GP_CONTAINER_OF(w, client, timer);

    (void)loop;
    (void)revents;
    if (c->writing)
        c->srv->st.write_timeouts++;
    else
        c->srv->st.read_timeouts++;
    client_abort(c);
}

/* A free slot for a new connection: a general one, else a probe slot,
 * else the slot of the oldest client still sending its request (closed
 * here); -1 when every client is being answered. */
static int
take_slot(gp_http *h)
{
    client *old = NULL;
    int     slot;

    for (int i = 0; i < GP_HTTP_MAX_CLIENTS; i++)
        if (h->clients[i] == NULL)
            return i;
    for (int i = 0; i < GP_HTTP_MAX_CLIENTS; i++) {
        client *c = h->clients[i];

        if (!c->writing && (old == NULL || c->seq < old->seq))
            old = c;
    }
    if (old == NULL)
        return -1;
    slot = old->slot;
    h->st.evicted++;
    client_abort(old);
    return slot;
}

static void
accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    gp_http *h = GP_CONTAINER_OF(w, gp_http, accept_io);
    client  *c;
    int      fd, slot, sndbuf = GP_HTTP_SNDBUF;

    (void)revents;
    fd = accept4(h->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    slot = take_slot(h);
    c = slot >= 0 ? calloc(1, sizeof(*c)) : NULL;
    if (c == NULL) {
        h->st.refused++;
        close(fd);                           /* every slot answering: shed */
        return;
    }
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    c->srv = h;
    c->slot = slot;
    c->seq = ++h->seq;
    gp_buf_init(&c->out, 0);
    h->clients[slot] = c;
    h->st.clients++;
    h->st.accepted++;
    ev_io_init(&c->io, client_read_cb, fd, EV_READ);
    ev_timer_init(&c->timer, client_timeout_cb, h->timeout, 0);
    ev_io_start(loop, &c->io);
    ev_timer_start(loop, &c->timer);         /* the read deadline */
}

gp_err
gp_http_new(struct ev_loop *loop, const char *host, int port, gp_http_handler *fn, void *arg,
            gp_http **out)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    socklen_t          len = sizeof(sa);
    gp_http           *h;
    int                one = 1;

    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return GP_EINVAL;
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return GP_ENOMEM;
    h->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (h->fd < 0)
        goto fail;
    setsockopt(h->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(h->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(h->fd, 64) < 0) {
        GP_ERROR("http_listen_failed", "host=%s port=%d detail=\"%s\"", host, port,
                 strerror(errno));
        goto fail;
    }
    getsockname(h->fd, (struct sockaddr *)&sa, &len);
    h->port = ntohs(sa.sin_port);
    h->loop = loop;
    h->timeout = HTTP_TIMEOUT_MS / 1000.0;
    h->fn = fn;
    h->arg = arg;
    ev_io_init(&h->accept_io, accept_cb, h->fd, EV_READ);
    ev_io_start(loop, &h->accept_io);
    *out = h;
    return GP_EOK;
fail:
    if (h->fd >= 0)
        close(h->fd);
    free(h);
    return GP_EUNAVAIL;
}

int
gp_http_port(const gp_http *h)
{
    return h->port;
}

void
gp_http_set_timeout(gp_http *h, unsigned ms)
{
    h->timeout = ms / 1000.0;
}

void
gp_http_get_stats(const gp_http *h, gp_http_stats *out)
{
    *out = h->st;
}

void
gp_http_free(gp_http *h)
{
    if (h == NULL)
        return;
    for (int i = 0; i < GP_HTTP_MAX_CLIENTS; i++)
        if (h->clients[i] != NULL)
            client_close(h->clients[i]);
    ev_io_stop(h->loop, &h->accept_io);
    close(h->fd);
    free(h);
}
