/* proc.h -- the node tools the agent runs (skopeo, umoci, the OCI runtime,
 * rm), as children watched by the loop: nothing waits for them.
 *
 * posix_spawn, not fork: the agent has cnats threads, and a forked copy
 * may only call async-signal-safe functions before exec.  Each child gets
 * /dev/null for stdin, its stdout and stderr in a file the caller names
 * (the reason a pull or a start failed is read back from it), its own
 * process group, and default signal dispositions.  The loop must be
 * ev_default_loop (ev_child). */
#ifndef GP_AGENT_PROC_H
#define GP_AGENT_PROC_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "gp/err.h"

typedef struct proc proc;

/* status is waitpid's; tail is the last line the child wrote to its
 * output file ("" if none), for a reason. */
typedef void proc_done_fn(void *arg, int status, const char *tail);

/* Runs argv[0] (a path, or a name looked up in PATH) with argv.  out: the
 * output file (created or truncated; NULL: /dev/null).  cb may be NULL
 * (fire and forget: the child is still reaped).  On OK *p (may be NULL) is
 * the handle until cb has run. */
gp_err proc_run(struct ev_loop *loop, char *const argv[], const char *out, proc_done_fn *cb,
                void *arg, proc **p);
/* proc_run with the child's environment (envp; NULL: the tools' own
 * minimal one) and its stdin from the file in_path (NULL: /dev/null). */
gp_err proc_run_env(struct ev_loop *loop, char *const argv[], char *const envp[],
                    const char *in_path, const char *out, proc_done_fn *cb, void *arg, proc **p);
/* Starts argv with stdout and stderr on out_fd (closed in the child's
 * copy only), its own process group; the caller watches the pid.  -1 with
 * errno. */
pid_t  proc_spawn_fd(char *const argv[], int out_fd);
/* The caller no longer wants cb: the child is killed (its group,
 * SIGKILL) and reaped without a call.  NULL ok. */
void   proc_cancel(proc *p);
/* Runs argv and waits for it, at most timeout_ms (then SIGKILL): for
 * teardown only, when the loop will not run again.  Its exit status, or
 * -1. */
int    proc_run_sync(char *const argv[], unsigned timeout_ms);
/* The same with the child's environment. */
int    proc_run_sync_env(char *const argv[], char *const envp[], unsigned timeout_ms);
/* snprintf for paths and reasons, which the agent's sizes keep short of
 * n (state-dir is at most 255 bytes, ids 63): false if it was cut.  Not
 * inlined, so gcc does not guess at truncation that cannot happen. */
bool   strfmt(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The last non-empty line of the file (at most n-1 bytes of it). */
void   proc_tail(const char *path, char *out, size_t n);

#endif
