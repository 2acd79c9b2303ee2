/* usage_dump.c -- prints every usage record in the stream USAGE as one
 * JSON line (gp_msg_to_json), read from the start by a new durable
 * consumer, and exits once nothing new came for IDLE_MS.  For tests that
 * compare what metering published with the simulator's ground truth.
 *
 *   usage_dump NATS_URL CONSUMER_NAME [IDLE_MS]
 *
 * With GP_NATS_USER / GP_NATS_PASSWORD set, it connects as that user.
 * Exit: 0, 1 (a record did not decode: printed as {"undecodable": ...}),
 * 2 (could not connect). */
#include <ev.h>
#include <stdio.h>
#include <stdlib.h>

#include "gp/bus.h"
#include "gp/clock.h"
#include "gp/codec.h"
#include "msg_gen.h"

static uint64_t last_ms;
static int      bad, count;

static void
on_msg(void *arg, gp_jsmsg *m)
{
    msg_usage_record r = {0};
    gp_buf           b = GP_BUF_INIT;

    (void)arg;
    last_ms = gp_mono_ms();
    count++;
    if (gp_msg_decode(&msg_usage_record_desc, gp_jsmsg_data(m), gp_jsmsg_len(m), &r, NULL, 0) ==
            GP_EOK &&
        gp_msg_to_json(&msg_usage_record_desc, &r, &b) == GP_EOK) {
        fwrite(b.p, 1, b.n, stdout);
        fputc('\n', stdout);
    } else {
        printf("{\"undecodable\":\"%s\"}\n", gp_jsmsg_subject(m));
        bad = 1;
    }
    gp_buf_fini(&b);
    gp_msg_clear(&msg_usage_record_desc, &r);
    gp_jsmsg_ack(m);
}

static void
on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    uint64_t idle = (uint64_t)(uintptr_t)w->data;

    (void)revents;
    if (gp_mono_ms() - last_ms >= idle)
        ev_break(loop, EVBREAK_ALL);
}

int
main(int argc, char **argv)
{
    struct ev_loop *loop = ev_default_loop(0);
    gp_bus_opts     o = {0};
    gp_pull_cfg     pc = {0};
    gp_bus         *bus;
    gp_bus_pull    *pull;
    ev_timer        t;

    if (argc < 3) {
        fprintf(stderr, "usage: usage_dump NATS_URL CONSUMER [IDLE_MS]\n");
        return 2;
    }
    o.url = argv[1];
    o.name = "usage-dump";
    o.user = getenv("GP_NATS_USER");
    o.password = getenv("GP_NATS_PASSWORD");
    o.jetstream = true;
    if (gp_bus_new(loop, &o, NULL, NULL, &bus) != GP_EOK)
        return 2;
    pc.stream = "USAGE";
    pc.durable = argv[2];
    pc.batch = 256;
    if (gp_bus_js_pull_new(bus, &pc, on_msg, NULL, &pull) != GP_EOK)
        return 2;
    last_ms = gp_mono_ms();
    ev_timer_init(&t, on_tick, 0.1, 0.1);
    t.data = (void *)(uintptr_t)(argc > 3 ? strtoul(argv[3], NULL, 10) : 3000);
    ev_timer_start(loop, &t);
    ev_run(loop, 0);
    gp_bus_js_pull_free(pull);
    ev_run(loop, EVRUN_NOWAIT);
    gp_bus_free(bus);
    fprintf(stderr, "usage_dump: %d records\n", count);
    return bad;
}
