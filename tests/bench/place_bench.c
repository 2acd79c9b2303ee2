/* place_bench.c -- gridpool-scheduler placing 1-GPU jobs on a fleet of
 * ~100,000 simulated nodes, one and two instances, with submit -> placed
 * latency at full rate and at half the measured rate; next to
 * redis-benchmark running the scheduler's reservation (book) script alone
 * by EVALSHA against the same redis-server in the same run.
 *
 *   - the fleet: gridpool-sim --sites 33400 (100,173 nodes, 381,766 GPUs;
 *     GP_BENCH_PLACE_SITES=N for another size, ~3 nodes a site),
 *     every node a real agent (the agent's own code, simulated GPUs) in the
 *     sim's one process, registered through gridpool-registry, so the
 *     registry's inventory (PostgreSQL), the live hashes in Redis and each
 *     scheduler's snapshot hold them; RunAttempt is answered by those
 *     agents (no responder of the bench's own); heartbeats every 600 s
 *     (none during the run: this bench is about placement, hb_bench about
 *     heartbeats).  --hub-pools 0: the registry's pool list counts GPUs per
 *     pool through a view, and at this size its 334 hub pools take it about
 *     two minutes (see the report of this bench's first landing), so only
 *     the global and 8 regional pools exist;
 *   - order: the sim's inventory alone (--admin-only: tenants, sites,
 *     pools, products), then both schedulers (their first load is small:
 *     no nodes yet), then the agents (--admin 0): each node reaches the
 *     snapshots by its NodeState event (gp.admin.node.get); the bench waits
 *     until each instance's gp_scheduler_snapshot_nodes equals the fleet.
 *     (Started during the registration, a scheduler's first load competed
 *     with it for the registry and timed out, retried every place-ms);
 *   - jobs: tenant "op" (the fleet's operator: the pools are its own),
 *     1 GPU, any model, "sim:run=3600s", max_attempts 1, submitted through
 *     gp.api.op.job.submit with gp_call, SUBMIT_WINDOW in flight;
 *   - phases, in this order (two instances first, since an instance cannot
 *     leave the job API's queue group without stopping):
 *       two   both instances, submissions as fast as the window allows;
 *       one   instance B stopped (SIGTERM); the same, instance A alone;
 *       half  instance A, submissions paced at half of one's rate;
 *     each submits for at most PHASE_SUBMIT_S and then waits up to
 *     PHASE_SETTLE_S for its jobs to be placed; what is still pending then
 *     is cancelled (gp.api job.cancel) so it does not spill into the next;
 *   - placements per second: the sum of the instances'
 *     gp_scheduler_placements_total, polled every POLL_S, between the
 *     samples at 10 % and 90 % of the phase's placements (the steady part);
 *   - latency: per job, attempts.created_ms (stamped when the placement's
 *     transaction is sent) - jobs.created_ms (stamped when the submit is
 *     handled), p50 and p99 over the phase's jobs, from PostgreSQL;
 *   - CPU per placement, per phase: user + system seconds of each process
 *     on the path (both schedulers, PostgreSQL's postmaster and backends,
 *     nats-server, redis-server, registry, sim, this bench) over the
 *     phase, divided by its placements: each placement's share of its
 *     submit, placement, dispatch and start event, so the figure says
 *     where the machine's cores go;
 *   - checks: a job placed twice (more than one attempt) and failed starts
 *     (gp_scheduler_failed_starts_total: RunAttempts not acknowledged) are
 *     printed, both should be 0;
 *   - the reference, after every service has stopped (as hb_bench, so they
 *     do not share the CPUs): redis-benchmark -n 200000 -c 8 -P 16 EVALSHA
 *     of the book script (reserve_scripts.h, checked with SCRIPT EXISTS to
 *     be the text the scheduler loaded) on 100,000 healthy live hashes and
 *     one holder (each node's first call books its GPU 0, later calls find
 *     it booked by the same holder: every check runs, HSETNX writes once);
 *     ratio = placements/s / reference calls/s.
 *
 * Bounded: every wait has a deadline; expect ~3-5 minutes, half of it or
 * more the fleet's registration (~1,000 nodes/s through the registry on an
 * idle 2-core machine, with both schedulers fetching each new node; after
 * REGISTER_MAX_S the bench goes on with the nodes registered so far and
 * says so: place_register_complete=0, place_nodes).
 * GP_BENCH_SCHEDULER=PATH runs another scheduler binary (before/after).
 * Every child is stopped on every exit path.  Output: key=value lines. */
#include <ev.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include "bench.h"
#include "gp/bus.h"
#include "gp/call.h"
#include "gp/limits.h"
#include "../../services/scheduler/reserve_scripts.h"

#define SITES           33400     /* ~100,000 nodes; GP_BENCH_PLACE_SITES overrides */
#define SUBMIT_WINDOW   256
#define PHASE_SUBMIT_S  10.0
#define PHASE_SETTLE_S  10.0
#define PHASE_MAX_JOBS  60000
#define POLL_S          0.1
#define REGISTER_MAX_S  300.0     /* from the agents' start; then on with what registered */
#define MAX_SAMPLES     4096
#define TENANT          "op"
#define REF_NODES       100000

enum { SA, SB, NSCHED };

static struct ev_loop *loop;
static gp_bus         *bus;
static pid_t           reg_pid = -1, sim_pid = -1, sched_pid[NSCHED] = {-1, -1};
static int             sched_port[NSCHED];
static PGconn         *pg;
static const char     *stack_dir;

/* CPU of every process on the path, per placement: where a placement's
 * cost goes on this machine (every process shares its 2 cores). */
enum { CPU_SCHED, CPU_PG, CPU_NATS, CPU_REDIS, CPU_REG, CPU_SIM, CPU_BENCH, CPU_N };
static const char *const cpu_names[CPU_N] = {"scheduler", "postgres", "nats", "redis",
                                             "registry", "sim", "bench"};

static void
cpu_take(double *c)
{
    c[CPU_SCHED] = b_cpu_of(sched_pid[SA]) + b_cpu_of(sched_pid[SB]);
    c[CPU_PG] = b_cpu_tree(b_pid_file(stack_dir, "pg/data/postmaster.pid"));
    c[CPU_NATS] = b_cpu_of(b_pid_file(stack_dir, "nats.pid"));
    c[CPU_REDIS] = b_cpu_of(b_pid_file(stack_dir, "redis.pid"));
    c[CPU_REG] = b_cpu_of(reg_pid);
    c[CPU_SIM] = b_cpu_of(sim_pid);
    c[CPU_BENCH] = b_cpu_of(getpid());
}

/* ---- submitting ------------------------------------------------------------ */

typedef struct phase {
    const char *name;
    int         instances;
    double      rate;             /* submissions per second; 0 = as the window allows */
    /* results */
    unsigned    sent, accepted, refused;
    double      t_first, t_last_submit;
    double      placed_per_s, steady_s;
    double      placed;           /* placements counted by /metrics in the phase */
    double      p50_ms, p99_ms, max_ms;
    long long   jobs_placed, jobs_pending_end;
    double      load;             /* 1-minute load average at its start */
    double      cpu_us[CPU_N];    /* CPU per placement, by process (cpu_names) */
} phase;

static phase   *cur;
static unsigned inflight;

static void
submit_done(void *arg, gp_err err, const void *reply, const char *detail)
{
    (void)arg;
    (void)reply;
    inflight--;
    if (err == GP_EOK) {
        cur->accepted++;
    } else {
        if (cur->refused++ == 0)
            b_note("place: submit refused: %s %s", gp_err_name(err), detail);
    }
}

static void
submit_one(void)
{
    msg_job_spec s;
    char         subj[GP_MAX_SUBJECT + 1];
    const char  *args[2] = {TENANT, NULL};

    memset(&s, 0, sizeof(s));
    snprintf(s.name, sizeof(s.name), "pb-%s-%u", cur->name, cur->sent);
    snprintf(s.client_request_id, sizeof(s.client_request_id), "pb-%s-%u", cur->name, cur->sent);
    snprintf(s.command, sizeof(s.command), "sim:run=3600s");
    s.gpus_per_node = 1;
    s.nodes = 1;
    GP_SET_HAS(&s, MSG_JOB_SPEC__NODES);
    s.priority = 100;
    GP_SET_HAS(&s, MSG_JOB_SPEC__PRIORITY);
    s.max_attempts = 1;
    if (gp_op_subject(GP_OP_API_JOB_SUBMIT, subj, sizeof(subj), args) != GP_EOK)
        return;
    cur->sent++;
    /* the loop's clock: the bench turns it only now and then (a request's
     * deadline timer starts from ev_now, which would be minutes stale) */
    ev_now_update(loop);
    if (gp_call(bus, subj, GP_OP_API_JOB_SUBMIT->in, &s, GP_OP_API_JOB_SUBMIT->out, 10000,
                submit_done, NULL) == GP_EOK)
        inflight++;
    else
        cur->refused++;
}

/* Turns the loop for up to s seconds (or until *done). */
static void
spin(double s, const bool *done)
{
    double end = b_now() + s;

    while (b_now() < end && (done == NULL || !*done)) {
        ev_run(loop, EVRUN_NOWAIT);
        usleep(300);
    }
}

/* ---- metrics ----------------------------------------------------------------- */

/* The 1-minute load average (the machine is shared: figures are noisy). */
static double
b_load(void)
{
    double v = -1;
    FILE  *f = fopen("/proc/loadavg", "r");

    if (f != NULL) {
        if (fscanf(f, "%lf", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

static double
sched_metric(int i, const char *series)
{
    char  *body = NULL;
    double v = -1;

    if (sched_pid[i] > 0 && b_http_get(sched_port[i], "/metrics", &body) == 200)
        v = b_metric(body, series);
    free(body);
    return v;
}

/* The inventory loads each instance made (and abandoned) so far: a
 * snapshot short of the fleet is either still loading or failing. */
static void
feed_note(const char *when)
{
    for (int i = 0; i < NSCHED; i++)
        if (sched_pid[i] > 0)
            b_note("place: %s: scheduler %c: %.0f nodes, %.0f inventory loads, %.0f abandoned, "
                   "%.0f node events", when, 'a' + i,
                   sched_metric(i, "gp_scheduler_snapshot_nodes"),
                   sched_metric(i, "gp_scheduler_feed_loads_total"),
                   sched_metric(i, "gp_scheduler_feed_load_failures_total"),
                   sched_metric(i, "gp_scheduler_node_state_events_total"));
}

/* A series summed over the phase's instances (absent counts 0). */
#define BUSY_SERIES "gp_scheduler_reservations_total{result=\"busy\"}"

static double
metric_sum(int instances, const char *series)
{
    double sum = 0;

    for (int i = 0; i < instances; i++) {
        double v = sched_metric(i, series);

        sum += v > 0 ? v : 0;
    }
    return sum;
}

static double
placed_total(int instances)
{
    double sum = 0;

    for (int i = 0; i < instances; i++) {
        double v = sched_metric(i, "gp_scheduler_placements_total");

        sum += v > 0 ? v : 0;
    }
    return sum;
}

static double
failed_starts(void)
{
    static const char *const k[] = {
        "gp_scheduler_failed_starts_total{reason=\"refused\"}",
        "gp_scheduler_failed_starts_total{reason=\"timeout\"}",
        "gp_scheduler_failed_starts_total{reason=\"error\"}"};
    double sum = 0;

    for (int i = 0; i < NSCHED; i++)
        for (int j = 0; j < 3; j++) {
            double v = sched_metric(i, k[j]);

            sum += v > 0 ? v : 0;
        }
    return sum;
}

static long long
pg_int(const char *sql)
{
    PGresult *r = PQexec(pg, sql);
    long long v = -1;

    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
        v = atoll(PQgetvalue(r, 0, 0));
    else if (PQresultStatus(r) != PGRES_TUPLES_OK)
        b_note("place: query failed: %s", PQerrorMessage(pg));
    PQclear(r);
    return v;
}

/* ---- a phase -------------------------------------------------------------------- */

static void
cancel_done(void *arg, gp_err err, const void *reply, const char *detail)
{
    (void)arg, (void)err, (void)reply, (void)detail;
    inflight--;
}

/* What of the phase is still pending is cancelled, so the next phase
 * starts on an empty queue. */
static void
cancel_pending(const phase *p)
{
    char        sql[256], subj[GP_MAX_SUBJECT + 1];
    const char *args[2] = {TENANT, NULL};
    PGresult   *r;
    bool        done = false;

    snprintf(sql, sizeof(sql),
             "SELECT id FROM jobs WHERE name LIKE 'pb-%s-%%' AND state = 'pending'", p->name);
    r = PQexec(pg, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || gp_op_subject(GP_OP_API_JOB_CANCEL, subj,
                                                              sizeof(subj), args) != GP_EOK) {
        PQclear(r);
        return;
    }
    if (PQntuples(r) > 0)
        b_note("place: %s: cancelling %d jobs still pending", p->name, PQntuples(r));
    for (int i = 0, n = PQntuples(r); i < n;) {
        double end = b_now() + 20;

        while (i < n && inflight < SUBMIT_WINDOW) {
            msg_id_request q = {0};

            snprintf(q.id, sizeof(q.id), "%s", PQgetvalue(r, i++, 0));
            ev_now_update(loop);
            if (gp_call(bus, subj, GP_OP_API_JOB_CANCEL->in, &q, GP_OP_API_JOB_CANCEL->out, 10000,
                        cancel_done, NULL) == GP_EOK)
                inflight++;
        }
        while (inflight >= SUBMIT_WINDOW && b_now() < end)
            spin(0.01, NULL);
        if (b_now() >= end)
            break;
    }
    for (double end = b_now() + 12; inflight > 0 && b_now() < end;)
        spin(0.01, &done);
    PQclear(r);
}

/* pg_stat_statements (run.sh loads it in the bench's stack): reset at a
 * phase's start; at its end the statements that cost PostgreSQL most
 * (planning + execution) go to the notes.  Without the module: one note. */
static void
pg_stats_reset(void)
{
    PGresult *r = PQexec(pg, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");

    PQclear(r);
    r = PQexec(pg, "SELECT pg_stat_statements_reset()");
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        b_note("place: pg_stat_statements not loaded: %s", PQerrorMessage(pg));
    PQclear(r);
}

static void
pg_stats_note(const phase *p)
{
    PGresult *r = PQexec(pg,
        "SELECT calls, round((total_plan_time + total_exec_time)::numeric, 0),\n"
        "  round(total_plan_time::numeric, 0),\n"
        "  regexp_replace(left(query, 110), '\\s+', ' ', 'g')\n"
        "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database\n"
        "  WHERE datname = current_database())\n"
        "ORDER BY total_plan_time + total_exec_time DESC LIMIT 10");

    if (PQresultStatus(r) == PGRES_TUPLES_OK)
        for (int i = 0; i < PQntuples(r); i++)
            b_note("place: phase %s: pg %s calls, %s ms (plan %s): %s", p->name,
                   PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
                   PQgetvalue(r, i, 3));
    PQclear(r);
}

static void
run_phase(phase *p)
{
    double  t[MAX_SAMPLES], v[MAX_SAMPLES], base, t0, next_poll, submit_end, settle_end;
    int     n = 0;
    char    sql[512];
    double  c0[CPU_N], c1[CPU_N], tot = 0, busy0, lost0;
    char    cpus[256];
    size_t  cl = 0;

    cur = p;
    pg_stats_reset();
    cpu_take(c0);
    inflight = 0;
    base = placed_total(p->instances);
    busy0 = metric_sum(p->instances, BUSY_SERIES);
    lost0 = metric_sum(p->instances, "gp_scheduler_placement_conflicts_total");
    t0 = b_now();
    next_poll = t0;
    submit_end = t0 + PHASE_SUBMIT_S;
    settle_end = submit_end + PHASE_SETTLE_S;
    p->t_first = t0;
    b_note("place: phase %s: %d instance(s), rate %s, load %.2f", p->name, p->instances,
           p->rate > 0 ? "paced" : "as fast as the window allows", b_load());
    p->load = b_load();
    for (;;) {
        double now = b_now();

        if (now < submit_end && p->sent < PHASE_MAX_JOBS) {
            double due = p->rate > 0 ? (now - t0) * p->rate + 1 : PHASE_MAX_JOBS;

            while (p->sent < due && p->sent < PHASE_MAX_JOBS && inflight < SUBMIT_WINDOW)
                submit_one();
            p->t_last_submit = now;
        }
        ev_run(loop, EVRUN_NOWAIT);
        if (now >= next_poll && n < MAX_SAMPLES) {
            t[n] = now;
            v[n] = placed_total(p->instances) - base;
            n++;
            next_poll = now + POLL_S;
            /* submitted, answered, and all of them placed: done */
            if ((now >= submit_end || p->sent >= PHASE_MAX_JOBS) && inflight == 0 &&
                v[n - 1] >= p->accepted)
                break;
        }
        if (now >= settle_end)
            break;
        usleep(200);
    }
    p->placed = n > 0 ? v[n - 1] : 0;
    cpu_take(c1);
    for (int k = 0; k < CPU_N; k++) {
        p->cpu_us[k] = p->placed > 0 ? (c1[k] - c0[k]) * 1e6 / p->placed : 0;
        tot += p->cpu_us[k];
        cl += (size_t)snprintf(cpus + cl, sizeof(cpus) - cl, " %s %.0f", cpu_names[k],
                               p->cpu_us[k]);
    }
    b_note("place: phase %s: CPU us per placement (submit, placement, dispatch, start "
           "event):%s; total %.0f", p->name, cpus, tot);
    /* the instances' races: a GPU another one booked first (BUSY), a job
     * given back (claimed elsewhere meanwhile, or its write failed) */
    b_note("place: phase %s: reservations refused BUSY %.0f, placements given back %.0f",
           p->name, metric_sum(p->instances, BUSY_SERIES) - busy0,
           metric_sum(p->instances, "gp_scheduler_placement_conflicts_total") - lost0);
    /* steady part: between 10 % and 90 % of the phase's placements */
    if (n > 2 && p->placed > 20) {
        int i10 = 0, i90 = n - 1;

        while (i10 < n - 1 && v[i10] < 0.1 * p->placed)
            i10++;
        while (i90 > 0 && v[i90 - 1] >= 0.9 * p->placed)
            i90--;
        if (i90 > i10 && t[i90] > t[i10]) {
            p->placed_per_s = (v[i90] - v[i10]) / (t[i90] - t[i10]);
            p->steady_s = t[i90] - t[i10];
        }
    }
    snprintf(sql, sizeof(sql),
             "SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY a.created_ms - "
             "j.created_ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY a.created_ms - "
             "j.created_ms), max(a.created_ms - j.created_ms)\n"
             "FROM jobs j JOIN attempts a ON a.job_id = j.id AND a.attempt = 1\n"
             "WHERE j.name LIKE 'pb-%s-%%'", p->name);
    {
        PGresult *r = PQexec(pg, sql);

        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
            p->jobs_placed = atoll(PQgetvalue(r, 0, 0));
            p->p50_ms = atof(PQgetvalue(r, 0, 1));
            p->p99_ms = atof(PQgetvalue(r, 0, 2));
            p->max_ms = atof(PQgetvalue(r, 0, 3));
        }
        PQclear(r);
    }
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM jobs WHERE name LIKE 'pb-%s-%%' AND state = 'pending'", p->name);
    p->jobs_pending_end = pg_int(sql);
    b_note("place: phase %s: %u sent, %u accepted, %u refused over %.1f s; %.0f placed, "
           "steady %.0f/s over %.1f s; latency p50 %.1f ms p99 %.1f ms max %.0f ms; "
           "%lld still pending", p->name, p->sent, p->accepted, p->refused,
           p->t_last_submit - p->t_first, p->placed, p->placed_per_s, p->steady_s, p->p50_ms,
           p->p99_ms, p->max_ms, p->jobs_pending_end);
    pg_stats_note(p);
    cancel_pending(p);
}

static void
phase_kv(const phase *p)
{
    char k[96];

#define KV(suffix, val) (snprintf(k, sizeof(k), "place_%s_%s", p->name, suffix), b_kv(k, (val)))
    KV("submitted", p->accepted);
    KV("refused", p->refused);
    KV("submit_per_s", (double)(long long)(p->accepted /
                                           (p->t_last_submit > p->t_first
                                            ? p->t_last_submit - p->t_first : 1)));
    KV("placed", p->placed);
    KV("per_s", (double)(long long)p->placed_per_s);
    KV("steady_s", p->steady_s);
    KV("p50_ms", p->p50_ms);
    KV("p99_ms", p->p99_ms);
    KV("max_ms", p->max_ms);
    KV("pending_end", (double)p->jobs_pending_end);
    KV("loadavg", p->load);
    for (int i = 0; i < CPU_N; i++) {
        char name[48];

        snprintf(name, sizeof(name), "cpu_us_%s", cpu_names[i]);
        KV(name, (double)(long long)p->cpu_us[i]);
    }
#undef KV
}

/* ---- the reference ------------------------------------------------------------------ */

/* redis-benchmark running cmd; requests per second or -1. */
static double
redis_reference(const char *host, const char *port, const char *cmd_args)
{
    char   cmd[1024], line[4096];
    double rps = -1;
    FILE  *f;

    snprintf(cmd, sizeof(cmd),
             "redis-benchmark -h %s -p %s -n 200000 -c 8 -P 16 -q -r %d %s 2>&1 | tr '\\r' '\\n'",
             host, port, REF_NODES, cmd_args);
    if ((f = popen(cmd, "r")) == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        char *hit = strstr(line, " requests per second");

        if (hit != NULL) {
            char *q = hit;

            while (q > line && (q[-1] == '.' || (q[-1] >= '0' && q[-1] <= '9')))
                q--;
            rps = atof(q);
        }
    }
    pclose(f);
    return rps;
}

/* ---- children -------------------------------------------------------------------- */

static bool
log_has(const char *path, const char *needle, char *line_out, size_t n)
{
    FILE *f = fopen(path, "r");
    char  line[1024];
    bool  hit = false;

    if (f == NULL)
        return false;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strstr(line, needle) != NULL) {
            hit = true;
            if (line_out != NULL)
                snprintf(line_out, n, "%s", line);
        }
    fclose(f);
    return hit;
}

/* b_spawn of a literal argument list. */
static pid_t
spawn(const char *const *argv, const char *logpath)
{
    return b_spawn((char *const *)argv, logpath);
}

static pid_t
start_scheduler(const char *build, const char *stack, int i)
{
    char        bin[512], port[16], logp[512], inst[16];

    sched_port[i] = b_free_port();
    /* GP_BENCH_SCHEDULER: another build of the scheduler, for before/after */
    if (getenv("GP_BENCH_SCHEDULER") != NULL && *getenv("GP_BENCH_SCHEDULER") != '\0')
        snprintf(bin, sizeof(bin), "%s", getenv("GP_BENCH_SCHEDULER"));
    else
        snprintf(bin, sizeof(bin), "%s/bin/gridpool-scheduler", build);
    snprintf(port, sizeof(port), "%d", sched_port[i]);
    snprintf(inst, sizeof(inst), "pb-%c", 'a' + i);
    snprintf(logp, sizeof(logp), "%s/scheduler-%c.log", stack, 'a' + i);
    return spawn((const char *const[]){
        bin,
        "--http-port", port,
        "--instance", inst,
        /* the registry's lists are slow at this size (its site and pool counts):
         * a page may take seconds; and no periodic reload during the run */
        "--request-timeout-ms", "60000",
        "--feed-ms", "3600000",
        "--log-level", "warn",
        NULL}, logp);
}

/* What went wrong in the services, as counts of their warning and error
 * events, into the notes: the stack's folder (their logs) is removed
 * with it. */
static void
log_summary(const char *stack)
{
    char cmd[1024];

    snprintf(cmd, sizeof(cmd),
             "cd '%s' && for f in scheduler-a.log scheduler-b.log registry.log; do"
             " [ -f $f ] && grep -hoE 'level=(warn|error) svc=[a-z-]+ event=[a-z_]+' $f |"
             " sort | uniq -c | sort -rn | head -8 | sed \"s|^|# place: $f: |\" >&2; done",
             stack);
    if (system(cmd) != 0)
        b_note("place: no service warnings");
}

static void
stop_all(void)
{
    for (int i = 0; i < NSCHED; i++) {
        if (sched_pid[i] > 0)
            b_stop(sched_pid[i], 15);
        sched_pid[i] = -1;
    }
    if (sim_pid > 0)
        b_stop(sim_pid, 15);
    sim_pid = -1;
    if (reg_pid > 0)
        b_stop(reg_pid, 15);
    reg_pid = -1;
}

/* timeout(1) or ^C: the children go too (b_stop: kill, waitpid, usleep) */
static void
on_signal(int sig)
{
    (void)sig;
    stop_all();
    _exit(1);
}

static void
conn_cb(void *arg, bool connected)
{
    (void)arg;
    (void)connected;
}

int
main(void)
{
    const char   *build = b_env("GP_BUILD"), *stack = b_env("GP_STACK_DIR");
    const char   *url = b_env("GP_NATS_URL"), *rhost = b_env("GP_REDIS_HOST");
    const char   *rport = b_env("GP_REDIS_PORT"), *conninfo = b_env("GP_PG_CONNINFO");
    gp_bus_opts   o = {.url = url, .name = "place-bench"};
    redisContext *rc = NULL;
    redisReply   *rep;
    char          bin[512], logp[512], simlog[512], port[16], sha[41] = "", line[1024];
    char          refcmd[512];
    phase         ph_two = {.name = "two", .instances = 2}, ph_one = {.name = "one", .instances = 1};
    phase         ph_half = {.name = "half", .instances = 1};
    int           reg_port = b_free_port(), exit_code = 1, nodes = 0;
    double        t0, t_reg = 0, known[NSCHED] = {0, 0}, ref = -1, fs0, fs1;
    long long     twice;
    bool          match = false, reg_done = false;
    char          sites[16], spread[16];
    int           nsites = SITES;
    stack_dir = stack;

    /* a smaller fleet where the machine cannot register 100,000 nodes in
     * REGISTER_MAX_S (the figures then say how many: place_nodes) */
    if (getenv("GP_BENCH_PLACE_SITES") != NULL && atoi(getenv("GP_BENCH_PLACE_SITES")) > 0)
        nsites = atoi(getenv("GP_BENCH_PLACE_SITES"));
    snprintf(sites, sizeof(sites), "%d", nsites);
    /* registrations offered at ~1,100/s (3 nodes a site), about what the
     * registry absorbs here: a burst overflows its PostgreSQL backlog, and
     * each refused agent retries only after 30 s */
    snprintf(spread, sizeof(spread), "%d", nsites * 3 * 10 / 11);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    loop = ev_default_loop(0);
    pg = PQconnectdb(conninfo);
    rc = redisConnect(rhost, atoi(rport));
    if (PQstatus(pg) != CONNECTION_OK || rc == NULL || rc->err) {
        b_note("place: PostgreSQL or Redis not reachable");
        goto out;
    }

    /* ---- registry and fleet ---- */
    snprintf(bin, sizeof(bin), "%s/bin/gridpool-registry", build);
    snprintf(port, sizeof(port), "%d", reg_port);
    snprintf(logp, sizeof(logp), "%s/registry.log", stack);
    reg_pid = spawn((const char *const[]){
        bin,
        "--http-port", port,
        "--heartbeat-ms", "600000",
        "--pg-timeout-ms", "60000", /* its lists at 100,000 nodes: see above */
        "--request-timeout-ms", "60000", /* the same, for the route's deadline */
        "--log-level", "warn",
        NULL}, logp);
    if (!b_wait_healthy(reg_pid, reg_port, 30)) {
        b_note("place: registry not healthy within 30 s (log: %s)", logp);
        goto out;
    }
    /* 1. the inventory alone (sim --admin-only), 2. the schedulers on it (a
     * small first load: no nodes yet), 3. the agents (sim --admin 0): each
     * node reaches the snapshots by its NodeState event */
    snprintf(bin, sizeof(bin), "%s/bin/gridpool-sim", build);
    snprintf(simlog, sizeof(simlog), "%s/sim-admin.log", stack);
    t0 = b_now();
    sim_pid = spawn((const char *const[]){
        bin,
        "--sites", sites,
        "--hub-pools", "0",
        "--admin-only", "1",
        "--http-port", "0",
        "--log-level", "error",
        NULL}, simlog);
    while (waitpid(sim_pid, NULL, WNOHANG) != sim_pid && b_now() - t0 < 90)
        usleep(100000);
    if (b_now() - t0 >= 90 || !log_has(simlog, "inventory in registry", line, sizeof(line))) {
        b_note("place: the sim's inventory did not land within 90 s (log: %s)", simlog);
        goto out;
    }
    sim_pid = -1;
    b_note("place: %.*s", (int)strcspn(line, "\n"), line);
    for (int i = 0; i < NSCHED; i++)
        sched_pid[i] = start_scheduler(build, stack, i);
    for (double end = b_now() + 60; b_now() < end; usleep(200000))
        if (sched_metric(SA, "gp_scheduler_feed_loads_total") >= 1 &&
            sched_metric(SB, "gp_scheduler_feed_loads_total") >= 1)
            break;
    if (sched_metric(SA, "gp_scheduler_feed_loads_total") < 1 ||
        sched_metric(SB, "gp_scheduler_feed_loads_total") < 1) {
        b_note("place: the schedulers did not load the inventory within 60 s");
        goto out;
    }
    b_note("place: both schedulers loaded the inventory after %.1f s", b_now() - t0);
    snprintf(simlog, sizeof(simlog), "%s/sim.log", stack);
    t0 = b_now();
    sim_pid = spawn((const char *const[]){
        bin,
        "--sites", sites,
        "--hub-pools", "0",
        "--admin", "0",
        "--heartbeat-ms", "600000",
        "--spread-ms", spread,
        "--http-port", "0",
        "--log-level", "error", /* its log is polled for one line */
        NULL}, simlog);
    for (double next_note = b_now() + 15;
         !log_has(simlog, "registered ", line, sizeof(line)) && b_now() - t0 < REGISTER_MAX_S;
         usleep(200000)) {
        if (waitpid(sim_pid, NULL, WNOHANG) == sim_pid) {
            sim_pid = -1;
            b_note("place: the sim exited (log: %s)", simlog);
            goto out;
        }
        if (b_now() >= next_note) {
            b_note("place: %lld nodes registered after %.0f s (load %.2f)",
                   pg_int("SELECT count(*) FROM nodes"), b_now() - t0, b_load());
            next_note = b_now() + 15;
        }
    }
    t_reg = b_now() - t0;
    if (sscanf(strstr(line, "registered ") ? strstr(line, "registered ") : "", "registered %d",
               &nodes) != 1) {
        /* a loaded machine: the bench goes on with the nodes registered so
         * far, and says so (place_nodes, place_register_complete=0) */
        nodes = (int)pg_int("SELECT count(*) FROM nodes WHERE state = 'healthy'");
        b_note("place: the fleet did not register within %.0f s: going on with %d nodes",
               REGISTER_MAX_S, nodes);
    } else {
        reg_done = true;
        b_note("place: %d nodes registered in %.1f s", nodes, t_reg);
    }
    /* every node in both snapshots (NodeState -> gp.admin.node.get) */
    for (double end = b_now() + 60; b_now() < end; usleep(200000)) {
        for (int i = 0; i < NSCHED; i++)
            known[i] = sched_metric(i, "gp_scheduler_snapshot_nodes");
        if (known[SA] >= nodes && known[SB] >= nodes)
            break;
    }
    b_note("place: snapshots hold %.0f and %.0f nodes", known[SA], known[SB]);
    feed_note("after registration");
    if (known[SA] < 1 || known[SB] < 1)
        goto out;
    if (gp_bus_new(loop, &o, conn_cb, NULL, &bus) != GP_EOK)
        goto out;
    for (t0 = b_now(); !gp_bus_is_connected(bus) && b_now() - t0 < 10;)
        spin(0.01, NULL);

    fs0 = failed_starts();
    run_phase(&ph_two);
    b_stop(sched_pid[SB], 15);                 /* B leaves the queue group */
    sched_pid[SB] = -1;
    spin(1.0, NULL);
    run_phase(&ph_one);
    ph_half.rate = ph_one.placed_per_s > 0 ? ph_one.placed_per_s / 2 : 50;
    b_note("place: half rate: %.0f submissions/s", ph_half.rate);
    run_phase(&ph_half);
    fs1 = failed_starts();
    feed_note("at the end");
    twice = pg_int("SELECT count(*) FROM (SELECT job_id FROM attempts GROUP BY job_id "
                   "HAVING count(*) > 1) x");

    b_kv("place_nodes", nodes);
    b_kv("place_gpus", (double)pg_int("SELECT count(*) FROM gpus"));
    b_kv("place_register_s", t_reg);
    b_kv("place_register_complete", reg_done);
    b_kv("place_snapshot_nodes_a", known[SA]);
    b_kv("place_snapshot_nodes_b", known[SB]);
    phase_kv(&ph_two);
    phase_kv(&ph_one);
    phase_kv(&ph_half);
    b_kv("place_half_rate", (double)(long long)ph_half.rate);
    b_kv("place_failed_starts", fs1 - fs0);
    b_kv("place_placed_twice", (double)twice);

    /* the scheduler's book script: same text as the copy? (it loaded it) */
    rep = redisCommand(rc, "EVAL %s 0 %s", "return redis.sha1hex(ARGV[1])", sched_res_book_lua);
    if (rep != NULL && rep->type == REDIS_REPLY_STRING && rep->len == 40)
        memcpy(sha, rep->str, 41);
    freeReplyObject(rep);
    rep = redisCommand(rc, "SCRIPT EXISTS %s", sha);
    match = rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
            rep->element[0]->integer == 1;
    freeReplyObject(rep);
    b_kv("place_script_match", match);

    stop_all();

    /* ---- the reference ---- */
    freeReplyObject(redisCommand(rc, "SCRIPT LOAD %s", sched_res_book_lua));
    for (int i = 0; i < REF_NODES; i++)            /* redis-benchmark's __rand_int__: 12 digits */
        redisAppendCommand(rc, "HSET gp:{0}:pb:node:%012d state healthy reg 1", i);
    for (int i = 0; i < REF_NODES; i++)
        if (redisGetReply(rc, (void **)&rep) == REDIS_OK)
            freeReplyObject(rep);
    freeReplyObject(redisCommand(rc, "SET gp:{0}:pb:epoch 1"));   /* the shard is whole */
    snprintf(refcmd, sizeof(refcmd),
             "EVALSHA %s 4 gp:{0}:pb:resnodes gp:{0}:pb:res:__rand_int__ "
             "gp:{0}:pb:node:__rand_int__ gp:{0}:pb:epoch pb-ref:1 n__rand_int__ 0", sha);
    ref = redis_reference(rhost, rport, refcmd);
    if (ref > 0) {
        double best = ph_one.placed_per_s;

        b_kv("place_redis_ref_per_s", (double)(long long)ref);
        b_kv("place_one_ratio", ph_one.placed_per_s / ref);
        b_kv("place_two_ratio", ph_two.placed_per_s / ref);
        if (ph_two.placed_per_s > best)
            best = ph_two.placed_per_s;
        b_kv("place_aim_rate_met", best >= 5000);
        b_kv("place_aim_p99_met", ph_half.p99_ms > 0 && ph_half.p99_ms < 10);
    } else {
        b_note("place: redis-benchmark gave no figure");
    }
    exit_code = 0;
out:
    stop_all();
    log_summary(stack_dir);
    gp_bus_free(bus);
    if (rc != NULL)
        redisFree(rc);
    PQfinish(pg);
    return exit_code;
}
