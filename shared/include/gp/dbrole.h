/* gp/dbrole.h -- PostgreSQL least privilege: the statements that give a
 * service a login role of its own (gp/db.h's roles mode runs them).
 *
 * Roles.  One NOLOGIN role, GP_DB_OWNER_ROLE, owns every table, view,
 * sequence and function of every service: the migrations run as it (SET
 * ROLE), so what they create is its, and what an older database holds is
 * handed to it first.  It has CREATEROLE and nothing else, for the one
 * SECURITY DEFINER function of each tenant-serving service that makes a
 * tenant's role (gp/tenancy.h).  Each service logs in as a role of its own
 * (LOGIN NOINHERIT; never a superuser, CREATEROLE, CREATEDB, REPLICATION
 * or BYPASSRLS, nor a member of the owner: the setup refuses such a role)
 * that holds exactly the privileges of its grants list, plus SELECT on
 * gp_migrations (its schema check), USAGE on the sequences of the tables
 * it may INSERT into (a serial column's default), and on each table with
 * row-level security it may use a policy of every row (named after the
 * role): the service's own work saw every row as the owner and still
 * does, while its tenant queries run under a tenant's role, which the
 * tenant policies filter as before.  NOINHERIT: the tenant roles a service
 * is made a member of (to SET ROLE into them) lend it nothing.
 *
 * Every start of the migration phase revokes what the login held on the
 * owner's objects and grants the list again, so the list is the whole
 * truth: a privilege left out of it is gone, and a grant naming an object
 * that does not exist fails the phase (the service says so and exits).
 *
 * Pure: text only, no I/O.  Role names are checked (lower-case letters,
 * digits, '_'), so they are inlined; grants are static text of the
 * services, checked for plain words only. */
#ifndef GP_DBROLE_H
#define GP_DBROLE_H

#include <stdbool.h>
#include <stddef.h>

#include "gp/buf.h"
#include "gp/err.h"

#define GP_DB_OWNER_ROLE   "gridpool_owner"
/* In a role pattern (pg-user): the service's name. */
#define GP_DB_ROLE_SERVICE "{service}"

/* One privilege of a service's login role, as GRANT spells it:
 * {"SELECT, INSERT, UPDATE", "TABLE jobs"},
 * {"EXECUTE", "FUNCTION gp_tenant_role(text)"}.  A function needs an entry
 * only when PUBLIC's EXECUTE is revoked (the SECURITY DEFINER ones): any
 * other runs with the caller's own table privileges. */
typedef struct gp_grant {
    const char *privileges;
    const char *object;
} gp_grant;

#define GP_GRANT_END {NULL, NULL}

/* [a-z_][a-z0-9_]{0,62}: a role name that needs no quoting. */
bool   gp_dbrole_name_ok(const char *name);
/* pattern with every "{service}" replaced by service, into out.  INVAL
 * when the result is not a role name (gp_dbrole_name_ok), TOOBIG past cap. */
gp_err gp_dbrole_expand(char *out, size_t cap, const char *pattern, const char *service);
/* Every entry has privileges and an object of plain words: letters,
 * digits, '_', ' ', ',', '(', ')'.  NULL (no grants) is fine. */
bool   gp_dbrole_grants_ok(const gp_grant *grants);

/* What the migrator runs before the steps, in one transaction: the owner
 * and the login exist (made when missing), the login is checked (see
 * Roles; a refusal is SQLSTATE 42501 naming the role), the owner may
 * create in the database and its schema public, and everything in public
 * not the owner's (and not an extension's) becomes the owner's.  INVAL on
 * a bad name. */
gp_err gp_dbrole_setup_sql(gp_buf *out, const char *owner, const char *login);
/* What follows it: the login's password set when password is a quoted
 * literal ('...': the SCRAM verifier db.c computes from the password of
 * the service's conninfo, so the cleartext never reaches the server, nor
 * its log), then the session turns into the owner (SET ROLE).  INVAL on a
 * bad name or a password that is not one quoted literal. */
gp_err gp_dbrole_enter_sql(gp_buf *out, const char *owner, const char *login,
                           const char *password);
/* What runs after the steps, as the owner: the login's privileges on the
 * owner's objects revoked, then SELECT on gp_migrations, the list, the
 * sequences and the policies (see Roles); RESET ROLE at the end.  INVAL on
 * a bad name or grant. */
gp_err gp_dbrole_grants_sql(gp_buf *out, const char *owner, const char *login,
                            const gp_grant *grants);

#endif
