/* ocispec.c -- config.json of a container attempt (ocispec.h). */
#include <stdio.h>
#include <string.h>

#include "ocispec.h"

#define APPEND(x) do { if (rc == GP_EOK) rc = (x); } while (0)

static gp_err
str(gp_buf *b, const char *s)
{
    return gp_buf_json_str(b, s, strlen(s));
}

static gp_err
str_array(gp_buf *b, const char *const *v, int n)
{
    gp_err rc = gp_buf_puts(b, "[");

    for (int i = 0; i < n && rc == GP_EOK; i++) {
        if (i > 0)
            rc = gp_buf_puts(b, ",");
        APPEND(str(b, v[i]));
    }
    APPEND(gp_buf_puts(b, "]"));
    return rc;
}

static gp_err
process(const oci_in *in, gp_buf *b)
{
    gp_err rc = gp_buf_puts(b, "\"process\":{\"terminal\":false,\"user\":");

    APPEND(gp_buf_printf(b, "{\"uid\":%u,\"gid\":%u,\"additionalGids\":[%u]},", in->uid,
                         in->gid, in->gid));
    APPEND(gp_buf_puts(b, "\"args\":"));
    APPEND(str_array(b, in->args, in->nargs));
    APPEND(gp_buf_puts(b, ",\"env\":"));
    APPEND(str_array(b, in->env, in->nenv));
    APPEND(gp_buf_puts(b, ",\"cwd\":"));
    APPEND(str(b, in->cwd != NULL && in->cwd[0] == '/' ? in->cwd : "/"));
    /* no capability in any set: root in the container is an ordinary
     * user of the node's that owns nothing of the node's */
    APPEND(gp_buf_puts(b, ",\"capabilities\":{\"bounding\":[],\"effective\":[],"
                          "\"inheritable\":[],\"permitted\":[],\"ambient\":[]},"
                          "\"noNewPrivileges\":true,"));
    /* no core dumps: a crash writes nothing of the tenant's to the node */
    APPEND(gp_buf_printf(b, "\"rlimits\":[{\"type\":\"RLIMIT_NOFILE\",\"hard\":%u,\"soft\":%u},"
                            "{\"type\":\"RLIMIT_CORE\",\"hard\":0,\"soft\":0}]},",
                         in->nofile ? in->nofile : 1024, in->nofile ? in->nofile : 1024));
    return rc;
}

static gp_err
tmpfs(gp_buf *b, const char *dest, const char *opts)
{
    gp_err rc = gp_buf_puts(b, ",{\"destination\":");

    APPEND(str(b, dest));
    APPEND(gp_buf_printf(b, ",\"type\":\"tmpfs\",\"source\":\"tmpfs\",\"options\":[%s]}", opts));
    return rc;
}

static gp_err
mounts(const oci_in *in, gp_buf *b)
{
    char   o[160];
    gp_err rc = gp_buf_puts(b, "\"mounts\":[{\"destination\":\"/proc\",\"type\":\"proc\","
                               "\"source\":\"proc\",\"options\":[\"nosuid\",\"noexec\",\"nodev\"]}");

    APPEND(tmpfs(b, "/dev", "\"nosuid\",\"strictatime\",\"mode=755\",\"size=65536k\""));
    APPEND(gp_buf_puts(b, ",{\"destination\":\"/dev/pts\",\"type\":\"devpts\",\"source\":"
                          "\"devpts\",\"options\":[\"nosuid\",\"noexec\",\"newinstance\","
                          "\"ptmxmode=0666\",\"mode=0620\"]}"));
    APPEND(tmpfs(b, "/dev/shm", "\"nosuid\",\"noexec\",\"nodev\",\"mode=1777\",\"size=65536k\""));
    APPEND(gp_buf_puts(b, ",{\"destination\":\"/dev/mqueue\",\"type\":\"mqueue\",\"source\":"
                          "\"mqueue\",\"options\":[\"nosuid\",\"noexec\",\"nodev\"]}"));
    /* sysfs can be mounted only by the owner of the network namespace:
     * with one the agent made (ctrnet.c), the node's /sys, read-only (as
     * podman does for a user namespace) */
    if (in->netns != NULL)
        APPEND(gp_buf_puts(b, ",{\"destination\":\"/sys\",\"type\":\"bind\",\"source\":\"/sys\","
                              "\"options\":[\"rbind\",\"ro\",\"nosuid\",\"noexec\",\"nodev\"]}"));
    else
        APPEND(gp_buf_puts(b, ",{\"destination\":\"/sys\",\"type\":\"sysfs\",\"source\":\"sysfs\","
                              "\"options\":[\"nosuid\",\"noexec\",\"nodev\",\"ro\"]}"));
    /* scratch: bounded, and charged to the attempt's memory cgroup */
    snprintf(o, sizeof(o), "\"nosuid\",\"nodev\",\"mode=1777\",\"size=%lluk\"",
             (unsigned long long)(in->scratch_bytes / 1024));
    APPEND(tmpfs(b, "/scratch", o));
    APPEND(tmpfs(b, "/tmp", o));
    if (in->ckpt_dir != NULL) {
        APPEND(gp_buf_puts(b, ",{\"destination\":\"/checkpoint\",\"type\":\"bind\",\"source\":"));
        APPEND(str(b, in->ckpt_dir));
        APPEND(gp_buf_puts(b, ",\"options\":[\"rbind\",\"rw\",\"nosuid\",\"nodev\",\"noexec\"]}"));
    }
    if (in->netns != NULL)               /* the node's resolver, read-only */
        APPEND(gp_buf_puts(b, ",{\"destination\":\"/etc/resolv.conf\",\"type\":\"bind\","
                              "\"source\":\"/etc/resolv.conf\",\"options\":[\"rbind\",\"ro\","
                              "\"nosuid\",\"nodev\",\"noexec\"]}"));
    if (in->report_dir != NULL) {
        APPEND(gp_buf_puts(b, ",{\"destination\":\"/run/gridpool\",\"type\":\"bind\",\"source\":"));
        APPEND(str(b, in->report_dir));
        APPEND(gp_buf_puts(b, ",\"options\":[\"rbind\",\"rw\",\"nosuid\",\"nodev\",\"noexec\"]}"));
    }
    APPEND(gp_buf_puts(b, "],"));
    return rc;
}

static gp_err
devices(const oci_in *in, gp_buf *b)
{
    gp_err rc = gp_buf_puts(b, "\"devices\":[");
    int    k = 0;

    for (int i = 0; i < in->ndevs && rc == GP_EOK; i++) {
        if (!in->devs[i].bind)
            continue;
        APPEND(gp_buf_printf(b, "%s{\"path\":", k++ ? "," : ""));
        APPEND(str(b, in->devs[i].path));
        APPEND(gp_buf_printf(b, ",\"type\":\"c\",\"major\":%lld,\"minor\":%lld,\"fileMode\":438,"
                                "\"uid\":0,\"gid\":0}",
                             (long long)in->devs[i].major, (long long)in->devs[i].minor));
    }
    APPEND(gp_buf_puts(b, "],"));
    return rc;
}

/* Deny all, then the usual harmless character devices (null, zero, full,
 * random, urandom, tty, ptmx and the pts) and the attempt's own GPUs. */
static gp_err
device_rules(const oci_in *in, gp_buf *b)
{
    static const char *const std[] = {"1:3", "1:5", "1:7", "1:8", "1:9", "5:0", "5:2", "136:*"};
    gp_err rc = gp_buf_puts(b, "\"devices\":[{\"allow\":false,\"access\":\"rwm\"}");

    for (size_t i = 0; i < sizeof(std) / sizeof(std[0]) && rc == GP_EOK; i++) {
        long long maj = 0, min = -1;

        sscanf(std[i], "%lld:%lld", &maj, &min);
        if (strchr(std[i], '*'))
            APPEND(gp_buf_printf(b, ",{\"allow\":true,\"type\":\"c\",\"major\":%lld,"
                                    "\"access\":\"rwm\"}", maj));
        else
            APPEND(gp_buf_printf(b, ",{\"allow\":true,\"type\":\"c\",\"major\":%lld,"
                                    "\"minor\":%lld,\"access\":\"rwm\"}", maj, min));
    }
    for (int i = 0; i < in->ndevs && rc == GP_EOK; i++)
        APPEND(gp_buf_printf(b, ",{\"allow\":true,\"type\":\"c\",\"major\":%lld,\"minor\":%lld,"
                                "\"access\":\"rw\"}",
                             (long long)in->devs[i].major, (long long)in->devs[i].minor));
    APPEND(gp_buf_puts(b, "]"));
    return rc;
}

static gp_err
resources(const oci_in *in, gp_buf *b)
{
    /* the CFS quota over a 100 ms period: 1000 millis = one core */
    gp_err rc = gp_buf_printf(b, "\"resources\":{\"memory\":{\"limit\":%llu,\"swap\":%llu},"
                                 "\"cpu\":{\"quota\":%llu,\"period\":100000},"
                                 "\"pids\":{\"limit\":%u},",
                              (unsigned long long)in->memory_bytes,
                              (unsigned long long)in->memory_bytes,
                              (unsigned long long)in->cpu_millis * 100u, in->pids);

    APPEND(device_rules(in, b));
    APPEND(gp_buf_puts(b, "},"));
    return rc;
}

static gp_err
linux_part(const oci_in *in, gp_buf *b)
{
    gp_err rc = gp_buf_printf(b, "\"linux\":{\"uidMappings\":[{\"containerID\":0,\"hostID\":%u,"
                                 "\"size\":%u}],\"gidMappings\":[{\"containerID\":0,"
                                 "\"hostID\":%u,\"size\":%u}],",
                              in->host_id, in->id_count, in->host_id, in->id_count);

    /* network: a namespace of its own: loopback only, or ctrnet.c's
     * routed veth behind the node's firewall rules */
    APPEND(gp_buf_puts(b, "\"namespaces\":[{\"type\":\"pid\"},{\"type\":\"network\""));
    if (in->netns != NULL) {             /* its own, with the routed veth (ctrnet.h) */
        APPEND(gp_buf_puts(b, ",\"path\":"));
        APPEND(str(b, in->netns));
    }
    APPEND(gp_buf_puts(b, "},{\"type\":\"ipc\"},{\"type\":\"uts\"},{\"type\":\"mount\"},"
                          "{\"type\":\"user\"},{\"type\":\"cgroup\"}],"));
    APPEND(devices(in, b));
    APPEND(gp_buf_puts(b, "\"cgroupsPath\":"));
    APPEND(str(b, in->cgroups_path));
    APPEND(gp_buf_puts(b, ","));
    APPEND(resources(in, b));
    APPEND(gp_buf_puts(b, "\"seccomp\":"));
    APPEND(gp_buf_puts(b, in->seccomp_json));
    APPEND(gp_buf_puts(b, ",\"maskedPaths\":[\"/proc/acpi\",\"/proc/asound\",\"/proc/kcore\","
                          "\"/proc/keys\",\"/proc/latency_stats\",\"/proc/timer_list\","
                          "\"/proc/timer_stats\",\"/proc/sched_debug\",\"/proc/scsi\","
                          "\"/sys/firmware\"],\"readonlyPaths\":[\"/proc/bus\",\"/proc/fs\","
                          "\"/proc/irq\",\"/proc/sys\",\"/proc/sysrq-trigger\"]}"));
    return rc;
}

gp_err
oci_config(const oci_in *in, gp_buf *out, char *why, size_t n)
{
    gp_err rc;

    if (in->nargs < 1 || in->args[0][0] == '\0') {
        snprintf(why, n, "nothing to run: no command, args or image entrypoint");
        return GP_EINVAL;
    }
    if (in->id_count == 0 || in->host_id == 0) {
        snprintf(why, n, "no id range for the user namespace");
        return GP_EINVAL;
    }
    if (in->seccomp_json == NULL || in->seccomp_json[0] != '{') {
        snprintf(why, n, "no seccomp profile");
        return GP_EINVAL;
    }
    rc = gp_buf_puts(out, "{\"ociVersion\":\"1.0.2\",");
    APPEND(process(in, out));
    APPEND(gp_buf_puts(out, "\"root\":{\"path\":"));
    APPEND(str(out, in->rootfs));
    APPEND(gp_buf_puts(out, ",\"readonly\":true},\"hostname\":"));
    APPEND(str(out, in->hostname));
    APPEND(gp_buf_puts(out, ","));
    APPEND(mounts(in, out));
    APPEND(gp_buf_puts(out, "\"annotations\":{\"gridpool.gpus\":"));
    APPEND(str(out, in->gpus != NULL ? in->gpus : ""));
    APPEND(gp_buf_puts(out, "},"));
    APPEND(linux_part(in, out));
    APPEND(gp_buf_puts(out, "}\n"));
    if (rc != GP_EOK)
        snprintf(why, n, "config.json: %s", gp_err_name(rc));
    return rc;
}
