/* epoch.c -- the per-shard rebuild driver (gp/epoch.h): the marks, the
 * rounds, the phase counter that waits for every begin before the one read
 * and for every shard before the round's end, and the results. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/clock.h"
#include "gp/epoch.h"
#include "gp/log.h"

enum { R_DONE, R_PRESENT, R_FAILED };
static const char *const results[] = {"done", "present", "failed"};

struct gp_epoch_round {
    gp_epoch     *ep;
    unsigned      pending;           /* calls of the phase not answered yet */
    unsigned      done, failed;
    char          why[64];           /* the first failure's */
    void         *data;              /* the service's */
    void         *jobs_data;         /* the jobs' data, job_size each */
    gp_epoch_job  job[GP_SHARDS];
};

void
gp_epoch_init(gp_epoch *ep, const gp_epoch_ops *ops, void *svc, const char *instance,
              gp_metrics *m)
{
    ep->ops = ops;
    ep->svc = svc;
    ep->instance = instance;
    if (m != NULL)
        gp_metrics_counters(m, ops->metric, "result", results, 3,
                            "Shards whose Redis keys were rebuilt from PostgreSQL, by result "
                            "(present: found whole, failed: tried again)", ep->m_rebuilds);
}

void
gp_epoch_mark(gp_epoch *ep, unsigned shard)
{
    if (shard < GP_SHARDS) {
        ep->stale[shard] = true;
        ep->stale_any = true;
    }
}

void
gp_epoch_start(gp_epoch *ep)
{
    for (unsigned sh = 0; sh < GP_SHARDS; sh++)
        ep->stale[sh] = true;
    ep->stale_any = true;
}

gp_epoch_job *
gp_epoch_begun(gp_epoch_round *r, unsigned sh)
{
    return sh < GP_SHARDS && r->job[sh].begun ? &r->job[sh] : NULL;
}

void *
gp_epoch_data(gp_epoch_round *r)
{
    return r->data;
}

static void
count(uint64_t *c)
{
    if (c != NULL)
        (*c)++;
}

static void
round_free(gp_epoch_round *r)
{
    free(r->jobs_data);
    free(r->data);
    free(r);
}

/* The round is over: its log lines, then the next may run. */
static void
round_end(gp_epoch_round *r)
{
    gp_epoch           *ep = r->ep;
    const gp_epoch_ops *ops = ep->ops;
    char                fields[256] = "";

    if (r->done > 0) {
        ops->fields(ep->svc, r, fields, sizeof(fields));
        GP_WARN("redis_rebuilt", "shards=%u %s", r->done, fields);
    }
    if (r->failed > 0)
        GP_WARN("redis_rebuild_failed", "shards=%u why=\"%s\"", r->failed, r->why);
    if (ops->end != NULL)
        ops->end(ep->svc, r);
    round_free(r);
    ep->busy = false;
    if (ep->stale_any && ops->again != NULL)
        ops->again(ep->svc);
}

/* One call of the phase answered: the round goes on when all have. */
static void
phase_step(gp_epoch_round *r)
{
    if (--r->pending > 0)
        return;
    for (unsigned sh = 0; sh < GP_SHARDS; sh++)
        if (r->job[sh].begun && r->job[sh].step == GP_EPOCH_BEGIN) {
            r->ep->ops->read(r->ep->svc, r);   /* every begin answered: the truth, then the rest */
            return;
        }
    round_end(r);
}

static void
shard_end(gp_epoch_job *j, int result, const char *why)
{
    gp_epoch_round *r = j->round;
    gp_epoch       *ep = r->ep;

    j->begun = false;
    count(ep->m_rebuilds[result]);
    if (result == R_DONE) {
        r->done++;
        ep->ops->done(ep->svc, j);
    } else if (result == R_FAILED) {
        if (r->failed++ == 0)
            snprintf(r->why, sizeof(r->why), "shard %u step %d: %s", j->shard, j->step, why);
        if (strcmp(why, "lost") != 0)  /* lost: another rebuild or a loss took it over */
            gp_epoch_mark(ep, j->shard);
    }
    phase_step(r);
}

/* A string ends the shard's phase: begun, wait, or its result. */
static void
string_answered(gp_epoch_job *j, const char *s)
{
    if (strcmp(s, "begun") == 0) {
        phase_step(j->round);          /* waits for the read */
    } else if (strcmp(s, "wait") == 0) {
        j->begun = false;              /* not settled yet: the next run asks again */
        gp_epoch_mark(j->round->ep, j->shard);
        phase_step(j->round);
    } else {
        shard_end(j, strcmp(s, "sealed") == 0    ? R_DONE
                     : strcmp(s, "present") == 0 ? R_PRESENT : R_FAILED, s);
    }
}

void
gp_epoch_answered(void *arg, const redisReply *rep, gp_err err)
{
    gp_epoch_job *j = arg;
    gp_epoch     *ep = j->round->ep;
    gp_err        rc;

    if (err != GP_EOK || rep->type == REDIS_REPLY_ERROR) {
        shard_end(j, R_FAILED, err != GP_EOK ? gp_err_name(err) : rep->str);
        return;
    }
    if (rep->type == REDIS_REPLY_STRING) {
        string_answered(j, rep->str);
        return;
    }
    if ((rc = ep->ops->step(ep->svc, j, rep)) != GP_EOK)
        shard_end(j, R_FAILED, gp_err_name(rc));
}

void
gp_epoch_read_done(gp_epoch_round *r, gp_err err, const char *detail)
{
    gp_epoch *ep = r->ep;

    r->pending = 1;                    /* held while sending */
    for (unsigned sh = 0; sh < GP_SHARDS; sh++) {
        gp_epoch_job *j = &r->job[sh];
        gp_err        rc;

        if (!j->begun)
            continue;
        r->pending++;
        j->step = GP_EPOCH_FIRST;
        if (err != GP_EOK)
            shard_end(j, R_FAILED, detail != NULL ? detail : gp_err_name(err));
        else if ((rc = ep->ops->step(ep->svc, j, NULL)) != GP_EOK)
            shard_end(j, R_FAILED, gp_err_name(rc));
    }
    phase_step(r);
}

static gp_epoch_round *
round_new(gp_epoch *ep)
{
    gp_epoch_round *r = calloc(1, sizeof(*r));
    size_t          js = ep->ops->job_size;

    if (r == NULL)
        return NULL;
    r->ep = ep;
    r->data = calloc(1, ep->ops->round_size > 0 ? ep->ops->round_size : 1);
    r->jobs_data = calloc(GP_SHARDS, js > 0 ? js : 1);
    if (r->data == NULL || r->jobs_data == NULL) {
        round_free(r);
        return NULL;
    }
    for (unsigned sh = 0; sh < GP_SHARDS; sh++)
        r->job[sh] = (gp_epoch_job){.round = r, .shard = sh, .step = GP_EPOCH_BEGIN,
                                    .data = (char *)r->jobs_data + sh * js};
    return r;
}

void
gp_epoch_run(gp_epoch *ep)
{
    gp_epoch_round *r;

    if (ep->busy || !ep->stale_any || (r = round_new(ep)) == NULL)
        return;
    ep->busy = true;
    ep->stale_any = false;
    r->pending = 1;                    /* held while sending */
    for (unsigned sh = 0; sh < GP_SHARDS; sh++) {
        gp_epoch_job *j = &r->job[sh];
        gp_err        rc;

        if (!ep->stale[sh])
            continue;
        ep->stale[sh] = false;         /* a refusal from now on marks it again */
        j->begun = true;
        snprintf(j->token, sizeof(j->token), "%s:%llu", ep->instance,
                 (unsigned long long)gp_mono_ms());
        r->pending++;
        if ((rc = ep->ops->begin(ep->svc, j)) != GP_EOK)
            shard_end(j, R_FAILED, gp_err_name(rc));
    }
    phase_step(r);
}
