/* ctrnet.c -- a container attempt's network (ctrnet.h). */
#include <dirent.h>
#include <errno.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ctrnet.h"
#include "gp/log.h"

/* what no container may reach unless container-allow-nets says so */
static const char *const closed_nets[] = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                          "169.254.0.0/16", "100.64.0.0/10", "127.0.0.0/8",
                                          "224.0.0.0/4", "0.0.0.0/8"};

/* iptables -w ARGS..., waited for (at start only); its exit status. */
static int
ipt_v(const char *const *args)
{
    char *argv[24] = {(char *)"iptables", (char *)"-w"};
    int   k = 2;

    for (; args[k - 2] != NULL && k < 23; k++)
        argv[k] = (char *)args[k - 2];
    argv[k] = NULL;
    return proc_run_sync(argv, 10000);
}
#define ipt(...) ipt_v((const char *const[]){__VA_ARGS__, NULL})

/* A rule at the head of a built-in chain, once. */
static int
jump_first(const char *chain, int pos, const char *m1, const char *m2, const char *target)
{
    char p[8];

    if (ipt("-C", chain, m1, m2, "-j", target) == 0)
        return 0;
    snprintf(p, sizeof(p), "%d", pos);
    return ipt("-I", chain, p, m1, m2, "-j", target);
}

static void reclaim(const ctrnet_cfg *c);

/* The agent's own chains, named after its containers' net (GP-IN-10.89.0.0-16):
 * agents on one host (tests, a node split in two) never flush each
 * other's rules. */
typedef struct chains {
    char in[32], fwd[32];
} chains;

static chains
chains_of(const ctrnet_cfg *c)
{
    chains ch;
    char   net[24];

    snprintf(net, sizeof(net), "%s", c->cidr);
    for (char *p = net; *p != '\0'; p++)
        if (*p == '/')
            *p = '-';
    snprintf(ch.in, sizeof(ch.in), "GP-IN-%s", net);
    snprintf(ch.fwd, sizeof(ch.fwd), "GP-FWD-%s", net);
    return ch;
}

bool
ctrnet_init(const ctrnet_cfg *c, char *why, size_t wn)
{
    int    rc = 0;
    chains ch;

    if (c->cidr[0] == '\0')
        return true;
    if (strlen(c->cidr) > 18) {
        snprintf(why, wn, "container-net %s: not an IPv4 CIDR", c->cidr);
        return false;
    }
    ch = chains_of(c);
    reclaim(c);
    (void)ipt("-N", ch.in);
    (void)ipt("-N", ch.fwd);
    rc |= ipt("-F", ch.in);
    rc |= ipt("-F", ch.fwd);
    /* replies to what the node itself opened (an instance's port) pass */
    rc |= ipt("-A", ch.in, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j",
              "ACCEPT");
    rc |= ipt("-A", ch.in, "-j", "DROP");
    for (const char *s = c->allow; s != NULL && *s != '\0';) {
        char   net[64];
        size_t k = strcspn(s, ",");

        snprintf(net, sizeof(net), "%.*s", (int)(k < sizeof(net) ? k : sizeof(net) - 1), s);
        rc |= ipt("-A", ch.fwd, "-d", net, "-j", "ACCEPT");
        s += k + (s[k] == ',');
    }
    rc |= ipt("-A", ch.fwd, "-d", c->cidr, "-j", "DROP");
    for (size_t i = 0; i < sizeof(closed_nets) / sizeof(closed_nets[0]); i++)
        rc |= ipt("-A", ch.fwd, "-d", closed_nets[i], "-j", "DROP");
    rc |= ipt("-A", ch.fwd, "-j", "ACCEPT");
    rc |= jump_first("INPUT", 1, "-s", c->cidr, ch.in);
    rc |= jump_first("FORWARD", 1, "-s", c->cidr, ch.fwd);
    if (ipt("-C", "FORWARD", "-d", c->cidr, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED",
            "-j", "ACCEPT") != 0)
        rc |= ipt("-I", "FORWARD", "2", "-d", c->cidr, "-m", "conntrack", "--ctstate",
                  "ESTABLISHED,RELATED", "-j", "ACCEPT");
    /* a connection from outside to a mapped port (portmap's DNAT); not one
     * from a container (its host veth, ptp's veth*): where agents' rules
     * interleave this accept may come before that container's own chain */
    if (ipt("-C", "FORWARD", "!", "-i", "veth+", "-d", c->cidr, "-m", "conntrack", "--ctstate",
            "DNAT", "-j", "ACCEPT") != 0)
        rc |= ipt("-I", "FORWARD", "3", "!", "-i", "veth+", "-d", c->cidr, "-m", "conntrack",
                  "--ctstate", "DNAT", "-j", "ACCEPT");
    if (rc != 0) {
        snprintf(why, wn, "iptables: the containers' firewall rules could not be installed");
        return false;
    }
    return true;
}

void
ctrnet_fini(const ctrnet_cfg *c)
{
    chains ch;

    if (c->cidr == NULL || c->cidr[0] == '\0')
        return;
    ch = chains_of(c);
    (void)ipt("-D", "INPUT", "-s", c->cidr, "-j", ch.in);
    (void)ipt("-D", "FORWARD", "-s", c->cidr, "-j", ch.fwd);
    (void)ipt("-D", "FORWARD", "-d", c->cidr, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED",
              "-j", "ACCEPT");
    (void)ipt("-D", "FORWARD", "!", "-i", "veth+", "-d", c->cidr, "-m", "conntrack",
              "--ctstate", "DNAT", "-j", "ACCEPT");
    (void)ipt("-F", ch.in);
    (void)ipt("-F", ch.fwd);
    if (ipt("-X", ch.in) != 0 || ipt("-X", ch.fwd) != 0)
        GP_WARN("container_firewall_kept", "chains=%s,%s", ch.in, ch.fwd);
}

void
ctrnet_path(const char *id, char *out, size_t n)
{
    snprintf(out, n, "/run/netns/%s", id);
}

struct net_step {
    const ctrnet_cfg *c;
    struct ev_loop   *loop;
    char              id[96];
    char              conf[512];     /* ptp's config, <state>/<id>.json */
    char              out[512];      /* its output: the CNI result, portmap's prevResult */
    char              pmconf[512];   /* portmap's, <state>/<id>.portmap (not *.json: reclaim) */
    char              pmout[512];
    ctrnet_port       ports[CTRNET_MAX_PORTS];
    int               nports;
    proc_done_fn     *cb;
    void             *arg;
};
typedef struct net_step net_step;

/* The plugin's environment (the CNI spec's variables). */
typedef struct cni_env {
    char  e[6][600];
    char *v[7];
} cni_env;

static void
cni_env_init(cni_env *ce, const ctrnet_cfg *c, const char *cmd, const char *id)
{
    snprintf(ce->e[0], sizeof(ce->e[0]), "CNI_COMMAND=%s", cmd);
    snprintf(ce->e[1], sizeof(ce->e[1]), "CNI_CONTAINERID=%s", id);
    snprintf(ce->e[2], sizeof(ce->e[2]), "CNI_NETNS=/run/netns/%s", id);
    snprintf(ce->e[3], sizeof(ce->e[3]), "CNI_IFNAME=eth0");
    snprintf(ce->e[4], sizeof(ce->e[4]), "CNI_PATH=%s", c->cni_path);
    snprintf(ce->e[5], sizeof(ce->e[5]), "PATH=/usr/sbin:/usr/bin:/sbin:/bin");
    for (int i = 0; i < 6; i++)
        ce->v[i] = ce->e[i];
    ce->v[6] = NULL;
}

/* The plugin (ptp, or portmap when pm) with its config on stdin. */
static gp_err
cni(net_step *st, const char *cmd, bool pm, proc_done_fn *cb)
{
    cni_env ce;
    char    plugin[300];
    char   *argv[] = {plugin, NULL};

    snprintf(plugin, sizeof(plugin), "%s/%s", st->c->cni_path, pm ? "portmap" : "ptp");
    cni_env_init(&ce, st->c, cmd, st->id);
    return proc_run_env(st->loop, argv, ce.v, pm ? st->pmconf : st->conf, pm ? st->pmout : st->out,
                        cb, st, NULL);
}

static void deleted(void *arg, int status, const char *tail);
static void pm_deleted(void *arg, int status, const char *tail);

/* Takes down what is up: portmap's mappings first when it has a config. */
static void
take_down(net_step *st)
{
    gp_err rc = access(st->pmconf, R_OK) == 0 ? cni(st, "DEL", true, pm_deleted)
                                              : cni(st, "DEL", false, deleted);

    if (rc != GP_EOK)
        free(st);
}

static void
done(net_step *st, int status, const char *tail)
{
    if (st->cb == NULL) {                /* forgotten: undo it */
        take_down(st);
        return;
    }
    st->cb(st->arg, status, tail);
    free(st);
}

/* portmap's config: the ports, and ptp's result as its prevResult (the
 * chaining of the CNI spec, done by hand: no conflist runner in Debian). */
static gp_err
write_pmconf(net_step *st)
{
    FILE *in = fopen(st->out, "r"), *f;
    char  res[8192];
    size_t k = in != NULL ? fread(res, 1, sizeof(res) - 1, in) : 0;

    if (in != NULL)
        fclose(in);
    res[k] = '\0';
    if (k == 0 || k == sizeof(res) - 1 || res[strspn(res, " \t\r\n")] != '{')
        return GP_EINVAL;
    if ((f = fopen(st->pmconf, "w")) == NULL)
        return GP_EINTERNAL;
    fprintf(f, "{\"cniVersion\":\"1.0.0\",\"name\":\"gridpool\",\"type\":\"portmap\","
               "\"capabilities\":{\"portMappings\":true},\"snat\":true,"
               "\"runtimeConfig\":{\"portMappings\":[");
    for (int i = 0; i < st->nports; i++)
        fprintf(f, "%s{\"hostPort\":%u,\"containerPort\":%u,\"protocol\":\"%s\"}", i ? "," : "",
                st->ports[i].host, st->ports[i].ctr, st->ports[i].proto);
    fprintf(f, "]},\"prevResult\":%s}\n", res);
    return fclose(f) == 0 ? GP_EOK : GP_EINTERNAL;
}

static void
mapped(void *arg, int status, const char *tail)
{
    done(arg, status, tail);
}

static void
added(void *arg, int status, const char *tail)
{
    net_step *st = arg;

    if (status == 0 && st->nports > 0 && st->cb != NULL) {
        if (write_pmconf(st) != GP_EOK)
            done(st, -1, "portmap: the ptp plugin's result is not a CNI result");
        else if (cni(st, "ADD", true, mapped) != GP_EOK)
            done(st, -1, "cannot run the CNI portmap plugin");
        return;
    }
    done(st, status, tail);
}

static void
ns_made(void *arg, int status, const char *tail)
{
    net_step *st = arg;

    if (status == 0 && cni(st, "ADD", false, added) == GP_EOK)
        return;
    if (st->cb != NULL)
        st->cb(st->arg, status ? status : -1, status ? tail : "cannot run the CNI plugin");
    free(st);
}

void
ctrnet_forget(ctrnet_op *op)
{
    if (op != NULL)
        op->cb = NULL;
}

/* The plugin's config: one routed veth, host-local addresses, masquerade. */
static gp_err
write_conf(net_step *st)
{
    FILE *f;

    snprintf(st->conf, sizeof(st->conf), "%s/%s.json", st->c->state_dir, st->id);
    snprintf(st->out, sizeof(st->out), "%s/%s.out", st->c->state_dir, st->id);
    snprintf(st->pmconf, sizeof(st->pmconf), "%s/%s.portmap", st->c->state_dir, st->id);
    snprintf(st->pmout, sizeof(st->pmout), "%s/%s.pmout", st->c->state_dir, st->id);
    if ((f = fopen(st->conf, "w")) == NULL)
        return GP_EINTERNAL;
    fprintf(f, "{\"cniVersion\":\"1.0.0\",\"name\":\"gridpool\",\"type\":\"ptp\",\"ipMasq\":true,"
               "\"ipam\":{\"type\":\"host-local\",\"ranges\":[[{\"subnet\":\"%s\"}]],"
               "\"routes\":[{\"dst\":\"0.0.0.0/0\"}],\"dataDir\":\"%s/ipam\"}}\n",
            st->c->cidr, st->c->state_dir);
    return fclose(f) == 0 ? GP_EOK : GP_EINTERNAL;
}

static net_step *
step_new(const ctrnet_cfg *c, struct ev_loop *loop, const char *id)
{
    net_step *st = calloc(1, sizeof(*st));

    if (st == NULL)
        return NULL;
    st->c = c;
    st->loop = loop;
    snprintf(st->id, sizeof(st->id), "%s", id);
    mkdir(c->state_dir, 0700);
    if (write_conf(st) != GP_EOK) {
        free(st);
        return NULL;
    }
    return st;
}

gp_err
ctrnet_up(const ctrnet_cfg *c, struct ev_loop *loop, const char *id, const ctrnet_port *ports,
          int nports, proc_done_fn *cb, void *arg, ctrnet_op **op)
{
    net_step *st = step_new(c, loop, id);
    char     *argv[] = {(char *)"ip", (char *)"netns", (char *)"add", NULL, NULL};

    *op = st;
    if (st == NULL)
        return GP_EINTERNAL;
    for (int i = 0; i < nports && i < CTRNET_MAX_PORTS; i++)
        st->ports[st->nports++] = ports[i];
    unlink(st->pmconf);                  /* an earlier attempt's of this id: none */
    st->cb = cb;
    st->arg = arg;
    argv[3] = st->id;
    if (proc_run(loop, argv, st->out, ns_made, st, NULL) != GP_EOK) {
        free(st);
        *op = NULL;
        return GP_EINTERNAL;
    }
    return GP_EOK;
}

static void
pm_deleted(void *arg, int status, const char *tail)
{
    net_step *st = arg;

    if (status != 0)
        GP_WARN("container_ports_del_failed", "id=%s tail=\"%s\"", st->id, tail);
    unlink(st->pmconf);
    unlink(st->pmout);
    if (cni(st, "DEL", false, deleted) != GP_EOK)
        free(st);
}

static void
deleted(void *arg, int status, const char *tail)
{
    net_step *st = arg;
    char     *argv[] = {(char *)"ip", (char *)"netns", (char *)"delete", st->id, NULL};

    if (status != 0)
        GP_WARN("container_net_del_failed", "id=%s tail=\"%s\"", st->id, tail);
    proc_run(st->loop, argv, NULL, NULL, NULL, NULL);
    unlink(st->conf);
    unlink(st->out);
    free(st);
}

/* The plugin's DEL and the namespace's delete, waited for (no loop). */
/* One plugin's DEL, waited for: it reads its config on stdin. */
static void
del_sync(const ctrnet_cfg *c, const char *id, const char *type, const char *conf)
{
    cni_env ce;
    char    plugin[300];
    char   *sh[] = {(char *)"sh", (char *)"-c", (char *)"exec \"$0\" <\"$1\"", plugin, (char *)conf,
                    NULL};

    snprintf(plugin, sizeof(plugin), "%s/%s", c->cni_path, type);
    cni_env_init(&ce, c, "DEL", id);
    (void)proc_run_sync_env(sh, ce.v, 10000);
}

static void
down_sync(const ctrnet_cfg *c, const char *id, const char *conf)
{
    char  ns[128], pm[512];
    char *del[] = {(char *)"ip", (char *)"netns", (char *)"delete", ns, NULL};

    snprintf(ns, sizeof(ns), "%s", id);
    snprintf(pm, sizeof(pm), "%s/%s.portmap", c->state_dir, id);
    if (access(pm, R_OK) == 0) {
        del_sync(c, id, "portmap", pm);
        unlink(pm);
    }
    del_sync(c, id, "ptp", conf);
    (void)proc_run_sync(del, 5000);
}

void
ctrnet_down_sync(const ctrnet_cfg *c, const char *id)
{
    char conf[512], out[512];

    if (c->cidr == NULL || c->cidr[0] == '\0')
        return;
    snprintf(conf, sizeof(conf), "%s/%s.json", c->state_dir, id);
    snprintf(out, sizeof(out), "%s/%s.out", c->state_dir, id);
    if (access(conf, R_OK) != 0)
        return;
    down_sync(c, id, conf);
    unlink(conf);
    unlink(out);
}

static void
reclaim(const ctrnet_cfg *c)
{
    DIR           *d = opendir(c->state_dir);
    struct dirent *de;
    char           id[96];

    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        size_t k = strlen(de->d_name);

        if (k < 6 || k - 5 >= sizeof(id) || strcmp(de->d_name + k - 5, ".json") != 0)
            continue;
        snprintf(id, sizeof(id), "%.*s", (int)(k - 5), de->d_name);
        GP_WARN("container_net_reclaimed", "id=%s", id);
        ctrnet_down_sync(c, id);
    }
    closedir(d);
}

void
ctrnet_down(const ctrnet_cfg *c, struct ev_loop *loop, const char *id)
{
    net_step *st;

    if (c->cidr[0] == '\0' || (st = step_new(c, loop, id)) == NULL)
        return;
    take_down(st);
}
