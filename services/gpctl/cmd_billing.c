/* cmd_billing.c -- gpctl get usage|statements|balances, describe statement,
 * close period: billing through gp.api.<tenant>.billing.* (scoped to the
 * tenant by the subject, so a tenant's own NATS identity can run them) and
 * gp.admin.billing.close.  Money is shown in the currency's minor unit,
 * rounded half to even (gp/money.h); -o json gives the nanos too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/limits.h"
#include "gp/money.h"
#include "gpctl.h"

typedef struct bill_opts {
    const char       *name;            /* PERIOD (describe statement, close period) */
    msg_billing_query q;
    const char       *tenant;
} bill_opts;

static int
parse(const char *verb, int argc, char **argv, bill_opts *o)
{
    memset(o, 0, sizeof(*o));
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        char        flag[32];
        const char *eq = strchr(a, '=');

        if (a[0] != '-') {
            if (o->name != NULL)
                return usage_error(verb, "unexpected argument \"%s\"", a);
            o->name = a;
            continue;
        }
        snprintf(flag, sizeof(flag), "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
        v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (v == NULL)
            return usage_error(verb, "%s needs a value", flag);
        if (strcmp(flag, "--tenant") == 0)
            o->tenant = v;
        else if (strcmp(flag, "--site") == 0)
            snprintf(o->q.site, sizeof(o->q.site), "%s", v);
        else if (strcmp(flag, "--period") == 0)
            snprintf(o->q.period, sizeof(o->q.period), "%s", v);
        else
            return usage_error(verb, "unknown flag %s", flag);
    }
    if (o->tenant == NULL)
        return usage_error(verb, "--tenant T is required");
    return GPCTL_OK;
}

/* "4.80 USD" from nanos of the currency's unit. */
static void
fmt_money(char *buf, size_t n, int64_t nanos, const char *cur)
{
    int     e = gp_currency_exponent(cur);
    int64_t minor, p = 1;

    if (e < 0 || gp_nanos_to_minor(nanos, e, &minor, NULL) != GP_EOK) {
        snprintf(buf, n, "%lld n%s", (long long)nanos, cur);
        return;
    }
    for (int i = 0; i < e; i++)
        p *= 10;
    if (e == 0) {
        snprintf(buf, n, "%lld %s", (long long)minor, cur);
    } else {
        char frac[24];

        snprintf(frac, sizeof(frac), "%0*lld", e & 15, llabs(minor) % p);
        snprintf(buf, n, "%s%lld.%s %s", minor < 0 ? "-" : "", llabs(minor) / p, frac, cur);
    }
}

static int
call(gpctl *c, const gp_op *op, const char *tenant, const msg_billing_query *q,
     const gp_msg_desc *rd, void *out)
{
    char subj[GP_MAX_SUBJECT + 1];
    gp_err rc = tenant ? gp_op_subjectf(op, subj, sizeof(subj), tenant)
                       : gp_op_subjectf(op, subj, sizeof(subj));

    if (rc != GP_EOK)
        return usage_error("get", "tenant \"%s\": not an id", tenant ? tenant : "");
    return ctl_call(c, subj, &msg_billing_query_desc, q, rd, out);
}

static void
done_table(table *t, const char *what)
{
    if (t->nrows == 0)
        fprintf(stderr, "No %s found.\n", what);
    else {
        table_print(t, stdout, 0);
        fflush(stdout);
        fprintf(stderr, "%zu %s\n", t->nrows, what);
    }
    table_free(t);
}

static const char *const usage_heads[] = {"RECORD", "CUSTOMER", "SITE", "WINDOW", "GPU-S",
                                          "ENERGY", "CHARGE", "POWER", "CREDITED-S", "PERIOD",
                                          NULL};

int
cmd_get_usage(gpctl *c, int argc, char **argv)
{
    bill_opts      o;
    msg_usage_list l = {0};
    table          t;
    json_list      j;
    gp_buf         b;
    int            rc = parse("get", argc, argv, &o);

    if (rc != GPCTL_OK || (rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    table_init(&t, usage_heads);
    gp_buf_init(&b, 0);
    if (c->out == OUT_JSON)
        json_list_begin(&j, stdout);
    o.q.limit = 500;
    do {
        gp_msg_clear(&msg_usage_list_desc, &l);
        rc = call(c, GP_OP_API_BILLING_USAGE, o.tenant, &o.q, &msg_usage_list_desc, &l);
        for (uint32_t i = 0; rc == GPCTL_OK && i < l.records.n; i++) {
            const msg_billed_usage *u = (const msg_billed_usage *)l.records.v + i;
            char gs[32], en[32], ch[48], pw[48], cr[32], w[32];

            if (c->out == OUT_JSON) {
                gp_buf_reset(&b);
                if (gp_msg_to_json(&msg_billed_usage_desc, u, &b) == GP_EOK)
                    json_list_item(&j, b.p, b.n);
                continue;
            }
            snprintf(gs, sizeof(gs), "%.1f", u->gpu_ms / 1000.0);
            fmt_energy(en, sizeof(en), u->energy_mj);
            fmt_money(ch, sizeof(ch), u->charge_nanos, u->currency);
            fmt_money(pw, sizeof(pw), u->power_nanos, u->power_currency);
            snprintf(cr, sizeof(cr), "%.1f", u->credited_gpu_ms / 1000.0);
            fmt_iso8601(w, sizeof(w), u->window_start_ms);
            const char *cells[] = {u->id, u->tenant, u->site, w, gs, en, ch, pw, cr, u->period};
            table_add(&t, cells);
        }
        snprintf(o.q.after, sizeof(o.q.after), "%s", l.next);
    } while (rc == GPCTL_OK && l.next[0]);
    gp_msg_clear(&msg_usage_list_desc, &l);
    if (c->out == OUT_JSON) {
        json_list_end(&j);
        table_free(&t);
    } else if (rc == GPCTL_OK)
        done_table(&t, "usage records");
    else
        table_free(&t);
    gp_buf_fini(&b);
    return rc;
}

static const char *const stmt_heads[] = {"PERIOD", "ISSUED", "SHA256 (FIRST 16)", NULL};

int
cmd_get_statements(gpctl *c, int argc, char **argv)
{
    bill_opts          o;
    msg_statement_list l = {0};
    table              t;
    int                rc = parse("get", argc, argv, &o);

    if (rc != GPCTL_OK || (rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    rc = call(c, GP_OP_API_BILLING_STATEMENTS, o.tenant, &o.q, &msg_statement_list_desc, &l);
    if (rc == GPCTL_OK && c->out == OUT_JSON)
        rc = ctl_print_json(&msg_statement_list_desc, &l);
    else if (rc == GPCTL_OK) {
        table_init(&t, stmt_heads);
        for (uint32_t i = 0; i < l.statements.n; i++) {
            const msg_statement *s = (const msg_statement *)l.statements.v + i;
            char                 when[32], hash[20];

            fmt_iso8601(when, sizeof(when), s->issued_ms);
            snprintf(hash, sizeof(hash), "%.16s", s->hash);     /* full: -o json, describe */
            const char *cells[] = {s->period, when, hash};
            table_add(&t, cells);
        }
        done_table(&t, "statements");
    }
    gp_msg_clear(&msg_statement_list_desc, &l);
    return rc;
}

static const char *const bal_heads[] = {"ACCOUNT", "PURPOSE", "BALANCE", "NANOS", NULL};

int
cmd_get_balances(gpctl *c, int argc, char **argv)
{
    bill_opts        o;
    msg_balance_list l = {0};
    table            t;
    int              rc = parse("get", argc, argv, &o);

    if (rc != GPCTL_OK || (rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    rc = call(c, GP_OP_API_BILLING_BALANCES, o.tenant, &o.q, &msg_balance_list_desc, &l);
    if (rc == GPCTL_OK && c->out == OUT_JSON)
        rc = ctl_print_json(&msg_balance_list_desc, &l);
    else if (rc == GPCTL_OK) {
        table_init(&t, bal_heads);
        for (uint32_t i = 0; i < l.balances.n; i++) {
            const msg_balance *a = (const msg_balance *)l.balances.v + i;
            char               m[48], nn[32];

            fmt_money(m, sizeof(m), a->amount_nanos, a->currency);
            snprintf(nn, sizeof(nn), "%lld", (long long)a->amount_nanos);
            const char *cells[] = {a->account, a->purpose, m, nn};
            table_add(&t, cells);
        }
        done_table(&t, "accounts");
    }
    gp_msg_clear(&msg_balance_list_desc, &l);
    return rc;
}

static void
statement_print(const msg_statement *s)
{
    char when[32];

    fmt_iso8601(when, sizeof(when), s->issued_ms);
    printf("Tenant:  %s\nPeriod:  %s\nIssued:  %s\nSHA256:  %s\nLines:\n", s->tenant, s->period,
           when, s->hash);
    for (uint32_t i = 0; i < s->lines.n; i++) {
        const msg_statement_line *l = (const msg_statement_line *)s->lines.v + i;
        char                      m[48];

        fmt_money(m, sizeof(m), l->amount_nanos, l->currency);
        printf("  %-12s %-11s %-8s %18s%s%s\n", l->kind, l->purpose, l->usage_period, m,
               l->correction ? "  correction of " : "", l->correction ? l->usage_period : "");
    }
    printf("Content (hashed):\n%s", s->content);
}

static int
statement_cmd(gpctl *c, const char *verb, int argc, char **argv, bool close)
{
    bill_opts      o;
    msg_statement *s;
    int            rc = parse(verb, argc, argv, &o);

    if (rc == GPCTL_OK && o.name == NULL)
        rc = usage_error(verb, "missing PERIOD (YYYY-MM)");
    if (rc != GPCTL_OK || (rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    if ((s = calloc(1, sizeof(*s))) == NULL)
        return GPCTL_FAIL;
    snprintf(o.q.period, sizeof(o.q.period), "%s", o.name);
    if (close)
        snprintf(o.q.tenant, sizeof(o.q.tenant), "%s", o.tenant);
    rc = call(c, close ? GP_OP_ADMIN_BILLING_CLOSE : GP_OP_API_BILLING_STATEMENT,
              close ? NULL : o.tenant, &o.q, &msg_statement_desc, s);
    if (rc == GPCTL_OK && c->out == OUT_JSON)
        rc = ctl_print_json(&msg_statement_desc, s);
    else if (rc == GPCTL_OK)
        statement_print(s);
    gp_msg_clear(&msg_statement_desc, s);
    free(s);
    return rc;
}

int
cmd_describe_statement(gpctl *c, int argc, char **argv)
{
    return statement_cmd(c, "describe", argc, argv, false);
}

int
cmd_close(gpctl *c, int argc, char **argv)
{
    if (argc < 1 || strcmp(argv[0], "period") != 0)
        return usage_error("close", "expected: close period YYYY-MM --tenant T");
    return statement_cmd(c, "close", argc - 1, argv + 1, true);
}

/* ---- the price book ------------------------------------------------------------------ */

static const char *const price_heads[] = {"PRODUCT", "PRICE / GPU-HOUR", "MICROS", "FROM", NULL};

int
cmd_get_prices(gpctl *c, int argc, char **argv)
{
    msg_list_request q = {0};
    msg_price_list   l = {0};
    table            t;
    int              rc;

    if (argc > 0)
        return usage_error("get", "get prices takes no arguments (got \"%s\")", argv[0]);
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    rc = ctl_call(c, GP_SUBJ_ADMIN_BILLING_PRICE_LIST, &msg_list_request_desc, &q,
                  &msg_price_list_desc, &l);
    if (rc == GPCTL_OK && c->out == OUT_JSON)
        rc = ctl_print_json(&msg_price_list_desc, &l);
    else if (rc == GPCTL_OK) {
        table_init(&t, price_heads);
        for (uint32_t i = 0; i < l.prices.n; i++) {
            const msg_price *p = (const msg_price *)l.prices.v + i;
            char             m[48], mi[24], from[32];

            fmt_money(m, sizeof(m), (int64_t)p->micros_per_gpu_hour * 1000, p->currency);
            snprintf(mi, sizeof(mi), "%llu", (unsigned long long)p->micros_per_gpu_hour);
            fmt_iso8601(from, sizeof(from), p->from_ms);
            const char *cells[] = {p->product, m, mi, from};
            table_add(&t, cells);
        }
        done_table(&t, "price versions");
    }
    gp_msg_clear(&msg_price_list_desc, &l);
    return rc;
}

/* "2.5" -> 2500000 micros: at most 6 decimals, no sign. */
static bool
parse_micros(const char *s, uint64_t *out)
{
    uint64_t whole = 0, frac = 0;
    int      nf = 0;
    const char *p = s;

    if (*p < '0' || *p > '9')
        return false;
    for (; *p >= '0' && *p <= '9'; p++)
        if ((whole = whole * 10 + (uint64_t)(*p - '0')) > 1000000)
            return false;
    if (*p == '.') {
        for (p++; *p >= '0' && *p <= '9'; p++, nf++) {
            if (nf == 6)
                return false;
            frac = frac * 10 + (uint64_t)(*p - '0');
        }
    }
    if (*p != '\0')
        return false;
    for (; nf < 6; nf++)
        frac *= 10;
    *out = whole * 1000000 + frac;
    return true;
}

int
cmd_set(gpctl *c, int argc, char **argv)
{
    msg_price   p = {0}, out = {0};
    const char *per = NULL, *cur = NULL, *from = NULL;
    int         rc;

    if (argc < 2 || strcmp(argv[0], "price") != 0)
        return usage_error("set", "expected: set price PRODUCT --currency CUR --per-gpu-hour N");
    snprintf(p.product, sizeof(p.product), "%s", argv[1]);
    for (int i = 2; i < argc; i++) {
        const char **slot = strcmp(argv[i], "--currency") == 0       ? &cur
                          : strcmp(argv[i], "--per-gpu-hour") == 0 ? &per
                          : strcmp(argv[i], "--from-ms") == 0      ? &from : NULL;

        if (slot == NULL || i + 1 >= argc)
            return usage_error("set", slot == NULL ? "unknown option %s" : "%s needs a value",
                               argv[i]);
        *slot = argv[++i];
    }
    if (cur == NULL || per == NULL)
        return usage_error("set", "--currency and --per-gpu-hour are required");
    snprintf(p.currency, sizeof(p.currency), "%s", cur);
    if (!parse_micros(per, &p.micros_per_gpu_hour))
        return usage_error("set", "--per-gpu-hour %s: a price like 2.50 (at most 6 decimals)",
                           per);
    if (from != NULL) {
        char *end = NULL;

        p.from_ms = strtoull(from, &end, 10);
        if (end == from || *end != '\0')
            return usage_error("set", "--from-ms %s: milliseconds since the epoch", from);
        GP_SET_HAS(&p, MSG_PRICE__FROM_MS);
    }
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    rc = ctl_call(c, GP_SUBJ_ADMIN_BILLING_PRICE_SET, &msg_price_desc, &p, &msg_price_desc, &out);
    if (rc == GPCTL_OK && c->out == OUT_JSON)
        rc = ctl_print_json(&msg_price_desc, &out);
    else if (rc == GPCTL_OK) {
        char m[48], when[32];

        fmt_money(m, sizeof(m), (int64_t)out.micros_per_gpu_hour * 1000, out.currency);
        fmt_iso8601(when, sizeof(when), out.from_ms);
        printf("price of %s: %s a GPU-hour from %s\n", out.product, m, when);
    }
    gp_msg_clear(&msg_price_desc, &out);
    return rc;
}
