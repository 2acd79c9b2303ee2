/* simjob.c -- the "sim:" command grammar (see simjob.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/duration.h"
#include "simjob.h"

bool
simjob_is(const char *command)
{
    return strncmp(command, SIMJOB_PREFIX, strlen(SIMJOB_PREFIX)) == 0;
}

bool
simjob_dur(const char *s, size_t n, uint64_t *out_ms)
{
    return gp_duration_parse(s, n, 0, SIMJOB_MAX_DUR_MS, out_ms) == GP_EOK;
}

static bool
int_in(const char *s, size_t n, long lo, long hi, int *out)
{
    char  buf[16], *end;
    long  v;

    if (n == 0 || n >= sizeof(buf))
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    v = strtol(buf, &end, 10);
    if (*end != '\0' || end == buf || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

gp_err
simjob_parse(const char *command, simjob_spec *o, char *detail, size_t dlen)
{
    const char *p;
    unsigned    seen = 0;

    memset(o, 0, sizeof(*o));
    o->load_pct = SIMJOB_DEFAULT_LOAD;
    if (!simjob_is(command)) {
        snprintf(detail, dlen, "command: a simulated behaviour starts with \"" SIMJOB_PREFIX "\"");
        return GP_EINVAL;
    }
    p = command + strlen(SIMJOB_PREFIX);
    for (;;) {
        const char *tok, *eq;
        size_t      len, klen;
        const char *v;
        size_t      vlen;
        unsigned    bit;
        bool        ok;

        while (*p == ' ')
            p++;
        if (*p == '\0')
            break;
        tok = p;
        while (*p != '\0' && *p != ' ')
            p++;
        len = (size_t)(p - tok);
        eq = memchr(tok, '=', len);
        klen = eq ? (size_t)(eq - tok) : len;
        v = eq ? eq + 1 : NULL;
        vlen = eq ? len - klen - 1 : 0;
#define KEY(k) (klen == strlen(k) && strncmp(tok, k, klen) == 0)
        if (KEY("run"))
            bit = 1, ok = v && simjob_dur(v, vlen, &o->run_ms), o->has_run = true;
        else if (KEY("exit"))
            bit = 2, ok = v && int_in(v, vlen, 0, 255, &o->exit_code);
        else if (KEY("fail_after"))
            bit = 4, ok = v && simjob_dur(v, vlen, &o->fail_ms), o->has_fail = true;
        else if (KEY("ckpt"))
            bit = 8, ok = v && simjob_dur(v, vlen, &o->ckpt_ms) && o->ckpt_ms > 0;
        else if (KEY("load"))
            bit = 16, ok = v && int_in(v, vlen, 0, 100, &o->load_pct);
        else if (KEY("hang"))
            bit = 32, ok = v == NULL, o->hang = true;
        else if (KEY("start_fail"))
            bit = 64, ok = v == NULL, o->start_fail = true;
        else {
            snprintf(detail, dlen, "command: unknown sim: item \"%.*s\" (run= exit= fail_after= "
                     "ckpt= load= hang start_fail)", (int)(len > 40 ? 40 : len), tok);
            return GP_EINVAL;
        }
#undef KEY
        if (seen & bit) {
            snprintf(detail, dlen, "command: sim: item \"%.*s\" given twice", (int)klen, tok);
            return GP_EINVAL;
        }
        seen |= bit;
        if (!ok) {
            snprintf(detail, dlen, "command: bad sim: item \"%.*s\" (%s)",
                     (int)(len > 40 ? 40 : len), tok,
                     bit & (1 | 4 | 8) ? "a duration like 300s, 1500ms, 5m, 2h"
                     : bit == 2 ? "an exit status 0..255"
                     : bit == 16 ? "a percentage 0..100" : "takes no value");
            return GP_EINVAL;
        }
    }
    return GP_EOK;
}
