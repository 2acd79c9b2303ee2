/* agent.c -- the node agent core (see agent.h for the contract). */
#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "agent.h"
#include "attempt.h"
#include "gp/call.h"
#include "gp/clock.h"
#include "gp/codec.h"
#include "gp/limits.h"
#include "gp/log.h"

#define GP_MIN(x, y)      ((x) < (y) ? (x) : (y))
/* The most attempts a node holds (running, or exited and not yet reported
 * in a heartbeat): every message that lists them must hold them all. */
#define MAX_ATTEMPTS      GP_MIN(GP_MIN(MSG_LEASE_RENEW_ATTEMPTS_MAXITEMS,                  \
                                        MSG_NODE_REGISTER_ATTEMPTS_MAXITEMS),               \
                                 MSG_HEARTBEAT_ATTEMPTS_MAXITEMS)
#define MAX_THROTTLE      MSG_GPU_TELEMETRY_THROTTLE_MAXITEMS
#define MAX_QUEUED_EVENTS 256      /* attempt events not yet stored (the agent's own bound) */
#define EV_RETRY_MIN_MS   500      /* an unstored event is sent again after this, doubling */
#define EV_RETRY_MAX_MS   15000
#define BACKOFF_MIN_MS    1000
#define BACKOFF_MAX_MS    30000
#define LEASE_CHECK_S     0.2

enum { REQ_NONE, REQ_REGISTER, REQ_LEASE, REQ_EVENT };

typedef struct reqctx reqctx;
typedef struct outmsg outmsg;

/* An attempt event and its message id "<job>.<attempt>.<event>[.<n>]". */
typedef struct outev {
    msg_attempt_event ev;            /* ev.endpoints.v is NULL here: the items are in eps */
    msg_endpoint      eps[MSG_ATTEMPT_EVENT_ENDPOINTS_MAXITEMS];
    char              id[MSG_ATTEMPT_EVENT_JOB_ID_MAXLEN + GP_MAX_ID + 48];
} outev;

/* One register/lease call: its callback may come after agent_free, so the
 * context outlives the agent and just forgets it. */
struct reqctx {
    agent   *a;
    uint64_t token;
    int      kind;
    uint64_t sent_ns;              /* monotonic: when handed to the bus */
    bool     beat;                 /* a renewal that is the node's heartbeat */
    reqctx  *next;
};

/* A message held back by a node_slow / node_jitter fault, or a request the
 * cut uplink lost (it fails with TIMEOUT when its deadline would have). */
struct outmsg {
    ev_timer t;
    agent   *a;
    outmsg  *next;
    reqctx  *ctx;                  /* a register/lease call (built when sent) */
    bool     lost;
    char     subj[GP_MAX_SUBJECT + 1];
    size_t   len;
    char     data[];
};

struct agent {
    struct ev_loop   *loop;
    gp_bus           *bus;
    gpu_backend      *gpu;
    agent_opts        o;
    char              s_reg[GP_MAX_SUBJECT + 1], s_hb[GP_MAX_SUBJECT + 1];
    char              s_lease[GP_MAX_SUBJECT + 1], s_att[GP_MAX_SUBJECT + 1];
    ev_timer          req_t, hb_t, lease_t;
    bool              registered, ever_registered, connected, paused, cut_off, stopped;
    unsigned          hb_ms, lease_ms, backoff_ms;
    int               req_kind;
    uint64_t          req_token;
    uint64_t          lease_base_ms;   /* send time of the newest answered renewal */
    reqctx           *ctxs;            /* calls on the bus */
    double            rtt_ms;
    uint64_t          t0_ms;           /* monotonic */
    uint64_t          seq, rng, last_sample_ms;
    attempt          *atts;
    int               natts;
    /* The attempt event outbox: events until the stream ATTEMPTS stored
     * them, oldest first, one on the wire at a time (a started before its
     * exited); grown on demand up to MAX_QUEUED_EVENTS. */
    outev            *evq;
    int               nevq, capevq;
    bool              ev_inflight;
    uint64_t          ev_token;
    unsigned          ev_retry_ms;
    ev_timer          ev_t;
    uint64_t          ev_dropped;
    gpu_sample        last[GPU_MAX];
    double            power[GPU_MAX];
    unsigned          delay_ms, jitter_ms;
    outmsg           *outq;
};

static void schedule_req(agent *a, double after_s);
static void send_event(agent *a, const msg_attempt_event *ev, const char *id);
static void on_result(agent *a, uint64_t token, int kind, uint64_t sent_ns, gp_err err,
                      bool transport,
                      const msg_node_registered *r, const char *detail);
static void call_now(agent *a, reqctx *ctx);
static void req_send(agent *a, bool beat);

/* The parts of one heartbeat, filled by beat_fill (the arrays it points
 * into live here). */
typedef struct beat_parts {
    msg_heartbeat     hb;
    msg_gpu_telemetry g[GPU_MAX];
    int32_t           thr[GPU_MAX][MAX_THROTTLE];
    msg_attempt_usage u[MAX_ATTEMPTS];
} beat_parts;

static void beat_fill(agent *a, beat_parts *p);
static void beat_sent(agent *a);

/* Durations (usage, leases, uptime, RTT) are monotonic: a step of the date
 * must not bill an hour nor expire a lease. */
static uint64_t
agent_now_ms(agent *a)
{
    (void)a;
    return gp_mono_ms();
}

static const double *agent_gpu_power(agent *a) { return a->power; }
const char *agent_site(const agent *a) { return a->o.site; }
const char *agent_node(const agent *a) { return a->o.node; }
gpu_backend *agent_gpu(agent *a) { return a->gpu; }
bool agent_is_registered(const agent *a) { return a->registered; }
bool agent_is_stopped(const agent *a) { return a->stopped; }

int
agent_attempts_running(const agent *a)
{
    int n = 0;

    for (const attempt *t = a->atts; t != NULL; t = t->next)
        n += !t->done;
    return n;
}

gp_err
agent_inbox_prefix(const char *site, const char *node, char *out, size_t n)
{
    return gp_op_inbox_prefix(GP_INBOX_NODE_INBOX, out, n, (const char *const[]){site, node});
}

/* ---- sending (through the fault hooks) ---------------------------------- */

static void
outmsg_unlink(agent *a, outmsg *m)
{
    for (outmsg **p = &a->outq; *p != NULL; p = &(*p)->next)
        if (*p == m) {
            *p = m->next;
            return;
        }
}

static void
ctx_unlink(agent *a, reqctx *c)
{
    for (reqctx **p = &a->ctxs; *p != NULL; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            return;
        }
}

/* A request's deadline: how long the call waits (below). */
static unsigned req_timeout_ms(const agent *a, int kind);

static void
outmsg_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    outmsg *m = GP_CONTAINER_OF(w, outmsg, t);
    agent  *a = m->a;
    gp_err  rc;

    (void)loop;
    (void)revents;
    outmsg_unlink(a, m);
    if (m->lost) {
        on_result(a, m->ctx->token, m->ctx->kind, 0, GP_ETIMEOUT, true, NULL,
                  "lost on the cut uplink");
        free(m->ctx);
    } else if (m->ctx != NULL) {
        call_now(a, m->ctx);
    } else if (a->connected && !a->paused && !a->stopped) {
        rc = gp_bus_pub(a->bus, m->subj, NULL, m->data, m->len);
        if (rc != GP_EOK)
            GP_DEBUG("agent_publish_failed", "subject=%s code=%s", m->subj, gp_err_name(rc));
    }
    free(m);
}

static void
outmsg_start(agent *a, outmsg *m, double after_s)
{
    ev_timer_init(&m->t, outmsg_cb, after_s, 0);
    ev_timer_start(a->loop, &m->t);
}

/* A request the uplink lost: it fails when its deadline would have. */
static void
lose_request(agent *a, reqctx *ctx)
{
    outmsg *m = calloc(1, sizeof(*m));

    if (m == NULL) {                   /* the next req_fire retries */
        free(ctx);
        return;
    }
    m->a = a;
    m->ctx = ctx;
    m->lost = true;
    m->next = a->outq;
    a->outq = m;
    outmsg_start(a, m, req_timeout_ms(a, ctx->kind) / 1000.0);
}

/* The delay of a node_slow / node_jitter fault, in seconds. */
static double
send_delay_s(agent *a)
{
    double delay = a->delay_ms;

    if (a->jitter_ms > 0)
        delay += gp_rng_unit(&a->rng) * a->jitter_ms;
    return delay / 1000.0;
}

/* Publishes now, or later under a delay fault. */
static void
agent_publish(agent *a, const char *subj, const gp_buf *b)
{
    double  delay = send_delay_s(a);
    outmsg *m;
    gp_err  rc;

    if (!a->connected || a->paused || a->stopped)
        return;
    if (delay <= 0 || (m = calloc(1, sizeof(*m) + b->n)) == NULL) {
        rc = gp_bus_pub(a->bus, subj, NULL, b->p, b->n);
        if (rc != GP_EOK)
            GP_DEBUG("agent_publish_failed", "subject=%s code=%s", subj, gp_err_name(rc));
        return;
    }
    m->a = a;
    snprintf(m->subj, sizeof(m->subj), "%s", subj);
    m->len = b->n;
    memcpy(m->data, b->p, b->n);
    m->next = a->outq;
    a->outq = m;
    outmsg_start(a, m, delay);
}

static void
publish_msg(agent *a, const char *subj, const gp_msg_desc *d, const void *msg)
{
    gp_buf b;

    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    if (gp_msg_encode(d, msg, &b) == GP_EOK)
        agent_publish(a, subj, &b);
    gp_buf_fini(&b);
}

/* ---- requests: register and lease ---------------------------------------- */

/* Renewals are hedged: a node that runs something renews with each
 * heartbeat (renew_gap_ms: a renewal alone only when one is due before
 * the next beat), and while a renewal is unanswered another goes out
 * every renew_hedge_ms, without giving up the earlier ones: each waits
 * for its answer as long as the lease, and whichever answer comes first
 * renews the lease from its own send.  A slow uplink (a reply after 2 s)
 * or a lost message then costs nothing, where a renewal abandoned at its
 * timeout and retried after it lapsed hundreds of thousands of leases per
 * 10,000 node-days on the bad uplinks of detect_bench.  A registration
 * waits lease/6 at most and is retried with backoff. */
static unsigned
hedge_ms(const agent *a)
{
    unsigned sixth = a->lease_ms / 6;

    return sixth < 250 ? 250 : sixth;
}

static unsigned
req_timeout_ms(const agent *a, int kind)
{
    unsigned t = a->o.request_timeout_ms, sixth = hedge_ms(a);

    if (kind == REQ_LEASE)
        return a->lease_ms;
    return t < sixth ? t : sixth;
}

/* A node holds a lease only while it runs something: an idle node's
 * heartbeat is all it sends (one message per interval). */
static bool
busy(const agent *a)
{
    for (const attempt *t = a->atts; t != NULL; t = t->next)
        if (!t->done)
            return true;
    return false;
}

/* A renewal unanswered this long gets a hedge.  Beats carry the renewals
 * 5 s apart in a 9 s lease, so a lost or slow one leaves ~4 s: hedges
 * every lease/12 (+-20%) keep the bad uplinks of detect_bench at fewer
 * lapses than renewals every lease/3 hedged every lease/6 did (424 against
 * 561 per 10,000 node-days; every lease/6 here: 28,927).  A node whose
 * answers come in time sends none. */
static unsigned
renew_hedge_ms(const agent *a)
{
    unsigned t = a->lease_ms / 12;

    return t < 250 ? 250 : t;
}

/* How long after an answered renewal's send the next renewal alone is due.
 * The heartbeat renews the lease of a busy node, so a renewal alone is only
 * the fallback for a beat that went unanswered: due a hedge after the next
 * beat, but early enough to leave two hedges before the lease ends.  Beats
 * slower than that cannot carry the lease: then every lease/3, as before
 * the beat carried it. */
static unsigned
renew_gap_ms(const agent *a)
{
    unsigned h = renew_hedge_ms(a), room = a->lease_ms > 2 * h ? a->lease_ms - 2 * h : 0;

    if (a->hb_ms == 0 || a->hb_ms > room)
        return a->lease_ms / 3;
    return a->hb_ms + h < room ? a->hb_ms + h : room;
}

static void
fill_refs(agent *a, gp_arr *arr, msg_attempt_ref *refs)
{
    arr->v = refs;
    arr->n = 0;
    for (attempt *t = a->atts; t != NULL; t = t->next) {
        if (t->done)
            continue;
        memset(&refs[arr->n], 0, sizeof(refs[0]));
        snprintf(refs[arr->n].job_id, sizeof(refs[0].job_id), "%s", t->job_id);
        refs[arr->n++].attempt = t->num;
    }
}

static long
host_mem_mb(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

    return pages > 0 && psz > 0 ? (long)((long long)pages * psz >> 20) : 0;
}

static void call_cb(void *arg, gp_err err, bool transport, const void *reply, const char *detail);

static gp_err
call_register(agent *a, reqctx *ctx, unsigned timeout_ms)
{
    msg_node_register r;
    msg_gpu           g[GPU_MAX];
    msg_attempt_ref   refs[MAX_ATTEMPTS];
    gpu_info          gi;
    int               n = gpu_count(a->gpu);

    memset(&r, 0, sizeof(r));
    snprintf(r.site, sizeof(r.site), "%s", a->o.site);
    snprintf(r.node, sizeof(r.node), "%s", a->o.node);
    snprintf(r.hostname, sizeof(r.hostname), "%s", a->o.hostname);
    snprintf(r.agent_version, sizeof(r.agent_version), "%s", a->o.version);
    snprintf(r.boot_id, sizeof(r.boot_id), "%s", a->o.boot_id);
    r.cpu_cores = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
    r.mem_mb = (uint32_t)host_mem_mb();
    for (int i = 0; i < n && i < GPU_MAX; i++) {
        memset(&g[i], 0, sizeof(g[i]));
        gpu_info_get(a->gpu, i, &gi);
        g[i].index = i;
        snprintf(g[i].uuid, sizeof(g[i].uuid), "%s", gi.uuid);
        snprintf(g[i].model, sizeof(g[i].model), "%s", gi.model);
        snprintf(g[i].serial, sizeof(g[i].serial), "%s", gi.serial);
        g[i].vram_mb = gi.vram_mb;
        g[i].interconnect = gi.interconnect;
        GP_SET_HAS(&g[i], MSG_GPU__INTERCONNECT);
    }
    r.gpus.v = g;
    r.gpus.n = (uint32_t)(n < GPU_MAX ? n : GPU_MAX);
    fill_refs(a, &r.attempts, refs);
    return gp_call2(a->bus, a->s_reg, &msg_node_register_desc, &r, &msg_node_registered_desc,
                    timeout_ms, call_cb, ctx);
}

/* A renewal that is the heartbeat carries the beat, built now (so one
 * held back by a delay fault reports what the node holds when it leaves). */
static gp_err
call_lease(agent *a, reqctx *ctx, unsigned timeout_ms)
{
    static beat_parts bp;              /* one loop: never two at once */
    msg_lease_renew   r;
    msg_attempt_ref   refs[MAX_ATTEMPTS];
    gp_err            rc;

    memset(&r, 0, sizeof(r));
    fill_refs(a, &r.attempts, refs);
    GP_SET_HAS(&r, MSG_LEASE_RENEW__ATTEMPTS);
    if (ctx->beat) {
        beat_fill(a, &bp);
        r.beat = bp.hb;
        GP_SET_HAS(&r, MSG_LEASE_RENEW__BEAT);
    }
    rc = gp_call2(a->bus, a->s_lease, &msg_lease_renew_desc, &r, &msg_node_registered_desc,
                  timeout_ms, call_cb, ctx);
    if (ctx->beat)
        beat_sent(a);
    return rc;
}

static void
call_cb(void *arg, gp_err err, bool transport, const void *reply, const char *detail)
{
    reqctx *c = arg;
    agent  *a = c->a;

    if (a != NULL) {
        ctx_unlink(a, c);
        on_result(a, c->token, c->kind, c->sent_ns, err, transport, reply, detail);   /* may free a */
    }
    free(c);
}

/* Hands the call to the bus (the request is built now, so a delayed one
 * lists what the node holds when it leaves). */
static void
call_now(agent *a, reqctx *ctx)
{
    gp_err   rc;
    uint64_t token = ctx->token;

    if (a->stopped) {
        free(ctx);
        return;
    }
    if (!a->connected || a->paused) {
        lose_request(a, ctx);
        return;
    }
    ctx->sent_ns = gp_mono_ns();
    ctx->next = a->ctxs;
    a->ctxs = ctx;
    rc = ctx->kind == REQ_LEASE ? call_lease(a, ctx, req_timeout_ms(a, REQ_LEASE))
                                : call_register(a, ctx, req_timeout_ms(a, REQ_REGISTER));
    if (rc != GP_EOK) {                /* not sent: the callback will not come */
        int kind = ctx->kind;

        ctx_unlink(a, ctx);
        free(ctx);
        on_result(a, token, kind, 0, rc, true, NULL, gp_err_str(rc));
    }
}

static void
req_fire(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    req_send(GP_CONTAINER_OF(w, agent, req_t), false);
}

/* A registration, or a renewal (beat: the heartbeat's).  A registered node
 * that runs nothing renews nothing. */
static void
req_send(agent *a, bool beat)
{
    reqctx *ctx;
    outmsg *m;
    double  delay;

    if (a->stopped)
        return;
    if (a->registered && !beat && !busy(a)) {
        a->req_kind = REQ_NONE;
        return;
    }
    a->req_kind = a->registered ? REQ_LEASE : REQ_REGISTER;
    a->req_token++;
    if ((ctx = calloc(1, sizeof(*ctx))) == NULL) {
        a->req_kind = REQ_NONE;
        schedule_req(a, 1.0);
        return;
    }
    ctx->a = a;
    ctx->token = a->req_token;
    ctx->kind = a->req_kind;
    ctx->beat = beat && ctx->kind == REQ_LEASE;
    if (ctx->kind == REQ_LEASE)        /* the hedge, unless an answer comes first */
        schedule_req(a, renew_hedge_ms(a) / 1000.0 * (0.8 + 0.4 * gp_rng_unit(&a->rng)));
    delay = send_delay_s(a);
    if (delay > 0 && a->connected && !a->paused && (m = calloc(1, sizeof(*m))) != NULL) {
        m->a = a;
        m->ctx = ctx;
        m->next = a->outq;
        a->outq = m;
        outmsg_start(a, m, delay);
        return;
    }
    call_now(a, ctx);
}

static void
schedule_req(agent *a, double after_s)
{
    ev_timer_stop(a->loop, &a->req_t);
    ev_timer_set(&a->req_t, after_s, 0);
    ev_timer_start(a->loop, &a->req_t);
}

static attempt *
find_attempt(agent *a, const char *job, uint32_t num)
{
    for (attempt *t = a->atts; t != NULL; t = t->next)
        if (!t->done && strcmp(t->job_id, job) == 0 && (num == 0 || t->num == num))
            return t;
    return NULL;
}

/* A kept attempt's lease runs from when its renewal was SENT, not from
 * when the answer came: the control plane granted it at some moment in
 * between, so counted from the send the lease surely ends no later than
 * the control plane's own reckoning (its grant + lease), however slow the
 * reply was (fencing without clock sync: recovery replaces the attempt
 * only after that).  Counted from the answer, a reply delayed by the
 * uplink lengthened the lease by the delay. */
static void
apply_lists(agent *a, const msg_node_registered *r, uint64_t sent_ms)
{
    // cppcheck-suppress ctunullpointer ; on_result calls it only with a reply (err GP_EOK)
    const msg_attempt_ref *keep = r->keep.v, *kill = r->kill.v;
    attempt               *t;

    for (uint32_t i = 0; i < r->keep.n; i++)
        if ((t = find_attempt(a, keep[i].job_id, keep[i].attempt)) != NULL)
            attempt_granted(t, sent_ms);      /* and its guard's deadline */
    for (uint32_t i = 0; i < r->kill.n; i++)
        if ((t = find_attempt(a, kill[i].job_id, kill[i].attempt)) != NULL) {
            GP_INFO("attempt_revoked", "node=%s job=%s attempt=%u", a->o.node, t->job_id, t->num);
            attempt_stop(t, MSG_ATTEMPT_EVENT_EVENT_KILLED, a->o.stop_grace_ms);
        }
}

static void hb_fire(struct ev_loop *loop, ev_timer *w, int revents);

static void ev_pump(agent *a);

/* A lease or registration answered: the uplink works, send what waits. */
static void
flush_events(agent *a)
{
    ev_pump(a);
}

static void
granted(agent *a, const msg_node_registered *r, int kind, uint64_t sent_ms)
{
    unsigned hb = a->o.heartbeat_ms ? a->o.heartbeat_ms : r->heartbeat_ms;
    bool     first = !a->ever_registered;
    uint64_t now, due;

    a->backoff_ms = 0;
    a->cut_off = false;
    a->lease_ms = r->lease_ms;
    if (kind == REQ_REGISTER) {
        a->registered = a->ever_registered = true;
        GP_INFO("agent_registered", "site=%s node=%s heartbeat_ms=%u lease_ms=%u rtt_ms=%.1f",
                a->o.site, a->o.node, hb, r->lease_ms, a->rtt_ms);
    }
    if (hb != a->hb_ms || !ev_is_active(&a->hb_t)) {
        a->hb_ms = hb;
        ev_timer_stop(a->loop, &a->hb_t);
        ev_timer_set(&a->hb_t, kind == REQ_REGISTER ? 0.0 : hb / 1000.0, hb / 1000.0);
        ev_timer_start(a->loop, &a->hb_t);
    }
    apply_lists(a, r, sent_ms);
    if (sent_ms > a->lease_base_ms)
        a->lease_base_ms = sent_ms;
    flush_events(a);
    /* the next renewal alone is due renew_gap after the send that renewed
     * the lease (at once if the answer came later than that); none while
     * the node runs nothing */
    now = gp_mono_ms();
    due = sent_ms + renew_gap_ms(a);
    if (busy(a))
        schedule_req(a, due > now ? (double)(due - now) / 1000.0 : 0.0);
    else
        ev_timer_stop(a->loop, &a->req_t);
    if (kind == REQ_REGISTER && a->o.on_registered != NULL)
        a->o.on_registered(a->o.cb_arg, a, first);
}

/* The control plane refused the node for good: everything stops, and the
 * owner is told last (it may free the agent). */
static void
agent_stop(agent *a, gp_err why, const char *detail)
{
    int killed = 0;

    a->stopped = true;
    a->registered = false;
    a->req_kind = REQ_NONE;
    ev_timer_stop(a->loop, &a->req_t);
    ev_timer_stop(a->loop, &a->hb_t);
    for (attempt *t = a->atts; t != NULL; t = t->next)
        if (!t->done) {
            attempt_stop(t, MSG_ATTEMPT_EVENT_EVENT_KILLED, a->o.stop_grace_ms);
            killed++;
        }
    a->nevq = 0;                       /* nobody will take them */
    GP_ERROR("agent_stopped", "site=%s node=%s reason=register_%s detail=\"%s\" attempts_killed=%d",
             a->o.site, a->o.node, gp_err_name(why), detail, killed);
    if (a->o.on_stopped != NULL)
        a->o.on_stopped(a->o.cb_arg, a, why, detail);
}

static void
req_failed(agent *a, int kind, gp_err err, bool transport, const char *detail)
{
    double j = 0.8 + 0.4 * gp_rng_unit(&a->rng);   /* a fleet must not retry in step */

    if (!transport && kind == REQ_LEASE && err == GP_ENOTFOUND) {   /* the control plane forgot us */
        GP_WARN("agent_reregister", "site=%s node=%s reason=lease_notfound detail=\"%s\"",
                a->o.site, a->o.node, detail);
        a->registered = false;
        schedule_req(a, 0.1 * gp_rng_unit(&a->rng));                /* at once, spread 0.1 s */
        return;
    }
    if (!transport && kind == REQ_REGISTER && err == GP_EDENIED) {  /* deleted, or not this node */
        agent_stop(a, err, detail);
        return;
    }
    a->cut_off = kind == REQ_LEASE || a->ever_registered;
    if (kind == REQ_LEASE) {
        GP_DEBUG("agent_lease_failed", "node=%s code=%s", a->o.node, gp_err_name(err));
        schedule_req(a, a->lease_ms / 6000.0 * j);
        return;
    }
    a->backoff_ms = a->backoff_ms ? a->backoff_ms * 2 : BACKOFF_MIN_MS;
    if (a->backoff_ms > BACKOFF_MAX_MS)
        a->backoff_ms = BACKOFF_MAX_MS;
    GP_WARN("agent_register_failed", "site=%s node=%s code=%s detail=\"%s\" retry_ms=%u",
            a->o.site, a->o.node, gp_err_name(err), detail, a->backoff_ms);
    schedule_req(a, a->backoff_ms / 1000.0 * j);
}

/* The outcome of a register/lease call.  Only the current call's failure
 * counts; an earlier renewal's answer (renewals are hedged) renews the
 * lease from its own send if it is the newest answered, and its kill list
 * applies in any case.  May free a (through on_stopped). */
static void
on_result(agent *a, uint64_t token, int kind, uint64_t sent_ns, gp_err err, bool transport,
          const msg_node_registered *r, const char *detail)
{
    bool current = token == a->req_token && a->req_kind != REQ_NONE;

    if (a->paused || a->stopped)
        return;                        /* the node is frozen */
    if (!a->connected && err == GP_EOK) {
        err = GP_ETIMEOUT;             /* the uplink is cut: the reply never arrives */
        transport = true;
        detail = "the uplink is cut";
    }
    if (!current) {
        if (kind != REQ_LEASE || err != GP_EOK || !a->registered)
            return;                    /* stale */
        if (sent_ns / 1000000u <= a->lease_base_ms) {
            apply_lists(a, r, sent_ns / 1000000u);
            return;
        }
    }
    kind = current ? a->req_kind : kind;
    a->req_kind = REQ_NONE;
    if (err == GP_EOK) {
        a->rtt_ms = (double)(gp_mono_ns() - sent_ns) / 1e6;
        granted(a, r, kind, sent_ns / 1000000u);
    } else {
        req_failed(a, kind, err, transport, detail);
    }
}

/* ---- heartbeats ------------------------------------------------------- */

static int
disk_state(void)
{
    struct statvfs sv;

    /* A root filesystem remounted read-only is what a failing disk looks like. */
    if (statvfs("/", &sv) != 0)
        return MSG_HEARTBEAT_DISK_DEGRADED;
    return (sv.f_flag & ST_RDONLY) ? MSG_HEARTBEAT_DISK_FAILING : MSG_HEARTBEAT_DISK_OK;
}

static void
sample_gpus(agent *a)
{
    double   load[GPU_MAX] = {0};
    uint64_t now = agent_now_ms(a);
    double   dt = a->last_sample_ms ? (now - a->last_sample_ms) / 1000.0 : 0;
    int      n = gpu_count(a->gpu);

    /* What runs on a GPU sets its load (a sim: job its load=, a process
     * 0.92); the simulated backend draws power and heat from it. */
    for (attempt *t = a->atts; t != NULL; t = t->next)
        for (int i = 0; i < t->ngpus && !t->done; i++)
            if (t->load > load[t->gpus[i]])
                load[t->gpus[i]] = t->load;
    for (int i = 0; i < n && i < GPU_MAX; i++) {
        if (gpu_sample_get(a->gpu, i, load[i], dt, &a->last[i]) != GP_EOK)
            a->last[i].lost = true;
        a->power[i] = a->last[i].power_w;
    }
    a->last_sample_ms = now;
    for (attempt *t = a->atts; t != NULL; t = t->next)
        attempt_account(t, now, a->power);
}

static void
fill_gpu(const gpu_sample *s, int i, msg_gpu_telemetry *g, int32_t *thr)
{
    memset(g, 0, sizeof(*g));
    g->index = i;
    g->state = s->lost ? MSG_GPU_TELEMETRY_STATE_LOST : MSG_GPU_TELEMETRY_STATE_OK;
    GP_SET_HAS(g, MSG_GPU_TELEMETRY__STATE);
    g->temp_c = s->temp_c;
    g->power_w = s->power_w;
    g->util_pct = s->util_pct;
    g->mem_used_mb = s->mem_used_mb;
    g->ecc_sbe = s->ecc_sbe;
    g->ecc_dbe = s->ecc_dbe;
    g->xids.v = (void *)s->xids;
    g->xids.n = (uint32_t)s->nxids;
    g->throttle.v = thr;
    for (int b = 0; b < 6 && g->throttle.n < MAX_THROTTLE; b++)
        if (s->throttle & (1u << b))
            thr[g->throttle.n++] = b;
}

/* Exited attempts ride along in one heartbeat (state exited) after their
 * final event, then are forgotten. */
static int
fill_usage(agent *a, msg_attempt_usage *u)
{
    int n = 0;

    for (attempt **p = &a->atts, *t; (t = *p) != NULL;) {
        memset(&u[n], 0, sizeof(u[n]));
        snprintf(u[n].job_id, sizeof(u[n].job_id), "%s", t->job_id);
        u[n].attempt = t->num;
        u[n].gpu_ms = t->gpu_ms;
        u[n].energy_mj = t->energy_mj;
        u[n].state = t->done ? MSG_ATTEMPT_USAGE_STATE_EXITED
                     : t->ckpt_pending ? MSG_ATTEMPT_USAGE_STATE_CHECKPOINTING
                     : MSG_ATTEMPT_USAGE_STATE_RUNNING;
        GP_SET_HAS(&u[n], MSG_ATTEMPT_USAGE__STATE);
        n++;
        if (t->done) {
            *p = t->next;
            a->natts--;
            attempt_free(t);
        } else {
            p = &t->next;
        }
    }
    return n;
}

static void
beat_fill(agent *a, beat_parts *p)
{
    msg_heartbeat *hb = &p->hb;
    int            n = gpu_count(a->gpu);

    sample_gpus(a);
    memset(hb, 0, sizeof(*hb));
    snprintf(hb->site, sizeof(hb->site), "%s", a->o.site);
    snprintf(hb->node, sizeof(hb->node), "%s", a->o.node);
    hb->seq = ++a->seq;
    hb->sent_ms = gp_wall_ms();                     /* a timestamp: the wall clock */
    hb->uptime_s = (gp_mono_ms() - a->t0_ms) / 1000;
    hb->disk = disk_state();
    GP_SET_HAS(hb, MSG_HEARTBEAT__DISK);
    hb->uplink_rtt_ms = a->rtt_ms;
    GP_SET_HAS(hb, MSG_HEARTBEAT__UPLINK_RTT_MS);
    for (int i = 0; i < n && i < GPU_MAX; i++)
        fill_gpu(&a->last[i], i, &p->g[i], p->thr[i]);
    hb->gpus.v = p->g;
    hb->gpus.n = (uint32_t)(n < GPU_MAX ? n : GPU_MAX);
    hb->attempts.v = p->u;
    hb->attempts.n = (uint32_t)fill_usage(a, p->u);
}

static void
beat_sent(agent *a)
{
    int n = gpu_count(a->gpu);

    for (int i = 0; i < n && i < GPU_MAX; i++)
        a->last[i].nxids = 0;          /* reported once */
}

/* One message per node per interval: a registered node that runs
 * something renews its lease with its beat (the renewal carries it, and
 * restarts the hedges); any other sends the beat alone. */
static void
hb_fire(struct ev_loop *loop, ev_timer *w, int revents)
{
    agent            *a = GP_CONTAINER_OF(w, agent, hb_t);
    static beat_parts bp;

    (void)loop;
    (void)revents;
    if (a->registered && busy(a)) {
        ev_timer_stop(a->loop, &a->req_t);
        req_send(a, true);
        return;
    }
    beat_fill(a, &bp);
    publish_msg(a, a->s_hb, &msg_heartbeat_desc, &bp.hb);
    beat_sent(a);
}

/* ---- attempts ------------------------------------------------------------- */

/* Attempt events must not be lost: the final one carries the counters
 * billing needs.  Each goes to the stream ATTEMPTS and stays in the outbox
 * until the stream acknowledged it (retried with backoff, through a cut
 * uplink, a server restart or a control plane that is down).  With a
 * JetStream context the publish carries the message id, so the stream
 * stores a retried event once; a bus without one (the simulator's, or
 * the agent under a node-only identity, whose PubAck must come to its own
 * reply inbox) sends a request to the same subject and reads the stream's
 * PubAck as the reply.  The scheduler is idempotent on (job, attempt,
 * event) either way. */
static void ev_pump(agent *a);

static void
ev_done(agent *a, uint64_t token, bool stored)
{
    if (token != a->ev_token || !a->ev_inflight)
        return;
    a->ev_inflight = false;
    if (stored && a->connected && a->nevq > 0) {   /* a reply over a cut uplink never came */
        memmove(a->evq, a->evq + 1, sizeof(a->evq[0]) * (size_t)(a->nevq - 1));
        a->nevq--;
        a->ev_retry_ms = 0;
        ev_pump(a);
        return;
    }
    a->ev_retry_ms = a->ev_retry_ms ? a->ev_retry_ms * 2 : EV_RETRY_MIN_MS;
    if (a->ev_retry_ms > EV_RETRY_MAX_MS)
        a->ev_retry_ms = EV_RETRY_MAX_MS;
    GP_DEBUG("agent_event_retry", "node=%s job=%s retry_ms=%u", a->o.node, a->evq[0].ev.job_id,
             a->ev_retry_ms);
    ev_timer_stop(a->loop, &a->ev_t);
    ev_timer_set(&a->ev_t, a->ev_retry_ms / 1000.0 * (0.8 + 0.4 * gp_rng_unit(&a->rng)), 0);
    ev_timer_start(a->loop, &a->ev_t);
}

static void
ev_js_cb(void *arg, gp_err err)
{
    reqctx *c = arg;

    if (c->a != NULL) {
        ctx_unlink(c->a, c);
        ev_done(c->a, c->token, err == GP_EOK);
    }
    free(c);
}

/* The stream's PubAck is JSON: {"stream":...,"seq":...} or {"error":...}. */
static void
ev_req_cb(void *arg, gp_err err, const char *data, size_t len)
{
    reqctx *c = arg;
    bool    ok = err == GP_EOK && len > 0 && memmem(data, len, "\"error\"", 7) == NULL &&
                 memmem(data, len, "\"seq\"", 5) != NULL;

    if (c->a != NULL) {
        ctx_unlink(c->a, c);
        ev_done(c->a, c->token, ok);
    }
    free(c);
}

static gp_err
ev_send(agent *a, reqctx *c, const gp_buf *b)
{
    gp_err rc = gp_bus_js_pub(a->bus, a->s_att, a->evq[0].id, b->p, b->n, ev_js_cb, c);

    if (rc == GP_EINVAL)                      /* no JetStream context on this bus: its id in a
                                               * header all the same, so a retry is stored once */
        rc = gp_bus_request_msgid(a->bus, a->s_att, a->evq[0].id, b->p, b->n,
                                  req_timeout_ms(a, REQ_REGISTER), ev_req_cb, c);
    return rc;
}

static void
ev_pump(agent *a)
{
    reqctx *c;
    gp_buf  b;
    gp_err  rc;

    if (a->stopped || a->ev_inflight || a->nevq == 0 || !a->connected ||
        a->paused || ev_is_active(&a->ev_t))
        return;
    if ((c = calloc(1, sizeof(*c))) == NULL)
        return;                               /* the next event or lease grant pumps again */
    *c = (reqctx){.a = a, .token = ++a->ev_token, .kind = REQ_EVENT, .next = a->ctxs};
    a->ctxs = c;
    a->ev_inflight = true;
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    msg_attempt_event ev = a->evq[0].ev;   /* its endpoints' items live beside it */

    ev.endpoints.v = ev.endpoints.n > 0 ? a->evq[0].eps : NULL;
    rc = gp_msg_encode(&msg_attempt_event_desc, &ev, &b);
    if (rc == GP_EOK)
        rc = ev_send(a, c, &b);
    gp_buf_fini(&b);
    if (rc != GP_EOK) {
        ctx_unlink(a, c);
        free(c);
        ev_done(a, a->ev_token, false);
    }
}

static void
ev_retry(struct ev_loop *loop, ev_timer *w, int revents)
{
    agent *a = GP_CONTAINER_OF(w, agent, ev_t);

    (void)loop;
    (void)revents;
    ev_pump(a);
}

/* Into the outbox, oldest first; when full the oldest is dropped (counted:
 * the heartbeats still carry the counters). */
static void
send_event(agent *a, const msg_attempt_event *ev, const char *id)
{
    if (a->stopped)
        return;                        /* the control plane refused the node */
    if (a->nevq == a->capevq && a->capevq < MAX_QUEUED_EVENTS) {
        int    cap = a->capevq ? a->capevq * 2 : 8;
        outev *q = realloc(a->evq, sizeof(*q) * (size_t)cap);

        if (q != NULL) {
            a->evq = q;
            a->capevq = cap;
        }
    }
    if (a->nevq == a->capevq && a->nevq <= 1)
        return;                        /* no memory: the heartbeat still carries the counters */
    if (a->nevq == a->capevq) {        /* the head may be on the wire: drop the next one */
        a->ev_dropped++;
        GP_WARN("agent_event_dropped", "node=%s job=%s reason=queue_full dropped=%llu",
                a->o.node, a->evq[1].ev.job_id, (unsigned long long)a->ev_dropped);
        memmove(a->evq + 1, a->evq + 2, sizeof(a->evq[0]) * (size_t)(a->nevq - 2));
        a->nevq--;
    }
    a->evq[a->nevq].ev = *ev;
    a->evq[a->nevq].ev.endpoints.v = NULL;   /* the queue moves entries: no pointer into one */
    if (ev->endpoints.n > 0)
        memcpy(a->evq[a->nevq].eps, ev->endpoints.v, ev->endpoints.n * sizeof(msg_endpoint));
    snprintf(a->evq[a->nevq].id, sizeof(a->evq[0].id), "%s", id);
    a->nevq++;
    ev_pump(a);
}

static void
emit_why(agent *a, const char *job, uint32_t num, int event, const attempt *t, const char *why);

static void
emit(agent *a, const char *job, uint32_t num, int event, const attempt *t)
{
    emit_why(a, job, num, event, t, NULL);
}

/* why: a failed start's reason when there is no attempt to hold it */
static void
emit_why(agent *a, const char *job, uint32_t num, int event, const attempt *t, const char *why)
{
    msg_attempt_event ev;
    msg_endpoint      eps[MSG_ATTEMPT_EVENT_ENDPOINTS_MAXITEMS];
    char              id[sizeof(((outev *)0)->id)];

    memset(&ev, 0, sizeof(ev));
    snprintf(ev.site, sizeof(ev.site), "%s", a->o.site);
    snprintf(ev.node, sizeof(ev.node), "%s", a->o.node);
    snprintf(ev.job_id, sizeof(ev.job_id), "%s", job);
    ev.attempt = num;
    ev.event = event;
    ev.at_ms = gp_wall_ms();
    if (t != NULL && t->done) {
        ev.exit_code = t->exit_code;
        GP_SET_HAS(&ev, MSG_ATTEMPT_EVENT__EXIT_CODE);
    }
    if (t != NULL && (event == MSG_ATTEMPT_EVENT_EVENT_CHECKPOINTED || t->done) &&
        attempt_progress(t, agent_now_ms(a), &ev.progress_ms))
        GP_SET_HAS(&ev, MSG_ATTEMPT_EVENT__PROGRESS_MS);
    /* the step a checkpoint reached: what the job reported, or for a sim:
     * job its work done (the same field carries both to the next attempt) */
    if (t != NULL && event == MSG_ATTEMPT_EVENT_EVENT_CHECKPOINTED &&
        (t->has_step || GP_HAS(&ev, MSG_ATTEMPT_EVENT__PROGRESS_MS))) {
        ev.checkpoint_step = t->has_step ? t->ckpt_step : ev.progress_ms;
        GP_SET_HAS(&ev, MSG_ATTEMPT_EVENT__CHECKPOINT_STEP);
        snprintf(ev.checkpoint_id, sizeof(ev.checkpoint_id), "%s", t->has_step ? t->ckpt_id : "");
    }
    if (t != NULL && t->ctr != NULL && event == MSG_ATTEMPT_EVENT_EVENT_STARTED) {
        snprintf(ev.image_digest, sizeof(ev.image_digest), "%s", ctr_digest(t->ctr));
        ev.endpoints.n = (uint32_t)ctr_endpoints(t->ctr, eps, MSG_ATTEMPT_EVENT_ENDPOINTS_MAXITEMS);
        ev.endpoints.v = eps;
    }
    if (event == MSG_ATTEMPT_EVENT_EVENT_FAILED_TO_START)
        snprintf(ev.reason, sizeof(ev.reason), "%s", why ? why : t ? t->reason : "");
    if (t != NULL) {
        ev.gpu_ms = t->gpu_ms;
        ev.energy_mj = t->energy_mj;
        GP_SET_HAS(&ev, MSG_ATTEMPT_EVENT__GPU_MS);
        GP_SET_HAS(&ev, MSG_ATTEMPT_EVENT__ENERGY_MJ);
    }
    /* The stream's duplicate window keeps one message per id: the node is
     * in it, as every node of a multi-node attempt sends its own events
     * under the one attempt number (without it, only the first node's
     * started and exited were stored and the job stayed running);
     * checkpointed events are numbered, so each one is stored once. */
    if (event == MSG_ATTEMPT_EVENT_EVENT_CHECKPOINTED && t != NULL)
        snprintf(id, sizeof(id), "%s.%u.%s.%s.%u", job, num, a->o.node,
                 msg_attempt_event_event_names[event], t->ckpts);
    else
        snprintf(id, sizeof(id), "%s.%u.%s.%s", job, num, a->o.node,
                 msg_attempt_event_event_names[event]);
    send_event(a, &ev, id);
}

/* The simulator's ground truth hears of every attempt once, at its end. */
static void
tell_end(agent *a, attempt *t, int event)
{
    agent_attempt_end e;

    if (a->o.on_attempt_end == NULL)
        return;
    memset(&e, 0, sizeof(e));
    e.job_id = t->job_id;
    e.attempt = t->num;
    e.ngpus = t->ngpus;
    e.gpus = t->gpus;
    e.load = t->load;
    e.sim = t->sim;
    e.start_mono_ms = t->start_ms;
    e.end_mono_ms = t->done && t->end_ms ? t->end_ms : agent_now_ms(a);
    e.start_wall_ms = t->start_wall_ms;
    e.event = event;
    e.exit_code = t->exit_code;
    e.has_progress = attempt_progress(t, e.end_mono_ms, &e.progress_ms);
    e.agent_gpu_ms = t->gpu_ms;
    e.agent_energy_mj = t->energy_mj;
    a->o.on_attempt_end(a->o.cb_arg, a, &e);
}

/* attempt.c's calls (agent_attempt_ops): the child is gone (t->done set),
 * or it wrote its checkpoint marker. */
/* An image no attempt runs may go (beyond the newest image-keep).  Not
 * while an attempt is being prepared: the digest it just found cached
 * must still be there when it runs. */
static void
images_gc(agent *a)
{
    const char *used[MAX_ATTEMPTS];
    int         n = 0;

    if (a->o.containers == NULL)
        return;
    for (attempt *t = a->atts; t != NULL; t = t->next) {
        if (t->preparing)
            return;
        if (!t->done && t->ctr != NULL && n < MAX_ATTEMPTS)
            used[n++] = ctr_digest(t->ctr);
    }
    img_gc(&a->o.containers->img, a->loop, used, n);
}

static void
agent_attempt_exited(agent *a, attempt *t)
{
    int ev = t->end_event >= 0 ? t->end_event : MSG_ATTEMPT_EVENT_EVENT_EXITED;

    GP_INFO("attempt_ended", "node=%s job=%s attempt=%u event=%s exit_code=%d gpu_ms=%llu "
            "energy_mj=%llu", a->o.node, t->job_id, t->num, msg_attempt_event_event_names[ev],
            t->exit_code, (unsigned long long)t->gpu_ms, (unsigned long long)t->energy_mj);
    emit(a, t->job_id, t->num, ev, t);
    tell_end(a, t, ev);
    if (agent_attempts_running(a) == 0)
        ev_timer_stop(a->loop, &a->lease_t);
    if (t->ctr != NULL || ev == MSG_ATTEMPT_EVENT_EVENT_FAILED_TO_START)
        images_gc(a);
}

static void
agent_attempt_checkpointed(agent *a, attempt *t)
{
    t->ckpts++;
    emit(a, t->job_id, t->num, MSG_ATTEMPT_EVENT_EVENT_CHECKPOINTED, t);
}

/* A container runs (its image pulled): started, with the digest it runs. */
static void
agent_attempt_started(agent *a, attempt *t)
{
    GP_INFO("attempt_started", "node=%s job=%s attempt=%u pid=%d gpus=%d image=%s", a->o.node,
            t->job_id, t->num, (int)t->pid, t->ngpus, t->ctr ? ctr_digest(t->ctr) : "");
    emit(a, t->job_id, t->num, MSG_ATTEMPT_EVENT_EVENT_STARTED, t);
}

static ctr_node *agent_containers(agent *a) { return a->o.containers; }
static bool agent_host_commands(const agent *a) { return a->o.host_commands; }

const attempt_ops agent_attempt_ops = {
    .exited = agent_attempt_exited,
    .checkpointed = agent_attempt_checkpointed,
    .now_ms = agent_now_ms,
    .gpu_power = agent_gpu_power,
    .gpu = agent_gpu,
    .node = agent_node,
    .started = agent_attempt_started,
    .containers = agent_containers,
    .host_commands = agent_host_commands,
};

static void
lease_fire(struct ev_loop *loop, ev_timer *w, int revents)
{
    agent   *a = GP_CONTAINER_OF(w, agent, lease_t);
    uint64_t now = gp_mono_ms();

    (void)loop;
    (void)revents;
    for (attempt *t = a->atts; t != NULL; t = t->next) {
        if (t->done || t->stopping || now - t->granted_ms < t->lease_ms)
            continue;
        GP_WARN("attempt_lease_expired", "node=%s job=%s attempt=%u since_grant_s=%.1f",
                a->o.node, t->job_id, t->num, (now - t->granted_ms) / 1000.0);
        /* no grace: past its lease it may have a replacement already (its
         * guard kills it now too) */
        attempt_stop(t, MSG_ATTEMPT_EVENT_EVENT_LEASE_EXPIRED, 0);
    }
}

static void
ack_of(msg_attempt_ack *out, const attempt *t)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->job_id, sizeof(out->job_id), "%s", t->job_id);
    out->attempt = t->num;
    if (t->pid > 0) {                  /* a sim: job has no process */
        out->pid = (int32_t)t->pid;
        GP_SET_HAS(out, MSG_ATTEMPT_ACK__PID);
    }
}

/* Fencing: an older attempt is refused, the same one is a retried command,
 * a newer one replaces what runs (the old one lost its grant). */
static gp_err
fence(agent *a, const msg_run_attempt *in, msg_attempt_ack *out, char *detail, size_t dlen,
      bool *dup)
{
    attempt *t = find_attempt(a, in->job_id, 0);

    *dup = false;
    if (t == NULL)
        return GP_EOK;
    if (t->num > in->attempt) {
        snprintf(detail, dlen, "attempt %u is stale: the node runs attempt %u of job %s",
                 in->attempt, t->num, in->job_id);
        return GP_ECONFLICT;
    }
    if (t->num == in->attempt) {
        ack_of(out, t);
        *dup = true;
        return GP_EOK;
    }
    attempt_stop(t, MSG_ATTEMPT_EVENT_EVENT_KILLED, a->o.stop_grace_ms);
    return GP_EOK;
}

gp_err
agent_cmd_run(agent *a, const msg_run_attempt *in, msg_attempt_ack *out, char *detail,
              size_t dlen)
{
    attempt *t = NULL;
    bool     dup;
    gp_err   rc = fence(a, in, out, detail, dlen, &dup);

    if (rc != GP_EOK || dup)
        return rc;
    if (a->stopped) {
        snprintf(detail, dlen, "the agent stopped: the control plane refused node %s", a->o.node);
        return GP_EUNAVAIL;
    }
    if (a->natts >= MAX_ATTEMPTS) {
        snprintf(detail, dlen, "the node runs %d attempts already", a->natts);
        return GP_EUNAVAIL;
    }
    rc = attempt_start(a, &agent_attempt_ops, a->loop, in, gpu_count(a->gpu),
                       in->lease_ms ? in->lease_ms : a->lease_ms, &t, detail, dlen);
    if (rc != GP_EOK) {
        GP_WARN("attempt_failed_to_start", "node=%s job=%s attempt=%u detail=\"%s\"", a->o.node,
                in->job_id, in->attempt, detail);
        emit_why(a, in->job_id, in->attempt, MSG_ATTEMPT_EVENT_EVENT_FAILED_TO_START, NULL, detail);
        return rc;
    }
    t->next = a->atts;
    a->atts = t;
    a->natts++;
    /* resume_ms: the checkpointed work RunAttempt says this attempt resumes
     * from, so a resume can be followed in the node's log */
    GP_INFO(t->preparing ? "attempt_pulling" : "attempt_started",
            "node=%s job=%s attempt=%u pid=%d gpus=%d resume_ms=%llu image=%s", a->o.node,
            t->job_id, t->num, (int)t->pid, t->ngpus, (unsigned long long)in->resume_ms,
            in->image);
    if (!t->preparing)                 /* a container's comes once it runs */
        emit(a, t->job_id, t->num, MSG_ATTEMPT_EVENT_EVENT_STARTED, t);
    if (!ev_is_active(&a->lease_t))
        ev_timer_start(a->loop, &a->lease_t);
    /* an idle node renewed nothing: the run is a grant, renewals follow */
    if (a->registered && a->req_kind == REQ_NONE && !ev_is_active(&a->req_t))
        schedule_req(a, renew_gap_ms(a) / 1000.0);
    ack_of(out, t);
    return GP_EOK;
}

/* The registry had a heartbeat of this node without its live entry: an
 * idle node renews nothing, so this is how it learns it was forgotten. */
void
agent_cmd_register_again(agent *a, const msg_register_again *in)
{
    if (a->stopped || a->paused || !a->registered)
        return;
    GP_WARN("agent_reregister", "site=%s node=%s reason=registry detail=\"%s\"", a->o.site,
            a->o.node, in->reason);
    a->registered = false;
    schedule_req(a, 0.1 * gp_rng_unit(&a->rng));
}

gp_err
agent_cmd_signal(agent *a, const msg_attempt_signal *in, msg_attempt_ack *out, char *detail,
                 size_t dlen)
{
    attempt *t = find_attempt(a, in->job_id, in->attempt);
    gp_err   rc = GP_EOK;

    if (t == NULL) {
        snprintf(detail, dlen, "job %s attempt %u does not run here", in->job_id, in->attempt);
        return GP_ENOTFOUND;
    }
    if (in->action == MSG_ATTEMPT_SIGNAL_ACTION_STOP)
        attempt_stop(t, MSG_ATTEMPT_EVENT_EVENT_KILLED, a->o.stop_grace_ms);
    else if ((rc = attempt_checkpoint(t)) != GP_EOK)
        snprintf(detail, dlen, "the attempt is stopping");
    if (rc == GP_EOK)
        ack_of(out, t);
    return rc;
}

gp_err
agent_cmd_logs(agent *a, const msg_logs_request *in, msg_logs *out, char *detail, size_t dlen)
{
    uint32_t num = in->attempt;
    attempt *t = find_attempt(a, in->job_id, num);
    gp_err   rc;

    if (a->o.containers == NULL) {
        snprintf(detail, dlen, "node %s runs no containers", a->o.node);
        return GP_ENOTFOUND;
    }
    if (num == 0 && t == NULL) {
        snprintf(detail, dlen, "job %s runs no attempt here: name the attempt", in->job_id);
        return GP_ENOTFOUND;
    }
    if (num == 0)
        num = t->num;
    rc = ctr_logs_read(a->o.containers, in, num, out, detail, dlen);
    if (rc != GP_EOK)
        return rc;
    snprintf(out->node, sizeof(out->node), "%s", a->o.node);
    out->running = t != NULL && t->num == num && !t->done;
    return GP_EOK;
}

/* ---- raw commands (the simulator's wildcard subscription) --------------- */

/* ---- fault hooks ---------------------------------------------------------- */

bool
agent_is_reachable(const agent *a)
{
    return a->connected && !a->paused;
}

void
agent_set_connected(agent *a, bool connected)
{
    if (a->connected == connected)
        return;
    a->connected = connected;
    GP_INFO(connected ? "agent_uplink_up" : "agent_uplink_down", "node=%s", a->o.node);
    /* Back after a cut: renew now (spread over 0.5 s, a whole site comes
     * back at once) rather than at the next hedge, up to lease/6 away: a
     * cut shorter than about 2/3 of the lease then costs no attempt.  In
     * the lease's last 1.5 s there is no spreading: a renewal sent after
     * the lease ends comes too late for what runs. */
    if (connected && a->registered && !a->paused && !a->stopped &&
        gp_mono_ms() - a->lease_base_ms > hedge_ms(a)) {
        uint64_t since = gp_mono_ms() - a->lease_base_ms;

        schedule_req(a, since + 1500 >= a->lease_ms ? 0.0 : 0.5 * gp_rng_unit(&a->rng));
    }
    /* and the events that waited go now: an idle node (its attempts ended
     * while it was cut off: lease_expired) renews nothing, so no answer
     * would pump them */
    if (connected)
        ev_pump(a);
}

void
agent_pause(agent *a, bool paused)
{
    if (a->paused == paused)
        return;
    a->paused = paused;
    if (a->stopped)
        return;                        /* nothing to freeze or resume */
    if (paused) {
        ev_timer_stop(a->loop, &a->req_t);
        ev_timer_stop(a->loop, &a->hb_t);
        ev_timer_stop(a->loop, &a->lease_t);
        a->req_kind = REQ_NONE;         /* what was in flight is lost */
        return;
    }
    if (a->ever_registered) {
        ev_timer_set(&a->hb_t, a->hb_ms / 1000.0, a->hb_ms / 1000.0);
        ev_timer_start(a->loop, &a->hb_t);
    }
    if (agent_attempts_running(a) > 0)
        ev_timer_start(a->loop, &a->lease_t);
    schedule_req(a, 0);
    ev_pump(a);                        /* an idle node's events wait for no renewal */
}

void
agent_set_delay(agent *a, unsigned delay_ms, unsigned jitter_ms)
{
    a->delay_ms = delay_ms;
    a->jitter_ms = jitter_ms;
}

/* ---- life ------------------------------------------------------------------ */

static void
defaults(agent *a, const agent_opts *o)
{
    uint64_t s;

    a->o = *o;
    if (a->o.request_timeout_ms == 0)
        a->o.request_timeout_ms = 5000;
    if (a->o.stop_grace_ms == 0)
        a->o.stop_grace_ms = 5000;
    if (a->o.hostname[0] == '\0')
        gethostname(a->o.hostname, sizeof(a->o.hostname) - 1);
    if (a->o.version[0] == '\0')
        snprintf(a->o.version, sizeof(a->o.version), "dev");
    a->rng = o->seed ^ ((uint64_t)getpid() << 32) ^ gp_mono_ns();
    if (o->seed != 0)
        a->rng = o->seed;              /* the simulator wants the same run twice */
    s = a->rng ^ gp_wall_ms() ^ gp_mono_ns();
    if (a->o.boot_id[0] == '\0')
        snprintf(a->o.boot_id, sizeof(a->o.boot_id), "%016llx%016llx",
                 (unsigned long long)gp_rng_next(&s), (unsigned long long)gp_rng_next(&s));
    a->lease_ms = a->o.lease_ms ? a->o.lease_ms : 30000;
    a->hb_ms = a->o.heartbeat_ms ? a->o.heartbeat_ms : 5000;
}

/* The node's subjects, from the contract. */
static gp_err
subjects(agent *a, const agent_opts *o)
{
    const char *args[3] = {o->site, o->node, NULL};
    gp_err      rc = gp_op_subject(GP_OP_NODE_REGISTER, a->s_reg, sizeof(a->s_reg), args);

    rc = rc ? rc : gp_op_subject(GP_OP_NODE_HEARTBEAT, a->s_hb, sizeof(a->s_hb), args);
    rc = rc ? rc : gp_op_subject(GP_OP_NODE_LEASE, a->s_lease, sizeof(a->s_lease), args);
    return rc ? rc : gp_op_subject(GP_OP_NODE_ATTEMPT, a->s_att, sizeof(a->s_att), args);
}

agent *
agent_new(struct ev_loop *loop, gp_bus *bus, const agent_opts *o, gpu_backend *gpu)
{
    agent *a = calloc(1, sizeof(*a));

    if (a == NULL)
        return NULL;
    a->loop = loop;
    a->bus = bus;
    a->gpu = gpu;
    a->connected = true;
    a->t0_ms = gp_mono_ms();
    defaults(a, o);
    if (subjects(a, o) != GP_EOK) {
        free(a);
        return NULL;
    }
    ev_timer_init(&a->req_t, req_fire, 0, 0);
    ev_timer_init(&a->hb_t, hb_fire, 0, 0);
    ev_timer_init(&a->lease_t, lease_fire, LEASE_CHECK_S, LEASE_CHECK_S);
    ev_timer_init(&a->ev_t, ev_retry, 0, 0);
    sample_gpus(a);
    schedule_req(a, o->start_delay_s);
    return a;
}

void
agent_free(agent *a)
{
    if (a == NULL)
        return;
    ev_timer_stop(a->loop, &a->req_t);
    ev_timer_stop(a->loop, &a->hb_t);
    ev_timer_stop(a->loop, &a->lease_t);
    ev_timer_stop(a->loop, &a->ev_t);
    for (attempt *t = a->atts, *n; t != NULL; t = n) {
        n = t->next;
        attempt_kill_now(t);
        if (!t->done)
            tell_end(a, t, -1);
        attempt_free(t);
    }
    for (outmsg *m = a->outq, *n; m != NULL; m = n) {
        n = m->next;
        ev_timer_stop(a->loop, &m->t);
        free(m->ctx);
        free(m);
    }
    for (reqctx *c = a->ctxs; c != NULL; c = c->next)
        c->a = NULL;                   /* its callback frees it */
    free(a->evq);
    free(a);
}
