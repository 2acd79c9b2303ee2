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

/* ---- the simulator's options (config.c) --------------------------------- */

typedef struct sim_cfg {
    gp_common_cfg common;
    unsigned      sites;
    unsigned      seed;
    char          faults[512];
    char          inventory_out[512];
    unsigned      heartbeat_ms;
    unsigned      spread_ms;
    bool          admin;
    unsigned      admin_window;
    unsigned      admin_wait_ms;
    bool          dry_run;
    char          truth[512];
    char          workload[512];
    bool          no_fleet;
    bool          hub_pools;
    bool          admin_only;
} sim_cfg;

extern const gp_cfg_opt sim_cfg_opts[];

/* ---- the running simulator ------------------------------------------- */

typedef struct sim_undo sim_undo;
typedef struct sim_admin sim_admin;
struct workload;
struct wl_run;

typedef struct sim {
    const sim_cfg  *cfg;
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
    sim_admin      *admin;             /* the admin phase (admin.c) */
    struct workload *wl;               /* --workload, else NULL */
    struct wl_run  *wl_run;            /* the workload being submitted */
} sim;

/* start.c: gp_app_main's hooks (state: a sim).  prepare opens the fault
 * script, the workload and the truth file, builds and prints the fleet
 * (and writes it with --inventory-out): exit 78 for a bad file, 1 when
 * the fleet cannot be built or written, 0 after --dry-run.  start runs
 * the admin phase, then the agents and the workload; stop takes every
 * node down. */
int    sim_prepare(void *cfg, void *state);
gp_err sim_init(gp_app *app, const void *cfg, void *state);
void   sim_start(gp_app *app, void *state);
void   sim_stop(gp_app *app, void *state);
void   sim_free(void *state);

/* nodes.c: the simulated nodes, each the agent's own code. */
void   sim_node_up(sim *s, int i, double delay_s);
void   sim_node_down(sim *s, int i);
/* Binds (up) or unbinds the node's command routes: a node that is down has
 * no subscription (a cut uplink or a hang keeps it: requests time out). */
void   sim_node_link(sim *s, int i, bool up);
gp_err sim_nodes_declare(gp_app *app);
/* Every node's GPUs made, and its agent started within spread_s. */
void   sim_nodes_start(sim *s);
void   sim_nodes_down(sim *s);
/* The GPUs (after the agents are gone). */
void   sim_nodes_free(sim *s);

/* admin.c: the registry learns the fleet (when create; else nothing is
 * sent), a window of requests at once, waiting up to wait_ms for a
 * registry that is not up yet; then done(s), once.  new makes s->admin. */
typedef void sim_admin_done(sim *s);
gp_err sim_admin_new(sim *s);
void   sim_admin_start(sim *s, bool create, unsigned window, unsigned wait_ms,
                       sim_admin_done *done);
void   sim_admin_free(sim *s);

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
/* gp.int.sim.fault: fault_apply on request (state: the sim). */
extern const gp_route sim_fault_routes[];

#endif
