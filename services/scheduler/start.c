/* start.c -- gridpool-scheduler's hooks for gp_app_main: its state on the
 * app (the snapshot, the fair queue, the reservations in Redis), each
 * module's start, and what it frees at exit (the free hook runs after the
 * app is freed, so no callback of the bus, Redis or PostgreSQL can come). */
#include "end.h"
#include "gp/app.h"
#include "scheduler.h"

/* reserve.c found a shard's epoch missing */
static void
res_stale(void *arg, unsigned shard)
{
    sched_shard_stale(arg, shard);
}

gp_err
sched_init(gp_app *app, const void *cfg, void *state)
{
    sched               *s = state;
    const scheduler_cfg *c = cfg;
    fair_cfg             fc;
    gp_err               rc;

    s->app = app;
    s->cfg = c;
    s->place_task = gp_app_task(app, "place");   /* before anything may kick it */
    s->epoch_task = gp_app_task(app, "epoch");
    fair_cfg_default(&fc);
    fc.half_life_ms = c->fair_half_life_ms;
    fc.hold_after_ms = c->hold_after_ms;
    fc.hold_gpus = c->hold_gpus;
    if (snap_init(&s->snap, NULL) != 0 || fair_init(&s->fair, &fc) != 0)
        return GP_ENOMEM;
    if ((rc = sched_reserve_new(gp_app_kv(app), gp_app_metrics(app), &s->res)) != GP_EOK)
        return rc;
    sched_reserve_on_stale(s->res, res_stale, s);
    sched_epoch_start(s);
    sched_jobs_start(s);
    sched_events_start(s);
    sched_attempts_start(s);
    sched_lease_start(s);
    sched_fence_start(s);
    sched_replace_start(s);
    sched_end_start(s);
    sched_reconcile_start(s);
    if ((rc = sched_secrets_start(s)) != GP_EOK)
        return rc;
    rc = sched_queue_start(s);
    return rc == GP_EOK ? sched_feed_start(s) : rc;
}

void
sched_free(void *state)
{
    sched *s = state;

    sched_dispatch_free(s);
    sched_queue_free(s);
    sched_feed_free(s);
    sched_reserve_free(s->res);
    gp_buf_fini(&s->recon_jobs);
    gp_buf_fini(&s->recon_attempts);
    snap_free(&s->snap);
    fair_free(&s->fair);
}
