/* migrate.c -- metering's PostgreSQL schema as ordered steps, applied by
 * gp/db.h once each and recorded in gp_migrations (service 'metering').  A
 * released step is never edited: a change is a new step at the end.
 *
 * What Redis holds for metering is a cache of these tables (store.c,
 * epoch.c): every record is stored here before it is published, with the
 * line it was written as (scripts.h: its counted totals, checkpoint and the
 * agent's raw counters it ends at), so an attempt's running state can be
 * taken up again from its last record; metering_seq keeps each site's last
 * sequence number, so a rebuilt Redis goes on from it.  Times are ms since
 * the epoch. */
#include "metering.h"

#define ID_CHECK(col) "CHECK (" col " ~ '^[A-Za-z0-9_-]{1,63}$')"

static const char step1_sql[] =
    "CREATE TABLE IF NOT EXISTS metering_records (\n"
    "  id text PRIMARY KEY,\n"
    "  shard int NOT NULL CHECK (shard >= 0),\n"
    "  site text NOT NULL " ID_CHECK("site") ",\n"
    "  site_seq bigint NOT NULL CHECK (site_seq > 0),\n"
    "  job_id text NOT NULL " ID_CHECK("job_id") ",\n"
    "  attempt int NOT NULL CHECK (attempt > 0),\n"
    "  node text NOT NULL " ID_CHECK("node") ",\n"
    "  win bigint NOT NULL,\n"
    "  final boolean NOT NULL,\n"
    "  line text NOT NULL,\n"
    "  published boolean NOT NULL DEFAULT false,\n"
    "  created_ms bigint NOT NULL);\n"
    "CREATE INDEX IF NOT EXISTS metering_records_part\n"
    "  ON metering_records (job_id, attempt, node, win DESC);\n"
    "CREATE INDEX IF NOT EXISTS metering_records_unpublished\n"
    "  ON metering_records (shard) WHERE NOT published;\n"
    "CREATE INDEX IF NOT EXISTS metering_records_published\n"
    "  ON metering_records (created_ms) WHERE published;\n"
    "CREATE TABLE IF NOT EXISTS metering_seq (\n"
    "  site text PRIMARY KEY " ID_CHECK("site") ",\n"
    "  shard int NOT NULL CHECK (shard >= 0),\n"
    "  seq bigint NOT NULL CHECK (seq > 0))";

const gp_migration metering_migrations[] = {
    {1, "usage records and site sequences, Redis's durable copy", step1_sql},
    GP_MIGRATION_END
};
