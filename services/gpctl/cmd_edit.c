/* cmd_edit.c -- gpctl create|update|delete KIND NAME [--field value ...].
 *
 * Flags are driven by the message descriptor: --lat 48.1 sets field "lat"
 * with gp_msg_set_text (same checks as decoding); --power-prices
 * 0:180000,420:250000 fills an array of objects, item values in field
 * order; --models L4,H100 an array of strings. */
#include <stdlib.h>
#include <string.h>

#include "gp/limits.h"
#include "gpctl.h"

/* Fields the schema marks readOnly are computed by the registry and
 * refused on the command line. */
static bool
is_read_only(const entity *e, const char *field)
{
    int i = gp_msg_field_index(e->desc, field);

    return i >= 0 && (e->desc->fields[i].flags & GP_FF_READONLY) != 0;
}

/* ---- help ---------------------------------------------------------------------- */

static void
field_syntax(const gp_field *f, char *buf, size_t n)
{
    size_t used = 0;

    switch (f->type == GP_T_ARR ? f->elem : f->type) {
    case GP_T_STR:  snprintf(buf, n, "TEXT"); break;
    case GP_T_BOOL: snprintf(buf, n, "true|false"); break;
    case GP_T_F64:  snprintf(buf, n, "NUM"); break;
    case GP_T_ENUM:
        for (uint32_t i = 0; i < f->nenums && used < n; i++)
            used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? "|" : "", f->enums[i]);
        break;
    case GP_T_OBJ:
        for (uint32_t i = 0; i < f->sub->nfields && used < n; i++)
            used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ":" : "",
                                     f->sub->fields[i].name);
        break;
    default:        snprintf(buf, n, "INT"); break;
    }
    if (f->type == GP_T_ARR && strlen(buf) + 8 < n)
        strcat(buf, ",...");
}

static void
flag_name(const char *field, char *buf, size_t n)
{
    snprintf(buf, n, "--%s", field);
    for (char *p = buf; *p; p++)
        *p = *p == '_' ? '-' : *p;
}

void
edit_print_fields(FILE *out)
{
    static const char *const kinds[] = {"tenant", "site", "pool", "product"};

    fputs("\nFields:\n", out);
    for (size_t k = 0; k < GP_NELEM(kinds); k++) {
        const entity *e = entity_find(kinds[k]);

        fprintf(out, "  %s:\n", e->name);
        for (uint32_t i = 1; i < e->desc->nfields; i++) {
            const gp_field *f = &e->desc->fields[i];
            char            flag[80], syn[256];

            if (is_read_only(e, f->name))
                continue;
            flag_name(f->name, flag, sizeof(flag));
            field_syntax(f, syn, sizeof(syn));
            fprintf(out, "    %-30s %s%s\n", flag, syn,
                    f->flags & GP_FF_REQUIRED ? "  (required)" : "");
        }
    }
}

/* ---- setting fields ---------------------------------------------------------------- */

/* Where a value comes from, for messages. */
typedef struct src {
    const char *verb;
    const char *flag;
} src;

static uint64_t *
has_bits(void *msg)
{
    return (uint64_t *)msg;     /* every message struct starts with uint64_t has */
}

/* Fills one array item from "a:b:c" (object) or "text" (string). */
static int
set_item(const gp_field *f, void *item, char *text, const src *s)
{
    char  err[GP_ERRBUF_LEN];
    char *save = NULL, *part = strtok_r(text, ":", &save);

    if (f->elem == GP_T_STR) {
        if (strlen(text) > f->elem_limit)
            return usage_error(s->verb, "%s: \"%s\" longer than %u bytes", s->flag, text,
                               f->elem_limit);
        memcpy(item, text, strlen(text) + 1);
        return GPCTL_OK;
    }
    for (uint32_t i = 0; i < f->sub->nfields; i++, part = strtok_r(NULL, ":", &save)) {
        const gp_field *sf = &f->sub->fields[i];

        if (part == NULL && (sf->flags & GP_FF_REQUIRED))
            return usage_error(s->verb, "%s: an item lacks %s", s->flag, sf->name);
        if (part == NULL)
            break;
        if (gp_msg_set_text(f->sub, item, sf->name, part, err, sizeof(err)) != GP_EOK)
            return usage_error(s->verb, "%s: %s", s->flag, err);
    }
    if (part != NULL)
        return usage_error(s->verb, "%s: too many values in an item", s->flag);
    return GPCTL_OK;
}

static size_t
elem_size(const gp_field *f)
{
    return f->elem == GP_T_STR ? f->elem_limit + 1u : f->sub->size;
}

static void
free_array(const gp_field *f, gp_arr *a)
{
    for (uint32_t i = 0; f->elem == GP_T_OBJ && i < a->n; i++)
        gp_msg_clear(f->sub, (char *)a->v + i * elem_size(f));
    free(a->v);
    a->v = NULL;
    a->n = 0;
}

static int
fill_array(const gp_field *f, gp_arr *a, char *copy, const src *s)
{
    char  *save = NULL, *tok;
    int    rc = GPCTL_OK;

    for (tok = strtok_r(copy, ",", &save); tok != NULL && rc == GPCTL_OK;
         tok = strtok_r(NULL, ",", &save)) {
        if (a->n >= f->limit)
            return usage_error(s->verb, "%s: more than %u items", s->flag, f->limit);
        rc = set_item(f, (char *)a->v + a->n * elem_size(f), tok, s);
        a->n++;
    }
    return rc;
}

static int
set_array(const gp_field *f, void *msg, const char *text, const src *s)
{
    gp_arr *a = (gp_arr *)(void *)((char *)msg + f->offset);
    char   *copy;
    int     rc;

    if (f->elem != GP_T_STR && f->elem != GP_T_OBJ)
        return usage_error(s->verb, "%s cannot be set from the command line", s->flag);
    free_array(f, a);
    copy = strdup(text);
    a->v = calloc(f->limit ? f->limit : 1, elem_size(f));
    if (copy == NULL || a->v == NULL) {
        free(copy);
        fprintf(stderr, "gpctl: out of memory\n");
        return GPCTL_FAIL;
    }
    rc = fill_array(f, a, copy, s);
    free(copy);
    return rc;
}

static int
set_field(const char *verb, const entity *e, void *msg, const char *flag, const char *value)
{
    char field[80], err[GP_ERRBUF_LEN];
    src  s = {verb, flag};
    int  i;

    snprintf(field, sizeof(field), "%s", flag + 2);
    for (char *p = field; *p; p++)
        *p = *p == '-' ? '_' : *p;
    i = gp_msg_field_index(e->desc, field);
    if (i < 0 || strcmp(field, "id") == 0)
        return usage_error(verb, "%s has no field %s (see gpctl %s --help)", e->name, flag,
                           verb);
    if (is_read_only(e, field))
        return usage_error(verb, "%s is read only: the registry computes it", flag);
    if (e->desc->fields[i].type == GP_T_ARR) {
        int rc = set_array(&e->desc->fields[i], msg, value, &s);

        if (rc == GPCTL_OK)
            *has_bits(msg) |= (uint64_t)1 << i;
        return rc;
    }
    if (gp_msg_set_text(e->desc, msg, field, value, err, sizeof(err)) != GP_EOK)
        return usage_error(verb, "%s %s: %s", flag, value, err);
    return GPCTL_OK;
}

/* ---- arguments ------------------------------------------------------------------------ */

typedef struct edit_args {
    const entity *e;
    const char   *name;
    void         *msg;          /* e->desc with id and the given fields */
    int           nset;
} edit_args;

static int
parse_target(const char *verb, int argc, char **argv, bool any_kind, edit_args *a)
{
    memset(a, 0, sizeof(*a));
    if (argc < 1)
        return usage_error(verb, "missing KIND");
    a->e = entity_find(argv[0]);
    if (a->e == NULL || (!a->e->editable && !any_kind))
        return usage_error(verb, "cannot %s \"%s\" (site, pool, product or tenant)", verb,
                           argv[0]);
    if (argc < 2 || argv[1][0] == '-')
        return usage_error(verb, "missing %s NAME", a->e->name);
    a->name = argv[1];
    return GPCTL_OK;
}

static int
parse_fields(const char *verb, int argc, char **argv, edit_args *a)
{
    char err[GP_ERRBUF_LEN];
    int  rc = GPCTL_OK;

    a->msg = calloc(1, a->e->desc->size);
    if (a->msg == NULL)
        return GPCTL_FAIL;
    if (gp_msg_set_text(a->e->desc, a->msg, "id", a->name, err, sizeof(err)) != GP_EOK)
        return usage_error(verb, "%s name \"%s\": %s", a->e->name, a->name, err);
    for (int i = 2; i < argc && rc == GPCTL_OK; i++, a->nset++) {
        char       *eq = strchr(argv[i], '=');
        char        flag[80];
        const char *val;

        if (strncmp(argv[i], "--", 2) != 0)
            return usage_error(verb, "unexpected argument \"%s\" (fields are --name value)",
                               argv[i]);
        snprintf(flag, sizeof(flag), "%.*s", eq ? (int)(eq - argv[i]) : (int)strlen(argv[i]),
                 argv[i]);
        if (eq == NULL && i + 1 >= argc)
            return usage_error(verb, "%s needs a value", flag);
        val = eq != NULL ? eq + 1 : argv[++i];
        rc = set_field(verb, a->e, a->msg, flag, val);
    }
    return rc;
}

static void
edit_free(edit_args *a)
{
    if (a->msg != NULL)
        gp_msg_clear(a->e->desc, a->msg);
    free(a->msg);
    a->msg = NULL;
}

/* ---- create / update ----------------------------------------------------------------- */

static int
show_result(gpctl *c, const entity *e, const gp_msg_desc *d, const void *obj, const char *done)
{
    gp_buf b;
    gp_err rc;

    if (c->out != OUT_JSON) {
        printf("%s/%s %s\n", e->name, (const char *)obj + d->fields[0].offset, done);
        return GPCTL_OK;
    }
    gp_buf_init(&b, 0);
    rc = gp_msg_to_json(d, obj, &b);
    if (rc == GP_EOK)
        printf("%s\n", b.p);
    gp_buf_fini(&b);
    return rc == GP_EOK ? GPCTL_OK : GPCTL_FAIL;
}

static int
send_edit(gpctl *c, const edit_args *a, const char *op, const char *done)
{
    void *reply = calloc(1, a->e->desc->size);
    int   rc;

    if (reply == NULL)
        return GPCTL_FAIL;
    rc = ctl_call(c, strcmp(op, "update") == 0 ? a->e->update->address : a->e->create->address,
                  a->e->desc, a->msg, a->e->desc, reply);
    if (rc == GPCTL_OK)
        rc = show_result(c, a->e, a->e->desc, reply, done);
    gp_msg_clear(a->e->desc, reply);
    free(reply);
    return rc;
}

int
cmd_create(gpctl *c, int argc, char **argv)
{
    edit_args a;
    int       rc;

    if (argc > 0 && strcmp(argv[0], "secret") == 0)     /* the scheduler's, not the registry's */
        return cmd_create_secret(c, argc - 1, argv + 1);
    rc = parse_target("create", argc, argv, false, &a);

    if (rc == GPCTL_OK)
        rc = parse_fields("create", argc, argv, &a);
    if (rc == GPCTL_OK)
        rc = ctl_connect(c);
    if (rc == GPCTL_OK)
        rc = send_edit(c, &a, "create", "created");
    edit_free(&a);
    return rc;
}

/* Required fields are always on the wire; an update carries their current
 * values (has-bits set), so the registry can never read them as changes. */
static void
keep_required(const gp_msg_desc *d, void *msg, const void *cur)
{
    for (uint32_t i = 0; i < d->nfields; i++) {
        const gp_field *f = &d->fields[i];
        size_t          n = 0;

        if (!(f->flags & GP_FF_REQUIRED) || (*has_bits(msg) >> i) & 1u)
            continue;
        switch (f->type) {
        case GP_T_STR:  n = f->limit + 1u; break;
        case GP_T_BOOL: n = sizeof(bool); break;
        case GP_T_I32: case GP_T_U32: case GP_T_ENUM: n = 4; break;
        case GP_T_I64: case GP_T_U64: case GP_T_F64:  n = 8; break;
        default: continue;      /* nested required objects: none in the registry's kinds */
        }
        memcpy((char *)msg + f->offset, (const char *)cur + f->offset, n);
        *has_bits(msg) |= (uint64_t)1 << i;
    }
}

int
cmd_update(gpctl *c, int argc, char **argv)
{
    edit_args a;
    void     *cur = NULL;
    int       rc = parse_target("update", argc, argv, false, &a);

    if (rc == GPCTL_OK)
        rc = parse_fields("update", argc, argv, &a);
    if (rc == GPCTL_OK && a.nset == 0)
        rc = usage_error("update", "nothing to change: give --field value");
    if (rc == GPCTL_OK)
        rc = ctl_connect(c);
    if (rc == GPCTL_OK)
        rc = (cur = calloc(1, a.e->desc->size)) ? ctl_get(c, a.e, a.name, cur) : GPCTL_FAIL;
    if (rc == GPCTL_OK) {
        keep_required(a.e->desc, a.msg, cur);
        rc = send_edit(c, &a, "update", "updated");
    }
    if (cur != NULL)
        gp_msg_clear(a.e->desc, cur);
    free(cur);
    edit_free(&a);
    return rc;
}

/* ---- delete ------------------------------------------------------------------------- */

int
cmd_delete(gpctl *c, int argc, char **argv)
{
    edit_args      a;
    msg_id_request req = {0};
    msg_deleted    del = {0};
    int            rc;

    if (argc > 0 && strcmp(argv[0], "secret") == 0)
        return cmd_delete_secret(c, argc - 1, argv + 1);
    rc = parse_target("delete", argc, argv, true, &a);

    if (rc == GPCTL_OK && argc > 2)
        rc = usage_error("delete", "unexpected argument \"%s\"", argv[2]);
    if (rc == GPCTL_OK && strlen(a.name) >= sizeof(req.id))
        rc = usage_error("delete", "%s name longer than %zu bytes", a.e->name,
                         sizeof(req.id) - 1);
    if (rc == GPCTL_OK)
        rc = ctl_connect(c);
    if (rc != GPCTL_OK)
        return rc;
    snprintf(req.id, sizeof(req.id), "%s", a.name);
    rc = ctl_call(c, a.e->del->address, &msg_id_request_desc, &req, &msg_deleted_desc, &del);
    if (rc == GPCTL_OK)
        rc = show_result(c, a.e, &msg_deleted_desc, &del, "deleted");
    gp_msg_clear(&msg_deleted_desc, &del);
    return rc;
}

/* ---- readmit ------------------------------------------------------------------------ */

/* gpctl readmit node NAME: lets a node an operator deleted register again
 * (the registry refuses its registration DENIED until then). */
int
cmd_readmit(gpctl *c, int argc, char **argv)
{
    edit_args      a;
    msg_id_request req = {0}, out = {0};
    int            rc = parse_target("readmit", argc, argv, true, &a);

    if (rc == GPCTL_OK && strcmp(a.e->name, "node") != 0)
        rc = usage_error("readmit", "only a node can be readmitted, not a %s", a.e->name);
    if (rc == GPCTL_OK && argc > 2)
        rc = usage_error("readmit", "unexpected argument \"%s\"", argv[2]);
    if (rc == GPCTL_OK && strlen(a.name) >= sizeof(req.id))
        rc = usage_error("readmit", "node name longer than %zu bytes", sizeof(req.id) - 1);
    if (rc == GPCTL_OK)
        rc = ctl_connect(c);
    if (rc != GPCTL_OK)
        return rc;
    snprintf(req.id, sizeof(req.id), "%s", a.name);
    rc = ctl_call(c, GP_OP_ADMIN_NODE_READMIT->address, &msg_id_request_desc, &req,
                  &msg_id_request_desc, &out);
    if (rc == GPCTL_OK)
        rc = show_result(c, a.e, &msg_id_request_desc, &out, "readmitted");
    gp_msg_clear(&msg_id_request_desc, &out);
    return rc;
}

/* ---- cordon, drain, uncordon, release ------------------------------------------------- */

/* gpctl cordon|drain|uncordon|release node NAME: an operator's mode; the
 * registry answers the transition (prev -> state). */
static int
node_mode(gpctl *c, const char *verb, const gp_op *op, const char *done, int argc, char **argv)
{
    edit_args      a;
    msg_id_request req = {0};
    msg_node_state out = {0};
    int            rc = parse_target(verb, argc, argv, true, &a);

    if (rc == GPCTL_OK && strcmp(a.e->name, "node") != 0)
        rc = usage_error(verb, "only a node can be %s, not a %s", done, a.e->name);
    if (rc == GPCTL_OK && argc > 2)
        rc = usage_error(verb, "unexpected argument \"%s\"", argv[2]);
    if (rc == GPCTL_OK && strlen(a.name) >= sizeof(req.id))
        rc = usage_error(verb, "node name longer than %zu bytes", sizeof(req.id) - 1);
    if (rc == GPCTL_OK)
        rc = ctl_connect(c);
    if (rc != GPCTL_OK)
        return rc;
    snprintf(req.id, sizeof(req.id), "%s", a.name);
    rc = ctl_call(c, op->address, &msg_id_request_desc, &req, &msg_node_state_desc, &out);
    if (rc == GPCTL_OK && c->out != OUT_JSON)
        printf("node/%s %s (%s -> %s)\n", out.node, done, msg_node_state_names[out.prev],
               msg_node_state_names[out.state]);
    else if (rc == GPCTL_OK)
        rc = show_result(c, a.e, &msg_node_state_desc, &out, done);
    gp_msg_clear(&msg_node_state_desc, &out);
    return rc;
}

int
cmd_cordon(gpctl *c, int argc, char **argv)
{
    return node_mode(c, "cordon", GP_OP_ADMIN_NODE_CORDON, "cordoned", argc, argv);
}

int
cmd_drain(gpctl *c, int argc, char **argv)
{
    return node_mode(c, "drain", GP_OP_ADMIN_NODE_DRAIN, "draining", argc, argv);
}

int
cmd_uncordon(gpctl *c, int argc, char **argv)
{
    return node_mode(c, "uncordon", GP_OP_ADMIN_NODE_UNCORDON, "uncordoned", argc, argv);
}

int
cmd_release(gpctl *c, int argc, char **argv)
{
    return node_mode(c, "release", GP_OP_ADMIN_NODE_RELEASE, "released", argc, argv);
}
