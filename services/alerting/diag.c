/* diag.c -- see diag.h.  The actions are written for the person who
 * reads the page at 3 a.m.: what to do first, and when to escalate. */
#include "diag.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/xid.h"

static void
set(al_diag *d, const char *cause, int dispatch, const char *action)
{
    snprintf(d->cause, sizeof(d->cause), "%s", cause);
    snprintf(d->action, sizeof(d->action), "%s", action);
    d->dispatch = dispatch;
}

void
al_diag_site(const msg_site_event *e, al_diag *d)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->evidence, sizeof(d->evidence), "%u of %u node(s) lost, %u rebooted, %u resumed: %s",
             e->lost, e->nodes, e->rebooted, e->resumed, e->evidence);
    switch (e->cause) {
    case MSG_SITE_EVENT_CAUSE_POWER:
        if (e->kind == MSG_SITE_EVENT_KIND_RETURNED)
            set(d, "power", MSG_ALERT_DISPATCH_UTILITY,
                "The site lost power (its nodes came back rebooted): ask the utility whether "
                "the area was cut, and the site partner to check the mains and the UPS");
        else
            set(d, "power", MSG_ALERT_DISPATCH_SITE_PARTNER,
                "The site's network is up but its nodes went down: ask the site partner to "
                "check the mains, the PDU and the breakers; call the utility if the area is out");
        break;
    case MSG_SITE_EVENT_CAUSE_UPLINK:
        set(d, "uplink", MSG_ALERT_DISPATCH_NETWORK_PROVIDER,
            "The site's uplink failed while its nodes kept running: call its network provider "
            "with the site's circuit id; the nodes need nothing");
        break;
    default:
        set(d, "power_or_uplink", MSG_ALERT_DISPATCH_SITE_PARTNER,
            "Ask the site partner whether the site has power: if it has, call its network "
            "provider; if not, the utility. Its jobs are moved elsewhere meanwhile");
        break;
    }
}

void
al_diag_isolation(const msg_control_plane_event *e, al_diag *d)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->evidence, sizeof(d->evidence), "%u of %u sites silent (threshold %u%%): %s",
             e->sites_silent, e->sites, e->threshold_pct, e->reason);
    set(d, "control_plane", MSG_ALERT_DISPATCH_PLATFORM_ONCALL,
        "Check the control plane's own NATS, Redis and uplink: so many sites at once is our "
        "fault, not theirs. Rescheduling is frozen until contact returns; send no one to sites");
}

/* "... XID 48 ..." in a quarantine reason -> 48, else -1 */
static int
reason_xid(const char *reason)
{
    const char *p = strstr(reason, "XID ");

    return p ? atoi(p + 4) : -1;
}

static void
diag_quarantine(const msg_node_state *e, al_diag *d)
{
    int                xid = reason_xid(e->reason);
    const gp_xid_info *x = xid >= 0 ? gp_xid_lookup(xid) : NULL;
    char               act[256];

    if (strstr(e->reason, "flapping") != NULL) {
        set(d, "flapping", MSG_ALERT_DISPATCH_FIELD_TECHNICIAN,
            "The node keeps dropping off and coming back: check its power supply, its network "
            "cable and port; release it (gpctl release node) once fixed");
    } else if (strstr(e->reason, "ECC") != NULL) {
        set(d, "gpu_ecc", MSG_ALERT_DISPATCH_FIELD_TECHNICIAN,
            "Uncorrectable ECC errors: the node takes no new work and its interruptible jobs "
            "were moved; reset the GPU, and replace it (RMA) if errors come back");
    } else if (x != NULL) {
        snprintf(act, sizeof(act), "XID %d (%s): %s; action: %s. The node takes no new work and "
                 "its interruptible jobs were moved", x->code, x->name, x->what,
                 gp_xid_action_name(x->action));
        set(d, "gpu_xid", x->action == GP_XID_APP || x->action == GP_XID_INFO
                              ? MSG_ALERT_DISPATCH_REMOTE_HANDS : MSG_ALERT_DISPATCH_FIELD_TECHNICIAN,
            act);
    } else if (strstr(e->reason, "GPU") != NULL) {
        set(d, "gpu_lost", MSG_ALERT_DISPATCH_FIELD_TECHNICIAN,
            "A GPU stopped answering: reboot the node; if the GPU is still missing, reseat it "
            "or replace it. The node takes no new work and its interruptible jobs were moved");
    } else {
        set(d, "quarantine", MSG_ALERT_DISPATCH_REMOTE_HANDS,
            "Quarantined by a rule: look at its reason, fix, then gpctl release node");
    }
}

void
al_diag_node(const msg_node_state *e, al_diag *d)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->evidence, sizeof(d->evidence), "%s -> %s: %s", msg_node_state_state_names[e->prev],
             msg_node_state_state_names[e->state], e->reason);
    switch (e->state) {
    case MSG_NODE_STATE_STATE_QUARANTINED:
        diag_quarantine(e, d);
        break;
    case MSG_NODE_STATE_STATE_LOST:
        set(d, "node_down", MSG_ALERT_DISPATCH_REMOTE_HANDS,
            "The node stopped answering while its site is up: power-cycle it through remote "
            "hands; send a field technician if it does not come back. Its jobs were moved");
        break;
    case MSG_NODE_STATE_STATE_SUSPECT:
        set(d, "node_slow", MSG_ALERT_DISPATCH_NONE,
            "Heartbeats are late: watch; it is declared lost if silence goes on");
        break;
    default:
        set(d, msg_node_state_state_names[e->state], MSG_ALERT_DISPATCH_NONE,
            "Set by an operator or a rule: nothing to send");
        break;
    }
}

void
al_diag_telemetry(al_signal s, const char *reason, al_diag *d)
{
    const gp_xid_info *x79 = gp_xid_lookup(79), *x48 = gp_xid_lookup(48);
    char               act[256];

    memset(d, 0, sizeof(*d));
    snprintf(d->evidence, sizeof(d->evidence), "%s", reason);
    switch (s) {
    case AL_SIG_GPU_STATE:
        snprintf(act, sizeof(act), "XID 79 (%s): %s. Reboot the node (remote hands); if the GPU "
                 "falls off again, reseat or replace it (a field technician)",
                 x79 ? x79->name : "?", x79 ? x79->what : "the GPU fell off the bus");
        set(d, "gpu_fallen_off_bus", MSG_ALERT_DISPATCH_REMOTE_HANDS, act);
        break;
    case AL_SIG_GPU_ECC_DBE:
        snprintf(act, sizeof(act), "Uncorrectable ECC errors (XID 48, %s): drain the node and "
                 "reset the GPU; if they come back, replace the GPU (RMA)",
                 x48 ? x48->name : "DBE");
        set(d, "gpu_ecc_uncorrectable", MSG_ALERT_DISPATCH_FIELD_TECHNICIAN, act);
        break;
    case AL_SIG_GPU_TEMP:
        set(d, "gpu_hot", MSG_ALERT_DISPATCH_REMOTE_HANDS,
            "Check the node's cooling: fans, filters, airflow; several nodes of a site hot at "
            "once means the site's cooling (HVAC), ask the site partner");
        break;
    case AL_SIG_GPU_THROTTLE:
        if (strstr(reason, "brake") != NULL || strstr(reason, "slowdown") != NULL)
            set(d, "gpu_power_brake", MSG_ALERT_DISPATCH_SITE_PARTNER,
                "The GPUs are braked for power: check the node's PSU and the PDU; across a "
                "site it is the site's power quality, ask the site partner");
        else
            set(d, "gpu_thermal_throttle", MSG_ALERT_DISPATCH_REMOTE_HANDS,
                "The GPUs slow down for heat: check fans, filters and airflow; across a site "
                "it is the site's cooling");
        break;
    case AL_SIG_NODE_DISK:
        set(d, "disk", MSG_ALERT_DISPATCH_FIELD_TECHNICIAN,
            "The node's disk reports SMART trouble: drain the node and replace the disk");
        break;
    case AL_SIG_NODE_RTT:
        set(d, "uplink_slow", MSG_ALERT_DISPATCH_NETWORK_PROVIDER,
            "The node's uplink is slow: if its whole site is, call the site's network "
            "provider; else check the node's cable and port");
        break;
    default:
        set(d, "telemetry", MSG_ALERT_DISPATCH_NONE, "See the evidence");
        break;
    }
}

void
al_diag_jobs(al_signal s, const char *evidence, al_diag *d)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->cause, sizeof(d->cause), "jobs_failing");
    snprintf(d->evidence, sizeof(d->evidence), "%s", evidence);
    if (s == AL_SIG_NODE_JOBS) {
        snprintf(d->action, sizeof(d->action),
                 "cordon the node and run its GPU diagnostics (the failed attempts' exit codes: "
                 "gpctl get jobs); a technician if they fail");
        d->dispatch = MSG_ALERT_DISPATCH_REMOTE_HANDS;
    } else if (s == AL_SIG_SITE_JOBS) {
        snprintf(d->action, sizeof(d->action),
                 "check what the site's nodes share (network, storage, power quality) with the "
                 "site partner");
        d->dispatch = MSG_ALERT_DISPATCH_SITE_PARTNER;
    } else {
        snprintf(d->action, sizeof(d->action),
                 "tell the customer: their attempts fail wherever they run (their code, image or "
                 "data), not one node or site");
        d->dispatch = MSG_ALERT_DISPATCH_NONE;
    }
}

void
al_diag_service(const char *evidence, al_diag *d)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->cause, sizeof(d->cause), "service_silent");
    snprintf(d->evidence, sizeof(d->evidence), "%s", evidence);
    snprintf(d->action, sizeof(d->action),
             "Check the instance's host or pod and restart it (kill -9, OOM, a hung loop?); the "
             "service's other instances take its work meanwhile, if it has any");
    d->dispatch = MSG_ALERT_DISPATCH_PLATFORM_ONCALL;
}

void
al_diag_stream(const char *evidence, bool discard_old, al_diag *d)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->cause, sizeof(d->cause), "stream_full");
    snprintf(d->evidence, sizeof(d->evidence), "%s", evidence);
    snprintf(d->action, sizeof(d->action), "%s",
             discard_old
                 ? "Raise its max_bytes (or stream-max-bytes-mb) within the servers' "
                   "max_file_store: when full it drops its oldest messages, read or not"
                 : "Raise its max_bytes (or stream-max-bytes-mb) within the servers' "
                   "max_file_store: when full it refuses new messages, which wait in their "
                   "publishers' outboxes (gp_bus_js_full_total counts the refusals)");
    d->dispatch = MSG_ALERT_DISPATCH_PLATFORM_ONCALL;
}

void
al_diag_usage_gap(const char *evidence, al_diag *d)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->cause, sizeof(d->cause), "metering_gap");
    snprintf(d->evidence, sizeof(d->evidence), "%s", evidence);
    snprintf(d->action, sizeof(d->action),
             "Find the missing records in metering's outbox (gp:{N}:m:recs) or review queue "
             "(gp:{N}:m:review) and its logs, and run gridpool-audit: the site's bills lack "
             "them until they are published");
    d->dispatch = MSG_ALERT_DISPATCH_PLATFORM_ONCALL;
}
