/* ctrnet.h -- a container attempt's network: a namespace of its own with
 * one routed veth (the CNI ptp plugin from Debian's containernetworking-
 * plugins, addresses from host-local, masquerade to the internet), and the
 * node's firewall rules that keep containers off the management plane.
 *
 * The rules (iptables chains GP-IN-<net> and GP-FWD-<net>, installed once at
 * the agent's start, jumped to first from INPUT and FORWARD):
 *   - nothing from a container reaches the node itself (INPUT: the agent,
 *     the leaf's port, sshd, any service of the node's);
 *   - nothing reaches another container (FORWARD to the containers' net);
 *   - nothing reaches private, link-local (cloud metadata), CGNAT, loopback
 *     or multicast addresses, so not the site's LAN, its gateway or its
 *     leaf (container-allow-nets opens what a site allows);
 *   - the rest (the internet) is forwarded and masqueraded.
 * Replies to a container's own connections come back, and so do its
 * replies to connections the node opened to it (conntrack).
 *
 * An attempt's named ports (an instance's ssh, http...) are host ports
 * on the node's address, mapped to the container by the CNI portmap
 * plugin chained after ptp (DNAT from outside and from the node itself;
 * "snat" so the node's own connections come back): the one way in from
 * outside.  A connection forwarded to a mapped port is accepted (conntrack
 * state DNAT) unless it came in on a container's veth: another container
 * cannot reach it (its packets go to its own GP-FWD-<net>, which drops the
 * containers' nets, whatever order agents' rules were inserted in). */
#ifndef GP_AGENT_CTRNET_H
#define GP_AGENT_CTRNET_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>

#include "proc.h"

typedef struct ctrnet_cfg {
    const char *cidr;          /* the containers' net, e.g. 10.89.0.0/16; "" = no network */
    const char *allow;         /* comma list of CIDRs the containers may reach anyway */
    const char *cni_path;      /* the CNI plugins' folder (/usr/lib/cni) */
    const char *state_dir;     /* <state>/cni: host-local's leases, the plugin configs */
} ctrnet_cfg;

/* Installs the firewall rules (at start, before the loop runs: iptables
 * is run and waited for), after taking down the networks a previous run
 * of the agent left (it crashed, or its node lost power: their plugin
 * configs are still in state_dir).  false with why. */
bool ctrnet_init(const ctrnet_cfg *c, char *why, size_t wn);
/* Takes down, and waits for, the network of an attempt the agent leaves
 * behind at its stop. */
void ctrnet_down_sync(const ctrnet_cfg *c, const char *id);
/* Removes them (the agent's stop: its containers are gone). */
void ctrnet_fini(const ctrnet_cfg *c);
/* The namespace's path for config.json: /run/netns/<id>. */
void ctrnet_path(const char *id, char *out, size_t n);
/* A port mapping: host port on the node -> the container's port. */
#define CTRNET_MAX_PORTS 8
typedef struct ctrnet_port {
    unsigned host, ctr;
    char     proto[4];           /* tcp, udp */
} ctrnet_port;

/* Makes the namespace and its veth (ip netns add, then the ptp plugin's
 * ADD, then portmap's ADD when there are ports); cb with status 0 once it
 * is up, else the tool's last words (take it down: a part may be up). */
typedef struct net_step ctrnet_op;
gp_err ctrnet_up(const ctrnet_cfg *c, struct ev_loop *loop, const char *id,
                 const ctrnet_port *ports, int nports, proc_done_fn *cb, void *arg,
                 ctrnet_op **op);
/* The attempt went away while its network was being made: no callback;
 * what gets made is taken down again.  NULL ok. */
void   ctrnet_forget(ctrnet_op *op);
/* Takes it down (portmap's DEL when it mapped ports, the ptp plugin's
 * DEL, then ip netns delete); nobody waits. */
void ctrnet_down(const ctrnet_cfg *c, struct ev_loop *loop, const char *id);

#endif
