/* shard.c -- see gp/shard.h. */
#include <stdint.h>

#include "gp/shard.h"

unsigned
gp_shard_of(const char *site)
{
    uint32_t h = 2166136261u;

    for (const unsigned char *p = (const unsigned char *)site; *p != '\0'; p++)
        h = (h ^ *p) * 16777619u;
    return h % GP_SHARDS;
}
