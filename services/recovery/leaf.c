/* leaf.c -- the sites' NATS leaf links as evidence for site events.
 *
 * Every leafz-ms each hub server's /leafz?subs=1 is read.  A leaf server
 * forwards the interest of what connects to it, so a leaf connection's
 * subscription list names the sites behind it: the agents subscribe to
 * their own gp.node.<site>.<node>.* commands (nats-server 2.9's /leafz
 * gives no leaf names).  The connection (hub, ip, port) a site's subjects
 * came over is remembered, so the link stays up while that connection
 * does, even when every agent behind it died (their interest goes with
 * them).  A site whose agents were ever seen behind a leaf is "behind a
 * leaf"; the others reach the hub directly and have no link evidence.
 * Only a complete read (every hub answered) changes a link: a hub that
 * did not answer may hold it.
 *
 * What it tells: a site whose nodes went silent while its link stays up
 * for leaf-dead-ms (how long the hub takes to notice a dead link: its
 * ping interval x max pings out) lost its nodes, not its network: cause
 * power (of the nodes, or the LAN behind the leaf).  A link that dropped
 * means the whole site is off the network: power or uplink, which the
 * nodes' return tells (registered anew: power; heartbeats resumed: uplink).
 * Without a fresh read for leaf-dead-ms, the event goes out without it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/clock.h"
#include "gp/httpc.h"
#include "gp/log.h"
#include "gp/metrics.h"
#include "gp/op.h"
#include "recovery.h"

#define LEAF_MAX_HUBS 8
#define LEAFZ_MAX_BODY (64u << 20)

typedef struct rleaf rleaf;

typedef struct rslot {
    rleaf        *l;
    gp_httpc_req *req;               /* in flight; NULL otherwise */
} rslot;

struct rleaf {
    recovery     *r;
    gp_httpc_url  url[LEAF_MAX_HUBS];
    rslot         slot[LEAF_MAX_HUBS];
    int           nurl, pending, failed;
    uint8_t      *mark;              /* per site index: its subjects seen in this read */
    char        (*via)[RLEAF_CONN];  /* ... and the connection they came over */
    uint32_t      nmark;
    char        (*conn)[RLEAF_CONN]; /* this read's leaf connections */
    uint32_t      nconn, capconn;
    rmap          conn_ix;
    char          prefix[64];        /* '"' + a node subject up to its site */
    uint64_t      fresh_mono;        /* gp_mono_ms of the last complete read; 0: none */
    uint64_t     *m_reads, *m_read_failures;
    double       *m_linked;
};

/* A leaf connection of this read, by key. */
static void
conn_add(rleaf *l, const char *key)
{
    if (rmap_find(&l->conn_ix, l->conn, RLEAF_CONN, key) >= 0)
        return;
    if (l->nconn == l->capconn) {
        uint32_t cap = l->capconn ? l->capconn * 2 : 64;
        char   (*c)[RLEAF_CONN] = realloc(l->conn, cap * sizeof(*c));

        if (c == NULL)
            return;
        l->conn = c;
        l->capconn = cap;
    }
    snprintf(l->conn[l->nconn], RLEAF_CONN, "%s", key);
    if (rmap_put(&l->conn_ix, l->conn, RLEAF_CONN, key, (int32_t)l->nconn) == 0)
        l->nconn++;
}

/* Marks every site named by a node subject (the contract's node
 * operations, up to their {site}) in [p, end). */
static void
mark_sites(rleaf *l, const char *p, const char *end, const char *key)
{
    const char *pre = l->prefix;
    char        id[GP_MAX_ID + 1];

    for (p = strstr(p, pre); p != NULL && p < end; p = strstr(p, pre)) {
        size_t  n;
        rsite  *s;
        size_t  ix;

        p += strlen(pre);
        n = strcspn(p, ".\"");
        if (n == 0 || n > GP_MAX_ID || p[n] != '.')
            continue;
        memcpy(id, p, n);
        id[n] = '\0';
        if ((s = recovery_site(l->r, id)) == NULL || (ix = (size_t)(s - l->r->sites)) >= l->nmark)
            continue;
        l->mark[ix] = 1;
        snprintf(l->via[ix], RLEAF_CONN, "%s", key);
    }
}

/* One hub's /leafz: each leaf object from its "ip" to the next one's
 * (nats-server writes ip and port before the subscription list). */
static void
scan(rleaf *l, int hub, const char *body)
{
    static const char ipk[] = "\"ip\":";
    const char       *p = strstr(body, ipk), *next, *q;
    char              ip[64], key[RLEAF_CONN];
    long              port;

    for (; p != NULL; p = next) {
        next = strstr(p + 1, ipk);
        if (sscanf(p + sizeof(ipk) - 1, " \"%63[^\"]\"", ip) != 1 ||
            (q = strstr(p, "\"port\":")) == NULL || (next != NULL && q > next))
            continue;
        port = strtol(q + 7, NULL, 10);
        snprintf(key, sizeof(key), "%d|%s|%ld", hub, ip, port);
        conn_add(l, key);
        mark_sites(l, p, next != NULL ? next : p + strlen(p), key);
    }
}

static double
since_s(uint64_t wall_ms)
{
    uint64_t now = gp_wall_ms();

    return now > wall_ms ? (double)(now - wall_ms) / 1000.0 : 0.0;
}

/* The read is complete: links change, and sites waiting get their verdict. */
static void
apply(rleaf *l)
{
    recovery *r = l->r;
    uint32_t  linked = 0;

    for (uint32_t i = 0; i < r->nsites && i < l->nmark; i++) {
        rsite *s = &r->sites[i];
        bool   up = l->mark[i] != 0;

        if (up) {
            s->leaf_seen = true;
            snprintf(s->leaf_conn, sizeof(s->leaf_conn), "%s", l->via[i]);
        } else if (s->leaf_conn[0] != '\0') {   /* its agents gone, the link maybe not */
            up = rmap_find(&l->conn_ix, l->conn, RLEAF_CONN, s->leaf_conn) >= 0;
            if (!up)
                s->leaf_conn[0] = '\0';
        }
        if (s->leaf_seen && up != s->leaf_up) {
            s->leaf_up = up;
            s->leaf_at_ms = gp_wall_ms();
            GP_INFO("leaf_link", "site=%s state=%s", s->id, up ? "up" : "dropped");
        }
        linked += up;
    }
    *l->m_linked = linked;
    l->fresh_mono = gp_mono_ms();
}

/* A site waiting for its verdict: the link dropped (power or uplink), or
 * stayed up for leaf-dead-ms (its nodes, not its network), or no read
 * came for that long (announced without leaf evidence). */
static void
verdicts(rleaf *l)
{
    recovery *r = l->r;
    uint64_t  now = gp_mono_ms();
    char      ev[160];

    for (uint32_t i = 0; i < r->nsites; i++) {
        rsite   *s = &r->sites[i];
        uint64_t waited = now - s->first_lost_mono;

        if (!s->unreachable || s->announced)
            continue;
        if (l->fresh_mono == 0 || now - l->fresh_mono > r->cfg->leaf_dead_ms) {
            if (waited >= r->cfg->leaf_dead_ms)
                r->up.site_announce(r, s, MSG_SITE_EVENT_CAUSE_POWER_OR_UPLINK,
                                       "leaf link unknown (no complete /leafz read)");
        } else if (!s->leaf_up) {
            r->up.site_announce(r, s, MSG_SITE_EVENT_CAUSE_POWER_OR_UPLINK, NULL);
        } else if (waited >= r->cfg->leaf_dead_ms) {
            snprintf(ev, sizeof(ev), "its leaf link is still up %.0f s after the first loss: "
                     "the site's network works, its nodes went down (their power, or the LAN "
                     "behind the leaf)", (double)waited / 1000.0);
            r->up.site_announce(r, s, MSG_SITE_EVENT_CAUSE_POWER, ev);
        }
    }
}

static void
read_done(void *arg, gp_err err, int status, const char *body, size_t len)
{
    rslot *sl = arg;
    rleaf *l = sl->l;
    int    hub = (int)(sl - l->slot);

    (void)len;
    sl->req = NULL;
    (*l->m_reads)++;
    if (err != GP_EOK || status != 200) {
        (*l->m_read_failures)++;
        l->failed++;
        GP_DEBUG("leafz_failed", "hub=%s code=%s status=%d", l->url[hub].host, gp_err_name(err),
                 status);
    } else {
        scan(l, hub, body);
    }
    if (--l->pending > 0)
        return;
    if (l->failed == 0)
        apply(l);
    verdicts(l);
}

void
recovery_leaf_run(gp_app *app, void *arg)
{
    recovery *r = arg;
    rleaf    *l = r->leaf;
    uint8_t  *m;

    (void)app;
    if (l == NULL)
        return;
    verdicts(l);
    if (l->pending > 0)
        return;                          /* the last read is still out */
    if (l->nmark < r->nsites) {
        char (*v)[RLEAF_CONN];

        if ((m = realloc(l->mark, r->nsites)) == NULL)
            return;
        l->mark = m;
        if ((v = realloc(l->via, r->nsites * sizeof(*v))) == NULL)
            return;
        l->via = v;
        l->nmark = r->nsites;
    }
    if (l->nmark > 0)
        memset(l->mark, 0, l->nmark);
    rmap_free(&l->conn_ix);
    l->nconn = 0;
    l->failed = 0;
    for (int i = 0; i < l->nurl; i++) {
        l->pending++;
        if (gp_httpc_get(gp_app_loop(r->app), &l->url[i], "/leafz?subs=1",
                         r->cfg->leafz_ms > 1000 ? r->cfg->leafz_ms : 1000, LEAFZ_MAX_BODY,
                         read_done, &l->slot[i], &l->slot[i].req) != GP_EOK) {
            l->pending--;
            l->failed++;
            (*l->m_read_failures)++;
        }
    }
    if (l->pending == 0 && l->failed > 0)
        verdicts(l);
}

bool
recovery_leaf_wait(recovery *r, const rsite *s)
{
    rleaf *l = r->leaf;

    return l != NULL && s->leaf_seen && s->leaf_up && l->fresh_mono != 0 &&
           gp_mono_ms() - l->fresh_mono <= r->cfg->leaf_dead_ms;
}

void
recovery_leaf_evidence(recovery *r, const rsite *s, char *out, size_t n)
{
    out[0] = '\0';
    if (r->leaf == NULL || !s->leaf_seen)
        return;
    if (s->leaf_up)
        snprintf(out, n, "its leaf link is up (so far)");
    else if (s->leaf_at_ms >= s->first_lost_ms)
        snprintf(out, n, "its leaf link dropped %.1f s after the first loss: the site is off "
                 "the network", (double)(s->leaf_at_ms - s->first_lost_ms) / 1000.0);
    else
        snprintf(out, n, "its leaf link dropped %.1f s before the first loss (%.0f s ago): the "
                 "site is off the network", (double)(s->first_lost_ms - s->leaf_at_ms) / 1000.0,
                 since_s(s->leaf_at_ms));
}

gp_err
recovery_leaf_start(recovery *r)
{
    gp_metrics *m = gp_app_metrics(r->app);
    char        list[sizeof(r->cfg->leafz_urls)], err[256], *save = NULL;
    rleaf      *l;

    if (r->cfg->leafz_urls[0] == '\0')
        return GP_EOK;
    if ((l = calloc(1, sizeof(*l))) == NULL)
        return GP_ENOMEM;
    l->r = r;
    /* a JSON string that starts a node subject: the lease's, up to {site} */
    snprintf(l->prefix, sizeof(l->prefix), "\"%.*s", (int)strcspn(GP_OP_NODE_LEASE->address, "{"),
             GP_OP_NODE_LEASE->address);
    snprintf(list, sizeof(list), "%s", r->cfg->leafz_urls);
    for (char *u = strtok_r(list, ", ", &save); u != NULL; u = strtok_r(NULL, ", ", &save)) {
        if (l->nurl == LEAF_MAX_HUBS || gp_httpc_url_parse(u, &l->url[l->nurl], err,
                                                           sizeof(err)) != GP_EOK) {
            GP_ERROR("config_invalid", "option=leafz-urls detail=\"%s\"",
                     l->nurl == LEAF_MAX_HUBS ? "more than 8 hub servers" : err);
            free(l);
            return GP_EINVAL;
        }
        l->slot[l->nurl].l = l;
        l->nurl++;
    }
    l->m_reads = gp_metrics_counter(m, "gp_recovery_leafz_reads_total", NULL,
                                    "Reads of a hub server's /leafz");
    l->m_read_failures = gp_metrics_counter(m, "gp_recovery_leafz_read_failures_total", NULL,
                                            "Reads of /leafz that failed (no answer, not 200)");
    l->m_linked = gp_metrics_gauge(m, "gp_recovery_sites_leaf_linked", NULL,
                                   "Sites whose leaf link the hub lists");
    r->leaf = l;
    GP_INFO("leafz_on", "hubs=%d every_ms=%u leaf_dead_ms=%u", l->nurl, r->cfg->leafz_ms,
            r->cfg->leaf_dead_ms);
    return GP_EOK;
}

/* Before the loop goes: reads still out are cancelled. */
void
recovery_leaf_free(recovery *r)
{
    rleaf *l = r->leaf;

    if (l == NULL)
        return;
    for (int i = 0; i < l->nurl; i++)
        gp_httpc_cancel(l->slot[i].req);
    free(l->mark);
    free(l->via);
    free(l->conn);
    rmap_free(&l->conn_ix);
    free(l);
    r->leaf = NULL;
}
