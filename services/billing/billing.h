/* billing.h -- gridpool-billing: usage records from the stream USAGE are
 * rated (rate.h) and posted as balanced double-entry transfers in
 * PostgreSQL, many records per transaction, each record under its unique
 * id so a redelivered or republished one is a no-op; a record is acked
 * only once its transaction committed.
 *
 * Files: sites.c (what rating needs from elsewhere: the sites, followed
 * from the registry, and their owners' shares, cached; the price book
 * from billing's own table), post.c (the durable consumer, validation, batching, the one
 * statement a batch is), rate.c (the pure arithmetic), migrate.c. */
#ifndef BILLING_H
#define BILLING_H

#include <stdbool.h>
#include <stdint.h>

#include "gp/app.h"
#include "gp/db.h"
#include "gp/inventory.h"
#include "gp/limits.h"
#include "msg_gen.h"
#include "rate.h"

typedef struct billing_cfg {
    gp_common_cfg common;
    char          operator_tenant[64];
    char          fee_tenant[64];
    unsigned      fee_bp;
    unsigned      site_cache_ms;
    unsigned      book_ms;
    unsigned      batch;
} billing_cfg;

#define BILLING_OWNER_SLOTS 4096

/* A site owner's revenue share, cached site-cache-ms. */
typedef struct billing_owner {
    bool     valid;
    uint64_t loaded_ms;           /* monotonic */
    char     id[BILL_ID_LEN];
    bool     partner;
    int32_t  share_bp;
} billing_owner;

typedef struct billing_price {
    char    product[64], currency[4];
    int64_t micros;
    int64_t from_ms;
} billing_price;

typedef struct billing {
    gp_app            *app;
    const billing_cfg *cfg;
    bill_cfg           rc;
    gp_inventory      *inv;           /* the registry's sites, followed */
    billing_owner     *owners;
    billing_price     *book;
    unsigned           nbook;
    bool               book_loading;
    uint64_t          *m_posted, *m_duplicates, *m_rejected, *m_batches, *m_batch_failures;
    uint64_t          *m_transfers, *m_credits;
} billing;

/* config.c */
extern const gp_cfg_opt billing_cfg_opts[];

/* start.c: gp_app_main's hooks (state: a billing).  start reads the price
 * book and the latency tiers once serving starts. */
gp_err billing_init(gp_app *app, const void *cfg, void *state);
void   billing_start(gp_app *app, void *state);
void   billing_free(void *state);

/* sites.c */
typedef void billing_site_cb(void *arg, gp_err err, const bill_site *s, const char *detail);
void   billing_site_get(billing *b, const char *site, billing_site_cb *cb, void *arg);
gp_err billing_sites_start(billing *b);
void   billing_sites_free(billing *b);
void   billing_book_run(gp_app *app, void *arg);
/* The price of product at delivery time t_ms (its version in force then):
 * true and the price, or false when the book has none. */
bool   billing_price_at(const billing *b, const char *product, uint64_t t_ms, int64_t *micros,
                        char *currency);

/* post.c */
extern const gp_route billing_routes[];
extern const gp_stream_cfg billing_streams[];
void   billing_post_start(billing *b);

/* api.c */
extern const gp_route billing_api_routes[];

/* migrate.c */
extern const gp_migration billing_migrations[];
extern const gp_grant billing_db_grants[];    /* dbgrants.c */

#endif
