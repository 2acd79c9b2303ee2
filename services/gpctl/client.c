/* client.c -- gpctl's connection: a private libev loop and one gp_bus;
 * synchronous calls (gp_call_wait, gp/call.h) run the loop until their
 * reply (or deadline) comes. */
#include <ev.h>
#include <stdlib.h>
#include <string.h>

#include "gp/call.h"
#include "gp/cfg.h"
#include "gp/limits.h"
#include "gpctl.h"

/* ---- entities ---------------------------------------------------------------- */

#define OPS(E) GP_OP_ADMIN_##E##_CREATE, GP_OP_ADMIN_##E##_UPDATE, GP_OP_ADMIN_##E##_GET, \
               GP_OP_ADMIN_##E##_DELETE, GP_OP_ADMIN_##E##_LIST

static const entity entities[] = {
    {"site", "sites", NULL, &msg_site_desc, &msg_site_list_desc,
     MSG_SITE_LIST_ITEMS_MAXITEMS, true, OPS(SITE)},
    {"node", "nodes", "no", &msg_node_desc, &msg_node_list_desc,
     MSG_NODE_LIST_ITEMS_MAXITEMS, false,
     NULL, NULL, GP_OP_ADMIN_NODE_GET, GP_OP_ADMIN_NODE_DELETE, GP_OP_ADMIN_NODE_LIST},
    {"pool", "pools", NULL, &msg_pool_desc, &msg_pool_list_desc,
     MSG_POOL_LIST_ITEMS_MAXITEMS, true, OPS(POOL)},
    {"product", "products", "prod", &msg_product_desc, &msg_product_list_desc,
     MSG_PRODUCT_LIST_ITEMS_MAXITEMS, true, OPS(PRODUCT)},
    {"tenant", "tenants", NULL, &msg_tenant_desc, &msg_tenant_list_desc,
     MSG_TENANT_LIST_ITEMS_MAXITEMS, true, OPS(TENANT)},
};

const entity *
entity_find(const char *word)
{
    for (size_t i = 0; i < GP_NELEM(entities); i++) {
        const entity *e = &entities[i];
        if (strcmp(word, e->name) == 0 || strcmp(word, e->plural) == 0 ||
            (e->alias != NULL && strcmp(word, e->alias) == 0))
            return e;
    }
    return NULL;
}

/* ---- connection ----------------------------------------------------------------- */

static void
conn_cb(void *arg, bool up)
{
    gpctl *c = arg;

    c->connected = up;
}

static void
deadline_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop, (void)revents;
    *(int *)w->data = 1;
}

/* c->url as messages show it: a password or token in it masked. */
static const char *
url_shown(const gpctl *c)
{
    static char buf[sizeof(c->url) + 16];

    gp_cfg_mask(c->url, buf, sizeof(buf));
    return buf;
}

/* Runs the loop until *flag is set or timeout_ms passes; returns *flag. */
static int
run_until(gpctl *c, volatile int *flag, unsigned timeout_ms)
{
    int      expired = 0;
    ev_timer t;

    ev_timer_init(&t, deadline_cb, timeout_ms / 1000.0, 0.);
    t.data = &expired;
    ev_timer_start(c->loop, &t);
    while (!*flag && !expired)
        ev_run(c->loop, EVRUN_ONCE);
    ev_timer_stop(c->loop, &t);
    return *flag;
}


int
ctl_connect(gpctl *c)
{
    gp_bus_opts o = {.url = c->url, .name = "gpctl", .jetstream = c->jetstream};
    char        inbox[GP_MAX_SUBJECT];
    gp_err      rc;

    if (c->user[0] != '\0') {
        o.user = c->user;
        o.password = c->password;
    }
    if (c->tenant[0] != '\0') {
        /* its replies on gp.api.<tenant>._reply.<nuid>.<n> (contract: tenantInbox) */
        if (gp_op_inbox_prefix(GP_INBOX_TENANT_INBOX, inbox, sizeof(inbox),
                               (const char *const[]){c->tenant}) != GP_EOK) {
            fprintf(stderr, "gpctl: GP_TENANT %s: not a tenant id\n", c->tenant);
            return GPCTL_USAGE;
        }
        o.inbox_prefix = inbox;
    }

    if (c->url[0] == '\0') {
        fprintf(stderr, "gpctl: no control plane address%s%s: set GP_NATS_URL, pass --env-file "
                "or --nats-url, or start the stack with `make up`\n",
                c->url_from[0] ? " " : "", c->url_from);
        return GPCTL_UNREACHABLE;
    }
    c->loop = ev_loop_new(EVFLAG_AUTO);
    if (c->loop == NULL) {
        fprintf(stderr, "gpctl: cannot create an event loop\n");
        return GPCTL_FAIL;
    }
    rc = gp_bus_new(c->loop, &o, conn_cb, c, &c->bus);
    if (rc == GP_EOK && !gp_bus_is_connected(c->bus))
        run_until(c, &c->connected, c->timeout_ms);
    if (rc != GP_EOK || !gp_bus_is_connected(c->bus)) {
        char why[512];

        if (rc == GP_EOK && gp_bus_refusal(c->bus, why, sizeof(why)))
            fprintf(stderr, "gpctl: DENIED: nats-server at %s (%s) refused the identity %s: %s\n",
                    url_shown(c), c->url_from, c->user[0] ? c->user : "(none: anonymous)", why);
        else if (rc != GP_EOK)
            fprintf(stderr, "gpctl: cannot connect to NATS at %s (%s): %s\n", url_shown(c),
                    c->url_from, gp_err_str(rc));
        else
            fprintf(stderr, "gpctl: cannot connect to NATS at %s (%s): not connected within "
                    "%u ms; is the stack running (make up), and may identity %s connect "
                    "(GP_NATS_USER; the server logs an authentication error)?\n",
                    url_shown(c), c->url_from, c->timeout_ms,
                    c->user[0] ? c->user : "(none: anonymous)");
        return GPCTL_UNREACHABLE;
    }
    return GPCTL_OK;
}

void
ctl_close(gpctl *c)
{
    gp_bus_free(c->bus);
    c->bus = NULL;
    if (c->loop != NULL)
        ev_loop_destroy(c->loop);
    c->loop = NULL;
}

/* ---- calls -------------------------------------------------------------------------- */

/* The one typed request/reply (gp/call.h); transport errors come back with
 * detail "" and *transport set. */
static gp_err
call(gpctl *c, const char *subject, const gp_msg_desc *ind, const void *in,
     const gp_msg_desc *outd, void *out, char *detail, size_t dlen, bool *transport)
{
    return gp_call_wait(c->loop, c->bus, subject, ind, in, outd, out, c->timeout_ms, detail, dlen,
                        transport);
}

gp_err
ctl_call_raw(gpctl *c, const char *subject, const gp_msg_desc *ind, const void *in,
             const gp_msg_desc *outd, void *out, char *detail, size_t dlen, bool *transport)
{
    gp_err rc = call(c, subject, ind, in, outd, out, detail, dlen, transport);

    if (*transport)
        snprintf(detail, dlen, "%s", gp_err_str(rc));
    return rc;
}

int
ctl_exit_code(gp_err err, bool transport)
{
    if (err == GP_EOK)
        return GPCTL_OK;
    return transport ? GPCTL_UNREACHABLE : GPCTL_FAIL;
}

/* The program that serves a subject, for "is X running?". */
static void
server_of(const char *subject, char *out, size_t n)
{
    for (const gp_op *const *o = gp_ops; *o != NULL; o++) {
        if (!(*o)->receive || (*o)->services == NULL || !gp_op_matches(*o, subject))
            continue;
        if (*o == GP_OP_HEALTH)                 /* gp.int.health.<service> */
            snprintf(out, n, "gridpool-%s", strrchr(subject, '.') + 1);
        else
            snprintf(out, n, "gridpool-%s", (*o)->services[0]);
        return;
    }
    snprintf(out, n, "the service");
}

bool
ctl_refused(gpctl *c)
{
    char why[512];

    if (!gp_bus_refusal(c->bus, why, sizeof(why)))
        return false;
    fprintf(stderr, "gpctl: DENIED: nats-server refused it for this identity (%s): %s\n",
            c->user[0] ? c->user : "anonymous", why);
    return true;
}

int
ctl_report(gpctl *c, const char *subject, gp_err err, bool transport, const char *detail)
{
    char server[GP_MAX_SUBJECT + 16];

    if (err == GP_EOK)
        return GPCTL_OK;
    if (transport && ctl_refused(c))    /* the server dropped it: say so, not "timeout" */
        return GPCTL_FAIL;
    if (!transport) {
        fprintf(stderr, "gpctl: %s: %s\n", gp_err_name(err), detail[0] ? detail : gp_err_str(err));
    } else if (err == GP_ENOROUTE) {
        server_of(subject, server, sizeof(server));
        fprintf(stderr, "gpctl: no responders on %s: is %s running? (NATS %s)\n", subject,
                server, url_shown(c));
    } else if (err == GP_ETIMEOUT) {
        fprintf(stderr, "gpctl: no reply on %s within %u ms (timeout; try --timeout)\n",
                subject, c->timeout_ms);
    } else {
        fprintf(stderr, "gpctl: request on %s failed: %s (NATS %s)\n", subject,
                gp_err_str(err), url_shown(c));
    }
    return ctl_exit_code(err, transport);
}

int
ctl_call(gpctl *c, const char *subject, const gp_msg_desc *ind, const void *in,
         const gp_msg_desc *outd, void *out)
{
    char   detail[GP_ERRBUF_LEN];
    bool   transport;
    gp_err rc = call(c, subject, ind, in, outd, out, detail, sizeof(detail), &transport);

    return ctl_report(c, subject, rc, transport, detail);
}

/* ---- lists and gets ------------------------------------------------------------------ */

/* The generic shape of every <Entity>List: items, next, total. */
typedef struct list_view {
    gp_arr     *items;
    const char *next;
    size_t      item_size;
} list_view;

static list_view
list_fields(const gp_msg_desc *d, void *list)
{
    const gp_field *items = &d->fields[gp_msg_field_index(d, "items")];
    const gp_field *next = &d->fields[gp_msg_field_index(d, "next")];
    list_view       v = {
        .items = (gp_arr *)(void *)((char *)list + items->offset),
        .next = (const char *)list + next->offset,
        .item_size = items->sub->size,
    };

    return v;
}

static int
list_page(gpctl *c, const entity *e, const char *subject, msg_list_request *req, void *list,
          item_fn *fn, void *arg)
{
    list_view v;
    int       rc = ctl_call(c, subject, &msg_list_request_desc, req, e->list_desc, list);

    if (rc != GPCTL_OK)
        return rc;
    v = list_fields(e->list_desc, list);
    for (uint32_t i = 0; i < v.items->n && rc == GPCTL_OK; i++)
        rc = fn(arg, (const char *)v.items->v + i * v.item_size);
    /* an unchanged or empty cursor with items would loop forever */
    if (rc == GPCTL_OK && v.next[0] != '\0' &&
        (v.items->n == 0 || strcmp(v.next, req->after) == 0)) {
        fprintf(stderr, "gpctl: INTERNAL: %s returned a cursor that does not advance\n", subject);
        return GPCTL_FAIL;
    }
    snprintf(req->after, sizeof(req->after), "%s", v.next);
    return rc;
}

int
ctl_list(gpctl *c, const entity *e, const msg_list_request *filter, item_fn *fn, void *arg)
{
    char             subject[GP_MAX_SUBJECT + 1];
    msg_list_request req = *filter;
    void            *list = calloc(1, e->list_desc->size);
    int              rc = GPCTL_OK;

    if (list == NULL)
        return GPCTL_FAIL;
    snprintf(subject, sizeof(subject), "%s", e->list->address);
    req.limit = e->page;
    req.after[0] = '\0';
    do {
        rc = list_page(c, e, subject, &req, list, fn, arg);
        gp_msg_clear(e->list_desc, list);
    } while (rc == GPCTL_OK && req.after[0] != '\0');
    free(list);
    return rc;
}

int
ctl_get(gpctl *c, const entity *e, const char *id, void *out)
{
    msg_id_request req = {0};

    if (strlen(id) >= sizeof(req.id)) {
        fprintf(stderr, "gpctl: INVAL: %s name longer than %zu bytes\n", e->name,
                sizeof(req.id) - 1);
        return GPCTL_USAGE;
    }
    snprintf(req.id, sizeof(req.id), "%s", id);
    return ctl_call(c, e->get->address, &msg_id_request_desc, &req, e->desc, out);
}

int
ctl_print_json(const gp_msg_desc *d, const void *m)
{
    gp_buf b;
    int    rc;

    gp_buf_init(&b, 0);
    rc = gp_msg_to_json(d, m, &b) == GP_EOK ? GPCTL_OK : GPCTL_FAIL;
    if (rc == GPCTL_OK)
        printf("%s\n", b.p);
    gp_buf_fini(&b);
    return rc;
}
