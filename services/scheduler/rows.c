/* rows.c -- result rows into messages.  Each SELECT list names its
 * columns after the message's fields, so one reader serves jobs,
 * attempts and events: a column's text is set with gp_msg_set_text (the
 * codec's checks apply to what the database returns too), NULL leaves
 * the field absent.  Two columns need their own form: a job's spec (its
 * msgpack bytes, bytea in hex) and an attempt's GPUs ("0,1,3"). */
#include <libpq-fe.h>
#include <stdlib.h>
#include <string.h>

#include "gp/dbrow.h"
#include "gp/log.h"
#include "plan/endpoints.h"
#include "scheduler.h"

const char sched_job_cols[] =
    "j.id, j.tenant, j.state, j.spec, j.image_digest, j.reason, j.attempts_made, j.preemptions, j.failures, "
    "j.platform_faults, "
    "j.created_ms, j.updated_ms, j.ended_ms, j.exit_code, j.checkpoint_ms, j.checkpoint_step, "
    "j.checkpoint_id, j.progress_ms, j.gpu_ms, "
    "j.waiting, j.nodes_considered";

const char sched_attempt_cols[] =
    "a.job_id, a.attempt, a.rank, a.site, a.node, a.image_digest, a.endpoints, array_to_string(a.gpus, ',') AS gpus, a.state, "
    "a.reason, a.exit_code, a.created_ms, a.started_ms, a.ended_ms, a.checkpoint_ms, a.resume_step, "
    "a.latency_est_ms, a.score, a.score_latency, a.score_price, a.score_packing, "
    "a.score_reliability, a.score_thermal, a.price_micros_per_gpu_hour, a.currency, "
    "a.preempted_by, a.gpu_ms, a.energy_mj";

const char sched_event_cols[] =
    "j.tenant, e.job_id, e.seq, e.event, e.state, e.attempt, e.site, e.node, e.reason, "
    "e.exit_code, e.at_ms";

static int
hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* bytea text output "\x0a1b..." -> the spec it holds */
static gp_err
set_spec(void *msg, const gp_field *f, const char *text)
{
    size_t         n = strlen(text);
    unsigned char *b;
    gp_err         rc;

    if (n < 2 || text[0] != '\\' || text[1] != 'x' || n % 2 != 0)
        return GP_EDECODE;
    b = malloc(n / 2 + 1);
    if (b == NULL)
        return GP_ENOMEM;
    for (size_t i = 2; i < n; i += 2) {
        int hi = hexval(text[i]), lo = hexval(text[i + 1]);

        if (hi < 0 || lo < 0) {
            free(b);
            return GP_EDECODE;
        }
        b[i / 2 - 1] = (unsigned char)(hi << 4 | lo);
    }
    rc = gp_msg_decode(f->sub, b, n / 2 - 1, (char *)msg + f->offset, NULL, 0);
    free(b);
    return rc;
}

static gp_err
set_ints(void *msg, const gp_field *f, const char *text)
{
    gp_arr     *a = (gp_arr *)((char *)msg + f->offset);
    size_t      n = *text != '\0';
    int32_t    *v;
    const char *p = text;

    for (const char *c = text; *c != '\0'; c++)
        n += *c == ',';
    if (n > f->limit)
        return GP_ETOOBIG;
    if (n == 0)
        return GP_EOK;
    v = calloc(n, sizeof(*v));
    if (v == NULL)
        return GP_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        v[i] = (int32_t)strtol(p, (char **)&p, 10);
        p += *p == ',';
    }
    a->v = v;
    a->n = (uint32_t)n;
    return GP_EOK;
}

/* A pending job's reasons as queue.c stores them: "model=3,gpus=2"
 * (reason=nodes, first failed filter first) -> PendingReason[]. */
static gp_err
set_waiting(void *msg, const gp_field *f, const char *text)
{
    gp_arr             *a = (gp_arr *)((char *)msg + f->offset);
    msg_pending_reason *v;
    uint32_t            n = 0;
    const char         *p = text;

    if (*text == '\0')
        return GP_EOK;
    if ((v = calloc(f->limit, sizeof(*v))) == NULL)
        return GP_ENOMEM;
    while (*p != '\0' && n < f->limit) {
        size_t len = strcspn(p, "=");
        int    r = -1;

        for (int k = 0; k < PLACE_REASONS; k++)
            if (strlen(msg_pending_reason_reason_names[k]) == len &&
                strncmp(msg_pending_reason_reason_names[k], p, len) == 0)
                r = k;
        if (r < 0 || p[len] != '=') {
            free(v);
            return GP_EDECODE;
        }
        v[n].reason = r;
        v[n].nodes = (uint32_t)strtoul(p + len + 1, (char **)&p, 10);
        n++;
        p += *p == ',';
    }
    a->v = v;
    a->n = n;
    return GP_EOK;
}

/* The columns the default text form does not fit (gp/dbrow.h's hook). */
static gp_err
set_column(const gp_msg_desc *d, const gp_field *f, void *msg, const char *text)
{
    if (d == &msg_job_desc && strcmp(f->name, "waiting") == 0)
        return set_waiting(msg, f, text);
    if (d == &msg_attempt_desc && strcmp(f->name, "endpoints") == 0)
        return sched_endpoints_parse(text, (gp_arr *)((char *)msg + f->offset)) == 0
                   ? GP_EOK : GP_ENOMEM;
    if (f->type == GP_T_OBJ)
        return set_spec(msg, f, text);
    if (f->type == GP_T_ARR && f->elem == GP_T_I32)
        return set_ints(msg, f, text);
    return GP_ENOTFOUND;
}

gp_err
sched_row_to_msg(const gp_msg_desc *d, const PGresult *res, int row, void *msg)
{
    return gp_dbrow_named_to_msg(d, res, row, msg, set_column);
}
