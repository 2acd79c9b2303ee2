/* gpctl_fake_scheduler.c -- a stand-in for gridpool-scheduler's job API,
 * for gpctl's tests while the real one is being written
 * (tests/integration/gpctl_jobs_fake_test.sh).  It serves the contract's
 * operations (apiJobSubmit/Get/List/Cancel, adminJobList) from memory and
 * publishes JobEvents, with fixed behaviour:
 *
 *   - a spec with gpu_models stays pending, waiting on 2,911 nodes (2,400
 *     wrong model, 300 not enough free GPUs, 211 outside the latency
 *     bound); one without is running at once: attempt 1 on s0001/n-fake-1,
 *     GPUs 0..gpus_per_node-1 on each of its nodes;
 *   - a pool other than "" refused: NOTFOUND "pool: no such pool <p>";
 *   - the same client_request_id returns the same job;
 *   - list pages hold at most 2 jobs, so a client must page.
 *
 * Jobs are kept encoded (msgpack) and decoded into each reply, which the
 * chassis clears after sending. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/app.h"
#include "gp/clock.h"
#include "gp/codec.h"
#include "gp/log.h"
#include "msg_gen.h"

#define MAX_JOBS  512
#define PAGE      2

typedef struct fake {
    gp_buf   jobs[MAX_JOBS];
    char     ids[MAX_JOBS][64];
    char     tenants[MAX_JOBS][64];
    char     keys[MAX_JOBS][64];
    size_t   n;
    uint64_t seq[MAX_JOBS];
} fake;

static fake F;

typedef struct fake_cfg {
    gp_common_cfg common;
} fake_cfg;

static const gp_cfg_opt fake_opts[] = {
    GP_CFG_TABLE(fake_cfg, common, gp_common_cfg_opts),
    GP_CFG_END
};

/* ---- storage ------------------------------------------------------------------------ */

static int
find(const char *tenant, const char *id)
{
    for (size_t i = 0; i < F.n; i++)
        if (strcmp(F.ids[i], id) == 0 && (tenant == NULL || strcmp(F.tenants[i], tenant) == 0))
            return (int)i;
    return -1;
}

static gp_err
load(int i, msg_job *out)
{
    return gp_msg_decode(&msg_job_desc, F.jobs[i].p, F.jobs[i].n, out, NULL, 0);
}

static gp_err
store(int i, const msg_job *j)
{
    gp_buf_reset(&F.jobs[i]);
    return gp_msg_encode(&msg_job_desc, j, &F.jobs[i]);
}

/* Publishes the event and appends it to the stored job's events. */
static void
event(gp_app *app, int i, int32_t ev, const char *reason)
{
    msg_job       j;
    msg_job_event e = {0}, *all;

    if (load(i, &j) != GP_EOK)
        return;
    snprintf(e.tenant, sizeof(e.tenant), "%s", j.tenant);
    snprintf(e.job_id, sizeof(e.job_id), "%s", j.id);
    e.seq = ++F.seq[i];
    e.event = ev;
    e.state = j.state;
    e.at_ms = gp_wall_ms();
    snprintf(e.reason, sizeof(e.reason), "%s", reason);
    gp_app_publish(app, GP_OP_JOB_EVENT,
                   (const char *const[]){j.tenant, j.id, msg_job_event_event_names[ev]}, &e);
    all = realloc(j.events.v, (j.events.n + 1) * sizeof(*all));
    if (all != NULL) {
        all[j.events.n++] = e;
        j.events.v = all;
        store(i, &j);
    }
    gp_msg_clear(&msg_job_desc, &j);
}

/* ---- submit ------------------------------------------------------------------------ */

static void
place(msg_job *j)
{
    int          nodes = j->spec.nodes > 0 ? j->spec.nodes : 1;
    msg_attempt *a = calloc((size_t)nodes, sizeof(*a));

    j->state = MSG_JOB_STATE_RUNNING;
    j->attempts_made = 1;
    j->attempts.v = a;
    j->attempts.n = a != NULL ? (uint32_t)nodes : 0;
    for (int r = 0; a != NULL && r < nodes; r++) {
        snprintf(a[r].job_id, sizeof(a[r].job_id), "%s", j->id);
        a[r].attempt = 1;
        a[r].rank = r;
        snprintf(a[r].site, sizeof(a[r].site), "s0001");
        snprintf(a[r].node, sizeof(a[r].node), "n-fake-%d", r + 1);
        a[r].state = MSG_ATTEMPT_STATE_RUNNING;
        a[r].created_ms = a[r].started_ms = j->created_ms;
        a[r].latency_est_ms = 7.5;
        GP_SET_HAS(&a[r], MSG_ATTEMPT__LATENCY_EST_MS);
        a[r].score = 900;
        a[r].score_latency = 500;
        a[r].score_price = 400;
        a[r].gpus.v = calloc((size_t)j->spec.gpus_per_node, sizeof(int32_t));
        for (int g = 0; a[r].gpus.v != NULL && g < j->spec.gpus_per_node; g++)
            ((int32_t *)a[r].gpus.v)[a[r].gpus.n++] = g;
    }
}

static void
make_pending(msg_job *j)
{
    static const msg_pending_reason w[] = {
        {.reason = MSG_PENDING_REASON_REASON_LATENCY, .nodes = 211},
        {.reason = MSG_PENDING_REASON_REASON_MODEL, .nodes = 2400},
        {.reason = MSG_PENDING_REASON_REASON_GPUS, .nodes = 300},
    };

    j->state = MSG_JOB_STATE_PENDING;
    j->waiting.v = malloc(sizeof(w));
    j->waiting.n = j->waiting.v != NULL ? 3 : 0;
    if (j->waiting.v != NULL)
        memcpy(j->waiting.v, w, sizeof(w));
    j->nodes_considered = 2911;
    snprintf(j->reason, sizeof(j->reason), "no node fits");
}

/* A new job from the spec (deep copy through the codec). */
static gp_err
new_job(const char *tenant, const msg_job_spec *spec, msg_job *j)
{
    gp_buf b;
    gp_err rc;

    gp_buf_init(&b, 0);
    rc = gp_msg_encode(&msg_job_spec_desc, spec, &b);
    if (rc == GP_EOK)
        rc = gp_msg_decode(&msg_job_spec_desc, b.p, b.n, &j->spec, NULL, 0);
    gp_buf_fini(&b);
    snprintf(j->id, sizeof(j->id), "j-%04zu", F.n + 1);
    snprintf(j->tenant, sizeof(j->tenant), "%s", tenant);
    j->created_ms = j->updated_ms = gp_wall_ms();
    if (spec->gpu_models.n > 0)
        make_pending(j);
    else
        place(j);
    return rc;
}

static int
find_key(const char *tenant, const char *key)
{
    for (size_t i = 0; key[0] != '\0' && i < F.n; i++)
        if (strcmp(F.keys[i], key) == 0 && strcmp(F.tenants[i], tenant) == 0)
            return (int)i;
    return -1;
}

static gp_err
on_submit(gp_req *req, const void *in, void *out)
{
    const msg_job_spec *spec = in;
    const char         *tenant = gp_req_param(req, "tenant");
    int                 i = find_key(tenant, spec->client_request_id);
    msg_job             j = {0};

    if (i >= 0)
        return load(i, out);
    if (spec->pool[0] != '\0')
        return gp_req_fail(req, GP_ENOTFOUND, "pool: no such pool %s", spec->pool);
    if (F.n == MAX_JOBS)
        return gp_req_fail(req, GP_EUNAVAIL, "the fake scheduler is full");
    if (new_job(tenant, spec, &j) != GP_EOK || store((int)F.n, &j) != GP_EOK)
        return gp_msg_clear(&msg_job_desc, &j), gp_req_fail(req, GP_EINTERNAL, "encode");
    i = (int)F.n++;
    snprintf(F.ids[i], sizeof(F.ids[i]), "%s", j.id);
    snprintf(F.tenants[i], sizeof(F.tenants[i]), "%s", tenant);
    snprintf(F.keys[i], sizeof(F.keys[i]), "%s", spec->client_request_id);
    event(gp_req_app(req), i, MSG_JOB_EVENT_EVENT_SUBMITTED, "");
    if (j.state == MSG_JOB_STATE_RUNNING)
        event(gp_req_app(req), i, MSG_JOB_EVENT_EVENT_STARTED, "");
    gp_msg_clear(&msg_job_desc, &j);
    return load(i, out);
}

/* ---- get, cancel, list ---------------------------------------------------------------- */

static gp_err
on_get(gp_req *req, const void *in, void *out)
{
    const msg_id_request *q = in;
    int                   i = find(gp_req_param(req, "tenant"), q->id);

    if (i < 0)
        return gp_req_fail(req, GP_ENOTFOUND, "job %s: no such job", q->id);
    return load(i, out);
}

static gp_err
on_cancel(gp_req *req, const void *in, void *out)
{
    const msg_id_request *q = in;
    int                   i = find(gp_req_param(req, "tenant"), q->id);
    msg_job               j;

    if (i < 0)
        return gp_req_fail(req, GP_ENOTFOUND, "job %s: no such job", q->id);
    if (load(i, &j) != GP_EOK)
        return gp_req_fail(req, GP_EINTERNAL, "decode");
    if (j.state != MSG_JOB_STATE_SUCCEEDED && j.state != MSG_JOB_STATE_FAILED &&
        j.state != MSG_JOB_STATE_CANCELLED) {
        j.state = MSG_JOB_STATE_CANCELLED;
        j.ended_ms = gp_wall_ms();
        snprintf(j.reason, sizeof(j.reason), "cancelled by the tenant");
        for (uint32_t a = 0; a < j.attempts.n; a++)
            ((msg_attempt *)j.attempts.v)[a].state = MSG_ATTEMPT_STATE_CANCELLED;
        store(i, &j);
        event(gp_req_app(req), i, MSG_JOB_EVENT_EVENT_CANCELLED, "cancelled by the tenant");
    }
    gp_msg_clear(&msg_job_desc, &j);
    return load(i, out);
}

static bool
listed(const msg_job_list_request *q, const char *tenant, const msg_job *j)
{
    bool on_site = q->site[0] == '\0';

    for (uint32_t a = 0; !on_site && a < j->attempts.n; a++)
        on_site = strcmp(((const msg_attempt *)j->attempts.v)[a].site, q->site) == 0;
    return on_site && strcmp(j->id, q->after) > 0 &&
           (tenant[0] == '\0' || strcmp(j->tenant, tenant) == 0) &&
           (!GP_HAS(q, MSG_JOB_LIST_REQUEST__STATE) || q->state == j->state);
}

static gp_err
on_list(gp_req *req, const void *in, void *out)
{
    const msg_job_list_request *q = in;
    msg_job_list               *l = out;
    const char *tenant = gp_req_op(req) == GP_OP_API_JOB_LIST ? gp_req_param(req, "tenant")
                                                               : q->tenant;
    msg_job    *items = calloc(PAGE + 1, sizeof(*items));

    if (items == NULL)
        return gp_req_fail(req, GP_ENOMEM, "out of memory");
    l->items.v = items;
    for (size_t i = 0; i < F.n && l->items.n <= PAGE; i++) {
        msg_job *j = &items[l->items.n];

        if (load((int)i, j) != GP_EOK || !listed(q, tenant, j)) {
            gp_msg_clear(&msg_job_desc, j);
            continue;
        }
        l->items.n++;
    }
    if (l->items.n > PAGE) {                    /* one more than a page: there is a next */
        gp_msg_clear(&msg_job_desc, &items[PAGE]);
        l->items.n = PAGE;
        snprintf(l->next, sizeof(l->next), "%s", items[PAGE - 1].id);
    }
    for (uint32_t i = 0; i < l->items.n; i++) {     /* lists carry no attempts or events */
        msg_job strip = {0};

        strip.attempts = items[i].attempts;
        strip.events = items[i].events;
        gp_msg_clear(&msg_job_desc, &strip);
        memset(&items[i].attempts, 0, sizeof(items[i].attempts));
        memset(&items[i].events, 0, sizeof(items[i].events));
    }
    return GP_EOK;
}

static const gp_route fake_routes[] = {
    {GP_OP_API_JOB_SUBMIT, on_submit, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_API_JOB_GET, on_get, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_API_JOB_LIST, on_list, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_API_JOB_CANCEL, on_cancel, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_ADMIN_JOB_LIST, on_list, GP_R_QUEUE, 0, NULL, NULL},
    {NULL},
};

int
main(int argc, char **argv)
{
    fake_cfg      cfg;
    gp_app       *app = NULL;
    int           code;
    gp_err        rc;

    gp_cfg_load("scheduler", fake_opts, &cfg, argc, argv, NULL, &code);
    if (code != GP_CFG_CONTINUE)
        return code;
    for (size_t i = 0; i < MAX_JOBS; i++)
        gp_buf_init(&F.jobs[i], 0);
    rc = gp_app_new("scheduler", "fake", &cfg.common, 0, NULL, &app);
    if (rc == GP_EOK)
        rc = gp_app_serve(app, NULL, fake_routes, NULL);
    if (rc == GP_EOK)
        rc = gp_app_run(app);
    gp_app_free(app);
    for (size_t i = 0; i < MAX_JOBS; i++)
        gp_buf_fini(&F.jobs[i]);
    gp_lib_close();
    return rc == GP_EOK ? 0 : 1;
}
