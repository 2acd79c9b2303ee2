/* logs.c -- gp.api.<tenant>.job.logs: a piece of an attempt's output,
 * fetched from the node that ran it (its agent keeps the last log-kb KiB;
 * nothing of it is stored in the control plane).
 *
 * The job's own tenant only: the attempt is looked up under the tenant's
 * role (row-level security) and the job's tenant must be the caller (a site
 * partner sees a customer's attempts at its sites, never their output).
 * Then the node's cmd.logs is asked and its answer passed on. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/id.h"
#include "gp/log.h"
#include "gp/tenancy.h"
#include "scheduler.h"

typedef struct logs_call {
    gp_req          *req;
    msg_logs_request in;
} logs_call;

static void
answered(void *arg, gp_err err, bool transport, const void *reply, const char *detail)
{
    logs_call      *c = arg;
    msg_logs       *out = gp_req_out(c->req);
    const msg_logs *r = reply;

    if (err != GP_EOK) {
        gp_req_done(c->req, gp_req_fail(c->req, transport ? GP_EUNAVAIL : err,
                                        "node: %s%s%s", transport ? "no answer " : "",
                                        transport ? gp_err_name(err) : "", detail));
        free(c);
        return;
    }
    *out = *r;
    out->data = (gp_bytes){0};
    if (r->data.n > 0 && (out->data.p = malloc(r->data.n)) != NULL) {
        memcpy(out->data.p, r->data.p, r->data.n);
        out->data.n = r->data.n;
    }
    gp_req_done(c->req, r->data.n > 0 && out->data.p == NULL
                            ? gp_req_fail(c->req, GP_ENOMEM, "out of memory")
                            : GP_EOK);
    free(c);
}

static void
found(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    logs_call  *c = arg;
    sched      *s = gp_req_state(c->req);
    char        subj[GP_MAX_SUBJECT];
    const char *site, *node;
    gp_err      rc;

    if (err != GP_EOK || nres != 3) {
        gp_req_done(c->req, gp_req_fail(c->req, err != GP_EOK ? err : GP_EINTERNAL,
                                        "database: %s", detail));
        free(c);
        return;
    }
    if (PQntuples(res[2]) == 0) {
        gp_req_done(c->req, gp_req_fail(c->req, GP_ENOTFOUND, "job_id: no job '%s'%s",
                                        c->in.job_id,
                                        c->in.attempt ? " with that attempt" : " with an attempt"));
        free(c);
        return;
    }
    c->in.attempt = (uint32_t)strtoul(PQgetvalue(res[2], 0, 0), NULL, 10);
    GP_SET_HAS(&c->in, MSG_LOGS_REQUEST__ATTEMPT);
    site = PQgetvalue(res[2], 0, 1);
    node = PQgetvalue(res[2], 0, 2);
    rc = gp_op_subjectf(GP_OP_NODE_LOGS, subj, sizeof(subj), site, node);
    if (rc == GP_EOK)
        rc = gp_call2(gp_app_bus(s->app), subj, &msg_logs_request_desc, &c->in, &msg_logs_desc,
                      s->cfg->dispatch_timeout_ms, answered, c);
    if (rc != GP_EOK) {
        gp_req_done(c->req, gp_req_fail(c->req, GP_EUNAVAIL, "node %s: %s", node,
                                        gp_err_name(rc)));
        free(c);
    }
}

/* The attempt (the latest, or the one named) and its rank-0 node, under
 * the tenant's role, of a job that is the tenant's own. */
static const char attempt_sql[] =
    "SELECT a.attempt, a.site, a.node FROM attempts a JOIN jobs j ON j.id = a.job_id\n"
    "  WHERE a.job_id = $1 AND j.tenant = $2 AND a.rank = 0 AND ($3::int = 0 OR a.attempt = $3)\n"
    "  ORDER BY a.attempt DESC LIMIT 1";

static gp_err
on_logs(gp_req *req, const void *in, void *out)
{
    const msg_logs_request *r = in;
    const char             *tenant = gp_req_param(req, "tenant");
    logs_call              *c;
    gp_db_tx               *tx;
    char                    att[16];
    gp_err                  rc;

    (void)out;
    if (!gp_id_ok(tenant))
        return gp_req_fail(req, GP_EINVAL, "tenant: must be 1 to 63 of [A-Za-z0-9_-]");
    if (!gp_id_ok(r->job_id))
        return gp_req_fail(req, GP_EINVAL, "job_id: must be 1 to 63 of [A-Za-z0-9_-]");
    if ((c = calloc(1, sizeof(*c))) == NULL)
        return gp_req_fail(req, GP_ENOMEM, "out of memory");
    c->req = req;
    c->in = *r;
    snprintf(att, sizeof(att), "%u", r->attempt);
    const char *p[] = {r->job_id, tenant, att};

    tx = gp_db_tx_new(gp_app_db(gp_req_app(req)));
    gp_db_tx_add(tx, "SET TRANSACTION READ WRITE", 0, NULL);
    gp_db_tx_add(tx, GP_TENANCY_SET_ROLE_SQL, 1, &tenant);   /* an add's error: at run */
    gp_db_tx_add(tx, attempt_sql, 3, p);
    rc = gp_db_tx_run(tx, 0, found, c);
    if (rc != GP_EOK) {
        free(c);
        return gp_req_fail(req, GP_EUNAVAIL, "database: %s", gp_err_name(rc));
    }
    return GP_EPENDING;
}

const gp_route sched_logs_routes[] = {
    {GP_OP_API_JOB_LOGS, on_logs, GP_R_QUEUE, 0, NULL, NULL},
    {NULL},
};
