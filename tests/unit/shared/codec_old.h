/* codec_old.h -- the object-tree decoder and the msgpack_packer encoder
 * that shared/src/codec.c used until it learned to read and write the bytes
 * directly, kept verbatim (only the entry points renamed old_msg_decode,
 * old_msg_decode_reply, old_msg_encode, old_msg_encode_error) as the oracle
 * of tests/unit/shared/codec_diff_test.c.  Not part of libgp: nothing else may
 * include it. */
#ifndef GP_CODEC_OLD_H
#define GP_CODEC_OLD_H

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/codec.h"
#include "gp/limits.h"

#define SEG_MAX  (GP_MAX_DEPTH + 2)
#define NUL_TERM UINT32_MAX

/* ---- field helpers --------------------------------------------------- */

static size_t
elem_size(const gp_field *f)
{
    switch (f->elem) {
    case GP_T_STR:  return (size_t)f->elem_limit + 1;
    case GP_T_BOOL: return sizeof(bool);
    case GP_T_I32:
    case GP_T_U32:
    case GP_T_ENUM: return sizeof(int32_t);
    case GP_T_I64:
    case GP_T_U64:
    case GP_T_F64:  return sizeof(int64_t);
    case GP_T_OBJ:  return f->sub->size;
    default:        return 0;
    }
}

static const char *
type_name(uint8_t t)
{
    switch (t) {
    case GP_T_STR:
    case GP_T_ENUM:  return "string";
    case GP_T_BOOL:  return "boolean";
    case GP_T_F64:   return "number";
    case GP_T_OBJ:   return "map";
    case GP_T_ARR:   return "array";
    case GP_T_BYTES: return "bytes";
    default:         return "integer";
    }
}

static const char *
wire_name(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:              return "nil";
    case MSGPACK_OBJECT_BOOLEAN:          return "boolean";
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "integer";
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:          return "number";
    case MSGPACK_OBJECT_STR:              return "string";
    case MSGPACK_OBJECT_ARRAY:            return "array";
    case MSGPACK_OBJECT_MAP:              return "map";
    case MSGPACK_OBJECT_BIN:              return "bytes";
    default:                              return "ext";
    }
}

/* name (NUL-terminated) equals k[0..n) -- never reads past name's NUL. */
static bool
key_eq(const char *name, const char *k, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (name[i] != k[i] || name[i] == '\0')
            return false;
    return name[n] == '\0';
}

static int
find_field(const gp_msg_desc *d, const char *k, uint32_t n, uint32_t *hint)
{
    uint32_t j = *hint;

    for (uint32_t i = 0; i < d->nfields; i++, j++) {
        if (j >= d->nfields)
            j = 0;
        if (key_eq(d->fields[j].name, k, n)) {
            *hint = j + 1;
            return (int)j;
        }
    }
    return -1;
}

static bool
int_ok(const gp_field *f, int64_t v)
{
    return !((f->flags & GP_FF_MIN) && v < f->min) && !((f->flags & GP_FF_MAX) && v > f->max);
}

static bool
uint_ok(const gp_field *f, uint64_t u)
{
    if ((f->flags & GP_FF_MIN) && f->min > 0 && u < (uint64_t)f->min)
        return false;
    return !((f->flags & GP_FF_MAX) && (f->max < 0 || u > (uint64_t)f->max));
}

static bool
f64_ok(const gp_field *f, double v)
{
    return isfinite(v) && !((f->flags & GP_FF_MIN) && v < f->fmin)
        && !((f->flags & GP_FF_MAX) && v > f->fmax);
}

static void free_obj(const gp_msg_desc *d, void *msg);

static void
free_field(const gp_field *f, void *p)
{
    if (f->type == GP_T_OBJ) {
        free_obj(f->sub, p);
    } else if (f->type == GP_T_ARR) {
        gp_arr *a = p;
        if (f->elem == GP_T_OBJ && a->v != NULL)
            for (uint32_t i = 0; i < a->n; i++)
                free_obj(f->sub, (char *)a->v + (size_t)i * f->sub->size);
        free(a->v);
        a->v = NULL;
        a->n = 0;
    } else if (f->type == GP_T_BYTES) {
        gp_bytes *b = p;
        free(b->p);
        b->p = NULL;
        b->n = 0;
    }
}

static void
free_obj(const gp_msg_desc *d, void *msg)
{
    for (uint32_t i = 0; i < d->nfields; i++)
        free_field(&d->fields[i], (char *)msg + d->fields[i].offset);
}

/* ---- decode ------------------------------------------------------------ */

typedef struct dctx {
    const char *seg[SEG_MAX];      /* field name, or NULL for an index */
    uint32_t    idx[SEG_MAX];      /* the index; for a name, its length or NUL_TERM */
    int         nseg;              /* logical; only SEG_MAX are recorded */
    int         depth;
    char       *errbuf;
    size_t      errlen;
} dctx;

static void
push(dctx *c, const char *name, uint32_t idx)
{
    if (c->nseg < SEG_MAX) {
        c->seg[c->nseg] = name;
        c->idx[c->nseg] = idx;
    }
    c->nseg++;
}

static gp_err
derr(dctx *c, gp_err rc, const char *fmt, ...)
{
    size_t  n = 0, len = c->errlen;
    char   *b = c->errbuf;
    int     k = 0;
    va_list ap;

    if (b == NULL || len == 0)
        return rc;
    for (int i = 0; i < c->nseg && i < SEG_MAX && k >= 0 && n < len; i++, n += (size_t)k)
        k = c->seg[i] == NULL ? snprintf(b + n, len - n, "[%u]", c->idx[i])
            : c->idx[i] == NUL_TERM ? snprintf(b + n, len - n, "%s%s", i ? "." : "", c->seg[i])
            : snprintf(b + n, len - n, "%s%.*s", i ? "." : "", (int)c->idx[i], c->seg[i]);
    if (k < 0 || n >= len)
        return rc;
    if (n > 0 && (k = snprintf(b + n, len - n, ": ")) > 0 && (n += (size_t)k) >= len)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b + n, len - n, fmt, ap);
    va_end(ap);
    return rc;
}

static gp_err
wrong_type(dctx *c, uint8_t t, const msgpack_object *o)
{
    return derr(c, GP_ETYPE, "expected %s, got %s", type_name(t), wire_name(o));
}

static gp_err dec_value(dctx *c, const gp_field *f, uint8_t t, uint32_t limit,
                        const msgpack_object *o, void *p);

static gp_err
dec_uint(dctx *c, const gp_field *f, uint8_t t, const msgpack_object *o, void *p)
{
    uint64_t u = o->via.u64;

    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return derr(c, GP_ERANGE, "negative value %lld for an unsigned field",
                    (long long)o->via.i64);
    if ((t == GP_T_U32 && u > UINT32_MAX) || !uint_ok(f, u))
        return derr(c, GP_ERANGE, "value %llu out of range", (unsigned long long)u);
    if (t == GP_T_U32)
        *(uint32_t *)p = (uint32_t)u;
    else
        *(uint64_t *)p = u;
    return GP_EOK;
}

static gp_err
dec_int(dctx *c, const gp_field *f, uint8_t t, const msgpack_object *o, void *p)
{
    int64_t v;

    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER && o->type != MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return wrong_type(c, t, o);
    if (t == GP_T_U32 || t == GP_T_U64)
        return dec_uint(c, f, t, o, p);
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 > INT64_MAX)
        return derr(c, GP_ERANGE, "value %llu out of range", (unsigned long long)o->via.u64);
    v = o->via.i64;
    if ((t == GP_T_I32 && (v < INT32_MIN || v > INT32_MAX)) || !int_ok(f, v))
        return derr(c, GP_ERANGE, "value %lld out of range", (long long)v);
    if (t == GP_T_I32)
        *(int32_t *)p = (int32_t)v;
    else
        *(int64_t *)p = v;
    return GP_EOK;
}

static gp_err
dec_f64(dctx *c, const gp_field *f, const msgpack_object *o, double *p)
{
    double v;

    if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
        v = o->via.f64;
    else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        v = (double)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        v = (double)o->via.i64;
    else
        return wrong_type(c, GP_T_F64, o);
    if (!f64_ok(f, v))
        return derr(c, GP_ERANGE, "value %g out of range", v);
    *p = v;
    return GP_EOK;
}

static gp_err
dec_str(dctx *c, uint32_t limit, const msgpack_object *o, char *p)
{
    uint32_t n = o->via.str.size;

    if (o->type != MSGPACK_OBJECT_STR)
        return wrong_type(c, GP_T_STR, o);
    if (n > limit)
        return derr(c, GP_ERANGE, "string of %u bytes, longer than %u", n, limit);
    if (n > 0 && memchr(o->via.str.ptr, '\0', n) != NULL)
        return derr(c, GP_ERANGE, "string contains a NUL byte");
    memcpy(p, o->via.str.ptr, n);
    p[n] = '\0';
    return GP_EOK;
}

static gp_err
dec_enum(dctx *c, const gp_field *f, const msgpack_object *o, int32_t *p)
{
    if (o->type != MSGPACK_OBJECT_STR)
        return wrong_type(c, GP_T_ENUM, o);
    for (uint32_t i = 0; i < f->nenums; i++) {
        if (key_eq(f->enums[i], o->via.str.ptr, o->via.str.size)) {
            *p = (int32_t)i;
            return GP_EOK;
        }
    }
    return derr(c, GP_ERANGE, "\"%.*s\" is not an allowed value",
                (int)(o->via.str.size > 64 ? 64 : o->via.str.size), o->via.str.ptr);
}

static gp_err
dec_bytes(dctx *c, const gp_field *f, const msgpack_object *o, gp_bytes *b)
{
    uint32_t n = o->via.bin.size;

    if (o->type != MSGPACK_OBJECT_BIN)
        return wrong_type(c, GP_T_BYTES, o);
    if (n > f->limit)
        return derr(c, GP_ERANGE, "%u bytes, more than %u", n, f->limit);
    if (n == 0)
        return GP_EOK;
    if ((b->p = malloc(n)) == NULL)
        return derr(c, GP_ENOMEM, "out of memory");
    memcpy(b->p, o->via.bin.ptr, n);
    b->n = n;
    return GP_EOK;
}

static gp_err
dec_arr(dctx *c, const gp_field *f, const msgpack_object *o, gp_arr *a)
{
    uint32_t n = o->via.array.size;
    size_t   es = elem_size(f);
    gp_err   rc = GP_EOK;

    if (o->type != MSGPACK_OBJECT_ARRAY)
        return wrong_type(c, GP_T_ARR, o);
    if (n > f->limit)
        return derr(c, GP_ETOOBIG, "%u items, more than %u", n, f->limit);
    if (c->depth + 1 > GP_MAX_DEPTH)
        return derr(c, GP_EDECODE, "nested deeper than %d", GP_MAX_DEPTH);
    if (n == 0)
        return GP_EOK;
    if ((a->v = calloc(n, es)) == NULL)
        return derr(c, GP_ENOMEM, "out of memory");
    a->n = n;
    c->depth++;
    for (uint32_t i = 0; i < n && rc == GP_EOK; i++) {
        push(c, NULL, i);
        rc = dec_value(c, f, f->elem, f->elem_limit, &o->via.array.ptr[i], (char *)a->v + i * es);
        c->nseg--;
    }
    c->depth--;
    return rc;
}

static bool
depth_ok(const msgpack_object *o, int left)
{
    if (o->type == MSGPACK_OBJECT_ARRAY) {
        if (left <= 0)
            return false;
        for (uint32_t i = 0; i < o->via.array.size; i++)
            if (!depth_ok(&o->via.array.ptr[i], left - 1))
                return false;
    } else if (o->type == MSGPACK_OBJECT_MAP) {
        if (left <= 0)
            return false;
        for (uint32_t i = 0; i < o->via.map.size; i++)
            if (!depth_ok(&o->via.map.ptr[i].key, left - 1)
                || !depth_ok(&o->via.map.ptr[i].val, left - 1))
                return false;
    }
    return true;
}

static gp_err
dec_missing(dctx *c, const gp_msg_desc *d, uint64_t has)
{
    for (uint32_t i = 0; i < d->nfields; i++) {
        if ((d->fields[i].flags & GP_FF_REQUIRED) && !((has >> i) & 1u)) {
            push(c, d->fields[i].name, NUL_TERM);
            return derr(c, GP_EMISSING, "required field missing");
        }
    }
    return GP_EOK;
}

/* Frees and zeroes a field decoded before (decode fills zeroed memory). */
static void
forget(const gp_field *f, void *p)
{
    free_field(f, p);
    if (f->type == GP_T_OBJ)
        memset(p, 0, f->sub->size);
}

static gp_err
dec_obj(dctx *c, const gp_msg_desc *d, const msgpack_object *o, void *out)
{
    uint64_t *has = out;
    uint32_t  hint = 0;
    gp_err    rc = GP_EOK;
    int       base = c->nseg;

    if (++c->depth > GP_MAX_DEPTH)
        return derr(c, GP_EDECODE, "nested deeper than %d", GP_MAX_DEPTH);
    for (uint32_t i = 0; i < o->via.map.size && rc == GP_EOK; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key, *v = &o->via.map.ptr[i].val;
        int                   fi;

        if (k->type != MSGPACK_OBJECT_STR)
            return derr(c, GP_EDECODE, "map key is %s, not string", wire_name(k));
        fi = find_field(d, k->via.str.ptr, k->via.str.size, &hint);
        if (fi < 0) {
            if (!depth_ok(v, GP_MAX_DEPTH - c->depth)) {
                push(c, k->via.str.ptr, k->via.str.size > 64 ? 64 : k->via.str.size);
                rc = derr(c, GP_EDECODE, "nested deeper than %d", GP_MAX_DEPTH);
            }
            continue;
        }
        if ((*has >> fi) & 1u)                 /* a duplicate key: last wins */
            forget(&d->fields[fi], (char *)out + d->fields[fi].offset);
        push(c, d->fields[fi].name, NUL_TERM);
        rc = dec_value(c, &d->fields[fi], d->fields[fi].type, d->fields[fi].limit, v,
                       (char *)out + d->fields[fi].offset);
        c->nseg = base;
        *has |= (uint64_t)1 << fi;
    }
    if (rc == GP_EOK)
        rc = dec_missing(c, d, *has);
    c->nseg = base;
    c->depth--;
    return rc;
}

static gp_err
dec_value(dctx *c, const gp_field *f, uint8_t t, uint32_t limit, const msgpack_object *o,
          void *p)
{
    switch (t) {
    case GP_T_STR:
        return dec_str(c, limit, o, p);
    case GP_T_BOOL:
        if (o->type != MSGPACK_OBJECT_BOOLEAN)
            return wrong_type(c, t, o);
        *(bool *)p = o->via.boolean;
        return GP_EOK;
    case GP_T_I32:
    case GP_T_I64:
    case GP_T_U32:
    case GP_T_U64:   return dec_int(c, f, t, o, p);
    case GP_T_F64:   return dec_f64(c, f, o, p);
    case GP_T_ENUM:  return dec_enum(c, f, o, p);
    case GP_T_OBJ:
        if (o->type != MSGPACK_OBJECT_MAP)
            return wrong_type(c, t, o);
        return dec_obj(c, f->sub, o, p);
    case GP_T_ARR:   return dec_arr(c, f, o, p);
    case GP_T_BYTES: return dec_bytes(c, f, o, p);
    default:         return derr(c, GP_EINTERNAL, "bad descriptor type %u", t);
    }
}

/* ---- framing pre-check ------------------------------------------------- */

enum { FRAME_OK, FRAME_TRUNC, FRAME_BIG };

static uint64_t
be(const uint8_t *p, int w)
{
    uint64_t v = 0;

    for (int i = 0; i < w; i++)
        v = v << 8 | p[i];
    return v;
}

/* What follows msgpack header byte b: a w-byte big-endian length field, then
 * len * mult objects (containers, mult 1 or 2) or len + extra bytes. */
static void
head(uint8_t b, int *w, uint64_t *extra, uint64_t *mult)
{
    static const uint8_t xb[] = {          /* 0xc0..0xdf: extra bytes */
        0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 4, 8, 1, 2, 4, 8,
        1, 2, 4, 8, 2, 3, 5, 9, 17, 0, 0, 0, 0, 0, 0, 0 };
    static const uint8_t wd[] = {          /* 0xc0..0xdf: length field width */
        0, 0, 0, 0, 1, 2, 4, 1, 2, 4, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 4, 2, 4, 2, 4 };

    *w = 0, *extra = 0, *mult = 0;
    if (b >= 0x80 && b <= 0x8f)
        *extra = b & 0x0f, *mult = 2;                       /* fixmap */
    else if (b >= 0x90 && b <= 0x9f)
        *extra = b & 0x0f, *mult = 1;                       /* fixarray */
    else if (b >= 0xa0 && b <= 0xbf)
        *extra = b & 0x1f;                                  /* fixstr */
    else if (b >= 0xc0 && b <= 0xdf)
        *w = wd[b - 0xc0], *extra = xb[b - 0xc0], *mult = b >= 0xde ? 2 : b >= 0xdc;
}

/* msgpack-c allocates a container's claimed count before reading it, so a
 * 5-byte array32 header would cost gigabytes: refuse any count that the
 * bytes left cannot hold (every object takes at least one byte). */
static int
frame_check(const uint8_t *p, size_t n)
{
    size_t   i = 0;
    uint64_t pending = 1, extra, mult, len;
    int      w;

    while (pending > 0) {
        if (pending > n - i)               /* each object needs a byte */
            return FRAME_TRUNC;
        head(p[i++], &w, &extra, &mult);
        pending--;
        if ((size_t)w > n - i)
            return FRAME_TRUNC;
        len = be(p + i, w) + extra;        /* w == 0 or extra == 0 for containers */
        i += (size_t)w;
        if (mult == 0 && len > n - i)
            return FRAME_TRUNC;
        if (mult == 0)
            i += (size_t)len;
        else if (len * mult + pending > n - i)
            return len * mult > n - i ? FRAME_TRUNC : FRAME_BIG;
        else
            pending += len * mult;
    }
    return FRAME_OK;
}

/* Unpacks exactly one object from p[0..n) into u. */
static gp_err
unpack_one(dctx *c, msgpack_unpacked *u, const void *p, size_t n)
{
    size_t off = 0;

    if (n == 0)
        return derr(c, GP_EDECODE, "empty message");
    switch (frame_check(p, n)) {
    case FRAME_TRUNC:
        return derr(c, GP_EDECODE, "truncated msgpack");
    case FRAME_BIG:
        return derr(c, GP_EDECODE, "malformed msgpack: a count exceeds the message");
    default:
        break;
    }
    switch (msgpack_unpack_next(u, p, n, &off)) {
    case MSGPACK_UNPACK_SUCCESS:
        break;
    case MSGPACK_UNPACK_CONTINUE:
        return derr(c, GP_EDECODE, "truncated msgpack");
    case MSGPACK_UNPACK_NOMEM_ERROR:
        return derr(c, GP_ENOMEM, "out of memory");
    default:
        return derr(c, GP_EDECODE, "malformed msgpack");
    }
    if (off != n)
        return derr(c, GP_EDECODE, "%zu trailing bytes after the message", n - off);
    return GP_EOK;
}

static gp_err
dec_top(dctx *c, const gp_msg_desc *d, const msgpack_object *o, void *out)
{
    if (o->type != MSGPACK_OBJECT_MAP)
        return derr(c, GP_EDECODE, "expected a map, got %s", wire_name(o));
    return dec_obj(c, d, o, out);
}

static void
dctx_init(dctx *c, char *errbuf, size_t errlen)
{
    c->nseg = 0;
    c->depth = 0;
    c->errbuf = errbuf;
    c->errlen = errlen;
    if (errbuf != NULL && errlen > 0)
        errbuf[0] = '\0';
}

static gp_err
old_msg_decode(const gp_msg_desc *d, const void *p, size_t n, void *out, char *errbuf,
              size_t errlen)
{
    msgpack_unpacked u;
    dctx             c;
    gp_err           rc;

    dctx_init(&c, errbuf, errlen);
    memset(out, 0, d->size);
    msgpack_unpacked_init(&u);
    rc = unpack_one(&c, &u, p, n);
    if (rc == GP_EOK)
        rc = dec_top(&c, d, &u.data, out);
    msgpack_unpacked_destroy(&u);
    if (rc != GP_EOK)
        gp_msg_clear(d, out);
    return rc;
}

static const msgpack_object *
map_get(const msgpack_object *m, const char *key)
{
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object *k = &m->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && key_eq(key, k->via.str.ptr, k->via.str.size))
            return &m->via.map.ptr[i].val;
    }
    return NULL;
}

/* {"error": {"code": "NOTFOUND", "message": "..."}} -> the code; message to errbuf. */
static gp_err
remote_error(dctx *c, const msgpack_object *e)
{
    const msgpack_object *code = map_get(e, "code"), *msg = map_get(e, "message");
    char                  name[33];
    gp_err                rc = GP_EINTERNAL;

    if (code != NULL && code->type == MSGPACK_OBJECT_STR && code->via.str.size < sizeof name) {
        memcpy(name, code->via.str.ptr, code->via.str.size);
        name[code->via.str.size] = '\0';
        rc = gp_err_from_name(name);
        if (rc == GP_EOK)
            rc = GP_EINTERNAL;
    }
    if (msg != NULL && msg->type == MSGPACK_OBJECT_STR)
        return derr(c, rc, "%.*s", (int)msg->via.str.size, msg->via.str.ptr);
    return derr(c, rc, "%s", gp_err_str(rc));
}

static gp_err
old_msg_decode_reply(const gp_msg_desc *d, const void *p, size_t n, void *out, char *errbuf,
                    size_t errlen)
{
    msgpack_unpacked      u;
    dctx                  c;
    gp_err                rc;
    const msgpack_object *e;

    dctx_init(&c, errbuf, errlen);
    memset(out, 0, d->size);
    msgpack_unpacked_init(&u);
    rc = unpack_one(&c, &u, p, n);
    if (rc == GP_EOK) {
        e = u.data.type == MSGPACK_OBJECT_MAP ? map_get(&u.data, "error") : NULL;
        if (e != NULL && e->type == MSGPACK_OBJECT_MAP)
            rc = remote_error(&c, e);
        else
            rc = dec_top(&c, d, &u.data, out);
    }
    msgpack_unpacked_destroy(&u);
    if (rc != GP_EOK)
        gp_msg_clear(d, out);
    return rc;
}

/* ---- encode ------------------------------------------------------------ */

typedef struct ectx {
    gp_buf          *b;
    gp_err           rc;
    msgpack_packer   pk;
} ectx;

static int
enc_write(void *data, const char *buf, size_t len)
{
    ectx   *e = data;
    gp_buf *b = e->b;
    size_t  max = b->max ? b->max : (size_t)GP_MAX_MSG_BYTES * 4;
    gp_err  rc;

    if (b->cap - b->n > len && max - b->n >= len) {     /* fast path: fits (cap > n) */
        memcpy(b->p + b->n, buf, len);
        b->n += len;
        b->p[b->n] = '\0';
        return 0;
    }
    rc = gp_buf_append(b, buf, len);

    if (rc != GP_EOK && e->rc == GP_EOK)
        e->rc = rc;
    return rc == GP_EOK ? 0 : -1;
}

static bool
obj_empty(const gp_msg_desc *d, const void *msg);

static bool
val_empty(const gp_field *f, const void *p)
{
    switch (f->type) {
    case GP_T_STR:   return *(const char *)p == '\0';
    case GP_T_BOOL:  return !*(const bool *)p;
    case GP_T_I32:
    case GP_T_U32:
    case GP_T_ENUM:  return *(const int32_t *)p == 0;
    case GP_T_I64:
    case GP_T_U64:   return *(const int64_t *)p == 0;
    case GP_T_F64:   return *(const double *)p == 0.0;
    case GP_T_OBJ:   return obj_empty(f->sub, p);
    case GP_T_ARR:   return ((const gp_arr *)p)->n == 0;
    case GP_T_BYTES: return ((const gp_bytes *)p)->n == 0;
    default:         return true;
    }
}

static bool
obj_empty(const gp_msg_desc *d, const void *msg)
{
    if (*(const uint64_t *)msg != 0)
        return false;
    for (uint32_t i = 0; i < d->nfields; i++)
        if (!val_empty(&d->fields[i], (const char *)msg + d->fields[i].offset))
            return false;
    return true;
}

static void enc_obj(ectx *e, const gp_msg_desc *d, const void *msg);
static void enc_value(ectx *e, const gp_field *f, uint8_t t, uint32_t limit, const void *p);

static void
enc_fail(ectx *e, gp_err rc)
{
    if (e->rc == GP_EOK)
        e->rc = rc;
}

static void
enc_str(ectx *e, const char *s, size_t n)
{
    msgpack_pack_str(&e->pk, n);
    msgpack_pack_str_body(&e->pk, s, n);
}

static void
enc_int(ectx *e, const gp_field *f, uint8_t t, const void *p)
{
    if (t == GP_T_U32 || t == GP_T_U64) {
        uint64_t u = t == GP_T_U32 ? *(const uint32_t *)p : *(const uint64_t *)p;
        if (!uint_ok(f, u))
            enc_fail(e, GP_ERANGE);
        msgpack_pack_uint64(&e->pk, u);
    } else {
        int64_t v = t == GP_T_I32 ? *(const int32_t *)p : *(const int64_t *)p;
        if (!int_ok(f, v))
            enc_fail(e, GP_ERANGE);
        msgpack_pack_int64(&e->pk, v);
    }
}

static void
enc_arr(ectx *e, const gp_field *f, const gp_arr *a)
{
    size_t es = elem_size(f);

    if (a->n > f->limit || (a->n > 0 && a->v == NULL)) {
        enc_fail(e, a->n > f->limit ? GP_ETOOBIG : GP_EINVAL);
        return;
    }
    msgpack_pack_array(&e->pk, a->n);
    for (uint32_t i = 0; i < a->n && e->rc == GP_EOK; i++)
        enc_value(e, f, f->elem, f->elem_limit, (const char *)a->v + i * es);
}

static void
enc_scalar(ectx *e, const gp_field *f, uint8_t t, uint32_t limit, const void *p)
{
    size_t  n;
    int32_t x;

    if (t == GP_T_STR) {
        if ((n = strnlen(p, (size_t)limit + 1)) > limit)
            enc_fail(e, GP_ERANGE);
        else
            enc_str(e, p, n);
    } else if (t == GP_T_BOOL) {
        if (*(const bool *)p)
            msgpack_pack_true(&e->pk);
        else
            msgpack_pack_false(&e->pk);
    } else if (t == GP_T_F64) {
        if (!f64_ok(f, *(const double *)p))
            enc_fail(e, GP_ERANGE);
        msgpack_pack_double(&e->pk, *(const double *)p);
    } else if (t == GP_T_ENUM) {
        if ((x = *(const int32_t *)p) < 0 || (uint32_t)x >= f->nenums)
            enc_fail(e, GP_ERANGE);
        else
            enc_str(e, f->enums[x], strlen(f->enums[x]));
    } else {
        enc_int(e, f, t, p);
    }
}

static void
enc_value(ectx *e, const gp_field *f, uint8_t t, uint32_t limit, const void *p)
{
    const gp_bytes *b = p;

    if (t == GP_T_OBJ) {
        enc_obj(e, f->sub, p);
    } else if (t == GP_T_ARR) {
        enc_arr(e, f, p);
    } else if (t == GP_T_BYTES) {
        if (b->n > f->limit || (b->n > 0 && b->p == NULL)) {
            enc_fail(e, b->n > f->limit ? GP_ERANGE : GP_EINVAL);
            return;
        }
        msgpack_pack_bin(&e->pk, b->n);
        msgpack_pack_bin_body(&e->pk, b->p, b->n);
    } else {
        enc_scalar(e, f, t, limit, p);
    }
}

static void
enc_obj(ectx *e, const gp_msg_desc *d, const void *msg)
{
    uint64_t has = *(const uint64_t *)msg, put = 0;
    uint32_t n = 0;

    for (uint32_t i = 0; i < d->nfields; i++) {
        const gp_field *f = &d->fields[i];
        if ((f->flags & GP_FF_REQUIRED) || ((has >> i) & 1u)
            || !val_empty(f, (const char *)msg + f->offset)) {
            put |= (uint64_t)1 << i;
            n++;
        }
    }
    msgpack_pack_map(&e->pk, n);
    for (uint32_t i = 0; i < d->nfields && e->rc == GP_EOK; i++) {
        const gp_field *f = &d->fields[i];
        if (!((put >> i) & 1u))
            continue;
        enc_str(e, f->name, strlen(f->name));
        enc_value(e, f, f->type, f->limit, (const char *)msg + f->offset);
    }
}

static gp_err
enc_finish(ectx *e, size_t start)
{
    if (e->rc != GP_EOK) {
        e->b->n = start;
        if (e->b->p != NULL)
            e->b->p[start] = '\0';
    }
    return e->rc;
}

static gp_err
old_msg_encode(const gp_msg_desc *d, const void *msg, gp_buf *out)
{
    ectx   e = { out, GP_EOK, { NULL, NULL } };
    size_t start = out->n;

    msgpack_packer_init(&e.pk, &e, enc_write);
    enc_obj(&e, d, msg);
    return enc_finish(&e, start);
}

static gp_err
old_msg_encode_error(gp_err code, const char *message, gp_buf *out)
{
    ectx        e = { out, GP_EOK, { NULL, NULL } };
    size_t      start = out->n;
    size_t      n = message ? strnlen(message, 257) : 0;
    const char *name = gp_err_name(code);

    if (n > 256) {                          /* Error.message maxLength; whole UTF-8 chars */
        n = 256;
        while (n > 0 && ((unsigned char)message[n] & 0xC0) == 0x80)
            n--;
    }
    msgpack_packer_init(&e.pk, &e, enc_write);
    msgpack_pack_map(&e.pk, 1);
    enc_str(&e, "error", 5);
    msgpack_pack_map(&e.pk, 2);
    enc_str(&e, "code", 4);
    enc_str(&e, name, strlen(name));
    enc_str(&e, "message", 7);
    enc_str(&e, message ? message : "", n);
    return enc_finish(&e, start);
}

#endif
