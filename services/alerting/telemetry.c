/* telemetry.c -- heartbeats in: every node's beat (its own queue group,
 * beside the registry's and metering's) is read for the telemetry
 * signals (a GPU lost, uncorrectable ECC errors, the hottest GPU, the
 * throttle reasons, the disk, the uplink RTT) and every telemetry rule is
 * evaluated on them.  PostgreSQL is told only when a rule's answer for a
 * node changes: each instance remembers, per node, which rules held at
 * its last look.  A node's beats go to any instance of the queue group,
 * so that memory is forgotten every forget-ms and told again: an
 * instance that missed the change (another one saw it) catches up within
 * that time.  raise and clear are idempotent, so telling twice is fine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/log.h"
#include "gp/shard.h"
#include "alerting.h"
#include "diag.h"

typedef struct tmem {
    char     node[64];
    uint64_t known, holds;           /* bit i: rule i */
} tmem;

static tmem *
tmem_get(alerting *a, const char *node)
{
    unsigned i = gp_fnv1a(node) % AL_NODES_CAP;

    for (unsigned n = 0; n < AL_NODES_CAP; n++, i = (i + 1) % AL_NODES_CAP) {
        tmem *m = &((tmem *)a->tmem)[i];

        if (m->node[0] == '\0') {
            if (a->ntmem >= AL_NODES_CAP * 3 / 4)
                return NULL;              /* full: every beat goes to PostgreSQL */
            snprintf(m->node, sizeof(m->node), "%s", node);
            a->ntmem++;
            return m;
        }
        if (strcmp(m->node, node) == 0)
            return m;
    }
    return NULL;
}

gp_err
alerting_telemetry_init(alerting *a)
{
    a->tmem = calloc(AL_NODES_CAP, sizeof(tmem));
    return a->tmem ? GP_EOK : GP_ENOMEM;
}

void
alerting_telemetry_free(alerting *a)
{
    free(a->tmem);
    a->tmem = NULL;
}

void
alerting_forget_run(gp_app *app, void *arg)
{
    alerting *a = arg;

    (void)app;
    for (unsigned i = 0; i < AL_NODES_CAP; i++)
        ((tmem *)a->tmem)[i].known = 0;
}

/* What one beat says, and the words for each signal's {reason}. */
typedef struct reading {
    const char *gpu_state;
    double      dbe, temp, rtt;
    const char *throttle[16];
    unsigned    nthrottle;
    const char *disk;
    char        why[AL_SIG_COUNT][200];
    char        xids[80];                /* this beat's XIDs, "GPU 0 XID 79, ..." */
} reading;

static void
add_throttle(reading *r, const char *name)
{
    for (unsigned i = 0; i < r->nthrottle; i++)
        if (strcmp(r->throttle[i], name) == 0)
            return;
    if (r->nthrottle < 16)
        r->throttle[r->nthrottle++] = name;
}

static void
read_beat(const msg_heartbeat *h, reading *r)
{
    char lost[64] = "", thr[120] = "", xids[80] = "";
    int  hot = -1, dbe_gpu = -1;

    memset(r, 0, sizeof(*r));
    r->gpu_state = "ok";
    for (uint32_t i = 0; i < h->gpus.n; i++) {
        const msg_gpu_telemetry *g = (const msg_gpu_telemetry *)h->gpus.v + i;

        if (g->state == MSG_GPU_TELEMETRY_STATE_LOST) {
            r->gpu_state = "lost";
            snprintf(lost + strlen(lost), sizeof(lost) - strlen(lost), "%s%d",
                     lost[0] ? "," : "", g->index);
        }
        for (uint32_t k = 0; k < g->xids.n; k++)
            snprintf(xids + strlen(xids), sizeof(xids) - strlen(xids), "%sGPU %d XID %d",
                     xids[0] ? ", " : "", g->index, ((const int32_t *)g->xids.v)[k]);
        if ((double)g->ecc_dbe > r->dbe) {
            r->dbe = (double)g->ecc_dbe;
            dbe_gpu = g->index;
        }
        if (hot < 0 || g->temp_c > r->temp) {
            r->temp = g->temp_c;
            hot = g->index;
        }
        for (uint32_t k = 0; k < g->throttle.n; k++) {
            const char *t = msg_gpu_telemetry_throttle_names[((const int32_t *)g->throttle.v)[k]];

            add_throttle(r, t);
            snprintf(thr + strlen(thr), sizeof(thr) - strlen(thr), "%sGPU %d %s",
                     thr[0] ? ", " : "", g->index, t);
        }
    }
    r->disk = msg_heartbeat_disk_names[h->disk];
    r->rtt = h->uplink_rtt_ms;
    /* the words stay the same while the fault does (a firing alert whose
     * summary changes is published again); this beat's XIDs go to the
     * evidence only */
    snprintf(r->why[AL_SIG_GPU_STATE], sizeof(r->why[0]), "GPU %s stopped answering",
             lost[0] ? lost : "-");
    snprintf(r->why[AL_SIG_GPU_ECC_DBE], sizeof(r->why[0]),
             "GPU %d: %.0f uncorrectable (double-bit) ECC error(s) since its last reset",
             dbe_gpu, r->dbe);
    snprintf(r->xids, sizeof(r->xids), "%s", xids);
    snprintf(r->why[AL_SIG_GPU_TEMP], sizeof(r->why[0]), "GPU %d at %.0f C", hot, r->temp);
    snprintf(r->why[AL_SIG_GPU_THROTTLE], sizeof(r->why[0]), "%s", thr[0] ? thr : "none");
    snprintf(r->why[AL_SIG_NODE_DISK], sizeof(r->why[0]), "%s (SMART)", r->disk);
    snprintf(r->why[AL_SIG_NODE_RTT], sizeof(r->why[0]), "uplink RTT %.0f ms", r->rtt);
}

static bool
holds(const al_rule *x, const reading *r)
{
    switch (x->signal) {
    case AL_SIG_GPU_STATE: return al_rule_holds(x, r->gpu_state);
    case AL_SIG_GPU_ECC_DBE: return al_rule_holds_num(x, r->dbe);
    case AL_SIG_GPU_TEMP: return al_rule_holds_num(x, r->temp);
    case AL_SIG_GPU_THROTTLE: return al_rule_holds_set(x, r->throttle, r->nthrottle);
    case AL_SIG_NODE_DISK: return al_rule_holds(x, r->disk);
    case AL_SIG_NODE_RTT: return al_rule_holds_num(x, r->rtt);
    default: return false;
    }
}

typedef struct told {
    alerting *a;
    char      node[64];
    unsigned  rule;
} told;

/* a failure: forget, so the next beat tells it again */
static void
told_done(void *arg, gp_err err)
{
    told *t = arg;
    tmem *m;

    if (err != GP_EOK && (m = tmem_get(t->a, t->node)) != NULL)
        m->known &= ~(1ull << t->rule);
    free(t);
}

static gp_err
on_beat(gp_req *req, const void *in, void *out)
{
    alerting            *a = gp_req_state(req);
    const msg_heartbeat *h = in;
    tmem                *m = tmem_get(a, h->node);
    reading              r;

    (void)out;
    read_beat(h, &r);
    (*a->m_beats)++;
    for (unsigned i = 0; i < a->rules.n && i < 64; i++) {
        const al_rule *x = &a->rules.rule[i];
        bool           now;
        char           summary[256];
        al_diag        d;
        al_vars        v = {.site = h->site, .node = h->node};
        al_raise       ra = {.rule = x, .site = h->site, .node = h->node, .summary = summary,
                             .diag = &d};
        told          *t;

        if (!al_signal_telemetry(x->signal))
            continue;
        now = holds(x, &r);
        if (m != NULL && (m->known >> i & 1) && (bool)(m->holds >> i & 1) == now)
            continue;                            /* no change */
        if (m != NULL) {
            m->known |= 1ull << i;
            m->holds = now ? m->holds | 1ull << i : m->holds & ~(1ull << i);
        }
        ra.region = v.region = alerting_region(a, h->site);
        ra.holds = now;
        v.reason = r.why[x->signal];
        al_diag_telemetry(x->signal, r.why[x->signal], &d);
        if (r.xids[0] != '\0')
            snprintf(d.evidence + strlen(d.evidence), sizeof(d.evidence) - strlen(d.evidence),
                     "; XIDs in this beat: %s", r.xids);
        v.cause = d.cause;
        al_expand(x->summary, &v, summary, sizeof(summary));
        if ((t = calloc(1, sizeof(*t))) == NULL)
            return GP_EOK;
        t->a = a;
        t->rule = i;
        snprintf(t->node, sizeof(t->node), "%s", h->node);
        if (alerting_apply(a, &ra, told_done, t) != GP_EOK)
            told_done(t, GP_EUNAVAIL);
    }
    return GP_EOK;
}

/* A node with attempts beats inside its lease renewal (the scheduler
 * answers it; this route overhears it). */
static gp_err
on_lease(gp_req *req, const void *in, void *out)
{
    const msg_lease_renew *l = in;

    if (!GP_HAS(l, MSG_LEASE_RENEW__BEAT))
        return GP_EOK;
    return on_beat(req, &l->beat, out);
}

const gp_route alerting_beat_routes[] = {
    {GP_OP_NODE_HEARTBEAT, on_beat, GP_R_QUEUE | GP_R_BULK, 0, NULL, NULL},
    {GP_OP_NODE_LEASE, on_lease, GP_R_QUEUE | GP_R_BULK | GP_R_OVERHEAR, 0, NULL, NULL},
    {NULL},
};
