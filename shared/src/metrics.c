/* metrics.c -- Prometheus text exposition (see gp/metrics.h). */
#include "gp/metrics.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/limits.h"

typedef enum { M_COUNTER, M_GAUGE, M_HIST } mkind;

typedef struct series {
    char     *name;
    char     *labels;              /* NULL or the inside of {} */
    char     *help;
    mkind     kind;
    union {
        uint64_t counter;
        double   gauge;
        gp_hist  hist;
    } v;
} series;

struct gp_metrics {
    series                *s[GP_MAX_METRICS];
    int                    n;
    gp_metrics_collect_fn *collect[8];
    void                  *collect_arg[8];
    int                    ncollect;
};

static const double bucket_le[GP_HIST_BUCKETS] = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
};

gp_metrics *
gp_metrics_new(void)
{
    return calloc(1, sizeof(gp_metrics));
}

void
gp_metrics_free(gp_metrics *m)
{
    if (m == NULL)
        return;
    for (int i = 0; i < m->n; i++) {
        free(m->s[i]->name);
        free(m->s[i]->labels);
        free(m->s[i]->help);
        free(m->s[i]);
    }
    free(m);
}

static int
same(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}

static series *
get(gp_metrics *m, const char *name, const char *labels, const char *help, mkind kind)
{
    series *s;

    if (labels != NULL && *labels == '\0')
        labels = NULL;
    for (int i = 0; i < m->n; i++) {
        s = m->s[i];
        if (s->kind == kind && strcmp(s->name, name) == 0 && same(s->labels, labels))
            return s;
    }
    if (m->n >= GP_MAX_METRICS)
        return NULL;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->name = strdup(name);
    s->labels = labels ? strdup(labels) : NULL;
    s->help = strdup(help ? help : name);
    s->kind = kind;
    if (s->name == NULL || s->help == NULL || (labels != NULL && s->labels == NULL)) {
        free(s->name);
        free(s->labels);
        free(s->help);
        free(s);
        return NULL;
    }
    m->s[m->n++] = s;
    return s;
}

uint64_t *
gp_metrics_counter(gp_metrics *m, const char *name, const char *labels, const char *help)
{
    series *s = get(m, name, labels, help, M_COUNTER);
    return s ? &s->v.counter : NULL;
}

double *
gp_metrics_gauge(gp_metrics *m, const char *name, const char *labels, const char *help)
{
    series *s = get(m, name, labels, help, M_GAUGE);
    return s ? &s->v.gauge : NULL;
}

/* The label "key=\"value\"" of series k of a vector; false if it does not fit. */
static bool
vec_label(char *out, size_t len, const char *key, const char *value)
{
    int w = snprintf(out, len, "%s=\"%s\"", key, value);

    return w > 0 && (size_t)w < len;
}

gp_err
gp_metrics_counters(gp_metrics *m, const char *name, const char *key, const char *const *values,
                    int n, const char *help, uint64_t **out)
{
    char   labels[256];
    gp_err rc = GP_EOK;

    for (int k = 0; k < n; k++) {
        out[k] = NULL;
        if (rc == GP_EOK && vec_label(labels, sizeof(labels), key, values[k]))
            out[k] = gp_metrics_counter(m, name, labels, help);
        if (out[k] == NULL)
            rc = GP_ENOMEM;
    }
    return rc;
}

gp_err
gp_metrics_gauges(gp_metrics *m, const char *name, const char *key, const char *const *values,
                  int n, const char *help, double **out)
{
    char   labels[256];
    gp_err rc = GP_EOK;

    for (int k = 0; k < n; k++) {
        out[k] = NULL;
        if (rc == GP_EOK && vec_label(labels, sizeof(labels), key, values[k]))
            out[k] = gp_metrics_gauge(m, name, labels, help);
        if (out[k] == NULL)
            rc = GP_ENOMEM;
    }
    return rc;
}

gp_hist *
gp_metrics_hist(gp_metrics *m, const char *name, const char *labels, const char *help)
{
    series *s = get(m, name, labels, help, M_HIST);
    return s ? &s->v.hist : NULL;
}

void
gp_hist_observe(gp_hist *h, double seconds)
{
    int i = 0;

    while (i < GP_HIST_BUCKETS && seconds > bucket_le[i])
        i++;
    h->counts[i]++;
    h->count++;
    h->sum += seconds;
}

double
gp_hist_quantile(const gp_hist *h, double q)
{
    uint64_t want, seen = 0;

    if (h->count == 0)
        return 0;
    want = (uint64_t)ceil(q * (double)h->count);
    for (int i = 0; i <= GP_HIST_BUCKETS; i++) {
        double lo = i == 0 ? 0 : bucket_le[i - 1];
        double hi = i < GP_HIST_BUCKETS ? bucket_le[i] : bucket_le[GP_HIST_BUCKETS - 1];

        if (seen + h->counts[i] >= want) {
            /* linear interpolation inside the bucket, as Prometheus does */
            double frac = h->counts[i] ? (double)(want - seen) / (double)h->counts[i] : 1;
            return lo + (hi - lo) * frac;
        }
        seen += h->counts[i];
    }
    return bucket_le[GP_HIST_BUCKETS - 1];
}

gp_err
gp_metrics_on_collect(gp_metrics *m, gp_metrics_collect_fn *fn, void *arg)
{
    if (m->ncollect >= 8)
        return GP_ETOOBIG;
    m->collect[m->ncollect] = fn;
    m->collect_arg[m->ncollect++] = arg;
    return GP_EOK;
}

static gp_err
render_hist(const series *s, gp_buf *out)
{
    const char *l = s->labels ? s->labels : "";
    const char *sep = s->labels ? "," : "";
    uint64_t    cum = 0;
    gp_err      rc = GP_EOK;

    for (int i = 0; i < GP_HIST_BUCKETS && rc == GP_EOK; i++) {
        cum += s->v.hist.counts[i];
        rc = gp_buf_printf(out, "%s_bucket{%s%sle=\"%g\"} %llu\n", s->name, l, sep, bucket_le[i],
                           (unsigned long long)cum);
    }
    if (rc == GP_EOK)
        rc = gp_buf_printf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", s->name, l, sep,
                           (unsigned long long)s->v.hist.count);
    if (rc == GP_EOK)
        rc = gp_buf_printf(out, "%s_sum%s%s%s %.6f\n%s_count%s%s%s %llu\n", s->name,
                           s->labels ? "{" : "", l, s->labels ? "}" : "", s->v.hist.sum, s->name,
                           s->labels ? "{" : "", l, s->labels ? "}" : "",
                           (unsigned long long)s->v.hist.count);
    return rc;
}

static gp_err
render_one(const series *s, gp_buf *out)
{
    const char *lo = s->labels ? "{" : "", *l = s->labels ? s->labels : "";
    const char *lc = s->labels ? "}" : "";

    switch (s->kind) {
    case M_COUNTER:
        return gp_buf_printf(out, "%s%s%s%s %llu\n", s->name, lo, l, lc,
                             (unsigned long long)s->v.counter);
    case M_GAUGE:
        return gp_buf_printf(out, "%s%s%s%s %.17g\n", s->name, lo, l, lc, s->v.gauge);
    default:
        return render_hist(s, out);
    }
}

gp_err
gp_metrics_render(gp_metrics *m, gp_buf *out)
{
    static const char *const type_name[] = {"counter", "gauge", "histogram"};
    gp_err rc = GP_EOK;

    for (int i = 0; i < m->ncollect; i++)
        m->collect[i](m->collect_arg[i]);
    /* HELP and TYPE once per family, then every series of it. */
    for (int i = 0; i < m->n && rc == GP_EOK; i++) {
        int first = 1;

        for (int j = 0; j < i && first; j++)
            first = strcmp(m->s[j]->name, m->s[i]->name) != 0;
        if (!first)
            continue;
        rc = gp_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", m->s[i]->name, m->s[i]->help,
                           m->s[i]->name, type_name[m->s[i]->kind]);
        for (int j = i; j < m->n && rc == GP_EOK; j++)
            if (strcmp(m->s[j]->name, m->s[i]->name) == 0)
                rc = render_one(m->s[j], out);
    }
    return rc;
}
