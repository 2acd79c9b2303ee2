/* main.c -- gridpool-alerting: the service as gp_app_main runs it.  What it
 * does: alerting.h; the rules are rules.c, the diagnosis diag.c, the
 * alerts' life alerts.c, what comes in inputs.c, its options and rules
 * config.c, its state start.c. */
#include "gp/app.h"
#include "alerting.h"

#define ALERTING_VERSION "0.1.0"

static const gp_svc_task alerting_tasks[] = {
    GP_SVC_TASK("eval", alerting_cfg, eval_ms, alerting_eval_run),
    GP_SVC_TASK("publish", alerting_cfg, publish_ms, alerting_publish_run),
    GP_SVC_TASK("alertmanager", alerting_cfg, am_ms, alerting_am_run),
    GP_SVC_TASK("forget", alerting_cfg, forget_ms, alerting_forget_run),
    GP_SVC_TASK("jobs", alerting_cfg, jobs_ms, alerting_jobs_run),
    GP_SVC_TASK("presence_check", alerting_cfg, presence_check_ms, alerting_presence_run),
    GP_SVC_TASK("usage_gaps", alerting_cfg, usage_gap_ms, alerting_usage_run),
    GP_SVC_TASK("streams", alerting_cfg, streams_ms, alerting_streams_run),
    GP_SVC_TASKS_END,
};

static const gp_route *const alerting_routes[] = {
    alerting_input_routes, alerting_beat_routes, alerting_job_routes,
    alerting_presence_routes, alerting_usage_routes, alerting_api_routes, NULL,
};

static const gp_service alerting_service = {
    .name = "alerting",
    .version = ALERTING_VERSION,
    GP_SVC_CFG(alerting_cfg, common, alerting_cfg_opts),
    .state_size = sizeof(alerting),
    .needs = GP_NEED_PG | GP_NEED_JS,
    .migrations = alerting_migrations,
    .grants = alerting_db_grants,
    .streams = alerting_streams,
    .routes = alerting_routes,
    .tasks = alerting_tasks,
    .check = alerting_check,
    .prepare = alerting_prepare,
    .init = alerting_init,
    .free = alerting_free,
};

int
main(int argc, char **argv)
{
    return gp_app_main(&alerting_service, argc, argv);
}
