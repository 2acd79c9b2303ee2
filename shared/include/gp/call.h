/* gp/call.h -- typed request/reply: the one way gridpool code (services,
 * the agent, gpctl, tests) asks another service something.
 *
 * A call encodes the request with its descriptor, sends it with a deadline
 * (gp_bus_request: one wildcard reply inbox per bus, under
 * gp_bus_opts.inbox_prefix), and decodes the reply with the reply's
 * descriptor, or the typed error reply {"error": {"code", "message"}} into
 * its gp_err and message.
 *
 * Errors a caller sees, and where they come from:
 *   - the remote service: its error reply's code (NOTFOUND, INVAL, ...,
 *     also TIMEOUT when its handler missed its deadline), message in detail;
 *   - the transport (gp_call_transport() says which): TIMEOUT (no reply by
 *     the deadline), NOROUTE (nobody subscribes), UNAVAIL (bus closed, or
 *     gp_bus_fail_requests at shutdown);
 *   - this side: DECODE/TYPE/MISSING/RANGE when the reply does not fit the
 *     descriptor, ENCODE errors of the request (returned, no callback).
 *
 * Loop thread only, like the bus. */
#ifndef GP_CALL_H
#define GP_CALL_H

#include <stdbool.h>
#include <stddef.h>

#include "gp/bus.h"
#include "gp/codec.h"
#include "gp/err.h"

struct ev_loop;

/* reply is the decoded reply (valid during the call) when err is OK, else
 * NULL; detail is never NULL (the remote message, or the error's text). */
typedef void gp_call_cb(void *arg, gp_err err, const void *reply, const char *detail);

/* Asynchronous: cb exactly once (when OK is returned), on the loop thread.
 * Returns the encode or send error otherwise (cb not called). */
gp_err gp_call(gp_bus *bus, const char *subject, const gp_msg_desc *in_desc, const void *in,
               const gp_msg_desc *out_desc, unsigned timeout_ms, gp_call_cb *cb, void *arg);

/* Like gp_call, and the callback also learns whether err came from the
 * transport (no reply at all) rather than from the remote service. */
typedef void gp_call_cb2(void *arg, gp_err err, bool transport, const void *reply,
                         const char *detail);
gp_err gp_call2(gp_bus *bus, const char *subject, const gp_msg_desc *in_desc, const void *in,
                const gp_msg_desc *out_desc, unsigned timeout_ms, gp_call_cb2 *cb, void *arg);

/* Synchronous, for command-line tools and tests only (it turns loop until
 * the reply; never call it from a callback of a service loop): decodes the
 * reply into out (clear it with gp_msg_clear), the error's message into
 * detail ("" when none).  *transport (may be NULL) tells a transport error
 * (TIMEOUT, NOROUTE, UNAVAIL without a reply) from a remote one. */
gp_err gp_call_wait(struct ev_loop *loop, gp_bus *bus, const char *subject,
                    const gp_msg_desc *in_desc, const void *in, const gp_msg_desc *out_desc,
                    void *out, unsigned timeout_ms, char *detail, size_t dlen, bool *transport);

#endif
