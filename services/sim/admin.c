/* admin.c -- the admin phase of the simulator: the registry learns the
 * fleet (its tenants, sites, pools and products, created through
 * gp.admin.*, a window of requests at once, tenants one by one), then
 * the caller's done callback runs (start.c: the agents, the workload).
 * A registry that is not up yet is waited for up to admin-wait-ms; one
 * that never answers leaves the fleet to start without its inventory. */
#include <stdio.h>
#include <stdlib.h>

#include "gp/call.h"
#include "gp/clock.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "sim.h"

/* ---- admin phase: the registry learns the fleet ------------------------------ */

enum { PH_TENANTS, PH_SITES, PH_POOLS, PH_PRODUCTS, PH_DONE };
static const gp_op *const phase_op[] = {GP_OP_ADMIN_TENANT_CREATE, GP_OP_ADMIN_SITE_CREATE,
                                        GP_OP_ADMIN_POOL_CREATE, GP_OP_ADMIN_PRODUCT_CREATE};

struct sim_admin {
    sim            *s;
    sim_admin_done *done;
    int             phase, next, total, inflight;
    unsigned        window;
    double          deadline;          /* gp_mono_s: the registry may be absent until then */
    bool            absent;
    int             created, existed, failed;
};

typedef struct call {
    ev_timer   retry;
    sim_admin *ad;
    int        phase, idx;
} call;

static void pump(sim_admin *ad);
static void issue(call *c);

static int
phase_total(const sim_admin *ad)
{
    switch (ad->phase) {
    case PH_TENANTS: return fleet_ntenants();
    case PH_SITES: return ad->s->f.nsites;
    case PH_POOLS: return ad->s->f.npools;
    case PH_PRODUCTS: return fleet_nproducts(&ad->s->f);
    }
    return 0;
}

static void
retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    issue(GP_CONTAINER_OF(w, call, retry));
}

static void
call_done(void *arg, gp_err err, const void *reply, const char *detail)
{
    call      *c = arg;
    sim_admin *ad = c->ad;

    (void)reply;
    if ((err == GP_ENOROUTE || err == GP_ETIMEOUT || err == GP_EUNAVAIL) && !ad->absent &&
        gp_mono_s() < ad->deadline) {
        ev_timer_init(&c->retry, retry_cb, 0.5, 0);     /* the registry is not up yet */
        ev_timer_start(ad->s->loop, &c->retry);
        return;
    }
    if (err == GP_ENOROUTE && !ad->absent) {
        ad->absent = true;
        GP_WARN("sim_no_registry", "subject=%s action=start_without_inventory",
                phase_op[c->phase]->address);
    }
    if (err == GP_EOK)
        ad->created++;
    else if (err == GP_EEXISTS)
        ad->existed++;                 /* a re-run: it is there already */
    else if (err != GP_ENOROUTE) {
        ad->failed++;
        GP_WARN("sim_admin_failed", "subject=%s index=%d code=%s detail=\"%s\"",
                phase_op[c->phase]->address, c->idx, gp_err_name(err), detail ? detail : "");
    }
    ad->inflight--;
    free(c);
    pump(ad);
}

static void
issue(call *c)
{
    sim_admin      *ad = c->ad;
    const fleet    *f = &ad->s->f;
    union { msg_tenant t; msg_site s; msg_pool p; msg_product q; } m;
    msg_power_price steps[4];
    const gp_op    *op = phase_op[c->phase];
    gp_err          rc;

    switch (c->phase) {
    case PH_TENANTS: fleet_tenant(c->idx, &m.t); break;
    case PH_SITES: fleet_site(f, c->idx, &m.s, steps); break;
    case PH_POOLS: fleet_pool(f, c->idx, &m.p); break;
    default: fleet_product(f, c->idx, &m.q); break;
    }
    rc = gp_call(ad->s->bus, op->address, op->in, &m, op->out, 10000, call_done, c);
    if (rc != GP_EOK)
        call_done(c, rc, NULL, "not sent");
}

static void
pump(sim_admin *ad)
{
    while (ad->phase < PH_DONE) {
        /* Tenants one by one: partners name the operator as their parent. */
        int window = ad->phase == PH_TENANTS ? 1 : (int)ad->window;

        while (!ad->absent && ad->inflight < window && ad->next < ad->total) {
            call *c = calloc(1, sizeof(*c));

            if (c == NULL)
                break;
            c->ad = ad;
            c->phase = ad->phase;
            c->idx = ad->next++;
            ad->inflight++;
            issue(c);
        }
        if (ad->inflight > 0)
            return;
        ad->phase++;
        ad->next = 0;
        ad->total = phase_total(ad);
    }
    printf("sim: inventory in registry: %d created, %d existed, %d failed%s in %.2f s\n",
           ad->created, ad->existed, ad->failed, ad->absent ? " (no registry)" : "",
           gp_mono_s() - ad->s->t_start);
    fflush(stdout);
    ad->done(ad->s);
}

gp_err
sim_admin_new(sim *s)
{
    if ((s->admin = calloc(1, sizeof(*s->admin))) == NULL)
        return GP_ENOMEM;
    s->admin->s = s;
    return GP_EOK;
}

void
sim_admin_start(sim *s, bool create, unsigned window, unsigned wait_ms, sim_admin_done *done)
{
    sim_admin *ad = s->admin;

    ad->done = done;
    ad->window = window;
    ad->deadline = gp_mono_s() + wait_ms / 1000.0;
    ad->phase = create ? PH_TENANTS : PH_DONE;
    ad->total = phase_total(ad);
    pump(ad);
}

void
sim_admin_free(sim *s)
{
    free(s->admin);
    s->admin = NULL;
}
