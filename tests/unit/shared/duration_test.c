/* duration_test.c -- the one duration reader (gp/duration.h): units,
 * fractions and their rounding, the two flags, length-bounded input,
 * INVAL for what is not the grammar and RANGE past the limit or 2^64. */
#include <stdint.h>
#include <string.h>

#include "gp/duration.h"
#include "test.h"

#define DAY_MS 86400000ull

static gp_err
parse(const char *s, unsigned flags, uint64_t max_ms, uint64_t *ms)
{
    return gp_duration_parse(s, strlen(s), flags, max_ms, ms);
}

static void
test_units(void)
{
    static const struct { const char *s; uint64_t ms; } ok[] = {
        {"1500ms", 1500}, {"300s", 300000}, {"5m", 300000}, {"2h", 7200000}, {"0s", 0},
        {"0ms", 0}, {"007s", 7000}, {"0.5s", 500}, {"1.25m", 75000}, {"1.5ms", 2},
        {"0.0005s", 1}, {"0.0004s", 0}, {"0.000000001h", 0}, {"0.999999999s", 1000},
    };
    uint64_t ms;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        ms = 12345;
        T_OKM(parse(ok[i].s, 0, UINT64_MAX, &ms) == GP_EOK && ms == ok[i].ms,
              "\"%s\" = %llu ms (got %llu)", ok[i].s, (unsigned long long)ok[i].ms,
              (unsigned long long)ms);
    }
}

static void
test_invalid(void)
{
    static const char *const bad[] = {
        "", "300", "s", "ms", "-1s", "+1s", " 5s", "5s ", "5 m", "5d", "1e3s", "0x10s",
        ".5s", "1.s", "1..5s", "1.0000000001s", "abc", "5sec", "5M", "5mss", "5m30s", "1,5s",
        "99999999999999999999999x",
    };
    uint64_t ms = 777;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        T_OKM(parse(bad[i], 0, UINT64_MAX, &ms) == GP_EINVAL, "\"%s\" is INVAL", bad[i]);
    T_OKM(ms == 777, "out_ms is written only on OK");
}

static void
test_flags(void)
{
    uint64_t ms = 0;

    T_OK(parse("250", GP_DUR_BARE_MS, UINT64_MAX, &ms) == GP_EOK && ms == 250);
    T_OK(parse("2.5", GP_DUR_BARE_MS, UINT64_MAX, &ms) == GP_EOK && ms == 3);
    T_OK(parse("2s", GP_DUR_BARE_MS, UINT64_MAX, &ms) == GP_EOK && ms == 2000);
    T_OK(parse("2d", GP_DUR_DAYS, UINT64_MAX, &ms) == GP_EOK && ms == 2 * DAY_MS);
    T_OK(parse("1.5d", GP_DUR_DAYS, UINT64_MAX, &ms) == GP_EOK && ms == DAY_MS * 3 / 2);
    T_OKM(parse("2d", GP_DUR_BARE_MS, UINT64_MAX, &ms) == GP_EINVAL, "d only with GP_DUR_DAYS");
    T_OKM(parse("", GP_DUR_BARE_MS, UINT64_MAX, &ms) == GP_EINVAL, "a bare nothing is no 0");
}

static void
test_bounded(void)
{
    uint64_t ms = 0;

    T_OKM(gp_duration_parse("5m30s", 2, 0, UINT64_MAX, &ms) == GP_EOK && ms == 300000,
          "only the n bytes given are read");
    T_OKM(gp_duration_parse("5", 1, 0, UINT64_MAX, &ms) == GP_EINVAL, "no unit within n");
    T_OKM(gp_duration_parse("", 0, GP_DUR_BARE_MS, UINT64_MAX, &ms) == GP_EINVAL, "n = 0");
}

static void
test_range(void)
{
    uint64_t ms = 0;

    T_OK(parse("1h", 0, 3600000, &ms) == GP_EOK && ms == 3600000);
    T_OK(parse("3600001ms", 0, 3600000, &ms) == GP_ERANGE);
    T_OK(parse("1.000001h", 0, 3600000, &ms) == GP_ERANGE);
    T_OK(parse("24h", 0, DAY_MS, &ms) == GP_EOK && ms == DAY_MS);
    T_OK(parse("25h", 0, DAY_MS, &ms) == GP_ERANGE);
    T_OK(parse("18446744073709551615ms", 0, UINT64_MAX, &ms) == GP_EOK && ms == UINT64_MAX);
    T_OKM(parse("18446744073709551616ms", 0, UINT64_MAX, &ms) == GP_ERANGE, "2^64 ms");
    T_OKM(parse("18446744073709551615.9ms", 0, UINT64_MAX, &ms) == GP_ERANGE,
          "the rounded fraction carries past 2^64");
    T_OKM(parse("18446744073709551615s", 0, UINT64_MAX, &ms) == GP_ERANGE, "the unit overflows");
    T_OK(parse("5124095576030h", 0, UINT64_MAX, &ms) == GP_EOK &&
         ms == 5124095576030ull * 3600000);
    T_OK(parse("5124095576031h", 0, UINT64_MAX, &ms) == GP_ERANGE);
    T_OK(parse("1e99h", 0, UINT64_MAX, &ms) == GP_EINVAL);
}

int
main(void)
{
    test_units();
    test_invalid();
    test_flags();
    test_bounded();
    test_range();
    return T_DONE();
}
