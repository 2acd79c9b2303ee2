/* output.h -- gpctl's pure output helpers: aligned tables sized to their
 * data, JSON arrays, and the formatting of ages, times, sizes and money.
 * No I/O except to the FILE given; no knowledge of messages. */
#ifndef GPCTL_OUTPUT_H
#define GPCTL_OUTPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gp/buf.h"

#define TABLE_MAX_COLS  16
#define TABLE_MAX_CELL  48      /* display columns; longer cells end in "..." */
#define TABLE_GAP       3       /* spaces between columns */

typedef struct table {
    int         ncols;
    const char *head[TABLE_MAX_COLS];
    size_t      width[TABLE_MAX_COLS];
    char      **cells;            /* nrows * ncols, owned */
    size_t      nrows, cap;
} table;

/* heads: NULL-terminated column titles (static strings). */
void   table_init(table *t, const char *const *heads);
/* Adds a row of t->ncols cells (NULL = ""), copied: control characters
 * become spaces, over-long cells are cut.  -1 when out of memory. */
int    table_add(table *t, const char *const *cells);
void   table_print(const table *t, FILE *out, int indent);
void   table_free(table *t);

/* Display width of UTF-8 text (code points). */
size_t text_width(const char *s);
/* Copies s into out (size n), control characters -> ' ', cut to max
 * display columns with a "..." ending when longer. */
void   text_clean(char *out, size_t n, const char *s, size_t max);

/* "45s", "5m3s", "95m", "4h10m", "30h", "3d4h", "120d"; "never" for 0;
 * "0s" when then is in the future. */
void fmt_age(char *buf, size_t n, int64_t now_ms, uint64_t then_ms);
/* A duration in seconds: "42s", "12m5s", "5h3m", "3d4h". */
void fmt_duration(char *buf, size_t n, uint64_t secs);
/* "2026-12-02T08:51:02.123Z"; "" for 0. */
void fmt_iso8601(char *buf, size_t n, uint64_t ms);
/* MiB: "512MiB", "24GiB", "23.5GiB". */
void fmt_mib(char *buf, size_t n, uint64_t mib);
/* Micro-units as a decimal with at least two places: 180000 -> "0.18". */
void fmt_micros(char *buf, size_t n, int64_t micros);
/* Minutes after midnight: 420 -> "07:00". */
void fmt_hhmm(char *buf, size_t n, int32_t minutes);
/* Offset from UTC in minutes: 60 -> "UTC+01:00". */
void fmt_utc_offset(char *buf, size_t n, int32_t minutes);
/* Energy in millijoules: "12.345 kWh" or "950.0 Wh". */
void fmt_energy(char *buf, size_t n, uint64_t mj);
/* A count with thousands separators: 2911 -> "2,911". */
void fmt_count(char *buf, size_t n, uint64_t v);
/* GPU models of one node: {"H100" x8} -> "8xH100"; mixed -> "2xL4,1xH100"
 * (first-seen order); "-" when none. */
void fmt_models(char *buf, size_t n, const char *const *models, size_t count);

/* A JSON array on out, one object per line. */
typedef struct json_list {
    FILE  *out;
    size_t n;
} json_list;

void json_list_begin(json_list *j, FILE *out);
void json_list_item(json_list *j, const char *obj, size_t len);
void json_list_end(json_list *j);

/* b ends with a JSON object: adds "key": "value" before its closing brace. */
gp_err json_add_str(gp_buf *b, const char *key, const char *value);
/* Same with a raw JSON value (number, object, array). */
gp_err json_add_raw(gp_buf *b, const char *key, const char *raw);

#endif
