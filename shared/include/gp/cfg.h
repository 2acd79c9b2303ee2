/* gp/cfg.h -- configuration as a table: one line per option.
 *
 * Each option has a name ("nats-url"), a type, a slot in the caller's
 * struct (offsetof + sizeof, so strings are bounded), a default, bounds
 * and a line of documentation.  Sources, lowest first: the defaults, a
 * config file (--config FILE or GP_CONFIG; the same KEY=VALUE format as
 * the env file `make up` writes), the environment (GP_NATS_URL for
 * "nats-url"), then flags (--nats-url=X or --nats-url X).  Over-long
 * strings and out-of-range numbers are errors, never truncated or
 * clamped.  A bool flag may stand alone: --print-routes means true
 * (--print-routes=false and --print-routes false still work; the word after
 * a bare bool flag is its value only when it is a bool word: true false
 * yes no on off 1 0).  --help prints the table; --check-config prints the
 * effective configuration and exits 0 (or 78, EX_CONFIG, when it is
 * invalid).
 *
 * Secrets: an option flagged GP_CFG_F_SECRET (GP_CFG_SECRET_STR) is
 * printed as "****" by --check-config and --help, and every string value
 * printed passes through gp_cfg_mask(), which hides credentials inside
 * URLs (scheme://user:****@host; the userinfo of a nats:// or tls:// URL
 * without a password is a token: ****@host) and conninfo keywords
 * (password=****).  Log lines pass through gp_cfg_mask() too (log.c).
 * Pure: no global state. */
#ifndef GP_CFG_H
#define GP_CFG_H

#include <stddef.h>
#include <stdio.h>

#include "gp/err.h"

typedef enum gp_cfg_type {
    GP_CFG_T_END,
    GP_CFG_T_STR,
    GP_CFG_T_INT,            /* int */
    GP_CFG_T_UINT,           /* unsigned */
    GP_CFG_T_BOOL,           /* bool */
    GP_CFG_T_TABLE           /* a nested table at offset (e.g. the common options) */
} gp_cfg_type;

typedef struct gp_cfg_opt {
    const char               *name;
    gp_cfg_type               type;
    size_t                    offset;
    size_t                    size;
    const char               *def_str;
    long long                 def_num;
    long long                 min;
    long long                 max;
    const char               *doc;
    const struct gp_cfg_opt  *sub;       /* GP_CFG_T_TABLE */
    unsigned                  flags;     /* GP_CFG_F_... */
} gp_cfg_opt;

#define GP_CFG_F_SECRET 1u    /* never printed: --check-config and --help show "****" */

#define GP_CFG_SLOT(T, f) offsetof(T, f), sizeof(((T *)0)->f)
#define GP_CFG_STR(n, T, f, d, doc)          { (n), GP_CFG_T_STR,  GP_CFG_SLOT(T, f), (d), 0, 0, 0, (doc), NULL }
#define GP_CFG_INT(n, T, f, d, lo, hi, doc)  { (n), GP_CFG_T_INT,  GP_CFG_SLOT(T, f), NULL, (d), (lo), (hi), (doc), NULL }
#define GP_CFG_UINT(n, T, f, d, lo, hi, doc) { (n), GP_CFG_T_UINT, GP_CFG_SLOT(T, f), NULL, (d), (lo), (hi), (doc), NULL }
#define GP_CFG_SECRET_STR(n, T, f, d, doc)   { (n), GP_CFG_T_STR,  GP_CFG_SLOT(T, f), (d), 0, 0, 0, (doc), NULL, GP_CFG_F_SECRET }
#define GP_CFG_BOOL(n, T, f, d, doc)         { (n), GP_CFG_T_BOOL, GP_CFG_SLOT(T, f), NULL, (d), 0, 1, (doc), NULL }
#define GP_CFG_TABLE(T, f, tab)              { "", GP_CFG_T_TABLE, GP_CFG_SLOT(T, f), NULL, 0, 0, 0, NULL, (tab) }
#define GP_CFG_END                           { NULL, GP_CFG_T_END, 0, 0, NULL, 0, 0, 0, NULL, NULL }

/* Result of gp_cfg_load: go on, or exit with *exit_code. */
#define GP_CFG_CONTINUE (-1)

/* Loads cfg (zeroed first) from all sources.  Returns OK with *exit_code
 * GP_CFG_CONTINUE when the program should run; OK with *exit_code 0 after
 * --help or --check-config; INVAL with *exit_code 78 after printing why to
 * stderr.  Arguments that are not options are left in argv[*argi..argc)
 * (argi may be NULL when the program takes none: then they are errors). */
gp_err gp_cfg_load(const char *prog, const gp_cfg_opt *opts, void *cfg, int argc, char **argv,
                   int *argi, int *exit_code);

/* The individual steps, for tests and tools. */
void   gp_cfg_defaults(const gp_cfg_opt *opts, void *cfg);
gp_err gp_cfg_set(const gp_cfg_opt *opts, void *cfg, const char *name, const char *value,
                  char *errbuf, size_t errlen);
gp_err gp_cfg_read_file(const gp_cfg_opt *opts, void *cfg, const char *path, char *errbuf,
                        size_t errlen);
void   gp_cfg_print(const gp_cfg_opt *opts, const void *cfg, FILE *out);
void   gp_cfg_help(const char *prog, const gp_cfg_opt *opts, FILE *out);
/* Copies in to out (at most outlen - 1 bytes and a NUL) with the
 * credentials it holds replaced by "****": the password of a URL's
 * userinfo (and the whole userinfo of a nats://, tls://, ws:// or wss://
 * URL without one: a token), and the value of a "password" keyword
 * (conninfo "password=x", "password = 'x y'", URI query "?password=x").
 * Returns strlen(out). */
size_t gp_cfg_mask(const char *in, char *out, size_t outlen);
/* "nats-url" -> "GP_NATS_URL" */
void   gp_cfg_env_name(const char *name, char *out, size_t outlen);
/* A per-service identity: each "{service}" in `in` becomes `service`
 * ("gridpool_{service}" -> "gridpool_scheduler"), so one environment
 * serves every service of a host.  TOOBIG if out would not hold it. */
gp_err gp_cfg_subst_service(const char *in, const char *service, char *out, size_t outlen);
/* A secret's file (a password, a key): its first line, without the line
 * end, into out.  NOTFOUND when unreadable, TOOBIG when the line does not
 * fit (out is wiped then).  Blocking: read at start, before the loop. */
gp_err gp_cfg_read_secret(const char *path, char *out, size_t outlen);

#endif
