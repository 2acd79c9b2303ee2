/* gp/imageref.h -- the one reader of container image references, shared by
 * the scheduler (refused at submit) and the agent (what it hands skopeo).
 *
 * Grammar (the distribution reference's, narrowed to what gridpool pulls):
 *   HOST "/" PATH [":" TAG] ["@sha256:" 64 lower-case hex]
 * HOST is a registry: it has a '.' or a ':' (a port), or is "localhost",
 * so a short Docker Hub name ("busybox") is refused rather than guessed.
 * PATH is components of [a-z0-9] runs joined by one '.', '_', '__' or
 * '-'s, separated by '/'.  TAG is [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}.  No
 * transport prefix ("docker://", "oci:", "dir:"): a tenant never names a
 * path on the node.
 *
 * Pure; any thread. */
#ifndef GP_IMAGEREF_H
#define GP_IMAGEREF_H

#include <stddef.h>

#include "gp/err.h"

#define GP_IMAGE_REF_MAX 255

typedef struct gp_image_ref {
    char host[GP_IMAGE_REF_MAX + 1];          /* "registry.example:5000" */
    char repo[GP_IMAGE_REF_MAX + 1];          /* host + "/" + path, no tag or digest */
    char tag[129];                            /* "" when absent */
    char digest[72];                          /* "sha256:<hex>", "" when absent */
} gp_image_ref;

/* OK with *out filled, or INVAL with why (what is wrong, for the tenant). */
gp_err gp_image_ref_parse(const char *s, gp_image_ref *out, char *why, size_t n);
/* True when s is "sha256:" and 64 lower-case hex digits. */
int    gp_image_digest_ok(const char *s);

#endif
