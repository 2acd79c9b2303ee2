/* gp/buf.h -- a growable byte buffer with a hard cap.
 *
 * Caller storage (gp_buf_init/gp_buf_fini).  Not thread-safe. */
#ifndef GP_BUF_H
#define GP_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "gp/err.h"

typedef struct gp_buf {
    char   *p;          /* data, NUL-terminated for convenience (not counted in n) */
    size_t  n;          /* bytes used */
    size_t  cap;        /* bytes allocated */
    size_t  max;        /* hard cap; 0 = GP_MAX_MSG_BYTES * 4 */
} gp_buf;

#define GP_BUF_INIT {NULL, 0, 0, 0}

void   gp_buf_init(gp_buf *b, size_t max);
void   gp_buf_fini(gp_buf *b);
void   gp_buf_reset(gp_buf *b);                   /* n = 0, keeps memory */
gp_err gp_buf_reserve(gp_buf *b, size_t more);    /* TOOBIG past max */
gp_err gp_buf_append(gp_buf *b, const void *p, size_t n);
gp_err gp_buf_puts(gp_buf *b, const char *s);
gp_err gp_buf_printf(gp_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
gp_err gp_buf_vprintf(gp_buf *b, const char *fmt, va_list ap);
/* Appends s as a JSON string literal (quotes and escapes included). */
gp_err gp_buf_json_str(gp_buf *b, const char *s, size_t n);

#endif
