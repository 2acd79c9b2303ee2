/* signal.c -- AttemptSignal to an agent on its node's subject (checkpoint
 * or stop), with the scheduler's deadline.  A stop that fails is not
 * retried here: the node's next lease renewal finds no grant for the
 * attempt and kills it (lease.c), so a lost signal costs at most a lease
 * period. */
#include "signal.h"

#include <stdio.h>
#include <stdlib.h>

#include "gp/log.h"
#include "scheduler.h"

typedef struct sig_ctx {
    sched           *s;
    char             job[GP_MAX_ID + 1], node[GP_MAX_ID + 1];
    uint32_t         attempt;
    sched_signal_cb *cb;
    void            *arg;
} sig_ctx;

static void
signalled(void *arg, gp_err err, const void *reply, const char *detail)
{
    sig_ctx *c = arg;

    (void)reply;
    if (err != GP_EOK) {              /* the node's lease kill list stops it later */
        sched_count(c->s->m_signal_failures);
        GP_WARN("attempt_signal_failed", "job=%s attempt=%u node=%s code=%s detail=\"%s\"",
                c->job, c->attempt, c->node, gp_err_name(err), detail);
    }
    if (c->cb != NULL)
        c->cb(c->s, c->job, c->attempt, err, c->arg);
    free(c);
}

void
sched_signal(sched *s, const char *site, const char *node, const char *job, uint32_t attempt,
             int action, sched_signal_cb *cb, void *arg)
{
    msg_attempt_signal q = {.attempt = attempt, .action = action};
    char               subj[GP_MAX_SUBJECT];
    sig_ctx           *c = calloc(1, sizeof(*c));
    gp_err             rc;

    if (c == NULL)
        return;
    *c = (sig_ctx){.s = s, .attempt = attempt, .cb = cb, .arg = arg};
    snprintf(c->job, sizeof(c->job), "%s", job);
    snprintf(c->node, sizeof(c->node), "%s", node);
    snprintf(q.job_id, sizeof(q.job_id), "%s", job);
    rc = gp_op_subjectf(GP_OP_NODE_SIGNAL, subj, sizeof(subj), site, node);
    if (rc == GP_EOK)
        rc = gp_call(gp_app_bus(s->app), subj, &msg_attempt_signal_desc, &q,
                     &msg_attempt_ack_desc, s->cfg->signal_timeout_ms, signalled, c);
    if (rc != GP_EOK)
        signalled(c, rc, NULL, "not sent");
}
