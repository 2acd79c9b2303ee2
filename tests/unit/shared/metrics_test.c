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

    /* a vector: one series per label value, the same series when asked
     * again; a value that does not fit the label is refused, not cut */
    {
        static const char *const outcomes[] = {"ok", "invalid", "denied"};
        uint64_t *c[3], *again[3];
        double   *gs[2];
        char      big[300];

        m = gp_metrics_new();
        T_EQ_INT(gp_metrics_counters(m, "gp_v_total", "outcome", outcomes, 3, "V", c), GP_EOK);
        T_OK(c[0] && c[1] && c[2] && c[0] != c[1] && c[1] != c[2]);
        T_EQ_INT(gp_metrics_counters(m, "gp_v_total", "outcome", outcomes, 3, "V", again), GP_EOK);
        T_OK(again[0] == c[0] && again[2] == c[2]);
        T_OK(gp_metrics_counter(m, "gp_v_total", "outcome=\"denied\"", "V") == c[2]);
        T_EQ_INT(gp_metrics_gauges(m, "gp_vg", "state", outcomes, 2, "VG", gs), GP_EOK);
        *c[1] += 2;
        *gs[1] = 7;
        gp_buf_init(&out, 0);
        T_OK(gp_metrics_render(m, &out) == GP_EOK);
        T_OK(strstr(out.p, "gp_v_total{outcome=\"invalid\"} 2\n") != NULL);
        T_OK(strstr(out.p, "gp_vg{state=\"invalid\"} 7\n") != NULL);
        gp_buf_fini(&out);
        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        const char *const toolong[] = {"ok", big};
        T_EQ_INT(gp_metrics_counters(m, "gp_w_total", "k", toolong, 2, "W", c), GP_ENOMEM);
        T_OK(c[0] != NULL && c[1] == NULL);
        gp_metrics_free(m);
    }

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
