/* dbgrants.c -- what the scheduler's PostgreSQL role may do (gp/dbrole.h;
 * not the GPU grants of fence.c): the privileges its statements need,
 * table by table, and nothing else.  Its SQL functions (sched_*) run with
 * these privileges too. */
#include "scheduler.h"

const gp_grant scheduler_db_grants[] = {
    /* jobs and attempts are written, never deleted (FOR UPDATE: UPDATE);
     * job_events is the outbox, marked published */
    {"SELECT, INSERT, UPDATE", "TABLE jobs, attempts, job_events"},
    {"SELECT, INSERT, UPDATE", "TABLE site_owners"},    /* feed.c: upserts */
    /* secrets.c: its own reads decrypt a job's secrets; set, list and
     * delete run under the tenant's role (its grants are gp_tenant's) */
    {"SELECT", "TABLE secrets"},
    /* the tenant's role of a tenant query (SECURITY DEFINER, migration 13) */
    {"EXECUTE", "FUNCTION gp_tenant_role(text)"},
    GP_GRANT_END
};
