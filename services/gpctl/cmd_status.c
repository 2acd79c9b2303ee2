/* cmd_status.c -- gpctl health [SERVICE...] and gpctl summary. */
#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gp/limits.h"
#include "gpctl.h"
#include "jobview.h"

/* ---- health ----------------------------------------------------------------------- */

static const char *const default_services[] = {"registry"};

typedef struct health_ctx {
    gpctl    *c;
    table     t;
    json_list j;
    gp_buf    b;
    int       rc;            /* worst exit code so far */
} health_ctx;

static const char *
dep(int field, int32_t v)
{
    const gp_field *f = &msg_health_desc.fields[field];

    return v >= 0 && (uint32_t)v < f->nenums ? f->enums[v] : "?";
}

/* "ok" or "degraded: redis down, pg down". */
static void
health_status(const msg_health *h, char *buf, size_t n)
{
    static const int fields[] = {MSG_HEALTH__NATS, MSG_HEALTH__REDIS, MSG_HEALTH__PG};
    const int32_t    vals[] = {h->nats, h->redis, h->pg};
    size_t           used = 0;

    snprintf(buf, n, "ok");
    for (size_t i = 0; i < GP_NELEM(fields); i++) {
        if (strcmp(dep(fields[i], vals[i]), "down") != 0)
            continue;
        used += (size_t)snprintf(buf + used, n - used, "%s%s down", used ? ", " : "degraded: ",
                                 msg_health_desc.fields[fields[i]].name);
        if (used >= n)
            break;
    }
}

static void
health_row_ok(health_ctx *hc, const msg_health *h)
{
    char up[32], status[96];

    fmt_duration(up, sizeof(up), h->uptime_s);
    health_status(h, status, sizeof(status));
    if (strcmp(status, "ok") != 0 && hc->rc == GPCTL_OK)
        hc->rc = GPCTL_FAIL;
    if (hc->c->out == OUT_JSON) {
        gp_buf_reset(&hc->b);
        if (gp_msg_to_json(&msg_health_desc, h, &hc->b) == GP_EOK &&
            json_add_str(&hc->b, "status", status) == GP_EOK)
            json_list_item(&hc->j, hc->b.p, hc->b.n);
        return;
    }
    table_add(&hc->t, (const char *const[]){h->service, h->instance, h->version, up,
                                            dep(MSG_HEALTH__NATS, h->nats),
                                            dep(MSG_HEALTH__REDIS, h->redis),
                                            dep(MSG_HEALTH__PG, h->pg), status});
}

static void
health_row_err(health_ctx *hc, const char *svc, gp_err err, bool transport, const char *detail)
{
    char status[GP_ERRBUF_LEN + 32];
    int  code = ctl_exit_code(err, transport);

    if (err == GP_ENOROUTE)
        snprintf(status, sizeof(status), "not running (no responders)");
    else if (err == GP_ETIMEOUT)
        snprintf(status, sizeof(status), "no reply within %u ms", hc->c->timeout_ms);
    else
        snprintf(status, sizeof(status), "%s: %s", gp_err_name(err), detail);
    if (code > hc->rc)
        hc->rc = code;
    if (hc->c->out == OUT_JSON) {
        gp_buf_reset(&hc->b);
        gp_buf_puts(&hc->b, "{}");
        json_add_str(&hc->b, "service", svc);
        json_add_str(&hc->b, "error", gp_err_name(err));
        json_add_str(&hc->b, "status", status);
        json_list_item(&hc->j, hc->b.p, hc->b.n);
        return;
    }
    table_add(&hc->t, (const char *const[]){svc, "-", "-", "-", "-", "-", "-", status});
}

static void
health_one(health_ctx *hc, const char *svc)
{
    char               subject[GP_MAX_SUBJECT + 1], detail[GP_ERRBUF_LEN];
    msg_health_request req = {0};
    msg_health         h = {0};
    bool               transport;
    gp_err             err;

    if (gp_op_subjectf(GP_OP_HEALTH, subject, sizeof(subject), svc) != GP_EOK) {
        health_row_err(hc, svc, GP_EINVAL, false, "not a service name");
        return;
    }
    err = ctl_call_raw(hc->c, subject, &msg_health_request_desc, &req, &msg_health_desc, &h,
                       detail, sizeof(detail), &transport);
    if (err == GP_EOK)
        health_row_ok(hc, &h);
    else
        health_row_err(hc, svc, err, transport, detail);
    gp_msg_clear(&msg_health_desc, &h);
}

static bool
token_ok(const char *s)
{
    if (*s == '\0' || strlen(s) > GP_MAX_ID)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_')
            return false;
    return true;
}

int
cmd_health(gpctl *c, int argc, char **argv)
{
    static const char *const heads[] = {"SERVICE", "INSTANCE", "VERSION", "UPTIME", "NATS",
                                        "REDIS", "PG", "STATUS", NULL};
    health_ctx               hc = {.c = c};
    int                      rc;

    for (int i = 0; i < argc; i++)
        if (!token_ok(argv[i]))
            return usage_error("health", "\"%s\" is not a service name", argv[i]);
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    table_init(&hc.t, heads);
    gp_buf_init(&hc.b, 0);
    if (c->out == OUT_JSON)
        json_list_begin(&hc.j, stdout);
    for (int i = 0; i < (argc ? argc : (int)GP_NELEM(default_services)); i++)
        health_one(&hc, argc ? argv[i] : default_services[i]);
    if (c->out == OUT_JSON)
        json_list_end(&hc.j);
    else
        table_print(&hc.t, stdout, 0);
    table_free(&hc.t);
    gp_buf_fini(&hc.b);
    return hc.rc;
}

/* ---- summary ---------------------------------------------------------------------- */

#define NSTATES  7   /* Node.state's enum */
#define MAX_MODELS 64

typedef struct model_count {
    char     model[32];
    uint64_t by_state[NSTATES];
} model_count;

typedef struct summary {
    gpctl      *c;
    uint64_t    sites;
    uint64_t    nodes[NSTATES], nodes_total;
    uint64_t    gpus[NSTATES], gpus_total;
    model_count models[MAX_MODELS];
    size_t      nmodels;
    table       pools;
    gp_buf      pools_json;
    job_tally   jobs;
    char        jobs_why[GP_ERRBUF_LEN + 32];   /* why jobs are not shown, or "" */
} summary;

static int
count_site(void *arg, const void *item)
{
    (void)item;
    ((summary *)arg)->sites++;
    return GPCTL_OK;
}

static model_count *
model_slot(summary *s, const char *model)
{
    for (size_t i = 0; i < s->nmodels; i++)
        if (strcmp(s->models[i].model, model) == 0)
            return &s->models[i];
    if (s->nmodels == MAX_MODELS)
        return &s->models[MAX_MODELS - 1];    /* the last slot takes the overflow */
    snprintf(s->models[s->nmodels].model, sizeof(s->models[0].model), "%s", model);
    return &s->models[s->nmodels++];
}

static int
count_node(void *arg, const void *item)
{
    summary        *s = arg;
    const msg_node *n = item;
    const msg_gpu  *g = n->gpus.v;
    int             st = n->state >= 0 && n->state < NSTATES ? n->state : 0;

    s->nodes[st]++;
    s->nodes_total++;
    for (uint32_t i = 0; i < n->gpus.n; i++) {
        model_slot(s, g[i].model[0] ? g[i].model : "?")->by_state[st]++;
        s->gpus[st]++;
        s->gpus_total++;
    }
    return GPCTL_OK;
}

static int
add_pool(void *arg, const void *item)
{
    summary        *s = arg;
    const msg_pool *p = item;
    const char     *scope = msg_pool_scope_names[p->scope >= 0 && p->scope < 3 ? p->scope : 0];
    char            total[16], healthy[16], pct[16];

    snprintf(total, sizeof(total), "%u", p->gpus_total);
    snprintf(healthy, sizeof(healthy), "%u", p->gpus_healthy);
    snprintf(pct, sizeof(pct), "%.0f%%",
             p->gpus_total ? 100.0 * p->gpus_healthy / p->gpus_total : 0.0);
    if (s->c->out == OUT_JSON) {
        gp_buf_printf(&s->pools_json, "%s{\"id\":", s->pools_json.n ? "," : "");
        gp_buf_json_str(&s->pools_json, p->id, strlen(p->id));
        gp_buf_printf(&s->pools_json, ",\"scope\":\"%s\",\"gpus_total\":%u,\"gpus_healthy\":%u}",
                      scope, p->gpus_total, p->gpus_healthy);
        return GPCTL_OK;
    }
    return table_add(&s->pools, (const char *const[]){p->id, scope, total, healthy, pct})
               ? GPCTL_FAIL : GPCTL_OK;
}

static uint64_t
model_total(const model_count *m)
{
    uint64_t total = 0;

    for (int k = 0; k < NSTATES; k++)
        total += m->by_state[k];
    return total;
}

static void
summary_states_json(const uint64_t *v)
{
    for (int i = 0; i < NSTATES; i++)
        printf("%s\"%s\":%" PRIu64, i ? "," : "", msg_node_state_names[i], v[i]);
}

static void
print_json_str(const char *str)
{
    gp_buf b;

    gp_buf_init(&b, 0);
    if (gp_buf_json_str(&b, str, strlen(str)) == GP_EOK)
        fputs(b.p, stdout);
    gp_buf_fini(&b);
}

static int
count_job(void *arg, const msg_job *j)
{
    job_tally_add(&((summary *)arg)->jobs, j);
    return GPCTL_OK;
}

/* Jobs by state, counted from every page of gp.admin.job.list: the
 * contract has no count operation, and a page is at most 100 jobs without
 * attempts or events.  A missing scheduler is said, not an error. */
static void
count_jobs(summary *s)
{
    msg_job_list_request all = {0};

    if (job_list(s->c, NULL, &all, count_job, s, s->jobs_why, sizeof(s->jobs_why)) ==
        GPCTL_OK)
        s->jobs_why[0] = '\0';
    else if (s->jobs_why[0] == '\0')
        snprintf(s->jobs_why, sizeof(s->jobs_why), "cannot list jobs");
}

static void
summary_jobs_json(const summary *s)
{
    uint64_t healthy = s->gpus[MSG_NODE_STATE_HEALTHY];

    if (s->jobs_why[0] != '\0') {
        printf(",\"jobs\":null,\"jobs_error\":");
        print_json_str(s->jobs_why);
        return;
    }
    printf(",\"jobs\":{\"total\":%" PRIu64, s->jobs.total);
    for (int i = 0; i < JOB_NSTATES; i++)
        printf(",\"%s\":%" PRIu64, msg_job_state_names[i], s->jobs.by_state[i]);
    printf("},\"gpu_utilization\":{\"booked\":%" PRIu64 ",\"healthy\":%" PRIu64
           ",\"pct\":%.1f}", s->jobs.gpus_booked, healthy,
           job_util_pct(s->jobs.gpus_booked, healthy));
}

static void
summary_jobs(const summary *s)
{
    static const char *const heads[] = {"STATE", "JOBS", NULL};
    uint64_t                 healthy = s->gpus[MSG_NODE_STATE_HEALTHY];
    table                    t;

    if (s->jobs_why[0] != '\0') {
        printf("\nJobs:  <unavailable: %s>\n", s->jobs_why);
        return;
    }
    printf("\nJobs:   %" PRIu64 "\n", s->jobs.total);
    table_init(&t, heads);
    for (int i = 0; i < JOB_NSTATES; i++) {
        char num[24];

        snprintf(num, sizeof(num), "%" PRIu64, s->jobs.by_state[i]);
        table_add(&t, (const char *const[]){msg_job_state_names[i], num});
    }
    table_print(&t, stdout, 2);
    table_free(&t);
    printf("\nGPU utilization:  %.1f%%  (%" PRIu64 " GPUs booked by starting and running jobs"
           " / %" PRIu64 " GPUs on healthy nodes)\n",
           job_util_pct(s->jobs.gpus_booked, healthy), s->jobs.gpus_booked, healthy);
}

static void
summary_json(const summary *s)
{
    printf("{\"sites\":%" PRIu64 ",\"nodes\":{\"total\":%" PRIu64 ",", s->sites, s->nodes_total);
    summary_states_json(s->nodes);
    printf("},\"gpus\":{\"total\":%" PRIu64 ",", s->gpus_total);
    summary_states_json(s->gpus);
    printf(",\"by_model\":{");
    for (size_t i = 0; i < s->nmodels; i++) {
        fputs(i ? "," : "", stdout);
        print_json_str(s->models[i].model);
        printf(":{\"total\":%" PRIu64 ",", model_total(&s->models[i]));
        summary_states_json(s->models[i].by_state);
        printf("}");
    }
    printf("}},\"pools\":[%s]", s->pools_json.n ? s->pools_json.p : "");
    summary_jobs_json(s);
    printf("}\n");
}

static void
summary_models(const summary *s)
{
    static const char *const heads[] = {"MODEL", "GPUS", "HEALTHY", "SUSPECT", "LOST",
                                        "DRAINING", "CORDONED", "QUARANTINED", "UNKNOWN", NULL};
    static const int         order[] = {MSG_NODE_STATE_HEALTHY, MSG_NODE_STATE_SUSPECT,
                                        MSG_NODE_STATE_LOST, MSG_NODE_STATE_DRAINING,
                                        MSG_NODE_STATE_CORDONED, MSG_NODE_STATE_QUARANTINED,
                                        MSG_NODE_STATE_UNKNOWN};
    table                    t;

    table_init(&t, heads);
    for (size_t i = 0; i < s->nmodels; i++) {
        char num[NSTATES + 1][24];

        for (int k = 0; k < NSTATES; k++)
            snprintf(num[k + 1], sizeof(num[0]), "%" PRIu64, s->models[i].by_state[order[k]]);
        snprintf(num[0], sizeof(num[0]), "%" PRIu64, model_total(&s->models[i]));
        table_add(&t, (const char *const[]){s->models[i].model, num[0], num[1], num[2], num[3],
                                            num[4], num[5], num[6], num[7]});
    }
    if (t.nrows) {
        printf("\nGPUs by model and node state:\n");
        table_print(&t, stdout, 2);
    }
    table_free(&t);
}

static void
summary_text(const summary *s)
{
    printf("Sites:  %" PRIu64 "\n", s->sites);
    printf("Nodes:  %" PRIu64 "  (healthy %" PRIu64 ", suspect %" PRIu64 ", lost %" PRIu64
           ", draining %" PRIu64 ", cordoned %" PRIu64 ", quarantined %" PRIu64
           ", unknown %" PRIu64 ")\n", s->nodes_total,
           s->nodes[MSG_NODE_STATE_HEALTHY], s->nodes[MSG_NODE_STATE_SUSPECT],
           s->nodes[MSG_NODE_STATE_LOST], s->nodes[MSG_NODE_STATE_DRAINING],
           s->nodes[MSG_NODE_STATE_CORDONED], s->nodes[MSG_NODE_STATE_QUARANTINED],
           s->nodes[MSG_NODE_STATE_UNKNOWN]);
    printf("GPUs:   %" PRIu64 "  (on healthy nodes %" PRIu64 ")\n", s->gpus_total,
           s->gpus[MSG_NODE_STATE_HEALTHY]);
    summary_models(s);
    printf("\nPools:%s\n", s->pools.nrows ? "" : "  <none>");
    if (s->pools.nrows)
        table_print(&s->pools, stdout, 2);
    summary_jobs(s);
}

int
cmd_summary(gpctl *c, int argc, char **argv)
{
    static const char *const pool_heads[] = {"POOL", "SCOPE", "GPUS", "HEALTHY", "HEALTHY%",
                                             NULL};
    msg_list_request         all = {0};
    summary                 *s;
    int                      rc;

    if (argc > 0)
        return usage_error("summary", "unexpected argument \"%s\"", argv[0]);
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    if ((s = calloc(1, sizeof(*s))) == NULL)
        return GPCTL_FAIL;
    s->c = c;
    table_init(&s->pools, pool_heads);
    gp_buf_init(&s->pools_json, 0);
    rc = ctl_list(c, entity_find("site"), &all, count_site, s);
    if (rc == GPCTL_OK)
        rc = ctl_list(c, entity_find("node"), &all, count_node, s);
    if (rc == GPCTL_OK)
        rc = ctl_list(c, entity_find("pool"), &all, add_pool, s);
    if (rc == GPCTL_OK)
        count_jobs(s);
    if (rc == GPCTL_OK && c->out == OUT_JSON)
        summary_json(s);
    else if (rc == GPCTL_OK)
        summary_text(s);
    table_free(&s->pools);
    gp_buf_fini(&s->pools_json);
    free(s);
    return rc;
}
