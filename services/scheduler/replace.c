/* replace.c -- gp.int.sched.replace: a lost node's attempts, once the
 * fence opens (fence.c).  Recovery asks when the registry declares a node
 * lost, and again after the wait the reply names, until the fence opens.
 *
 * The node's live attempts are read from PostgreSQL, then the fence
 * script removes their reservations on that node in one atomic call with
 * the check that their lease has surely run out there (no renewal can
 * slip in between: a renewal either came first and moved the fence, or
 * finds no reservation and kills them); only then do they end, as lost (a
 * platform fault: end.h), so a replacement never starts while the old
 * attempt may still run.  A failure after the script is retried by the
 * next request, which finds the fence open. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "end.h"
#include "gp/id.h"
#include "gp/log.h"
#include "scheduler.h"

#define REPLACE_MAX 64           /* attempts one request ends; the rest at the next */

typedef struct replace_call {
    gp_req  *req;
    unsigned n;                  /* the node's live attempts, as PostgreSQL read them */
    char     job[REPLACE_MAX][GP_MAX_ID + 1];
    uint32_t att[REPLACE_MAX];
} replace_call;

static void
replace_end(replace_call *c, gp_err err)
{
    gp_req_done(c->req, err);
    free(c);
}

static void
ended(void *arg, gp_err err, const char *detail)
{
    replace_call              *c = arg;
    sched                     *s = gp_req_state(c->req);
    const msg_replace_request *q = gp_req_in(c->req);
    msg_replaced              *out = gp_req_out(c->req);

    if (err != GP_EOK) {
        /* the reservations are gone: a retry finds the fence open and ends them */
        replace_end(c, gp_req_fail(c->req, err, "ending the attempts: %s", detail));
        return;
    }
    for (unsigned i = 0; i < c->n; i++)
        GP_WARN("attempt_replaced", "job=%s attempt=%u site=%s node=%s reason=\"%s\"", c->job[i],
                c->att[i], q->site, q->node, q->reason);
    out->attempts = c->n;
    sched_count(s->m_replaced);
    replace_end(c, GP_EOK);
}

static void
fenced(void *arg, gp_err err, uint32_t wait_ms)
{
    replace_call              *c = arg;
    sched                     *s = gp_req_state(c->req);
    const msg_replace_request *q = gp_req_in(c->req);
    msg_replaced              *out = gp_req_out(c->req);
    gp_err                     rc;

    if (err != GP_EOK) {
        replace_end(c, gp_req_fail(c->req, GP_EUNAVAIL, "the fence (Redis): %s", gp_err_name(err)));
        return;
    }
    if (wait_ms > 0) {                            /* a lease may still run: ask again later */
        out->wait_ms = wait_ms;
        replace_end(c, GP_EOK);
        return;
    }
    rc = sched_end_lost(s, q->site, q->node, c->job, c->att, c->n, ended, c);
    if (rc != GP_EOK)
        replace_end(c, gp_req_fail(c->req, GP_EUNAVAIL, "database: %s", gp_err_name(rc)));
}

static void
live_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    replace_call              *c = arg;
    sched                     *s = gp_req_state(c->req);
    const msg_replace_request *q = gp_req_in(c->req);
    gp_err                     rc;

    if (err == GP_EOK && nres != 1)
        err = GP_EINTERNAL, detail = "no result";
    if (err != GP_EOK) {
        replace_end(c, gp_req_fail(c->req, err, "database: %s", detail));
        return;
    }
    for (int i = 0; i < PQntuples(res[0]) && c->n < REPLACE_MAX; i++, c->n++) {
        snprintf(c->job[c->n], sizeof(c->job[0]), "%s", PQgetvalue(res[0], i, 0));
        c->att[c->n] = (uint32_t)strtoul(PQgetvalue(res[0], i, 1), NULL, 10);
    }
    if (c->n == 0) {                              /* nothing live: nothing to fence */
        replace_end(c, GP_EOK);
        return;
    }
    rc = sched_fence_replace(s, q->site, q->node, c->job, c->att, c->n, fenced, c);
    if (rc != GP_EOK)
        replace_end(c, gp_req_fail(c->req, GP_EUNAVAIL, "the fence (Redis): %s", gp_err_name(rc)));
}

static gp_err
on_replace(gp_req *req, const void *in, void *out)
{
    const msg_replace_request *q = in;
    sched                     *s = gp_req_state(req);
    replace_call              *c;
    const char                *p[1] = {q->node};
    gp_err                     rc;

    (void)out;
    if (!gp_id_ok(q->site) || !gp_id_ok(q->node))
        return gp_req_fail(req, GP_EINVAL, "site, node: must be 1 to 63 of [A-Za-z0-9_-]");
    if ((c = calloc(1, sizeof(*c))) == NULL)
        return gp_req_fail(req, GP_ENOMEM, "out of memory");
    c->req = req;
    /* every live attempt of the node, whatever its site column says */
    rc = gp_db_query(gp_app_db(s->app),
                     "SELECT job_id, attempt FROM attempts WHERE node = $1"
                     " AND state IN ('reserved','starting','running') ORDER BY job_id, attempt"
                     " LIMIT 64",                  /* REPLACE_MAX */
                     1, p, 0, live_read, c);
    if (rc != GP_EOK) {
        free(c);
        return gp_req_fail(req, GP_EUNAVAIL, "database: %s", gp_err_name(rc));
    }
    return GP_EPENDING;
}

const gp_route sched_replace_routes[] = {
    {GP_OP_INT_SCHED_REPLACE, on_replace, GP_R_QUEUE, 0, NULL, NULL},
    {NULL},
};

void
sched_replace_start(sched *s)
{
    s->m_replaced = gp_metrics_counter(gp_app_metrics(s->app), "gp_scheduler_replacements_total",
                                       NULL, "Replace requests that ended a lost node's attempts "
                                       "(the fence was open)");
}
