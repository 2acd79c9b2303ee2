/* cmd_fault.c -- gpctl fault: inject a fault into the fleet simulator
 * (gp.int.sim.fault), for demos and tests.  Every SimFault field is a
 * flag, parsed by the descriptor like create/update. */
#include <stdio.h>
#include <string.h>

#include "gp/limits.h"
#include "gpctl.h"

int
cmd_fault(gpctl *c, int argc, char **argv)
{
    msg_sim_fault     f = {0};
    msg_sim_fault_ack ack = {0};
    char              err[GP_ERRBUF_LEN], field[64];
    int               rc;

    if (argc < 1 || argv[0][0] == '-')
        return usage_error("fault", "missing KIND");
    if (gp_msg_set_text(&msg_sim_fault_desc, &f, "kind", argv[0], err, sizeof(err)) != GP_EOK)
        return usage_error("fault", "unknown fault kind \"%s\"", argv[0]);
    for (int i = 1; i < argc; i += 2) {
        if (strncmp(argv[i], "--", 2) != 0 || i + 1 >= argc)
            return usage_error("fault", "expected --FIELD VALUE at \"%s\"", argv[i]);
        snprintf(field, sizeof(field), "%s", argv[i] + 2);
        for (char *p = field; *p; p++)
            *p = *p == '-' ? '_' : *p;
        if (strcmp(field, "kind") == 0 ||
            gp_msg_set_text(&msg_sim_fault_desc, &f, field, argv[i + 1], err, sizeof(err)) != GP_EOK)
            return usage_error("fault", "%s %s: %s", argv[i], argv[i + 1],
                               strcmp(field, "kind") ? err : "give the kind first");
    }
    rc = ctl_connect(c);
    if (rc == GPCTL_OK)
        rc = ctl_call(c, GP_OP_SIM_FAULT->address, &msg_sim_fault_desc, &f, &msg_sim_fault_ack_desc,
                      &ack);
    if (rc == GPCTL_OK)
        printf("fault %s applied to %u node(s)\n", argv[0], ack.applied);
    gp_msg_clear(&msg_sim_fault_ack_desc, &ack);
    return rc;
}
