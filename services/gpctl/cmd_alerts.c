/* cmd_alerts.c -- gpctl get alerts, describe alert, ack alert, silence,
 * get silences, expire silence: alerting's operator API
 * (gp.admin.alert.*). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/duration.h"
#include "gp/limits.h"
#include "gpctl.h"

/* --flag value / --flag=value pairs into vals (names[i] <-> vals[i]);
 * positional words into pos (at most npos). */
static int
flags(const char *verb, int argc, char **argv, const char *const *names, const char **vals,
      const char **pos, int npos)
{
    int np = 0;

    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        char        flag[32];
        int         k = -1;

        if (a[0] != '-') {
            if (np == npos)
                return usage_error(verb, "unexpected argument \"%s\"", a);
            pos[np++] = a;
            continue;
        }
        snprintf(flag, sizeof(flag), "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
        for (int n = 0; names[n]; n++)
            if (strcmp(flag, names[n]) == 0)
                k = n;
        if (k < 0)
            return usage_error(verb, "unknown flag %s", flag);
        vals[k] = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (vals[k] == NULL)
            return usage_error(verb, "%s needs a value", flag);
    }
    return GPCTL_OK;
}

static void
copy(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", src ? src : "");
}

/* ---- get alerts, describe alert ------------------------------------------------------ */

static const char *const alert_heads[] = {"ID", "STATE", "SEVERITY", "ALERT", "REGION", "SITE",
                                          "NODE", "SINCE", "DISPATCH", "SILENCED", "ACKED",
                                          "SUMMARY", NULL};

int
cmd_get_alerts(gpctl *c, int argc, char **argv)
{
    static const char *const names[] = {"--severity", "--region", "--site", "--state", NULL};
    const char      *v[4] = {NULL};
    msg_alert_query  q = {0};
    msg_alert_list   l = {0};
    table            t;
    int              rc = flags("get", argc, argv, names, v, NULL, 0);

    if (rc != GPCTL_OK)
        return rc;
    copy(q.severity, sizeof(q.severity), v[0]);
    copy(q.region, sizeof(q.region), v[1]);
    copy(q.site, sizeof(q.site), v[2]);
    if (v[3] != NULL) {
        char err[128];

        if (gp_msg_set_text(&msg_alert_query_desc, &q, "state", v[3], err, sizeof(err)) != GP_EOK)
            return usage_error("get", "--state: active, pending, firing, resolved or all");
    }
    q.limit = 500;
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    rc = ctl_call(c, GP_SUBJ_ADMIN_ALERT_LIST, &msg_alert_query_desc, &q, &msg_alert_list_desc,
                  &l);
    if (rc == GPCTL_OK && c->out == OUT_JSON) {
        rc = ctl_print_json(&msg_alert_list_desc, &l);
    } else if (rc == GPCTL_OK) {
        table_init(&t, alert_heads);
        for (uint32_t i = 0; i < l.items.n; i++) {
            const msg_alert *a = (const msg_alert *)l.items.v + i;
            char             since[32];

            fmt_iso8601(since, sizeof(since), a->starts_ms);
            const char *cells[] = {a->id, msg_alert_state_names[a->state],
                                   msg_alert_severity_names[a->severity], a->alertname,
                                   a->region, a->site, a->node[0] ? a->node : "-", since,
                                   msg_alert_dispatch_names[a->dispatch],
                                   a->silenced_by[0] ? a->silenced_by : "-",
                                   a->acked_by[0] ? a->acked_by : "-", a->summary};
            table_add(&t, cells);
        }
        if (t.nrows == 0)
            fprintf(stderr, "No alerts found.\n");
        else
            table_print(&t, stdout, 0);
        table_free(&t);
    }
    gp_msg_clear(&msg_alert_list_desc, &l);
    return rc;
}

int
cmd_describe_alert(gpctl *c, int argc, char **argv)
{
    msg_alert_query q = {0};
    msg_alert_list  l = {0};
    int             rc;

    if (argc != 1)
        return usage_error("describe", "expected: describe alert ID");
    copy(q.id, sizeof(q.id), argv[0]);
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    rc = ctl_call(c, GP_SUBJ_ADMIN_ALERT_LIST, &msg_alert_query_desc, &q, &msg_alert_list_desc,
                  &l);
    if (rc == GPCTL_OK && c->out == OUT_JSON) {
        rc = ctl_print_json(&msg_alert_list_desc, &l);
    } else if (rc == GPCTL_OK && l.items.n == 1) {
        const msg_alert *a = l.items.v;
        char             since[32], ended[32], acked[32];

        fmt_iso8601(since, sizeof(since), a->starts_ms);
        fmt_iso8601(ended, sizeof(ended), a->ends_ms);
        fmt_iso8601(acked, sizeof(acked), a->acked_ms);
        printf("Alert:      %s (%s)\nState:      %s\nSeverity:   %s\nLabels:     region=%s "
               "site=%s%s%s%s%s\nSummary:    %s\nCause:      %s\nEvidence:   %s\nAction:     %s\n"
               "Dispatch:   %s\nSince:      %s\n",
               a->alertname, a->id, msg_alert_state_names[a->state],
               msg_alert_severity_names[a->severity], a->region, a->site,
               a->node[0] ? " node=" : "", a->node, a->labels[0] ? " " : "", a->labels,
               a->summary, a->cause, a->evidence, a->action,
               msg_alert_dispatch_names[a->dispatch], since);
        if (a->affected[0])
            printf("Affected:   %s\n", a->affected);
        if (a->ends_ms)
            printf("Ended:      %s\n", ended);
        if (a->muted)
            printf("Muting:     %u alert(s) it explains\n", a->muted);
        if (a->silenced_by[0])
            printf("Silenced:   by silence %s\n", a->silenced_by);
        if (a->acked_by[0])
            printf("Acked:      by %s at %s: %s\n", a->acked_by, acked, a->ack_comment);
        printf("Timeline:\n");
        for (uint32_t i = 0; i < l.events.n; i++) {
            const msg_alert *e = (const msg_alert *)l.events.v + i;
            char             at[32];

            fmt_iso8601(at, sizeof(at), e->updated_ms);
            printf("  %s  %-8s seq %-3u %s", at, msg_alert_status_names[e->status], e->seq,
                   e->summary);
            if (e->silenced_by[0])
                printf("  (not sent: %s)", e->silenced_by);
            printf("\n");
        }
    }
    gp_msg_clear(&msg_alert_list_desc, &l);
    return rc;
}

/* ---- ack --------------------------------------------------------------------------- */

int
cmd_ack(gpctl *c, int argc, char **argv)
{
    static const char *const names[] = {"--by", "--comment", NULL};
    const char   *v[2] = {NULL}, *pos[2] = {NULL};
    msg_alert_ack k = {0};
    msg_alert     a = {0};
    int           rc = flags("ack", argc, argv, names, v, pos, 2);

    if (rc != GPCTL_OK)
        return rc;
    if (pos[0] == NULL || strcmp(pos[0], "alert") != 0 || pos[1] == NULL || v[0] == NULL)
        return usage_error("ack", "expected: ack alert ID --by NAME [--comment TEXT]");
    copy(k.id, sizeof(k.id), pos[1]);
    copy(k.by, sizeof(k.by), v[0]);
    copy(k.comment, sizeof(k.comment), v[1]);
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    rc = ctl_call(c, GP_SUBJ_ADMIN_ALERT_ACK, &msg_alert_ack_desc, &k, &msg_alert_desc, &a);
    if (rc == GPCTL_OK && c->out == OUT_JSON)
        rc = ctl_print_json(&msg_alert_desc, &a);
    else if (rc == GPCTL_OK)
        printf("alert %s (%s) acknowledged by %s\n", a.id, a.alertname, a.acked_by);
    gp_msg_clear(&msg_alert_desc, &a);
    return rc;
}

/* ---- silences ---------------------------------------------------------------------- */

/* "90s", "30m", "2h", "1d" (gp/duration.h, days allowed, a year at most);
 * 0: not a duration, or none (a silence of nothing is refused too). */
static uint64_t
silence_for_ms(const char *s)
{
    uint64_t ms = 0;

    if (gp_duration_parse(s, strlen(s), GP_DUR_DAYS, 366ull * 86400000, &ms) != GP_EOK)
        return 0;
    return ms;
}

static void
silence_line(const msg_silence *s)
{
    char from[32], until[32];

    fmt_iso8601(from, sizeof(from), s->starts_ms);
    fmt_iso8601(until, sizeof(until), s->ends_ms);
    printf("%-12s %-8s %s .. %s  %s  by %s: %s\n", s->id, msg_silence_state_names[s->state], from,
           until, s->matchers, s->created_by[0] ? s->created_by : "-", s->comment);
}

int
cmd_silence(gpctl *c, int argc, char **argv)
{
    static const char *const names[] = {"--match", "--for", "--until-ms", "--comment", "--by",
                                        NULL};
    const char *v[5] = {NULL};
    msg_silence q = {0}, s = {0};
    int         rc = flags("silence", argc, argv, names, v, NULL, 0);

    if (rc != GPCTL_OK)
        return rc;
    if (v[0] == NULL || (v[1] == NULL && v[2] == NULL))
        return usage_error("silence", "expected: silence --match label=value[,...] "
                                      "(--for 2h | --until-ms MS) [--comment TEXT] [--by NAME]");
    copy(q.matchers, sizeof(q.matchers), v[0]);
    copy(q.comment, sizeof(q.comment), v[3]);
    copy(q.created_by, sizeof(q.created_by), v[4] ? v[4] : getenv("USER"));
    if (v[1] != NULL && (q.duration_ms = silence_for_ms(v[1])) == 0)
        return usage_error("silence", "--for \"%s\": 90s, 30m, 2h or 1d", v[1]);
    if (v[1] != NULL)
        GP_SET_HAS(&q, MSG_SILENCE__DURATION_MS);
    if (v[2] != NULL) {
        q.ends_ms = strtoull(v[2], NULL, 10);
        GP_SET_HAS(&q, MSG_SILENCE__ENDS_MS);
    }
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    rc = ctl_call(c, GP_SUBJ_ADMIN_ALERT_SILENCE, &msg_silence_desc, &q, &msg_silence_desc, &s);
    if (rc == GPCTL_OK && c->out == OUT_JSON)
        rc = ctl_print_json(&msg_silence_desc, &s);
    else if (rc == GPCTL_OK)
        silence_line(&s);
    gp_msg_clear(&msg_silence_desc, &s);
    return rc;
}

int
cmd_get_silences(gpctl *c, int argc, char **argv)
{
    msg_list_request q = {0};
    msg_silence_list l = {0};
    int              rc;

    if (argc > 0)
        return usage_error("get", "get silences takes no arguments (got \"%s\")", argv[0]);
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    rc = ctl_call(c, GP_SUBJ_ADMIN_ALERT_SILENCES, &msg_list_request_desc, &q,
                  &msg_silence_list_desc, &l);
    if (rc == GPCTL_OK && c->out == OUT_JSON)
        rc = ctl_print_json(&msg_silence_list_desc, &l);
    else if (rc == GPCTL_OK && l.items.n == 0)
        fprintf(stderr, "No silences found.\n");
    for (uint32_t i = 0; rc == GPCTL_OK && c->out != OUT_JSON && i < l.items.n; i++)
        silence_line((const msg_silence *)l.items.v + i);
    gp_msg_clear(&msg_silence_list_desc, &l);
    return rc;
}

int
cmd_expire(gpctl *c, int argc, char **argv)
{
    msg_id_request q = {0};
    msg_silence    s = {0};
    int            rc;

    if (argc != 2 || strcmp(argv[0], "silence") != 0)
        return usage_error("expire", "expected: expire silence ID");
    copy(q.id, sizeof(q.id), argv[1]);
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    rc = ctl_call(c, GP_SUBJ_ADMIN_ALERT_EXPIRE, &msg_id_request_desc, &q, &msg_silence_desc, &s);
    if (rc == GPCTL_OK && c->out == OUT_JSON)
        rc = ctl_print_json(&msg_silence_desc, &s);
    else if (rc == GPCTL_OK)
        silence_line(&s);
    gp_msg_clear(&msg_silence_desc, &s);
    return rc;
}
