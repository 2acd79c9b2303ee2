/* dbrow.c -- column maps between PostgreSQL rows and messages (see
 * gp/dbrow.h).  Moved here from the registry's admin.c so that every
 * service with inventory-like tables builds its SQL the same way. */
#include "gp/dbrow.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/log.h"

/* ---- parameters ------------------------------------------------------- */

void
gp_dbparams_init(gp_dbparams *p)
{
    gp_buf_init(&p->text, 0);
    p->n = 0;
}

void
gp_dbparams_fini(gp_dbparams *p)
{
    gp_buf_fini(&p->text);
    p->n = 0;
}

gp_err
gp_dbparams_add(gp_dbparams *p, const char *s)
{
    if (p->n >= GP_DB_MAX_PARAMS)
        return GP_ETOOBIG;
    p->off[p->n++] = p->text.n;
    return gp_buf_append(&p->text, s, strlen(s) + 1);
}

/* Offsets, not pointers, are kept while adding: the buffer moves. */
const char *const *
gp_dbparams_values(gp_dbparams *p)
{
    for (int i = 0; i < p->n; i++)
        p->v[i] = p->text.p + p->off[i];
    return p->v;
}

/* ---- text <-> field --------------------------------------------------- */

static gp_err
scalar_text(const gp_field *f, const void *msg, gp_buf *out)
{
    const char *p = (const char *)msg + f->offset;

    switch (f->type) {
    case GP_T_STR:  return gp_buf_puts(out, p);
    case GP_T_BOOL: return gp_buf_puts(out, *(const bool *)p ? "true" : "false");
    case GP_T_I32:  return gp_buf_printf(out, "%d", *(const int32_t *)p);
    case GP_T_I64:  return gp_buf_printf(out, "%lld", (long long)*(const int64_t *)p);
    case GP_T_U32:  return gp_buf_printf(out, "%u", *(const uint32_t *)p);
    case GP_T_U64:  return gp_buf_printf(out, "%llu", (unsigned long long)*(const uint64_t *)p);
    case GP_T_F64: {
        double v;

        memcpy(&v, p, sizeof(v));
        return gp_buf_printf(out, "%.17g", v);
    }
    case GP_T_ENUM: {
        int32_t i = *(const int32_t *)p;
        return gp_buf_puts(out, i >= 0 && (uint32_t)i < f->nenums ? f->enums[i] : "");
    }
    default:
        return GP_EINVAL;
    }
}

gp_err
gp_dbrow_field_text(const gp_field *f, const void *msg, gp_buf *out)
{
    const gp_arr *a = (const gp_arr *)((const char *)msg + f->offset);
    gp_err        rc = GP_EOK;

    if (f->type != GP_T_ARR)
        return scalar_text(f, msg, out);
    if (f->elem != GP_T_STR)
        return GP_EINVAL;
    for (uint32_t i = 0; i < a->n && rc == GP_EOK; i++) {
        const char *s = (const char *)a->v + (size_t)i * (f->elem_limit + 1);

        if (strchr(s, ',') != NULL)
            return GP_EINVAL;
        rc = gp_buf_printf(out, "%s%s", i ? "," : "", s);
    }
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
set_strings(const gp_field *f, void *msg, const char *text)
{
    gp_arr *a = (gp_arr *)((char *)msg + f->offset);
    size_t  n = count_csv(text), w = f->elem_limit + 1;
    char   *v;

    if (f->elem != GP_T_STR)
        return GP_EINVAL;
    if (n == 0)
        return GP_EOK;
    if (n > f->limit)
        return GP_ETOOBIG;
    v = calloc(n, w);
    if (v == NULL)
        return GP_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        size_t len = strcspn(text, ",");

        snprintf(v + i * w, w, "%.*s", (int)len, text);
        text += len + (text[len] == ',');
    }
    a->v = v;
    a->n = (uint32_t)n;
    return GP_EOK;
}

gp_err
gp_dbrow_set_field(const gp_msg_desc *d, const gp_field *f, void *msg, const char *text)
{
    char err[GP_ERRBUF_LEN];

    if (f->type == GP_T_ARR)
        return set_strings(f, msg, text);
    return gp_msg_set_text(d, msg, f->name, text, err, sizeof(err));
}

/* ---- SQL -------------------------------------------------------------- */

int
gp_dbrow_ncols(const gp_dbcol *cols)
{
    int n = 0;

    while (cols[n].field != NULL)
        n++;
    return n;
}

gp_err
gp_dbrow_select(const gp_dbcol *cols, gp_buf *sql)
{
    gp_err rc = GP_EOK;

    for (int i = 0; cols[i].field != NULL && rc == GP_EOK; i++)
        rc = gp_buf_printf(sql, "%s%s", i ? ", " : "", cols[i].read);
    return rc;
}

/* Insert writes what was given plus the required fields; update writes
 * what was given, except required strings left empty: they are on the
 * wire only because required fields always are. */
static bool
wanted(const gp_msg_desc *d, const void *msg, int fi, bool update)
{
    const gp_field *f = &d->fields[fi];
    uint64_t        has = *(const uint64_t *)msg;
    bool            required = (f->flags & GP_FF_REQUIRED) != 0;

    if (!update)
        return required || ((has >> fi) & 1u);
    if (required && f->type == GP_T_STR && *((const char *)msg + f->offset) == '\0')
        return false;
    return (has >> fi) & 1u;
}

static gp_err
param_field(gp_dbparams *p, const gp_field *f, const gp_dbcol *c, const void *msg)
{
    gp_buf tmp;
    gp_err rc;

    gp_buf_init(&tmp, 0);
    rc = c->to_text != NULL ? c->to_text(f, msg, &tmp) : gp_dbrow_field_text(f, msg, &tmp);
    if (rc == GP_EOK)
        rc = gp_dbparams_add(p, tmp.p ? tmp.p : "");
    gp_buf_fini(&tmp);
    return rc;
}

/* "col = cast" or, for two columns, "(a, b) = (x, y)" into vals; or
 * ", col" into names and ", cast" into vals. */
static gp_err
write_one(const gp_dbcol *c, bool update, int n, gp_buf *names, gp_buf *vals)
{
    bool   multi = strchr(c->write, ',') != NULL;
    gp_err rc;

    if (update) {
        rc = gp_buf_printf(vals, multi ? "%s(%s) = (" : "%s%s = ", vals->n ? ", " : "", c->write);
        rc = rc ? rc : gp_buf_printf(vals, c->cast, n);
        return rc ? rc : (multi ? gp_buf_puts(vals, ")") : GP_EOK);
    }
    rc = gp_buf_printf(names, ", %s", c->write);
    rc = rc ? rc : gp_buf_puts(vals, ", ");
    return rc ? rc : gp_buf_printf(vals, c->cast, n);
}

static const gp_dbcol *
key_col(const gp_dbcol *cols)
{
    for (; cols->field != NULL; cols++)
        if (cols->flags & GP_DBCOL_KEY)
            return cols;
    return NULL;
}

gp_err
gp_dbrow_write(const char *table, const gp_msg_desc *d, const gp_dbcol *cols, const void *msg,
               bool update, gp_buf *sql, gp_dbparams *p)
{
    const gp_dbcol *key = key_col(cols);
    int             fk = key != NULL ? gp_msg_field_index(d, key->field) : -1;
    gp_buf          names, vals;
    gp_err          rc;

    if (fk < 0)
        return GP_ENOTFOUND;
    rc = param_field(p, &d->fields[fk], key, msg);                 /* $1 */
    gp_buf_init(&names, 0);
    gp_buf_init(&vals, 0);
    for (const gp_dbcol *c = cols; c->field != NULL && rc == GP_EOK; c++) {
        int fi = gp_msg_field_index(d, c->field);

        if (fi < 0)
            rc = GP_ENOTFOUND;
        else if ((c->flags & (GP_DBCOL_RO | GP_DBCOL_KEY)) || c->write == NULL ||
                 !wanted(d, msg, fi, update))
            continue;
        rc = rc ? rc : param_field(p, &d->fields[fi], c, msg);
        rc = rc ? rc : write_one(c, update, p->n, &names, &vals);
    }
    if (rc == GP_EOK && update && vals.n == 0)
        rc = GP_EINVAL;
    if (rc == GP_EOK && update)
        rc = gp_buf_printf(sql, "UPDATE %s t SET %s WHERE %s = $1 RETURNING ", table, vals.p,
                           key->write);
    else if (rc == GP_EOK)
        rc = gp_buf_printf(sql, "INSERT INTO %s AS t (%s%s) VALUES ($1%s) RETURNING ", table,
                           key->write, names.p ? names.p : "", vals.p ? vals.p : "");
    if (rc == GP_EOK)
        rc = gp_dbrow_select(cols, sql);
    gp_buf_fini(&names);
    gp_buf_fini(&vals);
    return rc;
}

/* ---- rows ------------------------------------------------------------- */

gp_err
gp_dbrow_from_text(const gp_msg_desc *d, const gp_dbcol *cols, const char *const *vals,
                   void *msg, const gp_dbcol **bad)
{
    gp_err rc = GP_EOK;

    for (int i = 0; cols[i].field != NULL && rc == GP_EOK; i++) {
        const gp_dbcol *c = &cols[i];
        int             fi = gp_msg_field_index(d, c->field);

        if (fi < 0)
            rc = GP_ENOTFOUND;
        else if (c->from_text != NULL)
            rc = c->from_text(&d->fields[fi], msg, vals[i]);
        else
            rc = gp_dbrow_set_field(d, &d->fields[fi], msg, vals[i]);
        if (rc != GP_EOK && bad != NULL)
            *bad = c;
    }
    return rc;
}

gp_err
gp_dbrow_to_msg(const gp_msg_desc *d, const gp_dbcol *cols, const struct pg_result *res, int row,
                void *msg, const gp_dbcol **bad)
{
    const char *vals[GP_DB_MAX_PARAMS];
    int         n = gp_dbrow_ncols(cols);

    if (n > GP_DB_MAX_PARAMS || n > PQnfields(res) || row < 0 || row >= PQntuples(res))
        return GP_EINVAL;
    for (int i = 0; i < n; i++)
        vals[i] = PQgetvalue(res, row, i);
    return gp_dbrow_from_text(d, cols, vals, msg, bad);
}

#define BOOLOID_ 16                        /* pg_type.h: bool */

gp_err
gp_dbrow_named_to_msg(const gp_msg_desc *d, const struct pg_result *res, int row, void *msg,
                      gp_dbrow_col_fn *set)
{
    for (int c = 0; c < PQnfields(res); c++) {
        const char *name = PQfname(res, c), *v;
        int         idx = gp_msg_field_index(d, name);
        gp_err      rc = GP_ENOTFOUND;

        if (idx < 0 || PQgetisnull(res, row, c))
            continue;                      /* not carried, or NULL: left unset */
        v = PQgetvalue(res, row, c);
        if (PQftype(res, c) == BOOLOID_)   /* PostgreSQL prints t / f */
            v = v[0] == 't' ? "true" : "false";
        if (set != NULL)
            rc = set(d, &d->fields[idx], msg, v);
        if (rc == GP_ENOTFOUND)
            rc = gp_msg_set_text(d, msg, name, v, NULL, 0);
        if (rc != GP_EOK) {
            GP_ERROR("row_decode_failed", "msg=%s field=%s value=\"%.80s\" code=%s", d->name,
                     name, v, gp_err_name(rc));
            return rc;
        }
    }
    return GP_EOK;
}

gp_err
gp_dbrow_named_to_array(const gp_msg_desc *d, const char *field, const PGresult *res, void *msg)
{
    int             idx = gp_msg_field_index(d, field);
    const gp_field *f;
    gp_arr         *a;
    int             n = PQntuples(res);
    gp_err          rc = GP_EOK;

    if (idx < 0 || d->fields[idx].type != GP_T_ARR || d->fields[idx].elem != GP_T_OBJ ||
        d->fields[idx].sub == NULL)
        return GP_ENOTFOUND;
    f = &d->fields[idx];
    a = (gp_arr *)((char *)msg + f->offset);
    if ((uint32_t)n > f->limit)
        n = (int)f->limit;
    if (n > 0 && (a->v = calloc((size_t)n, f->sub->size)) == NULL)
        return GP_ENOMEM;
    a->n = (uint32_t)n;
    for (int i = 0; i < n && rc == GP_EOK; i++)
        rc = gp_dbrow_named_to_msg(f->sub, res, i, (char *)a->v + (size_t)i * f->sub->size, NULL);
    *(uint64_t *)msg |= (uint64_t)1 << idx;        /* every message starts with its has-bits */
    return rc;
}
