/* main.c -- gridpool-metering: the service as gp_app_main runs it.  What it
 * does: metering.h; the domain is in beat.c, close.c and outbox.c, its
 * options in config.c, its state in start.c. */
#include "gp/app.h"
#include "metering.h"

#define METERING_VERSION "0.1.0"

static const gp_svc_task metering_tasks[] = {
    GP_SVC_TASK("sweep", metering_cfg, sweep_ms, metering_sweep_run),
    GP_SVC_TASK("outbox", metering_cfg, sweep_ms, metering_outbox_run),
    GP_SVC_TASK_FIXED("epoch", 500, metering_epoch_run),
    GP_SVC_TASK_FIXED("prune", 60000, metering_prune_run),
    GP_SVC_TASKS_END,
};

static const gp_route *const metering_routes[] = {
    metering_beat_routes, metering_attempt_routes, NULL,
};

static const gp_service metering_service = {
    .name = "metering",
    .version = METERING_VERSION,
    GP_SVC_CFG(metering_cfg, common, metering_cfg_opts),
    .state_size = sizeof(metering),
    .needs = GP_NEED_REDIS | GP_NEED_PG | GP_NEED_JS,
    .migrations = metering_migrations,
    .grants = metering_db_grants,
    .streams = metering_streams,
    .routes = metering_routes,
    .tasks = metering_tasks,
    .init = metering_init,
    .free = metering_free,
};

int
main(int argc, char **argv)
{
    return gp_app_main(&metering_service, argc, argv);
}
