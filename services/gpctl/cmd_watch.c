/* cmd_watch.c -- gpctl watch jobs [--tenant T] [--job ID]: live JobEvents
 * from gp.events.<T|*>.job.<ID|*>.* (the jobEvent operation's pattern);
 * gpctl watch alerts [--severity S] [--region R] [--site S]: alerts,
 * firing and resolved, from gp.alerts.<S|*>.<R|*>.<S|*>.*.  One line each
 * (-o json: one JSON object a line), until SIGINT or SIGTERM; exits 0
 * then.  A core NATS subscription: it shows what happens from now on (the
 * JOBS and ALERTS streams keep the past for durable consumers).
 *
 * --durable NAME reads the stream (ALERTS, JOBS) through the durable
 * consumer NAME instead, acking what it printed: run again with the same
 * NAME after a disconnection, it prints what came meanwhile, and nothing
 * twice.  The operator's NAME is its own, made (or updated) here with the
 * flags' filter.  A tenant's is the one the scheduler made for it,
 * tenant-<T> (gp/tenant_events.h), filtered to its own events: gpctl only
 * binds to it (a tenant's identity may not make one), and so for any
 * identity a NAME tenant-*.  nats-server's refusal (another tenant's
 * consumer) ends it with DENIED, exit 1. */
#include <ev.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "gp/id.h"
#include "gp/limits.h"
#include "gp/tenant_events.h"
#include "gpctl.h"
#include "jobview.h"

typedef struct watch {
    gpctl   *c;
    gp_buf   b;
    uint64_t shown, bad;
    int      stop;
} watch;

static void
print_event(watch *w, const msg_job_event *e)
{
    char line[640];

    if (w->c->out != OUT_JSON) {
        job_event_line(e, line, sizeof(line));
        printf("%s\n", line);
    } else {
        gp_buf_reset(&w->b);
        if (gp_msg_to_json(&msg_job_event_desc, e, &w->b) == GP_EOK)
            printf("%s\n", w->b.p);
    }
    fflush(stdout);
    w->shown++;
}

static void
on_event(void *arg, const gp_bus_msg *m)
{
    watch        *w = arg;
    msg_job_event e;
    char          err[GP_ERRBUF_LEN];

    if (gp_msg_decode(&msg_job_event_desc, m->data, m->len, &e, err, sizeof(err)) != GP_EOK) {
        fprintf(stderr, "gpctl: %s: not a JobEvent: %s\n", m->subject, err);
        w->bad++;
        return;
    }
    print_event(w, &e);
    gp_msg_clear(&msg_job_event_desc, &e);
}

static void print_alert(watch *w, const char *subject, const void *data, size_t len);

/* from the durable consumer: printed, then acked */
static void
on_event_js(void *arg, gp_jsmsg *m)
{
    gp_bus_msg bm = {.subject = gp_jsmsg_subject(m), .data = gp_jsmsg_data(m),
                     .len = gp_jsmsg_len(m)};

    on_event(arg, &bm);
    gp_jsmsg_ack(m);
}

static void
on_alert(void *arg, const gp_bus_msg *m)
{
    print_alert(arg, m->subject, m->data, m->len);
}

/* from the durable consumer: printed, then acked */
static void
on_alert_js(void *arg, gp_jsmsg *m)
{
    print_alert(arg, gp_jsmsg_subject(m), gp_jsmsg_data(m), gp_jsmsg_len(m));
    gp_jsmsg_ack(m);
}

static void
print_alert(watch *w, const char *subject, const void *data, size_t len)
{
    msg_alert a;
    char      err[GP_ERRBUF_LEN];

    if (gp_msg_decode(&msg_alert_desc, data, len, &a, err, sizeof(err)) != GP_EOK) {
        fprintf(stderr, "gpctl: %s: not an Alert: %s\n", subject, err);
        w->bad++;
        return;
    }
    if (w->c->out != OUT_JSON) {
        printf("%s %-8s %-6s %-22s region=%s site=%s%s%s cause=%s dispatch=%s muted=%u: %s\n",
               a.event_id, msg_alert_status_names[a.status], msg_alert_severity_names[a.severity],
               a.alertname, a.region, a.site, a.node[0] ? " node=" : "", a.node, a.cause,
               msg_alert_dispatch_names[a.dispatch], a.muted, a.summary);
    } else {
        gp_buf_reset(&w->b);
        if (gp_msg_to_json(&msg_alert_desc, &a, &w->b) == GP_EOK)
            printf("%s\n", w->b.p);
    }
    fflush(stdout);
    w->shown++;
    gp_msg_clear(&msg_alert_desc, &a);
}

static void
on_signal(struct ev_loop *loop, ev_signal *s, int revents)
{
    (void)revents;
    ((watch *)s->data)->stop = 1;
    ev_break(loop, EVBREAK_ALL);
}

typedef struct watch_args {
    bool        alerts;
    const char *durable;                      /* read the stream through this consumer */
    const char *tenant, *job;                 /* jobs */
    const char *severity, *region, *site;     /* alerts */
} watch_args;

static const char watch_usage[] =
    "expected: watch jobs [--tenant T] [--job ID] [--durable NAME] | watch alerts "
    "[--severity S] [--region R] [--site S] [--durable NAME]";

static int
parse_watch(int argc, char **argv, watch_args *wa)
{
    memset(wa, 0, sizeof(*wa));
    if (argc < 1)
        return usage_error("watch", "%s", watch_usage);
    if (strcmp(argv[0], "alerts") == 0 || strcmp(argv[0], "alert") == 0)
        wa->alerts = true;
    else if (strcmp(argv[0], "jobs") != 0 && strcmp(argv[0], "job") != 0)
        return usage_error("watch", "%s", watch_usage);
    for (int i = 1; i < argc; i++) {
        const char **slot = NULL;

        if (!wa->alerts)
            slot = strcmp(argv[i], "--tenant") == 0    ? &wa->tenant
                   : strcmp(argv[i], "--job") == 0     ? &wa->job
                   : strcmp(argv[i], "--durable") == 0 ? &wa->durable : NULL;
        else
            slot = strcmp(argv[i], "--severity") == 0  ? &wa->severity
                   : strcmp(argv[i], "--region") == 0 ? &wa->region
                   : strcmp(argv[i], "--site") == 0   ? &wa->site
                   : strcmp(argv[i], "--durable") == 0 ? &wa->durable : NULL;
        if (slot == NULL)
            return usage_error("watch", "unknown option or argument \"%s\"", argv[i]);
        if (i + 1 >= argc)
            return usage_error("watch", "%s needs a value", argv[i]);
        if (!gp_id_ok(argv[i + 1]) && strcmp(argv[i + 1], "_") != 0)
            return usage_error("watch", "%s \"%s\": expected 1 to 63 of [A-Za-z0-9_-]", argv[i],
                               argv[i + 1]);
        *slot = argv[++i];
    }
    return GPCTL_OK;
}

/* A durable's reads are on a worker thread: the server's refusal of them
 * (-ERR, a permissions violation) is looked for here, on the loop. */
static void
on_refusal_check(struct ev_loop *loop, ev_timer *t, int revents)
{
    watch *w = t->data;

    (void)revents;
    if (ctl_refused(w->c)) {
        w->stop = 2;
        ev_break(loop, EVBREAK_ALL);
    }
}

static void
run_watch(watch *w, const char *pattern, bool durable)
{
    ev_signal sint, sterm;
    ev_timer  check;

    ev_signal_init(&sint, on_signal, SIGINT);
    ev_signal_init(&sterm, on_signal, SIGTERM);
    ev_timer_init(&check, on_refusal_check, 0.2, 0.2);
    sint.data = sterm.data = check.data = w;
    ev_signal_start(w->c->loop, &sint);
    ev_signal_start(w->c->loop, &sterm);
    if (durable)
        ev_timer_start(w->c->loop, &check);
    fprintf(stderr, "Watching %s (Ctrl-C to stop)\n", pattern);
    while (!w->stop)
        ev_run(w->c->loop, EVRUN_ONCE);
    ev_timer_stop(w->c->loop, &check);
    ev_signal_stop(w->c->loop, &sint);
    ev_signal_stop(w->c->loop, &sterm);
}

/* The durable's stream, callback, filter and whether gpctl may make it. */
static gp_err
durable_cfg(gpctl *c, const watch_args *wa, gp_pull_cfg *cfg, gp_bus_js_cb **cb, char *pattern,
            size_t n)
{
    char prefix[GP_MAX_ID + 16];

    snprintf(prefix, sizeof(prefix), GP_TENANT_CONSUMER_FMT, "");
    cfg->durable = wa->durable;
    cfg->batch = 64;
    cfg->filter_subject = pattern;
    if (wa->alerts) {
        cfg->stream = "ALERTS";
        *cb = on_alert_js;
        return gp_op_pattern(GP_OP_ALERT, pattern, n,
                             (const char *const[]){wa->severity, wa->region, wa->site, NULL, NULL});
    }
    cfg->stream = GP_JOBS_STREAM;
    *cb = on_event_js;
    /* a tenant's consumer: the scheduler's, bound as it is, its own filter */
    cfg->bind_only = c->tenant[0] != '\0' || strncmp(wa->durable, prefix, strlen(prefix)) == 0;
    if (cfg->bind_only) {
        bool other = wa->tenant != NULL && (strncmp(wa->durable, prefix, strlen(prefix)) != 0 ||
                                            strcmp(wa->durable + strlen(prefix), wa->tenant) != 0);

        cfg->filter_subject = NULL;
        snprintf(pattern, n, "%s %s", GP_JOBS_STREAM, wa->durable);
        return other || wa->job != NULL ? GP_EINVAL : GP_EOK;
    }
    return gp_op_pattern(GP_OP_JOB_EVENT, pattern, n,
                         (const char *const[]){wa->tenant, wa->job, NULL});
}

/* watch --durable NAME: a pull consumer of the stream, filtered on the
 * pattern of the flags, or bound to a tenant's consumer (the server keeps
 * its position: a second run with the same NAME goes on where the first
 * stopped). */
static int
watch_durable(gpctl *c, const watch_args *wa)
{
    char          pattern[GP_MAX_SUBJECT + 1];
    watch         w = {.c = c};
    gp_bus_pull  *pull = NULL;
    gp_pull_cfg   cfg = {0};
    gp_bus_js_cb *cb = NULL;
    gp_err        err = durable_cfg(c, wa, &cfg, &cb, pattern, sizeof(pattern));
    int           rc;

    if (err == GP_EINVAL && cfg.bind_only)
        return usage_error("watch", "--durable %s is a tenant's consumer, filtered to its "
                           "events by the scheduler: no --job, no other --tenant", wa->durable);
    c->jetstream = true;
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    if (err == GP_EOK)
        err = gp_bus_js_pull_new(c->bus, &cfg, cb, &w, &pull);
    if (err != GP_EOK) {
        fprintf(stderr, "gpctl: cannot read %s through %s: %s\n", cfg.stream, wa->durable,
                gp_err_str(err));
        return ctl_exit_code(err, true);
    }
    gp_buf_init(&w.b, 0);
    run_watch(&w, pattern, true);
    gp_bus_js_pull_free(pull);
    /* the worker ends within its fetch (<= 1 s): let it, so the acks go out */
    for (int i = 0; i < 15; i++)
        ev_run(c->loop, EVRUN_NOWAIT), usleep(100000);
    gp_buf_fini(&w.b);
    fprintf(stderr, "%llu %s\n", (unsigned long long)w.shown, wa->alerts ? "alerts" : "events");
    return w.stop == 2 ? GPCTL_FAIL : GPCTL_OK;
}

int
cmd_watch(gpctl *c, int argc, char **argv)
{
    watch_args  wa;
    char        pattern[GP_MAX_SUBJECT + 1];
    watch       w = {.c = c};
    gp_bus_sub *sub = NULL;
    gp_err      err;
    int         rc = parse_watch(argc, argv, &wa);

    if (rc != GPCTL_OK)
        return rc;
    if (wa.durable != NULL)
        return watch_durable(c, &wa);
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    if (wa.alerts)
        err = gp_op_pattern(GP_OP_ALERT, pattern, sizeof(pattern),
                            (const char *const[]){wa.severity, wa.region, wa.site, NULL, NULL});
    else
        err = gp_op_pattern(GP_OP_JOB_EVENT, pattern, sizeof(pattern),
                            (const char *const[]){wa.tenant, wa.job, NULL});
    if (err == GP_EOK)
        err = gp_bus_sub_new(c->bus, pattern, NULL, wa.alerts ? on_alert : on_event, &w, &sub);
    if (err == GP_EOK)
        err = gp_bus_flush_blocking(c->bus, c->timeout_ms);
    /* The server answers a refused SUB with -ERR before the flush's PONG. */
    if (err == GP_EOK && ctl_refused(c)) {
        gp_bus_sub_free(sub);
        return GPCTL_FAIL;
    }
    if (err != GP_EOK) {
        gp_bus_sub_free(sub);
        fprintf(stderr, "gpctl: cannot subscribe to %s: %s\n", pattern, gp_err_str(err));
        return ctl_exit_code(err, true);
    }
    gp_buf_init(&w.b, 0);
    run_watch(&w, pattern, false);
    gp_bus_sub_free(sub);
    gp_buf_fini(&w.b);
    fprintf(stderr, "%llu %s\n", (unsigned long long)w.shown, wa.alerts ? "alerts" : "events");
    return GPCTL_OK;
}
