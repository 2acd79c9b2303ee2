/* endpoints.h -- an attempt's endpoints (where its named ports are
 * reached) as the one text column attempts.endpoints keeps:
 * "name=host:port/proto,name=host:port/proto".  The agent reports them as
 * msg_endpoint (its started event); describe gives them back the same way.
 * Pure: no I/O. */
#ifndef GP_SCHED_ENDPOINTS_H
#define GP_SCHED_ENDPOINTS_H

#include <stddef.h>

#include "gp/codec.h"

#define SCHED_ENDPOINTS_MAX 1024   /* the column's CHECK */

/* The text of ev's endpoints (a gp_arr of msg_endpoint) into out; an
 * endpoint whose name or host has characters the text cannot carry (or
 * one past the room) is left out, and counted in the return value: the
 * number left out. */
int  sched_endpoints_text(const gp_arr *eps, char *out, size_t n);
/* The text back into out (a gp_arr of msg_endpoint, allocated; free it
 * with gp_arr_free or the message's free).  Malformed entries are
 * skipped.  0, or -1 out of memory. */
int  sched_endpoints_parse(const char *s, gp_arr *out);

#endif
