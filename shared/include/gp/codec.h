/* gp/codec.h -- the one generic MessagePack codec, driven by descriptor
 * tables generated from schemas/ (see schemas/gen.py).
 *
 * A message is a plain C struct whose first member is `uint64_t has`
 * (bit i set when field i was present on decode, or set by the producer
 * to force an optional zero value onto the wire).  On the wire a message
 * is a msgpack map keyed by field name: unknown keys are skipped, required
 * fields must be present, types are never coerced (except that an integer
 * is accepted where a number is expected), and strings, arrays and bytes
 * are bounded by the schema's maxLength / maxItems.
 *
 * Ownership: decoded arrays and bytes are heap memory owned by the message
 * and freed by gp_msg_clear(), which also zeroes the struct and is safe on
 * a zeroed or partially decoded message.  Strings are inline char arrays.
 * Pure functions; any thread, no shared state. */
#ifndef GP_CODEC_H
#define GP_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp/buf.h"
#include "gp/err.h"

typedef enum gp_ftype {
    GP_T_STR,        /* char[limit + 1], NUL-terminated            */
    GP_T_BOOL,       /* bool                                        */
    GP_T_I32,        /* int32_t                                     */
    GP_T_I64,        /* int64_t                                     */
    GP_T_U32,        /* uint32_t                                    */
    GP_T_U64,        /* uint64_t                                    */
    GP_T_F64,        /* double (telemetry only; money is integers)  */
    GP_T_ENUM,       /* int32_t index into enums[]; wire: the string */
    GP_T_OBJ,        /* nested struct described by sub, inline      */
    GP_T_ARR,        /* gp_arr of elem-typed items                  */
    GP_T_BYTES       /* gp_bytes                                    */
} gp_ftype;

/* Field flags. */
#define GP_FF_REQUIRED  0x01u
#define GP_FF_MIN       0x02u    /* min/fmin applies */
#define GP_FF_MAX       0x04u    /* max/fmax applies */
#define GP_FF_READONLY  0x08u    /* schema "readOnly": computed by the owner, not set by clients */

typedef struct gp_arr {
    void     *v;          /* n contiguous elements, owned */
    uint32_t  n;
} gp_arr;

typedef struct gp_bytes {
    uint8_t  *p;          /* owned */
    uint32_t  n;
} gp_bytes;

struct gp_msg_desc;

typedef struct gp_field {
    const char               *name;       /* wire key */
    uint8_t                   type;       /* gp_ftype */
    uint8_t                   elem;       /* gp_ftype of items, for GP_T_ARR */
    uint16_t                  flags;      /* GP_FF_* */
    uint32_t                  offset;     /* offsetof(struct, field) */
    uint32_t                  limit;      /* STR: max bytes; ARR: max items; BYTES: max bytes */
    uint32_t                  elem_limit; /* ARR of STR: max bytes per item */
    uint32_t                  namelen;    /* strlen(name); 0: not given (then measured) */
    int64_t                   min, max;   /* integer bounds (GP_FF_MIN/MAX) */
    double                    fmin, fmax; /* F64 bounds (GP_FF_MIN/MAX) */
    const struct gp_msg_desc *sub;        /* OBJ, or ARR of OBJ */
    const char *const        *enums;      /* ENUM (and ARR of ENUM) names */
    uint32_t                  nenums;
} gp_field;

typedef struct gp_msg_desc {
    const char     *name;                 /* schema title, e.g. "NodeHeartbeat" */
    size_t          size;                 /* sizeof the C struct */
    uint32_t        nfields;              /* <= 64 */
    const gp_field *fields;
} gp_msg_desc;

#define GP_HAS(msg, idx)      (((msg)->has >> (idx)) & 1u)
#define GP_SET_HAS(msg, idx)  ((msg)->has |= (uint64_t)1 << (idx))

/* Encodes msg as a msgpack map appended to out.  Required fields are always
 * written; optional ones when their has-bit is set or their value is not
 * zero/empty.  TOOBIG when out would pass its cap. */
gp_err gp_msg_encode(const gp_msg_desc *d, const void *msg, gp_buf *out);

/* Decodes exactly one msgpack map from p[0..n) into out, which is cleared
 * first.  On failure out is left cleared and, when errbuf is not NULL, a
 * detail naming the field ("gpus[2].temp_c: expected number") is written.
 * DECODE: not msgpack / not a map / trailing bytes / a count the bytes
 * cannot hold (refused before anything is allocated) / nested deeper than
 * GP_MAX_DEPTH, also inside unknown keys; TYPE: wrong type; MISSING:
 * required field absent; RANGE: bound, enum or length violated; TOOBIG:
 * more items than allowed.  A framing error anywhere in the message takes
 * precedence over a field error.  Reads the bytes directly: never past
 * p + n, no recursion deeper than GP_MAX_DEPTH. */
gp_err gp_msg_decode(const gp_msg_desc *d, const void *p, size_t n, void *out,
                     char *errbuf, size_t errlen);

/* A reply on the wire is either the reply message or an error map
 * {"error": {"code": "NOTFOUND", "message": "..."}}.  Decodes either:
 * returns the remote code (message copied into errbuf, followed by
 * "; retry after N ms" when the error carries retry_after_ms) or the
 * decode result for the message. */
gp_err gp_msg_decode_reply(const gp_msg_desc *d, const void *p, size_t n, void *out,
                           char *errbuf, size_t errlen);

/* Encodes the error map described above. */
gp_err gp_msg_encode_error(gp_err code, const char *message, gp_buf *out);
/* The same with retry_after_ms (schemas/common/Error.json) when it is not
 * 0: RATE_LIMITED's hint, capped at the schema's maximum. */
gp_err gp_msg_encode_error_retry(gp_err code, const char *message, uint32_t retry_after_ms,
                                 gp_buf *out);

/* Frees owned memory and zeroes the struct.  Safe on zeroed memory. */
void gp_msg_clear(const gp_msg_desc *d, void *msg);

/* Deep equality (has-bits ignored). */
bool gp_msg_equal(const gp_msg_desc *d, const void *a, const void *b);

/* Appends msg as a JSON object with every field (stable names, schema
 * order).  Enums as strings, bytes as base64-free hex string. */
gp_err gp_msg_to_json(const gp_msg_desc *d, const void *msg, gp_buf *out);

/* Sets a scalar field (STR, BOOL, integers, F64, ENUM) of a top-level
 * message from text, with the same checks as decode, and sets its has-bit.
 * For command-line tools.  NOTFOUND: no such field; TYPE/RANGE as decode. */
gp_err gp_msg_set_text(const gp_msg_desc *d, void *msg, const char *field,
                       const char *text, char *errbuf, size_t errlen);

/* Index of a field by wire name, or -1. */
int gp_msg_field_index(const gp_msg_desc *d, const char *name);

/* Encodes then decodes into a fresh struct, for tests: true when the result
 * is gp_msg_equal to msg. */
bool gp_msg_roundtrip_ok(const gp_msg_desc *d, const void *msg);

#endif
