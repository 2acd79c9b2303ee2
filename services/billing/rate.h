/* rate.h -- rating one usage record into balanced ledger legs.  Pure (no
 * I/O): what it needs of the site, its owner and the price book is passed
 * in, so tests/unit/billing/rate_test.c checks hand-computed cases.
 *
 * Money: integers only (gp/money.h).  A record's GPU time is rated in nanos
 * of the price's currency (price per GPU-hour in micros, times the site's
 * latency-tier modifier in basis points), its energy in nanos of the site's
 * currency (kWh x the site's time-of-day price at the window's start, local
 * time, x PUE).  Each step floors (loses < 1 nano).
 *
 * The ledger books nanos (one asset scale, 9, for every currency, chosen
 * large up front as TigerBeetle advises: a scale is hard to change later).
 * A record is a minute of one GPU: at 2 EUR a GPU-hour that is 3.3 cents,
 * and rounding each record to the cent would move its charge by up to 15%;
 * in nanos nothing is lost, and a statement rounds each of its lines once
 * to the currency's minor unit (half to even, gp_nanos_to_minor), the
 * difference going to the rounding account.  charge_minor/power_minor are
 * the record's own line rounded that way, for the record's view only.
 *
 * Legs (nanos; debit positive, credit negative; each transfer sums to 0):
 *   charge  Dr <customer>.receivable   Cr <owner>.payable (the site
 *           partner's share) / <operator>.revenue / <fees>.fees: the split
 *           is largest-remainder on [share_bp, 10000 - share_bp - fee_bp,
 *           fee_bp], so the parts sum exactly to the charge;
 *   power   Dr <customer>.receivable   Cr <owner>.power (pass-through: the
 *           site's owner pays the utility; the operator when it owns it). */
#ifndef BILLING_RATE_H
#define BILLING_RATE_H

#include <stdbool.h>
#include <stdint.h>

#include "gp/err.h"
#include "msg_gen.h"

#define BILL_ID_LEN    64
#define BILL_MAX_PRICES 48
#define BILL_MAX_LEGS  8
#define BILL_TIERS     4

typedef struct bill_site {
    char     id[BILL_ID_LEN], owner[BILL_ID_LEN], currency[4];
    int32_t  latency_tier, pue_milli, tz_min;
    bool     partner;                   /* the owner takes a revenue share */
    int32_t  share_bp;                  /* the owner's share, basis points */
    uint32_t nprices;
    struct { int32_t start_min; int64_t micros_per_kwh; } price[BILL_MAX_PRICES];
} bill_site;

typedef struct bill_cfg {
    const char *operator_tenant;        /* the network operator */
    const char *fee_tenant;             /* who platform fees go to */
    int32_t     fee_bp;                 /* platform fee, basis points of a charge */
    int32_t     tier_bp[BILL_TIERS];    /* latency-tier modifiers (10000 = x1) */
} bill_cfg;

typedef struct bill_leg {
    char    kind[12];                   /* charge | power */
    char    currency[4];
    char    tenant[BILL_ID_LEN];
    char    purpose[12];                /* receivable payable revenue fees power */
    int64_t amount;                     /* nanos; debit > 0, credit < 0 */
} bill_leg;

typedef struct bill_rated {
    int64_t  gpu_nanos, charge_minor, charge_residue;    /* in the price's currency */
    int64_t  power_nanos, power_minor, power_residue;    /* in the site's currency */
    int64_t  power_price_micros;                         /* per kWh at the window */
    int32_t  tier_bp;
    unsigned nlegs;
    bill_leg leg[BILL_MAX_LEGS];
} bill_rated;

/* Checks a record for values that cannot be (why: "" when fine): ids, a
 * window, counters no GPU could deliver in it, an unknown currency. */
void   bill_check(const msg_usage_record *r, char *why, size_t n);

/* Rates r delivered at site s, at price_micros per GPU-hour in
 * price_currency.  RANGE on an overflow, INVAL on a bad configuration
 * (why says which). */
gp_err bill_rate(const bill_cfg *c, const msg_usage_record *r, const bill_site *s,
                 int64_t price_micros, const char *price_currency, bill_rated *out, char *why,
                 size_t n);

/* The site's power price (micros per kWh) at wall time t_ms: the step of
 * its schedule in force at that minute of the site's local day. */
int64_t bill_power_price(const bill_site *s, uint64_t t_ms);

#endif
