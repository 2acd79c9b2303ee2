/* main.c -- gridpool-scheduler: config table, routes, tasks, run.
 * (Skeleton: the job API, placement and dispatch are being built.) */
#include <stdlib.h>

#include "gp/app.h"

#define SCHEDULER_VERSION "0.1.0"

typedef struct scheduler_cfg {
    gp_common_cfg common;
} scheduler_cfg;

static const gp_cfg_opt scheduler_cfg_opts[] = {
    GP_CFG_TABLE(scheduler_cfg, common, gp_common_cfg_opts),
    GP_CFG_END
};

int
main(int argc, char **argv)
{
    scheduler_cfg cfg;
    gp_app       *app = NULL;
    int           code;
    gp_err        rc;

    gp_cfg_load("gridpool-scheduler", scheduler_cfg_opts, &cfg, argc, argv, NULL, &code);
    if (code != GP_CFG_CONTINUE)
        return code;
    rc = gp_app_new("scheduler", SCHEDULER_VERSION, &cfg.common, GP_NEED_REDIS | GP_NEED_PG | GP_NEED_JS,
                    NULL, &app);
    if (rc == GP_EOK)
        rc = gp_app_serve(app, NULL, NULL);
    if (rc == GP_EOK)
        rc = gp_app_run(app);
    gp_app_free(app);
    gp_lib_close();
    return rc == GP_EOK ? 0 : 1;
}
