/* sim_test.c -- gridpool-sim with the registry on a private stack: the
 * fleet is created and registers, the inventory file matches, a fault
 * script and gp.int.sim.fault act on the right nodes, commands reach the
 * simulated agents through the one wildcard subscription, a re-run finds
 * everything already there, and SIGTERM stops it cleanly.  ~30 s. */
#include <sys/stat.h>

#include "msg_gen.h"
#include "test_stack.h"

#define SITES "40"
#define SEED  "3"

static struct ev_loop *loop;
static gp_bus         *bus;
static int             hb_s1, hb_s2n1, reg_s2n1;

static void
count_cb(void *arg, const gp_bus_msg *m)
{
    (void)m;
    ++*(int *)arg;
}

static pid_t
spawn_to(const char *const argv[], const char *out)
{
    pid_t pid = fork();

    if (pid == 0) {
        FILE *f = freopen(out, "w", stdout);

        (void)f;
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static char *
slurp(const char *path)
{
    FILE  *f = fopen(path, "r");
    char  *buf = calloc(1, 1 << 20);
    size_t n = 0;

    if (f != NULL) {
        n = fread(buf, 1, (1 << 20) - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
    return buf;
}

/* Waits until the file holds needle; returns the whole text (malloc'd). */
static char *
wait_text(const char *path, const char *needle, double timeout_s)
{
    double end = tl_now() + timeout_s;
    char  *t = slurp(path);

    while (strstr(t, needle) == NULL && tl_now() < end) {
        free(t);
        ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT);
        usleep(50000);
        t = slurp(path);
    }
    return t;
}

static gp_err
fault(const char *kind, const char *site, const char *node, uint32_t dur_ms, uint32_t *applied)
{
    msg_sim_fault     f;
    msg_sim_fault_ack a;
    char              detail[GP_ERRBUF_LEN] = "";
    gp_err            rc;

    memset(&f, 0, sizeof(f));
    memset(&a, 0, sizeof(a));
    if (gp_msg_set_text(&msg_sim_fault_desc, &f, "kind", kind, NULL, 0) != GP_EOK)
        return GP_EINVAL;
    snprintf(f.site, sizeof(f.site), "%s", site);
    snprintf(f.node, sizeof(f.node), "%s", node);
    f.duration_ms = dur_ms;
    f.code = 79;
    rc = tl_call(loop, bus, "gp.int.sim.fault", &msg_sim_fault_desc, &f, &msg_sim_fault_ack_desc,
                 &a, 3000, detail, sizeof(detail));
    *applied = a.applied;
    return rc;
}

static pid_t
start_sim(const char *dir, const char *out, const char *script, const char *inv)
{
    char  bin[512];
    const char *argv[] = {bin, "--sites", SITES, "--seed", SEED, "--heartbeat-ms", "500", "--spread-ms",
                    "500", "--http-port", "0", "--faults", script, "--inventory-out", inv,
                          NULL};

    (void)dir;
    snprintf(bin, sizeof(bin), "%s/bin/gridpool-sim", tl_env("GP_BUILD"));
    return spawn_to(argv, out);
}

/* Same seed, same fleet; 1,000 sites make about 3,000 nodes. */
static void
test_determinism(const char *dir)
{
    char  cmd[1024], a[512], b[512], c[512], *ta, *tb, *tc, *p;
    int   nodes = 0;

    snprintf(a, sizeof(a), "%s/inv-a.json", dir);
    snprintf(b, sizeof(b), "%s/inv-b.json", dir);
    snprintf(c, sizeof(c), "%s/inv-c.json", dir);
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof(cmd), "%s/bin/gridpool-sim --sites 1000 --seed %d --dry-run=true "
                 "--inventory-out %s >/dev/null", tl_env("GP_BUILD"), i < 2 ? 11 : 12,
                 i == 0 ? a : i == 1 ? b : c);
        T_EQ_INT(system(cmd), 0);
    }
    ta = slurp(a);
    tb = slurp(b);
    tc = slurp(c);
    T_OKM(ta[0] != '\0' && strcmp(ta, tb) == 0, "the same seed builds the same fleet");
    T_OKM(tc[0] != '\0' && strcmp(ta, tc) != 0, "another seed another one");
    if ((p = strstr(ta, "\"nodes\":")) != NULL && strstr(p + 1, "\"nodes\":") == NULL)
        nodes = atoi(p + 8);
    else if ((p = strstr(ta, "],\n\"nodes\":")) != NULL)
        nodes = atoi(p + 11);
    T_OKM(nodes > 2700 && nodes < 3300, "1,000 sites give %d nodes", nodes);
    T_OK(strstr(ta, "\"id\":\"hub-s") != NULL && strstr(ta, "\"id\":\"region-uk\"") != NULL);
    free(ta);
    free(tb);
    free(tc);
}

static void
test_faults(void)
{
    uint32_t applied = 0;
    int      n0;

    T_EQ_INT(fault("gpu_xid", "", "s0001-n01", 0, &applied), GP_EOK);
    T_EQ_INT(applied, 1);
    T_EQ_INT(fault("node_crash", "", "nope-n01", 0, &applied), GP_ENOTFOUND);
    T_EQ_INT(fault("uplink_cut", "s0001", "", 2500, &applied), GP_EOK);
    T_OKM(applied >= 1, "uplink_cut applies to every node of the site (%u)", applied);
    tl_spin(loop, 0.6);
    n0 = hb_s1;
    tl_spin(loop, 1.2);
    T_OKM(hb_s1 == n0, "no heartbeat from a site whose uplink is cut");
    tl_spin(loop, 2.0);
    T_OKM(hb_s1 > n0, "heartbeats are back after the cut (%d)", hb_s1 - n0);
}

static void
test_command(void)
{
    msg_run_attempt r;
    msg_attempt_ack ack;
    char            detail[GP_ERRBUF_LEN] = "";

    memset(&r, 0, sizeof(r));
    snprintf(r.job_id, sizeof(r.job_id), "simjob");
    r.attempt = 1;
    snprintf(r.command, sizeof(r.command), "sleep 20");
    T_EQ_INT(tl_call(loop, bus, "gp.node.s0003.s0003-n01.cmd.run", &msg_run_attempt_desc, &r,
                     &msg_attempt_ack_desc, &ack, 3000, detail, sizeof(detail)), GP_EOK);
    T_OKM(ack.pid > 0 && kill(ack.pid, 0) == 0, "a simulated node runs a real attempt (pid %d)",
          ack.pid);
    T_EQ_INT(tl_call(loop, bus, "gp.node.s0003.s0003-n01.cmd.run", &msg_run_attempt_desc, &r,
                     &msg_attempt_ack_desc, &ack, 500, detail, sizeof(detail)), GP_EOK);
}

static gp_err
run_on(const char *site, const char *node, unsigned timeout_ms, double *took)
{
    msg_run_attempt r;
    msg_attempt_ack ack;
    char            subject[GP_MAX_SUBJECT + 1], detail[GP_ERRBUF_LEN] = "";
    double          t0 = tl_now();
    gp_err          rc;

    memset(&r, 0, sizeof(r));
    snprintf(r.job_id, sizeof(r.job_id), "probe");
    r.attempt = 1;
    snprintf(r.command, sizeof(r.command), "true");
    gp_op_subjectf(GP_OP_NODE_RUN, subject, sizeof(subject), site, node);
    rc = tl_call(loop, bus, subject, &msg_run_attempt_desc, &r, &msg_attempt_ack_desc, &ack,
                 timeout_ms, detail, sizeof(detail));
    *took = tl_now() - t0;
    return rc;
}

/* Like real agents on the bus: a node that is down or unknown has no
 * subscription, so a request to it gets "no responders" at once; a node
 * that hangs keeps its subscription and the request times out. */
static void
test_unreachable(void)
{
    msg_health_request hq = {0};
    msg_health         h = {0};
    char               subject[GP_MAX_SUBJECT + 1], detail[GP_ERRBUF_LEN] = "";
    uint32_t           applied = 0;
    double             took;
    gp_err             rc;

    rc = run_on("s0004", "s0004-nope", 3000, &took);
    T_OKM(rc == GP_ENOROUTE && took < 1.0, "an unknown node: NOROUTE in %.0f ms (%s)",
          took * 1e3, gp_err_name(rc));
    gp_op_subjectf(GP_OP_NODE_HEALTH, subject, sizeof(subject), "s0004", "s0004-n01");
    rc = tl_call(loop, bus, subject, &msg_health_request_desc, &hq, &msg_health_desc, &h, 3000,
                 detail, sizeof(detail));
    T_OKM(rc == GP_EOK && strcmp(h.instance, "s0004-n01") == 0,
          "a live simulated node answers health on its own subject (%s)", gp_err_name(rc));
    gp_msg_clear(&msg_health_desc, &h);
    T_EQ_INT(fault("node_crash", "", "s0004-n01", 4000, &applied), GP_EOK);
    rc = run_on("s0004", "s0004-n01", 3000, &took);
    T_OKM(rc == GP_ENOROUTE && took < 1.0, "a crashed node: NOROUTE in %.0f ms (%s)", took * 1e3,
          gp_err_name(rc));
    T_EQ_INT(fault("node_stop", "", "s0005-n01", 4000, &applied), GP_EOK);
    rc = run_on("s0005", "s0005-n01", 800, &took);
    T_OKM(rc == GP_ETIMEOUT, "a hung node: TIMEOUT (%s after %.0f ms)", gp_err_name(rc),
          took * 1e3);
}

/* reply_lost: the node does what it is told, its answer never comes back
 * (what a scheduler must not read as "it did not start"). */
static void
test_reply_lost(void)
{
    msg_run_attempt r = {0};
    msg_attempt_ack ack = {0};
    char            detail[GP_ERRBUF_LEN] = "";
    const char     *subject = "gp.node.s0006.s0006-n01.cmd.run";
    uint32_t        applied = 0;
    gp_err          rc;

    snprintf(r.job_id, sizeof(r.job_id), "replylost");
    r.attempt = 1;
    snprintf(r.command, sizeof(r.command), "sleep 30");
    T_EQ_INT(fault("reply_lost", "", "s0006-n01", 2000, &applied), GP_EOK);
    rc = tl_call(loop, bus, subject, &msg_run_attempt_desc, &r, &msg_attempt_ack_desc, &ack, 800,
                 detail, sizeof(detail));
    T_OKM(rc == GP_ETIMEOUT, "reply_lost: the RunAttempt gets no answer (%s)", gp_err_name(rc));
    tl_spin(loop, 2.5);                    /* the fault is over: the same command is a retry */
    rc = tl_call(loop, bus, subject, &msg_run_attempt_desc, &r, &msg_attempt_ack_desc, &ack, 3000,
                 detail, sizeof(detail));
    T_OKM(rc == GP_EOK && ack.pid > 0 && kill(ack.pid, 0) == 0,
          "... yet the node started it: a retry is acked with its running pid (%s, pid %d)",
          gp_err_name(rc), ack.pid);
    if (rc == GP_EOK && ack.pid > 0)
        kill(ack.pid, SIGKILL);
    gp_msg_clear(&msg_attempt_ack_desc, &ack);
}

int
main(void)
{
    gp_bus_opts bo = {.url = tl_env("GP_NATS_URL"), .name = "sim-test"};
    const char *dir = tl_env("GP_STACK_DIR");
    char        reg_bin[512], out[512], out2[512], script[512], inv[512], *t, *u, want[64];
    const char *rargv[] = {reg_bin, "--http-port", "0", "--heartbeat-ms", "500", NULL};
    gp_bus_sub *subs[3];
    pid_t       reg, sim;
    FILE       *f;
    int         nodes = 0, got;

    loop = ev_loop_new(0);
    gp_bus_new(loop, &bo, NULL, NULL, &bus);
    gp_bus_sub_new(bus, "gp.node.s0001.*.hb", NULL, count_cb, &hb_s1, &subs[0]);
    gp_bus_sub_new(bus, "gp.node.s0002.s0002-n01.hb", NULL, count_cb, &hb_s2n1, &subs[1]);
    gp_bus_sub_new(bus, "gp.node.s0002.s0002-n01.register", NULL, count_cb, &reg_s2n1, &subs[2]);
    snprintf(reg_bin, sizeof(reg_bin), "%s/bin/gridpool-registry", tl_env("GP_BUILD"));
    snprintf(out, sizeof(out), "%s/sim.out", dir);
    snprintf(out2, sizeof(out2), "%s/sim2.out", dir);
    snprintf(script, sizeof(script), "%s/faults.txt", dir);
    snprintf(inv, sizeof(inv), "%s/inventory.json", dir);
    f = fopen(script, "w");
    fprintf(f, "# crash one node for 2 s, 3 s after the agents start\n"
               "3s node_crash node=s0002-n01 duration=2s\n");
    fclose(f);
    test_determinism(dir);
    reg = spawn_to(rargv, "/dev/null");
    tl_spin(loop, 1.0);
    sim = start_sim(dir, out, script, inv);
    t = wait_text(out, "sim: registered", 20);
    T_OKM(strstr(t, "sim: registered") != NULL, "all nodes register: %s", t);
    sscanf(strstr(t, "sites, ") ? strstr(t, "sites, ") + 7 : "0", "%d", &nodes);
    T_OKM(strstr(t, "0 failed") != NULL && strstr(t, "(no registry)") == NULL,
          "inventory created through the admin API");
    free(t);
    u = slurp(inv);
    snprintf(want, sizeof(want), "\"nodes\":%d,", nodes);
    T_OKM(nodes > 40 && strstr(u, want) != NULL, "inventory file has the %d nodes", nodes);
    T_OK(strstr(u, "{\"id\":\"global\",\"gpus\":") != NULL && strstr(u, "\"s0040\"") != NULL);
    free(u);
    test_faults();
    test_command();
    test_unreachable();
    test_reply_lost();
    tl_spin(loop, 2.5);                         /* the script's crash ends by now */
    T_OKM(reg_s2n1 >= 2, "a crashed node registers again when it comes back (%d)", reg_s2n1);
    got = hb_s2n1;
    tl_spin(loop, 1.2);
    T_OKM(hb_s2n1 > got, "and heartbeats again");
    /* A second simulator on the same registry: everything exists already. */
    kill(sim, SIGTERM);
    T_OKM(tl_wait_exit(sim, 15) == 0, "SIGTERM stops the simulator with status 0");
    sim = start_sim(dir, out2, script, inv);
    t = wait_text(out2, "sim: registered", 20);
    T_OKM(strstr(t, " 0 created") != NULL && strstr(t, "existed, 0 failed") != NULL,
          "a re-run finds its inventory: %s", t);
    free(t);
    kill(sim, SIGTERM);
    T_EQ_INT(tl_wait_exit(sim, 15), 0);
    kill(reg, SIGTERM);
    tl_wait_exit(reg, 10);
    for (int i = 0; i < 3; i++)
        gp_bus_sub_free(subs[i]);
    gp_bus_free(bus);
    ev_loop_destroy(loop);
    gp_lib_close();
    return T_DONE();
}
