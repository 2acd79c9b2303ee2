/* container.c -- one attempt as an OCI container (container.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <net/if.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "container.h"
#include "gp/id.h"
#include "gp/imageref.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "ocispec.h"
#include "proc.h"
#include "secretfile.h"

#define CTR_ENV_MAX (MSG_RUN_ATTEMPT_ENV_MAXITEMS + IMG_ENV_MAX + 8)
#define CTR_ARG_MAX (IMG_ARGS_MAX + MSG_RUN_ATTEMPT_ARGS_MAXITEMS + 4)

struct ctr {
    ctr_node       *n;
    struct ev_loop *loop;
    const ctr_cbs  *cbs;
    void           *arg;
    char            id[96];             /* the runtime's container id */
    char            job[MSG_RUN_ATTEMPT_JOB_ID_MAXLEN + 1];
    uint32_t        attempt;
    int             slot;
    uint32_t        host_id;
    char            digest[72];
    char            bundle[512];
    char            logdir[512];
    char            pidfile[560];
    char            ckpt[MSG_RUN_ATTEMPT_CHECKPOINT_DIR_MAXLEN + 1];   /* bound at /checkpoint */
    char            ckpt_uri[MSG_RUN_ATTEMPT_CHECKPOINT_URI_MAXLEN + 1]; /* GP_CHECKPOINT_URI */
    bool            has_resume;
    uint64_t        resume_step;
    char            resume_id[MSG_RUN_ATTEMPT_RESUME_ID_MAXLEN + 1];
    char            report_dir[512];    /* bound at /run/gridpool: the job's reports */
    char            report[530];        /* report_dir/checkpoint */
    bool            has_ssh, has_ckpt_cred;   /* secret files in report_dir (secretfile.h) */
    ev_stat         report_w;
    uint64_t        last_step;
    bool            reported_any;
    char            gpus[64];           /* "0,3": the node's GPU indices */
    oci_dev         devs[OCI_MAX_DEVS];
    int             ndevs;
    uint32_t        cpu_millis, memory_mb, scratch_mb, pids;
    uint64_t        resume_ms;
    char            command[MSG_RUN_ATTEMPT_COMMAND_MAXLEN + 1];
    char          (*env)[MSG_RUN_ATTEMPT_ENV_ITEM_MAXLEN + 1];     /* the spec's: copies */
    uint32_t        nenv;
    char          (*args)[MSG_RUN_ATTEMPT_ARGS_ITEM_MAXLEN + 1];
    uint32_t        nargs;
    img_pull       *pull;
    ctrnet_port     ports[CTRNET_MAX_PORTS];   /* host -> container, named below */
    char            port_name[CTRNET_MAX_PORTS][MSG_PORT_NAME_MAXLEN + 1];
    int             nports;
    ctrnet_op      *netop;              /* the network being made */
    bool            net_up;             /* made: taken down at the end */
    proc           *step;               /* the chown before the run */
    bool            ran;                /* `run` was spawned */
    char           *kill_argv[8];
    char            sig_kill[8];
    /* the output ring */
    int             rfd, lfd;
    size_t          lbytes;
    ev_io           out_io;
};

/* ---- the node ------------------------------------------------------------------- */

static char *
read_file(const char *path, size_t max)
{
    FILE  *f = fopen(path, "rb");
    char  *s;
    size_t k;

    if (f == NULL)
        return NULL;
    s = malloc(max + 1);
    k = s ? fread(s, 1, max, f) : 0;
    fclose(f);
    if (s == NULL || k == 0 || k == max) {
        free(s);
        return NULL;
    }
    s[k] = '\0';
    return s;
}

static bool
find_program(const char *name, char *out, size_t n)
{
    static const char *const dirs[] = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
                                       "/usr/bin", "/sbin", "/bin"};

    if (strchr(name, '/') != NULL) {
        strfmt(out, n, "%s", name);
        return access(out, X_OK) == 0;
    }
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        strfmt(out, n, "%s/%s", dirs[i], name);
        if (access(out, X_OK) == 0)
            return true;
    }
    return false;
}

static int
mkdir_p(const char *dir, mode_t mode)
{
    char path[PATH_MAX];

    strfmt(path, sizeof(path), "%s", dir);
    for (char *p = path + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, mode) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(path, mode) != 0 && errno != EEXIST ? -1 : 0;
}

/* The address endpoints name: public-address, else the first IPv4
 * address of an interface that is up and not loopback (the node's LAN
 * address: a site forwards to it), else loopback. */
static void
node_addr(ctr_node *n)
{
    struct ifaddrs *ifs, *i;

    strfmt(n->addr, sizeof(n->addr), "%s", n->public_addr ? n->public_addr : "");
    if (n->addr[0] != '\0' || getifaddrs(&ifs) != 0) {
        if (n->addr[0] == '\0')
            strfmt(n->addr, sizeof(n->addr), "127.0.0.1");
        return;
    }
    for (i = ifs; i != NULL && n->addr[0] == '\0'; i = i->ifa_next)
        if (i->ifa_addr != NULL && i->ifa_addr->sa_family == AF_INET &&
            (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK))
            inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, n->addr,
                      sizeof(n->addr));
    freeifaddrs(ifs);
    if (n->addr[0] == '\0')
        strfmt(n->addr, sizeof(n->addr), "127.0.0.1");
}

bool
ctr_node_init(ctr_node *n, const char *runtime, const char *seccomp_path, char *why, size_t wn)
{
    char d[600];

    if (!find_program(runtime, n->runtime, sizeof(n->runtime))) {
        strfmt(why, wn, "OCI runtime %s not found", runtime);
        return false;
    }
    n->seccomp_json = read_file(seccomp_path, 1u << 20);
    if (n->seccomp_json == NULL || n->seccomp_json[strspn(n->seccomp_json, " \t\r\n")] != '{') {
        strfmt(why, wn, "seccomp profile %s unreadable or not a JSON object", seccomp_path);
        free(n->seccomp_json);
        n->seccomp_json = NULL;
        return false;
    }
    strfmt(d, sizeof(d), "%s/bundles", n->img.state_dir);
    if (mkdir_p(d, 0711) != 0 || mkdir_p(n->runtime_root, 0700) != 0) {
        strfmt(why, wn, "%s: %s", d, strerror(errno));
        return false;
    }
    /* the state folder and the image cache are the agent's; the attempts
     * reach their own bundle and rootfs by path only (0711) */
    chmod(n->img.state_dir, 0711);
    strfmt(n->cni_dir, sizeof(n->cni_dir), "%s/cni", n->img.state_dir);
    n->net.state_dir = n->cni_dir;
    if (n->net.cidr == NULL)
        n->net.cidr = "";
    node_addr(n);
    n->port_next = n->port_lo;
    return ctrnet_init(&n->net, why, wn);
}

void
ctr_node_fini(ctr_node *n)
{
    if (n->seccomp_json != NULL)          /* it was initialised: its rules are installed */
        ctrnet_fini(&n->net);
    free(n->seccomp_json);
    n->seccomp_json = NULL;
}

/* ---- limits and devices ------------------------------------------------------------ */

static gp_err
limit(uint32_t asked, uint32_t def, uint32_t max, const char *what, uint32_t *out, char *why,
      size_t wn)
{
    *out = asked ? asked : def;
    if (max > 0 && *out > max) {
        strfmt(why, wn, "resources.%s %u is beyond what this node gives one attempt (%u)", what,
                 *out, max);
        return GP_EINVAL;
    }
    return GP_EOK;
}

static gp_err
limits(ctr *c, const msg_resources *r, char *why, size_t wn)
{
    const ctr_node *n = c->n;
    gp_err          rc = limit(r->cpu_millis, n->cpu_millis, n->max_cpu_millis, "cpu_millis",
                               &c->cpu_millis, why, wn);

    if (rc == GP_EOK)
        rc = limit(r->memory_mb, n->memory_mb, n->max_memory_mb, "memory_mb", &c->memory_mb, why,
                   wn);
    if (rc == GP_EOK)
        rc = limit(r->scratch_mb, n->scratch_mb, n->max_scratch_mb, "scratch_mb", &c->scratch_mb,
                   why, wn);
    if (rc == GP_EOK)
        rc = limit(r->pids, n->pids, 0, "pids", &c->pids, why, wn);
    return rc;
}

/* A device node the attempt may open: the host's own numbers when the
 * host has it (then it is bound in), else the driver's nominal ones (the
 * simulated backend: a cgroup rule only). */
static void
add_dev(ctr *c, const char *path, int64_t major, int64_t minor)
{
    struct stat st;
    oci_dev    *d;

    if (c->ndevs >= OCI_MAX_DEVS)
        return;
    d = &c->devs[c->ndevs];
    strfmt(d->path, sizeof(d->path), "%s", path);
    d->major = major;
    d->minor = minor;
    d->bind = false;
    if (stat(path, &st) == 0 && S_ISCHR(st.st_mode)) {
        d->major = major(st.st_rdev);
        d->minor = minor(st.st_rdev);
        d->bind = true;
    } else if (major < 0) {
        return;                           /* no nominal number: not there, not needed */
    }
    c->ndevs++;
}

/* The GPUs' own nodes and the driver's control nodes, nothing else. */
static void
gpu_devs(ctr *c, const msg_run_attempt *in, const int *minors)
{
    char   path[64];
    size_t k = 0;

    c->gpus[0] = '\0';
    for (uint32_t i = 0; i < in->gpus.n; i++) {
        strfmt(path, sizeof(path), "/dev/nvidia%d", minors[i]);
        add_dev(c, path, 195, minors[i]);
        k += (size_t)strfmt(c->gpus + k, sizeof(c->gpus) - (k < sizeof(c->gpus) ? k : sizeof(c->gpus)), "%s%d",
                              i ? "," : "", ((const int32_t *)in->gpus.v)[i]);
    }
    if (in->gpus.n == 0)
        return;
    add_dev(c, "/dev/nvidiactl", 195, 255);
    add_dev(c, "/dev/nvidia-uvm", -1, -1);
    add_dev(c, "/dev/nvidia-uvm-tools", -1, -1);
}

/* ---- the output ring ------------------------------------------------------------- */

static void
log_open(ctr *c)
{
    char path[600];

    strfmt(path, sizeof(path), "%s/output", c->logdir);
    c->lfd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    c->lbytes = 0;
}

static uint64_t
file_size(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* base: the offset in the attempt's whole output where output.1 starts
 * (what the ring dropped before it), kept in a file for the readers. */
static uint64_t
log_base(const char *logdir)
{
    char     path[600];
    uint64_t v = 0;
    FILE    *f;

    strfmt(path, sizeof(path), "%s/base", logdir);
    if ((f = fopen(path, "r")) != NULL) {
        if (fscanf(f, "%" SCNu64, &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

/* The current file is full: it becomes output.1 (the older half goes,
 * and base moves past it). */
static void
log_rotate(ctr *c)
{
    char     a[600], b[610], p[600], t[610];
    uint64_t base = log_base(c->logdir);
    FILE    *f;

    close(c->lfd);
    strfmt(a, sizeof(a), "%s/output", c->logdir);
    strfmt(b, sizeof(b), "%s/output.1", c->logdir);
    strfmt(p, sizeof(p), "%s/base", c->logdir);
    strfmt(t, sizeof(t), "%s/base.tmp", c->logdir);
    base += file_size(b);
    if ((f = fopen(t, "w")) != NULL) {
        fprintf(f, "%" PRIu64 "\n", base);
        if (fclose(f) == 0)
            rename(t, p);
    }
    rename(a, b);
    log_open(c);
}

/* Reads [off, off + n) of the ring's two files, output.1 then output,
 * which hold the whole output's [base, base + s1 + s0). */
static uint32_t
ring_read(const char *logdir, uint64_t base, uint64_t s1, uint64_t off, uint8_t *buf, uint32_t n)
{
    char     path[600];
    uint32_t got = 0;

    for (int part = 0; part < 2 && got < n; part++) {
        uint64_t from = part == 0 ? base : base + s1;
        uint64_t len = part == 0 ? s1 : UINT64_MAX;
        int      fd;
        ssize_t  k;

        if (off + got < from || off + got - from >= len)
            continue;
        strfmt(path, sizeof(path), "%s/%s", logdir, part == 0 ? "output.1" : "output");
        if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
            continue;
        k = pread(fd, buf + got, n - got, (off_t)(off + got - from));
        close(fd);
        if (k > 0)
            got += (uint32_t)k;
    }
    return got;
}

gp_err
ctr_logs_read(const ctr_node *n, const msg_logs_request *in, uint32_t attempt, msg_logs *out,
              char *why, size_t wn)
{
    char     dir[600], p1[610], p0[610];
    uint64_t base, s1, s0, total, off;
    uint32_t max = in->max_bytes ? in->max_bytes : 65536;
    struct stat st;

    strfmt(dir, sizeof(dir), "%s/logs/%s/%u", n->img.state_dir, in->job_id, attempt);
    if (!gp_id_ok(in->job_id) || stat(dir, &st) != 0) {
        strfmt(why, wn, "no output of job %s attempt %u on this node", in->job_id, attempt);
        return GP_ENOTFOUND;
    }
    strfmt(p1, sizeof(p1), "%s/output.1", dir);
    strfmt(p0, sizeof(p0), "%s/output", dir);
    base = log_base(dir);
    s1 = file_size(p1);
    s0 = file_size(p0);
    total = base + s1 + s0;
    off = GP_HAS(in, MSG_LOGS_REQUEST__OFFSET) ? in->offset : (total > max ? total - max : 0);
    if (off > total)
        off = total;
    out->dropped = off < base ? base - off : 0;
    if (off < base)
        off = base;
    if ((out->data.p = malloc(max)) == NULL)
        return GP_ENOMEM;
    out->data.n = ring_read(dir, base, s1, off, out->data.p, max);
    out->offset = off;
    out->next_offset = off + out->data.n;
    out->attempt = attempt;
    strfmt(out->job_id, sizeof(out->job_id), "%s", in->job_id);
    return GP_EOK;
}

static void
out_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    ctr    *c = GP_CONTAINER_OF(w, ctr, out_io);
    char    buf[16384];
    ssize_t k;

    (void)revents;
    while ((k = read(c->rfd, buf, sizeof(buf))) > 0) {
        size_t half = (size_t)c->n->log_kb * 512u;

        if (c->lfd >= 0 && write(c->lfd, buf, (size_t)k) == k)
            c->lbytes += (size_t)k;
        if (c->lfd >= 0 && half > 0 && c->lbytes >= half)
            log_rotate(c);
    }
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
        ev_io_stop(loop, w);
        close(c->rfd);
        c->rfd = -1;
    }
}

/* ---- the run --------------------------------------------------------------------- */

typedef struct strv {
    const char *v[CTR_ENV_MAX > CTR_ARG_MAX ? CTR_ENV_MAX : CTR_ARG_MAX];
    int         n;
} strv;

static bool
env_named(const strv *e, const char *kv)
{
    size_t k = strcspn(kv, "=");

    for (int i = 0; i < e->n; i++)
        if (strncmp(e->v[i], kv, k) == 0 && e->v[i][k] == '=')
            return true;
    return false;
}

/* Earlier entries win: ours, then the spec's, then the image's. */
static void
env_push(strv *e, const char *kv)
{
    if (strchr(kv, '=') != NULL && !env_named(e, kv) && e->n < CTR_ENV_MAX)
        e->v[e->n++] = kv;
}

static void
build_env(ctr *c, const img_config *ic, strv *e, char (*own)[300])
{
    strfmt(own[0], 300, "GP_JOB_ID=%s", c->job);
    strfmt(own[1], 300, "GP_ATTEMPT=%u", c->attempt);
    strfmt(own[2], 300, "GP_CHECKPOINT_DIR=%s", c->ckpt[0] ? "/checkpoint" : "");
    strfmt(own[3], 300, "GP_RESUME_MS=%llu", (unsigned long long)c->resume_ms);
    strfmt(own[4], 300, "GP_GPUS=%s", c->gpus);
    strfmt(own[5], 300, "GP_SCRATCH=/scratch");
    strfmt(own[6], 300, "GP_REPORT_DIR=/run/gridpool");
    strfmt(own[7], 300, "GP_CHECKPOINT_URI=%s", c->ckpt_uri);
    for (int i = 0; i < 8; i++)
        env_push(e, own[i]);
    if (c->has_resume) {                 /* the job's last reported checkpoint */
        strfmt(own[8], 300, "GP_RESUME_STEP=%llu", (unsigned long long)c->resume_step);
        strfmt(own[9], 300, "GP_RESUME_CHECKPOINT=%s", c->resume_id);
        env_push(e, own[8]);
        env_push(e, own[9]);
    }
    if (c->has_ssh)
        env_push(e, "GP_SSH_AUTHORIZED_KEYS=/run/gridpool/" SECRETFILE_SSH);
    if (c->has_ckpt_cred)
        env_push(e, "GP_CHECKPOINT_CREDENTIALS=/run/gridpool/" SECRETFILE_CHECKPOINT);
    for (uint32_t i = 0; i < c->nenv; i++)
        env_push(e, c->env[i]);
    for (int i = 0; i < ic->nenv; i++)
        env_push(e, ic->env[i]);
    env_push(e, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    env_push(e, "HOME=/root");
}

/* command: /bin/sh -c; else the entrypoint with the spec's args, or the
 * image's own entrypoint and cmd. */
static void
build_args(const ctr *c, const img_config *ic, strv *a)
{
    if (c->command[0] != '\0') {
        a->v[a->n++] = "/bin/sh";
        a->v[a->n++] = "-c";
        a->v[a->n++] = c->command;
        return;
    }
    for (int i = 0; i < (c->nargs > 0 ? ic->nentry : ic->nargs); i++)
        a->v[a->n++] = ic->args[i];
    for (uint32_t i = 0; i < c->nargs; i++)
        a->v[a->n++] = c->args[i];
}

/* A user namespace cannot raise a limit: the agent's own hard limit
 * bounds the container's (65536 at most). */
static uint32_t
nofile_max(void)
{
    struct rlimit r;

    if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_max == RLIM_INFINITY || r.rlim_max > 65536)
        return 65536;
    return (uint32_t)r.rlim_max;
}

static gp_err
write_config(ctr *c, const char *imgdir, char *why, size_t wn)
{
    img_config ic;
    strv       env = {0}, args = {0};
    char       own[10][300], rootfs[600], cg[128], path[600];
    gp_buf     b;
    gp_err     rc = img_config_read(imgdir, &ic, why, wn);
    FILE      *f;
    char       netns[160];

    ctrnet_path(c->id, netns, sizeof(netns));

    if (rc != GP_EOK)
        return rc;
    build_env(c, &ic, &env, own);
    build_args(c, &ic, &args);
    strfmt(rootfs, sizeof(rootfs), "%s/rootfs", imgdir);
    strfmt(cg, sizeof(cg), "/gridpool/%s", c->id);
    oci_in in = {.rootfs = rootfs, .hostname = c->id, .args = args.v, .nargs = args.n,
                 .env = env.v, .nenv = env.n, .cwd = ic.cwd, .uid = ic.uid, .gid = ic.gid,
                 .host_id = c->host_id, .id_count = CTR_IDS,
                 .memory_bytes = (uint64_t)c->memory_mb << 20, .cpu_millis = c->cpu_millis,
                 .pids = c->pids, .nofile = nofile_max(), .scratch_bytes = (uint64_t)c->scratch_mb << 20,
                 .devs = c->devs, .ndevs = c->ndevs, .ckpt_dir = c->ckpt[0] ? c->ckpt : NULL,
                 .report_dir = c->report_dir, .netns = c->n->net.cidr[0] ? netns : NULL,
                 .cgroups_path = cg, .seccomp_json = c->n->seccomp_json, .gpus = c->gpus};

    gp_buf_init(&b, 4u << 20);
    rc = oci_config(&in, &b, why, wn);
    img_config_free(&ic);
    strfmt(path, sizeof(path), "%s/config.json", c->bundle);
    if (rc == GP_EOK && ((f = fopen(path, "w")) == NULL || fwrite(b.p, 1, b.n, f) != b.n ||
                         fclose(f) != 0)) {
        strfmt(why, wn, "cannot write %s: %s", path, strerror(errno));
        rc = GP_EINTERNAL;
    }
    gp_buf_fini(&b);
    return rc;
}

static void
fail(ctr *c, const char *why)
{
    GP_WARN("container_failed_to_start", "job=%s attempt=%u why=\"%s\"", c->job, c->attempt, why);
    c->cbs->failed(c->arg, why);
}

static void report_cb(struct ev_loop *loop, ev_stat *w, int revents);

static void
run(ctr *c)
{
    int   p[2];
    pid_t pid;
    char  root[300];
    char *argv[] = {c->n->runtime, (char *)"--root", root, (char *)"run", (char *)"--bundle",
                    c->bundle, (char *)"--pid-file", c->pidfile, c->id, NULL};

    strfmt(root, sizeof(root), "%s", c->n->runtime_root);
    if (pipe2(p, O_CLOEXEC) != 0) {
        fail(c, "cannot make the output pipe");
        return;
    }
    pid = proc_spawn_fd(argv, p[1]);
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        fail(c, "cannot run the OCI runtime");
        return;
    }
    c->rfd = p[0];
    fcntl(c->rfd, F_SETFL, O_NONBLOCK);
    log_open(c);
    ev_io_init(&c->out_io, out_cb, c->rfd, EV_READ);
    ev_io_start(c->loop, &c->out_io);
    ev_stat_init(&c->report_w, report_cb, c->report, 0.5);
    ev_stat_start(c->loop, &c->report_w);
    c->ran = true;
    c->cbs->running(c->arg, pid);
}

static void
chowned(void *arg, int status, const char *tail)
{
    ctr *c = arg;
    char why[300];

    c->step = NULL;
    if (status != 0) {
        strfmt(why, sizeof(why), "checkpoint folder %s: chown failed: %s", c->ckpt, tail);
        fail(c, why);
        return;
    }
    run(c);
}

static void after_net(ctr *c);

static void
net_ready(void *arg, int status, const char *tail)
{
    ctr *c = arg;
    char why[300];

    c->netop = NULL;
    c->net_up = true;                    /* a part may be up: taken down at the end */
    if (status != 0) {
        strfmt(why, sizeof(why), "network: %s", tail);
        fail(c, why);
        return;
    }
    after_net(c);
}

/* The image is here: the bundle, its network, then the checkpoint folder
 * handed to the attempt's own ids (an earlier attempt had others), then
 * the run. */
static void
pulled(void *arg, gp_err rc, const char *why_in, const char *digest, const char *dir)
{
    ctr  *c = arg;
    char  why[400];

    c->pull = NULL;
    if (rc != GP_EOK) {
        fail(c, why_in);
        return;
    }
    strfmt(c->digest, sizeof(c->digest), "%s", digest);
    if (write_config(c, dir, why, sizeof(why)) != GP_EOK) {
        fail(c, why);
        return;
    }
    if (c->n->net.cidr[0] != '\0') {
        if (ctrnet_up(&c->n->net, c->loop, c->id, c->ports, c->nports, net_ready, c,
                      &c->netop) != GP_EOK)
            fail(c, "network: cannot start making it");
        return;
    }
    after_net(c);
}

/* The checkpoint folder handed to the attempt's own ids, then the run. */
static void
after_net(ctr *c)
{
    char ids[32], log[600];

    if (c->ckpt[0] == '\0') {
        run(c);
        return;
    }
    strfmt(ids, sizeof(ids), "%u:%u", c->host_id, c->host_id);
    strfmt(log, sizeof(log), "%s/chown.log", c->bundle);
    char *argv[] = {(char *)"chown", (char *)"-R", (char *)"--no-dereference", ids, c->ckpt, NULL};

    if (proc_run(c->loop, argv, log, chowned, c, &c->step) != GP_EOK)
        fail(c, "cannot run chown");
}

static int
slot_take(ctr_node *n)
{
    for (int i = 0; i < CTR_SLOTS; i++)
        if (!(n->slots & (1ull << i))) {
            n->slots |= 1ull << i;
            return i;
        }
    return -1;
}

/* A report folder left by an earlier run of the agent: its one file (a
 * folder of the job's own making is not ours to walk: renamed aside). */
static int
rm_tree_quick(const char *dir)
{
    char path[600], aside[600];

    strfmt(path, sizeof(path), "%s/checkpoint", dir);
    unlink(path);
    if (rmdir(dir) == 0 || errno == ENOENT)
        return 0;
    strfmt(aside, sizeof(aside), "%s.old.%ld", dir, (long)getpid());
    return rename(dir, aside);
}

bool
ctr_report_parse(const char *s, uint64_t *step, char *id, size_t idn)
{
    char              *end;
    unsigned long long v;
    size_t             k;

    if (strncmp(s, "step=", 5) != 0 || s[5] < '0' || s[5] > '9')
        return false;
    errno = 0;
    v = strtoull(s + 5, &end, 10);
    if (errno != 0)
        return false;
    id[0] = '\0';
    if (strncmp(end, " id=", 4) == 0) {
        end += 4;
        k = strspn(end, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:/-");
        if (k == 0 || k >= idn)
            return false;
        memcpy(id, end, k);
        id[k] = '\0';
        end += k;
    }
    end += strspn(end, " \r\n");
    if (*end != '\0')
        return false;
    *step = v;
    return true;
}

/* The job renamed a report into place: read it as root, safely (no link
 * followed, no FIFO waited on, a regular file of at most 256 bytes). */
static void
report_cb(struct ev_loop *loop, ev_stat *w, int revents)
{
    ctr        *c = GP_CONTAINER_OF(w, ctr, report_w);
    char        buf[CTR_REPORT_MAX + 1], id[MSG_ATTEMPT_EVENT_CHECKPOINT_ID_MAXLEN + 1];
    struct stat st;
    uint64_t    step;
    ssize_t     k = -1;
    int         fd;

    (void)loop;
    (void)revents;
    if (w->attr.st_nlink == 0)
        return;
    fd = open(c->report, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= CTR_REPORT_MAX)
        k = read(fd, buf, CTR_REPORT_MAX);
    if (fd >= 0)
        close(fd);
    if (k <= 0)
        return;
    buf[k] = '\0';
    if (!ctr_report_parse(buf, &step, id, sizeof(id))) {
        GP_WARN("checkpoint_report_unreadable", "job=%s attempt=%u", c->job, c->attempt);
        return;
    }
    if (c->reported_any && step <= c->last_step)
        return;                          /* the same report seen again, or an older one */
    c->reported_any = true;
    c->last_step = step;
    c->cbs->reported(c->arg, step, id);
}

/* Folders: the bundle (the agent's) and the log (kept after the end). */
static gp_err
folders(ctr *c, char *why, size_t wn)
{
    strfmt(c->bundle, sizeof(c->bundle), "%s/bundles/%s", c->n->img.state_dir, c->id);
    strfmt(c->pidfile, sizeof(c->pidfile), "%s/pid", c->bundle);
    strfmt(c->logdir, sizeof(c->logdir), "%s/logs/%s/%u", c->n->img.state_dir, c->job,
             c->attempt);
    strfmt(c->report_dir, sizeof(c->report_dir), "%s/reports/%s", c->n->img.state_dir, c->id);
    strfmt(c->report, sizeof(c->report), "%s/checkpoint", c->report_dir);
    if (mkdir_p(c->bundle, 0700) != 0 || mkdir_p(c->logdir, 0750) != 0 ||
        (c->ckpt[0] != '\0' && mkdir_p(c->ckpt, 0700) != 0) ||
        rm_tree_quick(c->report_dir) != 0 || mkdir_p(c->report_dir, 0700) != 0 ||
        lchown(c->report_dir, c->host_id, c->host_id) != 0) {
        strfmt(why, wn, "cannot make the attempt's folders: %s", strerror(errno));
        return GP_EINTERNAL;
    }
    unlink(c->pidfile);
    return GP_EOK;
}

static void
kill_argv_init(ctr *c)
{
    int k = 0;

    c->kill_argv[k++] = c->n->runtime;
    c->kill_argv[k++] = (char *)"--root";
    c->kill_argv[k++] = (char *)c->n->runtime_root;
    c->kill_argv[k++] = (char *)"kill";
    c->kill_argv[k++] = (char *)"--all";
    c->kill_argv[k++] = c->id;
    strfmt(c->sig_kill, sizeof(c->sig_kill), "KILL");
    c->kill_argv[k++] = c->sig_kill;
    c->kill_argv[k] = NULL;
}

/* file://PATH: the shared store's folder of this job, mounted at
 * /checkpoint in place of the node-local one (it must lie under the node's
 * checkpoint-shared-root: the control plane names it, never the tenant);
 * another URI (the tenant's object store) goes to the container as is. */
static gp_err
checkpoint_location(ctr *c, const msg_run_attempt *in, char *why, size_t wn)
{
    const char *u = in->checkpoint_uri, *root = c->n->ckpt_shared_root;
    size_t      k = root ? strlen(root) : 0;

    if (strncmp(u, "file://", 7) != 0) {
        strfmt(c->ckpt_uri, sizeof(c->ckpt_uri), "%s", u);
        return GP_EOK;
    }
    u += 7;
    if (k == 0 || strncmp(u, root, k) != 0 || u[k] != '/' || strstr(u, "/..") != NULL ||
        strstr(u, "//") != NULL) {
        strfmt(why, wn, "checkpoint_uri: %s is not under this node's shared store (%s)",
               in->checkpoint_uri, k ? root : "none");
        return GP_EINVAL;
    }
    strfmt(c->ckpt, sizeof(c->ckpt), "%s", u);
    strfmt(c->ckpt_uri, sizeof(c->ckpt_uri), "file:///checkpoint");
    return GP_EOK;
}

static gp_err
copy_spec(ctr *c, const msg_run_attempt *in)
{
    strfmt(c->command, sizeof(c->command), "%s", in->command);
    c->env = calloc(in->env.n + 1, sizeof(*c->env));
    c->args = calloc(in->args.n + 1, sizeof(*c->args));
    if (c->env == NULL || c->args == NULL)
        return GP_ENOMEM;
    if (in->env.n > 0)                 /* memcpy from NULL is undefined, even of 0 bytes */
        memcpy(c->env, in->env.v, in->env.n * sizeof(*c->env));
    if (in->args.n > 0)
        memcpy(c->args, in->args.v, in->args.n * sizeof(*c->args));
    c->nenv = in->env.n;
    c->nargs = in->args.n;
    return GP_EOK;
}

/* ---- named ports -------------------------------------------------------------------- */

#define PORT_USED(n, p) ((n)->port_used[(p) / 8] & (1u << ((p) % 8)))

/* Nothing on the node listens there now (a mapped port is DNAT'ed before
 * any socket sees it: the node's own services must not sit in the range,
 * and this keeps an attempt off one that does). */
static bool
port_bindable(unsigned port, bool udp)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int                fd = socket(AF_INET, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC, 0);
    bool               ok;

    if (fd < 0)
        return false;
    ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

static void
ports_release(ctr *c)
{
    for (int i = 0; i < c->nports; i++)
        c->n->port_used[c->ports[i].host / 8] &= (uint8_t)~(1u << (c->ports[i].host % 8));
    c->nports = 0;
}

/* A host port for each named port, from the node's range, round robin
 * (a port an attempt just left is not handed out again at once). */
static gp_err
ports_take(ctr *c, const msg_run_attempt *in, char *why, size_t wn)
{
    ctr_node       *n = c->n;
    const msg_port *p = in->ports.v;
    unsigned        span = n->port_hi >= n->port_lo ? n->port_hi - n->port_lo + 1 : 0;

    if (in->ports.n > 0 && (n->net.cidr[0] == '\0' || span == 0)) {
        strfmt(why, wn, "ports: this node has no container network or no port range");
        return GP_EINVAL;
    }
    for (uint32_t i = 0; i < in->ports.n && i < CTRNET_MAX_PORTS; i++) {
        bool     udp = strcmp(p[i].protocol, "udp") == 0;
        unsigned host = 0;

        for (unsigned k = 0; k < span && host == 0; k++) {
            unsigned q = n->port_next;

            n->port_next = q >= n->port_hi ? n->port_lo : q + 1;
            if (!PORT_USED(n, q) && port_bindable(q, udp))
                host = q;
        }
        if (host == 0) {
            strfmt(why, wn, "ports: no free host port in %u-%u", n->port_lo, n->port_hi);
            return GP_EUNAVAIL;
        }
        n->port_used[host / 8] |= (uint8_t)(1u << (host % 8));
        c->ports[c->nports] = (ctrnet_port){.host = host, .ctr = p[i].port};
        strfmt(c->ports[c->nports].proto, sizeof(c->ports[0].proto), "%s", udp ? "udp" : "tcp");
        strfmt(c->port_name[c->nports], sizeof(c->port_name[0]), "%s", p[i].name);
        c->nports++;
    }
    return GP_EOK;
}

int
ctr_endpoints(const ctr *c, msg_endpoint *out, int max)
{
    int k = 0;

    for (; k < c->nports && k < max; k++) {
        memset(&out[k], 0, sizeof(out[k]));
        strfmt(out[k].name, sizeof(out[k].name), "%s", c->port_name[k]);
        strfmt(out[k].host, sizeof(out[k].host), "%s", c->n->addr);
        strfmt(out[k].protocol, sizeof(out[k].protocol), "%s", c->ports[k].proto);
        out[k].port = c->ports[k].host;
        out[k].has = (1ull << MSG_ENDPOINT__NAME) | (1ull << MSG_ENDPOINT__HOST) |
                     (1ull << MSG_ENDPOINT__PORT) | (1ull << MSG_ENDPOINT__PROTOCOL);
    }
    return k;
}

/* The attempt's secrets (RunAttempt.secrets): the registry credential as
 * the pull's authfile JSON into auth; the SSH key and the checkpoint
 * credentials as files of the report folder (/run/gridpool), the
 * container root's own, 0600.  Every copy here is zeroed after use, the
 * message's too (nothing reads it after the start). */
static gp_err
secrets_place(ctr *c, const msg_run_attempt *in, const gp_image_ref *r, gp_buf *auth, char *why,
              size_t wn)
{
    msg_attempt_secret *v = in->secrets.v;
    char                path[600];
    gp_err              rc = GP_EOK;

    for (uint32_t i = 0; i < in->secrets.n && rc == GP_EOK; i++) {
        const char *f = v[i].use == MSG_ATTEMPT_SECRET_USE_SSH ? SECRETFILE_SSH
                      : v[i].use == MSG_ATTEMPT_SECRET_USE_CHECKPOINT ? SECRETFILE_CHECKPOINT : NULL;

        if (v[i].use == MSG_ATTEMPT_SECRET_USE_REGISTRY) {
            rc = secretfile_auth_json(v[i].value.p, v[i].value.n, r->host, auth, why, wn);
            continue;
        }
        if (f == NULL)
            continue;
        strfmt(path, sizeof(path), "%s/%s", c->report_dir, f);
        if (secretfile_write(path, v[i].value.p, v[i].value.n, c->host_id, c->host_id) != 0) {
            strfmt(why, wn, "cannot write /run/gridpool/%s: %s", f, strerror(errno));
            rc = GP_EINTERNAL;
        }
        c->has_ssh = c->has_ssh || (rc == GP_EOK && v[i].use == MSG_ATTEMPT_SECRET_USE_SSH);
        c->has_ckpt_cred = c->has_ckpt_cred || (rc == GP_EOK && v[i].use != MSG_ATTEMPT_SECRET_USE_SSH);
    }
    for (uint32_t i = 0; i < in->secrets.n; i++)
        if (v[i].value.p != NULL)
            explicit_bzero(v[i].value.p, v[i].value.n);
    return rc;
}

gp_err
ctr_start(ctr_node *n, struct ev_loop *loop, const msg_run_attempt *in, const int *minors,
          const ctr_cbs *cbs, void *arg, ctr **out, char *why, size_t wn)
{
    ctr         *c = calloc(1, sizeof(*c));
    gp_image_ref r;
    gp_buf       auth;
    gp_err       rc;

    *out = NULL;
    if (c == NULL)
        return GP_ENOMEM;
    *c = (ctr){.n = n, .loop = loop, .cbs = cbs, .arg = arg, .attempt = in->attempt,
               .resume_ms = in->resume_ms, .slot = -1, .rfd = -1, .lfd = -1};
    strfmt(c->job, sizeof(c->job), "%s", in->job_id);
    strfmt(c->id, sizeof(c->id), "gp-%s-%u", in->job_id, in->attempt);
    strfmt(c->ckpt, sizeof(c->ckpt), "%s", in->checkpoint_dir);
    c->has_resume = GP_HAS(in, MSG_RUN_ATTEMPT__RESUME_STEP);
    c->resume_step = in->resume_step;
    strfmt(c->resume_id, sizeof(c->resume_id), "%s", in->resume_id);
    kill_argv_init(c);
    if (gp_image_ref_parse(in->image, &r, why, wn) != GP_EOK) {
        char w[200];

        strfmt(w, sizeof(w), "image: %s", why);
        strfmt(why, wn, "%s", w);
        rc = GP_EINVAL;
    } else if ((rc = limits(c, &in->resources, why, wn)) == GP_EOK &&
               (c->slot = slot_take(n)) < 0) {
        strfmt(why, wn, "the node runs %d containers already", CTR_SLOTS);
        rc = GP_EUNAVAIL;
    }
    if (rc == GP_EOK)
        rc = checkpoint_location(c, in, why, wn);
    if (rc == GP_EOK)
        rc = ports_take(c, in, why, wn);
    if (rc == GP_EOK) {
        c->host_id = n->id_base + (uint32_t)c->slot * CTR_IDS;
        gpu_devs(c, in, minors);
        rc = copy_spec(c, in);
    }
    if (rc == GP_EOK)
        rc = folders(c, why, wn);
    gp_buf_init(&auth, 64u << 10);
    if (rc == GP_EOK)
        rc = secrets_place(c, in, &r, &auth, why, wn);
    if (rc == GP_EOK && img_get(&n->img, loop, in->image, c->id, auth.n ? auth.p : NULL, pulled,
                                c, &c->pull) != GP_EOK) {
        strfmt(why, wn, "image %s: cannot start the pull", in->image);
        rc = GP_EINTERNAL;
    }
    if (auth.p != NULL)
        explicit_bzero(auth.p, auth.cap);
    gp_buf_fini(&auth);
    if (rc != GP_EOK) {
        ctr_free(c);
        return rc;
    }
    *out = c;
    return GP_EOK;
}

void
ctr_signal(ctr *c, int sig)
{
    char  root[300], s[16];
    char *argv[] = {c->n->runtime, (char *)"--root", root, (char *)"kill", (char *)"--all", c->id,
                    s, NULL};

    if (!c->ran)
        return;
    strfmt(root, sizeof(root), "%s", c->n->runtime_root);
    strfmt(s, sizeof(s), "%d", sig);
    if (proc_run(c->loop, argv, NULL, NULL, NULL, NULL) != GP_EOK)
        GP_WARN("container_kill_not_run", "id=%s sig=%d", c->id, sig);
}

/* The attempt's secret files outlive it nowhere on the node. */
static void
secrets_remove(ctr *c)
{
    char path[600];

    strfmt(path, sizeof(path), "%s/" SECRETFILE_SSH, c->report_dir);
    (void)unlink(path);
    strfmt(path, sizeof(path), "%s/" SECRETFILE_CHECKPOINT, c->report_dir);
    (void)unlink(path);
}

void
ctr_exited(ctr *c, bool *started, char *why, size_t wn)
{
    char  root[300], rm_b[600];
    char *del[] = {c->n->runtime, (char *)"--root", root, (char *)"delete", (char *)"--force",
                   c->id, NULL};
    char *rm[] = {(char *)"rm", (char *)"-rf", rm_b, NULL};

    if (ev_is_active(&c->report_w)) {    /* a report written just before the end counts */
        ev_stat_stat(c->loop, &c->report_w);
        report_cb(c->loop, &c->report_w, 0);
        ev_stat_stop(c->loop, &c->report_w);
    }
    *started = access(c->pidfile, F_OK) == 0;
    if (!*started) {
        char tail[240] = "", path[600];

        /* runc wrote its reason to the output: the tenant reads it too */
        strfmt(path, sizeof(path), "%s/output", c->logdir);
        proc_tail(path, tail, sizeof(tail));
        strfmt(why, wn, "the OCI runtime could not start the container: %s", tail);
    }
    strfmt(root, sizeof(root), "%s", c->n->runtime_root);
    strfmt(rm_b, sizeof(rm_b), "%s", c->bundle);
    secrets_remove(c);
    proc_run(c->loop, del, NULL, NULL, NULL, NULL);
    proc_run(c->loop, rm, NULL, NULL, NULL, NULL);
    if (c->net_up)
        ctrnet_down(&c->n->net, c->loop, c->id);
    c->net_up = false;
    c->ran = false;
}

void
ctr_kill_sync(ctr *c)
{
    if (c->ran)
        (void)proc_run_sync(c->kill_argv, 3000);
    if (c->net_up)                       /* the loop will not run its teardown */
        ctrnet_down_sync(&c->n->net, c->id);
    c->net_up = false;
}

char *const *
ctr_kill_argv(const ctr *c)
{
    return c->kill_argv;
}

const char *
ctr_digest(const ctr *c)
{
    return c->digest;
}

const char *
ctr_bundle(const ctr *c)
{
    return c->bundle;
}

void
ctr_free(ctr *c)
{
    if (c == NULL)
        return;
    img_cancel(c->pull);
    proc_cancel(c->step);
    ctrnet_forget(c->netop);
    if (c->net_up)                       /* never ran, or freed before its end */
        ctrnet_down(&c->n->net, c->loop, c->id);
    if (ev_is_active(&c->report_w))
        ev_stat_stop(c->loop, &c->report_w);
    if (c->rfd >= 0) {
        ev_io_stop(c->loop, &c->out_io);
        close(c->rfd);
    }
    if (c->lfd >= 0)
        close(c->lfd);
    if (c->slot >= 0)
        c->n->slots &= ~(1ull << c->slot);
    ports_release(c);
    free(c->env);
    free(c->args);
    free(c);
}
