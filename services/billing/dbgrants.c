/* dbgrants.c -- what billing's PostgreSQL role may do (gp/dbrole.h): the
 * privileges its statements need, table by table, and nothing else.
 * Billing never updates or deletes: the ledger, the records and the
 * statements are append-only by privilege as well as by their triggers
 * (which TRUNCATE would not fire). */
#include "billing.h"

const gp_grant billing_db_grants[] = {
    {"SELECT, INSERT", "TABLE usage_records"},          /* post.c: once per record id */
    {"INSERT", "TABLE rejected_records"},               /* kept for review, never read */
    {"SELECT, INSERT", "TABLE price_book"},             /* api.c: prices, effective-dated */
    {"SELECT", "TABLE latency_tiers, currency_exponents"},   /* migrations fill them */
    {"SELECT, INSERT", "TABLE ledger_accounts, ledger_transfers, ledger_entries"},
    /* bill_close_period, bill_fault_credits */
    {"SELECT, INSERT", "TABLE statements, statement_items, fault_credits"},
    /* the tenant's role of a tenant query (SECURITY DEFINER, migration 11) */
    {"EXECUTE", "FUNCTION bill_tenant_role(text)"},
    GP_GRANT_END
};
