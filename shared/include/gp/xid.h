/* gp/xid.h -- NVIDIA XID codes: what each means for the GPU and what an
 * operator does about it (from NVIDIA's XID catalog).  The registry's quarantine rules count the XIDs that mean a
 * bad GPU; alerting will name the action and whom to send.
 *
 * Contract:
 *   - gp_xid_lookup(code): the catalog entry, or NULL for a code it lacks.
 *   - gp_xid_bad_gpu(code): true for codes whose immediate action is a GPU
 *     reset, a reboot, a drain or a technician (the GPU or its board is
 *     suspect); false for application faults (13, 31, 43...), information
 *     (63, 92, 154...) and codes the catalog lacks (an unknown code alone
 *     does not take a node out of service).
 * Pure, any thread. */
#ifndef GP_XID_H
#define GP_XID_H

#include <stdbool.h>

typedef enum gp_xid_action {
    GP_XID_APP,          /* restart the application: user code or a transient */
    GP_XID_INFO,         /* information: nothing now, reset at convenience */
    GP_XID_RESET,        /* drain the node and reset the GPU */
    GP_XID_REBOOT,       /* reboot the node (bare metal); reseat or RMA if it repeats */
    GP_XID_TECH,         /* send a technician (cabling, power, mechanics) */
    GP_XID_RMA,          /* drain; the GPU is an RMA candidate */
} gp_xid_action;

typedef struct gp_xid_info {
    int           code;
    const char   *name;      /* NVIDIA's mnemonic */
    gp_xid_action action;
    const char   *what;      /* one line for an operator */
} gp_xid_info;

const gp_xid_info *gp_xid_lookup(int code);
bool               gp_xid_bad_gpu(int code);
const char        *gp_xid_action_name(gp_xid_action a);

#endif
