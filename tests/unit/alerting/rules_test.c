/* rules_test.c -- alerting's rules as data (rules.h) and its
 * diagnosis (diag.h): the shipped rules parse; every kind of mistake in a
 * rules file is refused with its line; conditions and summaries do what
 * the rules say; each fault gets the action and whom to send that the
 * catalog promises. */
#include <string.h>

#include "../../../services/alerting/diag.h"
#include "../../../services/alerting/rules.h"
#include "test.h"

static int
refused(const char *text, const char *want)
{
    al_rules r;
    char     err[256] = "";
    int      ok = al_rules_parse(text, &r, err, sizeof(err)) == GP_EINVAL &&
             strstr(err, want) != NULL;

    if (!ok)
        printf("# got \"%s\", wanted \"%s\"\n", err, want);
    return ok;
}

static void
test_parse(void)
{
    static al_rules r;
    char            err[256] = "";

    T_OKM(al_rules_parse(al_rules_default, &r, err, sizeof(err)) == GP_EOK && r.n == 17,
          "the shipped rules parse (%u rules) %s", r.n, err);
    {   /* the names of a signal's rules (an SQL list), an alert's labels */
        static const al_signal jobs[] = {AL_SIG_NODE_JOBS, AL_SIG_TENANT_JOBS};
        al_signal              gap = AL_SIG_SITE_USAGE_GAP;
        char                   names[128], small[24], labels[64];
        const al_rule         *g = &r.rule[r.n - 1];

        al_rule_names(&r, jobs, 2, names, sizeof(names));
        T_OKM(strcmp(names, "JobsFailingOnNode,JobsFailingForTenant") == 0, "%s: %s", "JobsFailingOnNode,JobsFailingForTenant", names);
        al_rule_names(&r, jobs, 2, small, sizeof(small));
        T_OKM(strcmp(small, "JobsFailingOnNode") == 0, "%s: %s", "JobsFailingOnNode", small);        /* cut at the last whole name */
        al_rule_names(&r, &gap, 1, names, sizeof(names));
        T_OKM(strcmp(names, "MeteringGap") == 0, "%s: %s", "MeteringGap", names);
        T_OKM(g->signal == AL_SIG_SITE_USAGE_GAP && al_signal_numeric(g->signal) &&
              al_signal_scope(g->signal) == AL_SCOPE_SITE && al_rule_holds_num(g, 1) &&
              !al_rule_holds_num(g, 0), "MeteringGap: site.usage_gap > 0, a site alert");
        al_rule_labels(g, "service=x,instance=y", labels, sizeof(labels));
        T_OKM(strcmp(labels, "team=platform,service=x,instance=y") == 0, "%s: %s", "team=platform,service=x,instance=y", labels);
        al_rule_labels(&r.rule[0], "tenant=acme", labels, sizeof(labels));
        T_OKM(strcmp(labels, "tenant=acme") == 0, "%s: %s", "tenant=acme", labels);
        al_rule_labels(g, "", labels, sizeof(labels));
        T_OKM(strcmp(labels, "team=platform") == 0, "%s: %s", "team=platform", labels);
    }
    {   /* StreamFull: stream.fill_pct >= 90, a service-scope alert labelled stream= */
        const al_rule *f = &r.rule[r.n - 2];
        al_vars        v = {.stream = "USAGE"};
        char           summary[128], labels[64];
        al_diag        d;

        T_OKM(strcmp(f->name, "StreamFull") == 0 && f->signal == AL_SIG_STREAM_FILL &&
              al_signal_numeric(f->signal) && al_signal_scope(f->signal) == AL_SCOPE_SERVICE &&
              al_rule_holds_num(f, 90) && !al_rule_holds_num(f, 89) &&
              f->severity == MSG_ALERT_SEVERITY_PAGE, "StreamFull: stream.fill_pct >= 90, page");
        al_expand(f->summary, &v, summary, sizeof(summary));
        T_OKM(strcmp(summary, "JetStream stream USAGE is nearly full") == 0, "%s", summary);
        al_rule_labels(f, "stream=USAGE", labels, sizeof(labels));
        T_OKM(strcmp(labels, "team=platform,stream=USAGE") == 0, "%s", labels);
        al_diag_stream("USAGE is 95% full", false, &d);
        T_OKM(strcmp(d.cause, "stream_full") == 0 &&
              d.dispatch == MSG_ALERT_DISPATCH_PLATFORM_ONCALL &&
              strstr(d.action, "refuses new messages") != NULL,
              "a full discard-new stream: our on-call, its publishers wait (%s)", d.action);
        al_diag_stream("FLEET is 100% full", true, &d);
        T_OKM(strstr(d.action, "drops its oldest") != NULL, "discard old: it drops (%s)", d.action);
        T_OK(al_rules_parse("X stream.fill_pct >= 80 1m ticket - \"{stream} fills\"\n", &r, err,
                            sizeof(err)) == GP_EOK);
        T_OK(refused("X stream.fill_pct == full 0s page - \"x\"\n", "line 1"));
        T_OK(al_rules_parse(al_rules_default, &r, err, sizeof(err)) == GP_EOK);
    }
    {
        al_diag d;

        al_diag_usage_gap("1 usage record(s) missing", &d);
        T_OKM(strcmp(d.cause, "metering_gap") == 0 &&
              d.dispatch == MSG_ALERT_DISPATCH_PLATFORM_ONCALL &&
              strstr(d.action, "gridpool-audit") != NULL &&
              strcmp(d.evidence, "1 usage record(s) missing") == 0,
              "a metering gap: our own on-call, metering's outbox and the audit (%s)", d.action);
    }
    T_OKM(strcmp(r.rule[0].name, "SiteUnreachable") == 0 && r.rule[0].signal == AL_SIG_SITE &&
          r.rule[0].for_ms == 30000 && r.rule[0].severity == MSG_ALERT_SEVERITY_PAGE,
          "SiteUnreachable: site.state, 30 s, page");
    T_OKM(strcmp(r.rule[1].labels, "team=platform") == 0 &&
          al_signal_scope(r.rule[1].signal) == AL_SCOPE_FLEET, "isolation: fleet-wide, labelled");
    T_OK(al_rules_parse("# only comments\n\n", &r, err, sizeof(err)) == GP_EINVAL &&
         strcmp(err, "no rules") == 0);
    T_OK(al_rules_parse("A node.state in lost,suspect 500ms info a=b,c=d \"{node} {site}\"\n"
                        "B node.state != healthy 1h ticket - \"x\"",
                        &r, err, sizeof(err)) == GP_EOK &&
         r.n == 2 && r.rule[0].nvalues == 2 && r.rule[0].for_ms == 500 &&
         r.rule[1].negate && r.rule[1].for_ms == 3600000);
    T_OKM(refused("A node.state == lost 5s page - \"x\"\nA node.state == lost 5s page - \"y\"",
                  "line 2: rule A again (first on line 1)"), "a duplicate name");
    T_OKM(refused("A node.status == lost 5s page - \"x\"", "unknown signal 'node.status'"),
          "an unknown signal");
    T_OKM(refused("A node.state == gone 5s page - \"x\"", "node.state has no value 'gone'"),
          "a value the signal never takes");
    T_OKM(refused("A node.state =~ lost 5s page - \"x\"", "unknown operator"), "an operator");
    T_OKM(refused("A node.state == lost 5 page - \"x\"", "for '5'"), "a duration without unit");
    T_OKM(refused("A node.state == lost 2d page - \"x\"", "for '2d'"), "a unit it lacks");
    T_OKM(refused("A node.state == lost 25h page - \"x\"", "at most a day"), "over a day");
    T_OKM(refused("A node.state == lost 5s urgent - \"x\"", "severity 'urgent'"), "a severity");
    T_OKM(refused("A node.state == lost 5s page team \"x\"", "labels 'team'"), "labels");
    T_OKM(refused("A node.state == lost 5s page - \"{nodes} down\"", "names {nodes}"),
          "an unknown placeholder");
    T_OKM(refused("A node.state == lost 5s page - \"{node\"", "an unclosed {"), "a brace");
    T_OKM(refused("A node.state == lost 5s page -", "no \"summary\""), "no summary");
    T_OKM(refused("A node.state == lost 5s page - \"x\" extra", "one \"quoted\" field"),
          "words after the summary");
    T_OKM(refused("A node.state == lost 5s - \"x\"", "got 6 field(s)"), "a field missing");
    T_OKM(refused("A.b node.state == lost 5s page - \"x\"", "name 'A.b'"), "a dotted name");
    T_OKM(refused("A gpu.temp_c in 90 5s page - \"x\"", "unknown operator 'in' for gpu.temp_c"),
          "a numeric signal takes comparisons only");
    T_OKM(refused("A gpu.temp_c >= hot 5s page - \"x\"", "compares with a number, not 'hot'"),
          "a numeric signal compares with a number");
    T_OKM(refused("A gpu.state > lost 5s page - \"x\"", "unknown operator '>' for gpu.state"),
          "an enum signal takes no order");
    T_OKM(refused("A gpu.throttle in thermal,cold 5s page - \"x\"",
                  "gpu.throttle has no value 'cold'"), "a throttle reason it lacks");
}

static void
test_holds_expand(void)
{
    static al_rules r;
    char            err[256], out[128];
    al_vars         v = {.site = "s1", .region = "eu", .node = "s1-n1", .cause = "power",
                         .sites_silent = 7, .sites = 12};

    T_OK(al_rules_parse("A node.state in lost,suspect 0s page - \"x\"\n"
                        "B node.state != healthy 0s page - \"x\"",
                        &r, err, sizeof(err)) == GP_EOK);
    T_OK(al_rule_holds(&r.rule[0], "lost") && al_rule_holds(&r.rule[0], "suspect") &&
         !al_rule_holds(&r.rule[0], "healthy"));
    T_OK(al_rule_holds(&r.rule[1], "cordoned") && !al_rule_holds(&r.rule[1], "healthy"));
    T_OK(al_rules_parse("T gpu.temp_c >= 90 0s page - \"x\"\n"
                        "E gpu.ecc_dbe > 0 0s page - \"x\"\n"
                        "H gpu.throttle in thermal,hw_thermal 0s page - \"x\"\n"
                        "N gpu.throttle != hw_power_brake 0s page - \"x\"",
                        &r, err, sizeof(err)) == GP_EOK);
    T_OK(al_rule_holds_num(&r.rule[0], 90) && al_rule_holds_num(&r.rule[0], 93.5) &&
         !al_rule_holds_num(&r.rule[0], 89.9));
    T_OK(!al_rule_holds_num(&r.rule[1], 0) && al_rule_holds_num(&r.rule[1], 1));
    {
        const char *some[] = {"power", "hw_thermal"}, *none[] = {"power"};

        T_OKM(al_rule_holds_set(&r.rule[2], some, 2) && !al_rule_holds_set(&r.rule[2], none, 1) &&
              !al_rule_holds_set(&r.rule[2], NULL, 0), "a set: any member among the values");
        T_OKM(al_rule_holds_set(&r.rule[3], some, 2) && al_rule_holds_set(&r.rule[3], NULL, 0),
              "!= on a set: no member among the values");
    }
    T_OK(al_signal_telemetry(r.rule[0].signal) && al_signal_numeric(r.rule[0].signal) &&
         !al_signal_numeric(r.rule[2].signal));
    al_expand("{node} at {site} ({region}): {cause}, {sites_silent}/{sites} {reason}", &v, out,
              sizeof(out));
    T_OKM(strcmp(out, "s1-n1 at s1 (eu): power, 7/12 ?") == 0, "expand: \"%s\"", out);
    al_expand("{site}{site}{site}", &v, out, 5);
    T_OKM(strcmp(out, "s1s1") == 0, "expand stops at the buffer's end: \"%s\"", out);
}

static void
test_diag(void)
{
    msg_site_event          se = {.kind = MSG_SITE_EVENT_KIND_UNREACHABLE,
                                  .cause = MSG_SITE_EVENT_CAUSE_POWER_OR_UPLINK, .nodes = 4,
                                  .lost = 3};
    msg_control_plane_event ce = {.sites_silent = 7, .sites = 12, .threshold_pct = 30};
    msg_node_state          ns = {.state = MSG_NODE_STATE_STATE_LOST,
                                  .prev = MSG_NODE_STATE_STATE_HEALTHY};
    al_diag                 d;

    snprintf(se.evidence, sizeof(se.evidence), "its leaf link dropped");
    al_diag_site(&se, &d);
    T_OKM(strcmp(d.cause, "power_or_uplink") == 0 && d.dispatch == MSG_ALERT_DISPATCH_SITE_PARTNER &&
          strstr(d.evidence, "3 of 4 node(s) lost") && strstr(d.evidence, "leaf link dropped"),
          "site unknown: the site partner, the evidence kept (%s)", d.evidence);
    se.cause = MSG_SITE_EVENT_CAUSE_UPLINK;
    al_diag_site(&se, &d);
    T_OK(strcmp(d.cause, "uplink") == 0 && d.dispatch == MSG_ALERT_DISPATCH_NETWORK_PROVIDER);
    se.cause = MSG_SITE_EVENT_CAUSE_POWER;
    al_diag_site(&se, &d);
    T_OK(strcmp(d.cause, "power") == 0 && d.dispatch == MSG_ALERT_DISPATCH_SITE_PARTNER);
    se.kind = MSG_SITE_EVENT_KIND_RETURNED;
    al_diag_site(&se, &d);
    T_OKM(d.dispatch == MSG_ALERT_DISPATCH_UTILITY, "came back rebooted: ask the utility");
    al_diag_isolation(&ce, &d);
    T_OK(strcmp(d.cause, "control_plane") == 0 && d.dispatch == MSG_ALERT_DISPATCH_PLATFORM_ONCALL &&
         strstr(d.evidence, "7 of 12 sites silent") != NULL);
    al_diag_node(&ns, &d);
    T_OK(strcmp(d.cause, "node_down") == 0 && d.dispatch == MSG_ALERT_DISPATCH_REMOTE_HANDS);
    ns.state = MSG_NODE_STATE_STATE_QUARANTINED;
    snprintf(ns.reason, sizeof(ns.reason), "quarantine: GPU 0 fell off the bus (XID 79)");
    al_diag_node(&ns, &d);
    T_OKM(strcmp(d.cause, "gpu_xid") == 0 && d.dispatch == MSG_ALERT_DISPATCH_FIELD_TECHNICIAN &&
          strstr(d.action, "XID 79") != NULL, "XID 79: the catalog's action (%s)", d.action);
    snprintf(ns.reason, sizeof(ns.reason), "quarantine: 3 new uncorrectable ECC error(s)");
    al_diag_node(&ns, &d);
    T_OK(strcmp(d.cause, "gpu_ecc") == 0 && d.dispatch == MSG_ALERT_DISPATCH_FIELD_TECHNICIAN);
    snprintf(ns.reason, sizeof(ns.reason), "quarantine: flapping: back from lost 3 times");
    al_diag_node(&ns, &d);
    T_OK(strcmp(d.cause, "flapping") == 0 && strstr(d.action, "gpctl release node") != NULL);
    snprintf(ns.reason, sizeof(ns.reason), "quarantine: GPU 1 lost (stopped answering)");
    al_diag_node(&ns, &d);
    T_OK(strcmp(d.cause, "gpu_lost") == 0);
    al_diag_telemetry(AL_SIG_GPU_STATE, "GPU 0 stopped answering", &d);
    T_OKM(strcmp(d.cause, "gpu_fallen_off_bus") == 0 && strstr(d.action, "XID 79") &&
          d.dispatch == MSG_ALERT_DISPATCH_REMOTE_HANDS && strcmp(d.evidence, "GPU 0 stopped answering") == 0,
          "a GPU lost: XID 79's action, remote hands to reboot (%s)", d.action);
    al_diag_telemetry(AL_SIG_GPU_ECC_DBE, "GPU 1: 5 uncorrectable", &d);
    T_OK(strcmp(d.cause, "gpu_ecc_uncorrectable") == 0 && strstr(d.action, "RMA") &&
         d.dispatch == MSG_ALERT_DISPATCH_FIELD_TECHNICIAN);
    al_diag_telemetry(AL_SIG_GPU_THROTTLE, "GPU 0 hw_power_brake", &d);
    T_OK(strcmp(d.cause, "gpu_power_brake") == 0 && d.dispatch == MSG_ALERT_DISPATCH_SITE_PARTNER);
    al_diag_telemetry(AL_SIG_GPU_THROTTLE, "GPU 0 thermal", &d);
    T_OK(strcmp(d.cause, "gpu_thermal_throttle") == 0);
    al_diag_telemetry(AL_SIG_NODE_RTT, "uplink RTT 1500 ms", &d);
    T_OK(d.dispatch == MSG_ALERT_DISPATCH_NETWORK_PROVIDER);
}

int
main(void)
{
    test_parse();
    test_holds_expand();
    test_diag();
    return T_DONE();
}
