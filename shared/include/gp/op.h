/* gp/op.h -- an operation of the contract (schemas/asyncapi.json).
 *
 * schemas/gen.py emits one const gp_op per AsyncAPI operation
 * (GP_OP_NODE_HEARTBEAT...), so services and clients name operations and
 * never write subject strings: a route table points at the gp_op it
 * serves, a client fills the operation's parameters to get the subject it
 * publishes on.  Pure functions; any thread. */
#ifndef GP_OP_H
#define GP_OP_H

#include <stdbool.h>
#include <stddef.h>

#include "gp/err.h"

struct gp_msg_desc;

typedef struct gp_op {
    const char                *id;          /* AsyncAPI operation id, "nodeHeartbeat" */
    const char                *address;     /* "gp.node.{site}.{node}.hb" */
    const char                *pattern;     /* "gp.node.*.*.hb": what a server subscribes */
    const struct gp_msg_desc  *in;          /* the message published on the address */
    const struct gp_msg_desc  *out;         /* its reply; NULL for an event (no reply) */
    bool                       receive;     /* served by a gridpool process */
    unsigned char              nparams;
    const char *const         *params;      /* parameter names, address order */
    const unsigned char       *param_tok;   /* subject token index of each parameter */
    const char *const         *services;    /* who serves it (NULL-terminated), or NULL */
    const char                *limit_by;    /* x-gp-limit-by: the parameter whose value
                                             * gets its own rate and in-flight limit
                                             * ("tenant"), or NULL */
} gp_op;

/* Writes op's subject with its parameters filled from args (nparams
 * strings, address order).  INVAL when an argument is not an id (gp/id.h:
 * [A-Za-z0-9_-], 1 to GP_MAX_ID): a parameter must never widen or shift
 * the subject; TOOBIG past n. */
gp_err gp_op_subject(const gp_op *op, char *buf, size_t n, const char *const *args);

/* The same, where a NULL argument stays a wildcard "*" (what a server
 * subscribes to serve several values of that parameter). */
gp_err gp_op_pattern(const gp_op *op, char *buf, size_t n, const char *const *args);

/* The prefix a client gives its bus for a reply inbox of the contract
 * (x-gp-inbox channels, e.g. GP_INBOX_NODE_INBOX, GP_INBOX_TENANT_INBOX):
 * the inbox's address with its parameters but the last two filled from
 * args, without its last two tokens ("<nuid>.<n>": the bus appends its
 * own).  INVAL when an argument is not an id or the address does not end
 * in two parameters; TOOBIG past n. */
gp_err gp_op_inbox_prefix(const gp_op *inbox, char *buf, size_t n, const char *const *args);

/* The same as gp_op_subject with the arguments inline: gp_op_subjectf(op, buf, n, site, node). */
gp_err gp_op_subjectf(const gp_op *op, char *buf, size_t n, ...);

/* A stream's subject for op: its pattern cut at parameter `from` and ended
 * with ">" (gp.events.*.job.*.* from "job" -> gp.events.*.job.>), so a
 * consumer may filter on anything below it.  INVAL when op has no such
 * parameter; TOOBIG past n.  Two services that declare one stream get the
 * same subjects from it. */
gp_err gp_op_stream_subject(const gp_op *op, const char *from, char *buf, size_t n);

/* The same with the parameters before `from` filled from args (as
 * gp_op_pattern: NULL stays "*"): a consumer's filter on part of a stream
 * (gp.events.acme.job.> from "job" and {"acme"}). */
gp_err gp_op_stream_filter(const gp_op *op, const char *from, const char *const *args, char *buf,
                           size_t n);

/* Index of parameter name in op, or -1. */
int    gp_op_param_index(const gp_op *op, const char *name);

/* true when subject matches op's pattern (same token count, literal
 * tokens equal). */
bool   gp_op_matches(const gp_op *op, const char *subject);

/* true when op lists service among those that serve it. */
bool   gp_op_served_by(const gp_op *op, const char *service);

/* The operation with this id in the generated table, or NULL. */
const gp_op *gp_op_find(const char *id);

#endif
