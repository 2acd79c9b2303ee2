/* gp/id.h -- the one rule for ids (tenants, sites, nodes, pools,
 * products, services, jobs).
 *
 * An id is 1 to GP_MAX_ID characters of [A-Za-z0-9_-].  That makes it a
 * NATS subject token (no '.', '*', '>' or whitespace: a parameter can never
 * widen or shift a subject), a Redis key part without quoting, an element
 * of a PostgreSQL array literal without quoting, and a file name.  The
 * PostgreSQL tables check the same rule with CHECK constraints.
 *
 * Pure functions; any thread. */
#ifndef GP_ID_H
#define GP_ID_H

#include <stdbool.h>
#include <stddef.h>

bool gp_id_ok(const char *id);
/* The same for a counted string (not NUL-terminated). */
bool gp_id_okn(const char *id, size_t n);

#endif
