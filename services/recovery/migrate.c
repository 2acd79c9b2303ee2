/* migrate.c -- the recovery service's PostgreSQL schema, as ordered steps
 * (gp/db.h records them in gp_migrations, service 'recovery'). */
#include "recovery.h"

/* Step 1: lost nodes and what became of them.  One row per node (its
 * latest loss): pending until the scheduler replaced its attempts
 * (replaced, with how many) or it came back first (returned).  Times are
 * ms since the epoch; lost_ms is the registry's transition time, the same
 * for every instance that writes it. */
static const char step1_sql[] =
    "CREATE TABLE IF NOT EXISTS recovery_nodes (\n"
    "  node text PRIMARY KEY CHECK (node ~ '^[A-Za-z0-9_-]{1,63}$'),\n"
    "  site text NOT NULL CHECK (site ~ '^[A-Za-z0-9_-]{1,63}$'),\n"
    "  lost_ms bigint NOT NULL,\n"
    "  back_ms bigint,\n"
    "  state text NOT NULL CHECK (state IN ('pending','replaced','returned')),\n"
    "  next_ms bigint NOT NULL DEFAULT 0,\n"
    "  tries int NOT NULL DEFAULT 0,\n"
    "  replaced int NOT NULL DEFAULT 0,\n"
    "  reason text NOT NULL DEFAULT '',\n"
    "  claimed_by text,\n"
    "  claim_until timestamptz,\n"
    "  updated_ms bigint NOT NULL);\n"
    "CREATE INDEX IF NOT EXISTS recovery_nodes_due ON recovery_nodes (next_ms)\n"
    "  WHERE state = 'pending';\n";

const gp_migration recovery_migrations[] = {
    {1, "lost nodes", step1_sql},
    GP_MIGRATION_END
};
