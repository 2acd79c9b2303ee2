/* regbatch_test.c -- registrations that arrive together are written in
 * batches, and each still gets its own answer (issue 30, part 4).
 * gridpool-registry against real NATS, Redis and PostgreSQL:
 *   - NODES registrations sent at once (2 GPUs each), among them two of
 *     nodes an operator deleted (DENIED), two of a site that does not exist
 *     (NOTFOUND) and one node twice (both OK: never in one batch);
 *   - every valid one OK, each refusal its own code, in the inventory
 *     exactly the valid nodes with their GPUs;
 *   - fewer transactions than registrations (gp_registry_register_batches_total
 *     against gp_registry_register_batched_total), none failed as a whole;
 *   - then 20 registrations and one whose two GPUs share an index (the
 *     gpus key refuses it): its batch fails as a whole and is written one
 *     at a time, so the 20 are OK and only that one is refused. */
#include "gp/call.h"
#include "msg_gen.h"
#include "test_stack.h"

#define NODES 400
#define SENT  (NODES + 5)

static struct ev_loop *loop;
static gp_bus         *bus;
static int             http_port, answered, codes[SENT];

static double
metric(const char *series)
{
    char  *body = NULL;
    double v = -1;

    if (tl_http_get(http_port, "/metrics", &body) > 0)
        v = tl_metric(body, series);
    free(body);
    return v;
}

static gp_err
call(const char *s, const gp_msg_desc *ind, const void *in, const gp_msg_desc *outd, void *out,
     char *detail)
{
    return gp_call_wait(loop, bus, s, ind, in, outd, out, 5000, detail, GP_ERRBUF_LEN, NULL);
}

static void
fill(msg_node_register *q, msg_gpu g[2], const char *site, const char *node)
{
    memset(q, 0, sizeof(*q));
    snprintf(q->site, sizeof(q->site), "%s", site);
    snprintf(q->node, sizeof(q->node), "%s", node);
    snprintf(q->agent_version, sizeof(q->agent_version), "batch");
    snprintf(q->boot_id, sizeof(q->boot_id), "boot-%s", node);
    q->cpu_cores = 8;
    q->mem_mb = 65536;
    for (int k = 0; k < 2; k++) {
        memset(&g[k], 0, sizeof(g[k]));
        g[k].index = k;
        g[k].vram_mb = 24576;
        snprintf(g[k].uuid, sizeof(g[k].uuid), "GPU-%s-%d", node, k);
        snprintf(g[k].model, sizeof(g[k].model), "L4");
    }
    q->gpus.v = g;
    q->gpus.n = 2;
}

static void
answer(void *arg, gp_err err, const void *reply, const char *detail)
{
    int i = (int)(intptr_t)arg;

    (void)reply;
    codes[i] = err;
    if (err != GP_EOK && i < NODES)
        printf("# registration %d: %s %s\n", i, gp_err_name(err), detail ? detail : "");
    answered++;
}

static gp_err
send_reg(int i, const char *site, const char *node)
{
    msg_node_register q;
    msg_gpu           g[2];
    char              s[GP_MAX_SUBJECT + 1];

    fill(&q, g, site, node);
    if (strcmp(node, "dup") == 0)
        g[1].index = 0;                  /* two GPUs with one index */
    snprintf(s, sizeof(s), "gp.node.%s.%s.register", site, node);
    return gp_call(bus, s, &msg_node_register_desc, &q, &msg_node_registered_desc, 20000, answer,
                   (void *)(intptr_t)i);
}

static void
setup(void)
{
    char           d[GP_ERRBUF_LEN] = "";
    msg_tenant     t = {0}, tout = {0};
    msg_site       s = {0}, sout = {0};
    msg_id_request id = {0};
    msg_deleted    del = {0};

    snprintf(t.id, sizeof(t.id), "op");
    t.kind = MSG_TENANT_KIND_OPERATOR;
    T_OK(call("gp.admin.tenant.create", &msg_tenant_desc, &t, &msg_tenant_desc, &tout, d) ==
         GP_EOK);
    gp_msg_clear(&msg_tenant_desc, &tout);
    snprintf(s.id, sizeof(s.id), "s1");
    snprintf(s.tenant, sizeof(s.tenant), "op");
    snprintf(s.region, sizeof(s.region), "eu-west");
    T_OK(call("gp.admin.site.create", &msg_site_desc, &s, &msg_site_desc, &sout, d) == GP_EOK);
    gp_msg_clear(&msg_site_desc, &sout);
    /* two nodes an operator deleted */
    for (int k = 0; k < 2; k++) {
        msg_node_register   q;
        msg_node_registered r = {0};
        msg_gpu             g[2];
        char                subj[GP_MAX_SUBJECT + 1];

        snprintf(id.id, sizeof(id.id), "gone%d", k);
        fill(&q, g, "s1", id.id);
        snprintf(subj, sizeof(subj), "gp.node.s1.%s.register", id.id);
        T_OK(call(subj, &msg_node_register_desc, &q, &msg_node_registered_desc, &r, d) == GP_EOK);
        gp_msg_clear(&msg_node_registered_desc, &r);
        T_OK(call("gp.admin.node.delete", &msg_id_request_desc, &id, &msg_deleted_desc, &del, d) ==
             GP_EOK);
        gp_msg_clear(&msg_deleted_desc, &del);
    }
}

static long
psql_count(const char *sql)
{
    char  cmd[1024], out[64] = "";
    FILE *f;

    snprintf(cmd, sizeof(cmd), "psql '%s' -XAtq -c \"%s\"", tl_env("GP_PG_CONNINFO"), sql);
    if ((f = popen(cmd, "r")) == NULL)
        return -1;
    if (fgets(out, sizeof(out), f) == NULL)
        out[0] = '\0';
    pclose(f);
    return out[0] ? atol(out) : -1;
}

int
main(void)
{
    char        port[16], bin[512], node[32];
    const char *argv[] = {bin, "--http-port", port, "--log-level", "warn", NULL};
    gp_bus_opts bo = {.url = tl_env("GP_NATS_URL"), .name = "regbatch-test"};
    pid_t       pid;
    double      t0, b0, n0, b1, n1, f1;
    int         ok = 0;

    loop = ev_loop_new(EVFLAG_AUTO);
    T_OK(gp_bus_new(loop, &bo, NULL, NULL, &bus) == GP_EOK);
    http_port = tl_free_port();
    snprintf(bin, sizeof(bin), "%s/bin/gridpool-registry", tl_env("GP_BUILD"));
    snprintf(port, sizeof(port), "%d", http_port);
    pid = tl_spawn((char *const *)argv);
    for (t0 = tl_now(); tl_now() - t0 < 30 && metric("gp_registry_heartbeats_total") < 0;)
        usleep(200000);
    usleep(500000);
    setup();
    b0 = metric("gp_registry_register_batches_total");
    n0 = metric("gp_registry_register_batched_total");
    for (int i = 0; i < NODES; i++) {
        snprintf(node, sizeof(node), "n%d", i);
        send_reg(i, "s1", node);
    }
    send_reg(NODES, "s1", "gone0");
    send_reg(NODES + 1, "s1", "gone1");
    send_reg(NODES + 2, "nosuchsite", "x1");
    send_reg(NODES + 3, "nosuchsite", "x2");
    send_reg(NODES + 4, "s1", "n7");                 /* n7 a second time */
    for (t0 = tl_now(); answered < SENT && tl_now() - t0 < 30;)
        tl_spin(loop, 0.05);
    T_OKM(answered == SENT, "%d of %d registrations answered in %.1f s", answered, SENT,
          tl_now() - t0);
    for (int i = 0; i < NODES; i++)
        ok += codes[i] == GP_EOK;
    T_OKM(ok == NODES, "every valid registration OK (%d of %d)", ok, NODES);
    T_OKM(codes[NODES] == GP_EDENIED && codes[NODES + 1] == GP_EDENIED,
          "the deleted nodes DENIED (%s, %s)", gp_err_name(codes[NODES]),
          gp_err_name(codes[NODES + 1]));
    T_OKM(codes[NODES + 2] == GP_ENOTFOUND && codes[NODES + 3] == GP_ENOTFOUND,
          "the missing site's nodes NOTFOUND (%s, %s)", gp_err_name(codes[NODES + 2]),
          gp_err_name(codes[NODES + 3]));
    T_OKM(codes[NODES + 4] == GP_EOK, "a node registering twice at once: both OK");
    b1 = metric("gp_registry_register_batches_total");
    n1 = metric("gp_registry_register_batched_total");
    f1 = metric("gp_registry_register_batch_failures_total");
    printf("# %.0f registrations in %.0f transactions\n", n1 - n0, b1 - b0);
    T_OKM(n1 - n0 >= NODES && b1 - b0 > 0 && b1 - b0 < (n1 - n0) / 2,
          "written in batches: %.0f registrations in %.0f transactions", n1 - n0, b1 - b0);
    T_OKM(f1 == 0, "no batch failed as a whole (%.0f)", f1);
    T_EQ_INT(psql_count("SELECT count(*) FROM nodes WHERE id LIKE 'n%'"), NODES);
    T_EQ_INT(psql_count("SELECT count(*) FROM gpus WHERE node LIKE 'n%'"), 2 * NODES);
    T_EQ_INT(psql_count("SELECT count(*) FROM nodes WHERE id IN ('gone0','gone1','x1','x2')"), 0);
    T_EQ_INT(psql_count("SELECT count(*) FROM nodes WHERE id = 'n7' AND boot_id = 'boot-n7'"
                        " AND cpu_cores = 8"), 1);

    /* a batch one node breaks */
    answered = 0;
    memset(codes, 0, sizeof(codes));
    for (int i = 0; i < 20; i++) {
        snprintf(node, sizeof(node), "m%d", i);
        send_reg(i, "s1", node);
    }
    send_reg(20, "s1", "dup");
    for (t0 = tl_now(); answered < 21 && tl_now() - t0 < 30;)
        tl_spin(loop, 0.05);
    ok = 0;
    for (int i = 0; i < 20; i++)
        ok += codes[i] == GP_EOK;
    T_OKM(answered == 21 && ok == 20 && codes[20] != GP_EOK,
          "one bad registration in a batch: the other %d OK, it refused (%s)", ok,
          gp_err_name(codes[20]));
    T_OKM(metric("gp_registry_register_batch_failures_total") >= 1,
          "its batch was written again one at a time (%.0f)",
          metric("gp_registry_register_batch_failures_total"));
    T_EQ_INT(psql_count("SELECT count(*) FROM nodes WHERE id LIKE 'm%'"), 20);
    T_EQ_INT(psql_count("SELECT count(*) FROM nodes WHERE id = 'dup'"), 0);

    kill(pid, SIGTERM);
    T_OKM(tl_wait_exit(pid, 15) == 0, "registry exited 0 on SIGTERM");
    gp_bus_free(bus);
    ev_loop_destroy(loop);
    gp_lib_close();
    return T_DONE();
}
