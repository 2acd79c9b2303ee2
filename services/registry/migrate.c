/* migrate.c -- the registry's PostgreSQL schema as ordered steps, applied
 * by gp/db.h once each and recorded in gp_migrations (service
 * 'registry').  A released step is never edited: a change is a new step
 * at the end.
 *
 * Step 1 is the schema of the versions before gp_migrations existed,
 * which ran it on every connection; it stays idempotent (IF NOT EXISTS,
 * OR REPLACE) because it is also how such a database is adopted: it has
 * the tables but no record, so step 1 runs, changes nothing and is
 * recorded.  Steps after 1 run exactly once and need not be idempotent.
 *
 * Ids are NATS subject tokens, so the database refuses anything else, as
 * a second line behind the handlers' checks.  Money is bigint micro-units
 * of the row's currency. */
#include "registry.h"

static const char step1_sql[] =
    "CREATE TABLE IF NOT EXISTS tenants (\n"
    "  id text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9_-]{1,63}$'),\n"
    "  parent text REFERENCES tenants(id),\n"
    "  kind text NOT NULL CHECK (kind IN ('operator','site_operator','partner','customer')),\n"
    "  name text NOT NULL DEFAULT '',\n"
    "  revenue_share_bp int NOT NULL DEFAULT 0 CHECK (revenue_share_bp BETWEEN 0 AND 10000),\n"
    "  created_at timestamptz NOT NULL DEFAULT now());\n"
    "CREATE TABLE IF NOT EXISTS sites (\n"
    "  id text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9_-]{1,63}$'),\n"
    "  tenant text NOT NULL REFERENCES tenants(id),\n"
    "  region text NOT NULL CHECK (region ~ '^[A-Za-z0-9_-]{1,63}$'),\n"
    "  lat double precision NOT NULL DEFAULT 0 CHECK (lat BETWEEN -90 AND 90),\n"
    "  lon double precision NOT NULL DEFAULT 0 CHECK (lon BETWEEN -180 AND 180),\n"
    "  latency_tier int NOT NULL DEFAULT 0 CHECK (latency_tier BETWEEN 0 AND 3),\n"
    "  pue_milli int NOT NULL DEFAULT 1000 CHECK (pue_milli BETWEEN 1000 AND 3000),\n"
    "  currency text NOT NULL DEFAULT 'EUR' CHECK (currency ~ '^[A-Z]{3}$'),\n"
    "  power_start_min int[] NOT NULL DEFAULT '{}',\n"
    "  power_price_micros bigint[] NOT NULL DEFAULT '{}',\n"
    "  address text NOT NULL DEFAULT '',\n"
    "  notes text NOT NULL DEFAULT '',\n"
    "  timezone_min int NOT NULL DEFAULT 0,\n"
    "  created_at timestamptz NOT NULL DEFAULT now(),\n"
    "  CHECK (cardinality(power_start_min) = cardinality(power_price_micros)),\n"
    "  CHECK (0 <= ALL(power_price_micros)));\n"
    "CREATE INDEX IF NOT EXISTS sites_region ON sites(region);\n"
    "CREATE INDEX IF NOT EXISTS sites_tenant ON sites(tenant);\n"
    "CREATE TABLE IF NOT EXISTS nodes (\n"
    "  id text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9_-]{1,63}$'),\n"
    "  site text NOT NULL REFERENCES sites(id),\n"
    "  hostname text NOT NULL DEFAULT '',\n"
    "  agent_version text NOT NULL DEFAULT '',\n"
    "  boot_id text NOT NULL DEFAULT '',\n"
    "  cpu_cores int NOT NULL DEFAULT 0,\n"
    "  mem_mb int NOT NULL DEFAULT 0,\n"
    "  state text NOT NULL DEFAULT 'unknown',\n"
    "  state_since timestamptz NOT NULL DEFAULT now(),\n"
    "  registered_at timestamptz NOT NULL DEFAULT now());\n"
    "CREATE INDEX IF NOT EXISTS nodes_site ON nodes(site);\n"
    "CREATE TABLE IF NOT EXISTS gpus (\n"
    "  node text NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,\n"
    "  idx int NOT NULL,\n"
    "  uuid text NOT NULL,\n"
    "  model text NOT NULL,\n"
    "  vram_mb int NOT NULL,\n"
    "  serial text NOT NULL DEFAULT '',\n"
    "  interconnect text NOT NULL DEFAULT 'pcie',\n"
    "  PRIMARY KEY (node, idx));\n"
    "CREATE INDEX IF NOT EXISTS gpus_model ON gpus(model);\n"
    "CREATE TABLE IF NOT EXISTS pools (\n"
    "  id text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9_-]{1,63}$'),\n"
    "  tenant text NOT NULL REFERENCES tenants(id),\n"
    "  scope text NOT NULL CHECK (scope IN ('global','region','site')),\n"
    "  region text,\n"
    "  site text REFERENCES sites(id),\n"
    "  models text[] NOT NULL DEFAULT '{}',\n"
    "  description text NOT NULL DEFAULT '',\n"
    "  CHECK ((scope = 'site') = (site IS NOT NULL)),\n"
    "  CHECK ((scope = 'region') = (region IS NOT NULL)));\n"
    "CREATE TABLE IF NOT EXISTS products (\n"
    "  id text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9_-]{1,63}$'),\n"
    "  pool text NOT NULL REFERENCES pools(id),\n"
    "  gpu_model text NOT NULL DEFAULT '',\n"
    "  min_vram_mb int NOT NULL DEFAULT 0 CHECK (min_vram_mb >= 0),\n"
    "  price_micros_per_gpu_hour bigint NOT NULL CHECK (price_micros_per_gpu_hour >= 0),\n"
    "  currency text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),\n"
    "  site text REFERENCES sites(id),\n"
    "  description text NOT NULL DEFAULT '');\n"
    /* GPUs of a pool: the nodes whose site is in scope, filtered by model. */
    "CREATE OR REPLACE VIEW pool_gpus AS\n"
    "  SELECT p.id AS pool, n.site, n.id AS node, n.state, g.model\n"
    "  FROM pools p JOIN sites s ON (p.scope = 'global' OR (p.scope = 'region' AND s.region = p.region)\n"
    "                              OR (p.scope = 'site' AND s.id = p.site))\n"
    "  JOIN nodes n ON n.site = s.id JOIN gpus g ON g.node = n.id\n"
    "  WHERE cardinality(p.models) = 0 OR g.model = ANY(p.models);\n"
;

/* Step 2: nodes an operator deleted (gp.admin.node.delete).  Their
 * registration is refused until gp.admin.node.readmit removes the row. */
static const char step2_sql[] =
    "CREATE TABLE IF NOT EXISTS retired_nodes (\n"
    "  id text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9_-]{1,63}$'),\n"
    "  site text NOT NULL DEFAULT '',\n"
    "  retired_at timestamptz NOT NULL DEFAULT now());\n";

/* Step 3: a tenant's weight in the scheduler's fair share (Tenant.
 * fair_share_weight); existing tenants get 1, the weight of everyone. */
static const char step3_sql[] =
    "ALTER TABLE tenants ADD COLUMN IF NOT EXISTS fair_share_weight int NOT NULL DEFAULT 1\n"
    "  CHECK (fair_share_weight BETWEEN 1 AND 10000);\n";

/* Step 4: the recovery issue's node states.  'stale' became 'suspect'
 * (and 'lost' past the lost deadline); an operator's mode (draining,
 * cordoned, quarantined) is its own column, so a node's liveness and its
 * mode no longer overwrite each other; every transition is kept in
 * node_transitions (no foreign key: the history outlives a delete). */
static const char step4_sql[] =
    "ALTER TABLE nodes ADD COLUMN IF NOT EXISTS adm text NOT NULL DEFAULT ''\n"
    "  CHECK (adm IN ('', 'draining', 'cordoned', 'quarantined'));\n"
    "UPDATE nodes SET adm = state WHERE state IN ('draining', 'quarantined');\n"
    "UPDATE nodes SET state = 'suspect' WHERE state = 'stale';\n"
    "CREATE TABLE IF NOT EXISTS node_transitions (\n"
    "  id bigserial PRIMARY KEY,\n"
    "  node text NOT NULL,\n"
    "  site text NOT NULL,\n"
    "  prev text NOT NULL,\n"
    "  state text NOT NULL,\n"
    "  reason text NOT NULL DEFAULT '',\n"
    "  at timestamptz NOT NULL);\n"
    "CREATE INDEX IF NOT EXISTS node_transitions_node ON node_transitions (node, at);\n"
    "CREATE INDEX IF NOT EXISTS node_transitions_at ON node_transitions (at);\n";

/* Step 5: the inventory revision (Site.rev, Node.rev, SiteChange.rev,
 * NodeChange.rev).  One sequence for sites and nodes; a trigger gives a
 * row the next value whenever its inventory is written (a site's any
 * column; a node's registration, not its state changes), so a service
 * following the inventory (shared gp/inventory.h) keeps a change event
 * over a page read before it.  Row locks order the writes of one row, and
 * the trigger runs after the lock: a row's revisions only grow. */
static const char step5_sql[] =
    "CREATE SEQUENCE IF NOT EXISTS inventory_rev;\n"
    "ALTER TABLE sites ADD COLUMN IF NOT EXISTS rev bigint NOT NULL DEFAULT nextval('inventory_rev');\n"
    "ALTER TABLE nodes ADD COLUMN IF NOT EXISTS rev bigint NOT NULL DEFAULT nextval('inventory_rev');\n"
    "CREATE OR REPLACE FUNCTION inventory_rev_next() RETURNS trigger LANGUAGE plpgsql AS $$\n"
    "BEGIN NEW.rev := nextval('inventory_rev'); RETURN NEW; END $$;\n"
    "DROP TRIGGER IF EXISTS sites_rev ON sites;\n"
    "CREATE TRIGGER sites_rev BEFORE INSERT OR UPDATE ON sites\n"
    "  FOR EACH ROW EXECUTE FUNCTION inventory_rev_next();\n"
    "DROP TRIGGER IF EXISTS nodes_rev ON nodes;\n"
    "CREATE TRIGGER nodes_rev BEFORE INSERT OR UPDATE OF site, hostname, agent_version, boot_id,\n"
    "  cpu_cores, mem_mb, registered_at ON nodes FOR EACH ROW EXECUTE FUNCTION inventory_rev_next();\n";

const gp_migration registry_migrations[] = {
    {1, "initial schema", step1_sql},
    {2, "retired nodes", step2_sql},
    {3, "fair-share weight of a tenant", step3_sql},
    {4, "node modes and transitions", step4_sql},
    {5, "inventory revisions", step5_sql},
    GP_MIGRATION_END
};
