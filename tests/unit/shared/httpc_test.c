/* httpc_test.c -- gp/httpc.h against the project's own HTTP endpoint
 * (gp/http.h) on a loopback port: a body larger than one read, a 404,
 * the body cap, a refused connection, a server that never answers (the
 * deadline), cancel, and the URL parser's errors; a POST against a
 * one-shot server in a thread, which keeps what it received. */
#include <arpa/inet.h>
#include <ev.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gp/buf.h"
#include "gp/http.h"
#include "gp/httpc.h"
#include "test.h"

#define BIG 200000

typedef struct got {
    int    done;
    gp_err err;
    int    status;
    size_t len;
    int    body_ok;
} got;

static gp_err
handler(void *arg, const char *path, gp_buf *body, const char **ctype)
{
    (void)arg;
    *ctype = "application/json";
    if (strcmp(path, "/big") == 0) {
        for (int i = 0; i < BIG / 10; i++)
            if (gp_buf_puts(body, "0123456789") != GP_EOK)
                return GP_EINTERNAL;
        return GP_EOK;
    }
    return GP_ENOTFOUND;
}

static void
cb(void *arg, gp_err err, int status, const char *body, size_t len)
{
    got *g = arg;

    g->done++;
    g->err = err;
    g->status = status;
    g->len = len;
    g->body_ok = len == BIG && body[0] == '0' && body[len - 1] == '9' && body[len] == '\0';
}

static got
fetch(struct ev_loop *loop, const char *url, const char *path, unsigned timeout_ms, size_t max)
{
    gp_httpc_url u;
    got          g = {0};
    char         e[256];

    if (gp_httpc_url_parse(url, &u, e, sizeof(e)) != GP_EOK) {
        g.err = GP_EINVAL;
        return g;
    }
    if (gp_httpc_get(loop, &u, path, timeout_ms, max, cb, &g, NULL) != GP_EOK) {
        g.err = GP_EUNAVAIL;
        return g;
    }
    while (!g.done)
        ev_run(loop, EVRUN_ONCE);
    return g;
}

/* A port nobody listens on, and one that listens but never accepts. */
static int
port_of(int fd)
{
    struct sockaddr_in a;
    socklen_t          l = sizeof(a);

    getsockname(fd, (struct sockaddr *)&a, &l);
    return ntohs(a.sin_port);
}

static int
bound(int listen_too)
{
    int                fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

    bind(fd, (struct sockaddr *)&a, sizeof(a));
    if (listen_too)
        listen(fd, 1);
    return fd;
}

/* One connection: reads the request (head and Content-Length bytes of
 * body), answers 201 with a short body, closes. */
typedef struct oneshot {
    int  fd;
    char got[8192];
    int  n;
} oneshot;

static void *
serve_once(void *arg)
{
    oneshot *o = arg;
    int      c = accept(o->fd, NULL, NULL);
    ssize_t  k;

    while (c >= 0 && o->n < (int)sizeof(o->got) - 1 &&
           (k = recv(c, o->got + o->n, sizeof(o->got) - 1 - (size_t)o->n, 0)) > 0) {
        const char *end, *cl;

        o->n += (int)k;
        o->got[o->n] = '\0';
        if ((end = strstr(o->got, "\r\n\r\n")) != NULL && (cl = strstr(o->got, "Content-Length: ")) &&
            o->n - (int)(end + 4 - o->got) >= atoi(cl + 16))
            break;
    }
    if (c >= 0) {
        const char ans[] = "HTTP/1.0 201 Created\r\nContent-Type: text/plain\r\n\r\nposted";

        if (send(c, ans, sizeof(ans) - 1, MSG_NOSIGNAL) < 0)
            o->n = -1;
        close(c);
    }
    return NULL;
}

static void
post_cb(void *arg, gp_err err, int status, const char *body, size_t len)
{
    got *g = arg;

    g->done++;
    g->err = err;
    g->status = status;
    g->len = len;
    g->body_ok = len == 6 && strcmp(body, "posted") == 0;
}

static void
test_post(struct ev_loop *loop)
{
    oneshot      o = {.fd = bound(1)};
    pthread_t    th;
    gp_httpc_url u;
    char         url[128], e[256];
    got          g = {0};
    const char   json[] = "[{\"labels\":{\"alertname\":\"X\"}}]";
    char         clen[48];

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/v2/alerts", port_of(o.fd));
    T_OK(gp_httpc_url_parse(url, &u, e, sizeof(e)) == GP_EOK);
    T_OK(pthread_create(&th, NULL, serve_once, &o) == 0);
    T_OK(gp_httpc_post(loop, &u, NULL, "application/json", json, strlen(json), 5000, 1000,
                       post_cb, &g, NULL) == GP_EOK);
    while (!g.done)
        ev_run(loop, EVRUN_ONCE);
    pthread_join(th, NULL);
    close(o.fd);
    snprintf(clen, sizeof(clen), "\r\nContent-Length: %zu\r\n", strlen(json));
    T_OKM(g.err == GP_EOK && g.status == 201 && g.body_ok, "POST: 201 and its body (%s %d)",
          gp_err_name(g.err), g.status);
    T_OKM(o.n > 0 && strncmp(o.got, "POST /api/v2/alerts HTTP/1.0\r\n", 30) == 0 &&
          strstr(o.got, "\r\nContent-Type: application/json\r\n") != NULL &&
          strstr(o.got, clen) != NULL &&
          strcmp(strstr(o.got, "\r\n\r\n") + 4, json) == 0,
          "the server got the request line, the type, the length and the body");
    T_OKM(gp_httpc_post(loop, &u, NULL, "a\r\nX-Evil: 1", "", 0, 100, 100, post_cb, &g, NULL) ==
              GP_EINVAL, "a content type with a line break: INVAL");
}

int
main(void)
{
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    gp_http        *h = NULL;
    gp_httpc_url    u;
    gp_httpc_req   *req = NULL;
    char            url[128], e[256];
    got             g, never = {0};
    int             closed, silent;

    T_OK(gp_http_new(loop, "127.0.0.1", 0, handler, NULL, &h) == GP_EOK);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/big", gp_http_port(h));

    g = fetch(loop, url, NULL, 5000, 1 << 20);
    T_OKM(g.err == GP_EOK && g.status == 200 && g.body_ok,
          "GET /big: 200 and all %d bytes (%s, status %d, %zu bytes)", BIG, gp_err_name(g.err),
          g.status, g.len);
    g = fetch(loop, url, "/nothing", 5000, 1 << 20);
    T_OKM(g.err == GP_EOK && g.status == 404, "another path: 404 (%s %d)", gp_err_name(g.err),
          g.status);
    g = fetch(loop, url, NULL, 5000, 1000);
    T_OKM(g.err == GP_ETOOBIG, "a body past the cap: TOOBIG (%s)", gp_err_name(g.err));

    closed = bound(0);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port_of(closed));
    close(closed);
    g = fetch(loop, url, NULL, 5000, 1000);
    T_OKM(g.err == GP_EUNAVAIL, "nobody listening: UNAVAIL (%s)", gp_err_name(g.err));

    silent = bound(1);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port_of(silent));
    g = fetch(loop, url, NULL, 300, 1000);
    T_OKM(g.err == GP_ETIMEOUT, "a server that never answers: TIMEOUT (%s)", gp_err_name(g.err));

    T_OK(gp_httpc_url_parse(url, &u, e, sizeof(e)) == GP_EOK);
    T_OK(gp_httpc_get(loop, &u, NULL, 200, 1000, cb, &never, &req) == GP_EOK && req != NULL);
    gp_httpc_cancel(req);
    for (int i = 0; i < 5; i++) {
        usleep(100000);
        ev_run(loop, EVRUN_NOWAIT);
    }
    T_OKM(never.done == 0, "a cancelled request never calls back, even past its deadline");
    close(silent);

    T_OKM(gp_httpc_url_parse("https://x/", &u, e, sizeof(e)) == GP_EINVAL && strstr(e, "http://"),
          "https refused: %s", e);
    T_OKM(gp_httpc_url_parse("http://127.0.0.1:99999999/", &u, e, sizeof(e)) == GP_EINVAL,
          "a bad port refused: %s", e);
    T_OKM(gp_httpc_url_parse("http:///x", &u, e, sizeof(e)) == GP_EINVAL, "no host refused: %s", e);
    T_OKM(gp_httpc_url_parse("http://localhost:8222", &u, e, sizeof(e)) == GP_EOK &&
          strcmp(u.path, "/") == 0 && strcmp(u.host, "localhost") == 0,
          "host:port without a path: path /");

    test_post(loop);
    gp_http_free(h);
    ev_loop_destroy(loop);
    return T_DONE();
}
