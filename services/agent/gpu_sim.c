/* gpu_sim.c -- simulated GPUs for tests and the fleet simulator.
 *
 * Temperature approaches a load-dependent target with a first-order lag
 * (a heatsink does not jump), power and utilization follow load at once;
 * all three get small noise.  Everything comes from one seeded PRNG and
 * the dt the caller passes, never from the clock, so the same seed and
 * the same calls give the same numbers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "msg_gen.h"

typedef struct sim_model {
    const char *name;
    uint32_t    vram_mb;
    double      idle_w, tdp_w;
    double      idle_c, hot_c;        /* steady temperature at load 0 and 1 */
    int         interconnect;
} sim_model;

static const sim_model models[] = {
    {"L4", 23034, 16, 72, 32, 70, MSG_GPU_INTERCONNECT_PCIE},
    {"L40S", 46068, 35, 350, 30, 76, MSG_GPU_INTERCONNECT_PCIE},
    {"RTX 4090", 24564, 25, 450, 30, 72, MSG_GPU_INTERCONNECT_PCIE},
    {"A100-80G", 81920, 60, 400, 33, 68, MSG_GPU_INTERCONNECT_SXM},
    {"H100", 81559, 70, 700, 32, 72, MSG_GPU_INTERCONNECT_SXM},
};

#define TEMP_TAU_S      20.0     /* thermal time constant */
#define THROTTLE_C      91.0     /* where a throttled GPU sits */

typedef struct sim_gpu {
    double   temp_c;
    uint64_t sbe, dbe;
    int32_t  xids[GPU_MAX_XIDS];
    int      nxids;
    double   throttle_left_s;
    bool     lost;
    char     uuid[64];
    char     serial[32];
} sim_gpu;

typedef struct gpu_sim {
    gpu_backend      base;
    const sim_model *m;
    uint64_t         rng;
    int              n;
    sim_gpu          g[GPU_MAX];
} gpu_sim;

int gpu_sim_nmodels(void) { return (int)(sizeof(models) / sizeof(models[0])); }
const char *gpu_sim_model_name(int i) { return models[i].name; }

static const sim_model *
find_model(const char *name)
{
    for (int i = 0; i < gpu_sim_nmodels(); i++)
        if (strcmp(models[i].name, name) == 0)
            return &models[i];
    return NULL;
}

bool gpu_sim_model_known(const char *model) { return find_model(model) != NULL; }

double
gpu_sim_model_power_w(const char *model, double load)
{
    const sim_model *m = find_model(model);

    if (m == NULL)
        return -1;
    load = load < 0 ? 0 : load > 1 ? 1 : load;
    return m->idle_w + (m->tdp_w - m->idle_w) * load;     /* what sim_sample draws, noise aside */
}

static int
sim_count(gpu_backend *b)
{
    return ((gpu_sim *)b)->n;
}

static gp_err
sim_info(gpu_backend *b, int i, gpu_info *o)
{
    gpu_sim *s = (gpu_sim *)b;

    if (i < 0 || i >= s->n)
        return GP_ERANGE;
    memset(o, 0, sizeof(*o));
    snprintf(o->model, sizeof(o->model), "%s", s->m->name);
    snprintf(o->uuid, sizeof(o->uuid), "%s", s->g[i].uuid);
    snprintf(o->serial, sizeof(o->serial), "%s", s->g[i].serial);
    o->vram_mb = s->m->vram_mb;
    o->interconnect = s->m->interconnect;
    o->minor = i;                     /* as the driver numbers a box's GPUs */
    return GP_EOK;
}

/* Symmetric noise in [-amp, amp]. */
static double
noise(gpu_sim *s, double amp)
{
    return (gp_rng_unit(&s->rng) * 2.0 - 1.0) * amp;
}

static double
clampd(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static gp_err
sim_sample(gpu_backend *b, int i, double load, double dt_s, gpu_sample *o)
{
    gpu_sim *s = (gpu_sim *)b;
    sim_gpu *g;
    double   target;

    if (i < 0 || i >= s->n)
        return GP_ERANGE;
    g = &s->g[i];
    memset(o, 0, sizeof(*o));
    o->lost = g->lost;
    o->nxids = g->nxids;
    memcpy(o->xids, g->xids, sizeof(o->xids));
    g->nxids = 0;
    if (g->lost)
        return GP_EOK;
    load = clampd(load, 0, 1);
    target = s->m->idle_c + (s->m->hot_c - s->m->idle_c) * load;
    if (g->throttle_left_s > 0) {
        target = THROTTLE_C;
        g->throttle_left_s -= dt_s;
        o->throttle = GPU_THR_THERMAL | GPU_THR_HW_THERMAL;
    }
    g->temp_c += (target - g->temp_c) * (1.0 - exp(-clampd(dt_s, 0, 3600) / TEMP_TAU_S));
    o->temp_c = clampd(g->temp_c + noise(s, 0.5), -50, 200);
    o->util_pct = clampd(load * 100.0 + (load > 0 ? noise(s, 3.0) : 0), 0, 100);
    /* A throttled GPU is clocked down: it draws less than its load asks. */
    o->power_w = s->m->idle_w + (s->m->tdp_w - s->m->idle_w) * load *
                 (o->throttle ? 0.6 : 1.0);
    o->power_w = clampd(o->power_w * (1.0 + noise(s, 0.02)), 0, 5000);
    o->mem_used_mb = (uint32_t)(s->m->vram_mb * 0.85 * load) + (load > 0 ? 400 : 0);
    o->ecc_sbe = g->sbe;
    o->ecc_dbe = g->dbe;
    return GP_EOK;
}

static gp_err
sim_inject(gpu_backend *b, int i, gpu_fault_kind k, int64_t arg, double duration_s)
{
    gpu_sim *s = (gpu_sim *)b;
    sim_gpu *g;

    if (i < 0 || i >= s->n)
        return GP_ENOTFOUND;
    g = &s->g[i];
    switch (k) {
    case GPU_FAULT_XID:
        if (g->nxids < GPU_MAX_XIDS)
            g->xids[g->nxids++] = (int32_t)arg;
        if (arg == 79)          /* "GPU has fallen off the bus" */
            g->lost = true;
        return GP_EOK;
    case GPU_FAULT_ECC:
        g->sbe += (uint64_t)(arg > 0 ? arg : 0);
        g->dbe += (uint64_t)(arg > 0 ? arg : 0) / 100;
        return GP_EOK;
    case GPU_FAULT_THERMAL:
        g->throttle_left_s = duration_s > 0 ? duration_s : 60;
        return GP_EOK;
    case GPU_FAULT_LOST:
        g->lost = true;
        return GP_EOK;
    }
    return GP_EINVAL;
}

static void
sim_destroy(gpu_backend *b)
{
    free(b);
}

static const gpu_ops sim_ops = {"sim", sim_count, sim_info, sim_sample, sim_inject, sim_destroy};

gpu_backend *
gpu_sim_new(const char *model, int n, uint64_t seed)
{
    const sim_model *m = find_model(model);
    gpu_sim         *s;
    uint64_t         id;

    if (m == NULL || n < 0 || n > GPU_MAX || (s = calloc(1, sizeof(*s))) == NULL)
        return NULL;
    s->base.ops = &sim_ops;
    s->m = m;
    s->n = n;
    s->rng = seed;
    for (int i = 0; i < n; i++) {
        sim_gpu *g = &s->g[i];

        id = gp_rng_next(&s->rng);
        snprintf(g->uuid, sizeof(g->uuid), "GPU-%08x-%04x-%04x-%04x-%012llx",
                 (unsigned)(id >> 32), (unsigned)(id >> 16) & 0xffff, (unsigned)id & 0xffff,
                 (unsigned)i, (unsigned long long)(gp_rng_next(&s->rng) & 0xffffffffffffull));
        snprintf(g->serial, sizeof(g->serial), "SIM%013llu",
                 (unsigned long long)(gp_rng_next(&s->rng) % 10000000000000ull));
        g->temp_c = m->idle_c + noise(s, 2.0);
    }
    return &s->base;
}
