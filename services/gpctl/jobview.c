/* jobview.c -- rows, sentences and sums for jobs (see jobview.h). */
#include "jobview.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gp/codec.h"

const char *const job_heads[] = {"ID", "TENANT", "STATE", "GPUS", "PRIO", "AGE", "ATTEMPTS",
                                 "SITE/NODE", "REASON", NULL};
const char *const attempt_heads[] = {"ATTEMPT", "RANK", "SITE", "NODE", "GPUS", "STATE",
                                     "CREATED", "STARTED", "ENDED", "EXIT", "LATENCY", "SCORE",
                                     "LAT/PRICE/PACK/REL/THERM", NULL};

const char *
enum_text(const gp_msg_desc *d, int field, int32_t v)
{
    const gp_field *f = &d->fields[field];

    return v >= 0 && (uint32_t)v < f->nenums ? f->enums[v] : "?";
}

/* ---- jobs ------------------------------------------------------------------------- */

void
job_gpus(const msg_job *j, char *buf, size_t n)
{
    int nodes = j->spec.nodes > 0 ? j->spec.nodes : 1;

    snprintf(buf, n, "%dx%d", nodes, (int)j->spec.gpus_per_node);
}

const msg_attempt *
job_latest_attempt(const msg_job *j)
{
    const msg_attempt *a = j->attempts.v, *best = NULL;

    for (uint32_t i = 0; i < j->attempts.n; i++)
        if (best == NULL || a[i].attempt > best->attempt ||
            (a[i].attempt == best->attempt && a[i].rank < best->rank))
            best = &a[i];
    return best;
}

int
job_row(table *t, const msg_job *j, int64_t now_ms)
{
    const msg_attempt *a = job_latest_attempt(j);
    char gpus[32], prio[16], age[32], tries[32], where[136], reason[JOB_REASON_COLS * 4 + 8];
    int  max = j->spec.max_attempts > 0 ? (int)j->spec.max_attempts : 3;

    job_gpus(j, gpus, sizeof(gpus));
    snprintf(prio, sizeof(prio), "%d",
             GP_HAS(&j->spec, MSG_JOB_SPEC__PRIORITY) ? (int)j->spec.priority : 100);
    fmt_age(age, sizeof(age), now_ms, j->created_ms);
    snprintf(tries, sizeof(tries), "%u/%d", j->attempts_made, max);
    snprintf(where, sizeof(where), "-");
    if (a != NULL)
        snprintf(where, sizeof(where), "%s/%s", a->site, a->node);
    text_clean(reason, sizeof(reason), j->reason[0] ? j->reason : "-", JOB_REASON_COLS);
    return table_add(t, (const char *const[]){j->id, j->tenant,
                                              enum_text(&msg_job_desc, MSG_JOB__STATE, j->state),
                                              gpus, prio, age, tries, where, reason});
}

/* ---- attempts ------------------------------------------------------------------------ */

/* "0,1,2,3" */
static void
gpu_list(const gp_arr *g, char *buf, size_t n)
{
    size_t used = 0;

    snprintf(buf, n, "-");
    for (uint32_t i = 0; i < g->n && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%d", i ? "," : "",
                                 (int)((const int32_t *)g->v)[i]);
}

/* "10:02:03" (UTC time of day) or "-". */
static void
clock_of(uint64_t ms, char *buf, size_t n)
{
    char iso[40];

    fmt_iso8601(iso, sizeof(iso), ms);
    snprintf(buf, n, "%.8s", ms ? iso + 11 : "-");
}

int
attempt_row(table *t, const msg_attempt *a)
{
    char num[16], rank[16], gpus[96], created[16], started[16], ended[16], ex[16], lat[24],
        score[16], parts[96];

    snprintf(num, sizeof(num), "%u", a->attempt);
    snprintf(rank, sizeof(rank), "%d", (int)a->rank);
    gpu_list(&a->gpus, gpus, sizeof(gpus));
    clock_of(a->created_ms, created, sizeof(created));
    clock_of(a->started_ms, started, sizeof(started));
    clock_of(a->ended_ms, ended, sizeof(ended));
    snprintf(ex, sizeof(ex), "-");
    if (GP_HAS(a, MSG_ATTEMPT__EXIT_CODE))
        snprintf(ex, sizeof(ex), "%d", (int)a->exit_code);
    snprintf(lat, sizeof(lat), "-");
    if (GP_HAS(a, MSG_ATTEMPT__LATENCY_EST_MS))
        snprintf(lat, sizeof(lat), "%.1fms", a->latency_est_ms);
    snprintf(score, sizeof(score), "%d", (int)a->score);
    snprintf(parts, sizeof(parts), "%d/%d/%d/%d/%d", (int)a->score_latency, (int)a->score_price,
             (int)a->score_packing, (int)a->score_reliability, (int)a->score_thermal);
    return table_add(t, (const char *const[]){num, rank, a->site, a->node, gpus,
                                              enum_text(&msg_attempt_desc, MSG_ATTEMPT__STATE,
                                                        a->state),
                                              created, started, ended, ex, lat, score, parts});
}

/* ---- why it waits --------------------------------------------------------------------- */

static const char *const pending_text[] = {
    [MSG_PENDING_REASON_REASON_NO_RIGHTS] = "in pools the tenant has no rights on",
    [MSG_PENDING_REASON_REASON_POOL] = "outside the pool",
    [MSG_PENDING_REASON_REASON_PRODUCT] = "not matching the product",
    [MSG_PENDING_REASON_REASON_MODEL] = "wrong model",
    [MSG_PENDING_REASON_REASON_VRAM] = "not enough VRAM",
    [MSG_PENDING_REASON_REASON_GPUS] = "not enough free GPUs",
    [MSG_PENDING_REASON_REASON_SITE_NODES] = "sites with too few fitting nodes",
    [MSG_PENDING_REASON_REASON_UNHEALTHY] = "not healthy",
    [MSG_PENDING_REASON_REASON_DRAINING] = "draining",
    [MSG_PENDING_REASON_REASON_PRICE] = "over the price limit",
    [MSG_PENDING_REASON_REASON_CURRENCY] = "priced in another currency",
    [MSG_PENDING_REASON_REASON_LATENCY] = "outside the latency bound",
    [MSG_PENDING_REASON_REASON_ORIGIN] = "without a latency estimate from the origin",
    [MSG_PENDING_REASON_REASON_RESERVED] = "reserved by other jobs",
    [MSG_PENDING_REASON_REASON_INTERCONNECT] = "wrong interconnect",
};

const char *
pending_words(int32_t reason)
{
    if (reason < 0 || (size_t)reason >= sizeof(pending_text) / sizeof(pending_text[0]) ||
        pending_text[reason] == NULL)
        return "for another reason";
    return pending_text[reason];
}

/* Indexes of j->waiting, largest count first (stable). */
static size_t
waiting_order(const msg_job *j, uint32_t *idx, size_t max)
{
    const msg_pending_reason *w = j->waiting.v;
    size_t                    k = 0;

    for (uint32_t i = 0; i < j->waiting.n && k < max; i++) {
        size_t p = k++;

        while (p > 0 && w[idx[p - 1]].nodes < w[i].nodes) {
            idx[p] = idx[p - 1];
            p--;
        }
        idx[p] = i;
    }
    return k;
}

void
job_why_waits(const msg_job *j, char *buf, size_t n)
{
    const msg_pending_reason *w = j->waiting.v;
    uint32_t                  idx[MSG_JOB_WAITING_MAXITEMS];
    size_t                    k = waiting_order(j, idx, MSG_JOB_WAITING_MAXITEMS), used;
    uint64_t                  sum = 0;
    char                      num[32];

    for (size_t i = 0; i < k; i++)
        sum += w[idx[i]].nodes;
    if (k == 0) {
        snprintf(buf, n, "%s", j->nodes_considered ? "every node considered fits; waiting for "
                                                     "the next placement round"
                                                   : "no placement tried yet");
        return;
    }
    fmt_count(num, sizeof(num), j->nodes_considered ? j->nodes_considered : sum);
    used = (size_t)snprintf(buf, n, "%s node%s:", num,
                            (j->nodes_considered ? j->nodes_considered : sum) == 1 ? "" : "s");
    for (size_t i = 0; i < k && used < n; i++) {
        fmt_count(num, sizeof(num), w[idx[i]].nodes);
        used += (size_t)snprintf(buf + used, n - used, "%s %s %s", i ? "," : "", num,
                                 pending_words(w[idx[i]].reason));
    }
}

/* ---- events ------------------------------------------------------------------------------ */

void
job_event_line(const msg_job_event *e, char *buf, size_t n)
{
    char   when[40];
    size_t used;

    fmt_iso8601(when, sizeof(when), e->at_ms);
    used = (size_t)snprintf(buf, n, "%s %s/%s #%" PRIu64 " %s -> %s", when[0] ? when : "-",
                            e->tenant, e->job_id, e->seq,
                            enum_text(&msg_job_event_desc, MSG_JOB_EVENT__EVENT, e->event),
                            enum_text(&msg_job_event_desc, MSG_JOB_EVENT__STATE, e->state));
    if (used < n && e->attempt > 0)
        used += (size_t)snprintf(buf + used, n - used, " attempt=%u", e->attempt);
    if (used < n && e->site[0])
        used += (size_t)snprintf(buf + used, n - used, " site=%s", e->site);
    if (used < n && e->node[0])
        used += (size_t)snprintf(buf + used, n - used, " node=%s", e->node);
    if (used < n && GP_HAS(e, MSG_JOB_EVENT__EXIT_CODE))
        used += (size_t)snprintf(buf + used, n - used, " exit=%d", (int)e->exit_code);
    if (used < n && e->reason[0])
        snprintf(buf + used, n - used, " reason=\"%s\"", e->reason);
}

/* ---- summary -------------------------------------------------------------------------------- */

void
job_tally_add(job_tally *t, const msg_job *j)
{
    uint64_t nodes = j->spec.nodes > 0 ? (uint64_t)j->spec.nodes : 1;

    if (j->state >= 0 && j->state < JOB_NSTATES)
        t->by_state[j->state]++;
    t->total++;
    if (j->state == MSG_JOB_STATE_STARTING || j->state == MSG_JOB_STATE_RUNNING)
        t->gpus_booked += nodes * (uint64_t)(j->spec.gpus_per_node > 0 ? j->spec.gpus_per_node
                                                                       : 0);
}

double
job_util_pct(uint64_t booked, uint64_t healthy_gpus)
{
    return healthy_gpus ? 100.0 * (double)booked / (double)healthy_gpus : 0.0;
}
