/* post.c -- the durable consumer of USAGE: each record is checked, rated
 * and queued; the records one wake-up of the loop brought (up to `batch`)
 * go to PostgreSQL as ONE statement, one transaction: the records are
 * inserted under their unique ids (ON CONFLICT DO NOTHING: one taken
 * before is skipped with its legs), the accounts the legs name are made,
 * one transfer per record and kind and currency, and the legs; the
 * database's own trigger refuses a transfer that does not balance.  Only
 * then is each message acked.  A batch that fails is sent again record by
 * record, so one bad record cannot hold the others.
 *
 * A record that cannot be billed (impossible values, unknown attempt or
 * site, no price, a currency that is not its product's) is refused: kept
 * in rejected_records with why, counted, acked, never posted. */
#include <ev.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gp/buf.h"
#include "gp/clock.h"
#include "gp/dbarray.h"
#include "gp/log.h"
#include "gp/shard.h"
#include "billing.h"

#define BATCH_MAX 512             /* records in one transaction, at most */
#define QUEUE_MAX 2048            /* taken, waiting for a transaction (durable max in flight: 1024) */
/* Transactions in flight at once.  A durable commit costs an fsync (10-40 ms
 * on a small machine's disk): while one is in flight the records that come
 * wait and go together in the next, so a transaction carries what arrived
 * during one commit (group commit in the service, up to BATCH_MAX). */
#define TX_MAX    2

typedef struct item {
    gp_req *req;
    char   *rec;                     /* the row as JSON */
    char   *legs;                    /* its legs as JSON objects, comma-separated ("" none) */
} item;

static struct {
    billing   *b;
    ev_prepare prep;
    bool       armed;
    item      *it[QUEUE_MAX];
    unsigned   n;
    unsigned   inflight;          /* transactions sent, not yet answered */
} q;

typedef struct batch {
    billing *b;
    unsigned n;
    item    *it[BATCH_MAX];
} batch;

static char        usage_subject[GP_MAX_SUBJECT] = GP_PAT_USAGE_RECORD;
static const char *usage_subjects[] = {usage_subject, NULL};

/* The stream as metering declares it. */
const gp_stream_cfg billing_streams[] = {
    {.name = "USAGE", .subjects = (const char **)usage_subjects, .max_age_s = 30 * 24 * 3600,
     .max_bytes = 4LL << 30, .duplicate_window_s = 600, .memory = false},
    {.name = NULL},
};

static void
item_free(item *it)
{
    free(it->rec);
    free(it->legs);
    free(it);
}

/* ---- refusals ------------------------------------------------------------------------ */

typedef struct reject_call {
    billing *b;
    gp_req  *req;
} reject_call;

static void
rejected(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    reject_call *c = arg;

    (void)res;
    (void)nres;
    if (err != GP_EOK)                  /* not kept: nak, so it is neither lost nor posted */
        gp_req_done(c->req, gp_req_fail(c->req, GP_EUNAVAIL, "database: %s", detail));
    else
        gp_req_done(c->req, GP_EOK);
    free(c);
}

static gp_err
reject(billing *b, gp_req *req, const char *why)
{
    const msg_usage_record *r = gp_req_in(req);
    gp_buf                  body;
    size_t                  len;
    char                   *hex = NULL, at[24], seq[24];
    const char             *p[7];
    reject_call            *c = calloc(1, sizeof(*c));
    gp_err                  rc;

    /* the record as decoded, re-encoded: what was taken, bounded by the
     * schema (the raw body is the transport's, gone once the handler
     * returned) */
    gp_buf_init(&body, 0);
    if (c == NULL || gp_msg_encode(&msg_usage_record_desc, r, &body) != GP_EOK ||
        (hex = malloc(2 * body.n + 3)) == NULL) {
        gp_buf_fini(&body);
        free(hex);
        free(c);
        return gp_req_fail(req, GP_ENOMEM, "out of memory");
    }
    len = body.n;
    hex[0] = '\\';
    hex[1] = 'x';
    for (size_t i = 0; i < len; i++)
        snprintf(hex + 2 + 2 * i, 3, "%02x", (unsigned char)body.p[i]);
    hex[2 + 2 * len] = '\0';
    gp_buf_fini(&body);
    snprintf(at, sizeof(at), "%llu", (unsigned long long)gp_wall_ms());
    p[0] = r->id;
    p[1] = gp_req_subject(req);
    p[2] = why;
    p[3] = hex;
    p[4] = at;
    p[5] = r->site;
    snprintf(seq, sizeof(seq), "%llu", (unsigned long long)r->site_seq);
    p[6] = seq;
    c->b = b;
    c->req = req;
    (*b->m_rejected)++;
    GP_WARN("usage_record_rejected", "id=%s why=\"%s\"", p[0], why);
    rc = gp_db_query(gp_app_db(b->app),
                     "INSERT INTO rejected_records (id, subject, reason, body, at_ms, site,"
                     " site_seq) VALUES (NULLIF($1, ''), $2, $3, $4::bytea, $5::bigint,"
                     " NULLIF($6, ''), NULLIF($7, '0')::bigint)",
                     7, p, 0, rejected, c);
    free(hex);
    if (rc != GP_EOK) {
        free(c);
        return gp_req_fail(req, GP_EUNAVAIL, "database unavailable");
    }
    return GP_EPENDING;
}

/* ---- batches ----------------------------------------------------------------------- */

static void send_batch(billing *b, item **it, unsigned n);
static void flush(billing *b);

static void
batch_done(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    batch   *bt = arg;
    billing *b = bt->b;

    if (err == GP_EOK && nres == 3 && PQntuples(res[1]) == 1 && PQntuples(res[2]) == 1) {
        long posted = strtol(PQgetvalue(res[1], 0, 0), NULL, 10);

        *b->m_posted += (uint64_t)posted;
        *b->m_duplicates += bt->n - (uint64_t)posted;
        *b->m_transfers += strtoull(PQgetvalue(res[1], 0, 1), NULL, 10);
        *b->m_credits += strtoull(PQgetvalue(res[2], 0, 0), NULL, 10);
        for (unsigned i = 0; i < bt->n; i++) {
            gp_req_done(bt->it[i]->req, GP_EOK);
            item_free(bt->it[i]);
        }
    } else if (bt->n > 1) {            /* one by one: each ends on its own */
        (*b->m_batch_failures)++;
        GP_WARN("usage_batch_failed", "records=%u code=%s detail=\"%s\"", bt->n, gp_err_name(err),
                detail);
        for (unsigned i = 0; i < bt->n; i++)
            send_batch(b, &bt->it[i], 1);
    } else if (err == GP_EEXISTS || err == GP_EINVAL) {  /* its site_seq is another's; a CHECK */
        char why[300];

        snprintf(why, sizeof(why), "refused by the database: %s", detail);
        gp_err rc = reject(b, bt->it[0]->req, why);
        if (rc != GP_EPENDING)
            gp_req_done(bt->it[0]->req, rc);
        item_free(bt->it[0]);
    } else {
        gp_req_done(bt->it[0]->req, gp_req_fail(bt->it[0]->req, GP_EUNAVAIL, "database: %s",
                                                detail));
        item_free(bt->it[0]);
    }
    free(bt);
    q.inflight--;
    flush(b);                     /* what came meanwhile */
}

static const char post_sql[] =
    "WITH r AS (\n"
    "  INSERT INTO usage_records\n"
    "  SELECT * FROM json_populate_recordset(NULL::usage_records, $1::json)\n"
    "  ON CONFLICT (id) DO NOTHING RETURNING id, period, taken_ms),\n"
    "l AS (SELECT * FROM json_to_recordset($2::json)\n"
    "  AS l(rid text, kind text, currency text, tenant text, purpose text, amount bigint)),\n"
    "a AS (INSERT INTO ledger_accounts (id, tenant, purpose, currency)\n"
    "  SELECT DISTINCT l.tenant || '.' || l.purpose || '.' || l.currency, l.tenant, l.purpose,\n"
    "    l.currency FROM l ON CONFLICT DO NOTHING),\n"
    "t AS (INSERT INTO ledger_transfers (record_id, kind, currency, period, at_ms)\n"
    "  SELECT DISTINCT l.rid, l.kind, l.currency, r.period, r.taken_ms FROM l JOIN r ON r.id = l.rid\n"
    "  RETURNING id, record_id, kind, currency),\n"
    "e AS (INSERT INTO ledger_entries (transfer_id, account, currency, amount)\n"
    "  SELECT t.id, l.tenant || '.' || l.purpose || '.' || l.currency, l.currency, l.amount\n"
    "  FROM l JOIN t ON t.record_id = l.rid AND t.kind = l.kind AND t.currency = l.currency\n"
    "  RETURNING 1)\n"
    "SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM t)";

/* A record sent again before the first copy was acked (a publisher's
 * retry past the stream's duplicate window) can meet it in one batch.
 * An open-addressed set of the batch's ids (twice BATCH_MAX slots, so
 * never full): one hash a record, where comparing with every record
 * before it cost a batch of 512 some 130,000 strcmp. */
typedef struct {
    const char *id[2 * BATCH_MAX];
} id_set;

static bool
id_set_add(id_set *set, const char *id)
{
    unsigned i = gp_fnv1a(id) % (2 * BATCH_MAX);

    while (set->id[i] != NULL) {
        if (strcmp(set->id[i], id) == 0)
            return false;                  /* there already */
        i = (i + 1) % (2 * BATCH_MAX);
    }
    set->id[i] = id;
    return true;
}

/* Locks each attempt (job.attempt.node) the batch touches, in one order,
 * for the transaction: a record and its attempt's final record posted at
 * once by two instances are serialized, so the fault credits see both. */
static const char lock_sql[] =
    "SELECT count(pg_advisory_xact_lock(h)) FROM\n"
    "  (SELECT DISTINCT hashtext(k) AS h FROM unnest($1::text[]) AS k ORDER BY 1) s";

static const char credit_sql[] =
    "SELECT bill_fault_credits($1::text[], $2::int[], $3::text[], $4, $5::bigint)";

static void
send_batch(billing *b, item **it, unsigned n)
{
    batch      *bt = calloc(1, sizeof(*bt));
    gp_buf      recs, legs, keys, jobs, atts, nodes;
    const char *p[2], *kp[1], *cp[5];
    char        now[24];
    gp_db_tx   *tx;
    gp_err      rc = GP_EOK;
    bool        first = true;
    id_set      ids = {{NULL}};

    if (bt == NULL) {
        for (unsigned i = 0; i < n; i++) {
            gp_req_done(it[i]->req, gp_req_fail(it[i]->req, GP_ENOMEM, "out of memory"));
            item_free(it[i]);
        }
        return;
    }
    bt->b = b;
    bt->n = n;
    memcpy(bt->it, it, n * sizeof(*it));
    q.inflight++;
    gp_buf_init(&recs, 0);
    gp_buf_init(&legs, 0);
    gp_buf_init(&keys, 0);
    gp_buf_init(&jobs, 0);
    gp_buf_init(&atts, 0);
    gp_buf_init(&nodes, 0);
    rc = gp_buf_puts(&recs, "[");
    rc = rc ? rc : gp_buf_puts(&legs, "[");
    rc = rc ? rc : gp_pgarr_begin(&keys);
    rc = rc ? rc : gp_pgarr_begin(&jobs);
    rc = rc ? rc : gp_pgarr_begin(&atts);
    rc = rc ? rc : gp_pgarr_begin(&nodes);
    for (unsigned i = 0; i < n && rc == GP_EOK; i++) {
        if (!id_set_add(&ids, ((const msg_usage_record *)gp_req_in(it[i]->req))->id))
            continue;                   /* the same id twice in one batch: posted once */
        rc = recs.n > 1 ? gp_buf_puts(&recs, ",") : GP_EOK;
        rc = rc ? rc : gp_buf_puts(&recs, it[i]->rec);
        if (rc == GP_EOK) {
            const msg_usage_record *r = gp_req_in(it[i]->req);
            char                    key[200];

            char att[16];

            snprintf(key, sizeof(key), "%s.%u.%s", r->job_id, r->attempt, r->node);
            snprintf(att, sizeof(att), "%u", r->attempt);
            rc = gp_pgarr_add(&keys, key);
            rc = rc ? rc : gp_pgarr_add(&jobs, r->job_id);
            rc = rc ? rc : gp_pgarr_add(&atts, att);
            rc = rc ? rc : gp_pgarr_add(&nodes, r->node);
        }
        if (rc == GP_EOK && it[i]->legs[0]) {
            rc = first ? GP_EOK : gp_buf_puts(&legs, ",");
            rc = rc ? rc : gp_buf_puts(&legs, it[i]->legs);
            first = false;
        }
    }
    rc = rc ? rc : gp_buf_puts(&recs, "]");
    rc = rc ? rc : gp_buf_puts(&legs, "]");
    rc = rc ? rc : gp_pgarr_end(&keys);
    rc = rc ? rc : gp_pgarr_end(&jobs);
    rc = rc ? rc : gp_pgarr_end(&atts);
    rc = rc ? rc : gp_pgarr_end(&nodes);
    snprintf(now, sizeof(now), "%llu", (unsigned long long)gp_wall_ms());
    p[0] = recs.p;
    p[1] = legs.p;
    kp[0] = keys.p;
    cp[0] = jobs.p;
    cp[1] = atts.p;
    cp[2] = nodes.p;
    cp[3] = b->cfg->operator_tenant;
    cp[4] = now;
    (*b->m_batches)++;
    /* one transaction: the attempts' locks, the records and their legs,
     * then the fault credits they made due */
    if (rc == GP_EOK && (tx = gp_db_tx_new(gp_app_db(b->app))) == NULL)
        rc = GP_ENOMEM;
    if (rc == GP_EOK) {
        rc = gp_db_tx_add(tx, lock_sql, 1, kp);
        rc = rc ? rc : gp_db_tx_add(tx, post_sql, 2, p);
        rc = rc ? rc : gp_db_tx_add(tx, credit_sql, 5, cp);
        rc = rc ? rc : gp_db_tx_run(tx, 0, batch_done, bt);
    }
    gp_buf_fini(&recs);
    gp_buf_fini(&legs);
    gp_buf_fini(&keys);
    gp_buf_fini(&jobs);
    gp_buf_fini(&atts);
    gp_buf_fini(&nodes);
    if (rc != GP_EOK)
        batch_done(bt, GP_EUNAVAIL, NULL, 0, "not sent");
}

/* Sends what waits, up to TX_MAX transactions in flight. */
static void
flush(billing *b)
{
    unsigned cap = b->cfg->batch < BATCH_MAX ? b->cfg->batch : BATCH_MAX, k;

    if (q.armed)
        ev_prepare_stop(gp_app_loop(b->app), &q.prep);
    q.armed = false;
    while (q.n > 0 && q.inflight < TX_MAX) {
        k = q.n < cap ? q.n : cap;
        send_batch(b, q.it, k);
        memmove(q.it, q.it + k, (q.n - k) * sizeof(q.it[0]));
        q.n -= k;
    }
}

static void
due(struct ev_loop *loop, ev_prepare *w, int revents)
{
    (void)loop, (void)revents;
    flush(w->data);
}

static void
enqueue(billing *b, item *it)
{
    if (q.n == QUEUE_MAX) {            /* cannot happen under the durable's cap: nak */
        gp_req_done(it->req, gp_req_fail(it->req, GP_EUNAVAIL, "billing queue full"));
        item_free(it);
        return;
    }
    q.it[q.n++] = it;
    if (q.n >= b->cfg->batch && q.inflight < TX_MAX) {
        flush(b);
        return;
    }
    if (!q.armed) {
        ev_prepare_init(&q.prep, due);
        q.prep.data = b;
        ev_prepare_start(gp_app_loop(b->app), &q.prep);
        q.armed = true;
    }
}

/* ---- one record -------------------------------------------------------------------- */

static char *
record_json(const msg_usage_record *r, const bill_site *s, int64_t price, const char *cur,
            const bill_rated *o)
{
    gp_buf    b;
    char      period[16];
    time_t    t = (time_t)((r->window * (uint64_t)r->window_ms) / 1000);
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(period, sizeof(period), "%Y-%m", &tm);
    gp_buf_init(&b, 0);
    if (gp_buf_printf(&b,
            "{\"id\":\"%s\",\"site\":\"%s\",\"site_seq\":%llu,\"tenant\":\"%s\",\"job_id\":\"%s\","
            "\"attempt\":%u,\"node\":\"%s\",\"rank\":%u,\"product\":%s%s%s,\"pool\":%s%s%s,"
            "\"gpus\":%u,\"window_idx\":%llu,\"window_ms\":%u,\"first_ms\":%llu,\"last_ms\":%llu,"
            "\"gpu_ms\":%llu,\"energy_mj\":%llu,\"from_gpu_ms\":%llu,\"to_gpu_ms\":%llu,"
            "\"dropped_gpu_ms\":%llu,\"final\":%s,\"fault\":%s,\"end_state\":%s%s%s,"
            "\"ckpt_gpu_ms\":%llu,\"currency\":\"%s\",\"price_micros_per_gpu_hour\":%lld,"
            "\"tier_bp\":%d,\"gpu_nanos\":%lld,\"charge_minor\":%lld,\"charge_residue_nanos\":%lld,"
            "\"power_currency\":\"%s\",\"power_micros_per_kwh\":%lld,\"pue_milli\":%d,"
            "\"power_nanos\":%lld,\"power_minor\":%lld,\"power_residue_nanos\":%lld,"
            "\"period\":\"%s\",\"taken_ms\":%llu,\"from_energy_mj\":%llu,"
            "\"to_energy_mj\":%llu,\"ckpt_energy_mj\":%llu,\"site_owner\":\"%s\"}",
            r->id, r->site, (unsigned long long)r->site_seq, r->tenant, r->job_id, r->attempt,
            r->node, r->rank, r->product[0] ? "\"" : "", r->product[0] ? r->product : "null",
            r->product[0] ? "\"" : "", r->pool[0] ? "\"" : "", r->pool[0] ? r->pool : "null",
            r->pool[0] ? "\"" : "", r->gpus, (unsigned long long)r->window, r->window_ms,
            (unsigned long long)r->first_ms, (unsigned long long)r->last_ms,
            (unsigned long long)r->gpu_ms, (unsigned long long)r->energy_mj,
            (unsigned long long)r->from_gpu_ms, (unsigned long long)r->to_gpu_ms,
            (unsigned long long)r->dropped_gpu_ms, r->final ? "true" : "false",
            r->fault ? "true" : "false", r->final ? "\"" : "",
            r->final ? msg_usage_record_end_names[r->end] : "null", r->final ? "\"" : "",
            (unsigned long long)r->ckpt_gpu_ms, cur, (long long)price, o->tier_bp,
            (long long)o->gpu_nanos, (long long)o->charge_minor, (long long)o->charge_residue,
            s->currency, (long long)o->power_price_micros, s->pue_milli, (long long)o->power_nanos,
            (long long)o->power_minor, (long long)o->power_residue, period,
            (unsigned long long)gp_wall_ms(), (unsigned long long)r->from_energy_mj,
            (unsigned long long)r->to_energy_mj, (unsigned long long)r->ckpt_energy_mj,
            s->owner) != GP_EOK) {
        gp_buf_fini(&b);
        return NULL;
    }
    return b.p;                       /* owned by the caller */
}

static char *
legs_json(const msg_usage_record *r, const bill_rated *o)
{
    gp_buf b;

    gp_buf_init(&b, 0);
    if (gp_buf_puts(&b, "") != GP_EOK) {
        gp_buf_fini(&b);
        return NULL;
    }
    for (unsigned i = 0; i < o->nlegs; i++)
        if (gp_buf_printf(&b, "%s{\"rid\":\"%s\",\"kind\":\"%s\",\"currency\":\"%s\","
                          "\"tenant\":\"%s\",\"purpose\":\"%s\",\"amount\":%lld}",
                          i ? "," : "", r->id, o->leg[i].kind, o->leg[i].currency,
                          o->leg[i].tenant, o->leg[i].purpose, (long long)o->leg[i].amount) != GP_EOK) {
            gp_buf_fini(&b);
            return NULL;
        }
    return b.p;
}

static void
with_site(void *arg, gp_err err, const bill_site *s, const char *detail)
{
    gp_req                 *req = arg;
    billing                *b = gp_req_state(req);
    const msg_usage_record *r = gp_req_in(req);
    char                    why[256], cur[4] = "";
    int64_t                 price = 0;
    bill_rated              o;
    item                   *it;
    gp_err                  rc;

    if (err == GP_ENOTFOUND) {
        snprintf(why, sizeof(why), "unknown site '%s'", r->site);
        goto refuse;
    }
    if (err != GP_EOK) {                  /* nak: the registry comes back */
        gp_req_done(req, gp_req_fail(req, GP_EUNAVAIL, "site %s: %s", r->site, detail));
        return;
    }
    if (r->product[0] && billing_price_at(b, r->product, r->window * (uint64_t)r->window_ms,
                                          &price, cur)) {
        if (GP_HAS(r, MSG_USAGE_RECORD__CURRENCY) && r->currency[0] && strcmp(r->currency, cur)) {
            snprintf(why, sizeof(why), "currency %s: the price book sells %s in %s", r->currency,
                     r->product, cur);
            goto refuse;
        }
    } else if (GP_HAS(r, MSG_USAGE_RECORD__PRICE_MICROS_PER_GPU_HOUR) && r->currency[0]) {
        price = (int64_t)r->price_micros_per_gpu_hour;  /* the price it was placed at */
        memcpy(cur, r->currency, 4);
    } else {
        snprintf(why, sizeof(why), "no price: product '%s' is not in the price book and the "
                 "record carries none", r->product);
        goto refuse;
    }
    if (bill_rate(&b->rc, r, s, price, cur, &o, why, sizeof(why)) != GP_EOK)
        goto refuse;
    if ((it = calloc(1, sizeof(*it))) == NULL ||
        (it->rec = record_json(r, s, price, cur, &o)) == NULL ||
        (it->legs = legs_json(r, &o)) == NULL) {
        if (it != NULL)
            item_free(it);
        gp_req_done(req, gp_req_fail(req, GP_ENOMEM, "out of memory"));
        return;
    }
    it->req = req;
    enqueue(b, it);
    return;
refuse:
    rc = reject(b, req, why);
    if (rc != GP_EPENDING)
        gp_req_done(req, rc);
}

static bool
record_id_ok(const char *id)
{
    size_t n = strlen(id);

    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(id[i] == '.' || id[i] == '-' || id[i] == '_' || (id[i] >= '0' && id[i] <= '9') ||
              (id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z')))
            return false;
    return true;
}

static gp_err
on_record(gp_req *req, const void *in, void *out)
{
    const msg_usage_record *r = in;
    billing                *b = gp_req_state(req);
    char                    why[256];

    (void)out;
    bill_check(r, why, sizeof(why));
    if (why[0] == '\0' && !record_id_ok(r->id))
        snprintf(why, sizeof(why), "id: only letters, digits, '.', '-' and '_'");
    if (why[0] == '\0' && strcmp(gp_req_param(req, "site"), r->site) != 0)
        snprintf(why, sizeof(why), "the subject's site is not the record's");
    if (why[0] != '\0')
        return reject(b, req, why);
    billing_site_get(b, r->site, with_site, req);
    return GP_EPENDING;
}

/* Redelivered after 1 s, doubling, up to 12 deliveries (an hour of a
 * database outage) before the dead-letter stream keeps it. */
static const gp_durable usage_durable = {.stream = "USAGE", .name = "billing", .max_deliver = 12,
                                         .ack_wait_ms = 60000, .backoff_ms = 1000,
                                         .max_inflight = 1024};

const gp_route billing_routes[] = {
    {GP_OP_USAGE_RECORD, on_record, 0, 30000, NULL, &usage_durable},
    {NULL},
};

void
billing_post_start(billing *b)
{
    q.b = b;
}
