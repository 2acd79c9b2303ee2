/* metrics_test.c -- Prometheus text output, series identity, histogram
 * buckets and quantiles, collectors; and the byte buffer's cap. */
#include <string.h>

#include "gp/buf.h"
#include "gp/metrics.h"
#include "test.h"

static int collected;

static void
collect(void *arg)
{
    *(double *)arg = 42;
    collected++;
}

int
main(void)
{
    gp_metrics *m = gp_metrics_new();
    uint64_t   *a = gp_metrics_counter(m, "gp_x_total", "route=\"a\"", "X things");
    uint64_t   *b = gp_metrics_counter(m, "gp_x_total", "route=\"b\"", "X things");
    double     *g = gp_metrics_gauge(m, "gp_g", NULL, "a gauge");
    gp_hist    *h = gp_metrics_hist(m, "gp_lat_seconds", "route=\"a\"", "latency");
    gp_buf      out;

    T_OK(a != NULL && b != NULL && a != b);
    T_OK(gp_metrics_counter(m, "gp_x_total", "route=\"a\"", "X things") == a);
    *a += 3;
    *b += 1;
    for (int i = 0; i < 99; i++)
        gp_hist_observe(h, 0.0007);
    gp_hist_observe(h, 3.0);
    T_OKM(gp_hist_quantile(h, 0.5) > 0.0005 && gp_hist_quantile(h, 0.5) <= 0.001,
          "p50 in the 0.5-1 ms bucket: %g", gp_hist_quantile(h, 0.5));
    T_OKM(gp_hist_quantile(h, 0.999) > 2.5, "p99.9 in the top bucket: %g", gp_hist_quantile(h, 0.999));
    T_OK(gp_metrics_on_collect(m, collect, g) == GP_EOK);
    gp_buf_init(&out, 0);
    T_OK(gp_metrics_render(m, &out) == GP_EOK);
    T_EQ_INT(collected, 1);
    T_OK(strstr(out.p, "# TYPE gp_x_total counter\ngp_x_total{route=\"a\"} 3\ngp_x_total{route=\"b\"} 1\n") != NULL);
    T_OK(strstr(out.p, "gp_g 42\n") != NULL);
    T_OK(strstr(out.p, "gp_lat_seconds_bucket{route=\"a\",le=\"0.001\"} 99\n") != NULL);
    T_OK(strstr(out.p, "gp_lat_seconds_bucket{route=\"a\",le=\"+Inf\"} 100\n") != NULL);
    T_OK(strstr(out.p, "gp_lat_seconds_count{route=\"a\"} 100\n") != NULL);
    {
        const char *p = out.p;
        int         helps = 0;

        while ((p = strstr(p, "# HELP gp_x_total")) != NULL) {
            helps++;
            p++;
        }
        T_EQ_INT(helps, 1);                         /* one HELP per family */
    }
    gp_buf_fini(&out);
    gp_metrics_free(m);

    gp_buf_init(&out, 16);
    T_EQ_INT(gp_buf_append(&out, "0123456789", 10), GP_EOK);
    T_EQ_INT(gp_buf_append(&out, "0123456789", 10), GP_ETOOBIG);   /* cap holds */
    T_EQ_INT(out.n, 10);
    gp_buf_reset(&out);
    T_EQ_INT(gp_buf_json_str(&out, "a\"b\n\x01", 5), GP_EOK);
    T_OK(strcmp(out.p, "\"a\\\"b\\n\\u0001\"") == 0);
    gp_buf_fini(&out);
    return T_DONE();
}
