/* start.c -- gridpool-registry's state on the app: built at start (the
 * state queue, the live view), freed at exit (gp_app_main's hooks). */
#include "registry.h"

gp_err
registry_init(gp_app *app, const void *cfg, void *state)
{
    registry *r = state;

    r->app = app;
    r->cfg = cfg;
    registry_states_start(r);
    registry_live_start(r);
    return GP_EOK;
}

void
registry_free(void *state)
{
    registry_nodes_free(state);
}
