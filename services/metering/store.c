/* store.c -- what Redis holds for metering, kept where it survives Redis:
 * every record in PostgreSQL (migrate.c) before it is published, and the
 * running state of an attempt's node taken up from its last record when
 * Redis has none (scripts.h, metering_seed_lua).
 *
 * Why before the publish: a record's line carries the counters it ends at
 * (raw_*) and the counted totals (to_*).  Once the stream has a record, a
 * state Redis lost must start from that record, or the next reading's
 * delta would count its window again; so a record is published only after
 * its row committed, and the last stored record is never older than the
 * last published one.  A record stored but never published (Redis lost
 * its outbox) is put back into the outbox by epoch.c.
 *
 * Writes of one loop wake-up (an ev_prepare flushes them) go in one
 * statement each: records (INSERT ... ON CONFLICT DO NOTHING: the same id
 * is the same bytes, whoever stores it; the site's last sequence number
 * with it), published marks, baseline lookups.  At most STORE_MAX records
 * wait or are in flight; past it a record stays in Redis's outbox, stored
 * when the outbox task publishes it.
 *
 * The seed: an attempt's node the scripts found without state and without
 * a closed mark ('need') is looked up here; its last record (the highest
 * window) gives the raw counters the next delta starts from, the counted
 * totals and the checkpoint; a final one closes it; none means a new
 * attempt, from zero.  The seed script writes only where there is still
 * no state, and refuses while the shard's epoch is missing, so a seed read
 * before a loss is never written after it.
 *
 * Counters: gp_metering_stored_total, gp_metering_store_errors_total,
 * gp_metering_baselines_total{from="record|zero|closed"}. */
#include <ev.h>
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

#define STORE_BATCH  256                 /* rows per statement */
#define STORE_MAX    8192                /* records waiting or being written */
#define KEEP_MS      (8ull * 86400000)   /* a published record's row: past the closed marks' week */
#define PRUNE_BATCH  "10000"

enum { B_RECORD, B_ZERO, B_CLOSED };

typedef struct store_item {
    char                id[MSG_USAGE_RECORD_ID_MAXLEN + 1];
    char               *line;
    metering_stored_cb *cb;
    void               *arg;
} store_item;

typedef struct seed_item {
    metering           *m;
    char                site[64], node[64], job[64];
    uint32_t            att;
    bool                found;
    metering_line       last;
    metering_stored_cb *cb;
    void               *arg;
} seed_item;

/* One statement's worth of records or of lookups. */
typedef struct batch {
    metering *m;
    unsigned  n;
    union {
        store_item rec[STORE_BATCH];
        seed_item *seed[STORE_BATCH];
    } u;
} batch;

struct metering_store {
    ev_prepare prep;
    bool       armed;
    batch     *rec, *seed;               /* being filled */
    char       pub[STORE_BATCH][MSG_USAGE_RECORD_ID_MAXLEN + 1];
    unsigned   npub;
    unsigned   pending;                  /* records waiting or in flight */
};

static void
count(uint64_t *c)
{
    if (c != NULL)
        (*c)++;
}

/* ---- records ------------------------------------------------------------------ */

static const char insert_sql[] =
    "WITH r AS (SELECT DISTINCT ON (id) * FROM unnest($1::text[], $2::int[], $3::text[],\n"
    "    $4::bigint[], $5::text[], $6::int[], $7::text[], $8::bigint[], $9::boolean[],\n"
    "    $10::text[]) AS r(id, shard, site, site_seq, job_id, attempt, node, win, final, line)\n"
    "  ORDER BY id),\n"
    "ins AS (INSERT INTO metering_records (id, shard, site, site_seq, job_id, attempt, node,\n"
    "    win, final, line, created_ms)\n"
    "  SELECT id, shard, site, site_seq, job_id, attempt, node, win, final, line, $11::bigint\n"
    "  FROM r ORDER BY id ON CONFLICT (id) DO NOTHING)\n"
    "INSERT INTO metering_seq (site, shard, seq)\n"
    "SELECT site, min(shard), max(site_seq) FROM r GROUP BY site ORDER BY site\n"
    "ON CONFLICT (site) DO UPDATE SET seq = GREATEST(metering_seq.seq, excluded.seq)";

static void
records_written(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    batch    *b = arg;
    metering *m = b->m;

    (void)res, (void)nres;
    if (err != GP_EOK)
        GP_WARN("metering_store_failed", "records=%u code=%s detail=\"%s\"", b->n,
                gp_err_name(err), detail);
    for (unsigned i = 0; i < b->n; i++) {
        store_item *it = &b->u.rec[i];

        count(err == GP_EOK ? m->m_stored : m->m_store_errors);
        if (it->cb != NULL)
            it->cb(it->arg, err);
        free(it->line);
    }
    m->store->pending -= b->n;
    free(b);
}

/* The columns of one record, from its line. */
static gp_err
add_columns(gp_buf *col, const store_item *it)
{
    metering_line l;
    char          num[6][24];

    if (!metering_line_read(it->line, &l))
        return GP_EINVAL;
    snprintf(num[0], sizeof(num[0]), "%u", gp_shard_of(l.site));
    snprintf(num[1], sizeof(num[1]), "%llu", l.site_seq);
    snprintf(num[2], sizeof(num[2]), "%u", l.att);
    snprintf(num[3], sizeof(num[3]), "%llu", l.window);
    const char *v[10] = {it->id, num[0], l.site, num[1], l.job, num[2], l.node, num[3],
                         l.final ? "t" : "f", it->line};
    gp_err rc = GP_EOK;

    for (int k = 0; k < 10 && rc == GP_EOK; k++)
        rc = gp_pgarr_add(&col[k], v[k]);
    return rc;
}

static void
records_flush(metering *m, batch *b)
{
    gp_buf      col[10];
    char        now[24];
    const char *p[11];
    gp_err      rc = GP_EOK;

    for (int k = 0; k < 10; k++) {
        gp_buf_init(&col[k], 4096);
        if (rc == GP_EOK)
            rc = gp_pgarr_begin(&col[k]);
    }
    for (unsigned i = 0; i < b->n && rc == GP_EOK; i++)
        rc = add_columns(col, &b->u.rec[i]);
    for (int k = 0; k < 10 && rc == GP_EOK; k++) {
        rc = gp_pgarr_end(&col[k]);
        p[k] = col[k].p;
    }
    snprintf(now, sizeof(now), "%llu", (unsigned long long)gp_wall_ms());
    p[10] = now;
    if (rc == GP_EOK)
        rc = gp_db_query(gp_app_db(m->app), insert_sql, 11, p, 0, records_written, b);
    for (int k = 0; k < 10; k++)
        gp_buf_fini(&col[k]);
    if (rc != GP_EOK)
        records_written(b, rc, NULL, 0, "not sent");
}

/* ---- published marks ---------------------------------------------------------- */

static void
marks_written(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    (void)arg, (void)res, (void)nres;
    if (err != GP_EOK)      /* a record marked late is only put back once more after a loss */
        GP_WARN("metering_published_mark_failed", "code=%s detail=\"%s\"", gp_err_name(err),
                detail);
}

static void
marks_flush(metering *m)
{
    struct metering_store *st = m->store;
    gp_buf                 ids;
    gp_err                 rc;

    gp_buf_init(&ids, 4096);
    rc = gp_pgarr_begin(&ids);
    for (unsigned i = 0; i < st->npub && rc == GP_EOK; i++)
        rc = gp_pgarr_add(&ids, st->pub[i]);
    if (rc == GP_EOK)
        rc = gp_pgarr_end(&ids);
    const char *p[1] = {ids.p};

    if (rc == GP_EOK)
        rc = gp_db_query(gp_app_db(m->app),
                         "UPDATE metering_records SET published = true\n"
                         "WHERE id = ANY($1::text[]) AND NOT published",
                         1, p, 0, marks_written, NULL);
    if (rc != GP_EOK)
        marks_written(NULL, rc, NULL, 0, "not sent");
    gp_buf_fini(&ids);
    st->npub = 0;
}

/* ---- seeds -------------------------------------------------------------------- */

static void
seed_done(void *arg, const redisReply *rep, gp_err err)
{
    seed_item *it = arg;
    metering  *m = it->m;

    if (err == GP_EOK && rep->type == REDIS_REPLY_ERROR)
        err = GP_EUNAVAIL;
    else if (err == GP_EOK && rep->type != REDIS_REPLY_INTEGER) {   /* 'stale' */
        metering_shard_stale(m, gp_shard_of(it->site));
        err = GP_EUNAVAIL;
    } else if (err == GP_EOK && rep->integer > 0) {
        count(m->m_baselines[rep->integer == 2 ? B_CLOSED : it->found ? B_RECORD : B_ZERO]);
    }
    if (it->cb != NULL)
        it->cb(it->arg, err);
    free(it);
}

/* KEYS state closed lost epoch; ARGV scripts.h's metering_seed_lua. */
static void
seed_send(seed_item *it)
{
    metering           *m = it->m;
    unsigned            shard = gp_shard_of(it->site);
    const metering_line *l = &it->last;
    char                key[4][METERING_KEY_LEN], member[200], num[9][24];
    const char         *keys[4] = {key[0], key[1], key[2], key[3]};
    bool                closed = it->found && l->final;
    bool                usable = it->found && !l->final && l->has_raw;

    metering_member(member, sizeof(member), it->job, it->att, it->node);
    metering_att_key(key[0], shard, 'a', member);
    metering_att_key(key[1], shard, 'd', member);
    snprintf(key[2], METERING_KEY_LEN, "gp:{%u}:m:lost:%s", shard, it->node);
    metering_key(key[3], shard, "epoch");
    snprintf(num[0], 24, "%u", it->att);
    snprintf(num[1], 24, "%llu", l->raw_gpu_ms);
    snprintf(num[2], 24, "%llu", l->raw_energy_mj);
    snprintf(num[3], 24, "%llu", l->from_gpu_ms + l->gpu_ms);
    snprintf(num[4], 24, "%llu", l->from_energy_mj + l->energy_mj);
    snprintf(num[5], 24, "%llu", l->ckpt_gpu_ms);
    snprintf(num[6], 24, "%llu", l->ckpt_energy_mj);
    snprintf(num[7], 24, "%llu", l->last_ms);
    if (it->found && !closed && !usable)  /* an older metering's line: no counters to start at */
        GP_WARN("metering_seed_without_counters", "job=%s attempt=%u node=%s", it->job, it->att,
                it->node);
    const char *argv[13] = {it->job, num[0], it->node, it->site, closed || usable ? "1" : "0",
                            closed ? "1" : "0", num[1], num[2], num[3], num[4], num[5], num[6],
                            num[7]};

    it->found = usable;
    if (gp_kvscript_call(&m->seed, gp_app_kv(m->app), seed_done, it, 4, keys, 13, argv, NULL) !=
        GP_EOK)
        seed_done(it, NULL, GP_EUNAVAIL);
}

static void
seeds_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    batch *b = arg;
    int    rows = err == GP_EOK && nres == 1 ? PQntuples(res[0]) : 0;

    if (err != GP_EOK)
        GP_WARN("metering_seed_read_failed", "attempts=%u code=%s detail=\"%s\"", b->n,
                gp_err_name(err), detail);
    for (unsigned i = 0; i < b->n; i++) {
        seed_item *it = b->u.seed[i];

        for (int r = 0; r < rows && !it->found; r++)
            if (strcmp(PQgetvalue(res[0], r, 0), it->job) == 0 &&
                strtoul(PQgetvalue(res[0], r, 1), NULL, 10) == it->att &&
                strcmp(PQgetvalue(res[0], r, 2), it->node) == 0)
                it->found = metering_line_read(PQgetvalue(res[0], r, 3), &it->last);
        if (err != GP_EOK) {
            if (it->cb != NULL)
                it->cb(it->arg, err);
            free(it);
        } else {
            seed_send(it);
        }
    }
    free(b);
}

static void
seeds_flush(metering *m, batch *b)
{
    gp_buf col[3];
    gp_err rc = GP_EOK;

    for (int k = 0; k < 3; k++) {
        gp_buf_init(&col[k], 4096);
        if (rc == GP_EOK)
            rc = gp_pgarr_begin(&col[k]);
    }
    for (unsigned i = 0; i < b->n && rc == GP_EOK; i++) {
        char att[16];

        snprintf(att, sizeof(att), "%u", b->u.seed[i]->att);
        rc = gp_pgarr_add(&col[0], b->u.seed[i]->job);
        if (rc == GP_EOK)
            rc = gp_pgarr_add(&col[1], att);
        if (rc == GP_EOK)
            rc = gp_pgarr_add(&col[2], b->u.seed[i]->node);
    }
    for (int k = 0; k < 3 && rc == GP_EOK; k++)
        rc = gp_pgarr_end(&col[k]);
    const char *p[3] = {col[0].p, col[1].p, col[2].p};

    if (rc == GP_EOK)
        rc = gp_db_query(gp_app_db(m->app),
                         "SELECT DISTINCT ON (r.job_id, r.attempt, r.node)\n"
                         "  r.job_id, r.attempt, r.node, r.line\n"
                         "FROM unnest($1::text[], $2::int[], $3::text[]) AS q(job, att, node)\n"
                         "JOIN metering_records r\n"
                         "  ON r.job_id = q.job AND r.attempt = q.att AND r.node = q.node\n"
                         "ORDER BY r.job_id, r.attempt, r.node, r.win DESC",
                         3, p, 0, seeds_read, b);
    for (int k = 0; k < 3; k++)
        gp_buf_fini(&col[k]);
    if (rc != GP_EOK)
        seeds_read(b, rc, NULL, 0, "not sent");
}

/* ---- the batches of a loop wake-up -------------------------------------------- */

static void
flush_due(struct ev_loop *loop, ev_prepare *w, int revents)
{
    metering              *m = w->data;
    struct metering_store *st = m->store;
    batch                 *b;

    (void)revents;
    ev_prepare_stop(loop, w);
    st->armed = false;
    if ((b = st->rec) != NULL && b->n > 0) {
        st->rec = NULL;
        records_flush(m, b);
    }
    if ((b = st->seed) != NULL && b->n > 0) {
        st->seed = NULL;
        seeds_flush(m, b);
    }
    if (st->npub > 0)
        marks_flush(m);
}

static void
arm(metering *m)
{
    struct metering_store *st = m->store;

    if (!st->armed) {
        ev_prepare_start(gp_app_loop(m->app), &st->prep);
        st->armed = true;
    }
}

/* The batch being filled, a new one when it is full (sent at once). */
static batch *
filling(metering *m, batch **slot, void (*send)(metering *, batch *))
{
    if (*slot != NULL && (*slot)->n == STORE_BATCH) {
        send(m, *slot);
        *slot = NULL;
    }
    if (*slot == NULL && (*slot = calloc(1, sizeof(**slot))) != NULL)
        (*slot)->m = m;
    arm(m);
    return *slot;
}

void
metering_store(metering *m, const char *id, const char *line, metering_stored_cb *cb,
               void *arg)
{
    struct metering_store *st = m->store;
    batch                 *b;
    store_item            *it;
    char                  *copy;

    if (st->pending >= STORE_MAX || (copy = strdup(line)) == NULL) {
        count(m->m_store_errors);
        if (cb != NULL)
            cb(arg, GP_ETOOBIG);
        return;
    }
    if ((b = filling(m, &st->rec, records_flush)) == NULL) {
        free(copy);
        if (cb != NULL)
            cb(arg, GP_ENOMEM);
        return;
    }
    it = &b->u.rec[b->n++];
    snprintf(it->id, sizeof(it->id), "%s", id);
    it->line = copy;
    it->cb = cb;
    it->arg = arg;
    st->pending++;
}

void
metering_store_published(metering *m, const char *id)
{
    struct metering_store *st = m->store;

    if (st->npub == STORE_BATCH)
        marks_flush(m);
    snprintf(st->pub[st->npub++], sizeof(st->pub[0]), "%s", id);
    arm(m);
}

void
metering_seed(metering *m, const char *site, const char *node, const char *job, uint32_t att,
              metering_stored_cb *cb, void *arg)
{
    seed_item *it = calloc(1, sizeof(*it));
    batch     *b;

    if (it == NULL || (b = filling(m, &m->store->seed, seeds_flush)) == NULL) {
        free(it);
        if (cb != NULL)
            cb(arg, GP_ENOMEM);
        return;
    }
    *it = (seed_item){.m = m, .att = att, .cb = cb, .arg = arg};
    snprintf(it->site, sizeof(it->site), "%s", site);
    snprintf(it->node, sizeof(it->node), "%s", node);
    snprintf(it->job, sizeof(it->job), "%s", job);
    b->u.seed[b->n++] = it;
}

/* ---- pruning ------------------------------------------------------------------ */

static void
pruned(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    (void)arg, (void)nres;
    if (err != GP_EOK)
        GP_WARN("metering_prune_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
    else if (atoi(PQcmdTuples(res[0])) > 0)
        GP_INFO("metering_pruned", "records=%s", PQcmdTuples(res[0]));
}

void
metering_prune_run(gp_app *app, void *arg)
{
    char        before[24];
    const char *p[1] = {before};

    (void)arg;
    snprintf(before, sizeof(before), "%llu", (unsigned long long)(gp_wall_ms() - KEEP_MS));
    gp_db_query(gp_app_db(app),
                "DELETE FROM metering_records WHERE id IN (SELECT id FROM metering_records\n"
                "  WHERE published AND created_ms < $1::bigint LIMIT " PRUNE_BATCH ")",
                1, p, 0, pruned, NULL);
}

/* ---- start and stop ----------------------------------------------------------- */

gp_err
metering_store_start(metering *m)
{
    gp_metrics        *mx = gp_app_metrics(m->app);
    static const char *const from[] = {"record", "zero", "closed"};

    if ((m->store = calloc(1, sizeof(*m->store))) == NULL)
        return GP_ENOMEM;
    ev_prepare_init(&m->store->prep, flush_due);
    m->store->prep.data = m;
    gp_kvscript_init(&m->seed, metering_seed_lua);
    m->m_stored = gp_metrics_counter(mx, "gp_metering_stored_total", NULL,
                                     "Usage records stored in PostgreSQL before their publish");
    m->m_store_errors = gp_metrics_counter(mx, "gp_metering_store_errors_total", NULL,
                                           "Usage records not stored (left in the outbox, "
                                           "stored when it publishes them)");
    gp_metrics_counters(mx, "gp_metering_baselines_total", "from", from, 3,
                        "Attempts' running states Redis lacked, taken up from their last "
                        "stored record, from zero (a new attempt), or closed", m->m_baselines);
    return GP_EOK;
}

void
metering_store_free(metering *m)
{
    batch *r, *sd;

    if (m->store == NULL)
        return;
    r = m->store->rec;        /* never sent; the loop is gone: nothing of theirs runs again */
    sd = m->store->seed;
    for (unsigned i = 0; r != NULL && i < r->n; i++)
        free(r->u.rec[i].line);
    for (unsigned i = 0; sd != NULL && i < sd->n; i++)
        free(sd->u.seed[i]);
    free(r);
    free(sd);
    free(m->store);
    m->store = NULL;
}
