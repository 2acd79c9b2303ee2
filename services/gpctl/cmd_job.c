/* cmd_job.c -- jobs through the scheduler's API: submit, get jobs, get
 * attempts, describe job, cancel job.  Tenant-scoped operations go to
 * gp.api.<tenant>.job.*; a list without --tenant goes to gp.admin.job.list.
 * Subjects come from the generated operations (gp/op.h). */
#include <stdlib.h>
#include <string.h>

#include "gp/id.h"
#include "gp/limits.h"
#include "gpctl.h"
#include "jobspec.h"
#include "jobview.h"

#define FOUND 100               /* an item callback's "stop: found it" */

/* ---- options ----------------------------------------------------------------------- */

typedef struct job_opts {
    const char          *tenant, *job, *name;
    msg_job_list_request filter;
} job_opts;

/* --tenant, --job, --state, --site, --scope ("--x v" or "--x=v") and one NAME. */
static int
take_job_opt(const char *verb, job_opts *o, const char *flag, const char *val)
{
    char err[GP_ERRBUF_LEN];

    if (strcmp(flag, "--tenant") == 0)
        o->tenant = val;
    else if (strcmp(flag, "--job") == 0)
        o->job = val;
    else if (strcmp(flag, "--site") == 0 && !gp_id_ok(val))
        return usage_error(verb, "--site \"%s\": not a site id ([A-Za-z0-9_-])", val);
    else if (strcmp(flag, "--state") == 0 || strcmp(flag, "--site") == 0) {
        if (gp_msg_set_text(&msg_job_list_request_desc, &o->filter, flag + 2, val, err,
                            sizeof(err)) != GP_EOK)
            return usage_error(verb, "%s %s: %s (states: pending, starting, running, "
                               "succeeded, failed, cancelled)", flag, val, err);
    } else if (strcmp(flag, "--scope") == 0) {
        if (gp_msg_set_text(&msg_job_list_request_desc, &o->filter, "scope", val, err,
                            sizeof(err)) != GP_EOK)
            return usage_error(verb, "--scope %s: %s (own: the tenant's jobs; sites: the jobs "
                               "that ran on its sites)", val, err);
    } else
        return usage_error(verb, "unknown option %s", flag);
    return GPCTL_OK;
}

static int
check_ids(const char *verb, const job_opts *o)
{
    if (o->tenant != NULL && !gp_id_ok(o->tenant))
        return usage_error(verb, "--tenant \"%s\": not a tenant id ([A-Za-z0-9_-])", o->tenant);
    if (o->job != NULL && !gp_id_ok(o->job))
        return usage_error(verb, "\"%s\": not a job id ([A-Za-z0-9_-])", o->job);
    return GPCTL_OK;
}

static int
parse_job_opts(const char *verb, int argc, char **argv, job_opts *o)
{
    int rc = GPCTL_OK;

    memset(o, 0, sizeof(*o));
    for (int i = 0; i < argc && rc == GPCTL_OK; i++) {
        char *eq = strchr(argv[i], '=');
        char  flag[64];

        if (argv[i][0] != '-') {
            if (o->name != NULL)
                return usage_error(verb, "unexpected argument \"%s\"", argv[i]);
            o->name = argv[i];
            continue;
        }
        snprintf(flag, sizeof(flag), "%.*s", eq ? (int)(eq - argv[i]) : (int)strlen(argv[i]),
                 argv[i]);
        if (eq == NULL && i + 1 >= argc)
            return usage_error(verb, "%s needs a value", flag);
        rc = take_job_opt(verb, o, flag, eq != NULL ? eq + 1 : argv[++i]);
    }
    if (o->name != NULL && o->job == NULL)
        o->job = o->name;
    return rc == GPCTL_OK ? check_ids(verb, o) : rc;
}

/* ---- calls --------------------------------------------------------------------------- */

static int
subject_of(const gp_op *op, const char *tenant, char *buf, size_t n)
{
    gp_err rc = tenant != NULL ? gp_op_subjectf(op, buf, n, tenant) : gp_op_subjectf(op, buf, n);

    if (rc != GP_EOK)
        fprintf(stderr, "gpctl: %s: cannot build the subject of %s: %s\n", gp_err_name(rc),
                op->id, gp_err_str(rc));
    return rc == GP_EOK ? GPCTL_OK : GPCTL_USAGE;
}

/* One page; fn per item.  Errors go into why when given, else printed. */
static int
job_page(gpctl *c, const char *subject, msg_job_list_request *req, msg_job_list *list,
         job_fn *fn, void *arg, char *why, size_t wlen)
{
    char   detail[GP_ERRBUF_LEN];
    bool   transport = false;
    gp_err err = ctl_call_raw(c, subject, &msg_job_list_request_desc, req, &msg_job_list_desc,
                              list, detail, sizeof(detail), &transport);
    int    rc = GPCTL_OK;

    if (err != GP_EOK && why != NULL)
        return snprintf(why, wlen, "%s: %s", gp_err_name(err), detail),
               ctl_exit_code(err, transport);
    if (err != GP_EOK)
        return ctl_report(c, subject, err, transport, detail);
    for (uint32_t i = 0; i < list->items.n && rc == GPCTL_OK; i++)
        rc = fn(arg, (const msg_job *)list->items.v + i);
    if (rc == GPCTL_OK && list->next[0] != '\0' &&
        (list->items.n == 0 || strcmp(list->next, req->after) == 0)) {
        fprintf(stderr, "gpctl: INTERNAL: %s returned a cursor that does not advance\n", subject);
        return GPCTL_FAIL;
    }
    snprintf(req->after, sizeof(req->after), "%s", list->next);
    return rc;
}

int
job_list(gpctl *c, const char *tenant, const msg_job_list_request *filter, job_fn *fn,
         void *arg, char *why, size_t wlen)
{
    char                 subject[GP_MAX_SUBJECT + 1];
    msg_job_list_request req = *filter;
    msg_job_list         list = {0};
    int                  rc = subject_of(tenant ? GP_OP_API_JOB_LIST : GP_OP_ADMIN_JOB_LIST,
                                         tenant, subject, sizeof(subject));

    req.limit = MSG_JOB_LIST_ITEMS_MAXITEMS;
    req.after[0] = '\0';
    while (rc == GPCTL_OK) {
        rc = job_page(c, subject, &req, &list, fn, arg, why, wlen);
        gp_msg_clear(&msg_job_list_desc, &list);
        if (req.after[0] == '\0')
            break;
    }
    return rc;
}

typedef struct finder {
    const char *id;
    char        tenant[MSG_JOB_TENANT_MAXLEN + 1];
} finder;

static int
find_one(void *arg, const msg_job *j)
{
    finder *f = arg;

    if (strcmp(j->id, f->id) != 0)
        return GPCTL_OK;
    snprintf(f->tenant, sizeof(f->tenant), "%s", j->tenant);
    return FOUND;
}

/* Without --tenant: the job's tenant from the admin list (every page,
 * until found). */
static int
find_tenant(gpctl *c, const char *id, char *tenant, size_t n)
{
    finder               f = {.id = id};
    msg_job_list_request all = {0};
    int                  rc = job_list(c, NULL, &all, find_one, &f, NULL, 0);

    if (rc == FOUND) {
        snprintf(tenant, n, "%s", f.tenant);
        return GPCTL_OK;
    }
    if (rc == GPCTL_OK)
        fprintf(stderr, "gpctl: NOTFOUND: job %s: no such job (of any tenant)\n", id);
    return rc == GPCTL_OK ? GPCTL_FAIL : rc;
}

/* get or cancel one job of a tenant (found when tenant is NULL). */
static int
job_call(gpctl *c, const gp_op *op, const char *tenant, const char *id, msg_job *out)
{
    char           subject[GP_MAX_SUBJECT + 1], found[MSG_JOB_TENANT_MAXLEN + 1];
    msg_id_request req = {0};
    int            rc = GPCTL_OK;

    if (tenant == NULL && (rc = find_tenant(c, id, found, sizeof(found))) == GPCTL_OK)
        tenant = found;
    if (rc == GPCTL_OK)
        rc = subject_of(op, tenant, subject, sizeof(subject));
    if (rc != GPCTL_OK)
        return rc;
    snprintf(req.id, sizeof(req.id), "%s", id);
    return ctl_call(c, subject, &msg_id_request_desc, &req, &msg_job_desc, out);
}

static int
print_json(const gp_msg_desc *d, const void *msg)
{
    gp_buf b;
    gp_err rc;

    gp_buf_init(&b, 0);
    rc = gp_msg_to_json(d, msg, &b);
    if (rc == GP_EOK)
        printf("%s\n", b.p);
    else
        fprintf(stderr, "gpctl: %s: cannot format JSON\n", gp_err_name(rc));
    gp_buf_fini(&b);
    return rc == GP_EOK ? GPCTL_OK : GPCTL_FAIL;
}

/* ---- submit ------------------------------------------------------------------------------- */

static void
print_submitted(const msg_job *j)
{
    char gpus[32];

    job_gpus(j, gpus, sizeof(gpus));
    printf("job/%s submitted (tenant %s, %s GPUs): %s\n", j->id, j->tenant, gpus,
           enum_text(&msg_job_desc, MSG_JOB__STATE, j->state));
    if (j->reason[0] != '\0')
        printf("  %s\n", j->reason);
}

int
cmd_submit(gpctl *c, int argc, char **argv)
{
    char         subject[GP_MAX_SUBJECT + 1], err[512];
    msg_job_spec spec = {0};
    msg_job      job = {0};
    const char  *tenant;
    int          rc = GPCTL_OK;

    if (jobspec_args(argc, argv, &spec, &tenant, err, sizeof(err)) != 0)
        rc = usage_error("submit", "%s", err);
    if (rc == GPCTL_OK)
        rc = subject_of(GP_OP_API_JOB_SUBMIT, tenant, subject, sizeof(subject));
    if (rc == GPCTL_OK)
        rc = ctl_connect(c);
    if (rc == GPCTL_OK)
        rc = ctl_call(c, subject, &msg_job_spec_desc, &spec, &msg_job_desc, &job);
    if (rc == GPCTL_OK && c->out == OUT_JSON)
        rc = print_json(&msg_job_desc, &job);
    else if (rc == GPCTL_OK)
        print_submitted(&job);
    gp_msg_clear(&msg_job_spec_desc, &spec);
    gp_msg_clear(&msg_job_desc, &job);
    return rc;
}

/* ---- get jobs ------------------------------------------------------------------------------- */

typedef struct job_rows {
    gpctl    *c;
    table     t;
    json_list j;
    gp_buf    b;
} job_rows;

/* -o wide: a listed job that has run gets its attempts from a get (lists
 * carry none), so SITE/NODE is filled: one more request per such job. */
static int
add_wide(job_rows *r, const msg_job *j)
{
    msg_job full = {0};
    int     rc;

    if (j->attempts.n > 0 || j->attempts_made == 0)
        return job_row(&r->t, j, r->c->now_ms) == 0 ? GPCTL_OK : GPCTL_FAIL;
    rc = job_call(r->c, GP_OP_API_JOB_GET, j->tenant, j->id, &full);
    if (rc == GPCTL_OK)
        rc = job_row(&r->t, &full, r->c->now_ms) == 0 ? GPCTL_OK : GPCTL_FAIL;
    gp_msg_clear(&msg_job_desc, &full);
    return rc;
}

static int
add_job(void *arg, const msg_job *j)
{
    job_rows *r = arg;

    if (r->c->out == OUT_WIDE)
        return add_wide(r, j);
    if (r->c->out != OUT_JSON)
        return job_row(&r->t, j, r->c->now_ms) == 0 ? GPCTL_OK : GPCTL_FAIL;
    gp_buf_reset(&r->b);
    if (gp_msg_to_json(&msg_job_desc, j, &r->b) != GP_EOK)
        return GPCTL_FAIL;
    json_list_item(&r->j, r->b.p, r->b.n);
    return GPCTL_OK;
}

static void
rows_end(job_rows *r, int rc, const char *what)
{
    if (r->c->out == OUT_JSON)
        json_list_end(&r->j);
    else if (rc == GPCTL_OK && r->t.nrows == 0)
        fprintf(stderr, "No %s found.\n", what);
    else if (rc == GPCTL_OK) {
        table_print(&r->t, stdout, 0);
        fflush(stdout);
        fprintf(stderr, "%zu %s\n", r->t.nrows, what);
    }
    table_free(&r->t);
    gp_buf_fini(&r->b);
}

static void
rows_begin(job_rows *r, gpctl *c, const char *const *heads)
{
    r->c = c;
    table_init(&r->t, heads);
    gp_buf_init(&r->b, 0);
    if (c->out == OUT_JSON)
        json_list_begin(&r->j, stdout);
}

static int
get_one_job(gpctl *c, job_rows *r, const job_opts *o)
{
    msg_job job = {0};
    int     rc = job_call(c, GP_OP_API_JOB_GET, o->tenant, o->job, &job);

    if (rc == GPCTL_OK)
        rc = add_job(r, &job);
    gp_msg_clear(&msg_job_desc, &job);
    return rc;
}

int
cmd_get_jobs(gpctl *c, int argc, char **argv)
{
    job_opts o;
    job_rows r;
    int      rc = parse_job_opts("get", argc, argv, &o);

    if (rc == GPCTL_OK && o.tenant != NULL)
        snprintf(o.filter.tenant, sizeof(o.filter.tenant), "%s", o.tenant);
    if (rc != GPCTL_OK || (rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    rows_begin(&r, c, job_heads);
    if (o.job != NULL)
        rc = get_one_job(c, &r, &o);
    else
        rc = job_list(c, o.tenant, &o.filter, add_job, &r, NULL, 0);
    rows_end(&r, rc, "jobs");
    return rc;
}

/* ---- get attempts ------------------------------------------------------------------------------ */

int
cmd_get_attempts(gpctl *c, int argc, char **argv)
{
    job_opts o;
    job_rows r;
    msg_job  job = {0};
    int      rc = parse_job_opts("get", argc, argv, &o);

    if (rc == GPCTL_OK && o.job == NULL)
        rc = usage_error("get", "attempts need --job ID");
    if (rc != GPCTL_OK || (rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    rc = job_call(c, GP_OP_API_JOB_GET, o.tenant, o.job, &job);
    rows_begin(&r, c, attempt_heads);
    for (uint32_t i = 0; rc == GPCTL_OK && i < job.attempts.n; i++) {
        const msg_attempt *a = (const msg_attempt *)job.attempts.v + i;

        if (c->out != OUT_JSON) {
            rc = attempt_row(&r.t, a) == 0 ? GPCTL_OK : GPCTL_FAIL;
            continue;
        }
        gp_buf_reset(&r.b);
        rc = gp_msg_to_json(&msg_attempt_desc, a, &r.b) == GP_EOK ? GPCTL_OK : GPCTL_FAIL;
        if (rc == GPCTL_OK)
            json_list_item(&r.j, r.b.p, r.b.n);
    }
    rows_end(&r, rc, "attempts");
    gp_msg_clear(&msg_job_desc, &job);
    return rc;
}

/* ---- describe job (the fetch) / cancel job ------------------------------------------------------------------ */

/* The job only: cmd_describe.c prints it (it calls this file, never the
 * other way). */
int
job_describe_get(gpctl *c, int argc, char **argv, msg_job *out)
{
    job_opts o;
    int      rc = parse_job_opts("describe", argc, argv, &o);

    memset(out, 0, sizeof(*out));
    if (rc == GPCTL_OK && o.job == NULL)
        rc = usage_error("describe", "missing job ID");
    if (rc != GPCTL_OK || (rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    return job_call(c, GP_OP_API_JOB_GET, o.tenant, o.job, out);
}

int
cmd_cancel(gpctl *c, int argc, char **argv)
{
    job_opts o;
    msg_job  job = {0};
    int      rc;

    if (argc < 1 || strcmp(argv[0], "job") != 0)
        return usage_error("cancel", "expected: cancel job ID --tenant T");
    if ((rc = parse_job_opts("cancel", argc - 1, argv + 1, &o)) != GPCTL_OK)
        return rc;
    if (o.job == NULL)
        return usage_error("cancel", "missing job ID");
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    rc = job_call(c, GP_OP_API_JOB_CANCEL, o.tenant, o.job, &job);
    if (rc == GPCTL_OK && c->out == OUT_JSON)
        rc = print_json(&msg_job_desc, &job);
    else if (rc == GPCTL_OK)
        printf("job/%s cancel requested: %s%s%s\n", job.id,
               enum_text(&msg_job_desc, MSG_JOB__STATE, job.state), job.reason[0] ? " - " : "",
               job.reason);
    gp_msg_clear(&msg_job_desc, &job);
    return rc;
}
