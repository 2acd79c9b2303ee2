/* faults.c -- faults of the fleet simulator, from a script or from
 * gp.int.sim.fault.
 *
 * Script lines:  <at> <kind> key=value ...      ("#" starts a comment)
 *   30s site_power_cut site=s0007 duration=60s
 *   45s gpu_xid node=s0003-n01 gpu=0 code=79
 * Times and durations take ms, s, m or h (a bare number is ms; gp/duration.h); <at> is
 * counted from the moment the agents start.  Keys: site node gpu code
 * count duration delay_ms jitter_ms period.  The script is read once and
 * the same script gives the same faults at the same times. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/duration.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "sim.h"

#define DEFAULT_OUTAGE_MS 60000u
#define DEFAULT_FLAP_MS   10000u

typedef struct sched {
    ev_timer      t;
    sim          *s;
    msg_sim_fault f;
    int           line;
    double        at_s;                /* after the agents start */
} sched;

struct sim_script {
    sched *v;
    int    n;
};

/* Undo of a timed fault (the power comes back, the uplink is repaired). */
struct sim_undo {
    ev_timer  t;
    sim      *s;
    sim_undo *next;
    int       kind;                    /* MSG_SIM_FAULT_KIND_* being undone */
    int       target;                  /* site or node index */
};

/* "60s" -> 60000, a bare number is ms (gp/duration.h); false on junk or
 * past 2^32 ms, what a fault's fields hold. */
static bool
parse_ms(const char *v, uint32_t *out)
{
    uint64_t ms;

    if (gp_duration_parse(v, strlen(v), GP_DUR_BARE_MS, UINT32_MAX, &ms) != GP_EOK)
        return false;
    *out = (uint32_t)ms;
    return true;
}

static bool
set_kv(msg_sim_fault *f, const char *k, const char *v)
{
    char    *end;
    long long n = strtoll(v, &end, 10);
    bool     num = end != v && *end == '\0' && n >= 0 && n <= 0x7fffffff;

    if (strcmp(k, "site") == 0)
        return snprintf(f->site, sizeof(f->site), "%s", v) < (int)sizeof(f->site);
    if (strcmp(k, "node") == 0)
        return snprintf(f->node, sizeof(f->node), "%s", v) < (int)sizeof(f->node);
    if (strcmp(k, "gpu") == 0 && num)
        return f->gpu = (int32_t)n, true;
    if (strcmp(k, "code") == 0 && num)
        return f->code = (int32_t)n, true;
    if (strcmp(k, "count") == 0 && num)
        return f->count = (uint32_t)n, true;
    if (strcmp(k, "duration") == 0 || strcmp(k, "duration_ms") == 0)
        return parse_ms(v, &f->duration_ms);
    if (strcmp(k, "delay_ms") == 0 || strcmp(k, "delay") == 0)
        return parse_ms(v, &f->delay_ms);
    if (strcmp(k, "jitter_ms") == 0 || strcmp(k, "jitter") == 0)
        return parse_ms(v, &f->jitter_ms);
    if (strcmp(k, "period") == 0 || strcmp(k, "period_ms") == 0)
        return parse_ms(v, &f->period_ms);
    return false;
}

static int
kind_of(const char *name)
{
    for (int i = 0; i < (int)GP_NELEM(msg_sim_fault_kind_names); i++)
        if (strcmp(msg_sim_fault_kind_names[i], name) == 0)
            return i;
    return -1;
}

/* One line into sc; false with why in err. */
static bool
parse_line(char *line, int lineno, sim_script *sc, char *err, size_t errlen)
{
    char    *save = NULL, *tok = strtok_r(line, " \t\r\n", &save), *kind;
    uint32_t at;
    sched   *q;

    if (tok == NULL || tok[0] == '#')
        return true;
    kind = strtok_r(NULL, " \t\r\n", &save);
    if (!parse_ms(tok, &at) || kind == NULL || kind_of(kind) < 0) {
        snprintf(err, errlen, "line %d: expected '<time> <kind> key=value...'", lineno);
        return false;
    }
    if ((q = realloc(sc->v, sizeof(*q) * (size_t)(sc->n + 1))) == NULL)
        return false;
    sc->v = q;
    q = &sc->v[sc->n++];
    memset(q, 0, sizeof(*q));
    q->line = lineno;
    q->f.kind = kind_of(kind);
    q->at_s = at / 1000.0;
    while ((tok = strtok_r(NULL, " \t\r\n", &save)) != NULL && tok[0] != '#') {
        char *eq = strchr(tok, '=');

        if (eq == NULL || (*eq = '\0', !set_kv(&q->f, tok, eq + 1))) {
            snprintf(err, errlen, "line %d: bad argument '%s'", lineno, tok);
            return false;
        }
    }
    return true;
}

sim_script *
faults_load(const char *path, char *err, size_t errlen)
{
    FILE       *in = fopen(path, "r");
    sim_script *sc = calloc(1, sizeof(*sc));
    char        line[1024];
    int         lineno = 0;
    bool        ok = in != NULL && sc != NULL;

    if (in == NULL)
        snprintf(err, errlen, "cannot open %s", path);
    while (ok && fgets(line, sizeof(line), in) != NULL)
        ok = parse_line(line, ++lineno, sc, err, errlen);
    if (in != NULL)
        fclose(in);
    if (!ok && sc != NULL) {
        free(sc->v);
        free(sc);
        return NULL;
    }
    return sc;
}

static void
sched_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    sched   *q = GP_CONTAINER_OF(w, sched, t);
    char     detail[GP_ERRBUF_LEN] = "";
    uint32_t applied = 0;
    gp_err   rc;

    (void)loop;
    (void)revents;
    rc = fault_apply(q->s, &q->f, &applied, detail, sizeof(detail));
    if (rc != GP_EOK)
        GP_WARN("sim_fault_failed", "line=%d kind=%s code=%s detail=\"%s\"", q->line,
                msg_sim_fault_kind_names[q->f.kind], gp_err_name(rc), detail);
}

void
faults_start(sim *s, sim_script *sc)
{
    s->script = sc;
    for (int i = 0; i < sc->n; i++) {
        sc->v[i].s = s;
        ev_timer_init(&sc->v[i].t, sched_cb, sc->v[i].at_s, 0);
        ev_timer_start(s->loop, &sc->v[i].t);
    }
}

static void
undo_cb(struct ev_loop *loop, ev_timer *w, int revents);

void
faults_free(sim *s)
{
    for (sim_undo *u = s->undos, *n; u != NULL; u = n) {
        n = u->next;
        ev_timer_stop(s->loop, &u->t);
        free(u);
    }
    s->undos = NULL;
    if (s->script != NULL) {
        for (int i = 0; i < s->script->n; i++)
            ev_timer_stop(s->loop, &s->script->v[i].t);
        free(s->script->v);
        free(s->script);
        s->script = NULL;
    }
    for (int i = 0; i < s->f.nnodes; i++)
        ev_timer_stop(s->loop, &s->f.nodes[i].flap);
}

static void
undo_later(sim *s, int kind, int target, uint32_t ms)
{
    sim_undo *u = calloc(1, sizeof(*u));

    if (u == NULL)
        return;
    u->s = s;
    u->kind = kind;
    u->target = target;
    u->next = s->undos;
    s->undos = u;
    ev_timer_init(&u->t, undo_cb, ms / 1000.0, 0);
    ev_timer_start(s->loop, &u->t);
}

static void
set_uplink(sim *s, int i, bool up)
{
    if (s->f.nodes[i].ag != NULL)
        agent_set_connected(s->f.nodes[i].ag, up);
}

static void
node_resume(sim *s, int i)
{
    sim_node *n = &s->f.nodes[i];

    ev_timer_stop(s->loop, &n->flap);
    n->delay_ms = n->jitter_ms = 0;
    n->flap_down = false;
    n->replies_lost = false;
    if (n->ag == NULL) {
        sim_node_up(s, i, 0);
        return;
    }
    agent_pause(n->ag, false);
    agent_set_connected(n->ag, true);
    agent_set_delay(n->ag, 0, 0);
}

static void
undo_one(sim *s, int kind, int i)
{
    sim_node *n = &s->f.nodes[i];

    switch (kind) {
    case MSG_SIM_FAULT_KIND_SITE_POWER_CUT:
    case MSG_SIM_FAULT_KIND_NODE_CRASH:
        sim_node_up(s, i, 0);
        break;
    case MSG_SIM_FAULT_KIND_UPLINK_CUT:
        set_uplink(s, i, true);
        break;
    case MSG_SIM_FAULT_KIND_NODE_STOP:
        if (n->ag != NULL)
            agent_pause(n->ag, false);
        break;
    case MSG_SIM_FAULT_KIND_NODE_FLAP:
        ev_timer_stop(s->loop, &n->flap);
        n->flap_down = false;
        set_uplink(s, i, true);
        break;
    case MSG_SIM_FAULT_KIND_REPLY_LOST:
        n->replies_lost = false;
        break;
    default:                           /* slow, jitter */
        n->delay_ms = kind == MSG_SIM_FAULT_KIND_NODE_SLOW ? 0 : n->delay_ms;
        n->jitter_ms = kind == MSG_SIM_FAULT_KIND_NODE_JITTER ? 0 : n->jitter_ms;
        if (n->ag != NULL)
            agent_set_delay(n->ag, n->delay_ms, n->jitter_ms);
    }
}

static void
undo_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    sim_undo *u = GP_CONTAINER_OF(w, sim_undo, t);
    sim      *s = u->s;
    bool      site = u->kind == MSG_SIM_FAULT_KIND_SITE_POWER_CUT ||
                u->kind == MSG_SIM_FAULT_KIND_UPLINK_CUT;

    (void)loop;
    (void)revents;
    for (sim_undo **p = &s->undos; *p != NULL; p = &(*p)->next)
        if (*p == u) {
            *p = u->next;
            break;
        }
    if (site) {
        const sim_site *st = &s->f.sites[u->target];

        GP_INFO("sim_fault_over", "kind=%s site=%s", msg_sim_fault_kind_names[u->kind], st->id);
        for (int k = 0; k < st->nnodes; k++)
            undo_one(s, u->kind, st->first_node + k);
    } else {
        undo_one(s, u->kind, u->target);
    }
    free(u);
}

static void
flap_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    sim_node *n = GP_CONTAINER_OF(w, sim_node, flap);

    (void)loop;
    (void)revents;
    n->flap_down = !n->flap_down;
    if (n->ag != NULL)
        agent_set_connected(n->ag, !n->flap_down);
}

static gp_err
apply_site(sim *s, const msg_sim_fault *f, uint32_t *applied, char *detail, size_t dlen)
{
    int             si = fleet_find_site(&s->f, f->site);
    const sim_site *st;
    uint32_t        dur = f->duration_ms ? f->duration_ms : DEFAULT_OUTAGE_MS;

    if (si < 0) {
        snprintf(detail, dlen, "no site '%s'", f->site);
        return GP_ENOTFOUND;
    }
    st = &s->f.sites[si];
    for (int k = 0; k < st->nnodes; k++) {
        if (f->kind == MSG_SIM_FAULT_KIND_SITE_POWER_CUT)
            sim_node_down(s, st->first_node + k);
        else
            set_uplink(s, st->first_node + k, false);
    }
    *applied = (uint32_t)st->nnodes;
    undo_later(s, f->kind, si, dur);
    return GP_EOK;
}

static gp_err
apply_gpu(sim *s, int i, const msg_sim_fault *f, char *detail, size_t dlen)
{
    static const gpu_fault_kind map[] = {
        [MSG_SIM_FAULT_KIND_GPU_XID] = GPU_FAULT_XID,
        [MSG_SIM_FAULT_KIND_ECC_BURST] = GPU_FAULT_ECC,
        [MSG_SIM_FAULT_KIND_THERMAL_THROTTLE] = GPU_FAULT_THERMAL,
        [MSG_SIM_FAULT_KIND_GPU_LOST] = GPU_FAULT_LOST,
    };
    sim_node *n = &s->f.nodes[i];
    int64_t   arg = f->kind == MSG_SIM_FAULT_KIND_GPU_XID ? f->code : (int64_t)f->count;

    if (f->gpu < 0 || f->gpu >= n->ngpus) {
        snprintf(detail, dlen, "node %s has %d GPUs", n->id, n->ngpus);
        return GP_ENOTFOUND;
    }
    if (n->gpu == NULL) {              /* a fault before the agents start (admin phase) */
        snprintf(detail, dlen, "node %s is not started yet", n->id);
        return GP_EUNAVAIL;
    }
    return gpu_inject(n->gpu, f->gpu, map[f->kind], arg,
                      (f->duration_ms ? f->duration_ms : DEFAULT_OUTAGE_MS) / 1000.0);
}

static void
apply_node(sim *s, int i, const msg_sim_fault *f)
{
    sim_node *n = &s->f.nodes[i];
    uint32_t  period = f->period_ms ? f->period_ms : DEFAULT_FLAP_MS;

    switch (f->kind) {
    case MSG_SIM_FAULT_KIND_NODE_CRASH:
        sim_node_down(s, i);
        break;
    case MSG_SIM_FAULT_KIND_NODE_STOP:
        if (n->ag != NULL)
            agent_pause(n->ag, true);
        break;
    case MSG_SIM_FAULT_KIND_NODE_RESUME:
        node_resume(s, i);
        return;
    case MSG_SIM_FAULT_KIND_REPLY_LOST:
        n->replies_lost = true;
        break;
    case MSG_SIM_FAULT_KIND_NODE_SLOW:
    case MSG_SIM_FAULT_KIND_NODE_JITTER:
        if (f->kind == MSG_SIM_FAULT_KIND_NODE_SLOW)
            n->delay_ms = f->delay_ms;
        else
            n->jitter_ms = f->jitter_ms;
        if (n->ag != NULL)
            agent_set_delay(n->ag, n->delay_ms, n->jitter_ms);
        break;
    case MSG_SIM_FAULT_KIND_NODE_FLAP:
        ev_timer_stop(s->loop, &n->flap);
        ev_timer_init(&n->flap, flap_cb, 0, period / 2000.0);
        ev_timer_start(s->loop, &n->flap);
        if (f->duration_ms == 0)       /* a flap ends by itself after 10 periods */
            undo_later(s, f->kind, i, period * 10);
        break;
    }
    if (f->duration_ms > 0)
        undo_later(s, f->kind, i, f->duration_ms);
}

gp_err
fault_apply(sim *s, const msg_sim_fault *f, uint32_t *applied, char *detail, size_t dlen)
{
    int i;

    *applied = 0;
    if (f->kind == MSG_SIM_FAULT_KIND_SITE_POWER_CUT || f->kind == MSG_SIM_FAULT_KIND_UPLINK_CUT) {
        gp_err rc = apply_site(s, f, applied, detail, dlen);

        if (rc == GP_EOK)
            GP_INFO("sim_fault", "kind=%s site=%s nodes=%u duration_ms=%u",
                    msg_sim_fault_kind_names[f->kind], f->site, *applied, f->duration_ms);
        return rc;
    }
    if ((i = fleet_find_node(&s->f, f->node)) < 0) {
        snprintf(detail, dlen, "no node '%s'", f->node);
        return GP_ENOTFOUND;
    }
    GP_INFO("sim_fault", "kind=%s node=%s gpu=%d", msg_sim_fault_kind_names[f->kind], f->node,
            f->gpu);
    if (f->kind >= MSG_SIM_FAULT_KIND_GPU_XID && f->kind <= MSG_SIM_FAULT_KIND_GPU_LOST) {
        gp_err rc = apply_gpu(s, i, f, detail, dlen);

        *applied = rc == GP_EOK;
        return rc;
    }
    apply_node(s, i, f);
    *applied = 1;
    return GP_EOK;
}

/* ---- the control subject: gp.int.sim.fault ------------------------------------- */

static gp_err
on_fault(gp_req *req, const void *in, void *out)
{
    msg_sim_fault_ack *ack = out;
    char               detail[GP_ERRBUF_LEN] = "";
    gp_err             rc = fault_apply(gp_req_state(req), in, &ack->applied, detail,
                                        sizeof(detail));

    GP_SET_HAS(ack, MSG_SIM_FAULT_ACK__APPLIED);
    return rc == GP_EOK ? rc : gp_req_fail(req, rc, "%s", detail);
}

const gp_route sim_fault_routes[] = {
    {GP_OP_SIM_FAULT, on_fault, 0, 0, NULL, NULL},
    {NULL},
};
