/* sites.c -- what the recovery service learns of the fleet (kept in
 * fleet.c's view), and what it concludes from nodes going lost together.
 * It calls leaf.c and replace.c; they call back through r->up, which
 * recovery_sites_start sets.
 *
 * Sites come from the registry through gp/inventory.h (its change events,
 * and a full reload every sites-ms): id, region, and how many nodes each
 * has.  Node states come from every NodeState (no queue group: every
 * instance sees all of them, so each judges sites and isolation alike).
 *
 * Site events.  When site-share-pct of a site's nodes are lost and the
 * first of them went within site-window-ms, the site is unreachable: ONE
 * event (gp.int.recovery.site.<site>, kind unreachable, cause
 * "power_or_uplink": from the outside a cut power feed and a cut uplink
 * look the same until the nodes come back).  When enough have come back
 * that the share no longer holds, one event 'returned' says which it was:
 * nodes that registered anew rebooted (their attempts are gone: power),
 * nodes whose heartbeats simply resumed kept running (uplink).  Several
 * instances raise an event once: the first to SET NX its key in Redis
 * publishes it.
 *
 * Isolation.  When isolation-pct of all sites are unreachable, and went
 * silent within isolation-window-ms (and at least isolation-min-sites of
 * them: in a small fleet one site is a large share), the fault is assumed to be the
 * control plane's own (its NATS, its Redis, its uplink): rescheduling is
 * frozen and one event says so.  When the share drops again the freeze
 * ends, and for thaw-ms replacements go at thaw-rate nodes a minute,
 * fleet-wide, so that re-evaluating thousands of nodes is not a storm
 * (Kubernetes' node lifecycle controller: full disruption stops
 * evictions; per-zone eviction rates). */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/clock.h"
#include "gp/id.h"
#include "gp/kv.h"
#include "gp/log.h"
#include "recovery.h"

/* The site's size: the inventory's count, or the nodes seen since when
 * that is larger (a list read before the fleet registered says 0). */
static uint32_t
site_nodes(const rsite *s)
{
    uint32_t n = s->nodes > s->seen ? s->nodes : s->seen;

    return n > 0 ? n : 1;
}

/* ---- events, raised once across instances ---------------------------------------- */

typedef struct once {
    recovery *r;
    int       kind;                 /* 0 site, 1 isolation */
    union {
        msg_site_event          site;
        msg_control_plane_event cp;
    } u;
} once;

static void
once_locked(void *arg, const redisReply *rep, gp_err err)
{
    once       *o = arg;
    const char *args[1];

    /* OK: ours to publish; nil: another instance did; an error: published
     * anyway (a duplicate beats a lost event) */
    if (err != GP_EOK || rep->type != REDIS_REPLY_NIL) {
        if (o->kind == 0) {
            args[0] = o->u.site.site;
            gp_app_publish(o->r->app, GP_OP_RECOVERY_SITE, args, &o->u.site);
            GP_INFO("event_published", "kind=site site=%s event=%s cause=%s", o->u.site.site,
                    msg_site_event_kind_names[o->u.site.kind],
                    msg_site_event_cause_names[o->u.site.cause]);
        } else {
            gp_app_publish(o->r->app, GP_OP_RECOVERY_ISOLATION, NULL, &o->u.cp);
            GP_INFO("event_published", "kind=isolation state=%s",
                    msg_control_plane_event_state_names[o->u.cp.state]);
        }
    }
    free(o);
}

/* key names the episode: the same for every instance that sees it */
static void
raise_once(once *o, const char *key, unsigned ttl_ms)
{
    if (gp_kv_cmdf(gp_app_kv(o->r->app), once_locked, o, "SET %s 1 NX PX %u", key, ttl_ms) !=
        GP_EOK)
        once_locked(o, NULL, GP_EUNAVAIL);
}

static void
site_event(recovery *r, rsite *s, int32_t kind, int32_t cause, const char *evidence)
{
    once *o = calloc(1, sizeof(*o));
    char  key[160];

    (*r->m_site_events[kind])++;
    GP_WARN("site_event", "site=%s region=%s kind=%s cause=%s nodes=%u lost=%u rebooted=%u "
            "resumed=%u evidence=\"%s\"", s->id, s->region, msg_site_event_kind_names[kind],
            msg_site_event_cause_names[cause], s->nodes, s->lost, s->rebooted, s->resumed,
            evidence);
    if (o == NULL)
        return;
    o->r = r;
    o->kind = 0;
    snprintf(o->u.site.site, sizeof(o->u.site.site), "%s", s->id);
    snprintf(o->u.site.region, sizeof(o->u.site.region), "%s", s->region);
    o->u.site.kind = kind;
    o->u.site.cause = cause;
    o->u.site.nodes = site_nodes(s);
    o->u.site.lost = s->lost;
    o->u.site.rebooted = s->rebooted;
    o->u.site.resumed = s->resumed;
    o->u.site.since_ms = s->since_ms;
    o->u.site.at_ms = gp_wall_ms();
    snprintf(o->u.site.evidence, sizeof(o->u.site.evidence), "%s", evidence);
    GP_SET_HAS(&o->u.site, MSG_SITE_EVENT__REGION);
    GP_SET_HAS(&o->u.site, MSG_SITE_EVENT__REBOOTED);
    GP_SET_HAS(&o->u.site, MSG_SITE_EVENT__RESUMED);
    GP_SET_HAS(&o->u.site, MSG_SITE_EVENT__SINCE_MS);
    GP_SET_HAS(&o->u.site, MSG_SITE_EVENT__EVIDENCE);
    snprintf(key, sizeof(key), "gp:recovery:once:site:%s:%s:%llu", s->id,
             msg_site_event_kind_names[kind], (unsigned long long)(s->since_ms / 10000));
    raise_once(o, key, 600000);
}

/* ---- isolation --------------------------------------------------------------------- */

static uint32_t
silent_sites(const recovery *r, uint64_t now)
{
    uint32_t n = 0;

    for (uint32_t i = 0; i < r->nsites; i++)
        n += r->sites[i].unreachable && now - r->sites[i].since_ms <= r->cfg->isolation_window_ms;
    return n;
}

static uint32_t
unreachable_sites(const recovery *r)
{
    uint32_t n = 0;

    for (uint32_t i = 0; i < r->nsites; i++)
        n += r->sites[i].unreachable;
    return n;
}

static void
isolation_event(recovery *r, int32_t state, uint32_t silent, const char *why)
{
    once *o = calloc(1, sizeof(*o));
    char  key[96];

    (*r->m_isolation_events[state])++;
    GP_ERROR("control_plane_isolation", "state=%s sites_silent=%u sites=%u threshold_pct=%u "
             "reason=\"%s\"", msg_control_plane_event_state_names[state], silent, r->nsites,
             r->cfg->isolation_pct, why);
    if (o == NULL)
        return;
    o->r = r;
    o->kind = 1;
    o->u.cp.state = state;
    o->u.cp.sites_silent = silent;
    o->u.cp.sites = r->nsites;
    o->u.cp.threshold_pct = r->cfg->isolation_pct;
    o->u.cp.at_ms = gp_wall_ms();
    snprintf(o->u.cp.reason, sizeof(o->u.cp.reason), "%s", why);
    GP_SET_HAS(&o->u.cp, MSG_CONTROL_PLANE_EVENT__THRESHOLD_PCT);
    GP_SET_HAS(&o->u.cp, MSG_CONTROL_PLANE_EVENT__REASON);
    snprintf(key, sizeof(key), "gp:recovery:once:isolation:%s:%llu",
             msg_control_plane_event_state_names[state],
             (unsigned long long)(o->u.cp.at_ms / 60000));
    raise_once(o, key, 120000);
}

/* Freeze when the share of sites silent at once crosses the threshold;
 * thaw when the unreachable ones fall below it again. */
static void
isolation_check(recovery *r)
{
    uint64_t now = gp_wall_ms();
    uint32_t silent = silent_sites(r, now), down = unreachable_sites(r);
    char     why[200];

    if (r->nsites == 0)
        return;
    if (!r->frozen && silent >= r->cfg->isolation_min_sites &&
        (uint64_t)silent * 100 >= (uint64_t)r->cfg->isolation_pct * r->nsites) {
        r->frozen = true;
        snprintf(why, sizeof(why), "%u of %u sites went silent within %u s: assumed a fault of "
                 "the control plane (NATS, Redis, its uplink); rescheduling frozen", silent,
                 r->nsites, r->cfg->isolation_window_ms / 1000);
        isolation_event(r, MSG_CONTROL_PLANE_EVENT_STATE_FROZEN, silent, why);
    } else if (r->frozen &&
               (uint64_t)down * 100 < (uint64_t)r->cfg->isolation_pct * r->nsites) {
        r->frozen = false;
        gp_kv_cmdf(gp_app_kv(r->app), NULL, NULL, "DEL gp:recovery:frozen");
        r->thaw_until = gp_mono_ms() + r->cfg->thaw_ms;
        r->thaw_bucket = (rbucket){0};
        snprintf(why, sizeof(why), "contact returned (%u of %u sites still unreachable): "
                 "replacing at most %u nodes a minute for %u s", down, r->nsites,
                 r->cfg->thaw_rate, r->cfg->thaw_ms / 1000);
        isolation_event(r, MSG_CONTROL_PLANE_EVENT_STATE_THAWING, down, why);
    }
    *r->m_frozen = r->frozen;
    *r->m_unreachable = down;
}

/* ---- node states -------------------------------------------------------------------- */

static bool
site_share(const recovery *r, const rsite *s)
{
    uint32_t nodes = site_nodes(s);

    return (uint64_t)s->lost * 100 >= (uint64_t)r->cfg->site_share_pct * nodes;
}

/* The unreachable event: the losses, what the leaf link says (leaf.c;
 * its own words when it decided the cause), and what is still open. */
static void
site_announce(recovery *r, rsite *s, int32_t cause, const char *leaf_evidence)
{
    char ev[512], leaf[160] = "", rtt[64] = "";

    if (s->announced)
        return;
    s->announced = true;
    if (leaf_evidence != NULL)
        snprintf(leaf, sizeof(leaf), "%s", leaf_evidence);
    else
        recovery_leaf_evidence(r, s, leaf, sizeof(leaf));
    if (s->rtt_n > 0)
        snprintf(rtt, sizeof(rtt), ", their last uplink RTT %.0f ms (max %.0f)",
                 s->rtt_sum / s->rtt_n, s->rtt_max);
    snprintf(ev, sizeof(ev), "%u of %u nodes lost within %.1f s (no heartbeat, no lease "
             "renewal%s)%s%s%s", s->lost, site_nodes(s),
             (double)(s->unreachable_ms - s->first_lost_ms) / 1000.0, rtt, leaf[0] ? "; " : "",
             leaf,
             cause == MSG_SITE_EVENT_CAUSE_POWER_OR_UPLINK ? "; power or uplink: their return "
             "tells" : "");
    site_event(r, s, MSG_SITE_EVENT_KIND_UNREACHABLE, cause, ev);
}

/* The last telemetry before the silence: the registry's lost reason ends
 * with the node's last measured uplink RTT ("..., uplink RTT 35 ms)"; -1
 * when it never had one).  Per episode: the largest and the mean. */
static void
last_rtt(rsite *s, const char *reason)
{
    const char *p = strstr(reason, "uplink RTT ");
    double      v;

    if (s->lost == 0)
        s->rtt_n = 0, s->rtt_sum = s->rtt_max = 0;
    if (p == NULL || sscanf(p + 11, "%lf", &v) != 1 || v < 0)
        return;
    s->rtt_n++;
    s->rtt_sum += v;
    if (v > s->rtt_max)
        s->rtt_max = v;
}

/* True when the site turned unreachable.  Behind a leaf link that is
 * still up, the event waits for leaf.c's verdict (the hub may not have
 * seen the link die yet). */
static bool
went_lost(recovery *r, rsite *s)
{
    uint64_t now = gp_wall_ms();

    if (s->lost++ == 0) {
        s->first_lost_ms = now;
        s->first_lost_mono = gp_mono_ms();
    }
    if (s->unreachable || !site_share(r, s) ||
        now - s->first_lost_ms > r->cfg->site_window_ms)
        return false;
    s->unreachable = true;
    s->unreachable_ms = now;
    s->since_ms = s->first_lost_ms;
    s->rebooted = s->resumed = s->restarted = 0;
    s->announced = false;
    if (recovery_leaf_wait(r, s))
        GP_INFO("site_unreachable_pending", "site=%s lost=%u reason=\"its leaf link is up: "
                "waiting for the hub to tell a dead link from dead nodes\"", s->id, s->lost);
    else
        site_announce(r, s, MSG_SITE_EVENT_CAUSE_POWER_OR_UPLINK, NULL);
    return true;
}

enum { BACK_RESUMED, BACK_REBOOTED, BACK_RESTARTED };

/* How a node came back, from the registry's reason: heartbeats resumed
 * (its agent kept running), registered with a new boot id (rebooted:
 * power), registered with the same one (only its agent restarted). */
static int
back_how(const char *reason)
{
    if (strncmp(reason, "registered", 10) != 0)
        return BACK_RESUMED;
    return strstr(reason, "same boot") != NULL ? BACK_RESTARTED : BACK_REBOOTED;
}

/* True when the site stopped being unreachable. */
static bool
came_back(recovery *r, rsite *s, int how)
{
    char ev[256];
    bool power;

    if (s->lost > 0)
        s->lost--;
    if (!s->unreachable)
        return false;
    if (!s->announced)                 /* back before the leaf verdict */
        site_announce(r, s, MSG_SITE_EVENT_CAUSE_POWER_OR_UPLINK, NULL);
    if (how == BACK_REBOOTED)
        s->rebooted++;
    else if (how == BACK_RESTARTED)
        s->restarted++;
    else
        s->resumed++;
    if (site_share(r, s))
        return false;
    s->unreachable = false;
    snprintf(ev, sizeof(ev), "%u node(s) came back rebooted (new boot id, attempts gone), "
             "%u resumed heartbeats with their agents running, %u restarted only their agent; "
             "out for %.0f s", s->rebooted, s->resumed, s->restarted,
             (double)(gp_wall_ms() - s->since_ms) / 1000.0);
    power = s->rebooted > 0 && s->rebooted >= s->resumed + s->restarted;
    site_event(r, s, MSG_SITE_EVENT_KIND_RETURNED,
               power ? MSG_SITE_EVENT_CAUSE_POWER : MSG_SITE_EVENT_CAUSE_UPLINK, ev);
    return true;
}

static void
on_node_state(void *arg, const gp_bus_msg *m)
{
    recovery      *r = arg;
    msg_node_state st = {0};
    rsite         *s;
    rnode         *n;
    bool           lost, changed = false;

    if (gp_msg_decode(&msg_node_state_desc, m->data, m->len, &st, NULL, 0) != GP_EOK ||
        !gp_id_ok(st.site) || !gp_id_ok(st.node))
        return;
    lost = st.state == MSG_NODE_STATE_STATE_LOST;
    if ((s = recovery_site_get(r, st.site)) == NULL ||
        (n = recovery_node_get(r, st.node, (int32_t)(s - r->sites))) == NULL)
        return;
    if (lost && !n->lost) {
        n->lost = true;
        last_rtt(s, st.reason);
        (*r->m_lost_seen)++;
        changed = went_lost(r, s);
        recovery_node_lost(r, st.site, st.node, st.at_ms, st.reason);
    } else if (!lost && n->lost) {
        n->lost = false;
        changed = came_back(r, s, back_how(st.reason));
        recovery_node_back(r, st.node, st.at_ms);
    }
    /* the freeze depends only on which sites are unreachable: a walk over
     * every site is needed only when one of them changed (a fleet-wide
     * outage is 100,000 node events) */
    if (changed)
        isolation_check(r);
}

/* ---- the site inventory ---------------------------------------------------------------- */

/* A site put (new, changed, or repeated by a reload).  A deleted site
 * keeps its record: its episode (an open unreachable event) still ends
 * the way it would have. */
static void
on_site(void *arg, gp_inv_what what, const char *id, const struct msg_site *m)
{
    recovery *r = arg;
    rsite    *s;

    if (what != GP_INV_PUT || (s = recovery_site_get(r, id)) == NULL)
        return;
    snprintf(s->region, sizeof(s->region), "%s", m->region);
    s->nodes = (uint32_t)m->nodes;
    recovery_region_add(r, m->region);
}

static void
on_loaded(void *arg, bool first)
{
    recovery *r = arg;
    uint32_t  n = gp_inventory_nsites(r->inv);

    if (first || n != r->sites_last)
        GP_INFO("sites_loaded", "sites=%u regions=%u", n, r->nregions);
    r->sites_last = n;
    isolation_check(r);
}

gp_err
recovery_sites_start(recovery *r)
{
    gp_metrics *m = gp_app_metrics(r->app);
    const char *any[2] = {NULL, NULL};
    char        pat[GP_MAX_SUBJECT];
    gp_err      rc;

    r->up.site_announce = site_announce;
    gp_metrics_counters(m, "gp_recovery_site_events_total", "kind", msg_site_event_kind_names, 2,
                        "Site events raised by this instance (unreachable, returned)",
                        r->m_site_events);
    gp_metrics_counters(m, "gp_recovery_isolation_events_total", "state",
                        msg_control_plane_event_state_names, 2,
                        "Control-plane isolation freezes and thaws", r->m_isolation_events);
    r->m_frozen = gp_metrics_gauge(m, "gp_recovery_frozen", NULL,
                                   "1 while rescheduling is frozen (control-plane isolation)");
    r->m_unreachable = gp_metrics_gauge(m, "gp_recovery_sites_unreachable", NULL,
                                        "Sites with an open unreachable event");
    r->m_lost_seen = gp_metrics_counter(m, "gp_recovery_nodes_lost_total", NULL,
                                        "Nodes seen going lost");
    rc = gp_op_pattern(GP_OP_NODE_STATE, pat, sizeof(pat), any);
    if (rc == GP_EOK)   /* every instance follows every node: no queue group */
        rc = gp_bus_sub_new(gp_app_bus(r->app), pat, NULL, on_node_state, r, &r->state_sub);
    if (rc == GP_EOK)
        rc = gp_inventory_new(r->app, &(gp_inventory_opts){.resync_ms = r->cfg->sites_ms,
                                                           .on_site = on_site,
                                                           .on_loaded = on_loaded, .arg = r},
                              &r->inv);
    return rc;
}

void
recovery_sites_free(recovery *r)
{
    r->state_sub = NULL;                   /* freed with the bus */
    gp_inventory_free(r->inv);
    r->inv = NULL;
    rmap_free(&r->site_ix);
    rmap_free(&r->node_ix);
    free(r->sites);
    free(r->nodes);
    free(r->regions);
}
