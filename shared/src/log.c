/* log.c -- structured log lines (see gp/log.h). */
#include "gp/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "gp/cfg.h"
#include "gp/limits.h"

/* Written once by gp_log_setup() before any thread starts; read-only after. */
static struct {
    char         service[32];
    gp_log_level level;
    int          fd;
} log_cfg = {"gridpool", GP_LOG_INFO, 2};

static const char *const level_name[] = {"debug", "info", "warn", "error"};

int
gp_log_parse_level(const char *s, gp_log_level *out)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, level_name[i]) == 0) {
            *out = (gp_log_level)i;
            return 0;
        }
    }
    return -1;
}

void
gp_log_setup(const char *service, const char *level, int fd)
{
    gp_log_level lvl = GP_LOG_INFO;

    if (service != NULL)
        snprintf(log_cfg.service, sizeof(log_cfg.service), "%s", service);
    if (level != NULL && gp_log_parse_level(level, &lvl) == 0)
        log_cfg.level = lvl;
    if (fd >= 0)
        log_cfg.fd = fd;
}

int
gp_log_enabled(gp_log_level lvl)
{
    return lvl >= log_cfg.level;
}

void
gp_log(gp_log_level lvl, const char *event, const char *fmt, ...)
{
    char           line[GP_LOG_LINE];
    char           fields[GP_LOG_LINE];
    struct timeval tv;
    struct tm      tm;
    size_t         n;
    int            len;
    va_list        ap;

    if (!gp_log_enabled(lvl))
        return;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    n = strftime(line, sizeof(line), "ts=%Y-%m-%dT%H:%M:%S", &tm);
    len = snprintf(line + n, sizeof(line) - n, ".%03dZ level=%s svc=%s event=%s ",
                   (int)(tv.tv_usec / 1000), level_name[lvl], log_cfg.service, event);
    if (len > 0)
        n += (size_t)len < sizeof(line) - n ? (size_t)len : sizeof(line) - n - 1;
    va_start(ap, fmt);
    len = vsnprintf(fields, sizeof(fields), fmt, ap);
    va_end(ap);
    /* Credentials never reach a log: a URL's password or token, a
     * conninfo's password=... (gp_cfg_mask). */
    if (len > 0)
        n += gp_cfg_mask(fields, line + n, sizeof(line) - n);
    /* One event, one line: a newline inside a value would forge a line. */
    for (size_t i = 0; i < n; i++)
        if (line[i] == '\n' || line[i] == '\r')
            line[i] = ' ';
    if (n >= sizeof(line) - 1)
        n = sizeof(line) - 2;
    line[n++] = '\n';
    (void)!write(log_cfg.fd, line, n);
}
