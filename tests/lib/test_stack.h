/* tests/lib/test_stack.h -- helpers for integration tests (run on a private
 * stack by tests/harness/with-stack.sh): a client bus on a private loop,
 * synchronous request helpers, child services, HTTP GET, the stack's
 * commands.  Includes test.h (TAP).  Header-only so each test stays one
 * program. */
#ifndef GP_TEST_STACK_H
#define GP_TEST_STACK_H

#include <arpa/inet.h>
#include <ev.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "gp/app.h"
#include "gp/bus.h"
#include "gp/limits.h"

static inline double
tl_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *
tl_env(const char *name)
{
    const char *v = getenv(name);

    if (v == NULL) {
        printf("not ok - environment variable %s missing (run through tests/harness/with-stack.sh)\n", name);
        exit(1);
    }
    return v;
}

static inline int
tl_free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t          len = sizeof(sa);
    int                fd = socket(AF_INET, SOCK_STREAM, 0), port;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    getsockname(fd, (struct sockaddr *)&sa, &len);
    port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* Runs the loop until *flag is set or the timeout passes. */
static inline int
tl_run_until(struct ev_loop *loop, volatile int *flag, double timeout_s)
{
    double end = tl_now() + timeout_s;

    while (!*flag && tl_now() < end)
        ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT), usleep(200);
    return *flag;
}

typedef struct tl_reply {
    int    done;
    gp_err err;
    char  *data;
    size_t len;
    double at;
} tl_reply;

static inline void
tl_reply_cb(void *arg, gp_err err, const char *data, size_t len)
{
    tl_reply *r = arg;

    r->err = err;
    r->data = malloc(len + 1);
    memcpy(r->data, data ? data : "", len);
    r->len = len;
    r->at = tl_now();
    r->done = 1;
}

/* Raw request: waits for the reply; returns the transport error. */
static inline gp_err
tl_request(struct ev_loop *loop, gp_bus *bus, const char *subj, const void *p, size_t n,
           unsigned timeout_ms, tl_reply *r)
{
    memset(r, 0, sizeof(*r));
    if (gp_bus_request(bus, subj, p, n, timeout_ms, tl_reply_cb, r) != GP_EOK)
        return GP_EUNAVAIL;
    tl_run_until(loop, &r->done, timeout_ms / 1000.0 + 2);
    return r->done ? r->err : GP_ETIMEOUT;
}

/* Typed request: encodes in, decodes the reply (or remote error) into out. */
static inline gp_err
tl_call(struct ev_loop *loop, gp_bus *bus, const char *subj, const gp_msg_desc *ind,
        const void *in, const gp_msg_desc *outd, void *out, unsigned timeout_ms, char *detail,
        size_t dlen)
{
    gp_buf   b;
    tl_reply r = {0};
    gp_err   rc;

    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    rc = gp_msg_encode(ind, in, &b);
    if (rc == GP_EOK)
        rc = tl_request(loop, bus, subj, b.p, b.n, timeout_ms, &r);
    gp_buf_fini(&b);
    if (rc != GP_EOK) {
        free(r.data);
        return rc;
    }
    rc = gp_msg_decode_reply(outd, r.data, r.len, out, detail, dlen);
    free(r.data);
    return rc;
}

/* Error code of a raw reply ({"error":{...}}), or OK if it is not one. */
static inline gp_err
tl_reply_code(const tl_reply *r, const gp_msg_desc *d, char *detail, size_t dlen)
{
    void  *tmp = calloc(1, d->size);
    gp_err rc = gp_msg_decode_reply(d, r->data, r->len, tmp, detail, dlen);

    gp_msg_clear(d, tmp);
    free(tmp);
    return rc;
}

static inline pid_t
tl_spawn(char *const argv[])
{
    pid_t pid = fork();

    if (pid == 0) {
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Waits up to timeout_s for the child; returns its exit status, or -1. */
static inline int
tl_wait_exit(pid_t pid, double timeout_s)
{
    double end = tl_now() + timeout_s;
    int    st;

    while (tl_now() < end) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* GET http://127.0.0.1:port/path into out (malloc'd); returns bytes or -1. */
static inline int
tl_http_get(int port, const char *path, char **out)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    char               req[256];
    size_t             cap = 1 << 16, n = 0;
    char              *buf = malloc(cap);
    ssize_t            k;
    int                fd = socket(AF_INET, SOCK_STREAM, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        free(buf);
        return -1;
    }
    snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\n\r\n", path);
    (void)!write(fd, req, strlen(req));
    while ((k = read(fd, buf + n, cap - n - 1)) > 0) {
        n += (size_t)k;
        if (n + 1 >= cap)
            buf = realloc(buf, cap *= 2);
    }
    close(fd);
    buf[n] = '\0';
    *out = buf;
    return (int)n;
}

/* Value of one metric line "name{labels} value" in a /metrics body, or -1. */
static inline double
tl_metric(const char *body, const char *series)
{
    const char *p = body;
    size_t      n = strlen(series);

    while ((p = strstr(p, series)) != NULL) {
        if ((p == body || p[-1] == '\n') && p[n] == ' ')
            return atof(p + n + 1);
        p += n;
    }
    return -1;
}

static inline void
tl_stack(const char *what)
{
    char cmd[1024];

    snprintf(cmd, sizeof(cmd), "%s/stack.sh %s %s", tl_env("GP_HARNESS"), what,
             tl_env("GP_STACK_DIR"));
    if (system(cmd) != 0)
        printf("# stack command failed: %s\n", cmd);
}

/* Runs loop without blocking until s seconds have passed. */
static inline void
tl_spin(struct ev_loop *loop, double s)
{
    double end = tl_now() + s;

    while (tl_now() < end)
        ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT), usleep(1000);
}

/* pid is running (a zombie whose parent is gone may wait a while for init). */
static inline bool
tl_alive(int pid)
{
    char  path[64], buf[256] = "";
    FILE *f;
    char *p;

    if (pid <= 0 || kill(pid, 0) != 0)
        return false;
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    if ((f = fopen(path, "r")) == NULL)
        return false;
    (void)!fgets(buf, sizeof(buf), f);
    fclose(f);
    p = strrchr(buf, ')');
    return p == NULL || p[1] == '\0' || p[2] != 'Z';
}

#endif
