/* help.c -- gpctl's help: the overview, each command's usage text, and
 * the usage errors every command reports (usage_error).  Below main.c and
 * the cmd_ files, which call it; it calls none of them: the lists some
 * commands' help ends with, generated from descriptors (create's and
 * update's fields, submit's flags), are printed by main.c after the text.
 * Every command of main.c's table has its text here. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gp/limits.h"
#include "gpctl.h"

typedef struct help {
    const char *name;               /* the command */
    const char *text;               /* its help; its synopsis starts at "Usage:" */
} help;

static const help helps[] = {
    {"get",
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
     "       gpctl get secrets [NAME] --tenant T     (names, sizes, ages; never a value)\n"
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
    {"describe",
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
    {"create",
     "Usage: gpctl create site|pool|product|tenant NAME --FIELD VALUE ...\n"
     "\n"
     "  e.g. gpctl create tenant op --kind operator --name \"Net Op\"\n"
     "       gpctl create site s1 --tenant op --region eu-west --lat 48.1 --lon 11.5 \\\n"
     "                            --power-prices 0:180000,420:250000\n"
     "       gpctl create pool p1 --tenant op --scope region --region eu-west --models L4,H100\n"
     "  Lists take comma-separated items; items of objects take colon-separated\n"
     "  values in the fields' order.  -o json prints the created object.\n"
     "\n"
     "       gpctl create secret NAME --tenant T (--from-file F | --from-stdin)\n"
     "\n"
     "  A tenant secret (gp.api.<T>.secret.set), stored encrypted by the scheduler;\n"
     "  a job names it (submit --registry-auth, --ssh-key, --checkpoint-secret).  The\n"
     "  value (at most 16 KiB; one final newline dropped) comes from a file or stdin,\n"
     "  never from the command line, and nothing ever shows it again.  Setting a\n"
     "  name again replaces its value.\n"},
    {"update",
     "Usage: gpctl update site|pool|product|tenant NAME --FIELD VALUE ...\n"
     "\n"
     "  Changes only the fields given (same flags as create).\n"},
    {"delete",
     "Usage: gpctl delete site|pool|product|tenant|node NAME\n"
     "       gpctl delete secret NAME --tenant T\n"
     "\n"
     "  A deleted node is refused when it registers again (its agent stops)\n"
     "  until it is readmitted.\n"},
    {"readmit",
     "Usage: gpctl readmit node NAME\n"
     "\n"
     "  Lets a node that an operator deleted register again.\n"},
    {"cordon",
     "Usage: gpctl cordon node NAME\n"
     "\n"
     "  No new work is placed on the node; what runs there stays.  Prints the\n"
     "  transition.  Refused (CONFLICT) on a quarantined node: release it first.\n"},
    {"drain",
     "Usage: gpctl drain node NAME\n"
     "\n"
     "  No new work is placed on the node (state draining), as cordon.\n"},
    {"uncordon",
     "Usage: gpctl uncordon node NAME\n"
     "\n"
     "  Ends a cordon or a drain: the node takes new work again.\n"},
    {"release",
     "Usage: gpctl release node NAME\n"
     "\n"
     "  Ends a quarantine (after the repair): the node takes new work again.\n"},
    {"health",
     "Usage: gpctl health [SERVICE...] [-o json]\n"
     "\n"
     "  Asks gp.int.health.<service> of each service (default: registry).\n"
     "  Exit 0 when all answer with their dependencies up, 1 when one has a\n"
     "  dependency down, 3 when one does not answer.\n"},
    {"summary",
     "Usage: gpctl summary [-o json]\n"
     "\n"
     "  Sites, nodes by state, GPUs by model and node state, pool capacity; jobs by\n"
     "  state (counted from gp.admin.job.list pages) and GPU utilization: GPUs booked\n"
     "  by starting and running jobs (nodes x GPUs per node) over GPUs of healthy\n"
     "  nodes.  Without a scheduler the jobs part says so and the rest is shown.\n"},
    {"submit",
     "Usage: gpctl submit --tenant T [-f job.json|job.yaml|-] [--FLAG VALUE ...]\n"
     "\n"
     "  Submits a job to the scheduler (gp.api.<T>.job.submit) and prints its id and\n"
     "  state (-o json: the Job).  A file is a mapping of JobSpec field names\n"
     "  (image, command, gpus_per_node, env: [...], resources: {memory_mb: ...},\n"
     "  ...), JSON or YAML; flags override it (a list flag replaces the file's\n"
     "  list).  --gpus and --image (or, on the simulated fleet, a sim: --command)\n"
     "  are required (here or in the file).  A spec the scheduler refuses prints\n"
     "  its code and the field it names, and exits 1.\n"
     "  e.g. gpctl submit --tenant acme --image reg.example/acme/train:v3 --gpus 2\n"
     "       gpctl submit --tenant acme --command 'sim:run=300s' --gpus 2 --model H100\n"
     "\n"
     "Flags:\n"},
    {"logs",
     "Usage: gpctl logs JOB --tenant T [--attempt N] [--follow] [--bytes N]\n"
     "\n"
     "  Prints an attempt's output (stdout and stderr of its container) from the node\n"
     "  that ran it, which keeps its last log-kb KiB (gp.api.<T>.job.logs): the\n"
     "  latest attempt unless --attempt, the last --bytes (64 KiB) unless --follow,\n"
     "  which prints on as it comes until the attempt ends.  Another tenant's job is\n"
     "  NOTFOUND.\n"},
    {"cancel",
     "Usage: gpctl cancel job ID [--tenant T]\n"
     "\n"
     "  Cancels a job (its attempts are stopped) and prints its state after.\n"},
    {"close",
     "Usage: gpctl close period YYYY-MM --tenant T\n"
     "\n"
     "  Closes the tenant's period (gp.admin.billing.close): its statement is issued\n"
     "  and never changes; usage of it that comes later is a correction line on the\n"
     "  next statement.  Closing a closed period shows its statement.\n"},
    {"set",
     "Usage: gpctl set price PRODUCT --currency CUR --per-gpu-hour N [--from-ms MS]\n"
     "\n"
     "  Adds a version of a product's price to billing's price book\n"
     "  (gp.admin.billing.price.set), in force from --from-ms (default now; never\n"
     "  in the past: records already rated keep their price, and a late record is\n"
     "  rated at the version in force when its GPU time was delivered).  A version\n"
     "  never changes: another price at the same time is CONFLICT.  gpctl get\n"
     "  prices lists the book.\n"},
    {"ack",
     "Usage: gpctl ack alert ID --by NAME [--comment TEXT]\n"
     "\n"
     "  Someone has taken the alert on: shown on it (get alerts, describe alert)\n"
     "  until it fires again.\n"},
    {"silence",
     "Usage: gpctl silence --match label=value[,label=value...] (--for 2h | --until-ms MS)\n"
     "                     [--comment TEXT] [--by NAME]\n"
     "\n"
     "  Alerts whose labels (alertname, severity, region, site, node, a rule's own)\n"
     "  match every matcher are not published (NATS, Alertmanager) while it lasts;\n"
     "  an alert still firing when it ends is published then.  gpctl get silences\n"
     "  lists them, gpctl expire silence ID ends one now.\n"},
    {"expire",
     "Usage: gpctl expire silence ID\n"
     "\n"
     "  Ends a silence now.\n"},
    {"watch",
     "Usage: gpctl watch jobs [--tenant T] [--job ID] [--durable NAME] [-o json]\n"
     "       gpctl watch alerts [--severity page|ticket|info] [--region R] [--site S]\n"
     "                          [--durable NAME] [-o json]\n"
     "\n"
     "  Prints job events as they happen (gp.events.<T|*>.job.<ID|*>.*), or\n"
     "  alerts, firing and resolved (gp.alerts.<severity>.<region>.<site>.<name>;\n"
     "  fleet-wide alerts have region and site _), one a line, until Ctrl-C\n"
     "  (exit 0).  --durable NAME reads the JOBS or ALERTS stream through a\n"
     "  durable consumer of that name: run again with the same NAME after a\n"
     "  disconnection, it prints every event that came meanwhile, none twice.\n"
     "  A tenant's NAME is tenant-<T>, the consumer the scheduler made for it\n"
     "  (its own job events only; a tenant may not make one): gpctl binds to it.\n"
     "  Another tenant's is refused by nats-server (DENIED, exit 1).\n"},
    {"fault",
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
    "  logs JOB --tenant T    an attempt's output, from its node (--follow)\n"
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
    "$GP_ENV_FILE, then " GPCTL_DEFAULT_ENV_FILE " (written by `make up`).  The NATS\n"
    "identity comes from the same file or from $GP_NATS_USER and $GP_NATS_PASSWORD;\n"
    "with GP_TENANT (a tenant's file from deploy/nats-auth) replies come on the\n"
    "tenant's own inbox, gp.api.<tenant>._reply.\n"
    "\n"
    "Exit codes: 0 ok, 1 a request failed, 2 usage error, 3 control plane unreachable.\n";

static const help *
help_find(const char *name)
{
    for (size_t i = 0; i < GP_NELEM(helps); i++)
        if (strcmp(helps[i].name, name) == 0)
            return &helps[i];
    return NULL;
}

void
usage_print(const char *name, FILE *out)
{
    const help *h = name != NULL ? help_find(name) : NULL;

    fputs(h != NULL ? h->text : overview, out);
}

int
usage_error(const char *name, const char *fmt, ...)
{
    const help *h = name != NULL ? help_find(name) : NULL;
    const char *text = h != NULL ? h->text : overview;
    const char *syn = strstr(text, "Usage:");
    const char *end = syn != NULL ? strstr(syn, "\n\n") : NULL;
    va_list     ap;

    fputs("gpctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (syn != NULL)
        fprintf(stderr, "%.*s\n", end != NULL ? (int)(end - syn) : (int)strcspn(syn, "\0"), syn);
    fprintf(stderr, "Run 'gpctl %s%s--help' for more.\n", h != NULL ? h->name : "",
            h != NULL ? " " : "");
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
