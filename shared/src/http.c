/* http.c -- minimal HTTP/1.0 endpoint for /metrics and /healthz (see gp/http.h). */
#include "gp/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gp/limits.h"
#include "gp/log.h"

#define HTTP_READ_TIMEOUT 5.0     /* seconds a client may take to send its request */

typedef struct client {
    ev_io           io;
    ev_timer        timer;
    struct gp_http *srv;
    char            req[GP_HTTP_MAX_REQ];
    size_t          req_n;
    gp_buf          out;
    size_t          sent;
    int             slot;
} client;

struct gp_http {
    struct ev_loop  *loop;
    ev_io            accept_io;
    int              fd;
    int              port;
    gp_http_handler *fn;
    void            *arg;
    client          *clients[GP_HTTP_MAX_CLIENTS];
};

static void
client_close(client *c)
{
    ev_io_stop(c->srv->loop, &c->io);
    ev_timer_stop(c->srv->loop, &c->timer);
    close(c->io.fd);
    c->srv->clients[c->slot] = NULL;
    gp_buf_fini(&c->out);
    free(c);
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
    rc = c->srv->fn(c->srv->arg, path, &body, &ctype);
    status = rc == GP_EOK ? "200 OK" : rc == GP_ENOTFOUND ? "404 Not Found"
           : rc == GP_EUNAVAIL ? "503 Service Unavailable" : "500 Internal Server Error";
    gp_buf_printf(&c->out, "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                  "Connection: close\r\n\r\n", status, ctype, body.n);
    gp_buf_append(&c->out, body.p, body.n);
    gp_buf_fini(&body);
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
    ev_timer_stop(c->srv->loop, &c->timer);
    respond(c, path);
}

static void
client_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    client_close(GP_CONTAINER_OF(w, client, timer));
}

static void
accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    gp_http *h = GP_CONTAINER_OF(w, gp_http, accept_io);
    client  *c;
    int      fd, slot = -1;

    (void)revents;
    fd = accept4(h->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    for (int i = 0; i < GP_HTTP_MAX_CLIENTS && slot < 0; i++)
        if (h->clients[i] == NULL)
            slot = i;
    c = slot >= 0 ? calloc(1, sizeof(*c)) : NULL;
    if (c == NULL) {
        close(fd);                           /* over the client limit: shed */
        return;
    }
    c->srv = h;
    c->slot = slot;
    gp_buf_init(&c->out, 0);
    h->clients[slot] = c;
    ev_io_init(&c->io, client_read_cb, fd, EV_READ);
    ev_timer_init(&c->timer, client_timeout_cb, HTTP_READ_TIMEOUT, 0);
    ev_io_start(loop, &c->io);
    ev_timer_start(loop, &c->timer);
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
