/* dbgrants.c -- what recovery's PostgreSQL role may do (gp/dbrole.h):
 * the privileges its statements need, and nothing else. */
#include "recovery.h"

const gp_grant recovery_db_grants[] = {
    /* replace.c: a lost node queued (upsert), claimed (FOR UPDATE SKIP
     * LOCKED), replaced or returned; never deleted */
    {"SELECT, INSERT, UPDATE", "TABLE recovery_nodes"},
    GP_GRANT_END
};
