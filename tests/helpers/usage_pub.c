/* usage_pub.c -- publishes usage records of one site into the stream
 * USAGE as metering would (Nats-Msg-Id = the record id), one per site
 * sequence number given, for tests of what reads USAGE (a number left out
 * is a record metering lost).  Exits once JetStream stored every one.
 *
 *   usage_pub NATS_URL SITE SEQ...
 *
 * With GP_NATS_USER / GP_NATS_PASSWORD set, it connects as that user;
 * with USAGE_PUB_JOB set, the records are of that job (new record ids for
 * the same numbers, as a republish the duplicate window missed).
 * Exit: 0 all stored, 1 one was not, 2 usage or no connection. */
#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/buf.h"
#include "gp/bus.h"
#include "gp/codec.h"
#include "gp/limits.h"
#include "gp/op.h"
#include "msg_gen.h"

static int left, failed;

static void
stored(void *arg, gp_err err)
{
    (void)arg;
    if (err != GP_EOK) {
        fprintf(stderr, "usage_pub: not stored: %s\n", gp_err_name(err));
        failed = 1;
    }
    if (--left == 0)
        ev_break(EV_DEFAULT, EVBREAK_ALL);
}

static gp_err
publish(gp_bus *bus, const char *site, unsigned long long seq)
{
    msg_usage_record r = {0};
    char             subj[GP_MAX_SUBJECT];
    gp_buf           b = GP_BUF_INIT;
    gp_err           rc;
    const char      *job = getenv("USAGE_PUB_JOB");

    if (job != NULL)
        snprintf(r.job_id, sizeof(r.job_id), "%s", job);
    else
        snprintf(r.job_id, sizeof(r.job_id), "j-usage-pub-%s", site);
    snprintf(r.node, sizeof(r.node), "%s-n01", site);
    snprintf(r.site, sizeof(r.site), "%s", site);
    snprintf(r.tenant, sizeof(r.tenant), "acme");
    r.attempt = 1;
    r.window = seq;
    r.window_ms = 60000;
    r.gpu_ms = 60000;
    r.energy_mj = 1000;
    r.site_seq = seq;
    snprintf(r.id, sizeof(r.id), "%s.%u.%s.%llu", r.job_id, r.attempt, r.node, seq);
    r.has = 1ull << MSG_USAGE_RECORD__ID | 1ull << MSG_USAGE_RECORD__JOB_ID |
            1ull << MSG_USAGE_RECORD__ATTEMPT | 1ull << MSG_USAGE_RECORD__RANK |
            1ull << MSG_USAGE_RECORD__TENANT | 1ull << MSG_USAGE_RECORD__SITE |
            1ull << MSG_USAGE_RECORD__NODE | 1ull << MSG_USAGE_RECORD__WINDOW |
            1ull << MSG_USAGE_RECORD__WINDOW_MS | 1ull << MSG_USAGE_RECORD__GPU_MS |
            1ull << MSG_USAGE_RECORD__ENERGY_MJ | 1ull << MSG_USAGE_RECORD__SITE_SEQ |
            1ull << MSG_USAGE_RECORD__FINAL;
    rc = gp_msg_encode(&msg_usage_record_desc, &r, &b);
    if (rc == GP_EOK)
        rc = gp_op_subjectf(GP_OP_USAGE_RECORD, subj, sizeof(subj), site);
    if (rc == GP_EOK)
        rc = gp_bus_js_pub(bus, subj, r.id, b.p, b.n, stored, NULL);
    gp_buf_fini(&b);
    return rc;
}

int
main(int argc, char **argv)
{
    struct ev_loop *loop = ev_default_loop(0);
    gp_bus_opts     o = {0};
    gp_bus         *bus;

    if (argc < 4) {
        fprintf(stderr, "usage: usage_pub NATS_URL SITE SEQ...\n");
        return 2;
    }
    o.url = argv[1];
    o.name = "usage-pub";
    o.user = getenv("GP_NATS_USER");
    o.password = getenv("GP_NATS_PASSWORD");
    o.jetstream = true;
    if (gp_bus_new(loop, &o, NULL, NULL, &bus) != GP_EOK)
        return 2;
    for (int i = 3; i < argc; i++) {
        left++;
        if (publish(bus, argv[2], strtoull(argv[i], NULL, 10)) != GP_EOK) {
            left--;
            failed = 1;
        }
    }
    if (left > 0)
        ev_run(loop, 0);
    gp_bus_free(bus);
    return failed;
}
