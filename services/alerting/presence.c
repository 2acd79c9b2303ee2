/* presence.c -- silent service instances.
 *
 * Every instance of every service says it is there every presence-ms
 * (the chassis: gp.int.presence.<service>, ServicePresence), and says
 * "stopping" once on a clean shutdown.  One alerting instance takes each
 * word (queue group) into alert_presence, on the database's clock.  Every
 * presence-check-ms any instance looks for the ones silent for 3 of their
 * intervals + 2 s that never said they were stopping: each raises
 * ServiceInstanceSilent (labels service= and instance=), unless another
 * instance of the same service started after it went silent and speaks
 * now -- its replacement (a restart policy, a new pod): then its alert, if
 * any, resolves ("replaced by ...") and its row is forgotten.  An alert
 * whose instance speaks again, or said it was stopping, resolves.  Rows of
 * instances that stopped cleanly an hour ago are deleted. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/log.h"
#include "alerting.h"
#include "diag.h"

static const char said_sql[] =
    "INSERT INTO alert_presence AS p (service, instance, version, last_ms, interval_ms,\n"
    "  started_ms, stopping)\n"
    "VALUES ($1, $2, $3, alert_now_ms(), $4::bigint, alert_now_ms() - $5::bigint, $6)\n"
    "ON CONFLICT (service, instance) DO UPDATE SET version = EXCLUDED.version,\n"
    "  last_ms = EXCLUDED.last_ms, interval_ms = EXCLUDED.interval_ms,\n"
    "  stopping = EXCLUDED.stopping";

static void
said(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req   *req = arg;
    alerting *a = gp_req_state(req);

    (void)res, (void)nres;
    if (err != GP_EOK) {
        (*a->m_db_errors)++;
        GP_WARN("presence_write_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
    }
    gp_req_done(req, GP_EOK);              /* the next word tells it again */
}

static gp_err
on_presence(gp_req *req, const void *in, void *out)
{
    alerting                   *a = gp_req_state(req);
    const msg_service_presence *m = in;
    char                        iv[16], up[24];
    const char                 *p[] = {m->service, m->instance, m->version, iv, up,
                                       m->state == MSG_SERVICE_PRESENCE_STATE_STOPPING ? "true"
                                                                                      : "false"};

    (void)out;
    if (m->service[0] == '\0' || m->instance[0] == '\0' || m->interval_ms == 0)
        return gp_req_fail(req, GP_EINVAL, "service, instance and interval_ms are required");
    snprintf(iv, sizeof(iv), "%u", m->interval_ms);
    snprintf(up, sizeof(up), "%llu", (unsigned long long)m->uptime_ms);
    if (gp_db_query(gp_app_db(a->app), said_sql, 6, p, 0, said, req) != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "database unavailable");
    return GP_EPENDING;
}

/* ---- the check ------------------------------------------------------------------- */

#define SILENT "NOT p.stopping AND p.last_ms < alert_now_ms() - 3 * p.interval_ms - 2000"

/* the silent ones, each with its replacement if any, and how long silent */
static const char silent_sql[] =
    "SELECT p.service, p.instance, p.version, (alert_now_ms() - p.last_ms) / 1000,\n"
    "  p.interval_ms, coalesce((SELECT r.instance FROM alert_presence r\n"
    "    WHERE r.service = p.service AND r.instance <> p.instance AND NOT r.stopping\n"
    "      AND r.started_ms > p.last_ms\n"
    "      AND r.last_ms >= alert_now_ms() - 3 * r.interval_ms - 2000\n"
    "    ORDER BY r.started_ms LIMIT 1), '')\n"
    "FROM alert_presence p WHERE " SILENT " ORDER BY 1, 2 LIMIT 256";
/* active alerts of the rule(s) whose instance is not silent (any more) */
static const char back_sql[] =
    "SELECT a.labels, coalesce(p.stopping, true) FROM alerts a\n"
    "LEFT JOIN alert_presence p\n"
    "  ON position('service=' || p.service || ',instance=' || p.instance IN a.labels) > 0\n"
    "WHERE a.state <> 'resolved' AND a.alertname = ANY(string_to_array($1, ','))\n"
    "  AND (p.service IS NULL OR NOT (" SILENT "))";
static const char forget_sql[] =
    "DELETE FROM alert_presence p WHERE (p.stopping AND p.last_ms < alert_now_ms() - 3600000)\n"
    "  OR (" SILENT " AND EXISTS (SELECT 1 FROM alert_presence r\n"
    "    WHERE r.service = p.service AND r.instance <> p.instance AND NOT r.stopping\n"
    "      AND r.started_ms > p.last_ms\n"
    "      AND r.last_ms >= alert_now_ms() - 3 * r.interval_ms - 2000))";

static void
one(alerting *a, al_pass *c, const char *service, const char *instance, bool silent,
    const char *evidence)
{
    char    summary[256], labels[200], extra[160];
    al_diag d;
    al_vars v = {.service = service, .instance = instance, .reason = evidence};

    snprintf(extra, sizeof(extra), "service=%s,instance=%s", service, instance);
    al_diag_service(evidence, &d);
    v.cause = d.cause;
    for (unsigned i = 0; i < a->rules.n; i++) {
        const al_rule *r = &a->rules.rule[i];
        al_raise       x = {.rule = r, .region = "_", .site = "_", .node = "",
                            .labels = labels, .summary = summary, .diag = &d};

        if (r->signal != AL_SIG_SERVICE)
            continue;
        al_rule_labels(r, extra, labels, sizeof(labels));
        x.holds = al_rule_holds(r, silent ? "silent" : "up");
        al_expand(r->summary, &v, summary, sizeof(summary));
        al_pass_apply(c, &x);
    }
}

/* "...service=x,instance=y" -> x and y */
static void
split_labels(const char *labels, char *service, char *instance, size_t n)
{
    const char *s = strstr(labels, "service="), *i = strstr(labels, ",instance=");

    service[0] = instance[0] = '\0';
    if (s == NULL || i == NULL || i < s)
        return;
    snprintf(service, n, "%.*s", (int)(i - s - 8), s + 8);
    snprintf(instance, n, "%s", i + 10);
}

static void
checked(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    al_pass *c = arg;

    if (err != GP_EOK || nres != 3) {
        (*c->a->m_db_errors)++;
        GP_WARN("presence_check_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
    } else {
        for (int i = 0; i < PQntuples(res[0]); i++) {
            const char *heir = PQgetvalue(res[0], i, 5);
            char        ev[256];

            if (heir[0] != '\0')
                snprintf(ev, sizeof(ev), "silent for %s s, replaced by instance %s",
                         PQgetvalue(res[0], i, 3), heir);
            else
                snprintf(ev, sizeof(ev), "no word for %s s (it speaks every %s ms; it never "
                         "said it was stopping); version %s", PQgetvalue(res[0], i, 3),
                         PQgetvalue(res[0], i, 4), PQgetvalue(res[0], i, 2));
            one(c->a, c, PQgetvalue(res[0], i, 0), PQgetvalue(res[0], i, 1), heir[0] == '\0', ev);
        }
        for (int i = 0; i < PQntuples(res[1]); i++) {
            char svc[64], inst[64];

            split_labels(PQgetvalue(res[1], i, 0), svc, inst, sizeof(svc));
            if (svc[0] != '\0')
                one(c->a, c, svc, inst, false,
                    PQgetvalue(res[1], i, 1)[0] == 't' ? "it stopped cleanly" : "it speaks again");
        }
    }
    al_pass_end(c);
}

void
alerting_presence_run(gp_app *app, void *arg)
{
    alerting   *a = arg;
    al_pass    *c;
    char        names[AL_RULES_MAX * 65];
    const char *q[] = {names};
    gp_db_tx   *tx;
    al_signal   sig = AL_SIG_SERVICE;

    if ((c = al_pass_start(a, &a->presence_busy)) == NULL)
        return;
    al_rule_names(&a->rules, &sig, 1, names, sizeof(names));
    /* the replaced ones are read before they are forgotten, in one snapshot */
    tx = gp_db_tx_new(gp_app_db(app));
    gp_db_tx_add(tx, silent_sql, 0, NULL);
    gp_db_tx_add(tx, back_sql, 1, q);
    gp_db_tx_add(tx, forget_sql, 0, NULL);
    if (gp_db_tx_run(tx, 0, checked, c) != GP_EOK)
        al_pass_end(c);
}

const gp_route alerting_presence_routes[] = {
    {GP_OP_PRESENCE, on_presence, GP_R_QUEUE, 5000, NULL, NULL},
    {NULL},
};
