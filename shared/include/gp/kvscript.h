/* gp/kvscript.h -- Redis Lua scripts by SHA1, surviving a script cache
 * that lost them.
 *
 * Contract:
 *   - gp_kvscript_init(s, lua): caller storage; lua is not copied and must
 *     outlive s (a string literal).  Nothing is sent.
 *   - gp_kvscript_load(s, kv): SCRIPT LOAD once; its reply sets the SHA1.
 *     Optional: a call made before the SHA1 is known is sent as EVAL (and
 *     starts the load itself).  Safe to call again (after a reconnect).
 *   - gp_kvscript_call(s, kv, cb, arg, nkeys, keys, nargs, args, arglens):
 *     EVALSHA sha nkeys keys... args... (args binary safe; arglens may be
 *     NULL for NUL-terminated ones).  Every key the script touches must be
 *     in keys (a cluster routes the call by its first key, and all keys of
 *     one call must share a hash slot).  When Redis answers NOSCRIPT (it
 *     restarted, was flushed, or is a cluster node that never saw the
 *     script) the same call is sent again as EVAL with the text, which
 *     also caches the script there, so cb sees the script's reply as if
 *     nothing had happened; the arguments are copied for that.  cb is
 *     called exactly once, as gp_kv's: the reply (maybe a Redis error
 *     reply other than NOSCRIPT), or reply NULL with TIMEOUT, UNAVAIL, or
 *     TOOBIG (the retry found the in-flight cap).  The return value is
 *     gp_kv_cmd's for the first send: not OK means cb is not called.
 *     s must outlive every call in flight.
 *   - nkeys + nargs <= GP_KVSCRIPT_MAX_ARGS (INVAL past it).
 *
 * Loop thread only, like gp_kv. */
#ifndef GP_KVSCRIPT_H
#define GP_KVSCRIPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp/err.h"
#include "gp/kv.h"

/* The most keys + arguments of one call: the registry's reseed sends
 * 3 x 500 node arguments in one call. */
#define GP_KVSCRIPT_MAX_ARGS 4096

typedef struct gp_kvscript {
    const char *lua;
    char        sha[41];          /* "" until SCRIPT LOAD answered */
    bool        loading;
    uint64_t    noscript;         /* calls re-sent as EVAL after NOSCRIPT */
    uint64_t    evals;            /* calls sent as EVAL (SHA1 not yet known) */
} gp_kvscript;

void   gp_kvscript_init(gp_kvscript *s, const char *lua);
gp_err gp_kvscript_load(gp_kvscript *s, gp_kv *kv);
gp_err gp_kvscript_call(gp_kvscript *s, gp_kv *kv, gp_kv_cb *cb, void *arg, int nkeys,
                        const char *const *keys, int nargs, const char *const *args,
                        const size_t *arglens);

#endif
