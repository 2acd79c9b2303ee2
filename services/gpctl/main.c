/* main.c -- gpctl: the command table and dispatch.  Global options and
 * where the stack is: options.c; help texts and usage errors: help.c;
 * the commands: cmd_*.c (gpctl.h lists the files). */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gp/app.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "gpctl.h"
#include "jobspec.h"

typedef int verb_fn(gpctl *c, int argc, char **argv);

typedef struct verb {
    const char *name;
    verb_fn    *fn;
    void      (*more_help)(FILE *out);  /* printed after its help text; NULL: none */
} verb;

/* Each has its help text in help.c. */
static const verb verbs[] = {
    {"get", cmd_get, NULL},
    {"describe", cmd_describe, NULL},
    {"create", cmd_create, edit_print_fields},
    {"update", cmd_update, edit_print_fields},
    {"delete", cmd_delete, NULL},
    {"readmit", cmd_readmit, NULL},
    {"cordon", cmd_cordon, NULL},
    {"drain", cmd_drain, NULL},
    {"uncordon", cmd_uncordon, NULL},
    {"release", cmd_release, NULL},
    {"health", cmd_health, NULL},
    {"summary", cmd_summary, NULL},
    {"submit", cmd_submit, jobspec_print_flags},
    {"cancel", cmd_cancel, NULL},
    {"logs", cmd_logs, NULL},
    {"close", cmd_close, NULL},
    {"set", cmd_set, NULL},
    {"ack", cmd_ack, NULL},
    {"silence", cmd_silence, NULL},
    {"expire", cmd_expire, NULL},
    {"watch", cmd_watch, NULL},
    {"fault", cmd_fault, NULL},
};

static const verb *
verb_find(const char *name)
{
    for (size_t i = 0; i < GP_NELEM(verbs); i++)
        if (strcmp(verbs[i].name, name) == 0)
            return &verbs[i];
    return NULL;
}

static bool
is_help(const char *a)
{
    return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0;
}

/* A command's help: its text (help.c), then the list it ends with. */
static void
help_of(const verb *v)
{
    usage_print(v->name, stdout);
    if (v->more_help != NULL)
        v->more_help(stdout);
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
        help_of(v);
        return GPCTL_OK;
    }
    return v->fn(c, argc - 1, argv + 1);
}

static int
run(int argc, char **argv, int *logfd)
{
    static gpctl    c;
    char           *rest[GPCTL_MAX_ARGS];
    gpctl_globals   g = {0};
    struct timespec ts;
    int             nrest, rc;

    if ((rc = opts_split(argc, argv, &g, rest, &nrest)) != GPCTL_OK)
        return rc;
    if (!g.verbose)
        *logfd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    gp_log_setup("gpctl", g.verbose ? "debug" : "error", g.verbose ? 2 : *logfd);
    if ((rc = opts_apply(&c, &g)) != GPCTL_OK)
        return rc;
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
