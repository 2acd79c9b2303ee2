/* kv_int.h -- between kv.c (one connection) and kv_cluster.c (Redis
 * Cluster over one kv.c connection per master).  Not a public header. */
#ifndef GP_KV_INT_H
#define GP_KV_INT_H

#include "gp/kv.h"

struct kvc;

/* One connection: sends an already formatted (RESP) command, binary safe,
 * with an explicit deadline on gp_mono_s()'s timebase.  Same results as
 * gp_kv_cmd (UNAVAIL/TOOBIG/INVAL synchronously, no callback then). */
gp_err gp_kv__send(gp_kv *kv, gp_kv_cb *cb, void *arg, const char *cmd, size_t len,
                   double deadline);
double gp_kv__timeout(const gp_kv *kv);   /* command timeout, seconds */
/* Frees the shell gp_kv of a cluster client (called by kv_cluster.c once
 * nothing of the cluster is left). */
void   gp_kv__release_shell(gp_kv *kv);

/* kv_cluster.c: the cluster client behind a shell gp_kv. */
gp_err kvc_new(struct ev_loop *loop, const gp_kv_opts *opts, gp_kv_conn_cb *conn_cb,
               void *conn_arg, gp_kv *shell, struct kvc **out);
void   kvc_free(struct kvc *cl);
bool   kvc_is_connected(const struct kvc *cl);
void   kvc_stats(const struct kvc *cl, gp_kv_stats *out);
/* Takes buf (malloc'd RESP from redisFormatCommand*) in every case. */
gp_err kvc_cmd(struct kvc *cl, gp_kv_cb *cb, void *arg, char *buf, size_t len);

#endif
