/* imageref.c -- container image references (gp/imageref.h). */
#include <stdio.h>
#include <string.h>

#include "gp/imageref.h"

static int
lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

int
gp_image_digest_ok(const char *s)
{
    if (strncmp(s, "sha256:", 7) != 0 || strlen(s) != 7 + 64)
        return 0;
    for (s += 7; *s != '\0'; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return 0;
    return 1;
}

/* A registry: name[:port], the name with a '.' (or "localhost"), the
 * port 1-5 digits. */
static int
host_ok(const char *h, size_t n)
{
    const char *colon = memchr(h, ':', n);
    size_t      name = colon ? (size_t)(colon - h) : n;
    int         dot = 0;

    if (name == 0 || h[0] == '.' || h[0] == '-' || h[name - 1] == '.')
        return 0;
    for (size_t i = 0; i < name; i++) {
        char c = h[i];

        if (c == '.')
            dot = 1;
        else if (!(lower_alnum(c) || c == '-' || (c >= 'A' && c <= 'Z')))
            return 0;
    }
    if (colon != NULL) {
        size_t digits = n - name - 1;

        if (digits == 0 || digits > 5)
            return 0;
        for (size_t i = name + 1; i < n; i++)
            if (h[i] < '0' || h[i] > '9')
                return 0;
    }
    return dot || colon != NULL || (name == 9 && strncmp(h, "localhost", 9) == 0);
}

/* One path component: alnum runs joined by '.', '_', '__' or '-'s. */
static int
component_ok(const char *c, size_t n)
{
    size_t i = 0;

    while (i < n) {
        size_t run = 0, sep = 0;

        while (i < n && lower_alnum(c[i]))
            i++, run++;
        if (run == 0)
            return 0;
        if (i == n)
            return 1;
        if (c[i] == '.' || (c[i] == '_' && !(i + 1 < n && c[i + 1] == '_')))
            sep = 1;
        else if (c[i] == '_')
            sep = 2;
        else
            while (i + sep < n && c[i + sep] == '-')
                sep++;
        if (sep == 0)
            return 0;
        i += sep;
        if (i == n)
            return 0;                    /* a separator must be followed by a run */
    }
    return 0;
}

static int
tag_ok(const char *t)
{
    size_t n = strlen(t);

    if (n == 0 || n > 128)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        int  w = (c >= 'A' && c <= 'Z') || lower_alnum(c) || c == '_';

        if (!w && (i == 0 || (c != '.' && c != '-')))
            return 0;
    }
    return 1;
}

static gp_err
fail(char *why, size_t n, const char *what)
{
    snprintf(why, n, "%s", what);
    return GP_EINVAL;
}

gp_err
gp_image_ref_parse(const char *s, gp_image_ref *out, char *why, size_t n)
{
    char        name[GP_IMAGE_REF_MAX + 1];
    const char *at = strchr(s, '@'), *slash, *p, *colon;
    size_t      len = strlen(s);

    memset(out, 0, sizeof(*out));
    if (len == 0)
        return fail(why, n, "is empty");
    if (len > GP_IMAGE_REF_MAX)
        return fail(why, n, "is longer than 255 characters");
    if (strstr(s, "://") != NULL)
        return fail(why, n, "names a transport: give HOST/PATH[:TAG][@sha256:DIGEST]");
    if (at != NULL) {
        if (!gp_image_digest_ok(at + 1))
            return fail(why, n, "has a digest that is not sha256: and 64 lower-case hex digits");
        snprintf(out->digest, sizeof(out->digest), "%s", at + 1);
        len = (size_t)(at - s);
    }
    memcpy(name, s, len);
    name[len] = '\0';
    slash = strchr(name, '/');
    if (slash == NULL || !host_ok(name, (size_t)(slash - name)))
        return fail(why, n, "needs a registry host first (host.domain[:port]/... or "
                            "localhost/...): short names are not guessed");
    snprintf(out->host, sizeof(out->host), "%.*s", (int)(slash - name), name);
    colon = strrchr(slash, ':');
    if (colon != NULL) {
        if (!tag_ok(colon + 1))
            return fail(why, n, "has a tag that is not [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}");
        snprintf(out->tag, sizeof(out->tag), "%s", colon + 1);
        name[colon - name] = '\0';
    }
    for (p = slash + 1;;) {
        const char *e = strchr(p, '/');
        size_t      k = e ? (size_t)(e - p) : strlen(p);

        if (!component_ok(p, k))
            return fail(why, n, "has a path component that is not lower-case letters and "
                                "digits joined by '.', '_', '__' or '-'");
        if (e == NULL)
            break;
        p = e + 1;
    }
    snprintf(out->repo, sizeof(out->repo), "%s", name);
    return GP_EOK;
}
