/* test_beat.h -- a test standing in for the control plane takes a node's
 * heartbeat from a lease renewal too: a node that runs something beats
 * inside its renewals (gp.node.<site>.<node>.lease with `beat`), one
 * message per interval. */
#ifndef TEST_BEAT_H
#define TEST_BEAT_H

#include <string.h>

#include "gp/buf.h"
#include "gp/bus.h"
#include "gp/codec.h"
#include "gp/limits.h"
#include "msg_gen.h"

/* If the renewal m carries a beat, calls on_hb with that beat as a
 * message of its own (the bytes a beat on .hb would have); returns whether
 * it did. */
static inline int
tl_lease_beat(const gp_bus_msg *m, gp_bus_msg_cb *on_hb, void *arg)
{
    msg_lease_renew l;
    gp_buf          b;
    int             has;

    memset(&l, 0, sizeof(l));
    if (gp_msg_decode(&msg_lease_renew_desc, m->data, m->len, &l, NULL, 0) != GP_EOK)
        return 0;
    has = GP_HAS(&l, MSG_LEASE_RENEW__BEAT);
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    if (has && gp_msg_encode(&msg_heartbeat_desc, &l.beat, &b) == GP_EOK) {
        gp_bus_msg hm = {.subject = m->subject, .reply = NULL, .data = b.p, .len = b.n};

        on_hb(arg, &hm);
    }
    gp_buf_fini(&b);
    gp_msg_clear(&msg_lease_renew_desc, &l);
    return has;
}

#endif
