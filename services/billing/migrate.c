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

/* Step 2: no billing for downtime.  When an attempt ends through a platform
 * fault (its final record says fault), the GPU time and energy of its
 * records past its last checkpoint (counted totals: to > ckpt) are not the
 * customer's: each such record gets one fault_credits row (its primary key
 * makes the credit once, whichever of the record and the final comes
 * first) and a failed_cost transfer per currency: Dr <operator>.failed_cost,
 * Cr <customer>.receivable, the part of its rated nanos its uncharged
 * share is (floor).  bill_fault_credits(keys, operator) credits what is due
 * for the attempts (job.attempt.node) a batch touched; the batch holds a
 * transaction lock on each key first, so a record and its final taken by
 * two instances at once cannot miss each other. */
static const char step2_sql[] =
    "ALTER TABLE usage_records ADD COLUMN IF NOT EXISTS from_energy_mj bigint,\n"
    "  ADD COLUMN IF NOT EXISTS to_energy_mj bigint, ADD COLUMN IF NOT EXISTS ckpt_energy_mj bigint;\n"
    "CREATE TABLE IF NOT EXISTS fault_credits (\n"
    "  record_id text PRIMARY KEY REFERENCES usage_records (id),\n"
    "  final_id text NOT NULL REFERENCES usage_records (id),\n"
    "  uncharged_gpu_ms bigint NOT NULL, gpu_nanos bigint NOT NULL,\n"
    "  uncharged_energy_mj bigint NOT NULL, power_nanos bigint NOT NULL\n"
    ");\n"
    "CREATE OR REPLACE FUNCTION bill_fault_credits(p_keys text[], p_op text, p_now bigint)\n"
    "RETURNS int LANGUAGE plpgsql AS $f$\n"
    "DECLARE n int;\n"
    "BEGIN\n"
    "  WITH f AS (\n"
    "    SELECT id, job_id, attempt, node, coalesce(ckpt_gpu_ms, 0) AS cg,\n"
    "      coalesce(ckpt_energy_mj, 0) AS ce FROM usage_records\n"
    "    WHERE final AND fault AND job_id || '.' || attempt || '.' || node = ANY (p_keys)),\n"
    "  u AS (\n"
    "    SELECT r.*, f.id AS final_id,\n"
    "      greatest(0, least(r.gpu_ms, r.to_gpu_ms - greatest(r.from_gpu_ms, f.cg))) AS ug,\n"
    "      greatest(0, least(r.energy_mj, coalesce(r.to_energy_mj, 0)\n"
    "        - greatest(coalesce(r.from_energy_mj, 0), f.ce))) AS ue\n"
    "    FROM f JOIN usage_records r ON r.job_id = f.job_id AND r.attempt = f.attempt\n"
    "      AND r.node = f.node\n"
    "    WHERE NOT EXISTS (SELECT 1 FROM fault_credits c WHERE c.record_id = r.id)),\n"
    "  c AS (\n"
    "    INSERT INTO fault_credits (record_id, final_id, uncharged_gpu_ms, gpu_nanos,\n"
    "      uncharged_energy_mj, power_nanos)\n"
    "    SELECT id, final_id, ug,\n"
    "      CASE WHEN gpu_ms > 0 THEN div(gpu_nanos::numeric * ug, gpu_ms)::bigint ELSE 0 END,\n"
    "      ue, CASE WHEN energy_mj > 0 THEN div(power_nanos::numeric * ue, energy_mj)::bigint\n"
    "        ELSE 0 END\n"
    "    FROM u ON CONFLICT DO NOTHING\n"
    "    RETURNING record_id, gpu_nanos, power_nanos),\n"
    "  l AS (\n"
    "    SELECT c.record_id AS rid, r.currency AS cur, r.tenant, c.gpu_nanos AS amt, r.period\n"
    "      FROM c JOIN usage_records r ON r.id = c.record_id WHERE c.gpu_nanos > 0\n"
    "    UNION ALL\n"
    "    SELECT c.record_id, r.power_currency, r.tenant, c.power_nanos, r.period\n"
    "      FROM c JOIN usage_records r ON r.id = c.record_id WHERE c.power_nanos > 0),\n"
    "  g AS (SELECT rid, cur, tenant, sum(amt)::bigint AS amt, min(period) AS period\n"
    "    FROM l GROUP BY rid, cur, tenant),\n"
    "  a AS (INSERT INTO ledger_accounts (id, tenant, purpose, currency)\n"
    "    SELECT DISTINCT x.acc, x.ten, x.pur, g.cur FROM g CROSS JOIN LATERAL (VALUES\n"
    "      (p_op || '.failed_cost.' || g.cur, p_op, 'failed_cost'),\n"
    "      (g.tenant || '.receivable.' || g.cur, g.tenant, 'receivable')) AS x(acc, ten, pur)\n"
    "    ON CONFLICT DO NOTHING),\n"
    "  t AS (INSERT INTO ledger_transfers (record_id, kind, currency, period, at_ms)\n"
    "    SELECT rid, 'failed_cost', cur, period, p_now FROM g\n"
    "    RETURNING id, record_id, currency),\n"
    "  e AS (INSERT INTO ledger_entries (transfer_id, account, currency, amount)\n"
    "    SELECT t.id, x.acc, g.cur, x.amt FROM g JOIN t ON t.record_id = g.rid\n"
    "      AND t.currency = g.cur\n"
    "    CROSS JOIN LATERAL (VALUES (p_op || '.failed_cost.' || g.cur, g.amt),\n"
    "      (g.tenant || '.receivable.' || g.cur, -g.amt)) AS x(acc, amt)\n"
    "    RETURNING 1)\n"
    "  SELECT count(*) INTO n FROM t;\n"
    "  RETURN n;\n"
    "END $f$";

/* Step 3: statements.  A tenant's period closes into one statement whose
 * content (canonical text) and sha256 never change (statements and
 * statement_items refuse UPDATE and DELETE).  statement_items puts each
 * transfer touching the tenant's accounts on exactly one of its statements:
 * the first one closed whose period is not before the transfer's usage
 * period, so usage of a closed period that comes late lands on the next
 * statement as a correction line naming its own period.  Lines are rounded
 * half to even to the currency's minor unit (currency_exponents: the same
 * table as gp/money.h, billing_test compares them).  usage_records gets the
 * site's owner, so a site partner can see the usage of its sites. */
static const char step3_sql[] =
    "ALTER TABLE usage_records ADD COLUMN IF NOT EXISTS site_owner text;\n"
    "CREATE INDEX IF NOT EXISTS usage_records_owner ON usage_records (site_owner, period);\n"
    "CREATE TABLE IF NOT EXISTS currency_exponents (\n"
    "  code text PRIMARY KEY " CUR_CHECK("code") ",\n"
    "  exponent int NOT NULL CHECK (exponent BETWEEN 0 AND 9)\n"
    ");\n"
    "INSERT INTO currency_exponents SELECT c, 0 FROM unnest(ARRAY['BIF','CLP','DJF','GNF','ISK',\n"
    "  'JPY','KMF','KRW','PYG','RWF','UGX','VND','VUV','XAF','XOF','XPF']) c ON CONFLICT DO NOTHING;\n"
    "INSERT INTO currency_exponents SELECT c, 2 FROM unnest(ARRAY['AED','AUD','BGN','BRL','CAD',\n"
    "  'CHF','CNY','CZK','DKK','EUR','GBP','HKD','HUF','ILS','INR','MXN','NOK','NZD','PLN','RON',\n"
    "  'SEK','SGD','THB','TRY','TWD','USD','ZAR']) c ON CONFLICT DO NOTHING;\n"
    "INSERT INTO currency_exponents SELECT c, 3 FROM unnest(ARRAY['BHD','IQD','JOD','KWD','LYD',\n"
    "  'OMR','TND']) c ON CONFLICT DO NOTHING;\n"
    "CREATE OR REPLACE FUNCTION bill_minor(n bigint, e int) RETURNS bigint\n"
    "LANGUAGE sql IMMUTABLE AS $f$\n"
    "  SELECT q + CASE WHEN 2 * abs(r) > u OR (2 * abs(r) = u AND q % 2 <> 0)\n"
    "    THEN sign(r)::bigint ELSE 0 END\n"
    "  FROM (SELECT u, n / u AS q, n % u AS r\n"
    "        FROM (SELECT (10::numeric ^ (9 - e))::bigint AS u) x) y\n"
    "$f$;\n"
    "CREATE TABLE IF NOT EXISTS statements (\n"
    "  tenant text NOT NULL " ID_CHECK("tenant") ",\n"
    "  period text NOT NULL CHECK (period ~ '^[0-9]{4}-(0[1-9]|1[0-2])$'),\n"
    "  issued_ms bigint NOT NULL, content text NOT NULL, hash text NOT NULL,\n"
    "  PRIMARY KEY (tenant, period)\n"
    ");\n"
    "CREATE TABLE IF NOT EXISTS statement_items (\n"
    "  tenant text NOT NULL, transfer_id bigint NOT NULL REFERENCES ledger_transfers (id),\n"
    "  period text NOT NULL,\n"
    "  PRIMARY KEY (tenant, transfer_id),\n"
    "  FOREIGN KEY (tenant, period) REFERENCES statements (tenant, period) DEFERRABLE INITIALLY DEFERRED\n"
    ");\n"
    "DROP TRIGGER IF EXISTS statements_immutable ON statements;\n"
    "CREATE TRIGGER statements_immutable BEFORE UPDATE OR DELETE ON statements\n"
    "  FOR EACH ROW EXECUTE FUNCTION ledger_immutable();\n"
    "DROP TRIGGER IF EXISTS statement_items_immutable ON statement_items;\n"
    "CREATE TRIGGER statement_items_immutable BEFORE UPDATE OR DELETE ON statement_items\n"
    "  FOR EACH ROW EXECUTE FUNCTION ledger_immutable();\n"
    "CREATE OR REPLACE FUNCTION bill_close_period(p_tenant text, p_period text, p_now bigint)\n"
    "RETURNS TABLE (o_issued bigint, o_hash text, o_content text) LANGUAGE plpgsql AS $f$\n"
    "DECLARE c text;\n"
    "BEGIN\n"
    "  PERFORM pg_advisory_xact_lock(hashtext('gp.billing.close.' || p_tenant));\n"
    "  RETURN QUERY SELECT issued_ms, hash, content FROM statements\n"
    "    WHERE tenant = p_tenant AND period = p_period;\n"
    "  IF FOUND THEN RETURN; END IF;\n"
    "  INSERT INTO statement_items (tenant, transfer_id, period)\n"
    "    SELECT DISTINCT p_tenant, t.id, p_period FROM ledger_transfers t\n"
    "      JOIN ledger_entries e ON e.transfer_id = t.id\n"
    "      JOIN ledger_accounts a ON a.id = e.account\n"
    "     WHERE a.tenant = p_tenant AND t.period <= p_period\n"
    "       AND NOT EXISTS (SELECT 1 FROM statement_items s\n"
    "                        WHERE s.tenant = p_tenant AND s.transfer_id = t.id);\n"
    "  WITH l AS (\n"
    "    SELECT a.currency, t.kind, a.purpose, t.period AS up, sum(e.amount)::bigint AS n\n"
    "      FROM statement_items s JOIN ledger_transfers t ON t.id = s.transfer_id\n"
    "      JOIN ledger_entries e ON e.transfer_id = t.id\n"
    "      JOIN ledger_accounts a ON a.id = e.account\n"
    "     WHERE s.tenant = p_tenant AND s.period = p_period AND a.tenant = p_tenant\n"
    "     GROUP BY 1, 2, 3, 4),\n"
    "  m AS (SELECT l.*, bill_minor(l.n, x.exponent) AS mi FROM l\n"
    "          JOIN currency_exponents x ON x.code = l.currency)\n"
    "  SELECT 'gridpool statement v1' || E'\\n' || 'tenant ' || p_tenant || E'\\n'\n"
    "    || 'period ' || p_period || E'\\n' || 'issued ' || p_now || E'\\n'\n"
    "    || coalesce((SELECT string_agg(format('line %s %s %s %s %s %s%s', currency, kind,\n"
    "         purpose, up, n, mi, CASE WHEN up < p_period THEN ' correction' ELSE '' END),\n"
    "         E'\\n' ORDER BY currency, kind, purpose, up) FROM m) || E'\\n', '')\n"
    "    || coalesce((SELECT string_agg(format('total %s %s', currency, t), E'\\n'\n"
    "         ORDER BY currency) FROM (SELECT currency, sum(mi) AS t FROM m GROUP BY 1) z)\n"
    "         || E'\\n', '')\n"
    "    INTO c;\n"
    "  INSERT INTO statements VALUES (p_tenant, p_period, p_now, c,\n"
    "    encode(sha256(convert_to(c, 'UTF8')), 'hex'));\n"
    "  RETURN QUERY SELECT issued_ms, hash, content FROM statements\n"
    "    WHERE tenant = p_tenant AND period = p_period;\n"
    "END $f$";

/* Step 4: a refused record keeps its site and sequence number, so a gap in
 * a site's numbers is a lost record, not a refused one (the auditor). */
static const char step4_sql[] =
    "ALTER TABLE rejected_records ADD COLUMN IF NOT EXISTS site text,\n"
    "  ADD COLUMN IF NOT EXISTS site_seq bigint";

/* Step 5: sub-tenancy enforced by PostgreSQL itself.  Each tenant has a
 * role gpt_<tenant> (NOLOGIN, in gp_tenant), made on first use by
 * bill_tenant_role; a row of usage, ledger or statements is visible to a
 * role that is a member of its tenant's role (a partner: also the usage of
 * the sites it owns).  Billing's own work runs as the tables' owner
 * (row-level security does not apply to it); its tenant query path runs
 * each query in a transaction under SET LOCAL ROLE gpt_<tenant>, so the
 * database filters even if the query forgot to; a site partner's own
 * login (CREATE ROLE ... LOGIN IN ROLE gpt_<partner>) reads the same rows
 * and nothing else, and may write nothing.  Creating the roles needs
 * CREATEROLE for billing's database user. */
static const char step5_sql[] =
    "DO $d$ BEGIN\n"
    "  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'gp_tenant') THEN\n"
    "    CREATE ROLE gp_tenant NOLOGIN;\n"
    "  END IF;\n"
    "END $d$;\n"
    "GRANT USAGE ON SCHEMA public TO gp_tenant;\n"
    "GRANT SELECT ON usage_records, ledger_accounts, ledger_transfers, ledger_entries, statements,\n"
    "  statement_items, fault_credits, currency_exponents TO gp_tenant;\n"
    "CREATE OR REPLACE FUNCTION gp_member_of(t text) RETURNS boolean\n"
    "LANGUAGE sql STABLE AS $f$\n"
    "  SELECT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = 'gpt_' || t\n"
    "                 AND pg_has_role(r.oid, 'MEMBER'))\n"
    "$f$;\n"
    "CREATE OR REPLACE FUNCTION bill_tenant_role(t text) RETURNS text\n"
    "LANGUAGE plpgsql AS $f$\n"
    "BEGIN\n"
    "  IF t !~ '^[A-Za-z0-9_-]{1,59}$' THEN\n"
    "    RAISE EXCEPTION 'tenant %: not an id', t USING ERRCODE = '22023';\n"
    "  END IF;\n"
    "  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'gpt_' || t) THEN\n"
    "    BEGIN\n"
    "      EXECUTE format('CREATE ROLE %I NOLOGIN IN ROLE gp_tenant', 'gpt_' || t);\n"
    "    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;\n"
    "    END;\n"
    "  END IF;\n"
    "  IF NOT pg_has_role(session_user, 'gpt_' || t, 'MEMBER') THEN\n"
    "    EXECUTE format('GRANT %I TO %I', 'gpt_' || t, session_user);\n"
    "  END IF;\n"
    "  RETURN 'gpt_' || t;\n"
    "END $f$;\n"
    "ALTER TABLE usage_records ENABLE ROW LEVEL SECURITY;\n"
    "DROP POLICY IF EXISTS tenant_rows ON usage_records;\n"
    "CREATE POLICY tenant_rows ON usage_records FOR SELECT TO gp_tenant\n"
    "  USING (gp_member_of(tenant) OR gp_member_of(site_owner));\n"
    "ALTER TABLE ledger_accounts ENABLE ROW LEVEL SECURITY;\n"
    "DROP POLICY IF EXISTS tenant_rows ON ledger_accounts;\n"
    "CREATE POLICY tenant_rows ON ledger_accounts FOR SELECT TO gp_tenant\n"
    "  USING (gp_member_of(tenant));\n"
    "ALTER TABLE ledger_entries ENABLE ROW LEVEL SECURITY;\n"
    "DROP POLICY IF EXISTS tenant_rows ON ledger_entries;\n"
    "CREATE POLICY tenant_rows ON ledger_entries FOR SELECT TO gp_tenant\n"
    "  USING (EXISTS (SELECT 1 FROM ledger_accounts a WHERE a.id = account));\n"
    "ALTER TABLE ledger_transfers ENABLE ROW LEVEL SECURITY;\n"
    "DROP POLICY IF EXISTS tenant_rows ON ledger_transfers;\n"
    "CREATE POLICY tenant_rows ON ledger_transfers FOR SELECT TO gp_tenant\n"
    "  USING (EXISTS (SELECT 1 FROM ledger_entries e WHERE e.transfer_id = id));\n"
    "ALTER TABLE statements ENABLE ROW LEVEL SECURITY;\n"
    "DROP POLICY IF EXISTS tenant_rows ON statements;\n"
    "CREATE POLICY tenant_rows ON statements FOR SELECT TO gp_tenant\n"
    "  USING (gp_member_of(tenant));\n"
    "ALTER TABLE statement_items ENABLE ROW LEVEL SECURITY;\n"
    "DROP POLICY IF EXISTS tenant_rows ON statement_items;\n"
    "CREATE POLICY tenant_rows ON statement_items FOR SELECT TO gp_tenant\n"
    "  USING (gp_member_of(tenant));\n"
    "ALTER TABLE fault_credits ENABLE ROW LEVEL SECURITY;\n"
    "DROP POLICY IF EXISTS tenant_rows ON fault_credits;\n"
    "CREATE POLICY tenant_rows ON fault_credits FOR SELECT TO gp_tenant\n"
    "  USING (EXISTS (SELECT 1 FROM usage_records u WHERE u.id = record_id))";

/* Step 6: the fault credits of a batch find their attempts' final records
 * through a partial index (final and fault: a few rows), not by a scan of
 * every record (which made each batch cost the size of the table); the
 * function takes the attempts as three arrays. */
static const char step6_sql[] =
    "CREATE INDEX IF NOT EXISTS usage_records_fault_finals ON usage_records\n"
    "  (job_id, attempt, node) WHERE final AND fault;\n"
    "DROP FUNCTION IF EXISTS bill_fault_credits(text[], text, bigint);\n"
"CREATE OR REPLACE FUNCTION bill_fault_credits(p_jobs text[], p_atts int[], p_nodes text[],\n"
    "  p_op text, p_now bigint)\n"
    "RETURNS int LANGUAGE plpgsql AS $f$\n"
    "DECLARE n int;\n"
    "BEGIN\n"
    "  WITH f AS (\n"
    "    SELECT r.id, r.job_id, r.attempt, r.node, coalesce(r.ckpt_gpu_ms, 0) AS cg,\n"
    "      coalesce(r.ckpt_energy_mj, 0) AS ce\n"
    "    FROM unnest(p_jobs, p_atts, p_nodes) AS k(job, att, node)\n"
    "    JOIN usage_records r ON r.job_id = k.job AND r.attempt = k.att AND r.node = k.node\n"
    "    WHERE r.final AND r.fault),\n"
    "  u AS (\n"
    "    SELECT r.*, f.id AS final_id,\n"
    "      greatest(0, least(r.gpu_ms, r.to_gpu_ms - greatest(r.from_gpu_ms, f.cg))) AS ug,\n"
    "      greatest(0, least(r.energy_mj, coalesce(r.to_energy_mj, 0)\n"
    "        - greatest(coalesce(r.from_energy_mj, 0), f.ce))) AS ue\n"
    "    FROM f JOIN usage_records r ON r.job_id = f.job_id AND r.attempt = f.attempt\n"
    "      AND r.node = f.node\n"
    "    WHERE NOT EXISTS (SELECT 1 FROM fault_credits c WHERE c.record_id = r.id)),\n"
    "  c AS (\n"
    "    INSERT INTO fault_credits (record_id, final_id, uncharged_gpu_ms, gpu_nanos,\n"
    "      uncharged_energy_mj, power_nanos)\n"
    "    SELECT id, final_id, ug,\n"
    "      CASE WHEN gpu_ms > 0 THEN div(gpu_nanos::numeric * ug, gpu_ms)::bigint ELSE 0 END,\n"
    "      ue, CASE WHEN energy_mj > 0 THEN div(power_nanos::numeric * ue, energy_mj)::bigint\n"
    "        ELSE 0 END\n"
    "    FROM u ON CONFLICT DO NOTHING\n"
    "    RETURNING record_id, gpu_nanos, power_nanos),\n"
    "  l AS (\n"
    "    SELECT c.record_id AS rid, r.currency AS cur, r.tenant, c.gpu_nanos AS amt, r.period\n"
    "      FROM c JOIN usage_records r ON r.id = c.record_id WHERE c.gpu_nanos > 0\n"
    "    UNION ALL\n"
    "    SELECT c.record_id, r.power_currency, r.tenant, c.power_nanos, r.period\n"
    "      FROM c JOIN usage_records r ON r.id = c.record_id WHERE c.power_nanos > 0),\n"
    "  g AS (SELECT rid, cur, tenant, sum(amt)::bigint AS amt, min(period) AS period\n"
    "    FROM l GROUP BY rid, cur, tenant),\n"
    "  a AS (INSERT INTO ledger_accounts (id, tenant, purpose, currency)\n"
    "    SELECT DISTINCT x.acc, x.ten, x.pur, g.cur FROM g CROSS JOIN LATERAL (VALUES\n"
    "      (p_op || '.failed_cost.' || g.cur, p_op, 'failed_cost'),\n"
    "      (g.tenant || '.receivable.' || g.cur, g.tenant, 'receivable')) AS x(acc, ten, pur)\n"
    "    ON CONFLICT DO NOTHING),\n"
    "  t AS (INSERT INTO ledger_transfers (record_id, kind, currency, period, at_ms)\n"
    "    SELECT rid, 'failed_cost', cur, period, p_now FROM g\n"
    "    RETURNING id, record_id, currency),\n"
    "  e AS (INSERT INTO ledger_entries (transfer_id, account, currency, amount)\n"
    "    SELECT t.id, x.acc, g.cur, x.amt FROM g JOIN t ON t.record_id = g.rid\n"
    "      AND t.currency = g.cur\n"
    "    CROSS JOIN LATERAL (VALUES (p_op || '.failed_cost.' || g.cur, g.amt),\n"
    "      (g.tenant || '.receivable.' || g.cur, -g.amt)) AS x(acc, amt)\n"
    "    RETURNING 1)\n"
    "  SELECT count(*) INTO n FROM t;\n"
    "  RETURN n;\n"
    "END $f$";

/* Step 7: the ledger's references are checked once per statement, not per
 * row.  A foreign key runs one query per inserted row (5.5 entries and 2
 * transfers a record, each entry checked against its transfer and its
 * account: most of PostgreSQL's time per record in make bench); the same
 * rules as one join over the statement's new rows in its AFTER trigger:
 * an entry's transfer exists in the entry's currency, its account exists
 * in the entry's currency, a transfer's record exists.  Accounts become
 * append-only too, so nothing referenced can go away. */
static const char step7_sql[] =
    "ALTER TABLE ledger_entries DROP CONSTRAINT IF EXISTS ledger_entries_transfer_id_currency_fkey;\n"
    "ALTER TABLE ledger_entries DROP CONSTRAINT IF EXISTS ledger_entries_account_currency_fkey;\n"
    "ALTER TABLE ledger_transfers DROP CONSTRAINT IF EXISTS ledger_transfers_record_id_fkey;\n"
    "CREATE OR REPLACE FUNCTION ledger_balanced() RETURNS trigger LANGUAGE plpgsql AS $f$\n"
    "DECLARE t bigint; s bigint; a text;\n"
    "BEGIN\n"
    "  SELECT transfer_id, sum(amount) INTO t, s FROM new_entries\n"
    "    GROUP BY transfer_id, currency HAVING sum(amount) <> 0 LIMIT 1;\n"
    "  IF FOUND THEN\n"
    "    RAISE EXCEPTION 'transfer % does not balance (sum %)', t, s USING ERRCODE = '23514';\n"
    "  END IF;\n"
    "  SELECT n.transfer_id INTO t FROM new_entries n\n"
    "    LEFT JOIN ledger_transfers x ON x.id = n.transfer_id AND x.currency = n.currency\n"
    "    WHERE x.id IS NULL LIMIT 1;\n"
    "  IF FOUND THEN\n"
    "    RAISE EXCEPTION 'entry of transfer %: no such transfer in its currency', t\n"
    "      USING ERRCODE = '23503';\n"
    "  END IF;\n"
    "  SELECT n.account INTO a FROM new_entries n\n"
    "    LEFT JOIN ledger_accounts x ON x.id = n.account AND x.currency = n.currency\n"
    "    WHERE x.id IS NULL LIMIT 1;\n"
    "  IF FOUND THEN\n"
    "    RAISE EXCEPTION 'entry on account %: no such account in its currency', a\n"
    "      USING ERRCODE = '23503';\n"
    "  END IF;\n"
    "  RETURN NULL;\n"
    "END $f$;\n"
    "CREATE OR REPLACE FUNCTION ledger_transfers_known() RETURNS trigger LANGUAGE plpgsql AS $f$\n"
    "DECLARE r text;\n"
    "BEGIN\n"
    "  SELECT n.record_id INTO r FROM new_transfers n\n"
    "    LEFT JOIN usage_records u ON u.id = n.record_id WHERE u.id IS NULL LIMIT 1;\n"
    "  IF FOUND THEN\n"
    "    RAISE EXCEPTION 'transfer of record %: no such record', r USING ERRCODE = '23503';\n"
    "  END IF;\n"
    "  RETURN NULL;\n"
    "END $f$;\n"
    "DROP TRIGGER IF EXISTS ledger_transfers_known ON ledger_transfers;\n"
    "CREATE TRIGGER ledger_transfers_known AFTER INSERT ON ledger_transfers\n"
    "  REFERENCING NEW TABLE AS new_transfers FOR EACH STATEMENT\n"
    "  EXECUTE FUNCTION ledger_transfers_known();\n"
    "DROP TRIGGER IF EXISTS ledger_accounts_immutable ON ledger_accounts;\n"
    "CREATE TRIGGER ledger_accounts_immutable BEFORE UPDATE OR DELETE ON ledger_accounts\n"
    "  FOR EACH ROW EXECUTE FUNCTION ledger_immutable();\n"
    /* only the foreign keys used them: two index insertions a record less */
    "ALTER TABLE ledger_transfers DROP CONSTRAINT IF EXISTS ledger_transfers_id_currency_key;\n"
    "ALTER TABLE ledger_accounts DROP CONSTRAINT IF EXISTS ledger_accounts_id_currency_key";

/* Step 8: the rounding account.  A statement rounds each of its lines to
 * the currency's minor unit (half to even); closing a period now also
 * books what the rounding took: per currency one transfer of kind
 * 'rounding' (no record: record_id NULL) moves each line's residue (its
 * nanos minus its minor units) off the line's account onto the tenant's
 * rounding account, so every account's part of a statement is exactly
 * what the statement says in minor units, and the ledger still balances.
 * The transfer is an item of that statement; its content gets a line
 * "rounding" per currency (0 minor units: the totals are unchanged). */
static const char step8_sql[] =
    "ALTER TABLE ledger_transfers ALTER COLUMN record_id DROP NOT NULL;\n"
    "ALTER TABLE ledger_transfers DROP CONSTRAINT IF EXISTS ledger_transfers_kind_check;\n"
    "ALTER TABLE ledger_transfers ADD CONSTRAINT ledger_transfers_kind_check\n"
    "  CHECK (kind IN ('charge', 'power', 'failed_cost', 'correction', 'rounding'));\n"
    "ALTER TABLE ledger_transfers ADD CONSTRAINT ledger_transfers_record_check\n"
    "  CHECK ((kind = 'rounding') = (record_id IS NULL));\n"
    "CREATE OR REPLACE FUNCTION ledger_transfers_known() RETURNS trigger LANGUAGE plpgsql AS $f$\n"
    "DECLARE r text;\n"
    "BEGIN\n"
    "  SELECT n.record_id INTO r FROM new_transfers n\n"
    "    LEFT JOIN usage_records u ON u.id = n.record_id\n"
    "    WHERE n.record_id IS NOT NULL AND u.id IS NULL LIMIT 1;\n"
    "  IF FOUND THEN\n"
    "    RAISE EXCEPTION 'transfer of record %: no such record', r USING ERRCODE = '23503';\n"
    "  END IF;\n"
    "  RETURN NULL;\n"
    "END $f$;\n"
    "CREATE OR REPLACE FUNCTION bill_close_period(p_tenant text, p_period text, p_now bigint)\n"
    "RETURNS TABLE (o_issued bigint, o_hash text, o_content text) LANGUAGE plpgsql AS $f$\n"
    "DECLARE c text; r record; tid bigint;\n"
    "BEGIN\n"
    "  PERFORM pg_advisory_xact_lock(hashtext('gp.billing.close.' || p_tenant));\n"
    "  RETURN QUERY SELECT issued_ms, hash, content FROM statements\n"
    "    WHERE tenant = p_tenant AND period = p_period;\n"
    "  IF FOUND THEN RETURN; END IF;\n"
    "  INSERT INTO statement_items (tenant, transfer_id, period)\n"
    "    SELECT DISTINCT p_tenant, t.id, p_period FROM ledger_transfers t\n"
    "      JOIN ledger_entries e ON e.transfer_id = t.id\n"
    "      JOIN ledger_accounts a ON a.id = e.account\n"
    "     WHERE a.tenant = p_tenant AND t.period <= p_period\n"
    "       AND NOT EXISTS (SELECT 1 FROM statement_items s\n"
    "                        WHERE s.tenant = p_tenant AND s.transfer_id = t.id);\n"
    "  CREATE TEMP TABLE bill_lines ON COMMIT DROP AS\n"
    "    SELECT l.*, bill_minor(l.n, x.exponent) AS mi,\n"
    "           l.n - bill_minor(l.n, x.exponent) * (10::bigint ^ (9 - x.exponent))::bigint AS res\n"
    "      FROM (SELECT a.currency, t.kind, a.purpose, t.period AS up, a.id AS account,\n"
    "                   sum(e.amount)::bigint AS n\n"
    "              FROM statement_items s JOIN ledger_transfers t ON t.id = s.transfer_id\n"
    "              JOIN ledger_entries e ON e.transfer_id = t.id\n"
    "              JOIN ledger_accounts a ON a.id = e.account\n"
    "             WHERE s.tenant = p_tenant AND s.period = p_period AND a.tenant = p_tenant\n"
    "             GROUP BY 1, 2, 3, 4, 5) l\n"
    "      JOIN currency_exponents x ON x.code = l.currency;\n"
    "  FOR r IN SELECT currency, sum(res)::bigint AS res FROM bill_lines GROUP BY 1\n"
    "           HAVING bool_or(res <> 0) ORDER BY 1 LOOP\n"
    "    INSERT INTO ledger_accounts (id, tenant, purpose, currency)\n"
    "      VALUES (p_tenant || '.rounding.' || r.currency, p_tenant, 'rounding', r.currency)\n"
    "      ON CONFLICT DO NOTHING;\n"
    "    INSERT INTO ledger_transfers (record_id, kind, currency, period, at_ms)\n"
    "      VALUES (NULL, 'rounding', r.currency, p_period, p_now) RETURNING id INTO tid;\n"
    "    INSERT INTO ledger_entries (transfer_id, account, currency, amount)\n"
    "      SELECT tid, account, r.currency, -sum(res) FROM bill_lines\n"
    "        WHERE currency = r.currency GROUP BY account HAVING sum(res) <> 0\n"
    "      UNION ALL\n"
    "      SELECT tid, p_tenant || '.rounding.' || r.currency, r.currency, r.res WHERE r.res <> 0;\n"
    "    INSERT INTO statement_items VALUES (p_tenant, tid, p_period);\n"
    "  END LOOP;\n"
    "  SELECT 'gridpool statement v1' || E'\\n' || 'tenant ' || p_tenant || E'\\n'\n"
    "    || 'period ' || p_period || E'\\n' || 'issued ' || p_now || E'\\n'\n"
    "    || coalesce((SELECT string_agg(format('line %s %s %s %s %s %s%s', currency, kind,\n"
    "         purpose, up, n, mi, CASE WHEN up < p_period THEN ' correction' ELSE '' END),\n"
    "         E'\\n' ORDER BY currency, kind, purpose, up)\n"
    "         FROM (SELECT currency, kind, purpose, up, sum(n) AS n, sum(mi) AS mi FROM bill_lines\n"
    "               GROUP BY 1, 2, 3, 4\n"
    "               UNION ALL SELECT currency, 'rounding', 'rounding', p_period, sum(res), 0\n"
    "               FROM bill_lines GROUP BY 1 HAVING bool_or(res <> 0)) m) || E'\\n', '')\n"
    "    || coalesce((SELECT string_agg(format('total %s %s', currency, t), E'\\n'\n"
    "         ORDER BY currency) FROM (SELECT currency, sum(mi) AS t FROM bill_lines GROUP BY 1) z)\n"
    "         || E'\\n', '')\n"
    "    INTO c;\n"
    "  DROP TABLE bill_lines;\n"
    "  INSERT INTO statements VALUES (p_tenant, p_period, p_now, c,\n"
    "    encode(sha256(convert_to(c, 'UTF8')), 'hex'));\n"
    "  RETURN QUERY SELECT issued_ms, hash, content FROM statements\n"
    "    WHERE tenant = p_tenant AND period = p_period;\n"
    "END $f$";

/* Step 9: the ledger's statement triggers probe the indexes.  A static
 * query in PL/pgSQL keeps the plan it got first, on an empty ledger: a
 * scan of all of usage_records (or ledger_transfers) for every batch, a
 * third of a batch's time at 100,000 records and growing with the
 * ledger.  EXECUTE plans each check afresh, and with hash and merge joins
 * off the planner looks a batch's few hundred rows up by primary key. */
static const char step9_sql[] =
    "CREATE OR REPLACE FUNCTION ledger_transfers_known() RETURNS trigger LANGUAGE plpgsql\n"
    "SET enable_hashjoin = off SET enable_mergejoin = off AS $f$\n"
    "DECLARE r text;\n"
    "BEGIN\n"
    "  EXECUTE 'SELECT n.record_id FROM new_transfers n WHERE n.record_id IS NOT NULL\n"
    "    AND NOT EXISTS (SELECT 1 FROM usage_records u WHERE u.id = n.record_id) LIMIT 1' INTO r;\n"
    "  IF r IS NOT NULL THEN\n"
    "    RAISE EXCEPTION 'transfer of record %: no such record', r USING ERRCODE = '23503';\n"
    "  END IF;\n"
    "  RETURN NULL;\n"
    "END $f$;\n"
    "CREATE OR REPLACE FUNCTION ledger_balanced() RETURNS trigger LANGUAGE plpgsql\n"
    "SET enable_hashjoin = off SET enable_mergejoin = off AS $f$\n"
    "DECLARE t bigint; s bigint; a text;\n"
    "BEGIN\n"
    "  SELECT transfer_id, sum(amount) INTO t, s FROM new_entries\n"
    "    GROUP BY transfer_id, currency HAVING sum(amount) <> 0 LIMIT 1;\n"
    "  IF FOUND THEN\n"
    "    RAISE EXCEPTION 'transfer % does not balance (sum %)', t, s USING ERRCODE = '23514';\n"
    "  END IF;\n"
    "  EXECUTE 'SELECT n.transfer_id FROM new_entries n WHERE NOT EXISTS (SELECT 1\n"
    "    FROM ledger_transfers x WHERE x.id = n.transfer_id AND x.currency = n.currency)\n"
    "    LIMIT 1' INTO t;\n"
    "  IF t IS NOT NULL THEN\n"
    "    RAISE EXCEPTION 'entry of transfer %: no such transfer in its currency', t\n"
    "      USING ERRCODE = '23503';\n"
    "  END IF;\n"
    "  EXECUTE 'SELECT n.account FROM new_entries n WHERE NOT EXISTS (SELECT 1\n"
    "    FROM ledger_accounts x WHERE x.id = n.account AND x.currency = n.currency)\n"
    "    LIMIT 1' INTO a;\n"
    "  IF a IS NOT NULL THEN\n"
    "    RAISE EXCEPTION 'entry on account %: no such account in its currency', a\n"
    "      USING ERRCODE = '23503';\n"
    "  END IF;\n"
    "  RETURN NULL;\n"
    "END $f$";

/* Step 10: a batch's entries name a few hundred transfers and a dozen
 * accounts, its transfers half as many records as rows: each check looks
 * every distinct key up once instead of once a row (2,000 probes of the
 * accounts' index a batch become 15). */
static const char step10_sql[] =
    "CREATE OR REPLACE FUNCTION ledger_transfers_known() RETURNS trigger LANGUAGE plpgsql\n"
    "SET enable_hashjoin = off SET enable_mergejoin = off AS $f$\n"
    "DECLARE r text;\n"
    "BEGIN\n"
    "  EXECUTE 'SELECT n.record_id FROM (SELECT DISTINCT record_id FROM new_transfers\n"
    "    WHERE record_id IS NOT NULL) n\n"
    "    WHERE NOT EXISTS (SELECT 1 FROM usage_records u WHERE u.id = n.record_id) LIMIT 1' INTO r;\n"
    "  IF r IS NOT NULL THEN\n"
    "    RAISE EXCEPTION 'transfer of record %: no such record', r USING ERRCODE = '23503';\n"
    "  END IF;\n"
    "  RETURN NULL;\n"
    "END $f$;\n"
    "CREATE OR REPLACE FUNCTION ledger_balanced() RETURNS trigger LANGUAGE plpgsql\n"
    "SET enable_hashjoin = off SET enable_mergejoin = off AS $f$\n"
    "DECLARE t bigint; s bigint; a text;\n"
    "BEGIN\n"
    "  SELECT transfer_id, sum(amount) INTO t, s FROM new_entries\n"
    "    GROUP BY transfer_id, currency HAVING sum(amount) <> 0 LIMIT 1;\n"
    "  IF FOUND THEN\n"
    "    RAISE EXCEPTION 'transfer % does not balance (sum %)', t, s USING ERRCODE = '23514';\n"
    "  END IF;\n"
    "  EXECUTE 'SELECT n.transfer_id FROM (SELECT DISTINCT transfer_id, currency\n"
    "    FROM new_entries) n WHERE NOT EXISTS (SELECT 1 FROM ledger_transfers x\n"
    "    WHERE x.id = n.transfer_id AND x.currency = n.currency) LIMIT 1' INTO t;\n"
    "  IF t IS NOT NULL THEN\n"
    "    RAISE EXCEPTION 'entry of transfer %: no such transfer in its currency', t\n"
    "      USING ERRCODE = '23503';\n"
    "  END IF;\n"
    "  EXECUTE 'SELECT n.account FROM (SELECT DISTINCT account, currency FROM new_entries) n\n"
    "    WHERE NOT EXISTS (SELECT 1 FROM ledger_accounts x WHERE x.id = n.account\n"
    "    AND x.currency = n.currency) LIMIT 1' INTO a;\n"
    "  IF a IS NOT NULL THEN\n"
    "    RAISE EXCEPTION 'entry on account %: no such account in its currency', a\n"
    "      USING ERRCODE = '23503';\n"
    "  END IF;\n"
    "  RETURN NULL;\n"
    "END $f$";

/* Step 11: least privilege (gp/dbrole.h).  Billing may log in as a role
 * of its own, which cannot make roles: bill_tenant_role runs as its owner
 * (gridpool_owner, CREATEROLE, or the superuser of a one-user database)
 * and only the roles granted EXECUTE call it (billing's: dbgrants.c), not
 * PUBLIC, so a partner's login cannot make itself a member of another
 * tenant's role. */
static const char step11_sql[] =
    "ALTER FUNCTION bill_tenant_role(text) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;\n"
    "REVOKE EXECUTE ON FUNCTION bill_tenant_role(text) FROM PUBLIC";

const gp_migration billing_migrations[] = {
    {1, "usage records, price book, ledger", step1_sql},
    {2, "no billing for downtime: fault credits", step2_sql},
    {3, "statements, site owners", step3_sql},
    {4, "refused records' site sequence", step4_sql},
    {5, "row-level security by tenant", step5_sql},
    {6, "fault credits by index", step6_sql},
    {7, "ledger references checked per statement", step7_sql},
    {8, "the rounding account, booked when a period closes", step8_sql},
    {9, "ledger triggers look rows up by key", step9_sql},
    {10, "ledger triggers look each key up once", step10_sql},
    {11, "tenant roles made by the owner", step11_sql},
    GP_MIGRATION_END
};
