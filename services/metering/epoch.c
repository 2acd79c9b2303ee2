/* epoch.c -- metering's Redis keys after Redis lost its data (FLUSHALL, a
 * restart without persistence, a failover to an empty replica).
 *
 * What is lost and where it comes back from:
 *   - the running state of each attempt's node: taken up again from its
 *     last stored record when its next reading, checkpoint or end comes
 *     (store.c, the seed), so nothing is counted twice or lost;
 *   - each site's last sequence number: PostgreSQL's metering_seq, moved up
 *     by every stored record;
 *   - the outbox: the records stored and not yet marked published are put
 *     back (a duplicate of one the stream has is stored once: its
 *     Nats-Msg-Id, billing's record id);
 *   - the closed marks: the seed finds a final record and closes again.
 *
 * Each shard carries an epoch key (scripts.h).  The scripts that take a
 * reading or write a record refuse without it ('stale') and the shard is
 * marked (metering_shard_stale); a start marks every shard.  The "epoch"
 * task rebuilds the marked
 * shards, each step a script (scripts.h) that first checks the epoch is
 * still missing ('present': another instance sealed it):
 *
 *   1. begin: waits until pg-timeout-ms + 1 s after the first begin that
 *      found the shard without its epoch, on Redis's clock; then sets the
 *      rebuild's token.  Every record written before the loss was handed
 *      to PostgreSQL in the wake-up that got it (store.c), so by then it
 *      has landed or failed, and what is read next is the last of it; none
 *      is written after the loss (the scripts refuse);
 *   2. PostgreSQL: the shards' sites' last sequence numbers and their
 *      records not marked published (one transaction for the round);
 *   3. requeue: those records back into the outbox;
 *   4. seal: the sequences moved up, the epoch written.
 *
 * Steps 3 and 4 need the token ('lost' otherwise: a second loss, or
 * another instance's rebuild took it over, which then finishes it; the
 * next refusal marks the shard again if nobody does).  Readings meanwhile
 * are not lost: the counters are cumulative, the next reading after the
 * rebuild carries them; ends and checkpoints are nak'ed and come again.
 *
 * Counters: gp_metering_redis_rebuilds_total{result="done|present|failed"}
 * (shards), gp_metering_requeued_total (records put back),
 * gp_metering_redis_stale_total (scripts refused for want of an epoch). */
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/buf.h"
#include "gp/clock.h"
#include "gp/dbarray.h"
#include "gp/log.h"
#include "metering.h"
#include "scripts.h"

#define SETTLE_MARGIN_MS 1000
#define REQUEUE_CHUNK    200           /* records per requeue call */
#define SEAL_MAX_SITES   1000          /* sites of one shard in one seal */

enum { R_DONE, R_PRESENT, R_FAILED };
static const char *const results[] = {"done", "present", "failed"};
enum { S_BEGIN, S_REQUEUE, S_SEAL };

typedef struct rebuild rebuild;

/* A row of either read, copied: (site, seq) or (id, line). */
typedef struct pair {
    char *a, *b;
} pair;

/* One shard: the step, its rows of the two reads and how far it got. */
typedef struct shard_job {
    rebuild  *rb;
    unsigned  shard;
    bool      begun;
    int       step;
    pair     *seq, *rec;               /* into rb->rows */
    int       nseq, nrec, at;
    char      token[GP_MAX_ID + 32];
} shard_job;

struct rebuild {
    metering  *m;
    pair      *rows;                   /* the sequences, then the records */
    int        nrows;
    unsigned   pending;
    unsigned   done, sites, requeued;  /* the round's, for its log lines */
    unsigned   failed;
    char       why[64];                /* the first failure's */
    shard_job  job[GP_SHARDS];
};

static void step_send(shard_job *j);
static void read_pg(rebuild *rb);

static void
rebuild_free(rebuild *rb)
{
    for (int i = 0; i < rb->nrows; i++) {
        free(rb->rows[i].a);
        free(rb->rows[i].b);
    }
    free(rb->rows);
    free(rb);
}

/* One call of the phase answered: the round goes on when all have. */
static void
phase_step(rebuild *rb)
{
    if (--rb->pending > 0)
        return;
    for (unsigned sh = 0; sh < GP_SHARDS; sh++)
        if (rb->job[sh].begun && rb->job[sh].step == S_BEGIN) {
            read_pg(rb);                  /* every begin answered: the reads, then the rest */
            return;
        }
    if (rb->done > 0)
        GP_WARN("redis_rebuilt", "shards=%u sites=%u requeued=%u", rb->done, rb->sites,
                rb->requeued);
    if (rb->failed > 0)
        GP_WARN("redis_rebuild_failed", "shards=%u why=\"%s\"", rb->failed, rb->why);
    rb->m->epoch_busy = false;
    rebuild_free(rb);
}

static void
mark(metering *m, unsigned shard)
{
    m->stale[shard] = true;
    m->stale_any = true;
}

static void
shard_end(shard_job *j, int result, const char *why)
{
    metering *m = j->rb->m;

    j->begun = false;
    if (m->m_rebuilds[result] != NULL)
        (*m->m_rebuilds[result])++;
    if (result == R_DONE) {
        j->rb->done++;
        j->rb->sites += (unsigned)j->nseq;
        j->rb->requeued += (unsigned)j->nrec;
    }
    if (result == R_FAILED) {
        if (j->rb->failed++ == 0)
            snprintf(j->rb->why, sizeof(j->rb->why), "shard %u step %d: %s", j->shard, j->step,
                     why);
        if (strcmp(why, "lost") != 0)  /* lost: a loss or another rebuild took it over */
            mark(m, j->shard);
    }
    phase_step(j->rb);
}

static void
step_answered(void *arg, const redisReply *rep, gp_err err)
{
    shard_job *j = arg;
    metering  *m = j->rb->m;

    if (err != GP_EOK || rep->type == REDIS_REPLY_ERROR) {
        shard_end(j, R_FAILED, err != GP_EOK ? gp_err_name(err) : rep->str);
        return;
    }
    if (rep->type == REDIS_REPLY_STRING) {
        if (strcmp(rep->str, "begun") == 0) {
            phase_step(j->rb);         /* waits for the reads */
        } else if (strcmp(rep->str, "wait") == 0) {
            j->begun = false;          /* not settled yet: the next run asks again */
            mark(m, j->shard);
            phase_step(j->rb);
        } else {
            shard_end(j, strcmp(rep->str, "sealed") == 0    ? R_DONE
                         : strcmp(rep->str, "present") == 0 ? R_PRESENT : R_FAILED, rep->str);
        }
        return;
    }
    if (rep->type == REDIS_REPLY_INTEGER && m->m_requeued != NULL)
        *m->m_requeued += (uint64_t)rep->integer;
    if (j->at >= j->nrec)
        j->step = S_SEAL;
    step_send(j);
}

/* KEYS epoch token recs out; ARGV token, then id line... */
static gp_err
send_requeue(shard_job *j, const char **keys, char (*key)[METERING_KEY_LEN])
{
    const char *args[1 + 2 * REQUEUE_CHUNK];
    int         na = 1;

    metering_key(key[2], j->shard, "recs");
    metering_key(key[3], j->shard, "out");
    args[0] = j->token;
    for (; j->at < j->nrec && na < 1 + 2 * REQUEUE_CHUNK; j->at++) {
        args[na++] = j->rec[j->at].a;
        args[na++] = j->rec[j->at].b;
    }
    return gp_kvscript_call(&j->rb->m->requeue, gp_app_kv(j->rb->m->app), step_answered, j, 4,
                            keys, na, args, NULL);
}

/* KEYS epoch token seq since; ARGV token value, then site seq... */
static gp_err
send_seal(shard_job *j, const char **keys, char (*key)[METERING_KEY_LEN])
{
    const char *args[2 + 2 * SEAL_MAX_SITES];
    char        value[GP_MAX_ID + 32];
    int         na = 2;

    metering_key(key[2], j->shard, "seq");
    metering_key(key[3], j->shard, "since");
    snprintf(value, sizeof(value), "%s:%llu", gp_app_instance(j->rb->m->app),
             (unsigned long long)gp_wall_ms());
    args[0] = j->token;
    args[1] = value;
    for (int i = 0; i < j->nseq && i < SEAL_MAX_SITES; i++) {
        args[na++] = j->seq[i].a;
        args[na++] = j->seq[i].b;
    }
    return gp_kvscript_call(&j->rb->m->seal, gp_app_kv(j->rb->m->app), step_answered, j, 4, keys,
                            na, args, NULL);
}

static void
step_send(shard_job *j)
{
    metering   *m = j->rb->m;
    char        key[4][METERING_KEY_LEN], settle[16];
    const char *keys[4] = {key[0], key[1], key[2], key[3]};
    const char *args[2] = {j->token, settle};
    gp_err      rc;

    metering_key(key[0], j->shard, "epoch");
    metering_key(key[1], j->shard, "rebuilding");
    if (j->step == S_BEGIN) {
        metering_key(key[2], j->shard, "since");
        snprintf(settle, sizeof(settle), "%u", gp_app_cfg(m->app)->pg_timeout_ms + SETTLE_MARGIN_MS);
        rc = gp_kvscript_call(&m->begin, gp_app_kv(m->app), step_answered, j, 3, keys, 2, args,
                              NULL);
    } else if (j->step == S_REQUEUE) {
        rc = send_requeue(j, keys, key);
    } else {
        rc = send_seal(j, keys, key);
    }
    if (rc != GP_EOK)
        shard_end(j, R_FAILED, gp_err_name(rc));
}

/* The rows of a result ordered by shard (column 1), copied (columns 0 and
 * 2), each begun shard's run remembered. */
static gp_err
take(rebuild *rb, const PGresult *res, bool seqs)
{
    for (int i = 0; i < PQntuples(res); i++) {
        unsigned   sh = (unsigned)strtoul(PQgetvalue(res, i, 1), NULL, 10);
        pair      *p = &rb->rows[rb->nrows];
        shard_job *j;

        if (sh >= GP_SHARDS || !rb->job[sh].begun)
            continue;
        p->a = strdup(PQgetvalue(res, i, 0));
        p->b = strdup(PQgetvalue(res, i, 2));
        rb->nrows++;
        if (p->a == NULL || p->b == NULL)
            return GP_ENOMEM;
        j = &rb->job[sh];
        if (seqs && j->nseq++ == 0)
            j->seq = p;
        if (!seqs && j->nrec++ == 0)
            j->rec = p;
    }
    return GP_EOK;
}

static void
pg_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    rebuild *rb = arg;

    if (err == GP_EOK && nres != 2)
        err = GP_EINTERNAL, detail = "no result";
    if (err == GP_EOK && (rb->rows = calloc((size_t)(PQntuples(res[0]) + PQntuples(res[1]) + 1),
                                            sizeof(*rb->rows))) == NULL)
        err = GP_ENOMEM, detail = "out of memory";
    if (err == GP_EOK && (err = take(rb, res[0], true)) == GP_EOK)
        err = take(rb, res[1], false);
    rb->pending = 1;                   /* held while sending */
    for (unsigned sh = 0; sh < GP_SHARDS; sh++) {
        shard_job *j = &rb->job[sh];

        if (!j->begun)
            continue;
        rb->pending++;
        j->step = S_REQUEUE;
        if (err != GP_EOK)
            shard_end(j, R_FAILED, detail != NULL ? detail : gp_err_name(err));
        else
            step_send(j);
    }
    phase_step(rb);
}

/* The begun shards' sequences and unpublished records, in one transaction. */
static void
read_pg(rebuild *rb)
{
    gp_buf    arr;
    gp_db_tx *tx;
    gp_err    rc;

    gp_buf_init(&arr, GP_SHARDS * 6 + 8);
    rc = gp_pgarr_begin(&arr);
    for (unsigned sh = 0; sh < GP_SHARDS && rc == GP_EOK; sh++) {
        char num[8];

        snprintf(num, sizeof(num), "%u", sh);
        if (rb->job[sh].begun)
            rc = gp_pgarr_add(&arr, num);
    }
    if (rc == GP_EOK)
        rc = gp_pgarr_end(&arr);
    const char *p[1] = {arr.p};

    tx = rc == GP_EOK ? gp_db_tx_new(gp_app_db(rb->m->app)) : NULL;
    if (tx == NULL ||
        gp_db_tx_add(tx, "SELECT site, shard, seq FROM metering_seq\n"
                         "WHERE shard = ANY($1::int[]) ORDER BY shard, site", 1, p) != GP_EOK ||
        gp_db_tx_add(tx, "SELECT id, shard, line FROM metering_records\n"
                         "WHERE NOT published AND shard = ANY($1::int[]) ORDER BY shard, id",
                     1, p) != GP_EOK ||
        gp_db_tx_run(tx, 0, pg_read, rb) != GP_EOK)
        pg_read(rb, GP_EUNAVAIL, NULL, 0, "database unavailable");
    gp_buf_fini(&arr);
}

/* The "epoch" task: the marked shards are rebuilt, one round at a time. */
void
metering_epoch_run(gp_app *app, void *arg)
{
    metering *m = arg;
    rebuild  *rb;

    if (m->epoch_busy || !m->stale_any || !gp_kv_is_connected(gp_app_kv(app)) ||
        (rb = calloc(1, sizeof(*rb))) == NULL)
        return;
    rb->m = m;
    m->epoch_busy = true;
    m->stale_any = false;
    rb->pending = 1;                   /* held while sending */
    for (unsigned sh = 0; sh < GP_SHARDS; sh++) {
        shard_job *j = &rb->job[sh];

        if (!m->stale[sh])
            continue;
        m->stale[sh] = false;          /* a refusal from now on marks it again */
        *j = (shard_job){.rb = rb, .shard = sh, .begun = true, .step = S_BEGIN};
        snprintf(j->token, sizeof(j->token), "%s:%llu", gp_app_instance(m->app),
                 (unsigned long long)gp_mono_ms());
        rb->pending++;
        step_send(j);
    }
    phase_step(rb);
}

void
metering_epoch_start(metering *m)
{
    gp_metrics *mx = gp_app_metrics(m->app);

    gp_kvscript_init(&m->begin, metering_begin_lua);
    gp_kvscript_init(&m->requeue, metering_requeue_lua);
    gp_kvscript_init(&m->seal, metering_seal_lua);
    gp_metrics_counters(mx, "gp_metering_redis_rebuilds_total", "result", results, 3,
                        "Shards whose Redis keys were rebuilt from PostgreSQL, by result "
                        "(present: found whole, failed: tried again)", m->m_rebuilds);
    m->m_requeued = gp_metrics_counter(mx, "gp_metering_requeued_total", NULL,
                                       "Stored records put back into Redis's outbox by a rebuild");
    m->m_stale_refusals = gp_metrics_counter(mx, "gp_metering_redis_stale_total", NULL,
                                             "Scripts refused because their shard's epoch was "
                                             "missing (Redis lost its data)");
    /* a start checks every shard: one sealed already answers 'present', a
     * new Redis is sealed before the first readings come */
    for (unsigned sh = 0; sh < GP_SHARDS; sh++)
        m->stale[sh] = true;
    m->stale_any = true;
    gp_task_kick(gp_app_task(m->app, "epoch"));
}
