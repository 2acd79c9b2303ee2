/* api.c -- the operator's side (gp.admin.alert.*): the alerts now, one
 * alert with its timeline, acknowledgements, silences.  Reads and writes
 * alerting's own tables only; gpctl get alerts, describe alert, ack
 * alert, silence, get silences and expire silence use it. */
#include <ctype.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/dbrow.h"
#include "gp/id.h"
#include "gp/log.h"
#include "alerting.h"

#define LIST_DEFAULT 200

static const char alert_cols[] =
    "id, id || '.' || seq AS event_id, seq,\n"
    "  CASE WHEN state = 'resolved' THEN 'resolved' ELSE 'firing' END AS status, state,\n"
    "  alertname, severity, region, site, node, labels, summary, cause, evidence, action,\n"
    "  dispatch, alert_muted(scope, site) AS muted, affected, starts_ms, ends_ms, updated_ms,\n"
    "  coalesce(alert_silence_of(alertname, severity, region, site, node, labels), '')\n"
    "    AS silenced_by, acked_by, acked_ms, ack_comment";

static void
fail_db(gp_req *req, const char *detail)
{
    gp_req_done(req, gp_req_fail(req, GP_EUNAVAIL, "database: %s", detail));
}

/* ---- list, and one with its timeline ----------------------------------------------- */

static void
listed(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req               *req = arg;
    const msg_alert_query *q = gp_req_in(req);
    msg_alert_list       *out = gp_req_out(req);

    if (err != GP_EOK || nres < 1) {
        fail_db(req, detail);
        return;
    }
    err = gp_dbrow_named_to_array(&msg_alert_list_desc, "items", res[0], out);
    if (err == GP_EOK && q->id[0] != '\0' && out->items.n == 0)
        err = gp_req_fail(req, GP_ENOTFOUND, "no alert %s", q->id);
    else if (err == GP_EOK && nres == 2)
        err = gp_dbrow_named_to_array(&msg_alert_list_desc, "events", res[1], out);
    gp_req_done(req, err);
}

static gp_err
on_list(gp_req *req, const void *in, void *out)
{
    const msg_alert_query *q = in;
    char                   limit[16], sql[2048];
    const char            *state = msg_alert_query_state_names[q->state], *p[6];
    gp_db_tx              *tx;

    (void)out;
    if (!GP_HAS(q, MSG_ALERT_QUERY__STATE) || q->id[0] != '\0')
        state = q->id[0] != '\0' ? "all" : "active";
    snprintf(limit, sizeof(limit), "%u", q->limit ? q->limit : LIST_DEFAULT);
    p[0] = q->id;
    p[1] = q->severity;
    p[2] = q->region;
    p[3] = q->site;
    p[4] = state;
    p[5] = limit;
    snprintf(sql, sizeof(sql),
             "SELECT %s FROM alerts WHERE ($1 = '' OR id = $1) AND ($2 = '' OR severity = $2)\n"
             "  AND ($3 = '' OR region = $3) AND ($4 = '' OR site = $4)\n"
             "  AND CASE $5 WHEN 'all' THEN true WHEN 'active' THEN state <> 'resolved'\n"
             "    ELSE state = $5 END\n"
             "ORDER BY updated_ms DESC, id LIMIT $6::int", alert_cols);
    if ((tx = gp_db_tx_new(gp_app_db(gp_req_app(req)))) == NULL ||
        gp_db_tx_add(tx, sql, 6, p) != GP_EOK ||
        (q->id[0] != '\0' &&
         gp_db_tx_add(tx, "SELECT id, id || '.' || seq AS event_id, seq, status, alertname,\n"
                          "  severity, region, site, node, labels, summary, cause, evidence,\n"
                          "  action, dispatch, muted, affected, starts_ms, ends_ms, updated_ms,\n"
                          "  silenced_by\n"
                          "FROM alert_events WHERE id = $1 ORDER BY seq LIMIT 100",
                      1, p) != GP_EOK) ||
        gp_db_tx_run(tx, 0, listed, req) != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "database unavailable");
    return GP_EPENDING;
}

/* ---- ack --------------------------------------------------------------------------- */

static void
one_alert(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req *req = arg;

    if (err != GP_EOK || nres < 1) {
        fail_db(req, detail);
        return;
    }
    if (PQntuples(res[nres - 1]) != 1) {
        gp_req_done(req, gp_req_fail(req, GP_ENOTFOUND, "no such alert, or it is resolved"));
        return;
    }
    gp_req_done(req, gp_dbrow_named_to_msg(&msg_alert_desc, res[nres - 1], 0, gp_req_out(req),
                                           NULL));
}

static gp_err
on_ack(gp_req *req, const void *in, void *out)
{
    const msg_alert_ack *k = in;
    const char          *p[3] = {k->id, k->by, k->comment};
    char                 sql[1024];
    gp_db_tx            *tx;

    (void)out;
    if (k->by[0] == '\0')
        return gp_req_fail(req, GP_EINVAL, "by: who acknowledges it");
    snprintf(sql, sizeof(sql), "SELECT %s FROM alerts WHERE id = $1 AND state <> 'resolved'",
             alert_cols);
    /* one transaction: the read sees the update */
    if ((tx = gp_db_tx_new(gp_app_db(gp_req_app(req)))) == NULL ||
        gp_db_tx_add(tx, "UPDATE alerts SET acked_by = $2, acked_ms = alert_now_ms(),"
                         " ack_comment = $3 WHERE id = $1 AND state <> 'resolved'", 3, p) != GP_EOK ||
        gp_db_tx_add(tx, sql, 1, p) != GP_EOK || gp_db_tx_run(tx, 0, one_alert, req) != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "database unavailable");
    GP_INFO("alert_acked", "id=%s by=\"%s\"", k->id, k->by);
    return GP_EPENDING;
}

/* ---- silences ---------------------------------------------------------------------- */

static const char silence_cols[] =
    "id, matchers, comment, created_by, starts_ms, ends_ms,\n"
    "  CASE WHEN starts_ms > alert_now_ms() THEN 'pending'\n"
    "    WHEN ends_ms > alert_now_ms() THEN 'active' ELSE 'expired' END AS state";

/* label=value[,label=value...]: names as rule labels, values without ',' */
static bool
matchers_ok(const char *m)
{
    const char *p = m;

    if (*m == '\0')
        return false;
    while (*p) {
        const char *k = p;

        while (isalnum((unsigned char)*p) || *p == '_' || *p == '-' || *p == '.')
            p++;
        if (p == k || *p++ != '=' || *p == ',' || *p == '\0')
            return false;
        while (*p && *p != ',')
            p++;
        if (*p == ',' && *++p == '\0')
            return false;
    }
    return true;
}

static void
silence_done(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req   *req = arg;
    alerting *a = gp_req_state(req);

    if (err != GP_EOK || nres < 1) {
        fail_db(req, detail);
        return;
    }
    if (PQntuples(res[nres - 1]) != 1) {
        gp_req_done(req, gp_req_fail(req, GP_ENOTFOUND, "no such silence, or it has ended"));
        return;
    }
    gp_task_kick(a->eval_task);                /* an expired one: what it muted is told */
    gp_req_done(req, gp_dbrow_named_to_msg(&msg_silence_desc, res[nres - 1], 0,
                                           gp_req_out(req), NULL));
}

static gp_err
on_silence(gp_req *req, const void *in, void *out)
{
    const msg_silence *q = in;
    char               starts[24], ends[24], dur[24], sql[1024];
    const char        *p[6] = {q->matchers, q->comment, q->created_by, starts, ends, dur};

    (void)out;
    if (!matchers_ok(q->matchers))
        return gp_req_fail(req, GP_EINVAL, "matchers \"%s\": label=value[,label=value...]",
                           q->matchers);
    if (q->ends_ms == 0 && q->duration_ms == 0)
        return gp_req_fail(req, GP_EINVAL, "a silence ends: ends_ms or duration_ms");
    if (q->duration_ms > 90ull * 24 * 3600 * 1000)
        return gp_req_fail(req, GP_ERANGE, "duration_ms: at most 90 days");
    snprintf(starts, sizeof(starts), "%llu", (unsigned long long)q->starts_ms);
    snprintf(ends, sizeof(ends), "%llu", (unsigned long long)q->ends_ms);
    snprintf(dur, sizeof(dur), "%llu", (unsigned long long)q->duration_ms);
    snprintf(sql, sizeof(sql),
             "WITH t AS (SELECT CASE WHEN $4::bigint = 0 THEN alert_now_ms() ELSE $4::bigint END\n"
             "  AS s),\n"
             "i AS (INSERT INTO silences (id, matchers, comment, created_by, starts_ms, ends_ms)\n"
             "  SELECT left(md5(random()::text || clock_timestamp()::text), 12), $1, $2, $3, t.s,\n"
             "    CASE WHEN $5::bigint > 0 THEN $5::bigint ELSE t.s + $6::bigint END FROM t\n"
             "  RETURNING *)\n"
             "SELECT %s FROM i", silence_cols);
    if (gp_db_query(gp_app_db(gp_req_app(req)), sql, 6, p, 0, silence_done, req) != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "database unavailable");
    GP_INFO("silence_added", "matchers=\"%s\" by=\"%s\"", q->matchers, q->created_by);
    return GP_EPENDING;
}

static gp_err
on_expire(gp_req *req, const void *in, void *out)
{
    const msg_id_request *q = in;
    const char           *p[1] = {q->id};
    char                  sql[1024];

    (void)out;
    snprintf(sql, sizeof(sql),
             "WITH u AS (UPDATE silences SET ends_ms = greatest(starts_ms + 1, alert_now_ms())\n"
             "  WHERE id = $1 AND ends_ms > alert_now_ms() RETURNING *)\n"
             "SELECT %s FROM u", silence_cols);
    if (gp_db_query(gp_app_db(gp_req_app(req)), sql, 1, p, 0, silence_done, req) != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "database unavailable");
    GP_INFO("silence_expired", "id=%s", q->id);
    return GP_EPENDING;
}

static void
silences_listed(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req *req = arg;

    if (err != GP_EOK || nres < 1) {
        fail_db(req, detail);
        return;
    }
    gp_req_done(req, gp_dbrow_named_to_array(&msg_silence_list_desc, "items", res[0],
                                             gp_req_out(req)));
}

static gp_err
on_silences(gp_req *req, const void *in, void *out)
{
    char sql[1024];

    (void)in;
    (void)out;
    snprintf(sql, sizeof(sql),
             "SELECT %s FROM silences WHERE ends_ms > alert_now_ms() - 86400000\n"
             "ORDER BY starts_ms DESC, id LIMIT 500", silence_cols);
    if (gp_db_query(gp_app_db(gp_req_app(req)), sql, 0, NULL, 0, silences_listed, req) != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "database unavailable");
    return GP_EPENDING;
}

const gp_route alerting_api_routes[] = {
    {GP_OP_ADMIN_ALERT_LIST, on_list, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_ADMIN_ALERT_ACK, on_ack, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_ADMIN_ALERT_SILENCE, on_silence, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_ADMIN_ALERT_SILENCES, on_silences, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_ADMIN_ALERT_EXPIRE, on_expire, GP_R_QUEUE, 0, NULL, NULL},
    {NULL},
};
