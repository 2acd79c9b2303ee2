/* alerting.h -- gridpool-alerting's state, shared by its own files only.
 *
 * What it does: turns what the fleet reports (recovery's site events and
 * control-plane isolation, the registry's node states, all read from the
 * JetStream stream FLEET with durable consumers; every heartbeat's
 * telemetry; the scheduler's job events, from JOBS; every service
 * instance's word that it is there; the numbers of the usage records in
 * USAGE; how full each JetStream stream is) into one alert per real
 * problem, by the rules of rules.h, with the diagnosis of diag.h; keeps
 * every alert's state in PostgreSQL (alerts.c: pending -> firing after
 * the rule's for-duration unless a wider alert inhibits it -> resolved
 * when the condition clears); and publishes each firing and resolve once,
 * from an outbox table, on gp.alerts.<severity>.<region>.<site>.<alertname>
 * into the stream ALERTS with Nats-Msg-Id = <id>.<seq>.
 *
 * Several instances share the work: each input message goes to one of
 * them (one durable consumer); promotions and publications are row
 * updates in PostgreSQL (row locks, SKIP LOCKED claims), so no alert is
 * raised or published twice, and the stream's duplicate window drops a
 * republish after a crash between the publish and its mark. */
#ifndef ALERTING_H
#define ALERTING_H

#include <stdbool.h>
#include <stdint.h>

#include "gp/app.h"
#include "gp/httpc.h"
#include "gp/inventory.h"
#include "gp/limits.h"
#include "msg_gen.h"
#include "rules.h"

typedef struct alerting_cfg {
    gp_common_cfg common;
    char          rules[512];          /* rules file; "" = the defaults */
    bool          check_config;
    unsigned      eval_ms;
    unsigned      publish_ms;
    unsigned      claim_ms;
    unsigned      sites_ms;
    char          am_url[256];           /* Alertmanager; "" = none */
    unsigned      am_ms;
    unsigned      am_resolved_ms;
    unsigned      forget_ms;
    unsigned      jobs_ms, jobs_window_ms, jobs_min_ended;
    unsigned      presence_check_ms;
    unsigned      usage_gap_ms, usage_grace_ms;
    unsigned      streams_ms;
} alerting_cfg;

typedef struct alerting {
    gp_app             *app;
    const alerting_cfg *cfg;
    al_rules            rules;
    gp_inventory       *inv;            /* the registry's sites: their regions */
    bool                eval_busy, publish_busy;
    gp_task            *eval_task, *publish_task;
    unsigned            publishing;     /* publications out */
    uint64_t           *m_inputs, *m_raised, *m_cleared, *m_fired, *m_published;
    uint64_t           *m_publish_errors, *m_db_errors, *m_am_posts, *m_am_errors;
    gp_httpc_url        am_url;
    bool                am_on, am_busy;
    gp_task            *am_task;
    void               *tmem;           /* telemetry.c: per node, the rules that held */
    unsigned            ntmem;
    uint64_t           *m_beats, *m_notes;
    bool                jobs_busy;      /* jobs.c: a rates pass is out */
    bool                presence_busy;  /* presence.c: a check is out */
    bool                usage_busy;     /* usage.c: a check is out */
    bool                streams_busy;   /* streams.c: a check is out */
    uint64_t           *m_job_events, *m_usage_records, *m_stream_errors;
} alerting;

#define AL_NODES_CAP 65536

/* config.c: the options; check (--check-config) prints the rules in
 * force; prepare loads them, parses the Alertmanager URL and makes the
 * telemetry tables (exit 78 for a bad rule or URL). */
extern const gp_cfg_opt alerting_cfg_opts[];
int alerting_check(void *cfg, void *state);
int alerting_prepare(void *cfg, void *state);

/* start.c: gp_app_main's hooks (state: an alerting).  init starts
 * following the site inventory (gp/inventory.h). */
gp_err alerting_init(gp_app *app, const void *cfg, void *state);
void   alerting_free(void *state);

extern const gp_migration alerting_migrations[];
extern const gp_grant alerting_db_grants[];    /* dbgrants.c */
extern const gp_stream_cfg alerting_streams[];       /* inputs.c */
extern const gp_route      alerting_input_routes[];

/* alerts.c */
typedef struct al_raise {
    const al_rule *rule;
    const char    *region, *site, *node;
    const char    *labels;             /* NULL: the rule's (a tenant alert adds tenant=) */
    const char    *summary;
    const void    *diag;               /* const al_diag * */
    bool           holds;              /* false: clear */
} al_raise;
/* Raises or clears one alert; done(arg, err) when PostgreSQL has it. */
gp_err alerting_apply(alerting *a, const al_raise *x, void (*done)(void *, gp_err), void *arg);
/* One pass of a periodic check over its rows (jobs.c, presence.c,
 * usage.c): one at a time per check (*busy), over once the pass itself
 * has ended (al_pass_end, after its rows, or when its query could not
 * go) and every alert it applied has answered.  A failed apply is counted
 * by alerting_apply; the next pass repeats it. */
typedef struct al_pass {
    alerting *a;
    bool     *busy;
    unsigned  left;
} al_pass;
/* An input's row is written (err GP_EOK) or not: the message is acked,
 * or counted, logged as event and nak'ed to come again. */
void     al_input_stored(gp_req *req, gp_err err, const char *event, const char *detail);
/* NULL while the check's previous pass is out (or out of memory). */
al_pass *al_pass_start(alerting *a, bool *busy);
void     al_pass_apply(al_pass *p, const al_raise *x);
void     al_pass_end(al_pass *p);
/* Appends note to the evidence of the node's active telemetry alerts (a
 * firing one is published again with it). */
gp_err alerting_note(alerting *a, const char *site, const char *node, const char *note,
                     void (*done)(void *, gp_err), void *arg);
/* The node went silent (lost): its pending telemetry alerts are dropped. */
gp_err alerting_node_silent(alerting *a, const char *site, const char *node,
                            void (*done)(void *, gp_err), void *arg);
void   alerting_eval_run(gp_app *app, void *arg);
void   alerting_publish_run(gp_app *app, void *arg);

/* am.c: the alerts posted to Alertmanager, the whole set every am-ms */
void alerting_am_run(gp_app *app, void *arg);

/* telemetry.c: heartbeats, the telemetry rules */
extern const gp_route alerting_beat_routes[];
gp_err alerting_telemetry_init(alerting *a);
void   alerting_telemetry_free(alerting *a);
void   alerting_forget_run(gp_app *app, void *arg);

/* jobs.c: the JOBS stream (where attempts ran, how they ended) and the
 * job failure rates every jobs-ms */
extern const gp_route alerting_job_routes[];
/* inputs.c: the JOBS stream's subjects, filled once at start */
void                  alerting_jobs_init(void);
void                  alerting_jobs_run(gp_app *app, void *arg);

/* presence.c: gp.int.presence.* (every instance of every service) and the
 * check for silent ones every presence-check-ms */
extern const gp_route alerting_presence_routes[];
void                  alerting_presence_run(gp_app *app, void *arg);

/* usage.c: the USAGE stream (each site's record numbers) and the check
 * for holes every usage-gap-ms */
extern const gp_route alerting_usage_routes[];
void                  alerting_usage_run(gp_app *app, void *arg);

/* streams.c: how full each JetStream stream is, every streams-ms */
void                  alerting_streams_run(gp_app *app, void *arg);

/* api.c: gp.admin.alert.* (list, ack, silences) */
extern const gp_route alerting_api_routes[];

/* inputs.c */
const char *alerting_region(alerting *a, const char *site);  /* "_" when unknown */

#endif
