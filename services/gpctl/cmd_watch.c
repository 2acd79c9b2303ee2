/* cmd_watch.c -- gpctl watch jobs [--tenant T] [--job ID]: live JobEvents
 * from gp.events.<T|*>.job.<ID|*>.* (the jobEvent operation's pattern);
 * gpctl watch alerts [--severity S] [--region R] [--site S]: alerts,
 * firing and resolved, from gp.alerts.<S|*>.<R|*>.<S|*>.*.  One line each
 * (-o json: one JSON object a line), until SIGINT or SIGTERM; exits 0
 * then.  A core NATS subscription: it shows what happens from now on (the
 * JOBS and ALERTS streams keep the past for durable consumers).  watch
 * alerts --durable NAME reads ALERTS through the durable consumer NAME
 * instead, acking what it printed: run again with the same NAME after a
 * disconnection, it prints what came meanwhile, and nothing twice. */
#include <ev.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "gp/id.h"
#include "gp/limits.h"
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
    const char *durable;                      /* alerts: read ALERTS through this consumer */
    const char *tenant, *job;                 /* jobs */
    const char *severity, *region, *site;     /* alerts */
} watch_args;

static const char watch_usage[] =
    "expected: watch jobs [--tenant T] [--job ID] | watch alerts [--severity S] [--region R] "
    "[--site S] [--durable NAME]";

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
            slot = strcmp(argv[i], "--tenant") == 0 ? &wa->tenant
                   : strcmp(argv[i], "--job") == 0  ? &wa->job : NULL;
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

static void
run_watch(watch *w, const char *pattern)
{
    ev_signal sint, sterm;

    ev_signal_init(&sint, on_signal, SIGINT);
    ev_signal_init(&sterm, on_signal, SIGTERM);
    sint.data = sterm.data = w;
    ev_signal_start(w->c->loop, &sint);
    ev_signal_start(w->c->loop, &sterm);
    fprintf(stderr, "Watching %s (Ctrl-C to stop)\n", pattern);
    while (!w->stop)
        ev_run(w->c->loop, EVRUN_ONCE);
    ev_signal_stop(w->c->loop, &sint);
    ev_signal_stop(w->c->loop, &sterm);
}

/* watch alerts --durable NAME: a pull consumer of ALERTS, filtered on the
 * pattern of the flags (the server keeps its position: a second run with
 * the same NAME and filter goes on where the first stopped). */
static int
watch_durable(gpctl *c, const watch_args *wa)
{
    char         pattern[GP_MAX_SUBJECT + 1];
    watch        w = {.c = c};
    gp_bus_pull *pull = NULL;
    gp_pull_cfg  cfg = {.stream = "ALERTS", .durable = wa->durable, .batch = 64};
    gp_err       err;
    int          rc;

    if (!wa->alerts)
        return usage_error("watch", "--durable is for watch alerts");
    c->jetstream = true;
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    err = gp_op_pattern(GP_OP_ALERT, pattern, sizeof(pattern),
                        (const char *const[]){wa->severity, wa->region, wa->site, NULL, NULL});
    cfg.filter_subject = pattern;
    if (err == GP_EOK)
        err = gp_bus_js_pull_new(c->bus, &cfg, on_alert_js, &w, &pull);
    if (err != GP_EOK) {
        fprintf(stderr, "gpctl: cannot read ALERTS through %s: %s\n", wa->durable,
                gp_err_str(err));
        return ctl_exit_code(err, true);
    }
    gp_buf_init(&w.b, 0);
    run_watch(&w, pattern);
    gp_bus_js_pull_free(pull);
    /* the worker ends within its fetch (<= 1 s): let it, so the acks go out */
    for (int i = 0; i < 15; i++)
        ev_run(c->loop, EVRUN_NOWAIT), usleep(100000);
    gp_buf_fini(&w.b);
    fprintf(stderr, "%llu alerts\n", (unsigned long long)w.shown);
    return GPCTL_OK;
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
    run_watch(&w, pattern);
    gp_bus_sub_free(sub);
    gp_buf_fini(&w.b);
    fprintf(stderr, "%llu %s\n", (unsigned long long)w.shown, wa.alerts ? "alerts" : "events");
    return GPCTL_OK;
}
