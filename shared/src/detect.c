/* detect.c -- see gp/detect.h. */
#include "gp/detect.h"

#include <stddef.h>

#define SAMPLES_MAX 1000000u

void
gp_detect_cfg_default(gp_detect_cfg *c, uint32_t interval_ms)
{
    c->interval_ms = interval_ms;
    c->floor_ms = 2 * interval_ms + 1000; /* one lost beat and a second of jitter */
    c->ceiling_ms = 6 * interval_ms;
    c->k = 4;
    c->lost_ms = 2 * interval_ms + 500; /* a lease of 9 s at 5 s, and 1.5 s of margin */
}

const char *
gp_detect_cfg_check(const gp_detect_cfg *c)
{
    if (c->interval_ms == 0)
        return "interval_ms must be > 0";
    if (c->floor_ms <= c->interval_ms)
        return "floor_ms must exceed the heartbeat interval";
    if (c->ceiling_ms < c->floor_ms)
        return "ceiling_ms must be >= floor_ms";
    if (c->ceiling_ms > 3600000)
        return "ceiling_ms must be at most an hour";
    if (c->k == 0 || c->k > 16)
        return "k must be 1 to 16";
    if (c->lost_ms < c->interval_ms)
        return "lost_ms must be >= the heartbeat interval";
    return NULL;
}

/* Jacobson/Karels in fixed point: mean8 = 8 x mean, dev4 = 4 x deviation;
 * the first sample x sets mean x and deviation x/2 (RFC 6298 2.2). */
static void
sample(gp_detect *d, uint32_t x)
{
    if (d->samples == 0) {
        d->mean8 = x * 8;
        d->dev4 = x * 2;
    } else {
        int64_t err = (int64_t)x - (int64_t)(d->mean8 >> 3);

        d->mean8 = (uint32_t)((int64_t)d->mean8 + err);
        d->dev4 = (uint32_t)((int64_t)d->dev4 + (err < 0 ? -err : err) - (int64_t)(d->dev4 >> 2));
    }
    if (d->samples < SAMPLES_MAX)
        d->samples++;
}

void
gp_detect_beat(gp_detect *d, const gp_detect_cfg *c, uint64_t now_ms)
{
    if (d->last_beat_ms != 0 && now_ms > d->last_beat_ms &&
        now_ms - d->last_beat_ms <= c->ceiling_ms)
        sample(d, (uint32_t)(now_ms - d->last_beat_ms));
    if (now_ms > d->last_beat_ms)
        d->last_beat_ms = now_ms;
    gp_detect_contact(d, now_ms);
}

void
gp_detect_contact(gp_detect *d, uint64_t now_ms)
{
    if (now_ms > d->last_contact_ms)
        d->last_contact_ms = now_ms;
}

uint32_t
gp_detect_deadline_ms(const gp_detect *d, const gp_detect_cfg *c)
{
    uint64_t mean = d->samples ? d->mean8 >> 3 : c->interval_ms;
    uint64_t dev = d->samples ? d->dev4 >> 2 : c->interval_ms / 2;
    uint64_t t = mean + (uint64_t)c->k * dev;

    if (t < c->floor_ms)
        t = c->floor_ms;
    if (t > c->ceiling_ms)
        t = c->ceiling_ms;
    return (uint32_t)t;
}

/* Silence is no heartbeat within the node's deadline and no message at
 * all within the floor: renewals that still arrive mean the node is up
 * and only its heartbeats got lost. */
uint64_t
gp_detect_suspect_at(const gp_detect *d, const gp_detect_cfg *c)
{
    uint64_t by_beat = d->last_beat_ms + gp_detect_deadline_ms(d, c);
    uint64_t by_contact = d->last_contact_ms + c->floor_ms;

    return by_beat > by_contact ? by_beat : by_contact;
}

uint64_t
gp_detect_lost_at(const gp_detect *d, const gp_detect_cfg *c)
{
    uint64_t by_contact = d->last_contact_ms + c->lost_ms;
    uint64_t suspect = gp_detect_suspect_at(d, c);

    return by_contact > suspect ? by_contact : suspect;
}

int
gp_detect_state(const gp_detect *d, const gp_detect_cfg *c, uint64_t now_ms)
{
    if (now_ms > gp_detect_lost_at(d, c))
        return GP_DETECT_LOST;
    if (now_ms > gp_detect_suspect_at(d, c))
        return GP_DETECT_SUSPECT;
    return GP_DETECT_HEALTHY;
}
