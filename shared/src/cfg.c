/* cfg.c -- table-driven configuration (see gp/cfg.h). */
#include "gp/cfg.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gp/limits.h"

/* The longest string value --check-config and --help show (longer ones
 * are cut: only shown, never stored so). */
#define GP_CFG_SHOWN_MAX 1024

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

/* Output of gp_cfg_mask: a byte at a time, always NUL-terminated. */
typedef struct mask_out {
    char   *p;
    size_t  n, cap;
} mask_out;

static void
put(mask_out *m, const char *s, size_t n)
{
    for (size_t i = 0; i < n && m->n + 1 < m->cap; i++)
        m->p[m->n++] = s[i];
    if (m->cap > 0)
        m->p[m->n] = '\0';
}

static const char MASK[] = "****";

/* At in[i] == ':' of "://": masks the userinfo of the authority after it,
 * if any.  Returns the index to go on from. */
static size_t
mask_userinfo(const char *in, size_t i, size_t scheme_at, mask_out *m)
{
    size_t a = i + 3, at = 0, colon = 0, j;
    bool   token;

    put(m, in + i, 3);
    for (j = a; in[j] != '\0' && strchr("/?# \t\r\n\"',", in[j]) == NULL; j++) {
        if (in[j] == '@')
            at = j;                 /* the last '@' ends the userinfo */
        else if (in[j] == ':' && colon == 0)
            colon = j;
    }
    if (at == 0)
        return a;
    if (colon != 0 && colon < at) {
        put(m, in + a, colon + 1 - a);          /* user: */
        put(m, MASK, 4);
    } else {
        token = false;
        for (const char *const *s = (const char *const[]){"nats", "tls", "ws", "wss", NULL}; *s; s++)
            if (i - scheme_at == strlen(*s) && strncasecmp(in + scheme_at, *s, i - scheme_at) == 0)
                token = true;
        if (token)
            put(m, MASK, 4);
        else
            put(m, in + a, at - a);             /* a user name alone is no secret */
    }
    put(m, "@", 1);
    return at + 1;
}

/* At in[i], "password" (any case) was matched: if an '=' follows, masks
 * the value.  Returns the index to go on from. */
static size_t
mask_keyword(const char *in, size_t i, mask_out *m)
{
    size_t j = i + 8, v;
    bool   query = i > 0 && (in[i - 1] == '?' || in[i - 1] == '&');

    while (in[j] == ' ' || in[j] == '\t')
        j++;
    if (in[j] != '=') {
        put(m, in + i, 8);
        return i + 8;
    }
    j++;
    while (!query && (in[j] == ' ' || in[j] == '\t'))
        j++;
    put(m, in + i, j - i);                      /* password = */
    v = j;
    if (in[j] == '\'') {                        /* 'quoted \' value' */
        for (j++; in[j] != '\0' && in[j] != '\''; j++)
            if (in[j] == '\\' && in[j + 1] != '\0')
                j++;
        if (in[j] == '\'')
            j++;
    } else {
        while (in[j] != '\0' && !isspace((unsigned char)in[j]) && in[j] != '"' &&
               !(query && (in[j] == '&' || in[j] == '#')))
            j++;
    }
    if (j > v)
        put(m, MASK, 4);
    return j;
}

size_t
gp_cfg_mask(const char *in, char *out, size_t outlen)
{
    mask_out m = {out, 0, outlen};
    size_t   i = 0, scheme_at = 0, start = 0;

    if (outlen == 0)
        return 0;
    out[0] = '\0';
    while (in[i] != '\0') {
        if (in[i] == ':' && in[i + 1] == '/' && in[i + 2] == '/' && scheme_at < i) {
            put(&m, in + start, i - start);
            start = i = mask_userinfo(in, i, scheme_at, &m);
            scheme_at = i;
            continue;
        }
        if ((in[i] == 'p' || in[i] == 'P') && strncasecmp(in + i, "password", 8) == 0) {
            put(&m, in + start, i - start);
            start = i = mask_keyword(in, i, &m);
            scheme_at = i;
            continue;
        }
        if (!isalnum((unsigned char)in[i]) && in[i] != '+' && in[i] != '-' && in[i] != '.')
            scheme_at = i + 1;                  /* where a URL scheme would start */
        i++;
    }
    put(&m, in + start, i - start);
    return m.n;
}

/* A string option's value as it may be shown. */
static const char *
shown(const gp_cfg_opt *o, const char *v, char *buf, size_t len)
{
    if (v == NULL || *v == '\0')
        return "";
    if (o->flags & GP_CFG_F_SECRET)
        return MASK;
    gp_cfg_mask(v, buf, len);
    return buf;
}

static void
print_one(const gp_cfg_opt *o, void *slot, void *arg)
{
    FILE *out = arg;
    char  buf[GP_CFG_SHOWN_MAX];

    switch (o->type) {
    case GP_CFG_T_STR:
        fprintf(out, "%s=%s\n", o->name, shown(o, slot, buf, sizeof(buf)));
        break;
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
    char  def[GP_CFG_SHOWN_MAX];

    (void)slot;
    gp_cfg_env_name(o->name, env, sizeof(env));
    if (o->type == GP_CFG_T_STR) {
        const char *d = shown(o, o->def_str, def, sizeof(def));
        if (d != def)
            snprintf(def, sizeof(def), "%s", d);
    } else if (o->type == GP_CFG_T_BOOL) {
        snprintf(def, sizeof(def), "%s", o->def_num ? "true" : "false");
    } else {
        snprintf(def, sizeof(def), "%lld [%lld..%lld]", o->def_num, o->min, o->max);
    }
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

static bool
is_bool(const gp_cfg_opt *opts, void *cfg, const char *name)
{
    void             *slot = NULL;
    const gp_cfg_opt *o = find(opts, cfg, name, &slot);

    return o != NULL && o->type == GP_CFG_T_BOOL;
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
        } else if (is_bool(opts, cfg, name)) {
            bool b;
            /* a bare bool flag is true; a bool word after it is its value */
            v = i + 1 < argc && parse_bool(argv[i + 1], &b) == GP_EOK ? argv[++i] : "true";
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
        char shown[GP_CFG_SHOWN_MAX];

        /* it may be a secret given to a bare bool flag by mistake */
        gp_cfg_mask(argv[i], shown, sizeof(shown));
        snprintf(errbuf, errlen, "%s: unexpected argument '%.200s'", prog, shown);
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

gp_err
gp_cfg_subst_service(const char *in, const char *service, char *out, size_t outlen)
{
    static const char tag[] = "{service}";
    size_t            n = 0, sl = strlen(service);

    if (outlen == 0)
        return GP_ETOOBIG;
    while (*in != '\0') {
        const char *from = in;
        size_t      len = 1;

        if (strncmp(in, tag, sizeof(tag) - 1) == 0) {
            from = service;
            len = sl;
            in += sizeof(tag) - 1;
        } else {
            in++;
        }
        if (n + len >= outlen) {
            out[0] = '\0';
            return GP_ETOOBIG;
        }
        memcpy(out + n, from, len);
        n += len;
    }
    out[n] = '\0';
    return GP_EOK;
}

gp_err
gp_cfg_read_secret(const char *path, char *out, size_t outlen)
{
    FILE  *f;
    size_t k;

    if (outlen == 0)
        return GP_ETOOBIG;
    out[0] = '\0';
    f = fopen(path, "re");
    if (f == NULL)
        return GP_ENOTFOUND;
    if (fgets(out, (int)outlen, f) == NULL)
        out[0] = '\0';
    fclose(f);
    k = strcspn(out, "\r\n");
    if (k == outlen - 1 && out[k] == '\0') {  /* no line end within outlen: too long */
        explicit_bzero(out, outlen);
        return GP_ETOOBIG;
    }
    out[k] = '\0';
    return GP_EOK;
}
