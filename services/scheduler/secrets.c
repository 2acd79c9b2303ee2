/* secrets.c -- tenant secrets: gp.api.<tenant>.secret.set|list|delete,
 * the check at submit that a job's named secrets are the tenant's, and
 * their values for its RunAttempt.
 *
 * A value is encrypted in PostgreSQL by pgcrypto (pgp_sym_encrypt_bytea,
 * AES-256) under the deployment's key, which only the scheduler holds
 * (secret-key, secret-key-file or systemd's $CREDENTIALS_DIRECTORY): it
 * travels as a query parameter, never in SQL text, and is never logged.
 * Nothing sends a value back to a tenant; the only reader is the query
 * that builds an attempt's RunAttempt, for the secrets its job names.
 * The API runs under the tenant's role (row-level security: only its own
 * rows, never the value column; migration 12), like logs.c.  The
 * parameter copies are zeroed by the db layer when freed, ours here. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/clock.h"
#include "gp/dbarray.h"
#include "gp/id.h"
#include "gp/log.h"
#include "gp/tenancy.h"
#include "scheduler.h"

enum { SECRET_SET, SECRET_LISTED, SECRET_DELETED, SECRET_REFUSED, SECRET_ERROR };
static const char *const secret_outcomes[] = {"set", "listed", "deleted", "refused", "error"};

#define SECRETS_PER_TENANT 256
#define SECRET_KEY_MIN     16
#define NOT_CONFIGURED     SCHED_SECRETS_OFF

/* ---- the key ------------------------------------------------------------------- */

gp_err
sched_secrets_start(sched *s)
{
    const char *cred = getenv("CREDENTIALS_DIRECTORY");
    char        path[512];
    const char *from = "secret-key";

    gp_metrics_counters(gp_app_metrics(s->app), "gp_scheduler_secret_requests_total", "outcome",
                        secret_outcomes, 5, "Tenant secret requests by outcome (values never "
                        "leave the scheduler but in a RunAttempt)", s->m_secrets);
    if (s->cfg->secret_key[0] != '\0') {
        snprintf(s->secret_key, sizeof(s->secret_key), "%s", s->cfg->secret_key);
    } else if (s->cfg->secret_key_file[0] != '\0') {
        from = s->cfg->secret_key_file;
        if (gp_cfg_read_secret(from, s->secret_key, sizeof(s->secret_key)) != GP_EOK) {
            GP_ERROR("secret_key_unreadable", "file=%s err=INVAL", from);
            return GP_EINVAL;
        }
    } else if (cred != NULL && cred[0] != '\0') {
        snprintf(path, sizeof(path), "%s/secret-key", cred);
        from = "$CREDENTIALS_DIRECTORY/secret-key";
        if (gp_cfg_read_secret(path, s->secret_key, sizeof(s->secret_key)) != GP_EOK)
            s->secret_key[0] = '\0';          /* a credential dir without ours: off */
    }
    if (s->secret_key[0] != '\0' && strlen(s->secret_key) < SECRET_KEY_MIN) {
        explicit_bzero(s->secret_key, sizeof(s->secret_key));
        GP_ERROR("secret_key_short", "from=%s err=INVAL detail=\"at least %d bytes\"", from,
                 SECRET_KEY_MIN);
        return GP_EINVAL;
    }
    GP_INFO("secrets", "enabled=%s", s->secret_key[0] != '\0' ? "true" : "false");
    return GP_EOK;
}

/* ---- names a spec gives -------------------------------------------------------- */

typedef struct named {
    const char *name[SCHED_SECRETS_MAX];
    int32_t     use[SCHED_SECRETS_MAX];
    unsigned    n;
} named;

static void
names_of(const msg_job_spec *sp, named *o)
{
    const char *v[] = {sp->registry_auth, sp->ssh_key, sp->checkpoint_secret};
    int32_t     u[] = {MSG_ATTEMPT_SECRET_USE_REGISTRY, MSG_ATTEMPT_SECRET_USE_SSH,
                       MSG_ATTEMPT_SECRET_USE_CHECKPOINT};

    o->n = 0;
    for (unsigned i = 0; i < SCHED_SECRETS_MAX; i++)
        if (v[i][0] != '\0') {
            o->name[o->n] = v[i];
            o->use[o->n++] = u[i];
        }
}

bool
sched_secrets_on(const sched *s)
{
    return s->secret_key[0] != '\0';
}

bool
sched_spec_names_secrets(const msg_job_spec *sp)
{
    named n;

    names_of(sp, &n);
    return n.n > 0;
}

/* A PostgreSQL text[] of the names. */
static gp_err
names_array(const named *n, gp_buf *b)
{
    gp_err rc = gp_pgarr_begin(b);

    for (unsigned i = 0; i < n->n && rc == GP_EOK; i++)
        rc = gp_pgarr_add(b, n->name[i]);
    return rc == GP_EOK ? gp_pgarr_end(b) : rc;
}

/* ---- one query, its answer ----------------------------------------------------- */

typedef struct squery {
    sched            *s;
    named             n;
    char              names[SCHED_SECRETS_MAX][GP_MAX_ID + 1];   /* copies: the spec may go */
    sched_secrets_cb *cb;
    void             *arg;
} squery;

static squery *
squery_new(sched *s, const msg_job_spec *sp, sched_secrets_cb *cb, void *arg)
{
    squery *q = calloc(1, sizeof(*q));

    if (q == NULL)
        return NULL;
    *q = (squery){.s = s, .cb = cb, .arg = arg};
    names_of(sp, &q->n);
    for (unsigned i = 0; i < q->n.n; i++) {
        snprintf(q->names[i], sizeof(q->names[i]), "%s", q->n.name[i]);
        q->n.name[i] = q->names[i];
    }
    return q;
}

/* The row of name in res (column 0), or -1. */
static int
row_of(const PGresult *res, const char *name)
{
    for (int r = 0; r < PQntuples(res); r++)
        if (strcmp(PQgetvalue(res, r, 0), name) == 0)
            return r;
    return -1;
}

/* The first name the rows lack, or NULL. */
static const char *
missing(const squery *q, const PGresult *res)
{
    for (unsigned i = 0; i < q->n.n; i++)
        if (row_of(res, q->n.name[i]) < 0)
            return q->n.name[i];
    return NULL;
}

static const char *const use_fields[] = {"registry_auth", "ssh_key", "checkpoint_secret"};

static const char *
field_of(const squery *q, const char *name)
{
    for (unsigned i = 0; i < q->n.n; i++)
        if (strcmp(q->n.name[i], name) == 0 && q->n.use[i] >= 0 && q->n.use[i] < 3)
            return use_fields[q->n.use[i]];
    return "secret";
}

/* ---- at submit: they exist and are the tenant's ------------------------------------- */

static void
checked(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    squery     *q = arg;
    char        why[256];
    const char *m;

    if (err != GP_EOK || nres != 3) {
        snprintf(why, sizeof(why), "secrets: cannot be checked now (database: %s)", detail);
        q->cb(q->arg, GP_EUNAVAIL, why, NULL, 0);
    } else if ((m = missing(q, res[2])) != NULL) {
        /* another tenant's secret is not seen under this tenant's role:
         * the same answer as none, which tells nothing of others */
        snprintf(why, sizeof(why), "%s: the tenant has no secret '%s' (gpctl create secret)",
                 field_of(q, m), m);
        q->cb(q->arg, GP_ENOTFOUND, why, NULL, 0);
    } else {
        q->cb(q->arg, GP_EOK, "", NULL, 0);
    }
    free(q);
}

gp_err
sched_secrets_check(sched *s, const char *tenant, const msg_job_spec *sp, sched_secrets_cb *cb,
                    void *arg)
{
    squery   *q;
    gp_buf    arr;
    gp_db_tx *tx;
    gp_err    rc;

    if (!sched_secrets_on(s))
        return GP_EUNAVAIL;
    if ((q = squery_new(s, sp, cb, arg)) == NULL)
        return GP_ENOMEM;
    gp_buf_init(&arr, 4096);
    if ((rc = names_array(&q->n, &arr)) == GP_EOK) {
        const char *p[] = {tenant, arr.p};

        tx = gp_db_tx_new(gp_app_db(s->app));
        /* the role's own view: another tenant's secret is not there */
        gp_db_tx_add(tx, "SET TRANSACTION READ WRITE", 0, NULL);
        gp_db_tx_add(tx, GP_TENANCY_SET_ROLE_SQL, 1, &tenant);
        gp_db_tx_add(tx, "SELECT name FROM secrets WHERE tenant = $1 AND name = ANY($2::text[])",
                     2, p);
        rc = gp_db_tx_run(tx, 0, checked, q);
    }
    gp_buf_fini(&arr);
    if (rc != GP_EOK)
        free(q);
    return rc;
}

/* ---- at dispatch: their values ------------------------------------------------------ */

void
sched_secrets_scrub(msg_attempt_secret *v, unsigned n)
{
    for (unsigned i = 0; v != NULL && i < n; i++) {
        if (v[i].value.p != NULL) {
            explicit_bzero(v[i].value.p, v[i].value.n);
            free(v[i].value.p);
        }
        v[i].value = (gp_bytes){0};
    }
    free(v);
}

/* The decrypted bytes of row r (bytea text) into out; the result's own
 * copy is zeroed. */
static bool
value_take(PGresult *res, int r, gp_bytes *out)
{
    char          *hex = PQgetvalue(res, r, 1);
    size_t         k = 0;
    unsigned char *u = PQunescapeBytea((const unsigned char *)hex, &k);
    bool           ok = u != NULL && k > 0 && k <= MSG_ATTEMPT_SECRET_VALUE_MAXLEN &&
                        (out->p = malloc(k)) != NULL;

    if (ok) {
        memcpy(out->p, u, k);
        out->n = (uint32_t)k;
    }
    if (u != NULL) {
        explicit_bzero(u, k);
        PQfreemem(u);
    }
    explicit_bzero(hex, strlen(hex));
    return ok;
}

static void
resolved(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    squery             *q = arg;
    msg_attempt_secret *v = NULL;
    char                why[256];
    const char         *m = NULL;
    bool                ok = err == GP_EOK && nres == 1;

    if (ok && (m = missing(q, res[0])) != NULL) {
        snprintf(why, sizeof(why), "%s: the tenant's secret '%s' no longer exists",
                 field_of(q, m), m);
        q->cb(q->arg, GP_ENOTFOUND, why, NULL, 0);
    } else if (!ok || (v = calloc(q->n.n, sizeof(*v))) == NULL) {
        /* a wrong key is the operator's fault, never the job's */
        snprintf(why, sizeof(why), "secrets: cannot be read (database: %s)",
                 err != GP_EOK ? detail : "out of memory");
        q->cb(q->arg, GP_EUNAVAIL, why, NULL, 0);
    } else {
        for (unsigned i = 0; i < q->n.n && ok; i++) {
            v[i].use = q->n.use[i];
            ok = value_take(res[0], row_of(res[0], q->n.name[i]), &v[i].value);
        }
        if (ok) {
            q->cb(q->arg, GP_EOK, "", v, q->n.n);
        } else {
            sched_secrets_scrub(v, q->n.n);
            q->cb(q->arg, GP_EINTERNAL, "secrets: a value could not be read", NULL, 0);
        }
    }
    for (int r = 0; err == GP_EOK && nres == 1 && r < PQntuples(res[0]); r++) {
        char *hex = PQgetvalue(res[0], r, 1);           /* what value_take did not take */

        explicit_bzero(hex, strlen(hex));
    }
    free(q);
}

gp_err
sched_secrets_resolve(sched *s, const char *tenant, const msg_job_spec *sp, sched_secrets_cb *cb,
                      void *arg)
{
    squery *q;
    gp_buf  arr;
    gp_err  rc;

    if (!sched_secrets_on(s))
        return GP_EUNAVAIL;
    if ((q = squery_new(s, sp, cb, arg)) == NULL)
        return GP_ENOMEM;
    gp_buf_init(&arr, 4096);
    rc = names_array(&q->n, &arr);
    const char *p[] = {tenant, arr.p, s->secret_key};

    if (rc == GP_EOK)
        rc = gp_db_query(gp_app_db(s->app),
                         "SELECT name, pgp_sym_decrypt_bytea(value, $3) FROM secrets\n"
                         "  WHERE tenant = $1 AND name = ANY($2::text[])",
                         3, p, 0, resolved, q);
    gp_buf_fini(&arr);
    if (rc != GP_EOK)
        free(q);
    return rc;
}

/* ---- the API --------------------------------------------------------------------- */

static gp_err
api_tenant(gp_req *req, const char **tenant)
{
    *tenant = gp_req_param(req, "tenant");
    if (!gp_id_ok(*tenant))
        return gp_req_fail(req, GP_EINVAL, "tenant: must be 1 to 63 of [A-Za-z0-9_-]");
    return GP_EOK;
}

static gp_err
refuse(gp_req *req, gp_err code, const char *fmt, const char *arg)
{
    sched *s = gp_req_state(req);

    sched_count(s->m_secrets[SECRET_REFUSED]);
    return gp_req_fail(req, code, fmt, arg);
}

/* The tenant's role for the rest of tx, then sql. */
static gp_err
run_as(gp_req *req, const char *tenant, const char *sql, int np, const char *const *p,
       gp_db_cb *cb)
{
    gp_db_tx *tx = gp_db_tx_new(gp_app_db(gp_req_app(req)));
    gp_err    rc;

    gp_db_tx_add(tx, "SET TRANSACTION READ WRITE", 0, NULL);
    gp_db_tx_add(tx, GP_TENANCY_SET_ROLE_SQL, 1, &tenant);   /* an add's error: at run */
    gp_db_tx_add(tx, sql, np, p);
    rc = gp_db_tx_run(tx, 0, cb, req);
    if (rc != GP_EOK)
        return gp_req_fail(req, GP_EUNAVAIL, "database: %s", gp_err_name(rc));
    return GP_EPENDING;
}

static void
answered(gp_req *req, gp_err rc, int outcome)
{
    sched *s = gp_req_state(req);

    sched_count(s->m_secrets[rc == GP_EOK ? outcome : rc == GP_ENOTFOUND || rc == GP_ECONFLICT
                                                          ? SECRET_REFUSED : SECRET_ERROR]);
    gp_req_done(req, rc);
}

static gp_err
db_error(gp_req *req, gp_err err, const char *detail)
{
    GP_WARN("secret_query_failed", "subject=%s code=%s detail=\"%s\"", gp_req_subject(req),
            gp_err_name(err), detail);
    return gp_req_fail(req, err, "database: %s", detail);
}

/* ---- set ---- */

static void
set_done(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req     *req = arg;
    msg_secret *out = gp_req_out(req);

    if (err != GP_EOK || nres != 3) {
        answered(req, db_error(req, err != GP_EOK ? err : GP_EINTERNAL, detail), SECRET_SET);
        return;
    }
    if (PQntuples(res[2]) == 0) {
        answered(req, gp_req_fail(req, GP_ECONFLICT, "name: the tenant holds %d secrets "
                                  "already: delete one first", SECRETS_PER_TENANT), SECRET_SET);
        return;
    }
    answered(req, sched_row_to_msg(&msg_secret_desc, res[2], 0, out) == GP_EOK
                      ? GP_EOK : gp_req_fail(req, GP_EINTERNAL, "secret row unreadable"),
             SECRET_SET);
}

/* Created, or its value replaced; a new name only while the tenant holds
 * fewer than SECRETS_PER_TENANT.  The value is encrypted in the statement
 * itself: no plaintext is ever stored. */
static const char set_sql[] =
    "INSERT INTO secrets (tenant, name, value, size, created_ms, updated_ms)\n"
    "  SELECT $1, $2, pgp_sym_encrypt_bytea($3::bytea, $4, 'cipher-algo=aes256'),\n"
    "    length($3::bytea), $5::bigint, $5::bigint\n"
    "  WHERE EXISTS (SELECT 1 FROM secrets WHERE tenant = $1 AND name = $2)\n"
    "    OR (SELECT count(*) FROM secrets WHERE tenant = $1) < 256\n"
    "ON CONFLICT (tenant, name) DO UPDATE SET\n"
    "  value = pgp_sym_encrypt_bytea($3::bytea, $4, 'cipher-algo=aes256'),\n"
    "  size = length($3::bytea), updated_ms = $5::bigint\n"
    "RETURNING name, size, created_ms, updated_ms";

/* bytea input in hex, zeroed by the caller (all of it reserved at once:
 * a growing buffer would leave copies in freed memory) */
static gp_err
hex_of(const gp_bytes *v, gp_buf *hex)
{
    gp_err rc = gp_buf_reserve(hex, 2u * (size_t)v->n + 4);

    if (rc == GP_EOK)
        rc = gp_buf_puts(hex, "\\x");

    for (uint32_t i = 0; rc == GP_EOK && i < v->n; i++)
        rc = gp_buf_printf(hex, "%02x", v->p[i]);
    return rc == GP_EOK ? gp_buf_append(hex, "", 1) : rc;
}

static gp_err
on_set(gp_req *req, const void *in, void *out)
{
    const msg_secret_set *r = in;
    sched                *s = gp_req_state(req);
    const char           *tenant;
    char                  now[24];
    gp_buf                hex;
    gp_err                rc;

    (void)out;
    if ((rc = api_tenant(req, &tenant)) != GP_EOK)
        return rc;
    if (!gp_id_ok(r->name))
        rc = refuse(req, GP_EINVAL, "name: %s", "must be 1 to 63 of [A-Za-z0-9_-]");
    else if (r->value.n == 0)
        rc = refuse(req, GP_EINVAL, "value: %s", "must not be empty");
    else if (s->secret_key[0] == '\0')
        rc = refuse(req, GP_EUNAVAIL, "%s", NOT_CONFIGURED);
    if (rc != GP_EOK)
        return rc;
    snprintf(now, sizeof(now), "%llu", (unsigned long long)gp_wall_ms());
    gp_buf_init(&hex, 2u * MSG_SECRET_SET_VALUE_MAXLEN + 8);
    rc = hex_of(&r->value, &hex);
    const char *p[] = {tenant, r->name, hex.p, s->secret_key, now};

    rc = rc == GP_EOK ? run_as(req, tenant, set_sql, 5, p, set_done)
                      : gp_req_fail(req, GP_ENOMEM, "out of memory");
    if (hex.p != NULL)
        explicit_bzero(hex.p, hex.cap);
    gp_buf_fini(&hex);
    explicit_bzero(r->value.p, r->value.n);   /* the request's copy: no use left */
    return rc;
}

/* ---- list ---- */

static void
list_done(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req          *req = arg;
    msg_secret_list *out = gp_req_out(req);
    msg_secret      *v;
    int              n = err == GP_EOK && nres == 3 ? PQntuples(res[2]) : 0;

    if (err != GP_EOK || nres != 3) {
        answered(req, db_error(req, err != GP_EOK ? err : GP_EINTERNAL, detail), SECRET_LISTED);
        return;
    }
    if (n == 0) {
        answered(req, GP_EOK, SECRET_LISTED);
        return;
    }
    if ((v = calloc((size_t)n, sizeof(*v))) == NULL) {
        answered(req, gp_req_fail(req, GP_ENOMEM, "out of memory"), SECRET_LISTED);
        return;
    }
    out->items = (gp_arr){.v = v, .n = (uint32_t)n};
    for (int r = 0; r < n; r++)
        if (sched_row_to_msg(&msg_secret_desc, res[2], r, &v[r]) != GP_EOK) {
            answered(req, gp_req_fail(req, GP_EINTERNAL, "secret row unreadable"), SECRET_LISTED);
            return;
        }
    GP_SET_HAS(out, MSG_SECRET_LIST__ITEMS);
    answered(req, GP_EOK, SECRET_LISTED);
}

static gp_err
on_list(gp_req *req, const void *in, void *out)
{
    const msg_secret_list_request *r = in;
    const char                    *tenant;
    gp_err                         rc;

    (void)out;
    if ((rc = api_tenant(req, &tenant)) != GP_EOK)
        return rc;
    if (r->name[0] != '\0' && !gp_id_ok(r->name))
        return refuse(req, GP_EINVAL, "name: %s", "must be 1 to 63 of [A-Za-z0-9_-]");
    const char *p[] = {tenant, r->name};

    return run_as(req, tenant,
                  "SELECT name, size, created_ms, updated_ms FROM secrets\n"
                  "  WHERE tenant = $1 AND ($2 = '' OR name = $2) ORDER BY name LIMIT 256",
                  2, p, list_done);
}

/* ---- delete ---- */

static void
del_done(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req      *req = arg;
    msg_deleted *out = gp_req_out(req);

    if (err != GP_EOK || nres != 3) {
        answered(req, db_error(req, err != GP_EOK ? err : GP_EINTERNAL, detail), SECRET_DELETED);
        return;
    }
    if (PQntuples(res[2]) == 0) {
        answered(req, gp_req_fail(req, GP_ENOTFOUND, "id: the tenant has no such secret"),
                 SECRET_DELETED);
        return;
    }
    snprintf(out->id, sizeof(out->id), "%s", PQgetvalue(res[2], 0, 0));
    answered(req, GP_EOK, SECRET_DELETED);
}

/* A pending job that names it is not refused here: its next placement
 * fails to start, its own failure (README: Tenant secrets). */
static gp_err
on_delete(gp_req *req, const void *in, void *out)
{
    const msg_id_request *r = in;
    const char           *tenant;
    gp_err                rc;

    (void)out;
    if ((rc = api_tenant(req, &tenant)) != GP_EOK)
        return rc;
    if (!gp_id_ok(r->id))
        return refuse(req, GP_EINVAL, "id: %s", "must be 1 to 63 of [A-Za-z0-9_-]");
    const char *p[] = {tenant, r->id};

    return run_as(req, tenant, "DELETE FROM secrets WHERE tenant = $1 AND name = $2 RETURNING name",
                  2, p, del_done);
}

const gp_route sched_secret_routes[] = {
    {GP_OP_API_SECRET_SET, on_set, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_API_SECRET_LIST, on_list, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_API_SECRET_DELETE, on_delete, GP_R_QUEUE, 0, NULL, NULL},
    {NULL},
};
