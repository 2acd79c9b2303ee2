/* streams.c -- JetStream streams that fill up.
 *
 * Every stream gridpool declares has a byte limit (gp/streamcfg.h).  One
 * that refuses new messages when full (discard new: JOBS, ATTEMPTS, USAGE,
 * ALERTS, DLQ) stops its publishers there -- their outboxes keep what they
 * could not store, and each refusal counts in gp_bus_js_full_total on the
 * publisher's /metrics -- and one that drops its oldest (FLEET) loses
 * history.  Neither may be silent.  So every streams-ms an instance lists
 * the account's streams with their state and limits as nats-server has
 * them (gp_bus_js_streams, on the bus' worker thread) and judges each
 * one's fill (gp_stream_fill_pct: the larger share of its byte and message
 * limits) by the rules on stream.fill_pct (StreamFull: >= 90), label
 * stream=<name>.  Reading the servers' own figures catches every stream
 * and every publisher (agents publish into ATTEMPTS), which a counter in
 * each publisher could not.  An active alert whose stream is gone clears.
 * Two instances checking at once only repeat raises and clears, which are
 * idempotent. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/log.h"
#include "gp/streamcfg.h"
#include "alerting.h"
#include "diag.h"

/* The active alerts of the stream rules, for the clears of gone streams. */
static const char active_sql[] = "SELECT DISTINCT labels FROM alerts WHERE state <> 'resolved'\n"
                                 "  AND alertname = ANY(string_to_array($1, ','))";

typedef struct st_pass {
    al_pass *c;
    size_t   n;
    char (*names)[64]; /* the streams listed */
} st_pass;

/* One stream's fill against every rule on stream.fill_pct. */
static void
one(alerting *a, al_pass *c, const char *stream, unsigned pct, bool discard_old,
    const char *evidence)
{
    char    summary[256], labels[200], extra[96];
    al_diag d;
    al_vars v = {.stream = stream, .reason = evidence};

    snprintf(extra, sizeof(extra), "stream=%s", stream);
    al_diag_stream(evidence, discard_old, &d);
    v.cause = d.cause;
    for (unsigned i = 0; i < a->rules.n; i++) {
        const al_rule *r = &a->rules.rule[i];
        al_raise       x = {.rule = r,
                            .region = "_",
                            .site = "_",
                            .node = "",
                            .labels = labels,
                            .summary = summary,
                            .diag = &d};

        if (r->signal != AL_SIG_STREAM_FILL)
            continue;
        al_rule_labels(r, extra, labels, sizeof(labels));
        x.holds = al_rule_holds_num(r, (double)pct);
        al_expand(r->summary, &v, summary, sizeof(summary));
        al_pass_apply(c, &x);
    }
}

static void
limit_str(char *out, size_t n, int64_t max, const char *unit)
{
    if (max <= 0)
        snprintf(out, n, "no %s limit", unit);
    else
        snprintf(out, n, "of %lld", (long long)max);
}

static void
judge(alerting *a, al_pass *c, const gp_stream_state *s)
{
    unsigned pct = gp_stream_fill_pct(s->bytes, s->max_bytes, s->msgs, s->max_msgs);
    char     ev[320], lb[40], lm[40];

    limit_str(lb, sizeof(lb), s->max_bytes, "byte");
    limit_str(lm, sizeof(lm), s->max_msgs, "message");
    snprintf(ev, sizeof(ev),
             "%s is %u%% full: %llu bytes (%s), %llu messages (%s), %d "
             "replica(s); when full it %s",
             s->name, pct, (unsigned long long)s->bytes, lb, (unsigned long long)s->msgs, lm,
             s->replicas, s->discard_old ? "drops its oldest messages" : "refuses new messages");
    one(a, c, s->name, pct, s->discard_old, ev);
}

/* "team=platform,stream=JOBS" -> "JOBS" */
static void
stream_of(const char *labels, char *out, size_t n)
{
    const char *p = strstr(labels, "stream=");
    size_t      len;

    out[0] = '\0';
    if (p == NULL)
        return;
    p += 7;
    len = strcspn(p, ",");
    snprintf(out, n, "%.*s", (int)len, p);
}

static void
active_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    st_pass  *sp = arg;
    alerting *a = sp->c->a;

    if (err != GP_EOK || nres != 1) {
        (*a->m_db_errors)++;
        GP_WARN("stream_check_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
    } else {
        for (int i = 0; i < PQntuples(res[0]); i++) {
            char name[64];
            bool listed = false;

            stream_of(PQgetvalue(res[0], i, 0), name, sizeof(name));
            for (size_t j = 0; j < sp->n && !listed; j++)
                listed = strcmp(sp->names[j], name) == 0;
            if (name[0] != '\0' && !listed)
                one(a, sp->c, name, 0, false, "the stream is gone");
        }
    }
    al_pass_end(sp->c);
    free(sp->names);
    free(sp);
}

/* After the judging: the alerts of streams no longer listed clear. */
static void
clear_gone(al_pass *c, const gp_stream_state *s, size_t n)
{
    st_pass    *sp = calloc(1, sizeof(*sp));
    char        names[AL_RULES_MAX * 65];
    const char *q[] = {names};
    al_signal   sig = AL_SIG_STREAM_FILL;

    if (sp == NULL || (n > 0 && (sp->names = calloc(n, sizeof(*sp->names))) == NULL)) {
        free(sp);
        al_pass_end(c);
        return;
    }
    sp->c = c;
    sp->n = n;
    for (size_t i = 0; i < n; i++)
        snprintf(sp->names[i], sizeof(sp->names[i]), "%s", s[i].name);
    al_rule_names(&c->a->rules, &sig, 1, names, sizeof(names));
    if (gp_db_query(gp_app_db(c->a->app), active_sql, 1, q, 0, active_read, sp) != GP_EOK) {
        free(sp->names);
        free(sp);
        al_pass_end(c);
    }
}

static void
listed(void *arg, gp_err err, const gp_stream_state *s, size_t n)
{
    al_pass *c = arg;

    if (err != GP_EOK) {
        (*c->a->m_stream_errors)++;
        GP_WARN("stream_list_failed", "code=%s", gp_err_name(err));
        al_pass_end(c);
        return;
    }
    for (size_t i = 0; i < n; i++)
        judge(c->a, c, &s[i]);
    clear_gone(c, s, n);
}

void
alerting_streams_run(gp_app *app, void *arg)
{
    alerting *a = arg;
    al_pass  *c;

    if ((c = al_pass_start(a, &a->streams_busy)) == NULL)
        return;
    if (!gp_bus_is_connected(gp_app_bus(app)) ||
        gp_bus_js_streams(gp_app_bus(app), listed, c) != GP_EOK)
        al_pass_end(c);
}
