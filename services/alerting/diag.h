/* diag.h -- the diagnosis on every alert: the suspected cause, what the
 * evidence says, the recommended action and whom to send, from the
 * event that raised it and a fault catalog (gp/xid.h for GPU faults).
 *
 * Contract:
 *   - al_diag_site / _isolation / _node fill every field of d from the
 *     event; nothing else is read (pure, any thread).
 *   - A site unreachable for power_or_uplink names the site partner (who
 *     can tell power from uplink on the spot); power: the site partner,
 *     or the utility when the nodes came back rebooted; uplink: the
 *     network provider; isolation: our own on-call; a lost node of a
 *     site that is up: remote hands; a quarantined node: the catalog's
 *     action for its XID, a field technician for GPU and ECC faults and
 *     for flapping; a GPU fallen off the bus: a reboot by remote hands
 *     (XID 79 in the catalog), a technician if it repeats; uncorrectable
 *     ECC errors: drain and reset, RMA if they return; heat: cooling; a
 *     power brake: the site's power; a failing disk: a technician; a slow
 *     uplink: the network provider. */
#ifndef ALERTING_DIAG_H
#define ALERTING_DIAG_H

#include "msg_gen.h"
#include "rules.h"

typedef struct al_diag {
    char cause[64];
    char evidence[512];
    char action[256];
    int  dispatch;                /* MSG_ALERT_DISPATCH_* */
} al_diag;

void al_diag_site(const msg_site_event *e, al_diag *d);
void al_diag_isolation(const msg_control_plane_event *e, al_diag *d);
void al_diag_node(const msg_node_state *e, al_diag *d);
/* A telemetry signal of one heartbeat; reason: what it read (the summary's
 * {reason}, the evidence). */
void al_diag_telemetry(al_signal s, const char *reason, al_diag *d);
/* A job failure rate (node, site or tenant signal); evidence: the counts.
 * A node: remote hands (cordon, diagnostics); a site: the site partner
 * (what its nodes share); a tenant: nobody in the field, the customer. */
void al_diag_jobs(al_signal s, const char *evidence, al_diag *d);
/* A silent service instance: our own on-call (its host or pod). */
void al_diag_service(const char *evidence, al_diag *d);
/* Usage records of a site missing from the USAGE stream: our own on-call
 * (metering's outbox and review queue, then the bill). */
void al_diag_usage_gap(const char *evidence, al_diag *d);
/* A JetStream stream nearly full: our own on-call (the stream's limit,
 * the servers' store, or a consumer that stopped reading); discard_old:
 * it drops its oldest when full, else it refuses new messages. */
void al_diag_stream(const char *evidence, bool discard_old, al_diag *d);

#endif
