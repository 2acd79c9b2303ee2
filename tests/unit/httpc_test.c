/* httpc_test.c -- gp/httpc.h against the project's own HTTP endpoint
 * (gp/http.h) on a loopback port: a body larger than one read, a 404,
 * the body cap, a refused connection, a server that never answers (the
 * deadline), cancel, and the URL parser's errors. */
#include <arpa/inet.h>
#include <ev.h>
#include <netinet/in.h>
#include <stdio.h>
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

    gp_http_free(h);
    ev_loop_destroy(loop);
    return T_DONE();
}
