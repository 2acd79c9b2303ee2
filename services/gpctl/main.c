/* main.c -- gpctl: global options, where the stack is, dispatch, usage. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gp/app.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "gpctl.h"
#include "jobspec.h"

#define DEFAULT_ENV_FILE "./build/run/gp.env"
#define MAX_ARGS         256

typedef int verb_fn(gpctl *c, int argc, char **argv);

typedef struct verb {
    const char *name;
    verb_fn    *fn;
    const char *help;
} verb;

static const verb verbs[] = {
    {"get", cmd_get,
     "Usage: gpctl get KIND [NAME] [--site S] [--region R] [--state X] [--model M] [--tenant T]\n"
     "                 [-o table|wide|json]\n"
     "\n"
     "  KIND: sites, nodes, gpus, pools, products, tenants (singular works too).\n"
     "  Lists every page from the registry; filters are applied by the registry\n"
     "  (--state: unknown, healthy, suspect, lost, draining, cordoned, quarantined).  gpus is a\n"
     "  flattened view of the nodes' GPUs.  NAME shows one object.\n"
     "  -o wide adds columns; -o json prints a JSON array.\n"
     "\n"
     "       gpctl get jobs [ID] [--tenant T] [--state S] [--site S] [--scope own|sites]\n"
     "       gpctl get attempts --job ID [--tenant T]\n"
     "\n"
     "  jobs: from the scheduler, every page (gp.api.<T>.job.list with --tenant,\n"
     "  else gp.admin.job.list); --state: pending, starting, running, succeeded,\n"
     "  failed, cancelled; --site: jobs with an attempt there; --scope sites: the\n"
     "  jobs that ran on the tenant's own sites (a site partner's view; PostgreSQL's\n"
     "  row-level security decides what a tenant sees).  GPUS is nodes x GPUs\n"
     "  per node; SITE/NODE is the latest attempt's: lists carry no attempts, so it is\n"
     "  filled with -o wide (one more request per job that has run).\n"
     "  attempts: the job's attempts, node by node, with their placement scores.\n"
     "  Without --tenant a job is looked up in the admin list first.\n"
     "\n"
     "       gpctl get usage --tenant T [--site S] [--period YYYY-MM]\n"
     "       gpctl get statements --tenant T\n"
     "       gpctl get balances --tenant T\n"
     "       gpctl get prices\n"
     "\n"
     "  From billing (gp.api.<T>.billing.*): the usage records billed (a customer's\n"
     "  own; a site partner's sites' too), the tenant's issued statements, the\n"
     "  balances of its ledger accounts.  Money in the currency's minor unit,\n"
     "  rounded half to even; -o json gives the exact nanos.\n"
     "\n"
     "       gpctl get alerts [--severity S] [--region R] [--site S]\n"
     "                        [--state active|pending|firing|resolved|all]\n"
     "       gpctl get silences\n"
     "\n"
     "  From alerting (gp.admin.alert.*): the alerts (default: active, pending or\n"
     "  firing), each with whom to send, its silence and its ack; the silences.\n"},
    {"describe", cmd_describe,
     "Usage: gpctl describe site|node NAME\n"
     "       gpctl describe job ID [--tenant T]\n"
     "       gpctl describe statement YYYY-MM --tenant T\n"
     "\n"
     "  job:  state, reason, why it waits (pending: the nodes considered, counted by\n"
     "        the filter they failed), the spec, the attempts (site, node, GPUs,\n"
     "        times, exit, latency estimate, score breakdown) and the latest events.\n"
     "  node: site, state, last seen, registration, hardware, every GPU and the\n"
     "        latest telemetry (per GPU temperature, power, util, memory, ECC,\n"
     "        XIDs, throttling; disk; uplink RTT; running attempts and usage).\n"
     "  site: its fields, the power price schedule and its nodes.\n"
     "  statement: its lines (corrections of earlier periods named), the content as\n"
     "        issued and its sha256.\n"},
    {"create", cmd_create,
     "Usage: gpctl create site|pool|product|tenant NAME --FIELD VALUE ...\n"
     "\n"
     "  e.g. gpctl create tenant op --kind operator --name \"Net Op\"\n"
     "       gpctl create site s1 --tenant op --region eu-west --lat 48.1 --lon 11.5 \\\n"
     "                            --power-prices 0:180000,420:250000\n"
     "       gpctl create pool p1 --tenant op --scope region --region eu-west --models L4,H100\n"
     "  Lists take comma-separated items; items of objects take colon-separated\n"
     "  values in the fields' order.  -o json prints the created object.\n"},
    {"update", cmd_update,
     "Usage: gpctl update site|pool|product|tenant NAME --FIELD VALUE ...\n"
     "\n"
     "  Changes only the fields given (same flags as create).\n"},
    {"delete", cmd_delete,
     "Usage: gpctl delete site|pool|product|tenant|node NAME\n"
     "\n"
     "  A deleted node is refused when it registers again (its agent stops)\n"
     "  until it is readmitted.\n"},
    {"readmit", cmd_readmit,
     "Usage: gpctl readmit node NAME\n"
     "\n"
     "  Lets a node that an operator deleted register again.\n"},
    {"cordon", cmd_cordon,
     "Usage: gpctl cordon node NAME\n"
     "\n"
     "  No new work is placed on the node; what runs there stays.  Prints the\n"
     "  transition.  Refused (CONFLICT) on a quarantined node: release it first.\n"},
    {"drain", cmd_drain,
     "Usage: gpctl drain node NAME\n"
     "\n"
     "  No new work is placed on the node (state draining), as cordon.\n"},
    {"uncordon", cmd_uncordon,
     "Usage: gpctl uncordon node NAME\n"
     "\n"
     "  Ends a cordon or a drain: the node takes new work again.\n"},
    {"release", cmd_release,
     "Usage: gpctl release node NAME\n"
     "\n"
     "  Ends a quarantine (after the repair): the node takes new work again.\n"},
    {"health", cmd_health,
     "Usage: gpctl health [SERVICE...] [-o json]\n"
     "\n"
     "  Asks gp.int.health.<service> of each service (default: registry).\n"
     "  Exit 0 when all answer with their dependencies up, 1 when one has a\n"
     "  dependency down, 3 when one does not answer.\n"},
    {"summary", cmd_summary,
     "Usage: gpctl summary [-o json]\n"
     "\n"
     "  Sites, nodes by state, GPUs by model and node state, pool capacity; jobs by\n"
     "  state (counted from gp.admin.job.list pages) and GPU utilization: GPUs booked\n"
     "  by starting and running jobs (nodes x GPUs per node) over GPUs of healthy\n"
     "  nodes.  Without a scheduler the jobs part says so and the rest is shown.\n"},
    {"submit", cmd_submit,
     "Usage: gpctl submit --tenant T [-f job.json|job.yaml|-] [--FLAG VALUE ...]\n"
     "\n"
     "  Submits a job to the scheduler (gp.api.<T>.job.submit) and prints its id and\n"
     "  state (-o json: the Job).  A file is a mapping of JobSpec field names\n"
     "  (command, gpus_per_node, env: [...], gpu_models: [...], ...), JSON or YAML;\n"
     "  flags override it (a list flag replaces the file's list).  --command and\n"
     "  --gpus are required (here or in the file).  A spec the scheduler refuses\n"
     "  prints its code and the field it names, and exits 1.\n"
     "  e.g. gpctl submit --tenant acme --command 'sim:run=300s' --gpus 2 --model H100\n"
     "\n"
     "Flags:\n"},
    {"cancel", cmd_cancel,
     "Usage: gpctl cancel job ID [--tenant T]\n"
     "\n"
     "  Cancels a job (its attempts are stopped) and prints its state after.\n"},
    {"close", cmd_close,
     "Usage: gpctl close period YYYY-MM --tenant T\n"
     "\n"
     "  Closes the tenant's period (gp.admin.billing.close): its statement is issued\n"
     "  and never changes; usage of it that comes later is a correction line on the\n"
     "  next statement.  Closing a closed period shows its statement.\n"},
    {"set", cmd_set,
     "Usage: gpctl set price PRODUCT --currency CUR --per-gpu-hour N [--from-ms MS]\n"
     "\n"
     "  Adds a version of a product's price to billing's price book\n"
     "  (gp.admin.billing.price.set), in force from --from-ms (default now; never\n"
     "  in the past: records already rated keep their price, and a late record is\n"
     "  rated at the version in force when its GPU time was delivered).  A version\n"
     "  never changes: another price at the same time is CONFLICT.  gpctl get\n"
     "  prices lists the book.\n"},
    {"ack", cmd_ack,
     "Usage: gpctl ack alert ID --by NAME [--comment TEXT]\n"
     "\n"
     "  Someone has taken the alert on: shown on it (get alerts, describe alert)\n"
     "  until it fires again.\n"},
    {"silence", cmd_silence,
     "Usage: gpctl silence --match label=value[,label=value...] (--for 2h | --until-ms MS)\n"
     "                     [--comment TEXT] [--by NAME]\n"
     "\n"
     "  Alerts whose labels (alertname, severity, region, site, node, a rule's own)\n"
     "  match every matcher are not published (NATS, Alertmanager) while it lasts;\n"
     "  an alert still firing when it ends is published then.  gpctl get silences\n"
     "  lists them, gpctl expire silence ID ends one now.\n"},
    {"expire", cmd_expire,
     "Usage: gpctl expire silence ID\n"
     "\n"
     "  Ends a silence now.\n"},
    {"watch", cmd_watch,
     "Usage: gpctl watch jobs [--tenant T] [--job ID] [-o json]\n"
     "       gpctl watch alerts [--severity page|ticket|info] [--region R] [--site S]\n"
     "                          [--durable NAME] [-o json]\n"
     "\n"
     "  Prints job events as they happen (gp.events.<T|*>.job.<ID|*>.*), or\n"
     "  alerts, firing and resolved (gp.alerts.<severity>.<region>.<site>.<name>;\n"
     "  fleet-wide alerts have region and site _), one a line, until Ctrl-C\n"
     "  (exit 0).  --durable NAME reads the ALERTS stream through a durable\n"
     "  consumer of that name: run again with the same NAME after a disconnection,\n"
     "  it prints every alert that came meanwhile, none twice.\n"},
    {"fault", cmd_fault,
     "Usage: gpctl fault KIND [--node N] [--site S] [--gpu I] [--code C] [--count N]\n"
     "                   [--duration-ms MS] [--delay-ms MS] [--jitter-ms MS] [--period-ms MS]\n"
     "\n"
     "  Asks the fleet simulator (gridpool-sim) to inject a fault: site_power_cut,\n"
     "  uplink_cut, node_crash, node_slow, node_jitter, node_flap, gpu_xid,\n"
     "  ecc_burst, thermal_throttle, gpu_lost, node_stop, node_resume, reply_lost.\n"},
};

static const char overview[] =
    "gpctl -- operate a gridpool control plane\n"
    "\n"
    "Usage: gpctl [global options] COMMAND [args]\n"
    "\n"
    "Commands:\n"
    "  get KIND [NAME]        list sites, nodes, gpus, pools, products, tenants\n"
    "  describe site|node N   details of one site or node\n"
    "  create KIND NAME ...   create a site, pool, product or tenant\n"
    "  update KIND NAME ...   change fields of one\n"
    "  delete KIND NAME       delete one\n"
    "  readmit node NAME      let a deleted node register again\n"
    "  cordon|drain node N    no new work on a node\n"
    "  uncordon node N        end a cordon or drain\n"
    "  release node N         end a quarantine\n"
    "  health [SERVICE...]    health of services (default: registry)\n"
    "  summary                sites, nodes, GPUs, pools, jobs by state, GPU utilization\n"
    "  submit --tenant T ...  submit a job (flags or -f job.json|job.yaml)\n"
    "  set price PRODUCT ...  add a version of a product's price (billing)\n"
    "  get jobs|attempts      list jobs, or one job's attempts\n"
    "  describe job ID        a job: spec, why it waits, attempts, events\n"
    "  cancel job ID          cancel a job\n"
    "  watch jobs|alerts      live job events or alerts until Ctrl-C\n"
    "  get alerts|silences    alerts now (whom to send), silences\n"
    "  describe alert ID      an alert's diagnosis and timeline\n"
    "  ack alert ID --by N    take an alert on\n"
    "  silence --match ...    mute matching alerts for a while; expire silence ID\n"
    "  fault KIND ...         inject a fault into the fleet simulator\n"
    "\n"
    "Global options (anywhere on the line):\n"
    "  -o, --output FMT       table (default), wide or json\n"
    "  --timeout MS           per-request timeout, ms (default 5000)\n"
    "  --env-file FILE        read GP_NATS_URL (and GP_NATS_USER, GP_NATS_PASSWORD,\n"
    "                         GP_TENANT) from FILE (KEY=VALUE lines)\n"
    "  --nats-url URL         NATS address\n"
    "  -v, --verbose          library logs on stderr\n"
    "  -h, --help             this help; gpctl COMMAND --help for one command\n"
    "  --                     no global options after this\n"
    "\n"
    "The control plane is found through --nats-url, --env-file, $GP_NATS_URL,\n"
    "$GP_ENV_FILE, then " DEFAULT_ENV_FILE " (written by `make up`).  The NATS\n"
    "identity comes from the same file or from $GP_NATS_USER and $GP_NATS_PASSWORD;\n"
    "with GP_TENANT (a tenant's file from deploy/nats-auth) replies come on the\n"
    "tenant's own inbox, gp.api.<tenant>._reply.\n"
    "\n"
    "Exit codes: 0 ok, 1 a request failed, 2 usage error, 3 control plane unreachable.\n";

/* ---- usage ------------------------------------------------------------------- */

static const verb *
verb_find(const char *name)
{
    for (size_t i = 0; i < GP_NELEM(verbs); i++)
        if (strcmp(verbs[i].name, name) == 0)
            return &verbs[i];
    return NULL;
}

void
usage_print(const char *name, FILE *out)
{
    const verb *v = name != NULL ? verb_find(name) : NULL;

    fputs(v != NULL ? v->help : overview, out);
    if (v != NULL && (strcmp(v->name, "create") == 0 || strcmp(v->name, "update") == 0))
        edit_print_fields(out);
    if (v != NULL && strcmp(v->name, "submit") == 0)
        jobspec_print_flags(out);
}

int
usage_error(const char *name, const char *fmt, ...)
{
    const verb *v = name != NULL ? verb_find(name) : NULL;
    const char *help = v != NULL ? v->help : overview;
    const char *syn = strstr(help, "Usage:");
    const char *end = syn != NULL ? strstr(syn, "\n\n") : NULL;
    va_list     ap;

    fputs("gpctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (syn != NULL)
        fprintf(stderr, "%.*s\n", end != NULL ? (int)(end - syn) : (int)strcspn(syn, "\0"), syn);
    fprintf(stderr, "Run 'gpctl %s%s--help' for more.\n", v != NULL ? v->name : "",
            v != NULL ? " " : "");
    return GPCTL_USAGE;
}

bool
wants_help(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return true;
    return false;
}

/* ---- global options ------------------------------------------------------------ */

typedef struct globals {
    const char *output;
    const char *timeout;
    const char *env_file;
    const char *nats_url;
    bool        verbose;
} globals;

/* If argv[*i] is global option `name` (also -x / --name=V / -xV), stores
 * its value in *val and advances *i.  Returns 1 taken, 0 not it, -1 value
 * missing. */
static int
take_opt(int argc, char **argv, int *i, const char *shrt, const char *lng, const char **val)
{
    const char *a = argv[*i];
    size_t      ll = strlen(lng);

    if ((shrt != NULL && strcmp(a, shrt) == 0) || strcmp(a, lng) == 0) {
        if (*i + 1 >= argc)
            return -1;
        *val = argv[++*i];
        return 1;
    }
    if (strncmp(a, lng, ll) == 0 && a[ll] == '=') {
        *val = a + ll + 1;
        return 1;
    }
    if (shrt != NULL && strncmp(a, shrt, 2) == 0 && a[1] != '-' && a[2] != '\0' &&
        a[strspn(a + 2, "abcdefghijklmnopqrstuvwxyz") + 2] == '\0') {
        *val = a + 2;                           /* -ojson, never a value like "-o x" */
        return 1;
    }
    return 0;
}

static int
take_global(int argc, char **argv, int *i, globals *g)
{
    int r;

    if (strcmp(argv[*i], "-v") == 0 || strcmp(argv[*i], "--verbose") == 0)
        return g->verbose = true, 1;
    if ((r = take_opt(argc, argv, i, "-o", "--output", &g->output)) != 0)
        return r;
    if ((r = take_opt(argc, argv, i, NULL, "--timeout", &g->timeout)) != 0)
        return r;
    if ((r = take_opt(argc, argv, i, NULL, "--env-file", &g->env_file)) != 0)
        return r;
    return take_opt(argc, argv, i, NULL, "--nats-url", &g->nats_url);
}

/* Moves the global options out of argv; the rest goes to rest[].  After
 * "--" nothing is taken as a global option. */
static int
split_args(int argc, char **argv, globals *g, char **rest, int *nrest)
{
    bool globals_end = false;

    *nrest = 0;
    for (int i = 1; i < argc; i++) {
        int r = 0;

        if (!globals_end && strcmp(argv[i], "--") == 0) {
            globals_end = true;
            continue;
        }
        if (!globals_end)
            r = take_global(argc, argv, &i, g);

        if (r < 0)
            return usage_error(NULL, "option %s needs a value", argv[i]);
        if (r == 0 && *nrest < MAX_ARGS)
            rest[(*nrest)++] = argv[i];
    }
    return GPCTL_OK;
}

static int
apply_globals(gpctl *c, const globals *g)
{
    char *end = NULL;

    if (g->output == NULL || strcmp(g->output, "table") == 0)
        c->out = OUT_TABLE;
    else if (strcmp(g->output, "wide") == 0)
        c->out = OUT_WIDE;
    else if (strcmp(g->output, "json") == 0)
        c->out = OUT_JSON;
    else
        return usage_error(NULL, "-o %s: expected table, wide or json", g->output);
    c->timeout_ms = 5000;
    if (g->timeout != NULL) {
        unsigned long v;

        errno = 0;
        v = strtoul(g->timeout, &end, 10);
        if (errno != 0 || end == g->timeout || *end != '\0' || v == 0 || v > 3600000 ||
            g->timeout[0] == '-')
            return usage_error(NULL, "--timeout %s: expected milliseconds, 1 to 3600000",
                               g->timeout);
        c->timeout_ms = (unsigned)v;
    }
    return GPCTL_OK;
}

/* ---- where the stack is ----------------------------------------------------------- */

/* The settings gpctl takes from a KEY=VALUE file (quotes around a value
 * are dropped): where the control plane is, and who we are. */
static void
env_line(gpctl *c, const char *line)
{
    static const struct { const char *key; size_t off, n; } keys[] = {
        {"GP_NATS_URL=", offsetof(gpctl, url), sizeof(((gpctl *)0)->url)},
        {"GP_NATS_USER=", offsetof(gpctl, user), sizeof(((gpctl *)0)->user)},
        {"GP_NATS_PASSWORD=", offsetof(gpctl, password), sizeof(((gpctl *)0)->password)},
        {"GP_TENANT=", offsetof(gpctl, tenant), sizeof(((gpctl *)0)->tenant)},
    };

    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        size_t      klen = strlen(keys[k].key), len;
        const char *v = line + klen;

        if (strncmp(line, keys[k].key, klen) != 0)
            continue;
        len = strcspn(v, "\r\n");
        if (len >= 2 && (v[0] == '"' || v[0] == '\'') && v[len - 1] == v[0])
            v++, len -= 2;
        snprintf((char *)c + keys[k].off, keys[k].n, "%.*s", (int)len, v);
    }
}

/* -1 when the file cannot be read, 0 when it has no GP_NATS_URL, 1 found. */
static int
env_file_read(gpctl *c, const char *path)
{
    FILE *f = fopen(path, "r");
    char  line[1024];

    if (f == NULL)
        return -1;
    c->url[0] = '\0';
    while (fgets(line, sizeof(line), f) != NULL)
        env_line(c, line);
    fclose(f);
    return c->url[0] != '\0';
}

static int
from_file(gpctl *c, const char *path, const char *how)
{
    int r = env_file_read(c, path);

    snprintf(c->url_from, sizeof(c->url_from), "from %s %s", how, path);
    if (r < 0)
        return usage_error(NULL, "cannot read env file %s (%s): %s", path, how, strerror(errno));
    return GPCTL_OK;
}

/* The environment's identity wins over the file's. */
static void
identity_from_env(gpctl *c)
{
    const char *u = getenv("GP_NATS_USER"), *p = getenv("GP_NATS_PASSWORD"),
               *t = getenv("GP_TENANT");

    if (u != NULL && u[0] != '\0')
        snprintf(c->user, sizeof(c->user), "%s", u);
    if (p != NULL && p[0] != '\0')
        snprintf(c->password, sizeof(c->password), "%s", p);
    if (t != NULL && t[0] != '\0')
        snprintf(c->tenant, sizeof(c->tenant), "%s", t);
}

static int
resolve_url(gpctl *c, const globals *g)
{
    const char *env = getenv("GP_NATS_URL"), *file = getenv("GP_ENV_FILE");

    if (g->nats_url != NULL) {
        snprintf(c->url, sizeof(c->url), "%s", g->nats_url);
        snprintf(c->url_from, sizeof(c->url_from), "from --nats-url");
        return GPCTL_OK;
    }
    if (g->env_file != NULL)
        return from_file(c, g->env_file, "--env-file");
    if (env != NULL && env[0] != '\0') {
        snprintf(c->url, sizeof(c->url), "%s", env);
        snprintf(c->url_from, sizeof(c->url_from), "from $GP_NATS_URL");
        return GPCTL_OK;
    }
    if (file != NULL && file[0] != '\0')
        return from_file(c, file, "$GP_ENV_FILE");
    if (access(DEFAULT_ENV_FILE, R_OK) == 0)
        return from_file(c, DEFAULT_ENV_FILE, "env file");
    c->url[0] = '\0';
    return GPCTL_OK;
}

/* ---- main ---------------------------------------------------------------------- */

static bool
is_help(const char *a)
{
    return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0;
}

static int
dispatch(gpctl *c, int argc, char **argv)
{
    const verb *v;
    bool        help = argc > 0 && is_help(argv[0]);

    if (help)
        argc--, argv++;                     /* gpctl -h get: help of get */
    if (argc == 0) {
        if (help)
            usage_print(NULL, stdout);
        return help ? GPCTL_OK : usage_error(NULL, "missing command");
    }
    v = verb_find(argv[0]);
    if (v == NULL)
        return usage_error(NULL, "unknown command \"%s\"", argv[0]);
    if (help || wants_help(argc, argv)) {
        usage_print(v->name, stdout);
        return GPCTL_OK;
    }
    return v->fn(c, argc - 1, argv + 1);
}

static int
run(int argc, char **argv, int *logfd)
{
    static gpctl    c;
    char           *rest[MAX_ARGS];
    globals         g = {0};
    struct timespec ts;
    int             nrest, rc;

    if ((rc = split_args(argc, argv, &g, rest, &nrest)) != GPCTL_OK)
        return rc;
    if (!g.verbose)
        *logfd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    gp_log_setup("gpctl", g.verbose ? "debug" : "error", g.verbose ? 2 : *logfd);
    if ((rc = apply_globals(&c, &g)) != GPCTL_OK || (rc = resolve_url(&c, &g)) != GPCTL_OK)
        return rc;
    identity_from_env(&c);
    clock_gettime(CLOCK_REALTIME, &ts);
    c.now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    rc = dispatch(&c, nrest, rest);
    if (c.bus != NULL || c.loop != NULL)
        ctl_close(&c);
    return rc;
}

int
main(int argc, char **argv)
{
    int logfd = -1;
    int rc = run(argc, argv, &logfd);

    fflush(stdout);
    gp_lib_close();
    if (logfd >= 0)
        close(logfd);
    return rc;
}
