/* money_test.c -- integer money arithmetic: currency exponents, exact
 * 128-bit rating (GPU time, energy, basis-point modifiers), half-to-even
 * rounding of nanos to minor units, largest-remainder splits, checked
 * addition.  Hand-checked cases first, then 100,000 random cases per
 * property from a fixed seed, each against a reference written here
 * independently (128-bit arithmetic; 32-bit limbs for the energy product,
 * which may pass 128 bits).  The property tests also assert that their
 * random cases reach ties, so the tie rules are really exercised. */
#include "gp/money.h"

#include <stdint.h>
#include <string.h>

#include "test.h"

__extension__ typedef unsigned __int128 u128;
__extension__ typedef __int128          i128;

#define CASES 100000

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t
next(void)                          /* splitmix64 */
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t
below(uint64_t n)                   /* 0..n-1 (n > 0); the bias is irrelevant here */
{
    return next() % n;
}

static int64_t
p10(int k)
{
    int64_t v = 1;

    while (k-- > 0)
        v *= 10;
    return v;
}

/* Reference for half-to-even: floor division in 128 bits, then look at the
 * non-negative remainder. */
static int64_t
ref_half_even(int64_t nanos, int64_t u)
{
    i128 n = nanos, fl = n / u, fr;

    if (n % u < 0)
        fl--;
    fr = n - fl * u;                /* 0 <= fr < u */
    if (2 * fr > u || (2 * fr == u && (fl & 1) != 0))
        fl++;
    return (int64_t)fl;
}

/* Reference for the energy rate: the triple product in six 32-bit limbs
 * (it may pass 2^128), divided by 3.6e9 limb by limb.  1 and *out when the
 * quotient fits an int64_t, else 0. */
static int
ref_energy(uint64_t e, uint64_t p, uint32_t u, int64_t *out)
{
    uint32_t a[2] = {(uint32_t)e, (uint32_t)(e >> 32)}, b[2] = {(uint32_t)p, (uint32_t)(p >> 32)};
    uint32_t x[6] = {0}, q[6];
    uint64_t carry, rem = 0;

    for (int i = 0; i < 2; i++) {           /* x = e * p */
        carry = 0;
        for (int j = 0; j < 2; j++) {
            uint64_t t = (uint64_t)a[i] * b[j] + x[i + j] + carry;
            x[i + j] = (uint32_t)t;
            carry = t >> 32;
        }
        x[i + 2] = (uint32_t)carry;
    }
    carry = 0;
    for (int i = 0; i < 6; i++) {           /* x *= u */
        uint64_t t = (uint64_t)x[i] * u + carry;
        x[i] = (uint32_t)t;
        carry = t >> 32;
    }
    for (int i = 5; i >= 0; i--) {          /* q = x / 3.6e9 */
        uint64_t t = rem << 32 | x[i];
        q[i] = (uint32_t)(t / 3600000000u);
        rem = t % 3600000000u;
    }
    if (q[5] || q[4] || q[3] || q[2] || q[1] >> 31)
        return 0;
    *out = (int64_t)((uint64_t)q[1] << 32 | q[0]);
    return 1;
}

/* Reference for the split: floors, then k passes each giving a unit to the
 * largest remainder not yet given one, ties to the lowest index. */
static void
ref_split(int64_t total, const int64_t *w, size_t n, int64_t *parts)
{
    u128    sum = 0, rem[16];
    int     given[16] = {0};
    int64_t left = total;

    for (size_t i = 0; i < n; i++)
        sum += (uint64_t)w[i];
    for (size_t i = 0; i < n; i++) {
        u128 p = (u128)(uint64_t)total * (uint64_t)w[i];
        parts[i] = (int64_t)(p / sum);
        rem[i] = p % sum;
        left -= parts[i];
    }
    while (left-- > 0) {
        size_t best = n;
        for (size_t i = 0; i < n; i++)
            if (!given[i] && (best == n || rem[i] > rem[best]))
                best = i;
        given[best] = 1;
        parts[best]++;
    }
}

/* 1 when the leftover units run out inside a group of equal remainders
 * (the tie rule decides who gets one), for the property test's coverage. */
static int
split_tie_decides(int64_t total, const int64_t *w, size_t n)
{
    u128    sum = 0, rem[16], kth;
    int64_t left = total;
    size_t  above = 0, equal = 0;

    for (size_t i = 0; i < n; i++)
        sum += (uint64_t)w[i];
    for (size_t i = 0; i < n; i++) {
        u128 p = (u128)(uint64_t)total * (uint64_t)w[i];
        rem[i] = p % sum;
        left -= (int64_t)(p / sum);
    }
    if (left == 0)
        return 0;
    /* the left-th largest remainder: the largest r with >= left remainders >= r */
    kth = 0;
    for (size_t i = 0; i < n; i++) {
        size_t ge = 0;
        for (size_t j = 0; j < n; j++)
            ge += rem[j] >= rem[i];
        if (ge >= (size_t)left && rem[i] > kth)
            kth = rem[i];
    }
    for (size_t i = 0; i < n; i++) {
        above += rem[i] > kth;
        equal += rem[i] == kth;
    }
    return (size_t)left - above < equal;
}

static void
test_currency(void)
{
    T_EQ_INT(gp_currency_exponent("JPY"), 0);
    T_EQ_INT(gp_currency_exponent("EUR"), 2);
    T_EQ_INT(gp_currency_exponent("KWD"), 3);
    T_EQ_INT(gp_currency_exponent("USD"), 2);
    T_EQ_INT(gp_currency_exponent("ISK"), 0);
    T_EQ_INT(gp_currency_exponent("KRW"), 0);
    T_EQ_INT(gp_currency_exponent("CLP"), 0);
    T_EQ_INT(gp_currency_exponent("BHD"), 3);
    T_EQ_INT(gp_currency_exponent("TND"), 3);
    T_EQ_INT(gp_currency_exponent("CZK"), 2);
    T_EQ_INT(gp_currency_exponent("eur"), -1);
    T_EQ_INT(gp_currency_exponent("EU"), -1);
    T_EQ_INT(gp_currency_exponent("EURO"), -1);
    T_EQ_INT(gp_currency_exponent(""), -1);
    T_EQ_INT(gp_currency_exponent("E1R"), -1);
    T_EQ_INT(gp_currency_exponent("QQQ"), -1);
    T_EQ_INT(gp_currency_exponent(NULL), -1);
}

static void
test_muldiv(void)
{
    int64_t q = -7, r = -7;

    T_EQ_INT(gp_money_muldiv(7, 3, 2, &q, &r), GP_EOK);
    T_OKM(q == 10 && r == 1, "7*3/2 = 10 r 1 (%lld r %lld)", (long long)q, (long long)r);
    T_EQ_INT(gp_money_muldiv(INT64_MAX, INT64_MAX, INT64_MAX, &q, &r), GP_EOK);
    T_OKM(q == INT64_MAX && r == 0, "MAX*MAX/MAX = MAX r 0 through 128 bits");
    T_EQ_INT(gp_money_muldiv(INT64_MAX, INT64_MAX - 1, INT64_MAX, &q, NULL), GP_EOK);
    T_EQ_INT(q, INT64_MAX - 1);
    q = r = -7;
    T_EQ_INT(gp_money_muldiv(INT64_MAX, 2, 1, &q, &r), GP_ERANGE);
    T_EQ_INT(gp_money_muldiv(INT64_MAX / 2 + 1, 2, 1, &q, &r), GP_ERANGE); /* exactly 2^63 */
    T_OKM(q == -7 && r == -7, "nothing is written on an error");
    T_EQ_INT(gp_money_muldiv(INT64_MAX / 2, 2, 1, &q, &r), GP_EOK);
    T_EQ_INT(q, INT64_MAX - 1);
    T_EQ_INT(gp_money_muldiv(-1, 3, 2, &q, &r), GP_EINVAL);
    T_EQ_INT(gp_money_muldiv(1, -3, 2, &q, &r), GP_EINVAL);
    T_EQ_INT(gp_money_muldiv(1, 3, 0, &q, &r), GP_EINVAL);
    T_EQ_INT(gp_money_muldiv(1, 3, -2, &q, &r), GP_EINVAL);
    T_EQ_INT(gp_money_muldiv(1, 3, 2, NULL, &r), GP_EINVAL);
}

static void
test_rate(void)
{
    int64_t v = -7;

    /* one hour at 2 EUR/h = 2 EUR = 2e9 nanos */
    T_EQ_INT(gp_rate_gpu_ms(3600000, 2000000, &v), GP_EOK);
    T_EQ_INT(v, 2000000000);
    /* 1 ms at 2.5 EUR/h = 2,500,000 * 1000 / 3,600,000 = 694.4 -> 694 nanos */
    T_EQ_INT(gp_rate_gpu_ms(1, 2500000, &v), GP_EOK);
    T_EQ_INT(v, 694);
    T_EQ_INT(gp_rate_gpu_ms(0, 2500000, &v), GP_EOK);
    T_EQ_INT(v, 0);
    /* boundary: INT64_MAX ms at 3600 micros/h is exactly INT64_MAX nanos */
    T_EQ_INT(gp_rate_gpu_ms((uint64_t)INT64_MAX, 3600, &v), GP_EOK);
    T_EQ_INT(v, INT64_MAX);
    v = -7;
    T_EQ_INT(gp_rate_gpu_ms((uint64_t)INT64_MAX + 1, 3600, &v), GP_ERANGE);
    T_EQ_INT(gp_rate_gpu_ms(UINT64_MAX, INT64_MAX, &v), GP_ERANGE);
    T_EQ_INT(v, -7);
    T_EQ_INT(gp_rate_gpu_ms(1, -1, &v), GP_EINVAL);
    T_EQ_INT(gp_rate_gpu_ms(1, 1, NULL), GP_EINVAL);

    /* 3.6e9 mJ = 1 kWh at 0.25 EUR/kWh (250,000 micros), PUE 1.0 = 0.25 EUR */
    T_EQ_INT(gp_rate_energy(3600000000u, 250000, 1000, &v), GP_EOK);
    T_EQ_INT(v, 250000000);
    /* the same at PUE 1.35: 0.3375 EUR */
    T_EQ_INT(gp_rate_energy(3600000000u, 250000, 1350, &v), GP_EOK);
    T_EQ_INT(v, 337500000);
    /* 1 mJ at 0.25 EUR/kWh: 250,000 * 1000 / 3.6e9 = 0.069 -> 0 nanos;
     * 100 mJ: 6.94 -> 6 */
    T_EQ_INT(gp_rate_energy(1, 250000, 1000, &v), GP_EOK);
    T_EQ_INT(v, 0);
    T_EQ_INT(gp_rate_energy(100, 250000, 1000, &v), GP_EOK);
    T_EQ_INT(v, 6);
    T_EQ_INT(gp_rate_energy(3600000000u, 250000, 0, &v), GP_EOK);
    T_EQ_INT(v, 0);
    /* boundary through the split product: INT64_MAX mJ at 1 micro/kWh,
     * pue 3.6e9 cancels the divisor exactly */
    T_EQ_INT(gp_rate_energy((uint64_t)INT64_MAX, 1, 3600000000u, &v), GP_EOK);
    T_EQ_INT(v, INT64_MAX);
    v = -7;
    T_EQ_INT(gp_rate_energy((uint64_t)INT64_MAX + 1, 1, 3600000000u, &v), GP_ERANGE);
    /* the triple product is past 2^128 (a wrapping product would not see it) */
    T_EQ_INT(gp_rate_energy(UINT64_MAX, INT64_MAX, UINT32_MAX, &v), GP_ERANGE);
    /* 2^63 * 2^62 * 8 = 2^128 (0 in a wrapping product); with 2^63 + 1 it
     * would wrap to 2^65, which / 3.6e9 fits */
    T_EQ_INT(gp_rate_energy((uint64_t)1 << 63, (int64_t)1 << 62, 8, &v), GP_ERANGE);
    T_EQ_INT(gp_rate_energy(((uint64_t)1 << 63) + 1, (int64_t)1 << 62, 8, &v), GP_ERANGE);
    T_EQ_INT(v, -7);
    T_EQ_INT(gp_rate_energy(1, -1, 1000, &v), GP_EINVAL);
    T_EQ_INT(gp_rate_energy(1, 1, 1000, NULL), GP_EINVAL);

    T_EQ_INT(gp_apply_bp(1000, 12500, &v), GP_EOK);
    T_EQ_INT(v, 1250);
    T_EQ_INT(gp_apply_bp(1000, 10000, &v), GP_EOK);
    T_EQ_INT(v, 1000);
    T_EQ_INT(gp_apply_bp(1, 5000, &v), GP_EOK);   /* 0.5 -> 0 */
    T_EQ_INT(v, 0);
    T_EQ_INT(gp_apply_bp(-1, 5000, &v), GP_EOK);  /* -0.5 -> -1: floor, not truncation */
    T_EQ_INT(v, -1);
    T_EQ_INT(gp_apply_bp(-3, 12500, &v), GP_EOK); /* -3.75 -> -4 */
    T_EQ_INT(v, -4);
    T_EQ_INT(gp_apply_bp(-4, 12500, &v), GP_EOK); /* -5 exactly */
    T_EQ_INT(v, -5);
    T_EQ_INT(gp_apply_bp(123456789, 0, &v), GP_EOK);
    T_EQ_INT(v, 0);
    T_EQ_INT(gp_apply_bp(INT64_MIN, 10000, &v), GP_EOK);
    T_EQ_INT(v == INT64_MIN, 1);
    v = -7;
    T_EQ_INT(gp_apply_bp(INT64_MIN, 10001, &v), GP_ERANGE);
    T_EQ_INT(gp_apply_bp(INT64_MAX, 10001, &v), GP_ERANGE);
    T_EQ_INT(gp_apply_bp(INT64_MAX, INT32_MAX, &v), GP_ERANGE);
    T_EQ_INT(v, -7);
    T_EQ_INT(gp_apply_bp(1, -1, &v), GP_EINVAL);
    T_EQ_INT(gp_apply_bp(1, 1, NULL), GP_EINVAL);
}

/* One nanos_to_minor case checked by hand. */
#define T_MINOR(nanos, exp, want_minor, want_res) do {                         \
        int64_t m_ = -7, r_ = -7;                                              \
        gp_err  e_ = gp_nanos_to_minor((nanos), (exp), &m_, &r_);               \
        T_OKM(e_ == GP_EOK && m_ == (want_minor) && r_ == (want_res),          \
              "%s nanos, exponent %d -> %lld r %lld (got %s %lld r %lld)",     \
              #nanos, (exp), (long long)(want_minor), (long long)(want_res),   \
              gp_err_name(e_), (long long)m_, (long long)r_);                 \
    } while (0)

static void
test_to_minor(void)
{
    int64_t m = -7, r = -7;

    T_MINOR(125000000, 2, 12, 5000000);      /* 0.125 EUR -> 0.12: tie to even down */
    T_MINOR(135000000, 2, 14, -5000000);     /* 0.135 EUR -> 0.14: tie to even up */
    T_MINOR(-125000000, 2, -12, -5000000);   /* symmetric */
    T_MINOR(-135000000, 2, -14, 5000000);
    T_MINOR(125000001, 2, 13, -4999999);     /* past the tie: up */
    T_MINOR(124999999, 2, 12, 4999999);
    T_MINOR(-125000001, 2, -13, 4999999);
    T_MINOR(5000000, 2, 0, 5000000);         /* 0.005 -> 0.00 (0 is even) */
    T_MINOR(15000000, 2, 2, -5000000);       /* 0.015 -> 0.02 */
    T_MINOR(1500000000, 0, 2, -500000000);   /* 1.5 JPY -> 2 */
    T_MINOR(2500000000, 0, 2, 500000000);    /* 2.5 JPY -> 2 */
    T_MINOR(-2500000000, 0, -2, -500000000);
    T_MINOR(1499999999, 0, 1, 499999999);
    T_MINOR(500000, 3, 0, 500000);           /* 0.0005 KWD -> 0.000 */
    T_MINOR(1500000, 3, 2, -500000);         /* 0.0015 KWD -> 0.002 */
    T_MINOR(2500000, 3, 2, 500000);          /* 0.0025 KWD -> 0.002 */
    T_MINOR(1234567891, 3, 1235, -432109);   /* 1.234567891 KWD -> 1.235 */
    T_MINOR(123, 9, 123, 0);
    T_MINOR(-123, 9, -123, 0);
    T_MINOR(0, 2, 0, 0);
    /* the extremes: minor * 1e9 would not fit, the residue still does */
    T_MINOR(INT64_MAX, 0, 9223372037, -145224193);
    T_MINOR(INT64_MIN, 0, -9223372037, 145224192);
    T_MINOR(INT64_MAX, 9, INT64_MAX, 0);
    T_MINOR(INT64_MIN, 9, INT64_MIN, 0);
    T_EQ_INT(gp_nanos_to_minor(1, 10, &m, &r), GP_EINVAL);
    T_EQ_INT(gp_nanos_to_minor(1, -1, &m, &r), GP_EINVAL);
    T_EQ_INT(gp_nanos_to_minor(1, 2, NULL, &r), GP_EINVAL);
    T_OKM(m == -7 && r == -7, "nothing is written on an error");
    T_EQ_INT(gp_nanos_to_minor(135000000, 2, &m, NULL), GP_EOK);
    T_EQ_INT(m, 14);
}

/* One split checked by hand; up to 4 parts. */
static void
t_split(int64_t total, const int64_t *w, size_t n, const int64_t *want, int line)
{
    int64_t parts[4] = {-7, -7, -7, -7};
    gp_err  e = gp_split_largest_remainder(total, w, n, parts);

    T_OKM(e == GP_EOK && memcmp(parts, want, n * sizeof *parts) == 0,
          "split %lld -> %lld %lld %lld %lld (got %s %lld %lld %lld %lld; line %d)",
          (long long)total, (long long)want[0], (long long)(n > 1 ? want[1] : 0),
          (long long)(n > 2 ? want[2] : 0), (long long)(n > 3 ? want[3] : 0), gp_err_name(e),
          (long long)parts[0], (long long)parts[1], (long long)parts[2], (long long)parts[3],
          line);
}
#define T_SPLIT(total, n, w, want) \
    t_split((total), (const int64_t[])w, (n), (const int64_t[])want, __LINE__)
#define A(...) {__VA_ARGS__}

static void
test_split(void)
{
    int64_t parts[3] = {-7, -7, -7};
    int64_t M = INT64_MAX;

    T_SPLIT(100, 3, A(1, 1, 1), A(34, 33, 33));         /* ties to the lowest index */
    T_SPLIT(2, 3, A(1, 1, 1), A(1, 1, 0));
    T_SPLIT(101, 3, A(1, 1, 1), A(34, 34, 33));
    T_SPLIT(100, 3, A(3333, 3333, 3334), A(33, 33, 34)); /* largest remainder: .34 */
    T_SPLIT(10, 3, A(3333, 3333, 3334), A(3, 3, 4));     /* remainders .33 .33 .34 */
    T_SPLIT(999, 2, A(7000, 3000), A(699, 300));         /* 699.3, 299.7 */
    T_SPLIT(1, 2, A(5000, 5000), A(1, 0));
    T_SPLIT(1, 2, A(4999, 5001), A(0, 1));
    T_SPLIT(3, 3, A(0, 1, 1), A(0, 2, 1));               /* weight 0 gets 0 */
    T_SPLIT(5, 4, A(1, 0, 0, 0), A(5, 0, 0, 0));
    T_SPLIT(0, 3, A(1, 2, 3), A(0, 0, 0));
    T_SPLIT(7, 1, A(42), A(7));
    T_SPLIT(6, 4, A(2, 3, 3, 2), A(1, 2, 2, 1));         /* 1.2 1.8 1.8 1.2: ties .8 */
    T_SPLIT(5, 4, A(1, 2, 2, 1), A(1, 2, 1, 1));         /* .833 1.67 1.67 .833: one unit */
    T_SPLIT(100, 3, A(5, 3, 2), A(50, 30, 20));          /* weights need not sum to 10000 */
    /* INT64_MAX = 3 * 3074457345618258602 + 1; the weights sum past 2^64 */
    T_SPLIT(M, 3, A(M, M, M), A(3074457345618258603, 3074457345618258602, 3074457345618258602));
    T_SPLIT(M, 2, A(M, 1), A(M - 1, 1));                 /* M*1/(M+1) = 0.99...: rounds up */
    T_EQ_INT(gp_split_largest_remainder(10, (const int64_t[]){0, 0}, 2, parts), GP_EINVAL);
    T_EQ_INT(gp_split_largest_remainder(10, (const int64_t[]){1, -1, 1}, 3, parts), GP_EINVAL);
    T_EQ_INT(gp_split_largest_remainder(-1, (const int64_t[]){1, 1}, 2, parts), GP_EINVAL);
    T_EQ_INT(gp_split_largest_remainder(10, (const int64_t[]){1}, 0, parts), GP_EINVAL);
    T_EQ_INT(gp_split_largest_remainder(10, NULL, 1, parts), GP_EINVAL);
    T_EQ_INT(gp_split_largest_remainder(10, (const int64_t[]){1}, 1, NULL), GP_EINVAL);
    T_OKM(parts[0] == -7 && parts[1] == -7 && parts[2] == -7, "nothing is written on an error");
}

static void
test_add(void)
{
    int64_t v = -7;

    T_EQ_INT(gp_money_add(2, 3, &v), GP_EOK);
    T_EQ_INT(v, 5);
    T_EQ_INT(gp_money_add(INT64_MAX, INT64_MIN, &v), GP_EOK);
    T_EQ_INT(v, -1);
    T_EQ_INT(gp_money_add(INT64_MAX - 1, 1, &v), GP_EOK);
    T_EQ_INT(v == INT64_MAX, 1);
    v = -7;
    T_EQ_INT(gp_money_add(INT64_MAX, 1, &v), GP_ERANGE);
    T_EQ_INT(gp_money_add(INT64_MIN, -1, &v), GP_ERANGE);
    T_EQ_INT(gp_money_sub(INT64_MIN, 1, &v), GP_ERANGE);
    T_EQ_INT(gp_money_sub(0, INT64_MIN, &v), GP_ERANGE);
    T_EQ_INT(v, -7);
    T_EQ_INT(gp_money_sub(-1, INT64_MIN, &v), GP_EOK);
    T_EQ_INT(v == INT64_MAX, 1);
    T_EQ_INT(gp_money_sub(5, 7, &v), GP_EOK);
    T_EQ_INT(v, -2);
    T_EQ_INT(gp_money_add(1, 1, NULL), GP_EINVAL);
    T_EQ_INT(gp_money_sub(1, 1, NULL), GP_EINVAL);
}

/* A random weight: often 0, often a basis point, sometimes large. */
static int64_t
rand_weight(void)
{
    switch (below(6)) {
    case 0: return 0;
    case 1: return (int64_t)below(10);
    case 2:
    case 3: return (int64_t)below(10001);
    case 4: return (int64_t)below(1000000);
    default: return (int64_t)(next() >> (2 + below(40))); /* < 2^62: sums past 2^64 */
    }
}

static void
prop_split(void)
{
    long    bad_sum = 0, bad_share = 0, bad_ref = 0, bad_err = 0, zero_sum = 0, tied = 0;
    int64_t w[16], parts[16], ref[16];

    for (long c = 0; c < CASES; c++) {
        size_t  n = 1 + below(12);
        int64_t total;
        u128    sum = 0;
        i128    got = 0;
        gp_err  e;

        switch (below(3)) {
        case 0: total = (int64_t)below(100); break;
        case 1: total = (int64_t)below(100000000); break;
        default: total = (int64_t)(next() >> 2); break; /* < 2^62 */
        }
        for (size_t i = 0; i < n; i++) {
            /* a third of the cases repeat weights, so remainders tie */
            w[i] = i > 0 && c % 3 == 0 && below(2) ? w[below(i)] : rand_weight();
            sum += (uint64_t)w[i];
        }
        e = gp_split_largest_remainder(total, w, n, parts);
        if (sum == 0) {
            zero_sum++;
            bad_err += e != GP_EINVAL;
            continue;
        }
        if (e != GP_EOK) {
            bad_err++;
            continue;
        }
        ref_split(total, w, n, ref);
        tied += split_tie_decides(total, w, n);
        for (size_t i = 0; i < n; i++) {
            /* |part - total * w / sum| < 1  <=>  |part * sum - total * w| < sum;
             * both products < 2^62 * 12 * 2^62 < 2^128 */
            u128 have = (u128)(uint64_t)parts[i] * sum, exact = (u128)total * (uint64_t)w[i];
            got += parts[i];
            bad_share += (have > exact ? have - exact : exact - have) >= sum;
        }
        bad_sum += got != total;
        bad_ref += memcmp(parts, ref, n * sizeof *parts) != 0;
    }
    T_OKM(tied > CASES / 50, "split: in %ld random cases a tie of remainders decides a unit",
          tied);
    T_OKM(bad_err == 0, "split: GP_EOK for every case, GP_EINVAL for the %ld with weights all 0 "
                        "(%ld wrong)", zero_sum, bad_err);
    T_OKM(bad_sum == 0, "split: parts sum to total in %d random cases (%ld do not)", CASES,
          bad_sum);
    T_OKM(bad_share == 0, "split: each part within 1 of its exact share (%ld are not)", bad_share);
    T_OKM(bad_ref == 0, "split: largest remainders, ties to the lowest index, as the reference "
                        "(%ld differ)", bad_ref);
}

static void
prop_to_minor(void)
{
    long bad_id = 0, bad_half = 0, bad_even = 0, bad_ref = 0, bad_sym = 0, bad_err = 0;
    long ties = 0;

    for (long c = 0; c < CASES; c++) {
        int     exp = (int)below(10);
        int64_t u = p10(9 - exp), nanos, m, r, m2, r2;
        i128    back;

        switch (below(3)) {
        case 0: nanos = (int64_t)next(); break;             /* anywhere */
        case 1: nanos = (int64_t)below(2000000) - 1000000; break;
        default:                                            /* on or next to a tie */
            nanos = ((int64_t)below(2000001) - 1000000) * (u / 2 > 0 ? u / 2 : 1) +
                    (int64_t)below(3) - 1;
        }
        if (gp_nanos_to_minor(nanos, exp, &m, &r) != GP_EOK) {
            bad_err++;
            continue;
        }
        back = (i128)m * u + r;
        bad_id += back != nanos;
        bad_half += 2 * (i128)(r < 0 ? -(i128)r : r) > u;
        if (u > 1 && 2 * (i128)(r < 0 ? -(i128)r : r) == u) {
            ties++;
            bad_even += m % 2 != 0;
        }
        bad_ref += m != ref_half_even(nanos, u);
        if (nanos != INT64_MIN) {
            if (gp_nanos_to_minor(-nanos, exp, &m2, &r2) != GP_EOK)
                bad_err++;
            else
                bad_sym += m2 != -m || r2 != -r;
        }
    }
    T_OKM(ties > CASES / 50, "to_minor: the random cases include ties (%ld)", ties);
    T_OKM(bad_err == 0, "to_minor: GP_EOK in %d random cases (%ld not)", CASES, bad_err);
    T_OKM(bad_id == 0, "to_minor: minor * 10^(9-e) + residue == nanos (%ld not)", bad_id);
    T_OKM(bad_half == 0, "to_minor: |residue| <= half a minor unit (%ld not)", bad_half);
    T_OKM(bad_even == 0, "to_minor: a tie goes to the even minor unit (%ld not)", bad_even);
    T_OKM(bad_ref == 0, "to_minor: as the floor-based reference (%ld differ)", bad_ref);
    T_OKM(bad_sym == 0, "to_minor: rounding -x is minus rounding x (%ld not)", bad_sym);
}

static void
prop_rate(void)
{
    long bad_mul = 0, bad_gpu = 0, bad_energy = 0, bad_bp = 0;

    for (long c = 0; c < CASES; c++) {
        int64_t  a = (int64_t)(next() >> 1), b = (int64_t)(next() >> (1 + below(63)));
        int64_t  d = (int64_t)(next() >> (1 + below(63))), q, r, v;
        uint64_t ms = next() >> below(64), e_mj = next() >> below(64);
        int64_t  price = (int64_t)(next() >> (1 + below(63)));
        uint32_t pue = (uint32_t)next();
        int32_t  bp = (int32_t)below(40001);
        gp_err   e;

        if (d == 0)
            d = 1;
        /* muldiv: q * d + r == a * b, 0 <= r < d, GP_ERANGE exactly when q > MAX */
        e = gp_money_muldiv(a, b, d, &q, &r);
        if ((u128)a * (uint64_t)b / (uint64_t)d > (u128)INT64_MAX)
            bad_mul += e != GP_ERANGE;
        else
            bad_mul += e != GP_EOK || r < 0 || r >= d ||
                       (u128)q * (uint64_t)d + (uint64_t)r != (u128)a * (uint64_t)b;
        /* gpu: v * 3600 <= ms * price < (v + 1) * 3600 */
        e = gp_rate_gpu_ms(ms, price, &v);
        if ((u128)ms * (uint64_t)price / 3600 > (u128)INT64_MAX)
            bad_gpu += e != GP_ERANGE;
        else
            bad_gpu += e != GP_EOK || (u128)v * 3600 > (u128)ms * (uint64_t)price ||
                       ((u128)v + 1) * 3600 <= (u128)ms * (uint64_t)price;
        /* energy: against the 192-bit reference, over the whole range */
        e = gp_rate_energy(e_mj, price, pue, &v);
        {
            int64_t want;
            if (!ref_energy(e_mj, (uint64_t)price, pue, &want))
                bad_energy += e != GP_ERANGE;
            else
                bad_energy += e != GP_EOK || v != want;
        }
        /* bp: v * 10000 <= nanos * bp < (v + 1) * 10000 for either sign of
         * nanos (floor), GP_ERANGE exactly when that v does not fit */
        {
            int64_t mag = (int64_t)(next() >> (1 + below(63))), nanos = below(2) ? mag : -mag;
            i128    p = (i128)nanos * bp, fl = p / 10000 - (p % 10000 < 0);

            e = gp_apply_bp(nanos, bp, &v);
            if (fl > INT64_MAX || fl < INT64_MIN)
                bad_bp += e != GP_ERANGE;
            else
                bad_bp += e != GP_EOK || (i128)v * 10000 > p || ((i128)v + 1) * 10000 <= p;
        }
    }
    T_OKM(bad_mul == 0, "muldiv: q * d + r == a * b and 0 <= r < d, or GP_ERANGE (%ld not)",
          bad_mul);
    T_OKM(bad_gpu == 0, "rate_gpu_ms: the floor of ms * price / 3600, or GP_ERANGE (%ld not)",
          bad_gpu);
    T_OKM(bad_energy == 0, "rate_energy: as the 192-bit product / 3.6e9, or GP_ERANGE (%ld differ)",
          bad_energy);
    T_OKM(bad_bp == 0, "apply_bp: the floor of nanos * bp / 10000, or GP_ERANGE (%ld not)", bad_bp);
}

int
main(void)
{
    test_currency();
    test_muldiv();
    test_rate();
    test_to_minor();
    test_split();
    test_add();
    prop_split();
    prop_to_minor();
    prop_rate();
    return T_DONE();
}
