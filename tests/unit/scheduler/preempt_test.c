/* preempt_test -- victims: only interruptible work of strictly lower
 * priority, the cheapest set (fewest attempts, then GPUs, then lowest
 * priorities), one node or one site, no cascade. */
#include <stdio.h>
#include <string.h>

#include "../../../services/scheduler/plan/preempt.h"
#include "test.h"

static void add_site(snap *s, const char *id)
{
    msg_site st;
    memset(&st, 0, sizeof st);
    snprintf(st.id, sizeof st.id, "%s", id);
    T_OK(snap_site_upsert(s, &st) == 0);
}

static void add_node(snap *s, const char *id, const char *site)
{
    msg_gpu g[8];
    msg_node n;
    memset(g, 0, sizeof g);
    memset(&n, 0, sizeof n);
    snprintf(n.id, sizeof n.id, "%s", id);
    snprintf(n.site, sizeof n.site, "%s", site);
    for (int i = 0; i < 8; i++) {
        g[i].index = i;
        snprintf(g[i].model, sizeof g[i].model, "H100");
        g[i].vram_mb = 81920;
    }
    n.gpus.v = g;
    n.gpus.n = 8;
    n.state = SNAP_HEALTHY;
    GP_SET_HAS(&n, MSG_NODE__STATE);
    T_OK(snap_node_upsert(s, &n) == 0);
}

/* hub: n1 A(4 GPUs, p10) B(4, p20); n2 C D E (2 each, p10) + 2 free;
 *      n3 F(8, p200); n4 G(8, p10, not interruptible); n5 H(8, p100) */
static void fleet(snap *s)
{
    T_OK(snap_init(s, NULL) == 0);
    msg_tenant t;
    memset(&t, 0, sizeof t);
    snprintf(t.id, sizeof t.id, "op");
    snap_tenant_upsert(s, &t);
    msg_pool p;
    memset(&p, 0, sizeof p);
    snprintf(p.id, sizeof p.id, "all");
    snprintf(p.tenant, sizeof p.tenant, "op");
    snap_pool_upsert(s, &p);
    add_site(s, "hub");
    const char *nodes[] = {"n1", "n2", "n3", "n4", "n5"};
    for (int i = 0; i < 5; i++) add_node(s, nodes[i], "hub");
    T_OK(snap_book(s, "n1", 0x0f, "A", 1, 10, true) == 0);
    T_OK(snap_book(s, "n1", 0xf0, "B", 1, 20, true) == 0);
    T_OK(snap_book(s, "n2", 0x03, "C", 1, 10, true) == 0);
    T_OK(snap_book(s, "n2", 0x0c, "D", 1, 10, true) == 0);
    T_OK(snap_book(s, "n2", 0x30, "E", 1, 10, true) == 0);
    T_OK(snap_book(s, "n3", 0xff, "F", 1, 200, true) == 0);
    T_OK(snap_book(s, "n4", 0xff, "G", 1, 10, false) == 0);
    T_OK(snap_book(s, "n5", 0xff, "H", 1, 100, true) == 0);
}

static msg_job_spec job(int g, int prio)
{
    msg_job_spec j;
    memset(&j, 0, sizeof j);
    j.gpus_per_node = g;
    j.priority = prio;
    GP_SET_HAS(&j, MSG_JOB_SPEC__PRIORITY);
    return j;
}

static bool has_victim(const preempt_result *r, const char *job)
{
    for (uint32_t i = 0; i < r->nvictims; i++)
        if (!strcmp(r->victim[i].job, job)) return true;
    return false;
}

/* No victim is ever of equal or higher priority, or not interruptible. */
static void lawful(const preempt_result *r, int prio)
{
    for (uint32_t i = 0; i < r->nvictims; i++)
        T_OKM(r->victim[i].priority < prio && strcmp(r->victim[i].job, "G"),
              "victim %s (priority %d) under %d", r->victim[i].job, r->victim[i].priority, prio);
}

static void test_cheapest(void)
{
    snap s;
    fleet(&s);
    place_params p;
    place_params_default(&p);
    preempt_result r;

    /* 4 GPUs: n2's 2 free + one 2-GPU attempt beats n1's 4-GPU attempt */
    msg_job_spec j = job(4, 100);
    T_EQ_INT(preempt_plan(&s, "op", &j, &p, &r), PREEMPT_OK);
    T_OK(!strcmp(r.target.node[0], "n2"));
    T_EQ_INT(r.nvictims, 1);
    T_EQ_INT(r.cost.attempts, 1);
    T_EQ_INT(r.cost.gpus, 2);
    T_EQ_INT(__builtin_popcountll(r.target.gpus[0]), 4);
    T_OK((r.target.gpus[0] & 0xc0) == 0xc0);          /* the free ones are used */
    T_EQ_INT(r.target.gpus[0] & ~(0xc0ull | r.victim[0].gpus), 0);
    lawful(&r, 100);

    /* 8 GPUs: two attempts on n1 beat three on n2 */
    j = job(8, 100);
    T_EQ_INT(preempt_plan(&s, "op", &j, &p, &r), PREEMPT_OK);
    T_OK(!strcmp(r.target.node[0], "n1"));
    T_EQ_INT(r.nvictims, 2);
    T_OK(has_victim(&r, "A") && has_victim(&r, "B"));
    T_EQ_INT(r.target.gpus[0], 0xff);
    lawful(&r, 100);

    /* priority 15: B (20) is out of reach, so n2's three attempts */
    j = job(8, 15);
    T_EQ_INT(preempt_plan(&s, "op", &j, &p, &r), PREEMPT_OK);
    T_OK(!strcmp(r.target.node[0], "n2"));
    T_EQ_INT(r.nvictims, 3);
    lawful(&r, 15);

    /* priority 10: every booking is of equal or higher priority */
    j = job(4, 10);
    T_EQ_INT(preempt_plan(&s, "op", &j, &p, &r), PREEMPT_NONE);
    T_EQ_INT(r.nvictims, 0);
    snap_free(&s);
}

static void test_never_cascade(void)
{
    snap s;
    fleet(&s);
    place_params p;
    place_params_default(&p);
    preempt_result r;

    /* priority 1000, 8 GPUs: one attempt anywhere; H (100) is the lowest */
    msg_job_spec j = job(8, 1000);
    T_EQ_INT(preempt_plan(&s, "op", &j, &p, &r), PREEMPT_OK);
    T_OK(!strcmp(r.target.node[0], "n5"));
    T_EQ_INT(r.nvictims, 1);
    T_OK(has_victim(&r, "H"));
    lawful(&r, 1000);
    /* H is being evicted: a second plan does not count on it again */
    T_OK(snap_mark_evicting(&s, "n5", "H", 1) == 0);
    T_EQ_INT(preempt_plan(&s, "op", &j, &p, &r), PREEMPT_OK);
    T_OK(!has_victim(&r, "H"));
    T_OK(!strcmp(r.target.node[0], "n3") && has_victim(&r, "F"));
    T_OK(!has_victim(&r, "G"));                       /* never non-interruptible */

    /* a job placed by preemption at 100 is never evicted for another 100 */
    snap_free(&s);
    fleet(&s);
    j = job(8, 100);
    T_EQ_INT(preempt_plan(&s, "op", &j, &p, &r), PREEMPT_OK);
    T_OK(!has_victim(&r, "H"));
    lawful(&r, 100);
    T_OK(snap_unbook(&s, "n1", "A", 1) == 0 && snap_unbook(&s, "n1", "B", 1) == 0);
    T_OK(snap_book(&s, "n1", r.target.gpus[0], "X", 1, 100, true) == 0);
    msg_job_spec y = job(8, 100);
    T_EQ_INT(preempt_plan(&s, "op", &y, &p, &r), PREEMPT_OK);
    T_OK(!has_victim(&r, "X") && !has_victim(&r, "H"));
    T_OK(!strcmp(r.target.node[0], "n2"));
    lawful(&r, 100);
    /* and once n2 is gone too, nothing is left to take at 100 */
    T_OK(snap_node_remove(&s, "n2") == 0);
    T_EQ_INT(preempt_plan(&s, "op", &y, &p, &r), PREEMPT_NONE);
    snap_free(&s);
}

static void test_multi_node_one_site(void)
{
    snap s;
    fleet(&s);
    add_site(&s, "edge");
    add_node(&s, "e1", "edge");
    add_node(&s, "e2", "edge");
    T_OK(snap_book(&s, "e1", 0xff, "V1", 1, 5, true) == 0);
    T_OK(snap_book(&s, "e2", 0x0f, "V2", 1, 5, true) == 0);
    place_params p;
    place_params_default(&p);
    preempt_result r;
    msg_job_spec j = job(8, 100);
    j.nodes = 2;
    GP_SET_HAS(&j, MSG_JOB_SPEC__NODES);
    T_EQ_INT(preempt_plan(&s, "op", &j, &p, &r), PREEMPT_OK);
    /* hub: 2 nodes cost 2+ attempts at priority up to 20; edge: 2 at 5 */
    T_OK(!strcmp(r.target.site, "edge"));
    T_EQ_INT(r.target.nnodes, 2);
    T_EQ_INT(r.nvictims, 2);
    T_OK(has_victim(&r, "V1") && has_victim(&r, "V2"));
    for (uint32_t i = 0; i < r.nvictims; i++) T_OK(r.victim[i].node[0] == 'e');
    snap_free(&s);
}

/* The cheapest node is found even when 20 nodes score better: place()
 * ranks by the victims' cost, not only by score, when it keeps its best 16. */
static void test_cheapest_beyond_top_choices(void)
{
    snap s;
    fleet(&s);
    add_site(&s, "big");
    char id[16];
    for (int i = 0; i < 20; i++) {
        snprintf(id, sizeof id, "c%d", i);
        add_node(&s, id, "big");
        T_OK(snap_book(&s, id, 0x0f, "L", (uint32_t)i, 10, true) == 0);
        T_OK(snap_book(&s, id, 0xf0, "R", (uint32_t)i, 10, true) == 0);
    }
    add_node(&s, "cheap", "big");
    T_OK(snap_book(&s, "cheap", 0xff, "ONE", 1, 10, true) == 0);
    T_OK(snap_node_temp(&s, "cheap", 95) == 0);          /* scores worst */
    for (int k = 0; k < 4; k++) T_OK(snap_node_fault(&s, "cheap", 0) == 0);
    place_params p;
    place_params_default(&p);
    preempt_result r;
    msg_job_spec j = job(8, 100);
    T_EQ_INT(preempt_plan(&s, "op", &j, &p, &r), PREEMPT_OK);
    T_OK(!strcmp(r.target.node[0], "cheap"));
    T_EQ_INT(r.nvictims, 1);
    T_OK(has_victim(&r, "ONE"));
    snap_free(&s);
}

/* On one node: of two single-attempt sets, the one with fewer GPUs; of two
 * equal ones, the lower priority. */
static void test_fewest_gpus_on_node(void)
{
    snap s;
    T_OK(snap_init(&s, NULL) == 0);
    msg_tenant t;
    memset(&t, 0, sizeof t);
    snprintf(t.id, sizeof t.id, "op");
    snap_tenant_upsert(&s, &t);
    msg_pool p0;
    memset(&p0, 0, sizeof p0);
    snprintf(p0.id, sizeof p0.id, "all");
    snprintf(p0.tenant, sizeof p0.tenant, "op");
    snap_pool_upsert(&s, &p0);
    add_site(&s, "solo");
    add_node(&s, "n6", "solo");
    T_OK(snap_book(&s, "n6", 0x3f, "P", 1, 10, true) == 0);   /* 6 GPUs */
    T_OK(snap_book(&s, "n6", 0x40, "Q", 1, 30, true) == 0);   /* 1 GPU, dearer priority */
    T_OK(snap_book(&s, "n6", 0x80, "S", 1, 20, true) == 0);   /* 1 GPU */
    place_params p;
    place_params_default(&p);
    preempt_result r;
    msg_job_spec j = job(1, 100);
    T_EQ_INT(preempt_plan(&s, "op", &j, &p, &r), PREEMPT_OK);
    T_EQ_INT(r.nvictims, 1);
    T_OK(has_victim(&r, "S"));                                /* 1 GPU at 20 */
    T_EQ_INT(r.target.gpus[0], 0x80);
    j = job(2, 100);
    T_EQ_INT(preempt_plan(&s, "op", &j, &p, &r), PREEMPT_OK);
    T_EQ_INT(r.nvictims, 1);                                  /* P alone: one attempt */
    T_OK(has_victim(&r, "P"));
    snap_free(&s);
}

int main(void)
{
    test_cheapest();
    test_never_cascade();
    test_multi_node_one_site();
    test_cheapest_beyond_top_choices();
    test_fewest_gpus_on_node();
    return T_DONE();
}
