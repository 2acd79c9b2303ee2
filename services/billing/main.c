/* main.c -- gridpool-billing: the service as gp_app_main runs it.  What it
 * does: billing.h; the domain is in post.c, sites.c and rate.c, its
 * options in config.c, its state in start.c. */
#include "gp/app.h"
#include "billing.h"

#define BILLING_VERSION "0.1.0"

static const gp_svc_task billing_tasks[] = {
    GP_SVC_TASK("book", billing_cfg, book_ms, billing_book_run),
    GP_SVC_TASKS_END,
};

static const gp_route *const billing_tables[] = {billing_routes, billing_api_routes, NULL};

static const gp_service billing_service = {
    .name = "billing",
    .version = BILLING_VERSION,
    GP_SVC_CFG(billing_cfg, common, billing_cfg_opts),
    .state_size = sizeof(billing),
    .needs = GP_NEED_PG | GP_NEED_JS,
    .migrations = billing_migrations,
    .grants = billing_db_grants,
    .streams = billing_streams,
    .routes = billing_tables,
    .tasks = billing_tasks,
    .init = billing_init,
    .start = billing_start,
    .free = billing_free,
};

int
main(int argc, char **argv)
{
    return gp_app_main(&billing_service, argc, argv);
}
