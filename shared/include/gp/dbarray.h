/* gp/dbarray.h -- PostgreSQL array literals for text[] parameters.
 *
 * Builds the text form that PostgreSQL's array input reads, quoting every
 * element, so callers never rely on values being free of commas, braces,
 * quotes, backslashes or spaces:
 *
 *     gp_buf b = GP_BUF_INIT;
 *     gp_pgarr_begin(&b);
 *     gp_pgarr_add(&b, "a b");        {"a b"
 *     gp_pgarr_add(&b, "c\"d");       {"a b","c\"d"
 *     gp_pgarr_add(&b, NULL);         {"a b","c\"d",NULL
 *     gp_pgarr_end(&b);               {"a b","c\"d",NULL}
 *     ... "WHERE id = ANY($1::text[])" with b.p as the parameter ...
 *
 * An empty array is "{}".  One dimension only; one array per buffer (the
 * literal is the whole buffer).  Errors: TOOBIG past the buffer's cap
 * (the buffer then holds a partial literal: do not send it).  Pure, no
 * shared state, any thread. */
#ifndef GP_DBARRAY_H
#define GP_DBARRAY_H

#include "gp/buf.h"
#include "gp/err.h"

/* Resets b and starts a literal. */
gp_err gp_pgarr_begin(gp_buf *b);
/* Appends one element: v in double quotes with '\' and '"' escaped by a
 * backslash, or NULL (SQL NULL) when v is NULL. */
gp_err gp_pgarr_add(gp_buf *b, const char *v);
/* Closes the literal; b->p is then the parameter text. */
gp_err gp_pgarr_end(gp_buf *b);

#endif
