/* id.c -- the id rule (see gp/id.h). */
#include "gp/id.h"

#include <string.h>

#include "gp/limits.h"

static bool
id_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}

bool
gp_id_okn(const char *id, size_t n)
{
    if (id == NULL || n == 0 || n > GP_MAX_ID)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!id_char((unsigned char)id[i]))
            return false;
    return true;
}

bool
gp_id_ok(const char *id)
{
    return id != NULL && gp_id_okn(id, strnlen(id, GP_MAX_ID + 1));
}
