/* shard.c -- see gp/shard.h. */
#include <stdint.h>

#include "gp/shard.h"

uint32_t
gp_fnv1a(const char *s)
{
    uint32_t h = 2166136261u;

    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

unsigned
gp_shard_of(const char *site)
{
    return gp_fnv1a(site) % GP_SHARDS;
}
