/* duration.c -- written durations to milliseconds (see gp/duration.h).
 *
 * Integer arithmetic only: strtod read "1e3s" and "0x10s" as durations
 * and rounded through a double; here the grammar is the header's and a
 * fraction is exact up to the rounding to whole milliseconds. */
#include "gp/duration.h"

#include <stdbool.h>
#include <string.h>

#define MAX_DECIMALS 9       /* 10^9 x a day's ms still fits in 64 bits */

typedef struct unit {
    const char *name;
    uint64_t    ms;
    unsigned    flag;        /* 0: always; else the GP_DUR_ flag that allows it */
} unit;

static const unit units[] = {
    {"ms", 1, 0},
    {"s", 1000, 0},
    {"m", 60000, 0},
    {"h", 3600000, 0},
    {"d", 86400000, GP_DUR_DAYS},
};

/* Milliseconds in the unit written s[0..n), or 0 when it is not one. */
static uint64_t
unit_ms(const char *s, size_t n, unsigned flags)
{
    if (n == 0)
        return (flags & GP_DUR_BARE_MS) ? 1 : 0;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strlen(units[i].name) == n && memcmp(units[i].name, s, n) == 0 &&
            (units[i].flag == 0 || (flags & units[i].flag) != 0))
            return units[i].ms;
    return 0;
}

static bool
is_digit(char c)
{
    return c >= '0' && c <= '9';
}

gp_err
gp_duration_parse(const char *s, size_t n, unsigned flags, uint64_t max_ms, uint64_t *out_ms)
{
    uint64_t whole = 0, frac = 0, den = 1, mul, ms, part;
    size_t   i = 0, f0;
    bool     big = false;             /* the whole part alone is past 2^64 */

    for (; i < n && is_digit(s[i]); i++) {
        unsigned d = (unsigned)(s[i] - '0');

        if (whole > (UINT64_MAX - d) / 10)
            big = true;
        else
            whole = whole * 10 + d;
    }
    if (i == 0)
        return GP_EINVAL;
    if (i < n && s[i] == '.') {
        for (f0 = ++i; i < n && is_digit(s[i]); i++) {
            if (i - f0 >= MAX_DECIMALS)
                return GP_EINVAL;
            frac = frac * 10 + (uint64_t)(s[i] - '0');
            den *= 10;
        }
        if (i == f0)
            return GP_EINVAL;
    }
    if ((mul = unit_ms(s + i, n - i, flags)) == 0)
        return GP_EINVAL;
    if (big || whole > UINT64_MAX / mul)
        return GP_ERANGE;
    ms = whole * mul;
    part = (frac * mul + den / 2) / den;         /* the fraction, rounded half up */
    if (ms > UINT64_MAX - part || ms + part > max_ms)
        return GP_ERANGE;
    *out_ms = ms + part;
    return GP_EOK;
}
