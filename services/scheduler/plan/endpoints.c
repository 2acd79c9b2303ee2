/* endpoints.c -- an attempt's endpoints as one text (endpoints.h). */
#include "endpoints.h"

#include <stdbool.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msg_gen.h"

/* What a name, a host and a protocol may hold: the separators of the
 * text (= : / ,) never appear inside one. */
#define WORD "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-."

static bool
word_ok(const char *s)
{
    size_t k = strlen(s);

    return k > 0 && strspn(s, WORD) == k;
}

static bool
host_ok(const char *s)
{
    size_t k = strlen(s);

    /* a name or an IPv4 address; an IPv6 address in brackets ([::1]) */
    return k > 0 && strspn(s, WORD "[]:") == k && (strchr(s, ':') == NULL || s[0] == '[');
}

int
sched_endpoints_text(const gp_arr *eps, char *out, size_t n)
{
    const msg_endpoint *e = eps->v;
    size_t              len = 0;
    int                 left = 0;

    out[0] = '\0';
    for (uint32_t i = 0; i < eps->n; i++) {
        const char *proto = e[i].protocol[0] ? e[i].protocol : "tcp";
        int         k;

        if (!word_ok(e[i].name) || !host_ok(e[i].host) || !word_ok(proto) ||
            e[i].port < 1 || e[i].port > 65535) {
            left++;
            continue;
        }
        k = snprintf(out + len, n - len, "%s%s=%s:%u/%s", len ? "," : "", e[i].name, e[i].host,
                     (unsigned)e[i].port, proto);
        if (k < 0 || (size_t)k >= n - len) {
            out[len] = '\0';
            left += (int)(eps->n - i);
            break;
        }
        len += (size_t)k;
    }
    return left;
}

/* One "name=host:port/proto" into e; false if malformed. */
static bool
parse_one(const char *s, size_t k, msg_endpoint *e)
{
    char        buf[160];
    char       *eq, *colon, *slash, *end;
    unsigned long port;

    if (k >= sizeof(buf))
        return false;
    memcpy(buf, s, k);
    buf[k] = '\0';
    if ((eq = strchr(buf, '=')) == NULL || (slash = strrchr(buf, '/')) == NULL ||
        (colon = strrchr(buf, ':')) == NULL || colon < eq || slash < colon)
        return false;
    *eq = *colon = *slash = '\0';
    port = strtoul(colon + 1, &end, 10);
    if (*end != '\0' || port < 1 || port > 65535 || buf[0] == '\0' || eq[1] == '\0' ||
        strlen(buf) >= sizeof(e->name) ||
        strlen(eq + 1) >= sizeof(e->host) || strlen(slash + 1) >= sizeof(e->protocol))
        return false;
    memset(e, 0, sizeof(*e));
    /* each fits: the lengths were checked above */
    memcpy(e->name, buf, strlen(buf) + 1);
    memcpy(e->host, eq + 1, strlen(eq + 1) + 1);
    memcpy(e->protocol, slash + 1, strlen(slash + 1) + 1);
    e->port = (uint32_t)port;
    GP_SET_HAS(e, MSG_ENDPOINT__NAME);
    GP_SET_HAS(e, MSG_ENDPOINT__HOST);
    GP_SET_HAS(e, MSG_ENDPOINT__PORT);
    GP_SET_HAS(e, MSG_ENDPOINT__PROTOCOL);
    return true;
}

int
sched_endpoints_parse(const char *s, gp_arr *out)
{
    msg_endpoint *v;
    uint32_t      n = 0;

    out->v = NULL;
    out->n = 0;
    if (s == NULL || *s == '\0')
        return 0;
    if ((v = calloc(MSG_ATTEMPT_ENDPOINTS_MAXITEMS, sizeof(*v))) == NULL)
        return -1;
    while (*s != '\0' && n < MSG_ATTEMPT_ENDPOINTS_MAXITEMS) {
        size_t k = strcspn(s, ",");

        if (parse_one(s, k, &v[n]))
            n++;
        s += k + (s[k] == ',');
    }
    out->v = v;
    out->n = n;
    return 0;
}
