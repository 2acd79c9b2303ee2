/* call.c -- typed request/reply over gp_bus (see gp/call.h). */
#include "gp/call.h"

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/buf.h"
#include "gp/limits.h"

typedef struct call {
    const gp_msg_desc *out_desc;
    gp_call_cb        *cb;
    gp_call_cb2       *cb2;
    void              *arg;
} call;

static void
call_reply_cb(void *arg, gp_err err, const char *data, size_t len)
{
    call *c = arg;
    char  detail[GP_ERRBUF_LEN] = "";
    void *out = NULL;
    bool  transport = err != GP_EOK;

    if (err == GP_EOK) {
        out = calloc(1, c->out_desc->size);
        err = out ? gp_msg_decode_reply(c->out_desc, data, len, out, detail, sizeof(detail))
                  : GP_ENOMEM;
    } else {
        snprintf(detail, sizeof(detail), "%s", gp_err_str(err));
    }
    if (c->cb2 != NULL)
        c->cb2(c->arg, err, transport, err == GP_EOK ? out : NULL, detail);
    else
        c->cb(c->arg, err, err == GP_EOK ? out : NULL, detail);
    if (out != NULL) {
        gp_msg_clear(c->out_desc, out);
        free(out);
    }
    free(c);
}

static gp_err
call_start(gp_bus *bus, const char *subject, const gp_msg_desc *in_desc, const void *in,
           const gp_msg_desc *out_desc, unsigned timeout_ms, call *c)
{
    gp_buf b;
    gp_err rc;

    if (bus == NULL || subject == NULL || in_desc == NULL || in == NULL || out_desc == NULL) {
        free(c);
        return GP_EINVAL;
    }
    c->out_desc = out_desc;
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    rc = gp_msg_encode(in_desc, in, &b);
    if (rc == GP_EOK)
        rc = gp_bus_request(bus, subject, b.p, b.n, timeout_ms, call_reply_cb, c);
    gp_buf_fini(&b);
    if (rc != GP_EOK)
        free(c);
    return rc;
}

gp_err
gp_call(gp_bus *bus, const char *subject, const gp_msg_desc *in_desc, const void *in,
        const gp_msg_desc *out_desc, unsigned timeout_ms, gp_call_cb *cb, void *arg)
{
    call *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return GP_ENOMEM;
    if (cb == NULL) {
        free(c);
        return GP_EINVAL;
    }
    c->cb = cb;
    c->arg = arg;
    return call_start(bus, subject, in_desc, in, out_desc, timeout_ms, c);
}

gp_err
gp_call2(gp_bus *bus, const char *subject, const gp_msg_desc *in_desc, const void *in,
         const gp_msg_desc *out_desc, unsigned timeout_ms, gp_call_cb2 *cb, void *arg)
{
    call *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return GP_ENOMEM;
    if (cb == NULL) {
        free(c);
        return GP_EINVAL;
    }
    c->cb2 = cb;
    c->arg = arg;
    return call_start(bus, subject, in_desc, in, out_desc, timeout_ms, c);
}

/* ---- synchronous ------------------------------------------------------------ */

/* Heap-allocated: if the wait gives up first (it should not: the bus has
 * its own deadline), the callback still has somewhere to write, and frees. */
typedef struct waiter {
    int                done, abandoned;
    gp_err             err;
    bool               transport;
    const gp_msg_desc *out_desc;
    void              *out;
    char               detail[GP_ERRBUF_LEN];
} waiter;

static void
wait_cb(void *arg, gp_err err, bool transport, const void *reply, const char *detail)
{
    waiter *w = arg;

    if (w->abandoned) {
        free(w);
        return;
    }
    w->err = err;
    w->transport = transport;
    snprintf(w->detail, sizeof(w->detail), "%s", transport ? "" : detail);
    /* Move the decoded reply into the caller's struct; call.c clears the
     * zeroed husk. */
    if (err == GP_EOK) {
        memcpy(w->out, reply, w->out_desc->size);
        memset((void *)reply, 0, w->out_desc->size);
    }
    w->done = 1;
}

static void
giveup_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    *(int *)t->data = 1;
}

gp_err
gp_call_wait(struct ev_loop *loop, gp_bus *bus, const char *subject,
             const gp_msg_desc *in_desc, const void *in, const gp_msg_desc *out_desc,
             void *out, unsigned timeout_ms, char *detail, size_t dlen, bool *transport)
{
    waiter  *w = calloc(1, sizeof(*w));
    ev_timer t;
    int      expired = 0;
    gp_err   rc;

    if (detail != NULL && dlen > 0)
        detail[0] = '\0';
    if (transport != NULL)
        *transport = false;
    if (w == NULL)
        return GP_ENOMEM;
    w->out_desc = out_desc;
    w->out = out;
    /* A tool's loop may have slept since it last ran: deadlines count from now. */
    ev_now_update(loop);
    rc = gp_call2(bus, subject, in_desc, in, out_desc, timeout_ms, wait_cb, w);
    if (rc != GP_EOK) {
        free(w);
        if (transport != NULL)
            *transport = rc == GP_EUNAVAIL || rc == GP_ETOOBIG;
        return rc;
    }
    ev_timer_init(&t, giveup_cb, timeout_ms / 1000.0 + 2.0, 0.);
    t.data = &expired;
    ev_timer_start(loop, &t);
    while (!w->done && !expired)
        ev_run(loop, EVRUN_ONCE);
    ev_timer_stop(loop, &t);
    if (!w->done) {
        w->abandoned = 1;                   /* wait_cb frees it */
        if (transport != NULL)
            *transport = true;
        return GP_ETIMEOUT;
    }
    rc = w->err;
    if (transport != NULL)
        *transport = w->transport;
    if (detail != NULL && dlen > 0)
        snprintf(detail, dlen, "%s", w->detail);
    free(w);
    return rc;
}
