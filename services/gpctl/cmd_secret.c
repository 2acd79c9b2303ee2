/* cmd_secret.c -- a tenant's secrets through gp.api.<T>.secret.*:
 *
 *   gpctl create secret NAME --tenant T (--from-file F | --from-stdin)
 *   gpctl get secrets [NAME] --tenant T
 *   gpctl delete secret NAME --tenant T
 *
 * A value is read from a file or stdin, never from the command line (it
 * would land in shell history and in every `ps`), is never printed, and
 * is zeroed here once sent.  One final newline is dropped ("echo pw >f"
 * must not put a newline into a password).  Nothing reads a value back:
 * get shows names, sizes and times. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/id.h"
#include "gp/limits.h"
#include "gpctl.h"

typedef struct secret_args {
    const char *name, *tenant, *file;
    bool        from_stdin;
} secret_args;

static int
parse(const char *verb, int argc, char **argv, bool value, secret_args *a)
{
    memset(a, 0, sizeof(*a));
    for (int i = 0; i < argc; i++) {
        if (value && strcmp(argv[i], "--from-stdin") == 0) {
            a->from_stdin = true;
        } else if (argv[i][0] != '-') {
            if (a->name != NULL)
                return usage_error(verb, "unexpected argument \"%s\"", argv[i]);
            a->name = argv[i];
        } else if (i + 1 >= argc) {
            return usage_error(verb, "%s needs a value", argv[i]);
        } else if (strcmp(argv[i], "--tenant") == 0) {
            a->tenant = argv[++i];
        } else if (value && strcmp(argv[i], "--from-file") == 0) {
            a->file = argv[++i];
        } else {
            return usage_error(verb, "unknown option %s%s", argv[i],
                               value ? " (a value comes from --from-file F or --from-stdin)" : "");
        }
    }
    if (a->tenant == NULL || !gp_id_ok(a->tenant))
        return usage_error(verb, "--tenant T: the secret's tenant");
    if (a->name != NULL && !gp_id_ok(a->name))
        return usage_error(verb, "secret NAME: 1 to 63 of [A-Za-z0-9_-]");
    if (value && (a->file != NULL) == a->from_stdin)
        return usage_error(verb, "the value: one of --from-file F or --from-stdin");
    return GPCTL_OK;
}

/* The value into v (at most MSG_SECRET_SET_VALUE_MAXLEN bytes, one final
 * newline dropped); an exit code, the error printed. */
static int
read_value(const secret_args *a, gp_bytes *v)
{
    FILE  *f = a->from_stdin ? stdin : fopen(a->file, "re");
    size_t cap = MSG_SECRET_SET_VALUE_MAXLEN + 2, n;

    if (f == NULL) {
        fprintf(stderr, "gpctl: %s: %s\n", a->file, strerror(errno));
        return GPCTL_FAIL;
    }
    if ((v->p = malloc(cap)) == NULL)
        return GPCTL_FAIL;
    n = fread(v->p, 1, cap, f);
    if (f != stdin)
        fclose(f);
    if (n > 0 && v->p[n - 1] == '\n')
        n -= n > 1 && v->p[n - 2] == '\r' ? 2 : 1;
    v->n = (uint32_t)n;
    if (n == 0 || n > MSG_SECRET_SET_VALUE_MAXLEN) {
        fprintf(stderr, "gpctl: the value must be 1 to %d bytes (%s)\n",
                (int)MSG_SECRET_SET_VALUE_MAXLEN, n == 0 ? "it is empty" : "it is longer");
        return GPCTL_USAGE;
    }
    return GPCTL_OK;
}

static void
secret_row(gpctl *c, table *t, const msg_secret *s)
{
    char size[24], made[32], upd[32];

    snprintf(size, sizeof(size), "%u", s->size);
    fmt_age(made, sizeof(made), c->now_ms, s->created_ms);
    fmt_age(upd, sizeof(upd), c->now_ms, s->updated_ms);
    table_add(t, (const char *const[]){s->name, size, made, upd});
}

static int
show(gpctl *c, const msg_secret *v, uint32_t n)
{
    static const char *const heads[] = {"NAME", "BYTES", "AGE", "UPDATED", NULL};
    table                    t;

    if (n == 0) {
        fprintf(stderr, "No secrets found.\n");
        return GPCTL_OK;
    }
    table_init(&t, heads);
    for (uint32_t i = 0; i < n; i++)
        secret_row(c, &t, &v[i]);
    table_print(&t, stdout, 0);
    table_free(&t);
    return GPCTL_OK;
}

int
cmd_create_secret(gpctl *c, int argc, char **argv)
{
    secret_args    a;
    msg_secret_set q = {0};
    msg_secret     s = {0};
    char           subj[GP_MAX_SUBJECT + 1];
    int            rc = parse("create", argc, argv, true, &a);

    if (rc == GPCTL_OK && a.name == NULL)
        rc = usage_error("create", "missing secret NAME");
    if (rc == GPCTL_OK)
        rc = read_value(&a, &q.value);
    if (rc == GPCTL_OK && gp_op_subjectf(GP_OP_API_SECRET_SET, subj, sizeof(subj), a.tenant) != GP_EOK)
        rc = usage_error("create", "bad tenant %s", a.tenant);
    if (rc == GPCTL_OK)
        rc = ctl_connect(c);
    if (rc == GPCTL_OK) {
        snprintf(q.name, sizeof(q.name), "%s", a.name);
        rc = ctl_call(c, subj, &msg_secret_set_desc, &q, &msg_secret_desc, &s);
    }
    if (q.value.p != NULL)
        explicit_bzero(q.value.p, MSG_SECRET_SET_VALUE_MAXLEN + 2);
    gp_msg_clear(&msg_secret_set_desc, &q);
    if (rc == GPCTL_OK && c->out == OUT_JSON)
        rc = ctl_print_json(&msg_secret_desc, &s);
    else if (rc == GPCTL_OK)
        printf("secret/%s set (%u bytes)\n", s.name, s.size);
    gp_msg_clear(&msg_secret_desc, &s);
    return rc;
}

int
cmd_get_secrets(gpctl *c, int argc, char **argv)
{
    secret_args             a;
    msg_secret_list_request q = {0};
    msg_secret_list         l = {0};
    char                    subj[GP_MAX_SUBJECT + 1];
    int                     rc = parse("get", argc, argv, false, &a);

    if (rc != GPCTL_OK)
        return rc;
    if (gp_op_subjectf(GP_OP_API_SECRET_LIST, subj, sizeof(subj), a.tenant) != GP_EOK)
        return usage_error("get", "bad tenant %s", a.tenant);
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    if (a.name != NULL)
        snprintf(q.name, sizeof(q.name), "%s", a.name);
    rc = ctl_call(c, subj, &msg_secret_list_request_desc, &q, &msg_secret_list_desc, &l);
    if (rc == GPCTL_OK && a.name != NULL && l.items.n == 0) {
        fprintf(stderr, "gpctl: NOTFOUND: tenant %s has no secret %s\n", a.tenant, a.name);
        rc = GPCTL_FAIL;
    } else if (rc == GPCTL_OK && c->out == OUT_JSON) {
        rc = ctl_print_json(&msg_secret_list_desc, &l);
    } else if (rc == GPCTL_OK) {
        rc = show(c, l.items.v, l.items.n);
    }
    gp_msg_clear(&msg_secret_list_desc, &l);
    return rc;
}

int
cmd_delete_secret(gpctl *c, int argc, char **argv)
{
    secret_args    a;
    msg_id_request q = {0};
    msg_deleted    d = {0};
    char           subj[GP_MAX_SUBJECT + 1];
    int            rc = parse("delete", argc, argv, false, &a);

    if (rc == GPCTL_OK && a.name == NULL)
        rc = usage_error("delete", "missing secret NAME");
    if (rc != GPCTL_OK)
        return rc;
    if (gp_op_subjectf(GP_OP_API_SECRET_DELETE, subj, sizeof(subj), a.tenant) != GP_EOK)
        return usage_error("delete", "bad tenant %s", a.tenant);
    if ((rc = ctl_connect(c)) != GPCTL_OK)
        return rc;
    snprintf(q.id, sizeof(q.id), "%s", a.name);
    rc = ctl_call(c, subj, &msg_id_request_desc, &q, &msg_deleted_desc, &d);
    if (rc == GPCTL_OK && c->out == OUT_JSON)
        rc = ctl_print_json(&msg_deleted_desc, &d);
    else if (rc == GPCTL_OK)
        printf("secret/%s deleted\n", d.id);
    gp_msg_clear(&msg_deleted_desc, &d);
    return rc;
}
