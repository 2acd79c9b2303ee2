/* nodes.c -- node registration and heartbeats on
 * gp.node.<site>.<node>.*, and node get/list/delete on gp.admin.node.*.
 *
 * Registration writes the inventory (node and GPUs) to PostgreSQL in one
 * transaction; heartbeats only touch Redis (live.c).  The subject names
 * the node, and the body must agree: with NATS permissions limiting an
 * agent to its own subjects, that is what stops one node speaking for
 * another. */
#include <ev.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/kvfan.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "gp/xid.h"
#include "registry.h"
#include "scripts.h"

void
registry_nodes_free(registry *r)
{
    free(r->changes);
    free(r->inflight);
    free(r->chains);
    free(r->sweep_more);
    free(r->forgets);
    registry_live_free_queue(r);
    registry_regbatch_free(r);
    r->forgets = NULL;
    r->changes = r->inflight = NULL;
    r->chains = NULL;
    r->sweep_more = NULL;
}

/* The body must name the node of the subject gp.node.<site>.<node>.<verb>. */
static gp_err
check_subject(gp_req *req, const char *site, const char *node)
{
    if (strcmp(gp_req_param(req, "site"), site) != 0 || strcmp(gp_req_param(req, "node"), node) != 0)
        return gp_req_fail(req, GP_EDENIED, "subject is for %s/%s but the body says %s/%s",
                           gp_req_param(req, "site"), gp_req_param(req, "node"), site, node);
    if (!gp_id_ok(site) || !gp_id_ok(node))
        return gp_req_fail(req, GP_EINVAL, "site and node ids must be 1-63 letters, digits, - or _");
    return GP_EOK;
}

/* Text array literal {"a","b"} with quotes and backslashes escaped. */
static gp_err
pg_array(gp_buf *b, const void *base, uint32_t n, size_t stride, size_t off, bool quote, int kind)
{
    gp_err rc = gp_buf_puts(b, "{");

    for (uint32_t i = 0; i < n && rc == GP_EOK; i++) {
        const char *p = (const char *)base + (size_t)i * stride + off;

        rc = i ? gp_buf_puts(b, ",") : GP_EOK;
        if (kind == 1)
            rc = rc ? rc : gp_buf_printf(b, "%d", *(const int32_t *)p);
        else if (kind == 2)
            rc = rc ? rc : gp_buf_printf(b, "%u", *(const uint32_t *)p);
        else if (!quote)
            rc = rc ? rc : gp_buf_puts(b, p);
        else {
            rc = rc ? rc : gp_buf_puts(b, "\"");
            for (; *p != '\0' && rc == GP_EOK; p++)
                rc = (*p == '"' || *p == '\\') ? gp_buf_printf(b, "\\%c", *p)
                                               : gp_buf_append(b, p, 1);
            rc = rc ? rc : gp_buf_puts(b, "\"");
        }
    }
    return rc ? rc : gp_buf_puts(b, "}");
}

/* ---- register ------------------------------------------------------------------- */

/* Returns the site the node had before ('' for a new node): a node that
 * moved leaves keys in its old site's shard, removed at once.  state_since
 * is $8 (registry_now_ms), the clock of the state changes written later
 * (states.c), which apply only when newer than it. */
static const char upsert_node[] =
    "WITH old AS (SELECT site, boot_id FROM nodes WHERE id = $1)"
    " INSERT INTO nodes (id, site, hostname, agent_version, boot_id, cpu_cores, mem_mb, state,"
    " state_since, registered_at) SELECT $1, $2, $3, $4, $5, $6::int, $7::int, 'healthy',"
    " timestamptz 'epoch' + $8::bigint * interval '1 millisecond', now()"
    " WHERE NOT EXISTS (SELECT 1 FROM retired_nodes WHERE id = $1)"
    REGISTRY_NODE_UPSERT_SET
    " RETURNING coalesce((SELECT site FROM old), ''), (SELECT boot_id FROM old), rev,"
    " (SELECT region FROM sites WHERE id = $2)";

static const char replace_gpus[] =
    "INSERT INTO gpus (node, idx, uuid, model, vram_mb, serial, interconnect)"
    " SELECT $1, * FROM unnest($2::int[], $3::text[], $4::text[], $5::int[], $6::text[], $7::text[])"
    " WHERE NOT EXISTS (SELECT 1 FROM retired_nodes WHERE id = $1)";

/* Registration and an operator's delete of one node serialize on this
 * transaction-scoped lock, so a delete never lands between registration's
 * retired_nodes check and its upsert. */
static const char node_lock[] = "SELECT pg_advisory_xact_lock(hashtext($1))";

static const char retired_at[] =
    "SELECT to_char(retired_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"
    " FROM retired_nodes WHERE id = $1";

static void
fill_lease(gp_req *req, const gp_arr *attempts, msg_node_registered *out)
{
    registry *r = gp_req_state(req);

    out->heartbeat_ms = r->cfg->heartbeat_ms;
    out->lease_ms = r->cfg->lease_ms;
    /* A registration keeps what the agent reports until its first lease
     * renewal, which the scheduler answers from its reservations (the
     * grants) with the attempts to kill. */
    if (attempts->n > 0 && (out->keep.v = calloc(attempts->n, sizeof(msg_attempt_ref))) != NULL) {
        memcpy(out->keep.v, attempts->v, attempts->n * sizeof(msg_attempt_ref));
        out->keep.n = attempts->n;
    }
}

/* The registration ends when Redis took its write (the node's 'reg'
 * mark): replied before, the agent's first beat could reach another
 * instance first and be dropped as a ghost; failed, the node would stay
 * out of the live view.  A write lost to the connection (TIMEOUT, or
 * UNAVAIL while the client reconnects: a heartbeat flood on a starved
 * machine can push Redis past the command deadline) is tried again after
 * LIVE_RETRY_MS, up to LIVE_TRIES writes, well within the request's
 * deadline; only then is it UNAVAIL, and the agent registers again. */
enum { LIVE_TRIES = 10, LIVE_RETRY_MS = 300 };

typedef struct live_try {
    ev_timer    t;
    gp_req     *req;
    const char *how;                          /* a static text */
    int         tries;
} live_try;

static void live_registered(void *arg, gp_err err);

static void
live_write_again(struct ev_loop *loop, ev_timer *w, int revents)
{
    live_try                *lt = w->data;
    const msg_node_register *q = gp_req_in(lt->req);

    (void)loop;
    (void)revents;
    registry_live_register(gp_req_state(lt->req), q->site, q->node, lt->how, live_registered, lt);
}

static void
live_registered(void *arg, gp_err err)
{
    live_try                *lt = arg;
    gp_req                  *req = lt->req;
    const msg_node_register *q = gp_req_in(req);
    registry                *r = gp_req_state(req);

    if ((err == GP_ETIMEOUT || err == GP_EUNAVAIL) && ++lt->tries < LIVE_TRIES) {
        GP_WARN("register_live_retry", "site=%s node=%s code=%s try=%d", q->site, q->node,
                gp_err_name(err), lt->tries + 1);
        ev_timer_init(&lt->t, live_write_again, LIVE_RETRY_MS / 1000.0, 0.);
        lt->t.data = lt;
        ev_timer_start(gp_app_loop(r->app), &lt->t);
        return;
    }
    free(lt);
    if (err != GP_EOK) {
        gp_req_done(req, gp_req_fail(req, GP_EUNAVAIL, "the live view (Redis) did not take the "
                                     "registration (%s): register again", gp_err_name(err)));
        return;
    }
    fill_lease(req, &q->attempts, gp_req_out(req));
    gp_req_done(req, GP_EOK);
}

static void
live_register(gp_req *req, const char *how)
{
    const msg_node_register *q = gp_req_in(req);
    live_try                *lt = calloc(1, sizeof(*lt));

    if (lt == NULL) {
        gp_req_done(req, gp_req_fail(req, GP_ENOMEM, "out of memory"));
        return;
    }
    lt->req = req;
    lt->how = how;
    registry_live_register(gp_req_state(req), q->site, q->node, how, live_registered, lt);
}

/* The registration's NodeChange: the node as it registered, with the
 * revision and region of the upsert's row (columns 2 and 3 of row i). */
static void
node_changed(gp_req *req, const PGresult *res, int i, bool created)
{
    const msg_node_register *q = gp_req_in(req);
    registry                *r = gp_req_state(req);
    msg_node                 n = {0};

    snprintf(n.id, sizeof(n.id), "%s", q->node);
    snprintf(n.site, sizeof(n.site), "%s", q->site);
    snprintf(n.region, sizeof(n.region), "%s", PQgetvalue(res, i, 3));
    snprintf(n.hostname, sizeof(n.hostname), "%s", q->hostname);
    snprintf(n.agent_version, sizeof(n.agent_version), "%s", q->agent_version);
    n.cpu_cores = q->cpu_cores;
    n.mem_mb = q->mem_mb;
    n.state = MSG_NODE_STATE_HEALTHY;
    n.registered_ms = registry_now_ms(r);
    n.gpus = q->gpus;                       /* borrowed: only encoded */
    n.rev = strtoull(PQgetvalue(res, i, 2), NULL, 10);
    registry_node_changed(r, created ? MSG_NODE_CHANGE_CHANGE_CREATED
                                     : MSG_NODE_CHANGE_CHANGE_UPDATED,
                          q->site, q->node, n.rev, &n);
}

/* The inventory took the registration: row i of res is the upsert's
 * (previous site, previous boot id, revision, region), or -1 for none. */
static void
registered_row(gp_req *req, const PGresult *res, int i)
{
    const msg_node_register *q = gp_req_in(req);
    const char              *was = i >= 0 ? PQgetvalue(res, i, 0) : "";
    const char              *how = "registered";

    /* A node that registers again rebooted when its boot id changed
     * (the kernel's, /proc/sys/kernel/random/boot_id): what tells a
     * site's power cut from its uplink cut when it comes back. */
    if (i >= 0 && !PQgetisnull(res, i, 1) && q->boot_id[0] != '\0')
        how = strcmp(PQgetvalue(res, i, 1), q->boot_id) != 0
                  ? "registered: rebooted (new boot id)"
                  : "registered: same boot (agent restarted)";
    /* sent before the registration's script, on the same connection
     * (and, for the same shard, the same slot): in order */
    if (was[0] != '\0' && strcmp(was, q->site) != 0)
        registry_live_forget(gp_req_state(req), was, q->node);
    /* before the registration's NodeState, on the same connection: a
     * follower knows the node when its state arrives */
    if (i >= 0)
        node_changed(req, res, i, was[0] == '\0');
    live_register(req, how);                  /* live_registered() ends the request */
}

static void
registered(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req                  *req = arg;
    const msg_node_register *q = gp_req_in(req);

    if (err == GP_ENOTFOUND) {
        err = gp_req_fail(req, GP_ENOTFOUND, "site '%s' is not registered", q->site);
    } else if (err != GP_EOK) {
        err = gp_req_fail(req, err, "%s", detail);
    } else if (res == NULL || nres < 1) {
        err = gp_req_fail(req, GP_EINTERNAL, "the registration's write returned no row");
    } else {
        registered_row(req, res[0], PQntuples(res[0]) == 1 ? 0 : -1);
        return;
    }
    gp_req_done(req, err);
}

static gp_err
gpu_params(const msg_node_register *q, gp_buf arr[6])
{
    const msg_gpu *g = q->gpus.v;
    size_t         sz = sizeof(msg_gpu);
    gp_err         rc;

    rc = pg_array(&arr[0], g, q->gpus.n, sz, offsetof(msg_gpu, index), false, 1);
    rc = rc ? rc : pg_array(&arr[1], g, q->gpus.n, sz, offsetof(msg_gpu, uuid), true, 0);
    rc = rc ? rc : pg_array(&arr[2], g, q->gpus.n, sz, offsetof(msg_gpu, model), true, 0);
    rc = rc ? rc : pg_array(&arr[3], g, q->gpus.n, sz, offsetof(msg_gpu, vram_mb), false, 2);
    rc = rc ? rc : pg_array(&arr[4], g, q->gpus.n, sz, offsetof(msg_gpu, serial), true, 0);
    rc = rc ? rc : gp_buf_puts(&arr[5], "{");
    for (uint32_t i = 0; i < q->gpus.n && rc == GP_EOK; i++) {
        int32_t k = g[i].interconnect;
        const gp_field *f = &msg_gpu_desc.fields[MSG_GPU__INTERCONNECT];

        rc = gp_buf_printf(&arr[5], "%s%s", i ? "," : "",
                           k >= 0 && (uint32_t)k < f->nenums ? f->enums[k] : f->enums[0]);
    }
    return rc ? rc : gp_buf_puts(&arr[5], "}");
}

/* The registration's transaction: [0] lock, [1] retired_at, [2] upsert,
 * [3] gpus deleted, [4] gpus written.  A retired node is DENIED (the
 * transaction changed nothing); otherwise registered() gets the results
 * from the upsert on. */
static void
register_written(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req                  *req = arg;
    const msg_node_register *q = gp_req_in(req);

    if (err == GP_EOK && nres == 5 && PQntuples(res[1]) > 0) {
        gp_req_done(req, gp_req_fail(req, GP_EDENIED, "node '%s' was deleted by an operator at "
                                     "%s; %s lets it register again", q->node,
                                     PQgetvalue(res[1], 0, 0), GP_OP_ADMIN_NODE_READMIT->address));
        return;
    }
    if (err == GP_EOK && (nres != 5 || PQntuples(res[2]) != 1)) {
        /* cannot happen under the lock; never report a write that did not happen */
        gp_req_done(req, gp_req_fail(req, GP_EDENIED, "node '%s' was deleted by an operator; "
                                     "%s lets it register again", q->node,
                                     GP_OP_ADMIN_NODE_READMIT->address));
        return;
    }
    registered(arg, err, err == GP_EOK ? res + 2 : NULL, err == GP_EOK ? nres - 2 : 0, detail);
}

/* Writes the inventory unless the node was deleted by an operator: one
 * transaction, serialized with the delete (node_lock). */
static gp_err
register_one(gp_req *req)
{
    const msg_node_register *q = gp_req_in(req);
    char                     cpu[16], mem[16], now[24];
    const char              *p1[8], *p2[7];
    gp_buf                   arr[6];
    gp_db_tx                *tx;
    gp_err                   rc;

    for (int i = 0; i < 6; i++)
        gp_buf_init(&arr[i], 0);
    snprintf(cpu, sizeof(cpu), "%u", q->cpu_cores);
    snprintf(mem, sizeof(mem), "%u", q->mem_mb);
    p1[0] = q->node; p1[1] = q->site; p1[2] = q->hostname; p1[3] = q->agent_version;
    p1[4] = q->boot_id; p1[5] = cpu; p1[6] = mem;
    snprintf(now, sizeof(now), "%llu",
             (unsigned long long)registry_now_ms(gp_req_state(req)));
    p1[7] = now;
    rc = gpu_params(q, arr);
    p2[0] = q->node;
    for (int i = 0; i < 6; i++)
        p2[i + 1] = arr[i].p ? arr[i].p : "{}";
    tx = rc == GP_EOK ? gp_db_tx_new(gp_app_db(gp_req_app(req))) : NULL;
    if (tx != NULL) {
        gp_db_tx_add(tx, node_lock, 1, p2);
        gp_db_tx_add(tx, retired_at, 1, p2);
        gp_db_tx_add(tx, upsert_node, 8, p1);
        gp_db_tx_add(tx, "DELETE FROM gpus WHERE node = $1", 1, p2);
        gp_db_tx_add(tx, replace_gpus, 7, p2);
        rc = gp_db_tx_run(tx, 0, register_written, req);
    } else if (rc == GP_EOK) {
        rc = GP_ENOMEM;
    }
    for (int i = 0; i < 6; i++)
        gp_buf_fini(&arr[i]);
    return rc;
}

static const regbatch_ops reg_ops = {register_one, registered_row};

/* A node an operator deleted stays deleted: its registration is refused
 * (DENIED) until it is re-admitted.  The check and the write are one
 * transaction that the delete serializes with (register_one). */
static gp_err
on_register(gp_req *req, const void *in, void *out)
{
    const msg_node_register *q = in;
    gp_err                   rc = check_subject(req, q->site, q->node);

    (void)out;
    if (rc != GP_EOK)
        return rc;
    registry_regbatch_add(gp_req_state(req), req, &reg_ops);
    return GP_EPENDING;
}

/* ---- heartbeat and lease ----------------------------------------------------------- */

/* The quarantine's facts of one beat: bad-GPU XIDs, uncorrectable ECC
 * errors, and a GPU lost or fallen off the bus (reason enough alone). */
static void
health_of(const msg_heartbeat *hb, beat_health *h)
{
    const msg_gpu_telemetry *g = hb->gpus.v;

    memset(h, 0, sizeof(*h));
    for (uint32_t i = 0; i < hb->gpus.n; i++) {
        const int32_t *x = g[i].xids.v;

        h->dbe += g[i].ecc_dbe;
        if (g[i].state == MSG_GPU_TELEMETRY_STATE_LOST && h->fatal[0] == '\0')
            snprintf(h->fatal, sizeof(h->fatal), "GPU %d lost (stopped answering)", g[i].index);
        for (uint32_t k = 0; k < g[i].xids.n; k++) {
            if (!gp_xid_bad_gpu(x[k]))
                continue;
            h->bad_xids++;
            snprintf(h->last_xid, sizeof(h->last_xid), "XID %d %s on GPU %d", x[k],
                     gp_xid_lookup(x[k])->name, g[i].index);
            if (x[k] == 79 && h->fatal[0] == '\0')
                snprintf(h->fatal, sizeof(h->fatal), "GPU %d fell off the bus (XID 79)",
                         g[i].index);
        }
    }
}

/* A heartbeat, alone (hb) or inside a lease renewal (lease). */
static gp_err
take_beat(gp_req *req, const msg_heartbeat *hb)
{
    gp_buf b;
    gp_err rc = check_subject(req, hb->site, hb->node);

    if (rc != GP_EOK)
        return rc;
    /* The live view keeps the heartbeat as decoded, re-encoded: bounded by
     * the schema, whatever unknown keys the body carried. */
    gp_buf_init(&b, 0);
    rc = gp_msg_encode(&msg_heartbeat_desc, hb, &b);
    if (rc == GP_EOK) {
        beat_health h;

        health_of(hb, &h);
        registry_live_beat(gp_req_state(req), hb->site, hb->node, b.p, b.n, hb->uplink_rtt_ms, &h);
    }
    gp_buf_fini(&b);
    return rc;
}

static gp_err
on_heartbeat(gp_req *req, const void *in, void *out)
{
    (void)out;
    return take_beat(req, in);
}

/* ---- node get / list / delete ----------------------------------------------------- */

#define NODE_FILTERS                                                                          \
    "FROM nodes n JOIN sites s ON s.id = n.site"                                              \
    " WHERE ($1 = '' OR n.site = $1) AND ($2 = '' OR s.region = $2) AND ($3 = '' OR s.tenant = $3)" \
    " AND ($4 = '' OR n.state = $4) AND ($5 = '' OR n.id = $5)"                                \
    " AND ($6 = '' OR EXISTS (SELECT 1 FROM gpus g WHERE g.node = n.id AND g.model = $6))"

/* A page is the nodes after $7 in id order, read from the primary key's
 * index and stopped at the limit; the total matching is counted apart.
 * (count(*) OVER () in a subquery built every matching row before the
 * page was cut: each page of a 100,000-node inventory cost a pass over
 * all of it, so a full load was quadratic.) */
#define NODE_COLS                                                                             \
    "n.id, n.site, s.region, n.hostname, n.agent_version, n.cpu_cores, n.mem_mb, n.state,"    \
    " (extract(epoch FROM n.registered_at) * 1000)::bigint AS registered_ms, n.rev"
#define NODE_PAGE_ROWS                                                                        \
    "SELECT " NODE_COLS " " NODE_FILTERS " AND n.id > $7 ORDER BY n.id LIMIT $8::int"

static const char node_page_sql[] =
    "SELECT " NODE_COLS ", (SELECT count(*) " NODE_FILTERS ") AS total " NODE_FILTERS
    " AND n.id > $7 ORDER BY n.id LIMIT $8::int";
static const char node_get_sql[] = NODE_PAGE_ROWS;    /* no total: one node */
static const char node_gpus_sql[] =
    "WITH page AS (" NODE_PAGE_ROWS ") SELECT g.node, g.idx, g.uuid, g.model, g.vram_mb, g.serial,"
    " g.interconnect FROM gpus g JOIN page p ON p.id = g.node ORDER BY g.node, g.idx";

typedef struct nodeq {
    gp_req   *req;
    bool      get;            /* one node with its telemetry */
    msg_node *items;
    uint32_t  n;
    int       pending_limit;  /* page size asked of PostgreSQL */
    gp_err    err;
} nodeq;

static gp_err
set_row(msg_node *n, const PGresult *res, int row)
{
    static const char *const cols[] = {"id", "site", "region", "hostname", "agent_version",
                                       "cpu_cores", "mem_mb", "state", "registered_ms", "rev"};
    gp_err rc = GP_EOK;

    for (size_t c = 0; c < GP_NELEM(cols) && rc == GP_EOK; c++)
        rc = gp_msg_set_text(&msg_node_desc, n, cols[c], PQgetvalue(res, row, (int)c), NULL, 0);
    return rc;
}

/* GPU rows are ordered by node like the page, so one merge pass fills them. */
static gp_err
set_gpus(nodeq *q, const PGresult *res)
{
    int rows = PQntuples(res), r = 0;

    for (uint32_t i = 0; i < q->n; i++) {
        msg_node *n = &q->items[i];
        int       first = r;

        while (r < rows && strcmp(PQgetvalue(res, r, 0), n->id) == 0)
            r++;
        if (r == first)
            continue;
        n->gpus.v = calloc((size_t)(r - first), sizeof(msg_gpu));
        if (n->gpus.v == NULL)
            return GP_ENOMEM;
        for (int k = first; k < r && n->gpus.n < MSG_NODE_GPUS_MAXITEMS; k++) {
            static const char *const f[] = {"index", "uuid", "model", "vram_mb", "serial", "interconnect"};
            msg_gpu *g = (msg_gpu *)n->gpus.v + n->gpus.n++;

            for (size_t c = 0; c < GP_NELEM(f); c++)
                gp_msg_set_text(&msg_gpu_desc, g, f[c], PQgetvalue(res, k, (int)c + 1), NULL, 0);
        }
    }
    return GP_EOK;
}

static void
nodeq_finish(nodeq *q)
{
    gp_req *req = q->req;

    if (q->get) {
        if (q->err == GP_EOK)
            *(msg_node *)gp_req_out(req) = q->items[0];      /* moves the owned arrays */
        else if (q->items != NULL)
            gp_msg_clear(&msg_node_desc, &q->items[0]);
        free(q->items);
    } else {
        msg_node_list *out = gp_req_out(req);

        out->items.v = q->items;           /* freed with the reply */
        out->items.n = q->n;
    }
    gp_req_done(req, q->err);
    free(q);
}

/* HMGET gp:node:<id> seen hb: last_seen for every node, telemetry for
 * get.  One slot per item (gp/kvfan.h): a read that fails or is not sent
 * leaves only its own node without live data. */
static void
live_read(void *arg, size_t i, const redisReply *rep, gp_err err)
{
    nodeq    *q = arg;
    msg_node *n = &q->items[i];

    if (err == GP_EOK && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2) {
        const redisReply *seen = rep->element[0], *hb = rep->element[1];

        if (seen->type == REDIS_REPLY_STRING)
            n->last_seen_ms = strtoull(seen->str, NULL, 10);
        if (q->get && hb->type == REDIS_REPLY_STRING &&
            gp_msg_decode(&msg_heartbeat_desc, hb->str, hb->len, &n->telemetry, NULL, 0) == GP_EOK)
            GP_SET_HAS(n, MSG_NODE__TELEMETRY);
    }
    /* Without Redis the inventory still answers; last_seen stays 0. */
}

static void
live_done(void *arg, const gp_kvfan *f)
{
    (void)f;
    nodeq_finish(arg);
}

static void
pg_read(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    nodeq *q = arg;
    gp_kv    *kv = gp_app_kv(gp_req_app(q->req));
    gp_kvfan *fan;
    int       rows = err == GP_EOK ? PQntuples(res[0]) : 0;

    (void)nres;
    if (err != GP_EOK)
        q->err = gp_req_fail(q->req, err, "%s", detail);
    else if (rows == 0 && q->get)
        q->err = gp_req_fail(q->req, GP_ENOTFOUND, "no node '%s'",
                             ((const msg_id_request *)gp_req_in(q->req))->id);
    else if (rows > 0 && (q->items = calloc((size_t)rows, sizeof(msg_node))) == NULL)
        q->err = GP_ENOMEM;
    for (int i = 0; i < rows && q->err == GP_EOK; i++) {
        q->err = set_row(&q->items[q->n++], res[0], i);
    }
    if (q->err == GP_EOK && rows > 0) {
        msg_node_list *out = gp_req_out(q->req);

        if (!q->get) {
            out->total = (uint32_t)strtoul(PQgetvalue(res[0], 0, 10), NULL, 10);
            if ((int)q->n == q->pending_limit)
                snprintf(out->next, sizeof(out->next), "%s", q->items[q->n - 1].id);
        }
        q->err = set_gpus(q, res[1]);
    }
    fan = q->err == GP_EOK ? gp_kvfan_new(kv, q->n, live_read, live_done, q) : NULL;
    if (fan == NULL) {
        nodeq_finish(q);                   /* no live data: the inventory still answers */
        return;
    }
    for (uint32_t i = 0; i < q->n; i++) {
        char key[REGISTRY_KEY_LEN];

        /* the inventory row names the site, so the key's shard */
        registry_node_key(key, registry_shard(q->items[i].site), q->items[i].id);
        gp_kvfan_cmdf(fan, i, "HMGET %s seen %s", key, q->get ? "hb" : "seen");
    }
    gp_kvfan_end(fan);
}

static gp_err
node_query(gp_req *req, const msg_list_request *f, const char *id, bool get)
{
    char        limit[16];
    const char *p[8] = {f->site, f->region, f->tenant, f->state, id, f->model, f->after, limit};
    nodeq      *q = calloc(1, sizeof(*q));
    gp_db_tx   *tx;
    int         max = (int)msg_node_list_desc.fields[MSG_NODE_LIST__ITEMS].limit;
    gp_err      rc;

    if (q == NULL)
        return GP_ENOMEM;
    q->req = req;
    q->get = get;
    q->pending_limit = get ? 1 : f->limit == 0 || (int)f->limit > max ? max : (int)f->limit;
    snprintf(limit, sizeof(limit), "%d", q->pending_limit);
    tx = gp_db_tx_new(gp_app_db(gp_req_app(req)));
    if (tx == NULL) {
        free(q);
        return GP_ENOMEM;
    }
    gp_db_tx_add(tx, get ? node_get_sql : node_page_sql, 8, p);
    gp_db_tx_add(tx, node_gpus_sql, 8, p);
    rc = gp_db_tx_run(tx, 0, pg_read, q);
    if (rc != GP_EOK) {
        free(q);
        return gp_req_fail(req, rc, "inventory database unavailable");
    }
    return GP_EPENDING;
}

static gp_err
on_node_list(gp_req *req, const void *in, void *out)
{
    const msg_list_request *f = in;

    (void)out;
    if (f->state[0] != '\0' && registry_state_from_name(f->state) == MSG_NODE_STATE_STATE_UNKNOWN &&
        strcmp(f->state, "unknown") != 0)
        return gp_req_fail(req, GP_EINVAL, "state '%s' is not one of unknown, healthy, stale, "
                           "draining, quarantined", f->state);
    return node_query(req, f, "", false);
}

static gp_err
on_node_get(gp_req *req, const void *in, void *out)
{
    static const msg_list_request none;
    const msg_id_request         *q = in;

    (void)out;
    if (!gp_id_ok(q->id))
        return gp_req_fail(req, GP_EINVAL, "'%s' is not a valid node id", q->id);
    return node_query(req, &none, q->id, true);
}

static void
node_deleted(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req               *req = arg;
    const msg_id_request *q = gp_req_in(req);

    (void)nres;
    if (err != GP_EOK) {
        err = gp_req_fail(req, err, "%s", detail);
    // cppcheck-suppress nullPointer ; res is NULL only with an error, the branch above
    } else if (PQntuples(res[0]) == 0) {
        err = gp_req_fail(req, GP_ENOTFOUND, "no node '%s'", q->id);
    } else {
        /* the hash goes with its 'reg' mark: the node's beats are refused now */
        registry_live_forget(gp_req_state(req), PQgetvalue(res[0], 0, 1), q->id);
        registry_node_changed(gp_req_state(req), MSG_NODE_CHANGE_CHANGE_DELETED,
                              PQgetvalue(res[0], 0, 1), q->id,
                              strtoull(PQgetvalue(res[0], 0, 2), NULL, 10), NULL);
        snprintf(((msg_deleted *)gp_req_out(req))->id, GP_MAX_ID + 1, "%s", q->id);
    }
    gp_req_done(req, err);
}

/* The delete's transaction: [0] lock, [1] the delete. */
static void
node_delete_done(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    if (err == GP_EOK && nres != 2)
        err = GP_EINTERNAL;
    node_deleted(arg, err, err == GP_EOK ? res + 1 : NULL, err == GP_EOK ? 1 : 0,
                 err == GP_EOK || detail != NULL ? detail : "unexpected results");
}

static gp_err
on_node_delete(gp_req *req, const void *in, void *out)
{
    const msg_id_request *q = in;
    const char           *p[1] = {q->id};
    gp_db_tx             *tx;
    gp_err                rc;

    (void)out;
    if (!gp_id_ok(q->id))
        return gp_req_fail(req, GP_EINVAL, "'%s' is not a valid node id", q->id);
    /* remembered in retired_nodes: its registration is refused from now
     * on; under the registration's lock (node_lock), so a registration in
     * progress either ends before (and is deleted) or sees it (DENIED) */
    if ((tx = gp_db_tx_new(gp_app_db(gp_req_app(req)))) == NULL)
        return gp_req_fail(req, GP_ENOMEM, "out of memory");
    gp_db_tx_add(tx, node_lock, 1, p);
    gp_db_tx_add(tx, "WITH d AS (DELETE FROM nodes WHERE id = $1 RETURNING id, site)"
                     " INSERT INTO retired_nodes (id, site) SELECT id, site FROM d"
                     " ON CONFLICT (id) DO UPDATE SET site = EXCLUDED.site, retired_at = now()"
                     " RETURNING id, site, nextval('inventory_rev')",
                 1, p);
    rc = gp_db_tx_run(tx, 0, node_delete_done, req);
    return rc == GP_EOK ? GP_EPENDING : gp_req_fail(req, rc, "inventory database unavailable");
}

/* Undoes an operator's delete: the node may register again. */
static void
node_readmitted(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req               *req = arg;
    const msg_id_request *q = gp_req_in(req);

    (void)nres;
    if (err != GP_EOK)
        err = gp_req_fail(req, err, "%s", detail);
    else if (PQntuples(res[0]) == 0)
        err = gp_req_fail(req, GP_ENOTFOUND, "node '%s' is not deleted", q->id);
    else
        snprintf(((msg_id_request *)gp_req_out(req))->id, GP_MAX_ID + 1, "%s", q->id);
    gp_req_done(req, err);
}

static gp_err
on_node_readmit(gp_req *req, const void *in, void *out)
{
    const msg_id_request *q = in;
    const char           *p[1] = {q->id};
    gp_err                rc;

    (void)out;
    if (!gp_id_ok(q->id))
        return gp_req_fail(req, GP_EINVAL, "'%s' is not a valid node id", q->id);
    rc = gp_db_query(gp_app_db(gp_req_app(req)), "DELETE FROM retired_nodes WHERE id = $1 RETURNING id",
                     1, p, 0, node_readmitted, req);
    return rc == GP_EOK ? GP_EPENDING : gp_req_fail(req, rc, "inventory database unavailable");
}

/* ---- an operator's mode: cordon, drain, uncordon, release ------------------------------
 *
 * PostgreSQL's nodes.adm is the authority (the reseed restores it into a
 * new Redis); the change is written there first, under the row's lock,
 * then mirrored into the live view, which publishes the transition.  Each
 * verb says which modes it may replace, so it is idempotent (a retry after
 * a failure in between completes it) and does not undo another's act:
 * uncordon does not end a quarantine (release does, after a repair), and
 * neither cordon nor drain hides one. */

typedef struct node_mode {
    const char *verb;
    const char *adm;          /* the mode set ('' = none) */
    const char *from;         /* text[] literal of the modes it may replace */
} node_mode;

static const node_mode mode_cordon = {"cordon", "cordoned", "{\"\",cordoned,draining}"};
static const node_mode mode_drain = {"drain", "draining", "{\"\",cordoned,draining}"};
static const node_mode mode_uncordon = {"uncordon", "", "{\"\",cordoned,draining}"};
static const node_mode mode_release = {"release", "", "{\"\",quarantined}"};

static void
mode_live_done(void *arg, gp_err err, int32_t prev, int32_t state)
{
    gp_req         *req = arg;
    const node_mode *m = gp_req_data(req);
    msg_node_state *out = gp_req_out(req);

    if (err == GP_ENOTFOUND)
        err = gp_req_fail(req, GP_EUNAVAIL, "%s is stored, but the live view lacks node '%s' "
                          "(Redis is being reseeded): it applies when the reseed ends",
                          m->verb, out->node);
    else if (err != GP_EOK)
        err = gp_req_fail(req, err, "%s is stored; the live view (Redis) did not take it: "
                          "%s the node again", m->verb, m->verb);
    else {
        out->prev = prev;
        out->state = state;
        GP_SET_HAS(out, MSG_NODE_STATE__PREV);
        out->at_ms = gp_wall_ms();
        snprintf(out->reason, sizeof(out->reason), "operator: %s", m->verb);
    }
    gp_req_done(req, err);
}

/* [0] the row, locked; [1] the update, when the mode may be replaced. */
static void
mode_written(void *arg, gp_err err, PGresult *const *res, int nres, const char *detail)
{
    gp_req               *req = arg;
    const node_mode      *m = gp_req_data(req);
    const msg_id_request *q = gp_req_in(req);
    msg_node_state       *out = gp_req_out(req);
    char                  reason[64];

    if (err == GP_EOK && nres != 2)
        err = GP_EINTERNAL, detail = "unexpected results";
    if (err != GP_EOK) {
        gp_req_done(req, gp_req_fail(req, err, "%s", detail ? detail : ""));
        return;
    }
    if (PQntuples(res[0]) == 0) {
        gp_req_done(req, gp_req_fail(req, GP_ENOTFOUND, "node '%s' not found", q->id));
        return;
    }
    if (PQntuples(res[1]) == 0) {
        gp_req_done(req, gp_req_fail(req, GP_ECONFLICT, "node '%s' is %s: %s", q->id,
                                     PQgetvalue(res[0], 0, 1),
                                     strcmp(PQgetvalue(res[0], 0, 1), "quarantined") == 0
                                         ? "release it (after a repair) first"
                                         : "uncordon it first"));
        return;
    }
    snprintf(out->site, sizeof(out->site), "%s", PQgetvalue(res[1], 0, 0));
    snprintf(out->node, sizeof(out->node), "%s", q->id);
    snprintf(reason, sizeof(reason), "operator: %s", m->verb);
    err = registry_live_adm(gp_req_state(req), out->site, q->id, m->adm, reason, mode_live_done,
                            req);
    if (err != GP_EOK)
        gp_req_done(req, gp_req_fail(req, err, "%s is stored; the live view (Redis) is "
                                     "unavailable: %s the node again", m->verb, m->verb));
}

static gp_err
on_node_mode(gp_req *req, const void *in, void *out)
{
    const msg_id_request *q = in;
    const node_mode      *m = gp_req_data(req);
    const char           *p[3] = {q->id, m->adm, m->from};
    gp_db_tx             *tx;
    gp_err                rc;

    (void)out;
    if (!gp_id_ok(q->id))
        return gp_req_fail(req, GP_EINVAL, "'%s' is not a valid node id", q->id);
    if ((tx = gp_db_tx_new(gp_app_db(gp_req_app(req)))) == NULL)
        return gp_req_fail(req, GP_ENOMEM, "out of memory");
    gp_db_tx_add(tx, "SELECT site, CASE adm WHEN '' THEN 'in no mode' ELSE adm END"
                     " FROM nodes WHERE id = $1 FOR UPDATE", 1, p);
    gp_db_tx_add(tx, "UPDATE nodes SET adm = $2 WHERE id = $1 AND adm = ANY($3::text[])"
                     " RETURNING site", 3, p);
    rc = gp_db_tx_run(tx, 0, mode_written, req);
    return rc == GP_EOK ? GP_EPENDING : gp_req_fail(req, rc, "inventory database unavailable");
}

/* A lease renewal, overheard in the registry's own queue group (the
 * scheduler answers it): the node's heartbeat when it carries one (a node
 * with attempts beats with its renewals), else contact for the failure
 * detector.  No reply. */
static gp_err
on_lease_seen(gp_req *req, const void *in, void *out)
{
    const msg_lease_renew *l = in;
    const char            *site = gp_req_param(req, "site"), *node = gp_req_param(req, "node");

    (void)out;
    if (GP_HAS(l, MSG_LEASE_RENEW__BEAT))
        return take_beat(req, &l->beat);   /* a bad one counted and logged, never answered */
    if (gp_id_ok(site) && gp_id_ok(node))
        registry_live_contact(gp_req_state(req), site, node);
    return GP_EOK;
}

const gp_route registry_node_routes[] = {
    {GP_OP_NODE_REGISTER, on_register, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_NODE_HEARTBEAT, on_heartbeat, GP_R_QUEUE | GP_R_BULK, 0, NULL, NULL},
    {GP_OP_ADMIN_NODE_GET, on_node_get, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_ADMIN_NODE_LIST, on_node_list, GP_R_QUEUE, REGISTRY_LIST_TIMEOUT_MS, NULL, NULL},
    {GP_OP_ADMIN_NODE_DELETE, on_node_delete, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_ADMIN_NODE_READMIT, on_node_readmit, GP_R_QUEUE, 0, NULL, NULL},
    {GP_OP_ADMIN_NODE_CORDON, on_node_mode, GP_R_QUEUE, 0, (void *)&mode_cordon, NULL},
    {GP_OP_ADMIN_NODE_DRAIN, on_node_mode, GP_R_QUEUE, 0, (void *)&mode_drain, NULL},
    {GP_OP_ADMIN_NODE_UNCORDON, on_node_mode, GP_R_QUEUE, 0, (void *)&mode_uncordon, NULL},
    {GP_OP_ADMIN_NODE_RELEASE, on_node_mode, GP_R_QUEUE, 0, (void *)&mode_release, NULL},
    {GP_OP_NODE_LEASE, on_lease_seen, GP_R_QUEUE | GP_R_BULK | GP_R_OVERHEAR, 0, NULL, NULL},
    {NULL},
};
