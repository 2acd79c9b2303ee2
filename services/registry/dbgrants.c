/* dbgrants.c -- what the registry's PostgreSQL role may do (gp/dbrole.h):
 * the privileges its statements need, table by table, and nothing else
 * (each start grants this list again and revokes the rest).  A new table
 * or statement gets its line here: a missing one is "permission denied"
 * in the log, and tests/integration/shared/pgroles_test.sh fails on a
 * table no service is granted. */
#include "registry.h"

const gp_grant registry_db_grants[] = {
    /* admin.c: each entity's create, update, get, list and delete */
    {"SELECT, INSERT, UPDATE, DELETE", "TABLE tenants, sites, pools, products"},
    /* nodes.c: register (an upsert, FOR UPDATE), delete; live.c, states.c:
     * liveness and modes */
    {"SELECT, INSERT, UPDATE, DELETE", "TABLE nodes"},
    {"SELECT, INSERT, DELETE", "TABLE gpus"},           /* a registration replaces them */
    {"SELECT, INSERT, UPDATE, DELETE", "TABLE retired_nodes"},  /* delete (upsert), readmit */
    {"SELECT, INSERT, DELETE", "TABLE node_transitions"},       /* the history, pruned */
    {"SELECT", "TABLE pool_gpus"},                      /* a pool's counts */
    /* migration 5: the revision of a site's or node's write (the
     * trigger's and a delete's nextval): no table owns the sequence */
    {"USAGE", "SEQUENCE inventory_rev"},
    GP_GRANT_END
};
