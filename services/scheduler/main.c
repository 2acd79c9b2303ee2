/* main.c -- gridpool-scheduler: what gp_app_main runs.  Options in
 * config.c, the state's setup in start.c, the domain in the other files
 * (scheduler.h says which layer each is in). */
#include "gp/app.h"
#include "scheduler.h"

#define SCHEDULER_VERSION "0.1.0"

static const gp_svc_task sched_tasks[] = {
    GP_SVC_TASK("outbox", scheduler_cfg, outbox_ms, sched_outbox_run),
    GP_SVC_TASK("jobs_gauge", scheduler_cfg, gauge_ms, sched_jobs_count),
    GP_SVC_TASK("maxrun", scheduler_cfg, maxrun_ms, sched_maxrun_run),
    GP_SVC_TASK_FIXED("retire", 250, sched_retire_sweep),
    GP_SVC_TASK_FIXED("epoch", 500, sched_epoch_run),
    GP_SVC_TASK("reconcile", scheduler_cfg, reconcile_ms, sched_reconcile_run),
    GP_SVC_TASK("feed", scheduler_cfg, feed_ms, sched_feed_run),
    GP_SVC_TASK("bookings", scheduler_cfg, bookings_ms, sched_bookings_run),
    GP_SVC_TASK("place", scheduler_cfg, place_ms, sched_place_run),
    GP_SVC_TASKS_END,
};

static const gp_route *const sched_routes[] = {
    sched_job_routes, sched_attempt_routes, sched_lease_routes, sched_replace_routes,
    sched_facts_routes, sched_logs_routes, sched_secret_routes, NULL,
};

static const gp_service scheduler_service = {
    .name = "scheduler",
    .version = SCHEDULER_VERSION,
    GP_SVC_CFG(scheduler_cfg, common, scheduler_cfg_opts),
    .state_size = sizeof(sched),
    .needs = GP_NEED_REDIS | GP_NEED_PG | GP_NEED_JS,
    .migrations = scheduler_migrations,
    .grants = scheduler_db_grants,
    .streams = sched_streams,
    .routes = sched_routes,
    .tasks = sched_tasks,
    .init = sched_init,
    .free = sched_free,
};

int
main(int argc, char **argv)
{
    return gp_app_main(&scheduler_service, argc, argv);
}
