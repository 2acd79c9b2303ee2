/* cfg.c -- table-driven configuration (see gp/cfg.h). */
#include "gp/cfg.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "gp/limits.h"

typedef void opt_visit(const gp_cfg_opt *o, void *slot, void *arg);

static void
walk(const gp_cfg_opt *opts, void *base, opt_visit *fn, void *arg)
{
    for (const gp_cfg_opt *o = opts; o->type != GP_CFG_T_END; o++) {
        void *slot = base != NULL ? (char *)base + o->offset : NULL;

        if (o->type == GP_CFG_T_TABLE)
            walk(o->sub, slot, fn, arg);
        else
            fn(o, slot, arg);
    }
}

static const gp_cfg_opt *
find(const gp_cfg_opt *opts, void *base, const char *name, void **slot)
{
    for (const gp_cfg_opt *o = opts; o->type != GP_CFG_T_END; o++) {
        if (o->type == GP_CFG_T_TABLE) {
            const gp_cfg_opt *r = find(o->sub, (char *)base + o->offset, name, slot);
            if (r != NULL)
                return r;
        } else if (strcmp(o->name, name) == 0) {
            *slot = (char *)base + o->offset;
            return o;
        }
    }
    return NULL;
}

static void
set_default(const gp_cfg_opt *o, void *slot, void *arg)
{
    (void)arg;
    switch (o->type) {
    case GP_CFG_T_STR:
        memset(slot, 0, o->size);
        if (o->def_str != NULL)
            snprintf(slot, o->size, "%s", o->def_str);
        break;
    case GP_CFG_T_INT:  *(int *)slot = (int)o->def_num; break;
    case GP_CFG_T_UINT: *(unsigned *)slot = (unsigned)o->def_num; break;
    case GP_CFG_T_BOOL: *(bool *)slot = o->def_num != 0; break;
    default: break;
    }
}

void
gp_cfg_defaults(const gp_cfg_opt *opts, void *cfg)
{
    walk(opts, cfg, set_default, NULL);
}

static gp_err
parse_bool(const char *v, bool *out)
{
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on"))
        *out = true;
    else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off"))
        *out = false;
    else
        return GP_EINVAL;
    return GP_EOK;
}

static gp_err
set_value(const gp_cfg_opt *o, void *slot, const char *v, char *errbuf, size_t errlen)
{
    long long n;
    char     *end;
    bool      b;

    switch (o->type) {
    case GP_CFG_T_STR:
        if (strlen(v) >= o->size) {
            snprintf(errbuf, errlen, "%s: value longer than %zu bytes", o->name, o->size - 1);
            return GP_ERANGE;
        }
        memcpy(slot, v, strlen(v) + 1);
        return GP_EOK;
    case GP_CFG_T_BOOL:
        if (parse_bool(v, &b) != GP_EOK) {
            snprintf(errbuf, errlen, "%s: expected true or false, got '%s'", o->name, v);
            return GP_EINVAL;
        }
        *(bool *)slot = b;
        return GP_EOK;
    default:
        break;
    }
    errno = 0;
    n = strtoll(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0') {
        snprintf(errbuf, errlen, "%s: expected an integer, got '%s'", o->name, v);
        return GP_EINVAL;
    }
    if (n < o->min || n > o->max) {
        snprintf(errbuf, errlen, "%s: %lld is outside [%lld, %lld]", o->name, n, o->min, o->max);
        return GP_ERANGE;
    }
    if (o->type == GP_CFG_T_INT)
        *(int *)slot = (int)n;
    else
        *(unsigned *)slot = (unsigned)n;
    return GP_EOK;
}

gp_err
gp_cfg_set(const gp_cfg_opt *opts, void *cfg, const char *name, const char *value, char *errbuf,
           size_t errlen)
{
    void             *slot = NULL;
    const gp_cfg_opt *o = find(opts, cfg, name, &slot);

    if (o == NULL) {
        snprintf(errbuf, errlen, "unknown option '%s'", name);
        return GP_ENOTFOUND;
    }
    return set_value(o, slot, value, errbuf, errlen);
}

void
gp_cfg_env_name(const char *name, char *out, size_t outlen)
{
    size_t i = 0;
    int    n = snprintf(out, outlen, "GP_");

    for (i = (size_t)n; *name != '\0' && i + 1 < outlen; name++, i++)
        out[i] = *name == '-' ? '_' : (char)toupper((unsigned char)*name);
    out[i] = '\0';
}

/* Env-file keys are GP_NAME; map back to the option name. */
static const gp_cfg_opt *
find_env(const gp_cfg_opt *opts, void *base, const char *key, void **slot)
{
    char env[128];

    for (const gp_cfg_opt *o = opts; o->type != GP_CFG_T_END; o++) {
        if (o->type == GP_CFG_T_TABLE) {
            const gp_cfg_opt *r = find_env(o->sub, (char *)base + o->offset, key, slot);
            if (r != NULL)
                return r;
            continue;
        }
        gp_cfg_env_name(o->name, env, sizeof(env));
        if (strcmp(env, key) == 0) {
            *slot = (char *)base + o->offset;
            return o;
        }
    }
    return NULL;
}

static char *
trim(char *s)
{
    char *e;

    while (isspace((unsigned char)*s))
        s++;
    e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    if (e - s >= 2 && (*s == '"' || *s == '\'') && e[-1] == *s) {
        e[-1] = '\0';
        s++;
    }
    return s;
}

/* KEY=VALUE lines; '#' comments; keys the program does not know are
 * skipped, since one env file serves every service. */
gp_err
gp_cfg_read_file(const gp_cfg_opt *opts, void *cfg, const char *path, char *errbuf, size_t errlen)
{
    FILE  *f = fopen(path, "r");
    char   line[1024];
    int    lineno = 0;
    gp_err rc = GP_EOK;

    if (f == NULL) {
        snprintf(errbuf, errlen, "%s: %s", path, strerror(errno));
        return GP_ENOTFOUND;
    }
    while (rc == GP_EOK && fgets(line, sizeof(line), f) != NULL) {
        char             *eq, *key;
        void             *slot = NULL;
        const gp_cfg_opt *o;

        lineno++;
        key = trim(line);
        if (*key == '\0' || *key == '#')
            continue;
        eq = strchr(key, '=');
        if (eq == NULL) {
            snprintf(errbuf, errlen, "%s:%d: expected KEY=VALUE", path, lineno);
            rc = GP_EINVAL;
            break;
        }
        *eq = '\0';
        key = trim(key);
        if (strncmp(key, "export ", 7) == 0)
            key = trim(key + 7);
        o = find_env(opts, cfg, key, &slot);
        if (o != NULL)
            rc = set_value(o, slot, trim(eq + 1), errbuf, errlen);
    }
    fclose(f);
    return rc;
}

struct env_pass {
    gp_err  rc;
    char   *errbuf;
    size_t  errlen;
};

static void
apply_env(const gp_cfg_opt *o, void *slot, void *arg)
{
    struct env_pass *p = arg;
    char             env[128];
    const char      *v;

    if (p->rc != GP_EOK)
        return;
    gp_cfg_env_name(o->name, env, sizeof(env));
    v = getenv(env);
    if (v != NULL)
        p->rc = set_value(o, slot, v, p->errbuf, p->errlen);
}

static void
print_one(const gp_cfg_opt *o, void *slot, void *arg)
{
    FILE *out = arg;

    switch (o->type) {
    case GP_CFG_T_STR:  fprintf(out, "%s=%s\n", o->name, (const char *)slot); break;
    case GP_CFG_T_INT:  fprintf(out, "%s=%d\n", o->name, *(int *)slot); break;
    case GP_CFG_T_UINT: fprintf(out, "%s=%u\n", o->name, *(unsigned *)slot); break;
    case GP_CFG_T_BOOL: fprintf(out, "%s=%s\n", o->name, *(bool *)slot ? "true" : "false"); break;
    default: break;
    }
}

void
gp_cfg_print(const gp_cfg_opt *opts, const void *cfg, FILE *out)
{
    walk(opts, (void *)cfg, print_one, out);
}

static void
help_one(const gp_cfg_opt *o, void *slot, void *arg)
{
    FILE *out = arg;
    char  env[128];
    char  def[64];

    (void)slot;
    gp_cfg_env_name(o->name, env, sizeof(env));
    if (o->type == GP_CFG_T_STR)
        snprintf(def, sizeof(def), "%s", o->def_str ? o->def_str : "");
    else if (o->type == GP_CFG_T_BOOL)
        snprintf(def, sizeof(def), "%s", o->def_num ? "true" : "false");
    else
        snprintf(def, sizeof(def), "%lld [%lld..%lld]", o->def_num, o->min, o->max);
    fprintf(out, "  --%-22s %s\n  %-24s   env %s, default %s\n", o->name, o->doc, "", env, def);
}

void
gp_cfg_help(const char *prog, const gp_cfg_opt *opts, FILE *out)
{
    fprintf(out, "usage: %s [options]\n\n", prog);
    walk(opts, NULL, help_one, out);
    fprintf(out, "  --%-22s %s\n", "config FILE", "read KEY=VALUE settings (env GP_CONFIG)");
    fprintf(out, "  --%-22s %s\n", "check-config", "print the effective configuration and exit");
    fprintf(out, "  --%-22s %s\n", "help", "this text");
}

/* Finds --config / GP_CONFIG before anything else so the file sits below
 * the environment and the flags. */
static const char *
config_path(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            return argv[i + 1];
        if (strncmp(argv[i], "--config=", 9) == 0)
            return argv[i] + 9;
    }
    return getenv("GP_CONFIG");
}

static gp_err
apply_flags(const char *prog, const gp_cfg_opt *opts, void *cfg, int argc, char **argv,
            int *argi, bool *check, bool *help, char *errbuf, size_t errlen)
{
    int i;

    for (i = 1; i < argc; i++) {
        char        name[128];
        const char *a = argv[i], *v, *eq;
        gp_err      rc;

        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strncmp(a, "--", 2) != 0)
            break;
        if (!strcmp(a, "--help")) { *help = true; continue; }
        if (!strcmp(a, "--check-config")) { *check = true; continue; }
        eq = strchr(a, '=');
        snprintf(name, sizeof(name), "%.*s", (int)(eq ? eq - a - 2 : (long)strlen(a) - 2), a + 2);
        if (eq != NULL) {
            v = eq + 1;
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            snprintf(errbuf, errlen, "%s: option --%s needs a value", prog, name);
            return GP_EINVAL;
        }
        if (strcmp(name, "config") == 0)
            continue;
        rc = gp_cfg_set(opts, cfg, name, v, errbuf, errlen);
        if (rc != GP_EOK)
            return rc;
    }
    if (argi != NULL) {
        *argi = i;
    } else if (i < argc) {
        snprintf(errbuf, errlen, "%s: unexpected argument '%s'", prog, argv[i]);
        return GP_EINVAL;
    }
    return GP_EOK;
}

gp_err
gp_cfg_load(const char *prog, const gp_cfg_opt *opts, void *cfg, int argc, char **argv, int *argi,
            int *exit_code)
{
    char            err[GP_ERRBUF_LEN] = "";
    const char     *path = config_path(argc, argv);
    bool            check = false, help = false;
    struct env_pass env = {GP_EOK, err, sizeof(err)};
    gp_err          rc = GP_EOK;

    gp_cfg_defaults(opts, cfg);
    if (path != NULL)
        rc = gp_cfg_read_file(opts, cfg, path, err, sizeof(err));
    if (rc == GP_EOK) {
        walk(opts, cfg, apply_env, &env);
        rc = env.rc;
    }
    if (rc == GP_EOK)
        rc = apply_flags(prog, opts, cfg, argc, argv, argi, &check, &help, err, sizeof(err));
    if (help) {
        gp_cfg_help(prog, opts, stdout);
        *exit_code = 0;
        return GP_EOK;
    }
    if (rc != GP_EOK) {
        fprintf(stderr, "%s: configuration error: %s\n", prog, err);
        *exit_code = 78;
        return GP_EINVAL;
    }
    if (check) {
        gp_cfg_print(opts, cfg, stdout);
        printf("configuration OK\n");
        *exit_code = 0;
        return GP_EOK;
    }
    *exit_code = GP_CFG_CONTINUE;
    return GP_EOK;
}
