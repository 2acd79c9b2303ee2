/* main.c -- gridpool-registry: the service as gp_app_main runs it.  What it
 * does: registry.h; its options and the detector's settings config.c, its
 * state start.c. */
#include "gp/app.h"
#include "registry.h"

#define REGISTRY_VERSION "0.1.0"

static const gp_svc_task registry_tasks[] = {
    GP_SVC_TASK("sweep", registry_cfg, sweep_ms, registry_live_cron),
    GP_SVC_TASK("history", registry_cfg, history_ms, registry_history_trim),
    GP_SVC_TASKS_END,
};

static const gp_route *const registry_routes[] = {
    registry_admin_routes, registry_node_routes, NULL,
};

static const gp_service registry_service = {
    .name = "registry",
    .version = REGISTRY_VERSION,
    GP_SVC_CFG(registry_cfg, common, registry_cfg_opts),
    .state_size = sizeof(registry),
    .needs = GP_NEED_REDIS | GP_NEED_PG,
    .migrations = registry_migrations,
    .grants = registry_db_grants,
    .routes = registry_routes,
    .tasks = registry_tasks,
    .prepare = registry_prepare,
    .init = registry_init,
    .stop = registry_states_stop,        /* the state queue is written first */
    .free = registry_free,
};

int
main(int argc, char **argv)
{
    return gp_app_main(&registry_service, argc, argv);
}
