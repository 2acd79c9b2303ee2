/* migrate.c -- billing's tables (gp/db.h versioned migrations).
 *
 * usage_records: every record taken, under its unique id (a duplicate is
 * a no-op: the ledger never sees it twice, however late it comes);
 * rejected_records: records refused, with why (kept for review, never
 * posted); price_book: GPU-hour prices by product, effective-dated;
 * latency_tiers: the tier modifiers.  The ledger: ledger_accounts (tenant,
 * purpose, currency), ledger_transfers (one per record and kind), and
 * ledger_entries (nanos of the currency's major unit, debit > 0, credit
 * < 0: rate.h says why nanos).
 *
 * What the database itself enforces, not only C: every statement that
 * adds entries leaves each transfer balanced per currency (a statement
 * trigger over the new rows), an entry's currency is its account's and
 * its transfer's, and nothing in the ledger or the usage records is ever
 * updated or deleted (corrections are new transfers). */
#include "billing.h"

#define ID_CHECK(col) "CHECK (" col " ~ '^[A-Za-z0-9_-]{1,63}$')"
#define CUR_CHECK(col) "CHECK (" col " ~ '^[A-Z]{3}$')"

static const char step1_sql[] =
    "CREATE TABLE IF NOT EXISTS usage_records (\n"
    "  id text PRIMARY KEY,\n"
    "  site text NOT NULL " ID_CHECK("site") ", site_seq bigint NOT NULL CHECK (site_seq > 0),\n"
    "  tenant text NOT NULL " ID_CHECK("tenant") ",\n"
    "  job_id text NOT NULL, attempt int NOT NULL, node text NOT NULL, rank int,\n"
    "  product text, pool text, gpus int,\n"
    "  window_idx bigint NOT NULL, window_ms int NOT NULL CHECK (window_ms > 0),\n"
    "  first_ms bigint, last_ms bigint,\n"
    "  gpu_ms bigint NOT NULL CHECK (gpu_ms >= 0), energy_mj bigint NOT NULL CHECK (energy_mj >= 0),\n"
    "  from_gpu_ms bigint, to_gpu_ms bigint, dropped_gpu_ms bigint,\n"
    "  final boolean NOT NULL, fault boolean NOT NULL DEFAULT false, end_state text,\n"
    "  ckpt_gpu_ms bigint,\n"
    "  currency text NOT NULL " CUR_CHECK("currency") ",\n"
    "  price_micros_per_gpu_hour bigint NOT NULL CHECK (price_micros_per_gpu_hour >= 0),\n"
    "  tier_bp int NOT NULL, gpu_nanos bigint NOT NULL, charge_minor bigint NOT NULL,\n"
    "  charge_residue_nanos bigint NOT NULL,\n"
    "  power_currency text NOT NULL " CUR_CHECK("power_currency") ",\n"
    "  power_micros_per_kwh bigint NOT NULL, pue_milli int NOT NULL,\n"
    "  power_nanos bigint NOT NULL, power_minor bigint NOT NULL,\n"
    "  power_residue_nanos bigint NOT NULL,\n"
    "  period text NOT NULL, taken_ms bigint NOT NULL,\n"
    "  UNIQUE (site, site_seq)\n"
    ");\n"
    "CREATE INDEX IF NOT EXISTS usage_records_tenant ON usage_records (tenant, period);\n"
    "CREATE INDEX IF NOT EXISTS usage_records_attempt ON usage_records (job_id, attempt, node);\n"
    "CREATE TABLE IF NOT EXISTS rejected_records (\n"
    "  n bigserial PRIMARY KEY, id text, subject text NOT NULL, reason text NOT NULL,\n"
    "  body bytea NOT NULL, at_ms bigint NOT NULL\n"
    ");\n"
    "CREATE TABLE IF NOT EXISTS price_book (\n"
    "  product text NOT NULL " ID_CHECK("product") ",\n"
    "  currency text NOT NULL " CUR_CHECK("currency") ",\n"
    "  micros_per_gpu_hour bigint NOT NULL CHECK (micros_per_gpu_hour >= 0),\n"
    "  from_ms bigint NOT NULL,\n"
    "  PRIMARY KEY (product, from_ms)\n"
    ");\n"
    "CREATE TABLE IF NOT EXISTS latency_tiers (\n"
    "  tier int PRIMARY KEY CHECK (tier BETWEEN 0 AND 3),\n"
    "  modifier_bp int NOT NULL CHECK (modifier_bp BETWEEN 0 AND 100000)\n"
    ");\n"
    "INSERT INTO latency_tiers VALUES (0, 12000), (1, 10000), (2, 9000), (3, 8000)\n"
    "  ON CONFLICT DO NOTHING;\n"
    "CREATE TABLE IF NOT EXISTS ledger_accounts (\n"
    "  id text PRIMARY KEY,\n"
    "  tenant text NOT NULL " ID_CHECK("tenant") ",\n"
    "  purpose text NOT NULL CHECK (purpose IN ('receivable', 'revenue', 'payable', 'fees',\n"
    "    'power', 'failed_cost', 'rounding')),\n"
    "  currency text NOT NULL " CUR_CHECK("currency") ",\n"
    "  UNIQUE (id, currency), UNIQUE (tenant, purpose, currency)\n"
    ");\n"
    "CREATE TABLE IF NOT EXISTS ledger_transfers (\n"
    "  id bigserial PRIMARY KEY,\n"
    "  record_id text NOT NULL REFERENCES usage_records (id),\n"
    "  kind text NOT NULL CHECK (kind IN ('charge', 'power', 'failed_cost', 'correction')),\n"
    "  currency text NOT NULL " CUR_CHECK("currency") ",\n"
    "  period text NOT NULL, at_ms bigint NOT NULL,\n"
    "  UNIQUE (record_id, kind, currency), UNIQUE (id, currency)\n"
    ");\n"
    "CREATE TABLE IF NOT EXISTS ledger_entries (\n"
    "  transfer_id bigint NOT NULL,\n"
    "  account text NOT NULL,\n"
    "  currency text NOT NULL,\n"
    "  amount bigint NOT NULL CHECK (amount <> 0),\n"
    "  FOREIGN KEY (transfer_id, currency) REFERENCES ledger_transfers (id, currency),\n"
    "  FOREIGN KEY (account, currency) REFERENCES ledger_accounts (id, currency)\n"
    ");\n"
    "CREATE INDEX IF NOT EXISTS ledger_entries_transfer ON ledger_entries (transfer_id);\n"
    "CREATE INDEX IF NOT EXISTS ledger_entries_account ON ledger_entries (account);\n"
    "CREATE OR REPLACE FUNCTION ledger_balanced() RETURNS trigger LANGUAGE plpgsql AS $f$\n"
    "DECLARE t bigint; s bigint;\n"
    "BEGIN\n"
    "  SELECT transfer_id, sum(amount) INTO t, s FROM new_entries\n"
    "    GROUP BY transfer_id, currency HAVING sum(amount) <> 0 LIMIT 1;\n"
    "  IF FOUND THEN\n"
    "    RAISE EXCEPTION 'transfer % does not balance (sum %)', t, s USING ERRCODE = '23514';\n"
    "  END IF;\n"
    "  RETURN NULL;\n"
    "END $f$;\n"
    "DROP TRIGGER IF EXISTS ledger_entries_balanced ON ledger_entries;\n"
    "CREATE TRIGGER ledger_entries_balanced AFTER INSERT ON ledger_entries\n"
    "  REFERENCING NEW TABLE AS new_entries FOR EACH STATEMENT EXECUTE FUNCTION ledger_balanced();\n"
    "CREATE OR REPLACE FUNCTION ledger_immutable() RETURNS trigger LANGUAGE plpgsql AS $f$\n"
    "BEGIN\n"
    "  RAISE EXCEPTION '% is append-only: book a correction instead', TG_TABLE_NAME\n"
    "    USING ERRCODE = '23514';\n"
    "END $f$;\n"
    "DROP TRIGGER IF EXISTS ledger_entries_immutable ON ledger_entries;\n"
    "CREATE TRIGGER ledger_entries_immutable BEFORE UPDATE OR DELETE ON ledger_entries\n"
    "  FOR EACH ROW EXECUTE FUNCTION ledger_immutable();\n"
    "DROP TRIGGER IF EXISTS ledger_transfers_immutable ON ledger_transfers;\n"
    "CREATE TRIGGER ledger_transfers_immutable BEFORE UPDATE OR DELETE ON ledger_transfers\n"
    "  FOR EACH ROW EXECUTE FUNCTION ledger_immutable();\n"
    "DROP TRIGGER IF EXISTS usage_records_immutable ON usage_records;\n"
    "CREATE TRIGGER usage_records_immutable BEFORE UPDATE OR DELETE ON usage_records\n"
    "  FOR EACH ROW EXECUTE FUNCTION ledger_immutable()";

const gp_migration billing_migrations[] = {
    {1, "usage records, price book, ledger", step1_sql},
    GP_MIGRATION_END
};
