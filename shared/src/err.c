/* err.c -- names and texts of gp_err, generated from the one X-macro. */
#include "gp/err.h"

#include <string.h>

static const char *const err_name[] = {
#define GP_ERR_NAME(name, text) [GP_E##name] = #name,
    GP_ERR_MAP(GP_ERR_NAME)
#undef GP_ERR_NAME
};

static const char *const err_text[] = {
#define GP_ERR_TEXT(name, text) [GP_E##name] = text,
    GP_ERR_MAP(GP_ERR_TEXT)
#undef GP_ERR_TEXT
};

_Static_assert(sizeof(err_name) / sizeof(err_name[0]) == GP_ERR_COUNT, "err_name out of sync");
_Static_assert(sizeof(err_text) / sizeof(err_text[0]) == GP_ERR_COUNT, "err_text out of sync");

const char *
gp_err_name(gp_err e)
{
    return (unsigned)e < GP_ERR_COUNT ? err_name[e] : "UNKNOWN";
}

const char *
gp_err_str(gp_err e)
{
    return (unsigned)e < GP_ERR_COUNT ? err_text[e] : "unknown error";
}

gp_err
gp_err_from_name(const char *name)
{
    for (int i = 0; i < GP_ERR_COUNT; i++)
        if (strcmp(err_name[i], name) == 0)
            return (gp_err)i;
    return GP_EINTERNAL;
}
