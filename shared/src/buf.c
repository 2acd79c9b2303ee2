/* buf.c -- growable byte buffer with a hard cap (see gp/buf.h). */
#include "gp/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/limits.h"

void
gp_buf_init(gp_buf *b, size_t max)
{
    b->p = NULL;
    b->n = 0;
    b->cap = 0;
    b->max = max;
}

void
gp_buf_fini(gp_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

void
gp_buf_reset(gp_buf *b)
{
    b->n = 0;
    if (b->p != NULL)
        b->p[0] = '\0';
}

gp_err
gp_buf_reserve(gp_buf *b, size_t more)
{
    size_t max = b->max ? b->max : (size_t)GP_MAX_MSG_BYTES * 4;
    size_t need, cap;
    char  *p;

    if (more > max || b->n > max - more)
        return GP_ETOOBIG;
    need = b->n + more + 1;                 /* +1 keeps room for the NUL */
    if (need <= b->cap)
        return GP_EOK;
    cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    p = realloc(b->p, cap);
    if (p == NULL)
        return GP_ENOMEM;
    b->p = p;
    b->cap = cap;
    return GP_EOK;
}

gp_err
gp_buf_append(gp_buf *b, const void *p, size_t n)
{
    gp_err rc = gp_buf_reserve(b, n);

    if (rc != GP_EOK)
        return rc;
    if (n > 0)
        memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = '\0';
    return GP_EOK;
}

gp_err
gp_buf_puts(gp_buf *b, const char *s)
{
    return gp_buf_append(b, s, strlen(s));
}

gp_err
gp_buf_vprintf(gp_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    int     len;
    gp_err  rc;

    va_copy(ap2, ap);
    len = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (len < 0)
        return GP_EINVAL;
    rc = gp_buf_reserve(b, (size_t)len);
    if (rc != GP_EOK)
        return rc;
    vsnprintf(b->p + b->n, (size_t)len + 1, fmt, ap);
    b->n += (size_t)len;
    return GP_EOK;
}

gp_err
gp_buf_printf(gp_buf *b, const char *fmt, ...)
{
    va_list ap;
    gp_err  rc;

    va_start(ap, fmt);
    rc = gp_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

gp_err
gp_buf_json_str(gp_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    gp_err rc = gp_buf_append(b, "\"", 1);

    for (size_t i = 0; i < n && rc == GP_EOK; i++) {
        unsigned char c = (unsigned char)s[i];
        char          esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};

        if (c == '"' || c == '\\')
            rc = gp_buf_append(b, (const char[]){'\\', (char)c}, 2);
        else if (c == '\n')
            rc = gp_buf_append(b, "\\n", 2);
        else if (c < 0x20)
            rc = gp_buf_append(b, esc, sizeof(esc));
        else
            rc = gp_buf_append(b, &s[i], 1);
    }
    if (rc == GP_EOK)
        rc = gp_buf_append(b, "\"", 1);
    return rc;
}
