/* start.c -- gridpool-recovery's state on the app (gp_app_main's hooks):
 * replacement, site events (with the follower of the site inventory) and
 * the leaf evidence built at start, the lost nodes read once serving
 * starts, the /leafz reads cancelled at stop, the rest freed at exit. */
#include "recovery.h"

gp_err
recovery_init(gp_app *app, const void *cfg, void *state)
{
    recovery *r = state;
    gp_err    rc;

    r->app = app;
    r->cfg = cfg;
    recovery_replace_start(r);
    rc = recovery_sites_start(r);
    if (rc == GP_EOK)
        rc = recovery_leaf_start(r);
    if (rc == GP_EOK && r->leaf != NULL &&
        gp_app_every(app, "leafz", r->cfg->leafz_ms / 1000.0, recovery_leaf_run, r) == NULL)
        rc = GP_ENOMEM;
    return rc;
}

void
recovery_start(gp_app *app, void *state)
{
    (void)app;
    recovery_load_lost(state);
}

/* Reads of /leafz still out hold watchers on the loop: cancelled before
 * it goes. */
void
recovery_stop(gp_app *app, void *state)
{
    (void)app;
    recovery_leaf_free(state);
}

void
recovery_free(void *state)
{
    recovery_sites_free(state);            /* after the bus that freed its subscriptions */
}
