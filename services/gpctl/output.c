/* output.c -- tables, JSON arrays and formatting helpers (see output.h). */
#include "output.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- text ----------------------------------------------------------------- */

static int
is_cont(unsigned char c)
{
    return (c & 0xC0) == 0x80;
}

size_t
text_width(const char *s)
{
    size_t w = 0;

    for (; *s != '\0'; s++)
        w += !is_cont((unsigned char)*s);
    return w;
}

/* Byte length of the first `cols` code points of s. */
static size_t
prefix_bytes(const char *s, size_t cols)
{
    size_t i = 0, w = 0;

    while (s[i] != '\0') {
        if (!is_cont((unsigned char)s[i]) && w++ == cols)
            break;
        i++;
    }
    return i;
}

void
text_clean(char *out, size_t n, const char *s, size_t max)
{
    size_t len;

    if (n == 0)
        return;
    s = s != NULL ? s : "";
    len = text_width(s) > max && max > 3 ? prefix_bytes(s, max - 3) : strlen(s);
    if (len > n - 1)
        len = n - 1;
    while (len > 0 && is_cont((unsigned char)s[len]))
        len--;                                  /* never cut inside a code point */
    for (size_t i = 0; i < len; i++)
        out[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? ' ' : s[i];
    out[len] = '\0';
    if (len < strlen(s) && len + 4 <= n)
        memcpy(out + len, "...", 4);
}

/* ---- tables ----------------------------------------------------------------- */

void
table_init(table *t, const char *const *heads)
{
    memset(t, 0, sizeof(*t));
    while (heads[t->ncols] != NULL && t->ncols < TABLE_MAX_COLS) {
        t->head[t->ncols] = heads[t->ncols];
        t->width[t->ncols] = text_width(heads[t->ncols]);
        t->ncols++;
    }
}

static int
table_grow(table *t)
{
    size_t cap = t->cap ? t->cap * 2 : 64;
    char **p = realloc(t->cells, cap * (size_t)t->ncols * sizeof(*p));

    if (p == NULL)
        return -1;
    t->cells = p;
    t->cap = cap;
    return 0;
}

int
table_add(table *t, const char *const *cells)
{
    char   buf[TABLE_MAX_CELL * 4 + 8];
    char **row;

    if (t->nrows == t->cap && table_grow(t) != 0)
        return -1;
    row = t->cells + t->nrows * (size_t)t->ncols;
    for (int i = 0; i < t->ncols; i++) {
        size_t w;

        text_clean(buf, sizeof(buf), cells[i], TABLE_MAX_CELL);
        row[i] = strdup(buf);
        if (row[i] == NULL) {
            while (i-- > 0)
                free(row[i]);
            return -1;
        }
        w = text_width(buf);
        if (w > t->width[i])
            t->width[i] = w;
    }
    t->nrows++;
    return 0;
}

/* Padding is written only before a non-empty cell: no trailing blanks. */
static void
table_line(const table *t, FILE *out, int indent, const char *const *cells)
{
    size_t pending = (size_t)indent;

    for (int i = 0; i < t->ncols; i++) {
        if (cells[i][0] != '\0') {
            fprintf(out, "%*s%s", (int)pending, "", cells[i]);
            pending = 0;
        }
        pending += t->width[i] - text_width(cells[i]) + TABLE_GAP;
    }
    fputc('\n', out);
}

void
table_print(const table *t, FILE *out, int indent)
{
    table_line(t, out, indent, t->head);
    for (size_t r = 0; r < t->nrows; r++)
        table_line(t, out, indent, (const char *const *)(t->cells + r * (size_t)t->ncols));
}

void
table_free(table *t)
{
    for (size_t i = 0; i < t->nrows * (size_t)t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    memset(t, 0, sizeof(*t));
}

/* ---- times and durations ----------------------------------------------------- */

void
fmt_duration(char *buf, size_t n, uint64_t s)
{
    uint64_t m = s / 60, h = s / 3600, d = s / 86400;

    if (s < 120)
        snprintf(buf, n, "%" PRIu64 "s", s);
    else if (s < 600)
        snprintf(buf, n, "%" PRIu64 "m%" PRIu64 "s", m, s % 60);
    else if (h < 3)
        snprintf(buf, n, "%" PRIu64 "m", m);
    else if (h < 8)
        snprintf(buf, n, "%" PRIu64 "h%" PRIu64 "m", h, m % 60);
    else if (h < 48)
        snprintf(buf, n, "%" PRIu64 "h", h);
    else if (d < 8 && h % 24 != 0)
        snprintf(buf, n, "%" PRIu64 "d%" PRIu64 "h", d, h % 24);
    else
        snprintf(buf, n, "%" PRIu64 "d", d);
}

void
fmt_age(char *buf, size_t n, int64_t now_ms, uint64_t then_ms)
{
    if (then_ms == 0)
        snprintf(buf, n, "never");
    else if ((int64_t)then_ms >= now_ms)
        snprintf(buf, n, "0s");
    else
        fmt_duration(buf, n, (uint64_t)(now_ms - (int64_t)then_ms) / 1000);
}

void
fmt_iso8601(char *buf, size_t n, uint64_t ms)
{
    time_t    secs = (time_t)(ms / 1000);
    struct tm tm;

    if (ms == 0 || gmtime_r(&secs, &tm) == NULL) {
        snprintf(buf, n, "%s", "");
        return;
    }
    snprintf(buf, n, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (unsigned)(ms % 1000));
}

void
fmt_hhmm(char *buf, size_t n, int32_t minutes)
{
    snprintf(buf, n, "%02d:%02d", (int)(minutes / 60), (int)(minutes % 60));
}

void
fmt_utc_offset(char *buf, size_t n, int32_t minutes)
{
    int32_t a = minutes < 0 ? -minutes : minutes;

    snprintf(buf, n, "UTC%c%02d:%02d", minutes < 0 ? '-' : '+', (int)(a / 60), (int)(a % 60));
}

/* ---- quantities ------------------------------------------------------------- */

void
fmt_mib(char *buf, size_t n, uint64_t mib)
{
    if (mib < 1024)
        snprintf(buf, n, "%" PRIu64 "MiB", mib);
    else if (mib % 1024 == 0)
        snprintf(buf, n, "%" PRIu64 "GiB", mib / 1024);
    else
        snprintf(buf, n, "%.1fGiB", (double)mib / 1024.0);
}

void
fmt_micros(char *buf, size_t n, int64_t micros)
{
    uint64_t a = micros < 0 ? (uint64_t)0 - (uint64_t)micros : (uint64_t)micros;
    char     frac[8];
    int      len;

    snprintf(frac, sizeof(frac), "%06" PRIu64, a % 1000000);
    for (len = 6; len > 2 && frac[len - 1] == '0'; len--)
        frac[len - 1] = '\0';
    snprintf(buf, n, "%s%" PRIu64 ".%s", micros < 0 ? "-" : "", a / 1000000, frac);
}

void
fmt_energy(char *buf, size_t n, uint64_t mj)
{
    double wh = (double)mj / 3600000.0;

    if (wh < 1000.0)
        snprintf(buf, n, "%.1f Wh", wh);
    else
        snprintf(buf, n, "%.3f kWh", wh / 1000.0);
}

void
fmt_count(char *buf, size_t n, uint64_t v)
{
    char   digits[24], out[32];
    size_t len, o = 0;

    snprintf(digits, sizeof(digits), "%" PRIu64, v);
    len = strlen(digits);
    for (size_t i = 0; i < len; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = digits[i];
    }
    out[o] = '\0';
    snprintf(buf, n, "%s", out);
}

void
fmt_models(char *buf, size_t n, const char *const *models, size_t count)
{
    size_t used = 0;

    snprintf(buf, n, "-");
    for (size_t i = 0; i < count; i++) {
        size_t k = 0, j;

        for (j = 0; j < i && strcmp(models[j], models[i]) != 0; j++)
            ;
        if (j < i)
            continue;                           /* counted with its first */
        for (j = i; j < count; j++)
            k += strcmp(models[j], models[i]) == 0;
        if (used < n) {
            int w = snprintf(buf + used, n - used, "%s%zux%s", used ? "," : "", k,
                             models[i][0] ? models[i] : "?");
            used += w > 0 ? (size_t)w : 0;
        }
    }
}

/* ---- JSON ------------------------------------------------------------------- */

void
json_list_begin(json_list *j, FILE *out)
{
    j->out = out;
    j->n = 0;
    fputc('[', out);
}

void
json_list_item(json_list *j, const char *obj, size_t len)
{
    fputs(j->n++ ? ",\n  " : "\n  ", j->out);
    fwrite(obj, 1, len, j->out);
}

void
json_list_end(json_list *j)
{
    fputs(j->n ? "\n]\n" : "]\n", j->out);
}

gp_err
json_add_raw(gp_buf *b, const char *key, const char *raw)
{
    gp_err rc;

    if (b->n == 0 || b->p[b->n - 1] != '}')
        return GP_EINVAL;
    b->n--;
    rc = gp_buf_puts(b, b->n > 0 && b->p[b->n - 1] == '{' ? "" : ",");
    if (rc == GP_EOK)
        rc = gp_buf_json_str(b, key, strlen(key));
    if (rc == GP_EOK)
        rc = gp_buf_printf(b, ":%s}", raw);
    return rc;
}

gp_err
json_add_str(gp_buf *b, const char *key, const char *value)
{
    gp_buf v;
    gp_err rc;

    gp_buf_init(&v, 0);
    rc = gp_buf_json_str(&v, value, strlen(value));
    if (rc == GP_EOK)
        rc = json_add_raw(b, key, v.p);
    gp_buf_fini(&v);
    return rc;
}
