/* fair_test -- the pending queue's order: priority, weighted fair
 * share on decayed GPU-seconds, age; bounded aging; and the hold that lets a
 * big job through a stream of small ones (simulated against place()). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../../services/scheduler/plan/fair.h"
#include "../../../services/scheduler/plan/place.h"
#include "test.h"

#define MIN_MS 60000ull

static fair_job fj(const char *job, const char *tenant, int32_t prio, uint32_t gpus,
                   uint64_t at)
{
    fair_job j;
    memset(&j, 0, sizeof j);
    snprintf(j.job, sizeof j.job, "%s", job);
    snprintf(j.tenant, sizeof j.tenant, "%s", tenant);
    j.priority = prio;
    j.gpus = gpus;
    j.submitted_ms = at;
    return j;
}

static void test_alternate(void)
{
    fair f;
    fair_init(&f, NULL);
    fair_job q[6] = {fj("a1", "A", 100, 1, 0), fj("a2", "A", 100, 1, 1), fj("a3", "A", 100, 1, 2),
                     fj("b1", "B", 100, 1, 3), fj("b2", "B", 100, 1, 4), fj("b3", "B", 100, 1, 5)};
    T_OK(fair_order(&f, q, 6, 10) == 0);
    const char *want[6] = {"a1", "b1", "a2", "b2", "a3", "b3"};
    for (int i = 0; i < 6; i++) T_OKM(!strcmp(q[i].job, want[i]), "alternate %d: %s", i, q[i].job);
    fair_free(&f);
}

static void test_heavy_yields(void)
{
    fair f;
    fair_init(&f, NULL);
    T_OK(fair_record(&f, "H", 100000.0, 0) == 0);
    fair_job q[6] = {fj("h1", "H", 100, 1, 0), fj("h2", "H", 100, 1, 1), fj("h3", "H", 100, 1, 2),
                     fj("l1", "L", 100, 1, 50), fj("l2", "L", 100, 1, 51), fj("l3", "L", 100, 1, 52)};
    fair_order(&f, q, 6, 100);
    for (int i = 0; i < 3; i++) T_OKM(q[i].tenant[0] == 'L', "light first %d: %s", i, q[i].job);
    for (int i = 3; i < 6; i++) T_OK(q[i].tenant[0] == 'H');
    T_OK(!strcmp(q[3].job, "h1"));            /* age within a tenant */
    /* decay: a half-life later the usage counts half */
    T_OKM(fabs(fair_share(&f, "H", f.cfg.half_life_ms) - 50000.0) < 1e-6, "half-life");
    /* late report decays to the tenant's time, never increases the past */
    fair_record(&f, "H", 1000.0, 0);
    T_OKM(fabs(fair_share(&f, "H", 0) - 101000.0) < 1e-6, "record at 0");
    /* weights: W used more, but at weight 2 its 1,500 counts as 750 < 1,000 */
    fair_record(&f, "W", 1500.0, 0);
    fair_record(&f, "X", 1000.0, 0);
    fair_set_weight(&f, "W", 2);
    fair_job w[2] = {fj("x1", "X", 100, 1, 0), fj("w1", "W", 100, 1, 9)};
    fair_order(&f, w, 2, 0);
    T_OK(!strcmp(w[0].job, "w1"));
    /* once L has been charged past H's share, H gets a turn: after 2 L jobs
     * of 100 GPUs x 600 s, L is at 120,000 > H's 101,000 */
    fair_job z[4] = {fj("L1", "L", 100, 100, 0), fj("L2", "L", 100, 100, 1),
                     fj("L3", "L", 100, 100, 2), fj("H1", "H", 100, 1, 3)};
    fair_order(&f, z, 4, 0);
    T_OK(!strcmp(z[0].job, "L1") && !strcmp(z[1].job, "L2") && !strcmp(z[2].job, "H1") &&
         !strcmp(z[3].job, "L3"));
    fair_free(&f);
}

static void test_priority_and_aging(void)
{
    fair f;
    fair_init(&f, NULL);
    fair_record(&f, "H", 1e9, 0);
    uint64_t now = 1000 * MIN_MS;
    fair_job q[4] = {fj("low-old", "L", 50, 1, now - 60 * MIN_MS),   /* +60: 110 */
                     fj("mid", "L", 101, 1, now),
                     fj("heavy-high", "H", 200, 1, now),              /* priority beats share */
                     fj("zero-ancient", "L", 0, 1, 0)};               /* +100 at most */
    fair_order(&f, q, 4, now);
    T_OK(!strcmp(q[0].job, "heavy-high"));
    T_OK(!strcmp(q[1].job, "low-old"));
    T_EQ_INT(q[1].eff_priority, 110);
    T_OK(!strcmp(q[2].job, "mid"));
    T_OK(!strcmp(q[3].job, "zero-ancient"));
    T_EQ_INT(q[3].eff_priority, 100);          /* bounded by aging_max */
    /* one priority, one bonus: the heavy tenant's backlog waited minutes
     * longer, yet the light newcomer goes first (fair share, not age) */
    fair_job r[3] = {fj("h-old", "H", 100, 1, now - 5 * MIN_MS), fj("h-new", "H", 100, 1, now),
                     fj("l-new", "L", 100, 1, now)};
    fair_order(&f, r, 3, now);
    T_OKM(!strcmp(r[0].job, "l-new"), "newcomer first: %s", r[0].job);
    T_OK(!strcmp(r[1].job, "h-old") && !strcmp(r[2].job, "h-new"));
    T_EQ_INT(r[0].eff_priority, 105);
    T_EQ_INT(r[2].eff_priority, 105);
    fair_free(&f);
}

static void test_hold_choice(void)
{
    fair f;
    fair_init(&f, NULL);
    uint64_t now = 1000 * MIN_MS;
    fair_job q[4] = {fj("big-new", "B", 100, 16, now - 29 * MIN_MS),   /* not yet starving */
                     fj("big-old", "B", 100, 16, now - 40 * MIN_MS),
                     fj("big-older", "C", 100, 16, now - 50 * MIN_MS),
                     fj("urgent", "U", 900, 1, now)};
    fair_order(&f, q, 4, now);
    T_OK(!strcmp(q[0].job, "big-older") && q[0].hold);    /* first, even before 900 */
    int holds = 0;
    for (int i = 0; i < 4; i++) holds += q[i].hold;
    T_EQ_INT(holds, 1);
    T_OK(!strcmp(q[1].job, "urgent"));
    fair_free(&f);
}

/* ---- a big job in a stream of small ones ------------------------------------------ */

typedef struct run { char node[64], job[64]; int end; } run;
typedef struct pend { char job[64], tenant[16]; uint32_t g, n; uint64_t at; } pend;

typedef struct sim {
    snap s;
    fair f;
    run running[256]; int nrun;
    pend pending[2048]; int npend;
    int seq;
    bool claimed;
    int big_started;              /* tick, or -1 */
} sim;

static void sim_fleet(sim *m)
{
    snap_init(&m->s, NULL);
    msg_tenant t;
    memset(&t, 0, sizeof t);
    snprintf(t.id, sizeof t.id, "op");
    snap_tenant_upsert(&m->s, &t);
    msg_site st;
    memset(&st, 0, sizeof st);
    snprintf(st.id, sizeof st.id, "hub");
    snap_site_upsert(&m->s, &st);
    msg_pool p;
    memset(&p, 0, sizeof p);
    snprintf(p.id, sizeof p.id, "all");
    snprintf(p.tenant, sizeof p.tenant, "op");
    snap_pool_upsert(&m->s, &p);
    for (int k = 0; k < 2; k++) {
        msg_gpu g[8];
        msg_node n;
        memset(g, 0, sizeof g);
        memset(&n, 0, sizeof n);
        snprintf(n.id, sizeof n.id, "n%d", k);
        snprintf(n.site, sizeof n.site, "hub");
        for (int i = 0; i < 8; i++) {
            g[i].index = i;
            snprintf(g[i].model, sizeof g[i].model, "H100");
            g[i].vram_mb = 81920;
        }
        n.gpus.v = g;
        n.gpus.n = 8;
        n.state = SNAP_HEALTHY;
        GP_SET_HAS(&n, MSG_NODE__STATE);
        snap_node_upsert(&m->s, &n);
    }
}

static void sim_book(sim *m, const pend *j, const place_choice *c, int tick)
{
    for (uint32_t k = 0; k < c->nnodes; k++) {
        snap_book(&m->s, c->node[k], c->gpus[k], j->job, 1, 100, true);
        run *r = &m->running[m->nrun++];
        snprintf(r->node, sizeof r->node, "%s", c->node[k]);
        snprintf(r->job, sizeof r->job, "%s", j->job);
        r->end = tick + 3;
    }
    if (!strcmp(j->job, "big")) m->big_started = tick;
}

static void sim_claim(sim *m, const msg_job_spec *spec, bool on)
{
    place_params p;
    place_params_default(&p);
    p.ignore_free = true;
    p.walk_all = true;
    place_result r;
    if (place(&m->s, "op", spec, &p, &r) != PLACE_OK) return;
    for (uint32_t k = 0; k < r.choice[0].nnodes; k++) snap_node_claim(&m->s, r.choice[0].node[k], on);
    m->claimed = on;
}

/* One scheduling pass: order, then place each in order. */
static void sim_pass(sim *m, int tick)
{
    fair_job q[2048];
    uint64_t now = (uint64_t)tick * MIN_MS;
    for (int i = 0; i < m->npend; i++) {
        q[i] = fj(m->pending[i].job, m->pending[i].tenant, 100, m->pending[i].g * m->pending[i].n,
                  m->pending[i].at);
        q[i].data = &m->pending[i];
    }
    fair_order(&m->f, q, (size_t)m->npend, now);
    bool placed[2048] = {false};
    for (int i = 0; i < m->npend; i++) {
        pend *j = q[i].data;
        msg_job_spec spec;
        memset(&spec, 0, sizeof spec);
        spec.gpus_per_node = (int32_t)j->g;
        spec.nodes = (int32_t)j->n;
        GP_SET_HAS(&spec, MSG_JOB_SPEC__NODES);
        place_params p;
        place_params_default(&p);
        p.claimant = q[i].hold;
        place_result r;
        if (place(&m->s, "op", &spec, &p, &r) == PLACE_OK) {
            if (q[i].hold && m->claimed) sim_claim(m, &spec, false);
            sim_book(m, j, &r.choice[0], tick);
            placed[j - m->pending] = true;
        } else if (q[i].hold && !m->claimed) {
            sim_claim(m, &spec, true);
        }
    }
    int o = 0;
    for (int i = 0; i < m->npend; i++)
        if (!placed[i]) m->pending[o++] = m->pending[i];
    m->npend = o;
}

static void sim_tick(sim *m, int tick)
{
    int o = 0;
    for (int i = 0; i < m->nrun; i++) {
        if (m->running[i].end <= tick) snap_unbook(&m->s, m->running[i].node, m->running[i].job, 1);
        else m->running[o++] = m->running[i];
    }
    m->nrun = o;
    for (int k = 0; k < 5 && m->npend < 2000; k++) {     /* 5 one-GPU jobs a minute */
        pend *j = &m->pending[m->npend++];
        snprintf(j->job, sizeof j->job, "s%d", m->seq++);
        snprintf(j->tenant, sizeof j->tenant, "small");
        j->g = 1;
        j->n = 1;
        j->at = (uint64_t)tick * MIN_MS;
    }
    sim_pass(m, tick);
}

/* The big job (2 nodes x 8 GPUs) arrives at tick 1 into a busy hub. */
static int sim_run(uint64_t hold_after_ms)
{
    static sim m;
    memset(&m, 0, sizeof m);
    m.big_started = -1;
    sim_fleet(&m);
    fair_cfg c;
    fair_cfg_default(&c);
    c.hold_after_ms = hold_after_ms;
    fair_init(&m.f, &c);
    sim_tick(&m, 0);
    pend *b = &m.pending[m.npend++];
    snprintf(b->job, sizeof b->job, "big");
    snprintf(b->tenant, sizeof b->tenant, "big");
    b->g = 8;
    b->n = 2;
    b->at = MIN_MS;
    for (int t = 1; t < 300 && m.big_started < 0; t++) sim_tick(&m, t);
    T_OK(snap_check(&m.s) == 0);
    snap_free(&m.s);
    fair_free(&m.f);
    return m.big_started;
}

static void test_big_job_gets_through(void)
{
    int never = sim_run(UINT64_MAX);            /* no hold: small jobs backfill forever */
    T_OKM(never < 0, "without the hold the big job starves (%d)", never);
    int held = sim_run(30 * MIN_MS);
    /* starving at minute 31, then at most 3 minutes for the small jobs to end */
    T_OKM(held >= 31 && held <= 35, "with the hold the big job starts at minute %d", held);
}

int main(void)
{
    test_alternate();
    test_heavy_yields();
    test_priority_and_aging();
    test_hold_choice();
    test_big_job_gets_through();
    return T_DONE();
}
