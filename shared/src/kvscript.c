/* kvscript.c -- EVALSHA with a transparent EVAL fallback (gp/kvscript.h).
 *
 * A call is one allocation: the command's argv, lengths and bytes, so a
 * NOSCRIPT reply can be answered by sending the same call as EVAL. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/kvscript.h"

typedef struct script_call {
    gp_kvscript *s;
    gp_kv       *kv;
    gp_kv_cb    *cb;
    void        *arg;
    int          argc;
    bool         retried;
    const char **argv;            /* into the block below */
    size_t      *argl;
} script_call;

void
gp_kvscript_init(gp_kvscript *s, const char *lua)
{
    memset(s, 0, sizeof(*s));
    s->lua = lua;
}

static void
loaded(void *arg, const redisReply *rep, gp_err err)
{
    gp_kvscript *s = arg;

    s->loading = false;
    if (err == GP_EOK && rep->type == REDIS_REPLY_STRING && rep->len == 40)
        memcpy(s->sha, rep->str, 41);
}

gp_err
gp_kvscript_load(gp_kvscript *s, gp_kv *kv)
{
    const char *argv[3] = {"SCRIPT", "LOAD", s->lua};
    gp_err      rc;

    if (s->loading)
        return GP_EOK;
    rc = gp_kv_cmd(kv, loaded, s, 3, argv, NULL);
    s->loading = rc == GP_EOK;
    return rc;
}

static bool
is_noscript(const redisReply *rep)
{
    return rep != NULL && rep->type == REDIS_REPLY_ERROR && rep->len >= 8 &&
           strncmp(rep->str, "NOSCRIPT", 8) == 0;
}

static void
call_done(void *arg, const redisReply *rep, gp_err err)
{
    script_call *c = arg;
    gp_err       rc;

    if (err == GP_EOK && is_noscript(rep) && !c->retried) {
        c->retried = true;
        c->s->noscript++;
        c->s->sha[0] = '\0';                 /* reload: this server lost it */
        c->argv[0] = "EVAL";
        c->argl[0] = 4;
        c->argv[1] = c->s->lua;
        c->argl[1] = strlen(c->s->lua);
        rc = gp_kv_cmd(c->kv, call_done, c, c->argc, c->argv, c->argl);
        if (rc == GP_EOK) {
            gp_kvscript_load(c->s, c->kv);
            return;
        }
        rep = NULL;
        err = rc;
    }
    if (c->cb != NULL)
        c->cb(c->arg, rep, err);
    free(c);
}

gp_err
gp_kvscript_call(gp_kvscript *s, gp_kv *kv, gp_kv_cb *cb, void *arg, int nkeys,
                 const char *const *keys, int nargs, const char *const *args,
                 const size_t *arglens)
{
    int          argc = 3 + nkeys + nargs;
    size_t       bytes = 0, off;
    char         nk[16];
    script_call *c;
    char        *data;
    bool         by_sha = s->sha[0] != '\0';
    gp_err       rc;

    if (nkeys < 0 || nargs < 0 || nkeys + nargs > GP_KVSCRIPT_MAX_ARGS)
        return GP_EINVAL;
    snprintf(nk, sizeof(nk), "%d", nkeys);
    for (int i = 0; i < nkeys; i++)
        bytes += strlen(keys[i]);
    for (int i = 0; i < nargs; i++)
        bytes += arglens != NULL ? arglens[i] : strlen(args[i]);
    bytes += strlen(nk) + 41;
    c = malloc(sizeof(*c) + (size_t)argc * (sizeof(char *) + sizeof(size_t)) + bytes);
    if (c == NULL)
        return GP_ENOMEM;
    *c = (script_call){.s = s, .kv = kv, .cb = cb, .arg = arg, .argc = argc};
    c->argv = (const char **)(c + 1);
    c->argl = (size_t *)(c->argv + argc);
    data = (char *)(c->argl + argc);
    /* argv[1] is the SHA1 (copied: a reload may change s->sha) or the text */
    memcpy(data, s->sha, 41);
    c->argv[0] = by_sha ? "EVALSHA" : "EVAL";
    c->argl[0] = strlen(c->argv[0]);
    c->argv[1] = by_sha ? data : s->lua;
    c->argl[1] = by_sha ? 40 : strlen(s->lua);
    off = 41;
    memcpy(data + off, nk, strlen(nk));
    c->argv[2] = data + off;
    c->argl[2] = strlen(nk);
    off += strlen(nk);
    for (int i = 0; i < nkeys + nargs; i++) {
        const char *v = i < nkeys ? keys[i] : args[i - nkeys];
        size_t      n = i < nkeys ? strlen(v) : arglens != NULL ? arglens[i - nkeys] : strlen(v);

        memcpy(data + off, v, n);
        c->argv[3 + i] = data + off;
        c->argl[3 + i] = n;
        off += n;
    }
    if (!by_sha) {
        s->evals++;
        gp_kvscript_load(s, kv);             /* the next calls go by SHA1 */
    }
    rc = gp_kv_cmd(kv, call_done, c, argc, c->argv, c->argl);
    if (rc != GP_EOK)
        free(c);
    return rc;
}
