/* truth.c -- the simulator's ground truth: per attempt, the GPU time it
 * actually held and the energy its GPUs drew, from the simulator's own
 * model (gpu_sim_model_power_w at the job's load, no noise, integrated
 * over the attempt's start..end on the monotonic clock), independent of
 * the agent's sampled counters, so later checks can compare metering and
 * billing against it.
 *
 * --truth FILE gets one JSON line per attempt when it ends (exited,
 * killed, lease_expired; "node_down" when its node went down with it),
 * and, at stop, one line for each attempt still running ("sim_stop"),
 * then the file is flushed and closed:
 *   {"site":"s0001","node":"s0001-n01","model":"L40S","job_id":"j1","attempt":1,
 *    "gpus":2,"gpu_idx":[0,1],"load_pct":95,"sim":true,"start_ms":<wall>,"end_ms":<wall>,
 *    "held_ms":2000,"gpu_ms":4000,"energy_mj":1335000,"end":"exited","exit_code":0,
 *    "progress_ms":2000,"agent_gpu_ms":4002,"agent_energy_mj":1345853}
 * gpu_idx are the node's GPU indexes it ran on (so a check can see one GPU
 * running two attempts at once: tests/harness/invariants.sh --truth);
 * gpu_ms = held_ms x gpus; energy_mj = gpus x power(load) W x held_ms;
 * start_ms/end_ms are wall timestamps (start's wall time + held_ms) for
 * matching, never used to time anything; progress_ms only for sim: jobs;
 * agent_* are what the agent counted (for the comparison, not the truth).
 * Thermal throttling (a fault) is not in the model: under it the agent
 * measures less power than the truth says. */
#include <stdio.h>
#include <string.h>

#include "gp/log.h"
#include "sim.h"

int
truth_open(sim *s, const char *path)
{
    if ((s->truth = fopen(path, "w")) == NULL)
        return -1;
    setvbuf(s->truth, NULL, _IOLBF, 0);   /* whole lines, readable while we run */
    return 0;
}

void
truth_on_end(void *arg, agent *a, const agent_attempt_end *e)
{
    sim        *s = arg;
    int         i = fleet_find_node(&s->f, agent_node(a));
    const char *model = i >= 0 ? s->f.nodes[i].model : "";
    uint64_t    held = e->end_mono_ms > e->start_mono_ms ? e->end_mono_ms - e->start_mono_ms : 0;
    double      w = gpu_sim_model_power_w(model, e->load);
    const char *end = e->event >= 0 ? msg_attempt_event_event_names[e->event]
                      : s->stopping ? "sim_stop" : "node_down";
    char        progress[48] = "", idx[8 * 64 + 3] = "[";
    size_t      k = 1;

    if (s->truth == NULL)
        return;
    if (w < 0)
        w = 0;
    for (int g = 0; e->gpus != NULL && g < e->ngpus && k < sizeof(idx) - 8; g++)
        k += (size_t)snprintf(idx + k, sizeof(idx) - k, "%s%d", g ? "," : "", e->gpus[g]);
    snprintf(idx + k, sizeof(idx) - k, "]");
    if (e->has_progress)
        snprintf(progress, sizeof(progress), ",\"progress_ms\":%llu",
                 (unsigned long long)e->progress_ms);
    fprintf(s->truth,
            "{\"site\":\"%s\",\"node\":\"%s\",\"model\":\"%s\",\"job_id\":\"%s\",\"attempt\":%u,"
            "\"gpus\":%d,\"gpu_idx\":%s,\"load_pct\":%.0f,\"sim\":%s,\"start_ms\":%llu,\"end_ms\":%llu,"
            "\"held_ms\":%llu,\"gpu_ms\":%llu,\"energy_mj\":%llu,\"end\":\"%s\",\"exit_code\":%d%s,"
            "\"agent_gpu_ms\":%llu,\"agent_energy_mj\":%llu}\n",
            agent_site(a), agent_node(a), model, e->job_id, e->attempt, e->ngpus, idx, e->load * 100,
            e->sim ? "true" : "false", (unsigned long long)e->start_wall_ms,
            (unsigned long long)(e->start_wall_ms + held), (unsigned long long)held,
            (unsigned long long)(held * (uint64_t)e->ngpus),
            (unsigned long long)(w * e->ngpus * (double)held + 0.5), end,
            e->event >= 0 ? e->exit_code : -1, progress, (unsigned long long)e->agent_gpu_ms,
            (unsigned long long)e->agent_energy_mj);
    s->truth_lines++;
}

void
truth_close(sim *s)
{
    if (s->truth == NULL)
        return;
    fflush(s->truth);
    fclose(s->truth);
    s->truth = NULL;
    GP_INFO("sim_truth_written", "lines=%u", s->truth_lines);
}
