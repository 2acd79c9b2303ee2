/* op_test.c -- gp_op_inbox_prefix: a client's reply inbox prefix
 * from the contract's inbox channels (the agent's and a tenant's); and
 * gp_op_stream_subject: a stream's subjects from an operation. */
#include <string.h>

#include "gp/limits.h"
#include "gp/op.h"
#include "msg_gen.h"
#include "test.h"

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
    return T_DONE();
}
