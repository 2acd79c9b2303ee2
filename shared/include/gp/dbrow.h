/* gp/dbrow.h -- column maps: PostgreSQL rows <-> generated messages.
 *
 * A column map lists, per message field, the SELECT expression that reads
 * it, the column (or columns) it is written to and the parameter
 * expression that writes it.  From one map come the SELECT list, the
 * INSERT ... RETURNING and UPDATE ... RETURNING statements with their
 * text parameters, and the filling of a message from a result row (as
 * text, set with gp_msg_set_text, so the codec's checks apply to what the
 * database returns too).
 *
 * Text forms: scalars as PostgreSQL prints them ("true"/"false", decimal,
 * %.17g for doubles, an enum's name); an array of strings as "a,b,c"
 * (an item holding ',' is INVAL on write).  A field that needs another
 * form (one field in two array columns, say) gives to_text/from_text.
 *
 * A table's key is the map's GP_DBCOL_KEY column, always parameter $1.
 * Table names, expressions and casts are trusted text from the service's
 * own map; only values travel as parameters.  Pure (no I/O), any thread. */
#ifndef GP_DBROW_H
#define GP_DBROW_H

#include <stdbool.h>

#include "gp/buf.h"
#include "gp/codec.h"
#include "gp/err.h"
#include "gp/limits.h"

struct pg_result;

#define GP_DBCOL_KEY  0x1u     /* the key: written as $1, never SET */
#define GP_DBCOL_RO   0x2u     /* computed: read, never written */

/* The field's parameter text, appended to out. */
typedef gp_err gp_dbcol_text_fn(const gp_field *f, const void *msg, gp_buf *out);
/* Sets the field from its column's text. */
typedef gp_err gp_dbcol_set_fn(const gp_field *f, void *msg, const char *text);

typedef struct gp_dbcol {
    const char       *field;     /* message field; NULL ends the map */
    const char       *read;      /* SELECT expression (t is the table) */
    /* Column written, or "a, b" for a field kept in two columns; NULL when
     * read-only. */
    const char       *write;
    /* Parameter expression, "%d" the parameter number ("$%d::int"); for
     * two columns two expressions "x, y" numbering it as "%1$d". */
    const char       *cast;
    unsigned          flags;
    gp_dbcol_text_fn *to_text;   /* NULL: gp_dbrow_field_text */
    gp_dbcol_set_fn  *from_text; /* NULL: gp_dbrow_set_field */
} gp_dbcol;

/* Text parameters of one statement, in one buffer. */
typedef struct gp_dbparams {
    gp_buf      text;
    size_t      off[GP_DB_MAX_PARAMS];
    const char *v[GP_DB_MAX_PARAMS];
    int         n;
} gp_dbparams;

void   gp_dbparams_init(gp_dbparams *p);
void   gp_dbparams_fini(gp_dbparams *p);
/* TOOBIG past GP_DB_MAX_PARAMS. */
gp_err gp_dbparams_add(gp_dbparams *p, const char *s);
/* The values for gp_db_query; valid until the next add or fini. */
const char *const *gp_dbparams_values(gp_dbparams *p);

/* The default text forms above.  INVAL: a string item holding ',', or a
 * field type with no text form (OBJ, BYTES). */
gp_err gp_dbrow_field_text(const gp_field *f, const void *msg, gp_buf *out);
/* Sets field f (top level of d) from text: scalars through
 * gp_msg_set_text, string arrays split at ','.  TOOBIG: more items than
 * the field allows. */
gp_err gp_dbrow_set_field(const gp_msg_desc *d, const gp_field *f, void *msg, const char *text);

/* Number of columns in the map. */
int    gp_dbrow_ncols(const gp_dbcol *cols);
/* Appends "read1, read2, ...". */
gp_err gp_dbrow_select(const gp_dbcol *cols, gp_buf *sql);

/* Appends "INSERT INTO table AS t (key, cols...) VALUES ($1, ...) RETURNING
 * <select list>", or with update "UPDATE table t SET col = ... WHERE
 * key = $1 RETURNING ...", and adds the parameters to p.  Written:
 * on insert the required fields and those whose has-bit is set; on
 * update those whose has-bit is set, except required strings left empty
 * (required fields are always on the wire).  INVAL: an update that sets
 * nothing.  NOTFOUND: a map field missing from d. */
gp_err gp_dbrow_write(const char *table, const gp_msg_desc *d, const gp_dbcol *cols,
                      const void *msg, bool update, gp_buf *sql, gp_dbparams *p);

/* Fills msg from one row of texts, vals[i] for cols[i].  On failure *bad
 * (may be NULL) is the column that failed. */
gp_err gp_dbrow_from_text(const gp_msg_desc *d, const gp_dbcol *cols, const char *const *vals,
                          void *msg, const gp_dbcol **bad);
/* The same from row `row` of a result whose first columns follow the map. */
gp_err gp_dbrow_to_msg(const gp_msg_desc *d, const gp_dbcol *cols, const struct pg_result *res,
                       int row, void *msg, const gp_dbcol **bad);

/* Sets field f of msg from its column's text where the default form does
 * not fit (a bytea holding a message, a custom list); GP_ENOTFOUND: not
 * one of mine, take the default. */
typedef gp_err gp_dbrow_col_fn(const gp_msg_desc *d, const gp_field *f, void *msg,
                               const char *text);

/* Fills msg from row `row` of any result by column name, without a map:
 * a column the message does not carry is skipped, SQL NULL leaves its
 * field unset, a boolean column's t/f is taken as true/false, anything
 * else goes through gp_msg_set_text after set (may be NULL) declined it.
 * A failure is logged with the column and its value. */
gp_err gp_dbrow_named_to_msg(const gp_msg_desc *d, const struct pg_result *res, int row,
                             void *msg, gp_dbrow_col_fn *set);

/* Fills the array field `field` of msg (its items messages) from every
 * row of res by column name (gp_dbrow_named_to_msg each), at most the
 * field's maxItems rows; sets the field's has-bit.  NOTFOUND: msg's type
 * has no such array of messages. */
gp_err gp_dbrow_named_to_array(const gp_msg_desc *d, const char *field,
                               const struct pg_result *res, void *msg);

#endif
