/* jobspec.c -- a JobSpec from submit's flags and from a job file (see
 * jobspec.h). */
#include "jobspec.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "gp/codec.h"
#include "gp/id.h"

#define D (&msg_job_spec_desc)

typedef struct spec_flag {
    const char *flag;
    const char *field;          /* NULL: --origin (two fields) */
    const char *value;          /* for help; NULL: no value */
    const char *help;
} spec_flag;

static const spec_flag flags[] = {
    {"--name", "name", "TEXT", "human name of the job"},
    {"--kind", "kind", "KIND", "job (default) or instance (runs until stopped)"},
    {"--image", "image", "REF", "container image: host[:port]/repo[:tag][@sha256:...]"},
    {"--command", "command", "CMD", "in the image: /bin/sh -c CMD; or sim:... on the simulator"},
    {"--arg", "args", "ARG", "argument after the image's entrypoint (repeatable; not with --command)"},
    {"--cpu", "resources.cpu_millis", "MILLIS", "CPU of each attempt, 1000 = one core"},
    {"--memory", "resources.memory_mb", "MIB", "memory limit of each attempt, MiB"},
    {"--scratch", "resources.scratch_mb", "MIB", "size of /scratch (and /tmp), MiB"},
    {"--env", "env", "K=V", "environment variable (repeatable)"},
    {"--port", "ports", "NAME:PORT[/udp]", "a port the container listens on, exposed on the node "
     "(repeatable)"},
    {"--gpus", "gpus_per_node", "N", "GPUs on each node"},
    {"--nodes", "nodes", "N", "nodes, all on one site (default 1)"},
    {"--model", "gpu_models", "M", "acceptable GPU model (repeatable, or M1,M2)"},
    {"--min-vram", "min_vram_mb", "MIB", "minimum memory per GPU, MiB"},
    {"--pool", "pool", "POOL", "pool to place in"},
    {"--product", "product", "PRODUCT", "product to buy (overrides pool, models, VRAM)"},
    {"--origin", NULL, "LAT,LON", "where the work is needed, degrees"},
    {"--max-latency", "max_latency_ms", "MS", "latency bound from the origin (needs --origin)"},
    {"--priority", "priority", "N", "0 to 1000 (default 100); higher may preempt"},
    {"--interruptible", "interruptible", NULL, "may be preempted (=true|false with '=')"},
    {"--checkpoint-interval", "checkpoint_interval_s", "S", "seconds between checkpoints"},
    {"--checkpoint-uri", "checkpoint_uri", "URI", "shared: (the operator's store) or s3://, gs://, https://"},
    {"--registry-auth", "registry_auth", "SECRET", "the tenant's secret the image's registry wants"},
    {"--ssh-key", "ssh_key", "SECRET", "the tenant's secret holding its SSH public key"},
    {"--checkpoint-secret", "checkpoint_secret", "SECRET", "the tenant's secret for --checkpoint-uri"},
    {"--max-price", "max_price_micros_per_gpu_hour", "MICROS",
     "highest price per GPU-hour, micro-units (needs --currency)"},
    {"--currency", "currency", "CUR", "ISO 4217 code of --max-price"},
    {"--max-attempts", "max_attempts", "N", "attempts before the job fails (default 3)"},
    {"--max-run", "max_run_s", "S", "run time limit of an attempt, seconds"},
    {"--request-id", "client_request_id", "ID", "idempotency key: a resubmission returns the job"},
};

/* ---- fields ------------------------------------------------------------------------ */

static const gp_field *
field_of(const char *name, int *index)
{
    int i = gp_msg_field_index(D, name);

    if (index != NULL)
        *index = i;
    return i >= 0 ? &D->fields[i] : NULL;
}

static gp_arr *
arr_of(msg_job_spec *s, const gp_field *f)
{
    return (gp_arr *)(void *)((char *)s + f->offset);
}

static void
arr_clear(msg_job_spec *s, const gp_field *f)
{
    gp_arr *a = arr_of(s, f);

    free(a->v);
    a->v = NULL;
    a->n = 0;
}

/* "NAME:PORT[/PROTO]" -> one more Port (the scheduler checks the rest). */
static int
port_add(msg_job_spec *s, const char *text, char *err, size_t n)
{
    msg_port     *v = s->ports.v, *p;
    const char   *colon = strchr(text, ':');
    char         *end;
    unsigned long port = colon ? strtoul(colon + 1, &end, 10) : 0;

    if (colon == NULL || colon == text || (size_t)(colon - text) > MSG_PORT_NAME_MAXLEN ||
        port < 1 || port > 65535 || (*end != '\0' && *end != '/') ||
        (*end == '/' && strlen(end + 1) > MSG_PORT_PROTOCOL_MAXLEN))
        return snprintf(err, n, "ports: \"%.40s\" is not NAME:PORT or NAME:PORT/udp", text), -1;
    if (s->ports.n >= MSG_JOB_SPEC_PORTS_MAXITEMS)
        return snprintf(err, n, "ports: more than %d", MSG_JOB_SPEC_PORTS_MAXITEMS), -1;
    if (v == NULL && (v = s->ports.v = calloc(MSG_JOB_SPEC_PORTS_MAXITEMS, sizeof(*v))) == NULL)
        return snprintf(err, n, "out of memory"), -1;
    p = &v[s->ports.n++];
    snprintf(p->name, sizeof(p->name), "%.*s", (int)(colon - text), text);
    snprintf(p->protocol, sizeof(p->protocol), "%s", *end == '/' ? end + 1 : "tcp");
    p->port = (uint32_t)port;
    p->has = (1ull << MSG_PORT__NAME) | (1ull << MSG_PORT__PORT) | (1ull << MSG_PORT__PROTOCOL);
    s->has |= (uint64_t)1 << MSG_JOB_SPEC__PORTS;
    return 0;
}

/* One more string item: checked for count, length and (env) its shape. */
static int
arr_add(msg_job_spec *s, const gp_field *f, int index, const char *text, char *err, size_t n)
{
    gp_arr *a = arr_of(s, f);
    size_t  len = strlen(text), es = f->elem_limit + 1u;

    if (index == MSG_JOB_SPEC__PORTS)
        return port_add(s, text, err, n);
    if (a->n >= f->limit)
        return snprintf(err, n, "%s: more than %u items", f->name, f->limit), -1;
    if (len == 0 || len > f->elem_limit)
        return snprintf(err, n, "%s: item \"%.40s\" must be 1 to %u bytes", f->name, text,
                        f->elem_limit), -1;
    if (index == MSG_JOB_SPEC__ENV && (text[0] == '=' || strchr(text, '=') == NULL))
        return snprintf(err, n, "env: \"%.40s\" is not NAME=value", text), -1;
    if (a->v == NULL && (a->v = calloc(f->limit, es)) == NULL)
        return snprintf(err, n, "out of memory"), -1;
    memcpy((char *)a->v + a->n * es, text, len + 1);
    a->n++;
    s->has |= (uint64_t)1 << index;
    return 0;
}

/* What the schema alone does not say: an idempotency key travels in
 * subjects and keys, so it is an id. */
static int
scalar_extra(const msg_job_spec *s, int index, const char *text, char *err, size_t n)
{
    if (index == MSG_JOB_SPEC__CLIENT_REQUEST_ID && !gp_id_ok(s->client_request_id))
        return snprintf(err, n, "client_request_id: \"%.63s\" must be 1 to 63 of "
                        "[A-Za-z0-9_-]", text), -1;
    return 0;
}

/* "resources.cpu_millis": a field of a nested object. */
static int
set_nested(msg_job_spec *s, const char *field, const char *text, char *err, size_t n)
{
    const char     *dot = strchr(field, '.');
    char            outer[64];
    int             index;
    const gp_field *f;

    snprintf(outer, sizeof(outer), "%.*s", (int)(dot - field), field);
    f = field_of(outer, &index);
    if (f == NULL || f->type != GP_T_OBJ || f->sub == NULL)
        return snprintf(err, n, "%s: JobSpec has no such object", outer), -1;
    if (gp_msg_set_text(f->sub, (char *)s + f->offset, dot + 1, text, err, n) != GP_EOK)
        return -1;
    s->has |= (uint64_t)1 << index;
    return 0;
}

int
jobspec_set(msg_job_spec *s, const char *field, const char *text, char *err, size_t n)
{
    int             index;
    const gp_field *f;

    if (strchr(field, '.') != NULL)
        return set_nested(s, field, text, err, n);
    f = field_of(field, &index);

    if (f == NULL)
        return snprintf(err, n, "%s: JobSpec has no such field", field), -1;
    if (f->type == GP_T_ARR)
        return arr_add(s, f, index, text, err, n);
    if (gp_msg_set_text(D, s, field, text, err, n) != GP_EOK)
        return -1;
    return scalar_extra(s, index, text, err, n);
}

/* ---- flags ------------------------------------------------------------------------- */

static const spec_flag *
flag_find(const char *flag)
{
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        if (strcmp(flags[i].flag, flag) == 0)
            return &flags[i];
    return NULL;
}

bool
jobspec_flag_bare(const char *flag)
{
    const spec_flag *f = flag_find(flag);

    return f != NULL && f->value == NULL;
}

/* "52.52,13.4" -> origin_lat, origin_lon. */
static int
set_origin(msg_job_spec *s, const char *value, char *err, size_t n)
{
    const char *comma = strchr(value, ',');
    char        lat[64];

    if (comma == NULL || (size_t)(comma - value) >= sizeof(lat) || strchr(comma + 1, ',') != NULL)
        return snprintf(err, n, "--origin %s: expected LAT,LON in degrees", value), -1;
    snprintf(lat, sizeof(lat), "%.*s", (int)(comma - value), value);
    if (jobspec_set(s, "origin_lat", lat, err, n) != 0 ||
        jobspec_set(s, "origin_lon", comma + 1, err, n) != 0)
        return -1;
    return 0;
}

/* --model H100,L4 is two items; env values may hold commas, so --env is one. */
static int
set_list_flag(msg_job_spec *s, const spec_flag *sf, const char *value, char *err, size_t n)
{
    char *copy, *save = NULL, *tok;
    int   rc = 0;

    if (strcmp(sf->field, "gpu_models") != 0)
        return jobspec_set(s, sf->field, value, err, n);
    if ((copy = strdup(value)) == NULL)
        return snprintf(err, n, "out of memory"), -1;
    tok = strtok_r(copy, ",", &save);
    if (tok == NULL)
        rc = jobspec_set(s, sf->field, "", err, n);
    for (; tok != NULL && rc == 0; tok = strtok_r(NULL, ",", &save))
        rc = jobspec_set(s, sf->field, tok, err, n);
    free(copy);
    return rc;
}

int
jobspec_flag(msg_job_spec *s, spec_flags *sfl, const char *flag, const char *value, char *err,
             size_t n)
{
    const spec_flag *sf = flag_find(flag);
    int              index, rc;
    const gp_field  *f;

    if (sf == NULL)
        return 0;
    if (sf->field == NULL)
        rc = set_origin(s, value, err, n);
    else if ((f = field_of(sf->field, &index)) != NULL && f->type == GP_T_ARR) {
        if (!(sfl->set >> index & 1u))
            arr_clear(s, f);                    /* flags replace the file's list */
        sfl->set |= (uint64_t)1 << index;
        rc = set_list_flag(s, sf, value, err, n);
    } else
        rc = jobspec_set(s, sf->field, value != NULL ? value : "true", err, n);
    if (rc != 0 && strncmp(err, "--", 2) != 0) {
        char tmp[320];

        snprintf(tmp, sizeof(tmp), "%s: %s", flag, err);
        snprintf(err, n, "%s", tmp);
    }
    return rc == 0 ? 1 : -1;
}

void
jobspec_print_flags(FILE *out)
{
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        char left[64];

        snprintf(left, sizeof(left), "%s%s%s", flags[i].flag, flags[i].value ? " " : "",
                 flags[i].value ? flags[i].value : "");
        fprintf(out, "  %-28s %s\n", left, flags[i].help);
    }
}

int
jobspec_check(const msg_job_spec *s, char *err, size_t n)
{
    if ((!GP_HAS(s, MSG_JOB_SPEC__COMMAND) || s->command[0] == '\0') && s->image[0] == '\0')
        return snprintf(err, n, "missing the image (or a sim: command): --image REF or "
                        "\"image\" in the file"), -1;
    if (!GP_HAS(s, MSG_JOB_SPEC__GPUS_PER_NODE))
        return snprintf(err, n, "missing the GPUs per node: --gpus N or \"gpus_per_node\" in "
                        "the file"), -1;
    if (GP_HAS(s, MSG_JOB_SPEC__MAX_LATENCY_MS) &&
        !(GP_HAS(s, MSG_JOB_SPEC__ORIGIN_LAT) && GP_HAS(s, MSG_JOB_SPEC__ORIGIN_LON)))
        return snprintf(err, n, "max_latency_ms needs the origin: --origin LAT,LON"), -1;
    if (GP_HAS(s, MSG_JOB_SPEC__MAX_PRICE_MICROS_PER_GPU_HOUR) && s->currency[0] == '\0')
        return snprintf(err, n, "max_price_micros_per_gpu_hour needs its currency: "
                        "--currency CUR"), -1;
    return 0;
}

/* ---- files ---------------------------------------------------------------------------- */

typedef struct reader {
    yaml_parser_t p;
    yaml_event_t  ev;
    bool          have;         /* ev holds an event to delete */
    const char   *name;
    char         *err;
    size_t        n;
} reader;

static int
next(reader *r)
{
    if (r->have)
        yaml_event_delete(&r->ev);
    r->have = false;
    if (!yaml_parser_parse(&r->p, &r->ev))
        return snprintf(r->err, r->n, "%s:%zu:%zu: %s", r->name, r->p.problem_mark.line + 1,
                        r->p.problem_mark.column + 1,
                        r->p.problem ? r->p.problem : "cannot parse"), -1;
    r->have = true;
    return 0;
}

static int
fail_at(reader *r, const char *what)
{
    char tmp[600];

    snprintf(tmp, sizeof(tmp), "%s:%zu: %s", r->name, r->ev.start_mark.line + 1, what);
    snprintf(r->err, r->n, "%s", tmp);
    return -1;
}

static bool
quoted(const yaml_event_t *e)
{
    return e->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
           e->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
}

/* One value: "field: scalar", prefixed with the line for messages.  A
 * quoted value for a number or a boolean is refused: JSON's "2" is text. */
static int
value(reader *r, msg_job_spec *s, const gp_field *f, const char *text)
{
    char msg[256];

    if (f->type != GP_T_STR && f->type != GP_T_ARR && quoted(&r->ev)) {
        snprintf(msg, sizeof(msg), "%s: expected a %s, got the text \"%.40s\"", f->name,
                 f->type == GP_T_BOOL ? "boolean" : "number", text);
        return fail_at(r, msg);
    }
    if (f->type == GP_T_BOOL && !quoted(&r->ev) && strcmp(text, "true") != 0 &&
        strcmp(text, "false") != 0) {
        snprintf(msg, sizeof(msg), "%s: expected true or false, got \"%.40s\"", f->name, text);
        return fail_at(r, msg);
    }
    if (jobspec_set(s, f->name, text, msg, sizeof(msg)) != 0)
        return fail_at(r, msg);
    return 0;
}

static int
list(reader *r, msg_job_spec *s, const gp_field *f)
{
    for (;;) {
        if (next(r) != 0)
            return -1;
        if (r->ev.type == YAML_SEQUENCE_END_EVENT)
            return 0;
        if (r->ev.type != YAML_SCALAR_EVENT)
            return fail_at(r, "a list item must be a plain value");
        if (value(r, s, f, (const char *)r->ev.data.scalar.value) != 0)
            return -1;
    }
}

static int
pair(reader *r, msg_job_spec *s, const char *key)
{
    char            msg[128];
    const gp_field *f = field_of(key, NULL);

    if (f == NULL) {
        snprintf(msg, sizeof(msg), "unknown field \"%.63s\" (JobSpec field names, e.g. "
                 "gpus_per_node)", key);
        return fail_at(r, msg);
    }
    if (next(r) != 0)
        return -1;
    if (f->type == GP_T_ARR && r->ev.type == YAML_SEQUENCE_START_EVENT)
        return arr_clear(s, f), list(r, s, f);
    if (r->ev.type != YAML_SCALAR_EVENT) {
        snprintf(msg, sizeof(msg), "%s: expected %s", key,
                 f->type == GP_T_ARR ? "a list" : "a plain value");
        return fail_at(r, msg);
    }
    if (f->type == GP_T_ARR)
        arr_clear(s, f);
    return value(r, s, f, (const char *)r->ev.data.scalar.value);
}

static int
mapping(reader *r, msg_job_spec *s)
{
    char key[80];

    for (;;) {
        if (next(r) != 0)
            return -1;
        if (r->ev.type == YAML_MAPPING_END_EVENT)
            return 0;
        if (r->ev.type != YAML_SCALAR_EVENT)
            return fail_at(r, "a key must be a field name");
        snprintf(key, sizeof(key), "%s", (const char *)r->ev.data.scalar.value);
        if (pair(r, s, key) != 0)
            return -1;
    }
}

/* Stream start, document start, then the one mapping. */
static int
document(reader *r, msg_job_spec *s)
{
    if (next(r) != 0 || next(r) != 0)
        return -1;
    if (r->ev.type == YAML_STREAM_END_EVENT)
        return snprintf(r->err, r->n, "%s: empty file", r->name), -1;
    if (next(r) != 0)
        return -1;
    if (r->ev.type != YAML_MAPPING_START_EVENT)
        return fail_at(r, "expected a mapping of JobSpec fields ({\"command\": ...} or "
                          "command: ...)");
    if (mapping(r, s) != 0 || next(r) != 0)
        return -1;
    if (next(r) != 0)
        return -1;
    if (r->ev.type != YAML_STREAM_END_EVENT)
        return fail_at(r, "one job per file");
    return 0;
}

int
jobspec_load(msg_job_spec *s, FILE *f, const char *name, char *err, size_t n)
{
    reader r = {.name = name, .err = err, .n = n};
    int    rc;

    if (!yaml_parser_initialize(&r.p))
        return snprintf(err, n, "out of memory"), -1;
    yaml_parser_set_input_file(&r.p, f);
    rc = document(&r, s);
    if (r.have)
        yaml_event_delete(&r.ev);
    yaml_parser_delete(&r.p);
    return rc;
}

/* ---- submit's arguments --------------------------------------------------------------- */

/* argv[*i] as a flag and its value ("--x v", "--x=v", bare flags).  The
 * flag name goes to flag (size 64).  0 ok, -1 a value is missing. */
static int
split_flag(int argc, char **argv, int *i, char *flag, const char **val)
{
    const char *a = argv[*i], *eq = strchr(a, '=');

    snprintf(flag, 64, "%.*s", eq != NULL ? (int)(eq - a) : (int)strlen(a), a);
    *val = NULL;
    if (eq != NULL)
        *val = eq + 1;
    else if (!jobspec_flag_bare(flag) && *i + 1 < argc)
        *val = argv[++*i];
    else if (!jobspec_flag_bare(flag))
        return -1;
    return 0;
}

static bool
is_file_flag(const char *flag)
{
    return strcmp(flag, "-f") == 0 || strcmp(flag, "--file") == 0;
}

/* First pass: --tenant and -f. */
static int
find_tenant_file(int argc, char **argv, const char **tenant, const char **file, char *err,
                 size_t n)
{
    char        flag[64];
    const char *val;

    *tenant = *file = NULL;
    for (int i = 0; i < argc; i++) {
        if (argv[i][0] != '-')
            return snprintf(err, n, "unexpected argument \"%s\" (flags are --name value)",
                            argv[i]), -1;
        if (split_flag(argc, argv, &i, flag, &val) != 0)
            return snprintf(err, n, "%s needs a value", flag), -1;
        if (strcmp(flag, "--tenant") == 0)
            *tenant = val;
        else if (is_file_flag(flag))
            *file = val;
    }
    if (*tenant == NULL)
        return snprintf(err, n, "missing --tenant T (the tenant the job runs for)"), -1;
    if (!gp_id_ok(*tenant))
        return snprintf(err, n, "--tenant \"%.63s\": expected 1 to 63 of [A-Za-z0-9_-]",
                        *tenant), -1;
    return 0;
}

static int
load_path(msg_job_spec *s, const char *path, char *err, size_t n)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    int   rc;

    if (f == NULL)
        return snprintf(err, n, "cannot read %s: %s", path, strerror(errno)), -1;
    rc = jobspec_load(s, f, strcmp(path, "-") == 0 ? "<stdin>" : path, err, n);
    if (f != stdin)
        fclose(f);
    return rc;
}

int
jobspec_args(int argc, char **argv, msg_job_spec *s, const char **tenant, char *err, size_t n)
{
    const char *file, *val;
    spec_flags  sf = {0};
    char        flag[64];

    if (find_tenant_file(argc, argv, tenant, &file, err, n) != 0)
        return -1;
    if (file != NULL && load_path(s, file, err, n) != 0)
        return -1;
    for (int i = 0; i < argc; i++) {
        int r;

        split_flag(argc, argv, &i, flag, &val);
        if (strcmp(flag, "--tenant") == 0 || is_file_flag(flag))
            continue;
        r = jobspec_flag(s, &sf, flag, val, err, n);
        if (r == 0)
            return snprintf(err, n, "unknown flag %s (see gpctl submit --help)", flag), -1;
        if (r < 0)
            return -1;
    }
    return jobspec_check(s, err, n);
}
