/* secretfile.c -- an attempt's secrets as files (secretfile.h). */
#include "secretfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static gp_err
base64_put(gp_buf *out, const uint8_t *v, size_t n)
{
    gp_err rc = GP_EOK;

    for (size_t i = 0; i < n && rc == GP_EOK; i += 3) {
        uint32_t w = (uint32_t)v[i] << 16 | (i + 1 < n ? (uint32_t)v[i + 1] << 8 : 0) |
                     (i + 2 < n ? v[i + 2] : 0);
        char     q[4] = {b64[w >> 18 & 63], b64[w >> 12 & 63],
                         i + 1 < n ? b64[w >> 6 & 63] : '=', i + 2 < n ? b64[w & 63] : '='};

        rc = gp_buf_append(out, q, 4);
    }
    return rc;
}

/* "user:password": a user, a ':', nothing that would break a header or
 * the JSON (control characters; '"' and '\' are base64'd anyway). */
static bool
user_pass_ok(const uint8_t *v, size_t n)
{
    const uint8_t *c = memchr(v, ':', n);

    if (c == NULL || c == v)
        return false;
    for (size_t i = 0; i < n; i++)
        if (v[i] < 0x20 || v[i] == 0x7f)
            return false;
    return true;
}

/* host[:port] only: it goes into the JSON unquoted otherwise. */
static bool
host_ok(const char *h)
{
    if (h[0] == '\0')
        return false;
    for (; *h; h++)
        if (!((*h >= 'a' && *h <= 'z') || (*h >= 'A' && *h <= 'Z') || (*h >= '0' && *h <= '9') ||
              *h == '.' || *h == '-' || *h == ':' || *h == '[' || *h == ']'))
            return false;
    return true;
}

gp_err
secretfile_auth_json(const uint8_t *v, size_t n, const char *host, gp_buf *out, char *why,
                     size_t wn)
{
    size_t k = 0;
    /* all at once: a buffer that grew would leave copies in freed memory */
    gp_err rc = gp_buf_reserve(out, 4 * (n / 3 + 1) + strlen(host) + 48);

    if (rc != GP_EOK)
        return rc;
    while (k < n && (v[k] == ' ' || v[k] == '\t' || v[k] == '\n' || v[k] == '\r'))
        k++;
    if (k < n && v[k] == '{') {                 /* a docker config JSON: skopeo reads it */
        rc = gp_buf_append(out, v, n);
        return rc == GP_EOK ? gp_buf_append(out, "", 1) : rc;
    }
    if (!user_pass_ok(v, n)) {
        snprintf(why, wn, "registry_auth: the secret is neither \"user:password\" nor a docker "
                          "config JSON");
        return GP_EINVAL;
    }
    if (!host_ok(host)) {
        snprintf(why, wn, "registry_auth: no registry host to give it to");
        return GP_EINVAL;
    }
    rc = gp_buf_printf(out, "{\"auths\":{\"%s\":{\"auth\":\"", host);
    if (rc == GP_EOK)
        rc = base64_put(out, v, n);
    if (rc == GP_EOK)
        rc = gp_buf_puts(out, "\"}}}\n");
    return rc == GP_EOK ? gp_buf_append(out, "", 1) : rc;
}

int
secretfile_write(const char *path, const void *p, size_t n, uid_t uid, gid_t gid)
{
    int         fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    const char *c = p;
    int         e = 0;

    if (fd < 0)
        return -1;
    while (n > 0 && e == 0) {
        ssize_t w = write(fd, c, n);

        if (w < 0 && errno != EINTR)
            e = errno;
        else if (w > 0)
            c += w, n -= (size_t)w;
    }
    if (e == 0 && uid != (uid_t)-1 && fchown(fd, uid, gid) != 0)
        e = errno;
    if (close(fd) != 0 && e == 0)
        e = errno;
    if (e != 0) {
        unlink(path);
        errno = e;
        return -1;
    }
    return 0;
}
