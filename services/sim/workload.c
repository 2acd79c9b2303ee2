/* workload.c -- the workload generator (see workload.h for the file). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/call.h"
#include "gp/clock.h"
#include "gp/id.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "workload.h"

/* ---- the file ------------------------------------------------------------ */

static bool
set_mix(wl_mix *m, const char *v, bool named, char *err, size_t n)
{
    char buf[2048], *save = NULL, *item;

    if (strlen(v) >= sizeof(buf)) {
        snprintf(err, n, "mix too long");
        return false;
    }
    snprintf(buf, sizeof(buf), "%s", v);
    m->n = 0;
    for (item = strtok_r(buf, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
        char     *colon = strrchr(item, ':'), *end;
        wl_choice c;

        memset(&c, 0, sizeof(c));
        while (isspace((unsigned char)*item))
            item++;
        if (colon == NULL || m->n == WL_MAX_CHOICES) {
            snprintf(err, n, "\"%s\": want choice:weight (at most %d)", item, WL_MAX_CHOICES);
            return false;
        }
        *colon = '\0';
        c.w = strtod(colon + 1, &end);
        if (end == colon + 1 || *end != '\0' || !(c.w >= 0)) {
            snprintf(err, n, "\"%s\": bad weight", colon + 1);
            return false;
        }
        if (named) {
            if (strlen(item) >= sizeof(c.name)) {
                snprintf(err, n, "\"%s\": too long", item);
                return false;
            }
            snprintf(c.name, sizeof(c.name), "%s", item);
        } else {
            long x = strtol(item, &end, 10);

            if (end == item || *end != '\0' || x < 0 || x > 100000) {
                snprintf(err, n, "\"%s\": not a number", item);
                return false;
            }
            c.ival = (int)x;
        }
        m->c[m->n++] = c;
    }
    if (m->n == 0) {
        snprintf(err, n, "empty mix");
        return false;
    }
    return true;
}

static bool
set_range(wl_range *r, const char *v, char *err, size_t n)
{
    char *end;

    r->lo = strtod(v, &end);
    if (end == v || !(r->lo >= 0)) {
        snprintf(err, n, "\"%s\": want lo-hi", v);
        return false;
    }
    r->hi = r->lo;
    if (*end == '-') {
        const char *h = end + 1;

        r->hi = strtod(h, &end);
        if (end == h) {
            snprintf(err, n, "\"%s\": want lo-hi", v);
            return false;
        }
    }
    if (*end != '\0' || r->hi < r->lo) {
        snprintf(err, n, "\"%s\": want lo-hi with lo <= hi", v);
        return false;
    }
    return true;
}

static bool
set_share(double *d, const char *v, char *err, size_t n)
{
    char *end;

    *d = strtod(v, &end);
    if (end == v || *end != '\0' || !(*d >= 0 && *d <= 1)) {
        snprintf(err, n, "\"%s\": want a share 0..1", v);
        return false;
    }
    return true;
}

static bool
set_uint(unsigned *u, const char *v, unsigned lo, unsigned hi, char *err, size_t n)
{
    char         *end;
    unsigned long x = strtoul(v, &end, 10);

    if (end == v || *end != '\0' || x < lo || x > hi || v[0] == '-') {
        snprintf(err, n, "\"%s\": want %u..%u", v, lo, hi);
        return false;
    }
    *u = (unsigned)x;
    return true;
}

static void
equal_tenants(wl_mix *m, int count)
{
    m->n = 0;
    for (int i = 0; i < count && i < WL_MAX_CHOICES; i++) {
        memset(&m->c[i], 0, sizeof(m->c[i]));
        snprintf(m->c[i].name, sizeof(m->c[i].name), "cust-%02d", i + 1);
        m->c[i].w = 1;
        m->n++;
    }
}

void
workload_defaults(workload *w)
{
    char err[128];

    memset(w, 0, sizeof(*w));
    snprintf(w->name, sizeof(w->name), "wl");
    w->seed = 1;
    w->jobs = 100;
    w->rate = 5;
    w->inflight = 32;
    w->timeout_ms = 5000;
    w->wait_ms = 30000;
    w->max_attempts = 3;
    equal_tenants(&w->tenants, 6);
    set_mix(&w->gpus, "1:40,2:30,4:20,8:10", false, err, sizeof(err));
    set_mix(&w->nodes, "1:96,2:3,4:1", false, err, sizeof(err));
    set_mix(&w->models, "any:40,L4:20,L40S:15,RTX 4090:10,A100-80G:10,H100:5", true, err,
            sizeof(err));
    set_mix(&w->priority, "50:20,100:60,500:20", false, err, sizeof(err));
    w->origin = 0.7;
    w->latency = 0.8;
    w->latency_ms = (wl_range){10, 80};
    w->interruptible = 0.5;
    w->run_s = (wl_range){30, 600};
    w->fail = 0.1;
    w->exit_nonzero = 0.03;
    w->forever = 0.05;
    w->forever_max_run_s = (wl_range){600, 3600};
    w->ckpt = 0.6;
    w->ckpt_s = (wl_range){30, 120};
    w->load = (wl_range){60, 100};
    w->hang = 0.01;
    w->start_fail = 0.01;
    w->max_price = 0.2;
    w->max_price_micros = (wl_range){500000, 5000000};
    snprintf(w->currency, sizeof(w->currency), "EUR");
}

static bool
mix_check(const wl_mix *m, int lo, int hi, char *err, size_t n)
{
    double sum = 0;

    for (int i = 0; i < m->n; i++) {
        sum += m->c[i].w;
        if (m->c[i].ival < lo || m->c[i].ival > hi) {
            snprintf(err, n, "%d is out of %d..%d", m->c[i].ival, lo, hi);
            return false;
        }
    }
    if (!(sum > 0))
        snprintf(err, n, "weights sum to 0");
    return sum > 0;
}

gp_err
workload_set(workload *w, const char *k, const char *v, char *err, size_t n)
{
    bool     ok;
    unsigned u;

    if (strcmp(k, "name") == 0) {
        ok = gp_id_ok(v) && strlen(v) < sizeof(w->name);
        if (ok)
            snprintf(w->name, sizeof(w->name), "%s", v);
        else
            snprintf(err, n, "name: an id of at most %zu characters", sizeof(w->name) - 1);
    } else if (strcmp(k, "seed") == 0) {
        char *end;

        w->seed = strtoull(v, &end, 10);
        ok = end != v && *end == '\0' && v[0] != '-';
        if (!ok)
            snprintf(err, n, "seed: a number");
    } else if (strcmp(k, "jobs") == 0) {
        ok = set_uint(&w->jobs, v, 0, 10000000, err, n);
    } else if (strcmp(k, "rate") == 0) {
        char *end;

        w->rate = strtod(v, &end);
        ok = end != v && *end == '\0' && w->rate > 0 && w->rate <= 100000;
        if (!ok)
            snprintf(err, n, "rate: jobs per second, 0 < rate <= 100000");
    } else if (strcmp(k, "inflight") == 0) {
        ok = set_uint(&w->inflight, v, 1, 10000, err, n);
    } else if (strcmp(k, "wait_ms") == 0) {
        ok = set_uint(&w->wait_ms, v, 0, 3600000, err, n);
    } else if (strcmp(k, "timeout_ms") == 0) {
        ok = set_uint(&w->timeout_ms, v, 100, 600000, err, n);
    } else if (strcmp(k, "max_attempts") == 0) {
        ok = set_uint(&w->max_attempts, v, MSG_JOB_SPEC_MAX_ATTEMPTS_MIN,
                      MSG_JOB_SPEC_MAX_ATTEMPTS_MAX, err, n);
    } else if (strcmp(k, "tenants") == 0) {
        if (strchr(v, ':') == NULL) {
            ok = set_uint(&u, v, 1, WL_MAX_CHOICES, err, n);
            if (ok)
                equal_tenants(&w->tenants, (int)u);
        } else {
            ok = set_mix(&w->tenants, v, true, err, n);
            for (int i = 0; ok && i < w->tenants.n; i++)
                if (!gp_id_ok(w->tenants.c[i].name)) {
                    snprintf(err, n, "tenant \"%s\" is not an id", w->tenants.c[i].name);
                    ok = false;
                }
        }
    } else if (strcmp(k, "gpus") == 0) {
        ok = set_mix(&w->gpus, v, false, err, n) &&
             mix_check(&w->gpus, MSG_JOB_SPEC_GPUS_PER_NODE_MIN, MSG_JOB_SPEC_GPUS_PER_NODE_MAX, err, n);
    } else if (strcmp(k, "nodes") == 0) {
        ok = set_mix(&w->nodes, v, false, err, n) &&
             mix_check(&w->nodes, MSG_JOB_SPEC_NODES_MIN, MSG_JOB_SPEC_NODES_MAX, err, n);
    } else if (strcmp(k, "priority") == 0) {
        ok = set_mix(&w->priority, v, false, err, n) &&
             mix_check(&w->priority, MSG_JOB_SPEC_PRIORITY_MIN, MSG_JOB_SPEC_PRIORITY_MAX, err, n);
    } else if (strcmp(k, "models") == 0) {
        ok = set_mix(&w->models, v, true, err, n) && mix_check(&w->models, 0, 0, err, n);
        for (int i = 0; ok && i < w->models.n; i++)
            if (strcmp(w->models.c[i].name, "any") != 0 &&
                !gpu_sim_model_known(w->models.c[i].name)) {
                snprintf(err, n, "model \"%s\" is not one the fleet has", w->models.c[i].name);
                ok = false;
            }
    } else if (strcmp(k, "origin") == 0) {
        ok = set_share(&w->origin, v, err, n);
    } else if (strcmp(k, "latency") == 0) {
        ok = set_share(&w->latency, v, err, n);
    } else if (strcmp(k, "interruptible") == 0) {
        ok = set_share(&w->interruptible, v, err, n);
    } else if (strcmp(k, "fail") == 0) {
        ok = set_share(&w->fail, v, err, n);
    } else if (strcmp(k, "exit_nonzero") == 0) {
        ok = set_share(&w->exit_nonzero, v, err, n);
    } else if (strcmp(k, "forever") == 0) {
        ok = set_share(&w->forever, v, err, n);
    } else if (strcmp(k, "ckpt") == 0) {
        ok = set_share(&w->ckpt, v, err, n);
    } else if (strcmp(k, "hang") == 0) {
        ok = set_share(&w->hang, v, err, n);
    } else if (strcmp(k, "start_fail") == 0) {
        ok = set_share(&w->start_fail, v, err, n);
    } else if (strcmp(k, "max_price") == 0) {
        ok = set_share(&w->max_price, v, err, n);
    } else if (strcmp(k, "latency_ms") == 0) {
        ok = set_range(&w->latency_ms, v, err, n) && w->latency_ms.lo >= MSG_JOB_SPEC_MAX_LATENCY_MS_MIN &&
             w->latency_ms.hi <= MSG_JOB_SPEC_MAX_LATENCY_MS_MAX;
    } else if (strcmp(k, "run_s") == 0) {
        ok = set_range(&w->run_s, v, err, n) && w->run_s.lo >= 1;
    } else if (strcmp(k, "forever_max_run_s") == 0) {
        ok = set_range(&w->forever_max_run_s, v, err, n) && w->forever_max_run_s.lo >= 1 &&
             w->forever_max_run_s.hi <= MSG_JOB_SPEC_MAX_RUN_S_MAX;
    } else if (strcmp(k, "ckpt_s") == 0) {
        ok = set_range(&w->ckpt_s, v, err, n) && w->ckpt_s.lo >= 1 &&
             w->ckpt_s.hi <= MSG_JOB_SPEC_CHECKPOINT_INTERVAL_S_MAX;
    } else if (strcmp(k, "load") == 0) {
        ok = set_range(&w->load, v, err, n) && w->load.hi <= 100;
    } else if (strcmp(k, "max_price_micros") == 0) {
        ok = set_range(&w->max_price_micros, v, err, n) &&
             w->max_price_micros.hi <= (double)MSG_JOB_SPEC_MAX_PRICE_MICROS_PER_GPU_HOUR_MAX;
    } else if (strcmp(k, "currency") == 0) {
        ok = strlen(v) == 3;
        if (ok)
            snprintf(w->currency, sizeof(w->currency), "%s", v);
        else
            snprintf(err, n, "currency: an ISO 4217 code");
    } else if (strcmp(k, "ids_out") == 0) {
        ok = strlen(v) < sizeof(w->ids_out);
        snprintf(w->ids_out, sizeof(w->ids_out), "%s", v);
    } else {
        snprintf(err, n, "unknown key");
        return GP_EINVAL;
    }
    if (!ok && err[0] == '\0')
        snprintf(err, n, "\"%s\" out of range", v);
    return ok ? GP_EOK : GP_EINVAL;
}

static char *
trim(char *s)
{
    char *e;

    while (isspace((unsigned char)*s))
        s++;
    e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

gp_err
workload_load(const char *path, workload *w, char *err, size_t n)
{
    FILE *f = fopen(path, "r");
    char  line[4096], why[256];
    int   no = 0;

    if (f == NULL) {
        snprintf(err, n, "cannot open");
        return GP_ENOTFOUND;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        char *hash = strchr(line, '#'), *s, *eq;

        no++;
        if (hash != NULL)
            *hash = '\0';
        s = trim(line);
        if (*s == '\0')
            continue;
        why[0] = '\0';
        if ((eq = strchr(s, '=')) == NULL) {
            snprintf(err, n, "line %d: want KEY=VALUE", no);
            fclose(f);
            return GP_EINVAL;
        }
        *eq = '\0';
        if (workload_set(w, trim(s), trim(eq + 1), why, sizeof(why)) != GP_EOK) {
            snprintf(err, n, "line %d: %s: %s", no, trim(s), why);
            fclose(f);
            return GP_EINVAL;
        }
    }
    fclose(f);
    return GP_EOK;
}

/* ---- the jobs ------------------------------------------------------------- */

static int
mix_pick(const wl_mix *m, uint64_t *rng)
{
    double sum = 0, u, acc = 0;

    for (int i = 0; i < m->n; i++)
        sum += m->c[i].w;
    u = gp_rng_unit(rng) * sum;
    for (int i = 0; i < m->n; i++)
        if (u < (acc += m->c[i].w))
            return i;
    return m->n - 1;
}

static double
wl_uniform(const wl_range *r, uint64_t *rng)
{
    return r->lo + (r->hi - r->lo) * gp_rng_unit(rng);
}

static double
wl_clampd(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

void
workload_job(const workload *w, const fleet *f, unsigned i, wl_job *o)
{
    /* Each job has its own stream: job i is the same whatever came before. */
    uint64_t      rng = w->seed ^ ((uint64_t)(i + 1) * 0xD1B54A32D192ED03ull);
    msg_job_spec *s = &o->spec;
    const char   *model;
    char          cmd[256];
    size_t        k;
    unsigned      run_s;
    bool          forever, ckpt;
    int           load;

    memset(o, 0, sizeof(*o));
    gp_rng_next(&rng);
    snprintf(o->tenant, sizeof(o->tenant), "%s", w->tenants.c[mix_pick(&w->tenants, &rng)].name);
    snprintf(s->client_request_id, sizeof(s->client_request_id), "%s-%llu-%u", w->name,
             (unsigned long long)w->seed, i);
    snprintf(s->name, sizeof(s->name), "%s job %u", w->name, i);
    s->gpus_per_node = w->gpus.c[mix_pick(&w->gpus, &rng)].ival;
    s->nodes = w->nodes.c[mix_pick(&w->nodes, &rng)].ival;
    GP_SET_HAS(s, MSG_JOB_SPEC__NODES);
    model = w->models.c[mix_pick(&w->models, &rng)].name;
    if (strcmp(model, "any") != 0) {
        snprintf(o->models[0], sizeof(o->models[0]), "%s", model);
        s->gpu_models.v = o->models;
        s->gpu_models.n = 1;
    }
    if (gp_rng_unit(&rng) < w->origin && f != NULL && f->nsites > 0) {
        const sim_site *site = &f->sites[(int)(gp_rng_unit(&rng) * f->nsites) % f->nsites];

        s->origin_lat = wl_clampd(site->lat + (gp_rng_unit(&rng) - 0.5) * 0.6, -90, 90);
        s->origin_lon = wl_clampd(site->lon + (gp_rng_unit(&rng) - 0.5) * 0.8, -180, 180);
        GP_SET_HAS(s, MSG_JOB_SPEC__ORIGIN_LAT);
        GP_SET_HAS(s, MSG_JOB_SPEC__ORIGIN_LON);
        if (gp_rng_unit(&rng) < w->latency)
            s->max_latency_ms = (uint32_t)llround(wl_uniform(&w->latency_ms, &rng));
    }
    s->priority = w->priority.c[mix_pick(&w->priority, &rng)].ival;
    GP_SET_HAS(s, MSG_JOB_SPEC__PRIORITY);
    s->interruptible = gp_rng_unit(&rng) < w->interruptible;
    GP_SET_HAS(s, MSG_JOB_SPEC__INTERRUPTIBLE);
    s->max_attempts = w->max_attempts;
    /* The behaviour, as a sim: command. */
    run_s = (unsigned)llround(wl_uniform(&w->run_s, &rng));
    forever = gp_rng_unit(&rng) < w->forever;
    ckpt = s->interruptible && gp_rng_unit(&rng) < w->ckpt;
    load = (int)llround(wl_uniform(&w->load, &rng));
    k = (size_t)snprintf(cmd, sizeof(cmd), "sim:");
    if (forever) {
        s->max_run_s = (uint32_t)llround(wl_uniform(&w->forever_max_run_s, &rng));
    } else {
        k += (size_t)snprintf(cmd + k, sizeof(cmd) - k, "run=%us", run_s);
        if (gp_rng_unit(&rng) < w->fail)
            k += (size_t)snprintf(cmd + k, sizeof(cmd) - k, " fail_after=%us",
                                  (unsigned)(run_s * (0.1 + 0.8 * gp_rng_unit(&rng))));
        else if (gp_rng_unit(&rng) < w->exit_nonzero)
            k += (size_t)snprintf(cmd + k, sizeof(cmd) - k, " exit=%d",
                                  1 + (int)(gp_rng_unit(&rng) * 3));
    }
    if (ckpt) {
        unsigned every = (unsigned)llround(wl_uniform(&w->ckpt_s, &rng));

        k += (size_t)snprintf(cmd + k, sizeof(cmd) - k, " ckpt=%us", every);
        s->checkpoint_interval_s = every;
    }
    k += (size_t)snprintf(cmd + k, sizeof(cmd) - k, " load=%d", load);
    if (gp_rng_unit(&rng) < w->hang)
        k += (size_t)snprintf(cmd + k, sizeof(cmd) - k, " hang");
    if (gp_rng_unit(&rng) < w->start_fail)
        snprintf(cmd + k, sizeof(cmd) - k, " start_fail");
    snprintf(s->command, sizeof(s->command), "%s", cmd);
    if (gp_rng_unit(&rng) < w->max_price) {
        s->max_price_micros_per_gpu_hour = (int64_t)llround(wl_uniform(&w->max_price_micros, &rng));
        GP_SET_HAS(s, MSG_JOB_SPEC__MAX_PRICE_MICROS_PER_GPU_HOUR);
        snprintf(s->currency, sizeof(s->currency), "%s", w->currency);
    }
}

/* ---- submitting ------------------------------------------------------------ */

struct wl_run {
    gp_app     *app;
    struct ev_loop *loop;
    gp_bus     *bus;
    const workload *w;
    const fleet *f;
    wl_done_cb *done;
    void       *arg;
    ev_timer    tick;
    int         tenant_next, tenant_inflight;
    unsigned    next, inflight;
    double      t0;                    /* gp_mono_s when submissions started (moved by waits) */
    double      wait_end;              /* gp_mono_s: NOROUTE until then means "not up yet" */
    double      resume_at;             /* gp_mono_s: waiting for the scheduler until then */
    bool        serving;               /* a submission got an answer from a scheduler */
    unsigned   *retry;                 /* indexes answered NOROUTE while waiting */
    unsigned    nretry;
    bool        submitting, finished;
    FILE       *ids;
    wl_stats    st;
};

typedef struct wl_call {
    wl_run  *r;
    unsigned idx;
    char     tenant[MSG_TENANT_ID_MAXLEN + 1];
    char     crid[MSG_JOB_SPEC_CLIENT_REQUEST_ID_MAXLEN + 1];
} wl_call;

static void submit_some(wl_run *r);

static void
finish(wl_run *r)
{
    char codes[512] = "";
    size_t k = 0;

    if (r->finished)
        return;
    r->finished = true;
    ev_timer_stop(r->loop, &r->tick);
    for (int c = 0; c < GP_ERR_COUNT; c++)
        if (r->st.refused[c] > 0 && k < sizeof(codes) - 32)
            k += (size_t)snprintf(codes + k, sizeof(codes) - k, "%s%s:%u", k ? "," : "",
                                  gp_err_name((gp_err)c), r->st.refused[c]);
    GP_INFO("workload_done", "name=%s seed=%llu jobs=%u submitted=%u accepted=%u timed_out=%u "
            "refused=\"%s\" tenants_created=%u tenants_existed=%u tenants_failed=%u seconds=%.1f",
            r->w->name, (unsigned long long)r->w->seed, r->w->jobs, r->st.submitted,
            r->st.accepted, r->st.timed_out, codes, r->st.tenants_created, r->st.tenants_existed,
            r->st.tenants_failed, r->t0 > 0 ? gp_mono_s() - r->t0 : 0);
    printf("sim: workload %s seed %llu: %u submitted, %u accepted, %u timed out, refused {%s}\n",
           r->w->name, (unsigned long long)r->w->seed, r->st.submitted, r->st.accepted,
           r->st.timed_out, codes);
    fflush(stdout);
    if (r->ids != NULL) {
        fclose(r->ids);
        r->ids = NULL;
    }
    if (r->done != NULL)
        r->done(r->arg, r);
}

static void
submit_done(void *arg, gp_err err, const void *reply, const char *detail)
{
    wl_call      *c = arg;
    wl_run       *r = c->r;
    const msg_job *j = reply;

    r->inflight--;
    if (err == GP_ENOROUTE && !r->serving && gp_mono_s() < r->wait_end) {
        /* No scheduler yet (started with the stack): not an answer; this
         * index goes again once it is up, and the stream pauses. */
        if (r->resume_at <= gp_mono_s())
            GP_INFO("workload_waiting", "name=%s reason=no_scheduler retry_s=0.5", r->w->name);
        r->retry[r->nretry++] = c->idx;
        r->st.submitted--;
        r->resume_at = gp_mono_s() + 0.5;
        if (!ev_is_active(&r->tick))
            ev_timer_start(r->loop, &r->tick);
        free(c);
        return;
    }
    r->serving = r->serving || err != GP_ENOROUTE;
    r->st.answered++;
    if (err == GP_EOK) {
        r->st.accepted++;
        if (r->ids != NULL)
            fprintf(r->ids, "%s %s %s\n", c->crid, c->tenant, j->id);
    } else if (err == GP_ETIMEOUT) {
        r->st.timed_out++;
    } else {
        r->st.refused[err < GP_ERR_COUNT ? err : GP_EINTERNAL]++;
        GP_DEBUG("workload_refused", "crid=%s tenant=%s code=%s detail=\"%s\"", c->crid, c->tenant,
                 gp_err_name(err), detail);
    }
    free(c);
    if (r->st.answered == r->w->jobs)
        finish(r);
    else
        submit_some(r);
}

static void
submit_one(wl_run *r, unsigned i)
{
    wl_job       job;
    wl_call     *c = calloc(1, sizeof(*c));
    const char  *args[2];
    char         subj[GP_MAX_SUBJECT + 1];
    gp_err       rc;

    workload_job(r->w, r->f, i, &job);
    r->st.submitted++;
    args[0] = job.tenant;
    args[1] = NULL;
    rc = c == NULL ? GP_ENOMEM : gp_op_subject(GP_OP_API_JOB_SUBMIT, subj, sizeof(subj), args);
    if (rc == GP_EOK) {
        c->r = r;
        c->idx = i;
        snprintf(c->tenant, sizeof(c->tenant), "%s", job.tenant);
        snprintf(c->crid, sizeof(c->crid), "%s", job.spec.client_request_id);
        r->inflight++;
        rc = gp_call(r->bus, subj, GP_OP_API_JOB_SUBMIT->in, &job.spec, GP_OP_API_JOB_SUBMIT->out,
                     r->w->timeout_ms, submit_done, c);
        if (rc != GP_EOK)
            r->inflight--;
    }
    if (rc != GP_EOK) {                /* not sent: counted as refused by that code */
        free(c);
        r->st.answered++;
        r->st.refused[rc < GP_ERR_COUNT ? rc : GP_EINTERNAL]++;
        if (r->st.answered == r->w->jobs)
            finish(r);
    }
}

/* As many as the rate allows by now and the window has room for. */
static void
submit_some(wl_run *r)
{
    double   due;

    if (!r->submitting || r->finished)
        return;
    if (r->resume_at > 0) {
        double now = gp_mono_s();

        if (now < r->resume_at || r->inflight > 0)
            return;                    /* the tick comes back */
        r->t0 += now - r->resume_at + 0.5;      /* the wait does not make a burst */
        r->resume_at = 0;
        while (r->nretry > 0 && r->inflight < r->w->inflight)
            submit_one(r, r->retry[--r->nretry]);
        if (r->nretry > 0) {
            r->resume_at = now;
            return;
        }
    }
    due = (gp_mono_s() - r->t0) * r->w->rate + 1;
    while (r->next < r->w->jobs && r->next < due && r->inflight < r->w->inflight && !r->finished)
        submit_one(r, r->next++);
    if (r->next == r->w->jobs && r->nretry == 0 && r->resume_at == 0)
        ev_timer_stop(r->loop, &r->tick);
}

static void
tick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    submit_some(GP_CONTAINER_OF(w, wl_run, tick));
}

static void
start_submitting(wl_run *r)
{
    double period = 1.0 / r->w->rate;

    r->submitting = true;
    r->t0 = gp_mono_s();
    r->wait_end = r->t0 + r->w->wait_ms / 1000.0;
    GP_INFO("workload_submitting", "name=%s jobs=%u rate=%.1f inflight=%u", r->w->name, r->w->jobs,
            r->w->rate, r->w->inflight);
    if (r->w->jobs == 0) {
        finish(r);
        return;
    }
    ev_timer_init(&r->tick, tick_cb, period < 0.001 ? 0.001 : period, period < 0.001 ? 0.001 : period);
    ev_timer_start(r->loop, &r->tick);
    submit_some(r);
}

static void tenants_pump(wl_run *r);

static void
tenant_done(void *arg, gp_err err, const void *reply, const char *detail)
{
    wl_run *r = arg;

    (void)reply;
    r->tenant_inflight--;
    if (err == GP_EOK)
        r->st.tenants_created++;
    else if (err == GP_EEXISTS)
        r->st.tenants_existed++;
    else {
        r->st.tenants_failed++;
        GP_WARN("workload_tenant_failed", "code=%s detail=\"%s\"", gp_err_name(err), detail);
    }
    tenants_pump(r);
}

/* The customer tenants, under the fleet's operator; EXISTS is fine. */
static void
tenants_pump(wl_run *r)
{
    while (r->tenant_next < r->w->tenants.n && r->tenant_inflight < 8) {
        msg_tenant t;
        gp_err     rc;

        memset(&t, 0, sizeof(t));
        snprintf(t.id, sizeof(t.id), "%s", r->w->tenants.c[r->tenant_next++].name);
        snprintf(t.parent, sizeof(t.parent), "%s", SIM_OPERATOR);
        t.kind = MSG_TENANT_KIND_CUSTOMER;
        snprintf(t.name, sizeof(t.name), "Customer %s", t.id);
        r->tenant_inflight++;
        rc = gp_call(r->bus, GP_OP_ADMIN_TENANT_CREATE->address, GP_OP_ADMIN_TENANT_CREATE->in, &t,
                     GP_OP_ADMIN_TENANT_CREATE->out, r->w->timeout_ms, tenant_done, r);
        if (rc != GP_EOK) {
            r->tenant_inflight--;
            r->st.tenants_failed++;
        }
    }
    if (r->tenant_inflight == 0 && !r->submitting)
        start_submitting(r);
}

wl_run *
workload_start(gp_app *app, const workload *w, const fleet *f, wl_done_cb *done, void *arg)
{
    wl_run *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return NULL;
    r->app = app;
    r->bus = gp_app_bus(app);
    r->loop = gp_app_loop(app);
    r->w = w;
    r->f = f;
    r->done = done;
    r->arg = arg;
    ev_timer_init(&r->tick, tick_cb, 1, 1);
    if ((r->retry = calloc(w->inflight, sizeof(*r->retry))) == NULL) {
        free(r);
        return NULL;
    }
    if (w->ids_out[0] != '\0' && (r->ids = fopen(w->ids_out, "w")) == NULL)
        GP_WARN("workload_ids_out", "path=%s action=not_written", w->ids_out);
    if (r->ids != NULL)
        setvbuf(r->ids, NULL, _IOLBF, 0);
    GP_INFO("workload_tenants", "name=%s tenants=%d parent=%s", w->name, w->tenants.n, SIM_OPERATOR);
    tenants_pump(r);
    return r;
}

const wl_stats *
workload_stats(const wl_run *r)
{
    return &r->st;
}

void
workload_free(wl_run *r)
{
    if (r == NULL)
        return;
    ev_timer_stop(r->loop, &r->tick);
    if (r->ids != NULL)
        fclose(r->ids);
    free(r->retry);
    free(r);
}
