/* id_clock_test.c -- the one id rule (gp/id.h) and the two clocks
 * (gp/clock.h): the monotonic clock never goes back and agrees with the
 * wall clock over a short sleep. */
#include <string.h>
#include <time.h>

#include "gp/clock.h"
#include "gp/id.h"
#include "gp/limits.h"
#include "test.h"

static void
test_ids(void)
{
    char long_id[GP_MAX_ID + 2];

    T_OK(gp_id_ok("site-0001"));
    T_OK(gp_id_ok("A_b-9"));
    T_OK(!gp_id_ok(""));
    T_OK(!gp_id_ok(NULL));
    T_OKM(!gp_id_ok("a.b"), "a dot would shift subject tokens");
    T_OKM(!gp_id_ok("a*") && !gp_id_ok(">"), "wildcards are refused");
    T_OKM(!gp_id_ok("a b") && !gp_id_ok("a\tb") && !gp_id_ok("a\x7f"), "whitespace and controls are refused");
    T_OKM(!gp_id_ok("a,b") && !gp_id_ok("a\"b") && !gp_id_ok("{a}"), "array-literal metacharacters are refused");
    T_OKM(!gp_id_ok("caf\xc3\xa9"), "non-ASCII is refused");
    memset(long_id, 'x', sizeof(long_id));
    long_id[GP_MAX_ID] = '\0';
    T_OKM(gp_id_ok(long_id), "GP_MAX_ID (%d) characters is allowed", GP_MAX_ID);
    long_id[GP_MAX_ID] = 'x';
    long_id[GP_MAX_ID + 1] = '\0';
    T_OKM(!gp_id_ok(long_id), "GP_MAX_ID + 1 characters is refused");
    T_OK(gp_id_okn("abc.def", 3));
    T_OK(!gp_id_okn("abc.def", 4));
}

static void
test_clocks(void)
{
    uint64_t        m0 = gp_mono_ns(), w0 = gp_wall_ms(), m1, w1;
    int             back = 0;
    struct timespec ts = {0, 50 * 1000000};

    for (int i = 0; i < 100000; i++) {
        uint64_t a = gp_mono_ns(), b = gp_mono_ns();

        back += b < a;
    }
    T_OKM(back == 0, "the monotonic clock never went back in 200,000 reads");
    nanosleep(&ts, NULL);
    m1 = gp_mono_ns();
    w1 = gp_wall_ms();
    T_OKM(m1 - m0 >= 50 * 1000000u, "monotonic advanced over a 50 ms sleep (%llu ns)",
          (unsigned long long)(m1 - m0));
    T_OKM(w1 >= w0 && w1 - w0 < 10000, "wall advanced too (%llu ms)", (unsigned long long)(w1 - w0));
    T_OKM(w0 > 1600000000000ull, "the wall clock is Unix-epoch milliseconds");
    T_OK(gp_mono_ms() <= gp_mono_ns() / 1000000u + 1);
}

int
main(void)
{
    test_ids();
    test_clocks();
    return T_DONE();
}
