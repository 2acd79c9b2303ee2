/* streamcfg_test.c -- a declaration meets an existing stream: the larger
 * of each limit is kept (unlimited the largest), and the bits say which
 * were the stream's; the log line names them; stream-max-bytes-mb lists
 * are read and refused as documented; how full a stream is. */
#include <string.h>

#include "gp/streamcfg.h"
#include "test.h"

#define GIB (1024LL * 1024 * 1024)
#define DAY (86400LL * 1000000000LL)

static void
test_merge(void)
{
    gp_stream_limits want = {.replicas = 1, .max_bytes = 2 * GIB, .max_age_ns = 7 * DAY}, have, out;
    unsigned         kept;

    /* a new or a smaller stream: the declaration as it is */
    have = (gp_stream_limits){.replicas = 1, .max_bytes = GIB, .max_age_ns = DAY, .max_msgs = 0};
    kept = gp_stream_limits_merge(&want, &have, &out);
    T_EQ_INT(kept, 0);
    T_OK(out.replicas == 1 && out.max_bytes == 2 * GIB && out.max_age_ns == 7 * DAY &&
         out.max_msgs == 0);
    /* an operator's more replicas, larger bytes, longer age are kept */
    have = (gp_stream_limits){.replicas = 3, .max_bytes = 5 * GIB, .max_age_ns = 30 * DAY};
    kept = gp_stream_limits_merge(&want, &have, &out);
    T_EQ_INT(kept, GP_STREAM_KEPT_REPLICAS | GP_STREAM_KEPT_BYTES | GP_STREAM_KEPT_AGE);
    T_OK(out.replicas == 3 && out.max_bytes == 5 * GIB && out.max_age_ns == 30 * DAY);
    /* unlimited (-1 bytes, 0 age as nats-server reports them) is the largest */
    have = (gp_stream_limits){.replicas = 1, .max_bytes = -1, .max_age_ns = 0, .max_msgs = -1};
    kept = gp_stream_limits_merge(&want, &have, &out);
    T_EQ_INT(kept, GP_STREAM_KEPT_BYTES | GP_STREAM_KEPT_AGE);
    T_OK(out.max_bytes <= 0 && out.max_age_ns <= 0 && out.max_msgs <= 0);
    /* a declared message limit: the stream's larger one is kept, a smaller raised */
    want.max_msgs = 1000;
    have = (gp_stream_limits){.replicas = 1, .max_bytes = GIB, .max_age_ns = DAY, .max_msgs = 5000};
    kept = gp_stream_limits_merge(&want, &have, &out);
    T_EQ_INT(kept, GP_STREAM_KEPT_MSGS);
    T_EQ_INT(out.max_msgs, 5000);
    have.max_msgs = 10;
    T_EQ_INT(gp_stream_limits_merge(&want, &have, &out), 0);
    T_EQ_INT(out.max_msgs, 1000);
    /* a declared "unlimited" is never lowered to the stream's limit */
    want = (gp_stream_limits){.replicas = 3, .max_bytes = 0, .max_age_ns = 0, .max_msgs = -1};
    have = (gp_stream_limits){.replicas = 1, .max_bytes = GIB, .max_age_ns = DAY, .max_msgs = 7};
    T_EQ_INT(gp_stream_limits_merge(&want, &have, &out), 0);
    T_OK(out.replicas == 3 && out.max_bytes <= 0 && out.max_age_ns <= 0 && out.max_msgs <= 0);
    /* replicas 0 reads as 1; out may alias want */
    want = (gp_stream_limits){.replicas = 0, .max_bytes = GIB};
    have = (gp_stream_limits){.replicas = 0, .max_bytes = GIB};
    T_EQ_INT(gp_stream_limits_merge(&want, &have, &want), 0);
    T_EQ_INT(want.replicas, 1);
}

static void
test_kept_str(void)
{
    gp_stream_limits want = {.replicas = 1, .max_bytes = 2 * GIB, .max_age_ns = DAY},
                     have = {.replicas = 3, .max_bytes = -1, .max_age_ns = DAY}, out;
    char     buf[160], small[16];
    unsigned kept = gp_stream_limits_merge(&want, &have, &out);
    int      n = gp_stream_kept_str(kept, &want, &out, buf, sizeof(buf));

    T_OKM(strcmp(buf, "replicas=3 (declared 1) max_bytes=unlimited (declared 2147483648)") == 0,
          "the kept fields, each with what was declared: \"%s\"", buf);
    T_EQ_INT(n, (long long)strlen(buf));
    T_EQ_INT(gp_stream_kept_str(0, &want, &out, buf, sizeof(buf)), 0);
    T_OK(buf[0] == '\0');
    gp_stream_kept_str(kept, &want, &out, small, sizeof(small));
    T_OKM(strlen(small) == sizeof(small) - 1, "a short buffer is cut, terminated: \"%s\"", small);
}

static void
test_spec(void)
{
    int64_t b = 7;

    T_EQ_INT(gp_stream_bytes_spec("", "JOBS", &b), GP_EOK);
    T_EQ_INT(b, 7); /* nothing named: left as it was */
    T_EQ_INT(gp_stream_bytes_spec("JOBS=512,USAGE=2048", "USAGE", &b), GP_EOK);
    T_EQ_INT(b, 2048LL * 1024 * 1024);
    T_EQ_INT(gp_stream_bytes_spec("JOBS=512,*=64", "FLEET", &b), GP_EOK);
    T_EQ_INT(b, 64LL * 1024 * 1024); /* "*": every stream not named */
    T_EQ_INT(gp_stream_bytes_spec("*=64,JOBS=512", "JOBS", &b), GP_EOK);
    T_EQ_INT(b, 512LL * 1024 * 1024); /* a name beats "*" wherever it is */
    b = 7;
    T_EQ_INT(gp_stream_bytes_spec("JOBS=512", "JOB", &b), GP_EOK);
    T_EQ_INT(b, 7); /* a prefix is not the name */
    T_EQ_INT(gp_stream_bytes_spec("JOBS=512,USAGE=1", "", &b), GP_EOK); /* validation */
    T_EQ_INT(gp_stream_bytes_spec("JOBS", "", &b), GP_EINVAL);
    T_EQ_INT(gp_stream_bytes_spec("JOBS=", "", &b), GP_EINVAL);
    T_EQ_INT(gp_stream_bytes_spec("JOBS=0", "", &b), GP_EINVAL);
    T_EQ_INT(gp_stream_bytes_spec("JOBS=-5", "", &b), GP_EINVAL);
    T_EQ_INT(gp_stream_bytes_spec("JOBS=5x", "", &b), GP_EINVAL);
    T_EQ_INT(gp_stream_bytes_spec("JOBS=16777217", "", &b), GP_EINVAL);
    T_EQ_INT(gp_stream_bytes_spec("=5", "", &b), GP_EINVAL);
    T_EQ_INT(gp_stream_bytes_spec("JO.BS=5", "", &b), GP_EINVAL);
    T_EQ_INT(gp_stream_bytes_spec("JOBS=5,", "", &b), GP_EINVAL);
    T_EQ_INT(gp_stream_bytes_spec("JOBS=5,,USAGE=1", "", &b), GP_EINVAL);
    T_EQ_INT(gp_stream_bytes_spec("JOBS= 5", "", &b), GP_EINVAL);
}

static void
test_fill(void)
{
    T_EQ_INT(gp_stream_fill_pct(500, 0, 7, -1), 0);     /* unlimited: never full */
    T_EQ_INT(gp_stream_fill_pct(899, 1000, 0, -1), 89); /* rounded down */
    T_EQ_INT(gp_stream_fill_pct(900, 1000, 0, -1), 90);
    T_EQ_INT(gp_stream_fill_pct(1000, 1000, 0, -1), 100);
    T_EQ_INT(gp_stream_fill_pct(10, 1000, 95, 100), 95); /* messages the fuller */
    T_EQ_INT(gp_stream_fill_pct(1200, 1000, 0, 0), 120); /* lowered below what it holds */
}

int
main(void)
{
    test_merge();
    test_kept_str();
    test_spec();
    test_fill();
    return T_DONE();
}
