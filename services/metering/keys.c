/* keys.c -- the names of metering's Redis keys and the reading of its
 * record lines (scripts.h's layout), for beat.c, close.c, outbox.c,
 * store.c and epoch.c alike: a file of its own below them, so the outbox
 * does not reach up into the heartbeat path for a key name.  Pure; any
 * thread. */
#include <stdio.h>
#include <string.h>

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

bool
metering_line_read(const char *line, metering_line *l)
{
    unsigned final = 0;
    int      n;

    memset(l, 0, sizeof(*l));
    n = sscanf(line, "%63s %u %63s %63s %llu %u %llu %llu %llu %llu %llu %llu %llu %u %llu %u "
               "%23s %llu %llu %llu %llu", l->job, &l->att, l->node, l->site, &l->window,
               &l->window_ms, &l->first_ms, &l->last_ms, &l->gpu_ms, &l->energy_mj,
               &l->from_gpu_ms, &l->from_energy_mj, &l->dropped_gpu_ms, &l->resets, &l->site_seq,
               &final, l->end_event, &l->ckpt_gpu_ms, &l->ckpt_energy_mj, &l->raw_gpu_ms,
               &l->raw_energy_mj);
    l->final = final == 1;
    l->has_raw = n == 21;
    return n >= 19 && l->att != 0 && l->window_ms != 0;
}
