/* rate.c -- one usage record into ledger legs (rate.h). */
#include <stdio.h>
#include <string.h>

#include "gp/id.h"
#include "gp/money.h"
#include "rate.h"

#define MAX_GPUS_PER_NODE 16
#define MAX_MJ_PER_GPU_MS 1500            /* 1.5 kW per GPU: more is no GPU */

void
bill_check(const msg_usage_record *r, char *why, size_t n)
{
    uint64_t span = (uint64_t)r->window_ms + 60000;

    why[0] = '\0';
    if (!gp_id_ok(r->job_id) || !gp_id_ok(r->site) || !gp_id_ok(r->node))
        snprintf(why, n, "job_id, site, node: not ids");
    else if (!gp_id_ok(r->tenant))
        snprintf(why, n, "unknown attempt: no tenant");
    else if (r->window_ms == 0 || r->site_seq == 0)
        snprintf(why, n, "window_ms and site_seq must be positive");
    else if (r->gpu_ms > span * MAX_GPUS_PER_NODE)
        snprintf(why, n, "gpu_ms %llu: more than %d GPUs can deliver in a %u ms window",
                 (unsigned long long)r->gpu_ms, MAX_GPUS_PER_NODE, r->window_ms);
    else if (r->energy_mj > r->gpu_ms * MAX_MJ_PER_GPU_MS + 60000000ull)
        snprintf(why, n, "energy_mj %llu: more than %d W per GPU",
                 (unsigned long long)r->energy_mj, MAX_MJ_PER_GPU_MS);
    else if (GP_HAS(r, MSG_USAGE_RECORD__CURRENCY) && gp_currency_exponent(r->currency) < 0)
        snprintf(why, n, "currency '%s': not an ISO 4217 code we know", r->currency);
}

int64_t
bill_power_price(const bill_site *s, uint64_t t_ms)
{
    int64_t  local = (int64_t)(t_ms / 60000) + s->tz_min;
    int32_t  min = (int32_t)(((local % 1440) + 1440) % 1440);
    int64_t  p = 0;

    for (uint32_t i = 0; i < s->nprices; i++)
        if (s->price[i].start_min <= min)
            p = s->price[i].micros_per_kwh;
    return p;
}

static void
leg(bill_rated *o, const char *kind, const char *cur, const char *tenant, const char *purpose,
    int64_t amount)
{
    bill_leg *l;

    if (amount == 0 || o->nlegs >= BILL_MAX_LEGS)
        return;
    l = &o->leg[o->nlegs++];
    snprintf(l->kind, sizeof(l->kind), "%s", kind);
    snprintf(l->currency, sizeof(l->currency), "%s", cur);
    snprintf(l->tenant, sizeof(l->tenant), "%s", tenant);
    snprintf(l->purpose, sizeof(l->purpose), "%s", purpose);
    l->amount = amount;
}

static gp_err
charge_legs(const bill_cfg *c, const msg_usage_record *r, const bill_site *s, const char *cur,
            bill_rated *o)
{
    int64_t w[3], part[3];
    int32_t share = s->partner ? s->share_bp : 0;
    gp_err  rc;

    if (share < 0 || c->fee_bp < 0 || share + c->fee_bp > 10000)
        return GP_EINVAL;
    w[0] = share;
    w[1] = 10000 - share - c->fee_bp;
    w[2] = c->fee_bp;
    if (o->gpu_nanos <= 0)
        return GP_EOK;
    if ((rc = gp_split_largest_remainder(o->gpu_nanos, w, 3, part)) != GP_EOK)
        return rc;
    leg(o, "charge", cur, r->tenant, "receivable", o->gpu_nanos);
    leg(o, "charge", cur, s->owner, "payable", -part[0]);
    leg(o, "charge", cur, c->operator_tenant, "revenue", -part[1]);
    leg(o, "charge", cur, c->fee_tenant, "fees", -part[2]);
    return GP_EOK;
}

gp_err
bill_rate(const bill_cfg *c, const msg_usage_record *r, const bill_site *s, int64_t price_micros,
          const char *price_currency, bill_rated *o, char *why, size_t n)
{
    int     ex = gp_currency_exponent(price_currency), sx = gp_currency_exponent(s->currency);
    int64_t nanos;
    gp_err  rc;

    memset(o, 0, sizeof(*o));
    why[0] = '\0';
    if (ex < 0 || sx < 0) {
        snprintf(why, n, "currency: price in '%s', site in '%s'", price_currency, s->currency);
        return GP_EINVAL;
    }
    o->tier_bp = s->latency_tier >= 0 && s->latency_tier < BILL_TIERS ? c->tier_bp[s->latency_tier]
                                                                      : 10000;
    rc = gp_rate_gpu_ms(r->gpu_ms, price_micros, &nanos);
    if (rc == GP_EOK)
        rc = gp_apply_bp(nanos, o->tier_bp, &o->gpu_nanos);
    if (rc == GP_EOK)
        rc = gp_nanos_to_minor(o->gpu_nanos, ex, &o->charge_minor, &o->charge_residue);
    if (rc == GP_EOK) {
        o->power_price_micros = bill_power_price(s, r->window * (uint64_t)r->window_ms);
        rc = gp_rate_energy(r->energy_mj, o->power_price_micros,
                            s->pue_milli > 0 ? (uint32_t)s->pue_milli : 1000, &o->power_nanos);
    }
    if (rc == GP_EOK)
        rc = gp_nanos_to_minor(o->power_nanos, sx, &o->power_minor, &o->power_residue);
    if (rc == GP_EOK)
        rc = charge_legs(c, r, s, price_currency, o);
    if (rc != GP_EOK) {
        snprintf(why, n, "rating: %s", rc == GP_ERANGE ? "an amount overflowed" : "bad shares");
        return rc;
    }
    if (o->power_nanos > 0) {
        leg(o, "power", s->currency, r->tenant, "receivable", o->power_nanos);
        leg(o, "power", s->currency, s->owner[0] ? s->owner : c->operator_tenant, "power",
            -o->power_nanos);
    }
    return GP_EOK;
}
