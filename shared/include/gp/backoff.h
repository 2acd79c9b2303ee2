/* gp/backoff.h -- the one reconnect backoff of gridpool (NATS, Redis,
 * PostgreSQL): the delay doubles from GP_BACKOFF_MIN_MS to
 * GP_BACKOFF_MAX_MS, and each delay is spread +-25% so that services
 * restarted together do not reconnect in lock step.
 *
 * Caller storage; pure apart from the seed; any thread, no shared state. */
#ifndef GP_BACKOFF_H
#define GP_BACKOFF_H

#include <stdint.h>

typedef struct gp_backoff {
    unsigned next_ms;       /* next delay before jitter */
    uint64_t rng;           /* xorshift64* state, never 0 */
} gp_backoff;

/* Seeds from the clock, the pid and addr (any pointer unique to the owner). */
void     gp_backoff_init(gp_backoff *b, const void *addr);
/* After a successful connection: the next failure waits the minimum again. */
void     gp_backoff_reset(gp_backoff *b);
/* The delay to wait now, in ms, jittered; doubles the next one (capped). */
unsigned gp_backoff_next_ms(gp_backoff *b);
/* The same schedule for callers that only know the attempt number (1 =
 * first retry), e.g. cnats' reconnect-delay callback. */
unsigned gp_backoff_for_attempt(int attempt, uint64_t seed);
/* The redelivery delay of a JetStream message nak'ed after its
 * deliveries-th delivery (1 = the first): base_ms, doubling per delivery,
 * never above max_ms.  Not jittered: one message, one consumer. */
unsigned gp_backoff_nak_ms(unsigned base_ms, unsigned max_ms, uint64_t deliveries);

#endif
