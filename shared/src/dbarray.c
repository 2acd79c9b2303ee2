/* dbarray.c -- PostgreSQL array literals (see gp/dbarray.h).
 *
 * Every element is quoted: PostgreSQL's array input treats an unquoted
 * element specially when it is empty, is NULL in any case, or holds
 * braces, commas, quotes, backslashes or white space, and quoting always
 * is simpler than deciding when it is needed. */
#include "gp/dbarray.h"

#include <string.h>

gp_err
gp_pgarr_begin(gp_buf *b)
{
    gp_buf_reset(b);
    return gp_buf_puts(b, "{");
}

gp_err
gp_pgarr_add(gp_buf *b, const char *v)
{
    gp_err rc = GP_EOK;

    if (b->n == 0)
        return GP_EINVAL;                   /* no gp_pgarr_begin */
    if (b->p[b->n - 1] != '{')
        rc = gp_buf_puts(b, ",");
    if (v == NULL)
        return rc ? rc : gp_buf_puts(b, "NULL");
    rc = rc ? rc : gp_buf_puts(b, "\"");
    while (rc == GP_EOK && *v != '\0') {
        size_t run = strcspn(v, "\\\"");

        rc = gp_buf_append(b, v, run);
        v += run;
        if (rc == GP_EOK && *v != '\0') {
            char esc[2] = {'\\', *v++};
            rc = gp_buf_append(b, esc, 2);
        }
    }
    return rc ? rc : gp_buf_puts(b, "\"");
}

gp_err
gp_pgarr_end(gp_buf *b)
{
    if (b->n == 0)
        return GP_EINVAL;
    return gp_buf_puts(b, "}");
}
