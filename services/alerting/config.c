/* config.c -- gridpool-alerting's options (the table gp_app_main loads)
 * and what they give before anything starts: the rules in force (checked,
 * and printed by --check-config), the Alertmanager URL, the tables sized
 * by the service's caps. */
#include <stdio.h>
#include <stdlib.h>

#include "alerting.h"

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
                "how often the site inventory (each site's region) is reloaded in full; "
                "its changes arrive as events"),
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
    GP_CFG_UINT("streams-ms", alerting_cfg, streams_ms, 30000, 100, 3600000,
                "how often every JetStream stream's fill (of its byte and message limits) is "
                "judged by the rules on stream.fill_pct"),
    GP_CFG_END
};

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

int
alerting_check(void *cfg, void *state)
{
    return load_rules(state, cfg, true);
}

int
alerting_prepare(void *cfg, void *state)
{
    const alerting_cfg *c = cfg;
    alerting           *a = state;
    char                err[256];
    int                 code;

    if ((code = load_rules(a, c, false)) != 0)
        return code;
    a->cfg = c;
    if (c->am_url[0] != '\0') {
        if (gp_httpc_url_parse(c->am_url, &a->am_url, err, sizeof(err)) != GP_EOK) {
            fprintf(stderr, "gridpool-alerting: alertmanager-url: %s\n", err);
            return 78;
        }
        a->am_on = true;
    }
    if (alerting_telemetry_init(a) != GP_EOK)
        return 1;
    return GP_CFG_CONTINUE;
}
