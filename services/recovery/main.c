/* main.c -- gridpool-recovery: the service as gp_app_main runs it.  What it
 * does: recovery.h; the domain is in sites.c (site events, isolation),
 * replace.c (lost nodes replaced through the scheduler) and leaf.c, its
 * options in config.c, its state in start.c. */
#include "gp/app.h"
#include "recovery.h"

#define RECOVERY_VERSION "0.1.0"

/* and "leafz" when leafz-urls is set (recovery_init) */
static const gp_svc_task recovery_tasks[] = {
    GP_SVC_TASK("replace", recovery_cfg, replace_ms, recovery_replace_run),
    GP_SVC_TASKS_END,
};

static const gp_service recovery_service = {
    .name = "recovery",
    .version = RECOVERY_VERSION,
    GP_SVC_CFG(recovery_cfg, common, recovery_cfg_opts),
    .state_size = sizeof(recovery),
    .needs = GP_NEED_REDIS | GP_NEED_PG,
    .migrations = recovery_migrations,
    .grants = recovery_db_grants,
    .tasks = recovery_tasks,
    .init = recovery_init,
    .start = recovery_start,
    .stop = recovery_stop,
    .free = recovery_free,
};

int
main(int argc, char **argv)
{
    return gp_app_main(&recovery_service, argc, argv);
}
