/* config.c -- gridpool-scheduler's options: the config table gp_app_main
 * loads (defaults < file < environment < flags; --help prints it). */
#include "scheduler.h"

const gp_cfg_opt scheduler_cfg_opts[] = {
    GP_CFG_TABLE(scheduler_cfg, common, gp_common_cfg_opts),
    GP_CFG_UINT("outbox-ms", scheduler_cfg, outbox_ms, 2000, 50, 600000,
                "how often job events left unpublished are looked for"),
    GP_CFG_UINT("outbox-grace-ms", scheduler_cfg, outbox_grace_ms, 5000, 0, 600000,
                "age of an unpublished job event before the outbox republishes it"),
    GP_CFG_UINT("tenant-cache-ms", scheduler_cfg, tenant_cache_ms, 60000, 0, 3600000,
                "how long a tenant the registry confirmed is trusted without asking again"),
    GP_CFG_UINT("gauge-ms", scheduler_cfg, gauge_ms, 10000, 100, 600000,
                "how often jobs are counted by state (gp_scheduler_jobs)"),
    GP_CFG_UINT("signal-timeout-ms", scheduler_cfg, signal_timeout_ms, 2000, 100, 60000,
                "deadline of a stop signal sent to an agent"),
    GP_CFG_UINT("bookings-ms", scheduler_cfg, bookings_ms, 5000, 200, 600000,
                "how often the snapshot's GPU bookings are synced with PostgreSQL's live attempts"),
    GP_CFG_UINT("feed-ms", scheduler_cfg, feed_ms, 60000, 1000, 3600000,
                "how often the registry's inventory (tenants, sites, pools, products, nodes) is "
                "reloaded over the bus; node state follows NodeState events in between"),
    GP_CFG_UINT("place-ms", scheduler_cfg, place_ms, 500, 20, 60000,
                "placement pass period (a pass also runs when capacity changes or a job is submitted)"),
    GP_CFG_UINT("place-batch", scheduler_cfg, place_batch, 64, 1, 1000,
                "pending jobs claimed from PostgreSQL per placement pass"),
    GP_CFG_UINT("claim-ms", scheduler_cfg, claim_ms, 10000, 1000, 600000,
                "how long this instance's claim on a pending job keeps other instances off it "
                "(a crashed instance's claims expire after this)"),
    GP_CFG_UINT("usage-ms", scheduler_cfg, usage_ms, 30000, 1000, 3600000,
                "how often tenants' decayed GPU usage is read from PostgreSQL for fair share"),
    GP_CFG_UINT("explain-max-nodes", scheduler_cfg, explain_max_nodes, 20000, 0, 1000000,
                "a pending job's reasons are counted over every node (walk_all) only up to this "
                "many nodes in the fleet; above it, over the index placement walked"),
    GP_CFG_UINT("dispatch-timeout-ms", scheduler_cfg, dispatch_timeout_ms, 5000, 100, 120000,
                "deadline of RunAttempt: no answer by then means the attempt failed to start"),
    GP_CFG_UINT("dispatch-max", scheduler_cfg, dispatch_max, 256, 1, 100000,
                "attempts being dispatched at once, at most (placement waits above it)"),
    GP_CFG_UINT("preempt-grace-ms", scheduler_cfg, preempt_grace_ms, 10000, 0, 3600000,
                "time between a victim's checkpoint request and its stop signal"),
    GP_CFG_UINT("instance-drain-notice-ms", scheduler_cfg, instance_drain_notice_ms, 300000, 0,
                86400000, "notice an instance gets before it moves off a draining node (its "
                "tenant hears it in a preempting event); a quarantined node's move at once"),
    GP_CFG_UINT("attempt-lease-ms", scheduler_cfg, attempt_lease_ms, 0, 0, 3600000,
                "lease_ms sent with RunAttempt (0: the agent's own lease from registration)"),
    GP_CFG_STR("checkpoint-root", scheduler_cfg, checkpoint_root, "/tmp/gridpool-checkpoints",
               "an attempt's checkpoint folder on its node is <checkpoint-root>/<job id> (one "
               "per job, so the next attempt resumes from it)"),
    GP_CFG_STR("checkpoint-shared-root", scheduler_cfg, checkpoint_shared_root, "",
               "the shared checkpoint store every node mounts at this path (e.g. NFS): a job's "
               "\"shared:\" checkpoints go to <root>/<tenant>/<job>; empty: none (jobs name "
               "their object store)"),
    GP_CFG_SECRET_STR("secret-key", scheduler_cfg, secret_key, "",
                      "key of tenant secrets (pgcrypto in PostgreSQL, which never stores it; 16 "
                      "to 128 bytes); empty: secret-key-file, else $CREDENTIALS_DIRECTORY/"
                      "secret-key (systemd), else secrets are off"),
    GP_CFG_STR("secret-key-file", scheduler_cfg, secret_key_file, "",
               "a file holding the secret-key (its first line), readable by the scheduler only"),
    GP_CFG_UINT("fair-half-life-ms", scheduler_cfg, fair_half_life_ms, 3600000, 1000, 2592000000u,
                "fair share: half-life of a tenant's GPU usage"),
    GP_CFG_UINT("hold-after-ms", scheduler_cfg, hold_after_ms, 1800000, 1000, 2592000000u,
                "a big job that waited this long is held: nodes are kept free for it"),
    GP_CFG_UINT("hold-gpus", scheduler_cfg, hold_gpus, 8, 1, 1024,
                "a job asking at least this many GPUs in all counts as big (for the hold)"),
    /* attempts, leases, fencing; heartbeat-ms and lease-ms as the registry's defaults,
     * since either may answer an agent (registration, lease) */
    GP_CFG_UINT("heartbeat-ms", scheduler_cfg, heartbeat_ms, 5000, 100, 600000,
                "heartbeat interval handed to agents in a lease reply"),
    GP_CFG_UINT("lease-ms", scheduler_cfg, lease_ms, 9000, 1000, 3600000,
                "attempt lease handed to agents in a lease reply (with 5 s beats: last "
                "heartbeat to replacement running p99 within 17 s)"),
    GP_CFG_UINT("maxrun-ms", scheduler_cfg, maxrun_ms, 5000, 100, 600000,
                "how often attempts running past their job's max_run_s are ended"),
    GP_CFG_UINT("reconcile-ms", scheduler_cfg, reconcile_ms, 60000, 200, 3600000,
                "how often Redis reservations are reconciled with PostgreSQL's live attempts"),
    GP_CFG_UINT("reconcile-grace-ms", scheduler_cfg, reconcile_grace_ms, 30000, 0, 3600000,
                "a reservation no live attempt backs is removed if booked at least this long "
                "before the reconcile read the live attempts (more than a booking takes to "
                "its attempt row's commit)"),
    GP_CFG_UINT("fence-margin-ms", scheduler_cfg, fence_margin_ms, 1500, 0, 600000,
                "a lost node's attempts are replaced this long after its last grant + the lease"),
    GP_CFG_UINT("max-platform-retries", scheduler_cfg, max_platform_retries, 10, 0, 1000000,
                "a job requeued after this many attempts ended by platform faults (node lost, "
                "lease lapsed, a dispatch refused by the node or unanswered, an attempt never "
                "dispatched) fails at the next; they never use up its max_attempts"),
    GP_CFG_END
};
