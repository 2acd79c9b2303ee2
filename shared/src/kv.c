/* kv.c -- the front of gp/kv.h: asynchronous Redis on one libev loop.
 *
 * gp_kv_new picks the client once, from opts.cluster: kv_node.c (one
 * connection to one Redis) or kv_cluster.c (Redis Cluster, itself over one
 * kv_node.c connection per master).  Every other gp_kv_* call checks its
 * arguments and dispatches to the one picked; the handle says which
 * (kv_int.h).  Calls go one way, kv.c -> kv_cluster.c -> kv_node.c and
 * kv.c -> kv_node.c: the clients never call back into this file.
 *
 * Subscribe-mode commands (SUBSCRIBE, PSUBSCRIBE, MONITOR, ...) are refused
 * here with INVAL, in both modes: their replies do not follow the
 * one-reply-per-command FIFO that kv_node.c's deadlines rely on.
 *
 * Loop thread only, like all of gp/kv.h. */
#include "gp/kv.h"

#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gp/limits.h"
#include "kv_int.h"

/* The handle is the first member of either client (kv_int.h), hence the
 * pointer casts between gp_kv and struct kvn / struct kvc below. */

gp_err
gp_kv_new(struct ev_loop *loop, const gp_kv_opts *opts, gp_kv_conn_cb *conn_cb,
          void *conn_arg, gp_kv **out)
{
    gp_err e;

    if (out != NULL)
        *out = NULL;
    if (loop == NULL || opts == NULL || out == NULL)
        return GP_EINVAL;
    if ((!opts->cluster || opts->seeds == NULL || opts->seeds[0] == '\0') &&
        (opts->port <= 0 || opts->port > 65535))
        return GP_EINVAL;
    if (opts->cluster) {
        struct kvc *cl;

        if ((e = kvc_new(loop, opts, conn_cb, conn_arg, &cl)) == GP_EOK)
            *out = (gp_kv *)cl;
    } else {
        struct kvn *n;

        if ((e = kvn_new(loop, opts, conn_cb, conn_arg, &n)) == GP_EOK)
            *out = (gp_kv *)n;
    }
    return e;
}

void
gp_kv_free(gp_kv *kv)
{
    if (kv == NULL)
        return;
    if (kv->cluster)
        kvc_free((struct kvc *)kv);        /* releases itself when done */
    else
        kvn_free((struct kvn *)kv);
}

bool
gp_kv_is_connected(const gp_kv *kv)
{
    if (kv == NULL)
        return false;
    return kv->cluster ? kvc_is_connected((const struct kvc *)kv)
                       : kvn_is_connected((const struct kvn *)kv);
}

void
gp_kv_get_stats(const gp_kv *kv, gp_kv_stats *out)
{
    if (out == NULL)
        return;
    if (kv == NULL)
        memset(out, 0, sizeof(*out));
    else if (kv->cluster)
        kvc_stats((const struct kvc *)kv, out);
    else
        kvn_stats((const struct kvn *)kv, out);
}

static bool
is_sub_cmd(const char *name, size_t len)
{
    static const char *const sub[] = {"subscribe", "psubscribe", "unsubscribe", "punsubscribe",
                                      "ssubscribe", "sunsubscribe", "monitor"};

    for (size_t i = 0; i < GP_NELEM(sub); i++)
        if (strlen(sub[i]) == len && strncasecmp(sub[i], name, len) == 0)
            return true;
    return false;
}

gp_err
gp_kv_cmd(gp_kv *kv, gp_kv_cb *cb, void *arg, int argc, const char **argv,
          const size_t *argvlen)
{
    if (kv == NULL || argc <= 0 || argv == NULL || argv[0] == NULL)
        return GP_EINVAL;
    if (is_sub_cmd(argv[0], argvlen != NULL ? argvlen[0] : strlen(argv[0])))
        return GP_EINVAL;
    if (kv->cluster) {
        /* formatted once: kv_cluster.c keeps it to resend on a redirection */
        char *buf = NULL;
        int   n = redisFormatCommandArgv(&buf, argc, argv, argvlen);

        if (n < 0 || buf == NULL)
            return GP_ENOMEM;
        return kvc_cmd((struct kvc *)kv, cb, arg, buf, (size_t)n);
    }
    return kvn_cmdv((struct kvn *)kv, cb, arg, argc, argv, argvlen);
}

gp_err
gp_kv_cmdf(gp_kv *kv, gp_kv_cb *cb, void *arg, const char *fmt, ...)
{
    va_list ap;
    size_t  n;
    gp_err  e;
    int     rc;

    if (kv == NULL || fmt == NULL)
        return GP_EINVAL;
    fmt += strspn(fmt, " ");
    n = strcspn(fmt, " ");
    if (is_sub_cmd(fmt, n))
        return GP_EINVAL;
    if (kv->cluster) {
        char *buf = NULL;

        va_start(ap, fmt);
        rc = redisvFormatCommand(&buf, fmt, ap);
        va_end(ap);
        if (rc < 0 || buf == NULL)
            return GP_EINVAL;              /* bad format or out of memory, as kv_node.c */
        return kvc_cmd((struct kvc *)kv, cb, arg, buf, (size_t)rc);
    }
    va_start(ap, fmt);
    e = kvn_vcmdf((struct kvn *)kv, cb, arg, fmt, ap);
    va_end(ap);
    return e;
}
