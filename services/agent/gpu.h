/* gpu.h -- the agent's view of a node's GPUs: inventory, telemetry and
 * (for the simulated backend) fault injection.
 *
 * Two backends: gpu_sim (deterministic from a seed, used by tests and the
 * fleet simulator) and gpu_nvml (libnvidia-ml.so.1 loaded at run time, so
 * the agent builds and runs on machines without a driver).  Loop thread
 * only; no global state (NVML's own init is reference counted). */
#ifndef GP_AGENT_GPU_H
#define GP_AGENT_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp/err.h"
#include "msg_gen.h"

/* GPUs per node: every message that lists them (NodeRegister, Heartbeat)
 * must hold them all. */
#define GPU_MAX         (MSG_HEARTBEAT_GPUS_MAXITEMS < MSG_NODE_REGISTER_GPUS_MAXITEMS ?      \
                         MSG_HEARTBEAT_GPUS_MAXITEMS : MSG_NODE_REGISTER_GPUS_MAXITEMS)
#define GPU_MAX_XIDS    MSG_GPU_TELEMETRY_XIDS_MAXITEMS     /* per GPU per heartbeat */

/* Throttle reasons, bit i = MSG_GPU_TELEMETRY_THROTTLE_* value i. */
#define GPU_THR_THERMAL        (1u << 0)
#define GPU_THR_POWER          (1u << 1)
#define GPU_THR_HW_SLOWDOWN    (1u << 2)
#define GPU_THR_SW_THERMAL     (1u << 3)
#define GPU_THR_HW_THERMAL     (1u << 4)
#define GPU_THR_HW_POWER_BRAKE (1u << 5)

typedef struct gpu_info {
    char     model[32];
    char     uuid[64];
    char     serial[32];
    uint32_t vram_mb;
    int      interconnect;          /* MSG_GPU_INTERCONNECT_* */
    int      minor;                 /* its device node: /dev/nvidia<minor> (char 195:minor) */
} gpu_info;

typedef struct gpu_sample {
    bool     lost;                  /* fell off the bus: other fields are 0 */
    double   temp_c;
    double   power_w;
    double   util_pct;
    uint32_t mem_used_mb;
    uint64_t ecc_sbe;               /* cumulative */
    uint64_t ecc_dbe;               /* cumulative */
    int32_t  xids[GPU_MAX_XIDS];    /* since the previous sample */
    int      nxids;
    unsigned throttle;              /* GPU_THR_* */
} gpu_sample;

typedef enum gpu_fault_kind {
    GPU_FAULT_XID,                  /* arg = XID code; 79 = fallen off the bus */
    GPU_FAULT_ECC,                  /* arg = correctable errors to add */
    GPU_FAULT_THERMAL,              /* duration_s of thermal throttling */
    GPU_FAULT_LOST                  /* the GPU stops answering for good */
} gpu_fault_kind;

typedef struct gpu_backend gpu_backend;

typedef struct gpu_ops {
    const char *name;
    int    (*count)(gpu_backend *b);
    gp_err (*info)(gpu_backend *b, int i, gpu_info *out);
    /* load 0..1 is what the agent runs on the GPU (the simulator follows
     * it; NVML ignores it); dt_s is the time since the previous sample. */
    gp_err (*sample)(gpu_backend *b, int i, double load, double dt_s, gpu_sample *out);
    gp_err (*inject)(gpu_backend *b, int i, gpu_fault_kind k, int64_t arg, double duration_s);
    void   (*destroy)(gpu_backend *b);
} gpu_ops;

struct gpu_backend {
    const gpu_ops *ops;
};

/* Models the simulator knows: "L4", "L40S", "RTX 4090", "A100-80G", "H100". */
int         gpu_sim_nmodels(void);
const char *gpu_sim_model_name(int i);
bool        gpu_sim_model_known(const char *model);
/* The model's nominal power at load 0..1 (no noise, no throttling): what
 * the simulator's ground truth integrates.  -1 for an unknown model. */
double      gpu_sim_model_power_w(const char *model, double load);

/* n simulated GPUs of one model, deterministic from seed.  NULL: bad args. */
gpu_backend *gpu_sim_new(const char *model, int n, uint64_t seed);

/* Opens NVML.  UNAVAIL (with why in err) when the library or a GPU is
 * missing. */
gp_err gpu_nvml_open(gpu_backend **out, char *err, size_t errlen);

static inline int    gpu_count(gpu_backend *b) { return b->ops->count(b); }
static inline gp_err gpu_info_get(gpu_backend *b, int i, gpu_info *o) { return b->ops->info(b, i, o); }
static inline gp_err gpu_sample_get(gpu_backend *b, int i, double load, double dt, gpu_sample *o)
{
    return b->ops->sample(b, i, load, dt, o);
}
static inline gp_err gpu_inject(gpu_backend *b, int i, gpu_fault_kind k, int64_t arg, double dur)
{
    return b->ops->inject(b, i, k, arg, dur);
}
static inline void gpu_free(gpu_backend *b)
{
    if (b != NULL)
        b->ops->destroy(b);
}

/* splitmix64: the one PRNG of the agent and the simulator (deterministic,
 * cheap, good enough for noise and fleet shapes). */
static inline uint64_t
gp_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double
gp_rng_unit(uint64_t *s)
{
    return (double)(gp_rng_next(s) >> 11) / 9007199254740992.0;
}

#endif
