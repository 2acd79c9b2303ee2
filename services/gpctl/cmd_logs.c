/* cmd_logs.c -- gpctl logs JOB --tenant T [--attempt N] [--follow]
 * [--bytes N]: an attempt's output, as its node keeps it (the last
 * log-kb KiB), through gp.api.<T>.job.logs; --follow asks again from
 * where the last answer ended until the attempt no longer runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gp/id.h"
#include "gp/limits.h"
#include "gpctl.h"

typedef struct logs_opts {
    const char      *job, *tenant;
    msg_logs_request req;
    bool             follow;
} logs_opts;

static int
take(logs_opts *o, const char *flag, const char *val)
{
    char *end;

    if (strcmp(flag, "--tenant") == 0)
        o->tenant = val;
    else if (strcmp(flag, "--attempt") == 0 || strcmp(flag, "--bytes") == 0) {
        unsigned long v = strtoul(val, &end, 10);

        if (*val == '\0' || *end != '\0' || v == 0 ||
            v > (flag[2] == 'a' ? 1000000ul : MSG_LOGS_REQUEST_MAX_BYTES_MAX))
            return usage_error("logs", "%s %s: expected a number (1 to %u)", flag, val,
                               flag[2] == 'a' ? 1000000u : MSG_LOGS_REQUEST_MAX_BYTES_MAX);
        if (flag[2] == 'a')
            o->req.attempt = (uint32_t)v;
        else
            o->req.max_bytes = (uint32_t)v;
    } else
        return usage_error("logs", "unknown option %s", flag);
    return GPCTL_OK;
}

static int
parse(int argc, char **argv, logs_opts *o)
{
    for (int i = 0; i < argc; i++) {
        int rc;

        if (strcmp(argv[i], "--follow") == 0 || strcmp(argv[i], "-f") == 0) {
            o->follow = true;
            continue;
        }
        if (argv[i][0] != '-') {
            if (o->job != NULL)
                return usage_error("logs", "unexpected argument \"%s\"", argv[i]);
            o->job = argv[i];
            continue;
        }
        if (i + 1 >= argc)
            return usage_error("logs", "%s needs a value", argv[i]);
        if ((rc = take(o, argv[i], argv[i + 1])) != GPCTL_OK)
            return rc;
        i++;
    }
    if (o->job == NULL || !gp_id_ok(o->job))
        return usage_error("logs", "expected: logs JOB --tenant T [--attempt N] [--follow]");
    if (o->tenant == NULL || !gp_id_ok(o->tenant))
        return usage_error("logs", "--tenant T: the job's tenant");
    return GPCTL_OK;
}

static void
show(const msg_logs *l)
{
    if (l->dropped > 0)
        fprintf(stderr, "gpctl: %llu bytes of attempt %u are no longer kept on %s\n",
                (unsigned long long)l->dropped, l->attempt, l->node);
    if (l->data.n > 0)
        fwrite(l->data.p, 1, l->data.n, stdout);
    fflush(stdout);
}

int
cmd_logs(gpctl *c, int argc, char **argv)
{
    logs_opts o = {0};
    char      subject[GP_MAX_SUBJECT + 1];
    msg_logs  l = {0};
    int       rc = parse(argc, argv, &o);

    if (rc != GPCTL_OK)
        return rc;
    if (gp_op_subjectf(GP_OP_API_JOB_LOGS, subject, sizeof(subject), o.tenant) != GP_EOK)
        return usage_error("logs", "bad tenant %s", o.tenant);
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    snprintf(o.req.job_id, sizeof(o.req.job_id), "%s", o.job);
    for (;;) {
        rc = ctl_call(c, subject, &msg_logs_request_desc, &o.req, &msg_logs_desc, &l);
        if (rc != GPCTL_OK)
            break;
        if (c->out == OUT_JSON)
            rc = ctl_print_json(&msg_logs_desc, &l);
        else
            show(&l);
        /* the next piece starts where this one ended, of the same attempt */
        o.req.offset = l.next_offset;
        o.req.attempt = l.attempt;
        GP_SET_HAS(&o.req, MSG_LOGS_REQUEST__OFFSET);
        bool more = l.data.n > 0, running = l.running;

        gp_msg_clear(&msg_logs_desc, &l);
        if (!o.follow || (!running && !more))
            break;
        if (!more)
            sleep(1);
    }
    gp_msg_clear(&msg_logs_desc, &l);
    return rc;
}
