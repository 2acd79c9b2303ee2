/* validate_test.c -- the scheduler's pure spec rules (validate.c):
 * each refusal typed and naming its field first, defaults, normalization
 * (two submissions meaning the same job encode to the same bytes, which
 * idempotent submit compares), and job ids. */
#include <string.h>

#include "test.h"
#include "../../../services/scheduler/plan/validate.h"

static void
base(msg_job_spec *sp)
{
    *sp = (msg_job_spec){0};
    snprintf(sp->command, sizeof(sp->command), "sim:run=1s");
    sp->gpus_per_node = 1;
}

static bool
refused(msg_job_spec *sp, gp_err code, const char *field)
{
    char   msg[256] = "";
    gp_err rc = sched_spec_check(sp, msg, sizeof(msg));
    size_t n = strlen(field);

    if (rc != code || strncmp(msg, field, n) != 0 || msg[n] != ':')
        printf("# %s: got %s \"%s\"\n", field, gp_err_name(rc), msg);
    return rc == code && strncmp(msg, field, n) == 0 && msg[n] == ':';
}

static void
test_rules(void)
{
    static char  env[2][MSG_JOB_SPEC_ENV_ITEM_MAXLEN + 1] = {"A_1=x", "_B="};
    msg_job_spec sp;
    char         msg[256];

    base(&sp);
    T_OKM(sched_spec_check(&sp, msg, sizeof(msg)) == GP_EOK, "minimal spec accepted");
    sp.env.v = env;
    sp.env.n = 2;
    T_OKM(sched_spec_check(&sp, msg, sizeof(msg)) == GP_EOK, "env A_1=x and _B= accepted");
    snprintf(env[1], sizeof(env[1]), "B-C=1");
    T_OK(refused(&sp, GP_EINVAL, "env"));
    snprintf(env[1], sizeof(env[1]), "=1");
    T_OK(refused(&sp, GP_EINVAL, "env"));
    base(&sp);
    sp.command[0] = '\0';
    T_OK(refused(&sp, GP_EMISSING, "image"));
    snprintf(sp.command, sizeof(sp.command), "python train.py");
    T_OKM(refused(&sp, GP_EMISSING, "image"), "a real command needs an image");
    snprintf(sp.image, sizeof(sp.image), "reg.example/acme/train:v3");
    T_OKM(sched_spec_check(&sp, msg, sizeof(msg)) == GP_EOK, "a command in an image accepted");
    sp.command[0] = '\0';
    T_OKM(sched_spec_check(&sp, msg, sizeof(msg)) == GP_EOK, "an image alone accepted (its entrypoint)");
    snprintf(sp.image, sizeof(sp.image), "train:v3");
    T_OKM(refused(&sp, GP_EINVAL, "image"), "a short name refused");
    snprintf(sp.image, sizeof(sp.image), "reg.example/a@sha256:12");
    T_OKM(refused(&sp, GP_EINVAL, "image"), "a bad digest refused");
    base(&sp);
    snprintf(sp.image, sizeof(sp.image), "reg.example/acme/train:v3");
    T_OKM(refused(&sp, GP_EINVAL, "command"), "a sim: command with an image refused");
    static const char *const uri_ok[] = {"shared:", "s3://bucket/run-7", "gs://b/p", "https://o.example/c"};
    static const char *const uri_bad[] = {"file:///etc", "/var/lib/x", "s3://", "shared:/x", "s3://a b",
                                          "nfs://h/x"};

    for (size_t i = 0; i < sizeof(uri_ok) / sizeof(uri_ok[0]); i++) {
        base(&sp);
        snprintf(sp.checkpoint_uri, sizeof(sp.checkpoint_uri), "%s", uri_ok[i]);
        T_OKM(sched_spec_check(&sp, msg, sizeof(msg)) == GP_EOK, "checkpoint_uri %s accepted", uri_ok[i]);
    }
    for (size_t i = 0; i < sizeof(uri_bad) / sizeof(uri_bad[0]); i++) {
        base(&sp);
        snprintf(sp.checkpoint_uri, sizeof(sp.checkpoint_uri), "%s", uri_bad[i]);
        T_OKM(refused(&sp, GP_EINVAL, "checkpoint_uri"), "checkpoint_uri %s refused", uri_bad[i]);
    }
    base(&sp);
    sp.max_latency_ms = 10;
    GP_SET_HAS(&sp, MSG_JOB_SPEC__MAX_LATENCY_MS);
    T_OK(refused(&sp, GP_EMISSING, "origin_lat"));
    GP_SET_HAS(&sp, MSG_JOB_SPEC__ORIGIN_LAT);    /* latitude 0 is an origin */
    T_OK(refused(&sp, GP_EMISSING, "origin_lon"));
    GP_SET_HAS(&sp, MSG_JOB_SPEC__ORIGIN_LON);
    T_OKM(sched_spec_check(&sp, msg, sizeof(msg)) == GP_EOK, "origin 0,0 with a latency bound");
    base(&sp);
    GP_SET_HAS(&sp, MSG_JOB_SPEC__MAX_PRICE_MICROS_PER_GPU_HOUR);
    T_OK(refused(&sp, GP_EMISSING, "currency"));
    snprintf(sp.currency, sizeof(sp.currency), "EUr");
    GP_SET_HAS(&sp, MSG_JOB_SPEC__CURRENCY);
    T_OK(refused(&sp, GP_EINVAL, "currency"));
    snprintf(sp.currency, sizeof(sp.currency), "EUR");
    T_OK(sched_spec_check(&sp, msg, sizeof(msg)) == GP_EOK);
    base(&sp);
    snprintf(sp.product, sizeof(sp.product), "p1");
    GP_SET_HAS(&sp, MSG_JOB_SPEC__PRODUCT);
    T_OK(sched_spec_check(&sp, msg, sizeof(msg)) == GP_EOK);
    GP_SET_HAS(&sp, MSG_JOB_SPEC__MIN_VRAM_MB);
    T_OK(refused(&sp, GP_EINVAL, "product"));
    base(&sp);
    GP_SET_HAS(&sp, MSG_JOB_SPEC__POOL);           /* present but empty */
    T_OK(refused(&sp, GP_EINVAL, "pool"));
}

static void
encode(const msg_job_spec *sp, gp_buf *b)
{
    gp_buf_init(b, 0);
    T_OK(gp_msg_encode(&msg_job_spec_desc, sp, b) == GP_EOK);
}

static void
test_normalize(void)
{
    msg_job_spec a, b;
    gp_buf       ea, eb;

    base(&a);
    base(&b);
    b.priority = 100;
    b.interruptible = false;
    GP_SET_HAS(&b, MSG_JOB_SPEC__PRIORITY);
    GP_SET_HAS(&b, MSG_JOB_SPEC__INTERRUPTIBLE);
    GP_SET_HAS(&b, MSG_JOB_SPEC__MAX_RUN_S);
    sched_spec_normalize(&a);
    sched_spec_normalize(&b);
    T_OKM(a.nodes == 1 && a.priority == 100 && a.max_attempts == 3, "defaults set");
    encode(&a, &ea);
    encode(&b, &eb);
    T_OKM(ea.n == eb.n && memcmp(ea.p, eb.p, ea.n) == 0, "explicit defaults encode as omitted ones");
    gp_buf_fini(&eb);
    b.priority = 0;                       /* explicit 0 is not the default */
    GP_SET_HAS(&b, MSG_JOB_SPEC__PRIORITY);
    sched_spec_normalize(&b);
    encode(&b, &eb);
    T_OKM(b.priority == 0 && (ea.n != eb.n || memcmp(ea.p, eb.p, ea.n) != 0),
          "priority 0 stays 0 and differs");
    gp_buf_fini(&ea);
    gp_buf_fini(&eb);
}

/* Secrets are named (their names follow the id rule) and each for a use
 * it can have: a registry and an SSH key need a container, checkpoint
 * credentials an object store. */
static void
test_secrets(void)
{
    msg_job_spec sp;
    char         msg[256];

    base(&sp);
    sp.command[0] = '\0';
    snprintf(sp.image, sizeof(sp.image), "reg.example/acme/train:v3");
    snprintf(sp.registry_auth, sizeof(sp.registry_auth), "ghcr-pull");
    GP_SET_HAS(&sp, MSG_JOB_SPEC__REGISTRY_AUTH);
    snprintf(sp.ssh_key, sizeof(sp.ssh_key), "laptop");
    GP_SET_HAS(&sp, MSG_JOB_SPEC__SSH_KEY);
    snprintf(sp.checkpoint_uri, sizeof(sp.checkpoint_uri), "s3://b/p");
    snprintf(sp.checkpoint_secret, sizeof(sp.checkpoint_secret), "s3-cred");
    GP_SET_HAS(&sp, MSG_JOB_SPEC__CHECKPOINT_SECRET);
    T_OKM(sched_spec_check(&sp, msg, sizeof(msg)) == GP_EOK, "three secrets named: accepted (%s)", msg);
    snprintf(sp.registry_auth, sizeof(sp.registry_auth), "a.b");
    T_OKM(refused(&sp, GP_EINVAL, "registry_auth"), "a name with '.': refused");
    sp.registry_auth[0] = '\0';
    T_OKM(refused(&sp, GP_EINVAL, "registry_auth"), "an empty name given: refused");
    sp.has &= ~(1ull << MSG_JOB_SPEC__REGISTRY_AUTH);
    snprintf(sp.ssh_key, sizeof(sp.ssh_key), "x y");
    T_OK(refused(&sp, GP_EINVAL, "ssh_key"));
    snprintf(sp.ssh_key, sizeof(sp.ssh_key), "laptop");
    snprintf(sp.checkpoint_secret, sizeof(sp.checkpoint_secret), "s3/cred");
    T_OK(refused(&sp, GP_EINVAL, "checkpoint_secret"));
    snprintf(sp.checkpoint_secret, sizeof(sp.checkpoint_secret), "s3-cred");
    snprintf(sp.checkpoint_uri, sizeof(sp.checkpoint_uri), "shared:");
    T_OKM(refused(&sp, GP_EINVAL, "checkpoint_secret"), "credentials for the shared store: refused");
    sp.checkpoint_uri[0] = '\0';
    T_OKM(refused(&sp, GP_EINVAL, "checkpoint_secret"), "credentials without a location: refused");
    base(&sp);
    snprintf(sp.ssh_key, sizeof(sp.ssh_key), "laptop");
    GP_SET_HAS(&sp, MSG_JOB_SPEC__SSH_KEY);
    T_OKM(refused(&sp, GP_EINVAL, "ssh_key"), "an SSH key for a sim: job (no container): refused");
}

static void
test_ids(void)
{
    char a[GP_MAX_ID + 1], b[GP_MAX_ID + 1];

    T_OK(sched_job_id(a) == GP_EOK && sched_job_id(b) == GP_EOK);
    T_OKM(strlen(a) == 18 && strncmp(a, "j-", 2) == 0 && strspn(a + 2, "0123456789abcdef") == 16,
          "j- + 16 lowercase hex (%s)", a);
    T_OK(strcmp(a, b) != 0);
}

/* Instances and named ports. */
static void
test_instances(void)
{
    msg_port     ports[2] = {{.port = 22}, {.port = 8080}};
    msg_job_spec sp;
    char         msg[256];

    snprintf(ports[0].name, sizeof(ports[0].name), "ssh");
    snprintf(ports[1].name, sizeof(ports[1].name), "http");
    base(&sp);
    sp.kind = MSG_JOB_SPEC_KIND_INSTANCE;
    T_OKM(sched_spec_check(&sp, msg, sizeof(msg)) == GP_EOK, "a sim: instance is accepted");
    sp.max_run_s = 60;
    T_OK(refused(&sp, GP_EINVAL, "max_run_s"));
    sp.max_run_s = 0;
    sp.nodes = 2;
    T_OK(refused(&sp, GP_EINVAL, "nodes"));
    sp.nodes = 1;
    sp.ports = (gp_arr){.v = ports, .n = 2};
    T_OK(refused(&sp, GP_EINVAL, "ports"));          /* no image */
    snprintf(sp.command, sizeof(sp.command), "%s", "");
    snprintf(sp.image, sizeof(sp.image), "registry.example/app:1");
    T_OKM(sched_spec_check(&sp, msg, sizeof(msg)) == GP_EOK, "two named ports: %s", msg);
    snprintf(ports[1].name, sizeof(ports[1].name), "ssh");
    T_OK(refused(&sp, GP_EINVAL, "ports"));          /* a name twice */
    snprintf(ports[1].name, sizeof(ports[1].name), "Web");
    T_OK(refused(&sp, GP_EINVAL, "ports"));          /* not [a-z0-9-] */
    snprintf(ports[1].name, sizeof(ports[1].name), "web");
    ports[1].port = 22;
    T_OK(refused(&sp, GP_EINVAL, "ports"));          /* a port twice */
    ports[1].port = 8080;
    snprintf(ports[1].protocol, sizeof(ports[1].protocol), "sct");
    T_OK(refused(&sp, GP_EINVAL, "ports"));          /* tcp or udp */
    snprintf(ports[1].protocol, sizeof(ports[1].protocol), "udp");
    ports[1].port = 22;
    T_OKM(sched_spec_check(&sp, msg, sizeof(msg)) == GP_EOK, "tcp 22 and udp 22: %s", msg);
}

int
main(void)
{
    test_rules();
    test_instances();
    test_normalize();
    test_ids();
    test_secrets();
    return T_DONE();
}
