/* dbgrants.c -- what metering's PostgreSQL role may do (gp/dbrole.h):
 * the privileges its statements need (store.c, epoch.c), and nothing
 * else. */
#include "metering.h"

const gp_grant metering_db_grants[] = {
    /* store.c: a record stored before its publish, marked published,
     * read back by the epoch rebuild, and pruned once old */
    {"SELECT, INSERT, UPDATE, DELETE", "TABLE metering_records"},
    {"SELECT, INSERT, UPDATE", "TABLE metering_seq"},     /* a site's last sequence */
    GP_GRANT_END
};
