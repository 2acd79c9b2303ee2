/* app_main_test.c -- the one startup path (gp_app_main, gp/app.h): which
 * hooks run, in which order, and the exit status, for --help, a bad
 * option, --check-config, a prepare that ends the run, a failed init,
 * --print-routes, a run that a task stops cleanly or with a failure, and
 * --migrate-only (nothing to do without PostgreSQL; a bad pg-user ends it
 * before any connection).
 * Each case runs in a child process (gp_app_main is a whole process'
 * life); the hooks write one letter each to a pipe.  No server is needed:
 * the bus only tries to connect, in the background, to a closed port. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gp/app.h"
#include "test.h"

typedef struct tcfg {
    unsigned      tick_ms;           /* before common: common_at is not 0 */
    gp_common_cfg common;
    int           check_rc;
    int           prepare_rc;
    bool          init_fail;
    bool          fail_run;          /* the task stops the app with gp_app_fail */
} tcfg;

static const gp_cfg_opt tcfg_opts[] = {
    GP_CFG_TABLE(tcfg, common, gp_common_cfg_opts),
    GP_CFG_UINT("tick-ms", tcfg, tick_ms, 10, 1, 60000, "period of the task"),
    GP_CFG_INT("check-rc", tcfg, check_rc, 0, 0, 255, "what the check hook returns"),
    GP_CFG_INT("prepare-rc", tcfg, prepare_rc, -1, -1, 255, "what prepare returns"),
    GP_CFG_BOOL("init-fail", tcfg, init_fail, 0, "init says NOMEM"),
    GP_CFG_BOOL("fail-run", tcfg, fail_run, 0, "the task stops with gp_app_fail"),
    GP_CFG_END
};

typedef struct tstate {
    const tcfg *cfg;
    gp_app     *app;
} tstate;

static int ev_fd = -1;               /* the child's end of the pipe */

static void
mark(char c)
{
    if (write(ev_fd, &c, 1) != 1)
        _exit(99);
}

static int
on_check(void *cfg, void *state)
{
    (void)state;
    mark('C');
    return ((tcfg *)cfg)->check_rc;
}

static int
on_prepare(void *cfg, void *state)
{
    ((tstate *)state)->cfg = cfg;
    mark('P');
    return ((tcfg *)cfg)->prepare_rc;
}

static gp_err
on_init(gp_app *app, const void *cfg, void *state)
{
    ((tstate *)state)->app = app;
    mark(gp_app_task(app, "tick") != NULL ? 'I' : 'i');
    return ((const tcfg *)cfg)->init_fail ? GP_ENOMEM : GP_EOK;
}

static void
on_start(gp_app *app, void *state)
{
    (void)app;
    (void)state;
    mark('A');
}

static void
on_tick(gp_app *app, void *state)
{
    mark('T');
    if (((tstate *)state)->cfg->fail_run)
        gp_app_fail(app, GP_EDENIED);
    else
        gp_app_stop(app);
}

static void
on_stop(gp_app *app, void *state)
{
    (void)app;
    (void)state;
    mark('S');
}

static void
on_free(void *state)
{
    (void)state;
    mark('F');
}

static const gp_svc_task tasks[] = {
    GP_SVC_TASK("tick", tcfg, tick_ms, on_tick),
    GP_SVC_TASKS_END,
};

static const gp_service svc = {
    .name = "apptest",
    .version = "0.0.1",
    GP_SVC_CFG(tcfg, common, tcfg_opts),
    .state_size = sizeof(tstate),
    .tasks = tasks,
    .check = on_check,
    .prepare = on_prepare,
    .init = on_init,
    .start = on_start,
    .stop = on_stop,
    .free = on_free,
};

/* The same service with a database (its steps: none). */
static gp_service svc_pg;
static const gp_service *cur = &svc;

/* Runs gp_app_main with args in a child: its exit status, the hooks'
 * letters in ev, its stdout in out. */
static int
run(const char *args, char *ev, size_t evlen, char *out, size_t outlen)
{
    char   buf[512], *argv[16], *save = NULL;
    int    argc = 0, evp[2], outp[2], status = 0;
    pid_t  pid;
    size_t n = 0, m = 0;
    ssize_t k;

    snprintf(buf, sizeof(buf), "apptest --nats-url nats://127.0.0.1:1 --http-port -1 %s", args);
    for (char *t = strtok_r(buf, " ", &save); t != NULL && argc < 15;
         t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    argv[argc] = NULL;
    if (pipe(evp) != 0 || pipe(outp) != 0)
        return -1;
    fflush(stdout);
    if ((pid = fork()) == 0) {
        close(evp[0]);
        close(outp[0]);
        ev_fd = evp[1];
        dup2(outp[1], 1);
        if (freopen("/dev/null", "w", stderr) == NULL)
            _exit(98);
        _exit(gp_app_main(cur, argc, argv));
    }
    close(evp[1]);
    close(outp[1]);
    while (n + 1 < evlen && (k = read(evp[0], ev + n, evlen - 1 - n)) > 0)
        n += (size_t)k;
    while (m + 1 < outlen && (k = read(outp[0], out + m, outlen - 1 - m)) > 0)
        m += (size_t)k;
    ev[n] = out[m] = '\0';
    close(evp[0]);
    close(outp[0]);
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void
expect(const char *args, int rc, const char *events)
{
    char ev[64], out[4096];
    int  got = run(args, ev, sizeof(ev), out, sizeof(out));

    T_OKM(got == rc && strcmp(ev, events) == 0,
          "[%s]: exit %d (got %d), hooks \"%s\" (got \"%s\")", args, rc, got, events, ev);
}

static void
test_print_routes(void)
{
    char ev[64], out[4096];
    int  rc = run("--print-routes", ev, sizeof(ev), out, sizeof(out));

    T_OKM(rc == 0 && strcmp(ev, "PIASF") == 0, "--print-routes: exit 0 (got %d), hooks "
          "PIASF (got \"%s\"): start runs, the stop hook once though the loop never ran", rc, ev);
    T_OKM(strstr(out, "route apptest health ") != NULL, "--print-routes prints its routes");
}

int
main(void)
{
    expect("--help", 0, "");
    expect("--bogus", 78, "");
    expect("--check-config", 0, "CF");
    expect("--check-config --check-rc 78", 78, "CF");
    expect("--prepare-rc 3", 3, "PF");
    expect("--prepare-rc 0", 0, "PF");
    expect("--init-fail", 1, "PISF");
    test_print_routes();
    expect("", 0, "PIATSF");
    expect("--fail-run", 1, "PIATSF");
    expect("--migrate-only", 0, "PF");           /* no database: nothing to migrate */
    svc_pg = svc;
    svc_pg.needs = GP_NEED_PG;
    cur = &svc_pg;
    expect("--migrate-only --pg-user Not-A-Role --pg-migrate-conninfo postgresql://127.0.0.1:1/x",
           1, "PF");
    expect("--migrate-only --pg-migrate-conninfo postgresql://127.0.0.1:1/x "
           "--pg-conninfo postgresql://127.0.0.1:1/x", 1, "PF");   /* no login role named */
    return T_DONE();
}
