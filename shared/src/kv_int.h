/* kv_int.h -- between the three files behind gp/kv.h.  Not a public header.
 *
 *   kv.c          the front: the public gp_kv_* API; picks the single-node
 *                 or the cluster client at gp_kv_new and dispatches to it;
 *   kv_cluster.c  Redis Cluster, over one kv_node.c connection per master;
 *   kv_node.c     one connection to one Redis.
 *
 * Calls go one way: kv.c -> kv_cluster.c -> kv_node.c, and kv.c ->
 * kv_node.c; neither client calls kv.c (tools/depcheck.py checks it).
 * Loop thread only, like all of gp/kv.h. */
#ifndef GP_KV_INT_H
#define GP_KV_INT_H

#include <stdarg.h>

#include "gp/kv.h"

/* What a gp_kv handle points to: a struct kvn or a struct kvc, each of which
 * has this as its first member, so kv.c can tell which one it holds (and
 * convert the pointer, C11 6.7.2.1p15) without knowing either layout. */
struct gp_kv {
    bool cluster;                          /* struct kvc, else struct kvn */
};

/* ---- kv_node.c: one connection ------------------------------------------- */

struct kvn;

/* Uses opts' host, port and timeouts (cluster and seeds are ignored).
 * INVAL for a bad port.  Starts connecting; conn_cb as in gp/kv.h. */
gp_err kvn_new(struct ev_loop *loop, const gp_kv_opts *opts, gp_kv_conn_cb *conn_cb,
               void *conn_arg, struct kvn **out);
/* gp_kv_free: NULL is a no-op; pending callbacks get UNAVAIL; may be called
 * from inside any of its callbacks (deferred). */
void   kvn_free(struct kvn *kv);
/* NULL (a master's connection after kvc_free): false / all zeros. */
bool   kvn_is_connected(const struct kvn *kv);
void   kvn_stats(const struct kvn *kv, gp_kv_stats *out);
/* gp_kv_cmd / gp_kv_cmdf on one connection, deadline = now + its command
 * timeout.  Subscribe-mode commands must be refused before (kv.c does). */
gp_err kvn_cmdv(struct kvn *kv, gp_kv_cb *cb, void *arg, int argc, const char **argv,
                const size_t *argvlen);
gp_err kvn_vcmdf(struct kvn *kv, gp_kv_cb *cb, void *arg, const char *fmt, va_list ap);
/* Sends an already formatted (RESP) command, binary safe, with an explicit
 * deadline on gp_mono_s()'s timebase.  Same results as gp_kv_cmd
 * (UNAVAIL/TOOBIG/INVAL synchronously, no callback then). */
gp_err kvn_send(struct kvn *kv, gp_kv_cb *cb, void *arg, const char *cmd, size_t len,
                double deadline);

/* ---- kv_cluster.c: Redis Cluster ------------------------------------------ */

struct kvc;

/* opts as gp_kv_new's with opts->cluster set. */
gp_err kvc_new(struct ev_loop *loop, const gp_kv_opts *opts, gp_kv_conn_cb *conn_cb,
               void *conn_arg, struct kvc **out);
/* gp_kv_free: releases itself once nothing of the cluster is left. */
void   kvc_free(struct kvc *cl);
bool   kvc_is_connected(const struct kvc *cl);
void   kvc_stats(const struct kvc *cl, gp_kv_stats *out);
/* Takes buf (malloc'd RESP from redisFormatCommand*) in every case. */
gp_err kvc_cmd(struct kvc *cl, gp_kv_cb *cb, void *arg, char *buf, size_t len);

#endif
