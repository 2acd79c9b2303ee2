/* api_test.c -- gridpool-scheduler's job API against real NATS,
 * Redis and PostgreSQL, with a real gridpool-registry for the tenants:
 * submit (every field rule refused with its typed error naming the
 * field), idempotent resubmission and CONFLICT on another spec, unknown
 * tenant, get scoped by tenant, list paging and filters (also the admin
 * list), cancel of a pending job and of a job with a live attempt (the
 * agent gets a stop signal), the events in the stream JOBS read back by a
 * JetStream consumer, the outbox republishing a row left unpublished, and
 * two scheduler instances giving one job per client_request_id.
 *
 * The test's own SQL (inserting attempts and outbox rows no API writes
 * yet) uses blocking libpq on its own connection. */
#include <libpq-fe.h>

#include "msg_gen.h"
#include "test_stack.h"

#define OUTBOX_MS 200
#define GRACE_MS  1000

static struct ev_loop *loop;
static gp_bus         *bus;
static PGconn         *pg;
static int             http_a, http_b;

/* ---- helpers ------------------------------------------------------------- */

static gp_err
call(const gp_op *op, const char *tenant, const gp_msg_desc *ind, const void *in,
     const gp_msg_desc *outd, void *out, char *detail)
{
    char subj[GP_MAX_SUBJECT];

    if (gp_op_subjectf(op, subj, sizeof(subj), tenant) != GP_EOK)
        snprintf(subj, sizeof(subj), "gp.api.%s.job.submit", tenant);   /* a bad token on purpose */
    detail[0] = '\0';
    return tl_call(loop, bus, subj, ind, in, outd, out, 5000, detail, GP_ERRBUF_LEN);
}

static gp_err
submit(const char *tenant, const msg_job_spec *sp, msg_job *job, char *detail)
{
    gp_msg_clear(&msg_job_desc, job);
    return call(GP_OP_API_JOB_SUBMIT, tenant, &msg_job_spec_desc, sp, &msg_job_desc, job, detail);
}

static gp_err
job_req(const gp_op *op, const char *tenant, const char *id, msg_job *job, char *detail)
{
    msg_id_request q = {0};

    snprintf(q.id, sizeof(q.id), "%s", id);
    gp_msg_clear(&msg_job_desc, job);
    return call(op, tenant, &msg_id_request_desc, &q, &msg_job_desc, job, detail);
}

static gp_err
list(const gp_op *op, const char *tenant, const msg_job_list_request *q, msg_job_list *page,
     char *detail)
{
    gp_msg_clear(&msg_job_list_desc, page);
    return call(op, tenant, &msg_job_list_request_desc, q, &msg_job_list_desc, page, detail);
}

static void
base_spec(msg_job_spec *sp)
{
    *sp = (msg_job_spec){0};
    snprintf(sp->command, sizeof(sp->command), "sim:run=300s exit=0");
    sp->gpus_per_node = 1;
}

static char *
sql1(const char *q)
{
    static char out[256];
    PGresult   *r = PQexec(pg, q);

    out[0] = '\0';
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0)
        snprintf(out, sizeof(out), "%s", PQgetvalue(r, 0, 0));
    else if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK)
        snprintf(out, sizeof(out), "ERROR: %s", PQresultErrorMessage(r));
    PQclear(r);
    return out;
}

static void
run_for(double s)
{
    int never = 0;

    tl_run_until(loop, &never, s);
}

static pid_t
start(const char *name, int http, const char *const *extra)
{
    char        bin[512], port[16];
    const char *argv[16] = {bin, "--http-port", port};
    int         n = 3;

    snprintf(bin, sizeof(bin), "%s/bin/gridpool-%s", tl_env("GP_BUILD"), name);
    snprintf(port, sizeof(port), "%d", http);
    for (; extra != NULL && *extra != NULL && n < 15; extra++)
        argv[n++] = *extra;
    argv[n] = NULL;
    return tl_spawn((char *const *)argv);
}

static bool
healthy(const char *service)
{
    msg_health_request hq = {0};
    msg_health         h = {0};
    char               subj[64], d[GP_ERRBUF_LEN];
    bool               up;

    snprintf(subj, sizeof(subj), "gp.int.health.%s", service);
    up = tl_call(loop, bus, subj, &msg_health_request_desc, &hq, &msg_health_desc, &h, 1000, d,
                 sizeof(d)) == GP_EOK && h.pg == MSG_HEALTH_PG_UP;
    gp_msg_clear(&msg_health_desc, &h);
    return up;
}

static void
make_tenant(const char *id)
{
    msg_tenant t = {0}, got = {0};
    char       d[GP_ERRBUF_LEN];
    gp_err     rc;

    snprintf(t.id, sizeof(t.id), "%s", id);
    t.kind = MSG_TENANT_KIND_CUSTOMER;
    rc = tl_call(loop, bus, "gp.admin.tenant.create", &msg_tenant_desc, &t, &msg_tenant_desc, &got,
                 5000, d, sizeof(d));
    T_OKM(rc == GP_EOK, "tenant %s created (%s %s)", id, gp_err_name(rc), d);
}

/* ---- submit: valid, invalid field by field ----------------------------------- */

static char acme_job[GP_MAX_ID + 1];

static void
test_submit_valid(void)
{
    msg_job_spec sp;
    msg_job      job = {0};
    char         d[GP_ERRBUF_LEN];
    gp_err       rc;

    base_spec(&sp);
    rc = submit("acme", &sp, &job, d);
    T_OKM(rc == GP_EOK, "valid submit accepted (%s %s)", gp_err_name(rc), d);
    T_OKM(strncmp(job.id, "j-", 2) == 0 && strlen(job.id) == 18 &&
          strspn(job.id + 2, "0123456789abcdef") == 16, "job id j- + 16 hex (%s)", job.id);
    T_OK(strcmp(job.tenant, "acme") == 0 && job.state == MSG_JOB_STATE_PENDING);
    T_OKM(job.spec.nodes == 1 && job.spec.priority == 100 && job.spec.max_attempts == 3,
          "defaults nodes 1, priority 100, max_attempts 3 (%d %d %u)", job.spec.nodes,
          job.spec.priority, job.spec.max_attempts);
    T_OK(job.created_ms > 0 && job.spec.max_run_s == 0);
    snprintf(acme_job, sizeof(acme_job), "%s", job.id);
    gp_msg_clear(&msg_job_desc, &job);
}

typedef void spec_fn(msg_job_spec *sp);

static void set_env(msg_job_spec *sp, const char *item)
{
    static char items[1][MSG_JOB_SPEC_ENV_ITEM_MAXLEN + 1];

    snprintf(items[0], sizeof(items[0]), "%s", item);
    sp->env.v = items;
    sp->env.n = 1;
}
static void bad_command(msg_job_spec *sp) { sp->command[0] = '\0'; }
static void host_command(msg_job_spec *sp) { snprintf(sp->command, sizeof(sp->command), "nvidia-smi"); }
static void sim_with_image(msg_job_spec *sp) { snprintf(sp->image, sizeof(sp->image), "reg.io/a:1"); }
static void short_image(msg_job_spec *sp)
{
    sp->command[0] = '\0';
    snprintf(sp->image, sizeof(sp->image), "busybox:latest");
}
static void path_image(msg_job_spec *sp)
{
    sp->command[0] = '\0';
    snprintf(sp->image, sizeof(sp->image), "oci:/var/lib/x");
}
static void bad_digest(msg_job_spec *sp)
{
    sp->command[0] = '\0';
    snprintf(sp->image, sizeof(sp->image), "reg.io/a@sha256:1234");
}
static void args_without_image(msg_job_spec *sp)
{
    static char a[1][MSG_JOB_SPEC_ARGS_ITEM_MAXLEN + 1] = {"x"};

    sp->args.v = a;
    sp->args.n = 1;
}
static void bad_env_name(msg_job_spec *sp) { set_env(sp, "1X=a"); }
static void bad_env_noeq(msg_job_spec *sp) { set_env(sp, "NOVALUE"); }
static void bad_latency(msg_job_spec *sp) { sp->max_latency_ms = 30; }
static void bad_latency_lon(msg_job_spec *sp)
{
    sp->max_latency_ms = 30;
    sp->origin_lat = 52.5;
    GP_SET_HAS(sp, MSG_JOB_SPEC__ORIGIN_LAT);
}
static void bad_price(msg_job_spec *sp) { sp->max_price_micros_per_gpu_hour = 5; }
static void bad_currency(msg_job_spec *sp)
{
    sp->max_price_micros_per_gpu_hour = 5;
    snprintf(sp->currency, sizeof(sp->currency), "eur");
}
static void bad_pool(msg_job_spec *sp) { snprintf(sp->pool, sizeof(sp->pool), "a.b"); }
static void bad_product(msg_job_spec *sp) { snprintf(sp->product, sizeof(sp->product), "a b"); }
static void bad_crid(msg_job_spec *sp)
{
    snprintf(sp->client_request_id, sizeof(sp->client_request_id), "x*y");
}
static void bad_model(msg_job_spec *sp)
{
    static char models[1][MSG_JOB_SPEC_GPU_MODELS_ITEM_MAXLEN + 1];

    models[0][0] = '\0';
    sp->gpu_models.v = models;
    sp->gpu_models.n = 1;
}
static void bad_product_pool(msg_job_spec *sp)
{
    snprintf(sp->product, sizeof(sp->product), "h100-eu");
    snprintf(sp->pool, sizeof(sp->pool), "eu");
}
static void bad_product_vram(msg_job_spec *sp)
{
    snprintf(sp->product, sizeof(sp->product), "h100-eu");
    sp->min_vram_mb = 40000;
}

static void
test_submit_invalid(void)
{
    /* The schema's types and bounds are the codec's (tests/unit/shared/codec_test.c);
     * these are the scheduler's own rules. */
    static const struct {
        const char *rule;
        spec_fn    *fn;
        gp_err      code;
        const char *field;
        const char *tenant;
    } cases[] = {
        {"no command, no image", bad_command, GP_EMISSING, "image", "acme"},
        {"a host command without an image", host_command, GP_EMISSING, "image", "acme"},
        {"a sim: command with an image", sim_with_image, GP_EINVAL, "command", "acme"},
        {"a short image name", short_image, GP_EINVAL, "image", "acme"},
        {"an image naming a node path", path_image, GP_EINVAL, "image", "acme"},
        {"an image with a bad digest", bad_digest, GP_EINVAL, "image", "acme"},
        {"args without an image", args_without_image, GP_EINVAL, "args", "acme"},
        {"env name starting with a digit", bad_env_name, GP_EINVAL, "env", "acme"},
        {"env item without =", bad_env_noeq, GP_EINVAL, "env", "acme"},
        {"max_latency_ms without origin", bad_latency, GP_EMISSING, "origin_lat", "acme"},
        {"max_latency_ms without origin_lon", bad_latency_lon, GP_EMISSING, "origin_lon", "acme"},
        {"max_price without currency", bad_price, GP_EMISSING, "currency", "acme"},
        {"currency not upper-case", bad_currency, GP_EINVAL, "currency", "acme"},
        {"pool not an id", bad_pool, GP_EINVAL, "pool", "acme"},
        {"product not an id", bad_product, GP_EINVAL, "product", "acme"},
        {"client_request_id not an id", bad_crid, GP_EINVAL, "client_request_id", "acme"},
        {"empty gpu model", bad_model, GP_EINVAL, "gpu_models", "acme"},
        {"product with pool", bad_product_pool, GP_EINVAL, "product", "acme"},
        {"product with min_vram_mb", bad_product_vram, GP_EINVAL, "product", "acme"},
        {"tenant not an id", NULL, GP_EINVAL, "tenant", "ac$me"},
    };
    msg_job job = {0};
    char    d[GP_ERRBUF_LEN];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        msg_job_spec sp;
        gp_err       rc;
        size_t       fl = strlen(cases[i].field);

        base_spec(&sp);
        if (cases[i].fn != NULL)
            cases[i].fn(&sp);
        rc = submit(cases[i].tenant, &sp, &job, d);
        T_OKM(rc == cases[i].code && strncmp(d, cases[i].field, fl) == 0 &&
              (d[fl] == ':' || d[fl] == ' '),
              "%s -> %s naming %s (got %s: %s)", cases[i].rule, gp_err_name(cases[i].code),
              cases[i].field, gp_err_name(rc), d);
    }
    gp_msg_clear(&msg_job_desc, &job);
    T_OKM(atoi(sql1("SELECT count(*) FROM jobs")) == 1, "nothing stored for refused specs");
}

/* ---- idempotency, tenants ------------------------------------------------------- */

static void
test_idempotent(void)
{
    msg_job_spec sp;
    msg_job      a = {0}, b = {0};
    char         d[GP_ERRBUF_LEN], first[GP_MAX_ID + 1];
    gp_err       rc;

    base_spec(&sp);
    snprintf(sp.client_request_id, sizeof(sp.client_request_id), "req-1");
    T_OK(submit("acme", &sp, &a, d) == GP_EOK);
    snprintf(first, sizeof(first), "%s", a.id);
    sp.priority = 100;                    /* the default, now explicit: the same job */
    GP_SET_HAS(&sp, MSG_JOB_SPEC__PRIORITY);
    rc = submit("acme", &sp, &b, d);
    T_OKM(rc == GP_EOK && strcmp(b.id, first) == 0, "resubmission returns the same job (%s %s vs %s)",
          gp_err_name(rc), b.id, first);
    T_OKM(strcmp(sql1("SELECT count(*) FROM jobs WHERE client_request_id = 'req-1'"), "1") == 0,
          "one row for the key");
    T_OKM(strcmp(sql1("SELECT count(*) FROM job_events e JOIN jobs j ON j.id = e.job_id "
                      "WHERE j.client_request_id = 'req-1'"), "1") == 0,
          "one submitted event for the key");
    sp.gpus_per_node = 2;
    rc = submit("acme", &sp, &b, d);
    T_OKM(rc == GP_ECONFLICT && strncmp(d, "client_request_id", 17) == 0,
          "same key, other spec -> CONFLICT naming client_request_id (%s: %s)", gp_err_name(rc), d);
    sp.gpus_per_node = 1;
    rc = submit("other", &sp, &b, d);
    T_OKM(rc == GP_EOK && strcmp(b.id, first) != 0, "the key is per tenant (%s)", gp_err_name(rc));
    rc = submit("nosuch", &sp, &b, d);
    T_OKM(rc == GP_ENOTFOUND && strncmp(d, "tenant", 6) == 0,
          "unknown tenant -> NOTFOUND naming tenant (%s: %s)", gp_err_name(rc), d);
    gp_msg_clear(&msg_job_desc, &a);
    gp_msg_clear(&msg_job_desc, &b);
}

/* ---- get ------------------------------------------------------------------------- */

static void
test_get(void)
{
    msg_job        job = {0};
    msg_job_event *ev;
    char           d[GP_ERRBUF_LEN];
    gp_err         rc;

    rc = job_req(GP_OP_API_JOB_GET, "acme", acme_job, &job, d);
    ev = job.events.v;
    T_OKM(rc == GP_EOK && strcmp(job.id, acme_job) == 0, "get own job (%s %s)", gp_err_name(rc), d);
    T_OKM(job.events.n == 1 && ev[0].seq == 1 && ev[0].event == MSG_JOB_EVENT_EVENT_SUBMITTED &&
          ev[0].state == MSG_JOB_EVENT_STATE_PENDING && strcmp(ev[0].tenant, "acme") == 0,
          "get carries the submitted event (%u)", job.events.n);
    T_OK(job.attempts.n == 0 && job.spec.gpus_per_node == 1);
    rc = job_req(GP_OP_API_JOB_GET, "other", acme_job, &job, d);
    T_OKM(rc == GP_ENOTFOUND, "another tenant's job -> NOTFOUND (%s)", gp_err_name(rc));
    rc = job_req(GP_OP_API_JOB_GET, "acme", "j-0000000000000000", &job, d);
    T_OKM(rc == GP_ENOTFOUND, "unknown job -> NOTFOUND (%s)", gp_err_name(rc));
    gp_msg_clear(&msg_job_desc, &job);
}

/* ---- list --------------------------------------------------------------------------- */

static char lister_jobs[5][GP_MAX_ID + 1];

static void
test_list(void)
{
    static char  env[1][MSG_JOB_SPEC_ENV_ITEM_MAXLEN + 1] = {"SECRET=x"};
    msg_job_spec sp;
    msg_job      job = {0};
    msg_job_list page = {0};
    msg_job_list_request q = {0};
    char         d[GP_ERRBUF_LEN], prev[GP_MAX_ID + 1] = "", sql[256];
    int          seen = 0, pages = 0;
    bool         ordered = true, no_env = true;
    gp_err       rc;

    base_spec(&sp);
    sp.env.v = env;
    sp.env.n = 1;
    for (int i = 0; i < 5; i++) {
        T_OK(submit("lister", &sp, &job, d) == GP_EOK);
        snprintf(lister_jobs[i], sizeof(lister_jobs[i]), "%s", job.id);
    }
    q.limit = 2;
    do {
        msg_job *it;

        rc = list(GP_OP_API_JOB_LIST, "lister", &q, &page, d);
        it = page.items.v;
        for (uint32_t i = 0; rc == GP_EOK && i < page.items.n; i++) {
            ordered = ordered && strcmp(it[i].id, prev) > 0 && strcmp(it[i].tenant, "lister") == 0;
            no_env = no_env && it[i].spec.env.n == 0 && it[i].events.n == 0;
            snprintf(prev, sizeof(prev), "%s", it[i].id);
            seen++;
        }
        snprintf(q.after, sizeof(q.after), "%s", page.next);
        pages++;
    } while (rc == GP_EOK && page.next[0] != '\0' && pages < 10);
    T_OKM(rc == GP_EOK && seen == 5 && pages == 3, "5 jobs in pages of 2 (%d jobs, %d pages, %s)",
          seen, pages, gp_err_name(rc));
    T_OKM(ordered, "pages ordered by id, the tenant's jobs only");
    T_OKM(no_env, "list items without env and events");

    /* filters: state, site (an attempt there), tenant on the admin list */
    snprintf(sql, sizeof(sql), "INSERT INTO attempts (job_id, attempt, site, node, gpus, state, created_ms) "
             "VALUES ('%s', 1, 's9', 'n9', '{0,1}', 'running', 1)", lister_jobs[3]);
    T_OKM(sql1(sql)[0] == '\0', "attempt row inserted");
    q = (msg_job_list_request){0};
    snprintf(q.site, sizeof(q.site), "s9");
    rc = list(GP_OP_API_JOB_LIST, "lister", &q, &page, d);
    T_OKM(rc == GP_EOK && page.items.n == 1 &&
          strcmp(((msg_job *)page.items.v)[0].id, lister_jobs[3]) == 0,
          "site filter: the job with an attempt there (%u)", page.items.n);
    q = (msg_job_list_request){0};
    snprintf(q.tenant, sizeof(q.tenant), "lister");
    rc = list(GP_OP_ADMIN_JOB_LIST, NULL, &q, &page, d);
    T_OKM(rc == GP_EOK && page.items.n == 5, "admin list, tenant filter (%u)", page.items.n);
    q = (msg_job_list_request){0};
    rc = list(GP_OP_ADMIN_JOB_LIST, NULL, &q, &page, d);
    T_OKM(rc == GP_EOK && page.items.n >= 8, "admin list: every tenant (%u)", page.items.n);
    q = (msg_job_list_request){0};                 /* limit 0: the largest page */
    rc = list(GP_OP_API_JOB_LIST, "lister", &q, &page, d);
    T_OKM(rc == GP_EOK && page.items.n == 5 && page.next[0] == '\0',
          "limit 0: one page of all 5, no next (%u)", page.items.n);
    rc = list(GP_OP_API_JOB_LIST, "other", &q, &page, d);
    T_OKM(rc == GP_EOK && page.items.n == 1, "another tenant sees only its own (%u)", page.items.n);
    gp_msg_clear(&msg_job_desc, &job);
    gp_msg_clear(&msg_job_list_desc, &page);
}

/* ---- cancel ------------------------------------------------------------------------- */

typedef struct agent_rec {
    int                n;
    msg_attempt_signal sig;
} agent_rec;

/* Plays the agent of node n9: answers the stop signal. */
static void
on_signal(void *arg, const gp_bus_msg *m)
{
    agent_rec      *a = arg;
    msg_attempt_ack ack = {.attempt = 1};
    gp_buf          b;

    if (gp_msg_decode(&msg_attempt_signal_desc, m->data, m->len, &a->sig, NULL, 0) == GP_EOK)
        a->n++;
    snprintf(ack.job_id, sizeof(ack.job_id), "%s", a->sig.job_id);
    gp_buf_init(&b, 4096);
    gp_msg_encode(&msg_attempt_ack_desc, &ack, &b);
    if (m->reply != NULL)
        gp_bus_pub(bus, m->reply, NULL, b.p, b.n);
    gp_buf_fini(&b);
}

static void
test_cancel(void)
{
    msg_job          job = {0};
    msg_job_list     page = {0};
    msg_job_list_request q = {0};
    agent_rec        agent = {0};
    gp_bus_sub      *sub = NULL;
    msg_job_event   *ev;
    msg_attempt     *at;
    char             d[GP_ERRBUF_LEN];
    gp_err           rc;

    rc = job_req(GP_OP_API_JOB_CANCEL, "other", acme_job, &job, d);
    T_OKM(rc == GP_ENOTFOUND, "another tenant cannot cancel (%s)", gp_err_name(rc));
    rc = job_req(GP_OP_API_JOB_CANCEL, "acme", acme_job, &job, d);
    T_OKM(rc == GP_EOK && job.state == MSG_JOB_STATE_CANCELLED && job.ended_ms > 0,
          "pending job cancelled at once (%s %s)", gp_err_name(rc), d);
    rc = job_req(GP_OP_API_JOB_GET, "acme", acme_job, &job, d);
    ev = job.events.v;
    T_OKM(rc == GP_EOK && job.events.n == 2 && ev[1].seq == 2 &&
          ev[1].event == MSG_JOB_EVENT_EVENT_CANCELLED && ev[1].state == MSG_JOB_EVENT_STATE_CANCELLED,
          "cancelled event recorded, seq 2 (%u)", job.events.n);
    rc = job_req(GP_OP_API_JOB_CANCEL, "acme", acme_job, &job, d);
    T_OKM(rc == GP_EOK && job.state == MSG_JOB_STATE_CANCELLED, "cancel again: unchanged");
    T_OKM(strcmp(sql1("SELECT max(seq) FROM job_events WHERE job_id = (SELECT id FROM jobs "
                      "WHERE state = 'cancelled' AND tenant = 'acme')"), "2") == 0,
          "no second cancelled event");

    /* a job with a live attempt: the attempt ends, the agent gets a stop */
    T_OK(gp_bus_sub_new(bus, "gp.node.s9.n9.cmd.signal", NULL, on_signal, &agent, &sub) == GP_EOK);
    run_for(0.2);
    T_OK(sql1("UPDATE jobs SET state = 'running' WHERE tenant = 'lister' AND id IN "
              "(SELECT job_id FROM attempts)")[0] == '\0');
    rc = job_req(GP_OP_API_JOB_CANCEL, "lister", lister_jobs[3], &job, d);
    T_OKM(rc == GP_EOK && job.state == MSG_JOB_STATE_CANCELLED, "running job cancelled (%s %s)",
          gp_err_name(rc), d);
    for (int i = 0; i < 50 && agent.n == 0; i++)
        run_for(0.1);
    T_OKM(agent.n == 1 && agent.sig.action == MSG_ATTEMPT_SIGNAL_ACTION_STOP &&
          agent.sig.attempt == 1 && strcmp(agent.sig.job_id, lister_jobs[3]) == 0,
          "the node got one stop signal for attempt 1 (%d)", agent.n);
    rc = job_req(GP_OP_API_JOB_GET, "lister", lister_jobs[3], &job, d);
    at = job.attempts.v;
    ev = job.events.v;
    T_OKM(rc == GP_EOK && job.events.n == 2 && ev[1].event == MSG_JOB_EVENT_EVENT_CANCELLED &&
          ev[1].attempt == 1 && strcmp(ev[1].site, "s9") == 0 && strcmp(ev[1].node, "n9") == 0,
          "the cancelled event names the attempt, site and node (%u)", job.events.n);
    T_OKM(rc == GP_EOK && job.attempts.n == 1 && at[0].state == MSG_ATTEMPT_STATE_CANCELLED &&
          at[0].gpus.n == 2 && strcmp(at[0].node, "n9") == 0,
          "get shows the attempt cancelled (%u)", job.attempts.n);
    q.state = MSG_JOB_LIST_REQUEST_STATE_CANCELLED;
    GP_SET_HAS(&q, MSG_JOB_LIST_REQUEST__STATE);
    rc = list(GP_OP_API_JOB_LIST, "lister", &q, &page, d);
    T_OKM(rc == GP_EOK && page.items.n == 1, "state filter: one cancelled (%u)", page.items.n);
    gp_bus_sub_free(sub);
    gp_msg_clear(&msg_job_desc, &job);
    gp_msg_clear(&msg_job_list_desc, &page);
}

/* ---- the stream JOBS and the outbox --------------------------------------------------- */

typedef struct pulled {
    int  n;
    char subj[8][GP_MAX_SUBJECT];
    msg_job_event ev[8];
} pulled;

static void
on_pulled(void *arg, gp_jsmsg *m)
{
    pulled *p = arg;

    if (p->n < 8) {
        snprintf(p->subj[p->n], sizeof(p->subj[0]), "%s", gp_jsmsg_subject(m));
        gp_msg_decode(&msg_job_event_desc, gp_jsmsg_data(m), gp_jsmsg_len(m), &p->ev[p->n], NULL, 0);
    }
    p->n++;
    gp_jsmsg_ack(m);
}

static void
read_stream(const char *durable, const char *filter, pulled *p, int want)
{
    gp_pull_cfg  c = {.stream = "JOBS", .durable = durable, .filter_subject = filter,
                      .ack_wait_ms = 5000};
    gp_bus_pull *pl = NULL;

    T_OK(gp_bus_js_pull_new(bus, &c, on_pulled, p, &pl) == GP_EOK);
    for (int i = 0; i < 100 && p->n < want; i++)
        run_for(0.1);
    run_for(1.0);                              /* a duplicate would show up */
    gp_bus_js_pull_free(pl);
}

static void
test_stream(void)
{
    pulled p = {0};
    char   filter[GP_MAX_SUBJECT], s1[GP_MAX_SUBJECT], s2[GP_MAX_SUBJECT];

    snprintf(filter, sizeof(filter), "gp.events.acme.job.%s.>", acme_job);
    snprintf(s1, sizeof(s1), "gp.events.acme.job.%s.submitted", acme_job);
    snprintf(s2, sizeof(s2), "gp.events.acme.job.%s.cancelled", acme_job);
    read_stream("t-acme", filter, &p, 2);
    T_OKM(p.n == 2, "stream JOBS holds the job's two events once each (%d)", p.n);
    T_OKM(strcmp(p.subj[0], s1) == 0 && strcmp(p.subj[1], s2) == 0, "subjects %s, %s", p.subj[0],
          p.subj[1]);
    T_OKM(p.ev[0].seq == 1 && p.ev[1].seq == 2 && strcmp(p.ev[1].job_id, acme_job) == 0 &&
          p.ev[1].event == MSG_JOB_EVENT_EVENT_CANCELLED, "events decoded: seq 1 submitted, 2 cancelled");
    T_OKM(strcmp(sql1("SELECT count(*) FROM job_events WHERE NOT published"), "0") == 0,
          "every event marked published");
}

static int core_seen;

static void
on_core(void *arg, const gp_bus_msg *m)
{
    (void)arg;
    (void)m;
    core_seen++;
}

/* A row committed but never published (as after a crash between commit
 * and publish): the outbox task publishes it, once. */
static void
test_outbox(void)
{
    char        sql[512], subj[GP_MAX_SUBJECT], filter[GP_MAX_SUBJECT];
    gp_bus_sub *sub = NULL;
    pulled      p = {0};
    int         i;

    snprintf(subj, sizeof(subj), "gp.events.acme.job.%s.requeued", acme_job);
    snprintf(filter, sizeof(filter), "gp.events.acme.job.%s.requeued", acme_job);
    T_OK(gp_bus_sub_new(bus, subj, NULL, on_core, NULL, &sub) == GP_EOK);
    run_for(0.2);
    snprintf(sql, sizeof(sql),
             "INSERT INTO job_events (job_id, seq, event, state, reason, at_ms, published) "
             "VALUES ('%s', 3, 'requeued', 'pending', 'outbox test', "
             "(extract(epoch from now()) * 1000)::bigint - 5000, false)", acme_job);
    T_OKM(sql1(sql)[0] == '\0', "unpublished event row inserted: %s", sql1("SELECT 1"));
    snprintf(sql, sizeof(sql), "SELECT published FROM job_events WHERE job_id = '%s' AND seq = 3",
             acme_job);
    for (i = 0; i < 50 && strcmp(sql1(sql), "t") != 0; i++)
        run_for(0.1);
    T_OKM(strcmp(sql1(sql), "t") == 0, "the outbox published the row and marked it");
    run_for(5.0 * OUTBOX_MS / 1000.0);         /* several more passes */
    T_OKM(core_seen == 1, "published once (%d)", core_seen);
    read_stream("t-outbox", filter, &p, 1);
    T_OKM(p.n == 1 && p.ev[0].seq == 3 && strcmp(p.ev[0].reason, "outbox test") == 0,
          "the stream holds it once (%d)", p.n);
    gp_bus_sub_free(sub);
}

/* ---- two instances ----------------------------------------------------------------------- */

typedef struct pair_rec {
    tl_reply r[2];
} pair_rec;

static double
submits_at(int port)
{
    char  *body = NULL;
    double n = 0;

    if (tl_http_get(port, "/metrics", &body) > 0) {
        n = tl_metric(body, "gp_scheduler_submits_total{outcome=\"created\"}");
        n += tl_metric(body, "gp_scheduler_submits_total{outcome=\"duplicate\"}");
    }
    free(body);
    return n;
}

static double
gauge_at(int port, const char *state)
{
    char  *body = NULL, series[96];
    double n = -1;

    snprintf(series, sizeof(series), "gp_scheduler_jobs{state=\"%s\"}", state);
    if (tl_http_get(port, "/metrics", &body) > 0)
        n = tl_metric(body, series);
    free(body);
    return n;
}

static double
batched_at(int port)
{
    char  *body = NULL;
    double n = 0;

    if (tl_http_get(port, "/metrics", &body) > 0)
        n = tl_metric(body, "gp_scheduler_submit_batched_total");
    free(body);
    return n;
}

static void
test_two_instances(void)
{
    enum { PAIRS = 12 };
    static pair_rec pr[PAIRS];
    msg_job_spec    sp;
    gp_buf          b;
    char            subj[GP_MAX_SUBJECT];
    int             same = 0, done = 0;

    base_spec(&sp);
    gp_op_subjectf(GP_OP_API_JOB_SUBMIT, subj, sizeof(subj), "other");
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    for (int i = 0; i < PAIRS; i++) {
        snprintf(sp.client_request_id, sizeof(sp.client_request_id), "pair-%d", i);
        gp_buf_reset(&b);
        gp_msg_encode(&msg_job_spec_desc, &sp, &b);
        for (int k = 0; k < 2; k++)     /* both at once, before either is answered */
            gp_bus_request(bus, subj, b.p, b.n, 5000, tl_reply_cb, &pr[i].r[k]);
    }
    gp_buf_fini(&b);
    for (int t = 0; t < 100 && done < 2 * PAIRS; t++) {
        run_for(0.1);
        done = 0;
        for (int i = 0; i < PAIRS; i++)
            done += pr[i].r[0].done + pr[i].r[1].done;
    }
    for (int i = 0; i < PAIRS; i++) {
        msg_job a = {0}, c = {0};
        char    d[GP_ERRBUF_LEN];

        if (gp_msg_decode_reply(&msg_job_desc, pr[i].r[0].data, pr[i].r[0].len, &a, d, sizeof(d)) == GP_EOK &&
            gp_msg_decode_reply(&msg_job_desc, pr[i].r[1].data, pr[i].r[1].len, &c, d, sizeof(d)) == GP_EOK)
            same += strcmp(a.id, c.id) == 0;
        gp_msg_clear(&msg_job_desc, &a);
        gp_msg_clear(&msg_job_desc, &c);
        free(pr[i].r[0].data);
        free(pr[i].r[1].data);
    }
    T_OKM(same == PAIRS, "concurrent submits of one key: one job each (%d of %d)", same, PAIRS);
    T_OKM(strcmp(sql1("SELECT count(*) FROM jobs WHERE client_request_id LIKE 'pair-%'"), "12") == 0,
          "12 rows for 12 keys");
    T_OKM(strcmp(sql1("SELECT count(*) FROM jobs WHERE state = 'pending'"), "0") != 0, "pending jobs");
    for (int t = 0; t < 20 && gauge_at(http_a, "pending") != atof(sql1("SELECT count(*) FROM jobs WHERE state = 'pending'")); t++)
        run_for(0.1);
    T_OKM(gauge_at(http_a, "pending") == atof(sql1("SELECT count(*) FROM jobs WHERE state = 'pending'")) &&
          gauge_at(http_a, "cancelled") == 2,
          "gauge jobs by state (pending %.0f, cancelled %.0f)", gauge_at(http_a, "pending"),
          gauge_at(http_a, "cancelled"));
    T_OKM(submits_at(http_a) > 0 && submits_at(http_b) > 0,
          "both instances took submits (%.0f, %.0f)", submits_at(http_a), submits_at(http_b));
    T_OKM(batched_at(http_a) + batched_at(http_b) > 0,
          "submits that arrived together were written together (%.0f + %.0f in batches)",
          batched_at(http_a), batched_at(http_b));
}

/* One key, two specs, sent at once (one batch or two): one job, one
 * CONFLICT naming the key. */
static void
test_batch_conflict(void)
{
    enum { N = 8 };
    static tl_reply r[N];
    msg_job_spec    sp;
    gp_buf          b;
    char            subj[GP_MAX_SUBJECT];
    int             done = 0, jobs = 0, conflicts = 0;

    base_spec(&sp);
    gp_op_subjectf(GP_OP_API_JOB_SUBMIT, subj, sizeof(subj), "other");
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    for (int i = 0; i < N; i++) {
        snprintf(sp.client_request_id, sizeof(sp.client_request_id), "bc-%d", i / 2);
        sp.priority = 10 + i % 2;           /* the second of each pair: another spec */
        gp_buf_reset(&b);
        gp_msg_encode(&msg_job_spec_desc, &sp, &b);
        gp_bus_request(bus, subj, b.p, b.n, 5000, tl_reply_cb, &r[i]);
    }
    gp_buf_fini(&b);
    for (int t = 0; t < 100 && done < N; t++) {
        run_for(0.1);
        done = 0;
        for (int i = 0; i < N; i++)
            done += r[i].done;
    }
    for (int i = 0; i < N; i++) {
        msg_job a = {0};
        char    d[GP_ERRBUF_LEN];
        gp_err  rc = gp_msg_decode_reply(&msg_job_desc, r[i].data, r[i].len, &a, d, sizeof(d));

        jobs += rc == GP_EOK;
        conflicts += rc == GP_ECONFLICT && strstr(d, "client_request_id") != NULL;
        gp_msg_clear(&msg_job_desc, &a);
        free(r[i].data);
    }
    T_OKM(jobs == N / 2 && conflicts == N / 2,
          "a key sent with two specs at once: one job, one CONFLICT per key (%d jobs, %d "
          "conflicts)", jobs, conflicts);
    T_OKM(strcmp(sql1("SELECT count(*) FROM jobs WHERE client_request_id LIKE 'bc-%'"), "4") == 0,
          "4 rows for 4 keys");
}

int
main(void)
{
    gp_bus_opts bo = {.url = tl_env("GP_NATS_URL"), .name = "sched-api-test", .jetstream = true};
    const char *sched_args[] = {"--outbox-ms", "200", "--outbox-grace-ms", "1000", "--gauge-ms",
                                "200", NULL};
    pid_t       reg, a, b;
    double      t0 = tl_now();
    bool        up = false;

    loop = ev_default_loop(0);
    T_OK(gp_bus_new(loop, &bo, NULL, NULL, &bus) == GP_EOK);
    pg = PQconnectdb(tl_env("GP_PG_CONNINFO"));
    T_OKM(PQstatus(pg) == CONNECTION_OK, "test's own PostgreSQL connection");
    http_a = tl_free_port();
    http_b = tl_free_port();
    reg = start("registry", tl_free_port(), NULL);
    a = start("scheduler", http_a, sched_args);
    while (!up && tl_now() - t0 < 30) {
        up = healthy("registry") && healthy("scheduler");
        if (!up)
            usleep(100000);
    }
    T_OKM(up, "registry and scheduler healthy");
    b = start("scheduler", http_b, sched_args);     /* after a migrated the schema */
    run_for(2.0);
    make_tenant("acme");
    make_tenant("other");
    make_tenant("lister");
    test_submit_valid();
    test_submit_invalid();
    test_idempotent();
    test_get();
    test_list();
    test_cancel();
    test_stream();
    test_outbox();
    test_two_instances();
    test_batch_conflict();
    kill(a, SIGTERM);
    kill(b, SIGTERM);
    kill(reg, SIGTERM);
    T_OKM(tl_wait_exit(a, 10) == 0 && tl_wait_exit(b, 10) == 0, "schedulers stop cleanly");
    tl_wait_exit(reg, 10);
    PQfinish(pg);
    gp_bus_free(bus);
    gp_lib_close();
    return T_DONE();
}
