/* detect_bench.c -- the node failure detector (gp/detect.h) replayed over
 * simulated node-days of heartbeats and lease renewals, next to a fixed
 * deadline of 3 missed heartbeats on the same traces (issue 8's bench).
 *
 * Every node is alive the whole time, so every node-lost is false.  A
 * node sends a heartbeat every interval; each message is lost with
 * probability LOSS and otherwise delayed by a log-normal time whose
 * median and spread come from the node's uplink profile (70% good, 25%
 * slow, 5% bad; heavy tails reorder beats on the bad ones).  The node
 * runs attempts, so its lease renewal follows agent.c: every heartbeat is
 * a renewal (the renewal carries the beat); a renewal alone is due
 * RENEW_GAP after the send of the last answered one (agent.c's
 * renew_gap_ms: a hedge after the next beat, two hedges before the lease
 * ends); while one is unanswered, another (a hedge) every lease/12 (+-20%),
 * the earlier ones still waiting; the first answer renews the lease from
 * its own send.  The lease ran out when that answer came later than the
 * last renewal's send + lease.  A renewal alone that arrives is contact;
 * one with a beat is a beat.
 *
 * Three detectors see the same arrivals: a fixed deadline (no heartbeat
 * for 3 intervals: lost), the adaptive deadline on heartbeats alone, and
 * the detector as configured (adaptive, renewals as contact).  An episode
 * is counted once, when a node that was judged lost (or suspect) speaks
 * again.  Then DEATHS nodes die at a random moment after an hour: the
 * time from the last heartbeat received to lost, p50 and p99, per rule.
 *
 * Pure CPU, no stack; GP_BENCH_DETECT_NODE_DAYS scales it (default
 * 10,000). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "bench.h"
#include "gp/detect.h"

#define INTERVAL_MS 5000u
#define LEASE_MS    9000u               /* the lease the defaults assume: lost-ms - 1.5 s */
#define HEDGE_MS    (LEASE_MS / 12)       /* agent.c's renew_hedge_ms */
#define RENEW_GAP   (LEASE_MS - 2 * HEDGE_MS < INTERVAL_MS + HEDGE_MS ? LEASE_MS - 2 * HEDGE_MS \
                                                                     : INTERVAL_MS + HEDGE_MS)
#define LOSS        0.01
#define DAY_MS      86400000ull
#define DEATHS      1000
#define HEAP_MAX    4096

typedef struct rng { uint64_t s; int has; double spare; } rng;

static uint64_t
rnd(rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ull;
}

static double
unit(rng *r)
{
    return ((double)(rnd(r) >> 11) + 0.5) / 9007199254740992.0;
}

static double
normal(rng *r)
{
    double u, v;

    if (r->has) {
        r->has = 0;
        return r->spare;
    }
    u = unit(r), v = unit(r);
    r->spare = sqrt(-2 * log(u)) * sin(2 * M_PI * v);
    r->has = 1;
    return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

typedef struct profile { double median_ms, sigma; } profile;

static const profile profiles[3] = {{30, 0.5}, {150, 0.8}, {400, 1.0}};

static const profile *
profile_of(uint64_t node)
{
    unsigned p = (unsigned)(node % 20);

    return p < 14 ? &profiles[0] : p < 19 ? &profiles[1] : &profiles[2];
}

/* One message's delay, or -1 when lost. */
static double
delay(rng *r, const profile *p)
{
    if (unit(r) < LOSS)
        return -1;
    return p->median_ms * exp(p->sigma * normal(r));
}

/* ---- arrivals in time order: a small binary heap ----------------------------- */

typedef struct arrival { uint64_t at; int beat; } arrival;
typedef struct heap { arrival v[HEAP_MAX]; int n; } heap;

static void
push(heap *h, uint64_t at, int beat)
{
    int i = h->n++;

    if (h->n > HEAP_MAX) {               /* cannot happen with these profiles */
        b_note("detect: heap overflow");
        exit(1);
    }
    while (i > 0 && h->v[(i - 1) / 2].at > at) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = (arrival){at, beat};
}

static arrival
pop(heap *h)
{
    arrival top = h->v[0], last = h->v[--h->n];
    int     i = 0;

    for (;;) {
        int c = 2 * i + 1;

        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->v[c + 1].at < h->v[c].at)
            c++;
        if (h->v[c].at >= last.at)
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    h->v[i] = last;
    return top;
}

/* ---- one node's run ----------------------------------------------------------- */

enum { R_FIXED, R_BEATS, R_FULL, R_N };
static const char *const rule_names[R_N] = {"fixed 3 missed beats", "adaptive, beats only",
                                             "adaptive + renewals"};

typedef struct judge {
    gp_detect d[R_N];          /* R_FIXED uses last_beat_ms only */
    uint64_t  lost[R_N], suspect[R_N];
} judge;

typedef struct node_run {
    rng            r;
    const profile *p;
    heap           h;
    uint64_t       next_beat, next_renew;
    uint64_t       last_ok;                /* send time of the last answered renewal */
    uint64_t       ans_at, ans_sent;       /* this round's first answer so far, its send */
    uint64_t       lapses;                 /* the agent's own lease ran out */
} node_run;

static const gp_detect_cfg *cfg;

static uint64_t
fixed_lost_at(const gp_detect *d)
{
    return d->last_beat_ms + 3 * INTERVAL_MS;
}

static void
arrive(judge *j, const arrival *a)
{
    gp_detect *f = &j->d[R_FIXED], *b = &j->d[R_BEATS], *x = &j->d[R_FULL];

    if (a->beat) {
        if (f->last_beat_ms != 0 && a->at > fixed_lost_at(f))
            j->lost[R_FIXED]++;
        if (b->last_beat_ms != 0) {
            j->lost[R_BEATS] += a->at > gp_detect_suspect_at(b, cfg) &&
                                a->at > b->last_beat_ms + cfg->lost_ms;
            j->suspect[R_BEATS] += a->at > gp_detect_suspect_at(b, cfg);
        }
        if (f->last_beat_ms < a->at)
            f->last_beat_ms = a->at;
        gp_detect_beat(b, cfg, a->at);
    }
    if (x->last_contact_ms != 0) {
        j->lost[R_FULL] += a->at > gp_detect_lost_at(x, cfg);
        j->suspect[R_FULL] += a->at > gp_detect_suspect_at(x, cfg);
    }
    if (a->beat)
        gp_detect_beat(x, cfg, a->at);
    else
        gp_detect_contact(x, a->at);
}

/* Sends the next message (beat or renewal) if it is due before until. */
static int
send_next(node_run *n, uint64_t until)
{
    int      beat = n->next_beat <= n->next_renew;
    uint64_t t = beat ? n->next_beat : n->next_renew;
    double   d;

    if (t >= until)
        return 0;
    /* the renewal round: its first answer ends it, and a hedge due now is
     * not sent (a beat is, and starts the next round) */
    if (n->ans_at != 0 && n->ans_at <= t) {
        n->lapses += n->last_ok != 0 && n->ans_at > n->last_ok + LEASE_MS;
        n->last_ok = n->ans_sent;
        n->next_renew = n->ans_sent + RENEW_GAP;
        if (n->next_renew < n->ans_at)
            n->next_renew = n->ans_at;
        n->ans_at = 0;
        if (!beat)
            return 1;
    }
    d = delay(&n->r, n->p);
    if (d >= 0)
        push(&n->h, t + (uint64_t)d, beat);
    if (beat)
        n->next_beat += INTERVAL_MS;
    /* this request (a beat or a renewal alone) goes out and the next hedge
     * is due */
    double back = d >= 0 ? delay(&n->r, n->p) : -1;
    if (d >= 0 && back >= 0 && d + back < LEASE_MS &&
        (n->ans_at == 0 || t + (uint64_t)(d + back) < n->ans_at)) {
        n->ans_at = t + (uint64_t)(d + back) + 1;
        n->ans_sent = t;
    }
    n->next_renew = t + (uint64_t)(HEDGE_MS * (0.8 + 0.4 * unit(&n->r)));
    return 1;
}

/* Runs a node from 0 to until_ms; arrivals are judged in time order. */
static void
run_node(node_run *n, judge *j, uint64_t until_ms)
{
    while (send_next(n, until_ms)) {
        uint64_t next = n->next_beat < n->next_renew ? n->next_beat : n->next_renew;

        while (n->h.n > 0 && n->h.v[0].at <= next) {
            arrival a = pop(&n->h);

            arrive(j, &a);
        }
    }
}

static void
node_init(node_run *n, uint64_t id, uint64_t seed)
{
    memset(n, 0, sizeof(*n));
    n->r.s = (seed + id) * 0x9e3779b97f4a7c15ull | 1;
    n->p = profile_of(id);
    n->next_beat = rnd(&n->r) % INTERVAL_MS;
    n->next_renew = rnd(&n->r) % RENEW_GAP;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static double
pct(const uint64_t *v, size_t n, double p)
{
    return (double)v[(size_t)(p * (double)(n - 1))];
}

int
main(void)
{
    static gp_detect_cfg c;
    const char *env = getenv("GP_BENCH_DETECT_NODE_DAYS");
    uint64_t    node_days = env != NULL ? strtoull(env, NULL, 10) : 10000, nodes, days = 5;
    judge       total = {0};
    uint64_t    lapses[3] = {0};
    node_run   *n = malloc(sizeof(*n));
    uint64_t   *lat[R_N];
    double      t0 = b_now();

    gp_detect_cfg_default(&c, INTERVAL_MS);
    cfg = &c;
    if (n == NULL || node_days < days)
        return 2;
    nodes = node_days / days;
    for (uint64_t id = 0; id < nodes; id++) {
        judge j = {0};

        node_init(n, id, 1);
        run_node(n, &j, days * DAY_MS);
        lapses[n->p - profiles] += n->lapses;
        for (int k = 0; k < R_N; k++)
            total.lost[k] += j.lost[k], total.suspect[k] += j.suspect[k];
    }
    b_note("detect: %llu nodes x %llu days, interval %u ms, lease %u ms, loss %.0f%% of messages, "
           "profiles 70%% 30 ms/0.5, 25%% 150 ms/0.8, 5%% 400 ms/1.0 (median, log sigma); "
           "floor %u ms ceiling %u ms k %u lost %u ms; %.1f s",
           (unsigned long long)nodes, (unsigned long long)days, INTERVAL_MS, LEASE_MS, LOSS * 100,
           c.floor_ms, c.ceiling_ms, c.k, c.lost_ms, b_now() - t0);
    b_kv("detect_node_days", (double)(nodes * days));
    for (int k = 0; k < R_N; k++)
        b_note("detect: %-22s false lost %llu, suspect %llu (per 10,000 node-days: %.2f lost)",
               rule_names[k], (unsigned long long)total.lost[k],
               (unsigned long long)total.suspect[k],
               (double)total.lost[k] * 10000.0 / (double)(nodes * days));
    b_note("detect: the agents' own leases ran out (hedged renewals, none answered within the "
           "lease): good %llu, slow %llu, bad %llu times",
           (unsigned long long)lapses[0], (unsigned long long)lapses[1],
           (unsigned long long)lapses[2]);
    b_kv("detect_lease_lapses", (double)(lapses[0] + lapses[1] + lapses[2]));
    b_kv("detect_false_lost_fixed", (double)total.lost[R_FIXED]);
    b_kv("detect_false_lost_beats", (double)total.lost[R_BEATS]);
    b_kv("detect_false_lost", (double)total.lost[R_FULL]);
    b_kv("detect_false_suspect", (double)total.suspect[R_FULL]);
    b_kv("detect_false_lost_per_10k_node_days",
         (double)total.lost[R_FULL] * 10000.0 / (double)(nodes * days));
    b_kv("detect_false_lost_fixed_per_10k_node_days",
         (double)total.lost[R_FIXED] * 10000.0 / (double)(nodes * days));

    /* deaths: after an hour and a random part of a minute, nothing more is
     * sent; what is in flight still arrives */
    for (int k = 0; k < R_N; k++)
        lat[k] = calloc(DEATHS, sizeof(uint64_t));
    for (int i = 0; i < DEATHS; i++) {
        judge    j = {0};
        uint64_t die;

        node_init(n, 1000000 + (uint64_t)i, 2);
        die = 3600000 + rnd(&n->r) % 60000;
        run_node(n, &j, die);
        while (n->h.n > 0) {
            arrival a = pop(&n->h);

            arrive(&j, &a);
        }
        lat[R_FIXED][i] = 3 * INTERVAL_MS;
        lat[R_BEATS][i] = gp_detect_suspect_at(&j.d[R_BEATS], cfg) - j.d[R_BEATS].last_beat_ms;
        if (lat[R_BEATS][i] < cfg->lost_ms)
            lat[R_BEATS][i] = cfg->lost_ms;
        lat[R_FULL][i] = gp_detect_lost_at(&j.d[R_FULL], cfg) - j.d[R_FULL].last_beat_ms;
    }
    for (int k = 0; k < R_N; k++) {
        qsort(lat[k], DEATHS, sizeof(uint64_t), cmp_u64);
        b_note("detect: %-22s last heartbeat -> lost over %d deaths: p50 %.1f s p99 %.1f s "
               "max %.1f s", rule_names[k], DEATHS, pct(lat[k], DEATHS, 0.5) / 1000,
               pct(lat[k], DEATHS, 0.99) / 1000, (double)lat[k][DEATHS - 1] / 1000);
    }
    b_kv("detect_lost_p50_ms", pct(lat[R_FULL], DEATHS, 0.5));
    b_kv("detect_lost_p99_ms", pct(lat[R_FULL], DEATHS, 0.99));
    b_kv("detect_lost_fixed_ms", pct(lat[R_FIXED], DEATHS, 0.99));
    for (int k = 0; k < R_N; k++)
        free(lat[k]);
    free(n);
    return 0;
}
