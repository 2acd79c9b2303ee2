/* epoch.c -- the scheduler's Redis keys rebuilt from PostgreSQL after
 * Redis lost its data (FLUSHALL, a restart without persistence, a failover
 * to an empty replica).
 *
 * What Redis held that matters: the reservations (who holds a GPU; the
 * attempt number in them is the fencing token) and the grants (when each
 * node's lease was last granted: its fence).  PostgreSQL holds the truth of
 * both: every live attempt row (reserved, starting, running) is written,
 * with its attempt number, GPUs and node, in the placement's batch before
 * its RunAttempt is sent, so the reservations are the live rows; and every
 * grant Redis lost was given before the rebuild, at most
 * dispatch-timeout-ms ahead of its own now (fence.c), so a grant of
 * rebuild-now + dispatch-timeout-ms for every node with a live attempt is
 * no earlier than any of them.  Attempt numbers come from PostgreSQL
 * (jobs.attempts_made + 1), never from Redis, so a token is never reused.
 *
 * Each shard carries an epoch key (reserve_scripts.h).  Every script that
 * books, grants, renews, retires or replaces refuses without it ('stale')
 * and marks the shard (sched_shard_stale); so does a start, for every
 * shard.  The "epoch" task takes the marks and rebuilds those shards, each
 * step a script that first checks the epoch is still missing (else the
 * shard is whole: 'present') and, after the first, that the rebuild's
 * token is still its own (else 'lost'):
 *
 *   1. begin: the token is set.  Redis lost every older token with the
 *      rest, so what is read next is read after the loss;
 *   2. PostgreSQL's live attempts are read (one query for the round);
 *   3. grants: every node of a live attempt in the shard gets its grant
 *      moved to at least now + dispatch-timeout-ms;
 *   4. restore: every GPU of a live attempt is booked for it (a hold for a
 *      preemptor gives way; another holder is counted, never overwritten);
 *   5. seal: the epoch is written, the token removed.
 *
 * Only then does the shard grant, book or open a fence again.  A second
 * loss between the steps removes the token: the next step stops, and the
 * next refusal marks the shard again.  Two instances rebuilding one shard
 * at once: the later token wins, the other stops and leaves it to it (a
 * Redis or PostgreSQL failure marks the shard again at once).  An attempt that ends between the
 * read and the restore leaves a reservation no live attempt backs, removed
 * by the reconcile after its grace (reconcile.c), as after any rebuild; a
 * booking made before the loss whose attempt row commits after the read
 * has no reservation, and its dispatch stamp is refused (fence.c).
 *
 * Counters: gp_scheduler_redis_rebuilds_total{result="done|present|failed"}
 * (shards), gp_scheduler_redis_rebuilt_gpus_total,
 * gp_scheduler_redis_rebuilt_grants_total (nodes),
 * gp_scheduler_redis_stale_total (scripts refused for want of an epoch). */
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/clock.h"
#include "gp/kvscript.h"
#include "gp/log.h"
#include "reserve_scripts.h"
#include "scheduler.h"

#define CHUNK      500                 /* nodes or GPUs per script call */
#define TOKEN_TTL  "60000"             /* a dead rebuilder's token, ms */
#define GRANT_TTL  "86400000"          /* as fence.c's grants */

/* Every script: KEYS[1] epoch, KEYS[2] token; ARGV[1] token. */
#define CHECK_LUA                                                                           \
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 'present' end\n"                     \
    "if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 'lost' end\n"

static const char begin_lua[] =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 'present' end\n"
    "redis.call('SET', KEYS[2], ARGV[1], 'PX', " TOKEN_TTL ")\n"
    "return 'begun'\n";

/* KEYS then grant per node; ARGV then ms ahead. */
static const char grants_lua[] =
    CHECK_LUA
    SCHED_RES_LUA_NOW
    "local at = now + tonumber(ARGV[2])\n"
    "for i = 3, #KEYS do\n"
    "  local cur = tonumber(redis.call('GET', KEYS[i]) or '0') or 0\n"
    "  if at > cur then redis.call('SET', KEYS[i], string.format('%.0f', at), 'PX', " GRANT_TTL ") end\n"
    "end\n"
    "return #KEYS - 2\n";

/* KEYS then the shard's index, reservations per entry; ARGV then per
 * entry node, GPU, holder.  Returns {booked, held by another}. */
static const char restore_lua[] =
    CHECK_LUA
    SCHED_RES_LUA_NOW
    SCHED_RES_LUA_HOLDER_OF
    "local booked, other = 0, 0\n"
    "for i = 4, #KEYS do\n"
    "  local a = 2 + 3 * (i - 4)\n"
    "  local v = redis.call('HGET', KEYS[i], ARGV[a + 1])\n"
    "  if not v or string.match(v, ':0:%d+$') then\n"
    "    redis.call('HSET', KEYS[i], ARGV[a + 1], ARGV[a + 2] .. ':' .. nows)\n"
    "    redis.call('SADD', KEYS[3], ARGV[a])\n"
    "    booked = booked + 1\n"
    "  elseif holder_of(v) ~= ARGV[a + 2] then other = other + 1 end\n"
    "end\n"
    "return {booked, other}\n";

/* ARGV then the epoch's value. */
static const char seal_lua[] =
    CHECK_LUA
    "redis.call('SET', KEYS[1], ARGV[2])\n"
    "redis.call('DEL', KEYS[2])\n"
    "return 'sealed'\n";

static gp_kvscript begin_script, grants_script, restore_script, seal_script;

enum { R_DONE, R_PRESENT, R_FAILED };
static const char *const results[] = {"done", "present", "failed"};
enum { S_BEGIN, S_GRANTS, S_RESTORE, S_SEAL };

/* One live attempt row, as read. */
typedef struct live_row {
    char     job[GP_MAX_ID + 1], node[GP_MAX_ID + 1];
    uint32_t attempt;
    uint64_t gpus;
} live_row;

typedef struct rebuild rebuild;

/* One shard's rebuild: its rows, the step and how far it got. */
typedef struct shard_job {
    rebuild  *rb;
    unsigned  shard;
    bool      begun;
    int       step;
    live_row *row;               /* into rb->rows */
    unsigned  n, at;             /* rows, the next row of the step */
    int       gpu;               /* restore: the next GPU of row[at] */
    unsigned  grants, gpus;      /* nodes and GPUs this rebuild changed */
    char      token[GP_MAX_ID + 32];
} shard_job;

struct rebuild {
    sched     *s;
    live_row  *rows;
    unsigned   pending;
    unsigned   done, attempts, gpus, grants;   /* the round's, for its log lines */
    unsigned   failed;
    char       why[64];                        /* the first failure's */
    bool       marked[GP_SHARDS];   /* the shards this round rebuilds */
    shard_job  job[GP_SHARDS];
};

static void step_send(shard_job *j);
static void read_live(rebuild *rb);

/* Marked again after a failure: the task's next run tries again. */
static void
mark(sched *s, unsigned shard)
{
    s->stale[shard] = true;
    s->stale_any = true;
}

static void
add(uint64_t *c, unsigned n)
{
    if (c != NULL)
        *c += n;
}

/* One call of the phase answered: the round goes on when all have. */
static void
phase_step(rebuild *rb)
{
    sched *s = rb->s;

    if (--rb->pending > 0)
        return;
    for (unsigned sh = 0; sh < GP_SHARDS; sh++)
        if (rb->job[sh].begun && rb->job[sh].step == S_BEGIN) {
            read_live(rb);                /* every begin answered: the truth, then the rest */
            return;
        }
    if (rb->done > 0)
        GP_WARN("redis_rebuilt", "shards=%u attempts=%u gpus=%u grants=%u", rb->done,
                rb->attempts, rb->gpus, rb->grants);
    if (rb->failed > 0)
        GP_WARN("redis_rebuild_failed", "shards=%u why=\"%s\"", rb->failed, rb->why);
    free(rb->rows);
    free(rb);
    s->epoch_busy = false;
    if (s->stale_any && s->epoch_task != NULL)
        gp_task_kick(s->epoch_task);
}

static void
shard_end(shard_job *j, int result, const char *why)
{
    sched *s = j->rb->s;

    j->begun = false;
    sched_count(s->m_rebuilds[result]);
    if (result == R_DONE) {
        add(s->m_rebuilt_gpus, j->gpus);
        add(s->m_rebuilt_grants, j->grants);
        j->rb->done++;
        j->rb->attempts += j->n;
        j->rb->gpus += j->gpus;
        j->rb->grants += j->grants;
    } else if (result == R_FAILED) {
        if (j->rb->failed++ == 0)
            snprintf(j->rb->why, sizeof(j->rb->why), "shard %u step %d: %s", j->shard, j->step,
                     why);
        if (strcmp(why, "lost") != 0)  /* lost: another rebuild or a loss took it over */
            mark(s, j->shard);
    }
    phase_step(j->rb);
}

static void
step_answered(void *arg, const redisReply *rep, gp_err err)
{
    shard_job *j = arg;

    if (err != GP_EOK || rep->type == REDIS_REPLY_ERROR) {
        shard_end(j, R_FAILED, err != GP_EOK ? gp_err_name(err) : rep->str);
        return;
    }
    if (rep->type == REDIS_REPLY_STRING && strcmp(rep->str, "begun") == 0) {
        phase_step(j->rb);            /* waits for the read */
        return;
    }
    if (rep->type == REDIS_REPLY_STRING && strcmp(rep->str, "sealed") != 0) {
        shard_end(j, strcmp(rep->str, "present") == 0 ? R_PRESENT : R_FAILED, rep->str);
        return;
    }
    if (j->step == S_SEAL) {
        shard_end(j, R_DONE, NULL);
        return;
    }
    if (j->step == S_GRANTS && rep->type == REDIS_REPLY_INTEGER)
        j->grants += (unsigned)rep->integer;
    else if (j->step == S_RESTORE && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2)
        j->gpus += (unsigned)rep->element[0]->integer;
    if (j->at >= j->n) {               /* this step is through every row: the next */
        j->step = j->step == S_GRANTS && j->n > 0 ? S_RESTORE : S_SEAL;
        j->at = 0;
        j->gpu = 0;
    }
    step_send(j);
}

/* Grants: up to CHUNK nodes of the shard's rows (a node twice is harmless). */
static gp_err
send_grants(shard_job *j, const char **keys, char (*kb)[SCHED_RES_KEY_LEN], const char **args)
{
    char ahead[16];
    int  nk = 2;

    snprintf(ahead, sizeof(ahead), "%u", j->rb->s->cfg->dispatch_timeout_ms);
    args[1] = ahead;
    for (; j->at < j->n && nk < CHUNK + 2; j->at++, nk++) {
        sched_grant_key(kb[nk], j->shard, j->row[j->at].node);
        keys[nk] = kb[nk];
    }
    return gp_kvscript_call(&grants_script, gp_app_kv(j->rb->s->app), step_answered, j, nk, keys,
                            2, args, NULL);
}

/* Restore: up to CHUNK GPUs, row by row, GPU by GPU. */
static gp_err
send_restore(shard_job *j, const char **keys, char (*kb)[SCHED_RES_KEY_LEN], const char **args,
             char (*ab)[GP_MAX_ID + 16])
{
    int nk = 3, na = 1;

    sched_res_index_key(kb[2], j->shard);
    keys[2] = kb[2];
    while (j->at < j->n && nk < CHUNK + 3) {
        const live_row *r = &j->row[j->at];

        for (; j->gpu <= SCHED_RES_MAX_GPU && !(r->gpus & (1ull << j->gpu)); j->gpu++)
            ;
        if (j->gpu > SCHED_RES_MAX_GPU) {
            j->at++;
            j->gpu = 0;
            continue;
        }
        sched_res_key(kb[nk], j->shard, r->node);
        keys[nk] = kb[nk];
        snprintf(ab[2 * nk], sizeof(ab[0]), "%d", j->gpu);
        snprintf(ab[2 * nk + 1], sizeof(ab[0]), "%s:%u", r->job, r->attempt);
        args[na++] = r->node;
        args[na++] = ab[2 * nk];
        args[na++] = ab[2 * nk + 1];
        nk++;
        j->gpu++;
    }
    return gp_kvscript_call(&restore_script, gp_app_kv(j->rb->s->app), step_answered, j, nk, keys,
                            na, args, NULL);
}

static void
step_send(shard_job *j)
{
    static char        kb[CHUNK + 3][SCHED_RES_KEY_LEN];
    static char        ab[2 * (CHUNK + 3)][GP_MAX_ID + 16];
    static const char *keys[CHUNK + 3], *args[3 * CHUNK + 3];
    gp_kv             *kv = gp_app_kv(j->rb->s->app);
    char               value[GP_MAX_ID + 32];
    gp_err             rc;

    sched_epoch_key(kb[0], j->shard);
    snprintf(kb[1], sizeof(kb[1]), "gp:{%u}:sched:rebuilding", j->shard);
    keys[0] = kb[0];
    keys[1] = kb[1];
    args[0] = j->token;
    if (j->step == S_BEGIN) {
        rc = gp_kvscript_call(&begin_script, kv, step_answered, j, 2, keys, 1, args, NULL);
    } else if (j->step == S_GRANTS) {
        rc = send_grants(j, keys, kb, args);
    } else if (j->step == S_RESTORE) {
        rc = send_restore(j, keys, kb, args, ab);
    } else {
        snprintf(value, sizeof(value), "%s:%llu", gp_app_instance(j->rb->s->app),
                 (unsigned long long)gp_wall_ms());
        args[1] = value;
        rc = gp_kvscript_call(&seal_script, kv, step_answered, j, 2, keys, 2, args, NULL);
    }
    if (rc != GP_EOK)
        shard_end(j, R_FAILED, gp_err_name(rc));
}

/* "0,1,3" -> bits 0, 1, 3 */
static uint64_t
gpu_mask(const char *list)
{
    uint64_t m = 0;

    for (const char *p = list; *p != '\0';) {
        char *end;
        long  g = strtol(p, &end, 10);

        if (end == p)
            break;
        if (g >= 0 && g <= SCHED_RES_MAX_GPU)
            m |= 1ull << g;
        p = *end == ',' ? end + 1 : end;
    }
    return m;
}

/* The rows of the begun shards, grouped by shard (a counting sort). */
static gp_err
take_rows(rebuild *rb, const PGresult *res)
{
    int      n = PQntuples(res);
    unsigned count[GP_SHARDS] = {0}, at[GP_SHARDS], total = 0;

    for (int i = 0; i < n; i++) {
        unsigned sh = gp_shard_of(PQgetvalue(res, i, 2));

        count[sh] += rb->job[sh].begun;
    }
    for (unsigned sh = 0; sh < GP_SHARDS; sh++) {
        at[sh] = total;
        total += count[sh];
    }
    if (total > 0 && (rb->rows = calloc(total, sizeof(*rb->rows))) == NULL)
        return GP_ENOMEM;
    for (unsigned sh = 0; sh < GP_SHARDS; sh++) {
        rb->job[sh].row = rb->rows + at[sh];
        rb->job[sh].n = count[sh];
    }
    for (int i = 0; i < n; i++) {
        unsigned  sh = gp_shard_of(PQgetvalue(res, i, 2));
        live_row *r;

        if (!rb->job[sh].begun)
            continue;
        r = &rb->rows[at[sh]++];
        snprintf(r->job, sizeof(r->job), "%s", PQgetvalue(res, i, 0));
        r->attempt = (uint32_t)strtoul(PQgetvalue(res, i, 1), NULL, 10);
        snprintf(r->node, sizeof(r->node), "%s", PQgetvalue(res, i, 3));
        r->gpus = gpu_mask(PQgetvalue(res, i, 4));
    }
    return GP_EOK;
}

static void
live_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    rebuild *rb = arg;

    if (err == GP_EOK && nres != 1)
        err = GP_EINTERNAL, detail = "no result";
    if (err == GP_EOK)
        err = take_rows(rb, res[0]);
    rb->pending = 1;                   /* held while sending */
    for (unsigned sh = 0; sh < GP_SHARDS; sh++) {
        shard_job *j = &rb->job[sh];

        if (!j->begun)
            continue;
        rb->pending++;
        j->step = S_GRANTS;
        if (err != GP_EOK)
            shard_end(j, R_FAILED, detail != NULL ? detail : gp_err_name(err));
        else
            step_send(j);
    }
    phase_step(rb);
}

static void
read_live(rebuild *rb)
{
    if (gp_db_query(gp_app_db(rb->s->app),
                    "SELECT a.job_id, a.attempt, a.site, a.node, array_to_string(a.gpus, ',')\n"
                    "FROM attempts a WHERE a.state IN ('reserved','starting','running')",
                    0, NULL, 0, live_read, rb) != GP_EOK)
        live_read(rb, GP_EUNAVAIL, NULL, 0, "database unavailable");
}

/* The "epoch" task (kicked by a stale refusal): the marked shards are
 * rebuilt, one round at a time. */
void
sched_epoch_run(gp_app *app, void *arg)
{
    sched   *s = arg;
    rebuild *rb;

    if (s->epoch_busy || !s->stale_any || !gp_kv_is_connected(gp_app_kv(app)) ||
        (rb = calloc(1, sizeof(*rb))) == NULL)
        return;
    rb->s = s;
    s->epoch_busy = true;
    s->stale_any = false;
    rb->pending = 1;                   /* held while sending */
    for (unsigned sh = 0; sh < GP_SHARDS; sh++) {
        shard_job *j = &rb->job[sh];

        if (!s->stale[sh])
            continue;
        s->stale[sh] = false;          /* a refusal from now on marks it again */
        *j = (shard_job){.rb = rb, .shard = sh, .begun = true, .step = S_BEGIN};
        snprintf(j->token, sizeof(j->token), "%s:%llu", gp_app_instance(s->app),
                 (unsigned long long)gp_mono_ms());
        rb->pending++;
        step_send(j);
    }
    phase_step(rb);
}

void
sched_epoch_start(sched *s)
{
    gp_metrics *m = gp_app_metrics(s->app);

    gp_kvscript_init(&begin_script, begin_lua);
    gp_kvscript_init(&grants_script, grants_lua);
    gp_kvscript_init(&restore_script, restore_lua);
    gp_kvscript_init(&seal_script, seal_lua);
    gp_metrics_counters(m, "gp_scheduler_redis_rebuilds_total", "result", results, 3,
                        "Shards whose Redis keys were rebuilt from PostgreSQL, by result "
                        "(present: found whole, failed: tried again)", s->m_rebuilds);
    s->m_rebuilt_gpus = gp_metrics_counter(m, "gp_scheduler_redis_rebuilt_gpus_total", NULL,
                                           "GPUs of live attempts booked again by a rebuild");
    s->m_rebuilt_grants = gp_metrics_counter(m, "gp_scheduler_redis_rebuilt_grants_total", NULL,
                                             "Nodes whose grant a rebuild moved to now + "
                                             "dispatch-timeout-ms");
    s->m_stale_refusals = gp_metrics_counter(m, "gp_scheduler_redis_stale_total", NULL,
                                             "Scripts refused because their shard's epoch was "
                                             "missing (Redis lost its data)");
    /* a start checks every shard: one sealed already answers 'present' */
    for (unsigned sh = 0; sh < GP_SHARDS; sh++)
        s->stale[sh] = true;
    s->stale_any = true;
    if (s->epoch_task != NULL)
        gp_task_kick(s->epoch_task);
}
