/* codec_test.c -- the generic msgpack codec (shared/src/codec.c) over the
 * generated descriptors: round trip of every schema sample, every decode
 * error class with its detail, error replies, JSON, set_text, has-bits. */
#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gp/codec.h"
#include "gp/limits.h"
#include "msg_gen.h"
#include "test.h"

static msgpack_sbuffer sb;

static const void *
sample_of(const gp_msg_desc *d)
{
    for (const msg_sample *s = msg_all; s->desc != NULL; s++)
        if (s->desc == d)
            return s->sample;
    fprintf(stderr, "no sample for %s\n", d->name);
    exit(1);
}

static void
put_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str_with_body(pk, s, strlen(s));
}

/* An Echo map holding its required fields (str, i64, u64, item) except the
 * one named key, then key: val() when key is not NULL; skip drops a field. */
static void
mk_echo(const char *skip, const char *key, void (*val)(msgpack_packer *))
{
    static const char *const req[] = { "str", "i64", "u64", "item" };
    msgpack_packer           pk;
    uint32_t                 n = 0;
    bool                     put[4];

    for (int i = 0; i < 4; i++) {
        put[i] = !(skip && strcmp(skip, req[i]) == 0) && !(key && strcmp(key, req[i]) == 0);
        n += put[i];
    }
    msgpack_sbuffer_clear(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, n + (key != NULL));
    if (put[0])
        put_str(&pk, "str"), put_str(&pk, "s");
    if (put[1])
        put_str(&pk, "i64"), msgpack_pack_int64(&pk, -1);
    if (put[2])
        put_str(&pk, "u64"), msgpack_pack_uint64(&pk, 2);
    if (put[3]) {
        put_str(&pk, "item");
        msgpack_pack_map(&pk, 1);
        put_str(&pk, "name"), put_str(&pk, "n");
    }
    if (key != NULL) {
        put_str(&pk, key);
        val(&pk);
    }
}

static void v_int(msgpack_packer *pk) { msgpack_pack_int(pk, 5); }
static void v_neg1(msgpack_packer *pk) { msgpack_pack_int(pk, -1); }
static void v_str(msgpack_packer *pk) { put_str(pk, "x"); }
static void v_nil(msgpack_packer *pk) { msgpack_pack_nil(pk); }
static void v_true(msgpack_packer *pk) { msgpack_pack_true(pk); }
static void v_dbl(msgpack_packer *pk) { msgpack_pack_double(pk, 1.5); }
static void v_i32_hi(msgpack_packer *pk) { msgpack_pack_int64(pk, (int64_t)INT32_MAX + 1); }
static void v_i32_lo(msgpack_packer *pk) { msgpack_pack_int64(pk, (int64_t)INT32_MIN - 1); }
static void v_u32_hi(msgpack_packer *pk) { msgpack_pack_uint64(pk, (uint64_t)UINT32_MAX + 1); }
static void v_i64_hi(msgpack_packer *pk) { msgpack_pack_uint64(pk, (uint64_t)INT64_MAX + 1); }
static void v_11(msgpack_packer *pk) { msgpack_pack_int(pk, 11); }
static void v_m11(msgpack_packer *pk) { msgpack_pack_int(pk, -11); }
static void v_pct_hi(msgpack_packer *pk) { msgpack_pack_double(pk, 100.5); }
static void v_int50(msgpack_packer *pk) { msgpack_pack_int(pk, 50); }
static void v_purple(msgpack_packer *pk) { put_str(pk, "purple"); }
static void v_str33(msgpack_packer *pk) { put_str(pk, "123456789012345678901234567890123"); }
static void v_str32(msgpack_packer *pk) { put_str(pk, "12345678901234567890123456789012"); }
static void v_nul(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "a\0b", 3); }
static void v_bin(msgpack_packer *pk) { msgpack_pack_bin_with_body(pk, "ab", 2); }
static void v_bin17(msgpack_packer *pk) { msgpack_pack_bin_with_body(pk, "12345678901234567", 17); }
static void v_arr0(msgpack_packer *pk) { msgpack_pack_array(pk, 0); }
static void v_map0(msgpack_packer *pk) { msgpack_pack_map(pk, 0); }

static void
v_tags5(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 5);
    for (int i = 0; i < 5; i++)
        put_str(pk, "t");
}

static void
v_tags_long(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 2);
    put_str(pk, "ok");
    put_str(pk, "123456789");
}

static void
v_tags_int(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 2);
    put_str(pk, "ok");
    msgpack_pack_int(pk, 3);
}

static void
v_colors_bad(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 2);
    put_str(pk, "red");
    put_str(pk, "mauve");
}

static void
v_nums_str(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 1);
    put_str(pk, "7");
}

static void
item(msgpack_packer *pk, const char *key, void (*val)(msgpack_packer *))
{
    msgpack_pack_map(pk, key ? 2 : 1);
    put_str(pk, "name");
    put_str(pk, "n");
    if (key) {
        put_str(pk, key);
        val(pk);
    }
}

static void
v_items5(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 5);
    for (int i = 0; i < 5; i++)
        item(pk, NULL, NULL);
}

static void
v_items_bad_temp(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 3);
    item(pk, NULL, NULL);
    item(pk, NULL, NULL);
    item(pk, "temp_c", v_str);
}

static void
v_item_count_hi(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 2);
    put_str(pk, "name");
    put_str(pk, "n");
    put_str(pk, "count");
    msgpack_pack_int(pk, 1001);
}

static void
v_item_noname(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    put_str(pk, "count");
    msgpack_pack_int(pk, 1);
}

static void
v_err_badcode(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 2);
    put_str(pk, "code");
    put_str(pk, "NOPE");
    put_str(pk, "message");
    put_str(pk, "m");
}

static void
v_deep(msgpack_packer *pk)          /* 9 nested arrays under a depth-1 map */
{
    for (int i = 0; i < GP_MAX_DEPTH; i++)
        msgpack_pack_array(pk, 1);
    msgpack_pack_int(pk, 1);
}

static void
v_shallow(msgpack_packer *pk)       /* deepest allowed: the map + 7 arrays */
{
    for (int i = 0; i < GP_MAX_DEPTH - 1; i++)
        msgpack_pack_array(pk, 1);
    msgpack_pack_int(pk, 1);
}

static void
v_item_deep(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 2);
    put_str(pk, "name");
    put_str(pk, "n");
    put_str(pk, "zz");
    v_deep(pk);
}

typedef struct bad_case {
    const char *key;
    void      (*val)(msgpack_packer *);
    const char *skip;
    gp_err      want;
    const char *detail;            /* exact errbuf */
} bad_case;

static const bad_case bad[] = {
    /* wrong type, one per type */
    { "str", v_int, NULL, GP_ETYPE, "str: expected string, got integer" },
    { "flag", v_str, NULL, GP_ETYPE, "flag: expected boolean, got string" },
    { "i32", v_str, NULL, GP_ETYPE, "i32: expected integer, got string" },
    { "i64", v_dbl, NULL, GP_ETYPE, "i64: expected integer, got number" },
    { "u32", v_nil, NULL, GP_ETYPE, "u32: expected integer, got nil" },
    { "u64", v_true, NULL, GP_ETYPE, "u64: expected integer, got boolean" },
    { "pct", v_str, NULL, GP_ETYPE, "pct: expected number, got string" },
    { "color", v_int, NULL, GP_ETYPE, "color: expected string, got integer" },
    { "item", v_arr0, NULL, GP_ETYPE, "item: expected map, got array" },
    { "items", v_map0, NULL, GP_ETYPE, "items: expected array, got map" },
    { "items", v_items_bad_temp, NULL, GP_ETYPE, "items[2].temp_c: expected number, got string" },
    { "tags", v_tags_int, NULL, GP_ETYPE, "tags[1]: expected string, got integer" },
    { "nums", v_nums_str, NULL, GP_ETYPE, "nums[0]: expected integer, got string" },
    { "blob", v_str, NULL, GP_ETYPE, "blob: expected bytes, got string" },
    { "str", v_bin, NULL, GP_ETYPE, "str: expected string, got bytes" },
    /* missing required */
    { NULL, NULL, "u64", GP_EMISSING, "u64: required field missing" },
    { "item", v_item_noname, NULL, GP_EMISSING, "item.name: required field missing" },
    /* lengths */
    { "str", v_str33, NULL, GP_ERANGE, "str: string of 33 bytes, longer than 32" },
    { "str", v_nul, NULL, GP_ERANGE, "str: string contains a NUL byte" },
    { "tags", v_tags_long, NULL, GP_ERANGE, "tags[1]: string of 9 bytes, longer than 8" },
    { "blob", v_bin17, NULL, GP_ERANGE, "blob: 17 bytes, more than 16" },
    { "tags", v_tags5, NULL, GP_ETOOBIG, "tags: 5 items, more than 4" },
    { "items", v_items5, NULL, GP_ETOOBIG, "items: 5 items, more than 4" },
    /* integer ranges and bounds */
    { "i32", v_i32_hi, NULL, GP_ERANGE, "i32: value 2147483648 out of range" },
    { "i32", v_i32_lo, NULL, GP_ERANGE, "i32: value -2147483649 out of range" },
    { "u32", v_u32_hi, NULL, GP_ERANGE, "u32: value 4294967296 out of range" },
    { "i64", v_i64_hi, NULL, GP_ERANGE, "i64: value 9223372036854775808 out of range" },
    { "u64", v_neg1, NULL, GP_ERANGE, "u64: negative value -1 for an unsigned field" },
    { "u32", v_neg1, NULL, GP_ERANGE, "u32: negative value -1 for an unsigned field" },
    { "level", v_11, NULL, GP_ERANGE, "level: value 11 out of range" },
    { "level", v_m11, NULL, GP_ERANGE, "level: value -11 out of range" },
    { "pct", v_pct_hi, NULL, GP_ERANGE, "pct: value 100.5 out of range" },
    { "item", v_item_count_hi, NULL, GP_ERANGE, "item.count: value 1001 out of range" },
    /* enums */
    { "color", v_purple, NULL, GP_ERANGE, "color: \"purple\" is not an allowed value" },
    { "colors", v_colors_bad, NULL, GP_ERANGE, "colors[1]: \"mauve\" is not an allowed value" },
    { "err", v_err_badcode, NULL, GP_ERANGE, "err.code: \"NOPE\" is not an allowed value" },
    /* hostile nesting, even under an unknown key */
    { "zzz", v_deep, NULL, GP_EDECODE, "zzz: nested deeper than 8" },
    { "item", v_item_deep, NULL, GP_EDECODE, "item.zz: nested deeper than 8" },
};

static void
test_roundtrip_samples(void)
{
    int n = 0;

    for (const msg_sample *s = msg_all; s->desc != NULL; s++, n++) {
        const gp_msg_desc *d = s->desc;
        gp_buf             b = GP_BUF_INIT;
        void              *m = calloc(1, d->size);
        char               eb[GP_ERRBUF_LEN];
        gp_err             rc = gp_msg_encode(d, s->sample, &b);

        T_OKM(rc == GP_EOK && b.n > 0, "%s: encodes (%s)", d->name, gp_err_name(rc));
        rc = gp_msg_decode(d, b.p, b.n, m, eb, sizeof eb);
        T_OKM(rc == GP_EOK, "%s: decodes (%s: %s)", d->name, gp_err_name(rc), eb);
        T_OKM(gp_msg_equal(d, s->sample, m), "%s: decoded equals sample", d->name);
        T_OKM(*(uint64_t *)m == *(const uint64_t *)s->sample,
              "%s: has-bits after decode are the sample's", d->name);
        T_OKM(gp_msg_roundtrip_ok(d, s->sample), "%s: gp_msg_roundtrip_ok", d->name);
        gp_msg_clear(d, m);                         /* decode zeroes, never frees */
        for (size_t k = 0; k < b.n; k++) {          /* every prefix is refused */
            rc = gp_msg_decode(d, b.p, k, m, NULL, 0);
            if (rc != GP_EDECODE) {
                T_OKM(0, "%s: prefix of %zu bytes refused (got %s)", d->name, k,
                      gp_err_name(rc));
                break;
            }
        }
        T_OKM(rc == GP_EDECODE, "%s: every truncation is DECODE", d->name);
        gp_msg_clear(d, m);
        free(m);
        gp_buf_fini(&b);
    }
    T_EQ_INT(n, MSG_NMESSAGES);
}

static void
test_bad_cases(void)
{
    for (size_t i = 0; i < GP_NELEM(bad); i++) {
        const bad_case *c = &bad[i];
        msg_echo        m;
        char            eb[GP_ERRBUF_LEN] = "unset";
        gp_err          rc;

        mk_echo(c->skip, c->key, c->val);
        rc = gp_msg_decode(&msg_echo_desc, sb.data, sb.size, &m, eb, sizeof eb);
        T_OKM(rc == c->want && strcmp(eb, c->detail) == 0, "bad %s: %s == %s, \"%s\"",
              c->key ? c->key : c->skip, gp_err_name(rc), gp_err_name(c->want), eb);
        T_OKM(m.has == 0 && m.items.v == NULL && m.str[0] == '\0',
              "bad %s: message left cleared", c->key ? c->key : c->skip);
    }
}

static gp_err
dec_echo(msg_echo *m, char *eb, size_t n)
{
    return gp_msg_decode(&msg_echo_desc, sb.data, sb.size, m, eb, n);
}

static void
test_accepted(void)
{
    msg_echo m;
    char     eb[GP_ERRBUF_LEN];

    mk_echo(NULL, "pct", v_int50);
    T_OK(dec_echo(&m, eb, sizeof eb) == GP_EOK && m.pct == 50.0);      /* int -> number */
    mk_echo(NULL, "str", v_str32);
    T_OK(dec_echo(&m, eb, sizeof eb) == GP_EOK && strlen(m.str) == 32);
    mk_echo(NULL, "zzz", v_shallow);                                   /* unknown, skipped */
    T_OK(dec_echo(&m, eb, sizeof eb) == GP_EOK && m.u64 == 2 && m.i64 == -1);
    mk_echo(NULL, NULL, NULL);
    T_OK(dec_echo(&m, eb, sizeof eb) == GP_EOK && strcmp(m.item.name, "n") == 0);
    T_OK(GP_HAS(&m, MSG_ECHO__I64) && GP_HAS(&m, MSG_ECHO__ITEM) && !GP_HAS(&m, MSG_ECHO__FLAG));
    T_OK(GP_HAS(&m.item, MSG_ECHO_ITEM__NAME) && !GP_HAS(&m.item, MSG_ECHO_ITEM__COUNT));
    mk_echo(NULL, "u64", v_neg1);
    T_OK(dec_echo(&m, NULL, 0) == GP_ERANGE);                          /* NULL errbuf ok */
    gp_msg_clear(&msg_echo_desc, &m);
}

static void
test_framing(void)
{
    static const char bad_byte[] = { (char)0x81, (char)0xa1, 'a', (char)0xc1 };
    static const char array[] = { (char)0x91, 0x01 };
    static const char num[] = { 0x05 };
    static const char intkey[] = { (char)0x81, 0x01, 0x02 };
    static const char huge[] = { (char)0x81, (char)0xa1, 'a', (char)0xdd,
                                 (char)0xff, (char)0xff, (char)0xff, (char)0xff };
    static const char liar[] = { (char)0x82, (char)0xa1, 'a', (char)0xdd, 0, 0, 0, 3, 1, 1, 1 };
    char              eb[GP_ERRBUF_LEN];
    msg_echo          m;
    gp_buf            b = GP_BUF_INIT;

    T_EQ_INT(gp_msg_decode(&msg_echo_desc, bad_byte, sizeof bad_byte, &m, eb, sizeof eb), GP_EDECODE);
    T_OK(strcmp(eb, "malformed msgpack") == 0);
    T_EQ_INT(gp_msg_decode(&msg_echo_desc, array, sizeof array, &m, eb, sizeof eb), GP_EDECODE);
    T_OK(strcmp(eb, "expected a map, got array") == 0);
    T_EQ_INT(gp_msg_decode(&msg_echo_desc, num, sizeof num, &m, eb, sizeof eb), GP_EDECODE);
    T_EQ_INT(gp_msg_decode(&msg_echo_desc, intkey, sizeof intkey, &m, eb, sizeof eb), GP_EDECODE);
    T_OK(strcmp(eb, "map key is integer, not string") == 0);
    T_EQ_INT(gp_msg_decode(&msg_echo_desc, "", 0, &m, eb, sizeof eb), GP_EDECODE);
    /* a 4-byte count claiming 2^32-1 items must not make msgpack-c allocate it */
    T_EQ_INT(gp_msg_decode(&msg_echo_desc, huge, sizeof huge, &m, eb, sizeof eb), GP_EDECODE);
    T_OK(strcmp(eb, "truncated msgpack") == 0);
    T_EQ_INT(gp_msg_decode(&msg_echo_desc, liar, sizeof liar, &m, eb, sizeof eb), GP_EDECODE);
    T_OK(strcmp(eb, "malformed msgpack: a count exceeds the message") == 0);
    T_OK(gp_msg_encode(&msg_echo_desc, sample_of(&msg_echo_desc), &b) == GP_EOK);
    T_OK(gp_buf_append(&b, "\xc0", 1) == GP_EOK);
    T_EQ_INT(gp_msg_decode(&msg_echo_desc, b.p, b.n, &m, eb, sizeof eb), GP_EDECODE);
    T_OK(strcmp(eb, "1 trailing bytes after the message") == 0);
    T_OK(gp_msg_decode(&msg_echo_desc, b.p, b.n - 1, &m, eb, sizeof eb) == GP_EOK);
    T_OK(gp_msg_equal(&msg_echo_desc, &m, sample_of(&msg_echo_desc)));
    gp_msg_clear(&msg_echo_desc, &m);
    gp_buf_fini(&b);
}

static void
v_tags_ok(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 2);
    put_str(pk, "a");
    put_str(pk, "b");
}

static void
v_tags_ok2(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 1);
    put_str(pk, "c");
}

static void
test_duplicates(void)
{
    msgpack_packer pk;
    msg_echo       m;

    msgpack_sbuffer_clear(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 6);
    put_str(&pk, "tags"), v_tags_ok(&pk);
    put_str(&pk, "str"), put_str(&pk, "a");
    put_str(&pk, "i64"), msgpack_pack_int(&pk, 1);
    put_str(&pk, "u64"), msgpack_pack_int(&pk, 1);
    put_str(&pk, "item"), item(&pk, "count", v_int);
    put_str(&pk, "tags"), v_tags_int(&pk);                 /* last wins: an error */
    T_EQ_INT(dec_echo(&m, NULL, 0), GP_ETYPE);
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 9);
    put_str(&pk, "tags"), v_tags_ok(&pk);
    put_str(&pk, "item"), item(&pk, "count", v_int);
    put_str(&pk, "str"), put_str(&pk, "a");
    put_str(&pk, "i64"), msgpack_pack_int(&pk, 1);
    put_str(&pk, "u64"), msgpack_pack_int(&pk, 1);
    put_str(&pk, "blob"), v_bin(&pk);
    put_str(&pk, "blob"), v_bin(&pk);
    put_str(&pk, "item"), item(&pk, NULL, NULL);
    put_str(&pk, "tags"), v_tags_ok2(&pk);
    T_OK(dec_echo(&m, NULL, 0) == GP_EOK && m.item.count == 0 && m.blob.n == 2
         && !GP_HAS(&m.item, MSG_ECHO_ITEM__COUNT));
    T_OK(m.tags.n == 1 && strcmp((const char *)m.tags.v, "c") == 0);
    gp_msg_clear(&msg_echo_desc, &m);
}

static void
test_error_reply(void)
{
    gp_buf           b = GP_BUF_INIT;
    msg_health       h;
    msg_error_reply  er;
    msg_echo         echo;
    char             eb[GP_ERRBUF_LEN];
    char             longmsg[400];

    T_EQ_INT(MSG_ERROR_CODE_NOTFOUND, GP_ENOTFOUND);
    T_EQ_INT(MSG_ERROR_CODE_INTERNAL, GP_EINTERNAL);
    T_OK(gp_msg_encode_error(GP_ENOTFOUND, "no such node: n1", &b) == GP_EOK);
    T_EQ_INT(gp_msg_decode_reply(&msg_health_desc, b.p, b.n, &h, eb, sizeof eb), GP_ENOTFOUND);
    T_OK(strcmp(eb, "no such node: n1") == 0);
    T_OK(h.has == 0 && h.service[0] == '\0');
    T_OK(gp_msg_decode(&msg_error_reply_desc, b.p, b.n, &er, eb, sizeof eb) == GP_EOK);
    T_OK(er.error.code == MSG_ERROR_CODE_NOTFOUND && strcmp(er.error.message, "no such node: n1") == 0);
    T_EQ_INT(gp_msg_decode(&msg_health_desc, b.p, b.n, &h, eb, sizeof eb), GP_EMISSING);
    gp_buf_reset(&b);
    memset(longmsg, 'm', sizeof longmsg - 1);
    longmsg[sizeof longmsg - 1] = '\0';
    T_OK(gp_msg_encode_error(GP_EUNAVAIL, longmsg, &b) == GP_EOK);
    T_OK(gp_msg_decode(&msg_error_reply_desc, b.p, b.n, &er, eb, sizeof eb) == GP_EOK);
    T_EQ_INT(strlen(er.error.message), 256);
    T_EQ_INT(gp_msg_decode_reply(&msg_health_desc, b.p, b.n, &h, eb, 16), GP_EUNAVAIL);
    T_EQ_INT(strlen(eb), 15);
    gp_buf_reset(&b);
    /* RATE_LIMITED's retry hint: a field of the error, and in every client's detail */
    T_EQ_INT(MSG_ERROR_CODE_RATE_LIMITED, GP_ERATE_LIMITED);
    T_OK(strcmp(gp_err_name(GP_ERATE_LIMITED), "RATE_LIMITED") == 0);
    T_OK(gp_msg_encode_error_retry(GP_ERATE_LIMITED, "tenant acme is over its request rate",
                                   40, &b) == GP_EOK);
    T_OK(gp_msg_decode(&msg_error_reply_desc, b.p, b.n, &er, eb, sizeof eb) == GP_EOK);
    T_OK(er.error.code == MSG_ERROR_CODE_RATE_LIMITED && er.error.retry_after_ms == 40 &&
         GP_HAS(&er.error, MSG_ERROR__RETRY_AFTER_MS));
    T_EQ_INT(gp_msg_decode_reply(&msg_health_desc, b.p, b.n, &h, eb, sizeof eb), GP_ERATE_LIMITED);
    T_OKM(strcmp(eb, "tenant acme is over its request rate; retry after 40 ms") == 0,
          "the hint follows the message: %s", eb);
    gp_buf_reset(&b);
    T_OK(gp_msg_encode_error_retry(GP_ERATE_LIMITED, "x", 99999999, &b) == GP_EOK);
    T_OK(gp_msg_decode(&msg_error_reply_desc, b.p, b.n, &er, eb, sizeof eb) == GP_EOK);
    T_OKM(er.error.retry_after_ms == MSG_ERROR_RETRY_AFTER_MS_MAX, "a hint is capped at the "
          "schema's maximum (%u)", (unsigned)er.error.retry_after_ms);
    gp_buf_reset(&b);
    T_OK(gp_msg_encode_error(GP_ENOTFOUND, "gone", &b) == GP_EOK);
    T_OK(gp_msg_decode(&msg_error_reply_desc, b.p, b.n, &er, eb, sizeof eb) == GP_EOK);
    T_OKM(!GP_HAS(&er.error, MSG_ERROR__RETRY_AFTER_MS), "no hint unless one is given");
    T_EQ_INT(gp_msg_decode_reply(&msg_health_desc, b.p, b.n, &h, eb, sizeof eb), GP_ENOTFOUND);
    T_OK(strcmp(eb, "gone") == 0);
    gp_buf_reset(&b);
    T_OK(gp_msg_encode(&msg_error_reply_desc, sample_of(&msg_error_reply_desc), &b) == GP_EOK);
    mk_echo(NULL, "err", v_err_badcode);                 /* "error" not top-level: a field */
    T_EQ_INT(gp_msg_decode_reply(&msg_echo_desc, sb.data, sb.size, &echo, eb, sizeof eb), GP_ERANGE);
    gp_buf_reset(&b);
    T_OK(gp_msg_encode(&msg_health_desc, sample_of(&msg_health_desc), &b) == GP_EOK);
    T_EQ_INT(gp_msg_decode_reply(&msg_health_desc, b.p, b.n, &h, eb, sizeof eb), GP_EOK);
    T_OK(gp_msg_equal(&msg_health_desc, &h, sample_of(&msg_health_desc)));
    gp_msg_clear(&msg_health_desc, &h);
    {
        msgpack_packer pk;
        msgpack_sbuffer_clear(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 1);
        put_str(&pk, "error");
        v_err_badcode(&pk);
        T_EQ_INT(gp_msg_decode_reply(&msg_health_desc, sb.data, sb.size, &h, eb, sizeof eb),
                 GP_EINTERNAL);
        T_OK(strcmp(eb, "m") == 0);
    }
    gp_buf_fini(&b);
}

static void
test_encode_rules(void)
{
    msg_echo m;
    msg_echo o;
    gp_buf   b = GP_BUF_INIT;
    int32_t  colors[2] = { 0, 7 };

    memset(&m, 0, sizeof m);
    strcpy(m.str, "s");
    T_OK(gp_msg_encode(&msg_echo_desc, &m, &b) == GP_EOK);
    T_OK(gp_msg_decode(&msg_echo_desc, b.p, b.n, &o, NULL, 0) == GP_EOK);
    T_OK(!GP_HAS(&o, MSG_ECHO__FLAG) && GP_HAS(&o, MSG_ECHO__I64) && GP_HAS(&o, MSG_ECHO__ITEM));
    T_OK(o.has == ((1u << MSG_ECHO__STR) | (1u << MSG_ECHO__I64) | (1u << MSG_ECHO__U64)
                   | (1u << MSG_ECHO__ITEM)));
    GP_SET_HAS(&m, MSG_ECHO__FLAG);                       /* forces an optional zero */
    gp_buf_reset(&b);
    T_OK(gp_msg_encode(&msg_echo_desc, &m, &b) == GP_EOK);
    T_OK(gp_msg_decode(&msg_echo_desc, b.p, b.n, &o, NULL, 0) == GP_EOK);
    T_OK(GP_HAS(&o, MSG_ECHO__FLAG) && o.flag == false);
    m.level = 3;                                          /* non-zero: written */
    gp_buf_reset(&b);
    T_OK(gp_msg_encode(&msg_echo_desc, &m, &b) == GP_EOK);
    T_OK(gp_msg_decode(&msg_echo_desc, b.p, b.n, &o, NULL, 0) == GP_EOK && o.level == 3
         && GP_HAS(&o, MSG_ECHO__LEVEL));
    m.level = 11;                                         /* out of bounds: refused */
    gp_buf_reset(&b);
    T_EQ_INT(gp_msg_encode(&msg_echo_desc, &m, &b), GP_ERANGE);
    T_EQ_INT(b.n, 0);
    m.level = 0;
    m.colors.v = colors;
    m.colors.n = 2;
    T_EQ_INT(gp_msg_encode(&msg_echo_desc, &m, &b), GP_ERANGE);
    m.colors.n = 5;
    T_EQ_INT(gp_msg_encode(&msg_echo_desc, &m, &b), GP_ETOOBIG);
    m.colors.n = 0;
    m.color = 3;
    T_EQ_INT(gp_msg_encode(&msg_echo_desc, &m, &b), GP_ERANGE);
    m.color = 0;
    gp_buf_fini(&b);
    gp_buf_init(&b, 16);                                  /* cap */
    T_OK(gp_buf_append(&b, "ab", 2) == GP_EOK);
    T_EQ_INT(gp_msg_encode(&msg_echo_desc, sample_of(&msg_echo_desc), &b), GP_ETOOBIG);
    T_OK(b.n == 2 && b.p[2] == '\0');
    gp_buf_fini(&b);
    gp_msg_clear(&msg_echo_desc, &o);
}

static void
test_equal(void)
{
    const msg_echo *s = sample_of(&msg_echo_desc);
    msg_echo        m;
    gp_buf          b = GP_BUF_INIT;

    T_OK(gp_msg_encode(&msg_echo_desc, s, &b) == GP_EOK);
    T_OK(gp_msg_decode(&msg_echo_desc, b.p, b.n, &m, NULL, 0) == GP_EOK);
    ((char (*)[9])m.tags.v)[1][0] = 'Z';
    T_OK(!gp_msg_equal(&msg_echo_desc, &m, s));
    ((char (*)[9])m.tags.v)[1][0] = '1';
    m.blob.p[3] = 0;
    T_OK(!gp_msg_equal(&msg_echo_desc, &m, s));
    m.blob.p[3] = 0xff;
    ((msg_echo_item *)m.items.v)[2].temp_c = 1;
    T_OK(!gp_msg_equal(&msg_echo_desc, &m, s));
    ((msg_echo_item *)m.items.v)[2].temp_c = 0;
    m.has = 0;                                            /* has-bits are ignored */
    T_OK(gp_msg_equal(&msg_echo_desc, &m, s));
    m.nums.n--;
    T_OK(!gp_msg_equal(&msg_echo_desc, &m, s));
    m.nums.n++;
    T_OK(s->u64 == UINT64_MAX && m.u64 == UINT64_MAX && m.i64 == INT64_MIN && m.i32 == INT32_MIN);
    gp_msg_clear(&msg_echo_desc, &m);
    T_OK(m.has == 0 && m.items.v == NULL && m.blob.p == NULL && m.tags.n == 0);
    gp_msg_clear(&msg_echo_desc, &m);                     /* twice: safe */
    gp_buf_fini(&b);
}

static void
test_json(void)
{
    gp_buf b = GP_BUF_INIT;

    T_OK(gp_msg_to_json(&msg_echo_desc, sample_of(&msg_echo_desc), &b) == GP_EOK);
    T_OKM(strstr(b.p, "{\"str\":\"hello, \\\"world\\\"?\",\"flag\":true,\"i32\":-2147483648,"
                      "\"i64\":-9223372036854775808,\"u32\":4294967295,"
                      "\"u64\":18446744073709551615,\"pct\":99.5,\"level\":-10,"
                      "\"color\":\"dark-blue\",") == b.p, "json head: %s", b.p);
    T_OK(strstr(b.p, "\"items\":[{\"name\":\"a\",\"temp_c\":-50,\"count\":0},") != NULL);
    T_OK(strstr(b.p, "{\"name\":\"c\",\"temp_c\":0,\"count\":0}]") != NULL);
    T_OK(strstr(b.p, "\"tags\":[\"x\",\"12345678\"],\"nums\":[0,-1,127,128,-33,65536,"
                     "9223372036854775807],\"reals\":[0.5,-1e+300,3],"
                     "\"colors\":[\"green\",\"red\"],\"blob\":\"000102ff\"}") != NULL);
    T_OK(strstr(b.p, "\"err\":{\"code\":\"RANGE\",\"message\":\"too hot\","
                     "\"retry_after_ms\":0}") != NULL);
    gp_buf_reset(&b);
    T_OK(gp_msg_to_json(&msg_health_request_desc, sample_of(&msg_health_request_desc), &b) == GP_EOK);
    T_OKM(strcmp(b.p, "{\"verbose\":true}") == 0, "json: %s", b.p);
    gp_buf_fini(&b);
}

static void
test_set_text(void)
{
    msg_echo m;
    char     eb[GP_ERRBUF_LEN];

    memset(&m, 0, sizeof m);
    T_OK(gp_msg_set_text(&msg_echo_desc, &m, "i32", "-5", eb, sizeof eb) == GP_EOK && m.i32 == -5);
    T_OK(GP_HAS(&m, MSG_ECHO__I32) && !GP_HAS(&m, MSG_ECHO__I64));
    T_OK(gp_msg_set_text(&msg_echo_desc, &m, "u64", "18446744073709551615", eb, sizeof eb) == GP_EOK
         && m.u64 == UINT64_MAX);
    T_OK(gp_msg_set_text(&msg_echo_desc, &m, "i64", "-9223372036854775808", eb, sizeof eb) == GP_EOK
         && m.i64 == INT64_MIN);
    T_EQ_INT(gp_msg_set_text(&msg_echo_desc, &m, "i64", "9223372036854775808", eb, sizeof eb), GP_ERANGE);
    T_EQ_INT(gp_msg_set_text(&msg_echo_desc, &m, "i32", "abc", eb, sizeof eb), GP_ETYPE);
    T_OK(strcmp(eb, "i32: expected integer, got \"abc\"") == 0);
    T_EQ_INT(gp_msg_set_text(&msg_echo_desc, &m, "i32", "12x", eb, sizeof eb), GP_ETYPE);
    T_EQ_INT(gp_msg_set_text(&msg_echo_desc, &m, "i32", "", eb, sizeof eb), GP_ETYPE);
    T_EQ_INT(gp_msg_set_text(&msg_echo_desc, &m, "u32", "-1", eb, sizeof eb), GP_ERANGE);
    T_EQ_INT(gp_msg_set_text(&msg_echo_desc, &m, "u32", "4294967296", eb, sizeof eb), GP_ERANGE);
    T_EQ_INT(gp_msg_set_text(&msg_echo_desc, &m, "level", "11", eb, sizeof eb), GP_ERANGE);
    T_OK(strcmp(eb, "level: value 11 out of range") == 0);
    T_OK(gp_msg_set_text(&msg_echo_desc, &m, "pct", "50.25", eb, sizeof eb) == GP_EOK && m.pct == 50.25);
    T_EQ_INT(gp_msg_set_text(&msg_echo_desc, &m, "pct", "nan", eb, sizeof eb), GP_ERANGE);
    T_OK(gp_msg_set_text(&msg_echo_desc, &m, "flag", "true", eb, sizeof eb) == GP_EOK && m.flag);
    T_EQ_INT(gp_msg_set_text(&msg_echo_desc, &m, "flag", "yes", eb, sizeof eb), GP_ETYPE);
    T_OK(gp_msg_set_text(&msg_echo_desc, &m, "color", "green", eb, sizeof eb) == GP_EOK
         && m.color == MSG_ECHO_COLOR_GREEN && GP_HAS(&m, MSG_ECHO__COLOR));
    T_EQ_INT(gp_msg_set_text(&msg_echo_desc, &m, "color", "purple", eb, sizeof eb), GP_ERANGE);
    T_OK(gp_msg_set_text(&msg_echo_desc, &m, "str", "hi", eb, sizeof eb) == GP_EOK
         && strcmp(m.str, "hi") == 0);
    T_EQ_INT(gp_msg_set_text(&msg_echo_desc, &m, "str", "123456789012345678901234567890123",
                             eb, sizeof eb), GP_ERANGE);
    T_OK(strcmp(m.str, "hi") == 0);
    T_EQ_INT(gp_msg_set_text(&msg_echo_desc, &m, "nosuch", "1", eb, sizeof eb), GP_ENOTFOUND);
    T_EQ_INT(gp_msg_set_text(&msg_echo_desc, &m, "items", "1", eb, sizeof eb), GP_ETYPE);
    T_EQ_INT(gp_msg_field_index(&msg_echo_desc, "blob"), MSG_ECHO__BLOB);
    T_EQ_INT(gp_msg_field_index(&msg_echo_desc, "blo"), -1);
}

static void
test_tables(void)
{
    int n = 0;

    for (const msg_channel *c = msg_channels; c->id != NULL; c++, n++)
        T_OKM(c->address != NULL && c->request != NULL, "channel %s complete", c->id);
    T_EQ_INT(n, MSG_NCHANNELS);
    T_OK(strcmp(GP_SUBJ_HEALTH, "gp.int.health.{service}") == 0);
    T_OK(msg_channels[0].request == &msg_health_request_desc
         && msg_channels[0].reply == &msg_health_desc);
    T_OK(strcmp(GP_SUBJ_TEST_ECHO, "gp.test.echo") == 0 && strcmp(GP_SUBJ_TEST_SLEEP, "gp.test.sleep") == 0);
}

int
main(void)
{
    msgpack_sbuffer_init(&sb);
    test_roundtrip_samples();
    test_bad_cases();
    test_accepted();
    test_framing();
    test_duplicates();
    test_error_reply();
    test_encode_rules();
    test_equal();
    test_json();
    test_set_text();
    test_tables();
    msgpack_sbuffer_destroy(&sb);
    return T_DONE();
}
