/* cmd_get.c -- gpctl get KIND [NAME] [filters]: tables, wide tables and
 * JSON arrays of sites, nodes, gpus, pools, products and tenants (jobs
 * and attempts: cmd_job.c). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gp/limits.h"
#include "gpctl.h"

typedef struct view view;

typedef struct get_ctx {
    gpctl      *c;
    const view *v;
    const char *model;          /* gpus: only GPUs of this model */
    table       t;
    json_list   j;
    gp_buf      b;
    size_t      count;          /* rows shown */
    size_t      nodes;          /* gpus: nodes seen */
    int         json_open;
} get_ctx;

typedef void row_fn(get_ctx *g, const void *item);
typedef gp_err json_fn(get_ctx *g, const void *item);

struct view {
    const char        *kind;       /* word the user typed, plural */
    const char        *entity;     /* what is listed */
    const char *const *heads;
    const char *const *wide;
    row_fn            *row;
    json_fn           *json;
};

static void
add_row(get_ctx *g, const char *const *cells)
{
    if (table_add(&g->t, cells) != 0) {
        fprintf(stderr, "gpctl: out of memory\n");
        exit(GPCTL_FAIL);
    }
    g->count++;
}

static const char *
enum_name(const gp_msg_desc *d, int field, int32_t v)
{
    const gp_field *f = &d->fields[field];

    return v >= 0 && (uint32_t)v < f->nenums ? f->enums[v] : "?";
}

/* ---- sites -------------------------------------------------------------------- */

static const char *const site_heads[] = {"NAME", "TENANT", "REGION", "NODES", "GPUS", "RTT",
                                         "TIER", NULL};
static const char *const site_wide[] = {"NAME", "TENANT", "REGION", "NODES", "GPUS", "RTT",
                                        "TIER", "LAT", "LON", "PUE", "TZ", "POWER/KWH",
                                        "ADDRESS", NULL};

/* The power price in force now at the site's local time, or -1. */
static int64_t
price_now(const msg_site *s, int64_t now_ms)
{
    const msg_power_price *p = s->power_prices.v;
    int64_t  minute = (now_ms / 60000 + s->timezone_min) % 1440;
    int64_t  price = -1;

    minute = minute < 0 ? minute + 1440 : minute;
    for (uint32_t i = 0; i < s->power_prices.n; i++)
        if (p[i].start_min <= minute)
            price = p[i].price_micros_per_kwh;
    return price;
}

static void
site_row(get_ctx *g, const void *item)
{
    const msg_site *s = item;
    char nodes[16], gpus[16], rtt[24], tier[8], lat[24], lon[24], pue[16], tz[16], price[40];
    int64_t pn = price_now(s, g->c->now_ms);

    snprintf(nodes, sizeof(nodes), "%u", s->nodes);
    snprintf(gpus, sizeof(gpus), "%u", s->gpus);
    snprintf(rtt, sizeof(rtt), "-");
    if (s->uplink_rtt_ms > 0)
        snprintf(rtt, sizeof(rtt), "%.1fms", s->uplink_rtt_ms);
    snprintf(tier, sizeof(tier), "%d", (int)s->latency_tier);
    snprintf(lat, sizeof(lat), "%.4f", s->lat);
    snprintf(lon, sizeof(lon), "%.4f", s->lon);
    snprintf(pue, sizeof(pue), "%.2f", s->pue_milli / 1000.0);
    fmt_utc_offset(tz, sizeof(tz), s->timezone_min);
    snprintf(price, sizeof(price), "-");
    if (pn >= 0) {
        fmt_micros(price, sizeof(price) - 8, pn);
        snprintf(price + strlen(price), 8, " %s", s->currency);
    }
    if (g->c->out == OUT_WIDE)
        add_row(g, (const char *const[]){s->id, s->tenant, s->region, nodes, gpus, rtt, tier,
                                         lat, lon, pue, tz, price, s->address});
    else
        add_row(g, (const char *const[]){s->id, s->tenant, s->region, nodes, gpus, rtt, tier});
}

/* ---- nodes ---------------------------------------------------------------------- */

static const char *const node_heads[] = {"NAME", "SITE", "STATE", "GPUS", "MODELS",
                                         "LAST-SEEN", NULL};
static const char *const node_wide[] = {"NAME", "SITE", "REGION", "STATE", "GPUS", "MODELS",
                                        "LAST-SEEN", "HOSTNAME", "AGENT", "CPUS", "MEMORY",
                                        "REGISTERED", NULL};

void
node_models(const msg_node *n, char *buf, size_t len)
{
    const msg_gpu *gpu = n->gpus.v;
    const char    *models[16];
    size_t         k = 0;

    for (uint32_t i = 0; i < n->gpus.n && k < GP_NELEM(models); i++)
        models[k++] = gpu[i].model;
    fmt_models(buf, len, models, k);
}

static void
node_row(get_ctx *g, const void *item)
{
    const msg_node *n = item;
    const char     *state = enum_name(&msg_node_desc, MSG_NODE__STATE, n->state);
    char gpus[16], models[128], seen[32], cpus[16], mem[24], reg[32];

    snprintf(gpus, sizeof(gpus), "%u", n->gpus.n);
    node_models(n, models, sizeof(models));
    fmt_age(seen, sizeof(seen), g->c->now_ms, n->last_seen_ms);
    snprintf(cpus, sizeof(cpus), "%u", n->cpu_cores);
    fmt_mib(mem, sizeof(mem), n->mem_mb);
    fmt_age(reg, sizeof(reg), g->c->now_ms, n->registered_ms);
    if (g->c->out == OUT_WIDE)
        add_row(g, (const char *const[]){n->id, n->site, n->region, state, gpus, models, seen,
                                         n->hostname, n->agent_version, cpus, mem, reg});
    else
        add_row(g, (const char *const[]){n->id, n->site, state, gpus, models, seen});
}

gp_err
node_to_json(const msg_node *n, gp_buf *b)
{
    char   ts[40];
    gp_err rc = gp_msg_to_json(&msg_node_desc, n, b);

    fmt_iso8601(ts, sizeof(ts), n->last_seen_ms);
    if (rc == GP_EOK)
        rc = json_add_str(b, "last_seen", ts);
    fmt_iso8601(ts, sizeof(ts), n->registered_ms);
    if (rc == GP_EOK)
        rc = json_add_str(b, "registered", ts);
    return rc;
}

static gp_err
node_json(get_ctx *g, const void *item)
{
    return node_to_json(item, &g->b);
}

/* ---- gpus (flattened from nodes) -------------------------------------------------- */

static const char *const gpu_heads[] = {"NODE", "SITE", "INDEX", "MODEL", "VRAM", "UUID",
                                        "STATE", NULL};
static const char *const gpu_wide[] = {"NODE", "SITE", "REGION", "INDEX", "MODEL", "VRAM",
                                       "UUID", "SERIAL", "INTERCONNECT", "STATE", NULL};

static const char *
gpu_interconnect(const msg_gpu *gpu)
{
    return GP_HAS(gpu, MSG_GPU__INTERCONNECT)
               ? enum_name(&msg_gpu_desc, MSG_GPU__INTERCONNECT, gpu->interconnect) : "";
}

static bool
gpu_shown(const get_ctx *g, const msg_gpu *gpu)
{
    return g->model == NULL || strcmp(gpu->model, g->model) == 0;
}

static void
gpu_rows(get_ctx *g, const void *item)
{
    const msg_node *n = item;
    const msg_gpu  *gpu = n->gpus.v;
    const char     *state = enum_name(&msg_node_desc, MSG_NODE__STATE, n->state);

    g->nodes++;
    for (uint32_t i = 0; i < n->gpus.n; i++) {
        char idx[16], vram[24];

        if (!gpu_shown(g, &gpu[i]))
            continue;
        snprintf(idx, sizeof(idx), "%d", (int)gpu[i].index);
        fmt_mib(vram, sizeof(vram), gpu[i].vram_mb);
        if (g->c->out == OUT_WIDE)
            add_row(g, (const char *const[]){n->id, n->site, n->region, idx, gpu[i].model, vram,
                                             gpu[i].uuid, gpu[i].serial, gpu_interconnect(&gpu[i]),
                                             state});
        else
            add_row(g, (const char *const[]){n->id, n->site, idx, gpu[i].model, vram,
                                             gpu[i].uuid, state});
    }
}

static gp_err
str_field(gp_buf *b, const char *sep, const char *key, const char *val)
{
    gp_err rc = gp_buf_printf(b, "%s\"%s\":", sep, key);

    return rc == GP_EOK ? gp_buf_json_str(b, val, strlen(val)) : rc;
}

static gp_err
gpu_object(gp_buf *b, const msg_node *n, const msg_gpu *gpu)
{
    gp_err rc = str_field(b, "{", "node", n->id);

    if (rc == GP_EOK)
        rc = str_field(b, ",", "site", n->site);
    if (rc == GP_EOK)
        rc = gp_buf_printf(b, ",\"index\":%d", (int)gpu->index);
    if (rc == GP_EOK)
        rc = str_field(b, ",", "model", gpu->model);
    if (rc == GP_EOK)
        rc = gp_buf_printf(b, ",\"vram_mb\":%u", gpu->vram_mb);
    if (rc == GP_EOK)
        rc = str_field(b, ",", "uuid", gpu->uuid);
    if (rc == GP_EOK)
        rc = str_field(b, ",", "serial", gpu->serial);
    if (rc == GP_EOK)
        rc = str_field(b, ",", "interconnect", gpu_interconnect(gpu));
    if (rc == GP_EOK)
        rc = str_field(b, ",", "state", enum_name(&msg_node_desc, MSG_NODE__STATE, n->state));
    return rc == GP_EOK ? gp_buf_puts(b, "}") : rc;
}

/* ---- pools, products, tenants ---------------------------------------------------- */

static const char *const pool_heads[] = {"NAME", "TENANT", "SCOPE", "WHERE", "MODELS", "SITES",
                                         "NODES", "GPUS", "HEALTHY", NULL};
static const char *const pool_wide[] = {"NAME", "TENANT", "SCOPE", "WHERE", "MODELS", "SITES",
                                        "NODES", "GPUS", "HEALTHY", "DESCRIPTION", NULL};

static void
pool_row(get_ctx *g, const void *item)
{
    const msg_pool *p = item;
    const char     *where = p->scope == MSG_POOL_SCOPE_SITE     ? p->site
                            : p->scope == MSG_POOL_SCOPE_REGION ? p->region : "*";
    size_t      es = msg_pool_desc.fields[MSG_POOL__MODELS].elem_limit + 1, used = 0;
    char models[8 * 33 + 2] = "*", sites[16], nodes[16], gpus[16], healthy[16];

    for (uint32_t i = 0; i < p->models.n && used < sizeof(models); i++)
        used += (size_t)snprintf(models + used, sizeof(models) - used, "%s%s", i ? "," : "",
                                 (const char *)p->models.v + i * es);
    snprintf(sites, sizeof(sites), "%u", p->sites);
    snprintf(nodes, sizeof(nodes), "%u", p->nodes);
    snprintf(gpus, sizeof(gpus), "%u", p->gpus_total);
    snprintf(healthy, sizeof(healthy), "%u", p->gpus_healthy);
    if (g->c->out == OUT_WIDE)
        add_row(g, (const char *const[]){p->id, p->tenant,
                                         enum_name(&msg_pool_desc, MSG_POOL__SCOPE, p->scope),
                                         where, models, sites, nodes, gpus, healthy,
                                         p->description});
    else
        add_row(g, (const char *const[]){p->id, p->tenant,
                                         enum_name(&msg_pool_desc, MSG_POOL__SCOPE, p->scope),
                                         where, models, sites, nodes, gpus, healthy});
}

static const char *const product_heads[] = {"NAME", "POOL", "MODEL", "MIN-VRAM", "PRICE/GPU-H",
                                            "SITE", NULL};
static const char *const product_wide[] = {"NAME", "POOL", "MODEL", "MIN-VRAM", "PRICE/GPU-H",
                                           "SITE", "DESCRIPTION", NULL};

static void
product_row(get_ctx *g, const void *item)
{
    const msg_product *p = item;
    char vram[24] = "-", price[48];

    if (p->min_vram_mb > 0)
        fmt_mib(vram, sizeof(vram), p->min_vram_mb);
    fmt_micros(price, sizeof(price) - 8, p->price_micros_per_gpu_hour);
    snprintf(price + strlen(price), 8, " %s", p->currency);
    add_row(g, (const char *const[]){p->id, p->pool, p->gpu_model[0] ? p->gpu_model : "*", vram,
                                     price, p->site[0] ? p->site : "*", p->description});
}

static const char *const tenant_heads[] = {"NAME", "KIND", "PARENT", "DISPLAY-NAME", "SHARE",
                                           NULL};

static void
tenant_row(get_ctx *g, const void *item)
{
    const msg_tenant *t = item;
    char              share[16];

    snprintf(share, sizeof(share), "%d.%02d%%", (int)(t->revenue_share_bp / 100),
             (int)(t->revenue_share_bp % 100));
    add_row(g, (const char *const[]){t->id,
                                     enum_name(&msg_tenant_desc, MSG_TENANT__KIND, t->kind),
                                     t->parent[0] ? t->parent : "-", t->name, share});
}

/* ---- the views -------------------------------------------------------------------- */

static const view views[] = {
    {"sites",    "site",    site_heads,    site_wide,    site_row,    NULL},
    {"nodes",    "node",    node_heads,    node_wide,    node_row,    node_json},
    {"gpus",     "node",    gpu_heads,     gpu_wide,     gpu_rows,    NULL},
    {"pools",    "pool",    pool_heads,    pool_wide,    pool_row,    NULL},
    {"products", "product", product_heads, product_wide, product_row, NULL},
    {"tenants",  "tenant",  tenant_heads,  tenant_heads, tenant_row,  NULL},
};

static const view *
view_find(const char *word)
{
    const entity *e;

    if (strcmp(word, "gpus") == 0 || strcmp(word, "gpu") == 0)
        return &views[2];
    e = entity_find(word);
    for (size_t i = 0; e != NULL && i < GP_NELEM(views); i++)
        if (strcmp(views[i].kind, e->plural) == 0)
            return &views[i];
    return NULL;
}

static void
json_emit(get_ctx *g)
{
    if (!g->json_open)
        json_list_begin(&g->j, stdout), g->json_open = 1;
    json_list_item(&g->j, g->b.p, g->b.n);
    gp_buf_reset(&g->b);
    g->count++;
}

static int
json_item(get_ctx *g, const void *item)
{
    const msg_node *n = item;
    gp_err          rc = GP_EOK;

    if (g->v->row != gpu_rows) {
        rc = g->v->json ? g->v->json(g, item)
                        : gp_msg_to_json(entity_find(g->v->entity)->desc, item, &g->b);
        if (rc == GP_EOK)
            json_emit(g);
    }
    for (uint32_t i = 0; g->v->row == gpu_rows && i < n->gpus.n && rc == GP_EOK; i++) {
        if (gpu_shown(g, (const msg_gpu *)n->gpus.v + i) &&
            (rc = gpu_object(&g->b, n, (const msg_gpu *)n->gpus.v + i)) == GP_EOK)
            json_emit(g);
    }
    if (g->v->row == gpu_rows)
        g->nodes++;
    if (rc != GP_EOK)
        fprintf(stderr, "gpctl: %s: cannot format JSON\n", gp_err_name(rc));
    return rc == GP_EOK ? GPCTL_OK : GPCTL_FAIL;
}

static int
on_item(void *arg, const void *item)
{
    get_ctx *g = arg;

    if (g->c->out == OUT_JSON)
        return json_item(g, item);
    g->v->row(g, item);
    return GPCTL_OK;
}

/* ---- arguments ------------------------------------------------------------------- */

typedef struct get_args {
    const view      *v;
    const char      *name;
    msg_list_request filter;
} get_args;

static int
set_filter(msg_list_request *f, const char *opt, const char *val)
{
    static const char *const names[] = {"site", "region", "tenant", "state", "model"};
    char err[GP_ERRBUF_LEN];

    for (size_t i = 0; i < GP_NELEM(names); i++) {
        if (strcmp(opt + 2, names[i]) != 0)
            continue;
        if (gp_msg_set_text(&msg_list_request_desc, f, names[i], val, err, sizeof(err)) != GP_EOK)
            return usage_error("get", "%s %s: %s", opt, val, err);
        return GPCTL_OK;
    }
    return usage_error("get", "unknown option %s", opt);
}

static int
check_state(const char *state)
{
    for (int i = 0; i < (int)GP_NELEM(msg_node_state_names); i++)
        if (strcmp(state, msg_node_state_names[i]) == 0)
            return GPCTL_OK;
    return usage_error("get", "--state %s: expected unknown, healthy, suspect, lost, draining, "
                       "cordoned or quarantined", state);
}

static int
parse_get(int argc, char **argv, get_args *a)
{
    int rc = GPCTL_OK;

    memset(a, 0, sizeof(*a));
    if (argc < 1)
        return usage_error("get", "missing KIND (sites, nodes, gpus, pools, products, tenants, jobs, "
                           "attempts)");
    a->v = view_find(argv[0]);
    if (a->v == NULL)
        return usage_error("get", "unknown KIND \"%s\"", argv[0]);
    for (int i = 1; i < argc && rc == GPCTL_OK; i++) {
        if (strncmp(argv[i], "--", 2) == 0 && i + 1 < argc)
            rc = set_filter(&a->filter, argv[i], argv[i + 1]), i++;
        else if (argv[i][0] == '-')
            rc = usage_error("get", "unknown option or missing value: %s", argv[i]);
        else if (a->name == NULL)
            a->name = argv[i];
        else
            rc = usage_error("get", "unexpected argument \"%s\"", argv[i]);
    }
    if (rc == GPCTL_OK && a->filter.state[0] != '\0')
        rc = check_state(a->filter.state);
    return rc;
}

/* ---- get ---------------------------------------------------------------------------- */

static int
get_one(get_ctx *g, const entity *e, const char *name)
{
    void *obj = calloc(1, e->desc->size);
    int   rc = obj ? ctl_get(g->c, e, name, obj) : GPCTL_FAIL;

    if (rc == GPCTL_OK)
        rc = on_item(g, obj);
    if (obj != NULL)
        gp_msg_clear(e->desc, obj);
    free(obj);
    return rc;
}

static void
finish(get_ctx *g)
{
    if (g->c->out == OUT_JSON) {
        if (!g->json_open)
            json_list_begin(&g->j, stdout);
        json_list_end(&g->j);
        return;
    }
    if (g->count == 0) {
        fprintf(stderr, "No %s found.\n", g->v->kind);
        return;
    }
    table_print(&g->t, stdout, 0);
    fflush(stdout);
    if (g->v->row == gpu_rows)
        fprintf(stderr, "%zu GPUs on %zu nodes\n", g->count, g->nodes);
    else
        fprintf(stderr, "%zu %s\n", g->count, g->count == 1 ? g->v->entity : g->v->kind);
}

int
cmd_get(gpctl *c, int argc, char **argv)
{
    get_args      a;
    get_ctx       g = {.c = c};
    const entity *e;
    int           rc;

    if (argc > 0 && (strcmp(argv[0], "jobs") == 0 || strcmp(argv[0], "job") == 0))
        return cmd_get_jobs(c, argc - 1, argv + 1);
    if (argc > 0 && (strcmp(argv[0], "attempts") == 0 || strcmp(argv[0], "attempt") == 0))
        return cmd_get_attempts(c, argc - 1, argv + 1);
    if (argc > 0 && strcmp(argv[0], "usage") == 0)
        return cmd_get_usage(c, argc - 1, argv + 1);
    if (argc > 0 && (strcmp(argv[0], "statements") == 0 || strcmp(argv[0], "statement") == 0))
        return cmd_get_statements(c, argc - 1, argv + 1);
    if (argc > 0 && (strcmp(argv[0], "balances") == 0 || strcmp(argv[0], "balance") == 0))
        return cmd_get_balances(c, argc - 1, argv + 1);
    if (argc > 0 && (strcmp(argv[0], "prices") == 0 || strcmp(argv[0], "price") == 0))
        return cmd_get_prices(c, argc - 1, argv + 1);
    if (argc > 0 && (strcmp(argv[0], "alerts") == 0 || strcmp(argv[0], "alert") == 0))
        return cmd_get_alerts(c, argc - 1, argv + 1);
    if (argc > 0 && (strcmp(argv[0], "silences") == 0 || strcmp(argv[0], "silence") == 0))
        return cmd_get_silences(c, argc - 1, argv + 1);
    if (argc > 0 && (strcmp(argv[0], "secrets") == 0 || strcmp(argv[0], "secret") == 0))
        return cmd_get_secrets(c, argc - 1, argv + 1);
    rc = parse_get(argc, argv, &a);

    if (rc != GPCTL_OK || (rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    e = entity_find(a.v->entity);
    g.v = a.v;
    g.model = a.v->row == gpu_rows && a.filter.model[0] ? a.filter.model : NULL;
    table_init(&g.t, c->out == OUT_WIDE ? a.v->wide : a.v->heads);
    gp_buf_init(&g.b, 0);
    if (a.name != NULL)
        rc = get_one(&g, e, a.name);
    else
        rc = ctl_list(c, e, &a.filter, on_item, &g);
    if (rc == GPCTL_OK)
        finish(&g);
    else if (g.json_open)
        json_list_end(&g.j);
    table_free(&g.t);
    gp_buf_fini(&g.b);
    return rc;
}
