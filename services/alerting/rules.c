/* rules.c -- see rules.h.  A line is split into whitespace-separated
 * fields, the last one a double-quoted summary; every field is checked
 * against the vocabulary here, so a typo stops the service at start
 * instead of never firing. */
#include "rules.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "gp/duration.h"
#include "msg_gen.h"

/* The rules shipped.  SiteUnreachable waits 30 s: a control-plane
 * isolation (many sites at once) is declared within the recovery
 * service's isolation window, and muting the sites' alerts needs it
 * before they fire; NodeDown waits 20 s so that a site outage, which
 * recovery calls within its site window, mutes its nodes instead;
 * NodeQuarantined waits 15 s so that the GPU fault that caused it (read
 * from the same heartbeat, but on another path) is raised first and mutes
 * it: one alert, the cause, with the quarantine in its diagnosis.  The job
 * failure rates (jobs.c) keep their counts in the evidence: a summary that
 * changed would tell a firing alert again every pass; so does StreamFull
 * (how full, in bytes and messages).  StreamFull fires at 90%: a stream
 * that refuses new messages when full (discard new) stops its publishers
 * at 100%, and the last 10% of a week's stream is most of a day. */
const char al_rules_default[] =
    "# name                signal           op  values       for  severity labels        summary\n"
    "SiteUnreachable       site.state       ==  unreachable  30s  page     -             "
    "\"Site {site} ({region}) unreachable: {cause}\"\n"
    "ControlPlaneIsolation isolation.state  ==  frozen       0s   page     team=platform "
    "\"{sites_silent} of {sites} sites went silent at once: the control plane is cut off, "
    "rescheduling frozen\"\n"
    "NodeDown              node.state       ==  lost         20s  ticket   -             "
    "\"Node {node} at {site} lost: {reason}\"\n"
    "NodeQuarantined       node.state       ==  quarantined  15s  ticket   -             "
    "\"Node {node} at {site} quarantined: {reason}\"\n"
    "GpuFallenOffBus       gpu.state        ==  lost         0s   page     -             "
    "\"A GPU of {node} at {site} fell off the bus: {reason}\"\n"
    "GpuEccUncorrectable   gpu.ecc_dbe      >   0            0s   page     -             "
    "\"Uncorrectable ECC errors on {node} at {site}: {reason}\"\n"
    "GpuOverheating        gpu.temp_c       >=  90           2m   ticket   -             "
    "\"A GPU of {node} at {site} runs hot: {reason}\"\n"
    "GpuThermalThrottling  gpu.throttle     in  thermal,hw_thermal,sw_thermal 5m ticket -  "
    "\"GPUs of {node} at {site} throttle for heat: {reason}\"\n"
    "GpuPowerBrake         gpu.throttle     in  hw_power_brake,hw_slowdown 1m ticket -     "
    "\"GPUs of {node} at {site} are power-braked: {reason}\"\n"
    "DiskFailing           node.disk        in  degraded,failing 10m ticket -          "
    "\"The disk of {node} at {site} is {reason}\"\n"
    "UplinkSlow            node.uplink_rtt_ms > 1000         5m   ticket   -             "
    "\"The uplink of {node} at {site} is slow: {reason}\"\n"
    "JobsFailingOnNode     node.job_fail_pct >= 50          0s   ticket   -             "
    "\"Jobs fail on {node} at {site}\"\n"
    "JobsFailingAtSite     site.job_fail_pct >= 50          0s   ticket   -             "
    "\"Jobs fail at {site} ({region})\"\n"
    "JobsFailingForTenant  tenant.job_fail_pct >= 50        0s   ticket   -             "
    "\"Jobs of customer {tenant} fail wherever they run\"\n"
    "ServiceInstanceSilent service.state    ==  silent       0s   page     team=platform "
    "\"Instance {instance} of gridpool-{service} went silent\"\n"
    "StreamFull            stream.fill_pct  >=  90           0s   page     team=platform "
    "\"JetStream stream {stream} is nearly full\"\n"
    "MeteringGap           site.usage_gap   >   0            0s   ticket   team=platform "
    "\"Usage records of {site} ({region}) never reached billing\"\n";

static const struct {
    const char *name;
    al_scope    scope;
    bool        numeric, telemetry;
    const char *values[8];
} signals[AL_SIG_COUNT] = {
    [AL_SIG_SITE] = {"site.state", AL_SCOPE_SITE, false, false, {"unreachable", "returned", NULL}},
    [AL_SIG_ISOLATION] = {"isolation.state", AL_SCOPE_FLEET, false, false,
                          {"frozen", "thawing", NULL}},
    [AL_SIG_NODE] = {"node.state", AL_SCOPE_NODE, false, false,
                     {"unknown", "healthy", "suspect", "draining", "quarantined", "lost",
                      "cordoned", NULL}},
    [AL_SIG_GPU_STATE] = {"gpu.state", AL_SCOPE_NODE, false, true, {"ok", "lost", NULL}},
    [AL_SIG_GPU_ECC_DBE] = {"gpu.ecc_dbe", AL_SCOPE_NODE, true, true, {NULL}},
    [AL_SIG_GPU_TEMP] = {"gpu.temp_c", AL_SCOPE_NODE, true, true, {NULL}},
    [AL_SIG_GPU_THROTTLE] = {"gpu.throttle", AL_SCOPE_NODE, false, true,
                             {"thermal", "power", "hw_slowdown", "sw_thermal", "hw_thermal",
                              "hw_power_brake", NULL}},
    [AL_SIG_NODE_DISK] = {"node.disk", AL_SCOPE_NODE, false, true,
                          {"ok", "degraded", "failing", NULL}},
    [AL_SIG_NODE_RTT] = {"node.uplink_rtt_ms", AL_SCOPE_NODE, true, true, {NULL}},
    [AL_SIG_NODE_JOBS] = {"node.job_fail_pct", AL_SCOPE_NODE, true, false, {NULL}},
    [AL_SIG_SITE_JOBS] = {"site.job_fail_pct", AL_SCOPE_SITE, true, false, {NULL}},
    [AL_SIG_TENANT_JOBS] = {"tenant.job_fail_pct", AL_SCOPE_TENANT, true, false, {NULL}},
    [AL_SIG_SERVICE] = {"service.state", AL_SCOPE_SERVICE, false, false, {"up", "silent", NULL}},
    [AL_SIG_SITE_USAGE_GAP] = {"site.usage_gap", AL_SCOPE_SITE, true, false, {NULL}},
    [AL_SIG_STREAM_FILL] = {"stream.fill_pct", AL_SCOPE_SERVICE, true, false, {NULL}},
};

bool
al_signal_numeric(al_signal s)
{
    return s < AL_SIG_COUNT && signals[s].numeric;
}

bool
al_signal_telemetry(al_signal s)
{
    return s < AL_SIG_COUNT && signals[s].telemetry;
}

static const char *const placeholders[] = {"site", "region", "node", "tenant", "service",
                                           "instance", "stream", "cause", "reason",
                                           "sites_silent", "sites", NULL};

const char *
al_signal_name(al_signal s)
{
    return s < AL_SIG_COUNT ? signals[s].name : "?";
}

al_scope
al_signal_scope(al_signal s)
{
    return s < AL_SIG_COUNT ? signals[s].scope : AL_SCOPE_FLEET;
}

const char *
al_scope_name(al_scope s)
{
    return s == AL_SCOPE_NODE     ? "node"
           : s == AL_SCOPE_SITE   ? "site"
           : s == AL_SCOPE_TENANT ? "tenant"
           : s == AL_SCOPE_SERVICE ? "service"
                                  : "fleet";
}

static gp_err
bad(char *err, size_t n, int line, const char *fmt, ...)
{
    va_list ap;
    int     k = snprintf(err, n, "line %d: ", line);

    va_start(ap, fmt);
    if (k >= 0 && (size_t)k < n)
        vsnprintf(err + k, n - (size_t)k, fmt, ap);
    va_end(ap);
    return GP_EINVAL;
}

/* "500ms" "30s" "5m" "1h" -> ms (gp/duration.h); false if malformed or
 * over a day */
static bool
parse_duration(const char *s, uint32_t *ms)
{
    uint64_t v;

    if (gp_duration_parse(s, strlen(s), 0, 86400000, &v) != GP_EOK)
        return false;
    *ms = (uint32_t)v;
    return true;
}

static bool
word_ok(const char *s, size_t max)
{
    size_t n = strlen(s);

    if (n == 0 || n > max)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.')
            return false;
    return true;
}

static bool
labels_ok(const char *s)
{
    char buf[128], *save = NULL;

    if (strlen(s) >= sizeof(buf))
        return false;
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');

        if (eq == NULL)
            return false;
        *eq = '\0';
        if (!word_ok(kv, 63) || !word_ok(eq + 1, 63))
            return false;
    }
    return true;
}

/* every {name} of the summary is a known placeholder; braces balance */
static bool
summary_ok(const char *s, char *which, size_t n)
{
    for (const char *p = strchr(s, '{'); p; p = strchr(p + 1, '{')) {
        const char *q = strchr(p, '}');
        size_t      len;
        bool        known = false;

        if (q == NULL)
            return snprintf(which, n, "an unclosed {"), false;
        len = (size_t)(q - p - 1);
        for (int i = 0; placeholders[i]; i++)
            if (strlen(placeholders[i]) == len && strncmp(p + 1, placeholders[i], len) == 0)
                known = true;
        if (!known)
            return snprintf(which, n, "{%.*s}", (int)(len > 40 ? 40 : len), p + 1), false;
    }
    return true;
}

static int
find_signal(const char *s)
{
    for (int i = 0; i < AL_SIG_COUNT; i++)
        if (strcmp(signals[i].name, s) == 0)
            return i;
    return -1;
}

static bool
value_known(al_signal sig, const char *v)
{
    for (int i = 0; signals[sig].values[i]; i++)
        if (strcmp(signals[sig].values[i], v) == 0)
            return true;
    return false;
}

static int
find_severity(const char *s)
{
    for (int i = 0; i < (int)(sizeof(msg_alert_severity_names) / sizeof(*msg_alert_severity_names));
         i++)
        if (strcmp(msg_alert_severity_names[i], s) == 0)
            return i;
    return -1;
}

/* values "a" or "a,b,c" into r */
static gp_err
parse_values(al_rule *r, char *list, char *err, size_t errlen)
{
    char *save = NULL;

    for (char *v = strtok_r(list, ",", &save); v; v = strtok_r(NULL, ",", &save)) {
        if (r->nvalues == AL_VALUES_MAX)
            return bad(err, errlen, r->line, "more than %d values", AL_VALUES_MAX);
        if (!value_known(r->signal, v))
            return bad(err, errlen, r->line, "%s has no value '%s'", al_signal_name(r->signal), v);
        snprintf(r->values[r->nvalues++], sizeof(r->values[0]), "%s", v);
    }
    return r->nvalues ? GP_EOK : bad(err, errlen, r->line, "no values");
}

static gp_err
parse_condition(al_rule *r, const char *op, char *vals, char *err, size_t errlen)
{
    static const char *const ops[] = {"==", "!=", ">", ">=", "<", "<="};
    char                    *end;
    int                      o = -1;

    for (int i = 0; i < 6; i++)
        if (strcmp(op, ops[i]) == 0)
            o = i;
    if (strcmp(op, "in") == 0 && !al_signal_numeric(r->signal))
        o = AL_OP_EQ;
    if (!al_signal_numeric(r->signal)) {
        if (o != AL_OP_EQ && o != AL_OP_NE)
            return bad(err, errlen, r->line, "unknown operator '%s' for %s (==, !=, in)", op,
                       al_signal_name(r->signal));
        r->op = (al_op)o;
        r->negate = o == AL_OP_NE;
        return parse_values(r, vals, err, errlen);
    }
    if (o < 0)
        return bad(err, errlen, r->line, "unknown operator '%s' for %s (== != > >= < <=)", op,
                   al_signal_name(r->signal));
    r->op = (al_op)o;
    errno = 0;
    r->num = strtod(vals, &end);
    if (errno != 0 || end == vals || *end != '\0')
        return bad(err, errlen, r->line, "%s compares with a number, not '%s'",
                   al_signal_name(r->signal), vals);
    snprintf(r->values[0], sizeof(r->values[0]), "%s", vals);
    r->nvalues = 1;
    return GP_EOK;
}

static gp_err
parse_line(char *line, int lineno, al_rule *r, char *err, size_t errlen)
{
    char *f[7], *q, *save = NULL, which[64];
    int   nf = 0, sig, sev;

    memset(r, 0, sizeof(*r));
    r->line = lineno;
    if ((q = strchr(line, '"')) == NULL)
        return bad(err, errlen, lineno, "no \"summary\" at the end");
    *q++ = '\0';
    {
        char *end = strrchr(q, '"');

        if (end == NULL || end[strspn(end + 1, " \t\r") + 1] != '\0')
            return bad(err, errlen, lineno, "the summary is not one \"quoted\" field at the end");
        *end = '\0';
    }
    for (char *t = strtok_r(line, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
        if (nf == 7)
            return bad(err, errlen, lineno, "too many fields before the summary");
        f[nf++] = t;
    }
    if (nf != 7)
        return bad(err, errlen, lineno, "expected name signal op values for severity labels "
                                        "\"summary\", got %d field(s) before the summary", nf);
    if (!word_ok(f[0], sizeof(r->name) - 1) || strchr(f[0], '.') != NULL)
        return bad(err, errlen, lineno, "name '%s': letters, digits, '_' and '-' only", f[0]);
    snprintf(r->name, sizeof(r->name), "%s", f[0]);
    if ((sig = find_signal(f[1])) < 0)
        return bad(err, errlen, lineno, "unknown signal '%s' (site.state, isolation.state, "
                                        "node.state, gpu.state, gpu.ecc_dbe, gpu.temp_c, "
                                        "gpu.throttle, node.disk, node.uplink_rtt_ms)", f[1]);
    r->signal = (al_signal)sig;
    if (parse_condition(r, f[2], f[3], err, errlen) != GP_EOK)
        return GP_EINVAL;
    if (!parse_duration(f[4], &r->for_ms))
        return bad(err, errlen, lineno, "for '%s': a duration such as 0s, 500ms, 30s, 5m, 1h "
                                        "(at most a day)", f[4]);
    if ((sev = find_severity(f[5])) < 0)
        return bad(err, errlen, lineno, "severity '%s': page, ticket or info", f[5]);
    r->severity = sev;
    if (strcmp(f[6], "-") != 0) {
        if (!labels_ok(f[6]))
            return bad(err, errlen, lineno, "labels '%s': - or k=v,k=v", f[6]);
        snprintf(r->labels, sizeof(r->labels), "%s", f[6]);
    }
    if (q[0] == '\0' || strlen(q) >= sizeof(r->summary))
        return bad(err, errlen, lineno, "the summary is empty or longer than %zu",
                   sizeof(r->summary) - 1);
    if (!summary_ok(q, which, sizeof(which)))
        return bad(err, errlen, lineno, "the summary names %s (known: {site} {region} {node} "
                                        "{tenant} {service} {instance} {stream} {cause} "
                                        "{reason} {sites_silent} {sites})", which);
    snprintf(r->summary, sizeof(r->summary), "%s", q);
    return GP_EOK;
}

gp_err
al_rules_parse(const char *text, al_rules *out, char *err, size_t errlen)
{
    const char *p = text;
    int         lineno = 0;

    memset(out, 0, sizeof(*out));
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t      len = nl ? (size_t)(nl - p) : strlen(p);
        char        line[512];
        const char *s;

        lineno++;
        if (len >= sizeof(line))
            return bad(err, errlen, lineno, "longer than %zu characters", sizeof(line) - 1);
        memcpy(line, p, len);
        line[len] = '\0';
        p += len + (nl ? 1 : 0);
        for (s = line; *s == ' ' || *s == '\t' || *s == '\r'; s++)
            ;
        if (*s == '\0' || *s == '#')
            continue;
        if (out->n == AL_RULES_MAX)
            return bad(err, errlen, lineno, "more than %d rules", AL_RULES_MAX);
        if (parse_line(line, lineno, &out->rule[out->n], err, errlen) != GP_EOK)
            return GP_EINVAL;
        for (unsigned i = 0; i < out->n; i++)
            if (strcmp(out->rule[i].name, out->rule[out->n].name) == 0)
                return bad(err, errlen, lineno, "rule %s again (first on line %d)",
                           out->rule[i].name, out->rule[i].line);
        out->n++;
    }
    if (out->n == 0) {
        snprintf(err, errlen, "no rules");
        return GP_EINVAL;
    }
    return GP_EOK;
}

gp_err
al_rules_load(const char *path, al_rules *out, char *err, size_t errlen)
{
    FILE  *f;
    char  *text;
    long   n;
    gp_err rc;

    if (path == NULL || path[0] == '\0')
        return al_rules_parse(al_rules_default, out, err, errlen);
    if ((f = fopen(path, "r")) == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return GP_ENOTFOUND;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || n > 256 * 1024 ||
        fseek(f, 0, SEEK_SET) != 0 || (text = malloc((size_t)n + 1)) == NULL) {
        fclose(f);
        snprintf(err, errlen, "%s: unreadable or over 256 KiB", path);
        return GP_EINVAL;
    }
    text[fread(text, 1, (size_t)n, f)] = '\0';
    fclose(f);
    rc = al_rules_parse(text, out, err, errlen);
    free(text);
    return rc;
}

void
al_rules_print(const al_rules *r, FILE *f)
{
    static const char *const opname[] = {"==", "!=", ">", ">=", "<", "<="};

    fprintf(f, "# %u rule(s)\n# %-22s %-18s %-3s %-24s %-7s %-8s %-14s %s\n", r->n, "name",
            "signal", "op", "values", "for", "severity", "labels", "summary");
    for (unsigned i = 0; i < r->n; i++) {
        const al_rule *x = &r->rule[i];
        char           vals[AL_VALUES_MAX * 25] = "", dur[16];

        for (unsigned k = 0; k < x->nvalues; k++)
            snprintf(vals + strlen(vals), sizeof(vals) - strlen(vals), "%s%s", k ? "," : "",
                     x->values[k]);
        if (x->for_ms % 1000 != 0)
            snprintf(dur, sizeof(dur), "%ums", (unsigned)x->for_ms);
        else
            snprintf(dur, sizeof(dur), "%us", (unsigned)(x->for_ms / 1000));
        fprintf(f, "%-24s %-18s %-3s %-24s %-7s %-8s %-14s \"%s\"\n", x->name,
                al_signal_name(x->signal), opname[x->op], vals, dur,
                msg_alert_severity_names[x->severity], x->labels[0] ? x->labels : "-",
                x->summary);
    }
}

bool
al_rule_holds_num(const al_rule *r, double v)
{
    switch (r->op) {
    case AL_OP_EQ: return v == r->num;
    case AL_OP_NE: return v != r->num;
    case AL_OP_GT: return v > r->num;
    case AL_OP_GE: return v >= r->num;
    case AL_OP_LT: return v < r->num;
    case AL_OP_LE: return v <= r->num;
    }
    return false;
}

bool
al_rule_holds_set(const al_rule *r, const char *const *values, unsigned n)
{
    bool any = false;

    for (unsigned i = 0; i < n && !any; i++)
        for (unsigned k = 0; k < r->nvalues && !any; k++)
            any = strcmp(r->values[k], values[i]) == 0;
    return r->negate ? !any : any;
}

bool
al_rule_holds(const al_rule *r, const char *value)
{
    bool in = false;

    for (unsigned i = 0; i < r->nvalues && !in; i++)
        in = strcmp(r->values[i], value) == 0;
    return r->negate ? !in : in;
}

static const char *
or_q(const char *s)
{
    return s && s[0] ? s : "?";
}

void
al_expand(const char *tmpl, const al_vars *v, char *out, size_t n)
{
    size_t k = 0;

    if (n == 0)
        return;
    for (const char *p = tmpl; *p && k + 1 < n; p++) {
        const char *q = *p == '{' ? strchr(p, '}') : NULL;
        char        num[16], name[16];
        const char *val = NULL;
        size_t      len;

        if (q == NULL || (len = (size_t)(q - p - 1)) >= sizeof(name)) {
            out[k++] = *p;
            continue;
        }
        memcpy(name, p + 1, len);
        name[len] = '\0';
        if (strcmp(name, "site") == 0)
            val = or_q(v->site);
        else if (strcmp(name, "region") == 0)
            val = or_q(v->region);
        else if (strcmp(name, "node") == 0)
            val = or_q(v->node);
        else if (strcmp(name, "tenant") == 0)
            val = or_q(v->tenant);
        else if (strcmp(name, "service") == 0)
            val = or_q(v->service);
        else if (strcmp(name, "instance") == 0)
            val = or_q(v->instance);
        else if (strcmp(name, "stream") == 0)
            val = or_q(v->stream);
        else if (strcmp(name, "cause") == 0)
            val = or_q(v->cause);
        else if (strcmp(name, "reason") == 0)
            val = or_q(v->reason);
        else if (strcmp(name, "sites_silent") == 0 || strcmp(name, "sites") == 0) {
            snprintf(num, sizeof(num), "%u", name[5] ? v->sites_silent : v->sites);
            val = num;
        }
        if (val == NULL) {
            out[k++] = *p;
            continue;
        }
        for (; *val && k + 1 < n; val++)
            out[k++] = *val;
        p = q;
    }
    out[k] = '\0';
}

void
al_rule_names(const al_rules *rs, const al_signal *sigs, unsigned nsigs, char *out, size_t n)
{
    size_t k = 0;

    if (n == 0)
        return;
    out[0] = '\0';
    for (unsigned i = 0; i < rs->n; i++)
        for (unsigned j = 0; j < nsigs; j++) {
            if (rs->rule[i].signal != sigs[j])
                continue;
            int w = snprintf(out + k, n - k, "%s%s", k ? "," : "", rs->rule[i].name);

            if (w < 0 || (size_t)w >= n - k) {      /* cut at the last whole name */
                out[k] = '\0';
                return;
            }
            k += (size_t)w;
        }
}

void
al_rule_labels(const al_rule *r, const char *extra, char *out, size_t n)
{
    snprintf(out, n, "%s%s%s", r->labels, r->labels[0] && extra[0] ? "," : "", extra);
}
