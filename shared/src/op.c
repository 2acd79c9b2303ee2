/* op.c -- subjects of contract operations (see gp/op.h). */
#include "gp/op.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gp/id.h"
#include "gp/limits.h"
#include "msg_gen.h"

static gp_err
fill(const gp_op *op, char *buf, size_t n, const char *const *args, bool wild)
{
    const char *p = op->address;
    size_t      len = 0;
    int         k = 0;

    for (int i = 0; i < op->nparams; i++)
        if (!(wild && args[i] == NULL) && !gp_id_ok(args[i]))
            return GP_EINVAL;
    while (*p != '\0') {
        const char *piece = p;
        size_t      plen;

        if (*p == '{') {
            const char *end = strchr(p, '}');

            if (end == NULL || k >= op->nparams)
                return GP_EINVAL;               /* not a generated address */
            piece = args[k] != NULL ? args[k] : "*";
            k++;
            plen = strlen(piece);
            p = end + 1;
        } else {
            const char *brace = strchr(p, '{');

            plen = brace != NULL ? (size_t)(brace - p) : strlen(p);
            p += plen;
        }
        if (len + plen + 1 > n)
            return GP_ETOOBIG;
        memcpy(buf + len, piece, plen);
        len += plen;
    }
    if (n == 0)
        return GP_ETOOBIG;
    buf[len] = '\0';
    return GP_EOK;
}

gp_err
gp_op_subject(const gp_op *op, char *buf, size_t n, const char *const *args)
{
    return fill(op, buf, n, args, false);
}

gp_err
gp_op_pattern(const gp_op *op, char *buf, size_t n, const char *const *args)
{
    return fill(op, buf, n, args, true);
}

gp_err
gp_op_inbox_prefix(const gp_op *inbox, char *buf, size_t n, const char *const *args)
{
    const char *all[GP_MAX_TOKENS] = {0};
    size_t      len;
    gp_err      rc;

    if (inbox->nparams < 2 || inbox->nparams > GP_MAX_TOKENS)
        return GP_EINVAL;
    for (int i = 0; i < inbox->nparams - 2; i++)
        all[i] = args[i];                  /* the last two stay wildcards */
    rc = gp_op_pattern(inbox, buf, n, all);
    len = rc == GP_EOK ? strlen(buf) : 0;
    if (rc == GP_EOK && (len < 4 || strcmp(buf + len - 4, ".*.*") != 0))
        rc = GP_EINVAL;                    /* not "<prefix>.<nuid>.<n>" */
    if (rc == GP_EOK)
        buf[len - 4] = '\0';
    return rc;
}

gp_err
gp_op_subjectf(const gp_op *op, char *buf, size_t n, ...)
{
    const char *args[GP_MAX_TOKENS];
    va_list     ap;

    va_start(ap, n);
    for (int i = 0; i < op->nparams && i < GP_MAX_TOKENS; i++)
        args[i] = va_arg(ap, const char *);
    va_end(ap);
    return gp_op_subject(op, buf, n, args);
}

int
gp_op_param_index(const gp_op *op, const char *name)
{
    for (int i = 0; i < op->nparams; i++)
        if (strcmp(op->params[i], name) == 0)
            return i;
    return -1;
}

/* pat (op's pattern, maybe with parameters filled: ids hold no dot, so the
 * tokens stay where they were) cut at parameter `from`, ended with ">". */
static gp_err
cut_at(const gp_op *op, const char *pat, const char *from, char *buf, size_t n)
{
    int         i = gp_op_param_index(op, from);
    const char *p = pat;
    size_t      len;

    if (i < 0)
        return GP_EINVAL;
    for (int t = 0; t < op->param_tok[i]; t++)
        if ((p = strchr(p, '.')) == NULL)
            return GP_EINVAL;
        else
            p++;
    len = (size_t)(p - pat);
    if (len + 2 > n)
        return GP_ETOOBIG;
    memmove(buf, pat, len);
    memcpy(buf + len, ">", 2);
    return GP_EOK;
}

gp_err
gp_op_stream_subject(const gp_op *op, const char *from, char *buf, size_t n)
{
    return cut_at(op, op->pattern, from, buf, n);
}

gp_err
gp_op_stream_filter(const gp_op *op, const char *from, const char *const *args, char *buf,
                    size_t n)
{
    char   pat[GP_MAX_SUBJECT + 1];
    gp_err rc = gp_op_pattern(op, pat, sizeof(pat), args);

    return rc != GP_EOK ? rc : cut_at(op, pat, from, buf, n);
}

bool
gp_op_matches(const gp_op *op, const char *subject)
{
    const char *a = op->pattern, *b = subject;

    for (;;) {
        size_t la = strcspn(a, "."), lb = strcspn(b, ".");

        if (!(la == 1 && a[0] == '*') && (la != lb || memcmp(a, b, la) != 0))
            return false;
        if (la == 1 && a[0] == '*' && lb == 0)
            return false;
        a += la;
        b += lb;
        if (*a == '\0' || *b == '\0')
            return *a == *b;
        a++;
        b++;
    }
}

bool
gp_op_served_by(const gp_op *op, const char *service)
{
    for (const char *const *s = op->services; s != NULL && *s != NULL; s++)
        if (strcmp(*s, service) == 0)
            return true;
    return false;
}

const gp_op *
gp_op_find(const char *id)
{
    for (const gp_op *const *o = gp_ops; *o != NULL; o++)
        if (strcmp((*o)->id, id) == 0)
            return *o;
    return NULL;
}
