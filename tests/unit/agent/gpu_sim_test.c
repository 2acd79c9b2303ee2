/* gpu_sim_test.c -- the simulated GPU backend (determinism, load,
 * faults, lost GPUs), the attempt counters, and NVML when a driver is
 * present (skipped, and said so, when not). */
#include <math.h>
#include <string.h>

#include "../../../services/agent/attempt.h"
#include "../../../services/agent/gpu.h"
#include "test.h"

/* Steps one GPU for n samples of dt seconds at load; returns the last. */
static gpu_sample
run_for(gpu_backend *b, int gpu, double load, int n, double dt)
{
    gpu_sample s;

    memset(&s, 0, sizeof(s));
    for (int i = 0; i < n; i++)
        gpu_sample_get(b, gpu, load, dt, &s);
    return s;
}

static void
test_determinism(void)
{
    gpu_backend *a = gpu_sim_new("H100", 4, 42), *b = gpu_sim_new("H100", 4, 42);
    gpu_backend *c = gpu_sim_new("H100", 4, 43);
    gpu_info     ia, ib, ic;
    gpu_sample   sa, sb;
    bool         same = true;

    T_OK(a != NULL && b != NULL && c != NULL);
    T_EQ_INT(gpu_count(a), 4);
    gpu_info_get(a, 2, &ia);
    gpu_info_get(b, 2, &ib);
    gpu_info_get(c, 2, &ic);
    T_OK(strcmp(ia.uuid, ib.uuid) == 0);
    T_OK(strcmp(ia.uuid, ic.uuid) != 0);
    T_OK(strcmp(ia.model, "H100") == 0 && ia.vram_mb > 80000);
    for (int i = 0; i < 50; i++) {
        gpu_sample_get(a, i % 4, (i % 7) / 6.0, 1.0, &sa);
        gpu_sample_get(b, i % 4, (i % 7) / 6.0, 1.0, &sb);
        same = same && memcmp(&sa, &sb, sizeof(sa)) == 0;
    }
    T_OKM(same, "same seed, same calls -> the same 50 samples");
    gpu_free(a);
    gpu_free(b);
    gpu_free(c);
}

static void
test_load(void)
{
    gpu_backend *b = gpu_sim_new("L40S", 2, 7);
    gpu_sample   idle = run_for(b, 0, 0.0, 60, 5.0), busy = run_for(b, 1, 1.0, 60, 5.0);
    gpu_sample   first;

    T_OKM(busy.temp_c > idle.temp_c + 25, "loaded GPU is hotter (%.1f vs %.1f C)", busy.temp_c,
          idle.temp_c);
    T_OKM(busy.power_w > 300 && idle.power_w < 50, "power follows load (%.0f vs %.0f W)",
          busy.power_w, idle.power_w);
    T_OKM(busy.util_pct > 95 && idle.util_pct == 0, "util follows load (%.0f%% vs %.0f%%)",
          busy.util_pct, idle.util_pct);
    T_OK(busy.mem_used_mb > 30000 && idle.mem_used_mb == 0);
    gpu_free(b);
    /* Temperature lags: one short step moves it only part of the way. */
    b = gpu_sim_new("L40S", 1, 7);
    first = run_for(b, 0, 1.0, 1, 1.0);
    T_OKM(first.temp_c < 45, "temperature rises gradually (%.1f C after 1 s)", first.temp_c);
    gpu_free(b);
}

static void
test_faults(void)
{
    gpu_backend *b = gpu_sim_new("A100-80G", 2, 9);
    gpu_sample   s;

    gpu_inject(b, 0, GPU_FAULT_XID, 48, 0);
    gpu_inject(b, 0, GPU_FAULT_XID, 63, 0);
    gpu_sample_get(b, 0, 0.5, 1.0, &s);
    T_OK(s.nxids == 2 && s.xids[0] == 48 && s.xids[1] == 63);
    gpu_sample_get(b, 0, 0.5, 1.0, &s);
    T_OKM(s.nxids == 0, "XIDs are reported once");
    gpu_inject(b, 1, GPU_FAULT_ECC, 250, 0);
    gpu_sample_get(b, 1, 0.5, 1.0, &s);
    T_OK(s.ecc_sbe == 250 && s.ecc_dbe == 2);
    gpu_inject(b, 1, GPU_FAULT_ECC, 10, 0);
    gpu_sample_get(b, 1, 0.5, 1.0, &s);
    T_OKM(s.ecc_sbe == 260, "ECC counters are cumulative");
    gpu_inject(b, 1, GPU_FAULT_THERMAL, 0, 120);
    s = run_for(b, 1, 1.0, 20, 5.0);
    T_OKM((s.throttle & GPU_THR_THERMAL) && s.temp_c > 85, "thermal throttle: flag and %.1f C",
          s.temp_c);
    s = run_for(b, 1, 1.0, 40, 5.0);
    T_OKM(s.throttle == 0 && s.temp_c < 80, "throttle ends after its duration (%.1f C)", s.temp_c);
    T_EQ_INT(gpu_inject(b, 5, GPU_FAULT_ECC, 1, 0), GP_ENOTFOUND);
    gpu_free(b);
}

static void
test_lost(void)
{
    gpu_backend *b = gpu_sim_new("RTX 4090", 2, 3);
    gpu_sample   s;

    gpu_inject(b, 0, GPU_FAULT_LOST, 0, 0);
    gpu_sample_get(b, 0, 1.0, 1.0, &s);
    T_OK(s.lost && s.power_w == 0 && s.temp_c == 0);
    gpu_inject(b, 1, GPU_FAULT_XID, 79, 0);
    gpu_sample_get(b, 1, 1.0, 1.0, &s);
    T_OKM(s.lost && s.nxids == 1 && s.xids[0] == 79, "XID 79 reports the code and loses the GPU");
    gpu_sample_get(b, 1, 1.0, 1.0, &s);
    T_OKM(s.lost, "a lost GPU stays lost");
    gpu_free(b);
    T_OK(gpu_sim_new("V100", 1, 1) == NULL);
    T_OK(gpu_sim_new("L4", GPU_MAX + 1, 1) == NULL);
    T_OK(gpu_sim_model_known("L4") && !gpu_sim_model_known("l4"));
}

static void
test_counters(void)
{
    attempt t;
    double  power[GPU_MAX] = {100.0, 50.0, 999.0};

    memset(&t, 0, sizeof(t));
    t.ngpus = 2;
    t.gpus[0] = 0;
    t.gpus[1] = 1;
    t.acc_ms = 1000;
    attempt_account(&t, 3000, power);
    T_EQ_INT(t.gpu_ms, 4000);                /* 2 s x 2 GPUs */
    T_EQ_INT(t.energy_mj, 300000);           /* 150 W x 2000 ms */
    attempt_account(&t, 2500, power);        /* the clock never runs back */
    T_EQ_INT(t.gpu_ms, 4000);
    t.done = true;
    attempt_account(&t, 9000, power);
    T_EQ_INT(t.gpu_ms, 4000);                /* an ended attempt counts no more */
}

static void
test_nvml(void)
{
    gpu_backend *b = NULL;
    char         err[256] = "";
    gp_err       rc = gpu_nvml_open(&b, err, sizeof(err));
    gpu_info     gi;
    gpu_sample   s;

    if (rc != GP_EOK) {
        T_OKM(rc == GP_EUNAVAIL && err[0] != '\0', "no NVML here: UNAVAIL (%s)", err);
        return;
    }
    T_OK(gpu_count(b) > 0);
    T_OK(gpu_info_get(b, 0, &gi) == GP_EOK && gi.uuid[0] != '\0' && gi.vram_mb > 0);
    T_OK(gpu_sample_get(b, 0, 0, 1.0, &s) == GP_EOK && !s.lost && s.temp_c > 0 &&
         s.power_w > 0);
    printf("# nvml: %d GPUs, gpu0 %s %s %u MiB, %.0f C %.1f W util %.0f%% throttle 0x%x "
           "ecc %llu/%llu\n", gpu_count(b), gi.model, gi.uuid, gi.vram_mb, s.temp_c, s.power_w,
           s.util_pct, s.throttle, (unsigned long long)s.ecc_sbe, (unsigned long long)s.ecc_dbe);
    gpu_free(b);
}

int
main(void)
{
    test_determinism();
    test_load();
    test_faults();
    test_lost();
    test_counters();
    test_nvml();
    return T_DONE();
}
