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
 * task rebuilds the marked shards (the marks, rounds and results are
 * gp/epoch.h's driver; this file gives it the scripts, the reads and the
 * steps), each step a script (scripts.h) that first checks the epoch is
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
#include "gp/epoch.h"
#include "gp/log.h"
#include "metering.h"
#include "scripts.h"

#define SETTLE_MARGIN_MS 1000
#define REQUEUE_CHUNK    200           /* records per requeue call */
#define SEAL_MAX_SITES   1000          /* sites of one shard in one seal */

enum { S_REQUEUE = GP_EPOCH_FIRST, S_SEAL };

/* A row of either read, copied: (site, seq) or (id, line). */
typedef struct pair {
    char *a, *b;
} pair;

/* One shard: its rows of the two reads and how far it got (the driver's
 * job data). */
typedef struct shard_rows {
    pair *seq, *rec;                   /* into the round's rows */
    int   nseq, nrec, at;
} shard_rows;

/* The round's rows and figures (the driver's round data). */
typedef struct round_rows {
    pair     *rows;                    /* the sequences, then the records */
    int       nrows;
    unsigned  sites, requeued;         /* the done shards', for the log line */
} round_rows;

static gp_err
send_begin(void *arg, gp_epoch_job *j)
{
    metering   *m = arg;
    char        key[3][METERING_KEY_LEN], settle[16];
    const char *keys[3] = {key[0], key[1], key[2]};
    const char *args[2] = {j->token, settle};

    metering_key(key[0], j->shard, "epoch");
    metering_key(key[1], j->shard, "rebuilding");
    metering_key(key[2], j->shard, "since");
    snprintf(settle, sizeof(settle), "%u", gp_app_cfg(m->app)->pg_timeout_ms + SETTLE_MARGIN_MS);
    return gp_kvscript_call(&m->begin, gp_app_kv(m->app), gp_epoch_answered, j, 3, keys, 2, args,
                            NULL);
}

/* KEYS epoch token recs out; ARGV token, then id line... */
static gp_err
send_requeue(metering *m, gp_epoch_job *j, const char **keys, char (*key)[METERING_KEY_LEN])
{
    shard_rows *d = j->data;
    const char *args[1 + 2 * REQUEUE_CHUNK];
    int         na = 1;

    metering_key(key[2], j->shard, "recs");
    metering_key(key[3], j->shard, "out");
    args[0] = j->token;
    for (; d->at < d->nrec && na < 1 + 2 * REQUEUE_CHUNK; d->at++) {
        args[na++] = d->rec[d->at].a;
        args[na++] = d->rec[d->at].b;
    }
    return gp_kvscript_call(&m->requeue, gp_app_kv(m->app), gp_epoch_answered, j, 4, keys, na,
                            args, NULL);
}

/* KEYS epoch token seq since; ARGV token value, then site seq... */
static gp_err
send_seal(metering *m, gp_epoch_job *j, const char **keys, char (*key)[METERING_KEY_LEN])
{
    const shard_rows *d = j->data;
    const char       *args[2 + 2 * SEAL_MAX_SITES];
    char              value[GP_MAX_ID + 32];
    int               na = 2;

    metering_key(key[2], j->shard, "seq");
    metering_key(key[3], j->shard, "since");
    snprintf(value, sizeof(value), "%s:%llu", gp_app_instance(m->app),
             (unsigned long long)gp_wall_ms());
    args[0] = j->token;
    args[1] = value;
    for (int i = 0; i < d->nseq && i < SEAL_MAX_SITES; i++) {
        args[na++] = d->seq[i].a;
        args[na++] = d->seq[i].b;
    }
    return gp_kvscript_call(&m->seal, gp_app_kv(m->app), gp_epoch_answered, j, 4, keys, na, args,
                            NULL);
}

/* After the read (rep NULL) or a requeue's count: requeue, then seal. */
static gp_err
send_step(void *arg, gp_epoch_job *j, const redisReply *rep)
{
    metering   *m = arg;
    shard_rows *d = j->data;
    char        key[4][METERING_KEY_LEN];
    const char *keys[4] = {key[0], key[1], key[2], key[3]};

    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER && m->m_requeued != NULL)
        *m->m_requeued += (uint64_t)rep->integer;
    if (rep != NULL && d->at >= d->nrec)
        j->step = S_SEAL;
    metering_key(key[0], j->shard, "epoch");
    metering_key(key[1], j->shard, "rebuilding");
    if (j->step == S_REQUEUE)
        return send_requeue(m, j, keys, key);
    return send_seal(m, j, keys, key);
}

static void
shard_done(void *arg, gp_epoch_job *j)
{
    const shard_rows *d = j->data;
    round_rows       *rr = gp_epoch_data(j->round);

    (void)arg;
    rr->sites += (unsigned)d->nseq;
    rr->requeued += (unsigned)d->nrec;
}

static void
round_fields(void *arg, gp_epoch_round *r, char *buf, size_t len)
{
    const round_rows *rr = gp_epoch_data(r);

    (void)arg;
    snprintf(buf, len, "sites=%u requeued=%u", rr->sites, rr->requeued);
}

static void
round_end(void *arg, gp_epoch_round *r)
{
    round_rows *rr = gp_epoch_data(r);

    (void)arg;
    for (int i = 0; i < rr->nrows; i++) {
        free(rr->rows[i].a);
        free(rr->rows[i].b);
    }
    free(rr->rows);
}

/* The rows of a result ordered by shard (column 1), copied (columns 0 and
 * 2), each begun shard's run remembered. */
static gp_err
take(gp_epoch_round *r, const PGresult *res, bool seqs)
{
    round_rows *rr = gp_epoch_data(r);

    for (int i = 0; i < PQntuples(res); i++) {
        unsigned      sh = (unsigned)strtoul(PQgetvalue(res, i, 1), NULL, 10);
        gp_epoch_job *j = gp_epoch_begun(r, sh);
        pair         *p = &rr->rows[rr->nrows];
        shard_rows   *d;

        if (j == NULL)
            continue;
        p->a = strdup(PQgetvalue(res, i, 0));
        p->b = strdup(PQgetvalue(res, i, 2));
        rr->nrows++;
        if (p->a == NULL || p->b == NULL)
            return GP_ENOMEM;
        d = j->data;
        if (seqs && d->nseq++ == 0)
            d->seq = p;
        if (!seqs && d->nrec++ == 0)
            d->rec = p;
    }
    return GP_EOK;
}

static void
pg_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_epoch_round *r = arg;
    round_rows     *rr = gp_epoch_data(r);

    if (err == GP_EOK && nres != 2)
        err = GP_EINTERNAL, detail = "no result";
    if (err == GP_EOK && (rr->rows = calloc((size_t)(PQntuples(res[0]) + PQntuples(res[1]) + 1),
                                            sizeof(*rr->rows))) == NULL)
        err = GP_ENOMEM, detail = "out of memory";
    if (err == GP_EOK && (err = take(r, res[0], true)) == GP_EOK)
        err = take(r, res[1], false);
    gp_epoch_read_done(r, err, detail);
}

/* The begun shards' sequences and unpublished records, in one transaction. */
static void
read_pg(void *arg, gp_epoch_round *r)
{
    metering  *m = arg;
    gp_buf     arr;
    gp_db_tx  *tx;
    gp_err     rc;

    gp_buf_init(&arr, GP_SHARDS * 6 + 8);
    rc = gp_pgarr_begin(&arr);
    for (unsigned sh = 0; sh < GP_SHARDS && rc == GP_EOK; sh++) {
        char num[8];

        snprintf(num, sizeof(num), "%u", sh);
        if (gp_epoch_begun(r, sh) != NULL)
            rc = gp_pgarr_add(&arr, num);
    }
    if (rc == GP_EOK)
        rc = gp_pgarr_end(&arr);
    const char *p[1] = {arr.p};

    tx = rc == GP_EOK ? gp_db_tx_new(gp_app_db(m->app)) : NULL;
    if (tx == NULL ||
        gp_db_tx_add(tx, "SELECT site, shard, seq FROM metering_seq\n"
                         "WHERE shard = ANY($1::int[]) ORDER BY shard, site", 1, p) != GP_EOK ||
        gp_db_tx_add(tx, "SELECT id, shard, line FROM metering_records\n"
                         "WHERE NOT published AND shard = ANY($1::int[]) ORDER BY shard, id",
                     1, p) != GP_EOK ||
        gp_db_tx_run(tx, 0, pg_read, r) != GP_EOK)
        pg_read(r, GP_EUNAVAIL, NULL, 0, "database unavailable");
    gp_buf_fini(&arr);
}

/* No again: a shard marked meanwhile (a "wait" among them) waits for the
 * task's next period, not the next loop iteration. */
static const gp_epoch_ops epoch_ops = {
    .metric = "gp_metering_redis_rebuilds_total",
    .round_size = sizeof(round_rows),
    .job_size = sizeof(shard_rows),
    .begin = send_begin,
    .read = read_pg,
    .step = send_step,
    .done = shard_done,
    .fields = round_fields,
    .end = round_end,
};

/* The "epoch" task: the marked shards are rebuilt, one round at a time
 * (gp/epoch.h). */
void
metering_epoch_run(gp_app *app, void *arg)
{
    metering *m = arg;

    if (gp_kv_is_connected(gp_app_kv(app)))
        gp_epoch_run(&m->epoch);
}

void
metering_epoch_start(metering *m)
{
    gp_metrics *mx = gp_app_metrics(m->app);

    gp_kvscript_init(&m->begin, metering_begin_lua);
    gp_kvscript_init(&m->requeue, metering_requeue_lua);
    gp_kvscript_init(&m->seal, metering_seal_lua);
    gp_epoch_init(&m->epoch, &epoch_ops, m, gp_app_instance(m->app), mx);
    m->m_requeued = gp_metrics_counter(mx, "gp_metering_requeued_total", NULL,
                                       "Stored records put back into Redis's outbox by a rebuild");
    m->m_stale_refusals = gp_metrics_counter(mx, "gp_metering_redis_stale_total", NULL,
                                             "Scripts refused because their shard's epoch was "
                                             "missing (Redis lost its data)");
    /* a start checks every shard: one sealed already answers 'present', a
     * new Redis is sealed before the first readings come */
    gp_epoch_start(&m->epoch);
    gp_task_kick(gp_app_task(m->app, "epoch"));
}
