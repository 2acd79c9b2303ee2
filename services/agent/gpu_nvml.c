/* gpu_nvml.c -- real GPUs through NVML, loaded at run time.
 *
 * dlopen("libnvidia-ml.so.1") so the agent needs no driver to build or to
 * run with the simulated backend.  The few NVML types and prototypes used
 * are declared here (stable C ABI since NVML 2.x) instead of needing nvml.h.
 * XIDs come from an NVML event set polled with timeout 0 at each sample,
 * so the loop never blocks. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "msg_gen.h"

typedef int                 nvmlReturn_t;     /* 0 = NVML_SUCCESS */
typedef struct nvmlDevice  *nvmlDevice_t;
typedef struct nvmlEventSet *nvmlEventSet_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct {
    nvmlDevice_t       device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int       gpuInstanceId;
    unsigned int       computeInstanceId;
} nvmlEventData_t;

#define NVML_SUCCESS                   0
#define NVML_ERROR_TIMEOUT             10
#define NVML_ERROR_GPU_IS_LOST         15
#define NVML_TEMPERATURE_GPU           0
#define NVML_MEMORY_ERROR_CORRECTED    0
#define NVML_MEMORY_ERROR_UNCORRECTED  1
#define NVML_AGGREGATE_ECC             1
#define NVML_EVENT_XID                 0x8ull
/* nvmlClocksThrottleReasons* bits */
#define NV_THR_SW_POWER_CAP            0x4ull
#define NV_THR_HW_SLOWDOWN             0x8ull
#define NV_THR_SW_THERMAL              0x20ull
#define NV_THR_HW_THERMAL              0x40ull
#define NV_THR_HW_POWER_BRAKE          0x80ull

typedef struct nvml_fns {
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    nvmlReturn_t (*count)(unsigned int *);
    nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*serial)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*mem)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*temp)(nvmlDevice_t, int, unsigned int *);
    nvmlReturn_t (*power)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*util)(nvmlDevice_t, nvmlUtilization_t *);
    nvmlReturn_t (*ecc)(nvmlDevice_t, int, int, unsigned long long *);
    nvmlReturn_t (*throttle)(nvmlDevice_t, unsigned long long *);
    nvmlReturn_t (*evset_create)(nvmlEventSet_t *);
    nvmlReturn_t (*evset_free)(nvmlEventSet_t);
    nvmlReturn_t (*register_events)(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
    nvmlReturn_t (*evset_wait)(nvmlEventSet_t, nvmlEventData_t *, unsigned int);
    nvmlReturn_t (*minor)(nvmlDevice_t, unsigned int *);
} nvml_fns;

typedef struct gpu_nvml {
    gpu_backend    base;
    void          *dl;
    nvml_fns       f;
    int            n;
    nvmlDevice_t   dev[GPU_MAX];
    nvmlEventSet_t evset;              /* NULL when events are unsupported */
    int32_t        xids[GPU_MAX][GPU_MAX_XIDS];
    int            nxids[GPU_MAX];
} gpu_nvml;

static int
nv_count(gpu_backend *b)
{
    return ((gpu_nvml *)b)->n;
}

static gp_err
nv_info(gpu_backend *b, int i, gpu_info *o)
{
    gpu_nvml    *v = (gpu_nvml *)b;
    nvmlMemory_t m = {0};
    unsigned int minor = 0;

    if (i < 0 || i >= v->n)
        return GP_ERANGE;
    memset(o, 0, sizeof(*o));
    /* NVML says "NVIDIA H100 80GB HBM3"; keep it, the registry maps names. */
    if (v->f.name(v->dev[i], o->model, sizeof(o->model)) != NVML_SUCCESS)
        snprintf(o->model, sizeof(o->model), "unknown");
    v->f.uuid(v->dev[i], o->uuid, sizeof(o->uuid));
    v->f.serial(v->dev[i], o->serial, sizeof(o->serial));
    if (v->f.mem(v->dev[i], &m) == NVML_SUCCESS)
        o->vram_mb = (uint32_t)(m.total >> 20);
    o->interconnect = MSG_GPU_INTERCONNECT_PCIE;
    /* the container gets /dev/nvidia<minor>: NVML's index is not the node's */
    o->minor = v->f.minor(v->dev[i], &minor) == NVML_SUCCESS ? (int)minor : i;
    return GP_EOK;
}

/* Drains pending XID events into the per-GPU lists (timeout 0: no wait). */
static void
nv_poll_xids(gpu_nvml *v)
{
    nvmlEventData_t ev;

    if (v->evset == NULL)
        return;
    for (int k = 0; k < 64; k++) {
        memset(&ev, 0, sizeof(ev));
        if (v->f.evset_wait(v->evset, &ev, 0) != NVML_SUCCESS)
            return;
        for (int i = 0; i < v->n; i++)
            if (v->dev[i] == ev.device && v->nxids[i] < GPU_MAX_XIDS)
                v->xids[i][v->nxids[i]++] = (int32_t)ev.eventData;
    }
}

static unsigned
map_throttle(unsigned long long r)
{
    unsigned t = 0;

    if (r & NV_THR_SW_POWER_CAP)
        t |= GPU_THR_POWER;
    if (r & NV_THR_HW_SLOWDOWN)
        t |= GPU_THR_HW_SLOWDOWN;
    if (r & NV_THR_SW_THERMAL)
        t |= GPU_THR_SW_THERMAL | GPU_THR_THERMAL;
    if (r & NV_THR_HW_THERMAL)
        t |= GPU_THR_HW_THERMAL | GPU_THR_THERMAL;
    if (r & NV_THR_HW_POWER_BRAKE)
        t |= GPU_THR_HW_POWER_BRAKE;
    return t;
}

static gp_err
nv_sample(gpu_backend *b, int i, double load, double dt_s, gpu_sample *o)
{
    gpu_nvml          *v = (gpu_nvml *)b;
    unsigned int       temp = 0, mw = 0;
    nvmlUtilization_t  u = {0};
    nvmlMemory_t       m = {0};
    unsigned long long thr = 0, sbe = 0, dbe = 0;
    nvmlReturn_t       r;

    (void)load;
    (void)dt_s;
    if (i < 0 || i >= v->n)
        return GP_ERANGE;
    memset(o, 0, sizeof(*o));
    if (i == 0)
        nv_poll_xids(v);
    memcpy(o->xids, v->xids[i], sizeof(o->xids));
    o->nxids = v->nxids[i];
    v->nxids[i] = 0;
    r = v->f.temp(v->dev[i], NVML_TEMPERATURE_GPU, &temp);
    if (r == NVML_ERROR_GPU_IS_LOST) {
        o->lost = true;
        return GP_EOK;
    }
    v->f.power(v->dev[i], &mw);
    v->f.util(v->dev[i], &u);
    v->f.mem(v->dev[i], &m);
    v->f.throttle(v->dev[i], &thr);
    /* ECC is unsupported on consumer boards: the counters stay 0. */
    v->f.ecc(v->dev[i], NVML_MEMORY_ERROR_CORRECTED, NVML_AGGREGATE_ECC, &sbe);
    v->f.ecc(v->dev[i], NVML_MEMORY_ERROR_UNCORRECTED, NVML_AGGREGATE_ECC, &dbe);
    o->temp_c = temp;
    o->power_w = mw / 1000.0;
    o->util_pct = u.gpu > 100 ? 100 : u.gpu;
    o->mem_used_mb = (uint32_t)(m.used >> 20);
    o->ecc_sbe = sbe;
    o->ecc_dbe = dbe;
    o->throttle = map_throttle(thr);
    return GP_EOK;
}

static gp_err
nv_inject(gpu_backend *b, int i, gpu_fault_kind k, int64_t arg, double duration_s)
{
    (void)b, (void)i, (void)k, (void)arg, (void)duration_s;
    return GP_EINVAL;                 /* real hardware breaks on its own */
}

static void
nv_destroy(gpu_backend *b)
{
    gpu_nvml *v = (gpu_nvml *)b;

    if (v->evset != NULL)
        v->f.evset_free(v->evset);
    if (v->f.shutdown != NULL)
        v->f.shutdown();
    if (v->dl != NULL)
        dlclose(v->dl);
    free(v);
}

static const gpu_ops nvml_ops = {"nvml", nv_count, nv_info, nv_sample, nv_inject, nv_destroy};

/* Resolves every symbol; false (and names it) when one is missing. */
static bool
nv_resolve(gpu_nvml *v, char *err, size_t errlen)
{
    static const struct { const char *sym; size_t off; } tab[] = {
#define S(name, f) {name, offsetof(nvml_fns, f)}
        S("nvmlInit_v2", init), S("nvmlShutdown", shutdown),
        S("nvmlDeviceGetCount_v2", count), S("nvmlDeviceGetHandleByIndex_v2", handle),
        S("nvmlDeviceGetName", name), S("nvmlDeviceGetUUID", uuid),
        S("nvmlDeviceGetSerial", serial), S("nvmlDeviceGetMemoryInfo", mem),
        S("nvmlDeviceGetTemperature", temp), S("nvmlDeviceGetPowerUsage", power),
        S("nvmlDeviceGetUtilizationRates", util), S("nvmlDeviceGetTotalEccErrors", ecc),
        S("nvmlDeviceGetCurrentClocksThrottleReasons", throttle),
        S("nvmlEventSetCreate", evset_create), S("nvmlEventSetFree", evset_free),
        S("nvmlDeviceRegisterEvents", register_events), S("nvmlEventSetWait_v2", evset_wait),
        S("nvmlDeviceGetMinorNumber", minor),
#undef S
    };

    for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
        void *p = dlsym(v->dl, tab[i].sym);

        if (p == NULL) {
            snprintf(err, errlen, "libnvidia-ml.so.1 lacks %s", tab[i].sym);
            return false;
        }
        /* POSIX guarantees data and function pointers convert for dlsym. */
        memcpy((char *)&v->f + tab[i].off, &p, sizeof(p));
    }
    return true;
}

static gp_err
nv_enumerate(gpu_nvml *v, char *err, size_t errlen)
{
    unsigned int n = 0;

    if (v->f.init() != NVML_SUCCESS) {
        v->f.shutdown = NULL;          /* nothing to shut down */
        snprintf(err, errlen, "nvmlInit_v2 failed (no driver?)");
        return GP_EUNAVAIL;
    }
    if (v->f.count(&n) != NVML_SUCCESS || n == 0) {
        snprintf(err, errlen, "NVML sees no GPU");
        return GP_EUNAVAIL;
    }
    v->n = n > GPU_MAX ? GPU_MAX : (int)n;
    for (int i = 0; i < v->n; i++)
        if (v->f.handle((unsigned)i, &v->dev[i]) != NVML_SUCCESS) {
            snprintf(err, errlen, "nvmlDeviceGetHandleByIndex_v2(%d) failed", i);
            return GP_EUNAVAIL;
        }
    if (v->f.evset_create(&v->evset) != NVML_SUCCESS)
        v->evset = NULL;
    for (int i = 0; i < v->n && v->evset != NULL; i++)
        v->f.register_events(v->dev[i], NVML_EVENT_XID, v->evset);   /* may be unsupported */
    return GP_EOK;
}

gp_err
gpu_nvml_open(gpu_backend **out, char *err, size_t errlen)
{
    gpu_nvml *v = calloc(1, sizeof(*v));
    gp_err    rc;

    if (v == NULL)
        return GP_ENOMEM;
    v->base.ops = &nvml_ops;
    v->dl = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (v->dl == NULL) {
        snprintf(err, errlen, "cannot load libnvidia-ml.so.1: %s", dlerror());
        free(v);
        return GP_EUNAVAIL;
    }
    if (!nv_resolve(v, err, errlen)) {
        dlclose(v->dl);
        free(v);
        return GP_EUNAVAIL;
    }
    rc = nv_enumerate(v, err, errlen);
    if (rc != GP_EOK) {
        nv_destroy(&v->base);
        return rc;
    }
    *out = &v->base;
    return GP_EOK;
}
