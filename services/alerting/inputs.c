/* inputs.c -- what the fleet reports, in: recovery's site events and
 * control-plane isolation, the registry's node states.  They are plain
 * publications of those services; alerting keeps them in its stream
 * FLEET (a stream stores what is published on its subjects) and reads
 * them with durable consumers, so a restart of every alerting instance
 * loses none (a resolve included).  Each message is evaluated against
 * every rule on its signal: a rule that holds raises its alert, one that
 * does not clears it; the message is acked once PostgreSQL has all of
 * them.  One message at a time per consumer (max_inflight 1): a node's
 * lost and its healthy must reach PostgreSQL in the order they came.
 * Node states carry no region: the site inventory gives it (the
 * registry's sites followed by gp/inventory.h: its change events, a full
 * reload every sites-ms), and a site event's own when recovery knew it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/log.h"
#include "alerting.h"
#include "diag.h"

/* ---- the streams the service declares ------------------------------------------- */

static char        fleet_site[GP_MAX_SUBJECT] = GP_PAT_RECOVERY_SITE;
static char        fleet_iso[GP_MAX_SUBJECT] = GP_PAT_RECOVERY_ISOLATION;
static char        fleet_node[GP_MAX_SUBJECT] = GP_PAT_NODE_STATE;
static const char *fleet_subjects[] = {fleet_site, fleet_iso, fleet_node, NULL};
static char        usage_subject[GP_MAX_SUBJECT] = GP_PAT_USAGE_RECORD;
static const char *usage_subjects[] = {usage_subject, NULL};
static char        alerts_subject[GP_MAX_SUBJECT] = GP_PAT_ALERT;
static const char *alerts_subjects[] = {alerts_subject, NULL};
/* The scheduler's stream JOBS, declared here too with the same subjects
 * (every subject below gp.events.<tenant>.job, filled by
 * alerting_jobs_init), so jobs.c's durable consumer has it whichever
 * service starts first. */
static char        jobs_subject[GP_MAX_SUBJECT];
static const char *jobs_subjects[] = {jobs_subject, NULL};

/* FLEET: a week of what the fleet reported (read here), 1 GiB; its
 * messages are plain publications that no publisher retries, so when full
 * the oldest go (read long since) rather than the newest node states.
 * ALERTS: a month of alert events, 512 MiB, a republish within 10
 * minutes (a claim that lapsed mid-publish) stored once; when full a new
 * one is refused and stays in the outbox (alert_events). */
const gp_stream_cfg alerting_streams[] = {
    {.name = "FLEET", .subjects = (const char **)fleet_subjects, .max_age_s = 7 * 24 * 3600,
     .max_bytes = 1LL << 30, .duplicate_window_s = 120, .memory = false, .discard_old = true},
    {.name = "ALERTS", .subjects = (const char **)alerts_subjects, .max_age_s = 30 * 24 * 3600,
     .max_bytes = 512LL << 20, .duplicate_window_s = 600, .memory = false},
    /* the scheduler's (its sched_streams entry, the same) */
    {.name = "JOBS", .subjects = (const char **)jobs_subjects,
     .max_age_s = 7 * 24 * 3600, .max_bytes = 1LL << 30, .duplicate_window_s = 120,
     .memory = false},
    /* metering's (its metering_streams entry, the same) */
    {.name = "USAGE", .subjects = (const char **)usage_subjects, .max_age_s = 30 * 24 * 3600,
     .max_bytes = 4LL << 30, .duplicate_window_s = 600, .memory = false},
    {.name = NULL},
};

void
alerting_jobs_init(void)
{
    gp_op_stream_subject(GP_OP_JOB_EVENT, "job", jobs_subject, sizeof(jobs_subject));
}

/* ---- the site inventory: site -> region ------------------------------------------ */

const char *
alerting_region(alerting *a, const char *site)
{
    const gp_inv_site *s = gp_inventory_site(a->inv, site);

    return s != NULL && s->region[0] ? s->region : "_";
}

/* ---- one input message, every rule on its signal --------------------------------- */

typedef struct pending_in {
    gp_req  *req;
    unsigned left;
    gp_err   err;
} pending_in;

static void
one_done(void *arg, gp_err err)
{
    pending_in *p = arg;

    if (err != GP_EOK)
        p->err = GP_EUNAVAIL;          /* nak: delivered again, raise and clear are idempotent */
    if (--p->left > 0)
        return;
    gp_req_done(p->req, p->err);
    free(p);
}

static gp_err
evaluate(alerting *a, gp_req *req, al_signal sig, const char *value, const char *region,
         const char *site, const char *node, const al_vars *v0, const al_diag *d,
         const char *note)
{
    pending_in *p = calloc(1, sizeof(*p));

    (*a->m_inputs)++;
    if (p == NULL)
        return gp_req_fail(req, GP_ENOMEM, "out of memory");
    p->req = req;
    p->left = 1;                        /* held until every rule is sent */
    for (unsigned i = 0; i < a->rules.n; i++) {
        const al_rule *r = &a->rules.rule[i];
        char           summary[256];
        al_raise       x = {.rule = r, .region = region, .site = site, .node = node,
                            .summary = summary, .diag = d};

        if (r->signal != sig)
            continue;
        x.holds = al_rule_holds(r, value);
        al_expand(r->summary, v0, summary, sizeof(summary));
        p->left++;
        if (alerting_apply(a, &x, one_done, p) != GP_EOK) {
            p->left--;
            p->err = GP_EUNAVAIL;
        }
    }
    if (note != NULL) {               /* the quarantine, on the node's telemetry alerts */
        p->left++;
        if (alerting_note(a, site, node, note, one_done, p) != GP_EOK) {
            p->left--;
            p->err = GP_EUNAVAIL;
        }
    }
    if (sig == AL_SIG_NODE && strcmp(value, "lost") == 0) {
        p->left++;
        if (alerting_node_silent(a, site, node, one_done, p) != GP_EOK) {
            p->left--;
            p->err = GP_EUNAVAIL;
        }
    }
    if (--p->left == 0) {
        gp_err rc = p->err;

        free(p);
        return rc;
    }
    return GP_EPENDING;
}

static gp_err
on_site(gp_req *req, const void *in, void *out)
{
    alerting             *a = gp_req_state(req);
    const msg_site_event *e = in;
    al_diag               d;
    const char           *region = e->region[0] ? e->region : alerting_region(a, e->site);
    al_vars               v = {.site = e->site, .region = region};

    (void)out;
    al_diag_site(e, &d);
    v.cause = d.cause;
    v.reason = e->evidence;
    return evaluate(a, req, AL_SIG_SITE, msg_site_event_kind_names[e->kind], region, e->site,
                    "", &v, &d, NULL);
}

static gp_err
on_isolation(gp_req *req, const void *in, void *out)
{
    alerting                      *a = gp_req_state(req);
    const msg_control_plane_event *e = in;
    al_diag                        d;
    al_vars v = {.site = "_", .region = "_", .reason = e->reason, .sites_silent = e->sites_silent,
                 .sites = e->sites};

    (void)out;
    al_diag_isolation(e, &d);
    v.cause = d.cause;
    return evaluate(a, req, AL_SIG_ISOLATION, msg_control_plane_event_state_names[e->state], "_",
                    "_", "", &v, &d, NULL);
}

static gp_err
on_node(gp_req *req, const void *in, void *out)
{
    alerting             *a = gp_req_state(req);
    const msg_node_state *e = in;
    const char           *region = alerting_region(a, e->site);
    al_diag               d;
    al_vars               v = {.site = e->site, .region = region, .node = e->node,
                               .reason = e->reason};

    char                  note[160];

    (void)out;
    al_diag_node(e, &d);
    v.cause = d.cause;
    snprintf(note, sizeof(note), "node quarantined by the registry (no new work, its "
             "interruptible jobs moved): %.80s", e->reason);
    /* the quarantine noted for the node's telemetry alerts, or its end */
    return evaluate(a, req, AL_SIG_NODE, msg_node_state_state_names[e->state], region, e->site,
                    e->node, &v, &d, e->state == MSG_NODE_STATE_STATE_QUARANTINED ? note : "");
}

/* One message at a time, so every message behind a nak'ed one waits out
 * its delay: retries stay at most 2 s apart (a PostgreSQL that is back
 * is used at once; 20 deliveries still take over half a minute). */
static const gp_durable site_durable = {.stream = "FLEET", .name = "alerting-sites",
                                        .max_deliver = 20, .ack_wait_ms = 30000,
                                        .backoff_ms = 250, .backoff_max_ms = 2000,
                                       .max_inflight = 1};
static const gp_durable iso_durable = {.stream = "FLEET", .name = "alerting-isolation",
                                       .max_deliver = 20, .ack_wait_ms = 30000,
                                       .backoff_ms = 250, .backoff_max_ms = 2000,
                                        .max_inflight = 1};
static const gp_durable node_durable = {.stream = "FLEET", .name = "alerting-nodes",
                                        .max_deliver = 20, .ack_wait_ms = 30000,
                                        .backoff_ms = 250, .backoff_max_ms = 2000,
                                        .max_inflight = 1};

const gp_route alerting_input_routes[] = {
    {GP_OP_RECOVERY_SITE, on_site, 0, 10000, NULL, &site_durable},
    {GP_OP_RECOVERY_ISOLATION, on_isolation, 0, 10000, NULL, &iso_durable},
    {GP_OP_NODE_STATE, on_node, 0, 10000, NULL, &node_durable},
    {NULL},
};
