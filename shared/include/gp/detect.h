/* gp/detect.h -- the node failure detector's arithmetic: when silence
 * makes a node suspect, and when it makes it lost.
 *
 * Suspect: each node's deadline after its last heartbeat adapts to its
 * own history, as TCP's retransmission timeout adapts to a path's round
 * trips (Jacobson/Karels, RFC 6298): a smoothed interval and a smoothed
 * mean deviation, both in integer fixed point, deadline = interval +
 * k x deviation, clamped to [floor, ceiling].  A slow or jittery uplink
 * gets a longer deadline and does not flap; a steady one is judged fast.
 * A gap longer than the ceiling (an outage, the node's return) is not a
 * sample: it says nothing about the uplink's jitter.  A node is suspect
 * once that deadline passed and nothing at all (a lease renewal) came for
 * the floor either: lost heartbeats alone do not make it suspect.
 *
 * Lost: no contact at all -- no heartbeat and no lease renewal -- for
 * lost-ms, and past the suspect deadline.  The renewal is the agent's
 * request with a short timeout and retries (agent.c), a second channel
 * that heartbeats lost now and then do not silence; a lost node's work is
 * only replaced once its lease has surely run out anyway.
 *
 * Integers only (ms), so the registry's Lua copy computes the very same
 * numbers (the tests compare them).  Caller storage, pure, any thread. */
#ifndef GP_DETECT_H
#define GP_DETECT_H

#include <stdint.h>

typedef struct gp_detect_cfg {
    uint32_t interval_ms; /* the heartbeat interval handed to agents */
    uint32_t floor_ms;    /* a deadline is never shorter... */
    uint32_t ceiling_ms;  /* ...nor longer */
    uint32_t k;           /* deviations above the interval (TCP: 4) */
    uint32_t lost_ms;     /* no contact this long (and suspect): lost */
} gp_detect_cfg;

typedef struct gp_detect {
    uint64_t last_beat_ms;    /* 0: none yet */
    uint64_t last_contact_ms; /* beat or lease renewal */
    uint32_t mean8;           /* smoothed interval x 8 (0: no sample yet) */
    uint32_t dev4;            /* smoothed mean deviation x 4 */
    uint32_t samples;         /* intervals taken (saturates) */
} gp_detect;

enum { GP_DETECT_HEALTHY, GP_DETECT_SUSPECT, GP_DETECT_LOST };

/* Defaults for a heartbeat interval (5 s: floor 11 s, ceiling 30 s, k 4,
 * lost 10.5 s): the floor lets one lost beat and a second of jitter pass;
 * lost is a lease of 9 s plus 1.5 s of margin, so that the last heartbeat
 * to lost stays under 16 s at p99 (detect_bench) when the node renewed
 * its lease up to an interval after its last beat. */
void        gp_detect_cfg_default(gp_detect_cfg *c, uint32_t interval_ms);
/* Why a configuration cannot work, or NULL. */
const char *gp_detect_cfg_check(const gp_detect_cfg *c);

/* A heartbeat arrived at now_ms (one clock for every call on a node). */
void     gp_detect_beat(gp_detect *d, const gp_detect_cfg *c, uint64_t now_ms);
/* A lease renewal (or any other message) arrived: contact, no sample. */
void     gp_detect_contact(gp_detect *d, uint64_t now_ms);
/* ms of silence after the last heartbeat before the node is suspect. */
uint32_t gp_detect_deadline_ms(const gp_detect *d, const gp_detect_cfg *c);
/* GP_DETECT_* at now_ms. */
int      gp_detect_state(const gp_detect *d, const gp_detect_cfg *c, uint64_t now_ms);
/* When (ms on the same clock) the node becomes suspect, and lost, if
 * nothing arrives meanwhile. */
uint64_t gp_detect_suspect_at(const gp_detect *d, const gp_detect_cfg *c);
uint64_t gp_detect_lost_at(const gp_detect *d, const gp_detect_cfg *c);

#endif
