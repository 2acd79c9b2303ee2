/* alerts.c -- an alert's life in PostgreSQL (migrate.c's functions) and
 * its publication.  apply: one raise or clear.  eval: every pending
 * alert past its for-duration and not inhibited fires (one UPDATE: row
 * locks keep two instances from firing one alert twice).  publish: the
 * outbox's rows are claimed (SKIP LOCKED, for claim-ms), published into
 * ALERTS with Nats-Msg-Id <id>.<seq>, and marked once JetStream has
 * them; a claim that lapses (an instance died mid-publish) is taken
 * again, and the stream's duplicate window drops the copy. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/buf.h"
#include "gp/dbrow.h"
#include "gp/log.h"
#include "alerting.h"
#include "diag.h"

/* ---- raise and clear ------------------------------------------------------------- */

typedef struct applied {
    alerting *a;
    void    (*done)(void *, gp_err);
    void     *arg;
    bool      holds;
    char      what[160];
} applied;

static void
apply_done(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    applied    *ap = arg;
    const char *st = err == GP_EOK && nres == 1 && PQntuples(res[0]) == 1
                         ? PQgetvalue(res[0], 0, 0) : "";

    if (err != GP_EOK) {
        (*ap->a->m_db_errors)++;
        GP_WARN("alert_apply_failed", "%s code=%s detail=\"%s\"", ap->what, gp_err_name(err),
                detail);
    } else if (strcmp(st, "none") != 0 && strcmp(st, "firing") != 0) {
        GP_INFO(ap->holds ? "alert_raised" : "alert_cleared", "%s state=%s", ap->what, st);
    } else {                           /* nothing changed: the periodic rules say it again */
        GP_DEBUG(ap->holds ? "alert_raised" : "alert_cleared", "%s state=%s", ap->what, st);
    }
    if (err == GP_EOK && ap->holds)
        (*ap->a->m_raised)++;
    else if (err == GP_EOK)
        (*ap->a->m_cleared)++;
    if (err == GP_EOK && ap->holds && strcmp(st, "pending") == 0)
        gp_task_kick(ap->a->eval_task);
    if (err == GP_EOK && strcmp(st, "resolved") == 0) {
        gp_task_kick(ap->a->publish_task);
        gp_task_kick(ap->a->am_task);
    }
    ap->done(ap->arg, err);
    free(ap);
}

static const char raise_sql[] =
    "SELECT alert_raise($1, $2, $3, $4, $5, $6, $7, $8::bigint, $9, $10, $11, $12, $13, $14)";
static const char clear_sql[] = "SELECT alert_clear($1, $2, $3, $4, $5, $6, $7, $8, $9)";

gp_err
alerting_apply(alerting *a, const al_raise *x, void (*done)(void *, gp_err), void *arg)
{
    const al_diag *d = x->diag;
    applied       *ap = calloc(1, sizeof(*ap));
    char           for_ms[16];
    const char    *p[14];
    const char    *labels = x->labels != NULL ? x->labels : x->rule->labels;
    al_scope       scope = al_signal_scope(x->rule->signal);
    gp_err         rc;

    if (ap == NULL)
        return GP_ENOMEM;
    ap->a = a;
    ap->done = done;
    ap->arg = arg;
    ap->holds = x->holds;
    snprintf(ap->what, sizeof(ap->what), "alert=%s site=%s node=%s", x->rule->name, x->site,
             x->node[0] ? x->node : "-");
    snprintf(for_ms, sizeof(for_ms), "%u", (unsigned)x->rule->for_ms);
    if (x->holds) {
        p[0] = x->rule->name;
        p[1] = msg_alert_severity_names[x->rule->severity];
        p[2] = al_scope_name(scope);
        p[3] = x->region;
        p[4] = x->site;
        p[5] = x->node;
        p[6] = labels;
        p[7] = for_ms;
        p[8] = x->summary;
        p[9] = d->cause;
        p[10] = d->evidence;
        p[11] = d->action;
        p[12] = msg_alert_dispatch_names[d->dispatch];
        p[13] = al_signal_telemetry(x->rule->signal) ? "telemetry" : "state";
        rc = gp_db_query(gp_app_db(a->app), raise_sql, 14, p, 0, apply_done, ap);
    } else {
        p[0] = x->rule->name;
        p[1] = x->site;
        p[2] = x->node;
        p[3] = labels;
        p[4] = x->summary;
        p[5] = d->cause;
        p[6] = d->evidence;
        p[7] = d->action;
        p[8] = msg_alert_dispatch_names[d->dispatch];
        rc = gp_db_query(gp_app_db(a->app), clear_sql, 9, p, 0, apply_done, ap);
    }
    if (rc != GP_EOK)
        free(ap);
    return rc;
}

void
al_input_stored(gp_req *req, gp_err err, const char *event, const char *detail)
{
    alerting *a = gp_req_state(req);

    if (err != GP_EOK) {
        (*a->m_db_errors)++;
        GP_WARN(event, "code=%s detail=\"%s\"", gp_err_name(err), detail);
    }
    gp_req_done(req, err != GP_EOK ? GP_EUNAVAIL : GP_EOK);   /* nak: delivered again */
}

/* ---- a check's pass -------------------------------------------------------------- */

static void
pass_applied(void *arg, gp_err err)
{
    al_pass *p = arg;

    (void)err;
    if (--p->left > 0)
        return;
    *p->busy = false;
    free(p);
}

al_pass *
al_pass_start(alerting *a, bool *busy)
{
    al_pass *p;

    if (*busy || (p = calloc(1, sizeof(*p))) == NULL)
        return NULL;
    p->a = a;
    p->busy = busy;
    p->left = 1;                       /* the pass's own hold */
    *busy = true;
    return p;
}

void
al_pass_apply(al_pass *p, const al_raise *x)
{
    p->left++;
    if (alerting_apply(p->a, x, pass_applied, p) != GP_EOK)
        p->left--;
}

void
al_pass_end(al_pass *p)
{
    pass_applied(p, GP_EOK);
}

/* ---- notes: a fact about a node on its telemetry alerts ------------------------- */

typedef struct noted {
    alerting *a;
    void    (*done)(void *, gp_err);
    void     *arg;
} noted;

static void
note_done(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    noted *nt = arg;

    if (err != GP_EOK) {
        (*nt->a->m_db_errors)++;
        GP_WARN("alert_note_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
    } else if (nres == 1 && PQntuples(res[0]) == 1 && atoi(PQgetvalue(res[0], 0, 0)) > 0) {
        (*nt->a->m_notes)++;
        gp_task_kick(nt->a->publish_task);
    }
    nt->done(nt->arg, err);
    free(nt);
}

/* One statement about a node; cb gets the noted and calls done. */
static gp_err
node_query(alerting *a, const char *sql, int np, const char *const *p, gp_db_cb *cb,
           void (*done)(void *, gp_err), void *arg)
{
    noted *nt = calloc(1, sizeof(*nt));
    gp_err rc;

    if (nt == NULL)
        return GP_ENOMEM;
    *nt = (noted){a, done, arg};
    rc = gp_db_query(gp_app_db(a->app), sql, np, p, 0, cb, nt);
    if (rc != GP_EOK)
        free(nt);
    return rc;
}

gp_err
alerting_note(alerting *a, const char *site, const char *node, const char *note,
              void (*done)(void *, gp_err), void *arg)
{
    const char *p[3] = {site, node, note};

    return node_query(a, "SELECT alert_note($1, $2, $3)", 3, p, note_done, done, arg);
}

/* ---- a node gone silent --------------------------------------------------------------- */

/* Its pending telemetry alerts are dropped unseen: no beat can confirm them
 * any more, and firing after their for-duration on old data they would mute
 * the NodeDown that explains the silence.  Firing ones stay (what they
 * said was true); its beats judge them again when it returns. */
static void
silent_done(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    noted *nt = arg;

    if (err != GP_EOK) {
        (*nt->a->m_db_errors)++;
        GP_WARN("alert_node_silent_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
    } else if (nres == 1 && PQntuples(res[0]) > 0) {
        GP_INFO("alerts_dropped", "node=%s pending_telemetry=%d", PQgetvalue(res[0], 0, 0),
                PQntuples(res[0]));
    }
    nt->done(nt->arg, err);
    free(nt);
}

gp_err
alerting_node_silent(alerting *a, const char *site, const char *node,
                     void (*done)(void *, gp_err), void *arg)
{
    const char *p[] = {site, node};

    return node_query(a,
                      "UPDATE alerts SET state = 'resolved', ends_ms = alert_now_ms(),\n"
                      "  updated_ms = alert_now_ms()\n"
                      "WHERE site = $1 AND node = $2 AND kind = 'telemetry' AND state = 'pending'\n"
                      "RETURNING node",
                      2, p, silent_done, done, arg);
}

/* ---- eval: pending -> firing ------------------------------------------------------- */

/* The jobs and customers concerned are taken as the alert fires: the
 * attempts that ran where it points when its condition began (by then the
 * JOBS stream has told of them, and a lost node's jobs have moved). */
static const char eval_sql[] =
    "WITH u AS (\n"
    "  UPDATE alerts x SET state = 'firing', seq = x.seq + 1, fired_ms = alert_now_ms(),\n"
    "    updated_ms = alert_now_ms(),\n"
    "    affected = alert_affected(x.scope, x.site, x.node, x.starts_ms)\n"
    "  WHERE x.state = 'pending' AND x.due_ms <= alert_now_ms()\n"
    "    AND NOT alert_inhibited(x.scope, x.site, x.node, x.kind)\n"
    "  RETURNING x.*),\n"
    "e AS (INSERT INTO alert_events (id, seq, status, alertname, severity, region, site, node,\n"
    "    labels, summary, cause, evidence, action, dispatch, muted, affected, starts_ms,\n"
    "    ends_ms, updated_ms)\n"
    "  SELECT u.id, u.seq, 'firing', u.alertname, u.severity, u.region, u.site, u.node,\n"
    "    u.labels, u.summary, u.cause, u.evidence, u.action, u.dispatch,\n"
    "    alert_muted(u.scope, u.site), u.affected, u.starts_ms, u.ends_ms, u.updated_ms FROM u\n"
    "  ON CONFLICT DO NOTHING)\n"
    "SELECT u.alertname, u.site, u.node FROM u";

static void
eval_done(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    alerting *a = arg;

    a->eval_busy = false;
    if (err != GP_EOK) {
        (*a->m_db_errors)++;
        GP_WARN("alert_eval_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
        return;
    }
    for (int i = 0; nres >= 1 && i < PQntuples(res[0]); i++) {
        (*a->m_fired)++;
        GP_INFO("alert_firing", "alert=%s site=%s node=%s", PQgetvalue(res[0], i, 0),
                PQgetvalue(res[0], i, 1), PQgetvalue(res[0], i, 2)[0] ? PQgetvalue(res[0], i, 2)
                                                                     : "-");
    }
    if (nres == 2 && PQntuples(res[1]) > 0)
        GP_INFO("alerts_unsilenced", "alerts=%d", PQntuples(res[1]));
    if (nres == 2 && (PQntuples(res[0]) > 0 || PQntuples(res[1]) > 0)) {
        gp_task_kick(a->publish_task);
        gp_task_kick(a->am_task);
    }
}

/* A firing alert whose last event was silenced, no silence matching it
 * any more: told again. */
static const char unsilence_sql[] =
    "WITH u AS (\n"
    "  UPDATE alerts x SET seq = x.seq + 1, silenced_seq = 0, updated_ms = alert_now_ms()\n"
    "  WHERE x.state = 'firing' AND x.silenced_seq > 0 AND x.silenced_seq = x.seq\n"
    "    AND alert_silence_of(x.alertname, x.severity, x.region, x.site, x.node, x.labels) IS NULL\n"
    "  RETURNING x.*)\n"
    "INSERT INTO alert_events (id, seq, status, alertname, severity, region, site, node, labels,\n"
    "  summary, cause, evidence, action, dispatch, muted, affected, starts_ms, ends_ms,\n"
    "  updated_ms)\n"
    "SELECT u.id, u.seq, 'firing', u.alertname, u.severity, u.region, u.site, u.node, u.labels,\n"
    "  u.summary, u.cause, u.evidence, u.action, u.dispatch, alert_muted(u.scope, u.site),\n"
    "  u.affected, u.starts_ms, u.ends_ms, u.updated_ms FROM u\n"
    "ON CONFLICT DO NOTHING RETURNING id";

void
alerting_eval_run(gp_app *app, void *arg)
{
    alerting *a = arg;
    gp_db_tx *tx;

    if (a->eval_busy || (tx = gp_db_tx_new(gp_app_db(app))) == NULL)
        return;
    a->eval_busy = true;
    if (gp_db_tx_add(tx, eval_sql, 0, NULL) != GP_EOK ||
        gp_db_tx_add(tx, unsilence_sql, 0, NULL) != GP_EOK ||
        gp_db_tx_run(tx, 0, eval_done, a) != GP_EOK)
        a->eval_busy = false;
}

/* ---- publish: the outbox ---------------------------------------------------------- */

/* The claim checks what the screen checked too: an event committed
 * between the two statements (another instance's eval) is left for the
 * next screen instead of being sent unscreened. */
static const char claim_sql[] =
    "UPDATE alert_events e SET claim_until = alert_now_ms() + $1::bigint\n"
    "FROM (SELECT x.id, x.seq FROM alert_events x JOIN alerts a ON a.id = x.id\n"
    "      WHERE NOT x.published AND x.claim_until < alert_now_ms()\n"
    "        AND NOT (x.status = 'firing' AND alert_silence_of(x.alertname, x.severity,\n"
    "          x.region, x.site, x.node, x.labels) IS NOT NULL)\n"
    "        AND NOT (x.status = 'resolved' AND NOT a.told AND NOT EXISTS (SELECT 1\n"
    "          FROM alert_events f WHERE f.id = x.id AND f.seq < x.seq AND NOT f.published))\n"
    "      ORDER BY x.updated_ms, x.seq LIMIT 64 FOR UPDATE OF x SKIP LOCKED) c\n"
    "WHERE e.id = c.id AND e.seq = c.seq\n"
    "RETURNING e.id, e.id || '.' || e.seq AS event_id, e.seq, e.status, e.alertname,\n"
    "  e.severity, e.region, e.site, e.node, e.labels, e.summary, e.cause, e.evidence,\n"
    "  e.action, e.dispatch, e.muted, e.affected, e.starts_ms, e.ends_ms, e.updated_ms";
static const char mark_sql[] =
    "WITH e AS (UPDATE alert_events SET published = true WHERE id = $1 AND seq = $2::int\n"
    "  RETURNING id, status)\n"
    "UPDATE alerts a SET told = true FROM e WHERE a.id = e.id AND e.status = 'firing'";

/* Before a claim: events not to send.  A firing one of a silenced alert
 * (remembered in silenced_seq, told when the silence ends); a resolve of
 * an alert never told (its firing was silenced), unless an earlier event
 * of it is still to go. */
static const char screen_sql[] =
    "WITH c AS (\n"
    "  SELECT e.id, e.seq, e.status, a.told,\n"
    "    alert_silence_of(e.alertname, e.severity, e.region, e.site, e.node, e.labels) AS sil,\n"
    "    EXISTS (SELECT 1 FROM alert_events f WHERE f.id = e.id AND f.seq < e.seq\n"
    "            AND NOT f.published) AS earlier\n"
    "  FROM alert_events e JOIN alerts a ON a.id = e.id\n"
    "  WHERE NOT e.published AND e.claim_until < alert_now_ms()\n"
    "  ORDER BY e.updated_ms, e.seq LIMIT 64 FOR UPDATE OF e SKIP LOCKED),\n"
    "m AS (UPDATE alert_events e SET published = true,\n"
    "    silenced_by = coalesce(c.sil, 'never told')\n"
    "  FROM c WHERE e.id = c.id AND e.seq = c.seq\n"
    "    AND ((c.status = 'firing' AND c.sil IS NOT NULL)\n"
    "      OR (c.status = 'resolved' AND NOT c.told AND NOT c.earlier))\n"
    "  RETURNING e.id, e.seq, e.status)\n"
    "UPDATE alerts a SET silenced_seq = m.seq FROM m WHERE a.id = m.id AND m.status = 'firing'\n"
    "  AND a.seq = m.seq";

typedef struct pubjob {
    alerting *a;
    char      id[33];
    char      seq[16];
    char      what[320];
} pubjob;

static void
marked(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    pubjob *j = arg;

    (void)res;
    (void)nres;
    if (err != GP_EOK) {            /* the claim lapses, it is published again: the stream drops it */
        (*j->a->m_db_errors)++;
        GP_WARN("alert_mark_failed", "%s code=%s detail=\"%s\"", j->what, gp_err_name(err),
                detail);
    }
    j->a->publishing--;
    free(j);
}

static void
stored(void *arg, gp_err err)
{
    pubjob     *j = arg;
    const char *p[2] = {j->id, j->seq};

    if (err != GP_EOK) {
        (*j->a->m_publish_errors)++;
        GP_WARN("alert_publish_failed", "%s code=%s", j->what, gp_err_name(err));
        j->a->publishing--;
        free(j);
        return;
    }
    (*j->a->m_published)++;
    GP_INFO("alert_published", "%s", j->what);
    if (gp_db_query(gp_app_db(j->a->app), mark_sql, 2, p, 0, marked, j) != GP_EOK)
        marked(j, GP_EUNAVAIL, NULL, 0, "not sent");
}

static void
publish_one(alerting *a, const PGresult *res, int row)
{
    msg_alert   m;
    pubjob     *j;
    gp_buf      b;
    char        subj[GP_MAX_SUBJECT];
    const char *args[4];
    gp_err      rc;

    memset(&m, 0, sizeof(m));
    if (gp_dbrow_named_to_msg(&msg_alert_desc, res, row, &m, NULL) != GP_EOK ||
        (j = calloc(1, sizeof(*j))) == NULL) {
        (*a->m_publish_errors)++;
        return;                          /* the claim lapses: tried again */
    }
    j->a = a;
    snprintf(j->id, sizeof(j->id), "%s", m.id);
    snprintf(j->seq, sizeof(j->seq), "%u", m.seq);
    snprintf(j->what, sizeof(j->what), "event=%s status=%s alert=%s site=%s node=%s", m.event_id,
             msg_alert_status_names[m.status], m.alertname, m.site, m.node[0] ? m.node : "-");
    args[0] = msg_alert_severity_names[m.severity];
    args[1] = m.region;
    args[2] = m.site;
    args[3] = m.alertname;
    gp_buf_init(&b, 0);
    rc = gp_msg_encode(&msg_alert_desc, &m, &b);
    rc = rc ? rc : gp_op_subject(GP_OP_ALERT, subj, sizeof(subj), args);
    rc = rc ? rc : gp_bus_js_pub(gp_app_bus(a->app), subj, m.event_id, b.p, b.n, stored, j);
    gp_buf_fini(&b);
    if (rc == GP_EOK) {
        a->publishing++;                 /* stored() ends it */
        return;
    }
    GP_WARN("alert_publish_failed", "%s code=%s", j->what, gp_err_name(rc));
    (*a->m_publish_errors)++;
    free(j);
}

static void
claimed(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    alerting *a = arg;

    a->publish_busy = false;
    if (err != GP_EOK) {
        (*a->m_db_errors)++;
        GP_WARN("alert_claim_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
        return;
    }
    for (int i = 0; nres == 2 && i < PQntuples(res[1]); i++)
        publish_one(a, res[1], i);
}

void
alerting_publish_run(gp_app *app, void *arg)
{
    alerting   *a = arg;
    char        claim[16];
    const char *p[1] = {claim};
    gp_db_tx   *tx;

    if (a->publish_busy || a->publishing > 0 || (tx = gp_db_tx_new(gp_app_db(app))) == NULL)
        return;
    a->publish_busy = true;
    snprintf(claim, sizeof(claim), "%u", a->cfg->claim_ms);
    if (gp_db_tx_add(tx, screen_sql, 0, NULL) != GP_EOK ||
        gp_db_tx_add(tx, claim_sql, 1, p) != GP_EOK ||
        gp_db_tx_run(tx, 0, claimed, a) != GP_EOK)
        a->publish_busy = false;
}
