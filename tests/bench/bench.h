/* tests/bench/bench.h -- helpers shared by the benchmarks: clocks, child
 * processes, HTTP GET of /metrics and /healthz, the benchmark heartbeat
 * (8 GPUs of full telemetry, 2 attempts) and key=value output.
 *
 * Benchmarks are not tests: they print figures as "key=value" lines on
 * stdout (tests/bench/run.sh collects them into BUILD/bench.txt and the
 * table); progress and notes go to stderr as "# ..." lines.
 * Header-only, every function static inline, so each bench stays one
 * program. */
#ifndef GP_BENCH_H
#define GP_BENCH_H

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gp/codec.h"
#include "msg_gen.h"

static inline double
b_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void
b_note(const char *fmt, ...)
{
    va_list ap;

    fputs("# ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
}

/* One figure: "key=value" on stdout. */
static inline void
b_kv(const char *key, double v)
{
    if (v == (double)(long long)v && v < 1e15 && v > -1e15)
        printf("%s=%lld\n", key, (long long)v);
    else
        printf("%s=%.4g\n", key, v);
    fflush(stdout);
}

static inline const char *
b_env(const char *name)
{
    const char *v = getenv(name);

    if (v == NULL || *v == '\0') {
        fprintf(stderr, "# environment variable %s missing (run through tests/bench/run.sh)\n",
                name);
        exit(2);
    }
    return v;
}

static inline int
b_free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t          len = sizeof(sa);
    int                fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* Starts argv as a child; stdout and stderr go to logpath (appended). */
static inline pid_t
b_spawn(char *const argv[], const char *logpath)
{
    pid_t pid = fork();

    if (pid == 0) {
        if (logpath != NULL && freopen(logpath, "a", stdout) != NULL)
            dup2(fileno(stdout), 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* SIGTERM, then SIGKILL after timeout_s; returns the exit status or -1. */
static inline int
b_stop(pid_t pid, double timeout_s)
{
    double end = b_now() + timeout_s;
    int    st;

    if (pid <= 0)
        return -1;
    kill(pid, SIGTERM);
    while (b_now() < end) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* GET http://127.0.0.1:port/path into *out (malloc'd, NUL-terminated);
 * returns the HTTP status, or -1 when the port did not answer. */
static inline int
b_http_get(int port, const char *path, char **out)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    char               req[256];
    size_t             cap = 1 << 16, n = 0;
    char              *buf;
    ssize_t            k;
    int                fd = socket(AF_INET, SOCK_STREAM, 0), status = -1;

    *out = NULL;
    if (fd < 0)
        return -1;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\n\r\n", path);
    if (write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
        close(fd);
        return -1;
    }
    buf = malloc(cap);
    while (buf != NULL && (k = read(fd, buf + n, cap - n - 1)) > 0) {
        n += (size_t)k;
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap *= 2);

            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
        }
    }
    close(fd);
    if (buf == NULL)
        return -1;
    buf[n] = '\0';
    if (sscanf(buf, "HTTP/%*s %d", &status) != 1)
        status = -1;
    *out = buf;
    return status;
}

/* Value of one metric line "series value" in a /metrics body, or -1. */
static inline double
b_metric(const char *body, const char *series)
{
    const char *p = body;
    size_t      n = strlen(series);

    while (p != NULL && (p = strstr(p, series)) != NULL) {
        if ((p == body || p[-1] == '\n') && p[n] == ' ')
            return atof(p + n + 1);
        p += n;
    }
    return -1;
}

/* Waits up to timeout_s for /healthz to answer 200; false if the child died
 * or the time ran out. */
static inline bool
b_wait_healthy(pid_t pid, int port, double timeout_s)
{
    double end = b_now() + timeout_s;
    int    st;

    while (b_now() < end) {
        char *body = NULL;
        int   code = b_http_get(port, "/healthz", &body);

        free(body);
        if (code == 200)
            return true;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return false;
        usleep(50000);
    }
    return false;
}

/* VmRSS of a process, bytes, or -1. */
static inline long long
b_rss(pid_t pid)
{
    char      path[64], line[256];
    long long kb = -1;
    FILE     *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

/* CPU seconds (user + system) of a process; 0 when it is gone.  ppid
 * (may be NULL): its parent. */
static inline double
b_cpu_of2(pid_t pid, pid_t *ppid)
{
    char               path[64], buf[1024], *p;
    unsigned long long ut = 0, st = 0;
    int                pp = 0;
    FILE              *f;
    size_t             n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (pid <= 0 || (f = fopen(path, "r")) == NULL)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')');
    /* after ")": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (p == NULL || sscanf(p + 2, "%*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &pp,
                            &ut, &st) != 3)
        return 0;
    if (ppid != NULL)
        *ppid = (pid_t)pp;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static inline double
b_cpu_of(pid_t pid)
{
    return b_cpu_of2(pid, NULL);
}

/* CPU seconds of a process and its live children (PostgreSQL's postmaster
 * and its backends).  A backend that exited meanwhile is not counted. */
static inline double
b_cpu_tree(pid_t root)
{
    double         sum = b_cpu_of(root);
    DIR           *d = opendir("/proc");
    struct dirent *e;

    while (root > 0 && d != NULL && (e = readdir(d)) != NULL) {
        pid_t  pid = (pid_t)atoi(e->d_name), pp = 0;
        double c;

        if (pid <= 0 || pid == root)
            continue;
        c = b_cpu_of2(pid, &pp);
        if (pp == root)
            sum += c;
    }
    if (d != NULL)
        closedir(d);
    return sum;
}

/* The pid in the first line of dir/name, or -1. */
static inline pid_t
b_pid_file(const char *dir, const char *name)
{
    char  path[512];
    int   pid = -1;
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if ((f = fopen(path, "r")) != NULL) {
        if (fscanf(f, "%d", &pid) != 1)
            pid = -1;
        fclose(f);
    }
    return (pid_t)pid;
}

static inline int
b_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* Median of n values (sorts v). */
static inline double
b_median(double *v, int n)
{
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof(*v), b_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- the benchmark heartbeat ---------------------------------------------------- */

#define B_GPUS      8
#define B_ATTEMPTS  2

/* A heartbeat with every field present: 8 GPUs of full telemetry (two XIDs
 * and two throttle reasons each) and 2 running attempts.  seed varies the
 * numbers a little.  Clear with gp_msg_clear(&msg_heartbeat_desc, hb). */
static inline void
b_heartbeat(msg_heartbeat *hb, const char *site, const char *node, uint64_t seed)
{
    msg_gpu_telemetry *g = calloc(B_GPUS, sizeof(*g));
    msg_attempt_usage *a = calloc(B_ATTEMPTS, sizeof(*a));

    memset(hb, 0, sizeof(*hb));
    snprintf(hb->site, sizeof(hb->site), "%s", site);
    snprintf(hb->node, sizeof(hb->node), "%s", node);
    hb->seq = 123456 + seed;
    hb->sent_ms = 1733000000000ull + seed;
    hb->uptime_s = 86400 * 3 + seed % 1000;
    hb->disk = MSG_HEARTBEAT_DISK_OK;
    hb->uplink_rtt_ms = 12.625 + (double)(seed % 7);
    hb->has = (1u << 9) - 1;                  /* every field on the wire */
    for (int i = 0; i < B_GPUS; i++) {
        int32_t *x = malloc(2 * sizeof(*x)), *t = malloc(2 * sizeof(*t));

        g[i].has = (1u << 10) - 1;
        g[i].index = i;
        g[i].state = MSG_GPU_TELEMETRY_STATE_OK;
        g[i].temp_c = 64.5 + i + (double)(seed % 10) / 4;
        g[i].power_w = 612.25 + 3.5 * i;
        g[i].util_pct = 97.125 - i;
        g[i].mem_used_mb = 71234 + (uint32_t)i * 17;
        g[i].ecc_sbe = 1234567 + (uint64_t)i;
        g[i].ecc_dbe = (uint64_t)i % 2;
        x[0] = 13;
        x[1] = 79;
        t[0] = MSG_GPU_TELEMETRY_THROTTLE_POWER;
        t[1] = MSG_GPU_TELEMETRY_THROTTLE_SW_THERMAL;
        g[i].xids = (gp_arr){x, 2};
        g[i].throttle = (gp_arr){t, 2};
    }
    for (int i = 0; i < B_ATTEMPTS; i++) {
        a[i].has = (1u << 5) - 1;
        snprintf(a[i].job_id, sizeof(a[i].job_id), "job-7f3a9c2e-%04d-4b1d-9e8f-%012llu", i,
                 (unsigned long long)seed);
        a[i].attempt = 1 + (uint32_t)i;
        a[i].gpu_ms = 3600000ull * 4 + seed;
        a[i].energy_mj = 2500000000ull + seed;
        a[i].state = MSG_ATTEMPT_USAGE_STATE_RUNNING;
    }
    hb->gpus = (gp_arr){g, B_GPUS};
    hb->attempts = (gp_arr){a, B_ATTEMPTS};
}

#endif
