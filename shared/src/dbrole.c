/* dbrole.c -- the text of the roles mode's statements (gp/dbrole.h).
 *
 * The catalog loops run in DO blocks: which tables, sequences and
 * functions exist is the database's to say (other services' migrations
 * add theirs), so the text names only the roles.  Objects are filtered to
 * the schema public, where every service's migrations create theirs;
 * an extension's members (pgcrypto's functions) keep their owner. */
#include "gp/dbrole.h"

#include <string.h>

/* Tables, views, materialized views, sequences and foreign tables: what
 * ALTER ... OWNER and GRANT ... ON TABLE/SEQUENCE take. */
#define RELKINDS "('r','p','v','m','S','f')"

bool
gp_dbrole_name_ok(const char *name)
{
    size_t n = 0;

    if (name == NULL || !((name[0] >= 'a' && name[0] <= 'z') || name[0] == '_'))
        return false;
    for (; name[n] != '\0'; n++)
        if (!((name[n] >= 'a' && name[n] <= 'z') || (name[n] >= '0' && name[n] <= '9') ||
              name[n] == '_'))
            return false;
    return n <= 63;
}

gp_err
gp_dbrole_expand(char *out, size_t cap, const char *pattern, const char *service)
{
    size_t      n = 0, tl = strlen(GP_DB_ROLE_SERVICE);
    const char *p = pattern;

    if (out == NULL || cap == 0 || pattern == NULL || service == NULL)
        return GP_EINVAL;
    while (*p != '\0') {
        const char *add = p;
        size_t      len = 1;

        if (strncmp(p, GP_DB_ROLE_SERVICE, tl) == 0) {
            add = service;
            len = strlen(service);
            p += tl;
        } else {
            p++;
        }
        if (n + len >= cap)
            return GP_ETOOBIG;
        memcpy(out + n, add, len);
        n += len;
    }
    out[n] = '\0';
    return gp_dbrole_name_ok(out) ? GP_EOK : GP_EINVAL;
}

static bool
words_ok(const char *s)
{
    if (s == NULL || s[0] == '\0')
        return false;
    for (; *s != '\0'; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              strchr("_ ,()", *s) != NULL))
            return false;
    return true;
}

bool
gp_dbrole_grants_ok(const gp_grant *grants)
{
    for (const gp_grant *g = grants; g != NULL && (g->privileges || g->object); g++)
        if (!words_ok(g->privileges) || !words_ok(g->object))
            return false;
    return true;
}

/* The roles exist and the login is one a service may log in as. */
static gp_err
setup_roles(gp_buf *b, const char *o, const char *l)
{
    return gp_buf_printf(b,
        "  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '%s') THEN\n"
        "    CREATE ROLE \"%s\" NOLOGIN CREATEROLE;\n"
        "  END IF;\n"
        "  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '%s') THEN\n"
        "    CREATE ROLE \"%s\" LOGIN NOINHERIT;\n"
        "  END IF;\n"
        "  IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname IN ('%s', '%s') AND rolsuper) OR\n"
        "     EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '%s' AND (rolcreaterole OR\n"
        "             rolcreatedb OR rolreplication OR rolbypassrls)) OR\n"
        "     pg_has_role('%s', '%s', 'MEMBER') THEN\n"
        "    RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = 'role %s may do more than its "
        "grants (a superuser, CREATEROLE, CREATEDB, REPLICATION, BYPASSRLS or a member of %s; "
        "or %s is a superuser): a service logs in as a role of its own';\n"
        "  END IF;\n"
        "  ALTER ROLE \"%s\" NOLOGIN CREATEROLE;\n"
        "  ALTER ROLE \"%s\" NOINHERIT;\n"
        "  EXECUTE format('GRANT CREATE ON DATABASE %%I TO \"%s\"', current_database());\n",
        o, o, l, l, o, l, l, l, o, l, o, o, o, l, o);
}

/* Everything in public not the owner's becomes the owner's: tables first
 * (a serial's sequence follows its table: ALTER SEQUENCE refuses it), then
 * the other sequences, views, functions, enums and domains. */
static gp_err
setup_reown(gp_buf *b, const char *o)
{
    return gp_buf_printf(b,
        "  FOR r IN SELECT c.oid::regclass AS x, c.relkind AS k FROM pg_class c\n"
        "      WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN " RELKINDS "\n"
        "        AND c.relowner <> '%s'::regrole AND NOT EXISTS (SELECT 1 FROM pg_depend d\n"
        "          WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid\n"
        "            AND d.deptype IN ('e', 'a', 'i'))\n"
        "  LOOP\n"
        "    EXECUTE format('ALTER %%s %%s OWNER TO \"%s\"', CASE r.k WHEN 'S' THEN 'SEQUENCE'\n"
        "      WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'f' THEN\n"
        "      'FOREIGN TABLE' ELSE 'TABLE' END, r.x);\n"
        "  END LOOP;\n"
        "  FOR r IN SELECT p.oid::regprocedure AS x FROM pg_proc p\n"
        "      WHERE p.pronamespace = 'public'::regnamespace AND p.proowner <> '%s'::regrole\n"
        "        AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass\n"
        "          AND d.objid = p.oid AND d.deptype = 'e')\n"
        "  LOOP\n"
        "    EXECUTE format('ALTER ROUTINE %%s OWNER TO \"%s\"', r.x);\n"
        "  END LOOP;\n"
        "  FOR r IN SELECT t.oid::regtype AS x, t.typtype AS k FROM pg_type t\n"
        "      WHERE t.typnamespace = 'public'::regnamespace AND t.typtype IN ('e', 'd')\n"
        "        AND t.typowner <> '%s'::regrole AND NOT EXISTS (SELECT 1 FROM pg_depend d\n"
        "          WHERE d.classid = 'pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e')\n"
        "  LOOP\n"
        "    EXECUTE format('ALTER %%s %%s OWNER TO \"%s\"', CASE r.k WHEN 'd' THEN 'DOMAIN'\n"
        "      ELSE 'TYPE' END, r.x);\n"
        "  END LOOP;\n",
        o, o, o, o, o, o);
}

gp_err
gp_dbrole_setup_sql(gp_buf *out, const char *owner, const char *login)
{
    gp_err rc;

    if (out == NULL || !gp_dbrole_name_ok(owner) || !gp_dbrole_name_ok(login) ||
        strcmp(owner, login) == 0)
        return GP_EINVAL;
    rc = gp_buf_puts(out, "DO $gp$\nDECLARE r record;\nBEGIN\n");
    rc = rc ? rc : setup_roles(out, owner, login);
    rc = rc ? rc : setup_reown(out, owner);
    rc = rc ? rc : gp_buf_printf(out,
        "END $gp$;\n"
        "GRANT USAGE, CREATE ON SCHEMA public TO \"%s\" WITH GRANT OPTION;\n", owner);
    return rc;
}

/* 'text' with no quote inside but doubled ones: one SQL literal. */
static bool
literal_ok(const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;

    if (n < 2 || s[0] != '\'' || s[n - 1] != '\'')
        return false;
    for (size_t i = 1; i + 1 < n; i++) {
        if (s[i] != '\'')
            continue;
        if (i + 2 >= n || s[i + 1] != '\'')     /* a quote inside is doubled */
            return false;
        i++;
    }
    return true;
}

gp_err
gp_dbrole_enter_sql(gp_buf *out, const char *owner, const char *login, const char *password)
{
    gp_err rc = GP_EOK;

    if (out == NULL || !gp_dbrole_name_ok(owner) || !gp_dbrole_name_ok(login) ||
        (password != NULL && !literal_ok(password)))
        return GP_EINVAL;
    if (password != NULL)
        rc = gp_buf_printf(out, "ALTER ROLE \"%s\" PASSWORD %s;\n", login, password);
    return rc ? rc : gp_buf_printf(out, "SET ROLE \"%s\";\n", owner);
}

/* What the login holds on the owner's objects goes: the list that follows
 * is all it keeps. */
static gp_err
grants_revoke(gp_buf *b, const char *o, const char *l)
{
    return gp_buf_printf(b,
        "DO $gp$\nDECLARE r record;\nBEGIN\n"
        "  FOR r IN SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE ' ELSE 'TABLE ' END ||\n"
        "      c.oid::regclass AS x FROM pg_class c\n"
        "      WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN " RELKINDS "\n"
        "        AND c.relowner = '%s'::regrole\n"
        "  LOOP\n"
        "    EXECUTE format('REVOKE ALL ON %%s FROM \"%s\"', r.x);\n"
        "  END LOOP;\n"
        "  FOR r IN SELECT p.oid::regprocedure AS x FROM pg_proc p\n"
        "      WHERE p.pronamespace = 'public'::regnamespace AND p.proowner = '%s'::regrole\n"
        "  LOOP\n"
        "    EXECUTE format('REVOKE ALL ON ROUTINE %%s FROM \"%s\"', r.x);\n"
        "  END LOOP;\n"
        "END $gp$;\n",
        o, l, o, l);
}

/* The sequences of the tables the login may INSERT into, and a policy of
 * every row on each table with row-level security it may use (made once:
 * CREATE POLICY locks the table). */
static gp_err
grants_follow(gp_buf *b, const char *l)
{
    return gp_buf_printf(b,
        "DO $gp$\nDECLARE r record;\nBEGIN\n"
        "  FOR r IN SELECT DISTINCT s.oid::regclass AS x FROM pg_depend d\n"
        "      JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'\n"
        "      WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass\n"
        "        AND d.deptype IN ('a', 'i') AND has_table_privilege('%s', d.refobjid, 'INSERT')\n"
        "  LOOP\n"
        "    EXECUTE format('GRANT USAGE ON SEQUENCE %%s TO \"%s\"', r.x);\n"
        "  END LOOP;\n"
        "  FOR r IN SELECT c.oid::regclass AS x FROM pg_class c\n"
        "      WHERE c.relnamespace = 'public'::regnamespace AND c.relrowsecurity\n"
        "        AND has_table_privilege('%s', c.oid, 'SELECT, INSERT, UPDATE, DELETE')\n"
        "        AND NOT EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid\n"
        "          AND p.polname = '%s')\n"
        "  LOOP\n"
        "    EXECUTE format('CREATE POLICY \"%s\" ON %%s TO \"%s\" USING (true) WITH CHECK (true)',\n"
        "      r.x);\n"
        "  END LOOP;\n"
        "END $gp$;\n",
        l, l, l, l, l, l);
}

gp_err
gp_dbrole_grants_sql(gp_buf *out, const char *owner, const char *login, const gp_grant *grants)
{
    gp_err rc;

    if (out == NULL || !gp_dbrole_name_ok(owner) || !gp_dbrole_name_ok(login) ||
        strcmp(owner, login) == 0 || !gp_dbrole_grants_ok(grants))
        return GP_EINVAL;
    rc = grants_revoke(out, owner, login);
    rc = rc ? rc : gp_buf_printf(out, "GRANT SELECT ON TABLE gp_migrations TO \"%s\";\n", login);
    for (const gp_grant *g = grants; rc == GP_EOK && g != NULL && g->object != NULL; g++)
        rc = gp_buf_printf(out, "GRANT %s ON %s TO \"%s\";\n", g->privileges, g->object, login);
    rc = rc ? rc : grants_follow(out, login);
    rc = rc ? rc : gp_buf_puts(out, "RESET ROLE;\n");
    return rc;
}
