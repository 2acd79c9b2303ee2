/* ratelimit_test.c -- per-tenant limits: the override string (good and
 * bad), the token bucket (burst, refill, retry hint, a 10x sender gets its
 * rate and no more), the in-flight cap, tenants independent of each
 * other, and the bounded table (idle tenants forgotten, the overflow
 * entry when every entry is busy). */
#include <stdio.h>
#include <string.h>

#include "gp/ratelimit.h"
#include "test.h"

static gp_tlimits *
make(unsigned rate, unsigned burst, unsigned inflight, const char *ov)
{
    gp_tlimit_cfg def = {rate, burst, inflight};
    gp_tlimits   *t = NULL;
    char          err[256] = "";

    if (gp_tlimits_new(&def, ov, err, sizeof(err), &t) != GP_EOK)
        printf("# %s\n", err);
    return t;
}

static gp_err
parse(const char *ov, char *err, size_t n)
{
    gp_tlimit_cfg def = {10, 20, 5};
    gp_tlimits   *t = NULL;
    gp_err        rc = gp_tlimits_new(&def, ov, err, n, &t);

    gp_tlimits_free(t);
    return rc;
}

static void
test_parse(void)
{
    gp_tlimits          *t = make(10, 20, 5, " acme=100/200/50,beta=5//, gamma=/1 delta=");
    const gp_tlimit_cfg *c;
    char                 err[256];
    gp_tlimit_cfg        bad = {10, 0, 0};
    gp_tlimits          *u = NULL;

    T_OK(t != NULL);
    c = gp_tlimits_lookup(t, "acme");
    T_OK(c->rate == 100 && c->burst == 200 && c->inflight == 50);
    c = gp_tlimits_lookup(t, "beta");
    T_OKM(c->rate == 5 && c->burst == 20 && c->inflight == 5, "an empty field keeps the default");
    c = gp_tlimits_lookup(t, "gamma");
    T_OKM(c->rate == 10 && c->burst == 1 && c->inflight == 5, "missing fields keep the default");
    c = gp_tlimits_lookup(t, "delta");
    T_OK(c->rate == 10 && c->burst == 20 && c->inflight == 5);
    c = gp_tlimits_lookup(t, "zeta");
    T_OKM(c->rate == 10 && c->burst == 20, "a tenant without an override gets the default");
    gp_tlimits_free(t);
    T_EQ_INT(parse("", err, sizeof(err)), GP_EOK);
    T_EQ_INT(parse(NULL, err, sizeof(err)), GP_EOK);
    T_EQ_INT(parse("acme", err, sizeof(err)), GP_EINVAL);
    T_OKM(strstr(err, "tenant=rate/burst/inflight") != NULL, "the detail says the form: %s", err);
    T_EQ_INT(parse("ac.me=1/1/1", err, sizeof(err)), GP_EINVAL);
    T_EQ_INT(parse("=1/1/1", err, sizeof(err)), GP_EINVAL);
    T_EQ_INT(parse("acme=1/1/1/1", err, sizeof(err)), GP_EINVAL);
    T_EQ_INT(parse("acme=x/1/1", err, sizeof(err)), GP_EINVAL);
    T_EQ_INT(parse("acme=-1/1/1", err, sizeof(err)), GP_EINVAL);
    T_EQ_INT(parse("acme=1000001//", err, sizeof(err)), GP_EINVAL);
    T_EQ_INT(parse("acme=5/0/1", err, sizeof(err)), GP_EINVAL);
    T_OKM(strstr(err, "burst at least 1") != NULL, "a rate with burst 0 is refused: %s", err);
    T_EQ_INT(parse("acme=0/0/1", err, sizeof(err)), GP_EOK);
    T_EQ_INT(parse("acme=1/1/1 acme=2/2/2", err, sizeof(err)), GP_EINVAL);
    T_OK(strstr(err, "twice") != NULL);
    T_EQ_INT(gp_tlimits_new(&bad, "", err, sizeof(err), &u), GP_EINVAL);
    T_OK(u == NULL);
}

static void
test_bucket(void)
{
    gp_tlimits *t = make(10, 5, 0, NULL);
    int         slot, ok = 0, refused = 0;
    unsigned    retry;

    for (int i = 0; i < 5; i++)
        T_EQ_INT(gp_tlimits_admit(t, "acme", 1000, &slot, &retry), GP_TL_OK);
    T_EQ_INT(gp_tlimits_admit(t, "acme", 1000, &slot, &retry), GP_TL_RATE);
    T_EQ_INT(retry, 100);
    T_OK(strcmp(gp_tlimits_name(t, slot), "acme") == 0);
    T_EQ_INT(gp_tlimits_admit(t, "acme", 1099, &slot, &retry), GP_TL_RATE);
    T_EQ_INT(retry, 1);
    T_EQ_INT(gp_tlimits_admit(t, "acme", 1100, &slot, &retry), GP_TL_OK);
    T_EQ_INT(gp_tlimits_admit(t, "beta", 1100, &slot, &retry), GP_TL_OK);
    /* 10x its rate for 10 s: 100 requests a second at 10/s, burst 5 */
    for (int ms = 2000; ms < 12000; ms += 10) {
        if (gp_tlimits_admit(t, "gamma", ms, &slot, &retry) == GP_TL_OK)
            ok++;
        else
            refused++;
    }
    T_OKM(ok == 5 + 99 || ok == 5 + 100, "10x the rate for 10 s: %d admitted (burst + rate x 10 s)",
          ok);
    T_EQ_INT(ok + refused, 1000);
    /* an hour idle refills to the burst, not beyond */
    for (int i = 0; i < 6; i++)
        ok = gp_tlimits_admit(t, "acme", 3600000, &slot, &retry) == GP_TL_OK ? i + 1 : ok;
    T_EQ_INT(ok, 5);
    gp_tlimits_free(t);
    t = make(0, 0, 0, NULL);
    ok = 0;
    for (int i = 0; i < 100000; i++)
        ok += gp_tlimits_admit(t, "acme", 0, &slot, &retry) == GP_TL_OK;
    T_OKM(ok == 100000, "rate 0 and inflight 0: no limit (%d of 100000 at once)", ok);
    gp_tlimits_free(t);
}

static void
test_inflight(void)
{
    gp_tlimits *t = make(0, 0, 2, "beta=0/0/0");
    int         a, b, c, d;
    unsigned    retry;

    T_EQ_INT(gp_tlimits_admit(t, "acme", 0, &a, &retry), GP_TL_OK);
    T_EQ_INT(gp_tlimits_admit(t, "acme", 0, &b, &retry), GP_TL_OK);
    T_EQ_INT(gp_tlimits_inflight(t, a), 2);
    T_EQ_INT(gp_tlimits_admit(t, "acme", 0, &c, &retry), GP_TL_INFLIGHT);
    T_EQ_INT(retry, 0);
    T_EQ_INT(gp_tlimits_admit(t, "other", 0, &d, &retry), GP_TL_OK);
    gp_tlimits_end(t, a);
    T_EQ_INT(gp_tlimits_admit(t, "acme", 0, &c, &retry), GP_TL_OK);
    T_EQ_INT(c, a);
    for (int i = 0; i < 50; i++)
        gp_tlimits_admit(t, "beta", 0, &d, &retry);
    T_OKM(gp_tlimits_inflight(t, d) == 50, "an override of inflight 0: no cap for that tenant");
    gp_tlimits_free(t);
}

static void
test_table(void)
{
    gp_tlimits *t = make(100, 1, 1, NULL);
    int         slot[GP_MAX_TENANT_LIMITS], s, late;
    unsigned    retry;
    char        name[32];
    int         own = 0;

    for (int i = 0; i < GP_MAX_TENANT_LIMITS; i++) {
        snprintf(name, sizeof(name), "t%d", i);
        own += gp_tlimits_admit(t, name, 0, &slot[i], &retry) == GP_TL_OK &&
               strcmp(gp_tlimits_name(t, slot[i]), name) == 0;
    }
    T_EQ_INT(own, GP_MAX_TENANT_LIMITS);
    T_EQ_INT(gp_tlimits_admit(t, "late", 0, &late, &retry), GP_TL_OK);
    T_OKM(strcmp(gp_tlimits_name(t, late), GP_TLIMIT_OTHER) == 0,
          "every entry busy: a new tenant shares the overflow entry");
    T_EQ_INT(gp_tlimits_overflows(t), 1);
    T_EQ_INT(gp_tlimits_admit(t, "later", 0, &s, &retry), GP_TL_INFLIGHT);
    gp_tlimits_end(t, late);
    /* t0's request ends; its entry is forgotten once its bucket has refilled */
    gp_tlimits_end(t, slot[0]);
    gp_tlimits_admit(t, "late", 5, &s, &retry);
    T_OKM(strcmp(gp_tlimits_name(t, s), GP_TLIMIT_OTHER) == 0, "t0 not yet refilled at 5 ms");
    T_EQ_INT(gp_tlimits_admit(t, "late", 20, &s, &retry), GP_TL_OK);
    T_OKM(strcmp(gp_tlimits_name(t, s), "late") == 0, "an idle entry is reused for a new tenant");
    T_EQ_INT(s, slot[0]);
    T_EQ_INT(gp_tlimits_admit(t, "t1", 20, &s, &retry), GP_TL_INFLIGHT);
    T_OKM(s == slot[1], "the others keep their entries across the rebuild");
    T_EQ_INT(gp_tlimits_admit(t, "t0", 20, &s, &retry), GP_TL_OK);
    T_OKM(strcmp(gp_tlimits_name(t, s), GP_TLIMIT_OTHER) == 0, "t0 comes back as a new tenant");
    gp_tlimits_free(t);
}

int
main(void)
{
    test_parse();
    test_bucket();
    test_inflight();
    test_table();
    return T_DONE();
}
