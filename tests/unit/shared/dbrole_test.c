/* dbrole_test.c -- the roles mode's text (gp/dbrole.h): role names and
 * the {service} pattern, grants of plain words only, the setup (roles made
 * and checked, everything handed to the owner), the entry (the login's
 * password as one quoted literal, SET ROLE) and the grants
 * (revoked, then exactly the list, in order, then sequences and
 * policies).  migrate_test and pgroles_test run the text on PostgreSQL. */
#include <string.h>

#include "gp/dbrole.h"
#include "test.h"

static bool
has(const gp_buf *b, const char *s)
{
    return b->p != NULL && strstr(b->p, s) != NULL;
}

/* Offset of s in b, or -1. */
static long
at(const gp_buf *b, const char *s)
{
    const char *p = b->p != NULL ? strstr(b->p, s) : NULL;

    return p != NULL ? (long)(p - b->p) : -1;
}

static void
t_names(void)
{
    char out[64];

    T_OK(gp_dbrole_name_ok("gridpool_registry"));
    T_OK(gp_dbrole_name_ok("_x9"));
    T_OK(!gp_dbrole_name_ok(""));
    T_OK(!gp_dbrole_name_ok(NULL));
    T_OK(!gp_dbrole_name_ok("9lives"));
    T_OK(!gp_dbrole_name_ok("Gridpool"));                /* would need quoting */
    T_OK(!gp_dbrole_name_ok("grid-pool"));
    T_OK(!gp_dbrole_name_ok("x\"; DROP ROLE postgres; --"));
    T_OK(gp_dbrole_name_ok("a23456789012345678901234567890123456789012345678901234567890123"));
    T_OK(!gp_dbrole_name_ok("a234567890123456789012345678901234567890123456789012345678901234"));

    T_EQ_INT(gp_dbrole_expand(out, sizeof(out), "gridpool_{service}", "scheduler"), GP_EOK);
    T_OKM(strcmp(out, "gridpool_scheduler") == 0, "expanded: %s", out);
    T_EQ_INT(gp_dbrole_expand(out, sizeof(out), "{service}_{service}", "a"), GP_EOK);
    T_OKM(strcmp(out, "a_a") == 0, "every {service}: %s", out);
    T_EQ_INT(gp_dbrole_expand(out, sizeof(out), "svc_plain", "registry"), GP_EOK);
    T_OKM(strcmp(out, "svc_plain") == 0, "no pattern: %s", out);
    T_EQ_INT(gp_dbrole_expand(out, sizeof(out), "gp-{service}", "registry"), GP_EINVAL);
    T_EQ_INT(gp_dbrole_expand(out, sizeof(out), "gridpool_{service}", "Bad"), GP_EINVAL);
    T_EQ_INT(gp_dbrole_expand(out, 8, "gridpool_{service}", "registry"), GP_ETOOBIG);
    T_EQ_INT(gp_dbrole_expand(out, sizeof(out), "{serv", "x"), GP_EINVAL);   /* "{" stays */
}

static void
t_grants_ok(void)
{
    static const gp_grant good[] = {
        {"SELECT, INSERT", "TABLE a, b"},
        {"UPDATE (state, reason)", "TABLE jobs"},
        {"EXECUTE", "FUNCTION f(text, int)"},
        GP_GRANT_END};
    static const gp_grant semi[] = {{"SELECT", "TABLE a; DROP TABLE b"}, GP_GRANT_END};
    static const gp_grant quote[] = {{"SELECT", "TABLE \"a\""}, GP_GRANT_END};
    static const gp_grant dash[] = {{"SELECT", "TABLE a --"}, GP_GRANT_END};
    static const gp_grant noobj[] = {{"SELECT", ""}, GP_GRANT_END};
    static const gp_grant nopriv[] = {{NULL, "TABLE a"}, GP_GRANT_END};

    T_OK(gp_dbrole_grants_ok(good));
    T_OK(gp_dbrole_grants_ok(NULL));
    T_OK(!gp_dbrole_grants_ok(semi));
    T_OK(!gp_dbrole_grants_ok(quote));
    T_OK(!gp_dbrole_grants_ok(dash));
    T_OK(!gp_dbrole_grants_ok(noobj));
    T_OK(!gp_dbrole_grants_ok(nopriv));
}

static void
t_setup(void)
{
    gp_buf b = GP_BUF_INIT;

    T_EQ_INT(gp_dbrole_setup_sql(&b, "gridpool_owner", "gridpool_billing"), GP_EOK);
    T_OK(has(&b, "CREATE ROLE \"gridpool_owner\" NOLOGIN CREATEROLE;"));
    T_OK(has(&b, "CREATE ROLE \"gridpool_billing\" LOGIN NOINHERIT;"));
    T_OK(has(&b, "rolname IN ('gridpool_owner', 'gridpool_billing') AND rolsuper"));
    T_OK(has(&b, "rolcreaterole OR\n             rolcreatedb OR rolreplication OR rolbypassrls"));
    T_OK(has(&b, "pg_has_role('gridpool_billing', 'gridpool_owner', 'MEMBER')"));
    T_OK(has(&b, "ERRCODE = '42501'"));
    T_OK(has(&b, "ALTER ROLE \"gridpool_billing\" NOINHERIT;"));
    T_OK(has(&b, "'GRANT CREATE ON DATABASE %I TO \"gridpool_owner\"', current_database()"));
    T_OK(has(&b, "ALTER %s %s OWNER TO \"gridpool_owner\""));
    T_OK(has(&b, "ALTER ROUTINE %s OWNER TO \"gridpool_owner\""));
    T_OK(has(&b, "d.deptype IN ('e', 'a', 'i')"));       /* extensions' and serials' skipped */
    T_OK(has(&b, "GRANT USAGE, CREATE ON SCHEMA public TO \"gridpool_owner\" WITH GRANT OPTION;"));
    /* the checks come before anything is handed over */
    T_OK(at(&b, "RAISE EXCEPTION") < at(&b, "OWNER TO"));
    T_OK(!has(&b, "SET ROLE"));                         /* gp_dbrole_enter_sql's */
    gp_buf_reset(&b);
    T_EQ_INT(gp_dbrole_setup_sql(&b, "gridpool_owner", "gridpool_owner"), GP_EINVAL);
    T_EQ_INT(gp_dbrole_setup_sql(&b, "gridpool_owner", "Postgres"), GP_EINVAL);
    T_EQ_INT(gp_dbrole_setup_sql(&b, "owner'", "x"), GP_EINVAL);
    gp_buf_fini(&b);
}

static void
t_enter(void)
{
    gp_buf b = GP_BUF_INIT;

    T_EQ_INT(gp_dbrole_enter_sql(&b, "gridpool_owner", "gridpool_billing", NULL), GP_EOK);
    T_OKM(b.p != NULL && strcmp(b.p, "SET ROLE \"gridpool_owner\";\n") == 0,
          "no password: SET ROLE alone");
    gp_buf_reset(&b);
    T_EQ_INT(gp_dbrole_enter_sql(&b, "gridpool_owner", "gridpool_billing",
                                 "'SCRAM-SHA-256$4096:c2FsdA==$a:b'"), GP_EOK);
    T_OKM(b.p != NULL && strcmp(b.p, "ALTER ROLE \"gridpool_billing\" PASSWORD "
                                     "'SCRAM-SHA-256$4096:c2FsdA==$a:b';\n"
                                     "SET ROLE \"gridpool_owner\";\n") == 0,
          "the password first, then the owner");
    gp_buf_reset(&b);
    T_EQ_INT(gp_dbrole_enter_sql(&b, "gridpool_owner", "gridpool_billing", "'it''s'"), GP_EOK);
    /* not one quoted literal: refused */
    T_EQ_INT(gp_dbrole_enter_sql(&b, "gridpool_owner", "gridpool_billing", "plain"), GP_EINVAL);
    T_EQ_INT(gp_dbrole_enter_sql(&b, "gridpool_owner", "gridpool_billing", "'a'; DROP ROLE x; '"),
             GP_EINVAL);
    T_EQ_INT(gp_dbrole_enter_sql(&b, "gridpool_owner", "gridpool_billing", "'a''"), GP_EINVAL);
    T_EQ_INT(gp_dbrole_enter_sql(&b, "gridpool_owner", "gridpool_billing", "'"), GP_EINVAL);
    T_EQ_INT(gp_dbrole_enter_sql(&b, "gridpool_owner", "Bad", NULL), GP_EINVAL);
    gp_buf_fini(&b);
}

static void
t_grants(void)
{
    static const gp_grant list[] = {
        {"SELECT, INSERT, UPDATE", "TABLE jobs, attempts"},
        {"SELECT", "TABLE secrets"},
        {"EXECUTE", "FUNCTION gp_tenant_role(text)"},
        GP_GRANT_END};
    static const gp_grant bad[] = {{"SELECT", "TABLE x;"}, GP_GRANT_END};
    gp_buf b = GP_BUF_INIT;
    long   a1, a2, a3;

    T_EQ_INT(gp_dbrole_grants_sql(&b, "gridpool_owner", "gridpool_scheduler", list), GP_EOK);
    T_OK(has(&b, "'REVOKE ALL ON %s FROM \"gridpool_scheduler\"'"));
    T_OK(has(&b, "'REVOKE ALL ON ROUTINE %s FROM \"gridpool_scheduler\"'"));
    T_OK(has(&b, "c.relowner = 'gridpool_owner'::regrole"));      /* the owner's objects only */
    T_OK(has(&b, "GRANT SELECT ON TABLE gp_migrations TO \"gridpool_scheduler\";\n"));
    a1 = at(&b, "GRANT SELECT, INSERT, UPDATE ON TABLE jobs, attempts TO \"gridpool_scheduler\";\n");
    a2 = at(&b, "GRANT SELECT ON TABLE secrets TO \"gridpool_scheduler\";\n");
    a3 = at(&b, "GRANT EXECUTE ON FUNCTION gp_tenant_role(text) TO \"gridpool_scheduler\";\n");
    T_OKM(a1 > 0 && a2 > a1 && a3 > a2, "the list in order, after the revoke (%ld %ld %ld)", a1,
          a2, a3);
    T_OK(at(&b, "REVOKE ALL ON ROUTINE") < a1);
    T_OK(has(&b, "has_table_privilege('gridpool_scheduler', d.refobjid, 'INSERT')"));
    T_OK(has(&b, "'GRANT USAGE ON SEQUENCE %s TO \"gridpool_scheduler\"'"));
    T_OK(has(&b, "'CREATE POLICY \"gridpool_scheduler\" ON %s TO \"gridpool_scheduler\" "
                 "USING (true) WITH CHECK (true)'"));
    T_OK(has(&b, "p.polname = 'gridpool_scheduler'"));           /* made once */
    T_OK(at(&b, "CREATE POLICY") > a3);
    T_OK(b.n > 0 && strcmp(b.p + b.n - strlen("RESET ROLE;\n"), "RESET ROLE;\n") == 0);

    gp_buf_reset(&b);
    T_EQ_INT(gp_dbrole_grants_sql(&b, "gridpool_owner", "gridpool_x", NULL), GP_EOK);
    T_OK(has(&b, "GRANT SELECT ON TABLE gp_migrations TO \"gridpool_x\";\n"));
    T_OK(!has(&b, "GRANT SELECT, INSERT"));
    T_EQ_INT(gp_dbrole_grants_sql(&b, "gridpool_owner", "gridpool_x", bad), GP_EINVAL);
    T_EQ_INT(gp_dbrole_grants_sql(&b, "gridpool_owner", "Bad", list), GP_EINVAL);
    gp_buf_fini(&b);
}

int
main(void)
{
    t_names();
    t_grants_ok();
    t_setup();
    t_enter();
    t_grants();
    return T_DONE();
}
