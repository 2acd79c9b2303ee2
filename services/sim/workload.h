/* workload.h -- gridpool-sim's workload generator: a seeded stream of jobs
 * submitted through gp.api.{tenant}.job.submit, exactly as an integrator
 * would (services/sim/workload.c; example: deploy/workload-example.conf).
 *
 * The workload file is KEY=VALUE lines ('#' starts a comment, blanks
 * ignored; a mix is "choice:weight,choice:weight", a range "lo-hi"):
 *   name=demo              id; client_request_id = <name>-<seed>-<index>
 *   seed=42                the same seed (and fleet) gives the same jobs
 *   jobs=500               how many
 *   rate=5                 submissions per second, at most
 *   inflight=32            submissions awaiting a reply, at most
 *   timeout_ms=5000        deadline of one submission
 *   wait_ms=30000          until a first submission is served, NOROUTE (no
 *                          scheduler up yet) pauses the stream and retries
 *                          every 0.5 s for this long; then it counts as refused
 *   tenants=6              customer tenants cust-01..cust-06, equal weights,
 *                          or a mix: tenants=acme:5,globex:2
 *   gpus=1:40,2:30,4:20,8:10          gpus_per_node mix
 *   nodes=1:96,2:3,4:1                nodes mix (multi-node is rare)
 *   models=any:40,L4:20,H100:5,...    "any": no gpu_models; else one model
 *   origin=0.7             share of jobs with an origin near a random site
 *   latency=0.8            share of those that also get max_latency_ms ...
 *   latency_ms=10-80       ... uniform in this range
 *   interruptible=0.5      share marked interruptible
 *   priority=50:20,100:60,500:20      priority mix
 *   run_s=30-600           run= of jobs that end on their own
 *   fail=0.1               share that fail: fail_after= at 10-90 % of run=
 *   exit_nonzero=0.03      share that end with exit=1..3
 *   forever=0.05           share with no run= (until cancelled) and max_run_s
 *   forever_max_run_s=600-3600
 *   ckpt=0.6               share of interruptible jobs that checkpoint ...
 *   ckpt_s=30-120          ... every ckpt= (and checkpoint_interval_s)
 *   load=60-100            load= of every job
 *   hang=0.01              share with hang
 *   start_fail=0.01        share with start_fail
 *   max_price=0.2          share with max_price_micros_per_gpu_hour ...
 *   max_price_micros=500000-5000000   ... uniform in this range, in currency=
 *   currency=EUR
 *   max_attempts=3
 *   ids_out=FILE           write "<client_request_id> <tenant> <job id>" per accepted job
 * Every key is optional; the defaults are the values above. */
#ifndef GP_SIM_WORKLOAD_H
#define GP_SIM_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp/app.h"
#include "msg_gen.h"
#include "sim.h"

#define WL_MAX_CHOICES 64

typedef struct wl_choice {
    char   name[MSG_JOB_SPEC_GPU_MODELS_ITEM_MAXLEN + 1];    /* tenant, model or "" */
    int    ival;
    double w;
} wl_choice;

typedef struct wl_mix {
    wl_choice c[WL_MAX_CHOICES];
    int       n;
} wl_mix;

typedef struct wl_range {
    double lo, hi;
} wl_range;

typedef struct workload {
    char     name[24];
    uint64_t seed;
    unsigned jobs, inflight, timeout_ms, wait_ms, max_attempts;
    double   rate;
    wl_mix   tenants, gpus, nodes, models, priority;
    double   origin, latency, interruptible, fail, exit_nonzero, forever, ckpt, hang, start_fail,
             max_price;
    wl_range latency_ms, run_s, forever_max_run_s, ckpt_s, load, max_price_micros;
    char     currency[MSG_JOB_SPEC_CURRENCY_MAXLEN + 1];
    char     ids_out[512];
} workload;

/* One generated job: the tenant that submits it and its spec (the spec's
 * gpu_models points into models: do not copy the struct and keep using
 * the copy's spec). */
typedef struct wl_job {
    char         tenant[MSG_TENANT_ID_MAXLEN + 1];
    msg_job_spec spec;
    char         models[1][MSG_JOB_SPEC_GPU_MODELS_ITEM_MAXLEN + 1];
} wl_job;

void   workload_defaults(workload *w);
/* One KEY=VALUE; INVAL with why in err. */
gp_err workload_set(workload *w, const char *key, const char *val, char *err, size_t errlen);
/* Reads a file over the defaults; INVAL (line and why in err) or NOTFOUND. */
gp_err workload_load(const char *path, workload *w, char *err, size_t errlen);
/* Job i of the stream: a pure function of (w, the fleet's shape, i). */
void   workload_job(const workload *w, const fleet *f, unsigned i, wl_job *out);

/* ---- running it -------------------------------------------------------- */

typedef struct wl_run wl_run;
typedef void wl_done_cb(void *arg, wl_run *r);

typedef struct wl_stats {
    unsigned submitted, accepted, timed_out, answered;
    unsigned refused[GP_ERR_COUNT];    /* by code (TIMEOUT counted in timed_out) */
    unsigned tenants_created, tenants_existed, tenants_failed;
} wl_stats;

/* Creates the missing customer tenants (parent: the fleet's operator),
 * then submits the stream at the rate, at most `inflight` at once; calls
 * done once every submission is answered (or timed out). */
wl_run         *workload_start(gp_app *app, const workload *w, const fleet *f, wl_done_cb *done,
                                void *arg);
const wl_stats *workload_stats(const wl_run *r);
void            workload_free(wl_run *r);

#endif
