/* attempts_test.c -- attempts, grants and fencing against real NATS,
 * Redis and PostgreSQL, with a real gridpool-registry, gridpool-scheduler
 * and gridpool-agent (simulated GPUs, "sim:" jobs).
 *
 * The placement loop is written elsewhere, so the test makes attempts
 * itself: the job and attempt rows in PostgreSQL, the reservation in
 * Redis (the layout of reserve.h), RunAttempt to the agent.  Then:
 * an attempt's life (started -> running -> exited 0 -> succeeded, GPUs
 * free, final counters stored); a failing job retried up to max_attempts
 * then failed; checkpointed progress; duplicate delivery (same and other
 * Nats-Msg-Id); events published while the scheduler is down; a node
 * whose work moved told to kill the superseded attempt; an attempt
 * without a reservation killed; cancel frees the GPUs; max run time; the
 * reconcile removing an orphan and rebuilding after FLUSHALL. */
#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include "gp/clock.h"
#include "gp/shard.h"
#include "msg_gen.h"
#include "test_stack.h"

#define SITE "s1"
#define NODE "n1"

static struct ev_loop *loop;
static gp_bus         *bus;
static PGconn         *pg;
static redisContext   *rd;
static int             sched_http;
static pid_t           sched_pid;

/* ---- helpers ------------------------------------------------------------- */

static char *
sql1(const char *fmt, ...)
{
    static char out[512];
    char        q[2048];
    va_list     ap;
    PGresult   *r;

    va_start(ap, fmt);
    vsnprintf(q, sizeof(q), fmt, ap);
    va_end(ap);
    r = PQexec(pg, q);
    out[0] = '\0';
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
        snprintf(out, sizeof(out), "%s", PQgetvalue(r, 0, 0));
    else if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK)
        snprintf(out, sizeof(out), "ERROR: %s", PQresultErrorMessage(r));
    PQclear(r);
    return out;
}

static void
run_for(double s)
{
    int never = 0;

    tl_run_until(loop, &never, s);
}

/* Polls a query until it returns want (the loop runs meanwhile). */
static bool
wait_sql(double timeout_s, const char *want, const char *q)
{
    double end = tl_now() + timeout_s;

    while (tl_now() < end) {
        if (strcmp(sql1("%s", q), want) == 0)
            return true;
        run_for(0.1);
    }
    fprintf(stderr, "# wait_sql: %s -> '%s' (want '%s')\n", q, sql1("%s", q), want);
    return false;
}

static redisReply *
redis(const char *fmt, ...)
{
    va_list     ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(rd, fmt, ap);
    va_end(ap);
    return r;
}

static long long
redis_int(const char *fmt, ...)
{
    va_list     ap;
    redisReply *r;
    long long   v;

    va_start(ap, fmt);
    r = redisvCommand(rd, fmt, ap);
    va_end(ap);
    v = r != NULL && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    return v;
}

static void
res_key(char *out, size_t n, const char *node)
{
    snprintf(out, n, "gp:{%u}:res:%s", gp_shard_of(SITE), node);
}

/* Books GPU gpu of node for (job, attempt) as reserve.c does, reserved
 * age_ms ago on Redis's clock. */
static void
book(const char *node, int gpu, const char *job, unsigned attempt, long long age_ms)
{
    char        k[128], idx[64], val[160];
    redisReply *t = redis("TIME");
    long long   now = t != NULL && t->type == REDIS_REPLY_ARRAY
                    ? atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000 : 0;

    freeReplyObject(t);
    res_key(k, sizeof(k), node);
    snprintf(val, sizeof(val), "%s:%u:%lld", job, attempt, now - age_ms);
    freeReplyObject(redis("HSET %s %d %s", k, gpu, val));
    snprintf(idx, sizeof(idx), "gp:{%u}:resnodes", gp_shard_of(SITE));
    freeReplyObject(redis("SADD %s %s", idx, node));
}

static bool
held(const char *node, int gpu, const char *job, unsigned attempt)
{
    char        k[128], want[128];
    redisReply *r;
    bool        ok;

    res_key(k, sizeof(k), node);
    r = redis("HGET %s %d", k, gpu);
    snprintf(want, sizeof(want), "%s:%u:", job, attempt);
    ok = r != NULL && r->type == REDIS_REPLY_STRING && strncmp(r->str, want, strlen(want)) == 0;
    freeReplyObject(r);
    return ok;
}

static bool
wait_free(const char *node, int gpu, const char *job, unsigned attempt, double s)
{
    double end = tl_now() + s;

    while (tl_now() < end && held(node, gpu, job, attempt))
        run_for(0.1);
    return !held(node, gpu, job, attempt);
}

/* A job as submit stores it (its spec's msgpack bytes in hex). */
static void
make_job(const char *job, int max_attempts, int max_run_s)
{
    msg_job_spec sp = {.gpus_per_node = 1, .nodes = 1, .priority = 100};
    gp_buf       b;
    char         hex[2048] = "";
    const char  *r;

    snprintf(sp.command, sizeof(sp.command), "sim:run=1s");
    sp.max_attempts = (uint32_t)max_attempts;
    sp.max_run_s = max_run_s;
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    if (gp_msg_encode(&msg_job_spec_desc, &sp, &b) == GP_EOK)
        for (size_t i = 0; i < b.n && i * 2 + 3 < sizeof(hex); i++)
            snprintf(hex + i * 2, 3, "%02x", ((const unsigned char *)b.p)[i]);
    gp_buf_fini(&b);
    r = sql1("INSERT INTO jobs (id, tenant, state, spec, priority, gpus_per_node, nodes, "
             "max_run_s, max_attempts, created_ms, updated_ms) VALUES ('%s', 'acme', "
             "'starting', '\\x%s'::bytea, 100, 1, 1, %d, %d, 0, 0)",
             job, hex, max_run_s, max_attempts);

    T_OKM(r[0] == '\0', "job %s inserted %s", job, r);
}

/* The attempt's row (state), the job 'starting' again, the reservation.
 * created_ms is now, as a placement stamps it: a 'reserved' row older than
 * dispatch-timeout + reconcile-grace is one its instance never dispatched,
 * and the reconcile ends it (reconcile.c). */
static void
make_attempt(const char *job, unsigned attempt, const char *node, int gpu, const char *state)
{
    const char *r = sql1("INSERT INTO attempts (job_id, attempt, site, node, gpus, state, "
                         "created_ms) VALUES ('%s', %u, '" SITE "', '%s', '{%d}', '%s', "
                         "(extract(epoch FROM clock_timestamp()) * 1000)::bigint)",
                         job, attempt, node, gpu, state);

    T_OKM(r[0] == '\0', "attempt %s:%u inserted %s", job, attempt, r);
    sql1("UPDATE jobs SET state = 'starting', attempts_made = %u WHERE id = '%s'", attempt, job);
    book(node, gpu, job, attempt, 0);
}

static gp_err
run_cmd(const char *job, unsigned attempt, int gpu, const char *cmd)
{
    msg_run_attempt r = {0};
    msg_attempt_ack ack = {0};
    int32_t         gpus[1] = {gpu};
    char            d[GP_ERRBUF_LEN];
    gp_err          rc;

    snprintf(r.job_id, sizeof(r.job_id), "%s", job);
    r.attempt = attempt;
    snprintf(r.command, sizeof(r.command), "%s", cmd);
    r.gpus.v = gpus;
    r.gpus.n = 1;
    rc = tl_call(loop, bus, "gp.node." SITE "." NODE ".cmd.run", &msg_run_attempt_desc, &r,
                 &msg_attempt_ack_desc, &ack, 3000, d, sizeof(d));
    T_OKM(rc == GP_EOK, "RunAttempt %s:%u accepted (%s %s)", job, attempt, gp_err_name(rc), d);
    gp_msg_clear(&msg_attempt_ack_desc, &ack);
    return rc;
}

static double
metric(const char *series)
{
    char  *body = NULL;
    double v = -1;

    if (tl_http_get(sched_http, "/metrics", &body) > 0)
        v = tl_metric(body, series);
    free(body);
    return v;
}

static int js_done, js_err;

static void
js_cb(void *arg, gp_err err)
{
    (void)arg;
    js_err = err;
    js_done = 1;
}

/* Publishes an AttemptEvent to the stream ATTEMPTS as an agent does. */
static gp_err
js_event(const char *job, unsigned attempt, int event, int exit_code, uint64_t gpu_ms,
         const char *msg_id)
{
    msg_attempt_event ev = {0};
    gp_buf            b;
    gp_err            rc;

    snprintf(ev.site, sizeof(ev.site), SITE);
    snprintf(ev.node, sizeof(ev.node), "n2");
    snprintf(ev.job_id, sizeof(ev.job_id), "%s", job);
    ev.attempt = attempt;
    ev.event = event;
    ev.at_ms = gp_wall_ms();
    ev.gpu_ms = gpu_ms;
    ev.energy_mj = gpu_ms * 3;
    GP_SET_HAS(&ev, MSG_ATTEMPT_EVENT__GPU_MS);
    GP_SET_HAS(&ev, MSG_ATTEMPT_EVENT__ENERGY_MJ);
    if (event == MSG_ATTEMPT_EVENT_EVENT_EXITED) {
        ev.exit_code = exit_code;
        GP_SET_HAS(&ev, MSG_ATTEMPT_EVENT__EXIT_CODE);
    }
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    js_done = 0;
    rc = gp_msg_encode(&msg_attempt_event_desc, &ev, &b);
    if (rc == GP_EOK)
        rc = gp_bus_js_pub(bus, "gp.node." SITE ".n2.attempt", msg_id, b.p, b.n, js_cb, NULL);
    gp_buf_fini(&b);
    if (rc != GP_EOK)
        return rc;
    tl_run_until(loop, &js_done, 10);
    return js_done ? (gp_err)js_err : GP_ETIMEOUT;
}

static pid_t
start(const char *name, int http, const char *const *extra)
{
    char        bin[512], port[16];
    const char *argv[32] = {bin, "--http-port", port};
    int         n = 3;

    snprintf(bin, sizeof(bin), "%s/bin/gridpool-%s", tl_env("GP_BUILD"), name);
    snprintf(port, sizeof(port), "%d", http);
    for (; extra != NULL && *extra != NULL && n < 31; extra++)
        argv[n++] = *extra;
    argv[n] = NULL;
    return tl_spawn((char *const *)argv);
}

static const char *const sched_args[] = {
    "--outbox-ms", "200", "--outbox-grace-ms", "1000", "--maxrun-ms", "200",
    "--reconcile-ms", "500", "--reconcile-grace-ms", "20000", "--lease-ms", "3000",
    "--heartbeat-ms", "500", NULL};

static bool
healthy(const char *service)
{
    msg_health_request hq = {0};
    msg_health         h = {0};
    char               subj[64], d[GP_ERRBUF_LEN];
    bool               up;

    snprintf(subj, sizeof(subj), "gp.int.health.%s", service);
    up = tl_call(loop, bus, subj, &msg_health_request_desc, &hq, &msg_health_desc, &h, 1000, d,
                 sizeof(d)) == GP_EOK && h.pg == MSG_HEALTH_PG_UP;
    gp_msg_clear(&msg_health_desc, &h);
    return up;
}

static bool
wait_healthy(const char *service, double s)
{
    double end = tl_now() + s;

    while (tl_now() < end)
        if (healthy(service))
            return true;
        else
            run_for(0.2);
    return false;
}

static int
events(const char *job, const char *event)
{
    return atoi(sql1("SELECT count(*) FROM job_events WHERE job_id = '%s' AND event = '%s'", job,
                     event));
}

/* ---- the tests ------------------------------------------------------------ */

static void
test_life(void)
{
    make_job("j-life", 3, 0);
    make_attempt("j-life", 1, NODE, 0, "starting");
    run_cmd("j-life", 1, 0, "sim:run=1500ms exit=0");
    T_OKM(wait_sql(5, "running", "SELECT state FROM jobs WHERE id = 'j-life'"),
          "started: the job runs");
    T_OK(wait_sql(2, "running", "SELECT state FROM attempts WHERE job_id = 'j-life'"));
    T_OKM(held(NODE, 0, "j-life", 1), "while it runs its GPU is reserved");
    T_OKM(wait_sql(10, "succeeded", "SELECT state FROM jobs WHERE id = 'j-life'"),
          "exited 0: the job succeeded");
    T_OKM(wait_sql(2, "succeeded|0|true|true", "SELECT state || '|' || exit_code || '|' || "
                   "(gpu_ms > 0) || '|' || (energy_mj > 0) FROM attempts WHERE job_id = 'j-life'"),
          "the attempt succeeded with its final counters");
    T_OKM(wait_sql(2, "t", "SELECT gpu_ms > 0 FROM jobs WHERE id = 'j-life'"),
          "the job's gpu_ms sums its attempts");
    T_OKM(wait_free(NODE, 0, "j-life", 1, 3), "its GPU is free again in Redis");
    T_OKM(events("j-life", "started") == 1 && events("j-life", "succeeded") == 1,
          "one 'started' and one 'succeeded' event");
    T_OKM(wait_sql(3, "0", "SELECT count(*) FROM job_events WHERE job_id = 'j-life' AND "
                   "NOT published"), "the events were published");
}

static void
test_retry(void)
{
    make_job("j-fail", 3, 0);
    make_attempt("j-fail", 1, NODE, 0, "starting");
    run_cmd("j-fail", 1, 0, "sim:fail_after=300ms");
    T_OKM(wait_sql(10, "pending", "SELECT state FROM jobs WHERE id = 'j-fail'"),
          "attempt 1 failed: the job is pending again");
    T_OKM(events("j-fail", "attempt_failed") == 1 && events("j-fail", "requeued") == 1,
          "events attempt_failed and requeued");
    T_OKM(wait_sql(2, "failed", "SELECT state FROM attempts WHERE job_id = 'j-fail' AND "
                   "attempt = 1"), "attempt 1 is failed");
    T_OKM(strcmp(sql1("SELECT retry_at IS NULL FROM jobs WHERE id = 'j-fail'"), "t") == 0,
          "the first retry may be placed at once (no backoff): %s",
          sql1("SELECT reason FROM jobs WHERE id = 'j-fail'"));
    T_OKM(wait_free(NODE, 0, "j-fail", 1, 3), "attempt 1's GPU is free");
    make_attempt("j-fail", 2, NODE, 0, "starting");
    run_cmd("j-fail", 2, 0, "sim:fail_after=300ms");
    T_OKM(wait_sql(10, "pending", "SELECT state FROM jobs WHERE id = 'j-fail'"),
          "attempt 2 failed: pending again");
    T_OKM(strcmp(sql1("SELECT retry_at BETWEEN now() + interval '1 s' AND now() + "
                      "interval '2 s' FROM jobs WHERE id = 'j-fail'"), "t") == 0 &&
          strstr(sql1("SELECT reason FROM jobs WHERE id = 'j-fail'"), "next attempt in 2 s") != NULL,
          "... backing off: not claimable for 2 s, and the reason says so (%s)",
          sql1("SELECT reason FROM jobs WHERE id = 'j-fail'"));
    T_OKM(wait_free(NODE, 0, "j-fail", 2, 3), "attempt 2's GPU is free");
    make_attempt("j-fail", 3, NODE, 0, "starting");
    run_cmd("j-fail", 3, 0, "sim:fail_after=300ms");
    T_OKM(wait_sql(10, "failed", "SELECT state FROM jobs WHERE id = 'j-fail'"),
          "attempt 3 failed too: max_attempts 3 used up, the job failed");
    T_OKM(strstr(sql1("SELECT reason FROM jobs WHERE id = 'j-fail'"), "no attempts left") != NULL,
          "its reason says so: %s", sql1("SELECT reason FROM jobs WHERE id = 'j-fail'"));
    T_OKM(events("j-fail", "failed") == 1 && events("j-fail", "requeued") == 2,
          "one 'failed' event, two requeues before it");
}

static void
test_checkpoint_cancel(void)
{
    msg_id_request q = {0};
    msg_job        job = {0};
    char           d[GP_ERRBUF_LEN];
    gp_err         rc;

    make_job("j-ckpt", 3, 0);
    make_attempt("j-ckpt", 1, NODE, 1, "starting");
    run_cmd("j-ckpt", 1, 1, "sim:ckpt=300ms");
    T_OKM(wait_sql(10, "t", "SELECT progress_ms > 0 AND checkpoint_ms IS NOT NULL FROM jobs "
                   "WHERE id = 'j-ckpt'"), "checkpointed: the job's progress and time stored");
    T_OKM(wait_sql(2, "t", "SELECT progress_ms > 0 FROM attempts WHERE job_id = 'j-ckpt'"),
          "and the attempt's");
    T_OKM(events("j-ckpt", "checkpointed") >= 1, "'checkpointed' events");
    /* cancel: the attempt ends, its GPU is free, the agent's final event
     * only stores the counters */
    snprintf(q.id, sizeof(q.id), "j-ckpt");
    rc = tl_call(loop, bus, "gp.api.acme.job.cancel", &msg_id_request_desc, &q, &msg_job_desc,
                 &job, 5000, d, sizeof(d));
    gp_msg_clear(&msg_job_desc, &job);
    T_OKM(rc == GP_EOK, "cancel (%s %s)", gp_err_name(rc), d);
    T_OKM(wait_free(NODE, 1, "j-ckpt", 1, 3), "cancel freed the GPU in Redis");
    T_OKM(events("j-ckpt", "cancelled") == 1, "a 'cancelled' event");
    T_OKM(wait_sql(10, "cancelled|true", "SELECT state || '|' || (gpu_ms > 0) FROM attempts "
                   "WHERE job_id = 'j-ckpt'"),
          "the agent's final 'killed' event stored the counters, the attempt stays cancelled");
    T_OKM(strcmp(sql1("SELECT state FROM jobs WHERE id = 'j-ckpt'"), "cancelled") == 0,
          "and the job stays cancelled");
}

static void
test_duplicates(void)
{
    make_job("j-dup", 3, 0);
    make_attempt("j-dup", 1, "n2", 0, "starting");
    T_OK(js_event("j-dup", 1, MSG_ATTEMPT_EVENT_EVENT_STARTED, 0, 0, "j-dup.1.started") == GP_EOK);
    T_OK(js_event("j-dup", 1, MSG_ATTEMPT_EVENT_EVENT_STARTED, 0, 0, "j-dup.1.started") == GP_EOK);
    T_OK(js_event("j-dup", 1, MSG_ATTEMPT_EVENT_EVENT_STARTED, 0, 0, "j-dup.1.started.x") ==
         GP_EOK);
    T_OKM(wait_sql(5, "running", "SELECT state FROM jobs WHERE id = 'j-dup'"), "started");
    run_for(1.0);
    T_OKM(events("j-dup", "started") == 1, "one 'started' event for three deliveries (%d)",
          events("j-dup", "started"));
    T_OK(js_event("j-dup", 1, MSG_ATTEMPT_EVENT_EVENT_EXITED, 0, 500, "j-dup.1.exited") == GP_EOK);
    T_OK(js_event("j-dup", 1, MSG_ATTEMPT_EVENT_EVENT_EXITED, 0, 400, "j-dup.1.exited.y") ==
         GP_EOK);
    T_OKM(wait_sql(5, "succeeded", "SELECT state FROM jobs WHERE id = 'j-dup'"), "succeeded");
    run_for(1.0);
    T_OKM(events("j-dup", "succeeded") == 1, "one 'succeeded' event for two (%d)",
          events("j-dup", "succeeded"));
    T_OKM(strcmp(sql1("SELECT gpu_ms || '|' || energy_mj FROM attempts WHERE job_id = 'j-dup'"),
                 "500|1500") == 0, "the counters are the largest reported (%s)",
          sql1("SELECT gpu_ms || '|' || energy_mj FROM attempts WHERE job_id = 'j-dup'"));
    T_OKM(strcmp(sql1("SELECT event_seq FROM jobs WHERE id = 'j-dup'"), "2") == 0,
          "two job events in all");
}

/* The agent's events while the scheduler is down are stored and taken
 * when it is back. */
static void
test_scheduler_down(void)
{
    make_job("j-down", 3, 0);
    make_attempt("j-down", 1, NODE, 0, "starting");
    kill(sched_pid, SIGTERM);
    T_OKM(tl_wait_exit(sched_pid, 10) == 0, "scheduler stopped");
    run_cmd("j-down", 1, 0, "sim:run=500ms exit=0");
    run_for(2.5);
    T_OKM(strcmp(sql1("SELECT state FROM jobs WHERE id = 'j-down'"), "starting") == 0,
          "nothing taken while the scheduler is down");
    sched_pid = start("scheduler", sched_http, (const char *const *)sched_args);
    T_OK(wait_healthy("scheduler", 20));
    T_OKM(wait_sql(10, "succeeded", "SELECT state FROM jobs WHERE id = 'j-down'"),
          "its events came when the scheduler was back: succeeded");
    T_OKM(events("j-down", "started") == 1 && events("j-down", "succeeded") == 1,
          "started and succeeded, once each");
}

/* The job moved to attempt 2 on another node: the node's next lease kills
 * attempt 1, whose final event only stores its counters. */
static void
test_superseded(void)
{
    double kills0 = metric("gp_scheduler_lease_kills_total");
    char   k[128];

    make_job("j-moved", 3, 0);
    make_attempt("j-moved", 1, NODE, 0, "starting");
    run_cmd("j-moved", 1, 0, "sim:run=60s");
    T_OK(wait_sql(5, "running", "SELECT state FROM attempts WHERE job_id = 'j-moved'"));
    sql1("UPDATE attempts SET state = 'superseded', ended_ms = 1 WHERE job_id = 'j-moved'");
    res_key(k, sizeof(k), NODE);
    freeReplyObject(redis("HDEL %s 0", k));
    make_attempt("j-moved", 2, "n2", 0, "reserved");
    T_OKM(wait_sql(5, "t", "SELECT gpu_ms > 0 FROM attempts WHERE job_id = 'j-moved' AND "
                   "attempt = 1"), "the lease killed attempt 1 and its final counters are stored");
    T_OKM(metric("gp_scheduler_lease_kills_total") > kills0, "the lease reply listed it to kill");
    T_OKM(strcmp(sql1("SELECT state FROM attempts WHERE job_id = 'j-moved' AND attempt = 1"),
                 "superseded") == 0, "attempt 1 stays superseded");
    T_OKM(strcmp(sql1("SELECT state FROM jobs WHERE id = 'j-moved'"), "starting") == 0,
          "the job, on attempt 2, did not move");
    T_OKM(held("n2", 0, "j-moved", 2), "attempt 2 keeps its GPU");
}

/* An attempt no reservation backs (never granted) is killed. */
static void
test_ungranted(void)
{
    double killed0 = metric("gp_scheduler_attempt_events_total{event=\"killed\"}");

    run_cmd("j-rogue", 1, 1, "sim:run=60s");
    {
        double end = tl_now() + 6;

        while (tl_now() < end &&
               metric("gp_scheduler_attempt_events_total{event=\"killed\"}") <= killed0)
            run_for(0.2);
    }
    T_OKM(metric("gp_scheduler_attempt_events_total{event=\"killed\"}") > killed0,
          "an attempt without a reservation was killed by the lease");
}

static void
test_maxrun(void)
{
    make_job("j-long", 3, 1);
    make_attempt("j-long", 1, NODE, 1, "starting");
    run_cmd("j-long", 1, 1, "sim:run=60s");
    T_OK(wait_sql(5, "running", "SELECT state FROM jobs WHERE id = 'j-long'"));
    T_OKM(wait_sql(5, "failed", "SELECT state FROM jobs WHERE id = 'j-long'"),
          "max run time 1 s: the job failed");
    T_OKM(strcmp(sql1("SELECT state FROM attempts WHERE job_id = 'j-long'"), "timed_out") == 0,
          "the attempt timed out");
    T_OKM(events("j-long", "timed_out") == 1, "a 'timed_out' event");
    T_OKM(wait_free(NODE, 1, "j-long", 1, 3), "its GPU is free");
    T_OKM(wait_sql(10, "t", "SELECT gpu_ms > 0 FROM attempts WHERE job_id = 'j-long'"),
          "the agent stopped it and its final counters are stored");
}

static void
test_reconcile(void)
{
    make_job("j-recon", 3, 0);
    make_attempt("j-recon", 1, "n3", 2, "reserved");
    book("n4", 0, "j-orphan", 1, 60000);    /* a crashed instance's, a minute old */
    book("n4", 1, "j-young", 1, 0);          /* one a moment old: within the grace */
    run_for(1.5);
    T_OKM(!held("n4", 0, "j-orphan", 1), "the orphan older than the grace was removed");
    T_OKM(held("n4", 1, "j-young", 1), "the young one is kept for now");
    T_OKM(held("n3", 2, "j-recon", 1), "the live attempt's reservation stays");
    freeReplyObject(redis("FLUSHALL"));
    {
        double end = tl_now() + 5;

        while (tl_now() < end && !held("n3", 2, "j-recon", 1))
            run_for(0.2);
    }
    T_OKM(held("n3", 2, "j-recon", 1), "after FLUSHALL the live attempt's reservation is rebuilt");
    T_OKM(metric("gp_scheduler_reconcile_runs_total{result=\"done\"}") > 0, "passes counted");
}

int
main(void)
{
    gp_bus_opts bo = {.url = tl_env("GP_NATS_URL"), .name = "sched-attempts-test",
                      .jetstream = true};
    const char *agent_args[] = {"--site", SITE, "--node", NODE, "--gpu-backend", "sim",
                                "--sim-gpus", "4", "--stop-grace-ms", "300", NULL};
    /* the lease as the scheduler's: the agent renews every second */
    const char *registry_args[] = {"--lease-ms", "3000", "--heartbeat-ms", "500", NULL};
    msg_tenant  t = {0}, tout = {0};
    msg_site    s = {0}, sout = {0};
    char        d[GP_ERRBUF_LEN], key[128];
    pid_t       reg, agent;

    loop = ev_default_loop(0);
    T_OK(gp_bus_new(loop, &bo, NULL, NULL, &bus) == GP_EOK);
    pg = PQconnectdb(tl_env("GP_PG_CONNINFO"));
    T_OKM(PQstatus(pg) == CONNECTION_OK, "test's own PostgreSQL connection");
    rd = redisConnect(tl_env("GP_REDIS_HOST"), atoi(tl_env("GP_REDIS_PORT")));
    T_OKM(rd != NULL && rd->err == 0, "test's own Redis connection");
    sched_http = tl_free_port();
    reg = start("registry", tl_free_port(), registry_args);
    sched_pid = start("scheduler", sched_http, (const char *const *)sched_args);
    T_OKM(wait_healthy("registry", 30) && wait_healthy("scheduler", 30), "registry, scheduler up");
    snprintf(t.id, sizeof(t.id), "acme");
    t.kind = MSG_TENANT_KIND_CUSTOMER;
    T_OK(tl_call(loop, bus, "gp.admin.tenant.create", &msg_tenant_desc, &t, &msg_tenant_desc,
                 &tout, 5000, d, sizeof(d)) == GP_EOK);
    snprintf(s.id, sizeof(s.id), SITE);
    snprintf(s.tenant, sizeof(s.tenant), "acme");
    snprintf(s.region, sizeof(s.region), "eu");
    T_OK(tl_call(loop, bus, "gp.admin.site.create", &msg_site_desc, &s, &msg_site_desc, &sout,
                 5000, d, sizeof(d)) == GP_EOK);
    gp_msg_clear(&msg_site_desc, &sout);
    agent = start("agent", tl_free_port(), agent_args);
    snprintf(key, sizeof(key), "gp:{%u}:node:" NODE, gp_shard_of(SITE));
    {
        double end = tl_now() + 15;

        while (tl_now() < end && redis_int("HEXISTS %s reg", key) != 1)
            run_for(0.2);
    }
    T_OKM(redis_int("HEXISTS %s reg", key) == 1, "the agent registered");
    test_life();
    test_retry();
    test_checkpoint_cancel();
    test_duplicates();
    test_superseded();
    test_ungranted();
    test_maxrun();
    test_scheduler_down();
    test_reconcile();
    kill(agent, SIGTERM);
    kill(sched_pid, SIGTERM);
    kill(reg, SIGTERM);
    T_OKM(tl_wait_exit(sched_pid, 10) == 0, "scheduler stops cleanly");
    tl_wait_exit(agent, 10);
    tl_wait_exit(reg, 10);
    redisFree(rd);
    PQfinish(pg);
    gp_bus_free(bus);
    gp_lib_close();
    return T_DONE();
}
