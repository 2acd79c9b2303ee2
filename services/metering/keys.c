/* keys.c -- the names of metering's Redis keys (scripts.h's layout), for
 * beat.c, close.c and outbox.c alike: a file of its own below them, so the
 * outbox does not reach up into the heartbeat path for a key name.  Pure;
 * any thread. */
#include <stdio.h>

#include "metering.h"

void
metering_key(char *out, unsigned shard, const char *what)
{
    snprintf(out, METERING_KEY_LEN, "gp:{%u}:m:%s", shard, what);
}

void
metering_att_key(char *out, unsigned shard, char kind, const char *member)
{
    snprintf(out, METERING_KEY_LEN, "gp:{%u}:m:%c:%s", shard, kind, member);
}

void
metering_member(char *out, size_t n, const char *job, uint32_t att, const char *node)
{
    snprintf(out, n, "%s:%u:%s", job, att, node);
}
