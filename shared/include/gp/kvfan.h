/* gp/kvfan.h -- ordered fan-out: many Redis commands for one request,
 * every reply delivered to its own slot by index.
 *
 * Contract:
 *   - gp_kvfan_new(kv, n, ...) makes n slots, 0..n-1.  gp_kvfan_cmd/cmdf
 *     issue the command of slot i (at most one command per slot).
 *   - slot_cb(arg, i, reply, err) is called exactly once for every slot
 *     that was issued, with that slot's own reply, whatever happened to
 *     the other slots: err OK with the server's reply; INTERNAL with the
 *     reply when it is a Redis error reply (type REDIS_REPLY_ERROR);
 *     TIMEOUT or UNAVAIL with reply NULL.  A command that could not be
 *     sent (UNAVAIL: disconnected; TOOBIG: the client's in-flight cap;
 *     INVAL: a format past GP_KVFAN_MAX_ARGS arguments; NOMEM) gets its
 *     slot_cb at once, from inside gp_kvfan_cmd, with that error
 *     and reply NULL, and gp_kvfan_cmd returns the error.  The reply is
 *     valid only during the call.  A slot never issued gets no slot_cb;
 *     gp_kvfan_err(f, i) is UNAVAIL for it.
 *   - gp_kvfan_end(f) says no more commands follow; done_cb(arg, f) is
 *     then called exactly once when every issued slot has had its slot_cb
 *     (possibly at once, from inside gp_kvfan_end).  Inside done_cb,
 *     gp_kvfan_err(f, i) gives each slot's outcome; f is freed when
 *     done_cb returns.  slot_cb may be NULL (the outcome is still kept).
 *   - Nothing is issued after gp_kvfan_end; calling cmd on a slot twice or
 *     out of range is INVAL (no slot_cb).
 *
 * Loop thread only, like gp_kv. */
#ifndef GP_KVFAN_H
#define GP_KVFAN_H

#include <stddef.h>

#include "gp/err.h"
#include "gp/kv.h"

/* Arguments of one gp_kvfan_cmdf command (formatted on the stack). */
#define GP_KVFAN_MAX_ARGS 64

typedef struct gp_kvfan gp_kvfan;

typedef void gp_kvfan_slot_cb(void *arg, size_t i, const struct redisReply *reply, gp_err err);
typedef void gp_kvfan_done_cb(void *arg, const gp_kvfan *f);

/* NULL on NOMEM (n may be 0). */
gp_kvfan *gp_kvfan_new(gp_kv *kv, size_t n, gp_kvfan_slot_cb *slot_cb, gp_kvfan_done_cb *done_cb,
                       void *arg);
gp_err    gp_kvfan_cmd(gp_kvfan *f, size_t i, int argc, const char **argv, const size_t *argvlen);
gp_err    gp_kvfan_cmdf(gp_kvfan *f, size_t i, const char *fmt, ...);
void      gp_kvfan_end(gp_kvfan *f);
/* The outcome of slot i: PENDING while its reply is still to come. */
gp_err    gp_kvfan_err(const gp_kvfan *f, size_t i);
size_t    gp_kvfan_count(const gp_kvfan *f);

#endif
