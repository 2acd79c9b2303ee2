/* start.c -- gridpool-metering's state on the app: its metrics and Redis
 * scripts, the outbox and the heartbeat side, built at start and freed at
 * exit (gp_app_main's hooks). */
#include "metering.h"
#include "scripts.h"

static void
add_metrics(metering *m)
{
    gp_metrics *mx = gp_app_metrics(m->app);

    m->m_beats = gp_metrics_counter(mx, "gp_metering_beats_total", NULL, "Heartbeats taken");
    m->m_stale = gp_metrics_counter(mx, "gp_metering_stale_readings_total", NULL,
                                    "Attempt readings older than one taken (ignored)");
    m->m_resets = gp_metrics_counter(mx, "gp_metering_counter_resets_total", NULL,
                                     "Attempt counters that went back (counted from zero)");
    m->m_dropped = gp_metrics_counter(mx, "gp_metering_dropped_gpu_ms_total", NULL,
                                      "GPU-ms reported but not counted (node lost since, "
                                      "control plane frozen)");
    m->m_implausible = gp_metrics_counter(mx, "gp_metering_implausible_readings_total", NULL,
                                          "Readings refused: more GPU-ms than time allows, or "
                                          "more energy than a GPU can draw");
    m->m_late = gp_metrics_counter(mx, "gp_metering_late_readings_total", NULL,
                                   "Readings of attempts already closed (ignored)");
    m->m_records = gp_metrics_counter(mx, "gp_metering_records_total", NULL,
                                      "Usage records written to the outbox");
    m->m_published = gp_metrics_counter(mx, "gp_metering_published_total", NULL,
                                        "Usage records the stream acknowledged");
    m->m_publish_errors = gp_metrics_counter(mx, "gp_metering_publish_errors_total", NULL,
                                             "Publishes that failed (sent again later)");
    m->m_review = gp_metrics_counter(mx, "gp_metering_review_total", NULL,
                                     "Records kept for review instead of published");
    m->m_closed_event = gp_metrics_counter(mx, "gp_metering_closed_total", "how=\"event\"",
                                           "Attempts closed");
    m->m_closed_silent = gp_metrics_counter(mx, "gp_metering_closed_total", "how=\"silence\"",
                                            "Attempts closed");
    m->m_checkpoints = gp_metrics_counter(mx, "gp_metering_checkpoints_total", NULL,
                                          "Checkpoints taken");
    m->m_final_waits = gp_metrics_counter(mx, "gp_metering_final_waits_total", NULL,
                                          "Final records held until the scheduler ends "
                                          "their attempt");
    m->m_facts_errors = gp_metrics_counter(mx, "gp_metering_facts_errors_total", NULL,
                                           "Records whose attempt the scheduler could not be "
                                           "asked about (published later)");
    m->m_frozen = gp_metrics_gauge(mx, "gp_metering_frozen", NULL,
                                   "1 while the control plane is frozen (nothing counted)");
    m->m_publishing = gp_metrics_gauge(mx, "gp_metering_publishing", NULL,
                                       "Records being published");
}

gp_err
metering_init(gp_app *app, const void *cfg, void *state)
{
    metering *m = state;

    m->app = app;
    m->cfg = cfg;
    add_metrics(m);
    gp_kvscript_init(&m->due, metering_due_lua);
    gp_kvscript_init(&m->tick, metering_tick_lua);
    gp_kvscript_init(&m->close, metering_close_lua);
    gp_kvscript_init(&m->ckpt, metering_ckpt_lua);
    gp_kvscript_init(&m->ack, metering_ack_lua);
    gp_kvscript_init(&m->review, metering_review_lua);
    metering_outbox_start(m);
    if (m->facts == NULL || metering_store_start(m) != GP_EOK)
        return GP_ENOMEM;
    metering_epoch_start(m);
    return metering_beat_start(m);
}

void
metering_free(void *state)
{
    metering_outbox_free(state);
    metering_store_free(state);
}
