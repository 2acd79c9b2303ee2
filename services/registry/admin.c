/* admin.c -- create, update, get, delete and list for tenants, sites,
 * pools and products over gp.admin.<entity>.<verb>.
 *
 * One generic implementation walks a column map per entity (gp/dbrow.h):
 * which message field is which column, how a parameter is written into
 * it and how it is read back.  Rows come back as text and are set into
 * the reply with gp_msg_set_text, so the codec's checks apply to what the
 * database returns as well. */
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/dbrow.h"
#include "gp/kvfan.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "registry.h"
#include "scripts.h"

#define COL_KEY      GP_DBCOL_KEY
#define COL_RO       GP_DBCOL_RO
#define COL_NULL     0          /* empty string is SQL NULL (by the cast) */

typedef gp_dbcol col;

static gp_dbcol_text_fn prices_text;
static gp_dbcol_set_fn  set_prices;

/* Site.power_prices travels as "0,420;180000,250000" in one parameter and
 * lands in two array columns. */
#define PRICES_CAST                                                                            \
    "coalesce(string_to_array(NULLIF(split_part($%1$d, ';', 1), ''), ',')::int[], '{}'), "     \
    "coalesce(string_to_array(NULLIF(split_part($%1$d, ';', 2), ''), ',')::bigint[], '{}')"

typedef struct entity {
    const char        *name;
    const char        *table;
    const gp_msg_desc *desc;
    const gp_msg_desc *list_desc;
    const col         *cols;
    const char        *filters[4];   /* ListRequest fields that are columns of the table */
} entity;

static const col tenant_cols[] = {
    {"id", "id", "id", "$%d", COL_KEY},
    {"parent", "coalesce(parent,'')", "parent", "NULLIF($%d,'')", COL_NULL},
    {"kind", "kind", "kind", "$%d", 0},
    {"name", "name", "name", "$%d", 0},
    {"revenue_share_bp", "revenue_share_bp", "revenue_share_bp", "$%d::int", 0},
    {"fair_share_weight", "fair_share_weight", "fair_share_weight", "$%d::int", 0},
    {NULL, NULL, NULL, NULL, 0, NULL, NULL},
};

static const col site_cols[] = {
    {"id", "id", "id", "$%d", COL_KEY},
    {"tenant", "tenant", "tenant", "$%d", 0},
    {"region", "region", "region", "$%d", 0},
    {"lat", "lat", "lat", "$%d::float8", 0},
    {"lon", "lon", "lon", "$%d::float8", 0},
    {"latency_tier", "latency_tier", "latency_tier", "$%d::int", 0},
    {"pue_milli", "pue_milli", "pue_milli", "$%d::int", 0},
    {"currency", "currency", "currency", "$%d", 0},
    {"power_prices", "array_to_string(power_start_min,',') || ';' || array_to_string(power_price_micros,',')",
     "power_start_min, power_price_micros", PRICES_CAST, 0, prices_text, set_prices},
    {"address", "address", "address", "$%d", 0},
    {"notes", "notes", "notes", "$%d", 0},
    {"timezone_min", "timezone_min", "timezone_min", "$%d::int", 0},
    {"nodes", "(SELECT count(*) FROM nodes n WHERE n.site = t.id)", NULL, NULL, COL_RO},
    /* per node through gpus' primary key: never a plan that scans every
     * GPU once per site (chosen on stale statistics after a fleet
     * registered, 39 s for a page of 1,000 sites) */
    {"gpus", "(SELECT coalesce(sum((SELECT count(*) FROM gpus g WHERE g.node = n.id)), 0)"
             " FROM nodes n WHERE n.site = t.id)", NULL, NULL, COL_RO},
    {"rev", "rev", NULL, NULL, COL_RO},       /* migration 5's trigger writes it */
    {NULL, NULL, NULL, NULL, 0, NULL, NULL},
};

static const col pool_cols[] = {
    {"id", "id", "id", "$%d", COL_KEY},
    {"tenant", "tenant", "tenant", "$%d", 0},
    {"scope", "scope", "scope", "$%d", 0},
    {"region", "coalesce(region,'')", "region", "NULLIF($%d,'')", COL_NULL},
    {"site", "coalesce(site,'')", "site", "NULLIF($%d,'')", COL_NULL},
    {"models", "array_to_string(models, ',')", "models", "string_to_array(NULLIF($%d,''), ',')", 0},
    {"description", "description", "description", "$%d", 0},
    {"sites", "(SELECT count(DISTINCT site) FROM pool_gpus pg WHERE pg.pool = t.id)", NULL, NULL, COL_RO},
    {"nodes", "(SELECT count(DISTINCT node) FROM pool_gpus pg WHERE pg.pool = t.id)", NULL, NULL, COL_RO},
    {"gpus_total", "(SELECT count(*) FROM pool_gpus pg WHERE pg.pool = t.id)", NULL, NULL, COL_RO},
    {"gpus_healthy", "(SELECT count(*) FROM pool_gpus pg WHERE pg.pool = t.id AND pg.state = 'healthy')",
     NULL, NULL, COL_RO},
    {NULL, NULL, NULL, NULL, 0, NULL, NULL},
};

static const col product_cols[] = {
    {"id", "id", "id", "$%d", COL_KEY},
    {"pool", "pool", "pool", "$%d", 0},
    {"gpu_model", "gpu_model", "gpu_model", "$%d", 0},
    {"min_vram_mb", "min_vram_mb", "min_vram_mb", "$%d::int", 0},
    {"price_micros_per_gpu_hour", "price_micros_per_gpu_hour", "price_micros_per_gpu_hour", "$%d::bigint", 0},
    {"currency", "currency", "currency", "$%d", 0},
    {"site", "coalesce(site,'')", "site", "NULLIF($%d,'')", COL_NULL},
    {"description", "description", "description", "$%d", 0},
    {NULL, NULL, NULL, NULL, 0, NULL, NULL},
};

static const entity entities[] = {
    {"tenant", "tenants", &msg_tenant_desc, &msg_tenant_list_desc, tenant_cols, {"tenant:parent"}},
    {"site", "sites", &msg_site_desc, &msg_site_list_desc, site_cols, {"region", "tenant"}},
    {"pool", "pools", &msg_pool_desc, &msg_pool_list_desc, pool_cols, {"tenant", "region", "site"}},
    {"product", "products", &msg_product_desc, &msg_product_list_desc, product_cols, {"site"}},
};

/* What each admin route serves: its entity and verb, handed to the
 * handler as the route's data. */
typedef struct admin_op {
    const entity *e;
    const char   *verb;
} admin_op;

#define ADMIN_OPS(i) \
    {&entities[i], "create"}, {&entities[i], "update"}, {&entities[i], "get"}, \
    {&entities[i], "delete"}, {&entities[i], "list"}

static const admin_op admin_ops[] = {ADMIN_OPS(0), ADMIN_OPS(1), ADMIN_OPS(2), ADMIN_OPS(3)};


/* ---- Site.power_prices ---------------------------------------------------------- */

static gp_err
prices_text(const gp_field *f, const void *msg, gp_buf *out)
{
    const gp_arr          *a = (const gp_arr *)((const char *)msg + f->offset);
    const msg_power_price *pp = a->v;
    gp_err                 rc = GP_EOK;

    for (uint32_t i = 0; i < a->n && rc == GP_EOK; i++)
        rc = gp_buf_printf(out, "%s%d", i ? "," : "", pp[i].start_min);
    rc = rc == GP_EOK ? gp_buf_puts(out, ";") : rc;
    for (uint32_t i = 0; i < a->n && rc == GP_EOK; i++)
        rc = gp_buf_printf(out, "%s%lld", i ? "," : "", (long long)pp[i].price_micros_per_kwh);
    return rc;
}

static size_t
count_csv(const char *s)
{
    size_t n = *s != '\0';

    for (; *s != '\0'; s++)
        n += *s == ',';
    return n;
}

static gp_err
set_prices(const gp_field *f, void *msg, const char *text)
{
    gp_arr          *a = (gp_arr *)((char *)msg + f->offset);
    const char      *semi = strchr(text, ';');
    size_t           n = count_csv(semi ? semi + 1 : "");
    msg_power_price *pp;
    const char      *s, *p;

    if (semi == NULL || n == 0 || n > f->limit)
        return semi == NULL ? GP_EINVAL : GP_EOK;
    pp = calloc(n, sizeof(*pp));
    if (pp == NULL)
        return GP_ENOMEM;
    s = text;
    p = semi + 1;
    for (size_t i = 0; i < n; i++) {
        pp[i].start_min = (int32_t)strtol(s, (char **)&s, 10);
        pp[i].price_micros_per_kwh = strtoll(p, (char **)&p, 10);
        s += *s == ',';
        p += *p == ',';
    }
    a->v = pp;
    a->n = (uint32_t)n;
    return GP_EOK;
}

/* Fills msg from one result row whose columns follow the entity map. */
static gp_err
row_to_msg(const entity *e, const PGresult *res, int row, void *msg)
{
    const gp_dbcol *bad = NULL;
    gp_err          rc = gp_dbrow_to_msg(e->desc, e->cols, res, row, msg, &bad);

    if (rc != GP_EOK) {
        int k = bad != NULL ? (int)(bad - e->cols) : 0;
        GP_ERROR("row_decode_failed", "entity=%s field=%s value=\"%s\" code=%s", e->name,
                 bad != NULL ? bad->field : "?", PQgetvalue(res, row, k), gp_err_name(rc));
    }
    return rc;
}

/* The SQL builders of this file work on gp/dbrow.h's parameters. */
typedef gp_dbparams params;

static gp_err
select_list(const entity *e, gp_buf *sql)
{
    return gp_dbrow_select(e->cols, sql);
}

static gp_err
build_write(const entity *e, const void *msg, bool update, gp_buf *sql, params *p)
{
    return gp_dbrow_write(e->table, e->desc, e->cols, msg, update, sql, p);
}

/* ---- requests ------------------------------------------------------------------ */

typedef struct op {
    const entity *e;
    gp_req       *req;
    int           limit;
    char          verb[16];
    char          id[GP_MAX_ID + 1];
} op;

static const admin_op *
admin_op_of(gp_req *req)
{
    return gp_req_data(req);
}

static const entity *
entity_of(gp_req *req)
{
    return admin_op_of(req)->e;
}

static bool
verb_is(gp_req *req, const char *verb)
{
    return strcmp(admin_op_of(req)->verb, verb) == 0;
}

/* "insert ... violates foreign key constraint "pools_site_fkey"" -> "site" */
static void
fk_column(const entity *e, const char *detail, char *out, size_t n)
{
    const char *p = strstr(detail, "constraint \"");
    size_t      tl = strlen(e->table);

    snprintf(out, n, "reference");
    if (p == NULL)
        return;
    p += 12;
    if (strncmp(p, e->table, tl) == 0 && p[tl] == '_')
        p += tl + 1;
    snprintf(out, n, "%.*s", (int)strcspn(p, "\""), p);
    if (strlen(out) > 5 && strcmp(out + strlen(out) - 5, "_fkey") == 0)
        out[strlen(out) - 5] = '\0';
}

static gp_err
db_error(op *o, gp_err err, const char *detail)
{
    char column[64];

    if (err == GP_EEXISTS)
        return gp_req_fail(o->req, err, "%s '%s' already exists", o->e->name, o->id);
    if (err == GP_ENOTFOUND && strcmp(o->verb, "delete") == 0)
        return gp_req_fail(o->req, GP_ECONFLICT, "%s '%s' is still in use: %s", o->e->name, o->id,
                           detail);
    if (err == GP_ENOTFOUND) {
        fk_column(o->e, detail, column, sizeof(column));
        return gp_req_fail(o->req, err, "%s '%s' refers to an unknown %s", o->e->name, o->id,
                           column);
    }
    return gp_req_fail(o->req, err, "%s", detail);
}

/* ---- sites: the measured uplink RTT comes from Redis ------------------------------ */

/* One HVALS per site, each reply into its own site (gp/kvfan.h). */
typedef struct rtt_fill {
    gp_req   *req;
    msg_site *sites;
} rtt_fill;

static void
rtt_read(void *arg, size_t i, const redisReply *rep, gp_err err)
{
    msg_site *s = &((rtt_fill *)arg)->sites[i];
    double    sum = 0;
    int       k = 0;

    for (size_t e = 0; err == GP_EOK && rep->type == REDIS_REPLY_ARRAY && e < rep->elements; e++) {
        double v = rep->element[e]->type == REDIS_REPLY_STRING ? atof(rep->element[e]->str) : 0;

        if (v > 0) {
            sum += v;
            k++;
        }
    }
    s->uplink_rtt_ms = k > 0 ? sum / k : 0;
}

static void
rtt_done(void *arg, const gp_kvfan *f)
{
    rtt_fill *fill = arg;

    (void)f;
    gp_req_done(fill->req, GP_EOK);
    free(fill);
}

/* Ends the request once every site has its RTT (or at once without Redis:
 * the inventory still answers, the RTT stays 0). */
static void
sites_done(gp_req *req, msg_site *sites, uint32_t n)
{
    rtt_fill *fill = malloc(sizeof(*fill));
    gp_kvfan *f = fill != NULL ? gp_kvfan_new(gp_app_kv(gp_req_app(req)), n, rtt_read, rtt_done, fill)
                               : NULL;

    if (f == NULL) {
        free(fill);
        gp_req_done(req, GP_EOK);
        return;
    }
    *fill = (rtt_fill){.req = req, .sites = sites};
    for (uint32_t i = 0; i < n; i++) {
        char key[REGISTRY_KEY_LEN];

        registry_rtt_key(key, sites[i].id);
        gp_kvfan_cmdf(f, i, "HVALS %s", key);
    }
    gp_kvfan_end(f);
}

/* A site written or deleted: its SiteChange, with the row's revision (a
 * delete returns the one it took as its second column). */
static void
site_changed(gp_req *req, const op *o, const PGresult *res)
{
    const msg_site *site = gp_req_out(req);
    bool            del = strcmp(o->verb, "delete") == 0;
    uint64_t        rev = del ? strtoull(PQgetvalue(res, 0, 1), NULL, 10) : site->rev;

    registry_site_changed(gp_req_state(req), o->verb, o->id, rev, del ? NULL : site);
}

static void
op_done(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    op     *o = arg;
    gp_req *req = o->req;
    void   *out = gp_req_out(req);

    (void)nres;
    if (err != GP_EOK) {
        err = db_error(o, err, detail);
    } else if (PQntuples(res[0]) == 0) {
        err = gp_req_fail(req, GP_ENOTFOUND, "no %s '%s'", o->e->name, o->id);
    } else if (strcmp(o->verb, "delete") == 0) {
        snprintf(((msg_deleted *)out)->id, sizeof(((msg_deleted *)out)->id), "%s", o->id);
    } else {
        err = row_to_msg(o->e, res[0], 0, out);
    }
    if (err == GP_EOK && o->e->desc == &msg_site_desc && strcmp(o->verb, "get") != 0)
        site_changed(req, o, res[0]);
    if (err == GP_EOK && o->e->desc == &msg_site_desc && strcmp(o->verb, "delete") != 0) {
        free(o);
        sites_done(req, out, 1);
        return;
    }
    free(o);
    gp_req_done(req, err);
}

static gp_err
run(op *o, const char *sql, params *p)
{
    gp_err rc = gp_db_query(gp_app_db(gp_req_app(o->req)), sql, p->n, gp_dbparams_values(p), 0,
                            op_done, o);

    if (rc != GP_EOK) {
        free(o);
        return rc;
    }
    return GP_EPENDING;
}

static op *
op_new(gp_req *req, const char *id)
{
    op *o = calloc(1, sizeof(*o));

    if (o == NULL)
        return NULL;
    o->req = req;
    o->e = entity_of(req);
    snprintf(o->verb, sizeof(o->verb), "%s", admin_op_of(req)->verb);
    snprintf(o->id, sizeof(o->id), "%s", id);
    return o;
}

/* Ids and references must be subject tokens. */
static gp_err
check_ids(gp_req *req, const entity *e, const void *msg)
{
    static const char *const refs[] = {"id", "tenant", "parent", "region", "site", "pool"};

    for (size_t i = 0; i < GP_NELEM(refs); i++) {
        int         fi = gp_msg_field_index(e->desc, refs[i]);
        const char *v;

        if (fi < 0 || e->desc->fields[fi].type != GP_T_STR)
            continue;
        v = (const char *)msg + e->desc->fields[fi].offset;
        if ((*v != '\0' || i == 0) && !gp_id_ok(v))
            return gp_req_fail(req, GP_EINVAL, "%s '%s' must be 1-63 letters, digits, - or _",
                               refs[i], v);
    }
    return GP_EOK;
}

static gp_err
check_pool(gp_req *req, const msg_pool *p, bool update)
{
    if (update)
        return GP_EOK;
    if (p->scope == MSG_POOL_SCOPE_SITE && p->site[0] == '\0')
        return gp_req_fail(req, GP_EINVAL, "a pool with scope site needs a site");
    if (p->scope == MSG_POOL_SCOPE_REGION && p->region[0] == '\0')
        return gp_req_fail(req, GP_EINVAL, "a pool with scope region needs a region");
    if (p->scope != MSG_POOL_SCOPE_SITE && p->site[0] != '\0')
        return gp_req_fail(req, GP_EINVAL, "only a pool with scope site names a site");
    if (p->scope != MSG_POOL_SCOPE_REGION && p->region[0] != '\0')
        return gp_req_fail(req, GP_EINVAL, "only a pool with scope region names a region");
    return GP_EOK;
}

static gp_err
check_site(gp_req *req, const msg_site *s)
{
    const msg_power_price *pp = s->power_prices.v;

    for (uint32_t i = 0; i < s->power_prices.n; i++) {
        if (i == 0 && pp[i].start_min != 0)
            return gp_req_fail(req, GP_EINVAL, "power_prices must start at minute 0");
        if (i > 0 && pp[i].start_min <= pp[i - 1].start_min)
            return gp_req_fail(req, GP_EINVAL, "power_prices must be ordered by start_min");
    }
    return GP_EOK;
}

static gp_err
on_write(gp_req *req, const void *in, void *out)
{
    const entity *e = entity_of(req);
    bool          update = verb_is(req, "update");
    gp_buf        sql;
    params        p;
    op           *o;
    gp_err        rc;

    (void)out;
    rc = check_ids(req, e, in);
    if (rc == GP_EOK && e->desc == &msg_pool_desc)
        rc = check_pool(req, in, update);
    if (rc == GP_EOK && e->desc == &msg_site_desc)
        rc = check_site(req, in);
    if (rc != GP_EOK)
        return rc;
    gp_buf_init(&sql, 0);
    gp_dbparams_init(&p);
    rc = build_write(e, in, update, &sql, &p);
    if (rc == GP_EINVAL && update)
        rc = gp_req_fail(req, GP_EINVAL, "nothing to update: set at least one field");
    o = rc == GP_EOK ? op_new(req, (const char *)in + e->desc->fields[0].offset) : NULL;
    if (rc == GP_EOK)
        rc = o ? run(o, sql.p, &p) : GP_ENOMEM;
    gp_buf_fini(&sql);
    gp_dbparams_fini(&p);
    return rc;
}

static gp_err
on_get_or_delete(gp_req *req, const void *in, void *out)
{
    const msg_id_request *q = in;
    const entity         *e = entity_of(req);
    bool                  del = verb_is(req, "delete");
    gp_buf                sql;
    params                p;
    op                   *o;
    gp_err                rc;

    (void)out;
    if (!gp_id_ok(q->id))
        return gp_req_fail(req, GP_EINVAL, "'%s' is not a valid id", q->id);
    gp_buf_init(&sql, 0);
    gp_dbparams_init(&p);
    if (del) {
        /* a site's delete takes a revision for its SiteChange */
        rc = gp_buf_printf(&sql, "DELETE FROM %s WHERE id = $1 RETURNING id%s", e->table,
                           e->desc == &msg_site_desc ? ", nextval('inventory_rev')" : "");
    } else {
        rc = gp_buf_puts(&sql, "SELECT ");
        rc = rc ? rc : select_list(e, &sql);
        rc = rc ? rc : gp_buf_printf(&sql, " FROM %s t WHERE id = $1", e->table);
    }
    rc = rc ? rc : gp_dbparams_add(&p, q->id);
    o = rc == GP_EOK ? op_new(req, q->id) : NULL;
    if (rc == GP_EOK)
        rc = o ? run(o, sql.p, &p) : GP_ENOMEM;
    gp_buf_fini(&sql);
    gp_dbparams_fini(&p);
    return rc;
}

/* ---- list ------------------------------------------------------------------------ */

/* Sets next (the last id when the page is full) and total (the window
 * count in the column after the entity's). */
static void
list_finish(gp_req *req, const entity *e, const op *o, const PGresult *res, int rows, int ncols)
{
    const gp_msg_desc *ld = e->list_desc;
    char              *out = gp_req_out(req);
    int                fn = gp_msg_field_index(ld, "next"), ft = gp_msg_field_index(ld, "total");

    if (rows > 0 && rows == o->limit)
        snprintf(out + ld->fields[fn].offset, ld->fields[fn].limit + 1, "%s",
                 PQgetvalue(res, rows - 1, 0));
    *(uint32_t *)(out + ld->fields[ft].offset) =
        rows > 0 ? (uint32_t)strtoul(PQgetvalue(res, 0, ncols), NULL, 10) : 0;
}

static void
list_done(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    op       *o = arg;
    gp_req   *req = o->req;
    gp_arr   *items = (gp_arr *)((char *)gp_req_out(req) + o->e->list_desc->fields[0].offset);
    int       rows = err == GP_EOK ? PQntuples(res[0]) : 0;
    int       ncols = 0;
    size_t    sz = o->e->desc->size;

    (void)nres;
    for (const col *k = o->e->cols; k->field != NULL; k++)
        ncols++;
    if (err != GP_EOK) {
        err = gp_req_fail(req, err, "%s", detail);
    } else if (rows > 0 && (items->v = calloc((size_t)rows, sz)) == NULL) {
        err = GP_ENOMEM;
    }
    for (int i = 0; i < rows && err == GP_EOK; i++) {
        err = row_to_msg(o->e, res[0], i, (char *)items->v + (size_t)i * sz);
        items->n++;
    }
    if (err == GP_EOK)
        list_finish(req, o->e, o, res[0], rows, ncols);
    if (err == GP_EOK && o->e->desc == &msg_site_desc) {
        free(o);
        sites_done(req, items->v, items->n);
        return;
    }
    free(o);
    gp_req_done(req, err);
}

static const char *
filter_value(const msg_list_request *q, const char *field)
{
    if (strcmp(field, "tenant") == 0) return q->tenant;
    if (strcmp(field, "region") == 0) return q->region;
    if (strcmp(field, "site") == 0) return q->site;
    return "";
}

/* " AND column = $k" for each filter given, into where. */
static gp_err
list_filters(const entity *e, const msg_list_request *q, gp_buf *where, params *p)
{
    gp_err rc = gp_buf_puts(where, " WHERE true");

    for (int i = 0; i < 4 && e->filters[i] != NULL && rc == GP_EOK; i++) {
        char        field[32];
        const char *colon = strchr(e->filters[i], ':');
        const char *column = colon ? colon + 1 : e->filters[i];

        snprintf(field, sizeof(field), "%.*s", (int)(colon ? colon - e->filters[i] : 31),
                 e->filters[i]);
        if (*filter_value(q, field) == '\0')
            continue;
        rc = gp_dbparams_add(p, filter_value(q, field));
        rc = rc ? rc : gp_buf_printf(where, " AND %s = $%d", column, p->n);
    }
    return rc;
}

/* The page is read in key order and cut at the limit before its columns
 * are computed (a site's node and GPU counts are subqueries); the total
 * matching is one count of its own.  A window count over a subquery
 * computed every row's columns for every page. */
static gp_err
list_sql(const entity *e, const msg_list_request *q, int limit, gp_buf *sql, params *p)
{
    gp_buf where;
    gp_err rc;

    gp_buf_init(&where, 0);
    rc = list_filters(e, q, &where, p);
    rc = rc ? rc : gp_buf_puts(sql, "SELECT ");
    rc = rc ? rc : select_list(e, sql);
    rc = rc ? rc : gp_buf_printf(sql, ", (SELECT count(*) FROM %s t%s) FROM %s t%s", e->table,
                                 where.p, e->table, where.p);
    rc = rc ? rc : gp_dbparams_add(p, q->after);
    rc = rc ? rc : gp_buf_printf(sql, " AND t.id > $%d ORDER BY t.id LIMIT %d", p->n, limit);
    gp_buf_fini(&where);
    return rc;
}

static gp_err
on_list(gp_req *req, const void *in, void *out)
{
    const msg_list_request *q = in;
    const entity           *e = entity_of(req);
    int                     max = (int)e->list_desc->fields[0].limit;
    int                     limit = q->limit == 0 || (int)q->limit > max ? max : (int)q->limit;
    gp_buf                  sql;
    params                  p;
    op                     *o;
    gp_err                  rc;

    (void)out;
    gp_buf_init(&sql, 0);
    gp_dbparams_init(&p);
    rc = list_sql(e, q, limit, &sql, &p);
    o = rc == GP_EOK ? op_new(req, "") : NULL;
    if (o != NULL) {
        o->limit = limit;
        rc = gp_db_query(gp_app_db(gp_req_app(req)), sql.p, p.n, gp_dbparams_values(&p), 0, list_done, o);
        if (rc != GP_EOK)
            free(o);
        else
            rc = GP_EPENDING;
    } else if (rc == GP_EOK) {
        rc = GP_ENOMEM;
    }
    gp_buf_fini(&sql);
    gp_dbparams_fini(&p);
    return rc;
}

#define ENTITY_ROUTES(NAME, i)                                                            \
    {GP_OP_ADMIN_##NAME##_CREATE, on_write, GP_R_QUEUE, 0, &admin_ops[(i) * 5 + 0], NULL}, \
    {GP_OP_ADMIN_##NAME##_UPDATE, on_write, GP_R_QUEUE, 0, &admin_ops[(i) * 5 + 1], NULL}, \
    {GP_OP_ADMIN_##NAME##_GET, on_get_or_delete, GP_R_QUEUE, 0, &admin_ops[(i) * 5 + 2], NULL}, \
    {GP_OP_ADMIN_##NAME##_DELETE, on_get_or_delete, GP_R_QUEUE, 0, &admin_ops[(i) * 5 + 3], NULL}, \
    {GP_OP_ADMIN_##NAME##_LIST, on_list, GP_R_QUEUE, REGISTRY_LIST_TIMEOUT_MS,                \
     &admin_ops[(i) * 5 + 4], NULL}

const gp_route registry_admin_routes[] = {
    ENTITY_ROUTES(TENANT, 0),
    ENTITY_ROUTES(SITE, 1),
    ENTITY_ROUTES(POOL, 2),
    ENTITY_ROUTES(PRODUCT, 3),
    {NULL},
};
