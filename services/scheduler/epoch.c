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
 * shard.  The "epoch" task takes the marks and rebuilds those shards (the
 * marks, rounds and results are gp/epoch.h's driver; this file gives it the
 * scripts, the read and the steps), each step a script that first checks the epoch is still missing (else the
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
#include "gp/epoch.h"
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

enum { S_GRANTS = GP_EPOCH_FIRST, S_RESTORE, S_SEAL };

/* One live attempt row, as read. */
typedef struct live_row {
    char     job[GP_MAX_ID + 1], node[GP_MAX_ID + 1];
    uint32_t attempt;
    uint64_t gpus;
} live_row;

/* One shard's rows and how far its steps got (the driver's job data). */
typedef struct shard_rows {
    live_row *row;               /* into the round's rows */
    unsigned  n, at;             /* rows, the next row of the step */
    int       gpu;               /* restore: the next GPU of row[at] */
    unsigned  grants, gpus;      /* nodes and GPUs this rebuild changed */
} shard_rows;

/* The round's rows and figures (the driver's round data). */
typedef struct round_rows {
    live_row *rows;
    unsigned  attempts, gpus, grants;   /* the done shards', for the log line */
} round_rows;

/* One call's keys and arguments (one call is built at a time). */
static char        kb[CHUNK + 3][SCHED_RES_KEY_LEN];
static char        ab[2 * (CHUNK + 3)][GP_MAX_ID + 16];
static const char *keys[CHUNK + 3], *args[3 * CHUNK + 3];

static void
add(uint64_t *c, unsigned n)
{
    if (c != NULL)
        *c += n;
}

/* Every script's first keys and argument: the epoch, the token. */
static void
script_head(const gp_epoch_job *j)
{
    sched_epoch_key(kb[0], j->shard);
    snprintf(kb[1], sizeof(kb[1]), "gp:{%u}:sched:rebuilding", j->shard);
    keys[0] = kb[0];
    keys[1] = kb[1];
    args[0] = j->token;
}

static gp_err
send_begin(void *arg, gp_epoch_job *j)
{
    sched *s = arg;

    script_head(j);
    return gp_kvscript_call(&begin_script, gp_app_kv(s->app), gp_epoch_answered, j, 2, keys, 1,
                            args, NULL);
}

/* Grants: up to CHUNK nodes of the shard's rows (a node twice is harmless). */
static gp_err
send_grants(sched *s, gp_epoch_job *j, shard_rows *d)
{
    char ahead[16];
    int  nk = 2;

    snprintf(ahead, sizeof(ahead), "%u", s->cfg->dispatch_timeout_ms);
    args[1] = ahead;
    for (; d->at < d->n && nk < CHUNK + 2; d->at++, nk++) {
        sched_grant_key(kb[nk], j->shard, d->row[d->at].node);
        keys[nk] = kb[nk];
    }
    return gp_kvscript_call(&grants_script, gp_app_kv(s->app), gp_epoch_answered, j, nk, keys, 2,
                            args, NULL);
}

/* Restore: up to CHUNK GPUs, row by row, GPU by GPU. */
static gp_err
send_restore(sched *s, gp_epoch_job *j, shard_rows *d)
{
    int nk = 3, na = 1;

    sched_res_index_key(kb[2], j->shard);
    keys[2] = kb[2];
    while (d->at < d->n && nk < CHUNK + 3) {
        const live_row *r = &d->row[d->at];

        for (; d->gpu <= SCHED_RES_MAX_GPU && !(r->gpus & (1ull << d->gpu)); d->gpu++)
            ;
        if (d->gpu > SCHED_RES_MAX_GPU) {
            d->at++;
            d->gpu = 0;
            continue;
        }
        sched_res_key(kb[nk], j->shard, r->node);
        keys[nk] = kb[nk];
        snprintf(ab[2 * nk], sizeof(ab[0]), "%d", d->gpu);
        snprintf(ab[2 * nk + 1], sizeof(ab[0]), "%s:%u", r->job, r->attempt);
        args[na++] = r->node;
        args[na++] = ab[2 * nk];
        args[na++] = ab[2 * nk + 1];
        nk++;
        d->gpu++;
    }
    return gp_kvscript_call(&restore_script, gp_app_kv(s->app), gp_epoch_answered, j, nk, keys,
                            na, args, NULL);
}

static gp_err
send_seal(sched *s, gp_epoch_job *j)
{
    char value[GP_MAX_ID + 32];

    snprintf(value, sizeof(value), "%s:%llu", gp_app_instance(s->app),
             (unsigned long long)gp_wall_ms());
    args[1] = value;
    return gp_kvscript_call(&seal_script, gp_app_kv(s->app), gp_epoch_answered, j, 2, keys, 2,
                            args, NULL);
}

/* After the read (rep NULL) or a step's count: grants, restore, seal. */
static gp_err
send_step(void *arg, gp_epoch_job *j, const redisReply *rep)
{
    sched      *s = arg;
    shard_rows *d = j->data;

    if (rep != NULL && j->step == S_SEAL)
        return GP_EINTERNAL;           /* the seal answers a string */
    if (rep != NULL && j->step == S_GRANTS && rep->type == REDIS_REPLY_INTEGER)
        d->grants += (unsigned)rep->integer;
    else if (rep != NULL && j->step == S_RESTORE && rep->type == REDIS_REPLY_ARRAY &&
             rep->elements == 2)
        d->gpus += (unsigned)rep->element[0]->integer;
    if (rep != NULL && d->at >= d->n) {   /* this step is through every row: the next */
        j->step = j->step == S_GRANTS && d->n > 0 ? S_RESTORE : S_SEAL;
        d->at = 0;
        d->gpu = 0;
    }
    script_head(j);
    if (j->step == S_GRANTS)
        return send_grants(s, j, d);
    if (j->step == S_RESTORE)
        return send_restore(s, j, d);
    return send_seal(s, j);
}

static void
shard_done(void *arg, gp_epoch_job *j)
{
    sched            *s = arg;
    const shard_rows *d = j->data;
    round_rows       *rr = gp_epoch_data(j->round);

    add(s->m_rebuilt_gpus, d->gpus);
    add(s->m_rebuilt_grants, d->grants);
    rr->attempts += d->n;
    rr->gpus += d->gpus;
    rr->grants += d->grants;
}

static void
round_fields(void *arg, gp_epoch_round *r, char *buf, size_t len)
{
    const round_rows *rr = gp_epoch_data(r);

    (void)arg;
    snprintf(buf, len, "attempts=%u gpus=%u grants=%u", rr->attempts, rr->gpus, rr->grants);
}

static void
round_end(void *arg, gp_epoch_round *r)
{
    round_rows *rr = gp_epoch_data(r);

    (void)arg;
    free(rr->rows);
}

/* Marked meanwhile: the task runs again at once. */
static void
kick_again(void *arg)
{
    sched *s = arg;

    if (s->epoch_task != NULL)
        gp_task_kick(s->epoch_task);
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
take_rows(gp_epoch_round *r, const PGresult *res)
{
    round_rows *rr = gp_epoch_data(r);
    int         n = PQntuples(res);
    unsigned    count[GP_SHARDS] = {0}, at[GP_SHARDS], total = 0;

    for (int i = 0; i < n; i++) {
        unsigned sh = gp_shard_of(PQgetvalue(res, i, 2));

        count[sh] += gp_epoch_begun(r, sh) != NULL;
    }
    for (unsigned sh = 0; sh < GP_SHARDS; sh++) {
        at[sh] = total;
        total += count[sh];
    }
    if (total > 0 && (rr->rows = calloc(total, sizeof(*rr->rows))) == NULL)
        return GP_ENOMEM;
    for (unsigned sh = 0; sh < GP_SHARDS; sh++) {
        gp_epoch_job *j = gp_epoch_begun(r, sh);
        shard_rows   *d = j != NULL ? j->data : NULL;

        if (d != NULL) {
            d->row = rr->rows + at[sh];
            d->n = count[sh];
        }
    }
    for (int i = 0; i < n; i++) {
        unsigned  sh = gp_shard_of(PQgetvalue(res, i, 2));
        live_row *row;

        if (gp_epoch_begun(r, sh) == NULL)
            continue;
        row = &rr->rows[at[sh]++];
        snprintf(row->job, sizeof(row->job), "%s", PQgetvalue(res, i, 0));
        row->attempt = (uint32_t)strtoul(PQgetvalue(res, i, 1), NULL, 10);
        snprintf(row->node, sizeof(row->node), "%s", PQgetvalue(res, i, 3));
        row->gpus = gpu_mask(PQgetvalue(res, i, 4));
    }
    return GP_EOK;
}

static void
live_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_epoch_round *r = arg;

    if (err == GP_EOK && nres != 1)
        err = GP_EINTERNAL, detail = "no result";
    if (err == GP_EOK)
        err = take_rows(r, res[0]);
    gp_epoch_read_done(r, err, detail);
}

static void
read_live(void *arg, gp_epoch_round *r)
{
    sched *s = arg;

    if (gp_db_query(gp_app_db(s->app),
                    "SELECT a.job_id, a.attempt, a.site, a.node, array_to_string(a.gpus, ',')\n"
                    "FROM attempts a WHERE a.state IN ('reserved','starting','running')",
                    0, NULL, 0, live_read, r) != GP_EOK)
        live_read(r, GP_EUNAVAIL, NULL, 0, "database unavailable");
}

static const gp_epoch_ops epoch_ops = {
    .metric = "gp_scheduler_redis_rebuilds_total",
    .round_size = sizeof(round_rows),
    .job_size = sizeof(shard_rows),
    .begin = send_begin,
    .read = read_live,
    .step = send_step,
    .done = shard_done,
    .fields = round_fields,
    .end = round_end,
    .again = kick_again,
};

/* The "epoch" task (kicked by a stale refusal): the marked shards are
 * rebuilt, one round at a time (gp/epoch.h). */
void
sched_epoch_run(gp_app *app, void *arg)
{
    sched *s = arg;

    if (gp_kv_is_connected(gp_app_kv(app)))
        gp_epoch_run(&s->epoch);
}

void
sched_epoch_start(sched *s)
{
    gp_metrics *m = gp_app_metrics(s->app);

    gp_kvscript_init(&begin_script, begin_lua);
    gp_kvscript_init(&grants_script, grants_lua);
    gp_kvscript_init(&restore_script, restore_lua);
    gp_kvscript_init(&seal_script, seal_lua);
    gp_epoch_init(&s->epoch, &epoch_ops, s, gp_app_instance(s->app), m);
    s->m_rebuilt_gpus = gp_metrics_counter(m, "gp_scheduler_redis_rebuilt_gpus_total", NULL,
                                           "GPUs of live attempts booked again by a rebuild");
    s->m_rebuilt_grants = gp_metrics_counter(m, "gp_scheduler_redis_rebuilt_grants_total", NULL,
                                             "Nodes whose grant a rebuild moved to now + "
                                             "dispatch-timeout-ms");
    s->m_stale_refusals = gp_metrics_counter(m, "gp_scheduler_redis_stale_total", NULL,
                                             "Scripts refused because their shard's epoch was "
                                             "missing (Redis lost its data)");
    /* a start checks every shard: one sealed already answers 'present' */
    gp_epoch_start(&s->epoch);
    if (s->epoch_task != NULL)
        gp_task_kick(s->epoch_task);
}
