/* gp/err.h -- the one error vocabulary of gridpool.
 *
 * Every shared/ API returns gp_err.  The name (gp_err_name) is what goes on
 * the wire in error replies, so every service and gpctl map codes the same
 * way; the text (gp_err_str) is for people.  Any thread may call these.
 * New codes go at the end: the contract's Error.code enum lists the names
 * in this order (the generated MSG_ERROR_CODE_* equal the gp_err values). */
#ifndef GP_ERR_H
#define GP_ERR_H

#define GP_ERR_MAP(X)                                                   \
    X(OK,       "success")                                              \
    X(NOMEM,    "out of memory")                                        \
    X(INVAL,    "invalid argument")                                     \
    X(DECODE,   "malformed message")                                    \
    X(TYPE,     "field has the wrong type")                             \
    X(MISSING,  "required field missing")                               \
    X(RANGE,    "value out of range")                                   \
    X(TOOBIG,   "message or value exceeds a limit")                     \
    X(TIMEOUT,  "operation timed out")                                  \
    X(UNAVAIL,  "dependency unavailable")                               \
    X(NOTFOUND, "no such object")                                       \
    X(EXISTS,   "object already exists")                                \
    X(CONFLICT, "state conflict")                                       \
    X(DENIED,   "not permitted")                                        \
    X(NOROUTE,  "no handler for subject")                               \
    X(PENDING,  "reply will follow")                                    \
    X(INTERNAL, "internal error")                                       \
    X(RATE_LIMITED, "over the tenant's request rate or in-flight limit")

typedef enum gp_err {
#define GP_ERR_ENUM(name, text) GP_E##name,
    GP_ERR_MAP(GP_ERR_ENUM)
#undef GP_ERR_ENUM
    GP_ERR_COUNT
} gp_err;

/* "TIMEOUT": for logs and the wire. */
const char *gp_err_name(gp_err e);
/* "operation timed out": for people. */
const char *gp_err_str(gp_err e);
/* Inverse of gp_err_name; GP_EINTERNAL for an unknown name. */
gp_err gp_err_from_name(const char *name);

#endif
