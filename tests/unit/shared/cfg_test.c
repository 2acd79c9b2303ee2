/* cfg_test.c -- the config table loader: defaults, file, environment and
 * flags in that order; bounds and lengths refused, never clamped; the
 * registry's and the chassis' tables load with defaults (Redis' "CONFIG
 * sanity" idea: every table in the tree is exercised); secrets masked in
 * --check-config, --help and log lines; bare bool flags. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gp/app.h"
#include "gp/cfg.h"
#include "gp/log.h"
#include "test.h"

typedef struct tcfg {
    gp_common_cfg common;
    char          name[8];
    int           level;
    unsigned      count;
    bool          on;
    char          key[32];
} tcfg;

static const gp_cfg_opt opts[] = {
    GP_CFG_TABLE(tcfg, common, gp_common_cfg_opts),
    GP_CFG_STR("name", tcfg, name, "abc", "a short name"),
    GP_CFG_INT("level", tcfg, level, -2, -5, 5, "a signed level"),
    GP_CFG_UINT("count", tcfg, count, 10, 1, 100, "a count"),
    GP_CFG_BOOL("on", tcfg, on, 0, "a switch"),
    GP_CFG_SECRET_STR("key", tcfg, key, "dflt-secret", "a secret with a default"),
    GP_CFG_END
};

static int
load(tcfg *c, int argc, char **argv, int *code)
{
    int argi = 0;

    return gp_cfg_load("t", opts, c, argc, argv, &argi, code) == GP_EOK ? argi : -1;
}

/* Reads a whole temp file back (closes it). */
static char *
slurp(FILE *f)
{
    static char buf[16384];
    size_t      n;

    fflush(f);
    rewind(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void
test_mask(void)
{
    static const char *const cases[][2] = {
        {"nats://alice:s3cret@127.0.0.1:4222", "nats://alice:****@127.0.0.1:4222"},
        {"nats://tok123@h:4222", "nats://****@h:4222"},            /* a token */
        {"tls://tok123@h:4222", "tls://****@h:4222"},
        {"nats://a:p1@h1:4222,nats://b:p2@h2:4222", "nats://a:****@h1:4222,nats://b:****@h2:4222"},
        {"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
        {"postgresql://postgres:pgpw@127.0.0.1:5432/gridpool",
         "postgresql://postgres:****@127.0.0.1:5432/gridpool"},
        {"postgres://u:p%40ss@h/db", "postgres://u:****@h/db"},
        {"postgresql://postgres@127.0.0.1:5432/gridpool",          /* a user alone stays */
         "postgresql://postgres@127.0.0.1:5432/gridpool"},
        {"host=127.0.0.1 port=5432 user=u password=pw dbname=d",
         "host=127.0.0.1 port=5432 user=u password=**** dbname=d"},
        {"host=h password = 'a b\\' c' dbname=d", "host=h password = **** dbname=d"},
        {"postgresql://h/db?sslmode=require&password=pw&user=u",
         "postgresql://h/db?sslmode=require&password=****&user=u"},
        {"PassWord=X1", "PassWord=****"},
        {"url=nats://u:pw@h detail=\"password=x y\"", "url=nats://u:****@h detail=\"password=**** y\""},
        {"passwords are not keys", "passwords are not keys"},
        {"password=", "password="},
        {"", ""},
    };
    char   out[256];
    size_t n;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        n = gp_cfg_mask(cases[i][0], out, sizeof(out));
        T_OKM(strcmp(out, cases[i][1]) == 0 && n == strlen(out), "mask '%s' -> '%s' (got '%s')",
              cases[i][0], cases[i][1], out);
    }
    memset(out, 'Z', sizeof(out));
    n = gp_cfg_mask("nats://a:b@h", out, 5);
    T_OKM(n == 4 && strcmp(out, "nats") == 0 && out[5] == 'Z', "mask is bounded: '%s' %zu", out, n);
}

/* --check-config, --help and log lines never show a secret. */
static void
test_secrets_printed(void)
{
    tcfg        c;
    char        err[256];
    const char *t;
    FILE       *f;
    int         fds[2];
    char        buf[4096];
    ssize_t     n;

    gp_cfg_defaults(opts, &c);
    T_EQ_INT(gp_cfg_set(opts, &c, "nats-password", "hunter2", err, sizeof(err)), GP_EOK);
    T_EQ_INT(gp_cfg_set(opts, &c, "nats-url", "nats://u:urlpw@h:4222", err, sizeof(err)), GP_EOK);
    T_EQ_INT(gp_cfg_set(opts, &c, "pg-conninfo", "postgresql://p:pgpw@h/db", err, sizeof(err)), GP_EOK);
    T_EQ_INT(gp_cfg_set(opts, &c, "key", "k3y", err, sizeof(err)), GP_EOK);
    T_OKM(strcmp(c.common.nats_password, "hunter2") == 0 && strcmp(c.key, "k3y") == 0,
          "the values themselves are kept");
    f = tmpfile();
    gp_cfg_print(opts, &c, f);
    t = slurp(f);
    T_OKM(strstr(t, "hunter2") == NULL && strstr(t, "urlpw") == NULL && strstr(t, "pgpw") == NULL &&
          strstr(t, "k3y") == NULL, "--check-config shows no secret:\n%s", t);
    T_OKM(strstr(t, "\nnats-password=****\n") != NULL && strstr(t, "\nkey=****\n") != NULL,
          "secret options print as ****");
    T_OKM(strstr(t, "\nnats-token=\n") != NULL, "an empty secret prints empty (it is unset)");
    T_OKM(strstr(t, "nats-url=nats://u:****@h:4222\n") != NULL &&
          strstr(t, "pg-conninfo=postgresql://p:****@h/db\n") != NULL,
          "URLs print with the password masked");
    T_OKM(strstr(t, "\nname=abc\n") != NULL && strstr(t, "\nnats-user=\n") != NULL,
          "other options print as they are");
    f = tmpfile();
    gp_cfg_help("t", opts, f);
    t = slurp(f);
    T_OKM(strstr(t, "dflt-secret") == NULL && strstr(t, "GP_KEY, default ****") != NULL,
          "--help masks a secret's default");

    /* a log line that prints a URL or a conninfo */
    T_OK(pipe(fds) == 0);
    gp_log_setup("cfg_test", "info", fds[1]);
    GP_WARN("cfg_mask", "url=%s conninfo=\"%s\"", "nats://u:logpw@h:4222",
            "host=h password=logpw2 dbname=d");
    gp_log_setup(NULL, NULL, 2);
    close(fds[1]);
    n = read(fds[0], buf, sizeof(buf) - 1);
    close(fds[0]);
    buf[n > 0 ? n : 0] = '\0';
    T_OKM(n > 0 && strstr(buf, "event=cfg_mask") != NULL && strstr(buf, "logpw") == NULL &&
          strstr(buf, "url=nats://u:****@h:4222 conninfo=\"host=h password=**** dbname=d\"") != NULL,
          "log lines mask credentials: %s", buf);
}

static void
test_bare_bool(void)
{
    tcfg c;
    int  code, argi;

    {
        char *argv[] = {(char *)"t", (char *)"--on", NULL};
        argi = load(&c, 2, argv, &code);
        T_OKM(argi == 2 && code == GP_CFG_CONTINUE && c.on, "--on alone is true");
    }
    {
        char *argv[] = {(char *)"t", (char *)"--on", (char *)"pos1", NULL};
        argi = load(&c, 3, argv, &code);
        T_OKM(argi == 2 && c.on && strcmp(argv[argi], "pos1") == 0,
              "--on before a positional argument: true, the argument is left (%d)", argi);
    }
    {
        char *argv[] = {(char *)"t", (char *)"--on", (char *)"--count", (char *)"5", NULL};
        argi = load(&c, 4, argv, &code);
        T_OKM(argi == 4 && c.on && c.count == 5, "--on before another flag: true");
    }
    {
        char *argv[] = {(char *)"t", (char *)"--on", (char *)"false", (char *)"pos1", NULL};
        argi = load(&c, 4, argv, &code);
        T_OKM(argi == 3 && !c.on, "--on false still works");
    }
    {
        char *argv[] = {(char *)"t", (char *)"--on", (char *)"yes", NULL};
        argi = load(&c, 3, argv, &code);
        T_OKM(argi == 3 && c.on, "--on yes still works");
    }
    {
        char *argv[] = {(char *)"t", (char *)"--on=false", NULL};
        setenv("GP_ON", "true", 1);
        argi = load(&c, 2, argv, &code);
        unsetenv("GP_ON");
        T_OKM(argi == 2 && !c.on, "--on=false still works (and beats the environment)");
    }
    {
        char *argv[] = {(char *)"t", (char *)"--on=maybe", NULL};
        T_EQ_INT(load(&c, 2, argv, &code), -1);
    }
    {
        char *argv[] = {(char *)"t", (char *)"--print-routes", NULL};
        argi = load(&c, 2, argv, &code);
        T_OKM(argi == 2 && c.common.print_routes, "--print-routes alone (the chassis' table) is true");
    }
    {
        char *argv[] = {(char *)"t", (char *)"--name", NULL};
        T_EQ_INT(load(&c, 2, argv, &code), -1);    /* a string still needs its value */
    }
}

static void
test_subst_service(void)
{
    char out[32];

    T_EQ_INT(gp_cfg_subst_service("gridpool_{service}", "scheduler", out, sizeof(out)), GP_EOK);
    T_OKM(strcmp(out, "gridpool_scheduler") == 0, "got \"%s\"", out);
    T_EQ_INT(gp_cfg_subst_service("/run/{service}/{service}.pw", "ab", out, sizeof(out)), GP_EOK);
    T_OKM(strcmp(out, "/run/ab/ab.pw") == 0, "got \"%s\"", out);
    T_EQ_INT(gp_cfg_subst_service("plain {servic}", "x", out, sizeof(out)), GP_EOK);
    T_OKM(strcmp(out, "plain {servic}") == 0, "got \"%s\"", out);
    T_EQ_INT(gp_cfg_subst_service("", "x", out, sizeof(out)), GP_EOK);
    T_OKM(strcmp(out, "") == 0, "got \"%s\"", out);
    /* 31 bytes fit in 32, 32 do not: refused, never cut */
    T_EQ_INT(gp_cfg_subst_service("{service}", "0123456789012345678901234567890", out, sizeof(out)), GP_EOK);
    T_EQ_INT(gp_cfg_subst_service("{service}x", "0123456789012345678901234567890", out, sizeof(out)), GP_ETOOBIG);
    T_OKM(strcmp(out, "") == 0, "got \"%s\"", out);
}

static void
test_read_secret(void)
{
    char  p[] = "/tmp/gp-secret-XXXXXX", out[8];
    int   fd = mkstemp(p);
    FILE *f = fdopen(fd, "w");

    fputs("abc\nnext\n", f);
    fclose(f);
    T_EQ_INT(gp_cfg_read_secret(p, out, sizeof(out)), GP_EOK);
    T_OKM(strcmp(out, "abc") == 0, "the first line, no line end (%s)", out);
    f = fopen(p, "w");
    fputs("12345678\n", f);
    fclose(f);
    T_EQ_INT(gp_cfg_read_secret(p, out, sizeof(out)), GP_ETOOBIG);
    T_OKM(out[0] == '\0', "a line too long is refused and wiped");
    unlink(p);
    T_EQ_INT(gp_cfg_read_secret(p, out, sizeof(out)), GP_ENOTFOUND);
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

    test_subst_service();
    test_read_secret();
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
    test_mask();
    test_secrets_printed();
    test_bare_bool();
    return T_DONE();
}
