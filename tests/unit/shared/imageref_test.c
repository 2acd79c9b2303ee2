/* imageref_test.c -- image references (gp/imageref.h): what parses into
 * which parts, and what is refused (short names, transports, bad tags,
 * digests and path components). */
#include <string.h>

#include "gp/imageref.h"
#include "test.h"

#define D64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void
test_good(void)
{
    static const struct { const char *s, *repo, *tag, *digest; } ok[] = {
        {"127.0.0.1:5000/test/busybox:1", "127.0.0.1:5000/test/busybox", "1", ""},
        {"registry.example/a/b/c", "registry.example/a/b/c", "", ""},
        {"localhost/x", "localhost/x", "", ""},
        {"reg.io/my_org/my-img__v2:v1.0-rc_1", "reg.io/my_org/my-img__v2", "v1.0-rc_1", ""},
        {"reg.io/a@sha256:" D64, "reg.io/a", "", "sha256:" D64},
        {"reg.io:443/a/b:t@sha256:" D64, "reg.io:443/a/b", "t", "sha256:" D64},
    };
    gp_image_ref r;
    char         why[128];

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        gp_err rc = gp_image_ref_parse(ok[i].s, &r, why, sizeof(why));

        T_OKM(rc == GP_EOK && strcmp(r.repo, ok[i].repo) == 0 && strcmp(r.tag, ok[i].tag) == 0 &&
                  strcmp(r.digest, ok[i].digest) == 0,
              "%s: repo %s tag '%s' digest '%s' (rc %d: %s; got %s '%s' '%s')", ok[i].s,
              ok[i].repo, ok[i].tag, ok[i].digest, (int)rc, rc ? why : "", r.repo, r.tag,
              r.digest);
    }
}

static void
test_bad(void)
{
    static const char *const bad[] = {
        "", "busybox", "library/busybox:1", "docker://reg.io/a", "oci:/tmp/x",
        "reg.io/", "reg.io/A", "reg.io/a/", "reg.io/a..b", "reg.io/a-", "reg.io/a:",
        "reg.io/a:-x", "reg.io/a:t!", "reg.io/a@sha256:abc", "reg.io/a@md5:" D64,
        "reg.io/a@sha256:" D64 "0", "reg.io/a b", "reg.io//a", ".io/a", "reg.io/a___b",
        "reg:/a", "reg:123456/a", "reg:12a/a",
    };
    gp_image_ref r;
    char         why[128];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why[0] = '\0';
        T_OKM(gp_image_ref_parse(bad[i], &r, why, sizeof(why)) == GP_EINVAL && why[0] != '\0',
              "'%s' is refused with a reason (%s)", bad[i], why);
    }
    T_OK(gp_image_digest_ok("sha256:" D64));
    T_OK(!gp_image_digest_ok("sha256:" D64 "a"));
    T_OK(!gp_image_digest_ok("sha256:" "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"));
}

int
main(void)
{
    test_good();
    test_bad();
    return T_DONE();
}
