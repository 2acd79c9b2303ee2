/* secretfile_test.c -- an attempt's secrets as files
 * (services/agent/secretfile.c): the registry credential as a docker
 * config JSON skopeo reads ("user:password" base64'd under its host, a
 * JSON given as is), refusals that never quote the secret, and the writer:
 * a new file, 0600, never through a link, removed on failure. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../services/agent/secretfile.h"
#include "test.h"

static gp_err
auth(const char *v, const char *host, gp_buf *b, char *why, size_t wn)
{
    b->n = 0;
    why[0] = '\0';
    return secretfile_auth_json((const uint8_t *)v, strlen(v), host, b, why, wn);
}

static void
test_auth_json(void)
{
    gp_buf b;
    char   why[200];

    gp_buf_init(&b, 1 << 20);
    T_EQ_INT(auth("robot:s3cr3t", "127.0.0.1:5000", &b, why, sizeof(why)), GP_EOK);
    /* base64("robot:s3cr3t") = cm9ib3Q6czNjcjN0 */
    T_OKM(b.p != NULL && strcmp(b.p, "{\"auths\":{\"127.0.0.1:5000\":{\"auth\":\"cm9ib3Q6czNjcjN0\"}}}\n") == 0,
          "user:password -> auths.<host>.auth = base64 (%s)", b.p ? b.p : "");
    T_EQ_INT(auth("a:b", "r.example", &b, why, sizeof(why)), GP_EOK);
    T_OKM(strstr(b.p, "\"auth\":\"YTpi\"") != NULL, "one-byte padding (%s)", b.p);
    T_EQ_INT(auth("ab:c", "r.example", &b, why, sizeof(why)), GP_EOK);
    T_OKM(strstr(b.p, "\"auth\":\"YWI6Yw==\"") != NULL, "two-byte padding (%s)", b.p);
    T_EQ_INT(auth("u:p\"w\\x", "r.example", &b, why, sizeof(why)), GP_EOK);
    T_OKM(strstr(b.p, "\"auth\":\"dTpwIndceA==\"") != NULL, "quotes and backslashes are base64'd");
    T_EQ_INT(auth(" {\"auths\":{}}", "r.example", &b, why, sizeof(why)), GP_EOK);
    T_OKM(strcmp(b.p, " {\"auths\":{}}") == 0, "a docker config JSON is passed as it is");

    T_EQ_INT(auth("nocolon-s3cr3t", "r.example", &b, why, sizeof(why)), GP_EINVAL);
    T_OKM(strstr(why, "registry_auth") != NULL && strstr(why, "s3cr3t") == NULL,
          "no ':': refused, naming the field, not the secret (%s)", why);
    T_EQ_INT(auth(":s3cr3t", "r.example", &b, why, sizeof(why)), GP_EINVAL);
    T_EQ_INT(auth("u:s3cr3t\n", "r.example", &b, why, sizeof(why)), GP_EINVAL);
    T_OKM(strstr(why, "s3cr3t") == NULL, "a newline inside: refused without quoting it");
    T_EQ_INT(auth("u:p", "", &b, why, sizeof(why)), GP_EINVAL);
    T_EQ_INT(auth("u:p", "r\"x", &b, why, sizeof(why)), GP_EINVAL);
    T_EQ_INT(secretfile_auth_json((const uint8_t *)"", 0, "r.example", &b, why, sizeof(why)),
             GP_EINVAL);
    gp_buf_fini(&b);
}

static void
test_write(void)
{
    char        dir[] = "/tmp/secretfile_test.XXXXXX", path[128], link[128], got[64] = "";
    struct stat st;
    int         fd;

    T_OK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/auth.json", dir);
    T_EQ_INT(secretfile_write(path, "hello", 5, (uid_t)-1, (gid_t)-1), 0);
    T_OKM(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "mode 0600 (%o)", st.st_mode & 0777);
    fd = open(path, O_RDONLY);
    T_OK(fd >= 0 && read(fd, got, sizeof(got)) == 5 && memcmp(got, "hello", 5) == 0);
    if (fd >= 0)
        close(fd);
    T_EQ_INT(secretfile_write(path, "again", 5, (uid_t)-1, (gid_t)-1), -1);
    T_OKM(errno == EEXIST, "an existing file is never overwritten (errno %d)", errno);
    snprintf(link, sizeof(link), "%s/lnk", dir);
    T_OK(symlink("/tmp/secretfile_test_target_nope", link) == 0);
    T_EQ_INT(secretfile_write(link, "x", 1, (uid_t)-1, (gid_t)-1), -1);
    T_OKM(access("/tmp/secretfile_test_target_nope", F_OK) != 0, "a link is never followed");
    if (geteuid() == 0) {
        char p2[140];

        snprintf(p2, sizeof(p2), "%s/owned", dir);
        T_EQ_INT(secretfile_write(p2, "k", 1, 4242, 4243), 0);
        T_OKM(stat(p2, &st) == 0 && st.st_uid == 4242 && st.st_gid == 4243,
              "owned by the container's root id (%u:%u)", st.st_uid, st.st_gid);
        unlink(p2);
    } else {
        snprintf(path, sizeof(path), "%s/notmine", dir);
        T_EQ_INT(secretfile_write(path, "k", 1, 4242, 4243), -1);
        T_OKM(access(path, F_OK) != 0, "a failed chown removes the file");
    }
    snprintf(path, sizeof(path), "%s/auth.json", dir);
    unlink(path);
    unlink(link);
    T_OK(rmdir(dir) == 0);
}

int
main(void)
{
    test_auth_json();
    test_write();
    return T_DONE();
}
