/* main.c -- gridpool-metering: config table, routes, tasks, run.  What it
 * does: metering.h; the domain is in beat.c, close.c and outbox.c. */
#include <stdlib.h>

#include "gp/app.h"
#include "metering.h"
#include "scripts.h"

#define METERING_VERSION "0.1.0"

const gp_cfg_opt metering_cfg_opts[] = {
    GP_CFG_TABLE(metering_cfg, common, gp_common_cfg_opts),
    GP_CFG_UINT("window-ms", metering_cfg, window_ms, 60000, 1000, 3600000,
                "length of a usage record's window (records per attempt and node: one a window)"),
    GP_CFG_UINT("grace-ms", metering_cfg, grace_ms, 2000, 0, 600000,
                "a window with no later reading is closed this long after its end"),
    GP_CFG_UINT("claim-ms", metering_cfg, claim_ms, 10000, 1000, 600000,
                "a record being published is left to its publisher this long"),
    GP_CFG_UINT("silent-ms", metering_cfg, silent_ms, 30000, 1000, 3600000,
                "an attempt with no reading this long is closed at its last one once the "
                "scheduler says it ended"),
    GP_CFG_UINT("sweep-ms", metering_cfg, sweep_ms, 1000, 100, 60000,
                "how often closed windows, silent attempts and the outbox are looked at"),
    GP_CFG_UINT("publish-max", metering_cfg, publish_max, 512, 1, 100000,
                "records being published at once"),
    GP_CFG_UINT("facts-timeout-ms", metering_cfg, facts_timeout_ms, 2000, 100, 60000,
                "how long the scheduler may take to say what an attempt is"),
    GP_CFG_END
};

int
main(int argc, char **argv)
{
    metering_cfg cfg;
    metering     m = {0};
    gp_app      *app = NULL;
    gp_metrics  *mx;
    int          code;
    gp_err       rc;

    gp_cfg_load("gridpool-metering", metering_cfg_opts, &cfg, argc, argv, NULL, &code);
    if (code != GP_CFG_CONTINUE)
        return code;
    rc = gp_app_new("metering", METERING_VERSION, &cfg.common, GP_NEED_REDIS | GP_NEED_JS, NULL,
                    &app);
    if (rc == GP_EOK) {
        m.app = app;
        m.cfg = &cfg;
        mx = gp_app_metrics(app);
        m.m_beats = gp_metrics_counter(mx, "gp_metering_beats_total", NULL, "Heartbeats taken");
        m.m_stale = gp_metrics_counter(mx, "gp_metering_stale_readings_total", NULL,
                                       "Attempt readings older than one taken (ignored)");
        m.m_resets = gp_metrics_counter(mx, "gp_metering_counter_resets_total", NULL,
                                        "Attempt counters that went back (counted from zero)");
        m.m_dropped = gp_metrics_counter(mx, "gp_metering_dropped_gpu_ms_total", NULL,
                                         "GPU-ms reported but not counted (node lost since, "
                                         "control plane frozen)");
        m.m_implausible = gp_metrics_counter(mx, "gp_metering_implausible_readings_total", NULL,
                                             "Readings refused: more GPU-ms than time allows, or "
                                             "more energy than a GPU can draw");
        m.m_late = gp_metrics_counter(mx, "gp_metering_late_readings_total", NULL,
                                      "Readings of attempts already closed (ignored)");
        m.m_records = gp_metrics_counter(mx, "gp_metering_records_total", NULL,
                                         "Usage records written to the outbox");
        m.m_published = gp_metrics_counter(mx, "gp_metering_published_total", NULL,
                                           "Usage records the stream acknowledged");
        m.m_publish_errors = gp_metrics_counter(mx, "gp_metering_publish_errors_total", NULL,
                                                "Publishes that failed (sent again later)");
        m.m_review = gp_metrics_counter(mx, "gp_metering_review_total", NULL,
                                        "Records kept for review instead of published");
        m.m_closed_event = gp_metrics_counter(mx, "gp_metering_closed_total", "how=\"event\"",
                                              "Attempts closed");
        m.m_closed_silent = gp_metrics_counter(mx, "gp_metering_closed_total", "how=\"silence\"",
                                               "Attempts closed");
        m.m_checkpoints = gp_metrics_counter(mx, "gp_metering_checkpoints_total", NULL,
                                             "Checkpoints taken");
        m.m_final_waits = gp_metrics_counter(mx, "gp_metering_final_waits_total", NULL,
                                             "Final records held until the scheduler ends "
                                             "their attempt");
        m.m_facts_errors = gp_metrics_counter(mx, "gp_metering_facts_errors_total", NULL,
                                              "Records whose attempt the scheduler could not be "
                                              "asked about (published later)");
        m.m_frozen = gp_metrics_gauge(mx, "gp_metering_frozen", NULL,
                                      "1 while the control plane is frozen (nothing counted)");
        m.m_publishing = gp_metrics_gauge(mx, "gp_metering_publishing", NULL,
                                          "Records being published");
        gp_kvscript_init(&m.due, metering_due_lua);
        gp_kvscript_init(&m.tick, metering_tick_lua);
        gp_kvscript_init(&m.close, metering_close_lua);
        gp_kvscript_init(&m.ckpt, metering_ckpt_lua);
        gp_kvscript_init(&m.ack, metering_ack_lua);
        gp_kvscript_init(&m.review, metering_review_lua);
        metering_outbox_start(&m);
        if (m.facts == NULL)
            rc = GP_ENOMEM;
    }
    if (rc == GP_EOK)
        rc = metering_beat_start(&m);
    if (rc == GP_EOK &&
        (gp_app_every(app, "sweep", cfg.sweep_ms / 1000.0, metering_sweep_run, &m) == NULL ||
         gp_app_every(app, "outbox", cfg.sweep_ms / 1000.0, metering_outbox_run, &m) == NULL))
        rc = GP_ENOMEM;
    if (rc == GP_EOK)
        rc = gp_app_streams(app, metering_streams);
    if (rc == GP_EOK)
        rc = gp_app_serve(app, &m, metering_beat_routes, metering_attempt_routes, NULL);
    if (rc == GP_EOK)
        rc = gp_app_run(app);
    gp_app_free(app);
    metering_outbox_free(&m);
    gp_lib_close();
    return rc == GP_EOK ? 0 : 1;
}
