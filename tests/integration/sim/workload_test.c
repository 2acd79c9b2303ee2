/* workload_test.c -- gridpool-sim's workload generator and ground
 * truth, with this test as the scheduler and the registry:
 *   - --workload --no-fleet: tenants created (EXISTS is fine), every job
 *     submitted through gp.api.{tenant}.job.submit at the rate, counted
 *     accepted / refused by code / timed out, ids written, the process
 *     stops; a second run submits the same specs under the same
 *     client_request_ids;
 *   - --truth: a sim: job on a simulated node gives a truth line with the
 *     GPU time and energy of the simulator's model; at stop, a running one
 *     gives a "sim_stop" line.  Real time: about 15 s. */
#include <fcntl.h>
#include <math.h>

#include "msg_gen.h"
#include "test_stack.h"

static struct ev_loop *loop;
static gp_bus         *bus;

/* ---- a scheduler and a registry --------------------------------------- */

#define MAXJ 64
static char     crids[3][MAXJ][64];
static char     tenants_seen[3][MAXJ][64];
static uint8_t  specs[3][MAXJ][2048];
static size_t   spec_len[3][MAXJ];
static int      nsub[3], round_no;
static double   first_at, last_at;
static int      ntenant_req;

static void
reply_error(const gp_bus_msg *m, gp_err code, const char *msg)
{
    gp_buf b;

    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    gp_msg_encode_error(code, msg, &b);
    gp_bus_pub(bus, m->reply, NULL, b.p, b.n);
    gp_buf_fini(&b);
}

static bool
ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);

    return n >= k && strcmp(s + n - k, tail) == 0;
}

static void
on_submit(void *arg, const gp_bus_msg *m)
{
    msg_job_spec s;
    msg_job      j;
    gp_buf       b;
    int          k = nsub[round_no];
    const char  *t = m->subject + strlen("gp.api."), *dot = strchr(t, '.');

    (void)arg;
    memset(&s, 0, sizeof(s));
    if (m->reply == NULL || gp_msg_decode(&msg_job_spec_desc, m->data, m->len, &s, NULL, 0) != GP_EOK)
        return;
    if (k < MAXJ) {
        snprintf(crids[round_no][k], 64, "%s", s.client_request_id);
        snprintf(tenants_seen[round_no][k], 64, "%.*s", dot ? (int)(dot - t) : 0, t);
        spec_len[round_no][k] = m->len < 2048 ? m->len : 2048;
        memcpy(specs[round_no][k], m->data, spec_len[round_no][k]);
        nsub[round_no]++;
    }
    if (first_at == 0)
        first_at = tl_now();
    last_at = tl_now();
    /* Index 3: refused INVAL; index 5: never answered (times out). */
    if (ends_with(s.client_request_id, "-3")) {
        reply_error(m, GP_EINVAL, "gpus_per_node: refused by the test");
    } else if (!ends_with(s.client_request_id, "-5")) {
        memset(&j, 0, sizeof(j));
        snprintf(j.id, sizeof(j.id), "job-%.50s", s.client_request_id);
        snprintf(j.tenant, sizeof(j.tenant), "%s", tenants_seen[round_no][k < MAXJ ? k : 0]);
        j.state = MSG_JOB_STATE_PENDING;
        j.spec = s;
        gp_buf_init(&b, GP_MAX_MSG_BYTES);
        gp_msg_encode(&msg_job_desc, &j, &b);
        gp_bus_pub(bus, m->reply, NULL, b.p, b.n);
        gp_buf_fini(&b);
        memset(&j.spec, 0, sizeof(j.spec));
    }
    gp_msg_clear(&msg_job_spec_desc, &s);
}

static void
on_tenant(void *arg, const gp_bus_msg *m)
{
    msg_tenant t;
    gp_buf     b;

    (void)arg;
    memset(&t, 0, sizeof(t));
    if (m->reply == NULL || gp_msg_decode(&msg_tenant_desc, m->data, m->len, &t, NULL, 0) != GP_EOK)
        return;
    ntenant_req++;
    if (strcmp(t.id, "globex") == 0 || round_no == 1 || t.kind != MSG_TENANT_KIND_CUSTOMER ||
        strcmp(t.parent, "op") != 0) {
        reply_error(m, t.kind == MSG_TENANT_KIND_CUSTOMER && strcmp(t.parent, "op") == 0 ? GP_EEXISTS
                                                                                        : GP_EINVAL,
                    "test");
        return;
    }
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    gp_msg_encode(&msg_tenant_desc, &t, &b);
    gp_bus_pub(bus, m->reply, NULL, b.p, b.n);
    gp_buf_fini(&b);
}

static bool
file_has(const char *path, const char *w1, const char *w2)
{
    char  line[4096];
    bool  found = false;
    FILE *f = fopen(path, "r");

    if (f == NULL)
        return false;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, w1) != NULL && (w2 == NULL || strstr(line, w2) != NULL);
    fclose(f);
    return found;
}

static int
file_lines(const char *path)
{
    char  line[4096];
    int   n = 0;
    FILE *f = fopen(path, "r");

    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        n++;
    if (f != NULL)
        fclose(f);
    return n;
}

static pid_t
spawn_log(const char **argv, const char *log)
{
    pid_t pid = fork();

    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Runs the simulator (no fleet) on the workload until it exits. */
static int
run_workload(const char *wl, const char *log)
{
    char  bin[512];
    const char *argv[] = {bin, "--no-fleet", "--sites", "5", "--seed", "3", "--workload", wl,
                    "--http-port", "0", NULL};
    pid_t pid;
    int   st = -1, ws;
    double end = tl_now() + 20;

    snprintf(bin, sizeof(bin), "%s/bin/gridpool-sim", tl_env("GP_BUILD"));
    pid = spawn_log(argv, log);
    while (st < 0 && tl_now() < end) {
        tl_spin(loop, 0.02);
        if (waitpid(pid, &ws, WNOHANG) == pid)
            st = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    }
    if (st < 0)
        kill(pid, SIGKILL), waitpid(pid, NULL, 0);
    return st;
}

static void
test_workload(void)
{
    char  dir[256], wl[300], ids[300], log[300];
    FILE *f;
    int   st, same = 0;

    snprintf(dir, sizeof(dir), "%s", tl_env("GP_STACK_DIR"));
    snprintf(wl, sizeof(wl), "%s/wl.conf", dir);
    snprintf(ids, sizeof(ids), "%s/wl-ids.txt", dir);
    snprintf(log, sizeof(log), "%s/wl-sim.log", dir);
    f = fopen(wl, "w");
    fprintf(f, "name=itest\nseed=5\njobs=20\nrate=20\ninflight=4\ntimeout_ms=800\n"
               "tenants=acme:1,globex:1\nids_out=%s\n", ids);
    fclose(f);
    st = run_workload(wl, log);
    T_OKM(st == 0, "gridpool-sim --workload --no-fleet ends by itself with status 0 (%d)", st);
    T_OKM(ntenant_req == 2, "both tenants asked for, as customers of the operator (%d)", ntenant_req);
    T_OKM(nsub[0] == 20, "every job submitted (%d)", nsub[0]);
    T_OKM(last_at - first_at > 19 / 20.0 * 0.9, "at the rate: 20 jobs at 20/s took %.2f s",
          last_at - first_at);
    T_OKM(file_has(log, "event=workload_done", "accepted=18") &&
              file_has(log, "event=workload_done", "timed_out=1") &&
              file_has(log, "event=workload_done", "refused=\"INVAL:1\""),
          "summary: 18 accepted, 1 timed out, INVAL:1 refused");
    T_OKM(file_has(log, "event=workload_done", "tenants_created=1 tenants_existed=1"),
          "one tenant created, one existed");
    T_OKM(file_lines(ids) == 18 && file_has(ids, "itest-5-0 ", "job-itest-5-0"),
          "the ids file lists the 18 accepted jobs (%d)", file_lines(ids));
    round_no = 1;                      /* a restarted generator */
    st = run_workload(wl, log);
    T_OKM(st == 0 && nsub[1] == 20, "a second run submits the 20 again (%d)", nsub[1]);
    for (int i = 0; i < 20; i++)
        for (int k = 0; k < 20; k++)
            if (strcmp(crids[0][i], crids[1][k]) == 0 &&
                strcmp(tenants_seen[0][i], tenants_seen[1][k]) == 0 &&
                spec_len[0][i] == spec_len[1][k] &&
                memcmp(specs[0][i], specs[1][k], spec_len[0][i]) == 0)
                same++;
    T_OKM(same == 20, "with the same client_request_ids, tenants and specs (%d of 20)", same);
}

/* Started before the scheduler: NOROUTE pauses the stream until it is up;
 * nothing is lost or counted twice. */
static void
test_workload_waits(gp_bus_sub **submit_sub)
{
    char  wl[300], log[300], bin[512];
    const char *argv[] = {bin, "--no-fleet", "--sites", "5", "--seed", "3", "--workload", wl,
                          "--http-port", "0", NULL};
    pid_t pid;
    int   st = -1, ws;
    double t0;

    snprintf(bin, sizeof(bin), "%s/bin/gridpool-sim", tl_env("GP_BUILD"));
    snprintf(wl, sizeof(wl), "%s/wl.conf", tl_env("GP_STACK_DIR"));
    snprintf(log, sizeof(log), "%s/wl-wait.log", tl_env("GP_STACK_DIR"));
    round_no = 2;
    gp_bus_sub_free(*submit_sub);      /* no scheduler */
    tl_spin(loop, 0.2);
    pid = spawn_log(argv, log);
    tl_spin(loop, 1.5);
    gp_bus_sub_new(bus, "gp.api.*.job.submit", NULL, on_submit, NULL, submit_sub);
    t0 = tl_now();
    while (st < 0 && tl_now() < t0 + 15) {
        tl_spin(loop, 0.02);
        if (waitpid(pid, &ws, WNOHANG) == pid)
            st = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    }
    if (st < 0)
        kill(pid, SIGKILL), waitpid(pid, NULL, 0);
    T_OKM(st == 0 && nsub[2] == 20, "started before the scheduler: all 20 served once it is up "
          "(%d, status %d)", nsub[2], st);
    T_OKM(file_has(log, "event=workload_waiting", "no_scheduler") &&
              file_has(log, "event=workload_done", "submitted=20 accepted=18 timed_out=1") &&
              file_has(log, "event=workload_done", "refused=\"INVAL:1\""),
          "it waited, and counted each job once");
}

/* ---- the truth ------------------------------------------------------------ */

static char node_site[64], node_id[64], node_model[32];
static int  node_gpus, nreg;

static void
answer_reg(const gp_bus_msg *m, const gp_arr *attempts)
{
    msg_node_registered r;
    gp_buf              b;

    memset(&r, 0, sizeof(r));
    r.heartbeat_ms = 300;
    r.lease_ms = 5000;
    r.keep = *attempts;
    gp_buf_init(&b, GP_MAX_MSG_BYTES);
    gp_msg_encode(&msg_node_registered_desc, &r, &b);
    gp_bus_pub(bus, m->reply, NULL, b.p, b.n);
    gp_buf_fini(&b);
}

static void
on_register(void *arg, const gp_bus_msg *m)
{
    msg_node_register r;

    (void)arg;
    memset(&r, 0, sizeof(r));
    if (m->reply == NULL || gp_msg_decode(&msg_node_register_desc, m->data, m->len, &r, NULL, 0))
        return;
    if (nreg++ == 0) {
        snprintf(node_site, sizeof(node_site), "%s", r.site);
        snprintf(node_id, sizeof(node_id), "%s", r.node);
        node_gpus = (int)r.gpus.n;
        if (r.gpus.n > 0)
            snprintf(node_model, sizeof(node_model), "%s", ((msg_gpu *)r.gpus.v)[0].model);
    }
    answer_reg(m, &r.attempts);
    gp_msg_clear(&msg_node_register_desc, &r);
}

static void
on_lease(void *arg, const gp_bus_msg *m)
{
    msg_lease_renew l;

    (void)arg;
    memset(&l, 0, sizeof(l));
    if (m->reply == NULL || gp_msg_decode(&msg_lease_renew_desc, m->data, m->len, &l, NULL, 0))
        return;
    answer_reg(m, &l.attempts);
    gp_msg_clear(&msg_lease_renew_desc, &l);
}

static gp_err
run_on_node(const char *job, const char *cmd)
{
    msg_run_attempt r;
    msg_attempt_ack ack;
    int32_t         gpus[16];
    char            subj[GP_MAX_SUBJECT + 1], detail[GP_ERRBUF_LEN];

    memset(&r, 0, sizeof(r));
    snprintf(r.job_id, sizeof(r.job_id), "%s", job);
    r.attempt = 1;
    snprintf(r.command, sizeof(r.command), "%s", cmd);
    for (int i = 0; i < node_gpus && i < 16; i++)
        gpus[i] = i;
    r.gpus.v = gpus;
    r.gpus.n = (uint32_t)(node_gpus < 16 ? node_gpus : 16);
    snprintf(subj, sizeof(subj), "gp.node.%s.%s.cmd.run", node_site, node_id);
    return tl_call(loop, bus, subj, &msg_run_attempt_desc, &r, &msg_attempt_ack_desc, &ack, 3000,
                   detail, sizeof(detail));
}

/* The model's power at a load (gpu_sim.c's table: idle and full power). */
static double
model_w(const char *model, double load)
{
    static const struct { const char *m; double idle, tdp; } t[] = {
        {"L4", 16, 72}, {"L40S", 35, 350}, {"RTX 4090", 25, 450}, {"A100-80G", 60, 400}, {"H100", 70, 700},
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (strcmp(t[i].m, model) == 0)
            return t[i].idle + (t[i].tdp - t[i].idle) * load;
    return -1;
}

static void
test_truth(void)
{
    char               bin[512], truth[300], log[300], line[4096] = "", want[128];
    const char        *argv[] = {bin, "--sites", "1", "--seed", "7", "--admin=false", "--spread-ms",
                                 "0", "--heartbeat-ms", "300", "--http-port", "0", "--truth",
                                 truth, NULL};
    gp_bus_sub        *subs[2];
    unsigned long long held = 0, gpu_ms = 0, energy = 0, agent_gpu_ms = 0;
    pid_t              pid;
    double             t0;
    FILE              *f;

    snprintf(bin, sizeof(bin), "%s/bin/gridpool-sim", tl_env("GP_BUILD"));
    snprintf(truth, sizeof(truth), "%s/truth.jsonl", tl_env("GP_STACK_DIR"));
    snprintf(log, sizeof(log), "%s/truth-sim.log", tl_env("GP_STACK_DIR"));
    gp_bus_sub_new(bus, "gp.node.*.*.register", NULL, on_register, NULL, &subs[0]);
    gp_bus_sub_new(bus, "gp.node.*.*.lease", NULL, on_lease, NULL, &subs[1]);
    tl_spin(loop, 0.2);
    pid = spawn_log(argv, log);
    t0 = tl_now();
    while (nreg == 0 && tl_now() < t0 + 10)
        tl_spin(loop, 0.02);
    tl_spin(loop, 0.3);
    T_OKM(nreg > 0 && node_gpus > 0, "simulated node %s (%d x %s) registers", node_id, node_gpus,
          node_model);
    T_EQ_INT(run_on_node("tj1", "sim:run=1s load=80"), GP_EOK);
    T_EQ_INT(run_on_node("tj2", "sim:load=50"), GP_EOK);
    tl_spin(loop, 1.6);
    T_OKM(file_has(truth, "\"job_id\":\"tj1\"", "\"end\":\"exited\""),
          "the truth has tj1's line as soon as it ended");
    kill(pid, SIGTERM);
    T_OKM(tl_wait_exit(pid, 10) == 0, "the simulator stops with status 0");
    f = fopen(truth, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL && strstr(line, "\"tj1\"") == NULL)
        ;
    if (f != NULL)
        fclose(f);
    sscanf(strstr(line, "\"held_ms\":") ? strstr(line, "\"held_ms\":") : "", "\"held_ms\":%llu,\"gpu_ms\":%llu,"
           "\"energy_mj\":%llu", &held, &gpu_ms, &energy);
    if (strstr(line, "\"agent_gpu_ms\":"))
        sscanf(strstr(line, "\"agent_gpu_ms\":"), "\"agent_gpu_ms\":%llu", &agent_gpu_ms);
    T_OKM(held >= 1000 && held < 1100 && gpu_ms == held * (unsigned long long)node_gpus,
          "tj1 held its %d GPUs %llu ms: gpu_ms %llu", node_gpus, held, gpu_ms);
    T_OKM(energy > 0 && fabs((double)energy - model_w(node_model, 0.8) * node_gpus * (double)held) < node_gpus + 1.0,
          "energy_mj %llu = GPUs x the model's %.0f W at load 80 x held", energy,
          model_w(node_model, 0.8));
    T_OKM(agent_gpu_ms > 0 && agent_gpu_ms >= gpu_ms * 0.95 && agent_gpu_ms <= gpu_ms * 1.05,
          "the agent's own count is next to it (%llu)", agent_gpu_ms);
    snprintf(want, sizeof(want), "\"node\":\"%s\"", node_id);
    T_OKM(file_has(truth, "\"progress_ms\":1000", want) && file_has(truth, "\"load_pct\":80", NULL),
          "with its node, load and progress");
    T_OKM(file_has(truth, "\"job_id\":\"tj2\"", "\"end\":\"sim_stop\""),
          "tj2, still running at stop, flushed as sim_stop");
    T_OKM(file_lines(truth) == 2, "one line per attempt (%d)", file_lines(truth));
    gp_bus_sub_free(subs[0]);
    gp_bus_sub_free(subs[1]);
}

int
main(void)
{
    gp_bus_opts bo = {.url = tl_env("GP_NATS_URL"), .name = "sim-workload-test"};
    gp_bus_sub *subs[2];

    loop = ev_loop_new(0);
    if (gp_bus_new(loop, &bo, NULL, NULL, &bus) != GP_EOK)
        return printf("not ok - bus\n"), 1;
    gp_bus_sub_new(bus, "gp.api.*.job.submit", NULL, on_submit, NULL, &subs[0]);
    gp_bus_sub_new(bus, "gp.admin.tenant.create", NULL, on_tenant, NULL, &subs[1]);
    tl_spin(loop, 0.3);
    test_workload();
    test_workload_waits(&subs[0]);
    test_truth();
    for (int i = 0; i < 2; i++)
        gp_bus_sub_free(subs[i]);
    gp_bus_free(bus);
    ev_loop_destroy(loop);
    gp_lib_close();
    return T_DONE();
}
