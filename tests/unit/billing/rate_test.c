/* rate_test.c -- billing's rating (services/billing/rate.c) on the
 * hand-computed case of billing_test.c and on the checks of bad records. */
#include <string.h>

#include "../../../services/billing/rate.h"
#include "test.h"

static const bill_cfg cfg = {.operator_tenant = "op", .fee_tenant = "op", .fee_bp = 500,
                             .tier_bp = {12000, 10000, 9000, 8000}};

static bill_site
site(void)
{
    bill_site s = {0};

    strcpy(s.id, "bsite");
    strcpy(s.owner, "bp1");
    strcpy(s.currency, "KWD");
    s.latency_tier = 0;
    s.pue_milli = 1250;
    s.partner = true;
    s.share_bp = 3000;
    s.nprices = 2;
    s.price[0].start_min = 0;
    s.price[0].micros_per_kwh = 30000;
    s.price[1].start_min = 360;
    s.price[1].micros_per_kwh = 75000;
    return s;
}

static msg_usage_record
rec(uint64_t hour, uint64_t gpu_ms, uint64_t mj)
{
    msg_usage_record r = {0};

    strcpy(r.id, "j.1.n.1");
    strcpy(r.job_id, "j");
    strcpy(r.tenant, "bc1");
    strcpy(r.site, "bsite");
    strcpy(r.node, "n");
    r.attempt = 1;
    r.window_ms = 3600000;
    r.window = 1796083200000ull / 3600000 + hour;
    r.gpu_ms = gpu_ms;
    r.energy_mj = mj;
    r.site_seq = 1;
    return r;
}

static long long
leg(const bill_rated *o, const char *tenant, const char *purpose, const char *cur)
{
    for (unsigned i = 0; i < o->nlegs; i++)
        if (!strcmp(o->leg[i].tenant, tenant) && !strcmp(o->leg[i].purpose, purpose) &&
            !strcmp(o->leg[i].currency, cur))
            return o->leg[i].amount;
    return 0;
}

int
main(void)
{
    bill_site        s = site();
    msg_usage_record r1 = rec(5, 3600000, 3600000000ull), r2 = rec(6, 1800000, 1800000000ull);
    bill_rated       o;
    char             why[256];

    T_OK(bill_rate(&cfg, &r1, &s, 2500000, "USD", &o, why, sizeof(why)) == GP_EOK);
    T_EQ_INT(o.charge_minor, 300);
    T_EQ_INT(leg(&o, "bc1", "receivable", "USD"), 3000000000LL);
    T_EQ_INT(leg(&o, "bp1", "payable", "USD"), -900000000LL);
    T_EQ_INT(leg(&o, "op", "revenue", "USD"), -1950000000LL);
    T_EQ_INT(leg(&o, "op", "fees", "USD"), -150000000LL);
    T_EQ_INT(o.power_price_micros, 30000);
    T_EQ_INT(o.power_minor, 38);               /* 37.5 fils, half to even */
    T_EQ_INT(o.power_residue, -500000);
    T_EQ_INT(leg(&o, "bp1", "power", "KWD"), -37500000LL);
    T_OK(bill_rate(&cfg, &r2, &s, 3000000, "USD", &o, why, sizeof(why)) == GP_EOK);
    T_EQ_INT(o.charge_minor, 180);
    T_EQ_INT(leg(&o, "bp1", "payable", "USD"), -540000000LL);
    T_EQ_INT(leg(&o, "op", "revenue", "USD"), -1170000000LL);
    T_EQ_INT(leg(&o, "op", "fees", "USD"), -90000000LL);
    T_EQ_INT(o.power_price_micros, 75000);
    T_EQ_INT(o.power_minor, 47);               /* 46.875 fils */
    T_EQ_INT(o.power_nanos, 46875000);
    long long sum = 0;
    for (unsigned i = 0; i < o.nlegs; i++)
        sum += o.leg[i].amount;
    T_EQ_INT(sum, 0);
    s.partner = false;                         /* an operator-owned site: no payable leg */
    T_OK(bill_rate(&cfg, &r2, &s, 3000000, "USD", &o, why, sizeof(why)) == GP_EOK);
    T_EQ_INT(leg(&o, "bp1", "payable", "USD"), 0);
    T_EQ_INT(leg(&o, "op", "revenue", "USD"), -1710000000LL);
    T_OK(bill_rate(&cfg, &r2, &s, 3000000, "XXQ", &o, why, sizeof(why)) == GP_EINVAL);
    r2.gpu_ms = 999999999999ull;
    bill_check(&r2, why, sizeof(why));
    T_OKM(strstr(why, "more than") != NULL, "impossible GPU-ms refused: %s", why);
    r2.gpu_ms = 1000;
    r2.energy_mj = 1000 * 1500 + 60000001;
    bill_check(&r2, why, sizeof(why));
    T_OKM(strstr(why, "W per GPU") != NULL, "impossible energy refused: %s", why);
    r2.energy_mj = 10;
    r2.tenant[0] = '\0';
    bill_check(&r2, why, sizeof(why));
    T_OKM(strstr(why, "unknown attempt") != NULL, "no tenant refused: %s", why);
    return T_DONE();
}
