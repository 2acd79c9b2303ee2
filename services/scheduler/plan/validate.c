/* validate.c -- what a submitted JobSpec must mean, beyond what the codec
 * already enforced (types, bounds, lengths from the schema).  Every
 * refusal is typed and starts with the field it is about, so an
 * integrator can point at it: "origin_lat: needed by max_latency_ms". */
#include "validate.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "gp/id.h"
#include "gp/imageref.h"

#define HAS(sp, f) GP_HAS(sp, MSG_JOB_SPEC__##f)

static gp_err
refuse(char *msg, size_t n, gp_err code, const char *field, const char *why)
{
    snprintf(msg, n, "%s: %s", field, why);
    return code;
}

/* NAME=value with NAME a shell variable name: anything else would be
 * dropped or misread by the agent's environment. */
static bool
env_item_ok(const char *s)
{
    const char *eq = strchr(s, '=');

    if (eq == NULL || eq == s || (*s >= '0' && *s <= '9'))
        return false;
    for (const char *p = s; p < eq; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
              (*p >= '0' && *p <= '9') || *p == '_'))
            return false;
    return true;
}

static bool
currency_ok(const char *c)
{
    return strlen(c) == 3 && c[0] >= 'A' && c[0] <= 'Z' && c[1] >= 'A' && c[1] <= 'Z' &&
           c[2] >= 'A' && c[2] <= 'Z';
}

static gp_err
check_lists(const msg_job_spec *sp, char *msg, size_t n)
{
    const char (*env)[MSG_JOB_SPEC_ENV_ITEM_MAXLEN + 1] = sp->env.v;
    const char (*models)[MSG_JOB_SPEC_GPU_MODELS_ITEM_MAXLEN + 1] = sp->gpu_models.v;

    for (uint32_t i = 0; i < sp->env.n; i++)
        if (!env_item_ok(env[i]))
            return refuse(msg, n, GP_EINVAL, "env",
                          "each item must be NAME=value, NAME of [A-Za-z0-9_] not starting "
                          "with a digit");
    for (uint32_t i = 0; i < sp->gpu_models.n; i++)
        if (models[i][0] == '\0')
            return refuse(msg, n, GP_EINVAL, "gpu_models", "items must not be empty");
    return GP_EOK;
}

/* pool, product and client_request_id become subject tokens, Redis key
 * parts and table keys: the id rule (gp/id.h) when present. */
static gp_err
check_ids(const msg_job_spec *sp, char *msg, size_t n)
{
    static const char why[] = "must be 1 to 63 of [A-Za-z0-9_-]";

    if (HAS(sp, POOL) && !gp_id_ok(sp->pool))
        return refuse(msg, n, GP_EINVAL, "pool", why);
    if (HAS(sp, PRODUCT) && !gp_id_ok(sp->product))
        return refuse(msg, n, GP_EINVAL, "product", why);
    if (HAS(sp, CLIENT_REQUEST_ID) && !gp_id_ok(sp->client_request_id))
        return refuse(msg, n, GP_EINVAL, "client_request_id", why);
    return GP_EOK;
}

static gp_err
check_pairs(const msg_job_spec *sp, char *msg, size_t n)
{
    if (HAS(sp, MAX_LATENCY_MS) && !HAS(sp, ORIGIN_LAT))
        return refuse(msg, n, GP_EMISSING, "origin_lat", "needed by max_latency_ms");
    if (HAS(sp, MAX_LATENCY_MS) && !HAS(sp, ORIGIN_LON))
        return refuse(msg, n, GP_EMISSING, "origin_lon", "needed by max_latency_ms");
    if (HAS(sp, MAX_PRICE_MICROS_PER_GPU_HOUR) && !HAS(sp, CURRENCY))
        return refuse(msg, n, GP_EMISSING, "currency", "needed by max_price_micros_per_gpu_hour");
    if (HAS(sp, CURRENCY) && !currency_ok(sp->currency))
        return refuse(msg, n, GP_EINVAL, "currency", "must be 3 upper-case letters (ISO 4217)");
    /* a product is a pool, a GPU class and a price: naming both would
     * leave it open which one wins */
    if (HAS(sp, PRODUCT) && (HAS(sp, POOL) || sp->gpu_models.n > 0 || HAS(sp, MIN_VRAM_MB)))
        return refuse(msg, n, GP_EINVAL, "product",
                      "excludes pool, gpu_models and min_vram_mb (the product sets them)");
    return GP_EOK;
}

/* A real workload is a container: its image must be a reference the
 * agent can pull (gp/imageref.h); args and resources mean nothing to a
 * sim: command, which has no image. */
static gp_err
check_image(const msg_job_spec *sp, char *msg, size_t n)
{
    gp_image_ref r;
    char         why[160];

    if (sp->image[0] == '\0') {
        if (strncmp(sp->command, "sim:", 4) != 0)
            return refuse(msg, n, GP_EMISSING, "image",
                          "needed by a real workload (only sim: commands run without one)");
        if (sp->args.n > 0)
            return refuse(msg, n, GP_EINVAL, "args", "needs an image");
        return GP_EOK;
    }
    if (strncmp(sp->command, "sim:", 4) == 0)
        return refuse(msg, n, GP_EINVAL, "command", "a sim: command runs without an image");
    if (gp_image_ref_parse(sp->image, &r, why, sizeof(why)) != GP_EOK)
        return refuse(msg, n, GP_EINVAL, "image", why);
    if (sp->command[0] != '\0' && sp->args.n > 0)
        return refuse(msg, n, GP_EINVAL, "args", "excludes command (command runs as /bin/sh -c)");
    return GP_EOK;
}

/* "shared:" (the operator's store) or the tenant's object store; never a
 * path of the node's (the platform picks the shared store's folder). */
static gp_err
check_checkpoint(const msg_job_spec *sp, char *msg, size_t n)
{
    static const char *const schemes[] = {"s3://", "gs://", "https://"};
    const char *u = sp->checkpoint_uri;

    if (u[0] == '\0' || strcmp(u, "shared:") == 0)
        return GP_EOK;
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
        if (strncmp(u, schemes[i], strlen(schemes[i])) == 0 && u[strlen(schemes[i])] != '\0' &&
            strpbrk(u, " \t\r\n\"'") == NULL)
            return GP_EOK;
    return refuse(msg, n, GP_EINVAL, "checkpoint_uri",
                  "must be \"shared:\" or an object store: s3://, gs:// or https:// and a location");
}

static bool
port_name_ok(const char *s)
{
    size_t k = strlen(s);

    return k >= 1 && k <= 15 && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == k;
}

/* Named ports (each an endpoint on the node's address: container
 * workloads only, names and container ports unique), and an instance's
 * shape: one node, no max run (it runs until the tenant stops it). */
static gp_err
check_ports(const msg_job_spec *sp, char *msg, size_t n)
{
    const msg_port *p = sp->ports.v;

    if (sp->kind == MSG_JOB_SPEC_KIND_INSTANCE && sp->max_run_s > 0)
        return refuse(msg, n, GP_EINVAL, "max_run_s", "an instance runs until it is stopped");
    if (sp->kind == MSG_JOB_SPEC_KIND_INSTANCE && sp->nodes > 1)
        return refuse(msg, n, GP_EINVAL, "nodes", "an instance is one node");
    if (sp->ports.n > 0 && sp->image[0] == '\0')
        return refuse(msg, n, GP_EINVAL, "ports", "need an image (a container exposes them)");
    for (size_t i = 0; i < sp->ports.n; i++) {
        if (!port_name_ok(p[i].name))
            return refuse(msg, n, GP_EINVAL, "ports", "a name is 1 to 15 of [a-z0-9-]");
        if (p[i].protocol[0] != '\0' && strcmp(p[i].protocol, "tcp") != 0 &&
            strcmp(p[i].protocol, "udp") != 0)
            return refuse(msg, n, GP_EINVAL, "ports", "protocol is tcp or udp");
        if (p[i].port < 1 || p[i].port > 65535)
            return refuse(msg, n, GP_EINVAL, "ports", "port is 1 to 65535");
        for (size_t k = 0; k < i; k++)
            if (strcmp(p[k].name, p[i].name) == 0 ||
                (p[k].port == p[i].port && strcmp(p[k].protocol, p[i].protocol) == 0))
                return refuse(msg, n, GP_EINVAL, "ports", "names and ports are unique");
    }
    return GP_EOK;
}

/* Secrets are named, never given, in a spec (their values are the
 * tenant's, set once: secrets.c), and each names what it is for. */
static gp_err
check_secrets(const msg_job_spec *sp, char *msg, size_t n)
{
    static const char why[] = "a secret's name: 1 to 63 of [A-Za-z0-9_-]";
    const char       *u = sp->checkpoint_uri;

    if (HAS(sp, REGISTRY_AUTH) && !gp_id_ok(sp->registry_auth))
        return refuse(msg, n, GP_EINVAL, "registry_auth", why);
    if (HAS(sp, SSH_KEY) && !gp_id_ok(sp->ssh_key))
        return refuse(msg, n, GP_EINVAL, "ssh_key", why);
    if (HAS(sp, CHECKPOINT_SECRET) && !gp_id_ok(sp->checkpoint_secret))
        return refuse(msg, n, GP_EINVAL, "checkpoint_secret", why);
    if ((sp->registry_auth[0] || sp->ssh_key[0]) && sp->image[0] == '\0')
        return refuse(msg, n, GP_EINVAL, sp->registry_auth[0] ? "registry_auth" : "ssh_key",
                      "needs an image (a container)");
    if (sp->checkpoint_secret[0] && (u[0] == '\0' || strcmp(u, "shared:") == 0))
        return refuse(msg, n, GP_EINVAL, "checkpoint_secret",
                      "needs checkpoint_uri naming the tenant's object store");
    return GP_EOK;
}

gp_err
sched_spec_check(msg_job_spec *sp, char *msg, size_t n)
{
    gp_err rc;

    if (sp->command[0] == '\0' && sp->image[0] == '\0')
        return refuse(msg, n, GP_EMISSING, "image", "needed (or a sim: command on the simulated fleet)");
    rc = check_image(sp, msg, n);
    if (rc == GP_EOK)
        rc = check_checkpoint(sp, msg, n);
    if (rc == GP_EOK)
        rc = check_ports(sp, msg, n);
    if (rc != GP_EOK)
        return rc;
    rc = check_lists(sp, msg, n);
    if (rc == GP_EOK)
        rc = check_ids(sp, msg, n);
    if (rc == GP_EOK)
        rc = check_pairs(sp, msg, n);
    if (rc == GP_EOK)
        rc = check_secrets(sp, msg, n);
    return rc;
}

void
sched_spec_normalize(msg_job_spec *sp)
{
    /* Only these has-bits change meaning: an origin at 0,0 is still an
     * origin; every other field means the same absent or zero, and the
     * encoder writes non-zero values anyway. */
    uint64_t keep = sp->has & ((1ull << MSG_JOB_SPEC__ORIGIN_LAT) |
                               (1ull << MSG_JOB_SPEC__ORIGIN_LON));

    if (!HAS(sp, NODES))
        sp->nodes = 1;
    if (!HAS(sp, PRIORITY))
        sp->priority = 100;
    if (!HAS(sp, MAX_ATTEMPTS))
        sp->max_attempts = 3;
    sp->has = keep;
    GP_SET_HAS(sp, MSG_JOB_SPEC__NODES);
    GP_SET_HAS(sp, MSG_JOB_SPEC__PRIORITY);
    GP_SET_HAS(sp, MSG_JOB_SPEC__MAX_ATTEMPTS);
}

gp_err
sched_job_id(char out[GP_MAX_ID + 1])
{
    unsigned char r[8];

    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
        return GP_EINTERNAL;
    snprintf(out, GP_MAX_ID + 1, "j-%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2], r[3],
             r[4], r[5], r[6], r[7]);
    return GP_EOK;
}
