/* pub_bench.c -- how long the loop thread spends inside one gp_bus_pub:
 * on an idle connection, and when the server does not read (a stalled or
 * overloaded peer: the socket buffers fill), in the same run.
 *
 * gp_bus_pub publishes with cnats' SendAsap, which writes on the calling
 * thread: while the socket takes the bytes that costs microseconds; once
 * the kernel buffers are full the write waits, up to the write deadline
 * (GP_BUS_WRITE_DEADLINE_MS), after which cnats drops the connection and
 * publishes go to its reconnect buffer; each reconnect attempt to a server
 * that accepts but does not answer holds cnats' lock for the connect
 * timeout (GP_BUS_CONNECT_TIMEOUT_MS), and a publish waits for it.
 *
 * The peer is a minimal NATS server in this process (a thread: INFO, PONG
 * to the client's PING, then it reads and discards, or stops reading when
 * told to, and answers nothing on later connections while stopped), so no
 * real server is paused.  Its receive buffer is small so the stall comes
 * after a few MiB instead of tens.  Idle: 20,000 publishes of 1 KiB back to
 * back.  Stalled: back to back until the first publish that waits, then one
 * a millisecond for the rest of STALL_S (so reconnect attempts show), each
 * call timed; bounded in count and time.
 *
 * Output: key=value lines (see bench.h). */
#include <ev.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>

#include "bench.h"
#include "gp/app.h"
#include "gp/bus.h"

#define MSG_BYTES   1024
#define IDLE_N      20000
#define STALL_S     4.0
#define STALL_MAX   200000

static atomic_int  stalled;       /* the fake server stops reading */
static atomic_int  quit;
static int         lfd = -1;

static void
write_all(int fd, const char *s)
{
    size_t n = strlen(s);

    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

/* One client connection: handshake, then drain (or not) until it closes. */
static void
serve(int fd, int port)
{
    char   buf[65536], info[256];
    bool   ponged = false;
    size_t seen = 0;

    if (atomic_load(&stalled))       /* a hung server: accepts, says nothing */
        return;
    snprintf(info, sizeof info, "INFO {\"server_id\":\"pubbench\",\"version\":\"2.9.0\","
             "\"go\":\"go1.20\",\"host\":\"127.0.0.1\",\"port\":%d,\"max_payload\":1048576,"
             "\"proto\":1,\"headers\":true}\r\n", port);
    write_all(fd, info);
    while (!atomic_load(&quit)) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t       r;

        if (atomic_load(&stalled) && ponged) {
            usleep(10000);                          /* not reading */
            continue;
        }
        if (poll(&p, 1, 50) <= 0)
            continue;
        if ((r = read(fd, buf, sizeof buf)) <= 0)
            return;
        /* Answer every PING (handshake and keep-alives); the rest is dropped.
         * A PING split across reads is not looked for: cnats writes it whole. */
        for (ssize_t i = 0; i + 5 < r; i++)
            if (memcmp(buf + i, "PING\r\n", 6) == 0) {
                write_all(fd, "PONG\r\n");
                ponged = true;
            }
        seen += (size_t)r;
    }
}

static void *
server_main(void *arg)
{
    int port = *(int *)arg;

    while (!atomic_load(&quit)) {
        struct pollfd p = {lfd, POLLIN, 0};
        int           fd;

        if (poll(&p, 1, 50) <= 0)
            continue;
        if ((fd = accept(lfd, NULL, NULL)) < 0)
            continue;
        serve(fd, port);
        if (atomic_load(&stalled)) {        /* hold hung connections open until the end */
            while (!atomic_load(&quit) && atomic_load(&stalled))
                usleep(10000);
        }
        close(fd);
    }
    return NULL;
}

static int
listen_on(int *port)
{
    struct sockaddr_in a = {0};
    socklen_t          al = sizeof a;
    int                one = 1, rcv = 16 * 1024;
    int                fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);    /* inherited by accepted */
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 8) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static int
cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static void
conn_cb(void *arg, bool connected)
{
    (void)arg;
    (void)connected;
}

int
main(void)
{
    static double   t[STALL_MAX > IDLE_N ? STALL_MAX : IDLE_N];
    struct ev_loop *loop = ev_default_loop(0);
    gp_bus         *bus = NULL;
    gp_bus_opts     o = {.name = "pub-bench"};
    char            url[64], *msg = calloc(1, MSG_BYTES);
    pthread_t       th;
    int             port = 0, n, fails = 0, slow = 0;
    double          t0, total, worst, first_stall_at = -1;
    gp_bus_stats    st;

    if ((lfd = listen_on(&port)) < 0 || msg == NULL) {
        b_note("pub: cannot listen");
        return 1;
    }
    pthread_create(&th, NULL, server_main, &port);
    snprintf(url, sizeof url, "nats://127.0.0.1:%d", port);
    o.url = url;
    if (gp_bus_new(loop, &o, conn_cb, NULL, &bus) != GP_EOK)
        return 1;
    for (t0 = b_now(); !gp_bus_is_connected(bus) && b_now() - t0 < 10;)
        ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT), usleep(1000);
    if (!gp_bus_is_connected(bus)) {
        b_note("pub: the fake server was not reached");
        return 1;
    }

    /* Idle: the server reads everything. */
    for (n = 0; n < IDLE_N; n++) {
        double a = b_now();

        if (gp_bus_pub(bus, "gp.bench.pub", NULL, msg, MSG_BYTES) != GP_EOK)
            fails++;
        t[n] = b_now() - a;
        if (n % 64 == 0)
            ev_run(loop, EVRUN_NOWAIT);
    }
    qsort(t, (size_t)n, sizeof t[0], cmp_d);
    b_kv("pub_msg_bytes", MSG_BYTES);
    b_kv("pub_idle_us_p50", t[n / 2] * 1e6);
    b_kv("pub_idle_us_p99", t[n * 99 / 100] * 1e6);
    b_kv("pub_idle_us_max", t[n - 1] * 1e6);
    b_kv("pub_idle_errors", fails);

    /* Stalled: the server stops reading; publish on for STALL_S. */
    atomic_store(&stalled, 1);
    usleep(100000);
    fails = 0;
    total = 0;
    t0 = b_now();
    for (n = 0; n < STALL_MAX && b_now() - t0 < STALL_S; n++) {
        double a = b_now();

        if (gp_bus_pub(bus, "gp.bench.pub", NULL, msg, MSG_BYTES) != GP_EOK)
            fails++;
        t[n] = b_now() - a;
        total += t[n];
        if (t[n] > 0.010) {
            slow++;
            if (first_stall_at < 0)
                first_stall_at = a - t0;
            b_note("pub: stalled publish %d took %.3f s at +%.3f s (%s)", n, t[n], a - t0,
                   gp_bus_is_connected(bus) ? "connected" : "disconnected");
        }
        if (n % 64 == 0)
            ev_run(loop, EVRUN_NOWAIT);
        if (first_stall_at >= 0)          /* after the first stall: a publish per ms */
            usleep(1000);
    }
    gp_bus_get_stats(bus, &st);
    qsort(t, (size_t)n, sizeof t[0], cmp_d);
    worst = t[n - 1];
    b_kv("pub_stalled_publishes", n);
    b_kv("pub_stalled_us_p50", t[n / 2] * 1e6);
    b_kv("pub_stalled_worst_ms", worst * 1e3);
    b_kv("pub_stalled_over_10ms", slow);
    b_kv("pub_stalled_first_stall_s", first_stall_at);
    b_kv("pub_stalled_loop_share", total / (b_now() - t0));
    b_kv("pub_stalled_errors", fails);
    b_kv("pub_stalled_counted_errors", (double)st.publish_errors);
    b_kv("pub_write_deadline_ms", GP_BUS_WRITE_DEADLINE_MS);
    b_kv("pub_connect_timeout_ms", GP_BUS_CONNECT_TIMEOUT_MS);

    atomic_store(&quit, 1);
    atomic_store(&stalled, 0);
    gp_bus_free(bus);
    pthread_join(th, NULL);
    close(lfd);
    free(msg);
    gp_lib_close();
    return 0;
}
