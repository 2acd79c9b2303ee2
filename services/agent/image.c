/* image.c -- the node's image cache (image.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "gp/imageref.h"
#include "gp/limits.h"
#include "gp/log.h"
#include "image.h"
#include "proc.h"
#include "secretfile.h"

struct img_pull {
    const img_cfg  *c;
    struct ev_loop *loop;
    gp_image_ref    ref;
    char            id[128];
    char            pull[512];          /* <state>/pull/<id> */
    char            digest[72];
    char            dir[512];           /* <state>/images/<hex> */
    char            authfile[540];      /* <pull>/auth.json while skopeo runs, or "" */
    bool            had_auth;           /* pulled with a credential: the copy is private */
    img_done_fn    *cb;
    void           *arg;
    proc           *child;
    ev_timer        later;              /* a cached digest: the answer on the next loop turn */
};

/* ---- a JSON document (libyaml reads JSON: it is YAML's flow style) ---------- */

static bool
doc_load(const char *path, yaml_document_t *d)
{
    yaml_parser_t p;
    FILE         *f = fopen(path, "rb");
    bool          ok;

    if (f == NULL)
        return false;
    if (!yaml_parser_initialize(&p)) {
        fclose(f);
        return false;
    }
    yaml_parser_set_input_file(&p, f);
    ok = yaml_parser_load(&p, d) && yaml_document_get_root_node(d) != NULL;
    if (!ok && yaml_document_get_root_node(d) == NULL)
        yaml_document_delete(d);
    yaml_parser_delete(&p);
    fclose(f);
    return ok;
}

/* The value under key in a mapping node; NULL if none. */
static yaml_node_t *
doc_get(yaml_document_t *d, yaml_node_t *map, const char *key)
{
    if (map == NULL || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start;
         pr < map->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = yaml_document_get_node(d, pr->key);

        if (k != NULL && k->type == YAML_SCALAR_NODE &&
            strcmp((const char *)k->data.scalar.value, key) == 0)
            return yaml_document_get_node(d, pr->value);
    }
    return NULL;
}

static const char *
doc_str(yaml_node_t *n)
{
    return n != NULL && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* Appends the scalars of a sequence node to v (owned copies). */
static int
doc_strs(yaml_document_t *d, yaml_node_t *seq, char **v, int n, int max)
{
    if (seq == NULL || seq->type != YAML_SEQUENCE_NODE)
        return n;
    for (yaml_node_item_t *it = seq->data.sequence.items.start;
         it < seq->data.sequence.items.top && n < max; it++) {
        const char *s = doc_str(yaml_document_get_node(d, *it));

        if (s != NULL && (v[n] = strdup(s)) != NULL)
            n++;
    }
    return n;
}

/* "sha256:<hex>" of a descriptor (index entry or manifest config). */
static bool
blob_path(const char *layout, yaml_document_t *d, yaml_node_t *desc, char *out, size_t n)
{
    const char *dg = doc_str(doc_get(d, desc, "digest"));

    if (dg == NULL || !gp_image_digest_ok(dg))
        return false;
    strfmt(out, n, "%s/blobs/sha256/%s", layout, dg + 7);
    return true;
}

/* The image's config blob, found through index.json and the manifest. */
static bool
config_blob(const char *layout, char *out, size_t n)
{
    yaml_document_t d;
    char            path[640];
    bool            ok;

    strfmt(path, sizeof(path), "%s/index.json", layout);
    if (!doc_load(path, &d))
        return false;
    yaml_node_t *ms = doc_get(&d, yaml_document_get_root_node(&d), "manifests");

    ok = ms != NULL && ms->type == YAML_SEQUENCE_NODE &&
         ms->data.sequence.items.top > ms->data.sequence.items.start &&
         blob_path(layout, &d, yaml_document_get_node(&d, *ms->data.sequence.items.start), path,
                   sizeof(path));
    yaml_document_delete(&d);
    if (!ok || !doc_load(path, &d))
        return false;
    ok = blob_path(layout, &d, doc_get(&d, yaml_document_get_root_node(&d), "config"), out, n);
    yaml_document_delete(&d);
    return ok;
}

void
img_config_free(img_config *c)
{
    for (int i = 0; i < c->nargs; i++)
        free(c->args[i]);
    for (int i = 0; i < c->nenv; i++)
        free(c->env[i]);
    memset(c, 0, sizeof(*c));
}

/* image.json (the OCI image config) for entrypoint, cmd, env and workdir;
 * umoci's config.json for the user, which umoci resolved against the
 * image's own /etc/passwd. */
gp_err
img_config_read(const char *dir, img_config *out, char *why, size_t n)
{
    yaml_document_t d;
    char            path[640];
    yaml_node_t    *cfg, *user;
    const char     *s;

    memset(out, 0, sizeof(*out));
    strfmt(path, sizeof(path), "%s/image.json", dir);
    if (!doc_load(path, &d)) {
        strfmt(why, n, "image config %s unreadable", path);
        return GP_EINTERNAL;
    }
    cfg = doc_get(&d, yaml_document_get_root_node(&d), "config");
    out->nargs = doc_strs(&d, doc_get(&d, cfg, "Entrypoint"), out->args, 0, IMG_ARGS_MAX);
    out->nentry = out->nargs;
    out->nargs = doc_strs(&d, doc_get(&d, cfg, "Cmd"), out->args, out->nargs, IMG_ARGS_MAX);
    out->nenv = doc_strs(&d, doc_get(&d, cfg, "Env"), out->env, 0, IMG_ENV_MAX);
    s = doc_str(doc_get(&d, cfg, "WorkingDir"));
    strfmt(out->cwd, sizeof(out->cwd), "%s", s != NULL && s[0] == '/' ? s : "/");
    yaml_document_delete(&d);
    strfmt(path, sizeof(path), "%s/config.json", dir);
    if (!doc_load(path, &d)) {
        strfmt(why, n, "umoci's config %s unreadable", path);
        img_config_free(out);
        return GP_EINTERNAL;
    }
    user = doc_get(&d, doc_get(&d, yaml_document_get_root_node(&d), "process"), "user");
    s = doc_str(doc_get(&d, user, "uid"));
    out->uid = s ? (uint32_t)strtoul(s, NULL, 10) : 0;
    s = doc_str(doc_get(&d, user, "gid"));
    out->gid = s ? (uint32_t)strtoul(s, NULL, 10) : 0;
    yaml_document_delete(&d);
    return GP_EOK;
}

/* ---- the pull ------------------------------------------------------------------ */

/* The credential's file goes the moment skopeo no longer needs it. */
static void
auth_drop(img_pull *p)
{
    if (p->authfile[0] != '\0' && unlink(p->authfile) != 0 && errno != ENOENT)
        GP_WARN("authfile_not_removed", "path=%s err=%s", p->authfile, strerror(errno));
    p->authfile[0] = '\0';
}

static void
finish(img_pull *p, gp_err rc, const char *why)
{
    char *rm[] = {(char *)"rm", (char *)"-rf", p->pull, NULL};

    auth_drop(p);
    ev_timer_stop(p->loop, &p->later);
    if (p->pull[0] != '\0')
        proc_run(p->loop, rm, NULL, NULL, NULL, NULL);
    p->cb(p->arg, rc, why, p->digest, p->dir);
    free(p);
}

static bool
insecure(const img_cfg *c, const char *host)
{
    size_t      k = strlen(host);
    const char *s = c->insecure;

    while (s != NULL && *s != '\0') {
        size_t w = strcspn(s, ",");

        if (w == k && strncmp(s, host, k) == 0)
            return true;
        s += w + (s[w] == ',');
    }
    return false;
}

static void
cached_dir(const img_cfg *c, const char *digest, char *out, size_t n)
{
    strfmt(out, n, "%s/images/%s", c->state_dir, digest + 7);
}

/* Mount points the runtime needs and a read-only root cannot get later.
 * The image's own entries are never followed: a link where a mount point
 * goes (run -> /var/run) would point mkdir at the node's own folders. */
static void
mountpoints(const char *bundle)
{
    static const char *const dirs[] = {"proc", "dev", "sys", "tmp", "scratch", "checkpoint", "run"};
    char path[640];
    int  root, run;

    strfmt(path, sizeof(path), "%s/rootfs", bundle);
    if ((root = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return;
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
        (void)mkdirat(root, dirs[i], 0755);   /* EEXIST (a dir, or a link runc resolves) is fine */
    run = openat(root, "run", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (run >= 0) {
        (void)mkdirat(run, "gridpool", 0755);
        close(run);
    }
    /* /etc/resolv.conf: where the node's resolver is bound (a link of the
     * image's is left alone: the runtime resolves it inside the rootfs) */
    (void)mkdirat(root, "etc", 0755);
    run = openat(root, "etc", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (run >= 0) {
        int fd = openat(run, "resolv.conf", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        0644);

        if (fd >= 0)
            close(fd);
        close(run);
    }
    close(root);
}

static bool
is_cached(const char *dir)
{
    char path[640];

    strfmt(path, sizeof(path), "%s/image.json", dir);
    if (access(path, R_OK) != 0)
        return false;
    utimensat(AT_FDCWD, dir, NULL, 0);      /* in use: img_gc keeps the newest */
    mountpoints(dir);                       /* one added since it was unpacked */
    return true;
}

/* A copy pulled with a credential is marked: a later attempt that finds it
 * in the cache (any tenant's, by digest) may run it only once the registry
 * has let that attempt's own credential read its manifest (checked()). */
#define PRIVATE_MARK "private"

static int
mark_private(const char *dir)
{
    char path[640];
    int  fd;

    strfmt(path, sizeof(path), "%s/" PRIVATE_MARK, dir);
    fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    return fd >= 0 ? close(fd) : -1;
}

static bool
is_private(const char *dir)
{
    char path[640];

    strfmt(path, sizeof(path), "%s/" PRIVATE_MARK, dir);
    return access(path, F_OK) == 0;
}

/* Its size for img_gc's bound, once, in the background (du reads the
 * whole tree: not on the loop). */
static void
measure(img_pull *p)
{
    char *argv[] = {(char *)"sh", (char *)"-c",
                    (char *)"du -sk \"$0\" | cut -f1 >\"$0/size_kb.tmp\" && mv \"$0/size_kb.tmp\" \"$0/size_kb\"",
                    p->dir, NULL};

    proc_run(p->loop, argv, NULL, NULL, NULL, NULL);
}

static void
unpacked(void *arg, int status, const char *tail)
{
    img_pull *p = arg;
    char      bundle[640], layout[640], blob[700], json[700], why[320];

    p->child = NULL;
    strfmt(bundle, sizeof(bundle), "%s/bundle", p->pull);
    strfmt(layout, sizeof(layout), "%s/oci", p->pull);
    if (status != 0) {
        strfmt(why, sizeof(why), "image %s: unpack failed: %s", p->ref.repo, tail);
        finish(p, GP_EINTERNAL, why);
        return;
    }
    strfmt(json, sizeof(json), "%s/image.json", bundle);
    if (!config_blob(layout, blob, sizeof(blob)) || rename(blob, json) != 0) {
        strfmt(why, sizeof(why), "image %s: no readable image config in the pulled layout",
                 p->ref.repo);
        finish(p, GP_EINTERNAL, why);
        return;
    }
    mountpoints(bundle);
    chmod(bundle, 0711);                 /* umoci's 0700: the containers pass through */
    if (p->had_auth && mark_private(bundle) != 0) {
        finish(p, GP_EINTERNAL, "image: cannot mark the cached copy private");
        return;
    }
    /* another attempt may have unpacked the same digest meanwhile: its
     * copy stays, ours goes with the pull folder */
    if (rename(bundle, p->dir) != 0 && errno != ENOTEMPTY && errno != EEXIST) {
        strfmt(why, sizeof(why), "image %s: cannot store in %s: %s", p->ref.repo, p->dir,
                 strerror(errno));
        finish(p, GP_EINTERNAL, why);
        return;
    }
    measure(p);
    finish(p, GP_EOK, "");
}

static void
pulled(void *arg, int status, const char *tail)
{
    img_pull *p = arg;
    char      path[640], why[400], out[640], img[660], bundle[640];
    FILE     *f;

    p->child = NULL;
    auth_drop(p);
    if (status != 0) {
        strfmt(why, sizeof(why), "image %s: pull failed: %s",
                 p->ref.digest[0] ? p->ref.digest : p->ref.repo, tail);
        finish(p, GP_ENOTFOUND, why);
        return;
    }
    strfmt(path, sizeof(path), "%s/digest", p->pull);
    f = fopen(path, "r");
    if (f == NULL || fscanf(f, "%71s", p->digest) != 1 || !gp_image_digest_ok(p->digest)) {
        if (f != NULL)
            fclose(f);
        p->digest[0] = '\0';
        finish(p, GP_EINTERNAL, "image: skopeo wrote no digest");
        return;
    }
    fclose(f);
    if (p->ref.digest[0] != '\0' && strcmp(p->ref.digest, p->digest) != 0) {
        strfmt(why, sizeof(why), "image %s: digest mismatch: the registry gave %s",
                 p->ref.digest, p->digest);
        finish(p, GP_EINVAL, why);
        return;
    }
    cached_dir(p->c, p->digest, p->dir, sizeof(p->dir));
    if (is_cached(p->dir)) {
        finish(p, GP_EOK, "");
        return;
    }
    strfmt(img, sizeof(img), "%s/oci:img", p->pull);
    strfmt(bundle, sizeof(bundle), "%s/bundle", p->pull);
    strfmt(out, sizeof(out), "%s/unpack.log", p->pull);
    char *argv[] = {(char *)p->c->umoci, (char *)"--log", (char *)"error", (char *)"unpack",
                    (char *)"--image", img, bundle, NULL};

    if (proc_run(p->loop, argv, out, unpacked, p, &p->child) != GP_EOK)
        finish(p, GP_EINTERNAL, "image: cannot run umoci");
}

/* The attempt's credential (NULL: none) as skopeo's authfile in the pull
 * folder, 0600; auth_drop removes it. */
static gp_err
authfile_write(img_pull *p, const char *auth)
{
    if (auth == NULL)
        return GP_EOK;
    strfmt(p->authfile, sizeof(p->authfile), "%s/auth.json", p->pull);
    if (secretfile_write(p->authfile, auth, strlen(auth), (uid_t)-1, (gid_t)-1) != 0) {
        p->authfile[0] = '\0';
        return GP_EINTERNAL;
    }
    return GP_EOK;
}

static void
checked(void *arg, int status, const char *tail)
{
    img_pull *p = arg;
    char      why[400];

    p->child = NULL;
    auth_drop(p);
    if (status != 0) {
        strfmt(why, sizeof(why), "image %s: the registry refused this attempt's credential for "
               "a private image: %s", p->digest, tail);
        finish(p, GP_ENOTFOUND, why);
        return;
    }
    finish(p, GP_EOK, "");
}

/* skopeo inspect --raw: the manifest only, with the attempt's own
 * credential (none: the registry must serve it anonymously). */
static gp_err
check_start(img_pull *p, const char *auth)
{
    char  src[GP_IMAGE_REF_MAX + 96], out[600];
    char *argv[10];
    int   k = 0;

    if (authfile_write(p, auth) != GP_EOK)
        return GP_EINTERNAL;
    strfmt(src, sizeof(src), "docker://%s@%s", p->ref.repo, p->digest);
    strfmt(out, sizeof(out), "%s/check.log", p->pull);
    argv[k++] = (char *)p->c->skopeo;
    argv[k++] = (char *)"inspect";
    argv[k++] = (char *)"--raw";
    if (insecure(p->c, p->ref.host))
        argv[k++] = (char *)"--tls-verify=false";
    if (p->authfile[0] != '\0') {
        argv[k++] = (char *)"--authfile";
        argv[k++] = p->authfile;
    }
    argv[k++] = src;
    argv[k] = NULL;
    return proc_run(p->loop, argv, out, checked, p, &p->child);
}

static void
later_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    img_pull *p = GP_CONTAINER_OF(w, img_pull, later);

    (void)loop;
    (void)revents;
    finish(p, GP_EOK, "");
}

static gp_err
pull_start(img_pull *p, const char *auth)
{
    char src[GP_IMAGE_REF_MAX + 16], dst[600], dg[600], out[600], name[GP_IMAGE_REF_MAX + 1];
    char *argv[14];
    int   k = 0;

    if (authfile_write(p, auth) != GP_EOK)
        return GP_EINTERNAL;
    p->had_auth = auth != NULL;

    strfmt(name, sizeof(name), "%s%s%s%s%s", p->ref.repo, p->ref.tag[0] ? ":" : "", p->ref.tag,
             p->ref.digest[0] ? "@" : "", p->ref.digest);
    strfmt(src, sizeof(src), "docker://%s", name);
    strfmt(dst, sizeof(dst), "oci:%s/oci:img", p->pull);
    strfmt(dg, sizeof(dg), "%s/digest", p->pull);
    strfmt(out, sizeof(out), "%s/pull.log", p->pull);
    argv[k++] = (char *)p->c->skopeo;
    argv[k++] = (char *)"copy";
    argv[k++] = (char *)"--quiet";
    if (insecure(p->c, p->ref.host))
        argv[k++] = (char *)"--src-tls-verify=false";
    if (p->authfile[0] != '\0') {
        argv[k++] = (char *)"--src-authfile";
        argv[k++] = p->authfile;
    }
    argv[k++] = (char *)"--digestfile";
    argv[k++] = dg;
    argv[k++] = src;
    argv[k++] = dst;
    argv[k] = NULL;
    return proc_run(p->loop, argv, out, pulled, p, &p->child);
}

/* images/ is 0711: a container's root, inside a user namespace, is an
 * id of its own range and must pass through to the rootfs it runs from
 * (by path only: it cannot list the cache).  pull/ is the agent's. */
static int
mkdirs(const char *imgs, const char *pulls)
{
    return (mkdir(imgs, 0711) == 0 || errno == EEXIST) && chmod(imgs, 0711) == 0 &&
                   (mkdir(pulls, 0700) == 0 || errno == EEXIST)
               ? 0 : -1;
}

gp_err
img_get(const img_cfg *c, struct ev_loop *loop, const char *ref, const char *id, const char *auth,
        img_done_fn *cb, void *arg, img_pull **out)
{
    img_pull *p = calloc(1, sizeof(*p));
    char      why[160], pulls[512], imgs[512];
    char     *rm[4];

    *out = NULL;
    if (p == NULL)
        return GP_ENOMEM;
    if (gp_image_ref_parse(ref, &p->ref, why, sizeof(why)) != GP_EOK) {
        free(p);
        return GP_EINVAL;
    }
    *p = (img_pull){.c = c, .loop = loop, .ref = p->ref, .cb = cb, .arg = arg};
    strfmt(p->id, sizeof(p->id), "%s", id);
    ev_timer_init(&p->later, later_cb, 0, 0);
    strfmt(imgs, sizeof(imgs), "%s/images", c->state_dir);
    strfmt(pulls, sizeof(pulls), "%s/pull", c->state_dir);
    if (mkdirs(imgs, pulls) != 0) {
        free(p);
        return GP_EINTERNAL;
    }
    bool check = false;

    if (p->ref.digest[0] != '\0') {
        strfmt(p->digest, sizeof(p->digest), "%s", p->ref.digest);
        cached_dir(c, p->digest, p->dir, sizeof(p->dir));
        if (is_cached(p->dir) && !(check = is_private(p->dir))) {
            ev_timer_start(loop, &p->later);
            *out = p;
            return GP_EOK;
        }
        if (!check)
            p->digest[0] = '\0';
    }
    strfmt(p->pull, sizeof(p->pull), "%s/%s", pulls, id);
    rm[0] = (char *)"rm", rm[1] = (char *)"-rf", rm[2] = p->pull, rm[3] = NULL;
    if (proc_run_sync(rm, 5000) != 0 || mkdir(p->pull, 0700) != 0 ||
        (check ? check_start(p, auth) : pull_start(p, auth)) != GP_EOK) {
        auth_drop(p);
        free(p);
        return GP_EINTERNAL;
    }
    *out = p;
    return GP_EOK;
}

void
img_cancel(img_pull *p)
{
    char *rm[] = {(char *)"rm", (char *)"-rf", p ? p->pull : NULL, NULL};

    if (p == NULL)
        return;
    ev_timer_stop(p->loop, &p->later);
    proc_cancel(p->child);
    auth_drop(p);
    if (p->pull[0] != '\0')
        proc_run(p->loop, rm, NULL, NULL, NULL, NULL);
    free(p);
}

/* ---- garbage collection ------------------------------------------------------------ */

typedef struct gc_ent {
    char     name[80];
    time_t   mtime;
    uint64_t kb;
} gc_ent;

static uint64_t
size_kb(const char *dir)
{
    char               path[700];
    FILE              *f;
    unsigned long long kb = 0;

    strfmt(path, sizeof(path), "%s/size_kb", dir);
    if ((f = fopen(path, "r")) != NULL) {
        if (fscanf(f, "%llu", &kb) != 1)
            kb = 0;
        fclose(f);
    }
    return kb;
}

static int
gc_newest_first(const void *a, const void *b)
{
    const gc_ent *x = a, *y = b;

    return x->mtime < y->mtime ? 1 : x->mtime > y->mtime ? -1 : 0;
}

void
img_gc(const img_cfg *c, struct ev_loop *loop, const char *const *used, int nused)
{
    char    dir[512], path[640];
    gc_ent  e[256];
    int     n = 0;
    uint64_t total = 0;                  /* the newest ones' sizes so far */
    DIR    *d;
    struct dirent *de;
    struct stat st;

    strfmt(dir, sizeof(dir), "%s/images", c->state_dir);
    if ((d = opendir(dir)) == NULL)
        return;
    while ((de = readdir(d)) != NULL && n < (int)(sizeof(e) / sizeof(e[0]))) {
        bool in_use = false;

        if (strlen(de->d_name) != 64)
            continue;
        for (int i = 0; i < nused && !in_use; i++)
            in_use = used[i] != NULL && strlen(used[i]) == 71 && strcmp(used[i] + 7, de->d_name) == 0;
        strfmt(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (in_use || stat(path, &st) != 0)
            continue;
        strfmt(e[n].name, sizeof(e[n].name), "%s", de->d_name);
        e[n].kb = size_kb(path);
        e[n++].mtime = st.st_mtime;
    }
    closedir(d);
    qsort(e, (size_t)n, sizeof(e[0]), gc_newest_first);
    for (int i = 0; i < n; i++) {
        char  gone[700];
        char *rm[] = {(char *)"rm", (char *)"-rf", gone, NULL};

        total += e[i].kb;
        if (i < (int)c->keep && (c->cache_kb == 0 || total <= c->cache_kb))
            continue;

        /* renamed first: a pull that checks the cache from now on misses it */
        strfmt(path, sizeof(path), "%s/%s", dir, e[i].name);
        strfmt(gone, sizeof(gone), "%s/gc-%s", dir, e[i].name);
        if (rename(path, gone) != 0)
            continue;
        GP_INFO("image_removed", "digest=sha256:%s kb=%llu reason=%s", e[i].name,
                (unsigned long long)e[i].kb, i >= (int)c->keep ? "image-keep" : "image-cache-mb");
        proc_run(loop, rm, NULL, NULL, NULL, NULL);
    }
}
