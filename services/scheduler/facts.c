/* facts.c -- gp.int.sched.attempt: what the scheduler's tables say of one
 * node's part of an attempt (the job's tenant and pool, the product it was
 * priced under, its state and why it ended).  Metering asks once per
 * attempt, and again when it closes the attempt's usage: the customer is
 * not charged for work lost to a platform fault, and only the scheduler
 * knows whether an attempt was lost, superseded or preempted. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>

#include "gp/id.h"
#include "gp/log.h"
#include "scheduler.h"

static const char facts_sql[] =
    "SELECT a.job_id, a.attempt, a.node, a.rank, a.site, j.tenant, j.pool,"
    "  COALESCE(a.product, j.product) AS product, cardinality(a.gpus) AS gpus,"
    "  a.price_micros_per_gpu_hour, a.currency, a.state,"
    "  CASE WHEN a.state IN ('reserved', 'starting', 'running') THEN 'false' ELSE 'true'"
    "  END AS ended,"
    "  NULLIF(a.reason, '') AS reason, a.preempted_by, a.started_ms, a.ended_ms"
    " FROM attempts a JOIN jobs j ON j.id = a.job_id"
    " WHERE a.job_id = $1 AND a.attempt = $2::int AND a.node = $3";

static void
facts_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req *req = arg;

    if (err != GP_EOK || nres < 1) {
        gp_req_done(req, gp_req_fail(req, GP_EUNAVAIL, "database: %s", detail));
        return;
    }
    if (PQntuples(res[0]) == 0) {
        gp_req_done(req, gp_req_fail(req, GP_ENOTFOUND, "no such attempt on that node"));
        return;
    }
    err = sched_row_to_msg(&msg_attempt_facts_desc, res[0], 0, gp_req_out(req));
    gp_req_done(req, err == GP_EOK ? GP_EOK
                                   : gp_req_fail(req, GP_EINTERNAL, "row: %s", gp_err_name(err)));
}

static gp_err
on_facts(gp_req *req, const void *in, void *out)
{
    const msg_attempt_facts_request *q = in;
    sched                           *s = gp_req_state(req);
    char                             att[16];
    const char                      *p[3] = {q->job_id, att, q->node};

    (void)out;
    if (!gp_id_ok(q->job_id) || !gp_id_ok(q->node))
        return gp_req_fail(req, GP_EINVAL, "job_id, node: must be 1 to 63 of [A-Za-z0-9_-]");
    snprintf(att, sizeof(att), "%u", q->attempt);
    if (gp_db_query(gp_app_db(s->app), facts_sql, 3, p, 0, facts_read, req) != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "database unavailable");
    return GP_EPENDING;
}

const gp_route sched_facts_routes[] = {
    {GP_OP_INT_SCHED_ATTEMPT, on_facts, GP_R_QUEUE, 0, NULL, NULL},
    {NULL},
};
