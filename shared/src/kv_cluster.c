/* kv_cluster.c -- gp_kv over a Redis Cluster (see gp/kv.h, "Cluster mode").
 * kv.c hands it the gp_kv of a service configured for a cluster; it calls
 * kv_node.c for each master and never kv.c (kv_int.h).  Loop thread only,
 * like all of gp/kv.h.
 *
 * hiredis 0.14 has no cluster support, and Debian 12 packages no cluster
 * client, so this follows the Redis Cluster specification on top of
 * kv_node.c:
 *
 *   - one kv_node.c connection per master (its own deadline FIFO,
 *     reconnect with backoff, in-flight cap), created from CLUSTER SLOTS;
 *   - a table of the 16,384 hash slots -> node; slot = CRC16/XMODEM(key or
 *     its {hash tag}) mod 16384;
 *   - every command is formatted once (RESP) and kept until its callback
 *     ran, so that it can be resent after a redirection; its deadline is
 *     fixed when it is accepted and carried to every resend;
 *   - MOVED: that slot -> the named node at once, a background refresh of
 *     the whole map (one CLUSTER SLOTS in flight at a time; requests that
 *     come meanwhile coalesce into one more), resend;
 *   - ASK: ASKING + the command, pipelined on the target's connection, for
 *     this one command; the map is unchanged;
 *   - TRYAGAIN / CLUSTERDOWN, or a resend whose node is not connected: wait
 *     a gp_backoff delay (one ev_timer per waiting command) and resend, as
 *     long as the deadline allows; after it, TIMEOUT;
 *   - a reply of UNAVAIL/TIMEOUT from the inner connection is final (the
 *     command may have run): passed to the caller, and a lost connection
 *     refreshes the map.
 *
 * Lifetime: commands hold a pointer to the cluster; the cluster (whose
 * first member is the gp_kv the user holds) is released only when
 * gp_kv_free (kvc_free) was called,
 * no inner callback is outstanding, no command waits and none of our frames
 * is on the stack.  gp_kv_free frees the inner connections, whose pending
 * callbacks then run (now, or after the current hiredis callback returns)
 * and end their commands with UNAVAIL. */
#include <ev.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gp/backoff.h"
#include "gp/clock.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "kv_int.h"

#define KVC_SLOTS    16384
#define KVC_MAX_HOPS 16                    /* redirections followed per command */
#define KVC_ADDR     80                    /* "host:port" */
#define KVC_REFRESH_MIN_S 0.05             /* CLUSTER SLOTS at most every 50 ms */

typedef struct kvc_node {
    char           host[64];
    int            port;
    struct kvn    *conn;                   /* kv_node.c; NULL once kvc_free ran */
    struct kvc    *cl;
    bool           in_map;
} kvc_node;

typedef struct kvc_req kvc_req;
struct kvc_req {
    struct kvc *cl;
    gp_kv_cb   *cb;
    void       *arg;
    char       *buf;                       /* RESP, owned */
    size_t      len;
    int         slot;                      /* -1: any master */
    bool        all;                       /* every master */
    bool        waiting;                   /* w armed, on cl->wait list */
    ev_tstamp   deadline;
    unsigned    hops;
    char        ask[KVC_ADDR];             /* ASK target for the next send */
    gp_backoff  bo;
    ev_timer    w;
    kvc_req    *prev, *next;               /* cl->wait */
    /* fan-out (all): answers still due, the first failure */
    unsigned    fan_left;
    gp_err      fan_err;
    char       *fan_msg;
    size_t      fan_msglen;
};

struct kvc {
    gp_kv           handle;                /* first (kv_int.h); .cluster true */
    struct ev_loop *loop;
    gp_kv_conn_cb  *conn_cb;
    void           *conn_arg;
    unsigned        connect_timeout_ms;
    unsigned        command_timeout_ms;
    double          timeout;               /* seconds */
    char            user[128];             /* AUTH of every node connection */
    char            password[256];

    char          (*seeds)[KVC_ADDR];
    unsigned        nseeds;

    kvc_node      **nodes;
    unsigned        nnodes, capnodes, rr;
    kvc_node       *slots[KVC_SLOTS];
    bool            map_loaded;
    bool            ready;                 /* last told to conn_cb */

    bool            refresh_inflight, refresh_again, refresh_wanted;
    ev_tstamp       refresh_last;          /* when the last CLUSTER SLOTS was sent */
    ev_timer        w_refresh;             /* retry of a failed refresh */
    gp_backoff      refresh_bo;

    kvc_req        *wait;                  /* commands waiting for a resend */
    unsigned        outstanding;           /* inner callbacks still due to us */
    unsigned        inflight;              /* user commands not yet called back */
    unsigned        depth;
    bool            freeing;

    gp_kv_stats     st;
};

/* ---- hash slots ---------------------------------------------------------- */

static uint16_t
crc16(const char *buf, size_t len)         /* CRC16/XMODEM, poly 0x1021 */
{
    uint16_t crc = 0;

    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

/* The spec's rule: if the key has a '{' and a later '}' with at least one
 * byte between the first '{' and the first '}' after it, only those bytes
 * are hashed. */
int
gp_kv_key_slot(const char *key, size_t len)
{
    size_t s, e;

    for (s = 0; s < len && key[s] != '{'; s++)
        ;
    if (s < len) {
        for (e = s + 1; e < len && key[e] != '}'; e++)
            ;
        if (e < len && e != s + 1)
            return crc16(key + s + 1, e - s - 1) & (KVC_SLOTS - 1);
    }
    return crc16(key, len) & (KVC_SLOTS - 1);
}

/* ---- which keys a command has ------------------------------------------- */

enum { K_ARG1, K_NONE, K_ALL, K_RANGE, K_EVAL, K_REFUSE };

typedef struct keyspec {
    const char *name;
    int         kind;
    int         first, last, step;         /* K_RANGE: last < 0 counts from the end */
} keyspec;

static const keyspec keyspecs[] = {
    {"ping", K_NONE, 0, 0, 0},        {"echo", K_NONE, 0, 0, 0},
    {"info", K_NONE, 0, 0, 0},        {"time", K_NONE, 0, 0, 0},
    {"dbsize", K_NONE, 0, 0, 0},      {"cluster", K_NONE, 0, 0, 0},
    {"command", K_NONE, 0, 0, 0},     {"client", K_NONE, 0, 0, 0},
    {"config", K_NONE, 0, 0, 0},      {"lastsave", K_NONE, 0, 0, 0},
    {"slowlog", K_NONE, 0, 0, 0},     {"randomkey", K_NONE, 0, 0, 0},
    {"wait", K_NONE, 0, 0, 0},        {"hello", K_NONE, 0, 0, 0},
    {"auth", K_NONE, 0, 0, 0},        {"readonly", K_NONE, 0, 0, 0},
    {"readwrite", K_NONE, 0, 0, 0},   {"asking", K_NONE, 0, 0, 0},
    {"latency", K_NONE, 0, 0, 0},     {"memory", K_NONE, 0, 0, 0},
    {"script", K_ALL, 0, 0, 0},       {"flushall", K_ALL, 0, 0, 0},
    {"flushdb", K_ALL, 0, 0, 0},
    {"multi", K_REFUSE, 0, 0, 0},     {"exec", K_REFUSE, 0, 0, 0},
    {"discard", K_REFUSE, 0, 0, 0},   {"watch", K_REFUSE, 0, 0, 0},
    {"unwatch", K_REFUSE, 0, 0, 0},   {"select", K_REFUSE, 0, 0, 0},
    {"keys", K_REFUSE, 0, 0, 0},      {"scan", K_REFUSE, 0, 0, 0},
    {"eval", K_EVAL, 0, 0, 0},        {"evalsha", K_EVAL, 0, 0, 0},
    {"eval_ro", K_EVAL, 0, 0, 0},     {"evalsha_ro", K_EVAL, 0, 0, 0},
    {"fcall", K_EVAL, 0, 0, 0},       {"fcall_ro", K_EVAL, 0, 0, 0},
    {"del", K_RANGE, 1, -1, 1},       {"unlink", K_RANGE, 1, -1, 1},
    {"exists", K_RANGE, 1, -1, 1},    {"touch", K_RANGE, 1, -1, 1},
    {"mget", K_RANGE, 1, -1, 1},      {"mset", K_RANGE, 1, -1, 2},
    {"msetnx", K_RANGE, 1, -1, 2},    {"rename", K_RANGE, 1, 2, 1},
    {"renamenx", K_RANGE, 1, 2, 1},   {"copy", K_RANGE, 1, 2, 1},
    {"rpoplpush", K_RANGE, 1, 2, 1},  {"lmove", K_RANGE, 1, 2, 1},
    {"brpoplpush", K_RANGE, 1, 2, 1}, {"blmove", K_RANGE, 1, 2, 1},
    {"smove", K_RANGE, 1, 2, 1},      {"sunion", K_RANGE, 1, -1, 1},
    {"sinter", K_RANGE, 1, -1, 1},    {"sdiff", K_RANGE, 1, -1, 1},
    {"sunionstore", K_RANGE, 1, -1, 1}, {"sinterstore", K_RANGE, 1, -1, 1},
    {"sdiffstore", K_RANGE, 1, -1, 1}, {"pfcount", K_RANGE, 1, -1, 1},
    {"pfmerge", K_RANGE, 1, -1, 1},   {"blpop", K_RANGE, 1, -2, 1},
    {"brpop", K_RANGE, 1, -2, 1},     {"bzpopmin", K_RANGE, 1, -2, 1},
    {"bzpopmax", K_RANGE, 1, -2, 1},
};

/* Splits a RESP array of bulk strings (what redisFormatCommand* writes)
 * into argument offsets.  argv/argl: malloc'd, argc entries. */
static gp_err
resp_split(const char *b, size_t len, int *argc, const char ***argv, size_t **argl)
{
    const char *p = b, *end = b + len;
    char       *q;
    long        n, l;

    *argv = NULL;
    *argl = NULL;
    if (p >= end || *p != '*')
        return GP_EINVAL;
    n = strtol(p + 1, &q, 10);
    if (n <= 0 || q + 2 > end || q[0] != '\r')
        return GP_EINVAL;
    p = q + 2;
    *argv = malloc((size_t)n * sizeof(**argv));
    *argl = malloc((size_t)n * sizeof(**argl));
    if (*argv == NULL || *argl == NULL)
        goto fail;
    for (long i = 0; i < n; i++) {
        if (p >= end || *p != '$')
            goto fail;
        l = strtol(p + 1, &q, 10);
        if (l < 0 || q + 2 > end || q[0] != '\r')
            goto fail;
        p = q + 2;
        if (p + l + 2 > end)
            goto fail;
        (*argv)[i] = p;
        (*argl)[i] = (size_t)l;
        p += l + 2;
    }
    *argc = (int)n;
    return GP_EOK;
fail:
    free(*argv);
    free(*argl);
    *argv = NULL;
    *argl = NULL;
    return GP_EINVAL;
}

/* Sets c->slot / c->all.  INVAL for refused commands, bad EVAL numkeys or
 * keys in several slots (*cross set then). */
static gp_err
route_of(kvc_req *c, bool *cross)
{
    const char  **argv;
    size_t       *argl;
    int           argc, first = 1, last = 1, step = 1, kind = K_ARG1;
    gp_err        e;

    *cross = false;
    c->slot = -1;
    c->all = false;
    if ((e = resp_split(c->buf, c->len, &argc, &argv, &argl)) != GP_EOK)
        return e;
    for (size_t i = 0; i < GP_NELEM(keyspecs); i++) {
        if (strlen(keyspecs[i].name) == argl[0] &&
            strncasecmp(keyspecs[i].name, argv[0], argl[0]) == 0) {
            kind = keyspecs[i].kind;
            first = keyspecs[i].first;
            last = keyspecs[i].last;
            step = keyspecs[i].step;
            break;
        }
    }
    e = GP_EOK;
    switch (kind) {
    case K_REFUSE:
        e = GP_EINVAL;
        goto out;
    case K_ALL:
        c->all = true;
        goto out;
    case K_NONE:
        goto out;
    case K_EVAL: {
        char  nb[24];
        char *q;
        long  nk;

        if (argc < 3 || argl[2] == 0 || argl[2] >= sizeof(nb)) {
            e = GP_EINVAL;
            goto out;
        }
        memcpy(nb, argv[2], argl[2]);
        nb[argl[2]] = '\0';
        nk = strtol(nb, &q, 10);
        if (*q != '\0' || nk < 0 || nk > argc - 3) {
            e = GP_EINVAL;
            goto out;
        }
        if (nk == 0)
            goto out;
        first = 3;
        last = 3 + (int)nk - 1;
        step = 1;
        break;
    }
    case K_ARG1:
        if (argc < 2)
            goto out;
        first = last = 1;
        break;
    default:                               /* K_RANGE */
        if (last < 0)
            last = argc + last;
        if (last > argc - 1)
            last = argc - 1;
        break;
    }
    for (int i = first; i <= last && i < argc; i += step) {
        int s = gp_kv_key_slot(argv[i], argl[i]);

        if (c->slot < 0) {
            c->slot = s;
        } else if (s != c->slot) {
            *cross = true;
            e = GP_EINVAL;
            break;
        }
    }
out:
    free(argv);
    free(argl);
    return e;
}

/* ---- lifetime ------------------------------------------------------------ */

static void kvc_refresh(struct kvc *cl);

static void
kvc_enter(struct kvc *cl)
{
    cl->depth++;
}

static void
kvc_release(struct kvc *cl)
{
    ev_timer_stop(cl->loop, &cl->w_refresh);
    for (unsigned i = 0; i < cl->nnodes; i++)
        free(cl->nodes[i]);
    free(cl->nodes);
    free(cl->seeds);
    explicit_bzero(cl->password, sizeof(cl->password));
    free(cl);
}

/* Last statement of every entry point: cl may be gone afterwards. */
static void
kvc_leave(struct kvc *cl)
{
    if (--cl->depth == 0 && cl->freeing && cl->outstanding == 0 && cl->wait == NULL)
        kvc_release(cl);
}

/* ---- nodes --------------------------------------------------------------- */

static bool
node_up(const kvc_node *n)
{
    return n != NULL && kvn_is_connected(n->conn);
}

static void kvc_node_conn_cb(void *arg, bool connected);

static kvc_node *
node_find(struct kvc *cl, const char *host, int port)
{
    for (unsigned i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i]->port == port && strcmp(cl->nodes[i]->host, host) == 0)
            return cl->nodes[i];
    return NULL;
}

static kvc_node *
node_get(struct kvc *cl, const char *host, int port)
{
    kvc_node  *n = node_find(cl, host, port);
    gp_kv_opts o;

    if (n != NULL)
        return n;
    if (strlen(host) >= sizeof(n->host) || port <= 0 || port > 65535)
        return NULL;
    if (cl->nnodes == cl->capnodes) {
        unsigned   nc = cl->capnodes ? cl->capnodes * 2 : 8;
        kvc_node **nn = realloc(cl->nodes, nc * sizeof(*nn));

        if (nn == NULL)
            return NULL;
        cl->nodes = nn;
        cl->capnodes = nc;
    }
    n = calloc(1, sizeof(*n));
    if (n == NULL)
        return NULL;
    snprintf(n->host, sizeof(n->host), "%s", host);
    n->port = port;
    n->cl = cl;
    o = (gp_kv_opts){.host = host, .port = port, .connect_timeout_ms = cl->connect_timeout_ms,
                     .command_timeout_ms = cl->command_timeout_ms, .user = cl->user,
                     .password = cl->password};
    if (kvn_new(cl->loop, &o, kvc_node_conn_cb, n, &n->conn) != GP_EOK) {
        free(n);
        return NULL;
    }
    cl->nodes[cl->nnodes++] = n;
    GP_DEBUG("redis_cluster_node", "host=%s port=%d", host, port);
    return n;
}

/* "host:port" (the last ':' splits, for IPv6). */
static kvc_node *
node_get_addr(struct kvc *cl, const char *addr, size_t len)
{
    char        h[KVC_ADDR];
    const char *colon = NULL;

    if (len == 0 || len >= sizeof(h))
        return NULL;
    memcpy(h, addr, len);
    h[len] = '\0';
    colon = strrchr(h, ':');
    if (colon == NULL)
        return NULL;
    h[colon - h] = '\0';
    return node_get(cl, h, atoi(colon + 1));
}

static kvc_node *
node_any_up(struct kvc *cl)
{
    for (unsigned i = 0; i < cl->nnodes; i++) {
        kvc_node *n = cl->nodes[(cl->rr + i) % cl->nnodes];

        if (n->in_map && node_up(n)) {
            cl->rr = (cl->rr + i + 1) % cl->nnodes;
            return n;
        }
    }
    for (unsigned i = 0; i < cl->nnodes; i++)
        if (node_up(cl->nodes[i]))
            return cl->nodes[i];
    return NULL;
}

static void
node_drop(struct kvc *cl, unsigned i)
{
    kvc_node *n = cl->nodes[i];

    GP_INFO("redis_cluster_node_gone", "host=%s port=%d", n->host, n->port);
    for (unsigned s = 0; s < KVC_SLOTS; s++)
        if (cl->slots[s] == n)
            cl->slots[s] = NULL;
    cl->nodes[i] = cl->nodes[--cl->nnodes];
    kvn_free(n->conn);                     /* its pending callbacks: UNAVAIL */
    free(n);
}

static void
kvc_update_ready(struct kvc *cl)
{
    bool ready = cl->map_loaded && !cl->freeing;

    for (unsigned s = 0; ready && s < KVC_SLOTS; s++)
        if (cl->slots[s] == NULL)
            ready = false;
    for (unsigned i = 0; ready && i < cl->nnodes; i++)
        if (cl->nodes[i]->in_map && !node_up(cl->nodes[i]))
            ready = false;
    if (ready == cl->ready)
        return;
    cl->ready = ready;
    if (ready)
        GP_INFO("redis_cluster_up", "masters=%u", cl->st.masters);
    else
        GP_WARN("redis_cluster_degraded", "masters=%u", cl->st.masters);
    if (cl->conn_cb != NULL && !cl->freeing)
        cl->conn_cb(cl->conn_arg, ready);
}

static void
kvc_node_conn_cb(void *arg, bool connected)
{
    kvc_node   *n = arg;
    struct kvc *cl = n->cl;

    kvc_enter(cl);
    if (connected) {
        if (cl->refresh_wanted || !cl->map_loaded)
            kvc_refresh(cl);
    } else {
        kvc_refresh(cl);                   /* who owns its slots now? */
    }
    kvc_update_ready(cl);
    kvc_leave(cl);
}

/* ---- the slot map -------------------------------------------------------- */

static bool
int_elem(const redisReply *r, long long *v)
{
    if (r->type != REDIS_REPLY_INTEGER)
        return false;
    *v = r->integer;
    return true;
}

/* CLUSTER SLOTS: [[start, end, [ip, port, id, ...], replica...], ...].  An
 * empty ip means "the node you asked". */
static gp_err
apply_slots(struct kvc *cl, const redisReply *r, const kvc_node *from)
{
    kvc_node **tab;
    unsigned   masters = 0;

    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0)
        return GP_EINVAL;
    tab = calloc(KVC_SLOTS, sizeof(*tab));
    if (tab == NULL)
        return GP_ENOMEM;
    for (unsigned i = 0; i < cl->nnodes; i++)
        cl->nodes[i]->in_map = false;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i], *m;
        long long         a, b, port;
        char              host[64];
        kvc_node         *n;

        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || !int_elem(e->element[0], &a) ||
            !int_elem(e->element[1], &b) || a < 0 || b >= KVC_SLOTS || a > b)
            goto bad;
        m = e->element[2];
        if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
            m->element[0]->type != REDIS_REPLY_STRING || !int_elem(m->element[1], &port) ||
            m->element[0]->len >= sizeof(host))
            goto bad;
        if (m->element[0]->len == 0)
            snprintf(host, sizeof(host), "%s", from->host);
        else
            snprintf(host, sizeof(host), "%.*s", (int)m->element[0]->len, m->element[0]->str);
        n = node_get(cl, host, (int)port);
        if (n == NULL)
            goto bad;
        if (!n->in_map)
            masters++;
        n->in_map = true;
        for (long long s = a; s <= b; s++)
            tab[s] = n;
    }
    memcpy(cl->slots, tab, sizeof(cl->slots));
    free(tab);
    cl->map_loaded = true;
    cl->st.masters = masters;
    /* Connections to nodes that own no slot any more go (seeds too: the
     * map names every master).  Never the node whose reply we are in. */
    for (unsigned i = 0; i < cl->nnodes;) {
        if (!cl->nodes[i]->in_map && cl->nodes[i] != from)
            node_drop(cl, i);
        else
            i++;
    }
    return GP_EOK;
bad:
    free(tab);
    for (unsigned i = 0; i < cl->nnodes; i++) /* keep the old map */
        cl->nodes[i]->in_map = false;
    for (unsigned s = 0; s < KVC_SLOTS; s++)
        if (cl->slots[s] != NULL)
            cl->slots[s]->in_map = true;
    return GP_EINVAL;
}

typedef struct refresh_ctx {
    struct kvc *cl;
    kvc_node   *from;
} refresh_ctx;

static void
refresh_later(struct kvc *cl)
{
    cl->refresh_wanted = true;
    if (!ev_is_active(&cl->w_refresh) && !cl->freeing) {
        ev_timer_set(&cl->w_refresh, gp_backoff_next_ms(&cl->refresh_bo) / 1000.0, 0.);
        ev_timer_start(cl->loop, &cl->w_refresh);
    }
}

static void
kvc_slots_cb(void *arg, const redisReply *r, gp_err err)
{
    refresh_ctx *rc = arg;
    struct kvc  *cl = rc->cl;
    kvc_node    *from = NULL;
    gp_err       e = err;

    kvc_enter(cl);
    cl->outstanding--;
    cl->refresh_inflight = false;
    for (unsigned i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i] == rc->from)
            from = rc->from;               /* still ours */
    free(rc);
    if (cl->freeing) {
        kvc_leave(cl);
        return;
    }
    if (e == GP_EOK && r->type == REDIS_REPLY_ERROR)
        e = GP_EUNAVAIL;
    if (e == GP_EOK && from == NULL)
        e = GP_EUNAVAIL;
    if (e == GP_EOK)
        e = apply_slots(cl, r, from);
    if (e != GP_EOK) {
        GP_WARN("redis_cluster_slots_failed", "err=%s", gp_err_name(e));
        refresh_later(cl);
    } else {
        gp_backoff_reset(&cl->refresh_bo);
        cl->refresh_wanted = false;
        GP_DEBUG("redis_cluster_map", "masters=%u", cl->st.masters);
    }
    kvc_update_ready(cl);
    if (cl->refresh_again) {
        cl->refresh_again = false;
        kvc_refresh(cl);
    }
    kvc_leave(cl);
}

static void
ensure_seeds(struct kvc *cl)
{
    for (unsigned i = 0; i < cl->nseeds; i++)
        (void)node_get_addr(cl, cl->seeds[i], strlen(cl->seeds[i]));
}

/* One CLUSTER SLOTS in flight at a time; asks meanwhile make one more. */
static void
kvc_refresh(struct kvc *cl)
{
    static const char cluster_slots[] = "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";
    kvc_node    *n;
    refresh_ctx *rc;

    if (cl->freeing)
        return;
    if (cl->refresh_inflight) {
        cl->refresh_again = true;
        return;
    }
    if (cl->refresh_last > 0 && gp_mono_s() - cl->refresh_last < KVC_REFRESH_MIN_S) {
        /* a MOVED storm (or nodes that disagree while gossip converges)
         * asks once per interval at most */
        cl->refresh_wanted = true;
        if (!ev_is_active(&cl->w_refresh)) {
            ev_timer_set(&cl->w_refresh,
                         KVC_REFRESH_MIN_S - (gp_mono_s() - cl->refresh_last), 0.);
            ev_timer_start(cl->loop, &cl->w_refresh);
        }
        return;
    }
    n = node_any_up(cl);
    if (n == NULL) {
        ensure_seeds(cl);                  /* a node that connects asks again */
        cl->refresh_wanted = true;
        return;
    }
    rc = malloc(sizeof(*rc));
    if (rc == NULL) {
        refresh_later(cl);
        return;
    }
    rc->cl = cl;
    rc->from = n;
    if (kvn_send(n->conn, kvc_slots_cb, rc, cluster_slots, sizeof(cluster_slots) - 1,
                 gp_mono_s() + cl->timeout) != GP_EOK) {
        free(rc);
        refresh_later(cl);
        return;
    }
    cl->outstanding++;
    cl->refresh_inflight = true;
    cl->refresh_last = gp_mono_s();
    cl->st.refreshes++;
}

static void
kvc_refresh_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct kvc *cl = GP_CONTAINER_OF(w, struct kvc, w_refresh);

    (void)loop;
    (void)revents;
    kvc_enter(cl);
    kvc_refresh(cl);
    kvc_leave(cl);
}

/* ---- commands ------------------------------------------------------------ */

static void cmd_reply_cb(void *arg, const redisReply *r, gp_err err);
static void cmd_fan_cb(void *arg, const redisReply *r, gp_err err);

static void
cmd_unwait(kvc_req *c)
{
    struct kvc *cl = c->cl;

    if (!c->waiting)
        return;
    ev_timer_stop(cl->loop, &c->w);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        cl->wait = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    c->waiting = false;
}

static void
cmd_destroy(kvc_req *c)
{
    redisFreeCommand(c->buf);
    free(c->fan_msg);
    free(c);
}

/* The one callback of a command. */
static void
cmd_finish(kvc_req *c, const redisReply *r, gp_err err)
{
    struct kvc *cl = c->cl;

    cmd_unwait(c);
    cl->inflight--;
    if (err == GP_ETIMEOUT)
        cl->st.timeouts++;
    else if (err != GP_EOK || (r != NULL && r->type == REDIS_REPLY_ERROR))
        cl->st.errors++;
    if (c->cb != NULL)
        c->cb(c->arg, err == GP_EOK ? r : NULL, err);
    cmd_destroy(c);
}

/* Sends c where it goes now.  No callback on failure. */
static gp_err
cmd_send(kvc_req *c)
{
    struct kvc *cl = c->cl;
    kvc_node   *n;
    gp_err      e;

    if (c->all) {
        unsigned k = 0;

        for (unsigned i = 0; i < cl->nnodes; i++)
            if (cl->nodes[i]->in_map && !node_up(cl->nodes[i]))
                return GP_EUNAVAIL;
        if (!cl->map_loaded)
            return GP_EUNAVAIL;
        c->fan_left = 0;
        for (unsigned i = 0; i < cl->nnodes; i++) {
            if (!cl->nodes[i]->in_map)
                continue;
            e = kvn_send(cl->nodes[i]->conn, cmd_fan_cb, c, c->buf, c->len, c->deadline);
            if (e != GP_EOK) {
                if (k == 0)
                    return e;
                /* sent to some: the rest count as failed answers */
                if (c->fan_err == GP_EOK)
                    c->fan_err = e;
                continue;
            }
            k++;
            c->fan_left++;
            cl->outstanding++;
        }
        return k ? GP_EOK : GP_EUNAVAIL;
    }
    if (c->ask[0] != '\0') {
        n = node_get_addr(cl, c->ask, strlen(c->ask));
        if (!node_up(n))
            return GP_EUNAVAIL;
        /* pipelined: the next command on this connection is ours */
        if ((e = kvn_send(n->conn, NULL, NULL, "*1\r\n$6\r\nASKING\r\n", 16, c->deadline)) !=
            GP_EOK)
            return e;
    } else {
        n = c->slot >= 0 ? cl->slots[c->slot] : NULL;
        if (n == NULL)
            n = node_any_up(cl);
        if (!node_up(n))
            return GP_EUNAVAIL;
    }
    e = kvn_send(n->conn, cmd_reply_cb, c, c->buf, c->len, c->deadline);
    if (e == GP_EOK)
        cl->outstanding++;
    return e;
}

static void cmd_resend(kvc_req *c);

static void
cmd_wait_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    kvc_req    *c = GP_CONTAINER_OF(w, kvc_req, w);
    struct kvc *cl = c->cl;

    (void)loop;
    (void)revents;
    kvc_enter(cl);
    cmd_unwait(c);
    cmd_resend(c);
    kvc_leave(cl);
}

/* Waits a backoff delay, then resends; TIMEOUT if the deadline is nearer. */
static void
cmd_wait(kvc_req *c)
{
    struct kvc *cl = c->cl;
    double      d = gp_backoff_next_ms(&c->bo) / 1000.0;
    double      left = c->deadline - gp_mono_s();

    if (cl->freeing) {
        cmd_finish(c, NULL, GP_EUNAVAIL);
        return;
    }
    if (left < 0.02) {                     /* no time for one more try */
        cmd_finish(c, NULL, GP_ETIMEOUT);
        return;
    }
    if (d > left - 0.01)
        d = left - 0.01;                   /* the last try just before the deadline */
    ev_timer_init(&c->w, cmd_wait_timer_cb, d, 0.);
    ev_timer_start(cl->loop, &c->w);
    c->waiting = true;
    c->prev = NULL;
    c->next = cl->wait;
    if (cl->wait != NULL)
        cl->wait->prev = c;
    cl->wait = c;
}

static void
cmd_resend(kvc_req *c)
{
    struct kvc *cl = c->cl;
    gp_err      e;

    if (cl->freeing) {
        cmd_finish(c, NULL, GP_EUNAVAIL);
        return;
    }
    if (gp_mono_s() >= c->deadline) {
        cmd_finish(c, NULL, GP_ETIMEOUT);
        return;
    }
    e = cmd_send(c);
    if (e == GP_EOK)
        return;
    if (e == GP_EUNAVAIL || e == GP_ETOOBIG) {
        kvc_refresh(cl);
        cmd_wait(c);
        return;
    }
    cmd_finish(c, NULL, e);
}

static bool
err_is(const redisReply *r, const char *word)
{
    size_t n = strlen(word);

    return r->len >= n && strncmp(r->str, word, n) == 0 && (r->len == n || r->str[n] == ' ');
}

/* "MOVED <slot> <host:port>" / "ASK <slot> <host:port>" */
static bool
parse_redirect(const redisReply *r, size_t skip, int *slot, const char **addr, size_t *alen)
{
    const char *p = r->str + skip, *end = r->str + r->len, *sp;
    long        s = 0;

    if (p >= end)
        return false;
    for (; p < end && *p >= '0' && *p <= '9'; p++)
        s = s * 10 + (*p - '0');
    if (p >= end || *p != ' ' || s >= KVC_SLOTS)
        return false;
    p++;
    sp = memchr(p, ' ', (size_t)(end - p));
    *slot = (int)s;
    *addr = p;
    *alen = (size_t)((sp != NULL ? sp : end) - p);
    return *alen > 0 && *alen < KVC_ADDR;
}

/* Follows a MOVED, ASK, TRYAGAIN or CLUSTERDOWN reply: true when the
 * command was sent again (or waits to be), false for any other reply. */
static bool
cmd_redirect(kvc_req *c, const redisReply *r)
{
    struct kvc *cl = c->cl;
    int         slot;
    const char *addr;
    size_t      alen;

    if (r->type != REDIS_REPLY_ERROR || c->hops >= KVC_MAX_HOPS)
        return false;
    if (err_is(r, "MOVED") && parse_redirect(r, 6, &slot, &addr, &alen)) {
        kvc_node *n = node_get_addr(cl, addr, alen);

        cl->st.moved++;
        c->ask[0] = '\0';
        if (n != NULL && c->slot == slot)
            cl->slots[slot] = n;           /* at once; the whole map follows */
        kvc_refresh(cl);
    } else if (err_is(r, "ASK") && parse_redirect(r, 4, &slot, &addr, &alen)) {
        cl->st.ask++;
        memcpy(c->ask, addr, alen);
        c->ask[alen] = '\0';
    } else if (err_is(r, "TRYAGAIN") || err_is(r, "CLUSTERDOWN")) {
        cl->st.tryagain++;
        c->ask[0] = '\0';
        if (err_is(r, "CLUSTERDOWN"))
            kvc_refresh(cl);
        c->hops++;
        cmd_wait(c);
        return true;
    } else {
        return false;
    }
    c->hops++;
    cmd_resend(c);
    return true;
}

static void
cmd_reply_cb(void *arg, const redisReply *r, gp_err err)
{
    kvc_req    *c = arg;
    struct kvc *cl = c->cl;

    kvc_enter(cl);
    cl->outstanding--;
    if (err != GP_EOK || cl->freeing) {
        if (err == GP_EUNAVAIL)
            kvc_refresh(cl);
        cmd_finish(c, NULL, err != GP_EOK ? err : GP_EUNAVAIL);
    } else if (!cmd_redirect(c, r)) {
        cmd_finish(c, r, GP_EOK);
    }
    kvc_leave(cl);
}

/* An answer of one master to a command sent to every master. */
static void
cmd_fan_cb(void *arg, const redisReply *r, gp_err err)
{
    kvc_req    *c = arg;
    struct kvc *cl = c->cl;

    kvc_enter(cl);
    cl->outstanding--;
    c->fan_left--;
    if (c->fan_err == GP_EOK && c->fan_msg == NULL) {
        if (err != GP_EOK) {
            c->fan_err = err;
        } else if (r->type == REDIS_REPLY_ERROR) {
            c->fan_msg = malloc(r->len + 1);
            if (c->fan_msg != NULL) {
                memcpy(c->fan_msg, r->str, r->len);
                c->fan_msg[r->len] = '\0';
                c->fan_msglen = r->len;
            } else {
                c->fan_err = GP_EUNAVAIL;
            }
        }
    }
    if (c->fan_left == 0) {
        if (c->fan_err != GP_EOK) {
            cmd_finish(c, NULL, c->fan_err);
        } else if (c->fan_msg != NULL) {
            redisReply e = {.type = REDIS_REPLY_ERROR, .str = c->fan_msg, .len = c->fan_msglen};

            cmd_finish(c, &e, GP_EOK);
        } else {
            cmd_finish(c, err == GP_EOK ? r : NULL, err);
        }
    }
    kvc_leave(cl);
}

gp_err
kvc_cmd(struct kvc *cl, gp_kv_cb *cb, void *arg, char *buf, size_t len)
{
    kvc_req *c;
    bool     cross;
    gp_err   e;

    if (cl->freeing) {
        redisFreeCommand(buf);
        return GP_EUNAVAIL;
    }
    if (cl->inflight >= (unsigned)GP_KV_MAX_INFLIGHT) {
        redisFreeCommand(buf);
        return GP_ETOOBIG;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        redisFreeCommand(buf);
        return GP_ENOMEM;
    }
    c->cl = cl;
    c->cb = cb;
    c->arg = arg;
    c->buf = buf;
    c->len = len;
    if ((e = route_of(c, &cross)) != GP_EOK) {
        if (cross) {
            cl->st.crossslot++;
            GP_DEBUG("redis_crossslot", "cmd=\"%.*s\"", (int)(len < 40 ? len : 40), buf);
        }
        cmd_destroy(c);
        return e;
    }
    gp_backoff_init(&c->bo, c);
    c->deadline = gp_mono_s() + cl->timeout;
    kvc_enter(cl);
    e = cmd_send(c);
    if (e != GP_EOK) {
        if (e == GP_EUNAVAIL) {
            cl->st.errors++;
            kvc_refresh(cl);
        }
        cmd_destroy(c);
    } else {
        cl->inflight++;
        cl->st.commands++;
    }
    kvc_leave(cl);
    return e;
}

/* ---- for kv.c (kv_int.h) ------------------------------------------------ */

gp_err
kvc_new(struct ev_loop *loop, const gp_kv_opts *opts, gp_kv_conn_cb *conn_cb, void *conn_arg,
        struct kvc **out)
{
    struct kvc *cl;
    const char *p;
    char        one[KVC_ADDR];

    cl = calloc(1, sizeof(*cl));
    if (cl == NULL)
        return GP_ENOMEM;
    cl->handle.cluster = true;
    cl->loop = loop;
    cl->conn_cb = conn_cb;
    cl->conn_arg = conn_arg;
    cl->connect_timeout_ms = opts->connect_timeout_ms;
    cl->command_timeout_ms = opts->command_timeout_ms ? opts->command_timeout_ms : 2000;
    cl->timeout = cl->command_timeout_ms / 1000.0;
    if (snprintf(cl->user, sizeof(cl->user), "%s", opts->user ? opts->user : "") >=
            (int)sizeof(cl->user) ||
        snprintf(cl->password, sizeof(cl->password), "%s", opts->password ? opts->password : "") >=
            (int)sizeof(cl->password)) {
        explicit_bzero(cl->password, sizeof(cl->password));
        free(cl);
        return GP_EINVAL;
    }
    gp_backoff_init(&cl->refresh_bo, cl);
    ev_timer_init(&cl->w_refresh, kvc_refresh_timer_cb, 0., 0.);
    if (opts->seeds == NULL || opts->seeds[0] == '\0') {
        snprintf(one, sizeof(one), "%s:%d",
                 opts->host != NULL && opts->host[0] ? opts->host : "127.0.0.1", opts->port);
        p = one;
    } else {
        p = opts->seeds;
    }
    while (*p != '\0') {
        size_t n = strcspn(p, ", ");
        char (*ns)[KVC_ADDR];

        if (n > 0) {
            if (n >= KVC_ADDR || memchr(p, ':', n) == NULL)
                goto bad;
            ns = realloc(cl->seeds, (cl->nseeds + 1) * sizeof(*ns));
            if (ns == NULL)
                goto bad;
            cl->seeds = ns;
            memcpy(cl->seeds[cl->nseeds], p, n);
            cl->seeds[cl->nseeds][n] = '\0';
            cl->nseeds++;
        }
        p += n;
        p += strspn(p, ", ");
    }
    if (cl->nseeds == 0)
        goto bad;
    ensure_seeds(cl);
    if (cl->nnodes == 0)
        goto bad;
    *out = cl;
    return GP_EOK;
bad:
    for (unsigned i = 0; i < cl->nnodes; i++) {
        kvn_free(cl->nodes[i]->conn);
        free(cl->nodes[i]);
    }
    free(cl->nodes);
    free(cl->seeds);
    free(cl);
    return GP_EINVAL;
}

void
kvc_free(struct kvc *cl)
{
    if (cl->freeing)
        return;
    kvc_enter(cl);
    cl->freeing = true;
    ev_timer_stop(cl->loop, &cl->w_refresh);
    while (cl->wait != NULL)
        cmd_finish(cl->wait, NULL, GP_EUNAVAIL);
    for (unsigned i = 0; i < cl->nnodes; i++) {
        struct kvn *conn = cl->nodes[i]->conn;

        cl->nodes[i]->conn = NULL;
        kvn_free(conn);                    /* pending callbacks: UNAVAIL */
    }
    kvc_leave(cl);
}

bool
kvc_is_connected(const struct kvc *cl)
{
    return cl->ready && !cl->freeing;
}

void
kvc_stats(const struct kvc *cl, gp_kv_stats *out)
{
    *out = cl->st;
    out->inflight = cl->inflight;
    out->oldest_ms = 0;
    out->reconnects = 0;
    for (unsigned i = 0; i < cl->nnodes; i++) {
        gp_kv_stats ns;

        kvn_stats(cl->nodes[i]->conn, &ns);
        out->reconnects += ns.reconnects;
        if (ns.oldest_ms > out->oldest_ms)
            out->oldest_ms = ns.oldest_ms;
    }
}
