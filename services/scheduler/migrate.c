/* migrate.c -- the scheduler's PostgreSQL schema as ordered steps, applied
 * by gp/db.h once each and recorded in gp_migrations (service
 * 'scheduler').  A released step is never edited: a change is a new step
 * at the end.
 *
 * Ids are NATS subject tokens, so the database refuses anything else, as
 * a second line behind the handlers' checks.  Times are ms since the
 * epoch (gp_wall_ms) as bigint, so rows and messages carry the same
 * numbers.  Money is bigint micro-units of the row's currency.
 *
 * A job keeps its spec as the msgpack bytes that were submitted
 * (normalized: validate.c), plus the columns the queue and placement
 * filter and sort on, so they never decode a spec to choose one. */
#include "scheduler.h"

#define ID_CHECK(col) "CHECK (" col " ~ '^[A-Za-z0-9_-]{1,63}$')"
#define JOB_STATES "('pending','starting','running','succeeded','failed','cancelled')"

static const char step1_sql[] =
    "CREATE TABLE IF NOT EXISTS jobs (\n"
    "  id text PRIMARY KEY " ID_CHECK("id") ",\n"
    "  tenant text NOT NULL " ID_CHECK("tenant") ",\n"
    "  client_request_id text " ID_CHECK("client_request_id") ",\n"
    "  state text NOT NULL CHECK (state IN " JOB_STATES "),\n"
    "  spec bytea NOT NULL,\n"
    "  name text NOT NULL DEFAULT '',\n"
    "  priority int NOT NULL CHECK (priority >= 0),\n"
    "  gpus_per_node int NOT NULL CHECK (gpus_per_node >= 1),\n"
    "  nodes int NOT NULL CHECK (nodes >= 1),\n"
    "  interruptible bool NOT NULL DEFAULT false,\n"
    "  max_run_s bigint NOT NULL DEFAULT 0 CHECK (max_run_s >= 0),\n"
    "  max_attempts int NOT NULL CHECK (max_attempts >= 1),\n"
    "  pool text " ID_CHECK("pool") ",\n"
    "  product text " ID_CHECK("product") ",\n"
    "  max_price_micros_per_gpu_hour bigint CHECK (max_price_micros_per_gpu_hour >= 0),\n"
    "  currency text CHECK (currency ~ '^[A-Z]{3}$'),\n"
    "  reason text NOT NULL DEFAULT '',\n"
    "  attempts_made int NOT NULL DEFAULT 0,\n"
    "  preemptions int NOT NULL DEFAULT 0,\n"
    "  exit_code int,\n"
    "  checkpoint_ms bigint,\n"
    "  gpu_ms bigint NOT NULL DEFAULT 0,\n"
    "  created_ms bigint NOT NULL,\n"
    "  updated_ms bigint NOT NULL,\n"
    "  ended_ms bigint,\n"
    "  event_seq bigint NOT NULL DEFAULT 0,\n"    /* the job's last job_events.seq */
    "  UNIQUE (tenant, client_request_id));\n"
    /* the queue: pending jobs, highest priority first, then oldest */
    "CREATE INDEX IF NOT EXISTS jobs_pending ON jobs (priority DESC, created_ms, id)\n"
    "  WHERE state = 'pending';\n"
    "CREATE INDEX IF NOT EXISTS jobs_tenant ON jobs (tenant, id);\n"
    "CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, id);\n"
    "CREATE TABLE IF NOT EXISTS attempts (\n"
    "  job_id text NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,\n"
    "  attempt int NOT NULL CHECK (attempt >= 1),\n"   /* the fencing token */
    "  rank int NOT NULL DEFAULT 0 CHECK (rank BETWEEN 0 AND 7),\n"
    "  site text NOT NULL " ID_CHECK("site") ",\n"
    "  node text NOT NULL " ID_CHECK("node") ",\n"
    "  gpus int[] NOT NULL DEFAULT '{}',\n"
    "  state text NOT NULL CHECK (state IN ('reserved','starting','running','succeeded',\n"
    "    'failed','failed_to_start','killed','preempted','cancelled','lost','timed_out',\n"
    "    'superseded')),\n"
    "  reason text NOT NULL DEFAULT '',\n"
    "  exit_code int,\n"
    "  created_ms bigint NOT NULL,\n"
    "  started_ms bigint,\n"
    "  ended_ms bigint,\n"
    "  checkpoint_ms bigint,\n"
    "  latency_est_ms double precision CHECK (latency_est_ms >= 0),\n"
    "  score int, score_latency int, score_price int, score_packing int,\n"
    "  score_reliability int, score_thermal int,\n"
    "  price_micros_per_gpu_hour bigint CHECK (price_micros_per_gpu_hour >= 0),\n"
    "  currency text CHECK (currency ~ '^[A-Z]{3}$'),\n"
    "  preempted_by text " ID_CHECK("preempted_by") ",\n"
    "  gpu_ms bigint NOT NULL DEFAULT 0,\n"
    "  energy_mj bigint NOT NULL DEFAULT 0,\n"
    "  PRIMARY KEY (job_id, attempt, rank));\n"
    "CREATE INDEX IF NOT EXISTS attempts_node ON attempts (node, state);\n"
    "CREATE INDEX IF NOT EXISTS attempts_state ON attempts (state);\n"
    "CREATE INDEX IF NOT EXISTS attempts_site ON attempts (site, job_id);\n"
    /* the outbox: written in the transaction of the change it tells */
    "CREATE TABLE IF NOT EXISTS job_events (\n"
    "  job_id text NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,\n"
    "  seq bigint NOT NULL CHECK (seq >= 1),\n"
    "  event text NOT NULL CHECK (event IN ('submitted','pending','placed','started',\n"
    "    'checkpointed','preempting','preempted','attempt_failed','requeued','succeeded',\n"
    "    'failed','cancelled','timed_out')),\n"
    "  state text NOT NULL CHECK (state IN " JOB_STATES "),\n"
    "  attempt int,\n"
    "  site text " ID_CHECK("site") ",\n"
    "  node text " ID_CHECK("node") ",\n"
    "  reason text NOT NULL DEFAULT '',\n"
    "  exit_code int,\n"
    "  at_ms bigint NOT NULL,\n"
    "  published bool NOT NULL DEFAULT false,\n"
    "  PRIMARY KEY (job_id, seq));\n"
    "CREATE INDEX IF NOT EXISTS job_events_unpublished ON job_events (at_ms)\n"
    "  WHERE NOT published;\n";

/* Placement: who claimed a pending job until when (PostgreSQL's clock, so
 * instances agree), why it waits ("model=3,gpus=2": reason=nodes counted
 * under the first filter each node failed) over how many nodes, and
 * until when a preemption it started is running (not started again). */
static const char step2_sql[] =
    "ALTER TABLE jobs ADD COLUMN claimed_by text,\n"
    "  ADD COLUMN claim_until timestamptz,\n"
    "  ADD COLUMN waiting text,\n"
    "  ADD COLUMN nodes_considered bigint,\n"
    "  ADD COLUMN preempt_until timestamptz;\n";

const gp_migration scheduler_migrations[] = {
    {1, "jobs, attempts, job events", step1_sql},
    {2, "placement claims and pending reasons", step2_sql},
    GP_MIGRATION_END
};
