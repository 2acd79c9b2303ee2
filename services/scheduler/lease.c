/* lease.c -- gp.node.<site>.<node>.lease: the scheduler grants attempts.
 *
 * An agent renews its lease every lease_ms / 3, listing the attempts it
 * runs.  The node's GPU reservations in Redis are the grants: a reported
 * attempt that holds a reservation on that node is kept (its lease
 * renewed); every other one is killed at once: one
 * whose job moved to a newer attempt (the fencing token: the reservation
 * names the newer one), a cancelled, timed-out or preempted one (its end
 * released its GPUs), or one never granted.  So a node that comes back
 * after its work moved is told to kill it.  A node whose live entry lacks
 * the registry's 'reg' mark is not in the inventory: NOTFOUND, and the
 * agent registers again (the registry owns the key; reading that one field
 * is all the scheduler does with it).  When Redis cannot answer the lease
 * fails (UNAVAIL): the agent retries, and keeps its attempts only until
 * its lease ends, as when cut off.  The decision is one script with the
 * grant stamp the fence reads (fence.c), so no renewal can slip between a
 * replacement's check and its release. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/id.h"
#include "gp/log.h"
#include "gp/shard.h"
#include "scheduler.h"

enum { LEASE_GRANTED, LEASE_KILLS, LEASE_NOTFOUND, LEASE_RESEEDING, LEASE_ERROR };
static const char *const lease_outcomes[] = {"granted", "kills", "notfound", "reseeding", "error"};

static void
lease_end(gp_req *req, int outcome, gp_err rc)
{
    sched_count(((sched *)gp_req_state(req))->m_leases[outcome]);
    gp_req_done(req, rc);
}

/* keep / kill from the script's verdicts; both arrays are freed with the
 * reply. */
static gp_err
split(const msg_lease_renew *q, const bool *keep_it, msg_node_registered *out)
{
    const msg_attempt_ref *a = q->attempts.v;
    msg_attempt_ref       *keep, *kill;

    if (q->attempts.n == 0)
        return GP_EOK;
    keep = calloc(q->attempts.n, sizeof(*keep));
    kill = calloc(q->attempts.n, sizeof(*kill));
    if (keep == NULL || kill == NULL) {
        free(keep);
        free(kill);
        return GP_ENOMEM;
    }
    out->keep.v = keep;
    out->kill.v = kill;
    for (uint32_t i = 0; i < q->attempts.n; i++) {
        if (keep_it[i])
            keep[out->keep.n++] = a[i];
        else
            kill[out->kill.n++] = a[i];
    }
    GP_SET_HAS(out, MSG_NODE_REGISTERED__KEEP);
    GP_SET_HAS(out, MSG_NODE_REGISTERED__KILL);
    return GP_EOK;
}

static void
decided(void *arg, gp_err err, const bool *keep, uint32_t n)
{
    gp_req              *req = arg;
    sched               *s = gp_req_state(req);
    msg_node_registered *out = gp_req_out(req);
    gp_err               rc;

    (void)n;
    if (err == GP_ENOTFOUND) {
        lease_end(req, LEASE_NOTFOUND, gp_req_fail(req, GP_ENOTFOUND,
                                                   "node '%s' is not in the inventory (never "
                                                   "registered, or deleted): register again",
                                                   gp_req_param(req, "node")));
        return;
    }
    if (err == GP_ECONFLICT) {      /* fence.c: no 'reg' mark, the registry's reseed not through */
        lease_end(req, LEASE_RESEEDING, gp_req_fail(req, GP_EUNAVAIL,
                                                    "the registry is restoring its live view "
                                                    "after a Redis loss: renew again"));
        return;
    }
    if (err != GP_EOK) {
        lease_end(req, LEASE_ERROR, gp_req_fail(req, GP_EUNAVAIL, "reservations (Redis): %s: "
                                                "renew again", gp_err_name(err)));
        return;
    }
    out->heartbeat_ms = s->cfg->heartbeat_ms;
    out->lease_ms = s->cfg->lease_ms;
    if ((rc = split(gp_req_in(req), keep, out)) != GP_EOK) {
        lease_end(req, LEASE_ERROR, gp_req_fail(req, rc, "reply not built"));
        return;
    }
    for (uint32_t i = 0; i < out->kill.n; i++) {
        const msg_attempt_ref *k = out->kill.v;

        sched_count(s->m_lease_kills);
        GP_INFO("lease_kill", "site=%s node=%s job=%s attempt=%u", gp_req_param(req, "site"),
                gp_req_param(req, "node"), k[i].job_id, k[i].attempt);
    }
    lease_end(req, out->kill.n > 0 ? LEASE_KILLS : LEASE_GRANTED, GP_EOK);
}

static gp_err
on_lease(gp_req *req, const void *in, void *out)
{
    const char *site = gp_req_param(req, "site"), *node = gp_req_param(req, "node");
    const msg_lease_renew *q = in;

    (void)out;
    if (!gp_id_ok(site) || !gp_id_ok(node))
        return gp_req_fail(req, GP_EINVAL, "site, node: must be 1 to 63 of [A-Za-z0-9_-]");
    for (uint32_t i = 0; i < q->attempts.n; i++)
        if (!gp_id_ok(((const msg_attempt_ref *)q->attempts.v)[i].job_id))
            return gp_req_fail(req, GP_EINVAL, "attempts[%u].job_id: must be 1 to 63 of "
                               "[A-Za-z0-9_-]", i);
    /* the registry's 'reg' mark, the node's reservations and the grant
     * stamp in one atomic script (fence.c) */
    if (sched_fence_lease(gp_req_state(req), site, node, q, decided, req) != GP_EOK) {
        sched_count(((sched *)gp_req_state(req))->m_leases[LEASE_ERROR]);
        return gp_req_fail(req, GP_EUNAVAIL, "the live view (Redis) is unavailable: renew again");
    }
    return GP_EPENDING;
}

const gp_route sched_lease_routes[] = {
    {GP_OP_NODE_LEASE, on_lease, GP_R_QUEUE, 0, NULL, NULL},
    {NULL},
};

void
sched_lease_start(sched *s)
{
    gp_metrics *m = gp_app_metrics(s->app);

    gp_metrics_counters(m, "gp_scheduler_leases_total", "outcome", lease_outcomes, 5,
                        "Lease renewals by outcome", s->m_leases);
    s->m_lease_kills = gp_metrics_counter(m, "gp_scheduler_lease_kills_total", NULL,
                                          "Attempts a lease reply told a node to kill");
}
