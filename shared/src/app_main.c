/* app_main.c -- the one startup path of a service process (gp_app_main in
 * gp/app.h): config, logging, the app, tasks, hooks, streams, routes,
 * run, shutdown, in one order for every service.
 *
 * Main thread, before and around the loop. */
#include "gp/app.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/limits.h"
#include "gp/log.h"
#include "gp/streamcfg.h"

/* One process' run: what gp_app_main made and how far it got. */
typedef struct svc_run {
    const gp_service *svc;
    char              prog[48];      /* gridpool-<name> */
    void             *cfg;
    void             *state;
    gp_app           *app;
    bool              hooked;        /* the config was loaded, or check ran: free is due */
    bool              opened;        /* gp_app_new was called: gp_lib_close is due */
    bool              inited;        /* init was called: stop is due */
    bool              stopped;       /* stop ran */
} svc_run;

/* The config loader said exit 0 for --check-config (bare or =value)
 * rather than --help. */
static bool
check_config_asked(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--check-config") == 0 ||
            strncmp(argv[i], "--check-config=", 15) == 0)
            return true;
    return false;
}

static gp_common_cfg *
common_of(const svc_run *r)
{
    return (gp_common_cfg *)(void *)((char *)r->cfg + r->svc->common_at);
}

/* What the option table cannot check: the streams' byte limits' list.
 * GP_CFG_CONTINUE, or 78 (EX_CONFIG) after saying why. */
static int
check_common(const svc_run *r)
{
    const char *spec = common_of(r)->stream_max_bytes_mb;
    int64_t     unused = 0;

    if (gp_stream_bytes_spec(spec, "", &unused) == GP_EOK)
        return GP_CFG_CONTINUE;
    fprintf(stderr, "%s: stream-max-bytes-mb \"%s\": not a list NAME=MB,...,*=MB (MB 1..16777216)\n",
            r->prog, spec);
    return 78;
}

/* Steps 1 and 2: GP_CFG_CONTINUE, or the exit status. */
static int
load(svc_run *r, int argc, char **argv)
{
    const gp_service *svc = r->svc;
    int               code;
    char              err[GP_ERRBUF_LEN];

    r->cfg = calloc(1, svc->cfg_size);
    r->state = calloc(1, svc->state_size > 0 ? svc->state_size : 1);
    if (r->cfg == NULL || r->state == NULL) {
        fprintf(stderr, "%s: out of memory\n", r->prog);
        return 1;
    }
    gp_cfg_load(r->prog, svc->opts, r->cfg, argc, argv, NULL, &code);
    if ((code == GP_CFG_CONTINUE || (code == 0 && check_config_asked(argc, argv))) &&
        gp_app_check_cfg(common_of(r), err, sizeof(err)) != GP_EOK) {
        fprintf(stderr, "%s: %s\n", r->prog, err);
        return 78;                           /* EX_CONFIG */
    }
    if ((code == 0 || code == GP_CFG_CONTINUE) && check_common(r) != GP_CFG_CONTINUE)
        return 78;
    if (code == 0 && svc->check != NULL && check_config_asked(argc, argv)) {
        r->hooked = true;
        return svc->check(r->cfg, r->state);
    }
    if (code != GP_CFG_CONTINUE)
        return code;
    r->hooked = true;
    gp_log_setup(svc->name, common_of(r)->log_level, -1);
    return svc->prepare != NULL ? svc->prepare(r->cfg, r->state) : GP_CFG_CONTINUE;
}

/* The stop hook, once: from the chassis at shutdown, or from start_and_run
 * when the app never ran. */
static void
on_stop(gp_app *app, void *arg)
{
    svc_run *r = arg;

    if (r->stopped)
        return;
    r->stopped = true;
    if (r->svc->stop != NULL)
        r->svc->stop(app, r->state);
}

static gp_err
add_tasks(svc_run *r)
{
    for (const gp_svc_task *t = r->svc->tasks; t != NULL && t->name != NULL; t++) {
        unsigned ms = t->period_ms;

        if (ms == 0)
            ms = *(const unsigned *)(const void *)((const char *)r->cfg + t->period_at);
        if (gp_app_every(r->app, t->name, ms / 1000.0, t->fn, r->state) == NULL)
            return GP_ENOMEM;
    }
    return GP_EOK;
}

/* Steps 3 and 4, on an app that exists. */
static gp_err
start_and_run(svc_run *r)
{
    const gp_service *svc = r->svc;
    gp_err            rc = add_tasks(r);

    gp_app_on_stop(r->app, on_stop, r);
    if (rc == GP_EOK) {
        r->inited = true;
        rc = svc->init != NULL ? svc->init(r->app, r->cfg, r->state) : GP_EOK;
    }
    if (rc == GP_EOK && svc->streams != NULL)
        rc = gp_app_streams(r->app, svc->streams);
    if (rc == GP_EOK)
        rc = gp_app_serve_tables(r->app, r->state, svc->routes);
    if (rc == GP_EOK && svc->start != NULL)
        svc->start(r->app, r->state);
    if (rc == GP_EOK)
        rc = gp_app_run(r->app);
    if (r->inited)
        on_stop(r->app, r);
    return rc;
}

/* --migrate-only: the migration phase, and the end (0 done, 1 not). */
static int
migrate_only(const svc_run *r)
{
    const gp_service *svc = r->svc;

    if (!(svc->needs & GP_NEED_PG)) {
        GP_INFO("migrate_only_done", "service=%s code=OK detail=\"no database\"", svc->name);
        return 0;
    }
    return gp_app_migrate(svc->name, common_of(r), svc->migrations, svc->grants) == GP_EOK ? 0 : 1;
}

int
gp_app_main(const gp_service *svc, int argc, char **argv)
{
    svc_run r = {.svc = svc};
    int     code;
    gp_err  rc;

    snprintf(r.prog, sizeof(r.prog), "gridpool-%s", svc->name);
    code = load(&r, argc, argv);
    if (code == GP_CFG_CONTINUE && common_of(&r)->migrate_only) {
        r.opened = true;
        code = migrate_only(&r);
    } else if (code == GP_CFG_CONTINUE) {
        r.opened = true;
        rc = gp_app_new(svc->name, svc->version, common_of(&r), svc->needs, svc->migrations,
                        svc->grants, &r.app);
        if (rc == GP_EOK)
            rc = start_and_run(&r);
        gp_app_free(r.app);
        code = rc == GP_EOK ? 0 : 1;
    }
    if (r.hooked && svc->free != NULL)
        svc->free(r.state);
    if (r.opened)
        gp_lib_close();
    free(r.state);
    free(r.cfg);
    return code;
}
