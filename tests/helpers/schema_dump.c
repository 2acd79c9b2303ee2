/* schema_dump.c -- writes every generated sample (msg_all), encoded with
 * gp_msg_encode, to DIR/<Title>.msgpack, for tests/unit/schemas/schema_validate_test.sh
 * to check against the JSON Schemas.
 *
 *   schema_dump DIR */
#include <stdio.h>
#include <stdlib.h>

#include "gp/codec.h"
#include "msg_gen.h"

static int
dump(const char *dir, const msg_sample *s)
{
    gp_buf b = GP_BUF_INIT;
    char   path[4096];
    FILE  *f;
    gp_err rc = gp_msg_encode(s->desc, s->sample, &b);
    int    ok;

    if (rc != GP_EOK) {
        fprintf(stderr, "schema_dump: %s: encode: %s\n", s->desc->name, gp_err_name(rc));
        return -1;
    }
    snprintf(path, sizeof path, "%s/%s.msgpack", dir, s->desc->name);
    f = fopen(path, "wb");
    ok = f != NULL && fwrite(b.p, 1, b.n, f) == b.n;
    if (f != NULL && fclose(f) != 0)
        ok = 0;
    if (!ok)
        perror(path);
    gp_buf_fini(&b);
    return ok ? 0 : -1;
}

int
main(int argc, char **argv)
{
    int n = 0, bad = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: schema_dump DIR\n");
        return 2;
    }
    for (const msg_sample *s = msg_all; s->desc != NULL; s++, n++)
        bad |= dump(argv[1], s) != 0;
    printf("schema_dump: %d messages\n", n);
    return bad ? 1 : 0;
}
