/* sim.h -- gridpool-sim: a deterministic fleet of simulated nodes, each
 * running the real agent code, in one process on one loop and one bus. */
#ifndef GP_SIM_H
#define GP_SIM_H

#include <ev.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>

#include "../agent/agent.h"
#include "gp/app.h"
#include "msg_gen.h"

#define SIM_NREGIONS   8
#define SIM_NPARTNERS  4

typedef struct sim_region {
    const char *id;
    const char *city;
    double      lat, lon;
    int         tz_min;
    const char *currency;
    int64_t     price_micros_kwh;      /* day rate */
} sim_region;

typedef struct sim_site {
    char     id[16];
    char     tenant[32];
    int      region;
    bool     hub;
    int      first_node, nnodes;
    int      gpus;
    double   lat, lon;
    int      pue_milli, latency_tier, rtt_ms;
} sim_site;

typedef struct sim_node {
    char         id[40];
    int          site;
    const char  *model;
    int          ngpus;
    uint64_t     seed;
    gpu_backend *gpu;
    agent       *ag;                   /* NULL while crashed / powered off */
    gp_binding  *cmds;                 /* its command routes; NULL while down */
    bool         ever_registered;
    unsigned     delay_ms, jitter_ms;
    bool         flap_down;
    bool         replies_lost;         /* reply_lost: commands run, their answers dropped */
    ev_timer     flap;
} sim_node;

typedef struct sim_pool {
    char id[48];
    char tenant[32];
    int  scope;                        /* MSG_POOL_SCOPE_* */
    int  region;                       /* scope region */
    int  site;                         /* scope site */
    int  gpus;
    unsigned models;                   /* bit per gpu_sim model present */
} sim_pool;

typedef struct fleet {
    uint64_t  seed;
    sim_site *sites;
    int       nsites;
    sim_node *nodes;
    int       nnodes;
    int       ngpus;
    sim_pool *pools;
    int       npools;
    int      *by_id;                   /* node indexes sorted by id */
} fleet;

extern const sim_region sim_regions[SIM_NREGIONS];
extern const char *const sim_partner_ids[SIM_NPARTNERS];
#define SIM_OPERATOR "op"

/* Builds the fleet's shape (no agents yet); deterministic from seed. */
int   fleet_build(fleet *f, int nsites, uint64_t seed);
void  fleet_free(fleet *f);
int   fleet_find_node(const fleet *f, const char *id);     /* -1 if none */
int   fleet_find_site(const fleet *f, const char *id);     /* -1 if none */
int   fleet_write_inventory(const fleet *f, const char *path);
/* Admin API messages, for entity i of each kind. */
int   fleet_ntenants(void);
void  fleet_tenant(int i, msg_tenant *out);
void  fleet_site(const fleet *f, int i, msg_site *out, msg_power_price *steps);
void  fleet_pool(const fleet *f, int i, msg_pool *out);
int   fleet_nproducts(const fleet *f);
void  fleet_product(const fleet *f, int i, msg_product *out);

/* ---- the running simulator ------------------------------------------- */

typedef struct sim_undo sim_undo;

typedef struct sim {
    gp_app         *app;
    struct ev_loop *loop;
    gp_bus         *bus;
    fleet           f;
    unsigned        heartbeat_ms;
    double          spread_s;
    double          t_start, t_agents;   /* gp_mono_s */
    int             nregistered;
    bool            summary_done;
    sim_undo       *undos;
    struct sim_script *script;
    FILE           *truth;             /* --truth: one JSON line per ended attempt */
    unsigned        truth_lines;
    bool            stopping;          /* the simulator stops: running attempts end "sim_stop" */
} sim;

void sim_node_up(sim *s, int i, double delay_s);
void sim_node_down(sim *s, int i);
/* Binds (up) or unbinds the node's command routes: a node that is down has
 * no subscription (a cut uplink or a hang keeps it: requests time out). */
void sim_node_link(sim *s, int i, bool up);

/* truth.c: the ground truth of delivered GPU time and energy, from the
 * simulator's own model (see truth.c for the line format). */
int  truth_open(sim *s, const char *path);
void truth_on_end(void *arg, agent *a, const agent_attempt_end *e);
void truth_close(sim *s);

/* faults.c */
typedef struct sim_script sim_script;
/* Parses a fault script; NULL with why in err. */
sim_script *faults_load(const char *path, char *err, size_t errlen);
/* Schedules its faults relative to now. */
void        faults_start(sim *s, sim_script *sc);
void        faults_free(sim *s);
/* Applies one fault now; returns OK with *applied, or NOTFOUND/INVAL. */
gp_err      fault_apply(sim *s, const msg_sim_fault *f, uint32_t *applied, char *detail,
                        size_t dlen);

#endif
