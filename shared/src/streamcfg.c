/* streamcfg.c -- see gp/streamcfg.h. */
#include "gp/streamcfg.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* MiB; 16 TiB at most, so MB x 2^20 stays far inside int64_t. */
#define MB_MAX       16777216LL
#define NAME_MAX_LEN 64

/* The larger of two limits, unlimited (<= 0) the largest of all. */
static int64_t
larger(int64_t want, int64_t have, bool *kept)
{
    *kept = false;
    if (want <= 0)
        return want;
    if (have <= 0 || have > want) {
        *kept = true;
        return have;
    }
    return want;
}

unsigned
gp_stream_limits_merge(const gp_stream_limits *want, const gp_stream_limits *have,
                       gp_stream_limits *out)
{
    gp_stream_limits r;
    unsigned         kept = 0;
    bool             k;

    r.replicas = want->replicas > 0 ? want->replicas : 1;
    if (have->replicas > r.replicas) {
        r.replicas = have->replicas;
        kept |= GP_STREAM_KEPT_REPLICAS;
    }
    r.max_bytes = larger(want->max_bytes, have->max_bytes, &k);
    kept |= k ? GP_STREAM_KEPT_BYTES : 0;
    r.max_age_ns = larger(want->max_age_ns, have->max_age_ns, &k);
    kept |= k ? GP_STREAM_KEPT_AGE : 0;
    r.max_msgs = larger(want->max_msgs, have->max_msgs, &k);
    kept |= k ? GP_STREAM_KEPT_MSGS : 0;
    *out = r;
    return kept;
}

static void
put_limit(char *v, size_t n, int64_t x)
{
    if (x <= 0)
        snprintf(v, n, "unlimited");
    else
        snprintf(v, n, "%lld", (long long)x);
}

int
gp_stream_kept_str(unsigned kept, const gp_stream_limits *want, const gp_stream_limits *out,
                   char *buf, size_t n)
{
    static const struct {
        unsigned    bit;
        const char *name;
        size_t      at;
    } f[] = {
        {GP_STREAM_KEPT_REPLICAS, "replicas", offsetof(gp_stream_limits, replicas)},
        {GP_STREAM_KEPT_BYTES, "max_bytes", offsetof(gp_stream_limits, max_bytes)},
        {GP_STREAM_KEPT_AGE, "max_age_ns", offsetof(gp_stream_limits, max_age_ns)},
        {GP_STREAM_KEPT_MSGS, "max_msgs", offsetof(gp_stream_limits, max_msgs)},
    };
    int    len = 0;
    size_t at = 0;

    if (n > 0)
        buf[0] = '\0';
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        char    o[24], w[24];
        int64_t ov, wv;
        int     k;

        if (!(kept & f[i].bit))
            continue;
        memcpy(&ov, (const char *)out + f[i].at, sizeof(ov));
        memcpy(&wv, (const char *)want + f[i].at, sizeof(wv));
        put_limit(o, sizeof(o), ov);
        put_limit(w, sizeof(w), wv);
        k = snprintf(buf + at, n - at, "%s%s=%s (declared %s)", len > 0 ? " " : "", f[i].name, o,
                     w);
        if (k > 0)
            len += k;
        at = (size_t)len < n ? (size_t)len : (n > 0 ? n - 1 : 0);
    }
    return len;
}

static bool
name_ok(const char *s, size_t len)
{
    if (len == 0 || len > NAME_MAX_LEN)
        return false;
    if (len == 1 && s[0] == '*')
        return true;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

/* One "NAME=MB" of len bytes: INVAL, or OK with its name span and MB. */
static gp_err
entry(const char *s, size_t len, size_t *name_len, int64_t *mb)
{
    const char *eq = memchr(s, '=', len);
    char        num[16], *end;
    size_t      nlen;
    long long   v;

    if (eq == NULL)
        return GP_EINVAL;
    *name_len = (size_t)(eq - s);
    nlen = len - *name_len - 1;
    if (!name_ok(s, *name_len) || nlen == 0 || nlen >= sizeof(num))
        return GP_EINVAL;
    memcpy(num, eq + 1, nlen);
    num[nlen] = '\0';
    if (!isdigit((unsigned char)num[0]))
        return GP_EINVAL;
    v = strtoll(num, &end, 10);
    if (*end != '\0' || v < 1 || v > MB_MAX)
        return GP_EINVAL;
    *mb = v;
    return GP_EOK;
}

gp_err
gp_stream_bytes_spec(const char *spec, const char *name, int64_t *bytes)
{
    int64_t     named = 0, any = 0, mb;
    size_t      nlen, want = strlen(name);
    const char *s = spec;

    while (*s != '\0') {
        const char *comma = strchr(s, ',');
        size_t      len = comma != NULL ? (size_t)(comma - s) : strlen(s);

        if (entry(s, len, &nlen, &mb) != GP_EOK)
            return GP_EINVAL;
        if (nlen == 1 && s[0] == '*')
            any = mb;
        else if (nlen == want && memcmp(s, name, nlen) == 0)
            named = mb;
        if (comma == NULL)
            break;
        s = comma + 1;
        if (*s == '\0')
            return GP_EINVAL; /* a trailing comma */
    }
    if (named > 0 || any > 0)
        *bytes = (named > 0 ? named : any) * 1024 * 1024;
    return GP_EOK;
}

static unsigned
pct(uint64_t have, int64_t max)
{
    if (max <= 0)
        return 0;
    /* have * 100 overflows only past 1.8e17 bytes: beyond any stream */
    return (unsigned)(have * 100 / (uint64_t)max);
}

unsigned
gp_stream_fill_pct(uint64_t bytes, int64_t max_bytes, uint64_t msgs, int64_t max_msgs)
{
    unsigned b = pct(bytes, max_bytes), m = pct(msgs, max_msgs);

    return b > m ? b : m;
}
