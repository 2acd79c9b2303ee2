/* gp/tenancy.h -- the PostgreSQL side of sub-tenancy that every service
 * with tenant rows shares (scheduler, billing).
 *
 * Each tenant has a role gpt_<tenant>, a member of gp_tenant (NOLOGIN).  A
 * service's tables enable row-level security with policies for gp_tenant
 * that ask gp_member_of(<a tenant column>); its tenant query path runs in
 * a transaction under SET LOCAL ROLE gp_tenant_role(<tenant>), so
 * PostgreSQL filters what a query returns even if its WHERE forgot to.  A
 * site partner's own login (CREATE ROLE ... LOGIN IN ROLE gpt_<partner>)
 * reads the same rows and nothing else.  The service's own work sees
 * every row: as the tables' owner (one database user), or as its own
 * login role through the policy of every row gp/dbrole.h gives it.
 *
 * GP_TENANCY_SQL creates the role and the two functions if they are
 * missing (never replaces them: another service's database user may own
 * them), so every service's migration may run it; the migrations of all
 * services hold one advisory lock, so two never create them at once.
 * Making roles needs CREATEROLE: gp_tenant_role runs as its owner
 * (SECURITY DEFINER since the scheduler's migration 13: gridpool_owner,
 * which has it), callable only by the roles granted EXECUTE. */
#ifndef GP_TENANCY_H
#define GP_TENANCY_H

/* "gpt_" + a tenant id of at most 59 characters: a role name (63). */
#define GP_TENANT_ROLE_PREFIX "gpt_"

#define GP_TENANCY_SQL                                                                      \
    "DO $d$ BEGIN\n"                                                                        \
    "  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'gp_tenant') THEN\n"           \
    "    CREATE ROLE gp_tenant NOLOGIN;\n"                                                  \
    "  END IF;\n"                                                                           \
    "  IF to_regprocedure('gp_member_of(text)') IS NULL THEN\n"                             \
    "    CREATE FUNCTION gp_member_of(t text) RETURNS boolean LANGUAGE sql STABLE AS $f$\n" \
    "      SELECT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = 'gpt_' || t\n"         \
    "                     AND pg_has_role(r.oid, 'MEMBER'))\n"                             \
    "    $f$;\n"                                                                            \
    "  END IF;\n"                                                                           \
    "  IF to_regprocedure('gp_tenant_role(text)') IS NULL THEN\n"                           \
    "    CREATE FUNCTION gp_tenant_role(t text) RETURNS text LANGUAGE plpgsql AS $f$\n"     \
    "    BEGIN\n"                                                                           \
    "      IF t IS NULL OR t !~ '^[A-Za-z0-9_-]{1,59}$' THEN\n"                             \
    "        RAISE EXCEPTION 'tenant %: not an id', t USING ERRCODE = '22023';\n"           \
    "      END IF;\n"                                                                       \
    "      IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'gpt_' || t) THEN\n"       \
    "        BEGIN\n"                                                                       \
    "          EXECUTE format('CREATE ROLE %I NOLOGIN IN ROLE gp_tenant', 'gpt_' || t);\n" \
    "        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;\n"              \
    "        END;\n"                                                                        \
    "      END IF;\n"                                                                       \
    "      IF NOT pg_has_role(session_user, 'gpt_' || t, 'MEMBER') THEN\n"                  \
    "        EXECUTE format('GRANT %I TO %I', 'gpt_' || t, session_user);\n"                \
    "      END IF;\n"                                                                       \
    "      RETURN 'gpt_' || t;\n"                                                           \
    "    END $f$;\n"                                                                        \
    "  END IF;\n"                                                                           \
    "END $d$;\n"                                                                            \
    "GRANT USAGE ON SCHEMA public TO gp_tenant;\n"

/* The first statement of a tenant's transaction: its role for the rest of
 * the transaction ($1 = the tenant id). */
#define GP_TENANCY_SET_ROLE_SQL "SELECT set_config('role', gp_tenant_role($1), true)"

#endif
