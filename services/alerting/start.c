/* start.c -- gridpool-alerting's state on the app (gp_app_main's hooks):
 * its metrics, the tasks it kicks and its follower of the site inventory
 * (the regions), built at start; the tables prepare made freed at exit. */
#include <stdlib.h>

#include "gp/log.h"
#include "alerting.h"

static void
add_metrics(alerting *a)
{
    gp_metrics *mx = gp_app_metrics(a->app);

    a->m_inputs = gp_metrics_counter(mx, "gp_alerting_inputs_total", NULL,
                                     "Fleet events evaluated against the rules");
    a->m_raised = gp_metrics_counter(mx, "gp_alerting_raised_total", NULL,
                                     "Rules found holding (an alert raised or kept)");
    a->m_cleared = gp_metrics_counter(mx, "gp_alerting_cleared_total", NULL,
                                      "Rules found not holding (an alert cleared, if any)");
    a->m_fired = gp_metrics_counter(mx, "gp_alerting_fired_total", NULL,
                                    "Alerts that went from pending to firing");
    a->m_published = gp_metrics_counter(mx, "gp_alerting_published_total", NULL,
                                        "Alert events stored in ALERTS");
    a->m_publish_errors = gp_metrics_counter(mx, "gp_alerting_publish_errors_total", NULL,
                                             "Alert events not stored (tried again)");
    a->m_db_errors = gp_metrics_counter(mx, "gp_alerting_db_errors_total", NULL,
                                        "PostgreSQL statements that failed");
    a->m_usage_records = gp_metrics_counter(mx, "gp_alerting_usage_records_total", NULL,
                                            "Usage records read for the metering gaps");
    a->m_beats = gp_metrics_counter(mx, "gp_alerting_beats_total", NULL,
                                    "Heartbeats read for the telemetry rules");
    a->m_notes = gp_metrics_counter(mx, "gp_alerting_notes_total", NULL,
                                    "Quarantines noted on a node's telemetry alerts");
    a->m_am_posts = gp_metrics_counter(mx, "gp_alerting_alertmanager_posts_total", NULL,
                                       "Posts of the alert set Alertmanager accepted");
    a->m_am_errors = gp_metrics_counter(mx, "gp_alerting_alertmanager_errors_total", NULL,
                                        "Posts to Alertmanager that failed (sent again)");
    a->m_job_events = gp_metrics_counter(mx, "gp_alerting_job_events_total", NULL,
                                         "Job events read from JOBS");
    a->m_stream_errors = gp_metrics_counter(mx, "gp_alerting_stream_list_errors_total", NULL,
                                            "Listings of the JetStream streams that failed");
}

gp_err
alerting_init(gp_app *app, const void *cfg, void *state)
{
    const alerting_cfg *c = cfg;
    alerting           *a = state;

    a->app = app;
    add_metrics(a);
    GP_INFO("rules_loaded", "rules=%u file=\"%s\"", a->rules.n,
            c->rules[0] ? c->rules : "(shipped)");
    a->eval_task = gp_app_task(app, "eval");
    a->publish_task = gp_app_task(app, "publish");
    a->am_task = gp_app_task(app, "alertmanager");
    alerting_jobs_init();
    /* from the first second whichever service started first: an alert of
     * a site the registry just created carries its region */
    return gp_inventory_new(app, &(gp_inventory_opts){.resync_ms = c->sites_ms}, &a->inv);
}

void
alerting_free(void *state)
{
    alerting *a = state;

    gp_inventory_free(a->inv);
    a->inv = NULL;
    alerting_telemetry_free(a);
}
