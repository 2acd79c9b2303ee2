/* clock.c -- the monotonic and the wall clock (see gp/clock.h). */
#include "gp/clock.h"

#include <time.h>

static struct timespec
read_clock(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);      /* cannot fail for these two ids */
    return ts;
}

uint64_t
gp_mono_ns(void)
{
    struct timespec ts = read_clock(CLOCK_MONOTONIC);

    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t
gp_mono_ms(void)
{
    return gp_mono_ns() / 1000000u;
}

double
gp_mono_s(void)
{
    struct timespec ts = read_clock(CLOCK_MONOTONIC);

    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

uint64_t
gp_wall_ms(void)
{
    struct timespec ts = read_clock(CLOCK_REALTIME);

    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

double
gp_wall_s(void)
{
    struct timespec ts = read_clock(CLOCK_REALTIME);

    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
