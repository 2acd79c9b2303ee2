/* kvfan.c -- ordered fan-out over gp_kv (see gp/kvfan.h).  Each slot is
 * its own gp_kv callback argument, so a reply can only land in the slot
 * whose command produced it: no shared "next reply" counter to shift. */
#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>

#include "gp/kvfan.h"

typedef struct fan_slot {
    gp_kvfan *f;
    gp_err    err;                 /* UNAVAIL until issued, PENDING while in flight */
    bool      issued;
} fan_slot;

struct gp_kvfan {
    gp_kv            *kv;
    size_t            n;
    unsigned long     pending;     /* in flight, +1 until gp_kvfan_end */
    bool              ended;
    gp_kvfan_slot_cb *slot_cb;
    gp_kvfan_done_cb *done_cb;
    void             *arg;
    fan_slot          slots[];
};

gp_kvfan *
gp_kvfan_new(gp_kv *kv, size_t n, gp_kvfan_slot_cb *slot_cb, gp_kvfan_done_cb *done_cb, void *arg)
{
    gp_kvfan *f = calloc(1, sizeof(*f) + n * sizeof(fan_slot));

    if (f == NULL)
        return NULL;
    *f = (gp_kvfan){.kv = kv, .n = n, .pending = 1, .slot_cb = slot_cb, .done_cb = done_cb,
                    .arg = arg};
    for (size_t i = 0; i < n; i++)
        f->slots[i] = (fan_slot){.f = f, .err = GP_EUNAVAIL};
    return f;
}

static void
release(gp_kvfan *f)
{
    if (--f->pending == 0) {
        if (f->done_cb != NULL)
            f->done_cb(f->arg, f);
        free(f);
    }
}

static void
settle(fan_slot *s, const redisReply *rep, gp_err err)
{
    gp_kvfan *f = s->f;
    size_t    i = (size_t)(s - f->slots);

    if (err == GP_EOK && rep != NULL && rep->type == REDIS_REPLY_ERROR)
        err = GP_EINTERNAL;
    s->err = err;
    if (f->slot_cb != NULL)
        f->slot_cb(f->arg, i, rep, err);
}

static void
on_reply(void *arg, const redisReply *rep, gp_err err)
{
    fan_slot *s = arg;
    gp_kvfan *f = s->f;

    settle(s, rep, err);
    release(f);
}

static fan_slot *
claim(gp_kvfan *f, size_t i)
{
    if (f == NULL || f->ended || i >= f->n || f->slots[i].issued)
        return NULL;
    f->slots[i].issued = true;
    f->slots[i].err = GP_EPENDING;
    f->pending++;
    return &f->slots[i];
}

static gp_err
sent(fan_slot *s, gp_err rc)
{
    if (rc != GP_EOK) {                      /* no reply will come: settle it here */
        settle(s, NULL, rc);
        s->f->pending--;                     /* never the last: gp_kvfan_end holds one */
    }
    return rc;
}

gp_err
gp_kvfan_cmd(gp_kvfan *f, size_t i, int argc, const char **argv, const size_t *argvlen)
{
    fan_slot *s = claim(f, i);

    if (s == NULL)
        return GP_EINVAL;
    return sent(s, gp_kv_cmd(f->kv, on_reply, s, argc, argv, argvlen));
}

/* gp_kv has no va_list entry point: format with hiredis, then hand the
 * arguments to gp_kv_cmd as argv (so routing by key still sees them). */

gp_err
gp_kvfan_cmdf(gp_kvfan *f, size_t i, const char *fmt, ...)
{
    fan_slot   *s = claim(f, i);
    char       *cmd = NULL, *p, *end;
    const char *argv[GP_KVFAN_MAX_ARGS];
    size_t      argl[GP_KVFAN_MAX_ARGS];
    long        argc;
    int         len;
    va_list     ap;
    gp_err      rc = GP_EOK;

    if (s == NULL)
        return GP_EINVAL;
    va_start(ap, fmt);
    len = redisvFormatCommand(&cmd, fmt, ap);
    va_end(ap);
    if (len < 0)
        return sent(s, GP_ENOMEM);
    /* RESP: *<argc>\r\n then $<len>\r\n<bytes>\r\n per argument */
    end = cmd + len;
    argc = strtol(cmd + 1, &p, 10);
    if (argc <= 0 || argc > GP_KVFAN_MAX_ARGS)
        rc = GP_EINVAL;
    for (long k = 0; k < argc && rc == GP_EOK; k++) {
        p += 2;                                   /* \r\n */
        if (p >= end || *p != '$') {
            rc = GP_EINTERNAL;
            break;
        }
        argl[k] = (size_t)strtoul(p + 1, &p, 10);
        p += 2;
        argv[k] = p;
        p += argl[k];
        if (p > end)
            rc = GP_EINTERNAL;
    }
    if (rc == GP_EOK)
        rc = gp_kv_cmd(f->kv, on_reply, s, (int)argc, argv, argl);
    free(cmd);
    return sent(s, rc);
}

void
gp_kvfan_end(gp_kvfan *f)
{
    if (f == NULL || f->ended)
        return;
    f->ended = true;
    release(f);
}

gp_err
gp_kvfan_err(const gp_kvfan *f, size_t i)
{
    return f != NULL && i < f->n ? f->slots[i].err : GP_EINVAL;
}

size_t
gp_kvfan_count(const gp_kvfan *f)
{
    return f != NULL ? f->n : 0;
}
