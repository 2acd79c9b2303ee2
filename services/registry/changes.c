/* changes.c -- the inventory's change events: SiteChange on
 * gp.int.inventory.site.<site> and NodeChange on
 * gp.int.inventory.node.<site>.<node>, published after the write
 * committed, with the row's revision (migration 5), for the services that
 * follow the inventory (shared gp/inventory.h).  A publish that fails is
 * only logged: a follower's periodic full reload still brings the change,
 * and its revision keeps a late event from undoing a newer one. */
#include <stdio.h>
#include <string.h>

#include "gp/clock.h"
#include "gp/log.h"
#include "registry.h"

/* The admin verb's SiteChange.change. */
static int32_t
change_of(const char *verb)
{
    return strcmp(verb, "create") == 0   ? MSG_SITE_CHANGE_CHANGE_CREATED
           : strcmp(verb, "delete") == 0 ? MSG_SITE_CHANGE_CHANGE_DELETED
                                         : MSG_SITE_CHANGE_CHANGE_UPDATED;
}

void
registry_site_changed(registry *r, const char *verb, const char *id, uint64_t rev,
                      const msg_site *site)
{
    msg_site_change ev = {0};
    const char     *args[1] = {id};
    gp_err          rc;

    ev.change = change_of(verb);
    snprintf(ev.id, sizeof(ev.id), "%s", id);
    ev.rev = rev;
    ev.at_ms = gp_wall_ms();
    GP_SET_HAS(&ev, MSG_SITE_CHANGE__AT_MS);
    if (site != NULL) {
        ev.site = *site;                 /* borrowed: only encoded, never cleared here */
        GP_SET_HAS(&ev, MSG_SITE_CHANGE__SITE);
    }
    rc = gp_app_publish(r->app, GP_OP_INVENTORY_SITE, args, &ev);
    if (rc != GP_EOK)
        GP_WARN("site_change_not_published", "site=%s change=%s rev=%llu code=%s", id,
                msg_site_change_change_names[ev.change], (unsigned long long)rev,
                gp_err_name(rc));
}

void
registry_node_changed(registry *r, int32_t change, const char *site, const char *id, uint64_t rev,
                      const msg_node *node)
{
    msg_node_change ev = {0};
    const char     *args[2] = {site, id};
    gp_err          rc;

    ev.change = change;
    snprintf(ev.id, sizeof(ev.id), "%s", id);
    snprintf(ev.site, sizeof(ev.site), "%s", site);
    ev.rev = rev;
    ev.at_ms = gp_wall_ms();
    GP_SET_HAS(&ev, MSG_NODE_CHANGE__AT_MS);
    if (node != NULL) {
        ev.node = *node;                 /* borrowed, as above */
        GP_SET_HAS(&ev, MSG_NODE_CHANGE__NODE);
    }
    rc = gp_app_publish(r->app, GP_OP_INVENTORY_NODE, args, &ev);
    if (rc != GP_EOK)
        GP_WARN("node_change_not_published", "site=%s node=%s change=%s rev=%llu code=%s", site,
                id, msg_node_change_change_names[change], (unsigned long long)rev,
                gp_err_name(rc));
}
