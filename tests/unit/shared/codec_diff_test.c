/* codec_diff_test.c -- the byte decoder of shared/src/codec.c against the
 * object-tree decoder it replaced (kept verbatim in codec_old.h as the
 * oracle), and its handling of hostile input:
 *   - every generated sample decodes the same with both, through
 *     gp_msg_decode and gp_msg_decode_reply;
 *   - mutated samples (every prefix, every byte replaced by a set of
 *     msgpack headers, bytes inserted and deleted, random multi-byte edits
 *     from a fixed seed) get the same code, the same detail and, when they
 *     decode, the same message from both;
 *   - truncation at every byte offset of a sample is DECODE ("truncated
 *     msgpack", or a count that the bytes left cannot hold) and leaves the
 *     message cleared;
 *   - hostile counts (array32/map32/str32/bin32 claiming more than the
 *     message holds) are refused as DECODE, before any allocation of their
 *     size;
 *   - unknown keys nested deeper than GP_MAX_DEPTH are refused with the key
 *     named, also 100,000 levels deep (no recursion on hostile depth).
 * Every input is decoded from an exact-size heap copy, so the sanitizer
 * build sees any read past the end.
 * The encoder is checked against the msgpack_packer encoder it replaced
 * (also in codec_old.h): the same bytes and the same result for every
 * sample, every message a mutation decoded to, integers, strings, bytes
 * and maps at each form's boundaries, invalid values, buffer caps at every
 * size, and error maps. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec_old.h"
#include "msg_gen.h"
#include "test.h"

static long n_cmp, n_bad, n_ok;
static long n_rc[64];

static long n_enc, n_enc_bad;

/* Both encoders on msg, appending to a buffer that already holds pre bytes
 * and is capped at max (0: the default): same result, same bytes, same
 * buffer length. */
static bool
enc_same(const gp_msg_desc *d, const void *msg, size_t pre, size_t max, const char *what, long k)
{
    gp_buf a, b;
    gp_err ra, rb;
    bool   ok;

    gp_buf_init(&a, max);
    gp_buf_init(&b, max);
    for (size_t i = 0; i < pre; i++)
        gp_buf_append(&a, "P", 1), gp_buf_append(&b, "P", 1);
    ra = gp_msg_encode(d, msg, &a);
    rb = old_msg_encode(d, msg, &b);
    ok = ra == rb && a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0)
         && (a.p == NULL || a.p[a.n] == '\0');
    if (!ok && n_enc_bad++ < 10)
        printf("# encode %s %s #%ld: new %s %zu bytes, old %s %zu bytes\n", d->name, what, k,
               gp_err_name(ra), a.n, gp_err_name(rb), b.n);
    n_enc++;
    gp_buf_fini(&a);
    gp_buf_fini(&b);
    return ok;
}

static bool
all_zero(const void *p, size_t n)
{
    const uint8_t *b = p;

    for (size_t i = 0; i < n; i++)
        if (b[i] != 0)
            return false;
    return true;
}

/* Both decoders on p[0..n): same code, same detail, same message (and the
 * same re-encoding, which carries the has-bits); a failed decode leaves the
 * message zeroed. */
static bool
same(const gp_msg_desc *d, const uint8_t *p, size_t n, bool reply, const char *what, long k)
{
    uint8_t *copy = malloc(n ? n : 1);
    void    *a = calloc(1, d->size), *b = calloc(1, d->size);
    char     ea[512], eb[512];
    gp_err   ra, rb;
    bool     ok;
    gp_buf   ba = GP_BUF_INIT, bb = GP_BUF_INIT;

    if (copy == NULL || a == NULL || b == NULL)
        abort();
    if (n > 0)
        memcpy(copy, p, n);
    ra = reply ? gp_msg_decode_reply(d, copy, n, a, ea, sizeof ea)
               : gp_msg_decode(d, copy, n, a, ea, sizeof ea);
    rb = reply ? old_msg_decode_reply(d, copy, n, b, eb, sizeof eb)
               : old_msg_decode(d, copy, n, b, eb, sizeof eb);
    ok = ra == rb && strcmp(ea, eb) == 0;
    if (ok && ra == GP_EOK)
        ok = gp_msg_equal(d, a, b) && gp_msg_encode(d, a, &ba) == GP_EOK
             && gp_msg_encode(d, b, &bb) == GP_EOK && ba.n == bb.n
             && memcmp(ba.p, bb.p, ba.n) == 0 && enc_same(d, a, 0, 0, what, k);
    else if (ok)
        ok = all_zero(a, d->size);
    if (!ok && n_bad++ < 10)
        printf("# %s %s #%ld (%zu bytes): new %s \"%s\", old %s \"%s\"\n", d->name, what, k, n,
               gp_err_name(ra), ea, gp_err_name(rb), eb);
    n_cmp++;
    n_ok += ok;
    if ((unsigned)ra < 64)
        n_rc[ra]++;
    gp_buf_fini(&ba);
    gp_buf_fini(&bb);
    gp_msg_clear(d, a);
    gp_msg_clear(d, b);
    free(a);
    free(b);
    free(copy);
    return ok;
}


static const uint8_t heads[] = {
    0x00, 0x01, 0x7f, 0x80, 0x81, 0x8f, 0x90, 0x91, 0x9f, 0xa0, 0xa1, 0xa5, 0xbf, 0xc0,
    0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf,
    0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0,
    0xff };

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t
next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Every mutation of one encoded sample; returns the mismatches. */
static long
mutate_all(const gp_msg_desc *d, const uint8_t *e, size_t n)
{
    uint8_t *m = malloc(n + 8);
    long     bad0 = n_bad;

    for (size_t len = 0; len < n; len++) {                      /* every prefix */
        same(d, e, len, false, "prefix", (long)len);
        same(d, e, len, true, "reply prefix", (long)len);
    }
    for (size_t i = 0; i < n; i++) {                            /* every byte replaced */
        for (size_t h = 0; h < sizeof heads + 2; h++) {
            memcpy(m, e, n);
            m[i] = h < sizeof heads ? heads[h] : h == sizeof heads ? (uint8_t)(e[i] ^ 1)
                                                                   : (uint8_t)(e[i] ^ 0x80);
            same(d, m, n, false, "replace", (long)(i * 64 + h));
            if (h % 4 == 0)
                same(d, m, n, true, "reply replace", (long)(i * 64 + h));
        }
        memcpy(m, e, i);                                        /* byte deleted */
        memcpy(m + i, e + i + 1, n - i - 1);
        same(d, m, n - 1, false, "delete", (long)i);
        memcpy(m, e, i);                                        /* byte inserted */
        m[i] = heads[i % sizeof heads];
        memcpy(m + i + 1, e + i, n - i);
        same(d, m, n + 1, false, "insert", (long)i);
    }
    for (int k = 0; k < 300; k++) {                             /* random edits */
        int edits = 1 + (int)(next_rand() % 4);

        memcpy(m, e, n);
        for (int j = 0; j < edits; j++)
            m[next_rand() % n] = (uint8_t)next_rand();
        same(d, m, n, (k & 1) != 0, "random", k);
    }
    memcpy(m, e, n);                                            /* trailing bytes */
    memcpy(m + n, "\x01\xc1\x92", 3);
    same(d, m, n + 1, false, "trailing", 1);
    same(d, m, n + 3, false, "trailing", 3);
    free(m);
    return n_bad - bad0;
}

static void
pack_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str_with_body(pk, s, strlen(s));
}

/* An Echo with its required fields; extra pairs are appended by the caller
 * (npairs counts them). */
static void
echo_head(msgpack_packer *pk, uint32_t extra)
{
    msgpack_pack_map(pk, 4 + extra);
    pack_str(pk, "str"), pack_str(pk, "s");
    pack_str(pk, "i64"), msgpack_pack_int64(pk, -1);
    pack_str(pk, "u64"), msgpack_pack_uint64(pk, 2);
    pack_str(pk, "item");
    msgpack_pack_map(pk, 1);
    pack_str(pk, "name"), pack_str(pk, "n");
}

static gp_err
decode_new(const gp_msg_desc *d, const void *p, size_t n, char *err, size_t errlen)
{
    void    *out = calloc(1, d->size);
    uint8_t *copy = malloc(n ? n : 1);
    gp_err   rc;

    memcpy(copy, p, n);
    rc = gp_msg_decode(d, copy, n, out, err, errlen);
    T_OK(rc == GP_EOK || all_zero(out, d->size));
    gp_msg_clear(d, out);
    free(out);
    free(copy);
    return rc;
}

/* An Echo whose unknown key "zz" (inside item when in_item) holds depth
 * nested containers (maps when maps, else arrays). */
static void
nested(msgpack_sbuffer *sb, int depth, bool maps, bool in_item)
{
    msgpack_packer pk;

    msgpack_sbuffer_clear(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    pack_str(&pk, "str"), pack_str(&pk, "s");
    pack_str(&pk, "i64"), msgpack_pack_int64(&pk, -1);
    pack_str(&pk, "u64"), msgpack_pack_uint64(&pk, 2);
    pack_str(&pk, "item");
    msgpack_pack_map(&pk, in_item ? 2 : 1);
    pack_str(&pk, "name"), pack_str(&pk, "n");
    if (in_item)
        pack_str(&pk, "zz");
    else {
        /* rewrite: top map gets a 5th pair after item */
        sb->data[0] = (char)0x85;
        pack_str(&pk, "zz");
    }
    for (int i = 0; i < depth; i++) {
        if (maps) {
            msgpack_pack_map(&pk, 1);
            pack_str(&pk, "k");
        } else {
            msgpack_pack_array(&pk, 1);
        }
    }
    msgpack_pack_nil(&pk);
}

static void
test_samples(void)
{
    long total_bad = 0, cmp0 = n_cmp;
    int  nsamples = 0;

    for (const msg_sample *s = msg_all; s->desc != NULL; s++, nsamples++) {
        gp_buf b = GP_BUF_INIT;
        long   bad;

        T_OK(gp_msg_encode(s->desc, s->sample, &b) == GP_EOK);
        T_OKM(same(s->desc, (const uint8_t *)b.p, b.n, false, "sample", 0) &&
              same(s->desc, (const uint8_t *)b.p, b.n, true, "reply sample", 0),
              "%s sample: both decoders agree", s->desc->name);
        bad = mutate_all(s->desc, (const uint8_t *)b.p, b.n);
        T_OKM(bad == 0, "%s: %ld of the mutated samples decode differently", s->desc->name, bad);
        total_bad += bad;
        gp_buf_fini(&b);
    }
    printf("# %d samples, %ld comparisons, %ld differ; outcomes: OK %ld, DECODE %ld, TYPE %ld, "
           "MISSING %ld, RANGE %ld, TOOBIG %ld\n", nsamples, n_cmp - cmp0, total_bad,
           n_rc[GP_EOK], n_rc[GP_EDECODE], n_rc[GP_ETYPE], n_rc[GP_EMISSING], n_rc[GP_ERANGE],
           n_rc[GP_ETOOBIG]);
    T_OK(nsamples >= 30);
    /* not vacuous: the mutations reach every outcome */
    T_OK(n_rc[GP_EOK] > 100 && n_rc[GP_EDECODE] > 1000 && n_rc[GP_ETYPE] > 100
         && n_rc[GP_EMISSING] > 10 && n_rc[GP_ERANGE] > 100);
}

static void
test_truncation(void)
{
    const msg_sample *hb = NULL;
    gp_buf            b = GP_BUF_INIT;
    char              err[256];
    size_t            good = 0;

    for (const msg_sample *s = msg_all; s->desc != NULL; s++)
        if (s->desc == &msg_heartbeat_desc)
            hb = s;
    T_OK(hb != NULL && gp_msg_encode(hb->desc, hb->sample, &b) == GP_EOK);
    T_OK(decode_new(hb->desc, b.p, b.n, err, sizeof err) == GP_EOK);
    T_OK(decode_new(hb->desc, b.p, 0, err, sizeof err) == GP_EDECODE
         && strcmp(err, "empty message") == 0);
    for (size_t len = 1; len < b.n; len++) {
        gp_err rc = decode_new(hb->desc, b.p, len, err, sizeof err);

        /* cut inside a container whose count fits the bytes left but not
         * with its siblings': the count is what is wrong */
        if (rc == GP_EDECODE && (strcmp(err, "truncated msgpack") == 0 ||
                                 strcmp(err, "malformed msgpack: a count exceeds the message") == 0))
            good++;
        else
            printf("# heartbeat cut at %zu of %zu: %s \"%s\"\n", len, b.n, gp_err_name(rc), err);
    }
    T_OKM(good == b.n - 1, "heartbeat cut at each of its %zu offsets: DECODE, truncated or "
          "a count exceeding the message (%zu)", b.n - 1, good);
    gp_buf_fini(&b);
}

static void
test_hostile_counts(void)
{
    static const char trunc[] = "truncated msgpack";
    static const char big[] = "malformed msgpack: a count exceeds the message";
    static const struct {
        const char *what;
        const char *key;          /* NULL: the bytes are the whole message */
        uint32_t    extra;        /* pairs claimed beyond the required ones */
        const char *bytes;
        size_t      n;
        gp_err      rc;
        const char *detail;
    } cases[] = {
        { "items: array32 of 2^32-1", "items", 1, "\xdd\xff\xff\xff\xff", 5, GP_EDECODE, trunc },
        { "items: array32 of 4 (within maxItems), nothing after", "items", 1,
          "\xdd\x00\x00\x00\x04", 5, GP_EDECODE, trunc },
        { "items: 5 (more than maxItems 4), all there", "items", 1,
          "\x95\x81\xa4name\xa1""a\x81\xa4name\xa1""a\x81\xa4name\xa1""a\x81\xa4name\xa1""a"
          "\x81\xa4name\xa1""a", 41, GP_ETOOBIG, "items: 5 items, more than 4" },
        { "nums: array32 of 2^32-1 (more than maxItems, not there)", "nums", 1,
          "\xdd\xff\xff\xff\xff\x01", 6, GP_EDECODE, trunc },
        { "nums: array16 of 8, 3 given", "nums", 1, "\xdc\x00\x08\x01\x02\x03", 6,
          GP_EDECODE, trunc },
        { "nums: 3 of 3 given, but the map claims a pair more", "nums", 2,
          "\x93\x01\x02\x03", 4, GP_EDECODE, big },
        { "unknown key: map32 of 2^32-1", "zz", 1, "\xdf\xff\xff\xff\xff", 5, GP_EDECODE, trunc },
        { "unknown key: array32 of 2^32-1", "zz", 1, "\xdd\xff\xff\xff\xff\xc0", 6,
          GP_EDECODE, trunc },
        { "str: str32 of 4 GiB", "str", 1, "\xdb\xff\xff\xff\xff", 5, GP_EDECODE, trunc },
        { "blob: bin32 of 4 GiB", "blob", 1, "\xc6\xff\xff\xff\xf0", 5, GP_EDECODE, trunc },
        { "unknown key: ext32 of 4 GiB", "zz", 1, "\xc9\xff\xff\xff\xff\x01", 6, GP_EDECODE,
          trunc },
        { "top map32 of 2^32-1", NULL, 0, "\xdf\xff\xff\xff\xff\xa1s\xa1s", 9, GP_EDECODE,
          trunc },
        { "top map: a value's count fits, its siblings then do not", NULL, 0,
          "\x82\xa1""a\x93\x01\x02\xa1""b", 8, GP_EDECODE, big },
        { "top array32 of 2^32-1", NULL, 0, "\xdd\xff\xff\xff\xff", 5, GP_EDECODE, trunc },
    };
    msgpack_sbuffer sb;
    msgpack_packer  pk;
    char            err[256];

    msgpack_sbuffer_init(&sb);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gp_err rc;

        msgpack_sbuffer_clear(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cases[i].key != NULL) {
            echo_head(&pk, cases[i].extra);
            pack_str(&pk, cases[i].key);
        }
        msgpack_sbuffer_write(&sb, cases[i].bytes, cases[i].n);
        rc = decode_new(&msg_echo_desc, sb.data, sb.size, err, sizeof err);
        T_OKM(rc == cases[i].rc && strcmp(err, cases[i].detail) == 0, "%s: %s \"%s\"",
              cases[i].what, gp_err_name(rc), err);
        T_OKM(same(&msg_echo_desc, (const uint8_t *)sb.data, sb.size, false, cases[i].what, 0)
              && same(&msg_echo_desc, (const uint8_t *)sb.data, sb.size, true, cases[i].what, 1),
              "%s: as the old decoder", cases[i].what);
    }
    msgpack_sbuffer_destroy(&sb);
}

static void
test_deep_unknown(void)
{
    msgpack_sbuffer sb;
    char            err[256], want[64];

    msgpack_sbuffer_init(&sb);
    for (int maps = 0; maps < 2; maps++) {
        for (int in_item = 0; in_item < 2; in_item++) {
            /* top map is level 1, item level 2: an unknown value may hold
             * GP_MAX_DEPTH - level containers */
            int    room = GP_MAX_DEPTH - 1 - in_item;
            gp_err rc;

            snprintf(want, sizeof want, "%szz: nested deeper than %d", in_item ? "item." : "",
                     GP_MAX_DEPTH);
            /* compared with the old decoder while msgpack-c's stack (32
             * containers, the top map and item included) holds them */
            for (int depth = 0; depth <= 30; depth++) {
                nested(&sb, depth, maps, in_item);
                rc = decode_new(&msg_echo_desc, sb.data, sb.size, err, sizeof err);
                if (depth <= room)
                    T_OKM(rc == GP_EOK, "%s %d deep in an unknown key%s: OK (%s \"%s\")",
                          maps ? "maps" : "arrays", depth, in_item ? " of item" : "",
                          gp_err_name(rc), err);
                else
                    T_OKM(rc == GP_EDECODE && strcmp(err, want) == 0,
                          "%s %d deep in an unknown key%s: DECODE \"%s\" (%s \"%s\")",
                          maps ? "maps" : "arrays", depth, in_item ? " of item" : "", want,
                          gp_err_name(rc), err);
                T_OK(same(&msg_echo_desc, (const uint8_t *)sb.data, sb.size, false, "deep",
                          depth));
            }
            /* Deeper than msgpack-c's own stack (32): the old decoder said
             * NOMEM ("out of memory", a transient error a durable route
             * retries); the byte decoder refuses it like any other depth. */
            for (int depth = 31; depth <= 100000; depth = depth < 64 ? depth + 8 : depth * 10) {
                nested(&sb, depth, maps, in_item);
                rc = decode_new(&msg_echo_desc, sb.data, sb.size, err, sizeof err);
                T_OKM(rc == GP_EDECODE && strcmp(err, want) == 0,
                      "%s %d deep in an unknown key%s: DECODE \"%s\" (%s \"%s\")",
                      maps ? "maps" : "arrays", depth, in_item ? " of item" : "", want,
                      gp_err_name(rc), err);
            }
        }
    }
    msgpack_sbuffer_destroy(&sb);
}

static void
test_reply(void)
{
    static const char *const bodies[] = {
        /* {"error": {"code": "NOTFOUND", "message": "no such node"}} */
        "\x81\xa5""error\x82\xa4""code\xa8NOTFOUND\xa7message\xacno such node",
        /* an Echo field of the wrong type, then the error map */
        "\x82\xa3str\x05\xa5""error\x81\xa4""code\xa6""DENIED",
        /* error that is not a map: decoded as the message */
        "\x85\xa5""error\x01\xa3str\xa1s\xa3i64\xff\xa3u64\x02\xa4item\x81\xa4name\xa1n",
        /* error map without a code, message not a string */
        "\x81\xa5""error\x81\xa7message\x07",
        /* two error keys: the first counts */
        "\x82\xa5""error\x81\xa4""code\xa7TIMEOUT\xa5""error\x81\xa4""code\xa6""EXISTS",
        /* error map nested too deep for a field, still a remote error */
        "\x81\xa5""error\x82\xa4""code\xa5INVAL\xa1x\x91\x91\x91\x91\x91\x91\x91\x91\x90",
    };
    static const gp_err want[] = { GP_ENOTFOUND, GP_EDENIED, GP_EOK, GP_EINTERNAL,
                                   GP_ETIMEOUT, GP_EINVAL };

    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        size_t n = strlen(bodies[i]);
        void  *out = calloc(1, msg_echo_desc.size);
        char   err[256];
        gp_err rc = gp_msg_decode_reply(&msg_echo_desc, bodies[i], n, out, err, sizeof err);

        T_OKM(rc == want[i], "reply %zu: %s \"%s\"", i, gp_err_name(rc), err);
        T_OKM(same(&msg_echo_desc, (const uint8_t *)bodies[i], n, true, "reply", (long)i),
              "reply %zu: as the old decoder", i);
        mutate_all(&msg_echo_desc, (const uint8_t *)bodies[i], n);
        gp_msg_clear(&msg_echo_desc, out);
        free(out);
    }
}


static void
test_encode_samples(void)
{
    long bad0 = n_enc_bad;

    for (const msg_sample *s = msg_all; s->desc != NULL; s++) {
        gp_buf b = GP_BUF_INIT;
        bool   ok = true;

        T_OK(old_msg_encode(s->desc, s->sample, &b) == GP_EOK);
        ok &= enc_same(s->desc, s->sample, 0, 0, "sample", 0);
        ok &= enc_same(s->desc, s->sample, 5, 0, "sample after 5 bytes", 0);
        for (size_t max = 1; max <= b.n + 8; max++)       /* every cap around its size */
            ok &= enc_same(s->desc, s->sample, max % 3, max, "cap", (long)max);
        T_OKM(ok, "%s: encoded as before, also under every cap up to %zu bytes", s->desc->name,
              b.n + 8);
        gp_buf_fini(&b);
    }
    T_OKM(n_enc_bad == bad0, "samples: %ld encodings differ", n_enc_bad - bad0);
}

static void
test_encode_edges(void)
{
    static const int64_t ints[] = {
        0, 1, 31, 32, 127, 128, 255, 256, 65535, 65536, 2147483647, 2147483648LL,
        4294967295LL, 4294967296LL, INT64_MAX, -1, -31, -32, -33, -127, -128, -129,
        -32767, -32768, -32769, INT32_MIN, (int64_t)INT32_MIN - 1, INT64_MIN };
    static const double reals[] = { 0.0, -0.0, 1.5, -2.25, 1e300, 100.0, 100.5, -0.5 };
    msg_echo       m;
    msg_echo_item  items[5];
    char           tags[5][9];
    int64_t        nums[9];
    double         rv[5];
    int32_t        colors[5];
    uint8_t        blob[17];
    long           k = 0, bad0 = n_enc_bad;
    bool           ok = true;

    memset(items, 0, sizeof items);
    memset(tags, 0, sizeof tags);
    for (int i = 0; i < 9; i++)
        nums[i] = ints[i * 3];
    for (int i = 0; i < 5; i++) {
        memcpy(items[i].name, "item-", 5), items[i].name[5] = (char)('0' + i);
        items[i].temp_c = i * 1.25;
        items[i].count = i;
        tags[i][0] = 't', tags[i][1] = (char)('0' + i);
        rv[i] = reals[i];
        colors[i] = i % 3;
    }
    for (int i = 0; i < 17; i++)
        blob[i] = (uint8_t)(i * 37);
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        for (int f = 0; f < 5; f++) {                  /* each integer field */
            memset(&m, 0, sizeof m);
            snprintf(m.str, sizeof m.str, "s");
            snprintf(m.item.name, sizeof m.item.name, "n");
            switch (f) {
            case 0: m.i32 = (int32_t)ints[i]; break;
            case 1: m.i64 = ints[i]; break;
            case 2: m.u32 = (uint32_t)ints[i]; break;
            case 3: m.u64 = (uint64_t)ints[i]; break;
            default: m.level = (int32_t)ints[i]; break;   /* bounded -10..10: RANGE */
            }
            ok &= enc_same(&msg_echo_desc, &m, 0, 0, "int", k++);
        }
    }
    for (int len = 0; len <= 32; len++) {               /* fixstr / str8 */
        memset(&m, 0, sizeof m);
        memset(m.str, 'a' + len % 26, (size_t)len);
        snprintf(m.item.name, sizeof m.item.name, "n");
        ok &= enc_same(&msg_echo_desc, &m, 0, 0, "str", k++);
    }
    memset(&m, 0, sizeof m);                            /* longer than its limit: RANGE */
    memset(m.str, 'x', sizeof m.str);
    ok &= enc_same(&msg_echo_desc, &m, 0, 0, "str over limit", k++);
    for (int all = 0; all < 2; all++) {
        for (uint32_t n = 0; n <= 9; n++) {             /* arrays and bytes, limits passed */
            memset(&m, 0, sizeof m);
            m.has = all ? (uint64_t)-1 >> (64 - 17) : 0; /* all 17 fields: a map16 */
            snprintf(m.str, sizeof m.str, "s");
            snprintf(m.item.name, sizeof m.item.name, "n");
            m.pct = reals[n % 8] < 0 ? 0 : reals[n % 8];
            m.flag = n & 1;
            m.color = (int32_t)(n % 4);                 /* 3: not an enum value: RANGE */
            m.items = (gp_arr){items, n < 5 ? n : 5};
            m.tags = (gp_arr){tags, n < 5 ? n : 5};
            m.nums = (gp_arr){nums, n};
            m.reals = (gp_arr){rv, n < 5 ? n : 5};
            m.colors = (gp_arr){colors, n < 5 ? n : 5};
            m.blob = (gp_bytes){blob, n * 2};
            ok &= enc_same(&msg_echo_desc, &m, 0, 0, "arrays", k++);
            m.items = (gp_arr){NULL, 1};                /* items but no memory: INVAL */
            ok &= enc_same(&msg_echo_desc, &m, 0, 0, "null array", k++);
        }
    }
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        memset(&m, 0, sizeof m);
        m.pct = reals[i];                               /* 0..100 */
        ok &= enc_same(&msg_echo_desc, &m, 0, 0, "real", k++);
    }
    T_OKM(ok && n_enc_bad == bad0, "%ld edge messages encoded as before (%ld differ)", k,
          n_enc_bad - bad0);
}

static void
test_encode_error(void)
{
    static const size_t lens[] = { 0, 1, 31, 32, 255, 256, 257, 300 };
    char msg[400];
    bool ok = true;
    int  k = 0;

    for (int code = 0; code <= GP_EINTERNAL; code++) {
        for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
            for (int utf = 0; utf < 2; utf++) {
                gp_buf a = GP_BUF_INIT, b = GP_BUF_INIT;
                gp_err ra, rb;

                memset(msg, 'm', lens[i]);
                if (utf)                                /* a 2-byte char across 256 */
                    for (size_t j = 1; j + 1 < lens[i]; j += 2)
                        msg[j] = (char)0xc3, msg[j + 1] = (char)0xa9;
                msg[lens[i]] = '\0';
                ra = gp_msg_encode_error((gp_err)code, i == 0 && utf ? NULL : msg, &a);
                rb = old_msg_encode_error((gp_err)code, i == 0 && utf ? NULL : msg, &b);
                ok &= ra == rb && a.n == b.n && memcmp(a.p, b.p, a.n) == 0;
                k++;
                gp_buf_fini(&a);
                gp_buf_fini(&b);
            }
        }
    }
    T_OKM(ok, "%d error maps encoded as before", k);
}

int
main(void)
{
    test_samples();
    test_truncation();
    test_hostile_counts();
    test_deep_unknown();
    test_reply();
    test_encode_samples();
    test_encode_edges();
    test_encode_error();
    T_OKM(n_enc_bad == 0, "%ld encodings compared with the msgpack_packer encoder, %ld differ",
          n_enc, n_enc_bad);
    T_OKM(n_bad == 0, "%ld comparisons with the object-tree decoder, %ld differ", n_cmp, n_bad);
    return T_DONE();
}
