/* map.c -- the small containers of the recovery service: an id -> index
 * map over an array of records whose first member is the id, and a token
 * bucket. */
#include <stdlib.h>
#include <string.h>

#include "gp/shard.h"
#include "recovery.h"

static const char *
id_at(const void *base, size_t stride, int32_t ix)
{
    return (const char *)base + (size_t)ix * stride;
}

int32_t
rmap_find(const rmap *m, const void *base, size_t stride, const char *id)
{
    if (m->cap == 0)
        return -1;
    for (uint32_t i = gp_fnv1a(id) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->slot[i] < 0)
            return -1;
        if (strcmp(id_at(base, stride, m->slot[i]), id) == 0)
            return m->slot[i];
    }
}

static int
grow(rmap *m, const void *base, size_t stride, uint32_t count)
{
    uint32_t cap = m->cap ? m->cap * 2 : 1024;
    int32_t *slot = malloc(cap * sizeof(*slot));

    if (slot == NULL)
        return -1;
    memset(slot, 0xff, cap * sizeof(*slot));
    for (uint32_t k = 0; k < m->cap; k++) {
        int32_t ix = m->slot[k];
        uint32_t i;

        if (ix < 0)
            continue;
        for (i = gp_fnv1a(id_at(base, stride, ix)) & (cap - 1); slot[i] >= 0; i = (i + 1) & (cap - 1))
            ;
        slot[i] = ix;
    }
    (void)count;
    free(m->slot);
    m->slot = slot;
    m->cap = cap;
    return 0;
}

/* ix is the record's index; the caller keeps count (ix + 1 after a put of
 * a new record), so the map stays at most half full. */
int
rmap_put(rmap *m, const void *base, size_t stride, const char *id, int32_t ix)
{
    uint32_t i;

    if (((uint32_t)ix + 1) * 2 > m->cap && grow(m, base, stride, (uint32_t)ix) != 0)
        return -1;
    for (i = gp_fnv1a(id) & (m->cap - 1); m->slot[i] >= 0; i = (i + 1) & (m->cap - 1))
        if (strcmp(id_at(base, stride, m->slot[i]), id) == 0)
            break;
    m->slot[i] = ix;
    return 0;
}

void
rmap_free(rmap *m)
{
    free(m->slot);
    m->slot = NULL;
    m->cap = 0;
}

/* Refills at per_min a minute up to 10 s of it (at least 1 token) and
 * takes one; returns the tokens left after the take, or < 0 when there
 * was none (nothing taken). */
double
rbucket_take(rbucket *b, unsigned per_min, uint64_t now_ms)
{
    double cap = per_min / 6.0 < 1.0 ? 1.0 : per_min / 6.0;

    if (b->at_ms == 0)
        b->tokens = cap;
    else
        b->tokens += (double)(now_ms - b->at_ms) * per_min / 60000.0;
    if (b->tokens > cap)
        b->tokens = cap;
    b->at_ms = now_ms;
    if (b->tokens < 1.0)
        return -1.0;
    b->tokens -= 1.0;
    return b->tokens;
}
