/* proc.c -- the node tools as watched children (proc.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gp/clock.h"
#include "gp/limits.h"
#include "proc.h"

extern char **environ;

struct proc {
    ev_child      w;
    proc_done_fn *cb;
    void         *arg;
    char          out[512];
};

/* The tools get a minimal environment: PATH and HOME of their own, never
 * the agent's (its NATS identity among them). */
static char *const tool_env[] = {(char *)"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                 (char *)"HOME=/root", (char *)"LC_ALL=C", NULL};

static pid_t spawn_with(char *const argv[], char *const envp[], const char *in, const char *out,
                        int out_fd);

pid_t
proc_spawn_fd(char *const argv[], int out_fd)
{
    return spawn_with(argv, NULL, NULL, NULL, out_fd);
}

static pid_t
spawn_with(char *const argv[], char *const envp[], const char *in, const char *out, int out_fd)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t          at;
    sigset_t                   none, all;
    pid_t                      pid = -1;
    int                        rc;

    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_addopen(&fa, 0, in ? in : "/dev/null", O_RDONLY, 0);
    if (out_fd >= 0) {
        posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
        posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
    } else {
        posix_spawn_file_actions_addopen(&fa, 1, out ? out : "/dev/null",
                                         O_WRONLY | O_CREAT | O_TRUNC, 0600);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
    }
    /* nothing of the agent's (its NATS socket, its files) reaches a tool
     * or, through the runtime, a container: glibc 2.34+ */
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
    rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, envp ? envp : tool_env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return pid;
}

bool
strfmt(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;
    int     k;

    va_start(ap, fmt);
    k = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    return k >= 0 && (size_t)k < n;
}

void
proc_tail(const char *path, char *out, size_t n)
{
    char    buf[1024];
    ssize_t k = 0;
    int     fd = open(path, O_RDONLY | O_CLOEXEC);
    off_t   end;
    char   *e, *s;

    out[0] = '\0';
    if (fd < 0)
        return;
    end = lseek(fd, 0, SEEK_END);
    if (end > 0)
        k = pread(fd, buf, sizeof(buf) - 1, end > (off_t)sizeof(buf) - 1 ? end - (off_t)sizeof(buf) + 1 : 0);
    close(fd);
    if (k <= 0)
        return;
    buf[k] = '\0';
    for (e = buf + k; e > buf && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' '); e--)
        ;
    *e = '\0';
    s = strrchr(buf, '\n');
    s = s ? s + 1 : buf;
    snprintf(out, n, "%s", s);
}

static void
child_cb(struct ev_loop *loop, ev_child *w, int revents)
{
    proc *p = GP_CONTAINER_OF(w, proc, w);
    char  tail[256] = "";

    (void)revents;
    ev_child_stop(loop, w);
    if (p->cb != NULL) {
        if (p->out[0] != '\0')
            proc_tail(p->out, tail, sizeof(tail));
        p->cb(p->arg, w->rstatus, tail);
    }
    free(p);
}

gp_err
proc_run(struct ev_loop *loop, char *const argv[], const char *out, proc_done_fn *cb, void *arg,
         proc **pp)
{
    return proc_run_env(loop, argv, NULL, NULL, out, cb, arg, pp);
}

gp_err
proc_run_env(struct ev_loop *loop, char *const argv[], char *const envp[], const char *in_path,
             const char *out, proc_done_fn *cb, void *arg, proc **pp)
{
    proc *p = calloc(1, sizeof(*p));
    pid_t pid;

    if (pp != NULL)
        *pp = NULL;
    if (p == NULL)
        return GP_ENOMEM;
    p->cb = cb;
    p->arg = arg;
    snprintf(p->out, sizeof(p->out), "%s", out ? out : "");
    pid = spawn_with(argv, envp, in_path, out, -1);
    if (pid < 0) {
        free(p);
        return GP_EINTERNAL;
    }
    ev_child_init(&p->w, child_cb, pid, 0);
    ev_child_start(loop, &p->w);
    if (pp != NULL)
        *pp = p;
    return GP_EOK;
}

void
proc_cancel(proc *p)
{
    if (p == NULL)
        return;
    p->cb = NULL;
    kill(-p->w.pid, SIGKILL);
}

int
proc_run_sync(char *const argv[], unsigned timeout_ms)
{
    return proc_run_sync_env(argv, NULL, timeout_ms);
}

int
proc_run_sync_env(char *const argv[], char *const envp[], unsigned timeout_ms)
{
    pid_t    pid = spawn_with(argv, envp, NULL, NULL, -1);
    uint64_t end = gp_mono_ms() + timeout_ms;
    int      st;

    if (pid < 0)
        return -1;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);

        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        if (r < 0 && errno != EINTR)
            return -1;
        if (gp_mono_ms() >= end) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(10000);
    }
}
