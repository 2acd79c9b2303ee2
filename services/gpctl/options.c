/* options.c -- gpctl's global options (-o, --timeout, --env-file,
 * --nats-url, -v: anywhere on the line, until "--") and where the stack
 * is: the NATS address and identity, from the options, an env file or the
 * environment.  Called by main.c before it dispatches; calls help.c for
 * its usage errors. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpctl.h"

/* ---- global options ------------------------------------------------------------ */

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
take_global(int argc, char **argv, int *i, gpctl_globals *g)
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

int
opts_split(int argc, char **argv, gpctl_globals *g, char **rest, int *nrest)
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
        if (r == 0 && *nrest < GPCTL_MAX_ARGS)
            rest[(*nrest)++] = argv[i];
    }
    return GPCTL_OK;
}

static int
apply_globals(gpctl *c, const gpctl_globals *g)
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
resolve_url(gpctl *c, const gpctl_globals *g)
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
    if (access(GPCTL_DEFAULT_ENV_FILE, R_OK) == 0)
        return from_file(c, GPCTL_DEFAULT_ENV_FILE, "env file");
    c->url[0] = '\0';
    return GPCTL_OK;
}

int
opts_apply(gpctl *c, const gpctl_globals *g)
{
    int rc;

    if ((rc = apply_globals(c, g)) != GPCTL_OK || (rc = resolve_url(c, g)) != GPCTL_OK)
        return rc;
    identity_from_env(c);
    return GPCTL_OK;
}
