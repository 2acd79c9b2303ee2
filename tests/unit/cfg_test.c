/* cfg_test.c -- the config table loader: defaults, file, environment and
 * flags in that order; bounds and lengths refused, never clamped; the
 * registry's and the chassis' tables load with defaults (Redis' "CONFIG
 * sanity" idea: every table in the tree is exercised). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gp/app.h"
#include "gp/cfg.h"
#include "test.h"

typedef struct tcfg {
    gp_common_cfg common;
    char          name[8];
    int           level;
    unsigned      count;
    bool          on;
} tcfg;

static const gp_cfg_opt opts[] = {
    GP_CFG_TABLE(tcfg, common, gp_common_cfg_opts),
    GP_CFG_STR("name", tcfg, name, "abc", "a short name"),
    GP_CFG_INT("level", tcfg, level, -2, -5, 5, "a signed level"),
    GP_CFG_UINT("count", tcfg, count, 10, 1, 100, "a count"),
    GP_CFG_BOOL("on", tcfg, on, 0, "a switch"),
    GP_CFG_END
};

static int
load(tcfg *c, int argc, char **argv, int *code)
{
    int argi = 0;

    return gp_cfg_load("t", opts, c, argc, argv, &argi, code) == GP_EOK ? argi : -1;
}

int
main(void)
{
    tcfg  c;
    int   code;
    char  err[256];
    char  path[] = "/tmp/gp-cfg-XXXXXX";
    int   fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");

    gp_cfg_defaults(opts, &c);
    T_OK(strcmp(c.name, "abc") == 0 && c.level == -2 && c.count == 10 && !c.on);
    T_OK(c.common.redis_port == 6379 && strcmp(c.common.nats_url, "nats://127.0.0.1:4222") == 0);

    T_EQ_INT(gp_cfg_set(opts, &c, "count", "0", err, sizeof(err)), GP_ERANGE);
    T_OKM(strstr(err, "outside") != NULL, "range error says why: %s", err);
    T_EQ_INT(gp_cfg_set(opts, &c, "count", "12x", err, sizeof(err)), GP_EINVAL);
    T_EQ_INT(gp_cfg_set(opts, &c, "name", "toolongname", err, sizeof(err)), GP_ERANGE);
    T_EQ_INT(gp_cfg_set(opts, &c, "on", "maybe", err, sizeof(err)), GP_EINVAL);
    T_EQ_INT(gp_cfg_set(opts, &c, "nope", "1", err, sizeof(err)), GP_ENOTFOUND);
    T_EQ_INT(gp_cfg_set(opts, &c, "redis-port", "70000", err, sizeof(err)), GP_ERANGE);
    T_EQ_INT(gp_cfg_set(opts, &c, "level", "-5", err, sizeof(err)), GP_EOK);
    T_EQ_INT(c.level, -5);

    /* file < env < flags */
    fprintf(f, "# comment\nGP_NAME=file\nGP_COUNT=20\nexport GP_LEVEL='3'\nGP_UNKNOWN_KEY=x\nGP_REDIS_PORT=7000\n");
    fclose(f);
    setenv("GP_COUNT", "30", 1);
    {
        char *argv[] = {(char *)"t", (char *)"--config", path, (char *)"--name=flag", (char *)"--on", (char *)"true", (char *)"pos1", NULL};
        int   argi = load(&c, 7, argv, &code);

        T_EQ_INT(code, GP_CFG_CONTINUE);
        T_OK(strcmp(c.name, "flag") == 0);         /* flag beats file */
        T_EQ_INT(c.count, 30);                     /* env beats file */
        T_EQ_INT(c.level, 3);                      /* file beats default, quotes stripped */
        T_EQ_INT(c.common.redis_port, 7000);       /* nested table from the file */
        T_OK(c.on);
        T_OKM(argi == 6 && strcmp(argv[argi], "pos1") == 0, "positional arguments left: %d", argi);
    }
    unsetenv("GP_COUNT");
    {
        char *argv[] = {(char *)"t", (char *)"--count", (char *)"1000", NULL};

        T_EQ_INT(load(&c, 3, argv, &code), -1);
        T_EQ_INT(code, 78);                        /* EX_CONFIG */
    }
    {
        char *argv[] = {(char *)"t", (char *)"--count", NULL};

        T_EQ_INT(load(&c, 2, argv, &code), -1);
    }
    {
        char *argv[] = {(char *)"t", (char *)"--check-config", NULL};
        T_OK(load(&c, 2, argv, &code) >= 0 && code == 0);
    }
    unlink(path);
    {
        char *argv[] = {(char *)"t", (char *)"--config", path, NULL};

        T_EQ_INT(load(&c, 3, argv, &code), -1);    /* missing file is an error */
    }
    {
        char out[64];

        gp_cfg_env_name("pg-conninfo", out, sizeof(out));
        T_OK(strcmp(out, "GP_PG_CONNINFO") == 0);
    }
    return T_DONE();
}
