/* main.c -- gridpool-alerting: config table, rules, tasks, routes, run.
 * What it does: alerting.h; the rules are rules.c, the diagnosis diag.c,
 * the alerts' life alerts.c, what comes in inputs.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/app.h"
#include "gp/log.h"
#include "alerting.h"

#define ALERTING_VERSION "0.1.0"

const gp_cfg_opt alerting_cfg_opts[] = {
    GP_CFG_TABLE(alerting_cfg, common, gp_common_cfg_opts),
    GP_CFG_STR("rules", alerting_cfg, rules, "",
               "the rules file (name signal op values for severity labels \"summary\" a "
               "line); empty: the rules shipped (--check-config prints the rules in force)"),
    GP_CFG_UINT("eval-ms", alerting_cfg, eval_ms, 1000, 50, 60000,
                "how often pending alerts past their for-duration are fired"),
    GP_CFG_UINT("publish-ms", alerting_cfg, publish_ms, 500, 50, 60000,
                "how often the outbox of alert events is published"),
    GP_CFG_UINT("claim-ms", alerting_cfg, claim_ms, 10000, 1000, 600000,
                "how long an instance holds the events it publishes before another may"),
    GP_CFG_UINT("sites-ms", alerting_cfg, sites_ms, 60000, 1000, 3600000,
                "how often the site inventory (each site's region) is reloaded"),
    GP_CFG_STR("alertmanager-url", alerting_cfg, am_url, "",
               "Prometheus Alertmanager (http://host:9093): firing and recently resolved "
               "alerts are posted to its /api/v2/alerts; empty: none"),
    GP_CFG_UINT("alertmanager-ms", alerting_cfg, am_ms, 15000, 200, 600000,
                "how often the alerts are posted again (firing ones expire there after 4 "
                "periods without a post)"),
    GP_CFG_UINT("alertmanager-resolved-ms", alerting_cfg, am_resolved_ms, 900000, 1000,
                86400000, "how long a resolve is posted again"),
    GP_CFG_UINT("forget-ms", alerting_cfg, forget_ms, 60000, 1000, 3600000,
                "how often an instance forgets which telemetry rules held per node and tells "
                "PostgreSQL again (a node's beats go to any instance)"),
    GP_CFG_UINT("jobs-ms", alerting_cfg, jobs_ms, 10000, 500, 600000,
                "how often the job failure rates per node, site and tenant are evaluated"),
    GP_CFG_UINT("jobs-window-ms", alerting_cfg, jobs_window_ms, 900000, 10000, 86400000,
                "the window of a job failure rate: the attempts that ended in it"),
    GP_CFG_UINT("jobs-min-ended", alerting_cfg, jobs_min_ended, 4, 1, 1000000,
                "a failure rate is judged only over at least this many ended attempts"),
    GP_CFG_UINT("presence-check-ms", alerting_cfg, presence_check_ms, 2000, 100, 600000,
                "how often service instances silent for 3 of their intervals + 2 s are looked for"),
    GP_CFG_UINT("usage-gap-ms", alerting_cfg, usage_gap_ms, 10000, 100, 600000,
                "how often sites are checked for usage records missing from the USAGE stream"),
    GP_CFG_UINT("usage-grace-ms", alerting_cfg, usage_grace_ms, 600000, 0, 86400000,
                "a usage record may come this late (out of order) before it counts as missing"),
    GP_CFG_END
};

static char        fleet_site[GP_MAX_SUBJECT] = GP_PAT_RECOVERY_SITE;
static char        fleet_iso[GP_MAX_SUBJECT] = GP_PAT_RECOVERY_ISOLATION;
static char        fleet_node[GP_MAX_SUBJECT] = GP_PAT_NODE_STATE;
static const char *fleet_subjects[] = {fleet_site, fleet_iso, fleet_node, NULL};
static char        usage_subject[GP_MAX_SUBJECT] = GP_PAT_USAGE_RECORD;
static const char *usage_subjects[] = {usage_subject, NULL};
static char        alerts_subject[GP_MAX_SUBJECT] = GP_PAT_ALERT;
static const char *alerts_subjects[] = {alerts_subject, NULL};

/* FLEET: a week of what the fleet reported (inputs.c reads it); ALERTS:
 * a month of alert events, a republish within 10 minutes (a claim that
 * lapsed mid-publish) stored once. */
const gp_stream_cfg alerting_streams[] = {
    {.name = "FLEET", .subjects = (const char **)fleet_subjects, .max_age_s = 7 * 24 * 3600,
     .duplicate_window_s = 120, .memory = false},
    {.name = "ALERTS", .subjects = (const char **)alerts_subjects, .max_age_s = 30 * 24 * 3600,
     .duplicate_window_s = 600, .memory = false},
    /* the scheduler's (its sched_streams entry, the same) */
    {.name = "JOBS", .subjects = (const char **)alerting_jobs_subjects,
     .max_age_s = 7 * 24 * 3600, .duplicate_window_s = 120, .memory = false},
    /* metering's (its metering_streams entry, the same) */
    {.name = "USAGE", .subjects = (const char **)usage_subjects, .max_age_s = 30 * 24 * 3600,
     .duplicate_window_s = 600, .memory = false},
    {.name = NULL},
};

/* --check-config (bare or =true): gp_cfg_load printed the settings and
 * said exit 0; the rules are printed and checked here. */
static bool
check_config(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--check-config") == 0 ||
            strncmp(argv[i], "--check-config=", 15) == 0)
            return true;
    return false;
}

/* The rules in force, checked; --check-config prints them too. */
static int
load_rules(alerting *a, const alerting_cfg *cfg, bool print)
{
    char err[256];

    if (al_rules_load(cfg->rules, &a->rules, err, sizeof(err)) != GP_EOK) {
        fprintf(stderr, "gridpool-alerting: rules %s: %s\n",
                cfg->rules[0] ? cfg->rules : "(shipped)", err);
        return 78;                                /* EX_CONFIG */
    }
    if (print) {
        printf("# rules: %s\n", cfg->rules[0] ? cfg->rules : "(shipped)");
        al_rules_print(&a->rules, stdout);
    }
    return 0;
}

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
}

int
main(int argc, char **argv)
{
    alerting_cfg cfg;
    alerting     a = {0};
    gp_app      *app = NULL;
    int          code;
    gp_err       rc;

    gp_cfg_load("gridpool-alerting", alerting_cfg_opts, &cfg, argc, argv, NULL, &code);
    if (code == 0 && check_config(argc, argv))
        return load_rules(&a, &cfg, true);
    if (code != GP_CFG_CONTINUE)
        return code;
    if ((code = load_rules(&a, &cfg, false)) != 0)
        return code;
    a.cfg = &cfg;
    if (cfg.am_url[0] != '\0') {
        char err[256];

        if (gp_httpc_url_parse(cfg.am_url, &a.am_url, err, sizeof(err)) != GP_EOK) {
            fprintf(stderr, "gridpool-alerting: alertmanager-url: %s\n", err);
            return 78;
        }
        a.am_on = true;
    }
    if ((a.sites = calloc(AL_SITES_CAP, sizeof(*a.sites))) == NULL ||
        alerting_telemetry_init(&a) != GP_EOK)
        return 1;
    rc = gp_app_new("alerting", ALERTING_VERSION, &cfg.common, GP_NEED_PG | GP_NEED_JS,
                    alerting_migrations, &app);
    if (rc == GP_EOK) {
        a.app = app;
        add_metrics(&a);
        GP_INFO("rules_loaded", "rules=%u file=\"%s\"", a.rules.n,
                cfg.rules[0] ? cfg.rules : "(shipped)");
        a.eval_task = gp_app_every(app, "eval", cfg.eval_ms / 1000.0, alerting_eval_run, &a);
        a.publish_task = gp_app_every(app, "publish", cfg.publish_ms / 1000.0,
                                      alerting_publish_run, &a);
        a.am_task = gp_app_every(app, "alertmanager", cfg.am_ms / 1000.0, alerting_am_run, &a);
        if (a.eval_task == NULL || a.publish_task == NULL || a.am_task == NULL ||
            gp_app_every(app, "sites", cfg.sites_ms / 1000.0, alerting_sites_run, &a) == NULL ||
            gp_app_every(app, "forget", cfg.forget_ms / 1000.0, alerting_forget_run, &a) == NULL ||
            gp_app_every(app, "jobs", cfg.jobs_ms / 1000.0, alerting_jobs_run, &a) == NULL ||
            gp_app_every(app, "presence_check", cfg.presence_check_ms / 1000.0,
                         alerting_presence_run, &a) == NULL ||
            gp_app_every(app, "usage_gaps", cfg.usage_gap_ms / 1000.0, alerting_usage_run,
                         &a) == NULL)
            rc = GP_ENOMEM;
    }
    alerting_jobs_init();
    if (rc == GP_EOK)
        rc = gp_app_streams(app, alerting_streams);
    if (rc == GP_EOK) {
        alerting_sites_run(app, &a);
        rc = gp_app_serve(app, &a, alerting_input_routes, alerting_beat_routes,
                          alerting_job_routes, alerting_presence_routes, alerting_usage_routes,
                          alerting_api_routes, NULL);
    }
    if (rc == GP_EOK)
        rc = gp_app_run(app);
    gp_app_free(app);
    free(a.sites);
    alerting_telemetry_free(&a);
    gp_lib_close();
    return rc == GP_EOK ? 0 : 1;
}
