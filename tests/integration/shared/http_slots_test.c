/* http_slots_test.c -- a slow client cannot starve the HTTP endpoint
 * (issue 26), against a real service (gridpool-scheduler: its /metrics,
 * ~40 KiB, is larger than what a socket holds for a client that does not
 * read) with --http-timeout-ms DEADLINE_MS:
 *   - every general slot is taken by a client that asked for /metrics and
 *     never reads (its answer stuck past the socket buffers), and more
 *     clients than the rest of the slots send half a request;
 *   - meanwhile GET /healthz answers 200 within a second, again and again,
 *     and /readyz too; GET /metrics is answered 503 "busy" in a probe slot;
 *   - the readers that never read are reset at the write deadline and the
 *     half requests at the read deadline (or evicted sooner to make room):
 *     each socket ends within the deadline and a second;
 *   - /metrics counts it: gp_http_timeouts_total{deadline="write"} and
 *     {deadline="read"}, gp_http_evicted_total, gp_http_probe_only_total.
 * test-tags: pass=normal (tests/run.sh) */
#include <poll.h>

#include "msg_gen.h"
#include "test_stack.h"

#define DEADLINE_MS 1500
#define WRITERS     (GP_HTTP_MAX_CLIENTS - GP_HTTP_PROBE_SLOTS)
#define HALVES      10
#define PROBES      5

static int http;

/* A connected socket; rcvbuf > 0 shrinks its receive buffer first. */
static int
dial(int rcvbuf)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)http)};
    int                fd = socket(AF_INET, SOCK_STREAM, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void
say(int fd, const char *s)
{
    (void)!write(fd, s, strlen(s));
}

/* GET path on a new connection: the status code (0: no answer), in *ms. */
static int
get_status(const char *path, double *ms)
{
    char   buf[512], req[128];
    double t0 = tl_now();
    int    fd = dial(0), code = 0;
    struct timeval tv = {.tv_sec = 2};

    if (fd >= 0) {
        ssize_t n;

        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\n\r\n", path);
        say(fd, req);
        n = read(fd, buf, sizeof(buf) - 1);
        if (n > 0) {
            buf[n] = '\0';
            sscanf(buf, "HTTP/1.0 %d", &code);
        }
        close(fd);
    }
    *ms = (tl_now() - t0) * 1e3;
    return code;
}

/* When the server ended fd (a reset, or its end after the answer), in
 * seconds on tl_now's clock, waiting until `until`; -1 if still open.
 * Never reads: reading would let a stuck answer through. */
static double
ended_at(int fd, double until)
{
    while (tl_now() < until) {
        struct pollfd p = {.fd = fd, .events = POLLRDHUP};

        if (poll(&p, 1, 20) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
            return tl_now();
    }
    return -1;
}

static void
test_slots(void)
{
    int    writers[WRITERS], halves[HALVES], ok = 0, n_ended = 0, code;
    double worst = 0, ms, t_writers, t_halves, first = 1e9, last = 0;
    char  *body = NULL, codes[64] = "";

    t_writers = tl_now();
    for (int i = 0; i < WRITERS; i++) {
        writers[i] = dial(1);                /* the smallest receive buffer */
        say(writers[i], "GET /metrics HTTP/1.0\r\n\r\n");
    }
    usleep(300000);                          /* the service answers each: stuck writing */
    t_halves = tl_now();
    for (int i = 0; i < HALVES; i++) {
        halves[i] = dial(0);
        say(halves[i], "GET /metr");
    }
    usleep(100000);
    for (int i = 0; i < PROBES; i++) {
        code = get_status(i % 2 ? "/readyz" : "/healthz", &ms);
        ok += code == 200;
        worst = ms > worst ? ms : worst;
        snprintf(codes + strlen(codes), sizeof(codes) - strlen(codes), " %d", code);
        usleep(100000);
    }
    T_OKM(ok == PROBES && worst < 1000, "with every slot held by slow clients, /healthz and "
          "/readyz answer 200 (%s; slowest %.1f ms)", codes, worst);
    code = get_status("/metrics", &ms);
    T_OKM(code == 503, "/metrics meanwhile: 503 in a slot kept for probes (%d)", code);
    for (int i = 0; i < WRITERS; i++) {
        double e = ended_at(writers[i], t_writers + DEADLINE_MS / 1e3 + 1.5);

        if (e >= 0) {
            n_ended++;
            first = e - t_writers < first ? e - t_writers : first;
            last = e - t_writers > last ? e - t_writers : last;
        }
        close(writers[i]);
    }
    T_OKM(n_ended == WRITERS && first >= DEADLINE_MS / 1e3 - 0.2,
          "every client that does not read is held, then reset at the write deadline (%d of "
          "%d, after %.2f to %.2f s; deadline %d ms)", n_ended, WRITERS, first, last,
          DEADLINE_MS);
    n_ended = 0;
    for (int i = 0; i < HALVES; i++) {
        n_ended += ended_at(halves[i], t_halves + DEADLINE_MS / 1e3 + 1.5) >= 0;
        close(halves[i]);
    }
    T_OKM(n_ended == HALVES, "every half request is closed within the read deadline (%d of %d)",
          n_ended, HALVES);
    T_OK(tl_http_get(http, "/metrics", &body) > 0);
    printf("# write timeouts %.0f, read timeouts %.0f, evicted %.0f, probe-only %.0f, "
           "refused %.0f\n", tl_metric(body, "gp_http_timeouts_total{deadline=\"write\"}"),
           tl_metric(body, "gp_http_timeouts_total{deadline=\"read\"}"),
           tl_metric(body, "gp_http_evicted_total"), tl_metric(body, "gp_http_probe_only_total"),
           tl_metric(body, "gp_http_refused_total"));
    T_OKM(tl_metric(body, "gp_http_timeouts_total{deadline=\"write\"}") == WRITERS,
          "each stuck answer counted at the write deadline");
    T_OK(tl_metric(body, "gp_http_timeouts_total{deadline=\"read\"}") >= 1);
    T_OKM(tl_metric(body, "gp_http_evicted_total") >= HALVES - GP_HTTP_PROBE_SLOTS,
          "half requests evicted to make room for new connections");
    T_OK(tl_metric(body, "gp_http_probe_only_total") >= 1);
    free(body);
}

int
main(void)
{
    char        bin[512], port[16], deadline[16];
    const char *argv[] = {bin, "--http-port", port, "--http-timeout-ms", deadline, NULL};
    double      t0 = tl_now(), ms;
    pid_t       pid;
    bool        up = false;

    http = tl_free_port();
    snprintf(bin, sizeof(bin), "%s/bin/gridpool-scheduler", tl_env("GP_BUILD"));
    snprintf(port, sizeof(port), "%d", http);
    snprintf(deadline, sizeof(deadline), "%d", DEADLINE_MS);
    pid = tl_spawn((char *const *)argv);
    while (!up && tl_now() - t0 < 30) {
        up = get_status("/readyz", &ms) == 200;
        if (!up)
            usleep(100000);
    }
    T_OKM(up, "the service is ready (/readyz)");
    test_slots();
    kill(pid, SIGTERM);
    T_OKM(tl_wait_exit(pid, 10) == 0, "the service stops cleanly");
    return T_DONE();
}
