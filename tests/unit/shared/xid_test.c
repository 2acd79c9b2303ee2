/* xid_test.c -- gp/xid.h: the catalog answers for the codes the quarantine
 * and the alerts depend on, and only bad-GPU classes count as bad. */
#include <string.h>

#include "gp/xid.h"
#include "test.h"

int
main(void)
{
    const gp_xid_info *x = gp_xid_lookup(79);

    T_OKM(x != NULL && x->action == GP_XID_REBOOT && strcmp(x->name, "FALLEN_OFF_BUS") == 0,
          "79: fallen off the bus, reboot the node");
    T_OK(gp_xid_bad_gpu(79));
    T_OKM(gp_xid_bad_gpu(48) && gp_xid_lookup(48)->action == GP_XID_RESET, "48: DBE, reset");
    T_OKM(gp_xid_bad_gpu(64) && gp_xid_lookup(64)->action == GP_XID_RMA, "64: remap failure, RMA");
    T_OKM(gp_xid_bad_gpu(54) && gp_xid_lookup(54)->action == GP_XID_TECH, "54: a technician");
    T_OKM(!gp_xid_bad_gpu(13) && !gp_xid_bad_gpu(31) && !gp_xid_bad_gpu(43) && !gp_xid_bad_gpu(94),
          "application XIDs (13, 31, 43, 94) are not a bad GPU");
    T_OKM(!gp_xid_bad_gpu(63) && !gp_xid_bad_gpu(92) && !gp_xid_bad_gpu(154),
          "information XIDs (63, 92, 154) are not a bad GPU");
    T_OKM(gp_xid_lookup(9999) == NULL && !gp_xid_bad_gpu(9999) && !gp_xid_bad_gpu(-1),
          "an unknown code is not in the catalog and not bad by itself");
    for (int c = 0; c < 200; c++) {
        const gp_xid_info *e = gp_xid_lookup(c);

        if (e != NULL && (e->code != c || e->name[0] == '\0' || e->what[0] == '\0')) {
            T_OKM(0, "catalog entry %d is complete", c);
            break;
        }
    }
    T_OK(strcmp(gp_xid_action_name(GP_XID_REBOOT), "reboot the node") == 0);
    return T_DONE();
}
