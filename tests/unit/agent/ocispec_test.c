/* ocispec_test.c -- the container's config.json (services/agent/ocispec.c):
 * the isolation every attempt gets (user namespace over its own range, no
 * capability, no new privileges, seccomp, read-only root, bounded scratch,
 * its namespaces), its cgroup limits, a device cgroup that allows exactly
 * its GPUs' nodes, binds only the nodes the host has, and refusals of
 * what could not be safe. */
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "../../../services/agent/ocispec.h"
#include "test.h"

static const char *const args[] = {"/bin/sh", "-c", "echo \"hi\"\n"};
static const char *const env[] = {"GP_JOB_ID=j1", "PATH=/bin"};

static oci_in
base(const oci_dev *devs, int ndevs)
{
    return (oci_in){.rootfs = "/var/lib/gp/images/abc/rootfs", .hostname = "gp-j1-1",
                    .args = args, .nargs = 3, .env = env, .nenv = 2, .cwd = "/work",
                    .uid = 0, .gid = 0, .host_id = 1073741824, .id_count = 65536,
                    .memory_bytes = 256ull << 20, .cpu_millis = 1500, .pids = 512,
                    .nofile = 4096, .scratch_bytes = 16ull << 20, .devs = devs, .ndevs = ndevs,
                    .ckpt_dir = "/var/lib/gp/ckpt/j1", .cgroups_path = "/gridpool/gp-j1-1",
                    .seccomp_json = "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"syscalls\":[]}",
                    .gpus = "1"};
}

/* Parses as one document: the config is well-formed JSON (YAML's flow style). */
static bool
parses(const gp_buf *b)
{
    yaml_parser_t   p;
    yaml_document_t d;
    bool            ok;

    yaml_parser_initialize(&p);
    yaml_parser_set_input_string(&p, (const unsigned char *)b->p, b->n);
    ok = yaml_parser_load(&p, &d) && yaml_document_get_root_node(&d) != NULL;
    if (ok)
        yaml_document_delete(&d);
    yaml_parser_delete(&p);
    return ok;
}

static int
count(const char *hay, const char *needle)
{
    int n = 0;

    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

static void
test_isolation(void)
{
    oci_in in = base(NULL, 0);
    gp_buf b;
    char   why[128];

    gp_buf_init(&b, 1 << 20);
    T_EQ_INT(oci_config(&in, &b, why, sizeof(why)), GP_EOK);
    T_OKM(parses(&b), "config.json is well-formed (%zu bytes)", b.n);
    T_OK(strstr(b.p, "\"uidMappings\":[{\"containerID\":0,\"hostID\":1073741824,\"size\":65536}]"));
    T_OK(strstr(b.p, "\"gidMappings\":[{\"containerID\":0,\"hostID\":1073741824,\"size\":65536}]"));
    T_OK(strstr(b.p, "\"bounding\":[],\"effective\":[],\"inheritable\":[],\"permitted\":[],\"ambient\":[]"));
    T_OK(strstr(b.p, "\"noNewPrivileges\":true"));
    T_OK(strstr(b.p, "\"readonly\":true"));
    T_OK(strstr(b.p, "\"seccomp\":{\"defaultAction\":\"SCMP_ACT_ERRNO\""));
    const char *ns[] = {"pid", "network", "ipc", "uts", "mount", "user", "cgroup"};

    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        char t[32];

        snprintf(t, sizeof(t), "{\"type\":\"%s\"}", ns[i]);
        T_OKM(strstr(b.p, t) != NULL, "a new %s namespace", ns[i]);
    }
    T_OKM(count(b.p, "\"size=16384k\"") == 2, "/scratch and /tmp are 16 MiB tmpfs");
    T_OK(strstr(b.p, "\"limit\":268435456,\"swap\":268435456"));
    T_OK(strstr(b.p, "\"quota\":150000,\"period\":100000"));
    T_OK(strstr(b.p, "\"pids\":{\"limit\":512}"));
    T_OK(strstr(b.p, "\"RLIMIT_CORE\",\"hard\":0"));
    T_OK(strstr(b.p, "\"args\":[\"/bin/sh\",\"-c\",\"echo \\\"hi\\\"\\n\"]"));
    T_OK(strstr(b.p, "\"destination\":\"/checkpoint\",\"type\":\"bind\",\"source\":\"/var/lib/gp/ckpt/j1\""));
    T_OKM(strstr(b.p, "\"devices\":[]") != NULL, "no device node is made without GPUs");
    T_OKM(count(b.p, "\"major\":195") == 0, "no GPU rule without GPUs");
    T_OKM(strstr(b.p, "{\"type\":\"network\"}") != NULL &&
              strstr(b.p, "\"type\":\"sysfs\"") != NULL,
          "no namespace given: a new, empty one, and its own sysfs");
    gp_buf_reset(&b);
    in.netns = "/run/netns/gp-j1-1";
    T_EQ_INT(oci_config(&in, &b, why, sizeof(why)), GP_EOK);
    T_OKM(strstr(b.p, "{\"type\":\"network\",\"path\":\"/run/netns/gp-j1-1\"}") != NULL,
          "the agent's namespace (its veth) is joined");
    T_OKM(strstr(b.p, "\"destination\":\"/sys\",\"type\":\"bind\",\"source\":\"/sys\","
                      "\"options\":[\"rbind\",\"ro\"") != NULL &&
              strstr(b.p, "\"destination\":\"/etc/resolv.conf\",\"type\":\"bind\"") != NULL,
          "with it: the node's /sys and resolver, read-only");
    gp_buf_fini(&b);
}

static void
test_devices(void)
{
    /* the simulated backend: nominal numbers, nothing bound */
    oci_dev d[] = {{"/dev/nvidia1", 195, 1, false}, {"/dev/nvidiactl", 195, 255, false},
                   {"/dev/nvidia-uvm", 509, 0, true}};
    oci_in  in = base(d, 3);
    gp_buf  b;
    char    why[128];

    gp_buf_init(&b, 1 << 20);
    T_EQ_INT(oci_config(&in, &b, why, sizeof(why)), GP_EOK);
    T_OK(strstr(b.p, "{\"allow\":false,\"access\":\"rwm\"}") != NULL);
    T_OKM(count(b.p, "\"major\":195") == 2, "two GPU rules: its GPU and nvidiactl");
    T_OK(strstr(b.p, "{\"allow\":true,\"type\":\"c\",\"major\":195,\"minor\":1,\"access\":\"rw\"}"));
    T_OK(strstr(b.p, "{\"allow\":true,\"type\":\"c\",\"major\":195,\"minor\":255,\"access\":\"rw\"}"));
    T_OKM(count(b.p, "\"major\":195,\"minor\":0,") == 0, "no rule for another GPU");
    T_OK(strstr(b.p, "{\"allow\":true,\"type\":\"c\",\"major\":509,\"minor\":0,\"access\":\"rw\"}"));
    T_OKM(strstr(b.p, "\"devices\":[{\"path\":\"/dev/nvidia-uvm\"") != NULL &&
              strstr(b.p, "{\"path\":\"/dev/nvidia1\"") == NULL,
          "only the node the host has is made in the container");
    gp_buf_fini(&b);
}

static void
test_refusals(void)
{
    oci_in in;
    gp_buf b;
    char   why[128];

    gp_buf_init(&b, 1 << 20);
    in = base(NULL, 0);
    in.nargs = 0;
    T_EQ_INT(oci_config(&in, &b, why, sizeof(why)), GP_EINVAL);
    in = base(NULL, 0);
    in.host_id = 0;
    T_OKM(oci_config(&in, &b, why, sizeof(why)) == GP_EINVAL, "no id range: refused (%s)", why);
    in = base(NULL, 0);
    in.seccomp_json = "";
    T_OKM(oci_config(&in, &b, why, sizeof(why)) == GP_EINVAL, "no seccomp profile: refused (%s)", why);
    gp_buf_fini(&b);
}

int
main(void)
{
    test_isolation();
    test_devices();
    test_refusals();
    return T_DONE();
}
