/* reserve.c -- atomic GPU reservations in Redis: layout and rules in
 * reserve.h, the scripts in reserve_scripts.h.
 *
 * Every decision (busy? healthy? same holder? old enough?) is taken inside
 * one script on the shard's master, never from a value this process read
 * earlier: what C reads is only a list of candidates, re-checked by the
 * script that acts on them. */
#include "reserve.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/id.h"
#include "gp/kvfan.h"
#include "gp/kvscript.h"
#include "gp/log.h"
#include "gp/shard.h"
#include "reserve_scripts.h"

/* Fields of one orphan-removal or rebuild call: 1 + 1,000 keys and
 * 1 + 3 x 1,000 arguments stay under GP_KVSCRIPT_MAX_ARGS, and a call
 * costs Redis about a millisecond. */
#define RECON_CHUNK 1000
/* "<job>:<attempt>" */
#define HOLDER_LEN  (GP_MAX_ID + 12)
/* A stored value as read: "<job>:<attempt>:<ms>" fits; anything longer is
 * not ours and is never matched (so never removed by a reconcile). */
#define RAW_LEN     128

enum { C_OK, C_BUSY, C_UNHEALTHY, C_ERROR, C_GPUS, C_RELEASES, C_REL_ERROR, C_FREED,
       C_REMOVED, C_REBUILT, C_CONFLICTS, C_FRESH, C_N };

struct sched_reserve {
    gp_kv       *kv;
    gp_kvscript  book, release, orphans, rebuild;
    uint64_t    *c[C_N];
    uint64_t     own[C_N];            /* the counters when there is no metrics registry */
    bool         reconciling;
    uint64_t     failures;            /* calls that failed: logged 1st, 2nd, 4th, 8th... */
    sched_res_stale_cb *on_stale;     /* a book refused: the shard's epoch is missing */
    void        *stale_arg;
};

/* ---- small helpers ------------------------------------------------------------------- */

static void
holder_str(char *out, const char *job, uint32_t attempt)
{
    snprintf(out, HOLDER_LEN, "%s:%" PRIu32, job, attempt);
}

/* "0,3,7" for bits 0, 3 and 7. */
static void
mask_str(char *out, size_t cap, uint64_t m)
{
    size_t len = 0;

    out[0] = '\0';
    for (int g = 0; g <= SCHED_RES_MAX_GPU && len + 4 < cap; g++)
        if (m & (UINT64_C(1) << g))
            len += (size_t)snprintf(out + len, cap - len, "%s%d", len > 0 ? "," : "", g);
}

bool
sched_res_parse(const char *val, size_t len, sched_res_entry *e)
{
    char                buf[RAW_LEN], *a, *b, *end;
    unsigned long long  att, ms;

    if (len == 0 || len >= sizeof(buf))
        return false;
    memcpy(buf, val, len);
    buf[len] = '\0';
    b = strrchr(buf, ':');
    if (b == NULL)
        return false;
    *b++ = '\0';
    a = strrchr(buf, ':');
    if (a == NULL)
        return false;
    *a++ = '\0';
    att = strtoull(a, &end, 10);
    if (*a == '\0' || *end != '\0' || att > UINT32_MAX)
        return false;
    ms = strtoull(b, &end, 10);
    if (*b == '\0' || *end != '\0' || !gp_id_ok(buf) || strlen(buf) >= sizeof(e->job))
        return false;
    memcpy(e->job, buf, strlen(buf) + 1);
    e->attempt = (uint32_t)att;
    e->reserved_ms = ms;
    return true;
}

static bool
rep_is(const redisReply *rep, size_t i, const char *s)
{
    return rep->elements > i && rep->element[i]->type == REDIS_REPLY_STRING &&
           strcmp(rep->element[i]->str, s) == 0;
}

static const char *
rep_str(const redisReply *rep, size_t i)
{
    return rep->elements > i && rep->element[i]->type == REDIS_REPLY_STRING ? rep->element[i]->str
                                                                            : "";
}

static gp_err
reply_err(const redisReply *rep, gp_err err)
{
    return err != GP_EOK ? err : rep->type == REDIS_REPLY_ERROR ? GP_EINTERNAL : GP_EOK;
}

/* ---- book and release ---------------------------------------------------------------- */

typedef struct call {
    sched_reserve *r;
    sched_res_cb  *cb;
    void          *arg;
    bool           release;
    unsigned       shard;
    char           site[GP_MAX_ID + 1];
    char           holder[HOLDER_LEN];
} call;

static void
call_end(call *c, sched_res_result *res)
{
    sched_reserve *r = c->r;

    if (c->release) {
        (*r->c[res->status == SCHED_RES_OK ? C_RELEASES : C_REL_ERROR])++;
        if (res->status == SCHED_RES_OK)
            *r->c[C_FREED] += res->gpus;
    } else {
        (*r->c[res->status == SCHED_RES_OK ? C_OK : res->status == SCHED_RES_BUSY ? C_BUSY
               : res->status == SCHED_RES_UNHEALTHY ? C_UNHEALTHY : C_ERROR])++;
        if (res->status == SCHED_RES_OK)
            *r->c[C_GPUS] += res->gpus;
    }
    /* Redis down fails every call: counted above, logged on a doubling scale */
    if (res->status == SCHED_RES_ERROR)
        r->failures++;
    if (res->status == SCHED_RES_ERROR && (r->failures & (r->failures - 1)) == 0)
        GP_WARN(c->release ? "release_failed" : "reserve_failed",
                "site=%s holder=%s code=%s failures=%" PRIu64, c->site, c->holder,
                gp_err_name(res->err), r->failures);
    if (c->cb != NULL)
        c->cb(c->arg, res);
    free(c);
}

/* The book script's refusal: {'busy', node, gpu, value} or {'unhealthy', node, state}. */
static void
book_refused(const redisReply *rep, sched_res_result *res)
{
    sched_res_entry e = {0};

    snprintf(res->node, sizeof(res->node), "%s", rep_str(rep, 1));
    if (rep_is(rep, 0, "unhealthy")) {
        res->status = SCHED_RES_UNHEALTHY;
        snprintf(res->state, sizeof(res->state), "%s", rep_str(rep, 2));
        return;
    }
    res->status = SCHED_RES_BUSY;
    res->gpu = atoi(rep_str(rep, 2));
    if (rep->elements > 3 && rep->element[3]->type == REDIS_REPLY_STRING &&
        sched_res_parse(rep->element[3]->str, rep->element[3]->len, &e)) {
        snprintf(res->holder_job, sizeof(res->holder_job), "%s", e.job);
        res->holder_attempt = e.attempt;
        res->holder_ms = e.reserved_ms;
    }
}

static void
call_done(void *arg, const redisReply *rep, gp_err err)
{
    call            *c = arg;
    sched_res_result res = {.status = SCHED_RES_ERROR, .gpu = -1};

    res.err = reply_err(rep, err);
    if (res.err != GP_EOK) {
        call_end(c, &res);
        return;
    }
    if (c->release && rep->type == REDIS_REPLY_INTEGER) {
        res.status = SCHED_RES_OK;
        res.gpus = (unsigned)rep->integer;
    } else if (!c->release && rep->type == REDIS_REPLY_ARRAY && rep_is(rep, 0, "ok") &&
               rep->elements == 2 && rep->element[1]->type == REDIS_REPLY_INTEGER) {
        res.status = SCHED_RES_OK;
        res.gpus = (unsigned)rep->element[1]->integer;
    } else if (!c->release && rep->type == REDIS_REPLY_ARRAY &&
               (rep_is(rep, 0, "busy") || rep_is(rep, 0, "unhealthy"))) {
        book_refused(rep, &res);
    } else if (!c->release && rep->type == REDIS_REPLY_ARRAY && rep_is(rep, 0, "stale")) {
        res.err = GP_EUNAVAIL;                  /* Redis lost its data: not before the rebuild */
        if (c->r->on_stale != NULL)
            c->r->on_stale(c->r->stale_arg, c->shard);
    } else {
        res.err = GP_EINTERNAL;                 /* not a reply of ours */
    }
    call_end(c, &res);
}

static gp_err
check_nodes(const sched_res_node *nodes, size_t n, bool release)
{
    if (n == 0 || n > SCHED_RES_MAX_NODES)
        return GP_EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (nodes[i].node == NULL || !gp_id_ok(nodes[i].node) || (!release && nodes[i].gpus == 0))
            return GP_EINVAL;
        for (size_t j = 0; j < i; j++)     /* a node twice would be checked against itself */
            if (strcmp(nodes[i].node, nodes[j].node) == 0)
                return GP_EINVAL;
    }
    return GP_EOK;
}

/* Book: KEYS index, (res, live) per node, epoch; ARGV holder, (node, gpus)
 * per node.  Release: KEYS index, res per node; ARGV the same, then the
 * heir ("" none). */
static gp_err
send_call(sched_reserve *r, const char *site, const char *job, uint32_t attempt,
          const sched_res_node *nodes, size_t n, bool release, const char *heir,
          sched_res_cb *cb, void *arg)
{
    char        keybuf[2 + 2 * SCHED_RES_MAX_NODES][SCHED_RES_KEY_LEN];
    char        gpubuf[SCHED_RES_MAX_NODES][3 * (SCHED_RES_MAX_GPU + 1) + 1];
    const char *keys[2 + 2 * SCHED_RES_MAX_NODES], *args[2 + 2 * SCHED_RES_MAX_NODES];
    unsigned    shard;
    int         nk = 1, na = 1;
    gp_err      e;
    call       *c;

    if (site == NULL || job == NULL || !gp_id_ok(site) || !gp_id_ok(job) ||
        (heir != NULL && !gp_id_ok(heir)) || (e = check_nodes(nodes, n, release)) != GP_EOK)
        return GP_EINVAL;
    if ((c = calloc(1, sizeof(*c))) == NULL)
        return GP_ENOMEM;
    *c = (call){.r = r, .cb = cb, .arg = arg, .release = release};
    snprintf(c->site, sizeof(c->site), "%s", site);
    holder_str(c->holder, job, attempt);
    shard = gp_shard_of(site);
    c->shard = shard;
    sched_res_index_key(keybuf[0], shard);
    keys[0] = keybuf[0];
    args[0] = c->holder;
    for (size_t i = 0; i < n; i++) {
        sched_res_key(keybuf[nk], shard, nodes[i].node);
        keys[nk] = keybuf[nk];
        nk++;
        if (!release) {
            sched_res_live_key(keybuf[nk], shard, nodes[i].node);
            keys[nk] = keybuf[nk];
            nk++;
        }
        mask_str(gpubuf[i], sizeof(gpubuf[i]), nodes[i].gpus);
        args[na++] = nodes[i].node;
        args[na++] = gpubuf[i];
    }
    if (release) {
        args[na++] = heir != NULL ? heir : "";
    } else {
        sched_epoch_key(keybuf[nk], shard);
        keys[nk] = keybuf[nk];
        nk++;
    }
    e = gp_kvscript_call(release ? &r->release : &r->book, r->kv, call_done, c, nk, keys, na, args,
                         NULL);
    if (e != GP_EOK)
        free(c);
    return e;
}

gp_err
sched_reserve_book(sched_reserve *r, const char *site, const char *job, uint32_t attempt,
                   const sched_res_node *nodes, size_t n, sched_res_cb *cb, void *arg)
{
    return send_call(r, site, job, attempt, nodes, n, false, NULL, cb, arg);
}

gp_err
sched_reserve_release(sched_reserve *r, const char *site, const char *job, uint32_t attempt,
                      const sched_res_node *nodes, size_t n, sched_res_cb *cb, void *arg)
{
    return send_call(r, site, job, attempt, nodes, n, true, NULL, cb, arg);
}

gp_err
sched_reserve_handover(sched_reserve *r, const char *site, const char *job, uint32_t attempt,
                       const sched_res_node *nodes, size_t n, const char *heir,
                       sched_res_cb *cb, void *arg)
{
    if (heir == NULL)
        return GP_EINVAL;
    return send_call(r, site, job, attempt, nodes, n, true, heir, cb, arg);
}

/* ---- reading ------------------------------------------------------------------------- */

/* A reservation as read, with its raw value (a reconcile sends it back so
 * the script removes it only if nothing changed); ok = it parsed. */
typedef struct rent {
    sched_res_entry e;
    char            raw[RAW_LEN];
    char            rawf[24];       /* the field as read: an orphan's is sent back as is */
    bool            ok;
} rent;

typedef struct rents {
    rent  *v;
    size_t n, cap;
} rents;

/* A field's GPU index, -1 when it is not one (never written by our scripts). */
static int
gpu_of(const redisReply *f)
{
    char *end;
    long  g;

    if (f->type != REDIS_REPLY_STRING || f->len == 0 || f->len > 2)
        return -1;
    g = strtol(f->str, &end, 10);
    return *end == '\0' && g >= 0 && g <= SCHED_RES_MAX_GPU ? (int)g : -1;
}

/* Appends the fields of one node's HGETALL reply. */
static gp_err
rents_add(rents *rs, const char *node, const redisReply *rep)
{
    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const redisReply *f = rep->element[i], *v = rep->element[i + 1];
        rent             *x;

        if (rs->n == rs->cap) {
            size_t cap = rs->cap == 0 ? 64 : 2 * rs->cap;
            rent  *nv = realloc(rs->v, cap * sizeof(*nv));

            if (nv == NULL)
                return GP_ENOMEM;
            rs->v = nv;
            rs->cap = cap;
        }
        x = &rs->v[rs->n++];
        memset(x, 0, sizeof(*x));
        snprintf(x->e.node, sizeof(x->e.node), "%s", node);
        x->e.gpu = gpu_of(f);
        x->ok = x->e.gpu >= 0 && v->type == REDIS_REPLY_STRING && v->len < sizeof(x->raw) &&
                sched_res_parse(v->str, v->len, &x->e);
        if (v->type == REDIS_REPLY_STRING && v->len < sizeof(x->raw))
            memcpy(x->raw, v->str, v->len);
        if (f->type == REDIS_REPLY_STRING && f->len < sizeof(x->rawf))
            memcpy(x->rawf, f->str, f->len);
    }
    return GP_EOK;
}

/* Hands the parsed ones to a public callback. */
static void
rents_deliver(rents *rs, gp_err err, sched_res_read_cb *cb, void *arg)
{
    sched_res_entry *e = err == GP_EOK && rs->n > 0 ? malloc(rs->n * sizeof(*e)) : NULL;
    size_t           n = 0;

    if (err == GP_EOK && rs->n > 0 && e == NULL)
        err = GP_ENOMEM;
    for (size_t i = 0; e != NULL && i < rs->n; i++)
        if (rs->v[i].ok)
            e[n++] = rs->v[i].e;
    cb(arg, err, e, err == GP_EOK ? n : 0);
    free(e);
}

typedef struct read_ctx {
    sched_res_read_cb *cb;
    void              *arg;
    char               node[GP_MAX_ID + 1];
} read_ctx;

static void
node_read(void *arg, const redisReply *rep, gp_err err)
{
    read_ctx *x = arg;
    rents     rs = {0};

    err = reply_err(rep, err);
    if (err == GP_EOK && rep->type != REDIS_REPLY_ARRAY)
        err = GP_EINTERNAL;
    if (err == GP_EOK)
        err = rents_add(&rs, x->node, rep);
    rents_deliver(&rs, err, x->cb, x->arg);
    free(rs.v);
    free(x);
}

gp_err
sched_reserve_read(sched_reserve *r, const char *site, const char *node, sched_res_read_cb *cb,
                   void *arg)
{
    char      key[SCHED_RES_KEY_LEN];
    read_ctx *x;
    gp_err    e;

    if (site == NULL || node == NULL || cb == NULL || !gp_id_ok(site) || !gp_id_ok(node))
        return GP_EINVAL;
    if ((x = malloc(sizeof(*x))) == NULL)
        return GP_ENOMEM;
    x->cb = cb;
    x->arg = arg;
    snprintf(x->node, sizeof(x->node), "%s", node);
    sched_res_key(key, gp_shard_of(site), node);
    e = gp_kv_cmdf(r->kv, node_read, x, "HGETALL %s", key);
    if (e != GP_EOK)
        free(x);
    return e;
}

/* ---- listing a shard: its index, then every indexed node's hash ---------------------- */

typedef void shard_listed_fn(void *arg, gp_err err, rents *rs);

typedef struct list_ctx {
    sched_reserve   *r;
    unsigned         shard;
    shard_listed_fn *done;
    void            *arg;
    char           (*nodes)[GP_MAX_ID + 1];
    rents            rs;
    gp_err           err;
} list_ctx;

static void
list_end(list_ctx *x, gp_err err)
{
    x->done(x->arg, err, &x->rs);
    free(x->rs.v);
    free(x->nodes);
    free(x);
}

static void
list_slot(void *arg, size_t i, const redisReply *rep, gp_err err)
{
    list_ctx *x = arg;

    if (err == GP_EOK && rep->type != REDIS_REPLY_ARRAY)
        err = GP_EINTERNAL;
    if (err == GP_EOK)
        err = rents_add(&x->rs, x->nodes[i], rep);
    if (err != GP_EOK && x->err == GP_EOK)
        x->err = err;
}

static void
list_hashes_done(void *arg, const gp_kvfan *f)
{
    list_ctx *x = arg;

    (void)f;
    list_end(x, x->err);
}

static void
list_index_read(void *arg, const redisReply *rep, gp_err err)
{
    list_ctx *x = arg;
    gp_kvfan *f;
    char      key[SCHED_RES_KEY_LEN];

    err = reply_err(rep, err);
    if (err == GP_EOK && rep->type != REDIS_REPLY_ARRAY)
        err = GP_EINTERNAL;
    if (err != GP_EOK || rep->elements == 0) {
        list_end(x, err);
        return;
    }
    x->nodes = calloc(rep->elements, sizeof(*x->nodes));
    f = x->nodes != NULL ? gp_kvfan_new(x->r->kv, rep->elements, list_slot, list_hashes_done, x)
                         : NULL;
    if (f == NULL) {
        list_end(x, GP_ENOMEM);
        return;
    }
    for (size_t i = 0; i < rep->elements; i++) {
        snprintf(x->nodes[i], sizeof(x->nodes[i]), "%s", rep->element[i]->str);
        sched_res_key(key, x->shard, x->nodes[i]);
        gp_kvfan_cmdf(f, i, "HGETALL %s", key);   /* a failure lands in its slot */
    }
    gp_kvfan_end(f);
}

static gp_err
list_shard(sched_reserve *r, unsigned shard, shard_listed_fn *done, void *arg)
{
    char      key[SCHED_RES_KEY_LEN];
    list_ctx *x;
    gp_err    e;

    if (shard >= GP_SHARDS)
        return GP_EINVAL;
    if ((x = calloc(1, sizeof(*x))) == NULL)
        return GP_ENOMEM;
    *x = (list_ctx){.r = r, .shard = shard, .done = done, .arg = arg};
    sched_res_index_key(key, shard);
    e = gp_kv_cmdf(r->kv, list_index_read, x, "SMEMBERS %s", key);
    if (e != GP_EOK)
        free(x);
    return e;
}

typedef struct pub_list {
    sched_res_read_cb *cb;
    void              *arg;
} pub_list;

static void
pub_listed(void *arg, gp_err err, rents *rs)
{
    pub_list *p = arg;

    rents_deliver(rs, err, p->cb, p->arg);
    free(p);
}

gp_err
sched_reserve_list(sched_reserve *r, unsigned shard, sched_res_read_cb *cb, void *arg)
{
    pub_list *p;
    gp_err    e;

    if (cb == NULL)
        return GP_EINVAL;
    if ((p = malloc(sizeof(*p))) == NULL)
        return GP_ENOMEM;
    p->cb = cb;
    p->arg = arg;
    e = list_shard(r, shard, pub_listed, p);
    if (e != GP_EOK)
        free(p);
    return e;
}

/* ---- reconcile -----------------------------------------------------------------------
 *
 * Shard by shard (one listing in flight at a time, so a large fleet never
 * floods the connection): list the shard's reservations, send the ones no
 * live attempt backs to the orphan script (which re-checks value and age),
 * then the next shard.  After the last shard, every GPU of the truth goes
 * to the rebuild script, in chunks of one shard each. */

/* One GPU of the truth. */
typedef struct tent {
    unsigned    shard;
    int         gpu;
    const char *node;
    const char *job;
    uint32_t    attempt;
} tent;

typedef struct live_copy {
    char job[GP_MAX_ID + 1];
    char node[GP_MAX_ID + 1];
} live_copy;

typedef struct recon {
    sched_reserve          *r;
    sched_res_reconcile_cb *cb;
    void                   *arg;
    char                    cutoff[24];     /* the orphan script's: truth read - grace */
    live_copy              *lc;
    tent                   *t;
    size_t                  nt;
    unsigned                shard;          /* the shard being walked */
    unsigned                pending;        /* script calls in flight (+1 while sending) */
    unsigned                logged;         /* conflicts logged so far */
    sched_res_reconciled    res;
    /* scratch for one call's arguments (hiredis copies them at send) */
    char                  (*keybuf)[SCHED_RES_KEY_LEN];
    char                  (*gbuf)[4];
    char                  (*hbuf)[HOLDER_LEN];
    const char            **keys, **args;
} recon;

typedef struct recon_call {
    recon   *x;
    unsigned shard;
} recon_call;

static int
tent_cmp(const void *a, const void *b)
{
    const tent *x = a, *y = b;
    int         c;

    if (x->shard != y->shard)
        return x->shard < y->shard ? -1 : 1;
    if ((c = strcmp(x->node, y->node)) != 0)
        return c;
    return (x->gpu > y->gpu) - (x->gpu < y->gpu);
}

/* The first truth entry at (shard, node, gpu), or nt. */
static size_t
tent_find(const recon *x, unsigned shard, const char *node, int gpu)
{
    tent   key = {.shard = shard, .node = node, .gpu = gpu};
    size_t lo = 0, hi = x->nt;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (tent_cmp(&x->t[mid], &key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < x->nt && tent_cmp(&x->t[lo], &key) == 0 ? lo : x->nt;
}

/* Does a live attempt hold this reservation? */
static bool
backed(const recon *x, unsigned shard, const rent *v)
{
    tent key = {.shard = shard, .node = v->e.node, .gpu = v->e.gpu};

    if (!v->ok)
        return false;
    for (size_t i = tent_find(x, shard, v->e.node, v->e.gpu);
         i < x->nt && tent_cmp(&x->t[i], &key) == 0; i++)
        if (x->t[i].attempt == v->e.attempt && strcmp(x->t[i].job, v->e.job) == 0)
            return true;
    return false;
}

static void
recon_fail(recon *x, gp_err err, const char *what)
{
    x->res.failed++;
    if (x->res.err == GP_EOK)
        x->res.err = err;
    GP_WARN("reconcile_step_failed", "step=%s shard=%u code=%s", what, x->shard, gp_err_name(err));
}

static void
recon_free(recon *x)
{
    free(x->lc);
    free(x->t);
    free(x->keybuf);
    free(x->gbuf);
    free(x->hbuf);
    free(x->keys);
    free(x->args);
    free(x);
}

static void
recon_finish(recon *x)
{
    sched_reserve *r = x->r;

    *r->c[C_REMOVED] += x->res.removed;
    *r->c[C_REBUILT] += x->res.rebuilt;
    *r->c[C_CONFLICTS] += x->res.conflicts;
    *r->c[C_FRESH] += x->res.kept_fresh;
    GP_INFO("reservations_reconciled", "removed=%u kept_fresh=%u rebuilt=%u conflicts=%u failed=%u",
            x->res.removed, x->res.kept_fresh, x->res.rebuilt, x->res.conflicts, x->res.failed);
    r->reconciling = false;
    if (x->cb != NULL)
        x->cb(x->arg, &x->res);
    recon_free(x);
}

/* Sends one script call with the scratch arrays; counts it pending. */
static void
recon_send(recon *x, gp_kvscript *s, gp_kv_cb *done, unsigned shard, int nk, int na,
           const char *what)
{
    recon_call *c = malloc(sizeof(*c));
    gp_err      e = c == NULL ? GP_ENOMEM : GP_EOK;

    if (c != NULL) {
        *c = (recon_call){.x = x, .shard = shard};
        e = gp_kvscript_call(s, x->r->kv, done, c, nk, x->keys, na, x->args, NULL);
    }
    if (e != GP_EOK) {
        free(c);
        recon_fail(x, e, what);
        return;
    }
    x->pending++;
}

/* ---- rebuild ---- */

static void
conflict_note(recon *x, unsigned shard, const char *node, const char *gpu, const redisReply *val)
{
    sched_res_entry e = {0};
    size_t          i;

    if (x->res.conflicts++ == 0) {
        snprintf(e.node, sizeof(e.node), "%s", node);
        e.gpu = atoi(gpu);
        if (val->type == REDIS_REPLY_STRING)
            sched_res_parse(val->str, val->len, &e);
        x->res.first_conflict = e;
        if ((i = tent_find(x, shard, node, e.gpu)) < x->nt) {
            snprintf(x->res.conflict_job, sizeof(x->res.conflict_job), "%s", x->t[i].job);
            x->res.conflict_attempt = x->t[i].attempt;
        }
    }
    if (x->logged++ < 10)
        GP_WARN("reservation_conflict", "shard=%u node=%s gpu=%s redis_holder=%s", shard, node,
                gpu, val->type == REDIS_REPLY_STRING ? val->str : "?");
}

static void
rebuilt(void *arg, const redisReply *rep, gp_err err)
{
    recon_call *c = arg;
    recon      *x = c->x;

    err = reply_err(rep, err);
    if (err == GP_EOK && (rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 ||
                          rep->element[0]->type != REDIS_REPLY_INTEGER))
        err = GP_EINTERNAL;
    if (err != GP_EOK)
        recon_fail(x, err, "rebuild");
    else {
        x->res.rebuilt += (unsigned)rep->element[0]->integer;
        for (size_t i = 1; i + 2 < rep->elements; i += 3)
            conflict_note(x, c->shard, rep_str(rep, i), rep_str(rep, i + 1), rep->element[i + 2]);
    }
    free(c);
    if (--x->pending == 0)
        recon_finish(x);
}

/* Every GPU of the truth, one call per shard chunk. */
static void
rebuild_all(recon *x)
{
    size_t i = 0;

    x->pending = 1;                            /* no finish while sending */
    while (i < x->nt) {
        unsigned shard = x->t[i].shard;
        int      nk = 1, na = 0;

        sched_res_index_key(x->keybuf[0], shard);
        x->keys[0] = x->keybuf[0];
        for (; i < x->nt && x->t[i].shard == shard && nk <= RECON_CHUNK; i++, nk++) {
            sched_res_key(x->keybuf[nk], shard, x->t[i].node);
            x->keys[nk] = x->keybuf[nk];
            snprintf(x->gbuf[nk], sizeof(x->gbuf[nk]), "%d", x->t[i].gpu);
            holder_str(x->hbuf[nk], x->t[i].job, x->t[i].attempt);
            x->args[na++] = x->t[i].node;
            x->args[na++] = x->gbuf[nk];
            x->args[na++] = x->hbuf[nk];
        }
        recon_send(x, &x->r->rebuild, rebuilt, shard, nk, na, "rebuild");
    }
    if (--x->pending == 0)
        recon_finish(x);
}

/* ---- orphans, shard by shard ---- */

static void walk(recon *x);

static void
orphans_done(void *arg, const redisReply *rep, gp_err err)
{
    recon_call *c = arg;
    recon      *x = c->x;

    err = reply_err(rep, err);
    if (err == GP_EOK && (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
                          rep->element[0]->type != REDIS_REPLY_INTEGER ||
                          rep->element[1]->type != REDIS_REPLY_INTEGER))
        err = GP_EINTERNAL;
    if (err != GP_EOK)
        recon_fail(x, err, "orphans");
    else {
        x->res.removed += (unsigned)rep->element[0]->integer;
        x->res.kept_fresh += (unsigned)rep->element[1]->integer;
    }
    free(c);
    if (--x->pending == 0) {
        x->shard++;
        walk(x);
    }
}

/* The shard's reservations are read: the unbacked ones to the script. */
static void
shard_listed(void *arg, gp_err err, rents *rs)
{
    recon *x = arg;
    size_t i = 0;

    if (err != GP_EOK)
        recon_fail(x, err, "list");            /* its orphans wait for the next reconcile */
    x->pending = 1;
    while (err == GP_EOK && i < rs->n) {
        int nk = 1, na = 1;

        sched_res_index_key(x->keybuf[0], x->shard);
        x->keys[0] = x->keybuf[0];
        x->args[0] = x->cutoff;
        for (; i < rs->n && nk <= RECON_CHUNK; i++) {
            if (backed(x, x->shard, &rs->v[i]))
                continue;
            sched_res_key(x->keybuf[nk], x->shard, rs->v[i].e.node);
            x->keys[nk] = x->keybuf[nk];
            x->args[na++] = rs->v[i].e.node;
            x->args[na++] = rs->v[i].rawf;     /* a malformed field goes too */
            x->args[na++] = rs->v[i].raw;
            nk++;
        }
        if (nk > 1)
            recon_send(x, &x->r->orphans, orphans_done, x->shard, nk, na, "orphans");
    }
    if (--x->pending == 0) {
        x->shard++;
        walk(x);
    }
}

/* Lists the next shard; after the last one, rebuilds. */
static void
walk(recon *x)
{
    for (; x->shard < GP_SHARDS; x->shard++) {
        gp_err e = list_shard(x->r, x->shard, shard_listed, x);

        if (e == GP_EOK)
            return;                            /* shard_listed goes on */
        recon_fail(x, e, "list");
    }
    rebuild_all(x);
}

/* Copies the truth and expands it into one entry per GPU, sorted. */
static gp_err
recon_truth(recon *x, const sched_res_live *live, size_t n)
{
    size_t nt = 0;

    for (size_t i = 0; i < n; i++) {
        if (live[i].job == NULL || live[i].site == NULL || live[i].node == NULL ||
            !gp_id_ok(live[i].job) || !gp_id_ok(live[i].site) || !gp_id_ok(live[i].node))
            return GP_EINVAL;
        nt += (size_t)__builtin_popcountll(live[i].gpus);
    }
    x->lc = calloc(n + 1, sizeof(*x->lc));
    x->t = calloc(nt + 1, sizeof(*x->t));
    if (x->lc == NULL || x->t == NULL)
        return GP_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        unsigned shard = gp_shard_of(live[i].site);

        snprintf(x->lc[i].job, sizeof(x->lc[i].job), "%s", live[i].job);
        snprintf(x->lc[i].node, sizeof(x->lc[i].node), "%s", live[i].node);
        for (int g = 0; g <= SCHED_RES_MAX_GPU; g++)
            if (live[i].gpus & (UINT64_C(1) << g))
                x->t[x->nt++] = (tent){.shard = shard, .gpu = g, .node = x->lc[i].node,
                                       .job = x->lc[i].job, .attempt = live[i].attempt};
    }
    qsort(x->t, x->nt, sizeof(*x->t), tent_cmp);
    return GP_EOK;
}

static gp_err
recon_scratch(recon *x)
{
    x->keybuf = calloc(RECON_CHUNK + 1, sizeof(*x->keybuf));
    x->gbuf = calloc(RECON_CHUNK + 1, sizeof(*x->gbuf));
    x->hbuf = calloc(RECON_CHUNK + 1, sizeof(*x->hbuf));
    x->keys = calloc(RECON_CHUNK + 1, sizeof(*x->keys));
    x->args = calloc(3 * RECON_CHUNK + 1, sizeof(*x->args));
    return x->keybuf && x->gbuf && x->hbuf && x->keys && x->args ? GP_EOK : GP_ENOMEM;
}

gp_err
sched_reserve_reconcile(sched_reserve *r, const sched_res_live *live, size_t n,
                        uint64_t truth_ms, uint64_t grace_ms, sched_res_reconcile_cb *cb,
                        void *arg)
{
    recon *x;
    gp_err e;

    if (r->reconciling)
        return GP_ECONFLICT;
    if (n > 0 && live == NULL)
        return GP_EINVAL;
    if (!gp_kv_is_connected(r->kv))
        return GP_EUNAVAIL;                    /* rather than 256 failed listings */
    if ((x = calloc(1, sizeof(*x))) == NULL)
        return GP_ENOMEM;
    x->r = r;
    x->cb = cb;
    x->arg = arg;
    snprintf(x->cutoff, sizeof(x->cutoff), "%" PRIu64,
             truth_ms > grace_ms ? truth_ms - grace_ms : 0);
    if ((e = recon_truth(x, live, n)) != GP_EOK || (e = recon_scratch(x)) != GP_EOK) {
        recon_free(x);
        return e;
    }
    r->reconciling = true;
    walk(x);
    return GP_EOK;
}

/* ---- Redis's clock ------------------------------------------------------------------- */

typedef struct clock_call {
    sched_res_clock_cb *cb;
    void               *arg;
} clock_call;

/* TIME: {seconds, microseconds}, as strings. */
static void
clock_read(void *arg, const redisReply *rep, gp_err err)
{
    clock_call *c = arg;
    uint64_t    ms = 0;

    err = reply_err(rep, err);
    if (err == GP_EOK && (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
                          rep->element[0]->type != REDIS_REPLY_STRING ||
                          rep->element[1]->type != REDIS_REPLY_STRING))
        err = GP_EINTERNAL;
    if (err == GP_EOK)
        ms = strtoull(rep->element[0]->str, NULL, 10) * 1000 +
             strtoull(rep->element[1]->str, NULL, 10) / 1000;
    c->cb(c->arg, err, ms);
    free(c);
}

gp_err
sched_reserve_clock(sched_reserve *r, sched_res_clock_cb *cb, void *arg)
{
    clock_call *c;
    gp_err      e;

    if (cb == NULL)
        return GP_EINVAL;
    if ((c = malloc(sizeof(*c))) == NULL)
        return GP_ENOMEM;
    *c = (clock_call){cb, arg};
    e = gp_kv_cmdf(r->kv, clock_read, c, "TIME");
    if (e != GP_EOK)
        free(c);
    return e;
}

/* ---- life ---------------------------------------------------------------------------- */

static const struct {
    const char *name, *labels, *help;
} counters[C_N] = {
    [C_OK] = {"gp_scheduler_reservations_total", "result=\"ok\"", "GPU reservation calls by result"},
    [C_BUSY] = {"gp_scheduler_reservations_total", "result=\"busy\"", NULL},
    [C_UNHEALTHY] = {"gp_scheduler_reservations_total", "result=\"unhealthy\"", NULL},
    [C_ERROR] = {"gp_scheduler_reservations_total", "result=\"error\"", NULL},
    [C_GPUS] = {"gp_scheduler_reserved_gpus_total", NULL, "GPUs newly reserved"},
    [C_RELEASES] = {"gp_scheduler_releases_total", "result=\"ok\"", "GPU release calls by result"},
    [C_REL_ERROR] = {"gp_scheduler_releases_total", "result=\"error\"", NULL},
    [C_FREED] = {"gp_scheduler_released_gpus_total", NULL, "GPUs released by their holder"},
    [C_REMOVED] = {"gp_scheduler_reconcile_removed_total", NULL,
                   "Reservations no live attempt backed, removed past the grace"},
    [C_REBUILT] = {"gp_scheduler_reconcile_rebuilt_total", NULL,
                   "Reservations of live attempts Redis had lost, booked again"},
    [C_CONFLICTS] = {"gp_scheduler_reconcile_conflicts_total", NULL,
                     "GPUs of live attempts that Redis gives another holder"},
    [C_FRESH] = {"gp_scheduler_reconcile_kept_fresh_total", NULL,
                 "Unbacked reservations kept because younger than the grace"},
};

gp_err
sched_reserve_new(gp_kv *kv, gp_metrics *m, sched_reserve **out)
{
    sched_reserve *r;

    *out = NULL;
    if (kv == NULL)
        return GP_EINVAL;
    if ((r = calloc(1, sizeof(*r))) == NULL)
        return GP_ENOMEM;
    r->kv = kv;
    gp_kvscript_init(&r->book, sched_res_book_lua);
    gp_kvscript_init(&r->release, sched_res_release_lua);
    gp_kvscript_init(&r->orphans, sched_res_orphans_lua);
    gp_kvscript_init(&r->rebuild, sched_res_rebuild_lua);
    for (int i = 0; i < C_N; i++) {
        const char *help = NULL;

        for (int k = i; help == NULL && k >= 0; k--)  /* a label set: its family's help */
            help = counters[k].help;

        r->c[i] = m != NULL ? gp_metrics_counter(m, counters[i].name, counters[i].labels, help)
                            : NULL;
        if (r->c[i] == NULL)
            r->c[i] = &r->own[i];              /* no registry, or it is full */
    }
    *out = r;
    return GP_EOK;
}

void
sched_reserve_on_stale(sched_reserve *r, sched_res_stale_cb *cb, void *arg)
{
    r->on_stale = cb;
    r->stale_arg = arg;
}

void
sched_reserve_free(sched_reserve *r)
{
    free(r);
}

void
sched_reserve_load(sched_reserve *r)
{
    gp_kvscript_load(&r->book, r->kv);
    gp_kvscript_load(&r->release, r->kv);
    gp_kvscript_load(&r->orphans, r->kv);
    gp_kvscript_load(&r->rebuild, r->kv);
}
