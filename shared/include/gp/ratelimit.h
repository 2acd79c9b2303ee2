/* gp/ratelimit.h -- fair limits per tenant: a token bucket (a rate and a
 * burst) and an in-flight cap for each tenant, kept in a bounded table.
 *
 * The chassis asks gp_tlimits_admit before a request of an operation with
 * x-gp-limit-by takes one of the process's shared in-flight slots
 * (GP_MAX_INFLIGHT), so one tenant's burst is refused with RATE_LIMITED
 * instead of filling them; it calls gp_tlimits_end when an admitted
 * request has been answered.  Limits are per process: with N instances in
 * a queue group a tenant gets up to N times its rate.
 *
 * Limits come from a default (tenant-rate, tenant-burst, tenant-inflight)
 * and per-tenant overrides in one config string (tenant-limits):
 *   "acme=100/200/50 beta=5/10/4"  tenant=rate/burst/inflight
 * separated by spaces or commas; a field left empty ("acme=100//") keeps
 * the default; rate 0 means no rate limit, inflight 0 no in-flight cap.
 *
 * The table holds GP_MAX_TENANT_LIMITS tenants.  A tenant's entry whose
 * bucket has refilled and that has nothing in flight is forgotten when
 * room is needed (it would behave as a new one); when every entry is
 * busy, further tenants share one overflow entry ("_other") with the
 * default limits, counted by gp_tlimits_overflows.
 *
 * Pure: time is given (monotonic ms), no I/O, no threads, no globals. */
#ifndef GP_RATELIMIT_H
#define GP_RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "gp/err.h"

/* Tenants one process tracks at once (plus the overflow entry). */
#ifndef GP_MAX_TENANT_LIMITS
# define GP_MAX_TENANT_LIMITS    1024
#endif
/* Per-tenant overrides in tenant-limits. */
#ifndef GP_MAX_TENANT_OVERRIDES
# define GP_MAX_TENANT_OVERRIDES 256
#endif

#define GP_TLIMIT_OTHER "_other"       /* the overflow entry's name */

typedef struct gp_tlimit_cfg {
    unsigned rate;                     /* requests per second; 0 = no rate limit */
    unsigned burst;                    /* bucket size in requests (>= 1 when rate > 0) */
    unsigned inflight;                 /* requests in flight at once; 0 = no cap */
} gp_tlimit_cfg;

typedef enum gp_tl_verdict {
    GP_TL_OK = 0,                      /* admitted: call gp_tlimits_end when it ends */
    GP_TL_RATE,                        /* refused: the bucket is empty */
    GP_TL_INFLIGHT                     /* refused: the tenant's in-flight cap is reached */
} gp_tl_verdict;

typedef struct gp_tlimits gp_tlimits;

/* Builds the table from the defaults and the override string (NULL or ""
 * for none).  INVAL with a detail in err for a bad string (a tenant that
 * is not an id, a number out of range, a burst of 0 with a rate, the same
 * tenant twice, more than GP_MAX_TENANT_OVERRIDES), NOMEM. */
gp_err gp_tlimits_new(const gp_tlimit_cfg *def, const char *overrides, char *err, size_t errlen,
                      gp_tlimits **out);
void   gp_tlimits_free(gp_tlimits *t);

/* Checks one request of tenant at now_ms.  OK: a token was taken and the
 * request counts as in flight; *slot names the tenant's entry for
 * gp_tlimits_end (and the accessors below) and stays valid until then.
 * RATE: *retry_ms is when the bucket has its next token.  INFLIGHT:
 * *retry_ms is 0 (the table cannot know when one ends).  On a refusal
 * *slot names the entry too, until the next call that admits a new
 * tenant. */
gp_tl_verdict gp_tlimits_admit(gp_tlimits *t, const char *tenant, int64_t now_ms, int *slot,
                               unsigned *retry_ms);
/* An admitted request has ended. */
void          gp_tlimits_end(gp_tlimits *t, int slot);

/* The tenant of an entry ("_other" for the overflow) and its limits. */
const char          *gp_tlimits_name(const gp_tlimits *t, int slot);
const gp_tlimit_cfg *gp_tlimits_cfg(const gp_tlimits *t, int slot);
unsigned             gp_tlimits_inflight(const gp_tlimits *t, int slot);
/* The limits a tenant gets (its override or the default). */
const gp_tlimit_cfg *gp_tlimits_lookup(const gp_tlimits *t, const char *tenant);
/* Tenants that found the table full and went to the overflow entry. */
uint64_t             gp_tlimits_overflows(const gp_tlimits *t);

#endif
