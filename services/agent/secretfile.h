/* secretfile.h -- an attempt's tenant secrets (RunAttempt.secrets) as the
 * files their users read: the registry credential as the docker config
 * JSON skopeo's --src-authfile reads (in the agent's own 0700 pull folder,
 * removed once the pull ends), the SSH public key and the checkpoint
 * credentials in the attempt's report folder (/run/gridpool in the
 * container), owned by the container's root id, mode 0600.  A secret never
 * goes on a command line (every `ps` shows one) nor into a log line.
 *
 * secretfile_auth_json is pure; the writers do file I/O only.  Any thread. */
#ifndef GP_AGENT_SECRETFILE_H
#define GP_AGENT_SECRETFILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gp/buf.h"
#include "gp/err.h"

/* The container's paths of the files in /run/gridpool, and their variables. */
#define SECRETFILE_SSH        "ssh_authorized_keys"
#define SECRETFILE_CHECKPOINT "checkpoint_credentials"

/* The registry credential v (n bytes) for host (host[:port]) as a docker
 * config JSON into out: v is either a docker config JSON itself (its
 * first non-blank byte '{': passed as it is) or "user:password" (user not
 * empty, no control characters), which becomes
 * {"auths":{"<host>":{"auth":"<base64 of user:password>"}}}.  INVAL with
 * why (never quoting v) otherwise.  The caller zeroes out after use. */
gp_err secretfile_auth_json(const uint8_t *v, size_t n, const char *host, gp_buf *out,
                            char *why, size_t wn);

/* Writes n bytes to path: created new (O_EXCL, never through a link),
 * mode 0600, then owned by uid:gid when uid is not (uid_t)-1.  An error
 * removes what it made.  0, or -1 with errno. */
int    secretfile_write(const char *path, const void *p, size_t n, uid_t uid, gid_t gid);

#endif
