/* rules.h -- alerting's rules as data: a table of (name, condition,
 * for-duration, severity, labels, summary), one rule a line, parsed and
 * validated at start (gridpool-alerting --check-config prints them).
 *
 *   # name              signal           op  values        for  severity labels         "summary"
 *   SiteUnreachable     site.state       ==  unreachable   30s  page     -              "Site {site} ({region}) unreachable: {cause}"
 *
 * Signals: site.state isolation.state node.state (events); gpu.state
 * gpu.ecc_dbe gpu.temp_c gpu.throttle node.disk node.uplink_rtt_ms (each
 * heartbeat: the worst GPU, or all GPUs' throttle reasons);
 * node.job_fail_pct site.job_fail_pct tenant.job_fail_pct (the share of
 * attempts that ended failed over a window, from the JOBS stream: jobs.c);
 * service.state (up, silent: an instance of a service that stopped saying
 * it is there without saying it was stopping: presence.c);
 * site.usage_gap (usage records of a site missing from the USAGE stream
 * past a grace: usage.c); stream.fill_pct (how full a JetStream stream
 * is, percent of its byte or message limit: streams.c).
 * A signal is a state the fleet reports about one entity (a site, a node,
 * the fleet); its scope decides the alert's labels (site: region and
 * site; node: region, site and node; tenant: the label tenant=; service:
 * the labels service= and instance=, or stream= for a stream, a part of
 * the control plane's services; fleet: none).  A rule holds for an
 * entity while the entity's last reported value matches (== one of the
 * values, != none of them); it fires once it has held for `for`.
 * Durations (gp/duration.h): 500ms, 30s, 1.5m, 1h, at most a day.  Labels: "-" or k=v,k=v.  A summary's
 * {placeholders}: site, region, node, tenant, service, instance, stream,
 * cause, reason, sites_silent, sites.
 *
 * Contract:
 *   - al_rules_parse(text): every line checked; the first error is INVAL
 *     with "line N: why" in err.  Blank lines and # comments skipped.
 *     Duplicate names, unknown signals or values, bad durations, an
 *     unknown placeholder: refused.
 *   - al_rules_default: the rules shipped (al_rules_parse accepts them).
 *   - al_rule_holds(rule, value): the condition for a reported value.
 *   - al_expand(tmpl, vars): the summary with its placeholders filled.
 * Pure, any thread. */
#ifndef ALERTING_RULES_H
#define ALERTING_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gp/err.h"

#define AL_RULES_MAX  64
#define AL_VALUES_MAX 8

/* State signals come from events (recovery's, the registry's); telemetry
 * signals from every heartbeat (node scope).  A numeric signal compares
 * (== != > >= < <=) with a number; a set-valued one (gpu.throttle: the
 * reasons of all GPUs) holds for == / in when any member is one of the
 * values, for != when none is. */
typedef enum al_signal {
    AL_SIG_SITE, AL_SIG_ISOLATION, AL_SIG_NODE,         /* state */
    AL_SIG_GPU_STATE, AL_SIG_GPU_ECC_DBE, AL_SIG_GPU_TEMP, AL_SIG_GPU_THROTTLE,
    AL_SIG_NODE_DISK, AL_SIG_NODE_RTT,                  /* telemetry */
    AL_SIG_NODE_JOBS, AL_SIG_SITE_JOBS, AL_SIG_TENANT_JOBS,   /* job failure rates */
    AL_SIG_SERVICE,                                     /* presence.c */
    AL_SIG_SITE_USAGE_GAP,                              /* usage.c */
    AL_SIG_STREAM_FILL,                                 /* streams.c */
    AL_SIG_COUNT
} al_signal;
typedef enum al_op { AL_OP_EQ, AL_OP_NE, AL_OP_GT, AL_OP_GE, AL_OP_LT, AL_OP_LE } al_op;
typedef enum al_scope {
    AL_SCOPE_FLEET, AL_SCOPE_SITE, AL_SCOPE_NODE, AL_SCOPE_TENANT, AL_SCOPE_SERVICE
} al_scope;

typedef struct al_rule {
    char      name[64];
    al_signal signal;
    al_op     op;
    bool      negate;                       /* != (enum signals) */
    double    num;                          /* numeric signals: the threshold */
    char      values[AL_VALUES_MAX][24];
    unsigned  nvalues;
    uint32_t  for_ms;
    int       severity;                     /* MSG_ALERT_SEVERITY_* */
    char      labels[128];                  /* "" or k=v,k=v */
    char      summary[200];
    int       line;
} al_rule;

typedef struct al_rules {
    al_rule  rule[AL_RULES_MAX];
    unsigned n;
} al_rules;

/* The variables a summary may name; NULL or "" prints as "?". */
typedef struct al_vars {
    const char *site, *region, *node, *cause, *reason, *tenant, *service, *instance, *stream;
    unsigned    sites_silent, sites;
} al_vars;

extern const char al_rules_default[];

gp_err      al_rules_parse(const char *text, al_rules *out, char *err, size_t errlen);
/* path "" -> the defaults; else the file (NOTFOUND / INVAL with err). */
gp_err      al_rules_load(const char *path, al_rules *out, char *err, size_t errlen);
void        al_rules_print(const al_rules *r, FILE *f);
bool        al_rule_holds(const al_rule *r, const char *value);
/* a set: values[0..n) (any member matches) */
bool        al_rule_holds_set(const al_rule *r, const char *const *values, unsigned n);
bool        al_rule_holds_num(const al_rule *r, double v);
bool        al_signal_numeric(al_signal s);
bool        al_signal_telemetry(al_signal s);
al_scope    al_signal_scope(al_signal s);
const char *al_signal_name(al_signal s);
const char *al_scope_name(al_scope s);
void        al_expand(const char *tmpl, const al_vars *v, char *out, size_t n);
/* The names of the rules on any of sigs[0..nsigs), comma-separated (an
 * SQL string_to_array argument); "" when none. */
void        al_rule_names(const al_rules *rs, const al_signal *sigs, unsigned nsigs, char *out,
                          size_t n);
/* An alert's labels: the rule's, then extra ("k=v,k=v"). */
void        al_rule_labels(const al_rule *r, const char *extra, char *out, size_t n);

#endif
