/* op_test.c -- gp_op_inbox_prefix: a client's reply inbox prefix
 * from the contract's inbox channels (the agent's and a tenant's);
 * gp_op_stream_subject, gp_op_stream_filter: a stream's subjects, and a
 * consumer's filter on it, from an operation; and the per-tenant limit
 * (x-gp-limit-by) on exactly the tenant API. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "gp/limits.h"
#include "gp/op.h"
#include "msg_gen.h"
#include "test.h"

/* Every request of the tenant API (gp.api.{tenant}., the tenant inbox's
 * prefix) is limited per tenant, and nothing else: operator, node and
 * internal operations are never RATE_LIMITED. */
static void
test_limit_by(void)
{
    const char *inbox = GP_INBOX_TENANT_INBOX->address;
    size_t      pre = (size_t)(strchr(inbox, '}') - inbox) + 1;     /* gp.api.{tenant} */
    int         api = 0, limited = 0, wrong = 0;

    for (const gp_op *const *o = gp_ops; *o != NULL; o++) {
        bool is_api = (*o)->receive && (*o)->out != NULL && strncmp((*o)->address, inbox, pre) == 0;
        bool lim = (*o)->limit_by != NULL && strcmp((*o)->limit_by, "tenant") == 0;

        api += is_api;
        limited += lim;
        if (is_api != lim) {
            wrong++;
            printf("# %s: tenant API %d, limited %d\n", (*o)->id, is_api, lim);
        }
    }
    T_OKM(api > 0 && wrong == 0, "x-gp-limit-by tenant on the %d tenant API requests and no "
          "other operation (%d limited)", api, limited);
}

int
main(void)
{
    char   buf[GP_MAX_SUBJECT];
    gp_err rc;

    rc = gp_op_inbox_prefix(GP_INBOX_NODE_INBOX, buf, sizeof(buf),
                            (const char *const[]){"s0007", "s0007-n01"});
    T_OKM(rc == GP_EOK && strcmp(buf, "gp.node.s0007.s0007-n01._reply") == 0,
          "a node's inbox prefix: its own subtree (%s)", buf);
    rc = gp_op_inbox_prefix(GP_INBOX_TENANT_INBOX, buf, sizeof(buf), (const char *const[]){"acme"});
    T_OKM(rc == GP_EOK && strcmp(buf, "gp.api.acme._reply") == 0,
          "a tenant's inbox prefix: inside gp.api.<tenant> (%s)", buf);
    rc = gp_op_inbox_prefix(GP_INBOX_TENANT_INBOX, buf, sizeof(buf),
                            (const char *const[]){"acme.>"});
    T_OKM(rc == GP_EINVAL, "a tenant id that would widen the subject is refused (%s)",
          gp_err_name(rc));
    rc = gp_op_inbox_prefix(GP_INBOX_NODE_INBOX, buf, 10, (const char *const[]){"s1", "n1"});
    T_OKM(rc == GP_ETOOBIG, "a buffer too small is TOOBIG (%s)", gp_err_name(rc));
    rc = gp_op_inbox_prefix(GP_OP_HEALTH, buf, sizeof(buf), (const char *const[]){"registry"});
    T_OKM(rc == GP_EINVAL, "an address that does not end in <nuid>.<n> is refused (%s)",
          gp_err_name(rc));
    rc = gp_op_stream_subject(GP_OP_JOB_EVENT, "job", buf, sizeof(buf));
    T_OKM(rc == GP_EOK && strcmp(buf, "gp.events.*.job.>") == 0,
          "the JOBS stream's subject: the job event's pattern cut at its job (%s)", buf);
    rc = gp_op_stream_subject(GP_OP_JOB_EVENT, "tenant", buf, sizeof(buf));
    T_OKM(rc == GP_EOK && strcmp(buf, "gp.events.>") == 0, "cut at the tenant (%s)", buf);
    rc = gp_op_stream_subject(GP_OP_JOB_EVENT, "nope", buf, sizeof(buf));
    T_OKM(rc == GP_EINVAL, "an unknown parameter is INVAL (%s)", gp_err_name(rc));
    rc = gp_op_stream_subject(GP_OP_JOB_EVENT, "job", buf, 12);
    T_OKM(rc == GP_ETOOBIG, "a buffer too small is TOOBIG (%s)", gp_err_name(rc));
    test_limit_by();
    rc = gp_op_stream_filter(GP_OP_JOB_EVENT, "job", (const char *const[]){"acme", NULL, NULL},
                             buf, sizeof(buf));
    T_OKM(rc == GP_EOK && strcmp(buf, "gp.events.acme.job.>") == 0,
          "a tenant's filter on JOBS: its events, every job (%s)", buf);
    rc = gp_op_stream_filter(GP_OP_JOB_EVENT, "job", (const char *const[]){"a.b", NULL, NULL},
                             buf, sizeof(buf));
    T_OKM(rc == GP_EINVAL, "a tenant that is no id (a dot) is INVAL (%s)", gp_err_name(rc));
    rc = gp_op_stream_filter(GP_OP_JOB_EVENT, "job", (const char *const[]){NULL, NULL, NULL},
                             buf, sizeof(buf));
    T_OKM(rc == GP_EOK && strcmp(buf, "gp.events.*.job.>") == 0,
          "no tenant: every tenant's (%s)", buf);
    return T_DONE();
}
