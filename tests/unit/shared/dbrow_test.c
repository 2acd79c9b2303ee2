/* dbrow_test.c -- the pure parts of gp/dbrow.h on generated messages:
 * text forms, the SELECT list, INSERT and UPDATE statements with their
 * parameters (what is written and what is not), a two-column field, and
 * rows of text back into messages with the codec's checks. */
#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>

#include "gp/dbrow.h"
#include "msg_gen.h"
#include "test.h"

#define T_STR(got, want) T_OKM(strcmp((got), (want)) == 0, "'%s' == '%s'", (got), (want))

/* Site.power_prices as "starts;prices", written into two columns. */
static gp_err
prices_text(const gp_field *f, const void *msg, gp_buf *out)
{
    const gp_arr          *a = (const gp_arr *)((const char *)msg + f->offset);
    const msg_power_price *pp = a->v;
    gp_err                 rc = GP_EOK;

    for (uint32_t i = 0; i < a->n && rc == GP_EOK; i++)
        rc = gp_buf_printf(out, "%s%d", i ? "," : "", pp[i].start_min);
    rc = rc ? rc : gp_buf_puts(out, ";");
    for (uint32_t i = 0; i < a->n && rc == GP_EOK; i++)
        rc = gp_buf_printf(out, "%s%lld", i ? "," : "", (long long)pp[i].price_micros_per_kwh);
    return rc;
}

static int set_calls;
static gp_err
prices_set(const gp_field *f, void *msg, const char *text)
{
    (void)f; (void)msg;
    set_calls++;
    return strcmp(text, "bad") == 0 ? GP_ERANGE : GP_EOK;
}

static const gp_dbcol site_cols[] = {
    {"id", "id", "id", "$%d", GP_DBCOL_KEY, NULL, NULL},
    {"tenant", "tenant", "tenant", "$%d", 0, NULL, NULL},
    {"region", "region", "region", "$%d", 0, NULL, NULL},
    {"lat", "lat", "lat", "$%d::float8", 0, NULL, NULL},
    {"pue_milli", "pue_milli", "pue_milli", "$%d::int", 0, NULL, NULL},
    {"power_prices", "p_text", "p_starts, p_prices", "s($%1$d), p($%1$d)", 0, prices_text, prices_set},
    {"notes", "notes", "notes", "$%d", 0, NULL, NULL},
    {"nodes", "(SELECT 7)", NULL, NULL, GP_DBCOL_RO, NULL, NULL},
    {NULL, NULL, NULL, NULL, 0, NULL, NULL},
};

static const gp_dbcol pool_cols[] = {
    {"id", "id", "id", "$%d", GP_DBCOL_KEY, NULL, NULL},
    {"models", "array_to_string(models, ',')", "models", "string_to_array(NULLIF($%d,''), ',')", 0,
     NULL, NULL},
    {"scope", "scope", "scope", "$%d", 0, NULL, NULL},
    {NULL, NULL, NULL, NULL, 0, NULL, NULL},
};

static void
t_text(void)
{
    msg_pool p = {0};
    gp_buf   b = GP_BUF_INIT;
    char     models[2][32] = {"L4", "H100"};
    int      fm = gp_msg_field_index(&msg_pool_desc, "models");
    int      fs = gp_msg_field_index(&msg_pool_desc, "scope");

    p.models.v = models;
    p.models.n = 2;
    T_EQ_INT(gp_dbrow_field_text(&msg_pool_desc.fields[fm], &p, &b), GP_EOK);
    T_STR(b.p, "L4,H100");
    gp_buf_reset(&b);
    p.scope = MSG_POOL_SCOPE_REGION;
    T_EQ_INT(gp_dbrow_field_text(&msg_pool_desc.fields[fs], &p, &b), GP_EOK);
    T_STR(b.p, "region");
    gp_buf_reset(&b);
    strcpy(models[1], "H1,00");                 /* would split on the way back */
    T_EQ_INT(gp_dbrow_field_text(&msg_pool_desc.fields[fm], &p, &b), GP_EINVAL);
    gp_buf_fini(&b);

    /* back: arrays split, enums by name, the codec's checks */
    msg_pool q = {0};
    T_EQ_INT(gp_dbrow_set_field(&msg_pool_desc, &msg_pool_desc.fields[fm], &q, "A10,L40S,T4"), GP_EOK);
    T_EQ_INT(q.models.n, 3);
    T_STR((const char *)q.models.v + 2 * 32, "T4");
    T_EQ_INT(gp_dbrow_set_field(&msg_pool_desc, &msg_pool_desc.fields[fs], &q, "site"), GP_EOK);
    T_EQ_INT(q.scope, MSG_POOL_SCOPE_SITE);
    T_OK(gp_dbrow_set_field(&msg_pool_desc, &msg_pool_desc.fields[fs], &q, "planet") != GP_EOK);
    gp_msg_clear(&msg_pool_desc, &q);
    T_EQ_INT(gp_dbrow_set_field(&msg_pool_desc, &msg_pool_desc.fields[fm], &q, "a,b,c,d,e,f,g,h,i"),
             GP_ETOOBIG);                       /* 9 models, 8 allowed */
    T_EQ_INT(gp_dbrow_set_field(&msg_pool_desc, &msg_pool_desc.fields[fm], &q, ""), GP_EOK);
    T_EQ_INT(q.models.n, 0);
    gp_msg_clear(&msg_pool_desc, &q);
}

static void
t_sql(void)
{
    msg_site        s = {0};
    msg_power_price pp[2] = {{.start_min = 0, .price_micros_per_kwh = 180000},
                             {.start_min = 420, .price_micros_per_kwh = 250000}};
    gp_buf          sql = GP_BUF_INIT;
    gp_dbparams     p;

    T_EQ_INT(gp_dbrow_ncols(site_cols), 8);
    T_EQ_INT(gp_dbrow_select(site_cols, &sql), GP_EOK);
    T_STR(sql.p, "id, tenant, region, lat, pue_milli, p_text, notes, (SELECT 7)");
    gp_buf_reset(&sql);

    /* insert: required fields and those given; never the read-only one */
    snprintf(s.id, sizeof(s.id), "s1");
    snprintf(s.tenant, sizeof(s.tenant), "op");
    snprintf(s.region, sizeof(s.region), "eu");
    s.lat = 48.25;
    GP_SET_HAS(&s, MSG_SITE__LAT);
    s.power_prices.v = pp;
    s.power_prices.n = 2;
    GP_SET_HAS(&s, MSG_SITE__POWER_PRICES);
    s.nodes = 9;
    GP_SET_HAS(&s, MSG_SITE__NODES);
    gp_dbparams_init(&p);
    T_EQ_INT(gp_dbrow_write("sites", &msg_site_desc, site_cols, &s, false, &sql, &p), GP_EOK);
    T_STR(sql.p, "INSERT INTO sites AS t (id, tenant, region, lat, p_starts, p_prices) "
                 "VALUES ($1, $2, $3, $4::float8, s($5), p($5)) RETURNING id, tenant, region, lat, "
                 "pue_milli, p_text, notes, (SELECT 7)");
    T_EQ_INT(p.n, 5);
    const char *const *v = gp_dbparams_values(&p);
    T_STR(v[0], "s1");
    T_STR(v[3], "48.25");
    T_STR(v[4], "0,420;180000,250000");
    gp_dbparams_fini(&p);
    gp_buf_reset(&sql);

    /* update: only what has its bit; required strings left empty are not written */
    msg_site u = {0};
    snprintf(u.id, sizeof(u.id), "s1");
    snprintf(u.notes, sizeof(u.notes), "it's \"quoted\"; DROP TABLE sites");
    GP_SET_HAS(&u, MSG_SITE__NOTES);
    GP_SET_HAS(&u, MSG_SITE__TENANT);           /* on the wire, but empty */
    u.power_prices.v = pp;
    u.power_prices.n = 1;
    GP_SET_HAS(&u, MSG_SITE__POWER_PRICES);
    gp_dbparams_init(&p);
    T_EQ_INT(gp_dbrow_write("sites", &msg_site_desc, site_cols, &u, true, &sql, &p), GP_EOK);
    T_STR(sql.p, "UPDATE sites t SET (p_starts, p_prices) = (s($2), p($2)), notes = $3 WHERE id = $1 "
                 "RETURNING id, tenant, region, lat, pue_milli, p_text, notes, (SELECT 7)");
    T_EQ_INT(p.n, 3);
    v = gp_dbparams_values(&p);
    T_STR(v[1], "0;180000");
    T_STR(v[2], u.notes);                       /* values travel as parameters, untouched */
    gp_dbparams_fini(&p);
    gp_buf_reset(&sql);

    /* an update that sets nothing */
    msg_site none = {0};
    snprintf(none.id, sizeof(none.id), "s1");
    gp_dbparams_init(&p);
    T_EQ_INT(gp_dbrow_write("sites", &msg_site_desc, site_cols, &none, true, &sql, &p), GP_EINVAL);
    gp_dbparams_fini(&p);
    /* a map naming a field the message does not have */
    static const gp_dbcol wrong[] = {{"id", "id", "id", "$%d", GP_DBCOL_KEY, NULL, NULL},
                                     {"colour", "colour", "colour", "$%d", 0, NULL, NULL},
                                     {NULL, NULL, NULL, NULL, 0, NULL, NULL}};
    gp_buf_reset(&sql);
    gp_dbparams_init(&p);
    T_EQ_INT(gp_dbrow_write("sites", &msg_site_desc, wrong, &s, false, &sql, &p), GP_ENOTFOUND);
    gp_dbparams_fini(&p);
    gp_buf_fini(&sql);

    /* the parameter cap */
    gp_dbparams_init(&p);
    gp_err last = GP_EOK;
    for (int i = 0; i <= GP_DB_MAX_PARAMS && last == GP_EOK; i++)
        last = gp_dbparams_add(&p, "x");
    T_EQ_INT(last, GP_ETOOBIG);
    T_EQ_INT(p.n, GP_DB_MAX_PARAMS);
    gp_dbparams_fini(&p);
}

static void
t_rows(void)
{
    const char *const row[] = {"s2", "op", "eu-west", "51.5", "1200", "0;1", "n", "7"};
    const char *const bad_pue[] = {"s2", "op", "eu", "1", "99999", "0;1", "n", "7"};
    const char *const bad_prices[] = {"s2", "op", "eu", "1", "1200", "bad", "n", "7"};
    msg_site          m = {0};
    const gp_dbcol   *bad = NULL;

    set_calls = 0;
    T_EQ_INT(gp_dbrow_from_text(&msg_site_desc, site_cols, row, &m, &bad), GP_EOK);
    T_STR(m.id, "s2");
    T_STR(m.region, "eu-west");
    T_OK(m.lat == 51.5);
    T_EQ_INT(m.pue_milli, 1200);
    T_EQ_INT(m.nodes, 7);
    T_EQ_INT(set_calls, 1);                     /* the custom reader ran */
    gp_msg_clear(&msg_site_desc, &m);
    T_OK(gp_dbrow_from_text(&msg_site_desc, site_cols, bad_pue, &m, &bad) == GP_ERANGE);
    T_OK(bad != NULL && strcmp(bad->field, "pue_milli") == 0);
    gp_msg_clear(&msg_site_desc, &m);
    bad = NULL;
    T_EQ_INT(gp_dbrow_from_text(&msg_site_desc, site_cols, bad_prices, &m, &bad), GP_ERANGE);
    T_OK(bad != NULL && strcmp(bad->field, "power_prices") == 0);
    gp_msg_clear(&msg_site_desc, &m);

    const char *const prow[] = {"p1", "L4,H100", "global"};
    msg_pool          p = {0};
    T_EQ_INT(gp_dbrow_from_text(&msg_pool_desc, pool_cols, prow, &p, NULL), GP_EOK);
    T_EQ_INT(p.models.n, 2);
    T_EQ_INT(p.scope, MSG_POOL_SCOPE_GLOBAL);
    gp_msg_clear(&msg_pool_desc, &p);
}

/* A result built in memory (libpq's PQmakeEmptyPGresult), as a query of
 * any columns would return it. */
static PGresult *
named_result(const char *gpu_ms)
{
    /* libpq's API takes char *: the names and values are copied */
    static char  n_id[] = "id", n_final[] = "final", n_fault[] = "fault", n_gpu[] = "gpu_ms",
                 n_other[] = "not_a_field", v_id[] = "j1.1.n1.7", v_t[] = "t", v_x[] = "x";
    char         v_gpu[32];
    PGresAttDesc a[5] = {
        {.name = n_id, .typid = 25, .typlen = -1},
        {.name = n_final, .typid = 16, .typlen = 1},      /* bool: "t" */
        {.name = n_fault, .typid = 16, .typlen = 1},      /* NULL */
        {.name = n_gpu, .typid = 20, .typlen = 8},
        {.name = n_other, .typid = 25, .typlen = -1},
    };
    PGresult *r = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);

    PQsetResultAttrs(r, 5, a);
    snprintf(v_gpu, sizeof(v_gpu), "%s", gpu_ms);
    PQsetvalue(r, 0, 0, v_id, (int)strlen(v_id));
    PQsetvalue(r, 0, 1, v_t, 1);
    PQsetvalue(r, 0, 2, NULL, -1);
    PQsetvalue(r, 0, 3, v_gpu, (int)strlen(v_gpu));
    PQsetvalue(r, 0, 4, v_x, 1);
    return r;
}

static gp_err
hook(const gp_msg_desc *d, const gp_field *f, void *msg, const char *text)
{
    (void)d;
    if (strcmp(f->name, "id") != 0)
        return GP_ENOTFOUND;
    snprintf(((msg_billed_usage *)msg)->id, sizeof(((msg_billed_usage *)msg)->id), "hooked:%s",
             text);
    return GP_EOK;
}

static void
t_named(void)
{
    msg_billed_usage u = {0};
    PGresult        *r = named_result("1500");

    T_EQ_INT(gp_dbrow_named_to_msg(&msg_billed_usage_desc, r, 0, &u, NULL), GP_EOK);
    T_OKM(strcmp(u.id, "j1.1.n1.7") == 0 && u.final && u.gpu_ms == 1500,
          "named columns: text, a boolean's t, a bigint (%s %d %llu)", u.id, u.final,
          (unsigned long long)u.gpu_ms);
    T_OKM(!GP_HAS(&u, MSG_BILLED_USAGE__FAULT), "a NULL column leaves its field unset");
    gp_msg_clear(&msg_billed_usage_desc, &u);
    memset(&u, 0, sizeof(u));
    T_EQ_INT(gp_dbrow_named_to_msg(&msg_billed_usage_desc, r, 0, &u, hook), GP_EOK);
    T_OKM(strcmp(u.id, "hooked:j1.1.n1.7") == 0 && u.gpu_ms == 1500,
          "the hook takes its column, the default the others (%s)", u.id);
    gp_msg_clear(&msg_billed_usage_desc, &u);
    PQclear(r);
    r = named_result("12x");
    memset(&u, 0, sizeof(u));
    T_OKM(gp_dbrow_named_to_msg(&msg_billed_usage_desc, r, 0, &u, NULL) != GP_EOK,
          "a value that is not its field's type fails");
    gp_msg_clear(&msg_billed_usage_desc, &u);
    PQclear(r);
}

/* every row into an array of messages, by name; capped at maxItems */
static void
t_array(void)
{
    msg_usage_list  l;
    msg_price_list  pl;
    PGresult       *r = named_result("42");

    memset(&l, 0, sizeof(l));
    T_EQ_INT(gp_dbrow_named_to_array(&msg_usage_list_desc, "records", r, &l), GP_EOK);
    T_OKM(l.records.n == 1 && ((msg_billed_usage *)l.records.v)[0].gpu_ms == 42 &&
          GP_HAS(&l, gp_msg_field_index(&msg_usage_list_desc, "records")),
          "rows into an array field, its has-bit set");
    gp_msg_clear(&msg_usage_list_desc, &l);
    memset(&pl, 0, sizeof(pl));
    T_EQ_INT(gp_dbrow_named_to_array(&msg_usage_list_desc, "next", r, &l), GP_ENOTFOUND);
    T_EQ_INT(gp_dbrow_named_to_array(&msg_price_list_desc, "nothing", r, &pl), GP_ENOTFOUND);
    PQclear(r);
}

int
main(void)
{
    t_text();
    t_array();
    t_sql();
    t_rows();
    t_named();
    return T_DONE();
}
