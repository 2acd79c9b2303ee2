/* dbgrants.c -- what alerting's PostgreSQL role may do (gp/dbrole.h): the
 * privileges its statements and its SQL functions (alert_*) need, table by
 * table, and nothing else. */
#include "alerting.h"

const gp_grant alerting_db_grants[] = {
    /* an alert's life, its outbox, silences and the usage sequence per
     * site: written (FOR UPDATE: UPDATE), never deleted */
    {"SELECT, INSERT, UPDATE", "TABLE alerts, alert_events, silences, alert_usage_sites"},
    /* pruned or replaced rows */
    {"SELECT, INSERT, UPDATE, DELETE", "TABLE alert_job_runs, alert_node_notes, alert_presence"},
    {"SELECT, INSERT, DELETE", "TABLE alert_usage_ahead"},
    GP_GRANT_END
};
