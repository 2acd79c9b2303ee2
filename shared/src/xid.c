/* xid.c -- see gp/xid.h.  Codes and actions from NVIDIA's XID catalog. */
#include "gp/xid.h"

#include <stddef.h>

static const gp_xid_info catalog[] = {
    {8, "IDLE_TIMEOUT", GP_XID_APP, "GPU stopped processing: restart the application"},
    {13, "GR_EXCEPTION", GP_XID_APP, "graphics engine exception: restart the application"},
    {31, "MMU_FAULT", GP_XID_APP, "GPU memory page fault, usually the user's code"},
    {32, "PBDMA", GP_XID_APP, "corrupted push buffer: check the application and CUDA"},
    {43, "RESETCHANNEL_VERIF", GP_XID_APP, "GPU stopped processing: restart the application"},
    {45, "PREEMPTIVE_REMOVAL", GP_XID_APP, "cleanup after earlier errors: follow the other XID"},
    {46, "GPU_TIMEOUT", GP_XID_RESET, "GPU stopped processing: drain and reset the GPU"},
    {48, "GPU_ECC_DBE", GP_XID_RESET, "double-bit ECC error: drain and reset; RMA if it repeats"},
    {54, "AUX_POWER", GP_XID_TECH, "auxiliary power not connected: send a technician (cabling)"},
    {62, "PMU_HALT", GP_XID_RESET, "internal micro-controller halt: drain and reset the GPU"},
    {63, "DRAM_RETIREMENT", GP_XID_INFO, "memory row retired or remapped: reset at convenience"},
    {64, "DRAM_RETIREMENT_FAILURE", GP_XID_RMA, "row remap failed: drain; RMA candidate"},
    {74, "NVLINK_ERROR", GP_XID_RESET, "NVLink error: drain and reset"},
    {79, "FALLEN_OFF_BUS", GP_XID_REBOOT, "GPU fell off the bus: reboot the node; reseat or RMA if "
                                          "it repeats"},
    {92, "EXCESSIVE_SBE", GP_XID_INFO, "excessive single-bit ECC interrupts: watch the trend"},
    {94, "CONTAINED_ECC", GP_XID_APP, "contained memory error: restart the application"},
    {95, "UNCONTAINED_ECC", GP_XID_RESET, "uncontained memory error: drain and reset the GPU"},
    {109, "CTXSW_TIMEOUT", GP_XID_RESET, "context switch timeout: drain and reset the GPU"},
    {110, "SECURITY_FAULT", GP_XID_RESET, "security fault: drain and reset the GPU"},
    {119, "GSP_RPC_TIMEOUT", GP_XID_RESET, "GSP RPC timeout (driver, firmware): drain and reset"},
    {120, "GSP_ERROR", GP_XID_RESET, "GSP error (driver, firmware): drain and reset"},
    {136, "ALI_LINK_TRAINING", GP_XID_RESET, "link training failed: drain and reset"},
    {140, "ECC_ESCAPE", GP_XID_RESET, "unrecoverable ECC error escaped: drain and reset"},
    {143, "GPU_INIT_ERROR", GP_XID_RESET, "GPU initialization error: drain and reset"},
    {154, "RECOVERY_ACTION_CHANGED", GP_XID_INFO, "the driver's recovery action changed: read it"},
    {155, "NVLINK_SW", GP_XID_RESET, "NVLink software-defined error: drain and reset"},
    {156, "RESOURCE_RETIREMENT", GP_XID_INFO, "resource retired: reset at convenience"},
    {157, "RESOURCE_RETIREMENT_FAILURE", GP_XID_RMA, "resource retirement failed: RMA candidate"},
    {158, "GPU_FATAL_TIMEOUT", GP_XID_RESET, "GPU fatal timeout: drain and reset"},
};

const gp_xid_info *
gp_xid_lookup(int code)
{
    for (size_t i = 0; i < sizeof(catalog) / sizeof(catalog[0]); i++)
        if (catalog[i].code == code)
            return &catalog[i];
    return NULL;
}

bool
gp_xid_bad_gpu(int code)
{
    const gp_xid_info *x = gp_xid_lookup(code);

    return x != NULL && x->action != GP_XID_APP && x->action != GP_XID_INFO;
}

const char *
gp_xid_action_name(gp_xid_action a)
{
    switch (a) {
    case GP_XID_APP:    return "restart the application";
    case GP_XID_INFO:   return "none now (reset at convenience)";
    case GP_XID_RESET:  return "drain and reset the GPU";
    case GP_XID_REBOOT: return "reboot the node";
    case GP_XID_TECH:   return "send a technician";
    case GP_XID_RMA:    return "drain; RMA candidate";
    }
    return "?";
}
