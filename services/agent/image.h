/* image.h -- the node's image cache: an image is pulled by skopeo into an
 * OCI layout and unpacked by umoci, once per manifest digest, into
 * <state>/images/<hex>/ (rootfs/ and umoci's config.json), which every
 * attempt of that digest shares read-only.  The agent writes no image-layer
 * code.
 *
 * A reference with a digest that is cached needs no registry at all; a
 * tag is resolved by pulling (the copy reuses nothing, the unpack is
 * skipped when the digest is cached).  Concurrent pulls of one digest each
 * unpack into a folder of their own; the first rename wins.  Old digests
 * are removed by img_gc.  Everything runs as watched children (proc.h). */
#ifndef GP_AGENT_IMAGE_H
#define GP_AGENT_IMAGE_H

#include <ev.h>
#include <stdbool.h>
#include <stdint.h>

#include "gp/err.h"

typedef struct img_cfg {
    const char *state_dir;          /* <state>/images, <state>/pull */
    const char *skopeo, *umoci;     /* program names or paths */
    const char *insecure;           /* comma list of host[:port] pulled over plain HTTP */
    unsigned    keep;               /* digests kept by img_gc beyond those in use */
    uint64_t    cache_kb;           /* and at most this much of them (0: no bound) */
} img_cfg;

#define IMG_ARGS_MAX 64
#define IMG_ENV_MAX  64

/* What the image says to run (its OCI config, as umoci wrote it). */
typedef struct img_config {
    char   *args[IMG_ARGS_MAX];     /* entrypoint + cmd; owned */
    int     nargs;
    int     nentry;                 /* how many of args are the entrypoint (args replace the rest) */
    char   *env[IMG_ENV_MAX];       /* owned */
    int     nenv;
    char    cwd[256];
    uint32_t uid, gid;
} img_config;

typedef struct img_pull img_pull;

/* rc OK: digest ("sha256:...") and dir (<state>/images/<hex>, holding
 * rootfs/ and config.json).  Else why, starting "image " (a reason for
 * the tenant: the registry's own words where it gave some). */
typedef void img_done_fn(void *arg, gp_err rc, const char *why, const char *digest,
                         const char *dir);

/* Starts getting ref (gp/imageref.h grammar; checked again here) for an
 * attempt named id (its pull folder).  auth: the registry's credential as
 * a docker config JSON (secretfile.h), or NULL: written to a 0600 file in
 * the pull folder for skopeo's --src-authfile and removed as soon as
 * skopeo ends (never on its command line); copied, the caller zeroes its
 * own.  A digest already cached needs no registry, hence no credential.
 * cb runs later from the loop, never from inside this call. */
gp_err img_get(const img_cfg *c, struct ev_loop *loop, const char *ref, const char *id,
               const char *auth, img_done_fn *cb, void *arg, img_pull **out);
/* The attempt went away: no callback; the child is killed. */
void   img_cancel(img_pull *p);

gp_err img_config_read(const char *dir, img_config *out, char *why, size_t n);
void   img_config_free(img_config *c);

/* Removes cached digests not named in used[]: the oldest (by the folder's
 * mtime, touched at each use) beyond the newest c->keep, or beyond
 * c->cache_kb of them in all (each image's size is measured once, by du,
 * after its unpack: <dir>/size_kb).  Runs rm as children. */
void   img_gc(const img_cfg *c, struct ev_loop *loop, const char *const *used, int nused);

#endif
