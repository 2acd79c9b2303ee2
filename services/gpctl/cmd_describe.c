/* cmd_describe.c -- gpctl describe site|node|job NAME: sectioned, for people. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "gp/limits.h"
#include "gpctl.h"
#include "jobview.h"

#define LABEL_WIDTH 18

/* "  Label:        value" */
static void __attribute__((format(printf, 3, 4)))
kv(int indent, const char *label, const char *fmt, ...)
{
    char    key[64];
    va_list ap;

    snprintf(key, sizeof(key), "%s:", label);
    printf("%*s%-*s", indent, "", LABEL_WIDTH - indent, key);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

/* A section title "Label:", or "Label:  <none>" when it has no lines. */
static void
section(int indent, const char *label, bool empty)
{
    if (empty)
        kv(indent, label, "<none>");
    else
        printf("%*s%s:\n", indent, "", label);
}

static const char *
enum_of(const gp_msg_desc *d, int field, int32_t v)
{
    const gp_field *f = &d->fields[field];

    return v >= 0 && (uint32_t)v < f->nenums ? f->enums[v] : "?";
}

static const char *
or_dash(const char *s)
{
    return s[0] != '\0' ? s : "-";
}

/* "2026-12-02T08:51:02.123Z (5s ago)" or "never". */
static void
when(const gpctl *c, char *buf, size_t n, uint64_t ms)
{
    char iso[40], age[32];

    if (ms == 0) {
        snprintf(buf, n, "never");
        return;
    }
    fmt_iso8601(iso, sizeof(iso), ms);
    fmt_age(age, sizeof(age), c->now_ms, ms);
    snprintf(buf, n, "%s (%s ago)", iso, age);
}

/* ---- node ------------------------------------------------------------------------ */

static void
node_gpus(const msg_node *n)
{
    static const char *const heads[] = {"INDEX", "MODEL", "VRAM", "UUID", "SERIAL",
                                        "INTERCONNECT", NULL};
    const msg_gpu *g = n->gpus.v;
    table          t;

    section(0, "GPUs", n->gpus.n == 0);
    if (n->gpus.n == 0)
        return;
    table_init(&t, heads);
    for (uint32_t i = 0; i < n->gpus.n; i++) {
        char idx[16], vram[24];

        snprintf(idx, sizeof(idx), "%d", (int)g[i].index);
        fmt_mib(vram, sizeof(vram), g[i].vram_mb);
        table_add(&t, (const char *const[]){idx, g[i].model, vram, g[i].uuid, or_dash(g[i].serial),
                                            GP_HAS(&g[i], MSG_GPU__INTERCONNECT)
                                                ? enum_of(&msg_gpu_desc, MSG_GPU__INTERCONNECT,
                                                          g[i].interconnect)
                                                : "-"});
    }
    table_print(&t, stdout, 2);
    table_free(&t);
}

/* "43,79" / "thermal,power" / "-" */
static void
join_ints(char *buf, size_t n, const gp_arr *a)
{
    size_t used = 0;

    snprintf(buf, n, "-");
    for (uint32_t i = 0; i < a->n && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%d", i ? "," : "",
                                 (int)((const int32_t *)a->v)[i]);
}

static void
join_throttle(char *buf, size_t n, const gp_arr *a)
{
    size_t used = 0;

    snprintf(buf, n, "-");
    for (uint32_t i = 0; i < a->n && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? "," : "",
                                 enum_of(&msg_gpu_telemetry_desc, MSG_GPU_TELEMETRY__THROTTLE,
                                         ((const int32_t *)a->v)[i]));
}

static void
telemetry_gpus(const msg_heartbeat *hb)
{
    static const char *const heads[] = {"INDEX", "STATE", "TEMP", "POWER", "UTIL", "MEM-USED",
                                        "ECC-SBE", "ECC-DBE", "XIDS", "THROTTLE", NULL};
    const msg_gpu_telemetry *g = hb->gpus.v;
    table                    t;

    table_init(&t, heads);
    for (uint32_t i = 0; i < hb->gpus.n; i++) {
        char idx[16], temp[24], pw[24], util[24], mem[24], sbe[24], dbe[24], xids[128], thr[160];

        snprintf(idx, sizeof(idx), "%d", (int)g[i].index);
        snprintf(temp, sizeof(temp), "%.0fC", g[i].temp_c);
        snprintf(pw, sizeof(pw), "%.0fW", g[i].power_w);
        snprintf(util, sizeof(util), "%.0f%%", g[i].util_pct);
        fmt_mib(mem, sizeof(mem), g[i].mem_used_mb);
        snprintf(sbe, sizeof(sbe), "%" PRIu64, g[i].ecc_sbe);
        snprintf(dbe, sizeof(dbe), "%" PRIu64, g[i].ecc_dbe);
        join_ints(xids, sizeof(xids), &g[i].xids);
        join_throttle(thr, sizeof(thr), &g[i].throttle);
        table_add(&t, (const char *const[]){idx, enum_of(&msg_gpu_telemetry_desc,
                                                         MSG_GPU_TELEMETRY__STATE, g[i].state),
                                            temp, pw, util, mem, sbe, dbe, xids, thr});
    }
    section(2, "GPUs", hb->gpus.n == 0);
    if (hb->gpus.n)
        table_print(&t, stdout, 4);
    table_free(&t);
}

static void
telemetry_attempts(const msg_heartbeat *hb)
{
    static const char *const heads[] = {"JOB", "ATTEMPT", "STATE", "GPU-TIME", "ENERGY", NULL};
    const msg_attempt_usage *a = hb->attempts.v;
    table                    t;

    section(2, "Attempts", hb->attempts.n == 0);
    if (hb->attempts.n == 0)
        return;
    table_init(&t, heads);
    for (uint32_t i = 0; i < hb->attempts.n; i++) {
        char num[16], gpu[32], energy[32];

        snprintf(num, sizeof(num), "%u", a[i].attempt);
        fmt_duration(gpu, sizeof(gpu), a[i].gpu_ms / 1000);
        fmt_energy(energy, sizeof(energy), a[i].energy_mj);
        table_add(&t, (const char *const[]){a[i].job_id, num,
                                            GP_HAS(&a[i], MSG_ATTEMPT_USAGE__STATE)
                                                ? enum_of(&msg_attempt_usage_desc,
                                                          MSG_ATTEMPT_USAGE__STATE, a[i].state)
                                                : "-",
                                            gpu, energy});
    }
    table_print(&t, stdout, 4);
    table_free(&t);
}

static void
node_telemetry(const gpctl *c, const msg_node *n)
{
    const msg_heartbeat *hb = &n->telemetry;
    char                 sent[96], up[32];

    if (!GP_HAS(n, MSG_NODE__TELEMETRY) && hb->seq == 0 && hb->sent_ms == 0) {
        kv(0, "Telemetry", "<none: no heartbeat yet>");
        return;
    }
    section(0, "Telemetry", false);
    when(c, sent, sizeof(sent), hb->sent_ms);
    fmt_duration(up, sizeof(up), hb->uptime_s);
    kv(2, "Heartbeat", "seq %" PRIu64 ", sent %s", hb->seq, sent);
    kv(2, "Agent Uptime", "%s", up);
    kv(2, "Disk", "%s", GP_HAS(hb, MSG_HEARTBEAT__DISK)
                            ? enum_of(&msg_heartbeat_desc, MSG_HEARTBEAT__DISK, hb->disk) : "-");
    kv(2, "Uplink RTT", "%.1f ms", hb->uplink_rtt_ms);
    telemetry_gpus(hb);
    telemetry_attempts(hb);
}

static void
print_node(const gpctl *c, const msg_node *n)
{
    char seen[96], reg[96], mem[24], models[128];

    when(c, seen, sizeof(seen), n->last_seen_ms);
    when(c, reg, sizeof(reg), n->registered_ms);
    fmt_mib(mem, sizeof(mem), n->mem_mb);
    node_models(n, models, sizeof(models));
    kv(0, "Name", "%s", n->id);
    kv(0, "Site", "%s", n->site);
    kv(0, "Region", "%s", or_dash(n->region));
    kv(0, "State", "%s", enum_of(&msg_node_desc, MSG_NODE__STATE, n->state));
    kv(0, "Last Seen", "%s", seen);
    kv(0, "Registered", "%s", reg);
    section(0, "Hardware", false);
    kv(2, "Hostname", "%s", or_dash(n->hostname));
    kv(2, "Agent Version", "%s", or_dash(n->agent_version));
    kv(2, "CPU Cores", "%u", n->cpu_cores);
    kv(2, "Memory", "%s", mem);
    kv(2, "GPUs", "%s", models);
    node_gpus(n);
    node_telemetry(c, n);
}

/* ---- site --------------------------------------------------------------------------- */

static void
site_prices(const msg_site *s)
{
    static const char *const heads[] = {"FROM", "PRICE/KWH", NULL};
    const msg_power_price   *p = s->power_prices.v;
    table                    t;

    section(0, "Power Prices", s->power_prices.n == 0);
    if (s->power_prices.n == 0)
        return;
    table_init(&t, heads);
    for (uint32_t i = 0; i < s->power_prices.n; i++) {
        char from[16], price[48];

        fmt_hhmm(from, sizeof(from), p[i].start_min);
        fmt_micros(price, sizeof(price) - 8, p[i].price_micros_per_kwh);
        snprintf(price + strlen(price), 8, " %s", s->currency);
        table_add(&t, (const char *const[]){from, price});
    }
    table_print(&t, stdout, 2);
    table_free(&t);
}

static void
print_site(const msg_site *s)
{
    static const char *const tiers[] = {"metro edge", "regional", "remote", "satellite/cellular"};
    char                     tz[16];

    fmt_utc_offset(tz, sizeof(tz), s->timezone_min);
    kv(0, "Name", "%s", s->id);
    kv(0, "Tenant", "%s", s->tenant);
    kv(0, "Region", "%s", s->region);
    kv(0, "Location", "%.4f, %.4f", s->lat, s->lon);
    kv(0, "Address", "%s", or_dash(s->address));
    kv(0, "Timezone", "%s", tz);
    kv(0, "Latency Tier", "%d (%s)", (int)s->latency_tier,
       s->latency_tier >= 0 && s->latency_tier < 4 ? tiers[s->latency_tier] : "?");
    if (s->uplink_rtt_ms > 0)
        kv(0, "Uplink RTT", "%.1f ms", s->uplink_rtt_ms);
    else
        kv(0, "Uplink RTT", "-");
    kv(0, "PUE", "%.3f", s->pue_milli / 1000.0);
    kv(0, "Currency", "%s", or_dash(s->currency));
    kv(0, "Nodes", "%u (%u GPUs)", s->nodes, s->gpus);
    kv(0, "Notes", "%s", or_dash(s->notes));
    site_prices(s);
}

typedef struct site_nodes {
    const gpctl *c;
    table        t;
} site_nodes;

static int
site_node_row(void *arg, const void *item)
{
    site_nodes     *sn = arg;
    const msg_node *n = item;
    char            gpus[16], models[128], seen[32];

    snprintf(gpus, sizeof(gpus), "%u", n->gpus.n);
    node_models(n, models, sizeof(models));
    fmt_age(seen, sizeof(seen), sn->c->now_ms, n->last_seen_ms);
    return table_add(&sn->t, (const char *const[]){n->id, enum_of(&msg_node_desc, MSG_NODE__STATE,
                                                                  n->state),
                                                   gpus, models, seen, or_dash(n->hostname)})
               ? GPCTL_FAIL : GPCTL_OK;
}

static int
print_site_nodes(gpctl *c, const msg_site *s)
{
    static const char *const heads[] = {"NAME", "STATE", "GPUS", "MODELS", "LAST-SEEN",
                                        "HOSTNAME", NULL};
    site_nodes       sn = {.c = c};
    msg_list_request f = {0};
    int              rc;

    snprintf(f.site, sizeof(f.site), "%s", s->id);
    table_init(&sn.t, heads);
    rc = ctl_list(c, entity_find("node"), &f, site_node_row, &sn);
    if (rc == GPCTL_OK) {
        section(0, "Node List", sn.t.nrows == 0);
        if (sn.t.nrows)
            table_print(&sn.t, stdout, 2);
    }
    table_free(&sn.t);
    return rc;
}

/* ---- job ---------------------------------------------------------------------------------- */

/* "a, b, c" of a string list, or "-". */
static void
join_strs(char *buf, size_t n, const gp_arr *a, size_t es)
{
    size_t used = 0;

    snprintf(buf, n, "-");
    for (uint32_t i = 0; i < a->n && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "",
                                 (const char *)a->v + i * es);
}

static void
spec_where(const msg_job_spec *s)
{
    char models[8 * 34 + 8];

    join_strs(models, sizeof(models), &s->gpu_models, MSG_JOB_SPEC_GPU_MODELS_ITEM_MAXLEN + 1);
    kv(2, "GPU Models", "%s", s->gpu_models.n ? models : "any");
    if (s->min_vram_mb)
        kv(2, "Min VRAM", "%u MiB", s->min_vram_mb);
    kv(2, "Pool", "%s", or_dash(s->pool));
    kv(2, "Product", "%s", or_dash(s->product));
    if (GP_HAS(s, MSG_JOB_SPEC__ORIGIN_LAT) || GP_HAS(s, MSG_JOB_SPEC__ORIGIN_LON))
        kv(2, "Origin", "%.4f, %.4f", s->origin_lat, s->origin_lon);
    if (s->max_latency_ms)
        kv(2, "Max Latency", "%u ms", s->max_latency_ms);
}

static void
spec_limits(const msg_job_spec *s)
{
    char price[48], run[32];

    kv(2, "Priority", "%d", GP_HAS(s, MSG_JOB_SPEC__PRIORITY) ? (int)s->priority : 100);
    kv(2, "Interruptible", "%s", s->interruptible ? "yes" : "no");
    fmt_duration(run, sizeof(run), s->checkpoint_interval_s);
    kv(2, "Checkpoints", "%s", s->checkpoint_interval_s ? run : "never");
    if (GP_HAS(s, MSG_JOB_SPEC__MAX_PRICE_MICROS_PER_GPU_HOUR)) {
        fmt_micros(price, sizeof(price), s->max_price_micros_per_gpu_hour);
        kv(2, "Max Price", "%s %s per GPU-hour", price, s->currency);
    }
    kv(2, "Max Attempts", "%u", s->max_attempts ? s->max_attempts : 3);
    fmt_duration(run, sizeof(run), s->max_run_s);
    kv(2, "Max Run", "%s", s->max_run_s ? run : "until cancelled");
    kv(2, "Request ID", "%s", or_dash(s->client_request_id));
}

static void
job_spec(const msg_job *j)
{
    const msg_job_spec *s = &j->spec;
    char                gpus[32], env[1024];

    section(0, "Spec", false);
    kv(2, "Name", "%s", or_dash(s->name));
    kv(2, "Kind", "%s", enum_text(&msg_job_spec_desc, MSG_JOB_SPEC__KIND, s->kind));
    if (s->image[0] != '\0')
        kv(2, "Image", "%s", s->image);
    kv(2, "Command", "%s", s->command);
    if (s->ports.n > 0) {
        char ports[256] = "";

        for (uint32_t i = 0; i < s->ports.n; i++) {
            const msg_port *p = (const msg_port *)s->ports.v + i;
            size_t          k = strlen(ports);

            snprintf(ports + k, sizeof(ports) - k, "%s%s:%u/%s", i ? " " : "", p->name,
                     (unsigned)p->port, p->protocol[0] ? p->protocol : "tcp");
        }
        kv(2, "Ports", "%s", ports);
    }
    join_strs(env, sizeof(env), &s->env, MSG_JOB_SPEC_ENV_ITEM_MAXLEN + 1);
    kv(2, "Env", "%s", env);
    job_gpus(j, gpus, sizeof(gpus));
    kv(2, "GPUs", "%s (nodes x GPUs per node)", gpus);
    spec_where(s);
    spec_limits(s);
}

static void
job_waiting(const msg_job *j)
{
    static const char *const heads[] = {"REASON", "NODES", "MEANING", NULL};
    const msg_pending_reason *w = j->waiting.v;
    char                      why[1024];
    table                     t;

    job_why_waits(j, why, sizeof(why));
    kv(0, "Why It Waits", "%s", why);
    if (j->waiting.n == 0)
        return;
    table_init(&t, heads);
    for (uint32_t i = 0; i < j->waiting.n; i++) {
        char num[32];

        fmt_count(num, sizeof(num), w[i].nodes);
        table_add(&t, (const char *const[]){enum_text(&msg_pending_reason_desc,
                                                      MSG_PENDING_REASON__REASON, w[i].reason),
                                            num, pending_words(w[i].reason)});
    }
    table_print(&t, stdout, 2);
    table_free(&t);
}

static void
job_attempts(const msg_job *j)
{
    table t;

    section(0, "Attempts", j->attempts.n == 0);
    if (j->attempts.n == 0)
        return;
    table_init(&t, attempt_heads);
    for (uint32_t i = 0; i < j->attempts.n; i++)
        attempt_row(&t, (const msg_attempt *)j->attempts.v + i);
    table_print(&t, stdout, 2);
    table_free(&t);
}

#define JOB_EVENTS_SHOWN 20

static void
job_events(const msg_job *j)
{
    uint32_t first = j->events.n > JOB_EVENTS_SHOWN ? j->events.n - JOB_EVENTS_SHOWN : 0;

    section(0, "Events", j->events.n == 0);
    for (uint32_t i = first; i < j->events.n; i++) {
        char line[640];

        job_event_line((const msg_job_event *)j->events.v + i, line, sizeof(line));
        printf("  %s\n", line);
    }
}

/* Where the newest attempt that has endpoints is reached (a recreated
 * instance's are new: its started event names them too). */
static void
job_endpoints(const msg_job *j)
{
    const msg_attempt *a = NULL;
    char               line[600] = "";

    for (uint32_t i = 0; i < j->attempts.n; i++) {
        const msg_attempt *x = (const msg_attempt *)j->attempts.v + i;

        if (x->endpoints.n > 0 && (a == NULL || x->attempt > a->attempt))
            a = x;
    }
    if (a == NULL)
        return;
    for (uint32_t i = 0; i < a->endpoints.n; i++) {
        const msg_endpoint *e = (const msg_endpoint *)a->endpoints.v + i;
        size_t              k = strlen(line);

        snprintf(line + k, sizeof(line) - k, "%s%s=%s:%u/%s", i ? " " : "", e->name, e->host,
                 (unsigned)e->port, e->protocol[0] ? e->protocol : "tcp");
    }
    kv(0, "Endpoints", "%s (attempt %u, %s)", line, a->attempt,
       enum_text(&msg_attempt_desc, MSG_ATTEMPT__STATE, a->state));
}

static void
describe_job_print(const gpctl *c, const msg_job *j)
{
    char created[96], updated[96], ended[96], gpu[32];

    when(c, created, sizeof(created), j->created_ms);
    when(c, updated, sizeof(updated), j->updated_ms);
    when(c, ended, sizeof(ended), j->ended_ms);
    kv(0, "Job", "%s", j->id);
    kv(0, "Tenant", "%s", j->tenant);
    kv(0, "State", "%s", enum_text(&msg_job_desc, MSG_JOB__STATE, j->state));
    kv(0, "Reason", "%s", or_dash(j->reason));
    kv(0, "Created", "%s", created);
    kv(0, "Updated", "%s", updated);
    if (j->ended_ms)
        kv(0, "Ended", "%s", ended);
    if (GP_HAS(j, MSG_JOB__EXIT_CODE))
        kv(0, "Exit Code", "%d", (int)j->exit_code);
    kv(0, "Attempts Made", "%u", j->attempts_made);
    /* the retry rule: only the job's own failures use up max_attempts */
    kv(0, "Failures", "%u of %u allowed", j->failures,
       j->spec.max_attempts ? j->spec.max_attempts : 3);
    kv(0, "Platform Faults", "%u (not charged)", j->platform_faults);
    kv(0, "Preemptions", "%u (not charged)", j->preemptions);
    fmt_duration(gpu, sizeof(gpu), j->gpu_ms / 1000);
    kv(0, "GPU Time", "%s", gpu);
    job_endpoints(j);
    if (j->state == MSG_JOB_STATE_PENDING)
        job_waiting(j);
    job_spec(j);
    job_attempts(j);
    job_events(j);
}

/* ---- describe ------------------------------------------------------------------------ */

static int
describe_json(const gp_msg_desc *d, const void *obj)
{
    gp_buf b;
    gp_err rc;

    gp_buf_init(&b, 0);
    rc = d == &msg_node_desc ? node_to_json(obj, &b) : gp_msg_to_json(d, obj, &b);
    if (rc == GP_EOK)
        printf("%s\n", b.p);
    else
        fprintf(stderr, "gpctl: %s: cannot format JSON\n", gp_err_name(rc));
    gp_buf_fini(&b);
    return rc == GP_EOK ? GPCTL_OK : GPCTL_FAIL;
}

/* describe job: fetched by cmd_job.c, printed here. */
static int
describe_job(gpctl *c, int argc, char **argv)
{
    msg_job job = {0};
    int     rc = job_describe_get(c, argc, argv, &job);

    if (rc == GPCTL_OK && c->out == OUT_JSON)
        rc = describe_json(&msg_job_desc, &job);
    else if (rc == GPCTL_OK)
        describe_job_print(c, &job);
    gp_msg_clear(&msg_job_desc, &job);
    return rc;
}

static int
describe(gpctl *c, const entity *e, const char *name)
{
    void *obj = calloc(1, e->desc->size);
    int   rc = obj != NULL ? ctl_get(c, e, name, obj) : GPCTL_FAIL;

    if (rc == GPCTL_OK && c->out == OUT_JSON) {
        rc = describe_json(e->desc, obj);
    } else if (rc == GPCTL_OK && e->desc == &msg_node_desc) {
        print_node(c, obj);
    } else if (rc == GPCTL_OK) {
        print_site(obj);
        fflush(stdout);
        rc = print_site_nodes(c, obj);
    }
    if (obj != NULL)
        gp_msg_clear(e->desc, obj);
    free(obj);
    return rc;
}

int
cmd_describe(gpctl *c, int argc, char **argv)
{
    const entity *e = argc > 0 ? entity_find(argv[0]) : NULL;
    int           rc;

    if (argc < 1)
        return usage_error("describe", "missing KIND (site, node or job)");
    if (strcmp(argv[0], "job") == 0 || strcmp(argv[0], "jobs") == 0)
        return describe_job(c, argc - 1, argv + 1);
    if (strcmp(argv[0], "statement") == 0)
        return cmd_describe_statement(c, argc - 1, argv + 1);
    if (strcmp(argv[0], "alert") == 0)
        return cmd_describe_alert(c, argc - 1, argv + 1);
    if (e == NULL || (e->desc != &msg_node_desc && e->desc != &msg_site_desc))
        return usage_error("describe", "cannot describe \"%s\" (site, node or job)", argv[0]);
    if (argc < 2)
        return usage_error("describe", "missing %s NAME", e->name);
    if (argc > 2)
        return usage_error("describe", "unexpected argument \"%s\"", argv[2]);
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    return describe(c, e, argv[1]);
}
