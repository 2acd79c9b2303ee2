/* backoff_test.c -- the one reconnect backoff: doubles from the minimum to
 * the cap, every delay within +-25% of its step, reset after success,
 * and the attempt-number form follows the same schedule. */
#include "gp/backoff.h"
#include "gp/limits.h"
#include "test.h"

int
main(void)
{
    gp_backoff b = {0}, c = {0};
    unsigned   step = GP_BACKOFF_MIN_MS, d;
    int        in_range = 1, differ = 0;

    gp_backoff_init(&b, &b);
    gp_backoff_init(&c, &c);
    for (int i = 0; i < 12; i++) {
        d = gp_backoff_next_ms(&b);
        if (d < step - step / 4 || d > step + step / 4)
            in_range = 0;
        differ += d != gp_backoff_next_ms(&c);
        step = step >= GP_BACKOFF_MAX_MS / 2 ? GP_BACKOFF_MAX_MS : step * 2;
    }
    T_OKM(in_range, "each delay is its doubling step +-25%%, capped at %d ms", GP_BACKOFF_MAX_MS);
    T_EQ_INT(b.next_ms, GP_BACKOFF_MAX_MS);
    T_OKM(differ > 0, "two owners get different jitter (%d of 12 delays differ)", differ);
    gp_backoff_reset(&b);
    d = gp_backoff_next_ms(&b);
    T_OKM(d >= GP_BACKOFF_MIN_MS * 3 / 4 && d <= GP_BACKOFF_MIN_MS * 5 / 4,
          "after a reset the next delay is the minimum again (%u ms)", d);
    d = gp_backoff_for_attempt(1, 42);
    T_OK(d >= GP_BACKOFF_MIN_MS * 3 / 4 && d <= GP_BACKOFF_MIN_MS * 5 / 4);
    d = gp_backoff_for_attempt(3, 42);
    T_OK(d >= GP_BACKOFF_MIN_MS * 3 && d <= GP_BACKOFF_MIN_MS * 5);
    d = gp_backoff_for_attempt(1000, 42);
    T_OK(d >= GP_BACKOFF_MAX_MS * 3 / 4 && d <= GP_BACKOFF_MAX_MS * 5 / 4);
    /* a nak'ed message's redelivery delay: doubling per delivery, capped */
    T_EQ_INT(gp_backoff_nak_ms(500, 60000, 1), 500);
    T_EQ_INT(gp_backoff_nak_ms(500, 60000, 4), 4000);
    T_EQ_INT(gp_backoff_nak_ms(500, 60000, 8), 60000);
    T_EQ_INT(gp_backoff_nak_ms(250, 2000, 20), 2000);
    T_EQ_INT(gp_backoff_nak_ms(1000, 60000, UINT64_MAX), 60000);
    T_EQ_INT(gp_backoff_nak_ms(500, 300, 1), 300);
    return T_DONE();
}
