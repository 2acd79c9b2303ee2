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
#include "gp/tenancy.h"
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


/* Step 3: attempt events, grants and fencing (attempts.c, maxrun).
 * jobs.progress_ms: the work done at the job's last checkpoint (the
 * agent's progress_ms), which a later attempt's RunAttempt.resume_ms
 * carries; attempts.progress_ms the same per attempt;
 * attempts.running_since_ms: when the scheduler took the attempt's
 * 'started', on the database's clock, which max run time is measured on
 * (one clock for the start and the check, whatever the agents' dates).
 *
 * The two functions decide an attempt event and the max run time each in
 * one transaction and one round trip, taking the job's row lock first
 * (the order every writer of a job and its attempts keeps).  They return
 * what the caller does after the commit: 'event' rows (job_events written
 * unpublished: the outbox) to publish, and 'stop' rows (another node of
 * the attempt) to signal and release. */
#define LIVE "('reserved','starting','running')"
#define OUT_COLS "kind text, tenant text, job_id text, seq bigint, event text, state text, " \
    "attempt int, site text, node text, reason text, exit_code int, at_ms bigint"
#define EV(ev, st, reason, code) \
    "RETURN QUERY SELECT 'event'::text, j.tenant, e.job_id, e.seq, e.event, e.state, e.attempt,\n" \
    "  e.site, e.node, e.reason, e.exit_code, e.at_ms FROM sched_event_add(p_job, " ev ", " st \
    ", p_attempt, p_site, p_node, " reason ", " code ", p_now) e;\n"

static const char step3_sql[] =
    "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS progress_ms bigint NOT NULL DEFAULT 0\n"
    "  CHECK (progress_ms >= 0);\n"
    "ALTER TABLE attempts ADD COLUMN IF NOT EXISTS progress_ms bigint CHECK (progress_ms >= 0);\n"
    "ALTER TABLE attempts ADD COLUMN IF NOT EXISTS running_since_ms bigint;\n"
    "CREATE INDEX IF NOT EXISTS attempts_running ON attempts (running_since_ms)\n"
    "  WHERE state = 'running';\n"
    /* one event row, numbered from the job's event_seq */
    "CREATE OR REPLACE FUNCTION sched_event_add(p_job text, p_event text, p_state text,\n"
    "    p_attempt int, p_site text, p_node text, p_reason text, p_exit int, p_at bigint)\n"
    "RETURNS job_events LANGUAGE sql AS $f$\n"
    "  WITH s AS (UPDATE jobs SET event_seq = event_seq + 1 WHERE id = p_job RETURNING event_seq)\n"
    "  INSERT INTO job_events (job_id, seq, event, state, attempt, site, node, reason, exit_code,\n"
    "    at_ms) SELECT p_job, s.event_seq, p_event, p_state, p_attempt, p_site, p_node,\n"
    "    COALESCE(p_reason, ''), p_exit, p_at FROM s RETURNING *\n"
    "$f$;\n"
    "CREATE OR REPLACE FUNCTION sched_attempt_event(p_job text, p_attempt int, p_site text,\n"
    "    p_node text, p_event text, p_exit int, p_at bigint, p_gpu bigint, p_mj bigint,\n"
    "    p_progress bigint, p_now bigint)\n"
    "RETURNS TABLE (" OUT_COLS ") LANGUAGE plpgsql AS $f$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  j jobs%ROWTYPE;\n"
    "  a attempts%ROWTYPE;\n"
    "  cur boolean;\n"
    "  st text;\n"
    "  why text;\n"
    "BEGIN\n"
    "  SELECT * INTO j FROM jobs WHERE jobs.id = p_job FOR UPDATE;\n"
    "  IF NOT FOUND THEN RETURN; END IF;\n"
    "  SELECT * INTO a FROM attempts x WHERE x.job_id = p_job AND x.attempt = p_attempt\n"
    "    AND x.node = p_node FOR UPDATE;\n"
    "  IF NOT FOUND THEN RETURN; END IF;\n"
    /* counters are cumulative: the largest report is the latest, so a
     * repeated or late event never lowers them */
    "  UPDATE attempts x SET gpu_ms = GREATEST(x.gpu_ms, COALESCE(p_gpu, 0)),\n"
    "    energy_mj = GREATEST(x.energy_mj, COALESCE(p_mj, 0))\n"
    "    WHERE x.job_id = p_job AND x.attempt = p_attempt AND x.rank = a.rank;\n"
    /* only the job's newest attempt moves a live job */
    "  cur := j.state IN ('starting','running') AND p_attempt =\n"
    "    (SELECT max(y.attempt) FROM attempts y WHERE y.job_id = p_job);\n"
    "  IF p_event = 'checkpointed' THEN\n"
    "    UPDATE attempts x SET checkpoint_ms = GREATEST(x.checkpoint_ms, p_at),\n"
    "      progress_ms = GREATEST(x.progress_ms, p_progress)\n"
    "      WHERE x.job_id = p_job AND x.attempt = p_attempt AND x.rank = a.rank;\n"
    "    IF cur AND (j.checkpoint_ms IS NULL OR p_at > j.checkpoint_ms) THEN\n"
    "      UPDATE jobs SET checkpoint_ms = p_at, updated_ms = p_now,\n"
    "        progress_ms = GREATEST(jobs.progress_ms, COALESCE(p_progress, 0)) WHERE jobs.id = p_job;\n"
    "      " EV("'checkpointed'", "j.state", "''", "NULL")
    "    END IF;\n"
    "    RETURN;\n"
    "  END IF;\n"
    "  IF p_event = 'started' THEN\n"
    "    IF a.state IN ('reserved','starting') THEN\n"
    "      UPDATE attempts x SET state = 'running', started_ms = p_at,\n"
    "        running_since_ms = (extract(epoch FROM clock_timestamp()) * 1000)::bigint\n"
    "        WHERE x.job_id = p_job AND x.attempt = p_attempt AND x.rank = a.rank;\n"
    "      IF cur AND j.state = 'starting' AND NOT EXISTS (SELECT 1 FROM attempts y\n"
    "          WHERE y.job_id = p_job AND y.attempt = p_attempt AND y.state IN ('reserved','starting'))\n"
    "      THEN\n"
    "        UPDATE jobs SET state = 'running', updated_ms = p_now WHERE jobs.id = p_job;\n"
    "        " EV("'started'", "'running'", "''", "NULL")
    "      END IF;\n"
    "    END IF;\n"
    "    RETURN;\n"
    "  END IF;\n"
    /* an end: an attempt that ended before (cancelled, timed out,
     * superseded, or this event seen already) keeps its state */
    /* a preempted attempt's end is the preemption's to finish */
    /* (also when the victim's end arrives before the stop's ack marked it) */
    "  IF a.state = 'preempted' OR COALESCE(a.preempted_by, '') <> '' THEN\n"
    "    RETURN QUERY SELECT 'preempted'::text, j.tenant, p_job, 0::bigint, p_event, a.state,\n"
    "      p_attempt, p_site, p_node, a.reason, p_exit, p_at;\n"
    "    RETURN;\n"
    "  END IF;\n"
    "  IF a.state NOT IN " LIVE " THEN RETURN; END IF;\n"
    "  st := CASE WHEN p_event = 'exited' AND p_exit = 0 THEN 'succeeded'\n"
    "    WHEN p_event = 'exited' THEN 'failed' WHEN p_event = 'killed' THEN 'killed'\n"
    "    WHEN p_event = 'lease_expired' THEN 'lost' ELSE 'failed_to_start' END;\n"
    "  why := CASE st WHEN 'succeeded' THEN '' WHEN 'failed' THEN 'exited with status ' || p_exit\n"
    "    WHEN 'killed' THEN 'killed on the node' WHEN 'lost' THEN 'its lease expired on the node'\n"
    "    ELSE 'failed to start' END;\n"
    /* the durable consumer handles messages concurrently, so an end may
     * be taken before its 'started': the job is told it started first */
    "  IF cur AND j.state = 'starting' AND p_event <> 'failed_to_start' THEN\n"
    "    UPDATE jobs SET state = 'running', updated_ms = p_now WHERE jobs.id = p_job;\n"
    "    " EV("'started'", "'running'", "''", "NULL")
    "  END IF;\n"
    "  UPDATE attempts x SET state = st, reason = why, exit_code = p_exit, ended_ms = p_at\n"
    "    WHERE x.job_id = p_job AND x.attempt = p_attempt AND x.rank = a.rank;\n"
    "  UPDATE jobs SET gpu_ms = (SELECT COALESCE(sum(y.gpu_ms), 0) FROM attempts y\n"
    "    WHERE y.job_id = p_job) WHERE jobs.id = p_job;\n"
    "  IF NOT cur THEN RETURN; END IF;\n"
    "  IF st = 'succeeded' THEN\n"
    "    IF NOT EXISTS (SELECT 1 FROM attempts y WHERE y.job_id = p_job AND y.attempt = p_attempt\n"
    "        AND y.state <> 'succeeded') THEN\n"
    "      UPDATE jobs SET state = 'succeeded', reason = '', exit_code = 0, ended_ms = p_now,\n"
    "        updated_ms = p_now WHERE jobs.id = p_job;\n"
    "      " EV("'succeeded'", "'succeeded'", "''", "0")
    "    END IF;\n"
    "    RETURN;\n"
    "  END IF;\n"
    /* the attempt failed: its other nodes stop; the job retries or fails */
    "  RETURN QUERY UPDATE attempts y SET state = 'killed', ended_ms = p_now,\n"
    "    reason = 'another node of the attempt ended: ' || why\n"
    "    WHERE y.job_id = p_job AND y.attempt = p_attempt AND y.state IN " LIVE "\n"
    "    RETURNING 'stop'::text, j.tenant, y.job_id, 0::bigint, ''::text, y.state, y.attempt,\n"
    "      y.site, y.node, y.reason, y.exit_code, y.ended_ms;\n"
    "  IF GREATEST(j.attempts_made, p_attempt) >= j.max_attempts THEN\n"
    "    UPDATE jobs SET state = 'failed', exit_code = p_exit, ended_ms = p_now, updated_ms = p_now,\n"
    "      reason = 'attempt ' || p_attempt || ' ' || why || '; no attempts left'\n"
    "      WHERE jobs.id = p_job;\n"
    "    " EV("'attempt_failed'", "'failed'", "why", "p_exit")
    "    " EV("'failed'", "'failed'", "'attempt ' || p_attempt || ' ' || why || '; no attempts left'", "p_exit")
    "  ELSE\n"
    "    UPDATE jobs SET state = 'pending', exit_code = p_exit, updated_ms = p_now,\n"
    "      reason = 'requeued: attempt ' || p_attempt || ' ' || why WHERE jobs.id = p_job;\n"
    "    " EV("'attempt_failed'", "'pending'", "why", "p_exit")
    "    " EV("'requeued'", "'pending'", "'attempt ' || p_attempt || ' ' || why", "NULL")
    "  END IF;\n"
    "END\n"
    "$f$;\n"
    /* max run time: the newest attempt of a live job running longer than
     * the job's max_run_s (database clock) ends 'timed_out' on every node
     * and the job fails; a batch per call */
    "CREATE OR REPLACE FUNCTION sched_maxrun(p_now bigint, p_limit int)\n"
    "RETURNS TABLE (" OUT_COLS ") LANGUAGE plpgsql AS $f$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  r record;\n"
    "  j jobs%ROWTYPE;\n"
    "  dbnow bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;\n"
    "  p_job text; p_attempt int; p_site text; p_node text; why text;\n"
    "BEGIN\n"
    "  FOR r IN SELECT DISTINCT a.job_id, a.attempt FROM attempts a JOIN jobs jj ON jj.id = a.job_id\n"
    "      WHERE a.state = 'running' AND jj.max_run_s > 0 AND jj.state IN ('starting','running')\n"
    "        AND a.running_since_ms + jj.max_run_s * 1000 <= dbnow LIMIT p_limit LOOP\n"
    "    SELECT * INTO j FROM jobs WHERE jobs.id = r.job_id AND jobs.state IN ('starting','running')\n"
    "      FOR UPDATE;\n"
    "    IF NOT FOUND OR r.attempt <> (SELECT max(y.attempt) FROM attempts y WHERE y.job_id = r.job_id)\n"
    "      THEN CONTINUE; END IF;\n"
    "    p_job := r.job_id; p_attempt := r.attempt;\n"
    "    why := 'max run time of ' || j.max_run_s || ' s exceeded';\n"
    "    SELECT y.site, y.node INTO p_site, p_node FROM attempts y WHERE y.job_id = p_job\n"
    "      AND y.attempt = p_attempt ORDER BY y.rank LIMIT 1;\n"
    "    RETURN QUERY UPDATE attempts y SET state = 'timed_out', reason = why, ended_ms = p_now\n"
    "      WHERE y.job_id = p_job AND y.attempt = p_attempt AND y.state IN " LIVE "\n"
    "      RETURNING 'stop'::text, j.tenant, y.job_id, 0::bigint, ''::text, y.state, y.attempt,\n"
    "        y.site, y.node, y.reason, y.exit_code, y.ended_ms;\n"
    "    UPDATE jobs SET state = 'failed', reason = why, ended_ms = p_now, updated_ms = p_now\n"
    "      WHERE jobs.id = p_job;\n"
    "    " EV("'timed_out'", "'failed'", "why", "NULL")
    "  END LOOP;\n"
    "END\n"
    "$f$;\n";

/* A placed preemptor frees the holds its victims handed over (queue.c):
 * found by preempted_by, without a scan of every attempt. */
static const char step4_sql[] =
    "CREATE INDEX attempts_preempted_by ON attempts (preempted_by)\n"
    "  WHERE preempted_by IS NOT NULL";

/* The claim (queue.c) walks each tenant's pending jobs in order, a few
 * per tenant, instead of numbering every pending job of the fleet. */
static const char step5_sql[] =
    "CREATE INDEX jobs_pending_tenant ON jobs (tenant, priority DESC, created_ms, id)\n"
    "  WHERE state = 'pending'";

/* Step 6: retries back off.  A job requeued after its own attempt failed
 * (sched_attempt_event's 'requeued: ...': exited non-zero, failed to
 * start) is not claimable again at once from its second such failure on:
 * 2 s after the second, doubling to 60 s (claim_until is what the claim
 * skips), so a job that keeps failing (a bad image, a node that kills it)
 * does not spin through its attempts.  An attempt lost with its node is
 * the platform's fault, not the job's: it never delays the next one (a
 * lost node's work must run elsewhere within seconds, however often it
 * was hit).  The attempt's state is written before the job's, so the
 * count includes it.  The reason says when it goes next. */
/* (retry_at, which the claim skips: its own column, since a placement's
 * claim rewrites claim_until and the reason) */
static const char step6_sql[] =
    "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS retry_at timestamptz;\n"
    "CREATE FUNCTION sched_requeue_backoff() RETURNS trigger LANGUAGE plpgsql AS $f$\n"
    "DECLARE d int; f int;\n"
    "BEGIN\n"
    "  IF NEW.reason NOT LIKE 'requeued: %' THEN RETURN NEW; END IF;\n"
    "  SELECT count(DISTINCT attempt) INTO f FROM attempts\n"
    "    WHERE job_id = NEW.id AND state IN ('failed', 'failed_to_start');\n"
    "  IF f >= 2 THEN\n"
    "    d := least(60000, 1000 * (2 ^ least(f - 1, 16))::int);\n"
    "    NEW.retry_at := now() + d * interval '1 ms';\n"
    "    NEW.reason := NEW.reason || '; next attempt in ' || (d / 1000) || ' s (backoff)';\n"
    "  END IF;\n"
    "  RETURN NEW;\n"
    "END\n"
    "$f$;\n"
    "CREATE TRIGGER jobs_requeue_backoff BEFORE UPDATE OF state ON jobs FOR EACH ROW\n"
    "  WHEN (NEW.state = 'pending' AND OLD.state IN ('starting', 'running'))\n"
    "  EXECUTE FUNCTION sched_requeue_backoff()";

/* Step 7: the product an attempt was priced under, so metering can tell
 * billing what was sold (billing rates it from its own price book). */
static const char step7_sql[] =
    "ALTER TABLE attempts ADD COLUMN IF NOT EXISTS product text " ID_CHECK("product");

/* Step 8: row-level security by tenant (gp/tenancy.h).  A tenant sees its
 * own jobs, their attempts and events; a site partner also sees the jobs
 * that ran on its sites, and of those the attempts and events at its
 * sites.  site_owners (site -> owning tenant) is kept from the registry's
 * site list by the feed.  The policies' lookups go through SECURITY
 * DEFINER functions: a policy on jobs that read attempts, whose policy
 * reads jobs, would recurse; the functions read as the tables' owner and
 * gp_member_of is still asked in the caller's role. */
static const char step8_sql[] =
    GP_TENANCY_SQL
    "CREATE TABLE IF NOT EXISTS site_owners (\n"
    "  site text PRIMARY KEY " ID_CHECK("site") ",\n"
    "  owner text NOT NULL " ID_CHECK("owner") ");\n"
    "CREATE INDEX IF NOT EXISTS site_owners_owner ON site_owners (owner);\n"
    "CREATE OR REPLACE FUNCTION sched_site_owner(p_site text) RETURNS text\n"
    "LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $f$\n"
    "  SELECT owner FROM site_owners WHERE site = p_site\n"
    "$f$;\n"
    "CREATE OR REPLACE FUNCTION sched_job_tenant(p_job text) RETURNS text\n"
    "LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $f$\n"
    "  SELECT tenant FROM jobs WHERE id = p_job\n"
    "$f$;\n"
    "CREATE OR REPLACE FUNCTION sched_job_site_owners(p_job text) RETURNS text[]\n"
    "LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $f$\n"
    "  SELECT coalesce(array_agg(DISTINCT o.owner), '{}') FROM attempts a\n"
    "    JOIN site_owners o ON o.site = a.site WHERE a.job_id = p_job\n"
    "$f$;\n"
    "GRANT SELECT ON jobs, attempts, job_events, site_owners TO gp_tenant;\n"
    "ALTER TABLE jobs ENABLE ROW LEVEL SECURITY;\n"
    "DROP POLICY IF EXISTS tenant_rows ON jobs;\n"
    "CREATE POLICY tenant_rows ON jobs FOR SELECT TO gp_tenant\n"
    "  USING (gp_member_of(tenant) OR\n"
    "         EXISTS (SELECT 1 FROM unnest(sched_job_site_owners(id)) o WHERE gp_member_of(o)));\n"
    "ALTER TABLE attempts ENABLE ROW LEVEL SECURITY;\n"
    "DROP POLICY IF EXISTS tenant_rows ON attempts;\n"
    "CREATE POLICY tenant_rows ON attempts FOR SELECT TO gp_tenant\n"
    "  USING (gp_member_of(sched_job_tenant(job_id)) OR gp_member_of(sched_site_owner(site)));\n"
    "ALTER TABLE job_events ENABLE ROW LEVEL SECURITY;\n"
    "DROP POLICY IF EXISTS tenant_rows ON job_events;\n"
    "CREATE POLICY tenant_rows ON job_events FOR SELECT TO gp_tenant\n"
    "  USING (gp_member_of(sched_job_tenant(job_id)) OR\n"
    "         (site IS NOT NULL AND gp_member_of(sched_site_owner(site))));\n"
    "ALTER TABLE site_owners ENABLE ROW LEVEL SECURITY;\n"
    "DROP POLICY IF EXISTS tenant_rows ON site_owners;\n"
    "CREATE POLICY tenant_rows ON site_owners FOR SELECT TO gp_tenant\n"
    "  USING (gp_member_of(owner))";

/* Step 9: one end for every attempt, one retry rule (end.c is its only
 * caller).  sched_attempt_end ends one node's row of an attempt (p_all
 * false: what an agent reported, a lost node, a preempted node) or every
 * live row of it (p_all: a failed start, a stale attempt, a cancel, the
 * max run time), and decides the job once no row of its newest attempt
 * is live:
 *
 *   the job's own failure (p_fault 'job': its process exited non-zero, it
 *     could not start because of itself)   -> failures + 1; the job fails
 *                                             once failures reach max_attempts
 *   a platform fault (p_fault 'platform': node lost, lease lapsed, killed
 *     by the platform, the node refused or never answered the dispatch, an
 *     attempt never dispatched)              -> platform_faults + 1; requeued,
 *                                             not charged; the job fails only
 *                                             past p_platform_max of them
 *   preempted (a higher priority, a node's evacuation) -> requeued, not
 *                                             charged, not bounded
 *   cancelled / timed_out                   -> the job ends, no retry
 *   succeeded on every node                 -> the job succeeded
 *
 * An attempt a preemption marked (preempted_by) ends preempted whatever
 * its node reports, unless it succeeded, was cancelled or timed out.  A
 * failed attempt's other live nodes are killed.  It returns what the
 * caller does after the commit: 'event' rows (job_events written
 * unpublished: the outbox) to publish; 'release' rows, a node whose row
 * this call ended, whose GPUs go back (to heir, the preemptor, when set:
 * not once it is placed, when a hold would only keep the GPUs idle -- a
 * multi-node victim's nodes may end after the preemptor took another);
 * 'stop' rows, the same for a node that may still run it and is told to
 * stop.  A repeated end finds no live row and returns nothing. */
#define END_COLS OUT_COLS ", heir text"
#define EVX(ev, st, reason, code) \
    "RETURN QUERY SELECT 'event'::text, j.tenant, e.job_id, e.seq, e.event, e.state, e.attempt,\n" \
    "  e.site, e.node, e.reason, e.exit_code, e.at_ms, NULL::text FROM sched_event_add(p_job, " \
    ev ", " st ", p_attempt, ev_site, ev_node, " reason ", " code ", p_now) e;\n"
#define EVE(ev, st, reason, code) \
    "RETURN QUERY SELECT 'event'::text, j.tenant, e.job_id, e.seq, e.event, e.state, e.attempt,\n" \
    "  e.site, e.node, e.reason, e.exit_code, e.at_ms, NULL::text FROM sched_event_add(p_job, " \
    ev ", " st ", p_attempt, p_site, p_node, " reason ", " code ", p_now) e;\n"
#define ATTEMPT_OF "y.job_id = p_job AND y.attempt = p_attempt"

static const char step9_sql[] =
    "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS failures int NOT NULL DEFAULT 0\n"
    "    CHECK (failures >= 0),\n"
    "  ADD COLUMN IF NOT EXISTS platform_faults int NOT NULL DEFAULT 0\n"
    "    CHECK (platform_faults >= 0);\n"
    /* live jobs carry on with what their ended attempts already used */
    "UPDATE jobs SET failures = c.f, platform_faults = c.p FROM (\n"
    "  SELECT job_id, count(DISTINCT attempt) FILTER (WHERE state = 'failed') AS f,\n"
    "    count(DISTINCT attempt) FILTER (WHERE state IN ('lost','killed','failed_to_start')) AS p\n"
    "  FROM attempts GROUP BY job_id) c\n"
    "WHERE jobs.id = c.job_id AND jobs.state IN ('pending','starting','running');\n"
    "CREATE OR REPLACE FUNCTION sched_attempt_end(p_job text, p_attempt int, p_node text,\n"
    "    p_all boolean, p_state text, p_fault text, p_why text, p_exit int, p_at bigint,\n"
    "    p_now bigint, p_stop boolean, p_platform_max int)\n"
    "RETURNS TABLE (" END_COLS ") LANGUAGE plpgsql AS $f$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  j jobs%ROWTYPE;\n"
    "  st text := p_state;\n"
    "  fault text := p_fault;\n"
    "  why text := COALESCE(p_why, '');\n"
    "  ev_site text; ev_node text;\n"
    "  n int;\n"
    "  cnt int;\n"
    "BEGIN\n"
    "  IF st NOT IN ('succeeded','failed','failed_to_start','killed','lost','timed_out',\n"
    "      'cancelled','preempted') OR COALESCE(fault, '') NOT IN ('', 'job', 'platform')\n"
    "      OR (fault IS NOT NULL) <> (st IN ('failed','failed_to_start','killed','lost')) THEN\n"
    "    RAISE EXCEPTION 'sched_attempt_end: state % with fault %', st, fault;\n"
    "  END IF;\n"
    "  SELECT * INTO j FROM jobs WHERE jobs.id = p_job FOR UPDATE;\n"
    "  IF NOT FOUND THEN RETURN; END IF;\n"
    "  IF st NOT IN ('succeeded','cancelled','timed_out') AND EXISTS (SELECT 1 FROM attempts y\n"
    "      WHERE " ATTEMPT_OF " AND y.state IN " LIVE " AND y.preempted_by IS NOT NULL\n"
    "        AND (p_all OR y.node = p_node)) THEN\n"
    "    st := 'preempted'; fault := NULL;\n"
    "  END IF;\n"
    "  SELECT y.site, y.node INTO ev_site, ev_node FROM attempts y WHERE " ATTEMPT_OF "\n"
    "    ORDER BY (y.node = p_node) DESC NULLS LAST, y.rank LIMIT 1;\n"
    /* the rows this call ends (a row that had reached running when its
     * attempt failed to start elsewhere was killed) */
    "  RETURN QUERY UPDATE attempts x SET\n"
    "    state = CASE WHEN st = 'failed_to_start' AND x.state = 'running' THEN 'killed' ELSE st END,\n"
    "    reason = CASE WHEN st = 'preempted' AND x.preempted_by = '" SCHED_EVAC_BY "'\n"
    "        THEN 'preempted: ' || x.reason\n"
    "      WHEN st = 'preempted' THEN 'preempted by ' || COALESCE(x.preempted_by, 'the scheduler')\n"
    "      WHEN st = 'failed_to_start' AND x.state = 'running'\n"
    "        THEN 'another node of the attempt ' || why ELSE why END,\n"
    "    exit_code = CASE WHEN x.node = p_node THEN p_exit END,\n"
    "    ended_ms = COALESCE(x.ended_ms, p_at)\n"
    "  WHERE x.job_id = p_job AND x.attempt = p_attempt AND x.state IN " LIVE "\n"
    "    AND (p_all OR x.node = p_node)\n"
    "  RETURNING CASE WHEN p_stop THEN 'stop' ELSE 'release' END, j.tenant, x.job_id, 0::bigint,\n"
    "    ''::text, x.state, x.attempt, x.site, x.node, x.reason, x.exit_code, x.ended_ms,\n"
    "    CASE WHEN x.state = 'preempted' AND x.preempted_by <> '" SCHED_EVAC_BY "'\n"
    "      AND NOT EXISTS (SELECT 1 FROM attempts h WHERE h.job_id = x.preempted_by\n"
    "        AND h.state IN " LIVE ") THEN x.preempted_by END;\n"
    "  GET DIAGNOSTICS n = ROW_COUNT;\n"
    "  IF n = 0 OR j.state NOT IN ('starting','running') OR p_attempt <>\n"
    "      (SELECT max(y.attempt) FROM attempts y WHERE y.job_id = p_job) THEN RETURN; END IF;\n"
    "  IF st IN ('succeeded','preempted') THEN\n"
    "    IF EXISTS (SELECT 1 FROM attempts y WHERE " ATTEMPT_OF "\n"
    "        AND (y.state IN " LIVE " OR (st = 'succeeded' AND y.state <> 'succeeded'))) THEN\n"
    "      RETURN;\n"
    "    END IF;\n"
    "    IF st = 'succeeded' THEN\n"
    "      UPDATE jobs SET state = 'succeeded', reason = '', exit_code = 0, ended_ms = p_now,\n"
    "        updated_ms = p_now WHERE jobs.id = p_job;\n"
    "      " EVX("'succeeded'", "'succeeded'", "''", "0")
    "    ELSE\n"
    "      UPDATE jobs SET state = 'pending', reason = 'preempted; resumes from its last checkpoint',\n"
    "        updated_ms = p_now, claimed_by = NULL, claim_until = NULL WHERE jobs.id = p_job;\n"
    "      " EVX("'requeued'", "'pending'", "'preempted'", "NULL")
    "    END IF;\n"
    "    RETURN;\n"
    "  END IF;\n"
    /* the attempt is over: its other nodes stop */
    "  RETURN QUERY UPDATE attempts y SET state = 'killed', ended_ms = p_now,\n"
    "    reason = 'another node of the attempt ended: ' || why\n"
    "  WHERE " ATTEMPT_OF " AND y.state IN " LIVE "\n"
    "  RETURNING 'stop'::text, j.tenant, y.job_id, 0::bigint, ''::text, y.state, y.attempt,\n"
    "    y.site, y.node, y.reason, y.exit_code, y.ended_ms, NULL::text;\n"
    "  IF st = 'cancelled' THEN\n"
    "    UPDATE jobs SET state = 'cancelled', reason = why, updated_ms = p_now, ended_ms = p_now\n"
    "      WHERE jobs.id = p_job;\n"
    "    " EVX("'cancelled'", "'cancelled'", "why", "NULL")
    "  ELSIF st = 'timed_out' THEN\n"
    "    UPDATE jobs SET state = 'failed', reason = why, ended_ms = p_now, updated_ms = p_now\n"
    "      WHERE jobs.id = p_job;\n"
    "    " EVX("'timed_out'", "'failed'", "why", "NULL")
    "  ELSIF fault = 'job' AND j.failures + 1 >= j.max_attempts THEN\n"
    "    why := 'attempt ' || p_attempt || ' ' || why || '; no attempts left';\n"
    "    UPDATE jobs SET state = 'failed', failures = j.failures + 1, exit_code = p_exit,\n"
    "      reason = why, ended_ms = p_now, updated_ms = p_now WHERE jobs.id = p_job;\n"
    "    " EVX("'attempt_failed'", "'failed'", "COALESCE(p_why, '')", "p_exit")
    "    " EVX("'failed'", "'failed'", "why", "p_exit")
    "  ELSIF fault = 'platform' AND j.platform_faults + 1 > p_platform_max THEN\n"
    "    cnt := j.platform_faults + 1;\n"
    "    why := 'attempt ' || p_attempt || ' ' || why || '; ' || cnt ||\n"
    "      ' attempts ended by platform faults, more than max-platform-retries ' || p_platform_max;\n"
    "    UPDATE jobs SET state = 'failed', platform_faults = cnt, exit_code = p_exit,\n"
    "      reason = why, ended_ms = p_now, updated_ms = p_now WHERE jobs.id = p_job;\n"
    "    " EVX("'attempt_failed'", "'failed'", "COALESCE(p_why, '')", "p_exit")
    "    " EVX("'failed'", "'failed'", "why", "p_exit")
    "  ELSE\n"
    "    UPDATE jobs SET state = 'pending', exit_code = p_exit, updated_ms = p_now,\n"
    "      failures = j.failures + (fault = 'job')::int,\n"
    "      platform_faults = j.platform_faults + (fault = 'platform')::int,\n"
    "      claimed_by = NULL, claim_until = NULL,\n"
    "      reason = 'requeued: attempt ' || p_attempt || ' ' || why ||\n"
    "        CASE WHEN fault = 'platform' THEN ' (a platform fault: not charged)' ELSE '' END\n"
    "      WHERE jobs.id = p_job;\n"
    "    " EVX("'attempt_failed'", "'pending'", "why", "p_exit")
    "    " EVX("'requeued'", "'pending'", "'attempt ' || p_attempt || ' ' || why", "NULL")
    "  END IF;\n"
    "END\n"
    "$f$;\n"
    /* an agent's event: counters, checkpoint, start; an end goes to
     * sched_attempt_end (its node's row; a failure kills the others) */
    "DROP FUNCTION IF EXISTS sched_attempt_event(text, int, text, text, text, int, bigint,\n"
    "  bigint, bigint, bigint, bigint);\n"
    "CREATE FUNCTION sched_attempt_event(p_job text, p_attempt int, p_site text,\n"
    "    p_node text, p_event text, p_exit int, p_at bigint, p_gpu bigint, p_mj bigint,\n"
    "    p_progress bigint, p_now bigint, p_platform_max int DEFAULT 10)\n"
    "RETURNS TABLE (" END_COLS ") LANGUAGE plpgsql AS $f$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  j jobs%ROWTYPE;\n"
    "  a attempts%ROWTYPE;\n"
    "  cur boolean;\n"
    "  st text;\n"
    "BEGIN\n"
    "  SELECT * INTO j FROM jobs WHERE jobs.id = p_job FOR UPDATE;\n"
    "  IF NOT FOUND THEN RETURN; END IF;\n"
    "  SELECT * INTO a FROM attempts x WHERE x.job_id = p_job AND x.attempt = p_attempt\n"
    "    AND x.node = p_node FOR UPDATE;\n"
    "  IF NOT FOUND THEN RETURN; END IF;\n"
    /* counters are cumulative: the largest report is the latest, so a
     * repeated or late event never lowers them */
    "  UPDATE attempts x SET gpu_ms = GREATEST(x.gpu_ms, COALESCE(p_gpu, 0)),\n"
    "    energy_mj = GREATEST(x.energy_mj, COALESCE(p_mj, 0))\n"
    "    WHERE x.job_id = p_job AND x.attempt = p_attempt AND x.rank = a.rank;\n"
    "  cur := j.state IN ('starting','running') AND p_attempt =\n"
    "    (SELECT max(y.attempt) FROM attempts y WHERE y.job_id = p_job);\n"
    "  IF p_event = 'checkpointed' THEN\n"
    "    UPDATE attempts x SET checkpoint_ms = GREATEST(x.checkpoint_ms, p_at),\n"
    "      progress_ms = GREATEST(x.progress_ms, p_progress)\n"
    "      WHERE x.job_id = p_job AND x.attempt = p_attempt AND x.rank = a.rank;\n"
    "    IF cur AND (j.checkpoint_ms IS NULL OR p_at > j.checkpoint_ms) THEN\n"
    "      UPDATE jobs SET checkpoint_ms = p_at, updated_ms = p_now,\n"
    "        progress_ms = GREATEST(jobs.progress_ms, COALESCE(p_progress, 0)) WHERE jobs.id = p_job;\n"
    "      " EVE("'checkpointed'", "j.state", "''", "NULL")
    "    END IF;\n"
    "    RETURN;\n"
    "  END IF;\n"
    "  IF p_event = 'started' THEN\n"
    "    IF a.state IN ('reserved','starting') THEN\n"
    "      UPDATE attempts x SET state = 'running', started_ms = p_at,\n"
    "        running_since_ms = (extract(epoch FROM clock_timestamp()) * 1000)::bigint\n"
    "        WHERE x.job_id = p_job AND x.attempt = p_attempt AND x.rank = a.rank;\n"
    "      IF cur AND j.state = 'starting' AND NOT EXISTS (SELECT 1 FROM attempts y\n"
    "          WHERE y.job_id = p_job AND y.attempt = p_attempt AND y.state IN ('reserved','starting'))\n"
    "      THEN\n"
    "        UPDATE jobs SET state = 'running', updated_ms = p_now WHERE jobs.id = p_job;\n"
    "        " EVE("'started'", "'running'", "''", "NULL")
    "      END IF;\n"
    "    END IF;\n"
    "    RETURN;\n"
    "  END IF;\n"
    "  IF a.state NOT IN " LIVE " THEN RETURN; END IF;\n"
    /* the durable consumer handles messages concurrently, so an end may
     * be taken before its 'started': the job is told it started first */
    "  IF cur AND j.state = 'starting' AND p_event <> 'failed_to_start' THEN\n"
    "    UPDATE jobs SET state = 'running', updated_ms = p_now WHERE jobs.id = p_job;\n"
    "    " EVE("'started'", "'running'", "''", "NULL")
    "  END IF;\n"
    /* killed: the agent stopped it because it was told to (a stop, a
     * lease's kill list, a newer attempt); a process that died of a
     * signal reports 'exited' with 128 + the signal */
    "  UPDATE jobs SET gpu_ms = (SELECT COALESCE(sum(y.gpu_ms), 0) FROM attempts y\n"
    "    WHERE y.job_id = p_job) WHERE jobs.id = p_job;\n"
    "  st := CASE WHEN p_event = 'exited' AND p_exit = 0 THEN 'succeeded'\n"
    "    WHEN p_event = 'exited' THEN 'failed' WHEN p_event = 'killed' THEN 'killed'\n"
    "    WHEN p_event = 'lease_expired' THEN 'lost' ELSE 'failed_to_start' END;\n"
    "  RETURN QUERY SELECT * FROM sched_attempt_end(p_job, p_attempt, p_node, false, st,\n"
    "    CASE WHEN st IN ('failed','failed_to_start') THEN 'job'\n"
    "      WHEN st IN ('killed','lost') THEN 'platform' END,\n"
    "    CASE st WHEN 'succeeded' THEN '' WHEN 'failed' THEN 'exited with status ' || p_exit\n"
    "      WHEN 'killed' THEN 'killed on the node' WHEN 'lost' THEN 'its lease expired on the node'\n"
    "      ELSE 'failed to start' END,\n"
    "    p_exit, p_at, p_now, false, p_platform_max);\n"
    "END\n"
    "$f$;\n"
    /* max run time: the newest attempt of a live job running longer than
     * the job's max_run_s (database clock) ends 'timed_out' on every node
     * and the job fails; a batch per call */
    "DROP FUNCTION IF EXISTS sched_maxrun(bigint, int);\n"
    "CREATE FUNCTION sched_maxrun(p_now bigint, p_limit int)\n"
    "RETURNS TABLE (" END_COLS ") LANGUAGE plpgsql AS $f$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  r record;\n"
    "  dbnow bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;\n"
    "BEGIN\n"
    "  FOR r IN SELECT DISTINCT a.job_id, a.attempt, jj.max_run_s FROM attempts a\n"
    "      JOIN jobs jj ON jj.id = a.job_id\n"
    "      WHERE a.state = 'running' AND jj.max_run_s > 0 AND jj.state IN ('starting','running')\n"
    "        AND a.running_since_ms + jj.max_run_s * 1000 <= dbnow\n"
    "      ORDER BY a.job_id LIMIT p_limit LOOP\n"
    "    RETURN QUERY SELECT * FROM sched_attempt_end(r.job_id, r.attempt, NULL, true, 'timed_out',\n"
    "      NULL, 'max run time of ' || r.max_run_s || ' s exceeded', NULL, p_now, p_now, true, 0);\n"
    "  END LOOP;\n"
    "END\n"
    "$f$;\n"
    /* a cancel: the job's live attempts end through sched_attempt_end (which
     * ends the job); a job with none live (pending) ends here */
    "CREATE OR REPLACE FUNCTION sched_job_cancel(p_job text, p_tenant text, p_now bigint)\n"
    "RETURNS TABLE (" END_COLS ") LANGUAGE plpgsql AS $f$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  j jobs%ROWTYPE;\n"
    "  r record;\n"
    "  why text := 'cancelled by the tenant';\n"
    "BEGIN\n"
    "  SELECT * INTO j FROM jobs WHERE jobs.id = p_job AND jobs.tenant = p_tenant FOR UPDATE;\n"
    "  IF NOT FOUND OR j.state NOT IN ('pending','starting','running') THEN RETURN; END IF;\n"
    "  FOR r IN SELECT DISTINCT y.attempt FROM attempts y WHERE y.job_id = p_job\n"
    "      AND y.state IN " LIVE " ORDER BY y.attempt LOOP\n"
    "    RETURN QUERY SELECT * FROM sched_attempt_end(p_job, r.attempt, NULL, true, 'cancelled',\n"
    "      NULL, why, NULL, p_now, p_now, true, 0);\n"
    "  END LOOP;\n"
    "  IF (SELECT jobs.state FROM jobs WHERE jobs.id = p_job) IN ('pending','starting','running')\n"
    "  THEN\n"
    "    UPDATE jobs SET state = 'cancelled', reason = why, updated_ms = p_now, ended_ms = p_now\n"
    "      WHERE jobs.id = p_job;\n"
    "    RETURN QUERY SELECT 'event'::text, j.tenant, e.job_id, e.seq, e.event, e.state,\n"
    "      e.attempt, e.site, e.node, e.reason, e.exit_code, e.at_ms, NULL::text\n"
    "    FROM sched_event_add(p_job, 'cancelled', 'cancelled', (SELECT max(y.attempt) FROM\n"
    "      attempts y WHERE y.job_id = p_job), (SELECT y.site FROM attempts y WHERE y.job_id =\n"
    "      p_job ORDER BY y.attempt DESC, y.rank LIMIT 1), (SELECT y.node FROM attempts y WHERE\n"
    "      y.job_id = p_job ORDER BY y.attempt DESC, y.rank LIMIT 1), why, NULL, p_now) e;\n"
    "  END IF;\n"
    "END\n"
    "$f$;\n"
    /* retries back off on the job's own failures only (step 6's count of
     * failed starts took a node's refusals and timeouts for the job's) */
    "CREATE OR REPLACE FUNCTION sched_requeue_backoff() RETURNS trigger LANGUAGE plpgsql AS $f$\n"
    "DECLARE d int;\n"
    "BEGIN\n"
    "  IF NEW.failures <= OLD.failures OR NEW.failures < 2 THEN RETURN NEW; END IF;\n"
    "  d := least(60000, 1000 * (2 ^ least(NEW.failures - 1, 16))::int);\n"
    "  NEW.retry_at := now() + d * interval '1 ms';\n"
    "  NEW.reason := NEW.reason || '; next attempt in ' || (d / 1000) || ' s (backoff)';\n"
    "  RETURN NEW;\n"
    "END\n"
    "$f$";

/* Container workloads: the image digest each attempt ran and the one the
 * job is pinned to (every attempt after the first runs it); an agent's
 * reason for a failed start (a pull's registry error) on the attempt;
 * checkpoints that outlive the node: the step and id the job reported
 * last (the next attempt resumes from them) and the step each attempt was
 * told to resume from. */
static const char step10_sql[] =
    "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS image_digest text\n"
    "  CHECK (image_digest ~ '^sha256:[0-9a-f]{64}$');\n"
    "ALTER TABLE attempts ADD COLUMN IF NOT EXISTS image_digest text\n"
    "  CHECK (image_digest ~ '^sha256:[0-9a-f]{64}$');\n"
    "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS checkpoint_step bigint CHECK (checkpoint_step >= 0);\n"
    "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS checkpoint_id text CHECK (length(checkpoint_id) <= 127);\n"
    "ALTER TABLE attempts ADD COLUMN IF NOT EXISTS resume_step bigint CHECK (resume_step >= 0);\n"
    "DROP FUNCTION IF EXISTS sched_attempt_event(text, int, text, text, text, int, bigint,\n"
    "  bigint, bigint, bigint, bigint, int);\n"
    "CREATE FUNCTION sched_attempt_event(p_job text, p_attempt int, p_site text,\n"
    "    p_node text, p_event text, p_exit int, p_at bigint, p_gpu bigint, p_mj bigint,\n"
    "    p_progress bigint, p_now bigint, p_platform_max int DEFAULT 10,\n"
    "    p_reason text DEFAULT NULL, p_digest text DEFAULT NULL, p_step bigint DEFAULT NULL,\n"
    "    p_ckpt_id text DEFAULT NULL)\n"
    "RETURNS TABLE (" END_COLS ") LANGUAGE plpgsql AS $f$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  j jobs%ROWTYPE;\n"
    "  a attempts%ROWTYPE;\n"
    "  cur boolean;\n"
    "  st text;\n"
    "BEGIN\n"
    "  SELECT * INTO j FROM jobs WHERE jobs.id = p_job FOR UPDATE;\n"
    "  IF NOT FOUND THEN RETURN; END IF;\n"
    "  SELECT * INTO a FROM attempts x WHERE x.job_id = p_job AND x.attempt = p_attempt\n"
    "    AND x.node = p_node FOR UPDATE;\n"
    "  IF NOT FOUND THEN RETURN; END IF;\n"
    /* counters are cumulative: the largest report is the latest, so a
     * repeated or late event never lowers them */
    "  UPDATE attempts x SET gpu_ms = GREATEST(x.gpu_ms, COALESCE(p_gpu, 0)),\n"
    "    energy_mj = GREATEST(x.energy_mj, COALESCE(p_mj, 0))\n"
    "    WHERE x.job_id = p_job AND x.attempt = p_attempt AND x.rank = a.rank;\n"
    "  cur := j.state IN ('starting','running') AND p_attempt =\n"
    "    (SELECT max(y.attempt) FROM attempts y WHERE y.job_id = p_job);\n"
    "  IF p_event = 'checkpointed' THEN\n"
    "    UPDATE attempts x SET checkpoint_ms = GREATEST(x.checkpoint_ms, p_at),\n"
    "      progress_ms = GREATEST(x.progress_ms, p_progress)\n"
    "      WHERE x.job_id = p_job AND x.attempt = p_attempt AND x.rank = a.rank;\n"
    "    IF cur AND (j.checkpoint_ms IS NULL OR p_at > j.checkpoint_ms) THEN\n"
    /* the step and id the job reported: what the next attempt resumes from */
    "      UPDATE jobs SET checkpoint_ms = p_at, updated_ms = p_now,\n"
    "        checkpoint_step = COALESCE(p_step, jobs.checkpoint_step),\n"
    "        checkpoint_id = CASE WHEN p_step IS NULL THEN jobs.checkpoint_id ELSE p_ckpt_id END,\n"
    "        progress_ms = GREATEST(jobs.progress_ms, COALESCE(p_progress, 0)) WHERE jobs.id = p_job;\n"
    "      " EVE("'checkpointed'", "j.state", "''", "NULL")
    "    END IF;\n"
    "    RETURN;\n"
    "  END IF;\n"
    "  IF p_event = 'started' THEN\n"
    /* the digest the first attempt ran is the job's: later ones run it */
    "    IF p_digest IS NOT NULL THEN\n"
    "      UPDATE attempts x SET image_digest = p_digest\n"
    "        WHERE x.job_id = p_job AND x.attempt = p_attempt AND x.rank = a.rank;\n"
    "      UPDATE jobs SET image_digest = p_digest WHERE jobs.id = p_job AND image_digest IS NULL;\n"
    "    END IF;\n"
    "    IF a.state IN ('reserved','starting') THEN\n"
    "      UPDATE attempts x SET state = 'running', started_ms = p_at, resume_step = j.checkpoint_step,\n"
    "        running_since_ms = (extract(epoch FROM clock_timestamp()) * 1000)::bigint\n"
    "        WHERE x.job_id = p_job AND x.attempt = p_attempt AND x.rank = a.rank;\n"
    "      IF cur AND j.state = 'starting' AND NOT EXISTS (SELECT 1 FROM attempts y\n"
    "          WHERE y.job_id = p_job AND y.attempt = p_attempt AND y.state IN ('reserved','starting'))\n"
    "      THEN\n"
    "        UPDATE jobs SET state = 'running', updated_ms = p_now WHERE jobs.id = p_job;\n"
    "        " EVE("'started'", "'running'", "''", "NULL")
    "      END IF;\n"
    "    END IF;\n"
    "    RETURN;\n"
    "  END IF;\n"
    "  IF a.state NOT IN " LIVE " THEN RETURN; END IF;\n"
    /* the durable consumer handles messages concurrently, so an end may
     * be taken before its 'started': the job is told it started first */
    "  IF cur AND j.state = 'starting' AND p_event <> 'failed_to_start' THEN\n"
    "    UPDATE jobs SET state = 'running', updated_ms = p_now WHERE jobs.id = p_job;\n"
    "    " EVE("'started'", "'running'", "''", "NULL")
    "  END IF;\n"
    /* killed: the agent stopped it because it was told to (a stop, a
     * lease's kill list, a newer attempt); a process that died of a
     * signal reports 'exited' with 128 + the signal */
    "  UPDATE jobs SET gpu_ms = (SELECT COALESCE(sum(y.gpu_ms), 0) FROM attempts y\n"
    "    WHERE y.job_id = p_job) WHERE jobs.id = p_job;\n"
    "  st := CASE WHEN p_event = 'exited' AND p_exit = 0 THEN 'succeeded'\n"
    "    WHEN p_event = 'exited' THEN 'failed' WHEN p_event = 'killed' THEN 'killed'\n"
    "    WHEN p_event = 'lease_expired' THEN 'lost' ELSE 'failed_to_start' END;\n"
    "  RETURN QUERY SELECT * FROM sched_attempt_end(p_job, p_attempt, p_node, false, st,\n"
    "    CASE WHEN st IN ('failed','failed_to_start') THEN 'job'\n"
    "      WHEN st IN ('killed','lost') THEN 'platform' END,\n"
    "    CASE st WHEN 'succeeded' THEN '' WHEN 'failed' THEN 'exited with status ' || p_exit\n"
    "      WHEN 'killed' THEN 'killed on the node' WHEN 'lost' THEN 'its lease expired on the node'\n"
    "      ELSE 'failed to start' || COALESCE(': ' || NULLIF(p_reason, ''), '') END,\n"
    "    p_exit, p_at, p_now, false, p_platform_max);\n"
    "END\n"
    "$f$";

/* GPU instances: a job's kind ('instance': runs until stopped, no max
 * run) and each attempt's endpoints (name=host:port/proto, comma list:
 * where its named ports are reached).  The event function of step 10 is
 * wrapped, not copied: the wrapper records the endpoints a 'started'
 * carries (and names them in the job's started event: the tenant learns
 * a recreated instance's new endpoints from its events), and an
 * instance's exit with status 0 ends its attempt as its own failure, not
 * a success (an instance runs until it is stopped: it is restarted, with
 * the backoff of step 6, its exits counted against max_attempts).  An
 * instance on a draining node moves at evacuate_at_ms (the notice).  And
 * a lost node's attempt that never reached running ends without the
 * 'started' job event step 10 would tell first. */
#define EV_ARGS "p_job, p_attempt, p_site, p_node, p_event, p_exit, p_at, p_gpu, p_mj,\n" \
    "    p_progress, p_now, p_platform_max, p_reason, p_digest, p_step, p_ckpt_id"
static const char step11_sql[] =
    "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'job'\n"
    "  CHECK (kind IN ('job', 'instance'));\n"
    "ALTER TABLE attempts ADD COLUMN IF NOT EXISTS endpoints text\n"
    "  CHECK (length(endpoints) <= 1024);\n"
    "ALTER TABLE attempts ADD COLUMN IF NOT EXISTS evacuate_at_ms bigint;\n"
    "ALTER FUNCTION sched_attempt_event(text, int, text, text, text, int, bigint, bigint,\n"
    "  bigint, bigint, bigint, int, text, text, bigint, text) RENAME TO sched_attempt_event_v10;\n"
    "CREATE FUNCTION sched_attempt_event(p_job text, p_attempt int, p_site text,\n"
    "    p_node text, p_event text, p_exit int, p_at bigint, p_gpu bigint, p_mj bigint,\n"
    "    p_progress bigint, p_now bigint, p_platform_max int DEFAULT 10,\n"
    "    p_reason text DEFAULT NULL, p_digest text DEFAULT NULL, p_step bigint DEFAULT NULL,\n"
    "    p_ckpt_id text DEFAULT NULL, p_endpoints text DEFAULT NULL)\n"
    "RETURNS TABLE (" END_COLS ") LANGUAGE plpgsql AS $f$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  jk text;\n"
    "  ep text := 'endpoints ' || p_endpoints;\n"
    "  r record;\n"
    "BEGIN\n"
    "  SELECT j.kind INTO jk FROM jobs j WHERE j.id = p_job FOR UPDATE;\n"
    "  IF NOT FOUND THEN RETURN; END IF;\n"
    "  IF jk = 'instance' AND p_event = 'exited' AND p_exit = 0 THEN\n"
    "    UPDATE attempts x SET gpu_ms = GREATEST(x.gpu_ms, COALESCE(p_gpu, 0)),\n"
    "      energy_mj = GREATEST(x.energy_mj, COALESCE(p_mj, 0))\n"
    "      WHERE x.job_id = p_job AND x.attempt = p_attempt AND x.node = p_node;\n"
    "    UPDATE jobs SET gpu_ms = (SELECT COALESCE(sum(y.gpu_ms), 0) FROM attempts y\n"
    "      WHERE y.job_id = p_job) WHERE jobs.id = p_job;\n"
    "    RETURN QUERY SELECT * FROM sched_attempt_end(p_job, p_attempt, p_node, false, 'failed',\n"
    "      'job', 'exited with status 0 (an instance runs until it is stopped)', 0, p_at, p_now,\n"
    "      false, p_platform_max);\n"
    "    RETURN;\n"
    "  END IF;\n"
    /* a lost node's attempt that never ran: no 'started' for the job
     * (step 10's function tells a starting job it started before any end) */
    "  IF p_event = 'lease_expired' AND NOT EXISTS (SELECT 1 FROM attempts x\n"
    "      WHERE x.job_id = p_job AND x.attempt = p_attempt AND x.node = p_node\n"
    "        AND x.state = 'running') THEN\n"
    "    RETURN QUERY SELECT * FROM sched_attempt_end(p_job, p_attempt, p_node, false, 'lost',\n"
    "      'platform', 'its lease expired on the node', p_exit, p_at, p_now, false,\n"
    "      p_platform_max);\n"
    "    RETURN;\n"
    "  END IF;\n"
    "  IF p_event <> 'started' OR p_endpoints IS NULL THEN\n"
    "    RETURN QUERY SELECT * FROM sched_attempt_event_v10(" EV_ARGS ");\n"
    "    RETURN;\n"
    "  END IF;\n"
    "  UPDATE attempts x SET endpoints = p_endpoints\n"
    "    WHERE x.job_id = p_job AND x.attempt = p_attempt AND x.node = p_node;\n"
    /* row by row: an UPDATE in the same statement would not see the
     * event row the function inserted */
    "  FOR r IN SELECT * FROM sched_attempt_event_v10(" EV_ARGS ") LOOP\n"
    "    IF r.kind = 'event' AND r.event = 'started' THEN\n"
    "      UPDATE job_events e SET reason = ep WHERE e.job_id = r.job_id AND e.seq = r.seq;\n"
    "      r.reason := ep;\n"
    "    END IF;\n"
    "    kind := r.kind; tenant := r.tenant; job_id := r.job_id; seq := r.seq;\n"
    "    event := r.event; state := r.state; attempt := r.attempt; site := r.site;\n"
    "    node := r.node; reason := r.reason; exit_code := r.exit_code; at_ms := r.at_ms;\n"
    "    heir := r.heir;\n"
    "    RETURN NEXT;\n"
    "  END LOOP;\n"
    "END\n"
    "$f$";

/* Tenant secrets (secrets.c): the value encrypted by pgcrypto's
 * pgp_sym_encrypt_bytea under the deployment's secret-key, which the
 * scheduler passes as a query parameter and the database never stores.
 * Only the tenant's own role sees its rows (not a parent's: a secret is
 * not inventory), and no tenant role may read the value column at all:
 * a partner's login reads names and times, never even the ciphertext.
 * Version 12: 11 is the GPU-instance step being written beside this one. */
static const char step12_sql[] =
    "CREATE EXTENSION IF NOT EXISTS pgcrypto;\n"
    "CREATE TABLE IF NOT EXISTS secrets (\n"
    "  tenant text NOT NULL " ID_CHECK("tenant") ",\n"
    "  name text NOT NULL " ID_CHECK("name") ",\n"
    "  value bytea NOT NULL,\n"
    "  size int NOT NULL CHECK (size BETWEEN 1 AND 16384),\n"
    "  created_ms bigint NOT NULL,\n"
    "  updated_ms bigint NOT NULL,\n"
    "  PRIMARY KEY (tenant, name));\n"
    "GRANT SELECT (tenant, name, size, created_ms, updated_ms), INSERT, DELETE,\n"
    "  UPDATE (value, size, updated_ms) ON secrets TO gp_tenant;\n"
    "ALTER TABLE secrets ENABLE ROW LEVEL SECURITY;\n"
    "DROP POLICY IF EXISTS tenant_rows ON secrets;\n"
    "CREATE POLICY tenant_rows ON secrets FOR ALL TO gp_tenant\n"
    "  USING (current_user = 'gpt_' || tenant) WITH CHECK (current_user = 'gpt_' || tenant)";

/* Step 13: least privilege (gp/dbrole.h).  The scheduler may log in as a
 * role of its own, which cannot make roles: gp_tenant_role runs as its
 * owner (gridpool_owner, CREATEROLE, or the superuser of a one-user
 * database) and only the roles granted EXECUTE call it (the scheduler's:
 * dbgrants.c), not PUBLIC, so a partner's login cannot make itself a
 * member of another tenant's role.  The policies' lookups, SECURITY
 * DEFINER too, are for the tenants' roles alone. */
static const char step13_sql[] =
    "ALTER FUNCTION gp_tenant_role(text) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;\n"
    "REVOKE EXECUTE ON FUNCTION gp_tenant_role(text) FROM PUBLIC;\n"
    "REVOKE EXECUTE ON FUNCTION sched_site_owner(text), sched_job_tenant(text),\n"
    "  sched_job_site_owners(text) FROM PUBLIC;\n"
    "GRANT EXECUTE ON FUNCTION sched_site_owner(text), sched_job_tenant(text),\n"
    "  sched_job_site_owners(text) TO gp_tenant";

const gp_migration scheduler_migrations[] = {
    {1, "jobs, attempts, job events", step1_sql},
    {2, "placement claims and pending reasons", step2_sql},
    {3, "attempt events, progress, max run time", step3_sql},
    {4, "attempts by preemptor", step4_sql},
    {5, "pending jobs by tenant", step5_sql},
    {6, "retry backoff", step6_sql},
    {7, "product of an attempt", step7_sql},
    {8, "row-level security by tenant, site owners", step8_sql},
    {9, "one end for every attempt, one retry rule", step9_sql},
    {10, "image digests, reasons of failed starts, checkpoint steps", step10_sql},
    {11, "instances: kind, endpoints", step11_sql},

    {12, "tenant secrets", step12_sql},
    {13, "tenant roles made by the owner", step13_sql},
    GP_MIGRATION_END
};
