/* backoff.c -- capped exponential backoff with jitter (see gp/backoff.h). */
#include "gp/backoff.h"

#include <time.h>
#include <unistd.h>

#include "gp/limits.h"

static uint64_t
mix(uint64_t x)                     /* splitmix64 finalizer */
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static unsigned
jitter(unsigned d, uint64_t r)      /* d +- 25% */
{
    return d - d / 4 + (unsigned)(r % ((uint64_t)d / 2 + 1));
}

void
gp_backoff_init(gp_backoff *b, const void *addr)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    b->rng = mix((uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)addr);
    if (b->rng == 0)
        b->rng = 0x853c49e6748fea9bULL;
    gp_backoff_reset(b);
}

void
gp_backoff_reset(gp_backoff *b)
{
    b->next_ms = GP_BACKOFF_MIN_MS;
}

unsigned
gp_backoff_next_ms(gp_backoff *b)
{
    unsigned d = b->next_ms;

    b->rng ^= b->rng >> 12;         /* xorshift64* */
    b->rng ^= b->rng << 25;
    b->rng ^= b->rng >> 27;
    b->next_ms = d >= GP_BACKOFF_MAX_MS / 2 ? GP_BACKOFF_MAX_MS : d * 2;
    return jitter(d, b->rng * 0x2545F4914F6CDD1DULL >> 11);
}

unsigned
gp_backoff_for_attempt(int attempt, uint64_t seed)
{
    unsigned d = GP_BACKOFF_MIN_MS;

    for (int i = 1; i < attempt && d < GP_BACKOFF_MAX_MS; i++)
        d = d >= GP_BACKOFF_MAX_MS / 2 ? GP_BACKOFF_MAX_MS : d * 2;
    return jitter(d, mix(seed ^ (uint64_t)attempt));
}

unsigned
gp_backoff_nak_ms(unsigned base_ms, unsigned max_ms, uint64_t deliveries)
{
    uint64_t d = base_ms;

    for (uint64_t i = 1; i < deliveries && d < max_ms; i++)
        d *= 2;
    return d < max_ms ? (unsigned)d : max_ms;
}
