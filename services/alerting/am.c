/* am.c -- alerts forwarded to Prometheus Alertmanager (API v2, POST
 * /api/v2/alerts), the way Prometheus itself does it: every am-ms the
 * whole set is posted again, firing alerts with endsAt a few periods
 * ahead (Alertmanager resolves one by itself if we stop sending it: we
 * died, it should not stay firing for ever), and alerts resolved within
 * am-resolved-ms with their real endsAt, so a resolve lost in one post
 * reaches it in the next.  Alertmanager keys an alert by its labels: two
 * instances posting the same set make one alert there, not two.
 * Labels: alertname, severity, region, site, node (if any) and the rule's
 * own; the diagnosis goes in annotations.  A silenced alert is not sent
 * (Alertmanager resolves it by itself after its endsAt), nor the resolve
 * of one never told. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gp/buf.h"
#include "gp/log.h"
#include "alerting.h"

static const char am_sql[] =
    "SELECT id, alertname, severity, region, site, node, labels, summary, cause, evidence,\n"
    "  action, dispatch, state, starts_ms, ends_ms, alert_now_ms(), affected\n"
    "FROM alerts WHERE (state = 'firing'\n"
    "    AND alert_silence_of(alertname, severity, region, site, node, labels) IS NULL)\n"
    "  OR (state = 'resolved' AND told AND ends_ms > alert_now_ms() - $1::bigint)\n"
    "ORDER BY id";

static void
rfc3339(gp_buf *b, long long ms)
{
    time_t    t = (time_t)(ms / 1000);
    struct tm tm;
    char      s[32];

    gmtime_r(&t, &tm);
    strftime(s, sizeof(s), "%Y-%m-%dT%H:%M:%S", &tm);
    gp_buf_printf(b, "\"%s.%03dZ\"", s, (int)(ms % 1000));
}

static void
kv(gp_buf *b, bool *first, const char *k, const char *v)
{
    if (v == NULL || v[0] == '\0')
        return;
    gp_buf_puts(b, *first ? "" : ",");
    *first = false;
    gp_buf_json_str(b, k, strlen(k));
    gp_buf_puts(b, ":");
    gp_buf_json_str(b, v, strlen(v));
}

/* the rule's "k=v,k=v" labels */
static void
rule_labels(gp_buf *b, bool *first, const char *labels)
{
    char copy[256], *save = NULL;

    snprintf(copy, sizeof(copy), "%s", labels);
    for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(p, '=');

        if (eq != NULL) {
            *eq = '\0';
            kv(b, first, p, eq + 1);
        }
    }
}

static void
one_alert(alerting *a, gp_buf *b, const PGresult *res, int i)
{
    const char *v[17];
    bool        first = true;
    long long   now;

    for (int c = 0; c < 17; c++)
        v[c] = PQgetvalue(res, i, c);
    now = atoll(v[15]);
    gp_buf_puts(b, i ? ",{\"labels\":{" : "{\"labels\":{");
    kv(b, &first, "alertname", v[1]);
    kv(b, &first, "severity", v[2]);
    kv(b, &first, "region", v[3]);
    kv(b, &first, "site", v[4]);
    kv(b, &first, "node", v[5]);
    rule_labels(b, &first, v[6]);
    first = true;
    gp_buf_puts(b, "},\"annotations\":{");
    kv(b, &first, "summary", v[7]);
    kv(b, &first, "cause", v[8]);
    kv(b, &first, "evidence", v[9]);
    kv(b, &first, "action", v[10]);
    kv(b, &first, "dispatch", v[11]);
    if (v[16][0] != '\0')
        kv(b, &first, "affected", v[16]);
    kv(b, &first, "gridpool_id", v[0]);
    gp_buf_puts(b, "},\"startsAt\":");
    rfc3339(b, atoll(v[13]));
    gp_buf_puts(b, ",\"endsAt\":");
    rfc3339(b, strcmp(v[12], "resolved") == 0 ? atoll(v[14])
                                              : now + 4LL * (long long)a->cfg->am_ms);
    gp_buf_puts(b, ",\"generatorURL\":\"http://gridpool/alerting\"}");
}

static void
posted(void *arg, gp_err err, int status, const char *body, size_t len)
{
    alerting *a = arg;

    (void)len;
    a->am_busy = false;
    if (err != GP_EOK || status != 200) {
        (*a->m_am_errors)++;
        GP_WARN("alertmanager_post_failed", "code=%s status=%d body=\"%.200s\"", gp_err_name(err),
                status, body ? body : "");
        return;
    }
    (*a->m_am_posts)++;
}

static void
selected(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    alerting *a = arg;
    gp_buf    b;

    if (err != GP_EOK || nres != 1) {
        (*a->m_db_errors)++;
        GP_WARN("alertmanager_select_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
        a->am_busy = false;
        return;
    }
    gp_buf_init(&b, 0);
    gp_buf_puts(&b, "[");
    for (int i = 0; i < PQntuples(res[0]); i++)
        one_alert(a, &b, res[0], i);
    if (gp_buf_puts(&b, "]") != GP_EOK ||
        gp_httpc_post(gp_app_loop(a->app), &a->am_url, "/api/v2/alerts", "application/json", b.p,
                      b.n, 10000, 64 * 1024, posted, a, NULL) != GP_EOK) {
        (*a->m_am_errors)++;
        GP_WARN("alertmanager_post_failed", "code=UNAVAIL alerts=%d", PQntuples(res[0]));
        a->am_busy = false;
    }
    gp_buf_fini(&b);
}

void
alerting_am_run(gp_app *app, void *arg)
{
    alerting   *a = arg;
    char        win[24];
    const char *p[1] = {win};

    if (!a->am_on || a->am_busy)
        return;
    a->am_busy = true;
    snprintf(win, sizeof(win), "%u", a->cfg->am_resolved_ms);
    if (gp_db_query(gp_app_db(app), am_sql, 1, p, 0, selected, a) != GP_EOK)
        a->am_busy = false;
}
