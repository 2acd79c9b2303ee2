/* fleet.c -- the recovery service's in-memory view of the fleet: sites
 * (with their regions' buckets) and nodes, found and added by id.  Below
 * sites.c, replace.c and leaf.c, which all read it: sites.c fills it from
 * the inventory and the node states, replace.c from the rows PostgreSQL
 * still has lost at start.  Loop thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recovery.h"

rsite *
recovery_site(recovery *r, const char *id)
{
    int32_t ix = rmap_find(&r->site_ix, r->sites, sizeof(*r->sites), id);

    return ix < 0 ? NULL : &r->sites[ix];
}

rbucket *
recovery_region_bucket(recovery *r, const rsite *s)
{
    for (uint32_t i = 0; s != NULL && s->region[0] != '\0' && i < r->nregions; i++)
        if (strcmp(r->regions[i].id, s->region) == 0)
            return &r->regions[i].bucket;
    return NULL;
}

void
recovery_region_add(recovery *r, const char *region)
{
    struct rregion *v;

    if (region[0] == '\0')
        return;
    for (uint32_t i = 0; i < r->nregions; i++)
        if (strcmp(r->regions[i].id, region) == 0)
            return;
    if ((v = realloc(r->regions, (r->nregions + 1) * sizeof(*v))) == NULL)
        return;
    r->regions = v;
    memset(&v[r->nregions], 0, sizeof(*v));
    snprintf(v[r->nregions].id, sizeof(v[0].id), "%s", region);
    r->nregions++;
}

/* The site's record, added when new (NULL without memory). */
rsite *
recovery_site_get(recovery *r, const char *id)
{
    rsite *s = recovery_site(r, id);

    if (s != NULL)
        return s;
    if (r->nsites == r->capsites) {
        uint32_t cap = r->capsites ? r->capsites * 2 : 256;
        rsite   *v = realloc(r->sites, cap * sizeof(*v));

        if (v == NULL)
            return NULL;
        r->sites = v;
        r->capsites = cap;
    }
    s = &r->sites[r->nsites];
    memset(s, 0, sizeof(*s));
    snprintf(s->id, sizeof(s->id), "%s", id);
    if (rmap_put(&r->site_ix, r->sites, sizeof(*r->sites), id, (int32_t)r->nsites) != 0)
        return NULL;
    r->nsites++;
    return s;
}

rnode *
recovery_node_get(recovery *r, const char *id, int32_t site)
{
    int32_t ix = rmap_find(&r->node_ix, r->nodes, sizeof(*r->nodes), id);
    rnode  *n;

    if (ix >= 0) {
        r->nodes[ix].site = site;
        return &r->nodes[ix];
    }
    if (r->nnodes == r->capnodes) {
        uint32_t cap = r->capnodes ? r->capnodes * 2 : 1024;
        rnode   *v = realloc(r->nodes, cap * sizeof(*v));

        if (v == NULL)
            return NULL;
        r->nodes = v;
        r->capnodes = cap;
    }
    n = &r->nodes[r->nnodes];
    memset(n, 0, sizeof(*n));
    snprintf(n->id, sizeof(n->id), "%s", id);
    n->site = site;
    r->sites[site].seen++;
    if (rmap_put(&r->node_ix, r->nodes, sizeof(*r->nodes), id, (int32_t)r->nnodes) != 0)
        return NULL;
    r->nnodes++;
    return n;
}

/* A node PostgreSQL had lost at start: counted without an event. */
void
recovery_mark_lost(recovery *r, const char *site, const char *node)
{
    rsite *s = recovery_site_get(r, site);
    rnode *n = s != NULL ? recovery_node_get(r, node, (int32_t)(s - r->sites)) : NULL;

    if (n == NULL || n->lost)
        return;
    n->lost = true;
    s->lost++;
}
