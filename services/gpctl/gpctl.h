/* gpctl.h -- the gridpool command-line tool: shared declarations.
 *
 *   main.c      the command table and dispatch (it only dispatches)
 *   options.c   global options, the stack's address
 *   help.c      the help texts, usage errors
 *   client.c    the private loop, the bus, synchronous calls, paging
 *   output.c    tables, JSON arrays, formatting of times, sizes, money
 *   cmd_get.c   get (sites, nodes, gpus, pools, products, tenants)
 *   cmd_describe.c  describe site|node
 *   cmd_edit.c  create, update, delete (driven by the message descriptors)
 *   cmd_status.c    health, summary
 *   cmd_fault.c fault (the fleet simulator's fault control)
 *   cmd_job.c   submit, get jobs|attempts, describe job, cancel job
 *   cmd_watch.c watch jobs (live job events until Ctrl-C)
 *   cmd_logs.c  logs JOB (an attempt's output, from its node)
 *   cmd_secret.c    create|get|delete secret (a tenant's secrets; values never shown)
 *   cmd_billing.c   get usage|statements|balances, describe statement, close period
 *   jobspec.c   a JobSpec from flags and JSON/YAML files (pure)
 *   jobview.c   job rows, "why it waits", event lines, job sums (pure)
 *
 * Calls go one way: main.c -> the cmd_ files -> client.c, output.c,
 * help.c and the pure modules.  cmd_get.c and cmd_describe.c hand some
 * kinds on to cmd_job.c, cmd_billing.c and cmd_alerts.c, which call
 * neither back.
 *
 * Exit codes: 0 ok, 1 a request failed, 2 usage error, 3 the control
 * plane cannot be reached (NATS down, no responders, timeout). */
#ifndef GPCTL_H
#define GPCTL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gp/bus.h"
#include "gp/codec.h"
#include "gp/err.h"
#include "msg_gen.h"
#include "output.h"

enum { GPCTL_OK = 0, GPCTL_FAIL = 1, GPCTL_USAGE = 2, GPCTL_UNREACHABLE = 3 };

/* Where the stack's address is read last (written by `make up`). */
#define GPCTL_DEFAULT_ENV_FILE "./build/run/gp.env"
/* Arguments kept past the global options; more are dropped. */
#define GPCTL_MAX_ARGS         256

typedef enum out_fmt { OUT_TABLE, OUT_WIDE, OUT_JSON } out_fmt;

struct ev_loop;

typedef struct gpctl {
    out_fmt         out;
    unsigned        timeout_ms;
    char            url[512];
    char            url_from[600];     /* where url came from, for messages */
    /* The NATS identity, from the same place as url (GP_NATS_USER,
     * GP_NATS_PASSWORD) or the environment; with GP_TENANT, a tenant's
     * identity, whose replies come in its own gp.api.<tenant>._reply. */
    char            user[128];
    char            password[256];
    char            tenant[64];
    int64_t         now_ms;            /* wall clock at start, for ages */
    struct ev_loop *loop;
    gp_bus         *bus;
    volatile int    connected;
    bool            jetstream;         /* ctl_connect opens a JetStream context */
} gpctl;

/* ---- client.c ------------------------------------------------------------ */

/* True, with the server's text on stderr, when nats-server refused a
 * request or subscription of this connection (gp_bus_refusal). */
bool ctl_refused(gpctl *c);

/* Connects (waits up to timeout_ms); returns an exit code. */
int  ctl_connect(gpctl *c);
void ctl_close(gpctl *c);

/* Request/reply: encodes in, decodes the reply into out (zeroed first; the
 * caller clears it with gp_msg_clear).  Returns GP_EOK or the error with a
 * human detail and *transport (no reply came: NOROUTE, TIMEOUT, UNAVAIL)
 * or not (a remote error or an undecodable reply); does not print. */
gp_err ctl_call_raw(gpctl *c, const char *subject, const gp_msg_desc *ind, const void *in,
                    const gp_msg_desc *outd, void *out, char *detail, size_t dlen,
                    bool *transport);
/* Same, but prints the error and returns an exit code (0, 1 or 3). */
int    ctl_call(gpctl *c, const char *subject, const gp_msg_desc *ind, const void *in,
                const gp_msg_desc *outd, void *out);
/* The exit code of an error from ctl_call_raw (transport errors are 3). */
int    ctl_exit_code(gp_err err, bool transport);
/* One message as a JSON line on stdout (-o json); an exit code. */
int    ctl_print_json(const gp_msg_desc *d, const void *m);
/* Prints "gpctl: CODE: detail" or the transport problem; returns the exit code. */
int    ctl_report(gpctl *c, const char *subject, gp_err err, bool transport, const char *detail);

/* ---- entities ------------------------------------------------------------ */

typedef struct entity {
    const char        *name;           /* "site": subject token and kind */
    const char        *plural;         /* "sites" */
    const char        *alias;          /* short alias or NULL */
    const gp_msg_desc *desc;           /* Site */
    const gp_msg_desc *list_desc;      /* SiteList */
    unsigned           page;           /* items per list page (the schema's maxItems) */
    bool               editable;       /* create/update/delete */
    /* its operations; NULL where the registry has none (nodes register) */
    const gp_op       *create, *update, *get, *del, *list;
} entity;

const entity *entity_find(const char *word);

/* Called for every listed item; returns an exit code (0 to go on). */
typedef int item_fn(void *arg, const void *item);

/* Lists every page of e matching filter (after/limit are set here). */
int ctl_list(gpctl *c, const entity *e, const msg_list_request *filter, item_fn *fn, void *arg);
/* Fetches one object by id into out (of e->desc).  Exit code. */
int ctl_get(gpctl *c, const entity *e, const char *id, void *out);

/* ---- commands (each returns an exit code) -------------------------------- */

int cmd_get(gpctl *c, int argc, char **argv);
int cmd_describe(gpctl *c, int argc, char **argv);
int cmd_create(gpctl *c, int argc, char **argv);
int cmd_update(gpctl *c, int argc, char **argv);
int cmd_delete(gpctl *c, int argc, char **argv);
int cmd_readmit(gpctl *c, int argc, char **argv);
int cmd_cordon(gpctl *c, int argc, char **argv);
int cmd_drain(gpctl *c, int argc, char **argv);
int cmd_uncordon(gpctl *c, int argc, char **argv);
int cmd_release(gpctl *c, int argc, char **argv);
int cmd_health(gpctl *c, int argc, char **argv);
int cmd_summary(gpctl *c, int argc, char **argv);
int cmd_fault(gpctl *c, int argc, char **argv);
int cmd_submit(gpctl *c, int argc, char **argv);
int cmd_cancel(gpctl *c, int argc, char **argv);
int cmd_logs(gpctl *c, int argc, char **argv);
int cmd_watch(gpctl *c, int argc, char **argv);
/* get jobs / get attempts: argv after the kind word. */
int cmd_get_jobs(gpctl *c, int argc, char **argv);
int cmd_get_attempts(gpctl *c, int argc, char **argv);
int cmd_get_usage(gpctl *c, int argc, char **argv);
int cmd_get_statements(gpctl *c, int argc, char **argv);
int cmd_get_balances(gpctl *c, int argc, char **argv);
int cmd_get_prices(gpctl *c, int argc, char **argv);
int cmd_get_alerts(gpctl *c, int argc, char **argv);
int cmd_describe_alert(gpctl *c, int argc, char **argv);
int cmd_ack(gpctl *c, int argc, char **argv);
int cmd_silence(gpctl *c, int argc, char **argv);
int cmd_get_silences(gpctl *c, int argc, char **argv);
int cmd_expire(gpctl *c, int argc, char **argv);
int cmd_set(gpctl *c, int argc, char **argv);
int cmd_describe_statement(gpctl *c, int argc, char **argv);
/* create|get|delete secret: argv after the kind word. */
int cmd_create_secret(gpctl *c, int argc, char **argv);
int cmd_get_secrets(gpctl *c, int argc, char **argv);
int cmd_delete_secret(gpctl *c, int argc, char **argv);
int cmd_close(gpctl *c, int argc, char **argv);

/* ---- jobs (cmd_job.c) ------------------------------------------------------- */

/* Called for every listed job; returns an exit code (0 to go on). */
typedef int job_fn(void *arg, const msg_job *job);

/* Lists every page of jobs: of tenant (gp.api.<tenant>.job.list) or of
 * all (gp.admin.job.list, tenant NULL).  An error is written into why
 * when given (nothing printed), else printed.  Exit code, or what fn
 * returned to stop. */
int job_list(gpctl *c, const char *tenant, const msg_job_list_request *filter, job_fn *fn,
             void *arg, char *why, size_t wlen);

/* describe job's arguments (ID [--tenant T]) parsed, connected, and the
 * job fetched into out (zeroed first; the caller clears it with
 * gp_msg_clear), for cmd_describe.c to print.  Exit code; errors are
 * printed. */
int job_describe_get(gpctl *c, int argc, char **argv, msg_job *out);

/* "8xH100" for a node's GPUs (cmd_get.c). */
void node_models(const msg_node *n, char *buf, size_t len);
/* The node as JSON with last_seen / registered as ISO-8601 strings. */
gp_err node_to_json(const msg_node *n, gp_buf *b);

/* Lists the settable fields of every editable kind (create/update help). */
void edit_print_fields(FILE *out);

/* ---- options.c -------------------------------------------------------------- */

/* The global options as given (pointers into argv; NULL: not given). */
typedef struct gpctl_globals {
    const char *output;
    const char *timeout;
    const char *env_file;
    const char *nats_url;
    bool        verbose;
} gpctl_globals;

/* Moves the global options out of argv into g; the rest goes to rest[]
 * (GPCTL_MAX_ARGS).  After "--" nothing is taken as a global option.
 * Returns an exit code (usage error printed). */
int opts_split(int argc, char **argv, gpctl_globals *g, char **rest, int *nrest);
/* Output format and timeout from g; the stack's address and the NATS
 * identity from g, an env file or the environment.  Exit code. */
int opts_apply(gpctl *c, const gpctl_globals *g);

/* ---- help.c ------------------------------------------------------------------ */

/* Prints "gpctl: <msg>" and the verb's usage on stderr; returns 2. */
int usage_error(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints the verb's help text on stdout (verb NULL: the overview); the
 * list a command's help ends with (create's fields, submit's flags) is
 * main.c's to print after it. */
void usage_print(const char *verb, FILE *out);
/* True when argv holds -h or --help. */
bool wants_help(int argc, char **argv);

#endif
