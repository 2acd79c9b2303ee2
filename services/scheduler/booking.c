/* booking.c -- giving an attempt's GPUs back: the reservation in Redis
 * (the only authority on who holds a GPU) and this instance's booking in
 * its snapshot (what the next placement pass sees), then a kick of the
 * placement pass, since capacity came free. */
#include "booking.h"

#include "gp/log.h"
#include "scheduler.h"

static void
released(void *arg, const sched_res_result *res)
{
    sched *s = arg;

    if (res->status != SCHED_RES_OK) {    /* the reconcile removes the orphan later */
        sched_count(s->m_release_failures);
        GP_WARN("release_failed", "node=%s code=%s", res->node, gp_err_name(res->err));
    }
}

void
sched_release_to(sched *s, const char *site, const char *job, uint32_t attempt,
                 char (*node)[GP_MAX_ID + 1], uint32_t n, const char *heir)
{
    sched_res_node nodes[8];
    gp_err         rc;

    n = n > 8 ? 8 : n;
    for (uint32_t i = 0; i < n; i++) {
        if (heir == NULL || snap_handover(&s->snap, node[i], job, attempt, heir) != 0)
            snap_unbook(&s->snap, node[i], job, attempt);
        nodes[i] = (sched_res_node){node[i], 0};       /* 0: whatever (job, attempt) holds */
    }
    if (n == 0)
        return;
    rc = heir != NULL
             ? sched_reserve_handover(s->res, site, job, attempt, nodes, n, heir, released, s)
             : sched_reserve_release(s->res, site, job, attempt, nodes, n, released, s);
    if (rc != GP_EOK) {
        sched_count(s->m_release_failures);
        GP_WARN("release_failed", "job=%s attempt=%u site=%s code=not_sent", job, attempt, site);
    }
    sched_place_kick(s);
}

void
sched_release(sched *s, const char *site, const char *job, uint32_t attempt,
              char (*node)[GP_MAX_ID + 1], uint32_t n)
{
    sched_release_to(s, site, job, attempt, node, n, NULL);
}
