/* money.c -- integer money arithmetic (see gp/money.h). */
#include "gp/money.h"

#include <string.h>

__extension__ typedef unsigned __int128 u128;
__extension__ typedef __int128          i128;

/* ISO 4217 minor-unit exponents.  Codes not listed are unknown (-1) rather
 * than guessed: a currency is added here when billing takes it. */
static const struct {
    char code[4];
    int  exponent;
} currencies[] = {
    /* 0: no minor unit in use */
    {"BIF", 0}, {"CLP", 0}, {"DJF", 0}, {"GNF", 0}, {"ISK", 0}, {"JPY", 0},
    {"KMF", 0}, {"KRW", 0}, {"PYG", 0}, {"RWF", 0}, {"UGX", 0}, {"VND", 0},
    {"VUV", 0}, {"XAF", 0}, {"XOF", 0}, {"XPF", 0},
    /* 2 */
    {"AED", 2}, {"AUD", 2}, {"BGN", 2}, {"BRL", 2}, {"CAD", 2}, {"CHF", 2},
    {"CNY", 2}, {"CZK", 2}, {"DKK", 2}, {"EUR", 2}, {"GBP", 2}, {"HKD", 2},
    {"HUF", 2}, {"ILS", 2}, {"INR", 2}, {"MXN", 2}, {"NOK", 2}, {"NZD", 2},
    {"PLN", 2}, {"RON", 2}, {"SEK", 2}, {"SGD", 2}, {"THB", 2}, {"TRY", 2},
    {"TWD", 2}, {"USD", 2}, {"ZAR", 2},
    /* 3 */
    {"BHD", 3}, {"IQD", 3}, {"JOD", 3}, {"KWD", 3}, {"LYD", 3}, {"OMR", 3},
    {"TND", 3},
};

/* 10^k for k = 0..9: nanos per minor unit is pow10_tab[9 - exponent]. */
static const int64_t pow10_tab[] = {
    1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000,
};

int
gp_currency_exponent(const char *iso4217)
{
    if (iso4217 == NULL)
        return -1;
    for (int i = 0; i < 3; i++)
        if (iso4217[i] < 'A' || iso4217[i] > 'Z')
            return -1;                      /* also stops at an early NUL */
    if (iso4217[3] != '\0')
        return -1;
    for (size_t i = 0; i < sizeof currencies / sizeof currencies[0]; i++)
        if (memcmp(currencies[i].code, iso4217, 3) == 0)
            return currencies[i].exponent;
    return -1;
}

/* A non-negative 128-bit result into *out; GP_ERANGE above INT64_MAX. */
static gp_err
store_u128(u128 q, int64_t *out)
{
    if (q > (u128)INT64_MAX)
        return GP_ERANGE;
    *out = (int64_t)q;
    return GP_EOK;
}

gp_err
gp_money_muldiv(int64_t a, int64_t b, int64_t d, int64_t *q, int64_t *r)
{
    u128    p;
    int64_t qq;
    gp_err  e;

    if (a < 0 || b < 0 || d <= 0 || q == NULL)
        return GP_EINVAL;
    p = (u128)(uint64_t)a * (uint64_t)b;    /* < 2^126 */
    if ((e = store_u128(p / (uint64_t)d, &qq)) != GP_EOK)
        return e;
    *q = qq;
    if (r != NULL)
        *r = (int64_t)(p % (uint64_t)d);
    return GP_EOK;
}

gp_err
gp_rate_gpu_ms(uint64_t gpu_ms, int64_t price_micros_per_gpu_hour, int64_t *nanos)
{
    /* gpu_ms * price micros * 1000 nanos/micro / 3,600,000 ms/hour */
    if (price_micros_per_gpu_hour < 0 || nanos == NULL)
        return GP_EINVAL;
    return store_u128((u128)gpu_ms * (uint64_t)price_micros_per_gpu_hour / 3600u, nanos);
}

gp_err
gp_rate_energy(uint64_t energy_mj, int64_t price_micros_per_kwh, uint32_t pue_milli,
               int64_t *nanos)
{
    /* nanos = mJ / 3.6e9 (kWh) * price * 1000 (micros -> nanos) * pue / 1000:
     * the two 1000s cancel. */
    const uint64_t D = 3600000000u;
    u128           p, q1, r1;

    if (price_micros_per_kwh < 0 || nanos == NULL)
        return GP_EINVAL;
    /* energy * price < 2^127, but times pue it may pass 2^128.  With
     * energy * price = q1 * D + r1 (r1 < D):
     *   floor(energy * price * pue / D) = q1 * pue + floor(r1 * pue / D)
     * where q1 < 2^127 / 3.6e9 < 2^95.3, so q1 * pue < 2^127.3, and
     * r1 * pue / D < 2^32: the sum does not wrap. */
    p = (u128)energy_mj * (uint64_t)price_micros_per_kwh;
    q1 = p / D;
    r1 = p % D;
    return store_u128(q1 * pue_milli + r1 * pue_milli / D, nanos);
}

gp_err
gp_apply_bp(int64_t nanos, int32_t modifier_bp, int64_t *out)
{
    i128 p, q;

    if (modifier_bp < 0 || out == NULL)
        return GP_EINVAL;
    p = (i128)nanos * modifier_bp;          /* |p| < 2^94 */
    q = p / 10000;
    if (p % 10000 < 0)                      /* C truncates toward 0: floor it */
        q--;
    if (q > INT64_MAX || q < INT64_MIN)
        return GP_ERANGE;
    *out = (int64_t)q;
    return GP_EOK;
}

gp_err
gp_nanos_to_minor(int64_t nanos, int exponent, int64_t *minor, int64_t *residue_nanos)
{
    int64_t u, q, rem, step;

    if (exponent < 0 || exponent > GP_MONEY_MAX_EXPONENT || minor == NULL)
        return GP_EINVAL;
    u = pow10_tab[GP_MONEY_MAX_EXPONENT - exponent];
    q = nanos / u;                          /* toward 0; |rem| < u, same sign as nanos */
    rem = nanos % u;
    step = 0;                               /* 1: round away from zero */
    if (rem != 0) {
        /* 2 |rem| vs u (|rem| < 1e9, so negating rem is safe even for
         * nanos = INT64_MIN, where negating nanos would not be) */
        int64_t twice = rem < 0 ? -rem * 2 : rem * 2;
        if (twice > u || (twice == u && q % 2 != 0))
            step = 1;
    }
    if (step) {
        /* u >= 10 here (u = 1 leaves no rem), so |q| <= INT64_MAX / 10 and
         * q +- 1 fits; the residue is rem -+ u (|.| <= u / 2), never
         * nanos - minor * u, which would overflow near INT64_MIN/MAX. */
        q += nanos < 0 ? -1 : 1;
        rem -= nanos < 0 ? -u : u;
    }
    *minor = q;
    if (residue_nanos != NULL)
        *residue_nanos = rem;
    return GP_EOK;
}

/* Remainder of part i before the leftover: total * w - part * sum (< sum). */
static u128
split_rem(int64_t total, int64_t w, int64_t part, u128 sum)
{
    return (u128)(uint64_t)total * (uint64_t)w - (u128)(uint64_t)part * sum;
}

static size_t
count_rem_ge(int64_t total, const int64_t *weights, const int64_t *parts, size_t n, u128 sum,
             u128 t)
{
    size_t c = 0;

    for (size_t i = 0; i < n; i++)
        c += split_rem(total, weights[i], parts[i], sum) >= t;
    return c;
}

gp_err
gp_split_largest_remainder(int64_t total, const int64_t *weights, size_t n, int64_t *parts)
{
    u128    sum = 0, lo, hi, r;
    int64_t given = 0;
    size_t  k, ties;

    if (total < 0 || weights == NULL || parts == NULL || n == 0)
        return GP_EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (weights[i] < 0)
            return GP_EINVAL;
        sum += (uint64_t)weights[i];        /* < n * 2^63 <= 2^127 */
    }
    if (sum == 0)
        return GP_EINVAL;
    hi = 0;
    for (size_t i = 0; i < n; i++) {
        parts[i] = (int64_t)((u128)(uint64_t)total * (uint64_t)weights[i] / sum); /* <= total */
        given += parts[i];                  /* <= total: sum of floors of a partition */
        r = split_rem(total, weights[i], parts[i], sum);
        if (r > hi)
            hi = r;
    }
    /* sum(rem) = (total - given) * sum and each rem < sum, so k < n. */
    k = (size_t)(total - given);
    if (k == 0)
        return GP_EOK;
    /* T = the k-th largest remainder = the largest t with at least k
     * remainders >= t (t = 0 has n >= k).  Binary search: no allocation. */
    lo = 0;
    while (lo < hi) {
        u128 mid = lo + (hi - lo + 1) / 2;
        if (count_rem_ge(total, weights, parts, n, sum, mid) >= k)
            lo = mid;
        else
            hi = mid - 1;
    }
    /* Every remainder > T gets a unit; the rest of k goes to remainders
     * == T in index order.  rem is read before part i is bumped. */
    ties = k - count_rem_ge(total, weights, parts, n, sum, lo + 1);
    for (size_t i = 0; i < n; i++) {
        r = split_rem(total, weights[i], parts[i], sum);
        if (r > lo) {
            parts[i]++;
        } else if (r == lo && ties > 0) {
            parts[i]++;
            ties--;
        }
    }
    return GP_EOK;
}

gp_err
gp_money_add(int64_t a, int64_t b, int64_t *out)
{
    int64_t s;

    if (out == NULL)
        return GP_EINVAL;
    if (__builtin_add_overflow(a, b, &s))
        return GP_ERANGE;
    *out = s;
    return GP_EOK;
}

gp_err
gp_money_sub(int64_t a, int64_t b, int64_t *out)
{
    int64_t s;

    if (out == NULL)
        return GP_EINVAL;
    if (__builtin_sub_overflow(a, b, &s))
        return GP_ERANGE;
    *out = s;
    return GP_EOK;
}
