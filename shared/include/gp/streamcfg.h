/* gp/streamcfg.h -- the limits of a JetStream stream, how a service's
 * declaration meets a stream that already exists, and how full one is.
 *
 * A service's declaration (gp_stream_cfg in gp/bus.h, its replicas from
 * the common key stream-replicas, its byte limit from stream-max-bytes-mb
 * or the declaration) is a floor, never a ceiling: creating or updating a
 * stream never lowers its replicas or a limit below what the stream has.
 * An operator who raised one (more replicas, a larger byte limit, a longer
 * age, no limit at all) keeps it across every restart of every service;
 * to lower one, change the declaration and lower the stream by hand.
 * Why: before, every service's create-or-update reset what the operator
 * had set, and a service started with a stale configuration (replicas 1
 * on a cluster) shrank the stream that held what nothing may lose.
 *
 * Pure: no I/O, any thread. */
#ifndef GP_STREAMCFG_H
#define GP_STREAMCFG_H

#include <stddef.h>
#include <stdint.h>

#include "gp/err.h"

/* stream-replicas' bounds (nats-server allows at most 5). */
#define GP_STREAM_REPLICAS_MAX 5

typedef struct gp_stream_limits {
    int64_t replicas;   /* >= 1 (0 reads as 1) */
    int64_t max_bytes;  /* <= 0: unlimited */
    int64_t max_age_ns; /* <= 0: unlimited */
    int64_t max_msgs;   /* <= 0: unlimited */
} gp_stream_limits;

/* Which of have's values gp_stream_limits_merge kept over want's. */
#define GP_STREAM_KEPT_REPLICAS 0x1u
#define GP_STREAM_KEPT_BYTES    0x2u
#define GP_STREAM_KEPT_AGE      0x4u
#define GP_STREAM_KEPT_MSGS     0x8u

/* out = the larger of want (the declaration) and have (the stream as it
 * is), field by field; unlimited (<= 0) is larger than any limit.
 * Returns the GP_STREAM_KEPT_* bits of the fields where have was larger
 * (0: the declaration is applied as it is).  out may alias want. */
unsigned gp_stream_limits_merge(const gp_stream_limits *want, const gp_stream_limits *have,
                                gp_stream_limits *out);

/* For the log: "replicas=3 (declared 1) max_bytes=unlimited (declared
 * 1073741824)" for the fields in kept; "" when none.  Returns the length
 * snprintf would have written. */
int gp_stream_kept_str(unsigned kept, const gp_stream_limits *want, const gp_stream_limits *out,
                       char *buf, size_t n);

/* stream-max-bytes-mb: "" or a list "NAME=MB,NAME=MB,*=MB" (MB in MiB,
 * 1..16777216; "*" every stream not named).  Sets *bytes to the limit for
 * stream name, or leaves it when the list names neither it nor "*".
 * INVAL for a malformed list (a missing '=', a bad number, a name that is
 * not a stream name); a list is checked whole, so gp_stream_bytes_spec(s,
 * "", &x) validates it. */
gp_err gp_stream_bytes_spec(const char *spec, const char *name, int64_t *bytes);

/* How full a stream is, in percent rounded down: the larger of bytes over
 * max_bytes and msgs over max_msgs; 0 when both are unlimited (<= 0). */
unsigned gp_stream_fill_pct(uint64_t bytes, int64_t max_bytes, uint64_t msgs, int64_t max_msgs);

#endif
