/* gp/metrics.h -- Prometheus text-format metrics for one process.
 *
 * Series are registered once (name + label set) and then updated through
 * the pointer they return: an increment is one add, no lookup.  Values
 * are owned by the registry and live until gp_metrics_free.  Loop thread
 * only; counts made on other threads are copied in by a collector, which
 * runs just before each render. */
#ifndef GP_METRICS_H
#define GP_METRICS_H

#include <stdint.h>

#include "gp/buf.h"
#include "gp/err.h"

typedef struct gp_metrics gp_metrics;

/* Latency histogram, buckets in seconds from 50 us to 10 s. */
#define GP_HIST_BUCKETS 16
typedef struct gp_hist {
    uint64_t counts[GP_HIST_BUCKETS + 1];    /* last = +Inf */
    uint64_t count;
    double   sum;                            /* seconds */
} gp_hist;

typedef void gp_metrics_collect_fn(void *arg);

gp_metrics *gp_metrics_new(void);
void        gp_metrics_free(gp_metrics *m);

/* labels: the inside of {...}, e.g. "route=\"gp.admin.site.get\"", or NULL.
 * Registering the same name and labels again returns the same series.
 * Returns NULL when GP_MAX_METRICS series exist already. */
uint64_t *gp_metrics_counter(gp_metrics *m, const char *name, const char *labels,
                             const char *help);
double   *gp_metrics_gauge(gp_metrics *m, const char *name, const char *labels,
                           const char *help);
gp_hist  *gp_metrics_hist(gp_metrics *m, const char *name, const char *labels,
                          const char *help);

/* One series per value of one label, the way a service counts outcomes:
 * out[k] = name{key="values[k]"} for k < n. Returns GP_EOK, or GP_ENOMEM
 * when the series limit is reached (that out[k] and the rest are NULL) or
 * a label does not fit. */
gp_err gp_metrics_counters(gp_metrics *m, const char *name, const char *key,
                           const char *const *values, int n, const char *help, uint64_t **out);
gp_err gp_metrics_gauges(gp_metrics *m, const char *name, const char *key,
                         const char *const *values, int n, const char *help, double **out);

void   gp_hist_observe(gp_hist *h, double seconds);
/* Quantile estimate (0 < q < 1) from the buckets, in seconds; 0 if empty. */
double gp_hist_quantile(const gp_hist *h, double q);

/* Adds a collector; at most 8. */
gp_err gp_metrics_on_collect(gp_metrics *m, gp_metrics_collect_fn *fn, void *arg);

/* Runs the collectors, then appends every series in text format 0.0.4. */
gp_err gp_metrics_render(gp_metrics *m, gp_buf *out);

#endif
