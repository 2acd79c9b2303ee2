/* gp/money.h -- integer money arithmetic for billing.  Money is an integer,
 * never a float: a double cannot hold 0.10, and a sum of them drifts.
 *
 * Two scales:
 *
 * - The ledger holds amounts in integer *minor units* of each currency:
 *   cents for EUR (exponent 2), yen for JPY (0), fils for KWD (3).  The
 *   exponent comes from the ISO 4217 table below (gp_currency_exponent).
 * - Rating is finer: an amount being rated is in *nanos* of the currency's
 *   major unit (1e-9 EUR), an int64_t (up to about 9.2e9 major units per
 *   value).  Prices are in *micros* (1e-6 EUR) per GPU-hour or per kWh;
 *   a line rated from milliseconds of GPU time or millijoules of energy is
 *   exact down to the nano (each rating step floors, losing < 1 nano).
 *
 * A rated line goes to the ledger through gp_nanos_to_minor, which rounds
 * half to even (banker's rounding) per line: ties go to the even minor unit,
 * so over many lines the roundings do not lean either way.  The residue
 * (nanos - minor * 10^(9 - exponent)) goes to a rounding account, so no
 * nano is lost or invented between the rated and the booked amounts.
 *
 * An amount split between the legs of a revenue share goes through
 * gp_split_largest_remainder (largest remainder, ties to the lowest index),
 * so the legs sum exactly to the amount and each leg is its exact share
 * rounded down or up (it differs from it by less than one minor unit).
 *
 * Every overflow is checked (128-bit intermediates, __builtin_*_overflow)
 * and returned as GP_ERANGE, never undefined behaviour; bad arguments are
 * GP_EINVAL.  On an error nothing is written to the outputs.
 *
 * Pure functions; any thread. */
#ifndef GP_MONEY_H
#define GP_MONEY_H

#include <stddef.h>
#include <stdint.h>

#include "gp/err.h"

#define GP_NANOS_PER_UNIT     1000000000LL /* nanos in one major unit */
#define GP_MONEY_MAX_EXPONENT 9            /* a minor unit no finer than a nano */

/* The ISO 4217 minor-unit exponent of a currency from a built-in table:
 * 2 for EUR USD GBP CHF SEK NOK DKK PLN CZK..., 0 for JPY KRW ISK CLP...,
 * 3 for BHD KWD JOD OMR TND...  -1 for a code not in the table or not
 * exactly 3 uppercase ASCII letters (NULL included). */
int gp_currency_exponent(const char *iso4217);

/* q = floor(a * b / d), r = a * b - q * d (0 <= r < d), exact through a
 * 128-bit product.  a, b >= 0 and d > 0, else GP_EINVAL (also for q NULL;
 * r may be NULL); GP_ERANGE when q does not fit an int64_t. */
gp_err gp_money_muldiv(int64_t a, int64_t b, int64_t d, int64_t *q, int64_t *r);

/* Nanos for gpu_ms milliseconds of GPU time at price_micros_per_gpu_hour:
 * floor(gpu_ms * price * 1000 / 3,600,000) = floor(gpu_ms * price / 3600).
 * GP_EINVAL for a negative price or nanos NULL; GP_ERANGE when the result
 * does not fit an int64_t. */
gp_err gp_rate_gpu_ms(uint64_t gpu_ms, int64_t price_micros_per_gpu_hour, int64_t *nanos);

/* Nanos for energy_mj millijoules at price_micros_per_kwh, times the PUE
 * (pue_milli / 1000: 1000 = 1.0, 1350 = 1.35).  1 kWh = 3.6e9 mJ and one
 * micro = 1000 nanos, so
 *     nanos = floor(energy_mj * price * pue_milli / 3,600,000,000)
 * (exact: the triple product may exceed 128 bits and is never formed).
 * Any pue_milli is taken as it is (bounding it is the config's job).
 * GP_EINVAL for a negative price or nanos NULL; GP_ERANGE when the result
 * does not fit an int64_t. */
gp_err gp_rate_energy(uint64_t energy_mj, int64_t price_micros_per_kwh, uint32_t pue_milli,
                      int64_t *nanos);

/* out = floor(nanos * modifier_bp / 10000): a price modifier in basis points
 * (10000 = x1.0, 12500 = x1.25, 0 = free).  The floor is toward minus
 * infinity, also for a negative amount (-1 nano x0.5 = -1).  GP_EINVAL for a
 * negative modifier or out NULL; GP_ERANGE when the result does not fit. */
gp_err gp_apply_bp(int64_t nanos, int32_t modifier_bp, int64_t *out);

/* Nanos of the major unit to minor units of a currency of this exponent
 * (0..9), rounding HALF TO EVEN: with u = 10^(9 - exponent) nanos per minor
 * unit, minor is the integer nearest to nanos / u, and when nanos / u is
 * exactly halfway between two integers, the even one.  Symmetric: the
 * rounding of -x is minus the rounding of x.  EUR (u = 10^7):
 *     0.125 EUR ->  12 cents, residue +5,000,000 nanos
 *     0.135 EUR ->  14 cents, residue -5,000,000 nanos
 *    -0.125 EUR -> -12 cents, residue -5,000,000 nanos
 * residue_nanos = nanos - minor * u, signed, |residue| <= u / 2 (it goes to
 * the rounding account).  Never overflows (even for INT64_MIN/MAX, whose
 * minor * u would not fit: the residue is computed without it).  GP_EINVAL
 * for an exponent outside 0..9 or minor NULL; residue_nanos may be NULL. */
gp_err gp_nanos_to_minor(int64_t nanos, int exponent, int64_t *minor, int64_t *residue_nanos);

/* Splits total (>= 0, minor units) into n parts proportional to weights
 * (>= 0, any scale, e.g. basis points that need not sum to 10000: the share
 * of part i is weights[i] / sum(weights)).  Each part is first
 * floor(total * w / sum); the units left over (fewer than n) go one each to
 * the parts with the largest remainders, ties to the lowest index.  The
 * parts sum exactly to total; a part of weight 0 gets 0.  parts may not
 * alias weights.  No allocation; O(n) passes, at most ~130 of them.
 * GP_EINVAL for n == 0, NULL arrays, a negative total or weight, or weights
 * summing to 0. */
gp_err gp_split_largest_remainder(int64_t total, const int64_t *weights, size_t n, int64_t *parts);

/* out = a + b, a - b; GP_ERANGE on int64_t overflow, GP_EINVAL for out NULL. */
gp_err gp_money_add(int64_t a, int64_t b, int64_t *out);
gp_err gp_money_sub(int64_t a, int64_t b, int64_t *out);

#endif
