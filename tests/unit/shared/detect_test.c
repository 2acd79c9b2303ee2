/* detect_test.c -- the failure detector's arithmetic (gp/detect.h): the
 * RFC 6298 smoothing in fixed point, the floor and the ceiling, outages
 * not taken as samples, a jittery node judged later than a steady one,
 * renewals keeping a node with lost heartbeats from suspect and lost, and
 * the states over time. */
#include <stdio.h>

#include "gp/detect.h"
#include "test.h"

static gp_detect_cfg
cfg5(void)
{
    gp_detect_cfg c;

    gp_detect_cfg_default(&c, 5000);
    return c;
}

static void
test_defaults(void)
{
    gp_detect_cfg c = cfg5(), bad;

    T_EQ_INT(c.floor_ms, 11000);
    T_EQ_INT(c.ceiling_ms, 30000);
    T_EQ_INT(c.k, 4);
    T_EQ_INT(c.lost_ms, 10500);
    T_OK(gp_detect_cfg_check(&c) == NULL);
    bad = c, bad.floor_ms = 5000;
    T_OK(gp_detect_cfg_check(&bad) != NULL);
    bad = c, bad.ceiling_ms = 10000;
    T_OK(gp_detect_cfg_check(&bad) != NULL);
    bad = c, bad.k = 0;
    T_OK(gp_detect_cfg_check(&bad) != NULL);
    bad = c, bad.interval_ms = 0;
    T_OK(gp_detect_cfg_check(&bad) != NULL);
}

/* The numbers of RFC 6298 2.2/2.3 by hand: first sample 5000 -> mean
 * 5000, deviation 2500; then 6000 -> err 1000, mean 5125, deviation
 * 3/4 x 2500 + 1/4 x 1000 = 2125. */
static void
test_smoothing(void)
{
    gp_detect_cfg c = cfg5();
    gp_detect     d = {0};

    gp_detect_beat(&d, &c, 100000);
    T_EQ_INT(d.samples, 0);
    T_EQ_INT(gp_detect_deadline_ms(&d, &c), 15000); /* no sample: the interval, deviation half */
    gp_detect_beat(&d, &c, 105000);
    T_EQ_INT(d.samples, 1);
    T_EQ_INT(d.mean8 >> 3, 5000);
    T_EQ_INT(d.dev4 >> 2, 2500);
    T_EQ_INT(gp_detect_deadline_ms(&d, &c), 15000); /* 5000 + 4 x 2500 */
    gp_detect_beat(&d, &c, 111000);
    T_EQ_INT(d.mean8 >> 3, 5125);
    T_EQ_INT(d.dev4 >> 2, 2125);
    /* a steady node converges to the floor */
    for (uint64_t t = 116000; t < 116000 + 200 * 5000; t += 5000)
        gp_detect_beat(&d, &c, t);
    T_EQ_INT(d.mean8 >> 3, 5000);
    T_EQ_INT(gp_detect_deadline_ms(&d, &c), c.floor_ms);
}

/* A node whose beats arrive 5 s +- 3 s is given more than the floor; a
 * gap past the ceiling (an outage) is not a sample. */
static void
test_jitter_and_outage(void)
{
    gp_detect_cfg c = cfg5();
    gp_detect     d = {0};
    uint64_t      t = 1000000;
    uint32_t      before;

    for (int i = 0; i < 200; i++) {
        t += i % 2 ? 2000 : 8000;
        gp_detect_beat(&d, &c, t);
    }
    before = gp_detect_deadline_ms(&d, &c);
    T_OKM(before > c.floor_ms && before < c.ceiling_ms,
          "a jittery node's deadline %u ms is past the floor", before);
    t += 120000; /* two minutes away */
    gp_detect_beat(&d, &c, t);
    T_EQ_INT(gp_detect_deadline_ms(&d, &c), before);
    T_EQ_INT(d.last_beat_ms, t);
    /* a huge spread is capped at the ceiling */
    for (int i = 0; i < 50; i++) {
        t += i % 2 ? 100 : 29000;
        gp_detect_beat(&d, &c, t);
    }
    T_EQ_INT(gp_detect_deadline_ms(&d, &c), c.ceiling_ms);
}

static void
test_states(void)
{
    gp_detect_cfg c = cfg5();
    gp_detect     d = {0};
    uint64_t      t = 500000;

    for (int i = 0; i < 50; i++, t += 5000)
        gp_detect_beat(&d, &c, t);
    t -= 5000; /* the last beat */
    T_EQ_INT(gp_detect_state(&d, &c, t + 10999), GP_DETECT_HEALTHY);
    T_EQ_INT(gp_detect_state(&d, &c, t + 11001), GP_DETECT_LOST); /* lost-ms < floor */
    T_EQ_INT(gp_detect_lost_at(&d, &c), t + 11000);
    /* renewals every 3.3 s while the beats are lost: never suspect */
    for (uint64_t r = t + 3300; r < t + 60000; r += 3300) {
        gp_detect_contact(&d, r);
        T_OK(gp_detect_state(&d, &c, r + 3299) == GP_DETECT_HEALTHY);
    }
    /* the renewals stop too: suspect after the floor, lost after lost-ms */
    uint64_t last = d.last_contact_ms;
    T_EQ_INT(gp_detect_state(&d, &c, last + 10999), GP_DETECT_HEALTHY);
    T_EQ_INT(gp_detect_state(&d, &c, last + 11001), GP_DETECT_LOST);
    /* a longer lost-ms: suspect first, then lost */
    gp_detect_cfg slow = c;
    slow.lost_ms = 20000;
    T_EQ_INT(gp_detect_state(&d, &slow, last + 11001), GP_DETECT_SUSPECT);
    T_EQ_INT(gp_detect_state(&d, &slow, last + 20001), GP_DETECT_LOST);
    /* it returns: healthy at once */
    gp_detect_beat(&d, &c, last + 90000);
    T_EQ_INT(gp_detect_state(&d, &c, last + 90001), GP_DETECT_HEALTHY);
    /* an old timestamp never moves the clock back */
    gp_detect_beat(&d, &c, last);
    T_EQ_INT(d.last_beat_ms, last + 90000);
}

int
main(void)
{
    test_defaults();
    test_smoothing();
    test_jitter_and_outage();
    test_states();
    return T_DONE();
}
